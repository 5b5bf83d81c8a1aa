/* kernels/generic/gemm.c: reference GEMM for every (A, B) dtype pair.
 *
 * Entry point: mxp_generic_gemm (contract in kernels/kernels.h).
 *
 * Scheme: op(B) is widened to FP32 one [KB x NB] panel at a time into a
 * stack buffer (each element of B is widened exactly once); for every row of
 * op(A) the matching KB-slice is widened into a small row buffer (or used in
 * place when A is contiguous FP32), and the row times the panel is summed in
 * FP32 in k order. Partial sums of successive K panels are added into C,
 * the first panel also applying beta (beta == 0 never reads C). Widening goes
 * through num's bulk/scalar converters, so every input value is exact.
 * No allocation; stack use is about 33 KiB.
 */
#include "kernels/generic/generic.h"

enum { GEMM_KB = 128, GEMM_NB = 64 };

/* Widen n elements of a typed buffer, element indices first + j*stride,
 * to FP32. Returns dst, or a pointer into `base` when it is already
 * contiguous FP32 (no copy needed). */
static const float *widen(mxp_dtype t, const void *base, size_t first,
                          size_t stride, size_t n, float *dst) {
    if (stride == 1) {
        if (t == MXP_DTYPE_F32) return (const float *)base + first;
        size_t es = mxp_dtype_info(t)->size;
        mxp_convert(MXP_DTYPE_F32, dst, t, (const char *)base + first * es, n);
        return dst;
    }
    for (size_t j = 0; j < n; j++) dst[j] = mxp_load_f32(t, base, first + j * stride);
    return dst;
}

/* bp[k*GEMM_NB + j] = op(B)[k0 + k, j0 + j] for k < kb, j < nb. */
static void pack_b(const mxp_gemm_args *g, size_t k0, size_t kb, size_t j0,
                   size_t nb, float *bp, float *col) {
    size_t ldb = (size_t)g->ldb;
    if (!g->trans_b) { /* B is K x N: row k of op(B) is contiguous */
        for (size_t k = 0; k < kb; k++) {
            float *dst = bp + k * GEMM_NB;
            const float *src = widen(g->b_type, g->B, (k0 + k) * ldb + j0, 1, nb, dst);
            if (src != dst)
                for (size_t j = 0; j < nb; j++) dst[j] = src[j];
        }
    } else { /* B is N x K: column j of op(B) is contiguous */
        for (size_t j = 0; j < nb; j++) {
            const float *src = widen(g->b_type, g->B, (j0 + j) * ldb + k0, 1, kb, col);
            for (size_t k = 0; k < kb; k++) bp[k * GEMM_NB + j] = src[k];
        }
    }
}

/* C = beta * C (beta == 0: C = 0 without reading it); the K == 0 case. */
static void scale_c(const mxp_gemm_args *g) {
    for (int64_t i = 0; i < g->M; i++) {
        float *c = g->C + (size_t)i * (size_t)g->ldc;
        for (int64_t j = 0; j < g->N; j++) c[j] = g->beta == 0.0f ? 0.0f : g->beta * c[j];
    }
}

void mxp_generic_gemm(const mxp_gemm_args *g) {
    if (g->M <= 0 || g->N <= 0) return;
    if (g->K <= 0) {
        scale_c(g);
        return;
    }
    size_t M = (size_t)g->M, N = (size_t)g->N, K = (size_t)g->K;
    size_t lda = (size_t)g->lda, ldc = (size_t)g->ldc;
    float alpha = g->alpha, beta = g->beta;
    float bp[GEMM_KB * GEMM_NB];
    float arow_buf[GEMM_KB], col[GEMM_KB], acc[GEMM_NB];

    for (size_t j0 = 0; j0 < N; j0 += GEMM_NB) {
        size_t nb = N - j0 < GEMM_NB ? N - j0 : GEMM_NB;
        for (size_t k0 = 0; k0 < K; k0 += GEMM_KB) {
            size_t kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;
            pack_b(g, k0, kb, j0, nb, bp, col);
            for (size_t i = 0; i < M; i++) {
                /* op(A)[i, k0 .. k0+kb) */
                const float *arow =
                    g->trans_a ? widen(g->a_type, g->A, k0 * lda + i, lda, kb, arow_buf)
                               : widen(g->a_type, g->A, i * lda + k0, 1, kb, arow_buf);
                for (size_t j = 0; j < nb; j++) acc[j] = 0.0f;
                for (size_t k = 0; k < kb; k++) {
                    float a = arow[k];
                    const float *b = bp + k * GEMM_NB;
                    for (size_t j = 0; j < nb; j++) acc[j] += a * b[j];
                }
                float *c = g->C + i * ldc + j0;
                if (k0 > 0) {
                    for (size_t j = 0; j < nb; j++) c[j] += alpha * acc[j];
                } else if (beta == 0.0f) {
                    for (size_t j = 0; j < nb; j++) c[j] = alpha * acc[j];
                } else {
                    for (size_t j = 0; j < nb; j++) c[j] = alpha * acc[j] + beta * c[j];
                }
            }
        }
    }
}
