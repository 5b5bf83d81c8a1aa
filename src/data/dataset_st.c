/* data/dataset_st.c: safetensors files of user data.
 *
 * Entry point: ds_read_safetensors (internal).
 * Why not ckpt/st_reader.c: the data module sits below ckpt (docs/design.md "Modules"), and
 * that reader accepts the training formats (F32/F16/BF16/FP8) with checkpoint
 * integrity metadata, while user data is F32/F64/I32/I64 without it. The
 * container checks are the same ones, in the same order, kept small here:
 *   size >= 8; header length N <= 100 MB and <= size - 8; JSON object
 *   without duplicate keys; "__metadata__" skipped; each other entry exactly
 *   {dtype, shape, data_offsets}; dtype F32|F64|I32|I64|BOOL; shape at most 8
 *   dims; end - begin == numel * element size; end <= data bytes
 *   ("truncated" otherwise); no two tensors overlap.
 * From a file (ds_read_safetensors_fd), the 8-byte length is checked
 * before anything else is read, then the header, and only the bytes its
 * entries reach are read: a sparse 1 GiB file with a bad or small header
 * costs no more memory than its header and tensors.
 * Reference: github.com/huggingface/safetensors (README "Format").
 */
#include "data/dataset_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ST_HEADER_MAX (100u << 20)

typedef struct st_span {
    uint64_t begin, end;
    const char *name;
} st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static bool parse_dtype(const char *s, mxp_array_dtype *out) {
    static const struct {
        const char *s;
        mxp_array_dtype t;
    } k[] = {{"F32", MXP_ARRAY_F32}, {"F64", MXP_ARRAY_F64}, {"I32", MXP_ARRAY_I32},
             {"I64", MXP_ARRAY_I64}, {"BOOL", MXP_ARRAY_BOOL}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(s, k[i].s) == 0) {
            *out = k[i].t;
            return true;
        }
    return false;
}

static bool json_u64(const json_t *j, uint64_t *out) {
    if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
    *out = (uint64_t)json_integer_value(j);
    return true;
}

/* One header entry -> one array of d; span filled for the overlap check. */
static mxp_status read_entry(mxp_dataset *d, const char *L, const char *name, json_t *v,
                             const unsigned char *data, size_t data_len, st_span *span,
                             mxp_error *err) {
    if (!json_is_object(v) || json_object_size(v) != 3)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header entry '%.80s' is not {dtype, shape, data_offsets}", L,
                             name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header entry '%.80s' is not {dtype, shape, data_offsets}", L,
                             name);
    mxp_array_dtype dt;
    if (!parse_dtype(json_string_value(jd), &dt))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%.80s' has dtype '%.20s'; accepted: F32, F64, I32, I64, "
                             "BOOL (float32, float64, int32, int64, bool)",
                             L, name, json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > MXP_ARRAY_MAX_DIMS)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%.80s' has %zu dimensions; at most %d",
                             L, name, nd, MXP_ARRAY_MAX_DIMS);
    int64_t shape[MXP_ARRAY_MAX_DIMS];
    for (size_t i = 0; i < nd; i++) {
        uint64_t x;
        if (!json_u64(json_array_get(js, i), &x) || x > INT64_MAX)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: array '%.80s': shape[%zu] is not a non-negative integer", L,
                                 name, i);
        shape[i] = (int64_t)x;
    }
    int64_t numel;
    size_t bytes;
    mxp_status s = ds_shape_bytes(L, name, dt, (int)nd, shape, MXP_ERR_FORMAT, &numel, &bytes, err);
    if (s != MXP_OK) return s;
    uint64_t b, e;
    if (json_array_size(jo) != 2 || !json_u64(json_array_get(jo, 0), &b) ||
        !json_u64(json_array_get(jo, 1), &e) || e < b)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%.80s': data_offsets must be [begin, end], begin <= end",
                             L, name);
    if (e - b != bytes)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%.80s': data_offsets span %llu bytes, its shape and "
                             "dtype need %zu",
                             L, name, (unsigned long long)(e - b), bytes);
    if (e > data_len)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%.80s' ends at byte %llu of the data, the file holds "
                             "%zu: truncated",
                             L, name, (unsigned long long)e, data_len);
    void *copy = mxp_calloc(bytes, 1);
    if (!copy)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: array '%.80s' (%zu bytes)", L, name,
                             bytes);
    memcpy(copy, data + b, bytes);
    *span = (st_span){b, e, name};
    return ds_add_owned(d, name, dt, (int)nd, shape, copy, err);
}

