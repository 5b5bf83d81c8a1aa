/* nn/model_step.c: the forward/backward driver.
 *
 * Entry points: mxp_model_step, mxp_model_predict, nn_pass_run, nn_forward,
 * nn_layer_vtable_get, nn_scan_dw (also the layer-major ensemble pass's
 * scan, ens_batched.c). The driver owns dtypes and provenance: each layer
 * writes its FP32 output (forward) or input gradient (backward), the driver
 * rounds it into the dtype the policy assigns (activation dtype of the op
 * class, or the grad dtype) and scans it for non-finite values into the
 * pass's result slots (slots.c), so that after the pass nn_pass_finish
 * names the FIRST non-finite output (forward order, then backward order) by
 * pass, layer and op. An FP32 value that overflows only when stored (e.g.
 * 7e4 into FP16) counts as non-finite: the stored tensor is what the next
 * layer reads. Backward also scans each layer's parameter gradients (in
 * the grad slab, after accumulation), which names the first layer when only
 * its dW is non-finite. The loss goes into its slot too: nothing the pass
 * computes is read back until nn_pass_finish. Nothing is allocated here.
 * The first backward after mxp_model_discard_grads writes the parameter
 * gradients instead of adding (m->grad_write, nn_grad_beta).
 * Training passes (a non-NULL site; `scan` below) also feed an attached
 * per-layer monitor (headroom.c: the same scans, recorded after the pass)
 * and take an armed fault (fault.c); in anomaly mode they also check the
 * input batch, each layer's weights before its forward, and weight and
 * bias gradients separately.
 */
#include "backend/devmem.h"
#include "nn/model_sync.h"
#include "nn/nn_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static const nn_layer_vtable vtables[] = {
    [MXP_LAYER_LINEAR] = {"linear", MXP_OP_MATMUL, nn_linear_forward,
                          nn_linear_backward},
    [MXP_LAYER_RELU] = {"relu", MXP_OP_ELEMENTWISE, nn_relu_forward,
                        nn_relu_backward},
    [MXP_LAYER_GELU] = {"gelu", MXP_OP_ELEMENTWISE, nn_gelu_forward,
                        nn_gelu_backward},
    [MXP_LAYER_TANH] = {"tanh", MXP_OP_ELEMENTWISE, nn_tanh_forward,
                        nn_tanh_backward},
    [MXP_LAYER_LAYERNORM] = {"layernorm", MXP_OP_NORM, nn_layernorm_forward,
                             nn_layernorm_backward},
    [MXP_LAYER_EMBEDDING] = {"embedding", MXP_OP_ELEMENTWISE, nn_embedding_forward,
                             nn_embedding_backward},
    [MXP_LAYER_BLOCK] = {"block", MXP_OP_ELEMENTWISE, nn_block_forward, nn_block_backward},
    [MXP_LAYER_LM_HEAD] = {"lm_head", MXP_OP_MATMUL, nn_lm_head_forward,
                           nn_lm_head_backward},
    [MXP_LAYER_RESIDUAL] = {"residual", MXP_OP_ELEMENTWISE, nn_residual_forward,
                            nn_residual_backward},
    [MXP_LAYER_DROPOUT] = {"dropout", MXP_OP_ELEMENTWISE, nn_dropout_forward,
                           nn_dropout_backward},
};
static_assert(sizeof vtables / sizeof vtables[0] == MXP_LAYER_KIND_COUNT,
              "layer vtable out of sync with mxp_layer_kind");

const nn_layer_vtable *nn_layer_vtable_get(mxp_layer_kind kind) {
    return &vtables[kind];
}

/* Round the FP32 values v32 [n] into dst (dtype t); no-op when dst is v32. */
static void store_output(const mxp_model *m, mxp_dtype t, void *dst,
                         const float *v32, size_t n) {
    if (t == MXP_DTYPE_F32) {
        if (dst != (const void *)v32) memcpy(dst, v32, n * sizeof(float));
        return;
    }
    m->k->convert(t, dst, MXP_DTYPE_F32, v32, n);
}

