/* mixprec/run.h: one training run, for every workload and every front end.
 *
 * An mxp_run owns a whole run: the model and trainer a config asks for,
 * epochs and batches (one seeded per-epoch shuffle, drop-last), the
 * learning-rate schedule, the numerical-safety guard before and after each
 * step, the single precision-switch point, the checkpoint manager
 * (periodic, final, on stop), resume, stop requests, data-parallel
 * agreement, an observer (obs.h implements one: metrics, SQLite store,
 * events, HTTP) and a progress callback. The data and the evaluation come
 * from a workload provider (below): the built-in world model, classifier
 * and GPT are providers, and so is anything a user plugs in.
 *
 * Typical use (examples/train_run.c):
 *
 *     mxp_config cfg;               // mxp_config_resolve(...)
 *     mxp_run_options opt = mxp_run_options_default();
 *     opt.checkpoints = true;       // cfg's checkpoint.* policy in output.dir
 *     mxp_run *run;
 *     if (mxp_run_create(&cfg, &opt, &run, &err)) ...
 *     if (mxp_run_train(run, 0, 0, &err)) ...   // 0, 0: cfg's epochs, batch
 *     mxp_run_eval ev; mxp_run_evaluate(run, &ev, &err);
 *     mxp_run_destroy(run);
 *
 * The API is ctypes friendly: opaque handles, scalar arguments, strings,
 * fixed structs of plain fields, JSON text (mxp_run_stats_json).
 *
 * Resume and run directories (docs/run.md):
 *  - output.dir left at its default: each new run trains in a directory of
 *    its own, runs/version_<N>, and runs/latest links to the newest
 *    (mxp_run_dir_reserve / mxp_run_dir_publish; the CLI and Python do it);
 *  - every run has an id (output.dir/run.json); a new run into a directory
 *    that holds another run's checkpoints is refused (MXP_ERR_STATE, the
 *    message names --resume DIR and a new output.dir) and nothing is written;
 *  - mxp_run_resume continues the newest verified checkpoint; a checkpoint
 *    whose workload, model or data shape differ from the config is refused
 *    (MXP_ERR_CONFIG naming the mismatch);
 *  - resuming a finished run trains nothing and writes nothing
 *    (mxp_run_info: .finished_before_resume);
 *  - straight run == stop at step k + resume, bit for bit (losses and every
 *    tensor), in every precision mode.
 */
#ifndef MIXPREC_RUN_H
#define MIXPREC_RUN_H

#include <mixprec/ckpt.h>
#include <mixprec/config.h>
#include <mixprec/dist.h>
#include <mixprec/guard.h>
#include <mixprec/model.h>
#include <mixprec/train.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_run mxp_run;

/* ==== the workload provider ==============================================
 * Data + model + evaluation; everything else is the run's. All callbacks
 * get `self` first and may be NULL where marked optional. Indices passed to
 * fill_batch are training-sample indices in [0, num_train); the run draws
 * them from its per-epoch permutation. Buffers the provider hands out stay
 * valid until its next call with the same slot. */

/* World models: the open-loop errors measured, after
 * mxp_open_loop_horizon(i) = 1, 5 and 10 steps (docs/run.md "Open-loop
 * error"). */
#define MXP_OPEN_LOOP_N 3
/* The horizon of open_loop[i] in steps; 0 outside [0, MXP_OPEN_LOOP_N). */
MXP_API int mxp_open_loop_horizon(int i);

