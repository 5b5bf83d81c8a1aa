/* nn/ens_fused.c: the layer-major ensemble pass's stores, scans and fused
 * epilogues, per member (ens_batched.c; nn_internal.h "the layer-major
 * ensemble pass").
 *
 * Entry points: nn_ens_store_scan, nn_ens_linear_epilogue,
 * nn_ens_act_bwd_fused. A tensor of all E x B rows is stored in its dtype
 * and scanned member by member into each member's own result-slot block,
 * with the driver's kernels and conditions (model_step.c): one
 * bias_act_store pass per member (store and absmax; for a linear layer
 * also its bias and the activation after it, the forward epilogue) or,
 * with fusion off (MIXPREC_FUSION=0) or a monitor wanting more than the
 * plain scan, the separate convert and scan. The activation backward is
 * act_bwd_store per member. The bits are those of the member's own pass
 * (every kernel here is element- or row-wise; kernels.h states the fused
 * and unfused sequences equal).
 */
#include "nn/nn_internal.h"

#include <string.h>

static size_t row_bytes(mxp_dtype t, int64_t rows, int64_t cols) {
    return (size_t)rows * (size_t)cols * mxp_dtype_info(t)->size;
}

/* Slot (kind, layer) of block blk. */
static nn_scan *blk_slot(mxp_model *m, nn_slots *blk, nn_slot_kind kind, int layer) {
    nn_slots *own = m->b.slots;
    m->b.slots = blk;
    nn_scan *s = nn_slot(m, kind, layer);
    m->b.slots = own;
    return s;
}

/* The driver's fusion conditions for a pass (fp8, anomaly mode and faults
 * never reach the layer-major pass: nn_ens_batched_ok). */
static bool fuse_ok(const mxp_model *m, bool scan) {
    return m->fuse && (!scan || nn_mon_plain(m));
}

static mxp_act act_of(mxp_layer_kind k) {
    switch (k) {
    case MXP_LAYER_RELU: return MXP_ACT_RELU;
    case MXP_LAYER_GELU: return MXP_ACT_GELU;
    case MXP_LAYER_TANH: return MXP_ACT_TANH;
    default: return MXP_ACT_NONE;
    }
}

void nn_ens_store_scan(mxp_model *m, nn_slots *const *blk, bool scan, nn_slot_kind kind,
                       int layer, float *v32, mxp_dtype t, void *dst, int64_t B, int64_t C) {
    const size_t n = (size_t)B * (size_t)C;
    const int E = m->ens;
    bool full = false;
    if (fuse_ok(m, scan)) {
        for (int e = 0; e < E; e++) {
            nn_scan *s = blk_slot(m, blk[e], kind, layer);
            void *out = (unsigned char *)dst + row_bytes(t, (int64_t)e * B, C);
            mxp_epilogue ep = {.y = v32 + (size_t)e * n, .B = B, .C = C, .y_type = t,
                               .y_out = out, .act = MXP_ACT_NONE, .y_amax = &s->amax,
                               .y_nonfinite = &s->nf};
            m->k->bias_act_store(&ep);
            if (scan) nn_scan_stored(s, t, out, n);
        }
    } else {
        if (t == MXP_DTYPE_F32) {
            if (dst != (const void *)v32) memcpy(dst, v32, (size_t)E * n * sizeof(float));
        } else {
            m->k->convert(t, dst, MXP_DTYPE_F32, v32, (size_t)E * n);
        }
        if (!scan) return;
        for (int e = 0; e < E; e++) {
            nn_scan *s = blk_slot(m, blk[e], kind, layer);
            const float *v = v32 + (size_t)e * n;
            const void *st = (const unsigned char *)dst + row_bytes(t, (int64_t)e * B, C);
            if (m->mon) {
                nn_slots *own = m->b.slots;
                m->b.slots = blk[e];
                full = nn_mon_scan(m, layer, kind == NN_SLOT_DX ? MXP_MON_DX : MXP_MON_OUT, v,
                                   n, t, s);
                m->b.slots = own;
            } else {
                m->k->absmax(v, n, &s->amax, &s->nf);
            }
            nn_scan_stored(s, t, st, n);
        }
    }
    if (scan) nn_slot_issued(m, kind, layer, n, full);
}

