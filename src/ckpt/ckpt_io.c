/* ckpt/ckpt_io.c: save a trainer (model, optimizer, scaler, counters) as
 * a checkpoint, verify one, and load one into a trainer of any precision.
 *
 * Entry points: mxp_ckpt_save, mxp_ckpt_check, mxp_ckpt_check_spec,
 * mxp_ckpt_verify, mxp_ckpt_load, mxp_ckpt_load_file.
 *
 * Tensors: the model's parameter tensors under their own names (FP32
 * master, or the 16-bit work weights in pure modes, exactly as trained),
 * then optim.m.<name> and optim.v.<name> (FP32): the trainer's named
 * tensors in its enumeration order (train.h). The tensors are reached only
 * by copy (docs/design.md "Who owns memory"): a save gets each group with
 * one mxp_trainer_tensor_get of its whole slab, which the writer then sends
 * with a single write(); a load assembles each group on the host and sets
 * it with one mxp_trainer_tensor_set. Loading is transactional:
 * every check (checksums, dtypes, finiteness, names, shapes, optimizer
 * kind, range of the target format) runs before the first byte of the
 * trainer changes.
 */
#include "ckpt/ckpt_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mixprec/api.h> /* MIXPREC_VERSION_STRING */

#define OPT_M "optim.m."
#define OPT_V "optim.v."
#define FP8_STATE "fp8.scaling" /* FP8 delayed-scaling state (amp.h), mode fp8 only */

/* Dtype the weight tensors of a checkpoint written in mode p have. */
static mxp_dtype weights_dtype_of(mxp_precision p) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    return pol.has_master ? MXP_DTYPE_F32 : pol.weight;
}

static bool all_finite_f32(const float *x, size_t n) {
    return ckpt_all_finite(MXP_DTYPE_F32, x, n);
}

/* ---- save ---------------------------------------------------------------- */

static mxp_status add_meta(mxp_st_writer *w, const char *k, const char *v, mxp_error *err) {
    if (!v) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint metadata '%s'", k);
    return mxp_st_writer_add_meta(w, k, v, err);
}

