/* backend/cuda/mlp_kernels.cu: the element and row kernels of an MLP step
 * on the device, each a __global__ shell around the MXP_HD bodies of
 * backend/numerics/mlp.h and mlp_rows.h, with __syncthreads() between the
 * phases. tests/cuda_emu.h runs the same bodies over the same geometry on
 * the host (tests/test_mlp_emu.c); keep the two launchers in step.
 *
 * Entry points (contracts in cuda_backend.h): mxp_cudab_bias_add,
 * mxp_cudab_bias_grad, mxp_cudab_act_fwd, mxp_cudab_act_bwd,
 * mxp_cudab_layernorm_fwd, mxp_cudab_layernorm_bwd, mxp_cudab_mse,
 * mxp_cudab_softmax_xent, mxp_cudab_store_scan, mxp_cudab_widen (body in
 * step_bodies.h).
 * Geometry: MXP_MK_THREADS (256) threads a block; element kernels grid-stride
 * on mxp_mk_grid(n, 256, 65535) blocks; row kernels one block per row on
 * mxp_mk_grid(B, 1, cap) blocks (cap 65535, or 1024 for the loss with block
 * partials); MSE and the store+scan on a fixed 1024 blocks. Reductions: a
 * shared-memory tree per block, then one thread merges the block partials
 * (c->mk_partials) in block order into the result slot: deterministic,
 * independent of block scheduling. Exactness on the device: see
 * backend/numerics/mlp.h (GELU, tanh and the softmax use CUDA's erff,
 * expf, logf, tanhf: close to the CPU, not its bits); tests/test_cuda_ptx.sh
 * allows libdevice's fma/ex2.approx only in those kernels.
 * Built with --fmad=false. NOT yet run on a GPU (docs/gpu.md).
 */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/lt_map.h"
#include "backend/cuda/step_bodies.h"
#include "backend/numerics/mlp_rows.h"

#include <stdarg.h>
#include <stdio.h>

static_assert((MXP_MK_THREADS & (MXP_MK_THREADS - 1)) == 0, "tree merges need 2^k threads");
static_assert(MXP_MK_REDUCE_BLOCKS * sizeof(double) <= MXP_CUDAB_MK_PARTIAL_BYTES &&
                  MXP_MK_REDUCE_BLOCKS * sizeof(mxp_mk_scan) <= MXP_CUDAB_MK_PARTIAL_BYTES,
              "block partials fit c->mk_partials");

#define MK_IX mxp_mk_idx ix = {gridDim.x, blockDim.x, blockIdx.x, threadIdx.x}
/* A block tree over sh: every step followed by a barrier. */
#define MK_TREE(fn, sh)                                                                   \
    for (unsigned s_ = blockDim.x / 2; s_ > 0; s_ >>= 1) {                                \
        fn(&ix, (sh), s_);                                                                \
        __syncthreads();                                                                  \
    }

/* ---- element kernels ------------------------------------------------------ */

__global__ void k_mk_bias_add(float *y, const float *bias, size_t n, size_t C) {
    MK_IX;
    mxp_mk_bias_add_body(&ix, y, bias, n, C);
}

__global__ void k_mk_bias_grad(float *dbias, const float *dy, size_t B, size_t C) {
    MK_IX;
    mxp_mk_bias_grad_body(&ix, dbias, dy, B, C);
}

__global__ void k_mk_widen(int fmt, float *out, const void *src, size_t n) {
    MK_IX;
    mxp_sb_widen_body(&ix, fmt, out, src, n);
}

/* Exact kernels (ReLU) and libdevice ones (GELU, tanh) are separate entries
 * so the PTX check can tell them apart by name. */