/* Held-out evaluation. Fields a workload does not have are NaN. */
typedef struct mxp_run_eval {
    char name[16];        /* "val" or "test": the split evaluated */
    double loss;          /* mean loss on the held-out split */
    double accuracy;      /* top-1 in [0, 1] (classifiers); a world model's termination
                             accuracy (model.termination, below); else NaN */
    double bits_per_char; /* loss / ln 2 (language models), else NaN */
    double mse;           /* regression (world model, regressor): MSE of the predicted
                             mean on the targets as trained (the loss itself for
                             model.head=deterministic; beside the Gaussian head's NLL,
                             the loss), else NaN */
    /* world models: mean squared open-loop state error after
     * mxp_open_loop_horizon(i) steps, in units of each state column's
     * standard deviation, over every start on the held-out episodes that
     * holds that many steps; NaN otherwise */
    double open_loop[MXP_OPEN_LOOP_N];
    /* world models with model.termination: the mean binary cross-entropy
     * of the termination logit (mean over ensemble members), NaN otherwise;
     * `accuracy` is then the termination accuracy (the mean predicted
     * probability > 0.5 against the flag; docs/world_models.md) */
    double bce;
    /* ensembles (model.ensemble=E > 1; docs/world_models.md "Elites"):
     * members = E (0: not an ensemble), member_loss[e] member e's loss
     * (NLL without the penalty, or MSE; every member, elite or not; NaN
     * for e >= E), elites the members the figures above average (bit e:
     * member e; the model's mxp_model_elites when evaluated) */
    int members;
    uint64_t elites;
    double member_loss[MXP_MODEL_MAX_ENSEMBLE];
} mxp_run_eval;

typedef struct mxp_workload_provider {
    void *self;
    const char *name; /* "world_model", "classifier", "gpt", or the user's */
    /* The model to train (max_batch = the largest micro-batch in ROWS). */
    mxp_status (*model_spec)(void *self, mxp_model_spec *out, mxp_error *err);
    /* Training samples (indices 0..n-1) and model rows per sample (1; GPT:
     * the context length, a sample being one window). */
    int64_t (*num_train)(void *self);
    int64_t rows_per_sample;
    /* The seed stream of the per-epoch shuffle (keeps each built-in
     * workload's batches as they always were); 0: the run's default. */
    uint64_t shuffle_stream;
    /* Gather the samples idx[0..n) into micro-batch `slot` (0 <= slot <
     * grad_accum_steps, n <= batch size) and point *out at it. */
    mxp_status (*fill_batch)(void *self, int slot, const uint32_t *idx, int64_t n,
                             mxp_batch *out, mxp_error *err);
    /* A fixed probe batch for the guard's FP32 canary of about `rows` rows
     * (provider-owned; the guard copies it). Optional: NULL or out->B = 0,
     * no canary. */
    mxp_status (*canary_batch)(void *self, int64_t rows, mxp_batch *out, mxp_error *err);
    /* Held-out evaluation of `model` (forward only). Optional. */
    mxp_status (*evaluate)(void *self, mxp_model *model, mxp_run_eval *out, mxp_error *err);
    /* A short text that must be equal for a checkpoint to be resumed with
     * this data ("in=4 out=5 n_train=9000", the GPT vocabulary, ...);
     * stored in every checkpoint as "data_signature". Optional. */
    void (*data_signature)(void *self, char *buf, size_t n);
    /* precision: auto (training.precision=auto): choose the format on the
     * first training rows. Optional (NULL: the run keeps cfg's mode). */
    mxp_status (*auto_precision)(void *self, mxp_trainer *t, const mxp_guard_config *g,
                                 mxp_error *err);
    void (*destroy)(void *self); /* optional */
    /* Metadata every checkpoint must carry to use the model without the
     * training data (a JSON object text, metadata "workload_meta": the
     * user-data standardisation statistics, the GPT vocabulary); valid
     * until destroy. Optional. */
    const char *(*checkpoint_meta)(void *self);
} mxp_workload_provider;

/* The built-in provider that cfg->workload names (model.workload:
 * world_model | classifier | gpt), built from cfg (loads or generates the
 * data). The run takes ownership when passed in mxp_run_options. */
MXP_API mxp_status mxp_workload_provider_builtin(const mxp_config *cfg, mxp_workload_provider *out,
                                                 mxp_error *err);

/* ==== observer and progress ============================================== */

/* Progress after every optimizer step (run step counts, 1-based step). */
typedef struct mxp_run_progress {
    int64_t step, total_steps;
    int64_t epoch, total_epochs; /* epoch the step trained in (0-based) */
    const mxp_step_result *result;
} mxp_run_progress;
typedef void (*mxp_run_progress_fn)(void *user, const mxp_run_progress *p);

