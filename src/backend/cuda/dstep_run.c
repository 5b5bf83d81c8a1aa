/* backend/cuda/dstep_run.c: the device step (dstep.h): a fixed sequence of
 * ops-table calls over the plan's buffers (dstep_plan.c), one
 * device-to-host copy, eager or as a replayed CUDA graph.
 *
 * Entry points: mxp_ds_step, mxp_ds_set_fault.
 * The op order and storage rules copy the CPU model's (nn/model_step.c,
 * layer_linear.c, layer_act.c, layer_norm.c, loss.c) and the trainer's
 * step (train/trainer.c: micro-batch i's loss scaled by scale * B_i / B,
 * gradients accumulated, the step's loss the B_i / B weighted sum);
 * tests/test_dstep_emu.c holds them together. Differences on purpose:
 * decide, the update and the scaler rule run before the report (a single
 * device needs no host agreement on found_inf, so the step has no
 * mid-step sync), and the loss travels in the control block. Plain C;
 * nothing here prints or exits.
 */
#include <math.h>
#include <string.h>

#include "backend/cuda/dstep_internal.h"

static int act_code(mxp_ds_kind k) {
    return k == MXP_DS_RELU ? MXP_MK_ACT_RELU : k == MXP_DS_GELU ? MXP_MK_ACT_GELU
                                                                 : MXP_MK_ACT_TANH;
}

/* v32 [count] FP32 into acts-like storage dst of dtype t (the rounding step
 * of the CPU driver): nothing when dst already is v32. */
static int store(mxp_ds_plan *p, mxp_dtype t, void *dst, const float *v32, size_t count,
                 char *why, size_t n) {
    if ((const void *)dst == (const void *)v32) return 0;
    return p->ops->store_scan(p->dev, t, dst, v32, count, NULL, NULL, why, n);
}

/* v32 into dst (dtype t) with its scan into slot k of micro-batch i: in a
 * plan with scans always (in place when dst is v32: an FP32 output is
 * scanned too), else store(). */
static int store_slot(mxp_ds_plan *p, int i, int k, mxp_dtype t, void *dst, const float *v32,
                      size_t count, char *why, size_t n) {
    if (!p->scans) return store(p, t, dst, v32, count, why, n);
    mxp_ds_scan *sl = p->scan_d + (size_t)i * (size_t)p->S + (size_t)k;
    return p->ops->store_scan(p->dev, t, dst, v32, count, &sl->amax, &sl->nonfinite, why, n);
}

/* ---- planted faults (mxp_ds_set_fault; nn/fault.c on the CPU) ---- */

void mxp_ds_set_fault(mxp_ds_plan *p, const mxp_ds_fault *f) {
    memset(&p->fault, 0, sizeof p->fault);
    if (f && f->armed) p->fault = *f;
}

static bool fault_at(const mxp_ds_plan *p, bool backward, int l) {
    return p->fault.armed && p->fault.backward == backward && p->fault.layer == l;
}

/* A backward fault of layer l lands in its weight gradient (scanned). */
static bool fault_dw(const mxp_ds_plan *p, int l) {
    return fault_at(p, true, l) && p->dev_w[l] >= 0 && p->cnt_w[l] > 0;
}

/* The fault's evenly spaced values into v [count] (device), one upload
 * each (eager steps only). */
static int plant(mxp_ds_plan *p, float *v, size_t count, char *why, size_t n) {
    size_t k = p->fault.elements < 1 ? 1 : (size_t)p->fault.elements;
    if (count == 0) return 0;
    if (k > count) k = count;
    const size_t stride = count / k;
    const float val = p->fault.value;
    for (size_t j = 0; j < k; j++)
        if (p->ops->upload(p->dev, v + j * stride, &val, sizeof val, why, n)) return 1;
    return 0;
}

/* A backward fault after layer l's backward of micro-batch i: its weight
 * gradient, scanned in place into slot 2 L + 1, else the input gradient
 * dx32 [n_in] it passes down (when it has one). */
static int plant_bwd(mxp_ds_plan *p, int i, int l, float *dx32, size_t n_in, bool need_dx,
                     char *why, size_t n) {
    if (fault_dw(p, l)) {
        float *g = p->grads + p->dev_w[l];
        const size_t cnt = (size_t)p->cnt_w[l];
        return plant(p, g, cnt, why, n) ||
               store_slot(p, i, 2 * p->L + 1, MXP_DTYPE_F32, g, g, cnt, why, n);
    }
    return need_dx ? plant(p, dx32, n_in, why, n) : 0;
}

