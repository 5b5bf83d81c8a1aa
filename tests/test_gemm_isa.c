/* tests/test_gemm_isa.c: the AVX-512 GEMM against the generic reference.
 *
 * Oracle: mxp_kernels_generic()->gemm, which widens inputs exactly and sums
 * in FP32 in k order. The AVX-512 GEMM sums the same FP32 products in a
 * different order (FMA per product, K cut into KC blocks, on the BF16 path
 * vdpbf16ps adds two products per step), so the two may differ by the
 * rounding of FP32 accumulation. For C = alpha*sum_k a_k b_k + beta*c, each
 * result is within gamma_n * S of the exact value, with
 *   S = |alpha| sum_k |a_k||b_k| + |beta||c|,  gamma_n ~ n*u, u = 2^-24,
 * n = K + 2 roundings (products, sums, alpha and beta terms): Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., Sec. 3.1. The
 * two results therefore agree within
 *   atol + rtol*S,  rtol = 2 (K + 2) 2^-24,  atol = 1e-30.
 * atol covers the BF16 path's flush of FP32 subnormal partial sums
 * (vdpbf16ps is defined with FTZ; at most K * 2^-126 in total). One missing
 * or wrong product moves a result by about S/K, far above rtol*S.
 *
 * Covered: every (A, B) dtype pair, all four transposes, sizes 1 .. 129
 * mixed in M, N, K (the AVX-512 edges: 1, 3, 7, 15, 17, 31, 33, 63, 65,
 * 127, 129), padded leading dimensions whose padding holds NaN, C columns
 * between N and ldc left untouched, alpha/beta including beta = 0 over a
 * NaN-filled C, Inf/NaN inputs, blocks larger than KC, MC and NC, both
 * compute paths (FP32 widening and vdpbf16ps), BF16 subnormals (which must
 * leave the vdpbf16ps path), bit-exact widening of every input value, and
 * bit-identical results for 1 and 2 threads, and the small-M path (M <= 32,
 * FP32 B read in place, FP16/BF16 B widened in the microkernel) on edge
 * sizes, bit-identical to the packed path;
 * the F32 path bit for bit against a scalar oracle of its documented FMA
 * sequence (K blocks, fma per product in k order, the store's roundings),
 * and alpha = beta = 1 under flush-to-zero (multiplications by 1 kept);
 * the cut between threads (rows as equal as possible, whole NR tiles when
 * N is cut) and BF16 subnormal rows at the cut points, 1, 2 and 3 threads
 * bit for bit, each row equal to the row computed alone; an FP32 op(A) = A
 * read in place along k, bit for bit against the packed path (the packers
 * alone: test_gemm_pack_f32.c, test_gemm_pack_bf16.c).
 * Buffers are malloc'ed to their
 * exact extent so ASan sees any read past the end.
 */
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include "kernels/threads.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static mxp_rng rng;
static const mxp_kernels *G;

#define ATOL 1e-30

/* A typed row-major matrix of `rows` lines of `cols` elements, line stride
 * ld; padding elements hold NaN (where the type has one). */
typedef struct tmat {
    mxp_dtype t;
    size_t rows, cols, ld;
    void *p;
} tmat;

static tmat tmat_make(mxp_dtype t, size_t rows, size_t cols, size_t ld) {
    tmat m = {t, rows, cols, ld, NULL};
    size_t n = rows ? (rows - 1) * ld + cols : 0;
    m.p = test_xmalloc(n * mxp_dtype_info(t)->size);
    for (size_t i = 0; i < n; i++) mxp_store_f32(t, m.p, i, NAN);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            mxp_store_f32(t, m.p, r * ld + c, 2.0f * mxp_rng_uniform(&rng) - 1.0f);
    return m;
}

static float tmat_at(const tmat *m, size_t r, size_t c) {
    return mxp_load_f32(m->t, m->p, r * m->ld + c);
}

static const mxp_dtype all_types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16,
                                      MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2};
enum { NTYPES = sizeof all_types / sizeof all_types[0] };
static const size_t edge_sizes[] = {1, 3, 7, 15, 17, 31, 33, 63, 65, 127, 129};
enum { NSIZES = sizeof edge_sizes / sizeof edge_sizes[0] };

typedef struct gcase {
    mxp_dtype at, bt;
    bool ta, tb;
    size_t M, N, K, pad_a, pad_b, pad_c;
    float alpha, beta;
} gcase;

/* Operands and C for one case (C padding and, with beta = 0, C itself
 * filled with NaN). */
typedef struct gbufs {
    tmat A, B;
    size_t ldc, nc;
    float *C0; /* initial C */
} gbufs;

static gbufs bufs_make(const gcase *c) {
    gbufs b;
    b.A = c->ta ? tmat_make(c->at, c->K, c->M, c->M + c->pad_a)
                : tmat_make(c->at, c->M, c->K, c->K + c->pad_a);
    b.B = c->tb ? tmat_make(c->bt, c->N, c->K, c->K + c->pad_b)
                : tmat_make(c->bt, c->K, c->N, c->N + c->pad_b);
    b.ldc = c->N + c->pad_c;
    b.nc = c->M ? (c->M - 1) * b.ldc + c->N : 0;
    b.C0 = test_xmalloc(b.nc * sizeof(float));
    for (size_t i = 0; i < b.nc; i++) b.C0[i] = NAN;
    if (c->beta != 0.0f)
        for (size_t i = 0; i < c->M; i++)
            for (size_t j = 0; j < c->N; j++) b.C0[i * b.ldc + j] = 2.0f * mxp_rng_uniform(&rng) - 1.0f;
    return b;
}

static void bufs_free(gbufs *b) {
    free(b->A.p);
    free(b->B.p);
    free(b->C0);
}

static mxp_gemm_args args_for(const gcase *c, const gbufs *b, float *C) {
    return (mxp_gemm_args){
        .trans_a = c->ta, .trans_b = c->tb, .M = (int64_t)c->M, .N = (int64_t)c->N,
        .K = (int64_t)c->K, .a_type = c->at, .A = b->A.p, .lda = (int64_t)b->A.ld,
        .b_type = c->bt, .B = b->B.p, .ldb = (int64_t)b->B.ld, .C = C,
        .ldc = (int64_t)b->ldc, .alpha = c->alpha, .beta = c->beta,
    };
}

/* op(A)[i][k], op(B)[k][j] */
static float opa(const gcase *c, const gbufs *b, size_t i, size_t k) {
    return c->ta ? tmat_at(&b->A, k, i) : tmat_at(&b->A, i, k);
}
static float opb(const gcase *c, const gbufs *b, size_t k, size_t j) {
    return c->tb ? tmat_at(&b->B, j, k) : tmat_at(&b->B, k, j);
}

/* Compare got with the generic result ref element by element (tolerance in
 * the file comment); the padding of C must be untouched. Returns the number
 * of mismatches (each also a failed check, the first few printed). */
