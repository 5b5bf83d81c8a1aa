/* nn/model.c: model construction, slabs, tensor table, precision switch.
 *
 * Entry points: mxp_model_spec_mlp, mxp_model_create/_destroy,
 * mxp_model_set_policy, mxp_model_set_fp32_layers (per-layer FP32
 * override: nn_plan_bufs, model_plan.c, stores a kept layer's x, y and dY in FP32 and
 * nn_layer_weights hands it the FP32 master), the slab accessors,
 * mxp_model_memory_usage, and the layer/loss kind names. The slab layout
 * follows llm.c's train_gpt2.c: a size table (one entry per named tensor)
 * carves the flat master / work / grad slabs; every activation-sized
 * buffer is carved from one arena planned for max_batch at create (see
 * nn_internal.h). Parameter init follows
 * PyTorch nn.Linear.reset_parameters (bound 1/sqrt(fan_in) for weight and
 * bias) and nn.LayerNorm (gamma 1, beta 0). Gradients: zeroed
 * (mxp_model_zero_grads) or discarded (mxp_model_discard_grads: the next
 * backward writes them, model_step.c; nn_grad_beta in nn_internal.h).
 */
#include "backend/devmem.h"
#include "nn/model_sync.h"
#include "nn/nn_internal.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const layer_kind_names[] = {
    "linear", "relu", "gelu", "tanh", "layernorm", "embedding", "block", "lm_head",
    "residual", "dropout",
};
static_assert(sizeof layer_kind_names / sizeof layer_kind_names[0] ==
                  MXP_LAYER_KIND_COUNT,
              "layer kind name table out of sync");

static const char *const loss_kind_names[] = {"mse", "xent", "gaussian"};
static_assert(sizeof loss_kind_names / sizeof loss_kind_names[0] ==
                  MXP_LOSS_KIND_COUNT,
              "loss kind name table out of sync");

const char *mxp_layer_kind_name(mxp_layer_kind k) {
    if ((unsigned)k >= MXP_LAYER_KIND_COUNT) return "unknown";
    return layer_kind_names[k];
}

const char *mxp_loss_kind_name(mxp_loss_kind k) {
    if ((unsigned)k >= MXP_LOSS_KIND_COUNT) return "unknown";
    return loss_kind_names[k];
}

/* nn_internal.h */
mxp_model_spec nn_spec_empty(int64_t in_dim, mxp_loss_kind loss, int64_t max_batch) {
    mxp_model_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = in_dim;
    s.max_batch = max_batch;
    s.loss = loss;
    s.layernorm_eps = 1e-5f;
    return s;
}

/* depth x (linear(hidden) -> [layernorm] -> act) then linear(out_dim). A
 * depth that needs more than MXP_MODEL_MAX_LAYERS layers yields a spec whose
 * n_layers says how many were asked for, so create rejects it by name. */
mxp_model_spec mxp_model_spec_mlp(int64_t in_dim, int64_t hidden, int depth,
                                  int64_t out_dim, mxp_layer_kind act,
                                  bool layernorm, mxp_loss_kind loss,
                                  int64_t max_batch) {
    mxp_model_spec s = nn_spec_empty(in_dim, loss, max_batch);
    if (depth < 0) {
        s.n_layers = 0;
        return s;
    }
    int64_t per = layernorm ? 3 : 2;
    int64_t want = (int64_t)depth * per + 1;
    int n = 0;
    for (int d = 0; d < depth && n + per + 1 <= MXP_MODEL_MAX_LAYERS; d++) {
        s.layers[n].kind = MXP_LAYER_LINEAR;
        s.layers[n++].units = hidden;
        if (layernorm) s.layers[n++].kind = MXP_LAYER_LAYERNORM;
        s.layers[n++].kind = act;
    }
    if (want <= MXP_MODEL_MAX_LAYERS) {
        s.layers[n].kind = MXP_LAYER_LINEAR;
        s.layers[n++].units = out_dim;
        s.n_layers = n;
    } else {
        s.n_layers = want > 1000000 ? 1000000 : (int)want;
    }
    return s;
}

/* ---- validation ---------------------------------------------------------- */

static mxp_status check_dtype(const char *field, mxp_dtype t, mxp_error *err) {
    if ((unsigned)t >= MXP_DTYPE_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "policy %s: dtype %d unknown; accepted: 0..%d "
                             "(f32, bf16, f16, f8_e4m3, f8_e5m2)",
                             field, (int)t, MXP_DTYPE_COUNT - 1);
    return MXP_OK;
}

