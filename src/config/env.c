/* src/config/env.c: configuration from environment variables (seeds/001).
 *
 *   ENABLE_FP16_TRAINING=true   training.mixed_precision.enabled=true and
 *                               training.mixed_precision.dtype=float16
 *   ENABLE_FP16_TRAINING=false  operator kill switch: resolve() forces FP32
 *   MIXPREC_FORCE_FP32=1|true   kill switch as well (0|false: no effect)
 *   FP16_LOSS_SCALE             training.loss_scale.init
 *   FP16_GROWTH_FACTOR          training.loss_scale.growth_factor
 *   FP16_BACKOFF_FACTOR         training.loss_scale.backoff_factor
 *   FP16_GROWTH_INTERVAL        training.loss_scale.growth_interval
 * Empty values count as unset. Boolean words: true/false/1/0/yes/no/on/off,
 * any case. Entry point: mxp_config_apply_env.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

static const struct {
    const char *var;
    const char *key;
} kEnvKeys[] = {
    {"FP16_LOSS_SCALE", "training.loss_scale.init"},
    {"FP16_GROWTH_FACTOR", "training.loss_scale.growth_factor"},
    {"FP16_BACKOFF_FACTOR", "training.loss_scale.backoff_factor"},
    {"FP16_GROWTH_INTERVAL", "training.loss_scale.growth_interval"},
};

static const char *libc_getenv(const char *name) { return getenv(name); }

/* Set key `name` of the staging values to text from variable `var`. */
static mxp_status set_from_env(mxp_key_value *vals, const char *name, const char *text,
                               const char *var, mxp_config_source src, mxp_error *err) {
    int idx = mxp_config_key_find(name);
    const mxp_config_key *k = mxp_config_key_at(idx);
    char why[320], ex[80];
    mxp_key_value v = vals[idx];
    if (!mxp_config_value_parse(k, text, &v, why, sizeof why)) {
        mxp_config_excerpt(text, ex, sizeof ex);
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s=\"%s\": %s (sets %s)", var, ex, why, name);
    }
    v.source = src;
    v.origin = var;
    v.line = 0;
    vals[idx] = v;
    return MXP_OK;
}

/* A boolean variable: *present false when unset or empty. */
static mxp_status env_bool(const char *(*get)(const char *), const char *var, bool *present,
                           bool *value, mxp_error *err) {
    const char *s = get(var);
    *present = false;
    if (!s || !*s) return MXP_OK;
    if (!mxp_config_parse_bool(s, value)) {
        char ex[80];
        mxp_config_excerpt(s, ex, sizeof ex);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "%s=\"%s\": must be true or false (accepted, any case: "
                             "true|false|1|0|yes|no|on|off)",
                             var, ex);
    }
    *present = true;
    return MXP_OK;
}

mxp_status mxp_config_apply_env(mxp_config_builder *b, const char *(*getenv_fn)(const char *name),
                                mxp_error *err) {
    if (!b) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "config env: builder is NULL");
    const char *(*get)(const char *) = getenv_fn ? getenv_fn : libc_getenv;
    mxp_key_value *stage = mxp_config_stage_begin(b);
    if (!stage) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "config env: out of memory");

    mxp_status st = MXP_OK;
    bool kill = false, present, on;
    const char *kill_var = NULL;
    char kill_text[32] = "";

    st = env_bool(get, "ENABLE_FP16_TRAINING", &present, &on, err);
    if (st == MXP_OK && present) {
        if (on) {
            st = set_from_env(stage, "training.mixed_precision.enabled", "true",
                              "ENABLE_FP16_TRAINING", MXP_SRC_ENV, err);
            if (st == MXP_OK)
                st = set_from_env(stage, "training.mixed_precision.dtype", "float16",
                                  "ENABLE_FP16_TRAINING", MXP_SRC_ENV, err);
        } else {
            kill = true;
            kill_var = "ENABLE_FP16_TRAINING";
            mxp_config_excerpt(get(kill_var), kill_text, sizeof kill_text);
        }
    }
    for (size_t i = 0; st == MXP_OK && i < sizeof(kEnvKeys) / sizeof(kEnvKeys[0]); i++) {
        const char *s = get(kEnvKeys[i].var);
        if (s && *s) st = set_from_env(stage, kEnvKeys[i].key, s, kEnvKeys[i].var, MXP_SRC_ENV, err);
    }
    if (st == MXP_OK) st = env_bool(get, "MIXPREC_FORCE_FP32", &present, &on, err);
    if (st == MXP_OK && present && on && !kill) {
        kill = true;
        kill_var = "MIXPREC_FORCE_FP32";
        mxp_config_excerpt(get(kill_var), kill_text, sizeof kill_text);
    }
    /* The switch leaves the keys as configured: resolve() overrides the
     * precision they select, and print shows both. */
    mxp_config_stage_end(b, stage, st == MXP_OK);
    if (st == MXP_OK && kill && !b->kill_switch) {
        b->kill_switch = true;
        b->kill_var = kill_var;
        memcpy(b->kill_text, kill_text, sizeof b->kill_text);
    }
    return st;
}
