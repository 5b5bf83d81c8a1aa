/* ckpt/ckpt_config.c: the resolved config inside a checkpoint.
 *
 * Entry points: mxp_ckpt_config_text, mxp_ckpt_apply_config; internal
 * ckpt_config_to_json, ckpt_config_int.
 *
 * The config is stored as one JSON object {"dotted.key": "value text"}, one
 * member per key of the config table (src/config/keys.c) read back from the
 * resolved mxp_config through the table's storage offsets, so new keys are
 * recorded without changes here. Values are written so that
 * mxp_config_apply_override reproduces them exactly: floats with 9 (F32)
 * or 17 (F64) significant digits, strings raw, enums by their canonical
 * name. Derived keys: training.precision is the resolved mode;
 * training.loss_scale.enabled is recorded only when it was set explicitly.
 */
#include "ckpt/ckpt_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

/* Value text of key k read from c; false when the key is not recorded. */
static bool key_text(const mxp_config_key *k, const mxp_config *c, char *buf, size_t n) {
    const char *at = (const char *)c + k->offset;
    switch (k->store) {
    case MXP_STORE_BOOL: {
        bool b;
        memcpy(&b, at, sizeof b);
        snprintf(buf, n, "%s", b ? "true" : "false");
        return true;
    }
    case MXP_STORE_I32: {
        int32_t v;
        memcpy(&v, at, sizeof v);
        snprintf(buf, n, "%d", (int)v);
        return true;
    }
    case MXP_STORE_I64: {
        int64_t v;
        memcpy(&v, at, sizeof v);
        snprintf(buf, n, "%lld", (long long)v);
        return true;
    }
    case MXP_STORE_U64: {
        uint64_t v;
        memcpy(&v, at, sizeof v);
        snprintf(buf, n, "%llu", (unsigned long long)v);
        return true;
    }
    case MXP_STORE_F32: {
        float v;
        memcpy(&v, at, sizeof v);
        if (isinf(v))
            snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
        else
            snprintf(buf, n, "%.9g", (double)v);
        return true;
    }
    case MXP_STORE_F64: {
        double v;
        memcpy(&v, at, sizeof v);
        if (isinf(v))
            snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
        else
            snprintf(buf, n, "%.17g", v);
        return true;
    }
    case MXP_STORE_ENUM: {
        int v;
        memcpy(&v, at, sizeof v);
        for (int i = 0; i < k->nchoices; i++)
            if (!k->choices[i].alias && k->choices[i].value == v) {
                snprintf(buf, n, "%s", k->choices[i].name);
                return true;
            }
        return false;
    }
    case MXP_STORE_STR:
        if (!at[0]) return false; /* unset (empty default): leave it to the default */
        snprintf(buf, n, "%s", at);
        return true;
    case MXP_STORE_NONE:
        if (k->type == MXP_KEY_PRECISION) {
            snprintf(buf, n, "%s", mxp_precision_name(c->precision));
            return true;
        }
        if (strcmp(k->name, "training.loss_scale.enabled") == 0 && c->trainer.scaler_override) {
            snprintf(buf, n, "%s", c->trainer.scaler.enabled ? "true" : "false");
            return true;
        }
        return false;
    default:
        return false;
    }
}

char *ckpt_config_to_json(const mxp_config *c) {
    json_t *o = json_object();
    if (!o) return NULL;
    char buf[2 * MXP_CONFIG_STR_MAX];
    for (int i = 0; i < mxp_config_num_keys(); i++) {
        const mxp_config_key *k = mxp_config_key_at(i);
        if (key_text(k, c, buf, sizeof buf) && json_object_set_new(o, k->name, json_string(buf))) {
            json_decref(o);
            return NULL;
        }
    }
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!t) return NULL;
    char *r = mxp_strdup(t);
    free(t);
    return r;
}

const char *mxp_ckpt_config_text(const mxp_st_file *f) { return mxp_st_file_meta(f, "config"); }

bool ckpt_config_int(const mxp_st_file *f, const char *key, int64_t *out) {
    const char *text = mxp_ckpt_config_text(f);
    json_t *o = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *v = o ? json_string_value(json_object_get(o, key)) : NULL;
    char *end = NULL;
    long long x = v && *v ? strtoll(v, &end, 10) : 0;
    bool ok = v && *v && end && !*end;
    if (ok) *out = x;
    json_decref(o);
    return ok;
}

mxp_status mxp_ckpt_apply_config(const mxp_st_file *f, mxp_config_builder *b, mxp_error *err) {
    if (!f || !b) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_apply_config: NULL");
    const char *L = mxp_st_file_label(f);
    const char *text = mxp_ckpt_config_text(f);
    if (!text) return mxp_error_set(err, MXP_ERR_FORMAT, "%s: the checkpoint records no config", L);
    json_error_t je;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        if (o) json_decref(o);
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: metadata 'config' is not a JSON object", L);
    }
    mxp_status s = MXP_OK;
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        if (!json_is_string(val)) {
            s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: config value of '%.80s' is not a string", L,
                              key);
            break;
        }
        if (mxp_config_key_find(key) < 0) {
            mxp_log(MXP_LOG_WARN, "%s: config key '%s' is unknown to this mixprec; ignored", L,
                    key);
            continue;
        }
        size_t kl = strlen(key), vl = strlen(json_string_value(val));
        char *kv = mxp_calloc(kl + vl + 2, 1);
        if (!kv) {
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "config");
            break;
        }
        memcpy(kv, key, kl);
        kv[kl] = '=';
        memcpy(kv + kl + 1, json_string_value(val), vl);
        mxp_error sub = {0};
        if (mxp_config_apply_override(b, kv, &sub) != MXP_OK)
            s = mxp_error_set(err, MXP_ERR_CONFIG, "%s: stored config: %s", L, sub.msg);
        mxp_free(kv);
        if (s != MXP_OK) break;
    }
    json_decref(o);
    return s;
}
