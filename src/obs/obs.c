/* src/obs/obs.c: the training observer: the mixprec_* metric set, the run's
 * status, in-memory step history and event ring, operator precision
 * requests, and the hand-off of rows and events to the run store.
 *
 * Entry points: mxp_metrics_register_training, mxp_obs_create/destroy,
 * mxp_obs_run_begin/record_step/event/precision_changed/run_end,
 * mxp_obs_request_precision/take_precision_request, mxp_obs_flush,
 * mxp_obs_set_validation_loss/set_guard_state (obs.h).
 *
 * Cost per step (mxp_obs_record_step): ~20 relaxed atomic updates, one
 * histogram observe, one mutex-guarded row copy, one row handed to the
 * store's writer thread (writer.c), which commits every flush_steps / 2
 * steps or flush_seconds seconds (one transaction, WAL, no fsync per
 * commit); the hand-off waits only when the writer is flush_steps rows
 * behind (the durability bound).
 * bench/bench_metrics.c measures it.
 */
#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "obs/obs_internal.h"
#include "train/step_ctl.h"

static const char *const kRunStateNames[] = {"running", "finished", "failed"};
static_assert(sizeof kRunStateNames / sizeof kRunStateNames[0] == MXP_RUN_STATE_COUNT,
              "one name per run state");

const char *mxp_run_state_name(mxp_run_state s) {
    return (unsigned)s < MXP_RUN_STATE_COUNT ? kRunStateNames[s] : "unknown";
}

static const char *const kMemKinds[] = {"params", "grads", "master", "optimizer", "activations"};
static_assert(sizeof kMemKinds / sizeof kMemKinds[0] == MXP_MEM_KIND_COUNT,
              "one name per memory kind");

/* Step durations from 50 us to 10 s. */
static const double kDurationBuckets[] = {5e-5,  1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                          1e-2,  2.5e-2, 5e-2, 0.1,  0.25, 0.5,    1.0,
                                          2.5,   5.0,  10.0};

typedef struct metric_def {
    mxp_metric_type type;
    const char *name, *labels, *help;
} metric_def;

static const metric_def kTraining[] = {
    {MXP_METRIC_COUNTER, "mixprec_training_steps_total", NULL,
     "Training steps run (applied plus skipped)."},
    {MXP_METRIC_COUNTER, "mixprec_optimizer_steps_total", NULL,
     "Optimizer updates applied."},
    {MXP_METRIC_COUNTER, "mixprec_overflow_steps_total", NULL,
     "Steps skipped because gradients or loss were not finite."},
    {MXP_METRIC_COUNTER, "mixprec_samples_total", NULL, "Training samples processed."},
    {MXP_METRIC_GAUGE, "mixprec_loss_scale", NULL, "Current dynamic loss scale (1 when off)."},
    {MXP_METRIC_GAUGE, "mixprec_training_loss", NULL, "Loss of the last training step."},
    {MXP_METRIC_GAUGE, "mixprec_validation_loss", NULL,
     "Last validation loss (NaN until measured)."},
    {MXP_METRIC_GAUGE, "mixprec_grad_norm", NULL,
     "Global L2 norm of the unscaled gradients of the last step, before clipping."},
    {MXP_METRIC_GAUGE, "mixprec_grad_zero_fraction", NULL,
     "Fraction of exactly-zero gradient elements in the last step (underflow)."},
    {MXP_METRIC_GAUGE, "mixprec_grad_near_overflow_fraction", NULL,
     "Fraction of scaled gradient elements near the gradient format's maximum."},
    {MXP_METRIC_GAUGE, "mixprec_fp32_divergence_ratio", NULL,
     "Relative difference of the loss from the FP32 baseline (NaN when unknown)."},
    {MXP_METRIC_HISTOGRAM, "mixprec_step_duration_seconds", NULL,
     "Wall time of one training step."},
    {MXP_METRIC_GAUGE, "mixprec_memory_bytes", "kind",
     "Bytes held by the model and optimizer, by kind."},
    {MXP_METRIC_GAUGE, "mixprec_precision_info", "mode",
     "1 for the precision mode the run computes in, 0 for the others."},
    {MXP_METRIC_GAUGE, "mixprec_fp16_enabled_runtime", NULL,
     "1 when the running mode computes in FP16."},
    {MXP_METRIC_COUNTER, "mixprec_precision_fallbacks_total", NULL,
     "Automatic switches to a wider precision."},
    {MXP_METRIC_COUNTER, "mixprec_rollbacks_total", NULL, "Rollbacks to a healthy checkpoint."},
    {MXP_METRIC_COUNTER, "mixprec_guard_events_total", "rule,severity",
     "Guard rule firings, by rule and severity."},
    {MXP_METRIC_GAUGE, "mixprec_run_state", "state",
     "1 for the run's state (running, finished, failed), 0 for the others."},
    {MXP_METRIC_GAUGE, "mixprec_epoch", NULL, "Current epoch (0-based)."},
    {MXP_METRIC_GAUGE, "mixprec_progress_ratio", NULL, "Steps done over steps planned."},
};

