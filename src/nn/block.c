/* nn/block.c: the GPT-2 transformer block, and the structure, memory plan
 * and initialisation of the GPT layer kinds (embedding, block, lm_head).
 *
 * Entry points: nn_kind_is_ext, nn_ext_validate, nn_ext_build,
 * nn_ext_saved_bytes, nn_ext_scratch_floats, nn_ext_init,
 * nn_block_forward, nn_block_backward (contracts in nn_internal.h).
 *
 * A block (pre-LN, as GPT-2 / nanoGPT), on N = B*T rows of C channels:
 *   a   = ln_1(x)                      layernorm: FP32 statistics
 *   qkv = a Wqkv^T + bqkv              [N, 3C]
 *   y   = attention(qkv)               causal, H heads (attention.c)
 *   r   = x + y Wp^T + bp              residual, FP32 add
 *   f   = gelu(ln_2(r) Wfc^T + bfc)    [N, 4C], exact GELU
 *   out = r + f Wm^T + bm
 * Dtypes follow the precision policy the way autocast does: each matmul
 * result is rounded to the matmul output dtype; tensors kept for backward
 * are stored in the activation dtype (qkv, probabilities, r, pre-GELU f),
 * and matmul operands (ln outputs, y, gelu(f)) in the matmul input dtype
 * (the cast copy autocast keeps; in fp8 mode the BF16 activation dtype,
 * quantised per tensor by the FP8 dense product of block_dense.c). The
 * residual stream between blocks is stored by the driver in the
 * activation dtype, which is where FP16 overflows when activations grow.
 * Gradients between the steps are rounded to the gradient dtype.
 * Saved tensors live in the layer's region of the arena (b->ext[l]);
 * transient FP32 buffers in the scratch b->xs shared by all blocks, carved
 * identically at plan time and at run time by blk_layout / blk_scratch.
 * That scratch is planned for chunks of R rows (whole sequences, default
 * NN_BLOCK_ROWS), not for the batch: forward runs the block chunk by
 * chunk; backward produces the [N, 4C] and [N, 3C] gradients chunk by
 * chunk, keeps them in the gradient dtype for the reductions over all
 * rows, and borrows the driver's idle FP32 buffers (dx32, sa, sb) for the
 * [N, C] ones. Outputs and gradients are bit-identical for every R (only
 * row-independent work is split; reductions are whole or split by
 * independent columns); fp8 mode keeps the whole-batch path.
 * References: Radford et al. 2019; karpathy/nanoGPT model.py (init);
 * karpathy/llm.c train_gpt2.c (forward/backward structure).
 */
#include "nn/nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

bool nn_kind_is_ext(mxp_layer_kind k) {
    return k == MXP_LAYER_EMBEDDING || k == MXP_LAYER_BLOCK || k == MXP_LAYER_LM_HEAD;
}

/* dtype of stored matmul operands: the matmul input dtype, or the
 * activation dtype when that is FP8 (FP8 quantisation is per product). */
static mxp_dtype mm_store(const mxp_precision_policy *p) {
    mxp_dtype t = p->ops[MXP_OP_MATMUL].input;
    return nn_dtype_is_fp8(t) ? p->activation : t;
}

static bool is_fp8_policy(const mxp_precision_policy *p) {
    return nn_dtype_is_fp8(p->ops[MXP_OP_MATMUL].input);
}

/* a*b, SIZE_MAX on overflow (plan_take then fails on the add). */
static size_t mulz(size_t a, size_t b) {
    size_t r;
    return mxp_size_mul(a, b, &r) ? r : SIZE_MAX;
}

/* Reserve n elements of elem bytes at a 64-byte aligned offset. */
static size_t take(size_t *off, size_t n, size_t elem) {
    size_t bytes = mulz(n, elem), a = *off;
    if (a > SIZE_MAX - MXP_ALIGN || bytes == SIZE_MAX) {
        *off = SIZE_MAX;
        return 0;
    }
    a = (a + MXP_ALIGN - 1) & ~(size_t)(MXP_ALIGN - 1);
    *off = a > SIZE_MAX - bytes ? SIZE_MAX : a + bytes;
    return a;
}

/* ---- parameter layout of a block (offsets into the slabs) ---------------------- */

typedef struct blk_par {
    size_t ln1w, ln1b, aw, ab, pw, pb, ln2w, ln2b, fw, fb, mw, mb, end;
} blk_par;

static blk_par blk_params(int64_t C_, size_t base) {
    const size_t C = (size_t)C_;
    blk_par w;
    size_t o = base;
    w.ln1w = o, o += C;
    w.ln1b = o, o += C;
    w.aw = o, o += 3 * C * C;
    w.ab = o, o += 3 * C;
    w.pw = o, o += C * C;
    w.pb = o, o += C;
    w.ln2w = o, o += C;
    w.ln2b = o, o += C;
    w.fw = o, o += 4 * C * C;
    w.fb = o, o += 4 * C;
    w.mw = o, o += 4 * C * C;
    w.mb = o, o += C;
    w.end = o;
    return w;
}

