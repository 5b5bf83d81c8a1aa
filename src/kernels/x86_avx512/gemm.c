/* kernels/x86_avx512/gemm.c: the AVX-512 GEMM driver.
 *
 * Entry points: mxp_avx512_fill_gemm (the table slots gemm, gemm_epi and
 * gemm_strided, gemm_strided.c), mxp_avx512_gemm_ex, mxp_avx512_gemm_many, mxp_avx512_gemm_epi_ex, mxp_avx512_gemm_path_for
 * (gemm_internal.h).
 *
 * Loop nest (BLIS, Van Zee & van de Geijn 2015), for one thread's range of C:
 *   for jc in N step NC            op(B) block of NC columns
 *     for pc in K step kb          pack op(B)[pc.., jc..] -> Bp (L2/L3)
 *                                  (kb: K cut into equal blocks of at most
 *                                  KC = 512, or 1024 on the BF16 path)
 *       for ic in M step MC        pack op(A)[ic.., pc..] -> Ap (L2)
 *         for ir in MC step MR     Ap micro-panel (L1) reused ...
 *           for jr in NC step NR   ... while Bp micro-panels stream by
 *             microkernel: C[MR x NR] (=, beta*C +, or +=) alpha * Ap Bp
 *                                  (row by row of tiles: C streams along
 *                                  its rows; gemm_block)
 * The first K block applies beta (beta == 0 stores without reading C); later
 * blocks add into C, as the generic kernel does. Variations that leave every
 * tile's instruction sequence as it is (docs/results/kernels-passes.md, issue 16):
 *   - FP32 operands contiguous along the tile's rows or columns are read
 *     in place instead of packed (in_place);
 *   - op(A) = A contiguous along k is read in place (a_kc): FP32 on the
 *     F32 path; BF16 on the DPBF16 path, per block whose K length is even
 *     and which holds no BF16 subnormal (in_place_a_bf16);
 *   - a batch-sized row range with a wide B that must be widened or paired
 *     runs K blocks outermost with B packed in L2-sized chunks
 *     (gemm_range_l2);
 *   - alpha == 1 (and beta == 1) stores skip the multiplications by 1 when
 *     MXCSR keeps subnormals (store_mode);
 *   - where tune.c enables it (no CPU today), an FP32 op(B) = B at a larger
 *     ld than op(A)'s limit is read in place for few rows of C (b_max_ld);
 *     on Intel a last column
 *     tile of 1-2 columns is computed by the column kernel, rows of C on
 *     the lanes, each element with the same FMAs and store (gemm_block,
 *     mxp_avx512_ukernel_f32_cols).
 *
 * Path: DPBF16 (vdpbf16ps on BF16 pairs) when both operands are BF16 or FP8,
 * else F32 (widen while packing, FP32 FMA). On this CPU vdpbf16ps retires as
 * many instructions per cycle as the FP32 FMA and each does twice the
 * products (docs/results/kernels-passes.md). vdpbf16ps reads BF16 subnormals as zero: the
 * packer flags the rows of A micro-panels and the B micro-panels that hold
 * one, and for that K block an element whose row or B micro-panel is
 * flagged is computed by the F32 microkernel on FP32 copies of its
 * micro-panels (exact; gemm_fallback.c). Rows, not A micro-panels, so the
 * choice does not depend on where a thread's row range starts.
 *
 * Small M (M <= MXP_GEMM_SMALL_M = NR, F32 path; op(B) FP32, or FP16/BF16
 * stored as B): a batch-32 linear layer would pack (and widen) the whole
 * weight op(B) for one use. Instead only op(A) is packed, as one NR-wide
 * panel over the rows of C, and the microkernel computes C^T's tile (MR
 * columns of C x all rows) with broadcasts read straight from op(B), in
 * either layout, or, for a 16-bit op(B), from rows of it widened 16 k steps
 * ahead into a small ring in L1 (mxp_avx512_ukernel_w16_bt); the store
 * transposes in registers. The FMA sequence of every element is the packed
 * path's, so the results are bit-identical to it (tested). Where the
 * packed path would read both FP32 operands in place and op(B)'s K block
 * fits in L2 (small_packed_better: the batch-32 dX of a 256- or 512-wide
 * layer), it packs nothing and takes the product instead.
 *
 * gemm_epi (the linear layer's forward epilogue, kernels.h): after the
 * last K block of a block of C, gemm_block runs the epilogue (bias, store,
 * scan, activation, store, scan: loops_fused.c's pieces, the code of
 * bias_act_store) over each row of tiles it has just written (MR rows x the
 * block's columns, in L1/L2), and gemm_range_small over all M rows of its
 * columns (at most EPI_SMALL_COLS); subnormal fallback tiles are in those
 * rows. Only where those blocks are whole rows of C (epi_inside); else
 * gemm_epi makes the contract's two calls. Each part folds its absmax /
 * non-finite counts into its own slot and the driver combines the slots
 * (max, sum: exact), so the results are those of gemm then bias_act_store,
 * for any thread count.
 *
 * Threads: problems of at least THREAD_MIN_FLOPS are cut into disjoint
 * ranges, one per thread, each running the loop nest above with its own
 * packing buffers: rows of C as equal as possible (each range ends in a
 * partial micro-tile where it must), or columns in whole NR micro-tiles
 * (prefer_m, part_range). Each element of C is computed by the same
 * instructions whatever the cut, so results are bit-identical for any
 * thread count. Buffers are process-lifetime scratch,
 * allocated on first use; calls are serialised by a mutex, since the
 * buffers are shared. If they cannot be allocated the call falls back to the
 * generic GEMM (same contract, slower) and allocation is retried next time.
 */
#include "kernels/x86_avx512/gemm_internal.h"

#include "kernels/generic/generic.h"
#include "kernels/threads.h"
#include "kernels/x86_avx512/loops.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

enum { SCRATCH_SLOTS = MXP_GEMM_MAX_PARTS };
/* gemm_epi on the small-M path: the epilogue runs inside the GEMM only for
 * at most this many columns (32 rows x 512 FP32 = 64 KiB, in L2), over all
 * of them at once (C^T tiles are MR columns wide: too short a piece). */
enum { EPI_SMALL_COLS = 512 };
enum { MXCSR_FTZ = 1u << 15, MXCSR_DAZ = 1u << 6 };
/* Below this many flops (2*M*N*K) one thread runs the GEMM: handing part
 * of a small problem to a worker costs more than it saves whenever the
 * second CPU is not free at once. Measured on the 2-vCPU development VM
 * under load (load average 6-10): the tiny world-model step (batch 32,
 * hidden 128, GEMMs of 0.5-1 MFLOP) took 0.110 ms/step on 1 thread and
 * 0.178 ms on 2 (docs/results/kernels-passes.md); the base model's GEMMs (>= 9 MFLOP)
 * keep both threads. */
