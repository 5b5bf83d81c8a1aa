/* kernels/generic/fused.c: fused passes, the portable reference.
 *
 * Entry points: mxp_generic_bias_act_store, mxp_generic_gemm_epi,
 * mxp_generic_act_bwd_store, mxp_generic_bias_grad_typed (contracts in
 * kernels/kernels.h), and mxp_epilogue_rows / mxp_epilogue_block /
 * mxp_epilogue_finish / mxp_act_bwd_range, the loops that every table's
 * version runs (the AVX-512 one splits the work over the thread pool, or
 * runs it inside its GEMM per block of C, and calls them per part with its
 * own table).
 *
 * How it stays bit-identical to the unfused sequence: the rows are cut into
 * pieces of at most EPI_SEG elements (whole rows when a row fits, else
 * segments of one row), and each piece goes through the unfused kernels of
 * the given table one after the other while it is in L1: add_bias,
 * convert, absmax, then (with an activation) the widening convert, the
 * activation, the convert into a_type and absmax. Every output element is
 * computed by the same kernel from the same inputs as in the unfused pass
 * (those kernels are element-wise, add_bias row-wise per element), and the
 * absmax / non-finite count of a tensor is the max / sum over its pieces,
 * which is exact in any order. The backward pass (act_bwd_store) is the
 * same idea over plain element ranges: widen dy and the saved tensor, the
 * activation's backward, convert into dx_type, absmax. A piece is far below the size at which a
 * table's element-wise kernels use the thread pool, so they run inline.
 */
#include "kernels/generic/generic.h"

#include <string.h>

enum { EPI_SEG = MXP_EPI_SEG };

static void *elem_at(void *base, mxp_dtype t, size_t i) {
    return (unsigned char *)base + i * mxp_dtype_info(t)->size;
}

typedef void (*act_fwd_fn)(float *y, const float *x, size_t n);

static act_fwd_fn act_of(const mxp_kernels *k, mxp_act a) {
    switch (a) {
    case MXP_ACT_RELU: return k->relu_fwd;
    case MXP_ACT_GELU: return k->gelu_fwd;
    case MXP_ACT_TANH: return k->tanh_fwd;
    default: return NULL;
    }
}

/* One piece: `rows` rows of `w` elements starting at element `off` of the
 * tensors, bias columns from c0 (mxp_epi_piece_fn). */
static void piece(const mxp_kernels *k, const mxp_epilogue *e, size_t off, int64_t rows,
                  int64_t w, int64_t c0, mxp_epilogue_part *p, float *tx, float *ta) {
    const size_t n = (size_t)rows * (size_t)w;
    float *y = e->y + off;
    k->add_bias(y, e->bias ? e->bias + c0 : NULL, rows, w);
    void *yo = elem_at(e->y_out, e->y_type, off);
    if (yo != (void *)y) {
        if (e->y_type == MXP_DTYPE_F32) memcpy(yo, y, n * sizeof(float));
        else k->convert(e->y_type, yo, MXP_DTYPE_F32, y, n);
    }
    int64_t nf = 0;
    float am;
    k->absmax(y, n, &am, &nf);
    if (am > p->y_amax) p->y_amax = am;
    p->y_nonfinite += nf;
    act_fwd_fn f = act_of(k, e->act);
    if (!f) return;
    const float *x = y;
    if (e->y_type != MXP_DTYPE_F32) {
        k->convert(MXP_DTYPE_F32, tx, e->y_type, yo, n);
        x = tx;
    }
    float *a = e->a_type == MXP_DTYPE_F32 ? (float *)elem_at(e->a_out, e->a_type, off) : ta;
    f(a, x, n);
    if (e->a_type != MXP_DTYPE_F32)
        k->convert(e->a_type, elem_at(e->a_out, e->a_type, off), MXP_DTYPE_F32, a, n);
    nf = 0;
    k->absmax(a, n, &am, &nf);
    if (am > p->a_amax) p->a_amax = am;
    p->a_nonfinite += nf;
}

