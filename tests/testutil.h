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
