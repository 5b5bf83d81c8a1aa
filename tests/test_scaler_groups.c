/* tests/test_scaler_groups.c: per-layer (adaptive) loss scaling
 * (training.loss_scale.per_layer, amp.h mxp_scaler_groups).
 *
 * Oracles:
 *   - exactness, reasoned out: every operation of backward is linear in the
 *     incoming gradient (products, sums, divisions by constants, masks), and
 *     multiplying an FP32 value by a power of two commutes exactly with
 *     every rounding as long as no value leaves the normal range. So with
 *     power-of-two group scales and FP32 gradients, the unscaled gradients
 *     of the per-layer path equal the global path's BIT FOR BIT (MLP with
 *     layernorm; GPT, whose lm_head writes the tied embedding; a residual
 *     block with dropout, whose skip gradient is rescaled from the closing
 *     layer's group to the block input's); in mixed_fp16, where 16-bit
 *     activation gradients are rounded, they agree to FP16 rounding
 *     (atol + rtol 2^-10) when nothing underflows;
 *   - the unscale is exact: gradients carry s_g and are divided by s_g;
 *   - a fault injected into one layer's parameter gradient makes the step
 *     skip (weights, moments, counters of the optimizer bit-identical) and
 *     backs off only that layer's group (hand-computed scales);
 *   - each group grows on its own interval (hand-computed sequence);
 *   - per_layer with every group at the global scale trains bit-identically
 *     to per_layer=false over several steps (option off = the old path);
 *   - the guard's in-memory snapshot restores the group scales; a checkpoint
 *     keeps them ("scaler_groups" metadata) and a bad value is refused;
 *   - data parallelism is refused with an error naming the key;
 *   - the backend's half (backend/backend.h, step_ctl.h), against
 *     hand-worked outcomes and states: the grad pass unscales each group
 *     by its own 1/s (power-of-two scales: exact) into its slot, decide
 *     gives the topmost non-finite group OVERFLOW, the non-finite groups
 *     below it HOLD, the finite ones CLEAN, every group OVERFLOW on a
 *     non-finite loss, and steps each state by GradScaler's rule; the
 *     table goes up with the control block in one upload, the slots come
 *     back in the one report. (Negative controls, tried: HOLD treated as
 *     OVERFLOW fails cases C and D; the global 1/scale instead of the
 *     group's fails the slot and unscale checks; the table uploaded apart
 *     from the block fails the one-upload check.)
 */
#include <mixprec/mixprec.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/devmem.h"
#include "testutil.h"

#define IN 12
#define HID 16
#define OUT 3
#define BATCH 16

static float g_x[BATCH * IN], g_y[BATCH * OUT];
static bool g_override = true; /* loss scaling forced on (fp32 tests) */

static void fill(float *x, size_t n, uint64_t seed, float sd) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = sd * mxp_rng_normal(&r);
}

typedef struct rig {
    mxp_model *m;
    mxp_trainer *t;
} rig;

static rig make_rig(const mxp_model_spec *spec, mxp_precision p, bool per_layer,
                    int64_t interval) {
    rig r = {0};
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(spec, &pol, 11, &r.m, &err), &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.clip_grad_norm = 0.0f;
    tc.optim.lr = 1e-3f;
    tc.scaler_override = g_override; /* scaling on even in fp32 */
    tc.scaler.enabled = true;
    tc.scaler.growth_interval = interval;
    tc.scaler.per_layer = per_layer;
    CHECK_OK(mxp_trainer_create(r.m, &tc, &r.t, &err), &err);
    return r;
}

static void free_rig(rig *r) {
    mxp_trainer_destroy(r->t);
    mxp_model_destroy(r->m);
}

static void set_group_scale(mxp_trainer *t, int i, float s) {
    mxp_scaler *sc = mxp_scaler_groups_get(mxp_trainer_scaler_groups(t), i);
    mxp_scaler_state st;
    mxp_scaler_get_state(sc, &st);
    st.scale = s;
    mxp_error err = {0};
    CHECK_OK(mxp_scaler_set_state(sc, &st, &err), &err);
}

