/* backend/cuda/fp8_kernels.cu: the FP8 kernels of the device step
 * (backend/cuda/dstep_fp8.c through the ops table): the scaled quantise
 * with the tensor's amax, and the delayed-scaling update.
 *
 * Entry points (contracts in cuda_backend.h): mxp_cudab_f8_quant,
 * mxp_cudab_f8_update.
 * Quantise: grid-stride over rows x cols on mxp_mk_grid(n, 256, 1024)
 * blocks; each element's code is __nv_cvt_float_to_fp8(x * scale,
 * __NV_SATFINITE, E4M3/E5M2): round to nearest even, |v| beyond the
 * largest finite and +-Inf to +-max, NaN to NaN, the CPU's fp8_quantize
 * rule (kernels/generic/fp8.c) in hardware; the product x * scale is one
 * FP32 multiply on both. Written to q [rows, cols] and/or its transpose qt
 * [cols, rows] (the TN operands of the FP8 GEMMs). The amax: per thread
 * and per block merged with mxp_f8_amax_merge (NaN over Inf over the
 * larger finite: order-free), block partials in c->mk_partials, merged in
 * block order by one thread into the slot. Update: one block, a thread per
 * slot (strided), mxp_f8_update_slot (backend/numerics/fp8_scale.h, the
 * CPU's rule), then thread 0 advances pos after a barrier.
 * Built with --fmad=false. NOT yet run on a GPU (docs/gpu.md).
 */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/dstep.h"
#include "backend/numerics/fp8_scale.h"
#include "backend/numerics/mlp.h"

#include <cuda_fp8.h>

static_assert(MXP_MK_REDUCE_BLOCKS * sizeof(float) <= MXP_CUDAB_MK_PARTIAL_BYTES,
              "amax partials fit c->mk_partials");

__global__ void k_f8_quant(int e4, uint8_t *q, uint8_t *qt, const float *src, size_t rows,
                           size_t cols, const float *scale, float *partials) {
    __shared__ float sh[MXP_MK_THREADS];
    const float s = *scale;
    const size_t count = rows * cols;
    const __nv_fp8_interpretation_t f = e4 ? __NV_E4M3 : __NV_E5M2;
    float a = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = src[i];
        a = mxp_f8_amax_merge(a, fabsf(x));
        const uint8_t code = (uint8_t)__nv_cvt_float_to_fp8(x * s, __NV_SATFINITE, f);
        if (q) q[i] = code;
        if (qt) qt[(i % cols) * rows + i / cols] = code;
    }
    sh[threadIdx.x] = a;
    __syncthreads();
    for (unsigned st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st)
            sh[threadIdx.x] = mxp_f8_amax_merge(sh[threadIdx.x], sh[threadIdx.x + st]);
        __syncthreads();
    }
    if (threadIdx.x == 0 && partials) partials[blockIdx.x] = sh[0];
}

__global__ void k_f8_amax_merge(const float *partials, unsigned nblocks, float *amax) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    float a = 0.0f;
    for (unsigned b = 0; b < nblocks; b++) a = mxp_f8_amax_merge(a, partials[b]);
    *amax = a;
}

__global__ void k_f8_update(mxp_ds_f8_state *st, int n, int algo, int margin) {
    float *v = (float *)(void *)((unsigned char *)st + sizeof(mxp_ds_f8_state));
    const int H = st->H, pos = st->pos;
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x)
        mxp_f8_update_slot(v + 3 * (size_t)n + (size_t)i * (size_t)H, H, pos, &v[2 * n + i],
                           &v[i], &v[n + i], algo, i % 3 == 2 ? 57344.0 : 448.0, margin);
    __syncthreads();
    if (threadIdx.x == 0) {
        st->pos = (pos + 1) % H;
        st->passes++;
    }
}

static int f8_launched(const char *what, char *why, size_t n) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, what, why, n);
}

extern "C" int mxp_cudab_f8_quant(mxp_cudab_ctx *c, mxp_dtype fmt, uint8_t *q, uint8_t *qt,
                                  const float *src, int64_t rows, int64_t cols,
                                  const float *scale, float *amax, char *why, size_t n) {
    if (fmt != MXP_DTYPE_F8_E4M3 && fmt != MXP_DTYPE_F8_E5M2)
        return mxp_cudab_why(why, n, "fp8 quantise: format %d; accepted F8_E4M3, F8_E5M2",
                             (int)fmt);
    if (rows < 1 || cols < 1 || (uint64_t)rows > (uint64_t)SIZE_MAX / (uint64_t)cols)
        return mxp_cudab_why(why, n, "fp8 quantise: shape %lld x %lld; accepted >= 1, product "
                                     "fits size_t",
                             (long long)rows, (long long)cols);
    const size_t count = (size_t)rows * (size_t)cols;
    const unsigned grid = mxp_mk_grid(count, MXP_MK_THREADS, MXP_MK_REDUCE_BLOCKS);
    float *partials = amax ? (float *)c->mk_partials : NULL;
    k_f8_quant<<<grid, MXP_MK_THREADS, 0, c->stream>>>(fmt == MXP_DTYPE_F8_E4M3, q, qt, src,
                                                       (size_t)rows, (size_t)cols, scale,
                                                       partials);
    if (f8_launched("fp8 quantise launch", why, n)) return 1;
    if (!amax) return 0;
    k_f8_amax_merge<<<1, 1, 0, c->stream>>>(partials, grid, amax);
    return f8_launched("fp8 amax merge launch", why, n);
}

extern "C" int mxp_cudab_f8_update(mxp_cudab_ctx *c, void *st, int n_slots, int algo,
                                   int margin, char *why, size_t n) {
    if (n_slots < 0 || algo < 0 || algo > 1 || margin < 0 || margin > 64)
        return mxp_cudab_why(why, n, "fp8 update: %d slots, algo %d, margin %d; accepted >= 0, "
                                     "0..1, 0..64",
                             n_slots, algo, margin);
    k_f8_update<<<1, MXP_MK_THREADS, 0, c->stream>>>((mxp_ds_f8_state *)st, n_slots, algo,
                                                     margin);
    return f8_launched("fp8 update launch", why, n);
}
