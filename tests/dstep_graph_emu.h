/* tests/dstep_graph_emu.h: the emulated device with CUDA-Graph semantics
 * (the "recording table"), shared by tests/test_dstep_graph.c (the device
 * step's graph path against its eager path) and tests/test_bench_dstep_emu.c
 * (the GPU benchmark's graph variant).
 *
 * rec_ops(): the emulated table (tests/dstep_emu.h) whose capturable ops
 * (every op the step issues between its uploads and its report), while a
 * capture is open, are NOT run but recorded with their arguments, as a
 * CUDA stream capture does; graph_end turns the record into a "graph" (or
 * replaces the one given: the in-place update), graph_launch replays it
 * (the recorded arguments: whatever the plan baked in stays baked in). An
 * upload, a download, a control-block write, a report or a sync while a
 * capture is open is counted as illegal (on CUDA: not captured as the plan
 * means, or illegal). The device (`dev` of the plan) is a gdev, whose first
 * member is the emu_dev the plain ops use; gdev.stale_update is the
 * negative control of test_dstep_graph.c.
 */
#ifndef MIXPREC_TESTS_DSTEP_GRAPH_EMU_H
#define MIXPREC_TESTS_DSTEP_GRAPH_EMU_H

#include "backend/cuda/dstep.h"
#include "dstep_emu.h"

enum {
    R_STORE, R_WIDEN, R_ZERO, R_LT, R_BIAS_GRAD, R_ACT_FWD, R_ACT_BWD, R_LN_FWD, R_LN_BWD,
    R_MSE, R_XENT, R_FOLD, R_GRAD_PASS, R_DECIDE, R_ADAMW, R_SGD
};

typedef struct grec { /* one captured call: its op and arguments */
    int op;
    const void *p[9];
    int64_t i[3];
    size_t count;
    float f;
    int a;
    bool b[3];
    mxp_dtype t;
} grec;

typedef struct graph {
    grec *r;
    int n;
} graph;

typedef struct gdev {
    emu_dev e; /* first: the emulated ops take a gdev as an emu_dev */
    bool recording;
    grec *r;
    int n, cap;
    int captures, updates, launches;
    int illegal; /* non-capturable calls while recording */
    bool stale_update; /* negative control: an update keeps the old graph */
} gdev;

#define G ((gdev *)dev)

/* While recording: append the call and return 1 (the caller returns 0). */
static int capture(void *dev, const grec *x) {
    gdev *g = G;
    if (!g->recording) return 0;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 256;
        g->r = realloc(g->r, (size_t)g->cap * sizeof *g->r);
        if (!g->r) abort();
    }
    g->r[g->n++] = *x;
    return 1;
}

#define W_(k, x) ((void *)(uintptr_t)(x)->p[k])

