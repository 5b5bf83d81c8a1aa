/* data/dataset.c: the dataset object (named N-d arrays) and file dispatch.
 *
 * Entry points: mxp_dataset_create / _destroy / _add / _read, the accessors,
 * mxp_array_dtype_name / _size, mxp_array_get_f64 / _i64, mxp_array_to_f32;
 * internal ds_set_label, ds_add_owned, ds_shape_bytes.
 * The readers live in dataset_npz.c, dataset_st.c and dataset_h5.c, the
 * per-workload checks in dataset_check.c (and transitions.c).
 */
#include "data/dataset_internal.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DS_MAX_ARRAYS 64

struct mxp_dataset {
    char *label;                      /* file path or "memory" */
    int n;                            /* arrays held */
    mxp_array arrays[DS_MAX_ARRAYS];  /* name and data owned (mxp_free) */
};

static const struct {
    const char *name;
    size_t size;
} kArrayDtypes[] = {
    [MXP_ARRAY_F32] = {"float32", 4},
    [MXP_ARRAY_F64] = {"float64", 8},
    [MXP_ARRAY_I32] = {"int32", 4},
    [MXP_ARRAY_I64] = {"int64", 8},
    [MXP_ARRAY_BOOL] = {"bool", 1},
};
static_assert(sizeof kArrayDtypes / sizeof kArrayDtypes[0] == MXP_ARRAY_DTYPE_COUNT,
              "one row per mxp_array_dtype");

const char *mxp_array_dtype_name(mxp_array_dtype t) {
    return (unsigned)t < MXP_ARRAY_DTYPE_COUNT ? kArrayDtypes[t].name : NULL;
}

size_t mxp_array_dtype_size(mxp_array_dtype t) {
    return (unsigned)t < MXP_ARRAY_DTYPE_COUNT ? kArrayDtypes[t].size : 0;
}

double mxp_array_get_f64(const mxp_array *a, int64_t i) {
    switch (a->dtype) {
    case MXP_ARRAY_F32: return ((const float *)a->data)[i];
    case MXP_ARRAY_F64: return ((const double *)a->data)[i];
    case MXP_ARRAY_I32: return ((const int32_t *)a->data)[i];
    case MXP_ARRAY_I64: return (double)((const int64_t *)a->data)[i];
    case MXP_ARRAY_BOOL: return ((const uint8_t *)a->data)[i];
    default: return NAN;
    }
}

int64_t mxp_array_get_i64(const mxp_array *a, int64_t i) {
    switch (a->dtype) {
    case MXP_ARRAY_I32: return ((const int32_t *)a->data)[i];
    case MXP_ARRAY_I64: return ((const int64_t *)a->data)[i];
    case MXP_ARRAY_BOOL: return ((const uint8_t *)a->data)[i];
    default: return (int64_t)mxp_array_get_f64(a, i);
    }
}

void mxp_array_to_f32(const mxp_array *a, int64_t begin, int64_t n, float *dst) {
    if (a->dtype == MXP_ARRAY_F32) {
        memcpy(dst, (const float *)a->data + begin, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = (float)mxp_array_get_f64(a, begin + i);
}

mxp_status mxp_dataset_create(mxp_dataset **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dataset_create: out is NULL");
    mxp_dataset *d = mxp_calloc(1, sizeof *d);
    if (!d || !(d->label = mxp_strdup("memory"))) {
        mxp_free(d);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "dataset");
    }
    *out = d;
    return MXP_OK;
}

void mxp_dataset_destroy(mxp_dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        mxp_free((void *)d->arrays[i].name);
        mxp_free((void *)d->arrays[i].data);
    }
    mxp_free(d->label);
    mxp_free(d);
}

mxp_status ds_set_label(mxp_dataset *d, const char *label, mxp_error *err) {
    char *l = mxp_strdup(label);
    if (!l) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "dataset label");
    mxp_free(d->label);
    d->label = l;
    return MXP_OK;
}

const char *mxp_dataset_label(const mxp_dataset *d) { return d->label; }
int mxp_dataset_num_arrays(const mxp_dataset *d) { return d->n; }

const mxp_array *mxp_dataset_array(const mxp_dataset *d, int i) {
    return (i >= 0 && i < d->n) ? &d->arrays[i] : NULL;
}

const mxp_array *mxp_dataset_find(const mxp_dataset *d, const char *name) {
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->arrays[i].name, name) == 0) return &d->arrays[i];
    return NULL;
}

