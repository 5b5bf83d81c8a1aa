/* backend/numerics/mlp.h: the element rules and grid-stride kernel bodies
 * of an MLP step (bias, activations, the stored-format rounding + scan),
 * shared by the CUDA kernels (backend/cuda/mlp_kernels.cu) and the host
 * launch emulator (tests/test_cuda_mlp_host.c).
 *
 * Entry points:
 *   launch geometry: mxp_mk_idx (block/thread indices as data),
 *     mxp_mk_grid (blocks for n items, capped), mxp_mk_first/mxp_mk_stride;
 *   element rules: mxp_mk_relu_fwd/_bwd, mxp_mk_gelu_fwd/_bwd,
 *     mxp_mk_tanh_fwd/_bwd, mxp_mk_store (FP32 -> F32/BF16/FP16, RNE),
 *     mxp_mk_scan_elem/_merge (absmax over finite values + non-finite count);
 *   kernel bodies of explicit indices (one thread's share of a grid-stride
 *     loop): mxp_mk_bias_add_body, mxp_mk_bias_grad_body, mxp_mk_act_fwd_body,
 *     mxp_mk_act_bwd_body.
 * Each element rule is the op sequence of the CPU's generic kernel
 * (kernels/generic/eltwise.c, rowwise.c, reduce.c), op for op, so that on the
 * host the two agree bit for bit (tested). On a GPU: bias, ReLU, bias grad,
 * the store and the scan use only +, *, compares and bit ops (bit-identical
 * with --fmad=false); GELU and tanh call erff/expf/tanhf, which are CUDA's
 * libdevice functions on the device (max error 2 ulp, not glibc's bits):
 * there the results are close, NOT bit-identical (docs/gpu.md).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_MLP_H
#define MIXPREC_BACKEND_NUMERICS_MLP_H

#include <math.h>

#include "backend/numerics/round.h"

/* ---- launch geometry ------------------------------------------------------ */

/* One thread's coordinates (1-D grid of 1-D blocks). */
typedef struct mxp_mk_idx {
    unsigned grid, block; /* gridDim.x, blockDim.x */
    unsigned bid, tid;    /* blockIdx.x, threadIdx.x */
} mxp_mk_idx;

#define MXP_MK_GRID_CAP 65535u     /* blocks per launch of the element kernels */
#define MXP_MK_THREADS 256u        /* threads per block (a power of two: trees) */
#define MXP_MK_REDUCE_BLOCKS 1024u /* most blocks of a kernel with block partials */

/* Blocks for n items at `threads` a block: ceil(n / threads), at least 1,
 * at most cap (the grid-stride loops cover the rest). */
MXP_HD static inline unsigned mxp_mk_grid(size_t n, unsigned threads, unsigned cap) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return b > cap ? cap : (unsigned)b;
}

MXP_HD static inline size_t mxp_mk_first(const mxp_mk_idx *ix) {
    return (size_t)ix->bid * ix->block + ix->tid;
}

MXP_HD static inline size_t mxp_mk_stride(const mxp_mk_idx *ix) {
    return (size_t)ix->grid * ix->block;
}

/* ---- activations (kernels/generic/eltwise.c, op for op) ------------------- */

#define MXP_MK_INV_SQRT2 0.70710678118654752440f   /* 1/sqrt(2) */
#define MXP_MK_INV_SQRT2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */

/* The activation codes (the values of kernels.h mxp_act). */
enum { MXP_MK_ACT_NONE = 0, MXP_MK_ACT_RELU = 1, MXP_MK_ACT_GELU = 2, MXP_MK_ACT_TANH = 3 };

MXP_HD static inline float mxp_mk_relu_fwd(float v) { return v <= 0.0f ? 0.0f : v; }
MXP_HD static inline float mxp_mk_relu_bwd(float dy, float x) { return x > 0.0f ? dy : 0.0f; }

MXP_HD static inline float mxp_mk_gelu_fwd(float v) {
    return 0.5f * v * (1.0f + erff(v * MXP_MK_INV_SQRT2));
}

MXP_HD static inline float mxp_mk_gelu_bwd(float dy, float v) {
    float cdf = 0.5f * (1.0f + erff(v * MXP_MK_INV_SQRT2));
    float pdf = MXP_MK_INV_SQRT2PI * expf(-0.5f * v * v);
    return dy * (cdf + v * pdf);
}

MXP_HD static inline float mxp_mk_tanh_fwd(float v) { return tanhf(v); }
/* y: the forward OUTPUT. */
MXP_HD static inline float mxp_mk_tanh_bwd(float dy, float y) { return dy * (1.0f - y * y); }