/* Scan v32 [n] (FP32 values whose copy `stored` in dtype t is what the
 * next layer reads) into slot (kind, layer): one absmax pass, or the
 * monitor's scan (a full one when it asks), then the stored count
 * (nn_scan_stored). Training passes (scan) only. */
static void scan_output(mxp_model *m, bool scan, nn_slot_kind kind, int layer,
                        const float *v32, mxp_dtype t, const void *stored, size_t n) {
    if (!scan) return;
    nn_scan *s = nn_slot(m, kind, layer);
    bool full = false;
    if (m->mon)
        full = nn_mon_scan(m, layer, kind == NN_SLOT_DX ? MXP_MON_DX : MXP_MON_OUT, v32, n,
                           t, s);
    else
        m->k->absmax(v32, n, &s->amax, &s->nf);
    nn_scan_stored(s, t, stored, n);
    nn_slot_issued(m, kind, layer, n, full);
}

/* scan_output for a scan a fused pass already wrote into slot (kind,
 * layer) (the monitor keeps plain scans, the only kind the driver fuses
 * under): the stored count. */
static void scan_given(mxp_model *m, bool scan, nn_slot_kind kind, int layer, mxp_dtype t,
                       const void *stored, size_t n) {
    if (!scan) return;
    nn_scan_stored(nn_slot(m, kind, layer), t, stored, n);
    nn_slot_issued(m, kind, layer, n, false);
}

/* store_output then scan_output of v32 [rows, cols], as one pass of the
 * table's bias_act_store (no bias, no activation: the same convert and the
 * same absmax, in one pass, split over the pool) unless fusion is off or
 * the monitor wants more than the plain scan. */
static void store_scan(mxp_model *m, bool scan, nn_slot_kind kind, int layer, float *v32,
                       mxp_dtype t, void *dst, int64_t rows, int64_t cols) {
    const size_t n = (size_t)rows * (size_t)cols;
    if (!m->fuse || (scan && !nn_mon_plain(m))) {
        store_output(m, t, dst, v32, n);
        scan_output(m, scan, kind, layer, v32, t, dst, n);
        return;
    }
    nn_scan *s = nn_slot(m, kind, layer);
    mxp_epilogue e = {.y = v32, .B = rows, .C = cols, .y_type = t, .y_out = dst,
                      .act = MXP_ACT_NONE, .y_amax = &s->amax, .y_nonfinite = &s->nf};
    m->k->bias_act_store(&e);
    scan_given(m, scan, kind, layer, t, dst, n);
}

/* Elements of layer L's "weight" part: up to its bias for linear and
 * layernorm layers; all its parameters for the GPT kinds, which keep
 * several tensors and no b_off (0). */
static size_t weight_count(const nn_layer *L) {
    return L->b_off > L->w_off ? L->b_off - L->w_off : L->n_params;
}

/* Anomaly mode, before layer l's forward: its weight and bias as stored in
 * the work slab, into slots W and B. */
static void check_weights(mxp_model *m, int l) {
    const nn_layer *L = &m->layers[l];
    if (L->n_params == 0) return;
    const size_t wn = weight_count(L), bn = L->n_params - wn;
    nn_scan *w = nn_slot(m, NN_SLOT_W, l), *b = nn_slot(m, NN_SLOT_B, l);
    nn_count_nonfinite(m, m->policy.weight, nn_work_at(m, L->w_off), wn, &w->nf);
    nn_count_nonfinite(m, m->policy.weight, nn_work_at(m, L->b_off), bn, &b->nf);
    nn_slot_issued(m, NN_SLOT_W, l, wn, false);
    nn_slot_issued(m, NN_SLOT_B, l, bn, false);
}

bool nn_scan_dw(mxp_model *m, int l) {
    const nn_layer *L = &m->layers[l];
    const float *g = m->grads + L->w_off;
    nn_scan *s = nn_slot(m, NN_SLOT_DW, l);
    bool full = false;
    if (m->mon)
        full = nn_mon_scan(m, l, MXP_MON_DW, g, L->n_params, MXP_DTYPE_F32, s);
    else
        m->k->absmax(g, L->n_params, &s->amax, &s->nf);
    nn_scan_stored(s, MXP_DTYPE_F32, g, L->n_params);
    return full;
}

