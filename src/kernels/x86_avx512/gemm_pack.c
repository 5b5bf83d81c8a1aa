/* kernels/x86_avx512/gemm_pack.c: packing of GEMM operands into micro-panels.
 *
 * Entry points: mxp_avx512_pack_f32, mxp_avx512_pack_bf16,
 * mxp_avx512_bf16_kcontig_subnormal, mxp_avx512_gemm_tables_init (layouts
 * in gemm_internal.h).
 *
 * Widening is exact and matches num's scalar reference bit for bit (up to
 * NaN payloads, which the num contract leaves open):
 *   BF16 -> FP32  16-bit shift;
 *   FP16 -> FP32  vcvtph2ps (F16C semantics: NaN quieted, subnormals exact);
 *   E5M2 -> FP32  E5M2 is the upper byte of an FP16, so shift + vcvtph2ps;
 *   E4M3 -> FP32  BF16 bits looked up with vpermt2w in a 128-entry table
 *                 filled from mxp_fp8_e4m3_to_f32 (sign applied apart), then
 *                 the BF16 shift.
 * No floating-point arithmetic is used, so MXCSR's FTZ/DAZ cannot alter a
 * packed value. FP8 -> BF16 (DPBF16 path) is the FP32 value truncated to its
 * upper half, exact because FP8 values have at most 3 significand bits and
 * lie well inside BF16's exponent range. The BF16 packer also flags, per
 * panel, the rows that hold a BF16 subnormal (vdpbf16ps would read it as
 * zero), from the registers it already loaded: no extra pass over memory.
 *
 * When X is contiguous in k (op(A) not transposed, op(B) transposed) the
 * panel is a transpose: 16 rows x 16 k (or 16 k pairs) are loaded, transposed
 * in registers (4 shuffle stages) and stored as 16 panel columns; 16-bit X
 * with rows at most BLOCK32_MAX_LD apart is transposed as words, 16 rows x
 * 32 k at a time, before widening (pack_block32_w16). Otherwise each k is a
 * contiguous run of rows: one masked load and store per 16 rows, and for
 * MR-wide panels whole 16-k groups as 14 full vectors (pack_group_mr).
 */
#include "kernels/x86_avx512/gemm_internal.h"

#include <pthread.h>
#include <string.h>

/* BF16 bits of the 128 E4M3 magnitudes (every E4M3 value is exact in
 * BF16), as four zmm of 32 entries for vpermt2w. */
static uint16_t e4m3_bf16[128] __attribute__((aligned(64)));
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_build(void) {
    for (int i = 0; i < 128; i++) {
        float f = mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){(uint8_t)i});
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        e4m3_bf16[i] = (uint16_t)(u >> 16);
    }
}

void mxp_avx512_gemm_tables_init(void) { pthread_once(&tables_once, tables_build); }

static inline __mmask16 lanes16(size_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

static inline __mmask32 lanes32(size_t n) {
    return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1u);
}

/* 32 E4M3 bytes (zero-extended into 16-bit lanes) to BF16 bits: two
 * 64-entry vpermt2w lookups on the magnitude, chosen by its bit 6, then the
 * sign. NaN (magnitude 0x7f) maps to a BF16 NaN of the same sign. */
static inline __attribute__((always_inline)) __m512i e4m3_to_bf16_x32(__m512i b) {
    const __m512i *t = (const __m512i *)e4m3_bf16;
    __m512i mag = _mm512_and_si512(b, _mm512_set1_epi16(0x7f));
    __m512i lo = _mm512_permutex2var_epi16(_mm512_load_si512(t), mag, _mm512_load_si512(t + 1));
    __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(t + 2), mag, _mm512_load_si512(t + 3));
    __m512i v = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(mag, _mm512_set1_epi16(0x40)), lo, hi);
    return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8));
}

/* 16 E4M3 values at p (lanes outside m are 0) as BF16 bits in 32-bit lanes. */
static inline __attribute__((always_inline)) __m512i
load16_e4m3_bf16w(const uint8_t *p, __mmask16 m) {
    __m512i b = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p)));
    return _mm512_cvtepu16_epi32(_mm512_castsi512_si256(e4m3_to_bf16_x32(b)));
}

/* Elements idx .. idx+16 of a typed buffer (lanes outside m are 0), widened
 * to FP32. */
