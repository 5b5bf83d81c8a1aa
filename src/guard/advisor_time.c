/* guard/advisor_time.c: training.precision=auto decides by measurement.
 *
 * Entry point: guard_auto_by_time (guard_internal.h), called by
 * mxp_guard_auto_precision (advisor.c) after the preflight.
 *
 * Candidates: fp32 (always safe), mixed_bf16 and mixed_fp16 when the
 * preflight found them safe and this CPU runs them at least with hardware
 * conversion, and mixed_fp16 with the FP16 fast-accumulate GEMM
 * (fp16_accum_k) when mixed_fp16 is safe and the kernel table runs it on
 * FP16 FMA hardware (kernels.h gemm_compute; the emulation is far slower
 * than FP32). Each candidate is a model of the user's spec under its policy
 * with the user's current weights; it runs one untimed forward+backward step
 * on the first preflight batch, then timed steps until its share of the
 * budget (AUTO_BUDGET_S in all) is spent (at least one, at most
 * AUTO_MAX_STEPS); its time is the median. The loss scale of a step is the
 * one the preflight assumed for that format.
 *
 * FP16 accumulation changes the numerics beyond what the range checks see:
 * its candidate is kept only when its loss on that batch stays within
 * AUTO_F16ACC_REL of mixed_fp16's with FP32 accumulation (same weights): a
 * check at the current weights, not a bound on the trained result.
 *
 * Choice: the fastest candidate; a low-precision one only when it beats
 * fp32 by at least AUTO_MIN_GAIN (smaller differences are within what a
 * shared machine's timing can tell apart, and FP32 is the safe default).
 */
#include "guard/guard_internal.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AUTO_BUDGET_S 0.8
#define AUTO_MAX_STEPS 5
#define AUTO_MIN_GAIN 1.05
#define AUTO_F16ACC_REL 1e-3

typedef struct auto_cand {
    const char *label;
    mxp_precision mode;
    int fp16_accum_k;
    bool usable;
    char why[96];      /* why not usable */
    double step_s;     /* median seconds per forward+backward step */
    double loss;       /* loss of the first (untimed) step */
} auto_cand;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Time candidate c on batch b with the user's weights (from m); budget_s
 * for its timed steps. */
static mxp_status time_cand(const mxp_model *m, const mxp_batch *b, double scale,
                            double budget_s, auto_cand *c, mxp_error *err) {
    mxp_model_spec spec = *mxp_model_get_spec(m);
    if (b->B > spec.max_batch) spec.max_batch = b->B;
    mxp_precision_policy pol;
    mxp_precision_policy_default(c->mode, &pol);
    pol.fp16_accum_k = c->fp16_accum_k;
    mxp_model *t = NULL;
    mxp_status s = mxp_model_create(&spec, &pol, 0, &t, err);
    if (s != MXP_OK) return s;
    if (mxp_model_policy(t)->has_master && (s = mxp_model_copy_params(t, m, err)) != MXP_OK) {
        mxp_model_destroy(t);
        return s;
    }
    double loss = NAN, times[AUTO_MAX_STEPS];
    int n = 0;
    mxp_nonfinite_site site;
    mxp_model_zero_grads(t);
    s = mxp_model_step(t, b, true, (float)scale, &loss, &site, err);
    c->loss = loss;
    double spent = 0;
    while (s == MXP_OK && n < AUTO_MAX_STEPS && (n == 0 || spent < budget_s)) {
        double t0 = mxp_time_now();
        mxp_model_zero_grads(t);
        s = mxp_model_step(t, b, true, (float)scale, &loss, &site, err);
        times[n] = mxp_time_now() - t0;
        spent += times[n++];
    }
    mxp_model_destroy(t);
    if (s != MXP_OK) return s;
    qsort(times, (size_t)n, sizeof times[0], cmp_double);
    c->step_s = times[n / 2];
    return MXP_OK;
}

