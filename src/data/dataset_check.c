/* data/dataset_check.c: does a dataset hold what a workload needs?
 *
 * Entry points: mxp_dataset_check, mxp_dataset_kind_name. The array names,
 * ranks and dtypes are those of mixprec/dataset.h and docs/data.md; every
 * failure names the file, the array and what is accepted.
 */
#include "data/dataset_internal.h"
#include "data/transitions.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const kKindNames[] = {"world_model", "classifier", "regressor"};
static_assert(sizeof kKindNames / sizeof kKindNames[0] == MXP_DATASET_KIND_COUNT,
              "one name per mxp_dataset_kind");

const char *mxp_dataset_kind_name(mxp_dataset_kind k) {
    return (unsigned)k < MXP_DATASET_KIND_COUNT ? kKindNames[k] : NULL;
}

static bool is_float(const mxp_array *a) {
    return a->dtype == MXP_ARRAY_F32 || a->dtype == MXP_ARRAY_F64;
}

const char *ds_shape_str(const mxp_array *a, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < a->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* The array called name with rank `rank` and a float (want_float) or int
 * dtype; *out NULL when it is optional and absent. */
static mxp_status get(const mxp_dataset *d, const char *name, int rank, bool want_float,
                      bool required, const char *layout, const mxp_array **out, mxp_error *err) {
    const char *L = mxp_dataset_label(d);
    const mxp_array *a = mxp_dataset_find(d, name);
    *out = a;
    if (!a) {
        if (!required) return MXP_OK;
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: missing array '%s' (%s)", L, name, layout);
    }
    char sb[128];
    if (a->ndim != rank)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%s' has rank %d (shape %s); accepted: rank %d (%s)", L,
                             name, a->ndim, ds_shape_str(a, sb, sizeof sb), rank, layout);
    if (is_float(a) != want_float)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%s' has dtype %s; accepted: %s (%s)",
                             L, name, mxp_array_dtype_name(a->dtype),
                             want_float ? "float32 or float64" : "int32 or int64", layout);
    if (a->dtype == MXP_ARRAY_F64) {
        const double *p = a->data;
        for (int64_t i = 0; i < a->numel; i++)
            if (fabs(p[i]) > FLT_MAX)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: array '%s' holds %g at flat index %lld, beyond "
                                     "float32's range (+-3.4e38)",
                                     L, name, p[i], (long long)i);
    }
    return MXP_OK;
}

/* a's dimension `dim` must equal want (taken from array `other`). */
static mxp_status match(const mxp_dataset *d, const mxp_array *a, int dim, int64_t want,
                        const char *other, const char *what, mxp_error *err) {
    if (a->shape[dim] == want) return MXP_OK;
    char sb[128];
    return mxp_error_set(err, MXP_ERR_FORMAT,
                         "%s: shape mismatch: array '%s' has shape %s, its dimension %d (%s) "
                         "must be %lld as in '%s'",
                         mxp_dataset_label(d), a->name, ds_shape_str(a, sb, sizeof sb), dim, what,
                         (long long)want, other);
}

/* Every array must be one of names[] (a misspelt name is an error). */
static mxp_status only(const mxp_dataset *d, const char *const *names, int n, const char *kind,
                       mxp_error *err) {
    for (int i = 0; i < mxp_dataset_num_arrays(d); i++) {
        const char *nm = mxp_dataset_array(d, i)->name;
        bool ok = false;
        for (int k = 0; k < n && !ok; k++) ok = strcmp(nm, names[k]) == 0;
        if (!ok) {
            char list[128] = "";
            for (int k = 0; k < n; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "",
                         names[k]);
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: unexpected array '%s' for the %s workload; accepted: %s",
                                 mxp_dataset_label(d), nm, kind, list);
        }
    }
    return MXP_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        mxp_status s_ = (x);                                                                       \
        if (s_ != MXP_OK) return s_;                                                               \
    } while (0)

