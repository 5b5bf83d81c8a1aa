/* bench/bench_train_step.c: time mxp_trainer_step on an MLP, the mixprec
 * side of the side-by-side comparison with PyTorch (bench/torch_mlp.py,
 * driven by bench/bench_train_vs_torch.py; method in docs/benchmarks.md).
 *
 * The model is the world-model MLP: depth x (linear(hidden) -> GELU), then
 * linear(out), MSE loss, AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, no
 * weight decay), no gradient clipping, one fixed random batch (x, y ~
 * N(0, 1)). One timed step is exactly one mxp_trainer_step call: zero
 * grads, forward, loss, backward, fused unscale/finite/stats pass, update
 * and recast. Reports the median over --steps timed steps after --warmup,
 * and the mean time per step in each phase (forward, backward, safety pass,
 * optimizer) from the trainer's phase clocks, with the fastest step's phase
 * times beside them (on a shared machine the minimum is what the code can
 * do, the mean what the machine granted), the process and calling-thread
 * CPU time per step, and the kernel thread pool's fork/join count and time
 * per step (kernels/threads.h, mxp_threads_stats: forks, the wall time
 * inside them, and how long the caller waited for the workers at the join).
 *
 * usage: bench_train_step [--in N] [--hidden N] [--depth N] [--out N]
 *        [--batch N] [--steps N] [--warmup N] [--precision MODE]
 *        [--ftz] [--fp16-accumulate K] [--json]
 * --fp16-accumulate K: mixed_fp16/fp16 with the FP16 fast-accumulate GEMM,
 * promotion every K products (training.fp16_accumulate=fp16,
 * training.fp16_accumulate_k=K; kernels.h gemm_f16acc).
 * Threads: MIXPREC_NUM_THREADS (kernel thread pool); ISA: MIXPREC_FORCE_ISA.
 * Not a test: prints timings, exits 0 on success, 2 on bad arguments.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime and its CPU-time clocks */
#include <mixprec/mixprec.h>

#include "kernels/threads.h"

#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

typedef struct args {
    int64_t in, hidden, out, batch;
    int depth, steps, warmup;
    int64_t acc_k; /* --fp16-accumulate: 0 = FP32 accumulation */
    mxp_precision precision;
    bool ftz, json;
} args;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* CPU seconds of the process or of the calling thread. */
static double cpu_now(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(const char *why) {
    fprintf(stderr,
            "bench_train_step: %s\n"
            "usage: bench_train_step [--in N] [--hidden N] [--depth N] [--out N] [--batch N]\n"
            "       [--steps N] [--warmup N] [--precision fp32|mixed_bf16|mixed_fp16|bf16|fp16]\n"
            "       [--ftz] [--fp16-accumulate K] [--json]\n",
            why);
    return 2;
}

/* Parse a positive integer argument; false when missing or out of range. */
static bool parse_pos(const char *s, int64_t max, int64_t *out) {
    if (!s) return false;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || v < 1 || v > max) return false;
    *out = v;
    return true;
}