#define THREAD_MIN_FLOPS (2.0 * 32 * 256 * 256)
/* At most this K, threads cut M rather than N unless N > 4 M (prefer_m). */
enum { SPLIT_M_MAX_K = 128 };
/* The most bytes of a chunk of packed op(B) meant to stay in L2 while the
 * tiles read it (gemm_range_l2; half of Zen 4's 1 MiB L2). */
#define L2_CHUNK_BYTES ((size_t)512 * 1024)
/* FP32 operands are read in place (in_place) only when their rows are at
 * most tune.c's in_place_max_ld elements apart: each k step of a
 * micro-panel then stays within a page or two. On Zen 4 that is 1024: with
 * 2048-wide rows (8 KiB apart) every k step of a 14- or 32-wide panel is a
 * new page, and reading in place was 5-7% slower than packing
 * (bench_gemm_cpu: 2048x2048x128 TN, 65x2048x512 TN); on the Intel Xeon
 * measured, 256 (tune.c). */
/* A k-contiguous FP32 op(A) is read in place (gemm_plan.a_kc) only when
 * its rows are at most this many elements apart (see in_place) and
 * at most A_KC_SET_ROWS of a tile's MR rows share a set of the 32 KiB
 * 8-way L1 (64 sets of 64-byte lines: rows 4 KiB apart share one). One
 * thread, 256x512xK NN with lda = K, in place / packed (throwaway loop
 * over mxp_avx512_gemm_ex, CPU time, median of 15): K = 1024 (14 rows in
 * a set) 0.76, 1023 (13) 0.91, 1022 (8) 1.015, 512 / 511 / 513 (7)
 * 1.015-1.02, 1016 / 1020 / 1021 / 768 / 341 / 256 / 128 (2-5)
 * 1.013-1.026. */
#define A_KC_MAX_LD 1024
/* A small-M product with both FP32 operands in place takes the packed
 * path when a K block of op(B) is at most this many bytes (Zen 4's L2;
 * small_packed_better). At 1 MiB (32x512x512 NN) packed / small read
 * 1.01-1.02 on one thread (bench_gemm_cpu: 0.98-1.01 in the f32small
 * branch, 1.013-1.025 in three runs after the merge) and 0.99-1.06 on two
 * (five runs; the small path's threads each pack all of op(A)). */
#define SMALL_PACKED_B_BYTES ((size_t)1024 * 1024)
enum { A_KC_SET_ROWS = 7, L1_SETS = 64, L1_LINE = 64 };
/* An FP16 op(A) = A^T whose k rows alias in L1 (kmajor_aliased; the MR
 * packer then runs at 2.6x the widening floor) is widened in its own
 * layout (a_widen) for at most this many columns of C: the tiles then read
 * A^T at a stride, which from N = 128 on cost more than the packing saved.
 * One thread, ours / base, 2048xNx512 TN f16, two runs: N = 72 1.038 /
 * 1.052, 128 1.005 / 0.995, 256-2048 0.985-0.999 (docs/results/kernels-passes.md). */
#define A_W16_KMAJOR_MAX_N ((size_t)96)
#define A_W16_MAX_B_BYTES ((size_t)1024 * 1024) /* a_w16_block */
/* Column ranges of the small-M path start at multiples of this many
 * floats (a 64-byte line of C), so no line of C is written by two
 * threads when C's rows are line-aligned. */
enum { C_LINE_FLOATS = 16 };

typedef struct gemm_scratch {
    float *ap;  /* MC x KC FP32 (or MC x KC/2 BF16-pair words) */
    float *bp;  /* KC x NC FP32 (or KC_BF16/2 x NC words) */
    float *ap1; /* MR x KC_BF16 FP32: one A micro-panel (subnormal fallback) */
    float *bp1; /* KC_BF16 x NR FP32: one B micro-panel (subnormal fallback) */
} gemm_scratch;

static gemm_scratch scratch[SCRATCH_SLOTS];
static int scratch_slots;
static pthread_mutex_t gemm_lock = PTHREAD_MUTEX_INITIALIZER;

/* Allocate scratch for n slots (caller holds gemm_lock). */
static bool scratch_ensure(int n) {
    for (; scratch_slots < n; scratch_slots++) {
        gemm_scratch *s = &scratch[scratch_slots];
        if (!s->ap) s->ap = mxp_calloc((size_t)MXP_GEMM_MC * MXP_GEMM_KC, sizeof(float));
        if (!s->bp) s->bp = mxp_calloc((size_t)MXP_GEMM_KC * MXP_GEMM_NC, sizeof(float));
        if (!s->ap1) s->ap1 = mxp_calloc((size_t)MXP_GEMM_MR * MXP_GEMM_KC_BF16, sizeof(float));
        if (!s->bp1) s->bp1 = mxp_calloc((size_t)MXP_GEMM_KC_BF16 * MXP_GEMM_NR, sizeof(float));
        if (!s->ap || !s->bp || !s->ap1 || !s->bp1) return false;
    }
    return true;
}

typedef struct gemm_plan {
    mxp_gemm_src a; /* rows i of op(A), columns k */
    mxp_gemm_src b; /* rows j of op(B)^T, columns k */
    size_t M, N, K, ldc;
    float *C;
    float alpha, beta;
    bool dp;
    bool a_kc;    /* op(A) = A read in place along k: FP32 on the F32 path
                   * (in_place_a), BF16 on the DPBF16 path (block by block,
                   * in_place_a_bf16) */
    bool a_w16;   /* op(A) FP16, widened in its own layout (a_widen) */
    size_t nc;    /* columns of op(B) per packed block (tune.c, <= MXP_GEMM_NC) */
    size_t kb;    /* K block length (k_block_len), the same for every thread */
    bool small;   /* the small-M path (op(A) packed once per K block, op(B) in place) */
    bool split_n; /* threads cut N (else M) */
    int parts;
    const mxp_epilogue *epi;      /* gemm_epi: run on each block after its last K block */
    mxp_epilogue_part *epi_parts; /* [parts]: part i's absmax / non-finite counts */
} gemm_plan;

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* gemm_epi: the epilogue over C[r0 .. r1)[c0 .. c1), whose last K block is
 * done, on this thread, folded into its part's results (s is the part's
 * scratch slot: gemm_part gives part i scratch[i]). */
static void epi_block(const gemm_plan *p, const gemm_scratch *s, size_t r0, size_t r1,
                      size_t c0, size_t c1) {
    mxp_avx512_epilogue_block(p->epi, (int64_t)r0, (int64_t)r1, (int64_t)c0, (int64_t)c1,
                              &p->epi_parts[s - scratch]);
}

/* Whether this thread may use the _UNIT store modes (alpha == 1): the
 * multiplications they leave out are exact only while MXCSR keeps
 * subnormals (FTZ and DAZ clear). Read in the thread that runs the range:
 * the pool gives each part the caller's FTZ/DAZ bits. */
static bool unit_ok(const gemm_plan *p) {
    return p->alpha == 1.0f && (_mm_getcsr() & (MXCSR_FTZ | MXCSR_DAZ)) == 0;
}

/* The store of the K block at pc: beta on the first (beta == 0 never reads
 * C), add on later ones; the _UNIT form when unit and beta is 0 or 1. */
