/* amp/scaler.c: dynamic loss scaler.
 *
 * Entry points: mxp_scaler_config_default / _validate, mxp_scaler_create /
 * _destroy, mxp_scaler_update, mxp_scaler_scale / _inv_scale,
 * mxp_scaler_get_state / _set_state, mxp_scale_floor_policy_name / _parse;
 * internal (amp/scaler_internal.h): mxp_scaler_rule_of / _rule_state_of,
 * mxp_scaler_adopt (a step the rule took elsewhere: a backend's decide).
 *
 * Update rule (PyTorch torch.amp.GradScaler, the single-thread kernel
 * _amp_update_scale_cuda_kernel in aten/src/ATen/native/cuda/AmpKernels.cu):
 *   found_inf: scale = (float)(scale * backoff); growth_tracker = 0.
 *   clean:     growth_tracker + 1 reaches growth_interval -> candidate =
 *              (float)(scale * growth); adopted only if finite; the tracker
 *              returns to 0 whether or not the scale grew.
 * The products are formed in double and rounded to float, as the CUDA kernel
 * does (float scale times double factor). 1/scale is computed in double and
 * rounded to float. With the defaults (hysteresis 1, no floor, no cap) the
 * sequence of scales is PyTorch's bit for bit.
 *
 * The rule lives in backend/numerics/scaler_rule.h (one home, compiled by
 * gcc here and by nvcc for the device); this file validates, keeps the
 * state, applies the at-min policy and logs. In a trainer the state's home
 * is the step's control block (backend/step_ctl.h): the backend's decide
 * runs the rule and the trainer's scaler is the host view that
 * mxp_scaler_adopt sets from each report (docs/design.md).
 *
 * Extras (all off by default):
 *   - hysteresis H (Megatron-LM DynamicGradScaler, DeepSpeed
 *     DynamicLossScaler with consecutive_hysteresis=False): hysteresis_left
 *     starts at H; an overflow with hysteresis_left > 1 only decrements it
 *     (step skipped, scale kept); an overflow with hysteresis_left == 1 backs
 *     off and leaves it at 1, so once the budget is spent every further
 *     overflow backs off. The budget is restored to H only when a full
 *     growth_interval of clean steps completes (the point where the scale
 *     would grow), NOT on every clean step: isolated overflows separated by
 *     short clean runs still exhaust it.
 *   - min_scale: backoff never goes below it. Independently of min_scale
 *     the scale never goes below FLT_MIN (smallest normal float), so that
 *     1/scale stays finite; this floor differs from PyTorch only after ~250
 *     consecutive backoffs, when PyTorch would reach a subnormal or zero
 *     scale and an infinite inverse.
 *   - max_scale: growth is capped at it (a capped growth that would exceed
 *     FLT_MAX still counts as non-finite and is not adopted).
 *   - at_min: an overflow while the scale is already at its floor sets
 *     event.at_min and counts steps_at_min; policy CONTINUE goes on, ERROR
 *     returns MXP_ERR_NONFINITE (state still updated), FALLBACK sets
 *     event.fallback so the trainer can switch precision.
 *   - disabled: the scale is 1 and never changes; overflow and total step
 *     counters still advance and event.overflow is still reported.
 */
#include <assert.h>
#include <ctype.h>
#include <float.h>
#include <math.h>

#include <mixprec/amp.h>

#include "amp/scaler_internal.h"

struct mxp_scaler {
    mxp_scaler_config cfg;
    mxp_scaler_state st;
    float floor; /* effective minimum scale: max((float)min_scale, FLT_MIN) */
};

/* ---- floor policy names ------------------------------------------------ */

static const char *const floor_policy_names[] = {"continue", "error", "fallback"};
static_assert(sizeof floor_policy_names / sizeof floor_policy_names[0] ==
                  MXP_SCALE_FLOOR_COUNT,
              "floor_policy_names must cover mxp_scale_floor_policy");

