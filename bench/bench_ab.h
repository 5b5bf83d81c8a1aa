/* bench/bench_ab.h: the clock and the summary of the A/B benches
 * (bench_act16.c, bench_act_split.c, bench_gemm_epi.c, bench_gemm_split.c,
 * bench_head_loss.c), which alternate calls of two variants in one process
 * and compare thread CPU time.
 * Header-only, static functions: each bench is one translation unit. */
#ifndef MIXPREC_BENCH_AB_H
#define MIXPREC_BENCH_AB_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* This thread's CPU time in ms (CLOCK_THREAD_CPUTIME_ID). */
static inline double ab_thread_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int ab_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[n] (sorts v). */
static inline double ab_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, ab_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One line: best and median of variant 0 (name0) and 1 (name1) over reps
 * samples each (t[v] is sorted in place), and the ratio of the bests. */
static inline void ab_report(const char *what, const char *tag, const char *name0,
                             const char *name1, double *t[2], int reps) {
    double best[2], med[2];
    for (int v = 0; v < 2; v++) {
        qsort(t[v], (size_t)reps, sizeof(double), ab_cmp);
        best[v] = t[v][0];
        med[v] = t[v][reps / 2];
    }
    printf("%-44s %-6s %s best %8.4f med %8.4f ms | %s best %8.4f med %8.4f ms | "
           "best ratio %.2fx\n",
           what, tag, name0, best[0], med[0], name1, best[1], med[1], best[0] / best[1]);
    fflush(stdout);
}

#endif /* MIXPREC_BENCH_AB_H */
