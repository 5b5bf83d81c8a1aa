/* tools/mixprec/bench_loops.c: bandwidth-bound kernels through a kernel
 * table, in GB/s (bytes each call must read plus write, counted from the
 * kernel's contract, divided by the median time per call).
 *
 * Every slot is called through `mxp_kernels`, so whichever table is passed
 * (the active one, generic) is what gets measured; buffers are n FP32
 * elements (narrow buffers n elements of their type), rows of 1024 for the
 * row-wise kernels.
 */
#include "bench.h"

#include <string.h>

enum { LOOP_ROW = 1024 };

typedef struct loop_bufs {
    const mxp_kernels *k;
    size_t n;
    float *x, *y, *dy, *g, *m, *v, *w;
    float *mean, *rstd, *gamma, *beta, *dgamma, *dbeta;
    void *narrow; /* n x 2 bytes (BF16/FP16) */
    void *byte;   /* n x 1 byte (FP8) */
    uint64_t counter;
    double sum_out; /* result slots of the reductions */
    float amax_out;
    int64_t nf_out;
} loop_bufs;

typedef struct loop_entry {
    const char *name;
    double bytes_per_elem;
    void (*run)(void *);
} loop_entry;

#define B(ptr) ((loop_bufs *)(ptr))

static void run_cvt_f32_bf16(void *p) {
    B(p)->k->convert(MXP_DTYPE_BF16, B(p)->narrow, MXP_DTYPE_F32, B(p)->x, B(p)->n);
}
static void run_cvt_bf16_f32(void *p) {
    B(p)->k->convert(MXP_DTYPE_F32, B(p)->y, MXP_DTYPE_BF16, B(p)->narrow, B(p)->n);
}
static void run_cvt_f32_f16(void *p) {
    B(p)->k->convert(MXP_DTYPE_F16, B(p)->narrow, MXP_DTYPE_F32, B(p)->x, B(p)->n);
}
static void run_cvt_f16_f32(void *p) {
    B(p)->k->convert(MXP_DTYPE_F32, B(p)->y, MXP_DTYPE_F16, B(p)->narrow, B(p)->n);
}
static void run_cvt_f32_e4m3(void *p) {
    B(p)->k->convert(MXP_DTYPE_F8_E4M3, B(p)->byte, MXP_DTYPE_F32, B(p)->x, B(p)->n);
}
static void run_cvt_e4m3_f32(void *p) {
    B(p)->k->convert(MXP_DTYPE_F32, B(p)->y, MXP_DTYPE_F8_E4M3, B(p)->byte, B(p)->n);
}
static void run_cvt_f32_e5m2(void *p) {
    B(p)->k->convert(MXP_DTYPE_F8_E5M2, B(p)->byte, MXP_DTYPE_F32, B(p)->x, B(p)->n);
}
static void run_cvt_e5m2_f32(void *p) {
    B(p)->k->convert(MXP_DTYPE_F32, B(p)->y, MXP_DTYPE_F8_E5M2, B(p)->byte, B(p)->n);
}
static void run_f32_e4m3_nan(void *p) {
    B(p)->k->f32_to_fp8(MXP_DTYPE_F8_E4M3, B(p)->byte, B(p)->x, B(p)->n, MXP_FP8_NAN);
}
static void run_fp8_quant_e4m3(void *p) {
    B(p)->k->fp8_quantize(MXP_DTYPE_F8_E4M3, B(p)->y, B(p)->x, B(p)->n, 8.0f, &B(p)->amax_out);
}
static void run_fp8_quant_e5m2(void *p) {
    B(p)->k->fp8_quantize(MXP_DTYPE_F8_E5M2, B(p)->y, B(p)->x, B(p)->n, 8.0f, &B(p)->amax_out);
}
static void run_cvt_sr_bf16(void *p) {
    B(p)->k->convert_sr(MXP_DTYPE_BF16, B(p)->narrow, B(p)->x, B(p)->n, 42, B(p)->counter);
    B(p)->counter += B(p)->n;
}
static void run_unscale(void *p) {
    mxp_grad_stats st;
    B(p)->k->unscale_stats(B(p)->g, B(p)->n, 1.0f, 60000.0f, &st);
}
static void run_adamw(void *p) {
    mxp_weights w = {.master = B(p)->w, .work = B(p)->narrow, .work_type = MXP_DTYPE_BF16};
    mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    B(p)->k->adamw(&w, B(p)->g, B(p)->m, B(p)->v, B(p)->n, &h, 1);
}
static void run_sgd(void *p) {
    mxp_weights w = {.master = B(p)->w};
    mxp_sgd_hparams h = {1e-3f, 0.9f, 0.0f, false};
    B(p)->k->sgd(&w, B(p)->g, B(p)->m, B(p)->n, &h, 2);
}
static void run_gelu_fwd(void *p) { B(p)->k->gelu_fwd(B(p)->y, B(p)->x, B(p)->n); }
static void run_gelu_bwd(void *p) { B(p)->k->gelu_bwd(B(p)->g, B(p)->dy, B(p)->x, B(p)->n); }
static void run_relu_fwd(void *p) { B(p)->k->relu_fwd(B(p)->y, B(p)->x, B(p)->n); }
static void run_axpy(void *p) { B(p)->k->axpy(B(p)->y, 1e-3f, B(p)->x, B(p)->n); }
static void run_sumsq(void *p) { B(p)->k->sumsq(B(p)->x, B(p)->n, &B(p)->sum_out); }
static void run_absmax(void *p) {
    B(p)->k->absmax(B(p)->x, B(p)->n, &B(p)->amax_out, &B(p)->nf_out);
}
static void run_ln_fwd(void *p) {
    loop_bufs *b = p;
    b->k->layernorm_fwd(b->y, b->mean, b->rstd, b->x, b->gamma, b->beta,
                        (int64_t)(b->n / LOOP_ROW), LOOP_ROW, 1e-5f);
}
static void run_ln_bwd(void *p) {
    loop_bufs *b = p;
    b->k->layernorm_bwd(b->g, b->dgamma, b->dbeta, b->dy, b->x, b->mean, b->rstd, b->gamma,
                        (int64_t)(b->n / LOOP_ROW), LOOP_ROW);
}
static void run_softmax(void *p) {
    loop_bufs *b = p;
    b->k->softmax_fwd(b->y, b->x, (int64_t)(b->n / LOOP_ROW), LOOP_ROW);
}
static void run_bias_grad(void *p) {
    loop_bufs *b = p;
    b->k->bias_grad(b->dgamma, b->dy, (int64_t)(b->n / LOOP_ROW), LOOP_ROW);
}

