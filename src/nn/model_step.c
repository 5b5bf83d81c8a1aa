/* nn/model_step.c: the forward/backward driver.
 *
 * Entry points: mxp_model_step, mxp_model_predict, nn_forward,
 * nn_layer_vtable_get. The driver owns dtypes and provenance: each layer
 * writes its FP32 output (forward) or input gradient (backward), the driver
 * rounds it into the dtype the policy assigns (activation dtype of the op
 * class, or the grad dtype) and scans it for non-finite values, so that the
 * FIRST non-finite output (forward order, then backward order) is named by
 * pass, layer and op. An FP32 value that overflows only when stored (e.g.
 * 7e4 into FP16) counts as non-finite: the stored tensor is what the next
 * layer reads. Backward also scans each layer's parameter gradients (in
 * the grad slab, after accumulation), which names the first layer when only
 * its dW is non-finite. Nothing is allocated here.
 * Training passes (a non-NULL site) also feed an attached per-layer monitor
 * (headroom.c: the same scans, recorded) and take an armed fault (fault.c);
 * in anomaly mode they also check the input batch, each layer's weights
 * before its forward, and weight and bias gradients separately.
 */
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

/* Record the first non-finite site; `what` names the tensor for the
 * monitor ("output", "grad_input", "weight", ...). */
static void site_set(mxp_model *m, mxp_nonfinite_site *site, bool backward,
                     int layer, const char *op, int64_t count, const char *what) {
    site->found = true;
    site->backward = backward;
    site->layer = layer;
    site->op = op;
    site->count = count;
    nn_mon_note_site(m, site, what);
}

/* Record the output (FP32 values v32, stored copy `stored` in dtype t) in
 * site when it is the first non-finite one. The cheap path is one absmax
 * over v32; the stored copy is counted only when v32 has non-finite values
 * or its largest value overflows in t. */
static void scan_output(mxp_model *m, mxp_nonfinite_site *site,
                        bool backward, int layer, const char *op,
                        const float *v32, mxp_dtype t, const void *stored,
                        size_t n) {
    /* a monitor (training passes only) records every layer's scan */
    const bool mon = site && m->mon; /* layer -1: the loss gradient's slot */
    if ((!site || site->found) && !mon) return;
    int64_t nf = 0;
    float amax = mon ? nn_mon_scan(m, layer, backward ? MXP_MON_DX : MXP_MON_OUT,
                                   v32, n, t, &nf)
                     : m->k->absmax(v32, n, &nf);
    if (site->found) return;
    int64_t count = nf;
    if (t != MXP_DTYPE_F32 && (nf > 0 || !isfinite(mxp_round_to(t, amax)))) {
        int64_t c = 0;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(mxp_load_f32(t, stored, i))) c++;
        if (c > count) count = c;
    }
    if (count > 0)
        site_set(m, site, backward, layer, op, count, backward ? "grad_input" : "output");
}

/* Anomaly mode, before layer l's forward: its weight and bias as stored in
 * the work slab. */
static void check_weights(mxp_model *m, mxp_nonfinite_site *site, int l,
                          const char *op) {
    const nn_layer *L = &m->layers[l];
    if (site->found || L->n_params == 0) return;
    const size_t wn = L->b_off - L->w_off, bn = L->n_params - wn;
    int64_t c = nn_count_nonfinite(m, m->policy.weight, nn_work_at(m, L->w_off), wn);
    if (c > 0) {
        site_set(m, site, false, l, op, c, "weight");
        return;
    }
    c = nn_count_nonfinite(m, m->policy.weight, nn_work_at(m, L->b_off), bn);
    if (c > 0) site_set(m, site, false, l, op, c, "bias");
}

/* Layer l's parameter gradients after its backward: one scan (the engine's
 * own), or weight and bias separately in anomaly mode; recorded by the
 * monitor as its DW tensor. */
static void scan_param_grads(mxp_model *m, mxp_nonfinite_site *site, int l,
                             const char *op) {
    const nn_layer *L = &m->layers[l];
    const bool mon = site && m->mon;
    if (L->n_params == 0 || ((!site || site->found) && !mon)) return;
    const float *g = m->grads + L->w_off;
    int64_t nf = 0;
    if (mon)
        (void)nn_mon_scan(m, l, MXP_MON_DW, g, L->n_params, MXP_DTYPE_F32, &nf);
    else
        (void)m->k->absmax(g, L->n_params, &nf);
    if (site->found || nf == 0) return;
    if (nn_mon_anomaly(m)) {
        const size_t wn = L->b_off - L->w_off;
        int64_t cw = 0, cb = 0;
        (void)m->k->absmax(g, wn, &cw);
        (void)m->k->absmax(g + wn, L->n_params - wn, &cb);
        if (cw > 0)
            site_set(m, site, true, l, op, cw, "grad_weight");
        else
            site_set(m, site, true, l, op, cb, "grad_bias");
        return;
    }
    site_set(m, site, true, l, op, nf, "grad_param");
}

