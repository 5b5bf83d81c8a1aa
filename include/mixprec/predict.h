/* mixprec/predict.h: use a model trained on user data (docs/data.md).
 *
 * A predictor is the model of one checkpoint of a world_model, classifier
 * or regressor run on user data (data.path or mxp_run_options.data), with
 * what the checkpoint records to use it without the training data
 * (metadata "workload_meta": widths and the world model's standardisation
 * statistics). It evaluates on arrays, predicts in the data's own units,
 * and exports the weights for PyTorch.
 */
#ifndef MIXPREC_PREDICT_H
#define MIXPREC_PREDICT_H

#include <mixprec/dataset.h>
#include <mixprec/run.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_predictor mxp_predictor;

/* Load a checkpoint: path is a checkpoint file, a checkpoints directory or
 * a run directory (then its newest checkpoint that verifies). precision:
 * the mode to compute in (mxp_precision), or -1 for the checkpoint's. The
 * file is fully verified (mxp_ckpt_load). Errors: the loader's; MXP_ERR_FORMAT
 * for a checkpoint without user-data metadata (built-in workloads, GPT). */
MXP_API mxp_status mxp_predictor_load(const char *path, int precision, mxp_predictor **out,
                                      mxp_error *err);
MXP_API void mxp_predictor_destroy(mxp_predictor *p);

/* The model a checkpoint of a user-data run describes (its config and
 * "workload_meta", checked: kind, widths, the world model's statistics as
 * training computes them), sized for max_batch rows and checked against
 * the number of weights the file holds, so nothing is allocated from a
 * width the file cannot back. MXP_ERR_UNSUPPORTED: f is not of a
 * user-data run (built-in data, GPT); MXP_ERR_FORMAT: malformed metadata
 * or a model the weights do not match. `mixprec ckpt verify` uses it. */
MXP_API mxp_status mxp_predictor_file_spec(const mxp_st_file *f, int64_t max_batch,
                                           mxp_model_spec *out, mxp_error *err);

MXP_API mxp_dataset_kind mxp_predictor_kind(const mxp_predictor *p);
MXP_API int mxp_predictor_precision(const mxp_predictor *p);         /* mxp_precision computed in */
/* The mode (mxp_precision) the checkpoint was saved in. */
MXP_API int mxp_predictor_saved_precision(const mxp_predictor *p);
MXP_API const char *mxp_predictor_checkpoint(const mxp_predictor *p); /* the checkpoint file */
MXP_API const mxp_config *mxp_predictor_config(const mxp_predictor *p); /* the run's config */
MXP_API mxp_model *mxp_predictor_model(mxp_predictor *p);

/* Loss (and accuracy for the classifier) as training reports it: data
 * NULL: the held-out split of the run's data.path (same split, the
 * checkpoint's statistics); else every row / episode of data. */
MXP_API mxp_status mxp_predictor_evaluate(mxp_predictor *p, const mxp_dataset *data,
                                          mxp_run_eval *out, mxp_error *err);

/* Predict on inputs (float arrays): x [N, D] -> y [N, K] (classifier:
 * logits [N, C]); world model obs [N, S] and actions [N, A] -> next_obs
 * [N, S] and reward [N], de-standardised (obs + delta * std + mean). A
 * Gaussian head (model.head=gaussian) predicts its mean so and adds the
 * variances in the data's units: y_var [N, K] (regressor), next_obs_var
 * [N, S] and reward_var [N] (world model: exp(log-variance) * std^2). *out
 * is a new dataset (float32 arrays) on success. */
MXP_API mxp_status mxp_predictor_predict(mxp_predictor *p, const mxp_dataset *in, mxp_dataset **out,
                                         mxp_error *err);

/* A safetensors file for PyTorch: the FP32 weights under nn.Sequential's
 * state_dict names (layers.<i>.weight / .bias; a Gaussian head also
 * max_logvar, min_logvar [1, K]) and, for the world model, the statistics
 * as F32 tensors x_mean, x_std [S+A], y_mean, y_std [S+1]; metadata
 * "layers" (the model.layers list of the model), "kind", "head"
 * (deterministic|gaussian; docs/world_models.md has the module). */
MXP_API mxp_status mxp_predictor_export_torch(mxp_predictor *p, const char *path, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_PREDICT_H */
