/* tools/mixprec/bench_time.c: median-of-samples wall-clock timing. */
#include "bench.h"

#include <stdlib.h>

enum { BENCH_MAX_SAMPLES = 1000 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

bench_timing bench_time(void (*fn)(void *), void *ctx, int reps, double warm_s,
                        double min_sample_s) {
    if (reps < 1) reps = 1;
    if (reps > BENCH_MAX_SAMPLES) reps = BENCH_MAX_SAMPLES;
    /* warm-up: caches, page faults, thread-pool start, CPU clocks */
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
    if (calls > 1000000) calls = 1000000;
    double samples[BENCH_MAX_SAMPLES];
    for (int r = 0; r < reps; r++) {
        double s = mxp_time_now();
        for (int c = 0; c < calls; c++) fn(ctx);
        samples[r] = (mxp_time_now() - s) / calls;
    }
    qsort(samples, (size_t)reps, sizeof samples[0], cmp_double);
    bench_timing t = {
        .median_s = reps % 2 ? samples[reps / 2]
                             : 0.5 * (samples[reps / 2 - 1] + samples[reps / 2]),
        .min_s = samples[0],
        .samples = reps,
        .calls = calls,
    };
    return t;
}