mxp_status mxp_metrics_register_training(mxp_metrics *r, mxp_error *err) {
    for (size_t i = 0; i < sizeof kTraining / sizeof kTraining[0]; i++) {
        const metric_def *d = &kTraining[i];
        bool hist = d->type == MXP_METRIC_HISTOGRAM;
        int nb = hist ? (int)(sizeof kDurationBuckets / sizeof kDurationBuckets[0]) : 0;
        mxp_status s = mxp_metrics_register(r, d->type, d->name, d->help, d->labels,
                                            hist ? kDurationBuckets : NULL, nb, err);
        if (s != MXP_OK) return s;
    }
    return MXP_OK;
}

static mxp_status bind(mxp_obs *o, const char *name, const char *label, mxp_metric **out,
                       mxp_error *err) {
    const char *vals[1] = {label};
    return mxp_metrics_series(o->reg, name, label ? vals : NULL, out, err);
}

static mxp_status bind_all(mxp_obs *o, mxp_error *err) {
    struct {
        const char *name;
        mxp_metric **dst;
    } plain[] = {
        {"mixprec_training_steps_total", &o->m_steps},
        {"mixprec_optimizer_steps_total", &o->m_opt_steps},
        {"mixprec_overflow_steps_total", &o->m_overflow},
        {"mixprec_samples_total", &o->m_samples},
        {"mixprec_loss_scale", &o->m_scale},
        {"mixprec_training_loss", &o->m_loss},
        {"mixprec_validation_loss", &o->m_val_loss},
        {"mixprec_grad_norm", &o->m_grad_norm},
        {"mixprec_grad_zero_fraction", &o->m_zero},
        {"mixprec_grad_near_overflow_fraction", &o->m_near},
        {"mixprec_fp32_divergence_ratio", &o->m_div},
        {"mixprec_step_duration_seconds", &o->m_duration},
        {"mixprec_fp16_enabled_runtime", &o->m_fp16},
        {"mixprec_precision_fallbacks_total", &o->m_fallbacks},
        {"mixprec_rollbacks_total", &o->m_rollbacks},
        {"mixprec_epoch", &o->m_epoch},
        {"mixprec_progress_ratio", &o->m_progress},
    };
    mxp_status s = MXP_OK;
    for (size_t i = 0; s == MXP_OK && i < sizeof plain / sizeof plain[0]; i++)
        s = bind(o, plain[i].name, NULL, plain[i].dst, err);
    for (int k = 0; s == MXP_OK && k < MXP_MEM_KIND_COUNT; k++)
        s = bind(o, "mixprec_memory_bytes", kMemKinds[k], &o->m_mem[k], err);
    for (int p = 0; s == MXP_OK && p < MXP_PRECISION_COUNT; p++)
        s = bind(o, "mixprec_precision_info", mxp_precision_name((mxp_precision)p), &o->m_prec[p],
                 err);
    for (int k = 0; s == MXP_OK && k < MXP_RUN_STATE_COUNT; k++)
        s = bind(o, "mixprec_run_state", kRunStateNames[k], &o->m_state[k], err);
    if (s != MXP_OK) return s;
    mxp_metric_set(o->m_val_loss, NAN);
    mxp_metric_set(o->m_div, NAN);
    mxp_metric_set(o->m_loss, NAN);
    return MXP_OK;
}

