/* models/user_data.c: the workload provider on the user's own arrays
 * (data.path, or mxp_run_options.data): world model, classifier, regressor.
 *
 * Entry points: mxp_workload_provider_dataset (run.h), ud_provider_create,
 * ud_model_spec, ud_kind_of, ud_meta_parse / _free (user_data.h).
 * Rows (docs/data.md):
 *   world model  x = [obs[e,t], actions[e,t]], y = [obs[e,t+1] - obs[e,t],
 *                rewards[e,t]] for t < lengths[e] (T without lengths),
 *                episode-major (flat transitions: their episodes, as
 *                data/transitions.h cuts them); the first n_train episodes train,
 *                n_train = round((1 - data.val_fraction) E) clamped to
 *                [1, E-1]; x and y standardised per column with the train
 *                rows' mean and population std (double, rounded to float,
 *                std floored at 1e-6), as the built-in replay buffer does
 *   classifier   x [N, D] as float32, labels y [N]; x_val/y_val, else the
 *                last rows by data.val_fraction (same rounding)
 *   regressor    x, y as float32, split the same way
 * The supervised workloads train on the raw values (no standardisation).
 */
#include "models/user_data.h"

#include "data/transitions.h"
#include "models/rollout.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct ud {
    mxp_config cfg;
    ud_meta meta;      /* kind, widths; the world model's statistics */
    int64_t max_batch;
    int64_t n_train, n_val;
    float *xtr, *ytr;  /* [n_train, in_dim], [n_train, out_dim] (world model, regressor) */
    float *xva, *yva;  /* [n_val, ...] */
    int32_t *ltr, *lva; /* classifier labels [n_train], [n_val] */
    int64_t n_val_ep;   /* world model: held-out episodes */
    int64_t *val_len;   /* [n_val_ep] their transitions (the open-loop error) */
    float *bx, *by;    /* [accum, max_batch, in_dim / out_dim] */
    int32_t *bl;       /* [accum, max_batch] */
    float *logits;     /* [E max_batch, 2 out_dim]: logits, or a regression model's outputs */
    int ens;           /* ensemble members E (model.ensemble, regression; else 1) */
    int64_t yw;        /* columns of the target rows ytr/yva/by: out_dim, + 1 with the
                          world model's termination flag (model.termination) */
    float *tw;         /* [out_dim + 1] model.target_weights parsed (ud_model_spec) */
    uint32_t *boot;    /* [E, n_train] members' bootstrap rows (E > 1), else NULL */
    char *meta_json;
} ud;

void ud_meta_free(ud_meta *m) {
    mxp_free(m->x_mean);
    mxp_free(m->x_std);
    mxp_free(m->y_mean);
    mxp_free(m->y_std);
    m->x_mean = m->x_std = m->y_mean = m->y_std = NULL;
}

bool ud_kind_of(mxp_workload w, mxp_dataset_kind *out) {
    switch (w) {
    case MXP_WORKLOAD_WORLD_MODEL: *out = MXP_DATASET_WORLD_MODEL; return true;
    case MXP_WORKLOAD_CLASSIFIER: *out = MXP_DATASET_CLASSIFIER; return true;
    case MXP_WORKLOAD_REGRESSOR: *out = MXP_DATASET_REGRESSOR; return true;
    default: return false;
    }
}

mxp_status ud_model_spec(const mxp_config *c, int64_t in_dim, int64_t out_dim, mxp_loss_kind loss,
                         int64_t max_batch, float *tw, mxp_model_spec *out, mxp_error *err) {
    const bool reg = loss == MXP_LOSS_MSE;
    const int ens = reg ? (int)c->ensemble : 1; /* regression only */
    const int64_t T = reg && c->termination ? 1 : 0; /* the termination flag's logit */
    const int64_t K = out_dim;                       /* regression targets */
    if (reg && c->head == MXP_LOSS_GAUSSIAN) { /* mean, log-variance */
        loss = MXP_LOSS_GAUSSIAN;
        out_dim *= 2;
    }
    out_dim += T;
    const bool weighted = reg && strcmp(c->target_weights, "none") != 0;
    if (weighted) {
        char what[160];
        if (c->workload == MXP_WORKLOAD_WORLD_MODEL)
            snprintf(what, sizeof what, "%lld state deltas, the reward%s", (long long)(K - 1),
                     T ? ", the termination flag" : "");
        else
            snprintf(what, sizeof what, "the %lld columns of y", (long long)K);
        if (!tw)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "ud_model_spec: no weight buffer");
        mxp_status s = mxp_model_target_weights_parse(c->target_weights, K + T, tw, NULL, what,
                                                      err);
        if (s != MXP_OK) return s;
    }
    mxp_status s = MXP_OK;
    if (strcmp(c->layers, "none") != 0)
        s = mxp_model_spec_layers(c->layers, in_dim, out_dim, loss, max_batch, out, err);
    else
        *out = mxp_model_spec_mlp(in_dim, c->hidden, (int)c->depth, out_dim, c->activation,
                                  c->layernorm, loss, max_batch);
    if (s != MXP_OK) return s;
    out->ensemble = ens;
    out->termination = (int)T;
    out->target_weights = weighted ? tw : NULL;
    return MXP_OK;
}

