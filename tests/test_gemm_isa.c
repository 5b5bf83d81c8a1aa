/* tests/test_gemm_isa.c: the AVX-512 GEMM against the generic reference
 * (oracle and tolerance: gemm_cases.h).
 *
 * Covered here: every (A, B) dtype pair, all four transposes, sizes 1 ..
 * 129 mixed in M, N, K (the AVX-512 edges: 1, 3, 7, 15, 17, 31, 33, 63, 65,
 * 127, 129), padded leading dimensions whose padding holds NaN, C columns
 * between N and ldc left untouched, alpha/beta including beta = 0 over a
 * NaN-filled C, Inf/NaN inputs, blocks larger than KC, MC and NC, both
 * compute paths (FP32 widening and vdpbf16ps), BF16 subnormals (which must
 * leave the vdpbf16ps path), bit-exact widening of every input value,
 * bit-identical results for 1 and 2 threads, degenerate shapes.
 * Elsewhere: the cut between threads (test_gemm_isa_split.c); the small-M
 * path, operands read in place, the F32 path's FMA sequence and unit
 * stores under FTZ (test_gemm_isa_inplace.c); the packers alone
 * (test_gemm_pack_f32.c, test_gemm_pack_bf16.c).
 */
#include "gemm_cases.h"

#include <stdlib.h>
#include <string.h>

static const mxp_dtype all_types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16,
                                      MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2};
enum { NTYPES = sizeof all_types / sizeof all_types[0] };
static const size_t edge_sizes[] = {1, 3, 7, 15, 17, 31, 33, 63, 65, 127, 129};
enum { NSIZES = sizeof edge_sizes / sizeof edge_sizes[0] };

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
                size_t r = mxp_rng_below(&gemm_rng, (uint32_t)m->rows);
                size_t col = mxp_rng_below(&gemm_rng, (uint32_t)m->cols);
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
            if (bt == MXP_DTYPE_F32) ((uint32_t *)B)[j] = mxp_rng_u32(&gemm_rng);
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

/* Path choice: vdpbf16ps for BF16/FP8 pairs where the CPU runs it fast
 * (tune.c: AUTO takes it then; asked for, it is taken on any CPU), FP32
 * widening otherwise. A BF16 subnormal (read as zero by vdpbf16ps) must
 * still give generic's result: its micro-tiles fall back to the FP32
 * microkernel. run_case checks the DPBF16 path on every CPU. */
static void test_paths(void) {
    const mxp_gemm_path dp_auto =
        mxp_avx512_tune_get()->dpbf16_fast ? MXP_GEMM_PATH_DPBF16 : MXP_GEMM_PATH_F32;
    gcase c = {.at = MXP_DTYPE_BF16, .bt = MXP_DTYPE_BF16, .ta = false, .tb = true,
               .M = 17, .N = 33, .K = 31, .alpha = 1.0f, .beta = 0.0f};
    gbufs b = bufs_make(&c);
    float C[1];
    mxp_gemm_args g = args_for(&c, &b, C);
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_AUTO) == dp_auto);
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_DPBF16) == MXP_GEMM_PATH_DPBF16);
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_F32) == MXP_GEMM_PATH_F32);
    mxp_gemm_args g2 = g;
    g2.a_type = MXP_DTYPE_F8_E4M3;
    g2.b_type = MXP_DTYPE_F8_E5M2;
    CHECK(mxp_avx512_gemm_path_for(&g2, MXP_GEMM_PATH_AUTO) == dp_auto);
    CHECK(mxp_avx512_gemm_path_for(&g2, MXP_GEMM_PATH_DPBF16) == MXP_GEMM_PATH_DPBF16);
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
    CHECK(mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_DPBF16) == MXP_GEMM_PATH_DPBF16);
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
                    uint16_t sign = (uint16_t)(mxp_rng_below(&gemm_rng, 2) << 15), bits;
                    uint16_t man = (uint16_t)mxp_rng_below(&gemm_rng, 128);
                    if (o != tiny) /* 2^100 .. 2^101 */
                        bits = (uint16_t)(sign | (227u << 7) | man);
                    else if (r % 5 == 0) /* subnormal in the first third of k (K block 0
                                          * of K = 2100: 3 blocks of 700), else 0 */
                        bits = k < (d.K + 2) / 3 ? (uint16_t)(sign | 64u | (man & 63u)) : 0;
                    else /* 2^-126 .. 2^-123, normal */
                        bits = (uint16_t)(sign | ((1u + mxp_rng_below(&gemm_rng, 3)) << 7) | man);
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
    CHECK(mxp_avx512_gemm_path_for(&gt, MXP_GEMM_PATH_DPBF16) == MXP_GEMM_PATH_DPBF16);
    run_case(&t, &tb, false);
    bufs_free(&tb);
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

int main(void) {
    if (!gemm_cases_init("test_gemm_isa", 20240603)) return 0;
    test_degenerate();
    test_widening_exact();
    test_paths();
    test_edges();
    test_nonfinite();
    test_blocks_and_threads();
    return test_finish("test_gemm_isa");
}
