/* ckpt/st_writer.c: safetensors writer with checksums and atomic,
 * crash-safe replacement of the target file.
 *
 * Entry points: mxp_st_writer_create / _destroy / _add_meta / _add_tensor /
 * _write, mxp_st_set_io_fault (tests).
 *
 * Layout: tensors by decreasing element size (stable), so each stays
 * aligned to its element size, as the reference writer does; the header is
 * compact JSON padded with spaces to a multiple of 8 bytes.
 * Durability (the rename dance of ext4/XFS practice, see also LWN "Ensuring
 * data reaches disk"): write DIR/.NAME.tmp-PID-N, fsync it, close, rename
 * over DIR/NAME, fsync DIR. Readers see the old file or the whole new one.
 * Tensor bytes are written straight from the caller's buffers; buffers that
 * are adjacent in memory (the slabs of a model) go out in one write().
 */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct wtensor {
    char *name;
    mxp_dtype dtype;
    int ndim;
    int64_t shape[MXP_ST_MAX_DIMS];
    const unsigned char *data;
    size_t nbytes;
    uint64_t begin, end;
    size_t order;
} wtensor;

struct mxp_st_writer {
    wtensor *t;
    int n, cap;
    char **mk, **mv;
    int nm, capm;
};

/* ---- fault injection (tests only; process-wide, not thread-safe) -------- */

static struct {
    mxp_io_fault kind;
    uint64_t after;
    int errnum;
    uint64_t written;
} g_fault;

void mxp_st_set_io_fault(mxp_io_fault kind, uint64_t after_bytes, int errno_value) {
    g_fault.kind = (unsigned)kind < MXP_IO_FAULT_COUNT ? kind : MXP_IO_FAULT_NONE;
    g_fault.after = after_bytes;
    g_fault.errnum = errno_value ? errno_value : EIO;
    g_fault.written = 0;
}

static bool fault(mxp_io_fault k) {
    if (g_fault.kind != k) return false;
    errno = g_fault.errnum;
    return true;
}

/* ---- building ---------------------------------------------------------- */

mxp_status mxp_st_writer_create(mxp_st_writer **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_st_writer_create: NULL");
    *out = mxp_calloc(1, sizeof **out);
    return *out ? MXP_OK : mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "safetensors writer");
}

void mxp_st_writer_destroy(mxp_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) mxp_free(w->t[i].name);
    for (int i = 0; i < w->nm; i++) {
        mxp_free(w->mk[i]);
        mxp_free(w->mv[i]);
    }
    mxp_free(w->t);
    mxp_free(w->mk);
    mxp_free(w->mv);
    mxp_free(w);
}

/* Grow an array of `size`-byte items to hold one more; false on OOM. */
static bool grow(void **arr, int n, int *cap, size_t size) {
    if (n < *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    void *na = mxp_calloc((size_t)nc, size);
    if (!na) return false;
    if (n) memcpy(na, *arr, (size_t)n * size);
    mxp_free(*arr);
    *arr = na;
    *cap = nc;
    return true;
}

static mxp_status set_meta(mxp_st_writer *w, const char *key, const char *value, mxp_error *err) {
    for (int i = 0; i < w->nm; i++)
        if (strcmp(w->mk[i], key) == 0) {
            char *v = mxp_strdup(value);
            if (!v) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metadata '%s'", key);
            mxp_free(w->mv[i]);
            w->mv[i] = v;
            return MXP_OK;
        }
    int cap = w->capm;
    if (!grow((void **)&w->mk, w->nm, &cap, sizeof *w->mk) ||
        !grow((void **)&w->mv, w->nm, &w->capm, sizeof *w->mv))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metadata '%s'", key);
    char *k = mxp_strdup(key), *v = mxp_strdup(value);
    if (!k || !v) {
        mxp_free(k);
        mxp_free(v);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "metadata '%s'", key);
    }
    w->mk[w->nm] = k;
    w->mv[w->nm++] = v;
    return MXP_OK;
}

mxp_status mxp_st_writer_add_meta(mxp_st_writer *w, const char *key, const char *value,
                                  mxp_error *err) {
    if (!w || !key || !value)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_st_writer_add_meta: NULL");
    if (!strcmp(key, ST_META_CHECKSUMS) || !strcmp(key, ST_META_CHECKSUM_ALGO) ||
        !strcmp(key, ST_META_HEADER_CRC))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "metadata key '%s' is reserved for the writer's checksums", key);
    return set_meta(w, key, value, err);
}

