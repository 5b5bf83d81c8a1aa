/* tests/test_step_ctl.c: the step controller, the one owner of precision
 * switches (train/step_ctl.h, docs/design.md "Who changes precision").
 *
 * Checks, against the rules written in docs/design.md (not against the
 * code's own priority function):
 * - every requester only requests; the switch happens at the boundary and
 *   is recorded once (one decision, one switch counted, its source): the
 *   scaler's at-minimum fallback (trainer), the guard's fallback (a NaN
 *   drill in a run: one guard fallback event per switch; the scaler in a
 *   run: one scaler event), the operator's
 *   signal (one operator event), the operator's control-API request (one
 *   observer precision_changed), the advisor (precision: auto); the
 *   data-parallel agreement is driven in test_dist (several processes);
 * - two requests before one boundary: kill switch (signal, operator fp32)
 *   over the guard over the scaler over an operator's other mode over the
 *   advisor; at equal priority the newer;
 * - a switch restarts the loss scaler at its initial scale;
 * - misuse is refused with MXP_ERR_STATE: a switch or a nested step inside
 *   a step, a step on a stopped trainer.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <string.h>

#include "testutil.h"
#include "train/step_ctl.h"

#define IN 8

static mxp_model *make_model(mxp_precision p) {
    mxp_model_spec s = {0};
    s.in_dim = IN;
    s.max_batch = 16;
    s.n_layers = 2;
    s.layers[0] = (mxp_layer_spec){MXP_LAYER_LINEAR, IN, 0.0};
    s.layers[1] = (mxp_layer_spec){MXP_LAYER_LINEAR, IN, 0.0};
    s.loss = MXP_LOSS_MSE;
    s.layernorm_eps = 1e-5f;
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&s, &pol, 3, &m, &err), &err);
    return m;
}

static float g_x[16 * IN], g_y[16 * IN];

static mxp_batch batch(void) {
    mxp_rng r;
    mxp_rng_init(&r, 11);
    for (size_t i = 0; i < 16 * IN; i++) {
        g_x[i] = mxp_rng_normal(&r);
        g_y[i] = mxp_rng_normal(&r);
    }
    return (mxp_batch){.x = g_x, .y = g_y, .B = 16};
}

static mxp_precision mode_of(mxp_trainer *t) {
    return mxp_model_policy(mxp_trainer_model(t))->mode;
}

/* ---- priority: two requests before one boundary ------------------------------ */

typedef struct req {
    step_source src;
    mxp_precision to;
} req;

/* From mixed_fp16: requests a then b, one boundary; the expected winner
 * from the documented table. */
static void pair(req a, req b, req want) {
    mxp_error err = {0};
    mxp_model *m = make_model(MXP_PRECISION_MIXED_FP16);
    mxp_trainer *t = NULL;
    mxp_trainer_config tc = mxp_trainer_config_default();
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) return;
    step_ctl_listen_signals(t, true);
    const int64_t sw0 = step_ctl_switches(t);
    const req r[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (r[i].src == STEP_SRC_SIGNAL)
            step_ctl_signal_fp32(); /* what the SIGUSR1 handler does */
        else
            CHECK_OK(step_ctl_request(t, r[i].to, r[i].src, "test", &err), &err);
    }
    CHECK(mode_of(t) == MXP_PRECISION_MIXED_FP16); /* requests change nothing */
    step_decision d;
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK_MSG(d.serial == 1 && d.source == want.src && d.to == want.to && d.switched,
              "%s(%s) then %s(%s): decided %s(%s), serial %llu", step_source_name(a.src),
              mxp_precision_name(a.to), step_source_name(b.src), mxp_precision_name(b.to),
              step_source_name(d.source), mxp_precision_name(d.to),
              (unsigned long long)d.serial);
    CHECK(mode_of(t) == want.to);
    CHECK(step_ctl_switches(t) == sw0 + 1); /* exactly one switch for two requests */
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err); /* nothing left over */
    CHECK(d.serial == 0 && step_ctl_switches(t) == sw0 + 1);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

