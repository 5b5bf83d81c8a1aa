/* tests/test_idx.c: the IDX reader and the Fashion-MNIST loader.
 *
 * Crafted files in a temporary directory, written byte by byte from the
 * format description (the oracle), plain and gzip-compressed: a valid file
 * reads back exactly; every malformed one (bad magic, unknown or
 * unsupported type, zero or too many dimensions, absurd sizes, truncated
 * header or body, trailing bytes, corrupt or cut gzip stream, missing file)
 * fails with the right status and a message naming the file and the
 * problem, and leaves the output zeroed. A header announcing 4 GiB in a
 * 20-byte file must fail fast without allocating it. The dataset loader
 * is checked on crafted directories (count mismatch, bad label, wrong
 * rank) and, when the Debian package is installed, on the real files.
 */
#include <mixprec/classifier.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"

static char g_dir[256];

static void path_of(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
}

/* Header bytes of an IDX file: magic 00 00 type ndims, then big-endian dims. */
static size_t make_header(unsigned char *h, unsigned type, int nd, const uint32_t *dims) {
    h[0] = 0;
    h[1] = 0;
    h[2] = (unsigned char)type;
    h[3] = (unsigned char)nd;
    for (int i = 0; i < nd; i++) {
        h[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        h[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        h[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        h[7 + 4 * i] = (unsigned char)dims[i];
    }
    return 4 + 4 * (size_t)nd;
}

static void write_file(const char *name, const void *a, size_t na, const void *b, size_t nb,
                       bool gz) {
    char p[512];
    path_of(p, sizeof p, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        CHECK(f != NULL);
        if (!f) return;
        if (na) CHECK(gzwrite(f, a, (unsigned)na) == (int)na);
        if (nb) CHECK(gzwrite(f, b, (unsigned)nb) == (int)nb);
        CHECK(gzclose(f) == Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        CHECK(f != NULL);
        if (!f) return;
        if (na) CHECK(fwrite(a, 1, na, f) == na);
        if (nb) CHECK(fwrite(b, 1, nb, f) == nb);
        CHECK(fclose(f) == 0);
    }
}

/* Read `name`, expect status st and every needle in the message (the path
 * always), and a zeroed output. */
static void expect_fail(const char *name, mxp_status st, const char *needle) {
    char p[512];
    path_of(p, sizeof p, name);
    mxp_idx x;
    memset(&x, 0x5a, sizeof x);
    mxp_error err = {0};
    mxp_status s = mxp_idx_read(p, &x, &err);
    CHECK_MSG(s == st, "%s: status %s, expected %s (%s)", name, mxp_status_name(s),
              mxp_status_name(st), err.msg);
    CHECK_MSG(strstr(err.msg, p) != NULL, "%s: message lacks the path: %s", name, err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", name, needle,
              err.msg);
    CHECK(x.data == NULL && x.count == 0 && x.ndims == 0);
}

static void test_valid(bool gz) {
    unsigned char h[64], body[2 * 3 * 5];
    uint32_t dims[3] = {2, 3, 5};
    size_t hn = make_header(h, 0x08, 3, dims);
    for (size_t i = 0; i < sizeof body; i++) body[i] = (unsigned char)(i * 37 + 11);
    const char *name = gz ? "ok.idx.gz" : "ok.idx";
    write_file(name, h, hn, body, sizeof body, gz);
    char p[512];
    path_of(p, sizeof p, name);
    mxp_idx x;
    mxp_error err = {0};
    CHECK_OK(mxp_idx_read(p, &x, &err), &err);
    CHECK(x.ndims == 3 && x.dims[0] == 2 && x.dims[1] == 3 && x.dims[2] == 5);
    CHECK(x.count == sizeof body);
    CHECK(x.data && memcmp(x.data, body, sizeof body) == 0);
    mxp_idx_free(&x);
    CHECK(x.data == NULL && x.count == 0);
    mxp_idx_free(&x); /* idempotent */
    mxp_idx_free(NULL);
}

static void test_malformed(void) {
    unsigned char h[64], body[64];
    memset(body, 7, sizeof body);
    uint32_t d1[1] = {10};

    /* bad magic: first two bytes must be 0 */
    size_t hn = make_header(h, 0x08, 1, d1);
    h[0] = 0x1f;
    h[1] = 0x9d;
    write_file("magic.idx", h, hn, body, 10, false);
    expect_fail("magic.idx", MXP_ERR_FORMAT, "bad magic");

    hn = make_header(h, 0x42, 1, d1);
    write_file("type.idx", h, hn, body, 10, false);
    expect_fail("type.idx", MXP_ERR_FORMAT, "unknown element type code 0x42");

    hn = make_header(h, 0x0D, 1, d1); /* float32: valid IDX, not supported */
    write_file("float.idx", h, hn, body, 40, false);
    expect_fail("float.idx", MXP_ERR_UNSUPPORTED, "float32");

    hn = make_header(h, 0x08, 0, d1);
    write_file("nd0.idx", h, hn, NULL, 0, false);
    expect_fail("nd0.idx", MXP_ERR_FORMAT, "0 dimensions");

    uint32_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    hn = make_header(h, 0x08, 9, d9);
    write_file("nd9.idx", h, hn, body, 1, false);
    expect_fail("nd9.idx", MXP_ERR_FORMAT, "9 dimensions");

    uint32_t dz[2] = {4, 0};
    hn = make_header(h, 0x08, 2, dz);
    write_file("zero.idx", h, hn, NULL, 0, false);
    expect_fail("zero.idx", MXP_ERR_FORMAT, "dimension 1 is 0");

    uint32_t dbig[3] = {0xffffffffu, 0xffffffffu, 2};
    hn = make_header(h, 0x08, 3, dbig);
    write_file("huge.idx", h, hn, body, 4, false);
    expect_fail("huge.idx", MXP_ERR_FORMAT, "more than");

    /* 4 GiB announced (the accepted maximum), 4 bytes present: must say
     * truncated, quickly, without allocating 4 GiB */
    uint32_t d4g[2] = {65536, 65536};
    hn = make_header(h, 0x08, 2, d4g);
    write_file("claims4g.idx", h, hn, body, 4, false);
    expect_fail("claims4g.idx", MXP_ERR_FORMAT, "truncated");
    write_file("claims4g.idx.gz", h, hn, body, 4, true);
    expect_fail("claims4g.idx.gz", MXP_ERR_FORMAT, "truncated");

    write_file("short.idx", h, 2, NULL, 0, false);
    expect_fail("short.idx", MXP_ERR_FORMAT, "truncated");
    write_file("empty.idx", NULL, 0, NULL, 0, false);
    expect_fail("empty.idx", MXP_ERR_FORMAT, "truncated");

    uint32_t d3[3] = {2, 2, 2};
    hn = make_header(h, 0x08, 3, d3);
    write_file("shorthdr.idx", h, 9, NULL, 0, false); /* stops inside the dims */
    expect_fail("shorthdr.idx", MXP_ERR_FORMAT, "header");

    hn = make_header(h, 0x08, 1, d1);
    write_file("body.idx", h, hn, body, 7, false);
    expect_fail("body.idx", MXP_ERR_FORMAT, "truncated");
    write_file("body.idx.gz", h, hn, body, 7, true);
    expect_fail("body.idx.gz", MXP_ERR_FORMAT, "truncated");

    write_file("trail.idx", h, hn, body, 11, false);
    expect_fail("trail.idx", MXP_ERR_FORMAT, "trailing");
    write_file("trail.idx.gz", h, hn, body, 30, true);
    expect_fail("trail.idx.gz", MXP_ERR_FORMAT, "trailing");

    char p[512];
    path_of(p, sizeof p, "missing.idx");
    mxp_idx x;
    mxp_error err = {0};
    CHECK(mxp_idx_read(p, &x, &err) == MXP_ERR_IO);
    CHECK_MSG(strstr(err.msg, p) && strstr(err.msg, "No such file"), "%s", err.msg);
    CHECK(mxp_idx_read("", &x, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_idx_read(p, NULL, &err) == MXP_ERR_INVALID_ARG);
}

/* A gzip stream with a damaged deflate body, and one cut short. */
static void test_bad_gzip(void) {
    unsigned char h[16], body[4000];
    uint32_t d[1] = {sizeof body};
    size_t hn = make_header(h, 0x08, 1, d);
    mxp_rng r;
    mxp_rng_init(&r, 7);
    for (size_t i = 0; i < sizeof body; i++) body[i] = (unsigned char)mxp_rng_below(&r, 256);
    write_file("good.gz", h, hn, body, sizeof body, true);
    char p[512];
    path_of(p, sizeof p, "good.gz");
    FILE *f = fopen(p, "rb");
    CHECK(f != NULL);
    if (!f) return;
    unsigned char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n > 100 && n < sizeof buf);
    mxp_idx x;
    mxp_error err = {0};
    CHECK_OK(mxp_idx_read(p, &x, &err), &err);
    CHECK(x.count == sizeof body && memcmp(x.data, body, sizeof body) == 0);
    mxp_idx_free(&x);

    unsigned char bad[8192];
    memcpy(bad, buf, n);
    for (size_t i = 40; i < 80; i++) bad[i] ^= 0xA5; /* inside the deflate data */
    write_file("corrupt.gz", bad, n, NULL, 0, false);
    expect_fail("corrupt.gz", MXP_ERR_FORMAT, "corrupt.gz");

    write_file("cut.gz", buf, n / 2, NULL, 0, false);
    expect_fail("cut.gz", MXP_ERR_FORMAT, "cut.gz");

    memcpy(bad, buf, n);
    bad[n - 6] ^= 0xFF; /* CRC32 of the trailer */
    write_file("crc.gz", bad, n, NULL, 0, false);
    expect_fail("crc.gz", MXP_ERR_FORMAT, "crc.gz");
}

/* A crafted Fashion-MNIST directory: n train / m test images of 2x3. */
static void write_dataset(const char *sub, uint32_t n_img, uint32_t n_lab, uint32_t m,
                          unsigned bad_label, int img_rank) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
    CHECK(mkdir(dir, 0700) == 0);
    unsigned char h[64], body[1024];
    for (size_t i = 0; i < sizeof body; i++) body[i] = (unsigned char)(i % 251);
    char name[512];
    for (int split = 0; split < 2; split++) {
        uint32_t ni = split ? m : n_img, nl = split ? m : n_lab;
        uint32_t dims[3] = {ni, 2, 3};
        size_t hn = make_header(h, 0x08, img_rank, dims);
        size_t nb = img_rank == 3 ? (size_t)ni * 6 : (size_t)ni * 2;
        snprintf(name, sizeof name, "%s/%s-images-idx3-ubyte%s", sub, split ? "t10k" : "train",
                 split ? "" : ".gz");
        write_file(name, h, hn, body, nb, !split);
        uint32_t ld[1] = {nl};
        hn = make_header(h, 0x08, 1, ld);
        unsigned char labels[256];
        for (uint32_t i = 0; i < nl; i++) labels[i] = (unsigned char)(i % 10);
        if (!split && bad_label) labels[nl - 1] = (unsigned char)bad_label;
        snprintf(name, sizeof name, "%s/%s-labels-idx1-ubyte", sub, split ? "t10k" : "train");
        write_file(name, h, hn, labels, nl, false);
    }
}

static void test_dataset_loader(void) {
    mxp_error err = {0};
    mxp_fmnist *d = NULL;
    char dir[400];

    write_dataset("ds_ok", 20, 20, 7, 0, 3);
    snprintf(dir, sizeof dir, "%s/ds_ok", g_dir);
    CHECK_OK(mxp_fmnist_load(dir, 0, 0, &d, &err), &err);
    if (d) {
        mxp_image_split tr = mxp_fmnist_train(d), te = mxp_fmnist_test(d);
        CHECK(tr.n == 20 && te.n == 7 && tr.rows == 2 && tr.cols == 3);
        CHECK(tr.images[6] == 6 && tr.labels[13] == 3 && te.labels[6] == 6);
        mxp_fmnist_destroy(d);
    }
    CHECK_OK(mxp_fmnist_load(dir, 5, 3, &d, &err), &err);
    if (d) {
        CHECK(mxp_fmnist_train(d).n == 5 && mxp_fmnist_test(d).n == 3);
        mxp_fmnist_destroy(d);
    }

    write_dataset("ds_count", 20, 19, 7, 0, 3);
    snprintf(dir, sizeof dir, "%s/ds_count", g_dir);
    CHECK(mxp_fmnist_load(dir, 0, 0, &d, &err) == MXP_ERR_FORMAT && d == NULL);
    CHECK_MSG(strstr(err.msg, "20 images") && strstr(err.msg, "19 labels"), "%s", err.msg);

    write_dataset("ds_label", 20, 20, 7, 12, 3);
    snprintf(dir, sizeof dir, "%s/ds_label", g_dir);
    CHECK(mxp_fmnist_load(dir, 0, 0, &d, &err) == MXP_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "train-labels-idx1-ubyte") && strstr(err.msg, "label 12"), "%s",
              err.msg);

    write_dataset("ds_rank", 20, 20, 7, 0, 2);
    snprintf(dir, sizeof dir, "%s/ds_rank", g_dir);
    CHECK(mxp_fmnist_load(dir, 0, 0, &d, &err) == MXP_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "2 dimensions"), "%s", err.msg);

    snprintf(dir, sizeof dir, "%s/nope", g_dir);
    CHECK(mxp_fmnist_load(dir, 0, 0, &d, &err) == MXP_ERR_IO);
    CHECK_MSG(strstr(err.msg, "nope/train-images-idx3-ubyte.gz"), "%s", err.msg);

    /* the real dataset (Debian dataset-fashion-mnist) */
    if (access(MXP_FMNIST_DEFAULT_DIR "/train-labels-idx1-ubyte.gz", R_OK) != 0) {
        printf("note: %s not installed; real-file check skipped\n", MXP_FMNIST_DEFAULT_DIR);
        return;
    }
    CHECK_OK(mxp_fmnist_load(MXP_FMNIST_DEFAULT_DIR, 0, 0, &d, &err), &err);
    if (d) {
        mxp_image_split tr = mxp_fmnist_train(d), te = mxp_fmnist_test(d);
        CHECK(tr.n == 60000 && te.n == 10000 && tr.rows == 28 && tr.cols == 28);
        int64_t count[10] = {0};
        for (int64_t i = 0; i < tr.n; i++) count[tr.labels[i]]++;
        for (int c = 0; c < 10; c++) CHECK(count[c] == 6000); /* balanced, by construction */
        mxp_fmnist_destroy(d);
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_idx_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_valid(false);
    test_valid(true);
    test_malformed();
    test_bad_gzip();
    test_dataset_loader();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return test_finish("test_idx");
}
