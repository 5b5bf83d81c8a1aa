/* train/trainer_device_step.c: the trainer's step on the device and its
 * host-side accounting (contract: train/trainer_device.h; who holds what:
 * train/trainer_device_internal.h).
 *
 * Entry point: trainer_device_step.
 *
 * The step's scans of every stored output and activation gradient (the
 * provenance slots, in the report's one copy) also feed the model's
 * monitor, pass by pass as the CPU's, so the guard's per-layer headroom
 * sees the device's amax with no further copy (monitor_feed).
 */
#include <math.h>
#include <string.h>

#include "amp/scaler_internal.h"
#include "backend/backend.h"
#include "nn/model_sync.h"
#include "train/step_ctl.h"
#include "train/trainer_device_internal.h"
#include "train/trainer_internal.h"

/* The fault the guard armed on the model for this step (fault.kind nan,
 * inf, value) into the plan, which plants it as the CPU model does. */
static void set_fault(mxp_trainer *t) {
    const mxp_fault_config *f = nn_model_fault(t->model);
    mxp_ds_fault df = {false, false, 0, 0.0f, 0};
    if (f) {
        df.armed = true;
        df.backward = f->pass == MXP_FAULT_BACKWARD;
        df.layer = (int)f->layer;
        df.value = f->kind == MXP_FAULT_NAN   ? NAN
                   : f->kind == MXP_FAULT_INF ? INFINITY
                                              : (float)f->value;
        df.elements = f->elements;
    }
    mxp_ds_set_fault(t->dv->plan, &df);
}

static nn_ext_scan ext_scan(const mxp_ds_scan *s) {
    nn_ext_scan e = {false, 0.0f, 0};
    if (s) e = (nn_ext_scan){true, s->amax, s->nonfinite};
    return e;
}

/* The step's scans into the model's monitor (nn_model_monitor_pass), one
 * pass per micro-batch as the CPU trainer's, and its first non-finite site
 * in the pass that met it. Nothing without scans or without a monitor. */
static void monitor_feed(mxp_trainer *t, const mxp_ds_result *dr, const mxp_step_result *res) {
    const mxp_ds_plan *p = t->dv->plan;
    if (!dr->scanned) return;
    const int L = mxp_model_get_spec(t->model)->n_layers;
    nn_ext_scan out[MXP_DS_MAX_LAYERS], dx[MXP_DS_MAX_LAYERS + 1];
    for (int i = 0; i < mxp_ds_micro_batches(p); i++) {
        for (int l = 0; l < L; l++) {
            out[l] = ext_scan(mxp_ds_scan_of(p, i, false, l));
            dx[l] = ext_scan(mxp_ds_scan_of(p, i, true, l));
        }
        dx[L] = ext_scan(mxp_ds_scan_of(p, i, true, -1)); /* the loss gradient */
        nn_model_monitor_pass(t->model, mxp_ds_micro_rows(p, i), out, dx);
        if (res->site.found && dr->site.micro == i)
            nn_model_monitor_site(t->model, &res->site,
                                  res->site.backward ? "grad_input" : "output");
    }
}

/* The host-side bookkeeping of a finished device step (trainer.c's step
 * body after its report, for one process). */
static mxp_status account(mxp_trainer *t, const mxp_ds_result *dr, mxp_step_result *res,
                          mxp_error *err) {
    trainer_device *d = t->dv;
    mxp_ds_state ds;
    mxp_ds_get_state(d->plan, &ds);
    res->loss = dr->loss;
    res->skipped = dr->skipped;
    res->scale = dr->scale;
    res->grad_norm = dr->grad_norm;
    res->nonfinite = dr->nonfinite;
    if (dr->scanned && dr->site.found) { /* the CPU model's provenance (nn/slots.c) */
        const mxp_model_spec *ms = mxp_model_get_spec(t->model);
        const int l = dr->site.layer;
        res->site.found = true;
        res->site.backward = dr->site.backward;
        res->site.layer = l;
        res->site.op = l >= 0 && l < ms->n_layers ? mxp_layer_kind_name(ms->layers[l].kind)
                                                  : mxp_loss_kind_name(ms->loss);
        res->site.count = dr->site.count > 0 ? dr->site.count : 1;
    }
    monitor_feed(t, dr, res);
    /* the grad pass ran over the device's padded slab: its padding (zeros,
     * dstep.h) out of n and zeros, so the gradient health is the CPU's */
    mxp_gradpass_acc gs = ds.stats;
    const int64_t pad = gs.n - (int64_t)mxp_ds_num_params(d->plan);
    if (pad > 0 && gs.zeros >= pad) {
        gs.n -= pad;
        gs.zeros -= pad;
    }
    res->zero_frac = gs.n ? (double)gs.zeros / (double)gs.n : 0.0;
    res->near_overflow_frac = gs.n ? (double)gs.near_overflow / (double)gs.n : 0.0;
    t->be->ctl.opt_steps = ds.opt_steps; /* the counters as the report left them */
    t->be->ctl.sr_counter = ds.sr_counter;
    t->be->ctl.stats = gs;
    t->training_steps++;
    if (dr->skipped) t->skipped_steps++;
    /* the device's rule state and event, adopted as the CPU path does
     * (amp/scaler_internal.h): the host applies only its at-min policy
     * and log. The cheap check: the adopted scale is the one reported. */
    mxp_scaler_event ev;
    mxp_status us = mxp_scaler_adopt(t->scaler, &ds.scaler, &ds.event, &ev, err);
    if (dr->skipped && res->site.found)
        mxp_log(MXP_LOG_WARN,
                "step %lld skipped: %lld non-finite gradients; first non-finite in %s pass, "
                "layer %d (%s); loss scale %g -> %g",
                (long long)t->training_steps, (long long)dr->nonfinite,
                res->site.backward ? "backward" : "forward", res->site.layer, res->site.op,
                ev.old_scale, ev.new_scale);
    else if (dr->skipped)
        mxp_log(MXP_LOG_WARN,
                "step %lld skipped: %lld non-finite gradients (loss %g); loss scale %g -> %g",
                (long long)t->training_steps, (long long)dr->nonfinite, dr->loss, ev.old_scale,
                ev.new_scale);
    mxp_history_row row = {t->training_steps, t->epoch, res->loss, res->scale, res->grad_norm,
                           res->skipped, mxp_model_policy(t->model)->mode};
    if (trainer_push_history(t, &row) != MXP_OK)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "training history");
    if (us != MXP_OK) return us;
    if (mxp_scaler_scale(t->scaler) != dr->next_scale)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "training.device=cuda: the device's loss scale after step %lld "
                             "(%g) differs from its reported rule state's (%g): the report is "
                             "inconsistent",
                             (long long)t->training_steps, (double)dr->next_scale,
                             (double)mxp_scaler_scale(t->scaler));
    if (ev.fallback) { /* a request: the step controller switches at the boundary */
        const mxp_precision to = mxp_precision_fallback_next(d->mode);
        res->fallback = true;
        mxp_log(MXP_LOG_WARN,
                "loss scale stuck at its minimum %g: falling back from %s to %s", ev.new_scale,
                mxp_precision_name(d->mode), mxp_precision_name(to));
        return step_ctl_request(t, to, STEP_SRC_SCALER, "loss scale stuck at its minimum", err);
    }
    return MXP_OK;
}

