/* kernels/x86_avx512/loops_eltwise.c: AVX-512 element-wise kernels on
 * FP32: ReLU, exact (erf) GELU and tanh forward/backward, axpy, scale, and
 * buffer versions of the vector erf/exp for tests.
 *
 * Entry points: mxp_avx512_{relu,gelu,tanh}_{fwd,bwd}, mxp_avx512_axpy,
 * mxp_avx512_scale, mxp_avx512_erf, mxp_avx512_exp (contracts in
 * kernels/kernels.h and loops.h). 16 lanes per step, the tail under a lane
 * mask, so there is no scalar remainder loop; element i is read before it
 * is written, so y may alias x and dx may alias dy. Buffers of PAR_MIN
 * elements or more are split over the kernel thread pool (loops_simd.h).
 *
 * The per-vector formulas live in loops_simd.h (v_relu, v_gelu, ...), shared
 * with the fused passes of loops_fused.c; GELU forward / backward run in
 * pieces through loops_split.h (erf's large branch on the large lanes only,
 * the same bits; mxp_avx512_act_split_enable, defined here, switches that
 * off for tests and benchmarks).
 *
 * Agreement with the generic kernels (kernels/generic/eltwise.c):
 *   bit-exact: relu_fwd/bwd, tanh_bwd, axpy, scale (same operations in the
 *     same order, no FMA contraction);
 *   within the vector math bounds of loops.h: gelu_fwd/bwd (erf, exp:
 *     <= 1 ulp each from glibc), tanh_fwd (<= 2 ulp from glibc tanhf). The
 *     GELU formulas are evaluated in the generic order, so the only
 *     difference is the erf/exp values.
 */
#include "kernels/x86_avx512/loops_split.h"

#include <stdatomic.h>

static atomic_bool split_on = true;

void mxp_avx512_act_split_enable(bool on) {
    atomic_store_explicit(&split_on, on, memory_order_relaxed);
}

bool mxp_avx512_act_split_enabled(void) {
    return atomic_load_explicit(&split_on, memory_order_relaxed);
}

static void relu_fwd_range(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, k, v_relu(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

static void relu_bwd_range(float *dx, const float *dy, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 g = v_relu_grad(_mm512_maskz_loadu_ps(k, dy + i), _mm512_maskz_loadu_ps(k, x + i), k);
        _mm512_mask_storeu_ps(dx + i, k, g);
    }
}

/* GELU and its backward: in pieces of SPLIT_MAX with erf's large lanes
 * apart (loops_split.h), or per vector (v_gelu, v_gelu_grad) when that is
 * switched off; the same bits either way. Tanh stays per vector: split, it
 * was slower (docs/results/kernels-passes.md). */
static void gelu_fwd_range(float *y, const float *x, size_t n) {
    if (mxp_avx512_act_split_enabled()) {
        split_buf b;
        for (size_t i = 0; i < n; i += SPLIT_MAX) {
            const size_t len = n - i < SPLIT_MAX ? n - i : SPLIT_MAX;
            split_gelu(y + i, MXP_DTYPE_F32, x + i, len, NULL, &b);
        }
        return;
    }
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, k, v_gelu(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

static void gelu_bwd_range(float *dx, const float *dy, const float *x, size_t n) {
    if (mxp_avx512_act_split_enabled()) {
        split_buf b;
        for (size_t i = 0; i < n; i += SPLIT_MAX) {
            const size_t len = n - i < SPLIT_MAX ? n - i : SPLIT_MAX;
            split_gelu_grad(dx + i, MXP_DTYPE_F32, dy + i, MXP_DTYPE_F32, x + i, len, NULL, &b);
        }
        return;
    }
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 g = v_gelu_grad(_mm512_maskz_loadu_ps(k, dy + i), _mm512_maskz_loadu_ps(k, x + i));
        _mm512_mask_storeu_ps(dx + i, k, g);
    }
}

static void tanh_fwd_range(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, k, v_tanh(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

static void tanh_bwd_range(float *dx, const float *dy, const float *y, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 g = v_tanh_grad(_mm512_maskz_loadu_ps(k, dy + i), _mm512_maskz_loadu_ps(k, y + i));
        _mm512_mask_storeu_ps(dx + i, k, g);
    }
}

static void axpy_range(float *y, float a, const float *x, size_t n) {
    const __m512 av = _mm512_set1_ps(a);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 p0 = _mm512_mul_ps(av, _mm512_loadu_ps(x + i));
        __m512 p1 = _mm512_mul_ps(av, _mm512_loadu_ps(x + i + 16));
        _mm512_storeu_ps(y + i, _mm512_add_ps(p0, _mm512_loadu_ps(y + i)));
        _mm512_storeu_ps(y + i + 16, _mm512_add_ps(p1, _mm512_loadu_ps(y + i + 16)));
    }
    for (; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        __m512 p = _mm512_mul_ps(av, _mm512_maskz_loadu_ps(k, x + i));
        _mm512_mask_storeu_ps(y + i, k, _mm512_add_ps(p, _mm512_maskz_loadu_ps(k, y + i)));
    }
}

static void scale_range(float *x, float a, size_t n) {
    const __m512 av = _mm512_set1_ps(a);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), av));
        _mm512_storeu_ps(x + i + 16, _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), av));
    }
    for (; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), av));
    }
}

