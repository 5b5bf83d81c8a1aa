/* run/run.c: one training run (include/mixprec/run.h).
 *
 * Entry points: mxp_run_create/destroy/train/evaluate/request_*, the stats
 * and the accessors. The loop exists once, here, for every workload: a
 * seeded per-epoch permutation of the provider's training samples
 * (Fisher-Yates over a counter-based stream, so epoch e's order never
 * depends on earlier epochs), drop-last micro-batches with gradient
 * accumulation, rank r of a data-parallel run reading slice r of every
 * global micro-batch, the learning rate of the schedule planned over the
 * whole run at the run's global step,
 * the guard before and after each step, the step boundary (the one
 * precision-switch point, applied by the step controller, train/step_ctl.h),
 * the data-parallel stop agreement and the checkpoint manager (run_ckpt.c);
 * validation and early stopping where due (run_eval.c).
 */
#include "run/run_internal.h"
#include "train/step_ctl.h"
#include "train/trainer_device.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DEFAULT_SHUFFLE_STREAM 0x52554eull /* "RUN" */

mxp_run_options mxp_run_options_default(void) {
    mxp_run_options o;
    memset(&o, 0, sizeof o);
    o.checkpoints = true;
    return o;
}

void mxp_run_destroy(mxp_run *r) {
    if (!r) return;
    if (r->began && r->obs.end)
        r->obs.end(r->obs.self, r, !r->failed, r->stopped, r->failed ? r->fail_msg : NULL);
    if (r->obs.destroy) r->obs.destroy(r->obs.self);
    mxp_guard_destroy(r->guard); /* detaches from the model first */
    mxp_trainer_destroy(r->trainer);
    mxp_model_destroy(r->model);
    if (r->own_ckpt) mxp_ckpt_manager_destroy(r->ckpt);
    if (r->wl.destroy) r->wl.destroy(r->wl.self);
    mxp_free(r->perm);
    mxp_free(r->micro);
    mxp_free(r->val);
    run_members_free(r);
    mxp_free(r);
}

/* training.device=cuda: the trainer's step on the device
 * (train/trainer_device.h, which refuses what the device step cannot run);
 * here what only the run knows: auto precision (trial steps switch modes)
 * and fault injection into the passes (the device has none). */
static mxp_status device_attach(mxp_run *r, mxp_error *err) {
    const mxp_config *c = &r->cfg;
    if (c->device.kind != MXP_DEVICE_CUDA) return MXP_OK;
    if (c->precision_auto)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "training.device=cuda does not run training.precision=auto (its "
                             "trial steps switch precision); accepted there: fp32, mixed_bf16, "
                             "mixed_fp16, fp8");
    return trainer_device_select(r->trainer, &c->device, err);
}

/* The model of the provider's spec and its trainer as cfg asks: the
 * precision policy of training.precision (with training.fp16_accumulate),
 * the FP8 scaling config (cfg->fp8.history_len > 0; 0 keeps the default),
 * the FP32-layer override, and the trainer config with the accumulation
 * steps and the seed. */
static mxp_status model_create(mxp_run *r, mxp_error *err) {
    const mxp_config *cfg = &r->cfg;
    mxp_model_spec spec;
    mxp_status s = r->wl.model_spec(r->wl.self, &spec, err);
    if (s != MXP_OK) return s;
    mxp_precision_policy pol;
    mxp_precision_policy_default(cfg->precision, &pol);
    pol.fp16_accum_k = cfg->fp16_accumulate ? (int)cfg->fp16_accumulate_k : 0;
    if ((s = mxp_model_create(&spec, &pol, cfg->seed, &r->model, err)) != MXP_OK) return s;
    if (cfg->fp8.history_len > 0 && (s = mxp_model_set_fp8_config(r->model, &cfg->fp8, err)))
        return s;
    if (!mxp_fp32_layers_none(&cfg->fp32_layers) &&
        (s = mxp_model_set_fp32_layers(r->model, &cfg->fp32_layers, err)))
        return s;
    if (strcmp(cfg->init_from, "none") != 0 &&
        (s = mxp_ckpt_init_weights(r->model, cfg->init_from, err)) != MXP_OK)
        return s;
    mxp_trainer_config tc = cfg->trainer;
    tc.grad_accum_steps = (int)cfg->grad_accum_steps;
    tc.seed = cfg->seed;
    mxp_status ts = mxp_trainer_create(r->model, &tc, &r->trainer, err);
    if (ts == MXP_OK) step_ctl_claim(r->trainer, STEP_OWNER_RUN); /* one_step's boundary */
    return ts == MXP_OK ? device_attach(r, err) : ts;
}

