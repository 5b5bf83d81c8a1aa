/* kernels/x86_avx512/gemm_ukernel.c: register-blocked GEMM microkernels.
 *
 * Entry points: mxp_avx512_ukernel_f32, mxp_avx512_ukernel_bf16 (and their
 * _row forms), mxp_avx512_ukernel_f32_bt and mxp_avx512_ukernel_w16_bt (the
 * small-M kernels), mxp_avx512_ukernel_f32_cols (narrow column edges, rows
 * of C on the lanes; contracts in gemm_internal.h).
 *
 * Tile: MR = 14 rows x NR = 32 columns of C held in 28 zmm accumulators; per
 * k step two zmm loads of the B micro-panel and 14 broadcasts of the A
 * micro-panel (folded into the FMA as {1to16} memory operands) feed 28 FMAs.
 * Zen 4 retires one 512-bit FMA (or vdpbf16ps) per cycle with a 4-cycle
 * latency, so 28 independent chains keep the FMA pipe busy with room for the
 * loads. Edge tiles (mr < MR or nr <= 16) use specialised copies of the same
 * body with fewer accumulators, so a 4-row edge costs 4/14 of a full tile;
 * columns past nr are masked on the store. Every C element is the FP32 sum of
 * its products in increasing k (one FMA per product on the F32 path, one
 * vdpbf16ps per pair of products on the BF16 path), whichever tile shape
 * computed it, so results do not depend on tiling or thread split.
 *
 * The store mirrors the generic kernel's arithmetic: alpha*acc (+ beta*C on
 * the first K block, + C on later ones), each operation rounded separately;
 * the _UNIT store modes leave out multiplications by 1 (gemm_internal.h).
 */
#include "kernels/x86_avx512/gemm_internal.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

static_assert(MXP_GEMM_MR == 14 && MXP_GEMM_NV == 2,
              "the switch in the ukernel entry points lists MR = 14, NV <= 2");

/* The value to store at p (lanes m) for the accumulator acc under mode
 * (mxp_gemm_store; operand order as the generic kernel's). */
static inline __attribute__((always_inline)) __m512
store_value(__m512 acc, const float *p, __mmask16 m, __m512 va, __m512 vb, mxp_gemm_store mode) {
    switch (mode) {
    case MXP_GEMM_STORE_SET: return _mm512_mul_ps(va, acc);
    case MXP_GEMM_STORE_BETA:
        return _mm512_add_ps(_mm512_mul_ps(va, acc), _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, p)));
    case MXP_GEMM_STORE_ADD: return _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), _mm512_mul_ps(va, acc));
    case MXP_GEMM_STORE_SET_UNIT: return acc;
    case MXP_GEMM_STORE_BETA_UNIT: return _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, p));
    default: return _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), acc);
    }
}

/* Write the mr x (16*(nv-1) + popcount(last)) tile acc into C. */
static inline __attribute__((always_inline)) void
store_tile(__m512 acc[MXP_GEMM_MR][MXP_GEMM_NV], float *c, size_t ldc, const int mr,
           const int nv, __mmask16 last, float alpha, float beta, mxp_gemm_store mode) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    float *row = c;
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            __mmask16 m = v == nv - 1 ? last : (__mmask16)0xffff;
            float *p = row + 16 * v;
            _mm512_mask_storeu_ps(p, m, store_value(acc[r][v], p, m, va, vb, mode));
        }
        /* one add per row: without the barrier GCC hoists the 14 row
         * offsets r*ldc out of the row kernel's tile loop, spills them and
         * spends about 100 instructions per tile reloading them */
        row += ldc;
        __asm__("" : "+r"(row));
    }
}

/* Prefetch hint for the address `base + bytes`, which may lie past the end
 * of the object (a prefetch never faults); computed on integers so no
 * out-of-bounds pointer is formed. */
static inline __attribute__((always_inline)) void prefetch_at(const void *base, size_t bytes) {
    _mm_prefetch((const char *)((uintptr_t)base + bytes), _MM_HINT_T0);
}

/* Prefetch the mr rows of the C tile (columns 0 .. 16*nv) into L1 before
 * the k loop, so the store at its end does not wait on C: on large GEMMs C
 * lives in L3 or memory, and each K block reads and writes every tile once.
 * Only where asked (pfc): the driver's row-of-tiles sweep walks C along
 * its rows, which the hardware prefetcher follows, and prefetches the next
 * tile's C instead (prefetch_next_c), since these 28-42 prefetches cost
 * about 3% of a short (K = 32) block; the BF16 subnormal fallback tiles
 * keep it. (No effect on results.) */
static inline __attribute__((always_inline)) void
prefetch_c(const float *c, size_t ldc, const int mr, const int nv) {
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
        const size_t row = (size_t)r * ldc * sizeof(float);
        prefetch_at(c, row);
        prefetch_at(c, row + 64 * (size_t)nv - 4);
        if (nv == 2) prefetch_at(c, row + 64);
    }
}

