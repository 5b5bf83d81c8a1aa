/* train/trainer.c: the mixed-precision training step.
 *
 * Entry points: mxp_trainer_create/destroy, mxp_trainer_step,
 * mxp_trainer_set_precision/_switch_precision (through the step controller,
 * step_ctl.c), mxp_trainer_stats, mxp_trainer_history.
 *
 * A step (docs/design.md "A training step"): discard the grads (no memset:
 * the first micro-batch's backward writes them, mxp_model_discard_grads);
 * per micro-batch a forward/backward whose loss is multiplied by scale *
 * B_i / B_total (so the FP32 grad slab accumulates the scaled gradient of
 * the mean loss over all micro-batches); ONE fused pass over the slab unscales by 1/scale (double,
 * stored as float, as GradScaler), detects non-finite values and gathers
 * gradient health; then either clip (by global norm, after unscaling, with
 * PyTorch's clip_coef = max_norm / (norm + 1e-6)) and update, or skip with
 * weights and optimizer state untouched. The scaler update closes the step.
 * The pass, the skip/clip decision and the update go through the backend
 * seam (backend/backend.h; the CPU backend today), bit for bit what the
 * trainer computed itself before; the loss scaler's rule runs in decide on
 * the block's state, which the host's mxp_scaler takes from the report
 * (mxp_scaler_adopt: the at-min policy and the log stay on the host); a
 * host write of the scaler between steps goes back at begin (scaler_load).
 * The host writes the control block only
 * at the step's start (stage_ctl, begin); the passes read the loss scale
 * there and leave their result slots in the backend's report area
 * (nn/step_pass.h); the step's one report brings the block and the slots
 * back, after the update (one process) or before decide (ranks agree on
 * overflow first). The optimizer step and SR counters are the control
 * block's (be->ctl as of the report): the trainer keeps no copy.
 * References: torch.cuda.amp.GradScaler, torch.nn.utils.clip_grad_norm_,
 * llm.c train_gpt2.c (gpt2_update).
 */
#include <mixprec/train.h>

#include <math.h>
#include <string.h>

#include "amp/scaler_internal.h"
#include "backend/devmem.h"
#include "backend/backend.h"
#include "kernels/kernels.h"
#include "nn/step_pass.h"
#include "train/trainer_device.h"
#include "train/trainer_dist.h"
#include "train/trainer_internal.h"


static mxp_status validate_optim(const mxp_optim_config *o, mxp_error *err) {
    if ((unsigned)o->kind >= MXP_OPTIM_KIND_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "optimizer kind %d; accepted: adamw, sgd",
                             (int)o->kind);
    if (!(o->lr > 0) || !isfinite(o->lr))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "lr=%g; accepted: finite > 0", o->lr);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "beta1=%g beta2=%g; accepted: [0, 1)",
                             o->beta1, o->beta2);
    if (!(o->eps > 0) || !isfinite(o->eps))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "eps=%g; accepted: finite > 0", o->eps);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "weight_decay=%g; accepted: finite >= 0",
                             o->weight_decay);
    if (!(o->momentum >= 0 && o->momentum < 1))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "momentum=%g; accepted: [0, 1)",
                             o->momentum);
    return MXP_OK;
}

static mxp_status validate_config(const mxp_trainer_config *c, mxp_error *err) {
    mxp_status s = validate_optim(&c->optim, err);
    if (s != MXP_OK) return s;
    if (!(c->clip_grad_norm >= 0) || !isfinite(c->clip_grad_norm))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "clip_grad_norm=%g; accepted: finite >= 0 (0 disables)",
                             c->clip_grad_norm);
    if (c->grad_accum_steps < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "grad_accum_steps=%d; accepted: >= 1",
                             c->grad_accum_steps);
    if (!(c->near_overflow_frac > 0 && c->near_overflow_frac <= 1))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "near_overflow_frac=%g; accepted: (0, 1]", c->near_overflow_frac);
    return mxp_scaler_config_validate(&c->scaler, err);
}

