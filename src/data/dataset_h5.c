/* data/dataset_h5.c: HDF5 files of transitions, read through libhdf5
 * (Debian libhdf5-dev; the HDF5 C API, docs.hdfgroup.org).
 *
 * Entry point: ds_read_h5 (internal). Two layouts:
 *   D4RL    every top-level dataset becomes the array of its name
 *           (observations, actions, rewards, terminals, timeouts, optional
 *           next_observations); top-level groups (infos/, metadata/) are
 *           not read. mxp_dataset_check then judges the names.
 *   Minari  a root holding groups episode_<k>: each holds observations
 *           [L+1, ...], actions [L, ...], rewards [L], terminations [L] and
 *           truncations [L]; the episodes, in increasing k, are concatenated
 *           into flat transitions obs = observations[:-1], next_obs =
 *           observations[1:], actions, rewards, terminals = terminations,
 *           timeouts = truncations with the episode's last step set (so an
 *           episode always ends at its group's end). Other members of the
 *           root and of the groups (infos/) are not read.
 * Accepted element types: HDF5 floats up to 4 bytes (read as float32) and of
 * 8 bytes (float64), integers (int32, or int64 for 4-byte unsigned and 8-byte
 * signed), and 1-byte enums with values 0/1 (h5py's bool) as bool; byte
 * order and compression (gzip, shuffle, ...) are libhdf5's business. Soft
 * and hard links are followed, external links are refused. HDF5's own error
 * printing is off while a file is read (restored after); its innermost
 * message ends our error text.
 */
#include "data/dataset_internal.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* HDF5 compresses at most ~1000:1 (deflate); a dataset declaring more
 * logical bytes than this many times the file is corrupted. */
#define H5_MAX_RATIO 2048

typedef struct h5ctx {
    const char *path;
    size_t file_size;
    char detail[200]; /* HDF5's innermost error message */
} h5ctx;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
    h5ctx *c = data;
    if (e->desc && e->desc[0]) snprintf(c->detail, sizeof c->detail, "%s", e->desc);
    return 0;
}

/* HDF5's message for the error just raised ("" when none). */
static const char *h5_detail(h5ctx *c) {
    c->detail[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, c);
    H5Eclear2(H5E_DEFAULT);
    return c->detail;
}

/* The type a dataset of HDF5 type `ft` is read as: *dt and the memory type
 * (0: read raw, a 1-byte bool enum). false (err set) when not accepted. */
static mxp_status pick_type(h5ctx *c, const char *name, hid_t ft, mxp_array_dtype *dt,
                            hid_t *mem, mxp_error *err) {
    H5T_class_t cl = H5Tget_class(ft);
    size_t sz = H5Tget_size(ft);
    if (cl == H5T_FLOAT && sz <= 8) {
        *dt = sz <= 4 ? MXP_ARRAY_F32 : MXP_ARRAY_F64;
        *mem = sz <= 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
        return MXP_OK;
    }
    if (cl == H5T_INTEGER && sz <= 8) {
        bool uns = H5Tget_sign(ft) == H5T_SGN_NONE;
        if (sz == 8 && uns)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: dataset '%s' is uint64; accepted: float16/32/64, integers "
                                 "up to int64 / uint32, bool",
                                 c->path, name);
        bool wide = sz == 8 || (sz == 4 && uns);
        *dt = wide ? MXP_ARRAY_I64 : MXP_ARRAY_I32;
        *mem = wide ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32;
        return MXP_OK;
    }
    if (cl == H5T_ENUM && sz == 1) {
        *dt = MXP_ARRAY_BOOL;
        *mem = 0;
        return MXP_OK;
    }
    static const char *const kClass[] = {"integer", "float", "time", "string", "bitfield",
                                         "opaque", "compound", "reference", "enum",
                                         "variable-length", "array"};
    const char *cn = cl >= 0 && (size_t)cl < sizeof kClass / sizeof kClass[0] ? kClass[cl] : "?";
    return mxp_error_set(err, MXP_ERR_FORMAT,
                         "%s: dataset '%s' has HDF5 type class %s (%zu bytes); accepted: float "
                         "(up to 8 bytes), integer, or bool (h5py's 1-byte enum)",
                         c->path, name, cn, sz);
}

