/* AdamW pass vs a pure streaming pass with the same traffic (thread CPU time). */
#define _POSIX_C_SOURCE 200809L
#include <mixprec/mixprec.h>
#include "kernels/kernels.h"
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double tnow(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

/* same loads and stores as adamw master+bf16 recast: read g,m,v,w; write m,v,w (f32) + work (bf16) */
__attribute__((target("avx512f,avx512bf16,avx512vl")))
static void stream(const float *g, float *m, float *v, float *w, void *work, size_t n) {
    const __m512 c = _mm512_set1_ps(0.5f);
    for (size_t i = 0; i < n; i += 16) {
        __m512 gi = _mm512_loadu_ps(g + i);
        __m512 mi = _mm512_add_ps(_mm512_loadu_ps(m + i), gi);
        __m512 vi = _mm512_add_ps(_mm512_loadu_ps(v + i), gi);
        __m512 wi = _mm512_fmadd_ps(c, gi, _mm512_loadu_ps(w + i));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        _mm512_storeu_ps(w + i, wi);
        _mm256_storeu_si256((__m256i *)((uint16_t *)work + i), (__m256i)_mm512_cvtneps_pbh(wi));
    }
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], 0, 10) : 596033;
    int reps = argc > 2 ? atoi(argv[2]) : 60;
    n = (n + 15) / 16 * 16;
    float *g = aligned_alloc(64, n * 4), *m = aligned_alloc(64, n * 4), *v = aligned_alloc(64, n * 4), *w = aligned_alloc(64, n * 4);
    uint16_t *work = aligned_alloc(64, n * 2);
    mxp_rng r; mxp_rng_init(&r, 1);
    for (size_t i = 0; i < n; i++) { g[i] = 1e-3f * mxp_rng_normal(&r); m[i] = 0; v[i] = 0; w[i] = 0.05f * mxp_rng_normal(&r); }
    const mxp_kernels *k = mxp_kernels_get();
    mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, argc > 4 ? (float)atof(argv[4]) : 0.0f};
    int64_t t0 = argc > 3 ? atoll(argv[3]) : 1;
    double ta[1000], ts[1000];
    for (int it = 0; it < reps; it++) {
        mxp_weights wt = {w, getenv("NOWORK") ? NULL : (void *)work, MXP_DTYPE_BF16, false, 0, 0};
        double t0 = tnow();
        k->adamw(&wt, g, m, v, n, &h, t0 + it);
        double t1 = tnow();
        stream(g, m, v, w, work, n);
        double t2 = tnow();
        ta[it] = t1 - t0; ts[it] = t2 - t1;
    }
    qsort(ta, reps, 8, cmpd); qsort(ts, reps, 8, cmpd);
    double bytes = 30.0 * n;
    printf("n=%zu (%.1f MB moved): adamw best %.3f ms median %.3f ms (%.1f GB/s at best); stream best %.3f ms median %.3f ms (%.1f GB/s)\n",
           n, bytes / 1e6, ta[0] * 1e3, ta[reps / 2] * 1e3, bytes / ta[0] / 1e9, ts[0] * 1e3, ts[reps / 2] * 1e3, bytes / ts[0] / 1e9);
    return 0;
}
