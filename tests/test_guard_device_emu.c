/* tests/test_guard_device_emu.c: the guard's safety net on the device step
 * (training.device=cuda on the emulated table, tests/dstep_emu.h,
 * substituted through trainer_device_override) against the CPU running
 * the same drill; the CPU is the oracle.
 *
 *   - the per-layer headroom monitor: a monitor attached to the model (no
 *     guard) sees, step by step, the same records on the device (fed from
 *     the step's provenance scans, no extra copy) as on the CPU: for every
 *     layer's output and input gradient and the loss gradient the same
 *     element counts, non-finite counts and storage dtypes, and the amax
 *     within test_run_device_emu's loss tolerances (step 1 is a pure
 *     forward of identical weights: 1e-6 relative in fp32, 1e-4 mixed;
 *     later 2e-3); the device records no parameter gradients (MXP_MON_DW);
 *   - the guard drills of tests/test_guard_recovery.c on the small world
 *     model: a forward NaN in layer 2 for 10 steps (nonfinite_loss: P0,
 *     fallback mixed_fp16 -> mixed_bf16 and rollback to the snapshot of
 *     step 20), a backward Inf in layer 2's weight gradient for 110 steps
 *     (overflow-rate fallback, then its 10-30% band), sustained FP16
 *     overflow (layer 0's weights x 1e6, layernorm after it: fallback), the
 *     stop action (the guard's kill switch), SIGUSR1 (the operator's switch
 *     to FP32 at the next boundary) and the FP32 canary every 7 steps in
 *     mixed_bf16. The device plants fault.kind nan/inf at the CPU's site
 *     (mxp_ds_set_fault). Asserted: the same event sequence (kind, rule,
 *     severity, step, actions taken, modes, rollback target, site: pass,
 *     layer, op), count-based event values identical, the same history
 *     (length, per-step precision and skips, loss scales), the guard's
 *     headroom value each step within 2e-3 of the CPU's (NaN on the
 *     device before its monitor was fed), the canary divergence within
 *     2e-3 absolute, the fallback/rollback/switch counts equal.
 *
 * Negative controls (checked by hand): with monitor_feed in
 * trainer_device_step.c a no-op, every monitor check and the headroom
 * samples fail (the device records nothing); with the backward plant in
 * dstep_run.c removed, the backward-Inf drill has no events on the device.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstep_emu.h"
#include "testutil.h"
#include "train/trainer_device.h"

#define MAX_EV 32
#define MAX_STEPS 1024
#define MAX_L 16

static emu_dev g_emu;

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static mxp_config config(const char *dev, const char *const *base, const char *const *ov) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char kv[64];
    snprintf(kv, sizeof kv, "training.device=%s", dev);
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    CHECK_OK(mxp_config_apply_override(b, kv, &err), &err);
    for (; base && *base; base++) CHECK_OK(mxp_config_apply_override(b, *base, &err), &err);
    for (; ov && *ov; ov++) CHECK_OK(mxp_config_apply_override(b, *ov, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

/* ---- the monitor, step by step ------------------------------------------------ */

typedef struct mon_rec {
    mxp_run *run;
    mxp_monitor *mon;
    int L;
    int64_t n;
    mxp_layer_stats st[MAX_STEPS / 4][MAX_L + 1];
} mon_rec;

static void mon_progress(void *user, const mxp_run_progress *p) {
    (void)p;
    mon_rec *r = user;
    if (r->n < MAX_STEPS / 4)
        for (int l = 0; l <= r->L; l++) r->st[r->n][l] = *mxp_monitor_layer(r->mon, l);
    r->n++;
    mxp_monitor_reset(r->mon);
}

