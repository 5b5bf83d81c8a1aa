/* tests/test_guard.c: the guard module on a small MLP and trainer.
 * - config: guard.* / fault.* key defaults equal mxp_guard_config_default;
 *   training.precision=auto parses and resolves (the kill switch wins);
 * - every guard rule fires exactly at its threshold and not below it
 *   (synthetic step results where the value is the step result itself;
 *   real passes with injected values for headroom, underflow and canary);
 * - actions: fallback along the chain, stop, rollback restores the saved
 *   state bit for bit, a second rollback to the same state also falls back;
 * - the fallback chain skips precisions a CPU does not support;
 * - operator requests (API and a real SIGUSR1) switch to FP32 at the next
 *   step boundary; opt-in retry of the faster precision;
 * - provenance names the injected layer and pass; anomaly mode reports the
 *   first forward culprit, non-finite weights and inputs;
 * - a skipped step leaves weights and optimizer state bit-identical, in
 *   every precision mode. */
#include <mixprec/mixprec.h>

#include <math.h>
#include <signal.h>
#include <string.h>

#include "testutil.h"

enum { IN = 6, OUT = 4, B = 8 };

static float xs[B * IN], ys[B * OUT];

static void make_data(void) {
    mxp_rng r;
    mxp_rng_init(&r, 77);
    for (int i = 0; i < B * IN; i++) xs[i] = mxp_rng_normal(&r);
    for (int i = 0; i < B * OUT; i++) ys[i] = 0.5f * mxp_rng_normal(&r);
}

static mxp_batch batch(void) { return (mxp_batch){.x = xs, .y = ys, .labels = NULL, .B = B}; }

typedef struct rig {
    mxp_model *m;
    mxp_trainer *t;
    mxp_guard *g;
} rig;

/* depth-2 GELU MLP: layers 0 linear, 1 gelu, 2 linear, 3 gelu, 4 linear. */
static rig rig_make(mxp_precision p, const mxp_guard_config *gc, bool probe) {
    rig r = {0};
    mxp_error err = {0};
    mxp_model_spec spec =
        mxp_model_spec_mlp(IN, 49, 2, OUT, MXP_LAYER_GELU, false, MXP_LOSS_MSE, B);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    CHECK_OK(mxp_model_create(&spec, &pol, 5, &r.m, &err), &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    CHECK_OK(mxp_trainer_create(r.m, &tc, &r.t, &err), &err);
    mxp_batch pb = batch();
    CHECK_OK(mxp_guard_create(gc, r.t, probe ? &pb : NULL, &r.g, &err), &err);
    return r;
}

static void rig_free(rig *r) {
    mxp_guard_destroy(r->g);
    mxp_trainer_destroy(r->t);
    mxp_model_destroy(r->m);
}

static const mxp_data_position pos0 = {0, 0, B, 0, 1, 0, 1000};

/* One synthetic step through the guard (no training pass). */
static mxp_guard_decision feed(rig *r, mxp_step_result res) {
    mxp_guard_decision d;
    mxp_error err = {0};
    CHECK_OK(mxp_guard_before_step(r->g, &pos0, &d, &err), &err);
    CHECK_OK(mxp_guard_after_step(r->g, &res, &pos0, &d, &err), &err);
    return d;
}

/* One real training step through the guard. */
static mxp_step_result real_step(rig *r, mxp_guard_decision *d) {
    mxp_error err = {0};
    mxp_step_result res;
    mxp_batch b = batch();
    CHECK_OK(mxp_guard_before_step(r->g, &pos0, d, &err), &err);
    CHECK_OK(mxp_trainer_step(r->t, &b, 1, &res, &err), &err);
    CHECK_OK(mxp_guard_after_step(r->g, &res, &pos0, d, &err), &err);
    return res;
}

static mxp_step_result healthy(void) {
    mxp_step_result s;
    memset(&s, 0, sizeof s);
    s.loss = 1.0;
    s.scale = 1.0f;
    s.grad_norm = 1.0;
    return s;
}

static int64_t fired(const rig *r, mxp_guard_rule rule) {
    mxp_guard_status st;
    mxp_guard_get_status(r->g, &st);
    return st.fired[rule];
}

/* A config where only `rule` acts (alert), canary off, snapshots rare. */
static mxp_guard_config only(mxp_guard_rule rule) {
    mxp_guard_config c = mxp_guard_config_default();
    for (int i = 0; i < MXP_RULE_COUNT; i++) c.rules[i].action = 0;
    c.rules[rule].action = MXP_ACT_ALERT;
    c.canary_every = 0;
    return c;
}

/* ---- config ----------------------------------------------------------------- */

static void test_config(void) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config c;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &c, &err), &err);
    const mxp_guard_config d = mxp_guard_config_default();
    CHECK(c.guard.enabled == d.enabled && c.guard.anomaly_mode == d.anomaly_mode);
    CHECK(c.guard.canary_every == d.canary_every && c.guard.canary_batch == d.canary_batch);
    CHECK(c.guard.headroom_every == d.headroom_every && c.guard.retry_after == d.retry_after);
    CHECK(c.guard.snapshot_every == d.snapshot_every && c.guard.max_rollbacks == d.max_rollbacks);
    CHECK(c.guard.allow_emulated == d.allow_emulated &&
          c.guard.preflight_batches == d.preflight_batches);
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        CHECK_MSG(c.guard.rules[r].threshold == d.rules[r].threshold &&
                      c.guard.rules[r].window == d.rules[r].window &&
                      c.guard.rules[r].action == d.rules[r].action,
                  "rule %s: key defaults differ from mxp_guard_config_default",
                  mxp_guard_rule_name((mxp_guard_rule)r));
    }
    CHECK(c.guard.fault.kind == MXP_FAULT_NONE && c.guard.fault.step == d.fault.step &&
          c.guard.fault.count == d.fault.count && c.guard.fault.value == d.fault.value);
    CHECK(!c.precision_auto);
    /* docs/safety.md's defaults ("Guard rules"), spelled out */
    CHECK(d.rules[MXP_RULE_NONFINITE_LOSS].threshold == 10);
    CHECK(d.rules[MXP_RULE_NONFINITE_LOSS].action ==
          (MXP_ACT_ALERT | MXP_ACT_FALLBACK | MXP_ACT_ROLLBACK));
    CHECK(d.rules[MXP_RULE_OVERFLOW_RATE_HIGH].threshold == 0.30 &&
          d.rules[MXP_RULE_OVERFLOW_RATE_HIGH].action == (MXP_ACT_ALERT | MXP_ACT_FALLBACK));
    CHECK(d.rules[MXP_RULE_CANARY_DIVERGENCE_HIGH].action == (MXP_ACT_ALERT | MXP_ACT_ROLLBACK));
    CHECK(d.rules[MXP_RULE_LOSS_SCALE_LOW].threshold == 1024);
    CHECK(d.rules[MXP_RULE_GRAD_NORM_GROWTH].threshold == 10 &&
          d.rules[MXP_RULE_GRAD_NORM_GROWTH].window == 100);
    CHECK(mxp_guard_rule_get(MXP_RULE_NONFINITE_LOSS)->severity == MXP_SEV_P0);
    CHECK(mxp_guard_rule_get(MXP_RULE_OVERFLOW_RATE_HIGH)->severity == MXP_SEV_P1);
    CHECK(mxp_guard_rule_get(MXP_RULE_CANARY_DIVERGENCE_HIGH)->severity == MXP_SEV_P1);
    CHECK(mxp_guard_rule_get(MXP_RULE_OVERFLOW_RATE)->severity == MXP_SEV_P2);

    const char *ov[] = {"training.precision=auto", "guard.overflow_rate_high.action=stop",
                        "fault.kind=nan", "fault.pass=backward", "fault.layer=3"};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, ov[i], &err), &err);
    CHECK_OK(mxp_config_resolve(b, &c, &err), &err);
    CHECK(c.precision_auto && c.precision == MXP_PRECISION_FP32);
    CHECK(c.guard.rules[MXP_RULE_OVERFLOW_RATE_HIGH].action == (MXP_ACT_ALERT | MXP_ACT_STOP));
    CHECK(c.guard.fault.kind == MXP_FAULT_NAN && c.guard.fault.pass == MXP_FAULT_BACKWARD &&
          c.guard.fault.layer == 3);
    mxp_status s = mxp_config_apply_override(b, "guard.zero_grad.action=explode", &err);
    CHECK(s == MXP_ERR_CONFIG && strstr(err.msg, "guard.zero_grad.action") &&
          strstr(err.msg, "fallback+rollback"));
    mxp_config_builder_destroy(b);

    char buf[64];
    mxp_guard_action_text(MXP_ACT_ALERT | MXP_ACT_FALLBACK | MXP_ACT_ROLLBACK, buf, sizeof buf);
    CHECK(strcmp(buf, "fallback+rollback") == 0);
    mxp_guard_action_text(MXP_ACT_ALERT, buf, sizeof buf);
    CHECK(strcmp(buf, "alert") == 0);
}

