/* amp/scaler_groups.c: per-layer (adaptive) loss scaling, one dynamic
 * scaler per parameter group.
 *
 * Entry points: mxp_scaler_groups_create / _destroy / _count / _get /
 * _get_const / _min_scale / _update (amp.h); _adopt (amp/scaler_internal.h:
 * the states a backend's decide left, train/layer_scale.c).
 *
 * Reference: X. Zhao et al., "Adaptive Loss Scaling for Mixed Precision
 * Training", arXiv 1910.12385 (one scale per layer, so that the gradients of
 * deep layers do not underflow while the top layers do not overflow). The
 * paper derives each layer's scale from gradient statistics; mixprec keeps
 * the dynamic rule of GradScaler per group instead (back off on overflow,
 * grow after growth_interval clean steps), so every group behaves exactly
 * as the global mxp_scaler does, on its own overflow signal. The trainer
 * (train/layer_scale.c) turns the group scales into per-layer gradient
 * scales for the backward pass and unscales each group by its own 1/s.
 */
#include <mixprec/amp.h>

#include "amp/scaler_internal.h"

struct mxp_scaler_groups {
    int n;
    mxp_scaler **s; /* [n] */
};

void mxp_scaler_groups_destroy(mxp_scaler_groups *g) {
    if (!g) return;
    if (g->s)
        for (int i = 0; i < g->n; i++) mxp_scaler_destroy(g->s[i]);
    mxp_free(g->s);
    mxp_free(g);
}

mxp_status mxp_scaler_groups_create(const mxp_scaler_config *c, int n, mxp_scaler_groups **out,
                                    mxp_error *err) {
    if (!c || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_scaler_groups_create: NULL argument");
    *out = NULL;
    if (n < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "per-layer loss scaling: %d parameter groups; accepted: >= 1", n);
    mxp_status st = mxp_scaler_config_validate(c, err);
    if (st != MXP_OK) return st;
    mxp_scaler_groups *g = mxp_calloc(1, sizeof *g);
    if (!g) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "per-layer loss scalers");
    g->s = mxp_calloc((size_t)n, sizeof *g->s);
    if (!g->s) {
        mxp_free(g);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "per-layer loss scalers (%d)", n);
    }
    g->n = n;
    for (int i = 0; i < n; i++) {
        st = mxp_scaler_create(c, &g->s[i], err);
        if (st != MXP_OK) {
            mxp_scaler_groups_destroy(g);
            return st;
        }
    }
    *out = g;
    return MXP_OK;
}

int mxp_scaler_groups_count(const mxp_scaler_groups *g) { return g ? g->n : 0; }

mxp_scaler *mxp_scaler_groups_get(mxp_scaler_groups *g, int i) {
    return g && i >= 0 && i < g->n ? g->s[i] : NULL;
}

const mxp_scaler *mxp_scaler_groups_get_const(const mxp_scaler_groups *g, int i) {
    return g && i >= 0 && i < g->n ? g->s[i] : NULL;
}

float mxp_scaler_groups_min_scale(const mxp_scaler_groups *g) {
    float m = mxp_scaler_scale(g->s[0]);
    for (int i = 1; i < g->n; i++) {
        float v = mxp_scaler_scale(g->s[i]);
        if (v < m) m = v;
    }
    return m;
}

/* Group i takes *st / *re by outcome o into the summary (HOLD: untouched;
 * an invalid outcome: the first error). */
static void adopt_one(mxp_scaler_groups *g, int i, mxp_group_outcome o,
                      const mxp_scaler_rule_state *st, const mxp_scaler_rule_event *re,
                      mxp_scaler_event *sum, mxp_status *ret, mxp_error *err) {
    if ((unsigned)o >= MXP_GROUP_OUTCOME_COUNT && *ret == MXP_OK)
        *ret = mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "group %d outcome %d; accepted: clean, overflow, hold", i, (int)o);
    if (o != MXP_GROUP_CLEAN && o != MXP_GROUP_OVERFLOW) {
        sum->overflow |= o == MXP_GROUP_HOLD;
        return;
    }
    mxp_scaler_event e;
    mxp_error e2 = {0};
    mxp_status s = mxp_scaler_adopt(g->s[i], st, re, &e, &e2);
    if (s != MXP_OK && *ret == MXP_OK)
        *ret = mxp_error_set(err, s, "parameter group %d: %s", i, e2.msg);
    sum->overflow |= e.overflow;
    sum->backed_off |= e.backed_off;
    sum->grew |= e.grew;
    sum->at_min |= e.at_min;
    sum->fallback |= e.fallback;
}

/* Contract (amp/scaler_internal.h): group i takes st[i] / re[i] when its
 * outcome is CLEAN or OVERFLOW (HOLD: untouched); the summary event ORs the
 * flags and reports the smallest scale before and after. */
mxp_status mxp_scaler_groups_adopt(mxp_scaler_groups *g, const mxp_group_outcome *outcome,
                                   const mxp_scaler_rule_state *st,
                                   const mxp_scaler_rule_event *re, mxp_scaler_event *ev,
                                   mxp_error *err) {
    if (!g || !outcome || !st || !re)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_scaler_groups_adopt: NULL argument");
    mxp_scaler_event sum = {0};
    sum.old_scale = mxp_scaler_groups_min_scale(g);
    mxp_status ret = MXP_OK;
    for (int i = 0; i < g->n; i++) adopt_one(g, i, outcome[i], &st[i], &re[i], &sum, &ret, err);
    sum.new_scale = mxp_scaler_groups_min_scale(g);
    if (ev) *ev = sum;
    return ret;
}

/* Contract: group i advances once by outcome[i] (HOLD: untouched): the
 * rule here, then what mxp_scaler_groups_adopt does with the states a
 * backend's decide hands back. */
mxp_status mxp_scaler_groups_update(mxp_scaler_groups *g, const mxp_group_outcome *outcome,
                                    mxp_scaler_event *ev, mxp_error *err) {
    if (!g || !outcome)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_scaler_groups_update: NULL argument");
    mxp_scaler_event sum = {0};
    sum.old_scale = mxp_scaler_groups_min_scale(g);
    mxp_status ret = MXP_OK;
    for (int i = 0; i < g->n; i++) {
        mxp_scaler_rule_state st = mxp_scaler_rule_state_of(g->s[i]);
        mxp_scaler_rule_event re = {0};
        if (outcome[i] == MXP_GROUP_CLEAN || outcome[i] == MXP_GROUP_OVERFLOW) {
            const mxp_scaler_rule rule = mxp_scaler_rule_of(g->s[i]);
            re = mxp_scaler_rule_step(&rule, &st, outcome[i] == MXP_GROUP_OVERFLOW);
        }
        adopt_one(g, i, outcome[i], &st, &re, &sum, &ret, err);
    }
    sum.new_scale = mxp_scaler_groups_min_scale(g);
    if (ev) *ev = sum;
    return ret;
}
