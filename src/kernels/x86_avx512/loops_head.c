/* kernels/x86_avx512/loops_head.c: the regression head's loss (Gaussian NLL
 * with learned soft bounds or MSE, per-target weights, an optional BCE
 * termination column) on AVX-512F.
 *
 * Entry points: mxp_avx512_head_loss (contract: kernels/kernels.h,
 * head_loss; formulas and gradients: kernels/generic/loss_head.c) and
 * mxp_avx512_gauss_nll (kernels.h, gauss_nll: the plain Gaussian head,
 * which is head_loss without weights and without the flag column).
 *
 * Layout: pred [B, ps] row-major (ps = 2K + T Gaussian, K + T
 * deterministic), target [B, K + T]. The K regression columns are
 * processed 16 at a time: lane l of a vector is column j0 + l of one row,
 * loaded contiguously (masked tail for K not a multiple of 16), and the
 * batch is walked row by row, each lane summing its column over b = 0, 1,
 * ... in double exactly as the generic kernel does; the per-column sums
 * are then folded into the loss and the bound gradients column by column
 * in the generic order. The flag column (T = 1, stride ps) is gathered 16
 * rows at a time and its terms added in row order.
 *
 * Against the generic kernel:
 *   - deterministic head: the same FP32 operations in the same order and
 *     the same double sums: the same bits (loss and dpred);
 *   - Gaussian head and flag: the same operations, but e^x and log1p(x)
 *     are vector approximations (v_exp <= 1 ulp, v_log1p below <= 2 ulp
 *     on its domain [0, 1], measured over every FP32 input there) where
 *     the generic kernel calls glibc's expf/log1pf, so results differ by a
 *     few ulp of each element's term; tests/test_head_loss_isa.c checks
 *     both kernels against an FP64 oracle within the bound derived there.
 * gauss_nll is that Gaussian path with every weight 1 (kw = k * 1 = k,
 * the generic gauss_nll's factor) and T = 0: dpred and dbounds are the
 * same FP32 operations as the generic loss_gauss.c up to e^x and log1p,
 * and the loss sums each column in double before adding it to the total
 * (the generic kernel adds element by element into one double): a
 * difference of the order of 1e-16 relative beside the few-ulp one.
 * Special values follow the generic formulas lane by lane (NaN and
 * infinities propagate the same way; a weight of 0 gives 0 * value).
 */
#include "kernels/x86_avx512/loops.h"
#include "kernels/x86_avx512/loops_simd.h"

#define HEAD_BOUND_PENALTY 0.01

/* log1p(y) for y in [0, 1] (NaN propagates; log1p(0) = +0): u = 1 + y
 * rounded, c = y - (u - 1) its rounding error, log1p(y) = log(u) + c / u;
 * log(u) = e ln2 + log(m), u = m 2^e, m in [0.75, 1.5), and
 * log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.2, by its series to
 * s^11 (truncation < 4e-10 relative). */
static inline __m512 v_log1p01(__m512 y) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 u = _mm512_add_ps(one, y);
    const __m512 c = _mm512_sub_ps(y, _mm512_sub_ps(u, one));
    const __m512 m = _mm512_getmant_ps(u, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_src);
    /* getexp(u) = floor(log2 u); a mantissa below 1 means one more */
    __m512 e = _mm512_getexp_ps(u);
    e = _mm512_mask_add_ps(e, _mm512_cmp_ps_mask(m, one, _CMP_LT_OQ), e, one);
    const __m512 s = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one));
    const __m512 s2 = _mm512_mul_ps(s, s);
    __m512 p = _mm512_set1_ps(1.0f / 11.0f);
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 9.0f));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 7.0f));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 5.0f));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 3.0f));
    p = _mm512_mul_ps(_mm512_mul_ps(p, s2), s);
    const __m512 logm = _mm512_add_ps(_mm512_add_ps(s, s), _mm512_add_ps(p, p));
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    __m512 r = _mm512_fmadd_ps(e, ln2_lo, _mm512_add_ps(logm, _mm512_div_ps(c, u)));
    return _mm512_fmadd_ps(e, ln2_hi, r);
}

