/* mixprec/model.h: a model is an ordered list of layers over flat slabs.
 *
 * Slabs (one allocation per role, carved into named views by a size table,
 * as llm.c does):
 *   master  FP32 [P]   parameters (fp32 mode: also the working weights;
 *                      pure bf16/fp16 modes: absent, NULL)
 *   work    dtype [P]  working weights used in compute (aliases master in
 *                      fp32 mode)
 *   grads   FP32 [P]   parameter gradients, ACCUMULATED (+=) by backward,
 *                      scaled by the loss scale passed to the step
 * Activations are kept for backward in the policy's activation dtype; the
 * activation gradients flow in the policy's grad dtype; arithmetic is FP32.
 * Parameter names follow PyTorch nn.Sequential: "layers.<i>.weight" [out, in]
 * and "layers.<i>.bias" [out]; layernorm: weight (gamma) and bias (beta).
 */
#ifndef MIXPREC_MODEL_H
#define MIXPREC_MODEL_H

#include <mixprec/amp.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mxp_layer_kind {
    MXP_LAYER_LINEAR,
    MXP_LAYER_RELU,
    MXP_LAYER_GELU, /* exact (erf) GELU, PyTorch nn.GELU() default */
    MXP_LAYER_TANH,
    MXP_LAYER_LAYERNORM,
    MXP_LAYER_KIND_COUNT
} mxp_layer_kind;

const char *mxp_layer_kind_name(mxp_layer_kind k);

typedef enum mxp_loss_kind {
    MXP_LOSS_MSE,  /* mean over all elements of (pred - y)^2 */
    MXP_LOSS_XENT, /* softmax cross-entropy against int32 labels, mean over B */
    MXP_LOSS_KIND_COUNT
} mxp_loss_kind;

const char *mxp_loss_kind_name(mxp_loss_kind k);

#define MXP_MODEL_MAX_LAYERS 64

typedef struct mxp_layer_spec {
    mxp_layer_kind kind;
    int64_t units; /* linear: output features; others: ignored */
} mxp_layer_spec;

typedef struct mxp_model_spec {
    int64_t in_dim;    /* C_in of the first layer */
    int64_t max_batch; /* largest B any call will pass (plans activation memory) */
    int n_layers;
    mxp_layer_spec layers[MXP_MODEL_MAX_LAYERS];
    mxp_loss_kind loss;
    float layernorm_eps; /* 1e-5 */
} mxp_model_spec;

/* An MLP spec: depth x (linear(hidden) -> [layernorm] -> act), then
 * linear(out_dim). */
mxp_model_spec mxp_model_spec_mlp(int64_t in_dim, int64_t hidden, int depth,
                                  int64_t out_dim, mxp_layer_kind act,
                                  bool layernorm, mxp_loss_kind loss,
                                  int64_t max_batch);

typedef struct mxp_model mxp_model;

/* Build the model and plan all its memory. Parameters are initialised as
 * PyTorch nn.Linear does (U(-1/sqrt(in), 1/sqrt(in)) for weight and bias;
 * layernorm gamma 1, beta 0) from a counter-based RNG stream of `seed`. */
mxp_status mxp_model_create(const mxp_model_spec *spec,
                            const mxp_precision_policy *policy, uint64_t seed,
                            mxp_model **out, mxp_error *err);
void mxp_model_destroy(mxp_model *m);

/* Switch precision policy (fallback, resume in another mode). Weights
 * carry over: from master when there is one, else widened from work. May
 * reallocate; never call inside a step. */
mxp_status mxp_model_set_policy(mxp_model *m, const mxp_precision_policy *policy,
                                mxp_error *err);
const mxp_precision_policy *mxp_model_policy(const mxp_model *m);
const mxp_model_spec *mxp_model_get_spec(const mxp_model *m);

size_t mxp_model_num_params(const mxp_model *m);
int64_t mxp_model_out_dim(const mxp_model *m);
float *mxp_model_master(mxp_model *m);            /* NULL in pure modes */
void *mxp_model_work(mxp_model *m, mxp_dtype *type);
float *mxp_model_grads(mxp_model *m);
/* Recast master -> work (RNE); no-op in fp32 and pure modes. */
void mxp_model_sync_work(mxp_model *m);
/* Element i of the parameters as FP32 (master if present, else work). */
float mxp_model_param(const mxp_model *m, size_t i);
void mxp_model_zero_grads(mxp_model *m);

/* Named parameter tensors, in slab order. */
typedef struct mxp_tensor_info {
    const char *name; /* "layers.0.weight" */
    size_t offset;    /* in elements, into every slab */
    size_t count;
    int ndim;
    int64_t shape[2];
} mxp_tensor_info;

int mxp_model_num_tensors(const mxp_model *m);
const mxp_tensor_info *mxp_model_tensor(const mxp_model *m, int i);

/* One batch. x: FP32 [B, in_dim]; y: FP32 [B, out_dim] (MSE) or labels:
 * int32 [B] in [0, out_dim) (XENT). */
typedef struct mxp_batch {
    const float *x;
    const float *y;
    const int32_t *labels;
    int64_t B;
} mxp_batch;

/* Where a non-finite value first appeared during forward/backward. */
typedef struct mxp_nonfinite_site {
    bool found;
    bool backward;   /* pass */
    int layer;       /* index, -1 for the loss */
    const char *op;  /* "linear", "gelu", "mse", ... */
    int64_t count;   /* non-finite elements in that output */
} mxp_nonfinite_site;

/* Forward, FP32 loss, and (when `backward`) backward with the loss
 * multiplied by loss_scale; parameter grads are ADDED to the grad slab.
 * *loss gets the unscaled FP32 loss (may be NaN/Inf: the caller decides).
 * site (may be NULL) reports the first layer output found non-finite. */
mxp_status mxp_model_step(mxp_model *m, const mxp_batch *b, bool backward,
                          float loss_scale, double *loss,
                          mxp_nonfinite_site *site, mxp_error *err);

/* Forward only; pred gets FP32 [B, out_dim] outputs (logits for XENT). */
mxp_status mxp_model_predict(mxp_model *m, const float *x, int64_t B,
                             float *pred, mxp_error *err);

/* Bytes held per role, for memory reporting. */
typedef struct mxp_model_memory {
    size_t params, master, grads, activations;
} mxp_model_memory;
void mxp_model_memory_usage(const mxp_model *m, mxp_model_memory *out);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_MODEL_H */
