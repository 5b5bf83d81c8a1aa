/* bench/dstep_init.h: the inputs both sides of the GPU step benchmark share
 * (issue 28 part 5; included by bench/bench_cuda_dstep.c only).
 *
 * The models (bench/torch_gpu_step.py's MODELS, the same five numbers):
 *   wm       4-256x3-4,    batch 32   (the default world model)
 *   mlp512   72-512x3-65,  batch 256
 *   mlp2048  72-2048x3-65, batch 512
 * each depth x (linear(hidden) -> GELU, exact erf form), linear(out), MSE,
 * AdamW lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0, no clipping.
 *
 * The init file DIR/<model>.safetensors (what torch_gpu_step.py
 * --init-dir reads): F32 tensors named as the CPU model names them
 * (mxp_model_tensor: layers.<i>.weight [out, in], layers.<i>.bias [out],
 * i the index in [linear, gelu, ..., linear], PyTorch nn.Sequential's
 * state_dict names and shapes), plus the batch ring x [R, batch, in] and
 * y [R, batch, out]: R distinct batches (default BM_RING = 8), and step s
 * (1-based) of both sides trains on batch (s - 1) mod R, so the loss of
 * step N is taken on batch (N - 1) mod R on both sides. An older file with
 * x [batch, in] and y [batch, out] (one batch, every step) reads as a ring
 * of 1. Metadata: format "mixprec-bench-init", model, layers (the layer
 * list), seed, ring (R), generator.
 * Generated (bm_generate) from mxp_rng seeded with seed + the model's index
 * in MODELS: per tensor in slab order, weight and bias of a linear layer
 * with fan-in n uniform in [-1/sqrt(n), 1/sqrt(n)) (nn.Linear's default
 * range), k * (2 u - 1) with u = mxp_rng_uniform; then per ring slot r =
 * 0..R-1: x_r, then y_r, ~ N(0, 1) (mxp_rng_normal), row-major (R = 1 is
 * the older one-batch file's draw). The file, not the generator, is the
 * contract: both sides read it.
 *
 * Entry points (static): bm_layers_text, bm_model_new (the
 * CPU model whose tensor table names the slab), bm_generate, bm_write,
 * bm_read, bm_init_free, bm_x/bm_y (the batch of a step), bm_cpu_losses
 * (mxp_trainer in fp32 on the ring, the losses of the first steps: the host
 * check's side, tests/test_torch_gpu_step.sh).
 */
#ifndef MIXPREC_BENCH_DSTEP_INIT_H
#define MIXPREC_BENCH_DSTEP_INIT_H

#include <mixprec/mixprec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bm_model {
    const char *name;
    int64_t in, hidden;
    int depth;
    int64_t out, batch;
} bm_model;

static const bm_model BM_MODELS[] = {
    {"wm", 4, 256, 3, 4, 32},
    {"mlp512", 72, 512, 3, 65, 256},
    {"mlp2048", 72, 2048, 3, 65, 512},
};
enum { BM_NMODELS = (int)(sizeof BM_MODELS / sizeof BM_MODELS[0]) };

/* The benchmark's AdamW (bench/torch_gpu_step.py ADAMW). */
#define BM_LR 1e-3f
#define BM_BETA1 0.9f
#define BM_BETA2 0.999f
#define BM_EPS 1e-8f
#define BM_WD 0.0f
/* The default ring of distinct batches, and the most a file may hold. */
#define BM_RING 8
#define BM_RING_MAX 1024

typedef struct bm_init {
    size_t P;         /* parameters, slab order */
    int ring;         /* R: distinct batches */
    float *w, *x, *y; /* w [P], x [R, batch, in], y [R, batch, out] */
    char source[512];
} bm_init;

/* The batch of step i (0-based): ring slot i mod R (the header's rule). */
static const float *bm_x(const bm_model *m, const bm_init *in, int64_t i) {
    return in->x + (size_t)(i % in->ring) * (size_t)(m->batch * m->in);
}
static const float *bm_y(const bm_model *m, const bm_init *in, int64_t i) {
    return in->y + (size_t)(i % in->ring) * (size_t)(m->batch * m->out);
}

/* "[linear:256, gelu, linear:256, gelu, linear:256, gelu, linear:4]" (the
 * text torch_gpu_step.py's layers_spec writes). */
static void bm_layers_text(const bm_model *m, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < m->depth && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "linear:%lld, gelu, ", (long long)m->hidden);
    if (k < n) snprintf(buf + k, n - k, "linear:%lld]", (long long)m->out);
}

/* The CPU model of m in precision p (its tensor table names the slab; the
 * CPU check trains it). */
static mxp_status bm_model_new(const bm_model *m, mxp_precision p, mxp_model **out,
                               mxp_error *err) {
    mxp_model_spec s = mxp_model_spec_mlp(m->in, m->hidden, m->depth, m->out, MXP_LAYER_GELU,
                                          false, MXP_LOSS_MSE, m->batch);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    return mxp_model_create(&s, &pol, 77, out, err);
}

