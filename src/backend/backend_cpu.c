/* backend/backend_cpu.c: the CPU implementation of the step seam
 * (backend/backend.h) over the kernel table (kernels/kernels.h).
 *
 * Entry points: mxp_backend_cpu_create, mxp_backend_destroy.
 * "Device" memory is host memory and the control block is the backend's
 * own ctl, so begin and report copy nothing; each op runs synchronously.
 * The arithmetic is the trainer's before the seam existed, operation for
 * operation (unscale_stats, clip by k->scale with PyTorch's coefficient,
 * k->adamw / k->sgd with t = opt_steps), so results are bit-identical.
 */
#include "backend/backend.h"
#include "backend/devmem.h"

#include <math.h>

#include "kernels/kernels.h"

static mxp_status cpu_begin(mxp_backend *b, mxp_error *err) { return MXP_OK; }

static mxp_status cpu_grad_pass(mxp_backend *b, float *g, size_t n, float near_at,
                                mxp_error *err) {
    mxp_grad_stats gs;
    mxp_kernels_get()->unscale_stats(g, n, b->ctl.inv_scale, near_at, &gs);
    b->ctl.stats = (mxp_gradpass_acc){gs.n, gs.nonfinite, gs.zeros, gs.near_overflow, gs.sumsq,
                                      gs.absmax};
    return MXP_OK;
}

static mxp_status cpu_decide(mxp_backend *b, bool extra_inf, uint64_t n_params, mxp_error *err) {
    mxp_step_ctl *c = &b->ctl;
    bool found_inf = c->stats.nonfinite > 0 || c->loss_nonfinite || extra_inf;
    c->skip = found_inf;
    double norm = sqrt(c->stats.sumsq);
    c->clip_coef = c->clip_max > 0 && norm > c->clip_max
                       ? (float)(c->clip_max / (norm + 1e-6))
                       : 1.0f;
    if (!found_inf) {
        c->opt_steps++;
        c->sr_counter += n_params;
    }
    if (c->run_scaler_rule) c->event = mxp_scaler_rule_step(&c->rule, &c->scaler, found_inf);
    return MXP_OK;
}

/* kernels.h weights for this step's update (SR stream from ctl). */
static mxp_weights kweights(const mxp_backend *b, const mxp_backend_weights *w, size_t n) {
    mxp_weights k = {w->master, w->work, w->work_type, w->sr, b->ctl.seed,
                     b->ctl.sr_counter - n};
    return k;
}

static void clip(const mxp_backend *b, float *g, size_t n) {
    if (b->ctl.clip_coef != 1.0f) mxp_kernels_get()->scale(g, b->ctl.clip_coef, n);
}

static mxp_status cpu_adamw(mxp_backend *b, const mxp_backend_weights *w, float *g, float *m,
                            float *v, size_t n, mxp_error *err) {
    const mxp_step_ctl *c = &b->ctl;
    if (c->skip) return MXP_OK;
    clip(b, g, n);
    mxp_weights k = kweights(b, w, n);
    mxp_adamw_hparams h = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    mxp_kernels_get()->adamw(&k, g, m, v, n, &h, c->opt_steps);
    return MXP_OK;
}

static mxp_status cpu_sgd(mxp_backend *b, const mxp_backend_weights *w, float *g, float *buf,
                          size_t n, mxp_error *err) {
    const mxp_step_ctl *c = &b->ctl;
    if (c->skip) return MXP_OK;
    clip(b, g, n);
    mxp_weights k = kweights(b, w, n);
    mxp_sgd_hparams h = {c->lr, c->momentum, c->weight_decay, c->nesterov};
    mxp_kernels_get()->sgd(&k, g, buf, n, &h, c->opt_steps);
    return MXP_OK;
}

static mxp_status cpu_report(mxp_backend *b, mxp_step_ctl *out, mxp_error *err) {
    b->d2h_reports++;
    mxp_dev_count(true, sizeof b->ctl); /* the step report (a device's one copy) */
    if (out && out != &b->ctl) *out = b->ctl;
    return MXP_OK;
}

static void cpu_destroy(mxp_backend *b) { mxp_free(b); }

static const mxp_backend_ops cpu_ops = {"cpu",   cpu_begin, cpu_grad_pass, cpu_decide,
                                        cpu_adamw, cpu_sgd,  cpu_report,   cpu_destroy};

mxp_status mxp_backend_cpu_create(mxp_backend **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_backend_cpu_create: NULL");
    mxp_backend *b = mxp_calloc(1, sizeof *b);
    if (!b) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "CPU backend");
    b->ops = &cpu_ops;
    *out = b;
    return MXP_OK;
}

void mxp_backend_destroy(mxp_backend *b) {
    if (b) b->ops->destroy(b);
}
