/* models/world_model.c: the world-model workload (see world_model.h).
 *
 * Entry points: mxp_world_model_create/destroy/train/validation_loss.
 * Owns the replay buffer, the model, the trainer and the batch buffers
 * (planned at create: gather buffers for grad_accum_steps micro-batches of
 * the configured batch size, and the permutation of training rows).
 */
#include <mixprec/world_model.h>

#include "models/workload.h"

#include <math.h>
#include <signal.h>
#include <string.h>

/* RNG stream of the per-epoch shuffle: far from the model-init and
 * stochastic-rounding streams of the same seed. */
#define SHUFFLE_STREAM 0x5348554646ull /* "SHUFF" */

struct mxp_world_model {
    mxp_config cfg;
    mxp_replay *replay;
    mxp_model *model;
    mxp_trainer *trainer;
    int64_t in_dim, out_dim;
    int64_t max_batch;
    uint32_t *perm;   /* [n_train] training-row order of the current epoch */
    float *bx, *by;   /* [accum, max_batch, in_dim], [accum, max_batch, out_dim] */
    mxp_batch *micro; /* [accum] views into bx/by */
    mxp_data_position pos; /* epoch, step in epoch, train() call in progress (ckpt.h) */
    mxp_ckpt_manager *ckpt;                   /* borrowed; NULL: no checkpoints */
    const volatile sig_atomic_t *stop_flag;   /* graceful stop request, polled per step */
    bool stopped;                             /* the last train() ended on a stop request */
    mxp_guard *guard; /* numerical-safety guard (guard.h), or NULL */
    mxp_progress_fn progress;
    void *progress_user;
    int dp_rank, dp_size; /* data parallelism: this rank's shard of each global batch */
};

void mxp_world_model_destroy(mxp_world_model *wm) {
    if (!wm) return;
    mxp_guard_destroy(wm->guard); /* detaches from the model first */
    mxp_trainer_destroy(wm->trainer);
    mxp_model_destroy(wm->model);
    mxp_replay_destroy(wm->replay);
    mxp_free(wm->perm);
    mxp_free(wm->bx);
    mxp_free(wm->by);
    mxp_free(wm->micro);
    mxp_free(wm);
}

static mxp_status alloc_batches(mxp_world_model *wm, mxp_error *err) {
    size_t rows, nx, ny;
    if (!mxp_size_mul((size_t)wm->cfg.grad_accum_steps, (size_t)wm->max_batch, &rows) ||
        !mxp_size_mul(rows, (size_t)wm->in_dim, &nx) ||
        !mxp_size_mul(rows, (size_t)wm->out_dim, &ny))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers overflow size_t");
    int64_t n_train = mxp_replay_train(wm->replay).n;
    wm->perm = mxp_calloc((size_t)n_train, sizeof *wm->perm);
    wm->bx = mxp_calloc(nx, sizeof(float));
    wm->by = mxp_calloc(ny, sizeof(float));
    wm->micro = mxp_calloc((size_t)wm->cfg.grad_accum_steps, sizeof *wm->micro);
    if (!wm->perm || !wm->bx || !wm->by || !wm->micro)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers (%zu rows)", rows);
    return MXP_OK;
}

static mxp_status guard_setup(mxp_world_model *wm, mxp_error *err);

