/* tests/test_lt_map.c: the cuBLASLt mapping of row-major GEMMs
 * (backend/cuda/lt_map.h), on the host. A naive executor interprets a
 * description the way cuBLASLt defines it (column-major, op(A) per TRANSA,
 * leading dimensions, beta * C, the BIAS epilogue over the m rows of D) and
 * the result is compared with the row-major definitions written directly:
 *   FWD  Y[b,o]  = sum_i X[b,i] W[o,i] + bias[o]
 *   DX   dX[b,i] = sum_o dY[b,o] W[o,i]
 *   DW   dW[o,i] = dW_old[o,i] (accumulate) + sum_b dY[b,o] X[b,i]
 * on odd shapes, and mxp_lt_from_rowmajor for every transpose combination
 * with padded leading dimensions; the FP8 form (mxp_lt_linear_fp8: TN on the
 * transposed copies X^T, W^T, dY^T) against the same definitions (no bias
 * epilogue), and its shape rule. Small-integer data: every sum is exact in
 * double, so the comparisons are exact. The executor also checks that the
 * layouts (rows, cols, ld) describe the buffers it is handed (no index
 * outside ld * cols, rows <= ld).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/lt_map.h"
#include "testutil.h"

static uint32_t rs = 12345u;
static double irand(void) { /* integers in [-4, 4] */
    rs = rs * 1664525u + 1013904223u;
    return (double)((int)(rs >> 24) % 9 - 4);
}

static double *rnd(size_t n) {
    double *x = test_xmalloc(n * sizeof *x + 8);
    for (size_t i = 0; i < n; i++) x[i] = irand();
    return x;
}

/* Execute d column-major: D = alpha op(A) op(B) + beta D (+ bias[i]).
 * na, nb, nd: the element counts of the buffers. Returns false when the
 * layouts do not fit the buffers or disagree with m, n, k. */
static bool lt_exec(const mxp_lt_desc *d, const double *A, size_t na, const double *B, size_t nb,
                    const double *bias, double *D, size_t nd) {
    if (d->a_rows > d->lda || d->b_rows > d->ldb || d->m > d->ldc) return false;
    if ((size_t)(d->lda * (d->a_cols - 1) + d->a_rows) > na) return false;
    if ((size_t)(d->ldb * (d->b_cols - 1) + d->b_rows) > nb) return false;
    if ((size_t)(d->ldc * (d->n - 1) + d->m) > nd) return false;
    if ((d->trans_a ? d->a_cols : d->a_rows) != d->m || (d->trans_a ? d->a_rows : d->a_cols) != d->k)
        return false;
    if ((d->trans_b ? d->b_cols : d->b_rows) != d->k || (d->trans_b ? d->b_rows : d->b_cols) != d->n)
        return false;
    for (int64_t j = 0; j < d->n; j++)
        for (int64_t i = 0; i < d->m; i++) {
            double s = 0;
            for (int64_t p = 0; p < d->k; p++) {
                double a = d->trans_a ? A[p + i * d->lda] : A[i + p * d->lda];
                double b = d->trans_b ? B[j + p * d->ldb] : B[p + j * d->ldb];
                s += a * b;
            }
            double *o = &D[i + j * d->ldc];
            double v = d->alpha * s + (d->beta != 0.0f ? d->beta * *o : 0.0);
            if (d->bias) v += bias[i];
            *o = v;
        }
    return true;
}

/* row-major src [r, c] transposed into a new [c, r] */
static double *transposed(const double *src, int64_t r, int64_t c) {
    double *t = test_xmalloc((size_t)(r * c) * sizeof *t + 8);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) t[j * r + i] = src[i * c + j];
    return t;
}

/* fp8: mxp_lt_linear_fp8's TN descriptions on the transposed copies (no
 * bias epilogue: the forward's expected values then have no bias). */
