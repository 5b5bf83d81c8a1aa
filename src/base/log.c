/* base/log.c: the process-wide log sink. The library formats a message and
 * hands it to the callback installed by the application; without one,
 * messages are dropped (the library never prints). */
#include <mixprec/base.h>

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>

static mxp_log_fn log_fn;
static void *log_user;
static mxp_log_level log_min = MXP_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static_assert(sizeof level_names / sizeof level_names[0] == MXP_LOG_LEVEL_COUNT,
              "level_names must cover mxp_log_level");

void mxp_log_set_callback(mxp_log_fn fn, void *user) {
    log_fn = fn;
    log_user = user;
}

void mxp_log_set_level(mxp_log_level min_level) { log_min = min_level; }

const char *mxp_log_level_name(mxp_log_level level) {
    if ((unsigned)level >= MXP_LOG_LEVEL_COUNT) return "unknown";
    return level_names[level];
}

void mxp_log(mxp_log_level level, const char *fmt, ...) {
    if (!log_fn || level < log_min) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_fn(log_user, level, buf);
}