static const char *kill_env(const char *name) {
    return strcmp(name, "ENABLE_FP16_TRAINING") == 0 ? "false" : NULL;
}

static void test_kill_switch_beats_auto(void) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config c;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    CHECK_OK(mxp_config_apply_env(b, kill_env, &err), &err);
    CHECK_OK(mxp_config_apply_override(b, "training.precision=auto", &err), &err);
    CHECK_OK(mxp_config_resolve(b, &c, &err), &err);
    CHECK(c.kill_switch && !c.precision_auto && c.precision == MXP_PRECISION_FP32);
    mxp_config_builder_destroy(b);
}

/* ---- thresholds: synthetic step results ----------------------------------------- */

static void test_nonfinite_threshold(void) {
    mxp_guard_config c = only(MXP_RULE_NONFINITE_LOSS);
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_step_result bad = healthy();
    bad.loss = NAN;
    bad.skipped = true;
    for (int i = 0; i < 9; i++) feed(&r, bad);
    feed(&r, healthy()); /* the streak breaks at 9 */
    for (int i = 0; i < 9; i++) feed(&r, bad);
    CHECK(fired(&r, MXP_RULE_NONFINITE_LOSS) == 0);
    feed(&r, bad); /* the 10th in a row */
    CHECK(fired(&r, MXP_RULE_NONFINITE_LOSS) == 1);
    feed(&r, bad); /* latched: one event per episode */
    CHECK(fired(&r, MXP_RULE_NONFINITE_LOSS) == 1);
    rig_free(&r);
}

/* Window of 100 with k skipped steps: fires iff `expect`. */
static void overflow_case(mxp_guard_rule rule, int k, bool expect) {
    mxp_guard_config c = only(rule);
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_step_result skip = healthy();
    skip.skipped = true;
    for (int i = 0; i < 100; i++) feed(&r, i < k ? skip : healthy());
    CHECK_MSG((fired(&r, rule) == 1) == expect, "%s with %d/100 skipped: fired %lld",
              mxp_guard_rule_name(rule), k, (long long)fired(&r, rule));
    rig_free(&r);
}