/* buf [count] of dtype t as FP32: buf itself, or widened into scratch. */
static const float *view(mxp_ds_plan *p, mxp_dtype t, const void *buf, float *scratch,
                         size_t count, int *err, char *why, size_t n) {
    if (t == MXP_DTYPE_F32) return (const float *)buf;
    if (p->ops->widen(p->dev, t, scratch, buf, count, why, n)) *err = 1;
    return scratch;
}

/* GEMM w of layer l for row variant v: A and B per the description. */
static int gemm(mxp_ds_plan *p, int l, int v, int w, const void *X, const void *W,
                const void *dY, float *D, const float *bias, char *why, size_t n) {
    const mxp_lt_desc *d = &p->desc[l][v][w];
    const void *ops[MXP_LT_OPERAND_COUNT] = {X, W, dY};
    return p->ops->lt_run(p->dev, p->lt[l][v][w], ops[d->a_op], ops[d->b_op], D, bias, why, n);
}

static const void *work_at(const mxp_ds_plan *p, int64_t off) {
    return (const unsigned char *)p->work + (size_t)off * mxp_ds_dsize(p->s.lowp);
}

/* Forward of micro-batch i, B rows (row variant v). */
static int forward(mxp_ds_plan *p, int i, int v, int64_t B, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    int err = 0;
    for (int l = 0; l < p->L && !err; l++) {
        const size_t cnt = (size_t)B * (size_t)p->width[l + 1];
        const mxp_dtype to = p->st[l + 1];
        float *y = to == MXP_DTYPE_F32 ? (float *)p->acts[l + 1] : p->y32;
        const mxp_ds_kind k = p->s.layers[l].kind;
        if (k == MXP_DS_LINEAR && p->f8_on[l]) {
            const float *x = view(p, p->st[l], p->acts[l], p->sa, (size_t)B * (size_t)p->width[l],
                                  &err, why, n);
            err = err || mxp_ds_f8_forward(p, l, v, B, x, y, why, n);
        } else if (k == MXP_DS_LINEAR) {
            err = gemm(p, l, v, MXP_LT_FWD, p->acts[l], work_at(p, p->dev_w[l]), NULL, y,
                       p->pw32 + p->dev_b[l], why, n);
        } else {
            const float *x = view(p, p->st[l], p->acts[l], p->sa, cnt, &err, why, n);
            if (err) return 1;
            if (k == MXP_DS_LAYERNORM)
                err = o->ln_fwd(p->dev, y, p->ln_mean[l], p->ln_rstd[l], x,
                                p->pw32 + p->dev_w[l], p->pw32 + p->dev_b[l], B, p->width[l],
                                p->s.ln_eps, why, n);
            else
                err = o->act_fwd(p->dev, act_code(k), y, x, cnt, why, n);
        }
        if (!err && fault_at(p, false, l)) err = plant(p, y, cnt, why, n);
        if (!err) err = store_slot(p, i, l, to, p->acts[l + 1], y, cnt, why, n);
    }
    return err;
}

/* Micro-batch i's loss (B rows from row r0) into its slot (the control
 * block's with one micro-batch), dpred scaled by `scale` (the loss scale
 * times B / batch) stored into g[0]. */
static int loss(mxp_ds_plan *p, int i, int64_t B, int64_t r0, float scale, char *why,
                size_t n) {
    const mxp_ds_ops *o = p->ops;
    const int64_t C = p->width[p->L];
    const mxp_dtype gt = p->s.lowp;
    float *d32 = gt == MXP_DTYPE_F32 ? (float *)p->g[0] : p->dx32;
    double *slot = p->K > 1 ? &p->loss_slots[i] : &o->ctl_dev(p->dev)->loss;
    int err = p->s.loss == MXP_DS_MSE
                  ? o->mse(p->dev, d32, p->acts[p->L], p->target + r0 * C, B, C, scale, slot,
                           why, n)
                  : o->xent(p->dev, d32, p->acts[p->L], p->labels + r0, B, C, scale, slot, why,
                            n);
    return err || store_slot(p, i, p->L, gt, p->g[0], d32, (size_t)B * (size_t)C, why, n);
}