static int compare(const gcase *c, const gbufs *b, const float *got, const float *ref,
                   const char *what) {
    int bad = 0;
    double rtol = 2.0 * ((double)c->K + 2.0) * 0x1p-24;
    float *arow = test_xmalloc(c->K * sizeof(float));
    for (size_t i = 0; i < c->M; i++) {
        for (size_t k = 0; k < c->K; k++) arow[k] = opa(c, b, i, k);
        for (size_t j = 0; j < b->ldc && i * b->ldc + j < b->nc; j++) {
            size_t at = i * b->ldc + j;
            bool ok;
            if (j >= c->N) {
                ok = test_f32_bits(got[at]) == test_f32_bits(b->C0[at]);
            } else if (isnan(ref[at]) || isinf(ref[at])) {
                ok = isnan(ref[at]) ? isnan(got[at]) : got[at] == ref[at];
            } else {
                double s = 0.0;
                for (size_t k = 0; k < c->K; k++) s += fabs((double)arow[k] * opb(c, b, k, j));
                s = fabs((double)c->alpha) * s;
                if (c->beta != 0.0f) s += fabs((double)c->beta * b->C0[at]);
                ok = isfinite(got[at]) && fabs((double)got[at] - ref[at]) <= ATOL + rtol * s;
            }
            test_checks++;
            if (!ok) {
                if (bad < 3)
                    test_fail(__FILE__, __LINE__,
                              "%s %s x %s %c%c M=%zu N=%zu K=%zu pads %zu/%zu/%zu a=%g b=%g: "
                              "C[%zu][%zu] = %.9g, generic %.9g",
                              what, mxp_dtype_name(c->at), mxp_dtype_name(c->bt),
                              c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->M, c->N, c->K,
                              c->pad_a, c->pad_b, c->pad_c, (double)c->alpha,
                              (double)c->beta, i, j, (double)got[at], (double)ref[at]);
                else
                    test_failures++;
                bad++;
            }
        }
    }
    free(arow);
    return bad;
}

/* Run one case through generic and AVX-512 (each path, threads 1 and 2
 * where asked) and compare. */
static void run_case(const gcase *c, const gbufs *b, bool both_threads) {
    float *ref = test_xmalloc(b->nc * sizeof(float) + 1);
    float *got = test_xmalloc(b->nc * sizeof(float) + 1);
    memcpy(ref, b->C0, b->nc * sizeof(float));
    mxp_gemm_args g = args_for(c, b, ref);
    G->gemm(&g);
    for (int path = MXP_GEMM_PATH_AUTO; path <= MXP_GEMM_PATH_F32; path++) {
        float *one = NULL;
        for (int threads = 1; threads <= (both_threads ? 2 : 1); threads++) {
            memcpy(got, b->C0, b->nc * sizeof(float));
            g = args_for(c, b, got);
            mxp_avx512_gemm_opts o = {(mxp_gemm_path)path, threads, false};
            mxp_avx512_gemm_ex(&g, &o);
            compare(c, b, got, ref, path == MXP_GEMM_PATH_F32 ? "f32-path" : "auto-path");
            if (threads == 1 && both_threads) {
                one = test_xmalloc(b->nc * sizeof(float) + 1);
                memcpy(one, got, b->nc * sizeof(float));
            } else if (one) {
                CHECK_MSG(memcmp(one, got, b->nc * sizeof(float)) == 0,
                          "1 and 2 threads differ: M=%zu N=%zu K=%zu", c->M, c->N, c->K);
            }
        }
        free(one);
    }
    free(ref);
    free(got);
}

static void run_gcase(const gcase *c, bool both_threads) {
    gbufs b = bufs_make(c);
    run_case(c, &b, both_threads);
    bufs_free(&b);
}

/* Every dtype pair x transposes x edge sizes, each size once per dimension;
 * leading-dimension padding, alpha and beta vary with the shape. */
static void test_edges(void) {
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.25f, 0.75f}, {2.0f, 0.0f},
                                  {1.0f, 1.0f}, {-0.5f, -2.0f}};
    int n = 0;
    for (int ai = 0; ai < NTYPES; ai++)
        for (int bi = 0; bi < NTYPES; bi++)
            for (int tr = 0; tr < 4; tr++)
                for (int s = 0; s < NSIZES; s++, n++) {
                    gcase c = {
                        .at = all_types[ai], .bt = all_types[bi],
                        .ta = tr & 1, .tb = (tr >> 1) & 1,
                        .M = edge_sizes[s],
                        .N = edge_sizes[(s * 3 + 1 + ai) % NSIZES],
                        .K = edge_sizes[(s * 7 + 2 + bi + tr) % NSIZES],
                        .pad_a = (size_t)(n % 3) * 5, .pad_b = (size_t)(n % 4) * 3,
                        .pad_c = (size_t)(n % 5) * 2,
                        .alpha = ab[n % 6][0], .beta = ab[n % 6][1],
                    };
                    run_gcase(&c, false);
                }
}

/* Shapes that cross the cache blocks (K > KC with an odd tail, K cut into
 * 3 and 5 equal blocks on the F32 path and 2 and 3 on the BF16 path, M > MC,
 * N > NC) and shapes large enough to be split between threads, cut along N
 * (M <= N) and along M (M > N; M <= N with K <= 128 and N <= 4 M:
 * 100x300x72; on the BF16 path M <= N <= 2 M: 150x280x200). */
