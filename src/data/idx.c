/* data/idx.c: reader for IDX files (the MNIST / Fashion-MNIST format),
 * plain or gzip-compressed.
 *
 * Entry points: mxp_idx_read, mxp_idx_free (contract in
 * include/mixprec/classifier.h).
 *
 * Files are read through zlib's gzread, which passes plain files through
 * unchanged, so one code path serves both. The body is read in chunks
 * into a buffer that grows toward the size the header announces, so a
 * header that claims gigabytes for a small (truncated or hostile) file
 * never allocates more than what the file actually holds plus one chunk.
 * Every failure names the path and what was wrong.
 * Reference: the format description at yann.lecun.com/exdb/mnist.
 */
#include <mixprec/data.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_CHUNK ((size_t)1 << 20)

/* Name of an IDX element type code, or NULL when the code is not one. */
static const char *idx_type_name(unsigned code) {
    switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return NULL;
    }
}

/* zlib's gzerror text is "PATH: what"; keep only "what". */
static const char *zmsg(gzFile f, int *zerr, const char *path) {
    const char *m = gzerror(f, zerr);
    size_t n = strlen(path);
    if (strncmp(m, path, n) == 0 && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
    return m;
}

/* Read up to n bytes; returns the count read (< n only at end of data),
 * or -1 on a read or decompression error (message in *why). */
static long long read_full(gzFile f, const char *path, void *buf, size_t n, const char **why) {
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > (size_t)1 << 30) want = (size_t)1 << 30;
        int r = gzread(f, (unsigned char *)buf + got, (unsigned)want);
        if (r < 0) {
            int zerr = 0;
            const char *m = zmsg(f, &zerr, path);
            *why = (zerr == Z_ERRNO) ? strerror(errno) : m;
            return -1;
        }
        if (r == 0) {
            /* gzread reports a truncated gzip stream at its end through
             * gzerror (Z_BUF_ERROR) rather than a negative return. */
            int zerr = 0;
            const char *m = zmsg(f, &zerr, path);
            if (zerr != Z_OK && zerr != Z_STREAM_END) {
                *why = m;
                return -1;
            }
            break;
        }
        got += (size_t)r;
    }
    return (long long)got;
}

void mxp_idx_free(mxp_idx *x) {
    if (!x) return;
    mxp_free(x->data);
    memset(x, 0, sizeof *x);
}

/* Parse and check the header; on success fill ndims, dims, count. */
static mxp_status read_header(gzFile f, const char *path, mxp_idx *x, mxp_error *err) {
    unsigned char magic[4];
    const char *why = NULL;
    long long r = read_full(f, path, magic, 4, &why);
    if (r < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "IDX file '%s': read error in the header (corrupt gzip data?): %s",
                             path, why);
    if (r < 4)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s' is truncated: %lld of the 4 magic bytes present",
                             path, r);
    if (magic[0] != 0 || magic[1] != 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s': bad magic %02x %02x %02x %02x; an IDX file starts "
                             "with two zero bytes, a type code and the number of dimensions",
                             path, magic[0], magic[1], magic[2], magic[3]);
    const char *tname = idx_type_name(magic[2]);
    if (!tname)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s': unknown element type code 0x%02X; accepted: 0x08 "
                             "(unsigned byte) [0x09, 0x0B-0x0E are IDX types mixprec does not read]",
                             path, magic[2]);
    if (magic[2] != 0x08)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "IDX file '%s': element type 0x%02X (%s) is not supported; "
                             "accepted: 0x08 (unsigned byte)",
                             path, magic[2], tname);
    int nd = magic[3];
    if (nd < 1 || nd > MXP_IDX_MAX_DIMS)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s': %d dimensions; accepted: 1..%d", path, nd,
                             MXP_IDX_MAX_DIMS);
    unsigned char dimb[4 * MXP_IDX_MAX_DIMS];
    r = read_full(f, path, dimb, (size_t)nd * 4, &why);
    if (r < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "IDX file '%s': read error in the header (corrupt gzip data?): %s",
                             path, why);
    if (r < (long long)nd * 4)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s' is truncated in its header: %lld of the %d "
                             "dimension bytes present",
                             path, r, nd * 4);
    uint64_t count = 1;
    x->ndims = nd;
    for (int i = 0; i < nd; i++) {
        const unsigned char *p = dimb + 4 * i;
        uint64_t d = ((uint64_t)p[0] << 24) | ((uint64_t)p[1] << 16) | ((uint64_t)p[2] << 8) |
                     (uint64_t)p[3];
        if (d == 0)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "IDX file '%s': dimension %d is 0; accepted: >= 1", path, i);
        x->dims[i] = (int64_t)d;
        count *= d; /* both factors < 2^33 after the check below: no wrap */
        if (count > MXP_IDX_MAX_ELEMENTS)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "IDX file '%s': the dimensions announce more than %llu "
                                 "elements; accepted: at most %llu",
                                 path, (unsigned long long)MXP_IDX_MAX_ELEMENTS,
                                 (unsigned long long)MXP_IDX_MAX_ELEMENTS);
    }
    x->count = (size_t)count;
    return MXP_OK;
}

