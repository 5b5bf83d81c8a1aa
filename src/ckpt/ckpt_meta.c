/* ckpt/ckpt_meta.c: the checkpoint's __metadata__ (encode and decode with
 * validation).
 *
 * Entry points: mxp_ckpt_read_info; internal ckpt_position_to_json / _from_json,
 * ckpt_scaler_to_json, ckpt_meta_u64.
 *
 * Keys (all values are strings, as safetensors requires; docs/checkpoints.md):
 *   format, format_version, mixprec_version, step, optimizer_step,
 *   skipped_steps, epoch, precision, weight_dtype, optimizer, lr,
 *   rng (JSON: seed, sr_counter as decimal strings), scaler (JSON: enabled,
 *   scale, growth_tracker, hysteresis_left, overflow_steps, total_steps,
 *   steps_at_min, config), data_position (JSON), config (JSON), healthy,
 *   guard_state, saved_at; plus the writer's checksums.
 * Every decoded value is range-checked as the object it restores would
 * check it, so a loaded state never fails later.
 */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON helpers ----------------------------------------------------------- */

static char *dump(json_t *j) {
    if (!j) return NULL;
    char *t = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!t) return NULL;
    char *r = mxp_strdup(t);
    free(t);
    return r;
}

char *ckpt_position_to_json(const mxp_data_position *p) {
    return dump(json_pack("{sIsIsIsIsIsIsI}", "epoch", (json_int_t)p->epoch, "step_in_epoch",
                          (json_int_t)p->step_in_epoch, "batch_size", (json_int_t)p->batch_size,
                          "run_first_epoch", (json_int_t)p->run_first_epoch, "run_epochs",
                          (json_int_t)p->run_epochs, "run_step", (json_int_t)p->run_step,
                          "run_total", (json_int_t)p->run_total));
}

bool ckpt_position_from_json(const char *s, mxp_data_position *p, char *why, size_t n) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_REJECT_DUPLICATES, &je);
    json_int_t v[7];
    int rc = j ? json_unpack_ex(j, &je, JSON_STRICT, "{sIsIsIsIsIsIsI}", "epoch", &v[0],
                                "step_in_epoch", &v[1], "batch_size", &v[2], "run_first_epoch",
                                &v[3], "run_epochs", &v[4], "run_step", &v[5], "run_total", &v[6])
               : -1;
    if (j) json_decref(j);
    if (rc != 0) {
        snprintf(why, n, "%s", je.text);
        return false;
    }
    for (int i = 0; i < 7; i++)
        if (v[i] < 0) {
            snprintf(why, n, "negative field");
            return false;
        }
    *p = (mxp_data_position){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    if (p->run_step > p->run_total ||
        (p->run_total > 0 && (p->batch_size < 1 || p->run_epochs < 1))) {
        snprintf(why, n, "run_step %lld of %lld with run_epochs %lld, batch_size %lld",
                 (long long)p->run_step, (long long)p->run_total, (long long)p->run_epochs,
                 (long long)p->batch_size);
        return false;
    }
    return true;
}

char *ckpt_scaler_to_json(bool enabled, const mxp_scaler_state *st, const mxp_scaler_config *c) {
    json_t *cfg =
        json_pack("{sbsfsfsfsIsisfss}", "enabled", (int)c->enabled, "init_scale", c->init_scale,
                  "growth_factor", c->growth_factor, "backoff_factor", c->backoff_factor,
                  "growth_interval", (json_int_t)c->growth_interval, "hysteresis", c->hysteresis,
                  "min_scale", c->min_scale, "at_min", mxp_scale_floor_policy_name(c->at_min));
    if (!cfg) return NULL;
    json_object_set_new(cfg, "max_scale",
                        isinf(c->max_scale) ? json_string("inf") : json_real(c->max_scale));
    return dump(json_pack("{sbsfsIsisIsIsIso}", "enabled", (int)enabled, "scale", (double)st->scale,
                          "growth_tracker", (json_int_t)st->growth_tracker, "hysteresis_left",
                          st->hysteresis_left, "overflow_steps", (json_int_t)st->overflow_steps,
                          "total_steps", (json_int_t)st->total_steps, "steps_at_min",
                          (json_int_t)st->steps_at_min, "config", cfg));
}

