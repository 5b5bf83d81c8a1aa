/* train/trainer_internal.h: the trainer's state, shared by the files of
 * the train module (trainer.c: the step; checkpoint/state code: export and
 * import). Not a public header. */
#ifndef MIXPREC_TRAINER_INTERNAL_H
#define MIXPREC_TRAINER_INTERNAL_H

#include <mixprec/train.h>

#define HISTORY_INITIAL_CAP 1024

struct mxp_trainer {
    mxp_model *model;
    mxp_trainer_config cfg;
    mxp_scaler *scaler;
    size_t n_params;
    float *m; /* AdamW first moment, or SGD momentum buffer  FP32 [P] */
    float *v; /* AdamW second moment (NULL for SGD)          FP32 [P] */
    int64_t opt_steps;     /* applied updates: the optimizer's t */
    int64_t training_steps;
    int64_t skipped_steps;
    int64_t epoch;
    uint64_t sr_counter;   /* position in the stochastic-rounding stream */
    mxp_history_row *hist;
    size_t hist_n, hist_cap;
    mxp_grad_hook hook;
    void *hook_user;
    mxp_comm *comm;        /* data-parallel communicator (NULL: one process) */
    mxp_dist_config dist;  /* all-reduce dtype, replica check interval */
    bool dist_verified;    /* replicas compared since mxp_trainer_set_comm */
};

#endif