/* ---- saved tensors and scratch ----------------------------------------------- */

typedef struct blk_buf {
    void *ln1, *qkv, *att, *atty, *res1, *ln2, *fch, *fcg;
    float *ln1m, *ln1r, *ln2m, *ln2r;
} blk_buf;

/* Carve the saved tensors of block L for max_batch rows under policy p
 * from base (NULL: sizes only); returns the bytes needed (SIZE_MAX on
 * overflow). */
static size_t blk_layout(const mxp_model *m, const nn_layer *L, const mxp_precision_policy *p,
                         unsigned char *base, blk_buf *o) {
    const size_t N = (size_t)m->spec.max_batch, C = (size_t)L->in;
    const size_t NC = mulz(N, C), at = mxp_dtype_info(p->activation)->size;
    const size_t mt = mxp_dtype_info(mm_store(p))->size;
    size_t off = 0, a[12];
    a[0] = take(&off, NC, mt);                                   /* ln1 */
    a[1] = take(&off, mulz(NC, 3), at);                          /* qkv */
    a[2] = take(&off, mulz(mulz(N, (size_t)L->heads), (size_t)L->T), at); /* att */
    a[3] = take(&off, NC, mt);                                   /* atty */
    a[4] = take(&off, NC, at);                                   /* res1 */
    a[5] = take(&off, NC, mt);                                   /* ln2 */
    a[6] = take(&off, mulz(NC, 4), at);                          /* fch */
    a[7] = take(&off, mulz(NC, 4), mt);                          /* fcg */
    for (int i = 8; i < 12; i++) a[i] = take(&off, N, sizeof(float)); /* ln stats */
    if (base && o) {
        o->ln1 = base + a[0];
        o->qkv = base + a[1];
        o->att = base + a[2];
        o->atty = base + a[3];
        o->res1 = base + a[4];
        o->ln2 = base + a[5];
        o->fch = base + a[6];
        o->fcg = base + a[7];
        o->ln1m = (float *)(void *)(base + a[8]);
        o->ln1r = (float *)(void *)(base + a[9]);
        o->ln2m = (float *)(void *)(base + a[10]);
        o->ln2r = (float *)(void *)(base + a[11]);
    }
    return off;
}

/* Rows per chunk of block L's FP32 scratch under policy p: the whole batch
 * (N) in fp8 mode or when m->blk_rows < 0 (the unchunked path, kept for
 * FP8 and as the tests' reference), else m->blk_rows (0: NN_BLOCK_ROWS)
 * rounded up to whole sequences (attention needs them) and capped at N. */
static int64_t blk_rows(const mxp_model *m, const nn_layer *L, const mxp_precision_policy *p) {
    const int64_t N = m->spec.max_batch, T = L->T;
    if (is_fp8_policy(p) || m->blk_rows < 0) return N;
    int64_t r = m->blk_rows > 0 ? m->blk_rows : NN_BLOCK_ROWS;
    r = r >= N ? N : (r + T - 1) / T * T;
    return r > N ? N : r;
}

/* The unchunked path: FP32 scratch for the whole batch (fp8, tests). */
static bool blk_whole(const mxp_model *m, const mxp_precision_policy *p) {
    return is_fp8_policy(p) || m->blk_rows < 0;
}

/* Activation-gradient storage dtype under p (as plan_bufs sets grad_type). */
static mxp_dtype grad_store(const mxp_precision_policy *p) {
    return nn_dtype_is_fp8(p->grad) ? MXP_DTYPE_BF16 : p->grad;
}

typedef struct blk_scr {
    int64_t R;        /* rows per chunk (N on the unchunked path) */
    float *f4a;       /* [R, 4C] */
    float *fc1, *fc2; /* [R, C] */
    float *ft;        /* [2, T, T] attention tiles */
    float *fb;        /* [4C] widened biases / gammas */
    void *gs;         /* chunked path: [N, 4C] in the grad dtype (the gradient
                         of c_fc's, then c_attn's, output), also seen as
                         FP32 [2, N, C] once that is consumed; else NULL */
    float *f4b, *fw;  /* fp8 only: [N, 4C] operand, [4C, C] quantised weight */
} blk_scr;