/* max(x, 0) + log1p(e), e = exp(-|x|) (the generic softplus). */
static inline __m512 v_softplus_e(__m512 x, __m512 e) {
    return _mm512_add_ps(_mm512_max_ps(x, _mm512_setzero_ps()), v_log1p01(e));
}

/* The generic sigmoid from e = exp(-|x|): x >= 0: 1 / (1 + e), else
 * e / (1 + e) (NaN: the second, NaN). */
static inline __m512 v_sigmoid_e(__m512 x, __m512 e) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_div_ps(_mm512_mask_mov_ps(e, pos, one), _mm512_add_ps(one, e));
}

/* The same, for -x (sigmoid(-x) = (-x >= 0 ? 1 : e) / (1 + e)). */
static inline __m512 v_sigmoid_neg_e(__m512 x, __m512 e) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LE_OQ);
    return _mm512_div_ps(_mm512_mask_mov_ps(e, pos, one), _mm512_add_ps(one, e));
}

static inline __m512 v_neg_abs(__m512 x) {
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* sums [lo 8 | hi 8] += (double) v, lane by lane */
static inline void acc_pd(__m512d *lo, __m512d *hi, __m512 v) {
    *lo = _mm512_add_pd(*lo, lo_pd(v));
    *hi = _mm512_add_pd(*hi, hi_pd(v));
}

static inline void store_pd(double *dst, __m512d lo, __m512d hi) {
    _mm512_storeu_pd(dst, lo);
    _mm512_storeu_pd(dst + 8, hi);
}

/* Gaussian columns [j0, j0 + n), n <= 16: the generic gauss_cols. */
static void gauss_block(float *dpred, float *dbounds, const float *pred, const float *target,
                        const float *bounds, const float *w, int64_t B, int64_t K, int64_t T,
                        float k, float grad_scale, int64_t j0, int64_t n, double *total) {
    const size_t ps = 2 * (size_t)K + (size_t)T, ts = (size_t)K + (size_t)T;
    const __mmask16 km = lanes16((size_t)n);
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    const __m512 mx = _mm512_maskz_loadu_ps(km, bounds + j0);
    const __m512 mn = _mm512_maskz_loadu_ps(km, bounds + K + j0);
    const __m512 wj = w ? _mm512_maskz_loadu_ps(km, w + j0) : one;
    const __m512 kw = _mm512_mul_ps(_mm512_set1_ps(k), wj);
    __m512d col_lo = _mm512_setzero_pd(), col_hi = col_lo, gx_lo = col_lo, gx_hi = col_lo,
            gn_lo = col_lo, gn_hi = col_lo;
    for (int64_t b = 0; b < B; b++) {
        const size_t o = (size_t)b * ps + (size_t)j0;
        const __m512 mu = _mm512_maskz_loadu_ps(km, pred + o);
        const __m512 raw = _mm512_maskz_loadu_ps(km, pred + o + (size_t)K);
        const __m512 y = _mm512_maskz_loadu_ps(km, target + (size_t)b * ts + (size_t)j0);
        const __m512 u = _mm512_sub_ps(mx, raw);
        const __m512 eu = v_exp(v_neg_abs(u));
        const __m512 lv1 = _mm512_sub_ps(mx, v_softplus_e(u, eu));
        const __m512 v = _mm512_sub_ps(lv1, mn);
        const __m512 ev = v_exp(v_neg_abs(v));
        const __m512 lv = _mm512_add_ps(mn, v_softplus_e(v, ev));
        const __m512 iv = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), lv));
        const __m512 d = _mm512_sub_ps(mu, y);
        const __m512 d2iv = _mm512_mul_ps(_mm512_mul_ps(d, d), iv);
        /* col += (double)d2iv + (double)lv */
        col_lo = _mm512_add_pd(col_lo, _mm512_add_pd(lo_pd(d2iv), lo_pd(lv)));
        col_hi = _mm512_add_pd(col_hi, _mm512_add_pd(hi_pd(d2iv), hi_pd(lv)));
        if (!dpred) continue;
        const __m512 g = _mm512_sub_ps(one, d2iv);
        const __m512 gsv = _mm512_mul_ps(g, v_sigmoid_e(v, ev));
        _mm512_mask_storeu_ps(dpred + o, km,
                              _mm512_mul_ps(kw, _mm512_mul_ps(_mm512_mul_ps(two, d), iv)));
        _mm512_mask_storeu_ps(dpred + o + (size_t)K, km,
                              _mm512_mul_ps(kw, _mm512_mul_ps(gsv, v_sigmoid_e(u, eu))));
        acc_pd(&gx_lo, &gx_hi, _mm512_mul_ps(gsv, v_sigmoid_neg_e(u, eu)));
        acc_pd(&gn_lo, &gn_hi, _mm512_mul_ps(g, v_sigmoid_neg_e(v, ev)));
    }
    double col[16], gx[16], gn[16];
    float kwf[16];
    store_pd(col, col_lo, col_hi);
    store_pd(gx, gx_lo, gx_hi);
    store_pd(gn, gn_lo, gn_hi);
    _mm512_storeu_ps(kwf, kw);
    for (int64_t l = 0; l < n; l++) {
        const int64_t j = j0 + l;
        *total += (double)(w ? w[j] : 1.0f) * col[l];
        if (dpred && dbounds) {
            dbounds[j] += (float)((double)kwf[l] * gx[l] + HEAD_BOUND_PENALTY * (double)grad_scale);
            dbounds[K + j] +=
                (float)((double)kwf[l] * gn[l] - HEAD_BOUND_PENALTY * (double)grad_scale);
        }
    }
}