static void ud_destroy(void *self) {
    ud *d = self;
    if (!d) return;
    ud_meta_free(&d->meta);
    void *bufs[] = {d->xtr, d->ytr, d->xva, d->yva, d->ltr, d->lva, d->bx, d->by, d->bl,
                    d->logits, d->meta_json, d->val_len, d->boot, d->tw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mxp_free(bufs[i]);
    mxp_free(d);
}

/* ---- metadata ---------------------------------------------------------------- */

static json_t *farr(const float *v, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(a, json_real((double)v[i]));
    return a;
}

static char *meta_to_json(const ud_meta *m) {
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(mxp_dataset_kind_name(m->kind)));
    json_object_set_new(o, "in_dim", json_integer(m->in_dim));
    json_object_set_new(o, "out_dim", json_integer(m->out_dim));
    json_object_set_new(o, "state_dim", json_integer(m->state_dim));
    json_object_set_new(o, "action_dim", json_integer(m->action_dim));
    if (m->x_mean) {
        json_object_set_new(o, "x_mean", farr(m->x_mean, m->in_dim));
        json_object_set_new(o, "x_std", farr(m->x_std, m->in_dim));
        json_object_set_new(o, "y_mean", farr(m->y_mean, m->out_dim));
        json_object_set_new(o, "y_std", farr(m->y_std, m->out_dim));
    }
    /* 17 significant digits: the doubles hold floats exactly, so they read back bit-exact */
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    char *c = s ? mxp_strdup(s) : NULL;
    free(s);
    return c;
}

/* The float array o[key] of n finite values into *out; NULL *why on success. */
static bool get_farr(json_t *o, const char *key, int64_t n, float **out, const char **why) {
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || (int64_t)json_array_size(a) != n) {
        *why = "a statistic is missing or has the wrong length";
        return false;
    }
    float *v = mxp_calloc((size_t)n, sizeof *v);
    if (!v) {
        *why = "out of memory";
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        json_t *x = json_array_get(a, (size_t)i);
        double d = json_is_number(x) ? json_number_value(x) : NAN;
        if (!isfinite(d) || fabs(d) > FLT_MAX) {
            mxp_free(v);
            *why = "a statistic is not a finite float32 number";
            return false;
        }
        v[i] = (float)d;
    }
    *out = v;
    return true;
}

/* Could training have computed mean and std [n] (col_stats) from float32
 * data? std >= the 1e-6 floor; and a column that is not constant (std above
 * the floor) cannot spread less than its values' rounding step allows:
 * std >= |mean| 2^-24 (one float32 ulp, relative) / 2^16 (up to 2^32 rows). */
static bool stats_plausible(const float *mean, const float *std, int64_t n) {
    const float floor_std = (float)1e-6;
    for (int64_t i = 0; i < n; i++) {
        if (!(std[i] >= floor_std)) return false;
        if (std[i] > floor_std && (double)std[i] < fabs((double)mean[i]) * 0x1p-40) return false;
    }
    return true;
}

static bool known_key(const char *k) {
    static const char *const keys[] = {"kind",   "in_dim", "out_dim", "state_dim", "action_dim",
                                       "x_mean", "x_std",  "y_mean",  "y_std"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(k, keys[i]) == 0) return true;
    return false;
}