/* (Re)create the scaler for the model's current policy: loss scaling is on
 * when the mode wants it, unless the config overrides that. */
mxp_status trainer_make_scaler(mxp_trainer *t, mxp_error *err) {
    mxp_scaler_config sc = t->cfg.scaler;
    if (!t->cfg.scaler_override) sc.enabled = mxp_model_policy(t->model)->loss_scaling;
    mxp_scaler *s = NULL;
    mxp_status st = mxp_scaler_create(&sc, &s, err);
    if (st != MXP_OK) return st;
    mxp_scaler_destroy(t->scaler);
    t->scaler = s;
    return trainer_ls_create(t, &sc, err); /* per-layer scaling (layer_scale.c) */
}

static mxp_status mxp_trainer_create_dev(mxp_model *model, const mxp_trainer_config *cfg,
                              mxp_trainer **out, mxp_error *err) {
    if (!model || !cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_create: NULL argument");
    *out = NULL;
    mxp_status s = validate_config(cfg, err);
    if (s != MXP_OK) return s;
    mxp_trainer *t = mxp_calloc(1, sizeof *t);
    if (!t) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "trainer");
    t->model = model;
    t->cfg = *cfg;
    t->n_params = mxp_model_num_params(model);
    t->m = mxp_dev_calloc(t->n_params, sizeof(float));
    if (cfg->optim.kind == MXP_OPTIM_ADAMW) t->v = mxp_dev_calloc(t->n_params, sizeof(float));
    t->hist_cap = HISTORY_INITIAL_CAP;
    t->hist = mxp_calloc(t->hist_cap, sizeof *t->hist);
    if (!t->m || (cfg->optim.kind == MXP_OPTIM_ADAMW && !t->v) || !t->hist) {
        mxp_trainer_destroy(t);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                             "optimizer state for %zu parameters", t->n_params);
    }
    step_ctl_init(&t->ctl);
    s = trainer_make_scaler(t, err);
    if (s == MXP_OK) s = mxp_backend_cpu_create(&t->be, err);
    if (s != MXP_OK) {
        mxp_trainer_destroy(t);
        return s;
    }
    *out = t;
    return MXP_OK;
}

/* mxp_trainer_create inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_create(mxp_model *model, const mxp_trainer_config *cfg,
                              mxp_trainer **out, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_trainer_create_dev(model, cfg, out, err);
    mxp_dev_leave();
    return r_;
}

void mxp_trainer_destroy(mxp_trainer *t) {
    if (!t) return;
    trainer_device_detach(t);
    step_ctl_free(&t->ctl);
    trainer_ls_destroy(t);
    mxp_backend_destroy(t->be);
    mxp_scaler_destroy(t->scaler);
    mxp_dev_free(t->m);
    mxp_dev_free(t->v);
    mxp_free(t->hist);
    mxp_free(t);
}

static mxp_status check_batches(const mxp_trainer *t, const mxp_batch *micro, int n_micro,
                                mxp_error *err) {
    if (!micro || n_micro != t->cfg.grad_accum_steps)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_trainer_step: %d micro-batches given; accepted: exactly "
                             "grad_accum_steps=%d", n_micro, t->cfg.grad_accum_steps);
    for (int i = 0; i < n_micro; i++)
        if (micro[i].B < 1)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "micro-batch %d has B=%lld; accepted: >= 1", i,
                                 (long long)micro[i].B);
    return MXP_OK;
}

static bool rule_state_eq(const mxp_scaler_rule_state *a, const mxp_scaler_rule_state *b) {
    return a->scale == b->scale && a->growth_tracker == b->growth_tracker &&
           a->hysteresis_left == b->hysteresis_left && a->overflow_steps == b->overflow_steps &&
           a->total_steps == b->total_steps && a->steps_at_min == b->steps_at_min;
}

/* The host-written half of the step's control block (backend/step_ctl.h),
 * staged in the backend's image for begin to upload at the step boundary:
 * the loss scale, the clip threshold, the optimizer's constants for update
 * number opt_steps + 1, opt_steps as the last report (or resume) left it. */