static mxp_status add_metaf(mxp_st_writer *w, const char *k, mxp_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static mxp_status add_metaf(mxp_st_writer *w, const char *k, mxp_error *err, const char *fmt, ...) {
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return mxp_st_writer_add_meta(w, k, buf, err);
}

/* The metadata of a save (see ckpt_meta.c for the keys). */
static mxp_status save_meta(mxp_st_writer *w, const mxp_ckpt_save_args *a, mxp_dtype wdt,
                            bool healthy, mxp_error *err) {
    mxp_trainer *t = a->trainer;
    mxp_trainer_state ts;
    mxp_trainer_get_state(t, &ts);
    const mxp_trainer_config *tc = mxp_trainer_get_config(t);
    const mxp_scaler *sc = mxp_trainer_scaler(t);
    mxp_scaler_state ss;
    mxp_scaler_get_state(sc, &ss);
    mxp_data_position pos = {0};
    if (a->pos) pos = *a->pos;
    char rng[96];
    snprintf(rng, sizeof rng, "{\"seed\":\"%llu\",\"sr_counter\":\"%llu\"}",
             (unsigned long long)tc->seed, (unsigned long long)ts.sr_counter);
    char *scaler =
        ckpt_scaler_to_json(mxp_scaler_get_config(sc)->enabled, &ss, mxp_scaler_get_config(sc));
    char *position = ckpt_position_to_json(&pos);
    char *config = a->config ? ckpt_config_to_json(a->config) : NULL;
    char *groups = mxp_trainer_scaler_groups_json(t); /* per-layer loss scaling, or NULL */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    mxp_status s = MXP_OK;
#define TRY(expr)                                                                                  \
    if (s == MXP_OK) s = (expr)
    TRY(add_meta(w, "format", MXP_CKPT_FORMAT_NAME, err));
    TRY(add_metaf(w, "format_version", err, "%d", MXP_CKPT_FORMAT_VERSION));
    TRY(add_meta(w, "mixprec_version", MIXPREC_VERSION_STRING, err));
    TRY(add_metaf(w, "step", err, "%lld", (long long)ts.training_steps));
    TRY(add_metaf(w, "optimizer_step", err, "%lld", (long long)ts.optimizer_steps));
    TRY(add_metaf(w, "skipped_steps", err, "%lld", (long long)ts.skipped_steps));
    TRY(add_metaf(w, "epoch", err, "%lld", (long long)ts.epoch));
    TRY(add_meta(w, "precision", mxp_precision_name(mxp_model_policy(mxp_trainer_model(t))->mode),
                 err));
    TRY(add_meta(w, "weight_dtype", ckpt_st_dtype_name(wdt), err));
    TRY(add_meta(w, "optimizer", mxp_optim_kind_name(tc->optim.kind), err));
    TRY(add_metaf(w, "lr", err, "%.9g", (double)ts.lr));
    TRY(add_meta(w, "rng", rng, err));
    TRY(add_meta(w, "scaler", scaler, err));
    if (groups) TRY(add_meta(w, "scaler_groups", groups, err));
    TRY(add_meta(w, "data_position", position, err));
    if (a->config) TRY(add_meta(w, "config", config, err));
    TRY(add_meta(w, "healthy", healthy ? "true" : "false", err));
    TRY(add_meta(w, "guard_state", a->guard_state ? a->guard_state : "{}", err));
    if (a->run_id) TRY(add_meta(w, "run_id", a->run_id, err));
    if (a->workload) TRY(add_meta(w, "workload", a->workload, err));
    if (a->data_signature) TRY(add_meta(w, "data_signature", a->data_signature, err));
    if (a->workload_meta) TRY(add_meta(w, "workload_meta", a->workload_meta, err));
    if (a->run_state) TRY(add_meta(w, "run_state", a->run_state, err));
    TRY(add_metaf(w, "saved_at", err, "%lld.%03ld", (long long)now.tv_sec, now.tv_nsec / 1000000));
#undef TRY
    mxp_free(scaler);
    mxp_free(groups);
    mxp_free(position);
    mxp_free(config);
    return s;
}

/* The host copies a save writes from: one get per role (parameters of
 * record, optim.m, optim.v), so each group stays one contiguous slab that
 * the writer sends with a single write(). */
typedef struct save_slabs {
    unsigned char *slab[3]; /* by pass: weights (wdt), m, v (F32); v NULL for SGD */
    mxp_dtype dt[3];
} save_slabs;

static void save_slabs_free(save_slabs *h) {
    for (int i = 0; i < 3; i++) mxp_free(h->slab[i]);
}

static mxp_status save_slabs_get(mxp_trainer *t, save_slabs *h, mxp_error *err) {
    static const mxp_tensor_role roles[3] = {MXP_TENSOR_PARAM, MXP_TENSOR_OPTIM_M,
                                             MXP_TENSOR_OPTIM_V};
    const size_t P = mxp_model_num_params(mxp_trainer_model(t));
    mxp_status s = MXP_OK;
    for (int i = 0; i < 3 && s == MXP_OK; i++) {
        const size_t bytes = mxp_trainer_tensor_bytes(t, roles[i]);
        if (!bytes) continue; /* SGD: no second moment */
        if ((s = mxp_trainer_tensor_dtype(t, roles[i], &h->dt[i], err)) != MXP_OK) break;
        h->slab[i] = mxp_calloc(bytes, 1);
        if (!h->slab[i])
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint: %zu %s values", P,
                                 mxp_tensor_role_name(roles[i]));
        s = mxp_trainer_tensor_get(t, roles[i], NULL, h->dt[i], h->slab[i], bytes, err);
    }
    return s;
}