static void test_overflow_thresholds(void) {
    overflow_case(MXP_RULE_OVERFLOW_RATE_HIGH, 30, false); /* > 30% */
    overflow_case(MXP_RULE_OVERFLOW_RATE_HIGH, 31, true);
    overflow_case(MXP_RULE_OVERFLOW_RATE, 9, false); /* >= 10% */
    overflow_case(MXP_RULE_OVERFLOW_RATE, 10, true);
    /* the window must be full: 99 skipped steps out of 99 do not fire yet */
    mxp_guard_config c = only(MXP_RULE_OVERFLOW_RATE_HIGH);
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_step_result skip = healthy();
    skip.skipped = true;
    for (int i = 0; i < 99; i++) feed(&r, skip);
    CHECK(fired(&r, MXP_RULE_OVERFLOW_RATE_HIGH) == 0);
    feed(&r, skip);
    CHECK(fired(&r, MXP_RULE_OVERFLOW_RATE_HIGH) == 1);
    rig_free(&r);
    /* both bands on: 40% fires the high rule only */
    c = mxp_guard_config_default();
    c.canary_every = 0;
    c.rules[MXP_RULE_OVERFLOW_RATE_HIGH].action = MXP_ACT_ALERT;
    r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    for (int i = 0; i < 100; i++) feed(&r, i < 40 ? skip : healthy());
    CHECK(fired(&r, MXP_RULE_OVERFLOW_RATE_HIGH) == 1 && fired(&r, MXP_RULE_OVERFLOW_RATE) == 0);
    rig_free(&r);
}

/* Mean-of-window rules on step-result fields: window w of value v. */
static void mean_case(mxp_guard_rule rule, double v, bool expect) {
    mxp_guard_config c = only(rule);
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_step_result s = healthy();
    if (rule == MXP_RULE_ZERO_GRAD) s.zero_frac = v;
    if (rule == MXP_RULE_GRAD_NEAR_OVERFLOW) s.near_overflow_frac = v;
    for (int i = 0; i < c.rules[rule].window; i++) feed(&r, s);
    CHECK_MSG((fired(&r, rule) == 1) == expect, "%s at %g: fired %lld",
              mxp_guard_rule_name(rule), v, (long long)fired(&r, rule));
    rig_free(&r);
}

static void test_grad_health_thresholds(void) {
    mean_case(MXP_RULE_ZERO_GRAD, 0.05, false);
    mean_case(MXP_RULE_ZERO_GRAD, 0.0501, true);
    mean_case(MXP_RULE_GRAD_NEAR_OVERFLOW, 0.01, false);
    mean_case(MXP_RULE_GRAD_NEAR_OVERFLOW, 0.0101, true);
    /* growth: median of the newest 10 samples / median of the 10 samples
     * 100 steps earlier; > 10 */
    const double last[2] = {10.0, 10.001};
    for (int k = 0; k < 2; k++) {
        mxp_guard_config c = only(MXP_RULE_GRAD_NORM_GROWTH);
        rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
        mxp_step_result s = healthy();
        for (int i = 0; i < 110; i++) {
            /* oldest block: 1.0 except 3 of 10 (median stays 1.0); newest
             * block: last[k] except 4 of 10 far below/above it */
            if (i < 10) s.grad_norm = i < 3 ? 50.0 : 1.0;
            else if (i < 100) s.grad_norm = 1.0 + 0.001 * i;
            else s.grad_norm = i < 102 ? 0.5 : i < 104 ? 1e6 : last[k];
            feed(&r, s);
        }
        CHECK_MSG(fired(&r, MXP_RULE_GRAD_NORM_GROWTH) == k, "growth %g: fired %lld", last[k],
                  (long long)fired(&r, MXP_RULE_GRAD_NORM_GROWTH));
        rig_free(&r);
    }
    /* one spike in a healthy window (the batch noise late in training) is
     * not growth: the single-sample ratio here is 1000 */
    {
        mxp_guard_config c = only(MXP_RULE_GRAD_NORM_GROWTH);
        rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
        mxp_step_result s = healthy();
        for (int i = 0; i < 300; i++) {
            s.grad_norm = (i % 97 == 96) ? 1000.0 : 1.0 + 0.5 * (i % 7);
            feed(&r, s);
        }
        CHECK_MSG(fired(&r, MXP_RULE_GRAD_NORM_GROWTH) == 0, "noise: fired %lld",
                  (long long)fired(&r, MXP_RULE_GRAD_NORM_GROWTH));
        rig_free(&r);
    }
}

static void test_loss_scale_threshold(void) {
    mxp_guard_config c = only(MXP_RULE_LOSS_SCALE_LOW);
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_error err = {0};
    mxp_scaler_state st;
    mxp_scaler *sc = mxp_trainer_scaler(r.t);
    mxp_scaler_get_state(sc, &st);
    st.scale = 1024.0f;
    CHECK_OK(mxp_scaler_set_state(sc, &st, &err), &err);
    feed(&r, healthy());
    CHECK(fired(&r, MXP_RULE_LOSS_SCALE_LOW) == 0);
    st.scale = nextafterf(1024.0f, 0.0f);
    CHECK_OK(mxp_scaler_set_state(sc, &st, &err), &err);
    feed(&r, healthy());
    CHECK(fired(&r, MXP_RULE_LOSS_SCALE_LOW) == 1);
    rig_free(&r);
    /* no loss scaling (bf16): the rule has nothing to watch */
    r = rig_make(MXP_PRECISION_MIXED_BF16, &c, false);
    feed(&r, healthy());
    CHECK(fired(&r, MXP_RULE_LOSS_SCALE_LOW) == 0);
    rig_free(&r);
}

