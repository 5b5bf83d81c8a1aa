/* tests/test_kernel_threads.c: the kernels' thread pool carries the caller's
 * flush-to-zero / denormals-are-zero setting to its workers.
 *
 * Oracles: mxp_fpenv_get_ftz() read inside each index of a pool job, and
 * hand-computed GEMM results: with A = B = 2^-70 (FP32) every product is
 * 2^-140, below FP32's smallest normal 2^-126, so
 *   - flush off: C[i][j] = K * 2^-140 exactly (subnormal sums of equal
 *     subnormals are exact);
 *   - flush on (FTZ): every FMA result is subnormal and becomes 0, so C = 0.
 * Both must hold for 1 and 2 threads (before the fix the worker's half of C
 * kept its subnormals while the caller's half was flushed). The same for a
 * pool-split element-wise pass (scale) of the AVX-512 table. M = 128 takes
 * the packed GEMM path, M = 32 the small-M path. Skips the
 * AVX-512 parts on CPUs without it, and everything MXCSR-specific where
 * mxp_fpenv_set_ftz reports no flush mode (non-x86).
 *
 * The pool's fork/join counters (mxp_threads_stats): a count-1 run is
 * inline, a run over all threads is one fork whose wall time spans a
 * worker's 2 ms sleep (causality: the join follows the worker's end, which
 * follows the publish by the sleep), and the join wait is part of it.
 */
#include "kernels/threads.h"
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/x86_avx512/loops.h"
#include "testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { JOB_MAX = 8 };

typedef struct job_seen {
    bool ftz[JOB_MAX];
    pthread_t tid[JOB_MAX];
} job_seen;

static void record(void *ctx, int index, int count) {
    job_seen *s = ctx;
    (void)count;
    s->ftz[index] = mxp_fpenv_get_ftz();
    s->tid[index] = pthread_self();
}

/* Every index of a pool job sees the caller's flush setting, on and off,
 * and workers go back to their own setting (the next job sees the new one). */
static void test_pool_flush(void) {
    int n = mxp_threads_max();
    if (n > JOB_MAX) n = JOB_MAX;
    for (int round = 0; round < 4; round++) {
        bool on = round % 2 == 0;
        CHECK(mxp_fpenv_set_ftz(on));
        job_seen s;
        memset(&s, 0, sizeof s);
        for (int i = 0; i < n; i++) s.ftz[i] = !on;
        mxp_threads_run(n, record, &s);
        for (int i = 0; i < n; i++) CHECK_MSG(s.ftz[i] == on, "round %d: index %d of %d saw "
                                              "ftz=%d, caller %d", round, i, n, s.ftz[i], on);
        if (n >= 2) CHECK(!pthread_equal(s.tid[0], s.tid[1])); /* a worker ran index 1 */
    }
    CHECK(mxp_fpenv_set_ftz(false));
}

