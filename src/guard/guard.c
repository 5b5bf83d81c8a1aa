/* guard/guard.c: the numerical-safety guard of a training run.
 *
 * Entry points: mxp_guard_create/_destroy, mxp_guard_before_step,
 * mxp_guard_after_step, mxp_guard_canary, mxp_guard_get_status,
 * mxp_guard_events, mxp_guard_stopped, mxp_guard_monitor,
 * mxp_guard_set_event_callback, mxp_guard_set_rollback_store.
 *
 * Per step, around the trainer's step (docs/design.md "A training step": the
 * guard runs after the scaler update and the history row):
 *   before: without a run, the step boundary (the trainer's step
 *           controller, train/step_ctl.h, applies what is pending); an
 *           operator signal's FP32 switch is reported; the first healthy
 *           state is saved; faults are armed for this step; every
 *           guard.headroom.every_steps the monitor does a full scan.
 *   after:  the step's result feeds the sliding windows (skipped steps,
 *           gradient health from the fused unscale pass, loss scale), the
 *           monitor's per-layer headroom and underflow, and every K steps
 *           the FP32 canary; then every rule is evaluated. A rule fires on
 *           the step its value crosses its threshold and stays latched
 *           until it un-crosses, so one episode is one event. The fired
 *           rules' actions are combined and done once: stop, rollback
 *           (restore the newest healthy state; a second rollback to the
 *           same state also falls back, and guard.rollback.max bounds
 *           them), fallback (next precision of the chain this CPU
 *           supports, requested from the step controller, which switches
 *           at the step boundary: master weights and optimizer state
 *           kept, the scaler restarted at its initial scale when the new
 *           mode scales). Any recovery action clears the windows. Finally
 *           a healthy step (not skipped, finite loss, no rule fired, no P0/P1 rule
 *           latched) may become the new rollback point every
 *           guard.rollback.snapshot_every steps, and only when its weights
 *           and optimizer moments are finite (mxp_trainer_check_state): a
 *           rollback never restores a non-finite state. Last, the
 *           opt-in retry of a faster precision (a request too) and,
 *           without a run, the step boundary.
 * The action never loses the run: when nothing is left to do (fp32 with no
 * fallback, rollback budget spent) the event says so and training goes on.
 */
#include "guard/guard_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- lifecycle ----------------------------------------------------------- */

static int64_t ring_cap(const mxp_guard_config *c, int r) {
    const mxp_rule_agg agg = mxp_guard_rule_get((mxp_guard_rule)r)->agg;
    if (agg == MXP_AGG_STREAK) return 1;
    return c->rules[r].window + (agg == MXP_AGG_GROWTH ? guard_growth_span(c->rules[r].window) : 0);
}

void mxp_guard_destroy(mxp_guard *g) {
    if (!g) return;
    if (g->t) {
        step_ctl_listen_signals(g->t, false);
        step_ctl_release(g->t, STEP_OWNER_GUARD);
    }
    if (g->model) {
        mxp_model_set_monitor(g->model, NULL);
        mxp_model_set_fault(g->model, NULL);
    }
    mxp_monitor_destroy(g->mon);
    for (int r = 0; r < MXP_RULE_COUNT; r++) guard_ring_free(&g->ring[r]);
    guard_canary_free(&g->canary);
    guard_snapshot_free(&g->snap);
    mxp_free(g->events);
    mxp_free(g->events_linear);
    mxp_free(g);
}

static void clear_windows(mxp_guard *g) {
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        guard_ring_clear(&g->ring[r]);
        g->latched[r] = false;
    }
    g->nonfinite_streak = 0;
}

