/* guard/signal.c: operator requests to switch a running job to FP32.
 *
 * Entry points: mxp_guard_request_fp32, mxp_guard_install_signal.
 *
 * A request raises the step controller's operator flag (train/step_ctl.c:
 * lock-free atomic stores, safe in a signal handler and from any thread);
 * every trainer a guard listens for takes it at its next step boundary as
 * a pending fp32 request of the highest priority. Requests made before a
 * guard exists are not replayed to it.
 */
#include "guard/guard_internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

void mxp_guard_request_fp32(void) { step_ctl_signal_fp32(); }

static void on_signal(int signo) {
    (void)signo;
    step_ctl_signal_fp32();
}

mxp_status mxp_guard_install_signal(int signo, mxp_error *err) {
    if (!step_ctl_signal_lock_free())
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "no lock-free atomic flag: signal requests unavailable");
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