mxp_status ds_check_episodes(const mxp_dataset *d, mxp_dataset_layout *o, mxp_error *err) {
    /* terminals/timeouts (and their aliases) [E, T]: episode_flags.c checks them */
    static const char *const names[] = {"obs",       "actions",      "rewards",  "lengths",
                                        "terminals", "terminations", "timeouts", "truncations"};
    TRY(only(d, names, 8, "world_model", err));
    const mxp_array *obs, *act, *rew, *len;
    TRY(get(d, "obs", 3, true, true,
            "obs [E, T+1, S] float; or flat transitions obs [N, S] with terminals/timeouts/dones "
            "or next_obs, docs/data.md",
            &obs, err));
    TRY(get(d, "actions", 3, true, true, "actions [E, T, A] float", &act, err));
    TRY(get(d, "rewards", 2, true, true, "rewards [E, T] float", &rew, err));
    TRY(get(d, "lengths", 1, false, false, "lengths [E] int", &len, err));
    int64_t E = obs->shape[0], T = obs->shape[1] - 1;
    if (T < 1)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array 'obs' has %lld time steps; accepted: T+1 >= 2 (one "
                             "transition at least)",
                             mxp_dataset_label(d), (long long)obs->shape[1]);
    if (act->shape[0] != E && act->shape[0] == E - 1 && act->shape[1] == obs->shape[1]) {
        /* obs [T+1, E, S] and actions [T, E, A]: time-major, as many RL
         * buffers keep them; name that, not a wrong 'actions' */
        char so[128], sa[128];
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: obs %s and actions %s look time-major ([T+1, E, S] and [T, E, "
                             "A]); accepted: episode-major obs [E, T+1, S], actions [E, T, A], "
                             "rewards [E, T] (NumPy: obs.transpose(1, 0, 2), "
                             "actions.transpose(1, 0, 2), rewards.T)",
                             mxp_dataset_label(d), ds_shape_str(obs, so, sizeof so),
                             ds_shape_str(act, sa, sizeof sa));
    }
    TRY(match(d, act, 0, E, "obs", "episodes E", err));
    TRY(match(d, act, 1, T, "obs", "steps T = obs steps - 1", err));
    TRY(match(d, rew, 0, E, "obs", "episodes E", err));
    TRY(match(d, rew, 1, T, "obs", "steps T = obs steps - 1", err));
    int64_t total = E * T;
    if (len) {
        TRY(match(d, len, 0, E, "obs", "episodes E", err));
        total = 0;
        for (int64_t e = 0; e < E; e++) {
            int64_t l = mxp_array_get_i64(len, e);
            if (l < 1 || l > T)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: lengths[%lld] = %lld; accepted: 1..T = 1..%lld "
                                     "transitions",
                                     mxp_dataset_label(d), (long long)e, (long long)l,
                                     (long long)T);
            total += l;
        }
    }
    if (E < 2)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: %lld episode(s); accepted: at least 2 (one to train on, one to "
                             "validate)",
                             mxp_dataset_label(d), (long long)E);
    *o = (mxp_dataset_layout){.episodes = E, .max_steps = T, .state_dim = obs->shape[2],
                              .action_dim = act->shape[2], .transitions = total,
                              .has_lengths = len != NULL};
    return MXP_OK;
}

/* Either layout (transitions.c chooses and checks the flat one). */
static mxp_status check_world(const mxp_dataset *d, mxp_dataset_layout *o, mxp_error *err) {
    wm_episodes w;
    TRY(wm_episodes_open(d, &w, err));
    *o = (mxp_dataset_layout){.episodes = w.E, .max_steps = w.T, .state_dim = w.S,
                              .action_dim = w.A, .transitions = w.transitions,
                              .has_lengths = w.len != NULL, .flat = w.flat, .rows = w.rows,
                              .dropped_episodes = w.dropped};
    wm_episodes_close(&w);
    return MXP_OK;
}

