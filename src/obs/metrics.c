/* src/obs/metrics.c: the metrics registry and its Prometheus text
 * exposition (format 0.0.4).
 *
 * Entry points: mxp_metrics_create/destroy/register/series/render, the
 * lock-free series updates mxp_metric_add/set/observe, the by-name
 * conveniences mxp_metrics_inc/set/observe/get.
 *
 * Layout: a fixed array of family pointers (published with a release store
 * of the count, so readers scan without the lock); each family a fixed
 * array of series pointers published the same way. Values are doubles held
 * as bit patterns in 64-bit atomics (add is a CAS loop); a histogram keeps
 * one atomic count per bucket (non-cumulative) and derives _count from
 * their sum when rendering, so _count always equals the +Inf bucket.
 * Structure changes (register, new series) take the registry mutex.
 * Reference: https://prometheus.io/docs/instrumenting/exposition_formats/
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "obs/obs_internal.h"

static const char *const kTypeNames[] = {"counter", "gauge", "histogram"};
static_assert(sizeof kTypeNames / sizeof kTypeNames[0] == MXP_METRIC_TYPE_COUNT,
              "one name per metric type");

const char *mxp_metric_type_name(mxp_metric_type t) {
    return (unsigned)t < MXP_METRIC_TYPE_COUNT ? kTypeNames[t] : "untyped";
}

#define NAME_MAX_LEN 128
#define LABEL_MAX_LEN 64
#define VALUE_MAX_LEN 128

typedef struct family family;

struct mxp_metric {
    family *fam;
    char values[MXP_METRICS_MAX_LABELS][VALUE_MAX_LEN];
    _Atomic uint64_t bits;                                 /* value, or histogram sum */
    _Atomic uint64_t buckets[MXP_METRICS_MAX_BUCKETS + 1]; /* histogram, last = +Inf */
};

struct family {
    mxp_metric_type type;
    char name[NAME_MAX_LEN];
    char *help;
    int n_labels;
    char labels[MXP_METRICS_MAX_LABELS][LABEL_MAX_LEN];
    int n_buckets;
    double bounds[MXP_METRICS_MAX_BUCKETS];
    atomic_int n_series;
    mxp_metric *series[MXP_METRICS_MAX_SERIES];
};

struct mxp_metrics {
    pthread_mutex_t lock;
    atomic_int n_families;
    family *fams[MXP_METRICS_MAX_FAMILIES];
};

static uint64_t to_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double from_bits(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

mxp_status mxp_metrics_create(mxp_metrics **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_metrics_create: NULL out");
    mxp_metrics *r = mxp_calloc(1, sizeof *r);
    if (!r) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metrics registry");
    pthread_mutex_init(&r->lock, NULL);
    atomic_init(&r->n_families, 0);
    *out = r;
    return MXP_OK;
}

void mxp_metrics_destroy(mxp_metrics *r) {
    if (!r) return;
    int nf = atomic_load(&r->n_families);
    for (int i = 0; i < nf; i++) {
        family *f = r->fams[i];
        int ns = atomic_load(&f->n_series);
        for (int j = 0; j < ns; j++) mxp_free(f->series[j]);
        mxp_free(f->help);
        mxp_free(f);
    }
    pthread_mutex_destroy(&r->lock);
    mxp_free(r);
}

static bool valid_name(const char *s, bool colon_ok) {
    if (!s || !*s || strlen(s) >= NAME_MAX_LEN) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                     (colon_ok && c == ':');
        if (!alpha && !(p != s && c >= '0' && c <= '9')) return false;
    }
    return true;
}

static family *find_family(mxp_metrics *r, const char *name) {
    int nf = atomic_load_explicit(&r->n_families, memory_order_acquire);
    for (int i = 0; i < nf; i++)
        if (strcmp(r->fams[i]->name, name) == 0) return r->fams[i];
    return NULL;
}