static void mon_run(const mxp_config *cfg, mon_rec *r) {
    mxp_error err = {0};
    mxp_workload_provider wl;
    memset(r, 0, sizeof *r);
    CHECK_OK(mxp_workload_provider_builtin(cfg, &wl, &err), &err);
    mxp_run_options o = mxp_run_options_default();
    o.provider = &wl;
    o.checkpoints = false;
    o.progress = mon_progress;
    o.progress_user = r;
    CHECK_OK(mxp_run_create(cfg, &o, &r->run, &err), &err);
    if (!r->run) return;
    mxp_model *m = mxp_run_model(r->run);
    CHECK_OK(mxp_monitor_create(m, false, &r->mon, &err), &err);
    r->L = mxp_monitor_num_layers(r->mon);
    CHECK(r->L <= MAX_L);
    mxp_model_set_monitor(m, r->mon);
    CHECK_OK(mxp_run_train(r->run, 0, 0, &err), &err);
    mxp_model_set_monitor(m, NULL);
    mxp_monitor_destroy(r->mon);
    mxp_run_destroy(r->run);
}

static void test_monitor(const char *prec) {
    const char *base[] = {"model.workload=world_model", "data.trajectories=8",
                          "data.episode_length=40",     "training.batch_size=32",
                          "training.epochs=2",          "guard.enabled=false",
                          NULL};
    const char *pv[2] = {NULL, NULL};
    char kv[64];
    snprintf(kv, sizeof kv, "training.precision=%s", prec);
    pv[0] = kv;
    mxp_config cc = config("cpu", base, pv), cd = config("cuda", base, pv);
    static mon_rec rc, rd;
    mon_run(&cc, &rc);
    mon_run(&cd, &rd);
    const bool fp32 = strcmp(prec, "fp32") == 0;
    CHECK_MSG(rc.n == rd.n && rc.n >= 8 && rc.n <= MAX_STEPS / 4 && rc.L == rd.L,
              "monitor %s: %lld steps (cpu %lld), %d layers", prec, (long long)rd.n,
              (long long)rc.n, rd.L);
    double worst = 0;
    int64_t records = 0, bad = 0;
    for (int64_t i = 0; i < rc.n && i < rd.n && i < MAX_STEPS / 4; i++) {
        for (int l = 0; l <= rc.L; l++) {
            const mxp_layer_stats *a = &rc.st[i][l], *b = &rd.st[i][l];
            for (int w = MXP_MON_OUT; w <= MXP_MON_DX; w++) {
                const mxp_tensor_stats *ta = &a->t[w], *tb = &b->t[w];
                const mxp_dtype da = w == MXP_MON_OUT ? a->out_type : a->grad_type;
                const mxp_dtype db = w == MXP_MON_OUT ? b->out_type : b->grad_type;
                /* later steps: the loss tolerance, or one unit in the last
                 * place of the stored format when that is coarser */
                const double ulp = ldexp(1.0, -mxp_dtype_info(da)->man_bits);
                const double tol = i == 0 ? (fp32 ? 1e-6 : 1e-4) : fmax(2e-3, ulp);
                const double r = rel(tb->absmax, ta->absmax);
                const bool ok = ta->n == tb->n && ta->nonfinite == tb->nonfinite && da == db &&
                                (ta->absmax == tb->absmax || r <= tol);
                if (ta->n > 0) records++;
                if (ta->n > 0 && r > worst) worst = r;
                if (!ok && bad++ < 5)
                    CHECK_MSG(ok, "monitor %s step %lld layer %d %s: n %lld/%lld nf %lld/%lld "
                              "amax %.9g/%.9g (rel %.2e) dtype %d/%d", prec, (long long)i + 1,
                              l, w == MXP_MON_OUT ? "out" : "dx", (long long)ta->n,
                              (long long)tb->n, (long long)ta->nonfinite,
                              (long long)tb->nonfinite, (double)ta->absmax,
                              (double)tb->absmax, r, (int)da, (int)db);
            }
            CHECK_MSG(b->t[MXP_MON_DW].n == 0, "monitor %s: the device recorded a parameter "
                      "gradient at layer %d", prec, l);
        }
    }
    CHECK_MSG(bad == 0, "monitor %s: %lld records differ", prec, (long long)bad);
    CHECK_MSG(records >= rc.n * rc.L, "monitor %s: only %lld records", prec, (long long)records);
    printf("  monitor     %-10s %3lld steps, %lld records (out, dx), worst amax rel diff %.2e\n",
           prec, (long long)rc.n, (long long)records, worst);
}

/* ---- the guard drills ----------------------------------------------------------- */

