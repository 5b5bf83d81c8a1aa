/* base/time.c: monotonic wall clock. */
#include <mixprec/base.h>

#include <time.h>

double mxp_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
