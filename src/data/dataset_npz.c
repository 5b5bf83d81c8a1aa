/* data/dataset_npz.c: NumPy .npz archives (numpy.savez, savez_compressed).
 *
 * Entry point: ds_read_npz (internal). The zip container and its deflate
 * streams go through libzip (Debian libzip-dev), which also checks each
 * member's CRC-32; this file parses only the .npy members.
 * .npy (numpy.lib.format, "NEP 1"): magic "\x93NUMPY", version byte pair
 * (1,0) with a 2-byte or (2,0)/(3,0) with a 4-byte little-endian header
 * length, then a Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and a newline, then the raw data. Accepted descr:
 * '<f4' '<f8' '<i4' '<i8' '|b1' (other '|' or '=' byte orders and big-endian '>' are
 * named errors, as are structured dtypes and Fortran order).
 */
#include "data/dataset_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#define NPY_HEADER_MAX 65536 /* numpy itself refuses larger headers by default */
/* A deflated member may expand at most NPZ_MAX_RATIO times its compressed
 * size, plus NPZ_SLACK bytes (small constant arrays compress far better):
 * memory follows the file's size, not the sizes it declares (Apache POI's
 * ZipSecureFile uses the same 1:100 minimum inflate ratio). */
#define NPZ_MAX_RATIO 100
#define NPZ_SLACK ((zip_uint64_t)1 << 20)
/* Deflated members above this size are decompressed once, unkept, before
 * their array is allocated (read_member). */
#define NPZ_PROBE_MIN ((size_t)16 << 20)

typedef struct npy_header {
    char descr[16];
    int fortran; /* -1 unset, 0, 1 */
    int ndim;    /* -1 unset */
    int64_t shape[MXP_ARRAY_MAX_DIMS];
} npy_header;

/* ---- the header dict ------------------------------------------------------ */

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && isspace((unsigned char)*c->p)) c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted Python string without escapes into buf [n]. */
static bool parse_str(cursor *c, char *buf, size_t n) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    char q = *c->p++;
    size_t k = 0;
    while (c->p < c->end && *c->p != q) {
        /* no escapes, and no control bytes (numpy refuses a descr '<f4' + NUL too) */
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20 || *c->p == 0x7f || k + 1 >= n)
            return false;
        buf[k++] = *c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    buf[k] = '\0';
    return true;
}

static bool parse_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return false;
    c->p += n;
    return true;
}

/* (d0, d1, ...) with an optional trailing comma; () is rank 0. */
static bool parse_shape(cursor *c, npy_header *h) {
    if (!eat(c, '(')) return false;
    h->ndim = 0;
    for (;;) {
        if (eat(c, ')')) return true;
        skip_ws(c);
        if (c->p >= c->end || !isdigit((unsigned char)*c->p)) return false;
        int64_t v = 0;
        while (c->p < c->end && isdigit((unsigned char)*c->p)) {
            if (v > (INT64_MAX - 9) / 10) return false;
            v = v * 10 + (*c->p++ - '0');
        }
        if (*c->p == 'L') c->p++; /* Python 2 longs */
        if (h->ndim >= MXP_ARRAY_MAX_DIMS) return false;
        h->shape[h->ndim++] = v;
        if (!eat(c, ',')) return eat(c, ')');
    }
}

/* Parse the dict; on failure *why names what was wrong. */
static bool parse_dict(const char *s, size_t n, npy_header *h, const char **why) {
    cursor c = {s, s + n};
    h->descr[0] = '\0';
    h->fortran = -1;
    h->ndim = -1;
    *why = "the header is not a Python dict literal";
    if (!eat(&c, '{')) return false;
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_str(&c, key, sizeof key) || !eat(&c, ':')) return false;
        if (strcmp(key, "descr") == 0) {
            if (!parse_str(&c, h->descr, sizeof h->descr)) {
                *why = "'descr' is not a simple dtype string such as '<f4' (no escapes "
                       "or control bytes; structured dtypes are not supported)";
                return false;
            }
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&c, "False"))
                h->fortran = 0;
            else if (parse_word(&c, "True"))
                h->fortran = 1;
            else
                return false;
        } else if (strcmp(key, "shape") == 0) {
            if (!parse_shape(&c, h)) {
                *why = "'shape' is not a tuple of at most 8 non-negative integers";
                return false;
            }
        } else {
            *why = "the header has a key other than descr, fortran_order, shape";
            return false;
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) return false;
            break;
        }
    }
    if (!h->descr[0] || h->fortran < 0 || h->ndim < 0) {
        *why = "the header lacks descr, fortran_order or shape";
        return false;
    }
    return true;
}