static const char *const kSmall[] = {"data.trajectories=48", "data.episode_length=100",
                                     "model.hidden=64",      "model.depth=2",
                                     "training.batch_size=32", NULL};

typedef struct drill {
    mxp_guard_status st;
    size_t n_ev;
    mxp_guard_event ev[MAX_EV];
    size_t hist_n;
    mxp_history_row hist[MAX_STEPS];
    double head[MAX_STEPS]; /* the guard's headroom value after each step */
    int64_t n_prog;
    int64_t raise_at; /* SIGUSR1 after this step (0: none) */
    bool stopped;
    mxp_world_model *wm;
} drill;

static void drill_progress(void *user, const mxp_progress *p) {
    drill *d = user;
    mxp_guard_status st;
    mxp_guard_get_status(mxp_world_model_guard(d->wm), &st);
    if (d->n_prog < MAX_STEPS) d->head[d->n_prog] = st.value[MXP_RULE_HEADROOM];
    d->n_prog++;
    if (d->raise_at > 0 && p->step == d->raise_at) raise(SIGUSR1);
}

static void drill_run(const mxp_config *cfg, drill *d, int64_t raise_at) {
    mxp_error err = {0};
    memset(d, 0, sizeof *d);
    d->raise_at = raise_at;
    CHECK_OK(mxp_world_model_create(cfg, &d->wm, &err), &err);
    if (!d->wm) return;
    mxp_world_model_set_progress(d->wm, drill_progress, d);
    CHECK_OK(mxp_world_model_train(d->wm, cfg->epochs, cfg->batch_size, &err), &err);
    d->stopped = mxp_world_model_stopped(d->wm);
    mxp_guard *g = mxp_world_model_guard(d->wm);
    CHECK(g != NULL);
    if (g) {
        mxp_guard_get_status(g, &d->st);
        const mxp_guard_event *ev = mxp_guard_events(g, &d->n_ev);
        for (size_t i = 0; i < d->n_ev && i < MAX_EV; i++) d->ev[i] = ev[i];
    }
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(d->wm), &d->hist_n);
    for (size_t i = 0; i < d->hist_n && i < MAX_STEPS; i++) d->hist[i] = h[i];
    mxp_world_model_destroy(d->wm);
    d->wm = NULL;
}

/* Values that count steps or events (exactly the CPU's on the device). */
static bool exact_value(mxp_guard_rule r) {
    return r == MXP_RULE_NONFINITE_LOSS || r == MXP_RULE_OVERFLOW_RATE_HIGH ||
           r == MXP_RULE_OVERFLOW_RATE || r == MXP_RULE_LOSS_SCALE_LOW;
}

static const char *op_of(const mxp_nonfinite_site *s) { return s->op ? s->op : ""; }

/* Remove the underflow rule's events from d; how many there were. */
static size_t drop_underflow(drill *d) {
    size_t k = 0, n = d->n_ev < MAX_EV ? d->n_ev : MAX_EV;
    for (size_t i = 0; i < n; i++)
        if (!(d->ev[i].kind == MXP_EVENT_RULE && d->ev[i].rule == MXP_RULE_UNDERFLOW))
            d->ev[k++] = d->ev[i];
    const size_t dropped = n - k;
    d->n_ev = k;
    return dropped;
}

/* The drill on the CPU and on the device; the same events, history and
 * guard state. Returns the CPU's drill (static) for drill-specific checks. */
