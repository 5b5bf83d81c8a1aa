/* src/config/resolve.c: turn the builder's values into an mxp_config.
 *
 * Precision (config.h): the kill switch forces fp32; else an explicitly set
 * training.precision is the mode; else training.mixed_precision.enabled
 * picks mixed_bf16 / mixed_fp16 by dtype; else fp32 (safe default).
 * Cross-field rules: min_scale <= init <= max_scale, the model's layer
 * count fits MXP_MODEL_MAX_LAYERS, and mxp_scaler_config_validate (amp).
 * Entry points: mxp_config_resolve; internal mxp_config_resolve_precision,
 * mxp_config_source_text.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#include <float.h>
#include <math.h>

/* A workload's config name (model.workload). */
static const char *wl_text(mxp_workload w) {
    switch (w) {
    case MXP_WORKLOAD_WORLD_MODEL: return "world_model";
    case MXP_WORKLOAD_CLASSIFIER: return "classifier";
    case MXP_WORKLOAD_GPT: return "gpt";
    default: return "regressor";
    }
}

static const mxp_key_value *val(const mxp_config_builder *b, const char *name) {
    return &b->vals[mxp_config_key_find(name)];
}

void mxp_config_source_text(const mxp_key_value *v, char *buf, size_t n) {
    const char *name = mxp_config_source_name(v->source);
    if (v->source == MXP_SRC_FILE && v->origin)
        snprintf(buf, n, "file:%s", v->origin);
    else if ((v->source == MXP_SRC_ENV || v->source == MXP_SRC_KILL_SWITCH) && v->origin)
        snprintf(buf, n, "%s:%s", v->source == MXP_SRC_ENV ? "env" : name, v->origin);
    else
        snprintf(buf, n, "%s", name);
}

void mxp_config_resolve_precision(const mxp_config_builder *b, mxp_precision_resolution *r) {
    const mxp_key_value *vp = val(b, "training.precision");
    const mxp_key_value *ve = val(b, "training.mixed_precision.enabled");
    const mxp_key_value *vd = val(b, "training.mixed_precision.dtype");
    mxp_precision req;
    memset(r, 0, sizeof *r);
    if (vp->source != MXP_SRC_DEFAULT && vp->e == MXP_PRECISION_AUTO_VALUE) {
        req = MXP_PRECISION_FP32; /* placeholder until the preflight chooses */
        r->automatic = true;
        r->source = vp->source;
        r->origin = vp->origin;
        snprintf(r->why, sizeof r->why,
                 "training.precision=auto: the preflight chooses at start (fp32 until then)");
    } else if (vp->source != MXP_SRC_DEFAULT) {
        req = (mxp_precision)vp->e;
        r->source = vp->source;
        r->origin = vp->origin;
        snprintf(r->why, sizeof r->why, "training.precision=%s", mxp_precision_name(req));
    } else if (ve->b) {
        bool f16 = vd->e == MXP_DTYPE_F16;
        req = f16 ? MXP_PRECISION_MIXED_FP16 : MXP_PRECISION_MIXED_BF16;
        /* The later of the two deciding values names the source. */
        const mxp_key_value *decider = vd->source > ve->source ? vd : ve;
        r->source = decider->source;
        r->origin = decider->origin;
        snprintf(r->why, sizeof r->why,
                 "training.mixed_precision.enabled=true, training.mixed_precision.dtype=%s",
                 f16 ? "float16" : "bfloat16");
    } else {
        req = MXP_PRECISION_FP32;
        r->source = ve->source;
        r->origin = ve->origin;
        snprintf(r->why, sizeof r->why, "%s",
                 ve->source == MXP_SRC_DEFAULT
                     ? "mixed precision disabled: safe default"
                     : "training.mixed_precision.enabled=false");
    }
    r->mode = req;
    if (b->kill_switch) {
        const bool was_auto = r->automatic;
        r->automatic = false;
        r->mode = MXP_PRECISION_FP32;
        r->source = MXP_SRC_KILL_SWITCH;
        r->origin = b->kill_var;
        snprintf(r->why, sizeof r->why, "%s=%s forces FP32; the config asked for %s",
                 b->kill_var ? b->kill_var : "kill switch", b->kill_text,
                 was_auto ? "auto" : mxp_precision_name(req));
    }
}

