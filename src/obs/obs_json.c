/* src/obs/obs_json.c: the JSON documents of the training API, built with
 * jansson from copies taken under the observer's lock (formatting happens
 * after the lock is released).
 *
 * Entry points: mxp_obs_status_json, mxp_obs_stats_json, mxp_obs_events_json,
 * mxp_obs_export_json (obs.h). Non-finite numbers are written as null
 * (JSON has no NaN/Inf).
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "obs/obs_internal.h"

#define EXPORT_LIMIT_MAX 10000

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *jtime(double unix_s) {
    if (!(unix_s > 0)) return json_null();
    char buf[40];
    mxp_obs_format_utc(unix_s, buf, sizeof buf);
    return json_string(buf);
}

static json_t *event_json(const mxp_obs_event_rec *e) {
    json_t *j = json_object();
    json_object_set_new(j, "step", json_integer(e->step));
    json_object_set_new(j, "timestamp", jtime(e->timestamp));
    json_object_set_new(j, "kind", json_string(e->kind));
    json_object_set_new(j, "severity", json_string(e->severity));
    json_object_set_new(j, "message", json_string(e->message));
    json_t *d = e->detail[0] ? json_loads(e->detail, 0, NULL) : NULL;
    json_object_set_new(j, "detail", d ? d : json_null());
    return j;
}

/* Serialise and release j into *out (mxp_free-able). */
static mxp_status dump(json_t *j, char **out, mxp_error *err) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!s) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "JSON document");
    *out = mxp_strdup(s);
    free(s);
    if (!*out) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "JSON document");
    return MXP_OK;
}