/* Layer l's parameter gradients after its backward, into slot DW: one scan
 * (the engine's own, or the monitor's: nn_scan_dw), and in anomaly mode
 * weight and bias separately too (slots GW, GB). */
static void scan_param_grads(mxp_model *m, bool scan, int l) {
    const nn_layer *L = &m->layers[l];
    if (L->n_params == 0 || !scan) return;
    nn_slot_issued(m, NN_SLOT_DW, l, L->n_params, nn_scan_dw(m, l));
    if (nn_mon_anomaly(m)) {
        const float *g = m->grads + L->w_off;
        const size_t wn = weight_count(L);
        m->k->absmax(g, wn, NULL, &nn_slot(m, NN_SLOT_GW, l)->nf);
        m->k->absmax(g + wn, L->n_params - wn, NULL, &nn_slot(m, NN_SLOT_GB, l)->nf);
        nn_slot_issued(m, NN_SLOT_GW, l, wn, false);
        nn_slot_issued(m, NN_SLOT_GB, l, L->n_params - wn, false);
    }
}

/* ---- the fused forward epilogue ---------------------------------------------------
 * A linear layer l (not in its FP8 form) runs its GEMM with the kernel
 * table's forward epilogue (gemm_epi: the GEMM, and on each block of its
 * output, right after the block's last K block, the pass of bias_act_store;
 * the FP16 fast-accumulate GEMM runs the two calls): the pass adds the bias,
 * stores the result in acts[l+1]'s dtype, scans it, and, when layer l+1 is
 * an element-wise activation, computes that activation from the stored
 * values, stores it in acts[l+2]'s dtype and scans it too (kernels.h,
 * mxp_epilogue: the same bits as the unfused layer calls, stores and
 * scans), into the result slots scan_output would fill. Not fused: anomaly mode, a full or histogram monitor
 * scan, an armed fault on either layer, and m->fuse off. */

static mxp_act act_kind(mxp_layer_kind k) {
    switch (k) {
    case MXP_LAYER_RELU: return MXP_ACT_RELU;
    case MXP_LAYER_GELU: return MXP_ACT_GELU;
    case MXP_LAYER_TANH: return MXP_ACT_TANH;
    default: return MXP_ACT_NONE;
    }
}

/* Layers the fused epilogue covers from layer l (0: none, 1: the linear
 * layer, 2: it and the activation after it, l + 1 < n_run). */
static int fusable(const mxp_model *m, int l, int n_run, bool scan) {
    if (!m->fuse || m->layers[l].kind != MXP_LAYER_LINEAR) return 0;
    if (m->fp8 && !nn_layer_fp32(m, l)) return 0;
    if (scan && (!nn_mon_plain(m) || nn_mon_anomaly(m))) return 0;
    if (scan && nn_fault_targets(m, false, l)) return 0;
    if (l + 1 >= n_run || act_kind(m->layers[l + 1].kind) == MXP_ACT_NONE) return 1;
    return scan && nn_fault_targets(m, false, l + 1) ? 1 : 2;
}

/* Forward of layers l .. l + span - 1 through the fused epilogue. */
static void forward_fused(mxp_model *m, int l, int span, int64_t B, bool scan) {
    nn_bufs *b = &m->b;
    const mxp_dtype t = b->act_type[l + 1];
    const size_t n = (size_t)B * (size_t)m->width[l + 1];
    float *y32 = t == MXP_DTYPE_F32 ? (float *)b->acts[l + 1] : b->sy;
    nn_scan *sy = nn_slot(m, NN_SLOT_OUT, l);
    mxp_epilogue e = {.y = y32, .B = B, .C = m->width[l + 1], .y_type = t,
                      .y_out = b->acts[l + 1], .act = MXP_ACT_NONE,
                      .y_amax = &sy->amax, .y_nonfinite = &sy->nf};
    if (span == 2) {
        nn_scan *sa = nn_slot(m, NN_SLOT_OUT, l + 1);
        e.act = act_kind(m->layers[l + 1].kind);
        e.a_type = b->act_type[l + 2];
        e.a_out = b->acts[l + 2];
        e.a_amax = &sa->amax;
        e.a_nonfinite = &sa->nf;
    }
    nn_linear_forward_epi(m, l, B, &e);
    scan_given(m, scan, NN_SLOT_OUT, l, t, b->acts[l + 1], n);
    if (span == 2) scan_given(m, scan, NN_SLOT_OUT, l + 1, e.a_type, b->acts[l + 2], n);
}

