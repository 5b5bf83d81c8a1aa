/* src/num/convert.c: reference bulk conversions, typed element access and
 * rounding to a format, all built on the scalar conversions of fp16.c,
 * bf16.c and fp8.c.
 *
 * Entry points: mxp_convert, mxp_convert_sr, mxp_load_f32, mxp_store_f32,
 * mxp_round_to. These are plain scalar loops: the reference that faster
 * kernels are compared with, not the fast path.
 *
 * Conventions: buffers need no particular alignment (elements are copied
 * with memcpy); F32 -> narrow is RNE and E4M3 saturates; narrow -> narrow
 * goes through FP32 (exact widening, then one rounding). An out-of-range
 * mxp_dtype makes the conversions no-ops and mxp_load_f32 return NaN.
 */
#include <mixprec/num.h>

#include <math.h>
#include <string.h>

float mxp_load_f32(mxp_dtype t, const void *buf, size_t i) {
    const unsigned char *p = buf;
    switch (t) {
    case MXP_DTYPE_F32: {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    case MXP_DTYPE_BF16: {
        mxp_bf16 h;
        memcpy(&h.bits, p + i * 2, 2);
        return mxp_bf16_to_f32(h);
    }
    case MXP_DTYPE_F16: {
        mxp_fp16 h;
        memcpy(&h.bits, p + i * 2, 2);
        return mxp_fp16_to_f32(h);
    }
    case MXP_DTYPE_F8_E4M3: {
        mxp_fp8_e4m3 v = {p[i]};
        return mxp_fp8_e4m3_to_f32(v);
    }
    case MXP_DTYPE_F8_E5M2: {
        mxp_fp8_e5m2 v = {p[i]};
        return mxp_fp8_e5m2_to_f32(v);
    }
    default:
        return NAN;
    }
}

void mxp_store_f32(mxp_dtype t, void *buf, size_t i, float f) {
    unsigned char *p = buf;
    switch (t) {
    case MXP_DTYPE_F32:
        memcpy(p + i * 4, &f, 4);
        break;
    case MXP_DTYPE_BF16: {
        mxp_bf16 h = mxp_f32_to_bf16(f);
        memcpy(p + i * 2, &h.bits, 2);
        break;
    }
    case MXP_DTYPE_F16: {
        mxp_fp16 h = mxp_f32_to_fp16(f);
        memcpy(p + i * 2, &h.bits, 2);
        break;
    }
    case MXP_DTYPE_F8_E4M3:
        p[i] = mxp_f32_to_fp8_e4m3(f, MXP_FP8_SATURATE).bits;
        break;
    case MXP_DTYPE_F8_E5M2:
        p[i] = mxp_f32_to_fp8_e5m2(f).bits;
        break;
    default:
        break;
    }
}

float mxp_round_to(mxp_dtype t, float f) {
    switch (t) {
    case MXP_DTYPE_F32:
        return f;
    case MXP_DTYPE_BF16:
        return mxp_bf16_to_f32(mxp_f32_to_bf16(f));
    case MXP_DTYPE_F16:
        return mxp_fp16_to_f32(mxp_f32_to_fp16(f));
    case MXP_DTYPE_F8_E4M3:
        return mxp_fp8_e4m3_to_f32(mxp_f32_to_fp8_e4m3(f, MXP_FP8_SATURATE));
    case MXP_DTYPE_F8_E5M2:
        return mxp_fp8_e5m2_to_f32(mxp_f32_to_fp8_e5m2(f));
    default:
        return NAN;
    }
}

static bool dtype_valid(mxp_dtype t) {
    return (unsigned)t < MXP_DTYPE_COUNT;
}

/* Contract: see num.h. dst and src must not overlap. Identical types are
 * copied byte for byte (NaN payloads included). */
void mxp_convert(mxp_dtype dst_type, void *dst, mxp_dtype src_type,
                 const void *src, size_t n) {
    if (!dtype_valid(dst_type) || !dtype_valid(src_type) || n == 0) return;
    if (dst_type == src_type) {
        memcpy(dst, src, n * mxp_dtype_info(dst_type)->size);
        return;
    }
    for (size_t i = 0; i < n; i++)
        mxp_store_f32(dst_type, dst, i, mxp_load_f32(src_type, src, i));
}

/* Contract: see num.h. For BF16/F16 targets element i rounds with
 * r = mxp_rng_at(seed, counter + i), so a caller that converts a buffer in
 * pieces (counter advanced by each piece's n) gets the same bits as one
 * call. Other targets ignore seed and counter. */
void mxp_convert_sr(mxp_dtype dst_type, void *dst, const float *src, size_t n,
                    uint64_t seed, uint64_t counter) {
    unsigned char *p = dst;
    switch (dst_type) {
    case MXP_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint32_t r = mxp_rng_at(seed, counter + i);
            mxp_bf16 h = mxp_f32_to_bf16_sr(src[i], r);
            memcpy(p + i * 2, &h.bits, 2);
        }
        break;
    case MXP_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            uint32_t r = mxp_rng_at(seed, counter + i);
            mxp_fp16 h = mxp_f32_to_fp16_sr(src[i], r);
            memcpy(p + i * 2, &h.bits, 2);
        }
        break;
    default:
        mxp_convert(dst_type, dst, MXP_DTYPE_F32, src, n);
        break;
    }
}
