/* tests/test_data_hardening.c: the data readers and the safetensors writer
 * against hostile files (issue 30, items 2, 6, 7, 8), library level.
 *
 * Files are built here byte by byte (a zip writer of a few lines with
 * zlib's crc32 and raw deflate), independent of the readers:
 *   - a FIFO and a link to one: mxp_dataset_read and mxp_idx_read refuse
 *     them at once (a 10 s alarm ends the test if one waits);
 *     mxp_st_writer_write refuses to replace one;
 *   - a stored member whose sizes declare 1 GiB in a file of a few hundred
 *     bytes, a deflated member declaring 1 GiB from 5 KB, a genuine 100+:1
 *     bomb, and a 4 MiB stream declaring 64 MiB (within the ratio): refused
 *     before their sizes are allocated (peak RSS, measured per file in a
 *     child process);
 *   - a 1 GiB sparse safetensors file with a bad length, and one with a
 *     small valid header: the first refused, the second read, neither read
 *     whole (RSS);
 *   - an empty .npz ("holds no array", not a safetensors error), an .npy
 *     descr '<f4' + NUL (refused as numpy refuses it), a deflate stream
 *     that ends before its declared size (named, not libzip's "No error");
 *   - a classifier whose largest label means more classes than rows.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <mixprec/ckpt.h>
#include <mixprec/data.h>
#include <mixprec/dataset.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_data_hard_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

/* Read `name` with mxp_dataset_read in a child process (so each file's
 * peak RSS is its own): its status, message and peak RSS in MB beyond the
 * parent's at the fork; for a dataset that reads, *numel4 is x's element
 * count and x[3]. */
typedef struct child_read {
    int status;
    char msg[MXP_ERROR_MSG_MAX];
    long rss_mb;
    long long numel;
    double x3;
} child_read;

