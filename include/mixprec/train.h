/* mixprec/train.h: optimizers on FP32 master weights and the trainer.
 *
 * One optimizer step of the trainer:
 *   for each of k micro-batches: forward, loss * scale, backward (grads +=)
 *   ONE fused pass over the grad slab: unscale by 1/(scale*k), finite check,
 *     gradient statistics
 *   finite:     clip by global norm (after unscaling) -> optimizer -> recast
 *   not finite: skip; weights and optimizer state untouched bit for bit;
 *               counted, logged (MXP_LOG_WARN) and marked in the history
 *   scaler update -> history row
 * Same seed and config give bit-identical losses.
 */
#ifndef MIXPREC_TRAIN_H
#define MIXPREC_TRAIN_H

#include <mixprec/dist.h>
#include <mixprec/model.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mxp_optim_kind {
    MXP_OPTIM_ADAMW,
    MXP_OPTIM_SGD, /* with momentum */
    MXP_OPTIM_KIND_COUNT
} mxp_optim_kind;

MXP_API const char *mxp_optim_kind_name(mxp_optim_kind k);
MXP_API mxp_status mxp_optim_kind_parse(const char *s, mxp_optim_kind *out, mxp_error *err);

/* Learning-rate schedule over a run of N optimizer steps (applied by the
 * workload loop through mxp_trainer_set_lr, as a PyTorch LR scheduler is). */
typedef enum mxp_lr_schedule {
    MXP_LR_CONSTANT,
    MXP_LR_COSINE, /* lr * (m + (1 - m) * (1 + cos(pi * s / N)) / 2), m = min ratio */
    MXP_LR_SCHEDULE_COUNT
} mxp_lr_schedule;

/* The learning rate at step s in [0, N) of schedule k with base lr and
 * floor ratio min_ratio in [0, 1]. */
MXP_API float mxp_lr_at(mxp_lr_schedule k, float lr, float min_ratio, int64_t s, int64_t n);

typedef struct mxp_optim_config {
    mxp_optim_kind kind;
    float lr;           /* > 0 (1e-3) */
    float beta1, beta2; /* [0, 1) (0.9, 0.999) */
    float eps;          /* > 0 (1e-8) */
    float weight_decay; /* >= 0 (0.0) */
    float momentum;     /* SGD, [0, 1) (0.9) */
    bool nesterov;
} mxp_optim_config;

MXP_API mxp_optim_config mxp_optim_config_default(void);

typedef struct mxp_trainer_config {
    mxp_scaler_config scaler;  /* scaler.enabled is set from the mode's policy
                                  unless scaler_override is true */
    bool scaler_override;
    mxp_optim_config optim;
    float clip_grad_norm;      /* > 0: clip global norm to it; 0: off (1.0) */
    int grad_accum_steps;      /* micro-batches per optimizer step, >= 1 */
    uint64_t seed;             /* stochastic rounding stream */
    float near_overflow_frac;  /* a grad counts "near overflow" when its scaled
                                  |value| >= frac * dtype max (0.125 = 2^-3) */
} mxp_trainer_config;

MXP_API mxp_trainer_config mxp_trainer_config_default(void);

typedef struct mxp_trainer mxp_trainer;

/* The trainer borrows the model (which must outlive it) and owns the
 * optimizer state and scaler. */
MXP_API mxp_status mxp_trainer_create(mxp_model *model, const mxp_trainer_config *cfg,
                                      mxp_trainer **out, mxp_error *err);
MXP_API void mxp_trainer_destroy(mxp_trainer *t);

typedef struct mxp_step_result {
    double loss;         /* mean unscaled loss over the micro-batches */
    bool skipped;        /* non-finite grads (or loss): no update applied */
    float scale;         /* loss scale used for this step */
    double grad_norm;    /* global L2 norm after unscaling, before clipping */
    double zero_frac;          /* exact-zero gradient fraction */
    double near_overflow_frac; /* fraction of grads near the format's max */
    int64_t nonfinite;         /* non-finite gradient elements */
    mxp_nonfinite_site site; /* where a non-finite value first appeared */
    bool fallback;       /* scaler asked to leave this precision */
} mxp_step_result;