/* Every dtype of a policy must be a known one (the model plans by size). */
static mxp_status validate_policy(const mxp_precision_policy *p, mxp_error *err) {
    if (!p)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "policy is NULL; accepted: a filled "
                             "mxp_precision_policy (mxp_precision_policy_default)");
    if ((unsigned)p->mode >= MXP_PRECISION_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "policy mode %d unknown; accepted: 0..%d",
                             (int)p->mode, MXP_PRECISION_COUNT - 1);
    mxp_status s;
    if ((s = check_dtype("weight", p->weight, err))) return s;
    if ((s = check_dtype("activation", p->activation, err))) return s;
    if ((s = check_dtype("grad", p->grad, err))) return s;
    for (int c = 0; c < MXP_OP_CLASS_COUNT; c++) {
        if ((s = check_dtype("ops[].input", p->ops[c].input, err))) return s;
        if ((s = check_dtype("ops[].output", p->ops[c].output, err))) return s;
    }
    bool f16_mode = p->mode == MXP_PRECISION_FP16 || p->mode == MXP_PRECISION_MIXED_FP16;
    if (p->fp16_accum_k != 0 && (!f16_mode || p->fp16_accum_k < 1 || p->fp16_accum_k > 4096))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "policy fp16_accum_k=%d in mode %s; accepted: 0, or 1..4096 in "
                             "modes fp16 and mixed_fp16",
                             p->fp16_accum_k, mxp_precision_name(p->mode));
    return MXP_OK;
}

/* Spec rules: dims >= 1, n_layers in [1, 64], known kinds, linear units >= 1,
 * last layer linear, known loss, XENT needs out_dim >= 2, layernorm eps > 0. */
static mxp_status validate_spec(const mxp_model_spec *s, mxp_error *err) {
    if (!s)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec is NULL; accepted: an mxp_model_spec");
    if (s->in_dim < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.in_dim=%lld; accepted: >= 1",
                             (long long)s->in_dim);
    if (s->max_batch < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.max_batch=%lld; accepted: >= 1",
                             (long long)s->max_batch);
    if (s->n_layers < 1 || s->n_layers > MXP_MODEL_MAX_LAYERS)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.n_layers=%d; accepted: 1..%d", s->n_layers,
                             MXP_MODEL_MAX_LAYERS);
    bool has_ln = false;
    for (int i = 0; i < s->n_layers; i++) {
        const mxp_layer_spec *ls = &s->layers[i];
        if ((unsigned)ls->kind >= MXP_LAYER_KIND_COUNT)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d].kind=%d unknown; accepted: "
                                 "linear, relu, gelu, tanh, layernorm, embedding, "
                                 "block, lm_head, residual, dropout (0..%d)",
                                 i, (int)ls->kind, MXP_LAYER_KIND_COUNT - 1);
        if (ls->kind == MXP_LAYER_LINEAR && ls->units < 1)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d].units=%lld (linear); "
                                 "accepted: >= 1",
                                 i, (long long)ls->units);
        if (ls->kind == MXP_LAYER_LAYERNORM || ls->kind == MXP_LAYER_BLOCK) has_ln = true;
    }
    const mxp_layer_spec *last = &s->layers[s->n_layers - 1];
    if (last->kind != MXP_LAYER_LINEAR && last->kind != MXP_LAYER_LM_HEAD)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.layers[%d].kind=%s: the last layer must be "
                             "linear or lm_head (it produces the loss input)",
                             s->n_layers - 1, mxp_layer_kind_name(last->kind));
    mxp_status es = nn_ext_validate(s, err);
    if (es != MXP_OK) return es;
    if (s->ensemble < 0 || s->ensemble > MXP_MODEL_MAX_ENSEMBLE)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.ensemble=%d; accepted: 0..%d (0 and 1: one model)",
                             s->ensemble, MXP_MODEL_MAX_ENSEMBLE);
    for (int i = 0; s->ensemble > 1 && i < s->n_layers; i++)
        if (nn_kind_is_ext(s->layers[i].kind))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.ensemble=%d with a %s layer; accepted: ensembles of MLP "
                                 "layers (linear, relu, gelu, tanh, layernorm, residual, "
                                 "dropout)",
                                 s->ensemble, mxp_layer_kind_name(s->layers[i].kind));
    if ((unsigned)s->loss >= MXP_LOSS_KIND_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.loss=%d unknown; accepted: mse, xent, gaussian (0..%d)",
                             (int)s->loss, MXP_LOSS_KIND_COUNT - 1);
    if (s->loss == MXP_LOSS_XENT && last->kind == MXP_LAYER_LINEAR &&
        (last->units < 2 || last->units > INT32_MAX))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec: loss xent needs out_dim (last layer units) "
                             "in [2, %d]; got %lld",
                             INT32_MAX, (long long)last->units);
    if (s->loss == MXP_LOSS_GAUSSIAN && !s->termination &&
        (last->kind != MXP_LAYER_LINEAR || last->units < 2 || last->units % 2 != 0))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec: loss gaussian needs a last linear layer of 2D units (mean "
                             "and log-variance of D targets); got %s with %lld units",
                             mxp_layer_kind_name(last->kind), (long long)last->units);
    mxp_status hs = nn_head_validate(s, err); /* termination, target weights */
    if (hs != MXP_OK) return hs;
    if (has_ln && !(s->layernorm_eps > 0.0f && isfinite(s->layernorm_eps)))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.layernorm_eps=%g; accepted: finite and > 0 "
                             "(1e-5 is the PyTorch default)",
                             (double)s->layernorm_eps);
    return MXP_OK;
}