mxp_status mxp_guard_create(const mxp_guard_config *c, mxp_trainer *t, const mxp_batch *probe,
                            mxp_guard **out, mxp_error *err) {
    if (!c || !t || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_create: NULL argument");
    *out = NULL;
    mxp_status s = mxp_guard_config_validate(c, err);
    if (s != MXP_OK) return s;
    mxp_guard *g = mxp_calloc(1, sizeof *g);
    if (!g) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "guard");
    g->cfg = *c;
    g->t = t;
    g->model = mxp_trainer_model(t);
    g->cpu = mxp_cpu_features_get();
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        g->value[r] = NAN;
        if ((s = guard_ring_init(&g->ring[r], ring_cap(c, r), err)) != MXP_OK) goto fail;
        if (mxp_guard_rule_get((mxp_guard_rule)r)->agg == MXP_AGG_GROWTH)
            g->ring[r].span = guard_growth_span(c->rules[r].window);
    }
    const mxp_model_spec *sp = mxp_model_get_spec(g->model);
    if (c->fault.kind != MXP_FAULT_NONE && c->fault.layer >= sp->n_layers) {
        s = mxp_error_set(err, MXP_ERR_CONFIG, "fault.layer=%lld; accepted: 0..%d (the model's "
                          "layers)", (long long)c->fault.layer, sp->n_layers - 1);
        goto fail;
    }
    if ((s = mxp_monitor_create(g->model, false, &g->mon, err)) != MXP_OK) goto fail;
    mxp_monitor_set_anomaly(g->mon, c->anomaly_mode, c->rules[MXP_RULE_HEADROOM].threshold);
    if (probe && c->canary_every > 0) {
        if ((s = guard_canary_init(&g->canary, g->model, probe, c->canary_loss_floor, err)) != MXP_OK) goto fail;
        g->have_canary = true;
    }
    g->events = mxp_calloc(GUARD_EVENTS_KEPT, sizeof *g->events);
    g->events_linear = mxp_calloc(GUARD_EVENTS_KEPT, sizeof *g->events_linear);
    if (!g->events || !g->events_linear) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "guard event log");
        goto fail;
    }
    mxp_guard_set_rollback_store(g, NULL);
    g->initial = g->last_mode = mxp_model_policy(g->model)->mode;
    g->retry_wait = c->retry_after;
    g->canary_div = g->canary_lw = g->canary_l32 = NAN;
    g->last_save_attempt = -1;
    g->last_retry_attempt = -1;
    g->first_site.op = g->streak_site.op = "";
    mxp_monitor_anomaly(NULL, &g->anomaly);
    if (c->fault.kind == MXP_FAULT_SCALE_WEIGHTS && c->fault.step == 0) {
        s = mxp_model_scale_layer_weights(g->model, (int)c->fault.layer, (float)c->fault.value,
                                          err);
        if (s != MXP_OK) goto fail;
        g->weights_scaled = true;
        mxp_log(MXP_LOG_WARN, "fault injection: layer %lld weights multiplied by %g at create",
                (long long)c->fault.layer, c->fault.value);
    }
    mxp_model_set_monitor(g->model, g->mon);
    g->seen_signals = step_ctl_signal_decisions(t, NULL);
    step_ctl_listen_signals(t, true);
    step_ctl_claim(t, STEP_OWNER_GUARD); /* a run claims it over the guard */
    *out = g;
    return MXP_OK;
fail:
    mxp_guard_destroy(g);
    return s;
}

void mxp_guard_set_event_callback(mxp_guard *g, mxp_guard_event_fn fn, void *user) {
    g->cb = fn;
    g->cb_user = user;
}

void mxp_guard_set_rollback_store(mxp_guard *g, const mxp_rollback_store *store) {
    if (store) {
        g->store = *store;
        g->store_custom = true;
    } else {
        g->store = (mxp_rollback_store){guard_snapshot_save, guard_snapshot_restore, &g->snap};
        g->store_custom = false;
    }
    g->have_healthy = false;
}

/* ---- events --------------------------------------------------------------- */

/* The mode the next step runs in: the step controller's pending request
 * when this guard or the scaler made it, else the current one. */
static mxp_precision guard_mode(mxp_guard *g) { return step_ctl_next_mode(g->t); }

/* Reach the step boundary when the guard is the outermost step driver
 * (no run around it): the step controller applies what is pending. */
static mxp_status guard_boundary(mxp_guard *g, mxp_error *err) {
    if (step_ctl_owner(g->t) != STEP_OWNER_GUARD) return MXP_OK;
    return step_ctl_boundary(g->t, NULL, err);
}

static void emit(mxp_guard *g, mxp_guard_event *ev) {
    g->events[g->n_events % GUARD_EVENTS_KEPT] = *ev;
    g->n_events++;
    const bool loud = ev->severity != MXP_SEV_P2 && ev->kind != MXP_EVENT_OPERATOR;
    mxp_log(loud ? MXP_LOG_ERROR : MXP_LOG_WARN, "guard [%s] %s", mxp_severity_name(ev->severity),
            ev->detail);
    if (g->cb) g->cb(g->cb_user, ev);
}

static void event_init(mxp_guard *g, mxp_guard_event *ev, mxp_guard_event_kind kind,
                       mxp_severity sev) {
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->rule = MXP_RULE_COUNT;
    ev->severity = sev;
    ev->step = g->attempts;
    ev->value = ev->threshold = NAN;
    ev->rollback_to = -1;
    ev->site.op = "";
    ev->from = ev->to = guard_mode(g);
}

/* ---- precision switches ---------------------------------------------------- */

