/* bench/bench_metrics.c: cost of the per-step observability work against
 * one step of the base world model (a benchmark, not a test).
 *
 * usage: bench_metrics [REPEATS]   (default 5; medians are reported)
 *
 * Measures, each as the median over REPEATS:
 *   step       wall time of one optimizer step of the base world model
 *              (default config: MLP 4-256-256-256-4, batch 32, FP32), from
 *              one epoch of progress-callback timestamps (median step);
 *   metrics    one mxp_obs_record_step without the run store: all metric
 *              updates, the histogram observe and the history row;
 *   +store     the same with the SQLite run store on (batched commits
 *              every 100 steps, WAL, in a temporary directory);
 *   +scrape    metrics only, while another thread renders /metrics text
 *              in a loop (contention on the registry and history lock).
 * and prints each as ns per step and as % of the step.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp */
#endif
#include <mixprec/mixprec.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALLS 200000

typedef struct step_times {
    double *t;
    int64_t n, cap;
    double last;
} step_times;

static void on_progress(void *user, const mxp_progress *p) {
    (void)p;
    step_times *s = user;
    double now = mxp_time_now();
    if (s->n < s->cap) s->t[s->n++] = now - s->last;
    s->last = now;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n ? v[n / 2] : 0;
}

static int die(const mxp_error *err) {
    fprintf(stderr, "bench_metrics: %s\n", err->msg);
    return 1;
}

typedef struct scraper {
    mxp_obs *o;
    atomic_bool stop;
    long renders;
} scraper;

static void *scrape(void *arg) {
    scraper *s = arg;
    while (!atomic_load(&s->stop)) {
        char *t = NULL;
        size_t len;
        if (mxp_metrics_render(mxp_obs_metrics(s->o), &t, &len, NULL) == MXP_OK) mxp_free(t);
        if (mxp_obs_status_json(s->o, &t, NULL) == MXP_OK) mxp_free(t);
        s->renders++;
    }
    return NULL;
}

/* ns per mxp_obs_record_step over CALLS calls. */
static double time_record(mxp_trainer *tr, const mxp_step_result *res, bool store,
                          bool with_scraper, mxp_error *err) {
    mxp_obs_settings set = {0};
    snprintf(set.http_address, sizeof set.http_address, "127.0.0.1");
    snprintf(set.token_file, sizeof set.token_file, "none");
    snprintf(set.store_db, sizeof set.store_db, "metrics.db");
    snprintf(set.store_events, sizeof set.store_events, "events.jsonl");
    set.store_enabled = store;
    set.flush_steps = 100;
    set.flush_seconds = 2;
    set.history_max = 262144;
    char dir[] = "/tmp/bench_metrics_XXXXXX";
    if (store && !mkdtemp(dir)) return -1;
    mxp_obs *o = NULL;
    if (mxp_obs_create(&set, store ? dir : NULL, "bench", &o, err) != MXP_OK) return -1;
    if (mxp_obs_run_begin(o, tr, CALLS, 32, NULL, err) != MXP_OK) return -1;
    scraper sc = {.o = o};
    atomic_init(&sc.stop, false);
    pthread_t th;
    if (with_scraper) pthread_create(&th, NULL, scrape, &sc);
    double t0 = mxp_time_now();
    for (int i = 0; i < CALLS; i++) mxp_obs_record_step(o, 0, res, 1e-3, NULL);
    double t = mxp_time_now() - t0;
    if (with_scraper) {
        atomic_store(&sc.stop, true);
        pthread_join(th, NULL);
    }
    mxp_obs_destroy(o);
    if (store) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "bench_metrics: cleanup of %s failed\n", dir);
    }
    return t / CALLS * 1e9;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) reps = 1;
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    if (mxp_config_builder_create(&b, &err) != MXP_OK ||
        mxp_config_resolve(b, &cfg, &err) != MXP_OK)
        return die(&err);
    mxp_config_builder_destroy(b);
    mxp_world_model *wm = NULL;
    if (mxp_world_model_create(&cfg, &wm, &err) != MXP_OK) return die(&err);
    int64_t spe = mxp_world_model_samples_per_epoch(wm, cfg.batch_size) / cfg.batch_size;
    step_times st = {.cap = spe + 1};
    st.t = calloc((size_t)st.cap, sizeof *st.t);
    double *step_med = calloc((size_t)reps, sizeof *step_med);
    double *m0 = calloc((size_t)reps, sizeof *m0), *m1 = calloc((size_t)reps, sizeof *m1);
    double *m2 = calloc((size_t)reps, sizeof *m2);
    if (!st.t || !step_med || !m0 || !m1 || !m2) return 1;
    mxp_world_model_set_progress(wm, on_progress, &st);
    mxp_step_result res = {.loss = 0.01, .scale = 65536, .grad_norm = 0.5, .zero_frac = 0.001,
                           .near_overflow_frac = 0.0001};
    mxp_trainer *tr = mxp_world_model_trainer(wm);
    for (int r = 0; r < reps; r++) {
        st.n = 0;
        st.last = mxp_time_now();
        if (mxp_world_model_train(wm, 1, cfg.batch_size, &err) != MXP_OK) return die(&err);
        step_med[r] = median(st.t, st.n) * 1e9;
        m0[r] = time_record(tr, &res, false, false, &err);
        m1[r] = time_record(tr, &res, true, false, &err);
        m2[r] = time_record(tr, &res, false, true, &err);
        if (m0[r] < 0 || m1[r] < 0 || m2[r] < 0) return die(&err);
        fprintf(stderr, "rep %d: step %.0f ns, metrics %.0f ns, +store %.0f ns, +scrape %.0f ns\n",
                r + 1, step_med[r], m0[r], m1[r], m2[r]);
    }
    double s = median(step_med, reps);
    double a = median(m0, reps), c = median(m1, reps), d = median(m2, reps);
    printf("base world-model step (median of %d epochs' median step): %.3f ms\n", reps, s / 1e6);
    printf("metrics only        %8.0f ns/step  %.3f%% of a step\n", a, 100 * a / s);
    printf("metrics + store     %8.0f ns/step  %.3f%% of a step\n", c, 100 * c / s);
    printf("metrics + scraper   %8.0f ns/step  %.3f%% of a step\n", d, 100 * d / s);
    printf("budget: < 1%% of a step: %s\n", 100 * a / s < 1.0 ? "met" : "NOT met");
    mxp_world_model_destroy(wm);
    free(st.t);
    free(step_med);
    free(m0);
    free(m1);
    free(m2);
    return 0;
}
