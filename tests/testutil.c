/* tests/testutil.c: see testutil.h. */
#include "testutil.h"

#include <mixprec/ckpt.h>
#include <mixprec/dataset.h>

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

static void put_be32(FILE *f, uint32_t v) {
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

/* An unsigned-byte IDX file dir/name of dims[0..nd). */
static bool write_idx(const char *dir, const char *name, int nd, const uint32_t *dims,
                      bool labels) {
    char p[1024];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return false;
    FILE *f = fopen(p, "wb");
    if (!f) return false;
    unsigned char magic[4] = {0, 0, 0x08, (unsigned char)nd};
    fwrite(magic, 1, 4, f);
    size_t n = 1;
    for (int i = 0; i < nd; i++) {
        put_be32(f, dims[i]);
        n *= dims[i];
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        fputc(labels ? (int)((h >> 16) % 10) : (int)(h >> 24), f);
    }
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}

bool test_write_fashion_idx(const char *dir) {
    const uint32_t tr[3] = {256, 6, 6}, te[3] = {64, 6, 6}, trl[1] = {256}, tel[1] = {64};
    return mkdir(dir, 0755) == 0 && write_idx(dir, "train-images-idx3-ubyte", 3, tr, false) &&
           write_idx(dir, "train-labels-idx1-ubyte", 1, trl, true) &&
           write_idx(dir, "t10k-images-idx3-ubyte", 3, te, false) &&
           write_idx(dir, "t10k-labels-idx1-ubyte", 1, tel, true);
}

mxp_status test_build_config(const char *const *base, size_t n_base, const char *const *extra,
                             size_t n_extra, mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    for (size_t i = 0; s == MXP_OK && i < n_base; i++)
        s = mxp_config_apply_override(b, base[i], err);
    for (size_t i = 0; s == MXP_OK && i < n_extra; i++)
        s = mxp_config_apply_override(b, extra[i], err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s;
}

bool test_have_numpy(void) {
    return system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0;
}

int test_run_python(const char *src_dir, const char *script, const char *dir) {
    char cmd[2048];
    if (snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/%s %s", src_dir, script, dir) >=
        (int)sizeof cmd)
        return 128;
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

void test_expect_dataset_error(const char *path, const char *name, const char *text) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    mxp_status s = mxp_dataset_read(path, &d, &err);
    if (s == MXP_OK) s = mxp_dataset_check(d, MXP_DATASET_WORLD_MODEL, NULL, &err);
    mxp_dataset_destroy(d);
    CHECK_MSG(s == MXP_ERR_FORMAT, "%s: status %d, expected MXP_ERR_FORMAT (%s)", name, (int)s,
              err.msg);
    CHECK_MSG(strstr(err.msg, text) != NULL, "%s: message '%s' lacks '%s'", name, err.msg, text);
    if (s != MXP_OK && strstr(err.msg, text)) printf("  ok %-24s %s\n", name, err.msg);
}

bool test_same_tensors(const char *a, const char *b) {
    mxp_error err = {0};
    mxp_st_file *fa = NULL, *fb = NULL;
    bool ok = mxp_st_file_read(a, &fa, &err) == MXP_OK && mxp_st_file_read(b, &fb, &err) == MXP_OK;
    ok = ok && mxp_st_file_num_tensors(fa) == mxp_st_file_num_tensors(fb) &&
         mxp_st_file_num_tensors(fa) > 0;
    for (int i = 0; ok && i < mxp_st_file_num_tensors(fa); i++) {
        const mxp_st_tensor *ta = mxp_st_file_tensor(fa, i);
        const mxp_st_tensor *tb = mxp_st_file_find(fb, ta->name);
        ok = tb && ta->nbytes == tb->nbytes && memcmp(ta->data, tb->data, ta->nbytes) == 0;
        if (!ok) fprintf(stderr, "tensor %s differs\n", ta->name);
    }
    mxp_st_file_destroy(fa);
    mxp_st_file_destroy(fb);
    return ok;
}

static mxp_status fwd_spec(void *s, mxp_model_spec *o, mxp_error *e) {
    mxp_workload_provider *in = s;
    return in->model_spec(in->self, o, e);
}
static int64_t fwd_num(void *s) {
    mxp_workload_provider *in = s;
    return in->num_train(in->self);
}
static mxp_status fwd_fill(void *s, int slot, const uint32_t *idx, int64_t n, mxp_batch *o,
                           mxp_error *e) {
    mxp_workload_provider *in = s;
    return in->fill_batch(in->self, slot, idx, n, o, e);
}
static void fwd_sig(void *s, char *b, size_t n) {
    mxp_workload_provider *in = s;
    in->data_signature(in->self, b, n);
}
static void fwd_destroy(void *s) {
    mxp_workload_provider *in = s;
    if (in->destroy) in->destroy(in->self);
}

mxp_workload_provider test_wrap_provider(mxp_workload_provider *in) {
    return (mxp_workload_provider){.self = in, .name = in->name, .model_spec = fwd_spec,
                                   .num_train = fwd_num, .rows_per_sample = 1,
                                   .shuffle_stream = in->shuffle_stream, .fill_batch = fwd_fill,
                                   .data_signature = fwd_sig, .destroy = fwd_destroy};
}
