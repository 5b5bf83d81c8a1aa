/* backend/cuda/dstep.h: the device training step of an MLP, planned once and
 * run as a fixed sequence of calls through an ops table (internal).
 *
 * Plain C, compiled in every build (like lt_map.c): the composition is the
 * same whichever table runs it, so it is host-tested through an emulated
 * device (tests/dstep_emu.h: the MXP_HD kernel bodies through the launch
 * emulator, the cuBLASLt descriptions through a column-major executor)
 * against the CPU trainer (tests/test_dstep_emu.c), its graphed path
 * through an emulated device with capture semantics against the eager one
 * (tests/test_dstep_graph.c), and the CUDA table (dstep_cuda.c, CUDA
 * builds only, over cuda_backend.h) is compared with the emulated one, and
 * graphed with eager, on a GPU (tests/test_cuda_dstep.c).
 * Implementation: dstep_plan.c (the plan), dstep_run.c (the step),
 * dstep_internal.h (the plan's fields).
 *
 * Entry points: mxp_ds_plan_create/_destroy (every buffer, GEMM plan and
 * the host staging, once), mxp_ds_set_params (upload initial FP32
 * parameters, zero m/v), mxp_ds_step (one training step),
 * mxp_ds_micro_rows/_batches (the split), mxp_ds_recapture, mxp_ds_get
 * (download a slab, outside steps), mxp_ds_put / mxp_ds_get_state /
 * mxp_ds_set_state (resume, rollback; outside steps), mxp_ds_ops_cuda (the CUDA table; NULL
 * without CUDA).
 *
 * The model (the CPU's nn model, restricted): layers linear, relu, gelu,
 * tanh, layernorm; loss MSE or softmax cross-entropy; precision by its
 * low dtype: F32 (fp32), BF16 (mixed_bf16), F16 (mixed_fp16, with dynamic
 * loss scaling through the scaler rule on the device); AdamW or SGD
 * (momentum, nesterov, L2 weight decay: the CPU's element rules,
 * backend/numerics/optim.h); k micro-batches of a step's `batch` rows
 * (batch / k rows each, one more for the first batch % k). The parameter
 * layout is the CPU model's slab order (per layer: linear W [out, in] then
 * b [out]; layernorm gamma then beta). Storage dtypes follow
 * nn/model_plan.c: the input and every layer output in the low dtype,
 * except a layernorm not read by a linear layer (F32) and the last layer's
 * output (F32, the loss's input); activation gradients in the low dtype;
 * FP32 grad slab, master, m, v; biases and layernorm parameters read as
 * the work copy widened to FP32 (the CPU's nn_view_f32).
 *
 * A step: the batch copied into the host staging (page-locked on CUDA),
 * control block and batch up into fixed device buffers; then the device
 * work: work copy widened, grads zeroed, per micro-batch i: input rounded,
 * forward (cuBLASLt GEMM with bias epilogue, element and row kernels,
 * stored-format rounding), loss into micro-batch i's slot with its
 * gradient scaled by scale * B_i / batch, backward (bias grad, dW with
 * beta 0 for the first micro-batch and 1 after, dX GEMMs, activation and
 * layernorm backward; bias and layernorm grads add); the micro-batch
 * losses folded into the control block's loss (the CPU's B_i / batch
 * weighted sum); grad pass, decide (skip on non-finite gradients or loss,
 * clip, scaler rule on the device), the optimizer (master, then the work
 * copy RNE); then the report: the step's ONE device-to-host copy, then a
 * sync (with the aux area's scans of every stored output and activation
 * gradient when the table has one: the first non-finite site, as the CPU
 * model's provenance, in mxp_ds_result.site). Nothing else is read back
 * during a step. With spec.graphs (a
 * table with graph ops) the device work is a CUDA graph from the second
 * step on, re-captured on a new loss scale (mxp_ds_step).
 */
#ifndef MIXPREC_BACKEND_CUDA_DSTEP_H
#define MIXPREC_BACKEND_CUDA_DSTEP_H

#include <mixprec/num.h>

#include "backend/cuda/lt_map.h"
#include "backend/step_ctl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MXP_DS_MAX_LAYERS 64

