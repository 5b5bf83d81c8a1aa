/* models/world_model.c: the world-model workload (see world_model.h) as a
 * data + model provider of mxp_run (run.h), and the world_model.h API as
 * a thin wrapper over a run of that provider (run.h's public functions).
 *
 * Entry points: world_model_provider (models/workload.h) and
 * mxp_world_model_*. The provider owns the replay buffer and the batch
 * buffers (planned at create: grad_accum_steps micro-batches of the
 * configured batch size); the run owns the loop.
 */
#include <mixprec/world_model.h>

#include "models/rollout.h"
#include "models/user_data.h"
#include "models/workload.h"
#include "models/workload_run.h"

#include <stdio.h>
#include <string.h>

/* RNG stream of the per-epoch shuffle: far from the model-init and
 * stochastic-rounding streams of the same seed. */
#define SHUFFLE_STREAM 0x5348554646ull /* "SHUFF" */

typedef struct wm_data {
    mxp_config cfg;
    mxp_replay *replay;
    int64_t in_dim, out_dim, max_batch;
    float *bx, *by; /* [accum, max_batch, in_dim], [accum, max_batch, out_dim] */
    float *pred;    /* [E max_batch, 2 out_dim]: a Gaussian head's / ensemble's outputs */
    int ens;        /* ensemble members E (model.ensemble) */
    uint32_t *boot; /* [E, n_train] the members' bootstrap rows (E > 1), else NULL */
    float *tw;      /* [out_dim + 1] model.target_weights parsed (ud_model_spec) */
} wm_data;

static void wm_destroy(void *self) {
    wm_data *d = self;
    if (!d) return;
    mxp_replay_destroy(d->replay);
    mxp_free(d->bx);
    mxp_free(d->by);
    mxp_free(d->pred);
    mxp_free(d->boot);
    mxp_free(d->tw);
    mxp_free(d);
}

static mxp_status wm_spec(void *self, mxp_model_spec *out, mxp_error *err) {
    wm_data *d = self;
    return ud_model_spec(&d->cfg, d->in_dim, d->out_dim, MXP_LOSS_MSE, d->max_batch, d->tw, out,
                         err);
}

static int64_t wm_num_train(void *self) {
    return mxp_replay_train(((wm_data *)self)->replay).n;
}

static mxp_status wm_fill(void *self, int slot, const uint32_t *idx, int64_t n, mxp_batch *out,
                          mxp_error *err) {
    (void)err;
    wm_data *d = self;
    mxp_replay_split tr = mxp_replay_train(d->replay);
    const size_t rows = (size_t)slot * (size_t)d->ens * (size_t)d->max_batch;
    float *bx = d->bx + rows * (size_t)d->in_dim;
    float *by = d->by + rows * (size_t)d->out_dim;
    if (d->ens > 1) { /* member e's rows of its bootstrap at [e n, (e+1) n) */
        ud_fill_members(tr.x, tr.y, d->in_dim, d->out_dim, d->boot, d->ens, tr.n, idx, n, bx, by);
        *out = (mxp_batch){.x = bx, .y = by, .labels = NULL, .B = d->ens * n};
        return MXP_OK;
    }
    for (int64_t b = 0; b < n; b++) {
        memcpy(bx + b * d->in_dim, tr.x + (size_t)idx[b] * (size_t)d->in_dim,
               (size_t)d->in_dim * sizeof(float));
        memcpy(by + b * d->out_dim, tr.y + (size_t)idx[b] * (size_t)d->out_dim,
               (size_t)d->out_dim * sizeof(float));
    }
    *out = (mxp_batch){.x = bx, .y = by, .labels = NULL, .B = n};
    return MXP_OK;
}

/* The canary probes `rows` validation rows spread evenly over the
 * validation split, gathered into batch slot 0 (the guard copies them
 * before training fills it). The first rows would be the start of one
 * trajectory: a narrow corner of the state space whose relative loss gap
 * is not the model's (mixed_bf16 read 5-21% there against ~1% over the
 * whole validation set, and the guard fell back from a healthy run). */
