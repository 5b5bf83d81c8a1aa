/* bench/bench_gemm_epi.c: the forward of one linear layer with its
 * epilogue inside the GEMM (gemm_epi) against the GEMM then bias_act_store.
 *
 * Not a test (no verdict). On the active kernel table, one thread
 * (MIXPREC_NUM_THREADS=1 is set here), it times in thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID), alternating the two variants call by call:
 *   old: gemm(y = x W^T); bias_act_store(bias, store y, scan, GELU, store, scan)
 *   new: gemm_epi (the same, the epilogue per block of y inside the GEMM)
 * for the layer shapes B x in -> out (GEMM M = B, K = in, N = out) of the
 * 512-wide batch-256 and the 2048-wide batch-512 MLPs, with FP32
 * activations and weights (fp32 mode: y stored in place) and BF16 ones
 * (mixed_bf16: FP32 y staged, y and GELU(y) stored as BF16), and prints
 * the best and the median of each and the ratio of the medians. The two
 * variants' outputs are compared bit for bit once (test_gemm_epi is the
 * test). Data: x ~ N(0, 1), W ~ N(0, 1/in), bias ~ N(0, 0.1^2).
 *
 * usage: bench_gemm_epi [reps]   (default 101; the 2048-wide shape reps / 5)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */

#include "kernels/kernels.h"
#include "bench_ab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *typed(mxp_dtype t, size_t n, mxp_rng *r, float s) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = s * mxp_rng_normal(r);
    void *out = malloc(n * mxp_dtype_info(t)->size);
    mxp_convert(t, out, MXP_DTYPE_F32, v, n);
    free(v);
    return out;
}

static void bench(const mxp_kernels *k, int64_t B, int64_t in, int64_t out, mxp_dtype t,
                  int reps) {
    const size_t n = (size_t)B * (size_t)out, es = mxp_dtype_info(t)->size;
    mxp_rng r;
    mxp_rng_init(&r, 11);
    void *x = typed(t, (size_t)(B * in), &r, 1.0f);
    void *w = typed(t, (size_t)(out * in), &r, 1.0f / sqrtf((float)in));
    float *bias = typed(MXP_DTYPE_F32, (size_t)out, &r, 0.1f);
    float *y[2] = {malloc(n * 4), malloc(n * 4)};
    void *yo[2] = {malloc(n * es), malloc(n * es)}, *ao[2] = {malloc(n * es), malloc(n * es)};
    double *tm[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    mxp_epilogue e[2];
    float y_amax[2] = {0}, a_amax[2] = {0}; /* the epilogues' result slots */
    int64_t y_nf[2] = {0}, a_nf[2] = {0};
    for (int v = 0; v < 2; v++)
        e[v] = (mxp_epilogue){.y = y[v], .bias = bias, .B = B, .C = out, .y_type = t,
                              .y_out = t == MXP_DTYPE_F32 ? (void *)y[v] : yo[v],
                              .act = MXP_ACT_GELU, .a_type = t, .a_out = ao[v],
                              .y_amax = &y_amax[v], .a_amax = &a_amax[v],
                              .y_nonfinite = &y_nf[v], .a_nonfinite = &a_nf[v]};
    for (int i = -2; i < reps; i++)
        for (int v = 0; v < 2; v++) {
            mxp_gemm_args g = {.trans_a = false, .trans_b = true, .M = B, .N = out, .K = in,
                               .a_type = t, .A = x, .lda = in, .b_type = t, .B = w, .ldb = in,
                               .C = y[v], .ldc = out, .alpha = 1.0f, .beta = 0.0f};
            const double t0 = ab_thread_ms();
            if (v == 0) {
                k->gemm(&g);
                k->bias_act_store(&e[0]);
            } else {
                k->gemm_epi(&g, &e[1]);
            }
            const double dt = ab_thread_ms() - t0;
            if (i >= 0) tm[v][i] = dt;
        }
    const bool same = memcmp(y[0], y[1], n * 4) == 0 && memcmp(ao[0], ao[1], n * es) == 0 &&
                      (t == MXP_DTYPE_F32 || memcmp(yo[0], yo[1], n * es) == 0) &&
                      y_amax[0] == y_amax[1] && a_amax[0] == a_amax[1];
    char what[96];
    snprintf(what, sizeof what, "%s %lldx%lldx%lld %s GELU%s", k->isa, (long long)B,
             (long long)out, (long long)in, mxp_dtype_name(t), same ? "" : " MISMATCH");
    ab_report(what, "", "gemm+bias_act_store", "gemm_epi", tm, reps);
    printf("%-44s        median ratio old/new %.3fx\n", "", tm[0][reps / 2] / tm[1][reps / 2]);
    free(x), free(w), free(bias), free(tm[0]), free(tm[1]);
    for (int v = 0; v < 2; v++) free(y[v]), free(yo[v]), free(ao[v]);
}

int main(int argc, char **argv) {
    setenv("MIXPREC_NUM_THREADS", "1", 1);
    const int reps = argc > 1 ? atoi(argv[1]) : 101;
    if (reps < 1) {
        fprintf(stderr, "bench_gemm_epi: reps must be >= 1 (got %s)\n", argv[1]);
        return 2;
    }
    const mxp_kernels *k = mxp_kernels_get();
    const mxp_dtype types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16};
    for (int i = 0; i < 2; i++) bench(k, 256, 512, 512, types[i], reps);
    for (int i = 0; i < 2; i++) bench(k, 512, 2048, 2048, types[i], reps / 5 > 0 ? reps / 5 : 1);
    return 0;
}