static void test_blocks_and_threads(void) {
    static const struct { size_t M, N, K; } shapes[] = {
        {40, 300, 513}, {700, 40, 300}, {20, 2100, 70}, {160, 96, 130}, {97, 250, 129},
        {45, 70, 1101}, {17, 40, 2051}, {40, 700, 1100}, {100, 300, 72}, {150, 280, 200},
    };
    static const mxp_dtype pairs[][2] = {
        {MXP_DTYPE_F32, MXP_DTYPE_F32}, {MXP_DTYPE_BF16, MXP_DTYPE_BF16},
        {MXP_DTYPE_F16, MXP_DTYPE_F16}, {MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
            int tr = (int)((s + p) % 4);
            gcase c = {
                .at = pairs[p][0], .bt = pairs[p][1], .ta = tr & 1, .tb = (tr >> 1) & 1,
                .M = shapes[s].M, .N = shapes[s].N, .K = shapes[s].K,
                .pad_a = 3, .pad_b = 0, .pad_c = 5,
                .alpha = 1.0f, .beta = (s & 1) ? 1.0f : 0.0f,
            };
            run_gcase(&c, true);
        }
}

/* Bits equal, or both NaN. */
static size_t count_differ(const float *x, const float *y, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += test_f32_bits(x[i]) != test_f32_bits(y[i]) && !(isnan(x[i]) && isnan(y[i]));
    return d;
}

/* One case through mxp_avx512_gemm_ex on `path`, 1 .. max_threads
 * threads: against the generic GEMM (tolerance of the file comment) and
 * bit for bit against the packed path (packed_only: no small-M path, op(A)
 * packed; NaN payloads aside). what names the variant under test. */
static void vs_packed(const gcase *c, mxp_gemm_path path, int max_threads, const char *what) {
    gbufs b = bufs_make(c);
    float *ref = test_xmalloc(b.nc * sizeof(float) + 1);
    float *got = test_xmalloc(b.nc * sizeof(float) + 1);
    float *pk = test_xmalloc(b.nc * sizeof(float) + 1);
    memcpy(ref, b.C0, b.nc * sizeof(float));
    mxp_gemm_args g = args_for(c, &b, ref);
    G->gemm(&g);
    memcpy(pk, b.C0, b.nc * sizeof(float));
    g = args_for(c, &b, pk);
    mxp_avx512_gemm_opts po = {MXP_GEMM_PATH_AUTO, 1, true};
    mxp_avx512_gemm_ex(&g, &po);
    for (int threads = 1; threads <= max_threads; threads++) {
        memcpy(got, b.C0, b.nc * sizeof(float));
        g = args_for(c, &b, got);
        mxp_avx512_gemm_opts o = {path, threads, false};
        mxp_avx512_gemm_ex(&g, &o);
        compare(c, &b, got, ref, what);
        size_t d = count_differ(got, pk, b.nc);
        CHECK_MSG(d == 0, "%s vs packed path: %zu differ (%s A, %s B, %c%c M=%zu N=%zu K=%zu "
                  "lda=%zu threads=%d)", what, d, mxp_dtype_name(c->at), mxp_dtype_name(c->bt),
                  c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->M, c->N, c->K, b.A.ld, threads);
    }
    free(ref);
    free(got);
    free(pk);
    bufs_free(&b);
}

/* The small-M path (M <= 32, FP32 B, op(B) read in place): edge sizes
 * around its tile (MR = 14 columns of C, 16 / 32 rows) and around KC, every
 * transpose, FP32/BF16/F16/E4M3 A. It must agree with the generic GEMM
 * (tolerance of the file comment), be bit-identical to the packed path
 * (same FMA order per element; NaN payloads aside) and to itself on 1 and
 * 2 threads. M = 33 checks the switch back to the packed path; FP32 NN
 * cases whose operands the packed path reads in place take it (gemm.c,
 * small_packed_better), so the small-M kernel gets FP32 NN cases with B
 * rows more than 1024 elements apart at the end. */
static void test_small_m(void) {
    static const size_t Ms[] = {1, 3, 7, 15, 16, 17, 31, 32, 33};
    static const size_t Ns[] = {1, 13, 14, 15, 29, 129};
    static const size_t Ks_full[] = {1, 17, 255, 256, 257, 513};
    static const size_t Ks_quick[] = {1, 17, 257};
    const bool quick = test_quick();
    const size_t *Ks = quick ? Ks_quick : Ks_full;
    const size_t nk = quick ? 3 : 6;
    static const mxp_dtype as[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16,
                                   MXP_DTYPE_F8_E4M3};
    int n = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (size_t ki = 0; ki < nk; ki++)
                for (int tr = 0; tr < 4; tr++, n++) {
                    gcase c = {
                        .at = as[n % 4], .bt = MXP_DTYPE_F32, .ta = tr & 1, .tb = (tr >> 1) & 1,
                        .M = Ms[mi], .N = Ns[ni], .K = Ks[ki],
                        .pad_a = (size_t)(n % 3) * 5, .pad_b = (size_t)(n % 4) * 3,
                        .pad_c = (size_t)(n % 5) * 2,
                        .alpha = n % 3 ? 1.0f : -0.75f, .beta = n % 2 ? 0.5f : 0.0f,
                    };
                    vs_packed(&c, MXP_GEMM_PATH_AUTO, 2, "small-M");
                }
    /* a shape large enough for two threads (2 * 32 * 300 * 300 flops) */
    gcase big = {.at = MXP_DTYPE_F32, .bt = MXP_DTYPE_F32, .ta = false, .tb = true,
                 .M = 32, .N = 300, .K = 300, .pad_a = 1, .pad_b = 2, .pad_c = 3,
                 .alpha = 1.0f, .beta = 0.0f};
    run_gcase(&big, true);
    big.tb = false;
    big.beta = 1.0f;
    run_gcase(&big, true);
    /* FP32 A and B, NN: with both read in place and op(B) in L2 the
     * packed path runs these (gemm.c, small_packed_better, covered above);
     * rows of B more than 1024 elements apart keep the small-M kernel */
    static const size_t Mw[] = {7, 16, 17, 32}, Nw[] = {14, 29}, Kw[] = {17, 257};
    for (size_t mi = 0; mi < 4; mi++)
        for (size_t ni = 0; ni < 2; ni++)
            for (size_t ki = 0; ki < 2; ki++, n++) {
                gcase c = {.at = MXP_DTYPE_F32, .bt = MXP_DTYPE_F32, .M = Mw[mi], .N = Nw[ni],
                           .K = Kw[ki], .pad_a = (size_t)(n % 3), .pad_b = 1100,
                           .pad_c = (size_t)(n % 5), .alpha = n % 3 ? 1.0f : -0.75f,
                           .beta = n % 2 ? 0.5f : 0.0f};
                vs_packed(&c, MXP_GEMM_PATH_AUTO, 2, "small-M, B rows > 1024 apart");
            }
}

/* Inf and NaN in the inputs propagate as in the reference. */
static void test_nonfinite(void) {
    for (int ai = 0; ai < NTYPES; ai++)
        for (int bi = 0; bi < NTYPES; bi++) {
            int tr = (ai + bi) % 4;
            gcase c = {
                .at = all_types[ai], .bt = all_types[bi], .ta = tr & 1, .tb = (tr >> 1) & 1,
                .M = 33, .N = 40, .K = 37, .pad_a = 1, .pad_b = 2, .pad_c = 0,
                .alpha = 1.0f, .beta = 0.0f,
            };
            gbufs b = bufs_make(&c);
            static const float specials[] = {INFINITY, -INFINITY, NAN};
            for (int q = 0; q < 12; q++) {
                float v = specials[q % 3];
                tmat *m = (q & 1) ? &b.A : &b.B;
                size_t r = mxp_rng_below(&rng, (uint32_t)m->rows);
                size_t col = mxp_rng_below(&rng, (uint32_t)m->cols);
                mxp_store_f32(m->t, m->p, r * m->ld + col, v);
            }
            run_case(&c, &b, false);
            bufs_free(&b);
        }
}

/* M = 1, K = 1, A = [1]: C must equal every value of B's dtype bit for bit
 * (any NaN for NaN), on both paths and with B transposed or not. */
static void test_widening_exact(void) {
    for (int bi = 0; bi < NTYPES; bi++) {
        mxp_dtype bt = all_types[bi];
        size_t n = bt == MXP_DTYPE_F32 ? 4096 : (size_t)1 << (8 * mxp_dtype_info(bt)->size);
        void *B = test_xmalloc(n * mxp_dtype_info(bt)->size);
        for (size_t j = 0; j < n; j++) {
            if (bt == MXP_DTYPE_F32) ((uint32_t *)B)[j] = mxp_rng_u32(&rng);
            else if (n == 256) ((uint8_t *)B)[j] = (uint8_t)j;
            else ((uint16_t *)B)[j] = (uint16_t)j;
        }
        float *C = test_xmalloc(n * sizeof(float));
        for (int ai = 0; ai < 2; ai++) {
            mxp_dtype at = ai ? MXP_DTYPE_BF16 : MXP_DTYPE_F32;
            uint32_t one_bits = 0x3f803f80u; /* 1.0 as F32 high half and BF16 */
            float one_f = 1.0f;
            const void *A = ai ? (const void *)&one_bits : (const void *)&one_f;
            for (int tb = 0; tb < 2; tb++) {
                mxp_gemm_args g = {
                    .trans_a = false, .trans_b = tb, .M = 1, .N = (int64_t)n, .K = 1,
                    .a_type = at, .A = A, .lda = 1, .b_type = bt, .B = B,
                    .ldb = tb ? 1 : (int64_t)n, .C = C, .ldc = (int64_t)n,
                    .alpha = 1.0f, .beta = 0.0f,
                };
                mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, 1, false};
                mxp_avx512_gemm_ex(&g, &o);
                int bad = 0;
                for (size_t j = 0; j < n; j++) {
                    float ref = mxp_load_f32(bt, B, j);
                    bool ok = isnan(ref) ? isnan(C[j])
                                         : test_f32_bits(C[j]) == test_f32_bits(ref + 0.0f);
                    if (!ok && bad++ < 3)
                        test_fail(__FILE__, __LINE__, "widen %s (A %s, tb %d): element %zu "
                                  "gave %a, expected %a", mxp_dtype_name(bt),
                                  mxp_dtype_name(at), tb, j, (double)C[j], (double)ref);
                    test_checks++;
                }
                test_failures += bad > 3 ? bad - 3 : 0;
            }
        }
        free(B);
        free(C);
    }
}