static mxp_status check_settings(const mxp_obs_settings *s, mxp_error *err) {
    if (s->history_max < 16)
        return mxp_error_set(err, MXP_ERR_CONFIG, "obs.history_max=%lld; accepted: >= 16",
                             (long long)s->history_max);
    if (s->flush_steps < 1)
        return mxp_error_set(err, MXP_ERR_CONFIG, "obs.store.flush_steps=%lld; accepted: >= 1",
                             (long long)s->flush_steps);
    if (!(s->flush_seconds > 0))
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "obs.store.flush_seconds=%g; accepted: > 0", s->flush_seconds);
    if (s->http_port < 0 || s->http_port > 65535)
        return mxp_error_set(err, MXP_ERR_CONFIG, "obs.http.port=%lld; accepted: 0..65535",
                             (long long)s->http_port);
    return MXP_OK;
}

static void join_path(char *dst, size_t n, const char *dir, const char *file) {
    if (file[0] == '/')
        snprintf(dst, n, "%s", file);
    else
        snprintf(dst, n, "%s/%s", dir, file);
}

mxp_status mxp_obs_create(const mxp_obs_settings *settings, const char *run_dir,
                          const char *run_id, mxp_obs **out, mxp_error *err) {
    if (!settings || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_create: NULL argument");
    *out = NULL;
    mxp_status s = check_settings(settings, err);
    if (s != MXP_OK) return s;
    mxp_obs *o = mxp_calloc(1, sizeof *o);
    if (!o) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "observer");
    o->set = *settings;
    pthread_mutex_init(&o->lock, NULL);
    atomic_init(&o->req_prec, -1);
    o->last_loss = NAN;
    o->val_loss = NAN;
    o->ema_loss = NAN;
    o->state = MXP_RUN_RUNNING;
    snprintf(o->guard_json, sizeof o->guard_json, "{\"state\":\"not configured\"}");
    if (run_id && *run_id) {
        snprintf(o->run_id, sizeof o->run_id, "%s", run_id);
    } else {
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        snprintf(o->run_id, sizeof o->run_id, "%04d%02d%02dT%02d%02d%02dZ-%ld",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (long)getpid());
    }
    /* A bad token file is a config error found before anything is written. */
    if (settings->http_enabled && settings->token_file[0] &&
        strcmp(settings->token_file, "none") != 0) {
        s = mxp_obs_read_token(settings->token_file, o->token, &o->token_len, err);
        if (s != MXP_OK) {
            mxp_obs_destroy(o);
            return s;
        }
        o->token_loaded = true;
    }
    s = mxp_metrics_create(&o->reg, err);
    if (s == MXP_OK) s = mxp_metrics_register_training(o->reg, err);
    if (s == MXP_OK) s = bind_all(o, err);
    if (s == MXP_OK && settings->store_enabled && run_dir) {
        char db[2 * MXP_CONFIG_STR_MAX + 2], ev[2 * MXP_CONFIG_STR_MAX + 2];
        join_path(db, sizeof db, run_dir, settings->store_db);
        join_path(ev, sizeof ev, run_dir, settings->store_events);
        s = mxp_obs_store_open(db, ev, o->run_id, &o->store, err);
        if (s == MXP_OK)
            s = mxp_obs_writer_start(o->store, settings->flush_steps, settings->flush_seconds,
                                     &o->writer, err);
    }
    if (s != MXP_OK) {
        mxp_obs_destroy(o);
        return s;
    }
    *out = o;
    return MXP_OK;
}

void mxp_obs_destroy(mxp_obs *o) {
    if (!o) return;
    mxp_obs_stop_serving(o);
    mxp_obs_writer_stop(o->writer); /* commits what is queued */
    mxp_obs_store_close(o->store);
    mxp_free(o->hist);
    mxp_metrics_destroy(o->reg);
    explicit_bzero(o->token, sizeof o->token);
    pthread_mutex_destroy(&o->lock);
    mxp_free(o);
}

mxp_metrics *mxp_obs_metrics(mxp_obs *o) { return o ? o->reg : NULL; }
const char *mxp_obs_run_id(const mxp_obs *o) { return o ? o->run_id : NULL; }