mxp_status mxp_ckpt_save(const char *path, const mxp_ckpt_save_args *a, bool *healthy_out,
                         mxp_error *err) {
    if (!path || !a || !a->trainer)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_save: NULL path or trainer");
    mxp_trainer *t = a->trainer;
    mxp_model *model = mxp_trainer_model(t);
    const size_t n = mxp_model_num_params(model);
    save_slabs h = {0};
    mxp_status s = save_slabs_get(t, &h, err);
    if (s != MXP_OK) {
        save_slabs_free(&h);
        return s;
    }
    const mxp_dtype wdt = h.dt[0];
    const float *m = (const float *)h.slab[1], *v = (const float *)h.slab[2];

    bool healthy = a->healthy;
    if (!ckpt_all_finite(wdt, h.slab[0], n) || !all_finite_f32(m, n) ||
        (v && !all_finite_f32(v, n)))
        healthy = false;
    size_t hn;
    const mxp_history_row *hist = mxp_trainer_history(t, &hn);
    if (hn && !isfinite(hist[hn - 1].loss)) healthy = false;

    mxp_st_writer *w = NULL;
    s = mxp_st_writer_create(&w, err);
    if (s != MXP_OK) {
        save_slabs_free(&h);
        return s;
    }
    /* the trainer's tensors in checkpoint order: weights, optim.m., optim.v. */
    const int nt = mxp_trainer_num_tensors(t);
    for (int i = 0; i < nt && s == MXP_OK; i++) {
        mxp_tensor_desc d;
        if ((s = mxp_trainer_tensor_desc(t, i, &d, err)) != MXP_OK) break;
        const int pass = d.role == MXP_TENSOR_PARAM ? 0 : d.role == MXP_TENSOR_OPTIM_M ? 1 : 2;
        const void *data = h.slab[pass] + d.offset * mxp_dtype_info(d.dtype)->size;
        s = mxp_st_writer_add_tensor(w, d.name, d.dtype, d.ndim, d.shape, data, err);
    }
    /* FP8 delayed scaling: scales and amax histories, and the step count */
    mxp_fp8_scaling *fp8 = mxp_model_fp8(model);
    float *fp8_state = NULL;
    if (s == MXP_OK && fp8) {
        int64_t fn = (int64_t)mxp_fp8_scaling_state_size(fp8);
        fp8_state = mxp_calloc((size_t)fn, sizeof(float));
        if (!fp8_state) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "fp8 scaling state");
        if (s == MXP_OK) {
            mxp_fp8_scaling_get_state(fp8, fp8_state);
            s = mxp_st_writer_add_tensor(w, FP8_STATE, MXP_DTYPE_F32, 1, &fn, fp8_state, err);
        }
        if (s == MXP_OK)
            s = add_metaf(w, "fp8_steps", err, "%lld", (long long)mxp_fp8_scaling_steps(fp8));
    }
    if (s == MXP_OK) s = save_meta(w, a, wdt, healthy, err);
    if (s == MXP_OK) s = mxp_st_writer_write(w, path, err);
    mxp_free(fp8_state);
    mxp_st_writer_destroy(w);
    save_slabs_free(&h);
    if (s == MXP_OK && healthy_out) *healthy_out = healthy;
    return s;
}

/* ---- verification ----------------------------------------------------------- */

static bool is_moment(const char *name, const char **base) {
    if (strncmp(name, OPT_M, strlen(OPT_M)) == 0) {
        *base = name + strlen(OPT_M);
        return true;
    }
    if (strncmp(name, OPT_V, strlen(OPT_V)) == 0) {
        *base = name + strlen(OPT_V);
        return true;
    }
    return false;
}

/* Training state that is neither a weight nor an optimizer moment. */
static bool is_state(const char *name) { return strncmp(name, "fp8.", 4) == 0; }

