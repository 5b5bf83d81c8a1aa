/* backend/numerics/mlp_rows.h: the block-reduction kernels of an MLP step
 * (layernorm forward/backward, MSE, softmax cross-entropy, the stored-format
 * scan) as MXP_HD phase bodies of explicit indices. A CUDA kernel
 * (backend/cuda/mlp_kernels.cu) is these phases with __syncthreads()
 * between them; the host launch emulator (tests/cuda_emu.h) runs every
 * thread of a block through one phase before the next, which is what a
 * barrier guarantees.
 *
 * Entry points:
 *   block tree merges over a power-of-two block (one step s: thread t < s
 *     folds slot t + s into slot t): mxp_mk_tree_f32/_f64/_max/_scan;
 *   layernorm forward, one block per row: mxp_mk_ln_sum, mxp_mk_ln_dev,
 *     mxp_mk_ln_out; backward: mxp_mk_ln_bwd_sums, mxp_mk_ln_bwd_dx (rows),
 *     mxp_mk_ln_bwd_param_body (one thread per column, b in order);
 *   MSE: mxp_mk_mse_k, mxp_mk_mse_thread (grid-stride; dpred), block tree,
 *     mxp_mk_mse_merge (block partials in block order -> *loss);
 *   softmax cross-entropy, one block per row: mxp_mk_xent_max,
 *     mxp_mk_xent_sum, mxp_mk_xent_row_loss, mxp_mk_xent_out, then
 *     mxp_mk_xent_merge;
 *   store + scan: mxp_mk_store_scan_thread, mxp_mk_scan_merge_all.
 * Determinism: every sum is a fixed tree over a fixed block size and a
 * fixed grid (a function of the shape only), and the block partials are
 * merged by one thread in block order, so the result does not depend on
 * the order in which blocks run. The orders differ from the CPU's
 * sequential sums: layernorm statistics, the softmax denominator and the
 * loss totals are close to the CPU's, not bit-identical; amax and counts,
 * bias grad, dgamma/dbeta (column order as the CPU) and every element-wise
 * value are the CPU's bits (given the same row statistics).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_MLP_ROWS_H
#define MIXPREC_BACKEND_NUMERICS_MLP_ROWS_H

#include "backend/numerics/mlp.h"

/* ---- block tree merges ---------------------------------------------------- */

MXP_HD static inline void mxp_mk_tree_f32(const mxp_mk_idx *ix, float *sh, unsigned s) {
    if (ix->tid < s) sh[ix->tid] += sh[ix->tid + s];
}

MXP_HD static inline void mxp_mk_tree_f64(const mxp_mk_idx *ix, double *sh, unsigned s) {
    if (ix->tid < s) sh[ix->tid] += sh[ix->tid + s];
}

/* The CPU's row-max rule: b wins when larger or NaN (NaN propagates). */
MXP_HD static inline float mxp_mk_max_rule(float a, float b) {
    return (b > a || b != b) ? b : a;
}

MXP_HD static inline void mxp_mk_tree_max(const mxp_mk_idx *ix, float *sh, unsigned s) {
    if (ix->tid < s) sh[ix->tid] = mxp_mk_max_rule(sh[ix->tid], sh[ix->tid + s]);
}

MXP_HD static inline void mxp_mk_tree_scan(const mxp_mk_idx *ix, mxp_mk_scan *sh, unsigned s) {
    if (ix->tid < s) mxp_mk_scan_merge(&sh[ix->tid], &sh[ix->tid + s]);
}

/* ---- layernorm (kernels/generic/rowwise.c) -------------------------------- */

/* Row r of a [B, C] tensor is handled by block r, r + grid, ... */

/* This thread's part of sum_c x[c] (c = tid, tid + block, ...). */
MXP_HD static inline float mxp_mk_ln_sum(const mxp_mk_idx *ix, const float *xr, size_t C) {
    float s = 0.0f;
    for (size_t c = ix->tid; c < C; c += ix->block) s += xr[c];
    return s;
}

/* This thread's part of sum_c (x[c] - mu)^2. */
MXP_HD static inline float mxp_mk_ln_dev(const mxp_mk_idx *ix, const float *xr, size_t C,
                                         float mu) {
    float s = 0.0f;
    for (size_t c = ix->tid; c < C; c += ix->block) {
        float d = xr[c] - mu;
        s += d * d;
    }
    return s;
}