/* One optimizer step over n_micro micro-batches (n_micro must equal
 * cfg.grad_accum_steps). Returns an error for invalid input, the scaler's
 * ERROR at-minimum policy, and MXP_ERR_STATE for a step called from inside
 * a step or after a guard rule stopped the run; a skipped step is MXP_OK
 * with res->skipped set. The scaler's FALLBACK policy sets res->fallback
 * and asks the step controller for the next mode, applied at the step
 * boundary (the end of this call when no run or guard drives the
 * trainer). */
MXP_API mxp_status mxp_trainer_step(mxp_trainer *t, const mxp_batch *micro, int n_micro,
                                    mxp_step_result *res, mxp_error *err);

/* Switch precision now, for a program that drives the trainer itself, by
 * the trainer's step controller (the one that applies every switch;
 * docs/design.md "Who changes precision"): the new policy (optimizer state
 * and master weights carry over), then the loss scaler and every per-layer
 * scaler group restart at the initial scale (growth tracker, hysteresis
 * and steps at minimum cleared). MXP_ERR_STATE inside a step (from a
 * gradient hook): switches happen between steps. Inside a run use
 * mxp_run_request_precision. The two names are the same call. */
MXP_API mxp_status mxp_trainer_set_precision(mxp_trainer *t, mxp_precision p, mxp_error *err);
MXP_API mxp_status mxp_trainer_switch_precision(mxp_trainer *t, mxp_precision p, mxp_error *err);

/* The stats API (names as seeds/001 uses them). */
typedef struct mxp_train_stats {
    int64_t training_steps;  /* step() calls */
    int64_t optimizer_steps; /* applied updates */
    int64_t skipped_steps;
    double overflow_rate;    /* skipped / training_steps (0 when none) */
    float current_scale;
    mxp_precision precision;
    bool fp16_enabled_runtime; /* true when the running mode computes in FP16 */
    int64_t epoch;
    /* Wall seconds summed over every mxp_trainer_step call, by phase:
     * forward = layers + loss; backward = zeroing grads, backward layers and
     * (data parallel) the gradient all-reduce; safety = the fused unscale +
     * finite-check + statistics pass and the loss-scaler update; optimizer =
     * clipping, the update and the recast of working weights. */
    double time_forward_s, time_backward_s, time_safety_s, time_optimizer_s;
} mxp_train_stats;

MXP_API void mxp_trainer_stats(const mxp_trainer *t, mxp_train_stats *out);

typedef struct mxp_history_row {
    int64_t step, epoch;
    double loss;
    float scale;
    double grad_norm;
    bool skipped;
    mxp_precision precision;
} mxp_history_row;

/* The whole history, oldest first; valid until the next step. */
MXP_API const mxp_history_row *mxp_trainer_history(const mxp_trainer *t, size_t *n);
MXP_API void mxp_trainer_set_epoch(mxp_trainer *t, int64_t epoch);

/* Fault injection for tests and drills: called after backward and before
 * the fused unscale pass with the SCALED FP32 gradient slab [n] of the
 * step about to be decided (training_steps + 1). The first micro-batch
 * wrote these values (mxp_model_discard_grads), so an exact zero may be
 * -0.0 here; the pass counts and stores it as +0.0. NULL removes it. */
typedef void (*mxp_grad_hook)(void *user, int64_t step, float *grads, size_t n);
MXP_API void mxp_trainer_set_grad_hook(mxp_trainer *t, mxp_grad_hook fn, void *user);

/* Host views of the optimizer state: AdamW moments m, v (SGD: m is the
 * momentum buffer, v NULL), each FP32 [n]; *t_out the update count. Valid
 * on the CPU backend only (tests, the train module); everything else uses
 * the named tensors below. */
MXP_API void mxp_trainer_optim_state(mxp_trainer *t, float **m, float **v, size_t *n,
                                     int64_t *t_out);

/* ==== named tensors of a trainer (src/train/trainer_tensors.c) ===========
 * What a checkpoint holds, under the names it uses, reached by copy
 * (model.h "named tensors": the same rules for dtype, size, NULL buffers
 * and name NULL = the whole slab [P]). Tensor i of the enumeration, in
 * checkpoint order: the parameters of record ("layers.0.weight", ...),
 * then optim.m.<name> and (AdamW) optim.v.<name>. The model's roles
 * (param, master, work, grad) go to the model; optim.m and optim.v are the
 * trainer's own, FP32. */
