/* models/classifier.c: the Fashion-MNIST classifier workload (see
 * include/mixprec/classifier.h).
 *
 * Entry points: mxp_fmnist_load/destroy/train/test and
 * mxp_classifier_create[_with_data]/destroy/train/evaluate.
 *
 * The dataset stays in its unsigned-byte form (47 MB for the training
 * images instead of 188 MB as floats); each batch is gathered and
 * standardised into FP32 buffers planned at create. Training mirrors the
 * world model: a seeded per-epoch permutation (Fisher-Yates over a
 * counter-based stream, so epoch e's order does not depend on earlier
 * epochs), drop-last micro-batches, gradient accumulation, the configured
 * LR schedule over the epochs of one train() call.
 */
#include <mixprec/classifier.h>

#include "models/workload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    else
        strcat(path, ".gz");
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

/* ---- the workload ------------------------------------------------------------ */

struct mxp_classifier {
    mxp_config cfg;
    mxp_fmnist *owned; /* NULL when the data is borrowed */
    const mxp_fmnist *data;
    mxp_model *model;
    mxp_trainer *trainer;
    int64_t in_dim, max_batch;
    uint32_t *perm;   /* [n_train] */
    float *bx;        /* [accum, max_batch, in_dim] */
    int32_t *by;      /* [accum, max_batch] */
    float *logits;    /* [max_batch, 10] */
    mxp_batch *micro; /* [accum] */
    mxp_data_position pos; /* epoch, step in epoch, train() call in progress (ckpt.h) */
    mxp_guard *guard;      /* numerical-safety guard (guard.h), or NULL */
    bool stopped;          /* the last train() ended on a guard stop */
    mxp_progress_fn progress;
    void *progress_user;
};

void mxp_classifier_destroy(mxp_classifier *cl) {
    if (!cl) return;
    mxp_guard_destroy(cl->guard); /* detaches from the model first */
    mxp_trainer_destroy(cl->trainer);
    mxp_model_destroy(cl->model);
    mxp_fmnist_destroy(cl->owned);
    mxp_free(cl->perm);
    mxp_free(cl->bx);
    mxp_free(cl->by);
    mxp_free(cl->logits);
    mxp_free(cl->micro);
    mxp_free(cl);
}

/* Standardised FP32 pixels of image i into dst [in_dim]. */
static void gather_image(const mxp_image_split *sp, int64_t in_dim, int64_t i, float *dst) {
    const uint8_t *src = sp->images + (size_t)i * (size_t)in_dim;
    const float k = 1.0f / (255.0f * FMNIST_STD), b = FMNIST_MEAN / FMNIST_STD;
    for (int64_t j = 0; j < in_dim; j++) dst[j] = (float)src[j] * k - b;
}

static mxp_status alloc_buffers(mxp_classifier *cl, mxp_error *err) {
    size_t rows, nx;
    if (!mxp_size_mul((size_t)cl->cfg.grad_accum_steps, (size_t)cl->max_batch, &rows) ||
        !mxp_size_mul(rows, (size_t)cl->in_dim, &nx))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers overflow size_t");
    cl->perm = mxp_calloc((size_t)mxp_fmnist_train(cl->data).n, sizeof *cl->perm);
    cl->bx = mxp_calloc(nx, sizeof(float));
    cl->by = mxp_calloc(rows, sizeof(int32_t));
    cl->logits = mxp_calloc((size_t)cl->max_batch * MXP_FMNIST_CLASSES, sizeof(float));
    cl->micro = mxp_calloc((size_t)cl->cfg.grad_accum_steps, sizeof *cl->micro);
    if (!cl->perm || !cl->bx || !cl->by || !cl->logits || !cl->micro)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "classifier batch buffers (%zu rows)",
                             rows);
    return MXP_OK;
}