static int g_store(void *dev, mxp_dtype t, void *out, const float *src, size_t count,
                   float *amax, int64_t *nonfinite, char *why, size_t n) {
    grec x = {.op = R_STORE, .t = t, .p = {out, src, amax, nonfinite}, .count = count};
    return capture(dev, &x) ? 0 : emu_store_scan_op(dev, t, out, src, count, amax, nonfinite,
                                                   why, n);
}
static int g_widen(void *dev, mxp_dtype t, float *out, const void *src, size_t count,
                   char *why, size_t n) {
    grec x = {.op = R_WIDEN, .t = t, .p = {out, src}, .count = count};
    return capture(dev, &x) ? 0 : emu_widen_op(dev, t, out, src, count, why, n);
}
static int g_zero(void *dev, void *p, size_t bytes, char *why, size_t n) {
    grec x = {.op = R_ZERO, .p = {p}, .count = bytes};
    return capture(dev, &x) ? 0 : emu_zero(dev, p, bytes, why, n);
}
static int g_lt(void *dev, void *plan, const void *A, const void *B, float *D,
                const float *bias, char *why, size_t n) {
    grec x = {.op = R_LT, .p = {plan, A, B, D, bias}};
    return capture(dev, &x) ? 0 : emu_lt_run(dev, plan, A, B, D, bias, why, n);
}
static int g_bias_grad(void *dev, float *dbias, const float *dy, int64_t B, int64_t C,
                       char *why, size_t n) {
    grec x = {.op = R_BIAS_GRAD, .p = {dbias, dy}, .i = {B, C}};
    return capture(dev, &x) ? 0 : emu_bias_grad_op(dev, dbias, dy, B, C, why, n);
}
static int g_act_fwd(void *dev, int act, float *y, const float *xx, size_t count, char *why,
                     size_t n) {
    grec x = {.op = R_ACT_FWD, .a = act, .p = {y, xx}, .count = count};
    return capture(dev, &x) ? 0 : emu_act_fwd_op(dev, act, y, xx, count, why, n);
}
static int g_act_bwd(void *dev, int act, float *dx, const float *dy, const float *s,
                     size_t count, char *why, size_t n) {
    grec x = {.op = R_ACT_BWD, .a = act, .p = {dx, dy, s}, .count = count};
    return capture(dev, &x) ? 0 : emu_act_bwd_op(dev, act, dx, dy, s, count, why, n);
}
static int g_ln_fwd(void *dev, float *y, float *mean, float *rstd, const float *xx,
                    const float *gamma, const float *beta, int64_t B, int64_t C, float eps,
                    char *why, size_t n) {
    grec x = {.op = R_LN_FWD, .p = {y, mean, rstd, xx, gamma, beta}, .i = {B, C}, .f = eps};
    return capture(dev, &x) ? 0 : emu_ln_fwd_op(dev, y, mean, rstd, xx, gamma, beta, B, C, eps,
                                               why, n);
}
static int g_ln_bwd(void *dev, float *dx, float *dgamma, float *dbeta, const float *dy,
                    const float *xx, const float *mean, const float *rstd, const float *gamma,
                    int64_t B, int64_t C, char *why, size_t n) {
    grec x = {.op = R_LN_BWD, .p = {dx, dgamma, dbeta, dy, xx, mean, rstd, gamma}, .i = {B, C}};
    return capture(dev, &x) ? 0 : emu_ln_bwd_op(dev, dx, dgamma, dbeta, dy, xx, mean, rstd,
                                               gamma, B, C, why, n);
}
static int g_mse(void *dev, float *dpred, const float *pred, const float *target, int64_t B,
                 int64_t C, float gs, double *loss, char *why, size_t n) {
    grec x = {.op = R_MSE, .p = {dpred, pred, target, loss}, .i = {B, C}, .f = gs};
    return capture(dev, &x) ? 0 : emu_mse_op(dev, dpred, pred, target, B, C, gs, loss, why, n);
}
static int g_xent(void *dev, float *dl, const float *logits, const int32_t *labels, int64_t B,
                  int64_t C, float gs, double *loss, char *why, size_t n) {
    grec x = {.op = R_XENT, .p = {dl, logits, labels, loss}, .i = {B, C}, .f = gs};
    return capture(dev, &x) ? 0 : emu_xent_op(dev, dl, logits, labels, B, C, gs, loss, why, n);
}
static int g_fold(void *dev, double *loss, const double *slots, int k, int64_t batch, char *why,
                  size_t n) {
    grec x = {.op = R_FOLD, .p = {loss, slots}, .a = k, .i = {batch}};
    return capture(dev, &x) ? 0 : emu_loss_fold_op(dev, loss, slots, k, batch, why, n);
}
static int g_grad_pass(void *dev, float *g, size_t count, float near_at, char *why, size_t n) {
    grec x = {.op = R_GRAD_PASS, .p = {g}, .count = count, .f = near_at};
    return capture(dev, &x) ? 0 : emu_grad_pass_op(dev, g, count, near_at, why, n);
}
static int g_decide(void *dev, bool extra_inf, uint64_t n_params, char *why, size_t n) {
    grec x = {.op = R_DECIDE, .b = {extra_inf}, .count = (size_t)n_params};
    return capture(dev, &x) ? 0 : emu_decide_op(dev, extra_inf, n_params, why, n);
}
static int g_adamw(void *dev, float *master, uint16_t *work, bool bf16, bool sr, const float *g,
                   float *m, float *v, size_t count, char *why, size_t n) {
    grec x = {.op = R_ADAMW, .p = {master, work, g, m, v}, .b = {bf16, sr}, .count = count};
    return capture(dev, &x) ? 0 : emu_adamw_op(dev, master, work, bf16, sr, g, m, v, count, why,
                                              n);
}
static int g_sgd(void *dev, float *master, uint16_t *work, bool bf16, bool sr, const float *g,
                 float *buf, size_t count, char *why, size_t n) {
    grec x = {.op = R_SGD, .p = {master, work, g, buf}, .b = {bf16, sr}, .count = count};
    return capture(dev, &x) ? 0 : emu_sgd_op(dev, master, work, bf16, sr, g, buf, count, why, n);
}

