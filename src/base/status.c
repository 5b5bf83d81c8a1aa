/* base/status.c: status names and the error context.
 * Entry points: mxp_status_name, mxp_error_set, mxp_error_clear. */
#include <mixprec/base.h>

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>

static const char *const status_names[] = {
    "ok",         "invalid_arg", "out_of_memory", "io_error",   "format_error",
    "config_error", "nonfinite", "unsupported",   "bad_state",
};
static_assert(sizeof status_names / sizeof status_names[0] == MXP_STATUS_COUNT,
              "status_names must cover mxp_status");

const char *mxp_status_name(mxp_status s) {
    if ((unsigned)s >= MXP_STATUS_COUNT) return "unknown_status";
    return status_names[s];
}

mxp_status mxp_error_set(mxp_error *err, mxp_status s, const char *fmt, ...) {
    if (err) {
        err->status = s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

void mxp_error_clear(mxp_error *err) {
    if (!err) return;
    err->status = MXP_OK;
    err->msg[0] = '\0';
}