static mxp_gemm_store store_mode(const gemm_plan *p, size_t pc, bool unit) {
    if (pc > 0) return unit ? MXP_GEMM_STORE_ADD_UNIT : MXP_GEMM_STORE_ADD;
    if (p->beta == 0.0f) return unit ? MXP_GEMM_STORE_SET_UNIT : MXP_GEMM_STORE_SET;
    return unit && p->beta == 1.0f ? MXP_GEMM_STORE_BETA_UNIT : MXP_GEMM_STORE_BETA;
}

/* One packed block: the micro-tiles of C[ic .. ic+mc)[jc .. jc+nc) for the
 * K block at pc (length kc), from Ap (mc x kc) and Bp (kc x nc), visited
 * row of tiles by row of tiles (ir outer, jr inner): C is read and written
 * along its rows, 14 at a time, which the hardware prefetcher follows, and
 * the next tile's C is prefetched during each tile's k loop; the A
 * micro-panel stays in L1 while the B micro-panels stream from L2 or L3.
 * BLIS's column order (jr outer: a B micro-panel in L1 while the A
 * micro-panels stream) was used for packed B blocks over 512 KiB until
 * gemm4, when the row order measured 2-10% faster on such blocks
 * (docs/results/kernels-passes.md). The order changes nothing in any tile. */
static void gemm_block(const gemm_plan *p, const gemm_scratch *s, size_t ic, size_t mc,
                       size_t jc, size_t nc, size_t pc, size_t kc, mxp_gemm_store mode,
                       bool any, const uint32_t *sub_a, const uint32_t *sub_b,
                       const float *a_in, const float *b_in, const uint16_t *a_bf) {
    size_t kp = (kc + 1) / 2;
    size_t n_ir = (mc + MXP_GEMM_MR - 1) / MXP_GEMM_MR, n_jr = (nc + MXP_GEMM_NR - 1) / MXP_GEMM_NR;
    const bool epi = p->epi && pc + kc == p->K; /* the last K block: C is final */
    const size_t a_step = p->a_kc ? p->a.ld : 1; /* a_in: from one tile row to the next */
    /* DPBF16 with BF16 subnormals in the block (any): the flagged tiles
     * go to gemm_fallback.c; a row of tiles none of which is flagged still
     * takes the row kernel */
    bool b_flagged = false;
    for (size_t q = 0; p->dp && any && q < n_jr; q++) b_flagged |= sub_b[q] != 0;
    mxp_gemm_fallback fb = {&p->a, &p->b, pc, kc, p->ldc, p->alpha, p->beta,
                            s->ap1,  s->bp1, SIZE_MAX, SIZE_MAX, 0};
    const mxp_avx512_tune *tn = mxp_avx512_tune_get();
    /* F32: a narrow last column tile (tune.c cols_max_nr) of every row of
     * tiles, first, with the rows of C on the lanes (gemm_ukernel.c
     * uk_f32_cols: the same bits as the tiles it replaces) */
    const int nr_last = (int)(nc - (n_jr - 1) * MXP_GEMM_NR);
    const bool cols = !p->dp && nr_last <= tn->cols_max_nr && !(a_in && p->a_kc);
    if (cols) {
        const size_t jr = (n_jr - 1) * MXP_GEMM_NR, g = MXP_GEMM_COLS_TILES;
        for (size_t o = 0; o < n_ir; o += g) {
            const size_t ir = o * MXP_GEMM_MR;
            mxp_avx512_ukernel_f32_cols(
                kc, a_in ? a_in + ir * a_step : s->ap + ir * kc, a_in ? p->a.ld : MXP_GEMM_MR,
                a_in ? MXP_GEMM_MR * a_step : MXP_GEMM_MR * kc, b_in ? b_in + jr : s->bp + jr * kc,
                b_in ? p->b.ld : MXP_GEMM_NR, p->C + (ic + ir) * p->ldc + jc + jr, p->ldc,
                (int)min_sz(g * MXP_GEMM_MR, mc - ir), nr_last, p->alpha, p->beta, mode);
        }
    }
    for (size_t o = 0; o < n_ir; o++) {
        size_t q0 = 0, ir = o * MXP_GEMM_MR;
        /* DPBF16: op(A)'s rows in place (a_bf) or its packed micro-panel */
        const void *ab = a_bf ? (const void *)(a_bf + ir * p->a.ld)
                              : (const void *)((const uint32_t *)s->ap + ir * kp);
        const bool flagged = p->dp && any && (b_flagged || (!a_bf && sub_a[o]));
        if (!flagged && mc - ir >= MXP_GEMM_MR) {
            /* the row's full tiles in one call; its edge tile below */
            size_t full = nc / MXP_GEMM_NR;
            float *c = p->C + (ic + ir) * p->ldc + jc;
            const float *cn = full < n_jr ? c + full * MXP_GEMM_NR
                              : o + 1 < n_ir ? c + MXP_GEMM_MR * p->ldc : NULL;
            if (p->dp)
                mxp_avx512_ukernel_bf16_row(kp, ab, p->a.ld, a_bf != NULL,
                                            (const uint32_t *)s->bp, full, c, p->ldc, p->alpha,
                                            p->beta, mode, cn);
            else
                mxp_avx512_ukernel_f32_row(
                    kc, a_in ? a_in + ir * a_step : s->ap + ir * kc,
                    a_in ? p->a.ld : MXP_GEMM_MR, a_in && p->a_kc, b_in ? b_in : s->bp,
                    b_in ? p->b.ld : MXP_GEMM_NR, b_in ? MXP_GEMM_NR : MXP_GEMM_NR * kc,
                    b_in != NULL, full, c, p->ldc,
                    p->alpha, p->beta, mode, cn);
            q0 = full;
        }
        for (size_t q = q0; q < n_jr; q++) {
            size_t jr = q * MXP_GEMM_NR;
            int nr = (int)min_sz(MXP_GEMM_NR, nc - jr), mr = (int)min_sz(MXP_GEMM_MR, mc - ir);
            float *c = p->C + (ic + ir) * p->ldc + jc + jr;
            const float *cn = q + 1 < n_jr ? c + MXP_GEMM_NR
                              : o + 1 < n_ir ? p->C + (ic + ir + MXP_GEMM_MR) * p->ldc + jc
                                             : NULL;
            if (cols && q == n_jr - 1)
                continue; /* computed above */
            if (!p->dp)
                mxp_avx512_ukernel_f32(
                    kc, a_in ? a_in + ir * a_step : s->ap + ir * kc,
                    a_in ? p->a.ld : MXP_GEMM_MR, a_in && p->a_kc,
                    b_in ? b_in + jr : s->bp + jr * kc, b_in ? p->b.ld : MXP_GEMM_NR,
                    b_in != NULL, c, p->ldc, mr, nr, p->alpha, p->beta, mode, false, cn);
            else if (flagged && (sub_b[q] || (!a_bf && sub_a[o])))
                mxp_avx512_tile_fallback(&fb, ic + ir, mr, jc + jr, nr,
                                         a_bf ? NULL : (const uint32_t *)ab,
                                         (const uint32_t *)s->bp + jr * kp,
                                         sub_b[q] ? 0 : sub_a[o], c, mode);
            else
                mxp_avx512_ukernel_bf16(kp, ab, p->a.ld, a_bf != NULL,
                                        (const uint32_t *)s->bp + jr * kp, c, p->ldc, mr, nr,
                                        p->alpha, p->beta, mode, false, cn);
        }
        if (epi) /* the row of tiles, still in L1/L2 */
            epi_block(p, s, ic + ir, ic + ir + min_sz(MXP_GEMM_MR, mc - ir), jc, jc + nc);
    }
}

