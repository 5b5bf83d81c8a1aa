/* mixprec/amp.h: precision modes, the per-op precision policy, and the
 * dynamic loss scaler.
 *
 * Modes (docs/design.md "Precision modes"): fp32 (default, safe), mixed_bf16, mixed_fp16 (FP32
 * master weights), bf16 and fp16 (pure: no master, stochastic-rounded
 * update), fp8 (emulated, slot reserved: E4M3 forward / E5M2 grads).
 *
 * The policy is a table op-class -> dtypes, as PyTorch autocast does:
 * matmul inputs in the low dtype with FP32 accumulation; softmax, layernorm
 * statistics, losses and reductions in FP32.
 *
 * The loss scaler follows torch.cuda.amp.GradScaler exactly (init 65536,
 * growth 2.0, backoff 0.5, interval 2000; NaN and Inf both overflow; growth
 * only when the grown scale is finite; 1/scale computed in double, stored as
 * float) and adds optional hysteresis, min/max scale and an at-minimum policy.
 */
#ifndef MIXPREC_AMP_H
#define MIXPREC_AMP_H

#include <mixprec/num.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mxp_precision {
    MXP_PRECISION_FP32,
    MXP_PRECISION_MIXED_BF16,
    MXP_PRECISION_MIXED_FP16,
    MXP_PRECISION_BF16,
    MXP_PRECISION_FP16,
    MXP_PRECISION_FP8,
    MXP_PRECISION_COUNT
} mxp_precision;

/* "fp32", "mixed_bf16", "mixed_fp16", "bf16", "fp16", "fp8" */
MXP_API const char *mxp_precision_name(mxp_precision p);
MXP_API mxp_status mxp_precision_parse(const char *s, mxp_precision *out, mxp_error *err);

/* The one precision fallback chain (the scaler's at-minimum fallback and
 * the guard both walk it; the guard skips modes the CPU cannot run):
 * fp8 -> mixed_fp16 -> mixed_bf16 -> fp32, and fp16 -> bf16 -> fp32.
 * The next mode after p; fp32 (the end) and out-of-range values give p. */
MXP_API mxp_precision mxp_precision_fallback_next(mxp_precision p);

/* Op classes the policy assigns dtypes to. */
typedef enum mxp_op_class {
    MXP_OP_MATMUL,      /* linear / attention products */
    MXP_OP_ELEMENTWISE, /* relu, gelu, tanh: computed in FP32, stored as activation dtype */
    MXP_OP_NORM,        /* layernorm: statistics and output */
    MXP_OP_SOFTMAX,     /* softmax, log-softmax */
    MXP_OP_LOSS,        /* losses */
    MXP_OP_REDUCTION,   /* sums, norms */
    MXP_OP_CLASS_COUNT
} mxp_op_class;

MXP_API const char *mxp_op_class_name(mxp_op_class c);

typedef struct mxp_op_policy {
    mxp_dtype input;   /* dtype the op's inputs are rounded to (matmul: both operands) */
    mxp_dtype output;  /* dtype its output is stored in (kept for backward) */
    mxp_dtype accum;   /* accumulation dtype: always F32 on CPU */
} mxp_op_policy;

/* What a precision mode means, as data. */
typedef struct mxp_precision_policy {
    mxp_precision mode;
    mxp_dtype weight;       /* working weights used in compute */
    bool has_master;        /* FP32 master copy kept by the optimizer */
    bool stochastic_update; /* pure modes: SR when writing 16-bit weights */
    mxp_dtype activation;   /* activations kept for backward */
    mxp_dtype grad;         /* activation gradients in backward */
    bool loss_scaling;      /* dynamic loss scaling on by default */
    bool emulated;          /* computed by quantise-then-FP32 emulation */
    mxp_op_policy ops[MXP_OP_CLASS_COUNT];
    int fp16_accum_k;       /* 0: matmuls accumulate in FP32 (default); k in
                               [1, 4096], fp16/mixed_fp16 only: FP16 operand
                               pairs use the emulated FP16 fast-accumulate GEMM,
                               promoting to FP32 every k products
                               (training.fp16_accumulate, docs/kernels.md) */
} mxp_precision_policy;

/* Fill *out with the default policy of a mode. */
MXP_API void mxp_precision_policy_default(mxp_precision mode, mxp_precision_policy *out);

