/* mixprec/model.h: a model is an ordered list of layers over flat slabs.
 *
 * Slabs (one allocation per role, carved into named views by a size table,
 * as llm.c does):
 *   master  FP32 [P]   parameters (fp32 mode: also the working weights;
 *                      pure bf16/fp16 modes: absent, NULL)
 *   work    dtype [P]  working weights used in compute (aliases master in
 *                      fp32 mode)
 *   grads   FP32 [P]   parameter gradients, ACCUMULATED (+=) by backward,
 *                      scaled by the loss scale passed to the step; WRITTEN
 *                      (=) by the first backward after mxp_model_discard_grads
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
    /* GPT layers (src/nn/embedding.c, block.c; rows are B*seq_len tokens): */
    MXP_LAYER_EMBEDDING, /* token ids (FP32 [rows, 1]) -> (wte[id] + wpe[pos]) * embed_scale;
                            units = C; must be layer 0 */
    MXP_LAYER_BLOCK,     /* pre-LN transformer block (GPT-2): x + attn(ln_1(x)), then
                            + mlp(ln_2(.)); causal, n_heads heads, MLP 4C with GELU */
    MXP_LAYER_LM_HEAD,   /* logits = x wte^T, tied to the embedding (no bias); last */
    /* MLP extras (src/nn/layer_skip.c; docs/world_models.md "Residual blocks
     * and dropout"): */
    MXP_LAYER_RESIDUAL,  /* residual:N, units = N >= 1: y = x + f(x), where f is the N
                            layers before it and x their input (the output of layer
                            l - N - 1, or the model input); the widths of x and f(x)
                            must match; no block inside another */
    MXP_LAYER_DROPOUT,   /* dropout:P, rate = P in [0, 1): inverted dropout (PyTorch
                            nn.Dropout) in training passes (mxp_model_step with
                            backward), the identity otherwise */
    MXP_LAYER_KIND_COUNT
} mxp_layer_kind;

MXP_API const char *mxp_layer_kind_name(mxp_layer_kind k);

typedef enum mxp_loss_kind {
    MXP_LOSS_MSE,  /* mean over all elements of (pred - y)^2 */
    MXP_LOSS_XENT, /* softmax cross-entropy against int32 labels, mean over B */
    /* Gaussian head (PETS; mbrl-lib GaussianMLP), model.head=gaussian: the
     * last linear layer has 2D outputs, per row the mean [D] then the raw
     * log-variance [D], for D targets (y: FP32 [B, D]). The log-variance is
     * soft-bounded by the learned parameters max_logvar and min_logvar
     * (tensors of shape [1, D], init 0.5 and -10, trained and saved with
     * the others; they extend the last linear layer's parameter range):
     *   lv = max - softplus(max - raw);  lv = min + softplus(lv - min)
     * loss = mean over B*D of (mean - y)^2 exp(-lv) + lv
     *        + 0.01 (sum max_logvar - sum min_logvar)      (FP32) */
    MXP_LOSS_GAUSSIAN,
    MXP_LOSS_KIND_COUNT
} mxp_loss_kind;

MXP_API const char *mxp_loss_kind_name(mxp_loss_kind k);

#define MXP_MODEL_MAX_LAYERS 64
#define MXP_MODEL_MAX_ENSEMBLE 64 /* members of an ensemble (spec.ensemble) */

typedef struct mxp_layer_spec {
    mxp_layer_kind kind;
    int64_t units; /* linear: output features; residual: the layers it wraps;
                      others: ignored */
    double rate;   /* dropout: the drop probability P in [0, 1); others: ignored */
} mxp_layer_spec;

