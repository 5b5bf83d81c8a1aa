/* backend/step_ctl.h: the per-step control block shared by the CPU backend
 * (backend_cpu.c), the trainer and the CUDA kernels (backend/cuda/): plain
 * C, compiled by gcc and nvcc, no dependency beyond backend/numerics/.
 * Field by field contract: backend/backend.h explains who writes what.
 */
#ifndef MIXPREC_BACKEND_STEP_CTL_H
#define MIXPREC_BACKEND_STEP_CTL_H

#include "backend/numerics/gradpass.h"
#include "backend/numerics/optim.h"
#include "backend/numerics/scaler_rule.h"

/* The per-step control block (device-resident on a GPU). */
typedef struct mxp_step_ctl {
    float scale;     /* loss scale of this step */
    float inv_scale; /* (float)(1.0 / (double)scale), GradScaler's rounding */
    float clip_max;  /* clip_grad_norm (0: off) */
    float clip_coef; /* decide: (float)(clip_max / (norm + 1e-6)) when norm > clip_max, else 1 */
    int32_t skip;    /* decide: found_inf, weights and optimizer state untouched */
    int32_t loss_nonfinite; /* the loss was NaN/Inf (host today: the loss is a host value) */
    int64_t opt_steps;      /* applied updates; decide advances it when !skip */
    uint64_t seed, sr_counter; /* SR stream; decide advances sr_counter by n_params when !skip */
    float lr, beta1, beta2, eps, weight_decay, momentum; /* optimizer hyper-parameters */
    bool nesterov;
    mxp_adamw_consts adamw; /* for step opt_steps + 1 (mxp_adamw_consts_make, host pow) */
    mxp_sgd_consts sgd;     /* for step opt_steps + 1 */
    bool run_scaler_rule;   /* decide also steps the scaler rule (device backends) */
    mxp_scaler_rule rule;
    mxp_scaler_rule_state scaler;
    mxp_scaler_rule_event event; /* of the last decide when run_scaler_rule */
    mxp_gradpass_acc stats;      /* of the last grad pass */
    /* Device steps (backend/cuda/dstep.c): the loss kernel's result slot,
     * so the step's one report carries it; the device decide also skips
     * when it is non-finite. 0 and unused on the CPU backend. */
    double loss;
} mxp_step_ctl;

#endif /* MIXPREC_BACKEND_STEP_CTL_H */