/* ---- structure: layers, widths, size table ------------------------------- */

/* Fill layers, widths and the tensor table from m->spec; P overflow-checked. */
static mxp_status build_structure(mxp_model *m, mxp_error *err) {
    const mxp_model_spec *s = &m->spec;
    int64_t w = s->in_dim;
    size_t P = 0;
    m->n_layers = s->n_layers;
    m->width[0] = w;
    m->max_width = w;
    m->n_ln = 0;
    m->n_tensors = 0;
    m->n_fp8 = 0;
    for (int i = 0; i < s->n_layers; i++) {
        nn_layer *L = &m->layers[i];
        memset(L, 0, sizeof *L);
        L->kind = s->layers[i].kind;
        L->in = w;
        L->out = L->kind == MXP_LAYER_LINEAR ? s->layers[i].units : w;
        L->ln_slot = -1;
        L->fp8_slot = -1;
        if (nn_kind_is_ext(L->kind)) {
            mxp_status es = nn_ext_build(m, i, w, &P, err);
            if (es != MXP_OK) return es;
            w = L->out;
            m->width[i + 1] = w;
            if (w > m->max_width) m->max_width = w;
            continue;
        }
        if (L->kind == MXP_LAYER_LINEAR) {
            L->fp8_slot = m->n_fp8;
            m->n_fp8 += 3;
        }
        size_t wn = 0, bn = 0;
        if (L->kind == MXP_LAYER_LINEAR) {
            if (!mxp_size_mul((size_t)L->out, (size_t)L->in, &wn)) goto overflow;
            bn = (size_t)L->out;
        } else if (L->kind == MXP_LAYER_LAYERNORM) {
            wn = bn = (size_t)L->in;
            L->ln_slot = m->n_ln++;
        }
        if (wn) {
            L->w_off = P;
            if (!mxp_size_add(P, wn, &P)) goto overflow;
            L->b_off = P;
            if (!mxp_size_add(P, bn, &P)) goto overflow;
            L->n_params = wn + bn;
            for (int t = 0; t < 2; t++) {
                int ti = m->n_tensors++;
                mxp_tensor_info *ti_ = &m->tensors[ti];
                snprintf(m->names[ti], NN_NAME_MAX, "layers.%d.%s", i,
                         t == 0 ? "weight" : "bias");
                ti_->name = m->names[ti];
                ti_->offset = t == 0 ? L->w_off : L->b_off;
                ti_->count = t == 0 ? wn : bn;
                if (t == 0 && L->kind == MXP_LAYER_LINEAR) {
                    ti_->ndim = 2;
                    ti_->shape[0] = L->out;
                    ti_->shape[1] = L->in;
                } else {
                    ti_->ndim = 1;
                    ti_->shape[0] = (int64_t)(t == 0 ? wn : bn);
                    ti_->shape[1] = 0;
                }
            }
        }
        if (s->loss == MXP_LOSS_GAUSSIAN && i == s->n_layers - 1 &&
            !nn_gauss_add_bounds(m, L, &P))
            goto overflow;
        w = L->out;
        m->width[i + 1] = w;
        if (w > m->max_width) m->max_width = w;
    }
    mxp_status ss = nn_skip_validate(s, m->width, err); /* residual widths, dropout rates */
    if (ss != MXP_OK) return ss;
    m->ens = s->ensemble > 1 ? s->ensemble : 1;
    m->ens_p1 = P;
    m->ens_member = -1;
    m->ens_elites = nn_ens_all(m->ens);
    if (m->ens > 1) { /* members 1..E-1 follow member 0's block */
        if (!mxp_size_mul(P, (size_t)m->ens, &P)) goto overflow;
        if (!nn_ens_tensors(m))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.ensemble=%d: %d members of %d tensors exceed the model's "
                                 "%d tensors; accepted: fewer members or layers",
                                 m->ens, m->ens, m->n_tensors, NN_MAX_TENSORS);
    }
    m->n_params = P;
    return MXP_OK;