typedef struct mxp_model_spec {
    int64_t in_dim;    /* C_in of the first layer */
    int64_t max_batch; /* largest B any call will pass (plans activation memory) */
    int n_layers;
    mxp_layer_spec layers[MXP_MODEL_MAX_LAYERS];
    mxp_loss_kind loss;
    float layernorm_eps; /* 1e-5 */
    /* sequence models (GPT layers): every batch holds B sequences of
     * seq_len consecutive rows (token positions); max_batch counts rows. */
    int64_t seq_len;     /* T, context length (0 for MLPs) */
    int64_t vocab_size;  /* V: embedding rows and lm_head outputs */
    int n_heads;         /* attention heads; C % n_heads == 0 */
    float embed_scale;   /* multiplier of the embedding output (1) */
    /* Ensemble (src/nn/ensemble.c; MLP layers only): E independent copies
     * ("members") of the layer list, each with its own parameters, member
     * e's a contiguous block of P/E in every slab, named
     * "members.<e>.<name of the single model's tensor>" (PyTorch
     * nn.ModuleList "members"). A step's batch holds E * B rows, member e's
     * B rows at [e B, (e+1) B) (targets likewise; max_batch counts rows
     * PER MEMBER, the activation memory is planned for E * max_batch
     * rows); each member has its own forward, loss and backward, run
     * layer by layer for all members at once (src/nn/ens_batched.c) or
     * one member after another, with the same results bit for bit;
     * *loss is the mean of the member losses and each member's
     * gradients are those of its own loss (the gradient of their sum, as
     * mbrl-lib trains its ensembles). Predict runs every member on the same
     * x: pred [E, B, out_dim]. 0 or 1: one model. */
    int ensemble;
    /* Regression heads (loss mse or gaussian; nn/loss_head.c,
     * docs/world_models.md "Termination head" and "Per-target loss
     * weights"). termination 1: the last target column is a 0/1 flag
     * (the episode's true termination) and the last output column its
     * logit, trained with binary cross-entropy on the logit (PyTorch's
     * BCEWithLogitsLoss, no variance): the last layer has K + 1 units
     * (mse) or 2K + 1 (gaussian: mean [K], raw log-variance [K], logit),
     * for K regression targets; y has K + 1 columns. 0: none.
     * target_weights: NULL (every weight 1), or the loss weight of each of
     * the target_dim target columns (regression columns, then the flag):
     * finite, >= 0, not all 0; copied at create. With either set the loss is
     *   (1 / (B C)) sum_b sum_c w_c l_bc  (+ the Gaussian bound penalty)
     * over the C = target_dim columns, l the squared error, the Gaussian
     * NLL term or the BCE; without, the losses above bit for bit (a list
     * of ones without termination counts as none). */
    int termination;
    const float *target_weights;
} mxp_model_spec;

/* An MLP spec: depth x (linear(hidden) -> [layernorm] -> act), then
 * linear(out_dim). */
MXP_API mxp_model_spec mxp_model_spec_mlp(int64_t in_dim, int64_t hidden, int depth,
                                          int64_t out_dim, mxp_layer_kind act, bool layernorm,
                                          mxp_loss_kind loss, int64_t max_batch);

/* An MLP spec from a layer list (config key model.layers), e.g.
 * "[linear:512, gelu, layernorm, linear:512, gelu, linear]": items
 * linear:WIDTH, relu, gelu, tanh, layernorm, residual:N (the N items before
 * it become a residual block), dropout:P, brackets optional; it must end
 * with a bare 'linear' whose width is out_dim (out_dim 0: syntax check
 * only). MXP_ERR_CONFIG naming model.layers, the item and what is accepted
 * for an empty list, an unknown item, a bad width, count or rate, a
 * width-less linear before the end, a residual block wrapping another or
 * more items than precede it or whose input and output widths differ (the
 * error names both), a list not ending in linear, more than 64 layers.
 * *out is set only on success. */
MXP_API mxp_status mxp_model_spec_layers(const char *list, int64_t in_dim, int64_t out_dim,
                                         mxp_loss_kind loss, int64_t max_batch, mxp_model_spec *out,
                                         mxp_error *err);

/* A GPT-2 style character model: embedding(C) -> n_layer x block ->
 * layernorm -> lm_head (tied), XENT loss, for batches of up to
 * max_seqs sequences of context tokens (max_batch = max_seqs * context). */
MXP_API mxp_model_spec mxp_model_spec_gpt(int64_t vocab, int64_t context, int64_t embd, int n_heads,
                                          int n_layer, int64_t max_seqs);