static bool parse_descr(const char *d, mxp_array_dtype *out) {
    static const struct {
        const char *s;
        mxp_array_dtype t;
    } k[] = {{"<f4", MXP_ARRAY_F32}, {"<f8", MXP_ARRAY_F64}, {"<i4", MXP_ARRAY_I32},
             {"<i8", MXP_ARRAY_I64}, {"|b1", MXP_ARRAY_BOOL}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(d, k[i].s) == 0) {
            *out = k[i].t;
            return true;
        }
    return false;
}

/* ---- one member ----------------------------------------------------------- */

/* Read exactly n bytes; false on a short read or a libzip error (CRC). */
static bool zread(zip_file_t *zf, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        zip_int64_t r = zip_fread(zf, (char *)buf + got, n - got);
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
}

/* Read and discard n bytes through a bounded scratch buffer. */
static bool zskip(zip_file_t *zf, size_t n) {
    unsigned char scratch[1 << 16];
    while (n > 0) {
        size_t k = n < sizeof scratch ? n : sizeof scratch;
        if (!zread(zf, scratch, k)) return false;
        n -= k;
    }
    return true;
}

static mxp_status read_member(mxp_dataset *d, zip_t *za, zip_uint64_t idx, const char *path,
                              size_t file_size, mxp_error *err) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_SIZE) ||
        !(st.valid & ZIP_STAT_COMP_METHOD))
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: cannot read zip member %llu: %s", path,
                             (unsigned long long)idx, zip_strerror(za));
    const char *mname = st.name;
    size_t mlen = strlen(mname);
    /* the sizes the archive declares, against the file, before any is used */
    if (st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: member '%.100s' uses zip compression method %u; accepted: "
                             "stored or deflate (as numpy.savez / savez_compressed write)",
                             path, mname, (unsigned)st.comp_method);
    if (st.comp_size > file_size ||
        (st.comp_method == ZIP_CM_STORE && st.size != st.comp_size))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: member '%.100s' declares %llu bytes (%llu stored) in a file of "
                             "%zu bytes: truncated or corrupted",
                             path, mname, (unsigned long long)st.size,
                             (unsigned long long)st.comp_size, file_size);
    if (st.comp_method == ZIP_CM_DEFLATE && st.size > NPZ_SLACK &&
        st.size - NPZ_SLACK > st.comp_size * NPZ_MAX_RATIO)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: member '%.100s' declares %llu bytes from %llu compressed (more "
                             "than %d:1); accepted: at most %d:1 beyond the first 1 MiB (a "
                             "zip-bomb guard; numpy.savez writes the arrays uncompressed)",
                             path, mname, (unsigned long long)st.size,
                             (unsigned long long)st.comp_size, NPZ_MAX_RATIO, NPZ_MAX_RATIO);
    if (mlen < 5 || strcmp(mname + mlen - 4, ".npy") != 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: member '%.100s' is not a .npy array (accepted: an .npz as "
                             "numpy.savez / savez_compressed write it)",
                             path, mname);
    char name[MXP_ARRAY_NAME_MAX];
    if (mlen - 4 >= sizeof name)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: member name '%.100s' is too long", path,
                             mname);
    memcpy(name, mname, mlen - 4);
    name[mlen - 4] = '\0';

    zip_file_t *zf = zip_fopen_index(za, idx, 0);
    if (!zf)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%s': cannot open the member: %s",
                             path, name, zip_strerror(za));
    mxp_status s = MXP_OK;
    unsigned char pre[12];
    size_t hl = 0, pre_len = 10;
    char *hdr = NULL;
    void *data = NULL;
    npy_header h;
    const char *why = NULL;
    if (!zread(zf, pre, 10) || memcmp(pre, "\x93NUMPY", 6) != 0) {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s' is truncated or not a .npy file (no \\x93NUMPY magic)",
                          path, name);
        goto done;
    }
    if (pre[6] == 1 && pre[7] == 0) {
        hl = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
        if (!zread(zf, pre + 10, 2)) {
            s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%s' is truncated", path, name);
            goto done;
        }
        pre_len = 12;
        hl = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s': .npy format version %u.%u; accepted: 1.0, 2.0, 3.0",
                          path, name, pre[6], pre[7]);
        goto done;
    }
    if (hl > NPY_HEADER_MAX || !(hdr = mxp_calloc(hl + 1, 1)) || !zread(zf, hdr, hl)) {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s': the .npy header (%zu bytes) is truncated or too long",
                          path, name, hl);
        goto done;
    }
    if (!parse_dict(hdr, hl, &h, &why)) {
        s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%s': %s", path, name, why);
        goto done;
    }
    mxp_array_dtype dt;
    if (h.descr[0] == '>') {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s' is big-endian (descr '%s'); accepted: little-endian '<f4' '<f8' '<i4' '<i8' "
                          "(numpy: a.astype(a.dtype.newbyteorder('<')))",
                          path, name, h.descr);
        goto done;
    }
    if (!parse_descr(h.descr, &dt)) {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s' has dtype '%s'; accepted: float32 '<f4', float64 "
                          "'<f8', int32 '<i4', int64 '<i8', bool '|b1'",
                          path, name, h.descr);
        goto done;
    }
    if (h.fortran) {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s' is in Fortran order; accepted: C order "
                          "(numpy: np.ascontiguousarray(a))",
                          path, name);
        goto done;
    }
    int64_t numel;
    size_t bytes;
    if ((s = ds_shape_bytes(path, name, dt, h.ndim, h.shape, MXP_ERR_FORMAT, &numel, &bytes,
                            err)) != MXP_OK)
        goto done;
    if (st.size != pre_len + hl + bytes) {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s' holds %llu data bytes, its shape needs %zu "
                          "(truncated or padded)",
                          path, name,
                          (unsigned long long)(st.size > pre_len + hl ? st.size - pre_len - hl
                                                                      : 0),
                          bytes);
        goto done;
    }
    char extra;
    bool ok = true;
    if (st.comp_method == ZIP_CM_DEFLATE && bytes > NPZ_PROBE_MIN) {
        /* a large deflated member first proves that its stream holds the
         * bytes it declares (and its CRC), decompressed through a bounded
         * scratch buffer; only then is its array allocated, and the member
         * read again into it: memory follows what the stream really holds */
        ok = zskip(zf, bytes) && zip_fread(zf, &extra, 1) == 0;
        unsigned char skip[12];
        if (ok) {
            zip_fclose(zf);
            if (!(zf = zip_fopen_index(za, idx, 0)) || !zread(zf, skip, pre_len) ||
                !zskip(zf, hl)) {
                s = mxp_error_set(err, MXP_ERR_FORMAT,
                                  "%s: array '%s': cannot reopen the member: %s", path, name,
                                  zip_strerror(za));
                goto done;
            }
        }
    }
    if (ok && !(data = mxp_calloc(bytes, 1))) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: array '%s' (%zu bytes)", path, name,
                          bytes);
        goto done;
    }
    /* libzip checks the member's CRC-32 when the read reaches its end */
    if (!ok || !zread(zf, data, bytes) || zip_fread(zf, &extra, 1) != 0) {
        /* a stream that ends early is no libzip error ("No error") */
        bool none = zip_error_code_zip(zip_file_get_error(zf)) == ZIP_ER_OK;
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: array '%s': its data is truncated or corrupted (%s)", path, name,
                          none ? "the compressed stream ends before the data does"
                               : zip_file_strerror(zf));
        goto done;
    }
    s = ds_add_owned(d, name, dt, h.ndim, h.shape, data, err);
    data = NULL; /* owned by d or freed */
done:
    if (zf) zip_fclose(zf);
    mxp_free(hdr);
    mxp_free(data);
    return s;
}

mxp_status ds_read_npz(mxp_dataset *d, const char *path, int fd, size_t size, mxp_error *err) {
    int zerr = 0;
    /* the descriptor already checked to be a regular file (no reopen by name) */
    zip_t *za = zip_fdopen(fd, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
    if (!za) close(fd); /* zip_fdopen closes it on success only */
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        mxp_status s = mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: not a readable .npz (zip) archive, truncated or "
                                     "corrupted: %s",
                                     path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return s;
    }
    mxp_status s = MXP_OK;
    zip_int64_t n = zip_get_num_entries(za, 0);
    for (zip_int64_t i = 0; s == MXP_OK && i < n; i++)
        s = read_member(d, za, (zip_uint64_t)i, path, size, err);
    zip_discard(za);
    return s;
}
