/* guard/snapshot.c: the built-in rollback store, an in-memory snapshot of
 * the last healthy point (issue 4: "until the checkpoint store lands,
 * rollback keeps an in-memory snapshot").
 *
 * Entry points (internal): guard_snapshot_save, guard_snapshot_restore,
 * guard_snapshot_free; used through mxp_rollback_store, so a checkpoint
 * store replaces it with one call (mxp_guard_set_rollback_store).
 *
 * A snapshot holds the FP32 parameters (the master, or the widened working
 * weights of a pure mode), the optimizer moments, the trainer state
 * (optimizer step = AdamW's t, stochastic-rounding position, lr, epoch),
 * the precision mode with its scaler and FP8 scaling state, and the data
 * position. Restore writes the parameters into whatever mode runs now
 * (master + recast, or RNE into the 16-bit weights), restores the scaler
 * and FP8 state only when the mode is the same, and keeps the trainer's
 * training_steps / skipped_steps counters: they count work done, and a
 * rollback never hides that steps were skipped. Parameters and moments
 * move by named-tensor copies, one get (save) or set (restore) per slab
 * (docs/design.md "Who owns memory").
 */
#include "guard/guard_internal.h"

#include <string.h>

void guard_snapshot_free(guard_snapshot *s) {
    mxp_free(s->params);
    mxp_free(s->m);
    mxp_free(s->v);
    mxp_free(s->fp8);
    memset(s, 0, sizeof *s);
}

/* Allocate the buffers for n parameters (once). */
static mxp_status snapshot_alloc(guard_snapshot *s, size_t n, bool has_v, mxp_error *err) {
    if (s->params && s->n == n && (!has_v || s->v)) return MXP_OK;
    guard_snapshot_free(s);
    s->params = mxp_calloc(n, sizeof(float));
    s->m = mxp_calloc(n, sizeof(float));
    if (has_v) s->v = mxp_calloc(n, sizeof(float));
    if (!s->params || !s->m || (has_v && !s->v)) {
        guard_snapshot_free(s);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "rollback snapshot of %zu parameters",
                             n);
    }
    s->n = n;
    return MXP_OK;
}

mxp_status guard_snapshot_save(void *user, mxp_trainer *t, const mxp_data_position *pos,
                               int64_t attempt, mxp_error *err) {
    guard_snapshot *s = user;
    mxp_model *model = mxp_trainer_model(t);
    const size_t n = mxp_model_num_params(model);
    const bool has_v = mxp_trainer_tensor_bytes(t, MXP_TENSOR_OPTIM_V) > 0;
    mxp_status st = snapshot_alloc(s, n, has_v, err);
    if (st != MXP_OK) return st;
    /* one get per slab: the parameters widened to FP32, the moments */
    const size_t nb = n * sizeof(float);
    st = mxp_trainer_tensor_get(t, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, s->params, nb, err);
    if (st == MXP_OK)
        st = mxp_trainer_tensor_get(t, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, s->m, nb, err);
    if (st == MXP_OK && has_v)
        st = mxp_trainer_tensor_get(t, MXP_TENSOR_OPTIM_V, NULL, MXP_DTYPE_F32, s->v, nb, err);
    if (st != MXP_OK) {
        s->valid = false;
        return st;
    }
    mxp_trainer_get_state(t, &s->tstate);
    s->mode = mxp_model_policy(model)->mode;
    mxp_scaler_get_state(mxp_trainer_scaler(t), &s->scaler);
    mxp_scaler_groups *gr = mxp_trainer_scaler_groups(t);
    s->n_groups = mxp_scaler_groups_count(gr);
    for (int i = 0; i < s->n_groups; i++)
        mxp_scaler_get_state(mxp_scaler_groups_get(gr, i), &s->groups[i]);
    mxp_fp8_scaling *f8 = mxp_model_fp8(model);
    mxp_free(s->fp8);
    s->fp8 = NULL;
    s->fp8_n = 0;
    if (f8) {
        s->fp8_n = mxp_fp8_scaling_state_size(f8);
        s->fp8 = mxp_calloc(s->fp8_n, sizeof(float));
        if (!s->fp8) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "FP8 scaling snapshot");
        mxp_fp8_scaling_get_state(f8, s->fp8);
        s->fp8_steps = mxp_fp8_scaling_steps(f8);
    }
    s->pos = *pos;
    s->attempt = attempt;
    s->valid = true;
    return MXP_OK;
}

mxp_status guard_snapshot_restore(void *user, mxp_trainer *t, mxp_data_position *pos,
                                  int64_t *attempt, mxp_error *err) {
    guard_snapshot *s = user;
    if (!s->valid) return mxp_error_set(err, MXP_ERR_STATE, "no healthy snapshot to roll back to");
    mxp_model *model = mxp_trainer_model(t);
    const size_t n = mxp_model_num_params(model);
    if (n != s->n)
        return mxp_error_set(err, MXP_ERR_STATE, "snapshot holds %zu parameters, model %zu",
                             s->n, n);
    mxp_trainer_state now, ts = s->tstate;
    mxp_trainer_get_state(t, &now);
    ts.training_steps = now.training_steps; /* counters of work done stay */
    ts.skipped_steps = now.skipped_steps;
    mxp_status st = mxp_trainer_set_state(t, &ts, err);
    if (st != MXP_OK) return st;
    /* one set per slab: the parameters into whatever mode runs now (the
     * master and its recast, or RNE into 16-bit weights), the moments; a
     * second moment the snapshot lacks (taken under SGD) starts at zero */
    const size_t nb = n * sizeof(float);
    st = mxp_trainer_tensor_set(t, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, s->params, nb, err);
    if (st == MXP_OK)
        st = mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, s->m, nb, err);
    if (st == MXP_OK && mxp_trainer_tensor_bytes(t, MXP_TENSOR_OPTIM_V))
        st = s->v ? mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_V, NULL, MXP_DTYPE_F32, s->v, nb,
                                           err)
                  : mxp_trainer_tensor_zero(t, MXP_TENSOR_OPTIM_V, NULL, err);
    if (st != MXP_OK) return st;
    mxp_model_zero_grads(model);
    if (mxp_model_policy(model)->mode == s->mode) {
        st = mxp_scaler_set_state(mxp_trainer_scaler(t), &s->scaler, err);
        if (st != MXP_OK) return st;
        mxp_scaler_groups *gr = mxp_trainer_scaler_groups(t);
        if (mxp_scaler_groups_count(gr) == s->n_groups)
            for (int i = 0; i < s->n_groups; i++)
                if ((st = mxp_scaler_set_state(mxp_scaler_groups_get(gr, i), &s->groups[i],
                                               err)) != MXP_OK)
                    return st;
        mxp_fp8_scaling *f8 = mxp_model_fp8(model);
        if (f8 && s->fp8) {
            st = mxp_fp8_scaling_set_state(f8, s->fp8, s->fp8_n, s->fp8_steps, err);
            if (st != MXP_OK) return st;
        }
    }
    *pos = s->pos;
    *attempt = s->attempt;
    return MXP_OK;
}