bool mxp_config_default_loss_scaling(mxp_precision mode) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    return pol.loss_scaling;
}

/* "key=value (source)" for cross-field messages. */
static void describe(const mxp_config_builder *b, const char *name, char *buf, size_t n) {
    int i = mxp_config_key_find(name);
    char v[64], src[240];
    mxp_config_value_format(mxp_config_key_at(i), &b->vals[i], v, sizeof v);
    mxp_config_source_text(&b->vals[i], src, sizeof src);
    snprintf(buf, n, "%s=%s (%.200s)", name, v, src);
}

static mxp_status cross_check(const mxp_config_builder *b, const mxp_config *c, mxp_error *err) {
    char l[320], r[320];
    const mxp_scaler_config *s = &c->trainer.scaler;
    if (s->min_scale > s->init_scale) {
        describe(b, "training.loss_scale.min_scale", l, sizeof l);
        describe(b, "training.loss_scale.init", r, sizeof r);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s must be <= %s", l, r);
    }
    if (s->init_scale > s->max_scale) {
        describe(b, "training.loss_scale.init", l, sizeof l);
        describe(b, "training.loss_scale.max_scale", r, sizeof r);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s must be <= %s", l, r);
    }
    if (c->eval_every > 0 && c->eval_every_steps > 0) {
        describe(b, "training.eval_every", l, sizeof l);
        describe(b, "training.eval_every_steps", r, sizeof r);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s and %s: validation is every N epochs or every N steps; "
                             "accepted: one of them >= 1, the other 0", l, r);
    }
    if (c->early_stop_patience > 0 && c->eval_every == 0 && c->eval_every_steps == 0) {
        describe(b, "training.early_stop.patience", l, sizeof l);
        describe(b, "training.eval_every", r, sizeof r);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s monitors the validation loss, which %s does not measure; "
                             "accepted: training.eval_every >= 1 (epochs between validations) "
                             "or training.eval_every_steps >= 1 with early stopping, or "
                             "training.early_stop.patience=0 (off)",
                             l, r);
    }
    int64_t per = c->layernorm ? 3 : 2;
    if (c->depth * per + 1 > MXP_MODEL_MAX_LAYERS) {
        describe(b, "model.depth", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: with model.layernorm=%s the model needs %lld layers; at most %d "
                             "(model.depth <= %d)",
                             l, c->layernorm ? "true" : "false", (long long)(c->depth * per + 1),
                             MXP_MODEL_MAX_LAYERS, (int)((MXP_MODEL_MAX_LAYERS - 1) / per));
    }
    mxp_error sub;
    mxp_error_clear(&sub);
    mxp_device dev;
    if (mxp_device_parse(c->device_text, &dev, &sub) != MXP_OK) {
        describe(b, "training.device", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s: %s", l, sub.msg);
    }
    mxp_fp32_layers sel;
    if (mxp_fp32_layers_parse(c->fp32_layers_text, &sel, &sub) != MXP_OK) {
        describe(b, "training.precision_fp32_layers", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s: %s", l, sub.msg);
    }
    /* pure 16-bit modes keep no FP32 master for a kept layer to compute
     * from: a config conflict, found before anything is built or written */
    if (!mxp_fp32_layers_none(&sel) && !c->kill_switch && !c->precision_auto &&
        (c->precision == MXP_PRECISION_BF16 || c->precision == MXP_PRECISION_FP16)) {
        describe(b, "training.precision_fp32_layers", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s needs an FP32 master copy, which training.precision=%s does "
                             "not keep; accepted: training.precision_fp32_layers=none, or "
                             "training.precision=mixed_bf16|mixed_fp16|fp8", l,
                             mxp_precision_name(c->precision));
    }
    if (strcmp(c->layers, "none") != 0) {
        mxp_model_spec spec;
        describe(b, "model.layers", l, sizeof l);
        if (c->workload == MXP_WORKLOAD_GPT)
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "%s: not used by model.workload=gpt (gpt.layers, gpt.embd shape "
                                 "it); accepted: none, or a list with world_model, classifier, "
                                 "regressor",
                                 l);
        if (mxp_model_spec_layers(c->layers, 1, 0, MXP_LOSS_MSE, 1, &spec, &sub) != MXP_OK)
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s: %s", l, sub.msg);
        /* model.layers sets every layer: a shape key off its default would
         * be ignored without a word (by value, not source: a resume applies
         * every stored key) */
        static const char *const shape_keys[] = {"model.hidden", "model.depth",
                                                 "model.activation", "model.layernorm"};
        for (size_t j = 0; j < sizeof shape_keys / sizeof shape_keys[0]; j++) {
            const int i = mxp_config_key_find(shape_keys[j]);
            const mxp_config_key *k = mxp_config_key_at(i);
            mxp_key_value dv;
            mxp_config_value_default(k, &dv);
            char now[64], def[64];
            mxp_config_value_format(k, &b->vals[i], now, sizeof now);
            mxp_config_value_format(k, &dv, def, sizeof def);
            if (strcmp(now, def) != 0) {
                describe(b, shape_keys[j], r, sizeof r);
                return mxp_error_set(err, MXP_ERR_CONFIG,
                                     "%s has no effect beside %s, which sets every layer; "
                                     "accepted: one of the two (model.layers=none shapes the MLP "
                                     "from model.hidden, depth, activation and layernorm)",
                                     r, l);
            }
        }
    }
    if (c->head == MXP_LOSS_GAUSSIAN && c->workload != MXP_WORKLOAD_WORLD_MODEL &&
        c->workload != MXP_WORKLOAD_REGRESSOR) {
        describe(b, "model.head", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: a Gaussian head predicts real-valued targets; accepted: "
                             "model.head=deterministic with model.workload=%s, gaussian with "
                             "world_model or regressor",
                             l, c->workload == MXP_WORKLOAD_GPT ? "gpt" : "classifier");
    }
    if (c->termination && c->workload != MXP_WORKLOAD_WORLD_MODEL) {
        describe(b, "model.termination", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: a termination flag is predicted by world models only; "
                             "accepted: model.termination=false with model.workload=%s",
                             l, wl_text(c->workload));
    }
    if (strcmp(c->target_weights, "none") != 0) {
        describe(b, "model.target_weights", l, sizeof l);
        if (c->workload != MXP_WORKLOAD_WORLD_MODEL && c->workload != MXP_WORKLOAD_REGRESSOR)
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "%s: per-target loss weights are for regression; accepted: "
                                 "model.target_weights=none with model.workload=%s",
                                 l, wl_text(c->workload));
        mxp_status ws = mxp_model_target_weights_parse(c->target_weights, 0, NULL, NULL, NULL,
                                                       err); /* the length: at model build */
        if (ws != MXP_OK) return ws;
    }
    if (c->ensemble > 1 && c->workload != MXP_WORKLOAD_WORLD_MODEL &&
        c->workload != MXP_WORKLOAD_REGRESSOR) {
        describe(b, "model.ensemble", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: ensembles are built for regression; accepted: "
                             "model.ensemble=1 with model.workload=%s, 1..%d with world_model or "
                             "regressor",
                             l, c->workload == MXP_WORKLOAD_GPT ? "gpt" : "classifier",
                             MXP_MODEL_MAX_ENSEMBLE);
    }
    if (c->elites > (c->ensemble > 1 ? c->ensemble : 1)) {
        describe(b, "model.elites", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: more elites than the %lld members of model.ensemble; "
                             "accepted: 1..%lld, or 0 (all members)",
                             l, (long long)(c->ensemble > 1 ? c->ensemble : 1),
                             (long long)(c->ensemble > 1 ? c->ensemble : 1));
    }
    bool has_path = strcmp(c->wl.data_path, "none") != 0;
    if (has_path && c->workload == MXP_WORKLOAD_GPT) {
        describe(b, "data.path", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: model.workload=gpt reads data.text_file; accepted: data.path "
                             "with world_model, classifier or regressor",
                             l);
    }
    /* the regressor's data may come from memory (mxp_run_options.data):
     * mxp_run_create refuses a regressor run without either */
    if (strcmp(c->init_from, "none") != 0 && c->workload == MXP_WORKLOAD_GPT) {
        describe(b, "model.init_from", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: not supported by model.workload=gpt; accepted: none, or a file "
                             "with world_model, classifier, regressor",
                             l);
    }
    if (c->fp16_accumulate && !c->kill_switch && c->precision != MXP_PRECISION_FP16 &&
        c->precision != MXP_PRECISION_MIXED_FP16) {
        describe(b, "training.fp16_accumulate", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s needs FP16 matmul operands but training.precision is %s; "
                             "accepted: training.fp16_accumulate=fp32, or fp16 with "
                             "training.precision=fp16|mixed_fp16",
                             l, c->precision_auto ? "auto" : mxp_precision_name(c->precision));
    }
    if (c->fp16_accumulate && c->workload == MXP_WORKLOAD_GPT) {
        describe(b, "training.fp16_accumulate", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: not supported by model.workload=gpt; accepted: fp32, or "
                             "fp16 with the world_model and classifier workloads", l);
    }
    /* name the key and where its value came from (FP16_LOSS_SCALE=1e-45 is
     * the environment's, not the command line's) */
    if (!(s->init_scale >= FLT_MIN && s->init_scale <= FLT_MAX)) {
        describe(b, "training.loss_scale.init", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: the loss scale is kept in a float; accepted: %g..%g", l,
                             (double)FLT_MIN, (double)FLT_MAX);
    }
    if (!(s->growth_factor > 1) || !isfinite(s->growth_factor)) {
        describe(b, "training.loss_scale.growth_factor", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s; accepted: finite, > 1", l);
    }
    if (!(s->backoff_factor > 0 && s->backoff_factor < 1)) {
        describe(b, "training.loss_scale.backoff_factor", l, sizeof l);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s; accepted: (0, 1)", l);
    }
    if (mxp_scaler_config_validate(s, &sub) != MXP_OK)
        return mxp_error_set(err, MXP_ERR_CONFIG, "training.loss_scale: %s", sub.msg);
    return MXP_OK;
}

