/* tests/test_dstep_fp8_emu.c: the device step in fp8 (backend/cuda/
 * dstep_fp8.c) on the emulated device (tests/dstep_emu_fp8.h) against the
 * CPU trainer's fp8 mode (nn/block_dense.c: Transformer Engine's
 * DelayedScaling, E4M3 forward, E5M2 gradients, BF16 storage), same
 * initial weights and batches, N steps, dynamic loss scaling (growth
 * every 3 clean steps), AdamW, on
 *   - "square" 16-64x2-16 (linear, GELU), MSE, B 32: every linear layer in
 *     FP8 on both sides (the exact algorithm);
 *   - the default world model 4-256x3-4 (layernorm, GELU), MSE, B 32, and
 *     the classifier 12-64x2-10 (ReLU), softmax cross-entropy, B 32: the
 *     first layer (4 or 12 inputs) and the last (4 or 10 outputs) are not
 *     multiples of 16, so the device plan runs them in BF16 and reports
 *     them (checked: the reasons name the dimension); the CPU keeps the
 *     same layers out of FP8 (precision_fp32_layers first,last), the
 *     hidden layers run FP8 on both sides;
 *   - "square" with 2 micro-batches of 16 (the CPU updates the scaling
 *     after each pass, so does the device) and with amax_algo most_recent,
 *     history 4, margin 1.
 * Step 5 has a NaN in its input: both sides skip it, and the NaN enters
 * the first layer's x history on both (its scale then stays).
 * Checked per step: skip and loss-scale sequence identical, exactly one
 * device-to-host copy (the report), loss close; after each step the
 * scaling state (scales, then every slot's amax history oldest first,
 * mxp_fp8_scaling_get_state's layout) close: the first step's x-of-layer-0
 * and W slots bit-equal (identical inputs, identical master); after N
 * steps the master, m, v close.
 *
 * Tolerances (observed values printed, recorded in docs/gpu.md).
 * "square" (every layer FP8 on both sides): the quantised operands are
 * exact in FP32 and their products have at most 8 significant bits, so
 * the emulator's double sum and the CPU's FP32 blocks agree unless a sum
 * needs more than 24 bits; a differing FP32 output could then move a
 * BF16-stored activation by one BF16 ulp and a quantised element by one
 * FP8 ulp (2^-3 relative, E4M3): first-step loss 2e-3 relative, later
 * 2e-2, scales and histories 1e-2 relative (two BF16 ulps of an amax);
 * observed: bit-equal states and losses within 4e-10. Step 1's x slot of
 * layer 0 and every W slot must be bit-equal (identical inputs and
 * master). World and classifier: their first and last layers differ in
 * precision (BF16 on the device, FP32 on the CPU: 2^-8 relative per
 * element, input and dY storage included), and AdamW turns a gradient
 * that differs near zero into an update of the other sign (weights up to
 * 2 lr apart per step: ~3% of the world's 1/16 init scale), so amaxes
 * downstream differ by percents: first-step loss 2e-2, later 5e-2,
 * x and W scales/histories 5e-2 / 1e-2, dY 0.15 (the whole backward's
 * difference; observed 1.2e-2 loss, 1.9e-2 x, 1.4e-3 W, 4.9e-2 dY on the
 * world shape); master within 2 lr per step (16 lr; observed 8.7 lr), m
 * and v within 25% of their largest element: an E5M2 ulp is 2^-2 of an
 * element, so a dY element rounded the other way moves the gradient terms
 * it enters by up to a quarter (observed 4.7%, and 13% on other batches).
 * "square":
 * master within 4 lr, m and v 5% (observed 2e-9, 2e-9 relative).
 * Negative control: a table whose scaling update doubles one W slot's
 * scale on the second pass must fail the same comparison.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "backend/cuda/dstep.h"
#include "dstep_emu_fp8.h"
#include "train/trainer_device_fp8.h"
#include "testutil.h"
#include "train/trainer_device.h"

/* mxp_fp8_config_default as the device step's config */
static mxp_ds_fp8_cfg ds_default_cfg(void) {
    const mxp_fp8_config c = mxp_fp8_config_default();
    return trainer_device_fp8_cfg(&c);
}

enum { NSTEPS = 8, NAN_STEP = 5 };

typedef struct shape {
    const char *name;
    int64_t in, hidden, out, batch;
    int depth;
    mxp_layer_kind act;
    bool layernorm;
    mxp_loss_kind loss;
    bool keep_ends; /* the CPU keeps the first and last linear layers out of FP8 */
} shape;