static int64_t get_int(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

mxp_status ud_meta_parse(const char *text, const char *label, ud_meta *out, mxp_error *err) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *o = text ? json_loads(text, JSON_REJECT_DUPLICATES, &je) : NULL;
    const char *why = !text ? "it is missing" : "it is not a JSON object";
    bool ok = json_is_object(o);
    const char *key;
    json_t *val;
    if (ok) {
        json_object_foreach(o, key, val) {
            if (!known_key(key)) {
                ok = false;
                why = "it has a key other than kind, in_dim, out_dim, state_dim, action_dim, "
                      "x_mean, x_std, y_mean, y_std";
                break;
            }
        }
    }
    const char *kind = ok ? json_string_value(json_object_get(o, "kind")) : NULL;
    int k = 0;
    for (; kind && k < MXP_DATASET_KIND_COUNT; k++)
        if (strcmp(kind, mxp_dataset_kind_name((mxp_dataset_kind)k)) == 0) break;
    if (ok && (!kind || k == MXP_DATASET_KIND_COUNT)) {
        ok = false;
        why = "'kind' is not world_model, classifier or regressor";
    }
    if (ok) {
        out->kind = (mxp_dataset_kind)k;
        out->in_dim = get_int(o, "in_dim");
        out->out_dim = get_int(o, "out_dim");
        out->state_dim = get_int(o, "state_dim");
        out->action_dim = get_int(o, "action_dim");
        ok = out->in_dim >= 1 && out->out_dim >= 1 && out->in_dim <= INT32_MAX &&
             out->out_dim <= INT32_MAX;
        if (out->kind == MXP_DATASET_WORLD_MODEL) /* bounded before they are added */
            ok = ok && out->state_dim >= 1 && out->action_dim >= 1 &&
                 out->state_dim <= INT32_MAX && out->action_dim <= INT32_MAX &&
                 out->in_dim == out->state_dim + out->action_dim &&
                 out->out_dim == out->state_dim + 1;
        else /* the supervised kinds record no statistics */
            ok = ok && out->state_dim == 0 && out->action_dim == 0 &&
                 !json_object_get(o, "x_mean") && !json_object_get(o, "x_std") &&
                 !json_object_get(o, "y_mean") && !json_object_get(o, "y_std");
        if (out->kind == MXP_DATASET_CLASSIFIER) ok = ok && out->out_dim >= 2;
        if (!ok)
            why = "the widths in_dim, out_dim, state_dim, action_dim do not fit the kind (world "
                  "model: in = S + A, out = S + 1; others: S = A = 0 and no statistics)";
    }
    if (ok && out->kind == MXP_DATASET_WORLD_MODEL) {
        ok = get_farr(o, "x_mean", out->in_dim, &out->x_mean, &why) &&
             get_farr(o, "x_std", out->in_dim, &out->x_std, &why) &&
             get_farr(o, "y_mean", out->out_dim, &out->y_mean, &why) &&
             get_farr(o, "y_std", out->out_dim, &out->y_std, &why);
        if (ok && !(stats_plausible(out->x_mean, out->x_std, out->in_dim) &&
                    stats_plausible(out->y_mean, out->y_std, out->out_dim))) {
            ok = false;
            why = "a standardisation statistic is not one training computes (std >= 1e-6, "
                  "and a non-constant column's std >= |mean| * 2^-40)";
        }
    }
    if (o) json_decref(o);
    if (!ok) {
        ud_meta_free(out);
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: metadata 'workload_meta' is malformed: %s (a checkpoint of a "
                             "user-data run records kind, widths and, for the world model, its "
                             "standardisation statistics)",
                             label, why);
    }
    return MXP_OK;
}

/* ---- rows ---------------------------------------------------------------------- */

/* n_train of n items: round((1 - vf) n) clamped to [1, n-1]. */
static int64_t split_count(int64_t n, double vf) {
    int64_t k = (int64_t)llround((1.0 - vf) * (double)n);
    if (k < 1) k = 1;
    if (k > n - 1) k = n - 1;
    return k;
}

/* Per-column mean and population std of v [n, w] (double, std >= 1e-6). */
static void col_stats(const float *v, int64_t n, int64_t w, float *mean, float *std) {
    for (int64_t j = 0; j < w; j++) {
        double s = 0, q = 0;
        for (int64_t i = 0; i < n; i++) s += v[i * w + j];
        double m = s / (double)n;
        for (int64_t i = 0; i < n; i++) q += (v[i * w + j] - m) * (v[i * w + j] - m);
        double sd = sqrt(q / (double)n);
        mean[j] = (float)m;
        std[j] = (float)(sd < 1e-6 ? 1e-6 : sd);
    }
}

