/* kernels/x86_avx512/loops_simd.h: vector helpers shared by the AVX-512
 * hot loops (loops_*.c): lane masks, the MXCSR guard, horizontal sums,
 * exact widening loads, the in-register scan, vector exp / erf / tanh (erf
 * also as its two branches, for loops_split.h) and the
 * activation formulas. Include only from files compiled with the
 * AVX-512 flags of CMakeLists.txt.
 *
 * Vector math (static inline below). Accuracy was measured exhaustively,
 * over all 2^32 FP32 inputs, against the double-precision libm function
 * rounded to FP32 ("ulp" = distance in representable floats; default
 * MXCSR, so subnormal results are kept):
 *   v_exp   e^x: Cody-Waite reduction, degree-7 Taylor, vscalefps. <= 1 ulp
 *           (<= 1 ulp from glibc expf); NaN propagates, +Inf -> +Inf,
 *           -Inf -> +0, overflow -> +Inf, underflow -> subnormal or 0.
 *   v_erf   erf(x): |x| < 0.921875: x + x Q(x^2) (degree 6, fitted);
 *           up to 4: 1 - exp(-x^2 + G(|x|)), G ~ log erfc + x^2 (degree 10,
 *           fitted; x^2 split exactly); beyond: +-1. <= 1 ulp (<= 1 ulp
 *           from glibc 2.36 erff); NaN propagates, erf(+-Inf) = +-1.
 *   v_tanh  tanh(x): |x| < 0.625: x + x s P(s), s = x^2 (degree 5, fitted);
 *           else sign(x) (1 - 2 / (e^(2|x|) + 1)). <= 1 ulp (<= 2 ulp from
 *           glibc tanhf); NaN propagates, tanh(+-Inf) = +-1.
 * Coefficients were fitted (Lawson-weighted least squares on Chebyshev
 * nodes, mpmath targets) and rounded to FP32. Explicit FMAs are used inside
 * these functions; every loop that claims bit-exactness with the generic
 * kernels uses separate multiplies and adds in the generic order instead.
 *
 * MXCSR: kernels that must see and produce subnormals whatever the caller's
 * flush-to-zero setting (FP16 conversions, the fused unscale pass) bracket
 * their work with mxcsr_exact_enter/leave (see base/fpenv.c).
 */
#ifndef MIXPREC_KERNELS_AVX512_LOOPS_SIMD_H
#define MIXPREC_KERNELS_AVX512_LOOPS_SIMD_H

#include <immintrin.h>

#include "kernels/threads.h"
#include "kernels/x86_avx512/loops.h"

/* ---- shared helpers ---------------------------------------------------- */