/* Prefetch row r of the next tile's C (its first two lines,
 * the 32 columns of a full tile): called once per k step for the first mr
 * steps of the k loop (the ukernels' `cn`), so the next tile's C lines
 * arrive while this tile computes, spread over the loop instead of in one
 * burst. Used in the row-of-tiles sweep (gemm.c), where a short K block
 * makes the pass over C a large share of the time: 2048x2048x32 TN bf16
 * +8%, 2048x2048x128 TN bf16 +2-4%, neutral where C fits in L2
 * (bench_gemm_cpu, one thread). No effect on results. */
static inline __attribute__((always_inline)) void prefetch_next_c(const float *cn, size_t ldc,
                                                                  size_t r) {
    const uintptr_t row = (uintptr_t)cn + r * ldc * sizeof(float);
    _mm_prefetch((const char *)row, _MM_HINT_T0);
    _mm_prefetch((const char *)(row + 64), _MM_HINT_T0);
}

/* Address of row r of a k-contiguous op(A) read in place (uk_f32 with
 * a_kc, uk_bf16 with a_kc): row r at p0 + r*L bytes, reached from three
 * row bases (rows 0, 5, 10), each advanced once per k step, plus a
 * multiple of L (14 row pointers would not fit in the 15 general registers
 * next to B, C and the counters). GCC 12 keeps the 3 bases and the offsets
 * L, 2L, 3L, 4L, 8L in registers and emits one broadcast (base + offset)
 * per row: the full F32 tile's k loop has 56-58 instructions, 28 FMAs, no
 * spill. */
static inline __attribute__((always_inline)) const char *
a_row_at(const char *p0, const char *p5, const char *p10, size_t l, size_t l3, const int r) {
    switch (r) {
    case 0: return p0;
    case 1: return p0 + l;
    case 2: return p0 + 2 * l;
    case 3: return p0 + l3;
    case 4: return p0 + 4 * l;
    case 5: return p5;
    case 6: return p5 + l;
    case 7: return p5 + 2 * l;
    case 8: return p0 + 8 * l;
    case 9: return p5 + 4 * l;
    case 10: return p10;
    case 11: return p10 + l;
    case 12: return p10 + 2 * l;
    default: return p5 + 8 * l; /* 13 */
    }
}

/* Broadcast of A(r, k) for row r of a k-contiguous FP32 op(A) (a_row_at). */
static inline __attribute__((always_inline)) __m512
a_row(const char *p0, const char *p5, const char *p10, size_t l, size_t l3, const int r) {
    return _mm512_set1_ps(*(const float *)a_row_at(p0, p5, p10, l, l3, r));
}

/* The F32 tile. B(k, 16 v + l) = b[16 v + l + k*sb] and A(r, k) =
 * a[r + k*sa], or a[r*sa + k] with a_kc: the packed micro-panels (sa = MR,
 * sb = NR) or, on the F32 path, op(A) and op(B) read in place where they
 * are contiguous along the rows of the tile (sa = lda), along its columns
 * (sb = ldb), or, for op(A), along k (a_kc, sa = lda). With b_in_place
 * the last B vector is loaded with the column mask, so nothing past column
 * nr is read; a packed panel is 64-byte aligned and zero-padded to NR.
 * a_kc only changes where the broadcasts are read from: the FMAs, their
 * order and the store are the same, so the same bits. */
static inline __attribute__((always_inline)) void
uk_f32(size_t kc, const float *a, size_t sa, const float *b, size_t sb, float *c, size_t ldc,
       const int mr, const int nv, __mmask16 last, float alpha, float beta, mxp_gemm_store mode,
       bool pfc, const float *cn, const bool b_in_place, const bool a_kc) {
    __m512 acc[MXP_GEMM_MR][MXP_GEMM_NV];
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    if (pfc) prefetch_c(c, ldc, mr, nv);
    /* a_kc: row bases only for rows that exist (no pointer past op(A)) */
    const size_t l = sa * sizeof(float), l3 = 3 * l;
    const char *p0 = (const char *)a;
    const char *p5 = a_kc && mr > 5 ? p0 + 5 * l : p0;
    const char *p10 = a_kc && mr > 10 ? p0 + 10 * l : p0;
    for (size_t k = 0; k < kc; k++) {
        if (cn && k < (size_t)mr) prefetch_next_c(cn, ldc, k);
        __m512 bv[MXP_GEMM_NV];
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++)
            bv[v] = !b_in_place ? _mm512_load_ps(b + 16 * v)
                    : v == nv - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * v)
                                  : _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) {
            __m512 ar = a_kc ? a_row(p0, p5, p10, l, l3, r) : _mm512_set1_ps(a[r]);
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
        }
        if (a_kc) {
            p0 += sizeof(float);
            p5 += sizeof(float);
            p10 += sizeof(float);
        } else {
            a += sa;
        }
        b += sb;
    }
    store_tile(acc, c, ldc, mr, nv, last, alpha, beta, mode);
}