/* Open dataset `name` under loc: its dtype, memory type, shape. */
static mxp_status probe(h5ctx *c, hid_t loc, const char *name, const char *label, hid_t *ds,
                        mxp_array_dtype *dt, hid_t *mem, int *ndim, int64_t *shape,
                        mxp_error *err) {
    *ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (*ds < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: cannot open dataset '%s': %s", c->path,
                             label, h5_detail(c));
    hid_t ft = H5Dget_type(*ds), sp = H5Dget_space(*ds);
    mxp_status s = MXP_OK;
    if (ft < 0 || sp < 0) {
        s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: dataset '%s' is unreadable: %s", c->path,
                          label, h5_detail(c));
    } else {
        s = pick_type(c, label, ft, dt, mem, err);
    }
    if (s == MXP_OK) {
        int nd = H5Sget_simple_extent_ndims(sp);
        hsize_t dims[H5S_MAX_RANK];
        if (H5Sget_simple_extent_type(sp) == H5S_NULL || nd < 0 || nd > MXP_ARRAY_MAX_DIMS ||
            H5Sget_simple_extent_dims(sp, dims, NULL) != nd) {
            s = mxp_error_set(err, MXP_ERR_FORMAT,
                              "%s: dataset '%s' has %d dimensions; accepted: 0..%d", c->path,
                              label, nd, MXP_ARRAY_MAX_DIMS);
        } else {
            *ndim = nd;
            for (int i = 0; i < nd; i++) shape[i] = dims[i] > INT64_MAX ? -1 : (int64_t)dims[i];
        }
    }
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    if (s != MXP_OK) {
        H5Dclose(*ds);
        *ds = -1;
    }
    return s;
}

/* Read all of ds into buf (bytes as dtype dt says; mem 0: raw 1-byte enum,
 * checked to be 0/1). */
static mxp_status read_all(h5ctx *c, hid_t ds, const char *label, hid_t mem, void *buf,
                           size_t bytes, mxp_error *err) {
    hid_t ft = mem ? -1 : H5Dget_type(ds);
    herr_t r = H5Dread(ds, mem ? mem : ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    if (ft >= 0) H5Tclose(ft);
    if (r < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: dataset '%s': its data is truncated or corrupted (%s)",
                             c->path, label, h5_detail(c));
    if (!mem) {
        const unsigned char *p = buf;
        for (size_t i = 0; i < bytes; i++)
            if (p[i] > 1)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: dataset '%s' is a 1-byte enum holding %u at flat index "
                                     "%zu; accepted: bool (0 or 1)",
                                     c->path, label, p[i], i);
    }
    return MXP_OK;
}

/* Logical bytes of a dataset, checked against the file (see H5_MAX_RATIO). */
static mxp_status sized(h5ctx *c, const char *label, mxp_array_dtype dt, int ndim,
                        const int64_t *shape, int64_t *numel, size_t *bytes, mxp_error *err) {
    mxp_status s = ds_shape_bytes(c->path, label, dt, ndim, shape, MXP_ERR_FORMAT, numel, bytes,
                                  err);
    if (s == MXP_OK && *bytes / H5_MAX_RATIO > c->file_size)
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: dataset '%s' declares %zu bytes in a %zu-byte file, more than "
                          "any compression gives: corrupted",
                          c->path, label, *bytes, c->file_size);
    return s;
}