static void sleepy(void *ctx, int index, int count) {
    (void)ctx;
    (void)count;
    if (index == 1) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

static void test_pool_stats(void) {
    mxp_threads_stats s0, s1, s2;
    mxp_threads_stats_get(&s0);
    mxp_threads_run(1, sleepy, NULL);
    mxp_threads_stats_get(&s1);
    CHECK(s1.inline_runs == s0.inline_runs + 1 && s1.forks == s0.forks);
    CHECK(s1.fork_ns == s0.fork_ns && s1.join_wait_ns == s0.join_wait_ns);
    const int n = mxp_threads_max();
    mxp_threads_run(n, sleepy, NULL);
    mxp_threads_stats_get(&s2);
    if (n == 1) {
        CHECK(s2.inline_runs == s1.inline_runs + 1 && s2.forks == s1.forks);
        return;
    }
    CHECK_MSG(s2.forks == s1.forks + 1 && s2.inline_runs == s1.inline_runs,
              "forks %lld -> %lld, inline %lld -> %lld", (long long)s1.forks,
              (long long)s2.forks, (long long)s1.inline_runs, (long long)s2.inline_runs);
    const int64_t fork_ns = s2.fork_ns - s1.fork_ns, wait_ns = s2.join_wait_ns - s1.join_wait_ns;
    CHECK_MSG(fork_ns >= 2000000, "fork of a job with a 2 ms index lasted %lld ns",
              (long long)fork_ns);
    CHECK_MSG(wait_ns >= 0 && wait_ns <= fork_ns, "join wait %lld ns of a %lld ns fork",
              (long long)wait_ns, (long long)fork_ns);
}

static float pow2f(int e) { return ldexpf(1.0f, e); }

/* C = A B with all entries 2^-70 (products 2^-140), 1 and 2 threads, flush
 * off then on; see the file comment for the expected values. */
static void test_gemm_flush(size_t M) {
    const size_t N = 512, K = 64;
    float *A = malloc(M * K * sizeof *A), *B = malloc(K * N * sizeof *B);
    float *C = malloc(M * N * sizeof *C);
    if (!A || !B || !C) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < M * K; i++) A[i] = pow2f(-70);
    for (size_t i = 0; i < K * N; i++) B[i] = pow2f(-70);
    const float sub = (float)K * pow2f(-140); /* exact: K * 2^-140 = 2^-134 */
    CHECK(sub > 0.0f && sub < pow2f(-126));
    for (int flush = 0; flush <= 1; flush++) {
        for (int threads = 1; threads <= 2; threads++) {
            for (size_t i = 0; i < M * N; i++) C[i] = NAN;
            mxp_gemm_args g = {.M = (int64_t)M, .N = (int64_t)N, .K = (int64_t)K,
                               .a_type = MXP_DTYPE_F32, .A = A, .lda = (int64_t)K,
                               .b_type = MXP_DTYPE_F32, .B = B, .ldb = (int64_t)N,
                               .C = C, .ldc = (int64_t)N, .alpha = 1.0f, .beta = 0.0f};
            mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, threads, false};
            CHECK(mxp_fpenv_set_ftz(flush != 0));
            mxp_avx512_gemm_ex(&g, &o);
            CHECK(mxp_fpenv_get_ftz() == (flush != 0));
            CHECK(mxp_fpenv_set_ftz(false));
            const float want = flush ? 0.0f : sub;
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < M * N; i++)
                if (!(C[i] == want) && bad++ == 0) first = i;
            CHECK_MSG(bad == 0, "gemm M=%zu flush=%d threads=%d: %zu of %zu wrong, first "
                      "C[%zu][%zu] = %g, want %g", M, flush, threads, bad, M * N, first / N, first % N,
                      (double)C[first], (double)want);
        }
    }
    free(A);
    free(B);
    free(C);
}

/* x[i] *= 2^-30 over a buffer large enough to be split over the pool:
 * 2^-100 becomes the subnormal 2^-130, or 0 under FTZ, in every range. */
static void test_eltwise_flush(void) {
    const size_t n = (size_t)MXP_AVX512_PAR_MIN * 2 + 17;
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int flush = 0; flush <= 1; flush++) {
        for (size_t i = 0; i < n; i++) x[i] = pow2f(-100);
        CHECK(mxp_fpenv_set_ftz(flush != 0));
        mxp_avx512_scale(x, pow2f(-30), n);
        CHECK(mxp_fpenv_set_ftz(false));
        const float want = flush ? 0.0f : pow2f(-130);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += !(x[i] == want);
        CHECK_MSG(bad == 0, "scale flush=%d: %zu of %zu wrong", flush, bad, n);
    }
    free(x);
}

int main(void) {
    test_pool_stats();
    if (!mxp_fpenv_set_ftz(false)) {
        printf("test_kernel_threads: flush parts skipped (no flush-to-zero mode here)\n");
        return test_finish("test_kernel_threads");
    }
    test_pool_flush();
    if (mxp_avx512_usable(mxp_cpu_features_get())) {
        test_gemm_flush(128); /* the packed path */
        test_gemm_flush(32);  /* the small-M path */
        test_eltwise_flush();
    } else {
        printf("test_kernel_threads: AVX-512 parts skipped (CPU cannot run them)\n");
    }
    return test_finish("test_kernel_threads");
}
