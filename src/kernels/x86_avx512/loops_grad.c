/* kernels/x86_avx512/loops_grad.c: AVX-512 reductions over flat FP32
 * buffers and the fused gradient pass (unscale + finite check + stats).
 *
 * Entry points: mxp_avx512_sum, mxp_avx512_sumsq, mxp_avx512_absmax,
 * mxp_avx512_unscale_stats (contracts in kernels/kernels.h).
 *
 * Agreement with the generic kernels (kernels/generic/reduce.c,
 * gradpass.c):
 *   exact: every count (nonfinite, zeros, near_overflow, n), absmax (a max
 *     does not depend on order), and the unscaled gradients (one rounding:
 *     fma(raw, inv_scale, +0) is raw * inv_scale except that a raw -0.0
 *     gives +0.0, which is mxp_gradpass_canon's rule for inv_scale > 0; a
 *     negative raw that underflows still gives -0.0, its exact product
 *     being nonzero);
 *   reordered double sums: sum, sumsq and unscale_stats' sumsq add the same
 *     exact double terms ((double)x, or (double)x * x, which is exact) in 4
 *     or 2 interleaved lanes of 8 instead of left to right, so they differ
 *     from generic only by double rounding: |diff| <= 2 (n - 1) 2^-53
 *     sum |term| (tests use that bound).
 * Counts are kept in 32-bit lanes and flushed to 64 bits every COUNT_BLOCK
 * elements, so no lane can overflow. Buffers of PAR_MIN elements or more
 * are reduced in RED_PARTS fixed parts on the kernel thread pool and the
 * parts combined in order (loops_simd.h): the result depends on n only,
 * never on the thread count; the double sums then run in 8 x (4 or 2)
 * lanes, still within the bound above.
 *
 * unscale_stats clears FTZ/DAZ for its duration (mxcsr_exact_enter): with
 * flush-to-zero on, an underflowing unscaled gradient must still be the
 * subnormal the scaler's accounting expects, not a zero.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include <math.h>
#include <string.h>

enum { COUNT_BLOCK = 1 << 24 }; /* elements per count flush (< 2^31 per lane) */

/* ---- single-range passes ------------------------------------------------- */

static double sum_range(const float *x, size_t n) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    __m512d s2 = _mm512_setzero_pd(), s3 = _mm512_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        s0 = _mm512_add_pd(s0, lo_pd(a));
        s1 = _mm512_add_pd(s1, hi_pd(a));
        s2 = _mm512_add_pd(s2, lo_pd(b));
        s3 = _mm512_add_pd(s3, hi_pd(b));
    }
    for (; i < n; i += 16) {
        __m512 a = _mm512_maskz_loadu_ps(lanes16(n - i), x + i);
        s0 = _mm512_add_pd(s0, lo_pd(a));
        s1 = _mm512_add_pd(s1, hi_pd(a));
    }
    return hsum_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}

static double sumsq_range(const float *x, size_t n) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    __m512d s2 = _mm512_setzero_pd(), s3 = _mm512_setzero_pd();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        __m512d a0 = lo_pd(a), a1 = hi_pd(a), b0 = lo_pd(b), b1 = hi_pd(b);
        s0 = _mm512_fmadd_pd(a0, a0, s0); /* the product is exact: same as mul + add */
        s1 = _mm512_fmadd_pd(a1, a1, s1);
        s2 = _mm512_fmadd_pd(b0, b0, s2);
        s3 = _mm512_fmadd_pd(b1, b1, s3);
    }
    for (; i < n; i += 16) {
        __m512 a = _mm512_maskz_loadu_ps(lanes16(n - i), x + i);
        __m512d a0 = lo_pd(a), a1 = hi_pd(a);
        s0 = _mm512_fmadd_pd(a0, a0, s0);
        s1 = _mm512_fmadd_pd(a1, a1, s1);
    }
    return hsum_pd(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}