/* Ask the step controller for `to` at the step boundary (it switches and
 * restarts the scaler there, train/step_ctl.h). */
static mxp_status switch_precision(mxp_guard *g, mxp_precision to, const char *why,
                                   mxp_error *err) {
    mxp_status s = step_ctl_request(g->t, to, STEP_SRC_GUARD, why, err);
    if (s == MXP_OK) g->last_mode = to;
    return s;
}

static void site_text(const mxp_nonfinite_site *s, int64_t step, char *buf, size_t n) {
    if (!s->found) {
        snprintf(buf, n, "no non-finite layer output recorded");
        return;
    }
    if (s->layer >= 0)
        snprintf(buf, n, "first non-finite at step %lld: %s pass, layer %d (%s), %lld values",
                 (long long)step, s->backward ? "backward" : "forward", s->layer, s->op,
                 (long long)s->count);
    else
        snprintf(buf, n, "first non-finite at step %lld: %s pass, %s, %lld values",
                 (long long)step, s->backward ? "backward" : "forward", s->op,
                 (long long)s->count);
}

/* ---- rollback points ------------------------------------------------------- */

/* Whether the trainer's state may become a rollback point: finite weights
 * and moments, AdamW v >= 0 (mxp_trainer_check_state). A state that is not
 * (weights scaled to Inf at start, a corrupted resume) is never saved, so a
 * rollback can only go back to something that trains; the first refusal is
 * logged. */
static bool usable(mxp_guard *g) {
    mxp_error e = {0};
    if (mxp_trainer_check_state(g->t, &e) == MXP_OK) return true;
    if (!g->unusable_logged)
        mxp_log(MXP_LOG_WARN, "guard: the state after step %lld is not a rollback point: %s",
                (long long)g->attempts, e.msg);
    g->unusable_logged = true;
    return false;
}

/* ---- before the step ------------------------------------------------------- */

mxp_status mxp_guard_before_step(mxp_guard *g, const mxp_data_position *pos,
                                 mxp_guard_decision *d, mxp_error *err) {
    if (!g || !pos || !d)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_before_step: NULL argument");
    memset(d, 0, sizeof *d);
    mxp_status s;
    if (!g->started) { /* a switch before the first step (precision: auto) is configuration */
        g->initial = g->last_mode = mxp_model_policy(g->model)->mode;
        g->started = true;
    }
    if (!g->have_healthy && usable(g)) {
        if ((s = g->store.save(g->store.user, g->t, pos, g->attempts, err)) != MXP_OK) return s;
        g->have_healthy = true;
        g->last_save_attempt = g->attempts;
        g->rollbacks_since_save = 0;
    }
    /* the boundary before this step (when no run reaches it): a signal's
     * fp32 request, a retry or fallback asked for after the last step */
    if ((s = guard_boundary(g, err)) != MXP_OK) return s;
    const mxp_precision cur = mxp_model_policy(g->model)->mode;
    step_decision sig;
    const int64_t nsig = step_ctl_signal_decisions(g->t, &sig);
    if (nsig != g->seen_signals) { /* SIGUSR1 / mxp_guard_request_fp32, applied at the boundary */
        g->seen_signals = nsig;
        g->operator_fp32 = true;
        g->operator_switches++;
        mxp_guard_event ev;
        event_init(g, &ev, MXP_EVENT_OPERATOR, MXP_SEV_P1);
        ev.from = sig.from;
        ev.to = sig.to;
        if (sig.switched) {
            ev.taken = MXP_ACT_ALERT | MXP_ACT_FALLBACK;
            d->precision_changed = true;
            clear_windows(g);
        } else {
            ev.taken = MXP_ACT_ALERT;
        }
        snprintf(ev.detail, sizeof ev.detail,
                 "operator request (SIGUSR1/API): %s -> fp32 at the step boundary before "
                 "step %lld", mxp_precision_name(sig.from), (long long)g->attempts + 1);
        emit(g, &ev);
        g->last_mode = cur;
    }
    if (cur != g->last_mode) {
        /* switched between steps by someone else (the control API): an
         * operator decision, so no automatic retry undoes it */
        mxp_guard_event ev;
        event_init(g, &ev, MXP_EVENT_OPERATOR, MXP_SEV_P1);
        ev.from = g->last_mode;
        ev.to = cur;
        ev.taken = MXP_ACT_ALERT;
        snprintf(ev.detail, sizeof ev.detail,
                 "precision switched outside the guard (control API): %s -> %s before step %lld",
                 mxp_precision_name(g->last_mode), mxp_precision_name(cur),
                 (long long)g->attempts + 1);
        emit(g, &ev);
        g->last_mode = cur;
        g->operator_fp32 = true;
        g->operator_switches++;
        clear_windows(g);
    }

    const int64_t next = g->attempts + 1;
    const mxp_fault_config *f = &g->cfg.fault;
    bool armed = (f->kind == MXP_FAULT_NAN || f->kind == MXP_FAULT_INF ||
                  f->kind == MXP_FAULT_VALUE) &&
                 next >= f->step && (f->count == 0 || next < f->step + f->count);
    mxp_model_set_fault(g->model, armed ? f : NULL);
    if (f->kind == MXP_FAULT_SCALE_WEIGHTS && !g->weights_scaled && next >= f->step) {
        s = mxp_model_scale_layer_weights(g->model, (int)f->layer, (float)f->value, err);
        if (s != MXP_OK) return s;
        g->weights_scaled = true;
        mxp_log(MXP_LOG_WARN, "fault injection: layer %lld weights multiplied by %g at step %lld",
                (long long)f->layer, f->value, (long long)next);
    }
    mxp_monitor_set_full(g->mon, next % g->cfg.headroom_every == 0);
    return MXP_OK;
}

