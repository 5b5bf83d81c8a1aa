/* guard/workload.c: the guard as a workload loop uses it, and the
 * checkpoint-backed rollback store.
 *
 * Entry points: mxp_guard_for_workload, mxp_guard_step_begin,
 * mxp_guard_step_end, mxp_guard_set_checkpoints; internal guard_restore,
 * guard_tell_health.
 *
 * Positions: the loop's mxp_data_position (train.h) is the guard's too, so
 * a rollback hands the loop back the exact batch and learning-rate position
 * of the restored state.
 *
 * Rollback stores: the in-memory snapshot (snapshot.c) always; with a
 * checkpoint manager attached (mxp_guard_set_checkpoints) the newer of the
 * snapshot and the newest healthy verified checkpoint on disk is restored.
 * A custom store (mxp_guard_set_rollback_store) replaces both.
 */
#include "guard/guard_internal.h"

#include <mixprec/ckpt.h>

#include <string.h>

mxp_status mxp_guard_for_workload(const mxp_guard_config *c, mxp_trainer *t,
                                  const mxp_batch *probe, mxp_guard **out, mxp_error *err) {
    if (!c || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_for_workload: NULL");
    *out = NULL;
    if (!c->enabled && c->fault.kind == MXP_FAULT_NONE) return MXP_OK;
    mxp_guard_config gc = *c;
    if (!gc.enabled) { /* only the fault injection asked for a guard */
        for (int r = 0; r < MXP_RULE_COUNT; r++) gc.rules[r].action = 0;
        gc.canary_every = 0;
    }
    return mxp_guard_create(&gc, t, gc.canary_every > 0 ? probe : NULL, out, err);
}

mxp_status mxp_guard_step_begin(mxp_guard *g, const mxp_data_position *p, mxp_error *err) {
    if (!g || !p) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_step_begin: NULL");
    mxp_guard_decision d;
    return mxp_guard_before_step(g, p, &d, err);
}

mxp_status mxp_guard_step_end(mxp_guard *g, const mxp_step_result *res, mxp_data_position *p,
                              bool *stop, mxp_error *err) {
    if (!g || !res || !p || !stop)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_guard_step_end: NULL");
    mxp_guard_decision d;
    mxp_status s = mxp_guard_after_step(g, res, p, &d, err);
    if (s != MXP_OK) return s;
    if (d.rewind) *p = d.pos;
    *stop = d.stop;
    return MXP_OK;
}

void mxp_guard_set_checkpoints(mxp_guard *g, mxp_ckpt_manager *m) {
    if (!g) return;
    g->ckpt = m;
    g->ckpt_healthy = true;
    if (m) mxp_ckpt_manager_set_health(m, true, NULL);
}

void guard_tell_health(mxp_guard *g, bool healthy) {
    if (!g->ckpt || healthy == g->ckpt_healthy) return;
    g->ckpt_healthy = healthy;
    char state[4096];
    mxp_ckpt_manager_set_health(g->ckpt, healthy,
                                mxp_guard_status_json(g, state, sizeof state) > 0 ? state : NULL);
}

/* The newer of the snapshot and the newest healthy checkpoint on disk. */
mxp_status guard_restore(mxp_guard *g, mxp_data_position *pos, int64_t *attempt,
                         mxp_error *err) {
    if (g->store_custom || !g->ckpt)
        return g->store.restore(g->store.user, g->t, pos, attempt, err);
    char path[MXP_CKPT_PATH_MAX];
    mxp_ckpt_info info;
    mxp_error e = {0};
    const bool disk = mxp_ckpt_find_latest(mxp_ckpt_manager_dir(g->ckpt), true,
                                           mxp_trainer_model(g->t), path, sizeof path, &info,
                                           &e) == MXP_OK;
    if (!disk || (g->snap.valid && g->snap.tstate.training_steps > info.step))
        return g->store.restore(g->store.user, g->t, pos, attempt, err);
    mxp_ckpt_rollback_result rr;
    mxp_status s = mxp_ckpt_manager_rollback(g->ckpt, g->t, "guard rule", pos, &rr, err);
    if (s != MXP_OK) return s;
    *attempt = -1; /* a checkpoint of trainer step rr.to_step, not an attempt of this guard */
    mxp_log(MXP_LOG_WARN, "guard: rolled back to checkpoint %s (trainer step %lld)", rr.path,
            (long long)rr.to_step);
    return MXP_OK;
}