/* Split "a,b,c" into f->labels; false with a message on a bad list. */
static mxp_status parse_label_names(family *f, const char *labels, mxp_error *err) {
    f->n_labels = 0;
    if (!labels || !*labels) return MXP_OK;
    const char *p = labels;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (f->n_labels == MXP_METRICS_MAX_LABELS || n == 0 || n >= LABEL_MAX_LEN)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "metric %s: label list '%s'; accepted: at most %d "
                                 "comma-separated names", f->name, labels,
                                 MXP_METRICS_MAX_LABELS);
        char *dst = f->labels[f->n_labels];
        memcpy(dst, p, n);
        dst[n] = '\0';
        if (!valid_name(dst, false) || strncmp(dst, "__", 2) == 0 ||
            (f->type == MXP_METRIC_HISTOGRAM && strcmp(dst, "le") == 0))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "metric %s: label name '%s'; accepted: [a-zA-Z_][a-zA-Z0-9_]*, "
                                 "not starting with __ (and not le on a histogram)",
                                 f->name, dst);
        for (int i = 0; i < f->n_labels; i++)
            if (strcmp(f->labels[i], dst) == 0)
                return mxp_error_set(err, MXP_ERR_INVALID_ARG, "metric %s: label '%s' twice",
                                     f->name, dst);
        f->n_labels++;
        p += n;
        if (*p == ',') p++;
    }
    return MXP_OK;
}

static bool same_shape(const family *a, const family *b) {
    if (a->type != b->type || a->n_labels != b->n_labels || a->n_buckets != b->n_buckets)
        return false;
    for (int i = 0; i < a->n_labels; i++)
        if (strcmp(a->labels[i], b->labels[i]) != 0) return false;
    for (int i = 0; i < a->n_buckets; i++)
        if (a->bounds[i] != b->bounds[i]) return false;
    return true;
}

/* Create a series of f with values (f->n_labels of them); lock held. */
static mxp_metric *new_series(family *f, const char *const *values) {
    mxp_metric *m = mxp_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->fam = f;
    for (int i = 0; i < f->n_labels; i++) {
        size_t n = strlen(values[i]);
        if (n >= VALUE_MAX_LEN) n = VALUE_MAX_LEN - 1;
        memcpy(m->values[i], values[i], n);
        m->values[i][n] = '\0';
    }
    atomic_init(&m->bits, to_bits(0.0));
    for (int i = 0; i <= MXP_METRICS_MAX_BUCKETS; i++) atomic_init(&m->buckets[i], 0);
    return m;
}

