/* kernels/x86_avx512/gemm_internal.h: pieces of the AVX-512 GEMM (internal).
 *
 * The GEMM is BLIS-shaped (Van Zee & van de Geijn, "BLIS: A Framework for
 * Rapidly Instantiating BLAS Functionality", TOMS 2015; Goto & van de Geijn,
 * "Anatomy of High-Performance Matrix Multiplication", TOMS 2008):
 *   gemm.c         driver: path choice, cache blocking (NC, KC, MC loops),
 *                  the split of C between threads, the table slot;
 *   gemm_pack.c    packing of op(A) and op(B) into contiguous micro-panels,
 *                  widening every input dtype while packing;
 *   gemm_ukernel.c register-blocked microkernels (MR x NR tile of C);
 *   gemm_fallback.c the DPBF16 path's tiles with BF16 subnormal inputs.
 *
 * Both operands are packed by ONE packer, seen as a "panel source": a matrix
 * X whose rows are the rows of op(A) (i) or the columns of op(B) (j), and
 * whose columns are the reduction index k. A micro-panel of width W (MR for
 * A, NR for B) stores, for each k, the W values X[r0 .. r0+W)[k] next to each
 * other (zero-padded past the last row), so the microkernel reads A and B
 * with unit stride in k.
 *
 * Two compute paths:
 *   F32    operands widened to FP32 while packing; FP32 FMA microkernel.
 *   DPBF16 operands kept as BF16 (FP8 widened to BF16 exactly); pairs of k
 *          interleaved into 32-bit words; vdpbf16ps microkernel (2 products
 *          per lane per instruction, FP32 accumulation). Used when both
 *          operands are BF16/FP8. vdpbf16ps reads BF16 subnormals as zero, so
 *          an element of C whose row of op(A) or whose B micro-panel (NR
 *          columns at a multiple of NR) holds one in a K block (flagged
 *          while packing) is computed for that K block on the F32 path
 *          instead, from freshly widened micro-panels: exact, and decided
 *          from that element's own inputs only, so independent of where a
 *          thread's rows start.
 */
#ifndef MIXPREC_KERNELS_AVX512_GEMM_INTERNAL_H
#define MIXPREC_KERNELS_AVX512_GEMM_INTERNAL_H

#include "kernels/x86_avx512/avx512.h"

#include <assert.h>
#include <immintrin.h>

/* Register tile MR x NR (NR = 16 * NV lanes); cache blocks: KC (the most
 * k of a packed block: 512 on the F32 path, 1024 on the BF16 path, so a
 * micro-panel has the same bytes on both; even, so k pairs never straddle
 * a block; gemm.c cuts K into equal blocks of at most this), MC (rows of
 * op(A) per packed block, a multiple of MR), NC (columns of op(B) per
 * packed block, a multiple of NR). See docs/results/kernels-passes.md for how they were
 * chosen. */
enum {
    MXP_GEMM_MR = 14,
    MXP_GEMM_NV = 2,
    MXP_GEMM_NR = 16 * MXP_GEMM_NV,
    MXP_GEMM_KC = 512,
    MXP_GEMM_KC_BF16 = 1024,
    MXP_GEMM_MC = 14 * 24,
    MXP_GEMM_NC = 32 * 32,
};

static_assert(MXP_GEMM_MC % MXP_GEMM_MR == 0 && MXP_GEMM_NC % MXP_GEMM_NR == 0 &&
                  MXP_GEMM_KC_BF16 % 2 == 0 && MXP_GEMM_KC_BF16 * 2 <= MXP_GEMM_KC * 4,
              "blocks are whole micro-panels and whole k pairs; BF16 blocks fit the "
              "FP32 buffers");

/* Per-CPU choices of the GEMM, from cpuid (tune.c, where each is
 * justified by a measurement). Same bits whatever they are, except the
 * path: BF16 pairs on the F32 path are exact FP32 FMAs, on the DPBF16 path
 * vdpbf16ps pairs (both accumulate in FP32). */