/* absmax over x[0..n); the non-finite count is added to *bad. */
static float absmax_range(const float *x, size_t n, int64_t *bad) {
    const __m512 inf = _mm512_set1_ps(INFINITY);
    const __m512i one = _mm512_set1_epi32(1);
    __m512 m = _mm512_setzero_ps();
    for (size_t blk = 0; blk < n; blk += COUNT_BLOCK) {
        size_t end = n - blk < COUNT_BLOCK ? n : blk + COUNT_BLOCK;
        __m512i cnt = _mm512_setzero_si512();
        for (size_t i = blk; i < end; i += 16) {
            __mmask16 k = lanes16(end - i);
            __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(k, x + i));
            __mmask16 fin = _mm512_mask_cmp_ps_mask(k, a, inf, _CMP_LT_OQ);
            cnt = _mm512_mask_add_epi32(cnt, k & (__mmask16)~fin, cnt, one);
            m = _mm512_mask_max_ps(m, fin, a, m);
        }
        *bad += _mm512_reduce_add_epi32(cnt);
    }
    return _mm512_reduce_max_ps(m);
}

/* The fused pass over g[0..n): overwrites *out (out->n = n). */
static void unscale_range(float *g, size_t n, float inv_scale, float near_overflow_at,
                          mxp_grad_stats *out) {
    unsigned csr = mxcsr_exact_enter(); /* per thread: MXCSR is thread state */
    const __m512 inv = _mm512_set1_ps(inv_scale), nat = _mm512_set1_ps(near_overflow_at);
    const __m512 inf = _mm512_set1_ps(INFINITY), zero = _mm512_setzero_ps();
    const __m512i one = _mm512_set1_epi32(1);
    __m512 amax = _mm512_setzero_ps();
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int64_t nonfinite = 0, zeros = 0, near = 0;
    for (size_t blk = 0; blk < n; blk += COUNT_BLOCK) {
        size_t end = n - blk < COUNT_BLOCK ? n : blk + COUNT_BLOCK;
        __m512i c_bad = _mm512_setzero_si512(), c_zero = _mm512_setzero_si512();
        __m512i c_near = _mm512_setzero_si512();
        for (size_t i = blk; i < end; i += 16) {
            __mmask16 k = lanes16(end - i);
            __m512 raw = _mm512_maskz_loadu_ps(k, g + i);
            /* raw * inv rounded once, with -0 * inv -> +0 (exact product + +0):
             * mxp_gradpass_canon(raw) * inv for inv > 0, at the cost of the multiply */
            __m512 v = _mm512_fmadd_ps(raw, inv, zero);
            _mm512_mask_storeu_ps(g + i, k, v);
            __m512 a = _mm512_abs_ps(v);
            __mmask16 fin = _mm512_mask_cmp_ps_mask(k, a, inf, _CMP_LT_OQ);
            __mmask16 z = _mm512_mask_cmp_ps_mask(fin, a, zero, _CMP_EQ_OQ);
            __mmask16 nr = _mm512_mask_cmp_ps_mask(fin, _mm512_abs_ps(raw), nat, _CMP_GE_OQ);
            c_bad = _mm512_mask_add_epi32(c_bad, k & (__mmask16)~fin, c_bad, one);
            c_zero = _mm512_mask_add_epi32(c_zero, z, c_zero, one);
            c_near = _mm512_mask_add_epi32(c_near, nr, c_near, one);
            amax = _mm512_mask_max_ps(amax, fin, a, amax);
            __m512 vf = _mm512_maskz_mov_ps(fin, v);
            __m512d lo = lo_pd(vf), hi = hi_pd(vf);
            s0 = _mm512_fmadd_pd(lo, lo, s0); /* exact product: same as mul + add */
            s1 = _mm512_fmadd_pd(hi, hi, s1);
        }
        nonfinite += _mm512_reduce_add_epi32(c_bad);
        zeros += _mm512_reduce_add_epi32(c_zero);
        near += _mm512_reduce_add_epi32(c_near);
    }
    out->n = (int64_t)n;
    out->nonfinite = nonfinite;
    out->zeros = zeros;
    out->near_overflow = near;
    out->sumsq = hsum_pd(_mm512_add_pd(s0, s1));
    out->absmax = _mm512_reduce_max_ps(amax);
    mxcsr_exact_leave(csr);
}

