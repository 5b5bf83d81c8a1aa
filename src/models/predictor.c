/* models/predictor.c: a user-data model from its checkpoint (predict.h):
 * evaluate, predict in the data's units, export for PyTorch.
 *
 * Entry points: mxp_predictor_*. The model is rebuilt from the checkpoint's
 * config (model.layers or the shorthand) and "workload_meta" (widths,
 * statistics), then mxp_ckpt_load restores the weights into a trainer in
 * the requested precision (any checkpoint loads in any mode).
 */
#include <mixprec/predict.h>

#include "models/user_data.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PRED_MAX_BATCH 256

struct mxp_predictor {
    mxp_config cfg;
    ud_meta meta;
    mxp_model *model;
    mxp_trainer *trainer;
    int saved_precision;
    char path[MXP_CKPT_PATH_MAX];
    float *tw; /* [out_dim + 1] model.target_weights (ud_model_spec) */
};

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

void mxp_predictor_destroy(mxp_predictor *p) {
    if (!p) return;
    mxp_trainer_destroy(p->trainer);
    mxp_model_destroy(p->model);
    ud_meta_free(&p->meta);
    mxp_free(p->tw);
    mxp_free(p);
}

/* What checkpoint f describes: its config (cfg), its user-data metadata
 * (meta, checked) and the model spec (max_batch rows), checked against the
 * weights the file holds before anything is sized from it (a 9 KB file
 * claiming in_dim = 10^7 must not make us build that model).
 * MXP_ERR_UNSUPPORTED when f is not of a user-data run. */
static mxp_status describe(const mxp_st_file *f, int64_t max_batch, mxp_config *cfg,
                           ud_meta *meta, mxp_model_spec *spec, float **tw, mxp_error *err) {
    const char *L = mxp_st_file_label(f);
    memset(meta, 0, sizeof *meta);
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    if (s == MXP_OK) s = mxp_ckpt_apply_config(f, b, err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    if (s != MXP_OK) return s;
    const char *text = mxp_st_file_meta(f, "workload_meta");
    mxp_dataset_kind kind;
    if (!ud_kind_of(cfg->workload, &kind) || (!text && strcmp(cfg->wl.data_path, "none") == 0))
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "%s: not a checkpoint of a model trained on user data (data.path or "
                             "in-memory arrays); accepted: a world_model, classifier or regressor "
                             "run on user data",
                             L);
    if ((s = ud_meta_parse(text, L, meta, err)) != MXP_OK) return s;
    if (meta->kind != kind)
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: metadata 'workload_meta' describes a %s, the config a %s", L,
                          mxp_dataset_kind_name(meta->kind), mxp_dataset_kind_name(kind));
    *tw = NULL;
    if (s == MXP_OK && !(*tw = mxp_calloc((size_t)meta->out_dim + 1, sizeof(float))))
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "target weights");
    if (s == MXP_OK)
        s = ud_model_spec(cfg, meta->in_dim, meta->out_dim,
                          kind == MXP_DATASET_CLASSIFIER ? MXP_LOSS_XENT : MXP_LOSS_MSE, max_batch,
                          *tw, spec, err);
    if (s == MXP_OK) s = mxp_ckpt_check_spec(f, spec, err);
    if (s != MXP_OK) {
        ud_meta_free(meta);
        mxp_free(*tw);
        *tw = NULL;
    }
    return s;
}

mxp_status mxp_predictor_file_spec(const mxp_st_file *f, int64_t max_batch, mxp_model_spec *out,
                                   mxp_error *err) {
    if (!f || !out || max_batch < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_predictor_file_spec: NULL argument or max_batch < 1");
    mxp_config cfg;
    ud_meta meta;
    float *tw = NULL;
    mxp_status s = describe(f, max_batch, &cfg, &meta, out, &tw, err);
    ud_meta_free(&meta);
    mxp_free(tw);
    out->target_weights = NULL; /* the loss weights: not kept (the parameters do not depend on them) */
    return s;
}

/* An ensemble's elites from the checkpoint's run_state ("elites": member
 * indices, named by validation during training; docs/world_models.md
 * "Elites") into the model; all members when the file names none. */
static mxp_status load_elites(const mxp_st_file *f, mxp_model *m, mxp_error *err) {
    const char *text = mxp_st_file_meta(f, "run_state");
    const int E = mxp_model_ensemble(m);
    if (!text || E < 2) return MXP_OK;
    json_t *o = json_loads(text, 0, NULL);
    json_t *a = json_object_get(o, "elites");
    uint64_t mask = 0;
    bool ok = true;
    for (size_t i = 0; json_is_array(a) && ok && i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i);
        ok = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) < E;
        if (ok) mask |= 1ull << json_integer_value(x);
    }
    json_decref(o);
    if (!ok)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: metadata run_state.elites is not a list of member indices "
                             "0..%d", mxp_st_file_label(f), E - 1);
    return mask ? mxp_model_set_elites(m, mask, err) : MXP_OK;
}

