/* backend/numerics/scaler_rule.h: the loss-scaler update rule, one step, as
 * a pure function of (config, state, found_inf), shared by amp/scaler.c
 * (which adds validation, the ERROR policy's message and logging) and the
 * CUDA backend (which runs it in a single thread on the device, so the skip
 * decision and the new scale never round-trip through the host).
 *
 * Entry point: mxp_scaler_rule_step (MXP_HD). The rule, with its
 * references (PyTorch _amp_update_scale_cuda_kernel; Megatron-LM /
 * DeepSpeed hysteresis; min/max; at-min detection), is documented in the
 * file comment of amp/scaler.c. Arithmetic: the products scale*factor are
 * formed in double and rounded to float (IEEE-exact on both sides).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_SCALER_RULE_H
#define MIXPREC_BACKEND_NUMERICS_SCALER_RULE_H

#include "backend/numerics/hd.h"

/* What the rule needs of the scaler config (resolved once). */
typedef struct mxp_scaler_rule {
    bool enabled;
    double growth_factor, backoff_factor;
    int64_t growth_interval;
    int hysteresis;
    float floor;      /* max((float)min_scale, FLT_MIN) */
    double max_scale; /* may be +inf */
} mxp_scaler_rule;

/* The evolving state (the fields of amp.h mxp_scaler_state). */
typedef struct mxp_scaler_rule_state {
    float scale;
    int64_t growth_tracker;
    int hysteresis_left;
    int64_t overflow_steps, total_steps, steps_at_min;
} mxp_scaler_rule_state;

/* What one step did (the fields of amp.h mxp_scaler_event, fallback aside:
 * whether at_min means fallback is the caller's policy). */
typedef struct mxp_scaler_rule_event {
    bool overflow, backed_off, grew, at_min;
    float old_scale, new_scale;
} mxp_scaler_rule_event;

/* Advance *st by one step. */
MXP_HD static inline mxp_scaler_rule_event mxp_scaler_rule_step(const mxp_scaler_rule *c,
                                                                mxp_scaler_rule_state *st,
                                                                bool found_inf) {
    mxp_scaler_rule_event e = {false, false, false, false, 0.0f, 0.0f};
    e.old_scale = st->scale;
    e.overflow = found_inf;
    st->total_steps++;
    if (found_inf) st->overflow_steps++;

    if (!c->enabled) {
        st->scale = 1.0f;
        st->growth_tracker = 0;
        st->steps_at_min = 0;
    } else if (found_inf) {
        bool at_min = st->scale <= c->floor;
        st->growth_tracker = 0;
        if (st->hysteresis_left > 1) {
            st->hysteresis_left--;
        } else {
            double next = (double)st->scale * c->backoff_factor;
            if (next < (double)c->floor) next = (double)c->floor;
            st->scale = (float)next;
            st->hysteresis_left = 1;
            e.backed_off = st->scale < e.old_scale;
        }
        if (at_min) {
            st->steps_at_min++;
            e.at_min = true;
        } else {
            st->steps_at_min = 0;
        }
    } else {
        st->steps_at_min = 0;
        int64_t successful = st->growth_tracker + 1;
        if (successful >= c->growth_interval) {
            double grown = (double)st->scale * c->growth_factor;
            if (grown > c->max_scale) grown = c->max_scale;
            float grown_f = (float)grown;
            if (mxp_hd_isfinite(grown_f) && grown_f > st->scale) {
                st->scale = grown_f;
                e.grew = true;
            }
            st->growth_tracker = 0;
            st->hysteresis_left = c->hysteresis;
        } else {
            st->growth_tracker = successful;
        }
    }
    e.new_scale = st->scale;
    return e;
}

#endif /* MIXPREC_BACKEND_NUMERICS_SCALER_RULE_H */