/* Mask of the first n (< 16) lanes, or all 16 when n >= 16. */
static inline __mmask16 lanes16(size_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* ---- splitting a pass over the kernel thread pool (see loops.h) -------- */
enum {
    PAR_MIN = MXP_AVX512_PAR_MIN,
    PAR_ALIGN = MXP_AVX512_PAR_ALIGN,
    RED_PARTS = MXP_AVX512_RED_PARTS
};

/* Range i of `count` near-equal ranges of [0, n). */
static inline void par_range(size_t n, int i, int count, size_t *lo, size_t *hi) {
    size_t blocks = (n + PAR_ALIGN - 1) / PAR_ALIGN;
    size_t b0 = blocks * (size_t)i / (size_t)count, b1 = blocks * (size_t)(i + 1) / (size_t)count;
    *lo = b0 * PAR_ALIGN < n ? b0 * PAR_ALIGN : n;
    *hi = b1 * PAR_ALIGN < n ? b1 * PAR_ALIGN : n;
}

/* Run fn(ctx, i, count) for an element-wise pass over n elements: inline
 * with count 1 below PAR_MIN, else one range per pool thread. */
static inline void par_run(size_t n, mxp_parallel_fn fn, void *ctx) {
    if (n < PAR_MIN) fn(ctx, 0, 1);
    else mxp_threads_run(mxp_threads_max(), fn, ctx);
}

/* Lanes k of element i of a [B, C] matrix src stored in dtype t, as FP32. */
typedef __m512 (*v_col_load)(mxp_dtype t, const void *src, size_t i, __mmask16 k);

/* dbias[c] += sum over b of src[b][c]: columns in blocks of 64, each
 * block's sums formed over the rows in order (b = 0, 1, ...) from zero in
 * registers, then added to dbias once. The one loop of bias_grad
 * (loops_rows.c, FP32 rows) and bias_grad_typed (loops_fused.c, rows
 * widened by `load`); always inlined, so each caller's constant loader is
 * inlined too. */
static inline __attribute__((always_inline)) void v_col_sums_add(float *dbias, mxp_dtype t,
                                                                 const void *src, int64_t B,
                                                                 int64_t C, v_col_load load) {
    if (C <= 0 || B <= 0) return;
    const size_t n = (size_t)C;
    size_t c = 0;
    for (; c + 64 <= n; c += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
        for (int64_t b = 0; b < B; b++) {
            const size_t r = (size_t)b * n + c;
            a0 = _mm512_add_ps(a0, load(t, src, r, 0xffff));
            a1 = _mm512_add_ps(a1, load(t, src, r + 16, 0xffff));
            a2 = _mm512_add_ps(a2, load(t, src, r + 32, 0xffff));
            a3 = _mm512_add_ps(a3, load(t, src, r + 48, 0xffff));
        }
        _mm512_storeu_ps(dbias + c, _mm512_add_ps(_mm512_loadu_ps(dbias + c), a0));
        _mm512_storeu_ps(dbias + c + 16, _mm512_add_ps(_mm512_loadu_ps(dbias + c + 16), a1));
        _mm512_storeu_ps(dbias + c + 32, _mm512_add_ps(_mm512_loadu_ps(dbias + c + 32), a2));
        _mm512_storeu_ps(dbias + c + 48, _mm512_add_ps(_mm512_loadu_ps(dbias + c + 48), a3));
    }
    for (; c < n; c += 16) {
        __mmask16 k = lanes16(n - c);
        __m512 a = _mm512_setzero_ps();
        for (int64_t b = 0; b < B; b++) a = _mm512_add_ps(a, load(t, src, (size_t)b * n + c, k));
        _mm512_mask_storeu_ps(dbias + c, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, dbias + c), a));
    }
}

