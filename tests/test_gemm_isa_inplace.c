/* tests/test_gemm_isa_inplace.c: the AVX-512 GEMM's paths that read an
 * operand where it lies (oracle and tolerance: gemm_cases.h).
 *
 * Covered: the small-M path (M <= 32, FP32 B read in place, FP16/BF16 B
 * widened in the microkernel) on edge sizes, bit-identical to the packed
 * path; the F32 path bit for bit against a scalar oracle of its documented
 * FMA sequence (gemm_cases.h f32_path_oracle); alpha = beta = 1 under
 * flush-to-zero (multiplications by 1 kept); an FP32 op(A) = A read in
 * place along k and an FP16 op(A) widened in its own layout, bit for bit
 * against the packed path.
 */
#include "gemm_cases.h"

#include <stdlib.h>
#include <string.h>

/* Case n of a small-M sweep: transposes from tr (bit 0: A, bit 1: B),
 * leading-dimension padding, alpha and beta cycling with n. */
static gcase sweep_case(mxp_dtype at, mxp_dtype bt, int tr, size_t M, size_t N, size_t K, int n) {
    return (gcase){
        .at = at, .bt = bt, .ta = tr & 1, .tb = (tr >> 1) & 1, .M = M, .N = N, .K = K,
        .pad_a = (size_t)(n % 3) * 5, .pad_b = (size_t)(n % 4) * 3, .pad_c = (size_t)(n % 5) * 2,
        .alpha = n % 3 ? 1.0f : -0.75f, .beta = n % 2 ? 0.5f : 0.0f,
    };
}

/* The small-M path (M <= 32, FP32 B, op(B) read in place): edge sizes
 * around its tile (MR = 14 columns of C, 16 / 32 rows) and around KC, every
 * transpose, FP32/BF16/F16/E4M3 A. It must agree with the generic GEMM
 * (tolerance of gemm_cases.h), be bit-identical to the packed path
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
                    gcase c = sweep_case(as[n % 4], MXP_DTYPE_F32, tr, Ms[mi], Ns[ni], Ks[ki], n);
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
                    gcase c = sweep_case(at, bt, tr, Ms[mi], Ns[ni], Ks[ki], n);
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

/* The F32 path's FMA sequence (f32_path_oracle) bit for bit, whatever the
 * kernel's tile order (row or column sweeps of a block, small-M path,
 * column-edge kernel),
 * thread split (1, 2 and 3 threads: row ranges that start inside a
 * micro-tile's span), and whether it leaves out multiplications by 1
 * (alpha == 1, beta == 1). */
static void test_f32_sequence(void) {
    static const struct { size_t M, N, K; } sh[] = {
        {29, 67, 32}, {256, 70, 32}, {45, 1030, 24}, {3, 100, 1}, {70, 33, 129},
        {31, 200, 40}, {17, 45, 700}, {50, 40, 1100}, {32, 64, 96}, {16, 640, 520},
        {35, 272, 512}, {40, 300, 1030},
        /* N = 32 q + 1 or 2: the column-edge kernel where tune.c enables it
         * (gemm_ukernel.c uk_f32_cols: groups of 4 tiles, the last partial;
         * op(A) packed or in place along the rows of C, op(B) packed or in
         * place; a last NC block of 1 column) */
        {75, 66, 530}, {130, 97, 40}, {300, 34, 64}, {100, 65, 50}, {120, 513, 40},
        {60, 545, 80},
    };
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 1.0f}, {1.0f, 0.75f},
                                  {-1.25f, 0.0f}};
    /* quick (the sanitizer and reference passes): every shape and transpose
     * once, with the alpha/beta pair and thread count rotating over them,
     * instead of every combination (the scalar oracle dominates there) */
    const bool quick = test_quick();
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int tr = 0; tr < 4; tr++)
            for (size_t q = 0; q < sizeof ab / sizeof ab[0]; q++) {
                const size_t rot = s * 4 + (size_t)tr; /* one case per (shape, transpose) */
                if (quick && q != rot % (sizeof ab / sizeof ab[0])) continue;
                gcase c = {MXP_DTYPE_F32, (tr + (int)s) % 3 == 1 ? MXP_DTYPE_F16 : MXP_DTYPE_F32,
                           tr & 1, (tr >> 1) & 1, sh[s].M, sh[s].N, sh[s].K, 3, 1, 2,
                           ab[q][0], ab[q][1]};
                gbufs b = bufs_make(&c);
                float *got = test_xmalloc(b.nc * sizeof(float) + 1);
                for (int th = 1; th <= 3; th++) {
                    if (quick && th != 1 + (int)(rot % 3)) continue;
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
    if (!gemm_cases_init("test_gemm_isa_inplace", 20240603)) return 0;
    test_small_m();
    test_small_m_w16();
    test_f32_sequence();
    test_a_kcontig();
    test_a_w16();
    test_unit_store_ftz();
    return test_finish("test_gemm_isa_inplace");
}
