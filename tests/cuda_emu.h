/* tests/cuda_emu.h: a host launch emulator for the MLP kernels of
 * backend/cuda/mlp_kernels.cu (test helper, header-only).
 *
 * Each emu_* function launches the same MXP_HD bodies of
 * backend/numerics/mlp.h and mlp_rows.h over the same geometry as the .cu
 * launcher (mxp_mk_grid, MXP_MK_THREADS, MXP_MK_REDUCE_BLOCKS, the 65,535
 * block cap), one block at a time, and inside a block runs every thread
 * through one phase before the next (what __syncthreads() guarantees); the
 * tree steps and the one-thread block-order merges are the .cu's. The order
 * in which BLOCKS run is chosen by emu_order (0: 0..grid-1, 1: reversed,
 * 2: a fixed pseudo-random permutation), so a test can show that results do
 * not depend on block scheduling. What it cannot show: races inside a block
 * that a real barrier placement would expose (the .cu's barriers are
 * checked by reading, and by racecheck on a GPU), device libm bits.
 */
#ifndef MIXPREC_TESTS_CUDA_EMU_H
#define MIXPREC_TESTS_CUDA_EMU_H

#include <stdlib.h>

#include "backend/numerics/mlp_rows.h"

static int emu_order = 0;

/* The bid that runs k-th of grid blocks under emu_order. */
static unsigned emu_bid(unsigned k, unsigned grid) {
    if (emu_order == 1) return grid - 1 - k;
    if (emu_order == 2) {
        /* k -> (a k + c) mod grid with a odd and coprime to grid: a
         * permutation when gcd(a, grid) == 1; a = a prime > 65535. */
        return (unsigned)(((uint64_t)k * 69313u + 12345u) % grid);
    }
    return k;
}

static mxp_mk_idx emu_ix(unsigned grid, unsigned bid, unsigned tid) {
    mxp_mk_idx ix = {grid, MXP_MK_THREADS, bid, tid};
    return ix;
}

/* Element kernels: independent threads, grid over n items. */
static void emu_bias_add(float *y, const float *bias, size_t B, size_t C) {
    size_t n = B * C;
    if (!bias || n == 0) return;
    unsigned grid = mxp_mk_grid(n, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), t);
            mxp_mk_bias_add_body(&ix, y, bias, n, C);
        }
}

static void emu_bias_grad(float *dbias, const float *dy, size_t B, size_t C) {
    if (C == 0) return;
    unsigned grid = mxp_mk_grid(C, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), t);
            mxp_mk_bias_grad_body(&ix, dbias, dy, B, C);
        }
}

static void emu_act_fwd(int act, float *y, const float *x, size_t n) {
    if (n == 0) return;
    unsigned grid = mxp_mk_grid(n, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), t);
            mxp_mk_act_fwd_body(&ix, act, y, x, n);
        }
}

static void emu_act_bwd(int act, float *dx, const float *dy, const float *s, size_t n) {
    if (n == 0) return;
    unsigned grid = mxp_mk_grid(n, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), t);
            mxp_mk_act_bwd_body(&ix, act, dx, dy, s, n);
        }
}

/* The tree of a block: steps s = block/2 .. 1, every thread t < s. */
#define EMU_TREE(fn, sh)                                                          \
    for (unsigned s_ = MXP_MK_THREADS / 2; s_ > 0; s_ >>= 1)                      \
        for (unsigned t_ = 0; t_ < s_; t_++) {                                    \
            mxp_mk_idx ixt_ = emu_ix(grid, bid, t_);                              \
            fn(&ixt_, (sh), s_);                                                  \
        }

static void emu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x,
                              const float *gamma, const float *beta, size_t B, size_t C,
                              float eps) {
    if (B == 0 || C == 0) return;
    unsigned grid = mxp_mk_grid(B, 1, MXP_MK_GRID_CAP);
    float sh[MXP_MK_THREADS];
    for (unsigned k = 0; k < grid; k++) {
        unsigned bid = emu_bid(k, grid);
        for (size_t r = bid; r < B; r += grid) {
            const float *xr = x + r * C;
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                sh[t] = mxp_mk_ln_sum(&ix, xr, C);
            }
            EMU_TREE(mxp_mk_tree_f32, sh);
            float mu = mxp_mk_ln_mean(sh[0], C);
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                sh[t] = mxp_mk_ln_dev(&ix, xr, C, mu);
            }
            EMU_TREE(mxp_mk_tree_f32, sh);
            float rs = mxp_mk_ln_rstd(sh[0], C, eps);
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                mxp_mk_ln_out(&ix, y + r * C, xr, gamma, beta, C, mu, rs, mean, rstd, r);
            }
        }
    }
}

