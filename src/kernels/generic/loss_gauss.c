/* kernels/generic/loss_gauss.c: the Gaussian NLL of a probabilistic head.
 *
 * Entry point: mxp_generic_gauss_nll (contract in kernels/kernels.h; the
 * AVX-512 table has its own, mxp_avx512_gauss_nll in
 * kernels/x86_avx512/loops_head.c, within a derived bound of it). The
 * head of PETS (Chua et al. 2018) as mbrl-lib's GaussianMLP writes it:
 * the last linear layer gives a mean and a raw log-variance per target;
 * the log-variance is soft-bounded by the learned per-target parameters
 * max_logvar and min_logvar,
 *   lv1 = max - softplus(max - raw),  lv = min + softplus(lv1 - min),
 * and the loss is mbrl-lib's gaussian_nll (mean over batch and targets of
 * (mean - y)^2 exp(-lv) + lv, no 1/2 and no log(2 pi)) plus its bound
 * penalty 0.01 (sum max - sum min). Gradients (u = max - raw, v = lv1 - min,
 * s = sigmoid, g = dloss/dlv = 1 - (mean - y)^2 exp(-lv)):
 *   dmean = 2 (mean - y) exp(-lv)      draw = g s(v) s(u)
 *   dmax  = g s(v) s(-u)  (+ 0.01)     dmin = g s(-v)  (- 0.01)
 * each element term over B*D; softplus and sigmoid in their overflow-free
 * forms. Per-element math FP32; the loss and the bound gradients are summed
 * over the batch in double.
 */
#include "kernels/generic/generic.h"

#include <math.h>

#define GAUSS_BOUND_PENALTY 0.01

/* log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|). */
static float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

/* 1 / (1 + e^-x) without overflow for either sign. */
static float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

/* Column-major over the targets j (the bound gradients of column j are one
 * double sum over the rows); a NaN or infinite input gives a non-finite
 * loss, which the guard sees. */
void mxp_generic_gauss_nll(float *dpred, float *dbounds, const float *pred, const float *target,
                           const float *bounds, int64_t B, int64_t D, float grad_scale,
                           double *loss) {
    if (B <= 0 || D <= 0) {
        *loss = 0.0;
        return;
    }
    const size_t w = 2 * (size_t)D; /* row stride of pred */
    const float k = (float)((double)grad_scale / ((double)B * (double)D));
    double total = 0.0, penalty = 0.0;
    for (int64_t j = 0; j < D; j++) {
        const float mx = bounds[j], mn = bounds[D + j];
        penalty += (double)mx - (double)mn;
        double gmax = 0.0, gmin = 0.0;
        for (int64_t b = 0; b < B; b++) {
            const size_t o = (size_t)b * w + (size_t)j;
            const float mu = pred[o], raw = pred[o + (size_t)D];
            const float u = mx - raw;
            const float lv1 = mx - softplus(u);
            const float v = lv1 - mn;
            const float lv = mn + softplus(v);
            const float iv = expf(-lv);
            const float d = mu - target[(size_t)b * (size_t)D + (size_t)j];
            const float d2iv = d * d * iv;
            total += (double)d2iv + (double)lv;
            if (!dpred) continue;
            const float g = 1.0f - d2iv, sv = sigmoid(v);
            dpred[o] = k * (2.0f * d * iv);
            dpred[o + (size_t)D] = k * (g * sv * sigmoid(u));
            gmax += (double)(g * sv * sigmoid(-u));
            gmin += (double)(g * sigmoid(-v));
        }
        if (dpred && dbounds) {
            dbounds[j] += (float)((double)k * gmax + GAUSS_BOUND_PENALTY * (double)grad_scale);
            dbounds[D + j] += (float)((double)k * gmin - GAUSS_BOUND_PENALTY * (double)grad_scale);
        }
    }
    *loss = total / ((double)B * (double)D) + GAUSS_BOUND_PENALTY * penalty;
}