static inline __attribute__((always_inline)) __m512
load16_f32(mxp_dtype t, const void *base, size_t idx, __mmask16 m) {
    switch (t) {
    case MXP_DTYPE_BF16: {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case MXP_DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx));
    case MXP_DTYPE_F8_E5M2: {
        __m128i b = _mm_maskz_loadu_epi8(m, (const uint8_t *)base + idx);
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
    }
    case MXP_DTYPE_F8_E4M3:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(load16_e4m3_bf16w((const uint8_t *)base + idx, m), 16));
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)base + idx);
    }
}

/* As load16_f32, as BF16 bit patterns zero-extended into 32-bit lanes
 * (t is BF16 or FP8). */
static inline __attribute__((always_inline)) __m512i
load16_bf16w(mxp_dtype t, const void *base, size_t idx, __mmask16 m) {
    if (t == MXP_DTYPE_BF16)
        return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx));
    if (t == MXP_DTYPE_F8_E4M3) return load16_e4m3_bf16w((const uint8_t *)base + idx, m);
    return _mm512_srli_epi32(_mm512_castps_si512(load16_f32(t, base, idx, m)), 16);
}

/* Elements idx .. idx+32 (lanes outside m are 0) as 16 BF16 pairs: word q
 * holds element 2q in its low and element 2q+1 in its high half. */