void nn_forward(mxp_model *m, const float *x, int64_t B,
                mxp_nonfinite_site *site) {
    nn_bufs *b = &m->b;
    const bool anomaly = site && nn_mon_anomaly(m);
    if (site && m->mon) nn_mon_begin_pass(m);
    if (anomaly && !site->found) {
        int64_t nf = 0;
        (void)m->k->absmax(x, (size_t)B * (size_t)m->width[0], &nf);
        if (nf > 0) site_set(m, site, false, -1, "input", nf, "input");
    }
    store_output(m, b->act_type[0], b->acts[0], x, (size_t)B * (size_t)m->width[0]);
    for (int l = 0; l < m->n_layers; l++) {
        const nn_layer_vtable *vt = &vtables[m->layers[l].kind];
        const mxp_dtype t = b->act_type[l + 1];
        const size_t n = (size_t)B * (size_t)m->width[l + 1];
        float *y32 = t == MXP_DTYPE_F32 ? (float *)b->acts[l + 1] : b->sy;
        if (anomaly) check_weights(m, site, l, vt->name);
        vt->forward(m, l, B, y32);
        if (site) nn_fault_apply(m, false, l, y32, n);
        store_output(m, t, b->acts[l + 1], y32, n);
        scan_output(m, site, false, l, vt->name, y32, t, b->acts[l + 1], n);
    }
}

/* Lowest layer index that owns parameters (backward stops there). */
static int first_param_layer(const mxp_model *m) {
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].n_params > 0) return l;
    return m->n_layers;
}

/* Layers L-1 .. first parameter layer: dX into the ping-pong grad buffers
 * (dY of the last layer is in g[0]), parameter grads += into the slab. */
static void backward_layers(mxp_model *m, int64_t B, mxp_nonfinite_site *site) {
    nn_bufs *b = &m->b;
    const mxp_dtype gt = b->grad_type;
    const int lo = first_param_layer(m);
    int cur = 0; /* g[cur] holds dY of layer l */
    for (int l = m->n_layers - 1; l >= lo; l--) {
        const nn_layer *L = &m->layers[l];
        const nn_layer_vtable *vt = &vtables[L->kind];
        const bool need_dx = l > lo;
        float *dx32 = NULL;
        if (need_dx)
            dx32 = gt == MXP_DTYPE_F32 ? (float *)b->g[cur ^ 1] : b->sy;
        vt->backward(m, l, B, b->g[cur], dx32);
        if (need_dx && m->grad_scales && m->grad_scales[l - 1] != m->grad_scales[l])
            m->k->scale(dx32, m->grad_scales[l - 1] / m->grad_scales[l],
                        (size_t)B * (size_t)L->in); /* per-layer loss scaling */
        if (site && nn_fault_targets(m, true, l)) {
            /* a layer's gradient: its parameter grads, else its dx */
            if (L->n_params > 0)
                nn_fault_apply(m, true, l, m->grads + L->w_off, L->b_off - L->w_off);
            else if (need_dx)
                nn_fault_apply(m, true, l, dx32, (size_t)B * (size_t)L->in);
        }
        if (need_dx) {
            const size_t n = (size_t)B * (size_t)L->in;
            store_output(m, gt, b->g[cur ^ 1], dx32, n);
            scan_output(m, site, true, l, vt->name, dx32, gt, b->g[cur ^ 1], n);
            cur ^= 1;
        }
        scan_param_grads(m, site, l, vt->name);
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
    if (m->spec.loss == MXP_LOSS_MSE && !b->y)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch y is NULL; loss mse needs FP32 targets "
                             "[B, %lld]",
                             (long long)C);
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

mxp_status mxp_model_step(mxp_model *m, const mxp_batch *b, bool backward,
                          float loss_scale, double *loss,
                          mxp_nonfinite_site *site, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    mxp_status s = check_batch(m, b, backward, loss_scale, err);
    if (s) return s;
    if (site) {
        memset(site, 0, sizeof *site);
        site->op = "";
    }
    m->fp8_observe = backward && m->fp8; /* FP8 amax: training steps only */
    const double t0 = mxp_time_now();
    nn_forward(m, b->x, b->B, site);

    const mxp_dtype gt = m->b.grad_type;
    float *dpred32 = NULL;
    if (backward) dpred32 = gt == MXP_DTYPE_F32 ? (float *)m->b.g[0] : m->b.sy;
    const char *lname = mxp_loss_kind_name(m->spec.loss);
    double lv = nn_loss_forward(m, b, dpred32, backward ? loss_scale : 1.0f);
    if (loss) *loss = lv;
    if (site && !site->found && !isfinite(lv))
        site_set(m, site, false, -1, lname, 1, "output");
    const double t1 = mxp_time_now();
    m->time_forward_s += t1 - t0;

    if (backward) {
        const size_t n = (size_t)b->B * (size_t)mxp_model_out_dim(m);
        store_output(m, gt, m->b.g[0], dpred32, n);
        scan_output(m, site, true, -1, lname, dpred32, gt, m->b.g[0], n);
        backward_layers(m, b->B, site);
        m->time_backward_s += mxp_time_now() - t1;
    }
    if (m->fp8_observe) mxp_fp8_scaling_update(m->fp8);
    m->fp8_observe = false;
    return MXP_OK;
}

void mxp_model_phase_times(const mxp_model *m, double *forward_s, double *backward_s) {
    if (forward_s) *forward_s = m ? m->time_forward_s : 0.0;
    if (backward_s) *backward_s = m ? m->time_backward_s : 0.0;
}

mxp_status mxp_model_predict(mxp_model *m, const float *x, int64_t B,
                             float *pred, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    mxp_status s = check_rows(m, x, B, err);
    if (s) return s;
    if (!pred)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "pred is NULL; accepted: FP32 [B, %lld]",
                             (long long)mxp_model_out_dim(m));
    nn_forward(m, x, B, NULL);
    const int L = m->n_layers;
    const size_t n = (size_t)B * (size_t)m->width[L];
    if (m->b.act_type[L] == MXP_DTYPE_F32)
        memcpy(pred, m->b.acts[L], n * sizeof(float));
    else
        m->k->convert(MXP_DTYPE_F32, pred, m->b.act_type[L], m->b.acts[L], n);
    return MXP_OK;
}