static void standardise(float *v, int64_t n, int64_t w, const float *mean, const float *std) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < w; j++) v[i * w + j] = (v[i * w + j] - mean[j]) / std[j];
}

static float *falloc(int64_t rows, int64_t w) {
    size_t n;
    if (rows < 0 || w < 0 || !mxp_size_mul((size_t)rows, (size_t)w, &n)) return NULL;
    return mxp_calloc(n ? n : 1, sizeof(float));
}

/* Rows *y [n, w] of episodes [e0, e1) widened to [n, w + 1], each row's
 * last column its transition's termination flag (wm_episode_terminals). */
static bool add_flags(float **y, const wm_episodes *w, int64_t e0, int64_t e1, int64_t n,
                      int64_t cols) {
    float *wide = falloc(n, cols + 1);
    if (!wide) return false;
    for (int64_t i = 0; i < n; i++)
        memcpy(wide + i * (cols + 1), *y + i * cols, (size_t)cols * sizeof(float));
    wm_episode_terminals(w, e0, e1, wide + cols, cols + 1);
    mxp_free(*y);
    *y = wide;
    return true;
}

/* Episodes of either layout (data/transitions.h), split by episode. */
static mxp_status build_world(ud *d, const mxp_dataset *ds, const wm_episodes *w,
                              const ud_meta *fixed, bool eval_all, mxp_error *err) {
    int64_t E = w->E, S = w->S, A = w->A;
    int64_t e_tr = eval_all ? 0 : split_count(E, d->cfg.data.val_fraction);
    int64_t ntr = 0;
    for (int64_t e = 0; e < e_tr; e++) ntr += wm_episode_len(w, e);
    d->n_train = ntr;
    d->n_val = w->transitions - ntr;
    d->meta.state_dim = S;
    d->meta.action_dim = A;
    d->meta.in_dim = S + A;
    d->meta.out_dim = S + 1;
    d->xtr = falloc(ntr, S + A);
    d->ytr = falloc(ntr, S + 1);
    d->xva = falloc(d->n_val, S + A);
    d->yva = falloc(d->n_val, S + 1);
    d->meta.x_mean = falloc(1, S + A);
    d->meta.x_std = falloc(1, S + A);
    d->meta.y_mean = falloc(1, S + 1);
    d->meta.y_std = falloc(1, S + 1);
    d->n_val_ep = E - e_tr;
    d->val_len = mxp_calloc((size_t)(E - e_tr), sizeof(int64_t));
    if (!d->xtr || !d->ytr || !d->xva || !d->yva || !d->meta.x_mean || !d->meta.x_std ||
        !d->meta.y_mean || !d->meta.y_std || !d->val_len)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %lld transitions",
                             mxp_dataset_label(ds), (long long)w->transitions);
    wm_episode_rows(w, 0, e_tr, d->xtr, d->ytr);
    wm_episode_rows(w, e_tr, E, d->xva, d->yva);
    for (int64_t e = e_tr; e < E; e++) d->val_len[e - e_tr] = wm_episode_len(w, e);
    if (fixed && !eval_all) {
        /* the run's own data: its training split gives the statistics back
         * bit for bit (17 digits), unless the file or the checkpoint changed */
        col_stats(d->xtr, ntr, S + A, d->meta.x_mean, d->meta.x_std);
        col_stats(d->ytr, ntr, S + 1, d->meta.y_mean, d->meta.y_std);
        if (memcmp(d->meta.x_mean, fixed->x_mean, (size_t)(S + A) * sizeof(float)) != 0 ||
            memcmp(d->meta.x_std, fixed->x_std, (size_t)(S + A) * sizeof(float)) != 0 ||
            memcmp(d->meta.y_mean, fixed->y_mean, (size_t)(S + 1) * sizeof(float)) != 0 ||
            memcmp(d->meta.y_std, fixed->y_std, (size_t)(S + 1) * sizeof(float)) != 0)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: the training split's standardisation statistics differ "
                                 "from those the checkpoint records: the file changed since "
                                 "training, or the checkpoint was edited; accepted: the data "
                                 "the run trained on (or eval --data FILE)",
                                 mxp_dataset_label(ds));
    }
    if (fixed) {
        memcpy(d->meta.x_mean, fixed->x_mean, (size_t)(S + A) * sizeof(float));
        memcpy(d->meta.x_std, fixed->x_std, (size_t)(S + A) * sizeof(float));
        memcpy(d->meta.y_mean, fixed->y_mean, (size_t)(S + 1) * sizeof(float));
        memcpy(d->meta.y_std, fixed->y_std, (size_t)(S + 1) * sizeof(float));
    } else {
        col_stats(d->xtr, ntr, S + A, d->meta.x_mean, d->meta.x_std);
        col_stats(d->ytr, ntr, S + 1, d->meta.y_mean, d->meta.y_std);
    }
    standardise(d->xtr, ntr, S + A, d->meta.x_mean, d->meta.x_std);
    standardise(d->ytr, ntr, S + 1, d->meta.y_mean, d->meta.y_std);
    standardise(d->xva, d->n_val, S + A, d->meta.x_mean, d->meta.x_std);
    standardise(d->yva, d->n_val, S + 1, d->meta.y_mean, d->meta.y_std);
    if (d->yw > S + 1) /* model.termination: the raw 0/1 flag after the standardised targets */
        if (!add_flags(&d->ytr, w, 0, e_tr, ntr, S + 1) ||
            !add_flags(&d->yva, w, e_tr, E, d->n_val, S + 1))
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: termination flags",
                                 mxp_dataset_label(ds));
    return MXP_OK;
}

