/* kernels/x86_avx512/loops_convert.c: AVX-512 bulk dtype conversions, RNE
 * and stochastic rounding, and a vectorised Philox for the SR draws.
 *
 * Entry points: mxp_avx512_convert, mxp_avx512_convert_sr,
 * mxp_avx512_rng_fill (contracts in kernels/kernels.h and loops.h).
 *
 * Bit-exact with the scalar references of src/num (fp16.c, bf16.c) for
 * every input, NaN payloads included:
 *   - BF16 <- F32 SR uses integer arithmetic only, replicating the
 *     reference's carry trick and NaN branch; so does RNE for inputs that
 *     hold an FP32 subnormal, which vcvtne2ps2bf16 flushes to zero (DAZ)
 *     whereas the reference rounds them to BF16 subnormals. Every other
 *     RNE input goes through vcvtne2ps2bf16, 32 at a time (f32_to_bf16).
 *   - F16 <-> F32 RNE uses F16C (vcvtps2ph / vcvtph2ps), whose results equal
 *     the reference for all 2^32 / 2^16 inputs (checked exhaustively on the
 *     development CPU, with and without FTZ/DAZ). The kernels still clear
 *     FTZ/DAZ around their work (mxcsr_exact_enter), so FP16 subnormals
 *     survive whatever flush mode the caller set, on any CPU.
 *   - F16 <- F32 SR is integer arithmetic: the reference's subnormal branch
 *     (m + (r << (s - 13))) >> s equals ((m >> (s - 13)) + r) >> 13 for the
 *     13-bit r, which fits 32-bit lanes.
 *   - BF16 <-> F16 go through FP32 in registers (exact widening, one
 *     rounding), as the reference does through memory.
 *   - SR element i draws mxp_rng_at(seed, counter + i): Philox4x32-10 on 16
 *     blocks per vector (mulhilo from two vpmuludq), words transposed back
 *     into counter order. Calls whose counter range wraps 2^64 use the
 *     scalar reference.
 * Pairs involving FP8 go to loops_fp8.c. No alignment needed.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include <string.h>

/* ---- FP32 <-> BF16 ------------------------------------------------------ */

/* 16 FP32 bit patterns -> 16 BF16 in the low halves of 32-bit lanes (RNE). */
static inline __m512i bf16_rne_bits(__m512i u) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(nan, r, qnan);
}

/* As bf16_rne_bits with stochastic rounding by the low 16 bits of rnd. */
static inline __m512i bf16_sr_bits(__m512i u, __m512i rnd) {
    __m512i r = _mm512_add_epi32(u, _mm512_and_si512(rnd, _mm512_set1_epi32(0xffff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(nan, r, qnan);
}

static inline __m512 bf16_widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __m512 f16_widen(__m256i h) { return _mm512_cvtph_ps(h); }

static inline __m256i f16_rne(__m512 x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* F16 stochastic rounding of 16 FP32 bit patterns with 13 bits of rnd
 * (see the file comment and src/num/fp16.c). */
static inline __m512i f16_sr_bits(__m512i u, __m512i rnd) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512i x = _mm512_and_si512(u, abs_mask);
    __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000));
    __m512i r13 = _mm512_and_si512(rnd, _mm512_set1_epi32(0x1fff));
    /* normal: (x - (112 << 23) + r) >> 13 */
    __m512i qn = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_sub_epi32(x, _mm512_set1_epi32(112 << 23)), r13), 13);
    /* subnormal: (((m >> t) + r) >> 13), t = 113 - e; vpsrlvd gives 0 for t > 31 */
    __m512i e = _mm512_srli_epi32(x, 23);
    __m512i t = _mm512_sub_epi32(_mm512_set1_epi32(113), e);
    __m512i m = _mm512_or_si512(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffff)),
                                _mm512_set1_epi32(0x800000));
    __m512i qs = _mm512_srli_epi32(_mm512_add_epi32(_mm512_srlv_epi32(m, t), r13), 13);
    __mmask16 sub = _mm512_cmplt_epu32_mask(x, _mm512_set1_epi32(0x38800000));
    __m512i q = _mm512_mask_blend_epi32(sub, qn, qs);
    __mmask16 inf = _mm512_cmpge_epu32_mask(x, _mm512_set1_epi32(0x47800000));
    q = _mm512_mask_blend_epi32(inf, q, _mm512_set1_epi32(0x7c00));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(x, _mm512_set1_epi32(0x7f800000));
    __m512i qnan = _mm512_or_si512(_mm512_set1_epi32(0x7e00),
                                   _mm512_and_si512(_mm512_srli_epi32(x, 13),
                                                    _mm512_set1_epi32(0x3ff)));
    q = _mm512_mask_blend_epi32(nan, q, qnan);
    return _mm512_or_si512(q, sign);
}

/* ---- bulk RNE loops ----------------------------------------------------- */

/* Lanes of u (16 FP32 bit patterns) that are subnormal: exponent 0,
 * fraction != 0. */
static inline __mmask16 f32_subnormal_lanes(__m512i u) {
    const __mmask16 e0 = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_test_epi32_mask(e0, u, _mm512_set1_epi32(0x007fffff));
}