/* Carve the FP32 scratch of block L (floats; base NULL: sizes only). */
static size_t blk_scratch(const mxp_model *m, const nn_layer *L, const mxp_precision_policy *p,
                          float *base, blk_scr *o) {
    const size_t N = (size_t)m->spec.max_batch, C = (size_t)L->in, T = (size_t)L->T;
    const size_t R = (size_t)blk_rows(m, L, p), RC = mulz(R, C), NC = mulz(N, C);
    const bool whole = blk_whole(m, p);
    size_t off = 0, a[8] = {0};
    a[0] = take(&off, mulz(RC, 4), 1);
    a[1] = take(&off, RC, 1);
    a[2] = take(&off, RC, 1);
    a[3] = take(&off, mulz(mulz(T, T), 2), 1);
    a[4] = take(&off, mulz(C, 4), 1);
    if (!whole) { /* max(4NC grad-dtype elements, 2NC floats), in floats */
        size_t gb = mulz(mulz(NC, 4), mxp_dtype_info(grad_store(p))->size);
        size_t fl = mulz(NC, 2 * sizeof(float));
        a[5] = take(&off, ((gb > fl ? gb : fl) + sizeof(float) - 1) / sizeof(float), 1);
    }
    if (is_fp8_policy(p)) {
        a[6] = take(&off, mulz(NC, 4), 1);
        a[7] = take(&off, mulz(mulz(C, C), 4), 1);
    }
    if (base && o) {
        o->R = (int64_t)R;
        o->f4a = base + a[0];
        o->fc1 = base + a[1];
        o->fc2 = base + a[2];
        o->ft = base + a[3];
        o->fb = base + a[4];
        o->gs = whole ? NULL : (void *)(base + a[5]);
        o->f4b = is_fp8_policy(p) ? base + a[6] : NULL;
        o->fw = is_fp8_policy(p) ? base + a[7] : NULL;
    }
    return off;
}

/* ---- structure ------------------------------------------------------------------ */

mxp_status nn_ext_validate(const mxp_model_spec *s, mxp_error *err) {
    bool any = false, blocks = false;
    for (int i = 0; i < s->n_layers; i++) {
        mxp_layer_kind k = s->layers[i].kind;
        if (!nn_kind_is_ext(k)) continue;
        any = true;
        blocks |= k == MXP_LAYER_BLOCK;
        if (k == MXP_LAYER_EMBEDDING && i != 0)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d].kind=embedding; accepted: only as layer 0", i);
        if (k == MXP_LAYER_LM_HEAD && i != s->n_layers - 1)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d].kind=lm_head; accepted: only as the last layer",
                                 i);
    }
    if (!any) return MXP_OK;
    if (s->layers[0].kind != MXP_LAYER_EMBEDDING)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.layers[0].kind=%s; a model with block or lm_head layers "
                             "starts with an embedding",
                             mxp_layer_kind_name(s->layers[0].kind));
    if (s->in_dim != 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.in_dim=%lld; accepted: 1 (one token id per row) for an "
                             "embedding model", (long long)s->in_dim);
    if (s->layers[0].units < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.layers[0].units=%lld (embedding width); accepted: >= 1",
                             (long long)s->layers[0].units);
    if (s->seq_len < 1 || s->seq_len > s->max_batch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.seq_len=%lld; accepted: 1..max_batch (%lld)",
                             (long long)s->seq_len, (long long)s->max_batch);
    if (s->vocab_size < 2 || s->vocab_size > (1 << 24))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.vocab_size=%lld; accepted: 2..16777216 (ids exact in FP32)",
                             (long long)s->vocab_size);
    if (!(s->embed_scale > 0.0f) || !isfinite(s->embed_scale))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.embed_scale=%g; accepted: finite and > 0",
                             (double)s->embed_scale);
    if (blocks && s->n_heads < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "spec.n_heads=%d; accepted: >= 1",
                             s->n_heads);
    return MXP_OK;
}

/* Append a tensor to the table; names "layers.<i>.<sub>". */
static mxp_status add_tensor(mxp_model *m, int i, const char *sub, size_t off, int64_t d0,
                             int64_t d1, mxp_error *err) {
    if (m->n_tensors >= NN_MAX_TENSORS)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "model has more than %d parameter tensors; reduce the layers",
                             NN_MAX_TENSORS);
    int t = m->n_tensors++;
    snprintf(m->names[t], NN_NAME_MAX, "layers.%d.%s", i, sub);
    mxp_tensor_info *ti = &m->tensors[t];
    ti->name = m->names[t];
    ti->offset = off;
    ti->ndim = d1 > 0 ? 2 : 1;
    ti->shape[0] = d0;
    ti->shape[1] = d1 > 0 ? d1 : 0;
    ti->count = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    return MXP_OK;
}