/* act: MXP_MK_ACT_*; NONE is the identity. */
MXP_HD static inline float mxp_mk_act_fwd(int act, float v) {
    switch (act) {
    case MXP_MK_ACT_RELU: return mxp_mk_relu_fwd(v);
    case MXP_MK_ACT_GELU: return mxp_mk_gelu_fwd(v);
    case MXP_MK_ACT_TANH: return mxp_mk_tanh_fwd(v);
    default: return v;
    }
}

/* s: the activation's input (relu, gelu) or output (tanh). */
MXP_HD static inline float mxp_mk_act_bwd(int act, float dy, float s) {
    switch (act) {
    case MXP_MK_ACT_RELU: return mxp_mk_relu_bwd(dy, s);
    case MXP_MK_ACT_GELU: return mxp_mk_gelu_bwd(dy, s);
    case MXP_MK_ACT_TANH: return mxp_mk_tanh_bwd(dy, s);
    default: return dy;
    }
}

/* ---- stored format and scan (reduce.c absmax, mxp_store_f32 RNE) ---------- */

/* Storage of an activation (the F32/BF16/FP16 subset of mxp_dtype). */
enum { MXP_MK_STORE_F32 = 0, MXP_MK_STORE_BF16 = 1, MXP_MK_STORE_FP16 = 2 };

/* out[i] = v in format fmt, RNE. */
MXP_HD static inline void mxp_mk_store(int fmt, void *out, size_t i, float v) {
    if (fmt == MXP_MK_STORE_BF16)
        ((uint16_t *)out)[i] = mxp_nr_f32_to_bf16(v);
    else if (fmt == MXP_MK_STORE_FP16)
        ((uint16_t *)out)[i] = mxp_nr_f32_to_fp16(v);
    else
        ((float *)out)[i] = v;
}

/* A partial scan: largest finite |v| (0 when none) and the non-finite count;
 * both exact whatever the order of elements and merges. */
typedef struct mxp_mk_scan {
    float amax;
    int64_t nonfinite;
} mxp_mk_scan;

MXP_HD static inline mxp_mk_scan mxp_mk_scan_init(void) {
    mxp_mk_scan s = {0.0f, 0};
    return s;
}

MXP_HD static inline void mxp_mk_scan_elem(mxp_mk_scan *s, float v) {
    float a = mxp_hd_f32_from_bits(mxp_hd_f32_bits(v) & 0x7fffffffu); /* fabsf */
    if (!mxp_hd_isfinite(a)) {
        s->nonfinite++;
        return;
    }
    if (a > s->amax) s->amax = a;
}

MXP_HD static inline void mxp_mk_scan_merge(mxp_mk_scan *a, const mxp_mk_scan *b) {
    a->nonfinite += b->nonfinite;
    if (b->amax > a->amax) a->amax = b->amax;
}

/* ---- grid-stride kernel bodies (one thread's share) ----------------------- */

/* y[b, c] += bias[c] over n = B*C elements. */
MXP_HD static inline void mxp_mk_bias_add_body(const mxp_mk_idx *ix, float *y, const float *bias,
                                               size_t n, size_t C) {
    for (size_t i = mxp_mk_first(ix); i < n; i += mxp_mk_stride(ix)) y[i] += bias[i % C];
}

/* dbias[c] += sum_b dy[b, c]: one thread per column, b in order (the CPU's
 * order, so the sums are the same bits). */
MXP_HD static inline void mxp_mk_bias_grad_body(const mxp_mk_idx *ix, float *dbias,
                                                const float *dy, size_t B, size_t C) {
    for (size_t c = mxp_mk_first(ix); c < C; c += mxp_mk_stride(ix)) {
        float acc = dbias[c];
        for (size_t b = 0; b < B; b++) acc += dy[b * C + c];
        dbias[c] = acc;
    }
}

/* y = act(x) over n elements (y may alias x). */
MXP_HD static inline void mxp_mk_act_fwd_body(const mxp_mk_idx *ix, int act, float *y,
                                              const float *x, size_t n) {
    for (size_t i = mxp_mk_first(ix); i < n; i += mxp_mk_stride(ix)) y[i] = mxp_mk_act_fwd(act, x[i]);
}

/* dx = act'(dy, s) over n elements (dx may alias dy). */
MXP_HD static inline void mxp_mk_act_bwd_body(const mxp_mk_idx *ix, int act, float *dx,
                                              const float *dy, const float *s, size_t n) {
    for (size_t i = mxp_mk_first(ix); i < n; i += mxp_mk_stride(ix))
        dx[i] = mxp_mk_act_bwd(act, dy[i], s[i]);
}

#endif /* MIXPREC_BACKEND_NUMERICS_MLP_H */
