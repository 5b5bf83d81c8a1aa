/* kernels/x86_avx512/loops_fused.c: the AVX-512 fused passes.
 *
 * Entry points: mxp_avx512_bias_act_store, mxp_avx512_act_bwd_store,
 * mxp_avx512_bias_grad_typed (contracts in kernels/kernels.h), and
 * mxp_avx512_epilogue_block, the forward pass over one block of C that the
 * GEMM runs after the block's last K block (gemm_epi, gemm.c). The loops
 * over pieces of at most MXP_EPI_SEG elements are the reference's
 * (mxp_epilogue_rows, mxp_act_bwd_range in kernels/generic/fused.c); the
 * pieces are this file's, in registers, for FP32/BF16/FP16 tensors (other
 * dtypes take the reference piece over this table's kernels):
 *   forward: one loop adds the bias and scans y (absmax_range's test:
 *     |v| < Inf counts as finite, max over those), the store into y_type
 *     is mxp_avx512_convert of the piece, a second loop widens the stored
 *     values (exact: a shift for BF16, vcvtph2ps for FP16), applies the
 *     activation (loops_simd.h v_relu / v_gelu / v_tanh, the formulas of
 *     the element-wise kernels) and scans it, then mxp_avx512_convert;
 *   backward: one loop widens dY and the saved tensor, applies the
 *     derivative (v_*_grad) and scans it, then mxp_avx512_convert.
 * A computed GELU or GELU derivative (FP32 inputs, or 16-bit ones without
 * a table) goes through loops_split.h: erf's large branch on the lanes
 * that need it only, the same bits as v_gelu / v_gelu_grad per vector.
 * GELU and tanh of a BF16 / FP16 stored value, and GELU's derivative of a
 * BF16 / FP16 saved input, are looked up instead of computed when
 * loops_act16.c has a table for the thread's MXCSR (entries computed by the
 * same v_gelu / v_tanh / v_gelu_deriv on every pattern, so the same bits;
 * the backward's dy * T[s] is v_gelu_grad's own final multiply). Into a
 * BF16 / FP16 activation the forward looks up the stored bits themselves
 * (act_piece16: no FP32 copy, no convert; the scan from the stored bits and
 * the FP32 table, exactly absmax's result); into FP32 it looks up the FP32
 * values and scans them as before. Forward lookups are scalar loads,
 * backward ones vpgatherdd: each the faster on Zen 4 in its loop.
 * Every value is the same operation on the same operands as in the
 * unfused AVX-512 kernels (add_bias adds, the activations, the converts),
 * and max / count are exact, so the bits are theirs (tests/test_fused.c);
 * the passes saved are the separate add_bias, widen and absmax loops. The
 * backward pass splits [0, n) at PAR_ALIGN boundaries (par_range). Passes of EPI_PAR_MIN elements or more are split
 * into one block of rows per pool thread; the parts' absmax / non-finite
 * counts are combined in part order (max and sum: exact, so the result does
 * not depend on the thread count). The thresholds (below) are lower than
 * the plain element-wise one (PAR_MIN) because these passes do the work of
 * two to seven of those per element.
 */
#include "kernels/x86_avx512/loops_split.h"

#include "kernels/generic/generic.h"

#include <string.h>

/* Pool thresholds (elements): with an activation the pass costs tens of
 * flops per element, so 32K elements (~0.1 ms on one core) pay for a
 * fork/join (microseconds); a plain store + scan (act NONE) is a few
 * cycles per element and forks from 128K on. Below: on the caller. */
enum { EPI_PAR_MIN = 1 << 15, EPI_STORE_PAR_MIN = 1 << 17, EPI_PARTS_MAX = 64 };
_Static_assert((int)SPLIT_MAX >= (int)MXP_EPI_SEG, "a piece fits the split loops' scratch");

/* ---- in-register pieces ---- */

static bool reg_type(mxp_dtype t) {
    return t == MXP_DTYPE_F32 || t == MXP_DTYPE_BF16 || t == MXP_DTYPE_F16;
}

