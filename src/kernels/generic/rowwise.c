/* kernels/generic/rowwise.c: reference row-wise kernels on [B, C] FP32
 * matrices: bias add and bias gradient, LayerNorm forward/backward, softmax.
 *
 * Entry points: mxp_generic_add_bias, mxp_generic_bias_grad,
 * mxp_generic_layernorm_fwd, mxp_generic_layernorm_bwd,
 * mxp_generic_softmax_fwd (contracts in kernels/kernels.h).
 * Each row's statistics are computed before the row is written, so the
 * output may alias the input (y with x, dx with dy).
 * Reference: Ba et al., "Layer Normalization" (2016); PyTorch
 * nn.LayerNorm (biased variance, eps inside the square root).
 */
#include "kernels/generic/generic.h"

#include <math.h>

void mxp_generic_add_bias(float *y, const float *bias, int64_t B, int64_t C) {
    if (!bias) return;
    for (int64_t b = 0; b < B; b++) {
        float *row = y + (size_t)b * (size_t)C;
        for (int64_t c = 0; c < C; c++) row[c] += bias[c];
    }
}

/* dbias[c] += sum_b dy[b, c], summed in FP32 in b order. */
void mxp_generic_bias_grad(float *dbias, const float *dy, int64_t B, int64_t C) {
    for (int64_t b = 0; b < B; b++) {
        const float *row = dy + (size_t)b * (size_t)C;
        for (int64_t c = 0; c < C; c++) dbias[c] += row[c];
    }
}

/* Two-pass row statistics (mean, then the mean of squared deviations) in
 * FP32: stable for rows with a large common offset. gamma NULL means 1,
 * beta NULL means 0; mean/rstd may be NULL when backward is not needed. */
void mxp_generic_layernorm_fwd(float *y, float *mean, float *rstd,
                               const float *x, const float *gamma,
                               const float *beta, int64_t B, int64_t C,
                               float eps) {
    if (C <= 0) return;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * (size_t)C;
        float *yr = y + (size_t)b * (size_t)C;
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++) s += xr[c];
        float mu = s / (float)C;
        float ss = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float d = xr[c] - mu;
            ss += d * d;
        }
        float rs = 1.0f / sqrtf(ss / (float)C + eps);
        if (mean) mean[b] = mu;
        if (rstd) rstd[b] = rs;
        for (int64_t c = 0; c < C; c++) {
            float v = (xr[c] - mu) * rs;
            if (gamma) v *= gamma[c];
            if (beta) v += beta[c];
            yr[c] = v;
        }
    }
}

/* With xhat = (x - mean) rstd and g = dy * gamma:
 *   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))   ("=")
 *   dgamma += sum_b dy * xhat,  dbeta += sum_b dy           ("+=")
 * gamma NULL means 1; dgamma/dbeta may be NULL (not accumulated). */
void mxp_generic_layernorm_bwd(float *dx, float *dgamma, float *dbeta,
                               const float *dy, const float *x,
                               const float *mean, const float *rstd,
                               const float *gamma, int64_t B, int64_t C) {
    if (C <= 0) return;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * (size_t)C;
        const float *dyr = dy + (size_t)b * (size_t)C;
        float *dxr = dx + (size_t)b * (size_t)C;
        float mu = mean[b], rs = rstd[b];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float xh = (xr[c] - mu) * rs;
            float gc = gamma ? dyr[c] * gamma[c] : dyr[c];
            sg += gc;
            sgx += gc * xh;
            if (dgamma) dgamma[c] += dyr[c] * xh;
            if (dbeta) dbeta[c] += dyr[c];
        }
        float mg = sg / (float)C, mgx = sgx / (float)C;
        for (int64_t c = 0; c < C; c++) {
            float xh = (xr[c] - mu) * rs;
            float gc = gamma ? dyr[c] * gamma[c] : dyr[c];
            dxr[c] = rs * (gc - mg - xh * mgx);
        }
    }
}

/* y = exp(x - max) / sum exp(x - max) per row. */
void mxp_generic_softmax_fwd(float *y, const float *x, int64_t B, int64_t C) {
    if (C <= 0) return;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * (size_t)C;
        float *yr = y + (size_t)b * (size_t)C;
        float mx = xr[0];
        for (int64_t c = 1; c < C; c++)
            if (xr[c] > mx || xr[c] != xr[c]) mx = xr[c];
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float e = expf(xr[c] - mx);
            yr[c] = e;
            s += e;
        }
        for (int64_t c = 0; c < C; c++) yr[c] /= s;
    }
}