mxp_status nn_ext_build(mxp_model *m, int i, int64_t in, size_t *P, mxp_error *err) {
    nn_layer *L = &m->layers[i];
    const mxp_model_spec *s = &m->spec;
    mxp_status st = MXP_OK;
    L->in = in;
    L->T = s->seq_len;
    L->w_off = *P;
    size_t n = 0;
    if (L->kind == MXP_LAYER_EMBEDDING) {
        const int64_t C = s->layers[i].units;
        L->out = C;
        L->V = s->vocab_size;
        size_t vc = mulz((size_t)L->V, (size_t)C), tc = mulz((size_t)L->T, (size_t)C);
        if (vc == SIZE_MAX || tc == SIZE_MAX || vc > SIZE_MAX - tc) goto overflow;
        L->p_off = *P + vc;
        n = vc + tc;
        if ((st = add_tensor(m, i, "wte", L->w_off, L->V, C, err))) return st;
        if ((st = add_tensor(m, i, "wpe", L->p_off, L->T, C, err))) return st;
    } else if (L->kind == MXP_LAYER_BLOCK) {
        const int64_t C = in;
        if (C % s->n_heads != 0)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.n_heads=%d does not divide the width %lld of block "
                                 "layer %d; accepted: a divisor of %lld",
                                 s->n_heads, (long long)C, i, (long long)C);
        if (mulz(mulz((size_t)C, (size_t)C), 13) == SIZE_MAX) goto overflow;
        L->out = C;
        L->heads = s->n_heads;
        blk_par w = blk_params(C, *P);
        n = w.end - *P;
        static const char *const sub[12] = {
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        const size_t offs[12] = {w.ln1w, w.ln1b, w.aw, w.ab, w.pw, w.pb,
                                 w.ln2w, w.ln2b, w.fw, w.fb, w.mw, w.mb};
        const int64_t d0[12] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
        const int64_t d1[12] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
        for (int k = 0; k < 12; k++)
            if ((st = add_tensor(m, i, sub[k], offs[k], d0[k], d1[k], err))) return st;
        L->fp8_slot = m->n_fp8;
        m->n_fp8 += 12; /* c_attn, attn.c_proj, c_fc, mlp.c_proj: (x, W, dY) each */
    } else { /* LM_HEAD */
        const nn_layer *E = &m->layers[0];
        if (in != E->out)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "lm_head layer %d gets width %lld; accepted: the embedding "
                                 "width %lld (weights are tied)",
                                 i, (long long)in, (long long)E->out);
        L->out = E->V;
        L->V = E->V;
        L->p_off = E->w_off;
        L->fp8_slot = m->n_fp8;
        m->n_fp8 += 3;
    }
    if (*P > SIZE_MAX - n) goto overflow;
    L->n_params = n;
    *P += n;
    return MXP_OK;
overflow:
    return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                         "parameter count of layer %d overflows size_t; reduce its size", i);
}

size_t nn_ext_saved_bytes(const mxp_model *m, int l, const mxp_precision_policy *p) {
    const nn_layer *L = &m->layers[l];
    return L->kind == MXP_LAYER_BLOCK ? blk_layout(m, L, p, NULL, NULL) : 0;
}

size_t nn_ext_scratch_floats(const mxp_model *m, const mxp_precision_policy *p) {
    size_t best = 0;
    const size_t N = (size_t)m->spec.max_batch;
    for (int l = 0; l < m->n_layers; l++) {
        const nn_layer *L = &m->layers[l];
        size_t need = 0;
        if (L->kind == MXP_LAYER_EMBEDDING) {
            if (!is_fp8_policy(p) && p->weight != MXP_DTYPE_F32)
                need = mulz((size_t)(L->V + L->T), (size_t)L->out);
        } else if (L->kind == MXP_LAYER_LM_HEAD) {
            if (is_fp8_policy(p)) need = mulz(N + (size_t)L->V, (size_t)L->in);
        } else if (L->kind == MXP_LAYER_BLOCK) {
            need = blk_scratch(m, L, p, NULL, NULL);
        }
        if (need > best) best = need;
    }
    return best;
}

/* N(0, std) into dst[off .. off+n). */
static void fill_normal(mxp_rng *r, float *dst, size_t off, size_t n, float std) {
    for (size_t i = 0; i < n; i++) dst[off + i] = std * mxp_rng_normal(r);
}

static void fill_const(float *dst, size_t off, size_t n, float v) {
    for (size_t i = 0; i < n; i++) dst[off + i] = v;
}

void nn_ext_init(const mxp_model *m, int l, mxp_rng *r, float *dst) {
    const nn_layer *L = &m->layers[l];
    if (L->kind == MXP_LAYER_EMBEDDING) {
        fill_normal(r, dst, L->w_off, L->n_params, 0.02f); /* wte then wpe */
        return;
    }
    if (L->kind != MXP_LAYER_BLOCK) return;
    int n_block = 0;
    for (int i = 0; i < m->n_layers; i++) n_block += m->layers[i].kind == MXP_LAYER_BLOCK;
    const size_t C = (size_t)L->in;
    const float proj_std = (float)(0.02 / sqrt(2.0 * (double)n_block));
    blk_par w = blk_params(L->in, L->w_off);
    fill_const(dst, w.ln1w, C, 1.0f);
    fill_const(dst, w.ln1b, C, 0.0f);
    fill_normal(r, dst, w.aw, 3 * C * C, 0.02f);
    fill_const(dst, w.ab, 3 * C, 0.0f);
    fill_normal(r, dst, w.pw, C * C, proj_std);
    fill_const(dst, w.pb, C, 0.0f);
    fill_const(dst, w.ln2w, C, 1.0f);
    fill_const(dst, w.ln2b, C, 0.0f);
    fill_normal(r, dst, w.fw, 4 * C * C, 0.02f);
    fill_const(dst, w.fb, 4 * C, 0.0f);
    fill_normal(r, dst, w.mw, 4 * C * C, proj_std);
    fill_const(dst, w.mb, C, 0.0f);
}

/* ---- the dense products inside a block --------------------------------------------- */

