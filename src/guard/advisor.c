/* guard/advisor.c: the precision advisor: preflight and precision: auto.
 *
 * Entry points: mxp_guard_preflight, mxp_guard_auto_precision.
 *
 * Preflight: n batches forward and backward (loss scale 1) in FP32 on a
 * copy of the model's parameters, with a histogram monitor on every layer
 * output, every activation gradient (and dLoss/dprediction) and every
 * parameter gradient. One FP32 run tells exactly what any format would
 * see: the largest |value| against its maximum, and, from the exponent
 * histograms, the fraction of values below its smallest normal at any
 * power-of-two loss scale.
 *
 * Verdict per candidate (fp8, mixed_fp16, mixed_bf16; fp32 is always safe):
 *   range     every tensor stored in the candidate's activation format
 *             (every layer output but the last, which is written in FP32 for
 *             the loss) must keep at least `margin` (8 = 2^3) of headroom:
 *             absmax * margin <= format max. An activation above the
 *             format's maximum is refused outright: the DINOv3 lesson of
 *             seeds/004, "a model whose activations exceed FP16 range is
 *             never put in FP16". FP8 scales each tensor (delayed scaling),
 *             so its range check is replaced by the dynamic-range check
 *             below. Working weights must fit the weight format too.
 *   gradients with dynamic loss scaling the scaler settles near the
 *             largest power of two S <= 65536 with max|grad| * S * margin
 *             <= format max; the fraction of nonzero activation gradients
 *             with |g| * S below the format's smallest normal (they flush
 *             toward zero) must not exceed underflow_max (5%, the
 *             debugging guide's zero-gradient alert level).
 *   FP8       per-tensor scaling maps each tensor's amax to the format max;
 *             values more than max/min_normal below it underflow; same 5%.
 * Recommendation of the preflight (seeds/004 "safe by default": BF16 where
 * the hardware has it, FP32 otherwise, FP16 only when it is safe; seeds/003
 * decision tree; precision: auto then times the safe candidates and takes
 * the fastest, advisor_time.c):
 *   1. non-finite values already in FP32 -> fp32 (fix the model first);
 *   2. mixed_bf16 when safe and BF16 is native on this CPU;
 *   3. mixed_fp16 when safe and FP16 is native (AVX512_FP16);
 *   4. otherwise fp32. FP8 is always emulated on a CPU: never recommended.
 */
#include "guard/guard_internal.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PREFLIGHT_INIT_SCALE 65536.0 /* the GradScaler default the scaler starts at */

typedef struct preflight_stats {
    int L;
    const mxp_monitor *mon;
    double max_act;   /* over layer outputs stored in the activation dtype */
    int max_act_layer;
    double max_grad;  /* over activation gradients (DX incl. the loss slot) */
    double max_weight;
} preflight_stats;

/* Fraction of nonzero activation gradients below `thr` after scaling by s
 * (histogram-exact for powers of two), pooled over every DX tensor. */
static double grad_fraction_below(const preflight_stats *ps, double s, double thr) {
    double below = 0, total = 0;
    for (int l = 0; l <= ps->L; l++) {
        const int64_t *h = mxp_monitor_hist(ps->mon, l, MXP_MON_DX);
        int64_t n = 0;
        for (int e = 1; e < MXP_EXP_BINS - 1; e++) n += h[e];
        below += mxp_hist_fraction_below(h, s, thr) * (double)n;
        total += (double)n;
    }
    return total > 0 ? below / total : 0.0;
}

/* The same for one tensor scaled so that its own amax maps to `fmax`
 * (FP8 per-tensor scaling), worst over the tensors. */
static double worst_scaled_fraction(const preflight_stats *ps, mxp_monitor_tensor which,
                                    const mxp_dtype_traits *f) {
    double worst = 0;
    for (int l = 0; l <= ps->L; l++) {
        const mxp_layer_stats *ls = mxp_monitor_layer(ps->mon, l);
        const double amax = ls->t[which].absmax;
        if (!(amax > 0)) continue;
        /* the largest power of two not above fmax / amax */
        const double s = ldexp(1.0, (int)floor(log2(f->max / amax)));
        double fr = mxp_hist_fraction_below(mxp_monitor_hist(ps->mon, l, which), s,
                                            f->min_normal);
        if (fr > worst) worst = fr;
    }
    return worst;
}

static double act_fraction_below(const preflight_stats *ps, double thr) {
    double worst = 0;
    for (int l = 0; l + 1 < ps->L; l++) {
        double fr = mxp_hist_fraction_below(mxp_monitor_hist(ps->mon, l, MXP_MON_OUT), 1.0, thr);
        if (fr > worst) worst = fr;
    }
    return worst;
}