static float group_scale(mxp_trainer *t, int i) {
    return mxp_scaler_scale(mxp_scaler_groups_get(mxp_trainer_scaler_groups(t), i));
}

static mxp_model_spec mlp_spec(bool ln) {
    return mxp_model_spec_mlp(IN, HID, 3, OUT, MXP_LAYER_GELU, ln, MXP_LOSS_MSE, BATCH);
}

static void step(rig *r, const mxp_batch *b, mxp_step_result *res) {
    mxp_error err = {0};
    CHECK_OK(mxp_trainer_step(r->t, b, 1, res, &err), &err);
}

/* Largest |a-b| / (atol + rtol |b|) over n values: <= 1 passes. */
static double worst(const float *a, const float *b, size_t n, double atol, double rtol) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(e <= w)) w = e; /* NaN wins */
    }
    return w;
}

/* One step of the global rig g and the per-layer rig p on b: both applied,
 * the unscaled gradients bit-identical (`what` names the case). */
static void step_same_grads(rig *g, rig *p, const mxp_batch *b, const char *what,
                            mxp_step_result *rg, mxp_step_result *rp) {
    step(g, b, rg);
    step(p, b, rp);
    const size_t n = mxp_model_num_params(g->m);
    CHECK(!rg->skipped && !rp->skipped);
    CHECK_MSG(memcmp(mxp_model_grads(g->m), mxp_model_grads(p->m), n * sizeof(float)) == 0,
              "%s: per-layer unscaled grads differ from global", what);
}

/* Per-layer with distinct power-of-two scales vs the global scaler at
 * 2^16: unscaled gradients bit-identical in FP32 (MLP with layernorm). */
static void test_exact_fp32(void) {
    mxp_model_spec spec = mlp_spec(true);
    rig g = make_rig(&spec, MXP_PRECISION_FP32, false, 2000);
    rig p = make_rig(&spec, MXP_PRECISION_FP32, true, 2000);
    mxp_scaler_groups *gr = mxp_trainer_scaler_groups(p.t);
    CHECK(gr != NULL && mxp_trainer_scaler_groups(g.t) == NULL);
    const int ng = mxp_scaler_groups_count(gr);
    CHECK_MSG(ng == 7, "groups %d, expected 7 (3 linear + 3 layernorm + head)", ng);
    const float sc[7] = {0x1p3f, 0x1p24f, 0x1p9f, 0x1p16f, 0x1p1f, 0x1p30f, 0x1p12f};
    for (int i = 0; i < ng && i < 7; i++) set_group_scale(p.t, i, sc[i]);
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_step_result rg, rp;
    step_same_grads(&g, &p, &b, "fp32", &rg, &rp);
    const size_t n = mxp_model_num_params(g.m);
    CHECK_MSG(memcmp(mxp_model_master(g.m), mxp_model_master(p.m), n * sizeof(float)) == 0,
              "fp32: weights after the update differ");
    CHECK(rp.loss == rg.loss && rp.grad_norm == rg.grad_norm);
    CHECK(rp.scale == 0x1p1f); /* the reported scale is the smallest group's */
    free_rig(&g);
    free_rig(&p);
}

/* The same for the GPT, whose lm_head writes the tied embedding. */
static void test_exact_gpt(void) {
    mxp_model_spec spec = mxp_model_spec_gpt(11, 8, 16, 2, 2, 2);
    rig g = make_rig(&spec, MXP_PRECISION_FP32, false, 2000);
    rig p = make_rig(&spec, MXP_PRECISION_FP32, true, 2000);
    mxp_scaler_groups *gr = mxp_trainer_scaler_groups(p.t);
    const int ng = mxp_scaler_groups_count(gr);
    CHECK_MSG(ng == 4, "gpt groups %d, expected 4 (embedding, 2 blocks, layernorm)", ng);
    for (int i = 0; i < ng; i++) set_group_scale(p.t, i, ldexpf(1.0f, 4 + 7 * i));
    float x[16];
    int32_t lab[16];
    for (int i = 0; i < 16; i++) {
        x[i] = (float)((i * 7 + 3) % 11);
        lab[i] = (i * 5 + 1) % 11;
    }
    mxp_batch b = {.x = x, .labels = lab, .B = 16};
    mxp_step_result rg, rp;
    step_same_grads(&g, &p, &b, "gpt fp32", &rg, &rp);
    free_rig(&g);
    free_rig(&p);
}