const char *mxp_scale_floor_policy_name(mxp_scale_floor_policy p)
{
    if ((unsigned)p >= MXP_SCALE_FLOOR_COUNT) return "unknown";
    return floor_policy_names[p];
}

/* ASCII case-insensitive equality (locale independent). */
static bool name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

mxp_status mxp_scale_floor_policy_parse(const char *s, mxp_scale_floor_policy *out,
                                        mxp_error *err)
{
    if (s == NULL || out == NULL)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_scale_floor_policy_parse: NULL %s",
                             s == NULL ? "name" : "output");
    for (int i = 0; i < MXP_SCALE_FLOOR_COUNT; i++) {
        if (name_eq(s, floor_policy_names[i])) {
            *out = (mxp_scale_floor_policy)i;
            return MXP_OK;
        }
    }
    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                         "unknown scale floor policy '%s'; accepted: continue, error, "
                         "fallback", s);
}

/* ---- configuration ----------------------------------------------------- */

mxp_scaler_config mxp_scaler_config_default(void)
{
    return (mxp_scaler_config){
        .enabled = true,
        .init_scale = 65536.0,
        .growth_factor = 2.0,
        .backoff_factor = 0.5,
        .growth_interval = 2000,
        .hysteresis = 1,
        .min_scale = 0.0,
        .max_scale = INFINITY,
        .at_min = MXP_SCALE_FLOOR_CONTINUE,
    };
}

/* Contract: checks every field (all of them, even when disabled, so a
 * config can be enabled later); the first bad field is reported by its
 * struct name with its value and the accepted range. Comparisons are
 * written so that NaN fails each of them. */
mxp_status mxp_scaler_config_validate(const mxp_scaler_config *c, mxp_error *err)
{
    if (c == NULL)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "scaler config is NULL");
    /* The scale lives in a float: init must be a finite normal float. */
    if (!(c->init_scale >= FLT_MIN && c->init_scale <= FLT_MAX))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler init_scale = %g is invalid; accepted: finite, > 0, "
                             "within float range [%g, %g]",
                             c->init_scale, (double)FLT_MIN, (double)FLT_MAX);
    if (!(c->growth_factor > 1) || !isfinite(c->growth_factor))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler growth_factor = %g is invalid; accepted: finite, > 1",
                             c->growth_factor);
    if (!(c->backoff_factor > 0 && c->backoff_factor < 1))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler backoff_factor = %g is invalid; accepted: (0, 1)",
                             c->backoff_factor);
    if (c->growth_interval < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler growth_interval = %lld is invalid; accepted: >= 1",
                             (long long)c->growth_interval);
    if (c->hysteresis < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler hysteresis = %d is invalid; accepted: >= 1",
                             c->hysteresis);
    if (!(c->min_scale >= 0 && c->min_scale <= c->init_scale))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler min_scale = %g is invalid; accepted: finite, >= 0 "
                             "and <= init_scale (%g)",
                             c->min_scale, c->init_scale);
    if (!(c->max_scale > 0 && c->max_scale >= c->init_scale))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler max_scale = %g is invalid; accepted: > 0, >= "
                             "init_scale (%g), may be inf",
                             c->max_scale, c->init_scale);
    if ((unsigned)c->at_min >= MXP_SCALE_FLOOR_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler at_min = %d is invalid; accepted: continue, error, "
                             "fallback",
                             (int)c->at_min);
    return MXP_OK;
}

/* ---- lifecycle --------------------------------------------------------- */

mxp_status mxp_scaler_create(const mxp_scaler_config *c, mxp_scaler **out, mxp_error *err)
{
    if (out == NULL)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_scaler_create: out is NULL");
    *out = NULL;
    mxp_status st = mxp_scaler_config_validate(c, err);
    if (st != MXP_OK) return st;
    mxp_scaler *s = mxp_calloc(1, sizeof *s);
    if (s == NULL)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "scaler: allocation failed");
    s->cfg = *c;
    float min_f = (float)c->min_scale;
    s->floor = min_f > FLT_MIN ? min_f : FLT_MIN;
    s->st.scale = c->enabled ? (float)c->init_scale : 1.0f;
    s->st.hysteresis_left = c->hysteresis;
    *out = s;
    return MXP_OK;
}