/* bytes per element: reads + writes the contract implies */
static const loop_entry entries[] = {
    {"convert f32->bf16", 6, run_cvt_f32_bf16},
    {"convert bf16->f32", 6, run_cvt_bf16_f32},
    {"convert f32->f16", 6, run_cvt_f32_f16},
    {"convert f16->f32", 6, run_cvt_f16_f32},
    {"convert f32->e4m3", 5, run_cvt_f32_e4m3},
    {"convert e4m3->f32", 5, run_cvt_e4m3_f32},
    {"convert f32->e5m2", 5, run_cvt_f32_e5m2},
    {"convert e5m2->f32", 5, run_cvt_e5m2_f32},
    {"f32_to_fp8 e4m3 (NaN on overflow)", 5, run_f32_e4m3_nan},
    {"fp8_quantize e4m3 (scaled, as f32)", 8, run_fp8_quant_e4m3},
    {"fp8_quantize e5m2 (scaled, as f32)", 8, run_fp8_quant_e5m2},
    {"convert_sr f32->bf16", 6, run_cvt_sr_bf16},
    {"unscale_stats", 8, run_unscale},
    {"adamw (master+bf16 recast)", 30, run_adamw}, /* g,m,v,w read; m,v,w,work written */
    {"sgd momentum", 20, run_sgd},                 /* g,buf,w read; buf,w written */
    {"gelu_fwd", 8, run_gelu_fwd},
    {"gelu_bwd", 12, run_gelu_bwd},
    {"relu_fwd", 8, run_relu_fwd},
    {"axpy", 12, run_axpy},
    {"sumsq", 4, run_sumsq},
    {"absmax", 4, run_absmax},
    {"layernorm_fwd", 8, run_ln_fwd},
    {"layernorm_bwd", 12, run_ln_bwd},
    {"softmax_fwd", 8, run_softmax},
    {"bias_grad", 4, run_bias_grad},
};
enum { LOOP_COUNT = sizeof entries / sizeof entries[0] };
_Static_assert((int)LOOP_COUNT <= (int)BENCH_LOOPS_MAX, "BENCH_LOOPS_MAX too small");