overflow:
    return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                         "parameter count overflows size_t; reduce layer units");
}

/* Write FP32 parameters `src` [P] into b's master and work (RNE). */
static void install_weights(const mxp_model *m, const mxp_precision_policy *p,
                            nn_bufs *b, const float *src) {
    const size_t P = m->n_params;
    if (b->master && b->master != src) memcpy(b->master, src, P * sizeof(float));
    if (!b->work_is_master) m->k->convert(p->weight, b->work, MXP_DTYPE_F32, src, P);
}

/* PyTorch init in slab order from one RNG stream: linear weight then bias,
 * each U(-1/sqrt(in), 1/sqrt(in)); layernorm gamma 1, beta 0. Values are
 * drawn in FP32 into dst [P]. */
static void init_member(const mxp_model *m, mxp_rng *rp, float *dst);

/* Members of an ensemble one after another from the same stream (member
 * 0's values are those of the single model of the same seed). */
static void init_params(mxp_model *m, uint64_t seed, float *dst) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    int cur = 0;
    for (int e = 0; e < m->ens; e++) {
        cur = nn_ens_view(m, cur, e);
        init_member(m, &r, dst);
    }
    nn_ens_view(m, cur, 0);
    m->ens_member = -1;
}

static void init_member(const mxp_model *m, mxp_rng *rp, float *dst) {
    mxp_rng r = *rp;
    for (int l = 0; l < m->n_layers; l++) {
        const nn_layer *L = &m->layers[l];
        if (L->kind == MXP_LAYER_LINEAR) {
            float bound = (float)(1.0 / sqrt((double)L->in));
            /* the mxp_rng_uniform stream, a Philox block per 4 draws
             * (mxp_rng_uniform_fill: one per draw took ~8 ns a parameter) */
            float *w = dst + L->w_off;
            const size_t wb = L->b_off + (size_t)L->out - L->w_off; /* weight and bias */
            mxp_rng_uniform_fill(&r, w, wb);
            for (size_t i = 0; i < wb; i++) w[i] = (2.0f * w[i] - 1.0f) * bound;
            if (L->n_params > wb) nn_gauss_init_bounds(m, dst); /* the Gaussian head's */
        } else if (L->kind == MXP_LAYER_LAYERNORM) {
            for (int64_t c = 0; c < L->in; c++) {
                dst[L->w_off + (size_t)c] = 1.0f;
                dst[L->b_off + (size_t)c] = 0.0f;
            }
        } else if (nn_kind_is_ext(L->kind)) {
            nn_ext_init(m, l, &r, dst);
        }
    }
    *rp = r;
}

/* FP32 staging [P] for weights being re-installed: the grad slab, or for
 * an inference-only model a temporary (*tmp, freed by the caller). */
static float *staging(mxp_model *m, float **tmp) {
    *tmp = NULL;
    if (m->grads) return m->grads;
    *tmp = mxp_calloc(m->n_params ? m->n_params : 1, sizeof(float));
    return *tmp;
}

/* MIXPREC_FUSION: "1" (or unset) fused epilogue passes, "0" the unfused
 * sequence (same bits; for timing). Read once; another value is logged and
 * ignored. */
static bool fusion_on = true;
static void fusion_read(void) {
    const char *v = getenv("MIXPREC_FUSION");
    if (!v || strcmp(v, "1") == 0) return;
    if (strcmp(v, "0") == 0)
        fusion_on = false;
    else
        mxp_log(MXP_LOG_WARN, "MIXPREC_FUSION=%.40s is unknown and ignored; accepted: 0 "
                "(unfused passes) or 1 (fused, the default)", v);
}
static bool fusion_default(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fusion_read);
    return fusion_on;
}

