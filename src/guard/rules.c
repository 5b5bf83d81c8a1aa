/* guard/rules.c: the guard rules as data, their defaults, validation, and
 * the sliding windows they are evaluated over.
 *
 * Entry points: mxp_guard_rule_get, mxp_guard_rule_name, mxp_severity_name,
 * mxp_guard_event_kind_name,
 * mxp_guard_action_text, mxp_guard_rule_crossed, mxp_guard_config_default,
 * mxp_guard_config_validate; internal guard_ring_*.
 *
 * Defaults follow docs/safety.md "Guard rules" and the seeds: severities
 * from the rollback runbook's table (seeds/000: P0 NaN/Inf losses
 * consistently; P1 overflow rate > 30%, loss divergence > 20% vs baseline;
 * P2 overflow rate 10-30%), the alert thresholds of the debugging guide's
 * GradientHealthMonitor and checklist (seeds/003: zero grads > 5%, grads
 * near overflow > 1%, grad norm 10x in 100 steps, scale < 1024, 10
 * consecutive non-finite losses before switching precision), and the
 * re-enable criterion "loss convergence within 5% of FP32" for the canary.
 */
#include "guard/guard_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const mxp_guard_rule_info rule_table[] = {
    [MXP_RULE_NONFINITE_LOSS] = {"nonfinite_loss", MXP_SEV_P0, MXP_CMP_GE, MXP_AGG_STREAK,
                                 "consecutive steps with a non-finite loss"},
    [MXP_RULE_OVERFLOW_RATE_HIGH] = {"overflow_rate_high", MXP_SEV_P1, MXP_CMP_GT, MXP_AGG_MEAN,
                                     "fraction of skipped (overflow) steps"},
    [MXP_RULE_OVERFLOW_RATE] = {"overflow_rate", MXP_SEV_P2, MXP_CMP_GE, MXP_AGG_MEAN,
                                "fraction of skipped (overflow) steps"},
    [MXP_RULE_CANARY_DIVERGENCE_HIGH] = {"canary_divergence_high", MXP_SEV_P1, MXP_CMP_GT,
                                         MXP_AGG_MEAN,
                                         "relative loss divergence vs the FP32 canary"},
    [MXP_RULE_CANARY_DIVERGENCE] = {"canary_divergence", MXP_SEV_P2, MXP_CMP_GT, MXP_AGG_MEAN,
                                    "relative loss divergence vs the FP32 canary"},
    [MXP_RULE_ZERO_GRAD] = {"zero_grad", MXP_SEV_P2, MXP_CMP_GT, MXP_AGG_MEAN,
                            "fraction of exactly-zero gradients"},
    [MXP_RULE_GRAD_NEAR_OVERFLOW] = {"grad_near_overflow", MXP_SEV_P2, MXP_CMP_GT, MXP_AGG_MEAN,
                                     "fraction of scaled gradients near the format's max"},
    [MXP_RULE_GRAD_NORM_GROWTH] = {"grad_norm_growth", MXP_SEV_P2, MXP_CMP_GT, MXP_AGG_GROWTH,
                                   "median grad norm of the newest window/10 steps / of the same span one window earlier"},
    [MXP_RULE_LOSS_SCALE_LOW] = {"loss_scale_low", MXP_SEV_P2, MXP_CMP_LT, MXP_AGG_MIN,
                                 "dynamic loss scale"},
    [MXP_RULE_HEADROOM] = {"headroom", MXP_SEV_P2, MXP_CMP_LT, MXP_AGG_MIN,
                           "smallest (format max / largest |activation|) over layers"},
    [MXP_RULE_UNDERFLOW] = {"underflow", MXP_SEV_P2, MXP_CMP_GT, MXP_AGG_MEAN,
                            "largest per-layer fraction of values below the smallest normal"},
};
static_assert(sizeof rule_table / sizeof rule_table[0] == MXP_RULE_COUNT,
              "rule table out of sync with mxp_guard_rule");

static const char *const severity_names[] = {"P0", "P1", "P2"};
static_assert(sizeof severity_names / sizeof severity_names[0] == MXP_SEV_COUNT,
              "severity names out of sync");

static const char *const event_kind_names[] = {"rule", "operator", "retry", "scaler"};
static_assert(sizeof event_kind_names / sizeof event_kind_names[0] == MXP_EVENT_KIND_COUNT,
              "event kind names out of sync");

const char *mxp_guard_event_kind_name(mxp_guard_event_kind k) {
    return (unsigned)k < MXP_EVENT_KIND_COUNT ? event_kind_names[k] : "unknown";
}

const mxp_guard_rule_info *mxp_guard_rule_get(mxp_guard_rule r) {
    return (unsigned)r < MXP_RULE_COUNT ? &rule_table[r] : NULL;
}

const char *mxp_guard_rule_name(mxp_guard_rule r) {
    return (unsigned)r < MXP_RULE_COUNT ? rule_table[r].name : "unknown";
}

