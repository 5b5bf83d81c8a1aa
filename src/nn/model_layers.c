/* nn/model_layers.c: an MLP spec from a layer list (model.layers).
 *
 * Entry point: mxp_model_spec_layers.
 * Grammar (whitespace ignored, brackets optional, YAML sequences arrive
 * joined by commas):
 *   list  := '[' item (',' item)* ']' | item (',' item)*
 *   item  := 'linear:' WIDTH | 'linear' | 'relu' | 'gelu' | 'tanh' | 'layernorm'
 *          | 'residual:' N | 'dropout:' P
 * The list ends with a bare 'linear' (or 'linear:K' with K the target
 * width): its width is the workload's target width (out_dim; 0 checks
 * the syntax only and accepts any last width). Every other linear
 * names its width (1 .. 2^31-1). At most MXP_MODEL_MAX_LAYERS items.
 * residual:N makes the N items before it a residual block (y = x + f(x),
 * x their input): N in 1 .. the items before it, no residual among them,
 * and f's output as wide as x. dropout:P takes P in [0, 1) (a decimal).
 * Every item is one layer: item i is layer i (layers.<i>.weight, the
 * indices of training.precision_fp32_layers, fault.layer, statistics).
 */
#include "nn/nn_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS_ACCEPTED \
    "linear:WIDTH, linear (last), relu, gelu, tanh, layernorm, residual:N, dropout:P"

/* The integer of item text w (digits only) in lo..hi into *v; false else. */
static bool parse_count(const char *w, long long lo, long long hi, long long *v) {
    char *end = NULL;
    errno = 0;
    *v = isdigit((unsigned char)*w) ? strtoll(w, &end, 10) : -1;
    return *v >= lo && *v <= hi && !errno && end && !*end;
}

/* Next item of s (from *pos) into buf, trimmed; false at the end. */
static bool next_item(const char *s, size_t *pos, char *buf, size_t n, bool *too_long) {
    size_t i = *pos;
    if (s[i] == '\0') return false;
    size_t b = i;
    while (s[i] && s[i] != ',') i++;
    size_t e = i;
    *pos = s[i] ? i + 1 : i;
    while (b < e && isspace((unsigned char)s[b])) b++;
    while (e > b && isspace((unsigned char)s[e - 1])) e--;
    *too_long = e - b >= n;
    size_t len = *too_long ? n - 1 : e - b;
    memcpy(buf, s + b, len);
    buf[len] = '\0';
    return true;
}

