/* obs/run_observer.c: mxp_obs_run_observer (obs.h): an mxp_obs fed by an
 * mxp_run (run.h), so a library user gets the CLI's metrics, store, events
 * and HTTP control with one call. The step time is the wall time between
 * step callbacks (the first from the run's begin). */
#include <mixprec/obs.h>
#include <mixprec/run.h>

#include <math.h>
#include <stdio.h>

typedef struct run_obs {
    mxp_obs *o;
    double t_last;
    bool warned; /* a store error was logged once */
} run_obs;

static void ro_begin(void *self, mxp_run *run) {
    run_obs *g = self;
    mxp_run_info st;
    mxp_run_stats(run, &st);
    const mxp_config *c = mxp_run_config(run);
    int64_t per_step = c->batch_size * c->grad_accum_steps;
    int64_t spe = st.samples_per_epoch / mxp_run_provider(run)->rows_per_sample;
    char cfg_json[256];
    snprintf(cfg_json, sizeof cfg_json,
             "{\"workload\":\"%s\",\"precision\":\"%s\",\"epochs\":%lld,\"batch_size\":%lld,"
             "\"grad_accum_steps\":%lld,\"seed\":%llu}",
             st.workload, mxp_precision_name((mxp_precision)st.precision), (long long)c->epochs,
             (long long)c->batch_size, (long long)c->grad_accum_steps,
             (unsigned long long)c->seed);
    mxp_error err = {0};
    if (mxp_obs_run_begin(g->o, mxp_run_trainer(run), per_step ? spe / per_step * c->epochs : 0,
                          per_step, cfg_json, &err) != MXP_OK)
        mxp_log(MXP_LOG_WARN, "obs: %s", err.msg);
    g->t_last = mxp_time_now();
}

static void ro_step(void *self, mxp_run *run, const mxp_run_progress *p) {
    run_obs *g = self;
    const double now = mxp_time_now();
    mxp_error err = {0};
    if (mxp_obs_record_step(g->o, p->epoch, p->result, now - g->t_last, &err) != MXP_OK &&
        !g->warned) {
        mxp_log(MXP_LOG_WARN, "obs: %s (training goes on; further store errors not shown)",
                err.msg);
        g->warned = true;
    }
    g->t_last = now;
    mxp_precision req;
    if (mxp_obs_take_precision_request(g->o, &req))
        mxp_run_request_precision(run, req, "control API");
}

static void ro_precision(void *self, mxp_run *run, mxp_precision from, mxp_precision to,
                         const char *reason) {
    (void)run;
    run_obs *g = self;
    mxp_obs_precision_changed(g->o, from, to, reason ? reason : "operator", NULL);
    g->t_last = mxp_time_now(); /* the switch is not part of the next step */
}

static void ro_guard(void *self, mxp_run *run, const mxp_guard_event *ev) {
    (void)run;
    run_obs *g = self;
    if (ev->kind == MXP_EVENT_RULE)
        mxp_obs_event(g->o, ev->step, "guard", mxp_severity_name(ev->severity), ev->detail, NULL,
                      NULL);
    if (ev->from != ev->to && ev->kind != MXP_EVENT_OPERATOR)
        mxp_obs_precision_changed(g->o, ev->from, ev->to,
                                  ev->kind == MXP_EVENT_RETRY ? "retry" : "fallback", NULL);
    if (ev->rollback_to >= 0) {
        char detail[96];
        snprintf(detail, sizeof detail, "{\"from\":%lld,\"to\":%lld}", (long long)ev->step,
                 (long long)ev->rollback_to);
        mxp_obs_event(g->o, ev->step, "rollback", mxp_severity_name(ev->severity), ev->detail,
                      detail, NULL);
    }
}

static void ro_end(void *self, mxp_run *run, bool ok, bool stopped, const char *msg) {
    run_obs *g = self;
    mxp_run_eval ev;
    mxp_error err = {0};
    if (ok && mxp_run_evaluate(run, &ev, &err) == MXP_OK && isfinite(ev.loss))
        mxp_obs_set_validation_loss(g->o, ev.loss);
    const char *m = msg ? msg : stopped ? "stopped on request" : "training finished";
    if (mxp_obs_run_end(g->o, ok ? MXP_RUN_FINISHED : MXP_RUN_FAILED, m, &err) != MXP_OK)
        mxp_log(MXP_LOG_WARN, "obs: %s", err.msg);
}

/* A validation during training: the gauge and a "validation" event. */
static void ro_eval(void *self, mxp_run *run, const mxp_run_val_row *v) {
    (void)run;
    run_obs *g = self;
    mxp_obs_set_validation_loss(g->o, v->loss);
    g->t_last = mxp_time_now(); /* the validation is not part of the next step */
}

static void ro_destroy(void *self) { mxp_free(self); }

mxp_status mxp_obs_run_observer(mxp_obs *o, struct mxp_run_observer *out, mxp_error *err) {
    if (!o || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_run_observer: NULL");
    run_obs *g = mxp_calloc(1, sizeof *g);
    if (!g) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "run observer");
    g->o = o;
    *out = (mxp_run_observer){.self = g,
                              .begin = ro_begin,
                              .step = ro_step,
                              .precision_changed = ro_precision,
                              .guard_event = ro_guard,
                              .end = ro_end,
                              .destroy = ro_destroy,
                              .evaluated = ro_eval};
    return MXP_OK;
}