/* Lanes k of element i of buf (dtype t: F32, BF16 or F16) as FP32, exactly. */
static inline __m512 load_wide(mxp_dtype t, const void *buf, size_t i, __mmask16 k) {
    if (t == MXP_DTYPE_F32) return _mm512_maskz_loadu_ps(k, (const float *)buf + i);
    __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)buf + i);
    if (t == MXP_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* The scan of a piece in registers (loops_fused.c, loops_split.h),
 * cheaply: the largest |v| bit pattern (for non-negative floats the
 * unsigned order of the bits is the order of the values; +Inf and NaN
 * patterns lie above every finite one). When that is a non-finite pattern,
 * amax_fold (loops_fused.c) scans the piece (FP32, in L1) again with
 * absmax_range's rules (mxp_avx512_absmax): finite values only, the rest
 * counted. Either way the result is absmax's. */
typedef struct amax_acc {
    __m512i bits;
} amax_acc;

static inline void amax_init(amax_acc *a) { a->bits = _mm512_setzero_si512(); }

static inline void amax_add(amax_acc *a, __m512 v, __mmask16 k) {
    a->bits = _mm512_mask_max_epu32(a->bits, k, a->bits, _mm512_castps_si512(_mm512_abs_ps(v)));
}

/* MXCSR bits: FTZ (bit 15) and DAZ (bit 6). */
#define MXP_MXCSR_FTZ_DAZ 0x8040u

/* Clear FTZ/DAZ for the duration of a kernel that must keep subnormals;
 * returns the caller's MXCSR for mxcsr_exact_leave. Costs one stmxcsr
 * (and an ldmxcsr pair only when flushing was on). */
static inline unsigned mxcsr_exact_enter(void) {
    unsigned csr = _mm_getcsr();
    if (csr & MXP_MXCSR_FTZ_DAZ) _mm_setcsr(csr & ~MXP_MXCSR_FTZ_DAZ);
    return csr;
}

static inline void mxcsr_exact_leave(unsigned csr) {
    if (csr & MXP_MXCSR_FTZ_DAZ) _mm_setcsr(csr);
}

/* Horizontal sums of the lanes (fixed tree order). */
static inline float hsum_ps(__m512 v) { return _mm512_reduce_add_ps(v); }
static inline double hsum_pd(__m512d v) { return _mm512_reduce_add_pd(v); }

/* Widen 16 floats to two vectors of 8 doubles (exact). */
static inline __m512d lo_pd(__m512 v) {
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
static inline __m512d hi_pd(__m512 v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* e^x (see the file comment for accuracy and special values). */
static inline __m512 v_exp(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
    const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    /* Clamp keeps the reduction finite; min/max return x itself for NaN. */
    x = _mm512_min_ps(_mm512_set1_ps(100.0f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-160.0f), x);
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, ln2_hi, x);
    r = _mm512_fnmadd_ps(k, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}

/* erf(x) in two branches, lane by lane; v_erf blends them. Each lane's
 * result is that of its branch alone, so a loop may run the large branch
 * only on the lanes that take it (loops_split.h) and get v_erf's bits. */

/* The lanes that take the small branch: |x| < 0.921875 (NaN: not small). */
static inline __mmask16 v_erf_small_lanes(__m512 x) {
    return _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0.921875f), _CMP_LT_OQ);
}

/* The small branch: x + x Q(x^2). */
static inline __m512 v_erf_small(__m512 x) {
    __m512 s = _mm512_mul_ps(x, x);
    __m512 q = _mm512_set1_ps(8.39780187e-05f);
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(-0.000814980711f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(0.00520171598f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(-0.0268597025f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(0.112837017f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(-0.376126349f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(0.128379166f));
    return _mm512_fmadd_ps(x, q, x);
}

/* The large branch: erf = 1 - erfc, erfc(t) = exp(-t^2 + G(u)) with
 * t = min(|x|, 4), u = (t - 2.4609375) / 1.5390625 and G ~ log erfc(t) + t^2;
 * t^2 is split exactly (hi + lo) so the exponent keeps its precision;
 * +-1 from |x| >= 4. NaN lanes: G(NaN) = NaN flows through exp and the
 * subtraction, so the result is NaN. */
static inline __m512 v_erf_large(__m512 x) {
    const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x80000000));
    __m512 t = _mm512_abs_ps(x);
    __m512 tc = _mm512_min_ps(_mm512_set1_ps(4.0f), t); /* NaN stays NaN */
    __m512 u = _mm512_mul_ps(_mm512_sub_ps(tc, _mm512_set1_ps(2.4609375f)),
                             _mm512_set1_ps(1.0f / 1.5390625f));
    __m512 r = _mm512_set1_ps(-4.0807613e-06f);
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(-1.93907704e-06f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(6.09844101e-05f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(-0.00027818323f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(0.00106901547f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(-0.00379176671f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(0.0126219597f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(-0.040841911f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(0.13596119f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(-0.549621165f));
    r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(-1.54295242f));
    __m512 t2_hi = _mm512_mul_ps(tc, tc);
    __m512 t2_lo = _mm512_fmsub_ps(tc, tc, t2_hi);
    r = _mm512_sub_ps(_mm512_sub_ps(r, t2_hi), t2_lo);
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f), v_exp(r));
    __mmask16 is_one = _mm512_cmp_ps_mask(t, _mm512_set1_ps(4.0f), _CMP_GE_OQ);
    big = _mm512_mask_blend_ps(is_one, big, _mm512_set1_ps(1.0f));
    return _mm512_or_ps(big, _mm512_and_ps(x, sign_mask)); /* copysign */
}

/* erf(x) (see the file comment): the small branch alone when every lane
 * takes it, else both, blended. */
static inline __m512 v_erf(__m512 x) {
    __m512 small = v_erf_small(x);
    __mmask16 is_small = v_erf_small_lanes(x);
    if (is_small == 0xffff) return small;
    return _mm512_mask_blend_ps(is_small, v_erf_large(x), small);
}

/* tanh(x) (see the file comment). */
static inline __m512 v_tanh(__m512 x) {
    const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x80000000));
    __m512 t = _mm512_abs_ps(x);
    __m512 s = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(0.00229894021f);
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-0.00835000724f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(0.0217709951f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-0.0539595485f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(0.133333057f));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-0.333333343f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(x, s), p, x);
    __mmask16 is_small = _mm512_cmp_ps_mask(t, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    if (is_small == 0xffff) return small;
    __m512 e = v_exp(_mm512_add_ps(t, t));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f),
                                             _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = _mm512_or_ps(big, _mm512_and_ps(x, sign_mask));
    return _mm512_mask_blend_ps(is_small, big, small);
}

/* ---- activations per vector: the one home of their formulas (used by
 * loops_eltwise.c and the fused passes of loops_fused.c). Each is the
 * generic kernel's formula in its order with separate multiplies and adds;
 * only erf/exp/tanh come from the vector math above. ---- */

#define V_INV_SQRT2 0.70710678118654752440f
#define V_INV_SQRT2PI 0.39894228040143267794f

/* relu: v <= 0 -> +0 (also -0 -> +0); NaN compares false and is kept. */
static inline __m512 v_relu(__m512 v) {
    const __m512 zero = _mm512_setzero_ps();
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), v, zero);
}

/* relu backward: dy where x > 0, else +0 (lanes outside k: +0). */
static inline __m512 v_relu_grad(__m512 dy, __m512 x, __mmask16 k) {
    __mmask16 gt = _mm512_mask_cmp_ps_mask(k, x, _mm512_setzero_ps(), _CMP_GT_OQ);
    return _mm512_maskz_mov_ps(gt, dy);
}

/* exact GELU: (0.5 x) (1 + erf(x / sqrt 2)), from e = erf(x / sqrt 2) */
static inline __m512 v_gelu_of(__m512 v, __m512 e) {
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v),
                         _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static inline __m512 v_gelu(__m512 v) {
    return v_gelu_of(v, v_erf(_mm512_mul_ps(v, _mm512_set1_ps(V_INV_SQRT2))));
}

/* GELU's derivative: Phi(x) + x phi(x) (also the entries of the
 * derivative tables of loops_act16.c), from e = erf(x / sqrt 2) and
 * xpdf = x phi(x) (v_gelu_xpdf). */
static inline __m512 v_gelu_xpdf(__m512 v) {
    __m512 pdf = _mm512_mul_ps(_mm512_set1_ps(V_INV_SQRT2PI),
                               v_exp(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(-0.5f), v), v)));
    return _mm512_mul_ps(v, pdf);
}

static inline __m512 v_gelu_deriv_of(__m512 e, __m512 xpdf) {
    __m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    return _mm512_add_ps(cdf, xpdf);
}

static inline __m512 v_gelu_deriv(__m512 v) {
    return v_gelu_deriv_of(v_erf(_mm512_mul_ps(v, _mm512_set1_ps(V_INV_SQRT2))), v_gelu_xpdf(v));
}

/* GELU backward: dy (Phi(x) + x phi(x)) */
static inline __m512 v_gelu_grad(__m512 dy, __m512 v) {
    return _mm512_mul_ps(dy, v_gelu_deriv(v));
}

/* tanh backward from the output y: dy (1 - y^2) */
static inline __m512 v_tanh_grad(__m512 dy, __m512 y) {
    __m512 d = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(y, y));
    return _mm512_mul_ps(dy, d);
}

#endif /* MIXPREC_KERNELS_AVX512_LOOPS_SIMD_H */
