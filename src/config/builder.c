/* src/config/builder.c: the config builder (defaults + provenance per key),
 * all-or-nothing staging for the apply_* calls, and command-line
 * `dotted.key=value` overrides.
 *
 * Entry points: mxp_config_builder_create/destroy, mxp_config_apply_override,
 * mxp_config_key_value; internal mxp_config_stage_begin/end,
 * mxp_config_intern_path, mxp_config_unknown_key_text.
 * Precedence is the order of the calls (later wins): see config.h.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

mxp_status mxp_config_builder_create(mxp_config_builder **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "config builder: out is NULL");
    *out = NULL;
    mxp_config_builder *b = mxp_calloc(1, sizeof *b);
    int n = mxp_config_num_keys();
    mxp_key_value *vals = mxp_calloc((size_t)n, sizeof *vals);
    if (!b || !vals) {
        mxp_free(b);
        mxp_free(vals);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "config builder: out of memory");
    }
    b->n = n;
    b->vals = vals;
    for (int i = 0; i < n; i++) mxp_config_value_default(mxp_config_key_at(i), &vals[i]);
    *out = b;
    return MXP_OK;
}

void mxp_config_builder_destroy(mxp_config_builder *b) {
    if (!b) return;
    for (mxp_config_path *p = b->paths, *next; p; p = next) {
        next = p->next;
        mxp_free(p->path);
        mxp_free(p);
    }
    mxp_free(b->vals);
    mxp_free(b);
}

mxp_key_value *mxp_config_stage_begin(const mxp_config_builder *b) {
    mxp_key_value *s = mxp_calloc((size_t)b->n, sizeof *s);
    if (s) memcpy(s, b->vals, (size_t)b->n * sizeof *s);
    return s;
}

void mxp_config_stage_end(mxp_config_builder *b, mxp_key_value *stage, bool ok) {
    if (ok) memcpy(b->vals, stage, (size_t)b->n * sizeof *stage);
    mxp_free(stage);
}

const char *mxp_config_intern_path(mxp_config_builder *b, const char *path) {
    for (mxp_config_path *p = b->paths; p; p = p->next)
        if (strcmp(p->path, path) == 0) return p->path;
    mxp_config_path *node = mxp_calloc(1, sizeof *node);
    char *copy = mxp_strdup(path);
    if (!node || !copy) {
        mxp_free(node);
        mxp_free(copy);
        return NULL;
    }
    node->path = copy;
    node->next = b->paths;
    b->paths = node;
    return copy;
}

void mxp_config_unknown_key_text(const char *name, char *buf, size_t n) {
    char ex[80];
    mxp_config_excerpt(name, ex, sizeof ex);
    const char *near = mxp_config_key_suggest(name);
    if (near)
        snprintf(buf, n, "unknown key '%s' (did you mean '%s'?)", ex, near);
    else
        snprintf(buf, n, "unknown key '%s'", ex);
}

/* Apply one `key=value`; the key is everything before the first '='. */
mxp_status mxp_config_apply_override(mxp_config_builder *b, const char *kv, mxp_error *err) {
    if (!b || !kv)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "config override: builder or text is NULL");
    char ex[80], key[128], why[320];
    const char *eq = strchr(kv, '=');
    mxp_config_excerpt(kv, ex, sizeof ex);
    if (!eq || eq == kv)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "override '%s': expected dotted.key=value "
                             "(e.g. training.mixed_precision.enabled=true)",
                             ex);
    size_t klen = (size_t)(eq - kv);
    if (klen >= sizeof key) {
        char name[sizeof key];
        snprintf(name, sizeof name, "%.*s", (int)(sizeof key - 1), kv);
        mxp_config_excerpt(name, ex, sizeof ex);
        return mxp_error_set(err, MXP_ERR_CONFIG, "unknown key '%s'", ex);
    }
    memcpy(key, kv, klen);
    key[klen] = '\0';
    const char *text = eq + 1;
    int idx = mxp_config_key_find(key);
    if (idx < 0) {
        mxp_config_unknown_key_text(key, why, sizeof why);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s", why);
    }
    const mxp_config_key *k = mxp_config_key_at(idx);
    mxp_key_value v = b->vals[idx];
    if (!mxp_config_value_parse(k, text, &v, why, sizeof why)) {
        mxp_config_excerpt(text, ex, sizeof ex);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s=%s: %s", key, ex, why);
    }
    v.source = MXP_SRC_CLI;
    v.origin = NULL;
    v.line = 0;
    b->vals[idx] = v;
    return MXP_OK;
}

mxp_config_source mxp_config_key_value(const mxp_config_builder *b, int i, char *buf,
                                       size_t n) {
    const mxp_config_key *k = mxp_config_key_at(i);
    if (!b || !k) {
        if (buf && n) buf[0] = '\0';
        return MXP_SRC_COUNT;
    }
    if (k->type == MXP_KEY_PRECISION) {
        mxp_precision_resolution r;
        mxp_config_resolve_precision(b, &r);
        if (buf && n) snprintf(buf, n, "%s", mxp_precision_name(r.mode));
        return r.source;
    }
    if (k->type == MXP_KEY_BOOL && k->store == MXP_STORE_NONE &&
        b->vals[i].source == MXP_SRC_DEFAULT) {
        /* training.loss_scale.enabled unset: the resolved mode's default. */
        mxp_precision_resolution r;
        mxp_config_resolve_precision(b, &r);
        if (buf && n)
            snprintf(buf, n, "%s", mxp_config_default_loss_scaling(r.mode) ? "true" : "false");
        return MXP_SRC_DEFAULT;
    }
    if (buf && n) mxp_config_value_format(k, &b->vals[i], buf, n);
    return b->vals[i].source;
}
