/* mixprec/dataset.h: the user's own data, a set of named N-d arrays.
 *
 * A dataset holds arrays by name, each with an element type (float32,
 * float64, int32, int64, bool), a shape of 0..8 dimensions (C order) and its data,
 * owned by the dataset (copied from the caller or read from a file).
 * Created from memory (mxp_dataset_create + mxp_dataset_add: plain pointers,
 * a dtype enum, ndim and an int64 shape, as a ctypes binding passes them)
 * or from a file (mxp_dataset_read):
 *   safetensors  8-byte little-endian header length N, N bytes of JSON
 *                {name: {dtype: F32|F64|I32|I64, shape, data_offsets}},
 *                "__metadata__" ignored, raw little-endian data
 *                (github.com/huggingface/safetensors, README "Format")
 *   .npz         a zip archive of NumPy .npy members as numpy.savez and
 *                numpy.savez_compressed write it (stored or deflated, read
 *                through libzip); member "x.npy" is array "x"; .npy format
 *                versions 1.0/2.0/3.0, descr '<f4' '<f8' '<i4' '<i8',
 *                fortran_order False (numpy.lib.format); '|b1' (bool)
 *   HDF5         the top-level datasets of a D4RL file, or Minari's
 *                episode_<k> groups concatenated into flat transitions
 *                (read through libhdf5; dataset_h5.c)
 * The format is chosen by the file's first bytes ("PK\3\4": zip,
 * "\x89HDF\r\n\x1a\n": HDF5, else safetensors). Every array of a file or an
 * add is checked on the way in: no empty array (a zero dimension), no
 * NaN/Inf in float arrays, bool bytes 0 or 1, data size
 * exactly what the shape says. Errors name the file (or "memory"), the array
 * and what is accepted; nothing is kept of a file that fails.
 *
 * mxp_dataset_check validates the arrays a workload needs (docs/data.md):
 *   world model  episodes: obs [E, T+1, S], actions [E, T, A], rewards
 *                [E, T] float; optional lengths [E] int, 1 <= lengths[e]
 *                <= T: episode e has lengths[e] transitions, the rest is
 *                padding (any finite value); or flat transitions: obs
 *                [N, ...], actions [N, ...], rewards [N] float, optional
 *                next_obs [N, ...], flags terminals / timeouts / dones [N]
 *                (bool, int or float 0/1), aliases observations, states,
 *                next_observations, next_states, terminations,
 *                truncations; episodes end where a flag is set (and where
 *                next_obs[i] != obs[i+1])
 *   classifier   x [N, D] float, y [N] int in [0, C); C = max(y) + 1 over
 *                y and y_val; optional x_val [M, D] / y_val [M]
 *   regressor    x [N, D] float, y [N, K] float; optional x_val / y_val
 */
#ifndef MIXPREC_DATASET_H
#define MIXPREC_DATASET_H

#include <mixprec/base.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mxp_array_dtype {
    MXP_ARRAY_F32,
    MXP_ARRAY_F64,
    MXP_ARRAY_I32,
    MXP_ARRAY_I64,
    MXP_ARRAY_BOOL, /* one byte, 0 or 1: flags such as terminals/timeouts/dones */
    MXP_ARRAY_DTYPE_COUNT
} mxp_array_dtype;

/* "float32", "float64", "int32", "int64", "bool"; NULL when t is invalid. */
MXP_API const char *mxp_array_dtype_name(mxp_array_dtype t);
/* Bytes per element (1, 4 or 8); 0 when t is invalid. */
MXP_API size_t mxp_array_dtype_size(mxp_array_dtype t);

#define MXP_ARRAY_MAX_DIMS 8
#define MXP_ARRAY_NAME_MAX 128 /* bytes of a name, terminator included */

typedef struct mxp_array {
    const char *name;
    mxp_array_dtype dtype;
    int ndim;
    int64_t shape[MXP_ARRAY_MAX_DIMS];
    int64_t numel;    /* product of shape (1 for ndim 0) */
    const void *data; /* [numel] elements of dtype, 64-byte aligned */
} mxp_array;