/* y32 [B, out] = x [B, in] (stored dtype xt) W^T + b, under the policy. */
static void dense_fwd(mxp_model *m, const blk_scr *s, int slot, mxp_dtype xt, const void *x,
                      int64_t B, int64_t in, int64_t out, size_t w_off, size_t b_off,
                      float *y32) {
    if (m->fp8) {
        m->k->convert(MXP_DTYPE_F32, s->f4b, xt, x, (size_t)(B * in));
        nn_fp8_dense_forward(m, slot, s->f4b, B, in, out, w_off, true, b_off, y32, s->f4b,
                             s->fw);
        return;
    }
    mxp_gemm_args g = {
        .trans_a = false, .trans_b = true, .M = B, .N = out, .K = in,
        .a_type = xt, .A = x, .lda = in,
        .b_type = m->policy.weight, .B = nn_work_at(m, w_off), .ldb = in,
        .C = y32, .ldc = out, .alpha = 1.0f, .beta = 0.0f,
    };
    m->k->gemm(&g);
    m->k->add_bias(y32, nn_param_f32(m, b_off, (size_t)out, s->fb), B, out);
}

/* The parameter half of dense_fwd's backward (non-fp8): db += column sums
 * of dy32 [B, out] (FP32, lead dimension ld >= out), dW += dy32^T x. */
static void dense_bwd_params(mxp_model *m, mxp_dtype xt, const void *x, int64_t B, int64_t in,
                             int64_t out, size_t w_off, size_t b_off, const float *dy32,
                             int64_t ld) {
    nn_grad_zero(m, b_off, (size_t)out);
    m->k->bias_grad(m->grads + b_off, dy32, B, out);
    mxp_gemm_args gw = {
        .trans_a = true, .trans_b = false, .M = out, .N = in, .K = B,
        .a_type = MXP_DTYPE_F32, .A = dy32, .lda = ld,
        .b_type = xt, .B = x, .ldb = in,
        .C = m->grads + w_off, .ldc = in, .alpha = 1.0f, .beta = nn_grad_beta(m),
    };
    m->k->gemm(&gw);
}

/* Its input half: dx32 [B, in] = dy32 [B, out] W ("="). Row-independent:
 * a GEMM gives every row the same bits whatever M (kernels.h). */
static void dense_bwd_dx(mxp_model *m, const float *dy32, int64_t B, int64_t in, int64_t out,
                         size_t w_off, float *dx32) {
    mxp_gemm_args gx = {
        .trans_a = false, .trans_b = false, .M = B, .N = in, .K = out,
        .a_type = MXP_DTYPE_F32, .A = dy32, .lda = out,
        .b_type = m->policy.weight, .B = nn_work_at(m, w_off), .ldb = in,
        .C = dx32, .ldc = in, .alpha = 1.0f, .beta = 0.0f,
    };
    m->k->gemm(&gx);
}

/* Backward of dense_fwd: dy32 [B, out] FP32 (values of the grad dtype;
 * overwritten in fp8 mode); dW, db += ; dx32 [B, in] "=". */
static void dense_bwd(mxp_model *m, const blk_scr *s, int slot, mxp_dtype xt, const void *x,
                      int64_t B, int64_t in, int64_t out, size_t w_off, size_t b_off,
                      float *dy32, float *dx32) {
    if (m->fp8) {
        m->k->convert(MXP_DTYPE_F32, s->f4b, xt, x, (size_t)(B * in));
        nn_fp8_dense_backward(m, slot, s->f4b, B, in, out, w_off, true, b_off, dy32, dx32,
                              s->f4b, s->fw);
        return;
    }
    dense_bwd_params(m, xt, x, B, in, out, w_off, b_off, dy32, out);
    dense_bwd_dx(m, dy32, B, in, out, w_off, dx32);
}

/* dense_bwd_params for an output gradient stored in g [N, out] (dtype gt,
 * values exact). A non-F32 g is widened in column slices of width C
 * through buf (FP32 [N, C]): both kernels sum each bias column over the
 * rows in order from zero and compute each dW row on its own, so the
 * sliced calls give the bits of one call on the FP32 tensor. */
static void dense_bwd_params_typed(mxp_model *m, mxp_dtype gt, const void *g, int64_t N,
                                   int64_t C, int64_t out, mxp_dtype xt, const void *x,
                                   size_t w_off, size_t b_off, float *buf) {
    if (gt == MXP_DTYPE_F32) {
        dense_bwd_params(m, xt, x, N, C, out, w_off, b_off, g, out);
        return;
    }
    for (int64_t c0 = 0; c0 < out; c0 += C) {
        for (int64_t r = 0; r < N; r++)
            m->k->convert(MXP_DTYPE_F32, buf + r * C, gt,
                          (const unsigned char *)g +
                              (size_t)(r * out + c0) * mxp_dtype_info(gt)->size,
                          (size_t)C);
        dense_bwd_params(m, xt, x, N, C, C, w_off + (size_t)(c0 * C), b_off + (size_t)c0, buf,
                         C);
    }
}