void mxp_guard_set_attempts(mxp_guard *g, int64_t attempts) {
    if (!g || attempts < 0) return;
    g->attempts = attempts;
    const mxp_fault_config *f = &g->cfg.fault;
    if (f->kind == MXP_FAULT_SCALE_WEIGHTS && attempts >= f->step) g->weights_scaled = true;
}

/* ---- after the step: samples ------------------------------------------------ */

/* Headroom (every step: the absmax is free) and, on full-scan steps, the
 * underflow fraction, from the monitor; then reset it for the next step. */
static void sample_monitor(mxp_guard *g, bool full) {
    const int L = mxp_monitor_num_layers(g->mon);
    double head = INFINITY, under = 0.0;
    bool any_under = false;
    for (int l = 0; l <= L; l++) { /* l == L: the loss gradient */
        const mxp_layer_stats *ls = mxp_monitor_layer(g->mon, l);
        const mxp_tensor_stats *o = &ls->t[MXP_MON_OUT];
        if (o->n > 0 && o->absmax > 0.0f) {
            double h = mxp_dtype_info(ls->out_type)->max / (double)o->absmax;
            if (h < head) head = h;
        }
        const mxp_monitor_tensor which[2] = {MXP_MON_OUT, MXP_MON_DX};
        const mxp_dtype types[2] = {ls->out_type, ls->grad_type};
        for (int k = 0; k < 2; k++) {
            const mxp_tensor_stats *ts = &ls->t[which[k]];
            if (ts->tiny_n == 0) continue;
            /* A value below the smallest normal matters only when it is
             * above the rounding step of the tensor's largest values
             * (absmax * 2^-(man_bits+1)); else storing it as a subnormal
             * or zero changes the tensor less than its own rounding does
             * (GELU's tails next to outputs of order 1). So a tensor counts
             * only while its absmax is under min_normal * 2^(man_bits+1):
             * 0.125 for FP16, the whole tensor squeezed near the floor. */
            const mxp_dtype_traits *ti = mxp_dtype_info(types[k]);
            if ((double)ts->absmax >= ti->min_normal * ldexp(1.0, ti->man_bits + 1)) {
                any_under = true;
                continue;
            }
            double fr = (double)ts->tiny / (double)ts->tiny_n;
            any_under = true;
            if (fr > under) under = fr;
        }
    }
    if (isfinite(head)) guard_ring_push(&g->ring[MXP_RULE_HEADROOM], head);
    if (full && any_under) guard_ring_push(&g->ring[MXP_RULE_UNDERFLOW], under);
    mxp_monitor_reset(g->mon);
}

static void push_samples(mxp_guard *g, const mxp_step_result *res) {
    const double skipped = res->skipped ? 1.0 : 0.0;
    guard_ring_push(&g->ring[MXP_RULE_OVERFLOW_RATE_HIGH], skipped);
    guard_ring_push(&g->ring[MXP_RULE_OVERFLOW_RATE], skipped);
    if (!res->skipped) {
        guard_ring_push(&g->ring[MXP_RULE_ZERO_GRAD], res->zero_frac);
        guard_ring_push(&g->ring[MXP_RULE_GRAD_NEAR_OVERFLOW], res->near_overflow_frac);
        if (isfinite(res->grad_norm))
            guard_ring_push(&g->ring[MXP_RULE_GRAD_NORM_GROWTH], res->grad_norm);
    }
    mxp_scaler *sc = mxp_trainer_scaler(g->t);
    if (mxp_scaler_get_config(sc)->enabled)
        guard_ring_push(&g->ring[MXP_RULE_LOSS_SCALE_LOW], (double)mxp_trainer_loss_scale(g->t));
}