mxp_status guard_auto_by_time(const mxp_model *m, const mxp_batch *b,
                              const mxp_preflight_report *rep, int fp16_accum_k,
                              guard_auto_choice *out, mxp_error *err) {
    const mxp_kernels *k = mxp_kernels_get();
    memset(out, 0, sizeof *out); /* every text field is "" unless written below */
    auto_cand c[] = {
        {"fp32", MXP_PRECISION_FP32, 0, true, "", NAN, NAN},
        {"mixed_bf16", MXP_PRECISION_MIXED_BF16, 0, false, "", NAN, NAN},
        {"mixed_fp16", MXP_PRECISION_MIXED_FP16, 0, false, "", NAN, NAN},
        {"mixed_fp16+fp16_accumulate", MXP_PRECISION_MIXED_FP16, fp16_accum_k, false, "", NAN,
         NAN},
    };
    enum { NC = sizeof c / sizeof c[0], F16ACC = 3 };
    int usable = 0;
    for (int i = 0; i < NC; i++) {
        const mxp_format_verdict *v = &rep->verdict[c[i].mode];
        if (c[i].mode == MXP_PRECISION_FP32)
            c[i].usable = true;
        else if (!v->safe)
            snprintf(c[i].why, sizeof c[i].why, "unsafe (preflight)");
        else if (v->support < MXP_SUPPORT_CONVERT)
            snprintf(c[i].why, sizeof c[i].why, "emulated on this CPU");
        else if (i == F16ACC && fp16_accum_k < 1)
            snprintf(c[i].why, sizeof c[i].why, "no promotion interval");
        else if (i == F16ACC && k->gemm_compute(MXP_DTYPE_F16, true) != MXP_GEMM_COMPUTE_FP16_FMA)
            snprintf(c[i].why, sizeof c[i].why, "no AVX512-FP16: FP16 accumulation is emulated");
        else
            c[i].usable = true;
        usable += c[i].usable;
    }
    for (int i = 0; i < NC; i++) {
        if (!c[i].usable) continue;
        double scale = c[i].mode == MXP_PRECISION_FP32 ? 1.0 : rep->verdict[c[i].mode].loss_scale;
        if (!(scale > 0)) scale = 1.0;
        mxp_status s = time_cand(m, b, scale, AUTO_BUDGET_S / usable, &c[i], err);
        if (s != MXP_OK) return s;
    }
    /* FP16 accumulation: the loss must stay close to FP32 accumulation's */
    if (c[F16ACC].usable && c[2].usable) {
        double rel = fabs(c[F16ACC].loss - c[2].loss) / fmax(fabs(c[2].loss), 1e-30);
        if (!(rel <= AUTO_F16ACC_REL)) {
            c[F16ACC].usable = false;
            snprintf(c[F16ACC].why, sizeof c[F16ACC].why,
                     "loss moved %.3g%% from FP32 accumulation (limit %.3g%%)", 100 * rel,
                     100 * AUTO_F16ACC_REL);
        }
    }
    int best = 0;
    for (int i = 1; i < NC; i++)
        if (c[i].usable && c[i].step_s * AUTO_MIN_GAIN <= c[0].step_s &&
            (best == 0 || c[i].step_s < c[best].step_s))
            best = i;
    out->mode = c[best].mode;
    out->fp16_accum_k = c[best].fp16_accum_k;
    int w = snprintf(out->times, sizeof out->times, "forward+backward per step on this CPU:");
    for (int i = 0; i < NC && w > 0 && (size_t)w < sizeof out->times; i++) {
        if (c[i].usable || isfinite(c[i].step_s))
            w += snprintf(out->times + w, sizeof out->times - (size_t)w, " %s %.3f ms%s;",
                          c[i].label, 1e3 * c[i].step_s, c[i].usable ? "" : " (refused)");
        else
            w += snprintf(out->times + w, sizeof out->times - (size_t)w, " %s not timed (%s);",
                          c[i].label, c[i].why);
    }
    for (int i = 0; i < NC; i++)
        if (!c[i].usable && isfinite(c[i].step_s))
            snprintf(out->refused, sizeof out->refused, "%s: %s", c[i].label, c[i].why);
    if (best == 0)
        snprintf(out->why, sizeof out->why,
                 "fp32: no safe low-precision mode was at least %.0f%% faster than FP32 here",
                 100 * (AUTO_MIN_GAIN - 1));
    else
        snprintf(out->why, sizeof out->why, "%s: safe (preflight) and the fastest, %.2fx FP32's "
                 "step time", c[best].label, c[0].step_s / c[best].step_s);
    return MXP_OK;
}