/* Element i of a as double / int64 (float arrays: truncated toward zero). */
MXP_API double mxp_array_get_f64(const mxp_array *a, int64_t i);
MXP_API int64_t mxp_array_get_i64(const mxp_array *a, int64_t i);

typedef struct mxp_dataset mxp_dataset;

/* An empty dataset labelled "memory". */
MXP_API mxp_status mxp_dataset_create(mxp_dataset **out, mxp_error *err);
/* Free everything; NULL is a no-op. */
MXP_API void mxp_dataset_destroy(mxp_dataset *d);
/* Copy an array into d. name: 1..127 bytes, not already in d; dtype valid;
 * 0 <= ndim <= 8; every shape[i] >= 1 (MXP_ERR_INVALID_ARG "empty"
 * otherwise); data non-NULL; float data all finite (MXP_ERR_NONFINITE
 * naming the array and the first bad index). d unchanged on error. */
MXP_API mxp_status mxp_dataset_add(mxp_dataset *d, const char *name, mxp_array_dtype dtype,
                                   int ndim, const int64_t *shape, const void *data,
                                   mxp_error *err);
/* Read a safetensors or .npz file (see above). MXP_ERR_IO when it cannot be
 * read; MXP_ERR_FORMAT when it is malformed, truncated, big-endian, Fortran
 * order, of an unsupported dtype, holds NaN/Inf or no array (a bad file is
 * a usage error: `mixprec train` exits 2). *out is set only on success. */
MXP_API mxp_status mxp_dataset_read(const char *path, mxp_dataset **out, mxp_error *err);

/* The file path it was read from, or "memory". */
MXP_API const char *mxp_dataset_label(const mxp_dataset *d);
MXP_API int mxp_dataset_num_arrays(const mxp_dataset *d);
/* Array i in the order added (files: name order); NULL out of range. */
MXP_API const mxp_array *mxp_dataset_array(const mxp_dataset *d, int i);
MXP_API const mxp_array *mxp_dataset_find(const mxp_dataset *d, const char *name);

typedef enum mxp_dataset_kind {
    MXP_DATASET_WORLD_MODEL,
    MXP_DATASET_CLASSIFIER,
    MXP_DATASET_REGRESSOR,
    MXP_DATASET_KIND_COUNT
} mxp_dataset_kind;

/* "world_model", "classifier", "regressor". */
MXP_API const char *mxp_dataset_kind_name(mxp_dataset_kind k);

/* What mxp_dataset_check found. */
typedef struct mxp_dataset_layout {
    /* world model */
    int64_t episodes;     /* E */
    int64_t max_steps;    /* T */
    int64_t state_dim;    /* S */
    int64_t action_dim;   /* A */
    int64_t transitions;  /* sum of the episode lengths (E*T without lengths) */
    bool has_lengths;
    bool flat;            /* flat transitions (obs [N, ...], episode ends from flags) */
    int64_t rows;         /* flat: N rows; episode layout: E*T */
    int64_t dropped_episodes; /* flat: episodes without a transition, not counted in E */
    /* supervised */
    int64_t n;            /* N training rows */
    int64_t in_dim;       /* D */
    int64_t out_dim;      /* regressor K; classifier C (number of classes) */
    int64_t n_val;        /* M rows of x_val/y_val, 0 when absent */
} mxp_dataset_layout;

/* Check that d holds the arrays workload k needs with consistent shapes
 * and valid values (see above). Errors (MXP_ERR_FORMAT) name the array and
 * say what is wrong: missing, wrong rank, wrong dtype, a dimension that
 * does not match another array's, a label out of range, a length out of
 * [1, T], a float64 value beyond float32's range. Arrays other than the
 * ones listed are an error too (a misspelt name would otherwise be
 * ignored). *out set only on success (may be NULL). */
MXP_API mxp_status mxp_dataset_check(const mxp_dataset *d, mxp_dataset_kind k,
                                     mxp_dataset_layout *out, mxp_error *err);

/* Convert elements [begin, begin + n) of a float or int array to float32
 * into dst (RNE from float64; ints exactly when |v| <= 2^24). */
MXP_API void mxp_array_to_f32(const mxp_array *a, int64_t begin, int64_t n, float *dst);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_DATASET_H */