static void judge(const preflight_stats *ps, mxp_precision p, double margin, double underflow_max,
                  const mxp_cpu_features *cpu, mxp_format_verdict *v) {
    memset(v, 0, sizeof *v);
    v->evaluated = true;
    v->support = mxp_precision_support(p, cpu, NULL);
    v->act_absmax = ps->max_act;
    v->loss_scale = 1.0;
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    const mxp_dtype_traits *A = mxp_dtype_info(pol.activation);
    const mxp_dtype_traits *W = mxp_dtype_info(pol.weight);
    const bool fp8 = p == MXP_PRECISION_FP8;
    /* gradients are stored in BF16 between FP8 layers; E5M2 is an operand format */
    const mxp_dtype_traits *G = mxp_dtype_info(fp8 ? MXP_DTYPE_BF16 : pol.grad);
    size_t rp = 0;
    bool ok = true;
#define REASON(...)                                                                   \
    do {                                                                              \
        if (rp > 0 && rp + 2 < sizeof v->reason) {                                    \
            memcpy(v->reason + rp, "; ", 3);                                          \
            rp += 2;                                                                  \
        }                                                                             \
        int w_ = snprintf(v->reason + rp, sizeof v->reason - rp, __VA_ARGS__);        \
        if (w_ > 0) rp = rp + (size_t)w_ < sizeof v->reason ? rp + (size_t)w_         \
                                                            : sizeof v->reason - 1;   \
    } while (0)
    v->act_headroom = ps->max_act > 0 ? A->max / ps->max_act : INFINITY;
    if (ps->max_act >= A->max) {
        ok = false;
        REASON("activations reach %.4g (layer %d), beyond %s max %.6g: never %s (seeds/004)",
               ps->max_act, ps->max_act_layer, A->name, A->max, mxp_precision_name(p));
    } else if (v->act_headroom < margin) {
        ok = false;
        REASON("activation headroom %.3g < margin %.3g (layer %d at %.4g)", v->act_headroom,
               margin, ps->max_act_layer, ps->max_act);
    }
    if (!fp8 && ps->max_weight * margin > W->max) {
        ok = false;
        REASON("weights reach %.4g: too close to %s max", ps->max_weight, W->name);
    }
    if (fp8) {
        const mxp_dtype_traits *e4 = mxp_dtype_info(MXP_DTYPE_F8_E4M3);
        const mxp_dtype_traits *e5 = mxp_dtype_info(MXP_DTYPE_F8_E5M2);
        v->act_underflow = worst_scaled_fraction(ps, MXP_MON_OUT, e4);
        v->grad_underflow = worst_scaled_fraction(ps, MXP_MON_DX, e5);
        v->loss_scale = PREFLIGHT_INIT_SCALE;
        if (v->act_underflow > underflow_max) {
            ok = false;
            REASON("%.1f%% of activations below E4M3's range after per-tensor scaling",
                   100 * v->act_underflow);
        }
    } else {
        double s = 1.0;
        if (pol.loss_scaling && ps->max_grad > 0) {
            s = ldexp(1.0, (int)floor(log2(G->max / (ps->max_grad * margin))));
            if (s > PREFLIGHT_INIT_SCALE) s = PREFLIGHT_INIT_SCALE;
        }
        v->loss_scale = s;
        v->grad_underflow = grad_fraction_below(ps, s, G->min_normal);
        v->act_underflow = act_fraction_below(ps, A->min_normal);
        if (!pol.loss_scaling && ps->max_grad * margin > G->max) {
            ok = false;
            REASON("gradients reach %.4g: too close to %s max", ps->max_grad, G->name);
        }
    }
    if (v->grad_underflow > underflow_max) {
        ok = false;
        REASON("%.1f%% of activation gradients underflow %s at loss scale %g",
               100 * v->grad_underflow, fp8 ? "E5M2" : G->name, v->loss_scale);
    }
    if (ok && fp8)
        REASON("per-tensor scaling: %.2f%% of activations below E4M3's range, %.2f%% of "
               "gradients below E5M2's; stored tensors in BF16", 100 * v->act_underflow,
               100 * v->grad_underflow);
    else if (ok)
        REASON("headroom %.3g, gradient underflow %.2f%% at loss scale %g", v->act_headroom,
               100 * v->grad_underflow, v->loss_scale);
    if (v->act_underflow > underflow_max && !fp8)
        REASON("note: %.1f%% of activations below %s's smallest normal", 100 * v->act_underflow,
               A->name);
#undef REASON
    v->safe = ok;
}