static mxp_status model_create(const mxp_model_spec *spec, const mxp_precision_policy *policy,
                               uint64_t seed, bool inference, mxp_model **out,
                               mxp_error *err) {
    if (!out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "out is NULL; accepted: a pointer to mxp_model*");
    *out = NULL;
    mxp_status s;
    if ((s = mxp_dev_init(err))) return s; /* MIXPREC_MOCK_DEVICE */
    if ((s = validate_spec(spec, err))) return s;
    if ((s = validate_policy(policy, err))) return s;

    mxp_model *m = mxp_calloc(1, sizeof *m);
    if (!m)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                             "out of memory allocating the model");
    m->spec = *spec;
    m->policy = *policy;
    m->seed = seed; /* keys the dropout masks (layer_skip.c) */
    m->k = mxp_kernels_get();
    m->fuse = fusion_default();
    m->ens_batched = nn_ens_batched_default();
    m->fp8_cfg = mxp_fp8_config_default();
    if ((s = build_structure(m, err))) goto fail;
    if ((s = nn_head_install(m, err))) goto fail;
    if ((s = nn_plan_bufs(m, policy, &m->b, err))) goto fail;
    if ((s = nn_fp8_make(m, policy, &m->fp8, err))) goto fail;
    m->inference = inference;
    if (!inference) {
        m->grads = mxp_dev_calloc(m->n_params, sizeof(float));
        if (!m->grads) {
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                              "out of memory allocating %zu gradient floats",
                              m->n_params);
            goto fail;
        }
    }
    if (m->b.master) {
        init_params(m, seed, m->b.master);
        install_weights(m, policy, &m->b, m->b.master);
    } else {
        /* pure mode: draw in FP32, round into work (grads as staging) */
        float *tmp, *st = staging(m, &tmp);
        if (!st) {
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                              "out of memory allocating %zu staging floats", m->n_params);
            goto fail;
        }
        init_params(m, seed, st);
        install_weights(m, policy, &m->b, st);
        mxp_model_zero_grads(m);
        mxp_free(tmp);
    }
    *out = m;
    return MXP_OK;
fail:
    mxp_model_destroy(m);
    return s;
}

static mxp_status mxp_model_create_dev(const mxp_model_spec *spec, const mxp_precision_policy *policy,
                            uint64_t seed, mxp_model **out, mxp_error *err) {
    return model_create(spec, policy, seed, false, out, err);
}

/* mxp_model_create inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_create(const mxp_model_spec *spec, const mxp_precision_policy *policy,
                            uint64_t seed, mxp_model **out, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_model_create_dev(spec, policy, seed, out, err);
    mxp_dev_leave();
    return r_;
}

static mxp_status mxp_model_create_inference_dev(const mxp_model_spec *spec,
                                      const mxp_precision_policy *policy, uint64_t seed,
                                      mxp_model **out, mxp_error *err) {
    return model_create(spec, policy, seed, true, out, err);
}

/* mxp_model_create_inference inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_create_inference(const mxp_model_spec *spec,
                                      const mxp_precision_policy *policy, uint64_t seed,
                                      mxp_model **out, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_model_create_inference_dev(spec, policy, seed, out, err);
    mxp_dev_leave();
    return r_;
}

mxp_status mxp_model_spec_num_params(const mxp_model_spec *spec, size_t *n, mxp_error *err) {
    if (!n) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_model_spec_num_params: NULL n");
    *n = 0;
    mxp_status s = validate_spec(spec, err);
    if (s) return s;
    mxp_model *m = mxp_calloc(1, sizeof *m); /* the structure only: no slab */
    if (!m) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "out of memory sizing the model");
    m->spec = *spec;
    m->k = mxp_kernels_get();
    if ((s = build_structure(m, err)) == MXP_OK) *n = m->n_params;
    mxp_free(m);
    return s;
}

bool mxp_model_is_inference(const mxp_model *m) { return m && m->inference; }

void mxp_model_destroy(mxp_model *m) {
    if (!m) return;
    nn_free_bufs(&m->b);
    mxp_free(m->recs);
    mxp_fp8_scaling_destroy(m->fp8);
    mxp_dev_free(m->grads);
    nn_head_free(m);
    mxp_free(m);
}