int nn_ens_linear_epilogue(mxp_model *m, int l, int64_t B, float *y32, nn_slots *const *blk,
                           bool scan, int *cur) {
    nn_bufs *b = &m->b;
    const nn_layer *L = &m->layers[l];
    const int64_t C = L->out;
    const size_t n = (size_t)B * (size_t)C;
    const mxp_dtype t = b->act_type[l + 1];
    if (!fuse_ok(m, scan)) { /* the bias, then the separate store and scan */
        for (int e = 0; e < m->ens; e++) {
            *cur = nn_ens_view(m, *cur, e);
            mxp_dtype bt;
            const void *bw = nn_layer_weights(m, l, L->b_off, &bt);
            m->k->add_bias(y32 + (size_t)e * n, nn_view_f32(m, bt, bw, (size_t)C, b->p0), B, C);
        }
        nn_ens_store_scan(m, blk, scan, NN_SLOT_OUT, l, y32, t, b->acts[l + 1], B, C);
        return 1;
    }
    const mxp_act a = l + 1 < m->n_layers ? act_of(m->layers[l + 1].kind) : MXP_ACT_NONE;
    const int span = a == MXP_ACT_NONE ? 1 : 2;
    const mxp_dtype at = span == 2 ? b->act_type[l + 2] : MXP_DTYPE_F32;
    for (int e = 0; e < m->ens; e++) {
        *cur = nn_ens_view(m, *cur, e);
        mxp_dtype bt;
        const void *bw = nn_layer_weights(m, l, L->b_off, &bt);
        nn_scan *sy = blk_slot(m, blk[e], NN_SLOT_OUT, l);
        void *yo = (unsigned char *)b->acts[l + 1] + row_bytes(t, (int64_t)e * B, C);
        mxp_epilogue ep = {.y = y32 + (size_t)e * n, .B = B, .C = C, .y_type = t, .y_out = yo,
                           .act = MXP_ACT_NONE, .y_amax = &sy->amax, .y_nonfinite = &sy->nf,
                           .bias = nn_view_f32(m, bt, bw, (size_t)C, b->p0)};
        nn_scan *sa = NULL;
        void *ao = NULL;
        if (span == 2) {
            sa = blk_slot(m, blk[e], NN_SLOT_OUT, l + 1);
            ao = (unsigned char *)b->acts[l + 2] + row_bytes(at, (int64_t)e * B, C);
            ep.act = a;
            ep.a_type = at;
            ep.a_out = ao;
            ep.a_amax = &sa->amax;
            ep.a_nonfinite = &sa->nf;
        }
        m->k->bias_act_store(&ep);
        if (scan) {
            nn_scan_stored(sy, t, yo, n);
            if (span == 2) nn_scan_stored(sa, at, ao, n);
        }
    }
    if (scan) {
        nn_slot_issued(m, NN_SLOT_OUT, l, n, false);
        if (span == 2) nn_slot_issued(m, NN_SLOT_OUT, l + 1, n, false);
    }
    return span;
}

bool nn_ens_act_bwd_fused(mxp_model *m, int l, int64_t B, const void *dy, void *dx,
                          nn_slots *const *blk, bool scan) {
    const mxp_act a = act_of(m->layers[l].kind);
    if (a == MXP_ACT_NONE || !fuse_ok(m, scan) || nn_grad_scaled(m) ||
        nn_residual_closing(m, l) >= 0)
        return false;
    const nn_bufs *b = &m->b;
    const int s = a == MXP_ACT_TANH ? l + 1 : l; /* tanh's derivative reads its output */
    const int64_t C = m->layers[l].in;
    const size_t n = (size_t)B * (size_t)C;
    const mxp_dtype gt = b->gtype[l];
    for (int e = 0; e < m->ens; e++) {
        nn_scan *slot = blk_slot(m, blk[e], NN_SLOT_DX, l);
        void *dxe = (unsigned char *)dx + row_bytes(gt, (int64_t)e * B, C);
        mxp_act_bwd ab = {
            .act = a, .n = n,
            .dy_type = b->grad_type,
            .dy = (const unsigned char *)dy + row_bytes(b->grad_type, (int64_t)e * B, C),
            .s_type = b->act_type[s],
            .s = (const unsigned char *)b->acts[s] + row_bytes(b->act_type[s], (int64_t)e * B, C),
            .dx_type = gt, .dx = dxe, .dx_amax = &slot->amax, .dx_nonfinite = &slot->nf};
        m->k->act_bwd_store(&ab);
        if (scan) nn_scan_stored(slot, gt, dxe, n);
    }
    if (scan) nn_slot_issued(m, NN_SLOT_DX, l, n, false);
    return true;
}
