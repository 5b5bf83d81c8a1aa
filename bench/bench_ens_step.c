/* bench/bench_ens_step.c: an ensemble's forward + loss + backward (one
 * mxp_model_step), layer-major (src/nn/ens_batched.c) against the
 * member-sequential pass (ensemble.c's member loop), in one process.
 *
 * The model is the PETS world model of bench/wm_ensemble_figures.sh: E
 * members of [linear:H, gelu] x depth, linear(2 D) with Gaussian heads,
 * batch B rows per member, one fixed batch. Two models of the same seed,
 * one per path (nn_ens_set_batched); the steps alternate between them in
 * rounds of --block steps (the order swapped each round) so both see the
 * same machine load; each step is timed alone (wall clock and process
 * CPU time). Prints per path the median and minimum step time, the CPU
 * time per step and the kernel pool's forks per step, and whether the two
 * paths' losses and gradients are bit-identical (they must be).
 *
 * usage: bench_ens_step [--members E] [--in N] [--hidden H] [--depth N]
 *        [--targets D] [--batch B] [--rounds N] [--block N]
 *        [--precision MODE]
 * Not a test: prints timings, exits 0 on success, 2 on bad arguments.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime and its CPU-time clocks */
#include <mixprec/mixprec.h>

#include "kernels/threads.h"
#include "nn/nn_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int64_t E = 5, in = 37, H = 200, D = 30, B = 256;
    int depth = 2, rounds = 20, block = 5;
    const char *prec = "fp32";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--members")) E = atoll(v);
        else if (!strcmp(a, "--in")) in = atoll(v);
        else if (!strcmp(a, "--hidden")) H = atoll(v);
        else if (!strcmp(a, "--depth")) depth = atoi(v);
        else if (!strcmp(a, "--targets")) D = atoll(v);
        else if (!strcmp(a, "--batch")) B = atoll(v);
        else if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--block")) block = atoi(v);
        else if (!strcmp(a, "--precision")) prec = v;
        else goto usage;
        i++;
    }
    if (E < 2 || E > 64 || in < 1 || H < 1 || depth < 1 || depth > 8 || D < 1 || B < 1 ||
        rounds < 1 || block < 1)
        goto usage;
    mxp_precision mode;
    mxp_error perr = {0};
    if (mxp_precision_parse(prec, &mode, &perr) != MXP_OK) goto usage;

    char layers[256] = "[";
    for (int d = 0; d < depth; d++)
        snprintf(layers + strlen(layers), sizeof layers - strlen(layers), "linear:%lld, gelu, ",
                 (long long)H);
    strcat(layers, "linear]");
    mxp_error err = {0};
    mxp_model_spec sp;
    mxp_model *m[2] = {NULL, NULL};
    if (mxp_model_spec_layers(layers, in, 2 * D, MXP_LOSS_GAUSSIAN, B, &sp, &err) != MXP_OK)
        goto fail;
    sp.ensemble = (int)E;
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    for (int k = 0; k < 2; k++) {
        if (mxp_model_create(&sp, &pol, 7, &m[k], &err) != MXP_OK) goto fail;
        nn_ens_set_batched(m[k], k == 0);
    }
    const size_t nx = (size_t)(E * B * in), ny = (size_t)(E * B * D);
    float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
    uint64_t s = 12345;
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)((double)((s = s * 6364136223846793005ull + 1) >> 11) / 9007199254740992.0 - 0.5);
    for (size_t i = 0; i < ny; i++)
        y[i] = (float)((double)((s = s * 6364136223846793005ull + 1) >> 11) / 9007199254740992.0 - 0.5);
    mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = E * B};
    const int n = rounds * block;
    double *wall[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
    double cpu[2] = {0, 0}, loss[2] = {0, 0};
    int64_t forks[2] = {0, 0};
    int cnt[2] = {0, 0};
    for (int k = 0; k < 2; k++) /* warm-up: one step each */
        if (mxp_model_step(m[k], &b, true, 1.0f, &loss[k], NULL, &err) != MXP_OK) goto fail;
    for (int r = 0; r < rounds; r++)
        for (int half = 0; half < 2; half++) {
            const int k = (r & 1) ? 1 - half : half;
            for (int j = 0; j < block; j++) {
                mxp_threads_stats t0, t1;
                mxp_threads_stats_get(&t0);
                mxp_model_discard_grads(m[k]);
                const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
                mxp_nonfinite_site site;
                if (mxp_model_step(m[k], &b, true, 1.0f, &loss[k], &site, &err) != MXP_OK)
                    goto fail;
                wall[k][cnt[k]++] = now(CLOCK_MONOTONIC) - w0;
                cpu[k] += now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                mxp_threads_stats_get(&t1);
                forks[k] += t1.forks - t0.forks;
            }
        }
    const size_t P = mxp_model_num_params(m[0]);
    const bool same = memcmp(&loss[0], &loss[1], sizeof(double)) == 0 &&
                      memcmp(mxp_model_grads(m[0]), mxp_model_grads(m[1]), P * sizeof(float)) == 0;
    printf("# bench_ens_step: %lld members, %s, batch %lld per member, %s, %d threads, "
           "%d steps per path in %d alternating rounds\n",
           (long long)E, layers, (long long)B, prec, mxp_threads_max(), n, rounds);
    double med[2];
    for (int k = 0; k < 2; k++) {
        qsort(wall[k], (size_t)n, sizeof(double), cmp);
        med[k] = wall[k][n / 2];
        printf("%-10s median %.3f ms  min %.3f ms  cpu %.3f ms/step  forks %.1f/step\n",
               k == 0 ? "batched" : "sequential", 1e3 * med[k], 1e3 * wall[k][0],
               1e3 * cpu[k] / n, (double)forks[k] / n);
    }
    printf("batched / sequential (medians): %.3f; loss and gradients bit-identical: %s\n",
           med[0] / med[1], same ? "yes" : "NO");
    free(wall[0]);
    free(wall[1]);
    free(x);
    free(y);
    mxp_model_destroy(m[0]);
    mxp_model_destroy(m[1]);
    return same ? 0 : 1;
fail:
    fprintf(stderr, "bench_ens_step: %s\n", err.msg);
    mxp_model_destroy(m[0]);
    mxp_model_destroy(m[1]);
    return 1;
usage:
    fprintf(stderr, "usage: bench_ens_step [--members E] [--in N] [--hidden H] [--depth N] "
                    "[--targets D] [--batch B] [--rounds N] [--block N] [--precision MODE]\n");
    return 2;
}
