/* tests/testutil.c: see testutil.h. */
#include "testutil.h"

#include <stdarg.h>

int test_failures = 0;
int test_checks = 0;

void test_fail(const char *file, int line, const char *fmt, ...) {
    test_failures++;
    if (test_failures > 50) return; /* keep logs readable */
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int test_finish(const char *name) {
    printf("%s: %d checks, %d failures\n", name, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

bool test_close(double got, double ref, double atol, double rtol) {
    if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got)) return got == ref;
    return fabs(got - ref) <= atol + rtol * fabs(ref);
}

const char *test_errmsg(const mxp_error *err) { return err ? err->msg : ""; }