static void test_linear(int64_t B, int64_t I, int64_t O, bool fp8) {
    double *X = rnd((size_t)(B * I)), *W = rnd((size_t)(O * I)), *dY = rnd((size_t)(B * O));
    double *bias = rnd((size_t)O), *dW0 = rnd((size_t)(O * I));
    double *XT = transposed(X, B, I), *WT = transposed(W, O, I), *dYT = transposed(dY, B, O);
    const double *buf[MXP_LT_OPERAND_COUNT] = {X, W, dY, XT, WT, dYT};
    const size_t len[MXP_LT_OPERAND_COUNT] = {(size_t)(B * I), (size_t)(O * I), (size_t)(B * O),
                                              (size_t)(B * I), (size_t)(O * I), (size_t)(B * O)};
    char why[200];
    for (int acc = 0; acc < 2; acc++)
        for (int w = 0; w < MXP_LT_GEMM_COUNT; w++) {
            mxp_lt_desc d;
            const int rc = fp8 ? mxp_lt_linear_fp8((mxp_lt_gemm)w, B, I, O, acc, &d, why, sizeof why)
                               : mxp_lt_linear((mxp_lt_gemm)w, B, I, O, true, acc, &d, why,
                                               sizeof why);
            CHECK_MSG(rc == 0, "%s: %s", mxp_lt_gemm_name((mxp_lt_gemm)w), why);
            CHECK(d.a_op < MXP_LT_OPERAND_COUNT && d.b_op < MXP_LT_OPERAND_COUNT);
            if (fp8) /* cuBLASLt's FP8 kernels: TN only, no bias epilogue */
                CHECK_MSG(d.trans_a && !d.trans_b && !d.bias, "%s fp8: not TN",
                          mxp_lt_gemm_name((mxp_lt_gemm)w));
            size_t nd = w == MXP_LT_FWD ? (size_t)(B * O) : w == MXP_LT_DX ? (size_t)(B * I)
                                                                           : (size_t)(O * I);
            double *D = test_xmalloc(nd * sizeof *D);
            if (w == MXP_LT_DW)
                memcpy(D, dW0, nd * sizeof *D);
            else
                for (size_t i = 0; i < nd; i++) D[i] = 1e300; /* must not leak (beta 0) */
            bool ok = lt_exec(&d, buf[d.a_op], len[d.a_op], buf[d.b_op], len[d.b_op], bias, D, nd);
            CHECK_MSG(ok, "%s B%lld I%lld O%lld: layouts do not fit the buffers",
                      mxp_lt_gemm_name((mxp_lt_gemm)w), (long long)B, (long long)I, (long long)O);
            if (!ok) {
                free(D);
                continue;
            }
            size_t bad = 0;
            if (w == MXP_LT_FWD) {
                for (int64_t b = 0; b < B; b++)
                    for (int64_t o = 0; o < O; o++) {
                        double s = fp8 ? 0.0 : bias[o];
                        for (int64_t i = 0; i < I; i++) s += X[b * I + i] * W[o * I + i];
                        if (D[b * O + o] != s) bad++;
                    }
            } else if (w == MXP_LT_DX) {
                for (int64_t b = 0; b < B; b++)
                    for (int64_t i = 0; i < I; i++) {
                        double s = 0;
                        for (int64_t o = 0; o < O; o++) s += dY[b * O + o] * W[o * I + i];
                        if (D[b * I + i] != s) bad++;
                    }
            } else {
                for (int64_t o = 0; o < O; o++)
                    for (int64_t i = 0; i < I; i++) {
                        double s = acc ? dW0[o * I + i] : 0.0;
                        for (int64_t b = 0; b < B; b++) s += dY[b * O + o] * X[b * I + i];
                        if (D[o * I + i] != s) bad++;
                    }
            }
            CHECK_MSG(bad == 0, "%s%s B%lld I%lld O%lld acc %d: %zu wrong elements",
                      mxp_lt_gemm_name((mxp_lt_gemm)w), fp8 ? " fp8" : "", (long long)B,
                      (long long)I, (long long)O, acc, bad);
            free(D);
        }
    free(X), free(W), free(dY), free(bias), free(dW0), free(XT), free(WT), free(dYT);
}