typedef struct mxp_avx512_tune {
    bool dpbf16_fast;       /* AUTO sends BF16/FP8 pairs to the DPBF16 path (vdpbf16ps
                             * at least as fast per product as FP32 FMA), else F32 */
    size_t in_place_max_ld; /* an FP32 op(A) is read in place up to this ld (gemm.c
                             * in_place) */
    size_t in_place_b_max_ld; /* and an FP32 op(B) up to this one when C has at most */
    size_t in_place_b_max_m;  /* this many rows (else up to in_place_max_ld) */
    size_t nc;              /* columns of op(B) per packed block, <= MXP_GEMM_NC */
    int cols_max_nr;        /* F32 edge tiles of at most this many columns take
                             * mxp_avx512_ukernel_f32_cols (0: none) */
    size_t l2_bytes;        /* per core, from cpuid; 0 when not reported */
} mxp_avx512_tune;
const mxp_avx512_tune *mxp_avx512_tune_get(void);

typedef enum mxp_gemm_path {
    MXP_GEMM_PATH_AUTO,   /* DPBF16 for BF16/FP8 pairs, else F32 */
    MXP_GEMM_PATH_F32,    /* always widen to FP32 */
    MXP_GEMM_PATH_DPBF16, /* same as AUTO (DPBF16 only where it applies) */
    MXP_GEMM_PATH_COUNT
} mxp_gemm_path;

typedef struct mxp_avx512_gemm_opts {
    mxp_gemm_path path;
    int threads;       /* upper bound on threads; 0 = mxp_threads_max() */
    bool packed_only;  /* never take the small-M path, and pack a k-contiguous
                        * FP32 op(A) instead of reading it in place (gemm.c's
                        * a_kc): the reference of tests, benchmarks */
} mxp_avx512_gemm_opts;

/* Small-M path: taken when M <= MXP_GEMM_SMALL_M, the F32 path applies and
 * op(B) is FP32, or FP16/BF16 with op(B) = B (gemm.c), unless the packed
 * path reads both FP32 operands in place (gemm.c, small_packed_better).
 * Only op(A) is packed (as one NR-wide panel over the rows of C); op(B) is
 * read in place by mxp_avx512_ukernel_f32_bt or mxp_avx512_ukernel_w16_bt. */
enum { MXP_GEMM_SMALL_M = 32 };

/* The AVX-512 GEMM with explicit options (tests and benchmarks use it to
 * pin the path and the thread count). Contract of mxp_gemm_args. The result
 * does not depend on the number of threads: every element of C is computed
 * by the same instruction sequence whichever thread owns its tile. */
void mxp_avx512_gemm_ex(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o);
/* The products gs[0 .. count) (count <= MXP_AVX512_GEMM_MANY), each planned
 * as mxp_avx512_gemm_ex plans it alone (default options), their parts in
 * ONE parallel region: thread t runs parts t, t + T, ... of the list of
 * every product's parts (gemm_strided.c); when every product is one part
 * (too small to be cut), all on the caller. Bits: each product's, as alone
 * (no output depends on where a part starts or which thread runs it). */
#define MXP_AVX512_GEMM_MANY 64
void mxp_avx512_gemm_many(const mxp_gemm_args *gs, int count);

/* The most parts (threads) one call is cut into. */
enum { MXP_GEMM_MAX_PARTS = 64 };

/* How mxp_avx512_gemm_ex(g, o) cuts C between its threads (tests and
 * benchmarks): returns the number of parts (1 when it runs on the calling
 * thread alone; 0 when there is nothing to compute), sets *split_n (parts
 * are column ranges of C over all M rows, else row ranges over all N
 * columns) and part q's range [lo[q], hi[q]) (arrays of
 * MXP_GEMM_MAX_PARTS). A part may be empty (lo == hi). */