struct mxp_run_val_row; /* a validation during training (below) */

/* What the run tells an observer (obs.h's mxp_obs_run_observer fills one).
 * Every member is optional. Called on the training thread. */
typedef struct mxp_run_observer {
    void *self;
    /* The run starts (after create/resume): its trainer, steps and samples. */
    void (*begin)(void *self, mxp_run *run);
    /* After every step. Between steps the observer may ask for a precision
     * switch through mxp_run_request_precision. */
    void (*step)(void *self, mxp_run *run, const mxp_run_progress *p);
    /* A switch asked for with mxp_run_request_precision was applied at the
     * step boundary (one per switch; the guard's, the signal's and the
     * scaler's switches arrive as guard events). */
    void (*precision_changed)(void *self, mxp_run *run, mxp_precision from, mxp_precision to,
                              const char *reason);
    /* A guard event (rule firing, rollback, fallback): guard.h. */
    void (*guard_event)(void *self, mxp_run *run, const mxp_guard_event *ev);
    /* The run ends (mxp_run_destroy, after at least one train() call):
     * ok false = the last train() failed (msg), stopped = ended on a stop. */
    void (*end)(void *self, mxp_run *run, bool ok, bool stopped, const char *msg);
    /* Release self (mxp_run_destroy calls it last; NULL: self is borrowed). */
    void (*destroy)(void *self);
    /* A validation during training (training.eval_every) was measured;
     * v: the row mxp_run_val_history appends. */
    void (*evaluated)(void *self, mxp_run *run, const struct mxp_run_val_row *v);
} mxp_run_observer;

/* The observer of obs.h: mxp_obs_run_observer(obs, &observer, &err) feeds
 * an mxp_obs (metrics, SQLite store, JSONL events, HTTP, operator precision
 * requests) from a run, in one call. */

/* ==== the run ============================================================ */

struct mxp_dataset; /* in-memory user arrays (dataset.h) */

/* The provider of cfg->workload (world_model, classifier, regressor) on
 * the user's arrays `data` (dataset.h; checked with mxp_dataset_check and
 * copied: data may be freed after this call). model.layers (else
 * model.hidden/depth/activation/layernorm) shapes the MLP;
 * data.val_fraction splits episodes (world model) or rows (supervised,
 * unless x_val/y_val are given); the world model standardises with the
 * training split's statistics, saved in every checkpoint (workload_meta,
 * docs/data.md). mxp_workload_provider_builtin calls it for data.path. */
MXP_API mxp_status mxp_workload_provider_dataset(const mxp_config *cfg,
                                                 const struct mxp_dataset *data,
                                                 mxp_workload_provider *out, mxp_error *err);

typedef struct mxp_run_options {
    /* NULL: the built-in provider of cfg->workload. Else copied; the run
     * calls its destroy at mxp_run_destroy (also when create fails). */
    const mxp_workload_provider *provider;
    /* In-memory user arrays instead of cfg's data (dataset.h,
     * mxp_workload_provider_dataset; borrowed for the create call only;
     * cfg needs no data.path); NULL: none. A regressor needs these or
     * data.path: without either mxp_run_create fails (MXP_ERR_CONFIG). */
    const struct mxp_dataset *data;
    /* Data parallelism (dist.h); NULL: one process. Borrowed. */
    mxp_comm *comm;
    /* Observer (copied; self borrowed); NULL: none. */
    const mxp_run_observer *observer;
    mxp_run_progress_fn progress; /* NULL: none */
    void *progress_user;
    /* Checkpoints under cfg's checkpoint.* policy (checkpoint.dir, by
     * default output.dir/checkpoints) and the run directory rules:
     * true = on when cfg->ckpt_enabled. Rank 0 only writes. */
    bool checkpoints;
    /* Resume: a run directory, its checkpoints/ directory or a checkpoint
     * file (NULL: a new run). Same as mxp_run_resume after create. */
    const char *resume;
} mxp_run_options;

MXP_API mxp_run_options mxp_run_options_default(void);

