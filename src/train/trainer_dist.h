/* train/trainer_dist.h: the data-parallel points of the trainer's step,
 * implemented in train/trainer_dist.c and called from train/trainer.c.
 * Each is a no-op when the trainer has no communicator. Not public. */
#ifndef MIXPREC_TRAINER_DIST_H
#define MIXPREC_TRAINER_DIST_H

#include <mixprec/train.h>

/* After backward (and the grad hook), before the fused unscale pass:
 * average the scaled FP32 gradient slab over the ranks (dist.allreduce_dtype
 * on the wire). */
mxp_status mxp_trainer_dist_reduce(mxp_trainer *t, mxp_error *err);
/* After the step's report: average *loss (FP64, rank order). */
mxp_status mxp_trainer_dist_reduce_loss(mxp_trainer *t, double *loss, mxp_error *err);

/* *found_inf becomes true on every rank when it is on any (MAX). */
mxp_status mxp_trainer_dist_agree(mxp_trainer *t, bool *found_inf, mxp_error *err);

/* At the end of a step: on the first step after mxp_trainer_set_comm and
 * every dist.check_every steps, compare a checksum of the weights, the
 * optimizer moments, the loss scale and the step counters across ranks;
 * MXP_ERR_STATE naming the step when they differ. */
mxp_status mxp_trainer_dist_verify(mxp_trainer *t, mxp_error *err);

#endif
