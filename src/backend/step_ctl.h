/* backend/step_ctl.h: the per-step control block shared by the CPU backend
 * (backend_cpu.c), the trainer and the CUDA kernels (backend/cuda/): plain
 * C, compiled by gcc and nvcc, no dependency beyond backend/numerics/.
 * Field by field contract: backend/backend.h explains who writes what.
 *
 * Two halves, in this order: the fields the host writes at the step
 * boundary (up to, not including, clip_coef: MXP_STEP_CTL_HOST_BYTES, what
 * begin uploads), then the fields only the backend's ops write (the
 * decision, the counters, the scaler state, the statistics), which the
 * host reads from the step's report and never uploads during training
 * (resume writes the counters once, set_counters).
 */
#ifndef MIXPREC_BACKEND_STEP_CTL_H
#define MIXPREC_BACKEND_STEP_CTL_H

#include <stddef.h>

#include "backend/numerics/gradpass.h"
#include "backend/numerics/optim.h"
#include "backend/numerics/scaler_rule.h"

/* The per-step control block (device-resident on a GPU). */
typedef struct mxp_step_ctl {
    /* ---- written by the host at the step boundary (begin uploads them) ---- */
    float scale;     /* loss scale of this step: the backward passes multiply by it */
    float inv_scale; /* (float)(1.0 / (double)scale), GradScaler's rounding */
    float clip_max;  /* clip_grad_norm (0: off) */
    uint64_t seed;   /* SR stream seed */
    float lr, beta1, beta2, eps, weight_decay, momentum; /* optimizer hyper-parameters */
    bool nesterov;
    mxp_adamw_consts adamw; /* for step opt_steps + 1 (mxp_adamw_consts_make, host pow) */
    mxp_sgd_consts sgd;     /* for step opt_steps + 1 */
    bool run_scaler_rule;   /* decide also steps the scaler rule (device backends) */
    mxp_scaler_rule rule;
    /* ---- written by the backend's ops only (read by the host from the report) ---- */
    float clip_coef; /* decide: (float)(clip_max / (norm + 1e-6)) when norm > clip_max, else 1 */
    int32_t skip;    /* decide: found_inf, weights and optimizer state untouched */
    int32_t loss_nonfinite; /* check_loss: a pass's loss slot was NaN/Inf */
    int64_t opt_steps;      /* applied updates; decide advances it when !skip */
    uint64_t sr_counter;    /* SR stream position; decide advances it by n_params when !skip */
    mxp_scaler_rule_state scaler;
    mxp_scaler_rule_event event; /* of the last decide when run_scaler_rule */
    mxp_gradpass_acc stats;      /* of the last grad pass */
    /* Device steps (backend/cuda/dstep.c): the loss kernel's result slot,
     * so the step's one report carries it; the device decide also skips
     * when it is non-finite. 0 and unused on the CPU backend. */
    double loss;
} mxp_step_ctl;

/* Bytes of the host-written half (begin's upload). */
#define MXP_STEP_CTL_HOST_BYTES offsetof(mxp_step_ctl, clip_coef)

#endif /* MIXPREC_BACKEND_STEP_CTL_H */