/* ---- the same passes in RED_PARTS parts on the pool (n >= PAR_MIN) -------- */

typedef enum { RED_SUM, RED_SUMSQ, RED_ABSMAX, RED_UNSCALE } red_kind;

typedef struct red_ctx {
    red_kind kind;
    const float *x; /* RED_SUM, RED_SUMSQ, RED_ABSMAX */
    float *g;       /* RED_UNSCALE: unscaled in place */
    size_t n;
    float inv_scale, near_overflow_at;
    mxp_grad_stats part[RED_PARTS]; /* sum/sumsq in .sumsq, absmax in .absmax */
} red_ctx;

static void red_task(void *ctx, int i, int count) {
    red_ctx *c = ctx;
    for (int p = i; p < RED_PARTS; p += count) {
        size_t lo, hi;
        par_range(c->n, p, RED_PARTS, &lo, &hi);
        mxp_grad_stats *o = &c->part[p];
        memset(o, 0, sizeof *o);
        switch (c->kind) {
        case RED_SUM: o->sumsq = sum_range(c->x + lo, hi - lo); break;
        case RED_SUMSQ: o->sumsq = sumsq_range(c->x + lo, hi - lo); break;
        case RED_ABSMAX: o->absmax = absmax_range(c->x + lo, hi - lo, &o->nonfinite); break;
        case RED_UNSCALE:
            unscale_range(c->g + lo, hi - lo, c->inv_scale, c->near_overflow_at, o);
            break;
        }
    }
}

/* Run the parts and combine them in part order into c->part[0]. */
static void red_run(red_ctx *c) {
    int count = mxp_threads_max() < RED_PARTS ? mxp_threads_max() : RED_PARTS;
    mxp_threads_run(count, red_task, c);
    mxp_grad_stats *t = &c->part[0];
    for (int p = 1; p < RED_PARTS; p++) {
        const mxp_grad_stats *o = &c->part[p];
        t->n += o->n;
        t->nonfinite += o->nonfinite;
        t->zeros += o->zeros;
        t->near_overflow += o->near_overflow;
        t->sumsq += o->sumsq;
        if (o->absmax > t->absmax) t->absmax = o->absmax;
    }
}

/* ---- entry points ---------------------------------------------------------- */

void mxp_avx512_sum(const float *x, size_t n, double *out) {
    if (n < PAR_MIN) {
        *out = sum_range(x, n);
        return;
    }
    red_ctx c = {.kind = RED_SUM, .x = x, .n = n};
    red_run(&c);
    *out = c.part[0].sumsq;
}

void mxp_avx512_sumsq(const float *x, size_t n, double *out) {
    if (n < PAR_MIN) {
        *out = sumsq_range(x, n);
        return;
    }
    red_ctx c = {.kind = RED_SUMSQ, .x = x, .n = n};
    red_run(&c);
    *out = c.part[0].sumsq;
}

void mxp_avx512_absmax(const float *x, size_t n, float *amax, int64_t *nonfinite) {
    int64_t bad = 0;
    float m;
    if (n < PAR_MIN) {
        m = absmax_range(x, n, &bad);
    } else {
        red_ctx c = {.kind = RED_ABSMAX, .x = x, .n = n};
        red_run(&c);
        m = c.part[0].absmax;
        bad = c.part[0].nonfinite;
    }
    if (amax) *amax = m;
    if (nonfinite) *nonfinite = bad;
}

void mxp_avx512_unscale_stats(float *g, size_t n, float inv_scale,
                              float near_overflow_at, mxp_grad_stats *out) {
    if (n < PAR_MIN) {
        unscale_range(g, n, inv_scale, near_overflow_at, out);
        return;
    }
    red_ctx c = {.kind = RED_UNSCALE, .g = g, .n = n, .inv_scale = inv_scale,
                 .near_overflow_at = near_overflow_at};
    red_run(&c);
    *out = c.part[0];
}