typedef enum mxp_ds_kind {
    MXP_DS_LINEAR,
    MXP_DS_RELU,
    MXP_DS_GELU,
    MXP_DS_TANH,
    MXP_DS_LAYERNORM,
    MXP_DS_KIND_COUNT
} mxp_ds_kind;

typedef enum mxp_ds_loss { MXP_DS_MSE, MXP_DS_XENT } mxp_ds_loss;

/* The optimizer (mxp_optim_kind's values: AdamW 0, SGD 1). */
typedef enum mxp_ds_optim { MXP_DS_ADAMW, MXP_DS_SGD, MXP_DS_OPTIM_COUNT } mxp_ds_optim;

/* FP8 delayed scaling of the device step: mxp_fp8_config's fields
 * (amax_algo: 0 max, 1 most_recent, backend/numerics/fp8_scale.h). */
typedef struct mxp_ds_fp8_cfg {
    int history_len;
    int amax_algo;
    int margin;
} mxp_ds_fp8_cfg;

typedef struct mxp_ds_spec {
    int64_t in_dim, batch; /* rows per step (all micro-batches together) */
    int n_layers;
    struct {
        mxp_ds_kind kind;
        int64_t units; /* linear: outputs */
    } layers[MXP_DS_MAX_LAYERS];
    mxp_ds_loss loss;
    float ln_eps;
    mxp_dtype lowp; /* F32, BF16 or F16 */
    /* the optimizer's and the step's safety settings (mxp_trainer_config's) */
    float lr, beta1, beta2, eps, weight_decay;
    float clip_max;           /* 0: off */
    float near_overflow_frac; /* of the grad dtype's max */
    uint64_t seed;
    mxp_scaler_rule rule;            /* enabled: dynamic loss scaling */
    mxp_scaler_rule_state scaler0;   /* initial state (scale, hysteresis_left, ...) */
    /* the optimizer (a zeroed spec: AdamW); SGD's momentum in [0, 1) (0: no
     * buffer) and nesterov, PyTorch's SGD with dampening 0; weight_decay
     * above is SGD's L2 term then (g + wd w), AdamW's decoupled decay else */
    mxp_ds_optim optim;
    float momentum;
    bool nesterov;
    /* micro-batches per step (0 or 1: one): the batch's rows split in
     * order, micro-batch i has batch / k rows plus one for i < batch % k
     * (mxp_ds_micro_rows; the CPU trainer takes any B_i, the workloads give
     * k equal ones); 1 <= k <= batch */
    int micro_batches;
    /* CUDA Graphs for the steady step (a table with graph ops only; else
     * eager): see mxp_ds_step */
    bool graphs;
    /* FP8 (the CPU's fp8 precision; lowp must be BF16, the storage of its
     * activations and activation gradients): every linear layer whose
     * shape cuBLASLt can run in FP8 (mxp_lt_fp8_shape_check, for every
     * micro-batch's rows) runs the delayed-scaling form of
     * nn/block_dense.c (dstep_fp8.c); the others run in BF16 and are
     * reported (mxp_ds_fp8_reason). fp8_cfg: history, amax algorithm,
     * margin (mxp_fp8_config_validate's ranges; the backend's copy of
     * mxp_fp8_config, amp being above backend: trainer_device_fp8_cfg). */
    bool fp8;
    mxp_ds_fp8_cfg fp8_cfg;
} mxp_ds_spec;

/* What a device must offer (every pointer argument device memory unless
 * named host; every call may be asynchronous except report, which also
 * synchronises). `dev` is the table's own context. Each returns 0, or
 * nonzero with the reason in why[n]. The contracts are those of the same
 * names in cuda_backend.h. */
