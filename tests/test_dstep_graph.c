/* tests/test_dstep_graph.c: the device step's CUDA-Graph path
 * (backend/cuda/dstep_run.c graphed_work) on an emulated device with graph
 * semantics, against the same plan run eagerly on the plain emulated
 * device (tests/dstep_emu.h; itself held to the CPU trainer by
 * test_dstep_emu.c).
 *
 * The recording table: the emulated table whose capturable ops (every op
 * the step issues between its uploads and its report), while a capture is
 * open, are NOT run but recorded with their arguments, as a CUDA stream
 * capture does; graph_end turns the record into a "graph" (or replaces the
 * one given: the in-place update), graph_launch replays it (the recorded
 * arguments: whatever the plan baked in stays baked in). An upload, a
 * download, a control-block write, a report or a sync while a capture is
 * open is an error (on CUDA: not captured as the plan means, or illegal).
 *
 * Checked, N = 10 steps, the world shape (4-256x3-4, layernorm, GELU, MSE,
 * B 32, as 3 micro-batches 11/11/10) and the classifier (12-64x2-10, ReLU,
 * softmax xent, B 32, one micro-batch, SGD), fp32, mixed_bf16 and
 * mixed_fp16 (growth interval 3, so the loss scale changes, and a NaN at
 * step 5 which halves it): step 1 eager, every later step graphed, exactly
 * one device-to-host copy, captured at step 2 and again exactly when the
 * loss scale changed;
 * loss, skip, scale bits identical to the eager plan; master, m, v
 * identical bit for bit after the last step.
 * Negative control (the test can fail): a recorder whose update in place
 * keeps the old graph (the stale loss scale replayed) must be caught in
 * mixed_fp16.
 * MIXPREC_TEST_QUICK (the sanitizer pass; the reference-kernel and
 * mock-device passes skip this program, label emu_only: it never runs the
 * CPU kernels): the world shape 64 wide and in mixed_fp16 only, the
 * classifier in fp32 and mixed_bf16, the negative control as above.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/dstep.h"
#include "dstep_emu.h"
#include "dstep_harness.h"
#include "testutil.h"

/* ---- the recording device ------------------------------------------------ */

enum {
    R_STORE, R_WIDEN, R_ZERO, R_LT, R_BIAS_GRAD, R_ACT_FWD, R_ACT_BWD, R_LN_FWD, R_LN_BWD,
    R_MSE, R_XENT, R_FOLD, R_GRAD_PASS, R_DECIDE, R_ADAMW, R_SGD
};

typedef struct rec { /* one captured call: its op and arguments */
    int op;
    const void *p[9];
    int64_t i[3];
    size_t count;
    float f;
    int a;
    bool b[3];
    mxp_dtype t;
} rec;

typedef struct graph {
    rec *r;
    int n;
} graph;

typedef struct gdev {
    emu_dev e; /* first: the emulated ops take a gdev as an emu_dev */
    bool recording;
    rec *r;
    int n, cap;
    int captures, updates, launches;
    int illegal; /* non-capturable calls while recording */
    bool stale_update; /* negative control: an update keeps the old graph */
} gdev;

#define G ((gdev *)dev)