/* ---- thresholds: real passes ------------------------------------------------------ */

/* One FP16 step with one layer-0 output set to v: headroom 65504 / v. */
static int64_t headroom_case(float v) {
    mxp_guard_config c = only(MXP_RULE_HEADROOM);
    c.fault.kind = MXP_FAULT_VALUE;
    c.fault.layer = 0;
    c.fault.value = v;
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_guard_decision d;
    (void)real_step(&r, &d);
    mxp_guard_status st;
    mxp_guard_get_status(r.g, &st);
    CHECK_CLOSE(st.value[MXP_RULE_HEADROOM], 65504.0 / v, 0, 1e-12);
    int64_t f = st.fired[MXP_RULE_HEADROOM];
    rig_free(&r);
    return f;
}

static void test_headroom_threshold(void) {
    CHECK(headroom_case(8188.0f) == 0); /* 65504 / 8188 = 8 exactly: not < 8 */
    CHECK(headroom_case(8189.0f) == 1);
}

/* Full-scan step in mixed_fp16 with k of layer 0's B*49 = 392 outputs set
 * to 1e-6 (below FP16's smallest normal, 6.1e-5; GELU keeps them tiny in
 * layer 1). 392 is not a multiple of a vector width, so vector scans run
 * their tails too. */
static int64_t underflow_case(int k, double *value) {
    mxp_guard_config c = only(MXP_RULE_UNDERFLOW);
    c.headroom_every = 1;
    c.fault.kind = MXP_FAULT_VALUE;
    c.fault.layer = 0;
    c.fault.value = 1e-6;
    c.fault.elements = k;
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_guard_decision d;
    (void)real_step(&r, &d);
    mxp_guard_status st;
    mxp_guard_get_status(r.g, &st);
    *value = st.value[MXP_RULE_UNDERFLOW];
    int64_t f = st.fired[MXP_RULE_UNDERFLOW];
    rig_free(&r);
    return f;
}

static void test_underflow_threshold(void) {
    double v;
    /* 20 / 392 = 5.1% tiny values beside outputs of order 0.4: they are
     * below the rounding step of the tensor's largest values (0.4 * 2^-11
     * = 2e-4 > 6.1e-5), storing them as subnormals loses nothing that
     * rounding does not: not underflow (GELU's tails on healthy runs) */
    CHECK(underflow_case(20, &v) == 0);
    CHECK_CLOSE(v, 0.0, 0, 0);
    /* every output 1e-6: the whole tensor sits under the floor */
    CHECK(underflow_case(392, &v) == 1);
    CHECK_CLOSE(v, 1.0, 0, 0);
}

static void test_canary_threshold(void) {
    mxp_guard_config c = only(MXP_RULE_CANARY_DIVERGENCE);
    c.canary_every = 1;
    rig r = rig_make(MXP_PRECISION_MIXED_BF16, &c, true);
    mxp_error err = {0};
    double div = 0, lw = 0, l32 = 0;
    CHECK_OK(mxp_guard_canary(r.g, &div, &lw, &l32, &err), &err);
    /* independent FP32 loss of the same weights */
    mxp_model_spec sp = *mxp_model_get_spec(r.m);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *f32 = NULL;
    CHECK_OK(mxp_model_create(&sp, &pol, 0, &f32, &err), &err);
    memcpy(mxp_model_master(f32), mxp_model_master(r.m),
           mxp_model_num_params(r.m) * sizeof(float));
    double ref = 0;
    mxp_batch b = batch();
    CHECK_OK(mxp_model_step(f32, &b, false, 1.0f, &ref, NULL, &err), &err);
    CHECK(l32 == ref);
    CHECK(div > 0 && div == fabs(lw - l32) / l32);
    mxp_model_destroy(f32);
    rig_free(&r);
    /* the same divergence against thresholds at and just below it, for the
     * P2 rule and for the P1 rule (whose default action is rollback) */
    const mxp_guard_rule rules[2] = {MXP_RULE_CANARY_DIVERGENCE, MXP_RULE_CANARY_DIVERGENCE_HIGH};
    for (int ri = 0; ri < 2; ri++)
        for (int k = 0; k < 2; k++) {
            mxp_guard_config ck = only(rules[ri]);
            ck.canary_every = 1;
            ck.rules[rules[ri]].threshold = k ? nextafter(div, 0) : div;
            r = rig_make(MXP_PRECISION_MIXED_BF16, &ck, true);
            feed(&r, healthy());
            mxp_guard_status st;
            mxp_guard_get_status(r.g, &st);
            CHECK(st.canary_divergence == div);
            CHECK_MSG(st.fired[rules[ri]] == k, "%s %g vs %g: fired %lld",
                      mxp_guard_rule_name(rules[ri]), div, ck.rules[rules[ri]].threshold,
                      (long long)st.fired[rules[ri]]);
            rig_free(&r);
        }
    /* the floor (guard.canary.loss_floor): a probe whose targets are the
     * FP32 model's own predictions plus +-d has an FP32 loss of about d^2,
     * far below the targets' variance; the divergence is then relative to
     * floor = loss_floor x (mean per-column population variance of the
     * targets), computed here in long double */
    {
        float pred[B * OUT], saved[B * OUT];
        memcpy(saved, ys, sizeof ys);
        r = rig_make(MXP_PRECISION_FP32, &c, false); /* same seed, same weights */
        CHECK_OK(mxp_model_predict(r.m, xs, B, pred, &err), &err);
        rig_free(&r);
        for (int i = 0; i < B * OUT; i++) ys[i] = pred[i] + (i % 2 ? 0x1p-9f : -0x1p-9f);
        long double var = 0;
        for (int j = 0; j < OUT; j++) {
            long double mu = 0, ss = 0;
            for (int i = 0; i < B; i++) mu += ys[i * OUT + j];
            mu /= B;
            for (int i = 0; i < B; i++) ss += (ys[i * OUT + j] - mu) * (ys[i * OUT + j] - mu);
            var += ss / B;
        }
        var /= OUT;
        for (int k = 0; k < 3; k++) {
            const double fr[3] = {0.0, 1e-3, 1.0};
            mxp_guard_config cf = c;
            cf.canary_loss_floor = fr[k];
            r = rig_make(MXP_PRECISION_MIXED_BF16, &cf, true);
            CHECK_OK(mxp_guard_canary(r.g, &div, &lw, &l32, &err), &err);
            const double floor = (double)((long double)fr[k] * var);
            CHECK_MSG(l32 < 1e-4 && (double)var > 100 * l32, "l32 %g var %g", l32, (double)var);
            CHECK_MSG(fabs(div - fabs(lw - l32) / fmax(l32, floor)) <= 1e-12 * div,
                      "floor %g: div %.17g, expected %.17g", fr[k], div,
                      fabs(lw - l32) / fmax(l32, floor));
            if (k == 2) CHECK_MSG(div < 0.01 * fabs(lw - l32) / l32, "div %g", div);
            rig_free(&r);
        }
        memcpy(ys, saved, sizeof ys);
        mxp_guard_config bad = c;
        bad.canary_loss_floor = 1.5;
        CHECK(mxp_guard_config_validate(&bad, &err) == MXP_ERR_INVALID_ARG &&
              strstr(err.msg, "guard.canary.loss_floor=1.5; accepted: 0..1"));
    }
    /* fp32 runs no canary (it would compare FP32 with itself) */
    c.rules[MXP_RULE_CANARY_DIVERGENCE].threshold = 0;
    r = rig_make(MXP_PRECISION_FP32, &c, true);
    feed(&r, healthy());
    CHECK(fired(&r, MXP_RULE_CANARY_DIVERGENCE) == 0);
    rig_free(&r);
}