int mxp_avx512_gemm_split(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o, bool *split_n,
                          size_t lo[], size_t hi[]);

/* The table's gemm_epi (contract in kernels.h) with explicit options: the
 * epilogue e runs on each block of C after its last K block, on the thread
 * that computed it (gemm_block per row of tiles, gemm_range_small over its
 * columns), where those blocks are whole rows of C (gemm.c epi_inside);
 * elsewhere it makes the contract's two calls. */
void mxp_avx512_gemm_epi_ex(const mxp_gemm_args *g, mxp_epilogue *e,
                            const mxp_avx512_gemm_opts *o);
/* The path mxp_avx512_gemm_ex would take for g under `path`. */
mxp_gemm_path mxp_avx512_gemm_path_for(const mxp_gemm_args *g, mxp_gemm_path path);

/* In-register transpose of a 16 x 16 matrix of 32-bit values: v[r] lane c
 * becomes v[c] lane r. */
static inline __attribute__((always_inline)) void mxp_avx512_transpose16(__m512 v[16]) {
    __m512 t[16];
    for (int g = 0; g < 16; g += 4) {
        __m512 lo01 = _mm512_unpacklo_ps(v[g], v[g + 1]);
        __m512 hi01 = _mm512_unpackhi_ps(v[g], v[g + 1]);
        __m512 lo23 = _mm512_unpacklo_ps(v[g + 2], v[g + 3]);
        __m512 hi23 = _mm512_unpackhi_ps(v[g + 2], v[g + 3]);
        /* t[g + q] lane L = column 4L + q of rows g .. g+3 */
        t[g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
        t[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
        t[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
        t[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
    }
    for (int q = 0; q < 4; q++) {
        __m512 a_lo = _mm512_shuffle_f32x4(t[q], t[4 + q], 0x44);
        __m512 a_hi = _mm512_shuffle_f32x4(t[q], t[4 + q], 0xee);
        __m512 b_lo = _mm512_shuffle_f32x4(t[8 + q], t[12 + q], 0x44);
        __m512 b_hi = _mm512_shuffle_f32x4(t[8 + q], t[12 + q], 0xee);
        v[0 + q] = _mm512_shuffle_f32x4(a_lo, b_lo, 0x88);
        v[4 + q] = _mm512_shuffle_f32x4(a_lo, b_lo, 0xdd);
        v[8 + q] = _mm512_shuffle_f32x4(a_hi, b_hi, 0x88);
        v[12 + q] = _mm512_shuffle_f32x4(a_hi, b_hi, 0xdd);
    }
}

/* ---- packing (gemm_pack.c) ---------------------------------------------- */

/* Matrix X[r][k] of one operand: element (r, k) lives at index
 * r*ld + k (k_contig) or k*ld + r (!k_contig) of `base`. */
typedef struct mxp_gemm_src {
    mxp_dtype type;
    const void *base;
    size_t ld;
    bool k_contig;
} mxp_gemm_src;

/* Widening tables for the FP8 formats (filled once; idempotent). */
void mxp_avx512_gemm_tables_init(void);

/* Pack X[r0 .. r0+rows)[k0 .. k0+kc) as FP32 micro-panels of width w
 * (w <= 32): panel p (rows r0 + p*w ...) starts at dst + p*w*kc and holds
 * X[r0 + p*w + r][k0 + k] at k*w + r; rows past `rows` are zero. */
void mxp_avx512_pack_f32(const mxp_gemm_src *x, size_t r0, size_t rows,
                         size_t k0, size_t kc, int w, float *dst);
/* X[r0 .. r0+rows)[k0 .. k0+kc) widened to FP32 in X's own layout, with
 * lines ldd floats apart: X(r0 + r, k0 + k) to dst[r*ldd + k] (k_contig)
 * or dst[k*ldd + r]; nothing else of dst is written. The same values as
 * mxp_avx512_pack_f32 puts in its panels, for the microkernel to read
 * "in place" (gemm.c: FP16 operands). */
void mxp_avx512_widen_f32(const mxp_gemm_src *x, size_t r0, size_t rows, size_t k0, size_t kc,
                          float *dst, size_t ldd);
/* As mxp_avx512_pack_f32, as BF16 pairs: with kp = ceil(kc/2), panel p
 * starts at dst + p*w*kp and word (q, r) at q*w + r holds X[r][k0+2q] in its
 * low half and X[r][k0+2q+1] (0 past kc) in its high half. X must be BF16 or
 * FP8 (FP8 values are exact in BF16). sub[p] (ceil(rows/w) entries) is set
 * to the rows of panel p that hold a BF16 subnormal in X[.][k0 .. k0+kc)
 * (bit r: row r0 + p*w + r; 0 for none); returns whether any panel has
 * one. */
bool mxp_avx512_pack_bf16(const mxp_gemm_src *x, size_t r0, size_t rows,
                          size_t k0, size_t kc, int w, uint32_t *dst, uint32_t *sub);

/* Whether X[r0 .. r0+rows)[k0 .. k0+kc) (BF16, k contiguous) holds a BF16
 * subnormal: the check that lets gemm.c read such an op(A) in place
 * (mxp_avx512_ukernel_bf16 with a_kc) instead of packing it. Reads only
 * those elements. */
bool mxp_avx512_bf16_kcontig_subnormal(const mxp_gemm_src *x, size_t r0, size_t rows,
                                       size_t k0, size_t kc);

/* ---- microkernels (gemm_ukernel.c) -------------------------------------- */

/* How a microkernel writes its tile. Each operation is rounded separately,
 * in this order, as in the generic kernel. The _UNIT modes are the same
 * with alpha == 1 (and, for BETA, beta == 1) without the multiplications
 * by 1: those are exact (the same bits) unless MXCSR flushes subnormals,
 * so the driver picks them only when FTZ and DAZ are both clear
 * (gemm.c, store_mode). */
typedef enum mxp_gemm_store {
    MXP_GEMM_STORE_SET,       /* C = alpha*acc            (C not read) */
    MXP_GEMM_STORE_BETA,      /* C = alpha*acc + beta*C */
    MXP_GEMM_STORE_ADD,       /* C = C + alpha*acc        (later K blocks) */
    MXP_GEMM_STORE_SET_UNIT,  /* C = acc */
    MXP_GEMM_STORE_BETA_UNIT, /* C = acc + C */
    MXP_GEMM_STORE_ADD_UNIT,  /* C = C + acc */
    MXP_GEMM_STORE_COUNT
} mxp_gemm_store;

/* C[0 .. mr)[0 .. nr) (row stride ldc) op= alpha * sum_k A(r, k) B(k, j)
 * over kc, with A(r, k) = ap[r + k*sa] (ap[r*sa + k] with a_kc) and B(k, j)
 * = bp[j + k*sb]: an MR-wide and an NR-wide FP32 micro-panel
 * (mxp_avx512_pack_f32; sa = MR, !a_kc, sb = NR; bp 64-byte aligned,
 * zero-padded) or FP32 operands read in place (sa = lda, op(A) contiguous
 * along the tile's rows, or along k with a_kc; sb = ldb with b_in_place:
 * unaligned loads, and none past column nr). The same FMAs in the same
 * order whichever form A and B take, so the same bits. Reads only rows
 * r < mr of A. 1 <= mr <= MR, 1 <= nr <= NR.
 * pfc: prefetch the C tile into L1 before the k loop (worth it when C is
 * not being streamed along its rows). cn: NULL, or the top-left element of
 * the tile the caller computes next (row stride ldc), whose first mr rows
 * (two lines each) are prefetched into L1 during the first k steps; a
 * hint only (never dereferenced). */
void mxp_avx512_ukernel_f32(size_t kc, const float *ap, size_t sa, bool a_kc, const float *bp,
                            size_t sb, bool b_in_place, float *c, size_t ldc, int mr, int nr,
                            float alpha, float beta, mxp_gemm_store mode, bool pfc,
                            const float *cn);
/* The most columns and MR-row tiles mxp_avx512_ukernel_f32_cols takes. */
enum { MXP_GEMM_COLS_MAX = 2, MXP_GEMM_COLS_TILES = 4 };
/* The F32 tiles C[0 .. rows)[0 .. nr) of a narrow column edge (1 <= nr <=
 * MXP_GEMM_COLS_MAX; 1 <= rows <= MXP_GEMM_COLS_TILES * MR, cut into
 * MR-row tiles) with the rows of C on the vector lanes: A(t*MR + r, k) =
 * ap[t*ta + r + k*sa] (tile t's packed MR-wide micro-panel: sa = MR, ta =
 * MR*kc; or op(A) in place along the rows of C: sa = lda, ta = MR; not
 * a_kc) and B(k, j) = bp[j + k*sb] (packed, sb = NR, or in place). Per
 * element the same FMAs in the same order (operands as
 * mxp_avx512_ukernel_f32's) and the same store arithmetic, so the same
 * bits as mxp_avx512_ukernel_f32 on those tiles, at nr FMAs per k step and
 * tile instead of MR. */
void mxp_avx512_ukernel_f32_cols(size_t kc, const float *ap, size_t sa, size_t ta,
                                 const float *bp, size_t sb, float *c, size_t ldc, int rows,
                                 int nr, float alpha, float beta, mxp_gemm_store mode);
/* The small-M microkernel, C^T's tile computed as in mxp_avx512_ukernel_f32
 * with the operands' roles swapped: C[0 .. m)[0 .. nr) (row stride ldc) op=
 * alpha * sum_k Ap[k][i] * B(j, k), where Ap is an NR-wide FP32 micro-panel
 * over the rows i of C (mxp_avx512_pack_f32 of op(A), w = NR; 1 <= m <= NR)
 * and B(j, k) = b[j*sj + k*sk] is op(B) in place (FP32; 1 <= nr <= MR
 * columns j). Each C element gets the same FMA sequence (products in
 * increasing k, one FMA each) and the same store arithmetic as in
 * mxp_avx512_ukernel_f32, so results are bit-identical to the packed path. */
void mxp_avx512_ukernel_f32_bt(size_t kc, const float *ap, const float *b, size_t sj,
                               size_t sk, float *c, size_t ldc, int m, int nr, float alpha,
                               float beta, mxp_gemm_store mode);
/* As mxp_avx512_ukernel_f32_bt with op(B) FP16 or BF16 (bt) in place at b
 * and contiguous along j (B(j, k) = b[j + k*sk]; nothing past column nr is
 * read), each row widened exactly to FP32 into `ring` (32 x 16 floats,
 * 64-byte aligned scratch) 16 k steps before the FMAs read it: the same
 * FMA sequence and store per element, so bit-identical to the packed path. */
void mxp_avx512_ukernel_w16_bt(size_t kc, const float *ap, mxp_dtype bt, const void *b,
                               size_t sk, float *c, size_t ldc, int m, int nr, float alpha,
                               float beta, mxp_gemm_store mode, float *ring);
/* As mxp_avx512_ukernel_f32 for BF16 pairs, kp of them: A(r, q) is word
 * r + q*MR of an MR-wide pair micro-panel at ap (mxp_avx512_pack_bf16, w =
 * MR; lda unused) or, with a_kc, op(A) = A BF16 read in place along k:
 * rows lda elements apart from ap, A(r, q) the 32-bit word at BF16 element
 * r*lda + 2q (its low half the even k, as in the panel), so the caller's
 * K block must be even (2*kp values of each row are read, none past them)
 * and free of BF16 subnormals (a block holding one is packed instead, so
 * that its flagged rows go to gemm_fallback.c). B: an NR-wide pair
 * micro-panel at bp. The same vdpbf16ps sequence and store whichever form
 * A takes, so the same bits. */
void mxp_avx512_ukernel_bf16(size_t kp, const void *ap, size_t lda, bool a_kc,
                             const uint32_t *bp, float *c, size_t ldc, int mr, int nr,
                             float alpha, float beta, mxp_gemm_store mode, bool pfc,
                             const float *cn);
/* `tiles` full MR x NR BF16 tiles side by side: tile t is
 * mxp_avx512_ukernel_bf16(kp, ap, lda, a_kc, bp + t*NR*kp, c + t*NR, ldc,
 * MR, NR, alpha, beta, mode, false, next) with next = the following tile,
 * and cn (may be NULL) after the last: the same instructions per tile, in
 * one call (the row-of-tiles sweep, gemm.c). */
void mxp_avx512_ukernel_bf16_row(size_t kp, const void *ap, size_t lda, bool a_kc,
                                 const uint32_t *bp, size_t tiles, float *c, size_t ldc,
                                 float alpha, float beta, mxp_gemm_store mode, const float *cn);
/* As mxp_avx512_ukernel_bf16_row for F32 tiles: tile t is
 * mxp_avx512_ukernel_f32(kc, ap, sa, a_kc, bp + t*bt, sb, b_in_place,
 * c + t*NR, ldc, MR, NR, alpha, beta, mode, false, next) (bt: NR*kc for packed B
 * micro-panels, NR for op(B) read in place). */
void mxp_avx512_ukernel_f32_row(size_t kc, const float *ap, size_t sa, bool a_kc,
                                const float *bp, size_t sb, size_t bt, bool b_in_place,
                                size_t tiles, float *c, size_t ldc, float alpha, float beta,
                                mxp_gemm_store mode, const float *cn);

/* ---- the DPBF16 path's subnormal fallback (gemm_fallback.c) ------------ */

/* One K block [pc, pc+kc) of a DPBF16 block of C, as the fallback tiles
 * read it: the operands, FP32 scratch for one A micro-panel (MR x
 * KC_BF16) and one B micro-panel (KC_BF16 x NR), and which panels those
 * hold (a_for / b_for: first row of op(A) / column of op(B); SIZE_MAX for
 * none: set so before the block's first tile; a_rows: 0 when ap1 holds the
 * whole A micro-panel, else the flagged rows it holds, packed together). */
typedef struct mxp_gemm_fallback {
    const mxp_gemm_src *a, *b;
    size_t pc, kc, ldc;
    float alpha, beta;
    float *ap1, *bp1;
    size_t a_for, b_for;
    uint32_t a_rows;
} mxp_gemm_fallback;

/* The tile C[i0 .. i0+mr)[j0 .. j0+nr) (at c, row stride f->ldc) of the K
 * block, stored by `mode`, bit for bit as the generic kernel's contract
 * asks when some inputs are BF16 subnormals, which vdpbf16ps reads as
 * zero: rows == 0 (op(B)'s micro-panel bp holds one), the whole tile by
 * the F32 microkernel on FP32 copies of both micro-panels; else the rows
 * set in `rows` (bit r: row i0 + r holds one) by the F32 microkernel and
 * the others by vdpbf16ps from the pair micro-panels ap (MR wide) and bp
 * (NR wide). ap is NULL when op(A) is read in place (then rows == 0);
 * rows != 0 only for a BF16 op(A). */
void mxp_avx512_tile_fallback(mxp_gemm_fallback *f, size_t i0, int mr, size_t j0, int nr,
                              const uint32_t *ap, const uint32_t *bp, uint32_t rows, float *c,
                              mxp_gemm_store mode);

#endif /* MIXPREC_KERNELS_AVX512_GEMM_INTERNAL_H */