static void test_priority(void) {
    const req sig = {STEP_SRC_SIGNAL, MXP_PRECISION_FP32};
    const req op32 = {STEP_SRC_REQUEST, MXP_PRECISION_FP32};
    const req opbf = {STEP_SRC_REQUEST, MXP_PRECISION_MIXED_BF16};
    const req guard = {STEP_SRC_GUARD, MXP_PRECISION_MIXED_BF16};
    const req guard32 = {STEP_SRC_GUARD, MXP_PRECISION_FP32};
    const req scaler = {STEP_SRC_SCALER, MXP_PRECISION_MIXED_BF16};
    const req adv = {STEP_SRC_ADVISOR, MXP_PRECISION_FP32};
    const req advbf = {STEP_SRC_ADVISOR, MXP_PRECISION_BF16};
    /* the kill switch wins over the guard, in either order */
    pair(guard, sig, sig);
    pair(sig, guard, sig);
    pair(guard, op32, op32);
    pair(op32, guard, op32);
    /* the guard over the scaler, over an operator's other mode, over the advisor */
    pair(scaler, guard32, guard32);
    pair(guard32, scaler, guard32);
    pair(guard, (req){STEP_SRC_REQUEST, MXP_PRECISION_FP16}, guard);
    pair(adv, guard, guard);
    /* the scaler over an operator's other mode and the advisor */
    pair(scaler, (req){STEP_SRC_REQUEST, MXP_PRECISION_FP16}, scaler);
    pair(adv, scaler, scaler);
    /* an operator's other mode over the advisor */
    pair(opbf, adv, opbf);
    pair(adv, opbf, opbf);
    /* equal priority: the newer */
    pair(guard, guard32, guard32);
    pair(advbf, adv, adv);
    pair(opbf, op32, op32); /* op32 is the kill switch: higher anyway */
}

/* ---- a switch resets the scaler; a signal reaches listeners only ------------- */

typedef struct hook_state {
    mxp_trainer *t;
    bool poison;
    mxp_status in_boundary, in_switch, in_set, nested;
    char msg[MXP_ERROR_MSG_MAX];
} hook_state;

static void hook(void *user, int64_t step, float *g, size_t n) {
    (void)step;
    hook_state *h = user;
    if (h->poison)
        for (size_t i = 0; i < n; i += 7) g[i] = INFINITY;
    if (!h->t) return;
    mxp_error e = {0};
    step_decision d;
    h->in_boundary = step_ctl_boundary(h->t, &d, &e);
    snprintf(h->msg, sizeof h->msg, "%s", e.msg);
    h->in_switch = mxp_trainer_switch_precision(h->t, MXP_PRECISION_FP32, &e);
    h->in_set = mxp_trainer_set_precision(h->t, MXP_PRECISION_FP32, &e);
    mxp_step_result r;
    mxp_batch b = batch();
    h->nested = mxp_trainer_step(h->t, &b, 1, &r, &e);
}

static void test_reset_and_signal(void) {
    mxp_error err = {0};
    mxp_model *m = make_model(MXP_PRECISION_MIXED_FP16);
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.scaler.init_scale = 1024;
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) return;
    hook_state hs = {.poison = true};
    mxp_trainer_set_grad_hook(t, hook, &hs);
    mxp_batch b = batch();
    mxp_step_result res;
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err); /* overflow: 1024 -> 512 */
    CHECK(res.skipped && mxp_scaler_scale(mxp_trainer_scaler(t)) == 512.0f);
    /* a signal before the trainer listens is not taken */
    step_ctl_signal_fp32();
    step_decision d;
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK(d.serial == 0 && mode_of(t) == MXP_PRECISION_MIXED_FP16);
    /* nor one sent before it started listening */
    step_ctl_listen_signals(t, true);
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK(d.serial == 0 && mode_of(t) == MXP_PRECISION_MIXED_FP16);
    /* fp16 keeps loss scaling: the switch restarts the scaler at 1024 */
    CHECK_OK(step_ctl_request(t, MXP_PRECISION_FP16, STEP_SRC_GUARD, "test", &err), &err);
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK(d.switched && d.from == MXP_PRECISION_MIXED_FP16 && d.to == MXP_PRECISION_FP16);
    CHECK(mxp_scaler_scale(mxp_trainer_scaler(t)) == 1024.0f);
    mxp_scaler_state st;
    mxp_scaler_get_state(mxp_trainer_scaler(t), &st);
    CHECK(st.growth_tracker == 0 && st.steps_at_min == 0);
    /* a listening trainer takes the signal at its boundary: fp32, once */
    step_ctl_signal_fp32();
    CHECK(mode_of(t) == MXP_PRECISION_FP16);
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK(d.source == STEP_SRC_SIGNAL && d.switched && mode_of(t) == MXP_PRECISION_FP32);
    step_decision ls;
    CHECK(step_ctl_signal_decisions(t, &ls) == 1 && ls.serial == d.serial);
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK(d.serial == 0 && step_ctl_switches(t) == 2);
    /* a signal while already in fp32: decided, not switched */
    step_ctl_signal_fp32();
    CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
    CHECK(d.source == STEP_SRC_SIGNAL && !d.switched && step_ctl_switches(t) == 2);
    CHECK(step_ctl_signal_decisions(t, NULL) == 2);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

