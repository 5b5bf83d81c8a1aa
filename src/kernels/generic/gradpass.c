/* kernels/generic/gradpass.c: the fused gradient pass of a mixed-precision
 * step: unscale in place, detect non-finite values, gather health stats.
 *
 * Entry point: mxp_generic_unscale_stats (contract in kernels/kernels.h).
 * One read and one write of every element; the loss scaler's found-inf
 * decision is `out->nonfinite > 0`.
 */
#include "kernels/generic/generic.h"

#include <math.h>

/* Overwrites *out. Every element falls in exactly one of: non-finite after
 * unscaling; finite (then possibly zero and/or near-overflow, and added
 * to sumsq and absmax). near_overflow compares the value BEFORE unscaling
 * (|g| as it lived in the low-precision format) with near_overflow_at. */
void mxp_generic_unscale_stats(float *g, size_t n, float inv_scale,
                               float near_overflow_at, mxp_grad_stats *out) {
    int64_t nonfinite = 0, zeros = 0, near = 0;
    double sumsq = 0.0;
    float absmax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float raw = g[i];
        float v = raw * inv_scale;
        g[i] = v;
        if (!isfinite(v)) {
            nonfinite++;
            continue;
        }
        float a = fabsf(v);
        if (a == 0.0f) zeros++;
        if (fabsf(raw) >= near_overflow_at) near++;
        if (a > absmax) absmax = a;
        sumsq += (double)v * (double)v;
    }
    out->n = (int64_t)n;
    out->nonfinite = nonfinite;
    out->zeros = zeros;
    out->near_overflow = near;
    out->sumsq = sumsq;
    out->absmax = absmax;
}
