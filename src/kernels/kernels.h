/* kernels/kernels.h: the compute kernels of mixprec (internal interface).
 *
 * Every kernel exists as a portable reference in kernels/generic/. ISA
 * variants (x86_avx512/, later cuda/) sit beside it and are chosen once at
 * start-up through the const table returned by mxp_kernels(); setting the
 * environment variable MIXPREC_FORCE_ISA=generic forces the reference.
 *
 * Conventions (all kernels):
 *   - row-major storage; B batch rows, C channels; `ld*` are row strides in
 *     elements;
 *   - arithmetic and accumulation in FP32; typed inputs are widened exactly,
 *     typed outputs are rounded RNE (mxp_store_f32 semantics);
 *   - "=" kernels overwrite their output, "+=" kernels accumulate (parameter
 *     gradients accumulate so micro-batches can be summed);
 *   - no allocation, no I/O, no logging: callers plan buffers up front;
 *   - no kernel returns a host value: a kernel that produces a scalar writes
 *     it through an output pointer argument placed last (a RESULT SLOT:
 *     memory of the caller's plan, backend memory on a device) and returns
 *     void; the host reads slots after the pass (docs/design.md "The
 *     backend seam").
 */
#ifndef MIXPREC_KERNELS_H
#define MIXPREC_KERNELS_H

#include <mixprec/num.h>

/* Largest promotion interval k of gemm_f16acc (training.fp16_accumulate_k). */
#define MXP_F16ACC_K_MAX 4096
/* Its default (training.fp16_accumulate_k; docs/kernels.md gives its error
 * bound). */
#define MXP_F16ACC_K_DEFAULT 16

/* C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, FP32 accumulation.
 * op(A) = A (A stored M x K, lda >= K) or A^T (A stored K x M, lda >= M);
 * likewise B (K x N with ldb >= N, or N x K with ldb >= K when trans_b).
 * A and B may each be any mxp_dtype; C is FP32 with ldc >= N. beta == 0
 * ignores C's old contents (NaN in C does not leak). C must not alias A/B. */
typedef struct mxp_gemm_args {
    bool trans_a, trans_b;
    int64_t M, N, K;
    mxp_dtype a_type;
    const void *A;
    int64_t lda;
    mxp_dtype b_type;
    const void *B;
    int64_t ldb;
    float *C;
    int64_t ldc;
    float alpha, beta;
} mxp_gemm_args;

/* Statistics of one fused pass over a flat gradient buffer. */
typedef struct mxp_grad_stats {
    int64_t n;             /* elements visited */
    int64_t nonfinite;     /* NaN or +-Inf after unscaling */
    int64_t zeros;         /* exact zeros (underflowed or dead) */
    int64_t near_overflow; /* finite, |scaled value| >= near_overflow_at */
    double sumsq;          /* sum of squares of finite unscaled values */
    float absmax;          /* largest finite |unscaled value| */
} mxp_grad_stats;

typedef struct mxp_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
} mxp_adamw_hparams;

typedef struct mxp_sgd_hparams {
    float lr, momentum, weight_decay;
    bool nesterov;
} mxp_sgd_hparams;

/* Where an optimizer update reads and writes its weights.
 * master != NULL: update the FP32 master in place; then, if work != NULL,
 *   recast master into work (work_type, RNE).
 * master == NULL: pure low precision: read work (work_type), update in FP32
 *   registers, store back into work with stochastic rounding when `sr` (RNE
 *   otherwise); element i draws mxp_rng_at(seed, counter + i). */
typedef struct mxp_weights {
    float *master;
    void *work;
    mxp_dtype work_type;
    bool sr;
    uint64_t seed, counter;
} mxp_weights;

/* The activation of a fused epilogue. */
typedef enum mxp_act {
    MXP_ACT_NONE,
    MXP_ACT_RELU,
    MXP_ACT_GELU,
    MXP_ACT_TANH,
    MXP_ACT_COUNT
} mxp_act;