/* One recorded call, run. */
static int replay1(void *dev, const grec *x, char *why, size_t n) {
    switch (x->op) {
    case R_STORE:
        return emu_store_scan_op(dev, x->t, W_(0, x), x->p[1], x->count, W_(2, x), W_(3, x), why,
                                 n);
    case R_WIDEN: return emu_widen_op(dev, x->t, W_(0, x), x->p[1], x->count, why, n);
    case R_ZERO: return emu_zero(dev, W_(0, x), x->count, why, n);
    case R_LT: return emu_lt_run(dev, W_(0, x), x->p[1], x->p[2], W_(3, x), x->p[4], why, n);
    case R_BIAS_GRAD: return emu_bias_grad_op(dev, W_(0, x), x->p[1], x->i[0], x->i[1], why, n);
    case R_ACT_FWD: return emu_act_fwd_op(dev, x->a, W_(0, x), x->p[1], x->count, why, n);
    case R_ACT_BWD:
        return emu_act_bwd_op(dev, x->a, W_(0, x), x->p[1], x->p[2], x->count, why, n);
    case R_LN_FWD:
        return emu_ln_fwd_op(dev, W_(0, x), W_(1, x), W_(2, x), x->p[3], x->p[4], x->p[5],
                             x->i[0], x->i[1], x->f, why, n);
    case R_LN_BWD:
        return emu_ln_bwd_op(dev, W_(0, x), W_(1, x), W_(2, x), x->p[3], x->p[4], x->p[5],
                             x->p[6], x->p[7], x->i[0], x->i[1], why, n);
    case R_MSE:
        return emu_mse_op(dev, W_(0, x), x->p[1], x->p[2], x->i[0], x->i[1], x->f, W_(3, x), why,
                          n);
    case R_XENT:
        return emu_xent_op(dev, W_(0, x), x->p[1], x->p[2], x->i[0], x->i[1], x->f, W_(3, x),
                           why, n);
    case R_FOLD: return emu_loss_fold_op(dev, W_(0, x), x->p[1], x->a, x->i[0], why, n);
    case R_GRAD_PASS: return emu_grad_pass_op(dev, W_(0, x), x->count, x->f, why, n);
    case R_DECIDE: return emu_decide_op(dev, x->b[0], (uint64_t)x->count, why, n);
    case R_ADAMW:
        return emu_adamw_op(dev, W_(0, x), W_(1, x), x->b[0], x->b[1], x->p[2], W_(3, x),
                            W_(4, x), x->count, why, n);
    case R_SGD:
        return emu_sgd_op(dev, W_(0, x), W_(1, x), x->b[0], x->b[1], x->p[2], W_(3, x), x->count,
                          why, n);
    default: return mxp_cudab_why(why, n, "recorder: op %d", x->op);
    }
}

