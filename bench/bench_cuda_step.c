/* bench/bench_cuda_step.c: time the CUDA step kernels that exist today
 * (src/backend/cuda/kernels.cu, through the mxp_cudab_* API of
 * backend/cuda/cuda_backend.h) over N parameters, on one GPU.
 *
 * Per size N it times, with CUDA events recorded on the context's stream
 * around each call (one sample = one call, synchronised), the median and
 * the minimum over --iters samples after --warmup calls:
 *   grad_pass    fused unscale + finite check + stats (block pass + merge)
 *   decide       skip, clip coefficient, scaler rule (one thread)
 *   adamw_fp32   AdamW, FP32 master only
 *   adamw_bf16w  AdamW, FP32 master + BF16 work copy
 *   sgd_fp32     SGD with momentum, FP32 master
 * and, with the host clock, one whole step as the trainer will issue it:
 * ctl_set + grad_pass + decide + adamw_fp32 + report (the step's single
 * device-to-host copy and stream sync), i.e. launch overhead included.
 * Effective bandwidth = bytes each kernel must move / median time.
 *
 * The context's stream is read from backend/cuda/cuda_internal.cuh (plain C
 * structs; the API has no stream accessor): events on the legacy default
 * stream would not order against the context's non-blocking stream.
 *
 * usage: bench_cuda_step [--n N]... [--iters N] [--warmup N]
 *   default sizes 65536, 1048576, 16777216; iters 50; warmup 5.
 * Exit: 0 timings printed; 2 bad arguments; 1 a CUDA error; 77 built
 * without CUDA or no usable device (it then only proves it links and runs).
 * Not a test: it checks no values (tests/test_cuda_backend.c does).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <mixprec/mixprec.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MIXPREC_HAVE_CUDA
int main(void) {
    printf("bench_cuda_step: SKIP (built without CUDA)\n");
    return 77;
}
#else

#include <time.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_internal.cuh"

enum { MAX_SIZES = 8, NUM_KERNELS = 6 };

static char why[512];

#define CU(expr)                                                                         \
    do {                                                                                 \
        if ((expr) != 0) {                                                               \
            fprintf(stderr, "bench_cuda_step: %s failed: %s\n", #expr, why);             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define CR(expr)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (expr);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "bench_cuda_step: %s failed: %s\n", #expr,                   \
                    cudaGetErrorString(e_));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

typedef struct bufs {
    size_t n;
    float *g, *w, *m, *v, *buf; /* device, [n] */
    uint16_t *work;             /* device, [n] BF16 */
    mxp_step_ctl ctl;           /* host copy uploaded by ctl_set */
} bufs;

static const char *const kernel_names[NUM_KERNELS] = {
    "grad_pass", "decide", "adamw_fp32", "adamw_bf16w", "sgd_fp32", "step_host"};
/* Bytes each kernel must read + write per element (0: not bandwidth bound). */
static const double kernel_bytes[NUM_KERNELS] = {8, 0, 28, 30, 20, 0};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