mxp_status mxp_st_writer_add_tensor(mxp_st_writer *w, const char *name, mxp_dtype dtype, int ndim,
                                    const int64_t *shape, const void *data, mxp_error *err) {
    if (!w || !name || !name[0] || (ndim > 0 && !shape))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_st_writer_add_tensor: NULL or empty argument");
    if (!mxp_dtype_info(dtype))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "tensor '%s': dtype %d unknown", name,
                             (int)dtype);
    if (ndim < 0 || ndim > MXP_ST_MAX_DIMS)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "tensor '%s': %d dims; accepted: 0..%d",
                             name, ndim, MXP_ST_MAX_DIMS);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "tensor '%s' added twice", name);
    size_t numel = 1, nbytes;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || !mxp_size_mul(numel, (size_t)shape[d], &numel))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "tensor '%s': shape[%d]=%lld negative or overflowing", name, d,
                                 (long long)shape[d]);
    if (!mxp_size_mul(numel, mxp_dtype_info(dtype)->size, &nbytes))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "tensor '%s': size overflows", name);
    if (nbytes && !data)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "tensor '%s': data is NULL", name);
    if (!grow((void **)&w->t, w->n, &w->cap, sizeof *w->t))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "tensor '%s'", name);
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = mxp_strdup(name);
    if (!t->name) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "tensor '%s'", name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
    t->nbytes = nbytes;
    t->order = (size_t)w->n++;
    return MXP_OK;
}

static int cmp_layout(const void *a, const void *b) {
    const wtensor *x = a, *y = b;
    size_t sx = mxp_dtype_info(x->dtype)->size, sy = mxp_dtype_info(y->dtype)->size;
    if (sx != sy) return sx > sy ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_kv(const void *a, const void *b, void *ctx) {
    char **k = ctx;
    return strcmp(k[*(const int *)a], k[*(const int *)b]);
}

/* Place the tensors, add the checksum metadata and build the header text
 * (padded to a multiple of 8). *out: mxp_free. */
static mxp_status build_header(mxp_st_writer *w, char **out, size_t *out_len, mxp_error *err) {
    qsort(w->t, (size_t)w->n, sizeof *w->t, cmp_layout);
    uint64_t at = 0;
    json_t *sums = json_object();
    if (!sums) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "header");
    for (int i = 0; i < w->n; i++) {
        wtensor *t = &w->t[i];
        t->begin = at;
        at += t->nbytes;
        t->end = at;
        char hex[9];
        ckpt_crc_hex(mxp_crc32c(0, t->data, t->nbytes), hex);
        json_object_set_new(sums, t->name, json_string(hex));
    }
    char *sums_text = json_dumps(sums, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(sums);
    mxp_status s = sums_text ? set_meta(w, ST_META_CHECKSUMS, sums_text, err)
                             : mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checksums");
    free(sums_text);
    if (s == MXP_OK) s = set_meta(w, ST_META_CHECKSUM_ALGO, "crc32c", err);
    if (s != MXP_OK) return s;

    /* header CRC over the canonical form: metadata sorted by key */
    int *idx = mxp_calloc((size_t)w->nm + 1, sizeof *idx);
    const char **ks = mxp_calloc((size_t)w->nm + 1, sizeof *ks);
    const char **vs = mxp_calloc((size_t)w->nm + 1, sizeof *vs);
    ckpt_canon_tensor *ct = mxp_calloc((size_t)w->n + 1, sizeof *ct);
    if (!idx || !ks || !vs || !ct) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "header");
    if (s == MXP_OK) {
        for (int i = 0; i < w->nm; i++) idx[i] = i;
        qsort_r(idx, (size_t)w->nm, sizeof *idx, cmp_kv, w->mk);
        for (int i = 0; i < w->nm; i++) {
            ks[i] = w->mk[idx[i]];
            vs[i] = w->mv[idx[i]];
        }
        for (int i = 0; i < w->n; i++)
            ct[i] = (ckpt_canon_tensor){w->t[i].name,  w->t[i].dtype, w->t[i].ndim,
                                        w->t[i].shape, w->t[i].begin, w->t[i].end};
        char hex[9];
        ckpt_crc_hex(ckpt_header_crc(ct, w->n, ks, vs, w->nm), hex);
        s = set_meta(w, ST_META_HEADER_CRC, hex, err);
    }
    mxp_free(idx);
    mxp_free(ks);
    mxp_free(vs);
    mxp_free(ct);
    if (s != MXP_OK) return s;

    json_t *root = json_object(), *meta = json_object();
    bool ok = root && meta;
    for (int i = 0; ok && i < w->nm; i++)
        ok = !json_object_set_new(meta, w->mk[i], json_string(w->mv[i]));
    if (ok)
        ok = !json_object_set_new(root, "__metadata__", meta);
    else if (meta)
        json_decref(meta);
    for (int i = 0; ok && i < w->n; i++) {
        const wtensor *t = &w->t[i];
        json_t *e = json_object(), *shape = json_array(), *off = json_array();
        ok = e && shape && off;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = !json_array_append_new(shape, json_integer(t->shape[d]));
        ok = ok && !json_array_append_new(off, json_integer((json_int_t)t->begin)) &&
             !json_array_append_new(off, json_integer((json_int_t)t->end));
        ok = ok && !json_object_set_new(e, "dtype", json_string(ckpt_st_dtype_name(t->dtype)));
        ok = ok && !json_object_set_new(e, "shape", shape);
        shape = NULL;
        ok = ok && !json_object_set_new(e, "data_offsets", off);
        off = NULL;
        ok = ok && !json_object_set_new(root, t->name, e);
        e = NULL;
        if (shape) json_decref(shape);
        if (off) json_decref(off);
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    if (root) json_decref(root);
    if (!text) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "safetensors header");
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    if (padded > MXP_ST_MAX_HEADER) {
        free(text);
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "safetensors header of %zu bytes exceeds "
                             "the %llu-byte limit",
                             padded, (unsigned long long)MXP_ST_MAX_HEADER);
    }
    char *h = mxp_calloc(padded + 1, 1);
    if (!h) {
        free(text);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "safetensors header");
    }
    memcpy(h, text, len);
    memset(h + len, ' ', padded - len);
    free(text);
    *out = h;
    *out_len = padded;
    return MXP_OK;
}

