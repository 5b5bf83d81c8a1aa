/* tests/test_guard_recovery.c: the guard inside world-model runs, driven
 * by the fault.* config keys.
 * - sustained FP16 overflow (a layer whose activations exceed 65504, as in
 *   the DINOv3 case) in mixed_fp16 falls back to mixed_bf16 and the run's
 *   validation loss ends within 2% of an FP32 run of the same length;
 * - 10 consecutive NaN losses trigger fallback + rollback to the newest
 *   healthy state, and the run completes every planned step;
 * - sustained gradient overflow fires the overflow-rate rule (fallback at
 *   > 30%), then its 10-30% band (alert);
 * - the advisor refuses FP16 for a model whose activations exceed 65504
 *   and accepts it for the default world model (the same code path as
 *   training.precision=auto, on the default config); the timed choice
 *   writes every text field of its result (an output filled with non-ASCII
 *   bytes beforehand comes back as NUL-terminated printable text);
 * - SIGUSR1 switches a running job to FP32 at the next step boundary
 *   without losing a step;
 * - a stop rule ends the run gracefully. */
#include <mixprec/mixprec.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard/guard_internal.h"
#include "kernels/kernels.h"
#include "testutil.h"

static const char *const kSmall[] = {"data.trajectories=48", "data.episode_length=100",
                                     "model.hidden=64",      "model.depth=2",
                                     "training.epochs=4",    "training.batch_size=32"};