/* Rows [r0, r0 + n) of x (and y) into dst arrays. */
static void sup_rows(const mxp_array *x, const mxp_array *y, bool cls, int64_t r0, int64_t n,
                     float *dx, float *dy, int32_t *dl) {
    int64_t D = x->shape[1];
    mxp_array_to_f32(x, r0 * D, n * D, dx);
    if (cls)
        for (int64_t i = 0; i < n; i++) dl[i] = (int32_t)mxp_array_get_i64(y, r0 + i);
    else
        mxp_array_to_f32(y, r0 * y->shape[1], n * y->shape[1], dy);
}

static mxp_status build_supervised(ud *d, const mxp_dataset *ds, const mxp_dataset_layout *lay,
                                   bool eval_all, mxp_error *err) {
    bool cls = d->meta.kind == MXP_DATASET_CLASSIFIER;
    const mxp_array *x = mxp_dataset_find(ds, "x"), *y = mxp_dataset_find(ds, "y"),
                    *xv = mxp_dataset_find(ds, "x_val"), *yv = mxp_dataset_find(ds, "y_val");
    int64_t D = lay->in_dim, K = cls ? 1 : lay->out_dim;
    int64_t ntr, nva;
    if (eval_all) {
        ntr = 0;
        nva = lay->n + lay->n_val;
    } else if (xv) {
        ntr = lay->n;
        nva = lay->n_val;
    } else {
        ntr = split_count(lay->n, d->cfg.data.val_fraction);
        nva = lay->n - ntr;
    }
    d->n_train = ntr;
    d->n_val = nva;
    d->xtr = falloc(ntr, D);
    d->xva = falloc(nva, D);
    if (cls) {
        d->ltr = mxp_calloc((size_t)ntr + 1, sizeof(int32_t));
        d->lva = mxp_calloc((size_t)nva + 1, sizeof(int32_t));
    } else {
        d->ytr = falloc(ntr, K);
        d->yva = falloc(nva, K);
    }
    if (!d->xtr || !d->xva || (cls ? !d->ltr || !d->lva : !d->ytr || !d->yva))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %lld rows", mxp_dataset_label(ds),
                             (long long)(ntr + nva));
    if (eval_all) {
        sup_rows(x, y, cls, 0, lay->n, d->xva, d->yva, d->lva);
        if (xv)
            sup_rows(xv, yv, cls, 0, lay->n_val, d->xva + lay->n * D,
                     d->yva ? d->yva + lay->n * K : NULL, d->lva ? d->lva + lay->n : NULL);
    } else if (xv) {
        sup_rows(x, y, cls, 0, ntr, d->xtr, d->ytr, d->ltr);
        sup_rows(xv, yv, cls, 0, nva, d->xva, d->yva, d->lva);
    } else {
        sup_rows(x, y, cls, 0, ntr, d->xtr, d->ytr, d->ltr);
        sup_rows(x, y, cls, ntr, nva, d->xva, d->yva, d->lva);
    }
    return MXP_OK;
}