/* Memory gauges and precision_info for the trainer's current policy. */
static void update_precision_metrics(mxp_obs *o, mxp_precision p) {
    mxp_model *m = mxp_trainer_model(o->trainer);
    mxp_model_memory mm;
    mxp_model_memory_usage(m, &mm);
    double opt = (double)(mxp_trainer_tensor_bytes(o->trainer, MXP_TENSOR_OPTIM_M) +
                          mxp_trainer_tensor_bytes(o->trainer, MXP_TENSOR_OPTIM_V));
    mxp_metric_set(o->m_mem[MXP_MEM_PARAMS], (double)mm.params);
    mxp_metric_set(o->m_mem[MXP_MEM_GRADS], (double)mm.grads);
    mxp_metric_set(o->m_mem[MXP_MEM_MASTER], (double)mm.master);
    mxp_metric_set(o->m_mem[MXP_MEM_OPTIMIZER], opt);
    mxp_metric_set(o->m_mem[MXP_MEM_ACTIVATIONS], (double)mm.activations);
    for (int i = 0; i < MXP_PRECISION_COUNT; i++)
        mxp_metric_set(o->m_prec[i], i == (int)p ? 1.0 : 0.0);
    mxp_train_stats st;
    mxp_trainer_stats(o->trainer, &st);
    mxp_metric_set(o->m_fp16, st.fp16_enabled_runtime ? 1.0 : 0.0);
    mxp_metric_set(o->m_scale, (double)st.current_scale);
    o->cur_prec = p;
    /* announced before the step boundary applied it: memory, fp16 and scale
     * are read again once it has (mxp_obs_record_step) */
    o->prec_metrics_stale = mxp_model_policy(m)->mode != p;
}

static void set_state_metrics(mxp_obs *o, mxp_run_state s) {
    for (int i = 0; i < MXP_RUN_STATE_COUNT; i++)
        mxp_metric_set(o->m_state[i], i == (int)s ? 1.0 : 0.0);
}

mxp_status mxp_obs_flush(mxp_obs *o, mxp_error *err) {
    if (!o) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_flush: NULL");
    return o->writer ? mxp_obs_writer_flush(o->writer, err) : MXP_OK;
}

mxp_status mxp_obs_run_begin(mxp_obs *o, mxp_trainer *trainer, int64_t total_steps,
                             int64_t samples_per_step, const char *config_json,
                             mxp_error *err) {
    if (!o || !trainer)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_run_begin: NULL argument");
    if (o->begun) return mxp_error_set(err, MXP_ERR_STATE, "mxp_obs_run_begin: called twice");
    o->trainer = trainer;
    o->samples_per_step = samples_per_step > 0 ? samples_per_step : 0;
    mxp_train_stats st;
    mxp_trainer_stats(trainer, &st);
    /* Size the history for the planned run, up to 64Ki rows at first (it
     * doubles, rarely, up to history_max when the run goes on). */
    int64_t want = total_steps > 1024 ? total_steps : 1024;
    if (want > 65536) want = 65536;
    if (want > o->set.history_max) want = o->set.history_max;
    mxp_obs_step_row *h = mxp_calloc((size_t)want, sizeof *h);
    if (!h) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "history of %lld rows",
                                 (long long)want);
    double now = mxp_obs_unix_now();
    pthread_mutex_lock(&o->lock);
    o->hist = h;
    o->hist_cap = (size_t)want;
    o->begun = true;
    o->stats = st;
    o->step = st.training_steps;
    o->epoch = st.epoch;
    o->total_steps = total_steps;
    o->run_step = -1;
    /* a resumed run's counters continue from the checkpoint's */
    mxp_metric_add(o->m_steps, (double)st.training_steps - mxp_metric_value(o->m_steps));
    mxp_metric_add(o->m_opt_steps, (double)st.optimizer_steps - mxp_metric_value(o->m_opt_steps));
    mxp_metric_add(o->m_overflow, (double)st.skipped_steps - mxp_metric_value(o->m_overflow));
    o->started = now;
    o->state = MXP_RUN_RUNNING;
    pthread_mutex_unlock(&o->lock);
    update_precision_metrics(o, st.precision);
    set_state_metrics(o, MXP_RUN_RUNNING);
    mxp_metric_set(o->m_epoch, (double)st.epoch);
    mxp_metric_set(o->m_progress, 0.0);
    if (o->store) {
        mxp_obs_writer_lock_io(o->writer);
        mxp_status s = mxp_obs_store_run_begin(o->store, now, st.precision, config_json, err);
        mxp_obs_writer_unlock_io(o->writer);
        if (s != MXP_OK) return s;
    }
    char detail[160];
    snprintf(detail, sizeof detail,
             "{\"precision\":\"%s\",\"fp16_enabled_runtime\":%s,\"total_steps\":%lld}",
             mxp_precision_name(st.precision), st.fp16_enabled_runtime ? "true" : "false",
             (long long)total_steps);
    return mxp_obs_event(o, st.training_steps, "run_start", "info", "training started", detail,
                         err);
}