mxp_status mxp_guard_preflight(const mxp_model *m, const mxp_batch *batches, int n,
                               double margin, double underflow_max,
                               const mxp_cpu_features *cpu, mxp_preflight_report *out,
                               mxp_error *err) {
    if (!m || !batches || n < 1 || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_guard_preflight: model, batches (n >= 1) and out are required");
    if (!(margin >= 1) || !(underflow_max >= 0))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "preflight margin=%g underflow_max=%g; accepted: margin >= 1, "
                             "underflow_max >= 0", margin, underflow_max);
    if (!cpu) cpu = mxp_cpu_features_get();
    memset(out, 0, sizeof *out);
    mxp_model_spec spec = *mxp_model_get_spec(m);
    spec.max_batch = 1;
    for (int i = 0; i < n; i++)
        if (batches[i].B > spec.max_batch) spec.max_batch = batches[i].B;
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *f32 = NULL;
    mxp_monitor *mon = NULL;
    float *w = NULL;
    mxp_status s = mxp_model_create(&spec, &pol, 0, &f32, err);
    if (s == MXP_OK) s = mxp_monitor_create(f32, true, &mon, err);
    if (s == MXP_OK) s = mxp_model_copy_params(f32, m, err);
    if (s != MXP_OK) goto done;
    mxp_monitor_set_full(mon, true);
    mxp_model_set_monitor(f32, mon);
    bool finite = true;
    for (int i = 0; i < n && s == MXP_OK; i++) {
        double loss = 0;
        mxp_nonfinite_site site;
        mxp_model_zero_grads(f32);
        s = mxp_model_step(f32, &batches[i], true, 1.0f, &loss, &site, err);
        if (s == MXP_OK && (site.found || !isfinite(loss))) finite = false;
    }
    if (s != MXP_OK) goto done;

    preflight_stats ps = {.L = spec.n_layers, .mon = mon, .max_act_layer = -1};
    for (int l = 0; l < ps.L; l++) {
        const mxp_layer_stats *ls = mxp_monitor_layer(mon, l);
        out->act_absmax[l] = ls->t[MXP_MON_OUT].absmax;
        out->grad_absmax[l] = ls->t[MXP_MON_DX].n > 0 ? ls->t[MXP_MON_DX].absmax
                                                      : ls->t[MXP_MON_DW].absmax;
        /* the last layer writes its output in FP32 for the loss */
        if (l + 1 < ps.L && ls->t[MXP_MON_OUT].absmax > ps.max_act) {
            ps.max_act = ls->t[MXP_MON_OUT].absmax;
            ps.max_act_layer = l;
        }
    }
    for (int l = 0; l <= ps.L; l++) {
        const mxp_layer_stats *ls = mxp_monitor_layer(mon, l);
        if (ls->t[MXP_MON_DX].absmax > ps.max_grad) ps.max_grad = ls->t[MXP_MON_DX].absmax;
    }
    /* the largest |weight|: one get of the parameter slab */
    const size_t P = mxp_model_num_params(f32);
    w = mxp_calloc(P ? P : 1, sizeof(float));
    if (!w) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "preflight: %zu weights", P);
        goto done;
    }
    s = mxp_model_tensor_get(f32, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, w, P * sizeof(float), err);
    if (s != MXP_OK) goto done;
    for (size_t i = 0; i < P; i++) {
        double a = fabs((double)w[i]);
        if (a > ps.max_weight) ps.max_weight = a;
    }
    out->n_batches = n;
    out->n_layers = ps.L;
    out->max_act = ps.max_act;
    out->max_act_layer = ps.max_act_layer;
    out->max_grad = ps.max_grad;

    const mxp_precision cands[] = {MXP_PRECISION_FP8, MXP_PRECISION_MIXED_FP16,
                                   MXP_PRECISION_MIXED_BF16};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        judge(&ps, cands[i], margin, underflow_max, cpu, &out->verdict[cands[i]]);
    mxp_format_verdict *v32 = &out->verdict[MXP_PRECISION_FP32];
    v32->evaluated = v32->safe = true;
    v32->support = MXP_SUPPORT_NATIVE;
    v32->act_absmax = ps.max_act;
    v32->act_headroom = ps.max_act > 0 ? mxp_dtype_info(MXP_DTYPE_F32)->max / ps.max_act
                                       : INFINITY;
    v32->loss_scale = 1.0;
    snprintf(v32->reason, sizeof v32->reason, "always safe (the reference)");

    const mxp_format_verdict *vb = &out->verdict[MXP_PRECISION_MIXED_BF16];
    const mxp_format_verdict *vh = &out->verdict[MXP_PRECISION_MIXED_FP16];
    if (!finite) {
        out->recommended = MXP_PRECISION_FP32;
        snprintf(out->why, sizeof out->why,
                 "the model already produces non-finite values in FP32: fix it first; fp32");
    } else if (vb->safe && vb->support == MXP_SUPPORT_NATIVE) {
        out->recommended = MXP_PRECISION_MIXED_BF16;
        snprintf(out->why, sizeof out->why,
                 "mixed_bf16: BF16 keeps FP32's range (activation headroom %.3g) and this CPU "
                 "computes BF16 natively (seeds/004: BF16 where the hardware has it)",
                 vb->act_headroom);
    } else if (vh->safe && vh->support == MXP_SUPPORT_NATIVE) {
        out->recommended = MXP_PRECISION_MIXED_FP16;
        snprintf(out->why, sizeof out->why,
                 "mixed_fp16: activations keep %.3g of FP16 headroom, %.2f%% of gradients "
                 "underflow at loss scale %g, and this CPU computes FP16 natively",
                 vh->act_headroom, 100 * vh->grad_underflow, vh->loss_scale);
    } else {
        out->recommended = MXP_PRECISION_FP32;
        snprintf(out->why, sizeof out->why,
                 "fp32: no safe low-precision format runs natively on this CPU (bf16 %s, %s; "
                 "fp16 %s, %s): FP32 is the safe default",
                 vb->safe ? "safe" : "unsafe", mxp_support_name(vb->support),
                 vh->safe ? "safe" : "unsafe", mxp_support_name(vh->support));
    }