/* Backward of micro-batch i, B rows (row variant v); acc: dW adds into
 * the slab (every micro-batch after the first). */
static int backward(mxp_ds_plan *p, int i, int v, bool acc, int64_t B, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const mxp_dtype gt = p->s.lowp;
    int cur = 0, err = 0;
    for (int l = p->L - 1; l >= 0 && !err; l--) {
        const mxp_ds_kind k = p->s.layers[l].kind;
        const size_t n_out = (size_t)B * (size_t)p->width[l + 1];
        const size_t n_in = (size_t)B * (size_t)p->width[l];
        const void *dy = p->g[cur];
        void *dx = p->g[cur ^ 1];
        float *dx32 = gt == MXP_DTYPE_F32 ? (float *)dx : p->dx32;
        const bool need_dx = l > 0;
        if (k == MXP_DS_LINEAR) {
            const float *dy32 = view(p, gt, dy, p->sa, n_out, &err, why, n);
            if (!err)
                err = o->bias_grad(p->dev, p->grads + p->dev_b[l], dy32, B, p->width[l + 1],
                                   why, n);
            if (!err && p->f8_on[l]) {
                const float *x32 = view(p, p->st[l], p->acts[l], p->sb, n_in, &err, why, n);
                err = err || mxp_ds_f8_backward(p, l, v, acc, B, dy32, x32,
                                                need_dx ? dx32 : NULL, why, n);
            } else if (!err)
                err = gemm(p, l, v, acc ? MXP_DS_DW_ACC : MXP_LT_DW, p->acts[l], NULL, dy,
                           p->grads + p->dev_w[l], NULL, why, n);
            if (!err && need_dx && !p->f8_on[l])
                err = gemm(p, l, v, MXP_LT_DX, NULL, work_at(p, p->dev_w[l]), dy, dx32, NULL,
                           why, n);
        } else if (k == MXP_DS_LAYERNORM) {
            const float *dy32 = view(p, gt, dy, p->sa, n_out, &err, why, n);
            const float *x32 = err ? NULL : view(p, p->st[l], p->acts[l], p->sb, n_in, &err, why, n);
            if (!err)
                err = o->ln_bwd(p->dev, need_dx ? dx32 : p->y32, p->grads + p->dev_w[l],
                                p->grads + p->dev_b[l], dy32, x32, p->ln_mean[l], p->ln_rstd[l],
                                p->pw32 + p->dev_w[l], B, p->width[l], why, n);
        } else if (need_dx) {
            const int s = k == MXP_DS_TANH ? l + 1 : l; /* tanh: its output */
            const float *dy32 = view(p, gt, dy, p->sa, n_out, &err, why, n);
            const float *s32 = err ? NULL : view(p, p->st[s], p->acts[s], p->sb, n_in, &err, why, n);
            if (!err) err = o->act_bwd(p->dev, act_code(k), dx32, dy32, s32, n_in, why, n);
        }
        if (!err && fault_at(p, true, l)) err = plant_bwd(p, i, l, dx32, n_in, need_dx, why, n);
        if (!err && need_dx) {
            err = store_slot(p, i, p->L + 1 + l, gt, dx, dx32, n_in, why, n);
            cur ^= 1;
        }
    }
    return err;
}

/* The step's device work after the uploads: work copy widened, grads
 * zeroed, per micro-batch input rounding, forward, loss and backward, the
 * loss fold, grad pass, decide and the optimizer. What it bakes into the
 * launches besides buffer addresses: the loss gradient scales (from
 * `scale`); everything else is read from the control block. */