mxp_status mxp_world_model_create(const mxp_config *cfg, mxp_world_model **out,
                                  mxp_error *err) {
    if (!cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_create: NULL argument");
    *out = NULL;
    if (cfg->batch_size < 1 || cfg->grad_accum_steps < 1 || cfg->depth < 1 || cfg->hidden < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld grad_accum_steps=%lld depth=%lld hidden=%lld; "
                             "accepted: all >= 1",
                             (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                             (long long)cfg->depth, (long long)cfg->hidden);
    if (cfg->depth > (MXP_MODEL_MAX_LAYERS - 1) / 3)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model depth %lld; accepted: 1..%d",
                             (long long)cfg->depth, (MXP_MODEL_MAX_LAYERS - 1) / 3);
    mxp_world_model *wm = mxp_calloc(1, sizeof *wm);
    if (!wm) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "world model");
    wm->cfg = *cfg;
    wm->max_batch = cfg->batch_size;
    wm->dp_size = 1;

    mxp_replay_config rc = cfg->data;
    rc.seed = cfg->seed;
    mxp_status s = mxp_replay_create(&rc, &wm->replay, err);
    if (s != MXP_OK) goto fail;
    wm->in_dim = mxp_replay_in_dim(wm->replay);
    wm->out_dim = mxp_replay_out_dim(wm->replay);
    if (mxp_replay_train(wm->replay).n < cfg->batch_size) {
        s = mxp_error_set(err, MXP_ERR_CONFIG,
                          "training.batch_size=%lld exceeds the %lld training transitions; "
                          "accepted: <= %lld (or generate more data.trajectories)",
                          (long long)cfg->batch_size, (long long)mxp_replay_train(wm->replay).n,
                          (long long)mxp_replay_train(wm->replay).n);
        goto fail;
    }

    mxp_model_spec spec =
        mxp_model_spec_mlp(wm->in_dim, cfg->hidden, (int)cfg->depth, wm->out_dim,
                           cfg->activation, cfg->layernorm, MXP_LOSS_MSE, wm->max_batch);
    s = workload_model_create(&spec, cfg, &wm->model, &wm->trainer, err);
    if (s != MXP_OK) goto fail;
    s = alloc_batches(wm, err);
    if (s != MXP_OK) goto fail;
    if ((s = guard_setup(wm, err)) != MXP_OK) goto fail;
    *out = wm;
    return MXP_OK;
fail:
    mxp_world_model_destroy(wm);
    return s;
}

/* precision: auto (preflight on the first training batches) and the guard,
 * whose canary probes guard.canary.batch_size validation rows spread evenly
 * over the validation split (guard.h). The first rows would be the start of
 * one trajectory: a narrow corner of the state space whose relative loss gap
 * is not the model's (mixed_bf16 read 5-21% there against ~1% over the whole
 * validation set, and the guard fell back from a healthy run). */
static mxp_status guard_setup(mxp_world_model *wm, mxp_error *err) {
    const mxp_config *cfg = &wm->cfg;
    mxp_replay_split tr = mxp_replay_train(wm->replay), v = mxp_replay_val(wm->replay);
    int64_t pb = cfg->guard.canary_batch < wm->max_batch ? cfg->guard.canary_batch : wm->max_batch;
    if (pb > v.n) pb = v.n;
    const size_t in = (size_t)wm->in_dim, outd = (size_t)wm->out_dim;
    float *px = pb > 0 ? mxp_calloc((size_t)pb * (in + outd), sizeof(float)) : NULL;
    if (pb > 0 && !px) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "canary probe batch");
    for (int64_t b = 0; b < pb; b++) {
        const size_t row = (size_t)(b * v.n / pb);
        memcpy(px + (size_t)b * in, v.x + row * in, in * sizeof(float));
        memcpy(px + (size_t)pb * in + (size_t)b * outd, v.y + row * outd, outd * sizeof(float));
    }
    mxp_batch probe = {.x = px, .y = px ? px + (size_t)pb * in : NULL, .labels = NULL, .B = pb};
    mxp_status s = mxp_guard_for_workload(&cfg->guard, wm->trainer, pb > 0 ? &probe : NULL,
                                          &wm->guard, err);
    mxp_free(px); /* the guard copied the probe */
    if (s != MXP_OK || !cfg->precision_auto) return s;
    /* after the guard, so a fault of step 0 is already in the weights */
    s = mxp_guard_auto_precision(wm->trainer, &cfg->guard, tr.x, tr.y, tr.n, wm->max_batch, NULL,
                                 err);
    if (s == MXP_OK) wm->cfg.precision = mxp_model_policy(wm->model)->mode;
    return s;
}

mxp_guard *mxp_world_model_guard(mxp_world_model *wm) { return wm->guard; }

void mxp_world_model_set_progress(mxp_world_model *wm, mxp_progress_fn fn, void *user) {
    wm->progress = fn;
    wm->progress_user = user;
}

/* Fisher-Yates shuffle of 0..n-1 from the stream (seed, SHUFFLE_STREAM + epoch):
 * the order of epoch e never depends on how many epochs ran before. */
static void shuffle(uint32_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    mxp_rng_permutation(perm, n, seed ^ (SHUFFLE_STREAM + (uint64_t)epoch * 0x9E3779B97F4A7C15ull));
}