mxp_status mxp_metrics_register(mxp_metrics *r, mxp_metric_type type, const char *name,
                                const char *help, const char *labels, const double *buckets,
                                int n_buckets, mxp_error *err) {
    if (!r || (unsigned)type >= MXP_METRIC_TYPE_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_metrics_register: bad registry/type");
    if (!valid_name(name, true))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "metric name '%s'; accepted: [a-zA-Z_:][a-zA-Z0-9_:]*, < %d chars",
                             name ? name : "(null)", NAME_MAX_LEN);
    if (type == MXP_METRIC_HISTOGRAM) {
        if (!buckets || n_buckets < 1 || n_buckets > MXP_METRICS_MAX_BUCKETS)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "histogram %s: %d buckets; accepted: 1..%d finite bounds", name,
                                 n_buckets, MXP_METRICS_MAX_BUCKETS);
        for (int i = 0; i < n_buckets; i++)
            if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1])))
                return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                     "histogram %s: bucket bounds must be finite and strictly "
                                     "increasing (bound %d = %g)", name, i, buckets[i]);
    } else if (n_buckets != 0) {
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "metric %s: buckets on a %s", name,
                             mxp_metric_type_name(type));
    }
    family *f = mxp_calloc(1, sizeof *f);
    if (!f) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metric %s", name);
    f->type = type;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->n_buckets = type == MXP_METRIC_HISTOGRAM ? n_buckets : 0;
    for (int i = 0; i < f->n_buckets; i++) f->bounds[i] = buckets[i];
    atomic_init(&f->n_series, 0);
    mxp_status s = parse_label_names(f, labels, err);
    if (s == MXP_OK) {
        f->help = mxp_strdup(help ? help : "");
        if (!f->help) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metric %s help", name);
    }
    if (s != MXP_OK) {
        mxp_free(f->help);
        mxp_free(f);
        return s;
    }
    pthread_mutex_lock(&r->lock);
    family *old = find_family(r, name);
    int nf = atomic_load_explicit(&r->n_families, memory_order_relaxed);
    if (old) {
        bool same = same_shape(old, f);
        pthread_mutex_unlock(&r->lock);
        mxp_free(f->help);
        mxp_free(f);
        return same ? MXP_OK
                    : mxp_error_set(err, MXP_ERR_STATE,
                                    "metric %s is already registered with another type, "
                                    "labels or buckets", name);
    }
    if (nf == MXP_METRICS_MAX_FAMILIES) {
        pthread_mutex_unlock(&r->lock);
        mxp_free(f->help);
        mxp_free(f);
        return mxp_error_set(err, MXP_ERR_STATE, "metric %s: registry full (%d names)", name,
                             MXP_METRICS_MAX_FAMILIES);
    }
    if (f->n_labels == 0) {
        f->series[0] = new_series(f, NULL);
        if (!f->series[0]) {
            pthread_mutex_unlock(&r->lock);
            mxp_free(f->help);
            mxp_free(f);
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metric %s", name);
        }
        atomic_store_explicit(&f->n_series, 1, memory_order_release);
    }
    r->fams[nf] = f;
    atomic_store_explicit(&r->n_families, nf + 1, memory_order_release);
    pthread_mutex_unlock(&r->lock);
    return MXP_OK;
}

static mxp_metric *find_series(family *f, const char *const *values) {
    int ns = atomic_load_explicit(&f->n_series, memory_order_acquire);
    for (int j = 0; j < ns; j++) {
        mxp_metric *m = f->series[j];
        int i = 0;
        while (i < f->n_labels && strncmp(m->values[i], values[i], VALUE_MAX_LEN - 1) == 0) i++;
        if (i == f->n_labels) return m;
    }
    return NULL;
}