mxp_status ds_shape_bytes(const char *label, const char *name, mxp_array_dtype dtype, int ndim,
                          const int64_t *shape, mxp_status code, int64_t *numel, size_t *bytes,
                          mxp_error *err) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return mxp_error_set(err, code,
                                 "%s: array '%s' is empty (shape[%d] = %lld); every dimension "
                                 "must be >= 1",
                                 label, name, i, (long long)shape[i]);
        if ((uint64_t)shape[i] > SIZE_MAX || !mxp_size_mul(n, (size_t)shape[i], &n) ||
            n > (size_t)INT64_MAX)
            return mxp_error_set(err, code, "%s: array '%s': the element count overflows", label,
                                 name);
    }
    size_t b;
    if (!mxp_size_mul(n, mxp_array_dtype_size(dtype), &b))
        return mxp_error_set(err, code, "%s: array '%s': the byte size overflows", label, name);
    *numel = (int64_t)n;
    *bytes = b;
    return MXP_OK;
}

/* Index of the first non-finite element of a float array (of a byte other
 * than 0 or 1 in a bool array), or -1. */
static int64_t first_nonfinite(mxp_array_dtype t, const void *data, int64_t n) {
    if (t == MXP_ARRAY_BOOL) {
        const uint8_t *p = data;
        for (int64_t i = 0; i < n; i++)
            if (p[i] > 1) return i;
    } else if (t == MXP_ARRAY_F32) {
        const float *p = data;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(p[i])) return i;
    } else if (t == MXP_ARRAY_F64) {
        const double *p = data;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(p[i])) return i;
    }
    return -1;
}

/* Validate name, dtype, rank and (unless data is NULL) finiteness. */
static mxp_status check_add(const mxp_dataset *d, mxp_status code, const char *name,
                            mxp_array_dtype dtype, int ndim, const int64_t *shape, const void *data, int64_t *numel,
                            size_t *bytes, mxp_error *err) {
    const char *L = d->label;
    if (!name || !name[0] || strlen(name) >= MXP_ARRAY_NAME_MAX)
        return mxp_error_set(err, code, "%s: an array name must be 1..%d bytes", L,
                             MXP_ARRAY_NAME_MAX - 1);
    if (mxp_dataset_find(d, name))
        return mxp_error_set(err, code, "%s: array '%s' appears twice", L, name);
    if (d->n >= DS_MAX_ARRAYS)
        return mxp_error_set(err, code, "%s: more than %d arrays", L, DS_MAX_ARRAYS);
    if ((unsigned)dtype >= MXP_ARRAY_DTYPE_COUNT)
        return mxp_error_set(err, code,
                             "%s: array '%s' has an invalid dtype %d; accepted: float32, "
                             "float64, int32, int64, bool",
                             L, name, (int)dtype);
    if (ndim < 0 || ndim > MXP_ARRAY_MAX_DIMS || (ndim > 0 && !shape))
        return mxp_error_set(err, code,
                             "%s: array '%s' has rank %d; accepted: 0..%d dimensions", L, name,
                             ndim, MXP_ARRAY_MAX_DIMS);
    mxp_status s = ds_shape_bytes(L, name, dtype, ndim, shape, code, numel, bytes, err);
    if (s != MXP_OK) return s;
    if (!data)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: array '%s': data is NULL", L, name);
    int64_t bad = first_nonfinite(dtype, data, *numel);
    if (bad >= 0 && dtype == MXP_ARRAY_BOOL)
        return mxp_error_set(err, code,
                             "%s: array '%s' is bool but holds the byte %u at flat index %lld; "
                             "accepted: 0 (false) or 1 (true)",
                             L, name, ((const uint8_t *)data)[bad], (long long)bad);
    if (bad >= 0)
        return mxp_error_set(err, code == MXP_ERR_FORMAT ? MXP_ERR_FORMAT : MXP_ERR_NONFINITE,
                             "%s: array '%s' holds NaN or Inf (first at flat index %lld); "
                             "accepted: finite values only",
                             L, name, (long long)bad);
    return MXP_OK;
}

