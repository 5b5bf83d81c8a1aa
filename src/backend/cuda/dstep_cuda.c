/* backend/cuda/dstep_cuda.c: the CUDA ops table of the device step
 * (dstep.h), one line per op over cuda_backend.h; dev is an
 * mxp_cudab_ctx *. Compiled in every build; without MIXPREC_HAVE_CUDA
 * mxp_ds_ops_cuda returns NULL and nothing of CUDA is referenced (the OFF
 * build imports no CUDA symbol: tests/test_cuda_build.sh).
 *
 * Entry point: mxp_ds_ops_cuda. NOT yet run on a GPU (docs/gpu.md):
 * tests/test_cuda_dstep.c compares it with the emulated table there.
 */
#include "backend/cuda/dstep.h"

#ifdef MIXPREC_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"

#define CX ((mxp_cudab_ctx *)dev)

static int c_alloc(void *dev, size_t bytes, void **out, char *why, size_t n) {
    return mxp_cudab_alloc(CX, bytes, out, why, n);
}
static void c_free(void *dev, void *p) { mxp_cudab_free(CX, p); }
static int c_upload(void *dev, void *dst, const void *host, size_t bytes, char *why, size_t n) {
    return mxp_cudab_upload(CX, dst, host, bytes, why, n);
}
static int c_download(void *dev, void *host, const void *src, size_t bytes, char *why,
                      size_t n) {
    return mxp_cudab_download(CX, host, src, bytes, why, n);
}
static int c_sync(void *dev, char *why, size_t n) { return mxp_cudab_sync(CX, why, n); }
static int c_zero(void *dev, void *p, size_t bytes, char *why, size_t n) {
    return mxp_cudab_zero(CX, p, bytes, why, n);
}
static int c_lt_create(void *dev, const mxp_lt_desc *d, mxp_dtype ab, void **plan, char *why,
                       size_t n) {
    return mxp_cudab_lt_plan_create(CX, d, ab, (mxp_cudab_lt_plan **)plan, why, n);
}
static void c_lt_destroy(void *dev, void *plan) {
    mxp_cudab_lt_plan_destroy((mxp_cudab_lt_plan *)plan);
}
static int c_lt_run(void *dev, void *plan, const void *A, const void *B, float *D,
                    const float *bias, char *why, size_t n) {
    return mxp_cudab_lt_run(CX, (mxp_cudab_lt_plan *)plan, A, B, D, bias, why, n);
}
static int c_bias_grad(void *dev, float *dbias, const float *dy, int64_t B, int64_t C,
                       char *why, size_t n) {
    return mxp_cudab_bias_grad(CX, dbias, dy, B, C, why, n);
}
static int c_act_fwd(void *dev, int act, float *y, const float *x, size_t count, char *why,
                     size_t n) {
    return mxp_cudab_act_fwd(CX, act, y, x, count, why, n);
}
static int c_act_bwd(void *dev, int act, float *dx, const float *dy, const float *s,
                     size_t count, char *why, size_t n) {
    return mxp_cudab_act_bwd(CX, act, dx, dy, s, count, why, n);
}
static int c_ln_fwd(void *dev, float *y, float *mean, float *rstd, const float *x,
                    const float *gamma, const float *beta, int64_t B, int64_t C, float eps,
                    char *why, size_t n) {
    return mxp_cudab_layernorm_fwd(CX, y, mean, rstd, x, gamma, beta, B, C, eps, why, n);
}
static int c_ln_bwd(void *dev, float *dx, float *dgamma, float *dbeta, const float *dy,
                    const float *x, const float *mean, const float *rstd, const float *gamma,
                    int64_t B, int64_t C, char *why, size_t n) {
    return mxp_cudab_layernorm_bwd(CX, dx, dgamma, dbeta, dy, x, mean, rstd, gamma, B, C, why,
                                   n);
}
static int c_mse(void *dev, float *dpred, const float *pred, const float *target, int64_t B,
                 int64_t C, float grad_scale, double *loss, char *why, size_t n) {
    return mxp_cudab_mse(CX, dpred, pred, target, B, C, grad_scale, loss, why, n);
}
static int c_xent(void *dev, float *dlogits, const float *logits, const int32_t *labels,
                  int64_t B, int64_t C, float grad_scale, double *loss, char *why, size_t n) {
    return mxp_cudab_softmax_xent(CX, dlogits, logits, labels, B, C, grad_scale, loss, why, n);
}
static int c_store_scan(void *dev, mxp_dtype t, void *out, const float *src, size_t count,
                        float *amax, int64_t *nonfinite, char *why, size_t n) {
    return mxp_cudab_store_scan(CX, t, out, src, count, amax, nonfinite, why, n);
}
static int c_widen(void *dev, mxp_dtype t, float *out, const void *src, size_t count,
                   char *why, size_t n) {
    return mxp_cudab_widen(CX, t, out, src, count, why, n);
}
static int c_ctl_set(void *dev, const mxp_step_ctl *host, char *why, size_t n) {
    return mxp_cudab_ctl_set(CX, host, why, n);
}
static mxp_step_ctl *c_ctl_dev(void *dev) { return mxp_cudab_ctl_dev(CX); }
static int c_grad_pass(void *dev, float *g, size_t count, float near_at, char *why, size_t n) {
    return mxp_cudab_grad_pass(CX, g, count, near_at, why, n);
}
static int c_decide(void *dev, bool extra_inf, uint64_t n_params, char *why, size_t n) {
    return mxp_cudab_decide(CX, extra_inf, n_params, why, n);
}
static int c_adamw(void *dev, float *master, uint16_t *work, bool work_bf16, bool sr,
                   const float *g, float *m, float *v, size_t count, char *why, size_t n) {
    return mxp_cudab_adamw(CX, master, work, work_bf16, sr, g, m, v, count, why, n);
}
static int c_report(void *dev, mxp_step_ctl *host, char *why, size_t n) {
    return mxp_cudab_report(CX, host, why, n);
}
static int64_t c_d2h_count(const void *dev) {
    return mxp_cudab_d2h_count((const mxp_cudab_ctx *)dev);
}

