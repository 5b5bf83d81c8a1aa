/* train/trainer_device.c: attaching a trainer to a device step (contract:
 * train/trainer_device.h; who holds what and the other files:
 * train/trainer_device_internal.h; docs/design.md "The device step").
 *
 * Entry points: trainer_device_plan, trainer_device_attach / _detach /
 * _select, trainer_device_override.
 */
#include <string.h>

#include "nn/model_sync.h"
#include "train/trainer_device_internal.h"
#include "train/trainer_internal.h"

#ifdef MIXPREC_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

static const mxp_ds_ops *g_override_ops;
static void *g_override_dev;

void trainer_device_override(const mxp_ds_ops *ops, void *dev) {
    g_override_ops = ops;
    g_override_dev = ops ? dev : NULL;
}

/* the model's callbacks (nn/model_sync.h) */
static mxp_status model_pull(void *user, mxp_error *err) { return trainer_device_pull(user, err); }
static mxp_status model_grads(void *user, mxp_error *err) {
    return trainer_device_pull_grads(user, err);
}
static mxp_status model_wrote(void *user, mxp_error *err) {
    (void)err;
    trainer_device_host_wrote(user);
    return MXP_OK;
}


/* (Re)plan for `batch` rows; the state follows by a push. */
mxp_status trainer_device_plan(mxp_trainer *t, int64_t batch, mxp_error *err) {
    trainer_device *d = t->dv;
    mxp_ds_spec spec;
    mxp_status s = trainer_device_spec(t, batch, &spec, err);
    if (s != MXP_OK) return s;
    if ((s = trainer_device_pull(t, err)) != MXP_OK) return s; /* the old plan's record */
    mxp_ds_plan_destroy(d->plan);
    d->plan = NULL;
    spec.graphs = true; /* used by a table with graph ops (CUDA); the emulator stays eager */
    d->out_dim = spec.in_dim;
    for (int l = 0; l < spec.n_layers; l++)
        if (spec.layers[l].kind == MXP_DS_LINEAR) d->out_dim = spec.layers[l].units;
    mxp_free(d->xs);
    mxp_free(d->ys);
    mxp_free(d->ls);
    d->xs = d->ys = NULL;
    d->ls = NULL;
    if (spec.micro_batches > 1) {
        d->xs = mxp_calloc((size_t)(batch * spec.in_dim), sizeof(float));
        d->ys = mxp_calloc((size_t)(batch * d->out_dim), sizeof(float));
        d->ls = mxp_calloc((size_t)batch, sizeof(int32_t));
        if (!d->xs || !d->ys || !d->ls)
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "device step rows (%lld)",
                                 (long long)batch);
    }
    char why[256] = "";
    if (mxp_ds_plan_create(&spec, d->ops, d->dev, &d->plan, why, sizeof why))
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "training.device=cuda (%s): %s",
                             d->ops->name, why);
    d->mode = mxp_model_policy(t->model)->mode;
    d->batch = batch;
    d->dev_stale = true;
    d->host_stale = false;
    d->grads_stale = false; /* the new plan has no step's gradients yet */
    d->st.plans++;
    return MXP_OK;
}

mxp_status trainer_device_attach(mxp_trainer *t, const mxp_ds_ops *ops, void *dev, bool own_dev,
                                 mxp_error *err) {
    if (!t || !ops)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "trainer_device_attach: NULL argument");
    if (t->dv)
        return mxp_error_set(err, MXP_ERR_STATE, "trainer_device_attach: already attached");
    trainer_device *d = mxp_calloc(1, sizeof *d);
    float *buf = mxp_calloc(t->n_params ? t->n_params : 1, sizeof(float));
    if (!d || !buf) {
        mxp_free(d);
        mxp_free(buf);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "device step state");
    }
    d->ops = ops;
    d->dev = dev;
    d->own_dev = own_dev;
    d->buf = buf;
    d->st.table = ops->name;
    t->dv = d;
    const int k = t->cfg.grad_accum_steps > 1 ? t->cfg.grad_accum_steps : 1;
    const int64_t batch = mxp_model_get_spec(t->model)->max_batch * k;
    mxp_status s = trainer_device_plan(t, batch, err);
    if (s == MXP_OK) s = trainer_device_push(t, err);
    if (s != MXP_OK) {
        trainer_device_detach(t);
        return s;
    }
    nn_model_set_sync(t->model, model_pull, model_wrote, t);
    nn_model_set_grad_sync(t->model, model_grads);
    return MXP_OK;
}

void trainer_device_detach(mxp_trainer *t) {
    trainer_device *d = t ? t->dv : NULL;
    if (!d) return;
    if (d->plan) (void)trainer_device_pull(t, NULL);
    nn_model_set_sync(t->model, NULL, NULL, NULL);
    nn_model_set_grad_sync(t->model, NULL);
    mxp_ds_plan_destroy(d->plan);
#ifdef MIXPREC_HAVE_CUDA
    if (d->own_dev) mxp_cudab_ctx_destroy(d->dev);
#endif
    mxp_free(d->buf);
    mxp_free(d->xs);
    mxp_free(d->ys);
    mxp_free(d->ls);
    mxp_free(d);
    t->dv = NULL;
}

mxp_status trainer_device_select(mxp_trainer *t, const mxp_device *dv, mxp_error *err) {
    if (!t || !dv)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "trainer_device_select: NULL argument");
    if (dv->kind == MXP_DEVICE_CPU) return MXP_OK;
    if (g_override_ops) return trainer_device_attach(t, g_override_ops, g_override_dev, false, err);
    mxp_status s = mxp_device_require(dv, err); /* names a missing build or device */
    if (s != MXP_OK) return s;
#ifdef MIXPREC_HAVE_CUDA
    char why[256] = "";
    mxp_cudab_ctx *ctx = NULL;
    if (mxp_cudab_ctx_create(dv->index, &ctx, why, sizeof why))
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "training.device=cuda:%d: the CUDA context failed: %s", dv->index,
                             why);
    return trainer_device_attach(t, mxp_ds_ops_cuda(), ctx, true, err);
#else
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                         "training.device=cuda: this build has no CUDA backend; accepted: "
                         "training.device=cpu");
#endif
}