/* One whole dataset as array `name` of d. */
static mxp_status read_one(h5ctx *c, mxp_dataset *d, hid_t loc, const char *name,
                           mxp_error *err) {
    hid_t ds;
    mxp_array_dtype dt;
    hid_t mem;
    int ndim;
    int64_t shape[MXP_ARRAY_MAX_DIMS], numel;
    size_t bytes;
    mxp_status s = probe(c, loc, name, name, &ds, &dt, &mem, &ndim, shape, err);
    if (s != MXP_OK) return s;
    void *buf = NULL;
    s = sized(c, name, dt, ndim, shape, &numel, &bytes, err);
    if (s == MXP_OK && !(buf = mxp_calloc(bytes, 1)))
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: dataset '%s' (%zu bytes)", c->path,
                          name, bytes);
    if (s == MXP_OK) s = read_all(c, ds, name, mem, buf, bytes, err);
    H5Dclose(ds);
    if (s != MXP_OK) {
        mxp_free(buf);
        return s;
    }
    return ds_add_owned(d, name, dt, ndim, shape, buf, err);
}

/* What a root member is: 1 dataset, 2 group, 0 other (skipped); external
 * links are an error. */
static mxp_status member_kind(h5ctx *c, hid_t loc, const char *name, int *kind,
                              mxp_error *err) {
    H5L_info_t li;
    if (H5Lget_info(loc, name, &li, H5P_DEFAULT) < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: member '%s' is unreadable: %s", c->path,
                             name, h5_detail(c));
    if (li.type == H5L_TYPE_EXTERNAL)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: member '%s' is an external link; accepted: data in this file",
                             c->path, name);
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    if (o < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: member '%s' is unreadable: %s", c->path,
                             name, h5_detail(c));
    H5I_type_t t = H5Iget_type(o);
    *kind = t == H5I_DATASET ? 1 : t == H5I_GROUP ? 2 : 0;
    H5Oclose(o);
    return MXP_OK;
}

/* Name of root member i into buf [n]. */
static bool member_name(hid_t loc, hsize_t i, char *buf, size_t n) {
    ssize_t len = H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, n, H5P_DEFAULT);
    return len > 0 && (size_t)len < n;
}

/* "episode_<k>" -> k; -1 otherwise. */
static long long episode_id(const char *name) {
    if (strncmp(name, "episode_", 8) != 0 || !name[8]) return -1;
    char *end;
    long long k = strtoll(name + 8, &end, 10);
    return *end || k < 0 ? -1 : k;
}

/* ---- Minari: episode_<k> groups into flat transitions ------------------------ */

typedef struct mep {
    long long id;
    char name[MXP_ARRAY_NAME_MAX];
    int64_t L; /* transitions */
} mep;

static int cmp_mep(const void *a, const void *b) {
    long long x = ((const mep *)a)->id, y = ((const mep *)b)->id;
    return x < y ? -1 : x > y;
}

/* The flat arrays being built: obs, next_obs, actions, rewards (float,
 * dtype of the first episode), terminals, timeouts (bool). */
typedef struct mflat {
    mxp_array_dtype dt[3]; /* observations, actions, rewards */
    int ndim[3];
    int64_t trail[3][MXP_ARRAY_MAX_DIMS]; /* dims after the first */
    int64_t width[3];                     /* elements per row */
    unsigned char *obs, *next, *act, *rew;
    unsigned char *term, *trunc;
} mflat;

static const char *const kMinari[5] = {"observations", "actions", "rewards", "terminations",
                                       "truncations"};

/* Probe episode e's dataset k: rows must be L (+1 for observations), the
 * trailing shape that of episode 0 (recorded when first). */