mxp_status mxp_config_resolve(mxp_config_builder *b, mxp_config *out, mxp_error *err) {
    if (!b || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "config resolve: NULL argument");
    mxp_config c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < b->n; i++) mxp_config_value_store(mxp_config_key_at(i), &b->vals[i], &c);

    mxp_precision_resolution r;
    mxp_config_resolve_precision(b, &r);
    c.precision = r.mode;
    c.precision_auto = r.automatic;
    c.kill_switch = b->kill_switch;
    c.trainer.seed = c.seed;
    c.data.seed = c.seed;
    c.trainer.grad_accum_steps = (int)c.grad_accum_steps; /* key range <= INT32_MAX */
    const mxp_key_value *vs = val(b, "training.loss_scale.enabled");
    if (vs->source != MXP_SRC_DEFAULT) {
        c.trainer.scaler.enabled = vs->b;
        c.trainer.scaler_override = true;
    } else {
        c.trainer.scaler.enabled = mxp_config_default_loss_scaling(c.precision);
        c.trainer.scaler_override = false;
    }

    mxp_status st = cross_check(b, &c, err);
    if (st != MXP_OK) return st;
    mxp_error ignore; /* cross_check parsed it already: cannot fail here */
    (void)mxp_fp32_layers_parse(c.fp32_layers_text, &c.fp32_layers, &ignore);
    (void)mxp_device_parse(c.device_text, &c.device, &ignore);
    if (b->kill_switch) c.fp16_accumulate = 0; /* FP32 forced: no FP16 operands */
    if (b->kill_switch) mxp_log(MXP_LOG_WARN, "FP16 training disabled - using FP32");
    *out = c;
    return MXP_OK;
}