/* Where an operand can be read in place instead of packed: an FP32
 * operand on the F32 path whose rows r are contiguous for each k (op(A)
 * = A^T, op(B) = B: X(r, k) at k*ld + r), which is the packed panel's
 * layout with stride ld instead of the panel width. Returns the address of
 * X(r0, k0), or NULL when the operand must be packed. Reading in place
 * gives the same values as packing (FP32 packs by copying), so the same
 * bits. */
static const float *in_place(const mxp_gemm_src *x, bool dp, size_t r0, size_t k0,
                             size_t max_ld) {
    if (dp || x->type != MXP_DTYPE_F32 || x->k_contig || x->ld > max_ld)
        return NULL;
    return (const float *)x->base + k0 * x->ld + r0;
}

/* The most ld at which gemm_range reads an FP32 op(B) in place (tune.c:
 * in_place_b_max_ld for at most in_place_b_max_m rows of C, else
 * in_place_max_ld). */
static size_t b_max_ld(const gemm_plan *p) {
    const mxp_avx512_tune *t = mxp_avx512_tune_get();
    return p->M <= t->in_place_b_max_m ? t->in_place_b_max_ld : t->in_place_max_ld;
}

/* Whether a k-contiguous op(A) with rows ld elements of es bytes apart is
 * read in place (A_KC_MAX_LD, A_KC_SET_ROWS): the L1 sets of a tile's MR
 * rows, counted from a line-aligned first row. */
static bool a_kc_ok(size_t ld, size_t es) {
    if (ld > A_KC_MAX_LD) return false;
    unsigned char rows[L1_SETS] = {0};
    for (size_t r = 0; r < MXP_GEMM_MR; r++) {
        size_t set = r * ld * es / L1_LINE % L1_SETS;
        if (++rows[set] > A_KC_SET_ROWS) return false;
    }
    return true;
}

/* op(A) as the microkernel reads it for the block at (r0, k0): in place
 * along the tile's rows (in_place), in place along k (a_kc: op(A) = A
 * FP32, X(r, k) at r*ld + k; the microkernel broadcasts from the MR rows'
 * own addresses, docs/results/kernels-passes.md "FP32 op(A) read along k"), or NULL: packed. */
static const float *in_place_a(const gemm_plan *p, size_t r0, size_t k0) {
    if (p->dp) return NULL;
    if (p->a_kc) return (const float *)p->a.base + r0 * p->a.ld + k0;
    return in_place(&p->a, p->dp, r0, k0, mxp_avx512_tune_get()->in_place_max_ld);
}

/* On the DPBF16 path, a BF16 op(A) = A (a_kc) as the microkernel reads it
 * for the block X[r0 .. r0+rows)[k0 .. k0+kc): in place along k, the
 * address of X(r0, k0), when kc is even (a pair never reaches past a row)
 * and no element is a BF16 subnormal (a scan, reading only the block;
 * with one, the block is packed so that the packer flags its rows for
 * gemm_fallback.c); else NULL: packed. The same words as the packed
 * panel (pairs of k from k0), so the same bits. */
static const uint16_t *in_place_a_bf16(const gemm_plan *p, size_t r0, size_t rows, size_t k0,
                                       size_t kc) {
    if (!p->dp || !p->a_kc || kc % 2 != 0 ||
        mxp_avx512_bf16_kcontig_subnormal(&p->a, r0, rows, k0, kc))
        return NULL;
    return (const uint16_t *)p->a.base + r0 * p->a.ld + k0;
}

/* Whether the packer's groups of PACK_KGROUP = 16 k rows of a k-major
 * operand (X(r, k) at k*ld + r, elements of es bytes) put more rows in one
 * set of the 8-way L1 than it has ways (rows 4 KiB apart: all 16). */
static bool kmajor_aliased(size_t ld, size_t es) {
    unsigned char rows[L1_SETS] = {0};
    for (size_t k = 0; k < 16; k++)
        if (++rows[k * ld * es / L1_LINE % L1_SETS] > 8) return true;
    return false;
}

/* A length rounded up to whole 64-byte lines of floats. */
static size_t lines16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Whether op(A) is FP16 and is widened block by block in its own layout
 * (a_widen) rather than packed into MR panels: along k (op(A) = A: the
 * dX pass NN, the forward NT) when the a_kc kernel may read it there, or
 * along the rows of C (op(A) = A^T: the dW pass TN) when the packer's k
 * rows alias in L1 and N is small (A_W16_KMAJOR_MAX_N). */
static bool a_w16_ok(const gemm_plan *p) {
    if (p->dp || p->a.type != MXP_DTYPE_F16) return false;
    if (p->a.k_contig) return a_kc_ok(lines16(p->kb), sizeof(float));
    return kmajor_aliased(p->a.ld, sizeof(uint16_t)) && p->N <= A_W16_KMAJOR_MAX_N;
}

/* Whether gemm_range widens an FP16 op(A) (a_w16) for a packed op(B)
 * block of nc x kc: always along the rows of C; along k only while that
 * block fits Zen 4's L2. With a 2 MiB block (512x2048x2048 NN and NT, B
 * streamed from L3 past the tiles) reading the widened rows along k read
 * 0.990-0.998 of the base in six runs, packing 1.00 (docs/results/kernels-passes.md,
 * f16wide); gemm_range_l2's chunks always fit. */
static bool a_w16_block(const gemm_plan *p, size_t nc, size_t kc) {
    return !p->a.k_contig || nc * kc * sizeof(float) <= A_W16_MAX_B_BYTES;
}

/* An FP16 op(A) (a_w16): its block X[ic .. ic+mc)[pc .. pc+kc) is
 * widened line by line into s->ap in X's own layout (a stream: load,
 * vcvtph2ps, store; the MR-panel packers transpose or regroup), rows
 * lines16(kb) floats apart when X is k-contiguous (then read along k, as
 * an FP32 op(A) is in place with a_kc), else k rows lines16(mc) apart
 * (read along the rows of C, as an FP32 op(A) = A^T in place). Returns
 * the plan gemm_block gets, *q: p with op(A) that FP32 block; *a_in: its
 * origin. The same values (exact widening), FMAs and store: the same
 * bits. */