/* Build the provider, model, trainer, guard and (opt->checkpoints) the
 * checkpoint manager; resume when opt->resume. cfg is copied. Errors:
 * MXP_ERR_CONFIG / INVALID_ARG (config), MXP_ERR_STATE (the run directory
 * holds another run: the message names both ways out), IO / FORMAT
 * (data, checkpoint). On failure nothing was written. */
MXP_API mxp_status mxp_run_create(const mxp_config *cfg, const mxp_run_options *opt, mxp_run **out,
                                  mxp_error *err);
MXP_API void mxp_run_destroy(mxp_run *run);

/* Default run directories (docs/run.md). latest: the default output.dir
 * ("runs/latest"). mxp_run_dir_reserve makes a new directory
 * <dirname(latest)>/version_<N>, N one more than the highest there (made
 * with mkdir: a run started at the same moment gets another N), and writes
 * its path to out (n bytes): the output.dir of the new run; a real
 * directory at latest (a run from before numbered runs) first becomes a
 * version of its own, latest a link to it. After the run was created,
 * mxp_run_dir_publish points latest at it: a relative symbolic link
 * "version_<N>", replaced atomically.
 * Until then latest still names the previous run; a run that failed to be
 * created leaves its reserved directory empty (rmdir it). Errors: IO (the
 * folder cannot be read or written), INVALID_ARG (a path too long),
 * STATE (latest is a file). Front ends call them only for a new run whose
 * output.dir no source set, on the rank that writes. */
MXP_API mxp_status mxp_run_dir_reserve(const char *latest, char *out, size_t n, mxp_error *err);
MXP_API mxp_status mxp_run_dir_publish(const char *latest, const char *dir, mxp_error *err);

/* Continue from a checkpoint (path: file, checkpoint dir or run dir; the
 * newest verified checkpoint). Checks workload, model and data signature
 * against this run (MXP_ERR_CONFIG naming the mismatch). */
MXP_API mxp_status mxp_run_resume(mxp_run *run, const char *path, mxp_error *err);

/* The config sources of a resume, below the user's: into b (fresh from
 * mxp_config_builder_create) apply the checkpoint's stored config, the
 * precision it was in when saved (after a fallback: the fallback's, with
 * training.fp16_accumulate=fp32 unless that is fp16 or mixed_fp16),
 * model.init_from=none when the recorded file is gone (the checkpoint
 * holds the weights), and output.dir=path when path is a run directory.
 * The caller applies a YAML file, the environment and overrides on top and
 * resolves: `mixprec train --resume` and Python's Config.from_checkpoint
 * both do. path: a run directory, its checkpoints/ directory (the newest
 * checkpoint that verifies) or a checkpoint file (checked: checksums,
 * dtypes, finite values). ckpt (n bytes; NULL: not wanted): the checkpoint
 * file chosen, for mxp_run_options.resume. Errors: IO (no checkpoint),
 * FORMAT (not a mixprec checkpoint), CONFIG (its stored config). */
MXP_API mxp_status mxp_run_resume_config(const char *path, mxp_config_builder *b, char *ckpt,
                                         size_t n, mxp_error *err);

/* Train `epochs` epochs at micro-batch `batch_size` (0: cfg's values).
 * After a resume, continues the interrupted call (same batches and
 * learning rates). Returns MXP_OK also when a stop request or a guard's
 * stop ended it (mxp_run_info: stopped). */
MXP_API mxp_status mxp_run_train(mxp_run *run, int64_t epochs, int64_t batch_size, mxp_error *err);

/* Ask the run to stop after the current step (checkpoint written when
 * checkpoints are on). Async-signal-safe: sets one sig_atomic_t.
 * The request belongs to one train() call: the call in flight checks it at
 * every step boundary, stops there (info.stopped) and clears it when it
 * returns, so a later mxp_run_train continues the interrupted call (same
 * batches and learning rates, as after a resume). A request made while no
 * call is in flight (before the first, between two) or after the call's
 * last step boundary stays set and stops the next call after its first
 * step; so does one that a call never reached (it failed before the next
 * step boundary). */
