/* tests/test_gemm_bf16_akc.c: a BF16 op(A) = A read in place along k on
 * the DPBF16 path (gemm.c a_kc, in_place_a_bf16; the microkernels'
 * a_kc form), bit for bit against the packed path.
 *
 * Reference: the same GEMM with packed_only (op(A) packed into MR-wide
 * pair panels, the path that was there before), one thread. The two must
 * give the same bits for 1, 2 and 3 threads: reading the pair (k, k+1) of
 * row r from A + r*lda + k instead of from the panel changes no vdpbf16ps
 * and no store. Independent oracle: a double-precision dot product of the
 * exact BF16 values, within the FP32 accumulation bound of
 * gemm_cases.h (atol + 2 (K + 2) 2^-24 S, S = |alpha| sum |a b| +
 * |beta c|), which catches a wrong or missing product in both.
 *
 * Covered: M around MR = 14 (every partial tile row count, the row kernel
 * and the per-tile kernels) and past MC = 336, N around NR = 32 and 16 and
 * past NC = 1024, K even in one, two and three K blocks, K odd (a last odd
 * block is packed: a pair would read past the row, into NaN padding or,
 * for the last row with lda = K, past A; K = 2049 mixes in-place and
 * packed blocks in one call), lda = K, odd (rows 2-byte aligned only),
 * padded, 1024 and 1025 (over A_KC_MAX_LD: packed), op(B) = B and B^T, the
 * unit and non-unit store modes, the L2-chunked range (gemm_range_l2:
 * M <= MC, wide op(B)), BF16 subnormals in some rows of op(A) in one K
 * block only (that block must be packed so its rows take the FP32
 * fallback; the other blocks are read in place) and in some columns of
 * op(B) (tiles on the FP32 fallback next to in-place tiles). Buffers are
 * malloc'ed to their exact extent so ASan sees any read past A.
 */
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mxp_rng rng;

static float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A random normal BF16 value of magnitude 2^(e0) .. 2^(e0 + span). */
static uint16_t bf16_rand(int e0, int span) {
    uint16_t sign = (uint16_t)(mxp_rng_below(&rng, 2) << 15);
    uint16_t man = (uint16_t)mxp_rng_below(&rng, 128);
    uint16_t e = (uint16_t)(127 + e0 + (int)mxp_rng_below(&rng, (uint32_t)span + 1));
    return (uint16_t)(sign | e << 7 | man);
}

/* A BF16 subnormal (exponent 0, fraction != 0). */
static uint16_t bf16_sub(void) {
    uint16_t sign = (uint16_t)(mxp_rng_below(&rng, 2) << 15);
    return (uint16_t)(sign | (1u + mxp_rng_below(&rng, 127)));
}

typedef struct akc_case {
    size_t M, N, K, lda;
    bool tb;            /* op(B) = B^T (NT) */
    float alpha, beta;
    int sub;            /* 0 none; 1 subnormals in rows of op(A); 2 also in op(B) */
} akc_case;

static size_t count_differ(const float *x, const float *y, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += test_f32_bits(x[i]) != test_f32_bits(y[i]) && !(isnan(x[i]) && isnan(y[i]));
    return d;
}