static void stage_ctl(const mxp_trainer *t, mxp_step_ctl *c, float scale, float inv_scale) {
    const mxp_optim_config *o = &t->cfg.optim;
    const int64_t next = c->opt_steps + 1;
    c->scale = scale;
    c->inv_scale = inv_scale;
    c->clip_max = t->cfg.clip_grad_norm;
    c->seed = t->cfg.seed;
    c->lr = o->lr;
    c->beta1 = o->beta1;
    c->beta2 = o->beta2;
    c->eps = o->eps;
    c->weight_decay = o->weight_decay;
    c->momentum = o->momentum;
    c->nesterov = o->nesterov;
    c->adamw = mxp_adamw_consts_make(c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, next);
    c->sgd = (mxp_sgd_consts){c->lr, c->momentum, c->weight_decay, c->nesterov,
                              c->momentum != 0.0f, next <= 1};
    c->grad_beta = 0.0f; /* the step discarded the gradients: micro-batch 0 writes them */
    c->n_groups = 0;     /* per-layer loss scaling: trainer_ls_stage */
    /* The loss scaler's rule runs in decide on the block's state (per-layer
     * scaling: the groups' rule instead); the host's view goes back only
     * when it was set since the last report. */
    c->run_scaler_rule = t->ls == NULL;
    c->scaler_load = 0;
    if (c->run_scaler_rule) {
        const mxp_scaler_rule_state v = mxp_scaler_rule_state_of(t->scaler);
        c->rule = mxp_scaler_rule_of(t->scaler);
        c->scaler_load = !rule_state_eq(&v, &c->scaler); /* c->scaler: the last report's */
        c->scaler_set = v;
    }
}

/* The optimizer through the backend (a no-op when decide chose to skip). */
static mxp_status apply_update(mxp_trainer *t, mxp_error *err) {
    mxp_model *m = t->model;
    const mxp_precision_policy *pol = mxp_model_policy(m);
    mxp_backend_weights w = {0};
    w.master = mxp_model_master(m);
    w.work = mxp_model_work(m, &w.work_type);
    if (w.master && (void *)w.master == w.work) w.work = NULL; /* fp32: work aliases master */
    w.sr = !w.master && pol->stochastic_update;
    float *g = mxp_model_grads(m);
    if (t->cfg.optim.kind == MXP_OPTIM_ADAMW)
        return t->be->ops->adamw(t->be, &w, g, t->m, t->v, t->n_params, err);
    return t->be->ops->sgd(t->be, &w, g, t->m, t->n_params, err);
}

mxp_status trainer_push_history(mxp_trainer *t, const mxp_history_row *row) {
    if (t->hist_n == t->hist_cap) {
        size_t cap;
        if (!mxp_size_mul(t->hist_cap, 2, &cap)) return MXP_ERR_OUT_OF_MEMORY;
        mxp_history_row *h = mxp_calloc(cap, sizeof *h);
        if (!h) return MXP_ERR_OUT_OF_MEMORY;
        memcpy(h, t->hist, t->hist_n * sizeof *h);
        mxp_free(t->hist);
        t->hist = h;
        t->hist_cap = cap;
    }
    t->hist[t->hist_n++] = *row;
    return MXP_OK;
}

/* After the report: each micro-batch's site, monitor records and loss from
 * the host copy of the slot blocks, in pass order (the first site wins;
 * the loss weighted by B_i / B_total, summed in micro-batch order). */
static void read_passes(mxp_trainer *t, const mxp_batch *micro, int n_micro, int64_t total_b,
                        const void *blocks, mxp_step_result *res) {
    double loss_sum = 0;
    for (int i = 0; i < n_micro; i++) {
        double loss = 0;
        mxp_nonfinite_site site;
        nn_step_read(t->model, i, blocks, &site, &loss);
        if (site.found && !res->site.found) res->site = site;
        loss_sum += loss * (double)micro[i].B / (double)total_b;
    }
    res->loss = loss_sum;
}

