/* models/classifier.c: the Fashion-MNIST classifier workload (see
 * include/mixprec/classifier.h) as a data + model provider of mxp_run
 * (run.h), and the classifier.h API as a thin wrapper over a run of it
 * (run.h's public functions).
 *
 * Entry points: mxp_fmnist_load/destroy/train/test, classifier_provider
 * (models/workload.h) and mxp_classifier_*.
 *
 * The dataset stays in its unsigned-byte form (47 MB for the training
 * images instead of 188 MB as floats); each batch is gathered and
 * standardised into FP32 buffers planned at create. The run owns the loop.
 */
#include <mixprec/classifier.h>

#include "models/user_data.h"
#include "models/workload.h"
#include "models/workload_run.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Fashion-MNIST training-set pixel statistics (of x/255), as commonly used
 * for normalisation (torchvision examples: mean 0.2860, std 0.3530). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f
#define SHUFFLE_STREAM 0x434c415353ull /* "CLASS" */

/* ---- dataset ----------------------------------------------------------------- */

struct mxp_fmnist {
    mxp_idx train_x, train_y, test_x, test_y;
    int64_t n_train, n_test;
};

void mxp_fmnist_destroy(mxp_fmnist *d) {
    if (!d) return;
    mxp_idx_free(&d->train_x);
    mxp_idx_free(&d->train_y);
    mxp_idx_free(&d->test_x);
    mxp_idx_free(&d->test_y);
    mxp_free(d);
}

/* Read DIR/NAME, or DIR/NAME.gz when NAME does not exist. */
static mxp_status read_named(const char *dir, const char *name, mxp_idx *out, mxp_error *err) {
    char path[1024];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n + 4 >= sizeof path)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "dataset directory '%.200s' is too long; accepted: < 1000 "
                             "characters", dir);
    struct stat st; /* stat, not open: a FIFO here must not block (idx refuses it) */
    if (stat(path, &st) != 0) strcat(path, ".gz");
    return mxp_idx_read(path, out, err);
}

/* Images [n, rows, cols] and labels [n] of one split: shapes, counts and
 * label range; keeps the first `limit` examples when limit > 0. */
static mxp_status check_split(const char *dir, const char *xname, const char *yname,
                              const mxp_idx *x, const mxp_idx *y, int64_t *n, mxp_error *err) {
    if (x->ndims != 3)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "'%s/%s': %d dimensions; accepted: 3 (images x rows x cols)", dir,
                             xname, x->ndims);
    if (y->ndims != 1)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "'%s/%s': %d dimensions; accepted: 1 (one label per image)", dir,
                             yname, y->ndims);
    if (x->dims[0] != y->dims[0])
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "'%s/%s' holds %lld images but '%s' holds %lld labels; accepted: "
                             "equal counts",
                             dir, xname, (long long)x->dims[0], yname, (long long)y->dims[0]);
    for (size_t i = 0; i < y->count; i++)
        if (y->data[i] >= MXP_FMNIST_CLASSES)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "'%s/%s': label %u at index %zu; accepted: 0..%d", dir, yname,
                                 y->data[i], i, MXP_FMNIST_CLASSES - 1);
    *n = x->dims[0];
    return MXP_OK;
}

mxp_status mxp_fmnist_load(const char *dir, int64_t max_train, int64_t max_test,
                           mxp_fmnist **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_fmnist_load: out is NULL");
    *out = NULL;
    if (!dir || !*dir)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "Fashion-MNIST directory is empty; accepted: a directory such as %s",
                             MXP_FMNIST_DEFAULT_DIR);
    if (max_train < 0 || max_test < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "max_train=%lld max_test=%lld; accepted: >= 0 (0 = all)",
                             (long long)max_train, (long long)max_test);
    mxp_fmnist *d = mxp_calloc(1, sizeof *d);
    if (!d) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "Fashion-MNIST dataset");
    static const char *const names[4] = {
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    mxp_idx *slots[4] = {&d->train_x, &d->train_y, &d->test_x, &d->test_y};
    mxp_status s = MXP_OK;
    for (int i = 0; i < 4 && s == MXP_OK; i++) s = read_named(dir, names[i], slots[i], err);
    if (s == MXP_OK)
        s = check_split(dir, names[0], names[1], &d->train_x, &d->train_y, &d->n_train, err);
    if (s == MXP_OK)
        s = check_split(dir, names[2], names[3], &d->test_x, &d->test_y, &d->n_test, err);
    if (s == MXP_OK &&
        (d->train_x.dims[1] != d->test_x.dims[1] || d->train_x.dims[2] != d->test_x.dims[2]))
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "'%s': training images are %lldx%lld but test images %lldx%lld; "
                          "accepted: equal sizes",
                          dir, (long long)d->train_x.dims[1], (long long)d->train_x.dims[2],
                          (long long)d->test_x.dims[1], (long long)d->test_x.dims[2]);
    if (s != MXP_OK) {
        mxp_fmnist_destroy(d);
        return s;
    }
    if (max_train > 0 && max_train < d->n_train) d->n_train = max_train;
    if (max_test > 0 && max_test < d->n_test) d->n_test = max_test;
    *out = d;
    return MXP_OK;
}