static bool same_shape(const mxp_st_tensor *a, int ndim, const int64_t *shape) {
    if (a->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (a->shape[d] != shape[d]) return false;
    return true;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* AdamW's second moment is a running mean of squared gradients: a negative
 * element (-0 aside) is corruption, and would train into NaN through
 * sqrt(v) (issue 15, items 1 and 3). */
static mxp_status check_second_moment(const char *L, const mxp_st_tensor *t, mxp_error *err) {
    size_t neg = 0, first = 0;
    for (size_t i = 0; i < t->numel; i++)
        if (mxp_st_tensor_get(t, i) < 0.0f && neg++ == 0) first = i;
    if (!neg) return MXP_OK;
    return mxp_error_set(err, MXP_ERR_FORMAT,
                         "%s: tensor '%.80s' holds %zu negative values (first: element %zu = %g); "
                         "AdamW's second moment is a mean of squares: accepted >= 0",
                         L, t->name, neg, first, (double)mxp_st_tensor_get(t, first));
}

mxp_status mxp_ckpt_check(const mxp_st_file *f, const mxp_model *model, mxp_ckpt_info *info,
                          mxp_error *err) {
    if (!f) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_check: NULL file");
    const char *L = mxp_st_file_label(f);
    mxp_ckpt_info in;
    mxp_status s = mxp_ckpt_read_info(f, &in, err);
    if (s != MXP_OK) return s;
    if ((s = mxp_st_file_verify(f, err)) != MXP_OK) return s;
    mxp_dtype want = weights_dtype_of(in.precision);
    if (in.weight_dtype != want)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: metadata weight_dtype %s does not match precision %s (weights "
                             "are %s)",
                             L, ckpt_st_dtype_name(in.weight_dtype),
                             mxp_precision_name(in.precision), ckpt_st_dtype_name(want));
    char a[96], b[96];
    if (model) {
        for (int i = 0; i < mxp_model_num_tensors(model); i++) {
            const mxp_tensor_info *ti = mxp_model_tensor(model, i);
            const mxp_st_tensor *t = mxp_st_file_find(f, ti->name);
            if (!t)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: tensor '%s' is missing (the model has it)", L, ti->name);
            if (!same_shape(t, ti->ndim, ti->shape)) {
                shape_text(t->ndim, t->shape, a, sizeof a);
                shape_text(ti->ndim, ti->shape, b, sizeof b);
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: tensor '%s' has shape %s; the model expects %s", L,
                                     ti->name, a, b);
            }
        }
        /* every model tensor is present: any further weight is extra */
        int n_weights = 0;
        const char *base;
        for (int i = 0; i < mxp_st_file_num_tensors(f); i++)
            n_weights += !is_moment(mxp_st_file_tensor(f, i)->name, &base) &&
                         !is_state(mxp_st_file_tensor(f, i)->name);
        for (int i = 0; n_weights > mxp_model_num_tensors(model) && i < mxp_st_file_num_tensors(f);
             i++) {
            const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
            bool known = is_moment(t->name, &base) || is_state(t->name);
            for (int k = 0; k < mxp_model_num_tensors(model) && !known; k++)
                known = !strcmp(mxp_model_tensor(model, k)->name, t->name);
            if (!known)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: unexpected tensor '%.80s' (not in the model)", L,
                                     t->name);
        }
    }
    for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
        const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
        const char *base;
        if (is_state(t->name)) {
            if (strcmp(t->name, FP8_STATE) != 0 || t->dtype != MXP_DTYPE_F32 || t->ndim != 1)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: unexpected tensor '%.80s'; accepted state: %s, F32, "
                                     "one dimension", L, t->name, FP8_STATE);
            continue; /* amax histories may hold recorded non-finite values */
        }
        bool moment = is_moment(t->name, &base);
        mxp_dtype need = moment ? MXP_DTYPE_F32 : want;
        if (t->dtype != need)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: tensor '%.80s' has dtype %s; %s must be %s (precision %s)", L,
                                 t->name, ckpt_st_dtype_name(t->dtype),
                                 moment ? "optimizer moments" : "weights", ckpt_st_dtype_name(need),
                                 mxp_precision_name(in.precision));
        size_t nf = ckpt_all_finite(t->dtype, t->data, t->numel)
                        ? 0
                        : ckpt_count_nonfinite(t->dtype, t->data, t->numel);
        if (nf)
            return mxp_error_set(err, MXP_ERR_NONFINITE,
                                 "%s: tensor '%.80s' holds %zu non-finite values (of %zu)", L,
                                 t->name, nf, t->numel);
        if (moment) {
            const mxp_st_tensor *wt = mxp_st_file_find(f, base);
            if (!wt || is_moment(wt->name, &base))
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: optimizer tensor '%.80s' has no weight tensor '%.80s'", L,
                                     t->name, base);
            if (!same_shape(wt, t->ndim, t->shape)) {
                shape_text(t->ndim, t->shape, a, sizeof a);
                shape_text(wt->ndim, wt->shape, b, sizeof b);
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: tensor '%.80s' has shape %s but its weight %s", L,
                                     t->name, a, b);
            }
            if (strncmp(t->name, OPT_V, strlen(OPT_V)) == 0 && in.optimizer != MXP_OPTIM_ADAMW)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: unexpected tensor '%.80s': optimizer %s has no second "
                                     "moment",
                                     L, t->name, mxp_optim_kind_name(in.optimizer));
            if (strncmp(t->name, OPT_V, strlen(OPT_V)) == 0 &&
                (s = check_second_moment(L, t, err)) != MXP_OK)
                return s;
            continue;
        }
        char mname[200];
        for (int k = 0; k < (in.optimizer == MXP_OPTIM_ADAMW ? 2 : 1); k++) {
            snprintf(mname, sizeof mname, "%s%s", k ? OPT_V : OPT_M, t->name);
            if (!mxp_st_file_find(f, mname))
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: tensor '%.80s' is missing (optimizer %s state of "
                                     "'%.80s')",
                                     L, mname, mxp_optim_kind_name(in.optimizer), t->name);
        }
    }
    if (info) *info = in;
    return MXP_OK;
}