/* The guard (its canary probing the provider's fixed batch), then
 * precision: auto (after the guard, so a fault of step 0 is already in
 * the weights). */
static mxp_status guard_create(mxp_run *r, mxp_error *err) {
    mxp_batch probe = {0};
    mxp_status s;
    if (r->wl.canary_batch &&
        (s = r->wl.canary_batch(r->wl.self, r->cfg.guard.canary_batch, &probe, err)) != MXP_OK)
        return s;
    s = mxp_guard_for_workload(&r->cfg.guard, r->trainer, probe.B > 0 ? &probe : NULL,
                               &r->guard, err);
    if (s != MXP_OK || !r->cfg.precision_auto || !r->wl.auto_precision) return s;
    s = r->wl.auto_precision(r->wl.self, r->trainer, &r->cfg.guard, err);
    if (s == MXP_OK) r->cfg.precision = mxp_model_policy(r->model)->mode;
    return s;
}

static void on_guard_event(void *user, const mxp_guard_event *ev) {
    mxp_run *r = user;
    if (r->obs.guard_event) r->obs.guard_event(r->obs.self, r, ev);
}

mxp_status mxp_run_create(const mxp_config *cfg, const mxp_run_options *opt, mxp_run **out,
                          mxp_error *err) {
    if (!cfg || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_create: NULL");
    *out = NULL;
    mxp_run_options o = opt ? *opt : mxp_run_options_default();
    mxp_workload_provider wl;
    mxp_status s = MXP_OK;
    if (o.provider)
        wl = *o.provider;
    else if (o.data)
        s = mxp_workload_provider_dataset(cfg, o.data, &wl, err);
    else
        s = mxp_workload_provider_builtin(cfg, &wl, err);
    if (s != MXP_OK) return s;
    if (!wl.model_spec || !wl.num_train || !wl.fill_batch)
        s = mxp_error_set(err, MXP_ERR_INVALID_ARG,
                          "workload provider '%s': model_spec, num_train and fill_batch are "
                          "required", wl.name ? wl.name : "?");
    else if (cfg->batch_size < 1 || cfg->grad_accum_steps < 1 || cfg->epochs < 1)
        s = mxp_error_set(err, MXP_ERR_CONFIG,
                          "training.batch_size=%lld training.grad_accum_steps=%lld "
                          "training.epochs=%lld; accepted: all >= 1",
                          (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                          (long long)cfg->epochs);
    mxp_run *r = s == MXP_OK ? mxp_calloc(1, sizeof *r) : NULL;
    if (s == MXP_OK && !r) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "run");
    if (s != MXP_OK) {
        if (wl.destroy) wl.destroy(wl.self);
        return s;
    }
    r->cfg = *cfg;
    r->wl = wl;
    if (!r->wl.name) r->wl.name = "custom";
    if (r->wl.rows_per_sample < 1) r->wl.rows_per_sample = 1;
    r->dp_size = 1;
    r->shuffled = -1;
    r->last_loss = r->epoch_mean = NAN;
    r->last_val = r->best_val = NAN;
    r->loss_epoch = -1;
    r->max_batch = cfg->batch_size;
    r->n_train = r->wl.num_train(r->wl.self);
    if (o.observer) r->obs = *o.observer;
    r->progress = o.progress;
    r->progress_user = o.progress_user;
    if (r->wl.data_signature) r->wl.data_signature(r->wl.self, r->data_sig, sizeof r->data_sig);
    if (r->n_train < cfg->batch_size * cfg->grad_accum_steps) {
        s = mxp_error_set(err, MXP_ERR_CONFIG,
                          "training.batch_size=%lld x training.grad_accum_steps=%lld exceeds "
                          "the %lld training samples of workload %s; accepted: at most %lld "
                          "samples per step",
                          (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                          (long long)r->n_train, r->wl.name, (long long)r->n_train);
        goto fail;
    }
    if ((s = run_eval_check(r, err)) != MXP_OK) goto fail;
    r->perm = mxp_calloc((size_t)r->n_train, sizeof *r->perm);
    r->micro = mxp_calloc((size_t)cfg->grad_accum_steps, sizeof *r->micro);
    if (!r->perm || !r->micro) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "run buffers (%lld samples)",
                          (long long)r->n_train);
        goto fail;
    }
    if ((s = model_create(r, err)) != MXP_OK) goto fail;
    run_members_init(r);
    if ((s = guard_create(r, err)) != MXP_OK) goto fail;
    if (r->guard) mxp_guard_set_event_callback(r->guard, on_guard_event, r);
    if (o.comm && (s = mxp_run_set_comm(r, o.comm, &cfg->dist, err)) != MXP_OK) goto fail;
    if (o.checkpoints && cfg->ckpt_enabled && r->dp_rank == 0 &&
        (s = run_ckpt_open(r, o.resume != NULL, err)) != MXP_OK)
        goto fail;
    if (o.resume && (s = mxp_run_resume(r, o.resume, err)) != MXP_OK) goto fail;
    if (!r->run_id[0]) run_new_id(r); /* a run without checkpoints has an id too */
    *out = r;
    return MXP_OK;
fail:
    mxp_run_destroy(r);
    return s;
}