/* 32 values at a time through vcvtne2ps2bf16 unless one of them is an FP32
 * subnormal, which the instruction reads as zero: such pairs of vectors and
 * the tail take the integer path. On every other input the instruction
 * gives the reference's bits (RNE whatever MXCSR says; a NaN becomes its
 * upper half with the quiet bit set; a normal input never rounds to a BF16
 * subnormal): all 2^32 inputs were compared against bf16_rne_bits
 * (docs/results/kernels-passes.md). */
static void f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 16);
        if (f32_subnormal_lanes(a) | f32_subnormal_lanes(b)) {
            _mm512_mask_cvtepi32_storeu_epi16(dst + i, 0xffff, bf16_rne_bits(a));
            _mm512_mask_cvtepi32_storeu_epi16(dst + i + 16, 0xffff, bf16_rne_bits(b));
            continue;
        }
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b), _mm512_castsi512_ps(a));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    for (; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512i u = _mm512_maskz_loadu_epi32(k, src + i);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, k, bf16_rne_bits(u));
    }
}

static void bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(dst + i, k, bf16_widen(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

static void f32_to_f16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm256_mask_storeu_epi16(dst + i, k, f16_rne(_mm512_maskz_loadu_ps(k, src + i)));
    }
}

static void f16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(dst + i, k, f16_widen(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

static void bf16_to_f16(uint16_t *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm256_mask_storeu_epi16(dst + i, k, f16_rne(bf16_widen(_mm256_maskz_loadu_epi16(k, src + i))));
    }
}

static void f16_to_bf16(uint16_t *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 f = f16_widen(_mm256_maskz_loadu_epi16(k, src + i));
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, k, bf16_rne_bits(_mm512_castps_si512(f)));
    }
}

/* One range of a conversion (both types valid and different). */
static void convert_range(mxp_dtype dst_type, void *dst, mxp_dtype src_type,
                          const void *src, size_t n) {
    const bool f16 = dst_type == MXP_DTYPE_F16 || src_type == MXP_DTYPE_F16;
    unsigned csr = f16 ? mxcsr_exact_enter() : 0;
    if (dst_type == MXP_DTYPE_BF16 && src_type == MXP_DTYPE_F32)
        f32_to_bf16(dst, src, n);
    else if (dst_type == MXP_DTYPE_F32 && src_type == MXP_DTYPE_BF16)
        bf16_to_f32(dst, src, n);
    else if (dst_type == MXP_DTYPE_F16 && src_type == MXP_DTYPE_F32)
        f32_to_f16(dst, src, n);
    else if (dst_type == MXP_DTYPE_F32 && src_type == MXP_DTYPE_F16)
        f16_to_f32(dst, src, n);
    else if (dst_type == MXP_DTYPE_F16 && src_type == MXP_DTYPE_BF16)
        bf16_to_f16(dst, src, n);
    else if (dst_type == MXP_DTYPE_BF16 && src_type == MXP_DTYPE_F16)
        f16_to_bf16(dst, src, n);
    else
        mxp_convert(dst_type, dst, src_type, src, n);
    if (f16) mxcsr_exact_leave(csr);
}

typedef struct convert_ctx {
    mxp_dtype dst_type, src_type;
    void *dst;
    const void *src;
    size_t n;
    uint64_t seed, counter; /* SR only */
} convert_ctx;

static void convert_task(void *ctx, int i, int count) {
    const convert_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    size_t ds = mxp_dtype_info(c->dst_type)->size, ss = mxp_dtype_info(c->src_type)->size;
    convert_range(c->dst_type, (char *)c->dst + lo * ds, c->src_type,
                  (const char *)c->src + lo * ss, hi - lo);
}

/* Contract: mxp_convert (include/mixprec/num.h), bit for bit. Large
 * buffers are split over the kernel thread pool (element-wise: same bits). */
void mxp_avx512_convert(mxp_dtype dst_type, void *dst, mxp_dtype src_type,
                        const void *src, size_t n) {
    if (n == 0 || (unsigned)dst_type >= MXP_DTYPE_COUNT ||
        (unsigned)src_type >= MXP_DTYPE_COUNT)
        return;
    if (dst_type == src_type) {
        memcpy(dst, src, n * mxp_dtype_info(dst_type)->size);
        return;
    }
    if (dst_type == MXP_DTYPE_F8_E4M3 || dst_type == MXP_DTYPE_F8_E5M2 ||
        src_type == MXP_DTYPE_F8_E4M3 || src_type == MXP_DTYPE_F8_E5M2) {
        mxp_avx512_convert_fp8(dst_type, dst, src_type, src, n);
        return;
    }
    convert_ctx c = {.dst_type = dst_type, .src_type = src_type, .dst = dst, .src = src, .n = n};
    par_run(n, convert_task, &c);
}

/* ---- Philox4x32-10, 16 blocks per vector -------------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* hi/lo 32 bits of the 16 lane products a * m. */
static inline void mulhilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
    __m512i pe = _mm512_mul_epu32(a, m);
    __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *hi = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(pe, 32), po);
    *lo = _mm512_mask_blend_epi32(0xaaaa, pe, _mm512_slli_epi64(po, 32));
}

