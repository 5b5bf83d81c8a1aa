/* train/trainer_internal.h: the trainer's state, shared by the files of
 * the train module (trainer.c: the step; checkpoint/state code: export and
 * import). Not a public header. */
#ifndef MIXPREC_TRAINER_INTERNAL_H
#define MIXPREC_TRAINER_INTERNAL_H

#include <mixprec/train.h>

#include "kernels/kernels.h"
#include "train/step_ctl.h"

#define HISTORY_INITIAL_CAP 1024

/* Per-layer (adaptive) loss scaling state (layer_scale.c); NULL when off. */
typedef struct trainer_layer_scale {
    mxp_scaler_groups *groups;                   /* one scaler per group */
    int n_layers, n_groups;
    int group_of[MXP_MODEL_MAX_LAYERS];          /* layer -> group, -1: none */
    size_t off[MXP_MODEL_MAX_LAYERS];            /* group -> slab offset */
    size_t cnt[MXP_MODEL_MAX_LAYERS];            /*   and element count */
    int layer_group[MXP_MODEL_MAX_LAYERS];       /* layer -> the group whose scale its
                                                    output gradient carries, S(l) */
    int64_t nonfinite[MXP_MODEL_MAX_LAYERS];     /* group -> non-finite grads, last report */
    mxp_group_outcome outcome[MXP_MODEL_MAX_LAYERS]; /* group -> decide's outcome, last report */
} trainer_layer_scale;

struct mxp_backend;
struct mxp_trainer {
    mxp_model *model;
    struct mxp_backend *be; /* the step seam (backend/backend.h): the CPU backend today */
    mxp_trainer_config cfg;
    mxp_scaler *scaler;
    trainer_layer_scale *ls; /* per-layer loss scaling (layer_scale.c), or NULL */
    size_t n_params;
    float *m; /* AdamW first moment, or SGD momentum buffer  FP32 [P] */
    float *v; /* AdamW second moment (NULL for SGD)          FP32 [P] */
    /* applied updates (the optimizer's t) and the stochastic-rounding stream
     * position live in the backend's control block: be->ctl.opt_steps,
     * be->ctl.sr_counter as of the last report (backend/backend.h) */
    int64_t training_steps;
    int64_t skipped_steps;
    int64_t epoch;
    mxp_history_row *hist;
    size_t hist_n, hist_cap;
    mxp_grad_hook hook;
    void *hook_user;
    mxp_comm *comm;        /* data-parallel communicator (NULL: one process) */
    mxp_dist_config dist;  /* all-reduce dtype, replica check interval */
    bool dist_verified;    /* replicas compared since mxp_trainer_set_comm */
    double time_s[4];      /* wall seconds per phase: forward, backward, safety, optimizer */
    step_ctl ctl;          /* the step controller: phases and precision switches (step_ctl.c) */
    mxp_transfer_stats xfer; /* get/set of the optimizer state (trainer_tensors.c) */
    struct trainer_device *dv; /* training.device=cuda: the step's device (trainer_device.c),
                                  NULL: the CPU */
};

/* trainer.c: (re)create the loss scaler for the model's current policy
 * (and the per-layer groups); the step controller's switch uses it. */
mxp_status trainer_make_scaler(mxp_trainer *t, mxp_error *err);
/* trainer.c: append a row to the training history. */
mxp_status trainer_push_history(mxp_trainer *t, const mxp_history_row *row);

/* layer_scale.c: (re)create the groups when sc asks for per-layer scaling
 * (else leave t->ls NULL); begin a step (per-layer grad scales into the
 * model, returns the loss scale); stage the group table (each group's
 * scale, 1/scale, slab range and scaler state) and ctl.n_groups / ctl.rule
 * into the backend's staging for begin; after the report, the groups take
 * the states decide left (aux_host: the report's aux area, opening with
 * the group slots); refuse data parallelism. */
mxp_status trainer_ls_create(mxp_trainer *t, const mxp_scaler_config *sc, mxp_error *err);
void trainer_ls_destroy(mxp_trainer *t);
float trainer_ls_begin(mxp_trainer *t);
void trainer_ls_stage(mxp_trainer *t, struct mxp_backend *be);
void trainer_ls_passes(mxp_trainer *t, const struct mxp_backend *be);
mxp_status trainer_ls_update(mxp_trainer *t, const void *aux_host, mxp_scaler_event *ev,
                             mxp_error *err);
mxp_status trainer_ls_check_comm(const mxp_trainer *t, mxp_error *err);

#endif
