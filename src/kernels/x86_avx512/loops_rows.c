/* kernels/x86_avx512/loops_rows.c: AVX-512 row-wise kernels on [B, C]
 * FP32 matrices (bias add and gradient, LayerNorm forward/backward,
 * softmax) and the losses (MSE, softmax cross-entropy).
 *
 * Entry points: mxp_avx512_add_bias, mxp_avx512_bias_grad,
 * mxp_avx512_layernorm_fwd, mxp_avx512_layernorm_bwd,
 * mxp_avx512_softmax_fwd, mxp_avx512_mse, mxp_avx512_softmax_xent
 * (contracts in kernels/kernels.h). Rows are contiguous (stride C); each
 * row's statistics are computed before the row is written, so y may alias
 * x and dx may alias dy, as in the generic kernels.
 *
 * Agreement with the generic kernels (kernels/generic/rowwise.c, loss.c):
 *   bit-exact: add_bias; mse's dpred; the element-wise formulas everywhere
 *     (same operations, same order);
 *   bias_grad and layernorm_bwd's dgamma/dbeta ("+=") sum each column over
 *     b in row order starting from zero, then add that batch sum to the
 *     accumulator once, as PyTorch adds a batch's gradient into .grad. From
 *     a zero accumulator (the first micro-batch) the bits equal generic's;
 *     onto a non-zero one they differ by that one rounding (generic adds
 *     row by row into the accumulator). It also makes accumulating two
 *     identical micro-batches give exactly twice the gradient.
 *   summation order: row sums in FP32 (layernorm mean/variance and its
 *     backward's two row means, softmax denominators) run in 16 lanes then
 *     a tree, not left to right; the double loss sums of mse run in 8
 *     lanes. Results differ from generic by rounding only (bounds in
 *     tests/test_loops_isa.c).
 *   exp: softmax and cross-entropy use v_exp (<= 1 ulp from glibc expf).
 * The NaN rules of the generic kernels are kept: a row with a NaN has a
 * NaN maximum, hence NaN softmax outputs and loss.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include <math.h>

#define ROW(p, b, C) ((p) + (size_t)(b) * (size_t)(C))

void mxp_avx512_add_bias(float *y, const float *bias, int64_t B, int64_t C) {
    if (!bias || C <= 0) return;
    const size_t n = (size_t)C;
    for (int64_t b = 0; b < B; b++) {
        float *row = ROW(y, b, C);
        for (size_t c = 0; c < n; c += 16) {
            __mmask16 k = lanes16(n - c);
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, row + c),
                                     _mm512_maskz_loadu_ps(k, bias + c));
            _mm512_mask_storeu_ps(row + c, k, v);
        }
    }
}

/* Columns in blocks of 64: the block's sums over the rows (in order b = 0,
 * 1, ..., starting from zero) stay in registers and are then added to dbias
 * once (see the file comment; the loop is v_col_sums_add, loops_simd.h). */
void mxp_avx512_bias_grad(float *dbias, const float *dy, int64_t B, int64_t C) {
    v_col_sums_add(dbias, MXP_DTYPE_F32, dy, B, C, load_wide);
}

/* Sum of x[0..n) in FP32 (two 16-lane accumulators, then a tree). */
static float row_sum(const float *x, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t c = 0;
    for (; c + 32 <= n; c += 32) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + c));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + c + 16));
    }
    for (; c < n; c += 16) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(lanes16(n - c), x + c));
    return hsum_ps(_mm512_add_ps(s0, s1));
}

/* Sum of (x - mu)^2 over x[0..n) in FP32. */
static float row_sqdev(const float *x, size_t n, float mu) {
    const __m512 m = _mm512_set1_ps(mu);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    size_t c = 0;
    for (; c + 32 <= n; c += 32) {
        __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + c), m);
        __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + c + 16), m);
        s0 = _mm512_add_ps(s0, _mm512_mul_ps(d0, d0));
        s1 = _mm512_add_ps(s1, _mm512_mul_ps(d1, d1));
    }
    for (; c < n; c += 16) {
        __mmask16 k = lanes16(n - c);
        __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + c), m);
        s0 = _mm512_add_ps(s0, _mm512_mul_ps(d, d));
    }
    return hsum_ps(_mm512_add_ps(s0, s1));
}