mxp_status mxp_ckpt_check_spec(const mxp_st_file *f, const mxp_model_spec *spec, mxp_error *err) {
    if (!f || !spec) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_check_spec: NULL");
    size_t want = 0, have = 0;
    mxp_status s = mxp_model_spec_num_params(spec, &want, err);
    if (s != MXP_OK) return s;
    const char *base;
    for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
        const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
        if (!is_moment(t->name, &base) && !is_state(t->name)) have += t->numel;
    }
    if (want != have)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: the model described has %zu parameters; the file's weight "
                             "tensors hold %zu values", mxp_st_file_label(f), want, have);
    return MXP_OK;
}

mxp_status mxp_ckpt_verify(const char *path, const mxp_model *model, mxp_ckpt_info *info,
                           mxp_error *err) {
    mxp_st_file *f = NULL;
    mxp_status s = mxp_st_file_read(path, &f, err);
    if (s == MXP_OK) s = mxp_ckpt_check(f, model, info, err);
    mxp_st_file_destroy(f);
    return s;
}

/* ---- load ----------------------------------------------------------------------- */

/* Weights of t converted into the target dtype must stay finite. */
static mxp_status check_range(const char *L, const mxp_st_tensor *t, mxp_dtype target,
                              mxp_error *err) {
    if (t->dtype == target || target == MXP_DTYPE_F32) return MXP_OK;
    for (size_t i = 0; i < t->numel; i++) {
        float x = mxp_st_tensor_get(t, i);
        if (!isfinite(mxp_round_to(target, x)))
            return mxp_error_set(err, MXP_ERR_NONFINITE,
                                 "%s: tensor '%s' element %zu = %g overflows %s (max %g): cannot "
                                 "load it into this precision",
                                 L, t->name, i, (double)x, mxp_dtype_name(target),
                                 mxp_dtype_info(target)->max);
    }
    return MXP_OK;
}

/* Copy tensor t into dst (dtype dt) converting element-wise (RNE). */
static void put_tensor(const mxp_st_tensor *t, mxp_dtype dt, void *dst) {
    if (t->dtype == dt) {
        memcpy(dst, t->data, t->nbytes);
        return;
    }
    for (size_t i = 0; i < t->numel; i++) mxp_store_f32(dt, dst, i, mxp_st_tensor_get(t, i));
}

/* Restore the FP8 delayed-scaling state when both the checkpoint and the
 * model have one of the same size; else the model's scaling starts afresh. */