/* Broadcast of A's pair q = 0 of row r on the BF16 path: word r of a
 * packed MR-wide pair panel (ap), or, with a_kc, the 32-bit word at row
 * r's address (a_row_at; BF16 X(r, k) and X(r, k+1) side by side, low half
 * first, as the packer interleaves them; 2-byte aligned only when lda is
 * odd, hence the unaligned load). */
static inline __attribute__((always_inline)) __m512bh
a_pair(const uint32_t *ap, const char *p0, const char *p5, const char *p10, size_t l, size_t l3,
       const int r, const bool a_kc) {
    if (!a_kc) return (__m512bh)_mm512_set1_epi32((int)ap[r]);
    int32_t w; /* memcpy: an unaligned load that ASan checks (and GCC folds) */
    memcpy(&w, a_row_at(p0, p5, p10, l, l3, r), sizeof w);
    return (__m512bh)_mm512_set1_epi32(w);
}

/* The BF16 tile: A(r, q) = ap[r + q*MR] (packed pair panel) or, with a_kc,
 * the word at ap + r*la + 4q bytes (op(A) = A BF16 read in place along k,
 * rows la bytes apart; kp pairs = an even kc, so no pair reaches past a
 * row). a_kc only changes where the broadcasts are read from: the same
 * vdpbf16ps sequence and store, so the same bits. */
static inline __attribute__((always_inline)) void
uk_bf16(size_t kp, const void *ap, size_t la, const uint32_t *b, float *c, size_t ldc,
        const int mr, const int nv, __mmask16 last, float alpha, float beta, mxp_gemm_store mode,
        bool pfc, const float *cn, const bool a_kc) {
    __m512 acc[MXP_GEMM_MR][MXP_GEMM_NV];
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    if (pfc) prefetch_c(c, ldc, mr, nv);
    /* a_kc: row bases only for rows that exist (no pointer past op(A)) */
    const uint32_t *a = a_kc ? NULL : ap;
    const size_t l3 = 3 * la;
    const char *p0 = ap;
    const char *p5 = a_kc && mr > 5 ? p0 + 5 * la : p0;
    const char *p10 = a_kc && mr > 10 ? p0 + 10 * la : p0;
    for (size_t q = 0; q < kp; q++) {
        if (cn && q < (size_t)mr) prefetch_next_c(cn, ldc, q);
        __m512bh bv[MXP_GEMM_NV];
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) bv[v] = (__m512bh)_mm512_load_si512(b + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < mr; r++) {
            __m512bh ar = a_pair(a, p0, p5, p10, la, l3, r, a_kc);
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
        }
        if (a_kc) {
            p0 += sizeof(uint32_t);
            p5 += sizeof(uint32_t);
            p10 += sizeof(uint32_t);
        } else {
            a += MXP_GEMM_MR;
        }
        b += MXP_GEMM_NR;
    }
    store_tile(acc, c, ldc, mr, nv, last, alpha, beta, mode);
}

/* One case per (mr, nv): constant arguments let the compiler specialise
 * the inlined body (registers, unrolling) for each edge shape. The BF16
 * tile's: A packed or read along k (akc). */
#define UKB_CALL(MRC, NVC, AKC)                                                \
    uk_bf16(k, a, la, b, c, ldc, MRC, NVC, last, alpha, beta, mode, pfc, cn, AKC)
#define UKB_CASE(MRC)                                                          \
    case MRC:                                                                  \
        if (akc && nv == 1) UKB_CALL(MRC, 1, true);                            \
        else if (akc) UKB_CALL(MRC, 2, true);                                  \
        else if (nv == 1) UKB_CALL(MRC, 1, false);                             \
        else UKB_CALL(MRC, 2, false);                                          \
        break;

/* The F32 tile's call for row count MRC: a and b with their k strides,
 * B in place (bm) or packed, A k-contiguous (akc) or not. */
#define UKF_CALL(fn, MRC, NVC, BM, AKC)                                        \
    fn(k, a, sa, b, sb, c, ldc, MRC, NVC, last, alpha, beta, mode, pfc, cn, BM, AKC)
#define UKF_CASE(fn, MRC)                                                      \
    case MRC:                                                                  \
        if (akc) {                                                             \
            if (nv == 1 && bm) UKF_CALL(fn, MRC, 1, true, true);               \
            else if (nv == 1) UKF_CALL(fn, MRC, 1, false, true);               \
            else if (bm) UKF_CALL(fn, MRC, 2, true, true);                     \
            else UKF_CALL(fn, MRC, 2, false, true);                            \
        } else {                                                               \
            if (nv == 1 && bm) UKF_CALL(fn, MRC, 1, true, false);              \
            else if (nv == 1) UKF_CALL(fn, MRC, 1, false, false);              \
            else if (bm) UKF_CALL(fn, MRC, 2, true, false);                    \
            else UKF_CALL(fn, MRC, 2, false, false);                           \
        }                                                                      \
        break;