/* The same for a residual block with dropout (layer_skip.c): the skip
 * path's gradient carries the closing layer's scale and is rescaled to the
 * block input's, S(s) / S(c), read from the step's group table; the
 * driver's rescale between groups runs at every linear layer. Checked to
 * fail with that ratio taken as 1 (the skip's gradient off by 2^-17). */
static void test_exact_residual(void) {
    mxp_model_spec spec;
    mxp_error err = {0};
    CHECK_OK(mxp_model_spec_layers("linear:16, gelu, linear:16, gelu, linear:16, residual:3, "
                                   "dropout:0.25, gelu, linear",
                                   IN, OUT, MXP_LOSS_MSE, BATCH, &spec, &err),
             &err);
    rig g = make_rig(&spec, MXP_PRECISION_FP32, false, 2000);
    rig p = make_rig(&spec, MXP_PRECISION_FP32, true, 2000);
    const int ng = mxp_scaler_groups_count(mxp_trainer_scaler_groups(p.t));
    CHECK_MSG(ng == 4, "residual groups %d, expected 4 (the linear layers)", ng);
    const float sc[4] = {0x1p5f, 0x1p20f, 0x1p3f, 0x1p11f};
    for (int i = 0; i < ng && i < 4; i++) set_group_scale(p.t, i, sc[i]);
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    for (int k = 0; k < 2; k++) { /* two steps: the dropout masks of step 1 and 2 */
        mxp_step_result rg, rp;
        step_same_grads(&g, &p, &b, k == 0 ? "residual fp32 step 1" : "residual fp32 step 2",
                        &rg, &rp);
        /* the gradients are equal bit for bit (step_same_grads); the norm
         * sums them per group, then the groups, so its double may differ
         * in the last place (the generic kernels' order: 1 ulp seen) */
        CHECK_MSG(rp.loss == rg.loss && fabs(rp.grad_norm - rg.grad_norm) <= 1e-12 * rg.grad_norm,
                  "loss %a %a, norm %a %a", rp.loss, rg.loss, rp.grad_norm, rg.grad_norm);
    }
    free_rig(&g);
    free_rig(&p);
}

/* mixed_fp16: scales around 2^16 keep every activation gradient normal, so
 * the two paths agree to FP16 rounding. */
static void test_close_fp16(void) {
    mxp_model_spec spec = mlp_spec(false);
    rig g = make_rig(&spec, MXP_PRECISION_MIXED_FP16, false, 2000);
    rig p = make_rig(&spec, MXP_PRECISION_MIXED_FP16, true, 2000);
    const int ng = mxp_scaler_groups_count(mxp_trainer_scaler_groups(p.t));
    CHECK(ng == 4);
    for (int i = 0; i < ng; i++) set_group_scale(p.t, i, ldexpf(1.0f, 14 + (i % 3)));
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_step_result rg, rp;
    step(&g, &b, &rg);
    step(&p, &b, &rp);
    const size_t n = mxp_model_num_params(g.m);
    CHECK(!rg.skipped && !rp.skipped);
    double w = worst(mxp_model_grads(p.m), mxp_model_grads(g.m), n, 1e-6, 0x1p-9);
    CHECK_MSG(w <= 1.0, "fp16: per-layer vs global grads, worst error ratio %g", w);
    CHECK_CLOSE(rp.grad_norm, rg.grad_norm, 0, 1e-3);
    free_rig(&g);
    free_rig(&p);
}

/* Unscale exactness: gradients of an FP32 run at scale 1 (global, oracle)
 * equal the per-layer run's at scales 2^k, and the stored scaled gradient
 * is exactly 2^k times the unscaled one (read through the grad hook). */