static mxp_status check_fp32_mode(uint64_t mask, const mxp_precision_policy *p,
                                  mxp_error *err);

/* Re-plan for a new policy. Weights come from master (or work widened);
 * nothing changes on failure; grads are zeroed on success. */
static mxp_status mxp_model_set_policy_dev(mxp_model *m, const mxp_precision_policy *policy,
                                mxp_error *err) {
    if (!m)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    mxp_status s;
    if ((s = validate_policy(policy, err))) return s;
    if ((s = check_fp32_mode(m->fp32_mask, policy, err))) return s;
    nn_bufs nb;
    if ((s = nn_plan_bufs(m, policy, &nb, err))) return s;
    mxp_fp8_scaling *f8 = NULL;
    if ((s = nn_fp8_make(m, policy, &f8, err))) {
        nn_free_bufs(&nb);
        return s;
    }
    float *tmp = NULL;
    const float *src = m->b.master;
    if (!src) {
        /* widen the old work slab through the grad slab (zeroed after) */
        float *st = staging(m, &tmp);
        if (!st) {
            nn_free_bufs(&nb);
            mxp_fp8_scaling_destroy(f8);
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                                 "out of memory allocating %zu staging floats", m->n_params);
        }
        m->k->convert(MXP_DTYPE_F32, st, m->policy.weight, m->b.work, m->n_params);
        src = st;
    }
    mxp_fp8_scaling_destroy(m->fp8);
    m->fp8 = f8;
    install_weights(m, policy, &nb, src);
    mxp_free(tmp);
    nn_free_bufs(&m->b);
    m->b = nb;
    m->policy = *policy;
    mxp_model_zero_grads(m);
    return MXP_OK;
}

/* mxp_model_set_policy inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_set_policy(mxp_model *m, const mxp_precision_policy *policy,
                                mxp_error *err) {
    mxp_status r_ = nn_sync_pull(m, err); /* the switch recasts the host's weights */
    if (r_ != MXP_OK) return r_;
    mxp_dev_enter();
    r_ = mxp_model_set_policy_dev(m, policy, err);
    mxp_dev_leave();
    return r_ == MXP_OK ? nn_sync_wrote(m, err) : r_;
}

/* Resolve sel against m's layers into a mask (bit l: linear layer l). */
static mxp_status resolve_fp32_layers(const mxp_model *m, const mxp_fp32_layers *sel,
                                      uint64_t *mask, mxp_error *err) {
    char lin[200] = "", txt[256];
    size_t used = 0;
    int first = -1, last = -1;
    for (int l = 0; l < m->n_layers; l++) {
        if (m->layers[l].kind != MXP_LAYER_LINEAR) continue;
        if (first < 0) first = l;
        last = l;
        if (used < sizeof lin) {
            int w = snprintf(lin + used, sizeof lin - used, "%s%d", used ? "," : "", l);
            if (w > 0) used += (size_t)w;
        }
    }
    mxp_fp32_layers_format(sel, txt, sizeof txt);
    *mask = sel->mask;
    if ((sel->first || sel->last) && first < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "fp32 layers '%s' (training.precision_fp32_layers): this model has "
                             "no linear layer; accepted: none", txt);
    if (sel->first) *mask |= (uint64_t)1 << first;
    if (sel->last) *mask |= (uint64_t)1 << last;
    for (int l = 0; l < MXP_FP32_LAYERS_MAX; l++) {
        if (!(sel->mask >> l & 1)) continue;
        if (l >= m->n_layers || m->layers[l].kind != MXP_LAYER_LINEAR)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "fp32 layers '%s' (training.precision_fp32_layers): layer %d %s; "
                                 "accepted: none, first, last or indices of this model's "
                                 "linear layers (%s)",
                                 txt, l,
                                 l >= m->n_layers ? "is out of range" : "is not a linear layer",
                                 first < 0 ? "none" : lin);
    }
    return MXP_OK;
}

/* Pure modes keep no FP32 copy of the weights a kept layer would use. */
static mxp_status check_fp32_mode(uint64_t mask, const mxp_precision_policy *p,
                                  mxp_error *err) {
    if (mask == 0 || p->has_master || p->mode == MXP_PRECISION_FP32) return MXP_OK;
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                         "training.precision_fp32_layers: layers kept FP32 need an FP32 master "
                         "copy, which precision %s does not keep; accepted there: none "
                         "(or use mixed_bf16 / mixed_fp16 / fp8)",
                         mxp_precision_name(p->mode));
}