/* ---- per-layer precision override ----------------------------------------
 * Layers kept in FP32 whatever the mode (training.precision_fp32_layers), as
 * Transformer Engine's FP8 recipes keep the first and last layers in higher
 * precision. A selected layer (a linear layer) runs its matmul inputs (x and,
 * in backward, dY), its weights and bias (from the FP32 master; pure modes
 * keep that layer's parameters in FP32) and its outputs (y, dW) in FP32;
 * the tensors it reads are stored in FP32. Its dX is rounded to the grad
 * dtype of the layer below, which follows the mode's policy, as do all
 * other layers. Ignored in fp32 mode. Indices are the model's layer indices
 * (the <i> of "layers.<i>.weight"); `first`/`last` name the first and last
 * linear layer of the model, resolved by mxp_model_set_fp32_layers. */
#define MXP_FP32_LAYERS_MAX 64 /* == MXP_MODEL_MAX_LAYERS: a bit per layer */

typedef struct mxp_fp32_layers {
    bool first;     /* the first linear layer */
    bool last;      /* the last linear layer */
    uint64_t mask;  /* bit i: model layer i */
} mxp_fp32_layers;

/* Parse "none" | a comma list of "first", "last" and layer indices
 * 0..63 ("first,last", "0,6", " last "), case-insensitive, blanks around
 * items ignored, duplicates allowed. On error name the value, the bad item
 * and what is accepted; *out is untouched then. */
MXP_API mxp_status mxp_fp32_layers_parse(const char *s, mxp_fp32_layers *out, mxp_error *err);
/* Canonical text ("none", "first,last", "first,3,7") into buf [n]. */
MXP_API void mxp_fp32_layers_format(const mxp_fp32_layers *l, char *buf, size_t n);
/* True when nothing is selected. */
MXP_API bool mxp_fp32_layers_none(const mxp_fp32_layers *l);

/* ---- loss scaler ------------------------------------------------------- */

typedef enum mxp_scale_floor_policy {
    MXP_SCALE_FLOOR_CONTINUE, /* keep training at min_scale (default) */
    MXP_SCALE_FLOOR_ERROR,    /* mxp_scaler_update returns MXP_ERR_NONFINITE */
    MXP_SCALE_FLOOR_FALLBACK, /* request a precision fallback fp16->bf16->fp32 */
    MXP_SCALE_FLOOR_COUNT
} mxp_scale_floor_policy;

MXP_API const char *mxp_scale_floor_policy_name(mxp_scale_floor_policy p);
MXP_API mxp_status mxp_scale_floor_policy_parse(const char *s, mxp_scale_floor_policy *out,
                                                mxp_error *err);

typedef struct mxp_scaler_config {
    bool enabled;          /* false: scale stays 1 and never changes; non-finite
                              grads are still detected and the step skipped */
    double init_scale;     /* > 0, finite (65536) */
    double growth_factor;  /* > 1 (2.0) */
    double backoff_factor; /* in (0, 1) (0.5) */
    int64_t growth_interval; /* >= 1 (2000) */
    int hysteresis;        /* >= 1: overflows tolerated before a backoff (1 = PyTorch) */
    double min_scale;      /* >= 0 (0: no floor) */
    double max_scale;      /* > 0, may be INFINITY (no cap) */
    mxp_scale_floor_policy at_min;
    bool per_layer;        /* training.loss_scale.per_layer (false): one scale per
                              parameter group (layer), see mxp_scaler_groups */
} mxp_scaler_config;

MXP_API mxp_scaler_config mxp_scaler_config_default(void);
/* Check every field; on error name the field, value and accepted range. */
MXP_API mxp_status mxp_scaler_config_validate(const mxp_scaler_config *c, mxp_error *err);

/* Whole scaler state: checkpointed as is. */
typedef struct mxp_scaler_state {
    float scale;                 /* current loss scale (1 when disabled) */
    int64_t growth_tracker;      /* consecutive clean steps since last change */
    int hysteresis_left;         /* overflows still tolerated before backoff */
    int64_t overflow_steps;      /* total steps with found_inf */
    int64_t total_steps;         /* total update() calls */
    int64_t steps_at_min;        /* consecutive overflow steps while at min_scale */
} mxp_scaler_state;

typedef struct mxp_scaler mxp_scaler;

MXP_API mxp_status mxp_scaler_create(const mxp_scaler_config *c, mxp_scaler **out, mxp_error *err);
MXP_API void mxp_scaler_destroy(mxp_scaler *s);
MXP_API float mxp_scaler_scale(const mxp_scaler *s);
/* 1/scale computed in double, rounded to float (GradScaler semantics). */
MXP_API float mxp_scaler_inv_scale(const mxp_scaler *s);

/* Outcome of one update. */
typedef struct mxp_scaler_event {
    bool overflow;        /* found_inf was set: the step must be skipped */
    bool backed_off;      /* scale was reduced */
    bool grew;            /* scale was increased */
    bool at_min;          /* overflow while scale is at min_scale */
    bool fallback;        /* at_min with policy FALLBACK: switch precision */
    float old_scale, new_scale;
} mxp_scaler_event;

