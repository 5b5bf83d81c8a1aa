/* models/workload_run.h: the older per-workload handles (world_model.h,
 * classifier.h, gpt.h) as a run (run.h) of their built-in provider, built
 * from run.h's public functions only: the handle owns its mxp_run and
 * forwards to it, so src/models needs nothing internal of src/run
 * (docs/design.md "Modules"). Not a public header. */
#ifndef MIXPREC_MODELS_WORKLOAD_RUN_H
#define MIXPREC_MODELS_WORKLOAD_RUN_H

#include <signal.h>

#include <mixprec/run.h>

typedef struct workload_run {
    mxp_run *run;
    mxp_run_progress_fn progress; /* the handle's progress callback, or NULL */
    void *progress_user;
    const volatile sig_atomic_t *stop_flag; /* world_model.h's stop flag, or NULL */
} workload_run;

/* The run of provider p (taken: the run releases it, also when this fails)
 * without checkpoints (the handles attach a manager themselves), its
 * progress going through w: w must not move while the run lives. */
mxp_status workload_run_create(workload_run *w, const mxp_config *cfg,
                               const mxp_workload_provider *p, mxp_error *err);
/* Release the run (w itself is the caller's). */
void workload_run_destroy(workload_run *w);
/* The provider's state (its `self`). */
void *workload_run_self(const workload_run *w);
/* True when the last train() call ended on a stop. */
bool workload_run_stopped(const workload_run *w);
/* mxp_ckpt_load into the trainer, then take the checkpoint's position. */
mxp_status workload_run_load(workload_run *w, const char *path, mxp_ckpt_info *info,
                             mxp_error *err);
/* Restore the newest healthy checkpoint of the attached manager and move
 * the position back with it; MXP_ERR_STATE without a manager. */
mxp_status workload_run_rollback(workload_run *w, const char *reason,
                                 mxp_ckpt_rollback_result *res, mxp_error *err);

#endif
