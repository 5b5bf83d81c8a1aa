/* train/trainer_device_fp8.h: the FP8 scaling state between the device
 * step's plan (backend/cuda/dstep.h, spec.fp8) and the host model's
 * (mxp_model_fp8), moved where train/trainer_device.c moves the master and
 * the optimizer state: to the host on a pull (validation, checkpoints read
 * the model), to the device on a push (a resume, a host write).
 * Entry point: trainer_device_fp8_sync (trainer_device_fp8.c). Internal.
 */
#ifndef MIXPREC_TRAIN_TRAINER_DEVICE_FP8_H
#define MIXPREC_TRAIN_TRAINER_DEVICE_FP8_H

#include <mixprec/amp.h>
#include <mixprec/model.h>

#include "backend/cuda/dstep.h"

/* The device step's copy of an FP8 scaling config. */
static inline mxp_ds_fp8_cfg trainer_device_fp8_cfg(const mxp_fp8_config *c) {
    return (mxp_ds_fp8_cfg){c->history_len, (int)c->amax_algo, c->margin};
}

/* to_host: the plan's scales, histories and update count into the model's
 * scaling state; else the model's into the plan. MXP_OK without doing
 * anything when the plan is not FP8; an error naming the direction when a
 * side refuses (the state sizes must agree: the same model). */
mxp_status trainer_device_fp8_sync(mxp_ds_plan *plan, mxp_model *m, bool to_host,
                                   mxp_error *err);

#endif /* MIXPREC_TRAIN_TRAINER_DEVICE_FP8_H */
