/* train/trainer_dist.c: the trainer's data-parallel hooks over dist.h's
 * communicator (train uses dist; dist knows nothing of the trainer).
 *
 * Entry points: mxp_trainer_set_comm, mxp_trainer_comm,
 * mxp_trainer_sync_precision (train.h);
 * mxp_trainer_dist_reduce/_reduce_loss/agree/verify (train/trainer_dist.h),
 * called by mxp_trainer_step at the points docs/design.md "A training step"
 * names: backward -> [reduce: grads averaged] -> fused unscale, finite
 * check and stats on the (now identical) slab -> the step's report ->
 * [reduce_loss: the reported loss averaged; agree: found_inf MAX] ->
 * clip/update or skip -> scaler update -> [verify, sometimes].
 * Because every rank runs the fused pass on bit-identical gradients, the
 * grad norm, the clip coefficient, the skip decision, the scaler update and
 * a fallback are one agreed value per step without further messages.
 */
#include <mixprec/dist.h>

#include "backend/backend.h"
#include "backend/devmem.h"
#include "train/trainer_dist.h"
#include "train/trainer_internal.h"

mxp_status mxp_trainer_set_comm(mxp_trainer *t, mxp_comm *comm, const mxp_dist_config *dc,
                                mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_set_comm: NULL trainer");
    mxp_dist_config d = dc ? *dc : mxp_dist_config_default();
    mxp_status s = mxp_dist_config_validate(&d, err);
    if (s != MXP_OK) return s;
    if (comm) {
        s = mxp_comm_reserve(comm, t->n_params, err);
        if (s != MXP_OK) return s;
    }
    t->comm = comm;
    t->dist = d;
    t->dist_verified = false;
    return MXP_OK;
}

mxp_comm *mxp_trainer_comm(mxp_trainer *t) { return t ? t->comm : NULL; }

mxp_status mxp_trainer_dist_reduce(mxp_trainer *t, mxp_error *err) {
    if (!t->comm || t->comm->size == 1) return MXP_OK;
    return mxp_comm_allreduce_f32(t->comm, mxp_model_grads(t->model), t->n_params,
                                  t->dist.allreduce_dtype, true, err);
}

mxp_status mxp_trainer_dist_reduce_loss(mxp_trainer *t, double *loss, mxp_error *err) {
    if (!t->comm || t->comm->size == 1) return MXP_OK;
    return mxp_comm_allreduce_f64(t->comm, loss, 1, true, err);
}

mxp_status mxp_trainer_dist_agree(mxp_trainer *t, bool *found_inf, mxp_error *err) {
    if (!t->comm || t->comm->size == 1) return MXP_OK;
    return mxp_dist_agree_any(t->comm, found_inf, err);
}

mxp_status mxp_trainer_dist_verify(mxp_trainer *t, mxp_error *err) {
    if (!t->comm || t->comm->size == 1) return MXP_OK;
    bool due = !t->dist_verified ||
               (t->dist.check_every > 0 && t->training_steps % t->dist.check_every == 0);
    if (!due) return MXP_OK;
    mxp_model *m = t->model;
    size_t P = t->n_params;
    uint64_t h = 0;
    const float *master = mxp_model_master(m);
    if (master) {
        h = mxp_dist_checksum(master, P * sizeof(float), h);
    } else {
        mxp_dtype wt;
        const void *w = mxp_model_work(m, &wt);
        h = mxp_dist_checksum(w, P * mxp_dtype_info(wt)->size, h);
    }
    if (t->m) h = mxp_dist_checksum(t->m, P * sizeof(float), h);
    if (t->v) h = mxp_dist_checksum(t->v, P * sizeof(float), h);
    float scale = mxp_scaler_scale(t->scaler);
    int64_t counters[3] = {t->training_steps, t->be->ctl.opt_steps, t->skipped_steps};
    h = mxp_dist_checksum(&scale, sizeof scale, h);
    h = mxp_dist_checksum(counters, sizeof counters, h);
    bool same = false;
    mxp_status s = mxp_dist_same_u64(t->comm, h, &same, err);
    if (s != MXP_OK) return s;
    t->dist_verified = true;
    if (!same)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "replicas diverged at step %lld: weights, optimizer state, loss "
                             "scale or step counters differ between the %d ranks (this rank %d: "
                             "checksum %016llx); the run cannot continue",
                             (long long)t->training_steps, t->comm->size, t->comm->rank,
                             (unsigned long long)h);
    mxp_log(MXP_LOG_DEBUG, "step %lld: replicas identical on %d ranks (checksum %016llx)",
            (long long)t->training_steps, t->comm->size, (unsigned long long)h);
    return MXP_OK;
}

static mxp_status mxp_trainer_sync_precision_dev(mxp_trainer *t, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_sync_precision: NULL");
    if (!t->comm || t->comm->size == 1) return MXP_OK;
    /* {rank 0's mode, max mode, -min mode} in one MAX all-reduce */
    int32_t mode = (int32_t)mxp_model_policy(t->model)->mode;
    int32_t v[3] = {t->comm->rank == 0 ? mode : -1, mode, -mode};
    mxp_status s = mxp_comm_allreduce_max_i32(t->comm, v, 3, err);
    if (s != MXP_OK || v[1] == -v[2]) return s; /* error, or all ranks agree */
    mxp_scaler_state st;
    mxp_scaler_get_state(t->scaler, &st);
    if (mode != v[0]) {
        mxp_log(MXP_LOG_WARN, "rank %d: precision %s -> %s to follow rank 0", t->comm->rank,
                mxp_precision_name((mxp_precision)mode), mxp_precision_name((mxp_precision)v[0]));
        s = step_ctl_apply_now(t, (mxp_precision)v[0], STEP_SRC_DIST, "follow rank 0", err);
    }
    /* the loss scale too: a switch may have re-created the scaler here only */
    mxp_status bs = mxp_comm_broadcast(t->comm, &st, sizeof st, 0, err);
    if (s != MXP_OK) return s;
    if (bs != MXP_OK) return bs;
    if (t->comm->rank != 0) return mxp_scaler_set_state(t->scaler, &st, err);
    return MXP_OK;
}

/* mxp_trainer_sync_precision inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_sync_precision(mxp_trainer *t, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_trainer_sync_precision_dev(t, err);
    mxp_dev_leave();
    return r_;
}
