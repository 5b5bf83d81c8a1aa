/* nn/model_plan.c: the model's memory plan. One arena, carved at create
 * (and again at a precision switch or a new block chunk size) for
 * max_batch rows: stored activations in their dtypes, the activation
 * gradient ping-pong, the driver's FP32 staging and scratch buffers, layer
 * scratch, the skip gradient of residual blocks, and the slabs (FP32
 * master, working weights). Buffers whose
 * lifetimes never overlap share bytes (plan_alias_sb, the fused head's
 * logit chunk in sa); a buffer nothing uses is not planned (sy in an
 * all-FP32 model), and the pass's result slots (slots.c), one per (tensor
 * kind, layer). Layout contract: nn_internal.h.
 *
 * Entry points: nn_plan_bufs, nn_free_bufs, nn_fused_head.
 */
#include "nn/nn_internal.h"

#include "backend/devmem.h"

#include <string.h>

/* ---- buffer planning ------------------------------------------------------ */

static mxp_op_class kind_class(mxp_layer_kind k) {
    return nn_layer_vtable_get(k)->op_class;
}

/* Reserve n elements of elem bytes at a 64-byte aligned offset. */
static bool plan_take(size_t *off, size_t n, size_t elem, size_t *at) {
    size_t bytes, a;
    if (!mxp_size_mul(n, elem, &bytes)) return false;
    if (!mxp_size_add(*off, MXP_ALIGN - 1, &a)) return false;
    a &= ~(size_t)(MXP_ALIGN - 1);
    *at = a;
    return mxp_size_add(a, bytes, off);
}

void nn_free_bufs(nn_bufs *b) {
    if (!b->work_is_master) mxp_dev_free(b->work);
    mxp_dev_free(b->master);
    mxp_dev_free(b->arena);
    memset(b, 0, sizeof *b);
}

bool nn_fused_head(const mxp_model *m, const mxp_precision_policy *p) {
    return m->blk_rows >= 0 && m->layers[m->n_layers - 1].kind == MXP_LAYER_LM_HEAD &&
           m->spec.loss == MXP_LOSS_XENT && p->ops[MXP_OP_LOSS].input == MXP_DTYPE_F32 &&
           !nn_dtype_is_fp8(p->ops[MXP_OP_MATMUL].input);
}

/* sb may lie over acts[L-2] and acts[L-1] (the outputs of the last block
 * and of the final layernorm, contiguous in the plan): a GPT (embedding,
 * blocks, layernorm, lm_head and no other kind, the head fused) uses sb
 * only in a block's backward, when every output above the block's is dead,
 * once the final layernorm's backward and nn_count_nonfinite use xs (which
 * needs room for two [B, C] FP32 views, xs_n >= 2 * rowin). */
static bool plan_alias_sb(const mxp_model *m, size_t xs_n, size_t rowin) {
    const int nl = m->n_layers;
    if (nl < 4 || m->layers[nl - 2].kind != MXP_LAYER_LAYERNORM ||
        m->layers[nl - 3].kind != MXP_LAYER_BLOCK || xs_n / 2 < rowin)
        return false;
    for (int l = 0; l < nl; l++) {
        mxp_layer_kind k = m->layers[l].kind;
        if (k != MXP_LAYER_EMBEDDING && k != MXP_LAYER_BLOCK &&
            k != MXP_LAYER_LAYERNORM && k != MXP_LAYER_LM_HEAD)
            return false;
    }
    return true;
}

/* Allocate master/work slabs and the arena for `policy` (contents zero).
 * With a fused lm_head (nn_fused_head) no [max_batch, V] FP32 buffer
 * exists: the logits are never stored whole (lc holds one chunk), and the
 * staging buffers sy, sa and the second gradient buffer g[1] are sized by
 * the widest layer input (the head's [rows, V] gradient lives in g[0], in
 * the grad dtype). Buffers whose uses never overlap share bytes: lc lies
 * in sa (idle while the head runs) and, for a GPT, sb over the last two
 * stored activations (plan_alias_sb). */