mxp_status mxp_metrics_series(mxp_metrics *r, const char *name,
                              const char *const *label_values, mxp_metric **out,
                              mxp_error *err) {
    if (!r || !name || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_metrics_series: NULL argument");
    family *f = find_family(r, name);
    if (!f) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "no metric named '%s'", name);
    if (f->n_labels > 0 && !label_values)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "metric %s needs %d label values", name,
                             f->n_labels);
    for (int i = 0; i < f->n_labels; i++)
        if (!label_values[i])
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "metric %s: label %s is NULL", name,
                                 f->labels[i]);
    mxp_metric *m = find_series(f, label_values);
    if (m) {
        *out = m;
        return MXP_OK;
    }
    pthread_mutex_lock(&r->lock);
    m = find_series(f, label_values);
    int ns = atomic_load_explicit(&f->n_series, memory_order_relaxed);
    if (!m && ns < MXP_METRICS_MAX_SERIES) {
        m = new_series(f, label_values);
        if (m) {
            f->series[ns] = m;
            atomic_store_explicit(&f->n_series, ns + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (!m)
        return mxp_error_set(err, ns >= MXP_METRICS_MAX_SERIES ? MXP_ERR_STATE
                                                               : MXP_ERR_OUT_OF_MEMORY,
                             "metric %s: cannot add a series (at most %d label sets)", name,
                             MXP_METRICS_MAX_SERIES);
    *out = m;
    return MXP_OK;
}

static void atomic_add_double(_Atomic uint64_t *a, double v) {
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, to_bits(from_bits(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

void mxp_metric_add(mxp_metric *m, double v) {
    if (!m || m->fam->type == MXP_METRIC_HISTOGRAM || isnan(v)) return;
    if (m->fam->type == MXP_METRIC_COUNTER && !(v >= 0)) return;
    atomic_add_double(&m->bits, v);
}

void mxp_metric_set(mxp_metric *m, double v) {
    if (!m || m->fam->type != MXP_METRIC_GAUGE) return;
    atomic_store_explicit(&m->bits, to_bits(v), memory_order_relaxed);
}

void mxp_metric_observe(mxp_metric *m, double v) {
    if (!m || m->fam->type != MXP_METRIC_HISTOGRAM || isnan(v)) return;
    const family *f = m->fam;
    int b = 0;
    while (b < f->n_buckets && v > f->bounds[b]) b++; /* le: v <= bound */
    atomic_fetch_add_explicit(&m->buckets[b], 1, memory_order_relaxed);
    atomic_add_double(&m->bits, v);
}

double mxp_metric_value(const mxp_metric *m) {
    if (!m) return NAN;
    return from_bits(atomic_load_explicit(&((mxp_metric *)m)->bits, memory_order_relaxed));
}

uint64_t mxp_metric_count(const mxp_metric *m) {
    if (!m || m->fam->type != MXP_METRIC_HISTOGRAM) return 0;
    uint64_t n = 0;
    for (int b = 0; b <= m->fam->n_buckets; b++)
        n += atomic_load_explicit(&((mxp_metric *)m)->buckets[b], memory_order_relaxed);
    return n;
}

/* Parse "k=v,k=v" into values ordered as f's labels. */
static mxp_status parse_label_text(const family *f, const char *text,
                                   char vals[MXP_METRICS_MAX_LABELS][VALUE_MAX_LEN],
                                   mxp_error *err) {
    bool seen[MXP_METRICS_MAX_LABELS] = {false};
    int n = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *eq = strchr(p, '=');
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "metric %s: labels '%s'; accepted: name=value,name=value",
                                 f->name, text);
        int idx = -1;
        for (int i = 0; i < f->n_labels; i++)
            if (strlen(f->labels[i]) == (size_t)(eq - p) &&
                strncmp(f->labels[i], p, (size_t)(eq - p)) == 0)
                idx = i;
        if (idx < 0 || seen[idx])
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "metric %s: unknown or repeated label in '%s'", f->name, text);
        size_t vn = (size_t)(end - eq - 1);
        if (vn >= VALUE_MAX_LEN) vn = VALUE_MAX_LEN - 1;
        memcpy(vals[idx], eq + 1, vn);
        vals[idx][vn] = '\0';
        seen[idx] = true;
        n++;
        p = *end ? end + 1 : end;
    }
    if (n != f->n_labels)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "metric %s: %d of %d labels given in '%s'",
                             f->name, n, f->n_labels, text ? text : "");
    return MXP_OK;
}

static mxp_status series_by_text(mxp_metrics *r, const char *name, const char *labels,
                                 mxp_metric **out, mxp_error *err) {
    if (!r || !name) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "metrics: NULL argument");
    family *f = find_family(r, name);
    if (!f) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "no metric named '%s'", name);
    char vals[MXP_METRICS_MAX_LABELS][VALUE_MAX_LEN];
    mxp_status s = parse_label_text(f, labels, vals, err);
    if (s != MXP_OK) return s;
    const char *ptrs[MXP_METRICS_MAX_LABELS];
    for (int i = 0; i < MXP_METRICS_MAX_LABELS; i++) ptrs[i] = vals[i];
    return mxp_metrics_series(r, name, ptrs, out, err);
}

mxp_status mxp_metrics_inc(mxp_metrics *r, const char *name, const char *labels, double v,
                           mxp_error *err) {
    mxp_metric *m;
    mxp_status s = series_by_text(r, name, labels, &m, err);
    if (s == MXP_OK) mxp_metric_add(m, v);
    return s;
}

mxp_status mxp_metrics_set(mxp_metrics *r, const char *name, const char *labels, double v,
                           mxp_error *err) {
    mxp_metric *m;
    mxp_status s = series_by_text(r, name, labels, &m, err);
    if (s == MXP_OK) mxp_metric_set(m, v);
    return s;
}