/* mu = sum / C; rstd = 1 / sqrtf(ss / C + eps) (the CPU's expressions). */
MXP_HD static inline float mxp_mk_ln_mean(float sum, size_t C) { return sum / (float)C; }
MXP_HD static inline float mxp_mk_ln_rstd(float ss, size_t C, float eps) {
    return 1.0f / sqrtf(ss / (float)C + eps);
}

/* y = (x - mu) * rs [* gamma] [+ beta]; thread 0 stores mean/rstd[row]
 * (either may be NULL). */
MXP_HD static inline void mxp_mk_ln_out(const mxp_mk_idx *ix, float *yr, const float *xr,
                                        const float *gamma, const float *beta, size_t C,
                                        float mu, float rs, float *mean, float *rstd,
                                        size_t row) {
    for (size_t c = ix->tid; c < C; c += ix->block) {
        float v = (xr[c] - mu) * rs;
        if (gamma) v *= gamma[c];
        if (beta) v += beta[c];
        yr[c] = v;
    }
    if (ix->tid == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = rs;
    }
}

/* This thread's parts of sum_c g and sum_c g * xhat, g = dy [* gamma]. */
MXP_HD static inline void mxp_mk_ln_bwd_sums(const mxp_mk_idx *ix, const float *dyr,
                                             const float *xr, const float *gamma, size_t C,
                                             float mu, float rs, float *sg, float *sgx) {
    float a = 0.0f, b = 0.0f;
    for (size_t c = ix->tid; c < C; c += ix->block) {
        float xh = (xr[c] - mu) * rs;
        float gc = gamma ? dyr[c] * gamma[c] : dyr[c];
        a += gc;
        b += gc * xh;
    }
    *sg = a;
    *sgx = b;
}

/* dx = rs * (g - mg - xhat * mgx), mg = sum g / C, mgx = sum g xhat / C. */
MXP_HD static inline void mxp_mk_ln_bwd_dx(const mxp_mk_idx *ix, float *dxr, const float *dyr,
                                           const float *xr, const float *gamma, size_t C,
                                           float mu, float rs, float mg, float mgx) {
    for (size_t c = ix->tid; c < C; c += ix->block) {
        float xh = (xr[c] - mu) * rs;
        float gc = gamma ? dyr[c] * gamma[c] : dyr[c];
        dxr[c] = rs * (gc - mg - xh * mgx);
    }
}

/* dgamma[c] += sum_b dy * xhat, dbeta[c] += sum_b dy, b in order (the CPU's
 * sums, bit for bit); either may be NULL. Runs BEFORE the dx kernel (dx may
 * alias dy). */
MXP_HD static inline void mxp_mk_ln_bwd_param_body(const mxp_mk_idx *ix, float *dgamma,
                                                   float *dbeta, const float *dy,
                                                   const float *x, const float *mean,
                                                   const float *rstd, size_t B, size_t C) {
    for (size_t c = mxp_mk_first(ix); c < C; c += mxp_mk_stride(ix)) {
        float g = dgamma ? dgamma[c] : 0.0f, bt = dbeta ? dbeta[c] : 0.0f;
        for (size_t b = 0; b < B; b++) {
            float d = dy[b * C + c];
            float xh = (x[b * C + c] - mean[b]) * rstd[b];
            g += d * xh;
            bt += d;
        }
        if (dgamma) dgamma[c] = g;
        if (dbeta) dbeta[c] = bt;
    }
}

/* ---- MSE (kernels/generic/loss.c) ----------------------------------------- */

/* The gradient factor 2 * grad_scale / n, as the CPU rounds it. */
MXP_HD static inline float mxp_mk_mse_k(float grad_scale, size_t n) {
    return (float)(2.0 * (double)grad_scale / (double)n);
}

/* This thread's share: dpred[i] = k * (pred - target) (dpred may be NULL);
 * returns its part of sum (pred - target)^2 in double. */