mxp_status mxp_classifier_create_with_data(const mxp_config *cfg, const mxp_fmnist *data,
                                           mxp_classifier **out, mxp_error *err) {
    if (!cfg || !data || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_create: NULL argument");
    *out = NULL;
    if (cfg->batch_size < 1 || cfg->grad_accum_steps < 1 || cfg->depth < 1 || cfg->hidden < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld grad_accum_steps=%lld depth=%lld hidden=%lld; "
                             "accepted: all >= 1",
                             (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                             (long long)cfg->depth, (long long)cfg->hidden);
    mxp_image_split tr = mxp_fmnist_train(data);
    if (tr.n < cfg->batch_size * cfg->grad_accum_steps)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "training.batch_size=%lld x training.grad_accum_steps=%lld exceeds "
                             "the %lld training images (data.train_subset); accepted: at most "
                             "%lld images per step",
                             (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                             (long long)tr.n, (long long)tr.n);
    mxp_classifier *cl = mxp_calloc(1, sizeof *cl);
    if (!cl) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "classifier");
    cl->cfg = *cfg;
    cl->data = data;
    cl->in_dim = tr.rows * tr.cols;
    cl->max_batch = cfg->batch_size;

    mxp_model_spec spec =
        mxp_model_spec_mlp(cl->in_dim, cfg->hidden, (int)cfg->depth, MXP_FMNIST_CLASSES,
                           cfg->activation, cfg->layernorm, MXP_LOSS_XENT, cl->max_batch);
    mxp_status s = workload_model_create(&spec, cfg, &cl->model, &cl->trainer, err);
    if (s != MXP_OK) goto fail;
    s = alloc_buffers(cl, err);
    if (s != MXP_OK) goto fail;
    /* the guard (guard.h); its canary probes the first test images, gathered
     * into the batch buffer (the guard copies them) */
    mxp_image_split te = mxp_fmnist_test(data);
    int64_t pb = cfg->guard.canary_batch < cl->max_batch ? cfg->guard.canary_batch : cl->max_batch;
    if (pb > te.n) pb = te.n;
    for (int64_t b = 0; b < pb; b++) {
        gather_image(&te, cl->in_dim, b, cl->bx + b * cl->in_dim);
        cl->by[b] = te.labels[b];
    }
    mxp_batch probe = {.x = cl->bx, .y = NULL, .labels = cl->by, .B = pb};
    s = mxp_guard_for_workload(&cfg->guard, cl->trainer, pb > 0 ? &probe : NULL, &cl->guard,
                               err);
    if (s != MXP_OK) goto fail;
    *out = cl;
    return MXP_OK;
fail:
    mxp_classifier_destroy(cl);
    return s;
}

mxp_status mxp_classifier_create(const mxp_config *cfg, mxp_classifier **out, mxp_error *err) {
    if (!cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_create: NULL argument");
    *out = NULL;
    mxp_fmnist *d = NULL;
    mxp_status s = mxp_fmnist_load(cfg->wl.fmnist_dir, cfg->wl.train_subset,
                                   cfg->wl.test_subset, &d, err);
    if (s != MXP_OK) return s;
    s = mxp_classifier_create_with_data(cfg, d, out, err);
    if (s != MXP_OK) {
        mxp_fmnist_destroy(d);
        return s;
    }
    (*out)->owned = d;
    return MXP_OK;
}

void mxp_classifier_set_progress(mxp_classifier *cl, mxp_progress_fn fn, void *user) {
    cl->progress = fn;
    cl->progress_user = user;
}

/* Fisher-Yates over 0..n-1 from the stream of (seed, epoch). */
static void shuffle(uint32_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    mxp_rng_permutation(perm, n, seed ^ (SHUFFLE_STREAM + (uint64_t)epoch * 0x9E3779B97F4A7C15ull));
}

int64_t mxp_classifier_samples_per_epoch(const mxp_classifier *cl) {
    int64_t per_step = cl->max_batch * cl->cfg.grad_accum_steps;
    return (mxp_fmnist_train(cl->data).n / per_step) * per_step;
}

mxp_status mxp_classifier_train(mxp_classifier *cl, int64_t num_epochs, mxp_error *err) {
    if (!cl) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_train: NULL");
    if (num_epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "num_epochs=%lld; accepted: >= 1",
                             (long long)num_epochs);
    mxp_image_split tr = mxp_fmnist_train(cl->data);
    const int accum = (int)cl->cfg.grad_accum_steps;
    const int64_t B = cl->max_batch;
    const int64_t steps_per_epoch = tr.n / (B * accum);
    mxp_data_position *p = &cl->pos;
    mxp_status st = mxp_data_position_begin(p, num_epochs, B, steps_per_epoch, err);
    if (st != MXP_OK) return st;
    cl->stopped = false;
    int64_t shuffled = -1; /* epoch whose permutation cl->perm holds */
    const workload_loop loop = {cl->trainer, cl->guard, &cl->cfg, cl->progress,
                                cl->progress_user, steps_per_epoch};
    /* The loop reads the position every step, so a guard rollback that moves
     * it continues from there with the same batches. */
    while (!mxp_data_position_done(p)) {
        const int64_t epoch = p->epoch, s = p->step_in_epoch;
        if (epoch != shuffled) {
            mxp_trainer_set_epoch(cl->trainer, epoch);
            shuffle(cl->perm, tr.n, cl->cfg.seed, epoch);
            shuffled = epoch;
        }
        for (int a = 0; a < accum; a++) {
            float *bx = cl->bx + (size_t)a * (size_t)B * (size_t)cl->in_dim;
            int32_t *by = cl->by + (size_t)a * (size_t)B;
            const uint32_t *rows = cl->perm + (s * accum + a) * B;
            for (int64_t b = 0; b < B; b++) {
                gather_image(&tr, cl->in_dim, rows[b], bx + b * cl->in_dim);
                by[b] = tr.labels[rows[b]];
            }
            cl->micro[a] = (mxp_batch){.x = bx, .y = NULL, .labels = by, .B = B};
        }
        mxp_step_result res;
        bool stop;
        st = workload_step(&loop, cl->micro, accum, p, epoch, &res, &stop, err);
        if (st != MXP_OK) return st;
        if (stop) {
            cl->stopped = true;
            return workload_end(&loop, err);
        }
    }
    mxp_data_position_end(p);
    return workload_end(&loop, err);
}

mxp_status mxp_classifier_evaluate(mxp_classifier *cl, double *loss, double *accuracy,
                                   mxp_error *err) {
    if (!cl) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_classifier_evaluate: NULL");
    mxp_image_split te = mxp_fmnist_test(cl->data);
    double total = 0;
    int64_t correct = 0;
    for (int64_t i = 0; i < te.n; i += cl->max_batch) {
        int64_t B = te.n - i < cl->max_batch ? te.n - i : cl->max_batch;
        for (int64_t b = 0; b < B; b++) {
            gather_image(&te, cl->in_dim, i + b, cl->bx + b * cl->in_dim);
            cl->by[b] = te.labels[i + b];
        }
        mxp_status s = mxp_model_predict(cl->model, cl->bx, B, cl->logits, err);
        if (s != MXP_OK) return s;
        for (int64_t b = 0; b < B; b++) {
            /* cross-entropy = logsumexp(z) - z[label], in double */
            const float *z = cl->logits + b * MXP_FMNIST_CLASSES;
            int best = 0;
            for (int c = 1; c < MXP_FMNIST_CLASSES; c++)
                if (z[c] > z[best]) best = c;
            double se = 0;
            for (int c = 0; c < MXP_FMNIST_CLASSES; c++) se += exp((double)z[c] - (double)z[best]);
            total += (double)z[best] + log(se) - (double)z[cl->by[b]];
            correct += best == cl->by[b];
        }
    }
    if (loss) *loss = te.n ? total / (double)te.n : 0.0;
    if (accuracy) *accuracy = te.n ? (double)correct / (double)te.n : 0.0;
    return MXP_OK;
}

mxp_trainer *mxp_classifier_trainer(mxp_classifier *cl) { return cl->trainer; }
mxp_guard *mxp_classifier_guard(mxp_classifier *cl) { return cl->guard; }
bool mxp_classifier_stopped(const mxp_classifier *cl) { return cl->stopped; }
mxp_model *mxp_classifier_model(mxp_classifier *cl) { return cl->model; }
