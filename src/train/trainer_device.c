/* train/trainer_device.c: the trainer's step on a device (contract:
 * train/trainer_device.h; docs/design.md "The device step").
 *
 * Entry points: trainer_device_spec, trainer_device_attach / _detach /
 * _select / _step / _pull / _host_wrote / _attached / _get_stats,
 * trainer_device_override.
 *
 * Who holds what. The device plan (backend/cuda/dstep.h) holds the master,
 * work copy, m and v of record after a step; the host model and t->m/t->v
 * are a copy kept by two flags: host_stale (a step ran since the last
 * pull) and dev_stale (the host wrote since the last push). The counters
 * and the scaler stay the host's: before each step the plan is told the
 * optimizer step count, SR counter, scaler state and learning rate
 * (mxp_ds_set_state, host only), after it the host's mxp_scaler adopts
 * the rule state and event the device reported (mxp_scaler_adopt, as the
 * CPU path: the host adds its at-min policy, log and fallback request),
 * checked against the reported next scale. So a resume or a rollback
 * (which write tensors and counters on the host) needs nothing more than
 * the push the write triggers.
 */
#include "train/trainer_device.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "amp/scaler_internal.h"
#include "backend/devmem.h"
#include "nn/model_sync.h"
#include "train/step_ctl.h"
#include "train/trainer_device_fp8.h"
#include "train/trainer_internal.h"

#ifdef MIXPREC_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

struct trainer_device {
    const mxp_ds_ops *ops;
    void *dev;
    bool own_dev;
    mxp_ds_plan *plan;
    mxp_precision mode; /* the mode planned for */
    int64_t batch;
    bool host_stale, dev_stale;
    bool busy; /* inside pull / push: the model's callbacks do nothing */
    float *buf; /* host scratch [P] */
    /* the step's rows, micro-batches concatenated (k > 1 only) */
    float *xs, *ys;
    int32_t *ls;
    int64_t out_dim;
    trainer_device_stats st;
};

static const mxp_ds_ops *g_override_ops;
static void *g_override_dev;

void trainer_device_override(const mxp_ds_ops *ops, void *dev) {
    g_override_ops = ops;
    g_override_dev = ops ? dev : NULL;
}

static const char kAccepted[] =
    "accepted on training.device=cuda: an MLP of linear, relu, gelu, tanh, layernorm layers "
    "with loss mse or xent, precision fp32, mixed_bf16, mixed_fp16 or fp8, optimizer adamw or "
    "sgd, "
    "any grad_accum_steps (equal micro-batches), one process";

static mxp_status refuse(mxp_error *err, const char *what) {
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "training.device=cuda does not run %s; %s",
                         what, kAccepted);
}

static mxp_ds_kind ds_kind(mxp_layer_kind k) {
    switch (k) {
    case MXP_LAYER_LINEAR: return MXP_DS_LINEAR;
    case MXP_LAYER_RELU: return MXP_DS_RELU;
    case MXP_LAYER_GELU: return MXP_DS_GELU;
    case MXP_LAYER_TANH: return MXP_DS_TANH;
    case MXP_LAYER_LAYERNORM: return MXP_DS_LAYERNORM;
    default: return MXP_DS_KIND_COUNT;
    }
}

