/* tests/test_obs.c: the metrics registry, its Prometheus exposition, the
 * training observer and the run store reader.
 *
 * - exposition text of a small registry equals hand-written text from the
 *   format spec (HELP/TYPE lines, label and help escaping, cumulative
 *   histogram buckets with le="+Inf", _sum and _count);
 * - registration rules (names, labels, buckets, re-registration);
 * - a writer thread updating while a reader thread renders: every render
 *   has a non-decreasing counter and _count equal to the +Inf bucket;
 * - the observer over a real tiny trainer with injected overflows: metric
 *   values equal the trainer's own stats, history paging, the ring bound,
 *   precision requests, fallback detection, guard-event counting;
 * - the store reader returns the rows written (values from the trainer);
 * - the store writer's durability bound (issue 15, item 5): with the
 *   store's I/O held (a disk that does not answer), a producer thread can
 *   queue exactly flush_steps rows and then waits; released, every row is
 *   committed. Without back-pressure the producer ran on unbounded.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs_internal.h"
#include "testutil.h"

static bool quick(void) { return getenv("MIXPREC_TEST_QUICK") != NULL; }

static void test_exposition(void) {
    mxp_metrics *r = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_metrics_create(&r, &err), &err);
    const double b[] = {1, 2, 5};
    CHECK_OK(mxp_metrics_register(r, MXP_METRIC_COUNTER, "t_requests_total",
                                  "Requests \\ served\nsecond line", "code,path", NULL, 0, &err),
             &err);
    CHECK_OK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "t_temperature", "A gauge.", NULL, NULL,
                                  0, &err), &err);
    CHECK_OK(mxp_metrics_register(r, MXP_METRIC_HISTOGRAM, "t_latency_seconds", "Latency.",
                                  NULL, b, 3, &err), &err);
    CHECK_OK(mxp_metrics_inc(r, "t_requests_total", "code=200,path=/a", 3, &err), &err);
    CHECK_OK(mxp_metrics_inc(r, "t_requests_total", "path=/b\"q\\\n,code=500", 1, &err), &err);
    CHECK_OK(mxp_metrics_inc(r, "t_requests_total", "code=200,path=/a", 0.5, &err), &err);
    CHECK_OK(mxp_metrics_set(r, "t_temperature", NULL, -0.1, &err), &err);
    const double obs[] = {0.5, 1, 2, 100};
    for (int i = 0; i < 4; i++)
        CHECK_OK(mxp_metrics_observe(r, "t_latency_seconds", "", obs[i], &err), &err);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(mxp_metrics_render(r, &text, &len, &err), &err);
    const char *want =
        "# HELP t_requests_total Requests \\\\ served\\nsecond line\n"
        "# TYPE t_requests_total counter\n"
        "t_requests_total{code=\"200\",path=\"/a\"} 3.5\n"
        "t_requests_total{code=\"500\",path=\"/b\\\"q\\\\\\n\"} 1\n"
        "# HELP t_temperature A gauge.\n"
        "# TYPE t_temperature gauge\n"
        "t_temperature -0.1\n"
        "# HELP t_latency_seconds Latency.\n"
        "# TYPE t_latency_seconds histogram\n"
        "t_latency_seconds_bucket{le=\"1\"} 2\n"
        "t_latency_seconds_bucket{le=\"2\"} 3\n"
        "t_latency_seconds_bucket{le=\"5\"} 3\n"
        "t_latency_seconds_bucket{le=\"+Inf\"} 4\n"
        "t_latency_seconds_sum 103.5\n"
        "t_latency_seconds_count 4\n";
    CHECK_MSG(text && strcmp(text, want) == 0, "exposition:\n%s\nwanted:\n%s", text, want);
    CHECK(text && len == strlen(text));
    mxp_free(text);

    /* non-finite gauge values use the Go spelling */
    CHECK_OK(mxp_metrics_set(r, "t_temperature", NULL, INFINITY, &err), &err);
    CHECK_OK(mxp_metrics_render(r, &text, &len, &err), &err);
    CHECK(text && strstr(text, "\nt_temperature +Inf\n") != NULL);
    mxp_free(text);
    CHECK_OK(mxp_metrics_set(r, "t_temperature", NULL, NAN, &err), &err);
    CHECK_OK(mxp_metrics_render(r, &text, &len, &err), &err);
    CHECK(text && strstr(text, "\nt_temperature NaN\n") != NULL);
    mxp_free(text);

    /* counters refuse to go down; set() on a counter is ignored */
    double v = 0;
    CHECK_OK(mxp_metrics_inc(r, "t_requests_total", "code=200,path=/a", -5, &err), &err);
    CHECK_OK(mxp_metrics_set(r, "t_requests_total", "code=200,path=/a", 0, &err), &err);
    CHECK_OK(mxp_metrics_get(r, "t_requests_total", "code=200,path=/a", &v, &err), &err);
    CHECK(v == 3.5);
    mxp_metric *h = NULL;
    CHECK_OK(mxp_metrics_series(r, "t_latency_seconds", NULL, &h, &err), &err);
    CHECK(mxp_metric_count(h) == 4 && mxp_metric_value(h) == 103.5);
    mxp_metrics_destroy(r);
}