mxp_status nn_plan_bufs(const mxp_model *m, const mxp_precision_policy *p, nn_bufs *b,
                        mxp_error *err) {
    memset(b, 0, sizeof *b);
    const size_t P = m->n_params;
    /* an ensemble's layer-major pass holds all members' rows (ens_batched.c) */
    const size_t mb = (size_t)m->spec.max_batch * (size_t)(m->ens > 1 ? m->ens : 1);
    size_t rowmax, rowin = 0;
    if (!mxp_size_mul(mb, (size_t)m->max_width, &rowmax)) goto overflow;
    const bool fused = nn_fused_head(m, p);
    if (fused) { /* widest width except the head's output */
        int64_t wi = 1;
        for (int l = 0; l < m->n_layers; l++)
            if (m->width[l] > wi) wi = m->width[l];
        rowin = mb * (size_t)wi; /* <= rowmax: no overflow */
    } else {
        rowin = rowmax;
    }
    int64_t lc_rows = m->blk_rows > 0 ? m->blk_rows : NN_HEAD_ROWS; /* head chunk rows */
    if (lc_rows > (int64_t)mb) lc_rows = (int64_t)mb;
    size_t at_lc = 0;

    size_t off = 0, at_acts[MXP_MODEL_MAX_LAYERS + 1] = {0}, at_g[2], at_s[3];
    size_t at_t0 = 0, at_p[2], at_ln = 0, at_fw = 0, fw_n = 0, at_xs = 0;
    size_t at_ext[MXP_MODEL_MAX_LAYERS] = {0};
    bool need_t0 = false;
    mxp_dtype mm_in = p->ops[MXP_OP_MATMUL].input;
    b->grad_type = nn_dtype_is_fp8(p->grad) ? MXP_DTYPE_BF16 : p->grad;
    if (nn_dtype_is_fp8(mm_in))
        for (int l = 0; l < m->n_layers; l++)
            if (m->layers[l].kind == MXP_LAYER_LINEAR &&
                m->layers[l].n_params - (size_t)m->layers[l].out > fw_n)
                fw_n = m->layers[l].n_params - (size_t)m->layers[l].out;
    b->act_type[0] = p->activation;
    if (m->layers[0].kind == MXP_LAYER_EMBEDDING)
        b->act_type[0] = MXP_DTYPE_F32; /* token ids stay exact */
    for (int l = 0; l < m->n_layers; l++) {
        b->act_type[l + 1] = p->ops[kind_class(m->layers[l].kind)].output;
        /* A layernorm read only by a matmul (linear, lm_head) stores its
         * output in the matmul input dtype: the reader would cast it to
         * exactly that (into t0), so the values are the same and neither
         * the FP32 copy nor the cast buffer is needed. FP8 operands are
         * quantised per product from FP32: those keep the FP32 output. */
        mxp_layer_kind next = l + 1 < m->n_layers ? m->layers[l + 1].kind : MXP_LAYER_KIND_COUNT;
        if (m->layers[l].kind == MXP_LAYER_LAYERNORM && !nn_dtype_is_fp8(mm_in) &&
            (next == MXP_LAYER_LINEAR || next == MXP_LAYER_LM_HEAD))
            b->act_type[l + 1] = mm_in;
    }
    /* The last layer's output is the loss's input: write it in the loss
     * dtype (FP32) straight from the FP32 accumulator instead of rounding
     * it to the activation dtype and widening it again. */
    b->act_type[m->n_layers] = p->ops[MXP_OP_LOSS].input;
    /* Layers kept FP32 (per-layer override): their input and output are
     * stored in FP32, and so is the gradient of their output (their dY). */
    const uint64_t keep = p->mode == MXP_PRECISION_FP32 ? 0 : m->fp32_mask;
    size_t gsize = mxp_dtype_info(b->grad_type)->size;
    for (int l = 0; l <= m->n_layers; l++) b->gtype[l] = b->grad_type;
    for (int l = 0; l < m->n_layers; l++) {
        if (!(keep >> l & 1)) continue;
        b->act_type[l] = b->act_type[l + 1] = MXP_DTYPE_F32;
        b->gtype[l + 1] = MXP_DTYPE_F32;
        gsize = sizeof(float);
    }
    for (int l = 0; l < m->n_layers; l++)
        if ((m->layers[l].kind == MXP_LAYER_LINEAR || m->layers[l].kind == MXP_LAYER_LM_HEAD) &&
            !(keep >> l & 1) && b->act_type[l] != mm_in)
            need_t0 = true;
    for (int l = 0; l <= m->n_layers; l++) {
        size_t n;
        if (fused && l == m->n_layers) break; /* the logits: chunks in lc */
        if (!mxp_size_mul(mb, (size_t)m->width[l], &n)) goto overflow;
        if (!plan_take(&off, n, mxp_dtype_info(b->act_type[l])->size, &at_acts[l]))
            goto overflow;
    }
    const size_t xs_n = nn_ext_scratch_floats(m, p);
    const int nl = m->n_layers;
    /* sb over the outputs of the last block and the final layernorm
     * (plan_alias_sb): dead whenever sb is in use. */
    const bool sb_alias = fused && plan_alias_sb(m, xs_n, rowin) &&
                          off - at_acts[nl - 2] >= rowin * sizeof(float);
    /* lc in sa: sa is idle while the fused head runs */
    const size_t lc_n = (size_t)lc_rows * (size_t)m->width[nl];
    const bool lc_alias = fused && lc_n <= rowin;
    for (int i = 0; i < 2; i++)
        if (!plan_take(&off, i == 0 ? rowmax : rowin, gsize, &at_g[i])) goto overflow;
    /* residual blocks: the skip gradient a residual layer keeps (layer_skip.c) */
    size_t at_gs = 0;
    const bool need_gs = nn_has_residual(m);
    if (need_gs && !plan_take(&off, rowmax, gsize, &at_gs)) goto overflow;
    /* sy stages the FP32 output of a layer stored in a narrower dtype and
     * the FP32 dX of a gradient stored in one; a block or layernorm that is
     * the first layer also writes its unused dX there. A model whose
     * activations and gradients are all FP32 never touches it: none. */
    bool need_sy = m->layers[0].kind == MXP_LAYER_BLOCK ||
                   m->layers[0].kind == MXP_LAYER_LAYERNORM;
    for (int l = 0; l <= m->n_layers; l++)
        if (b->act_type[l] != MXP_DTYPE_F32 || b->gtype[l] != MXP_DTYPE_F32) need_sy = true;
    for (int i = 0; i < 3; i++) {
        if (i == 0 && !need_sy) {
            at_s[0] = 0;
            continue;
        }
        if (i == 2 && sb_alias) {
            at_s[2] = at_acts[nl - 2];
            continue;
        }
        /* sb: nn_count_nonfinite's chunk when there is no xs; the full
         * width without a fused head (layers' [B, out] scratch) */
        if (!plan_take(&off, i == 2 && !fused ? rowmax : rowin, sizeof(float), &at_s[i]))
            goto overflow;
    }
    if (lc_alias)
        at_lc = at_s[1];
    else if (fused && !plan_take(&off, lc_n, sizeof(float), &at_lc))
        goto overflow;
    if (need_t0 && !plan_take(&off, rowin, mxp_dtype_info(mm_in)->size, &at_t0))
        goto overflow;
    for (int i = 0; i < 2; i++)
        if (!plan_take(&off, (size_t)m->max_width, sizeof(float), &at_p[i]))
            goto overflow;
    if (m->n_ln > 0) {
        size_t n;
        if (!mxp_size_mul((size_t)m->n_ln * 2, mb, &n)) goto overflow;
        if (!plan_take(&off, n, sizeof(float), &at_ln)) goto overflow;
    }
    if (fw_n > 0 && !plan_take(&off, fw_n, sizeof(float), &at_fw)) goto overflow;
    for (int l = 0; l < m->n_layers; l++) {
        size_t eb = nn_kind_is_ext(m->layers[l].kind) ? nn_ext_saved_bytes(m, l, p) : 0;
        if (eb > 0 && !plan_take(&off, eb, 1, &at_ext[l])) goto overflow;
    }
    if (xs_n > 0 && !plan_take(&off, xs_n, sizeof(float), &at_xs)) goto overflow;
    /* the result slots (n_layers <= MXP_MODEL_MAX_LAYERS: no overflow) */
    const int n_slots = (m->n_layers + 1) * NN_SLOT_KIND_COUNT;
    size_t at_slots = 0;
    /* one block per ensemble member (ens_batched.c), 64-byte strides as the
     * trainer's blocks (nn_step_block_bytes) */
    const size_t blk_bytes = (sizeof(nn_slots) + (size_t)n_slots * sizeof(nn_scan) + 63) / 64 * 64;
    if (!plan_take(&off, blk_bytes, (size_t)(m->ens > 1 ? m->ens : 1), &at_slots))
        goto overflow;

    /* slabs */
    const size_t wsize = mxp_dtype_info(p->weight)->size;
    size_t tmp;
    if (!mxp_size_mul(P, sizeof(float), &tmp) || !mxp_size_mul(P, wsize, &tmp))
        goto overflow;
    if (p->has_master) {
        b->master = mxp_dev_calloc(P, sizeof(float));
        if (!b->master) goto oom;
    }
    if (p->has_master && p->weight == MXP_DTYPE_F32) {
        b->work = b->master;
        b->work_is_master = true;
    } else {
        b->work = mxp_dev_calloc(P, wsize);
        if (!b->work) goto oom;
    }
    b->arena = mxp_dev_calloc(off, 1);
    if (!b->arena) goto oom;
    b->arena_bytes = off;
    b->slots = (nn_slots *)(void *)(b->arena + at_slots);
    b->n_slots = n_slots;
    for (int l = 0; l <= m->n_layers; l++)
        b->acts[l] = fused && l == m->n_layers ? NULL : b->arena + at_acts[l];
    b->fused_head = fused;
    b->lc = fused ? (float *)(void *)(b->arena + at_lc) : NULL;
    b->lc_rows = fused ? lc_rows : 0;
    for (int i = 0; i < 2; i++) b->g[i] = b->arena + at_g[i];
    b->gs = need_gs ? b->arena + at_gs : NULL;
    b->gs_type = b->grad_type;
    b->sy = need_sy ? (float *)(void *)(b->arena + at_s[0]) : NULL;
    b->sa = (float *)(void *)(b->arena + at_s[1]);
    b->sb = (float *)(void *)(b->arena + at_s[2]);
    b->t0 = need_t0 ? b->arena + at_t0 : NULL;
    b->p0 = (float *)(void *)(b->arena + at_p[0]);
    b->p1 = (float *)(void *)(b->arena + at_p[1]);
    b->ln_stats = m->n_ln > 0 ? (float *)(void *)(b->arena + at_ln) : NULL;
    b->fw = fw_n > 0 ? (float *)(void *)(b->arena + at_fw) : NULL;
    for (int l = 0; l < m->n_layers; l++) b->ext[l] = at_ext[l] ? b->arena + at_ext[l] : NULL;
    b->xs = xs_n > 0 ? (float *)(void *)(b->arena + at_xs) : NULL;
    b->xs_n = xs_n;
    b->sb_aliased = sb_alias;
    b->nf = b->xs ? b->xs : b->sb; /* idle between layer calls */
    b->nf_n = b->xs ? xs_n : (fused ? rowin : rowmax);
    return MXP_OK;

overflow:
    nn_free_bufs(b);
    return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                         "model memory size overflows size_t (max_batch=%lld, "
                         "widest layer=%lld, params=%zu)",
                         (long long)m->spec.max_batch, (long long)m->max_width, P);
oom:
    nn_free_bufs(b);
    return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                         "out of memory allocating model buffers (params=%zu, "
                         "max_batch=%lld, widest layer=%lld)",
                         P, (long long)m->spec.max_batch, (long long)m->max_width);
}

