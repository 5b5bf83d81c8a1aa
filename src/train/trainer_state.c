/* train/trainer_state.c: export and import of the trainer's checkpointable
 * state (counters, stochastic-rounding position, learning rate).
 *
 * Entry points: mxp_trainer_get_state, mxp_trainer_set_state,
 * mxp_trainer_get_config. The optimizer moments are exposed as views by
 * mxp_trainer_optim_state (trainer.c) and the scaler by its own
 * get/set_state (amp); the checkpoint module (src/ckpt) combines them.
 */
#include <math.h>

#include "train/trainer_internal.h"

void mxp_trainer_get_state(const mxp_trainer *t, mxp_trainer_state *out) {
    if (!t || !out) return;
    out->training_steps = t->training_steps;
    out->optimizer_steps = t->opt_steps;
    out->skipped_steps = t->skipped_steps;
    out->epoch = t->epoch;
    out->sr_counter = t->sr_counter;
    out->lr = t->cfg.optim.lr;
}

mxp_status mxp_trainer_set_state(mxp_trainer *t, const mxp_trainer_state *s, mxp_error *err) {
    if (!t || !s) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_set_state: NULL");
    if (s->training_steps < 0 || s->optimizer_steps < 0 || s->skipped_steps < 0 || s->epoch < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "trainer state training_steps=%lld optimizer_steps=%lld "
                             "skipped_steps=%lld epoch=%lld; accepted: all >= 0",
                             (long long)s->training_steps, (long long)s->optimizer_steps,
                             (long long)s->skipped_steps, (long long)s->epoch);
    if (s->optimizer_steps > s->training_steps || s->skipped_steps > s->training_steps)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "trainer state optimizer_steps=%lld skipped_steps=%lld; accepted: "
                             "each <= training_steps=%lld",
                             (long long)s->optimizer_steps, (long long)s->skipped_steps,
                             (long long)s->training_steps);
    if (!(s->lr > 0) || !isfinite(s->lr))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "trainer state lr=%g; accepted: finite > 0",
                             (double)s->lr);
    t->training_steps = s->training_steps;
    t->opt_steps = s->optimizer_steps;
    t->skipped_steps = s->skipped_steps;
    t->epoch = s->epoch;
    t->sr_counter = s->sr_counter;
    t->cfg.optim.lr = s->lr;
    return MXP_OK;
}

const mxp_trainer_config *mxp_trainer_get_config(const mxp_trainer *t) {
    return t ? &t->cfg : NULL;
}