typedef struct mxp_model mxp_model;

/* Build the model and plan all its memory. Parameters are initialised as
 * PyTorch nn.Linear does (U(-1/sqrt(in), 1/sqrt(in)) for weight and bias;
 * layernorm gamma 1, beta 0) from a counter-based RNG stream of `seed`;
 * GPT layers as GPT-2 / nanoGPT: N(0, 0.02) for embeddings and linear
 * weights, N(0, 0.02/sqrt(2 n_layer)) for the residual projections,
 * biases 0. Tensor names of GPT layers: layers.<i>.wte / .wpe,
 * layers.<i>.ln_1.weight, .attn.c_attn.weight, .attn.c_proj.weight,
 * .ln_2.weight, .mlp.c_fc.weight, .mlp.c_proj.weight (and .bias each);
 * weights [out, in] as nn.Linear. */
MXP_API mxp_status mxp_model_create(const mxp_model_spec *spec, const mxp_precision_policy *policy,
                                    uint64_t seed, mxp_model **out, mxp_error *err);
/* As mxp_model_create, for forward passes only (mxp_model_step with
 * backward=false, mxp_model_predict; the guard's FP32 canary): no gradient
 * slab is allocated, mxp_model_grads returns NULL, the memory usage counts
 * 0 gradient bytes, and a step with backward=true fails with
 * MXP_ERR_UNSUPPORTED. Same parameters and outputs as mxp_model_create. */
MXP_API mxp_status mxp_model_create_inference(const mxp_model_spec *spec,
                                              const mxp_precision_policy *policy, uint64_t seed,
                                              mxp_model **out, mxp_error *err);
/* The parameter count P a model of spec would have, from the spec alone
 * (validated as mxp_model_create does; nothing of size P is allocated), so
 * a caller can check it against what a file holds before building a model
 * that an untrusted config describes. */
MXP_API mxp_status mxp_model_spec_num_params(const mxp_model_spec *spec, size_t *n, mxp_error *err);
/* True for a model from mxp_model_create_inference. */
MXP_API bool mxp_model_is_inference(const mxp_model *m);
MXP_API void mxp_model_destroy(mxp_model *m);

/* Switch precision policy (fallback, resume in another mode). Weights
 * carry over: from master when there is one, else widened from work. May
 * reallocate; never call inside a step. */
MXP_API mxp_status mxp_model_set_policy(mxp_model *m, const mxp_precision_policy *policy,
                                        mxp_error *err);
MXP_API const mxp_precision_policy *mxp_model_policy(const mxp_model *m);
MXP_API const mxp_model_spec *mxp_model_get_spec(const mxp_model *m);

MXP_API size_t mxp_model_num_params(const mxp_model *m);
MXP_API int64_t mxp_model_out_dim(const mxp_model *m);
/* Members of an ensemble (spec.ensemble), 1 for one model. */
MXP_API int mxp_model_ensemble(const mxp_model *m);
/* An ensemble's elites (model.elites, docs/world_models.md "Elites"): the
 * members whose predictions the evaluation, the open-loop error and
 * predict combine (bit e set: member e), all E members at create. Every
 * member still trains, and mxp_model_predict still writes all E members'
 * outputs; the consumers average over the elites. set: a non-empty subset
 * of the E members (MXP_ERR_INVALID_ARG naming the bits otherwise); host
 * state only, no transfer. One model: the mask is 1. */
MXP_API uint64_t mxp_model_elites(const mxp_model *m);
MXP_API mxp_status mxp_model_set_elites(mxp_model *m, uint64_t mask, mxp_error *err);
/* Columns of the targets y: out_dim, or out_dim / 2 for a Gaussian head
 * (MXP_LOSS_GAUSSIAN: mean and log-variance per target); with
 * spec.termination the flag column counts too (K + 1). */
MXP_API int64_t mxp_model_target_dim(const mxp_model *m);
/* The loss weight of target column c (1 without spec.target_weights);
 * NaN for c out of 0..target_dim-1. */