mxp_status ds_read_safetensors(mxp_dataset *d, const char *L, const unsigned char *buf,
                               size_t size, mxp_error *err) {
    if (size < 8)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: %zu bytes: truncated, or neither safetensors nor .npz", L, size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    if (hl > ST_HEADER_MAX || hl > size - 8)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header length %llu runs past the file (%zu bytes) or exceeds "
                             "100 MB: truncated, or neither safetensors nor .npz",
                             L, (unsigned long long)hl, size);
    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        if (root) json_decref(root);
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: the safetensors header is not a JSON object: %s",
                             L, je.text);
    }
    const unsigned char *data = buf + 8 + hl;
    size_t data_len = size - 8 - (size_t)hl;
    size_t n = json_object_size(root);
    st_span *spans = mxp_calloc(n + 1, sizeof *spans);
    mxp_status s = spans ? MXP_OK : mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: header", L);
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (s != MXP_OK) break;
        if (strcmp(key, "__metadata__") == 0) continue;
        s = read_entry(d, L, key, v, data, data_len, &spans[k], err);
        if (s == MXP_OK) k++;
    }
    if (s == MXP_OK) {
        qsort(spans, k, sizeof *spans, cmp_span);
        for (size_t i = 1; i < k; i++)
            if (spans[i].begin < spans[i - 1].end) {
                s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: arrays '%.80s' and '%.80s' overlap", L,
                                  spans[i - 1].name, spans[i].name);
                break;
            }
    }
    mxp_free(spans);
    json_decref(root);
    return s;
}

/* Read exactly n bytes at off; false on a short read or an error. */
static bool pread_all(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got > (1u << 30) ? (1u << 30) : n - got,
                          (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
}

/* The largest data_offsets end among the header's entries (0 when none is
 * well formed: the full parse then names what is wrong). */
static uint64_t header_extent(const unsigned char *hdr, size_t hl) {
    json_t *root = json_loadb((const char *)hdr, hl, JSON_REJECT_DUPLICATES, NULL);
    uint64_t end = 0;
    const char *key;
    json_t *v;
    if (json_is_object(root))
        json_object_foreach(root, key, v) {
            uint64_t e;
            json_t *jo = json_is_object(v) ? json_object_get(v, "data_offsets") : NULL;
            if (json_is_array(jo) && json_array_size(jo) == 2 &&
                json_u64(json_array_get(jo, 1), &e) && e > end)
                end = e;
        }
    if (root) json_decref(root);
    return end;
}

mxp_status ds_read_safetensors_fd(mxp_dataset *d, const char *L, int fd, size_t size,
                                  mxp_error *err) {
    unsigned char head[8] = {0};
    if (size < 8) return ds_read_safetensors(d, L, head, size, err); /* names the size */
    if (!pread_all(fd, head, 8, 0))
        return mxp_error_set(err, MXP_ERR_IO, "%s: cannot read its first 8 bytes", L);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | head[i];
    if (hl > ST_HEADER_MAX || hl > size - 8)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: header length %llu runs past the file (%zu bytes) or exceeds "
                             "100 MB: truncated, or neither safetensors nor .npz",
                             L, (unsigned long long)hl, size);
    /* the header, then as much of the data as its entries reach */
    unsigned char *buf = mxp_calloc((size_t)hl + 8, 1);
    if (!buf) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: header of %llu bytes", L,
                                   (unsigned long long)hl);
    if (!pread_all(fd, buf, (size_t)hl + 8, 0)) {
        mxp_free(buf);
        return mxp_error_set(err, MXP_ERR_IO, "%s: cannot read its %llu-byte header", L,
                             (unsigned long long)hl);
    }
    uint64_t extent = header_extent(buf + 8, (size_t)hl);
    size_t want = extent < size - 8 - hl ? (size_t)(8 + hl + extent) : size;
    if (want > hl + 8) {
        unsigned char *all = mxp_calloc(want, 1);
        bool ok = all && pread_all(fd, all, want, 0);
        mxp_free(buf);
        buf = all;
        if (!ok) {
            mxp_free(all);
            return all ? mxp_error_set(err, MXP_ERR_IO, "%s: cannot read %zu bytes", L, want)
                       : mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %zu bytes", L, want);
        }
    }
    mxp_status s = ds_read_safetensors(d, L, buf, want, err);
    mxp_free(buf);
    return s;
}