void nn_forward(mxp_model *m, const float *x, int64_t B, bool scan) {
    nn_bufs *b = &m->b;
    const bool anomaly = scan && nn_mon_anomaly(m);
    if (anomaly) { /* the input batch: slot (OUT, -1) */
        const size_t n = (size_t)B * (size_t)m->width[0];
        nn_scan *s = nn_slot(m, NN_SLOT_OUT, -1);
        m->k->absmax(x, n, &s->amax, &s->nf);
        nn_scan_stored(s, MXP_DTYPE_F32, x, n);
        nn_slot_issued(m, NN_SLOT_OUT, -1, n, false);
    }
    store_output(m, b->act_type[0], b->acts[0], x, (size_t)B * (size_t)m->width[0]);
    const int n_run = b->fused_head ? m->n_layers - 1 : m->n_layers; /* head: head_fused */
    for (int l = 0; l < n_run; l++) {
        const int span = fusable(m, l, n_run, scan);
        if (span > 0) {
            forward_fused(m, l, span, B, scan);
            l += span - 1;
            continue;
        }
        const nn_layer_vtable *vt = &vtables[m->layers[l].kind];
        const mxp_dtype t = b->act_type[l + 1];
        const size_t n = (size_t)B * (size_t)m->width[l + 1];
        float *y32 = t == MXP_DTYPE_F32 ? (float *)b->acts[l + 1] : b->sy;
        if (anomaly) check_weights(m, l);
        vt->forward(m, l, B, y32);
        if (scan) nn_fault_apply(m, false, l, y32, n);
        store_scan(m, scan, NN_SLOT_OUT, l, y32, t, b->acts[l + 1], B, m->width[l + 1]);
    }
}

/* ---- the fused lm_head + cross-entropy ------------------------------------------------
 * With b.fused_head (nn_fused_head) the [B, V] logits are never stored:
 * head_fused computes them NN_HEAD_ROWS rows at a time into lc, scans
 * them, computes the loss rows and their gradient in place, and stores
 * that in the grad dtype into g[0], where the lm_head's backward reads it
 * whole (its dW reduces over all rows in one GEMM, as before). A GEMM gives
 * every row the same bits whatever M (kernels.h) and the loss rows are
 * summed in the kernel's order (nn_xent_rows), so loss, gradients and the
 * first non-finite site are those of the unfused path. */

/* What nn_fault_apply would poison in the whole tensor [total], for the
 * elements [lo, lo + n) held in v [n]. */
static void fault_chunk(const mxp_model *m, int layer, float *v, size_t lo, size_t n,
                        size_t total) {
    if (total == 0 || !nn_fault_targets(m, false, layer)) return;
    const float val = m->fault.kind == MXP_FAULT_NAN   ? NAN
                      : m->fault.kind == MXP_FAULT_INF ? INFINITY
                                                       : (float)m->fault.value;
    size_t k = m->fault.elements < 1 ? 1 : (size_t)m->fault.elements;
    if (k > total) k = total;
    const size_t stride = total / k;
    for (size_t i = 0; i < k; i++)
        if (i * stride >= lo && i * stride < lo + n) v[i * stride - lo] = val;
}

/* scan_output for one chunk of a tensor scanned in chunks: the chunk's
 * results (a scratch slot) folded into slot (kind, layer) (the monitor's
 * statistics add up; the output absmax of the pass is the max over
 * chunks). */
static void scan_chunk(mxp_model *m, bool scan, nn_slot_kind kind, int layer, const float *v32,
                       mxp_dtype t, const void *stored, size_t n) {
    if (!scan) return;
    nn_scan c = {0};
    bool full = false;
    if (m->mon)
        full = nn_mon_scan(m, layer, kind == NN_SLOT_DX ? MXP_MON_DX : MXP_MON_OUT, v32, n,
                           t, &c);
    else
        m->k->absmax(v32, n, &c.amax, &c.nf);
    nn_scan_stored(&c, t, stored, n);
    nn_scan_fold(nn_slot(m, kind, layer), &c);
    nn_slot_issued(m, kind, layer, n, full);
}