/* ---- misuse --------------------------------------------------------------------- */

static void test_misuse(void) {
    mxp_error err = {0};
    mxp_model *m = make_model(MXP_PRECISION_MIXED_BF16);
    mxp_trainer_config tc = mxp_trainer_config_default();
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) return;
    hook_state hs = {.t = t};
    mxp_trainer_set_grad_hook(t, hook, &hs); /* runs inside the step */
    mxp_batch b = batch();
    mxp_step_result res;
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
    CHECK(hs.in_boundary == MXP_ERR_STATE && strstr(hs.msg, "in progress") != NULL);
    CHECK(hs.in_switch == MXP_ERR_STATE && hs.in_set == MXP_ERR_STATE);
    CHECK(hs.nested == MXP_ERR_STATE);
    CHECK(mode_of(t) == MXP_PRECISION_MIXED_BF16 && step_ctl_switches(t) == 0);
    mxp_trainer_set_grad_hook(t, NULL, NULL);
    /* between steps the same calls work */
    CHECK_OK(mxp_trainer_switch_precision(t, MXP_PRECISION_FP32, &err), &err);
    CHECK(mode_of(t) == MXP_PRECISION_FP32 && step_ctl_last(t)->source == STEP_SRC_DIRECT);
    /* bad requests */
    CHECK(step_ctl_request(t, MXP_PRECISION_COUNT, STEP_SRC_GUARD, "x", &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(step_ctl_request(t, (mxp_precision)-1, STEP_SRC_GUARD, "x", &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(mxp_trainer_switch_precision(t, MXP_PRECISION_COUNT, &err) == MXP_ERR_INVALID_ARG);
    /* a stopped trainer takes no step */
    step_ctl_stop(t, "test stop");
    CHECK(mxp_trainer_step(t, &b, 1, &res, &err) == MXP_ERR_STATE);
    CHECK(strstr(err.msg, "stopped") != NULL && strstr(err.msg, "test stop") != NULL);
    mxp_train_stats ts;
    mxp_trainer_stats(t, &ts);
    CHECK(ts.training_steps == 1);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

/* ---- the scaler's at-minimum fallback: a request --------------------------------- */

static void test_scaler_request(void) {
    mxp_error err = {0};
    for (int owned = 0; owned < 2; owned++) {
        mxp_model *m = make_model(MXP_PRECISION_MIXED_FP16);
        mxp_trainer_config tc = mxp_trainer_config_default();
        tc.scaler.init_scale = 4;
        tc.scaler.min_scale = 2;
        tc.scaler.at_min = MXP_SCALE_FLOOR_FALLBACK;
        mxp_trainer *t = NULL;
        CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
        if (!t) return;
        /* a run (or guard) around the trainer reaches the boundary itself */
        if (owned) step_ctl_claim(t, STEP_OWNER_RUN);
        hook_state hs = {.poison = true};
        mxp_trainer_set_grad_hook(t, hook, &hs);
        mxp_batch b = batch();
        mxp_step_result res;
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err); /* 4 -> 2 */
        CHECK(!res.fallback);
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err); /* at min: fallback */
        CHECK(res.fallback);
        step_source src;
        mxp_precision to;
        if (owned) { /* asked for, not applied: the step is over, the boundary is not */
            CHECK(mode_of(t) == MXP_PRECISION_MIXED_FP16 && step_ctl_switches(t) == 0);
            CHECK(step_ctl_pending(t, &src, &to) && src == STEP_SRC_SCALER &&
                  to == MXP_PRECISION_MIXED_BF16);
            CHECK(step_ctl_next_mode(t) == MXP_PRECISION_MIXED_BF16);
            step_decision d;
            CHECK_OK(step_ctl_boundary(t, &d, &err), &err);
            CHECK(d.switched && d.source == STEP_SRC_SCALER && d.after_step == 2);
        }
        CHECK(mode_of(t) == MXP_PRECISION_MIXED_BF16 && step_ctl_switches(t) == 1);
        CHECK(step_ctl_last(t)->source == STEP_SRC_SCALER && !step_ctl_pending(t, NULL, NULL));
        size_t n;
        const mxp_history_row *h = mxp_trainer_history(t, &n);
        CHECK(n == 2 && h[1].precision == MXP_PRECISION_MIXED_FP16); /* ran in the old mode */
        mxp_trainer_destroy(t);
        mxp_model_destroy(m);
    }
}

/* ---- every requester through a run: one event each -------------------------------- */

typedef struct watch {
    mxp_run *run;
    int64_t at;            /* progress step that asks */
    int how;               /* 0: control-API request, 1: signal */
    int changed;           /* observer precision_changed calls */
    mxp_precision from, to;
    int guard_switch;      /* guard events that switched (from != to) */
    int guard_fallback;    /* ... of them with the fallback action taken */
    int guard_operator;    /* operator events */
    int guard_scaler;      /* scaler events */
} watch;

static void on_progress(void *user, const mxp_run_progress *p) {
    watch *w = user;
    if (p->step != w->at) return;
    if (w->how == 0) mxp_run_request_precision(w->run, MXP_PRECISION_FP32, "test request");
    if (w->how == 1) mxp_guard_request_fp32();
}

static void on_changed(void *self, mxp_run *run, mxp_precision from, mxp_precision to,
                       const char *reason) {
    (void)run;
    watch *w = self;
    w->changed++;
    w->from = from;
    w->to = to;
    CHECK(reason && strcmp(reason, "test request") == 0);
}

static void on_guard(void *self, mxp_run *run, const mxp_guard_event *ev) {
    (void)run;
    watch *w = self;
    if (ev->from != ev->to) w->guard_switch++;
    if (ev->from != ev->to && (ev->taken & MXP_ACT_FALLBACK) && ev->kind == MXP_EVENT_RULE)
        w->guard_fallback++;
    if (ev->kind == MXP_EVENT_OPERATOR) w->guard_operator++;
    if (ev->kind == MXP_EVENT_SCALER) w->guard_scaler++;
}

static mxp_config config(const char *const *ov) {
    static const char *const small[] = {
        "data.trajectories=32", "data.episode_length=100", "model.hidden=32", "model.depth=2",
        "training.epochs=1", "training.batch_size=64", "checkpoint.enabled=false",
        "obs.store.enabled=false", NULL};
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    for (const char *const *k = small; *k; k++)
        CHECK_OK(mxp_config_apply_override(b, *k, &err), &err);
    for (; ov && *ov; ov++) CHECK_OK(mxp_config_apply_override(b, *ov, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

/* Train cfg with the watch as observer and progress; the run is returned
 * for inspection (NULL on failure). */
static mxp_run *train(const mxp_config *cfg, watch *w) {
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.checkpoints = false;
    o.progress = on_progress;
    o.progress_user = w;
    mxp_run_observer obs = {.self = w, .precision_changed = on_changed,
                            .guard_event = on_guard};
    o.observer = &obs;
    mxp_run *run = NULL;
    CHECK_OK(mxp_run_create(cfg, &o, &run, &err), &err);
    if (!run) return NULL;
    w->run = run;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    return run;
}

/* history row k (0-based, step k+1) ran in p */
static bool row_is(mxp_run *run, size_t k, mxp_precision p) {
    size_t n;
    const mxp_history_row *h = mxp_trainer_history(mxp_run_trainer(run), &n);
    return k < n && h[k].precision == p;
}

static void test_run_operator(void) {
    const char *ov[] = {"training.precision=mixed_bf16", NULL};
    mxp_config cfg = config(ov);
    for (int how = 0; how < 2; how++) {
        watch w = {.at = 3, .how = how};
        mxp_run *run = train(&cfg, &w);
        if (!run) return;
        mxp_trainer *t = mxp_run_trainer(run);
        /* asked after step 3 (between steps): step 4 is the first in fp32 */
        CHECK(row_is(run, 2, MXP_PRECISION_MIXED_BF16) && row_is(run, 3, MXP_PRECISION_FP32));
        CHECK(step_ctl_switches(t) == 1);
        CHECK(step_ctl_last(t)->after_step == 3 && step_ctl_last(t)->switched);
        if (how == 0) { /* control API / Python: the observer's one event */
            CHECK(step_ctl_last(t)->source == STEP_SRC_REQUEST);
            CHECK(w.changed == 1 && w.from == MXP_PRECISION_MIXED_BF16 &&
                  w.to == MXP_PRECISION_FP32);
        } else { /* SIGUSR1: the guard's one operator event */
            CHECK(step_ctl_last(t)->source == STEP_SRC_SIGNAL);
            CHECK(w.changed == 0 && w.guard_operator == 1 && w.guard_switch == 1);
            mxp_guard_status gs;
            mxp_guard_get_status(mxp_run_guard(run), &gs);
            CHECK(gs.operator_switches == 1 && gs.current == MXP_PRECISION_FP32);
        }
        mxp_run_destroy(run);
    }
}

static void test_run_guard_fallback(void) {
    /* the NaN drill of test_guard_quiet.sh: the guard rolls back and falls back */
    const char *ov[] = {"training.precision=mixed_fp16", "fault.kind=nan", "fault.layer=1",
                        "fault.step=5", "fault.count=10", "training.epochs=2", NULL};
    mxp_config cfg = config(ov);
    watch w = {.at = -1};
    mxp_run *run = train(&cfg, &w);
    if (!run) return;
    mxp_trainer *t = mxp_run_trainer(run);
    mxp_guard_status gs;
    mxp_guard_get_status(mxp_run_guard(run), &gs);
    CHECK_MSG(gs.fallbacks >= 1, "fallbacks %lld", (long long)gs.fallbacks);
    /* one switch per fallback, one guard fallback event per switch */
    CHECK_MSG(step_ctl_switches(t) == gs.fallbacks && w.guard_fallback == gs.fallbacks,
              "switches %lld, fallbacks %lld, fallback events %d",
              (long long)step_ctl_switches(t), (long long)gs.fallbacks, w.guard_fallback);
    CHECK(step_ctl_last(t)->source == STEP_SRC_GUARD && w.changed == 0);
    CHECK(mode_of(t) == gs.current && gs.current != MXP_PRECISION_MIXED_FP16);
    mxp_run_destroy(run);
}

static void test_run_scaler(void) {
    /* guard rules off (the fault alone makes a guard, which only reports):
     * NaN gradients from step 3 drive the scale 4 -> 2 -> at its minimum,
     * and the scaler's fallback policy asks for mixed_bf16 */
    const char *ov[] = {"training.precision=mixed_fp16", "guard.enabled=false",
                        "fault.kind=nan", "fault.step=3", "fault.count=4",
                        "training.loss_scale.init=4", "training.loss_scale.min_scale=2",
                        "training.loss_scale.at_min=fallback", NULL};
    mxp_config cfg = config(ov);
    watch w = {.at = -1};
    mxp_run *run = train(&cfg, &w);
    if (!run) return;
    mxp_trainer *t = mxp_run_trainer(run);
    CHECK_MSG(step_ctl_switches(t) == 1 && w.guard_scaler == 1 && w.guard_switch == 1,
              "switches %lld, scaler events %d", (long long)step_ctl_switches(t),
              w.guard_scaler);
    const step_decision *d = step_ctl_last(t);
    CHECK(d->source == STEP_SRC_SCALER && d->from == MXP_PRECISION_MIXED_FP16 &&
          d->to == MXP_PRECISION_MIXED_BF16 && w.changed == 0);
    /* the step that fell back ran in mixed_fp16, the next one in mixed_bf16 */
    const size_t k = (size_t)d->after_step;
    CHECK(k >= 4 && row_is(run, k - 1, MXP_PRECISION_MIXED_FP16) &&
          row_is(run, k, MXP_PRECISION_MIXED_BF16));
    mxp_run_destroy(run);
}

static void test_run_advisor(void) {
    const char *ov[] = {"training.precision=auto", NULL};
    mxp_config cfg = config(ov);
    mxp_error err = {0};
    mxp_run *run = NULL;
    mxp_run_options o = mxp_run_options_default();
    o.checkpoints = false;
    CHECK_OK(mxp_run_create(&cfg, &o, &run, &err), &err);
    if (!run) return;
    mxp_trainer *t = mxp_run_trainer(run);
    const step_decision *d = step_ctl_last(t);
    /* the advisor's choice is a decision of its own before the first step
     * (none when it kept the configured mode) */
    if (step_ctl_switches(t) == 1)
        CHECK(d->serial == 1 && d->source == STEP_SRC_ADVISOR && d->after_step == 0 &&
              d->to == mode_of(t));
    else
        CHECK(step_ctl_switches(t) == 0 && d->serial == 0);
    mxp_run_destroy(run);
}

int main(void) {
    mxp_log_set_level(MXP_LOG_ERROR);
    test_priority();
    test_reset_and_signal();
    test_misuse();
    test_scaler_request();
    test_run_operator();
    test_run_guard_fallback();
    test_run_scaler();
    test_run_advisor();
    return test_finish("test_step_ctl");
}
