/* kernels/x86_avx512/loops_fp8.c: AVX-512 FP8 (E4M3, E5M2) conversions and
 * the scaled FP8 quantise of the FP8 emulation.
 *
 * Entry points: mxp_avx512_convert_fp8 (the FP8 pairs of the convert slot),
 * mxp_avx512_f32_to_fp8 (the f32_to_fp8 slot: E4M3 saturating or NaN on
 * overflow), mxp_avx512_fp8_quantize (the fp8_quantize slot); contracts in
 * kernels/kernels.h and loops.h.
 *
 * Bit-exact with the scalar references of src/num/fp8.c (and, for the
 * quantise, with kernels/generic/fp8.c) for every input:
 *   - FP32 -> FP8 is integer arithmetic on the FP32 bits, the reference's
 *     fp8_round_code in 32-bit lanes: normal results rebias and round with
 *     the carry trick; subnormal results round m >> s to nearest even as
 *     (m + 2^(s-1) - 1 + ((m >> s) & 1)) >> s, which equals the reference's
 *     remainder test; then the overflow and NaN codes of each format.
 *     No floating-point arithmetic, so MXCSR cannot alter a result.
 *   - E5M2 -> FP32: E5M2 is the upper byte of an FP16, widened by vcvtph2ps
 *     (exact; FP16 NaN quieting keeps E5M2's payload bits at the reference's
 *     positions). E4M3 -> FP32: two 64-entry vpermt2w lookups in a BF16 table
 *     filled from the reference mxp_fp8_e4m3_to_f32 (every E4M3 value and its
 *     NaN are exact in BF16), then the BF16 shift.
 *   - FP8 <-> BF16 / FP16 and E4M3 <-> E5M2 go through FP32 in registers,
 *     as the reference goes through FP32 (exact widening, one rounding).
 *   - the quantise replicates the generic kernel's operations in the same
 *     order (x * scale, the integer round of normals, nearbyint(a / q) * q
 *     for subnormals, saturation), so it gives the same bits under any
 *     MXCSR flush setting; its amax is an exact maximum and its non-finite
 *     report (the last NaN, else +Inf) is rebuilt per part in order.
 * The conversions clear FTZ/DAZ around their work (vcvtph2ps, vcvtps2ph);
 * the quantise deliberately runs under the caller's MXCSR, as the generic
 * one does. Large buffers are split over the kernel thread pool.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include "kernels/generic/generic.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---- FP8 -> FP32 ------------------------------------------------------- */

/* BF16 bits of the 128 E4M3 magnitudes, as four zmm of 32 entries. */
static uint16_t e4m3_bf16[128] __attribute__((aligned(64)));
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
    for (int i = 0; i < 128; i++) {
        float f = mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){(uint8_t)i});
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        e4m3_bf16[i] = (uint16_t)(u >> 16);
    }
}

/* 16 E4M3 bytes (lanes outside k read as 0) widened to FP32. */
static inline __m512 e4m3_widen(const uint8_t *p, __mmask16 k) {
    const __m512i *t = (const __m512i *)e4m3_bf16;
    __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, p));
    __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
    /* 16-bit lookups on the 32-bit lanes: the high halves index entry 0 */
    __m512i lo = _mm512_permutex2var_epi16(_mm512_load_si512(t), mag, _mm512_load_si512(t + 1));
    __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(t + 2), mag, _mm512_load_si512(t + 3));
    __m512i v = _mm512_mask_blend_epi32(_mm512_test_epi32_mask(mag, _mm512_set1_epi32(0x40)), lo, hi);
    v = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(v, 16), sign));
}

/* 16 E5M2 bytes widened to FP32 through FP16. */
static inline __m512 e5m2_widen(const uint8_t *p, __mmask16 k) {
    __m128i b = _mm_maskz_loadu_epi8(k, p);
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
}

/* ---- FP32 -> FP8 ------------------------------------------------------- */

/* fp8_round_code of num/fp8.c on 16 magnitudes x (finite, below 2^16):
 * the code with unbounded exponent range. */
