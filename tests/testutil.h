/* tests/testutil.h: tiny test harness. The exit code is the verdict:
 * every failed CHECK is printed with file:line and counted; test_finish()
 * returns 1 when anything failed. */
#ifndef MIXPREC_TESTUTIL_H
#define MIXPREC_TESTUTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <mixprec/base.h>
#include <mixprec/config.h>
#include <mixprec/run.h>

extern int test_failures;
extern int test_checks;

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Print a summary line; return the process exit code (0 pass, 1 fail). */
int test_finish(const char *name);
/* |got - ref| <= atol + rtol*|ref|, NaN equal to NaN only when both are. */
bool test_close(double got, double ref, double atol, double rtol);
/* The message of an error context, "" for NULL. */
const char *test_errmsg(const mxp_error *err);
/* malloc(n) (at least 1 byte); exits the test with 2 when out of memory. */
void *test_xmalloc(size_t n);
/* The IEEE bits of f. */
uint32_t test_f32_bits(float f);
/* Remove dir and everything below it, best effort (temp dirs of tests). */
void test_rm_rf(const char *dir);
/* Write / read exactly `bytes` of p as the file dir/name (the raw arrays a
 * test exchanges with its Python oracle); true on success. */
bool test_write_file(const char *dir, const char *name, const void *p, size_t bytes);
bool test_read_file(const char *dir, const char *name, void *p, size_t bytes);
/* Whether MIXPREC_TEST_QUICK asks for the quick variant (set, not "" or
 * "0"): the sanitizer and reference-kernel runs of scripts/test.sh. */
bool test_quick(void);
/* A small Fashion-MNIST directory for the run tests: creates dir (mode
 * 0755) and writes the four unsigned-byte IDX files into it, 256 training
 * and 64 test images of 6x6 and their labels (< 10), the values from a
 * hash of the index; true on success. */
bool test_write_fashion_idx(const char *dir);

/* Resolve a config from the defaults plus the overrides base[0..n_base)
 * and then extra[0..n_extra) ("key=value"); the first failure's status
 * (err names the key). */
mxp_status test_build_config(const char *const *base, size_t n_base, const char *const *extra,
                             size_t n_extra, mxp_config *cfg, mxp_error *err);
/* Whether every tensor of the checkpoint (safetensors) files a and b is
 * byte-identical, the same names and at least one; a tensor that differs
 * is named on stderr. */
bool test_same_tensors(const char *a, const char *b);
/* A provider wrapping *in, the FIRST member of the caller's state struct
 * (self is in): model_spec, num_train, fill_batch, data_signature and
 * destroy go to *in, name and shuffle_stream are in's, one row a sample;
 * the caller sets evaluate (and whatever else it injects). */
mxp_workload_provider test_wrap_provider(mxp_workload_provider *in);
/* Whether /usr/bin/python3 imports NumPy (what the Python oracles need). */
bool test_have_numpy(void);
/* Run `/usr/bin/python3 src_dir/script dir` (a test's Python case writer):
 * its exit status, 128 when it did not exit. */
int test_run_python(const char *src_dir, const char *script, const char *dir);
/* CHECK that reading the dataset file path and checking it for the world
 * model fails with MXP_ERR_FORMAT and a message containing text; name is
 * the file's name in the messages. */
void test_expect_dataset_error(const char *path, const char *name, const char *text);
/* CHECK that a test's config builder build(out, extra, n_extra, cfg, err)
 * (an output subdirectory and the extra overrides given as the rest of
 * the arguments) succeeds; err's message is printed when not. */
#define CHECK_BUILD_CFG(build, out, cfg, ...)                                 \
    do {                                                                     \
        const char *ex_[] = {__VA_ARGS__};                                   \
        mxp_error e_ = {0};                                                  \
        CHECK_OK(build(out, ex_, sizeof ex_ / sizeof ex_[0], cfg, &e_), &e_); \
    } while (0)

#define CHECK(cond)                                                          \
    do {                                                                     \
        test_checks++;                                                       \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                 \
    do {                                                                     \
        test_checks++;                                                       \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);             \
    } while (0)

#define CHECK_CLOSE(got, ref, atol, rtol)                                    \
    do {                                                                     \
        double g_ = (double)(got), r_ = (double)(ref);                       \
        test_checks++;                                                       \
        if (!test_close(g_, r_, (atol), (rtol)))                             \
            test_fail(__FILE__, __LINE__, "%s = %.9g, expected %s = %.9g",   \
                      #got, g_, #ref, r_);                                   \
    } while (0)

/* Require a status: prints the error message on mismatch. */
#define CHECK_OK(expr, errp)                                                 \
    do {                                                                     \
        int s_ = (int)(expr);                                                \
        test_checks++;                                                       \
        if (s_ != 0)                                                         \
            test_fail(__FILE__, __LINE__, "%s failed (%d): %s", #expr, s_,   \
                      test_errmsg(errp));                                    \
    } while (0)

#endif