/* Read exactly x->count body bytes, growing the buffer chunk by chunk, then
 * require end of file. */
static mxp_status read_body(gzFile f, const char *path, mxp_idx *x, mxp_error *err) {
    size_t cap = x->count < IDX_CHUNK ? x->count : IDX_CHUNK;
    size_t have = 0;
    uint8_t *buf = mxp_calloc(cap, 1);
    if (!buf)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "IDX file '%s': out of memory", path);
    const char *why = NULL;
    while (have < x->count) {
        if (have == cap) {
            size_t ncap = cap * 2 < x->count ? cap * 2 : x->count;
            uint8_t *nb = mxp_calloc(ncap, 1);
            if (!nb) {
                mxp_free(buf);
                return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                                     "IDX file '%s': out of memory for %zu bytes", path, ncap);
            }
            memcpy(nb, buf, have);
            mxp_free(buf);
            buf = nb;
            cap = ncap;
        }
        long long r = read_full(f, path, buf + have, cap - have, &why);
        if (r < 0) {
            mxp_free(buf);
            return mxp_error_set(err, MXP_ERR_FORMAT, "IDX file '%s': read error after %zu data "
                                 "bytes (corrupt or cut gzip data?): %s", path, have, why);
        }
        have += (size_t)r;
        if (have < cap) break; /* end of data */
    }
    if (have < x->count) {
        mxp_free(buf);
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s' is truncated: the header announces %zu data bytes, "
                             "the file holds %zu",
                             path, x->count, have);
    }
    unsigned char extra[256];
    long long r = read_full(f, path, extra, sizeof extra, &why);
    if (r != 0) {
        mxp_free(buf);
        if (r < 0)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "IDX file '%s': read error after the data (corrupt gzip "
                                 "trailer?): %s", path, why);
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "IDX file '%s' has trailing bytes after the %zu data bytes the "
                             "header announces (%s%lld extra)",
                             path, x->count, r == (long long)sizeof extra ? ">= " : "", r);
    }
    x->data = buf;
    return MXP_OK;
}

mxp_status mxp_idx_read(const char *path, mxp_idx *out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_idx_read: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_idx_read: path is empty; accepted: an IDX file path");
    /* fstat before the first read: a FIFO is refused, not waited on */
    int fd = -1;
    mxp_status os = mxp_open_regular(path, 0, "IDX file", &fd, err);
    if (os != MXP_OK) return os;
    errno = 0;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return mxp_error_set(err, MXP_ERR_IO, "cannot open IDX file '%s': %s", path,
                             errno ? strerror(errno) : "out of memory");
    }
    mxp_idx x;
    memset(&x, 0, sizeof x);
    mxp_status s = read_header(f, path, &x, err);
    if (s == MXP_OK) s = read_body(f, path, &x, err);
    gzclose(f);
    if (s != MXP_OK) {
        mxp_idx_free(&x);
        return s;
    }
    *out = x;
    return MXP_OK;
}