/* The small config plus overrides (NULL-terminated). */
static mxp_config config(bool small, const char *const *ov) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    if (small)
        for (size_t i = 0; i < sizeof kSmall / sizeof kSmall[0]; i++)
            CHECK_OK(mxp_config_apply_override(b, kSmall[i], &err), &err);
    for (; ov && *ov; ov++) CHECK_OK(mxp_config_apply_override(b, *ov, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

typedef struct run {
    double val;
    mxp_precision final;
    mxp_guard_status st;
    size_t n_events;
    mxp_guard_event ev[16];
    size_t hist_n;
    int64_t total_steps; /* planned */
    bool stopped;
} run;

static run train(const mxp_config *cfg) {
    run r;
    memset(&r, 0, sizeof r);
    mxp_world_model *wm = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_world_model_create(cfg, &wm, &err), &err);
    if (!wm) return r;
    CHECK_OK(mxp_world_model_train(wm, cfg->epochs, cfg->batch_size, &err), &err);
    CHECK_OK(mxp_world_model_validation_loss(wm, &r.val, &err), &err);
    r.final = mxp_model_policy(mxp_world_model_model(wm))->mode;
    r.stopped = mxp_world_model_stopped(wm);
    mxp_guard *g = mxp_world_model_guard(wm);
    if (g) {
        mxp_guard_get_status(g, &r.st);
        const mxp_guard_event *ev = mxp_guard_events(g, &r.n_events);
        for (size_t i = 0; i < r.n_events && i < 16; i++) r.ev[i] = ev[i];
    }
    (void)mxp_trainer_history(mxp_world_model_trainer(wm), &r.hist_n);
    r.total_steps = mxp_world_model_samples_per_epoch(wm, cfg->batch_size) / cfg->batch_size *
                    cfg->epochs;
    mxp_world_model_destroy(wm);
    return r;
}

static const mxp_guard_event *find_event(const run *r, mxp_guard_rule rule) {
    for (size_t i = 0; i < r->n_events && i < 16; i++)
        if (r->ev[i].kind == MXP_EVENT_RULE && r->ev[i].rule == rule) return &r->ev[i];
    return NULL;
}

/* Layer 0's weights x 1e6 (at create): its outputs far exceed 65504, and a
 * layernorm after it brings the network back to a normal scale, so the same
 * model trains in FP32 and BF16 while every FP16 step overflows. */
static void test_sustained_overflow(void) {
    const char *fault[] = {"model.layernorm=true", "fault.kind=scale_weights", "fault.step=0",
                           "fault.layer=0", "fault.value=1e6", NULL};
    mxp_config c32 = config(true, fault);
    run ref = train(&c32);
    const char *f16[] = {"model.layernorm=true", "fault.kind=scale_weights", "fault.step=0",
                         "fault.layer=0", "fault.value=1e6", "training.precision=mixed_fp16",
                         NULL};
    mxp_config c16 = config(true, f16);
    run r = train(&c16);
    printf("sustained overflow: fp32 val %.6f, mixed_fp16 -> %s val %.6f (%+.2f%%)\n", ref.val,
           mxp_precision_name(r.final), r.val, 100 * (r.val - ref.val) / ref.val);
    CHECK(r.final == MXP_PRECISION_MIXED_BF16);
    CHECK(r.st.fallbacks == 1 && r.st.initial == MXP_PRECISION_MIXED_FP16);
    const mxp_guard_event *e = find_event(&r, MXP_RULE_NONFINITE_LOSS);
    CHECK(e && e->from == MXP_PRECISION_MIXED_FP16 && e->to == MXP_PRECISION_MIXED_BF16 &&
          (e->taken & MXP_ACT_FALLBACK));
    /* provenance of the overflow: the scaled layer, in the forward pass */
    CHECK(e && e->site.found && !e->site.backward && e->site.layer == 0);
    CHECK_MSG(isfinite(r.val) && fabs(r.val - ref.val) <= 0.02 * ref.val,
              "after fallback val %g vs fp32 %g: beyond 2%%", r.val, ref.val);
    CHECK(ref.st.fallbacks == 0 && ref.st.events == 0); /* FP32 never overflows here */
}

static void test_ten_nan_losses(void) {
    const char *ov[] = {"training.precision=mixed_fp16", "fault.kind=nan", "fault.layer=2",
                        "fault.step=31", "fault.count=10", "guard.rollback.snapshot_every=20",
                        NULL};
    mxp_config cfg = config(true, ov);
    run r = train(&cfg);
    const mxp_guard_event *e = find_event(&r, MXP_RULE_NONFINITE_LOSS);
    CHECK(e != NULL);
    if (e) {
        printf("10 NaN losses: %s\n", e->detail);
        CHECK(e->severity == MXP_SEV_P0 && e->step == 40 && e->value == 10);
        CHECK((e->taken & MXP_ACT_FALLBACK) && (e->taken & MXP_ACT_ROLLBACK));
        CHECK(e->rollback_to == 20); /* the newest healthy state: after step 20 */
        CHECK(e->site.found && !e->site.backward && e->site.layer == 2);
    }
    CHECK(r.st.rollbacks == 1 && r.st.fallbacks == 1 && r.final == MXP_PRECISION_MIXED_BF16);
    /* completed: every planned step, plus the 20 rolled back (21..40) */
    CHECK_MSG((int64_t)r.hist_n == r.total_steps + 20, "history %zu, planned %lld",
              r.hist_n, (long long)r.total_steps);
    CHECK(!r.stopped && isfinite(r.val));
    mxp_config c32 = config(true, NULL);
    run ref = train(&c32);
    CHECK_MSG(r.val <= 1.05 * ref.val, "val %g after recovery vs clean fp32 %g", r.val, ref.val);
}

static void test_overflow_rate(void) {
    const char *ov[] = {"training.precision=mixed_fp16", "fault.kind=inf", "fault.pass=backward",
                        "fault.layer=2", "fault.step=1", "fault.count=110", NULL};
    mxp_config cfg = config(true, ov);
    run r = train(&cfg);
    const mxp_guard_event *hi = find_event(&r, MXP_RULE_OVERFLOW_RATE_HIGH);
    const mxp_guard_event *band = find_event(&r, MXP_RULE_OVERFLOW_RATE);
    CHECK(hi && hi->step == 100 && hi->value == 1.0 && hi->severity == MXP_SEV_P1 &&
          (hi->taken & MXP_ACT_FALLBACK) && hi->to == MXP_PRECISION_MIXED_BF16);
    CHECK(hi && hi->site.found && hi->site.backward && hi->site.layer == 2);
    /* after the fallback the window restarts: steps 101..110 still fault,
     * 10 of the next 100 = 10%: the P2 band */
    CHECK(band && band->step == 200 && band->severity == MXP_SEV_P2 &&
          band->taken == MXP_ACT_ALERT);
    CHECK(!find_event(&r, MXP_RULE_NONFINITE_LOSS)); /* the loss itself stayed finite */
    CHECK(r.final == MXP_PRECISION_MIXED_BF16 && !r.stopped);
}


/* printable ASCII, NUL-terminated within n bytes */
static bool printable_text(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\0') return true;
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return false;
    }
    return false;
}

