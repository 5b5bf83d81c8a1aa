/* train/trainer_device.h: a trainer whose step runs on a device
 * (training.device=cuda; internal, docs/design.md "The device step").
 *
 * Attached, mxp_trainer_step runs the whole step through the device MLP
 * step (backend/cuda/dstep.h) on the step's micro-batches (concatenated in
 * order), and fills what the CPU step fills (loss, skip, scale, gradient
 * health, NaN site, counters, history, the scaler's adopted state). A
 * precision switch re-plans at the next step. The parameters and the
 * optimizer state (AdamW m, v; SGD's momentum) of record are then the
 * device's; the host model and the trainer's m/v are a copy, pulled (3
 * counted downloads, SGD 2)
 * before the host reads them and pushed after the host writes them, at
 * the model's and the trainer's tensor entry points (nn/model_sync.h,
 * trainer_tensors.c), never inside a step. The gradients of the last
 * step are pulled only when the host reads them (one copy). What the device step cannot
 * run is refused when attaching (or at the step that meets it), with an
 * MXP error naming it and what is accepted; nothing falls back to the CPU.
 *
 * Entry points: trainer_device_select (the run: the CUDA table and a CUDA
 * context, or the test override), trainer_device_attach / _detach,
 * trainer_device_spec and trainer_device_ds_kind (model + policy +
 * trainer config -> mxp_ds_spec, the one place that maps them),
 * trainer_device_step, trainer_device_pull, trainer_device_host_wrote,
 * trainer_device_get_stats,
 * trainer_device_override (tests only).
 */
#ifndef MIXPREC_TRAINER_DEVICE_H
#define MIXPREC_TRAINER_DEVICE_H

#include <mixprec/device.h>
#include <mixprec/train.h>

#include "backend/cuda/dstep.h"

typedef struct trainer_device trainer_device;

/* What the device did for a trainer (tests and the CLI summary). */
typedef struct trainer_device_stats {
    int64_t steps;        /* device steps run */
    int64_t step_d2h_max; /* most device-to-host copies in one step (1) */
    int64_t pulls, pushes; /* whole-state copies outside steps */
    int64_t grad_pulls;    /* gradient downloads (one copy each, on a read) */
    int64_t plans;        /* plans made (one, plus one per batch-size change) */
    const char *table;    /* the ops table's name */
} trainer_device_stats;

/* The device spec of t's model, policy and config for `batch` rows per
 * step; MXP_ERR_UNSUPPORTED naming the first thing the device step cannot
 * run and what it accepts. */
/* The device step's kind of a model layer kind; MXP_DS_KIND_COUNT for a
 * kind the device step does not run. */
mxp_ds_kind trainer_device_ds_kind(mxp_layer_kind k);
mxp_status trainer_device_spec(const mxp_trainer *t, int64_t batch, mxp_ds_spec *out,
                               mxp_error *err);
/* Attach t to (ops, dev): plan, upload the model's parameters, the moments
 * and the counters. own_dev: a CUDA context that detach destroys. */
mxp_status trainer_device_attach(mxp_trainer *t, const mxp_ds_ops *ops, void *dev, bool own_dev,
                                 mxp_error *err);
/* Pull, then free the plan (and an owned context); the host copy is the
 * record again. NULL / not attached: no-op. */
void trainer_device_detach(mxp_trainer *t);
/* Attach t to the device d names: the test override when one is set, else
 * the CUDA table on a new context of device d->index (CUDA builds with a
 * device), else MXP_ERR_UNSUPPORTED naming why. CPU: nothing. */
mxp_status trainer_device_select(mxp_trainer *t, const mxp_device *d, mxp_error *err);
/* The step on the device (called by mxp_trainer_step's body). */
mxp_status trainer_device_step(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                               mxp_step_result *res, mxp_error *err);
/* Download the device's record into the host copy when a step has run
 * since the last pull (no-op otherwise, and when not attached). */
mxp_status trainer_device_pull(mxp_trainer *t, mxp_error *err);
/* Download the device's gradients of its last step into the model's
 * gradient slab when a step has run since the last such pull (a read of
 * the gradients: mxp_model_tensor_get / _set of role grad,
 * mxp_model_grads); one counted copy; no-op otherwise. */
mxp_status trainer_device_pull_grads(mxp_trainer *t, mxp_error *err);
/* The host copy was written: upload it before the next step. */
void trainer_device_host_wrote(mxp_trainer *t);
bool trainer_device_attached(const mxp_trainer *t);
void trainer_device_get_stats(const mxp_trainer *t, trainer_device_stats *out);
/* Tests only: trainer_device_select attaches (ops, dev) instead of CUDA
 * (NULL ops: no override). Process-wide; not thread-safe. */
void trainer_device_override(const mxp_ds_ops *ops, void *dev);

#endif
