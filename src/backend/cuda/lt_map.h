/* backend/cuda/lt_map.h: the linear layer's three GEMMs, row-major mxp
 * tensors, described as cuBLASLt (column-major) matmuls. Pure C, built in
 * every configuration (lt_map.c), so the mapping is host-tested
 * (tests/test_lt_map.c: a naive column-major executor of the description
 * against the row-major definitions) and the CUDA code (lt_gemm.cu) only
 * turns a description into descriptors and layouts.
 *
 * Entry points: mxp_lt_from_rowmajor (any row-major GEMM), mxp_lt_linear
 * (the ONE function that builds the layer's descriptions), mxp_lt_op_name.
 *
 * The rule: a row-major matrix M[r, c] with row stride ld is, read
 * column-major, M^T (c x r, leading dimension ld). So row-major
 * C[M,N] = op(A)[M,K] op(B)[K,N] is column-major C^T = op(B)^T op(A)^T:
 * cuBLASLt's A is the caller's B (transposed iff trans_b), its B the
 * caller's A (iff trans_a), m = N, n = M, k = K, and the leading dimensions
 * are the row strides unchanged.
 * The linear layer (Y[B,O] = X[B,I] W[O,I]^T + b):
 *   FWD: D = Y^T (O x B):  A = W  (op T, lda I), B = X  (op N, ldb I),
 *        m O, n B, k I, ldc O; bias epilogue over the m = O rows of D;
 *   DX:  D = dX^T (I x B): A = W  (op N, lda I), B = dY (op N, ldb O),
 *        m I, n B, k O, ldc I; beta 0 ("=");
 *   DW:  D = dW^T (I x O): A = X  (op N, lda I), B = dY (op T, ldb O),
 *        m I, n O, k B, ldc I; beta 1 when accumulating ("+="), else 0.
 */
#ifndef MIXPREC_BACKEND_CUDA_LT_MAP_H
#define MIXPREC_BACKEND_CUDA_LT_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The operands a linear-layer GEMM reads (which buffer is A/B). */
typedef enum mxp_lt_operand {
    MXP_LT_X,  /* the layer input, row-major [B, I] */
    MXP_LT_W,  /* the weight, row-major [O, I] */
    MXP_LT_DY, /* the output gradient, row-major [B, O] */
    /* FP8 (mxp_lt_linear_fp8): the transposed copies, row-major */
    MXP_LT_XT,  /* X^T [I, B] */
    MXP_LT_WT,  /* W^T [I, O] */
    MXP_LT_DYT, /* dY^T [O, B] */
    MXP_LT_OPERAND_COUNT
} mxp_lt_operand;

typedef enum mxp_lt_gemm {
    MXP_LT_FWD, /* Y = X W^T (+ b) */
    MXP_LT_DX,  /* dX = dY W */
    MXP_LT_DW,  /* dW (+)= dY^T X */
    MXP_LT_GEMM_COUNT
} mxp_lt_gemm;

/* A row-major GEMM, mxp_gemm_args' vocabulary: C[M,N] = alpha op(A) op(B) +
 * beta C; A stored M x K (lda >= K) or, trans_a, K x M (lda >= M); B
 * K x N (ldb >= N) or, trans_b, N x K (ldb >= K); ldc >= N. */
typedef struct mxp_rm_gemm {
    bool trans_a, trans_b;
    int64_t M, N, K;
    int64_t lda, ldb, ldc;
    float alpha, beta;
} mxp_rm_gemm;

/* A cuBLASLt matmul D = alpha op(A) op(B) + beta C (+ bias), column-major,
 * C and D the same buffer and layout. */
typedef struct mxp_lt_desc {
    bool trans_a, trans_b;    /* CUBLASLT_MATMUL_DESC_TRANSA/B: CUBLAS_OP_T when true */
    int64_t m, n, k;          /* D is m x n, the inner dimension k */
    int64_t lda, ldb, ldc;    /* column-major leading dimensions (ldd = ldc) */
    /* cublasLtMatrixLayoutCreate(rows, cols, ld) of the stored matrices
     * (before op): A a_rows x a_cols, B b_rows x b_cols, C/D m x n */
    int64_t a_rows, a_cols, b_rows, b_cols;
    float alpha, beta;
    bool bias;                /* CUBLASLT_EPILOGUE_BIAS: D[i, j] += bias[i], i < m */
    mxp_lt_operand a_op, b_op; /* mxp_lt_linear only: which buffer is A, B */
} mxp_lt_desc;

/* The column-major description of a row-major GEMM (a_op/b_op unset, bias
 * false). 0, or 1 with what was wrong in why (dimensions < 1, leading
 * dimensions shorter than their rows). */
int mxp_lt_from_rowmajor(const mxp_rm_gemm *g, mxp_lt_desc *d, char *why, size_t n);
/* The CUDA side's error convention in one place: format into why[n] (when
 * given) and return 1 (used by lt_map.c, lt_gemm.cu, mlp_kernels.cu). */
int mxp_cudab_why(char *why, size_t n, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* GEMM `which` of the linear layer of batch B, I inputs, O outputs (row-major
 * contiguous tensors). bias: FWD adds b through the epilogue (ignored by
 * DX and DW). accumulate: DW adds into dW (beta 1), else overwrites; DX
 * always overwrites. 0, or 1 with the reason in why (which out of range,
 * B/I/O < 1). */
int mxp_lt_linear(mxp_lt_gemm which, int64_t B, int64_t I, int64_t O, bool bias,
                  bool accumulate, mxp_lt_desc *d, char *why, size_t n);

/* The FP8 form of mxp_lt_linear: cuBLASLt's FP8 kernels take only the
 * "TN" layout (A transposed, B not), i.e. both operands stored with the
 * inner dimension k contiguous, so the GEMMs read transposed copies where
 * the tensor is not (as Transformer Engine's cast-transpose does):
 *   FWD: A = W (op T, lda I),  B = X   (op N, ldb I), m O, n B, k I;
 *   DX:  A = WT (op T, lda O), B = dY  (op N, ldb O), m I, n B, k O;
 *   DW:  A = XT (op T, lda B), B = dYT (op N, ldb B), m I, n O, k B.
 * No bias epilogue (cuBLASLt's FP8 kernels with an FP32 output take a
 * BF16 bias only; the FP32 bias is added after). The dequantisation
 * (alpha's scale_inv factors) comes from the A/B scale pointers at run
 * time, so alpha stays 1. 0, or 1 with the reason. */
int mxp_lt_linear_fp8(mxp_lt_gemm which, int64_t B, int64_t I, int64_t O, bool accumulate,
                      mxp_lt_desc *d, char *why, size_t n);
/* 0 when cuBLASLt can run the linear layer of B rows, I inputs, O outputs
 * in FP8 (every GEMM dimension m, n, k: B, I and O, a multiple of 16; so
 * every leading dimension is a multiple of 16 bytes), else 1 with the
 * first dimension that is not in why. */
int mxp_lt_fp8_shape_check(int64_t B, int64_t I, int64_t O, char *why, size_t n);

/* "FWD", "DX", "DW" ("?" out of range). */
const char *mxp_lt_gemm_name(mxp_lt_gemm which);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_BACKEND_CUDA_LT_MAP_H */
