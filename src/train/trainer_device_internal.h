/* train/trainer_device_internal.h: what the trainer_device_*.c files
 * share (contract: train/trainer_device.h; docs/design.md "The device
 * step"). Not for callers outside train/trainer_device*.c.
 *
 * Who holds what. The device plan (backend/cuda/dstep.h) holds the master,
 * work copy, m and v of record after a step; the host model and t->m/t->v
 * are a copy kept by two flags: host_stale (a step ran since the last
 * pull) and dev_stale (the host wrote since the last push). The counters
 * and the scaler stay the host's: before each step the plan is told the
 * optimizer step count, SR counter, scaler state and learning rate
 * (mxp_ds_set_state, host only), after it the host's mxp_scaler adopts
 * the rule state and event the device reported (mxp_scaler_adopt, as the
 * CPU path: the host adds its at-min policy, log and fallback request),
 * checked against the reported next scale. So a resume or a rollback
 * (which write tensors and counters on the host) needs nothing more than
 * the push the write triggers. The gradients have their own flag,
 * grads_stale (a step ran since the host's gradient slab was pulled),
 * pulled only on a gradient read (trainer_device_pull_grads).
 *
 * The files: trainer_device.c (override, plan, attach / detach / select),
 * trainer_device_spec.c (the spec mapping and its refusals),
 * trainer_device_sync.c (the host copy: pull, push, the stale flags),
 * trainer_device_step.c (the step and its host-side accounting).
 */
#ifndef MIXPREC_TRAINER_DEVICE_INTERNAL_H
#define MIXPREC_TRAINER_DEVICE_INTERNAL_H

#include "train/trainer_device.h"

struct trainer_device {
    const mxp_ds_ops *ops;
    void *dev;
    bool own_dev;
    mxp_ds_plan *plan;
    mxp_precision mode; /* the mode planned for */
    int64_t batch;
    bool host_stale, dev_stale;
    bool grads_stale; /* a step ran since the last gradient pull */
    bool busy; /* inside pull / push: the model's callbacks do nothing */
    float *buf; /* host scratch [P] */
    /* the step's rows, micro-batches concatenated (k > 1 only) */
    float *xs, *ys;
    int32_t *ls;
    int64_t out_dim;
    trainer_device_stats st;
};

/* (Re)plan for `batch` rows; the state follows by a push. */
mxp_status trainer_device_plan(mxp_trainer *t, int64_t batch, mxp_error *err);
/* Host copy -> device (params, m, v); the counters travel per step. */
mxp_status trainer_device_push(mxp_trainer *t, mxp_error *err);
/* The optimizer slabs the plan holds: AdamW m and v, SGD its momentum
 * buffer (none at momentum 0). */
int trainer_device_n_moments(const mxp_trainer *t);
/* MXP_ERR_IO naming the table, what failed and the table's reason. */
mxp_status trainer_device_io_error(mxp_error *err, const trainer_device *d, const char *what,
                                   const char *why);

#endif