static mxp_image_split split_of(const mxp_idx *x, const mxp_idx *y, int64_t n) {
    return (mxp_image_split){n, x->dims[1], x->dims[2], x->data, y->data};
}

mxp_image_split mxp_fmnist_train(const mxp_fmnist *d) {
    return split_of(&d->train_x, &d->train_y, d->n_train);
}

mxp_image_split mxp_fmnist_test(const mxp_fmnist *d) {
    return split_of(&d->test_x, &d->test_y, d->n_test);
}

/* ---- the provider ------------------------------------------------------------ */

typedef struct cl_data {
    mxp_config cfg;
    mxp_fmnist *owned; /* NULL when the data is borrowed */
    const mxp_fmnist *data;
    int64_t in_dim, max_batch;
    float *bx;     /* [accum, max_batch, in_dim] */
    int32_t *by;   /* [accum, max_batch] */
    float *logits; /* [max_batch, 10] */
} cl_data;

static void cl_destroy(void *self) {
    cl_data *d = self;
    if (!d) return;
    mxp_fmnist_destroy(d->owned);
    mxp_free(d->bx);
    mxp_free(d->by);
    mxp_free(d->logits);
    mxp_free(d);
}

/* Standardised FP32 pixels of image i into dst [in_dim]. */
static void gather_image(const mxp_image_split *sp, int64_t in_dim, int64_t i, float *dst) {
    const uint8_t *src = sp->images + (size_t)i * (size_t)in_dim;
    const float k = 1.0f / (255.0f * FMNIST_STD), b = FMNIST_MEAN / FMNIST_STD;
    for (int64_t j = 0; j < in_dim; j++) dst[j] = (float)src[j] * k - b;
}

static mxp_status cl_spec(void *self, mxp_model_spec *out, mxp_error *err) {
    cl_data *d = self;
    return ud_model_spec(&d->cfg, d->in_dim, MXP_FMNIST_CLASSES, MXP_LOSS_XENT, d->max_batch,
                         NULL, out, err);
}

static int64_t cl_num_train(void *self) { return mxp_fmnist_train(((cl_data *)self)->data).n; }

static mxp_status cl_fill(void *self, int slot, const uint32_t *idx, int64_t n, mxp_batch *out,
                          mxp_error *err) {
    (void)err;
    cl_data *d = self;
    mxp_image_split tr = mxp_fmnist_train(d->data);
    float *bx = d->bx + (size_t)slot * (size_t)d->max_batch * (size_t)d->in_dim;
    int32_t *by = d->by + (size_t)slot * (size_t)d->max_batch;
    for (int64_t b = 0; b < n; b++) {
        gather_image(&tr, d->in_dim, idx[b], bx + b * d->in_dim);
        by[b] = tr.labels[idx[b]];
    }
    *out = (mxp_batch){.x = bx, .y = NULL, .labels = by, .B = n};
    return MXP_OK;
}

/* The canary probes the first test images, gathered into slot 0. */
static mxp_status cl_canary(void *self, int64_t rows, mxp_batch *out, mxp_error *err) {
    (void)err;
    cl_data *d = self;
    mxp_image_split te = mxp_fmnist_test(d->data);
    int64_t pb = rows < d->max_batch ? rows : d->max_batch;
    if (pb > te.n) pb = te.n;
    for (int64_t b = 0; b < pb; b++) {
        gather_image(&te, d->in_dim, b, d->bx + b * d->in_dim);
        d->by[b] = te.labels[b];
    }
    *out = (mxp_batch){.x = d->bx, .y = NULL, .labels = d->by, .B = pb};
    return MXP_OK;
}