/* guard_auto_by_time fills every text field of its result: none may keep
 * what the caller's memory held (a stale field once printed raw bytes into
 * the run's log) */
static void check_auto_choice_text(const mxp_model *m, const mxp_batch *b,
                                   const mxp_preflight_report *rep) {
    guard_auto_choice ch;
    memset(&ch, 0xA0, sizeof ch);
    mxp_error err = {0};
    CHECK_OK(guard_auto_by_time(m, b, rep, 16, &ch, &err), &err);
    CHECK(printable_text(ch.why, sizeof ch.why) && ch.why[0]);
    CHECK(printable_text(ch.times, sizeof ch.times) && ch.times[0]);
    CHECK(printable_text(ch.refused, sizeof ch.refused));
    CHECK(ch.refused[0] == '\0' || strncmp(ch.refused, "mixed_", 6) == 0);
}
static void test_advisor(void) {
    mxp_cpu_features fp16_native = {0};
    fp16_native.avx512f = fp16_native.f16c = fp16_native.avx512_fp16 = true;
    mxp_error err = {0};
    for (int scaled = 0; scaled < 2; scaled++) {
        /* the DEFAULT world model config (scaled: layer 0 weights x 1e5) */
        const char *ov[] = {"fault.kind=scale_weights", "fault.step=0", "fault.layer=0",
                            "fault.value=1e5", NULL};
        mxp_config cfg = config(false, scaled ? ov : NULL);
        mxp_world_model *wm = NULL;
        CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
        if (!wm) continue;
        mxp_replay_split tr = mxp_replay_train(mxp_world_model_replay(wm));
        mxp_batch bs[8];
        const int64_t in = mxp_replay_in_dim(mxp_world_model_replay(wm));
        const int64_t od = mxp_replay_out_dim(mxp_world_model_replay(wm));
        for (int i = 0; i < 8; i++)
            bs[i] = (mxp_batch){tr.x + (size_t)(i * 32 * in), tr.y + (size_t)(i * 32 * od), NULL,
                                32};
        mxp_preflight_report rep;
        CHECK_OK(mxp_guard_preflight(mxp_world_model_model(wm), bs, 8, cfg.guard.rules[MXP_RULE_HEADROOM].threshold,
                                     cfg.guard.rules[MXP_RULE_UNDERFLOW].threshold, &fp16_native,
                                     &rep, &err),
                 &err);
        const mxp_format_verdict *v = &rep.verdict[MXP_PRECISION_MIXED_FP16];
        printf("advisor (%s): max activation %.4g, fp16 %s (%s) -> %s\n",
               scaled ? "layer 0 x 1e5" : "default", rep.max_act, v->safe ? "safe" : "refused",
               v->reason, mxp_precision_name(rep.recommended));
        if (!scaled) check_auto_choice_text(mxp_world_model_model(wm), &bs[0], &rep);
        if (scaled) {
            CHECK(rep.max_act > 65504 && rep.max_act_layer >= 0);
            CHECK(!v->safe && strstr(v->reason, "beyond"));
            CHECK(rep.recommended != MXP_PRECISION_MIXED_FP16 &&
                  rep.recommended != MXP_PRECISION_FP16);
            CHECK(rep.verdict[MXP_PRECISION_MIXED_BF16].safe); /* BF16 keeps FP32's range */
        } else {
            CHECK(rep.max_act < 65504.0 / 8);
            CHECK(v->safe && rep.recommended == MXP_PRECISION_MIXED_FP16);
        }
        mxp_world_model_destroy(wm);
    }
    /* training.precision=auto on the default config runs this same preflight,
     * times the safe candidates on this CPU (guard/advisor_time.c) and
     * switches to the fastest: which one depends on the CPU and its load, so
     * the check is that it is one of the safe candidates this CPU runs
     * without emulation, with the FP16-accumulate GEMM only where it is
     * FP16 FMA hardware */
    const char *ov[] = {"training.precision=auto", NULL};
    mxp_config cfg = config(false, ov);
    CHECK(cfg.precision_auto);
    mxp_world_model *wm = NULL;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    if (wm) {
        const mxp_precision_policy *pol = mxp_model_policy(mxp_world_model_model(wm));
        mxp_precision got = pol->mode;
        const mxp_cpu_features *f = mxp_cpu_features_get();
        printf("precision auto on this CPU: %s%s\n", mxp_precision_name(got),
               pol->fp16_accum_k ? " with FP16 accumulation" : "");
        CHECK(got == MXP_PRECISION_FP32 || got == MXP_PRECISION_MIXED_BF16 ||
              got == MXP_PRECISION_MIXED_FP16);
        CHECK(mxp_precision_support(got, f, NULL) >= MXP_SUPPORT_CONVERT);
        CHECK(pol->fp16_accum_k == 0 ||
              (got == MXP_PRECISION_MIXED_FP16 &&
               mxp_kernels_get()->gemm_compute(MXP_DTYPE_F16, true) == MXP_GEMM_COMPUTE_FP16_FMA));
        mxp_world_model_destroy(wm);
    }
    /* auto never puts a model with activations beyond 65504 in FP16 */
    const char *ov2[] = {"training.precision=auto", "fault.kind=scale_weights", "fault.step=0",
                         "fault.layer=0", "fault.value=1e5", NULL};
    cfg = config(false, ov2);
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    if (wm) {
        mxp_precision got = mxp_model_policy(mxp_world_model_model(wm))->mode;
        CHECK(got != MXP_PRECISION_MIXED_FP16 && got != MXP_PRECISION_FP16);
        mxp_guard_status st;
        mxp_guard_get_status(mxp_world_model_guard(wm), &st);
        CHECK(st.events == 0);
        mxp_world_model_destroy(wm);
    }
}