mxp_status trainer_device_spec(const mxp_trainer *t, int64_t batch, mxp_ds_spec *out,
                               mxp_error *err) {
    char what[160];
    mxp_model *m = t->model;
    const mxp_model_spec *ms = mxp_model_get_spec(m);
    const mxp_precision_policy *pol = mxp_model_policy(m);
    const mxp_trainer_config *c = &t->cfg;
    memset(out, 0, sizeof *out);
    if (t->comm && mxp_comm_size(t->comm) > 1) return refuse(err, "data-parallel ranks");
    if (c->optim.kind != MXP_OPTIM_ADAMW && c->optim.kind != MXP_OPTIM_SGD) {
        snprintf(what, sizeof what, "optimizer %s", mxp_optim_kind_name(c->optim.kind));
        return refuse(err, what);
    }
    if (t->ls) return refuse(err, "per-layer loss scaling (training.loss_scale.per_layer)");
    if (t->hook) return refuse(err, "a gradient hook");
    if (ms->ensemble > 1) return refuse(err, "an ensemble (model.ensemble > 1)");
    if (ms->loss != MXP_LOSS_MSE && ms->loss != MXP_LOSS_XENT) {
        snprintf(what, sizeof what, "loss %s", mxp_loss_kind_name(ms->loss));
        return refuse(err, what);
    }
    if (ms->termination) return refuse(err, "a termination head");
    if (ms->target_weights) return refuse(err, "per-target loss weights");
    if (ms->n_layers > MXP_DS_MAX_LAYERS) return refuse(err, "more than 64 layers");
    for (int l = 0; l < ms->n_layers; l++) {
        const mxp_layer_kind k = ms->layers[l].kind;
        if (ds_kind(k) == MXP_DS_KIND_COUNT) {
            const bool gpt = k == MXP_LAYER_EMBEDDING || k == MXP_LAYER_BLOCK ||
                             k == MXP_LAYER_LM_HEAD;
            snprintf(what, sizeof what, "layer %d (%s)%s", l, mxp_layer_kind_name(k),
                     gpt ? ": the GPT's embedding and attention are not on the device" : "");
            return refuse(err, what);
        }
        out->layers[l].kind = ds_kind(k);
        out->layers[l].units = ms->layers[l].units;
    }
    const mxp_precision p = pol->mode;
    if (p != MXP_PRECISION_FP32 && p != MXP_PRECISION_MIXED_BF16 &&
        p != MXP_PRECISION_MIXED_FP16 && p != MXP_PRECISION_FP8) {
        snprintf(what, sizeof what, "precision %s", mxp_precision_name(p));
        return refuse(err, what);
    }
    if (pol->fp16_accum_k) return refuse(err, "training.fp16_accumulate");
    if (pol->stochastic_update) return refuse(err, "stochastic rounding of the weights");
    if (nn_model_fp32_mask(m)) return refuse(err, "layers kept in FP32 (precision_fp32_layers)");
    out->in_dim = ms->in_dim;
    out->batch = batch;
    out->n_layers = ms->n_layers;
    out->loss = ms->loss == MXP_LOSS_XENT ? MXP_DS_XENT : MXP_DS_MSE;
    out->ln_eps = ms->layernorm_eps;
    out->lowp = p == MXP_PRECISION_MIXED_BF16 || p == MXP_PRECISION_FP8 ? MXP_DTYPE_BF16
                : p == MXP_PRECISION_MIXED_FP16                         ? MXP_DTYPE_F16
                                                                        : MXP_DTYPE_F32;
    /* fp8: BF16 storage, FP8 linear layers where cuBLASLt runs them (dstep_fp8.c) */
    out->fp8 = p == MXP_PRECISION_FP8;
    if (out->fp8) out->fp8_cfg = *mxp_fp8_scaling_config(mxp_model_fp8(m));
    out->lr = c->optim.lr;
    out->beta1 = c->optim.beta1;
    out->beta2 = c->optim.beta2;
    out->eps = c->optim.eps;
    out->weight_decay = c->optim.weight_decay;
    out->clip_max = c->clip_grad_norm;
    out->near_overflow_frac = c->near_overflow_frac;
    out->seed = c->seed;
    /* SGD as the CPU trainer's (momentum buffer in t->m, L2 weight decay) */
    out->optim = c->optim.kind == MXP_OPTIM_SGD ? MXP_DS_SGD : MXP_DS_ADAMW;
    out->momentum = c->optim.momentum;
    out->nesterov = c->optim.nesterov;
    /* the run's k micro-batches of equal rows, concatenated in order */
    out->micro_batches = c->grad_accum_steps > 1 ? c->grad_accum_steps : 1;
    /* the rule of the trainer's scaler (amp/scaler.c), its state set per step */
    const mxp_scaler_config *sc = mxp_scaler_get_config(t->scaler);
    const float min_f = (float)sc->min_scale;
    out->rule = (mxp_scaler_rule){sc->enabled,        sc->growth_factor,
                                  sc->backoff_factor, sc->growth_interval,
                                  sc->hysteresis,     min_f > FLT_MIN ? min_f : FLT_MIN,
                                  sc->max_scale};
    mxp_scaler_state ss;
    mxp_scaler_get_state(t->scaler, &ss);
    out->scaler0 = (mxp_scaler_rule_state){ss.scale,          ss.growth_tracker,
                                           ss.hysteresis_left, ss.overflow_steps,
                                           ss.total_steps,    ss.steps_at_min};
    return MXP_OK;
}