__global__ void k_mk_relu_fwd(float *y, const float *x, size_t n) {
    MK_IX;
    mxp_mk_act_fwd_body(&ix, MXP_MK_ACT_RELU, y, x, n);
}
__global__ void k_mk_relu_bwd(float *dx, const float *dy, const float *s, size_t n) {
    MK_IX;
    mxp_mk_act_bwd_body(&ix, MXP_MK_ACT_RELU, dx, dy, s, n);
}
__global__ void k_mk_libm_gelu_fwd(float *y, const float *x, size_t n) {
    MK_IX;
    mxp_mk_act_fwd_body(&ix, MXP_MK_ACT_GELU, y, x, n);
}
__global__ void k_mk_libm_gelu_bwd(float *dx, const float *dy, const float *s, size_t n) {
    MK_IX;
    mxp_mk_act_bwd_body(&ix, MXP_MK_ACT_GELU, dx, dy, s, n);
}
__global__ void k_mk_libm_tanh_fwd(float *y, const float *x, size_t n) {
    MK_IX;
    mxp_mk_act_fwd_body(&ix, MXP_MK_ACT_TANH, y, x, n);
}
__global__ void k_mk_tanh_bwd(float *dx, const float *dy, const float *s, size_t n) {
    MK_IX;
    mxp_mk_act_bwd_body(&ix, MXP_MK_ACT_TANH, dx, dy, s, n);
}

/* ---- layernorm ------------------------------------------------------------ */

__global__ void k_mk_ln_fwd(float *y, float *mean, float *rstd, const float *x,
                            const float *gamma, const float *beta, size_t B, size_t C,
                            float eps) {
    __shared__ float sh[MXP_MK_THREADS];
    MK_IX;
    for (size_t r = blockIdx.x; r < B; r += gridDim.x) {
        const float *xr = x + r * C;
        sh[threadIdx.x] = mxp_mk_ln_sum(&ix, xr, C);
        __syncthreads();
        MK_TREE(mxp_mk_tree_f32, sh);
        float mu = mxp_mk_ln_mean(sh[0], C);
        __syncthreads(); /* everyone has read sh[0] */
        sh[threadIdx.x] = mxp_mk_ln_dev(&ix, xr, C, mu);
        __syncthreads();
        MK_TREE(mxp_mk_tree_f32, sh);
        float rs = mxp_mk_ln_rstd(sh[0], C, eps);
        __syncthreads(); /* sh is the next row's; y may alias x */
        mxp_mk_ln_out(&ix, y + r * C, xr, gamma, beta, C, mu, rs, mean, rstd, r);
    }
}

__global__ void k_mk_ln_bwd_param(float *dgamma, float *dbeta, const float *dy, const float *x,
                                  const float *mean, const float *rstd, size_t B, size_t C) {
    MK_IX;
    mxp_mk_ln_bwd_param_body(&ix, dgamma, dbeta, dy, x, mean, rstd, B, C);
}

__global__ void k_mk_ln_bwd_dx(float *dx, const float *dy, const float *x, const float *mean,
                               const float *rstd, const float *gamma, size_t B, size_t C) {
    __shared__ float sg[MXP_MK_THREADS], sgx[MXP_MK_THREADS];
    MK_IX;
    for (size_t r = blockIdx.x; r < B; r += gridDim.x) {
        mxp_mk_ln_bwd_sums(&ix, dy + r * C, x + r * C, gamma, C, mean[r], rstd[r],
                           &sg[threadIdx.x], &sgx[threadIdx.x]);
        __syncthreads();
        MK_TREE(mxp_mk_tree_f32, sg);
        MK_TREE(mxp_mk_tree_f32, sgx);
        float mg = mxp_mk_ln_mean(sg[0], C), mgx = mxp_mk_ln_mean(sgx[0], C);
        __syncthreads(); /* read before the next row overwrites; dx may alias dy */
        mxp_mk_ln_bwd_dx(&ix, dx + r * C, dy + r * C, x + r * C, gamma, C, mean[r], rstd[r],
                         mg, mgx);
    }
}

/* ---- losses ----------------------------------------------------------------- */