/* ---- actions ------------------------------------------------------------------------ */

static void test_fallback_and_stop(void) {
    mxp_guard_config c = only(MXP_RULE_OVERFLOW_RATE_HIGH);
    c.rules[MXP_RULE_OVERFLOW_RATE_HIGH] = (mxp_guard_rule_config){0.30, 10, 3};
    c.allow_emulated = true; /* the chain regardless of this CPU */
    rig r = rig_make(MXP_PRECISION_FP8, &c, false);
    mxp_step_result skip = healthy();
    skip.skipped = true;
    const mxp_precision chain[] = {MXP_PRECISION_MIXED_FP16, MXP_PRECISION_MIXED_BF16,
                                   MXP_PRECISION_FP32, MXP_PRECISION_FP32};
    for (int k = 0; k < 4; k++) {
        mxp_guard_decision d = {0};
        for (int i = 0; i < 10; i++) d = feed(&r, skip);
        CHECK_MSG(mxp_model_policy(r.m)->mode == chain[k], "fallback %d: %s", k,
                  mxp_precision_name(mxp_model_policy(r.m)->mode));
        CHECK(d.precision_changed == (k < 3));
        CHECK(!d.stop && !d.rewind);
    }
    size_t n;
    const mxp_guard_event *ev = mxp_guard_events(r.g, &n);
    CHECK(n == 4);
    CHECK(ev[0].kind == MXP_EVENT_RULE && ev[0].rule == MXP_RULE_OVERFLOW_RATE_HIGH &&
          ev[0].severity == MXP_SEV_P1 && ev[0].from == MXP_PRECISION_FP8 &&
          ev[0].to == MXP_PRECISION_MIXED_FP16 && (ev[0].taken & MXP_ACT_FALLBACK));
    CHECK(!(ev[3].taken & MXP_ACT_FALLBACK) && strstr(ev[3].detail, "no precision left"));
    /* the scaler restarts at its initial scale in a mode that scales */
    rig_free(&r);

    c.rules[MXP_RULE_OVERFLOW_RATE_HIGH].action = MXP_ACT_ALERT | MXP_ACT_STOP;
    r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_guard_decision d = {0};
    for (int i = 0; i < 10; i++) d = feed(&r, skip);
    CHECK(d.stop && mxp_guard_stopped(r.g));
    rig_free(&r);
}