static int usage(const char *msg) {
    fprintf(stderr,
            "bench_cuda_step: %s\n"
            "usage: bench_cuda_step [--n N]... [--iters N] [--warmup N]\n"
            "  N: 1..%d sizes, each 1..1073741824; iters 1..100000; warmup 0..100000\n",
            msg, MAX_SIZES);
    return 2;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || *s == '\0' || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Upload deterministic gradients (|g| ~ 1e-2), weights, moments. */
static void bufs_init(mxp_cudab_ctx *c, bufs *b, size_t n) {
    memset(b, 0, sizeof *b);
    b->n = n;
    const size_t fb = n * sizeof(float);
    void **ptrs[] = {(void **)&b->g, (void **)&b->w, (void **)&b->m, (void **)&b->v,
                     (void **)&b->buf};
    float *h = malloc(fb);
    uint16_t *hw = malloc(n * sizeof(uint16_t));
    if (!h || !hw) {
        fprintf(stderr, "bench_cuda_step: out of host memory for n=%zu\n", n);
        exit(1);
    }
    mxp_rng r;
    mxp_rng_init(&r, 42 + n);
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++) {
        CU(mxp_cudab_alloc(c, fb, ptrs[k], why, sizeof why));
        float amp = k == 3 ? 1e-4f : 1e-2f;
        for (size_t i = 0; i < n; i++) h[i] = k == 3 ? amp : mxp_rng_normal(&r) * amp;
        CU(mxp_cudab_upload(c, *ptrs[k], h, fb, why, sizeof why));
        CU(mxp_cudab_sync(c, why, sizeof why)); /* h is reused */
    }
    for (size_t i = 0; i < n; i++) hw[i] = 0x3f80; /* BF16 1.0 */
    CU(mxp_cudab_alloc(c, n * sizeof(uint16_t), (void **)&b->work, why, sizeof why));
    CU(mxp_cudab_upload(c, b->work, hw, n * sizeof(uint16_t), why, sizeof why));
    CU(mxp_cudab_sync(c, why, sizeof why));
    free(h);
    free(hw);
    mxp_step_ctl *k = &b->ctl;
    k->scale = 1.0f;
    k->inv_scale = 1.0f;
    k->clip_max = 0.0f;
    k->clip_coef = 1.0f; /* as decide leaves it with clipping off */
    k->seed = 1234;
    k->adamw = mxp_adamw_consts_make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    k->sgd = (mxp_sgd_consts){1e-2f, 0.9f, 0.0f, false, true, false};
    k->run_scaler_rule = false;
    CU(mxp_cudab_ctl_set(c, k, why, sizeof why));
    CU(mxp_cudab_sync(c, why, sizeof why));
}

static void bufs_free(mxp_cudab_ctx *c, bufs *b) {
    mxp_cudab_free(c, b->g);
    mxp_cudab_free(c, b->w);
    mxp_cudab_free(c, b->m);
    mxp_cudab_free(c, b->v);
    mxp_cudab_free(c, b->buf);
    mxp_cudab_free(c, b->work);
}

/* Issue kernel `which` once on the context's stream. */
static void issue(mxp_cudab_ctx *c, bufs *b, int which) {
    const size_t n = b->n;
    switch (which) {
    case 0: CU(mxp_cudab_grad_pass(c, b->g, n, 60000.0f, why, sizeof why)); break;
    case 1: CU(mxp_cudab_decide(c, false, n, why, sizeof why)); break;
    case 2:
        CU(mxp_cudab_adamw(c, b->w, NULL, true, false, b->g, b->m, b->v, n, why, sizeof why));
        break;
    case 3:
        CU(mxp_cudab_adamw(c, b->w, b->work, true, false, b->g, b->m, b->v, n, why,
                           sizeof why));
        break;
    case 4: CU(mxp_cudab_sgd(c, b->w, NULL, true, false, b->g, b->buf, n, why, sizeof why)); break;
    default: {
        mxp_step_ctl rep;
        CU(mxp_cudab_ctl_set(c, &b->ctl, why, sizeof why));
        CU(mxp_cudab_grad_pass(c, b->g, n, 60000.0f, why, sizeof why));
        CU(mxp_cudab_decide(c, false, n, why, sizeof why));
        CU(mxp_cudab_adamw(c, b->w, NULL, true, false, b->g, b->m, b->v, n, why, sizeof why));
        CU(mxp_cudab_report(c, &rep, why, sizeof why));
        if (rep.skip) {
            fprintf(stderr, "bench_cuda_step: n=%zu: a step was skipped (non-finite)\n", n);
            exit(1);
        }
    }
    }
}