static inline __attribute__((always_inline)) __m512i
load32_pairs(mxp_dtype t, const void *base, size_t idx, __mmask32 m) {
    if (t == MXP_DTYPE_BF16)
        return _mm512_maskz_loadu_epi16(m, (const uint16_t *)base + idx);
    if (t == MXP_DTYPE_F8_E4M3)
        return e4m3_to_bf16_x32(
            _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, (const uint8_t *)base + idx)));
    __m256i lo = _mm512_cvtepi32_epi16(load16_bf16w(t, base, idx, (__mmask16)m));
    __m256i hi = _mm512_cvtepi32_epi16(load16_bf16w(t, base, idx + 16, (__mmask16)(m >> 16)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Prefetch distance along a row of X in the transposing packers. The 16
 * (or 32) row streams are too many for the hardware prefetcher to follow. */
enum { PREFETCH_BYTES = 512 };

static inline void prefetch_elem(mxp_dtype t, const void *base, size_t idx) {
    size_t es = t == MXP_DTYPE_F32 ? 4 : t == MXP_DTYPE_F8_E4M3 || t == MXP_DTYPE_F8_E5M2 ? 1 : 2;
    _mm_prefetch((const char *)base + idx * es + PREFETCH_BYTES, _MM_HINT_T0);
}

/* Prefetch distance, in k rows, of the packers that stream k-major rows
 * (X(r, k) at k*ld + r): each k reads one run of rows of X, and a new run
 * often starts on a new page, where the hardware prefetcher starts over. */
enum { PREFETCH_ROWS = 2 };

static inline void prefetch_row_ahead(mxp_dtype t, const void *base, size_t idx, size_t ld) {
    size_t es = t == MXP_DTYPE_F32 ? 4 : t == MXP_DTYPE_F8_E4M3 || t == MXP_DTYPE_F8_E5M2 ? 1 : 2;
    _mm_prefetch((const char *)((uintptr_t)base + (idx + PREFETCH_ROWS * ld) * es), _MM_HINT_T0);
}

/* Rows of the 16-row slice s of a panel that hold data (0 .. 16). */
static inline size_t slice_rows(size_t prow, int s) {
    return prow > (size_t)s ? min_sz(prow - (size_t)s, 16) : 0;
}

/* ---- FP32 panels ---------------------------------------------------------- */

/* 16 16-bit values (FP16 or BF16 bits) widened to FP32. */
static inline __attribute__((always_inline)) __m512 widen16_f32(mxp_dtype t, __m256i h) {
    if (t == MXP_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 rows x 32 k of a 16-bit X (k contiguous) from p (row i at p + i*ld;
 * rows from vr on read as zero; each row prefetched PREFETCH_BYTES / 2
 * ahead: 512 or 1024 bytes ahead made 32..512 x 2048 x 2048 NT 2-17%
 * slower), transposed as 16-bit words, then widened per column: column c
 * (the 16 rows' k = c) to pd + c*w, lanes smask.
 * Three in-lane unpack stages (words, dwords, qwords) leave, for rows 0-7
 * and 8-15 apart, one k per 128-bit lane; one vpermt2q per two columns
 * joins the halves. 80 shuffles per 512 values (16 vextracti64x4 among
 * them) against 128 for two 32-bit 16 x 16 transposes after widening:
 * throwaway timing of the packer alone (one thread, CPU time, FP16, 128 /
 * 336 rows x 72 / 256 / 512 k): 0.76-0.94 of the 32-bit transpose's time
 * (docs/results/kernels-passes.md, f16pack). The same values in the same places. */
static inline __attribute__((always_inline)) void
pack_block32_w16(mxp_dtype t, const uint16_t *p, size_t ld, size_t vr, int w, __mmask16 smask,
                 float *pd) {
    __m512i r[16], a[16], b[16], c[16];
    for (size_t i = 0; i < 16; i++) {
        if (i >= vr) {
            r[i] = _mm512_setzero_si512();
            continue;
        }
        _mm_prefetch((const char *)(p + i * ld) + PREFETCH_BYTES / 2, _MM_HINT_T0);
        r[i] = _mm512_loadu_si512(p + i * ld);
    }
    /* a[2q + h]: rows 2q, 2q+1 as 32-bit units, k 4h .. 4h+3 of each lane */
    for (int q = 0; q < 8; q++) {
        a[2 * q] = _mm512_unpacklo_epi16(r[2 * q], r[2 * q + 1]);
        a[2 * q + 1] = _mm512_unpackhi_epi16(r[2 * q], r[2 * q + 1]);
    }
    /* b[4g + m]: rows 4g .. 4g+3 as 64-bit units, k 2m, 2m+1 of each lane */
    for (int g = 0; g < 4; g++)
        for (int h = 0; h < 2; h++) {
            b[4 * g + 2 * h] = _mm512_unpacklo_epi32(a[4 * g + h], a[4 * g + 2 + h]);
            b[4 * g + 2 * h + 1] = _mm512_unpackhi_epi32(a[4 * g + h], a[4 * g + 2 + h]);
        }
    /* c[8o + q]: rows 8o .. 8o+7, k q of each lane (lane L: column 8L + q) */
    for (int o = 0; o < 2; o++)
        for (int m = 0; m < 4; m++) {
            c[8 * o + 2 * m] = _mm512_unpacklo_epi64(b[8 * o + m], b[8 * o + 4 + m]);
            c[8 * o + 2 * m + 1] = _mm512_unpackhi_epi64(b[8 * o + m], b[8 * o + 4 + m]);
        }
    const __m512i lanes01 = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i lanes23 = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    for (int q = 0; q < 8; q++) {
        /* z0: columns q (low half) and 8 + q; z1: 16 + q and 24 + q */
        __m512i z0 = _mm512_permutex2var_epi64(c[q], lanes01, c[8 + q]);
        __m512i z1 = _mm512_permutex2var_epi64(c[q], lanes23, c[8 + q]);
        _mm512_mask_storeu_ps(pd + (size_t)q * (size_t)w, smask,
                              widen16_f32(t, _mm512_castsi512_si256(z0)));
        _mm512_mask_storeu_ps(pd + (size_t)(8 + q) * (size_t)w, smask,
                              widen16_f32(t, _mm512_extracti64x4_epi64(z0, 1)));
        _mm512_mask_storeu_ps(pd + (size_t)(16 + q) * (size_t)w, smask,
                              widen16_f32(t, _mm512_castsi512_si256(z1)));
        _mm512_mask_storeu_ps(pd + (size_t)(24 + q) * (size_t)w, smask,
                              widen16_f32(t, _mm512_extracti64x4_epi64(z1, 1)));
    }
}

/* pack_block32_w16 is used only where X's rows are at most this many
 * elements (2 KiB) apart. With 2048-wide rows (4 KiB apart, all 16 rows
 * of a slice in one L1 set) it was slower in the GEMM than the 32-bit
 * transpose: 32 / 128 / 256 x 2048 x 2048 NT f16 0.955-1.036 of the base,
 * 0.986 on average (bench_gemm_cpu, one thread, four runs), though faster
 * alone. */
enum { BLOCK32_MAX_LD = 1024 };

static inline __attribute__((always_inline)) void
pack_f32_kcontig(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows,
                 size_t k0, size_t kc, int w, float *dst) {
    size_t ld = x->ld;
    const bool w16 = (t == MXP_DTYPE_F16 || t == MXP_DTYPE_BF16) && ld <= BLOCK32_MAX_LD;
    for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
        size_t prow = min_sz((size_t)w, rows - p0);
        float *pd = dst + p0 * kc;
        for (int s = 0; s < w; s += 16) {
            __mmask16 smask = lanes16((size_t)(w - s));
            size_t vr = slice_rows(prow, s);
            const size_t row0 = r0 + p0 + (size_t)s;
            size_t kk = 0;
            if (w16) /* whole 32-k blocks of 16-bit X; the rest as below */
                for (; kk + 32 <= kc; kk += 32)
                    pack_block32_w16(t, (const uint16_t *)x->base + row0 * ld + k0 + kk, ld, vr,
                                     w, smask, pd + kk * (size_t)w + (size_t)s);
            for (; kk < kc; kk += 16) {
                size_t kn = min_sz(16, kc - kk);
                __m512 v[16];
                for (size_t r = 0; r < 16; r++) {
                    if (r >= vr) {
                        v[r] = _mm512_setzero_ps();
                        continue;
                    }
                    size_t at = (row0 + r) * ld + k0 + kk;
                    prefetch_elem(t, x->base, at);
                    v[r] = load16_f32(t, x->base, at, lanes16(kn));
                }
                mxp_avx512_transpose16(v);
                for (size_t c = 0; c < kn; c++)
                    _mm512_mask_storeu_ps(pd + (kk + c) * (size_t)w + s, smask, v[c]);
            }
        }
    }
}

/* Depth of the k groups of the packers that stream k-major rows (X(r, k)
 * at k*ld + r): for each group of PACK_KGROUP k (or k pairs), panel by
 * panel. Plain k outer, panels inner wrote each k's values into every
 * panel of the block in turn (up to 37 store streams, 14-16 KiB apart);
 * grouping writes PACK_KGROUP consecutive steps of one panel before the
 * next, while each k row is still read in order. bench_gemm_cpu, one
 * thread: 512x72x256 TN f16 +10%, 65x512x256 TN f16 +6%, 32x512x512 NN
 * f16 +9%, 128/256x2048x2048 NN f32 +6-7% (docs/results/kernels-passes.md, gemm3). */
enum { PACK_KGROUP = 16, PACK_KGROUP_BF16 = 8 };

/* Lane i of index j (vpermt2ps) for MR-wide panels: floats 16j .. 16j+16
 * of a k group's 16 x 14 panel values, from two consecutive k rows a, b
 * (14 values each) of which floats 2j .. 13 of a come first (j < 7). */
#define RC14_LANE(o, i) ((i) + (o) + ((i) >= 14 - (o) ? 2 : 0))
#define RC14_ROW(o)                                                                 \
    {RC14_LANE(o, 0),  RC14_LANE(o, 1),  RC14_LANE(o, 2),  RC14_LANE(o, 3),         \
     RC14_LANE(o, 4),  RC14_LANE(o, 5),  RC14_LANE(o, 6),  RC14_LANE(o, 7),         \
     RC14_LANE(o, 8),  RC14_LANE(o, 9),  RC14_LANE(o, 10), RC14_LANE(o, 11),        \
     RC14_LANE(o, 12), RC14_LANE(o, 13), RC14_LANE(o, 14), RC14_LANE(o, 15)}
static const int32_t rc14_idx[7][16] __attribute__((aligned(64))) = {
    RC14_ROW(0), RC14_ROW(2), RC14_ROW(4), RC14_ROW(6), RC14_ROW(8), RC14_ROW(10), RC14_ROW(12)};
#undef RC14_ROW
#undef RC14_LANE

/* One full k group (PACK_KGROUP = 16 k) of an MR-wide panel from k-major
 * rows: the 16 k rows' 14 values (loaded from at + k*ld, rows past m
 * zero) are 224 consecutive panel floats, written as 14 whole zmm, each
 * joined from two k rows by one vpermt2ps, instead of 16 masked 14-lane
 * stores 56 bytes apart, 7 of 8 of which straddle a cache line. Same
 * values in the same places. Throwaway timing of the packer alone (one
 * thread, CPU time, FP16, 336 rows x 128..512 k): 0.77-0.82 of the masked
 * stores' time (docs/results/kernels-passes.md, f16pack). */
static inline __attribute__((always_inline)) void
pack_group_mr(mxp_dtype t, const void *base, size_t at, size_t ld, __mmask16 m, float *pd) {
    static_assert(MXP_GEMM_MR == 14 && PACK_KGROUP == 16, "rc14_idx is for 16 k x 14 rows");
    for (int h = 0; h < 2; h++) { /* k rows 8h .. 8h+8: floats 112h .. 112h+112 */
        __m512 a = load16_f32(t, base, at + (size_t)(8 * h) * ld, m);
        for (int j = 0; j < 7; j++) {
            __m512 b = load16_f32(t, base, at + (size_t)(8 * h + j + 1) * ld, m);
            _mm512_storeu_ps(pd + 16 * (7 * h + j),
                             _mm512_permutex2var_ps(a, _mm512_load_si512(rc14_idx[j]), b));
            a = b;
        }
    }
}

/* X[r0 .. r0+rows)[k0 .. k0+kc) (X(r, k) at k*ld + r) widened into FP32
 * panels of width w: per k group, per panel, per k one contiguous run of
 * up to w elements, in 16-lane slices (MR-wide panels: whole groups by
 * pack_group_mr). w is a compile-time constant in the calls from
 * pack_f32_rcontig, so the slice loop and masks fold. */
static inline __attribute__((always_inline)) void
pack_f32_rcontig_w(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0,
                   size_t kc, const int w, float *dst) {
    const size_t ld = x->ld;
    for (size_t kg = 0; kg < kc; kg += PACK_KGROUP) {
        const size_t ke = min_sz(kc, kg + PACK_KGROUP);
        for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
            const size_t prow = min_sz((size_t)w, rows - p0);
            if (w == MXP_GEMM_MR && ke - kg == PACK_KGROUP) {
                pack_group_mr(t, x->base, (k0 + kg) * ld + r0 + p0, ld, lanes16(prow),
                              dst + p0 * kc + kg * (size_t)w);
                continue;
            }
            for (size_t k = kg; k < ke; k++) {
                const size_t at = (k0 + k) * ld + r0 + p0;
                float *pd = dst + p0 * kc + k * (size_t)w;
                for (int s = 0; s < w; s += 16) {
                    size_t vr = slice_rows(prow, s);
                    __m512 v = vr ? load16_f32(t, x->base, at + (size_t)s, lanes16(vr))
                                  : _mm512_setzero_ps();
                    _mm512_mask_storeu_ps(pd + s, lanes16((size_t)(w - s)), v);
                }
            }
        }
    }
}

static inline __attribute__((always_inline)) void
pack_f32_rcontig(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows,
                 size_t k0, size_t kc, int w, float *dst) {
    if (w == MXP_GEMM_MR) pack_f32_rcontig_w(t, x, r0, rows, k0, kc, MXP_GEMM_MR, dst);
    else if (w == MXP_GEMM_NR) pack_f32_rcontig_w(t, x, r0, rows, k0, kc, MXP_GEMM_NR, dst);
    else pack_f32_rcontig_w(t, x, r0, rows, k0, kc, w, dst);
}

#define PACK_DISPATCH(fn, t, ...)                                              \
    switch (t) {                                                               \
    case MXP_DTYPE_BF16: fn(MXP_DTYPE_BF16, __VA_ARGS__); break;               \
    case MXP_DTYPE_F16: fn(MXP_DTYPE_F16, __VA_ARGS__); break;                 \
    case MXP_DTYPE_F8_E4M3: fn(MXP_DTYPE_F8_E4M3, __VA_ARGS__); break;         \
    case MXP_DTYPE_F8_E5M2: fn(MXP_DTYPE_F8_E5M2, __VA_ARGS__); break;         \
    default: fn(MXP_DTYPE_F32, __VA_ARGS__); break;                            \
    }

void mxp_avx512_pack_f32(const mxp_gemm_src *x, size_t r0, size_t rows,
                         size_t k0, size_t kc, int w, float *dst) {
    if (x->k_contig) {
        PACK_DISPATCH(pack_f32_kcontig, x->type, x, r0, rows, k0, kc, w, dst)
    } else {
        PACK_DISPATCH(pack_f32_rcontig, x->type, x, r0, rows, k0, kc, w, dst)
    }
}

/* ---- FP32 rows --------------------------------------------------------- */

/* Lines i of X (X's rows r0 + i when k_contig, else its k rows k0 + i),
 * each n contiguous elements from `off`, widened into dst + i*ldd: one
 * (masked at the end) load, widening and store per 16 elements, four
 * vectors per step. A pure stream, no transpose. */
static inline __attribute__((always_inline)) void
widen_lines(mxp_dtype t, const void *base, size_t ld, size_t line0, size_t lines, size_t off,
            size_t n, float *dst, size_t ldd) {
    for (size_t i = 0; i < lines; i++) {
        const size_t at = (line0 + i) * ld + off;
        float *d = dst + i * ldd;
        size_t e = 0;
        for (; e + 64 <= n; e += 64) {
            __m512 v0 = load16_f32(t, base, at + e, 0xffff);
            __m512 v1 = load16_f32(t, base, at + e + 16, 0xffff);
            __m512 v2 = load16_f32(t, base, at + e + 32, 0xffff);
            __m512 v3 = load16_f32(t, base, at + e + 48, 0xffff);
            _mm512_storeu_ps(d + e, v0);
            _mm512_storeu_ps(d + e + 16, v1);
            _mm512_storeu_ps(d + e + 32, v2);
            _mm512_storeu_ps(d + e + 48, v3);
        }
        for (; e < n; e += 16) {
            __mmask16 m = lanes16(n - e);
            _mm512_mask_storeu_ps(d + e, m, load16_f32(t, base, at + e, m));
        }
    }
}

void mxp_avx512_widen_f32(const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0, size_t kc,
                          float *dst, size_t ldd) {
    const size_t line0 = x->k_contig ? r0 : k0, lines = x->k_contig ? rows : kc;
    const size_t off = x->k_contig ? k0 : r0, n = x->k_contig ? kc : rows;
    PACK_DISPATCH(widen_lines, x->type, x->base, x->ld, line0, lines, off, n, dst, ldd)
}

/* ---- BF16 pair panels ----------------------------------------------------- */

/* Lanes of v (32 BF16 values) that are subnormal: exponent 0, fraction != 0. */
static inline __mmask32 bf16_subnormal_lanes(__m512i v) {
    return _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x7f80)) &
           _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x007f));
}