static mxp_status wm_canary(void *self, int64_t rows, mxp_batch *out, mxp_error *err) {
    (void)err;
    wm_data *d = self;
    mxp_replay_split v = mxp_replay_val(d->replay);
    int64_t pb = rows < d->max_batch ? rows : d->max_batch;
    if (pb > v.n) pb = v.n;
    pb -= pb % d->ens; /* an ensemble: pb / E rows for each member */
    const size_t in = (size_t)d->in_dim, od = (size_t)d->out_dim;
    for (int64_t b = 0; b < pb; b++) {
        const size_t row = (size_t)(b * v.n / pb);
        memcpy(d->bx + (size_t)b * in, v.x + row * in, in * sizeof(float));
        memcpy(d->by + (size_t)b * od, v.y + row * od, od * sizeof(float));
    }
    *out = (mxp_batch){.x = d->bx, .y = d->by, .labels = NULL, .B = pb};
    return MXP_OK;
}

/* Mean validation loss (MSE on standardised targets, or a Gaussian head's
 * NLL beside the MSE of its mean: ud_eval_regression), in chunks, and the
 * open-loop errors on the validation trajectories (rollout.c). */
static mxp_status wm_evaluate(void *self, mxp_model *m, mxp_run_eval *out, mxp_error *err) {
    wm_data *d = self;
    mxp_replay_split v = mxp_replay_val(d->replay);
    snprintf(out->name, sizeof out->name, "val");
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    mxp_status s = sp->termination || sp->target_weights
                       ? ud_eval_head(m, v.x, v.y, v.n, d->max_batch, d->pred, out, err)
                       : ud_eval_regression(m, v.x, v.y, v.n, d->max_batch, d->pred, out, err);
    if (s != MXP_OK) return s;
    const mxp_replay_stats st = mxp_replay_stats_get(d->replay);
    const mxp_replay_config *rc = mxp_replay_config_get(d->replay);
    const wm_rollout_src src = {.x = v.x,
                                .y = v.y,
                                .S = d->out_dim - 1,
                                .A = d->in_dim - (d->out_dim - 1),
                                .n_ep = rc->trajectories - mxp_replay_train_trajectories(d->replay),
                                .len = NULL,
                                .T = rc->episode_len,
                                .x_mean = st.x_mean,
                                .x_std = st.x_std,
                                .y_mean = st.y_mean,
                                .y_std = st.y_std};
    return wm_open_loop_error(m, &src, d->max_batch, out->open_loop, err);
}

static void wm_signature(void *self, char *buf, size_t n) {
    wm_data *d = self;
    snprintf(buf, n, "env=%s in=%lld out=%lld train=%lld val=%lld",
             mxp_env_info_get(d->cfg.data.env)->name, (long long)d->in_dim,
             (long long)d->out_dim, (long long)mxp_replay_train(d->replay).n,
             (long long)mxp_replay_val(d->replay).n);
}

/* precision: auto: a preflight on the first training batches. */
static mxp_status wm_auto(void *self, mxp_trainer *t, const mxp_guard_config *g,
                          mxp_error *err) {
    wm_data *d = self;
    mxp_replay_split tr = mxp_replay_train(d->replay);
    if (d->ens > 1)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "training.precision=auto: not available for ensembles "
                             "(model.ensemble=%d); accepted: an explicit training.precision",
                             d->ens);
    return mxp_guard_auto_precision(t, g, tr.x, tr.y, tr.n, d->max_batch, NULL, err);
}