typedef struct run_opts {
    int micro;
    mxp_fp8_config cfg;
    const mxp_ds_ops *ops;
    bool verbose;
} run_opts;

static uint32_t rs = 2026u;
static float frand(void) {
    rs = rs * 1664525u + 1013904223u;
    return (float)((double)(rs >> 8) / 8388608.0 - 1.0);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* The worst relative difference of two FP8 states (mxp_fp8_scaling_get_state
 * layout: nslots scales, then nslots histories of H) per slot kind (x, W,
 * dY: slot % 3), and the count of entries not bit-equal; non-finite
 * entries must match in kind (else the difference is infinite). */
static void state_diff(const float *a, const float *b, int nslots, int H, double worst[3],
                       size_t *n_diff) {
    const size_t n = (size_t)nslots * (1 + (size_t)H);
    worst[0] = worst[1] = worst[2] = 0;
    *n_diff = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
        (*n_diff)++;
        const int kind = (int)(i < (size_t)nslots ? i : (i - (size_t)nslots) / (size_t)H) % 3;
        double r = INFINITY;
        if (isfinite(a[i]) && isfinite(b[i])) r = rel(a[i], b[i]);
        else if ((isnan(a[i]) && isnan(b[i])) || a[i] == b[i]) r = 0;
        if (!(r <= worst[kind])) worst[kind] = r;
    }
}

