/* train/trainer_device_spec.c: the one place that maps a trainer's model,
 * policy and config onto the device step's spec (mxp_ds_spec), and names
 * what the device cannot run (contract: train/trainer_device.h).
 *
 * Entry point: trainer_device_spec.
 */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "amp/scaler_internal.h"
#include "nn/model_sync.h"
#include "train/trainer_device_fp8.h"
#include "train/trainer_device_internal.h"
#include "train/trainer_internal.h"

static const char kAccepted[] =
    "accepted on training.device=cuda: an MLP of linear, relu, gelu, tanh, layernorm layers "
    "with loss mse or xent, precision fp32, mixed_bf16, mixed_fp16 or fp8, optimizer adamw or "
    "sgd, "
    "any grad_accum_steps (equal micro-batches), one process";

static mxp_status refuse(mxp_error *err, const char *what) {
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "training.device=cuda does not run %s; %s",
                         what, kAccepted);
}

mxp_ds_kind trainer_device_ds_kind(mxp_layer_kind k) {
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
        if (trainer_device_ds_kind(k) == MXP_DS_KIND_COUNT) {
            const bool gpt = k == MXP_LAYER_EMBEDDING || k == MXP_LAYER_BLOCK ||
                             k == MXP_LAYER_LM_HEAD;
            snprintf(what, sizeof what, "layer %d (%s)%s", l, mxp_layer_kind_name(k),
                     gpt ? ": the GPT's embedding and attention are not on the device" : "");
            return refuse(err, what);
        }
        out->layers[l].kind = trainer_device_ds_kind(k);
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
    if (out->fp8) out->fp8_cfg = trainer_device_fp8_cfg(mxp_fp8_scaling_config(mxp_model_fp8(m)));
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