mxp_status mxp_model_spec_layers(const char *list, int64_t in_dim, int64_t out_dim,
                                 mxp_loss_kind loss, int64_t max_batch, mxp_model_spec *out,
                                 mxp_error *err) {
    const char *K = "model.layers";
    if (!list || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_model_spec_layers: NULL argument");
    /* strip surrounding whitespace and one pair of brackets */
    char body[1024];
    size_t L = strlen(list);
    while (L && isspace((unsigned char)list[L - 1])) L--;
    while (*list && isspace((unsigned char)*list)) list++, L--;
    if (L >= sizeof body)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s: the list is longer than %zu characters", K,
                             sizeof body - 1);
    memcpy(body, list, L);
    body[L] = '\0';
    char *s = body;
    if (L && s[0] == '[') {
        if (s[L - 1] != ']')
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s=%.80s: '[' without a closing ']'", K,
                                 list);
        s[L - 1] = '\0';
        s++;
    }
    mxp_model_spec spec = nn_spec_empty(in_dim, loss, max_batch);
    size_t pos = 0;
    char item[64];
    bool too_long, last_bare = false;
    int idx = 0;
    int64_t in_w[MXP_MODEL_MAX_LAYERS + 1]; /* input width of each item; -1 unknown */
    in_w[0] = in_dim > 0 ? in_dim : -1;
    while (next_item(s, &pos, item, sizeof item, &too_long)) {
        if (too_long || item[0] == '\0')
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "%s: item %d is %s; accepted: %s", K, idx,
                                 too_long ? "too long" : "empty", LAYERS_ACCEPTED);
        if (spec.n_layers >= MXP_MODEL_MAX_LAYERS)
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s: more than %d layers", K,
                                 MXP_MODEL_MAX_LAYERS);
        if (last_bare)
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "%s: item %d is a 'linear' without a width before the end; only "
                                 "the last layer takes the target width (write linear:WIDTH)",
                                 K, idx - 1);
        mxp_layer_spec *ls = &spec.layers[spec.n_layers];
        if (strcmp(item, "linear") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_LINEAR, out_dim, 0.0};
            last_bare = true;
        } else if (strncmp(item, "linear:", 7) == 0) {
            const char *w = item + 7;
            char *end = NULL;
            errno = 0;
            long long v = isdigit((unsigned char)*w) ? strtoll(w, &end, 10) : -1;
            if (v < 1 || v > INT32_MAX || errno || !end || *end)
                return mxp_error_set(err, MXP_ERR_CONFIG,
                                     "%s: item %d '%s': the width must be an integer in 1..%d", K,
                                     idx, item, INT32_MAX);
            *ls = (mxp_layer_spec){MXP_LAYER_LINEAR, v, 0.0};
        } else if (strcmp(item, "relu") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_RELU, 0, 0.0};
        } else if (strcmp(item, "gelu") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_GELU, 0, 0.0};
        } else if (strcmp(item, "tanh") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_TANH, 0, 0.0};
        } else if (strcmp(item, "layernorm") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_LAYERNORM, 0, 0.0};
        } else if (strncmp(item, "residual:", 9) == 0) {
            long long n;
            if (idx == 0)
                return mxp_error_set(err, MXP_ERR_CONFIG,
                                     "%s: item 0 '%s' has no items before it to wrap; accepted: "
                                     "residual:N after the N items of its block",
                                     K, item);
            if (!parse_count(item + 9, 1, idx, &n))
                return mxp_error_set(err, MXP_ERR_CONFIG,
                                     "%s: item %d '%s': N (the items before it that form the "
                                     "block) must be an integer in 1..%d",
                                     K, idx, item, idx);
            for (int j = idx - (int)n; j < idx; j++)
                if (spec.layers[j].kind == MXP_LAYER_RESIDUAL)
                    return mxp_error_set(err, MXP_ERR_CONFIG,
                                         "%s: item %d '%s' wraps items %d..%d, among them the "
                                         "residual item %d; accepted: blocks that do not nest "
                                         "or overlap",
                                         K, idx, item, idx - (int)n, idx - 1, j);
            const int64_t a = in_w[idx - n], b = in_w[idx];
            if (a > 0 && b > 0 && a != b)
                return mxp_error_set(err, MXP_ERR_CONFIG,
                                     "%s: item %d '%s': the block (items %d..%d) takes %lld "
                                     "features and gives %lld; a residual block needs equal "
                                     "widths (its last linear as wide as its input)",
                                     K, idx, item, idx - (int)n, idx - 1, (long long)a,
                                     (long long)b);
            *ls = (mxp_layer_spec){MXP_LAYER_RESIDUAL, n, 0.0};
        } else if (strncmp(item, "dropout:", 8) == 0) {
            const char *w = item + 8;
            char *end = NULL;
            errno = 0;
            double p = (isdigit((unsigned char)*w) || *w == '.') ? strtod(w, &end) : -1.0;
            if (!(p >= 0.0 && p < 1.0) || errno || !end || *end)
                return mxp_error_set(err, MXP_ERR_CONFIG,
                                     "%s: item %d '%s': the drop probability P must be a "
                                     "number with 0 <= P < 1 (dropout:0.1)",
                                     K, idx, item);
            *ls = (mxp_layer_spec){MXP_LAYER_DROPOUT, 0, p};
        } else {
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s: item %d '%s' is unknown; accepted: %s",
                                 K, idx, item, LAYERS_ACCEPTED);
        }
        in_w[idx + 1] = ls->kind != MXP_LAYER_LINEAR ? in_w[idx]
                        : ls->units > 0                ? ls->units
                                                       : -1;
        spec.n_layers++;
        idx++;
    }
    if (spec.n_layers == 0)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s: the list is empty; accepted: %s, ending "
                             "with linear", K, LAYERS_ACCEPTED);
    mxp_layer_spec *last = &spec.layers[spec.n_layers - 1];
    if (last->kind != MXP_LAYER_LINEAR)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: the list ends with '%s'; it must end with 'linear' (the output "
                             "layer, whose width is the target width)",
                             K, mxp_layer_kind_name(last->kind));
    if (out_dim > 0 && last->units != out_dim)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s: the last layer is linear:%lld, the target width is %lld (write "
                             "a bare 'linear' last)",
                             K, (long long)last->units, (long long)out_dim);
    *out = spec;
    return MXP_OK;
}