void mxp_epilogue_block(const mxp_kernels *k, mxp_epi_piece_fn fn, const mxp_epilogue *e,
                        int64_t r0, int64_t r1, int64_t c0, int64_t c1, mxp_epilogue_part *p) {
    float tx[MXP_EPI_SEG], ta[MXP_EPI_SEG];
    if (!fn) fn = piece;
    const int64_t C = e->C;
    if (C <= 0 || r1 <= r0 || c1 <= c0) return;
    if (c0 == 0 && c1 == C && C <= EPI_SEG) { /* whole rows */
        const int64_t per = EPI_SEG / C;
        for (int64_t r = r0; r < r1; r += per) {
            const int64_t rows = r1 - r < per ? r1 - r : per;
            fn(k, e, (size_t)r * (size_t)C, rows, C, 0, p, tx, ta);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) /* segments of one row */
        for (int64_t c = c0; c < c1; c += EPI_SEG) {
            const int64_t w = c1 - c < EPI_SEG ? c1 - c : EPI_SEG;
            fn(k, e, (size_t)r * (size_t)C + (size_t)c, 1, w, c, p, tx, ta);
        }
}

void mxp_epilogue_rows(const mxp_kernels *k, mxp_epi_piece_fn fn, const mxp_epilogue *e,
                       int64_t r0, int64_t r1, mxp_epilogue_part *p) {
    memset(p, 0, sizeof *p);
    mxp_epilogue_block(k, fn, e, r0, r1, 0, e->C, p);
}

void mxp_epilogue_finish(mxp_epilogue *e, const mxp_epilogue_part *parts, int count) {
    mxp_epilogue_part t = {0};
    for (int i = 0; i < count; i++) {
        const mxp_epilogue_part *o = &parts[i];
        if (o->y_amax > t.y_amax) t.y_amax = o->y_amax;
        if (o->a_amax > t.a_amax) t.a_amax = o->a_amax;
        t.y_nonfinite += o->y_nonfinite;
        t.a_nonfinite += o->a_nonfinite;
    }
    if (e->y_amax) *e->y_amax = t.y_amax;
    if (e->y_nonfinite) *e->y_nonfinite = t.y_nonfinite;
    if (e->a_amax) *e->a_amax = t.a_amax;
    if (e->a_nonfinite) *e->a_nonfinite = t.a_nonfinite;
}

void mxp_generic_bias_act_store(mxp_epilogue *e) {
    mxp_epilogue_part p;
    mxp_epilogue_rows(mxp_kernels_generic(), NULL, e, 0, e->B, &p);
    mxp_epilogue_finish(e, &p, 1);
}

/* The reference: the two calls its contract names (kernels.h). */
void mxp_generic_gemm_epi(const mxp_gemm_args *g, mxp_epilogue *e) {
    mxp_generic_gemm(g);
    mxp_generic_bias_act_store(e);
}

typedef void (*act_bwd_fn)(float *dx, const float *dy, const float *s, size_t n);

static act_bwd_fn act_bwd_of(const mxp_kernels *k, mxp_act a) {
    switch (a) {
    case MXP_ACT_RELU: return k->relu_bwd;
    case MXP_ACT_GELU: return k->gelu_bwd;
    case MXP_ACT_TANH: return k->tanh_bwd;
    default: return NULL;
    }
}

/* A read-only FP32 view of n elements of buf (dtype t) at element off. */
static const float *view_at(const mxp_kernels *k, mxp_dtype t, const void *buf, size_t off,
                            size_t n, float *tmp) {
    const void *p = (const unsigned char *)buf + off * mxp_dtype_info(t)->size;
    if (t == MXP_DTYPE_F32) return p;
    k->convert(MXP_DTYPE_F32, tmp, t, p, n);
    return tmp;
}

/* One piece of act_bwd_store: elements [off, off + n) (mxp_bwd_piece_fn). */
static void bwd_piece(const mxp_kernels *k, const mxp_act_bwd *e, size_t off, size_t n,
                      float *amax, int64_t *nonfinite, float *tdy, float *ts, float *tdx) {
    act_bwd_fn f = act_bwd_of(k, e->act);
    if (!f) return;
    const float *dy = view_at(k, e->dy_type, e->dy, off, n, tdy);
    const float *s = view_at(k, e->s_type, e->s, off, n, ts);
    void *dxo = elem_at(e->dx, e->dx_type, off);
    float *dx = e->dx_type == MXP_DTYPE_F32 ? (float *)dxo : tdx;
    f(dx, dy, s, n);
    if (e->dx_type != MXP_DTYPE_F32) k->convert(e->dx_type, dxo, MXP_DTYPE_F32, dx, n);
    int64_t nf = 0;
    float am;
    k->absmax(dx, n, &am, &nf);
    if (am > *amax) *amax = am;
    *nonfinite += nf;
}

void mxp_act_bwd_range(const mxp_kernels *k, mxp_bwd_piece_fn fn, const mxp_act_bwd *e,
                       size_t lo, size_t hi, float *amax, int64_t *nonfinite) {
    float tdy[MXP_EPI_SEG], ts[MXP_EPI_SEG], tdx[MXP_EPI_SEG];
    if (!fn) fn = bwd_piece;
    *amax = 0.0f;
    *nonfinite = 0;
    for (size_t off = lo; off < hi; off += EPI_SEG)
        fn(k, e, off, hi - off < EPI_SEG ? hi - off : EPI_SEG, amax, nonfinite, tdy, ts, tdx);
}

void mxp_generic_act_bwd_store(mxp_act_bwd *e) {
    float amax;
    int64_t nf;
    mxp_act_bwd_range(mxp_kernels_generic(), NULL, e, 0, e->n, &amax, &nf);
    if (e->dx_amax) *e->dx_amax = amax;
    if (e->dx_nonfinite) *e->dx_nonfinite = nf;
}

/* The reference adds row by row into dbias (rowwise.c), so widening a row
 * segment at a time and adding it is the same sequence of additions. */
void mxp_generic_bias_grad_typed(float *dbias, mxp_dtype t, const void *dy, int64_t B,
                                 int64_t C) {
    if (t == MXP_DTYPE_F32) {
        mxp_generic_bias_grad(dbias, dy, B, C);
        return;
    }
    float tmp[EPI_SEG];
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c += EPI_SEG) {
            const int64_t w = C - c < EPI_SEG ? C - c : EPI_SEG;
            mxp_convert(MXP_DTYPE_F32, tmp, t,
                        (const unsigned char *)dy +
                            ((size_t)b * (size_t)C + (size_t)c) * mxp_dtype_info(t)->size,
                        (size_t)w);
            mxp_generic_bias_grad(dbias + c, tmp, 1, w);
        }
}