typedef struct mxp_ds_ops {
    const char *name;
    int (*alloc)(void *dev, size_t bytes, void **out, char *why, size_t n);
    void (*free)(void *dev, void *p);
    int (*upload)(void *dev, void *dst, const void *host, size_t bytes, char *why, size_t n);
    /* a counted device-to-host copy (asynchronous: valid after report/sync) */
    int (*download)(void *dev, void *host, const void *src, size_t bytes, char *why, size_t n);
    int (*sync)(void *dev, char *why, size_t n);
    int (*zero)(void *dev, void *p, size_t bytes, char *why, size_t n);
    int (*lt_create)(void *dev, const mxp_lt_desc *d, mxp_dtype ab, void **plan, char *why,
                     size_t n);
    void (*lt_destroy)(void *dev, void *plan);
    int (*lt_run)(void *dev, void *plan, const void *A, const void *B, float *D,
                  const float *bias, char *why, size_t n);
    int (*bias_grad)(void *dev, float *dbias, const float *dy, int64_t B, int64_t C, char *why,
                     size_t n);
    int (*act_fwd)(void *dev, int act, float *y, const float *x, size_t count, char *why,
                   size_t n);
    int (*act_bwd)(void *dev, int act, float *dx, const float *dy, const float *s, size_t count,
                   char *why, size_t n);
    int (*ln_fwd)(void *dev, float *y, float *mean, float *rstd, const float *x,
                  const float *gamma, const float *beta, int64_t B, int64_t C, float eps,
                  char *why, size_t n);
    int (*ln_bwd)(void *dev, float *dx, float *dgamma, float *dbeta, const float *dy,
                  const float *x, const float *mean, const float *rstd, const float *gamma,
                  int64_t B, int64_t C, char *why, size_t n);
    int (*mse)(void *dev, float *dpred, const float *pred, const float *target, int64_t B,
               int64_t C, float grad_scale, double *loss, char *why, size_t n);
    int (*xent)(void *dev, float *dlogits, const float *logits, const int32_t *labels,
                int64_t B, int64_t C, float grad_scale, double *loss, char *why, size_t n);
    int (*store_scan)(void *dev, mxp_dtype t, void *out, const float *src, size_t count,
                      float *amax, int64_t *nonfinite, char *why, size_t n);
    int (*widen)(void *dev, mxp_dtype t, float *out, const void *src, size_t count, char *why,
                 size_t n);
    int (*ctl_set)(void *dev, const mxp_step_ctl *host, char *why, size_t n);
    mxp_step_ctl *(*ctl_dev)(void *dev); /* device address of the control block */
    int (*grad_pass)(void *dev, float *g, size_t count, float near_at, char *why, size_t n);
    int (*decide)(void *dev, bool extra_inf, uint64_t n_params, char *why, size_t n);
    int (*adamw)(void *dev, float *master, uint16_t *work, bool work_bf16, bool sr,
                 const float *g, float *m, float *v, size_t count, char *why, size_t n);
    /* the control block into *host (one counted copy), then a sync */
    int (*report)(void *dev, mxp_step_ctl *host, char *why, size_t n);
    int64_t (*d2h_count)(const void *dev); /* device-to-host copies so far */
    /* SGD (mxp_cudab_sgd): buf the momentum buffer (read only when
     * ctl.sgd.use_buf); needed by an SGD plan only */
    int (*sgd)(void *dev, float *master, uint16_t *work, bool work_bf16, bool sr, const float *g,
               float *buf, size_t count, char *why, size_t n);
    /* *loss (device) = sum over i < k of slots[i] * B_i / batch in double,
     * in order (mxp_sb_loss_fold: the CPU trainer's sum); plans with k > 1 */
    int (*loss_fold)(void *dev, double *loss, const double *slots, int k, int64_t batch,
                     char *why, size_t n);
    /* Optional (NULL: plain host memory): page-locked host staging for the
     * step's uploads and its report. */
    int (*host_alloc)(void *dev, size_t bytes, void **out, char *why, size_t n);
    void (*host_free)(void *dev, void *p);
    /* Optional (all four, or none: the plan stays eager): capture the
     * stream's work between graph_begin and graph_end into *graph (a new
     * executable graph, or *graph updated in place when it is not NULL and
     * the topology allows; else replaced); graph_launch replays it
     * (asynchronous); graph_destroy(NULL) is a no-op. */
    int (*graph_begin)(void *dev, char *why, size_t n);
    int (*graph_end)(void *dev, void **graph, char *why, size_t n);
    int (*graph_launch)(void *dev, void *graph, char *why, size_t n);
    void (*graph_destroy)(void *dev, void *graph);
    /* Optional (both, or the plan reports no scans): the device address of
     * the aux area right after the control block and its capacity in
     * bytes; report_aux: the control block and aux_bytes of the aux area in
     * ONE counted copy into host (the aux area at host + MXP_DS_AUX_OFF),
     * then a sync. */
    void *(*aux_dev)(void *dev, size_t *cap);
    int (*report_aux)(void *dev, void *host, size_t aux_bytes, char *why, size_t n);
    /* FP8 (all five, or the table runs no FP8 plan: refused, named).
     * bias_add: y [B, C] += bias [C] (FP32, mxp_cudab_bias_add).
     * f8_quant: the FP8 values of src [rows, cols] (FP32) times *scale
     * (device), round-to-nearest-even, saturating to the format's largest
     * finite (NaN stays NaN), as 1-byte codes of fmt (F8_E4M3 or F8_E5M2)
     * into q [rows, cols] and/or qt [cols, rows] (the transpose; either
     * may be NULL); amax (device, may be NULL) = the tensor's largest |v|
     * of src, NaN over Inf over finite (kernels' fp8_quantize rule).
     * lt8_create: an FP8 GEMM plan of d (mxp_lt_linear_fp8) with A of
     * dtype a, B of dtype b, D FP32, FP32 accumulation; destroyed by
     * lt_destroy. lt8_run: D = a_scale[0] * b_scale[0] * op(A) op(B) +
     * beta D (the scales device FP32, read at run time). f8_update: the
     * end-of-pass scaling update of n_slots tensors (fp8_scale.h
     * mxp_f8_update_slot; slot i's format E5M2 when i % 3 == 2, else
     * E4M3) on st (device, mxp_ds_f8_state layout), then its pos
     * advanced and its passes counted. */
    int (*bias_add)(void *dev, float *y, const float *bias, int64_t B, int64_t C, char *why,
                    size_t n);
    int (*f8_quant)(void *dev, mxp_dtype fmt, uint8_t *q, uint8_t *qt, const float *src,
                    int64_t rows, int64_t cols, const float *scale, float *amax, char *why,
                    size_t n);
    int (*lt8_create)(void *dev, const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b, void **plan,
                      char *why, size_t n);
    int (*lt8_run)(void *dev, void *plan, const void *A, const void *B, float *D,
                   const float *a_scale, const float *b_scale, char *why, size_t n);
    int (*f8_update)(void *dev, void *st, int n_slots, const mxp_ds_fp8_cfg *cfg, char *why,
                     size_t n);
} mxp_ds_ops;