static const gemm_plan *a_widen(const gemm_plan *p, const gemm_scratch *s, size_t ic, size_t mc,
                                size_t pc, size_t kc, gemm_plan *q, const float **a_in) {
    const size_t ld = lines16(p->a.k_contig ? p->kb : mc);
    mxp_avx512_widen_f32(&p->a, ic, mc, pc, kc, s->ap, ld);
    *q = *p;
    q->a = (mxp_gemm_src){MXP_DTYPE_F32, s->ap, ld, p->a.k_contig};
    q->a_kc = p->a.k_contig;
    q->a_w16 = false;
    *a_in = s->ap;
    return q;
}

/* C[m0 .. m1)[n0 .. n1) by the loop nest in the file comment. */
static void gemm_range(const gemm_plan *p, size_t m0, size_t m1, size_t n0, size_t n1,
                       const gemm_scratch *s) {
    uint32_t sub_a[MXP_GEMM_MC / MXP_GEMM_MR], sub_b[MXP_GEMM_NC / MXP_GEMM_NR];
    const bool unit = unit_ok(p);
    for (size_t jc = n0; jc < n1; jc += p->nc) {
        size_t nc = min_sz(p->nc, n1 - jc);
        for (size_t pc = 0; pc < p->K; pc += p->kb) {
            size_t kc = min_sz(p->kb, p->K - pc);
            mxp_gemm_store mode = store_mode(p, pc, unit);
            const float *b_in = in_place(&p->b, p->dp, jc, pc, b_max_ld(p));
            bool any_b = false;
            if (p->dp)
                any_b = mxp_avx512_pack_bf16(&p->b, jc, nc, pc, kc, MXP_GEMM_NR,
                                             (uint32_t *)s->bp, sub_b);
            else if (!b_in)
                mxp_avx512_pack_f32(&p->b, jc, nc, pc, kc, MXP_GEMM_NR, s->bp);
            for (size_t ic = m0; ic < m1; ic += MXP_GEMM_MC) {
                size_t mc = min_sz(MXP_GEMM_MC, m1 - ic);
                const float *a_in = in_place_a(p, ic, pc);
                const uint16_t *a_bf = in_place_a_bf16(p, ic, mc, pc, kc);
                const gemm_plan *pa = p;
                gemm_plan pw;
                bool any = any_b;
                if (p->dp && !a_bf)
                    any |= mxp_avx512_pack_bf16(&p->a, ic, mc, pc, kc, MXP_GEMM_MR,
                                                (uint32_t *)s->ap, sub_a);
                else if (p->a_w16 && a_w16_block(p, nc, kc))
                    pa = a_widen(p, s, ic, mc, pc, kc, &pw, &a_in);
                else if (!p->dp && !a_in)
                    mxp_avx512_pack_f32(&p->a, ic, mc, pc, kc, MXP_GEMM_MR, s->ap);
                gemm_block(pa, s, ic, mc, jc, nc, pc, kc, mode, any, sub_a, sub_b, a_in, b_in,
                           a_bf);
            }
        }
    }
}

/* Words (FP32 values or BF16 pairs) of a K block of length kc. */
static size_t k_words(const gemm_plan *p, size_t kc) { return p->dp ? (kc + 1) / 2 : kc; }

/* C[m0 .. m1)[n0 .. n1) when its rows fit one packed A block (m1 - m0 <=
 * MC) but an NC-wide packed B block would not fit in L2 (a batch-32..256
 * layer with a wide weight): K blocks outer; per K block op(A) is packed
 * once, and op(B) in chunks of nc_max columns whose packed form (at most
 * L2_CHUNK_BYTES bytes) stays in L2 while the tiles read it, instead
 * of a 2 MiB block that is written to L3 and read back. Each tile gets
 * the same K blocks in the same order and the same microkernel calls as
 * in gemm_range, so the results are the same bits. */
static void gemm_range_l2(const gemm_plan *p, size_t m0, size_t m1, size_t n0, size_t n1,
                          const gemm_scratch *s, size_t nc_max) {
    uint32_t sub_a[MXP_GEMM_MC / MXP_GEMM_MR], sub_b[MXP_GEMM_NC / MXP_GEMM_NR];
    const bool unit = unit_ok(p);
    const size_t mc = m1 - m0;
    for (size_t pc = 0; pc < p->K; pc += p->kb) {
        size_t kc = min_sz(p->kb, p->K - pc);
        mxp_gemm_store mode = store_mode(p, pc, unit);
        const gemm_plan *pa = p;
        gemm_plan pw;
        const float *a_in = NULL;
        bool any_a = false;
        const uint16_t *a_bf = in_place_a_bf16(p, m0, mc, pc, kc);
        if (p->dp && !a_bf)
            any_a = mxp_avx512_pack_bf16(&p->a, m0, mc, pc, kc, MXP_GEMM_MR, (uint32_t *)s->ap,
                                         sub_a);
        else if (p->a_w16)
            pa = a_widen(p, s, m0, mc, pc, kc, &pw, &a_in);
        else if (!p->dp)
            mxp_avx512_pack_f32(&p->a, m0, mc, pc, kc, MXP_GEMM_MR, s->ap);
        for (size_t jc = n0; jc < n1; jc += nc_max) {
            size_t nc = min_sz(nc_max, n1 - jc);
            bool any = any_a;
            if (p->dp)
                any |= mxp_avx512_pack_bf16(&p->b, jc, nc, pc, kc, MXP_GEMM_NR,
                                            (uint32_t *)s->bp, sub_b);
            else
                mxp_avx512_pack_f32(&p->b, jc, nc, pc, kc, MXP_GEMM_NR, s->bp);
            gemm_block(pa, s, m0, mc, jc, nc, pc, kc, mode, any, sub_a, sub_b, a_in, NULL,
                       a_bf);
        }
    }
}

/* The range [m0, m1) x [n0, n1) by gemm_range_l2 when it applies, else by
 * gemm_range. It applies to BF16-pair panels and to a widened (non-FP32)
 * op(B): bench_gemm_cpu, one thread, 32/128/256 x 2048 x 2048 NN: bf16
 * +15-20% / +5-8% / +4%, f16 +10-20% / +5% / +1-2%; with FP32 operands it
 * gained nothing (and 2-4% less at 256 x 2048 x 2048), so they keep
 * gemm_range. */
static void gemm_range_any(const gemm_plan *p, size_t m0, size_t m1, size_t n0, size_t n1,
                           const gemm_scratch *s) {
    size_t kw = k_words(p, p->kb) * sizeof(float);
    size_t nc_max = L2_CHUNK_BYTES / kw / MXP_GEMM_NR * MXP_GEMM_NR;
    if ((p->dp || p->b.type != MXP_DTYPE_F32) && m1 - m0 <= MXP_GEMM_MC &&
        nc_max >= MXP_GEMM_NR && min_sz(p->nc, n1 - n0) * kw > L2_CHUNK_BYTES)
        gemm_range_l2(p, m0, m1, n0, n1, s, nc_max);
    else
        gemm_range(p, m0, m1, n0, n1, s);
}