__global__ void k_mk_mse(float *dpred, const float *pred, const float *target, size_t n,
                         float k, double *partials) {
    __shared__ double sh[MXP_MK_THREADS];
    MK_IX;
    sh[threadIdx.x] = mxp_mk_mse_thread(&ix, dpred, pred, target, n, k);
    __syncthreads();
    MK_TREE(mxp_mk_tree_f64, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

/* One thread: the block partials in block order, / count, into the slot. */
__global__ void k_mk_loss_merge(const double *partials, unsigned nblocks, size_t count,
                                double *loss) {
    mxp_mk_mse_merge(partials, nblocks, count, loss);
}

__global__ void k_mk_libm_xent(float *dlogits, const float *logits, const int32_t *labels,
                               size_t B, size_t C, float k, double *partials) {
    __shared__ float sh[MXP_MK_THREADS];
    MK_IX;
    double acc = 0.0; /* thread 0's sum of its rows' losses */
    for (size_t r = blockIdx.x; r < B; r += gridDim.x) {
        const float *xr = logits + r * C;
        sh[threadIdx.x] = mxp_mk_xent_max(&ix, xr, C);
        __syncthreads();
        MK_TREE(mxp_mk_tree_max, sh);
        float mx = sh[0];
        __syncthreads();
        sh[threadIdx.x] = mxp_mk_xent_sum(&ix, xr, C, mx);
        __syncthreads();
        MK_TREE(mxp_mk_tree_f32, sh);
        float s = sh[0];
        if (threadIdx.x == 0) acc += mxp_mk_xent_row_loss(xr, C, labels[r], mx, s);
        __syncthreads(); /* x[label] and sh[0] read before dlogits (may alias) and the next row */
        if (dlogits) mxp_mk_xent_out(&ix, dlogits + r * C, xr, C, labels[r], mx, s, k);
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

/* ---- store + scan ----------------------------------------------------------- */

__global__ void k_mk_store_scan(int fmt, void *out, const float *src, size_t n,
                                mxp_mk_scan *partials) {
    __shared__ mxp_mk_scan sh[MXP_MK_THREADS];
    MK_IX;
    sh[threadIdx.x] = mxp_mk_store_scan_thread(&ix, fmt, out, src, n);
    __syncthreads();
    MK_TREE(mxp_mk_tree_scan, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = sh[0];
}

__global__ void k_mk_scan_merge(const mxp_mk_scan *partials, unsigned nblocks, float *amax,
                                int64_t *nonfinite) {
    mxp_mk_scan_merge_all(partials, nblocks, amax, nonfinite);
}

/* ---- C entry points --------------------------------------------------------- */

static int mk_launched(const char *what, char *why, size_t n) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : mxp_cudab_fail(e, what, why, n);
}

/* B, C >= 0 and B * C fits size_t; *count = B * C. */
static int mk_shape(const char *what, int64_t B, int64_t C, size_t *count, char *why, size_t n) {
    if (B < 0 || C < 0)
        return mxp_cudab_why(why, n, "%s: shape B=%lld C=%lld: both must be >= 0", what, (long long)B,
                      (long long)C);
    if (C != 0 && (uint64_t)B > (uint64_t)SIZE_MAX / (uint64_t)C)
        return mxp_cudab_why(why, n, "%s: B*C = %lld*%lld overflows size_t", what, (long long)B,
                      (long long)C);
    *count = (size_t)B * (size_t)C;
    return 0;
}

#define MK_GRID(count) mxp_mk_grid((count), MXP_MK_THREADS, MXP_MK_GRID_CAP)

extern "C" int mxp_cudab_bias_add(mxp_cudab_ctx *c, float *y, const float *bias, int64_t B,
                                  int64_t C, char *why, size_t n) {
    size_t count = 0;
    if (mk_shape("bias add", B, C, &count, why, n)) return 1;
    if (!bias || count == 0) return 0;
    k_mk_bias_add<<<MK_GRID(count), MXP_MK_THREADS, 0, c->stream>>>(y, bias, count, (size_t)C);
    return mk_launched("bias add launch", why, n);
}

extern "C" int mxp_cudab_bias_grad(mxp_cudab_ctx *c, float *dbias, const float *dy, int64_t B,
                                   int64_t C, char *why, size_t n) {
    size_t count = 0;
    if (mk_shape("bias grad", B, C, &count, why, n)) return 1;
    if (C == 0) return 0;
    k_mk_bias_grad<<<MK_GRID((size_t)C), MXP_MK_THREADS, 0, c->stream>>>(dbias, dy, (size_t)B,
                                                                         (size_t)C);
    return mk_launched("bias grad launch", why, n);
}

extern "C" int mxp_cudab_act_fwd(mxp_cudab_ctx *c, int act, float *y, const float *x,
                                 size_t count, char *why, size_t n) {
    if (act < MXP_MK_ACT_RELU || act > MXP_MK_ACT_TANH)
        return mxp_cudab_why(why, n, "activation forward: act %d: accepted 1 (relu), 2 (gelu), 3 (tanh)",
                      act);
    if (count == 0) return 0;
    unsigned g = MK_GRID(count);
    if (act == MXP_MK_ACT_RELU)
        k_mk_relu_fwd<<<g, MXP_MK_THREADS, 0, c->stream>>>(y, x, count);
    else if (act == MXP_MK_ACT_GELU)
        k_mk_libm_gelu_fwd<<<g, MXP_MK_THREADS, 0, c->stream>>>(y, x, count);
    else
        k_mk_libm_tanh_fwd<<<g, MXP_MK_THREADS, 0, c->stream>>>(y, x, count);
    return mk_launched("activation forward launch", why, n);
}

extern "C" int mxp_cudab_act_bwd(mxp_cudab_ctx *c, int act, float *dx, const float *dy,
                                 const float *s, size_t count, char *why, size_t n) {
    if (act < MXP_MK_ACT_RELU || act > MXP_MK_ACT_TANH)
        return mxp_cudab_why(why, n,
                      "activation backward: act %d: accepted 1 (relu), 2 (gelu), 3 (tanh)", act);
    if (count == 0) return 0;
    unsigned g = MK_GRID(count);
    if (act == MXP_MK_ACT_RELU)
        k_mk_relu_bwd<<<g, MXP_MK_THREADS, 0, c->stream>>>(dx, dy, s, count);
    else if (act == MXP_MK_ACT_GELU)
        k_mk_libm_gelu_bwd<<<g, MXP_MK_THREADS, 0, c->stream>>>(dx, dy, s, count);
    else
        k_mk_tanh_bwd<<<g, MXP_MK_THREADS, 0, c->stream>>>(dx, dy, s, count);
    return mk_launched("activation backward launch", why, n);
}

extern "C" int mxp_cudab_layernorm_fwd(mxp_cudab_ctx *c, float *y, float *mean, float *rstd,
                                       const float *x, const float *gamma, const float *beta,
                                       int64_t B, int64_t C, float eps, char *why, size_t n) {
    size_t count = 0;
    if (mk_shape("layernorm forward", B, C, &count, why, n)) return 1;
    if (!(eps >= 0.0f) || eps == INFINITY)
        return mxp_cudab_why(why, n, "layernorm forward: eps %g: accepted a finite value >= 0",
                      (double)eps);
    if (count == 0) return 0;
    k_mk_ln_fwd<<<mxp_mk_grid((size_t)B, 1, MXP_MK_GRID_CAP), MXP_MK_THREADS, 0, c->stream>>>(
        y, mean, rstd, x, gamma, beta, (size_t)B, (size_t)C, eps);
    return mk_launched("layernorm forward launch", why, n);
}

extern "C" int mxp_cudab_layernorm_bwd(mxp_cudab_ctx *c, float *dx, float *dgamma, float *dbeta,
                                       const float *dy, const float *x, const float *mean,
                                       const float *rstd, const float *gamma, int64_t B,
                                       int64_t C, char *why, size_t n) {
    size_t count = 0;
    if (mk_shape("layernorm backward", B, C, &count, why, n)) return 1;
    if (count == 0) return 0;
    if (dgamma || dbeta) /* first: dx may alias dy */
        k_mk_ln_bwd_param<<<MK_GRID((size_t)C), MXP_MK_THREADS, 0, c->stream>>>(
            dgamma, dbeta, dy, x, mean, rstd, (size_t)B, (size_t)C);
    k_mk_ln_bwd_dx<<<mxp_mk_grid((size_t)B, 1, MXP_MK_GRID_CAP), MXP_MK_THREADS, 0,
                     c->stream>>>(dx, dy, x, mean, rstd, gamma, (size_t)B, (size_t)C);
    return mk_launched("layernorm backward launch", why, n);
}

extern "C" int mxp_cudab_mse(mxp_cudab_ctx *c, float *dpred, const float *pred,
                             const float *target, int64_t B, int64_t C, float grad_scale,
                             double *loss, char *why, size_t n) {
    size_t count = 0;
    if (mk_shape("mse", B, C, &count, why, n)) return 1;
    double *partials = (double *)c->mk_partials;
    unsigned g = count ? MXP_MK_REDUCE_BLOCKS : 0;
    if (count)
        k_mk_mse<<<g, MXP_MK_THREADS, 0, c->stream>>>(dpred, pred, target, count,
                                                      mxp_mk_mse_k(grad_scale, count), partials);
    k_mk_loss_merge<<<1, 1, 0, c->stream>>>(partials, g, count, loss);
    return mk_launched("mse launch", why, n);
}

extern "C" int mxp_cudab_softmax_xent(mxp_cudab_ctx *c, float *dlogits, const float *logits,
                                      const int32_t *labels, int64_t B, int64_t C,
                                      float grad_scale, double *loss, char *why, size_t n) {
    size_t count = 0;
    if (mk_shape("softmax cross-entropy", B, C, &count, why, n)) return 1;
    double *partials = (double *)c->mk_partials;
    unsigned g = count ? mxp_mk_grid((size_t)B, 1, MXP_MK_REDUCE_BLOCKS) : 0;
    if (count)
        k_mk_libm_xent<<<g, MXP_MK_THREADS, 0, c->stream>>>(
            dlogits, logits, labels, (size_t)B, (size_t)C, mxp_mk_xent_k(grad_scale, (size_t)B),
            partials);
    k_mk_loss_merge<<<1, 1, 0, c->stream>>>(partials, g, count ? (size_t)B : 0, loss);
    return mk_launched("softmax cross-entropy launch", why, n);
}

extern "C" int mxp_cudab_store_scan(mxp_cudab_ctx *c, mxp_dtype t, void *out, const float *src,
                                    size_t count, float *amax, int64_t *nonfinite, char *why,
                                    size_t n) {
    int fmt = t == MXP_DTYPE_F32    ? MXP_MK_STORE_F32
              : t == MXP_DTYPE_BF16 ? MXP_MK_STORE_BF16
              : t == MXP_DTYPE_F16  ? MXP_MK_STORE_FP16
                                    : -1;
    if (fmt < 0)
        return mxp_cudab_why(why, n, "store + scan: dtype %d: accepted F32, BF16, F16", (int)t);
    mxp_mk_scan *partials = (mxp_mk_scan *)c->mk_partials;
    unsigned g = count ? MXP_MK_REDUCE_BLOCKS : 0;
    if (count)
        k_mk_store_scan<<<g, MXP_MK_THREADS, 0, c->stream>>>(fmt, out, src, count, partials);
    k_mk_scan_merge<<<1, 1, 0, c->stream>>>(partials, g, amax, nonfinite);
    return mk_launched("store + scan launch", why, n);
}

extern "C" int mxp_cudab_widen(mxp_cudab_ctx *c, mxp_dtype t, float *out, const void *src,
                               size_t count, char *why, size_t n) {
    int fmt = t == MXP_DTYPE_F32    ? MXP_MK_STORE_F32
              : t == MXP_DTYPE_BF16 ? MXP_MK_STORE_BF16
              : t == MXP_DTYPE_F16  ? MXP_MK_STORE_FP16
                                    : -1;
    if (fmt < 0) return mxp_cudab_why(why, n, "widen: dtype %d: accepted F32, BF16, F16", (int)t);
    if (count == 0) return 0;
    k_mk_widen<<<MK_GRID(count), MXP_MK_THREADS, 0, c->stream>>>(fmt, out, src, count);
    return mk_launched("widen launch", why, n);
}