/* Advance the scaler after a step whose unscaled grads had found_inf.
 * Returns MXP_ERR_NONFINITE (and still updates state) only under the ERROR
 * at-minimum policy; ev may be NULL. */
MXP_API mxp_status mxp_scaler_update(mxp_scaler *s, bool found_inf, mxp_scaler_event *ev,
                                     mxp_error *err);

MXP_API void mxp_scaler_get_state(const mxp_scaler *s, mxp_scaler_state *out);
/* Restore a checkpointed state (validated: finite positive scale). */
MXP_API mxp_status mxp_scaler_set_state(mxp_scaler *s, const mxp_scaler_state *st, mxp_error *err);
MXP_API const mxp_scaler_config *mxp_scaler_get_config(const mxp_scaler *s);

/* ---- per-layer (adaptive) loss scaling ----------------------------------
 * Adaptive loss scaling (Zhao et al., arXiv 1910.12385) in its dynamic
 * form: one loss scaler per parameter group (layer), each with the rules of
 * mxp_scaler (growth interval, backoff, hysteresis, min/max, at-min policy)
 * and its own overflow check. The trainer (training.loss_scale.per_layer)
 * runs ONE backward: the loss is multiplied by the last group's scale and
 * the activation gradient passed from group l to group l-1 is multiplied by
 * s_{l-1}/s_l (a power of two with the default factors, so exact), so
 * group l's parameter gradients carry s_l; the fused unscale pass unscales
 * each group by its own 1/s_l and counts its non-finite values. A step with
 * any non-finite gradient is still skipped as a whole, but only the group
 * where the overflow arose backs off: an Inf in group l's gradients also
 * reaches every group below l through backward, so the TOPMOST group with
 * non-finite gradients backs off, the non-finite groups below it hold
 * (state unchanged), and the finite groups count a clean step. A
 * non-finite loss (forward overflow) backs every group off, as the global
 * scaler does. */
typedef struct mxp_scaler_groups mxp_scaler_groups;

/* n >= 1 groups, each starting at c->init_scale (validated as
 * mxp_scaler_create does). */
MXP_API mxp_status mxp_scaler_groups_create(const mxp_scaler_config *c, int n,
                                            mxp_scaler_groups **out, mxp_error *err);
MXP_API void mxp_scaler_groups_destroy(mxp_scaler_groups *g);
MXP_API int mxp_scaler_groups_count(const mxp_scaler_groups *g);
/* Group i's scaler (0 <= i < count), e.g. for its scale and state. */
MXP_API mxp_scaler *mxp_scaler_groups_get(mxp_scaler_groups *g, int i);
MXP_API const mxp_scaler *mxp_scaler_groups_get_const(const mxp_scaler_groups *g, int i);
/* The smallest current scale over the groups. */
MXP_API float mxp_scaler_groups_min_scale(const mxp_scaler_groups *g);
/* What one step means for a group. */
typedef enum mxp_group_outcome {
    MXP_GROUP_CLEAN,    /* finite gradients: a clean step (counts toward growth) */
    MXP_GROUP_OVERFLOW, /* non-finite gradients caused here: back off (hysteresis) */
    MXP_GROUP_HOLD,     /* non-finite gradients inherited from a group above it
                           (backward carries an Inf down): state unchanged */
    MXP_GROUP_OUTCOME_COUNT
} mxp_group_outcome;

/* Advance every group by its outcome[i] (HOLD leaves group i untouched).
 * *ev (may be NULL) summarises: overflow/backed_off/grew/at_min/fallback
 * when any group's event says so; old_scale/new_scale are the smallest
 * scales before and after. Every group is updated even when one returns an
 * error (the at-min ERROR policy); the first error is returned. */
MXP_API mxp_status mxp_scaler_groups_update(mxp_scaler_groups *g, const mxp_group_outcome *outcome,
                                            mxp_scaler_event *ev, mxp_error *err);

/* ---- FP8 delayed scaling (emulated) -------------------------------------
 * Per-tensor delayed scaling as NVIDIA Transformer Engine's DelayedScaling
 * recipe does (src/amp/fp8.c): every FP8 tensor (a matmul operand) has a
 * scale and a history of its amax (largest |value|) over the last
 * history_len steps. A tensor is quantised with the scale computed from the
 * history of PREVIOUS steps: q = fp8(x * scale) (saturating, as TE's casts),
 * and the matmul result is multiplied by 1/scale of each operand. After a
 * step, update() pushes the amax observed in it into the history and
 * recomputes
 *     amax  = max(history)            (amax_algo max)
 *           | the newest entry         (amax_algo most_recent)
 *     scale = (fp8_max / amax) / 2^margin
 * keeping the old scale when amax is 0 or not finite (a NaN or Inf in the
 * window makes the window's amax non-finite, as torch.max does in TE).
 * Scales start at 1 and histories at 0. Formats: E4M3 (max 448) for forward
 * tensors, E5M2 (max 57344) for gradients ("hybrid"). mixprec computes in
 * FP32 on the quantised values: FP8 is EMULATED. */