/* One fused pass over a linear layer's FP32 GEMM output, and the
 * element-wise activation after it (slot bias_act_store). Shapes: [B, C],
 * rows contiguous. Bit for bit the same as this sequence of the SAME
 * table's kernels (the unfused driver path, nn/model_step.c):
 *   add_bias(y, bias, B, C);                        y += bias (bias may be NULL)
 *   convert(y_type, y_out, F32, y, B*C);            skipped when y_out == y
 *   absmax(y, B*C, y_amax, y_nonfinite);
 * and, when act != MXP_ACT_NONE, with x = y when y_type is F32, else x =
 * convert(F32, y_out) (the stored values, widened):
 *   a = act_fwd(x);   convert(a_type, a_out, F32, a, B*C);
 *   absmax(a, B*C, a_amax, a_nonfinite);            a is FP32, before its store
 * y_out may be y itself only when y_type is F32; a_out must not overlap y or
 * y_out. The result does not depend on the thread count: every value is
 * element-wise, and absmax/non-finite counts combine exactly. */
typedef struct mxp_epilogue {
    float *y;          /* [B, C] FP32 GEMM output; bias added in place */
    const float *bias; /* [C] or NULL */
    int64_t B, C;
    mxp_dtype y_type;  /* storage of y */
    void *y_out;       /* [B, C] in y_type */
    mxp_act act;
    mxp_dtype a_type;  /* storage of the activation (act != NONE) */
    void *a_out;       /* [B, C] in a_type (act != NONE) */
    /* result slots (written, never read; NULL: not wanted; the a_ pair
     * only when act != NONE) */
    float *y_amax, *a_amax;
    int64_t *y_nonfinite, *a_nonfinite;
} mxp_epilogue;

/* One fused pass of an element-wise activation's backward (slot
 * act_bwd_store), n elements. Bit for bit this sequence of the SAME table's
 * kernels (the unfused driver path):
 *   dy32 = dy widened to FP32 (convert; dy itself when F32), likewise s32;
 *   dx32 = act_bwd(dy32, s32)       relu/gelu: s = the activation's input,
 *                                   tanh: s = its output;
 *   convert(dx_type, dx, F32, dx32, n);  absmax(dx32, n, dx_amax, dx_nonfinite).
 * dx must not overlap dy or s. Independent of the thread count. */
typedef struct mxp_act_bwd {
    mxp_act act; /* not MXP_ACT_NONE */
    size_t n;
    mxp_dtype dy_type;
    const void *dy; /* [n] */
    mxp_dtype s_type;
    const void *s;  /* [n] */
    mxp_dtype dx_type;
    void *dx;       /* [n] */
    /* result slots (written, never read; NULL: not wanted) */
    float *dx_amax;
    int64_t *dx_nonfinite;
} mxp_act_bwd;

/* What a table's GEMM computes in on this CPU (mxp_kernels.gemm_compute):
 * for doctor, the advisor and the benchmarks' peaks, so that what they say
 * is what the kernels do. */
typedef enum mxp_gemm_compute {
    MXP_GEMM_COMPUTE_FP32_FMA,      /* FP32 operands, FP32 FMA */
    MXP_GEMM_COMPUTE_FP32_WIDENED,  /* 16/8-bit operands widened to FP32, FP32 FMA */
    MXP_GEMM_COMPUTE_BF16_DOT,      /* BF16 pair dot products (vdpbf16ps), FP32 sums */
    MXP_GEMM_COMPUTE_FP16_FMA,      /* FP16 FMA (vfmadd231ph), FP16 partial sums
                                     * promoted to FP32 every k products */
    MXP_GEMM_COMPUTE_EMULATED,      /* portable scalar code (reference kernels, or
                                     * the FP16-accumulate emulation) */
    MXP_GEMM_COMPUTE_COUNT
} mxp_gemm_compute;

/* One line naming c ("FP32 FMA", ...). */
const char *mxp_gemm_compute_name(mxp_gemm_compute c);

