/* guard/canary.c: the FP32 canary.
 *
 * Entry points (internal): guard_canary_init/_free/_run.
 *
 * Every K steps the guard computes the loss of one fixed probe batch twice
 * from the same parameters: in the working precision (the model itself,
 * forward only) and in FP32 (a shadow model of the same spec whose FP32
 * weights are copied from the master, or widened from the 16-bit working
 * weights of a pure mode; created inference-only, without a gradient
 * slab). Their relative difference is the "loss
 * divergence vs FP32 baseline" of the seeds (000: > 20% is P1; 5% is the
 * re-enable criterion). Forward-only passes take no site, so the monitor
 * and armed faults never see them, and the FP8 amax history is untouched.
 * Cost: one forward in each precision on the probe, plus a copy of the
 * parameters (mxp_model_copy_params: backend memory to backend memory, no
 * host transfer), every K steps.
 *
 * The divergence is relative to the FP32 loss, but never to less than a
 * floor: guard.canary.loss_floor (1e-3) times the loss of the best
 * constant prediction on the probe (MSE: the mean per-column variance of
 * the targets; cross-entropy: the entropy of the probe's labels), i.e. the
 * problem's own loss scale. A converged regression's loss falls towards the
 * working format's resolution, where the gap between the two forwards stops
 * shrinking with it (the default world model in mixed_bf16: |lw - l32|
 * stays 1e-5..4e-5 while l32 falls from 5e-3 to 5e-5, so the plain ratio
 * climbs from 1% to 28% on a run whose validation loss ends within 1.1% of
 * an FP32 run's). Below the floor the gap is judged against the floor, as
 * an allclose-style absolute tolerance; above it nothing changes.
 */
#include "guard/guard_internal.h"

#include <math.h>
#include <string.h>

void guard_canary_free(guard_canary *c) {
    mxp_model_destroy(c->fp32);
    mxp_free(c->x);
    mxp_free(c->y);
    mxp_free(c->labels);
    memset(c, 0, sizeof *c);
}

/* Loss of the best constant prediction on the probe, in the model's loss:
 * MSE (mean over B*C) of predicting each column's mean = the mean of the
 * population variances; cross-entropy of predicting the labels' empirical
 * distribution = its entropy (labels outside [0, C) are not counted). A
 * Gaussian head's NLL takes the same mean variance as its scale (its NLL
 * can be 0 or negative, so it has none of its own). */
static double constant_loss(mxp_loss_kind loss, const mxp_batch *p, size_t B, size_t C) {
    double total = 0.0;
    if (loss != MXP_LOSS_XENT) {
        if (!p->y) return 0.0;
        for (size_t c = 0; c < C; c++) {
            double mean = 0.0, ss = 0.0;
            for (size_t r = 0; r < B; r++) mean += p->y[r * C + c];
            mean /= (double)B;
            for (size_t r = 0; r < B; r++) {
                const double d = p->y[r * C + c] - mean;
                ss += d * d;
            }
            total += ss / (double)B;
        }
        return total / (double)C;
    }
    if (!p->labels) return 0.0;
    size_t n = 0;
    for (size_t r = 0; r < B; r++) n += p->labels[r] >= 0 && (size_t)p->labels[r] < C;
    for (size_t r = 0; r < B; r++) { /* each distinct label once: at its first row */
        const int32_t k = p->labels[r];
        if (k < 0 || (size_t)k >= C) continue;
        size_t first = r, cnt = 0;
        for (size_t q = 0; q < B; q++)
            if (p->labels[q] == k) {
                if (q < first) first = q;
                cnt++;
            }
        if (first != r) continue;
        const double f = (double)cnt / (double)n;
        total -= f * log(f);
    }
    return total;
}

mxp_status guard_canary_init(guard_canary *c, const mxp_model *m, const mxp_batch *probe,
                             double loss_floor, mxp_error *err) {
    memset(c, 0, sizeof *c);
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    if (!probe || !probe->x || probe->B < 1 || probe->B > sp->max_batch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "canary probe batch: B=%lld; accepted: 1..%lld rows with x set",
                             probe ? (long long)probe->B : 0LL, (long long)sp->max_batch);
    mxp_model_spec spec = *sp;
    spec.max_batch = probe->B;
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    /* forward only: no gradient slab (mxp_model_create_inference) */
    mxp_status s = mxp_model_create_inference(&spec, &pol, 0, &c->fp32, err);
    if (s != MXP_OK) return s;
    const size_t B = (size_t)probe->B, in = (size_t)sp->in_dim;
    const size_t out = (size_t)mxp_model_target_dim(m);
    c->x = mxp_calloc(B * in, sizeof(float));
    if (probe->y) c->y = mxp_calloc(B * out, sizeof(float));
    if (probe->labels) c->labels = mxp_calloc(B, sizeof(int32_t));
    if (!c->x || (probe->y && !c->y) || (probe->labels && !c->labels)) {
        guard_canary_free(c);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "canary probe batch");
    }
    memcpy(c->x, probe->x, B * in * sizeof(float));
    c->floor = loss_floor * constant_loss(sp->loss, probe, B, out);
    if (c->y) memcpy(c->y, probe->y, B * out * sizeof(float));
    if (c->labels) memcpy(c->labels, probe->labels, B * sizeof(int32_t));
    c->probe = (mxp_batch){.x = c->x, .y = c->y, .labels = c->labels, .B = probe->B};
    return MXP_OK;
}

mxp_status guard_canary_run(guard_canary *c, mxp_model *m, double *div, double *lw,
                            double *l32, mxp_error *err) {
    mxp_status s = mxp_model_copy_params(c->fp32, m, err);
    if (s != MXP_OK) return s;
    s = mxp_model_step(c->fp32, &c->probe, false, 1.0f, l32, NULL, err);
    if (s != MXP_OK) return s;
    s = mxp_model_step(m, &c->probe, false, 1.0f, lw, NULL, err);
    if (s != MXP_OK) return s;
    if (!isfinite(*lw))
        *div = INFINITY;
    else {
        const double ref = fmax(fabs(*l32), c->floor);
        *div = ref == 0.0 ? (*lw == *l32 ? 0.0 : INFINITY) : fabs(*lw - *l32) / ref;
    }
    return MXP_OK;
}