mxp_status world_model_provider(const mxp_config *cfg, mxp_workload_provider *out,
                                mxp_error *err) {
    mxp_status s = workload_check_mlp(cfg, err);
    if (s != MXP_OK) return s;
    if (cfg->termination) /* the built-in environments run fixed-length episodes */
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "model.termination=true: data.env=%s records no terminations (the "
                             "built-in environments run episodes of data.episode_length steps, "
                             "ended by the time limit only); accepted: model.termination=false, "
                             "or data.path with terminal flags (terminals, or dones with "
                             "timeouts)",
                             mxp_env_info_get(cfg->data.env)->name);
    wm_data *d = mxp_calloc(1, sizeof *d);
    if (!d) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "world model");
    d->cfg = *cfg;
    d->max_batch = cfg->batch_size;
    mxp_replay_config rc = cfg->data;
    rc.seed = cfg->seed;
    s = mxp_replay_create(&rc, &d->replay, err);
    if (s != MXP_OK) goto fail;
    d->in_dim = mxp_replay_in_dim(d->replay);
    d->out_dim = mxp_replay_out_dim(d->replay);
    const int64_t n_train = mxp_replay_train(d->replay).n;
    if (n_train < cfg->batch_size) {
        s = mxp_error_set(err, MXP_ERR_CONFIG,
                          "training.batch_size=%lld exceeds the %lld training transitions; "
                          "accepted: <= %lld (or generate more data.trajectories)",
                          (long long)cfg->batch_size, (long long)n_train, (long long)n_train);
        goto fail;
    }
    d->ens = cfg->ensemble > 1 ? (int)cfg->ensemble : 1;
    size_t rows, nx, ny;
    if (!mxp_size_mul((size_t)cfg->grad_accum_steps, (size_t)d->max_batch, &rows) ||
        !mxp_size_mul(rows, (size_t)d->ens, &rows) ||
        !mxp_size_mul(rows, (size_t)d->in_dim, &nx) ||
        !mxp_size_mul(rows, (size_t)d->out_dim, &ny)) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers overflow size_t");
        goto fail;
    }
    d->bx = mxp_calloc(nx, sizeof(float));
    d->by = mxp_calloc(ny, sizeof(float));
    d->pred = mxp_calloc((size_t)d->ens * (size_t)d->max_batch * 2 * (size_t)d->out_dim,
                         sizeof(float));
    if (d->ens > 1) d->boot = ud_bootstrap(d->ens, n_train, cfg->seed);
    d->tw = mxp_calloc((size_t)d->out_dim + 1, sizeof(float));
    if (!d->bx || !d->by || !d->pred || (d->ens > 1 && !d->boot) || !d->tw) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "batch buffers (%zu rows)", rows);
        goto fail;
    }
    *out = (mxp_workload_provider){.self = d,
                                   .name = "world_model",
                                   .model_spec = wm_spec,
                                   .num_train = wm_num_train,
                                   .rows_per_sample = 1,
                                   .shuffle_stream = SHUFFLE_STREAM,
                                   .fill_batch = wm_fill,
                                   .canary_batch = wm_canary,
                                   .evaluate = wm_evaluate,
                                   .data_signature = wm_signature,
                                   .auto_precision = wm_auto,
                                   .destroy = wm_destroy};
    return MXP_OK;
fail:
    wm_destroy(d);
    return s;
}

/* ---- world_model.h: a run of the provider ------------------------------------
 * An mxp_world_model owns its mxp_run (models/workload_run.h). */

struct mxp_world_model {
    workload_run w;
};

static mxp_run *R(const mxp_world_model *wm) { return wm->w.run; }
static wm_data *D(const mxp_world_model *wm) { return workload_run_self(&wm->w); }

mxp_status mxp_world_model_create(const mxp_config *cfg, mxp_world_model **out,
                                  mxp_error *err) {
    if (!cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_create: NULL argument");
    *out = NULL;
    mxp_world_model *wm = mxp_calloc(1, sizeof *wm);
    if (!wm) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "world model");
    mxp_workload_provider p;
    mxp_status s = world_model_provider(cfg, &p, err);
    if (s == MXP_OK) s = workload_run_create(&wm->w, cfg, &p, err);
    if (s != MXP_OK) {
        mxp_free(wm);
        return s;
    }
    *out = wm;
    return MXP_OK;
}