static void test_rollback(void) {
    mxp_guard_config c = only(MXP_RULE_NONFINITE_LOSS);
    c.rules[MXP_RULE_NONFINITE_LOSS] = (mxp_guard_rule_config){3, 1, MXP_ACT_ALERT | MXP_ACT_ROLLBACK};
    c.snapshot_every = 1000;
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    const size_t P = mxp_model_num_params(r.m);
    float *w0 = mxp_calloc(P, sizeof(float)), *m0 = mxp_calloc(P, sizeof(float));
    float *v0 = mxp_calloc(P, sizeof(float));
    mxp_guard_decision d;
    mxp_data_position start = {2, 5, B, 0, 4, 17, 400};
    mxp_error err = {0};
    CHECK_OK(mxp_guard_before_step(r.g, &start, &d, &err), &err); /* first save: here */
    float *om, *ov;
    size_t n;
    int64_t t0;
    mxp_trainer_optim_state(r.t, &om, &ov, &n, &t0);
    memcpy(w0, mxp_model_master(r.m), P * sizeof(float));
    memcpy(m0, om, P * sizeof(float));
    memcpy(v0, ov, P * sizeof(float));
    mxp_scaler_state s0;
    mxp_scaler_get_state(mxp_trainer_scaler(r.t), &s0);
    /* train 5 real steps: weights, moments and t move on */
    mxp_step_result res;
    mxp_batch b = batch();
    for (int i = 0; i < 5; i++) CHECK_OK(mxp_trainer_step(r.t, &b, 1, &res, &err), &err);
    CHECK(memcmp(w0, mxp_model_master(r.m), P * sizeof(float)) != 0);
    CHECK_OK(mxp_guard_after_step(r.g, &res, &start, &d, &err), &err);
    mxp_step_result bad = healthy();
    bad.loss = INFINITY;
    bad.skipped = true;
    feed(&r, bad);
    feed(&r, bad);
    d = feed(&r, bad);
    CHECK(d.rewind && d.pos.epoch == 2 && d.pos.step_in_epoch == 5 && d.pos.run_step == 17);
    CHECK(memcmp(w0, mxp_model_master(r.m), P * sizeof(float)) == 0);
    CHECK(memcmp(m0, om, P * sizeof(float)) == 0 && memcmp(v0, ov, P * sizeof(float)) == 0);
    mxp_trainer_optim_state(r.t, &om, &ov, &n, &t0);
    CHECK(t0 == 0);
    /* the working FP16 weights are the master recast */
    mxp_dtype wt;
    const void *work = mxp_model_work(r.m, &wt);
    bool same = true;
    for (size_t i = 0; i < P; i++)
        if (mxp_load_f32(wt, work, i) != mxp_round_to(MXP_DTYPE_F16, w0[i])) same = false;
    CHECK(same);
    mxp_scaler_state s1;
    mxp_scaler_get_state(mxp_trainer_scaler(r.t), &s1);
    CHECK(s1.scale == s0.scale && s1.growth_tracker == s0.growth_tracker);
    mxp_guard_status st;
    mxp_guard_get_status(r.g, &st);
    CHECK(st.rollbacks == 1 && strcmp(st.rollback_store, "memory") == 0);
    /* again, with no newer healthy state: roll back and fall back too */
    feed(&r, bad);
    feed(&r, bad);
    d = feed(&r, bad);
    CHECK(d.rewind && d.precision_changed);
    CHECK(mxp_model_policy(r.m)->mode != MXP_PRECISION_MIXED_FP16);
    CHECK(memcmp(w0, mxp_model_master(r.m), P * sizeof(float)) == 0);
    mxp_free(w0);
    mxp_free(m0);
    mxp_free(v0);
    rig_free(&r);
}

static void test_chain_support(void) {
    mxp_cpu_features none = {0}, bf_only = {0}, f16c_only = {0};
    bf_only.avx512f = bf_only.avx512_bf16 = true;
    f16c_only.f16c = true;
    CHECK(mxp_precision_fallback(MXP_PRECISION_FP8, &none, false) == MXP_PRECISION_FP32);
    CHECK(mxp_precision_fallback(MXP_PRECISION_FP8, &none, true) == MXP_PRECISION_MIXED_FP16);
    CHECK(mxp_precision_fallback(MXP_PRECISION_FP8, &bf_only, false) == MXP_PRECISION_MIXED_BF16);
    CHECK(mxp_precision_fallback(MXP_PRECISION_FP8, &f16c_only, false) ==
          MXP_PRECISION_MIXED_FP16);
    CHECK(mxp_precision_fallback(MXP_PRECISION_MIXED_FP16, &f16c_only, false) ==
          MXP_PRECISION_FP32);
    CHECK(mxp_precision_fallback(MXP_PRECISION_MIXED_FP16, &bf_only, false) ==
          MXP_PRECISION_MIXED_BF16);
    CHECK(mxp_precision_fallback(MXP_PRECISION_FP16, &bf_only, false) == MXP_PRECISION_BF16);
    CHECK(mxp_precision_fallback(MXP_PRECISION_BF16, &bf_only, false) == MXP_PRECISION_FP32);
    CHECK(mxp_precision_fallback(MXP_PRECISION_FP32, &bf_only, true) == MXP_PRECISION_FP32);
    CHECK(mxp_precision_support(MXP_PRECISION_FP8, &bf_only, NULL) == MXP_SUPPORT_EMULATED);
    CHECK(mxp_precision_support(MXP_PRECISION_MIXED_BF16, &bf_only, NULL) == MXP_SUPPORT_NATIVE);
    CHECK(mxp_precision_support(MXP_PRECISION_MIXED_FP16, &none, NULL) == MXP_SUPPORT_EMULATED);
}