int64_t mxp_world_model_samples_per_epoch(const mxp_world_model *wm, int64_t batch_size) {
    int64_t per_step = batch_size * wm->dp_size * wm->cfg.grad_accum_steps;
    return (mxp_replay_train(wm->replay).n / per_step) * per_step;
}

mxp_status mxp_world_model_train(mxp_world_model *wm, int64_t num_epochs, int64_t batch_size,
                                 mxp_error *err) {
    if (!wm) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_train: NULL");
    if (num_epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "num_epochs=%lld; accepted: >= 1",
                             (long long)num_epochs);
    if (batch_size < 1 || batch_size > wm->max_batch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld; accepted: 1..%lld (the configured batch size)",
                             (long long)batch_size, (long long)wm->max_batch);
    mxp_replay_split tr = mxp_replay_train(wm->replay);
    const int accum = (int)wm->cfg.grad_accum_steps;
    const int64_t steps_per_epoch = tr.n / (batch_size * wm->dp_size * accum);
    if (steps_per_epoch < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld x grad_accum_steps=%d x %d ranks exceeds %lld "
                             "training transitions", (long long)batch_size, accum, wm->dp_size,
                             (long long)tr.n);
    mxp_batch *micro = wm->micro;
    mxp_data_position *p = &wm->pos;
    /* the position records the GLOBAL micro-batch (all ranks), so a checkpoint
     * resumes at any world size that keeps it */
    mxp_status st = mxp_data_position_begin(p, num_epochs, batch_size * wm->dp_size,
                                            steps_per_epoch, err);
    if (st != MXP_OK) return st;
    wm->stopped = false;
    int64_t shuffled = -1; /* epoch whose permutation wm->perm holds */
    const workload_loop loop = {wm->trainer, wm->guard, &wm->cfg, wm->progress,
                                wm->progress_user, steps_per_epoch};
    /* The loop reads the position every step, so a rollback (or a resume)
     * that moves it continues from there with the same batches. */
    while (!mxp_data_position_done(p)) {
        const int64_t epoch = p->epoch, s = p->step_in_epoch;
        if (epoch != shuffled) {
            mxp_trainer_set_epoch(wm->trainer, epoch);
            shuffle(wm->perm, tr.n, wm->cfg.seed, epoch);
            shuffled = epoch;
        }
        for (int a = 0; a < accum; a++) {
            float *bx = wm->bx + (size_t)a * (size_t)wm->max_batch * (size_t)wm->in_dim;
            float *by = wm->by + (size_t)a * (size_t)wm->max_batch * (size_t)wm->out_dim;
            /* global micro-batch (s, a) holds dp_size x batch_size rows; this
             * rank reads slice dp_rank of it */
            const uint32_t *rows =
                wm->perm + ((s * accum + a) * wm->dp_size + wm->dp_rank) * batch_size;
            for (int64_t b = 0; b < batch_size; b++) {
                memcpy(bx + b * wm->in_dim, tr.x + (size_t)rows[b] * (size_t)wm->in_dim,
                       (size_t)wm->in_dim * sizeof(float));
                memcpy(by + b * wm->out_dim, tr.y + (size_t)rows[b] * (size_t)wm->out_dim,
                       (size_t)wm->out_dim * sizeof(float));
            }
            micro[a] = (mxp_batch){.x = bx, .y = by, .labels = NULL, .B = batch_size};
        }
        mxp_step_result res;
        bool guard_stop;
        st = workload_step(&loop, micro, accum, p, epoch, &res, &guard_stop, err);
        if (st != MXP_OK) return st;
        bool stop = (wm->stop_flag && *wm->stop_flag) || guard_stop;
        if (wm->dp_size > 1) { /* a signal may reach the ranks at different steps */
            st = mxp_dist_agree_any(mxp_trainer_comm(wm->trainer), &stop, err);
            if (st != MXP_OK) return st;
        }
        if (wm->ckpt) {
            st = mxp_ckpt_manager_after_step(wm->ckpt, wm->trainer, &wm->cfg, p,
                                             stop || mxp_data_position_done(p), NULL, err);
            if (st != MXP_OK) return st;
        }
        if (stop) {
            wm->stopped = true;
            return MXP_OK;
        }
    }
    mxp_data_position_end(p);
    return MXP_OK;
}