/* The lm_head (layer L-1) and the cross-entropy of batch b, fused in row
 * chunks; with `backward` the loss gradient (scaled) goes into g[0]. The
 * mean loss into the loss slot; the scans of the logits and of the loss
 * gradient into slots (OUT, L-1) and (DX, -1). */
static void head_fused(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       bool scan) {
    nn_bufs *bf = &m->b;
    const int l = m->n_layers - 1;
    const nn_layer *L = &m->layers[l];
    const int64_t B = b->B, C = L->in, V = L->out;
    const mxp_dtype gt = bf->gtype[m->n_layers];
    const float k = (float)((double)(backward ? loss_scale : 1.0f) / (double)B);
    if (scan && nn_mon_anomaly(m)) check_weights(m, l);
    mxp_dtype xt, wt;
    const unsigned char *x = nn_matmul_input(m, l, B, &xt);
    const void *w = nn_layer_weights(m, l, L->p_off, &wt);
    const size_t xe = mxp_dtype_info(xt)->size, ge = mxp_dtype_info(gt)->size;
    double *total = &bf->slots->loss; /* the rows' sum, then the mean */
    *total = 0.0;
    for (int64_t r0 = 0; r0 < B; r0 += bf->lc_rows) {
        const int64_t R = B - r0 < bf->lc_rows ? B - r0 : bf->lc_rows;
        const size_t n = (size_t)R * (size_t)V, lo = (size_t)r0 * (size_t)V;
        mxp_gemm_args g = { /* logits [R, V] = x [R, C] wte^T, as nn_lm_head_forward */
            .trans_a = false, .trans_b = true, .M = R, .N = V, .K = C,
            .a_type = xt, .A = x + (size_t)(r0 * C) * xe, .lda = C,
            .b_type = wt, .B = w, .ldb = C,
            .C = bf->lc, .ldc = V, .alpha = 1.0f, .beta = 0.0f,
        };
        m->k->gemm(&g);
        if (scan) fault_chunk(m, l, bf->lc, lo, n, (size_t)B * (size_t)V);
        scan_chunk(m, scan, NN_SLOT_OUT, l, bf->lc, MXP_DTYPE_F32, bf->lc, n);
        nn_xent_rows(m, backward ? bf->lc : NULL, bf->lc, b->labels + r0, R, V, k, total);
        if (backward) {
            void *dst = (unsigned char *)bf->g[0] + lo * ge;
            store_output(m, gt, dst, bf->lc, n);
            scan_chunk(m, scan, NN_SLOT_DX, -1, bf->lc, gt, dst, n);
        }
    }
    *total = *total / (double)B;
}

/* Lowest layer index that owns parameters (backward stops there). */
static int first_param_layer(const mxp_model *m) {
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_params > 0) return l;
    return m->n_layers;
}

/* The fused backward of an element-wise activation layer l (kernels.h,
 * mxp_act_bwd: widen dY and the saved tensor, the derivative, the store in
 * the grad dtype and the scan in one pass, the bits of the unfused layer
 * call + store + scan), under the forward epilogue's conditions, and not
 * where per-layer loss scaling may rescale dX between the two
 * (nn_grad_rescales: decided by groups, no scale read). Writes
 * dX into dst (dtype gt) and returns true, or returns false: run unfused. */
static bool backward_act_fused(mxp_model *m, int l, int64_t B, const void *dy, void *dst,
                               mxp_dtype gt, bool scan) {
    const mxp_act a = act_kind(m->layers[l].kind);
    if (!m->fuse || a == MXP_ACT_NONE || nn_grad_rescales(m, l - 1, l)) return false;
    if (nn_residual_closing(m, l) >= 0) return false; /* dX takes a skip gradient */
    if (scan && (!nn_mon_plain(m) || nn_mon_anomaly(m) || nn_fault_targets(m, true, l)))
        return false;
    const nn_bufs *b = &m->b;
    const int s = a == MXP_ACT_TANH ? l + 1 : l; /* tanh's derivative reads its output */
    const size_t n = (size_t)B * (size_t)m->layers[l].in;
    nn_scan *slot = nn_slot(m, NN_SLOT_DX, l);
    mxp_act_bwd e = {.act = a, .n = n, .dy_type = b->grad_type, .dy = dy,
                     .s_type = b->act_type[s], .s = b->acts[s], .dx_type = gt, .dx = dst,
                     .dx_amax = &slot->amax, .dx_nonfinite = &slot->nf};
    m->k->act_bwd_store(&e);
    scan_given(m, scan, NN_SLOT_DX, l, gt, dst, n);
    return true;
}