/* Rows of a pair panel slice from the subnormal lanes m of its 16 pair
 * words (BF16 lanes 2r and 2r+1 are row r): bit r set when either is. */
static inline uint32_t pair_rows(__mmask32 m) {
    uint32_t x = ((uint32_t)m | (uint32_t)m >> 1) & 0x55555555u;
    x = (x | x >> 1) & 0x33333333u;
    x = (x | x >> 2) & 0x0f0f0f0fu;
    x = (x | x >> 4) & 0x00ff00ffu;
    return (x | x >> 8) & 0x0000ffffu;
}

/* Rows of X[r0 .. r0+rows)[k0 .. k0+kc) (BF16, k contiguous: X(r, k) at
 * r*ld + k) that hold a BF16 subnormal (bit r: row r0 + r). A scalar scan,
 * run only for the rare panels that pack_bf16_kcontig's vector test found
 * one in, so its loop keeps one mask OR per load. */
static uint32_t subnormal_rows_kcontig(const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0,
                                       size_t kc) {
    const uint16_t *base = x->base;
    uint32_t out = 0;
    for (size_t r = 0; r < rows; r++) {
        const uint16_t *v = base + (r0 + r) * x->ld + k0;
        for (size_t k = 0; k < kc; k++)
            if ((v[k] & 0x7f80u) == 0 && (v[k] & 0x7fu) != 0) {
                out |= 1u << r;
                break;
            }
    }
    return out;
}