static void note_provenance(mxp_guard *g, const mxp_step_result *res) {
    const int64_t A = g->attempts;
    if (res->site.found && !g->first_site.found) {
        g->first_site = res->site;
        g->first_site_step = A;
    }
    mxp_anomaly_report rep;
    mxp_monitor_anomaly(g->mon, &rep);
    if (rep.found) {
        g->anomaly = rep;
        g->anomaly_step = A;
    }
    if (!isfinite(res->loss)) {
        if (g->nonfinite_streak == 0) {
            g->streak_site = res->site;
            g->streak_site_step = A;
        }
        g->nonfinite_streak++;
    } else {
        g->nonfinite_streak = 0;
    }
}

/* ---- after the step: rules and actions --------------------------------------- */

/* Rule values and first crossings; returns the union of the fired rules'
 * actions. */
static unsigned evaluate(mxp_guard *g, bool fired[MXP_RULE_COUNT]) {
    unsigned want = 0;
    bool crossed[MXP_RULE_COUNT] = {0};
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        fired[r] = false;
        const mxp_guard_rule_config *rc = &g->cfg.rules[r];
        const mxp_guard_rule_info *ri = mxp_guard_rule_get((mxp_guard_rule)r);
        double v = ri->agg == MXP_AGG_STREAK ? (double)g->nonfinite_streak
                                             : guard_ring_value(&g->ring[r], ri->agg);
        g->value[r] = v;
        if (rc->action == 0) continue;
        crossed[r] = mxp_guard_rule_crossed((mxp_guard_rule)r, v, rc->threshold);
        if (!crossed[r]) {
            g->latched[r] = false;
            continue;
        }
        if (g->latched[r]) continue;
        /* the band rules stand down while their high rule holds */
        if ((r == MXP_RULE_OVERFLOW_RATE && crossed[MXP_RULE_OVERFLOW_RATE_HIGH]) ||
            (r == MXP_RULE_CANARY_DIVERGENCE && crossed[MXP_RULE_CANARY_DIVERGENCE_HIGH]))
            continue;
        g->latched[r] = true;
        fired[r] = true;
        g->fired[r]++;
        want |= rc->action | MXP_ACT_ALERT;
    }
    return want;
}

typedef struct action_result {
    unsigned taken;
    mxp_precision from, to;
    int64_t rollback_to;
    char note[160];
} action_result;

static mxp_status act(mxp_guard *g, unsigned want, mxp_guard_decision *d, action_result *ar,
                      mxp_error *err) {
    memset(ar, 0, sizeof *ar);
    ar->from = ar->to = guard_mode(g);
    ar->rollback_to = -1;
    ar->taken = want ? MXP_ACT_ALERT : 0;
    size_t np = 0;
#define NOTE(...)                                                                    \
    do {                                                                             \
        int w_ = snprintf(ar->note + np, sizeof ar->note - np, __VA_ARGS__);         \
        if (w_ > 0) np = np + (size_t)w_ < sizeof ar->note ? np + (size_t)w_         \
                                                            : sizeof ar->note - 1;   \
    } while (0)
    mxp_status s;
    if (want & MXP_ACT_STOP) {
        g->stopped = true;
        d->stop = true;
        char why[96];
        snprintf(why, sizeof why, "a guard rule with action stop fired at step %lld",
                 (long long)g->attempts);
        step_ctl_stop(g->t, why);
        ar->taken |= MXP_ACT_STOP;
        NOTE("; run stopped");
    }
    if (want & MXP_ACT_ROLLBACK) {
        if (g->rollbacks >= g->cfg.max_rollbacks) {
            NOTE("; rollback budget spent (guard.rollback.max=%lld)",
                 (long long)g->cfg.max_rollbacks);
        } else if (!g->have_healthy) {
            NOTE("; no healthy state to roll back to");
        } else {
            if (g->rollbacks_since_save > 0 && !(want & MXP_ACT_FALLBACK)) {
                want |= MXP_ACT_FALLBACK;
                NOTE("; second rollback to the same state: falling back too");
            }
            mxp_data_position pos;
            int64_t at = -1;
            mxp_error e2 = {0};
            s = guard_restore(g, &pos, &at, &e2);
            if (s == MXP_OK) {
                g->rollbacks++;
                g->rollbacks_since_save++;
                /* the restored state needs snapshot_every healthy steps of
                 * its own before it becomes a new rollback point; else the
                 * first replayed step is saved at once and a cause that
                 * persists (a canary divergence that is the format's own)
                 * rolls back to ever newer states and never falls back */
                g->last_save_attempt = g->attempts;
                ar->taken |= MXP_ACT_ROLLBACK;
                ar->rollback_to = at;
                d->rewind = true;
                d->pos = pos;
                /* epochs 1-based, as the CLI's log, bar and history.csv */
                NOTE("; rolled back to the state after step %lld (epoch %lld, step %lld)",
                     (long long)at, (long long)pos.epoch + 1, (long long)pos.step_in_epoch);
            } else {
                NOTE("; rollback failed: %.80s", e2.msg);
            }
        }
    }
    if (want & MXP_ACT_FALLBACK) {
        const mxp_precision cur = guard_mode(g);
        const mxp_precision to = mxp_precision_fallback(cur, g->cpu, g->cfg.allow_emulated);
        if (to == cur) {
            NOTE("; no precision left to fall back to from %s", mxp_precision_name(cur));
        } else {
            if ((s = switch_precision(g, to, "guard fallback", err)) != MXP_OK) return s;
            if (g->chain_n < GUARD_CHAIN_MAX) g->chain[g->chain_n++] = cur;
            if (g->last_retry_attempt >= 0 &&
                g->attempts - g->last_retry_attempt <= g->retry_wait)
                g->retry_wait *= 2; /* the retry failed soon: wait longer next time */
            g->fallbacks++;
            ar->taken |= MXP_ACT_FALLBACK;
            ar->to = to;
            d->precision_changed = true;
            NOTE("; fell back %s -> %s", mxp_precision_name(cur), mxp_precision_name(to));
        }
    }
#undef NOTE
    if (ar->taken & (MXP_ACT_ROLLBACK | MXP_ACT_FALLBACK)) {
        clear_windows(g);
        g->healthy_streak = 0;
    }
    return MXP_OK;
}

