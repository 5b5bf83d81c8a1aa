/* bench/bench_head_loss.c: the regression head's loss (kernels.h
 * head_loss, and gauss_nll: the plain Gaussian head without weights and
 * flag), generic kernel against the AVX-512 one
 * (kernels/x86_avx512/loops_head.c), side by side in one process.
 *
 * Not a test (no verdict). For each shape it alternates samples of the two
 * kernels (each sample: `inner` calls with gradients, forward + backward
 * as a training step runs it), in thread CPU time (CLOCK_THREAD_CPUTIME_ID),
 * and prints the best and the median of each and the ratio of the
 * medians. Shapes: world-model heads (K = S + 1 targets, the flag T = 1)
 * of batch 256 (one step) and 4096 (an evaluation chunk). Data: pred,
 * targets ~ N(0, 2^2), raw log-variances ~ N(0, 6^2) (both soft bounds
 * bend), flags 0/1.
 *
 * usage: bench_head_loss [samples]   (default 31)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "kernels/generic/generic.h"
#include "kernels/x86_avx512/avx512.h"
#include "bench_ab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* nll: time gauss_nll (gauss, T = 0) instead of head_loss */
static void one_shape(const mxp_kernels *kt[2], int64_t B, int64_t K, int64_t T, bool gauss,
                      bool nll, int reps, mxp_rng *rng) {
    const int64_t C = K + T, ps = (gauss ? 2 * K : K) + T;
    float *pred = malloc((size_t)(B * ps) * 4), *tgt = malloc((size_t)(B * C) * 4);
    float *dpred = malloc((size_t)(B * ps) * 4), *bounds = malloc((size_t)(2 * K) * 4);
    float *dbounds = calloc((size_t)(2 * K), 4);
    if (!pred || !tgt || !dpred || !bounds || !dbounds) exit(2);
    for (int64_t i = 0; i < B * ps; i++) pred[i] = 2.0f * mxp_rng_normal(rng);
    for (int64_t b = 0; gauss && b < B; b++)
        for (int64_t j = 0; j < K; j++) pred[b * ps + K + j] = 6.0f * mxp_rng_normal(rng);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            tgt[b * C + c] = c < K ? 2.0f * mxp_rng_normal(rng)
                                   : (mxp_rng_uniform(rng) < 0.3f ? 1.0f : 0.0f);
    for (int64_t j = 0; j < K; j++) bounds[j] = 0.5f, bounds[K + j] = -10.0f;
    /* about 2 ms of generic work per sample */
    const int inner = (int)(2.0e6 / (double)(B * C * (gauss ? 60 : 3)) + 1);
    double *t[2] = {malloc((size_t)reps * 8), malloc((size_t)reps * 8)};
    double sink = 0;
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            double t0 = ab_thread_ms(), l = 0;
            for (int i = 0; i < inner && nll; i++)
                kt[v]->gauss_nll(dpred, dbounds, pred, tgt, bounds, B, K, 1.0f, &l);
            for (int i = 0; i < inner && !nll; i++)
                kt[v]->head_loss(dpred, dbounds, pred, tgt, gauss ? bounds : NULL, NULL, B, K, T,
                                 1.0f, &l);
            t[v][r] = (ab_thread_ms() - t0) / inner;
            sink += l;
        }
    char what[96];
    snprintf(what, sizeof what, "%s %s B=%lld K=%lld T=%lld", nll ? "gauss_nll" : "head_loss",
             gauss ? "gaussian" : "deterministic", (long long)B, (long long)K, (long long)T);
    ab_report(what, "", "generic", "avx512", t, reps); /* sorts t[v] */
    printf("%-44s median ratio generic / avx512 %.2fx (%d calls per sample%s)\n", "",
           t[0][reps / 2] / t[1][reps / 2], inner, isfinite(sink) ? "" : "; non-finite loss");
    free(t[0]), free(t[1]), free(pred), free(tgt), free(dpred), free(bounds), free(dbounds);
}

int main(int argc, char **argv) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("bench_head_loss: this CPU cannot run the AVX-512 table\n");
        return 0;
    }
    const int reps = argc > 1 ? atoi(argv[1]) : 31;
    if (reps < 1) return 2;
    const mxp_kernels *kt[2] = {mxp_kernels_generic(), mxp_kernels_avx512()};
    mxp_rng rng;
    mxp_rng_init(&rng, 7);
    one_shape(kt, 256, 18, 1, true, false, reps, &rng);
    one_shape(kt, 256, 18, 0, true, false, reps, &rng);
    one_shape(kt, 256, 18, 0, true, true, reps, &rng);
    one_shape(kt, 256, 30, 0, true, true, reps, &rng); /* the ant ensemble's head (S 29 + 1) */
    one_shape(kt, 256, 18, 0, false, false, reps, &rng);
    one_shape(kt, 4096, 18, 1, true, false, reps, &rng);
    one_shape(kt, 4096, 40, 1, true, false, reps, &rng);
    one_shape(kt, 4096, 18, 0, true, true, reps, &rng);
    return 0;
}