static void emu_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *mean, const float *rstd,
                              const float *gamma, size_t B, size_t C) {
    if (B == 0 || C == 0) return;
    if (dgamma || dbeta) { /* the column kernel first (dx may alias dy) */
        unsigned grid = mxp_mk_grid(C, MXP_MK_THREADS, MXP_MK_GRID_CAP);
        for (unsigned k = 0; k < grid; k++)
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), t);
                mxp_mk_ln_bwd_param_body(&ix, dgamma, dbeta, dy, x, mean, rstd, B, C);
            }
    }
    unsigned grid = mxp_mk_grid(B, 1, MXP_MK_GRID_CAP);
    float sg[MXP_MK_THREADS], sgx[MXP_MK_THREADS];
    for (unsigned k = 0; k < grid; k++) {
        unsigned bid = emu_bid(k, grid);
        for (size_t r = bid; r < B; r += grid) {
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                mxp_mk_ln_bwd_sums(&ix, dy + r * C, x + r * C, gamma, C, mean[r], rstd[r],
                                   &sg[t], &sgx[t]);
            }
            EMU_TREE(mxp_mk_tree_f32, sg);
            EMU_TREE(mxp_mk_tree_f32, sgx);
            float mg = mxp_mk_ln_mean(sg[0], C), mgx = mxp_mk_ln_mean(sgx[0], C);
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                mxp_mk_ln_bwd_dx(&ix, dx + r * C, dy + r * C, x + r * C, gamma, C, mean[r],
                                 rstd[r], mg, mgx);
            }
        }
    }
}

static void emu_mse(float *dpred, const float *pred, const float *target, size_t B, size_t C,
                    float grad_scale, double *loss) {
    size_t n = B * C;
    if (n == 0) {
        *loss = 0.0;
        return;
    }
    unsigned grid = MXP_MK_REDUCE_BLOCKS;
    float k = mxp_mk_mse_k(grad_scale, n);
    double sh[MXP_MK_THREADS], partials[MXP_MK_REDUCE_BLOCKS];
    for (unsigned kb = 0; kb < grid; kb++) {
        unsigned bid = emu_bid(kb, grid);
        for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
            mxp_mk_idx ix = emu_ix(grid, bid, t);
            sh[t] = mxp_mk_mse_thread(&ix, dpred, pred, target, n, k);
        }
        EMU_TREE(mxp_mk_tree_f64, sh);
        partials[bid] = sh[0];
    }
    mxp_mk_mse_merge(partials, grid, n, loss);
}

static void emu_softmax_xent(float *dlogits, const float *logits, const int32_t *labels,
                             size_t B, size_t C, float grad_scale, double *loss) {
    if (B == 0 || C == 0) {
        *loss = 0.0;
        return;
    }
    unsigned grid = mxp_mk_grid(B, 1, MXP_MK_REDUCE_BLOCKS);
    float k = mxp_mk_xent_k(grad_scale, B);
    float sh[MXP_MK_THREADS];
    double partials[MXP_MK_REDUCE_BLOCKS];
    for (unsigned kb = 0; kb < grid; kb++) {
        unsigned bid = emu_bid(kb, grid);
        double acc = 0.0; /* thread 0's register */
        for (size_t r = bid; r < B; r += grid) {
            const float *xr = logits + r * C;
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                sh[t] = mxp_mk_xent_max(&ix, xr, C);
            }
            EMU_TREE(mxp_mk_tree_max, sh);
            float mx = sh[0];
            for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                mxp_mk_idx ix = emu_ix(grid, bid, t);
                sh[t] = mxp_mk_xent_sum(&ix, xr, C, mx);
            }
            EMU_TREE(mxp_mk_tree_f32, sh);
            float s = sh[0];
            acc += mxp_mk_xent_row_loss(xr, C, labels[r], mx, s);
            if (dlogits)
                for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
                    mxp_mk_idx ix = emu_ix(grid, bid, t);
                    mxp_mk_xent_out(&ix, dlogits + r * C, xr, C, labels[r], mx, s, k);
                }
        }
        partials[bid] = acc;
    }
    mxp_mk_xent_merge(partials, grid, B, loss);
}

static void emu_store_scan(int fmt, void *out, const float *src, size_t n, float *amax,
                           int64_t *nonfinite) {
    unsigned grid = MXP_MK_REDUCE_BLOCKS;
    mxp_mk_scan sh[MXP_MK_THREADS], partials[MXP_MK_REDUCE_BLOCKS];
    for (unsigned kb = 0; kb < grid; kb++) {
        unsigned bid = emu_bid(kb, grid);
        for (unsigned t = 0; t < MXP_MK_THREADS; t++) {
            mxp_mk_idx ix = emu_ix(grid, bid, t);
            sh[t] = mxp_mk_store_scan_thread(&ix, fmt, out, src, n);
        }
        EMU_TREE(mxp_mk_tree_scan, sh);
        partials[bid] = sh[0];
    }
    mxp_mk_scan_merge_all(partials, grid, amax, nonfinite);
}

#endif /* MIXPREC_TESTS_CUDA_EMU_H */