void mxp_scaler_destroy(mxp_scaler *s)
{
    mxp_free(s);
}

float mxp_scaler_scale(const mxp_scaler *s)
{
    return s ? s->st.scale : 1.0f;
}

float mxp_scaler_inv_scale(const mxp_scaler *s)
{
    return (float)(1.0 / (double)mxp_scaler_scale(s));
}

const mxp_scaler_config *mxp_scaler_get_config(const mxp_scaler *s)
{
    return s ? &s->cfg : NULL;
}

/* ---- update ------------------------------------------------------------ */

/* The rule's view of the scaler (amp/scaler_internal.h). */
mxp_scaler_rule mxp_scaler_rule_of(const mxp_scaler *s)
{
    const mxp_scaler_config *c = &s->cfg;
    mxp_scaler_rule rule = {c->enabled, c->growth_factor, c->backoff_factor,
                            c->growth_interval, c->hysteresis, s->floor, c->max_scale};
    return rule;
}

mxp_scaler_rule_state mxp_scaler_rule_state_of(const mxp_scaler *s)
{
    const mxp_scaler_state *st = &s->st;
    mxp_scaler_rule_state rs = {st->scale, st->growth_tracker, st->hysteresis_left,
                                st->overflow_steps, st->total_steps, st->steps_at_min};
    return rs;
}

/* Contract (amp/scaler_internal.h): takes the state the rule left (here or
 * in a backend's decide) and applies the at-min policy and the log line. */
mxp_status mxp_scaler_adopt(mxp_scaler *s, const mxp_scaler_rule_state *rs,
                            const mxp_scaler_rule_event *re, mxp_scaler_event *ev,
                            mxp_error *err)
{
    mxp_scaler_state *st = &s->st;
    const mxp_scaler_config *c = &s->cfg;
    mxp_status ret = MXP_OK;
    mxp_scaler_event e = {0};
    st->scale = rs->scale;
    st->growth_tracker = rs->growth_tracker;
    st->hysteresis_left = rs->hysteresis_left;
    st->overflow_steps = rs->overflow_steps;
    st->total_steps = rs->total_steps;
    st->steps_at_min = rs->steps_at_min;
    e.old_scale = re->old_scale;
    e.overflow = re->overflow;
    e.backed_off = re->backed_off;
    e.grew = re->grew;
    e.at_min = re->at_min;
    if (e.at_min) {
        if (c->at_min == MXP_SCALE_FLOOR_FALLBACK) {
            e.fallback = true;
        } else if (c->at_min == MXP_SCALE_FLOOR_ERROR) {
            ret = mxp_error_set(err, MXP_ERR_NONFINITE,
                                "loss scale is at its minimum (%g) and gradients still "
                                "overflow (%lld consecutive steps, step %lld); at_min "
                                "policy is 'error' (accepted: continue, error, fallback)",
                                (double)st->scale, (long long)st->steps_at_min,
                                (long long)st->total_steps);
        }
    }

    e.new_scale = st->scale;
    if (e.backed_off || e.grew)
        mxp_log(MXP_LOG_DEBUG, "loss scale %s: %g -> %g (step %lld)",
                e.grew ? "grew" : "backed off", (double)e.old_scale, (double)e.new_scale,
                (long long)st->total_steps);
    if (ev) *ev = e;
    return ret;
}

/* Contract: advances the state by one step (see the file comment for the
 * rule). ev (may be NULL) receives what happened. Returns MXP_OK, or
 * MXP_ERR_NONFINITE under the ERROR policy when an overflow hits the floor;
 * the state is updated in both cases. */