/* Round src [n] into the typed buffer dst (dtype t). */
static void store(const mxp_model *m, mxp_dtype t, void *dst, const float *src, size_t n) {
    if (t == MXP_DTYPE_F32)
        memcpy(dst, src, n * sizeof(float));
    else
        m->k->convert(t, dst, MXP_DTYPE_F32, src, n);
}

/* Element offset into a typed buffer. */
static const void *elem(const void *base, mxp_dtype t, size_t i) {
    return (const unsigned char *)base + i * mxp_dtype_info(t)->size;
}

/* ---- forward / backward ------------------------------------------------------------- */

/* Forward in chunks of s.R rows (whole sequences): every op of the block
 * is row-independent except attention, which is per sequence, so each
 * chunk runs the whole block on its rows; the FP32 scratch is [R, 4C] +
 * 2 x [R, C]. The residual r of a chunk is kept in y32's rows. */
void nn_block_forward(mxp_model *m, int l, int64_t B, float *y32) {
    const nn_layer *L = &m->layers[l];
    const mxp_precision_policy *p = &m->policy;
    const int64_t C = L->in, T = L->T, H = L->heads;
    const mxp_dtype at = p->activation, mt = mm_store(p), ot = p->ops[MXP_OP_MATMUL].output;
    const mxp_dtype xt = m->b.act_type[l];
    blk_buf v;
    blk_scr s;
    blk_layout(m, L, p, m->b.ext[l], &v);
    blk_scratch(m, L, p, m->b.xs, &s);
    const blk_par w = blk_params(C, L->w_off);
    const int slot = L->fp8_slot;
    const float eps = m->spec.layernorm_eps;

    for (int64_t r0 = 0; r0 < B; r0 += s.R) {
        const int64_t R = B - r0 < s.R ? B - r0 : s.R;
        const size_t n = (size_t)(R * C), o = (size_t)(r0 * C);
        float *y = y32 + o;
        const float *X = nn_view_f32(m, xt, elem(m->b.acts[l], xt, o), n, s.fc1);
        const float *g1 = nn_param_f32(m, w.ln1w, (size_t)C, s.fb);
        const float *b1 = nn_param_f32(m, w.ln1b, (size_t)C, s.fb + C);
        m->k->layernorm_fwd(s.fc2, v.ln1m + r0, v.ln1r + r0, X, g1, b1, R, C, eps);
        void *ln1 = (unsigned char *)v.ln1 + o * mxp_dtype_info(mt)->size;
        store(m, mt, ln1, s.fc2, n);

        void *qkv = (unsigned char *)v.qkv + 3 * o * mxp_dtype_info(at)->size;
        dense_fwd(m, &s, slot, mt, ln1, R, C, 3 * C, w.aw, w.ab, s.f4a);
        store(m, at, qkv, s.f4a, 3 * n);
        void *att = (unsigned char *)v.att +
                    (size_t)(r0 * H * T) * mxp_dtype_info(at)->size; /* [R/T, H, T, T] */
        nn_attention_forward(m, R / T, T, C, H, at, ot, qkv, att, s.fc2, s.ft);
        nn_round_f32(m, ot, s.fc2, n);
        void *atty = (unsigned char *)v.atty + o * mxp_dtype_info(mt)->size;
        store(m, mt, atty, s.fc2, n);

        dense_fwd(m, &s, slot + 3, mt, atty, R, C, C, w.pw, w.pb, s.f4a);
        nn_round_f32(m, ot, s.f4a, n);
        for (size_t i = 0; i < n; i++) y[i] = X[i] + s.f4a[i];
        nn_round_f32(m, at, y, n); /* r, as stored */
        store(m, at, (unsigned char *)v.res1 + o * mxp_dtype_info(at)->size, y, n);

        const float *g2 = nn_param_f32(m, w.ln2w, (size_t)C, s.fb);
        const float *b2 = nn_param_f32(m, w.ln2b, (size_t)C, s.fb + C);
        m->k->layernorm_fwd(s.fc1, v.ln2m + r0, v.ln2r + r0, y, g2, b2, R, C, eps);
        void *ln2 = (unsigned char *)v.ln2 + o * mxp_dtype_info(mt)->size;
        store(m, mt, ln2, s.fc1, n);

        dense_fwd(m, &s, slot + 6, mt, ln2, R, C, 4 * C, w.fw, w.fb, s.f4a);
        nn_round_f32(m, ot, s.f4a, 4 * n);
        store(m, at, (unsigned char *)v.fch + 4 * o * mxp_dtype_info(at)->size, s.f4a, 4 * n);
        m->k->gelu_fwd(s.f4a, s.f4a, 4 * n);
        nn_round_f32(m, at, s.f4a, 4 * n);
        void *fcg = (unsigned char *)v.fcg + 4 * o * mxp_dtype_info(mt)->size;
        store(m, mt, fcg, s.f4a, 4 * n);

        dense_fwd(m, &s, slot + 9, mt, fcg, R, 4 * C, C, w.mw, w.mb, s.fc1);
        nn_round_f32(m, ot, s.fc1, n);
        for (size_t i = 0; i < n; i++) y[i] = y[i] + s.fc1[i];
    }
}