static mxp_status dev_error(mxp_error *err, const trainer_device *d, const char *what,
                            const char *why) {
    return mxp_error_set(err, MXP_ERR_IO, "training.device=cuda (%s): %s: %s", d->ops->name,
                         what, why);
}

/* The optimizer slabs the plan holds: AdamW m and v, SGD its momentum
 * buffer (none at momentum 0). */
static int n_moments(const mxp_trainer *t) {
    if (t->cfg.optim.kind == MXP_OPTIM_ADAMW) return 2;
    return t->cfg.optim.momentum > 0.0f ? 1 : 0;
}

/* Host copy -> device (params, m, v); the counters travel per step. */
static mxp_status push(mxp_trainer *t, mxp_error *err) {
    trainer_device *d = t->dv;
    const size_t P = t->n_params, nb = P * sizeof(float);
    char why[256] = "";
    d->busy = true;
    mxp_status s = mxp_model_tensor_get(t->model, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, d->buf,
                                        nb, err);
    if (s == MXP_OK && mxp_ds_put(d->plan, MXP_DS_MASTER, d->buf, why, sizeof why))
        s = dev_error(err, d, "upload of the parameters", why);
    const float *mom[2] = {t->m, t->v};
    const mxp_ds_slab slab[2] = {MXP_DS_M, MXP_DS_V};
    for (int i = 0; i < n_moments(t) && s == MXP_OK; i++) {
        mxp_dev_download(d->buf, mom[i], nb);
        if (mxp_ds_put(d->plan, slab[i], d->buf, why, sizeof why))
            s = dev_error(err, d, "upload of the optimizer state", why);
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
        s = dev_error(err, d, "download of the parameters", why);
    else /* the master, and the work copy rounded from it as the device did */
        s = mxp_model_tensor_set(t->model, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, d->buf, nb, err);
    float *mom[2] = {t->m, t->v};
    const mxp_ds_slab slab[2] = {MXP_DS_M, MXP_DS_V};
    for (int i = 0; i < n_moments(t) && s == MXP_OK; i++) {
        if (mxp_ds_get(d->plan, slab[i], d->buf, why, sizeof why))
            s = dev_error(err, d, "download of the optimizer state", why);
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

void trainer_device_host_wrote(mxp_trainer *t) {
    if (t && t->dv && !t->dv->busy) t->dv->dev_stale = true;
}

bool trainer_device_attached(const mxp_trainer *t) { return t && t->dv; }

void trainer_device_get_stats(const mxp_trainer *t, trainer_device_stats *out) {
    memset(out, 0, sizeof *out);
    if (t && t->dv) *out = t->dv->st;
}

/* the model's callbacks (nn/model_sync.h) */
static mxp_status model_pull(void *user, mxp_error *err) { return trainer_device_pull(user, err); }
static mxp_status model_wrote(void *user, mxp_error *err) {
    (void)err;
    trainer_device_host_wrote(user);
    return MXP_OK;
}

/* (Re)plan for `batch` rows; the state follows by a push. */
static mxp_status plan(mxp_trainer *t, int64_t batch, mxp_error *err) {
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
    mxp_status s = plan(t, batch, err);
    if (s == MXP_OK) s = push(t, err);
    if (s != MXP_OK) {
        trainer_device_detach(t);
        return s;
    }
    nn_model_set_sync(t->model, model_pull, model_wrote, t);
    return MXP_OK;
}

void trainer_device_detach(mxp_trainer *t) {
    trainer_device *d = t ? t->dv : NULL;
    if (!d) return;
    if (d->plan) (void)trainer_device_pull(t, NULL);
    nn_model_set_sync(t->model, NULL, NULL, NULL);
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

/* The host-side bookkeeping of a finished device step (trainer.c's step
 * body after its report, for one process). */
static mxp_status account(mxp_trainer *t, const mxp_ds_result *dr, mxp_step_result *res,
                          mxp_error *err) {
    trainer_device *d = t->dv;
    mxp_ds_state ds;
    mxp_ds_get_state(d->plan, &ds);
    res->loss = dr->loss;
    res->skipped = dr->skipped;
    res->scale = dr->scale;
    res->grad_norm = dr->grad_norm;
    res->nonfinite = dr->nonfinite;
    if (dr->scanned && dr->site.found) { /* the CPU model's provenance (nn/slots.c) */
        const mxp_model_spec *ms = mxp_model_get_spec(t->model);
        const int l = dr->site.layer;
        res->site.found = true;
        res->site.backward = dr->site.backward;
        res->site.layer = l;
        res->site.op = l >= 0 && l < ms->n_layers ? mxp_layer_kind_name(ms->layers[l].kind)
                                                  : mxp_loss_kind_name(ms->loss);
        res->site.count = dr->site.count > 0 ? dr->site.count : 1;
    }
    res->zero_frac = ds.stats.n ? (double)ds.stats.zeros / (double)ds.stats.n : 0.0;
    res->near_overflow_frac =
        ds.stats.n ? (double)ds.stats.near_overflow / (double)ds.stats.n : 0.0;
    t->be->ctl.opt_steps = ds.opt_steps; /* the counters as the report left them */
    t->be->ctl.sr_counter = ds.sr_counter;
    t->be->ctl.stats = ds.stats;
    t->training_steps++;
    if (dr->skipped) t->skipped_steps++;
    /* the device's rule state and event, adopted as the CPU path does
     * (amp/scaler_internal.h): the host applies only its at-min policy
     * and log. The cheap check: the adopted scale is the one reported. */
    mxp_scaler_event ev;
    mxp_status us = mxp_scaler_adopt(t->scaler, &ds.scaler, &ds.event, &ev, err);
    if (dr->skipped && res->site.found)
        mxp_log(MXP_LOG_WARN,
                "step %lld skipped: %lld non-finite gradients; first non-finite in %s pass, "
                "layer %d (%s); loss scale %g -> %g",
                (long long)t->training_steps, (long long)dr->nonfinite,
                res->site.backward ? "backward" : "forward", res->site.layer, res->site.op,
                ev.old_scale, ev.new_scale);
    else if (dr->skipped)
        mxp_log(MXP_LOG_WARN,
                "step %lld skipped: %lld non-finite gradients (loss %g); loss scale %g -> %g",
                (long long)t->training_steps, (long long)dr->nonfinite, dr->loss, ev.old_scale,
                ev.new_scale);
    mxp_history_row row = {t->training_steps, t->epoch, res->loss, res->scale, res->grad_norm,
                           res->skipped, mxp_model_policy(t->model)->mode};
    if (trainer_push_history(t, &row) != MXP_OK)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "training history");
    if (us != MXP_OK) return us;
    if (mxp_scaler_scale(t->scaler) != dr->next_scale)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "training.device=cuda: the device's loss scale after step %lld "
                             "(%g) differs from its reported rule state's (%g): the report is "
                             "inconsistent",
                             (long long)t->training_steps, (double)dr->next_scale,
                             (double)mxp_scaler_scale(t->scaler));
    if (ev.fallback) { /* a request: the step controller switches at the boundary */
        const mxp_precision to = mxp_precision_fallback_next(d->mode);
        res->fallback = true;
        mxp_log(MXP_LOG_WARN,
                "loss scale stuck at its minimum %g: falling back from %s to %s", ev.new_scale,
                mxp_precision_name(d->mode), mxp_precision_name(to));
        return step_ctl_request(t, to, STEP_SRC_SCALER, "loss scale stuck at its minimum", err);
    }
    return MXP_OK;
}

mxp_status trainer_device_step(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                               mxp_step_result *res, mxp_error *err) {
    trainer_device *d = t->dv;
    memset(res, 0, sizeof *res);
    const int k = t->cfg.grad_accum_steps > 1 ? t->cfg.grad_accum_steps : 1;
    int64_t total = 0;
    for (int i = 0; micro && i < n_micro; i++) total += micro[i].B > 0 ? micro[i].B : 0;
    if (!micro || n_micro != k || total < k)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_trainer_step on training.device=cuda: %d micro-batches; "
                             "accepted: grad_accum_steps=%d of B >= 1", n_micro, k);
    const mxp_precision now = mxp_model_policy(t->model)->mode;
    mxp_status s;
    /* a precision switch at the boundary (the step controller switched the
     * host model, which pulled the record first, and restarted the host
     * scaler): re-plan for the new mode, then the push below carries the
     * master, m, v and the set_state the restarted scaler */
    if (now != d->mode && (s = plan(t, d->batch, err)) != MXP_OK) return s;
    if (total != d->batch && (s = plan(t, total, err)) != MXP_OK) return s;
    for (int i = 0; i < n_micro; i++)
        if (micro[i].B != mxp_ds_micro_rows(d->plan, i))
            return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                                 "training.device=cuda: micro-batch %d has %lld rows; the device "
                                 "step splits %lld rows into %d in order (accepted: %lld)",
                                 i, (long long)micro[i].B, (long long)total, k,
                                 (long long)mxp_ds_micro_rows(d->plan, i));
    const float *x = micro[0].x, *y = micro[0].y;
    const int32_t *lab = micro[0].labels;
    if (k > 1) { /* the rows in order, as the device splits them */
        const int64_t in = mxp_model_get_spec(t->model)->in_dim;
        int64_t r = 0;
        for (int i = 0; i < n_micro; i++) {
            const size_t B = (size_t)micro[i].B;
            memcpy(d->xs + r * in, micro[i].x, B * (size_t)in * sizeof(float));
            if (micro[i].y)
                memcpy(d->ys + r * d->out_dim, micro[i].y, B * (size_t)d->out_dim * sizeof(float));
            if (micro[i].labels) memcpy(d->ls + r, micro[i].labels, B * sizeof(int32_t));
            r += micro[i].B;
        }
        x = d->xs;
        y = micro[0].y ? d->ys : NULL;
        lab = micro[0].labels ? d->ls : NULL;
    }
    if (t->hook || t->ls || (t->comm && mxp_comm_size(t->comm) > 1)) {
        mxp_ds_spec sp; /* set after attaching: named by the spec's checks */
        return trainer_device_spec(t, d->batch, &sp, err);
    }
    if (d->dev_stale && (s = push(t, err)) != MXP_OK) return s;
    /* the host's state (a resume, a rollback, a schedule wrote it) into the plan */
    mxp_ds_state ds;
    memset(&ds, 0, sizeof ds);
    ds.opt_steps = t->be->ctl.opt_steps;
    ds.sr_counter = t->be->ctl.sr_counter;
    ds.scaler = mxp_scaler_rule_state_of(t->scaler);
    ds.lr = t->cfg.optim.lr;
    mxp_ds_set_state(d->plan, &ds);
    const double t0 = mxp_time_now();
    mxp_ds_result dr;
    char why[256] = "";
    if (mxp_ds_step(d->plan, x, y, lab, &dr, why, sizeof why))
        return dev_error(err, d, "the step", why);
    t->time_s[0] += mxp_time_now() - t0; /* the whole step: the device reports no phases */
    d->host_stale = true;
    d->st.steps++;
    if (dr.d2h > d->st.step_d2h_max) d->st.step_d2h_max = dr.d2h;
    return account(t, &dr, res, err);
}
