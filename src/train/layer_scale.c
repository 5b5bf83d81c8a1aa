/* train/layer_scale.c: the trainer's side of per-layer (adaptive) loss
 * scaling (training.loss_scale.per_layer, amp.h mxp_scaler_groups).
 *
 * Entry points (trainer_internal.h): trainer_ls_create / _destroy /
 * _begin / _stage / _passes / _update; public: mxp_trainer_scaler_groups,
 * mxp_trainer_loss_scale.
 *
 * Groups are the layers that own parameters, in layer order (group i owns
 * the slab range of its layer; the GPT lm_head, which writes the tied
 * embedding, belongs to the embedding's group). S(l), the scale the
 * gradient of layer l's output carries, is the scale of layer_group[l]:
 * l's group, or for a layer without parameters the group of the highest
 * parameter layer below it (so the rescale happens where the dX is
 * produced and stored), fixed at create. Per step:
 *   begin:   the loss is multiplied by S(top) (the control block's scale);
 *   stage:   each group's scale, 1/s (in double, stored as float, as
 *            GradScaler), slab range and scaler state go into the group
 *            table that begin uploads with the control block (one copy);
 *   passes:  the model's backward reads S from that table in backend
 *            memory (nn_step_group_scales), rescaling dX between groups;
 *   backend: the grad pass unscales each group with its own 1/s into its
 *            group's result slot and sums the statistics; decide runs the
 *            groups' rule (backend/step_ctl.h mxp_step_groups_decide): the
 *            topmost group with non-finite gradients backs off (an Inf
 *            reaches every group below it through backward: those hold),
 *            finite groups count a clean step; a non-finite loss backs
 *            every group off;
 *   update:  after the step's one report, each group takes the state
 *            decide left; the host applies the at-min policy and logs.
 * Data parallelism would need a per-group found-inf all-reduce: refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler_internal.h"
#include "backend/backend.h"
#include "nn/step_pass.h"
#include "train/trainer_internal.h"

/* decide's outcome codes are amp.h's */
_Static_assert(MXP_STEP_GROUP_CLEAN == (int)MXP_GROUP_CLEAN &&
                   MXP_STEP_GROUP_OVERFLOW == (int)MXP_GROUP_OVERFLOW &&
                   MXP_STEP_GROUP_HOLD == (int)MXP_GROUP_HOLD,
               "step_ctl.h group outcomes follow mxp_group_outcome");
_Static_assert(MXP_STEP_MAX_GROUPS == MXP_MODEL_MAX_LAYERS, "a group per layer at most");

void trainer_ls_destroy(mxp_trainer *t) {
    if (!t->ls) return;
    mxp_scaler_groups_destroy(t->ls->groups);
    mxp_free(t->ls);
    t->ls = NULL;
}

mxp_status trainer_ls_create(mxp_trainer *t, const mxp_scaler_config *sc, mxp_error *err) {
    trainer_ls_destroy(t);
    if (!sc->enabled || !sc->per_layer) return MXP_OK;
    trainer_layer_scale *ls = mxp_calloc(1, sizeof *ls);
    if (!ls) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "per-layer loss scaling");
    const mxp_model *m = t->model;
    ls->n_layers = mxp_model_num_layers(m);
    size_t covered = 0;
    for (int l = 0; l < ls->n_layers; l++) {
        ls->group_of[l] = -1;
        size_t off = 0, n = mxp_model_layer_params(m, l, &off);
        if (n == 0) continue;
        ls->group_of[l] = ls->n_groups;
        ls->off[ls->n_groups] = off;
        ls->cnt[ls->n_groups] = n;
        ls->n_groups++;
        covered += n;
    }
    for (int l = 0; l < ls->n_layers; l++) /* tied weights: the owner's group */
        if (ls->group_of[l] < 0) {
            int owner = mxp_model_layer_param_group(m, l);
            if (owner >= 0) ls->group_of[l] = ls->group_of[owner];
        }
    int cur = 0; /* S(l)'s group; below the lowest parameter layer, that one's */
    for (int l = 0; l < ls->n_layers; l++)
        if (ls->group_of[l] >= 0) {
            cur = ls->group_of[l];
            break;
        }
    for (int l = 0; l < ls->n_layers; l++) {
        if (ls->group_of[l] >= 0) cur = ls->group_of[l];
        ls->layer_group[l] = cur;
    }
    mxp_status s = MXP_OK;
    if (mxp_model_ensemble(m) > 1)
        s = mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                          "training.loss_scale.per_layer=true: not available for ensembles "
                          "(model.ensemble=%d: a layer's parameters are one block per member); "
                          "accepted: training.loss_scale.per_layer=false (one loss scale)",
                          mxp_model_ensemble(m));
    else if (ls->n_groups == 0 || covered != t->n_params)
        s = mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                          "training.loss_scale.per_layer=true: the layers own %zu of the model's "
                          "%zu parameters in %d groups; accepted: models whose parameters all "
                          "belong to layers", covered, t->n_params, ls->n_groups);
    if (s == MXP_OK) s = mxp_scaler_groups_create(sc, ls->n_groups, &ls->groups, err);
    if (s != MXP_OK) {
        mxp_free(ls);
        return s;
    }
    t->ls = ls;
    return MXP_OK;
}