mxp_status mxp_predictor_load(const char *path, int precision, mxp_predictor **out,
                              mxp_error *err) {
    if (!path || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_predictor_load: NULL");
    if (precision < -1 || precision >= MXP_PRECISION_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_predictor_load: precision %d; accepted: -1 or an mxp_precision",
                             precision);
    mxp_predictor *p = mxp_calloc(1, sizeof *p);
    if (!p) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "predictor");
    mxp_status s = MXP_OK;
    if (is_dir(path)) {
        char dir[MXP_CKPT_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/checkpoints", path);
        if (!is_dir(dir)) snprintf(dir, sizeof dir, "%s", path);
        s = mxp_ckpt_find_latest(dir, false, NULL, p->path, sizeof p->path, NULL, err);
    } else {
        snprintf(p->path, sizeof p->path, "%s", path);
    }
    mxp_st_file *f = NULL;
    mxp_model_spec spec;
    mxp_ckpt_info info;
    if (s == MXP_OK) s = mxp_st_file_read(p->path, &f, err);
    if (s == MXP_OK) {
        s = describe(f, PRED_MAX_BATCH, &p->cfg, &p->meta, &spec, &p->tw, err);
        if (s == MXP_ERR_UNSUPPORTED && err) err->status = s = MXP_ERR_FORMAT;
    }
    if (s == MXP_OK && (s = mxp_ckpt_read_info(f, &info, err)) == MXP_OK)
        p->saved_precision = (int)info.precision;
    mxp_precision_policy pol;
    mxp_precision_policy_default(precision < 0 ? (mxp_precision)p->saved_precision
                                               : (mxp_precision)precision,
                                 &pol);
    if (s == MXP_OK) s = mxp_model_create(&spec, &pol, p->cfg.seed, &p->model, err);
    if (s == MXP_OK) s = mxp_trainer_create(p->model, &p->cfg.trainer, &p->trainer, err);
    if (s == MXP_OK) s = mxp_ckpt_load_file(f, p->trainer, NULL, err);
    if (s == MXP_OK) s = load_elites(f, p->model, err);
    mxp_st_file_destroy(f);
    if (s != MXP_OK) {
        mxp_predictor_destroy(p);
        return s;
    }
    *out = p;
    return MXP_OK;
}

mxp_dataset_kind mxp_predictor_kind(const mxp_predictor *p) { return p->meta.kind; }
int mxp_predictor_precision(const mxp_predictor *p) {
    return (int)mxp_model_policy(p->model)->mode;
}
int mxp_predictor_saved_precision(const mxp_predictor *p) { return p->saved_precision; }
const char *mxp_predictor_checkpoint(const mxp_predictor *p) { return p->path; }
const mxp_config *mxp_predictor_config(const mxp_predictor *p) { return &p->cfg; }
mxp_model *mxp_predictor_model(mxp_predictor *p) { return p->model; }

mxp_status mxp_predictor_evaluate(mxp_predictor *p, const mxp_dataset *data, mxp_run_eval *out,
                                  mxp_error *err) {
    if (!p || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_predictor_evaluate: NULL");
    mxp_dataset *own = NULL;
    mxp_status s = MXP_OK;
    if (!data) {
        if (strcmp(p->cfg.wl.data_path, "none") == 0)
            return mxp_error_set(err, MXP_ERR_STATE,
                                 "%s: the run trained on in-memory arrays (no data.path), so "
                                 "there is no held-out split to read back; accepted: the data "
                                 "to evaluate on, as a file (mixprec eval RUN --data FILE, "
                                 "Predictor.evaluate(data=\"FILE\")) or arrays "
                                 "(Predictor.evaluate(data={...}))",
                                 p->path);
        if ((s = mxp_dataset_read(p->cfg.wl.data_path, &own, err)) != MXP_OK) return s;
        data = own;
    }
    mxp_workload_provider wl;
    memset(out, 0, sizeof *out);
    out->loss = out->accuracy = out->bits_per_char = out->mse = NAN;
    for (int i = 0; i < MXP_OPEN_LOOP_N; i++) out->open_loop[i] = NAN;
    for (int e = 0; e < MXP_MODEL_MAX_ENSEMBLE; e++) out->member_loss[e] = NAN;
    s = ud_provider_create(&p->cfg, data, &p->meta, own == NULL, &wl, err);
    if (s == MXP_OK) {
        s = wl.evaluate(wl.self, p->model, out, err);
        if (s == MXP_OK) snprintf(out->name, sizeof out->name, "%s", own ? "val" : "data");
        if (s == MXP_OK && !isfinite(out->loss))
            s = mxp_error_set(err, MXP_ERR_NONFINITE,
                              "%s: the loss on %s is %g, not a finite number: the model's "
                              "outputs overflow on this data",
                              p->path, own ? "the held-out split" : mxp_dataset_label(data),
                              out->loss);
        wl.destroy(wl.self);
    }
    mxp_dataset_destroy(own);
    return s;
}

/* A float input array `name` of rank 2 with `cols` columns (rows: *n,
 * or set it when *n is 0). */
static mxp_status input(const mxp_dataset *in, const char *name, int64_t cols, int64_t *n,
                        const mxp_array **out, mxp_error *err) {
    const char *L = mxp_dataset_label(in);
    const mxp_array *a = mxp_dataset_find(in, name);
    if (!a) return mxp_error_set(err, MXP_ERR_FORMAT, "%s: missing array '%s' [N, %lld]", L, name,
                                 (long long)cols);
    if (a->ndim != 2 || a->shape[1] != cols ||
        (a->dtype != MXP_ARRAY_F32 && a->dtype != MXP_ARRAY_F64))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%s' must be float [N, %lld] (the model's width); it is "
                             "%s of rank %d",
                             L, name, (long long)cols, mxp_array_dtype_name(a->dtype), a->ndim);
    if (*n && a->shape[0] != *n)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: shape mismatch: array '%s' has %lld rows, "
                             "the other input %lld", L, name, (long long)a->shape[0],
                             (long long)*n);
    *n = a->shape[0];
    *out = a;
    return MXP_OK;
}