/* The backward of a linear layer l with the store and scan of its dX
 * (store_scan: bias_act_store without bias or activation) run by its dX
 * GEMM on each block of dX (gemm_epi: the same bits), when store_scan would
 * take its fused pass and nothing touches dX between the GEMM and the
 * store (no per-layer loss scaling rescale, nn_grad_rescales; no armed
 * fault on the layer),
 * not in its FP8 form. dx32 [B, in] is the FP32 dX, stored into
 * g[cur ^ 1]. Returns false: run unfused. */
static bool backward_linear_fused(mxp_model *m, int l, int64_t B, float *dx32, mxp_dtype gt,
                                  int cur, bool scan) {
    const nn_layer *L = &m->layers[l];
    if (!m->fuse || L->kind != MXP_LAYER_LINEAR || (m->fp8 && !nn_layer_fp32(m, l))) return false;
    if (nn_grad_rescales(m, l - 1, l)) return false;
    if (scan && (!nn_mon_plain(m) || nn_fault_targets(m, true, l))) return false;
    if (nn_residual_closing(m, l) >= 0) return false; /* dX takes a skip gradient */
    nn_bufs *b = &m->b;
    nn_scan *slot = nn_slot(m, NN_SLOT_DX, l);
    mxp_epilogue e = {.y = dx32, .B = B, .C = L->in, .y_type = gt, .y_out = b->g[cur ^ 1],
                      .act = MXP_ACT_NONE, .y_amax = &slot->amax, .y_nonfinite = &slot->nf};
    nn_linear_backward_epi(m, l, B, b->g[cur], &e);
    scan_given(m, scan, NN_SLOT_DX, l, gt, b->g[cur ^ 1], (size_t)B * (size_t)L->in);
    return true;
}

/* Layers L-1 .. first parameter layer: dX into the ping-pong grad buffers
 * (dY of the last layer is in g[0]), parameter grads += into the slab, or
 * = when the gradients were discarded (m->grad_write: every layer that
 * owns parameters runs here, each writes all of its gradients; the tied
 * lm_head runs before the embedding that adds into the same wte). */
static void backward_layers(mxp_model *m, int64_t B, bool scan) {
    nn_bufs *b = &m->b;
    const int lo = first_param_layer(m);
    int cur = 0; /* g[cur] holds dY of layer l */
    for (int l = m->n_layers - 1; l >= lo; l--) {
        const nn_layer *L = &m->layers[l];
        const nn_layer_vtable *vt = &vtables[L->kind];
        const bool need_dx = l > lo;
        const mxp_dtype gt = b->gtype[l]; /* dX: the gradient of acts[l] */
        if (need_dx && backward_act_fused(m, l, B, b->g[cur], b->g[cur ^ 1], gt, scan)) {
            cur ^= 1;
            continue; /* no parameters: nothing for scan_param_grads */
        }
        float *dx32 = NULL;
        if (need_dx)
            dx32 = gt == MXP_DTYPE_F32 ? (float *)b->g[cur ^ 1] : b->sy;
        if (need_dx && backward_linear_fused(m, l, B, dx32, gt, cur, scan)) {
            cur ^= 1;
            scan_param_grads(m, scan, l);
            continue;
        }
        vt->backward(m, l, B, b->g[cur], dx32);
        if (need_dx) nn_residual_skip_add(m, l, B, dx32); /* a block's first layer */
        if (need_dx) /* per-layer loss scaling: S(l-1) / S(l), read where it lives */
            nn_grad_rescale(m, l - 1, l, dx32, (size_t)B * (size_t)L->in);
        if (scan && nn_fault_targets(m, true, l)) {
            /* a layer's gradient: its parameter grads, else its dx */
            if (L->n_params > 0)
                nn_fault_apply(m, true, l, m->grads + L->w_off, weight_count(L));
            else if (need_dx)
                nn_fault_apply(m, true, l, dx32, (size_t)B * (size_t)L->in);
        }
        if (need_dx) {
            store_scan(m, scan, NN_SLOT_DX, l, dx32, gt, b->g[cur ^ 1], B, L->in);
            cur ^= 1;
        }
        scan_param_grads(m, scan, l);
    }
}