/* ---- provider callbacks ----------------------------------------------------- */

static mxp_status ud_spec(void *self, mxp_model_spec *out, mxp_error *err) {
    ud *d = self;
    return ud_model_spec(&d->cfg, d->meta.in_dim, d->meta.out_dim,
                         d->meta.kind == MXP_DATASET_CLASSIFIER ? MXP_LOSS_XENT : MXP_LOSS_MSE,
                         d->max_batch, d->tw, out, err);
}

static int64_t ud_num_train(void *self) { return ((ud *)self)->n_train; }

static mxp_status ud_fill(void *self, int slot, const uint32_t *idx, int64_t n, mxp_batch *out,
                          mxp_error *err) {
    (void)err;
    ud *d = self;
    const int64_t D = d->meta.in_dim, K = d->yw;
    float *bx = d->bx + (size_t)slot * (size_t)d->max_batch * (size_t)D;
    float *by = d->by + (size_t)slot * (size_t)d->max_batch * (size_t)K;
    int32_t *bl = d->bl + (size_t)slot * (size_t)d->max_batch;
    if (d->ens > 1) { /* member e's rows of its bootstrap at [e n, (e+1) n) */
        bx = d->bx + (size_t)slot * (size_t)d->ens * (size_t)d->max_batch * (size_t)D;
        by = d->by + (size_t)slot * (size_t)d->ens * (size_t)d->max_batch * (size_t)K;
        ud_fill_members(d->xtr, d->ytr, D, K, d->boot, d->ens, d->n_train, idx, n, bx, by);
        *out = (mxp_batch){.x = bx, .y = by, .labels = NULL, .B = d->ens * n};
        return MXP_OK;
    }
    for (int64_t b = 0; b < n; b++) {
        memcpy(bx + b * D, d->xtr + (size_t)idx[b] * (size_t)D, (size_t)D * sizeof(float));
        if (d->ltr)
            bl[b] = d->ltr[idx[b]];
        else
            memcpy(by + b * K, d->ytr + (size_t)idx[b] * (size_t)K, (size_t)K * sizeof(float));
    }
    *out = (mxp_batch){.x = bx, .y = d->ltr ? NULL : by, .labels = d->ltr ? bl : NULL, .B = n};
    return MXP_OK;
}

static mxp_status ud_canary(void *self, int64_t rows, mxp_batch *out, mxp_error *err) {
    (void)err;
    ud *d = self;
    int64_t pb = rows < d->max_batch ? rows : d->max_batch;
    if (pb > d->n_val) pb = d->n_val;
    pb -= pb % d->ens; /* an ensemble: pb / E rows for each member */
    *out = (mxp_batch){.x = d->xva, .y = d->lva ? NULL : d->yva, .labels = d->lva, .B = pb};
    return MXP_OK;
}

/* Mean loss (MSE over standardised targets for the world model, as the
 * training loss, or a Gaussian head's NLL, with the MSE of the mean:
 * ud_eval_regression; the open-loop errors on the held-out episodes,
 * rollout.c; cross-entropy and top-1 accuracy for the classifier). */