static void emit_rule_event(mxp_guard *g, int r, const mxp_step_result *res,
                            const action_result *ar) {
    const mxp_guard_rule_info *ri = mxp_guard_rule_get((mxp_guard_rule)r);
    const mxp_guard_rule_config *rc = &g->cfg.rules[r];
    mxp_guard_event ev;
    event_init(g, &ev, MXP_EVENT_RULE, ri->severity);
    ev.rule = (mxp_guard_rule)r;
    ev.value = g->value[r];
    ev.threshold = rc->threshold;
    ev.window = rc->window;
    ev.action = rc->action;
    ev.taken = ar->taken;
    ev.from = ar->from;
    ev.to = ar->to;
    ev.rollback_to = ar->rollback_to;
    char where[200] = "";
    if (r == MXP_RULE_NONFINITE_LOSS) {
        ev.site = g->streak_site;
        site_text(&g->streak_site, g->streak_site_step, where, sizeof where);
    } else if ((r == MXP_RULE_OVERFLOW_RATE_HIGH || r == MXP_RULE_OVERFLOW_RATE) &&
               res->site.found) {
        ev.site = res->site;
        site_text(&res->site, g->attempts, where, sizeof where);
    }
    static const char *const cmp_text[] = {">", ">=", "<"};
    char acts[48];
    mxp_guard_action_text(rc->action, acts, sizeof acts);
    snprintf(ev.detail, sizeof ev.detail, "%s at step %lld: %.4g %s %.4g (window %lld)%s%s; "
             "action %s%s", ri->name, (long long)g->attempts, ev.value, cmp_text[ri->cmp],
             rc->threshold, (long long)rc->window, where[0] ? "; " : "", where, acts, ar->note);
    emit(g, &ev);
}