/* Path choice: vdpbf16ps for BF16/FP8 pairs, FP32 widening otherwise. A
 * BF16 subnormal (read as zero by vdpbf16ps) must still give generic's
 * result: its micro-tiles fall back to the FP32 microkernel. */
static void test_paths(void) {
    gcase c = {.at = MXP_DTYPE_BF16, .bt = MXP_DTYPE_BF16, .ta = false, .tb = true,
               .M = 17, .N = 33, .K = 31, .alpha = 1.0f, .beta = 0.0f};
    gbufs b = bufs_make(&c);
    float C[1];
    mxp_gemm_args g = args_for(&c, &b, C);
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_DPBF16);
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_F32) == MXP_GEMM_PATH_F32);
    mxp_gemm_args g2 = g;
    g2.a_type = MXP_DTYPE_F8_E4M3;
    g2.b_type = MXP_DTYPE_F8_E5M2;
    CHECK(mxp_avx512_gemm_path_for(&g2, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_DPBF16);
    g2.a_type = MXP_DTYPE_F16;
    CHECK(mxp_avx512_gemm_path_for(&g2, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_F32);
    g2.a_type = MXP_DTYPE_BF16;
    g2.b_type = MXP_DTYPE_F32;
    CHECK(mxp_avx512_gemm_path_for(&g2, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_F32);

    /* row 3 of A is zero but for one subnormal BF16 (1.0e-39), and column
     * 5 of op(B) is 6.3e29: C[3][5] = 6.4e-10, which a path reading the
     * subnormal as zero would miss entirely */
    for (size_t j = 0; j < c.K; j++) ((uint16_t *)b.B.p)[5 * b.B.ld + j] = 0x7100;
    for (size_t k = 0; k < c.K; k++) ((uint16_t *)b.A.p)[3 * b.A.ld + k] = 0;
    ((uint16_t *)b.A.p)[3 * b.A.ld + 7] = 0x000b;
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_DPBF16);
    run_case(&c, &b, false);
    bufs_free(&b);

    /* subnormals in some micro-panels and only in the first K block, the
     * other operand ~2^100 so each subnormal's product (~2^-27) weighs as
     * much as the normal ones (~2^-26): a tile that read them as zero would
     * miss by far more than the tolerance. Threads split both ways, and
     * 1 and 2 threads must agree bit for bit. */
    static const struct { size_t M, N, K; int tr; } sh[] = {
        {90, 200, 600, 2}, {300, 70, 530, 1}, {45, 33, 17, 0}, {31, 129, 2100, 3}};
    for (size_t q = 0; q < sizeof sh / sizeof sh[0]; q++) {
        gcase d = {.at = MXP_DTYPE_BF16, .bt = MXP_DTYPE_BF16, .ta = sh[q].tr & 1,
                   .tb = sh[q].tr >> 1, .M = sh[q].M, .N = sh[q].N, .K = sh[q].K,
                   .pad_a = 2, .pad_b = 1, .pad_c = 3, .alpha = 1.5f,
                   .beta = q & 1 ? 0.5f : 0.0f};
        gbufs e = bufs_make(&d);
        int tiny = (int)(q & 1); /* 0: op(A) holds the subnormals, 1: op(B) */
        for (int o = 0; o < 2; o++) {
            size_t rows = o == 0 ? d.M : d.N;
            for (size_t r = 0; r < rows; r++)
                for (size_t k = 0; k < d.K; k++) {
                    uint16_t sign = (uint16_t)(mxp_rng_below(&rng, 2) << 15), bits;
                    uint16_t man = (uint16_t)mxp_rng_below(&rng, 128);
                    if (o != tiny) /* 2^100 .. 2^101 */
                        bits = (uint16_t)(sign | (227u << 7) | man);
                    else if (r % 5 == 0) /* subnormal in the first third of k (K block 0
                                          * of K = 2100: 3 blocks of 700), else 0 */
                        bits = k < (d.K + 2) / 3 ? (uint16_t)(sign | 64u | (man & 63u)) : 0;
                    else /* 2^-126 .. 2^-123, normal */
                        bits = (uint16_t)(sign | ((1u + mxp_rng_below(&rng, 3)) << 7) | man);
                    tmat *m = o == 0 ? &e.A : &e.B;
                    bool k_fast = o == 0 ? !d.ta : d.tb; /* k contiguous in storage */
                    ((uint16_t *)m->p)[k_fast ? r * m->ld + k : k * m->ld + r] = bits;
                }
        }
        run_case(&d, &e, true);
        bufs_free(&e);
    }

    /* products in FP32's subnormal range: the vdpbf16ps path flushes them,
     * which stays inside atol */
    gcase t = {.at = MXP_DTYPE_BF16, .bt = MXP_DTYPE_BF16, .ta = true, .tb = false,
               .M = 15, .N = 18, .K = 9, .alpha = 1.0f, .beta = 0.0f};
    gbufs tb = bufs_make(&t);
    for (size_t i = 0; i < t.K * t.M; i++) ((uint16_t *)tb.A.p)[i] = 0x1e3d; /* ~1e-20 */
    for (size_t i = 0; i < t.K * t.N; i++) ((uint16_t *)tb.B.p)[i] = 0x1e3d;
    mxp_gemm_args gt = args_for(&t, &tb, C);
    CHECK(mxp_avx512_gemm_path_for(&gt, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_DPBF16);
    run_case(&t, &tb, false);
    bufs_free(&tb);
}

/* The cut between threads (mxp_avx512_gemm_split): ranges that tile the
 * cut dimension in order; rows as equal as possible when M is cut (at most
 * one row apart), whole NR-column micro-tiles when N is cut (at most one
 * tile apart), 16-column lines on the small-M path; and the direction for
 * named training shapes: M when op(B) is read in place and op(A) packed
 * (FP32 NN with rows <= 1024 apart), N when both are packed and M < N or
 * both read in place (FP32 TN). */
static void test_split_plan(void) {
    static const struct {
        size_t M, N, K;
        mxp_dtype t;
        int tr; /* bit 0: trans_a, bit 1: trans_b */
        int threads;
        int want_n; /* 1: N cut, 0: M cut, -1: either */
        size_t unit; /* columns of the N cut; 0: 16 on the small-M path, else NR */
    } sh[] = {
        {128, 256, 256, MXP_DTYPE_F32, 0, 2, 1, 0},   /* dX: B in place, N (prefer_m) */
        {128, 256, 256, MXP_DTYPE_F32, 2, 2, 1, 0},   /* fwd: both packed */
        {256, 256, 256, MXP_DTYPE_F32, 1, 2, 1, 0},   /* dW: both in place */
        {512, 512, 256, MXP_DTYPE_F32, 0, 3, 1, 0},
        {512, 512, 256, MXP_DTYPE_F32, 1, 3, 1, 0},
        {256, 256, 32, MXP_DTYPE_BF16, 1, 2, 0, 0},
        {128, 256, 256, MXP_DTYPE_BF16, 2, 3, 0, 0},  /* DPBF16, N <= 2 M */
        {65, 2048, 512, MXP_DTYPE_BF16, 1, 2, 1, 0},
        {256, 2048, 2048, MXP_DTYPE_F32, 0, 2, 1, 0}, /* B rows 8 KiB apart: packed */
        {32, 256, 256, MXP_DTYPE_F32, 0, 2, 1, 32}, /* M <= 32, FP32 NN in place: packed */
        {32, 300, 300, MXP_DTYPE_F32, 0, 2, 1, 32}, /* (the small path: 144 + 156) */
        {32, 1120, 300, MXP_DTYPE_F32, 0, 2, 1, 16}, /* B rows > 1024 apart: small-M */
        {32, 560, 464, MXP_DTYPE_F32, 0, 2, 1, 32}, /* op(B) K block 1015 KiB: packed */
        {32, 560, 512, MXP_DTYPE_F32, 0, 2, 1, 16}, /* 1120 KiB: small-M (272 + 288) */
        {30, 300, 300, MXP_DTYPE_F32, 2, 3, 1, 0},
        {300, 300, 300, MXP_DTYPE_F16, 0, 3, -1, 0},
        {100, 1000, 200, MXP_DTYPE_F16, 3, 3, 1, 0},
    };
    int max_threads = mxp_threads_max();
    for (size_t q = 0; q < sizeof sh / sizeof sh[0]; q++) {
        bool ta = sh[q].tr & 1, tb = sh[q].tr >> 1;
        mxp_gemm_args g = {
            .trans_a = ta, .trans_b = tb, .M = (int64_t)sh[q].M, .N = (int64_t)sh[q].N,
            .K = (int64_t)sh[q].K, .a_type = sh[q].t, .A = NULL,
            .lda = (int64_t)(ta ? sh[q].M : sh[q].K), .b_type = sh[q].t, .B = NULL,
            .ldb = (int64_t)(tb ? sh[q].K : sh[q].N), .C = NULL, .ldc = (int64_t)sh[q].N,
            .alpha = 1.0f, .beta = 0.0f,
        };
        /* in_place only forms addresses; a non-NULL base keeps it honest */
        static float dummy;
        g.A = &dummy;
        g.B = &dummy;
        g.C = &dummy;
        mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, sh[q].threads, false};
        size_t lo[MXP_GEMM_MAX_PARTS], hi[MXP_GEMM_MAX_PARTS];
        bool split_n;
        int parts = mxp_avx512_gemm_split(&g, &o, &split_n, lo, hi);
        int want_parts = sh[q].threads < max_threads ? sh[q].threads : max_threads;
        CHECK_MSG(parts == want_parts, "split %zux%zux%zu: %d parts, expected %d", sh[q].M,
                  sh[q].N, sh[q].K, parts, want_parts);
        if (parts < 2) continue;
        if (sh[q].want_n >= 0)
            CHECK_MSG(split_n == (sh[q].want_n == 1), "split %zux%zux%zu %s tr %d: cut %c",
                      sh[q].M, sh[q].N, sh[q].K, mxp_dtype_name(sh[q].t), sh[q].tr,
                      split_n ? 'N' : 'M');
        bool small = split_n && sh[q].M <= MXP_GEMM_SMALL_M && sh[q].t == MXP_DTYPE_F32;
        size_t ext = split_n ? sh[q].N : sh[q].M;
        size_t unit = !split_n ? 1 : sh[q].unit ? sh[q].unit : small ? 16 : MXP_GEMM_NR;
        size_t most = 0, least = SIZE_MAX;
        for (int i = 0; i < parts; i++) {
            CHECK(lo[i] == (i ? hi[i - 1] : 0) && lo[i] <= hi[i]);
            CHECK_MSG(lo[i] % unit == 0, "part %d starts at %zu, not a multiple of %zu", i,
                      lo[i], unit);
            size_t units = (hi[i] - lo[i] + unit - 1) / unit;
            if (units > most) most = units;
            if (units < least) least = units;
        }
        CHECK(hi[parts - 1] == ext);
        CHECK_MSG(most - least <= 1, "split %zux%zux%zu: parts of %zu to %zu units of %zu",
                  sh[q].M, sh[q].N, sh[q].K, least, most, unit);
    }
}

/* Each row of C computed alone (a 1-row GEMM on one thread) must equal the
 * same row of got bit for bit: no element's arithmetic depends on the
 * other rows of its micro-tile, the DPBF16 subnormal fallback included. */
static void check_rows_alone(const gcase *c, const gbufs *b, const float *got, const char *what) {
    float *row = test_xmalloc(c->N * sizeof(float) + 1);
    size_t bad_rows = 0;
    for (size_t i = 0; i < c->M; i++) {
        memcpy(row, b->C0 + i * b->ldc, c->N * sizeof(float));
        size_t es = mxp_dtype_info(c->at)->size;
        mxp_gemm_args g = args_for(c, b, row);
        g.M = 1;
        g.A = (const char *)b->A.p + (c->ta ? i : i * b->A.ld) * es;
        mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, 1, true};
        mxp_avx512_gemm_ex(&g, &o);
        bad_rows += count_differ(row, got + i * b->ldc, c->N) != 0;
    }
    test_checks++;
    if (bad_rows)
        test_fail(__FILE__, __LINE__, "%s %zux%zux%zu: %zu rows differ from the row alone", what,
                  c->M, c->N, c->K, bad_rows);
    free(row);
}