static mxp_status load_fp8(const mxp_st_file *f, mxp_model *model, mxp_error *err) {
    mxp_fp8_scaling *fp8 = mxp_model_fp8(model);
    const mxp_st_tensor *t = mxp_st_file_find(f, FP8_STATE);
    if (!fp8 || !t) {
        if (fp8)
            mxp_log(MXP_LOG_INFO, "%s: no FP8 scaling state; the scales start afresh",
                    mxp_st_file_label(f));
        return MXP_OK;
    }
    if (t->numel != mxp_fp8_scaling_state_size(fp8)) {
        mxp_log(MXP_LOG_WARN, "%s: FP8 scaling state of %zu values, the model needs %zu; the "
                "scales start afresh", mxp_st_file_label(f), t->numel,
                mxp_fp8_scaling_state_size(fp8));
        return MXP_OK;
    }
    const char *sv = mxp_st_file_meta(f, "fp8_steps");
    char *end = NULL;
    long long steps = sv ? strtoll(sv, &end, 10) : -1;
    if (!sv || *end || steps < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: metadata 'fp8_steps' = '%.20s' is invalid; "
                             "accepted: an integer >= 0", mxp_st_file_label(f), sv ? sv : "");
    float *buf = mxp_calloc(t->numel + 1, sizeof(float)); /* the file data may be unaligned */
    if (!buf) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "fp8 scaling state");
    memcpy(buf, t->data, t->nbytes);
    mxp_error sub = {0};
    mxp_status s = mxp_fp8_scaling_set_state(fp8, buf, t->numel, steps, &sub);
    mxp_free(buf);
    if (s != MXP_OK)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: tensor '%s': %s", mxp_st_file_label(f),
                             FP8_STATE, sub.msg);
    return MXP_OK;
}

/* Fill the host slabs of a load (weights in the trainer's parameter dtype,
 * optim.m, optim.v) from the checked file f, converting element-wise (RNE)
 * where the file's dtype differs; nothing of the trainer changes. */
static mxp_status load_slabs_fill(const mxp_st_file *f, mxp_trainer *t, save_slabs *h,
                                  mxp_error *err) {
    static const mxp_tensor_role roles[3] = {MXP_TENSOR_PARAM, MXP_TENSOR_OPTIM_M,
                                             MXP_TENSOR_OPTIM_V};
    const size_t P = mxp_model_num_params(mxp_trainer_model(t));
    for (int i = 0; i < 3; i++) {
        const size_t bytes = mxp_trainer_tensor_bytes(t, roles[i]);
        if (!bytes) continue;
        mxp_status s = mxp_trainer_tensor_dtype(t, roles[i], &h->dt[i], err);
        if (s != MXP_OK) return s;
        h->slab[i] = mxp_calloc(bytes, 1);
        if (!h->slab[i])
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint load: %zu %s values",
                                 P, mxp_tensor_role_name(roles[i]));
    }
    for (int i = 0; i < mxp_trainer_num_tensors(t); i++) {
        mxp_tensor_desc d;
        mxp_status s = mxp_trainer_tensor_desc(t, i, &d, err);
        if (s != MXP_OK) return s;
        const int pass = d.role == MXP_TENSOR_PARAM ? 0 : d.role == MXP_TENSOR_OPTIM_M ? 1 : 2;
        put_tensor(mxp_st_file_find(f, d.name), d.dtype,
                   h->slab[pass] + d.offset * mxp_dtype_info(d.dtype)->size);
    }
    return MXP_OK;
}

/* Install the host slabs: one set per role (the working weights follow the
 * master). */
static mxp_status load_slabs_set(mxp_trainer *t, const save_slabs *h, mxp_error *err) {
    static const mxp_tensor_role roles[3] = {MXP_TENSOR_PARAM, MXP_TENSOR_OPTIM_M,
                                             MXP_TENSOR_OPTIM_V};
    mxp_status s = MXP_OK;
    for (int i = 0; i < 3 && s == MXP_OK; i++)
        if (h->slab[i])
            s = mxp_trainer_tensor_set(t, roles[i], NULL, h->dt[i], h->slab[i],
                                       mxp_trainer_tensor_bytes(t, roles[i]), err);
    return s;
}