/* While recording: append the call and return 1 (the caller returns 0). */
static int capture(void *dev, const rec *x) {
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
    rec x = {.op = R_STORE, .t = t, .p = {out, src, amax, nonfinite}, .count = count};
    return capture(dev, &x) ? 0 : emu_store_scan_op(dev, t, out, src, count, amax, nonfinite,
                                                   why, n);
}
static int g_widen(void *dev, mxp_dtype t, float *out, const void *src, size_t count,
                   char *why, size_t n) {
    rec x = {.op = R_WIDEN, .t = t, .p = {out, src}, .count = count};
    return capture(dev, &x) ? 0 : emu_widen_op(dev, t, out, src, count, why, n);
}
static int g_zero(void *dev, void *p, size_t bytes, char *why, size_t n) {
    rec x = {.op = R_ZERO, .p = {p}, .count = bytes};
    return capture(dev, &x) ? 0 : emu_zero(dev, p, bytes, why, n);
}
static int g_lt(void *dev, void *plan, const void *A, const void *B, float *D,
                const float *bias, char *why, size_t n) {
    rec x = {.op = R_LT, .p = {plan, A, B, D, bias}};
    return capture(dev, &x) ? 0 : emu_lt_run(dev, plan, A, B, D, bias, why, n);
}
static int g_bias_grad(void *dev, float *dbias, const float *dy, int64_t B, int64_t C,
                       char *why, size_t n) {
    rec x = {.op = R_BIAS_GRAD, .p = {dbias, dy}, .i = {B, C}};
    return capture(dev, &x) ? 0 : emu_bias_grad_op(dev, dbias, dy, B, C, why, n);
}
static int g_act_fwd(void *dev, int act, float *y, const float *xx, size_t count, char *why,
                     size_t n) {
    rec x = {.op = R_ACT_FWD, .a = act, .p = {y, xx}, .count = count};
    return capture(dev, &x) ? 0 : emu_act_fwd_op(dev, act, y, xx, count, why, n);
}
static int g_act_bwd(void *dev, int act, float *dx, const float *dy, const float *s,
                     size_t count, char *why, size_t n) {
    rec x = {.op = R_ACT_BWD, .a = act, .p = {dx, dy, s}, .count = count};
    return capture(dev, &x) ? 0 : emu_act_bwd_op(dev, act, dx, dy, s, count, why, n);
}
static int g_ln_fwd(void *dev, float *y, float *mean, float *rstd, const float *xx,
                    const float *gamma, const float *beta, int64_t B, int64_t C, float eps,
                    char *why, size_t n) {
    rec x = {.op = R_LN_FWD, .p = {y, mean, rstd, xx, gamma, beta}, .i = {B, C}, .f = eps};
    return capture(dev, &x) ? 0 : emu_ln_fwd_op(dev, y, mean, rstd, xx, gamma, beta, B, C, eps,
                                               why, n);
}
static int g_ln_bwd(void *dev, float *dx, float *dgamma, float *dbeta, const float *dy,
                    const float *xx, const float *mean, const float *rstd, const float *gamma,
                    int64_t B, int64_t C, char *why, size_t n) {
    rec x = {.op = R_LN_BWD, .p = {dx, dgamma, dbeta, dy, xx, mean, rstd, gamma}, .i = {B, C}};
    return capture(dev, &x) ? 0 : emu_ln_bwd_op(dev, dx, dgamma, dbeta, dy, xx, mean, rstd,
                                               gamma, B, C, why, n);
}
static int g_mse(void *dev, float *dpred, const float *pred, const float *target, int64_t B,
                 int64_t C, float gs, double *loss, char *why, size_t n) {
    rec x = {.op = R_MSE, .p = {dpred, pred, target, loss}, .i = {B, C}, .f = gs};
    return capture(dev, &x) ? 0 : emu_mse_op(dev, dpred, pred, target, B, C, gs, loss, why, n);
}
static int g_xent(void *dev, float *dl, const float *logits, const int32_t *labels, int64_t B,
                  int64_t C, float gs, double *loss, char *why, size_t n) {
    rec x = {.op = R_XENT, .p = {dl, logits, labels, loss}, .i = {B, C}, .f = gs};
    return capture(dev, &x) ? 0 : emu_xent_op(dev, dl, logits, labels, B, C, gs, loss, why, n);
}
static int g_fold(void *dev, double *loss, const double *slots, int k, int64_t batch, char *why,
                  size_t n) {
    rec x = {.op = R_FOLD, .p = {loss, slots}, .a = k, .i = {batch}};
    return capture(dev, &x) ? 0 : emu_loss_fold_op(dev, loss, slots, k, batch, why, n);
}
static int g_grad_pass(void *dev, float *g, size_t count, float near_at, char *why, size_t n) {
    rec x = {.op = R_GRAD_PASS, .p = {g}, .count = count, .f = near_at};
    return capture(dev, &x) ? 0 : emu_grad_pass_op(dev, g, count, near_at, why, n);
}
static int g_decide(void *dev, bool extra_inf, uint64_t n_params, char *why, size_t n) {
    rec x = {.op = R_DECIDE, .b = {extra_inf}, .count = (size_t)n_params};
    return capture(dev, &x) ? 0 : emu_decide_op(dev, extra_inf, n_params, why, n);
}
static int g_adamw(void *dev, float *master, uint16_t *work, bool bf16, bool sr, const float *g,
                   float *m, float *v, size_t count, char *why, size_t n) {
    rec x = {.op = R_ADAMW, .p = {master, work, g, m, v}, .b = {bf16, sr}, .count = count};
    return capture(dev, &x) ? 0 : emu_adamw_op(dev, master, work, bf16, sr, g, m, v, count, why,
                                              n);
}
static int g_sgd(void *dev, float *master, uint16_t *work, bool bf16, bool sr, const float *g,
                 float *buf, size_t count, char *why, size_t n) {
    rec x = {.op = R_SGD, .p = {master, work, g, buf}, .b = {bf16, sr}, .count = count};
    return capture(dev, &x) ? 0 : emu_sgd_op(dev, master, work, bf16, sr, g, buf, count, why, n);
}