/* The unchunked backward (fp8 mode, and the tests' reference): FP32
 * scratch for the whole batch; D, the gradient of the block output and
 * then of r, in fc1. */
static void block_backward_whole(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    const nn_layer *L = &m->layers[l];
    const mxp_precision_policy *p = &m->policy;
    const int64_t C = L->in, T = L->T, H = L->heads, Bs = B / T;
    const size_t nC = (size_t)(B * C);
    const mxp_dtype at = p->activation, mt = mm_store(p), gt = m->b.grad_type;
    blk_buf v;
    blk_scr s;
    blk_layout(m, L, p, m->b.ext[l], &v);
    blk_scratch(m, L, p, m->b.xs, &s);
    const blk_par w = blk_params(C, L->w_off);
    const int slot = L->fp8_slot;

    float *D = s.fc1;
    const float *dv = nn_view_f32(m, gt, dy, nC, D);
    if (dv != D) memcpy(D, dv, nC * sizeof(float));

    /* out = r + proj(gelu(f)) */
    float *dyp = D;
    if (m->fp8) { /* the FP8 product quantises its dY in place */
        memcpy(s.fc2, D, nC * sizeof(float));
        dyp = s.fc2;
    }
    dense_bwd(m, &s, slot + 9, mt, v.fcg, B, 4 * C, C, w.mw, w.mb, dyp, s.f4a);
    nn_round_f32(m, gt, s.f4a, 4 * nC);
    for (size_t o = 0; o < 4 * nC; o += nC) { /* gelu' with f widened nC at a time */
        const float *fv = nn_view_f32(m, at, elem(v.fch, at, o), nC, s.fc2);
        m->k->gelu_bwd(s.f4a + o, s.f4a + o, fv, nC);
    }
    nn_round_f32(m, gt, s.f4a, 4 * nC);
    dense_bwd(m, &s, slot + 6, mt, v.ln2, B, C, 4 * C, w.fw, w.fb, s.f4a, s.fc2);
    nn_round_f32(m, gt, s.fc2, nC);
    const float *r1 = nn_view_f32(m, at, v.res1, nC, s.f4a + nC);
    const float *g2 = nn_param_f32(m, w.ln2w, (size_t)C, s.fb);
    nn_grad_zero(m, w.ln2w, (size_t)C);
    nn_grad_zero(m, w.ln2b, (size_t)C);
    m->k->layernorm_bwd(s.f4a, m->grads + w.ln2w, m->grads + w.ln2b, s.fc2, r1, v.ln2m, v.ln2r,
                        g2, B, C);
    m->k->axpy(D, 1.0f, s.f4a, nC);
    nn_round_f32(m, gt, D, nC);

    /* r = x + proj(attention(c_attn(ln_1(x)))) */
    dyp = D;
    if (m->fp8) {
        memcpy(s.fc2, D, nC * sizeof(float));
        dyp = s.fc2;
    }
    dense_bwd(m, &s, slot + 3, mt, v.atty, B, C, C, w.pw, w.pb, dyp, s.f4a);
    nn_round_f32(m, gt, s.f4a, nC);
    nn_attention_backward(m, Bs, T, C, H, at, gt, v.qkv, v.att, s.f4a, s.f4a + nC, s.ft);
    nn_round_f32(m, gt, s.f4a + nC, 3 * nC);
    dense_bwd(m, &s, slot, mt, v.ln1, B, C, 3 * C, w.aw, w.ab, s.f4a + nC, s.fc2);
    nn_round_f32(m, gt, s.fc2, nC);
    const float *x0 = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], nC, s.f4a + nC);
    const float *g1 = nn_param_f32(m, w.ln1w, (size_t)C, s.fb);
    nn_grad_zero(m, w.ln1w, (size_t)C);
    nn_grad_zero(m, w.ln1b, (size_t)C);
    m->k->layernorm_bwd(s.f4a, m->grads + w.ln1w, m->grads + w.ln1b, s.fc2, x0, v.ln1m, v.ln1r,
                        g1, B, C);
    if (dx32)
        for (size_t i = 0; i < nC; i++) dx32[i] = D[i] + s.f4a[i];
}

/* The chunked backward, the same operations in the same order per element:
 *   D (the gradient of the output, then of r) [N, C] FP32 lives in dx32
 *   (or the idle staging buffer sy when the caller wants no dX);
 *   the [N, 4C] gradient of c_fc's output and the [N, 3C] one of c_attn's
 *   are produced in row chunks ([R, 4C] FP32) and kept in the grad dtype
 *   (s.gs, the values they are rounded to anyway) for their bias and
 *   weight gradients, which reduce over all rows in one call per column
 *   slice (dense_bwd_params_typed); each chunk's dX goes on at once;
 *   the layernorm inputs are full [N, C] FP32 (sa: their dY; sb: the
 *   column slices) since their gamma/beta gradients reduce over all rows.
 * dW of the two projections and their biases read D whole, as before. */