/* Samples of kernel `which` in µs (CUDA events; host clock for step_host). */
static void sample(mxp_cudab_ctx *c, bufs *b, int which, int warmup, int iters, double *t) {
    cudaEvent_t e0, e1;
    CR(cudaEventCreate(&e0));
    CR(cudaEventCreate(&e1));
    for (int i = 0; i < warmup; i++) issue(c, b, which);
    CU(mxp_cudab_sync(c, why, sizeof why));
    for (int i = 0; i < iters; i++) {
        if (which == NUM_KERNELS - 1) {
            double t0 = now_us();
            issue(c, b, which); /* ends with the report's sync */
            t[i] = now_us() - t0;
            continue;
        }
        CR(cudaEventRecord(e0, c->stream));
        issue(c, b, which);
        CR(cudaEventRecord(e1, c->stream));
        CR(cudaEventSynchronize(e1));
        float ms = 0.0f;
        CR(cudaEventElapsedTime(&ms, e0, e1));
        t[i] = 1e3 * (double)ms;
    }
    CR(cudaEventDestroy(e0));
    CR(cudaEventDestroy(e1));
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
}

int main(int argc, char **argv) {
    int64_t sizes[MAX_SIZES] = {65536, 1048576, 16777216};
    int nsizes = 0, iters = 50, warmup = 5;
    for (int i = 1; i < argc; i++) {
        int64_t v = 0;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--n") == 0) {
            if (nsizes == MAX_SIZES) return usage("too many --n");
            if (!parse_i64(val, 1, (int64_t)1 << 30, &v)) return usage("bad --n");
            sizes[nsizes++] = v;
        } else if (strcmp(argv[i], "--iters") == 0) {
            if (!parse_i64(val, 1, 100000, &v)) return usage("bad --iters");
            iters = (int)v;
        } else if (strcmp(argv[i], "--warmup") == 0) {
            if (!parse_i64(val, 0, 100000, &v)) return usage("bad --warmup");
            warmup = (int)v;
        } else {
            return usage("unknown argument");
        }
        i++;
    }
    if (nsizes == 0) nsizes = 3;

    mxp_error err = {0};
    int ndev = 0;
    if (mxp_cuda_device_count(&ndev, &err) != MXP_OK) {
        printf("bench_cuda_step: SKIP (%s)\n", err.msg);
        return 77;
    }
    mxp_gpu_info info;
    if (mxp_cuda_device_info(0, &info, &err) != MXP_OK) {
        fprintf(stderr, "bench_cuda_step: %s\n", err.msg);
        return 1;
    }
    printf("device 0: %s, cc %d.%d, %d SMs, %zu MiB, driver %d, runtime %d\n", info.name,
           info.cc_major, info.cc_minor, info.multiprocessors, info.total_mem >> 20,
           info.driver_version, info.runtime_version);
    printf("iters %d after %d warm-up calls; CUDA events per call (step_host: host clock)\n",
           iters, warmup);
    mxp_cudab_ctx *c = NULL;
    CU(mxp_cudab_ctx_create(0, &c, why, sizeof why));
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t) return 1;
    printf("%-12s %10s %10s %10s %10s\n", "kernel", "n", "median_us", "min_us", "GB/s");
    for (int s = 0; s < nsizes; s++) {
        bufs b;
        bufs_init(c, &b, (size_t)sizes[s]);
        for (int k = 0; k < NUM_KERNELS; k++) {
            sample(c, &b, k, warmup, iters, t);
            double med = t[iters / 2];
            printf("%-12s %10zu %10.2f %10.2f", kernel_names[k], b.n, med, t[0]);
            if (kernel_bytes[k] > 0)
                printf(" %10.1f\n", kernel_bytes[k] * (double)b.n / (med * 1e3));
            else
                printf(" %10s\n", "-");
        }
        bufs_free(c, &b);
    }
    printf("device-to-host copies: %lld\n", (long long)mxp_cudab_d2h_count(c));
    free(t);
    mxp_cudab_ctx_destroy(c);
    return 0;
}
#endif
