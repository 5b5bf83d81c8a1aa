/* backend/backend.h: the step-level backend seam (internal).
 *
 * The trainer's safety-and-update half of a step (docs/design.md "A
 * training step" and "The backend seam": the fused unscale + finite check +
 * stats pass, the skip / clip decision, the optimizer) goes through this
 * interface, so that a device backend can run it where the data lives:
 *   - asynchronous: every op may only enqueue work; results are visible to
 *     the host after mxp_backend_report (the step's one device-to-host copy,
 *     counted in d2h_reports);
 *   - device-resident: the buffers passed in are the backend's own (host
 *     memory for the CPU, device memory for CUDA); no op returns a host
 *     scalar;
 *   - per-step scalars in one small control block (mxp_step_ctl, in backend
 *     memory): scale and 1/scale, clip threshold and coefficient, skip
 *     flag, optimizer step and SR counter, the optimizer's constants, the
 *     loss-scaler rule and state (the state's one home: decide steps it,
 *     the host's mxp_scaler takes it from each report, a host write
 *     between steps goes back through ctl.scaler_load), the grad-pass
 *     statistics. The host stages
 *     its half (step_ctl.h, MXP_STEP_CTL_HOST_BYTES) in b->ctl and begin
 *     uploads it at the step boundary; the ops write the other half; the
 *     counters live there between steps (set_counters writes them once, at
 *     resume);
 *   - one report per step: the control block and the aux area (the passes'
 *     result slots, reserve) in one device-to-host copy, into b->ctl and
 *     b->aux_host. After report b->ctl is the device block as it stood;
 *   - per-layer loss scaling (ctl.n_groups > 0): the group table
 *     (step_ctl.h). The host stages each group's scale, 1/scale, slab
 *     range and scaler state in b->grp_host; begin uploads them with the
 *     block's host half (one copy); grad_pass unscales each group by its
 *     own 1/scale into the group's result slot (the mxp_step_group_out
 *     array that opens the aux area) and sums the statistics into
 *     ctl.stats; decide runs the per-group rule (mxp_step_groups_decide)
 *     with ctl.rule; the report brings the slots back (b->aux_host);
 *   - the gradient beta (ctl.grad_beta): read by the model's
 *     parameter-gradient kernels from the block in backend memory
 *     (nn/step_pass.h); staged 0 by the host, set to 1 in backend memory
 *     after the step's first micro-batch.
 *
 * Implementations: backend_cpu.c (the kernel table; what the trainer uses
 * today); the CUDA side (backend/cuda/, the same control block and element
 * rules) compiles but is not wired into a backend object yet: docs/gpu.md
 * lists what is and is not behind the seam.
 */
#ifndef MIXPREC_BACKEND_H
#define MIXPREC_BACKEND_H

#include <mixprec/num.h>

#include "backend/step_ctl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where an update reads and writes its weights (kernels.h mxp_weights
 * without the SR stream, which lives in the control block). */
typedef struct mxp_backend_weights {
    float *master;      /* FP32 master, or NULL (pure low precision) */
    void *work;         /* working copy (recast from master, or updated in place), or NULL */
    mxp_dtype work_type;
    bool sr;            /* pure path: stochastic-rounded stores */
} mxp_backend_weights;

typedef struct mxp_backend mxp_backend;