static int parse(int argc, char **argv, args *a) {
    *a = (args){.in = 4, .hidden = 256, .out = 4, .batch = 32, .depth = 3, .steps = 200,
                .warmup = 20, .precision = MXP_PRECISION_FP32};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n = 0;
        if (!strcmp(k, "--json")) a->json = true;
        else if (!strcmp(k, "--ftz")) a->ftz = true;
        else if (!strcmp(k, "--precision")) {
            mxp_error err = {0};
            if (!v || mxp_precision_parse(v, &a->precision, &err) != MXP_OK)
                return usage(v ? err.msg : "--precision needs a value");
            i++;
        } else {
            if (!parse_pos(v, 1 << 20, &n)) return usage("an option needs a value in [1, 2^20]");
            if (!strcmp(k, "--in")) a->in = n;
            else if (!strcmp(k, "--hidden")) a->hidden = n;
            else if (!strcmp(k, "--out")) a->out = n;
            else if (!strcmp(k, "--batch")) a->batch = n;
            else if (!strcmp(k, "--depth") && n <= 30) a->depth = (int)n;
            else if (!strcmp(k, "--steps")) a->steps = (int)n;
            else if (!strcmp(k, "--warmup")) a->warmup = (int)n;
            else if (!strcmp(k, "--fp16-accumulate") && n <= 4096) a->acc_k = n;
            else return usage("unknown option or value out of range");
            i++;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc;
    if (a.ftz) mxp_fpenv_set_ftz(true);

    mxp_error err = {0};
    mxp_model_spec spec = mxp_model_spec_mlp(a.in, a.hidden, a.depth, a.out, MXP_LAYER_GELU,
                                             false, MXP_LOSS_MSE, a.batch);
    mxp_precision_policy pol;
    mxp_precision_policy_default(a.precision, &pol);
    if (a.acc_k > 0 && pol.activation != MXP_DTYPE_F16)
        return usage("--fp16-accumulate needs --precision mixed_fp16 or fp16");
    pol.fp16_accum_k = (int)a.acc_k;
    mxp_model *m = NULL;
    mxp_trainer *t = NULL;
    if (mxp_model_create(&spec, &pol, 1234, &m, &err) != MXP_OK) {
        fprintf(stderr, "bench_train_step: %s\n", err.msg);
        return 1;
    }
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.clip_grad_norm = 0.0f; /* as the PyTorch loop: no clipping */
    if (mxp_trainer_create(m, &tc, &t, &err) != MXP_OK) {
        fprintf(stderr, "bench_train_step: %s\n", err.msg);
        mxp_model_destroy(m);
        return 1;
    }
    size_t nx = (size_t)(a.batch * a.in), ny = (size_t)(a.batch * a.out);
    float *x = mxp_calloc(nx, sizeof *x), *y = mxp_calloc(ny, sizeof *y);
    double *ms = mxp_calloc((size_t)a.steps, sizeof *ms);
    double *phs = mxp_calloc((size_t)a.steps * 4, sizeof *phs); /* per step, per phase */
    if (!x || !y || !ms || !phs) {
        fprintf(stderr, "bench_train_step: out of memory\n");
        return 1;
    }
    mxp_rng r;
    mxp_rng_init(&r, 42);
    for (size_t i = 0; i < nx; i++) x[i] = mxp_rng_normal(&r);
    for (size_t i = 0; i < ny; i++) y[i] = mxp_rng_normal(&r);
    mxp_batch b = {.x = x, .y = y, .B = a.batch};
    mxp_step_result res;
    int skipped = 0;
    mxp_train_stats st0 = {0}, st1, sa, sb;
    mxp_threads_stats p0 = {0}, p1;
    double cpu0 = 0, thr0 = 0;
    int min_step = 0;
    for (int s = 0; s < a.warmup + a.steps; s++) {
        if (s == a.warmup) {
            mxp_trainer_stats(t, &st0);
            mxp_threads_stats_get(&p0);
            cpu0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
            thr0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
        }
        mxp_trainer_stats(t, &sa);
        double t0 = mxp_time_now();
        if (mxp_trainer_step(t, &b, 1, &res, &err) != MXP_OK) {
            fprintf(stderr, "bench_train_step: step %d: %s\n", s, err.msg);
            return 1;
        }
        double dt = mxp_time_now() - t0;
        mxp_trainer_stats(t, &sb);
        if (s >= a.warmup) {
            int k = s - a.warmup;
            ms[k] = dt * 1e3;
            if (ms[k] < ms[min_step]) min_step = k;
            phs[4 * k + 0] = (sb.time_forward_s - sa.time_forward_s) * 1e3;
            phs[4 * k + 1] = (sb.time_backward_s - sa.time_backward_s) * 1e3;
            phs[4 * k + 2] = (sb.time_safety_s - sa.time_safety_s) * 1e3;
            phs[4 * k + 3] = (sb.time_optimizer_s - sa.time_optimizer_s) * 1e3;
        }
        skipped += res.skipped;
    }
    const double cpu_ms = (cpu_now(CLOCK_PROCESS_CPUTIME_ID) - cpu0) * 1e3 / a.steps;
    const double thr_ms = (cpu_now(CLOCK_THREAD_CPUTIME_ID) - thr0) * 1e3 / a.steps;
    mxp_threads_stats_get(&p1);
    const double forks = (double)(p1.forks - p0.forks) / a.steps;
    const double fork_ms = (double)(p1.fork_ns - p0.fork_ns) * 1e-6 / a.steps;
    const double wait_ms = (double)(p1.join_wait_ns - p0.join_wait_ns) * 1e-6 / a.steps;
    const double *fast = phs + 4 * min_step; /* the phases of the fastest step */
    qsort(ms, (size_t)a.steps, sizeof *ms, cmp_double);
    double med = ms[a.steps / 2];
    /* Mean ms per timed step in each phase (the trainer's phase clocks). */
    mxp_trainer_stats(t, &st1);
    const double per = 1e3 / a.steps;
    const double ph[4] = {(st1.time_forward_s - st0.time_forward_s) * per,
                          (st1.time_backward_s - st0.time_backward_s) * per,
                          (st1.time_safety_s - st0.time_safety_s) * per,
                          (st1.time_optimizer_s - st0.time_optimizer_s) * per};
    const char *isa = getenv("MIXPREC_FORCE_ISA");
    const char *thr = getenv("MIXPREC_NUM_THREADS");
    if (a.json)
        printf("{\"framework\":\"mixprec\",\"precision\":\"%s\",\"in\":%lld,\"hidden\":%lld,"
               "\"depth\":%d,\"out\":%lld,\"batch\":%lld,\"steps\":%d,\"median_ms\":%.5f,"
               "\"min_ms\":%.5f,\"samples_per_s\":%.1f,\"final_loss\":%.6g,\"skipped\":%d,"
               "\"threads\":\"%s\",\"isa\":\"%s\",\"ftz\":%s,\"forward_ms\":%.5f,"
               "\"backward_ms\":%.5f,\"safety_ms\":%.5f,\"optimizer_ms\":%.5f,"
               "\"min_step_phases_ms\":[%.5f,%.5f,%.5f,%.5f],\"cpu_ms\":%.5f,"
               "\"caller_cpu_ms\":%.5f,\"forks_per_step\":%.2f,\"fork_ms\":%.5f,"
               "\"join_wait_ms\":%.5f,\"fp16_accumulate_k\":%lld}\n",
               mxp_precision_name(a.precision), (long long)a.in, (long long)a.hidden, a.depth,
               (long long)a.out, (long long)a.batch, a.steps, med, ms[0],
               (double)a.batch / (med * 1e-3), res.loss, skipped, thr ? thr : "default",
               isa ? isa : "auto", a.ftz ? "true" : "false", ph[0], ph[1], ph[2], ph[3],
               fast[0], fast[1], fast[2], fast[3], cpu_ms, thr_ms, forks, fork_ms, wait_ms,
               (long long)a.acc_k);
    else
        printf("mixprec %s%s in=%lld hidden=%lldx%d out=%lld batch=%lld: median %.4f ms/step "
               "(min %.4f), %.0f samples/s, final loss %.5g, %d skipped\n",
               mxp_precision_name(a.precision), a.acc_k ? " (fp16 accumulate)" : "",
               (long long)a.in, (long long)a.hidden, a.depth,
               (long long)a.out, (long long)a.batch, med, ms[0], (double)a.batch / (med * 1e-3),
               res.loss, skipped);
    if (!a.json) {
        printf("  mean per step: forward %.4f ms, backward %.4f ms, safety %.4f ms, "
               "optimizer %.4f ms\n", ph[0], ph[1], ph[2], ph[3]);
        printf("  fastest step:  forward %.4f ms, backward %.4f ms, safety %.4f ms, "
               "optimizer %.4f ms\n", fast[0], fast[1], fast[2], fast[3]);
        printf("  cpu per step: process %.4f ms, calling thread %.4f ms\n", cpu_ms, thr_ms);
        printf("  pool per step: %.2f fork/joins, %.4f ms inside them, %.4f ms waiting at "
               "the join\n", forks, fork_ms, wait_ms);
    }
    mxp_free(phs);
    mxp_free(x);
    mxp_free(y);
    mxp_free(ms);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
    return 0;
}