typedef struct hook_copy {
    float *g;
    size_t n;
} hook_copy;
static void copy_hook(void *user, int64_t step_no, float *g, size_t n) {
    (void)step_no;
    hook_copy *h = user;
    memcpy(h->g, g, (n < h->n ? n : h->n) * sizeof(float));
}

static void test_unscale_exact(void) {
    mxp_model_spec spec = mlp_spec(false);
    rig p = make_rig(&spec, MXP_PRECISION_FP32, true, 2000);
    const size_t n = mxp_model_num_params(p.m);
    hook_copy h = {calloc(n, sizeof(float)), n};
    mxp_trainer_set_grad_hook(p.t, copy_hook, &h);
    const int ng = mxp_scaler_groups_count(mxp_trainer_scaler_groups(p.t));
    for (int i = 0; i < ng; i++) set_group_scale(p.t, i, ldexpf(1.0f, 5 * i + 2));
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_step_result r;
    step(&p, &b, &r);
    const float *u = mxp_model_grads(p.m);
    int bad = 0;
    for (int l = 0; l < mxp_model_num_layers(p.m); l++) {
        size_t off, cnt = mxp_model_layer_params(p.m, l, &off);
        if (!cnt) continue;
        int gi = 0; /* group index: parameter layers in order */
        for (int j = 0; j < l; j++) gi += mxp_model_layer_params(p.m, j, NULL) > 0;
        const float s = ldexpf(1.0f, 5 * gi + 2);
        for (size_t i = off; i < off + cnt; i++)
            if (h.g[i] != u[i] * s) bad++;
    }
    CHECK_MSG(bad == 0, "%d gradients: scaled != unscaled * group scale", bad);
    free(h.g);
    free_rig(&p);
}

/* A fault in one layer's gradient: the step is skipped (weights, moments,
 * optimizer step bit-identical) and only that layer's group backs off;
 * the others count a clean step and grow on their own interval. */
static void test_fault_one_group(void) {
    mxp_model_spec spec = mlp_spec(false); /* linear 0,2,4,6: groups 0..3 */
    rig p = make_rig(&spec, MXP_PRECISION_MIXED_FP16, true, 3);
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_step_result r;
    step(&p, &b, &r); /* one clean step: every group's tracker at 1 */
    CHECK(!r.skipped);
    const size_t n = mxp_model_num_params(p.m);
    float *w0 = malloc(n * sizeof(float)), *m0 = malloc(n * sizeof(float)),
          *v0 = malloc(n * sizeof(float));
    float *m, *v;
    size_t nn;
    int64_t t0, t1;
    mxp_trainer_optim_state(p.t, &m, &v, &nn, &t0);
    memcpy(w0, mxp_model_master(p.m), n * sizeof(float));
    memcpy(m0, m, n * sizeof(float));
    memcpy(v0, v, n * sizeof(float));
    mxp_fault_config f = mxp_fault_config_default();
    f.kind = MXP_FAULT_INF;
    f.pass = MXP_FAULT_BACKWARD;
    f.layer = 2; /* the second linear: group 1 */
    mxp_model_set_fault(p.m, &f);
    step(&p, &b, &r);
    mxp_model_set_fault(p.m, NULL);
    CHECK(r.skipped);
    mxp_trainer_optim_state(p.t, &m, &v, &nn, &t1);
    CHECK(t1 == t0);
    CHECK_MSG(memcmp(w0, mxp_model_master(p.m), n * sizeof(float)) == 0 &&
                  memcmp(m0, m, n * sizeof(float)) == 0 && memcmp(v0, v, n * sizeof(float)) == 0,
              "skipped step changed weights or moments");
    CHECK(group_scale(p.t, 1) == 32768.0f);
    for (int i = 0; i < 4; i++)
        if (i != 1) CHECK_MSG(group_scale(p.t, i) == 65536.0f, "group %d backed off", i);
    /* step 3 is clean: groups 0, 2, 3 reach 3 clean steps (1, [2: clean for
     * them], 3) and grow; group 1 restarted its count at the overflow */
    step(&p, &b, &r);
    CHECK(!r.skipped);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(group_scale(p.t, i) == (i == 1 ? 32768.0f : 131072.0f),
                  "after step 3 group %d scale %g", i, (double)group_scale(p.t, i));
    step(&p, &b, &r);
    step(&p, &b, &r); /* group 1: clean steps 3, 4, 5 -> grows at step 5 */
    CHECK_MSG(group_scale(p.t, 1) == 65536.0f, "group 1 scale %g after its interval",
              (double)group_scale(p.t, 1));
    mxp_train_stats st;
    mxp_trainer_stats(p.t, &st);
    CHECK(st.skipped_steps == 1 && st.current_scale == 65536.0f);
    free(w0);
    free(m0);
    free(v0);
    free_rig(&p);
}

