/* src/config/parse_value.c: strict text -> value parsing for config keys,
 * the "accepted values" phrases used in error messages, canonical value
 * formatting, and storing a value into mxp_config.
 *
 * Rules: integers are decimal, the whole string must parse, no whitespace,
 * range-checked (so "3.5", "12abc", "1e3" and overflow are rejected).
 * Numbers go through strtod over the whole string; NaN is never accepted and
 * infinity only where the key allows it ("inf", "infinity", ".inf").
 * Booleans: true/false/1/0/yes/no/on/off in any case. Enum names are
 * matched case-insensitively.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"

bool mxp_config_parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

void mxp_config_excerpt(const char *s, char *buf, size_t n) {
    if (n == 0) return;
    size_t len = strlen(s), keep = len > 64 ? 61 : len, j = 0;
    for (size_t i = 0; i < keep && j + 1 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[j++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    for (int d = 0; keep < len && d < 3 && j + 1 < n; d++) buf[j++] = '.';
    buf[j] = '\0';
}

/* Append printf output to buf[0..n) at *pos, never overflowing. */
static void appendf(char *buf, size_t n, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t n, size_t *pos, const char *fmt, ...) {
    if (*pos >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *pos, n - *pos, fmt, ap);
    va_end(ap);
    if (w > 0) *pos = (*pos + (size_t)w < n) ? *pos + (size_t)w : n - 1;
}

