/* tools/mixprec/obs_glue.c: observability of `mixprec train`.
 *
 * Creates the run's observer (mixprec/obs.h) with its SQLite run store and
 * JSONL event log in output.dir, starts the HTTP server for --serve or
 * obs.http.enabled, records every step from the progress callback (the
 * step time is the wall time between callbacks), and hands operator
 * precision requests from POST /api/training/precision to the run
 * (mxp_run_request_precision: the run's one switch point). Also the JSON log sink of
 * --log-format json and the runbook's start line "fp16_enabled: True|False".
 * With the numerical-safety guard on, its events become observer events
 * (rule firings count in mixprec_guard_events_total, rollbacks in
 * mixprec_rollbacks_total, precision moves as fallbacks or operator
 * switches) and its status JSON is the guard state of /api/training/stats.
 *
 * Entry points: obs_glue_* (obs_glue.h).
 */
#include "obs_glue.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct obs_glue {
    mxp_obs *o;
    mxp_run *run;
    mxp_trainer *tr;
    int64_t per_step; /* samples per optimizer step (this process) */
    double t_last;
    int64_t total_steps;
    bool json_logs;
    int64_t next_log_step;
    bool store_warned;
    double linger_s;
    mxp_guard *guard;     /* NULL when the guard is off */
    int64_t guard_refresh; /* steps until the guard state is refreshed */
    bool api_switched;     /* the glue switched precision; the guard will report it */
    bool canary_divergence; /* mixprec_fp32_divergence_ratio from the guard's canary */
};

#define GUARD_REFRESH_STEPS 100

static bool g_serve;
static int g_log_json = -1; /* -1: not given on the command line */