void mxp_obs_set_run_step(mxp_obs *o, int64_t step) {
    if (!o || step < 0) return;
    pthread_mutex_lock(&o->lock);
    o->run_step = step;
    int64_t total = o->total_steps;
    pthread_mutex_unlock(&o->lock);
    if (total > 0) mxp_metric_set(o->m_progress, (double)step / (double)total);
}

void mxp_obs_set_total_steps(mxp_obs *o, int64_t total_steps) {
    if (!o || total_steps < 0) return;
    pthread_mutex_lock(&o->lock);
    o->total_steps = total_steps;
    pthread_mutex_unlock(&o->lock);
}

/* Append a row to the history ring; lock held. Grows (rarely: only past
 * the planned steps) until history_max, then overwrites the oldest. */
static void push_row(mxp_obs *o, const mxp_obs_step_row *row) {
    if ((size_t)o->hist_total >= o->hist_cap && o->hist_cap < (size_t)o->set.history_max &&
        o->hist_total == (int64_t)o->hist_cap) {
        size_t cap = o->hist_cap * 2;
        if (cap > (size_t)o->set.history_max) cap = (size_t)o->set.history_max;
        mxp_obs_step_row *h = mxp_calloc(cap, sizeof *h);
        if (h) {
            memcpy(h, o->hist, o->hist_cap * sizeof *h);
            mxp_free(o->hist);
            o->hist = h;
            o->hist_cap = cap;
        }
    }
    if (!o->hist_cap) return;
    o->hist[(size_t)o->hist_total % o->hist_cap] = *row;
    o->hist_total++;
}

mxp_status mxp_obs_record_step(mxp_obs *o, int64_t epoch, const mxp_step_result *res,
                               double duration_s, mxp_error *err) {
    if (!o || !res) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_record_step: NULL");
    if (!o->begun)
        return mxp_error_set(err, MXP_ERR_STATE, "mxp_obs_record_step before mxp_obs_run_begin");
    mxp_train_stats st;
    mxp_trainer_stats(o->trainer, &st);
    /* the mode after this step's boundary: a switch the guard or the scaler
     * asked for in this step is applied there (train/step_ctl.h) */
    st.precision = step_ctl_next_mode(o->trainer);
    mxp_status s = MXP_OK;
    const mxp_model *om = mxp_trainer_model(o->trainer);
    if (o->prec_metrics_stale && mxp_model_policy(om)->mode == o->cur_prec)
        update_precision_metrics(o, o->cur_prec);
    if (st.precision != o->cur_prec) {
        /* Switched inside the step (scaler fallback) or by someone who did
         * not announce it: a fallback. */
        s = mxp_obs_precision_changed(o, o->cur_prec, st.precision, "fallback", err);
    }
    mxp_trainer_state tstate;
    mxp_trainer_get_state(o->trainer, &tstate);
    mxp_obs_step_row row = {
        .step = st.training_steps,
        .epoch = epoch,
        .timestamp = mxp_obs_unix_now(),
        .loss = res->loss,
        .scale = res->scale,
        .grad_norm = res->grad_norm,
        .zero_fraction = res->zero_frac,
        .near_overflow_fraction = res->near_overflow_frac,
        .duration_s = duration_s,
        .overflow = res->skipped,
        .precision = st.precision,
        .lr = (double)tstate.lr,
    };
    /* Queue the row first (it may wait for the store: writer.c's
     * back-pressure), then count it: a scrape of /metrics never reports a
     * step that the store has not been handed. */
    if (o->writer) {
        mxp_obs_writer_add_step(o->writer, &row, &st, res->loss);
        mxp_status ss = mxp_obs_writer_take_error(o->writer, s == MXP_OK ? err : NULL);
        if (s == MXP_OK) s = ss;
    }
    mxp_metric_add(o->m_samples, (double)o->samples_per_step);
    mxp_metric_set(o->m_scale, (double)st.current_scale);
    mxp_metric_set(o->m_loss, res->loss);
    mxp_metric_set(o->m_grad_norm, res->grad_norm);
    mxp_metric_set(o->m_zero, res->zero_frac);
    mxp_metric_set(o->m_near, res->near_overflow_frac);
    mxp_metric_observe(o->m_duration, duration_s);
    mxp_metric_set(o->m_epoch, (double)epoch);
    double base = o->set.fp32_baseline_loss;
    if (base > 0 && isfinite(res->loss)) {
        /* EMA over ~100 steps: the per-batch loss is too noisy to compare. */
        o->ema_loss = isnan(o->ema_loss) ? res->loss : 0.99 * o->ema_loss + 0.01 * res->loss;
        mxp_metric_set(o->m_div, fabs(o->ema_loss - base) / base);
    }
    pthread_mutex_lock(&o->lock);
    /* the step counters change together with o->stats, under the lock the
     * JSON API reads them with: /metrics and /api/training/stats count
     * optimizer steps from one source (a rollback rewinds AdamW's t, not
     * the count of updates applied) */
    mxp_metric_add(o->m_steps, 1.0);
    mxp_metric_add(res->skipped ? o->m_overflow : o->m_opt_steps, 1.0);
    o->stats = st;
    o->step = st.training_steps;
    o->epoch = epoch;
    o->last_loss = res->loss;
    int64_t total = o->total_steps;
    const bool have_pos = o->run_step >= 0;
    push_row(o, &row);
    pthread_mutex_unlock(&o->lock);
    if (total > 0 && !have_pos)
        mxp_metric_set(o->m_progress, (double)st.training_steps / (double)total);
    return s;
}