/* ---- atomic file replacement ------------------------------------------- */

/* write() all of buf, retrying on EINTR and partial writes. */
static bool write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        if (g_fault.kind == MXP_IO_FAULT_WRITE) {
            if (g_fault.written >= g_fault.after) {
                fault(MXP_IO_FAULT_WRITE);
                return false;
            }
            if (chunk > g_fault.after - g_fault.written)
                chunk = (size_t)(g_fault.after - g_fault.written);
        }
        ssize_t r = write(fd, p, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO;
            return false;
        }
        g_fault.written += (uint64_t)r;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

mxp_status mxp_st_writer_write(mxp_st_writer *w, const char *path, mxp_error *err) {
    if (!w || !path || !path[0])
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_st_writer_write: NULL or empty path");
    size_t plen = strlen(path);
    if (plen + 64 >= MXP_CKPT_PATH_MAX)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%.200s...: path longer than %d bytes", path,
                             MXP_CKPT_PATH_MAX - 64);
    /* the rename below replaces whatever path names: only a regular file
     * (or nothing) may be replaced, never a device node, FIFO or directory */
    struct stat pst;
    if (stat(path, &pst) == 0 && !S_ISREG(pst.st_mode))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%.200s exists and is not a regular file (a device, FIFO, socket "
                             "or directory, or a link to one); accepted: a new path or a "
                             "regular file to replace",
                             path);
    char dir[MXP_CKPT_PATH_MAX], base[MXP_CKPT_PATH_MAX], tmp[MXP_CKPT_PATH_MAX + 64];
    memcpy(dir, path, plen + 1);
    memcpy(base, path, plen + 1);
    const char *d = dirname(dir), *b = basename(base);
    static unsigned counter;
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp-%ld-%u", d, b, (long)getpid(),
             __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));

    char *header = NULL;
    size_t hlen = 0;
    mxp_status s = build_header(w, &header, &hlen, err);
    if (s != MXP_OK) return s;

    g_fault.written = 0;
    const char *what = "create";
    int fd =
        fault(MXP_IO_FAULT_OPEN) ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    if (ok) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
        what = "write";
        ok = write_all(fd, len8, 8) && write_all(fd, header, hlen);
        for (int i = 0; ok && i < w->n;) {
            const unsigned char *start = w->t[i].data;
            size_t n = w->t[i].nbytes;
            int j = i + 1;
            while (j < w->n && w->t[j].data == start + n) n += w->t[j++].nbytes;
            ok = n == 0 || write_all(fd, start, n);
            i = j;
        }
        if (ok) {
            what = "fsync";
            ok = !fault(MXP_IO_FAULT_FSYNC) && fsync(fd) == 0;
        }
        int e = errno;
        if (close(fd) != 0 && ok) {
            what = "close";
            ok = false;
        } else {
            errno = e;
        }
        if (ok) {
            what = "rename";
            ok = !fault(MXP_IO_FAULT_RENAME) && rename(tmp, path) == 0;
        }
        if (!ok) {
            e = errno;
            unlink(tmp);
            errno = e;
        }
    }
    mxp_free(header);
    if (!ok)
        return mxp_error_set(err, MXP_ERR_IO,
                             "%s: cannot %s the checkpoint (temp file %s): %s; any previous "
                             "file at this path is untouched",
                             path, what, tmp, strerror(errno));
    int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        int e = errno;
        if (dfd >= 0) close(dfd);
        return mxp_error_set(err, MXP_ERR_IO,
                             "%s: written, but fsync of directory %s failed: %s (the rename may "
                             "not survive a power loss)",
                             path, d, strerror(e));
    }
    close(dfd);
    return MXP_OK;
}
