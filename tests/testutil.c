/* tests/testutil.c: see testutil.h. */
#include "testutil.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

void *test_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

uint32_t test_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

void test_rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            test_rm_rf(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

bool test_quick(void) {
    const char *q = getenv("MIXPREC_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

bool test_write_file(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return false;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, bytes, f) == bytes;
    if (f) ok = fclose(f) == 0 && ok;
    return ok;
}

bool test_read_file(const char *dir, const char *name, void *p, size_t bytes) {
    char path[1024];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return false;
    FILE *f = fopen(path, "rb");
    bool ok = f && fread(p, 1, bytes, f) == bytes;
    if (f) fclose(f);
    return ok;
}