static inline __attribute__((always_inline)) void
pack_bf16_kcontig(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows,
                  size_t k0, size_t kc, int w, uint32_t *dst, uint32_t *sub) {
    size_t ld = x->ld, kp = (kc + 1) / 2;
    for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
        size_t prow = min_sz((size_t)w, rows - p0);
        uint32_t *pd = dst + p0 * kp;
        __mmask32 any = 0;
        for (int s = 0; s < w; s += 16) {
            __mmask16 smask = lanes16((size_t)(w - s));
            size_t vr = slice_rows(prow, s);
            const size_t row0 = r0 + p0 + (size_t)s;
            for (size_t qq = 0; qq < kp; qq += 16) {
                size_t qn = min_sz(16, kp - qq);
                __mmask32 em = lanes32(kc - 2 * qq);
                __m512 v[16];
                for (size_t r = 0; r < 16; r++) {
                    if (r >= vr) {
                        v[r] = _mm512_setzero_ps();
                        continue;
                    }
                    size_t at = (row0 + r) * ld + k0 + 2 * qq;
                    prefetch_elem(t, x->base, at);
                    __m512i pr = load32_pairs(t, x->base, at, em);
                    if (t == MXP_DTYPE_BF16) any |= bf16_subnormal_lanes(pr);
                    v[r] = _mm512_castsi512_ps(pr);
                }
                mxp_avx512_transpose16(v);
                for (size_t c = 0; c < qn; c++)
                    _mm512_mask_storeu_epi32(pd + (qq + c) * (size_t)w + s, smask,
                                             _mm512_castps_si512(v[c]));
            }
        }
        sub[p0 / (size_t)w] = any ? subnormal_rows_kcontig(x, r0 + p0, prow, k0, kc) : 0;
    }
}

