/* train/step_ctl.c: the step controller, the one owner of precision
 * switches (train/step_ctl.h; docs/design.md "Who changes precision").
 *
 * Entry points (internal): step_ctl_request, step_ctl_boundary,
 * step_ctl_apply_now, step_ctl_begin/_end, step_ctl_stop, the queries,
 * step_ctl_listen_signals, step_ctl_signal_fp32.
 *
 * Operator signals: a fixed table of per-listener flags. The handler sets
 * every flag (lock-free atomic stores: async-signal-safe, no pointers to
 * follow); a listener claims a free slot, clears its flag when it claims it
 * (a signal before it listened is not replayed) and exchanges it for 0 at
 * its boundary. A trainer that finds no free slot (more than
 * STEP_SIGNAL_SLOTS guards at once) does not hear signals; it is logged.
 */
#include "train/step_ctl.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "train/trainer_internal.h"

#define STEP_SIGNAL_SLOTS 64

static atomic_int sig_flag[STEP_SIGNAL_SLOTS];
static atomic_int sig_used[STEP_SIGNAL_SLOTS];

static const char *const source_names[STEP_SRC_COUNT] = {
    "signal", "guard", "scaler", "request", "advisor", "dist", "direct",
};

const char *step_source_name(step_source s) {
    return (unsigned)s < STEP_SRC_COUNT ? source_names[s] : "?";
}

int step_source_priority(step_source s, mxp_precision to) {
    switch (s) {
    case STEP_SRC_SIGNAL: return 0;
    case STEP_SRC_REQUEST: return to == MXP_PRECISION_FP32 ? 0 : 3;
    case STEP_SRC_GUARD: return 1;
    case STEP_SRC_SCALER: return 2;
    case STEP_SRC_ADVISOR: return 4;
    default: return 0; /* dist, direct: applied at once, never queued behind others */
    }
}

void step_ctl_init(step_ctl *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->sig_slot = -1;
    c->phase = STEP_IDLE;
}

void step_ctl_free(step_ctl *c) {
    if (c->sig_slot >= 0) atomic_store(&sig_used[c->sig_slot], 0);
    c->sig_slot = -1;
    pthread_mutex_destroy(&c->lock);
}

/* ---- operator signals ----------------------------------------------------- */

void step_ctl_signal_fp32(void) {
    for (int i = 0; i < STEP_SIGNAL_SLOTS; i++) atomic_store(&sig_flag[i], 1);
}

bool step_ctl_signal_lock_free(void) { return atomic_is_lock_free(&sig_flag[0]); }

void step_ctl_listen_signals(mxp_trainer *t, bool on) {
    if (!t) return;
    step_ctl *c = &t->ctl;
    if (!on) {
        if (c->sig_slot >= 0) atomic_store(&sig_used[c->sig_slot], 0);
        c->sig_slot = -1;
        return;
    }
    if (c->sig_slot >= 0) return;
    for (int i = 0; i < STEP_SIGNAL_SLOTS; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&sig_used[i], &free_slot, 1)) {
            atomic_store(&sig_flag[i], 0);
            c->sig_slot = i;
            return;
        }
    }
    mxp_log(MXP_LOG_WARN, "step controller: %d trainers already listen for operator signals; "
            "this one does not", STEP_SIGNAL_SLOTS);
}

/* ---- requests --------------------------------------------------------------- */

/* Keep (to, src, reason) unless a pending request of higher priority is
 * there; the caller holds the lock. */
static void offer(step_ctl *c, mxp_precision to, step_source src, const char *reason) {
    if (c->pending && step_source_priority(c->pend_src, c->pend_to) <
                          step_source_priority(src, to)) {
        mxp_log(MXP_LOG_INFO, "step controller: request for %s from %s (%s) dropped: %s's "
                "request for %s takes precedence at this boundary", mxp_precision_name(to),
                step_source_name(src), reason, step_source_name(c->pend_src),
                mxp_precision_name(c->pend_to));
        return;
    }
    if (c->pending)
        mxp_log(MXP_LOG_INFO, "step controller: request for %s from %s (%s) replaced by %s's "
                "request for %s", mxp_precision_name(c->pend_to), step_source_name(c->pend_src),
                c->pend_reason, step_source_name(src), mxp_precision_name(to));
    c->pending = true;
    c->pend_to = to;
    c->pend_src = src;
    snprintf(c->pend_reason, sizeof c->pend_reason, "%s", reason);
}