/* one comparison; returns true when every check held (verbose: CHECK them) */
static bool compare(const shape *sh, const run_opts *o) {
    mxp_error err = {0};
    char why[256] = "", tag[96];
    bool ok = true;
    const bool v = o->verbose;
    snprintf(tag, sizeof tag, "%s fp8 micro%d %s h%d m%d", sh->name, o->micro,
             mxp_fp8_amax_algo_name(o->cfg.amax_algo), o->cfg.history_len, o->cfg.margin);
    mxp_model_spec ms = mxp_model_spec_mlp(sh->in, sh->hidden, sh->depth, sh->out, sh->act,
                                           sh->layernorm, sh->loss, sh->batch);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP8, &pol);
    mxp_model *model = NULL;
    mxp_trainer *tr = NULL;
    CHECK_OK(mxp_model_create(&ms, &pol, 77, &model, &err), &err);
    CHECK_OK(mxp_model_set_fp8_config(model, &o->cfg, &err), &err);
    if (sh->keep_ends) {
        mxp_fp32_layers sel = {true, true, 0};
        CHECK_OK(mxp_model_set_fp32_layers(model, &sel, &err), &err);
    }
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.scaler.growth_interval = 3;
    tc.grad_accum_steps = o->micro;
    CHECK_OK(mxp_trainer_create(model, &tc, &tr, &err), &err);
    const size_t P = mxp_model_num_params(model);

    mxp_ds_spec ds;
    memset(&ds, 0, sizeof ds);
    ds.in_dim = ms.in_dim;
    ds.batch = sh->batch;
    ds.n_layers = ms.n_layers;
    for (int l = 0; l < ms.n_layers; l++) {
        ds.layers[l].kind = trainer_device_ds_kind(ms.layers[l].kind);
        ds.layers[l].units = ms.layers[l].units;
    }
    ds.loss = ms.loss == MXP_LOSS_XENT ? MXP_DS_XENT : MXP_DS_MSE;
    ds.ln_eps = ms.layernorm_eps;
    ds.lowp = MXP_DTYPE_BF16;
    ds.fp8 = true;
    ds.fp8_cfg = trainer_device_fp8_cfg(mxp_fp8_scaling_config(mxp_model_fp8(model)));
    ds.lr = tc.optim.lr;
    ds.beta1 = tc.optim.beta1;
    ds.beta2 = tc.optim.beta2;
    ds.eps = tc.optim.eps;
    ds.weight_decay = tc.optim.weight_decay;
    ds.clip_max = tc.clip_grad_norm;
    ds.near_overflow_frac = tc.near_overflow_frac;
    ds.seed = tc.seed;
    const mxp_scaler_config *sc = &tc.scaler;
    float min_f = (float)sc->min_scale;
    ds.rule = (mxp_scaler_rule){true, sc->growth_factor, sc->backoff_factor,
                                sc->growth_interval, sc->hysteresis,
                                min_f > 1.17549435e-38f ? min_f : 1.17549435e-38f,
                                sc->max_scale};
    ds.scaler0.scale = (float)sc->init_scale;
    ds.scaler0.hysteresis_left = sc->hysteresis;
    ds.micro_batches = o->micro;

    emu_dev dev;
    memset(&dev, 0, sizeof dev);
    mxp_ds_plan *plan = NULL;
    CHECK_MSG(mxp_ds_plan_create(&ds, o->ops, &dev, &plan, why, sizeof why) == 0, "%s", why);
    CHECK(mxp_ds_num_params(plan) == P);
    /* which layers run FP8: the reasons name the dimension */
    int first = -1, last = -1, nlin = 0;
    for (int l = 0; l < ms.n_layers; l++)
        if (ms.layers[l].kind == MXP_LAYER_LINEAR) {
            if (first < 0) first = l;
            last = l;
            nlin++;
        }
    for (int l = 0; l < ms.n_layers; l++) {
        const char *r = mxp_ds_fp8_reason(plan, l);
        const bool end = l == first || l == last;
        if (v && r) printf("  %-40s reported: %s\n", tag, r);
        if (ms.layers[l].kind != MXP_LAYER_LINEAR) {
            CHECK(r == NULL);
        } else if (sh->keep_ends && end) {
            CHECK_MSG(r && strstr(r, "not a multiple of 16") && strstr(r, "BF16"),
                      "%s layer %d: no BF16 report", tag, l);
        } else {
            CHECK_MSG(r == NULL, "%s layer %d: %s", tag, l, r ? r : "");
        }
    }
    CHECK(mxp_ds_fp8_layers(plan) == (sh->keep_ends ? nlin - 2 : nlin));

    float *w0 = test_xmalloc(P * sizeof(float));
    CHECK_OK(mxp_model_tensor_get(model, MXP_TENSOR_MASTER, NULL, MXP_DTYPE_F32, w0, P * 4, &err),
             &err);
    CHECK_MSG(mxp_ds_set_params(plan, w0, why, sizeof why) == 0, "%s", why);

    const size_t NS = mxp_ds_fp8_state_size(plan);
    mxp_fp8_scaling *f8 = mxp_model_fp8(model);
    CHECK(NS == mxp_fp8_scaling_state_size(f8));
    float *sd = test_xmalloc(NS * 4), *sc_ = test_xmalloc(NS * 4);
    const int nslots = mxp_fp8_scaling_num_tensors(f8);
    const int H = o->cfg.history_len;

    const int64_t B = sh->batch;
    const int64_t ydim = sh->loss == MXP_LOSS_XENT ? 1 : sh->out;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * ydim) * 4);
    int32_t *lab = test_xmalloc((size_t)B * 4);
    const bool ends = sh->keep_ends;
    const double tol1 = ends ? 2e-2 : 2e-3, toln = ends ? 5e-2 : 2e-2;
    const double tols[3] = {ends ? 5e-2 : 1e-2, 1e-2, ends ? 0.15 : 1e-2}; /* x, W, dY slots */
    double worst1 = 0, worstn = 0, worsts[3] = {0, 0, 0};
    for (int s = 0; s < NSTEPS; s++) {
        for (int64_t i = 0; i < B * sh->in; i++) x[i] = 2.0f * frand();
        for (int64_t i = 0; i < B * ydim; i++) y[i] = 0.5f * frand();
        for (int64_t i = 0; i < B; i++)
            lab[i] = (int32_t)((rs = rs * 1664525u + 1013904223u) >> 8) % (int32_t)sh->out;
        if (s + 1 == NAN_STEP) x[(B - 1) * sh->in + 1] = NAN;
        mxp_batch mb[4];
        int64_t r0 = 0;
        for (int i = 0; i < o->micro; i++) {
            const int64_t bi = mxp_ds_micro_rows(plan, i);
            mb[i] = (mxp_batch){x + r0 * sh->in, sh->loss == MXP_LOSS_XENT ? NULL : y + r0 * ydim,
                                sh->loss == MXP_LOSS_XENT ? lab + r0 : NULL, bi};
            r0 += bi;
        }
        mxp_step_result cr;
        CHECK_OK(mxp_trainer_step(tr, mb, o->micro, &cr, &err), &err);
        const float cpu_next = mxp_trainer_loss_scale(tr);
        mxp_ds_result dr;
        CHECK_MSG(mxp_ds_step(plan, x, y, lab, &dr, why, sizeof why) == 0, "%s", why);
        bool step_ok = dr.skipped == cr.skipped && dr.scale == cr.scale &&
                       dr.next_scale == cpu_next && dr.d2h == 1;
        const double lr_ = rel(dr.loss, cr.loss);
        if (cr.skipped) {
            step_ok = step_ok && !isfinite(dr.loss) && !isfinite(cr.loss);
        } else {
            step_ok = step_ok && lr_ <= (s == 0 ? tol1 : toln);
            if (s == 0) worst1 = lr_;
            else if (lr_ > worstn) worstn = lr_;
        }
        /* the scaling state after the step (a download outside the step) */
        const int64_t d0 = dev.d2h;
        int64_t passes = -1;
        CHECK_MSG(mxp_ds_fp8_get_state(plan, sd, NS, &passes, why, sizeof why) == 0, "%s", why);
        CHECK(dev.d2h == d0 + 1);
        /* one update per pass (micro-batch), as the CPU model's */
        CHECK_MSG(passes == mxp_fp8_scaling_steps(f8) && passes == (int64_t)(s + 1) * o->micro,
                  "%s: %lld FP8 updates on the device, %lld on the CPU", tag, (long long)passes,
                  (long long)mxp_fp8_scaling_steps(f8));
        mxp_fp8_scaling_get_state(f8, sc_);
        size_t nd = 0;
        double sw[3];
        state_diff(sd, sc_, nslots, H, sw, &nd);
        for (int k = 0; k < 3; k++) {
            if (sw[k] > worsts[k]) worsts[k] = sw[k];
            step_ok = step_ok && sw[k] <= tols[k];
        }
        if (s == 0 && o->micro == 1) {
            /* identical inputs and master: layer 0's x slot and every W
             * slot bit-equal (scale and newest history entry) */
            bool exact = true;
            for (int k = 0; k < nslots; k++) {
                if (!(k == 0 || k % 3 == 1)) continue;
                const float *a = sd + nslots + (size_t)k * (size_t)H + (H - 1);
                const float *c = sc_ + nslots + (size_t)k * (size_t)H + (H - 1);
                exact = exact && memcmp(&sd[k], &sc_[k], 4) == 0 && memcmp(a, c, 4) == 0;
            }
            step_ok = step_ok && exact;
            if (v) CHECK_MSG(exact, "%s: step 1 x0/W slots not bit-equal", tag);
        }
        if (v) {
            printf("  %-40s step %d: loss cpu %.9g dev %.9g (rel %.2e) skip %d/%d scale %g->%g "
                   "/ %g->%g d2h %lld fp8 state: %zu entries differ, worst rel x %.2e W %.2e "
                   "dY %.2e\n",
                   tag, s + 1, cr.loss, dr.loss, lr_, cr.skipped, dr.skipped, cr.scale, cpu_next,
                   dr.scale, dr.next_scale, (long long)dr.d2h, nd, sw[0], sw[1], sw[2]);
            CHECK_MSG(step_ok, "%s step %d: the device step disagrees with the CPU", tag, s + 1);
        }
        ok = ok && step_ok;
    }
    /* the NaN entered the first FP8 layer's x history on both sides */
    if (v) {
        bool nan_seen = false;
        const int s0 = sh->keep_ends ? 3 : 0; /* the first FP8 layer's x slot */
        for (int k = 0; k < H; k++)
            nan_seen = nan_seen || (isnan(sd[nslots + s0 * H + k]) &&
                                    isnan(sc_[nslots + s0 * H + k]));
        CHECK_MSG(nan_seen || H < NSTEPS - NAN_STEP + 1, "%s: the NaN amax is not in the history",
                  tag);
    }
    float *a = test_xmalloc(P * 4), *c = test_xmalloc(P * 4);
    const mxp_ds_slab slabs[3] = {MXP_DS_MASTER, MXP_DS_M, MXP_DS_V};
    const mxp_tensor_role roles[3] = {MXP_TENSOR_MASTER, MXP_TENSOR_OPTIM_M, MXP_TENSOR_OPTIM_V};
    const char *names[3] = {"master", "m", "v"};
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(mxp_ds_get(plan, slabs[k], a, why, sizeof why) == 0, "%s", why);
        CHECK_OK(mxp_trainer_tensor_get(tr, roles[k], NULL, MXP_DTYPE_F32, c, P * 4, &err), &err);
        double cmax = 0, d = 0;
        for (size_t i = 0; i < P; i++) {
            double e = fabs((double)a[i] - (double)c[i]);
            if (!(e <= d)) d = e;
            if (fabs((double)c[i]) > cmax) cmax = fabs((double)c[i]);
        }
        const double tol = k == 0 ? (ends ? 2.0 * NSTEPS : 4.0) * tc.optim.lr
                                  : (ends ? 0.25 : 0.05) * cmax;
        if (v)
            printf("  %-40s %-6s max |dev - cpu| %.3e (largest |cpu| %.3e, tolerance %.3e)\n",
                   tag, names[k], d, cmax, tol);
        ok = ok && d <= tol;
        if (v) CHECK_MSG(d <= tol, "%s: %s differs", tag, names[k]);
    }
    if (v)
        printf("  %-40s worst: first-step loss %.2e, later losses %.2e, fp8 state x %.2e W "
               "%.2e dY %.2e\n",
               tag, worst1, worstn, worsts[0], worsts[1], worsts[2]);
    mxp_ds_plan_destroy(plan);
    CHECK_MSG(dev.live == 0, "%lld device buffers leaked", (long long)dev.live);
    free(a);
    free(c);
    free(x);
    free(y);
    free(lab);
    free(sd);
    free(sc_);
    free(w0);
    mxp_trainer_destroy(tr);
    mxp_model_destroy(model);
    return ok;
}