static inline __m512i round_code(__m512i x, const uint32_t man, const uint32_t bias) {
    const uint32_t drop = 23u - man;
    const __m512i one = _mm512_set1_epi32(1);
    __m512i e = _mm512_srli_epi32(x, 23);
    /* normal */
    __m512i r = _mm512_sub_epi32(x, _mm512_set1_epi32((int)((127u - bias) << 23)));
    r = _mm512_add_epi32(r, _mm512_add_epi32(_mm512_set1_epi32((int)((1u << drop) / 2 - 1)),
                                             _mm512_and_si512(_mm512_srli_epi32(r, drop), one)));
    __m512i cn = _mm512_srli_epi32(r, drop);
    /* subnormal: s = 151 - bias - man - e, zero when s > 24 */
    __m512i s = _mm512_sub_epi32(_mm512_set1_epi32((int)(151u - bias - man)), e);
    __m512i m = _mm512_or_si512(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffff)),
                                _mm512_set1_epi32(0x800000));
    __m512i half_m1 = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_sub_epi32(s, one)), one);
    __m512i odd = _mm512_and_si512(_mm512_srlv_epi32(m, s), one);
    __m512i cs = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(m, half_m1), odd), s);
    cs = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(s, _mm512_set1_epi32(24)), cs);
    __mmask16 normal = _mm512_cmpgt_epu32_mask(e, _mm512_set1_epi32((int)(127u - bias)));
    return _mm512_mask_blend_epi32(normal, cs, cn);
}

/* 16 FP32 values -> E4M3 codes (in 32-bit lanes); nan_mode selects
 * MXP_FP8_NAN over MXP_FP8_SATURATE. */
static inline __m512i e4m3_bits(__m512 f, bool nan_mode) {
    __m512i u = _mm512_castps_si512(f);
    __m512i x = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
    const __m512i over = _mm512_set1_epi32(nan_mode ? 0x7f : 0x7e);
    __m512i code = round_code(x, 3, 7);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(code, _mm512_set1_epi32(0x7e)), over);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epu32_mask(x, _mm512_set1_epi32(0x47800000)), over);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(x, _mm512_set1_epi32(0x7f800000)),
                                 _mm512_set1_epi32(0x7f));
    return _mm512_or_si512(code, sign);
}

/* 16 FP32 values -> E5M2 codes (in 32-bit lanes). */
static inline __m512i e5m2_bits(__m512 f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i x = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
    const __m512i inf = _mm512_set1_epi32(0x7c);
    __m512i code = round_code(x, 2, 15);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(code, _mm512_set1_epi32(0x7b)), inf);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epu32_mask(x, _mm512_set1_epi32(0x47800000)), inf);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(x, _mm512_set1_epi32(0x7f800000)),
                                 _mm512_set1_epi32(0x7e));
    return _mm512_or_si512(code, sign);
}

/* ---- any dtype, 16 elements at a time ---------------------------------- */

/* Elements idx .. idx+16 of a typed buffer (lanes outside k are 0) as FP32. */
static inline __m512 load16(mxp_dtype t, const void *base, size_t idx, __mmask16 k) {
    switch (t) {
    case MXP_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)base + idx)), 16));
    case MXP_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)base + idx));
    case MXP_DTYPE_F8_E4M3:
        return e4m3_widen((const uint8_t *)base + idx, k);
    case MXP_DTYPE_F8_E5M2:
        return e5m2_widen((const uint8_t *)base + idx, k);
    default:
        return _mm512_maskz_loadu_ps(k, (const float *)base + idx);
    }
}

/* BF16 RNE of 16 FP32 values (num/bf16.c: carry trick, quiet NaN). */
static inline __m512i bf16_bits(__m512 f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(nan, r, qnan);
}

/* Store 16 FP32 values (lanes in k) as elements idx .. of a typed buffer,
 * RNE (E4M3 saturating or NaN on overflow as nan_mode says). */
static inline void store16(mxp_dtype t, void *base, size_t idx, __mmask16 k, __m512 f,
                           bool nan_mode) {
    switch (t) {
    case MXP_DTYPE_BF16:
        _mm512_mask_cvtepi32_storeu_epi16((uint16_t *)base + idx, k, bf16_bits(f));
        break;
    case MXP_DTYPE_F16:
        _mm256_mask_storeu_epi16((uint16_t *)base + idx, k,
                                 _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
    case MXP_DTYPE_F8_E4M3:
        _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)base + idx, k, e4m3_bits(f, nan_mode));
        break;
    case MXP_DTYPE_F8_E5M2:
        _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)base + idx, k, e5m2_bits(f));
        break;
    default:
        _mm512_mask_storeu_ps((float *)base + idx, k, f);
        break;
    }
}

/* The loop of one (src, dst) pair, specialised by the inlined switches. */
static inline __attribute__((always_inline)) void
convert_loop(mxp_dtype dt, void *dst, mxp_dtype st, const void *src, size_t n, bool nan_mode) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        store16(dt, dst, i, k, load16(st, src, i, k), nan_mode);
    }
}