static void put(mxp_dataset *d, char *name, mxp_array_dtype dtype, int ndim, const int64_t *shape,
                int64_t numel, void *data) {
    mxp_array *a = &d->arrays[d->n++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->dtype = dtype;
    a->ndim = ndim;
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    a->numel = numel;
    a->data = data;
}

mxp_status ds_add_owned(mxp_dataset *d, const char *name, mxp_array_dtype dtype, int ndim,
                        const int64_t *shape, void *data, mxp_error *err) {
    int64_t numel;
    size_t bytes;
    mxp_status s = check_add(d, MXP_ERR_FORMAT, name, dtype, ndim, shape, data, &numel, &bytes, err);
    char *nm = s == MXP_OK ? mxp_strdup(name) : NULL;
    if (s == MXP_OK && !nm) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "array name");
    if (s != MXP_OK) {
        mxp_free(data);
        return s;
    }
    put(d, nm, dtype, ndim, shape, numel, data);
    return MXP_OK;
}

mxp_status mxp_dataset_add(mxp_dataset *d, const char *name, mxp_array_dtype dtype, int ndim,
                           const int64_t *shape, const void *data, mxp_error *err) {
    if (!d) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dataset_add: dataset is NULL");
    int64_t numel;
    size_t bytes;
    mxp_status s =
        check_add(d, MXP_ERR_INVALID_ARG, name, dtype, ndim, shape, data, &numel, &bytes, err);
    if (s != MXP_OK) return s;
    void *copy = mxp_calloc(bytes ? bytes : 1, 1);
    char *nm = mxp_strdup(name);
    if (!copy || !nm) {
        mxp_free(copy);
        mxp_free(nm);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: array '%s' (%zu bytes)", d->label,
                             name, bytes);
    }
    memcpy(copy, data, bytes);
    put(d, nm, dtype, ndim, shape, numel, copy);
    return MXP_OK;
}

static int cmp_array_name(const void *a, const void *b) {
    return strcmp(((const mxp_array *)a)->name, ((const mxp_array *)b)->name);
}

/* Whether the first bytes of a file read as text (printable ASCII, tabs,
 * line ends): a CSV or JSON file given as data. */
static bool text_like(const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(b[i] == '\t' || b[i] == '\n' || b[i] == '\r' || (b[i] >= 0x20 && b[i] < 0x7f)))
            return false;
    return true;
}

mxp_status mxp_dataset_read(const char *path, mxp_dataset **out, mxp_error *err) {
    if (!path || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dataset_read: NULL argument");
    /* fstat before any blocking read: a FIFO or device is refused, not waited on */
    int fd = -1;
    mxp_status s = mxp_open_regular(path, 0, "data file", &fd, err);
    if (s != MXP_OK) return s;
    struct stat st;
    size_t size = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    unsigned char magic[8] = {0};
    ssize_t got = pread(fd, magic, sizeof magic, 0);
    /* a zip's local file header, or the end record alone (an empty archive) */
    bool zip = got >= 4 && (memcmp(magic, "PK\3\4", 4) == 0 || memcmp(magic, "PK\5\6", 4) == 0);
    bool h5 = got == 8 && memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0; /* HDF5 superblock */
    mxp_dataset *d = NULL;
    s = mxp_dataset_create(&d, err);
    if (s == MXP_OK) s = ds_set_label(d, path, err);
    if (s == MXP_OK && zip) {
        s = ds_read_npz(d, path, fd, size, err);
        fd = -1; /* closed by the reader */
    } else if (s == MXP_OK && h5) {
        close(fd); /* libhdf5 opens the path itself (checked regular above) */
        fd = -1;
        s = ds_read_h5(d, path, err);
    } else if (s == MXP_OK) {
        /* what it is instead, where that is plain: a safetensors file begins
         * with a little-endian u64 that no 8 printable bytes can be */
        const char *seen = got == 0                                         ? "an empty file"
                           : got >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0 ? "a single .npy array"
                           : text_like(magic, (size_t)got)                  ? "text (CSV or JSON?)"
                                                                            : NULL;
        if (seen)
            s = mxp_error_set(err, MXP_ERR_FORMAT,
                              "%s: this file looks like %s; accepted: .npz (numpy.savez), "
                              "safetensors or HDF5 (D4RL/Minari layout) holding the arrays of "
                              "docs/data.md",
                              path, seen);
        else
            s = ds_read_safetensors_fd(d, path, fd, size, err);
    }
    if (fd >= 0) close(fd);
    if (s == MXP_OK && d->n == 0)
        s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: the file holds no array", path);
    if (s != MXP_OK) {
        mxp_dataset_destroy(d);
        return s;
    }
    qsort(d->arrays, (size_t)d->n, sizeof d->arrays[0], cmp_array_name);
    *out = d;
    return MXP_OK;
}
