/* kernels/generic/fp8.c: reference FP8 kernels: narrowing FP32 to E4M3 /
 * E5M2 with a chosen E4M3 overflow mode, and the scaled quantise of the FP8
 * emulation (mxp_fp8_quantize's kernel).
 *
 * Entry points: mxp_generic_f32_to_fp8, mxp_generic_fp8_quantize
 * (contracts in kernels/kernels.h). The narrowing calls num's scalar
 * reference per element. The quantise computes the FP8 value directly in
 * FP32 (no tables, no branch on the code); tests/test_fp8.c checks it
 * against the reference round trip through the FP8 code, and the AVX-512
 * version (x86_avx512/loops_fp8.c) replicates its operations bit for bit.
 */
#include "kernels/generic/generic.h"

#include <math.h>
#include <string.h>

/* Contract: kernels.h (f32_to_fp8). */
void mxp_generic_f32_to_fp8(mxp_dtype dst_type, void *dst, const float *src, size_t n,
                            mxp_fp8_overflow mode) {
    uint8_t *d = dst;
    if (dst_type == MXP_DTYPE_F8_E4M3)
        for (size_t i = 0; i < n; i++) d[i] = mxp_f32_to_fp8_e4m3(src[i], mode).bits;
    else if (dst_type == MXP_DTYPE_F8_E5M2)
        for (size_t i = 0; i < n; i++) d[i] = mxp_f32_to_fp8_e5m2(src[i]).bits;
}

/* The FP8 value of v (as FP32) in a format with 23 - drop mantissa bits,
 * smallest normal min_normal, subnormal quantum q (= 1 / inv_q) and largest
 * finite fmax: round-to-nearest-even, subnormals on the fixed grid q,
 * |v| > fmax and +-Inf saturated, NaN passed through, the sign of zero
 * kept. Equal to the num module's reference conversion (round trip through
 * the FP8 code with saturation). */
static inline float fp8_round_sat(float v, uint32_t drop, float min_normal, float q,
                                  float inv_q, float fmax) {
    float a = fabsf(v);
    if (!(a <= fmax)) return isnan(v) ? v : copysignf(fmax, v); /* overflow, Inf */
    float r;
    if (a >= min_normal) {
        uint32_t u;
        memcpy(&u, &a, sizeof u);
        u += ((1u << drop) >> 1) - 1u + ((u >> drop) & 1u);
        u &= ~((1u << drop) - 1u);
        memcpy(&r, &u, sizeof r);
        if (r > fmax) r = fmax; /* rounded up past the largest finite */
    } else {
        r = nearbyintf(a * inv_q) * q; /* exact: powers of two, a/q < 2^man */
    }
    return copysignf(r, v);
}

/* Contract: kernels.h (fp8_quantize) and mxp_fp8_quantize (amp.h). */
void mxp_generic_fp8_quantize(mxp_dtype fmt, float *dst, const float *src, size_t n,
                              float scale, float *amax_out) {
    const bool e4 = fmt == MXP_DTYPE_F8_E4M3;
    const int man = e4 ? 3 : 2, emin = e4 ? -6 : -14;
    const float fmax = e4 ? 448.0f : 57344.0f;
    const uint32_t drop = 23u - (uint32_t)man;
    const float min_normal = ldexpf(1.0f, emin), q = ldexpf(1.0f, emin - man);
    const float inv_q = ldexpf(1.0f, man - emin);
    float amax = 0.0f;
    bool nonfinite = false;
    float bad = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float x = src[i];
        float a = fabsf(x);
        if (!isfinite(a)) {
            /* NaN wins over Inf: either way the history must see it */
            if (!nonfinite || isnan(a)) bad = a;
            nonfinite = true;
        } else if (a > amax) {
            amax = a;
        }
        dst[i] = fp8_round_sat(x * scale, drop, min_normal, q, inv_q, fmax);
    }
    *amax_out = nonfinite ? bad : amax;
}