/* BF16 subnormals in rows of op(A) at and next to the cut points of 2 and
 * 3 threads (and inside micro-panels that straddle them), some only in
 * the first K block, some columns of op(B) with subnormals too: the other
 * operand ~2^100 so a subnormal read as zero misses by far more than the
 * tolerance. Against the generic GEMM, 1 vs 2 vs 3 threads bit for bit,
 * and every row equal to that row computed alone. The other rows of op(A)
 * span 40 binades, so their sums round and the vdpbf16ps pair order gives
 * other bits than the FP32 fallback: a row that took the fallback for a
 * neighbour's subnormal would show. */
static void test_split_subnormal_rows(void) {
    static const struct { size_t M, N, K; int tr; } sh[] = {
        {128, 256, 256, 2}, {128, 200, 1100, 1}, {129, 96, 300, 0}, {64, 512, 256, 3},
    };
    /* rows near the cuts of 128 rows: 2 threads at 64, 3 at 42 and 85 (129:
     * 43, 86), micro-panel edges at 14 and 56; -1 ends */
    static const int sub_rows[] = {13, 14, 41, 42, 43, 63, 64, 85, 86, 127, -1};
    for (size_t q = 0; q < sizeof sh / sizeof sh[0]; q++) {
        gcase d = {.at = MXP_DTYPE_BF16, .bt = MXP_DTYPE_BF16, .ta = sh[q].tr & 1,
                   .tb = sh[q].tr >> 1, .M = sh[q].M, .N = sh[q].N, .K = sh[q].K,
                   .pad_a = 1, .pad_b = 2, .pad_c = 3, .alpha = q & 1 ? 1.0f : 0.75f,
                   .beta = q & 1 ? 1.0f : 0.0f};
        gbufs e = bufs_make(&d);
        for (int o = 0; o < 2; o++) {
            size_t rows = o == 0 ? d.M : d.N;
            tmat *m = o == 0 ? &e.A : &e.B;
            bool k_fast = o == 0 ? !d.ta : d.tb; /* k contiguous in storage */
            for (size_t r = 0; r < rows; r++) {
                bool sub = false;
                if (o == 0)
                    for (int s = 0; sub_rows[s] >= 0; s++) sub |= (size_t)sub_rows[s] == r;
                else
                    sub = r == 40 || r == 100; /* two B micro-panels */
                for (size_t k = 0; k < d.K; k++) {
                    uint16_t sign = (uint16_t)(mxp_rng_below(&rng, 2) << 15), bits;
                    uint16_t man = (uint16_t)mxp_rng_below(&rng, 128);
                    bool early = k < (d.K + 1) / 2; /* K = 1100: the first of 2 blocks */
                    if (sub && (o == 1 ? k % 5 == 0 : (early || r % 2 == 0) && k % 3 == 0))
                        bits = (uint16_t)(sign | 64u | (man & 63u)); /* subnormal */
                    else if (o == 1) /* op(B): 2^100 .. 2^104 */
                        bits = (uint16_t)(sign | ((227u + mxp_rng_below(&rng, 4)) << 7) | man);
                    else if (sub) /* op(A): 2^-126 .. 2^-123, normal */
                        bits = (uint16_t)(sign | ((1u + mxp_rng_below(&rng, 3)) << 7) | man);
                    else /* 2^-126 .. 2^-86: sums that round, so that the vdpbf16ps
                          * and FP32 FMA orders give different bits */
                        bits = (uint16_t)(sign | ((1u + mxp_rng_below(&rng, 40)) << 7) | man);
                    ((uint16_t *)m->p)[k_fast ? r * m->ld + k : k * m->ld + r] = bits;
                }
            }
        }
        run_case(&d, &e, true);
        float *one = test_xmalloc(e.nc * sizeof(float) + 1);
        float *got = test_xmalloc(e.nc * sizeof(float) + 1);
        for (int th = 1; th <= 3; th++) {
            float *dst = th == 1 ? one : got;
            memcpy(dst, e.C0, e.nc * sizeof(float));
            mxp_gemm_args g = args_for(&d, &e, dst);
            mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, false};
            mxp_avx512_gemm_ex(&g, &o);
            if (th == 1) {
                check_rows_alone(&d, &e, one, "subnormal rows");
                continue;
            }
            size_t n = count_differ(one, got, e.nc);
            CHECK_MSG(n == 0, "subnormal rows %zux%zux%zu: 1 and %d threads differ in %zu",
                      d.M, d.N, d.K, th, n);
        }
        free(one);
        free(got);
        bufs_free(&e);
    }
}