/* C[0 .. M)[n0 .. n1) on the small-M path (M <= NR, F32 path): per K
 * block, op(A) is packed as one NR-wide panel over the rows of C, and
 * op(B) is read in place, MR columns of C at a time (an FP16/BF16 op(B)
 * widened by the microkernel a few k steps ahead of its FMAs). Same K
 * blocks, same per-element FMA order and store arithmetic as gemm_range. */
static void gemm_range_small(const gemm_plan *p, size_t n0, size_t n1, const gemm_scratch *s) {
    /* op(B)(k, j) = X_b[j][k]: at j*ld + k (k_contig) or k*ld + j */
    const size_t sj = p->b.k_contig ? p->b.ld : 1, sk = p->b.k_contig ? 1 : p->b.ld;
    const size_t es = p->b.type == MXP_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const bool unit = unit_ok(p);
    for (size_t pc = 0; pc < p->K; pc += p->kb) {
        size_t kc = min_sz(p->kb, p->K - pc);
        mxp_gemm_store mode = store_mode(p, pc, unit);
        mxp_avx512_pack_f32(&p->a, 0, p->M, pc, kc, MXP_GEMM_NR, s->ap);
        for (size_t j = n0; j < n1; j += MXP_GEMM_MR) {
            int nr = (int)min_sz(MXP_GEMM_MR, n1 - j);
            const void *b = (const char *)p->b.base + (j * sj + pc * sk) * es;
            if (p->b.type == MXP_DTYPE_F32)
                mxp_avx512_ukernel_f32_bt(kc, s->ap, b, sj, sk, p->C + j, p->ldc, (int)p->M, nr,
                                          p->alpha, p->beta, mode);
            else
                mxp_avx512_ukernel_w16_bt(kc, s->ap, p->b.type, b, sk, p->C + j, p->ldc,
                                          (int)p->M, nr, p->alpha, p->beta, mode, s->bp);
        }
        /* gemm_epi: the range's M rows (at most EPI_SMALL_COLS columns,
         * epi_inside), right after its last K block */
        if (p->epi && pc + kc == p->K) epi_block(p, s, 0, p->M, n0, n1);
    }
}

/* Range [*lo, *hi) of part `index` of `count` along the cut dimension
 * (the other is covered whole), in units of:
 *   - 1 row when M is cut: rows as equal as possible (M = 128 on 2
 *     threads: 64 + 64, where whole micro-tiles gave 70 + 58); each range
 *     runs its own micro-tiles from its first row, so it may end in a
 *     partial one (mr < MR). Nothing depends on where a tile starts (F32:
 *     one FMA chain per element; DPBF16: per-lane vdpbf16ps, and the
 *     subnormal fallback decided per row, gemm_fallback.c);
 *   - C_LINE_FLOATS columns on the small-M path (its tiles are MR = 14
 *     columns of C, so whole tiles split 256 columns 140 + 116);
 *   - NR columns when N is cut: B micro-panels then start at multiples of
 *     NR whatever the cut, which the subnormal flags of B micro-panels
 *     rely on, and no line of C is written by two threads. */
static void part_range(const gemm_plan *p, int index, int count, size_t *lo, size_t *hi) {
    size_t ext = p->split_n ? p->N : p->M;
    size_t unit = p->small ? C_LINE_FLOATS : p->split_n ? MXP_GEMM_NR : 1;
    size_t units = (ext + unit - 1) / unit;
    *lo = min_sz(units * (size_t)index / (size_t)count * unit, ext);
    *hi = min_sz(units * (size_t)(index + 1) / (size_t)count * unit, ext);
}

/* Part `index` of `count` (part_range). */
static void gemm_part(void *ctx, int index, int count) {
    const gemm_plan *p = ctx;
    size_t lo, hi;
    part_range(p, index, count, &lo, &hi);
    if (lo >= hi) return;
    if (p->small)
        gemm_range_small(p, lo, hi, &scratch[index]);
    else if (p->split_n)
        gemm_range_any(p, 0, p->M, lo, hi, &scratch[index]);
    else
        gemm_range_any(p, lo, hi, 0, p->N, &scratch[index]);
}

/* Length of the K blocks for a depth-K product with blocks of at most kmax
 * (even): K is cut into ceil(K/kmax) blocks of equal length, rounded up to
 * an even number (k pairs never straddle a block; the last block is the
 * shorter one), so K = 512 with kmax = 384 gives 2 x 256, not 384 + 128: a
 * short block pays a full pass over C for little work. It depends on K and
 * the path only, never on the thread split. */
static size_t k_block_len(size_t K, size_t kmax) {
    size_t nb = (K + kmax - 1) / kmax;
    size_t kb = (K + nb - 1) / nb;
    return kb + (kb & 1);
}

/* Whether the small-M path takes op(B): FP32, or FP16/BF16 contiguous
 * along the columns of C (op(B) = B: widened row by row in the
 * microkernel, mxp_avx512_ukernel_w16_bt). */
static bool small_b(const mxp_gemm_src *b) {
    return b->type == MXP_DTYPE_F32 ||
           ((b->type == MXP_DTYPE_F16 || b->type == MXP_DTYPE_BF16) && !b->k_contig);
}

/* Whether the packed path should run a small-M product (M <= 32) instead:
 * when it reads both FP32 operands in place (op(A) = A along k, a_kc;
 * op(B) = B, in_place, which is NULL on the DPBF16 path: the dX pass, NN) and a K
 * block of op(B) fits Zen 4's L2, it packs nothing, while the
 * small-M path packs (transposes) op(A) per K block (about 3% of
 * 32x256x256 NN) and computes C^T in 16-row vectors, idle lanes included
 * when M is not a multiple of 16. One thread, CPU time, packed / small
 * (throwaway loop over mxp_avx512_gemm_ex, median of 11, docs/results/kernels-passes.md
 * "Batch-32 dX on the packed path"): 32 x N x K NN 128x128 1.12,
 * 256x256 1.06-1.10, 512x256 1.06, 256x512 1.07, 384x384 1.03, 512x512
 * 1.01-1.02 (bench_gemm_cpu: 0.98-1.01), 1024x256 1.03, 256x1024 1.01
 * (op(B) blocks <= 1 MiB); 640x512 0.98, 768x512 0.99, 1024x512 0.96,
 * 1024x1024 0.94 (larger);
 * 8x256x256 2.5, 16x256x256 1.22, 24x256x256 1.45. */
static bool small_packed_better(const gemm_plan *p) {
    return p->a_kc && in_place(&p->b, p->dp, 0, 0, b_max_ld(p)) &&
           p->kb * p->N * sizeof(float) <= SMALL_PACKED_B_BYTES;
}

static bool dp_type(mxp_dtype t) {
    return t == MXP_DTYPE_BF16 || t == MXP_DTYPE_F8_E4M3 || t == MXP_DTYPE_F8_E5M2;
}

static void make_sources(const mxp_gemm_args *g, mxp_gemm_src *a, mxp_gemm_src *b) {
    *a = (mxp_gemm_src){g->a_type, g->A, (size_t)g->lda, !g->trans_a};
    *b = (mxp_gemm_src){g->b_type, g->B, (size_t)g->ldb, g->trans_b};
}