static inline __mmask16 last_mask(int nr, int *nv) {
    *nv = nr > 16 ? 2 : 1;
    int rem = nr - 16 * (*nv - 1);
    return rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1u);
}

void mxp_avx512_ukernel_f32(size_t kc, const float *ap, size_t sa, bool a_kc, const float *bp,
                            size_t sb, bool b_in_place, float *c, size_t ldc, int mr, int nr,
                            float alpha, float beta, mxp_gemm_store mode, bool pfc,
                            const float *cn) {
    int nv;
    __mmask16 last = last_mask(nr, &nv);
    size_t k = kc;
    const float *a = ap, *b = bp;
    const bool bm = b_in_place, akc = a_kc;
    switch (mr) {
        UKF_CASE(uk_f32, 1) UKF_CASE(uk_f32, 2) UKF_CASE(uk_f32, 3) UKF_CASE(uk_f32, 4)
        UKF_CASE(uk_f32, 5) UKF_CASE(uk_f32, 6) UKF_CASE(uk_f32, 7) UKF_CASE(uk_f32, 8)
        UKF_CASE(uk_f32, 9) UKF_CASE(uk_f32, 10) UKF_CASE(uk_f32, 11) UKF_CASE(uk_f32, 12)
        UKF_CASE(uk_f32, 13) UKF_CASE(uk_f32, 14)
    default: break;
    }
}

/* Prefetch distance of the small-M kernel, in k steps (each 14-28 FMAs). */
enum { BT_PREFETCH_K = 16 };

/* The small-M kernels' store: acc[r][v] lane l is C[16 v + l][r] (r < nr,
 * rows < m); each 16-row block is transposed in registers and written with
 * store_tile's arithmetic row by row. */
static inline __attribute__((always_inline)) void
store_bt(__m512 acc[MXP_GEMM_MR][MXP_GEMM_NV], float *c, size_t ldc, const int m, const int nr,
         const int nv, float alpha, float beta, mxp_gemm_store mode) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __mmask16 cm = (__mmask16)((1u << nr) - 1u);
    for (int v = 0; v < nv; v++) {
        __m512 t[16];
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) t[r] = r < nr ? acc[r][v] : _mm512_setzero_ps();
        mxp_avx512_transpose16(t);
        int rows = m - 16 * v < 16 ? m - 16 * v : 16;
        for (int l = 0; l < rows; l++) {
            float *p = c + (size_t)(16 * v + l) * ldc;
            _mm512_mask_storeu_ps(p, cm, store_value(t[l], p, cm, va, vb, mode));
        }
    }
}

/* The column-edge kernel (contract in gemm_internal.h): acc[t][j] lane r
 * is C[t*MR + r][j]; per k step one masked load of each of the G tiles' A
 * micro-panels (A(t*MR + r, k) = a[t*ta + r + k*sa]) and nr broadcasts of
 * B(k, j) = b[j + k*sb], feeding G*nr FMAs with uk_f32's operand order
 * (A, B, acc): each element gets uk_f32's FMA sequence. G tiles at once
 * so that at least 8 independent FMA chains hide the FMA latency (one
 * element's chain cannot be split without changing its bits); tiles past
 * `rows` get a zero mask (nothing read or written). Each tile is stored
 * by store_bt (transposed in registers; store_tile's arithmetic). */
static inline __attribute__((always_inline)) void
uk_f32_cols(size_t kc, const float *a, size_t sa, size_t ta, const float *b, size_t sb,
            float *c, size_t ldc, int rows, const int nr, const int G, float alpha, float beta,
            mxp_gemm_store mode) {
    __mmask16 rm[MXP_GEMM_COLS_TILES];
    const float *at[MXP_GEMM_COLS_TILES];
    const int tiles = (rows + MXP_GEMM_MR - 1) / MXP_GEMM_MR;
#pragma GCC unroll 4
    for (int t = 0; t < G; t++) {
        const int r = rows - t * MXP_GEMM_MR;
        rm[t] = r >= MXP_GEMM_MR ? (__mmask16)((1u << MXP_GEMM_MR) - 1u)
                : r > 0          ? (__mmask16)((1u << r) - 1u)
                                 : (__mmask16)0;
        at[t] = a + (size_t)(t < tiles ? t : tiles - 1) * ta; /* a tile's own, or masked */
    }
    __m512 acc[MXP_GEMM_COLS_TILES][MXP_GEMM_COLS_MAX];
#pragma GCC unroll 4
    for (int t = 0; t < G; t++)
#pragma GCC unroll 2
        for (int j = 0; j < nr; j++) acc[t][j] = _mm512_setzero_ps();
    for (size_t k = 0; k < kc; k++) {
        __m512 av[MXP_GEMM_COLS_TILES];
#pragma GCC unroll 4
        for (int t = 0; t < G; t++) {
            av[t] = _mm512_maskz_loadu_ps(rm[t], at[t]);
            at[t] += sa;
        }
#pragma GCC unroll 2
        for (int j = 0; j < nr; j++) {
            const __m512 bj = _mm512_set1_ps(b[j]);
#pragma GCC unroll 4
            for (int t = 0; t < G; t++) acc[t][j] = _mm512_fmadd_ps(av[t], bj, acc[t][j]);
        }
        b += sb;
    }
    for (int t = 0; t < tiles && t < G; t++) {
        __m512 tile[MXP_GEMM_MR][MXP_GEMM_NV];
#pragma GCC unroll 2
        for (int j = 0; j < nr; j++) tile[j][0] = acc[t][j];
        const int r = rows - t * MXP_GEMM_MR;
        store_bt(tile, c + (size_t)t * MXP_GEMM_MR * ldc, ldc, r < MXP_GEMM_MR ? r : MXP_GEMM_MR,
                 nr, 1, alpha, beta, mode);
    }
}

