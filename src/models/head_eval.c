/* models/head_eval.c: held-out evaluation of a regression model (the world
 * model and the regressor), deterministic or Gaussian head.
 *
 * Entry point: ud_eval_regression (user_data.h). The deterministic head's
 * loss is the model's own (mxp_model_step forward: MSE over standardised
 * targets, bit for bit what it always reported). The Gaussian head reports
 * its NLL as mbrl-lib's gaussian_nll computes it (mean over rows and
 * targets of (mean - y)^2 exp(-lv) + lv, lv the bounded log-variance;
 * without the training loss's bound penalty 0.01 (sum max_logvar - sum
 * min_logvar), which does not depend on the data) and the MSE of its mean,
 * both summed in double from mxp_model_predict's FP32 outputs. An ensemble
 * reports the mean of its elite members' losses (NLL or MSE, from their
 * predictions; all members unless model.elites says otherwise), the MSE of
 * the elites' mean prediction and every member's own loss.
 * With a termination flag or per-target weights (ud_eval_head) every head
 * reports the training loss's formula from the predictions (over the
 * elites, every member's own in member_loss), the flag's BCE and the
 * termination accuracy.
 */
#include "models/user_data.h"

#include <math.h>

/* An ensemble of E members (pred [E, mb, out]): the loss is the mean over
 * the elite members (mxp_model_elites; all E by default) of each member's
 * loss (its NLL without the penalty, or its MSE), the MSE that of the
 * elites' mean prediction; every member's own loss (elite or not) goes
 * into out->member_loss. With all members elite the sums run in the order
 * they always did (the figures are bit for bit those of before elites). */
static mxp_status eval_ensemble(mxp_model *m, const float *x, const float *y, int64_t n,
                                int64_t mb, float *pred, mxp_run_eval *out, mxp_error *err) {
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    const int E = mxp_model_ensemble(m);
    const uint64_t el = mxp_model_elites(m);
    const int64_t D = sp->in_dim, K = mxp_model_target_dim(m), O = mxp_model_out_dim(m);
    const bool gauss = sp->loss == MXP_LOSS_GAUSSIAN;
    int nE = 0;
    for (int e = 0; e < E; e++) nE += (int)(el >> e & 1u);
    double total = 0.0, se = 0.0, mtot[MXP_MODEL_MAX_ENSEMBLE] = {0};
    for (int64_t i = 0; i < n; i += mb) {
        const int64_t B = n - i < mb ? n - i : mb;
        mxp_status s = mxp_model_predict(m, x + i * D, B, pred, err);
        if (s != MXP_OK) return s;
        for (int64_t b = 0; b < B; b++) {
            const float *t = y + (i + b) * K;
            double row = 0.0, rse = 0.0, mrow[MXP_MODEL_MAX_ENSEMBLE] = {0};
            for (int64_t j = 0; j < K; j++) {
                double mean = 0.0;
                for (int e = 0; e < E; e++) {
                    const float *o = pred + ((size_t)e * (size_t)B + (size_t)b) * (size_t)O;
                    const double d = (double)o[j] - (double)t[j];
                    const double term =
                        gauss ? d * d * exp(-(double)o[K + j]) + (double)o[K + j] : d * d;
                    mrow[e] += term;
                    if (!(el >> e & 1u)) continue;
                    row += term;
                    mean += (double)o[j];
                }
                const double d = mean / nE - (double)t[j];
                rse += d * d;
            }
            total += row / ((double)K * nE);
            se += rse / (double)K;
            for (int e = 0; e < E; e++) mtot[e] += mrow[e] / (double)K;
        }
    }
    out->loss = n ? total / (double)n : NAN;
    out->mse = n ? se / (double)n : NAN;
    out->members = E;
    out->elites = el;
    for (int e = 0; e < E; e++) out->member_loss[e] = n ? mtot[e] / (double)n : NAN;
    return MXP_OK;
}