typedef struct sig_state {
    int64_t raise_at;
} sig_state;

/* The progress callback runs after step p->step: the signal lands between
 * two steps, as an operator's kill -USR1 would. */
static void on_progress(void *user, const mxp_progress *p) {
    sig_state *s = user;
    if (p->step == s->raise_at) raise(SIGUSR1);
}

static void test_sigusr1(void) {
    mxp_error err = {0};
    CHECK_OK(mxp_guard_install_signal(SIGUSR1, &err), &err);
    const char *ov[] = {"training.precision=mixed_bf16", "training.epochs=1", NULL};
    mxp_config cfg = config(true, ov);
    mxp_world_model *wm = NULL;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    if (!wm) return;
    sig_state s = {.raise_at = 20};
    mxp_world_model_set_progress(wm, on_progress, &s);
    CHECK_OK(mxp_world_model_train(wm, 1, cfg.batch_size, &err), &err);
    size_t n;
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &n);
    const int64_t planned = mxp_world_model_samples_per_epoch(wm, cfg.batch_size) / cfg.batch_size;
    CHECK((int64_t)n == planned); /* no lost or repeated step */
    CHECK(n > 21 && h[19].precision == MXP_PRECISION_MIXED_BF16 &&
          h[20].precision == MXP_PRECISION_FP32 && !h[20].skipped);
    bool all32 = true;
    for (size_t i = 20; i < n; i++) all32 &= h[i].precision == MXP_PRECISION_FP32;
    CHECK(all32);
    mxp_guard_status st;
    mxp_guard_get_status(mxp_world_model_guard(wm), &st);
    CHECK(st.operator_switches == 1 && st.current == MXP_PRECISION_FP32);
    mxp_world_model_destroy(wm);
}