/* Fold the scan of the FP32 piece v [n] into *amax, *nonfinite. */
static inline void amax_fold(const amax_acc *a, const float *v, size_t n, float *amax,
                             int64_t *nonfinite) {
    const uint32_t u = _mm512_reduce_max_epu32(a->bits);
    float m;
    if (u >= 0x7f800000u) { /* a NaN or an infinity in the piece: the exact rules */
        int64_t nf = 0;
        mxp_avx512_absmax(v, n, &m, &nf);
        *nonfinite += nf;
    } else {
        memcpy(&m, &u, sizeof m);
    }
    if (m > *amax) *amax = m;
}

static void *elem_at(void *base, mxp_dtype t, size_t i) {
    return (unsigned char *)base + i * mxp_dtype_info(t)->size;
}

static const void *celem_at(const void *base, mxp_dtype t, size_t i) {
    return (const unsigned char *)base + i * mxp_dtype_info(t)->size;
}

/* The activation loop of epi_piece for activation function F. */
#define ACT_LOOP(F)                                                                  \
    do {                                                                             \
        amax_init(&acc);                                                             \
        for (size_t i = 0; i < n; i += 16) {                                         \
            __mmask16 m = lanes16(n - i);                                            \
            __m512 v = F(load_wide(e->y_type, src, i, m));                           \
            _mm512_mask_storeu_ps(a + i, m, v);                                      \
            amax_add(&acc, v, m);                                                    \
        }                                                                            \
        amax_fold(&acc, a, n, &p->a_amax, &p->a_nonfinite);                          \
    } while (0)

/* out[i] = T[src[i]] for the n 16-bit patterns src (loops_act16.c's
 * tables). Scalar loads: on the development CPU (Zen 4) they beat
 * vpgatherdd (0.28-0.32 vs 0.38 ns per element, one thread, a piece of
 * 1024 N(0, 1.5) BF16 inputs). */
static inline void lookup(float *out, const float *T, const void *src, size_t n) {
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++) out[i] = T[s[i]];
}

/* lookup into out, then its scan folded into *amax, *nonfinite. */
static void lookup_scan(float *out, const float *T, const void *src, size_t n, float *amax,
                        int64_t *nonfinite) {
    lookup(out, T, src, n);
    amax_acc acc;
    amax_init(&acc);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes16(n - i);
        amax_add(&acc, _mm512_maskz_loadu_ps(m, out + i), m);
    }
    amax_fold(&acc, out, n, amax, nonfinite);
}

/* out[i] = T16[src[i]], two entries per 32-bit load and store: on the
 * development CPU (Zen 4) 0.32 ns per element against 0.57 for one 16-bit
 * store per element (one thread, 1024 N(0, 1.5) BF16 inputs; FP32 outputs,
 * lookup above, run at 0.30 either way). */
static inline void lookup16(uint16_t *out, const uint16_t *T16, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        uint32_t s, o;
        memcpy(&s, src + i, sizeof s);
        o = (uint32_t)T16[s & 0xffffu] | (uint32_t)T16[s >> 16] << 16;
        memcpy(out + i, &o, sizeof o);
    }
    if (i < n) out[i] = T16[src[i]];
}

/* Mask of the first n (< 32) 16-bit lanes, or all 32. */
static inline __mmask32 lanes32(size_t n) {
    return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1u);
}

/* The activation of a piece from its 16-bit table T16 straight into ao
 * (a_type BF16 / FP16, no FP32 copy, no convert), and its scan from the
 * stored bits: rounding to nearest is monotone in |a| and symmetric, so
 * when every stored |a| is finite, every FP32 a is finite too and the
 * largest |a| lies among the elements whose stored |a| is the largest;
 * those few are looked up in the FP32 table T. A piece with a stored
 * Inf/NaN (a non-finite a, or a finite one that overflowed the store) is
 * scanned from T in full with absmax's rules (amax_fold). */
