/* bench/bench_guard.c: what the numerical-safety guard costs per step.
 *
 * Trains the base world model (the default config: pendulum, MLP
 * 4-256-256-256-4, batch 32, mixed precision as given) with the guard off
 * and with every monitor on (rules, per-layer headroom with full scans
 * every guard.headroom.every_steps, FP32 canary every 100 steps, in-memory
 * rollback snapshots every 100 steps), interleaving the variants so machine
 * load hits them alike, and prints the median step time of each and the
 * overhead of "on" against "off". Not a test: timings depend on the machine
 * and its load.
 *
 * usage: bench_guard [--runs N] [--epochs E] [--precision MODE] [key=value ...]
 *        (defaults: 7 runs, 1 epoch, mixed_bf16)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <mixprec/mixprec.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OV 64

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* CPU seconds of the whole process (all threads): less sensitive than the
 * wall clock to other jobs sharing the machine. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall seconds per optimizer step of one run with the given overrides;
 * *cpu gets CPU seconds per step. */
static double one_run(const char *const *ov, int n_ov, int64_t *steps, double *cpu) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    if (mxp_config_builder_create(&b, &err) != MXP_OK) goto fail;
    for (int i = 0; i < n_ov; i++)
        if (mxp_config_apply_override(b, ov[i], &err) != MXP_OK) goto fail;
    if (mxp_config_resolve(b, &cfg, &err) != MXP_OK) goto fail;
    mxp_config_builder_destroy(b);
    b = NULL;
    mxp_world_model *wm = NULL;
    if (mxp_world_model_create(&cfg, &wm, &err) != MXP_OK) goto fail;
    double t0 = mxp_time_now(), c0 = cpu_now();
    if (mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err) != MXP_OK) goto fail;
    double dt = mxp_time_now() - t0, dc = cpu_now() - c0;
    size_t n;
    (void)mxp_trainer_history(mxp_world_model_trainer(wm), &n);
    *steps = (int64_t)n;
    *cpu = dc / (double)n;
    mxp_world_model_destroy(wm);
    return dt / (double)n;
fail:
    mxp_config_builder_destroy(b);
    fprintf(stderr, "bench_guard: %s\n", err.msg);
    exit(1);
}

int main(int argc, char **argv) {
    int runs = 7;
    char epochs[64] = "training.epochs=1", prec[96] = "training.precision=mixed_bf16";
    const char *extra[MAX_OV];
    int n_extra = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--epochs") == 0 && i + 1 < argc)
            snprintf(epochs, sizeof epochs, "training.epochs=%s", argv[++i]);
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
            snprintf(prec, sizeof prec, "training.precision=%s", argv[++i]);
        else if (strchr(argv[i], '=') && n_extra < MAX_OV - 8)
            extra[n_extra++] = argv[i];
        else {
            fprintf(stderr, "usage: bench_guard [--runs N] [--epochs E] [--precision MODE] "
                            "[key=value ...]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 101) runs = 7;
    static const struct {
        const char *name;
        const char *ov[4];
    } variants[] = {
        {"off", {"guard.enabled=false", NULL}},
        {"on (default: canary/100, full scans/10)", {"guard.enabled=true", NULL}},
        {"on, full scans every step", {"guard.enabled=true", "guard.headroom.every_steps=1", NULL}},
        {"on, canary off", {"guard.enabled=true", "guard.canary.every_steps=0", NULL}},
    };
    enum { NV = sizeof variants / sizeof variants[0] };
    double *t[NV], *c[NV];
    for (int v = 0; v < NV; v++) {
        t[v] = calloc((size_t)runs, sizeof(double));
        c[v] = calloc((size_t)runs, sizeof(double));
    }
    int64_t steps = 0;
    for (int r = 0; r < runs; r++)
        for (int v = 0; v < NV; v++) {
            const char *ov[MAX_OV];
            int n = 0;
            ov[n++] = epochs;
            ov[n++] = prec;
            for (int i = 0; i < n_extra; i++) ov[n++] = extra[i];
            for (int i = 0; variants[v].ov[i]; i++) ov[n++] = variants[v].ov[i];
            t[v][r] = one_run(ov, n, &steps, &c[v][r]);
        }
    printf("bench_guard: base world model, %s, %s, %lld steps per run, median of %d runs\n",
           prec, epochs, (long long)steps, runs);
    double med[NV], cmed[NV];
    printf("  %-42s %14s %9s %14s %9s\n", "variant", "wall us/step", "overhead",
           "cpu us/step", "overhead");
    for (int v = 0; v < NV; v++) {
        qsort(t[v], (size_t)runs, sizeof(double), cmp_double);
        qsort(c[v], (size_t)runs, sizeof(double), cmp_double);
        med[v] = t[v][runs / 2];
        cmed[v] = c[v][runs / 2];
        printf("  %-42s %14.1f %+8.2f%% %14.1f %+8.2f%%\n", variants[v].name, 1e6 * med[v],
               100.0 * (med[v] - med[0]) / med[0], 1e6 * cmed[v],
               100.0 * (cmed[v] - cmed[0]) / cmed[0]);
        free(t[v]);
        free(c[v]);
    }
    return 0;
}