/* decide and the optimizer; extra_inf: the ranks' agreed overflow. */
static mxp_status decide_update(mxp_trainer *t, bool extra_inf, mxp_error *err) {
    mxp_status s = t->be->ops->decide(t->be, extra_inf, t->n_params, err);
    return s != MXP_OK ? s : apply_update(t, err);
}

static mxp_status step_body(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                            mxp_step_result *res, mxp_error *err) {
    mxp_status s = check_batches(t, micro, n_micro, err);
    if (s != MXP_OK) return s;
    if (t->dv) return trainer_device_step(t, micro, n_micro, res, err); /* trainer_device.c */
    memset(res, 0, sizeof *res);
    mxp_model *m = t->model;
    const mxp_precision_policy *pol = mxp_model_policy(m);
    mxp_backend *be = t->be;
    const bool ranks = t->comm && t->comm->size > 1;

    int64_t total_b = 0;
    for (int i = 0; i < n_micro; i++) total_b += micro[i].B;
    if ((s = trainer_ls_check_comm(t, err)) != MXP_OK) return s;
    float scale = t->ls ? trainer_ls_begin(t) : mxp_scaler_scale(t->scaler);
    res->scale = t->ls ? mxp_scaler_groups_min_scale(t->ls->groups) : scale;

    /* the step boundary: the report area (per-layer scaling: the group
     * table and its result slots; a slot block per pass after them) and
     * the host's half of the control block with the group table, uploaded
     * in one copy */
    const int n_groups = t->ls ? t->ls->n_groups : 0;
    const size_t gbytes = mxp_step_groups_out_bytes(n_groups); /* the group slots */
    const size_t block = nn_step_block_bytes(m);
    const int n_blocks = nn_step_blocks(m, n_micro);
    stage_ctl(t, &be->ctl, scale, mxp_scaler_inv_scale(t->scaler));
    if ((s = be->ops->reserve(be, n_groups, gbytes + block * (size_t)n_blocks, err)) != MXP_OK)
        return s;
    if (t->ls) trainer_ls_stage(t, be);
    if ((s = be->ops->begin(be, err)) != MXP_OK) return s;
    unsigned char *blocks = (unsigned char *)be->aux + gbytes;
    if ((s = nn_step_begin(m, blocks, n_micro, err)) != MXP_OK) return s;
    if (t->ls) trainer_ls_passes(t, be); /* per-layer: S from the table, in backend memory */

    double f0, b0, f1, b1;
    const double t_start = mxp_time_now();
    mxp_model_phase_times(m, &f0, &b0);
    mxp_model_discard_grads(m); /* the first micro-batch's backward writes them */
    for (int i = 0; i < n_micro; i++) { /* the loss scale and grad beta read from the block */
        /* dropout masks: this step's, one per micro-batch and rank (model.h) */
        const int rank = t->comm ? mxp_comm_rank(t->comm) : 0;
        mxp_model_set_dropout_pass(m, t->training_steps + 1, rank * n_micro + i);
        s = nn_step_pass(m, i, &micro[i], &be->dev->scale, &be->dev->grad_beta, micro[i].B,
                         total_b, err);
        if (s != MXP_OK) {
            nn_step_end(m);
            return s;
        }
    }
    nn_step_end(m);
    if (t->hook) t->hook(t->hook_user, t->training_steps + 1, mxp_model_grads(m), t->n_params);
    s = mxp_trainer_dist_reduce(t, err);
    if (s != MXP_OK) return s;
    mxp_model_phase_times(m, &f1, &b1);
    const double t_safety = mxp_time_now();
    t->time_s[0] += f1 - f0;
    t->time_s[1] += (t_safety - t_start) - (f1 - f0);

    /* The safety-and-update half of the step goes through the backend seam
     * (backend/backend.h); with per-layer loss scaling the grad pass goes
     * group by group and decide runs the groups' rule (step_ctl.h). */
    float near = t->cfg.near_overflow_frac * (float)mxp_dtype_info(pol->grad)->max;
    if ((s = be->ops->grad_pass(be, mxp_model_grads(m), t->n_params, near, err)) != MXP_OK)
        return s;
    const double *loss_slot = (const double *)(const void *)(blocks + nn_step_loss_offset());
    if ((s = be->ops->check_loss(be, loss_slot, block, n_blocks, err)) != MXP_OK) return s;
    /* The step's one report: after the optimizer on one process; between
     * the grad pass and decide with ranks, which agree on overflow first. */
    double t_optim = mxp_time_now();
    if (!ranks && (s = decide_update(t, false, err)) != MXP_OK) return s;
    if ((s = be->ops->report(be, NULL, err)) != MXP_OK) return s;
    read_passes(t, micro, n_micro, total_b, (const unsigned char *)be->aux_host + gbytes, res);
    const mxp_gradpass_acc gs = be->ctl.stats;
    res->nonfinite = gs.nonfinite;
    res->zero_frac = gs.n ? (double)gs.zeros / (double)gs.n : 0.0;
    res->near_overflow_frac = gs.n ? (double)gs.near_overflow / (double)gs.n : 0.0;
    res->grad_norm = sqrt(gs.sumsq);
    bool found_inf = be->ctl.skip != 0;
    if (ranks) {
        if ((s = mxp_trainer_dist_reduce_loss(t, &res->loss, err)) != MXP_OK) return s;
        found_inf = gs.nonfinite > 0 || be->ctl.loss_nonfinite;
        if ((s = mxp_trainer_dist_agree(t, &found_inf, err)) != MXP_OK) return s;
        t_optim = mxp_time_now();
        if ((s = decide_update(t, found_inf, err)) != MXP_OK) return s;
        /* the image follows the decision the ranks agreed on (the same rule) */
        mxp_backend_decide_rule(&be->ctl, found_inf, t->n_params);
    }

    t->training_steps++;
    if (found_inf) { /* decide skipped the update: weights and moments untouched */
        res->skipped = true;
        t->skipped_steps++;
    }

    const double t_scaler = mxp_time_now();
    t->time_s[3] += t_scaler - t_optim;
    mxp_scaler_event ev;
    /* decide's rule, from the report (ranks: the image's replay): the view
     * takes the state, the host applies the at-min policy and logs */
    mxp_status us = t->ls ? trainer_ls_update(t, be->aux_host, &ev, err)
                          : mxp_scaler_adopt(t->scaler, &be->ctl.scaler, &be->ctl.event, &ev, err);
    t->time_s[2] += (t_optim - t_safety) + (mxp_time_now() - t_scaler);
    if (found_inf) {
        if (res->site.found)
            mxp_log(MXP_LOG_WARN,
                    "step %lld skipped: %lld non-finite gradients; first non-finite in %s pass, "
                    "layer %d (%s); loss scale %g -> %g",
                    (long long)t->training_steps, (long long)gs.nonfinite,
                    res->site.backward ? "backward" : "forward", res->site.layer,
                    res->site.op ? res->site.op : "?", ev.old_scale, ev.new_scale);
        else
            mxp_log(MXP_LOG_WARN,
                    "step %lld skipped: %lld non-finite gradients (loss %g); loss scale %g -> %g",
                    (long long)t->training_steps, (long long)gs.nonfinite, res->loss,
                    ev.old_scale, ev.new_scale);
    }
    mxp_history_row row = {t->training_steps, t->epoch, res->loss, res->scale, res->grad_norm,
                           res->skipped, pol->mode};
    if (trainer_push_history(t, &row) != MXP_OK)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "training history");
    if (us != MXP_OK) return us;

    if (ev.fallback) { /* a request: the step controller switches at the boundary */
        mxp_precision from = pol->mode, to = mxp_precision_fallback_next(from);
        res->fallback = true;
        mxp_log(MXP_LOG_WARN,
                "loss scale stuck at its minimum %g: falling back from %s to %s", ev.new_scale,
                mxp_precision_name(from), mxp_precision_name(to));
        s = step_ctl_request(t, to, STEP_SRC_SCALER, "loss scale stuck at its minimum", err);
        if (s != MXP_OK) return s;
    }
    return mxp_trainer_dist_verify(t, err);
}