static void act_piece16(const float *T, const uint16_t *T16, mxp_dtype at, const uint16_t *src,
                        uint16_t *ao, size_t n, float *ta, mxp_epilogue_part *p) {
    lookup16(ao, T16, src, n);
    const __m512i abs16 = _mm512_set1_epi16(0x7fff);
    __m512i mx = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 32)
        mx = _mm512_max_epu16(mx, _mm512_and_si512(_mm512_maskz_loadu_epi16(lanes32(n - i), ao + i),
                                                   abs16));
    mx = _mm512_max_epu32(_mm512_and_si512(mx, _mm512_set1_epi32(0xffff)),
                          _mm512_srli_epi32(mx, 16));
    const uint32_t top = _mm512_reduce_max_epu32(mx);
    if (top >= (at == MXP_DTYPE_BF16 ? 0x7f80u : 0x7c00u)) {
        lookup_scan(ta, T, src, n, &p->a_amax, &p->a_nonfinite);
        return;
    }
    const __m512i topv = _mm512_set1_epi16((short)top);
    float m = 0.0f;
    for (size_t i = 0; i < n; i += 32) {
        const __mmask32 k = lanes32(n - i);
        __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi16(k, ao + i), abs16);
        for (uint32_t hit = _mm512_mask_cmpeq_epi16_mask(k, v, topv); hit; hit &= hit - 1) {
            float a = T[src[i + (size_t)__builtin_ctz(hit)]];
            a = a < 0.0f ? -a : a;
            if (a > m) m = a;
        }
    }
    if (m > p->a_amax) p->a_amax = m;
}

/* The forward tables of activation a of 16-bit type t for this thread's
 * MXCSR: the FP32 one (*T16 too when the activation is stored as a_type,
 * 16-bit), or NULL (relu, FP32 input, no table): compute it. */
static const float *act_tables(mxp_act a, mxp_dtype t, mxp_dtype a_type, const uint16_t **T16) {
    *T16 = NULL;
    if ((a != MXP_ACT_GELU && a != MXP_ACT_TANH) || t == MXP_DTYPE_F32) return NULL;
    const mxp_act16_fn f = a == MXP_ACT_GELU ? MXP_ACT16_GELU : MXP_ACT16_TANH;
    const unsigned csr = _mm_getcsr();
    const float *T = mxp_avx512_act16_table(f, t, csr);
    if (T && a_type != MXP_DTYPE_F32) *T16 = mxp_avx512_act16_table16(f, t, a_type, csr);
    return T;
}

/* The forward piece (mxp_epi_piece_fn; the file comment). */
static void epi_piece(const mxp_kernels *k, const mxp_epilogue *e, size_t off, int64_t rows,
                      int64_t w, int64_t c0, mxp_epilogue_part *p, float *tx, float *ta) {
    (void)k, (void)tx;
    const size_t n = (size_t)rows * (size_t)w, W = (size_t)w;
    float *y = e->y + off;
    const float *bias = e->bias ? e->bias + c0 : NULL;
    amax_acc acc;
    amax_init(&acc);
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * W;
        for (size_t i = 0; i < W; i += 16) {
            __mmask16 m = lanes16(W - i);
            __m512 v = _mm512_maskz_loadu_ps(m, yr + i);
            if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
            _mm512_mask_storeu_ps(yr + i, m, v);
            amax_add(&acc, v, m);
        }
    }
    amax_fold(&acc, y, n, &p->y_amax, &p->y_nonfinite);
    void *yo = elem_at(e->y_out, e->y_type, off);
    if (yo != (void *)y) mxp_avx512_convert(e->y_type, yo, MXP_DTYPE_F32, y, n);
    if (e->act == MXP_ACT_NONE) return;
    const void *src = e->y_type == MXP_DTYPE_F32 ? (const void *)y : yo;
    void *ao = elem_at(e->a_out, e->a_type, off);
    float *a = e->a_type == MXP_DTYPE_F32 ? (float *)ao : ta;
    const uint16_t *T16;
    const float *T = act_tables(e->act, e->y_type, e->a_type, &T16);
    if (T16) {
        act_piece16(T, T16, e->a_type, src, ao, n, ta, p);
        return;
    }
    if (T) {
        lookup_scan(a, T, src, n, &p->a_amax, &p->a_nonfinite);
    } else if (e->act == MXP_ACT_GELU && mxp_avx512_act_split_enabled()) {
        split_buf b; /* erf's large branch on the large lanes only */
        amax_init(&acc);
        split_gelu(a, e->y_type, src, n, &acc, &b);
        amax_fold(&acc, a, n, &p->a_amax, &p->a_nonfinite);
    } else switch (e->act) { /* one loop per activation: constants stay in registers */
    case MXP_ACT_RELU: ACT_LOOP(v_relu); break;
    case MXP_ACT_GELU: ACT_LOOP(v_gelu); break;
    default: ACT_LOOP(v_tanh); break;
    }
    if (e->a_type != MXP_DTYPE_F32) mxp_avx512_convert(e->a_type, ao, MXP_DTYPE_F32, a, n);
}