mxp_status mxp_ckpt_load_file(const mxp_st_file *f, mxp_trainer *t, mxp_ckpt_info *info,
                              mxp_error *err) {
    if (!f || !t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_load: NULL argument");
    const char *L = mxp_st_file_label(f);
    mxp_model *model = mxp_trainer_model(t);
    mxp_ckpt_info in;
    mxp_status s = mxp_ckpt_check(f, model, &in, err);
    if (s != MXP_OK) return s;
    const mxp_trainer_config *tc = mxp_trainer_get_config(t);
    if (in.optimizer != tc->optim.kind)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: the checkpoint holds %s optimizer state; this trainer uses %s", L,
                             mxp_optim_kind_name(in.optimizer),
                             mxp_optim_kind_name(tc->optim.kind));
    mxp_dtype target;
    if ((s = mxp_trainer_tensor_dtype(t, MXP_TENSOR_PARAM, &target, err)) != MXP_OK) return s;
    const int nt = mxp_model_num_tensors(model);
    for (int i = 0; i < nt; i++)
        if ((s = check_range(L, mxp_st_file_find(f, mxp_model_tensor(model, i)->name), target,
                             err)) != MXP_OK)
            return s;
    /* the trainer's tensors assembled on the host, one slab per role, before
     * anything changes (the sets below cannot fail after these checks) */
    save_slabs h = {0};
    if ((s = load_slabs_fill(f, t, &h, err)) != MXP_OK) {
        save_slabs_free(&h);
        return s;
    }

    /* FP8 scaling state, then the scaler: the only steps that may still
     * refuse (set_state validates and changes nothing on error); the
     * scaler cannot, after read_info's checks. */
    if ((s = load_fp8(f, model, err)) != MXP_OK) {
        save_slabs_free(&h);
        return s;
    }
    mxp_scaler *sc = mxp_trainer_scaler(t);
    bool target_scaling = mxp_scaler_get_config(sc)->enabled;
    if (in.scaler_enabled || !target_scaling) {
        if ((s = mxp_scaler_set_state(sc, &in.scaler, err)) != MXP_OK) {
            save_slabs_free(&h);
            return s;
        }
    } else {
        mxp_log(MXP_LOG_INFO,
                "%s: written without loss scaling (%s); the %s run starts its scaler afresh", L,
                mxp_precision_name(in.precision),
                mxp_precision_name(mxp_model_policy(model)->mode));
    }
    /* per-layer loss scales (validated before any change) */
    s = mxp_trainer_scaler_groups_load(t, mxp_st_file_meta(f, "scaler_groups"), err);
    if (s == MXP_OK) s = load_slabs_set(t, &h, err);
    save_slabs_free(&h);
    if (s != MXP_OK) return s;
    mxp_model_zero_grads(model);
    mxp_trainer_state ts = {in.step,  in.optimizer_step, in.skipped_steps,
                            in.epoch, in.sr_counter,     in.lr};
    if ((s = mxp_trainer_set_state(t, &ts, err)) != MXP_OK) return s;
    if (in.precision != mxp_model_policy(model)->mode)
        mxp_log(MXP_LOG_INFO, "%s: checkpoint written in %s loaded into a %s run", L,
                mxp_precision_name(in.precision),
                mxp_precision_name(mxp_model_policy(model)->mode));
    if (in.seed != tc->seed)
        mxp_log(MXP_LOG_WARN,
                "%s: checkpoint seed %llu differs from this run's %llu: data order and rounding "
                "will not reproduce the original run",
                L, (unsigned long long)in.seed, (unsigned long long)tc->seed);
    if (info) *info = in;
    return MXP_OK;
}

mxp_status mxp_ckpt_load(const char *path, mxp_trainer *t, mxp_ckpt_info *info, mxp_error *err) {
    mxp_st_file *f = NULL;
    mxp_status s = mxp_st_file_read(path, &f, err);
    if (s == MXP_OK) s = mxp_ckpt_load_file(f, t, info, err);
    mxp_st_file_destroy(f);
    return s;
}
