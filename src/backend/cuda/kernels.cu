/* backend/cuda/kernels.cu: the step kernels of the CUDA backend, each a thin
 * grid loop around an element rule of backend/numerics/ (the same function
 * the CPU kernels call, so the two agree bit for bit where the rule is
 * element-wise).
 *
 * Entry points: mxp_cudab_grad_pass, mxp_cudab_decide, mxp_cudab_adamw,
 * mxp_cudab_sgd, mxp_cudab_loss_fold (contracts in cuda_backend.h).
 *   grad pass: a fixed grid of MXP_CUDAB_REDUCE_BLOCKS blocks, each a
 *     grid-stride loop accumulating mxp_gradpass_acc per thread, then a
 *     shared-memory tree merge; a second one-thread kernel merges the block
 *     partials in block order. Counts and absmax equal the CPU's exactly;
 *     sumsq is a double sum in a different order than the CPU's (close, not
 *     bit-identical; the skip decision does not depend on it).
 *   decide: one thread; the loss-scaler rule (mxp_scaler_rule_step) and the
 *     clip coefficient on the device, no host round trip.
 *   optimizers: one thread per element; skip read from the control block,
 *     clip applied to g inline (g * coef: the product the CPU's separate
 *     scale pass forms), SR draws mxp_philox_at(seed, sr_counter + i).
 * The thread bodies live in step_bodies.h (MXP_HD), so the host emulator of
 * the device step (tests/dstep_emu.h) runs the same code.
 * Built with --fmad=false: no contraction of a*b+c, as the CPU's
 * -ffp-contract=off. NOT yet run on a GPU (docs/gpu.md).
 */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/step_bodies.h"

/* The thread's coordinates as data (the bodies take explicit indices). */
__device__ static inline mxp_mk_idx here(void) {
    mxp_mk_idx ix = {gridDim.x, blockDim.x, blockIdx.x, threadIdx.x};
    return ix;
}

__global__ void k_grad_pass(float *g, size_t count, float near_at, const mxp_step_ctl *ctl,
                            mxp_gradpass_acc *partials) {
    __shared__ mxp_gradpass_acc sh[MXP_CUDAB_THREADS];
    const mxp_mk_idx ix = here();
    sh[threadIdx.x] = mxp_sb_grad_thread(&ix, g, count, ctl->inv_scale, near_at);
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) mxp_gradpass_acc_merge(&sh[threadIdx.x], &sh[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void k_grad_merge(const mxp_gradpass_acc *partials, int nblocks, mxp_step_ctl *ctl) {
    mxp_gradpass_acc a = mxp_gradpass_acc_init();
    for (int b = 0; b < nblocks; b++) mxp_gradpass_acc_merge(&a, &partials[b]);
    ctl->stats = a;
}

extern "C" int mxp_cudab_grad_pass(mxp_cudab_ctx *c, float *g, size_t count, float near_at,
                                   char *why, size_t n) {
    k_grad_pass<<<MXP_CUDAB_REDUCE_BLOCKS, MXP_CUDAB_THREADS, 0, c->stream>>>(g, count, near_at,
                                                                          c->ctl, c->partials);
    k_grad_merge<<<1, 1, 0, c->stream>>>(c->partials, MXP_CUDAB_REDUCE_BLOCKS, c->ctl);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "grad pass launch", why, n);
}

/* The trainer's decision on the device (mxp_sb_decide). */
__global__ void k_decide(mxp_step_ctl *ctl, bool extra_inf, uint64_t n_params) {
    mxp_sb_decide(ctl, extra_inf, n_params);
}

extern "C" int mxp_cudab_decide(mxp_cudab_ctx *c, bool extra_inf, uint64_t n_params, char *why,
                                size_t n) {
    k_decide<<<1, 1, 0, c->stream>>>(c->ctl, extra_inf, n_params);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "decide launch", why, n);
}

/* The step's loss over k micro-batches (mxp_sb_loss_fold), one thread. */
__global__ void k_loss_fold(double *loss, const double *slots, int k, int64_t batch) {
    *loss = mxp_sb_loss_fold(slots, k, batch);
}

extern "C" int mxp_cudab_loss_fold(mxp_cudab_ctx *c, double *loss, const double *slots, int k,
                                   int64_t batch, char *why, size_t n) {
    if (k < 1 || batch < k)
        return mxp_cudab_why(why, n, "loss fold: k %d over batch %lld; accepted 1 <= k <= batch",
                             k, (long long)batch);
    k_loss_fold<<<1, 1, 0, c->stream>>>(loss, slots, k, batch);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "loss fold launch", why, n);
}

__global__ void k_adamw(const mxp_step_ctl *ctl, float *master, uint16_t *work, bool bf16,
                        bool sr, const float *g, float *m, float *v, size_t count) {
    const mxp_mk_idx ix = here();
    mxp_sb_adamw_body(&ix, ctl, master, work, bf16, sr, g, m, v, count);
}

__global__ void k_sgd(const mxp_step_ctl *ctl, float *master, uint16_t *work, bool bf16, bool sr,
                      const float *g, float *buf, size_t count) {
    const mxp_mk_idx ix = here();
    mxp_sb_sgd_body(&ix, ctl, master, work, bf16, sr, g, buf, count);
}

/* ceil(count / threads), at least 1, at most 65,535 (mxp_mk_grid). */
static unsigned grid_for(size_t count) {
    return mxp_mk_grid(count, MXP_CUDAB_THREADS, MXP_MK_GRID_CAP);
}

extern "C" int mxp_cudab_adamw(mxp_cudab_ctx *c, float *master, uint16_t *work, bool work_bf16,
                               bool sr, const float *g, float *m, float *v, size_t count,
                               char *why, size_t n) {
    k_adamw<<<grid_for(count), MXP_CUDAB_THREADS, 0, c->stream>>>(c->ctl, master, work, work_bf16,
                                                                  sr, g, m, v, count);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "adamw launch", why, n);
}

extern "C" int mxp_cudab_sgd(mxp_cudab_ctx *c, float *master, uint16_t *work, bool work_bf16,
                             bool sr, const float *g, float *buf, size_t count, char *why,
                             size_t n) {
    k_sgd<<<grid_for(count), MXP_CUDAB_THREADS, 0, c->stream>>>(c->ctl, master, work, work_bf16,
                                                                sr, g, buf, count);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "sgd launch", why, n);
}