/* One output array of predict (a copy goes into o). */
static mxp_status put(mxp_dataset *o, const char *name, int ndim, int64_t n, int64_t k,
                      const float *v, mxp_error *err) {
    const int64_t sh[2] = {n, k};
    return mxp_dataset_add(o, name, MXP_ARRAY_F32, ndim, sh, v, err);
}

/* Rows [i, i + B) of the model's outputs yc [E, B, KO] combined per target
 * j < K over the elite members el (bit e: member e): the (ensemble) mean
 * into mean, the aleatoric variance (mean over
 * members of exp(log-variance); a Gaussian head) into alea and the
 * epistemic one (population variance of the member means; an ensemble)
 * into epi, variances times sd[j]^2 (the targets' std: data units). */
static void combine(const float *yc, int E, uint64_t el, int64_t B, int64_t KO, int64_t K,
                    bool gauss, const float *sd, int64_t i, float *mean, float *alea,
                    float *epi) {
    int nE = 0; /* the elites (all E members unless model.elites says otherwise) */
    for (int e = 0; e < E; e++) nE += (int)(el >> e & 1u);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < K; j++) {
            double mu = 0.0, a = 0.0, v = 0.0;
            for (int e = 0; e < E; e++) {
                if (!(el >> e & 1u)) continue;
                const float *o = yc + ((size_t)e * (size_t)B + (size_t)b) * (size_t)KO;
                mu += (double)o[j];
                if (gauss) a += exp((double)o[K + j]);
            }
            mu /= nE;
            for (int e = 0; e < E; e++) {
                if (!(el >> e & 1u)) continue;
                const double d = (double)yc[((size_t)e * (size_t)B + (size_t)b) * (size_t)KO +
                                            (size_t)j] - mu;
                v += d * d;
            }
            const double s2 = sd ? (double)sd[j] * (double)sd[j] : 1.0;
            const size_t at = (size_t)(i + b) * (size_t)K + (size_t)j;
            mean[at] = (float)mu;
            if (alea) alea[at] = (float)(a / nE * s2);
            if (epi) epi[at] = (float)(v / nE * s2);
        }
}

/* The termination probability of rows [0, B) of yc [E, B, KO] (logit in
 * each row's last column) into p [B]: the mean over the elite members (bit
 * e of el) of sigmoid(logit), in double (sigmoid in its overflow-free
 * form). */