/* Every group at the global scale: bit-identical training to the global
 * scaler over several steps with growth (interval 2) and one overflow. */
static void test_same_as_global(void) {
    mxp_model_spec spec = mlp_spec(false);
    rig g = make_rig(&spec, MXP_PRECISION_MIXED_FP16, false, 2);
    rig p = make_rig(&spec, MXP_PRECISION_MIXED_FP16, true, 2);
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_fault_config f = mxp_fault_config_default();
    f.kind = MXP_FAULT_NAN;
    f.pass = MXP_FAULT_FORWARD; /* NaN loss: every group overflows */
    f.layer = 1;
    bool same = true;
    for (int s = 0; s < 8; s++) {
        mxp_step_result rg, rp;
        if (s == 4) {
            mxp_model_set_fault(g.m, &f);
            mxp_model_set_fault(p.m, &f);
        }
        step(&g, &b, &rg);
        step(&p, &b, &rp);
        if (s == 4) {
            mxp_model_set_fault(g.m, NULL);
            mxp_model_set_fault(p.m, NULL);
            CHECK(rg.skipped && rp.skipped);
        }
        same = same && memcmp(&rg.loss, &rp.loss, sizeof rg.loss) == 0 && rg.scale == rp.scale;
    }
    const size_t n = mxp_model_num_params(g.m);
    CHECK_MSG(same, "per-step losses or scales differ");
    CHECK_MSG(memcmp(mxp_model_master(g.m), mxp_model_master(p.m), n * sizeof(float)) == 0,
              "weights differ after 8 steps");
    for (int i = 0; i < 4; i++) CHECK(group_scale(p.t, i) == mxp_scaler_scale(mxp_trainer_scaler(g.t)));
    free_rig(&g);
    free_rig(&p);
}

/* The guard's rollback snapshot restores the group scales; fallback to
 * a mode without loss scaling drops the groups. */
static void test_guard_snapshot(void) {
    mxp_model_spec spec = mlp_spec(false);
    g_override = false; /* the modes' own loss scaling */
    rig p = make_rig(&spec, MXP_PRECISION_MIXED_FP16, true, 2000);
    g_override = true;
    mxp_guard_config gc = mxp_guard_config_default();
    gc.canary_every = 0;
    gc.rules[MXP_RULE_NONFINITE_LOSS].threshold = 1; /* one NaN loss: roll back */
    gc.rules[MXP_RULE_NONFINITE_LOSS].action = MXP_ACT_ROLLBACK;
    mxp_guard *gd = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_guard_create(&gc, p.t, NULL, &gd, &err), &err);
    mxp_data_position pos = {0};
    mxp_guard_decision d;
    CHECK_OK(mxp_guard_before_step(gd, &pos, &d, &err), &err); /* snapshot: all 65536 */
    set_group_scale(p.t, 3, 2048.0f);
    mxp_fault_config f = mxp_fault_config_default();
    f.kind = MXP_FAULT_NAN;
    f.layer = 0;
    mxp_model_set_fault(p.m, &f);
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_step_result r;
    step(&p, &b, &r);
    mxp_model_set_fault(p.m, NULL);
    CHECK(r.skipped && group_scale(p.t, 0) == 32768.0f && group_scale(p.t, 3) == 1024.0f);
    CHECK_OK(mxp_guard_after_step(gd, &r, &pos, &d, &err), &err);
    mxp_guard_status gs;
    mxp_guard_get_status(gd, &gs);
    CHECK(gs.rollbacks == 1);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(group_scale(p.t, i) == 65536.0f, "group %d scale %g after rollback", i,
                  (double)group_scale(p.t, i));
    mxp_guard_destroy(gd);
    CHECK_OK(mxp_trainer_set_precision(p.t, MXP_PRECISION_MIXED_BF16, &err), &err);
    CHECK(mxp_trainer_scaler_groups(p.t) == NULL); /* bf16: no loss scaling */
    step(&p, &b, &r);
    CHECK(!r.skipped && r.scale == 1.0f);
    free_rig(&p);
}