/* Mean cross-entropy and top-1 accuracy on the test split. */
static mxp_status cl_evaluate(void *self, mxp_model *m, mxp_run_eval *out, mxp_error *err) {
    cl_data *d = self;
    mxp_image_split te = mxp_fmnist_test(d->data);
    double total = 0;
    int64_t correct = 0;
    for (int64_t i = 0; i < te.n; i += d->max_batch) {
        int64_t B = te.n - i < d->max_batch ? te.n - i : d->max_batch;
        for (int64_t b = 0; b < B; b++) {
            gather_image(&te, d->in_dim, i + b, d->bx + b * d->in_dim);
            d->by[b] = te.labels[i + b];
        }
        mxp_status s = mxp_model_predict(m, d->bx, B, d->logits, err);
        if (s != MXP_OK) return s;
        for (int64_t b = 0; b < B; b++) {
            /* cross-entropy = logsumexp(z) - z[label], in double */
            const float *z = d->logits + b * MXP_FMNIST_CLASSES;
            int best = 0;
            for (int c = 1; c < MXP_FMNIST_CLASSES; c++)
                if (z[c] > z[best]) best = c;
            double se = 0;
            for (int c = 0; c < MXP_FMNIST_CLASSES; c++) se += exp((double)z[c] - (double)z[best]);
            total += (double)z[best] + log(se) - (double)z[d->by[b]];
            correct += best == d->by[b];
        }
    }
    snprintf(out->name, sizeof out->name, "test");
    out->loss = te.n ? total / (double)te.n : 0.0;
    out->accuracy = te.n ? (double)correct / (double)te.n : 0.0;
    return MXP_OK;
}

static void cl_signature(void *self, char *buf, size_t n) {
    cl_data *d = self;
    mxp_image_split tr = mxp_fmnist_train(d->data), te = mxp_fmnist_test(d->data);
    snprintf(buf, n, "images=%lldx%lld classes=%d train=%lld test=%lld", (long long)tr.rows,
             (long long)tr.cols, MXP_FMNIST_CLASSES, (long long)tr.n, (long long)te.n);
}

/* The provider over data (borrowed, or owned when `owned`: released on
 * failure too). */
static mxp_status provider_on(const mxp_config *cfg, const mxp_fmnist *data, mxp_fmnist *owned,
                              mxp_workload_provider *out, mxp_error *err) {
    mxp_status s = workload_check_mlp(cfg, err);
    cl_data *d = s == MXP_OK ? mxp_calloc(1, sizeof *d) : NULL;
    if (s == MXP_OK && !d) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "classifier");
    if (s != MXP_OK) {
        mxp_fmnist_destroy(owned);
        return s;
    }
    mxp_image_split tr = mxp_fmnist_train(data);
    d->cfg = *cfg;
    d->data = data;
    d->owned = owned;
    d->in_dim = tr.rows * tr.cols;
    d->max_batch = cfg->batch_size;
    size_t rows, nx;
    if (!mxp_size_mul((size_t)cfg->grad_accum_steps, (size_t)d->max_batch, &rows) ||
        !mxp_size_mul(rows, (size_t)d->in_dim, &nx)) {
        cl_destroy(d);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers overflow size_t");
    }
    d->bx = mxp_calloc(nx, sizeof(float));
    d->by = mxp_calloc(rows, sizeof(int32_t));
    d->logits = mxp_calloc((size_t)d->max_batch * MXP_FMNIST_CLASSES, sizeof(float));
    if (!d->bx || !d->by || !d->logits) {
        cl_destroy(d);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "classifier batch buffers (%zu rows)",
                             rows);
    }
    *out = (mxp_workload_provider){.self = d,
                                   .name = "classifier",
                                   .model_spec = cl_spec,
                                   .num_train = cl_num_train,
                                   .rows_per_sample = 1,
                                   .shuffle_stream = SHUFFLE_STREAM,
                                   .fill_batch = cl_fill,
                                   .canary_batch = cl_canary,
                                   .evaluate = cl_evaluate,
                                   .data_signature = cl_signature,
                                   .destroy = cl_destroy};
    return MXP_OK;
}

