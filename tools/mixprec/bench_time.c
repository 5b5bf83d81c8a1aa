/* tools/mixprec/bench_time.c: median-of-samples wall-clock timing, of one
 * function or of several alternating. */
#include "bench.h"

#include <stdlib.h>

enum { BENCH_MAX_SAMPLES = 1000 };
/* Untimed calls before each alternating sample (bench.h). */
#define BENCH_SWITCH_WARM_S 0.03

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Warm-up of fn: at least 2 calls and warm_s seconds; returns the calls
 * per sample that make a sample last min_sample_s. */
static int warm_up(void (*fn)(void *), void *ctx, double warm_s, double min_sample_s) {
    double t0 = mxp_time_now(), one = 0.0;
    int warm = 0;
    while (warm < 2 || mxp_time_now() - t0 < warm_s) {
        double s = mxp_time_now();
        fn(ctx);
        one = mxp_time_now() - s;
        warm++;
    }
    int calls = 1;
    if (one > 0.0 && one < min_sample_s) calls = (int)(min_sample_s / one) + 1;
    return calls > 1000000 ? 1000000 : calls;
}

static double sample(void (*fn)(void *), void *ctx, int calls) {
    double s = mxp_time_now();
    for (int c = 0; c < calls; c++) fn(ctx);
    return (mxp_time_now() - s) / calls;
}

static bench_timing summary(double *samples, int reps, int calls) {
    qsort(samples, (size_t)reps, sizeof samples[0], cmp_double);
    return (bench_timing){
        .median_s = reps % 2 ? samples[reps / 2]
                             : 0.5 * (samples[reps / 2 - 1] + samples[reps / 2]),
        .min_s = samples[0],
        .samples = reps,
        .calls = calls,
    };
}

static int clamp_reps(int reps) {
    return reps < 1 ? 1 : reps > BENCH_MAX_SAMPLES ? BENCH_MAX_SAMPLES : reps;
}

bench_timing bench_time(void (*fn)(void *), void *ctx, int reps, double warm_s,
                        double min_sample_s) {
    reps = clamp_reps(reps);
    int calls = warm_up(fn, ctx, warm_s, min_sample_s); /* caches, pool start, clocks */
    double samples[BENCH_MAX_SAMPLES];
    for (int r = 0; r < reps; r++) samples[r] = sample(fn, ctx, calls);
    return summary(samples, reps, calls);
}

void bench_time_alternating(const bench_fn *f, int n, int reps, double warm_s,
                            double min_sample_s, bench_timing *out) {
    if (n == 1) { /* nothing to alternate with */
        out[0] = bench_time(f[0].fn, f[0].ctx, reps, warm_s, min_sample_s);
        return;
    }
    reps = clamp_reps(reps);
    if (n > BENCH_ALT_MAX) n = BENCH_ALT_MAX;
    int calls[BENCH_ALT_MAX];
    for (int i = 0; i < n; i++) calls[i] = warm_up(f[i].fn, f[i].ctx, warm_s, min_sample_s);
    static double samples[BENCH_ALT_MAX][BENCH_MAX_SAMPLES];
    for (int r = 0; r < reps; r++) {
        for (int q = 0; q < n; q++) {
            int i = (q + r) % n; /* rotate who goes first in a round */
            double w0 = mxp_time_now();
            while (mxp_time_now() - w0 < BENCH_SWITCH_WARM_S) f[i].fn(f[i].ctx); /* untimed */
            samples[i][r] = sample(f[i].fn, f[i].ctx, calls[i]);
        }
    }
    for (int i = 0; i < n; i++) out[i] = summary(samples[i], reps, calls[i]);
}