/* One recorded call, run. */
static int replay1(void *dev, const rec *x, char *why, size_t n) {
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

/* ---- the comparison ---------------------------------------------------------- */

enum { NSTEPS = 10, NAN_STEP = 5 };

static uint32_t rs = 4242u;
static float frand(void) { return ds_frand(&rs); }

/* Eager (plain table) vs graphed (recorder) on sh in lowp; true when every
 * step and the final state agree bit for bit. verbose: CHECK each. */
static bool compare(const ds_shape *sh, mxp_dtype lowp, bool stale, bool verbose) {
    char why[256] = "";
    const char *mode = ds_mode_name(lowp);
    mxp_ds_spec s = ds_spec_of(sh, lowp);
    emu_dev ed;
    gdev gd;
    memset(&ed, 0, sizeof ed);
    memset(&gd, 0, sizeof gd);
    gd.stale_update = stale;
    const mxp_ds_ops ro = rec_ops();
    mxp_ds_plan *pe = NULL, *pg = NULL;
    CHECK_MSG(mxp_ds_plan_create(&s, &emu_ds_ops, &ed, &pe, why, sizeof why) == 0, "%s", why);
    s.graphs = true;
    CHECK_MSG(mxp_ds_plan_create(&s, &ro, &gd, &pg, why, sizeof why) == 0, "%s", why);
    const size_t P = mxp_ds_num_params(pe);
    float *w = test_xmalloc(P * 4), *a = test_xmalloc(P * 4), *b = test_xmalloc(P * 4);
    for (size_t i = 0; i < P; i++) w[i] = 0.2f * frand();
    CHECK(mxp_ds_set_params(pe, w, why, sizeof why) == 0);
    CHECK(mxp_ds_set_params(pg, w, why, sizeof why) == 0);
    const int64_t B = sh->batch, ydim = sh->loss == MXP_DS_XENT ? 1 : sh->out;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * ydim) * 4);
    int32_t *lab = test_xmalloc((size_t)B * 4);
    bool ok = true;
    int expect_captures = 0;
    float last_scale = NAN;
    for (int st = 1; st <= NSTEPS; st++) {
        ds_fill_batch(sh, &rs, x, y, lab);
        if (st == NAN_STEP) x[(B - 1) * sh->in] = NAN;
        mxp_ds_result re, rg;
        CHECK_MSG(mxp_ds_step(pe, x, y, lab, &re, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(mxp_ds_step(pg, x, y, lab, &rg, why, sizeof why) == 0, "%s", why);
        /* step 1 eager; captured at step 2 and on every new scale after */
        const bool recap = st >= 2 && (st == 2 || !(rg.scale == last_scale));
        last_scale = rg.scale;
        expect_captures += recap;
        bool step_ok = memcmp(&re.loss, &rg.loss, sizeof re.loss) == 0 &&
                       re.skipped == rg.skipped && re.scale == rg.scale &&
                       re.next_scale == rg.next_scale && re.grad_norm == rg.grad_norm &&
                       rg.d2h == 1 && rg.graphed == (st >= 2) && !re.graphed &&
                       rg.captured == recap;
        if (verbose) {
            printf("  %-10s %-10s step %2d: loss eager %.9g graphed %.9g skip %d/%d scale %g->%g "
                   "captured %d d2h %lld\n",
                   sh->name, mode, st, re.loss, rg.loss, re.skipped, rg.skipped, rg.scale,
                   rg.next_scale, rg.captured, (long long)rg.d2h);
            CHECK_MSG(step_ok, "%s %s step %d: graphed differs from eager", sh->name, mode, st);
        }
        ok = ok && step_ok;
    }
    const mxp_ds_slab slabs[3] = {MXP_DS_MASTER, MXP_DS_M, MXP_DS_V};
    for (int k = 0; k < (sh->optim == MXP_DS_SGD ? 2 : 3); k++) {
        CHECK(mxp_ds_get(pe, slabs[k], a, why, sizeof why) == 0);
        CHECK(mxp_ds_get(pg, slabs[k], b, why, sizeof why) == 0);
        const bool same = memcmp(a, b, P * 4) == 0;
        if (verbose) CHECK_MSG(same, "%s %s: slab %d differs", sh->name, mode, k);
        ok = ok && same;
    }
    const bool counts = gd.illegal == 0 && gd.captures == 1 &&
                        gd.captures + gd.updates == expect_captures &&
                        gd.launches == NSTEPS - 1;
    if (verbose) {
        printf("  %-10s %-10s captures %d, updates in place %d, launches %d, calls inside a "
               "capture that must not be there %d\n",
               sh->name, mode, gd.captures, gd.updates, gd.launches, gd.illegal);
        CHECK(counts);
    }
    ok = ok && counts;
    mxp_ds_plan_destroy(pe);
    mxp_ds_plan_destroy(pg);
    CHECK_MSG(ed.live == 0 && gd.e.live == 0, "device buffers leaked");
    free(gd.r);
    free(w);
    free(a);
    free(b);
    free(x);
    free(y);
    free(lab);
    return ok;
}

int main(void) {
    /* MIXPREC_TEST_QUICK (the sanitizer pass): the world shape 64 wide
     * (the graph logic does not depend on the width; the emulator's cost
     * does) in mixed_fp16 only, where the scale changes; the classifier in
     * fp32 and mixed_bf16 */
    const bool quick = test_quick();
    const ds_shape shapes[] = {
        {"world", 4, quick ? 64 : 256, 4, 32, 3, 3, MXP_DS_GELU, true, MXP_DS_MSE, MXP_DS_ADAMW},
        {"classifier", 12, 64, 10, 32, 2, 1, MXP_DS_RELU, false, MXP_DS_XENT, MXP_DS_SGD},
    };
    const mxp_dtype modes[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < sizeof modes / sizeof modes[0]; j++)
            if (!quick || (i == 0 ? modes[j] == MXP_DTYPE_F16 : modes[j] != MXP_DTYPE_F16))
                compare(&shapes[i], modes[j], false, true);
    /* a graph whose update keeps the stale loss scale: caught */
    CHECK_MSG(!compare(&shapes[0], MXP_DTYPE_F16, true, false),
              "a graph replayed with a stale loss scale went unnoticed");
    /* a table without graph ops stays eager (graphed false; the emulated
     * table: test_dstep_emu runs it with spec.graphs unset) */
    {
        char why[256];
        emu_dev d;
        memset(&d, 0, sizeof d);
        mxp_ds_spec s = ds_spec_of(&shapes[1], MXP_DTYPE_F32);
        s.graphs = true;
        mxp_ds_plan *p = NULL;
        CHECK_MSG(mxp_ds_plan_create(&s, &emu_ds_ops, &d, &p, why, sizeof why) == 0, "%s", why);
        const size_t P = mxp_ds_num_params(p);
        float *w = calloc(P, 4), x[32 * 12] = {0};
        int32_t lab[32] = {0};
        CHECK(w && mxp_ds_set_params(p, w, why, sizeof why) == 0);
        mxp_ds_result r;
        CHECK(mxp_ds_step(p, x, NULL, lab, &r, why, sizeof why) == 0);
        CHECK(!r.graphed && !r.captured && r.d2h == 1);
        mxp_ds_plan_destroy(p);
        free(w);
    }
    return test_finish("test_dstep_graph");
}