mxp_status classifier_provider(const mxp_config *cfg, mxp_workload_provider *out,
                               mxp_error *err) {
    mxp_fmnist *d = NULL;
    mxp_status s = mxp_fmnist_load(cfg->wl.fmnist_dir, cfg->wl.train_subset,
                                   cfg->wl.test_subset, &d, err);
    return s != MXP_OK ? s : provider_on(cfg, d, d, out, err);
}

/* ---- classifier.h: a run of the provider ------------------------------------
 * An mxp_classifier owns its mxp_run (models/workload_run.h). */

struct mxp_classifier {
    workload_run w;
};

static mxp_run *R(const mxp_classifier *cl) { return cl->w.run; }

/* The handle over provider p (released by the run, also on failure; when
 * s reports that making p failed, there is nothing to release). */
static mxp_status wrap(const mxp_config *cfg, mxp_status s, mxp_workload_provider *p,
                       mxp_classifier **out, mxp_error *err) {
    if (s != MXP_OK) return s;
    mxp_classifier *cl = mxp_calloc(1, sizeof *cl);
    if (!cl) {
        if (p->destroy) p->destroy(p->self);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "classifier");
    }
    s = workload_run_create(&cl->w, cfg, p, err);
    if (s != MXP_OK) {
        mxp_free(cl);
        return s;
    }
    *out = cl;
    return MXP_OK;
}

mxp_status mxp_classifier_create_with_data(const mxp_config *cfg, const mxp_fmnist *data,
                                           mxp_classifier **out, mxp_error *err) {
    if (!cfg || !data || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_create: NULL argument");
    *out = NULL;
    mxp_workload_provider p;
    return wrap(cfg, provider_on(cfg, data, NULL, &p, err), &p, out, err);
}

mxp_status mxp_classifier_create(const mxp_config *cfg, mxp_classifier **out, mxp_error *err) {
    if (!cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_create: NULL argument");
    *out = NULL;
    mxp_workload_provider p;
    return wrap(cfg, classifier_provider(cfg, &p, err), &p, out, err);
}

void mxp_classifier_destroy(mxp_classifier *cl) {
    if (!cl) return;
    workload_run_destroy(&cl->w);
    mxp_free(cl);
}

void mxp_classifier_set_progress(mxp_classifier *cl, mxp_progress_fn fn, void *user) {
    cl->w.progress = fn;
    cl->w.progress_user = user;
}

int64_t mxp_classifier_samples_per_epoch(const mxp_classifier *cl) {
    const mxp_config *cfg = mxp_run_config(R(cl));
    const int64_t per_step = cfg->batch_size * cfg->grad_accum_steps;
    return (cl_num_train(workload_run_self(&cl->w)) / per_step) * per_step;
}

mxp_status mxp_classifier_train(mxp_classifier *cl, int64_t num_epochs, mxp_error *err) {
    if (!cl) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_train: NULL");
    if (num_epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "num_epochs=%lld; accepted: >= 1",
                             (long long)num_epochs);
    return mxp_run_train(R(cl), num_epochs, 0, err);
}

mxp_status mxp_classifier_evaluate(mxp_classifier *cl, double *loss, double *accuracy,
                                   mxp_error *err) {
    if (!cl) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_evaluate: NULL");
    mxp_run_eval ev;
    mxp_status s = mxp_run_evaluate(R(cl), &ev, err);
    if (s != MXP_OK) return s;
    if (loss) *loss = ev.loss;
    if (accuracy) *accuracy = ev.accuracy;
    return MXP_OK;
}

mxp_trainer *mxp_classifier_trainer(mxp_classifier *cl) { return mxp_run_trainer(R(cl)); }
mxp_guard *mxp_classifier_guard(mxp_classifier *cl) { return mxp_run_guard(R(cl)); }
bool mxp_classifier_stopped(const mxp_classifier *cl) { return workload_run_stopped(&cl->w); }
mxp_model *mxp_classifier_model(mxp_classifier *cl) { return mxp_run_model(R(cl)); }