static void erf_range(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, k, v_erf(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

static void exp_range(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, k, v_exp(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

/* ---- entry points: large buffers are split over the kernel thread pool
 * (element-wise, so the bits do not depend on the split) ---- */

typedef enum { EW_RELU_F, EW_RELU_B, EW_GELU_F, EW_GELU_B, EW_TANH_F, EW_TANH_B, EW_AXPY,
               EW_SCALE, EW_ERF, EW_EXP } ew_op;

typedef struct ew_ctx {
    ew_op op;
    float *out;         /* y, dx, or the axpy/scale operand */
    const float *a, *b; /* x; or dy and x (y for tanh_bwd); axpy: x */
    float s;            /* axpy / scale factor */
    size_t n;
} ew_ctx;

static void ew_task(void *ctx, int i, int count) {
    const ew_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    float *o = c->out + lo;
    const float *a = c->a ? c->a + lo : NULL, *b = c->b ? c->b + lo : NULL;
    size_t n = hi - lo;
    switch (c->op) {
    case EW_RELU_F: relu_fwd_range(o, a, n); break;
    case EW_RELU_B: relu_bwd_range(o, a, b, n); break;
    case EW_GELU_F: gelu_fwd_range(o, a, n); break;
    case EW_GELU_B: gelu_bwd_range(o, a, b, n); break;
    case EW_TANH_F: tanh_fwd_range(o, a, n); break;
    case EW_TANH_B: tanh_bwd_range(o, a, b, n); break;
    case EW_AXPY: axpy_range(o, c->s, a, n); break;
    case EW_SCALE: scale_range(o, c->s, n); break;
    case EW_ERF: erf_range(o, a, n); break;
    case EW_EXP: exp_range(o, a, n); break;
    }
}

static void ew_run(ew_op op, float *out, const float *a, const float *b, float s, size_t n) {
    ew_ctx c = {.op = op, .out = out, .a = a, .b = b, .s = s, .n = n};
    par_run(n, ew_task, &c);
}

void mxp_avx512_relu_fwd(float *y, const float *x, size_t n) { ew_run(EW_RELU_F, y, x, NULL, 0, n); }
void mxp_avx512_relu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    ew_run(EW_RELU_B, dx, dy, x, 0, n);
}
void mxp_avx512_gelu_fwd(float *y, const float *x, size_t n) { ew_run(EW_GELU_F, y, x, NULL, 0, n); }
void mxp_avx512_gelu_bwd(float *dx, const float *dy, const float *x, size_t n) {
    ew_run(EW_GELU_B, dx, dy, x, 0, n);
}
void mxp_avx512_tanh_fwd(float *y, const float *x, size_t n) { ew_run(EW_TANH_F, y, x, NULL, 0, n); }
void mxp_avx512_tanh_bwd(float *dx, const float *dy, const float *y, size_t n) {
    ew_run(EW_TANH_B, dx, dy, y, 0, n);
}
void mxp_avx512_axpy(float *y, float a, const float *x, size_t n) { ew_run(EW_AXPY, y, x, NULL, a, n); }
void mxp_avx512_scale(float *x, float a, size_t n) { ew_run(EW_SCALE, x, NULL, NULL, a, n); }
void mxp_avx512_erf(float *y, const float *x, size_t n) { ew_run(EW_ERF, y, x, NULL, 0, n); }
void mxp_avx512_exp(float *y, const float *x, size_t n) { ew_run(EW_EXP, y, x, NULL, 0, n); }