typedef struct mxp_tensor_desc {
    char name[64];        /* checkpoint name: "layers.0.weight", "optim.m.layers.0.weight" */
    const char *param;    /* the parameter tensor it belongs to: "layers.0.weight" */
    mxp_tensor_role role; /* MXP_TENSOR_PARAM, _OPTIM_M or _OPTIM_V */
    mxp_dtype dtype;      /* storage dtype */
    int ndim;
    int64_t shape[2];
    size_t offset;        /* first element in its role's whole slab (name NULL) */
    size_t count;         /* elements */
} mxp_tensor_desc;

MXP_API int mxp_trainer_num_tensors(const mxp_trainer *t);
/* Tensor i in [0, mxp_trainer_num_tensors); MXP_ERR_INVALID_ARG outside. */
MXP_API mxp_status mxp_trainer_tensor_desc(const mxp_trainer *t, int i, mxp_tensor_desc *out,
                                           mxp_error *err);
/* Storage dtype of role r (MXP_ERR_UNSUPPORTED when absent, as optim.v
 * under SGD). */
MXP_API mxp_status mxp_trainer_tensor_dtype(const mxp_trainer *t, mxp_tensor_role r,
                                            mxp_dtype *out, mxp_error *err);
/* Bytes held in role r's slab, 0 when the trainer (or its model) has none. */
MXP_API size_t mxp_trainer_tensor_bytes(const mxp_trainer *t, mxp_tensor_role r);
MXP_API mxp_status mxp_trainer_tensor_get(mxp_trainer *t, mxp_tensor_role r, const char *name,
                                          mxp_dtype dtype, void *buf, size_t nbytes,
                                          mxp_error *err);
MXP_API mxp_status mxp_trainer_tensor_set(mxp_trainer *t, mxp_tensor_role r, const char *name,
                                          mxp_dtype dtype, const void *buf, size_t nbytes,
                                          mxp_error *err);
/* Set optimizer tensor (r, name) to +0 in backend memory (no transfer);
 * for the model's gradients use mxp_model_zero_grads. */
MXP_API mxp_status mxp_trainer_tensor_zero(mxp_trainer *t, mxp_tensor_role r, const char *name,
                                           mxp_error *err);
/* Transfers through get/set of this trainer's tensors, its model's
 * included (mxp_model_transfers). */
MXP_API void mxp_trainer_transfers(const mxp_trainer *t, mxp_transfer_stats *out);

/* Set the learning rate used from the next step on (finite, > 0). */
MXP_API mxp_status mxp_trainer_set_lr(mxp_trainer *t, float lr, mxp_error *err);

MXP_API mxp_model *mxp_trainer_model(mxp_trainer *t);
MXP_API mxp_scaler *mxp_trainer_scaler(mxp_trainer *t);
/* Per-layer loss scaling (scaler.per_layer, amp.h): the group scalers, or
 * NULL when off (then mxp_trainer_scaler is the one scaler in use). */
MXP_API mxp_scaler_groups *mxp_trainer_scaler_groups(mxp_trainer *t);
/* The loss scale in use: the scaler's, or the smallest group scale. */
MXP_API float mxp_trainer_loss_scale(const mxp_trainer *t);
/* Checkpoint metadata "scaler_groups": the group scaler states as a JSON
 * array of [scale, growth_tracker, hysteresis_left, overflow_steps,
 * total_steps, steps_at_min] (mxp_free it), NULL when per-layer scaling is
 * off (or out of memory). load: restore them (json NULL: a checkpoint
 * without them, every group takes the scaler's state); validated before
 * anything changes; a no-op when this trainer has no groups. */
MXP_API char *mxp_trainer_scaler_groups_json(mxp_trainer *t);
MXP_API mxp_status mxp_trainer_scaler_groups_load(mxp_trainer *t, const char *json, mxp_error *err);

/* ---- the data position (train/position.c) ------------------------------
 * One struct for the run loop (run.h), the guard's rollbacks (guard.h) and
 * checkpoints (ckpt.h). */

/* Where the data loader is: enough to reproduce the same batches after a
 * resume, and the run's place in its learning-rate schedule (epoch and
 * step_in_epoch give the global step; the plan is training.epochs or the end
 * of the call in progress, docs/run.md). */