mxp_gemm_path mxp_avx512_gemm_path_for(const mxp_gemm_args *g, mxp_gemm_path path) {
    if (path == MXP_GEMM_PATH_F32 || !dp_type(g->a_type) || !dp_type(g->b_type) ||
        (path == MXP_GEMM_PATH_AUTO && !mxp_avx512_tune_get()->dpbf16_fast))
        return MXP_GEMM_PATH_F32;
    return MXP_GEMM_PATH_DPBF16;
}

/* Whether threads should cut M (rows of C) rather than N, when M has
 * enough tiles. Cutting N makes every thread pack all of op(A), cutting M
 * all of op(B) (each unless read in place), so by packing alone the cut
 * that duplicates less packing wins. But threads that own column ranges
 * write interleaved pieces of every row of C (1-2 KiB each at N = 512),
 * and on the 2-CPU development VM that slowed BOTH threads whenever C
 * traffic mattered: 2 threads, wall clock, 512x512x32 TN bf16 took 80-290
 * us cut along N against 48-50 us cut along M (one thread alone on its
 * half: 46 us); with thread 1 writing its columns into a separate buffer,
 * the N cut also ran in 48-50 us, so it is the sharing of C's rows, not
 * the packing (docs/results/kernels-passes.md, issue 16). Hence M is cut
 *   - when M > N (the N cut would duplicate the larger pack, or write
 *     short pieces of C's rows);
 *   - when K <= SPLIT_M_MAX_K (a pass over C every few k: weight gradients
 *     at batch 32-128, layers with 65-72 inputs), unless N > 4 M, where
 *     the duplicated op(B) packing costs more (128x2048x128: N cut +13%
 *     f32, +9% bf16);
 *   - on the DPBF16 path with N <= 2 M: a row range of at most MC rows
 *     then packs op(B) in L2-sized chunks (gemm_range_l2), and cutting M
 *     measured +15-36% at 256x256x256, 256x512x512, 512x512x512.
 * Not cut along M, though it would pack less: an FP32 op(B) read in place
 * with op(A) packed (dX, NN: the N cut packs all of dY per thread). Each
 * part alone measured 2.5-3.9% faster cut along M (bench_gemm_split:
 * 128x256x256, 128x512x512, 256x256x256 NN f32), but in the training step
 * both threads then read the whole weight, which the optimizer writes
 * next: AdamW's phase of the 72-512x3-65 batch-256 fp32 step went from
 * 0.16-0.20 to 0.26-0.30 ms on 2 threads (the same 0.31 ms on one), the
 * step 2-4% slower (bench_train_step, 3 interleaved triples; docs/results/kernels-passes.md
 * "Balanced cuts between threads").
 * Else N (M <= N: the N cut duplicates the smaller pack, op(A), or none;
 * 128x2048x2048 NT bf16 +20%, 65x2048x512 TN bf16 +22%). */
static bool prefer_m(const gemm_plan *p) {
    if (p->M > p->N) return true;
    if (p->K <= SPLIT_M_MAX_K && p->N <= 4 * p->M) return true;
    return p->dp && p->N <= 2 * p->M;
}

/* C = beta * C (beta == 0 writes zeros without reading C): K == 0. */
static void scale_c(const mxp_gemm_args *g) {
    for (int64_t i = 0; i < g->M; i++) {
        float *c = g->C + (size_t)i * (size_t)g->ldc;
        for (int64_t j = 0; j < g->N; j++) c[j] = g->beta == 0.0f ? 0.0f : g->beta * c[j];
    }
}

/* The plan of g (M, N, K > 0) under o: path, K blocks, small-M path,
 * thread count and cut. */
static void plan_make(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o, gemm_plan *p) {
    *p = (gemm_plan){
        .M = (size_t)g->M, .N = (size_t)g->N, .K = (size_t)g->K, .ldc = (size_t)g->ldc,
        .C = g->C, .alpha = g->alpha, .beta = g->beta,
    };
    make_sources(g, &p->a, &p->b);
    p->dp = mxp_avx512_gemm_path_for(g, o->path) == MXP_GEMM_PATH_DPBF16;
    p->nc = mxp_avx512_tune_get()->nc;
    p->kb = k_block_len(p->K, p->dp ? MXP_GEMM_KC_BF16 : MXP_GEMM_KC);
    p->a_kc = !o->packed_only && p->a.k_contig &&
              p->a.type == (p->dp ? MXP_DTYPE_BF16 : MXP_DTYPE_F32) &&
              a_kc_ok(p->a.ld, mxp_dtype_info(p->a.type)->size);
    p->a_w16 = !o->packed_only && a_w16_ok(p);

    int threads = mxp_threads_max();
    if (o->threads > 0 && o->threads < threads) threads = o->threads;
    if (threads > SCRATCH_SLOTS) threads = SCRATCH_SLOTS;
    double flops = 2.0 * (double)p->M * (double)p->N * (double)p->K;
    if (flops < THREAD_MIN_FLOPS) threads = 1;
    p->small = !p->dp && !o->packed_only && small_b(&p->b) && p->M <= MXP_GEMM_SMALL_M &&
               !small_packed_better(p);
    size_t tiles_m = (p->M + MXP_GEMM_MR - 1) / MXP_GEMM_MR;
    size_t tiles_n = (p->N + MXP_GEMM_NR - 1) / MXP_GEMM_NR;
    bool n_ok = tiles_n >= (size_t)threads, m_ok = tiles_m >= (size_t)threads;
    p->split_n = prefer_m(p) ? !m_ok && (n_ok || tiles_n > tiles_m)
                             : n_ok || (!m_ok && tiles_n >= tiles_m);
    if (p->small) p->split_n = true; /* ranges of C_LINE_FLOATS columns of C */
    if (p->small) tiles_n = (p->N + C_LINE_FLOATS - 1) / C_LINE_FLOATS;
    size_t tiles = p->split_n ? tiles_n : tiles_m;
    p->parts = (size_t)threads < tiles ? threads : (int)tiles;
}

int mxp_avx512_gemm_split(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o, bool *split_n,
                          size_t lo[], size_t hi[]) {
    *split_n = false;
    if (g->M <= 0 || g->N <= 0 || g->K <= 0) return 0;
    gemm_plan p;
    plan_make(g, o, &p);
    *split_n = p.split_n;
    for (int q = 0; q < p.parts; q++) part_range(&p, q, p.parts, &lo[q], &hi[q]);
    return p.parts;
}

/* Whether gemm_epi's epilogue e can run inside the GEMM g: e covers
 * exactly C (kernels.h). */
static bool epi_fits(const mxp_gemm_args *g, const mxp_epilogue *e) {
    return e->y == g->C && g->ldc == g->N && e->B == g->M && e->C == g->N;
}

