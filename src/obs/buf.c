/* src/obs/buf.c: small helpers of the obs module: a growable text buffer,
 * round-trip double formatting in the Prometheus/Go spelling, and UTC
 * timestamps in SQLite's datetime() text form.
 *
 * Entry points: mxp_obs_buf_*, mxp_obs_format_double, mxp_obs_unix_now,
 * mxp_obs_format_utc (obs_internal.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obs/obs_internal.h"

/* Make room for `extra` more bytes plus the NUL; false (and oom set) when
 * the size overflows or allocation fails. */
static bool buf_reserve(mxp_obs_buf *b, size_t extra) {
    if (b->oom) return false;
    size_t need;
    if (!mxp_size_add(b->len, extra, &need) || !mxp_size_add(need, 1, &need)) {
        b->oom = true;
        return false;
    }
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < need) {
        if (!mxp_size_mul(cap, 2, &cap)) {
            b->oom = true;
            return false;
        }
    }
    char *p = mxp_calloc(cap, 1);
    if (!p) {
        b->oom = true;
        return false;
    }
    if (b->p) memcpy(p, b->p, b->len + 1);
    mxp_free(b->p);
    b->p = p;
    b->cap = cap;
    return true;
}

void mxp_obs_buf_append(mxp_obs_buf *b, const char *s, size_t n) {
    if (!buf_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void mxp_obs_buf_puts(mxp_obs_buf *b, const char *s) { mxp_obs_buf_append(b, s, strlen(s)); }

void mxp_obs_buf_printf(mxp_obs_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        mxp_obs_buf_append(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void mxp_obs_buf_free(mxp_obs_buf *b) {
    mxp_free(b->p);
    memset(b, 0, sizeof *b);
}

char *mxp_obs_buf_take(mxp_obs_buf *b, size_t *len) {
    if (b->oom) {
        mxp_obs_buf_free(b);
        return NULL;
    }
    if (!b->p && !buf_reserve(b, 0)) return NULL;
    char *p = b->p;
    if (len) *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}

void mxp_obs_format_double(double v, char *buf, size_t n) {
    if (isnan(v)) {
        snprintf(buf, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Shortest %g precision that reads back to the same double. */
    for (int prec = 6; prec <= 17; prec += (prec < 15 ? 9 : 1)) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

double mxp_obs_unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void mxp_obs_format_utc(double unix_s, char *buf, size_t n) {
    if (!(unix_s > 0)) {
        snprintf(buf, n, "%s", "");
        return;
    }
    time_t sec = (time_t)floor(unix_s);
    int ms = (int)((unix_s - (double)sec) * 1000.0);
    if (ms > 999) ms = 999;
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(buf, n, "%04d-%02d-%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}