const char *mxp_severity_name(mxp_severity s) {
    return (unsigned)s < MXP_SEV_COUNT ? severity_names[s] : "unknown";
}

void mxp_guard_action_text(unsigned action, char *buf, size_t n) {
    if (!buf || n == 0) return;
    buf[0] = '\0';
    if (action == 0) {
        snprintf(buf, n, "off");
        return;
    }
    static const struct {
        unsigned bit;
        const char *name;
    } parts[] = {{MXP_ACT_FALLBACK, "fallback"}, {MXP_ACT_ROLLBACK, "rollback"},
                 {MXP_ACT_STOP, "stop"}};
    size_t pos = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!(action & parts[i].bit)) continue;
        int w = snprintf(buf + pos, n - pos, "%s%s", pos ? "+" : "", parts[i].name);
        if (w < 0 || (size_t)w >= n - pos) return;
        pos += (size_t)w;
    }
    if (pos == 0) snprintf(buf, n, "alert");
}

bool mxp_guard_rule_crossed(mxp_guard_rule r, double value, double threshold) {
    if ((unsigned)r >= MXP_RULE_COUNT || isnan(value)) return false;
    switch (rule_table[r].cmp) {
    case MXP_CMP_GT: return value > threshold;
    case MXP_CMP_GE: return value >= threshold;
    case MXP_CMP_LT: return value < threshold;
    default: return false;
    }
}

mxp_guard_config mxp_guard_config_default(void) {
    mxp_guard_config c;
    memset(&c, 0, sizeof c);
    c.enabled = true;
    const unsigned A = MXP_ACT_ALERT;
    c.rules[MXP_RULE_NONFINITE_LOSS] = (mxp_guard_rule_config){10, 1,
                                                               A | MXP_ACT_FALLBACK |
                                                                   MXP_ACT_ROLLBACK};
    c.rules[MXP_RULE_OVERFLOW_RATE_HIGH] = (mxp_guard_rule_config){0.30, 100, A | MXP_ACT_FALLBACK};
    c.rules[MXP_RULE_OVERFLOW_RATE] = (mxp_guard_rule_config){0.10, 100, A};
    c.rules[MXP_RULE_CANARY_DIVERGENCE_HIGH] =
        (mxp_guard_rule_config){0.20, 1, A | MXP_ACT_ROLLBACK};
    c.rules[MXP_RULE_CANARY_DIVERGENCE] = (mxp_guard_rule_config){0.05, 1, A};
    c.rules[MXP_RULE_ZERO_GRAD] = (mxp_guard_rule_config){0.05, 10, A};
    c.rules[MXP_RULE_GRAD_NEAR_OVERFLOW] = (mxp_guard_rule_config){0.01, 10, A};
    c.rules[MXP_RULE_GRAD_NORM_GROWTH] = (mxp_guard_rule_config){10.0, 100, A};
    c.rules[MXP_RULE_LOSS_SCALE_LOW] = (mxp_guard_rule_config){1024.0, 1, A};
    c.rules[MXP_RULE_HEADROOM] = (mxp_guard_rule_config){8.0, 1, A};
    c.rules[MXP_RULE_UNDERFLOW] = (mxp_guard_rule_config){0.05, 1, A};
    c.canary_every = 100;
    c.canary_batch = 64;
    c.canary_loss_floor = 1e-3;
    c.headroom_every = 10;
    c.anomaly_mode = false;
    c.allow_emulated = false;
    c.retry_after = 0;
    c.snapshot_every = 100;
    c.max_rollbacks = 5;
    c.preflight_batches = 8;
    c.fault = mxp_fault_config_default();
    return c;
}

#define GUARD_WINDOW_MAX 1000000