static void term_prob(const float *yc, int E, uint64_t el, int64_t B, int64_t KO, float *p) {
    int nE = 0;
    for (int e = 0; e < E; e++) nE += (int)(el >> e & 1u);
    for (int64_t b = 0; b < B; b++) {
        double acc = 0.0;
        for (int e = 0; e < E; e++) {
            if (!(el >> e & 1u)) continue;
            const double z = (double)yc[((size_t)e * (size_t)B + (size_t)b) * (size_t)KO +
                                        (size_t)KO - 1];
            acc += z >= 0.0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
        }
        p[b] = (float)(acc / nE);
    }
}

/* Variances of the world model's targets [N, S + 1] split into next_obs's
 * [N, S] (in place, packed) and reward's [N] (into r). */
static void split_targets(float *v, float *r, int64_t N, int64_t S) {
    for (int64_t i = 0; i < N; i++) {
        r[i] = v[i * (S + 1) + S];
        memmove(v + i * S, v + i * (S + 1), (size_t)S * sizeof(float));
    }
}

mxp_status mxp_predictor_predict(mxp_predictor *p, const mxp_dataset *in, mxp_dataset **out,
                                 mxp_error *err) {
    if (!p || !in || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_predictor_predict");
    const ud_meta *m = &p->meta;
    const bool wm = m->kind == MXP_DATASET_WORLD_MODEL;
    const int64_t D = m->in_dim, K = m->out_dim, S = m->state_dim, A = m->action_dim;
    int64_t N = 0;
    const mxp_array *x = NULL, *obs = NULL, *act = NULL;
    /* the world model's states under the names data files use (docs/data.md) */
    const char *obs_name = "obs";
    if (wm && !mxp_dataset_find(in, "obs"))
        obs_name = mxp_dataset_find(in, "observations") ? "observations"
                   : mxp_dataset_find(in, "states")     ? "states"
                                                        : "obs";
    mxp_status s = wm ? input(in, obs_name, S, &N, &obs, err) : input(in, "x", D, &N, &x, err);
    if (s == MXP_OK && wm) s = input(in, "actions", A, &N, &act, err);
    if (s != MXP_OK) return s;
    /* a Gaussian head: per member and row the mean [K] then the bounded
     * log-variance [K]; an ensemble: E members' outputs, member-major */
    const bool gauss = mxp_model_get_spec(p->model)->loss == MXP_LOSS_GAUSSIAN;
    const int E = mxp_model_ensemble(p->model);
    const bool unc = gauss || E > 1; /* variances to report */
    const int64_t KO = mxp_model_out_dim(p->model); /* K, or 2K for a Gaussian head (+ 1) */
    const bool term = mxp_model_get_spec(p->model)->termination != 0; /* logit last */
    const size_t NK = (size_t)N * (size_t)K;
    float *bx = mxp_calloc((size_t)(PRED_MAX_BATCH * D), sizeof(float));
    float *yc = mxp_calloc((size_t)E * PRED_MAX_BATCH * (size_t)KO, sizeof(float));
    float *y = mxp_calloc(NK, sizeof(float));
    float *rew = wm ? mxp_calloc((size_t)N * 3, sizeof(float)) : NULL; /* mean, two variances */
    float *next = wm ? mxp_calloc((size_t)N * (size_t)S, sizeof(float)) : NULL;
    float *alea = gauss ? mxp_calloc(NK, sizeof(float)) : NULL;
    float *epi = E > 1 ? mxp_calloc(NK, sizeof(float)) : NULL;
    float *var = unc ? mxp_calloc(NK, sizeof(float)) : NULL;
    float *tp = term ? mxp_calloc((size_t)N + 1, sizeof(float)) : NULL;
    if (!bx || !yc || !y || (wm && (!rew || !next)) || (gauss && !alea) || (E > 1 && !epi) ||
        (unc && !var) || (term && !tp))
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "predict: %lld rows", (long long)N);
    for (int64_t i = 0; s == MXP_OK && i < N; i += PRED_MAX_BATCH) {
        int64_t B = N - i < PRED_MAX_BATCH ? N - i : PRED_MAX_BATCH;
        if (wm) {
            for (int64_t b = 0; b < B; b++) {
                mxp_array_to_f32(obs, (i + b) * S, S, bx + b * D);
                mxp_array_to_f32(act, (i + b) * A, A, bx + b * D + S);
                for (int64_t j = 0; j < D; j++)
                    bx[b * D + j] = (bx[b * D + j] - m->x_mean[j]) / m->x_std[j];
            }
        } else {
            mxp_array_to_f32(x, i * D, B * D, bx);
        }
        s = mxp_model_predict(p->model, bx, B, yc, err);
        /* variances in the data's units: of a standardised target times its
         * std^2 (the world model's; the regressor trains on raw values) */
        if (s == MXP_OK)
            combine(yc, E, mxp_model_elites(p->model), B, KO, K, gauss, wm ? m->y_std : NULL, i, y,
                    alea, epi);
        if (s == MXP_OK && term)
            term_prob(yc, E, E > 1 ? mxp_model_elites(p->model) : 1u, B, KO, tp + i);
    }
    for (size_t i = 0; s == MXP_OK && unc && i < NK; i++) /* the total: their sum */
        var[i] = (alea ? alea[i] : 0.0f) + (epi ? epi[i] : 0.0f);
    if (s == MXP_OK && wm)
        for (int64_t i = 0; i < N; i++) {
            for (int64_t j = 0; j < S; j++) {
                float delta = y[i * K + j] * m->y_std[j] + m->y_mean[j];
                next[i * S + j] = (float)mxp_array_get_f64(obs, i * S + j) + delta;
            }
            rew[i] = y[i * K + S] * m->y_std[S] + m->y_mean[S];
        }
    /* a prediction that overflowed float32 is an error, not an output */
    const float *res = wm ? next : y;
    const int64_t rn = wm ? N * S : N * K;
    for (int64_t i = 0; s == MXP_OK && i < rn; i++)
        if (!isfinite(res[i]) || (wm && i < N && !isfinite(rew[i])))
            s = mxp_error_set(err, MXP_ERR_NONFINITE,
                              "%s: the prediction for row %lld is not finite (%s overflows "
                              "float32 on this input)",
                              mxp_dataset_label(in), (long long)(i / (wm ? S : K)),
                              wm ? "next_obs or reward" : "y");
    for (size_t i = 0; s == MXP_OK && unc && i < NK; i++)
        if (!isfinite(var[i]))
            s = mxp_error_set(err, MXP_ERR_NONFINITE,
                              "%s: the predicted variance for row %lld overflows float32",
                              mxp_dataset_label(in), (long long)(i / (size_t)K));
    mxp_dataset *o = NULL;
    if (s == MXP_OK) s = mxp_dataset_create(&o, err);
    /* [name, array] of the variances: total, aleatoric, epistemic */
    static const char *const wm_names[3][2] = {{"next_obs_var", "reward_var"},
                                               {"next_obs_aleatoric", "reward_aleatoric"},
                                               {"next_obs_epistemic", "reward_epistemic"}};
    static const char *const y_names[3] = {"y_var", "y_aleatoric", "y_epistemic"};
    float *vs[3] = {var, E > 1 ? alea : NULL, epi}; /* one model: var is aleatoric */
    if (s == MXP_OK && wm) {
        s = put(o, "next_obs", 2, N, S, next, err);
        if (s == MXP_OK) s = put(o, "reward", 1, N, 0, rew, err);
        if (s == MXP_OK && term) s = put(o, "terminal_prob", 1, N, 0, tp, err);
        for (int k = 0; k < 3 && s == MXP_OK; k++) {
            if (!vs[k]) continue;
            split_targets(vs[k], rew + N, N, S);
            s = put(o, wm_names[k][0], 2, N, S, vs[k], err);
            if (s == MXP_OK) s = put(o, wm_names[k][1], 1, N, 0, rew + N, err);
        }
    } else if (s == MXP_OK) {
        s = put(o, "y", 2, N, K, y, err);
        for (int k = 0; k < 3 && s == MXP_OK; k++)
            if (vs[k]) s = put(o, y_names[k], 2, N, K, vs[k], err);
    }
    void *bufs[] = {bx, yc, y, rew, next, alea, epi, var, tp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mxp_free(bufs[i]);
    if (s != MXP_OK) {
        mxp_dataset_destroy(o);
        return s;
    }
    *out = o;
    return MXP_OK;
}

mxp_status mxp_predictor_export_torch(mxp_predictor *p, const char *path, mxp_error *err) {
    if (!p || !path) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_predictor_export_torch");
    size_t P = mxp_model_num_params(p->model);
    float *w = mxp_calloc(P ? P : 1, sizeof(float));
    if (!w) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "export: %zu weights", P);
    mxp_status s = mxp_model_tensor_get(p->model, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, w,
                                        P * sizeof(float), err);
    mxp_st_writer *wr = NULL;
    if (s == MXP_OK) s = mxp_st_writer_create(&wr, err);
    for (int i = 0; s == MXP_OK && i < mxp_model_num_tensors(p->model); i++) {
        const mxp_tensor_info *ti = mxp_model_tensor(p->model, i);
        s = mxp_st_writer_add_tensor(wr, ti->name, MXP_DTYPE_F32, ti->ndim, ti->shape,
                                     w + ti->offset, err);
    }
    const ud_meta *m = &p->meta;
    if (s == MXP_OK && m->x_mean) {
        int64_t in = m->in_dim, on = m->out_dim;
        s = mxp_st_writer_add_tensor(wr, "x_mean", MXP_DTYPE_F32, 1, &in, m->x_mean, err);
        if (s == MXP_OK) s = mxp_st_writer_add_tensor(wr, "x_std", MXP_DTYPE_F32, 1, &in, m->x_std, err);
        if (s == MXP_OK) s = mxp_st_writer_add_tensor(wr, "y_mean", MXP_DTYPE_F32, 1, &on, m->y_mean, err);
        if (s == MXP_OK) s = mxp_st_writer_add_tensor(wr, "y_std", MXP_DTYPE_F32, 1, &on, m->y_std, err);
    }
    /* the layer list that rebuilds the nn.Sequential */
    char list[1024] = "[";
    const mxp_model_spec *sp = mxp_model_get_spec(p->model);
    for (int l = 0; l < sp->n_layers; l++) {
        size_t k = strlen(list);
        if (sp->layers[l].kind == MXP_LAYER_LINEAR || sp->layers[l].kind == MXP_LAYER_RESIDUAL)
            snprintf(list + k, sizeof list - k, "%s%s:%lld", l ? ", " : "",
                     mxp_layer_kind_name(sp->layers[l].kind), (long long)sp->layers[l].units);
        else if (sp->layers[l].kind == MXP_LAYER_DROPOUT) { /* P, read back exactly */
            const double rate = sp->layers[l].rate;
            char t[32];
            snprintf(t, sizeof t, "%.15g", rate);
            if (strtod(t, NULL) != rate) snprintf(t, sizeof t, "%.17g", rate);
            snprintf(list + k, sizeof list - k, "%sdropout:%s", l ? ", " : "", t);
        } else
            snprintf(list + k, sizeof list - k, "%s%s", l ? ", " : "",
                     mxp_layer_kind_name(sp->layers[l].kind));
    }
    strncat(list, "]", sizeof list - strlen(list) - 1);
    if (s == MXP_OK) s = mxp_st_writer_add_meta(wr, "layers", list, err);
    if (s == MXP_OK) s = mxp_st_writer_add_meta(wr, "kind", mxp_dataset_kind_name(m->kind), err);
    if (s == MXP_OK) /* gaussian: tensors max_logvar, min_logvar [1, K] too */
        s = mxp_st_writer_add_meta(wr, "head", sp->loss == MXP_LOSS_GAUSSIAN ? "gaussian"
                                                                             : "deterministic",
                                   err);
    if (s == MXP_OK && sp->termination) /* the last linear's last output: the flag's logit */
        s = mxp_st_writer_add_meta(wr, "termination", "true", err);
    char ens[16];
    snprintf(ens, sizeof ens, "%d", mxp_model_ensemble(p->model));
    if (s == MXP_OK && mxp_model_ensemble(p->model) > 1) /* tensors members.<e>.<name> */
        s = mxp_st_writer_add_meta(wr, "ensemble", ens, err);
    /* elites named by validation (a subset): "0,2,4", the members to average */
    const int E = mxp_model_ensemble(p->model);
    const uint64_t el = mxp_model_elites(p->model);
    if (s == MXP_OK && E > 1 && el != (E >= 64 ? ~0ull : (1ull << E) - 1ull)) {
        char txt[256] = "";
        for (int e = 0; e < E; e++)
            if (el >> e & 1u)
                snprintf(txt + strlen(txt), sizeof txt - strlen(txt), "%s%d", txt[0] ? "," : "", e);
        s = mxp_st_writer_add_meta(wr, "elites", txt, err);
    }
    if (s == MXP_OK) s = mxp_st_writer_write(wr, path, err);
    mxp_st_writer_destroy(wr);
    mxp_free(w);
    return s;
}
