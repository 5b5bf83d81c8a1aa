/* backend/cuda/graph.cu: CUDA Graphs and page-locked host staging for the
 * device step (dstep.h's optional ops; contracts in cuda_backend.h).
 *
 * Entry points: mxp_cudab_host_alloc/_free (cudaMallocHost: the step's
 * uploads and its report copy are truly asynchronous from it),
 * mxp_cudab_graph_begin (stream capture, thread-local mode),
 * mxp_cudab_graph_end (end the capture; update the executable graph in
 * place when cudaGraphExecUpdate allows, else instantiate a new one),
 * mxp_cudab_graph_launch, mxp_cudab_graph_destroy.
 * What a capture records: every kernel, memset and cuBLASLt matmul the
 * context's stream sees in between (none of them synchronises or
 * allocates: kernels.cu, mlp_kernels.cu, lt_gemm.cu). NOT yet run on a GPU
 * (docs/gpu.md): tests/test_cuda_dstep.c compares graphed with eager there.
 */
#include "backend/cuda/cuda_internal.cuh"

extern "C" int mxp_cudab_host_alloc(mxp_cudab_ctx *c, size_t bytes, void **out, char *why,
                                    size_t n) {
    (void)c;
    cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *out = NULL;
        return mxp_cudab_fail(e, "cudaMallocHost", why, n);
    }
    return 0;
}

extern "C" void mxp_cudab_host_free(mxp_cudab_ctx *c, void *p) {
    (void)c;
    if (p) cudaFreeHost(p);
}

extern "C" int mxp_cudab_graph_begin(mxp_cudab_ctx *c, char *why, size_t n) {
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "cudaStreamBeginCapture", why, n);
}

extern "C" int mxp_cudab_graph_end(mxp_cudab_ctx *c, void **graph, char *why, size_t n) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess) return mxp_cudab_fail(e, "cudaStreamEndCapture", why, n);
    cudaGraphExec_t x = (cudaGraphExec_t)*graph;
    if (x) { /* same topology (a new loss scale): new parameters in place */
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(x, g, &info) == cudaSuccess) {
            cudaGraphDestroy(g);
            return 0;
        }
        (void)cudaGetLastError(); /* the failed update's error is not sticky */
        cudaGraphExecDestroy(x);
        *graph = NULL;
    }
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return mxp_cudab_fail(e, "cudaGraphInstantiate", why, n);
    *graph = (void *)x;
    return 0;
}

extern "C" int mxp_cudab_graph_launch(mxp_cudab_ctx *c, void *graph, char *why, size_t n) {
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, c->stream);
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "cudaGraphLaunch", why, n);
}

extern "C" void mxp_cudab_graph_destroy(mxp_cudab_ctx *c, void *graph) {
    (void)c;
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
