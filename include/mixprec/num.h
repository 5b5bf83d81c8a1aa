/* mixprec/num.h: the number formats mixprec computes and stores in.
 *
 * FP32, BF16, FP16, FP8-E4M3 ("fn": no Inf, max 448) and FP8-E5M2 (IEEE-like,
 * max 57344). 16/8-bit values are single-member structs so they cannot be
 * mixed up with integers. Each format has ONE scalar reference conversion
 * from and to FP32; every bulk or SIMD converter must match it bit for bit.
 *
 * Rounding FP32 -> narrow:
 *   - round-to-nearest-even (RNE), subnormals produced, +-0 kept;
 *   - NaN in gives a quiet NaN out with the sign kept (explicit NaN branch);
 *   - overflow gives +-Inf for FP16, BF16 and E5M2; E4M3 has no Inf, so the
 *     caller picks MXP_FP8_SATURATE (clamp to +-448, as Transformer Engine
 *     casts do) or MXP_FP8_NAN (overflow becomes NaN, the OCP "fn" cast).
 *     Inputs of +-Inf map to +-448 when saturating, to NaN otherwise.
 *   - stochastic rounding (SR) for BF16/FP16: add `r` (uniform random bits)
 *     below the kept mantissa and truncate, so E[round(x)] = x. Values
 *     rounding past the largest finite value become Inf as in RNE. The
 *     LOW bits of r are used (r & 0xffff for BF16, r & 0x1fff for FP16).
 *     FP16 results in the subnormal range add those 13 bits 13 bits below
 *     the subnormal ulp (2^-37), so P(round up) is exact to 2^-13 ulp.
 *   - widening is exact; FP16 and FP8 NaNs widen to quiet FP32 NaNs (as
 *     F16C does), BF16 widens by the plain 16-bit shift. Exact NaN payloads
 *     are not part of the contract beyond "NaN, same sign".
 * References: IEEE 754-2019; OCP 8-bit Floating Point spec (2023).
 */
#ifndef MIXPREC_NUM_H
#define MIXPREC_NUM_H

#include <mixprec/base.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_fp16 { uint16_t bits; } mxp_fp16;
typedef struct mxp_bf16 { uint16_t bits; } mxp_bf16;
typedef struct mxp_fp8_e4m3 { uint8_t bits; } mxp_fp8_e4m3;
typedef struct mxp_fp8_e5m2 { uint8_t bits; } mxp_fp8_e5m2;

typedef enum mxp_dtype {
    MXP_DTYPE_F32,
    MXP_DTYPE_BF16,
    MXP_DTYPE_F16,
    MXP_DTYPE_F8_E4M3,
    MXP_DTYPE_F8_E5M2,
    MXP_DTYPE_COUNT
} mxp_dtype;

typedef struct mxp_dtype_traits {
    const char *name;     /* "f32", "bf16", "f16", "f8_e4m3", "f8_e5m2" */
    const char *st_name;  /* safetensors: "F32", "BF16", "F16", "F8_E4M3", "F8_E5M2" */
    size_t size;          /* bytes per element */
    int exp_bits, man_bits;
    bool has_inf;
    double max;           /* largest finite value */
    double min_normal;    /* smallest positive normal */
    double min_subnormal; /* smallest positive subnormal */
    double epsilon;       /* 2^-man_bits: gap above 1.0 */
} mxp_dtype_traits;

MXP_API const mxp_dtype_traits *mxp_dtype_info(mxp_dtype t);
MXP_API const char *mxp_dtype_name(mxp_dtype t);
/* Accepts the trait names and the common aliases float32/fp32, bfloat16,
 * float16/fp16/half, e4m3/fp8_e4m3, e5m2/fp8_e5m2, ignoring ASCII case (so
 * the safetensors names parse too). On failure *out is untouched and err
 * names the input and lists the accepted values (MXP_ERR_INVALID_ARG).
 * mxp_dtype_info returns NULL and mxp_dtype_name "invalid" for a value
 * outside the enum. */
MXP_API mxp_status mxp_dtype_parse(const char *s, mxp_dtype *out, mxp_error *err);

typedef enum mxp_fp8_overflow {
    MXP_FP8_SATURATE, /* |x| > 448 (or Inf) -> +-448 */
    MXP_FP8_NAN,      /* |x| beyond the rounding range (or Inf) -> NaN */
    MXP_FP8_OVERFLOW_COUNT
} mxp_fp8_overflow;

/* ---- scalar reference conversions -------------------------------------- */

MXP_API float mxp_fp16_to_f32(mxp_fp16 h);
MXP_API mxp_fp16 mxp_f32_to_fp16(float f);
/* Stochastic rounding with 13 random bits taken from r. */
MXP_API mxp_fp16 mxp_f32_to_fp16_sr(float f, uint32_t r);

MXP_API float mxp_bf16_to_f32(mxp_bf16 h);
MXP_API mxp_bf16 mxp_f32_to_bf16(float f);
/* Stochastic rounding with 16 random bits taken from r. */
MXP_API mxp_bf16 mxp_f32_to_bf16_sr(float f, uint32_t r);

MXP_API float mxp_fp8_e4m3_to_f32(mxp_fp8_e4m3 v);
MXP_API mxp_fp8_e4m3 mxp_f32_to_fp8_e4m3(float f, mxp_fp8_overflow mode);
MXP_API float mxp_fp8_e5m2_to_f32(mxp_fp8_e5m2 v);
MXP_API mxp_fp8_e5m2 mxp_f32_to_fp8_e5m2(float f);

/* Round f to the nearest value representable in t and return it as FP32
 * (identity for F32; E4M3 saturates). */
MXP_API float mxp_round_to(mxp_dtype t, float f);

/* ---- bulk conversions (reference, scalar loops) -------------------------
 * dst and src hold n elements of their dtypes and must not overlap; no
 * alignment is required. An out-of-range dtype makes a conversion a no-op
 * and mxp_load_f32 return NaN.
 * F32 -> narrow uses RNE (E4M3 saturates). Narrow -> narrow goes via F32. */
MXP_API void mxp_convert(mxp_dtype dst_type, void *dst, mxp_dtype src_type, const void *src,
                         size_t n);
/* As mxp_convert from F32 into BF16 or F16 (other targets: RNE) with
 * stochastic rounding; element i uses mxp_rng_at(seed, counter + i). */
MXP_API void mxp_convert_sr(mxp_dtype dst_type, void *dst, const float *src, size_t n,
                            uint64_t seed, uint64_t counter);
/* Element i of a typed buffer, as FP32. */
MXP_API float mxp_load_f32(mxp_dtype t, const void *buf, size_t i);
/* Store f (RNE) as element i of a typed buffer. */
MXP_API void mxp_store_f32(mxp_dtype t, void *buf, size_t i, float f);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_NUM_H */
