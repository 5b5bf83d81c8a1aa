/* kernels/x86_avx512/loops_split.h: FP32 GELU and GELU backward over a
 * piece, with erf's large branch run only on the lanes that take it.
 * Include only from files compiled with the AVX-512 flags.
 *
 * Entry points (static inline, used by loops_fused.c and loops_eltwise.c):
 * split_gelu and split_gelu_grad, each over at most SPLIT_MAX elements with
 * a split_buf of scratch.
 *
 * Why: v_erf (loops_simd.h) skips its large branch only when all 16 lanes
 * are small (|x| < 0.921875); for N(0, 1)-like pre-activations nearly every
 * vector holds a large lane, so the small polynomial and the large one
 * (11 terms and an exp) both run on all 16 lanes. Here a piece goes
 * through three loops:
 *   1. every vector: the small branch on all lanes, the result stored; the
 *      inputs of its large lanes appended, dense, to a side buffer
 *      (vcompressps into a register, then a full-vector store) and the lane
 *      mask kept. A vector with no large lane appends nothing; one whose
 *      lanes are all large takes the large branch at once (so the
 *      extremes, all small or all large, cost about what v_erf costs);
 *   2. the dense buffer, 16 large lanes per vector: the large branch;
 *   3. every vector of the piece: its large lanes' results expanded back
 *      into place (a register vexpandps and a masked store).
 * Each lane gets exactly the operations that v_erf and the formula around
 * it (v_gelu_of, v_gelu_deriv_of) give it per vector: the small branch's
 * result for a small lane, the large branch's for a large one (NaN lanes
 * are large, as in v_erf), so the bits are those of v_gelu and v_gelu_grad
 * (tests/test_act_split.c). The scan (amax_add) of a small lane is taken
 * in loop 1, of a large one in loop 2. Tanh (cut at 0.625) was split the
 * same way and was slower on N(0, 1.5) inputs (docs/results/kernels-passes.md), so it
 * stays per vector.
 */
#ifndef MIXPREC_KERNELS_AVX512_LOOPS_SPLIT_H
#define MIXPREC_KERNELS_AVX512_LOOPS_SPLIT_H

#include "kernels/x86_avx512/loops_simd.h"

enum { SPLIT_MAX = 1024 };

/* Scratch of one piece (12.4 KiB: on the caller's stack). Dense arrays have
 * 16 floats of slack for the full-vector stores. */
typedef struct split_buf {
    float x[SPLIT_MAX + 16];      /* the large lanes' input; after loop 2 their results */
    float dy[SPLIT_MAX + 16];     /* backward: their dy */
    float xpdf[SPLIT_MAX + 16];   /* backward: their x phi(x) */
    __mmask16 lg[SPLIT_MAX / 16]; /* per vector of the piece: the lanes left to loop 2 */
} split_buf;

/* Append lanes lg of v at d + at (dense). */
static inline void split_push(float *d, size_t at, __mmask16 lg, __m512 v) {
    _mm512_storeu_ps(d + at, _mm512_maskz_compress_ps(lg, v));
}

/* Loop 3: out[i] for the lanes lg[i / 16] of every vector from the dense
 * results r, in order. */
static inline void split_expand(float *out, size_t n, const __mmask16 *lg, const float *r) {
    size_t at = 0;
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = lg[i / 16];
        _mm512_mask_storeu_ps(out + i, k, _mm512_maskz_expand_ps(k, _mm512_loadu_ps(r + at)));
        at += (size_t)__builtin_popcount(k);
    }
}

/* out[i] = v_gelu(in[i]) for i < n <= SPLIT_MAX, in = src read by
 * load_wide(t); with acc, the scan of out. out may alias src (FP32). */
static inline __attribute__((always_inline)) void split_gelu(float *out, mxp_dtype t,
                                                            const void *src, size_t n,
                                                            amax_acc *acc, split_buf *b) {
    const __m512 c = _mm512_set1_ps(V_INV_SQRT2);
    size_t cnt = 0;
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __m512 v = load_wide(t, src, i, m);
        const __m512 x = _mm512_mul_ps(v, c);
        __mmask16 lg = m & (__mmask16)~v_erf_small_lanes(x);
        __m512 g;
        if (lg == m) { /* all large: at once */
            g = v_gelu_of(v, v_erf_large(x));
            lg = 0;
        } else {
            g = v_gelu_of(v, v_erf_small(x));
            if (lg) {
                split_push(b->x, cnt, lg, v);
                cnt += (size_t)__builtin_popcount(lg);
            }
        }
        b->lg[i / 16] = lg;
        _mm512_mask_storeu_ps(out + i, m, g);
        if (acc) amax_add(acc, g, m & (__mmask16)~lg);
    }
    if (cnt == 0) return;
    for (size_t j = 0; j < cnt; j += 16) {
        const __mmask16 m = lanes16(cnt - j);
        const __m512 v = _mm512_maskz_loadu_ps(m, b->x + j);
        const __m512 g = v_gelu_of(v, v_erf_large(_mm512_mul_ps(v, c)));
        _mm512_storeu_ps(b->x + j, g);
        if (acc) amax_add(acc, g, m);
    }
    split_expand(out, n, b->lg, b->x);
}

/* out[i] = v_gelu_grad(dy[i], s[i]) for i < n <= SPLIT_MAX (dy, s read by
 * load_wide(dt), load_wide(st)); with acc, the scan of out. out may alias
 * dy or s (FP32). */
static inline __attribute__((always_inline)) void split_gelu_grad(float *out, mxp_dtype dt,
                                                                 const void *dy, mxp_dtype st,
                                                                 const void *s, size_t n,
                                                                 amax_acc *acc, split_buf *b) {
    const __m512 c = _mm512_set1_ps(V_INV_SQRT2);
    size_t cnt = 0;
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = lanes16(n - i);
        const __m512 d = load_wide(dt, dy, i, m);
        const __m512 v = load_wide(st, s, i, m);
        const __m512 x = _mm512_mul_ps(v, c);
        const __m512 xp = v_gelu_xpdf(v);
        __mmask16 lg = m & (__mmask16)~v_erf_small_lanes(x);
        __m512 g;
        if (lg == m) { /* all large: at once */
            g = _mm512_mul_ps(d, v_gelu_deriv_of(v_erf_large(x), xp));
            lg = 0;
        } else {
            g = _mm512_mul_ps(d, v_gelu_deriv_of(v_erf_small(x), xp));
            if (lg) {
                split_push(b->x, cnt, lg, x);
                split_push(b->xpdf, cnt, lg, xp);
                split_push(b->dy, cnt, lg, d);
                cnt += (size_t)__builtin_popcount(lg);
            }
        }
        b->lg[i / 16] = lg;
        _mm512_mask_storeu_ps(out + i, m, g);
        if (acc) amax_add(acc, g, m & (__mmask16)~lg);
    }
    if (cnt == 0) return;
    for (size_t j = 0; j < cnt; j += 16) {
        const __mmask16 m = lanes16(cnt - j);
        const __m512 x = _mm512_maskz_loadu_ps(m, b->x + j);
        const __m512 xp = _mm512_maskz_loadu_ps(m, b->xpdf + j);
        const __m512 d = _mm512_maskz_loadu_ps(m, b->dy + j);
        const __m512 g = _mm512_mul_ps(d, v_gelu_deriv_of(v_erf_large(x), xp));
        _mm512_storeu_ps(b->x + j, g);
        if (acc) amax_add(acc, g, m);
    }
    split_expand(out, n, b->lg, b->x);
}

#endif /* MIXPREC_KERNELS_AVX512_LOOPS_SPLIT_H */