typedef enum mxp_fp8_amax_algo {
    MXP_FP8_AMAX_MAX,         /* largest amax in the history window */
    MXP_FP8_AMAX_MOST_RECENT, /* the newest amax */
    MXP_FP8_AMAX_ALGO_COUNT
} mxp_fp8_amax_algo;

/* "max", "most_recent" */
MXP_API const char *mxp_fp8_amax_algo_name(mxp_fp8_amax_algo a);

typedef struct mxp_fp8_config {
    int history_len;             /* >= 1, <= 65536 (16) */
    mxp_fp8_amax_algo amax_algo; /* (max) */
    int margin;                  /* >= 0, <= 64 (0) */
} mxp_fp8_config;

MXP_API mxp_fp8_config mxp_fp8_config_default(void);
/* Name the field, its value and the accepted range on error. */
MXP_API mxp_status mxp_fp8_config_validate(const mxp_fp8_config *c, mxp_error *err);

/* The scaling rule: (fp8_max / amax) / 2^margin, computed in double and
 * rounded to float; old_scale when amax is 0, negative or not finite, or
 * when the new scale would not be a finite positive float. */
MXP_API float mxp_fp8_scale_rule(float amax, float old_scale, double fp8_max, int margin);

/* dst[i] = the FP8 value (as FP32, exact) of src[i] * scale in format fmt
 * (F8_E4M3 or F8_E5M2), round-to-nearest-even, finite overflow and +-Inf
 * saturated to +-max (NaN stays NaN). Returns amax of src: the largest
 * |src[i]|, or NaN/Inf when src holds a non-finite value (so the history
 * sees it). dst may alias src. */
MXP_API float mxp_fp8_quantize(mxp_dtype fmt, float *dst, const float *src, size_t n, float scale);

typedef struct mxp_fp8_scaling mxp_fp8_scaling;

/* n_tensors >= 1 tensors, formats[i] F8_E4M3 or F8_E5M2. */
MXP_API mxp_status mxp_fp8_scaling_create(const mxp_fp8_config *c, int n_tensors,
                                          const mxp_dtype *formats, mxp_fp8_scaling **out,
                                          mxp_error *err);
MXP_API void mxp_fp8_scaling_destroy(mxp_fp8_scaling *s);
MXP_API int mxp_fp8_scaling_num_tensors(const mxp_fp8_scaling *s);
MXP_API const mxp_fp8_config *mxp_fp8_scaling_config(const mxp_fp8_scaling *s);
MXP_API mxp_dtype mxp_fp8_scaling_format(const mxp_fp8_scaling *s, int i);
/* Current scale of tensor i, and 1/scale (double, rounded to float). */
MXP_API float mxp_fp8_scaling_scale(const mxp_fp8_scaling *s, int i);
MXP_API float mxp_fp8_scaling_scale_inv(const mxp_fp8_scaling *s, int i);
/* Record an amax of tensor i seen during the current step (the step's
 * amax is the max of its observations; a non-finite one sticks). */
MXP_API void mxp_fp8_scaling_observe(mxp_fp8_scaling *s, int i, float amax);
/* Close the step: push each tensor's observed amax (0 when none) into its
 * history and recompute its scale by the rule; clears the observations. */
MXP_API void mxp_fp8_scaling_update(mxp_fp8_scaling *s);
/* Number of update() calls so far. */
MXP_API int64_t mxp_fp8_scaling_steps(const mxp_fp8_scaling *s);

/* Checkpoint state, as floats (for safetensors): layout
 *   [n] scales, then [n][history_len] amax histories, oldest first,
 * taken at a step boundary (pending observations are not part of it).
 * state_size gives the float count; set_state validates (scales finite and
 * > 0, histories >= 0 or non-finite as recorded; size must match) and
 * leaves s unchanged on error. The step count is metadata: pass it back. */
MXP_API size_t mxp_fp8_scaling_state_size(const mxp_fp8_scaling *s);
MXP_API void mxp_fp8_scaling_get_state(const mxp_fp8_scaling *s, float *buf);
MXP_API mxp_status mxp_fp8_scaling_set_state(mxp_fp8_scaling *s, const float *buf, size_t n,
                                             int64_t steps, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_AMP_H */
