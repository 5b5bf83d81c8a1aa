/* backend/numerics/gradpass.h: the element rule of the fused gradient pass
 * (unscale + finite check + grad-health stats), shared by the CPU reference
 * (kernels/generic/gradpass.c) and the CUDA kernel (backend/cuda/kernels.cu).
 *
 * Entry points: mxp_gradpass_acc_init, mxp_gradpass_elem (MXP_HD: one
 * element into a partial accumulator), mxp_gradpass_acc_merge (MXP_HD: two
 * partials). Counts (n, nonfinite, zeros, near_overflow) and absmax are
 * exact whatever the order of the elements and merges, so CPU and GPU agree
 * on them and on the found-inf decision bit for bit; sumsq is a double sum
 * whose value depends on the order (identical only for the same order).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_GRADPASS_H
#define MIXPREC_BACKEND_NUMERICS_GRADPASS_H

#include "backend/numerics/hd.h"

/* A partial result of the pass (the fields of kernels.h mxp_grad_stats). */
typedef struct mxp_gradpass_acc {
    int64_t n, nonfinite, zeros, near_overflow;
    double sumsq;
    float absmax;
} mxp_gradpass_acc;

MXP_HD static inline mxp_gradpass_acc mxp_gradpass_acc_init(void) {
    mxp_gradpass_acc a = {0, 0, 0, 0, 0.0, 0.0f};
    return a;
}

/* A raw gradient of -0.0 as +0.0 (bitwise, so no MXCSR flag can touch a
 * subnormal): the value that adding it to a zeroed slab gives. The first
 * backward of a step writes the gradients instead of adding them to zeros
 * (mxp_model_discard_grads), which keeps an exact -0.0; mapped here, the
 * slab after the pass and everything the step computes from it are the
 * bits of "zero, then add" (0 + x == x for every other x). */
MXP_HD static inline float mxp_gradpass_canon(float raw) {
    return mxp_hd_f32_bits(raw) == 0x80000000u ? 0.0f : raw;
}

/* Unscale one raw gradient and classify it; returns the unscaled value.
 * Every element is either non-finite after unscaling (counted, nothing else)
 * or finite (zero?, near-overflow? judged on |raw| >= near_overflow_at,
 * absmax, sumsq in double). raw -0.0 counts as +0.0 (mxp_gradpass_canon). */
MXP_HD static inline float mxp_gradpass_elem(float raw, float inv_scale,
                                             float near_overflow_at, mxp_gradpass_acc *a) {
    raw = mxp_gradpass_canon(raw);
    float v = raw * inv_scale;
    a->n++;
    if (!mxp_hd_isfinite(v)) {
        a->nonfinite++;
        return v;
    }
    float av = v < 0.0f ? -v : v;
    float ar = raw < 0.0f ? -raw : raw;
    if (av == 0.0f) a->zeros++;
    if (ar >= near_overflow_at) a->near_overflow++;
    if (av > a->absmax) a->absmax = av;
    a->sumsq += (double)v * (double)v;
    return v;
}

MXP_HD static inline void mxp_gradpass_acc_merge(mxp_gradpass_acc *a, const mxp_gradpass_acc *b) {
    a->n += b->n;
    a->nonfinite += b->nonfinite;
    a->zeros += b->zeros;
    a->near_overflow += b->near_overflow;
    a->sumsq += b->sumsq;
    if (b->absmax > a->absmax) a->absmax = b->absmax;
}

#endif /* MIXPREC_BACKEND_NUMERICS_GRADPASS_H */