/* Degenerate shapes: K = 0 scales C by beta (beta = 0 writes zeros over
 * NaN); M = 0 or N = 0 touches nothing. */
static void test_degenerate(void) {
    float C[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    float one = 1.0f;
    mxp_gemm_args g = {.M = 2, .N = 3, .K = 0, .a_type = MXP_DTYPE_F32, .A = &one, .lda = 1,
                       .b_type = MXP_DTYPE_F32, .B = &one, .ldb = 3, .C = C, .ldc = 3,
                       .alpha = 1.0f, .beta = 0.0f};
    mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, 0, false};
    mxp_avx512_gemm_ex(&g, &o);
    for (int i = 0; i < 6; i++) CHECK(C[i] == 0.0f);
    for (int i = 0; i < 6; i++) C[i] = (float)i;
    g.beta = 2.0f;
    mxp_avx512_gemm_ex(&g, &o);
    for (int i = 0; i < 6; i++) CHECK(C[i] == 2.0f * (float)i);
    g.K = 1;
    g.M = 0;
    mxp_avx512_gemm_ex(&g, &o);
    g.M = 2;
    g.N = 0;
    mxp_avx512_gemm_ex(&g, &o);
    for (int i = 0; i < 6; i++) CHECK(C[i] == 2.0f * (float)i);
}

/* The small-M path with an FP16 or BF16 op(B) (widened row by row in the
 * microkernel, W16_AHEAD = 16 k steps ahead, when op(B) = B; packed when
 * op(B) = B^T): K around the look-ahead (15, 16, 17, 33) and KC (513: two
 * K blocks), M around its one/two-vector tiles, N around MR = 14 columns,
 * every transpose, A of another dtype (both BF16 take the vdpbf16ps path);
 * a shape large enough for two threads. */