#define FP8_SRC_CASES(DT, NAN_MODE)                                                 \
    switch (st) {                                                                   \
    case MXP_DTYPE_F32: convert_loop(DT, dst, MXP_DTYPE_F32, src, n, NAN_MODE); break;   \
    case MXP_DTYPE_BF16: convert_loop(DT, dst, MXP_DTYPE_BF16, src, n, NAN_MODE); break; \
    case MXP_DTYPE_F16: convert_loop(DT, dst, MXP_DTYPE_F16, src, n, NAN_MODE); break;   \
    case MXP_DTYPE_F8_E4M3: convert_loop(DT, dst, MXP_DTYPE_F8_E4M3, src, n, NAN_MODE); break; \
    default: convert_loop(DT, dst, MXP_DTYPE_F8_E5M2, src, n, NAN_MODE); break;     \
    }

/* One range: dt != st, one of them FP8, both valid. */
static void convert_range(mxp_dtype dt, void *dst, mxp_dtype st, const void *src, size_t n,
                          bool nan_mode) {
    unsigned csr = mxcsr_exact_enter();
    switch (dt) {
    case MXP_DTYPE_F32: FP8_SRC_CASES(MXP_DTYPE_F32, false) break;
    case MXP_DTYPE_BF16: FP8_SRC_CASES(MXP_DTYPE_BF16, false) break;
    case MXP_DTYPE_F16: FP8_SRC_CASES(MXP_DTYPE_F16, false) break;
    case MXP_DTYPE_F8_E4M3:
        if (nan_mode) {
            FP8_SRC_CASES(MXP_DTYPE_F8_E4M3, true)
        } else {
            FP8_SRC_CASES(MXP_DTYPE_F8_E4M3, false)
        }
        break;
    default: FP8_SRC_CASES(MXP_DTYPE_F8_E5M2, false) break;
    }
    mxcsr_exact_leave(csr);
}

typedef struct fp8_ctx {
    mxp_dtype dt, st;
    void *dst;
    const void *src;
    size_t n;
    bool nan_mode;
    /* quantise */
    float *qdst;
    const float *qsrc;
    float scale;
    bool e4;
    float amax[64];
    bool has_nan[64], has_inf[64];
    float last_nan[64];
} fp8_ctx;

static void convert_task(void *ctx, int i, int count) {
    const fp8_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    size_t ds = mxp_dtype_info(c->dt)->size, ss = mxp_dtype_info(c->st)->size;
    if (hi > lo)
        convert_range(c->dt, (char *)c->dst + lo * ds, c->st, (const char *)c->src + lo * ss,
                      hi - lo, c->nan_mode);
}

static void fp8_run(fp8_ctx *c, mxp_parallel_fn fn) {
    if (c->n < PAR_MIN) {
        fn(c, 0, 1);
        return;
    }
    int threads = mxp_threads_max();
    if (threads > 64) threads = 64;
    mxp_threads_run(threads, fn, c);
}

/* Contract: loops.h. */
void mxp_avx512_convert_fp8(mxp_dtype dst_type, void *dst, mxp_dtype src_type, const void *src,
                            size_t n) {
    pthread_once(&table_once, table_build);
    fp8_ctx c = {.dt = dst_type, .st = src_type, .dst = dst, .src = src, .n = n};
    fp8_run(&c, convert_task);
}

/* Contract: kernels.h (f32_to_fp8). */
void mxp_avx512_f32_to_fp8(mxp_dtype dst_type, void *dst, const float *src, size_t n,
                           mxp_fp8_overflow mode) {
    if (n == 0 || (dst_type != MXP_DTYPE_F8_E4M3 && dst_type != MXP_DTYPE_F8_E5M2)) return;
    fp8_ctx c = {.dt = dst_type, .st = MXP_DTYPE_F32, .dst = dst, .src = src, .n = n,
                 .nan_mode = dst_type == MXP_DTYPE_F8_E4M3 && mode == MXP_FP8_NAN};
    fp8_run(&c, convert_task);
}

/* ---- the scaled quantise ----------------------------------------------- */

/* The FP8 value (as FP32) of 16 values v, replicating the generic
 * kernel's fp8_round_sat (kernels/generic/fp8.c) lane by lane. */