static void copy_text(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src ? src : "");
}

mxp_status mxp_obs_event(mxp_obs *o, int64_t step, const char *kind, const char *severity,
                         const char *message, const char *detail_json, mxp_error *err) {
    if (!o || !kind || !*kind)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_event: NULL observer or kind");
    mxp_obs_event_rec ev = {0};
    json_t *detail = NULL;
    if (detail_json && *detail_json) {
        json_error_t je;
        detail = json_loads(detail_json, JSON_REJECT_DUPLICATES, &je);
        if (!detail || !json_is_object(detail)) {
            json_decref(detail);
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "event detail is not a JSON object: %.80s", detail_json);
        }
        if (strlen(detail_json) >= sizeof ev.detail) {
            json_decref(detail);
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "event detail longer than %zu bytes",
                                 sizeof ev.detail - 1);
        }
        copy_text(ev.detail, sizeof ev.detail, detail_json);
    }
    copy_text(ev.kind, sizeof ev.kind, kind);
    copy_text(ev.severity, sizeof ev.severity, severity ? severity : "info");
    copy_text(ev.message, sizeof ev.message, message);
    ev.timestamp = mxp_obs_unix_now();
    if (strcmp(kind, "guard") == 0) {
        const char *rule = detail ? json_string_value(json_object_get(detail, "rule")) : NULL;
        const char *vals[2] = {rule ? rule : "unknown", ev.severity};
        mxp_metric *m;
        if (mxp_metrics_series(o->reg, "mixprec_guard_events_total", vals, &m, NULL) == MXP_OK)
            mxp_metric_add(m, 1.0);
    } else if (strcmp(kind, "rollback") == 0) {
        mxp_metric_add(o->m_rollbacks, 1.0);
    }
    json_decref(detail);
    pthread_mutex_lock(&o->lock);
    ev.step = step >= 0 ? step : o->step;
    o->events[o->ev_total % MXP_OBS_EVENT_RING] = ev;
    o->ev_total++;
    pthread_mutex_unlock(&o->lock);
    /* Events are rare and matter: the writer commits them at once, with
     * the rows queued before them. */
    if (o->writer) mxp_obs_writer_add_event(o->writer, &ev);
    return MXP_OK;
}

