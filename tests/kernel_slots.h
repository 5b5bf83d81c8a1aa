/* tests/kernel_slots.h: value-returning wrappers of the kernels that
 * write their scalar into a result slot (kernels.h: "a kernel that
 * produces a scalar writes it through an output pointer argument placed
 * last, and returns void"), so that tests can compare results inline. Each
 * call gives the kernel a host slot and returns what it wrote there. */
#ifndef MIXPREC_TESTS_KERNEL_SLOTS_H
#define MIXPREC_TESTS_KERNEL_SLOTS_H

#include <string.h>

#include "kernels/kernels.h"

/* A slot the kernel must overwrite: filled with a pattern first, so a
 * kernel that forgets to write it returns garbage the checks catch. */
#define KS_POISON(v) memset(&(v), 0xa5, sizeof(v))

static inline double ks_mse(const mxp_kernels *k, float *dpred, const float *pred,
                            const float *target, int64_t B, int64_t C, float grad_scale) {
    double loss;
    KS_POISON(loss);
    k->mse(dpred, pred, target, B, C, grad_scale, &loss);
    return loss;
}

static inline double ks_softmax_xent(const mxp_kernels *k, float *dlogits, const float *logits,
                                     const int32_t *labels, int64_t B, int64_t C,
                                     float grad_scale) {
    double loss;
    KS_POISON(loss);
    k->softmax_xent(dlogits, logits, labels, B, C, grad_scale, &loss);
    return loss;
}

static inline double ks_sum(const mxp_kernels *k, const float *x, size_t n) {
    double s;
    KS_POISON(s);
    k->sum(x, n, &s);
    return s;
}

static inline double ks_sumsq(const mxp_kernels *k, const float *x, size_t n) {
    double s;
    KS_POISON(s);
    k->sumsq(x, n, &s);
    return s;
}

/* nonfinite may be NULL (the kernel then gets NULL for that slot). */
static inline float ks_absmax(const mxp_kernels *k, const float *x, size_t n,
                              int64_t *nonfinite) {
    float m;
    KS_POISON(m);
    if (nonfinite) KS_POISON(*nonfinite);
    k->absmax(x, n, &m, nonfinite);
    return m;
}

static inline float ks_fp8_quantize(const mxp_kernels *k, mxp_dtype fmt, float *dst,
                                    const float *src, size_t n, float scale) {
    float amax;
    KS_POISON(amax);
    k->fp8_quantize(fmt, dst, src, n, scale, &amax);
    return amax;
}

/* Result slots of an mxp_epilogue / mxp_act_bwd in host memory: bind
 * points e's result pointers at s (poisoned first). */
typedef struct ks_epi_slots {
    float y_amax, a_amax;
    int64_t y_nonfinite, a_nonfinite;
} ks_epi_slots;

static inline void ks_epi_bind(mxp_epilogue *e, ks_epi_slots *s) {
    KS_POISON(*s);
    e->y_amax = &s->y_amax;
    e->a_amax = &s->a_amax;
    e->y_nonfinite = &s->y_nonfinite;
    e->a_nonfinite = &s->a_nonfinite;
}

typedef struct ks_bwd_slots {
    float dx_amax;
    int64_t dx_nonfinite;
} ks_bwd_slots;

static inline void ks_bwd_bind(mxp_act_bwd *e, ks_bwd_slots *s) {
    KS_POISON(*s);
    e->dx_amax = &s->dx_amax;
    e->dx_nonfinite = &s->dx_nonfinite;
}

#endif /* MIXPREC_TESTS_KERNEL_SLOTS_H */