/* Batch checks shared by step and predict: names the argument and range. */
static mxp_status check_rows(const mxp_model *m, const float *x, int64_t B,
                             mxp_error *err) {
    if (B < 1 || B > m->spec.max_batch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch B=%lld; accepted: 1..%lld (spec.max_batch)",
                             (long long)B, (long long)m->spec.max_batch);
    if (!x)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch x is NULL; accepted: FP32 [B, %lld]",
                             (long long)m->spec.in_dim);
    if (m->spec.seq_len > 1 && B % m->spec.seq_len != 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch B=%lld rows; accepted: a multiple of spec.seq_len=%lld "
                             "(whole sequences)",
                             (long long)B, (long long)m->spec.seq_len);
    if (m->layers[0].kind == MXP_LAYER_EMBEDDING)
        for (int64_t i = 0; i < B; i++)
            if (!(x[i] >= 0.0f && x[i] < (float)m->layers[0].V) || x[i] != floorf(x[i]))
                return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                     "batch x[%lld]=%g is not a token id; accepted: "
                                     "integers 0..%lld",
                                     (long long)i, (double)x[i],
                                     (long long)m->layers[0].V - 1);
    return MXP_OK;
}

static mxp_status check_batch(const mxp_model *m, const mxp_batch *b,
                              bool backward, float loss_scale, mxp_error *err) {
    if (!b)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch is NULL; accepted: an mxp_batch");
    mxp_status s = check_rows(m, b->x, b->B, err);
    if (s) return s;
    const int64_t C = mxp_model_out_dim(m);
    if (m->spec.loss != MXP_LOSS_XENT && !b->y)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch y is NULL; loss %s needs FP32 targets "
                             "[B, %lld]",
                             mxp_loss_kind_name(m->spec.loss),
                             (long long)mxp_model_target_dim(m));
    if (m->spec.loss == MXP_LOSS_XENT) {
        if (!b->labels)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "batch labels is NULL; loss xent needs int32 "
                                 "labels [B] in [0, %lld)",
                                 (long long)C);
        for (int64_t i = 0; i < b->B; i++)
            if (b->labels[i] < 0 || b->labels[i] >= C)
                return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                     "batch labels[%lld]=%d; accepted: 0..%lld",
                                     (long long)i, (int)b->labels[i],
                                     (long long)(C - 1));
    }
    if (backward && !(loss_scale > 0.0f && isfinite(loss_scale)))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "loss_scale=%g; accepted: finite and > 0",
                             (double)loss_scale);
    return MXP_OK;
}

mxp_status nn_check_batch(const mxp_model *m, const mxp_batch *b, bool backward,
                          float loss_scale, mxp_error *err) {
    return check_batch(m, b, backward, loss_scale, err);
}