static void test_registration_rules(void) {
    mxp_metrics *r = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_metrics_create(&r, &err), &err);
    const double good[] = {0.1, 1};
    const double bad[] = {1, 1};
    CHECK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "1bad", "", NULL, NULL, 0, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "bad-name", "", NULL, NULL, 0, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "ok", "", "__x", NULL, 0, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "ok", "", "a,a", NULL, 0, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_register(r, MXP_METRIC_HISTOGRAM, "h", "", "le", good, 2, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_register(r, MXP_METRIC_HISTOGRAM, "h", "", NULL, bad, 2, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "g", "", NULL, good, 2, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK_OK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "ns:ok", "", "a,b", NULL, 0, &err), &err);
    CHECK_OK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "ns:ok", "", "a,b", NULL, 0, &err), &err);
    CHECK(mxp_metrics_register(r, MXP_METRIC_COUNTER, "ns:ok", "", "a,b", NULL, 0, &err) ==
          MXP_ERR_STATE);
    CHECK(mxp_metrics_register(r, MXP_METRIC_GAUGE, "ns:ok", "", "a", NULL, 0, &err) ==
          MXP_ERR_STATE);
    /* label text errors */
    CHECK(mxp_metrics_set(r, "ns:ok", "a=1", 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_set(r, "ns:ok", "a=1,c=2", 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_set(r, "ns:ok", "a=1,a=2", 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_set(r, "ns:ok", "a1,b=2", 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_metrics_set(r, "missing", NULL, 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK_OK(mxp_metrics_set(r, "ns:ok", "b=2,a=1", 7, &err), &err);
    double v = 0;
    CHECK_OK(mxp_metrics_get(r, "ns:ok", "a=1,b=2", &v, &err), &err);
    CHECK(v == 7);
    /* the series cap */
    mxp_status last = MXP_OK;
    for (int i = 0; i < MXP_METRICS_MAX_SERIES + 2; i++) {
        char lbl[32];
        snprintf(lbl, sizeof lbl, "a=%d,b=x", i);
        last = mxp_metrics_set(r, "ns:ok", lbl, i, &err);
    }
    CHECK(last == MXP_ERR_STATE);
    /* the training set registers, and again is a no-op */
    CHECK_OK(mxp_metrics_register_training(r, &err), &err);
    CHECK_OK(mxp_metrics_register_training(r, &err), &err);
    mxp_metrics_destroy(r);
}

/* ---- writer and reader threads ------------------------------------------- */

typedef struct race {
    mxp_metrics *r;
    mxp_metric *c, *h;
    int64_t n;
    atomic_bool done;
    int renders, bad;
} race;

static void *writer(void *arg) {
    race *x = arg;
    for (int64_t i = 0; i < x->n; i++) {
        mxp_metric_add(x->c, 1.0);
        mxp_metric_observe(x->h, (double)(i % 7));
    }
    atomic_store(&x->done, true);
    return NULL;
}

/* Value of the first line starting with `prefix ` in text. */
static double sample(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
    return NAN;
}

static void *reader(void *arg) {
    race *x = arg;
    double last = 0;
    while (!atomic_load(&x->done) || x->renders == 0) {
        char *t = NULL;
        size_t len;
        if (mxp_metrics_render(x->r, &t, &len, NULL) != MXP_OK) {
            x->bad++;
            break;
        }
        double c = sample(t, "race_total");
        double inf = sample(t, "race_seconds_bucket{le=\"+Inf\"}");
        double cnt = sample(t, "race_seconds_count");
        if (!(c >= last) || inf != cnt) x->bad++;
        last = c;
        x->renders++;
        mxp_free(t);
    }
    return NULL;
}

static void test_threads(void) {
    race x = {0};
    mxp_error err = {0};
    const double b[] = {1, 3, 5};
    CHECK_OK(mxp_metrics_create(&x.r, &err), &err);
    CHECK_OK(mxp_metrics_register(x.r, MXP_METRIC_COUNTER, "race_total", "", NULL, NULL, 0, &err),
             &err);
    CHECK_OK(mxp_metrics_register(x.r, MXP_METRIC_HISTOGRAM, "race_seconds", "", NULL, b, 3,
                                  &err), &err);
    CHECK_OK(mxp_metrics_series(x.r, "race_total", NULL, &x.c, &err), &err);
    CHECK_OK(mxp_metrics_series(x.r, "race_seconds", NULL, &x.h, &err), &err);
    x.n = quick() ? 100000 : 1000000;
    atomic_init(&x.done, false);
    pthread_t tw, tr;
    pthread_create(&tr, NULL, reader, &x);
    pthread_create(&tw, NULL, writer, &x);
    pthread_join(tw, NULL);
    pthread_join(tr, NULL);
    CHECK(x.bad == 0);
    CHECK(x.renders > 0);
    CHECK(mxp_metric_value(x.c) == (double)x.n);
    CHECK(mxp_metric_count(x.h) == (uint64_t)x.n);
    /* sum of i % 7 over i < n */
    double want = 0;
    for (int64_t i = 0; i < x.n; i++) want += (double)(i % 7);
    CHECK(mxp_metric_value(x.h) == want);
    mxp_metrics_destroy(x.r);
}

static void test_token_compare(void) {
    const char *t = "correct-horse-battery";
    size_t n = strlen(t);
    CHECK(mxp_obs_token_equal(t, n, t, n));
    CHECK(!mxp_obs_token_equal("correct-horse-batterz", n, t, n));
    CHECK(!mxp_obs_token_equal("xorrect-horse-battery", n, t, n));
    CHECK(!mxp_obs_token_equal(t, n - 1, t, n));
    CHECK(!mxp_obs_token_equal("", 0, t, n));
    CHECK(!mxp_obs_token_equal("correct-horse-battery!", n + 1, t, n));
}

/* ---- the observer over a real trainer ------------------------------------ */

typedef struct fixture {
    mxp_model *m;
    mxp_trainer *t;
    float x[8 * 4], y[8 * 2];
    mxp_batch b;
} fixture;

static void inject_inf(void *user, int64_t step, float *g, size_t n) {
    const int64_t *every = user;
    if (step % *every == 0) g[n / 2] = INFINITY;
}

static void fixture_init(fixture *f, mxp_precision p) {
    mxp_error err = {0};
    mxp_model_spec spec = mxp_model_spec_mlp(4, 8, 1, 2, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 8);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    CHECK_OK(mxp_model_create(&spec, &pol, 7, &f->m, &err), &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    CHECK_OK(mxp_trainer_create(f->m, &tc, &f->t, &err), &err);
    mxp_rng r;
    mxp_rng_init(&r, 3);
    for (int i = 0; i < 32; i++) f->x[i] = mxp_rng_normal(&r);
    for (int i = 0; i < 16; i++) f->y[i] = mxp_rng_normal(&r);
    f->b = (mxp_batch){.x = f->x, .y = f->y, .labels = NULL, .B = 8};
}

static void fixture_free(fixture *f) {
    mxp_trainer_destroy(f->t);
    mxp_model_destroy(f->m);
}

static mxp_obs_settings settings(void) {
    mxp_obs_settings s = {0};
    snprintf(s.http_address, sizeof s.http_address, "127.0.0.1");
    snprintf(s.token_file, sizeof s.token_file, "none");
    snprintf(s.store_db, sizeof s.store_db, "metrics.db");
    snprintf(s.store_events, sizeof s.store_events, "events.jsonl");
    s.http_max_connections = 8;
    s.http_timeout_s = 2;
    s.flush_steps = 7;
    s.flush_seconds = 100;
    s.history_max = 1000;
    return s;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static double metric(mxp_obs *o, const char *name, const char *labels) {
    double v = NAN;
    mxp_error err = {0};
    CHECK_OK(mxp_metrics_get(mxp_obs_metrics(o), name, labels, &v, &err), &err);
    return v;
}

typedef struct readback {
    int64_t n, overflow, last_step;
    bool ordered;
    double loss_sum;
    int events, guard_events;
} readback;

static void rb_step(void *user, const mxp_obs_step_row *r) {
    readback *rb = user;
    rb->ordered &= r->step == rb->last_step + 1;
    rb->last_step = r->step;
    rb->n++;
    rb->overflow += r->overflow;
    if (isfinite(r->loss)) rb->loss_sum += r->loss;
}

static void rb_event(void *user, const mxp_obs_event_row *e) {
    readback *rb = user;
    rb->events++;
    rb->guard_events += strcmp(e->kind, "guard") == 0;
}

static void test_observer(const char *dir) {
    fixture f;
    fixture_init(&f, MXP_PRECISION_MIXED_FP16);
    int64_t every = 5;
    mxp_trainer_set_grad_hook(f.t, inject_inf, &every);
    mxp_obs_settings s = settings();
    s.store_enabled = true;
    mxp_obs *o = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_obs_create(&s, dir, "test-run", &o, &err), &err);
    CHECK(strcmp(mxp_obs_run_id(o), "test-run") == 0);
    mxp_step_result res;
    CHECK(mxp_obs_record_step(o, 0, &res, 0.001, &err) == MXP_ERR_STATE);
    CHECK_OK(mxp_obs_run_begin(o, f.t, 40, 8, "{\"k\":1}", &err), &err);
    const int N = 40;
    double loss_sum = 0;
    for (int i = 0; i < N; i++) {
        CHECK_OK(mxp_trainer_step(f.t, &f.b, 1, &res, &err), &err);
        if (!res.skipped) loss_sum += res.loss;
        CHECK_OK(mxp_obs_record_step(o, 0, &res, 0.002 * (i % 3 + 1), &err), &err);
    }
    mxp_train_stats st;
    mxp_trainer_stats(f.t, &st);
    CHECK(st.skipped_steps == N / every);
    CHECK(metric(o, "mixprec_training_steps_total", NULL) == (double)st.training_steps);
    CHECK(metric(o, "mixprec_optimizer_steps_total", NULL) == (double)st.optimizer_steps);
    CHECK(metric(o, "mixprec_overflow_steps_total", NULL) == (double)st.skipped_steps);
    CHECK(metric(o, "mixprec_samples_total", NULL) == 8.0 * N);
    CHECK(metric(o, "mixprec_loss_scale", NULL) == (double)st.current_scale);
    CHECK(metric(o, "mixprec_training_loss", NULL) == res.loss);
    CHECK(metric(o, "mixprec_precision_info", "mode=mixed_fp16") == 1.0);
    CHECK(metric(o, "mixprec_precision_info", "mode=fp32") == 0.0);
    CHECK(metric(o, "mixprec_fp16_enabled_runtime", NULL) == 1.0);
    CHECK(metric(o, "mixprec_run_state", "state=running") == 1.0);
    CHECK(metric(o, "mixprec_progress_ratio", NULL) == 1.0);
    mxp_model_memory mm;
    mxp_model_memory_usage(f.m, &mm);
    CHECK(metric(o, "mixprec_memory_bytes", "kind=params") == (double)mm.params);
    CHECK(metric(o, "mixprec_memory_bytes", "kind=master") == (double)mm.master);
    size_t P = mxp_model_num_params(f.m);
    CHECK(metric(o, "mixprec_memory_bytes", "kind=optimizer") == (double)(P * 8));
    CHECK(metric(o, "mixprec_memory_bytes", "kind=params") == (double)(P * 2)); /* FP16 */
    mxp_metric *dur = NULL;
    CHECK_OK(mxp_metrics_series(mxp_obs_metrics(o), "mixprec_step_duration_seconds", NULL, &dur,
                                &err), &err);
    CHECK(mxp_metric_count(dur) == (uint64_t)N);

    /* paging the history */
    char *doc = NULL;
    CHECK_OK(mxp_obs_export_json(o, 0, 15, &doc, &err), &err);
    CHECK(doc && strstr(doc, "\"total\":40") && strstr(doc, "\"next_offset\":15"));
    CHECK(doc && count_of(doc, "\"step\":") == 15 && strstr(doc, "\"step\":1,"));
    mxp_free(doc);
    CHECK_OK(mxp_obs_export_json(o, 30, 15, &doc, &err), &err);
    CHECK(doc && strstr(doc, "\"next_offset\":null") && count_of(doc, "\"step\":") == 10);
    CHECK(doc && strstr(doc, "\"step\":31,") && strstr(doc, "\"step\":40,"));
    CHECK(doc && count_of(doc, "\"overflow\":true") == 2); /* steps 35 and 40 */
    mxp_free(doc);
    CHECK(mxp_obs_export_json(o, 0, 0, &doc, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_obs_export_json(o, -1, 10, &doc, &err) == MXP_ERR_INVALID_ARG);
    CHECK_OK(mxp_obs_status_json(o, &doc, &err), &err);
    CHECK(doc && strstr(doc, "\"state\":\"running\"") && strstr(doc, "\"step\":40") &&
          strstr(doc, "\"precision\":\"mixed_fp16\"") &&
          strstr(doc, "\"fp16_enabled_runtime\":true") && strstr(doc, "\"run_id\":\"test-run\""));
    mxp_free(doc);

    /* precision requests: last one wins, taken once */
    mxp_precision p;
    CHECK(!mxp_obs_take_precision_request(o, &p));
    CHECK_OK(mxp_obs_request_precision(o, MXP_PRECISION_MIXED_BF16, &err), &err);
    CHECK_OK(mxp_obs_request_precision(o, MXP_PRECISION_FP32, &err), &err);
    CHECK(mxp_obs_take_precision_request(o, &p) && p == MXP_PRECISION_FP32);
    CHECK(!mxp_obs_take_precision_request(o, &p));

    /* an announced operator switch is not a fallback ... */
    CHECK_OK(mxp_trainer_set_precision(f.t, MXP_PRECISION_FP32, &err), &err);
    CHECK_OK(mxp_obs_precision_changed(o, MXP_PRECISION_MIXED_FP16, MXP_PRECISION_FP32,
                                       "operator", &err), &err);
    mxp_trainer_set_grad_hook(f.t, NULL, NULL);
    CHECK_OK(mxp_trainer_step(f.t, &f.b, 1, &res, &err), &err);
    CHECK_OK(mxp_obs_record_step(o, 1, &res, 0.001, &err), &err);
    CHECK(metric(o, "mixprec_precision_fallbacks_total", NULL) == 0.0);
    CHECK(metric(o, "mixprec_precision_info", "mode=fp32") == 1.0);
    CHECK(metric(o, "mixprec_fp16_enabled_runtime", NULL) == 0.0);
    CHECK(metric(o, "mixprec_memory_bytes", "kind=params") == (double)(P * 4));
    /* ... an unannounced one is */
    CHECK_OK(mxp_trainer_set_precision(f.t, MXP_PRECISION_MIXED_BF16, &err), &err);
    CHECK_OK(mxp_trainer_step(f.t, &f.b, 1, &res, &err), &err);
    CHECK_OK(mxp_obs_record_step(o, 1, &res, 0.001, &err), &err);
    CHECK(metric(o, "mixprec_precision_fallbacks_total", NULL) == 1.0);
    CHECK(metric(o, "mixprec_precision_info", "mode=mixed_bf16") == 1.0);

    /* guard events count by rule and severity; rollbacks count */
    CHECK_OK(mxp_obs_event(o, -1, "guard", "P0", "non-finite loss", "{\"rule\":\"nan_loss\"}",
                           &err), &err);
    CHECK_OK(mxp_obs_event(o, -1, "guard", "P0", "again", "{\"rule\":\"nan_loss\"}", &err), &err);
    CHECK_OK(mxp_obs_event(o, 5, "rollback", "P1", "to step 5", NULL, &err), &err);
    CHECK(mxp_obs_event(o, -1, "guard", "P0", "bad", "{not json", &err) == MXP_ERR_FORMAT);
    CHECK(metric(o, "mixprec_guard_events_total", "rule=nan_loss,severity=P0") == 2.0);
    CHECK(metric(o, "mixprec_rollbacks_total", NULL) == 1.0);
    CHECK_OK(mxp_obs_events_json(o, 3, &doc, &err), &err);
    CHECK(doc && count_of(doc, "\"kind\":") == 3 && strstr(doc, "\"message\":\"to step 5\""));
    mxp_free(doc);
    CHECK_OK(mxp_obs_set_guard_state(o, "{\"state\":\"ok\",\"window\":100}", &err), &err);
    CHECK(mxp_obs_set_guard_state(o, "[1,2]", &err) == MXP_ERR_FORMAT);
    mxp_obs_set_validation_loss(o, 0.25);
    CHECK_OK(mxp_obs_stats_json(o, &doc, &err), &err);
    CHECK(doc && strstr(doc, "\"guard\":{\"state\":\"ok\",\"window\":100}") &&
          strstr(doc, "\"validation_loss\":0.25") && strstr(doc, "\"precision_fallbacks\":1") &&
          strstr(doc, "\"rollbacks\":1"));
    mxp_free(doc);
    CHECK_OK(mxp_obs_run_end(o, MXP_RUN_FINISHED, "done", &err), &err);
    CHECK(metric(o, "mixprec_run_state", "state=finished") == 1.0);
    CHECK(metric(o, "mixprec_run_state", "state=running") == 0.0);
    mxp_obs_destroy(o);

    /* read the store back: every step once, in order */
    char db[512];
    snprintf(db, sizeof db, "%s/metrics.db", dir);
    readback rb = {.ordered = true};
    mxp_obs_run_summary sum;
    CHECK_OK(mxp_obs_store_read(db, NULL, &sum, rb_step, rb_event, &rb, &err), &err);
    CHECK(strcmp(sum.run_id, "test-run") == 0 && strcmp(sum.state, "finished") == 0);
    CHECK(strcmp(sum.precision, "mixed_fp16") == 0);
    CHECK(rb.n == N + 2 && rb.ordered && rb.last_step == N + 2);
    CHECK(rb.overflow == N / every && sum.overflow_steps == N / every && sum.steps == N + 2);
    CHECK(rb.guard_events == 2);
    CHECK(rb.events == (int)sum.events && rb.events >= 7); /* start, 2 switches, 2 guard, rollback, end */
    CHECK(mxp_obs_store_read(db, "nope", &sum, NULL, NULL, NULL, &err) == MXP_ERR_STATE);
    fixture_free(&f);
}

static void test_history_ring(void) {
    fixture f;
    fixture_init(&f, MXP_PRECISION_FP32);
    mxp_obs_settings s = settings();
    s.history_max = 16;
    mxp_obs *o = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_obs_create(&s, NULL, NULL, &o, &err), &err);
    CHECK(strlen(mxp_obs_run_id(o)) > 10);
    CHECK_OK(mxp_obs_run_begin(o, f.t, 40, 8, NULL, &err), &err);
    mxp_step_result res;
    for (int i = 0; i < 40; i++) {
        CHECK_OK(mxp_trainer_step(f.t, &f.b, 1, &res, &err), &err);
        CHECK_OK(mxp_obs_record_step(o, 0, &res, 0.001, &err), &err);
    }
    char *doc = NULL;
    CHECK_OK(mxp_obs_export_json(o, 0, 100, &doc, &err), &err);
    CHECK(doc && strstr(doc, "\"first_offset\":24") && strstr(doc, "\"offset\":24"));
    CHECK(doc && count_of(doc, "\"step\":") == 16 && strstr(doc, "\"step\":25,"));
    mxp_free(doc);
    CHECK(mxp_obs_flush(o, &err) == MXP_OK); /* no store: a no-op */
    mxp_obs_destroy(o);
    /* bad settings */
    s.history_max = 2;
    CHECK(mxp_obs_create(&s, NULL, NULL, &o, &err) == MXP_ERR_CONFIG);
    fixture_free(&f);
}

/* ---- store writer back-pressure ------------------------------------------ */

typedef struct producer {
    mxp_obs_writer *w;
    int64_t n;
    atomic_llong added; /* rows whose add_step returned */
} producer;

static void *produce(void *arg) {
    producer *p = arg;
    mxp_train_stats st = {0};
    for (int64_t i = 1; i <= p->n; i++) {
        mxp_obs_step_row row = {.step = i, .timestamp = 1.7e9 + (double)i, .loss = 1.0 / i,
                                .scale = 1, .precision = MXP_PRECISION_FP32};
        st.training_steps = i;
        mxp_obs_writer_add_step(p->w, &row, &st, row.loss);
        atomic_store(&p->added, i);
    }
    return NULL;
}

static void count_row(void *user, const mxp_obs_step_row *r) {
    int64_t *n = user;
    *n += r->step == *n + 1;
}

static void test_writer_backpressure(const char *dir) {
    char db[512], ev[512];
    snprintf(db, sizeof db, "%s/bp.db", dir);
    snprintf(ev, sizeof ev, "%s/bp.jsonl", dir);
    mxp_error err = {0};
    mxp_obs_store *store = NULL;
    CHECK_OK(mxp_obs_store_open(db, ev, "bp-run", &store, &err), &err);
    CHECK_OK(mxp_obs_store_run_begin(store, 1.7e9, MXP_PRECISION_FP32, NULL, &err), &err);
    const int64_t F = 10;
    producer p = {.n = 12 * F};
    atomic_init(&p.added, 0);
    CHECK_OK(mxp_obs_writer_start(store, F, 3600.0, &p.w, &err), &err);
    mxp_obs_writer_lock_io(p.w); /* the disk stops answering */
    pthread_t th;
    pthread_create(&th, NULL, produce, &p);
    /* the producer reaches the bound (bounded wait: 60 s) ... */
    for (int i = 0; i < 60000 && atomic_load(&p.added) < F; i++) usleep(1000);
    int64_t at_bound = atomic_load(&p.added);
    usleep(200 * 1000);
    /* ... and stays there while nothing can be committed */
    int64_t later = atomic_load(&p.added);
    CHECK(at_bound == F);
    CHECK(later == F);
    if (later != F) fprintf(stderr, "  producer queued %lld rows with the store blocked (bound %lld)\n",
                            (long long)later, (long long)F);
    mxp_obs_writer_unlock_io(p.w);
    pthread_join(th, NULL);
    CHECK(atomic_load(&p.added) == p.n);
    CHECK_OK(mxp_obs_writer_flush(p.w, &err), &err);
    mxp_obs_writer_stop(p.w);
    mxp_obs_store_close(store);
    mxp_obs_run_summary sum;
    int64_t contiguous = 0;
    CHECK_OK(mxp_obs_store_read(db, "bp-run", &sum, count_row, NULL, &contiguous, &err), &err);
    CHECK(sum.steps == p.n && contiguous == p.n);
}

int main(void) {
    char dir[] = "/tmp/mixprec_test_obs_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_exposition();
    test_registration_rules();
    test_threads();
    test_token_compare();
    test_observer(dir);
    test_history_ring();
    test_writer_backpressure(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return test_finish("test_obs");
}