/* ---- the loop ------------------------------------------------------------------ */

/* Fisher-Yates shuffle of 0..n-1 from the stream (seed, stream + epoch). */
static void shuffle(mxp_run *r, int64_t epoch) {
    uint64_t stream = r->wl.shuffle_stream ? r->wl.shuffle_stream : DEFAULT_SHUFFLE_STREAM;
    mxp_rng_permutation(r->perm, r->n_train,
                        r->cfg.seed ^ (stream + (uint64_t)epoch * 0x9E3779B97F4A7C15ull));
    r->shuffled = epoch;
}

/* The step boundary, the one point where a run's precision changes
 * (docs/design.md "Who changes precision"): the step controller applies
 * the pending request (the guard's fallback or retry, the scaler's
 * at-minimum fallback, an operator's signal or control-API request),
 * resets what a switch resets and records the decision. A switch the
 * trainer refuses (a mode this machine cannot run) is logged and training
 * goes on in the current mode. The observer hears of the requests that
 * have no guard event of their own (control API, Python, a front end). */
static mxp_status step_boundary(mxp_run *r, mxp_error *err) {
    step_decision d;
    mxp_status s = step_ctl_boundary(r->trainer, &d, err);
    if (s != MXP_OK || !d.switched || d.source != STEP_SRC_REQUEST) return s;
    if (d.to == MXP_PRECISION_FP32) mxp_log(MXP_LOG_WARN, "FP16 training disabled - using FP32");
    if (r->obs.precision_changed)
        r->obs.precision_changed(r->obs.self, r, d.from, d.to, d.reason);
    return MXP_OK;
}

/* Gather micro-batches of step s of the current epoch at micro-batch size
 * `batch` (samples). */
static mxp_status fill_step(mxp_run *r, int64_t s, int64_t batch, mxp_error *err) {
    const int accum = (int)r->cfg.grad_accum_steps;
    for (int a = 0; a < accum; a++) {
        const uint32_t *idx = r->perm + ((s * accum + a) * r->dp_size + r->dp_rank) * batch;
        mxp_status st = r->wl.fill_batch(r->wl.self, a, idx, batch, &r->micro[a], err);
        if (st != MXP_OK) return st;
    }
    return MXP_OK;
}

static void record_loss(mxp_run *r, int64_t epoch, const mxp_step_result *res) {
    r->last_loss = res->loss;
    if (epoch != r->loss_epoch) {
        if (r->epoch_n > 0) r->epoch_mean = r->epoch_sum / (double)r->epoch_n;
        r->epoch_sum = 0;
        r->epoch_n = 0;
        r->loss_epoch = epoch;
    }
    if (!res->skipped && isfinite(res->loss)) {
        r->epoch_sum += res->loss;
        r->epoch_n++;
    }
}