mxp_status trainer_device_step(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                               mxp_step_result *res, mxp_error *err) {
    trainer_device *d = t->dv;
    memset(res, 0, sizeof *res);
    const int k = t->cfg.grad_accum_steps > 1 ? t->cfg.grad_accum_steps : 1;
    int64_t total = 0;
    for (int i = 0; micro && i < n_micro; i++) total += micro[i].B > 0 ? micro[i].B : 0;
    if (!micro || n_micro != k || total < k)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_trainer_step on training.device=cuda: %d micro-batches; "
                             "accepted: grad_accum_steps=%d of B >= 1", n_micro, k);
    const mxp_precision now = mxp_model_policy(t->model)->mode;
    mxp_status s;
    /* a precision switch at the boundary (the step controller switched the
     * host model, which pulled the record first, and restarted the host
     * scaler): re-plan for the new mode, then the push below carries the
     * master, m, v and the set_state the restarted scaler */
    if (now != d->mode && (s = trainer_device_plan(t, d->batch, err)) != MXP_OK) return s;
    if (total != d->batch && (s = trainer_device_plan(t, total, err)) != MXP_OK) return s;
    for (int i = 0; i < n_micro; i++)
        if (micro[i].B != mxp_ds_micro_rows(d->plan, i))
            return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                                 "training.device=cuda: micro-batch %d has %lld rows; the device "
                                 "step splits %lld rows into %d in order (accepted: %lld)",
                                 i, (long long)micro[i].B, (long long)total, k,
                                 (long long)mxp_ds_micro_rows(d->plan, i));
    const float *x = micro[0].x, *y = micro[0].y;
    const int32_t *lab = micro[0].labels;
    if (k > 1) { /* the rows in order, as the device splits them */
        const int64_t in = mxp_model_get_spec(t->model)->in_dim;
        int64_t r = 0;
        for (int i = 0; i < n_micro; i++) {
            const size_t B = (size_t)micro[i].B;
            memcpy(d->xs + r * in, micro[i].x, B * (size_t)in * sizeof(float));
            if (micro[i].y)
                memcpy(d->ys + r * d->out_dim, micro[i].y, B * (size_t)d->out_dim * sizeof(float));
            if (micro[i].labels) memcpy(d->ls + r, micro[i].labels, B * sizeof(int32_t));
            r += micro[i].B;
        }
        x = d->xs;
        y = micro[0].y ? d->ys : NULL;
        lab = micro[0].labels ? d->ls : NULL;
    }
    if (t->hook || t->ls || (t->comm && mxp_comm_size(t->comm) > 1)) {
        mxp_ds_spec sp; /* set after attaching: named by the spec's checks */
        return trainer_device_spec(t, d->batch, &sp, err);
    }
    if (d->dev_stale && (s = trainer_device_push(t, err)) != MXP_OK) return s;
    /* the host's state (a resume, a rollback, a schedule wrote it) into the plan */
    mxp_ds_state ds;
    memset(&ds, 0, sizeof ds);
    ds.opt_steps = t->be->ctl.opt_steps;
    ds.sr_counter = t->be->ctl.sr_counter;
    ds.scaler = mxp_scaler_rule_state_of(t->scaler);
    ds.lr = t->cfg.optim.lr;
    mxp_ds_set_state(d->plan, &ds);
    set_fault(t);
    const double t0 = mxp_time_now();
    mxp_ds_result dr;
    char why[256] = "";
    if (mxp_ds_step(d->plan, x, y, lab, &dr, why, sizeof why))
        return trainer_device_io_error(err, d, "the step", why);
    t->time_s[0] += mxp_time_now() - t0; /* the whole step: the device reports no phases */
    d->host_stale = true;
    d->grads_stale = true;
    d->st.steps++;
    if (dr.d2h > d->st.step_d2h_max) d->st.step_d2h_max = dr.d2h;
    return account(t, &dr, res, err);
}