MXP_HD static inline double mxp_mk_mse_thread(const mxp_mk_idx *ix, float *dpred,
                                              const float *pred, const float *target, size_t n,
                                              float k) {
    double t = 0.0;
    for (size_t i = mxp_mk_first(ix); i < n; i += mxp_mk_stride(ix)) {
        float d = pred[i] - target[i];
        t += (double)d * (double)d;
        if (dpred) dpred[i] = k * d;
    }
    return t;
}

/* *loss = (sum of the block partials, in block order) / n; 0 when n == 0. */
MXP_HD static inline void mxp_mk_mse_merge(const double *partials, unsigned nblocks, size_t n,
                                           double *loss) {
    double t = 0.0;
    for (unsigned b = 0; b < nblocks; b++) t += partials[b];
    *loss = n ? t / (double)n : 0.0;
}

/* ---- softmax cross-entropy (kernels/generic/loss.c) ----------------------- */

MXP_HD static inline float mxp_mk_xent_k(float grad_scale, size_t B) {
    return (float)((double)grad_scale / (double)B);
}

/* This thread's part of the row max (-inf when it has no column). */
MXP_HD static inline float mxp_mk_xent_max(const mxp_mk_idx *ix, const float *xr, size_t C) {
    float m = -INFINITY;
    for (size_t c = ix->tid; c < C; c += ix->block) m = mxp_mk_max_rule(m, xr[c]);
    return m;
}

/* This thread's part of sum_c exp(x[c] - mx). */
MXP_HD static inline float mxp_mk_xent_sum(const mxp_mk_idx *ix, const float *xr, size_t C,
                                           float mx) {
    float s = 0.0f;
    for (size_t c = ix->tid; c < C; c += ix->block) s += expf(xr[c] - mx);
    return s;
}

/* The row's loss, lse - x[label] in double (NaN for a label outside [0, C),
 * as the CPU). Read before the row's dlogits are written (they may alias). */
MXP_HD static inline double mxp_mk_xent_row_loss(const float *xr, size_t C, int32_t lab,
                                                 float mx, float s) {
    float lse = mx + logf(s);
    bool valid = lab >= 0 && (size_t)lab < C;
    return valid ? (double)lse - (double)xr[lab] : (double)NAN;
}

/* dlogits = k * (softmax - onehot) for this thread's columns. */
MXP_HD static inline void mxp_mk_xent_out(const mxp_mk_idx *ix, float *dr, const float *xr,
                                          size_t C, int32_t lab, float mx, float s, float k) {
    float inv_s = 1.0f / s;
    for (size_t c = ix->tid; c < C; c += ix->block) {
        float p = expf(xr[c] - mx) * inv_s;
        dr[c] = k * ((int64_t)c == (int64_t)lab ? p - 1.0f : p);
    }
}

/* *loss = (sum of the block partials, block order) / B; 0 when B == 0. */
MXP_HD static inline void mxp_mk_xent_merge(const double *partials, unsigned nblocks, size_t B,
                                            double *loss) {
    mxp_mk_mse_merge(partials, nblocks, B, loss);
}

/* ---- stored-format rounding + scan ---------------------------------------- */

/* This thread's share: out[i] = src[i] in fmt (RNE); the scan of the FP32
 * values (before their store, as the CPU's epilogue). */
MXP_HD static inline mxp_mk_scan mxp_mk_store_scan_thread(const mxp_mk_idx *ix, int fmt,
                                                          void *out, const float *src,
                                                          size_t n) {
    mxp_mk_scan s = mxp_mk_scan_init();
    for (size_t i = mxp_mk_first(ix); i < n; i += mxp_mk_stride(ix)) {
        float v = src[i];
        mxp_mk_scan_elem(&s, v);
        mxp_mk_store(fmt, out, i, v);
    }
    return s;
}

/* The block partials merged in block order into the slots (either NULL). */
MXP_HD static inline void mxp_mk_scan_merge_all(const mxp_mk_scan *partials, unsigned nblocks,
                                                float *amax, int64_t *nonfinite) {
    mxp_mk_scan a = mxp_mk_scan_init();
    for (unsigned b = 0; b < nblocks; b++) mxp_mk_scan_merge(&a, &partials[b]);
    if (amax) *amax = a.amax;
    if (nonfinite) *nonfinite = a.nonfinite;
}

#endif /* MIXPREC_BACKEND_NUMERICS_MLP_ROWS_H */
