/* backend/cuda/lt_map.c: row-major GEMMs as cuBLASLt column-major matmuls
 * (contracts and the mapping rule in lt_map.h). Pure C: built with or
 * without the CUDA backend; tested by tests/test_lt_map.c.
 */
#include "backend/cuda/lt_map.h"

#include <stdarg.h>
#include <stdio.h>

int mxp_cudab_why(char *why, size_t n, const char *fmt, ...) {
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return 1;
}

int mxp_lt_from_rowmajor(const mxp_rm_gemm *g, mxp_lt_desc *d, char *why, size_t n) {
    if (g->M < 1 || g->N < 1)
        return mxp_cudab_why(why, n, "GEMM shape M=%lld N=%lld: both must be >= 1", (long long)g->M,
                      (long long)g->N);
    if (g->K < 1) return mxp_cudab_why(why, n, "GEMM shape K=%lld: must be >= 1", (long long)g->K);
    int64_t a_row = g->trans_a ? g->M : g->K, b_row = g->trans_b ? g->K : g->N;
    if (g->lda < a_row)
        return mxp_cudab_why(why, n, "GEMM lda=%lld shorter than A's row length %lld",
                      (long long)g->lda, (long long)a_row);
    if (g->ldb < b_row)
        return mxp_cudab_why(why, n, "GEMM ldb=%lld shorter than B's row length %lld",
                      (long long)g->ldb, (long long)b_row);
    if (g->ldc < g->N)
        return mxp_cudab_why(why, n, "GEMM ldc=%lld shorter than C's row length N=%lld",
                      (long long)g->ldc, (long long)g->N);
    mxp_lt_desc r = {0};
    /* C^T = op(B)^T op(A)^T: the caller's B first. A row-major matrix read
     * column-major is its transpose, so op(B)^T needs CUBLAS_OP_T exactly
     * when the caller asked for B^T. */
    r.trans_a = g->trans_b;
    r.trans_b = g->trans_a;
    r.m = g->N;
    r.n = g->M;
    r.k = g->K;
    r.lda = g->ldb;
    r.ldb = g->lda;
    r.ldc = g->ldc;
    r.a_rows = r.trans_a ? r.k : r.m;
    r.a_cols = r.trans_a ? r.m : r.k;
    r.b_rows = r.trans_b ? r.n : r.k;
    r.b_cols = r.trans_b ? r.k : r.n;
    r.alpha = g->alpha;
    r.beta = g->beta;
    r.bias = false;
    r.a_op = MXP_LT_OPERAND_COUNT;
    r.b_op = MXP_LT_OPERAND_COUNT;
    *d = r;
    return 0;
}

int mxp_lt_linear(mxp_lt_gemm which, int64_t B, int64_t I, int64_t O, bool bias,
                  bool accumulate, mxp_lt_desc *d, char *why, size_t n) {
    if (B < 1 || I < 1 || O < 1)
        return mxp_cudab_why(why, n, "linear layer B=%lld I=%lld O=%lld: each must be >= 1",
                      (long long)B, (long long)I, (long long)O);
    mxp_rm_gemm g;
    mxp_lt_operand rm_a, rm_b; /* the row-major A and B buffers */
    switch (which) {
    case MXP_LT_FWD: /* Y[B,O] = X[B,I] W[O,I]^T */
        g = (mxp_rm_gemm){false, true, B, O, I, I, I, O, 1.0f, 0.0f};
        rm_a = MXP_LT_X, rm_b = MXP_LT_W;
        break;
    case MXP_LT_DX: /* dX[B,I] = dY[B,O] W[O,I] */
        g = (mxp_rm_gemm){false, false, B, I, O, O, I, I, 1.0f, 0.0f};
        rm_a = MXP_LT_DY, rm_b = MXP_LT_W;
        break;
    case MXP_LT_DW: /* dW[O,I] = dY[B,O]^T X[B,I] */
        g = (mxp_rm_gemm){true, false, O, I, B, O, I, I, 1.0f, accumulate ? 1.0f : 0.0f};
        rm_a = MXP_LT_DY, rm_b = MXP_LT_X;
        break;
    default:
        return mxp_cudab_why(why, n, "linear GEMM %d: accepted %d (FWD), %d (DX), %d (DW)",
                      (int)which, (int)MXP_LT_FWD, (int)MXP_LT_DX, (int)MXP_LT_DW);
    }
    if (mxp_lt_from_rowmajor(&g, d, why, n)) return 1;
    d->a_op = rm_b; /* swapped: see mxp_lt_from_rowmajor */
    d->b_op = rm_a;
    d->bias = which == MXP_LT_FWD && bias;
    return 0;
}

int mxp_lt_linear_fp8(mxp_lt_gemm which, int64_t B, int64_t I, int64_t O, bool accumulate,
                      mxp_lt_desc *d, char *why, size_t n) {
    if (B < 1 || I < 1 || O < 1)
        return mxp_cudab_why(why, n, "linear layer B=%lld I=%lld O=%lld: each must be >= 1",
                             (long long)B, (long long)I, (long long)O);
    /* row-major C[M,N] = A[M,K] B[N,K]^T: cuBLASLt's A is the caller's B
     * (op T), its B the caller's A (op N): the TN form */
    mxp_rm_gemm g;
    mxp_lt_operand rm_a, rm_b;
    switch (which) {
    case MXP_LT_FWD: /* Y[B,O] = X[B,I] W[O,I]^T */
        g = (mxp_rm_gemm){false, true, B, O, I, I, I, O, 1.0f, 0.0f};
        rm_a = MXP_LT_X, rm_b = MXP_LT_W;
        break;
    case MXP_LT_DX: /* dX[B,I] = dY[B,O] (W^T)[I,O]^T */
        g = (mxp_rm_gemm){false, true, B, I, O, O, O, I, 1.0f, 0.0f};
        rm_a = MXP_LT_DY, rm_b = MXP_LT_WT;
        break;
    case MXP_LT_DW: /* dW[O,I] = (dY^T)[O,B] (X^T)[I,B]^T */
        g = (mxp_rm_gemm){false, true, O, I, B, B, B, I, 1.0f, accumulate ? 1.0f : 0.0f};
        rm_a = MXP_LT_DYT, rm_b = MXP_LT_XT;
        break;
    default:
        return mxp_cudab_why(why, n, "linear GEMM %d: accepted %d (FWD), %d (DX), %d (DW)",
                             (int)which, (int)MXP_LT_FWD, (int)MXP_LT_DX, (int)MXP_LT_DW);
    }
    if (mxp_lt_from_rowmajor(&g, d, why, n)) return 1;
    d->a_op = rm_b;
    d->b_op = rm_a;
    d->bias = false;
    return 0;
}

int mxp_lt_fp8_shape_check(int64_t B, int64_t I, int64_t O, char *why, size_t n) {
    const char *name[3] = {"rows (micro-batch)", "inputs", "outputs"};
    const int64_t v[3] = {B, I, O};
    for (int i = 0; i < 3; i++)
        if (v[i] < 16 || v[i] % 16)
            return mxp_cudab_why(why, n,
                                 "%s %lld is not a multiple of 16 (cuBLASLt FP8 GEMMs need m, "
                                 "n, k multiples of 16)",
                                 name[i], (long long)v[i]);
    return 0;
}

const char *mxp_lt_gemm_name(mxp_lt_gemm which) {
    switch (which) {
    case MXP_LT_FWD: return "FWD";
    case MXP_LT_DX: return "DX";
    case MXP_LT_DW: return "DW";
    default: return "?";
    }
}
