/* tools/mixprec/bench_quiet.h: wait until this process's other threads
 * stop using CPUs, so that one implementation's idle workers do not take
 * the CPUs from the next implementation's sample when two alternate.
 *
 * After a call, a thread pool's workers keep spinning for a while before
 * they sleep: ours for 100 us (kernels/threads.c), OpenMP's (oneDNN's) for
 * milliseconds under its default wait policy. On 2 CPUs OpenMP's spinning
 * workers made our next 20 ms sample 35% slower (256x256x256 f32, `mixprec
 * bench kernels`). bench_quiet sleeps in 10 ms steps until a step passes
 * in which the other threads used less than 10% of one CPU, or max_s has
 * passed. 10 ms, not less: Linux adds a thread's CPU time on another CPU to
 * the process clock at its scheduler tick (4 ms at HZ = 250), so a 1 ms
 * step read a spinning worker as idle.
 * Header-only (static inline): used by tools/mixprec/bench_time.c and by
 * the single-file benches under bench/. */
#ifndef MIXPREC_TOOLS_BENCH_QUIET_H
#define MIXPREC_TOOLS_BENCH_QUIET_H

#include <time.h>

static inline double bench_quiet_clock(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Returns the seconds waited. */
static inline double bench_quiet(double max_s) {
    const double step = 10e-3, t0 = bench_quiet_clock(CLOCK_MONOTONIC);
    const struct timespec ts = {0, 10000000};
    for (;;) {
        double p0 = bench_quiet_clock(CLOCK_PROCESS_CPUTIME_ID);
        double s0 = bench_quiet_clock(CLOCK_THREAD_CPUTIME_ID);
        nanosleep(&ts, NULL);
        double others = (bench_quiet_clock(CLOCK_PROCESS_CPUTIME_ID) - p0) -
                        (bench_quiet_clock(CLOCK_THREAD_CPUTIME_ID) - s0);
        double waited = bench_quiet_clock(CLOCK_MONOTONIC) - t0;
        if (others < 0.1 * step || waited >= max_s) return waited;
    }
}

#endif /* MIXPREC_TOOLS_BENCH_QUIET_H */