static void bm_init_free(bm_init *in) {
    free(in->w);
    free(in->x);
    free(in->y);
    memset(in, 0, sizeof *in);
}

static int bm_alloc(const bm_model *m, size_t P, int ring, bm_init *in) {
    memset(in, 0, sizeof *in);
    in->P = P;
    in->ring = ring;
    in->w = malloc(P * sizeof(float));
    in->x = malloc((size_t)ring * (size_t)(m->batch * m->in) * sizeof(float));
    in->y = malloc((size_t)ring * (size_t)(m->batch * m->out) * sizeof(float));
    if (in->w && in->x && in->y) return 0;
    bm_init_free(in);
    return 1;
}

/* The documented generator (header comment), a ring of `ring` batches
 * (1..BM_RING_MAX). 0, or 1 out of memory. */
static int bm_generate(const bm_model *m, const mxp_model *model, uint64_t seed, int ring,
                       bm_init *in) {
    if (bm_alloc(m, mxp_model_num_params(model), ring, in)) return 1;
    mxp_rng r;
    mxp_rng_init(&r, seed + (uint64_t)(m - BM_MODELS));
    int64_t fan_in = m->in;
    for (int i = 0; i < mxp_model_num_tensors(model); i++) {
        const mxp_tensor_info *t = mxp_model_tensor(model, i);
        if (t->ndim == 2) fan_in = t->shape[1]; /* a weight [out, in]; its bias follows */
        const float k = 1.0f / sqrtf((float)fan_in);
        for (size_t j = 0; j < t->count; j++)
            in->w[t->offset + j] = k * (2.0f * mxp_rng_uniform(&r) - 1.0f);
    }
    for (int k = 0; k < ring; k++) {
        float *x = (float *)bm_x(m, in, k), *y = (float *)bm_y(m, in, k);
        for (int64_t j = 0; j < m->batch * m->in; j++) x[j] = mxp_rng_normal(&r);
        for (int64_t j = 0; j < m->batch * m->out; j++) y[j] = mxp_rng_normal(&r);
    }
    snprintf(in->source, sizeof in->source, "generated in memory (seed %llu, ring %d)",
             (unsigned long long)seed, ring);
    return 0;
}

/* Write in as DIR/<model>.safetensors. */
static mxp_status bm_write(const char *dir, const bm_model *m, const mxp_model *model,
                           const bm_init *in, uint64_t seed, mxp_error *err) {
    mxp_st_writer *w = NULL;
    mxp_status st = mxp_st_writer_create(&w, err);
    char path[4096], layers[256], sd[32], rg[16];
    bm_layers_text(m, layers, sizeof layers);
    snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
    snprintf(rg, sizeof rg, "%d", in->ring);
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, m->name);
    const char *meta[][2] = {{"format", "mixprec-bench-init"},
                             {"model", m->name},
                             {"layers", layers},
                             {"seed", sd},
                             {"ring", rg},
                             {"writer", "bench/bench_cuda_dstep --write-init"},
                             {"generator", "bench/dstep_init.h bm_generate"}};
    for (size_t i = 0; st == MXP_OK && i < sizeof meta / sizeof meta[0]; i++)
        st = mxp_st_writer_add_meta(w, meta[i][0], meta[i][1], err);
    for (int i = 0; st == MXP_OK && i < mxp_model_num_tensors(model); i++) {
        const mxp_tensor_info *t = mxp_model_tensor(model, i);
        st = mxp_st_writer_add_tensor(w, t->name, MXP_DTYPE_F32, t->ndim, t->shape,
                                      in->w + t->offset, err);
    }
    const int64_t xs[3] = {in->ring, m->batch, m->in}, ys[3] = {in->ring, m->batch, m->out};
    if (st == MXP_OK) st = mxp_st_writer_add_tensor(w, "x", MXP_DTYPE_F32, 3, xs, in->x, err);
    if (st == MXP_OK) st = mxp_st_writer_add_tensor(w, "y", MXP_DTYPE_F32, 3, ys, in->y, err);
    if (st == MXP_OK) st = mxp_st_writer_write(w, path, err);
    mxp_st_writer_destroy(w);
    return st;
}

/* One F32 tensor `name` of exactly `shape` from f into dst; 0 or 1 (why). */
static int bm_take(const mxp_st_file *f, const char *name, int ndim, const int64_t *shape,
                   float *dst, char *why, size_t n) {
    const mxp_st_tensor *t = mxp_st_file_find(f, name);
    bool ok = t && t->dtype == MXP_DTYPE_F32 && t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char dims[96];
        if (ndim == 3)
            snprintf(dims, sizeof dims, "[%lld, %lld, %lld]", (long long)shape[0],
                     (long long)shape[1], (long long)shape[2]);
        else if (ndim == 2)
            snprintf(dims, sizeof dims, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
        else
            snprintf(dims, sizeof dims, "[%lld]", (long long)shape[0]);
        snprintf(why, n, "%s: needs tensor %s, F32 of shape %s; %s", mxp_st_file_label(f), name,
                 dims, t ? "it has another dtype or shape" : "it is missing");
        return 1;
    }
    memcpy(dst, t->data, t->nbytes); /* little-endian host, like the file */
    return 0;
}

