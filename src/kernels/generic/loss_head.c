/* kernels/generic/loss_head.c: the regression head's loss with per-target
 * weights and an optional termination column (BCE on a logit).
 *
 * Entry point: mxp_generic_head_loss (contract in kernels/kernels.h; the
 * AVX-512 table has its own, kernels/x86_avx512/loops_head.c: the same bits
 * for the deterministic head, a bounded difference for the Gaussian head
 * and the flag). One formula for both heads (docs/world_models.md):
 *   loss = (1 / (B C)) sum_b sum_c w_c l_bc   (+ 0.01 (sum max - sum min))
 * over the C = K + T target columns (K regression, T in {0, 1} flag),
 *   l_bc = (pred - y)^2                        deterministic head, c < K
 *        = (mean - y)^2 exp(-lv) + lv           Gaussian head, c < K (lv
 *                                               bounded as in loss_gauss.c)
 *        = max(z, 0) - z t + log(1 + exp(-|z|)) c = K (the flag t, logit z:
 *                                               PyTorch's BCEWithLogitsLoss)
 * Gradients with k = grad_scale / (B C):
 *   deterministic  dpred = k w_c 2 (pred - y)
 *   Gaussian       dmean = k w_c 2 (mean - y) exp(-lv), draw = k w_c g s(v) s(u),
 *                  dmax += k sum_b w_c g s(v) s(-u) + 0.01 grad_scale,
 *                  dmin += k sum_b w_c g s(-v) - 0.01 grad_scale  (loss_gauss.c's
 *                  names: g = 1 - (mean - y)^2 exp(-lv), u = max - raw, v = lv1 - min)
 *   flag           dz = k w_K (sigmoid(z) - t)
 * Per-element math FP32; each column's terms are summed in double and
 * the sum multiplied by w_c in double. Column-major like gauss_nll.
 */
#include "kernels/generic/generic.h"

#include <math.h>

#define HEAD_BOUND_PENALTY 0.01

static float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

static float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

/* The Gaussian columns j < K; adds the weighted terms into *total and the
 * bound gradients into dbounds. */
static void gauss_cols(float *dpred, float *dbounds, const float *pred, const float *target,
                       const float *bounds, const float *w, int64_t B, int64_t K, int64_t T,
                       float k, float grad_scale, double *total, double *penalty) {
    const size_t ps = 2 * (size_t)K + (size_t)T, ts = (size_t)K + (size_t)T;
    for (int64_t j = 0; j < K; j++) {
        const float mx = bounds[j], mn = bounds[K + j];
        const float wj = w ? w[j] : 1.0f, kw = k * wj;
        *penalty += (double)mx - (double)mn;
        double col = 0.0, gmax = 0.0, gmin = 0.0;
        for (int64_t b = 0; b < B; b++) {
            const size_t o = (size_t)b * ps + (size_t)j;
            const float mu = pred[o], raw = pred[o + (size_t)K];
            const float u = mx - raw;
            const float lv1 = mx - softplus(u);
            const float v = lv1 - mn;
            const float lv = mn + softplus(v);
            const float iv = expf(-lv);
            const float d = mu - target[(size_t)b * ts + (size_t)j];
            const float d2iv = d * d * iv;
            col += (double)d2iv + (double)lv;
            if (!dpred) continue;
            const float g = 1.0f - d2iv, sv = sigmoid(v);
            dpred[o] = kw * (2.0f * d * iv);
            dpred[o + (size_t)K] = kw * (g * sv * sigmoid(u));
            gmax += (double)(g * sv * sigmoid(-u));
            gmin += (double)(g * sigmoid(-v));
        }
        *total += (double)wj * col;
        if (dpred && dbounds) {
            dbounds[j] += (float)((double)kw * gmax + HEAD_BOUND_PENALTY * (double)grad_scale);
            dbounds[K + j] += (float)((double)kw * gmin - HEAD_BOUND_PENALTY * (double)grad_scale);
        }
    }
}

void mxp_generic_head_loss(float *dpred, float *dbounds, const float *pred, const float *target,
                           const float *bounds, const float *weights, int64_t B, int64_t K,
                           int64_t T, float grad_scale, double *loss) {
    const int64_t C = K + T;
    if (B <= 0 || C <= 0) {
        *loss = 0.0;
        return;
    }
    const bool gauss = bounds != NULL;
    const size_t ps = (gauss ? 2 * (size_t)K : (size_t)K) + (size_t)T, ts = (size_t)C;
    const float k = (float)((double)grad_scale / ((double)B * (double)C));
    double total = 0.0, penalty = 0.0;
    if (gauss) {
        gauss_cols(dpred, dbounds, pred, target, bounds, weights, B, K, T, k, grad_scale, &total,
                   &penalty);
    } else {
        for (int64_t j = 0; j < K; j++) {
            const float wj = weights ? weights[j] : 1.0f, kw2 = 2.0f * (k * wj);
            double col = 0.0;
            for (int64_t b = 0; b < B; b++) {
                const size_t o = (size_t)b * ps + (size_t)j;
                const float d = pred[o] - target[(size_t)b * ts + (size_t)j];
                col += (double)d * (double)d;
                if (dpred) dpred[o] = kw2 * d;
            }
            total += (double)wj * col;
        }
    }
    if (T > 0) { /* the flag column: BCE on the logit z (last output column) */
        const float wt = weights ? weights[K] : 1.0f, kw = k * wt;
        double col = 0.0;
        for (int64_t b = 0; b < B; b++) {
            const size_t o = (size_t)b * ps + ps - 1;
            const float z = pred[o], t = target[(size_t)b * ts + (size_t)K];
            col += (double)(fmaxf(z, 0.0f) - z * t + log1pf(expf(-fabsf(z))));
            if (dpred) dpred[o] = kw * (sigmoid(z) - t);
        }
        total += (double)wt * col;
    }
    *loss = total / ((double)B * (double)C) + (gauss ? HEAD_BOUND_PENALTY * penalty : 0.0);
}