/* The learning rate at r->pos. The schedule is planned over the whole run:
 * training.epochs, or further when a call goes past them (then the plan ends
 * with that call), and read at the run's global step epoch x steps_per_epoch
 * + step_in_epoch. It depends on the data position only, not on how the
 * epochs were split into train() calls: train(1) three times is train(3),
 * and a resume (with more epochs: a longer plan) continues it. */
static float scheduled_lr(const mxp_run *r, int64_t steps_per_epoch) {
    const mxp_config *c = &r->cfg;
    const mxp_data_position *p = &r->pos;
    int64_t plan = c->epochs;
    if (p->run_first_epoch + p->run_epochs > plan) plan = p->run_first_epoch + p->run_epochs;
    const int64_t g = p->epoch * steps_per_epoch + p->step_in_epoch;
    float lr = mxp_lr_at(c->lr_schedule, c->trainer.optim.lr, c->lr_min_ratio, g,
                         plan * steps_per_epoch);
    /* training.lr_warmup_steps W: global step g < W gets (g + 1) / W of it */
    if (g < c->lr_warmup_steps)
        lr = (float)((double)lr * (double)(g + 1) / (double)c->lr_warmup_steps);
    return lr;
}

/* One step at r->pos: the scheduled learning rate, the guard's before-step,
 * the precision the ranks agree on, the trainer step, the position
 * advanced, the guard's after-step (a rollback moves the position back;
 * *stop: a stop rule fired), progress and observer. */
static mxp_status one_step(mxp_run *r, int64_t epoch, int64_t steps_per_epoch, bool *stop,
                           mxp_error *err) {
    const mxp_config *c = &r->cfg;
    mxp_data_position *p = &r->pos;
    mxp_status s = mxp_trainer_set_lr(r->trainer, scheduled_lr(r, steps_per_epoch), err);
    if (s != MXP_OK) return s;
    if (r->guard && (s = mxp_guard_step_begin(r->guard, p, err)) != MXP_OK) return s;
    if ((s = mxp_trainer_sync_precision(r->trainer, err)) != MXP_OK) return s;
    mxp_step_result res;
    s = mxp_trainer_step(r->trainer, r->micro, (int)c->grad_accum_steps, &res, err);
    if (s != MXP_OK) return s;
    mxp_data_position_advance(p, steps_per_epoch);
    *stop = false;
    if (r->guard && (s = mxp_guard_step_end(r->guard, &res, p, stop, err)) != MXP_OK) return s;
    r->samples_trained += p->batch_size * c->grad_accum_steps; /* all ranks */
    record_loss(r, epoch, &res);
    mxp_run_progress pr = {p->run_step, p->run_total, epoch, p->run_first_epoch + p->run_epochs,
                           &res};
    if (r->progress) r->progress(r->progress_user, &pr);
    if (r->obs.step) r->obs.step(r->obs.self, r, &pr);
    return step_boundary(r, err);
}