/* The 64 words of blocks b, b+1, ..., b+15 (b + 15 < 2^64), in counter
 * order: out[4 j + w] = word w of block b + j. */
static void philox16(uint64_t b, uint64_t seed, uint32_t out[64]) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i base_lo = _mm512_set1_epi32((int)(uint32_t)b);
    __m512i x0 = _mm512_add_epi32(base_lo, iota);
    __mmask16 carry = _mm512_cmplt_epu32_mask(x0, base_lo);
    __m512i x1 = _mm512_mask_add_epi32(_mm512_set1_epi32((int)(uint32_t)(b >> 32)), carry,
                                       _mm512_set1_epi32((int)(uint32_t)(b >> 32)),
                                       _mm512_set1_epi32(1));
    __m512i x2 = _mm512_setzero_si512(), x3 = _mm512_setzero_si512();
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo16(x0, m0, &hi0, &lo0);
        mulhilo16(x2, m1, &hi1, &lo1);
        __m512i y0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32((int)k0));
        __m512i y2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32((int)k1));
        x0 = y0;
        x1 = lo1;
        x2 = y2;
        x3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    /* 4 x 16 -> 16 x 4: interleave words, then transpose 128-bit lanes. */
    __m512i t0 = _mm512_unpacklo_epi32(x0, x1), t1 = _mm512_unpackhi_epi32(x0, x1);
    __m512i t2 = _mm512_unpacklo_epi32(x2, x3), t3 = _mm512_unpackhi_epi32(x2, x3);
    __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    __m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), c = _mm512_shuffle_i32x4(u0, u1, 0xee);
    __m512i bb = _mm512_shuffle_i32x4(u2, u3, 0x44), d = _mm512_shuffle_i32x4(u2, u3, 0xee);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(a, bb, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(a, bb, 0xdd));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(c, d, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(c, d, 0xdd));
}

/* Contract: loops.h. */
void mxp_avx512_rng_fill(uint32_t *out, size_t n, uint64_t seed, uint64_t counter) {
    if (n == 0) return;
    if (counter + (uint64_t)n - 1u < counter) { /* the range wraps 2^64 */
        for (size_t j = 0; j < n; j++) out[j] = mxp_rng_at(seed, counter + j);
        return;
    }
    uint64_t block = counter >> 2;
    size_t skip = (size_t)(counter & 3u); /* words of the first block before counter */
    size_t j = 0;                         /* next output index */
    uint32_t tmp[64];
    while (j < n) {
        /* this group covers out[j - skip .. j - skip + 64) */
        if (skip == 0 && n - j >= 64) {
            philox16(block, seed, out + j);
            j += 64;
        } else {
            philox16(block, seed, tmp);
            size_t take = 64 - skip < n - j ? 64 - skip : n - j;
            memcpy(out + j, tmp + skip, take * sizeof *out);
            j += take;
            skip = 0;
        }
        block += 16;
    }
}

/* ---- stochastic rounding ------------------------------------------------ */

enum { SR_CHUNK = 512 };

/* SR of src[0..n) into the BF16/F16 buffer dst; element i draws
 * mxp_rng_at(seed, counter + i). */
static void convert_sr_range(mxp_dtype dst_type, uint16_t *out, const float *src, size_t n,
                             uint64_t seed, uint64_t counter) {
    uint32_t rnd[SR_CHUNK];
    for (size_t off = 0; off < n; off += SR_CHUNK) {
        size_t len = n - off < SR_CHUNK ? n - off : SR_CHUNK;
        mxp_avx512_rng_fill(rnd, len, seed, counter + off);
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = lanes16(len - i);
            __m512i u = _mm512_maskz_loadu_epi32(k, src + off + i);
            __m512i r = _mm512_maskz_loadu_epi32(k, rnd + i);
            __m512i h = dst_type == MXP_DTYPE_BF16 ? bf16_sr_bits(u, r) : f16_sr_bits(u, r);
            _mm512_mask_cvtepi32_storeu_epi16(out + off + i, k, h);
        }
    }
}

static void convert_sr_task(void *ctx, int i, int count) {
    const convert_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    convert_sr_range(c->dst_type, (uint16_t *)c->dst + lo, (const float *)c->src + lo, hi - lo,
                     c->seed, c->counter + lo);
}

/* Contract: mxp_convert_sr (include/mixprec/num.h), bit for bit. Large
 * buffers are split over the kernel thread pool: element i still draws
 * (seed, counter + i), so the bits do not depend on the split. */
void mxp_avx512_convert_sr(mxp_dtype dst_type, void *dst, const float *src,
                           size_t n, uint64_t seed, uint64_t counter) {
    if (dst_type != MXP_DTYPE_BF16 && dst_type != MXP_DTYPE_F16) {
        mxp_convert_sr(dst_type, dst, src, n, seed, counter);
        return;
    }
    convert_ctx c = {.dst_type = dst_type, .src_type = MXP_DTYPE_F32, .dst = dst, .src = src,
                     .n = n, .seed = seed, .counter = counter};
    par_run(n, convert_sr_task, &c);
}