static mxp_status ud_evaluate(void *self, mxp_model *m, mxp_run_eval *out, mxp_error *err) {
    ud *d = self;
    const int64_t D = d->meta.in_dim, K = d->meta.out_dim;
    for (int i = 0; i < MXP_OPEN_LOOP_N; i++) out->open_loop[i] = NAN;
    int64_t mb = mxp_model_get_spec(m)->max_batch;
    if (mb > d->max_batch) mb = d->max_batch;
    double total = 0;
    int64_t correct = 0;
    for (int64_t i = 0; i < d->n_val; i += mb) {
        int64_t B = d->n_val - i < mb ? d->n_val - i : mb;
        mxp_status s;
        if (d->lva) {
            if ((s = mxp_model_predict(m, d->xva + i * D, B, d->logits, err)) != MXP_OK) return s;
            for (int64_t b = 0; b < B; b++) {
                const float *z = d->logits + b * K;
                int32_t lab = d->lva[i + b];
                int64_t best = 0;
                for (int64_t c = 1; c < K; c++)
                    if (z[c] > z[best]) best = c;
                double se = 0;
                for (int64_t c = 0; c < K; c++) se += exp((double)z[c] - (double)z[best]);
                total += (double)z[best] + log(se) - (double)z[lab];
                correct += best == lab;
            }
        } else {
            break; /* regression: ud_eval_regression below */
        }
    }
    snprintf(out->name, sizeof out->name, "val");
    out->loss = d->n_val ? total / (double)d->n_val : NAN;
    out->mse = NAN;
    out->bce = NAN;
    out->accuracy = d->lva && d->n_val ? (double)correct / (double)d->n_val : NAN;
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    if (!d->lva) {
        mxp_status s = sp->termination || sp->target_weights
                           ? ud_eval_head(m, d->xva, d->yva, d->n_val, mb, d->logits, out, err)
                           : ud_eval_regression(m, d->xva, d->yva, d->n_val, mb, d->logits, out,
                                                err);
        if (s != MXP_OK) return s;
    }
    out->bits_per_char = NAN;
    if (!d->val_len) return MXP_OK;
    const wm_rollout_src src = {.x = d->xva,
                                .y = d->yva,
                                .S = d->meta.state_dim,
                                .A = d->meta.action_dim,
                                .n_ep = d->n_val_ep,
                                .len = d->val_len,
                                .T = 0,
                                .x_mean = d->meta.x_mean,
                                .x_std = d->meta.x_std,
                                .y_mean = d->meta.y_mean,
                                .y_std = d->meta.y_std,
                                .y_cols = d->yw};
    return wm_open_loop_error(m, &src, mb, out->open_loop, err);
}

static void ud_signature(void *self, char *buf, size_t n) {
    ud *d = self;
    snprintf(buf, n, "user %s in=%lld out=%lld train=%lld val=%lld",
             mxp_dataset_kind_name(d->meta.kind), (long long)d->meta.in_dim,
             (long long)d->meta.out_dim, (long long)d->n_train, (long long)d->n_val);
}

static const char *ud_checkpoint_meta(void *self) { return ((ud *)self)->meta_json; }

static mxp_status ud_auto(void *self, mxp_trainer *t, const mxp_guard_config *g, mxp_error *err) {
    ud *d = self;
    if (d->ltr)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "training.precision=auto: not available for the classifier on user "
                             "data; accepted: an explicit training.precision");
    if (d->ens > 1)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "training.precision=auto: not available for ensembles "
                             "(model.ensemble=%d); accepted: an explicit training.precision",
                             d->ens);
    return mxp_guard_auto_precision(t, g, d->xtr, d->ytr, d->n_train, d->max_batch, NULL, err);
}