static const drill *compare_drill(const char *name, const char *const *ov, int64_t raise_at) {
    static drill c, d;
    mxp_config cc = config("cpu", kSmall, ov), cd = config("cuda", kSmall, ov);
    drill_run(&cc, &c, raise_at);
    const int64_t steps0 = g_emu.calls;
    drill_run(&cd, &d, raise_at);
    CHECK_MSG(g_emu.calls > steps0, "%s: the device table was not used", name);
    /* the underflow rule needs the full scans' tiny counts, which the
     * device does not take: the CPU's underflow events are left out (and
     * the device must have none) */
    size_t under = drop_underflow(&c), dunder = drop_underflow(&d);
    CHECK_MSG(dunder == 0, "%s: %zu underflow events on the device", name, dunder);
    CHECK_MSG(c.n_ev == d.n_ev && c.n_ev <= MAX_EV, "%s: %zu events on the device, %zu on the CPU",
              name, d.n_ev, c.n_ev);
    for (size_t i = 0; i < c.n_ev && i < d.n_ev && i < MAX_EV; i++) {
        const mxp_guard_event *a = &c.ev[i], *b = &d.ev[i];
        const bool vok = a->kind != MXP_EVENT_RULE ? true
                         : exact_value(a->rule)    ? a->value == b->value
                                                   : rel(b->value, a->value) <= 0.05;
        CHECK_MSG(a->kind == b->kind && a->rule == b->rule && a->severity == b->severity &&
                      a->step == b->step && a->taken == b->taken && a->from == b->from &&
                      a->to == b->to && a->rollback_to == b->rollback_to &&
                      a->site.found == b->site.found && a->site.backward == b->site.backward &&
                      a->site.layer == b->site.layer &&
                      strcmp(op_of(&a->site), op_of(&b->site)) == 0 && vok,
                  "%s event %zu:\n  cpu    %s\n  device %s", name, i, a->detail, b->detail);
    }
    CHECK_MSG(c.hist_n == d.hist_n && c.hist_n <= MAX_STEPS, "%s: history %zu on the device, %zu "
              "on the CPU", name, d.hist_n, c.hist_n);
    int64_t diff = 0;
    for (size_t i = 0; i < c.hist_n && i < d.hist_n && i < MAX_STEPS; i++) {
        const mxp_history_row *a = &c.hist[i], *b = &d.hist[i];
        const bool ok = a->precision == b->precision && a->skipped == b->skipped &&
                        a->scale == b->scale && a->step == b->step;
        if (!ok && diff++ < 3)
            CHECK_MSG(ok, "%s history row %zu: step %lld/%lld %s/%s skip %d/%d scale %g/%g",
                      name, i, (long long)a->step, (long long)b->step,
                      mxp_precision_name(a->precision), mxp_precision_name(b->precision),
                      a->skipped, b->skipped, (double)a->scale, (double)b->scale);
    }
    double hworst = 0;
    int64_t hn = 0;
    for (int64_t i = 0; i < c.n_prog && i < d.n_prog && i < MAX_STEPS; i++) {
        const double a = c.head[i], b = d.head[i];
        if (isnan(a) && isnan(b)) continue;
        const double r = a == b ? 0.0 : rel(b, a);
        hn++;
        if (r > hworst || isnan(r)) hworst = isnan(r) ? INFINITY : r;
    }
    CHECK_MSG(c.n_prog == d.n_prog && hn > 0 && hworst <= 2e-3,
              "%s: the guard's headroom value: worst rel diff %.3g over %lld steps", name,
              hworst, (long long)hn);
    const mxp_guard_status *a = &c.st, *b = &d.st;
    CHECK_MSG(a->fallbacks == b->fallbacks && a->rollbacks == b->rollbacks &&
                  a->operator_switches == b->operator_switches && a->current == b->current &&
                  a->stopped == b->stopped && c.stopped == d.stopped &&
                  a->events == b->events + (int64_t)under,
              "%s: status fallbacks %lld/%lld rollbacks %lld/%lld switches %lld/%lld mode %s/%s "
              "stopped %d/%d", name, (long long)a->fallbacks, (long long)b->fallbacks,
              (long long)a->rollbacks, (long long)b->rollbacks, (long long)a->operator_switches,
              (long long)b->operator_switches, mxp_precision_name(a->current),
              mxp_precision_name(b->current), a->stopped, b->stopped);
    const bool cn = isnan(a->canary_divergence), dn = isnan(b->canary_divergence);
    CHECK_MSG(cn == dn && (cn || fabs(a->canary_divergence - b->canary_divergence) <= 1e-3),
              "%s: canary divergence cpu %g device %g", name, a->canary_divergence,
              b->canary_divergence);
    printf("  %-22s %2zu events (+%zu underflow on the CPU), %4zu steps, headroom worst rel "
           "%.1e over %lld steps, canary %.4g/%.4g\n", name, c.n_ev, under, c.hist_n, hworst,
           (long long)hn, a->canary_divergence, b->canary_divergence);
    return &c;
}