/* Whether gemm_epi runs e inside the GEMM p. Only where every block it
 * would see is made of whole rows of C: one part or row-range parts, and
 * no column blocking (N <= NC; on the small-M path one part of at most
 * EPI_SMALL_COLS columns). Over column pieces the epilogue runs row
 * segment by row segment, and with the FP32 GELU's per-call setup that
 * measured slower: 72-512x3-65 batch 256 fp32, 2 threads (fwd 256x512x512
 * NT f32 cut along N), forward 1.70-1.78 ms against 1.67-1.72 with the
 * separate pass, step 2.5% slower (bench_train_step, 4 interleaved
 * pairs); restricted to whole rows, within 1%. And only on as many threads
 * as bias_act_store would use: a GEMM below THREAD_MIN_FLOPS runs on one
 * thread (the 4 -> 512 layer of the scenarios' model, whose GELU over
 * 256 x 512 inside it made the forward 1.65 ms against 1.53). Elsewhere
 * gemm_epi makes the contract's two calls (docs/results/kernels-passes.md "The forward
 * epilogue inside the GEMM"). */
static bool epi_inside(const mxp_gemm_args *g, const gemm_plan *p, const mxp_epilogue *e) {
    if (!epi_fits(g, e) || p->parts < mxp_avx512_epilogue_threads(e)) return false;
    if (p->small) return p->parts == 1 && p->N <= EPI_SMALL_COLS;
    return (!p->split_n || p->parts == 1) && p->N <= p->nc;
}

/* The GEMM of plan p; with epi (epi_inside), its epilogue on each block
 * of C after the block's last K block. */
static void gemm_planned(const mxp_gemm_args *g, gemm_plan *p, mxp_epilogue *epi) {
    mxp_avx512_gemm_tables_init();
    mxp_epilogue_part epi_parts[SCRATCH_SLOTS] = {{0}};
    p->epi = epi;
    p->epi_parts = epi_parts;
    pthread_mutex_lock(&gemm_lock);
    if (!scratch_ensure(p->parts)) {
        pthread_mutex_unlock(&gemm_lock);
        mxp_log(MXP_LOG_WARN, "kernels: no memory for AVX-512 GEMM buffers; "
                              "using the generic GEMM for this call");
        mxp_generic_gemm(g);
        if (epi) mxp_avx512_bias_act_store(epi);
        return;
    }
    mxp_threads_run(p->parts, gemm_part, p);
    pthread_mutex_unlock(&gemm_lock);
    if (epi) mxp_epilogue_finish(epi, epi_parts, p->parts);
}

/* mxp_avx512_gemm_ex, with gemm_epi's epilogue when epi != NULL: inside
 * the GEMM where epi_inside allows, else the contract's two calls. */
static void gemm_run(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o, mxp_epilogue *epi) {
    if (g->M <= 0 || g->N <= 0) {
        /* nothing to compute */
    } else if (g->K <= 0) {
        scale_c(g);
    } else {
        gemm_plan p;
        plan_make(g, o, &p);
        const bool inside = epi && epi_inside(g, &p, epi);
        gemm_planned(g, &p, inside ? epi : NULL);
        if (inside) return;
    }
    if (epi) mxp_avx512_bias_act_store(epi);
}

void mxp_avx512_gemm_ex(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o) {
    gemm_run(g, o, NULL);
}

void mxp_avx512_gemm_epi_ex(const mxp_gemm_args *g, mxp_epilogue *e,
                            const mxp_avx512_gemm_opts *o) {
    gemm_run(g, o, e);
}

static const mxp_avx512_gemm_opts defaults = {MXP_GEMM_PATH_AUTO, 0, false};

static void avx512_gemm(const mxp_gemm_args *g) { gemm_run(g, &defaults, NULL); }

static void avx512_gemm_epi(const mxp_gemm_args *g, mxp_epilogue *e) {
    gemm_run(g, &defaults, e);
}

/* mxp_avx512_gemm_many: product i's part q is item sum_{j<i} parts_j + q. */
typedef struct gemm_many_ctx {
    gemm_plan plans[MXP_AVX512_GEMM_MANY];
    int first[MXP_AVX512_GEMM_MANY + 1]; /* first item of each product */
    int count;
} gemm_many_ctx;

static void gemm_many_part(void *ctx, int index, int threads) {
    const gemm_many_ctx *c = ctx;
    int i = 0;
    for (int it = index; it < c->first[c->count]; it += threads) {
        while (c->first[i + 1] <= it) i++;
        const gemm_plan *p = &c->plans[i];
        const int q = it - c->first[i];
        size_t lo, hi;
        part_range(p, q, p->parts, &lo, &hi);
        if (lo >= hi) continue;
        if (p->small)
            gemm_range_small(p, lo, hi, &scratch[index]);
        else if (p->split_n)
            gemm_range_any(p, 0, p->M, lo, hi, &scratch[index]);
        else
            gemm_range_any(p, lo, hi, 0, p->N, &scratch[index]);
    }
}

void mxp_avx512_gemm_many(const mxp_gemm_args *gs, int count) {
    static gemm_many_ctx c; /* under gemm_lock */
    bool empty = false;
    for (int i = 0; i < count; i++) empty = empty || gs[i].M <= 0 || gs[i].N <= 0 || gs[i].K <= 0;
    if (count > MXP_AVX512_GEMM_MANY || empty) { /* one by one */
        for (int i = 0; i < count; i++) gemm_run(&gs[i], &defaults, NULL);
        return;
    }
    mxp_avx512_gemm_tables_init();
    pthread_mutex_lock(&gemm_lock);
    c.count = count;
    c.first[0] = 0;
    for (int i = 0; i < count; i++) {
        plan_make(&gs[i], &defaults, &c.plans[i]);
        c.plans[i].epi = NULL;
        c.plans[i].epi_parts = NULL;
        c.first[i + 1] = c.first[i] + c.plans[i].parts;
    }
    /* products each too small to be cut (one part: below THREAD_MIN_FLOPS)
     * run on the caller, as gemm runs them alone: spreading them over the
     * pool measured slower on 2 CPUs (5 x 32x200x200: 0.85 against 0.72 ms
     * per ensemble step, docs/results/issue29/ens_batched_step.txt) */
    int threads = c.first[count] > count ? mxp_threads_max() : 1;
    if (threads > SCRATCH_SLOTS) threads = SCRATCH_SLOTS;
    if (threads > c.first[count]) threads = c.first[count];
    if (!scratch_ensure(threads)) {
        pthread_mutex_unlock(&gemm_lock);
        mxp_log(MXP_LOG_WARN, "kernels: no memory for AVX-512 GEMM buffers; "
                              "using the generic GEMM for this call");
        for (int i = 0; i < count; i++) mxp_generic_gemm(&gs[i]);
        return;
    }
    mxp_threads_run(threads, gemm_many_part, &c);
    pthread_mutex_unlock(&gemm_lock);
}

void mxp_avx512_fill_gemm(mxp_kernels *t) {
    mxp_avx512_gemm_tables_init();
    t->gemm = avx512_gemm;
    t->gemm_epi = avx512_gemm_epi;
    t->gemm_strided = mxp_avx512_gemm_strided;
}