MXP_API float mxp_model_target_weight(const mxp_model *m, int64_t c);
/* Parse a per-target weight list (config key model.target_weights):
 * "[w0, w1, ...]" (brackets optional, YAML sequences arrive joined by
 * commas) of finite numbers >= 0, not all 0. n > 0: exactly n numbers,
 * written to out [n] (may be NULL); n == 0: any count (syntax only).
 * *count (may be NULL) gets the count. MXP_ERR_CONFIG naming
 * model.target_weights, the item and the accepted form; what_n (may be
 * NULL) says in the length error what the n columns are. */
MXP_API mxp_status mxp_model_target_weights_parse(const char *text, int64_t n, float *out,
                                                  int64_t *count, const char *what_n,
                                                  mxp_error *err);
/* Host pointers into the slabs (master, work, grads) and single-element
 * reads: valid on the CPU backend only, for the train module's step and
 * for tests. Other code copies through the named tensors below
 * (mxp_model_tensor_get / _set; docs/design.md "Who owns memory"). */
MXP_API float *mxp_model_master(mxp_model *m);            /* NULL in pure modes */
MXP_API void *mxp_model_work(mxp_model *m, mxp_dtype *type);
/* The FP32 grad slab [P] (NULL for an inference-only model). After
 * mxp_model_discard_grads and before the next backward it is zeroed on
 * this call (as mxp_model_zero_grads), so it never shows void values. */
MXP_API float *mxp_model_grads(mxp_model *m);
/* Recast master -> work (RNE); no-op in fp32 and pure modes. */
MXP_API void mxp_model_sync_work(mxp_model *m);
/* Element i of the parameters as FP32 (master if present, else work). */
MXP_API float mxp_model_param(const mxp_model *m, size_t i);
/* Set every gradient to +0 (a memset; PyTorch zero_grad(set_to_none=False)). */
MXP_API void mxp_model_zero_grads(mxp_model *m);
/* Discard the gradients without touching memory (PyTorch
 * zero_grad(set_to_none=True)): the next mxp_model_step with backward
 * WRITES every parameter gradient (GEMM beta 0, no separate zeroing pass),
 * and later ones add as usual (gradient accumulation over micro-batches).
 * The result is that of mxp_model_zero_grads + the same backward, bit for
 * bit, except that a gradient that is exactly -0.0 stays -0.0 where adding
 * it to +0 gave +0.0 (the trainer's grad pass maps it to +0.0, so a
 * trainer step is unchanged; docs/kernels.md). The trainer calls it at
 * the start of each step. */
MXP_API void mxp_model_discard_grads(mxp_model *m);

/* Named parameter tensors, in slab order. */
typedef struct mxp_tensor_info {
    const char *name; /* "layers.0.weight" */
    size_t offset;    /* in elements, into every slab */
    size_t count;
    int ndim;
    int64_t shape[2];
} mxp_tensor_info;

MXP_API int mxp_model_num_tensors(const mxp_model *m);
MXP_API const mxp_tensor_info *mxp_model_tensor(const mxp_model *m, int i);
/* Index of the parameter tensor called name ("layers.0.weight"), -1 when
 * the model has none (or name is NULL). */
MXP_API int mxp_model_tensor_find(const mxp_model *m, const char *name);

/* ==== named tensors: get / set (src/nn/model_tensors.c) ==================
 * The backend owns the model's memory (docs/design.md "Who owns memory"):
 * code outside the model and the trainer reaches weights, gradients and
 * optimizer state only through these copies, never through a pointer, so
 * a device backend can implement each as one transfer.
 *
 * A tensor is (role, parameter name): the role picks the slab, the name
 * one parameter tensor of it ("layers.0.weight", as mxp_model_tensor and
 * checkpoints name them); name NULL means the whole slab [P] in slab order
 * (one transfer, for snapshots). Copies are element-exact:
 *   dtype == the role's storage dtype (mxp_model_tensor_dtype): bit copy;
 *   dtype == MXP_DTYPE_F32 for a 16/8-bit role: get widens (exact), set
 *     rounds to nearest even (as mxp_convert; the caller checks range);
 *   anything else is refused (MXP_ERR_INVALID_ARG).
 * nbytes must be exactly count * size of dtype. Every refusal names the
 * argument and what is accepted, and changes nothing. */
