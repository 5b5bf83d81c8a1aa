/* mixprec/world_model.h: the default workload. An MLP predicts the
 * standardised next-state delta and reward from (state, action), trained
 * from a replay buffer of trajectories of a built-in physics environment
 * (data.h). Batches are drawn without replacement from a per-epoch
 * permutation of the training transitions (seeded, counter-based RNG), and
 * the last partial batch of an epoch is dropped, so same seed + config give
 * bit-identical losses.
 *
 * An mxp_world_model owns an mxp_run (run.h) of the world-model provider
 * and forwards to run.h's functions; new code can use run.h directly.
 */
#ifndef MIXPREC_WORLD_MODEL_H
#define MIXPREC_WORLD_MODEL_H

#include <signal.h>

#include <mixprec/ckpt.h>
#include <mixprec/config.h>
#include <mixprec/run.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_world_model mxp_world_model;

/* Progress report after every optimizer step (run.h's). */
typedef mxp_run_progress mxp_progress;
typedef mxp_run_progress_fn mxp_progress_fn;

/* Generate the replay buffer and build model + trainer from cfg. The
 * model's largest batch is cfg->batch_size (validation runs in chunks). */
MXP_API mxp_status mxp_world_model_create(const mxp_config *cfg, mxp_world_model **out,
                                          mxp_error *err);
MXP_API void mxp_world_model_destroy(mxp_world_model *wm);

MXP_API void mxp_world_model_set_progress(mxp_world_model *wm, mxp_progress_fn fn, void *user);

/* Train num_epochs over the training split with micro-batches of
 * batch_size (1 <= batch_size <= cfg batch_size) and the config's gradient
 * accumulation. Continues from the current state when called again. */
MXP_API mxp_status mxp_world_model_train(mxp_world_model *wm, int64_t num_epochs,
                                         int64_t batch_size, mxp_error *err);

/* Mean validation loss (MSE on standardised targets) in the working precision. */
MXP_API mxp_status mxp_world_model_validation_loss(mxp_world_model *wm, double *out,
                                                   mxp_error *err);

/* Data parallelism: train on this rank's shard of every global batch.
 * A global micro-batch is size(comm) x batch_size rows of the same seeded
 * permutation on every rank; rank r reads slice r, so N ranks with batch b
 * see exactly the rows of one process with batch N*b. Checks that every
 * rank has the same batch size, accumulation, seed, precision, model and
 * data (MXP_ERR_CONFIG otherwise), then mxp_trainer_set_comm. comm NULL:
 * one process again. comm is borrowed and must outlive the world model. */
MXP_API mxp_status mxp_world_model_set_comm(mxp_world_model *wm, mxp_comm *comm,
                                            const mxp_dist_config *dc, mxp_error *err);

MXP_API mxp_trainer *mxp_world_model_trainer(mxp_world_model *wm);
/* The numerical-safety guard (guard.h; NULL when guard.enabled=false and
 * no fault is configured). */
MXP_API mxp_guard *mxp_world_model_guard(mxp_world_model *wm);
MXP_API mxp_model *mxp_world_model_model(mxp_world_model *wm);
MXP_API const mxp_replay *mxp_world_model_replay(const mxp_world_model *wm);
/* Transitions per epoch actually used for training over all ranks (after
 * drop-last). */
MXP_API int64_t mxp_world_model_samples_per_epoch(const mxp_world_model *wm, int64_t batch_size);

/* ---- checkpoints, resume, graceful stop (mixprec/ckpt.h) ---------------
 * train() keeps a data position (epoch, step in epoch, which drive the LR
 * schedule planned over the run, and the call in progress). With a checkpoint manager
 * attached it saves after the steps its policy picks, at the end of every
 * call, and on a stop request. A stop request (*flag != 0, e.g. set by a
 * signal handler) ends train() after the current step with MXP_OK and
 * stopped() true; calling train() again with the same arguments
 * continues. A loaded checkpoint's position makes the next train() call
 * continue the interrupted call: the same batches and learning rates. */
MXP_API void mxp_world_model_set_checkpointer(mxp_world_model *wm, mxp_ckpt_manager *m);
MXP_API mxp_ckpt_manager *mxp_world_model_checkpointer(mxp_world_model *wm);
MXP_API void mxp_world_model_set_stop_flag(mxp_world_model *wm, const volatile sig_atomic_t *flag);
MXP_API bool mxp_world_model_stopped(const mxp_world_model *wm);
MXP_API void mxp_world_model_position(const mxp_world_model *wm, mxp_data_position *out);
MXP_API void mxp_world_model_set_position(mxp_world_model *wm, const mxp_data_position *p);
MXP_API const mxp_config *mxp_world_model_config(const mxp_world_model *wm);
/* mxp_ckpt_load into the trainer, then take the checkpoint's position. */
MXP_API mxp_status mxp_world_model_load_checkpoint(mxp_world_model *wm, const char *path,
                                                   mxp_ckpt_info *info, mxp_error *err);
/* Restore the newest healthy, verified checkpoint of the attached manager
 * (weights, optimizer, scaler, counters, data position); logged as an
 * event. MXP_ERR_STATE without a manager. */
MXP_API mxp_status mxp_world_model_rollback(mxp_world_model *wm, const char *reason,
                                            mxp_ckpt_rollback_result *res, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_WORLD_MODEL_H */