static void test_small_m_w16(void) {
    static const size_t Ms[] = {1, 7, 16, 17, 32, 33};
    static const size_t Ns[] = {1, 13, 14, 29, 129};
    static const size_t Ks_full[] = {1, 15, 16, 17, 33, 257, 513};
    static const size_t Ks_quick[] = {1, 16, 17, 513};
    const bool quick = test_quick();
    const size_t *Ks = quick ? Ks_quick : Ks_full;
    const size_t nk = quick ? 4 : 7;
    static const mxp_dtype bs[] = {MXP_DTYPE_F16, MXP_DTYPE_BF16};
    static const mxp_dtype as[] = {MXP_DTYPE_F32, MXP_DTYPE_F16, MXP_DTYPE_BF16,
                                   MXP_DTYPE_F8_E4M3};
    int n = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (size_t ki = 0; ki < nk; ki++)
                for (int tr = 0; tr < 4; tr++, n++) {
                    mxp_dtype bt = bs[n % 2], at = as[(n / 2) % 4];
                    if (at == MXP_DTYPE_BF16 && bt == MXP_DTYPE_BF16) at = MXP_DTYPE_F32;
                    gcase c = {
                        .at = at, .bt = bt, .ta = tr & 1, .tb = (tr >> 1) & 1,
                        .M = Ms[mi], .N = Ns[ni], .K = Ks[ki],
                        .pad_a = (size_t)(n % 3) * 5, .pad_b = (size_t)(n % 4) * 3,
                        .pad_c = (size_t)(n % 5) * 2,
                        .alpha = n % 3 ? 1.0f : -0.75f, .beta = n % 2 ? 0.5f : 0.0f,
                    };
                    vs_packed(&c, MXP_GEMM_PATH_AUTO, 2, "small-M 16-bit B");
                }
    for (int i = 0; i < 2; i++) {
        gcase big = {.at = MXP_DTYPE_F32, .bt = bs[i], .ta = false, .tb = false,
                     .M = 32, .N = 300, .K = 300, .pad_a = 1, .pad_b = 2, .pad_c = 3,
                     .alpha = 1.0f, .beta = (float)i};
        vs_packed(&big, MXP_GEMM_PATH_AUTO, 2, "small-M 16-bit B");
        run_gcase(&big, true);
    }
}

/* The F32 path's per-element instruction sequence, as a scalar oracle:
 * K cut into ceil(K / 512) blocks of equal even length (the last shorter);
 * per block acc = +0, then acc = fma(a_k, b_k, acc) in increasing k (one
 * rounding each); the first block stores alpha*acc + beta*c (beta == 0:
 * alpha*acc), later blocks c + alpha*acc, each operation rounded. The
 * AVX-512 kernel must match it bit for bit whatever its tile order (row or
 * column sweeps of a block, small-M path), thread split (1, 2 and 3
 * threads: row ranges that start inside a micro-tile's span), and whether
 * it leaves out multiplications by 1 (alpha == 1, beta == 1). */
static float f32_path_oracle(const gcase *c, const gbufs *b, size_t i, size_t j) {
    size_t nb = (c->K + 511) / 512, kb = (c->K + nb - 1) / nb;
    kb += kb & 1;
    float out = b->C0[i * b->ldc + j];
    for (size_t p0 = 0; p0 < c->K; p0 += kb) {
        float acc = 0.0f;
        for (size_t k = p0; k < c->K && k < p0 + kb; k++)
            acc = fmaf(opa(c, b, i, k), opb(c, b, k, j), acc);
        volatile float x = c->alpha * acc; /* rounded to float here */
        if (p0 > 0) out = out + x;
        else out = c->beta == 0.0f ? x : x + c->beta * out;
    }
    return out;
}

/* mxp_avx512_gemm_ex (AUTO path, th threads) on case c into got (from
 * C0): how many elements differ in bits from f32_path_oracle. */
static size_t f32_sequence_diffs(const gcase *c, const gbufs *b, float *got, int th) {
    memcpy(got, b->C0, b->nc * sizeof(float));
    mxp_gemm_args g = args_for(c, b, got);
    mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, false};
    mxp_avx512_gemm_ex(&g, &o);
    size_t bad = 0;
    for (size_t i = 0; i < c->M; i++)
        for (size_t j = 0; j < c->N; j++)
            bad += test_f32_bits(got[i * b->ldc + j]) !=
                   test_f32_bits(f32_path_oracle(c, b, i, j));
    return bad;
}

static void test_f32_sequence(void) {
    static const struct { size_t M, N, K; } sh[] = {
        {29, 67, 32}, {256, 70, 32}, {45, 1030, 24}, {3, 100, 1}, {70, 33, 129},
        {31, 200, 40}, {17, 45, 700}, {50, 40, 1100}, {32, 64, 96}, {16, 640, 520},
        {35, 272, 512}, {40, 300, 1030},
    };
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 1.0f}, {1.0f, 0.75f},
                                  {-1.25f, 0.0f}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int tr = 0; tr < 4; tr++)
            for (size_t q = 0; q < sizeof ab / sizeof ab[0]; q++) {
                gcase c = {MXP_DTYPE_F32, (tr + (int)s) % 3 == 1 ? MXP_DTYPE_F16 : MXP_DTYPE_F32,
                           tr & 1, (tr >> 1) & 1, sh[s].M, sh[s].N, sh[s].K, 3, 1, 2,
                           ab[q][0], ab[q][1]};
                gbufs b = bufs_make(&c);
                float *got = test_xmalloc(b.nc * sizeof(float) + 1);
                for (int th = 1; th <= 3; th++) {
                    size_t bad = f32_sequence_diffs(&c, &b, got, th);
                    test_checks++;
                    if (bad) {
                        test_fail(__FILE__, __LINE__,
                                  "F32 sequence %zux%zux%zu tr %d alpha %g beta %g, %d threads: "
                                  "%zu elements differ from the scalar FMA sequence",
                                  c.M, c.N, c.K, tr, (double)c.alpha, (double)c.beta, th, bad);
                    }
                }
                free(got);
                bufs_free(&b);
            }
}

/* op(A) = A in FP32 (k-contiguous) is read in place on the F32 path, the
 * microkernel broadcasting from each tile row's own address (gemm.c a_kc)
 * where lda <= 1024 and the tile's rows do not crowd one L1 set, packed
 * otherwise (and always under packed_only). Bit for bit against
 * packed_only on one thread, for 1, 2 and 3 threads, and against the
 * generic GEMM: M around MR = 14 (full tiles, every partial tile row count
 * through the 1 .. 13-row kernels, row cuts inside a tile), N around NR =
 * 32 and 16, K of one and two K blocks (three: packed), lda = K, K +
 * padding, 1016 (read in place), 1023 and 1024 (packed: rows in one L1
 * set) and 1025 (over the limit), op(B) = B or B^T, FP32 (read in place or
 * packed) or FP16 (packed). */
static void test_a_kcontig(void) {
    static const struct { size_t M, N, K, lda; } sh[] = {
        {33, 40, 7, 7},       {41, 17, 32, 45},     {56, 64, 100, 100},   {47, 33, 513, 520},
        {70, 96, 64, 1024},   {70, 96, 64, 1025},   {70, 96, 64, 1016},   {45, 70, 64, 1023},
        {99, 31, 1030, 1030}, {143, 130, 200, 203}, {34, 16, 1, 1},       {60, 70, 300, 1016},
        {211, 100, 96, 97},   {99, 45, 1000, 1000},
    };
    int n = 0;
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int v = 0; v < 3; v++, n++) {
            gcase c = {
                .at = MXP_DTYPE_F32, .bt = v == 2 ? MXP_DTYPE_F16 : MXP_DTYPE_F32,
                .ta = false, .tb = v == 1, .M = sh[s].M, .N = sh[s].N, .K = sh[s].K,
                .pad_a = sh[s].lda - sh[s].K, .pad_b = (size_t)(n % 3) * 5,
                .pad_c = (size_t)(n % 4), .alpha = n % 3 ? 1.0f : -0.75f,
                .beta = n % 2 ? 0.5f : 0.0f,
            };
            vs_packed(&c, MXP_GEMM_PATH_F32, 3, "A read along k");
        }
}