typedef struct mxp_backend_ops {
    const char *name;
    /* The report area: room for a group table of n_groups (0..
     * MXP_STEP_MAX_GROUPS; its host-written half b->grp_in / b->grp_host)
     * and the control block followed by `bytes` of aux memory (b->aux,
     * 64-byte aligned; the group slots, mxp_step_groups_out_bytes, then a
     * step's result-slot blocks), all of the aux area copied by the next
     * report. Reallocates only to grow (the control block's contents carry
     * over; the group table does not: the host stages it every step);
     * between steps only. */
    mxp_status (*reserve)(mxp_backend *b, int n_groups, size_t bytes, mxp_error *err);
    /* The step boundary: upload the host-written half of b->ctl, preceded
     * by the ctl.n_groups entries of b->grp_host (one host-to-device copy);
     * then, when ctl.scaler_load, ctl.scaler = ctl.scaler_set in backend
     * memory. ctl.n_groups above the reserved count: MXP_ERR_STATE. */
    mxp_status (*begin)(mxp_backend *b, mxp_error *err);
    /* Resume: the device's opt_steps and sr_counter (and b->ctl's). */
    mxp_status (*set_counters)(mxp_backend *b, int64_t opt_steps, uint64_t sr_counter,
                               mxp_error *err);
    /* g[i] = mxp_gradpass_elem(g[i], ctl.inv_scale, near_at); ctl.stats =
     * the pass's statistics. With ctl.n_groups > 0: group by group over
     * its slab range with its inv_scale, each group's statistics into its
     * slot, ctl.stats their sum in group order (a range outside [0, n):
     * MXP_ERR_INVALID_ARG). */
    mxp_status (*grad_pass)(mxp_backend *b, float *g, size_t n, float near_at, mxp_error *err);
    /* ctl.loss_nonfinite = whether any of the n doubles at loss, loss +
     * stride bytes, ... (the passes' loss slots, backend memory) is NaN/Inf. */
    mxp_status (*check_loss)(mxp_backend *b, const double *loss, size_t stride, int n,
                             mxp_error *err);
    /* ctl.skip = stats.nonfinite > 0 || loss_nonfinite || extra_inf (e.g.
     * another rank's overflow); clip_coef from sqrt(stats.sumsq); when
     * !skip: opt_steps++, sr_counter += n_params; the scaler rule when
     * ctl.run_scaler_rule; with ctl.n_groups > 0 the groups' rule
     * (mxp_step_groups_decide: outcomes from the slots' non-finite counts
     * and loss_nonfinite, states from the uploaded table). */
    mxp_status (*decide)(mxp_backend *b, bool extra_inf, uint64_t n_params, mxp_error *err);
    /* The optimizer over the flat slab (no-op when ctl.skip): g scaled by
     * clip_coef when < 1 (in place on the CPU), then AdamW / SGD (m = SGD
     * buffer, v unused) of step ctl.opt_steps; SR draws seed,
     * sr_counter - n + i. */
    mxp_status (*adamw)(mxp_backend *b, const mxp_backend_weights *w, float *g, float *m,
                        float *v, size_t n, mxp_error *err);
    mxp_status (*sgd)(mxp_backend *b, const mxp_backend_weights *w, float *g, float *buf,
                      size_t n, mxp_error *err);
    /* The step report: the control block as it stands and the aux area's
     * reserved bytes, in one device-to-host copy (then a sync on a device),
     * into b->ctl, b->aux_host and *out (may be NULL). */
    mxp_status (*report)(mxp_backend *b, mxp_step_ctl *out, mxp_error *err);
    void (*destroy)(mxp_backend *b);
} mxp_backend_ops;

struct mxp_backend {
    const mxp_backend_ops *ops;
    mxp_step_ctl ctl;    /* host image: its host half staged for begin; the
                            whole block as of the last report */
    int64_t d2h_reports; /* step reports taken (one per step) */
    mxp_step_ctl *dev;   /* the control block in backend memory */
    void *aux;           /* backend memory: aux_bytes after the control block */
    size_t aux_bytes;
    const void *aux_host; /* the aux area as of the last report (host memory) */
    mxp_step_group_in *grp_in;   /* backend memory: the group table reserve made room
                                    for (right before the control block) */
    mxp_step_group_in *grp_host; /* host: where the host stages it for begin */
    int grp_reserved;            /* entries reserved */
};

/* Bytes of n groups' result slots at the start of the aux area (a
 * multiple of 64). */
static inline size_t mxp_step_groups_out_bytes(int n) {
    return ((size_t)(n > 0 ? n : 0) * sizeof(mxp_step_group_out) + 63) / 64 * 64;
}

/* decide's rule on a control block (the CPU backend's decide runs it on its
 * block; a host that agreed on extra_inf with other ranks after the report
 * runs it on its image, so b->ctl stays the device block without a copy). */
void mxp_backend_decide_rule(mxp_step_ctl *c, bool extra_inf, uint64_t n_params);

/* The CPU backend over the active kernel table (kernels.h). */
mxp_status mxp_backend_cpu_create(mxp_backend **out, mxp_error *err);
/* destroy(NULL) is a no-op. */
void mxp_backend_destroy(mxp_backend *b);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_BACKEND_H */