mxp_status step_ctl_request(mxp_trainer *t, mxp_precision to, step_source src,
                            const char *reason, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "precision request: NULL trainer");
    if ((unsigned)to >= MXP_PRECISION_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "precision request: mode %d; accepted: 0..%d", (int)to,
                             MXP_PRECISION_COUNT - 1);
    if ((unsigned)src >= STEP_SRC_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "precision request: source %d",
                             (int)src);
    step_ctl *c = &t->ctl;
    pthread_mutex_lock(&c->lock);
    offer(c, to, src, reason && reason[0] ? reason : step_source_name(src));
    pthread_mutex_unlock(&c->lock);
    return MXP_OK;
}

/* ---- the switch ------------------------------------------------------------- */

/* The scaler's state at its start: initial scale, counters cleared. */
static mxp_status restart_scaler(mxp_scaler *sc, const mxp_scaler_config *cfg,
                                 mxp_error *err) {
    mxp_scaler_state st;
    mxp_scaler_get_state(sc, &st);
    st.scale = (float)cfg->init_scale;
    st.growth_tracker = 0;
    st.hysteresis_left = cfg->hysteresis;
    st.steps_at_min = 0;
    return mxp_scaler_set_state(sc, &st, err);
}

/* What a switch changes and resets: the model's policy (master weights and
 * optimizer state carry over); the scaler re-created when loss scaling
 * turns on or off; when the new mode scales, the scaler and every
 * per-layer group restarted at the initial scale (the old mode's range is
 * not the new one's). */
static mxp_status switch_mode(mxp_trainer *t, mxp_precision p, mxp_error *err) {
    const mxp_precision_policy *cur = mxp_model_policy(t->model);
    if (cur->mode == p) return MXP_OK;
    const bool had_scaling = mxp_scaler_get_config(t->scaler)->enabled;
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_status s = mxp_model_set_policy(t->model, &pol, err);
    if (s != MXP_OK) return s;
    const bool wants = t->cfg.scaler_override ? t->cfg.scaler.enabled : pol.loss_scaling;
    if (wants != had_scaling && (s = trainer_make_scaler(t, err)) != MXP_OK) return s;
    const mxp_scaler_config *c = mxp_scaler_get_config(t->scaler);
    if (!c->enabled) return MXP_OK;
    if ((s = restart_scaler(t->scaler, c, err)) != MXP_OK) return s;
    mxp_scaler_groups *gr = mxp_trainer_scaler_groups(t);
    for (int i = 0; i < mxp_scaler_groups_count(gr); i++)
        if ((s = restart_scaler(mxp_scaler_groups_get(gr, i), c, err)) != MXP_OK) return s;
    return MXP_OK;
}

/* Apply (to, src, reason) and record the decision; a refused switch is
 * recorded (not switched) and returned in *err. */
static mxp_status decide(mxp_trainer *t, mxp_precision to, step_source src, const char *reason,
                         step_decision *out, mxp_error *err) {
    step_ctl *c = &t->ctl;
    step_decision d;
    memset(&d, 0, sizeof d);
    d.source = src;
    d.from = mxp_model_policy(t->model)->mode;
    d.to = to;
    d.after_step = t->training_steps;
    snprintf(d.reason, sizeof d.reason, "%s", reason);
    mxp_status s = MXP_OK;
    if (to == d.from) {
        mxp_log(MXP_LOG_INFO, "%s: already computing in %s", d.reason, mxp_precision_name(to));
    } else if ((s = switch_mode(t, to, err)) != MXP_OK) {
        mxp_log(MXP_LOG_ERROR, "%s: switching to %s failed: %s", d.reason,
                mxp_precision_name(to), err ? err->msg : "error");
    } else {
        d.switched = true;
        c->switches++;
        mxp_log(MXP_LOG_WARN, "precision switched from %s to %s after step %lld (%s: %s)",
                mxp_precision_name(d.from), mxp_precision_name(to), (long long)d.after_step,
                step_source_name(src), d.reason);
    }
    d.serial = c->last.serial + 1;
    c->last = d;
    if (src == STEP_SRC_SIGNAL) {
        c->signal_decisions++;
        c->last_signal = d;
    }
    if (out) *out = d;
    return s;
}