/* Shortest %g text that reads back as exactly d. */
static void format_double(double d, char *buf, size_t n) {
    if (isinf(d)) {
        snprintf(buf, n, "%s", d > 0 ? "inf" : "-inf");
        return;
    }
    if (d == floor(d) && fabs(d) < 1e15) {
        snprintf(buf, n, "%.0f", d);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

void mxp_config_key_accepted(const mxp_config_key *k, char *buf, size_t n) {
    size_t pos = 0;
    char lo[40], hi[40];
    buf[0] = '\0';
    switch (k->type) {
    case MXP_KEY_BOOL:
        appendf(buf, n, &pos, "true or false (also 1|0, yes|no, on|off)");
        break;
    case MXP_KEY_INT:
        if (k->store == MXP_STORE_U64)
            appendf(buf, n, &pos, "an integer >= 0");
        else if (k->imax == INT64_MAX)
            appendf(buf, n, &pos, "an integer >= %" PRId64, k->imin);
        else if (k->imax >= INT32_MAX)
            appendf(buf, n, &pos, "an integer >= %" PRId64 " (at most %" PRId64 ")", k->imin,
                    k->imax);
        else
            appendf(buf, n, &pos, "an integer in [%" PRId64 ", %" PRId64 "]", k->imin, k->imax);
        break;
    case MXP_KEY_FLOAT:
        format_double(k->fmin, lo, sizeof lo);
        format_double(k->fmax, hi, sizeof hi);
        if (k->fmax == (double)FLT_MAX && !isinf(k->fmin))
            appendf(buf, n, &pos, "a number %s %s, finite in float32 (<= 3.4e38)",
                    k->fmin_open ? ">" : ">=", lo);
        else if (isinf(k->fmax) && !isinf(k->fmin))
            appendf(buf, n, &pos, "a number %s %s", k->fmin_open ? ">" : ">=", lo);
        else if (isinf(k->fmin) && !isinf(k->fmax))
            appendf(buf, n, &pos, "a number %s %s", k->fmax_open ? "<" : "<=", hi);
        else if (isinf(k->fmin) && isinf(k->fmax))
            appendf(buf, n, &pos, "a number");
        else
            appendf(buf, n, &pos, "a number in %c%s, %s%c", k->fmin_open ? '(' : '[', lo, hi,
                    k->fmax_open ? ')' : ']');
        if (k->allow_inf) appendf(buf, n, &pos, ", or inf");
        break;
    case MXP_KEY_ENUM:
        appendf(buf, n, &pos, "one of: ");
        for (int i = 0, first = 1; i < k->nchoices; i++) {
            if (k->choices[i].alias) continue;
            appendf(buf, n, &pos, "%s%s", first ? "" : ", ", k->choices[i].name);
            first = 0;
        }
        for (int i = 0, first = 1; i < k->nchoices; i++) {
            if (!k->choices[i].alias) continue;
            appendf(buf, n, &pos, "%s%s", first ? " (aliases: " : ", ", k->choices[i].name);
            first = 0;
        }
        for (int i = 0; i < k->nchoices; i++) {
            if (k->choices[i].alias) {
                appendf(buf, n, &pos, ")");
                break;
            }
        }
        break;
    case MXP_KEY_PRECISION:
        appendf(buf, n, &pos, "one of: ");
        for (int p = 0; p < MXP_PRECISION_COUNT; p++)
            appendf(buf, n, &pos, "%s%s", p ? ", " : "", mxp_precision_name((mxp_precision)p));
        appendf(buf, n, &pos, ", auto (Lightning's 32-true, bf16-mixed, 16-mixed, bf16-true, "
                "16-true too)");
        break;
    case MXP_KEY_STRING:
        appendf(buf, n, &pos, "a non-empty string of at most %d characters",
                MXP_CONFIG_STR_MAX - 1);
        break;
    default:
        appendf(buf, n, &pos, "?");
        break;
    }
}

/* Strict decimal integer syntax: [+-]?[0-9]+ and nothing else. */
static bool int_syntax(const char *s, bool allow_minus) {
    const char *p = s;
    if (*p == '+' || (allow_minus && *p == '-')) p++;
    if (!isdigit((unsigned char)*p)) return false;
    while (isdigit((unsigned char)*p)) p++;
    return *p == '\0';
}

static bool is_inf_word(const char *s) {
    if (*s == '+') s++;
    return strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0 ||
           strcmp(s, ".inf") == 0 || strcmp(s, ".Inf") == 0 || strcmp(s, ".INF") == 0;
}

static bool float_in_range(const mxp_config_key *k, double d) {
    if (isinf(d)) return k->allow_inf && d > 0;
    if (k->fmin_open ? !(d > k->fmin) : !(d >= k->fmin)) return false;
    if (k->fmax_open ? !(d < k->fmax) : !(d <= k->fmax)) return false;
    return true;
}

static bool parse_float(const mxp_config_key *k, const char *s, mxp_key_value *v, char *why,
                        size_t n) {
    char acc[160];
    mxp_config_key_accepted(k, acc, sizeof acc);
    double d;
    if (is_inf_word(s)) {
        d = INFINITY;
    } else {
        char *end = NULL;
        if (*s == '\0' || isspace((unsigned char)*s)) goto bad;
        errno = 0;
        d = strtod(s, &end);
        if (end == s || *end != '\0') goto bad;
        if (isnan(d)) {
            snprintf(why, n, "must be %s (NaN is not accepted)", acc);
            return false;
        }
        if (isinf(d) && errno == ERANGE) {
            snprintf(why, n, "must be %s (the value overflows a double)", acc);
            return false;
        }
    }
    if (!float_in_range(k, d)) {
        if (isinf(d))
            snprintf(why, n, "must be %s (infinity is not accepted)", acc);
        else
            snprintf(why, n, "must be %s", acc);
        return false;
    }
    if (k->store == MXP_STORE_F32 && isfinite(d)) {
        float f = (float)d;
        if (!isfinite(f) || (d != 0.0 && f == 0.0f)) {
            snprintf(why, n, "must be %s and representable as float32 (about 1e-45 to 3.4e38)",
                     acc);
            return false;
        }
    }
    v->d = d;
    return true;
bad:
    snprintf(why, n, "must be %s", acc);
    return false;
}

bool mxp_config_value_parse(const mxp_config_key *k, const char *s, mxp_key_value *v,
                            char *why, size_t n) {
    char acc[200];
    mxp_config_key_accepted(k, acc, sizeof acc);
    switch (k->type) {
    case MXP_KEY_BOOL:
        if (mxp_config_parse_bool(s, &v->b)) return true;
        break;
    case MXP_KEY_INT: {
        char *end = NULL;
        errno = 0;
        if (k->store == MXP_STORE_U64) {
            if (!int_syntax(s, false)) break;
            unsigned long long u = strtoull(s, &end, 10);
            if (errno == ERANGE) {
                snprintf(why, n, "must be %s (at most %llu)", acc, (unsigned long long)UINT64_MAX);
                return false;
            }
            v->u = (uint64_t)u;
            return true;
        }
        if (!int_syntax(s, true)) break;
        long long x = strtoll(s, &end, 10);
        if (errno == ERANGE || x < k->imin || x > k->imax) break;
        v->i = (int64_t)x;
        return true;
    }
    case MXP_KEY_FLOAT:
        return parse_float(k, s, v, why, n);
    case MXP_KEY_ENUM:
        for (int i = 0; i < k->nchoices; i++) {
            if (strcasecmp(s, k->choices[i].name) == 0) {
                v->e = k->choices[i].value;
                return true;
            }
        }
        break;
    case MXP_KEY_PRECISION: {
        /* PyTorch Lightning's Trainer(precision=...) names, as its users
         * type them (its plain "bf16" means bf16-mixed there, pure BF16 here:
         * not an alias) */
        static const struct {
            const char *name;
            mxp_precision p;
        } lightning[] = {{"32-true", MXP_PRECISION_FP32},       {"32", MXP_PRECISION_FP32},
                         {"bf16-mixed", MXP_PRECISION_MIXED_BF16}, {"16-mixed", MXP_PRECISION_MIXED_FP16},
                         {"16", MXP_PRECISION_MIXED_FP16},      {"bf16-true", MXP_PRECISION_BF16},
                         {"16-true", MXP_PRECISION_FP16}};
        for (size_t i = 0; i < sizeof lightning / sizeof lightning[0]; i++) {
            if (strcasecmp(s, lightning[i].name) == 0) {
                v->e = (int)lightning[i].p;
                return true;
            }
        }
        mxp_precision p;
        if (mxp_precision_parse(s, &p, NULL) == MXP_OK) {
            v->e = (int)p;
            return true;
        }
        if (strcasecmp(s, "auto") == 0) { /* chosen by the preflight (guard.h) */
            v->e = MXP_PRECISION_AUTO_VALUE;
            return true;
        }
        break;
    }
    case MXP_KEY_STRING: {
        size_t len = strlen(s);
        if (len == 0 || len >= MXP_CONFIG_STR_MAX) break;
        memcpy(v->s, s, len + 1);
        return true;
    }
    default:
        break;
    }
    snprintf(why, n, "must be %s", acc);
    return false;
}

void mxp_config_value_default(const mxp_config_key *k, mxp_key_value *v) {
    memset(v, 0, sizeof *v);
    v->b = k->def_b;
    v->i = k->def_i;
    v->u = k->def_i >= 0 ? (uint64_t)k->def_i : 0;
    v->d = k->def_d;
    v->e = k->def_e;
    if (k->def_s) snprintf(v->s, sizeof v->s, "%s", k->def_s);
    v->source = MXP_SRC_DEFAULT;
}

/* True when s needs quotes to read back as the same YAML plain string. */
static bool needs_quotes(const char *s) {
    if (*s == '\0') return true;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == '+'))
            return true;
    }
    bool b;
    return mxp_config_parse_bool(s, &b) || strcmp(s, "~") == 0 || strcasecmp(s, "null") == 0;
}