float trainer_ls_begin(mxp_trainer *t) {
    const trainer_layer_scale *ls = t->ls;
    return mxp_scaler_scale(mxp_scaler_groups_get(ls->groups, ls->layer_group[ls->n_layers - 1]));
}

/* The group table for begin (backend/step_ctl.h): group i's scale and
 * 1/scale (double, stored as float, as GradScaler), its slab range and its
 * scaler state; every group shares one config, so group 0's rule. */
void trainer_ls_stage(mxp_trainer *t, mxp_backend *be) {
    trainer_layer_scale *ls = t->ls;
    for (int i = 0; i < ls->n_groups; i++) {
        const mxp_scaler *sc = mxp_scaler_groups_get(ls->groups, i);
        be->grp_host[i] = (mxp_step_group_in){mxp_scaler_scale(sc), mxp_scaler_inv_scale(sc),
                                              ls->off[i], ls->cnt[i],
                                              mxp_scaler_rule_state_of(sc)};
    }
    be->ctl.n_groups = ls->n_groups;
    be->ctl.rule = mxp_scaler_rule_of(mxp_scaler_groups_get(ls->groups, 0));
}

/* The step's passes read S from the table begin uploaded (backend memory,
 * be->grp_in), each layer through its group; nn_step_end lets go. */
void trainer_ls_passes(mxp_trainer *t, const mxp_backend *be) {
    nn_step_group_scales(t->model, be->grp_in, t->ls->layer_group);
}

/* After the report: decide's outcome, state and event per group
 * (mxp_step_groups_decide) from the group slots that open the aux area;
 * the host applies the at-min policy and logs (mxp_scaler_groups_adopt). */
mxp_status trainer_ls_update(mxp_trainer *t, const void *aux_host, mxp_scaler_event *ev,
                             mxp_error *err) {
    trainer_layer_scale *ls = t->ls;
    const mxp_step_group_out *out = aux_host;
    mxp_scaler_rule_state st[MXP_MODEL_MAX_LAYERS];
    mxp_scaler_rule_event re[MXP_MODEL_MAX_LAYERS];
    for (int i = 0; i < ls->n_groups; i++) {
        ls->nonfinite[i] = out[i].stats.nonfinite;
        ls->outcome[i] = (mxp_group_outcome)out[i].outcome;
        st[i] = out[i].state;
        re[i] = out[i].event;
    }
    return mxp_scaler_groups_adopt(ls->groups, ls->outcome, st, re, ev, err);
}

mxp_status trainer_ls_check_comm(const mxp_trainer *t, mxp_error *err) {
    if (t->ls && t->comm && mxp_comm_size(t->comm) > 1)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "training.loss_scale.per_layer=true with %d data-parallel ranks; "
                             "accepted: one process (per-group overflow flags are not "
                             "all-reduced)", mxp_comm_size(t->comm));
    return MXP_OK;
}

mxp_scaler_groups *mxp_trainer_scaler_groups(mxp_trainer *t) {
    return t && t->ls ? t->ls->groups : NULL;
}

float mxp_trainer_loss_scale(const mxp_trainer *t) {
    return t->ls ? mxp_scaler_groups_min_scale(t->ls->groups) : mxp_scaler_scale(t->scaler);
}

