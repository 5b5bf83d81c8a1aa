/* tools/mixprec/bench_peak.c: the machine's arithmetic peak.
 *
 * Each loop issues 12 independent 512-bit multiply-adds per iteration on
 * registers only (no loads, operands zero so no denormal assists): enough
 * chains to cover a 4-6 cycle latency at 2 instructions per cycle. Written
 * in inline assembly so the compiler can neither vectorise differently nor
 * spill; this file needs no AVX-512 compiler flags, and a loop runs only
 * after cpuid reports its instructions. Flops per instruction: vfmadd231ps
 * 16 lanes x 2, vdpbf16ps 16 lanes x 2 products x 2, vfmadd231ph 32 lanes x 2.
 * The peak is the BEST of the runs: the loop has no memory traffic and no
 * data dependence on anything else, so any slower run measured interference
 * (other processes, clock ramp-up), not the machine.
 */
#include "bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { PEAK_MAX_THREADS = 64, PEAK_CHAINS = 12 };

#define PEAK_CLOBBERS                                                          \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",    \
        "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc"

#define PEAK_BODY(op)                                                          \
    "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                        \
    "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"                                        \
    "1:\n\t" op " %%zmm1, %%zmm0, %%zmm2\n\t" op " %%zmm1, %%zmm0, %%zmm3\n\t" \
    op " %%zmm1, %%zmm0, %%zmm4\n\t" op " %%zmm1, %%zmm0, %%zmm5\n\t"          \
    op " %%zmm1, %%zmm0, %%zmm6\n\t" op " %%zmm1, %%zmm0, %%zmm7\n\t"          \
    op " %%zmm1, %%zmm0, %%zmm8\n\t" op " %%zmm1, %%zmm0, %%zmm9\n\t"          \
    op " %%zmm1, %%zmm0, %%zmm10\n\t" op " %%zmm1, %%zmm0, %%zmm11\n\t"        \
    op " %%zmm1, %%zmm0, %%zmm12\n\t" op " %%zmm1, %%zmm0, %%zmm13\n\t"        \
    "dec %0\n\t"                                                               \
    "jnz 1b\n\t"                                                               \
    "vzeroupper\n\t"

static void loop_fp32(long iters) {
    __asm__ volatile(PEAK_BODY("vfmadd231ps") : "+r"(iters) : : PEAK_CLOBBERS);
}

static void loop_bf16(long iters) {
    __asm__ volatile(PEAK_BODY("vdpbf16ps") : "+r"(iters) : : PEAK_CLOBBERS);
}

static void loop_fp16(long iters) {
    __asm__ volatile(PEAK_BODY("vfmadd231ph") : "+r"(iters) : : PEAK_CLOBBERS);
}

static const struct {
    const char *name;
    void (*loop)(long);
    double flops_per_inst;
} kinds[] = {
    [BENCH_PEAK_FP32_FMA] = {"fp32 fma (vfmadd231ps)", loop_fp32, 32.0},
    [BENCH_PEAK_BF16_DP] = {"bf16 dot (vdpbf16ps)", loop_bf16, 64.0},
    [BENCH_PEAK_FP16_FMA] = {"fp16 fma (vfmadd231ph)", loop_fp16, 64.0},
};
_Static_assert(sizeof kinds / sizeof kinds[0] == BENCH_PEAK_KIND_COUNT, "peak kinds");

const char *bench_peak_name(bench_peak_kind k) {
    return k < BENCH_PEAK_KIND_COUNT ? kinds[k].name : "invalid";
}

bool bench_peak_supported(bench_peak_kind k) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    switch (k) {
    case BENCH_PEAK_FP32_FMA: return f->avx512f;
    case BENCH_PEAK_BF16_DP: return f->avx512f && f->avx512_bf16;
    case BENCH_PEAK_FP16_FMA: return f->avx512f && f->avx512_fp16;
    default: return false;
    }
}

typedef struct peak_job {
    void (*loop)(long);
    long iters;
    atomic_bool *go;
} peak_job;

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    while (!atomic_load_explicit(j->go, memory_order_acquire)) {
    }
    j->loop(j->iters);
    return NULL;
}

/* Wall seconds for up to `threads` threads each running iters iterations
 * at once; *ran is the number that ran. */
static double run_threads(void (*loop)(long), long iters, int threads, int *ran) {
    pthread_t tid[PEAK_MAX_THREADS];
    atomic_bool go = false;
    peak_job job = {loop, iters, &go};
    int started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&tid[started], NULL, peak_thread, &job) != 0) break;
    *ran = started + 1;
    double t0 = mxp_time_now();
    atomic_store_explicit(&go, true, memory_order_release);
    loop(iters); /* the calling thread is one of them */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    return mxp_time_now() - t0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_peak_measure(bench_peak_kind k, int threads, int reps, double run_s) {
    if (!bench_peak_supported(k)) return 0.0;
    if (threads < 1) threads = 1;
    if (threads > PEAK_MAX_THREADS) threads = PEAK_MAX_THREADS;
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    /* calibrate on one thread (also warms the clocks up) */
    long iters = 1 << 20;
    int ran;
    double t = run_threads(kinds[k].loop, iters, 1, &ran);
    while (t < 0.02) {
        iters *= 4;
        t = run_threads(kinds[k].loop, iters, 1, &ran);
    }
    iters = (long)((double)iters * run_s / t) + 1;
    double g[64];
    for (int r = 0; r < reps; r++) {
        double s = run_threads(kinds[k].loop, iters, threads, &ran);
        g[r] = (double)ran * (double)iters * PEAK_CHAINS * kinds[k].flops_per_inst / s / 1e9;
    }
    qsort(g, (size_t)reps, sizeof g[0], cmp_double);
    return g[reps - 1];
}
