/* kernels/x86_avx512/gemm_fallback.c: the DPBF16 path's exact fallback
 * for micro-tiles whose inputs hold BF16 subnormals.
 *
 * Entry point: mxp_avx512_tile_fallback (gemm_internal.h).
 *
 * vdpbf16ps reads BF16 subnormals as zero, so gemm.c hands a tile whose B
 * micro-panel, or some of whose rows of op(A), hold one in the K block to
 * this file: the F32 microkernel computes those elements from FP32 copies
 * of the micro-panels (the exact widening), one FMA chain per element,
 * whatever the tile's other rows hold.
 *
 * The copies are cached per K block (mxp_gemm_fallback's *_for): a row of
 * tiles shares one A micro-panel, and gemm_block visits the tiles row by
 * row, so A is widened once per row of tiles rather than once per tile.
 * A BF16 operand is widened from its packed pair micro-panel (the same BF16
 * values, shifted into FP32: two instructions per 16 values) instead of
 * from its source rows; an FP8 operand (its pairs hold its BF16
 * conversion) and an op(A) read in place are widened from the source as
 * before. Flagged rows of op(A) come only from packed BF16 pairs (an FP8
 * value is never a BF16 subnormal). With only some rows of op(A) flagged,
 * only those rows are computed on the F32 path, packed together into one
 * FP32 panel (a row's F32 result does not depend on the other rows),
 * instead of all MR.
 */
#include "kernels/x86_avx512/gemm_internal.h"

#include <string.h>

/* The two BF16 values of each pair word of v, as FP32, to lo (the low
 * halves: the even k) and hi (the odd k), lanes m. */
static inline void store_pair_halves(float *lo, float *hi, __mmask16 m, __m512i v) {
    _mm512_mask_storeu_ps(lo, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    _mm512_mask_storeu_ps(hi, m, _mm512_castsi512_ps(
                                     _mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u))));
}

/* The FP32 micro-panel of width w (<= 32) of a pair micro-panel of width w
 * (mxp_avx512_pack_bf16's layout) over kc values of k: dst[k*w + r] =
 * BF16 value k of row r. Writes 2*ceil(kc/2) rows of w floats (the odd
 * kc's padding pair widens to zeros). */
static void widen_pairs(const uint32_t *src, size_t kc, int w, float *dst) {
    const size_t kp = (kc + 1) / 2;
    const int w0 = w < 16 ? w : 16, w1 = w - w0;
    const __mmask16 m0 = (__mmask16)((1u << w0) - 1u), m1 = (__mmask16)((1u << w1) - 1u);
    for (size_t q = 0; q < kp; q++) {
        const uint32_t *s = src + q * (size_t)w;
        float *lo = dst + 2 * q * (size_t)w, *hi = lo + w;
        store_pair_halves(lo, hi, m0, _mm512_maskz_loadu_epi32(m0, s));
        if (w1 > 0) store_pair_halves(lo + 16, hi + 16, m1, _mm512_maskz_loadu_epi32(m1, s + 16));
    }
}

/* The rows of op(A)'s pair micro-panel (MR wide) set in `rows`, widened
 * to FP32 and packed together: dst[k*MR + i] = BF16 value k of the i-th
 * set row (vpcompressd per pair), for the F32 microkernel with mr =
 * popcount(rows). Writes 2*ceil(kc/2) rows of MR floats. */
static void widen_pair_rows(const uint32_t *src, size_t kc, uint32_t rows, float *dst) {
    const size_t kp = (kc + 1) / 2;
    const __mmask16 in = (__mmask16)((1u << MXP_GEMM_MR) - 1u), pick = (__mmask16)rows;
    const __mmask16 out = (__mmask16)((1u << __builtin_popcount(rows)) - 1u);
    for (size_t q = 0; q < kp; q++) {
        float *lo = dst + 2 * q * MXP_GEMM_MR;
        store_pair_halves(lo, lo + MXP_GEMM_MR, out,
                          _mm512_maskz_compress_epi32(
                              pick, _mm512_maskz_loadu_epi32(in, src + q * MXP_GEMM_MR)));
    }
}

/* The FP32 micro-panel (width w) of X[r0 .. r0+rows)[pc .. pc+kc) into
 * dst, from its pair micro-panel `pairs` when X is BF16 and it has one,
 * else from X. Both hold the same values, zero past `rows`. */
static void widen_panel(const mxp_gemm_fallback *f, const mxp_gemm_src *x,
                        const uint32_t *pairs, size_t r0, int rows, int w, float *dst) {
    if (pairs && x->type == MXP_DTYPE_BF16)
        widen_pairs(pairs, f->kc, w, dst);
    else
        mxp_avx512_pack_f32(x, r0, (size_t)rows, f->pc, f->kc, w, dst);
}

void mxp_avx512_tile_fallback(mxp_gemm_fallback *f, size_t i0, int mr, size_t j0, int nr,
                              const uint32_t *ap, const uint32_t *bp, uint32_t rows, float *c,
                              mxp_gemm_store mode) {
    /* ap: NULL when op(A) is read in place (it then has no subnormal, so
     * only a flagged B micro-panel brings the tile here; rows != 0 means a
     * packed op(A)). The cache keys: the panels' first row / column, and
     * for A which rows ap1 holds (0: all, as the panel; else the flagged
     * rows, packed together) */
    if (f->a_for != i0 || f->a_rows != rows) {
        if (rows)
            widen_pair_rows(ap, f->kc, rows, f->ap1);
        else
            widen_panel(f, f->a, ap, i0, mr, MXP_GEMM_MR, f->ap1);
        f->a_for = i0;
        f->a_rows = rows;
    }
    if (f->b_for != j0) {
        widen_panel(f, f->b, bp, j0, nr, MXP_GEMM_NR, f->bp1);
        f->b_for = j0;
    }
    if (rows == 0) { /* the B micro-panel is flagged: the whole tile */
        mxp_avx512_ukernel_f32(f->kc, f->ap1, MXP_GEMM_MR, false, f->bp1, MXP_GEMM_NR, false, c,
                               f->ldc, mr, nr, f->alpha, f->beta, mode, true, NULL);
        return;
    }
    /* the flagged rows on the F32 path (ap1 holds just them) into a copy
     * of their C (taken first, so the store reads C as it was), the tile
     * by vdpbf16ps in C, then the flagged rows copied over */
    int at[MXP_GEMM_MR], n = 0; /* at[i]: the tile row of row i of t */
    for (int r = 0; r < mr; r++)
        if (rows >> r & 1u) at[n++] = r;
    float t[MXP_GEMM_MR * MXP_GEMM_NR];
    const size_t row_bytes = (size_t)nr * sizeof(float);
    for (int i = 0; i < n; i++)
        memcpy(t + i * MXP_GEMM_NR, c + (size_t)at[i] * f->ldc, row_bytes);
    mxp_avx512_ukernel_f32(f->kc, f->ap1, MXP_GEMM_MR, false, f->bp1, MXP_GEMM_NR, false, t,
                           MXP_GEMM_NR, n, nr, f->alpha, f->beta, mode, true, NULL);
    mxp_avx512_ukernel_bf16((f->kc + 1) / 2, ap, 0, false, bp, c, f->ldc, mr, nr, f->alpha,
                            f->beta, mode, false, NULL);
    for (int i = 0; i < n; i++) memcpy(c + (size_t)at[i] * f->ldc, t + i * MXP_GEMM_NR, row_bytes);
}