MXP_API void mxp_run_request_stop(mxp_run *run);
/* Ask for a precision switch at the next step boundary, the one switch
 * point (docs/design.md "Who changes precision"): the trainer's step
 * controller applies one pending request there (operator signal, HTTP,
 * this call, the guard, the scaler fallback; a request for fp32 wins over
 * the guard, the guard over another mode): the switch, a scaler reset, one
 * event (observer precision_changed for this call). reason: free text
 * ("operator", "http", ...; copied, may be NULL). Safe to call from
 * another thread while mxp_run_train runs; not signal safe: a signal
 * handler uses mxp_guard_request_fp32. */
MXP_API void mxp_run_request_precision(mxp_run *run, mxp_precision to, const char *reason);

/* Held-out evaluation through the provider (MXP_ERR_UNSUPPORTED without). */
MXP_API mxp_status mxp_run_evaluate(mxp_run *run, mxp_run_eval *out, mxp_error *err);

/* ==== validation during training (docs/run.md) ===========================
 * training.eval_every=N validates through the provider's evaluate after
 * every N-th epoch, training.eval_every_steps=N after every global step
 * that is a multiple of N (forward only: no RNG drawn, no training state touched,
 * so the training losses are those of a run without it, bit for bit).
 * training.early_stop.patience=P stops the run at the P-th validation in a
 * row that did not improve the best loss by more than
 * training.early_stop.min_delta: the call returns MXP_OK with
 * mxp_run_info.early_stopped, the run counts as finished (a resume trains
 * nothing), and a checkpoint is written (checkpoints on). With
 * training.keep_best (and checkpoints on) each new best is saved,
 * atomically, as OUTPUT_DIR/best.safetensors: a full checkpoint, so
 * `--resume OUTPUT_DIR/best.safetensors`, mxp_ckpt_load and `mixprec ckpt`
 * restore it. The best loss, its epoch and the evaluations without
 * improvement are kept in every checkpoint (metadata "run_state"). */
typedef struct mxp_run_val_row {
    int64_t step;  /* trainer steps done when measured (history.csv's step) */
    int64_t epoch; /* the 1-based epoch the last step trained in (eval_every:
                      the epoch that ended) */
    double loss;   /* mean held-out loss (the provider's evaluate) */
    bool best;     /* a new best (the first, or better by > min_delta) */
    double open_loop[MXP_OPEN_LOOP_N]; /* mxp_run_eval's, NaN when not measured */
    /* ensembles (docs/world_models.md "Elites"): members E (0: one model),
     * each member's loss, the members that improved on their own best (by
     * > min_delta; their weights went into best.safetensors) and the elites
     * named after this validation (bit e: member e) */
    int members;
    uint64_t improved, elites;
    double member_loss[MXP_MODEL_MAX_ENSEMBLE];
} mxp_run_val_row;
/* The validations of this process, oldest first (*n rows; NULL when none).
 * Valid until the next mxp_run_train or mxp_run_destroy. */
MXP_API const mxp_run_val_row *mxp_run_val_history(const mxp_run *run, size_t *n);
/* An ensemble's elites (model.elites; docs/world_models.md "Elites"): the
 * members named by the last validation (bit e: member e), all members
 * before the first; 1 for one model. */
MXP_API uint64_t mxp_run_elites(const mxp_run *run);
/* Write a checkpoint of the current state to path (atomically). */
MXP_API mxp_status mxp_run_save(mxp_run *run, const char *path, mxp_error *err);