mxp_status mxp_world_model_validation_loss(mxp_world_model *wm, double *out, mxp_error *err) {
    if (!wm || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_validation_loss: NULL");
    mxp_replay_split v = mxp_replay_val(wm->replay);
    double total = 0;
    for (int64_t i = 0; i < v.n; i += wm->max_batch) {
        int64_t B = v.n - i < wm->max_batch ? v.n - i : wm->max_batch;
        mxp_batch b = {.x = v.x + (size_t)i * (size_t)wm->in_dim,
                       .y = v.y + (size_t)i * (size_t)wm->out_dim,
                       .labels = NULL,
                       .B = B};
        double loss = 0;
        mxp_status s = mxp_model_step(wm->model, &b, false, 1.0f, &loss, NULL, err);
        if (s != MXP_OK) return s;
        total += loss * (double)B;
    }
    *out = total / (double)v.n;
    return MXP_OK;
}

mxp_status mxp_world_model_set_comm(mxp_world_model *wm, mxp_comm *comm,
                                    const mxp_dist_config *dc, mxp_error *err) {
    if (!wm) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_set_comm: NULL");
    if (comm) {
        int64_t same[6] = {wm->cfg.batch_size, wm->cfg.grad_accum_steps, (int64_t)wm->cfg.seed,
                           (int64_t)wm->cfg.precision, (int64_t)mxp_model_num_params(wm->model),
                           mxp_replay_train(wm->replay).n};
        mxp_status s = mxp_dist_require_same(comm, same, sizeof same,
                                             "batch size, accumulation, seed, precision, "
                                             "model or data", err);
        if (s != MXP_OK) return s;
    }
    mxp_status s = mxp_trainer_set_comm(wm->trainer, comm, dc, err);
    if (s != MXP_OK) return s;
    wm->dp_rank = mxp_comm_rank(comm);
    wm->dp_size = mxp_comm_size(comm);
    return MXP_OK;
}

mxp_trainer *mxp_world_model_trainer(mxp_world_model *wm) { return wm->trainer; }
mxp_model *mxp_world_model_model(mxp_world_model *wm) { return wm->model; }
const mxp_replay *mxp_world_model_replay(const mxp_world_model *wm) { return wm->replay; }

/* ---- checkpoints (world_model.h; the logic lives in src/ckpt) ---------- */

void mxp_world_model_set_checkpointer(mxp_world_model *wm, mxp_ckpt_manager *m) {
    wm->ckpt = m;
    mxp_guard_set_checkpoints(wm->guard, m); /* rollback may use the checkpoints */
}
mxp_ckpt_manager *mxp_world_model_checkpointer(mxp_world_model *wm) { return wm->ckpt; }
void mxp_world_model_set_stop_flag(mxp_world_model *wm, const volatile sig_atomic_t *flag) {
    wm->stop_flag = flag;
}
bool mxp_world_model_stopped(const mxp_world_model *wm) { return wm->stopped; }
void mxp_world_model_position(const mxp_world_model *wm, mxp_data_position *out) {
    *out = wm->pos;
}
void mxp_world_model_set_position(mxp_world_model *wm, const mxp_data_position *p) {
    wm->pos = *p;
}
const mxp_config *mxp_world_model_config(const mxp_world_model *wm) { return &wm->cfg; }

mxp_status mxp_world_model_load_checkpoint(mxp_world_model *wm, const char *path,
                                           mxp_ckpt_info *info, mxp_error *err) {
    mxp_ckpt_info in;
    mxp_status s = mxp_ckpt_load(path, wm->trainer, &in, err);
    if (s != MXP_OK) return s;
    wm->pos = in.pos;
    if (info) *info = in;
    return MXP_OK;
}

mxp_status mxp_world_model_rollback(mxp_world_model *wm, const char *reason,
                                    mxp_ckpt_rollback_result *res, mxp_error *err) {
    if (!wm->ckpt)
        return mxp_error_set(err, MXP_ERR_STATE, "rollback: no checkpoint manager attached");
    return mxp_ckpt_manager_rollback(wm->ckpt, wm->trainer, reason, &wm->pos, res, err);
}
