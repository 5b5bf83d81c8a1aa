#define _POSIX_C_SOURCE 200809L
#include <mixprec/mixprec.h>
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double tnow(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], 0, 10) : 596033;
    int reps = argc > 2 ? atoi(argv[2]) : 200;
    float *g = aligned_alloc(64, (n + 16) * 4);
    mxp_rng r; mxp_rng_init(&r, 1);
    for (size_t i = 0; i < n; i++) g[i] = 1e-3f * mxp_rng_normal(&r);
    const mxp_kernels *k = mxp_kernels_get();
    double *t = malloc(reps * sizeof *t);
    mxp_grad_stats st;
    for (int it = 0; it < reps; it++) {
        double t0 = tnow();
        k->unscale_stats(g, n, 1.0f, 60000.0f, &st);
        t[it] = tnow() - t0;
    }
    qsort(t, reps, 8, cmpd);
    printf("unscale_stats n=%zu: best %.4f ms median %.4f ms\n", n, t[0] * 1e3, t[reps / 2] * 1e3);
    return 0;
}
