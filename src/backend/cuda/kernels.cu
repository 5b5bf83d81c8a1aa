/* backend/cuda/kernels.cu: the step kernels of the CUDA backend, each a thin
 * grid loop around an element rule of backend/numerics/ (the same function
 * the CPU kernels call, so the two agree bit for bit where the rule is
 * element-wise).
 *
 * Entry points: mxp_cudab_grad_pass, mxp_cudab_decide, mxp_cudab_adamw,
 * mxp_cudab_sgd (contracts in cuda_backend.h).
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
 * Built with --fmad=false: no contraction of a*b+c, as the CPU's
 * -ffp-contract=off. NOT yet run on a GPU (docs/gpu.md).
 */
#include "backend/cuda/cuda_internal.cuh"

__global__ void k_grad_pass(float *g, size_t count, float near_at, const mxp_step_ctl *ctl,
                            mxp_gradpass_acc *partials) {
    __shared__ mxp_gradpass_acc sh[MXP_CUDAB_THREADS];
    const float inv = ctl->inv_scale;
    mxp_gradpass_acc a = mxp_gradpass_acc_init();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        g[i] = mxp_gradpass_elem(g[i], inv, near_at, &a);
    sh[threadIdx.x] = a;
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

/* The trainer's decision (train/trainer.c) on the device: found_inf from the
 * pass and the loss; clip coefficient as PyTorch's clip_grad_norm_
 * (max_norm / (norm + 1e-6), in double, applied only when norm > max); then
 * the scaler rule. */
__global__ void k_decide(mxp_step_ctl *ctl, bool extra_inf, uint64_t n_params) {
    bool found_inf = ctl->stats.nonfinite > 0 || ctl->loss_nonfinite != 0 || extra_inf;
    ctl->skip = found_inf ? 1 : 0;
    double norm = sqrt(ctl->stats.sumsq);
    float clip = ctl->clip_max;
    ctl->clip_coef = (clip > 0.0f && norm > (double)clip) ? (float)((double)clip / (norm + 1e-6))
                                                          : 1.0f;
    if (!found_inf) {
        ctl->opt_steps++;
        ctl->sr_counter += n_params;
    }
    if (ctl->run_scaler_rule) ctl->event = mxp_scaler_rule_step(&ctl->rule, &ctl->scaler, found_inf);
}

extern "C" int mxp_cudab_decide(mxp_cudab_ctx *c, bool extra_inf, uint64_t n_params, char *why,
                                size_t n) {
    k_decide<<<1, 1, 0, c->stream>>>(c->ctl, extra_inf, n_params);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, "decide launch", why, n);
}

/* Load weight i as FP32: the master, else the 16-bit work copy. */
__device__ static inline float load_w(const float *master, const uint16_t *work, bool bf16,
                                      size_t i) {
    if (master) return master[i];
    return bf16 ? mxp_nr_bf16_to_f32(work[i]) : mxp_nr_fp16_to_f32(work[i]);
}

/* Publish the updated weight: master (then RNE recast into work when
 * given), or the work copy with RNE/SR (decide already advanced sr_counter
 * past this step, hence the base sr_counter - n_params). */
__device__ static inline void store_w(float *master, uint16_t *work, bool bf16, bool sr,
                                      const mxp_step_ctl *ctl, uint64_t base, size_t i, float w) {
    if (master) {
        master[i] = w;
        if (work) work[i] = mxp_weight_store_bits(w, bf16, false, 0, 0);
        return;
    }
    work[i] = mxp_weight_store_bits(w, bf16, sr, ctl->seed, base + i);
}

__global__ void k_adamw(const mxp_step_ctl *ctl, float *master, uint16_t *work, bool bf16,
                        bool sr, const float *g, float *m, float *v, size_t count) {
    if (ctl->skip) return;
    const float coef = ctl->clip_coef;
    const uint64_t base = ctl->sr_counter - count;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float gi = coef == 1.0f ? g[i] : g[i] * coef;
        float w = mxp_adamw_elem(load_w(master, work, bf16, i), gi, &m[i], &v[i], &ctl->adamw);
        store_w(master, work, bf16, sr, ctl, base, i, w);
    }
}

__global__ void k_sgd(const mxp_step_ctl *ctl, float *master, uint16_t *work, bool bf16, bool sr,
                      const float *g, float *buf, size_t count) {
    if (ctl->skip) return;
    const float coef = ctl->clip_coef;
    const uint64_t base = ctl->sr_counter - count;
    float unused = 0.0f;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float gi = coef == 1.0f ? g[i] : g[i] * coef;
        float *b = ctl->sgd.use_buf ? &buf[i] : &unused;
        float w = mxp_sgd_elem(load_w(master, work, bf16, i), gi, b, &ctl->sgd);
        store_w(master, work, bf16, sr, ctl, base, i, w);
    }
}

static unsigned grid_for(size_t count) {
    size_t blocks = (count + MXP_CUDAB_THREADS - 1) / MXP_CUDAB_THREADS;
    if (blocks < 1) blocks = 1;
    return blocks > 65535 ? 65535u : (unsigned)blocks;
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