mxp_status ud_eval_regression(mxp_model *m, const float *x, const float *y, int64_t n,
                              int64_t mb, float *pred, mxp_run_eval *out, mxp_error *err) {
    double *loss = &out->loss, *mse = &out->mse;
    for (int e = 0; e < MXP_MODEL_MAX_ENSEMBLE; e++) out->member_loss[e] = NAN;
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    const int64_t D = sp->in_dim, K = mxp_model_target_dim(m);
    const bool gauss = sp->loss == MXP_LOSS_GAUSSIAN;
    if (mb > sp->max_batch) mb = sp->max_batch;
    if (mxp_model_ensemble(m) > 1) return eval_ensemble(m, x, y, n, mb, pred, out, err);
    double total = 0.0, se = 0.0;
    for (int64_t i = 0; i < n; i += mb) {
        const int64_t B = n - i < mb ? n - i : mb;
        mxp_status s;
        if (!gauss) {
            mxp_batch bt = {.x = x + i * D, .y = y + i * K, .labels = NULL, .B = B};
            double l = 0.0;
            if ((s = mxp_model_step(m, &bt, false, 1.0f, &l, NULL, err)) != MXP_OK) return s;
            total += l * (double)B;
            continue;
        }
        if ((s = mxp_model_predict(m, x + i * D, B, pred, err)) != MXP_OK) return s;
        for (int64_t b = 0; b < B; b++) {
            const float *mu = pred + b * 2 * K, *lv = mu + K, *t = y + (i + b) * K;
            double row = 0.0, rse = 0.0;
            for (int64_t j = 0; j < K; j++) {
                const double d = (double)mu[j] - (double)t[j];
                row += d * d * exp(-(double)lv[j]) + (double)lv[j];
                rse += d * d;
            }
            total += row / (double)K;
            se += rse / (double)K;
        }
    }
    *loss = n ? total / (double)n : NAN;
    *mse = n ? (gauss ? se / (double)n : *loss) : NAN;
    return MXP_OK;
}

/* BCE-with-logits of logit z against flag t, in double (PyTorch's form). */
static double bce_logit(double z, double t) {
    return fmax(z, 0.0) - z * t + log1p(exp(-fabs(z)));
}

mxp_status ud_eval_head(mxp_model *m, const float *x, const float *y, int64_t n, int64_t mb,
                        float *pred, mxp_run_eval *out, mxp_error *err) {
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    const int E = mxp_model_ensemble(m);
    const uint64_t el = E > 1 ? mxp_model_elites(m) : 1u;
    const int64_t D = sp->in_dim, C = mxp_model_target_dim(m), O = mxp_model_out_dim(m);
    const int64_t T = sp->termination ? 1 : 0, K = C - T;
    const bool gauss = sp->loss == MXP_LOSS_GAUSSIAN;
    int nE = 0;
    for (int e = 0; e < E; e++) nE += (int)(el >> e & 1u);
    for (int e = 0; e < MXP_MODEL_MAX_ENSEMBLE; e++) out->member_loss[e] = NAN;
    if (mb > sp->max_batch) mb = sp->max_batch;
    double total = 0.0, se = 0.0, bce = 0.0, mtot[MXP_MODEL_MAX_ENSEMBLE] = {0};
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i += mb) {
        const int64_t B = n - i < mb ? n - i : mb;
        mxp_status s = mxp_model_predict(m, x + i * D, B, pred, err);
        if (s != MXP_OK) return s;
        for (int64_t b = 0; b < B; b++) {
            const float *t = y + (i + b) * C;
            double row = 0.0, rse = 0.0, prob = 0.0, mrow[MXP_MODEL_MAX_ENSEMBLE] = {0};
            for (int64_t j = 0; j < K; j++) {
                const double w = (double)mxp_model_target_weight(m, j);
                double mean = 0.0;
                for (int e = 0; e < E; e++) {
                    const float *o = pred + ((size_t)e * (size_t)B + (size_t)b) * (size_t)O;
                    const double d = (double)o[j] - (double)t[j];
                    const double term =
                        w * (gauss ? d * d * exp(-(double)o[K + j]) + (double)o[K + j] : d * d);
                    mrow[e] += term;
                    if (!(el >> e & 1u)) continue;
                    row += term;
                    mean += (double)o[j];
                }
                const double d = mean / nE - (double)t[j];
                rse += d * d;
            }
            if (T) {
                const double w = (double)mxp_model_target_weight(m, K);
                for (int e = 0; e < E; e++) {
                    const double z =
                        (double)pred[((size_t)e * (size_t)B + (size_t)b) * (size_t)O + (size_t)O - 1];
                    const double l = bce_logit(z, (double)t[K]);
                    mrow[e] += w * l;
                    if (!(el >> e & 1u)) continue;
                    row += w * l;
                    bce += l / nE;
                    prob += (z >= 0.0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z))) / nE;
                }
                correct += (prob > 0.5) == (t[K] != 0.0f);
            }
            total += row / ((double)C * nE);
            se += rse / (double)K;
            for (int e = 0; e < E; e++) mtot[e] += mrow[e] / (double)C;
        }
    }
    out->loss = n ? total / (double)n : NAN;
    out->mse = n ? se / (double)n : NAN;
    if (E > 1) {
        out->members = E;
        out->elites = el;
        for (int e = 0; e < E; e++) out->member_loss[e] = n ? mtot[e] / (double)n : NAN;
    }
    if (T) {
        out->bce = n ? bce / (double)n : NAN;
        out->accuracy = n ? (double)correct / (double)n : NAN;
    }
    return MXP_OK;
}
