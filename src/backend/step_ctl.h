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
 *
 * Per-layer (adaptive) loss scaling adds a per-group table in backend
 * memory (at most MXP_STEP_MAX_GROUPS groups, ctl.n_groups of them): the
 * host-written half of each group (mxp_step_group_in: its scale, 1/scale,
 * slab range and scaler state before the step) sits right before the
 * control block, so begin uploads it with the block's host half in one
 * copy; the backend-written half (mxp_step_group_out: the group's grad-pass
 * statistics, outcome, scaler state and event after decide) opens the aux
 * area, so the step's one report brings it back (backend/backend.h).
 * The table is outside mxp_step_ctl so that the block stays small
 * (backend/cuda/ keeps it under 4 KiB).
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
    bool run_scaler_rule;   /* decide also steps the scaler rule (`scaler`, `event`) */
    mxp_scaler_rule rule;   /* the scaler's rule; with n_groups > 0 every group's */
    /* The loss scaler's state lives in `scaler` below (the block as of the
     * last report is the truth; the host's mxp_scaler is its view). When
     * the host set its view between steps (resume, rollback, a precision
     * switch, rank 0's broadcast) it stages that state here with
     * scaler_load = 1, and begin makes it the block's `scaler` (a copy in
     * backend memory, no extra transfer). backend/cuda/'s device step sets
     * its block's scaler itself at its start and does not read these. */
    int32_t scaler_load;
    mxp_scaler_rule_state scaler_set;
    /* Gradient beta of the step's parameter-gradient GEMMs: 0 (write "=":
     * the step discarded the gradients; "+=" kernels clear their slice
     * first) or 1 (add). The host stages 0 at the boundary; the passes read
     * it where it lives (nn/step_pass.h) and the end of micro-batch 0's
     * pass sets it to 1 in backend memory, so later micro-batches add. */
    float grad_beta;
    /* Per-layer loss scaling: groups in the table (0: one loss scale; then
     * grad_pass uses inv_scale over the whole slab). */
    int32_t n_groups;
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

/* ---- per-layer loss scaling: the group table ------------------------------ */

#define MXP_STEP_MAX_GROUPS 64 /* == MXP_MODEL_MAX_LAYERS: a group per layer at most */

/* What a group's step means (amp.h mxp_group_outcome, same values). */
enum { MXP_STEP_GROUP_CLEAN = 0, MXP_STEP_GROUP_OVERFLOW = 1, MXP_STEP_GROUP_HOLD = 2 };

/* Host-written at the step boundary (begin uploads it with the block). */
typedef struct mxp_step_group_in {
    float scale;     /* the group's loss scale this step */
    float inv_scale; /* (float)(1.0 / (double)scale) */
    uint64_t off, cnt; /* the group's range of the gradient slab */
    mxp_scaler_rule_state state; /* the group's scaler state before the step */
} mxp_step_group_in;

/* Backend-written (grad_pass, decide), read from the report. */
typedef struct mxp_step_group_out {
    mxp_gradpass_acc stats;      /* grad_pass: the group's unscale pass */
    mxp_scaler_rule_state state; /* decide: the state after the step */
    mxp_scaler_rule_event event; /* decide: of the rule (zero on HOLD) */
    int32_t outcome;             /* decide: MXP_STEP_GROUP_* */
} mxp_step_group_out;

/* decide's per-group rule (Zhao et al.'s groups, GradScaler's rule per
 * group): an Inf arising in group g's gradients reaches every group below
 * g through backward, so only the topmost group with non-finite gradients
 * backs off (OVERFLOW), the non-finite groups below it HOLD (state
 * unchanged), finite groups count a CLEAN step; a non-finite loss (the
 * forward overflowed, whatever the scales) backs every group off. */
MXP_HD static inline void mxp_step_groups_decide(const mxp_scaler_rule *rule,
                                                 const mxp_step_group_in *in,
                                                 mxp_step_group_out *out, int32_t n,
                                                 bool loss_nonfinite) {
    int32_t top = -1;
    for (int32_t i = n - 1; i >= 0 && top < 0; i--)
        if (out[i].stats.nonfinite > 0) top = i;
    for (int32_t i = 0; i < n; i++) {
        const int32_t o = loss_nonfinite || i == top ? MXP_STEP_GROUP_OVERFLOW
                          : out[i].stats.nonfinite > 0 ? MXP_STEP_GROUP_HOLD
                                                       : MXP_STEP_GROUP_CLEAN;
        mxp_scaler_rule_event e = {false, false, false, false, 0.0f, 0.0f};
        out[i].outcome = o;
        out[i].state = in[i].state;
        if (o != MXP_STEP_GROUP_HOLD)
            e = mxp_scaler_rule_step(rule, &out[i].state, o == MXP_STEP_GROUP_OVERFLOW);
        out[i].event = e;
    }
}

#endif /* MIXPREC_BACKEND_STEP_CTL_H */