int obs_glue_take_arg(int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--serve") == 0) {
        g_serve = true;
        return 1;
    }
    if (strcmp(a, "--log-format") == 0) {
        if (*i + 1 >= argc) {
            cli_error("--log-format needs a value; accepted: text, json");
            return -1;
        }
        const char *v = argv[++*i];
        if (strcmp(v, "json") == 0)
            g_log_json = 1;
        else if (strcmp(v, "text") == 0)
            g_log_json = 0;
        else {
            cli_error("--log-format '%s'; accepted: text, json", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

/* One JSON object per line on stderr: {"ts","level","msg"}. */
static void log_json(void *user, mxp_log_level level, const char *msg) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[2048];
    size_t n = (size_t)snprintf(line, sizeof line,
                                "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\","
                                "\"msg\":\"",
                                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                                tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
                                mxp_log_level_name(level));
    for (const unsigned char *p = (const unsigned char *)msg; *p && n + 8 < sizeof line; p++) {
        if (*p == '"' || *p == '\\')
            n += (size_t)snprintf(line + n, sizeof line - n, "\\%c", *p);
        else if (*p < 0x20)
            n += (size_t)snprintf(line + n, sizeof line - n, "\\u%04x", *p);
        else
            line[n++] = (char)*p;
    }
    snprintf(line + n, sizeof line - n, "\"}\n");
    fputs(line, stderr);
}

void obs_glue_install_logger(void) {
    if (g_log_json == 1) mxp_log_set_callback(log_json, NULL);
    cli_errors_to_log(g_log_json == 1); /* error lines are JSON lines too */
}

bool obs_glue_apply_config(mxp_config *cfg) {
    if (g_serve) cfg->obs.http_enabled = true;
    bool json = g_log_json >= 0 ? g_log_json == 1 : cfg->log_format == MXP_LOG_FORMAT_JSON;
    if (json) mxp_log_set_callback(log_json, NULL);
    cli_errors_to_log(json);
    return json;
}

static void refresh_guard_state(obs_glue *g) {
    char js[8192];
    if (g->guard && mxp_guard_status_json(g->guard, js, sizeof js) > 0)
        mxp_obs_set_guard_state(g->o, js, NULL);
    if (g->guard && g->canary_divergence) {
        /* the FP32 canary is the seeds' "loss divergence vs FP32 baseline" */
        mxp_guard_status gs;
        mxp_guard_get_status(g->guard, &gs);
        if (isfinite(gs.canary_divergence))
            mxp_metrics_set(mxp_obs_metrics(g->o), "mixprec_fp32_divergence_ratio", NULL,
                            gs.canary_divergence, NULL);
    }
    g->guard_refresh = GUARD_REFRESH_STEPS;
}

/* JSON number or null (non-finite). */
static void json_num(char *buf, size_t n, double v) {
    if (isfinite(v))
        snprintf(buf, n, "%.9g", v);
    else
        snprintf(buf, n, "null");
}

/* Guard event -> observer event (training thread, inside the step). A rule
 * firing becomes a "guard" event (severity P0/P1/P2) whose detail carries
 * the rule, its value, threshold and window, the configured action and the
 * action taken, the precision before and after, the restored step and the
 * provenance of the first non-finite value: what /api/training/events, the
 * JSONL event log and the SQLite events table show. */
static void on_guard_event(void *user, const mxp_guard_event *ev) {
    obs_glue *g = user;
    char detail[1024], msg[512], act[64], cfg_act[64];
    mxp_guard_action_text(ev->taken, act, sizeof act);
    mxp_guard_action_text(ev->action, cfg_act, sizeof cfg_act);
    snprintf(msg, sizeof msg, "%s", ev->detail);
    if (ev->kind == MXP_EVENT_RULE) {
        char val[32], thr[32], site[160] = "null";
        json_num(val, sizeof val, ev->value);
        json_num(thr, sizeof thr, ev->threshold);
        if (ev->site.found)
            snprintf(site, sizeof site,
                     "{\"pass\":\"%s\",\"layer\":%d,\"op\":\"%s\",\"count\":%lld}",
                     ev->site.backward ? "backward" : "forward", ev->site.layer,
                     ev->site.op ? ev->site.op : "", (long long)ev->site.count);
        snprintf(detail, sizeof detail,
                 "{\"rule\":\"%s\",\"severity\":\"%s\",\"value\":%s,\"threshold\":%s,"
                 "\"window\":%lld,\"action\":\"%s\",\"configured_action\":\"%s\","
                 "\"precision_from\":\"%s\",\"precision_to\":\"%s\",\"rollback_to\":%lld,"
                 "\"site\":%s}",
                 mxp_guard_rule_name(ev->rule), mxp_severity_name(ev->severity), val, thr,
                 (long long)ev->window, act, cfg_act, mxp_precision_name(ev->from),
                 mxp_precision_name(ev->to), (long long)ev->rollback_to, site);
        mxp_error e = {0};
        if (mxp_obs_event(g->o, ev->step, "guard", mxp_severity_name(ev->severity), msg, detail,
                          &e) != MXP_OK)
            mxp_log(MXP_LOG_WARN, "obs: guard event not recorded: %s", e.msg);
    }
    if (ev->kind == MXP_EVENT_OPERATOR && ev->from != ev->to) {
        if (g->api_switched) {
            g->api_switched = false; /* our own switch, logged when made */
        } else {                     /* SIGUSR1 through the guard */
            if (ev->to == MXP_PRECISION_FP32)
                mxp_log(MXP_LOG_WARN, "FP16 training disabled - using FP32");
            mxp_train_stats st;
            mxp_trainer_stats(g->tr, &st);
            mxp_log(MXP_LOG_INFO, "fp16_enabled: %s", st.fp16_enabled_runtime ? "True" : "False");
        }
    }
    if (ev->from != ev->to)
        mxp_obs_precision_changed(g->o, ev->from, ev->to,
                                  ev->kind == MXP_EVENT_OPERATOR ? "operator"
                                  : ev->kind == MXP_EVENT_RETRY  ? "retry"
                                                                 : "fallback",
                                  NULL);
    if (ev->rollback_to >= 0) {
        snprintf(detail, sizeof detail, "{\"from\":%lld,\"to\":%lld}", (long long)ev->step,
                 (long long)ev->rollback_to);
        mxp_obs_event(g->o, ev->step, "rollback", mxp_severity_name(ev->severity), msg, detail,
                      NULL);
    }
    refresh_guard_state(g);
}

int obs_glue_open(const mxp_config *cfg, const obs_glue_run *run, obs_glue **out) {
    *out = NULL;
    mxp_error err = {0};
    mxp_trainer *tr = run->trainer;
    obs_glue *g = mxp_calloc(1, sizeof *g);
    if (!g) {
        cli_error("out of memory");
        return CLI_EXIT_FAIL;
    }
    g->tr = tr;
    g->run = run->run;
    g->json_logs = g_log_json >= 0 ? g_log_json == 1 : cfg->log_format == MXP_LOG_FORMAT_JSON;
    g->linger_s = cfg->obs.http_enabled ? cfg->obs.http_linger_s : 0;
    if (cfg->obs.store_enabled) {
        int e = cli_mkdirs(cfg->output_dir);
        if (e != 0) {
            cli_error("cannot create output.dir '%s': %s", cfg->output_dir, strerror(e));
            mxp_free(g);
            return CLI_EXIT_IO;
        }
    }
    if (mxp_obs_create(&cfg->obs, cfg->output_dir, NULL, &g->o, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        mxp_free(g);
        return err.status == MXP_ERR_CONFIG ? CLI_EXIT_USAGE : CLI_EXIT_IO;
    }
    int64_t per_step = cfg->batch_size * cfg->grad_accum_steps;
    g->per_step = per_step;
    int64_t spe = run->samples_per_epoch;
    g->total_steps = per_step > 0 ? spe / per_step * cfg->epochs : 0;
    char config_json[512];
    snprintf(config_json, sizeof config_json,
             "{\"precision\":\"%s\",\"kill_switch\":%s,\"epochs\":%lld,\"batch_size\":%lld,"
             "\"grad_accum_steps\":%lld,\"seed\":%llu,\"hidden\":%lld,\"depth\":%lld}",
             mxp_precision_name(cfg->precision), cfg->kill_switch ? "true" : "false",
             (long long)cfg->epochs, (long long)cfg->batch_size,
             (long long)cfg->grad_accum_steps, (unsigned long long)cfg->seed,
             (long long)cfg->hidden, (long long)cfg->depth);
    /* serve before the run begins: a port in use is a usage error with
     * the way out, and no failed run is recorded for a run that never ran */
    if (cfg->obs.http_enabled) {
        if (mxp_obs_serve(g->o, &err) != MXP_OK) {
            cli_error("%s; accepted: a free port, or obs.http.port=0 for any free port",
                      err.msg);
            mxp_obs_destroy(g->o);
            mxp_free(g);
            return CLI_EXIT_USAGE;
        }
        const char *addr = cfg->obs.http_address;
        bool v6 = strchr(addr, ':') != NULL;
        mxp_log(MXP_LOG_INFO, "obs: serving http://%s%s%s:%d/ (metrics at /metrics)",
                v6 ? "[" : "", addr, v6 ? "]" : "", mxp_obs_port(g->o));
    }
    if (mxp_obs_run_begin(g->o, tr, g->total_steps, per_step, config_json, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        mxp_obs_destroy(g->o);
        mxp_free(g);
        return CLI_EXIT_IO;
    }
    g->guard = run->guard;
    g->canary_divergence = !(cfg->obs.fp32_baseline_loss > 0);
    if (g->guard) {
        mxp_guard_set_event_callback(g->guard, on_guard_event, g);
        refresh_guard_state(g);
    } else {
        mxp_obs_set_guard_state(g->o, "{\"enabled\":false}", NULL);
    }
    mxp_train_stats st;
    mxp_trainer_stats(tr, &st);
    /* The runbook greps for these words verbatim. */
    mxp_log(MXP_LOG_INFO, "fp16_enabled: %s", st.fp16_enabled_runtime ? "True" : "False");
    mxp_log(MXP_LOG_INFO, "obs: run %s, store %s", mxp_obs_run_id(g->o),
            cfg->obs.store_enabled ? cfg->output_dir : "off");
    g->t_last = mxp_time_now();
    *out = g;
    return CLI_EXIT_OK;
}

void obs_glue_on_precision(void *self, mxp_run *run, mxp_precision from, mxp_precision to,
                           const char *reason) {
    (void)run;
    (void)reason;
    obs_glue *g = ((obs_glue_progress *)self)->obs;
    if (!g) return;
    mxp_obs_precision_changed(g->o, from, to, "operator", NULL);
    g->api_switched = g->guard != NULL; /* the guard reports it too: not twice */
    mxp_train_stats st;
    mxp_trainer_stats(g->tr, &st);
    mxp_log(MXP_LOG_INFO, "fp16_enabled: %s", st.fp16_enabled_runtime ? "True" : "False");
    g->t_last = mxp_time_now(); /* the switch is not part of the next step */
}

void obs_glue_on_eval(void *self, mxp_run *run, const mxp_run_val_row *v) {
    (void)run;
    obs_glue_progress *ps = self;
    ps->base.val_loss = v->loss;
    if (ps->obs) mxp_obs_set_validation_loss(ps->obs->o, v->loss);
}

void obs_glue_step(obs_glue *g, const mxp_progress *p) {
    if (!g) return;
    double now = mxp_time_now();
    double dur = now - g->t_last;
    g->t_last = now;
    if (p->total_steps > 0 && p->total_steps != g->total_steps) {
        g->total_steps = p->total_steps;
        mxp_obs_set_total_steps(g->o, p->total_steps);
    }
    mxp_obs_set_run_step(g->o, p->step); /* the header's "step N / total" */
    mxp_error err = {0};
    if (mxp_obs_record_step(g->o, p->epoch, p->result, dur, &err) != MXP_OK && !g->store_warned) {
        mxp_log(MXP_LOG_WARN, "obs: %s (training goes on; further store errors not shown)",
                err.msg);
        g->store_warned = true;
    }
    if (g->json_logs && (p->step >= g->next_log_step || p->step == p->total_steps)) {
        mxp_log(MXP_LOG_INFO, "step %lld/%lld epoch %lld loss %.6g scale %g grad_norm %.4g%s",
                (long long)p->step, (long long)p->total_steps, (long long)p->epoch + 1,
                p->result->loss, (double)p->result->scale, p->result->grad_norm,
                p->result->skipped ? " SKIPPED" : "");
        int64_t every = p->total_steps / 10 > 0 ? p->total_steps / 10 : 1;
        g->next_log_step = p->step + every;
    }
    if (g->guard && --g->guard_refresh <= 0) refresh_guard_state(g);
    mxp_precision req;
    if (mxp_obs_take_precision_request(g->o, &req) && g->run)
        mxp_run_request_precision(g->run, req, "control API");
}

void obs_glue_on_progress(void *user, const mxp_progress *p) {
    obs_glue_progress *ps = user;
    if (ps->obs && !ps->base.tr) { /* lr, precision and samples/s on the bar */
        ps->base.tr = ps->obs->tr;
        ps->base.samples_per_step = ps->obs->per_step;
    }
    obs_glue_step(ps->obs, p);
    cli_progress_update(&ps->base, p);
}

void obs_glue_close(obs_glue *g, bool ok, bool stopped, const char *msg, double val_loss) {
    if (!g) return;
    mxp_error err = {0};
    if (g->guard) {
        refresh_guard_state(g);
        mxp_guard_set_event_callback(g->guard, NULL, NULL);
    }
    if (!isnan(val_loss)) mxp_obs_set_validation_loss(g->o, val_loss);
    stopped = ok && stopped;
    const char *m = msg ? msg : stopped ? "stopped on request" : "training finished";
    if (mxp_obs_run_end(g->o, ok ? MXP_RUN_FINISHED : MXP_RUN_FAILED, m, &err) != MXP_OK)
        mxp_log(MXP_LOG_WARN, "obs: %s", err.msg);
    if (g->linger_s > 0 && mxp_obs_port(g->o) > 0) {
        mxp_log(MXP_LOG_INFO, "obs: run ended; serving %g s more", g->linger_s);
        struct timespec ts = {(time_t)g->linger_s,
                              (long)((g->linger_s - (double)(time_t)g->linger_s) * 1e9)};
        nanosleep(&ts, NULL); /* a signal ends the linger early */
    }
    mxp_obs_destroy(g->o);
    mxp_free(g);
}