mxp_status mxp_obs_precision_changed(mxp_obs *o, mxp_precision from, mxp_precision to,
                                     const char *reason, mxp_error *err) {
    if (!o || !o->begun)
        return mxp_error_set(err, MXP_ERR_STATE, "mxp_obs_precision_changed before run_begin");
    if ((unsigned)to >= MXP_PRECISION_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "precision %d", (int)to);
    if (to == o->cur_prec) return MXP_OK; /* already recorded (announced twice) */
    bool fallback = !reason || strcmp(reason, "fallback") == 0;
    update_precision_metrics(o, to);
    if (fallback) mxp_metric_add(o->m_fallbacks, 1.0);
    char msg[128], detail[160];
    snprintf(msg, sizeof msg, "precision %s -> %s (%s)", mxp_precision_name(from),
             mxp_precision_name(to), reason ? reason : "fallback");
    char why[24];
    snprintf(why, sizeof why, "%s", reason ? reason : "fallback");
    for (char *c = why; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_';
    snprintf(detail, sizeof detail, "{\"from\":\"%s\",\"to\":\"%s\",\"reason\":\"%s\"}",
             mxp_precision_name(from), mxp_precision_name(to), why);
    return mxp_obs_event(o, -1, fallback ? "fallback" : "precision_change",
                         fallback ? "warning" : "info", msg, detail, err);
}

mxp_status mxp_obs_request_precision(mxp_obs *o, mxp_precision p, mxp_error *err) {
    if (!o || (unsigned)p >= MXP_PRECISION_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_request_precision: bad argument");
    atomic_store(&o->req_prec, (int)p);
    return MXP_OK;
}

bool mxp_obs_take_precision_request(mxp_obs *o, mxp_precision *out) {
    if (!o) return false;
    int p = atomic_exchange(&o->req_prec, -1);
    if (p < 0) return false;
    if (out) *out = (mxp_precision)p;
    return true;
}

void mxp_obs_set_validation_loss(mxp_obs *o, double loss) {
    if (!o) return;
    mxp_metric_set(o->m_val_loss, loss);
    pthread_mutex_lock(&o->lock);
    o->val_loss = loss;
    const bool begun = o->begun;
    pthread_mutex_unlock(&o->lock);
    /* an event too, so the store keeps every validation (report plots them) */
    if (begun && isfinite(loss)) {
        char msg[64], detail[64];
        snprintf(msg, sizeof msg, "validation loss %.6g", loss);
        snprintf(detail, sizeof detail, "{\"loss\":%.17g}", loss);
        (void)mxp_obs_event(o, -1, "validation", "info", msg, detail, NULL);
    }
}

mxp_status mxp_obs_set_guard_state(mxp_obs *o, const char *json_object, mxp_error *err) {
    if (!o || !json_object)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_set_guard_state: NULL");
    if (strlen(json_object) >= MXP_OBS_GUARD_JSON_MAX)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "guard state longer than %d bytes",
                             MXP_OBS_GUARD_JSON_MAX - 1);
    json_error_t je;
    json_t *j = json_loads(json_object, JSON_REJECT_DUPLICATES, &je);
    bool ok = j && json_is_object(j);
    json_decref(j);
    if (!ok)
        return mxp_error_set(err, MXP_ERR_FORMAT, "guard state is not a JSON object: %.80s",
                             json_object);
    pthread_mutex_lock(&o->lock);
    snprintf(o->guard_json, sizeof o->guard_json, "%s", json_object);
    pthread_mutex_unlock(&o->lock);
    return MXP_OK;
}

mxp_status mxp_obs_run_end(mxp_obs *o, mxp_run_state state, const char *message,
                           mxp_error *err) {
    if (!o || (unsigned)state >= MXP_RUN_STATE_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_run_end: bad argument");
    double now = mxp_obs_unix_now();
    pthread_mutex_lock(&o->lock);
    o->state = state;
    o->ended = now;
    int64_t step = o->step;
    mxp_precision p = o->stats.precision;
    pthread_mutex_unlock(&o->lock);
    set_state_metrics(o, state);
    char detail[96];
    snprintf(detail, sizeof detail, "{\"state\":\"%s\",\"steps\":%lld}",
             mxp_run_state_name(state), (long long)step);
    mxp_status s = mxp_obs_event(o, step, "run_end", state == MXP_RUN_FAILED ? "error" : "info",
                                 message ? message : mxp_run_state_name(state), detail, err);
    if (s != MXP_OK || !o->store) return s;
    s = mxp_obs_writer_flush(o->writer, err);
    mxp_obs_writer_lock_io(o->writer);
    mxp_status s2 = mxp_obs_store_run_end(o->store, now, state, p, message,
                                          s == MXP_OK ? err : NULL);
    mxp_obs_writer_unlock_io(o->writer);
    return s == MXP_OK ? s2 : s;
}