static void test_operator_and_retry(void) {
    mxp_guard_config c = only(MXP_RULE_OVERFLOW_RATE_HIGH);
    rig r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    feed(&r, healthy());
    mxp_guard_request_fp32();
    mxp_guard_decision d;
    mxp_error err = {0};
    CHECK(mxp_model_policy(r.m)->mode == MXP_PRECISION_MIXED_FP16); /* not mid-step */
    CHECK_OK(mxp_guard_before_step(r.g, &pos0, &d, &err), &err);
    CHECK(d.precision_changed && mxp_model_policy(r.m)->mode == MXP_PRECISION_FP32);
    size_t n;
    const mxp_guard_event *ev = mxp_guard_events(r.g, &n);
    CHECK(n == 1 && ev[0].kind == MXP_EVENT_OPERATOR && ev[0].to == MXP_PRECISION_FP32);
    rig_free(&r);

    /* a real SIGUSR1 */
    CHECK_OK(mxp_guard_install_signal(SIGUSR1, &err), &err);
    r = rig_make(MXP_PRECISION_MIXED_BF16, &c, false);
    feed(&r, healthy());
    raise(SIGUSR1);
    CHECK(mxp_model_policy(r.m)->mode == MXP_PRECISION_MIXED_BF16);
    feed(&r, healthy());
    CHECK(mxp_model_policy(r.m)->mode == MXP_PRECISION_FP32);
    mxp_guard_status st;
    mxp_guard_get_status(r.g, &st);
    CHECK(st.operator_switches == 1);
    rig_free(&r);

    /* retry the faster precision after 5 healthy steps (opt-in) */
    c.rules[MXP_RULE_OVERFLOW_RATE_HIGH] = (mxp_guard_rule_config){0.30, 10, 3};
    c.retry_after = 5;
    r = rig_make(MXP_PRECISION_MIXED_FP16, &c, false);
    mxp_step_result skip = healthy();
    skip.skipped = true;
    for (int i = 0; i < 10; i++) feed(&r, skip);
    CHECK(mxp_model_policy(r.m)->mode == MXP_PRECISION_MIXED_BF16);
    for (int i = 0; i < 4; i++) feed(&r, healthy());
    CHECK(mxp_model_policy(r.m)->mode == MXP_PRECISION_MIXED_BF16);
    /* the 5th healthy step's verdict asks for the retry and the boundary
     * closing that step applies it: the 6th step runs in mixed_fp16 */
    mxp_guard_decision rd = feed(&r, healthy());
    CHECK(rd.precision_changed && mxp_model_policy(r.m)->mode == MXP_PRECISION_MIXED_FP16);
    mxp_guard_get_status(r.g, &st);
    CHECK(st.retries == 1 && st.fallbacks == 1);
    rig_free(&r);
}

/* ---- provenance ----------------------------------------------------------------------- */

static mxp_step_result fault_step(mxp_precision p, mxp_fault_kind k, mxp_fault_pass pass,
                                  int layer, double value, bool anomaly,
                                  mxp_anomaly_report *rep) {
    mxp_guard_config c = only(MXP_RULE_NONFINITE_LOSS);
    c.anomaly_mode = anomaly;
    c.fault.kind = k;
    c.fault.pass = pass;
    c.fault.layer = layer;
    c.fault.value = value;
    c.fault.elements = 3;
    rig r = rig_make(p, &c, false);
    mxp_guard_decision d;
    mxp_step_result res = real_step(&r, &d);
    mxp_guard_status st;
    mxp_guard_get_status(r.g, &st);
    if (rep) *rep = st.anomaly;
    CHECK(st.first_site.found == res.site.found);
    rig_free(&r);
    return res;
}

static void test_provenance(void) {
    static const char *const ops[] = {"linear", "gelu", "linear", "gelu", "linear"};
    const mxp_precision modes[] = {MXP_PRECISION_FP32, MXP_PRECISION_MIXED_FP16};
    for (int mi = 0; mi < 2; mi++)
        for (int l = 0; l < 5; l++)
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1 && l == 0) continue; /* layer 0's grads: see below */
                mxp_step_result res =
                    fault_step(modes[mi], pass ? MXP_FAULT_INF : MXP_FAULT_NAN,
                               (mxp_fault_pass)pass, l, 0, false, NULL);
                CHECK_MSG(res.skipped && res.site.found && res.site.layer == l &&
                              res.site.backward == (pass == 1) &&
                              strcmp(res.site.op, ops[l]) == 0 && res.site.count >= 1,
                          "%s fault at layer %d %s: site %s layer %d (%s) found %d",
                          mxp_precision_name(modes[mi]), l, pass ? "backward" : "forward",
                          res.site.backward ? "backward" : "forward", res.site.layer,
                          res.site.op, res.site.found);
            }
    /* layer 0's weight gradient */
    mxp_step_result res = fault_step(MXP_PRECISION_MIXED_BF16, MXP_FAULT_NAN, MXP_FAULT_BACKWARD,
                                     0, 0, false, NULL);
    CHECK(res.site.found && res.site.backward && res.site.layer == 0);
    /* a forward NaN: exactly the 3 poisoned values, reported in the forward pass */
    res = fault_step(MXP_PRECISION_FP32, MXP_FAULT_NAN, MXP_FAULT_FORWARD, 2, 0, false, NULL);
    CHECK(res.site.count == 3 && !res.site.backward);

    /* A finite 60000 stored in FP16 (headroom 1.09) makes the scaled loss
     * gradient overflow in backward. The cheap scan names that backward op;
     * anomaly mode names the first forward culprit: layer 0. */
    mxp_anomaly_report rep;
    res = fault_step(MXP_PRECISION_MIXED_FP16, MXP_FAULT_VALUE, MXP_FAULT_FORWARD, 0, 60000, false,
                     &rep);
    CHECK(res.skipped && res.site.found && res.site.backward);
    CHECK(rep.found && !rep.has_culprit);
    res = fault_step(MXP_PRECISION_MIXED_FP16, MXP_FAULT_VALUE, MXP_FAULT_FORWARD, 0, 60000, true,
                     &rep);
    CHECK(rep.found && rep.backward && rep.has_culprit);
    CHECK_MSG(rep.culprit_layer == 0 && strcmp(rep.culprit_op, "linear") == 0,
              "culprit layer %d (%s)", rep.culprit_layer, rep.culprit_op);
    CHECK_CLOSE(rep.culprit_absmax, 60000.0, 0, 0);
    /* a forward fault is its own culprit */
    (void)fault_step(MXP_PRECISION_MIXED_BF16, MXP_FAULT_NAN, MXP_FAULT_FORWARD, 3, 0, true, &rep);
    CHECK(rep.has_culprit && rep.culprit_layer == 3 && !rep.backward &&
          strcmp(rep.what, "output") == 0);
}