/* Deterministic columns [j0, j0 + n): d = pred - y, sum (double)d^2,
 * dpred = (2 (k w)) d: the generic operations, the same bits. */
static void mse_block(float *dpred, const float *pred, const float *target, const float *w,
                      int64_t B, int64_t K, int64_t T, float k, int64_t j0, int64_t n,
                      double *total) {
    const size_t ps = (size_t)K + (size_t)T;
    const __mmask16 km = lanes16((size_t)n);
    const __m512 wj = w ? _mm512_maskz_loadu_ps(km, w + j0) : _mm512_set1_ps(1.0f);
    const __m512 kw2 = _mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_mul_ps(_mm512_set1_ps(k), wj));
    __m512d lo = _mm512_setzero_pd(), hi = lo;
    for (int64_t b = 0; b < B; b++) {
        const size_t o = (size_t)b * ps + (size_t)j0;
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(km, pred + o),
                                       _mm512_maskz_loadu_ps(km, target + o));
        const __m512d dl = lo_pd(d), dh = hi_pd(d);
        lo = _mm512_add_pd(lo, _mm512_mul_pd(dl, dl));
        hi = _mm512_add_pd(hi, _mm512_mul_pd(dh, dh));
        if (dpred) _mm512_mask_storeu_ps(dpred + o, km, _mm512_mul_ps(kw2, d));
    }
    double col[16];
    store_pd(col, lo, hi);
    for (int64_t l = 0; l < n; l++) *total += (double)(w ? w[j0 + l] : 1.0f) * col[l];
}

/* The flag column: BCE on the logit z = pred[b, ps - 1] against t =
 * target[b, K], 16 rows per gather; terms added to the column sum in row
 * order. */
