/* mixprec/world_model.h: the default workload. An MLP predicts the
 * standardised next-state delta and reward from (state, action), trained
 * from a replay buffer of trajectories of a built-in physics environment
 * (data.h). Batches are drawn without replacement from a per-epoch
 * permutation of the training transitions (seeded, counter-based RNG), and
 * the last partial batch of an epoch is dropped, so same seed + config give
 * bit-identical losses.
 */
#ifndef MIXPREC_WORLD_MODEL_H
#define MIXPREC_WORLD_MODEL_H

#include <mixprec/config.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_world_model mxp_world_model;

/* Progress report after every optimizer step. */
typedef struct mxp_progress {
    int64_t step, total_steps;
    int64_t epoch, total_epochs;
    const mxp_step_result *result;
} mxp_progress;

typedef void (*mxp_progress_fn)(void *user, const mxp_progress *p);

/* Generate the replay buffer and build model + trainer from cfg. The
 * model's largest batch is cfg->batch_size (validation runs in chunks). */
mxp_status mxp_world_model_create(const mxp_config *cfg, mxp_world_model **out, mxp_error *err);
void mxp_world_model_destroy(mxp_world_model *wm);

void mxp_world_model_set_progress(mxp_world_model *wm, mxp_progress_fn fn, void *user);

/* Train num_epochs over the training split with micro-batches of
 * batch_size (1 <= batch_size <= cfg batch_size) and the config's gradient
 * accumulation. Continues from the current state when called again. */
mxp_status mxp_world_model_train(mxp_world_model *wm, int64_t num_epochs, int64_t batch_size,
                                 mxp_error *err);

/* Mean validation loss (MSE on standardised targets) in the working precision. */
mxp_status mxp_world_model_validation_loss(mxp_world_model *wm, double *out, mxp_error *err);

mxp_trainer *mxp_world_model_trainer(mxp_world_model *wm);
mxp_model *mxp_world_model_model(mxp_world_model *wm);
const mxp_replay *mxp_world_model_replay(const mxp_world_model *wm);
/* Transitions per epoch actually used for training (after drop-last). */
int64_t mxp_world_model_samples_per_epoch(const mxp_world_model *wm, int64_t batch_size);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_WORLD_MODEL_H */