done:
    mxp_free(w);
    mxp_monitor_destroy(mon);
    mxp_model_destroy(f32);
    return s;
}

mxp_status mxp_guard_auto_precision(mxp_trainer *t, const mxp_guard_config *c, const float *x,
                                    const float *y, int64_t rows, int64_t B,
                                    mxp_preflight_report *out, mxp_error *err) {
    if (!t || !c || !x || !y || B < 1 || rows < B)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_guard_auto_precision: %lld rows for batches of %lld; accepted: "
                             "rows >= B >= 1 with x and y set", (long long)rows, (long long)B);
    mxp_model *m = mxp_trainer_model(t);
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    int64_t nb = rows / B;
    if (nb > c->preflight_batches) nb = c->preflight_batches;
    if (nb > 64) nb = 64;
    mxp_batch batches[64];
    const size_t in = (size_t)sp->in_dim, od = (size_t)mxp_model_target_dim(m);
    for (int64_t i = 0; i < nb; i++)
        batches[i] = (mxp_batch){.x = x + (size_t)(i * B) * in,
                                 .y = y + (size_t)(i * B) * od,
                                 .labels = NULL,
                                 .B = B};
    mxp_preflight_report local, *rep = out ? out : &local;
    mxp_status s = mxp_guard_preflight(m, batches, (int)nb, c->rules[MXP_RULE_HEADROOM].threshold,
                                       c->rules[MXP_RULE_UNDERFLOW].threshold, NULL, rep, err);
    if (s != MXP_OK) return s;
    mxp_log(MXP_LOG_INFO, "precision auto: preflight of %lld FP32 batches: largest activation "
            "%.4g (layer %d), largest activation gradient %.4g",
            (long long)nb, rep->max_act, rep->max_act_layer, rep->max_grad);
    for (int p = 0; p < MXP_PRECISION_COUNT; p++)
        if (rep->verdict[p].evaluated)
            mxp_log(MXP_LOG_INFO, "precision auto: %-10s %-6s %-8s %s",
                    mxp_precision_name((mxp_precision)p), rep->verdict[p].safe ? "safe" : "UNSAFE",
                    mxp_support_name(rep->verdict[p].support), rep->verdict[p].reason);
    /* by measurement: the fastest safe candidate on this CPU (advisor_time.c) */
    int acc_k = mxp_model_policy(m)->fp16_accum_k;
    guard_auto_choice ch = {0};
    s = guard_auto_by_time(m, &batches[0], rep, acc_k > 0 ? acc_k : MXP_F16ACC_K_DEFAULT, &ch,
                           err);
    if (s != MXP_OK) return s;
    mxp_log(MXP_LOG_INFO, "precision auto: advice from range and underflow alone: %s", rep->why);
    mxp_log(MXP_LOG_INFO, "precision auto: %s", ch.times);
    if (ch.refused[0]) mxp_log(MXP_LOG_INFO, "precision auto: refused %s", ch.refused);
    mxp_log(MXP_LOG_INFO, "precision auto: chose %s", ch.why);
    rep->recommended = ch.mode;
    snprintf(rep->why, sizeof rep->why, "%s", ch.why);
    s = step_ctl_apply_now(t, ch.mode, STEP_SRC_ADVISOR, "precision auto", err);
    if (s != MXP_OK) return s;
    mxp_precision_policy pol = *mxp_model_policy(m);
    if (pol.fp16_accum_k == ch.fp16_accum_k) return MXP_OK;
    pol.fp16_accum_k = ch.fp16_accum_k;
    return mxp_model_set_policy(m, &pol, err);
}