static inline __m512 round_sat16(__m512 v, const uint32_t drop, __m512 min_normal, __m512 q,
                                 __m512 inv_q, __m512 fmax) {
    const __m512i sign_bit = _mm512_set1_epi32((int)0x80000000u);
    __m512i vs = _mm512_and_si512(_mm512_castps_si512(v), sign_bit);
    __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, _mm512_castps_si512(v)));
    /* normal: integer RNE on the bits, clamped to fmax */
    __m512i u = _mm512_castps_si512(a);
    u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32((int)((1u << drop) / 2 - 1)),
                                             _mm512_and_si512(_mm512_srli_epi32(u, drop),
                                                              _mm512_set1_epi32(1))));
    u = _mm512_and_si512(u, _mm512_set1_epi32((int)~((1u << drop) - 1u)));
    __m512 rn = _mm512_castsi512_ps(u);
    rn = _mm512_mask_mov_ps(rn, _mm512_cmp_ps_mask(rn, fmax, _CMP_GT_OQ), fmax);
    /* subnormal: nearbyint(a / q) * q */
    __m512 rs = _mm512_mul_ps(
        _mm512_roundscale_ps(_mm512_mul_ps(a, inv_q), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        q);
    __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, min_normal, _CMP_GE_OQ), rs, rn);
    r = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), vs));
    /* overflow and Inf saturate (with v's sign), NaN passes */
    __mmask16 ok = _mm512_cmp_ps_mask(a, fmax, _CMP_LE_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m512 sat = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(fmax), vs));
    r = _mm512_mask_mov_ps(r, (__mmask16)(~ok & ~nan), sat);
    return _mm512_mask_mov_ps(r, nan, v);
}

static void quantize_task(void *ctx, int i, int count) {
    fp8_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    const bool e4 = c->e4;
    const uint32_t drop = e4 ? 20u : 21u;
    const __m512 min_normal = _mm512_set1_ps(e4 ? 0x1p-6f : 0x1p-14f);
    const __m512 q = _mm512_set1_ps(e4 ? 0x1p-9f : 0x1p-16f);
    const __m512 inv_q = _mm512_set1_ps(e4 ? 0x1p9f : 0x1p16f);
    const __m512 fmax = _mm512_set1_ps(e4 ? 448.0f : 57344.0f);
    const __m512 vscale = _mm512_set1_ps(c->scale);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512 amax = _mm512_setzero_ps();
    bool has_nan = false, has_inf = false;
    float last_nan = 0.0f;
    for (size_t j = lo; j < hi; j += 16) {
        __mmask16 k = lanes16(hi - j);
        __m512 x = _mm512_maskz_loadu_ps(k, c->qsrc + j);
        __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), abs_mask));
        __mmask16 bad = _mm512_cmpge_epu32_mask(_mm512_castps_si512(a),
                                                _mm512_set1_epi32(0x7f800000));
        if (bad) { /* rare: record the last NaN (|x|, payload kept) and any Inf */
            float t[16];
            _mm512_storeu_ps(t, a);
            for (int l = 0; l < 16; l++) {
                if (!(bad >> l & 1)) continue;
                if (t[l] != t[l]) {
                    has_nan = true;
                    last_nan = t[l];
                } else {
                    has_inf = true;
                }
            }
        }
        __mmask16 gt = _mm512_mask_cmp_ps_mask((__mmask16)(k & ~bad), a, amax, _CMP_GT_OQ);
        amax = _mm512_mask_mov_ps(amax, gt, a);
        __m512 r = round_sat16(_mm512_mul_ps(x, vscale), drop, min_normal, q, inv_q, fmax);
        _mm512_mask_storeu_ps(c->qdst + j, k, r);
    }
    float lanes[16], m = 0.0f;
    _mm512_storeu_ps(lanes, amax);
    for (int l = 0; l < 16; l++)
        if (lanes[l] > m) m = lanes[l];
    c->amax[i] = m;
    c->has_nan[i] = has_nan;
    c->has_inf[i] = has_inf;
    c->last_nan[i] = last_nan;
}

/* Contract: mxp_fp8_quantize (include/mixprec/amp.h), bit for bit with
 * mxp_generic_fp8_quantize. */
void mxp_avx512_fp8_quantize(mxp_dtype fmt, float *dst, const float *src, size_t n,
                             float scale, float *amax_out) {
    fp8_ctx c = {.n = n, .qdst = dst, .qsrc = src, .scale = scale,
                 .e4 = fmt == MXP_DTYPE_F8_E4M3};
    int parts = 1;
    if (n >= PAR_MIN) {
        parts = mxp_threads_max();
        if (parts > 64) parts = 64;
        mxp_threads_run(parts, quantize_task, &c);
    } else if (n > 0) {
        quantize_task(&c, 0, 1);
    } else {
        *amax_out = 0.0f;
        return;
    }
    float amax = 0.0f, bad = 0.0f;
    bool nonfinite = false;
    for (int p = 0; p < parts; p++) {
        if (c.amax[p] > amax) amax = c.amax[p];
        if (c.has_nan[p]) bad = c.last_nan[p];
        else if (c.has_inf[p] && !nonfinite) bad = INFINITY;
        nonfinite |= c.has_nan[p] || c.has_inf[p];
    }
    *amax_out = nonfinite ? bad : amax;
}
