/* src/num/fp8.c: scalar reference conversions between FP32 and the two
 * OCP 8-bit floating-point formats.
 *
 *   E4M3 ("fn"): bias 7, 3 mantissa bits, no Inf. Largest finite 448
 *     (S.1111.110), NaN only S.1111.111, smallest normal 2^-6, smallest
 *     subnormal 2^-9.
 *   E5M2: bias 15, 2 mantissa bits, IEEE-like. Largest finite 57344
 *     (S.11110.11), Inf S.11111.00, NaN S.11111.{01,10,11}, smallest normal
 *     2^-14, smallest subnormal 2^-16.
 *
 * Entry points: mxp_fp8_e4m3_to_f32, mxp_f32_to_fp8_e4m3,
 * mxp_fp8_e5m2_to_f32, mxp_f32_to_fp8_e5m2.
 *
 * Rules (see include/mixprec/num.h):
 *   - FP32 -> FP8 rounds to nearest even, subnormals produced, +-0 kept
 *     (tiny values round to a zero of their own sign).
 *   - NaN in: E4M3 gives S.1111.111, E5M2 gives the quiet S.11111.10; the
 *     sign is kept.
 *   - E5M2 overflow: |x| >= 61440 (the midpoint 57344..65536, whose tie
 *     goes to the even 65536) and +-Inf give +-Inf.
 *   - E4M3 overflow, MXP_FP8_SATURATE: |x| > 448 and +-Inf give +-448.
 *     MXP_FP8_NAN: |x| > 464 (beyond the midpoint 448..480; the tie at 464
 *     goes to the even 448) and +-Inf give NaN of the input's sign.
 *   - FP8 -> FP32 is exact; E4M3 NaN becomes a quiet FP32 NaN, E5M2 NaN a
 *     quiet FP32 NaN with its payload bit kept; signs kept.
 * References: OCP 8-bit Floating Point Specification (OFP8) rev 1.0, 2023;
 * Micikevicius et al., "FP8 Formats for Deep Learning", 2022.
 */
#include <mixprec/num.h>

#include "num/bits.h"

#include <string.h>


/* Round a finite FP32 magnitude `x` (bit pattern, sign clear, below 2^16)
 * to nearest even in a format with `man` mantissa bits and exponent bias
 * `bias`, with unbounded exponent range on top: the result is the code
 * (exponent << man | mantissa) the value would have, possibly past the
 * format's largest finite code. Subnormal results use exponent field 0. */
static uint32_t fp8_round_code(uint32_t x, uint32_t man, uint32_t bias) {
    uint32_t e = x >> 23;
    uint32_t drop = 23u - man;
    if (e > 127u - bias) {
        /* Normal: rebias and round the dropped bits (carry bumps the
         * exponent, as it should). */
        uint32_t r = x - ((127u - bias) << 23);
        r += ((1u << drop) >> 1) - 1u + ((r >> drop) & 1u);
        return r >> drop;
    }
    /* Subnormal: |x| = m * 2^(1-bias-man) / 2^s. */
    uint32_t s = 151u - bias - man - e;
    if (s > 24u) return 0; /* |x| < half the smallest subnormal */
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

/* Exact FP32 value of a non-NaN, non-Inf magnitude code. */
static float fp8_decode_mag(uint32_t code, uint32_t man, uint32_t bias) {
    uint32_t exp = code >> man;
    uint32_t m = code & ((1u << man) - 1u);
    if (exp == 0) {
        /* m * 2^(1-bias-man): exact, and a normal FP32. */
        return (float)m * f32_from_bits((128u - bias - man) << 23);
    }
    return f32_from_bits(((exp + 127u - bias) << 23) | (m << (23u - man)));
}

float mxp_fp8_e4m3_to_f32(mxp_fp8_e4m3 v) {
    uint32_t sign = (uint32_t)(v.bits & 0x80u) << 24;
    uint32_t code = v.bits & 0x7fu;
    if (code == 0x7fu) return f32_from_bits(sign | 0x7fc00000u);
    return f32_from_bits(sign | f32_bits(fp8_decode_mag(code, 3, 7)));
}

mxp_fp8_e4m3 mxp_f32_to_fp8_e4m3(float f, mxp_fp8_overflow mode) {
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t x = u & 0x7fffffffu;
    mxp_fp8_e4m3 v;
    uint32_t code;
    if (x > 0x7f800000u) {
        code = 0x7fu;
    } else if (x >= 0x47800000u) { /* |x| >= 2^16 or Inf: overflow */
        code = mode == MXP_FP8_NAN ? 0x7fu : 0x7eu;
    } else {
        code = fp8_round_code(x, 3, 7);
        if (code > 0x7eu) code = mode == MXP_FP8_NAN ? 0x7fu : 0x7eu;
    }
    v.bits = (uint8_t)(sign | code);
    return v;
}

float mxp_fp8_e5m2_to_f32(mxp_fp8_e5m2 v) {
    uint32_t sign = (uint32_t)(v.bits & 0x80u) << 24;
    uint32_t code = v.bits & 0x7fu;
    if (code >= 0x7cu) {
        uint32_t m = code & 3u;
        if (m == 0) return f32_from_bits(sign | 0x7f800000u);
        return f32_from_bits(sign | 0x7fc00000u | (m << 21));
    }
    return f32_from_bits(sign | f32_bits(fp8_decode_mag(code, 2, 15)));
}

mxp_fp8_e5m2 mxp_f32_to_fp8_e5m2(float f) {
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t x = u & 0x7fffffffu;
    mxp_fp8_e5m2 v;
    uint32_t code;
    if (x > 0x7f800000u) {
        code = 0x7eu;
    } else if (x >= 0x47800000u) { /* |x| >= 2^16 or Inf */
        code = 0x7cu;
    } else {
        code = fp8_round_code(x, 2, 15);
        if (code > 0x7bu) code = 0x7cu;
    }
    v.bits = (uint8_t)(sign | code);
    return v;
}
