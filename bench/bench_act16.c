/* bench/bench_act16.c: the fused passes with and without the activation
 * tables of 16-bit inputs (kernels/x86_avx512/loops_act16.c).
 *
 * Not a test (no verdict). For BF16 and FP16 stores it times, in thread CPU
 * time (CLOCK_THREAD_CPUTIME_ID) of the calling thread, the AVX-512 table's
 *   bias_act_store: bias + store + scan + GELU + store + scan, B x C;
 *   act_bwd_store: widen + GELU backward + store + scan, n elements
 *     (dY and the saved pre-activation in the same 16-bit dtype);
 * alternating calls with the tables off and on (mxp_avx512_act16_enable),
 * and prints the best and the median of each. Data: y ~ N(0, 1.5^2),
 * bias ~ N(0, 0.1^2), dY ~ N(0, 1). Run it with MIXPREC_NUM_THREADS=1 to
 * time one thread's work (else the passes of 32K elements or more are split
 * over the pool and only the caller's share is counted).
 *
 * usage: bench_act16 [reps]   (default 200; the 1M / 512x2048 cases use
 * reps / 5). It first times the build of each table (the first call).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/loops.h"
#include "bench_ab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
static unsigned csr_now(void) { return _mm_getcsr(); }
#else
static unsigned csr_now(void) { return 0; }
#endif

static void fill(float *v, size_t n, mxp_rng *r, float s) {
    for (size_t i = 0; i < n; i++) v[i] = s * mxp_rng_normal(r);
}

static void bench_fwd(const mxp_kernels *k, mxp_dtype t, int64_t B, int64_t C, int reps) {
    const size_t n = (size_t)B * (size_t)C;
    float *y0 = malloc(n * 4), *y = malloc(n * 4), *bias = malloc((size_t)C * 4);
    void *yo = malloc(n * 2), *ao = malloc(n * 2);
    double *tm[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    mxp_rng r;
    mxp_rng_init(&r, 1);
    fill(y0, n, &r, 1.5f);
    fill(bias, (size_t)C, &r, 0.1f);
    for (int i = -2; i < reps; i++)
        for (int m = 0; m < 2; m++) {
            mxp_avx512_act16_enable(m == 1);
            memcpy(y, y0, n * 4);
            mxp_epilogue e = {.y = y, .bias = bias, .B = B, .C = C, .y_type = t, .y_out = yo,
                              .act = MXP_ACT_GELU, .a_type = t, .a_out = ao};
            const double t0 = ab_thread_ms();
            k->bias_act_store(&e);
            const double t1 = ab_thread_ms();
            if (i >= 0) tm[m][i] = t1 - t0;
        }
    char what[96];
    snprintf(what, sizeof what, "bias+store+scan+GELU+store+scan %lldx%lld", (long long)B,
             (long long)C);
    ab_report(what, mxp_dtype_name(t), "computed", "table", tm, reps);
    free(y0), free(y), free(bias), free(yo), free(ao), free(tm[0]), free(tm[1]);
}

static void bench_bwd(const mxp_kernels *k, mxp_dtype t, size_t n, int reps) {
    float *v = malloc(n * 4);
    void *dy = malloc(n * 2), *s = malloc(n * 2), *dx = malloc(n * 2);
    double *tm[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    mxp_rng r;
    mxp_rng_init(&r, 2);
    fill(v, n, &r, 1.0f);
    k->convert(t, dy, MXP_DTYPE_F32, v, n);
    fill(v, n, &r, 1.5f);
    k->convert(t, s, MXP_DTYPE_F32, v, n);
    for (int i = -2; i < reps; i++)
        for (int m = 0; m < 2; m++) {
            mxp_avx512_act16_enable(m == 1);
            mxp_act_bwd e = {.act = MXP_ACT_GELU, .n = n, .dy_type = t, .dy = dy, .s_type = t,
                             .s = s, .dx_type = t, .dx = dx};
            const double t0 = ab_thread_ms();
            k->act_bwd_store(&e);
            const double t1 = ab_thread_ms();
            if (i >= 0) tm[m][i] = t1 - t0;
        }
    char what[96];
    snprintf(what, sizeof what, "widen+GELU backward+store+scan %zu", n);
    ab_report(what, mxp_dtype_name(t), "computed", "table", tm, reps);
    free(v), free(dy), free(s), free(dx), free(tm[0]), free(tm[1]);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 5) {
        fprintf(stderr, "usage: bench_act16 [reps >= 5]\n");
        return 2;
    }
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("bench_act16: this CPU cannot run the AVX-512 table; nothing to time\n");
        return 0;
    }
    const mxp_kernels *k = mxp_kernels_avx512();
    /* the first call builds a table (this thread's MXCSR set) */
    const mxp_act16_fn fns[] = {MXP_ACT16_GELU, MXP_ACT16_TANH, MXP_ACT16_GELU_DERIV};
    const char *fn_names[] = {"gelu", "tanh", "gelu_deriv"};
    for (int f = 0; f < 3; f++)
        for (int t = 1; t < 3; t++) {
            const mxp_dtype dt = t == 1 ? MXP_DTYPE_BF16 : MXP_DTYPE_F16;
            const double t0 = ab_thread_ms();
            const float *T = mxp_avx512_act16_table(fns[f], dt, csr_now());
            const double t1 = ab_thread_ms();
            printf("table %-10s %-4s built in %.3f ms%s\n", fn_names[f], mxp_dtype_name(dt),
                   t1 - t0, T ? "" : " (none)");
        }
    const mxp_dtype ts[] = {MXP_DTYPE_BF16, MXP_DTYPE_F16};
    for (int i = 0; i < 2; i++) {
        bench_fwd(k, ts[i], 256, 512, reps);
        bench_fwd(k, ts[i], 512, 2048, reps / 5);
        bench_bwd(k, ts[i], (size_t)1 << 17, reps);
        bench_bwd(k, ts[i], (size_t)1 << 20, reps / 5);
    }
    mxp_avx512_act16_enable(true);
    return 0;
}
