/* kernels/threads.h: a small persistent thread pool for the kernels.
 *
 * mxp_threads_run(count, fn, ctx) calls fn(ctx, i, count) once for every i
 * in [0, count) and returns when all calls are done. Index 0 runs on the
 * calling thread, indices 1 .. mxp_threads_max()-1 on pool workers, any
 * further index again on the caller. The pool is created on first use with
 * mxp_threads_max() - 1 workers, which spin briefly after each job and then
 * sleep on a condition variable.
 *
 * Determinism is the caller's job: give each index disjoint outputs and make
 * each output's arithmetic independent of `count` (the GEMM does).
 *
 * When the pool is busy (a concurrent or nested call), could not be created,
 * or the process has forked since, all indices run serially on the caller,
 * so calling from any thread is safe.
 *
 * Every index runs with the calling thread's MXCSR flush-to-zero and
 * denormals-are-zero bits (mxp_fpenv_set_ftz), whichever thread runs it;
 * workers restore their own MXCSR after the job.
 *
 * MIXPREC_NUM_THREADS=<1..64> caps the thread count (default: the CPUs this
 * process may run on); an invalid value is logged and ignored.
 */
#ifndef MIXPREC_KERNELS_THREADS_H
#define MIXPREC_KERNELS_THREADS_H

#include <mixprec/base.h>

typedef void (*mxp_parallel_fn)(void *ctx, int index, int count);

/* Threads a parallel run may use (>= 1; fixed after the first call). */
int mxp_threads_max(void);
/* Run fn(ctx, i, count) for i in [0, count); see the file comment. */
void mxp_threads_run(int count, mxp_parallel_fn fn, void *ctx);

/* Cumulative fork/join counters of the pool since the process started
 * (process-wide; read them before and after a training step and subtract).
 * A "fork" is an mxp_threads_run that handed indices to pool workers; a
 * run that executed all indices on the caller (count 1, one thread, a busy
 * pool, a forked process) counts as `inline_runs`. */
typedef struct mxp_threads_stats {
    int64_t forks;       /* runs handed to the workers (one fork/join each) */
    int64_t inline_runs; /* runs of count >= 1 executed on the caller alone */
    int64_t fork_ns;     /* wall time of the forked runs, publish to join */
    int64_t join_wait_ns; /* of which the caller waited for the workers
                             after finishing its own indices */
} mxp_threads_stats;

void mxp_threads_stats_get(mxp_threads_stats *out);

#endif /* MIXPREC_KERNELS_THREADS_H */