void nn_block_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    const mxp_precision_policy *p = &m->policy;
    if (blk_whole(m, p)) {
        block_backward_whole(m, l, B, dy, dx32);
        return;
    }
    const nn_layer *L = &m->layers[l];
    const int64_t C = L->in, T = L->T, H = L->heads;
    const size_t nC = (size_t)(B * C);
    const mxp_dtype at = p->activation, mt = mm_store(p), gt = m->b.grad_type;
    blk_buf v;
    blk_scr s;
    blk_layout(m, L, p, m->b.ext[l], &v);
    blk_scratch(m, L, p, m->b.xs, &s);
    const blk_par w = blk_params(C, L->w_off);
    float *const dA = m->b.sa, *const cs = m->b.sb; /* FP32 [N, C] each */
    float *const gf = (float *)s.gs;                /* FP32 [2, N, C] once free */

    float *D = dx32 ? dx32 : m->b.sy;
    const float *dv = nn_view_f32(m, gt, dy, nC, D);
    if (dv != D) memcpy(D, dv, nC * sizeof(float));

    /* out = r + proj(gelu(f)) */
    dense_bwd_params(m, mt, v.fcg, B, 4 * C, C, w.mw, w.mb, D, C);
    for (int64_t r0 = 0; r0 < B; r0 += s.R) {
        const int64_t R = B - r0 < s.R ? B - r0 : s.R;
        const size_t n = (size_t)(R * C), o = (size_t)(r0 * C);
        dense_bwd_dx(m, D + o, R, 4 * C, C, w.mw, s.f4a);
        nn_round_f32(m, gt, s.f4a, 4 * n);
        for (size_t k = 0; k < 4 * n; k += n) { /* gelu' with f widened n at a time */
            const float *fv = nn_view_f32(m, at, elem(v.fch, at, 4 * o + k), n, s.fc1);
            m->k->gelu_bwd(s.f4a + k, s.f4a + k, fv, n);
        }
        nn_round_f32(m, gt, s.f4a, 4 * n);
        store(m, gt, (unsigned char *)s.gs + 4 * o * mxp_dtype_info(gt)->size, s.f4a, 4 * n);
        dense_bwd_dx(m, s.f4a, R, C, 4 * C, w.fw, dA + o);
    }
    nn_round_f32(m, gt, dA, nC);
    dense_bwd_params_typed(m, gt, s.gs, B, C, 4 * C, mt, v.ln2, w.fw, w.fb, cs);
    const float *r1 = nn_view_f32(m, at, v.res1, nC, gf);
    const float *g2 = nn_param_f32(m, w.ln2w, (size_t)C, s.fb);
    nn_grad_zero(m, w.ln2w, (size_t)C);
    nn_grad_zero(m, w.ln2b, (size_t)C);
    m->k->layernorm_bwd(gf + nC, m->grads + w.ln2w, m->grads + w.ln2b, dA, r1, v.ln2m, v.ln2r,
                        g2, B, C);
    m->k->axpy(D, 1.0f, gf + nC, nC);
    nn_round_f32(m, gt, D, nC);

    /* r = x + proj(attention(c_attn(ln_1(x)))) */
    dense_bwd_params(m, mt, v.atty, B, C, C, w.pw, w.pb, D, C);
    for (int64_t r0 = 0; r0 < B; r0 += s.R) {
        const int64_t R = B - r0 < s.R ? B - r0 : s.R;
        const size_t n = (size_t)(R * C), o = (size_t)(r0 * C);
        dense_bwd_dx(m, D + o, R, C, C, w.pw, s.fc1);
        nn_round_f32(m, gt, s.fc1, n);
        const void *qkv = (const unsigned char *)v.qkv + 3 * o * mxp_dtype_info(at)->size;
        const void *att = (const unsigned char *)v.att +
                          (size_t)(r0 * H * T) * mxp_dtype_info(at)->size;
        nn_attention_backward(m, R / T, T, C, H, at, gt, qkv, att, s.fc1, s.f4a, s.ft);
        nn_round_f32(m, gt, s.f4a, 3 * n);
        store(m, gt, (unsigned char *)s.gs + 3 * o * mxp_dtype_info(gt)->size, s.f4a, 3 * n);
        dense_bwd_dx(m, s.f4a, R, C, 3 * C, w.aw, dA + o);
    }
    nn_round_f32(m, gt, dA, nC);
    dense_bwd_params_typed(m, gt, s.gs, B, C, 3 * C, mt, v.ln1, w.aw, w.ab, cs);
    const float *x0 = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], nC, gf);
    const float *g1 = nn_param_f32(m, w.ln1w, (size_t)C, s.fb);
    nn_grad_zero(m, w.ln1w, (size_t)C);
    nn_grad_zero(m, w.ln1b, (size_t)C);
    m->k->layernorm_bwd(gf + nC, m->grads + w.ln1w, m->grads + w.ln1b, dA, x0, v.ln1m, v.ln1r,
                        g1, B, C);
    if (dx32)
        for (size_t i = 0; i < nC; i++) dx32[i] = D[i] + gf[nC + i];
}