mxp_status step_ctl_boundary(mxp_trainer *t, step_decision *out, mxp_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "step boundary: NULL trainer");
    step_ctl *c = &t->ctl;
    if (c->phase == STEP_IN_STEP)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "precision switch refused: step %lld is in progress; switches "
                             "are applied at the step boundary (request one instead)",
                             (long long)t->training_steps + 1);
    pthread_mutex_lock(&c->lock);
    if (c->sig_slot >= 0 && atomic_exchange(&sig_flag[c->sig_slot], 0))
        offer(c, MXP_PRECISION_FP32, STEP_SRC_SIGNAL, "operator signal");
    const bool have = c->pending;
    const mxp_precision to = c->pend_to;
    const step_source src = c->pend_src;
    char reason[STEP_REASON_MAX];
    snprintf(reason, sizeof reason, "%s", c->pend_reason);
    c->pending = false;
    pthread_mutex_unlock(&c->lock);
    if (!have) return MXP_OK;
    mxp_error e = {0};
    (void)decide(t, to, src, reason, out, &e); /* refused: logged and recorded; training goes on */
    return MXP_OK;
}

mxp_status step_ctl_apply_now(mxp_trainer *t, mxp_precision to, step_source src,
                              const char *reason, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "precision switch: NULL trainer");
    if ((unsigned)to >= MXP_PRECISION_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "precision %d out of range; accepted: "
                             "0..%d", (int)to, MXP_PRECISION_COUNT - 1);
    if (t->ctl.phase == STEP_IN_STEP)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "precision switch to %s refused: step %lld is in progress; "
                             "switches are applied at the step boundary",
                             mxp_precision_name(to), (long long)t->training_steps + 1);
    if (mxp_model_policy(t->model)->mode == to) return MXP_OK; /* nothing to decide */
    return decide(t, to, src, reason && reason[0] ? reason : step_source_name(src), NULL, err);
}

/* ---- phases ------------------------------------------------------------------ */

mxp_status step_ctl_begin(mxp_trainer *t, mxp_error *err) {
    step_ctl *c = &t->ctl;
    if (c->phase == STEP_STOPPED)
        return mxp_error_set(err, MXP_ERR_STATE, "training step refused: the run was stopped "
                             "(%s); a stopped run takes no more steps", c->stop_reason);
    if (c->phase == STEP_IN_STEP)
        return mxp_error_set(err, MXP_ERR_STATE, "training step refused: step %lld is still in "
                             "progress (mxp_trainer_step called from inside a step)",
                             (long long)t->training_steps + 1);
    c->phase = STEP_IN_STEP;
    return MXP_OK;
}

void step_ctl_end(mxp_trainer *t) {
    if (t->ctl.phase == STEP_IN_STEP) t->ctl.phase = STEP_IDLE;
}

void step_ctl_stop(mxp_trainer *t, const char *why) {
    if (!t) return;
    t->ctl.phase = STEP_STOPPED;
    snprintf(t->ctl.stop_reason, sizeof t->ctl.stop_reason, "%s", why ? why : "stopped");
}

bool step_ctl_stopped(const mxp_trainer *t) { return t && t->ctl.phase == STEP_STOPPED; }

void step_ctl_claim(mxp_trainer *t, step_owner who) {
    if (t && who > t->ctl.owner) t->ctl.owner = who;
}

void step_ctl_release(mxp_trainer *t, step_owner who) {
    if (t && t->ctl.owner == who) t->ctl.owner = STEP_OWNER_TRAINER;
}

step_owner step_ctl_owner(const mxp_trainer *t) { return t ? t->ctl.owner : STEP_OWNER_TRAINER; }

/* ---- queries ----------------------------------------------------------------- */

bool step_ctl_pending(mxp_trainer *t, step_source *src, mxp_precision *to) {
    step_ctl *c = &t->ctl;
    pthread_mutex_lock(&c->lock);
    const bool have = c->pending;
    if (have && src) *src = c->pend_src;
    if (have && to) *to = c->pend_to;
    pthread_mutex_unlock(&c->lock);
    return have;
}

mxp_precision step_ctl_next_mode(mxp_trainer *t) {
    mxp_precision to;
    step_source src;
    if (step_ctl_pending(t, &src, &to) && (src == STEP_SRC_GUARD || src == STEP_SRC_SCALER))
        return to;
    return mxp_model_policy(t->model)->mode;
}

bool step_ctl_signal_waiting(const mxp_trainer *t) {
    return t->ctl.sig_slot >= 0 && atomic_load(&sig_flag[t->ctl.sig_slot]) != 0;
}

const step_decision *step_ctl_last(const mxp_trainer *t) { return &t->ctl.last; }

int64_t step_ctl_signal_decisions(const mxp_trainer *t, step_decision *last) {
    if (last) *last = t->ctl.last_signal;
    return t->ctl.signal_decisions;
}

int64_t step_ctl_switches(const mxp_trainer *t) { return t->ctl.switches; }
