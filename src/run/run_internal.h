/* run/run_internal.h: the mxp_run object shared by run.c (the loop),
 * run_ckpt.c (checkpoints, run directories, resume) and run_summary.c.
 * Only src/run includes it (docs/design.md "Modules"). */
#ifndef MIXPREC_RUN_INTERNAL_H
#define MIXPREC_RUN_INTERNAL_H

#include <stdatomic.h>
#include <jansson.h>
#include <mixprec/run.h>

#include <signal.h>

#define RUN_ID_LEN 33  /* 32 hex digits + NUL */
#define RUN_SIG_LEN 256
#define RUN_STATE_MAX 8192 /* metadata run_state (an ensemble's members included) */

/* An ensemble's per-member validation state (run_members.c). */
#define RUN_MEM_ROLES 3 /* param, optim.m, optim.v */
typedef struct run_members {
    int E;                    /* members; 0: not an ensemble */
    int K;                    /* elites to name (model.elites, 0 -> E) */
    uint64_t elites;          /* named by the last validation (the model's) */
    uint64_t best_elites;     /* the K lowest best losses: best.safetensors' elites */
    double last[MXP_MODEL_MAX_ENSEMBLE], best[MXP_MODEL_MAX_ENSEMBLE]; /* NaN: none */
    int64_t best_step[MXP_MODEL_MAX_ENSEMBLE]; /* trainer step of each member's best */
    int64_t now_step;         /* the step of the last validation */
    /* keep-best: host copies of the slabs (snap: each member's block at its
     * best; live: scratch for the current state), per role */
    void *snap[RUN_MEM_ROLES], *live[RUN_MEM_ROLES];
    size_t bytes[RUN_MEM_ROLES]; /* 0: role absent / not fetched yet */
    mxp_dtype dtype[RUN_MEM_ROLES];
    int64_t snap_step[MXP_MODEL_MAX_ENSEMBLE]; /* the step each member's snapshot is from */
    bool snap_valid;
    bool writing_best;        /* run_state written for best.safetensors */
} run_members;

struct mxp_run {
    mxp_config cfg;
    mxp_workload_provider wl;
    mxp_model *model;
    mxp_trainer *trainer;
    mxp_guard *guard;        /* NULL: guard off */
    mxp_ckpt_manager *ckpt;  /* NULL: no checkpoints */
    bool own_ckpt;           /* created by the run (else borrowed) */
    int dp_rank, dp_size;    /* data parallelism: this rank's shard of each batch */
    mxp_run_observer obs;    /* all NULL: none */
    mxp_run_progress_fn progress;
    void *progress_user;
    int64_t n_train;         /* training samples */
    int64_t max_batch;       /* samples per micro-batch, at most (cfg batch_size) */
    uint32_t *perm;          /* [n_train] sample order of the epoch in `shuffled` */
    int64_t shuffled;        /* -1: none yet */
    mxp_batch *micro;        /* [grad_accum_steps] */
    mxp_data_position pos;
    volatile sig_atomic_t stop_req;           /* mxp_run_request_stop */
    bool stopped;
    bool failed;                               /* the last train() returned an error */
    char fail_msg[MXP_ERROR_MSG_MAX];
    bool began;                                /* observer's begin called */
    /* stats */
    double last_loss, epoch_sum, epoch_mean;
    int64_t epoch_n, loss_epoch;
    double wall_s;
    int64_t samples_trained, ckpts_written;
    bool resumed, finished_before_resume;
    int64_t resume_epochs;                     /* epochs of the next train(0, ..) after a resume */
    char run_id[RUN_ID_LEN];
    char data_sig[RUN_SIG_LEN];
    /* validation during training (run_eval.c) */
    mxp_run_val_row *val;                      /* [val_cap] this process's validations */
    size_t val_n, val_cap;
    double last_val, best_val;                 /* NaN: none yet */
    int64_t best_epoch, best_step;             /* 1-based epoch, trainer step; 0: none */
    int64_t evals, evals_since_best;           /* over resumes (run_state) */
    bool early_stopped;
    char best_path[MXP_CKPT_PATH_MAX];         /* "": no best checkpoint written */
    run_members mem;                           /* ensembles: per member (run_members.c) */
};

/* run_ckpt.c: open the run directory (checkpoints on): refuse a directory
 * that holds another run's checkpoints, create the manager, record the run
 * id. Nothing is written when it fails. */
mxp_status run_ckpt_open(mxp_run *r, bool resuming, mxp_error *err);
/* A fresh run id into r->run_id. */
void run_new_id(mxp_run *r);
/* After each step: the manager's policy, forced at stop / end. */
mxp_status run_ckpt_after_step(mxp_run *r, bool force, mxp_error *err);

/* run_dir.c: path, when it is a link made by mxp_run_dir_publish
 * (runs/latest -> version_<N>), as the directory it names (runs/version_<N>),
 * so that a resumed run keeps writing there after latest moves on; any
 * other path unchanged. */
void run_dir_follow_link(const char *path, char *out, size_t n);

/* run_eval.c: validation during training. Check the training.eval_every
 * settings against the provider at create (MXP_ERR_CONFIG). */
mxp_status run_eval_check(const mxp_run *r, mxp_error *err);
/* After a step trained in epoch `epoch` (0-based; ended: the step ended
 * it) at r->pos: validate when it is due (training.eval_every at an
 * epoch's end, training.eval_every_steps at a global step that is a
 * multiple), record the row, save the best checkpoint, update early
 * stopping (*stop = true when it ends the run) and the run state the
 * checkpoints carry. */
mxp_status run_eval_after_step(mxp_run *r, int64_t epoch, bool ended, int64_t steps_per_epoch,
                               bool *stop, mxp_error *err);
/* The run state as JSON (metadata "run_state"); restore it from a
 * checkpoint's (NULL: none; MXP_ERR_FORMAT naming the bad field). */
void run_eval_state_json(const mxp_run *r, char *buf, size_t n);
mxp_status run_eval_restore(mxp_run *r, const char *json, const char *file, mxp_error *err);

/* run_members.c: an ensemble's validation member by member (after the
 * model exists; nothing for one model). after_eval: record each member's
 * loss of ev at trainer step `step`, the members that improved on their
 * own best (> min_delta) into *improved, name the elites (the model's
 * too) and refresh the improved members' keep-best copies. save_best:
 * best.safetensors with each member's best (mxp_run_save otherwise).
 * best_loss: the mean best loss of the best file's elites. json: the
 * fields "elites", "member_val_loss", "member_best_val_loss",
 * "member_best_step" (and "members" for the run state) without braces,
 * "" for one model; restore: them from a checkpoint's run_state object. */
void run_members_init(mxp_run *r);
void run_members_free(mxp_run *r);
mxp_status run_members_after_eval(mxp_run *r, const mxp_run_eval *ev, int64_t step,
                                  uint64_t *improved, mxp_error *err);
mxp_status run_members_save_best(mxp_run *r, const char *path, mxp_error *err);
double run_members_best_loss(const mxp_run *r);
size_t run_members_json(const mxp_run *r, bool state, char *b, size_t n);
mxp_status run_members_restore(mxp_run *r, json_t *o, const char *file, mxp_error *err);
/* After a resume: the members' kept weights read back from the run's
 * best.safetensors (a warning and a fresh start when it does not fit). */
mxp_status run_members_load_best(mxp_run *r, const char *path, mxp_error *err);

#endif
