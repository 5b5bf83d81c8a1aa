/* tests/test_gemm_strided.c: the kernel table's strided-batched GEMM
 * (kernels.h gemm_strided; AVX-512: kernels/x86_avx512/gemm_strided.c and
 * gemm.c mxp_avx512_gemm_many), the entry the layer-major ensemble pass
 * runs each linear layer's GEMMs through (src/nn/ens_batched.c).
 *
 * Oracle: the same table's gemm on each product alone (itself checked
 * against an FP64 reference in test_gemm_isa*.c): every product's C must
 * be bit-identical, for FP32, BF16 and FP16 operands, all four transpose
 * combinations, beta 0 (C's old contents, here NaN, ignored) and 1,
 * 1, 2 and 5 products with strides that leave gaps between the operands,
 * shapes of the ensemble's layers (forward, dW, dX at batch 256 and 32),
 * one small enough to run on one thread per product and ragged ones.
 * Run with the default thread count and with MIXPREC_NUM_THREADS=3 by
 * hand. Without AVX-512 (gemm_strided NULL) it checks only that the
 * generic table leaves the slot NULL (the caller loops).
 * Negative control (by hand, 2026-12-02): product 2 given product 0's B
 * operand in gemm_strided.c failed all 108 cases with count 5 ("product 2
 * differs", 108 of 6912 checks); see also tests/test_ens_batched.c.
 */
#include "kernels/kernels.h"
#include "kernels/threads.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 88172645463325252ull;
static float rnd(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* n values uniform in [-1, 1) in dtype t (rounded from FP32). */
static void *make(const mxp_kernels *k, mxp_dtype t, size_t n) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    void *out = malloc((n ? n : 1) * mxp_dtype_info(t)->size);
    for (size_t i = 0; i < n; i++) f[i] = rnd();
    k->convert(t, out, MXP_DTYPE_F32, f, n);
    free(f);
    return out;
}

static void one_case(const mxp_kernels *k, mxp_dtype t, int64_t M, int64_t N, int64_t K,
                     bool ta, bool tb, float beta, int count) {
    const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    const size_t ar = (size_t)(ta ? K : M), br = (size_t)(tb ? N : K);
    const size_t sa = ar * (size_t)lda + 5, sb = br * (size_t)ldb + 3; /* gaps */
    const size_t sc = (size_t)M * (size_t)ldc + 7;
    void *A = make(k, t, sa * (size_t)count), *B = make(k, t, sb * (size_t)count);
    float *C0 = malloc(sc * (size_t)count * sizeof(float));
    float *C1 = malloc(sc * (size_t)count * sizeof(float));
    for (size_t i = 0; i < sc * (size_t)count; i++)
        C0[i] = C1[i] = beta == 0.0f ? NAN : rnd();
    const size_t es = mxp_dtype_info(t)->size;
    mxp_gemm_args g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K,
                       .a_type = t, .A = A, .lda = lda, .b_type = t, .B = B, .ldb = ldb,
                       .C = C1, .ldc = ldc, .alpha = 1.0f, .beta = beta};
    k->gemm_strided(&g, count, sa, sb, sc);
    for (int i = 0; i < count; i++) {
        mxp_gemm_args gi = g;
        gi.A = (const unsigned char *)A + (size_t)i * sa * es;
        gi.B = (const unsigned char *)B + (size_t)i * sb * es;
        gi.C = C0 + (size_t)i * sc;
        k->gemm(&gi);
        CHECK_MSG(memcmp(C0 + (size_t)i * sc, C1 + (size_t)i * sc,
                         (size_t)M * (size_t)ldc * sizeof(float)) == 0,
                  "%s %lldx%lldx%lld ta=%d tb=%d beta=%g count=%d: product %d differs",
                  mxp_dtype_info(t)->name, (long long)M, (long long)N, (long long)K, (int)ta,
                  (int)tb, (double)beta, count, i);
        /* the gaps between products are not written */
        for (size_t j = (size_t)M * (size_t)ldc; j < sc; j++)
            CHECK(memcmp(&C0[(size_t)i * sc + j], &C1[(size_t)i * sc + j], sizeof(float)) == 0 ||
                  (isnan(C0[(size_t)i * sc + j]) && isnan(C1[(size_t)i * sc + j])));
    }
    free(A);
    free(B);
    free(C0);
    free(C1);
}

int main(void) {
    const mxp_kernels *k = mxp_kernels_get();
    if (!k->gemm_strided) {
        CHECK(mxp_kernels_generic()->gemm_strided == NULL);
        printf("test_gemm_strided: table %s has no strided GEMM (callers loop)\n", k->isa);
        return test_finish("test_gemm_strided");
    }
    static const int64_t sh[][3] = {
        {256, 200, 37}, {256, 200, 200}, {256, 60, 200}, /* forward, batch 256 */
        {200, 200, 256}, {60, 200, 256},                 /* dW (TN) */
        {32, 200, 200}, {200, 37, 32},                   /* batch 32: one thread each */
        {17, 33, 5}, {3, 300, 70},
    };
    static const mxp_dtype types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    static const int counts[] = {1, 2, 5};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int ti = 0; ti < 3; ti++)
            for (int tr = 0; tr < 4; tr++)
                for (int c = 0; c < 3; c++)
                    one_case(k, types[ti], sh[s][0], sh[s][1], sh[s][2], tr & 1, tr >> 1,
                             (c == 1) ? 1.0f : 0.0f, counts[c]);
    printf("test_gemm_strided: table %s, %d threads\n", k->isa, mxp_threads_max());
    return test_finish("test_gemm_strided");
}