/* ---- decoding ------------------------------------------------------------------ */

/* Strict decimal integer (optional '-'), whole string. */
static bool parse_i64(const char *s, int64_t *out) {
    if (!s || !*s || (*s != '-' && (*s < '0' || *s > '9'))) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

typedef struct meta_ctx {
    const mxp_st_file *f;
    mxp_error *err;
} meta_ctx;

static const char *need(meta_ctx *c, const char *key) {
    const char *v = mxp_st_file_meta(c->f, key);
    if (!v)
        mxp_error_set(c->err, MXP_ERR_FORMAT, "%s: metadata '%s' is missing",
                      mxp_st_file_label(c->f), key);
    return v;
}

static bool bad(meta_ctx *c, const char *key, const char *value, const char *accepted) {
    mxp_error_set(c->err, MXP_ERR_FORMAT, "%s: metadata '%s' = '%.60s' is invalid; accepted: %s",
                  mxp_st_file_label(c->f), key, value ? value : "", accepted);
    return false;
}

static bool get_count(meta_ctx *c, const char *key, int64_t *out) {
    const char *v = need(c, key);
    if (!v) return false;
    if (!parse_i64(v, out) || *out < 0) return bad(c, key, v, "an integer >= 0");
    return true;
}

static bool get_rng(meta_ctx *c, mxp_ckpt_info *o) {
    const char *v = need(c, "rng");
    if (!v) return false;
    json_error_t je;
    json_t *j = json_loads(v, JSON_REJECT_DUPLICATES, &je);
    const char *seed = NULL, *ctr = NULL;
    int rc = j ? json_unpack_ex(j, &je, 0, "{ssss}", "seed", &seed, "sr_counter", &ctr) : -1;
    bool ok = rc == 0 && parse_u64(seed, &o->seed) && parse_u64(ctr, &o->sr_counter);
    if (j) json_decref(j);
    return ok ? true : bad(c, "rng", v, "{\"seed\": \"<u64>\", \"sr_counter\": \"<u64>\"}");
}

static bool get_scaler(meta_ctx *c, mxp_ckpt_info *o) {
    const char *v = need(c, "scaler");
    if (!v) return false;
    json_error_t je;
    json_t *j = json_loads(v, JSON_REJECT_DUPLICATES, &je);
    int en = 0, hyst = 0;
    double scale = 0;
    json_int_t gt = 0, ov = 0, tot = 0, atmin = 0;
    int rc = j ? json_unpack_ex(j, &je, 0, "{sbsFsIsisIsIsI}", "enabled", &en, "scale", &scale,
                                "growth_tracker", &gt, "hysteresis_left", &hyst, "overflow_steps",
                                &ov, "total_steps", &tot, "steps_at_min", &atmin)
               : -1;
    if (j) json_decref(j);
    float fs = (float)scale;
    if (rc != 0 || !(fs > 0) || !isfinite(fs) || gt < 0 || hyst < 1 || tot < 0 || ov < 0 ||
        ov > tot || atmin < 0 || atmin > ov)
        return bad(c, "scaler", v,
                   "a JSON object with enabled, scale (finite > 0), growth_tracker >= 0, "
                   "hysteresis_left >= 1, 0 <= steps_at_min <= overflow_steps <= total_steps");
    o->scaler_enabled = en != 0;
    o->scaler = (mxp_scaler_state){fs, gt, hyst, ov, tot, atmin};
    return true;
}

mxp_status mxp_ckpt_read_info(const mxp_st_file *f, mxp_ckpt_info *out, mxp_error *err) {
    if (!f || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_read_info: NULL");
    meta_ctx c = {f, err};
    mxp_ckpt_info o;
    memset(&o, 0, sizeof o);
    const char *L = mxp_st_file_label(f);
    const char *fmt = mxp_st_file_meta(f, "format");
    if (!fmt || strcmp(fmt, MXP_CKPT_FORMAT_NAME) != 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: not a mixprec checkpoint (metadata format is '%.40s'; "
                             "expected '%s')",
                             L, fmt ? fmt : "(missing)", MXP_CKPT_FORMAT_NAME);
    int64_t ver;
    const char *v = need(&c, "format_version");
    if (!v) return err ? err->status : MXP_ERR_FORMAT;
    if (!parse_i64(v, &ver) || ver < 1)
        return bad(&c, "format_version", v, "an integer >= 1"), MXP_ERR_FORMAT;
    if (ver > MXP_CKPT_FORMAT_VERSION)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: checkpoint format version %lld is newer than this mixprec "
                             "reads (%d)",
                             L, (long long)ver, MXP_CKPT_FORMAT_VERSION);
    o.format_version = (int)ver;
    bool ok = get_count(&c, "step", &o.step) &&
              get_count(&c, "optimizer_step", &o.optimizer_step) &&
              get_count(&c, "skipped_steps", &o.skipped_steps) && get_count(&c, "epoch", &o.epoch);
    if (!ok) return MXP_ERR_FORMAT;
    if (o.optimizer_step > o.step || o.skipped_steps > o.step)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: metadata optimizer_step=%lld and skipped_steps=%lld must not "
                             "exceed step=%lld",
                             L, (long long)o.optimizer_step, (long long)o.skipped_steps,
                             (long long)o.step);
    if (!(v = need(&c, "precision"))) return MXP_ERR_FORMAT;
    if (mxp_precision_parse(v, &o.precision, NULL) != MXP_OK)
        return bad(&c, "precision", v, "fp32, mixed_bf16, mixed_fp16, bf16, fp16, fp8"),
               MXP_ERR_FORMAT;
    if (!(v = need(&c, "weight_dtype"))) return MXP_ERR_FORMAT;
    if (!ckpt_st_dtype_parse(v, &o.weight_dtype))
        return bad(&c, "weight_dtype", v, "F32, BF16, F16, F8_E4M3, F8_E5M2"), MXP_ERR_FORMAT;
    if (!(v = need(&c, "optimizer"))) return MXP_ERR_FORMAT;
    if (mxp_optim_kind_parse(v, &o.optimizer, NULL) != MXP_OK)
        return bad(&c, "optimizer", v, "adamw, sgd"), MXP_ERR_FORMAT;
    if (!(v = need(&c, "lr"))) return MXP_ERR_FORMAT;
    char *end;
    o.lr = strtof(v, &end);
    if (*end || !(o.lr > 0) || !isfinite(o.lr))
        return bad(&c, "lr", v, "a finite number > 0"), MXP_ERR_FORMAT;
    if (!get_rng(&c, &o) || !get_scaler(&c, &o)) return MXP_ERR_FORMAT;
    if (!(v = need(&c, "data_position"))) return MXP_ERR_FORMAT;
    char why[160];
    if (!ckpt_position_from_json(v, &o.pos, why, sizeof why))
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: metadata 'data_position' is invalid: %s", L,
                             why);
    if (!(v = need(&c, "healthy"))) return MXP_ERR_FORMAT;
    if (strcmp(v, "true") && strcmp(v, "false"))
        return bad(&c, "healthy", v, "true, false"), MXP_ERR_FORMAT;
    o.healthy = strcmp(v, "true") == 0;
    v = mxp_st_file_meta(f, "saved_at");
    o.saved_at = v ? strtod(v, NULL) : 0;
    *out = o;
    return MXP_OK;
}
