/* kernels/generic/eltwise.c: reference element-wise kernels on FP32:
 * ReLU, exact (erf) GELU and tanh, forward and backward; axpy, scale and
 * inverted dropout (Philox mask).
 *
 * Entry points: mxp_generic_{relu,gelu,tanh}_{fwd,bwd}, mxp_generic_axpy,
 * mxp_generic_scale, mxp_generic_dropout (contracts in kernels/kernels.h). Every loop reads
 * element i before writing element i, so y may alias x and dx may alias dy.
 * Reference: Hendrycks & Gimpel, "Gaussian Error Linear Units" (2016);
 * PyTorch nn.GELU(approximate='none').
 */
#include "kernels/generic/generic.h"

#include "backend/numerics/philox.h"

#include <math.h>

#define INV_SQRT2 0.70710678118654752440f   /* 1/sqrt(2) */
#define INV_SQRT2PI 0.39894228040143267794f /* 1/sqrt(2 pi) */

/* y = max(x, 0); NaN propagates (as torch.relu), -0 becomes +0. */
void mxp_generic_relu_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v <= 0.0f ? 0.0f : v;
    }
}

/* dx = dy where x > 0, else 0 (a select, so a non-finite dy in a dead unit
 * does not become NaN, as PyTorch's threshold_backward). */
void mxp_generic_relu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). */
void mxp_generic_gelu_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * INV_SQRT2));
    }
}

/* dx = dy * (Phi(x) + x phi(x)), phi the standard normal density. */
void mxp_generic_gelu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * INV_SQRT2));
        float pdf = INV_SQRT2PI * expf(-0.5f * v * v);
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

void mxp_generic_tanh_fwd(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

/* dx = dy * (1 - y^2), y the forward output. */
void mxp_generic_tanh_bwd(float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

void mxp_generic_axpy(float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}

void mxp_generic_scale(float *x, float a, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] *= a;
}

/* Inverted dropout (kernels.h): word counter + i of stream key decides
 * element i; one Philox block per 4 consecutive words. */
void mxp_generic_dropout(float *y, const float *x, size_t n, uint64_t key, uint64_t counter,
                         uint32_t drop_below, float scale) {
    uint32_t w[4];
    uint64_t have = 0;
    bool valid = false;
    for (size_t i = 0; i < n; i++) {
        const uint64_t c = counter + i;
        if (!valid || c >> 2 != have) {
            have = c >> 2;
            mxp_philox_block(key, have, w);
            valid = true;
        }
        y[i] = x[i] * (w[c & 3] < drop_below ? 0.0f : scale);
    }
}