void mxp_avx512_layernorm_fwd(float *y, float *mean, float *rstd,
                              const float *x, const float *gamma,
                              const float *beta, int64_t B, int64_t C,
                              float eps) {
    if (C <= 0) return;
    const size_t n = (size_t)C;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = ROW(x, b, C);
        float *yr = ROW(y, b, C);
        float mu = row_sum(xr, n) / (float)C;
        float rs = 1.0f / sqrtf(row_sqdev(xr, n, mu) / (float)C + eps);
        if (mean) mean[b] = mu;
        if (rstd) rstd[b] = rs;
        const __m512 mv = _mm512_set1_ps(mu), rv = _mm512_set1_ps(rs);
        for (size_t c = 0; c < n; c += 16) {
            __mmask16 k = lanes16(n - c);
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + c), mv), rv);
            if (gamma) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, gamma + c));
            if (beta) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, beta + c));
            _mm512_mask_storeu_ps(yr + c, k, v);
        }
    }
}

/* dgamma += sum_b dy * xhat and dbeta += sum_b dy for the 16 columns at c
 * (lanes k): the sums over b run in registers from zero, in row order. */
static void ln_param_grads16(float *dgamma, float *dbeta, const float *dy,
                             const float *x, const float *mean, const float *rstd,
                             int64_t B, int64_t C, size_t c, __mmask16 k) {
    __m512 sgm = _mm512_setzero_ps(), sbt = _mm512_setzero_ps();
    for (int64_t b = 0; b < B; b++) {
        __m512 d = _mm512_maskz_loadu_ps(k, ROW(dy, b, C) + c);
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, ROW(x, b, C) + c),
                                                _mm512_set1_ps(mean[b])),
                                  _mm512_set1_ps(rstd[b]));
        sgm = _mm512_add_ps(sgm, _mm512_mul_ps(d, xh));
        sbt = _mm512_add_ps(sbt, d);
    }
    if (dgamma)
        _mm512_mask_storeu_ps(dgamma + c, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, dgamma + c), sgm));
    if (dbeta)
        _mm512_mask_storeu_ps(dbeta + c, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, dbeta + c), sbt));
}

/* The parameter gradients first (a pass down the columns, before dx may
 * overwrite dy), then dx row by row. */
void mxp_avx512_layernorm_bwd(float *dx, float *dgamma, float *dbeta,
                              const float *dy, const float *x,
                              const float *mean, const float *rstd,
                              const float *gamma, int64_t B, int64_t C) {
    if (C <= 0) return;
    const size_t n = (size_t)C;
    if ((dgamma || dbeta) && B > 0)
        for (size_t c = 0; c < n; c += 16)
            ln_param_grads16(dgamma, dbeta, dy, x, mean, rstd, B, C, c, lanes16(n - c));
    for (int64_t b = 0; b < B; b++) {
        const float *xr = ROW(x, b, C);
        const float *dyr = ROW(dy, b, C);
        float *dxr = ROW(dx, b, C);
        const __m512 mv = _mm512_set1_ps(mean[b]), rv = _mm512_set1_ps(rstd[b]);
        __m512 sg = _mm512_setzero_ps(), sgx = _mm512_setzero_ps();
        for (size_t c = 0; c < n; c += 16) {
            __mmask16 k = lanes16(n - c);
            __m512 d = _mm512_maskz_loadu_ps(k, dyr + c);
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + c), mv), rv);
            __m512 gc = gamma ? _mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, gamma + c)) : d;
            sg = _mm512_add_ps(sg, gc);
            sgx = _mm512_add_ps(sgx, _mm512_mul_ps(gc, xh));
        }
        const __m512 mg = _mm512_set1_ps(hsum_ps(sg) / (float)C);
        const __m512 mgx = _mm512_set1_ps(hsum_ps(sgx) / (float)C);
        for (size_t c = 0; c < n; c += 16) {
            __mmask16 k = lanes16(n - c);
            __m512 d = _mm512_maskz_loadu_ps(k, dyr + c);
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + c), mv), rv);
            __m512 gc = gamma ? _mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, gamma + c)) : d;
            __m512 v = _mm512_sub_ps(_mm512_sub_ps(gc, mg), _mm512_mul_ps(xh, mgx));
            _mm512_mask_storeu_ps(dxr + c, k, _mm512_mul_ps(rv, v));
        }
    }
}