/* Calls a capture must not contain. */
static int g_upload(void *dev, void *dst, const void *host, size_t bytes, char *why, size_t n) {
    if (G->recording) G->illegal++;
    return emu_upload(dev, dst, host, bytes, why, n);
}
static int g_download(void *dev, void *host, const void *src, size_t bytes, char *why,
                      size_t n) {
    if (G->recording) G->illegal++;
    return emu_download(dev, host, src, bytes, why, n);
}
static int g_sync(void *dev, char *why, size_t n) {
    if (G->recording) G->illegal++;
    return emu_sync(dev, why, n);
}
static int g_ctl_set(void *dev, const mxp_step_ctl *host, char *why, size_t n) {
    if (G->recording) G->illegal++;
    return emu_ctl_set(dev, host, why, n);
}
static int g_report(void *dev, mxp_step_ctl *host, char *why, size_t n) {
    if (G->recording) G->illegal++;
    return emu_report(dev, host, why, n);
}

static int g_report_aux(void *dev, void *host, size_t aux_bytes, char *why, size_t n) {
    if (G->recording) G->illegal++;
    return emu_report_aux(dev, host, aux_bytes, why, n);
}

static int g_begin(void *dev, char *why, size_t n) {
    if (G->recording) return mxp_cudab_why(why, n, "recorder: capture already open");
    G->recording = true;
    G->n = 0;
    return 0;
}
static int g_end(void *dev, void **out, char *why, size_t n) {
    if (!G->recording) return mxp_cudab_why(why, n, "recorder: no capture open");
    G->recording = false;
    graph *old = *out;
    if (old && G->stale_update) { /* the control: "updated", still the old calls */
        G->updates++;
        return 0;
    }
    graph *gr = old ? old : calloc(1, sizeof *gr);
    if (!gr) return mxp_cudab_why(why, n, "recorder: out of memory");
    free(gr->r);
    gr->r = malloc((size_t)(G->n ? G->n : 1) * sizeof *gr->r);
    if (!gr->r) return mxp_cudab_why(why, n, "recorder: out of memory");
    memcpy(gr->r, G->r, (size_t)G->n * sizeof *gr->r);
    gr->n = G->n;
    if (old)
        G->updates++;
    else
        G->captures++;
    *out = gr;
    return 0;
}
static int g_launch(void *dev, void *gp, char *why, size_t n) {
    const graph *gr = gp;
    G->launches++;
    for (int i = 0; i < gr->n; i++)
        if (replay1(dev, &gr->r[i], why, n)) return 1;
    return 0;
}
static void g_destroy(void *dev, void *gp) {
    graph *gr = gp;
    if (gr) free(gr->r);
    free(gr);
}

static mxp_ds_ops rec_ops(void) {
    mxp_ds_ops o = emu_ds_ops;
    o.name = "emulated+graphs";
    o.upload = g_upload;
    o.download = g_download;
    o.sync = g_sync;
    o.ctl_set = g_ctl_set;
    o.report = g_report;
    o.report_aux = g_report_aux;
    o.zero = g_zero;
    o.lt_run = g_lt;
    o.bias_grad = g_bias_grad;
    o.act_fwd = g_act_fwd;
    o.act_bwd = g_act_bwd;
    o.ln_fwd = g_ln_fwd;
    o.ln_bwd = g_ln_bwd;
    o.mse = g_mse;
    o.xent = g_xent;
    o.store_scan = g_store;
    o.widen = g_widen;
    o.grad_pass = g_grad_pass;
    o.decide = g_decide;
    o.adamw = g_adamw;
    o.sgd = g_sgd;
    o.loss_fold = g_fold;
    o.graph_begin = g_begin;
    o.graph_end = g_end;
    o.graph_launch = g_launch;
    o.graph_destroy = g_destroy;
    return o;
}

#endif /* MIXPREC_TESTS_DSTEP_GRAPH_EMU_H */