/* The device's FP8 scaling state (one allocation): a header, then n slots'
 * scale, scale_inv, pending amax (each [n] FP32) and the amax histories
 * ([n][H] FP32 rings, slot pos the next written). Slots: 3 per linear
 * layer in layer order (x, W, dY), as the CPU model's (nn/model.c). */
typedef struct mxp_ds_f8_state {
    int32_t pos;
    int32_t n, H;
    int32_t pad0;
    int64_t passes;  /* updates so far (mxp_fp8_scaling_steps) */
    int32_t pad[10]; /* 64 bytes; then scale [n], scale_inv [n], amax [n], hist [n * H] */
} mxp_ds_f8_state;

static inline float *mxp_ds_f8_vals(void *st) {
    return (float *)(void *)((unsigned char *)st + sizeof(mxp_ds_f8_state));
}
static inline size_t mxp_ds_f8_state_bytes(int n, int H) {
    return sizeof(mxp_ds_f8_state) + (size_t)n * (3 + (size_t)H) * sizeof(float);
}

/* The aux area's byte offset after the control block: the layout of
 * report_aux's copy (= MXP_CUDAB_AUX_OFF). */
#define MXP_DS_AUX_OFF ((sizeof(mxp_step_ctl) + 63) / 64 * 64)

/* One scan of a stored tensor (store_scan's slots): the largest finite
 * |v| and the count of NaN/Inf of its FP32 values. */