mxp_status mxp_obs_status_json(mxp_obs *o, char **out, mxp_error *err) {
    if (!o || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_status_json: NULL");
    pthread_mutex_lock(&o->lock);
    mxp_train_stats st = o->stats;
    bool begun = o->begun;
    mxp_run_state state = o->state;
    int64_t attempts = o->step, epoch = o->epoch, total = o->total_steps, nev = o->ev_total;
    int64_t step = o->run_step >= 0 ? o->run_step : attempts;
    double started = o->started, ended = o->ended, loss = o->last_loss;
    mxp_obs_event_rec last = {0};
    if (nev > 0) last = o->events[(nev - 1) % MXP_OBS_EVENT_RING];
    pthread_mutex_unlock(&o->lock);

    json_t *j = json_object();
    json_object_set_new(j, "run_id", json_string(o->run_id));
    json_object_set_new(j, "state", json_string(mxp_run_state_name(state)));
    json_object_set_new(j, "precision",
                        begun ? json_string(mxp_precision_name(st.precision)) : json_null());
    json_object_set_new(j, "fp16_enabled_runtime", json_boolean(begun && st.fp16_enabled_runtime));
    json_object_set_new(j, "step", json_integer(step));
    json_object_set_new(j, "total_steps", json_integer(total));
    json_object_set_new(j, "training_steps", json_integer(attempts));
    json_object_set_new(j, "samples_per_step", json_integer(o->samples_per_step));
    json_object_set_new(j, "epoch", json_integer(epoch));
    json_object_set_new(j, "progress", total > 0 ? json_real((double)step / (double)total)
                                                 : json_null());
    json_object_set_new(j, "loss", jnum(loss));
    json_object_set_new(j, "loss_scale", begun ? json_real(st.current_scale) : json_null());
    json_object_set_new(j, "started_at", jtime(started));
    json_object_set_new(j, "ended_at", jtime(ended));
    json_object_set_new(j, "last_event", nev > 0 ? event_json(&last) : json_null());
    return dump(j, out, err);
}

mxp_status mxp_obs_stats_json(mxp_obs *o, char **out, mxp_error *err) {
    if (!o || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_stats_json: NULL");
    pthread_mutex_lock(&o->lock);
    mxp_train_stats st = o->stats;
    /* the counters /metrics exports, read under the lock they change under */
    const double opt_applied = mxp_metric_value(o->m_opt_steps);
    bool begun = o->begun;
    double loss = o->last_loss, val = o->val_loss;
    char guard[MXP_OBS_GUARD_JSON_MAX];
    memcpy(guard, o->guard_json, sizeof guard);
    pthread_mutex_unlock(&o->lock);

    json_t *j = json_object();
    json_object_set_new(j, "run_id", json_string(o->run_id));
    json_object_set_new(j, "training_steps", json_integer(st.training_steps));
    json_object_set_new(j, "optimizer_steps", json_integer((json_int_t)opt_applied));
    /* AdamW's step count t: behind optimizer_steps after a rollback */
    json_object_set_new(j, "optimizer_state_step", json_integer(st.optimizer_steps));
    json_object_set_new(j, "skipped_steps", json_integer(st.skipped_steps));
    json_object_set_new(j, "overflow_rate", jnum(st.overflow_rate));
    json_object_set_new(j, "current_scale", begun ? jnum(st.current_scale) : json_null());
    json_object_set_new(j, "precision",
                        begun ? json_string(mxp_precision_name(st.precision)) : json_null());
    json_object_set_new(j, "fp16_enabled_runtime", json_boolean(begun && st.fp16_enabled_runtime));
    json_object_set_new(j, "epoch", json_integer(st.epoch));
    json_object_set_new(j, "loss", jnum(loss));
    json_object_set_new(j, "validation_loss", jnum(val));
    json_object_set_new(j, "fp32_divergence_ratio", jnum(mxp_metric_value(o->m_div)));
    json_object_set_new(j, "precision_fallbacks", json_integer((json_int_t)mxp_metric_value(
                                                      o->m_fallbacks)));
    json_object_set_new(j, "rollbacks",
                        json_integer((json_int_t)mxp_metric_value(o->m_rollbacks)));
    json_t *g = json_loads(guard, 0, NULL);
    json_object_set_new(j, "guard", g ? g : json_null());
    return dump(j, out, err);
}

mxp_status mxp_obs_events_json(mxp_obs *o, int64_t limit, char **out, mxp_error *err) {
    if (!o || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_events_json: NULL");
    if (limit < 1 || limit > MXP_OBS_EVENT_RING)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "limit=%lld; accepted: 1..%d",
                             (long long)limit, MXP_OBS_EVENT_RING);
    mxp_obs_event_rec *copy = mxp_calloc((size_t)limit, sizeof *copy);
    if (!copy) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "events");
    pthread_mutex_lock(&o->lock);
    int64_t total = o->ev_total;
    int64_t first = total > limit ? total - limit : 0;
    for (int64_t i = first; i < total; i++)
        copy[i - first] = o->events[i % MXP_OBS_EVENT_RING];
    pthread_mutex_unlock(&o->lock);
    json_t *j = json_object();
    json_t *arr = json_array();
    for (int64_t i = first; i < total; i++) json_array_append_new(arr, event_json(&copy[i - first]));
    mxp_free(copy);
    json_object_set_new(j, "run_id", json_string(o->run_id));
    json_object_set_new(j, "total", json_integer(total));
    json_object_set_new(j, "events", arr);
    return dump(j, out, err);
}

mxp_status mxp_obs_export_json(mxp_obs *o, int64_t offset, int64_t limit, char **out,
                               mxp_error *err) {
    if (!o || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_export_json: NULL");
    if (offset < 0 || limit < 1 || limit > EXPORT_LIMIT_MAX)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "offset=%lld limit=%lld; accepted: offset >= 0, limit 1..%d",
                             (long long)offset, (long long)limit, EXPORT_LIMIT_MAX);
    mxp_obs_step_row *rows = mxp_calloc((size_t)limit, sizeof *rows);
    if (!rows) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "export rows");
    pthread_mutex_lock(&o->lock);
    int64_t total = o->hist_total;
    int64_t first = total > (int64_t)o->hist_cap ? total - (int64_t)o->hist_cap : 0;
    int64_t from = offset > first ? offset : first;
    int64_t to = from + limit < total ? from + limit : total;
    int64_t n = to > from ? to - from : 0;
    for (int64_t i = 0; i < n; i++) rows[i] = o->hist[(size_t)(from + i) % o->hist_cap];
    pthread_mutex_unlock(&o->lock);

    json_t *j = json_object();
    json_object_set_new(j, "run_id", json_string(o->run_id));
    json_object_set_new(j, "total", json_integer(total));
    json_object_set_new(j, "first_offset", json_integer(first));
    json_object_set_new(j, "offset", json_integer(from < total ? from : total));
    json_object_set_new(j, "limit", json_integer(limit));
    json_object_set_new(j, "next_offset", to < total ? json_integer(to) : json_null());
    json_t *arr = json_array();
    for (int64_t i = 0; i < n; i++) {
        const mxp_obs_step_row *r = &rows[i];
        json_t *row = json_object();
        json_object_set_new(row, "step", json_integer(r->step));
        json_object_set_new(row, "epoch", json_integer(r->epoch));
        json_object_set_new(row, "timestamp", json_real(r->timestamp));
        json_object_set_new(row, "loss", jnum(r->loss));
        json_object_set_new(row, "scale", jnum(r->scale));
        json_object_set_new(row, "grad_norm", jnum(r->grad_norm));
        json_object_set_new(row, "zero_fraction", jnum(r->zero_fraction));
        json_object_set_new(row, "near_overflow_fraction", jnum(r->near_overflow_fraction));
        json_object_set_new(row, "duration_s", jnum(r->duration_s));
        json_object_set_new(row, "overflow", json_boolean(r->overflow));
        json_object_set_new(row, "precision", json_string(mxp_precision_name(r->precision)));
        json_object_set_new(row, "lr", jnum(r->lr));
        json_array_append_new(arr, row);
    }
    mxp_free(rows);
    json_object_set_new(j, "rows", arr);
    return dump(j, out, err);
}