void mxp_avx512_ukernel_f32_cols(size_t kc, const float *ap, size_t sa, size_t ta,
                                 const float *bp, size_t sb, float *c, size_t ldc, int rows,
                                 int nr, float alpha, float beta, mxp_gemm_store mode) {
    static_assert(MXP_GEMM_COLS_MAX == 2 && MXP_GEMM_COLS_TILES == 4,
                  "nr = 1 or 2, 4 tiles: 4 or 8 FMA chains");
    if (nr == 1)
        uk_f32_cols(kc, ap, sa, ta, bp, sb, c, ldc, rows, 1, MXP_GEMM_COLS_TILES, alpha, beta,
                    mode);
    else if (nr == 2)
        uk_f32_cols(kc, ap, sa, ta, bp, sb, c, ldc, rows, 2, MXP_GEMM_COLS_TILES, alpha, beta,
                    mode);
}

/* The small-M kernel (contract in gemm_internal.h): acc[r][v] lane l is
 * C[16 v + l][r]; per k one or two loads of the A panel and nr broadcasts
 * of B(r, k) straight from op(B). The store transposes each 16-row block of
 * C in registers and applies store_tile's arithmetic row by row. */
static inline __attribute__((always_inline)) void
uk_f32_bt(size_t kc, const float *a, const float *b, size_t sj, size_t sk, float *c,
          size_t ldc, const int m, const int nr, const int nv, float alpha, float beta,
          mxp_gemm_store mode) {
    __m512 acc[MXP_GEMM_MR][MXP_GEMM_NV];
#pragma GCC unroll 16
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    /* op(B) rows along k are ldb apart when op(B) is B (sk = ldb): every k
     * step reads new lines, often on a new page, where the hardware
     * prefetcher does not follow; fetch them BT_PREFETCH_K steps ahead. */
    const size_t pf = sk > 1 ? BT_PREFETCH_K * sk * sizeof(float) : 0;
    const size_t last = (size_t)(nr - 1) * sj * sizeof(float);
    for (size_t k = 0; k < kc; k++) {
        if (pf) {
            prefetch_at(b, pf);
            prefetch_at(b, pf + last);
        }
        __m512 av[MXP_GEMM_NV];
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) av[v] = _mm512_load_ps(a + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < nr; r++) {
            __m512 br = _mm512_set1_ps(b[(size_t)r * sj]);
#pragma GCC unroll 2
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(br, av[v], acc[r][v]);
        }
        a += MXP_GEMM_NR;
        b += sk;
    }
    store_bt(acc, c, ldc, m, nr, nv, alpha, beta, mode);
}

#define UKBT_CASE(NRC)                                                         \
    case NRC:                                                                  \
        if (nv == 1) uk_f32_bt(kc, ap, b, sj, sk, c, ldc, m, NRC, 1, alpha, beta, mode); \
        else uk_f32_bt(kc, ap, b, sj, sk, c, ldc, m, NRC, 2, alpha, beta, mode); \
        break;

void mxp_avx512_ukernel_f32_bt(size_t kc, const float *ap, const float *b, size_t sj,
                               size_t sk, float *c, size_t ldc, int m, int nr, float alpha,
                               float beta, mxp_gemm_store mode) {
    const int nv = m > 16 ? 2 : 1;
    switch (nr) {
        UKBT_CASE(1) UKBT_CASE(2) UKBT_CASE(3) UKBT_CASE(4) UKBT_CASE(5) UKBT_CASE(6)
        UKBT_CASE(7) UKBT_CASE(8) UKBT_CASE(9) UKBT_CASE(10) UKBT_CASE(11) UKBT_CASE(12)
        UKBT_CASE(13) UKBT_CASE(14)
    default: break;
    }
}