static mxp_status mxp_model_set_fp32_layers_dev(mxp_model *m, const mxp_fp32_layers *sel,
                                     mxp_error *err) {
    if (!m || !sel)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_model_set_fp32_layers: NULL %s", m ? "selection" : "model");
    uint64_t mask;
    mxp_status s = resolve_fp32_layers(m, sel, &mask, err);
    if (s != MXP_OK) return s;
    if ((s = check_fp32_mode(mask, &m->policy, err)) != MXP_OK) return s;
    const mxp_fp32_layers keep_sel = m->fp32_sel;
    const uint64_t keep_mask = m->fp32_mask;
    m->fp32_sel = *sel;
    m->fp32_mask = mask;
    s = mxp_model_set_policy(m, &m->policy, err);
    if (s != MXP_OK) {
        m->fp32_sel = keep_sel;
        m->fp32_mask = keep_mask;
    }
    return s;
}

/* mxp_model_set_fp32_layers inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_set_fp32_layers(mxp_model *m, const mxp_fp32_layers *sel,
                                     mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_model_set_fp32_layers_dev(m, sel, err);
    mxp_dev_leave();
    return r_;
}

uint64_t mxp_model_fp32_layers(const mxp_model *m) {
    if (!m || m->policy.mode == MXP_PRECISION_FP32) return 0;
    return m->fp32_mask;
}

bool nn_layer_fp32(const mxp_model *m, int l) {
    return m->policy.mode != MXP_PRECISION_FP32 && (m->fp32_mask >> l & 1);
}

const void *nn_layer_weights(const mxp_model *m, int l, size_t off, mxp_dtype *type) {
    if (nn_layer_fp32(m, l) && m->b.master) {
        *type = MXP_DTYPE_F32;
        return m->b.master + off;
    }
    *type = m->policy.weight;
    return nn_work_at(m, off);
}

void nn_model_set_fusion(mxp_model *m, bool on) {
    if (m) m->fuse = on;
}

mxp_status nn_model_set_block_rows(mxp_model *m, int64_t rows, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    const int64_t keep = m->blk_rows;
    m->blk_rows = rows;
    nn_bufs nb;
    mxp_status s = nn_plan_bufs(m, &m->policy, &nb, err);
    if (s != MXP_OK) {
        m->blk_rows = keep;
        return s;
    }
    float *tmp = NULL;
    const float *src = m->b.master;
    if (!src) { /* widen the work slab through the grad slab (zeroed after) */
        float *st = staging(m, &tmp);
        if (!st) {
            nn_free_bufs(&nb);
            m->blk_rows = keep;
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                                 "out of memory allocating %zu staging floats", m->n_params);
        }
        m->k->convert(MXP_DTYPE_F32, st, m->policy.weight, m->b.work, m->n_params);
        src = st;
    }
    install_weights(m, &m->policy, &nb, src);
    mxp_free(tmp);
    nn_free_bufs(&m->b);
    m->b = nb;
    mxp_model_zero_grads(m);
    return MXP_OK;
}

/* ---- accessors ------------------------------------------------------------ */

const mxp_precision_policy *mxp_model_policy(const mxp_model *m) {
    return &m->policy;
}
const mxp_model_spec *mxp_model_get_spec(const mxp_model *m) { return &m->spec; }
size_t mxp_model_num_params(const mxp_model *m) { return m->n_params; }
int64_t mxp_model_out_dim(const mxp_model *m) { return m->width[m->n_layers]; }
int mxp_model_ensemble(const mxp_model *m) { return m->ens; }
int64_t mxp_model_target_dim(const mxp_model *m) {
    const int64_t o = m->width[m->n_layers];
    if (m->spec.loss == MXP_LOSS_GAUSSIAN) return m->spec.termination ? (o - 1) / 2 + 1 : o / 2;
    return o;
}
/* the pointer getters pull a device's record first (model_sync.h; an error
 * there is the device step's to report) */
float *mxp_model_master(mxp_model *m) {
    (void)nn_sync_pull(m, NULL);
    return m->b.master;
}
/* Discarded gradients read before the backward that would write them are
 * zeroed here, so a reader sees what it saw when every step began with a
 * memset. */