static inline __attribute__((always_inline)) void
pack_bf16_rcontig(mxp_dtype t, const mxp_gemm_src *x, size_t r0, size_t rows,
                  size_t k0, size_t kc, int w, uint32_t *dst, uint32_t *sub) {
    size_t ld = x->ld, kp = (kc + 1) / 2;
    for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) sub[p0 / (size_t)w] = 0;
    for (size_t q = 0; q < kp; q++) {
        const size_t at0 = (k0 + 2 * q) * ld + r0;
        const bool second = 2 * q + 1 < kc;
        for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
            size_t prow = min_sz((size_t)w, rows - p0);
            uint32_t *pd = dst + p0 * kp + q * (size_t)w;
            for (int s = 0; s < w; s += 16) {
                size_t vr = slice_rows(prow, s);
                __m512i v = _mm512_setzero_si512();
                if (vr) {
                    __mmask16 m = lanes16(vr);
                    size_t at = at0 + p0 + (size_t)s;
                    v = load16_bf16w(t, x->base, at, m);
                    if (second)
                        v = _mm512_or_si512(
                            v, _mm512_slli_epi32(load16_bf16w(t, x->base, at + ld, m), 16));
                    __mmask32 sl = t == MXP_DTYPE_BF16 ? bf16_subnormal_lanes(v) : 0;
                    if (sl) sub[p0 / (size_t)w] |= pair_rows(sl) << s;
                }
                _mm512_mask_storeu_epi32(pd + s, lanes16((size_t)(w - s)), v);
            }
        }
    }
}