/* The loop of bwd_piece with the derivative expression G (of dy, s, m). */
#define BWD_LOOP(G)                                                                  \
    for (size_t i = 0; i < n; i += 16) {                                             \
        __mmask16 m = lanes16(n - i);                                                \
        __m512 dy = load_wide(e->dy_type, e->dy, off + i, m);                        \
        __m512 s = load_wide(e->s_type, e->s, off + i, m);                           \
        __m512 g = G;                                                                \
        _mm512_mask_storeu_ps(dx + i, m, g);                                         \
        amax_add(&acc, g, m);                                                        \
    }

/* The backward piece (mxp_bwd_piece_fn; the file comment). */
static void bwd_piece(const mxp_kernels *k, const mxp_act_bwd *e, size_t off, size_t n,
                      float *amax, int64_t *nonfinite, float *tdy, float *ts, float *tdx) {
    (void)k, (void)tdy, (void)ts;
    void *dxo = elem_at(e->dx, e->dx_type, off);
    float *dx = e->dx_type == MXP_DTYPE_F32 ? (float *)dxo : tdx;
    amax_acc acc;
    amax_init(&acc);
    const float *D = e->act == MXP_ACT_GELU && e->s_type != MXP_DTYPE_F32
                         ? mxp_avx512_act16_table(MXP_ACT16_GELU_DERIV, e->s_type, _mm_getcsr())
                         : NULL;
    if (D) { /* v_gelu_grad's final multiply by its derivative from the table */
        const uint16_t *s = (const uint16_t *)e->s + off; /* s_type: 16-bit */
        for (size_t i = 0; i < n; i += 16) {
            __mmask16 m = lanes16(n - i);
            __m512 dy = load_wide(e->dy_type, e->dy, off + i, m);
            __m512i b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i));
            __m512 g = _mm512_mul_ps(dy, _mm512_i32gather_ps(b, D, 4));
            _mm512_mask_storeu_ps(dx + i, m, g);
            amax_add(&acc, g, m);
        }
    } else if (e->act == MXP_ACT_GELU && mxp_avx512_act_split_enabled()) {
        split_buf b; /* erf's large branch on the large lanes only */
        split_gelu_grad(dx, e->dy_type, celem_at(e->dy, e->dy_type, off), e->s_type,
                        celem_at(e->s, e->s_type, off), n, &acc, &b);
    } else switch (e->act) { /* one loop per derivative: constants stay in registers */
    case MXP_ACT_RELU: BWD_LOOP(v_relu_grad(dy, s, m)); break;
    case MXP_ACT_GELU: BWD_LOOP(v_gelu_grad(dy, s)); break;
    default: BWD_LOOP(v_tanh_grad(dy, s)); break;
    }
    amax_fold(&acc, dx, n, amax, nonfinite);
    if (e->dx_type != MXP_DTYPE_F32) mxp_avx512_convert(e->dx_type, dxo, MXP_DTYPE_F32, dx, n);
}

/* ---- thread parts ---- */

typedef struct epi_ctx {
    const mxp_kernels *k;
    mxp_epi_piece_fn fn;
    const mxp_epilogue *e;
    mxp_epilogue_part part[EPI_PARTS_MAX];
} epi_ctx;

static void epi_task(void *ctx, int i, int count) {
    epi_ctx *c = ctx;
    const int64_t B = c->e->B;
    mxp_epilogue_rows(c->k, c->fn, c->e, B * i / count, B * (i + 1) / count, &c->part[i]);
}

/* This table's piece kernel for e: epi_piece for FP32 / BF16 / FP16
 * tensors, else NULL (the reference piece over this table's kernels). */
