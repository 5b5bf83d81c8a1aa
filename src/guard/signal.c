/* guard/signal.c: operator requests to switch a running job to FP32.
 *
 * Entry points: mxp_guard_request_fp32, mxp_guard_install_signal; internal
 * guard_fp32_requests.
 *
 * A request increments a process-wide lock-free atomic counter (safe in a
 * signal handler and from any thread, e.g. the control API); each guard
 * remembers the count it has honoured and switches at its next step
 * boundary when the count moved. Requests made before a guard exists are
 * not replayed to it.
 */
#include "guard/guard_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static atomic_ulong fp32_requests;

void mxp_guard_request_fp32(void) { atomic_fetch_add(&fp32_requests, 1ul); }

unsigned long guard_fp32_requests(void) { return atomic_load(&fp32_requests); }

static void on_signal(int signo) {
    (void)signo;
    mxp_guard_request_fp32();
}

mxp_status mxp_guard_install_signal(int signo, mxp_error *err) {
    if (!atomic_is_lock_free(&fp32_requests))
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "no lock-free atomic counter: signal requests unavailable");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(signo, &sa, NULL) != 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "sigaction(%d): %s", signo,
                             strerror(errno));
    return MXP_OK;
}