static void test_anomaly_inputs_and_weights(void) {
    mxp_guard_config c = only(MXP_RULE_NONFINITE_LOSS);
    c.anomaly_mode = true;
    mxp_error err = {0};
    /* non-finite weight of layer 2: anomaly mode names the weight itself */
    for (int anomaly = 0; anomaly < 2; anomaly++) {
        c.anomaly_mode = anomaly;
        rig r = rig_make(MXP_PRECISION_MIXED_BF16, &c, false);
        const mxp_tensor_info *ti = mxp_model_tensor(r.m, 1); /* layers.0.bias */
        CHECK(strcmp(ti->name, "layers.0.bias") == 0);
        const mxp_tensor_info *w2 = mxp_model_tensor(r.m, 2); /* layers.2.weight */
        mxp_model_master(r.m)[w2->offset + 7] = NAN;
        mxp_model_sync_work(r.m);
        mxp_guard_decision d;
        mxp_step_result res = real_step(&r, &d);
        mxp_guard_status st;
        mxp_guard_get_status(r.g, &st);
        CHECK(res.site.found && res.site.layer == 2 && !res.site.backward);
        CHECK(strcmp(st.anomaly.what, anomaly ? "weight" : "output") == 0);
        rig_free(&r);
    }
    /* a NaN in the input batch */
    c.anomaly_mode = true;
    rig r = rig_make(MXP_PRECISION_FP32, &c, false);
    float keep = xs[5];
    xs[5] = NAN;
    mxp_guard_decision d;
    mxp_step_result res = real_step(&r, &d);
    xs[5] = keep;
    CHECK(res.site.found && res.site.layer == -1 && strcmp(res.site.op, "input") == 0);
    rig_free(&r);
    (void)err;
}

/* ---- skipped steps -------------------------------------------------------------------- */

static void test_skip_bit_identical(void) {
    const mxp_precision modes[] = {MXP_PRECISION_FP32, MXP_PRECISION_MIXED_BF16,
                                   MXP_PRECISION_MIXED_FP16, MXP_PRECISION_BF16,
                                   MXP_PRECISION_FP16, MXP_PRECISION_FP8};
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        mxp_guard_config c = only(MXP_RULE_NONFINITE_LOSS);
        c.fault.kind = MXP_FAULT_INF;
        c.fault.pass = MXP_FAULT_BACKWARD;
        c.fault.layer = 2;
        c.fault.step = 4; /* three real updates first, so moments are nonzero */
        rig r = rig_make(modes[mi], &c, false);
        mxp_guard_decision d;
        for (int i = 0; i < 3; i++) CHECK(!real_step(&r, &d).skipped);
        const size_t P = mxp_model_num_params(r.m);
        mxp_dtype wt;
        const void *work = mxp_model_work(r.m, &wt);
        const size_t wbytes = P * mxp_dtype_info(wt)->size;
        unsigned char *w = mxp_calloc(wbytes, 1);
        float *ma = mxp_calloc(P, sizeof(float)), *m = mxp_calloc(P, sizeof(float));
        float *v = mxp_calloc(P, sizeof(float));
        float *om, *ov;
        size_t n;
        int64_t t0, t1;
        mxp_trainer_optim_state(r.t, &om, &ov, &n, &t0);
        memcpy(w, work, wbytes);
        if (mxp_model_master(r.m)) memcpy(ma, mxp_model_master(r.m), P * sizeof(float));
        memcpy(m, om, P * sizeof(float));
        memcpy(v, ov, P * sizeof(float));
        mxp_step_result res = real_step(&r, &d);
        CHECK_MSG(res.skipped, "%s: the faulted step was applied", mxp_precision_name(modes[mi]));
        mxp_trainer_optim_state(r.t, &om, &ov, &n, &t1);
        CHECK(t1 == t0 && t0 == 3);
        CHECK_MSG(memcmp(w, mxp_model_work(r.m, &wt), wbytes) == 0 &&
                      (!mxp_model_master(r.m) ||
                       memcmp(ma, mxp_model_master(r.m), P * sizeof(float)) == 0) &&
                      memcmp(m, om, P * sizeof(float)) == 0 &&
                      memcmp(v, ov, P * sizeof(float)) == 0,
                  "%s: a skipped step changed weights or optimizer state",
                  mxp_precision_name(modes[mi]));
        mxp_free(w);
        mxp_free(ma);
        mxp_free(m);
        mxp_free(v);
        rig_free(&r);
    }
}

int main(void) {
    make_data();
    test_config();
    test_kill_switch_beats_auto();
    test_nonfinite_threshold();
    test_overflow_thresholds();
    test_grad_health_thresholds();
    test_loss_scale_threshold();
    test_headroom_threshold();
    test_underflow_threshold();
    test_canary_threshold();
    test_fallback_and_stop();
    test_rollback();
    test_chain_support();
    test_operator_and_retry();
    test_provenance();
    test_anomaly_inputs_and_weights();
    test_skip_bit_identical();
    return test_finish("test_guard");
}