mxp_status mxp_guard_after_step(mxp_guard *g, const mxp_step_result *res,
                                const mxp_data_position *next, mxp_guard_decision *d,
                                mxp_error *err) {
    if (!g || !res || !next || !d)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_after_step: NULL argument");
    memset(d, 0, sizeof *d);
    g->attempts++;
    const int64_t A = g->attempts;
    mxp_status s;

    /* the scaler's at-min policy asked for a fallback inside the step */
    step_source psrc;
    mxp_precision mode = mxp_model_policy(g->model)->mode, pto;
    if (step_ctl_pending(g->t, &psrc, &pto) && psrc == STEP_SRC_SCALER) mode = pto;
    if (mode != g->last_mode) {
        mxp_guard_event ev;
        event_init(g, &ev, MXP_EVENT_SCALER, MXP_SEV_P1);
        ev.from = g->last_mode;
        ev.to = mode;
        ev.taken = MXP_ACT_ALERT | MXP_ACT_FALLBACK;
        snprintf(ev.detail, sizeof ev.detail,
                 "loss scale stuck at its minimum: the scaler fell back %s -> %s at step %lld",
                 mxp_precision_name(g->last_mode), mxp_precision_name(mode), (long long)A);
        emit(g, &ev);
        g->last_mode = mode;
        clear_windows(g);
        d->precision_changed = true;
    }

    note_provenance(g, res);
    push_samples(g, res);
    sample_monitor(g, A % g->cfg.headroom_every == 0);
    if (g->have_canary && A % g->cfg.canary_every == 0 && mode != MXP_PRECISION_FP32) {
        if ((s = mxp_guard_canary(g, NULL, NULL, NULL, err)) != MXP_OK) return s;
        guard_ring_push(&g->ring[MXP_RULE_CANARY_DIVERGENCE_HIGH], g->canary_div);
        guard_ring_push(&g->ring[MXP_RULE_CANARY_DIVERGENCE], g->canary_div);
    }

    bool fired[MXP_RULE_COUNT];
    unsigned want = evaluate(g, fired);
    action_result ar;
    if ((s = act(g, want, d, &ar, err)) != MXP_OK) return s;
    if (ar.taken & MXP_ACT_FALLBACK) d->precision_changed = true;
    bool any = false;
    for (int r = 0; r < MXP_RULE_COUNT; r++)
        if (fired[r]) {
            emit_rule_event(g, r, res, &ar);
            any = true;
        }

    bool serious = false;
    for (int r = 0; r < MXP_RULE_COUNT; r++)
        if (g->latched[r] && mxp_guard_rule_get((mxp_guard_rule)r)->severity <= MXP_SEV_P1)
            serious = true;
    const bool healthy = !res->skipped && isfinite(res->loss) && !any && !d->rewind && !serious;
    guard_tell_health(g, !serious && g->nonfinite_streak == 0);
    g->healthy_streak = healthy ? g->healthy_streak + 1 : 0;
    if (healthy && A - g->last_save_attempt >= g->cfg.snapshot_every && usable(g)) {
        if ((s = g->store.save(g->store.user, g->t, next, A, err)) != MXP_OK) return s;
        g->have_healthy = true;
        g->last_save_attempt = A;
        g->rollbacks_since_save = 0;
    }
    /* an operator decision on its way to the boundary: no retry undoes it */
    step_source held;
    const bool operator_waiting =
        step_ctl_signal_waiting(g->t) ||
        (step_ctl_pending(g->t, &held, NULL) && held == STEP_SRC_REQUEST);
    if (g->cfg.retry_after > 0 && !g->operator_fp32 && !operator_waiting && g->chain_n > 0 &&
        g->healthy_streak >= g->retry_wait) { /* opt-in: the faster mode again, next step */
        const mxp_precision cur = guard_mode(g);
        mxp_precision to = g->chain[--g->chain_n];
        if ((s = switch_precision(g, to, "guard retry", err)) != MXP_OK) return s;
        g->retries++;
        g->last_retry_attempt = g->attempts;
        g->healthy_streak = 0;
        clear_windows(g);
        d->precision_changed = true;
        mxp_guard_event ev;
        event_init(g, &ev, MXP_EVENT_RETRY, MXP_SEV_P2);
        ev.from = cur;
        ev.to = to;
        ev.taken = MXP_ACT_ALERT;
        snprintf(ev.detail, sizeof ev.detail,
                 "retry: %lld healthy steps in %s, trying %s again (guard.fallback.retry_after)",
                 (long long)g->retry_wait, mxp_precision_name(cur), mxp_precision_name(to));
        emit(g, &ev);
    }
    return guard_boundary(g, err); /* the step's end, when no run reaches it */
}

mxp_status mxp_guard_canary(mxp_guard *g, double *div, double *loss_work, double *loss_fp32,
                            mxp_error *err) {
    if (!g) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_canary: NULL guard");
    if (!g->have_canary)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "no canary: the guard was created without a probe batch or with "
                             "guard.canary.every_steps=0");
    double dv, lw, l32;
    mxp_status s = guard_canary_run(&g->canary, g->model, &dv, &lw, &l32, err);
    if (s != MXP_OK) return s;
    g->canary_div = dv;
    g->canary_lw = lw;
    g->canary_l32 = l32;
    if (div) *div = dv;
    if (loss_work) *loss_work = lw;
    if (loss_fp32) *loss_fp32 = l32;
    return MXP_OK;
}

/* ---- queries ------------------------------------------------------------------ */