/* An FP16 op(A) on the F32 path is widened in its own layout instead of
 * packed into MR panels (gemm.c a_widen): op(A) = A (k-contiguous) row by
 * row, read along k; op(A) = A^T whose k rows alias in L1 (4 KiB apart)
 * with N <= 96, k row by k row, read along the rows of C; packed
 * otherwise (and always under packed_only). Bit for bit against
 * packed_only for 1, 2 and 3 threads, against the generic GEMM, and (all
 * but the largest case) on one and three threads against the scalar
 * FMA-sequence oracle
 * (f32_path_oracle, which widens with num's mxp_load_f32): M around MR =
 * 14 and over MC = 336 (two row blocks), N around NR and the 96 bound, K
 * of one, two and three K blocks and K blocks that are not whole 64-byte
 * lines, lda = K, K + padding, 1024, 2048 (aliased k rows) and 2047,
 * op(B) FP16 (packed, or in L2-sized chunks: 40 x 300 x 512; a packed
 * block over 1 MiB, where op(A) along k is packed: 340 x 530 x 512) or
 * FP32, B or B^T. */
static void test_a_w16(void) {
    static const struct { bool ta; size_t M, N, K, lda; } sh[] = {
        {false, 13, 40, 7, 7},     {false, 14, 33, 32, 45},    {false, 29, 64, 100, 100},
        {false, 47, 17, 513, 520}, {false, 70, 96, 64, 1024},  {false, 45, 70, 1030, 1030},
        {false, 350, 50, 72, 72},  {false, 40, 300, 512, 512}, {false, 34, 16, 1, 1},
        {false, 340, 530, 512, 512},
        {true, 70, 72, 40, 2048},  {true, 350, 96, 520, 2048}, {true, 15, 97, 64, 2048},
        {true, 43, 65, 1030, 2048}, {true, 41, 72, 33, 2047},  {true, 29, 31, 64, 1024},
    };
    int n = 0;
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int v = 0; v < 3; v++, n++) {
            gcase c = {
                .at = MXP_DTYPE_F16, .bt = v == 2 ? MXP_DTYPE_F32 : MXP_DTYPE_F16,
                .ta = sh[s].ta, .tb = v == 1, .M = sh[s].M, .N = sh[s].N, .K = sh[s].K,
                .pad_a = sh[s].lda - (sh[s].ta ? sh[s].M : sh[s].K),
                .pad_b = (size_t)(n % 3) * 5, .pad_c = (size_t)(n % 4),
                .alpha = n % 3 ? 1.0f : -0.75f, .beta = n % 2 ? 0.5f : 0.0f,
            };
            vs_packed(&c, MXP_GEMM_PATH_F32, 3, "FP16 A widened in its layout");
            if (c.M * c.N * c.K > ((size_t)1 << 26)) continue; /* the oracle is slow */
            gbufs b = bufs_make(&c);
            float *got = test_xmalloc(b.nc * sizeof(float) + 1);
            for (int th = 1; th <= 3; th += 2) {
                size_t bad = f32_sequence_diffs(&c, &b, got, th);
                CHECK_MSG(bad == 0, "FP16 A %c%c %zux%zux%zu lda %zu, %d threads: %zu elements "
                          "differ from the scalar FMA sequence", c.ta ? 'T' : 'N',
                          c.tb ? 'T' : 'N', c.M, c.N, c.K, b.A.ld, th, bad);
            }
            free(got);
            bufs_free(&b);
        }
}

/* With MXCSR.FTZ on (here without DAZ, the combination where leaving the
 * multiplications by 1 out would show), alpha = beta = 1 must still
 * multiply: 1 * c flushes a subnormal c to zero, so C = a*b + c gives
 * exactly a*b for a subnormal c (a*b near 2^-120, so that c would show in
 * the sum), and a*b + c with flushing off. */
static void test_unit_store_ftz(void) {
    enum { M = 20, N = 40, K = 1 };
    float A[M * K], B[K * N], C[M * N];
    for (int on = 0; on < 2; on++)
        for (int th = 1; th <= 2; th++) {
            for (int i = 0; i < M; i++) A[i] = 0x1p-60f * (1.0f + (float)i / 64.0f);
            for (int j = 0; j < N; j++) B[j] = 0x1p-60f * (1.0f + (float)j / 128.0f);
            for (int i = 0; i < M * N; i++) C[i] = 0x1p-130f * (float)(1 + i % 5);
            mxp_gemm_args g = {.M = M, .N = N, .K = K, .a_type = MXP_DTYPE_F32, .A = A, .lda = K,
                               .b_type = MXP_DTYPE_F32, .B = B, .ldb = N, .C = C, .ldc = N,
                               .alpha = 1.0f, .beta = 1.0f};
            mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, true};
            unsigned csr = _mm_getcsr();
            _mm_setcsr(on ? csr | (1u << 15) : csr & ~((1u << 15) | (1u << 6)));
            mxp_avx512_gemm_ex(&g, &o);
            _mm_setcsr(csr);
            size_t bad = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float sub = 0x1p-130f * (float)(1 + (i * N + j) % 5);
                    float want = on ? A[i] * B[j] : A[i] * B[j] + sub;
                    bad += test_f32_bits(C[i * N + j]) != test_f32_bits(want);
                }
            test_checks++;
            if (bad)
                test_fail(__FILE__, __LINE__, "alpha = beta = 1 with FTZ %s, %d threads: %zu "
                          "elements wrong", on ? "on" : "off", th, bad);
        }
}

int main(void) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    if (!mxp_avx512_usable(f)) {
        printf("test_gemm_isa: skipped: no AVX-512\n");
        return 0;
    }
    /* three threads where MIXPREC_NUM_THREADS does not say otherwise, so
     * that 3-way cuts run on any machine (the pool runs what it cannot
     * hand out on the caller; results must not change) */
    setenv("MIXPREC_NUM_THREADS", "3", 0);
    G = mxp_kernels_generic();
    CHECK(mxp_kernels_avx512()->gemm != G->gemm);
    mxp_rng_init(&rng, 20240603);
    test_degenerate();
    test_split_plan();
    test_split_subnormal_rows();
    test_widening_exact();
    test_paths();
    test_edges();
    test_nonfinite();
    test_blocks_and_threads();
    test_small_m();
    test_small_m_w16();
    test_f32_sequence();
    test_a_kcontig();
    test_a_w16();
    test_unit_store_ftz();
    return test_finish("test_gemm_isa");
}