/* One k pair q and panel p0 of pack_bf16_rcontig_bf16: rows p0 .. p0+w of
 * X's k rows 2q and 2q+1 (rk: row 2q at r0) interleaved into w pair words
 * at dst; returns the rows (bit r: row p0 + r) holding a BF16 subnormal. */
static inline __attribute__((always_inline)) __mmask32
pair_panel_step(const uint16_t *rk, size_t ld, bool second, size_t p0, __mmask32 m, int w,
                __m512i idx_lo, __m512i idx_hi, uint32_t *dst) {
    __m512i a = _mm512_maskz_loadu_epi16(m, rk + p0);
    __m512i b = second ? _mm512_maskz_loadu_epi16(m, rk + ld + p0) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst, lanes16((size_t)w), _mm512_permutex2var_epi16(a, idx_lo, b));
    if (w > 16)
        _mm512_mask_storeu_epi32(dst + 16, lanes16((size_t)w - 16),
                                 _mm512_permutex2var_epi16(a, idx_hi, b));
    return bf16_subnormal_lanes(a) | bf16_subnormal_lanes(b);
}

/* pack_bf16_rcontig for BF16 X: per k pair and panel, one (masked) load of
 * up to 32 rows from each of the two k rows and one vpermt2w per 16 panel
 * words, which interleaves them into pairs (word r = X[r][k] | X[r][k+1]
 * << 16), instead of widening 16 values at a time and combining them.
 * Same panel bits and subnormal flags. NR-wide (B) panels are written in
 * groups of PACK_KGROUP_BF16 pairs per panel (see PACK_KGROUP): 32x512x512
 * NN +7%, 65x512x256 TN +4%; MR-wide (A) panels keep k pairs outer with
 * the row prefetch, since grouping them was 10% slower at 2048x72x512 TN
 * (14-row pieces of 4 KiB rows) and 2-3% slower at 256x256x32..128 TN. */
