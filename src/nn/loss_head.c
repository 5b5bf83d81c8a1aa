/* nn/loss_head.c: per-target loss weights and the termination flag of a
 * regression head (spec.termination, spec.target_weights; model.h).
 *
 * Entry points (nn_internal.h): nn_head_validate, nn_head_install,
 * nn_head_free, nn_head_on, nn_head_loss; public
 * mxp_model_target_weight and mxp_model_target_weights_parse (model.h).
 * The loss itself is the kernel table's head_loss (kernels.h, formulas in
 * kernels/generic/loss_head.c), in FP32 like every loss. Without
 * termination and with every weight 1 none of this runs: the MSE and
 * Gaussian kernels compute the loss as before, bit for bit.
 * The weights live in backend memory (m->tw, copied once at create inside
 * its bracket), so a device backend's loss kernel reads them where it runs.
 */
#include "backend/devmem.h"
#include "nn/nn_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Target columns of spec s (its last layer's units), -1 when they do not
 * fit the head. */
static int64_t spec_targets(const mxp_model_spec *s) {
    const int64_t u = s->layers[s->n_layers - 1].units, T = s->termination ? 1 : 0;
    if (s->loss == MXP_LOSS_GAUSSIAN) return (u - T) >= 2 && (u - T) % 2 == 0 ? (u - T) / 2 + T : -1;
    return u - T >= 1 ? u : -1;
}

mxp_status nn_head_validate(const mxp_model_spec *s, mxp_error *err) {
    if (s->termination != 0 && s->termination != 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.termination=%d; accepted: 0 (none) or 1 (a termination flag "
                             "column trained with BCE)", s->termination);
    const bool head = s->termination || s->target_weights;
    if (!head) return MXP_OK;
    const mxp_layer_spec *last = &s->layers[s->n_layers - 1];
    if ((s->loss != MXP_LOSS_MSE && s->loss != MXP_LOSS_GAUSSIAN) ||
        last->kind != MXP_LAYER_LINEAR)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.termination / spec.target_weights with loss %s and a last %s "
                             "layer; accepted: loss mse or gaussian with a last linear layer",
                             mxp_loss_kind_name(s->loss), mxp_layer_kind_name(last->kind));
    const int64_t C = spec_targets(s);
    if (C < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec: loss %s with termination=%d needs a last linear layer of %s "
                             "units (K >= 1 regression targets); got %lld",
                             mxp_loss_kind_name(s->loss), s->termination,
                             s->loss == MXP_LOSS_GAUSSIAN ? (s->termination ? "2K + 1" : "2K")
                                                          : (s->termination ? "K + 1" : "K"),
                             (long long)last->units);
    if (!s->target_weights) return MXP_OK;
    bool any = false;
    for (int64_t c = 0; c < C; c++) {
        const float w = s->target_weights[c];
        if (!(isfinite(w) && w >= 0.0f))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.target_weights[%lld]=%g; accepted: %lld finite numbers "
                                 ">= 0, not all 0", (long long)c, (double)w, (long long)C);
        any = any || w > 0.0f;
    }
    if (!any)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "spec.target_weights: all %lld weights are 0; accepted: finite "
                             "numbers >= 0, not all 0", (long long)C);
    return MXP_OK;
}

mxp_status nn_head_install(mxp_model *m, mxp_error *err) {
    m->tw = NULL;
    m->tw_host = NULL;
    const float *w = m->spec.target_weights;
    m->spec.target_weights = NULL;
    if (!w) return MXP_OK;
    const int64_t C = mxp_model_target_dim(m);
    bool ones = true;
    for (int64_t c = 0; c < C; c++) ones = ones && w[c] == 1.0f;
    if (ones) return MXP_OK; /* every weight 1: the plain losses */
    m->tw_host = mxp_calloc((size_t)C, sizeof(float));
    m->tw = mxp_dev_calloc((size_t)C, sizeof(float));
    if (!m->tw_host || !m->tw)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "target weights [%lld]", (long long)C);
    memcpy(m->tw_host, w, (size_t)C * sizeof(float));
    memcpy(m->tw, w, (size_t)C * sizeof(float)); /* inside create's backend bracket */
    m->spec.target_weights = m->tw_host;
    return MXP_OK;
}