typedef enum mxp_tensor_role {
    MXP_TENSOR_PARAM,   /* the parameters of record: the FP32 master, or the
                           working weights in pure bf16/fp16 modes (what a
                           checkpoint stores) */
    MXP_TENSOR_MASTER,  /* FP32 master weights (absent in pure modes) */
    MXP_TENSOR_WORK,    /* working weights in the policy's weight dtype */
    MXP_TENSOR_GRAD,    /* FP32 parameter gradients (absent: inference model) */
    MXP_TENSOR_OPTIM_M, /* the trainer's: AdamW first moment / SGD momentum, FP32 */
    MXP_TENSOR_OPTIM_V, /* the trainer's: AdamW second moment, FP32 (absent: SGD) */
    MXP_TENSOR_ROLE_COUNT
} mxp_tensor_role;

/* "param", "master", "work", "grad", "optim.m", "optim.v"; NULL out of range. */
MXP_API const char *mxp_tensor_role_name(mxp_tensor_role r);

/* Storage dtype of role r in the model's current policy. MXP_ERR_INVALID_ARG
 * for an optimizer role (the trainer's: mxp_trainer_tensor_dtype) or one out
 * of range; MXP_ERR_UNSUPPORTED when the model has no such slab now. */
MXP_API mxp_status mxp_model_tensor_dtype(const mxp_model *m, mxp_tensor_role r, mxp_dtype *out,
                                          mxp_error *err);

/* Copy tensor (r, name) out into the host buffer buf / in from it. set of
 * PARAM or MASTER also recasts the same range of the working weights
 * (RNE, as mxp_model_sync_work); set of WORK is refused while the model
 * keeps a separate FP32 master (set the master: the working copy follows).
 * A get of discarded gradients (mxp_model_discard_grads) reads zeros. */
MXP_API mxp_status mxp_model_tensor_get(mxp_model *m, mxp_tensor_role r, const char *name,
                                        mxp_dtype dtype, void *buf, size_t nbytes,
                                        mxp_error *err);
MXP_API mxp_status mxp_model_tensor_set(mxp_model *m, mxp_tensor_role r, const char *name,
                                        mxp_dtype dtype, const void *buf, size_t nbytes,
                                        mxp_error *err);
/* Copy the parameters of record of src into those of dst (same spec: same
 * tensor names and shapes, else MXP_ERR_INVALID_ARG), converting between
 * their dtypes (widening exact, narrowing RNE); dst's working weights
 * follow. Backend memory to backend memory: no host transfer. */
MXP_API mxp_status mxp_model_copy_params(mxp_model *dst, const mxp_model *src, mxp_error *err);

/* Host <-> backend traffic through get (device to host) and set (host to
 * device) since the model was created: calls and bytes of the host
 * buffers. A mock device asserts on it. */
typedef struct mxp_transfer_stats {
    uint64_t d2h_calls, d2h_bytes; /* get */
    uint64_t h2d_calls, h2d_bytes; /* set */
} mxp_transfer_stats;
MXP_API void mxp_model_transfers(const mxp_model *m, mxp_transfer_stats *out);

/* Layers, and the parameters of layer l: returns their count (0 for a
 * layer without parameters) and their element offset into every slab
 * (contiguous: weight then bias). */
MXP_API int mxp_model_num_layers(const mxp_model *m);
MXP_API size_t mxp_model_layer_params(const mxp_model *m, int l, size_t *offset);
/* The layer whose parameter range receives layer l's parameter gradients:
 * l when it owns parameters, the owner of tied weights (the GPT lm_head ->
 * the embedding), -1 when it has none. */