static void pack_bf16_rcontig_bf16(const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0,
                                   size_t kc, int w, uint32_t *dst, uint32_t *sub) {
    const uint16_t *base = x->base;
    size_t ld = x->ld, kp = (kc + 1) / 2;
    /* word j of lo: rk[j] (low half), rk1[j] (high half); hi: rows 16 .. 31 */
    const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                            40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                            1, 32, 0);
    const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
    for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) sub[p0 / (size_t)w] = 0;
    if (w != MXP_GEMM_NR) {
        for (size_t q = 0; q < kp; q++) {
            const uint16_t *rk = base + (k0 + 2 * q) * ld + r0;
            for (size_t p0 = 0; p0 < rows; p0 += (size_t)w) {
                prefetch_row_ahead(MXP_DTYPE_BF16, rk, p0, 2 * ld);
                prefetch_row_ahead(MXP_DTYPE_BF16, rk, p0 + ld, 2 * ld);
                sub[p0 / (size_t)w] |= pair_panel_step(rk, ld, 2 * q + 1 < kc, p0,
                                                       lanes32(min_sz((size_t)w, rows - p0)),
                                                       w, idx_lo, idx_hi,
                                                       dst + p0 * kp + q * (size_t)w);
            }
        }
        return;
    }
    for (size_t qg = 0; qg < kp; qg += PACK_KGROUP_BF16) {
        const size_t qe = min_sz(kp, qg + PACK_KGROUP_BF16);
        for (size_t p0 = 0; p0 < rows; p0 += MXP_GEMM_NR) {
            const __mmask32 m = lanes32(min_sz(MXP_GEMM_NR, rows - p0));
            __mmask32 subn = 0;
            for (size_t q = qg; q < qe; q++)
                subn |= pair_panel_step(base + (k0 + 2 * q) * ld + r0, ld, 2 * q + 1 < kc, p0, m,
                                        MXP_GEMM_NR, idx_lo, idx_hi,
                                        dst + p0 * kp + q * MXP_GEMM_NR);
            sub[p0 / MXP_GEMM_NR] |= subn;
        }
    }
}

#define PACK_DISPATCH_BF16(fn, t, ...)                                         \
    switch (t) {                                                               \
    case MXP_DTYPE_F8_E4M3: fn(MXP_DTYPE_F8_E4M3, __VA_ARGS__); break;         \
    case MXP_DTYPE_F8_E5M2: fn(MXP_DTYPE_F8_E5M2, __VA_ARGS__); break;         \
    default: fn(MXP_DTYPE_BF16, __VA_ARGS__); break;                           \
    }

bool mxp_avx512_pack_bf16(const mxp_gemm_src *x, size_t r0, size_t rows,
                          size_t k0, size_t kc, int w, uint32_t *dst, uint32_t *sub) {
    if (x->k_contig) {
        PACK_DISPATCH_BF16(pack_bf16_kcontig, x->type, x, r0, rows, k0, kc, w, dst, sub)
    } else if (x->type == MXP_DTYPE_BF16) {
        pack_bf16_rcontig_bf16(x, r0, rows, k0, kc, w, dst, sub);
    } else {
        PACK_DISPATCH_BF16(pack_bf16_rcontig, x->type, x, r0, rows, k0, kc, w, dst, sub)
    }
    uint32_t any = 0;
    for (size_t p = 0; p * (size_t)w < rows; p++) any |= sub[p];
    return any != 0;
}

/* lo = the lane-wise unsigned minimum of lo and (v & 0x7fff) - 1 (16-bit
 * lanes; a zero magnitude wraps to 0xffff). */
static inline __m512i min_mag_minus_one(__m512i lo, __m512i v) {
    const __m512i m1 = _mm512_sub_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)),
                                        _mm512_set1_epi16(1));
    return _mm512_min_epu16(lo, m1);
}

/* Whether the n BF16 values at v hold a subnormal: per 16-bit lane the
 * magnitude minus 1 (zero wraps to 0xffff) is below 0x7f exactly for a
 * subnormal; the minimum over all lanes is kept in a vector (three vector
 * operations per 32 values, no mask operations in the loop). */
static bool bf16_run_subnormal(const uint16_t *v, size_t n) {
    __m512i lo = _mm512_set1_epi16(-1);
    size_t k = 0;
    for (; k + 32 <= n; k += 32) lo = min_mag_minus_one(lo, _mm512_loadu_si512(v + k));
    if (k < n) /* masked-off lanes load 0, which wraps to 0xffff */
        lo = min_mag_minus_one(lo, _mm512_maskz_loadu_epi16(lanes32(n - k), v + k));
    return _mm512_cmplt_epu16_mask(lo, _mm512_set1_epi16(0x7f)) != 0;
}

bool mxp_avx512_bf16_kcontig_subnormal(const mxp_gemm_src *x, size_t r0, size_t rows,
                                       size_t k0, size_t kc) {
    const uint16_t *base = (const uint16_t *)x->base + r0 * x->ld + k0;
    if (x->ld == kc) return bf16_run_subnormal(base, rows * kc); /* one run of rows */
    for (size_t r = 0; r < rows; r++)
        if (bf16_run_subnormal(base + r * x->ld, kc)) return true;
    return false;
}