mxp_status mxp_scaler_update(mxp_scaler *s, bool found_inf, mxp_scaler_event *ev,
                             mxp_error *err)
{
    if (s == NULL) {
        if (ev) *ev = (mxp_scaler_event){0};
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_scaler_update: scaler is NULL");
    }
    /* The rule itself: backend/numerics/scaler_rule.h (shared with the
     * device); then the policy's consequences and the log line (adopt). */
    const mxp_scaler_rule rule = mxp_scaler_rule_of(s);
    mxp_scaler_rule_state rs = mxp_scaler_rule_state_of(s);
    const mxp_scaler_rule_event re = mxp_scaler_rule_step(&rule, &rs, found_inf);
    return mxp_scaler_adopt(s, &rs, &re, ev, err);
}

/* ---- state ------------------------------------------------------------- */

void mxp_scaler_get_state(const mxp_scaler *s, mxp_scaler_state *out)
{
    if (s == NULL || out == NULL) return;
    *out = s->st;
}

/* Contract: validates every field first (nothing changes on error); then
 * adapts the state to this scaler's config, so a checkpoint taken under
 * another config or precision mode still loads:
 *   - disabled scaler: the scale is forced to 1;
 *   - enabled: the scale is clamped into [floor, max_scale];
 *   - hysteresis_left is clamped to <= hysteresis, growth_tracker to
 *     < growth_interval.
 * Each adjustment is logged at WARN. */
mxp_status mxp_scaler_set_state(mxp_scaler *s, const mxp_scaler_state *in, mxp_error *err)
{
    if (s == NULL || in == NULL)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_scaler_set_state: NULL %s",
                             s == NULL ? "scaler" : "state");
    if (!(in->scale > 0) || !isfinite(in->scale))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler state scale = %g is invalid; accepted: finite, > 0",
                             (double)in->scale);
    if (in->growth_tracker < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler state growth_tracker = %lld is invalid; accepted: >= 0",
                             (long long)in->growth_tracker);
    if (in->hysteresis_left < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler state hysteresis_left = %d is invalid; accepted: >= 1",
                             in->hysteresis_left);
    if (in->total_steps < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler state total_steps = %lld is invalid; accepted: >= 0",
                             (long long)in->total_steps);
    if (in->overflow_steps < 0 || in->overflow_steps > in->total_steps)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler state overflow_steps = %lld is invalid; accepted: 0 .. "
                             "total_steps (%lld)",
                             (long long)in->overflow_steps, (long long)in->total_steps);
    if (in->steps_at_min < 0 || in->steps_at_min > in->overflow_steps)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "scaler state steps_at_min = %lld is invalid; accepted: 0 .. "
                             "overflow_steps (%lld)",
                             (long long)in->steps_at_min, (long long)in->overflow_steps);

    mxp_scaler_state st = *in;
    const mxp_scaler_config *c = &s->cfg;
    if (!c->enabled) {
        st.scale = 1.0f;
    } else {
        if (st.scale < s->floor) st.scale = s->floor;
        if ((double)st.scale > c->max_scale) st.scale = (float)c->max_scale;
    }
    if (st.hysteresis_left > c->hysteresis) st.hysteresis_left = c->hysteresis;
    if (st.growth_tracker >= c->growth_interval) st.growth_tracker = c->growth_interval - 1;
    if (st.scale != in->scale || st.growth_tracker != in->growth_tracker ||
        st.hysteresis_left != in->hysteresis_left)
        mxp_log(MXP_LOG_WARN,
                "scaler state adapted to config: scale %g -> %g, growth_tracker %lld -> "
                "%lld, hysteresis_left %d -> %d",
                (double)in->scale, (double)st.scale, (long long)in->growth_tracker,
                (long long)st.growth_tracker, in->hysteresis_left, st.hysteresis_left);
    s->st = st;
    return MXP_OK;
}
