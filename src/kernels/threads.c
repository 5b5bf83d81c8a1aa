/* kernels/threads.c: the kernels' persistent thread pool (see threads.h).
 *
 * Protocol: the caller owns the pool for one job by holding `busy`. It
 * publishes (fn, ctx, count), sets `pending` to the number of workers and
 * bumps the generation counter `gen` (release) under `lock`, broadcasting
 * `wake`. A worker that sees a new generation (acquire) runs its index if it
 * is below count, then decrements `pending`; the last one signals `done`
 * under `lock`. Workers wait on `gen` for SPIN_SECONDS after a job before
 * sleeping, because GEMMs arrive in bursts (a training step issues several)
 * and a futex wake-up costs tens of microseconds on a VM. The caller also
 * waits briefly on `pending` before sleeping on `done`. Those waits pause
 * for PAUSE_SECONDS and then yield the CPU: with pure spinning, two threads
 * that the scheduler put on one CPU (a busy machine) took 100x longer.
 *
 * Counters (mxp_threads_stats): forks, runs done inline on the caller, the
 * wall time of each fork/join and the part of it the caller spent waiting
 * for the workers after its own indices; relaxed atomics, a few clock reads
 * per fork (a fork costs microseconds, the clock tens of nanoseconds).
 *
 * Floating-point environment: MXCSR is per thread, so the caller's
 * flush-to-zero / denormals-are-zero bits (mxp_fpenv_set_ftz) are copied
 * into the job, and each worker runs its index with exactly those bits and
 * restores its own MXCSR afterwards. A job therefore computes the same bits
 * whichever thread runs an index (rounding mode and exception masks are
 * left to the defaults every thread starts with).
 */
#include "kernels/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define THREADS_HAVE_MXCSR 1
/* MXCSR FTZ (bit 15) and DAZ (bit 6). */
#define MXCSR_FLUSH_BITS 0x8040u
#endif

enum { THREADS_MAX = 64 };
#define SPIN_SECONDS 100e-6
#define PAUSE_SECONDS 2e-6

static struct {
    pthread_mutex_t busy; /* held by the caller of a run */
    pthread_mutex_t lock; /* guards sleeping on wake/done */
    pthread_cond_t wake, done;
    atomic_uint gen;
    atomic_int pending;
    atomic_bool forked; /* set in a fork child: run serially */
    mxp_parallel_fn fn;
    void *ctx;
    int count;
    unsigned flush; /* the caller's MXCSR FTZ/DAZ bits for this job */
    int nthreads; /* caller + workers actually started */
    pthread_t tid[THREADS_MAX];
    /* counters (mxp_threads_stats); written by the run's owner, read by anyone */
    atomic_llong forks, inline_runs, fork_ns, join_wait_ns;
} pool = {
    .busy = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .nthreads = 1,
};

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static int threads_max = 1;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* One step of a bounded wait that started at t0: pause briefly at first,
 * then yield the CPU, so a waiter that shares its CPU with the thread it
 * waits for (an oversubscribed machine) lets that thread run instead of
 * burning the time slice. Returns false once SPIN_SECONDS have passed. */
static bool spin_step(double t0) {
    double dt = mxp_time_now() - t0;
    if (dt >= SPIN_SECONDS) return false;
    if (dt < PAUSE_SECONDS)
        for (int i = 0; i < 32; i++) cpu_relax();
    else
        sched_yield();
    return true;
}

/* The configured thread count: MIXPREC_NUM_THREADS, else the CPUs in this
 * process's affinity mask, clamped to [1, THREADS_MAX]. */
static int configured_threads(void) {
    int n = 1;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    else n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("MIXPREC_NUM_THREADS");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 1 && v <= THREADS_MAX)
            n = (int)v;
        else
            mxp_log(MXP_LOG_WARN,
                    "kernels: MIXPREC_NUM_THREADS=%s is invalid and ignored; accepted: "
                    "an integer in [1, %d]", env, THREADS_MAX);
    }
    if (n < 1) n = 1;
    if (n > THREADS_MAX) n = THREADS_MAX;
    return n;
}