static mxp_status minari_probe(h5ctx *c, hid_t g, const mep *e, int k, bool first, mflat *m,
                               int64_t *rows, hid_t *ds, hid_t *mem, mxp_array_dtype *dt,
                               mxp_error *err) {
    char label[2 * MXP_ARRAY_NAME_MAX];
    snprintf(label, sizeof label, "%s/%s", e->name, kMinari[k]);
    H5O_type_t ot = H5O_TYPE_UNKNOWN;
    if (H5Lexists(g, kMinari[k], H5P_DEFAULT) <= 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: missing dataset '%s'; accepted: Minari episode groups with "
                             "observations, actions, rewards, terminations, truncations",
                             c->path, label);
    hid_t o = H5Oopen(g, kMinari[k], H5P_DEFAULT);
    if (o >= 0) {
        ot = H5Iget_type(o) == H5I_GROUP ? H5O_TYPE_GROUP : H5O_TYPE_DATASET;
        H5Oclose(o);
    }
    if (ot == H5O_TYPE_GROUP)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: '%s' is a group (a dict or tuple space); accepted: one "
                             "dataset (flatten the space first, docs/data.md)",
                             c->path, label);
    int nd;
    int64_t shape[MXP_ARRAY_MAX_DIMS];
    mxp_status s = probe(c, g, kMinari[k], label, ds, dt, mem, &nd, shape, err);
    if (s != MXP_OK) return s;
    char sb[64];
    int64_t want = k == 0 ? e->L + 1 : e->L;
    bool ok = nd >= 1 && shape[0] == want;
    if (ok && k >= 2) ok = nd == 1 || (nd == 2 && shape[1] == 1);
    if (ok && k < 2 && !first) {
        ok = nd == m->ndim[k];
        for (int i = 1; ok && i < nd; i++) ok = shape[i] == m->trail[k][i];
    }
    if (ok && first && k < 3) {
        m->ndim[k] = nd;
        m->width[k] = 1;
        for (int i = 1; i < nd; i++) m->width[k] *= (m->trail[k][i] = shape[i]);
        m->dt[k] = *dt == MXP_ARRAY_F32 ? MXP_ARRAY_F32 : MXP_ARRAY_F64;
    }
    if (ok && *dt == MXP_ARRAY_BOOL && k < 3) ok = false;
    if (!ok) {
        snprintf(sb, sizeof sb, "%d dimensions", nd);
        H5Dclose(*ds);
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: dataset '%s' (%s, first dimension %lld) does not fit; accepted: "
                             "observations [L+1, ...], actions [L, ...], rewards, terminations, "
                             "truncations [L] (here L = %lld, from actions), the same trailing "
                             "shapes in every episode, float data (flags: bool, int or float 0/1)",
                             c->path, label, sb, nd >= 1 ? (long long)shape[0] : -1LL,
                             (long long)e->L);
    }
    *rows = shape[0];
    return MXP_OK;
}