void mxp_world_model_destroy(mxp_world_model *wm) {
    if (!wm) return;
    workload_run_destroy(&wm->w);
    mxp_free(wm);
}

void mxp_world_model_set_progress(mxp_world_model *wm, mxp_progress_fn fn, void *user) {
    wm->w.progress = fn;
    wm->w.progress_user = user;
}

mxp_status mxp_world_model_train(mxp_world_model *wm, int64_t num_epochs, int64_t batch_size,
                                 mxp_error *err) {
    if (!wm) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_train: NULL");
    if (num_epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "num_epochs=%lld; accepted: >= 1",
                             (long long)num_epochs);
    if (batch_size < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld; accepted: 1..%lld (the configured batch size)",
                             (long long)batch_size, (long long)D(wm)->max_batch);
    return mxp_run_train(R(wm), num_epochs, batch_size, err);
}

mxp_status mxp_world_model_validation_loss(mxp_world_model *wm, double *out, mxp_error *err) {
    if (!wm || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_validation_loss: NULL");
    mxp_run_eval ev;
    mxp_status s = mxp_run_evaluate(R(wm), &ev, err);
    if (s == MXP_OK) *out = ev.loss;
    return s;
}

int64_t mxp_world_model_samples_per_epoch(const mxp_world_model *wm, int64_t batch_size) {
    const int64_t ranks = mxp_comm_size(mxp_trainer_comm(mxp_run_trainer(R(wm))));
    const int64_t per_step = batch_size * ranks * mxp_run_config(R(wm))->grad_accum_steps;
    return (wm_num_train(D(wm)) / per_step) * per_step;
}

mxp_status mxp_world_model_set_comm(mxp_world_model *wm, mxp_comm *comm,
                                    const mxp_dist_config *dc, mxp_error *err) {
    if (!wm) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_world_model_set_comm: NULL");
    return mxp_run_set_comm(R(wm), comm, dc, err);
}

mxp_trainer *mxp_world_model_trainer(mxp_world_model *wm) { return mxp_run_trainer(R(wm)); }
mxp_guard *mxp_world_model_guard(mxp_world_model *wm) { return mxp_run_guard(R(wm)); }
mxp_model *mxp_world_model_model(mxp_world_model *wm) { return mxp_run_model(R(wm)); }
const mxp_replay *mxp_world_model_replay(const mxp_world_model *wm) { return D(wm)->replay; }

void mxp_world_model_set_checkpointer(mxp_world_model *wm, mxp_ckpt_manager *m) {
    mxp_run_set_checkpointer(R(wm), m);
}
mxp_ckpt_manager *mxp_world_model_checkpointer(mxp_world_model *wm) {
    return mxp_run_checkpointer(R(wm));
}
void mxp_world_model_set_stop_flag(mxp_world_model *wm, const volatile sig_atomic_t *flag) {
    wm->w.stop_flag = flag;
}
bool mxp_world_model_stopped(const mxp_world_model *wm) { return workload_run_stopped(&wm->w); }
void mxp_world_model_position(const mxp_world_model *wm, mxp_data_position *out) {
    mxp_run_position(R(wm), out);
}
void mxp_world_model_set_position(mxp_world_model *wm, const mxp_data_position *p) {
    mxp_run_set_position(R(wm), p);
}
const mxp_config *mxp_world_model_config(const mxp_world_model *wm) {
    return mxp_run_config(R(wm));
}

mxp_status mxp_world_model_load_checkpoint(mxp_world_model *wm, const char *path,
                                           mxp_ckpt_info *info, mxp_error *err) {
    return workload_run_load(&wm->w, path, info, err);
}

mxp_status mxp_world_model_rollback(mxp_world_model *wm, const char *reason,
                                    mxp_ckpt_rollback_result *res, mxp_error *err) {
    return workload_run_rollback(&wm->w, reason, res, err);
}