float *mxp_model_grads(mxp_model *m) {
    (void)nn_sync_grads(m, NULL); /* a device's last gradients (model_sync.h) */
    if (m->grads_stale) mxp_model_zero_grads(m);
    return m->grads;
}

void *mxp_model_work(mxp_model *m, mxp_dtype *type) {
    (void)nn_sync_pull(m, NULL);
    if (type) *type = m->policy.weight;
    return m->b.work;
}

static void mxp_model_sync_work_dev(mxp_model *m) {
    if (!m->b.master || m->b.work_is_master) return;
    m->k->convert(m->policy.weight, m->b.work, MXP_DTYPE_F32, m->b.master,
                  m->n_params);
}

/* mxp_model_sync_work inside one backend bracket (backend/devmem.h) */
void mxp_model_sync_work(mxp_model *m) {
    mxp_dev_enter();
    mxp_model_sync_work_dev(m);
    mxp_dev_leave();
}

static float mxp_model_param_dev(const mxp_model *m, size_t i) {
    if (m->b.master) return m->b.master[i];
    return mxp_load_f32(m->policy.weight, m->b.work, i);
}

/* mxp_model_param inside one backend bracket (backend/devmem.h) */
float mxp_model_param(const mxp_model *m, size_t i) {
    (void)nn_sync_pull(m, NULL);
    mxp_dev_enter();
    float r_ = mxp_model_param_dev(m, i);
    mxp_dev_count(true, sizeof r_); /* one value read by the host */
    mxp_dev_leave();
    return r_;
}

static void mxp_model_zero_grads_dev(mxp_model *m) {
    if (m->grads) memset(m->grads, 0, m->n_params * sizeof(float));
    m->grads_stale = false;
}

/* mxp_model_zero_grads inside one backend bracket (backend/devmem.h) */
void mxp_model_zero_grads(mxp_model *m) {
    mxp_dev_enter();
    mxp_model_zero_grads_dev(m);
    mxp_dev_leave();
}

static void mxp_model_discard_grads_dev(mxp_model *m) {
    if (m->grads) m->grads_stale = true;
}

/* mxp_model_discard_grads inside one backend bracket (backend/devmem.h) */
void mxp_model_discard_grads(mxp_model *m) {
    mxp_dev_enter();
    mxp_model_discard_grads_dev(m);
    mxp_dev_leave();
}

void nn_grad_zero(mxp_model *m, size_t off, size_t n) {
    if (nn_grad_beta(m) == 0.0f) memset(m->grads + off, 0, n * sizeof(float));
}

int mxp_model_num_tensors(const mxp_model *m) { return m->n_tensors; }

const mxp_tensor_info *mxp_model_tensor(const mxp_model *m, int i) {
    if (i < 0 || i >= m->n_tensors) return NULL;
    return &m->tensors[i];
}

/* params: the working weights; master: a separate FP32 copy (0 when absent
 * or when work aliases it, as in fp32 mode); activations: the whole arena. */
void mxp_model_memory_usage(const mxp_model *m, mxp_model_memory *out) {
    const size_t P = m->n_params;
    out->params = P * mxp_dtype_info(m->policy.weight)->size;
    out->master = (m->b.master && !m->b.work_is_master) ? P * sizeof(float) : 0;
    out->grads = m->grads ? P * sizeof(float) : 0; /* none: inference-only */
    out->activations = m->b.arena_bytes;
}

/* ---- shared helpers --------------------------------------------------------- */

const float *nn_view_f32(const mxp_model *m, mxp_dtype t, const void *buf,
                         size_t n, float *scratch) {
    if (t == MXP_DTYPE_F32) return (const float *)buf;
    m->k->convert(MXP_DTYPE_F32, scratch, t, buf, n);
    return scratch;
}

const void *nn_work_at(const mxp_model *m, size_t off) {
    return (const unsigned char *)m->b.work +
           off * mxp_dtype_info(m->policy.weight)->size;
}

const void *nn_matmul_input(mxp_model *m, int l, int64_t B, mxp_dtype *type) {
    mxp_dtype at = m->b.act_type[l];
    mxp_dtype want = nn_layer_fp32(m, l) ? MXP_DTYPE_F32 : m->policy.ops[MXP_OP_MATMUL].input;
    *type = want;
    if (at == want) return m->b.acts[l];
    m->k->convert(want, m->b.t0, at, m->b.acts[l],
                  (size_t)B * (size_t)m->layers[l].in);
    return m->b.t0;
}
