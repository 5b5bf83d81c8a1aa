/* kernels/generic/gradpass.c: the fused gradient pass of a mixed-precision
 * step: unscale in place, detect non-finite values, gather health stats.
 *
 * Entry point: mxp_generic_unscale_stats (contract in kernels/kernels.h).
 * One read and one write of every element; the loss scaler's found-inf
 * decision is `out->nonfinite > 0`.
 */
#include "kernels/generic/generic.h"

#include "backend/numerics/gradpass.h"

/* Overwrites *out. The element rule is mxp_gradpass_elem
 * (backend/numerics/gradpass.h): every element is either non-finite after
 * unscaling or finite (then possibly zero and/or near-overflow, and added to
 * sumsq and absmax), sequentially in index order. */
void mxp_generic_unscale_stats(float *g, size_t n, float inv_scale,
                               float near_overflow_at, mxp_grad_stats *out) {
    mxp_gradpass_acc a = mxp_gradpass_acc_init();
    for (size_t i = 0; i < n; i++) g[i] = mxp_gradpass_elem(g[i], inv_scale, near_overflow_at, &a);
    out->n = a.n;
    out->nonfinite = a.nonfinite;
    out->zeros = a.zeros;
    out->near_overflow = a.near_overflow;
    out->sumsq = a.sumsq;
    out->absmax = a.absmax;
}