mxp_status mxp_metrics_observe(mxp_metrics *r, const char *name, const char *labels, double v,
                               mxp_error *err) {
    mxp_metric *m;
    mxp_status s = series_by_text(r, name, labels, &m, err);
    if (s == MXP_OK) mxp_metric_observe(m, v);
    return s;
}

mxp_status mxp_metrics_get(mxp_metrics *r, const char *name, const char *labels,
                           double *value, mxp_error *err) {
    mxp_metric *m;
    mxp_status s = series_by_text(r, name, labels, &m, err);
    if (s == MXP_OK && value) *value = mxp_metric_value(m);
    return s;
}

/* ---- exposition ------------------------------------------------------------ */

/* HELP text escapes \ and newline; label values also escape ". */
static void put_escaped(mxp_obs_buf *b, const char *s, bool quote) {
    for (const char *p = s; *p; p++) {
        if (*p == '\\')
            mxp_obs_buf_puts(b, "\\\\");
        else if (*p == '\n')
            mxp_obs_buf_puts(b, "\\n");
        else if (quote && *p == '"')
            mxp_obs_buf_puts(b, "\\\"");
        else
            mxp_obs_buf_append(b, p, 1);
    }
}

/* name{l1="v1",...[,le="x"]} value\n */
static void put_sample(mxp_obs_buf *b, const family *f, const mxp_metric *m, const char *suffix,
                       const char *le, double v) {
    mxp_obs_buf_puts(b, f->name);
    mxp_obs_buf_puts(b, suffix);
    if (f->n_labels > 0 || le) {
        mxp_obs_buf_puts(b, "{");
        for (int i = 0; i < f->n_labels; i++) {
            mxp_obs_buf_printf(b, "%s%s=\"", i ? "," : "", f->labels[i]);
            put_escaped(b, m->values[i], true);
            mxp_obs_buf_puts(b, "\"");
        }
        if (le) mxp_obs_buf_printf(b, "%sle=\"%s\"", f->n_labels ? "," : "", le);
        mxp_obs_buf_puts(b, "}");
    }
    char num[40];
    mxp_obs_format_double(v, num, sizeof num);
    mxp_obs_buf_printf(b, " %s\n", num);
}

mxp_status mxp_metrics_render(mxp_metrics *r, char **text, size_t *len, mxp_error *err) {
    if (!r || !text) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_metrics_render: NULL");
    mxp_obs_buf b = {0};
    int nf = atomic_load_explicit(&r->n_families, memory_order_acquire);
    for (int i = 0; i < nf; i++) {
        const family *f = r->fams[i];
        mxp_obs_buf_printf(&b, "# HELP %s ", f->name);
        put_escaped(&b, f->help, false);
        mxp_obs_buf_printf(&b, "\n# TYPE %s %s\n", f->name, mxp_metric_type_name(f->type));
        int ns = atomic_load_explicit(&((family *)f)->n_series, memory_order_acquire);
        for (int j = 0; j < ns; j++) {
            mxp_metric *m = f->series[j];
            if (f->type != MXP_METRIC_HISTOGRAM) {
                put_sample(&b, f, m, "", NULL, mxp_metric_value(m));
                continue;
            }
            uint64_t cum = 0;
            char le[40];
            for (int k = 0; k <= f->n_buckets; k++) {
                cum += atomic_load_explicit(&m->buckets[k], memory_order_relaxed);
                if (k < f->n_buckets)
                    mxp_obs_format_double(f->bounds[k], le, sizeof le);
                else
                    snprintf(le, sizeof le, "+Inf");
                put_sample(&b, f, m, "_bucket", le, (double)cum);
            }
            put_sample(&b, f, m, "_sum", NULL, mxp_metric_value(m));
            put_sample(&b, f, m, "_count", NULL, (double)cum);
        }
    }
    char *p = mxp_obs_buf_take(&b, len);
    if (!p) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metrics exposition text");
    *text = p;
    return MXP_OK;
}