static int device_work(mxp_ds_plan *p, float scale, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const mxp_ds_spec *s = &p->s;
    const int64_t B = s->batch;
    const size_t P = p->PD;
    const bool f32 = s->lowp == MXP_DTYPE_F32;
    if (p->pw32 != p->master && o->widen(p->dev, s->lowp, p->pw32, p->work, P, why, n))
        return 1;
    if (o->zero(p->dev, p->grads, P * 4, why, n)) return 1;
    for (int i = 0; i < p->K; i++) {
        const int64_t rows = mxp_sb_micro_rows(B, p->K, i), r0 = mxp_sb_micro_first(B, p->K, i);
        const int v = rows == p->rows_max ? 0 : 1;
        /* the kernel's scale as the CPU's nn_step_pass forms it */
        const float gs = (float)((double)scale * (double)rows / (double)B);
        if (!p->x_direct && store(p, s->lowp, p->acts[0], p->x32 + r0 * s->in_dim,
                                  (size_t)(rows * s->in_dim), why, n))
            return 1;
        if (forward(p, i, v, rows, why, n) || loss(p, i, rows, r0, gs, why, n) ||
            backward(p, i, v, i > 0, rows, why, n) || mxp_ds_f8_update(p, why, n))
            return 1;
    }
    if (p->K > 1 && o->loss_fold(p->dev, &o->ctl_dev(p->dev)->loss, p->loss_slots, p->K, B,
                                 why, n))
        return 1;
    /* the gradient dtype's max (the CPU's policy grad: E5M2 in fp8) */
    const mxp_dtype gmax = s->fp8 ? MXP_DTYPE_F8_E5M2 : s->lowp;
    const float near = s->near_overflow_frac * (float)mxp_dtype_info(gmax)->max;
    /* decide advances the SR counter by the CPU's P (padding excluded) */
    if (o->grad_pass(p->dev, p->grads, P, near, why, n) ||
        o->decide(p->dev, false, p->P, why, n))
        return 1;
    uint16_t *work16 = f32 ? NULL : (uint16_t *)p->work;
    const bool bf16 = s->lowp == MXP_DTYPE_BF16;
    return s->optim == MXP_DS_SGD
               ? o->sgd(p->dev, p->master, work16, bf16, false, p->grads, p->m, P, why, n)
               : o->adamw(p->dev, p->master, work16, bf16, false, p->grads, p->m, p->v, P, why,
                          n);
}

/* The device work as a graph: captured when there is none or its baked
 * loss scale is not this step's (updated in place when the topology
 * allows), then launched. *captured: it was captured now. */
static int graphed_work(mxp_ds_plan *p, float scale, bool *captured, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    if (!p->graph || p->graph_scale != scale) {
        if (o->graph_begin(p->dev, why, n)) return 1;
        if (device_work(p, scale, why, n)) {
            void *junk = NULL; /* end the broken capture; keep the old graph */
            if (o->graph_end(p->dev, &junk, NULL, 0) == 0) o->graph_destroy(p->dev, junk);
            return 1;
        }
        if (o->graph_end(p->dev, &p->graph, why, n)) return 1;
        p->graph_scale = scale;
        *captured = true;
    }
    return o->graph_launch(p->dev, p->graph, why, n);
}

/* Slot s holds a value non-finite in FP32 or as stored in t. */
static bool bad(const mxp_ds_scan *s, mxp_dtype t) {
    if (s->nonfinite > 0) return true;
    const float a = t == MXP_DTYPE_BF16  ? mxp_nr_bf16_to_f32(mxp_nr_f32_to_bf16(s->amax))
                    : t == MXP_DTYPE_F16 ? mxp_nr_fp16_to_f32(mxp_nr_f32_to_fp16(s->amax))
                                         : s->amax;
    return !isfinite(a);
}

static void site(mxp_ds_result *r, bool backward, int layer, int micro, int64_t count) {
    r->site.found = true;
    r->site.backward = backward;
    r->site.layer = layer;
    r->site.micro = micro;
    r->site.count = count;
}

/* The first non-finite site from the reported scans, in the CPU model's
 * pass order (nn/slots.c nn_pass_read, without the parameter gradients),
 * micro-batch by micro-batch (train/trainer.c read_passes). */
static void provenance(const mxp_ds_plan *p, mxp_ds_result *r) {
    const int L = p->L;
    const mxp_dtype gt = p->s.lowp;
    r->scanned = true;
    for (int i = 0; i < p->K && !r->site.found; i++) {
        const mxp_ds_scan *b = p->scan_h + (size_t)i * (size_t)p->S;
        for (int l = 0; l < L && !r->site.found; l++)
            if (bad(&b[l], p->st[l + 1])) site(r, false, l, i, b[l].nonfinite);
        const double li = p->K > 1 ? p->loss_h[i] : p->ctl->loss;
        if (!r->site.found && !isfinite(li)) site(r, false, -1, i, 1);
        if (!r->site.found && bad(&b[L], gt)) site(r, true, -1, i, b[L].nonfinite);
        for (int l = L - 1; l >= 0 && !r->site.found; l--) {
            if (l >= 1 && bad(&b[L + 1 + l], gt))
                site(r, true, l, i, b[L + 1 + l].nonfinite);
            else if (fault_dw(p, l) && b[2 * L + 1].nonfinite > 0) /* its weight gradient */
                site(r, true, l, i, b[2 * L + 1].nonfinite);
        }
    }
}