/* The ring of a file: x [R, batch, in] gives R (1..BM_RING_MAX), an older
 * x [batch, in] gives 1; 0 (why) for another x. */
static int bm_ring_of(const mxp_st_file *f, const bm_model *m, char *why, size_t n) {
    const mxp_st_tensor *t = mxp_st_file_find(f, "x");
    if (t && t->ndim == 2) return 1;
    if (t && t->ndim == 3 && t->shape[0] >= 1 && t->shape[0] <= BM_RING_MAX &&
        t->shape[1] == m->batch && t->shape[2] == m->in)
        return (int)t->shape[0];
    snprintf(why, n, "%s: needs tensor x, F32 [R, %lld, %lld] with R in 1..%d (or an older "
             "file's [%lld, %lld]); %s", mxp_st_file_label(f), (long long)m->batch,
             (long long)m->in, BM_RING_MAX, (long long)m->batch, (long long)m->in,
             t ? "it has another shape" : "it is missing");
    return 0;
}

/* Read PATH (the layout above) for model m; 0, or 1 with why. Extra
 * tensors are refused (a file of another model). */
static int bm_read(const char *path, const bm_model *m, const mxp_model *model, bm_init *in,
                   char *why, size_t n) {
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    memset(in, 0, sizeof *in);
    if (mxp_st_file_read(path, &f, &err) != MXP_OK) {
        snprintf(why, n, "%s", err.msg);
        return 1;
    }
    const int ring = bm_ring_of(f, m, why, n);
    int rc = ring < 1;
    if (rc == 0 && (rc = bm_alloc(m, mxp_model_num_params(model), ring, in)) != 0)
        snprintf(why, n, "out of memory for %s", path);
    const int nt = mxp_model_num_tensors(model);
    for (int i = 0; rc == 0 && i < nt; i++) {
        const mxp_tensor_info *t = mxp_model_tensor(model, i);
        rc = bm_take(f, t->name, t->ndim, t->shape, in->w + t->offset, why, n);
    }
    /* an older file's 2-D x, y: the ring of 1 (the same bytes) */
    const mxp_st_tensor *x = mxp_st_file_find(f, "x");
    const int nd = x && x->ndim == 2 ? 2 : 3, o = 3 - nd;
    const int64_t xs[3] = {ring, m->batch, m->in}, ys[3] = {ring, m->batch, m->out};
    if (rc == 0) rc = bm_take(f, "x", nd, xs + o, in->x, why, n);
    if (rc == 0) rc = bm_take(f, "y", nd, ys + o, in->y, why, n);
    if (rc == 0 && mxp_st_file_num_tensors(f) != nt + 2) {
        snprintf(why, n, "%s: %d tensors; model %s has %d, plus x and y", path,
                 mxp_st_file_num_tensors(f), m->name, nt);
        rc = 1;
    }
    for (size_t j = 0; rc == 0 && j < in->P; j++)
        if (!isfinite(in->w[j])) {
            snprintf(why, n, "%s: parameter %zu is not finite", path, j);
            rc = 1;
        }
    if (rc == 0) snprintf(in->source, sizeof in->source, "file %s", path);
    mxp_st_file_destroy(f);
    if (rc) bm_init_free(in);
    return rc;
}

/* mxp_trainer (CPU, fp32) from in for `steps` steps on the ring (step s
 * on batch s mod R): losses[s] = the loss of step s + 1 (its forward,
 * before its update).
 * 0, or 1 with why. */
static int bm_cpu_losses(const bm_model *m, const bm_init *in, int steps, double *losses,
                         char *why, size_t n) {
    mxp_error err = {0};
    mxp_model *model = NULL;
    mxp_trainer *tr = NULL;
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.optim.kind = MXP_OPTIM_ADAMW;
    tc.optim.lr = BM_LR;
    tc.optim.beta1 = BM_BETA1;
    tc.optim.beta2 = BM_BETA2;
    tc.optim.eps = BM_EPS;
    tc.optim.weight_decay = BM_WD;
    tc.clip_grad_norm = 0.0f; /* off, as torch_gpu_step.py */
    mxp_status st = bm_model_new(m, MXP_PRECISION_FP32, &model, &err);
    if (st == MXP_OK) st = mxp_trainer_create(model, &tc, &tr, &err);
    if (st == MXP_OK)
        st = mxp_trainer_tensor_set(tr, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, in->w,
                                    in->P * sizeof(float), &err);
    for (int s = 0; st == MXP_OK && s < steps; s++) {
        const mxp_batch b = {bm_x(m, in, s), bm_y(m, in, s), NULL, m->batch};
        mxp_step_result r;
        st = mxp_trainer_step(tr, &b, 1, &r, &err);
        losses[s] = r.loss;
    }
    mxp_trainer_destroy(tr);
    mxp_model_destroy(model);
    if (st != MXP_OK) snprintf(why, n, "CPU trainer: %s", err.msg);
    return st != MXP_OK;
}

#endif /* MIXPREC_BENCH_DSTEP_INIT_H */