MXP_API int mxp_model_layer_param_group(const mxp_model *m, int l);
/* Per-layer gradient scales (adaptive loss scaling, amp.h): scales[l] is
 * the scale the gradient of layer l's OUTPUT carries in backward, so layer
 * l's parameter gradients carry scales[l]. Backward multiplies the dX that
 * layer l passes down by scales[l-1] / scales[l] in FP32 before storing it.
 * The caller passes loss_scale = scales[n_layers-1] (times its micro-batch
 * share) to mxp_model_step. The array is borrowed and must stay valid; NULL
 * (the default) switches it off. */
MXP_API void mxp_model_set_grad_scales(mxp_model *m, const float *scales);

/* One batch. x: FP32 [B, in_dim]; y: FP32 [B, target_dim] (MSE: out_dim;
 * GAUSSIAN: out_dim / 2; with spec.termination the last column the 0/1
 * flag) or labels: int32 [B] in [0, out_dim) (XENT). */
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
MXP_API mxp_status mxp_model_step(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                                  double *loss, mxp_nonfinite_site *site, mxp_error *err);

/* The dropout masks of the coming training passes (mxp_model_step with
 * backward) are drawn for (step, pass): element i of dropout layer l of
 * ensemble member e (0 for one model) is dropped iff
 *   mxp_rng_at(key, (e * 64 + l) * 2^40 + i) < round(P * 2^32)
 * with key the first two words (low first) of Philox4x32-10 with counter
 * (step low, step high, pass, 0x44524F50) and key (seed low, seed high),
 * seed the model's creation seed. The trainer sets (its step number, the
 * micro-batch index plus rank times micro-batches) before each micro-batch,
 * so forward and backward of a pass share one mask, micro-batches, ranks,
 * members and layers draw their own, and a resumed run draws the same.
 * Default (0, 0). */
MXP_API void mxp_model_set_dropout_pass(mxp_model *m, int64_t step, int pass);

/* Wall seconds spent in mxp_model_step since the model was created:
 * forward (layers and loss) and backward, summed over all calls.
 * Either pointer may be NULL. */
MXP_API void mxp_model_phase_times(const mxp_model *m, double *forward_s, double *backward_s);

/* Forward only; pred gets FP32 [B, out_dim] outputs (logits for XENT; for
 * GAUSSIAN per row the mean [D] then the BOUNDED log-variance [D]; with
 * spec.termination the last column is the termination LOGIT); an
 * ensemble writes [E, B, out_dim], member-major (spec.ensemble). */
MXP_API mxp_status mxp_model_predict(mxp_model *m, const float *x, int64_t B, float *pred,
                                     mxp_error *err);

/* FP8 (emulated) delayed scaling. When the policy's matmul input dtype is
 * an FP8 format (mode fp8), every linear layer quantises its input x and
 * weight W to E4M3 and its output gradient dY to E5M2, each with a
 * per-tensor delayed scale (amp.h), and computes in FP32 on the quantised
 * values; tensors stored between layers (activations and activation
 * gradients) are BF16, as Transformer Engine keeps them, and weights are
 * quantised from the FP32 master. Amax is observed only in training steps
 * (mxp_model_step with backward), and the scales are updated at the end of
 * each such step. The config applies now (resetting the state) and to any
 * later switch into an FP8 policy; default mxp_fp8_config_default(). */
MXP_API mxp_status mxp_model_set_fp8_config(mxp_model *m, const mxp_fp8_config *c, mxp_error *err);
/* The scaling state (for checkpoints: mxp_fp8_scaling_get_state /
 * _set_state), or NULL when the current policy is not FP8. Tensor order:
 * for each linear layer in layer order, (input x, weight W, output grad dY);
 * the same order for the linear products inside other layers. */
MXP_API mxp_fp8_scaling *mxp_model_fp8(mxp_model *m);

/* Per-layer precision override (amp.h, mxp_fp32_layers): the selected
 * linear layers run in FP32 in every mode but fp32 (where it is moot); the
 * others follow the policy. `first`/`last` resolve to the first/last linear
 * layer; an index must name a linear layer of this model, else the error
 * names it and lists the linear layers. The selection survives policy
 * switches (fallback, resume in another mode). Re-plans the buffers like
 * mxp_model_set_policy (weights kept, grads zeroed; nothing changes on
 * error). Pure bf16/fp16 modes keep no FP32 copy of any weight, so there
 * the selection is refused (MXP_ERR_UNSUPPORTED) when not empty. */