typedef struct mxp_data_position {
    int64_t epoch;           /* epoch in progress (== epochs done when step_in_epoch is 0) */
    int64_t step_in_epoch;   /* optimizer steps finished in that epoch */
    int64_t batch_size;      /* micro-batch size of the call (steps per epoch depend on it) */
    int64_t run_first_epoch; /* the train() call in progress: first epoch, */
    int64_t run_epochs;      /*   epochs asked for, */
    int64_t run_step;        /*   steps done in this call */
    int64_t run_total;       /*   and its total steps; 0 = no call in progress */
} mxp_data_position;

/* Start (or continue) a train() call of num_epochs at batch_size with
 * steps_per_epoch steps each. A call in progress (run_total > 0, run_step <
 * run_total) continues when num_epochs and batch_size match it (else
 * MXP_ERR_INVALID_ARG naming both); otherwise a new call starts at the
 * current epoch. Also checks step_in_epoch < steps_per_epoch. */
MXP_API mxp_status mxp_data_position_begin(mxp_data_position *p, int64_t num_epochs,
                                           int64_t batch_size, int64_t steps_per_epoch,
                                           mxp_error *err);
/* One optimizer step done: advance run_step and step_in_epoch (rolling
 * over into the next epoch). */
MXP_API void mxp_data_position_advance(mxp_data_position *p, int64_t steps_per_epoch);
/* True when the call in progress has done all its steps. */
MXP_API bool mxp_data_position_done(const mxp_data_position *p);
/* The call finished: clear the run_* fields (epoch stays). */
MXP_API void mxp_data_position_end(mxp_data_position *p);

/* Data parallelism (dist.h): from the next step on, average gradients and
 * loss over comm's ranks after backward, agree on found_inf with MAX, and
 * verify that the replicas are identical on the first step and every
 * dc->check_every steps (MXP_ERR_STATE when they are not). The trainer
 * borrows comm (it must outlive the trainer or be removed with NULL);
 * dc NULL: mxp_dist_config_default(). Reserves the all-reduce scratch. */
MXP_API mxp_status mxp_trainer_set_comm(mxp_trainer *t, mxp_comm *comm, const mxp_dist_config *dc,
                                        mxp_error *err);
/* The communicator set by mxp_trainer_set_comm, or NULL. */
MXP_API mxp_comm *mxp_trainer_comm(mxp_trainer *t);
/* Data parallel, at a step boundary on every rank: when the ranks' precision
 * modes differ (an operator switch that reached rank 0's control API only,
 * or a signal that reached the ranks at different steps), every rank takes
 * rank 0's mode and loss-scaler state. One MAX all-reduce of 3 ints per call
 * (plus a broadcast when they differ). No-op without a communicator or with
 * one rank. */
MXP_API mxp_status mxp_trainer_sync_precision(mxp_trainer *t, mxp_error *err);

/* Checkpointable trainer state beside the optimizer moments
 * (mxp_trainer_optim_state) and the scaler (mxp_scaler_get_state). */
typedef struct mxp_trainer_state {
    int64_t training_steps;  /* step() calls */
    int64_t optimizer_steps; /* applied updates: AdamW's t */
    int64_t skipped_steps;
    int64_t epoch;
    uint64_t sr_counter;     /* position in the stochastic-rounding stream */
    float lr;                /* current learning rate */
} mxp_trainer_state;

MXP_API void mxp_trainer_get_state(const mxp_trainer *t, mxp_trainer_state *out);
/* Restore counters, RNG position and lr. Validated first (counts >= 0,
 * optimizer and skipped steps <= training steps, lr finite > 0); nothing
 * changes on error. */
MXP_API mxp_status mxp_trainer_set_state(mxp_trainer *t, const mxp_trainer_state *s,
                                         mxp_error *err);
MXP_API const mxp_trainer_config *mxp_trainer_get_config(const mxp_trainer *t);
/* Whether the state a run keeps is usable: every parameter (the FP32
 * master, or the 16-bit weights of a pure mode) and every optimizer moment
 * finite, and AdamW's second moment >= 0 (a mean of squares). MXP_OK, or
 * MXP_ERR_NONFINITE naming the part, the tensor, the count of bad values
 * and the first one. One pass over the slabs, no allocation. The guard
 * checks it before a state becomes a rollback point, and every workload's
 * train() at its end, so a run that ends with broken weights fails. */
MXP_API mxp_status mxp_trainer_check_state(mxp_trainer *t, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_TRAIN_H */