static mxp_status check_supervised(const mxp_dataset *d, bool classifier, mxp_dataset_layout *o,
                                   mxp_error *err) {
    static const char *const names[] = {"x", "y", "x_val", "y_val"};
    const char *kind = classifier ? "classifier" : "regressor";
    TRY(only(d, names, 4, kind, err));
    const char *ylay = classifier ? "y [N] int class labels" : "y [N, K] float";
    const char *yvlay = classifier ? "y_val [M] int class labels" : "y_val [M, K] float";
    int yrank = classifier ? 1 : 2;
    const mxp_array *x, *y, *xv, *yv;
    TRY(get(d, "x", 2, true, true, "x [N, D] float", &x, err));
    TRY(get(d, "y", yrank, !classifier, true, ylay, &y, err));
    TRY(get(d, "x_val", 2, true, false, "x_val [M, D] float", &xv, err));
    TRY(get(d, "y_val", yrank, !classifier, false, yvlay, &yv, err));
    if (!xv != !yv)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: missing array '%s': x_val and y_val come together",
                             mxp_dataset_label(d), xv ? "y_val" : "x_val");
    TRY(match(d, y, 0, x->shape[0], "x", "rows N", err));
    if (xv) {
        TRY(match(d, xv, 1, x->shape[1], "x", "features D", err));
        TRY(match(d, yv, 0, xv->shape[0], "x_val", "rows M", err));
        if (!classifier) TRY(match(d, yv, 1, y->shape[1], "y", "targets K", err));
    }
    int64_t out_dim;
    if (classifier) {
        int64_t maxc = -1;
        const mxp_array *ys[2] = {y, yv};
        for (int k = 0; k < 2 && ys[k]; k++)
            for (int64_t i = 0; i < ys[k]->numel; i++) {
                int64_t c = mxp_array_get_i64(ys[k], i);
                if (c < 0 || c >= (int64_t)1 << 24)
                    return mxp_error_set(err, MXP_ERR_FORMAT,
                                         "%s: %s[%lld] = %lld; accepted: class labels 0..2^24-1",
                                         mxp_dataset_label(d), ys[k]->name, (long long)i,
                                         (long long)c);
                if (c > maxc) maxc = c;
            }
        out_dim = maxc + 1;
        /* the largest label sizes the model's output layer: a file of a few
         * rows must not declare a million classes it cannot hold examples of */
        int64_t rows = y->numel + (yv ? yv->numel : 0);
        if (out_dim > rows && out_dim > 2)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: the largest label, %lld, means %lld classes, more than the "
                                 "%lld labelled rows; accepted: labels 0..C-1 with C <= rows "
                                 "(renumber the classes consecutively)",
                                 mxp_dataset_label(d), (long long)maxc, (long long)out_dim,
                                 (long long)rows);
        if (out_dim < 2)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: every label is 0; accepted: at least 2 classes",
                                 mxp_dataset_label(d));
    } else {
        out_dim = y->shape[1];
    }
    int64_t n = x->shape[0];
    if (!xv && n < 2)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: %lld row(s) and no x_val/y_val; accepted: at least 2 rows to "
                             "split",
                             mxp_dataset_label(d), (long long)n);
    *o = (mxp_dataset_layout){.n = n, .in_dim = x->shape[1], .out_dim = out_dim,
                              .n_val = xv ? xv->shape[0] : 0};
    return MXP_OK;
}

mxp_status mxp_dataset_check(const mxp_dataset *d, mxp_dataset_kind k, mxp_dataset_layout *out,
                             mxp_error *err) {
    if (!d) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dataset_check: dataset is NULL");
    if (mxp_dataset_num_arrays(d) == 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: the dataset holds no array",
                             mxp_dataset_label(d));
    mxp_dataset_layout o;
    mxp_status s;
    switch (k) {
    case MXP_DATASET_WORLD_MODEL: s = check_world(d, &o, err); break;
    case MXP_DATASET_CLASSIFIER: s = check_supervised(d, true, &o, err); break;
    case MXP_DATASET_REGRESSOR: s = check_supervised(d, false, &o, err); break;
    default:
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_dataset_check: invalid kind %d; accepted: world_model, "
                             "classifier, regressor",
                             (int)k);
    }
    if (s == MXP_OK && out) *out = o;
    return s;
}