static int c_sgd(void *dev, float *master, uint16_t *work, bool work_bf16, bool sr,
                 const float *g, float *buf, size_t count, char *why, size_t n) {
    return mxp_cudab_sgd(CX, master, work, work_bf16, sr, g, buf, count, why, n);
}

static int c_loss_fold(void *dev, double *loss, const double *slots, int k, int64_t batch,
                       char *why, size_t n) {
    return mxp_cudab_loss_fold(CX, loss, slots, k, batch, why, n);
}
static int c_host_alloc(void *dev, size_t bytes, void **out, char *why, size_t n) {
    return mxp_cudab_host_alloc(CX, bytes, out, why, n);
}
static void c_host_free(void *dev, void *p) { mxp_cudab_host_free(CX, p); }
static int c_graph_begin(void *dev, char *why, size_t n) {
    return mxp_cudab_graph_begin(CX, why, n);
}
static int c_graph_end(void *dev, void **graph, char *why, size_t n) {
    return mxp_cudab_graph_end(CX, graph, why, n);
}
static int c_graph_launch(void *dev, void *graph, char *why, size_t n) {
    return mxp_cudab_graph_launch(CX, graph, why, n);
}
static void c_graph_destroy(void *dev, void *graph) { mxp_cudab_graph_destroy(CX, graph); }

static void *c_aux_dev(void *dev, size_t *cap) {
    *cap = MXP_CUDAB_AUX_CAP;
    return mxp_cudab_aux_dev(CX);
}
static int c_report_aux(void *dev, void *host, size_t aux_bytes, char *why, size_t n) {
    return mxp_cudab_report_aux(CX, host, aux_bytes, why, n);
}
/* FP8 (dstep_fp8.c; lt8 plans are destroyed by c_lt_destroy) */
static int c_bias_add(void *dev, float *y, const float *bias, int64_t B, int64_t C, char *why,
                      size_t n) {
    return mxp_cudab_bias_add(CX, y, bias, B, C, why, n);
}
static int c_f8_quant(void *dev, mxp_dtype fmt, uint8_t *q, uint8_t *qt, const float *src,
                      int64_t rows, int64_t cols, const float *scale, float *amax, char *why,
                      size_t n) {
    return mxp_cudab_f8_quant(CX, fmt, q, qt, src, rows, cols, scale, amax, why, n);
}
static int c_lt8_create(void *dev, const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b, void **plan,
                        char *why, size_t n) {
    return mxp_cudab_lt8_plan_create(CX, d, a, b, (mxp_cudab_lt_plan **)plan, why, n);
}
static int c_lt8_run(void *dev, void *plan, const void *A, const void *B, float *D,
                     const float *a_scale, const float *b_scale, char *why, size_t n) {
    return mxp_cudab_lt8_run(CX, (mxp_cudab_lt_plan *)plan, A, B, D, a_scale, b_scale, why, n);
}
static int c_f8_update(void *dev, void *st, int n_slots, const mxp_ds_fp8_cfg *cfg, char *why,
                       size_t n) {
    return mxp_cudab_f8_update(CX, st, n_slots, (int)cfg->amax_algo, cfg->margin, why, n);
}
_Static_assert(MXP_CUDAB_AUX_OFF == MXP_DS_AUX_OFF, "one aux layout");

static const mxp_ds_ops cuda_ops = {
    .name = "cuda",
    .alloc = c_alloc,
    .free = c_free,
    .upload = c_upload,
    .download = c_download,
    .sync = c_sync,
    .zero = c_zero,
    .lt_create = c_lt_create,
    .lt_destroy = c_lt_destroy,
    .lt_run = c_lt_run,
    .bias_grad = c_bias_grad,
    .act_fwd = c_act_fwd,
    .act_bwd = c_act_bwd,
    .ln_fwd = c_ln_fwd,
    .ln_bwd = c_ln_bwd,
    .mse = c_mse,
    .xent = c_xent,
    .store_scan = c_store_scan,
    .widen = c_widen,
    .ctl_set = c_ctl_set,
    .ctl_dev = c_ctl_dev,
    .grad_pass = c_grad_pass,
    .decide = c_decide,
    .adamw = c_adamw,
    .report = c_report,
    .d2h_count = c_d2h_count,
    .sgd = c_sgd,
    .loss_fold = c_loss_fold,
    .host_alloc = c_host_alloc,
    .host_free = c_host_free,
    .graph_begin = c_graph_begin,
    .graph_end = c_graph_end,
    .graph_launch = c_graph_launch,
    .graph_destroy = c_graph_destroy,
    .aux_dev = c_aux_dev,
    .report_aux = c_report_aux,
    .bias_add = c_bias_add,
    .f8_quant = c_f8_quant,
    .lt8_create = c_lt8_create,
    .lt8_run = c_lt8_run,
    .f8_update = c_f8_update,
};

const mxp_ds_ops *mxp_ds_ops_cuda(void) { return &cuda_ops; }

#else

const mxp_ds_ops *mxp_ds_ops_cuda(void) { return NULL; }

#endif