int mxp_ds_step(mxp_ds_plan *p, const float *x, const float *y, const int32_t *labels,
                mxp_ds_result *res, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const mxp_ds_spec *s = &p->s;
    const int64_t B = s->batch;
    memset(res, 0, sizeof *res);
    if (!x || (s->loss == MXP_DS_MSE ? !y : !labels))
        return mxp_cudab_why(why, n, "device step: NULL batch (x, and y for MSE or labels for "
                                     "softmax xent)");
    const int64_t d2h0 = o->d2h_count(p->dev);
    /* the control block for update opt_steps + 1 (train/trainer.c stage_ctl) */
    mxp_step_ctl *c = p->ctl;
    const float scale = c->scaler.scale;
    c->scale = scale;
    c->inv_scale = (float)(1.0 / (double)scale);
    c->clip_max = s->clip_max;
    c->clip_coef = 1.0f;
    c->skip = 0;
    c->loss_nonfinite = 0;
    c->loss = 0.0;
    c->seed = s->seed;
    c->lr = s->lr;
    c->beta1 = s->beta1;
    c->beta2 = s->beta2;
    c->eps = s->eps;
    c->weight_decay = s->weight_decay;
    c->momentum = s->momentum;
    c->nesterov = s->nesterov;
    c->adamw = mxp_adamw_consts_make(s->lr, s->beta1, s->beta2, s->eps, s->weight_decay,
                                     c->opt_steps + 1);
    c->sgd = (mxp_sgd_consts){s->lr, s->momentum, s->weight_decay, s->nesterov,
                              s->momentum != 0.0f, c->opt_steps + 1 <= 1};
    c->run_scaler_rule = true;
    c->rule = s->rule;
    /* the batch through the staging (page-locked on CUDA) into fixed buffers */
    const size_t nx = (size_t)B * (size_t)s->in_dim;
    const size_t ny = s->loss == MXP_DS_MSE ? (size_t)B * (size_t)p->width[p->L] * 4
                                            : (size_t)B * sizeof(int32_t);
    memcpy(p->x_h, x, nx * 4);
    if (s->loss == MXP_DS_MSE)
        memcpy(p->y_h, y, ny);
    else
        memcpy(p->lab_h, labels, ny);
    float *x_dst = p->x_direct ? (float *)p->acts[0] : p->x32;
    if (o->ctl_set(p->dev, c, why, n) || o->upload(p->dev, x_dst, p->x_h, nx * 4, why, n) ||
        (s->loss == MXP_DS_MSE ? o->upload(p->dev, p->target, p->y_h, ny, why, n)
                               : o->upload(p->dev, p->labels, p->lab_h, ny, why, n)))
        return 1;
    /* graphed from the second step on: the first runs eagerly, so every
     * kernel and cuBLASLt module is loaded before a capture (lazy loading
     * inside a capture is what CUDA may refuse) */
    bool captured = false;
    const bool graphed = p->use_graphs && p->warm && !p->fault.armed; /* plants: uploads */
    if (graphed ? graphed_work(p, scale, &captured, why, n) : device_work(p, scale, why, n))
        return 1;
    /* the step's one copy: the control block, with the aux area's scans */
    if (p->scans ? o->report_aux(p->dev, p->stage, p->aux_bytes, why, n)
                 : o->report(p->dev, c, why, n))
        return 1;
    res->loss = c->loss;
    res->skipped = c->skip != 0;
    res->scale = scale;
    res->next_scale = c->scaler.scale;
    res->grad_norm = sqrt(c->stats.sumsq);
    res->nonfinite = c->stats.nonfinite;
    res->d2h = o->d2h_count(p->dev) - d2h0;
    res->graphed = graphed;
    res->captured = captured;
    if (p->scans) provenance(p, res);
    p->warm = true;
    return 0;
}