/* Checkpoints keep the group scalers ("scaler_groups" metadata); a
 * checkpoint without them starts every group at its loss scale; a bad
 * value is a format error naming the key. */
static void test_checkpoint(void) {
    mxp_model_spec spec = mlp_spec(false);
    rig p = make_rig(&spec, MXP_PRECISION_MIXED_FP16, true, 2000);
    rig g = make_rig(&spec, MXP_PRECISION_MIXED_FP16, false, 2000);
    for (int i = 0; i < 4; i++) set_group_scale(p.t, i, ldexpf(1.0f, 10 + i));
    mxp_batch b = {.x = g_x, .y = g_y, .B = BATCH};
    mxp_step_result r;
    step(&p, &b, &r);
    step(&g, &b, &r);
    char dir[] = "/tmp/mxp_test_sgXXXXXX", pa[64], pg[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
    snprintf(pg, sizeof pg, "%s/g.safetensors", dir);
    mxp_error err = {0};
    mxp_ckpt_save_args sa = {.trainer = p.t, .healthy = true};
    CHECK_OK(mxp_ckpt_save(pa, &sa, NULL, &err), &err);
    sa.trainer = g.t;
    CHECK_OK(mxp_ckpt_save(pg, &sa, NULL, &err), &err);
    rig q = make_rig(&spec, MXP_PRECISION_MIXED_FP16, true, 2000);
    CHECK_OK(mxp_ckpt_load(pa, q.t, NULL, &err), &err);
    for (int i = 0; i < 4; i++) {
        mxp_scaler_state x, y;
        mxp_scaler_get_state(mxp_scaler_groups_get(mxp_trainer_scaler_groups(p.t), i), &x);
        mxp_scaler_get_state(mxp_scaler_groups_get(mxp_trainer_scaler_groups(q.t), i), &y);
        CHECK_MSG(x.scale == y.scale && x.growth_tracker == y.growth_tracker &&
                      x.total_steps == y.total_steps && x.hysteresis_left == y.hysteresis_left,
                  "group %d: saved scale %g tracker %lld, loaded %g %lld", i, (double)x.scale,
                  (long long)x.growth_tracker, (double)y.scale, (long long)y.growth_tracker);
    }
    CHECK_OK(mxp_ckpt_load(pg, q.t, NULL, &err), &err); /* no groups in the file */
    for (int i = 0; i < 4; i++) CHECK(group_scale(q.t, i) == 65536.0f);
    CHECK_OK(mxp_ckpt_load(pa, g.t, NULL, &err), &err); /* groups ignored by a global run */
    CHECK(mxp_trainer_scaler_groups(g.t) == NULL);
    CHECK(mxp_trainer_scaler_groups_load(q.t, "[[1,0,1,0,0,0]]", &err) == MXP_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "scaler_groups") != NULL, "error: %s", err.msg);
    CHECK(mxp_trainer_scaler_groups_load(q.t, "[[-1,0,1,0,0,0],[1,0,1,0,0,0],[1,0,1,0,0,0],"
                                              "[1,0,1,0,0,0]]", &err) == MXP_ERR_FORMAT);
    CHECK_OK(mxp_trainer_scaler_groups_load(q.t, "[[2,1,1,0,1,0],[4,1,1,0,1,0],[8,1,1,0,1,0],"
                                                 "[16,1,1,0,1,0]]", &err), &err);
    CHECK(group_scale(q.t, 3) == 16.0f);
    remove(pa);
    remove(pg);
    rmdir(dir);
    free_rig(&p);
    free_rig(&g);
    free_rig(&q);
}