void nn_head_free(mxp_model *m) {
    mxp_dev_free(m->tw);
    mxp_free(m->tw_host);
    m->tw = m->tw_host = NULL;
}

bool nn_head_on(const mxp_model *m) { return m->spec.termination || m->tw; }

void nn_head_loss(mxp_model *m, const float *pred, const float *y, int64_t B, float *dpred32,
                  float loss_scale, double *loss) {
    const int64_t T = m->spec.termination ? 1 : 0;
    const bool gauss = m->spec.loss == MXP_LOSS_GAUSSIAN;
    const int64_t K = mxp_model_target_dim(m) - T;
    const float *bounds = gauss ? nn_gauss_bounds_f32(m) : NULL;
    float *dbounds = NULL;
    if (dpred32 && gauss) {
        dbounds = m->grads + nn_gauss_bounds_off(m);
        /* the first backward after a discard writes every gradient */
        if (nn_loss_grad_writes(m)) memset(dbounds, 0, 2 * (size_t)K * sizeof(float));
    }
    m->k->head_loss(dpred32, dbounds, pred, y, bounds, m->tw, B, K, T, loss_scale, loss);
}

float mxp_model_target_weight(const mxp_model *m, int64_t c) {
    if (!m || c < 0 || c >= mxp_model_target_dim(m)) return NAN;
    return m->tw_host ? m->tw_host[c] : 1.0f;
}

#define TW_KEY "model.target_weights"
#define TW_FORM "a list [w0, w1, ...] of finite numbers >= 0, not all 0"

mxp_status mxp_model_target_weights_parse(const char *text, int64_t n, float *out,
                                          int64_t *count, const char *what_n, mxp_error *err) {
    if (!text)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL text; accepted: " TW_FORM,
                             TW_KEY);
    size_t L = strlen(text);
    while (L && isspace((unsigned char)text[L - 1])) L--;
    while (*text && isspace((unsigned char)*text)) text++, L--;
    char body[1024];
    if (L >= sizeof body)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s: the list is longer than %zu characters",
                             TW_KEY, sizeof body - 1);
    memcpy(body, text, L);
    body[L] = '\0';
    char *s = body;
    if (L && s[0] == '[') {
        if (s[L - 1] != ']')
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s=%.80s: '[' without a closing ']'; "
                                 "accepted: " TW_FORM, TW_KEY, text);
        s[L - 1] = '\0';
        s++;
    }
    int64_t k = 0;
    bool any = false;
    char *p = s;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0' && k == 0)
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s: the list is empty; accepted: " TW_FORM,
                                 TW_KEY);
        char *end = NULL;
        errno = 0;
        const double v = strtod(p, &end);
        char *q = end;
        while (q && isspace((unsigned char)*q)) q++;
        if (end == p || errno == ERANGE || (*q != ',' && *q != '\0'))
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "%s: item %lld '%.*s' is not a number; accepted: " TW_FORM,
                                 TW_KEY, (long long)k, (int)strcspn(p, ","), p);
        if (!(isfinite(v) && v >= 0.0 && v <= 3.4e38))
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "%s: item %lld is %g; accepted: " TW_FORM, TW_KEY,
                                 (long long)k, v);
        if (out && n > 0 && k < n) out[k] = (float)v;
        any = any || (float)v > 0.0f;
        k++;
        if (*q == '\0') break;
        p = q + 1;
    }
    if (count) *count = k;
    if (n > 0 && k != n)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: %lld weights; accepted: exactly %lld, one per target column%s%s%s",
                             TW_KEY, (long long)k, (long long)n, what_n ? " (" : "",
                             what_n ? what_n : "", what_n ? ")" : "");
    if (!any)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s: every weight is 0; accepted: " TW_FORM,
                             TW_KEY);
    return MXP_OK;
}