/* Every transpose combination, padded leading dimensions, alpha and beta. */
static void test_rowmajor(void) {
    const int64_t M = 5, N = 7, K = 3, pad = 2;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            mxp_rm_gemm g = {ta, tb, M, N, K, (ta ? M : K) + pad, (tb ? K : N) + pad, N + pad,
                             2.0f, 0.5f};
            size_t na = (size_t)((ta ? K : M) * g.lda), nb = (size_t)((tb ? N : K) * g.ldb);
            size_t nc = (size_t)(M * g.ldc);
            double *A = rnd(na), *Bm = rnd(nb), *C = rnd(nc), *C0 = test_xmalloc(nc * 8);
            memcpy(C0, C, nc * 8);
            mxp_lt_desc d;
            char why[200];
            CHECK_MSG(mxp_lt_from_rowmajor(&g, &d, why, sizeof why) == 0, "%s", why);
            CHECK(lt_exec(&d, Bm, nb, A, na, NULL, C, nc)); /* cuBLASLt's A is our B */
            size_t bad = 0;
            for (int64_t r = 0; r < M; r++)
                for (int64_t c = 0; c < g.ldc; c++) {
                    double ref = C0[r * g.ldc + c]; /* padding untouched */
                    if (c < N) {
                        double s = 0;
                        for (int64_t p = 0; p < K; p++) {
                            double a = ta ? A[p * g.lda + r] : A[r * g.lda + p];
                            double b = tb ? Bm[c * g.ldb + p] : Bm[p * g.ldb + c];
                            s += a * b;
                        }
                        ref = 2.0 * s + 0.5 * C0[r * g.ldc + c];
                    }
                    if (C[r * g.ldc + c] != ref) bad++;
                }
            CHECK_MSG(bad == 0, "row-major ta %d tb %d: %zu wrong elements", ta, tb, bad);
            free(A), free(Bm), free(C), free(C0);
        }
}

static void test_errors(void) {
    mxp_lt_desc d;
    char why[200];
    CHECK(mxp_lt_linear(MXP_LT_FWD, 0, 3, 4, true, false, &d, why, sizeof why) == 1);
    CHECK(strstr(why, "B=0") && strstr(why, ">= 1"));
    CHECK(mxp_lt_linear((mxp_lt_gemm)7, 2, 3, 4, true, false, &d, why, sizeof why) == 1);
    CHECK(strstr(why, "linear GEMM 7") && strstr(why, "(DW)"));
    mxp_rm_gemm g = {false, false, 4, 5, 6, 5, 5, 5, 1.0f, 0.0f}; /* lda 5 < K 6 */
    CHECK(mxp_lt_from_rowmajor(&g, &d, why, sizeof why) == 1);
    CHECK(strstr(why, "lda=5") && strstr(why, "6"));
    g.lda = 6, g.ldc = 4; /* ldc < N */
    CHECK(mxp_lt_from_rowmajor(&g, &d, why, sizeof why) == 1);
    CHECK(strstr(why, "ldc=4"));
    g.ldc = 5, g.K = 0;
    CHECK(mxp_lt_from_rowmajor(&g, &d, why, sizeof why) == 1);
    CHECK(strstr(why, "K=0"));
    /* bias only on FWD */
    CHECK(mxp_lt_linear(MXP_LT_DX, 2, 3, 4, true, true, &d, why, sizeof why) == 0 && !d.bias &&
          d.beta == 0.0f);
    CHECK(mxp_lt_linear(MXP_LT_FWD, 2, 3, 4, false, false, &d, why, sizeof why) == 0 && !d.bias);
}

/* cuBLASLt FP8: every GEMM dimension (rows, inputs, outputs) a multiple of
 * 16, the failing one named */
static void test_fp8_shapes(void) {
    char why[200];
    CHECK(mxp_lt_fp8_shape_check(16, 32, 256, why, sizeof why) == 0);
    CHECK(mxp_lt_fp8_shape_check(32, 4, 256, why, sizeof why) == 1 && strstr(why, "inputs 4"));
    CHECK(mxp_lt_fp8_shape_check(17, 16, 16, why, sizeof why) == 1 && strstr(why, "rows"));
    CHECK(mxp_lt_fp8_shape_check(16, 16, 10, why, sizeof why) == 1 && strstr(why, "outputs 10"));
    CHECK(mxp_lt_fp8_shape_check(8, 16, 16, why, sizeof why) == 1);
    mxp_lt_desc d;
    CHECK(mxp_lt_linear_fp8(MXP_LT_GEMM_COUNT, 16, 16, 16, false, &d, why, sizeof why) == 1);
    CHECK(mxp_lt_linear_fp8(MXP_LT_FWD, 0, 16, 16, false, &d, why, sizeof why) == 1);
}

int main(void) {
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 1, 9}, {2, 33, 1}, {37, 19, 23},
                                 {1, 257, 3}, {65, 2, 129}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int fp8 = 0; fp8 < 2; fp8++) /* the mapping itself holds at any shape */
            test_linear(shapes[s][0], shapes[s][1], shapes[s][2], fp8);
    test_rowmajor();
    test_fp8_shapes();
    test_errors();
    return test_finish("test_lt_map");
}