static void bufs_free(loop_bufs *b) {
    float **fs[] = {&b->x, &b->y, &b->dy, &b->g, &b->m, &b->v, &b->w, &b->mean,
                    &b->rstd, &b->gamma, &b->beta, &b->dgamma, &b->dbeta};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) mxp_free(*fs[i]);
    mxp_free(b->narrow);
    mxp_free(b->byte);
}

static bool bufs_make(loop_bufs *b, const mxp_kernels *k, size_t n) {
    memset(b, 0, sizeof *b);
    b->k = k;
    b->n = n;
    float **big[] = {&b->x, &b->y, &b->dy, &b->g, &b->m, &b->v, &b->w};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        if (!(*big[i] = mxp_calloc(n, sizeof(float)))) return false;
    size_t rows = n / LOOP_ROW + 1;
    float **row[] = {&b->mean, &b->rstd};
    for (size_t i = 0; i < 2; i++)
        if (!(*row[i] = mxp_calloc(rows, sizeof(float)))) return false;
    float **col[] = {&b->gamma, &b->beta, &b->dgamma, &b->dbeta};
    for (size_t i = 0; i < 4; i++)
        if (!(*col[i] = mxp_calloc(LOOP_ROW, sizeof(float)))) return false;
    if (!(b->narrow = mxp_calloc(n, 2)) || !(b->byte = mxp_calloc(n, 1))) return false;
    mxp_rng rng;
    mxp_rng_init(&rng, 3);
    for (size_t i = 0; i < n; i++) {
        b->x[i] = mxp_rng_normal(&rng);
        b->dy[i] = 0.1f * mxp_rng_normal(&rng);
        b->g[i] = 1e-3f * mxp_rng_normal(&rng);
        b->w[i] = 0.05f * mxp_rng_normal(&rng);
        b->v[i] = 1e-6f;
    }
    for (size_t i = 0; i < LOOP_ROW; i++) b->gamma[i] = 1.0f;
    mxp_convert(MXP_DTYPE_BF16, b->narrow, MXP_DTYPE_F32, b->x, n);
    mxp_convert(MXP_DTYPE_F8_E4M3, b->byte, MXP_DTYPE_F32, b->x, n);
    run_ln_fwd(b); /* mean and rstd for the backward */
    return true;
}

int bench_loops_run(const mxp_kernels *k, size_t n, int reps, double min_sample_s,
                    bench_loop_result *out) {
    n = (n + LOOP_ROW - 1) / LOOP_ROW * LOOP_ROW;
    loop_bufs b;
    if (!bufs_make(&b, k, n)) {
        bufs_free(&b);
        return 0;
    }
    for (int i = 0; i < LOOP_COUNT; i++) {
        out[i].name = entries[i].name;
        out[i].n = n;
        out[i].bytes = entries[i].bytes_per_elem * (double)n;
        out[i].t = bench_time(entries[i].run, &b, reps, 0.05, min_sample_s);
    }
    bufs_free(&b);
    return LOOP_COUNT;
}

typedef struct copy_ctx {
    float *dst;
    const float *src;
    size_t n;
} copy_ctx;

static void run_copy(void *p) {
    copy_ctx *c = p;
    memcpy(c->dst, c->src, c->n * sizeof(float));
}

bench_timing bench_copy(size_t n, int reps, double min_sample_s, double *bytes) {
    copy_ctx c = {mxp_calloc(n, sizeof(float)), mxp_calloc(n, sizeof(float)), n};
    bench_timing t = {0};
    *bytes = 8.0 * (double)n;
    if (c.dst && c.src) t = bench_time(run_copy, &c, reps, 0.05, min_sample_s);
    mxp_free(c.dst);
    mxp_free((void *)c.src);
    return t;
}
