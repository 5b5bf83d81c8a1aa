/* models/workload.h: what the three workloads (world_model.c,
 * classifier.c, gpt.c) share: building the model and trainer a config asks
 * for, and one guarded step of their training loops. Not a public header. */
#ifndef MIXPREC_MODELS_WORKLOAD_H
#define MIXPREC_MODELS_WORKLOAD_H

#include <mixprec/guard.h>
#include <mixprec/world_model.h>

/* The model of spec and its trainer as cfg asks: the precision policy of
 * training.precision (with training.fp16_accumulate), the FP8 scaling
 * config (when cfg->fp8.history_len > 0; 0: a hand-built config keeps the
 * default), the FP32-layer override, and the trainer config with the
 * accumulation steps and the seed. On failure *model and *trainer hold
 * whatever was created; the caller's destroy releases them. */
mxp_status workload_model_create(const mxp_model_spec *spec, const mxp_config *cfg,
                                 mxp_model **model, mxp_trainer **trainer, mxp_error *err);

/* A training loop's fixed parts. */
typedef struct workload_loop {
    mxp_trainer *trainer;
    mxp_guard *guard;          /* NULL: no guard */
    const mxp_config *cfg;     /* the learning-rate schedule */
    mxp_progress_fn progress;  /* NULL: no progress reports */
    void *progress_user;
    int64_t steps_per_epoch;
} workload_loop;

/* One step at position p over micro[n_micro], the same in every workload:
 * the scheduled learning rate at p's run step, the guard's before-step, the
 * precision a data-parallel trainer's ranks agree on
 * (mxp_trainer_sync_precision; nothing on one process), mxp_trainer_step,
 * p advanced by one step, the guard's after-step (a rollback moves *p back;
 * *stop: a rule with action stop fired), and a progress report for `epoch`
 * (the epoch the step trained in). *res receives the step's result. */
mxp_status workload_step(const workload_loop *w, const mxp_batch *micro, int n_micro,
                         mxp_data_position *p, int64_t epoch, mxp_step_result *res, bool *stop,
                         mxp_error *err);

/* The end of a train() call, done or stopped: MXP_ERR_NONFINITE when the
 * weights or the optimizer state are not finite (mxp_trainer_check_state),
 * so a run that ends with broken weights never reports success (issue 15,
 * item 1); MXP_OK otherwise. */
mxp_status workload_end(const workload_loop *w, mxp_error *err);

#endif
