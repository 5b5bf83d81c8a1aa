/* bench/bench_act_split.c: FP32 GELU / GELU backward with erf's large
 * branch on the large lanes only (kernels/x86_avx512/loops_split.h)
 * against the per-vector v_gelu / v_gelu_grad.
 *
 * Not a test (no verdict). Times, in thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID) of the calling thread, the AVX-512 table's
 *   bias_act_store: bias + store + scan + act + store + scan, FP32, B x C;
 *   act_bwd_store: widen + GELU backward + store + scan, FP32, n elements;
 *   gelu_fwd / gelu_bwd / tanh_fwd (unfused, as nn/block.c calls them);
 * alternating calls with the split off and on (mxp_avx512_act_split_enable)
 * in one process, and prints the best and the median of each. Tanh is not
 * split (it was slower so): its two lines run the same code both ways, a
 * control of the noise. Inputs:
 *   normal: y ~ N(0, 1.5^2) (bias ~ N(0, 0.1^2), dY ~ N(0, 1));
 *   small:  |y| < 0.6, every lane in erf's and tanh's small branch;
 *   large:  2 <= |y| < 6, every lane in their large branch.
 * Run with MIXPREC_NUM_THREADS=1 (else passes of 32K elements or more are
 * split over the pool and only the caller's share is counted).
 *
 * usage: bench_act_split [reps]   (default 200; 1M / 512x2048 use reps / 5)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/loops.h"
#include "bench_ab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { D_NORMAL, D_SMALL, D_LARGE } data_kind;
static const char *data_names[] = {"normal", "small", "large"};

static void fill(float *v, size_t n, mxp_rng *r, float s, data_kind d) {
    for (size_t i = 0; i < n; i++) {
        const float u = mxp_rng_uniform(r);
        const float sign = mxp_rng_uniform(r) < 0.5f ? -1.0f : 1.0f;
        switch (d) {
        case D_SMALL: v[i] = sign * 0.6f * u; break;
        case D_LARGE: v[i] = sign * (2.0f + 4.0f * u); break;
        default: v[i] = s * mxp_rng_normal(r); break;
        }
    }
}

typedef enum { K_FUSED_FWD, K_FUSED_BWD, K_GELU_F, K_GELU_B, K_TANH_F } kind;

static void bench(const mxp_kernels *k, kind kd, mxp_act act, int64_t B, int64_t C, data_kind d,
                  int reps) {
    const size_t n = (size_t)B * (size_t)C;
    float *y0 = malloc(n * 4), *y = malloc(n * 4), *a = malloc(n * 4), *dy = malloc(n * 4);
    float *bias = malloc((size_t)C * 4);
    double *tm[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    mxp_rng r;
    mxp_rng_init(&r, 1);
    fill(y0, n, &r, 1.5f, d);
    fill(bias, (size_t)C, &r, 0.1f, D_NORMAL);
    if (d != D_NORMAL) memset(bias, 0, (size_t)C * 4); /* keep the extremes extreme */
    fill(dy, n, &r, 1.0f, D_NORMAL);
    for (int i = -2; i < reps; i++)
        for (int m = 0; m < 2; m++) {
            mxp_avx512_act_split_enable(m == 1);
            if (kd == K_FUSED_FWD) memcpy(y, y0, n * 4);
            double t0 = ab_thread_ms();
            switch (kd) {
            case K_FUSED_FWD: {
                mxp_epilogue e = {.y = y, .bias = bias, .B = B, .C = C, .y_type = MXP_DTYPE_F32,
                                  .y_out = y, .act = act, .a_type = MXP_DTYPE_F32, .a_out = a};
                t0 = ab_thread_ms();
                k->bias_act_store(&e);
                break;
            }
            case K_FUSED_BWD: {
                mxp_act_bwd e = {.act = MXP_ACT_GELU, .n = n, .dy_type = MXP_DTYPE_F32, .dy = dy,
                                 .s_type = MXP_DTYPE_F32, .s = y0, .dx_type = MXP_DTYPE_F32,
                                 .dx = a};
                t0 = ab_thread_ms();
                k->act_bwd_store(&e);
                break;
            }
            case K_GELU_F: k->gelu_fwd(a, y0, n); break;
            case K_GELU_B: k->gelu_bwd(a, dy, y0, n); break;
            default: k->tanh_fwd(a, y0, n); break;
            }
            const double t1 = ab_thread_ms();
            if (i >= 0) tm[m][i] = t1 - t0;
        }
    char what[96];
    const char *an = act == MXP_ACT_GELU ? "GELU" : "tanh";
    switch (kd) {
    case K_FUSED_FWD:
        snprintf(what, sizeof what, "bias+store+scan+%s+store+scan %lldx%lld", an, (long long)B,
                 (long long)C);
        break;
    case K_FUSED_BWD: snprintf(what, sizeof what, "widen+GELU backward+store+scan %zu", n); break;
    case K_GELU_F: snprintf(what, sizeof what, "gelu_fwd %zu", n); break;
    case K_GELU_B: snprintf(what, sizeof what, "gelu_bwd %zu", n); break;
    default: snprintf(what, sizeof what, "tanh_fwd %zu", n); break;
    }
    ab_report(what, data_names[d], "per-vector", "split", tm, reps);
    free(y0), free(y), free(a), free(dy), free(bias), free(tm[0]), free(tm[1]);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps < 5) {
        fprintf(stderr, "usage: bench_act_split [reps >= 5]\n");
        return 2;
    }
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("bench_act_split: this CPU cannot run the AVX-512 table; nothing to time\n");
        return 0;
    }
    const mxp_kernels *k = mxp_kernels_avx512();
    for (int d = 0; d < 3; d++) {
        bench(k, K_FUSED_FWD, MXP_ACT_GELU, 256, 512, (data_kind)d, reps);
        bench(k, K_FUSED_FWD, MXP_ACT_GELU, 512, 2048, (data_kind)d, reps / 5);
        bench(k, K_FUSED_BWD, MXP_ACT_GELU, 1, 1 << 17, (data_kind)d, reps);
        bench(k, K_FUSED_BWD, MXP_ACT_GELU, 1, 1 << 20, (data_kind)d, reps / 5);
        bench(k, K_FUSED_FWD, MXP_ACT_TANH, 256, 512, (data_kind)d, reps);
        bench(k, K_GELU_F, MXP_ACT_GELU, 1, 1 << 17, (data_kind)d, reps);
        bench(k, K_GELU_B, MXP_ACT_GELU, 1, 1 << 17, (data_kind)d, reps);
        bench(k, K_TANH_F, MXP_ACT_TANH, 1, 1 << 17, (data_kind)d, reps);
    }
    mxp_avx512_act_split_enable(true);
    return 0;
}