void mxp_avx512_ukernel_bf16(size_t kp, const void *ap, size_t lda, bool a_kc,
                             const uint32_t *bp, float *c, size_t ldc, int mr, int nr,
                             float alpha, float beta, mxp_gemm_store mode, bool pfc,
                             const float *cn) {
    int nv;
    __mmask16 last = last_mask(nr, &nv);
    size_t k = kp, la = a_kc ? lda * sizeof(uint16_t) : 0;
    const void *a = ap;
    const uint32_t *b = bp;
    const bool akc = a_kc;
    switch (mr) {
        UKB_CASE(1) UKB_CASE(2) UKB_CASE(3) UKB_CASE(4) UKB_CASE(5) UKB_CASE(6) UKB_CASE(7)
        UKB_CASE(8) UKB_CASE(9) UKB_CASE(10) UKB_CASE(11) UKB_CASE(12) UKB_CASE(13)
        UKB_CASE(14)
    default: break;
    }
}

/* mxp_avx512_ukernel_bf16_row for the _UNIT store modes, software-
 * pipelined: the first k pair of tile t+1 is issued row by row between the
 * stores of tile t's C rows, so the next tile's vdpbf16ps chains start
 * while this one drains and its C stores retire (short K: the 28 stores
 * and their C loads are a large share of a 16-pair tile). Per element the
 * same instructions as uk_bf16: acc = vdpbf16ps(0, A pair 0, B pair 0),
 * then pairs 1 .. kp-1 in order, then the store. A packed, or read along
 * k (a_kc: rows la bytes apart, as uk_bf16). Accumulators as named
 * variables (see uk_w16_bt). kp >= 1, tiles >= 1. */
