/* train/trainer_device_sync.c: the host copy of the device's record
 * (contract: train/trainer_device.h; who holds what:
 * train/trainer_device_internal.h): pull (device -> host, when a step ran
 * since the last pull), push (host -> device, when the host wrote), the
 * stale flags and the stats.
 *
 * Entry points: trainer_device_pull, trainer_device_pull_grads,
 * trainer_device_push,
 * trainer_device_host_wrote, trainer_device_attached,
 * trainer_device_get_stats, trainer_device_n_moments,
 * trainer_device_io_error.
 */
#include <string.h>

#include "backend/devmem.h"
#include "train/trainer_device_fp8.h"
#include "train/trainer_device_internal.h"
#include "train/trainer_internal.h"

mxp_status trainer_device_io_error(mxp_error *err, const trainer_device *d, const char *what,
                                   const char *why) {
    return mxp_error_set(err, MXP_ERR_IO, "training.device=cuda (%s): %s: %s", d->ops->name,
                         what, why);
}

/* The optimizer slabs the plan holds: AdamW m and v, SGD its momentum
 * buffer (none at momentum 0). */
int trainer_device_n_moments(const mxp_trainer *t) {
    if (t->cfg.optim.kind == MXP_OPTIM_ADAMW) return 2;
    return t->cfg.optim.momentum > 0.0f ? 1 : 0;
}

/* Host copy -> device (params, m, v); the counters travel per step. */
mxp_status trainer_device_push(mxp_trainer *t, mxp_error *err) {
    trainer_device *d = t->dv;
    const size_t P = t->n_params, nb = P * sizeof(float);
    char why[256] = "";
    d->busy = true;
    mxp_status s = mxp_model_tensor_get(t->model, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, d->buf,
                                        nb, err);
    if (s == MXP_OK && mxp_ds_put(d->plan, MXP_DS_MASTER, d->buf, why, sizeof why))
        s = trainer_device_io_error(err, d, "upload of the parameters", why);
    const float *mom[2] = {t->m, t->v};
    const mxp_ds_slab slab[2] = {MXP_DS_M, MXP_DS_V};
    for (int i = 0; i < trainer_device_n_moments(t) && s == MXP_OK; i++) {
        mxp_dev_download(d->buf, mom[i], nb);
        if (mxp_ds_put(d->plan, slab[i], d->buf, why, sizeof why))
            s = trainer_device_io_error(err, d, "upload of the optimizer state", why);
    }
    if (s == MXP_OK) s = trainer_device_fp8_sync(d->plan, t->model, false, err);
    d->busy = false;
    if (s == MXP_OK) {
        d->dev_stale = false;
        d->st.pushes++;
    }
    return s;
}

mxp_status trainer_device_pull(mxp_trainer *t, mxp_error *err) {
    trainer_device *d = t ? t->dv : NULL;
    if (!d || !d->host_stale || d->busy) return MXP_OK;
    const size_t nb = t->n_params * sizeof(float);
    char why[256] = "";
    d->busy = true;
    mxp_status s = MXP_OK;
    if (mxp_ds_get(d->plan, MXP_DS_MASTER, d->buf, why, sizeof why))
        s = trainer_device_io_error(err, d, "download of the parameters", why);
    else /* the master, and the work copy rounded from it as the device did */
        s = mxp_model_tensor_set(t->model, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, d->buf, nb, err);
    float *mom[2] = {t->m, t->v};
    const mxp_ds_slab slab[2] = {MXP_DS_M, MXP_DS_V};
    for (int i = 0; i < trainer_device_n_moments(t) && s == MXP_OK; i++) {
        if (mxp_ds_get(d->plan, slab[i], d->buf, why, sizeof why))
            s = trainer_device_io_error(err, d, "download of the optimizer state", why);
        else
            mxp_dev_upload(mom[i], d->buf, nb);
    }
    if (s == MXP_OK) s = trainer_device_fp8_sync(d->plan, t->model, true, err);
    d->busy = false;
    if (s == MXP_OK) {
        d->host_stale = false;
        d->st.pulls++;
    }
    return s;
}

mxp_status trainer_device_pull_grads(mxp_trainer *t, mxp_error *err) {
    trainer_device *d = t ? t->dv : NULL;
    if (!d || !d->grads_stale || d->busy) return MXP_OK;
    char why[256] = "";
    if (mxp_ds_get(d->plan, MXP_DS_GRAD, d->buf, why, sizeof why))
        return trainer_device_io_error(err, d, "download of the gradients", why);
    d->busy = true; /* the slab pointer below must not call back here */
    float *g = mxp_model_grads(t->model);
    d->busy = false;
    if (g) mxp_dev_upload(g, d->buf, t->n_params * sizeof(float));
    d->grads_stale = false;
    d->st.grad_pulls++;
    return MXP_OK;
}

void trainer_device_host_wrote(mxp_trainer *t) {
    if (t && t->dv && !t->dv->busy) t->dv->dev_stale = true;
}

bool trainer_device_attached(const mxp_trainer *t) { return t && t->dv; }

void trainer_device_get_stats(const mxp_trainer *t, trainer_device_stats *out) {
    memset(out, 0, sizeof *out);
    if (t && t->dv) *out = t->dv->st;
}