static double flag_col(float *dpred, const float *pred, const float *target, int64_t B,
                       size_t ps, size_t ts, int64_t K, float kw) {
    const __m512i rows = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i pi = _mm512_mullo_epi32(rows, _mm512_set1_epi32((int)ps));
    const __m512i ti = _mm512_mullo_epi32(rows, _mm512_set1_epi32((int)ts));
    const __m512 kwv = _mm512_set1_ps(kw);
    double col = 0.0;
    float term[16];
    for (int64_t b0 = 0; b0 < B; b0 += 16) {
        const __mmask16 km = lanes16((size_t)(B - b0));
        const float *pz = pred + (size_t)b0 * ps + ps - 1;
        const float *pt = target + (size_t)b0 * ts + (size_t)K;
        const __m512 z = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), km, pi, pz, 4);
        const __m512 t = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), km, ti, pt, 4);
        const __m512 e = v_exp(v_neg_abs(z));
        /* fmaxf(z, 0) - z t + log1pf(e): vmaxps returns 0 for a NaN z, as fmaxf */
        const __m512 l = _mm512_add_ps(
            _mm512_sub_ps(_mm512_max_ps(z, _mm512_setzero_ps()), _mm512_mul_ps(z, t)),
            v_log1p01(e));
        _mm512_storeu_ps(term, l);
        for (int64_t i = 0; i < 16 && b0 + i < B; i++) col += (double)term[i];
        if (dpred)
            _mm512_mask_i32scatter_ps(dpred + (size_t)b0 * ps + ps - 1, km, pi,
                                      _mm512_mul_ps(kwv, _mm512_sub_ps(v_sigmoid_e(z, e), t)), 4);
    }
    return col;
}

/* Contract: kernels.h (head_loss). See the file comment for what matches
 * the generic kernel bit for bit and what is bounded. */
void mxp_avx512_head_loss(float *dpred, float *dbounds, const float *pred, const float *target,
                          const float *bounds, const float *weights, int64_t B, int64_t K,
                          int64_t T, float grad_scale, double *loss) {
    const int64_t C = K + T;
    if (B <= 0 || C <= 0) {
        *loss = 0.0;
        return;
    }
    const bool gauss = bounds != NULL;
    const size_t ps = (gauss ? 2 * (size_t)K : (size_t)K) + (size_t)T, ts = (size_t)C;
    /* 16 rows per gather: their offsets must fit int32 */
    if (T > 0 && ps > (size_t)INT32_MAX / 16) {
        mxp_generic_head_loss(dpred, dbounds, pred, target, bounds, weights, B, K, T, grad_scale,
                              loss);
        return;
    }
    const float k = (float)((double)grad_scale / ((double)B * (double)C));
    double total = 0.0, penalty = 0.0;
    for (int64_t j0 = 0; j0 < K; j0 += 16) {
        const int64_t n = K - j0 < 16 ? K - j0 : 16;
        if (gauss)
            gauss_block(dpred, dbounds, pred, target, bounds, weights, B, K, T, k, grad_scale, j0,
                        n, &total);
        else
            mse_block(dpred, pred, target, weights, B, K, T, k, j0, n, &total);
    }
    if (gauss)
        for (int64_t j = 0; j < K; j++) penalty += (double)bounds[j] - (double)bounds[K + j];
    if (T > 0) {
        const float wt = weights ? weights[K] : 1.0f, kw = k * wt;
        total += (double)wt * flag_col(dpred, pred, target, B, ps, ts, K, kw);
    }
    *loss = total / ((double)B * (double)C) + (gauss ? HEAD_BOUND_PENALTY * penalty : 0.0);
}

/* Contract: kernels.h (gauss_nll): head_loss with no weights and no flag
 * column (the file comment says how it differs from the generic kernel). */
void mxp_avx512_gauss_nll(float *dpred, float *dbounds, const float *pred, const float *target,
                          const float *bounds, int64_t B, int64_t D, float grad_scale,
                          double *loss) {
    mxp_avx512_head_loss(dpred, dbounds, pred, target, bounds, NULL, B, D, 0, grad_scale, loss);
}
