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
 *   - per-step scalars in one small control block (mxp_step_ctl): scale and
 *     1/scale, clip threshold and coefficient, skip flag, optimizer step and
 *     SR counter, the optimizer's constants, the loss-scaler rule and state,
 *     the grad-pass statistics. The host fills it between steps
 *     (mxp_backend_ctl, then mxp_backend_begin uploads it); the ops write it.
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
    /* Upload the host's control block (CPU: nothing to do). */
    mxp_status (*begin)(mxp_backend *b, mxp_error *err);
    /* g[i] = mxp_gradpass_elem(g[i], ctl.inv_scale, near_at); ctl.stats =
     * the pass's statistics. */
    mxp_status (*grad_pass)(mxp_backend *b, float *g, size_t n, float near_at, mxp_error *err);
    /* ctl.skip = stats.nonfinite > 0 || loss_nonfinite || extra_inf (e.g.
     * another rank's overflow); clip_coef from sqrt(stats.sumsq); when
     * !skip: opt_steps++, sr_counter += n_params; the scaler rule when
     * ctl.run_scaler_rule. */
    mxp_status (*decide)(mxp_backend *b, bool extra_inf, uint64_t n_params, mxp_error *err);
    /* The optimizer over the flat slab (no-op when ctl.skip): g scaled by
     * clip_coef when < 1 (in place on the CPU), then AdamW / SGD (m = SGD
     * buffer, v unused) of step ctl.opt_steps; SR draws seed,
     * sr_counter - n + i. */
    mxp_status (*adamw)(mxp_backend *b, const mxp_backend_weights *w, float *g, float *m,
                        float *v, size_t n, mxp_error *err);
    mxp_status (*sgd)(mxp_backend *b, const mxp_backend_weights *w, float *g, float *buf,
                      size_t n, mxp_error *err);
    /* The step report: the control block as it stands, into *out (CUDA:
     * the one device-to-host copy of the step, then a sync). */
    mxp_status (*report)(mxp_backend *b, mxp_step_ctl *out, mxp_error *err);
    void (*destroy)(mxp_backend *b);
} mxp_backend_ops;

struct mxp_backend {
    const mxp_backend_ops *ops;
    mxp_step_ctl ctl;    /* host copy: filled before begin, refreshed by report */
    int64_t d2h_reports; /* step reports taken (one per step) */
};

/* The CPU backend over the active kernel table (kernels.h). */
mxp_status mxp_backend_cpu_create(mxp_backend **out, mxp_error *err);
/* destroy(NULL) is a no-op. */
void mxp_backend_destroy(mxp_backend *b);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_BACKEND_H */