void mxp_guard_get_status(const mxp_guard *g, mxp_guard_status *out) {
    if (!g || !out) return;
    memset(out, 0, sizeof *out);
    out->attempts = g->attempts;
    out->events = g->n_events;
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        out->fired[r] = g->fired[r];
        out->value[r] = g->value[r];
    }
    out->fallbacks = g->fallbacks;
    out->rollbacks = g->rollbacks;
    out->retries = g->retries;
    out->operator_switches = g->operator_switches;
    out->initial = g->initial;
    out->current = step_ctl_next_mode(g->t); /* with a switch the boundary will apply */
    out->stopped = g->stopped;
    out->canary_divergence = g->canary_div;
    out->canary_loss = g->canary_lw;
    out->canary_loss_fp32 = g->canary_l32;
    out->nonfinite_streak = g->nonfinite_streak;
    out->first_site = g->first_site;
    out->first_site_step = g->first_site_step;
    out->anomaly = g->anomaly;
    out->anomaly_step = g->anomaly_step;
    out->rollback_store = g->store_custom ? "custom" : "memory";
}

const mxp_guard_event *mxp_guard_events(const mxp_guard *g, size_t *n) {
    size_t kept = g->n_events < GUARD_EVENTS_KEPT ? (size_t)g->n_events : GUARD_EVENTS_KEPT;
    size_t first = (size_t)(g->n_events - (int64_t)kept);
    for (size_t i = 0; i < kept; i++)
        g->events_linear[i] = g->events[(first + i) % GUARD_EVENTS_KEPT];
    *n = kept;
    return g->events_linear;
}

bool mxp_guard_stopped(const mxp_guard *g) { return g && g->stopped; }

const mxp_monitor *mxp_guard_monitor(const mxp_guard *g) { return g ? g->mon : NULL; }

/* Append to buf at *pos (snprintf rules); false once it no longer fits. */
static bool appendf(char *buf, size_t n, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool appendf(char *buf, size_t n, size_t *pos, const char *fmt, ...) {
    if (*pos >= n) return false;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *pos, n - *pos, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - *pos) {
        *pos = n;
        return false;
    }
    *pos += (size_t)w;
    return true;
}

/* "key":number, with null for NaN/Inf, which JSON cannot hold. */
static void append_num(char *buf, size_t n, size_t *pos, const char *key, double v) {
    if (isfinite(v))
        appendf(buf, n, pos, "\"%s\":%.6g", key, v);
    else
        appendf(buf, n, pos, "\"%s\":null", key);
}

int mxp_guard_status_json(const mxp_guard *g, char *buf, size_t n) {
    if (!g || !buf || n == 0) return -1;
    mxp_guard_status st;
    mxp_guard_get_status(g, &st);
    size_t pos = 0;
    appendf(buf, n, &pos,
            "{\"precision\":\"%s\",\"initial_precision\":\"%s\",\"steps\":%lld,"
            "\"events\":%lld,\"fallbacks\":%lld,\"rollbacks\":%lld,\"retries\":%lld,"
            "\"operator_switches\":%lld,\"stopped\":%s,\"nonfinite_streak\":%lld,"
            "\"rollback_store\":\"%s\",",
            mxp_precision_name(st.current), mxp_precision_name(st.initial),
            (long long)st.attempts, (long long)st.events, (long long)st.fallbacks,
            (long long)st.rollbacks, (long long)st.retries, (long long)st.operator_switches,
            st.stopped ? "true" : "false", (long long)st.nonfinite_streak,
            g->ckpt ? "memory+checkpoints" : st.rollback_store);
    append_num(buf, n, &pos, "canary_divergence", st.canary_divergence);
    appendf(buf, n, &pos, ",\"rules\":{");
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        appendf(buf, n, &pos, "%s\"%s\":{\"fired\":%lld,", r ? "," : "",
                mxp_guard_rule_name((mxp_guard_rule)r), (long long)st.fired[r]);
        append_num(buf, n, &pos, "value", st.value[r]);
        appendf(buf, n, &pos, "}");
    }
    appendf(buf, n, &pos, "}");
    if (st.first_site.found)
        appendf(buf, n, &pos,
                ",\"first_nonfinite\":{\"step\":%lld,\"pass\":\"%s\",\"layer\":%d,\"op\":\"%s\","
                "\"count\":%lld}",
                (long long)st.first_site_step, st.first_site.backward ? "backward" : "forward",
                st.first_site.layer, st.first_site.op, (long long)st.first_site.count);
    if (!appendf(buf, n, &pos, "}")) return -1;
    return (int)pos;
}