/* The caller's flush bits (0 where the platform has no MXCSR). */
static unsigned caller_flush(void) {
#ifdef THREADS_HAVE_MXCSR
    return _mm_getcsr() & MXCSR_FLUSH_BITS;
#else
    return 0;
#endif
}

/* Run index `index` of the published job with MXCSR's FTZ/DAZ bits equal
 * to `flush`, restoring this worker's MXCSR afterwards. */
static void run_with_flush(unsigned flush, int index) {
#ifdef THREADS_HAVE_MXCSR
    unsigned own = _mm_getcsr();
    unsigned want = (own & ~MXCSR_FLUSH_BITS) | flush;
    if (want != own) _mm_setcsr(want);
    pool.fn(pool.ctx, index, pool.count);
    if (want != own) _mm_setcsr(own);
#else
    (void)flush;
    pool.fn(pool.ctx, index, pool.count);
#endif
}

static void *worker_main(void *arg) {
    const int index = (int)(intptr_t)arg;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&pool.gen, memory_order_acquire);
        if (g == seen) {
            double t0 = mxp_time_now();
            while ((g = atomic_load_explicit(&pool.gen, memory_order_acquire)) == seen &&
                   spin_step(t0)) {
            }
        }
        if (g == seen) {
            pthread_mutex_lock(&pool.lock);
            while ((g = atomic_load_explicit(&pool.gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = g;
        if (index < pool.count) run_with_flush(pool.flush, index);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

static void atfork_child(void) { atomic_store(&pool.forked, true); }

static void pool_start(void) {
    threads_max = configured_threads();
    pthread_atfork(NULL, NULL, atfork_child);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int i = 1; i < threads_max; i++) {
        if (pthread_create(&pool.tid[i], &attr, worker_main, (void *)(intptr_t)i) != 0) {
            mxp_log(MXP_LOG_WARN, "kernels: could not start thread %d of %d; using %d",
                    i + 1, threads_max, i);
            break;
        }
        pool.nthreads = i + 1;
    }
    pthread_attr_destroy(&attr);
}

int mxp_threads_max(void) {
    pthread_once(&pool_once, pool_start);
    return threads_max;
}

void mxp_threads_stats_get(mxp_threads_stats *out) {
    out->forks = atomic_load_explicit(&pool.forks, memory_order_relaxed);
    out->inline_runs = atomic_load_explicit(&pool.inline_runs, memory_order_relaxed);
    out->fork_ns = atomic_load_explicit(&pool.fork_ns, memory_order_relaxed);
    out->join_wait_ns = atomic_load_explicit(&pool.join_wait_ns, memory_order_relaxed);
}

static long long to_ns(double s) { return (long long)(s * 1e9 + 0.5); }

void mxp_threads_run(int count, mxp_parallel_fn fn, void *ctx) {
    if (count <= 0) return;
    pthread_once(&pool_once, pool_start);
    if (count == 1 || pool.nthreads == 1 || atomic_load(&pool.forked) ||
        pthread_mutex_trylock(&pool.busy) != 0) {
        atomic_fetch_add_explicit(&pool.inline_runs, 1, memory_order_relaxed);
        for (int i = 0; i < count; i++) fn(ctx, i, count);
        return;
    }
    const double t_fork = mxp_time_now();
    const int workers = pool.nthreads - 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.count = count;
    pool.flush = caller_flush();
    atomic_store_explicit(&pool.pending, workers, memory_order_relaxed);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    fn(ctx, 0, count);
    for (int i = pool.nthreads; i < count; i++) fn(ctx, i, count);

    double t0 = mxp_time_now();
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) != 0 && spin_step(t0)) {
    }
    if (atomic_load_explicit(&pool.pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&pool.lock);
        while (atomic_load_explicit(&pool.pending, memory_order_acquire) != 0)
            pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    const double t_join = mxp_time_now();
    atomic_fetch_add_explicit(&pool.forks, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.fork_ns, to_ns(t_join - t_fork), memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.join_wait_ns, to_ns(t_join - t0), memory_order_relaxed);
    pthread_mutex_unlock(&pool.busy);
}