static void run(const akc_case *c) {
    const size_t M = c->M, N = c->N, K = c->K, lda = c->lda;
    const size_t ldb = c->tb ? K + 3 : N + 1, ldc = N + 2;
    const size_t na = (M - 1) * lda + K;
    const size_t nb = c->tb ? (N - 1) * ldb + K : (K - 1) * ldb + N;
    const size_t nc = (M - 1) * ldc + N;
    uint16_t *A = test_xmalloc(na * sizeof(uint16_t));
    uint16_t *B = test_xmalloc(nb * sizeof(uint16_t));
    float *C0 = test_xmalloc(nc * sizeof(float)), *ref = test_xmalloc(nc * sizeof(float));
    float *got = test_xmalloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++) A[i] = 0x7fc0; /* NaN in the padding */
    for (size_t i = 0; i < nb; i++) B[i] = 0x7fc0;
    /* With subnormals: op(B) ~2^100 so that one read as zero misses by far
     * more than the tolerance; op(A)'s rows span 2^-126 .. 2^-96, so sums
     * round and the FP32 fallback's FMA order gives other bits than
     * vdpbf16ps (a row on the wrong path shows in the bit comparison).
     * Rows 3, 14, 15 and every 17th hold subnormals in the second K block
     * (or the only one) at every 5th k. */
    const size_t k_sub0 = K > MXP_GEMM_KC_BF16 ? (K + 1) / 2 : 0;
    for (size_t i = 0; i < M; i++) {
        bool sub_row = c->sub && (i == 3 || i == 14 || i == 15 || i % 17 == 16);
        for (size_t k = 0; k < K; k++) {
            uint16_t v = c->sub ? bf16_rand(-126, 30) : bf16_rand(-3, 3);
            if (sub_row && k >= k_sub0 && k % 5 == 1) v = bf16_sub();
            A[i * lda + k] = v;
        }
    }
    for (size_t k = 0; k < K; k++)
        for (size_t j = 0; j < N; j++) {
            uint16_t v = c->sub ? bf16_rand(100, 4) : bf16_rand(-3, 3);
            if (c->sub == 2 && (j == 5 || j == 40) && k % 7 == 2) v = bf16_sub();
            B[c->tb ? j * ldb + k : k * ldb + j] = v;
        }
    for (size_t i = 0; i < nc; i++)
        C0[i] = c->beta == 0.0f ? NAN : 2.0f * mxp_rng_uniform(&rng) - 1.0f;

    mxp_gemm_args g = {
        .trans_a = false, .trans_b = c->tb, .M = (int64_t)M, .N = (int64_t)N, .K = (int64_t)K,
        .a_type = MXP_DTYPE_BF16, .A = A, .lda = (int64_t)lda, .b_type = MXP_DTYPE_BF16,
        .B = B, .ldb = (int64_t)ldb, .C = ref, .ldc = (int64_t)ldc, .alpha = c->alpha,
        .beta = c->beta,
    };
    memcpy(ref, C0, nc * sizeof(float));
    mxp_avx512_gemm_opts po = {MXP_GEMM_PATH_AUTO, 1, true};
    mxp_avx512_gemm_ex(&g, &po);

    /* the oracle, on the packed reference (the comparisons below carry it
     * to every in-place run) */
    size_t bad = 0;
    double rtol = 2.0 * ((double)K + 2.0) * 0x1p-24;
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0.0, abs = 0.0;
            for (size_t k = 0; k < K; k++) {
                double p = (double)bf16_f32(A[i * lda + k]) *
                           bf16_f32(B[c->tb ? j * ldb + k : k * ldb + j]);
                s += p;
                abs += fabs(p);
            }
            double want = c->alpha * s, tol = fabs((double)c->alpha) * abs;
            if (c->beta != 0.0f) {
                want += (double)c->beta * C0[i * ldc + j];
                tol += fabs((double)c->beta * C0[i * ldc + j]);
            }
            double got_ij = ref[i * ldc + j];
            bad += !(fabs(got_ij - want) <= 1e-30 + rtol * tol);
        }
    CHECK_MSG(bad == 0, "packed BF16 %zux%zux%zu lda %zu %s: %zu elements off the oracle", M, N,
              K, lda, c->tb ? "NT" : "NN", bad);

    for (int th = 1; th <= 3; th++) {
        memcpy(got, C0, nc * sizeof(float));
        g.C = got;
        mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, false};
        mxp_avx512_gemm_ex(&g, &o);
        size_t d = count_differ(got, ref, nc);
        CHECK_MSG(d == 0,
                  "BF16 A along k %zux%zux%zu lda %zu %s alpha %g beta %g sub %d, %d threads: "
                  "%zu elements differ from the packed path",
                  M, N, K, lda, c->tb ? "NT" : "NN", (double)c->alpha, (double)c->beta, c->sub,
                  th, d);
    }
    free(A);
    free(B);
    free(C0);
    free(ref);
    free(got);
}

int main(void) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    if (!mxp_avx512_usable(f)) {
        printf("test_gemm_bf16_akc: skipped: no AVX-512\n");
        return 0;
    }
    setenv("MIXPREC_NUM_THREADS", "3", 0);
    mxp_rng_init(&rng, 20261124);
    static const struct { size_t M, N, K, lda; } sh[] = {
        {1, 17, 2, 2},         {13, 32, 30, 30},      {14, 33, 32, 33},
        {15, 16, 64, 71},      {29, 64, 72, 72},      {41, 40, 100, 101},
        {56, 96, 256, 256},    {70, 70, 65, 65},      {143, 130, 200, 203},
        {128, 256, 256, 256},  {340, 45, 72, 72},     {27, 1100, 32, 40},
        {100, 1100, 512, 512}, {60, 70, 300, 1024},   {60, 70, 300, 1025},
        {45, 50, 2050, 2050},  {33, 40, 2049, 2049},  {16, 31, 1, 1},
        {70, 70, 65, 66},      {33, 40, 2049, 2052},  {29, 45, 1, 4},
    };
    static const float ab[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.75f, 0.0f}, {-1.25f, 0.5f}};
    int n = 0;
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int tb = 0; tb < 2; tb++, n++) {
            akc_case c = {sh[s].M, sh[s].N, sh[s].K, sh[s].lda, tb == 1,
                          ab[n % 4][0], ab[n % 4][1], 0};
            run(&c);
            if (test_quick() && s % 3 != 0) continue;
            c.sub = 1 + tb;
            c.alpha = ab[(n + 1) % 4][0];
            c.beta = ab[(n + 1) % 4][1];
            run(&c);
        }
    return test_finish("test_gemm_bf16_akc");
}