static const mxp_guard_event *find_event(const drill *r, mxp_guard_rule rule) {
    for (size_t i = 0; i < r->n_ev && i < MAX_EV; i++)
        if (r->ev[i].kind == MXP_EVENT_RULE && r->ev[i].rule == rule) return &r->ev[i];
    return NULL;
}

static void test_drills(void) {
    /* forward NaN, layer 2, steps 31..40: fallback + rollback to step 20 */
    const char *nan_ov[] = {"training.precision=mixed_fp16", "fault.kind=nan", "fault.layer=2",
                            "fault.step=31", "fault.count=10",
                            "guard.rollback.snapshot_every=20", "training.epochs=1", NULL};
    const drill *r = compare_drill("forward NaN rollback", nan_ov, 0);
    const mxp_guard_event *e = find_event(r, MXP_RULE_NONFINITE_LOSS);
    CHECK(e && e->step == 40 && e->rollback_to == 20 && (e->taken & MXP_ACT_FALLBACK) &&
          e->site.found && !e->site.backward && e->site.layer == 2);
    /* backward Inf in layer 2's weight gradient, steps 1..110 */
    const char *inf_ov[] = {"training.precision=mixed_fp16", "fault.kind=inf",
                            "fault.pass=backward", "fault.layer=2", "fault.step=1",
                            "fault.count=110", "training.epochs=2", NULL};
    r = compare_drill("backward Inf rate", inf_ov, 0);
    e = find_event(r, MXP_RULE_OVERFLOW_RATE_HIGH);
    CHECK(e && e->step == 100 && e->site.found && e->site.backward && e->site.layer == 2);
    CHECK(find_event(r, MXP_RULE_OVERFLOW_RATE) != NULL);
    /* sustained FP16 overflow of layer 0 (weights x 1e6, a layernorm after) */
    const char *ovf_ov[] = {"model.layernorm=true", "fault.kind=scale_weights", "fault.step=0",
                            "fault.layer=0", "fault.value=1e6",
                            "training.precision=mixed_fp16", "training.epochs=1", NULL};
    r = compare_drill("sustained overflow", ovf_ov, 0);
    e = find_event(r, MXP_RULE_NONFINITE_LOSS);
    CHECK(e && e->to == MXP_PRECISION_MIXED_BF16 && e->site.found && e->site.layer == 0);
    /* the stop action: the guard's kill switch */
    const char *stop_ov[] = {"training.precision=mixed_fp16", "fault.kind=nan", "fault.step=5",
                             "fault.count=0", "guard.nonfinite_loss.action=stop",
                             "training.epochs=1", NULL};
    r = compare_drill("stop (kill switch)", stop_ov, 0);
    CHECK(r->stopped && r->hist_n == 14);
    /* SIGUSR1 after step 20: FP32 from step 21 */
    mxp_error err = {0};
    CHECK_OK(mxp_guard_install_signal(SIGUSR1, &err), &err);
    const char *sig_ov[] = {"training.precision=mixed_bf16", "training.epochs=1", NULL};
    r = compare_drill("SIGUSR1 to fp32", sig_ov, 20);
    CHECK(r->st.operator_switches == 1 && r->hist_n > 21 &&
          r->hist[20].precision == MXP_PRECISION_FP32);
    /* the FP32 canary every 7 steps */
    const char *can_ov[] = {"training.precision=mixed_bf16", "guard.canary.every_steps=7",
                            "training.epochs=1", NULL};
    r = compare_drill("canary", can_ov, 0);
    CHECK(isfinite(r->st.canary_divergence));
}

int main(void) {
    trainer_device_override(&emu_ds_ops, &g_emu);
    if (!test_quick()) { /* QUICK (the generic, mock and ASan passes): one mode */
        test_monitor("fp32");
        test_monitor("mixed_bf16");
    }
    test_monitor("mixed_fp16");
    test_drills();
    trainer_device_override(NULL, NULL);
    CHECK_MSG(g_emu.live == 0, "%lld emulated buffers leaked", (long long)g_emu.live);
    return test_finish("test_guard_device_emu");
}
