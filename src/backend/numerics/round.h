/* backend/numerics/round.h: the scalar reference conversions between FP32
 * and the 16-bit formats (BF16, FP16), round to nearest even and
 * stochastic, on raw bit patterns so that gcc and nvcc share them.
 *
 * Entry points: mxp_nr_bf16_to_f32, mxp_nr_f32_to_bf16, mxp_nr_f32_to_bf16_sr,
 * mxp_nr_fp16_to_f32, mxp_nr_f32_to_fp16, mxp_nr_f32_to_fp16_sr. The
 * public wrappers (mxp_f32_to_bf16 ... in num/bf16.c, num/fp16.c) call these,
 * so they are THE reference; the rules (NaN, overflow, subnormal, SR
 * probabilities) are written down in those two files and num.h.
 * References: IEEE 754-2019 sec. 3.6, 4.3.1; Intel SDM VCVTNEPS2BF16,
 * VCVTPS2PH/VCVTPH2PS.
 */
#ifndef MIXPREC_BACKEND_NUMERICS_ROUND_H
#define MIXPREC_BACKEND_NUMERICS_ROUND_H

#include "backend/numerics/hd.h"

/* ---- BF16 ---------------------------------------------------------------- */

MXP_HD static inline float mxp_nr_bf16_to_f32(uint16_t h) {
    return mxp_hd_f32_from_bits((uint32_t)h << 16);
}

/* RNE by the carry trick; NaN: sign and top payload kept, quiet bit set. */
MXP_HD static inline uint16_t mxp_nr_f32_to_bf16(float f) {
    uint32_t u = mxp_hd_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* no 32-bit overflow: max 0x7f800000 */
    return (uint16_t)(u >> 16);
}

/* SR: the 16 random bits r & 0xffff added to the dropped bits, truncated. */
MXP_HD static inline uint16_t mxp_nr_f32_to_bf16_sr(float f, uint32_t r) {
    uint32_t u = mxp_hd_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += r & 0xffffu; /* Inf has zero low bits: stays Inf */
    return (uint16_t)(u >> 16);
}

/* ---- FP16 ---------------------------------------------------------------- */

/* FP32 magnitudes (bit patterns, sign cleared) at the FP16 boundaries. */
#define MXP_NR_F32_INF 0x7f800000u
#define MXP_NR_F32_FP16_OVF 0x477ff000u  /* 65520: RNE rounds to 65536 = Inf */
#define MXP_NR_F32_FP16_2P16 0x47800000u /* 65536: always Inf */
#define MXP_NR_F32_FP16_MINN 0x38800000u /* 2^-14, the smallest FP16 normal */

MXP_HD static inline float mxp_nr_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) {
        if (man == 0) return mxp_hd_f32_from_bits(sign | MXP_NR_F32_INF);
        return mxp_hd_f32_from_bits(sign | MXP_NR_F32_INF | 0x400000u | (man << 13));
    }
    if (exp == 0) { /* +-0 or subnormal man * 2^-24: exact in FP32 */
        float mag = (float)man * 0x1p-24f;
        return mxp_hd_f32_from_bits(sign | mxp_hd_f32_bits(mag));
    }
    return mxp_hd_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Subnormal FP16 result for a finite FP32 magnitude x below 2^-14: the
 * number of 2^-24 units, RNE; may return 0x400 when rounding carries. */
MXP_HD static inline uint32_t mxp_nr_fp16_subnormal_rne(uint32_t x) {
    uint32_t e = x >> 23;
    if (e < 102) return 0; /* |x| < 2^-25 */
    uint32_t m = (x & 0x7fffffu) | 0x800000u;
    uint32_t s = 126u - e; /* |x| = m * 2^-24 / 2^s, 14 <= s <= 24 */
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

MXP_HD static inline uint16_t mxp_nr_f32_to_fp16(float f) {
    uint32_t u = mxp_hd_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t x = u & 0x7fffffffu;
    if (x > MXP_NR_F32_INF) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= MXP_NR_F32_FP16_OVF) return (uint16_t)(sign | 0x7c00u);
    if (x < MXP_NR_F32_FP16_MINN) return (uint16_t)(sign | mxp_nr_fp16_subnormal_rne(x));
    /* Normal: rebias (127 -> 15), round the 13 dropped bits to nearest even;
     * a mantissa carry correctly bumps the exponent. */
    uint32_t r = x - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* SR: 13 random bits added 13 bits below the FP16 ulp, then truncated
 * (subnormal results: at position 2^-37 of the magnitude). */
MXP_HD static inline uint16_t mxp_nr_f32_to_fp16_sr(float f, uint32_t r) {
    uint32_t u = mxp_hd_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t x = u & 0x7fffffffu;
    uint32_t rnd = r & 0x1fffu;
    if (x > MXP_NR_F32_INF) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= MXP_NR_F32_FP16_2P16) return (uint16_t)(sign | 0x7c00u);
    uint32_t q;
    if (x < MXP_NR_F32_FP16_MINN) {
        uint32_t e = x >> 23;
        if (e < 89) {
            q = 0; /* |x| < 2^-38 */
        } else {
            uint64_t m = (uint64_t)((x & 0x7fffffu) | 0x800000u);
            uint32_t s = 126u - e; /* 14 <= s <= 37 */
            q = (uint32_t)((m + ((uint64_t)rnd << (s - 13u))) >> s);
        }
    } else {
        q = (x - (112u << 23) + rnd) >> 13; /* carries at most to 0x7c00 = Inf */
    }
    return (uint16_t)(sign | q);
}

#endif /* MIXPREC_BACKEND_NUMERICS_ROUND_H */