typedef struct mxp_run_info {
    int64_t training_steps, optimizer_steps, skipped_steps;
    double overflow_rate;
    float loss_scale;
    int precision; /* mxp_precision */
    bool emulated; /* FP8 on a CPU */
    int64_t epoch, step_in_epoch;
    int64_t run_step, run_total;     /* of the train() call in progress or last */
    int64_t samples_per_epoch;       /* samples used per epoch (drop-last, all ranks) */
    int64_t samples_trained;         /* samples of the steps this process ran */
    double last_loss;                /* loss of the last step (NaN: none yet) */
    double epoch_mean_loss;          /* mean loss of the last finished epoch (NaN: none) */
    double wall_s;                   /* seconds spent in mxp_run_train */
    bool stopped;                    /* the last train() ended on a stop */
    bool finished;                   /* the run has done all its steps */
    bool resumed;                    /* resumed from a checkpoint */
    bool finished_before_resume;     /* resumed a run that was already complete */
    int64_t checkpoints_written;
    char last_checkpoint[MXP_CKPT_PATH_MAX];
    char run_id[40];
    char workload[32];
    /* validation during training (training.eval_every; NaN / 0 without) */
    double val_loss;                 /* the last validation loss */
    double best_val_loss;            /* the best one */
    int64_t best_epoch;              /* its epoch (1-based); 0: none */
    int64_t best_step;               /* the trainer step it followed; 0: none */
    int64_t evaluations;             /* validations measured (over resumes) */
    int64_t evals_since_best;        /* validations since the best (early stopping) */
    bool early_stopped;              /* the run ended on training.early_stop */
    char best_checkpoint[MXP_CKPT_PATH_MAX]; /* OUTPUT_DIR/best.safetensors; "": none */
} mxp_run_info;

MXP_API void mxp_run_stats(const mxp_run *run, mxp_run_info *out);
/* The stats as one JSON object: its length, or -1 when it does not fit. */
MXP_API int mxp_run_stats_json(const mxp_run *run, char *buf, size_t cap);

/* The run's summary, schema "mixprec.summary/1" (docs/json.md): the one
 * object every front end writes to OUTPUT_DIR/summary.json (`mixprec
 * train`, also its --json line; Python's Run.train), with the same core
 * fields for every workload: workload, run id, precision, steps, overflow
 * rate, loss scale, plan, memory, per-layer precision, the guard's state
 * (null without a guard), losses, data-parallel traffic, time. eval: the
 * held-out evaluation to report as "<split>_loss" (and _accuracy,
 * _bits_per_char where not NaN); NULL: none. train_loss: the
 * final_train_loss to report; NaN: the run's mean loss of its last
 * finished epoch (epoch_mean_loss). Returns the length written (no
 * newline), or -1 when it does not fit in cap (or run/buf is NULL). */
MXP_API int mxp_run_summary_json(mxp_run *run, const mxp_run_eval *eval, double train_loss,
                                 char *buf, size_t cap);

MXP_API mxp_trainer *mxp_run_trainer(mxp_run *run);
MXP_API mxp_model *mxp_run_model(mxp_run *run);
MXP_API mxp_guard *mxp_run_guard(mxp_run *run); /* NULL when the guard is off */
MXP_API const mxp_config *mxp_run_config(const mxp_run *run);
MXP_API const mxp_workload_provider *mxp_run_provider(const mxp_run *run);
MXP_API mxp_ckpt_manager *mxp_run_checkpointer(mxp_run *run); /* NULL: none */
/* The data position (ckpt.h) of the run. */
MXP_API void mxp_run_position(const mxp_run *run, mxp_data_position *out);
/* Move the data position: the next mxp_run_train continues from it (the
 * same batches and learning rates), as after loading a checkpoint with
 * mxp_ckpt_load or a rollback with mxp_ckpt_manager_rollback. */
MXP_API void mxp_run_set_position(mxp_run *run, const mxp_data_position *p);
/* Attach a checkpoint manager the caller owns (borrowed: it must outlive
 * the run; NULL detaches), replacing the run's own: its policy saves after
 * steps, at the end of every train() call and on a stop, and the guard's
 * rollbacks use it. */
MXP_API void mxp_run_set_checkpointer(mxp_run *run, mxp_ckpt_manager *m);
/* Data parallelism after create (mxp_run_options.comm at create): train on
 * this rank's shard of every global batch with dc's settings. Checks that
 * every rank has the same batch size, accumulation, seed, precision, model
 * and data (MXP_ERR_CONFIG otherwise). comm NULL: one process again;
 * borrowed, it must outlive the run. */
MXP_API mxp_status mxp_run_set_comm(mxp_run *run, mxp_comm *comm, const mxp_dist_config *dc,
                                    mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_RUN_H */