/* Pass 1 (bufs NULL): lengths and shapes; pass 2: the data at row offset r. */
static mxp_status minari_episode(h5ctx *c, hid_t f, mep *e, bool first, mflat *m, int64_t r,
                                 mxp_error *err) {
    hid_t g = H5Gopen2(f, e->name, H5P_DEFAULT);
    if (g < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: group '%s' is unreadable: %s", c->path,
                             e->name, h5_detail(c));
    mxp_status s = MXP_OK;
    void *tmp = NULL;
    for (int k = 0; k < 5 && s == MXP_OK; k++) {
        hid_t ds = -1, mem;
        mxp_array_dtype dt;
        int64_t rows = 0;
        if (k == 0 && !m->obs) { /* the length comes from the actions */
            hid_t a;
            int nd;
            int64_t sh[MXP_ARRAY_MAX_DIMS];
            if (H5Lexists(g, "actions", H5P_DEFAULT) > 0 &&
                probe(c, g, "actions", "actions", &a, &dt, &mem, &nd, sh, err) == MXP_OK) {
                e->L = nd >= 1 ? sh[0] : 0;
                H5Dclose(a);
            }
            if (e->L < 1) {
                s = mxp_error_set(err, MXP_ERR_FORMAT,
                                  "%s: group '%s' has no readable actions [L >= 1, ...]; "
                                  "accepted: Minari episode groups of at least one step",
                                  c->path, e->name);
                break;
            }
        }
        s = minari_probe(c, g, e, k, first && k < 3 && !m->obs, m, &rows, &ds, &mem, &dt, err);
        if (s != MXP_OK) break;
        if (!m->obs) { /* pass 1 */
            H5Dclose(ds);
            continue;
        }
        int64_t numel = k < 3 ? rows * m->width[k] : rows;
        mxp_array_dtype out = k < 3 ? m->dt[k] : dt;
        size_t esz = mxp_array_dtype_size(out), bytes = (size_t)numel * esz;
        if (!(tmp = mxp_calloc(bytes ? bytes : 1, 1))) {
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: '%s'", c->path, e->name);
        } else {
            char label[2 * MXP_ARRAY_NAME_MAX];
            snprintf(label, sizeof label, "%s/%s", e->name, kMinari[k]);
            hid_t rd = k < 3 ? (out == MXP_ARRAY_F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE) : mem;
            s = read_all(c, ds, label, rd, tmp, rd ? bytes : (size_t)numel, err);
        }
        if (s == MXP_OK && k < 3) {
            size_t row = (size_t)m->width[k] * esz;
            unsigned char *dst = k == 0 ? m->obs : k == 1 ? m->act : m->rew;
            memcpy(dst + (size_t)r * row, tmp, (size_t)e->L * row);
            if (k == 0) memcpy(m->next + (size_t)r * row, (unsigned char *)tmp + row,
                               (size_t)e->L * row);
        } else if (s == MXP_OK) {
            mxp_array a = {.dtype = out, .data = tmp};
            unsigned char *dst = (k == 3 ? m->term : m->trunc) + r;
            for (int64_t i = 0; i < e->L && s == MXP_OK; i++) {
                double v = mxp_array_get_f64(&a, i);
                if (v != 0.0 && v != 1.0)
                    s = mxp_error_set(err, MXP_ERR_FORMAT,
                                      "%s: %s/%s[%lld] = %g; accepted: 0 or 1 (false or true)",
                                      c->path, e->name, kMinari[k], (long long)i, v);
                dst[i] = v != 0.0;
            }
            if (k == 4 && !m->term[r + e->L - 1]) dst[e->L - 1] = 1; /* the group ends here */
        }
        mxp_free(tmp);
        tmp = NULL;
        H5Dclose(ds);
    }
    H5Gclose(g);
    return s;
}