typedef struct mxp_kernels {
    const char *isa; /* "generic", "avx512", ... */

    /* What gemm computes in for operands of dtype t (both operands t), or,
     * with f16acc, what gemm_f16acc computes in for FP16 operands. */
    mxp_gemm_compute (*gemm_compute)(mxp_dtype t, bool f16acc);

    void (*gemm)(const mxp_gemm_args *a);
    /* The linear layer's forward as one call: bit for bit
     *   gemm(g);  bias_act_store(e);     (this table's two slots)
     * with e->y the GEMM's output: g->C == e->y, g->ldc == g->N,
     * e->B == g->M, e->C == g->N (otherwise the two calls are made one after
     * the other). The fused form runs the epilogue on each piece of C right
     * after its last K block, on the thread that computed it, while it is
     * in cache; every element goes through the same epilogue code as in
     * bias_act_store, and the absmax / non-finite counts combine by max /
     * sum, so the results (e's outputs and fields) are those bits for any
     * thread count. e->bias, y_out and a_out must not overlap g->A or g->B.
     * The forward issues alpha = 1, beta = 0; other values are allowed (the
     * epilogue follows the GEMM's last K block, beta included). */
    void (*gemm_epi)(const mxp_gemm_args *g, mxp_epilogue *e);
    /* FP16 fast-accumulate GEMM (emulated; kernels/generic/gemm_f16acc.c):
     * gemm's contract, but each product a*b is added to an FP16 partial sum
     * with one RNE rounding (vfmadd231ph semantics) and the partial sum is
     * added into an FP32 accumulator after every k products (k clamped to
     * [1, MXP_F16ACC_K_MAX]); FP16 overflow gives +-Inf. Error vs exact:
     * docs/kernels.md, "FP16 fast-accumulate GEMM". */
    void (*gemm_f16acc)(const mxp_gemm_args *a, int k);
    /* Strided-batched GEMM, optional (NULL: the caller calls gemm count
     * times): for i in [0, count) the product g with A, B and C advanced
     * by i * sa, i * sb elements of their dtypes and i * sc floats, each
     * product's bits those of gemm on it alone, all products (and their
     * tiles) in one parallel region (an ensemble's members, one call per
     * layer and direction: nn/ens_batched.c). */
    void (*gemm_strided)(const mxp_gemm_args *g, int count, size_t sa, size_t sb, size_t sc);

    /* --- conversion --- */
    void (*convert)(mxp_dtype dst_type, void *dst, mxp_dtype src_type,
                    const void *src, size_t n);
    void (*convert_sr)(mxp_dtype dst_type, void *dst, const float *src,
                       size_t n, uint64_t seed, uint64_t counter);
    /* FP32 -> E4M3 or E5M2 (dst_type; others: no-op), RNE, bit for bit
     * with num's scalar reference; `mode` picks E4M3's overflow rule
     * (convert always saturates). */
    void (*f32_to_fp8)(mxp_dtype dst_type, void *dst, const float *src,
                       size_t n, mxp_fp8_overflow mode);
    /* The scaled FP8 quantise of the FP8 emulation: contract of
     * mxp_fp8_quantize (include/mixprec/amp.h): dst[i] = the E4M3 (fmt ==
     * F8_E4M3) or else E5M2 value, as FP32, of src[i] * scale, saturating;
     * *amax = amax of src (NaN/Inf when src holds one). dst may alias src.
     * Every table gives the same bits under any MXCSR flush setting. */
    void (*fp8_quantize)(mxp_dtype fmt, float *dst, const float *src,
                         size_t n, float scale, float *amax);

    /* --- element-wise (x, y, dy, dx of n FP32 elements; y may alias x and
     *     dx may alias dy) --- */
    void (*relu_fwd)(float *y, const float *x, size_t n);
    /* dx = dy * (x > 0)  ("=") */
    void (*relu_bwd)(float *dx, const float *dy, const float *x, size_t n);
    /* exact GELU: x * Phi(x), Phi the normal CDF via erff */
    void (*gelu_fwd)(float *y, const float *x, size_t n);
    void (*gelu_bwd)(float *dx, const float *dy, const float *x, size_t n);
    void (*tanh_fwd)(float *y, const float *x, size_t n);
    /* uses the forward OUTPUT y: dx = dy * (1 - y^2) */
    void (*tanh_bwd)(float *dx, const float *dy, const float *y, size_t n);
    /* y[i] = a * x[i] + y[i] */
    void (*axpy)(float *y, float a, const float *x, size_t n);
    /* x[i] *= a */
    void (*scale)(float *x, float a, size_t n);
    /* Inverted dropout (PyTorch's x * mask / (1 - p)): y[i] = x[i] * (r_i <
     * drop_below ? 0 : scale), r_i = mxp_rng_at(key, counter + i) (the
     * Philox stream of include/mixprec/base.h), so a dropped NaN stays NaN
     * as in PyTorch. The same call with dy for x is the backward. y may
     * alias x. Every table gives the same bits. */
    void (*dropout)(float *y, const float *x, size_t n, uint64_t key, uint64_t counter,
                    uint32_t drop_below, float scale);

    /* --- row-wise ops on [B, C] --- */
    /* y[b, c] += bias[c]  (bias may be NULL: no-op) */
    void (*add_bias)(float *y, const float *bias, int64_t B, int64_t C);
    /* dbias[c] += sum_b dy[b, c]  ("+=") */
    void (*bias_grad)(float *dbias, const float *dy, int64_t B, int64_t C);
    /* y = (x - mean) * rstd * gamma + beta over each row; writes mean[B] and
     * rstd[B] for backward; eps inside the sqrt, biased variance (PyTorch) */
    void (*layernorm_fwd)(float *y, float *mean, float *rstd, const float *x,
                          const float *gamma, const float *beta, int64_t B,
                          int64_t C, float eps);
    /* dx = ("=");  dgamma, dbeta ("+=") */
    void (*layernorm_bwd)(float *dx, float *dgamma, float *dbeta,
                          const float *dy, const float *x, const float *mean,
                          const float *rstd, const float *gamma, int64_t B,
                          int64_t C);
    /* row softmax, numerically stable (max subtracted) */
    void (*softmax_fwd)(float *y, const float *x, int64_t B, int64_t C);

    /* --- losses (FP32, mean over the batch; the loss into the slot *loss) --- */
    /* *loss = mean over all B*C elements of (pred - target)^2;
     * dpred = grad_scale * 2 (pred - target) / (B*C)  ("=", dpred may be NULL) */
    void (*mse)(float *dpred, const float *pred, const float *target,
                int64_t B, int64_t C, float grad_scale, double *loss);
    /* softmax cross-entropy of logits[B, C] with labels[B] in [0, C);
     * *loss = mean loss; dlogits = grad_scale * (softmax - onehot) / B
     * ("=", may be NULL) */
    void (*softmax_xent)(float *dlogits, const float *logits,
                         const int32_t *labels, int64_t B, int64_t C,
                         float grad_scale, double *loss);

    /* --- reductions (results into slots) --- */
    void (*sum)(const float *x, size_t n, double *out);
    void (*sumsq)(const float *x, size_t n, double *out);
    /* *amax = largest |x| over finite elements (0 when none); *nonfinite
     * counts the rest; either slot may be NULL (not wanted) */
    void (*absmax)(const float *x, size_t n, float *amax, int64_t *nonfinite);

    /* --- fused gradient pass ---
     * g[i] *= inv_scale in place, and gather mxp_grad_stats over the result;
     * a g[i] of -0.0 is taken as +0.0 (backend/numerics/gradpass.h,
     * mxp_gradpass_canon).
     * near_overflow_at is compared with |g[i]| BEFORE unscaling (the value
     * that lived in the low-precision format); pass INFINITY to disable. */
    void (*unscale_stats)(float *g, size_t n, float inv_scale,
                          float near_overflow_at, mxp_grad_stats *out);

    /* --- fused passes (bit-identical to the unfused kernels they replace) ---
     * The linear layer's forward epilogue: see mxp_epilogue. */
    void (*bias_act_store)(mxp_epilogue *e);
    /* An activation's backward, its store and its scan: see mxp_act_bwd. */
    void (*act_bwd_store)(mxp_act_bwd *e);
    /* bias_grad of dy stored in dtype t ([B, C]), widened as it is read:
     * bit for bit bias_grad(dbias, convert(F32, dy), B, C) of the same
     * table ("+="), without the FP32 copy. */
    void (*bias_grad_typed)(float *dbias, mxp_dtype t, const void *dy, int64_t B, int64_t C);

    /* --- optimizers on flat FP32 gradients ---
     * AdamW (decoupled weight decay, PyTorch torch.optim.AdamW semantics):
     *   w -= lr*wd*w; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
     * step t >= 1 counts applied (not skipped) updates. */
    void (*adamw)(const mxp_weights *w, const float *g, float *m, float *v,
                  size_t n, const mxp_adamw_hparams *h, int64_t t);
    /* SGD with momentum (PyTorch semantics, dampening 0):
     *   g' = g + wd*w; buf = t==1 ? g' : momentum*buf + g';
     *   d = nesterov ? g' + momentum*buf : buf; w -= lr*d.
     * buf may be NULL when momentum == 0. */
    void (*sgd)(const mxp_weights *w, const float *g, float *buf, size_t n,
                const mxp_sgd_hparams *h, int64_t t);

    /* --- Gaussian head loss (FP32; PETS / mbrl-lib GaussianMLP) ---
     * pred [B, 2D]: per row the mean [D] then the raw log-variance [D];
     * target [B, D]; bounds [2D]: max_logvar [D] then min_logvar [D].
     * Soft bounds: lv = max - softplus(max - raw); lv = min + softplus(lv - min).
     * *loss = mean over B*D of (mean - target)^2 exp(-lv) + lv,
     *         plus 0.01 (sum max_logvar - sum min_logvar).
     * dpred [B, 2D] = grad_scale * dloss/dpred ("=", may be NULL);
     * dbounds [2D] += grad_scale * dloss/dbounds ("+=", may be NULL).
     * Per-element math FP32, sums in double. Result through the pointer
     * placed last; returns nothing. */
    void (*gauss_nll)(float *dpred, float *dbounds, const float *pred, const float *target,
                      const float *bounds, int64_t B, int64_t D, float grad_scale,
                      double *loss);
    /* --- regression head loss with per-target weights and a termination
     * flag (FP32; docs/world_models.md; generic/loss_head.c) ---
     * K regression targets and T in {0, 1} flag columns (C = K + T);
     * bounds NULL: deterministic head, pred [B, K + T]; else Gaussian,
     * pred [B, 2K + T] (mean [K], raw log-variance [K]) and bounds [2K]
     * as gauss_nll; the flag's logit is pred's last column. target
     * [B, C], the flag in its last column (0 or 1); weights [C] (NULL:
     * every weight 1). *loss = (1 / (B C)) sum_b sum_c w_c l_bc (+ the
     * Gaussian bound penalty), l the squared error, the Gaussian NLL
     * term, or for the flag BCE-with-logits max(z,0) - z t + log1p(e^-|z|).
     * dpred = grad_scale * dloss/dpred ("=", may be NULL); dbounds +=
     * (as gauss_nll). Per-element math FP32, sums in double. */
    void (*head_loss)(float *dpred, float *dbounds, const float *pred, const float *target,
                      const float *bounds, const float *weights, int64_t B, int64_t K,
                      int64_t T, float grad_scale, double *loss);
} mxp_kernels;

/* The active kernel table (chosen once, thread-safe). */
const mxp_kernels *mxp_kernels_get(void);
/* The portable reference table. */
const mxp_kernels *mxp_kernels_generic(void);

#endif /* MIXPREC_KERNELS_H */