/* The step between the controller's phases; without a run or guard to
 * reach the boundary (train/step_ctl.h), the step's end is the boundary. */
static mxp_status mxp_trainer_step_dev(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                            mxp_step_result *res, mxp_error *err) {
    if (!t || !res) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_step: NULL");
    mxp_status s = step_ctl_begin(t, err);
    if (s != MXP_OK) return s;
    s = step_body(t, micro, n_micro, res, err);
    step_ctl_end(t);
    if (s == MXP_OK && t->ctl.owner == STEP_OWNER_TRAINER)
        s = step_ctl_boundary(t, NULL, err);
    return s;
}

/* mxp_trainer_step inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_step(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                            mxp_step_result *res, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_trainer_step_dev(t, micro, n_micro, res, err);
    mxp_dev_leave();
    return r_;
}

static mxp_status mxp_trainer_set_precision_dev(mxp_trainer *t, mxp_precision p, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_set_precision: NULL");
    return step_ctl_apply_now(t, p, STEP_SRC_DIRECT, "mxp_trainer_set_precision", err);
}

/* mxp_trainer_set_precision inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_set_precision(mxp_trainer *t, mxp_precision p, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_trainer_set_precision_dev(t, p, err);
    mxp_dev_leave();
    return r_;
}

static mxp_status mxp_trainer_switch_precision_dev(mxp_trainer *t, mxp_precision p, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_switch_precision: NULL");
    return step_ctl_apply_now(t, p, STEP_SRC_DIRECT, "mxp_trainer_switch_precision", err);
}

/* mxp_trainer_switch_precision inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_switch_precision(mxp_trainer *t, mxp_precision p, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_trainer_switch_precision_dev(t, p, err);
    mxp_dev_leave();
    return r_;
}

void mxp_trainer_stats(const mxp_trainer *t, mxp_train_stats *out) {
    const mxp_precision_policy *pol = mxp_model_policy(t->model);
    out->training_steps = t->training_steps;
    out->optimizer_steps = t->be->ctl.opt_steps;
    out->skipped_steps = t->skipped_steps;
    out->overflow_rate =
        t->training_steps ? (double)t->skipped_steps / (double)t->training_steps : 0.0;
    out->current_scale = mxp_trainer_loss_scale(t);
    out->precision = pol->mode;
    out->fp16_enabled_runtime = pol->weight == MXP_DTYPE_F16 || pol->activation == MXP_DTYPE_F16;
    out->time_forward_s = t->time_s[0];
    out->time_backward_s = t->time_s[1];
    out->time_safety_s = t->time_s[2];
    out->time_optimizer_s = t->time_s[3];
    out->epoch = t->epoch;
}

const mxp_history_row *mxp_trainer_history(const mxp_trainer *t, size_t *n) {
    *n = t->hist_n;
    return t->hist;
}

void mxp_trainer_set_epoch(mxp_trainer *t, int64_t epoch) { t->epoch = epoch; }
mxp_model *mxp_trainer_model(mxp_trainer *t) { return t->model; }

mxp_status mxp_trainer_set_lr(mxp_trainer *t, float lr, mxp_error *err) {
    if (!(lr > 0) || !isfinite(lr))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "lr=%g; accepted: finite > 0", lr);
    t->cfg.optim.lr = lr;
    return MXP_OK;
}

void mxp_trainer_set_grad_hook(mxp_trainer *t, mxp_grad_hook fn, void *user) {
    t->hook = fn;
    t->hook_user = user;
}

void mxp_trainer_optim_state(mxp_trainer *t, float **m, float **v, size_t *n, int64_t *t_out) {
    (void)trainer_device_pull(t, NULL); /* views the caller may write: the host is the record */
    trainer_device_host_wrote(t);
    *m = t->m;
    *v = t->v;
    *n = t->n_params;
    *t_out = t->be->ctl.opt_steps;
}
mxp_scaler *mxp_trainer_scaler(mxp_trainer *t) { return t->scaler; }