/* Row maximum with the generic NaN rule: NaN when the row has a NaN. */
static float row_max(const float *x, size_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (size_t c = 0; c < n; c += 16) {
        __mmask16 k = lanes16(n - c);
        __m512 v = _mm512_maskz_loadu_ps(k, x + c);
        nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
        m = _mm512_mask_max_ps(m, k, v, m); /* NaN in v: keeps m */
    }
    return nan ? NAN : _mm512_reduce_max_ps(m);
}

/* sum_c exp(x[c] - mx) in FP32; when y != NULL also stores each term. */
static float row_expsum(float *y, const float *x, size_t n, float mx) {
    const __m512 mv = _mm512_set1_ps(mx);
    __m512 s = _mm512_setzero_ps();
    for (size_t c = 0; c < n; c += 16) {
        __mmask16 k = lanes16(n - c);
        __m512 e = _mm512_maskz_mov_ps(k, v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + c), mv)));
        if (y) _mm512_mask_storeu_ps(y + c, k, e);
        s = _mm512_add_ps(s, e);
    }
    return hsum_ps(s);
}

void mxp_avx512_softmax_fwd(float *y, const float *x, int64_t B, int64_t C) {
    if (C <= 0) return;
    const size_t n = (size_t)C;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = ROW(x, b, C);
        float *yr = ROW(y, b, C);
        float s = row_expsum(yr, xr, n, row_max(xr, n));
        const __m512 sv = _mm512_set1_ps(s);
        for (size_t c = 0; c < n; c += 16) {
            __mmask16 k = lanes16(n - c);
            _mm512_mask_storeu_ps(yr + c, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, yr + c), sv));
        }
    }
}

void mxp_avx512_mse(float *dpred, const float *pred, const float *target,
                    int64_t B, int64_t C, float grad_scale, double *loss) {
    if (B <= 0 || C <= 0) {
        *loss = 0.0;
        return;
    }
    size_t n = (size_t)B * (size_t)C;
    const __m512 kv = _mm512_set1_ps((float)(2.0 * (double)grad_scale / (double)n));
    /* (double)d * d is exact, so the FMA below adds exactly the generic term. */
    __m512d t0 = _mm512_setzero_pd(), t1 = _mm512_setzero_pd();
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, pred + i),
                                 _mm512_maskz_loadu_ps(k, target + i));
        __m512d dl = lo_pd(d), dh = hi_pd(d);
        t0 = _mm512_fmadd_pd(dl, dl, t0);
        t1 = _mm512_fmadd_pd(dh, dh, t1);
        if (dpred) _mm512_mask_storeu_ps(dpred + i, k, _mm512_mul_ps(kv, d));
    }
    *loss = hsum_pd(_mm512_add_pd(t0, t1)) / (double)n;
}

void mxp_avx512_softmax_xent(float *dlogits, const float *logits,
                             const int32_t *labels, int64_t B, int64_t C,
                             float grad_scale, double *loss) {
    if (B <= 0 || C <= 0) {
        *loss = 0.0;
        return;
    }
    const size_t n = (size_t)C;
    const float kf = (float)((double)grad_scale / (double)B);
    const __m512 kv = _mm512_set1_ps(kf), one = _mm512_set1_ps(1.0f);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    double total = 0.0;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = ROW(logits, b, C);
        int32_t lab = labels[b];
        bool valid = lab >= 0 && (int64_t)lab < C;
        float mx = row_max(xr, n);
        float s = row_expsum(NULL, xr, n, mx);
        float lse = mx + logf(s);
        total += valid ? (double)lse - (double)xr[lab] : (double)NAN;
        if (!dlogits) continue;
        float *dr = ROW(dlogits, b, C);
        const __m512 mv = _mm512_set1_ps(mx), inv = _mm512_set1_ps(1.0f / s);
        for (size_t c = 0; c < n; c += 16) {
            __mmask16 k = lanes16(n - c);
            __m512 p = _mm512_mul_ps(v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + c), mv)), inv);
            /* the label's lane (if in this block) takes p - 1 */
            __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32((int)c));
            __mmask16 at = valid ? _mm512_cmpeq_epi32_mask(idx, _mm512_set1_epi32(lab)) : 0;
            p = _mm512_mask_sub_ps(p, at, p, one);
            _mm512_mask_storeu_ps(dr + c, k, _mm512_mul_ps(kv, p));
        }
    }
    *loss = total / (double)B;
}