static inline __attribute__((always_inline)) void
bf16_row_sp(size_t kp, const void *ap, size_t la, const uint32_t *b, size_t tiles, float *c,
            size_t ldc, float alpha, float beta, const mxp_gemm_store mode, const float *cn,
            const bool a_kc) {
#define SP_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define SP_DECL(R) __m512 x##R##_0, x##R##_1;
#define SP_FIRST(R)                                                            \
    {                                                                          \
        const __m512bh br = a_pair(a, p0, p5, p10, la, l3, R, a_kc);           \
        x##R##_0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), br, nb0);             \
        x##R##_1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), br, nb1);             \
    }
#define SP_STEP(R)                                                             \
    {                                                                          \
        const __m512bh br = a_pair(aq, q0, q5, q10, la, l3, R, a_kc);          \
        x##R##_0 = _mm512_dpbf16_ps(x##R##_0, br, b0);                         \
        x##R##_1 = _mm512_dpbf16_ps(x##R##_1, br, b1);                         \
    }
#define SP_STORE(R)                                                            \
    _mm512_storeu_ps(row, store_value(x##R##_0, row, 0xffff, va, vb, mode));   \
    _mm512_storeu_ps(row + 16, store_value(x##R##_1, row + 16, 0xffff, va, vb, mode)); \
    SP_FIRST(R)                                                                \
    row += ldc;                                                                \
    __asm__("" : "+r"(row));
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const uint32_t *a = a_kc ? NULL : ap;
    const size_t l3 = 3 * la;
    const char *p0 = ap;
    const char *p5 = a_kc ? p0 + 5 * la : p0, *p10 = a_kc ? p0 + 10 * la : p0;
    SP_ROWS(SP_DECL)
    __m512bh nb0 = (__m512bh)_mm512_load_si512(b), nb1 = (__m512bh)_mm512_load_si512(b + 16);
    SP_ROWS(SP_FIRST)
    for (size_t t = 0; t < tiles; t++) {
        const float *next = t + 1 < tiles ? c + MXP_GEMM_NR : cn;
        const uint32_t *aq = a_kc ? NULL : a + MXP_GEMM_MR, *bq = b + MXP_GEMM_NR;
        const size_t w = sizeof(uint32_t);
        const char *q0 = p0 + (a_kc ? w : 0), *q5 = p5 + (a_kc ? w : 0);
        const char *q10 = p10 + (a_kc ? w : 0);
        for (size_t q = 1; q < kp; q++) {
            if (next && q - 1 < (size_t)MXP_GEMM_MR) prefetch_next_c(next, ldc, q - 1);
            const __m512bh b0 = (__m512bh)_mm512_load_si512(bq);
            const __m512bh b1 = (__m512bh)_mm512_load_si512(bq + 16);
            SP_ROWS(SP_STEP)
            if (a_kc) {
                q0 += w;
                q5 += w;
                q10 += w;
            } else {
                aq += MXP_GEMM_MR;
            }
            bq += MXP_GEMM_NR;
        }
        /* the next tile's first k pair (the last tile's: its own again,
         * never stored) while this tile's C is stored */
        const uint32_t *bn = t + 1 < tiles ? b + MXP_GEMM_NR * kp : b;
        nb0 = (__m512bh)_mm512_load_si512(bn);
        nb1 = (__m512bh)_mm512_load_si512(bn + 16);
        float *row = c;
        SP_ROWS(SP_STORE)
        b = bn;
        c += MXP_GEMM_NR;
    }
#undef SP_ROWS
#undef SP_DECL
#undef SP_FIRST
#undef SP_STEP
#undef SP_STORE
}

/* A row of full BF16 tiles (contract in gemm_internal.h): one call, so the
 * per-tile call, dispatch and vzeroupper are paid once per row. */
#define UKB_ROW_SP(MODE, AKC)                                                  \
    bf16_row_sp(kp, ap, la, bp, tiles, c, ldc, alpha, beta, MODE, cn, AKC)
#define UKB_ROW(AKC)                                                           \
    for (size_t t = 0; t < tiles; t++) {                                       \
        const float *next = t + 1 < tiles ? c + MXP_GEMM_NR : cn;              \
        uk_bf16(kp, ap, la, bp, c, ldc, MXP_GEMM_MR, MXP_GEMM_NV, (__mmask16)0xffff, alpha, \
                beta, mode, false, next, AKC);                                 \
        bp += MXP_GEMM_NR * kp;                                                \
        c += MXP_GEMM_NR;                                                      \
    }
void mxp_avx512_ukernel_bf16_row(size_t kp, const void *ap, size_t lda, bool a_kc,
                                 const uint32_t *bp, size_t tiles, float *c, size_t ldc,
                                 float alpha, float beta, mxp_gemm_store mode, const float *cn) {
    if (tiles == 0) return;
    const size_t la = a_kc ? lda * sizeof(uint16_t) : 0;
    switch (mode) { /* the unit stores leave registers for the pipelining */
    case MXP_GEMM_STORE_SET_UNIT:
        if (a_kc) UKB_ROW_SP(MXP_GEMM_STORE_SET_UNIT, true);
        else UKB_ROW_SP(MXP_GEMM_STORE_SET_UNIT, false);
        return;
    case MXP_GEMM_STORE_BETA_UNIT:
        if (a_kc) UKB_ROW_SP(MXP_GEMM_STORE_BETA_UNIT, true);
        else UKB_ROW_SP(MXP_GEMM_STORE_BETA_UNIT, false);
        return;
    case MXP_GEMM_STORE_ADD_UNIT:
        if (a_kc) UKB_ROW_SP(MXP_GEMM_STORE_ADD_UNIT, true);
        else UKB_ROW_SP(MXP_GEMM_STORE_ADD_UNIT, false);
        return;
    default: break;
    }
    if (a_kc) UKB_ROW(true)
    else UKB_ROW(false)
}
#undef UKB_ROW_SP
#undef UKB_ROW

/* A row of full F32 tiles (contract in gemm_internal.h). */
#define UKF_ROW(BM, AKC)                                                       \
    for (size_t t = 0; t < tiles; t++) {                                       \
        const float *next = t + 1 < tiles ? c + MXP_GEMM_NR : cn;              \
        uk_f32(kc, ap, sa, bp, sb, c, ldc, MXP_GEMM_MR, MXP_GEMM_NV, (__mmask16)0xffff, alpha, \
               beta, mode, false, next, BM, AKC);                              \
        bp += bt;                                                              \
        c += MXP_GEMM_NR;                                                      \
    }
void mxp_avx512_ukernel_f32_row(size_t kc, const float *ap, size_t sa, bool a_kc,
                                const float *bp, size_t sb, size_t bt, bool b_in_place,
                                size_t tiles, float *c, size_t ldc, float alpha, float beta,
                                mxp_gemm_store mode, const float *cn) {
    if (a_kc && b_in_place) UKF_ROW(true, true)
    else if (a_kc) UKF_ROW(false, true)
    else if (b_in_place) UKF_ROW(true, false)
    else UKF_ROW(false, false)
}
#undef UKF_ROW

/* ---- small M with a 16-bit op(B) ----------------------------------------- */

/* How many k steps ahead the 16-bit small-M kernel widens op(B), and the
 * rows of its ring buffer (a power of two, >= 2 * W16_AHEAD). */
enum { W16_AHEAD = 16, W16_RING = 32 };

/* 16 FP16 or BF16 values at p (lanes outside m are 0) widened to FP32:
 * exact, no floating-point arithmetic (as gemm_pack.c's load16_f32). */
static inline __attribute__((always_inline)) __m512 widen16(bool f16, const uint16_t *p,
                                                            __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The small-M kernel on a 16-bit op(B) contiguous along j (contract in
 * gemm_internal.h): as uk_f32_bt, with row k of op(B) (its nr columns)
 * widened into a ring of W16_RING FP32 rows (the caller's scratch, 2 KiB,
 * stays in L1) W16_AHEAD k steps before the FMAs of step k read it: one
 * load, conversion and store per k step, which overlap the FMAs of the
 * steps before. Each B value is widened once per call, exactly, as the
 * packer would widen it, and the FMAs are uk_f32_bt's: the same sequence
 * per element of C. (Widening a whole MR x kc group into a buffer first,
 * then the FP32 kernel on it, was 5-10% slower than packing all of op(B),
 * docs/results/kernels-passes.md.) */
static inline __attribute__((always_inline)) void
uk_w16_bt(size_t kc, const float *a, const bool f16, const uint16_t *b, size_t sk, float *c,
          size_t ldc, const int m, const int nr, const int nv, float alpha, float beta,
          mxp_gemm_store mode, float *restrict ring) {
    /* The accumulators as named variables, not an array: with the ring's
     * store in the k loop, GCC 12 kept an accumulator array in memory and
     * stored all of it on every k step (2.5x slower). */
#define W16_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define W16_DECL(R) __m512 x##R##_0 = _mm512_setzero_ps(), x##R##_1 = _mm512_setzero_ps();
#define W16_FMA(R)                                                             \
    if (nr > R) {                                                              \
        const __m512 br = _mm512_set1_ps(w[R]);                                \
        x##R##_0 = _mm512_fmadd_ps(br, a0, x##R##_0);                          \
        if (nv > 1) x##R##_1 = _mm512_fmadd_ps(br, a1, x##R##_1);              \
    }
#define W16_OUT(R)                                                             \
    acc[R][0] = x##R##_0;                                                      \
    acc[R][1] = x##R##_1;
    W16_ROWS(W16_DECL)
    const __mmask16 cm = (__mmask16)((1u << nr) - 1u);
    /* B rows are ldb apart, often on a new page: prefetch BT_PREFETCH_K
     * steps beyond the row being widened (as uk_f32_bt) */
    const size_t pf = BT_PREFETCH_K * sk * sizeof(uint16_t);
    const size_t last = (size_t)(nr - 1) * sizeof(uint16_t);
    const size_t pre = kc < W16_AHEAD ? kc : W16_AHEAD;
    const uint16_t *bw = b;
#pragma GCC unroll 1
    for (size_t k = 0; k < pre; k++, bw += sk)
        _mm512_store_ps(ring + 16 * k, widen16(f16, bw, cm));
    for (size_t k = 0; k < kc; k++) {
        if (k + W16_AHEAD < kc) {
            prefetch_at(bw, pf);
            prefetch_at(bw, pf + last);
            _mm512_store_ps(ring + 16 * ((k + W16_AHEAD) & (W16_RING - 1)), widen16(f16, bw, cm));
            bw += sk;
        }
        const float *w = ring + 16 * (k & (W16_RING - 1));
        const __m512 a0 = _mm512_load_ps(a);
        const __m512 a1 = nv > 1 ? _mm512_load_ps(a + 16) : a0;
        W16_ROWS(W16_FMA)
        a += MXP_GEMM_NR;
    }
    __m512 acc[MXP_GEMM_MR][MXP_GEMM_NV];
    W16_ROWS(W16_OUT)
    store_bt(acc, c, ldc, m, nr, nv, alpha, beta, mode);
#undef W16_ROWS
#undef W16_DECL
#undef W16_FMA
#undef W16_OUT
}

#define UKW_CASE(NRC)                                                          \
    case NRC:                                                                  \
        if (nv == 1 && f16) uk_w16_bt(kc, ap, true, b, sk, c, ldc, m, NRC, 1, alpha, beta, mode, ring); \
        else if (nv == 1) uk_w16_bt(kc, ap, false, b, sk, c, ldc, m, NRC, 1, alpha, beta, mode, ring); \
        else if (f16) uk_w16_bt(kc, ap, true, b, sk, c, ldc, m, NRC, 2, alpha, beta, mode, ring); \
        else uk_w16_bt(kc, ap, false, b, sk, c, ldc, m, NRC, 2, alpha, beta, mode, ring); \
        break;

void mxp_avx512_ukernel_w16_bt(size_t kc, const float *ap, mxp_dtype bt, const void *bv,
                               size_t sk, float *c, size_t ldc, int m, int nr, float alpha,
                               float beta, mxp_gemm_store mode, float *ring) {
    const int nv = m > 16 ? 2 : 1;
    const bool f16 = bt == MXP_DTYPE_F16;
    const uint16_t *b = bv;
    switch (nr) {
        UKW_CASE(1) UKW_CASE(2) UKW_CASE(3) UKW_CASE(4) UKW_CASE(5) UKW_CASE(6)
        UKW_CASE(7) UKW_CASE(8) UKW_CASE(9) UKW_CASE(10) UKW_CASE(11) UKW_CASE(12)
        UKW_CASE(13) UKW_CASE(14)
    default: break;
    }
}