mxp_status mxp_run_train(mxp_run *r, int64_t epochs, int64_t batch, mxp_error *err) {
    if (!r) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_train: NULL run");
    if (epochs == 0) epochs = r->resume_epochs > 0 ? r->resume_epochs : r->cfg.epochs;
    if (batch == 0) batch = r->cfg.batch_size;
    r->resume_epochs = 0;
    if (epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "epochs=%lld; accepted: >= 1 (0: config)",
                             (long long)epochs);
    if (batch < 1 || batch > r->max_batch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld; accepted: 1..%lld (the configured batch size; "
                             "0: config)", (long long)batch, (long long)r->max_batch);
    const int64_t accum = r->cfg.grad_accum_steps;
    const int64_t steps_per_epoch = r->n_train / (batch * r->dp_size * accum);
    if (steps_per_epoch < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld x grad_accum_steps=%lld x %d ranks exceeds %lld "
                             "training samples", (long long)batch, (long long)accum, r->dp_size,
                             (long long)r->n_train);
    /* a finished or early-stopped run: nothing to do */
    if (r->finished_before_resume || r->early_stopped) return MXP_OK;
    mxp_data_position *p = &r->pos;
    /* the position records the GLOBAL micro-batch (all ranks), so a
     * checkpoint resumes at any world size that keeps it */
    mxp_status st = mxp_data_position_begin(p, epochs, batch * r->dp_size, steps_per_epoch, err);
    if (st != MXP_OK) return st;
    if (!r->began) {
        r->began = true;
        if (r->obs.begin) r->obs.begin(r->obs.self, r);
    }
    r->stopped = false;
    bool honoured = false; /* this call stopped on mxp_run_request_stop */
    r->shuffled = -1;
    const double t0 = mxp_time_now();
    /* The loop reads the position every step, so a rollback (or a resume)
     * that moves it continues from there with the same batches. */
    while (st == MXP_OK && !mxp_data_position_done(p)) {
        const int64_t epoch = p->epoch;
        if (epoch != r->shuffled) {
            mxp_trainer_set_epoch(r->trainer, epoch);
            shuffle(r, epoch);
        }
        if ((st = fill_step(r, p->step_in_epoch, batch, err)) != MXP_OK) break;
        bool guard_stop = false, early = false;
        if ((st = one_step(r, epoch, steps_per_epoch, &guard_stop, err)) != MXP_OK) break;
        /* validation, early stopping (ended: the epoch ended, not rolled back) */
        const bool ended = p->epoch == epoch + 1 && p->step_in_epoch == 0;
        if ((st = run_eval_after_step(r, epoch, ended, steps_per_epoch, &early, err)) != MXP_OK)
            break;
        if (early) mxp_data_position_end(p); /* the checkpoint records a finished call */
        const bool asked = r->stop_req != 0;
        bool stop = asked || guard_stop || early;
        if (r->dp_size > 1 && /* a signal may reach the ranks at different steps */
            (st = mxp_dist_agree_any(mxp_trainer_comm(r->trainer), &stop, err)) != MXP_OK)
            break;
        if (r->ckpt &&
            (st = run_ckpt_after_step(r, stop || mxp_data_position_done(p), err)) != MXP_OK)
            break;
        if (stop) {
            r->stopped = !r->early_stopped; /* early stopping finishes the run */
            honoured = asked;
            break;
        }
    }
    /* a stop request is spent by the call that honoured it (one that came
     * in while this call was finishing is the same stop); one that arrives
     * after this point stops the next call at its first step boundary */
    if (honoured) r->stop_req = 0;
    r->wall_s += mxp_time_now() - t0;
    /* done or stopped, a call that leaves non-finite weights or optimizer
     * state never reports success (checkpoints written with it are marked
     * unhealthy by the guard) */
    if (st == MXP_OK) {
        mxp_error e = {0};
        if (mxp_trainer_check_state(r->trainer, &e) != MXP_OK)
            st = mxp_error_set(err, e.status, "training ended with unusable weights or optimizer "
                               "state: %s", e.msg);
    }
    r->failed = st != MXP_OK;
    if (st != MXP_OK) {
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", err ? err->msg : "training failed");
        return st;
    }
    if (!r->stopped) {
        mxp_data_position_end(p);
        if (r->epoch_n > 0) r->epoch_mean = r->epoch_sum / (double)r->epoch_n;
    }
    return MXP_OK;
}

void mxp_run_request_stop(mxp_run *r) {
    if (r) r->stop_req = 1;
}

void mxp_run_request_precision(mxp_run *r, mxp_precision to, const char *reason) {
    if (!r || (int)to < 0 || to >= MXP_PRECISION_COUNT) return;
    (void)step_ctl_request(r->trainer, to, STEP_SRC_REQUEST, reason ? reason : "request", NULL);
}

mxp_status mxp_run_evaluate(mxp_run *r, mxp_run_eval *out, mxp_error *err) {
    if (!r || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_evaluate: NULL");
    memset(out, 0, sizeof *out);
    out->loss = out->accuracy = out->bits_per_char = out->mse = out->bce = NAN;
    for (int i = 0; i < MXP_OPEN_LOOP_N; i++) out->open_loop[i] = NAN;
    for (int e = 0; e < MXP_MODEL_MAX_ENSEMBLE; e++) out->member_loss[e] = NAN;
    if (!r->wl.evaluate)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "workload '%s' has no held-out evaluation", r->wl.name);
    return r->wl.evaluate(r->wl.self, r->model, out, err);
}

/* ---- stats and accessors ------------------------------------------------------- */

void mxp_run_stats(const mxp_run *r, mxp_run_info *o) {
    memset(o, 0, sizeof *o);
    mxp_train_stats ts;
    mxp_trainer_stats(r->trainer, &ts);
    o->training_steps = ts.training_steps;
    o->optimizer_steps = ts.optimizer_steps;
    o->skipped_steps = ts.skipped_steps;
    o->overflow_rate = ts.overflow_rate;
    o->loss_scale = ts.current_scale;
    o->precision = (int)ts.precision;
    o->emulated = mxp_model_policy(r->model)->emulated;
    o->epoch = r->pos.epoch;
    o->step_in_epoch = r->pos.step_in_epoch;
    o->run_step = r->pos.run_step;
    o->run_total = r->pos.run_total;
    int64_t per = r->max_batch * r->dp_size * r->cfg.grad_accum_steps;
    o->samples_per_epoch = r->n_train / per * per * r->wl.rows_per_sample;
    o->samples_trained = r->samples_trained * r->wl.rows_per_sample;
    o->last_loss = r->last_loss;
    o->epoch_mean_loss = r->epoch_mean;
    o->wall_s = r->wall_s;
    o->stopped = r->stopped;
    o->finished = r->finished_before_resume || r->early_stopped ||
                  (r->pos.run_total == 0 && ts.training_steps > 0);
    o->resumed = r->resumed;
    o->finished_before_resume = r->finished_before_resume;
    o->checkpoints_written = r->ckpts_written;
    if (r->ckpt) snprintf(o->last_checkpoint, sizeof o->last_checkpoint, "%s",
                          mxp_ckpt_manager_last_path(r->ckpt));
    snprintf(o->run_id, sizeof o->run_id, "%s", r->run_id);
    snprintf(o->workload, sizeof o->workload, "%s", r->wl.name);
    o->val_loss = r->last_val;
    o->best_val_loss = r->best_val;
    o->best_epoch = r->best_epoch;
    o->best_step = r->best_step;
    o->evaluations = r->evals;
    o->evals_since_best = r->evals_since_best;
    o->early_stopped = r->early_stopped;
    snprintf(o->best_checkpoint, sizeof o->best_checkpoint, "%s", r->best_path);
}

/* JSON number or null (non-finite). */
static int json_num(char *b, size_t n, double v) {
    return isfinite(v) ? snprintf(b, n, "%.9g", v) : snprintf(b, n, "null");
}

int mxp_run_stats_json(const mxp_run *r, char *buf, size_t cap) {
    if (!r || !buf) return -1;
    mxp_run_info s;
    mxp_run_stats(r, &s);
    char ll[32], el[32], of[32], vl[32], bv[32];
    json_num(vl, sizeof vl, s.val_loss);
    json_num(bv, sizeof bv, s.best_val_loss);
    json_num(ll, sizeof ll, s.last_loss);
    json_num(el, sizeof el, s.epoch_mean_loss);
    json_num(of, sizeof of, s.overflow_rate);
    int n = snprintf(buf, cap,
                     "{\"run_id\":\"%s\",\"workload\":\"%s\",\"precision\":\"%s\",\"emulated\":%s,"
                     "\"training_steps\":%lld,\"optimizer_steps\":%lld,\"skipped_steps\":%lld,"
                     "\"overflow_rate\":%s,\"loss_scale\":%.9g,\"epoch\":%lld,"
                     "\"step_in_epoch\":%lld,\"run_step\":%lld,\"run_total\":%lld,"
                     "\"samples_per_epoch\":%lld,\"samples_trained\":%lld,\"last_loss\":%s,"
                     "\"epoch_mean_loss\":%s,\"wall_s\":%.6g,\"stopped\":%s,\"finished\":%s,"
                     "\"resumed\":%s,\"finished_before_resume\":%s,\"checkpoints_written\":%lld,"
                     "\"last_checkpoint\":\"%s\",\"val_loss\":%s,\"best_val_loss\":%s,"
                     "\"best_epoch\":%lld,\"best_step\":%lld,\"evaluations\":%lld,"
                     "\"evals_since_best\":%lld,"
                     "\"early_stopped\":%s,\"best_checkpoint\":\"%s\"}",
                     s.run_id, s.workload, mxp_precision_name((mxp_precision)s.precision),
                     s.emulated ? "true" : "false", (long long)s.training_steps,
                     (long long)s.optimizer_steps, (long long)s.skipped_steps, of,
                     (double)s.loss_scale, (long long)s.epoch, (long long)s.step_in_epoch,
                     (long long)s.run_step, (long long)s.run_total,
                     (long long)s.samples_per_epoch, (long long)s.samples_trained, ll, el,
                     s.wall_s, s.stopped ? "true" : "false", s.finished ? "true" : "false",
                     s.resumed ? "true" : "false", s.finished_before_resume ? "true" : "false",
                     (long long)s.checkpoints_written, s.last_checkpoint, vl, bv,
                     (long long)s.best_epoch, (long long)s.best_step, (long long)s.evaluations,
                     (long long)s.evals_since_best, s.early_stopped ? "true" : "false",
                     s.best_checkpoint);
    if (n < 0 || (size_t)n >= cap) return -1;
    if (r->mem.E > 1) { /* an ensemble: ,"elites":[..],"member_val_loss":[..],... before } */
        char mem[RUN_STATE_MAX];
        const size_t k = run_members_json(r, false, mem, sizeof mem);
        if ((size_t)n + k + 2 >= cap) return -1;
        buf[n - 1] = ',';
        memcpy(buf + n, mem, k);
        n += (int)k;
        buf[n++] = '}';
        buf[n] = '\0';
    }
    return n;
}

mxp_trainer *mxp_run_trainer(mxp_run *r) { return r->trainer; }
mxp_model *mxp_run_model(mxp_run *r) { return r->model; }
mxp_guard *mxp_run_guard(mxp_run *r) { return r->guard; }
const mxp_config *mxp_run_config(const mxp_run *r) { return &r->cfg; }
const mxp_workload_provider *mxp_run_provider(const mxp_run *r) { return &r->wl; }
mxp_ckpt_manager *mxp_run_checkpointer(mxp_run *r) { return r->ckpt; }
void mxp_run_position(const mxp_run *r, mxp_data_position *out) { *out = r->pos; }

void mxp_run_set_position(mxp_run *r, const mxp_data_position *p) { r->pos = *p; }

void mxp_run_set_checkpointer(mxp_run *r, mxp_ckpt_manager *m) {
    if (r->own_ckpt) mxp_ckpt_manager_destroy(r->ckpt);
    r->own_ckpt = false;
    r->ckpt = m;
    mxp_guard_set_checkpoints(r->guard, m); /* rollback may use the checkpoints */
    if (m && r->wl.checkpoint_meta) {
        mxp_error ignore; /* out of memory only: the next save reports it */
        (void)mxp_ckpt_manager_set_workload_meta(m, r->wl.checkpoint_meta(r->wl.self), &ignore);
    }
    if (m && r->evals > 0) {
        char js[512];
        mxp_error ignore;
        run_eval_state_json(r, js, sizeof js);
        (void)mxp_ckpt_manager_set_run_state(m, js, &ignore);
    }
}

mxp_status mxp_run_set_comm(mxp_run *r, mxp_comm *comm, const mxp_dist_config *dc,
                            mxp_error *err) {
    if (!r) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_set_comm: NULL run");
    if (comm) {
        int64_t same[6] = {r->cfg.batch_size, r->cfg.grad_accum_steps, (int64_t)r->cfg.seed,
                           (int64_t)r->cfg.precision, (int64_t)mxp_model_num_params(r->model),
                           r->n_train};
        mxp_status s = mxp_dist_require_same(comm, same, sizeof same,
                                             "batch size, accumulation, seed, precision, "
                                             "model or data", err);
        if (s != MXP_OK) return s;
    }
    mxp_status s = mxp_trainer_set_comm(r->trainer, comm, dc, err);
    if (s != MXP_OK) return s;
    r->dp_rank = mxp_comm_rank(comm);
    r->dp_size = mxp_comm_size(comm);
    return MXP_OK;
}