MXP_API mxp_status mxp_model_set_fp32_layers(mxp_model *m, const mxp_fp32_layers *sel,
                                             mxp_error *err);
/* The resolved selection: bit l set when layer l is kept FP32 (0 in fp32
 * mode and when nothing is selected). */
MXP_API uint64_t mxp_model_fp32_layers(const mxp_model *m);

/* Bytes held per role, for memory reporting. */
typedef struct mxp_model_memory {
    size_t params, master, grads, activations;
} mxp_model_memory;
MXP_API void mxp_model_memory_usage(const mxp_model *m, mxp_model_memory *out);

/* ==== per-layer monitor (src/nn/headroom.c; the guard drives it) ========= */

/* Statistics of the FP32 values of one tensor, taken just before they are
 * rounded into their storage dtype. Accumulated over every scanned pass
 * until mxp_monitor_reset. */
typedef struct mxp_tensor_stats {
    float absmax;      /* largest finite |v| */
    int64_t n;         /* elements scanned */
    int64_t nonfinite; /* NaN / +-Inf elements */
    int64_t tiny;      /* 0 < |v| < smallest normal of the storage dtype
                          (full scans of outputs and dx only: parameter
                          gradients stay in the FP32 slab) */
    int64_t tiny_n;    /* elements of the full scans (tiny's denominator) */
} mxp_tensor_stats;

typedef enum mxp_monitor_tensor {
    MXP_MON_OUT, /* forward output of the layer (activation) */
    MXP_MON_DX,  /* backward: gradient w.r.t. the layer input, scaled */
    MXP_MON_DW,  /* backward: parameter gradient, scaled (grad slab, FP32) */
    MXP_MON_TENSOR_COUNT
} mxp_monitor_tensor;

typedef struct mxp_layer_stats {
    mxp_tensor_stats t[MXP_MON_TENSOR_COUNT];
    mxp_dtype out_type;  /* storage dtype of the output (last layer: FP32) */
    mxp_dtype grad_type; /* storage dtype of dx */
} mxp_layer_stats;

/* Histogram of finite |v| by biased FP32 exponent: bin 0 counts exact
 * zeros, bin e >= 1 values whose exponent field is e, i.e. |v| in
 * [2^(e-127), 2^(e-126)) (FP32 subnormals are counted in bin 1). */
#define MXP_EXP_BINS 256

/* Anomaly-mode report of the first non-finite value since the last reset. */
typedef struct mxp_anomaly_report {
    bool found;
    int64_t pass_index;   /* forward/backward passes since reset, 1-based */
    bool backward;
    int layer;            /* -1: outside the layers (input or loss) */
    const char *op;       /* "linear", "gelu", "mse", "input", ... */
    const char *what;     /* "output", "weight", "input", "grad_input",
                             "grad_weight", "grad_bias" */
    int64_t count;        /* non-finite elements there */
    /* The first FORWARD culprit: the non-finite forward site itself, else
     * the first layer (forward order) whose output came within the headroom
     * margin of its format's maximum, else the forward op of the layer whose
     * backward failed. */
    bool has_culprit;
    int culprit_layer;
    const char *culprit_op;
    float culprit_absmax;     /* largest |output| of the culprit */
    double culprit_headroom;  /* format max / culprit_absmax (inf if 0) */
} mxp_anomaly_report;

typedef struct mxp_monitor mxp_monitor;

/* A monitor for model m's layers (the model may change precision later;
 * the monitor follows). hist: also keep exponent histograms (preflight).
 * Attach it with mxp_model_set_monitor; it only sees training passes (calls
 * of mxp_model_step with a non-NULL site), never validation or predict. */
MXP_API mxp_status mxp_monitor_create(const mxp_model *m, bool hist, mxp_monitor **out,
                                      mxp_error *err);