mxp_status nn_pass_run(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       bool scan, mxp_error *err) {
    if (backward && m->inference)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "mxp_model_step: backward=true on a model created with "
                             "mxp_model_create_inference (no gradients); accepted: "
                             "backward=false, or a model from mxp_model_create");
    mxp_status s = check_batch(m, b, backward, loss_scale, err);
    if (s) return s;
    if (scan) nn_slots_begin(m);
    m->fp8_observe = backward && m->fp8; /* FP8 amax: training steps only */
    m->drop_train = backward;            /* dropout: training passes only */
    const double t0 = mxp_time_now();
    nn_forward(m, b->x, b->B, scan);

    const mxp_dtype gt = m->b.gtype[m->n_layers]; /* the loss gradient's storage */
    const bool fused = m->b.fused_head;
    float *dpred32 = NULL;
    if (backward && !fused) dpred32 = gt == MXP_DTYPE_F32 ? (float *)m->b.g[0] : m->b.sy;
    if (fused)
        head_fused(m, b, backward, loss_scale, scan);
    else
        nn_loss_forward(m, b, dpred32, backward ? loss_scale : 1.0f, &m->b.slots->loss);
    const double t1 = mxp_time_now();
    m->time_forward_s += t1 - t0;

    if (backward) {
        if (!fused) /* the fused head scanned the loss gradient's chunks */
            store_scan(m, scan, NN_SLOT_DX, -1, dpred32, gt, m->b.g[0], b->B,
                       mxp_model_out_dim(m));
        m->grad_write = m->grads_stale; /* discarded: this backward writes them */
        backward_layers(m, b->B, scan);
        m->grad_write = false;
        m->grads_stale = false;
        m->time_backward_s += mxp_time_now() - t1;
    }
    if (m->fp8_observe) mxp_fp8_scaling_update(m->fp8);
    m->fp8_observe = false;
    m->drop_train = false;
    return MXP_OK;
}

static mxp_status mxp_model_step_dev(mxp_model *m, const mxp_batch *b, bool backward,
                          float loss_scale, double *loss,
                          mxp_nonfinite_site *site, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    if (m->ens > 1 && m->ens_member < 0) /* an ensemble: member by member */
        return nn_ens_step(m, b, backward, loss_scale, loss, site, err);
    /* a training pass (site): scans, monitor, faults */
    mxp_status s = nn_pass_run(m, b, backward, loss_scale, site != NULL, err);
    if (s) return s;
    /* the pass is over: its one read of the result slots (site, monitor, loss) */
    nn_pass_finish(m, backward, site, loss);
    return MXP_OK;
}

/* mxp_model_step inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_step(mxp_model *m, const mxp_batch *b, bool backward,
                          float loss_scale, double *loss,
                          mxp_nonfinite_site *site, mxp_error *err) {
    mxp_status r_ = nn_sync_pull(m, err);
    if (r_ != MXP_OK) return r_;
    mxp_dev_enter();
    r_ = mxp_model_step_dev(m, b, backward, loss_scale, loss, site, err);
    mxp_dev_leave();
    return r_;
}

void mxp_model_phase_times(const mxp_model *m, double *forward_s, double *backward_s) {
    if (forward_s) *forward_s = m ? m->time_forward_s : 0.0;
    if (backward_s) *backward_s = m ? m->time_backward_s : 0.0;
}

static mxp_status mxp_model_predict_dev(mxp_model *m, const float *x, int64_t B,
                             float *pred, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    if (m->ens > 1 && m->ens_member < 0) /* an ensemble: member by member */
        return nn_ens_predict(m, x, B, pred, err);
    mxp_status s = check_rows(m, x, B, err);
    if (s) return s;
    if (!pred)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "pred is NULL; accepted: FP32 [B, %lld]",
                             (long long)mxp_model_out_dim(m));
    nn_forward(m, x, B, false);
    const int L = m->n_layers;
    const size_t n = (size_t)B * (size_t)m->width[L];
    if (m->b.fused_head) { /* the head's FP32 output straight into pred */
        nn_lm_head_forward(m, L - 1, B, pred);
        return MXP_OK;
    }
    if (m->b.act_type[L] == MXP_DTYPE_F32)
        memcpy(pred, m->b.acts[L], n * sizeof(float));
    else
        m->k->convert(MXP_DTYPE_F32, pred, m->b.act_type[L], m->b.acts[L], n);
    if (m->spec.loss == MXP_LOSS_GAUSSIAN) nn_gauss_bound_pred(m, pred, B);
    return MXP_OK;
}

/* mxp_model_predict inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_predict(mxp_model *m, const float *x, int64_t B,
                             float *pred, mxp_error *err) {
    mxp_status r_ = nn_sync_pull(m, err);
    if (r_ != MXP_OK) return r_;
    mxp_dev_enter();
    r_ = mxp_model_predict_dev(m, x, B, pred, err);
    mxp_dev_leave();
    return r_;
}