mxp_status ud_provider_create(const mxp_config *cfg, const mxp_dataset *ds, const ud_meta *fixed,
                              bool eval_all, mxp_workload_provider *out, mxp_error *err) {
    mxp_dataset_kind kind;
    if (!ud_kind_of(cfg->workload, &kind))
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "model.workload=gpt does not train on data.path / in-memory arrays; "
                             "accepted: world_model, classifier, regressor");
    mxp_dataset_layout lay;
    mxp_status s = mxp_dataset_check(ds, kind, &lay, err);
    if (s != MXP_OK) return s;
    if (fixed && fixed->kind != kind)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: the model is a %s, the data is for a %s",
                             mxp_dataset_label(ds), mxp_dataset_kind_name(fixed->kind),
                             mxp_dataset_kind_name(kind));
    /* the data's widths against the model's, before anything is sized from
     * either (a narrower y would be read past its end, a wider one misread) */
    if (fixed) {
        const bool cls = kind == MXP_DATASET_CLASSIFIER, wm = kind == MXP_DATASET_WORLD_MODEL;
        int64_t din = wm ? lay.state_dim + lay.action_dim : lay.in_dim;
        int64_t dout = wm ? lay.state_dim + 1 : lay.out_dim;
        bool bad = wm ? lay.state_dim != fixed->state_dim || lay.action_dim != fixed->action_dim
                      : din != fixed->in_dim || (cls ? dout > fixed->out_dim
                                                     : dout != fixed->out_dim);
        if (bad && wm)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: the data has %lld state and %lld action columns; the model "
                                 "was trained on %lld and %lld",
                                 mxp_dataset_label(ds), (long long)lay.state_dim,
                                 (long long)lay.action_dim, (long long)fixed->state_dim,
                                 (long long)fixed->action_dim);
        if (bad)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: the data has %lld inputs and %lld %s; the model takes %lld "
                                 "and gives %lld",
                                 mxp_dataset_label(ds), (long long)din, (long long)dout,
                                 cls ? "classes" : "targets", (long long)fixed->in_dim,
                                 (long long)fixed->out_dim);
    }
    ud *d = mxp_calloc(1, sizeof *d);
    if (!d) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "user data");
    d->cfg = *cfg;
    d->meta.kind = kind;
    d->max_batch = cfg->batch_size > 256 ? cfg->batch_size : 256;
    if (kind == MXP_DATASET_WORLD_MODEL) {
        wm_episodes w;
        s = wm_episodes_open(ds, &w, err);
        d->yw = lay.state_dim + 1 + (cfg->termination ? 1 : 0);
        if (s == MXP_OK && cfg->termination)
            s = wm_episodes_check_terminals(&w, mxp_dataset_label(ds), err);
        if (s == MXP_OK) s = build_world(d, ds, &w, fixed, eval_all, err);
        wm_episodes_close(&w);
    } else {
        d->meta.in_dim = lay.in_dim;
        /* a classifier's labels may use fewer classes than the model has */
        d->meta.out_dim = fixed ? fixed->out_dim : lay.out_dim;
        d->yw = d->meta.out_dim;
        s = build_supervised(d, ds, &lay, eval_all, err);
    }
    if (s == MXP_OK && !eval_all && d->n_val < 1)
        s = mxp_error_set(err, MXP_ERR_CONFIG,
                          "%s: data.val_fraction=%g leaves no validation rows; accepted: a "
                          "larger data.val_fraction or x_val/y_val",
                          mxp_dataset_label(ds), cfg->data.val_fraction);
    d->ens = kind != MXP_DATASET_CLASSIFIER && cfg->ensemble > 1 ? (int)cfg->ensemble : 1;
    if (s == MXP_OK && (cfg->grad_accum_steps > 0 ? cfg->grad_accum_steps : 1) >
                           INT64_MAX / d->ens / d->max_batch)
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers overflow");
    if (s == MXP_OK) {
        const int64_t acc = cfg->grad_accum_steps > 0 ? cfg->grad_accum_steps : 1;
        d->bx = falloc(acc * d->ens * d->max_batch, d->meta.in_dim);
        d->by = falloc(acc * d->ens * d->max_batch, d->yw);
        d->bl = mxp_calloc((size_t)(acc * d->max_batch), sizeof(int32_t));
        d->logits = falloc(d->ens * d->max_batch, 2 * d->meta.out_dim + 1);
        d->tw = falloc(1, d->meta.out_dim + 1);
        d->meta_json = meta_to_json(&d->meta);
        if (!d->bx || !d->by || !d->bl || !d->logits || !d->tw || !d->meta_json)
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "user data batch buffers");
    }
    if (s == MXP_OK && d->ens > 1 && d->n_train > 0 &&
        !(d->boot = ud_bootstrap(d->ens, d->n_train, cfg->seed)))
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "bootstrap of %d members", d->ens);
    if (s != MXP_OK) {
        ud_destroy(d);
        return s;
    }
    *out = (mxp_workload_provider){.self = d,
                                   .name = mxp_dataset_kind_name(kind),
                                   .model_spec = ud_spec,
                                   .num_train = ud_num_train,
                                   .rows_per_sample = 1,
                                   .fill_batch = ud_fill,
                                   .canary_batch = ud_canary,
                                   .evaluate = ud_evaluate,
                                   .data_signature = ud_signature,
                                   .auto_precision = ud_auto,
                                   .destroy = ud_destroy,
                                   .checkpoint_meta = ud_checkpoint_meta};
    return MXP_OK;
}

mxp_status mxp_workload_provider_dataset(const mxp_config *cfg, const mxp_dataset *data,
                                         mxp_workload_provider *out, mxp_error *err) {
    if (!cfg || !data || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_workload_provider_dataset: NULL");
    return ud_provider_create(cfg, data, NULL, false, out, err);
}
