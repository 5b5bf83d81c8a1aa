/* backend/cuda/cuda_internal.cuh: what device.cu and kernels.cu share (the
 * context struct, launch sizes, the error helper). nvcc only. */
#ifndef MIXPREC_BACKEND_CUDA_INTERNAL_CUH
#define MIXPREC_BACKEND_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdlib.h>

#include "backend/cuda/cuda_backend.h"

enum {
    MXP_CUDAB_THREADS = 256,        /* threads per block of the element kernels */
    MXP_CUDAB_REDUCE_BLOCKS = 1024, /* grad-pass partials (fixed: deterministic merge) */
};
/* Block partials of the MLP reductions: MXP_MK_REDUCE_BLOCKS (1024) of at
 * most 16 bytes (double, mxp_mk_scan). */
#define MXP_CUDAB_MK_PARTIAL_BYTES ((size_t)1024 * 16)
#define MXP_CUDAB_LT_WORKSPACE ((size_t)32 << 20) /* cuBLASLt workspace, 32 MiB */

/* The cuBLASLt calls of lt_gemm.cu, resolved with dlsym from the library
 * lt_open loaded (mxp_cudab_lt_fns_resolve). */
typedef struct mxp_cudab_lt_fns { /* plain C: bench/bench_cuda_step.c includes this */
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                               const void *, size_t);
    cublasStatus_t (*desc_get)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, void *,
                               size_t, size_t *);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t,
                                    int64_t);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*layout_get)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, void *,
                                 size_t, size_t *);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                               const void *, size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                             cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t,
                             const void *, const void *, cublasLtMatrixLayout_t, void *,
                             cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *,
                             size_t, cudaStream_t);
} mxp_cudab_lt_fns;

/* Fill f from an open libcublasLt handle; 1 with the missing symbol in why. */
int mxp_cudab_lt_fns_resolve(void *lib, mxp_cudab_lt_fns *f, char *why, size_t n);

struct mxp_cudab_ctx {
    int device;
    cudaStream_t stream;
    void *lt_lib; /* dlopen handle of libcublasLt (lt_open in device.cu) */
    cublasStatus_t (*lt_create)(cublasLtHandle_t *);
    cublasStatus_t (*lt_destroy)(cublasLtHandle_t);
    cublasLtHandle_t lt;
    mxp_cudab_lt_fns lt_fns;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    mxp_step_ctl *ctl;          /* device: the step control block, then the aux area
                                 * (MXP_CUDAB_AUX_OFF, MXP_CUDAB_AUX_CAP bytes) */
    mxp_gradpass_acc *partials; /* device: [MXP_CUDAB_REDUCE_BLOCKS] */
    void *mk_partials;          /* device: the MLP kernels' block partials
                                 * (mlp_kernels.cu), MXP_CUDAB_MK_PARTIAL_BYTES */
    int64_t d2h_copies;
};

/* Write "what: <CUDA error text>" into why; returns 1. */
int mxp_cudab_fail(cudaError_t e, const char *what, char *why, size_t n);

#endif /* MIXPREC_BACKEND_CUDA_INTERNAL_CUH */