/* ---- checkpoint metadata ("scaler_groups") --------------------------------
 * A JSON array with one array per group: [scale, growth_tracker,
 * hysteresis_left, overflow_steps, total_steps, steps_at_min]. */

#define GROUP_FIELDS 6

char *mxp_trainer_scaler_groups_json(mxp_trainer *t) {
    if (!t || !t->ls) return NULL;
    const int n = t->ls->n_groups;
    const size_t cap = (size_t)n * 128 + 8;
    char *buf = mxp_calloc(cap, 1);
    if (!buf) return NULL;
    size_t len = 0;
    buf[len++] = '[';
    for (int i = 0; i < n; i++) {
        mxp_scaler_state st;
        mxp_scaler_get_state(mxp_scaler_groups_get(t->ls->groups, i), &st);
        len += (size_t)snprintf(buf + len, cap - len, "%s[%.9g,%lld,%d,%lld,%lld,%lld]",
                                i ? "," : "", (double)st.scale, (long long)st.growth_tracker,
                                st.hysteresis_left, (long long)st.overflow_steps,
                                (long long)st.total_steps, (long long)st.steps_at_min);
    }
    snprintf(buf + len, cap - len, "]");
    return buf;
}

/* Parse "[[a,b,c,d,e,f],...]" into st[max]; returns the group count, or -1
 * when the text is not of that shape or a state is invalid. */
static int parse_groups(const char *p, mxp_scaler_state *st, int max) {
    char *end;
    int n = 0;
    while (*p == ' ') p++;
    if (*p++ != '[') return -1;
    while (*p == ' ') p++;
    if (*p == ']') return 0;
    for (;;) {
        double v[GROUP_FIELDS];
        while (*p == ' ') p++;
        if (*p++ != '[' || n >= max) return -1;
        for (int k = 0; k < GROUP_FIELDS; k++) {
            v[k] = strtod(p, &end);
            if (end == p) return -1;
            p = end;
            while (*p == ' ') p++;
            if (*p++ != (k + 1 < GROUP_FIELDS ? ',' : ']')) return -1;
        }
        const float sc = (float)v[0];
        if (!(sc > 0) || !isfinite(sc) || v[1] < 0 || v[2] < 1 || v[2] > 2147483647.0 ||
            v[3] < 0 || v[4] < v[3] || v[5] < 0 || v[5] > v[3] || v[4] > 9.0e18)
            return -1;
        st[n++] = (mxp_scaler_state){sc, (int64_t)v[1], (int)v[2], (int64_t)v[3], (int64_t)v[4],
                                     (int64_t)v[5]};
        while (*p == ' ') p++;
        if (*p == ']') return n;
        if (*p++ != ',') return -1;
    }
}

mxp_status mxp_trainer_scaler_groups_load(mxp_trainer *t, const char *json, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_scaler_groups_load: NULL");
    if (!t->ls) {
        if (json)
            mxp_log(MXP_LOG_INFO, "checkpoint: per-layer loss scales not used by this run "
                                  "(training.loss_scale.per_layer=false); ignored");
        return MXP_OK;
    }
    const int n = t->ls->n_groups;
    mxp_scaler_state st[MXP_MODEL_MAX_LAYERS];
    if (!json) { /* written without per-layer scaling: every group from the scaler */
        mxp_scaler_get_state(t->scaler, &st[0]);
        for (int i = 1; i < n; i++) st[i] = st[0];
        mxp_log(MXP_LOG_INFO, "checkpoint: no per-layer loss scales; every group starts at the "
                              "checkpoint's loss scale %g", (double)st[0].scale);
    } else {
        int got = parse_groups(json, st, MXP_MODEL_MAX_LAYERS);
        if (got != n)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "metadata 'scaler_groups' = '%.60s' holds %d valid group states; "
                                 "accepted: %d arrays [scale > 0, growth_tracker >= 0, "
                                 "hysteresis_left >= 1, overflow_steps, total_steps, steps_at_min]",
                                 json, got, n);
    }
    for (int i = 0; i < n; i++) {
        mxp_status s = mxp_scaler_set_state(mxp_scaler_groups_get(t->ls->groups, i), &st[i], err);
        if (s != MXP_OK) return s;
    }
    return MXP_OK;
}