/* ---- negative control: one perturbed scale update -------------------------- */

static int bad_update_calls;
static int bad_update(void *dev, void *st, int n_slots, const mxp_ds_fp8_cfg *cfg, char *why,
                      size_t n) {
    int rc = emu_f8_update_op(dev, st, n_slots, cfg, why, n);
    if (++bad_update_calls == 2 && n_slots > 4) { /* slot 4: the second layer's W */
        float *v = mxp_ds_f8_vals(st);
        v[4] *= 2.0f;
        v[n_slots + 4] = (float)(1.0 / (double)v[4]);
    }
    return rc;
}

/* [-1, 1) from the generator *g */
static float unit(uint32_t *g) {
    *g = *g * 1664525u + 1013904223u;
    return (float)((int)(*g >> 24) - 128) / 128.0f;
}

/* ---- refusals ---------------------------------------------------------------- */

static void test_refusals(void) {
    emu_dev dev;
    memset(&dev, 0, sizeof dev);
    mxp_ds_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = 16;
    s.batch = 16;
    s.n_layers = 1;
    s.layers[0].kind = MXP_DS_LINEAR;
    s.layers[0].units = 16;
    s.lowp = MXP_DTYPE_F16;
    s.fp8 = true;
    s.fp8_cfg = ds_default_cfg();
    mxp_ds_plan *p = NULL;
    char why[256] = "";
    mxp_ds_ops t = emu_fp8_table();
    CHECK(mxp_ds_plan_create(&s, &t, &dev, &p, why, sizeof why) == 1 && !p);
    CHECK_MSG(strstr(why, "accepted BF16"), "%s", why);
    s.lowp = MXP_DTYPE_BF16;
    s.fp8_cfg.history_len = 0;
    CHECK(mxp_ds_plan_create(&s, &t, &dev, &p, why, sizeof why) == 1 && !p);
    CHECK_MSG(strstr(why, "history_len 0"), "%s", why);
    s.fp8_cfg = ds_default_cfg();
    /* a table without the FP8 ops */
    CHECK(mxp_ds_plan_create(&s, &emu_ds_ops, &dev, &p, why, sizeof why) == 1 && !p);
    CHECK_MSG(strstr(why, "no FP8 ops"), "%s", why);
    CHECK(dev.live == 0);
    /* rows not a multiple of 16 (uneven micro-batches): BF16, reported */
    s.batch = 33;
    s.micro_batches = 2; /* 17 + 16 */
    CHECK_MSG(mxp_ds_plan_create(&s, &t, &dev, &p, why, sizeof why) == 0, "%s", why);
    const char *r = mxp_ds_fp8_reason(p, 0);
    CHECK_MSG(r && strstr(r, "rows (micro-batch) 17"), "%s", r ? r : "(none)");
    CHECK(mxp_ds_fp8_layers(p) == 0);
    float buf[2];
    CHECK(mxp_ds_fp8_get_state(p, buf, 2, NULL, why, sizeof why) == 1);
    CHECK_MSG(strstr(why, "accepted 51"), "%s", why);
    /* set_state / get_state round trip (a resume), and a bad scale refused */
    float st[51], back[51];
    for (int i = 0; i < 51; i++) st[i] = i < 3 ? 0.5f * (float)(i + 1) : (float)i;
    int64_t passes = 0;
    CHECK_MSG(mxp_ds_fp8_set_state(p, st, 51, 42, why, sizeof why) == 0, "%s", why);
    CHECK(mxp_ds_fp8_get_state(p, back, 51, &passes, why, sizeof why) == 0);
    CHECK(memcmp(st, back, sizeof st) == 0 && passes == 42);
    st[1] = 0.0f;
    CHECK(mxp_ds_fp8_set_state(p, st, 51, 42, why, sizeof why) == 1 && strstr(why, "scale[1]"));
    mxp_ds_plan_destroy(p);
    CHECK(dev.live == 0);
    /* a layernorm read by a linear layer: FP32 before an FP8 one (the CPU's
     * fp8 storage; the quantise reads FP32), BF16 before a BF16 one (its
     * GEMM reads BF16); both plans run a step */
    const int64_t outs[2] = {16, 10};
    for (int k = 0; k < 2; k++) {
        mxp_ds_spec q = s;
        q.batch = 16;
        q.micro_batches = 0;
        q.n_layers = 3;
        q.layers[0].kind = MXP_DS_LINEAR;
        q.layers[0].units = 32;
        q.layers[1].kind = MXP_DS_LAYERNORM;
        q.layers[2].kind = MXP_DS_LINEAR;
        q.layers[2].units = outs[k];
        q.ln_eps = 1e-5f;
        q.lr = 1e-3f, q.beta1 = 0.9f, q.beta2 = 0.999f, q.eps = 1e-8f;
        q.near_overflow_frac = 0.125f;
        q.scaler0.scale = 1.0f;
        CHECK_MSG(mxp_ds_plan_create(&q, &t, &dev, &p, why, sizeof why) == 0, "%s", why);
        CHECK(mxp_ds_fp8_layers(p) == 2 - k && (mxp_ds_fp8_reason(p, 2) != NULL) == (k == 1));
        const size_t P = mxp_ds_num_params(p);
        float *w = test_xmalloc(P * 4), x[16 * 16], y[16 * 16];
        uint32_t g = 7u; /* its own draws: the comparisons' batches stay as documented */
        for (size_t i = 0; i < P; i++) w[i] = 0.1f * unit(&g);
        for (int i = 0; i < 16 * 16; i++) x[i] = unit(&g), y[i] = unit(&g);
        CHECK_MSG(mxp_ds_set_params(p, w, why, sizeof why) == 0, "%s", why);
        mxp_ds_result res;
        CHECK_MSG(mxp_ds_step(p, x, y, NULL, &res, why, sizeof why) == 0, "%s", why);
        CHECK(isfinite(res.loss) && !res.skipped && res.d2h == 1);
        mxp_ds_plan_destroy(p);
        free(w);
    }
    CHECK(dev.live == 0);
    printf("  refusals named; layernorm before an FP8 / a BF16 linear layer planned and run\n");
}