mxp_status mxp_guard_config_validate(const mxp_guard_config *c, mxp_error *err) {
    if (!c) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "guard config is NULL");
    for (int r = 0; r < MXP_RULE_COUNT; r++) {
        const mxp_guard_rule_config *rc = &c->rules[r];
        const char *nm = rule_table[r].name;
        if (!isfinite(rc->threshold) || rc->threshold < 0)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "guard.%s.threshold=%g; accepted: finite >= 0", nm,
                                 rc->threshold);
        if (rc->window < 1 || rc->window > GUARD_WINDOW_MAX)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "guard.%s.window=%lld; accepted: 1..%d", nm,
                                 (long long)rc->window, GUARD_WINDOW_MAX);
        if (rc->action > (MXP_ACT_ALERT | MXP_ACT_FALLBACK | MXP_ACT_ROLLBACK | MXP_ACT_STOP))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "guard.%s.action=%u; accepted: off, alert, fallback, rollback, "
                                 "fallback+rollback, stop", nm, rc->action);
    }
    struct {
        const char *name;
        int64_t v, lo;
    } ints[] = {{"guard.canary.every_steps", c->canary_every, 0},
                {"guard.canary.batch_size", c->canary_batch, 1},
                {"guard.headroom.every_steps", c->headroom_every, 1},
                {"guard.fallback.retry_after", c->retry_after, 0},
                {"guard.rollback.snapshot_every", c->snapshot_every, 1},
                {"guard.rollback.max", c->max_rollbacks, 0},
                {"guard.preflight.batches", c->preflight_batches, 1}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v < ints[i].lo)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s=%lld; accepted: >= %lld",
                                 ints[i].name, (long long)ints[i].v, (long long)ints[i].lo);
    if (!(c->canary_loss_floor >= 0.0 && c->canary_loss_floor <= 1.0))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "guard.canary.loss_floor=%g; accepted: 0..1 (a fraction of the "
                             "probe's constant-prediction loss)", c->canary_loss_floor);
    const mxp_fault_config *f = &c->fault;
    if ((unsigned)f->kind >= MXP_FAULT_KIND_COUNT || (unsigned)f->pass >= MXP_FAULT_PASS_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "fault.kind/fault.pass out of range; accepted: kind none|nan|inf|"
                             "value|scale_weights, pass forward|backward");
    if (f->layer < 0 || f->layer >= MXP_MODEL_MAX_LAYERS)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "fault.layer=%lld; accepted: 0..%d",
                             (long long)f->layer, MXP_MODEL_MAX_LAYERS - 1);
    if (f->step < (f->kind == MXP_FAULT_SCALE_WEIGHTS ? 0 : 1) || f->count < 0 ||
        f->elements < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "fault.step=%lld fault.count=%lld fault.elements=%lld; accepted: "
                             "step >= 1 (scale_weights: >= 0), count >= 0 (0: every step on), "
                             "elements >= 1",
                             (long long)f->step, (long long)f->count, (long long)f->elements);
    if (!isfinite(f->value))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "fault.value=%g; accepted: finite",
                             f->value);
    return MXP_OK;
}

/* ---- sliding windows ----------------------------------------------------- */

/* A single-sample ratio (the norm now over the norm 100 steps ago) fires on
 * the batch-to-batch noise of a healthy run once its loss is small: on the
 * default world model that ratio reaches 15x in fp32, while the ratio of
 * 10-sample medians stays under 4x. A real blow-up (weights scaled, LR far
 * too high) moves every sample of the newest block and still crosses 10x. */
int64_t guard_growth_span(int64_t window) {
    int64_t k = window / 10;
    if (k < 1) k = 1;
    if (k > GUARD_GROWTH_SPAN_MAX) k = GUARD_GROWTH_SPAN_MAX;
    return k;
}

/* Median of v[0..n), n <= GUARD_GROWTH_SPAN_MAX; reorders v. */
static double median(double *v, int64_t n) {
    for (int64_t i = 1; i < n; i++) { /* insertion sort: n <= 32 */
        double x = v[i];
        int64_t j = i - 1;
        for (; j >= 0 && v[j] > x; j--) v[j + 1] = v[j];
        v[j + 1] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

mxp_status guard_ring_init(guard_ring *r, int64_t cap, mxp_error *err) {
    memset(r, 0, sizeof *r);
    r->v = mxp_calloc((size_t)cap, sizeof(double));
    if (!r->v) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "guard window of %lld",
                                    (long long)cap);
    r->cap = cap;
    return MXP_OK;
}

void guard_ring_free(guard_ring *r) {
    mxp_free(r->v);
    memset(r, 0, sizeof *r);
}

void guard_ring_clear(guard_ring *r) {
    r->n = r->head = 0;
    r->sum = 0.0;
}

void guard_ring_push(guard_ring *r, double x) {
    if (r->n == r->cap)
        r->sum -= r->v[r->head];
    else
        r->n++;
    r->v[r->head] = x;
    r->sum += x;
    r->head = (r->head + 1) % r->cap;
    /* re-sum now and then so rounding in the running sum never drifts */
    if (r->head == 0) {
        double s = 0.0;
        for (int64_t i = 0; i < r->n; i++) s += r->v[i];
        r->sum = s;
    }
}

double guard_ring_value(const guard_ring *r, mxp_rule_agg agg) {
    if (r->n < r->cap || r->n == 0) return NAN;
    switch (agg) {
    case MXP_AGG_MEAN: return r->sum / (double)r->n;
    case MXP_AGG_MIN: {
        double m = INFINITY;
        for (int64_t i = 0; i < r->n; i++)
            if (r->v[i] < m) m = r->v[i];
        return m;
    }
    case MXP_AGG_GROWTH: {
        /* full ring of window + span samples, the oldest at head: the
         * median of the newest span over the median of the oldest span */
        const int64_t k = r->span > 0 ? r->span : 1;
        double old_b[GUARD_GROWTH_SPAN_MAX], new_b[GUARD_GROWTH_SPAN_MAX];
        for (int64_t i = 0; i < k; i++) {
            old_b[i] = r->v[(r->head + i) % r->cap];
            new_b[i] = r->v[(r->head + r->cap - k + i) % r->cap];
        }
        const double oldest = median(old_b, k), newest = median(new_b, k);
        if (!(oldest > 0.0)) return NAN;
        return newest / oldest;
    }
    default: return NAN;
    }
}
