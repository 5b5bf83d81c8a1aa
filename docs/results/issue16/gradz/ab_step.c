/* In-process A/B: zero_grads + forward/backward vs discard_grads + forward/backward,
 * alternating, thread CPU time (CLOCK_THREAD_CPUTIME_ID). */
#define _POSIX_C_SOURCE 200809L
#include <mixprec/mixprec.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double tnow(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    mxp_precision p = MXP_PRECISION_FP32;
    if (argc > 1 && strcmp(argv[1], "mixed_bf16") == 0) p = MXP_PRECISION_MIXED_BF16;
    int reps = argc > 2 ? atoi(argv[2]) : 200;
    const int64_t B = 256;
    mxp_model_spec spec = mxp_model_spec_mlp(72, 512, 3, 65, MXP_LAYER_GELU, false, MXP_LOSS_MSE, B);
    mxp_precision_policy pol; mxp_precision_policy_default(p, &pol);
    mxp_model *m; mxp_error err = {0};
    if (mxp_model_create(&spec, &pol, 1, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    float *x = malloc(B * 72 * 4), *y = malloc(B * 65 * 4);
    mxp_rng r; mxp_rng_init(&r, 2);
    for (int i = 0; i < B * 72; i++) x[i] = mxp_rng_normal(&r);
    for (int i = 0; i < B * 65; i++) y[i] = mxp_rng_normal(&r);
    mxp_batch b = {x, y, NULL, B};
    double *ta = malloc(reps * 8), *tb = malloc(reps * 8), *tz = malloc(reps * 8), loss;
    mxp_nonfinite_site site;
    for (int w = 0; w < 10; w++) { mxp_model_zero_grads(m); mxp_model_step(m, &b, true, 1.0f, &loss, &site, &err); }
    for (int i = 0; i < reps; i++) {
        for (int o = 0; o < 2; o++) {
            if ((o == 0) == (i % 2 == 0)) {
                double t0 = tnow();
                mxp_model_zero_grads(m);
                double t1 = tnow();
                mxp_model_step(m, &b, true, 1.0f, &loss, &site, &err);
                double t2 = tnow();
                ta[i] = t2 - t0; tz[i] = t1 - t0;
            } else {
                double t2 = tnow();
                mxp_model_discard_grads(m);
                mxp_model_step(m, &b, true, 1.0f, &loss, &site, &err);
                tb[i] = tnow() - t2;
            }
        }
    }
    qsort(ta, reps, 8, cmpd); qsort(tb, reps, 8, cmpd); qsort(tz, reps, 8, cmpd);
    printf("%s P=%zu: zero+fwd/bwd median %.4f best %.4f ms | discard+fwd/bwd median %.4f best %.4f ms | memset alone median %.4f best %.4f ms | diff of medians %.4f ms\n",
           mxp_precision_name(p), mxp_model_num_params(m), ta[reps/2]*1e3, ta[0]*1e3, tb[reps/2]*1e3, tb[0]*1e3, tz[reps/2]*1e3, tz[0]*1e3, (ta[reps/2]-tb[reps/2])*1e3);
    return 0;
}