typedef struct mxp_ds_scan {
    float amax;
    int32_t pad;
    int64_t nonfinite;
} mxp_ds_scan;

typedef struct mxp_ds_plan mxp_ds_plan;

/* One step's outcome (from the report). */
typedef struct mxp_ds_result {
    double loss;      /* the mean loss (unscaled) */
    bool skipped;     /* no update (non-finite gradients or loss) */
    float scale;      /* the loss scale this step used */
    float next_scale; /* after the scaler rule */
    double grad_norm; /* sqrt of the pass's sumsq */
    int64_t nonfinite;
    int64_t d2h; /* device-to-host copies during the step (1) */
    bool graphed;   /* the step's device work ran as a replayed graph */
    bool captured;  /* ... and it was (re-)captured in this step */
    bool scanned;   /* the report carried the scans (site below is meaningful) */
    /* Provenance: the first non-finite value in the CPU model's pass order,
     * micro-batch by micro-batch: the layer outputs (forward), the loss,
     * the loss gradient (backward, layer -1), the layers' input gradients
     * from the top (backward). A value counts when it is NaN/Inf in FP32 or
     * as stored (amax rounds to Inf in the stored dtype). Parameter
     * gradients are not scanned (the grad pass counts them: nonfinite),
     * except a planted backward fault's (mxp_ds_set_fault). */
    struct {
        bool found, backward;
        int layer;     /* -1: the loss (forward) or its gradient (backward) */
        int micro;     /* micro-batch */
        int64_t count; /* NaN/Inf FP32 values there (0: only the stored copy) */
    } site;
} mxp_ds_result;

/* Plan every buffer and GEMM of spec on (ops, dev). 0, or 1 with what was
 * wrong in why (a layer kind, a shape, a dtype other than F32/BF16/F16, a
 * linear layer whose input is not stored in the low dtype, a device error).
 * The plan borrows dev. */
int mxp_ds_plan_create(const mxp_ds_spec *spec, const mxp_ds_ops *ops, void *dev,
                       mxp_ds_plan **out, char *why, size_t n);
void mxp_ds_plan_destroy(mxp_ds_plan *p); /* NULL: no-op */
size_t mxp_ds_num_params(const mxp_ds_plan *p);
/* Element offset of layer l's first (weight / gamma) and second (bias / beta)
 * tensor in the slabs; -1 for a layer without parameters. */
int64_t mxp_ds_param_offset(const mxp_ds_plan *p, int l, int which);
/* Upload the FP32 parameters host[P] as the master (and its RNE work copy);
 * zero m and v, the optimizer step count and the SR counter. */
int mxp_ds_set_params(mxp_ds_plan *p, const float *host, char *why, size_t n);
/* One step on x [batch, in_dim] (host FP32) and y [batch, out] (host FP32,
 * MSE) or labels [batch] (host int32, XENT), micro-batch i on rows
 * [r_i, r_i + B_i) of them. With spec.graphs on a table with graph ops,
 * the first step runs eagerly; from the second on, the step's device work
 * after the uploads (input rounding through the optimizer) is captured
 * once and replayed; it is re-captured when the loss scale it baked in
 * (the per-micro-batch loss gradient scale) changed, or after
 * mxp_ds_recapture. */
int mxp_ds_step(mxp_ds_plan *p, const float *x, const float *y, const int32_t *labels,
                mxp_ds_result *res, char *why, size_t n);
/* Rows of micro-batch i (0 outside [0, k)), and k. */
int64_t mxp_ds_micro_rows(const mxp_ds_plan *p, int i);
int mxp_ds_micro_batches(const mxp_ds_plan *p);
/* Drop the captured graph: the next step captures again. */
void mxp_ds_recapture(mxp_ds_plan *p);
/* A fault the step plants, as the CPU model's drills (nn/fault.c: the
 * guard's fault.kind nan/inf/value): `elements` evenly spaced FP32 values
 * set to `value` in layer `layer`'s output before it is stored (forward),
 * or after the layer's backward in its weight gradient (weights, or
 * layernorm gamma; a layer without parameters: the input gradient it
 * passes down). A backward fault into parameters also scans that tensor
 * (so the site is the CPU's: backward, that layer). While armed the step
 * runs eagerly (each planted value is one upload). NULL or !armed:
 * none. Host only; kept until changed. */