/* This process's resident set now, in KB (/proc/self/statm). */
static long current_rss_kb(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    if (f) fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static void read_in_child(const char *name, child_read *out) {
    memset(out, 0, sizeof *out);
    out->status = -1;
    int fds[2];
    if (pipe(fds) != 0) return;
    const long base_kb = current_rss_kb(); /* the child starts with these pages */
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child_read r = {0};
        mxp_error err = {0};
        mxp_dataset *d = NULL;
        r.status = (int)mxp_dataset_read(path_of(name), &d, &err);
        snprintf(r.msg, sizeof r.msg, "%s", err.msg);
        const mxp_array *a = d ? mxp_dataset_find(d, "x") : NULL;
        if (a && a->numel > 3) {
            r.numel = a->numel;
            r.x3 = mxp_array_get_f64(a, 3);
        }
        mxp_dataset_destroy(d);
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = pid > 0 ? read(fds[0], out, sizeof *out) : -1;
    close(fds[0]);
    int wst = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (pid > 0) wait4(pid, &wst, 0, &ru);
    if (got != (ssize_t)sizeof *out) {
        out->status = -1;
        snprintf(out->msg, sizeof out->msg, "the reader died (wait status %d)", wst);
    }
    out->rss_mb = ru.ru_maxrss > base_kb ? (ru.ru_maxrss - base_kb) / 1024 : 0;
}

static void put16(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A zip of one member `name` holding `data` [n] (method 0 stored or 8
 * deflate, given already compressed as comp [cn]) whose headers declare
 * `size` uncompressed bytes and `crc`. */
static void write_zip(const char *file, const char *name, int method, const void *comp, size_t cn,
                      uint32_t size, uint32_t crc) {
    FILE *f = fopen(path_of(file), "wb");
    if (!f) {
        CHECK_MSG(0, "cannot write %s", file);
        return;
    }
    size_t nl = strlen(name);
    unsigned char lh[30] = {'P', 'K', 3, 4}, cd[46] = {'P', 'K', 1, 2}, end[22] = {'P', 'K', 5, 6};
    put16(lh + 4, 20);
    put16(lh + 8, (unsigned)method);
    put32(lh + 14, crc);
    put32(lh + 18, (uint32_t)cn);
    put32(lh + 22, size);
    put16(lh + 26, (unsigned)nl);
    put16(cd + 4, 20);
    put16(cd + 6, 20);
    put16(cd + 10, (unsigned)method);
    put32(cd + 16, crc);
    put32(cd + 20, (uint32_t)cn);
    put32(cd + 24, size);
    put16(cd + 28, (unsigned)nl);
    put32(cd + 42, 0); /* local header offset */
    put16(end + 8, 1);
    put16(end + 10, 1);
    put32(end + 12, (uint32_t)(46 + nl));
    put32(end + 16, (uint32_t)(30 + nl + cn));
    fwrite(lh, 1, 30, f);
    fwrite(name, 1, nl, f);
    fwrite(comp, 1, cn, f);
    fwrite(cd, 1, 46, f);
    fwrite(name, 1, nl, f);
    fwrite(end, 1, 22, f);
    fclose(f);
}

/* A version 1.0 .npy header for descr (n_descr bytes, may hold a NUL) and
 * a one-dimensional shape, padded to 64 bytes, into buf; its length. */
static size_t npy_header(unsigned char *buf, const char *descr, size_t n_descr, long long n) {
    char d[160];
    int k = snprintf(d, sizeof d, "{'descr': '");
    memcpy(d + k, descr, n_descr);
    k += (int)n_descr;
    k += snprintf(d + k, sizeof d - (size_t)k, "', 'fortran_order': False, 'shape': (%lld,), }",
                  n);
    while ((10 + k + 1) % 64) d[k++] = ' ';
    d[k++] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    put16(buf + 8, (unsigned)k);
    memcpy(buf + 10, d, (size_t)k);
    return 10 + (size_t)k;
}

/* Incompressible bytes (xorshift32). */
static void noise(unsigned char *p, size_t n) {
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

/* Raw deflate of src [n] at level (1 for noise, which does not compress
 * anyway; 9 for a bomb) into a new buffer; *out_n its length. */
static unsigned char *deflate_raw(const unsigned char *src, size_t n, int level, size_t *out_n) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, level, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
    size_t cap = deflateBound(&z, (uLong)n);
    unsigned char *out = test_xmalloc(cap);
    z.next_in = (unsigned char *)src;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    *out_n = z.total_out;
    deflateEnd(&z);
    if (r != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    return out;
}

/* Read `name`; expect status want and `text` in the message, within
 * rss_mb more peak RSS than the test had. */
static void expect_fail(const char *name, mxp_status want, const char *text, long rss_mb) {
    child_read r;
    read_in_child(name, &r);
    CHECK_MSG(r.status == (int)want, "%s: status %d, expected %d (%s)", name, r.status, (int)want,
              r.msg);
    CHECK_MSG(strstr(r.msg, text) != NULL, "%s: message '%s' lacks '%s'", name, r.msg, text);
    CHECK_MSG(r.rss_mb < rss_mb, "%s: peak RSS grew by %ld MB (limit %ld)", name, r.rss_mb,
              rss_mb);
    CHECK_MSG(!strstr(r.msg, "No error"), "%s: message '%s'", name, r.msg);
    if (r.status == (int)want && strstr(r.msg, text))
        printf("  ok %-18s +%ld MB: %s\n", name, r.rss_mb, r.msg);
}

static void test_fifo(void) {
    CHECK(mkfifo(path_of("fifo"), 0600) == 0);
    CHECK(symlink(path_of("fifo"), path_of("fifolink")) == 0);
    alarm(10); /* a reader that waits on the FIFO ends the test here */
    expect_fail("fifo", MXP_ERR_IO, "FIFO", 64);
    expect_fail("fifolink", MXP_ERR_IO, "FIFO", 64);
    /* the built-in classifier's IDX files too */
    mxp_idx idx;
    mxp_error ierr = {0};
    CHECK(mxp_idx_read(path_of("fifolink"), &idx, &ierr) == MXP_ERR_IO);
    CHECK_MSG(strstr(ierr.msg, "FIFO") != NULL, "idx: %s", ierr.msg);
    /* the writer must not replace it (nor open it) */
    mxp_error err = {0};
    mxp_st_writer *w = NULL;
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    CHECK_OK(mxp_st_writer_create(&w, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "v", MXP_DTYPE_F32, 1, shape, v, &err), &err);
    CHECK(mxp_st_writer_write(w, path_of("fifolink"), &err) == MXP_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "not a regular file") != NULL, "writer: %s", err.msg);
    mxp_st_writer_destroy(w);
    struct stat st;
    CHECK(lstat(path_of("fifolink"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(path_of("fifo"), &st) == 0 && S_ISFIFO(st.st_mode));
    alarm(0);
}

static void test_declared_sizes(void) {
    unsigned char hdr[256];
    const long long n = (1ll << 30) / 4; /* 1 GiB of float32 */
    size_t hl = npy_header(hdr, "<f4", 3, n);
    /* stored, declaring 1 GiB in a file of a few hundred bytes */
    write_zip("stored.npz", "x.npy", 0, hdr, hl, (uint32_t)(hl + 4 * (size_t)n), 0);
    expect_fail("stored.npz", MXP_ERR_FORMAT, "declares", 64);
    /* deflated: 5 KB of noise behind a header that declares 1 GiB */
    size_t raw_n = hl + 5000, cn = 0;
    unsigned char *raw = test_xmalloc(raw_n);
    memcpy(raw, hdr, hl);
    noise(raw + hl, raw_n - hl);
    unsigned char *comp = deflate_raw(raw, raw_n, 1, &cn);
    CHECK(comp != NULL);
    if (comp) write_zip("declared.npz", "x.npy", 8, comp, cn, (uint32_t)(hl + 4 * (size_t)n), 0);
    expect_fail("declared.npz", MXP_ERR_FORMAT, "more than 100:1", 64);
    free(comp);
    free(raw);
    /* within the ratio but short: 4 MiB of noise in a member declaring
     * 64 MiB (16:1); the stream is decompressed through a bounded buffer
     * before 64 MiB is allocated */
    const long long np_ = (64ll << 20) / 4;
    hl = npy_header(hdr, "<f4", 3, np_);
    raw_n = hl + ((size_t)4 << 20);
    raw = test_xmalloc(raw_n);
    memcpy(raw, hdr, hl);
    noise(raw + hl, raw_n - hl);
    comp = deflate_raw(raw, raw_n, 1, &cn);
    CHECK(comp != NULL);
    if (comp)
        write_zip("short_big.npz", "x.npy", 8, comp, cn, (uint32_t)(hl + 4 * (size_t)np_),
                  (uint32_t)crc32(0, raw, (uInt)raw_n));
    free(comp);
    free(raw);
    expect_fail("short_big.npz", MXP_ERR_FORMAT, "stream ends before the data does", 24);
    /* and an honest member of that size reads whole after the probe */
    const long long nh = (20ll << 20) / 4;
    hl = npy_header(hdr, "<f4", 3, nh);
    raw_n = hl + 4 * (size_t)nh;
    raw = test_xmalloc(raw_n);
    memcpy(raw, hdr, hl);
    float *fv = (float *)(void *)(raw + hl); /* random floats: deflate keeps ~1:1 */
    uint32_t st = 12345u;
    for (long long i = 0; i < nh; i++) {
        st = st * 1664525u + 1013904223u;
        fv[i] = (float)(st >> 8) * 0x1p-24f - 0.5f;
    }
    const double want3 = fv[3];
    comp = deflate_raw(raw, raw_n, 1, &cn);
    CHECK(comp != NULL);
    if (comp)
        write_zip("big_ok.npz", "x.npy", 8, comp, cn, (uint32_t)raw_n,
                  (uint32_t)crc32(0, raw, (uInt)raw_n));
    free(comp);
    free(raw);
    child_read r;
    read_in_child("big_ok.npz", &r);
    CHECK_MSG(r.status == MXP_OK, "big_ok.npz: %s", r.msg);
    CHECK(r.numel == nh && r.x3 == want3);
    /* a genuine bomb: 64 MiB of zeros (~64 KB deflated), refused unread */
    const long long nb = (64ll << 20) / 4;
    hl = npy_header(hdr, "<f4", 3, nb);
    raw_n = hl + 4 * (size_t)nb;
    raw = calloc(raw_n, 1);
    CHECK(raw != NULL);
    if (!raw) return;
    memcpy(raw, hdr, hl);
    comp = deflate_raw(raw, raw_n, 9, &cn);
    uint32_t crc = (uint32_t)crc32(0, raw, (uInt)raw_n);
    free(raw);
    CHECK(comp != NULL);
    if (comp) write_zip("bomb.npz", "obs.npy", 8, comp, cn, (uint32_t)raw_n, crc);
    free(comp);
    expect_fail("bomb.npz", MXP_ERR_FORMAT, "at most 100:1", 32);
}

static void test_sparse_safetensors(void) {
    /* a bad 8-byte length in a 1 GiB sparse file: refused unread */
    int fd = open(path_of("bad.safetensors"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    unsigned char len8[8] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
    CHECK(fd >= 0 && write(fd, len8, 8) == 8 && ftruncate(fd, 1ll << 30) == 0);
    if (fd >= 0) close(fd);
    expect_fail("bad.safetensors", MXP_ERR_FORMAT, "header length", 32);
    /* a small valid header and tensors, then 1 GiB of holes: read, not whole */
    char h[256];
    int hn = snprintf(h, sizeof h,
                      "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}");
    while (hn % 8) h[hn++] = ' ';
    float x[4] = {1, 2, 3, 4};
    fd = open(path_of("ok.safetensors"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    CHECK(fd >= 0 && write(fd, len8, 8) == 8 && write(fd, h, (size_t)hn) == hn &&
          write(fd, x, sizeof x) == (ssize_t)sizeof x && ftruncate(fd, 1ll << 30) == 0);
    if (fd >= 0) close(fd);
    child_read r;
    read_in_child("ok.safetensors", &r);
    CHECK_MSG(r.status == MXP_OK, "ok.safetensors: %s", r.msg);
    CHECK_MSG(r.rss_mb < 32, "sparse 1 GiB file: peak RSS grew by %ld MB", r.rss_mb);
    CHECK(r.numel == 4 && r.x3 == 4.0);
}

static void test_formats(void) {
    /* an empty archive: numpy.savez() with no arrays is the end record alone */
    unsigned char end[22] = {'P', 'K', 5, 6};
    FILE *f = fopen(path_of("empty.npz"), "wb");
    CHECK(f && fwrite(end, 1, 22, f) == 22);
    if (f) fclose(f);
    expect_fail("empty.npz", MXP_ERR_FORMAT, "holds no array", 16);
    /* descr '<f4' + NUL: numpy refuses it */
    unsigned char buf[256 + 16];
    size_t hl = npy_header(buf, "<f4\0", 4, 4);
    float v[4] = {1, 2, 3, 4};
    memcpy(buf + hl, v, sizeof v);
    write_zip("nul.npz", "x.npy", 0, buf, hl + 16, (uint32_t)(hl + 16),
              (uint32_t)crc32(0, buf, (uInt)(hl + 16)));
    expect_fail("nul.npz", MXP_ERR_FORMAT, "descr", 16);
    /* a deflate stream cut short: the message says so (libzip: "No error") */
    hl = npy_header(buf, "<f4", 3, 4096);
    size_t raw_n = hl + 4 * 4096, cn = 0;
    unsigned char *raw = test_xmalloc(raw_n);
    memcpy(raw, buf, hl);
    noise(raw + hl, raw_n - hl);
    unsigned char *comp = deflate_raw(raw, raw_n, 1, &cn);
    CHECK(comp != NULL && cn > 4000);
    /* keep the first 3/4 of the stream, then end it with an empty final
     * stored block: a valid stream that ends before the data does */
    if (comp) {
        size_t cut = cn * 3 / 4;
        z_stream z;
        memset(&z, 0, sizeof z);
        unsigned char *dec = test_xmalloc(raw_n);
        inflateInit2(&z, -15);
        z.next_in = comp;
        z.avail_in = (uInt)cut;
        z.next_out = dec;
        z.avail_out = (uInt)raw_n;
        inflate(&z, Z_SYNC_FLUSH);
        size_t got = z.total_out;
        inflateEnd(&z);
        size_t cn2 = 0;
        unsigned char *short_comp = deflate_raw(dec, got, 1, &cn2);
        /* the CRC of what the stream holds: libzip finds no error, the
         * data just ends (its message was "No error") */
        if (short_comp)
            write_zip("short.npz", "x.npy", 8, short_comp, cn2, (uint32_t)raw_n,
                      (uint32_t)crc32(0, dec, (uInt)got));
        free(short_comp);
        free(dec);
    }
    free(comp);
    free(raw);
    expect_fail("short.npz", MXP_ERR_FORMAT, "stream ends before the data does", 16);
}

static void test_classes_vs_rows(void) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    float x[8] = {0};
    int64_t y[4] = {0, 1, 1, 1 << 20}, xs[2] = {4, 2}, ys[1] = {4};
    CHECK_OK(mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, xs, x, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "y", MXP_ARRAY_I64, 1, ys, y, &err), &err);
    CHECK(mxp_dataset_check(d, MXP_DATASET_CLASSIFIER, NULL, &err) == MXP_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "1048577 classes") != NULL, "classes: %s", err.msg);
    /* 4 rows, labels 0..3: 4 classes are fine */
    mxp_dataset_destroy(d);
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    int64_t y2[4] = {0, 3, 1, 2};
    mxp_dataset_layout lay;
    CHECK_OK(mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, xs, x, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "y", MXP_ARRAY_I64, 1, ys, y2, &err), &err);
    CHECK_OK(mxp_dataset_check(d, MXP_DATASET_CLASSIFIER, &lay, &err), &err);
    CHECK(lay.out_dim == 4);
    mxp_dataset_destroy(d);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_fifo();
    test_declared_sizes();
    test_sparse_safetensors();
    test_formats();
    test_classes_vs_rows();
    test_rm_rf(g_dir);
    return test_finish("test_data_hardening");
}