void mxp_config_value_format(const mxp_config_key *k, const mxp_key_value *v, char *buf,
                             size_t n) {
    if (n == 0) return;
    buf[0] = '\0';
    switch (k->type) {
    case MXP_KEY_BOOL:
        snprintf(buf, n, "%s", v->b ? "true" : "false");
        break;
    case MXP_KEY_INT:
        if (k->store == MXP_STORE_U64)
            snprintf(buf, n, "%" PRIu64, v->u);
        else
            snprintf(buf, n, "%" PRId64, v->i);
        break;
    case MXP_KEY_FLOAT:
        format_double(v->d, buf, n);
        break;
    case MXP_KEY_ENUM:
        for (int i = 0; i < k->nchoices; i++) {
            if (!k->choices[i].alias && k->choices[i].value == v->e) {
                snprintf(buf, n, "%s", k->choices[i].name);
                break;
            }
        }
        break;
    case MXP_KEY_PRECISION:
        snprintf(buf, n, "%s", v->e == MXP_PRECISION_AUTO_VALUE
                                   ? "auto"
                                   : mxp_precision_name((mxp_precision)v->e));
        break;
    case MXP_KEY_STRING:
        if (!needs_quotes(v->s)) {
            snprintf(buf, n, "%s", v->s);
        } else {
            size_t pos = 0;
            appendf(buf, n, &pos, "\"");
            for (const char *p = v->s; *p; p++) {
                if (*p == '"' || *p == '\\')
                    appendf(buf, n, &pos, "\\%c", *p);
                else if ((unsigned char)*p < 0x20)
                    appendf(buf, n, &pos, "\\x%02x", (unsigned)(unsigned char)*p);
                else
                    appendf(buf, n, &pos, "%c", *p);
            }
            appendf(buf, n, &pos, "\"");
        }
        break;
    default:
        break;
    }
}

void mxp_config_value_store(const mxp_config_key *k, const mxp_key_value *v, mxp_config *c) {
    unsigned char *dst = (unsigned char *)c + k->offset;
    switch (k->store) {
    case MXP_STORE_BOOL:
        memcpy(dst, &v->b, sizeof v->b);
        break;
    case MXP_STORE_I32: {
        int x = (int)v->i; /* the table's range keeps it within int */
        memcpy(dst, &x, sizeof x);
        break;
    }
    case MXP_STORE_I64:
        memcpy(dst, &v->i, sizeof v->i);
        break;
    case MXP_STORE_U64:
        memcpy(dst, &v->u, sizeof v->u);
        break;
    case MXP_STORE_F32: {
        float f = (float)v->d;
        memcpy(dst, &f, sizeof f);
        break;
    }
    case MXP_STORE_F64:
        memcpy(dst, &v->d, sizeof v->d);
        break;
    case MXP_STORE_ENUM:
        memcpy(dst, &v->e, sizeof v->e);
        break;
    case MXP_STORE_STR:
        snprintf((char *)dst, MXP_CONFIG_STR_MAX, "%s", v->s);
        break;
    default:
        break;
    }
}
