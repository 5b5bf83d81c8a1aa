/* src/num/fp16.c: scalar reference conversions between FP32 and IEEE 754
 * binary16 (FP16: 1 sign, 5 exponent bits with bias 15, 10 mantissa bits).
 *
 * Entry points: mxp_fp16_to_f32, mxp_f32_to_fp16 (round to nearest even),
 * mxp_f32_to_fp16_sr (stochastic rounding). Every bulk or SIMD converter
 * must match these bit for bit.
 *
 * Rules (see include/mixprec/num.h):
 *   - FP32 -> FP16 RNE: subnormal results are produced (smallest 2^-24,
 *     exactly 2^-25 rounds to +-0 as the tie goes to the even zero), +-0
 *     kept, |x| >= 65520 (the midpoint 65504..65536) and +-Inf give +-Inf.
 *   - NaN (explicit branch, never through the rounding add): sign kept,
 *     quiet bit set, the top 9 payload bits kept (as F16C vcvtps2ph does).
 *   - FP16 -> FP32 is exact; a NaN comes back quiet with its payload in the
 *     top mantissa bits (as F16C vcvtph2ps does).
 *   - SR: 13 random bits u = r & 0x1fff are added 13 bits below the FP16
 *     ulp and the sum truncated, so round up happens with probability
 *     (dropped part)/ulp quantised to 2^-13. For normal results that is
 *     exactly the 13 dropped FP32 bits. For subnormal results (ulp 2^-24)
 *     the same 13 bits are added at position 2^-37 of the absolute value,
 *     so the round-up probability is exact to 2^-13 of an ulp there too.
 *     Results past 65504 become +-Inf, as in RNE.
 * References: IEEE 754-2019 sec. 3.6, 4.3.1; Intel SDM VCVTPS2PH/VCVTPH2PS.
 */
#include <mixprec/num.h>

#include "num/bits.h"

#include <string.h>


/* FP32 magnitudes (bit patterns, sign cleared) at the FP16 boundaries. */
enum {
    F32_INF_BITS = 0x7f800000u,
    F32_FP16_OVF = 0x477ff000u,  /* 65520: RNE rounds to 65536 = Inf */
    F32_FP16_2P16 = 0x47800000u, /* 65536: always Inf */
    F32_FP16_MINN = 0x38800000u  /* 2^-14, the smallest FP16 normal */
};

float mxp_fp16_to_f32(mxp_fp16 h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu;
    uint32_t man = h.bits & 0x3ffu;
    if (exp == 0x1fu) {
        if (man == 0) return f32_from_bits(sign | F32_INF_BITS);
        return f32_from_bits(sign | F32_INF_BITS | 0x400000u | (man << 13));
    }
    if (exp == 0) {
        /* +-0 or subnormal man * 2^-24: exact in FP32 (a normal there). */
        float mag = (float)man * 0x1p-24f;
        return f32_from_bits(sign | f32_bits(mag));
    }
    return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Subnormal FP16 result for a finite FP32 magnitude `x` below 2^-14:
 * the number of 2^-24 units, rounded to nearest even. May return 0x400
 * (2^-14, the smallest normal) when rounding carries. */
static uint32_t fp16_subnormal_rne(uint32_t x) {
    uint32_t e = x >> 23;
    if (e < 102) return 0; /* |x| < 2^-25: nearer to 0 than to 2^-24 */
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    uint32_t s = 126u - e; /* |x| = m * 2^-24 / 2^s, 14 <= s <= 24 */
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

mxp_fp16 mxp_f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t x = u & 0x7fffffffu;
    mxp_fp16 h;
    if (x > F32_INF_BITS) { /* NaN: quiet, sign and top payload kept */
        h.bits = (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
        return h;
    }
    if (x >= F32_FP16_OVF) { /* overflow (or Inf) */
        h.bits = (uint16_t)(sign | 0x7c00u);
        return h;
    }
    if (x < F32_FP16_MINN) {
        h.bits = (uint16_t)(sign | fp16_subnormal_rne(x));
        return h;
    }
    /* Normal: rebias (127 -> 15) and round the 13 dropped bits to nearest
     * even; a mantissa carry correctly bumps the exponent. */
    uint32_t r = x - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    h.bits = (uint16_t)(sign | (r >> 13));
    return h;
}

mxp_fp16 mxp_f32_to_fp16_sr(float f, uint32_t r) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t x = u & 0x7fffffffu;
    uint32_t rnd = r & 0x1fffu;
    mxp_fp16 h;
    if (x > F32_INF_BITS) {
        h.bits = (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
        return h;
    }
    if (x >= F32_FP16_2P16) {
        h.bits = (uint16_t)(sign | 0x7c00u);
        return h;
    }
    uint32_t q;
    if (x < F32_FP16_MINN) {
        uint32_t e = x >> 23;
        if (e < 89) {
            q = 0; /* |x| < 2^-38: m + (u << (s-13)) < 2^s for all u */
        } else {
            /* |x| = m * 2^-24 / 2^s with 14 <= s <= 37 (m = 0 for an FP32
             * subnormal input, which e < 89 already covers). */
            uint64_t m = (uint64_t)((x & 0x7fffffu) | 0x800000u);
            uint32_t s = 126u - e;
            q = (uint32_t)((m + ((uint64_t)rnd << (s - 13u))) >> s);
        }
    } else {
        /* Below 2^16 the sum carries at most to 0x7c00, which is Inf. */
        q = (x - (112u << 23) + rnd) >> 13;
    }
    h.bits = (uint16_t)(sign | q);
    return h;
}