static mxp_status read_minari(h5ctx *c, mxp_dataset *d, hid_t f, hsize_t nlinks, mxp_error *err) {
    mep *eps = mxp_calloc((size_t)nlinks + 1, sizeof *eps);
    if (!eps) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: episodes", c->path);
    size_t n = 0;
    mxp_status s = MXP_OK;
    for (hsize_t i = 0; i < nlinks && s == MXP_OK; i++) {
        int kind = 0;
        if (!member_name(f, i, eps[n].name, sizeof eps[n].name)) continue;
        s = member_kind(c, f, eps[n].name, &kind, err);
        if (s == MXP_OK && kind == 2 && (eps[n].id = episode_id(eps[n].name)) >= 0) n++;
    }
    qsort(eps, n, sizeof *eps, cmp_mep);
    mflat m = {0};
    int64_t N = 0;
    for (size_t i = 0; i < n && s == MXP_OK; i++) {
        s = minari_episode(c, f, &eps[i], i == 0, &m, 0, err);
        if (s == MXP_OK && N > INT64_MAX - eps[i].L)
            s = mxp_error_set(err, MXP_ERR_FORMAT, "%s: the step count overflows", c->path);
        if (s == MXP_OK) N += eps[i].L;
    }
    int64_t sh[3][MXP_ARRAY_MAX_DIMS], flag_shape[1] = {N}, numel;
    size_t bytes[3] = {0}, fb = 0;
    for (int k = 0; k < 3 && s == MXP_OK; k++) {
        sh[k][0] = N;
        for (int i = 1; i < m.ndim[k]; i++) sh[k][i] = m.trail[k][i];
        if (k == 2) m.ndim[k] = 1; /* rewards [N] */
        s = sized(c, kMinari[k], m.dt[k], m.ndim[k], sh[k], &numel, &bytes[k], err);
    }
    if (s == MXP_OK) s = sized(c, "terminations", MXP_ARRAY_BOOL, 1, flag_shape, &numel, &fb, err);
    if (s == MXP_OK) {
        m.obs = mxp_calloc(bytes[0], 1);
        m.next = mxp_calloc(bytes[0], 1);
        m.act = mxp_calloc(bytes[1], 1);
        m.rew = mxp_calloc(bytes[2], 1);
        m.term = mxp_calloc(fb, 1);
        m.trunc = mxp_calloc(fb, 1);
        if (!m.obs || !m.next || !m.act || !m.rew || !m.term || !m.trunc)
            s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %lld steps", c->path, (long long)N);
    }
    for (size_t i = 0, r = 0; i < n && s == MXP_OK; r += (size_t)eps[i].L, i++)
        s = minari_episode(c, f, &eps[i], false, &m, (int64_t)r, err);
    /* ds_add_owned takes each buffer (kept or freed) */
    unsigned char **bufs[6] = {&m.obs, &m.next, &m.act, &m.rew, &m.term, &m.trunc};
    static const char *const names[6] = {"obs", "next_obs", "actions", "rewards", "terminals",
                                         "timeouts"};
    for (int k = 0; k < 6; k++) {
        int r = k == 0 || k == 1 ? 0 : k == 2 ? 1 : k == 3 ? 2 : -1;
        if (s == MXP_OK)
            s = r >= 0 ? ds_add_owned(d, names[k], m.dt[r], m.ndim[r], sh[r], *bufs[k], err)
                       : ds_add_owned(d, names[k], MXP_ARRAY_BOOL, 1, flag_shape, *bufs[k], err);
        else
            mxp_free(*bufs[k]);
        *bufs[k] = NULL;
    }
    mxp_free(eps);
    return s;
}

static mxp_status read_file(h5ctx *c, mxp_dataset *d, hid_t f, mxp_error *err) {
    H5G_info_t gi;
    if (H5Gget_info(f, &gi) < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: the root group is unreadable: %s",
                             c->path, h5_detail(c));
    char name[MXP_ARRAY_NAME_MAX];
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        if (!member_name(f, i, name, sizeof name))
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: root member %llu: its name is unreadable or longer than "
                                 "%d bytes",
                                 c->path, (unsigned long long)i, MXP_ARRAY_NAME_MAX - 1);
        int kind;
        mxp_status s = member_kind(c, f, name, &kind, err);
        if (s != MXP_OK) return s;
        if (kind == 2 && episode_id(name) >= 0) return read_minari(c, d, f, gi.nlinks, err);
    }
    for (hsize_t i = 0; i < gi.nlinks; i++) {
        int kind;
        mxp_status s = MXP_OK;
        if (!member_name(f, i, name, sizeof name)) continue; /* checked above */
        if ((s = member_kind(c, f, name, &kind, err)) != MXP_OK) return s;
        if (kind == 1 && (s = read_one(c, d, f, name, err)) != MXP_OK) return s;
    }
    return MXP_OK;
}

mxp_status ds_read_h5(mxp_dataset *d, const char *path, mxp_error *err) {
    struct stat st;
    if (stat(path, &st) != 0)
        return mxp_error_set(err, MXP_ERR_IO, "%s: cannot stat the HDF5 file", path);
    h5ctx c = {.path = path, .file_size = (size_t)st.st_size};
    H5E_auto2_t old_fn = NULL;
    void *old_data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    mxp_status s;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "%s: not a readable HDF5 file, truncated or corrupted (%s)", path,
                          h5_detail(&c));
    } else {
        s = read_file(&c, d, f, err);
        H5Fclose(f);
    }
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
    return s;
}