static mxp_epi_piece_fn piece_for(const mxp_epilogue *e) {
    const bool reg = reg_type(e->y_type) && (e->act == MXP_ACT_NONE || reg_type(e->a_type));
    return reg ? epi_piece : NULL;
}

int mxp_avx512_epilogue_threads(const mxp_epilogue *e) {
    int count = 1;
    const size_t min = e->act == MXP_ACT_NONE ? EPI_STORE_PAR_MIN : EPI_PAR_MIN;
    if ((size_t)e->B * (size_t)e->C >= min) {
        count = mxp_threads_max();
        if (count > EPI_PARTS_MAX) count = EPI_PARTS_MAX;
        if (count > e->B) count = (int)e->B;
    }
    return count;
}

void mxp_avx512_bias_act_store(mxp_epilogue *e) {
    epi_ctx c = {.k = mxp_kernels_avx512(), .fn = piece_for(e), .e = e};
    const int count = mxp_avx512_epilogue_threads(e);
    if (count > 1) mxp_threads_run(count, epi_task, &c);
    else epi_task(&c, 0, 1);
    mxp_epilogue_finish(e, c.part, count);
}

void mxp_avx512_epilogue_block(const mxp_epilogue *e, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1, mxp_epilogue_part *p) {
    mxp_epilogue_block(mxp_kernels_avx512(), piece_for(e), e, r0, r1, c0, c1, p);
}

typedef struct bwd_ctx {
    const mxp_kernels *k;
    mxp_bwd_piece_fn fn;
    const mxp_act_bwd *e;
    float amax[EPI_PARTS_MAX];
    int64_t nonfinite[EPI_PARTS_MAX];
} bwd_ctx;

static void bwd_task(void *ctx, int i, int count) {
    bwd_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->e->n, i, count, &lo, &hi);
    mxp_act_bwd_range(c->k, c->fn, c->e, lo, hi, &c->amax[i], &c->nonfinite[i]);
}

void mxp_avx512_act_bwd_store(mxp_act_bwd *e) {
    const bool reg = reg_type(e->dy_type) && reg_type(e->s_type) && reg_type(e->dx_type) &&
                     e->act != MXP_ACT_NONE;
    bwd_ctx c = {.k = mxp_kernels_avx512(), .fn = reg ? bwd_piece : NULL, .e = e};
    int count = 1;
    if (e->n >= EPI_PAR_MIN) {
        count = mxp_threads_max();
        if (count > EPI_PARTS_MAX) count = EPI_PARTS_MAX;
    }
    if (count > 1) mxp_threads_run(count, bwd_task, &c);
    else bwd_task(&c, 0, 1);
    for (int i = 1; i < count; i++) {
        if (c.amax[i] > c.amax[0]) c.amax[0] = c.amax[i];
        c.nonfinite[0] += c.nonfinite[i];
    }
    if (e->dx_amax) *e->dx_amax = c.amax[0];
    if (e->dx_nonfinite) *e->dx_nonfinite = c.nonfinite[0];
}

/* Lanes k of element i of dy (any dtype) as FP32: load_wide for FP32 /
 * BF16 / FP16, else this table's convert of those lanes (exact widening). */
static inline __m512 load_any(mxp_dtype t, const void *dy, size_t i, __mmask16 k) {
    if (reg_type(t)) return load_wide(t, dy, i, k);
    float tmp[16] = {0};
    const unsigned n = (unsigned)__builtin_popcount((unsigned)k);
    mxp_avx512_convert(MXP_DTYPE_F32, tmp, t,
                       (const unsigned char *)dy + i * mxp_dtype_info(t)->size, n);
    return _mm512_maskz_loadu_ps(k, tmp);
}

/* mxp_avx512_bias_grad (loops_rows.c) with the rows widened as they are
 * read: the same loop (v_col_sums_add), so the bits are those of bias_grad
 * on the widened copy. */
void mxp_avx512_bias_grad_typed(float *dbias, mxp_dtype t, const void *dy, int64_t B,
                                int64_t C) {
    if (t == MXP_DTYPE_F32)
        mxp_avx512_bias_grad(dbias, dy, B, C);
    else
        v_col_sums_add(dbias, t, dy, B, C, load_any);
}