int main(void) {
    test_refusals();
    mxp_ds_ops t = emu_fp8_table();
    const mxp_fp8_config dflt = mxp_fp8_config_default();
    const mxp_fp8_config recent = {4, MXP_FP8_AMAX_MOST_RECENT, 1};
    const shape square = {"square", 16, 64, 16, 32, 2, MXP_LAYER_GELU, false, MXP_LOSS_MSE,
                          false};
    const shape world = {"world", 4, 256, 4, 32, 3, MXP_LAYER_GELU, true, MXP_LOSS_MSE, true};
    const shape clf = {"classifier", 12, 64, 10, 32, 2, MXP_LAYER_RELU, false, MXP_LOSS_XENT,
                       true};
    compare(&square, &(run_opts){1, dflt, &t, true});
    compare(&world, &(run_opts){1, dflt, &t, true});
    compare(&clf, &(run_opts){1, dflt, &t, true});
    compare(&square, &(run_opts){2, dflt, &t, true});
    compare(&square, &(run_opts){1, recent, &t, true});
    /* negative control: one W slot's scale doubled in the second pass */
    mxp_ds_ops bad = t;
    bad.f8_update = bad_update;
    bad_update_calls = 0;
    const bool caught = !compare(&square, &(run_opts){1, dflt, &bad, false});
    printf("  negative control (one scale update doubled): %s\n",
           caught ? "caught" : "NOT caught");
    CHECK_MSG(caught, "a perturbed scale update passed the comparison");
    return test_finish("test_dstep_fp8_emu");
}