typedef struct mxp_ds_fault {
    bool armed, backward;
    int layer;
    float value;
    int64_t elements;
} mxp_ds_fault;
void mxp_ds_set_fault(mxp_ds_plan *p, const mxp_ds_fault *f);
/* The last step's scan of micro-batch `micro`: forward, layer l's output
 * (0 <= l < n_layers); backward, layer l's input gradient (1 <= l <
 * n_layers) or the loss gradient (l = -1). NULL for another (micro, l) or
 * a plan without scans. Host memory, valid until the next step. */
const mxp_ds_scan *mxp_ds_scan_of(const mxp_ds_plan *p, int micro, bool backward, int layer);

typedef enum mxp_ds_slab { MXP_DS_MASTER, MXP_DS_GRAD, MXP_DS_M, MXP_DS_V } mxp_ds_slab;
/* Download slab s [P] FP32 into host (counted copies; then a sync). MXP_DS_M
 * is AdamW's first moment or SGD's momentum buffer (the CPU trainer's
 * MXP_TENSOR_OPTIM_M); an SGD plan has no MXP_DS_V (refused, named). */
int mxp_ds_get(mxp_ds_plan *p, mxp_ds_slab s, float *host, char *why, size_t n);

/* The host-held state between steps (train/trainer_device.c): the
 * optimizer step count, the SR counter and the scaler rule's state, as the
 * last report (or set_params, or set_state) left them. set_state: what
 * the next step starts from (a resume, a rollback). Host only. */
typedef struct mxp_ds_state {
    int64_t opt_steps;
    uint64_t sr_counter;
    mxp_scaler_rule_state scaler;
    float lr;               /* the next step's learning rate (a schedule's) */
    mxp_gradpass_acc stats; /* get only: the last step's grad pass (zeros, near overflow) */
    mxp_scaler_rule_event event; /* get only: the last step's scaler rule event (the
                                  * trainer adopts it with the state: mxp_scaler_adopt) */
} mxp_ds_state;
void mxp_ds_get_state(const mxp_ds_plan *p, mxp_ds_state *out);
void mxp_ds_set_state(mxp_ds_plan *p, const mxp_ds_state *in);
/* Upload slab s (master, and its work copy rounded as set_params does; m;
 * v) from host [P] FP32 in CPU order (outside steps; then a sync). */
int mxp_ds_put(mxp_ds_plan *p, mxp_ds_slab s, const float *host, char *why, size_t n);

/* FP8 plans (spec.fp8). The reason linear layer l runs in BF16 instead of
 * FP8 (a shape cuBLASLt's FP8 GEMMs cannot run), or NULL when it runs in
 * FP8 or the plan is not FP8 or l is not a linear layer. */
const char *mxp_ds_fp8_reason(const mxp_ds_plan *p, int l);
/* Linear layers of an FP8 plan that run in FP8. */
int mxp_ds_fp8_layers(const mxp_ds_plan *p);
/* The scaling state in mxp_fp8_scaling_get_state's layout (n scales, then
 * each slot's history oldest first; n = 3 per linear layer), nfloats
 * mxp_ds_fp8_state_size, and the updates so far into *passes (may be
 * NULL): one counted copy, then a sync (outside steps). set: the same
 * layout and count into the device (a resume, the host model's state). */
size_t mxp_ds_fp8_state_size(const mxp_ds_plan *p);
int mxp_ds_fp8_get_state(mxp_ds_plan *p, float *buf, size_t nfloats, int64_t *passes,
                         char *why, size_t n);
int mxp_ds_fp8_set_state(mxp_ds_plan *p, const float *buf, size_t nfloats, int64_t passes,
                         char *why, size_t n);

/* The CUDA table (dev: an mxp_cudab_ctx *), NULL in a build without CUDA. */
const mxp_ds_ops *mxp_ds_ops_cuda(void);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_BACKEND_CUDA_DSTEP_H */
