/* nn/model_layers.c: an MLP spec from a layer list (model.layers).
 *
 * Entry point: mxp_model_spec_layers.
 * Grammar (whitespace ignored, brackets optional, YAML sequences arrive
 * joined by commas):
 *   list  := '[' item (',' item)* ']' | item (',' item)*
 *   item  := 'linear:' WIDTH | 'linear' | 'relu' | 'gelu' | 'tanh' | 'layernorm'
 * The list ends with a bare 'linear' (or 'linear:K' with K the target
 * width): its width is the workload's target width (out_dim; 0 checks
 * the syntax only and accepts any last width). Every other linear
 * names its width (1 .. 2^31-1). At most MXP_MODEL_MAX_LAYERS items.
 */
#include "nn/nn_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS_ACCEPTED "linear:WIDTH, linear (last), relu, gelu, tanh, layernorm"

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
            *ls = (mxp_layer_spec){MXP_LAYER_LINEAR, out_dim};
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
            *ls = (mxp_layer_spec){MXP_LAYER_LINEAR, v};
        } else if (strcmp(item, "relu") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_RELU, 0};
        } else if (strcmp(item, "gelu") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_GELU, 0};
        } else if (strcmp(item, "tanh") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_TANH, 0};
        } else if (strcmp(item, "layernorm") == 0) {
            *ls = (mxp_layer_spec){MXP_LAYER_LAYERNORM, 0};
        } else {
            return mxp_error_set(err, MXP_ERR_CONFIG, "%s: item %d '%s' is unknown; accepted: %s",
                                 K, idx, item, LAYERS_ACCEPTED);
        }
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
