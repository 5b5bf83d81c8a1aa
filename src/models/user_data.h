/* models/user_data.h: the user-data provider (user_data.c) and the
 * checkpoint metadata that describes a user-data model (predictor.c).
 * Not a public header: mxp_workload_provider_dataset (run.h) and the
 * predictor (predict.h) are the public faces. */
#ifndef MIXPREC_MODELS_USER_DATA_H
#define MIXPREC_MODELS_USER_DATA_H

#include <mixprec/dataset.h>
#include <mixprec/run.h>

/* What a user-data checkpoint must record to be used without its data:
 * metadata "workload_meta", a JSON object (docs/data.md):
 *   {"kind": "world_model"|"classifier"|"regressor", "in_dim": D,
 *    "out_dim": K, "state_dim": S, "action_dim": A,
 *    "x_mean": [..], "x_std": [..], "y_mean": [..], "y_std": [..]}
 * (the four statistics for the world model only, "%.9g": exact floats). */
typedef struct ud_meta {
    mxp_dataset_kind kind;
    int64_t in_dim, out_dim;      /* model input and output widths */
    int64_t state_dim, action_dim; /* world model; else 0 */
    float *x_mean, *x_std;         /* [in_dim]  world model; else NULL */
    float *y_mean, *y_std;         /* [out_dim] world model; else NULL */
} ud_meta;

void ud_meta_free(ud_meta *m);
/* Parse workload_meta text; MXP_ERR_FORMAT naming `label` when malformed. */
mxp_status ud_meta_parse(const char *json, const char *label, ud_meta *out, mxp_error *err);
/* The dataset kind of a workload (MXP_WORKLOAD_GPT: false). */
bool ud_kind_of(mxp_workload w, mxp_dataset_kind *out);
/* The model spec of cfg (model.layers, else the hidden/depth shorthand);
 * with model.head=gaussian a loss of MXP_LOSS_MSE becomes MXP_LOSS_GAUSSIAN
 * and the last layer 2 * out_dim wide (mean and log-variance); a loss of
 * MXP_LOSS_MSE takes model.ensemble members (spec.ensemble), with
 * model.termination one more output (spec.termination: the flag's logit)
 * and with model.target_weights the weights parsed into tw [out_dim + 1]
 * (the caller's, alive while the spec is used; spec.target_weights points
 * there; MXP_ERR_CONFIG naming the key for a bad list or length). out_dim
 * counts the regression targets. */
mxp_status ud_model_spec(const mxp_config *cfg, int64_t in_dim, int64_t out_dim,
                         mxp_loss_kind loss, int64_t max_batch, float *tw, mxp_model_spec *out,
                         mxp_error *err);

/* Held-out loss and MSE of the mean of a regression model over n rows x
 * [n, in_dim], y [n, target_dim], in chunks of at most mb rows (head_eval.c):
 * deterministic head: *loss = *mse = the model's MSE; Gaussian head: *loss
 * = the NLL without the bound penalty, *mse of the mean; an ensemble: the
 * mean loss of its elite members (mxp_model_elites), the MSE of their mean
 * and members, elites, member_loss (every member); pred: FP32 scratch
 * [E mb, out_dim] (Gaussian head, ensembles). Into out->loss, out->mse
 * (NaN when n is 0) and the member fields. */
mxp_status ud_eval_regression(mxp_model *m, const float *x, const float *y, int64_t n,
                              int64_t mb, float *pred, mxp_run_eval *out, mxp_error *err);
/* As ud_eval_regression, and for a model with spec.termination or
 * spec.target_weights (head_eval.c, docs/world_models.md "Evaluation"):
 * *loss the training loss's formula (weighted, with the flag's BCE;
 * Gaussian: no bound penalty; an ensemble: the mean over its elites, every
 * member's own loss in out->member_loss), *mse
 * the MSE of the (ensemble) mean over the regression columns, unweighted;
 * with termination *bce the mean BCE (over members) and *acc the fraction
 * of rows whose mean predicted probability is > 0.5 exactly when the flag
 * is 1; else both untouched. pred: FP32 scratch [E mb, out_dim]. */
mxp_status ud_eval_head(mxp_model *m, const float *x, const float *y, int64_t n, int64_t mb,
                        float *pred, mxp_run_eval *out, mxp_error *err);

/* Ensembles (ensemble_data.c): E bootstrap samples of n rows, member e's
 * n indices at [e n, (e+1) n), drawn with replacement from a stream of
 * seed; NULL when E < 2 (no bootstrap) or out of memory. */
uint32_t *ud_bootstrap(int E, int64_t n, uint64_t seed);
/* The rows of one ensemble batch: for member e and position b < n, row
 * boot[e n_train + idx[b]] (idx[b] without boot) of x [., D] and y [., K]
 * into bx, by at row e n + b ([E n, D], [E n, K]). */
void ud_fill_members(const float *x, const float *y, int64_t D, int64_t K, const uint32_t *boot,
                     int E, int64_t n_train, const uint32_t *idx, int64_t n, float *bx,
                     float *by);

/* The provider on d (checked against cfg's workload). fixed: the
 * standardisation of a trained model (NULL: computed from d's training
 * split); eval_all: every row / episode is held out (n_train 0: only
 * evaluate and the data accessors below are usable). */
mxp_status ud_provider_create(const mxp_config *cfg, const mxp_dataset *d, const ud_meta *fixed,
                              bool eval_all, mxp_workload_provider *out, mxp_error *err);

#endif