MXP_API void mxp_monitor_destroy(mxp_monitor *mon);
/* Attach (NULL detaches). The model does not own the monitor. */
MXP_API void mxp_model_set_monitor(mxp_model *m, mxp_monitor *mon);
/* full: count tiny values too (a slower scalar scan); else only absmax
 * and non-finite counts, which the engine computes anyway. */
MXP_API void mxp_monitor_set_full(mxp_monitor *mon, bool full);
/* Anomaly mode: also check the input batch, each layer's weights before
 * its forward, and weight and bias gradients separately; fill the anomaly
 * report with the first forward culprit. margin is the headroom margin
 * (8 = within 2^3 of the format's maximum). */
MXP_API void mxp_monitor_set_anomaly(mxp_monitor *mon, bool on, double margin);
MXP_API void mxp_monitor_reset(mxp_monitor *mon);
MXP_API int mxp_monitor_num_layers(const mxp_monitor *mon);
/* Layer l's statistics, NULL when l is out of range. l == num_layers is
 * the loss slot: its DX tensor is dLoss/dprediction (scaled), as stored in
 * the grad dtype before the last layer's backward. */
MXP_API const mxp_layer_stats *mxp_monitor_layer(const mxp_monitor *mon, int l);
/* Layer l's (0..num_layers) histogram of tensor `which` [MXP_EXP_BINS],
 * NULL without hist. */
MXP_API const int64_t *mxp_monitor_hist(const mxp_monitor *mon, int l, mxp_monitor_tensor which);
MXP_API void mxp_monitor_anomaly(const mxp_monitor *mon, mxp_anomaly_report *out);

/* Fraction of the histogram's nonzero finite values v with
 * |v| * scale < threshold (exact for power-of-two scale and threshold). */
MXP_API double mxp_hist_fraction_below(const int64_t *hist, double scale, double threshold);

/* ==== fault injection (src/nn/fault.c; tests and guard drills) ========== */

typedef enum mxp_fault_kind {
    MXP_FAULT_NONE,
    MXP_FAULT_NAN,           /* elements become NaN */
    MXP_FAULT_INF,           /* elements become +Inf */
    MXP_FAULT_VALUE,         /* elements become `value` (finite) */
    MXP_FAULT_SCALE_WEIGHTS, /* the layer's weight tensor is multiplied by
                                `value` once, at step `step` (0: at create) */
    MXP_FAULT_KIND_COUNT
} mxp_fault_kind;

typedef enum mxp_fault_pass {
    MXP_FAULT_FORWARD,  /* the layer's forward output */
    MXP_FAULT_BACKWARD, /* the layer's parameter gradient (dx when it has
                           no parameters) */
    MXP_FAULT_PASS_COUNT
} mxp_fault_pass;

typedef struct mxp_fault_config {
    mxp_fault_kind kind;  /* fault.kind none|nan|inf|value|scale_weights */
    mxp_fault_pass pass;  /* fault.pass forward|backward */
    int64_t layer;        /* fault.layer: layer index (0-based) */
    int64_t step;         /* fault.step: first attempt step (>= 1; scale_weights >= 0) */
    int64_t count;        /* fault.count: consecutive steps, 0 = every step on (1) */
    int64_t elements;     /* fault.elements: elements poisoned per pass (1) */
    double value;         /* fault.value: VALUE's value / SCALE_WEIGHTS' factor */
} mxp_fault_config;

MXP_API const char *mxp_fault_kind_name(mxp_fault_kind k);
MXP_API const char *mxp_fault_pass_name(mxp_fault_pass p);
MXP_API mxp_fault_config mxp_fault_config_default(void);
/* Arm (f->kind NAN/INF/VALUE) or disarm (NULL / NONE) the model's
 * forward/backward fault for the coming training passes. */
MXP_API void mxp_model_set_fault(mxp_model *m, const mxp_fault_config *f);
/* Multiply layer `layer`'s weight tensor (linear W or layernorm gamma) by
 * factor in master and working weights. */
MXP_API mxp_status mxp_model_scale_layer_weights(mxp_model *m, int layer, float factor,
                                                 mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_MODEL_H */