/* The backend's per-group pass and rule over 3 groups of 10 gradients. */
static void test_backend_groups(void) {
    enum { NG = 3, PER = 10, NP = NG * PER };
    mxp_error err = {0};
    mxp_backend *b = NULL;
    CHECK_OK(mxp_backend_cpu_create(&b, &err), &err);
    if (!b) return;
    float *g = mxp_dev_calloc(NP, sizeof(float));
    mxp_dev_enter(); /* the ops and the test's reads of g: one backend bracket
                        (MIXPREC_MOCK_DEVICE=1 protects g outside) */
    const size_t gbytes = mxp_step_groups_out_bytes(NG);
    CHECK_OK(b->ops->reserve(b, NG, gbytes + 64, &err), &err);
    CHECK(b->grp_reserved == NG);
    /* case: non-finite group (its first gradient Inf), loss NaN; expected
     * outcome, then scale exponent, growth tracker and total steps per group
     * (growth interval 2, backoff 1/2: worked by hand from the start
     * 2^4, 2^7, 2^10, trackers 0) */
    static const struct {
        int bad[NG];
        bool loss_bad;
        int outcome[NG], exp2[NG], tracker[NG], total[NG];
    } cs[] = {
        {{0, 0, 0}, false, {0, 0, 0}, {4, 7, 10}, {1, 1, 1}, {1, 1, 1}}, /* A: clean */
        {{0, 1, 0}, false, {0, 1, 0}, {5, 6, 11}, {0, 0, 0}, {2, 2, 2}}, /* B: 0, 2 grow */
        {{1, 0, 1}, false, {2, 0, 1}, {5, 6, 10}, {0, 1, 0}, {2, 3, 3}}, /* C: 0 holds */
        {{0, 0, 0}, true, {1, 1, 1}, {4, 5, 9}, {0, 0, 0}, {3, 4, 4}},   /* D: NaN loss */
    };
    mxp_scaler_rule_state st[NG];
    for (int i = 0; i < NG; i++) st[i] = (mxp_scaler_rule_state){ldexpf(1.0f, 4 + 3 * i), 0, 1, 0, 0, 0};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        mxp_step_ctl *ctl = &b->ctl;
        memset(ctl, 0, MXP_STEP_CTL_HOST_BYTES);
        ctl->n_groups = NG;
        ctl->rule = (mxp_scaler_rule){true, 2.0, 0.5, 2, 1, FLT_MIN, INFINITY};
        for (int i = 0; i < NG; i++)
            b->grp_host[i] = (mxp_step_group_in){st[i].scale, 1.0f / st[i].scale,
                                                 (uint64_t)i * PER, PER, st[i]};
        mxp_dev_stats d0, d1;
        mxp_dev_stats_get(&d0);
        CHECK_OK(b->ops->begin(b, &err), &err);
        mxp_dev_enter(); /* the test's writes into backend memory */
        for (int i = 0; i < NG; i++)
            for (int j = 0; j < PER; j++)
                g[i * PER + j] = j == 0 && cs[c].bad[i] ? INFINITY : (float)(j + 1) * st[i].scale;
        double loss = cs[c].loss_bad ? NAN : 0.5;
        memcpy((unsigned char *)b->aux + gbytes, &loss, sizeof loss);
        mxp_dev_leave();
        CHECK_OK(b->ops->grad_pass(b, g, NP, 1e30f, &err), &err);
        const double *ls = (const double *)(const void *)((unsigned char *)b->aux + gbytes);
        CHECK_OK(b->ops->check_loss(b, ls, 64, 1, &err), &err);
        CHECK_OK(b->ops->decide(b, false, NP, &err), &err);
        CHECK_OK(b->ops->report(b, NULL, &err), &err);
        mxp_dev_stats_get(&d1);
        CHECK_MSG(d1.h2d_calls - d0.h2d_calls == 1 && d1.d2h_calls - d0.d2h_calls == 1,
                  "case %zu: %lld uploads, %lld downloads; expected 1 and 1", c,
                  (long long)(d1.h2d_calls - d0.h2d_calls), (long long)(d1.d2h_calls - d0.d2h_calls));
        const mxp_step_group_out *out = b->aux_host;
        int64_t bad = 0;
        for (int i = 0; i < NG; i++) {
            bad += cs[c].bad[i];
            CHECK_MSG(out[i].stats.n == PER && out[i].stats.nonfinite == cs[c].bad[i] &&
                          out[i].stats.absmax == (float)PER,
                      "case %zu group %d: n %lld nonfinite %lld absmax %g", c, i,
                      (long long)out[i].stats.n, (long long)out[i].stats.nonfinite,
                      (double)out[i].stats.absmax);
            CHECK_MSG(out[i].outcome == cs[c].outcome[i] &&
                          out[i].state.scale == ldexpf(1.0f, cs[c].exp2[i]) &&
                          out[i].state.growth_tracker == cs[c].tracker[i] &&
                          out[i].state.total_steps == cs[c].total[i],
                      "case %zu group %d: outcome %d scale %g tracker %lld total %lld; "
                      "expected %d 2^%d %d %d", c, i, (int)out[i].outcome,
                      (double)out[i].state.scale, (long long)out[i].state.growth_tracker,
                      (long long)out[i].state.total_steps, cs[c].outcome[i], cs[c].exp2[i],
                      cs[c].tracker[i], cs[c].total[i]);
            st[i] = out[i].state; /* the host takes decide's state */
        }
        CHECK(b->ctl.stats.nonfinite == bad && b->ctl.stats.n == NP);
        CHECK(b->ctl.skip == (bad > 0 || cs[c].loss_bad));
        mxp_dev_enter(); /* each group divided by its own scale: exact */
        int wrong = 0;
        for (int i = 0; i < NG; i++)
            for (int j = cs[c].bad[i] ? 1 : 0; j < PER; j++) wrong += g[i * PER + j] != (float)(j + 1);
        mxp_dev_leave();
        CHECK_MSG(wrong == 0, "case %zu: %d gradients not unscaled by their group", c, wrong);
    }
    /* a range outside the slab, and more groups than reserved, are refused */
    b->grp_host[2].cnt = PER + 1;
    CHECK_OK(b->ops->begin(b, &err), &err);
    CHECK(b->ops->grad_pass(b, g, NP, 1e30f, &err) == MXP_ERR_INVALID_ARG);
    b->ctl.n_groups = NG + 1;
    CHECK(b->ops->begin(b, &err) == MXP_ERR_STATE);
    mxp_dev_leave();
    mxp_dev_free(g);
    mxp_backend_destroy(b);
}

static void test_config_key(void) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    mxp_config c;
    CHECK_OK(mxp_config_resolve(b, &c, &err), &err);
    CHECK(!c.trainer.scaler.per_layer);
    CHECK_OK(mxp_config_apply_override(b, "training.loss_scale.per_layer=true", &err), &err);
    CHECK_OK(mxp_config_resolve(b, &c, &err), &err);
    CHECK(c.trainer.scaler.per_layer);
    CHECK(mxp_config_apply_override(b, "training.loss_scale.per_layer=maybe", &err) != MXP_OK);
    CHECK_MSG(strstr(err.msg, "training.loss_scale.per_layer") != NULL, "error: %s", err.msg);
    mxp_config_builder_destroy(b);
}

int main(void) {
    fill(g_x, BATCH * IN, 1, 1.0f);
    fill(g_y, BATCH * OUT, 2, 1.0f);
    test_exact_fp32();
    test_exact_gpt();
    test_exact_residual();
    test_close_fp16();
    test_unscale_exact();
    test_fault_one_group();
    test_same_as_global();
    test_guard_snapshot();
    test_checkpoint();
    test_backend_groups();
    test_config_key();
    return test_finish("test_scaler_groups");
}