static void test_stop_rule(void) {
    const char *ov[] = {"training.precision=mixed_fp16", "fault.kind=nan", "fault.step=5",
                        "fault.count=0", "guard.nonfinite_loss.action=stop", NULL};
    mxp_config cfg = config(true, ov);
    run r = train(&cfg);
    CHECK(r.stopped && r.st.stopped);
    CHECK(r.hist_n == 14); /* 4 clean steps, the 10th non-finite one stops */
    const mxp_guard_event *e = find_event(&r, MXP_RULE_NONFINITE_LOSS);
    CHECK(e && (e->taken & MXP_ACT_STOP));
}

/* With a checkpoint manager attached, a rollback restores the newer of the
 * in-memory snapshot (here only the initial one) and the newest healthy
 * checkpoint on disk (step 30); checkpoints written while the losses were
 * non-finite are not rollback targets. */
static void test_checkpoint_rollback(void) {
    char dir[] = "/tmp/mxp_guard_ckpt_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *ov[] = {"training.precision=mixed_fp16", "fault.kind=nan", "fault.layer=2",
                        "fault.step=31", "fault.count=10", "guard.rollback.snapshot_every=1000",
                        "training.epochs=1", NULL};
    mxp_config cfg = config(true, ov);
    mxp_error err = {0};
    mxp_world_model *wm = NULL;
    mxp_ckpt_manager *mgr = NULL;
    mxp_ckpt_policy pol = {.every_steps = 10, .every_seconds = 0, .keep_last = 3};
    snprintf(pol.dir, sizeof pol.dir, "%s", dir);
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    CHECK_OK(mxp_ckpt_manager_create(&pol, &mgr, &err), &err);
    if (!wm || !mgr) return;
    mxp_world_model_set_checkpointer(wm, mgr);
    CHECK_OK(mxp_world_model_train(wm, 1, cfg.batch_size, &err), &err);
    mxp_guard_status st;
    mxp_guard_get_status(mxp_world_model_guard(wm), &st);
    size_t n;
    const mxp_guard_event *ev = mxp_guard_events(mxp_world_model_guard(wm), &n);
    CHECK(st.rollbacks == 1 && st.fallbacks == 1);
    CHECK(n >= 1 && ev[n - 1].rule == MXP_RULE_NONFINITE_LOSS && ev[n - 1].rollback_to == -1);
    (void)mxp_trainer_history(mxp_world_model_trainer(wm), &n);
    const int64_t planned = mxp_world_model_samples_per_epoch(wm, cfg.batch_size) / cfg.batch_size;
    CHECK_MSG((int64_t)n == planned + 10, "history %zu, planned %lld (+10 replayed from the "
              "step-30 checkpoint)", n, (long long)planned);
    char js[8192];
    CHECK(mxp_guard_status_json(mxp_world_model_guard(wm), js, sizeof js) > 0 &&
          strstr(js, "\"rollback_store\":\"memory+checkpoints\""));
    mxp_world_model_destroy(wm);
    mxp_ckpt_manager_destroy(mgr);
    mxp_ckpt_entry *list = NULL;
    size_t nl = 0;
    CHECK_OK(mxp_ckpt_list(dir, &list, &nl, &err), &err);
    for (size_t i = 0; i < nl; i++) unlink(list[i].path);
    mxp_free(list);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    test_sustained_overflow();
    test_ten_nan_losses();
    test_overflow_rate();
    test_advisor();
    test_sigusr1();
    test_stop_rule();
    test_checkpoint_rollback();
    return test_finish("test_guard_recovery");
}
