/* src/data/dataset_internal.h: what the dataset readers (dataset_npz.c,
 * dataset_st.c, dataset_h5.c) and checks (dataset_check.c, transitions.c) share with the dataset object (dataset.c). Not installed. */
#ifndef MIXPREC_DATASET_INTERNAL_H
#define MIXPREC_DATASET_INTERNAL_H

#include <mixprec/dataset.h>

/* Set the label that errors and mxp_dataset_label name (copied). */
mxp_status ds_set_label(mxp_dataset *d, const char *label, mxp_error *err);
/* As mxp_dataset_add, but takes ownership of data (an mxp_calloc block of
 * exactly the shape's bytes): kept on success, freed on error. */
mxp_status ds_add_owned(mxp_dataset *d, const char *name, mxp_array_dtype dtype, int ndim,
                        const int64_t *shape, void *data, mxp_error *err);
/* Element count of a shape, with overflow and empty checks:
 * MXP_ERR_FORMAT (code) naming label/name when a dimension is < 1 ("empty")
 * or the byte size overflows. */
mxp_status ds_shape_bytes(const char *label, const char *name, mxp_array_dtype dtype, int ndim,
                          const int64_t *shape, mxp_status code, int64_t *numel, size_t *bytes,
                          mxp_error *err);

/* Shape as "[2, 3]" into buf [n]; returns buf. */
const char *ds_shape_str(const mxp_array *a, char *buf, size_t n);
/* mxp_dataset_check's world model in the episode layout (obs [E, T+1, S],
 * actions, rewards, optional lengths): every array checked, *o filled. */
mxp_status ds_check_episodes(const mxp_dataset *d, mxp_dataset_layout *o, mxp_error *err);

/* The readers: fill d (labelled with path) from the file's bytes.
 * ds_read_npz takes ownership of fd (an open regular file, closed on
 * return); ds_read_safetensors_fd reads only the bytes the header's
 * entries reach from fd (size bytes, not closed). */
mxp_status ds_read_npz(mxp_dataset *d, const char *path, int fd, size_t size, mxp_error *err);
mxp_status ds_read_safetensors_fd(mxp_dataset *d, const char *path, int fd, size_t size,
                                  mxp_error *err);
/* HDF5 (D4RL top-level datasets, or Minari episode groups as flat
 * transitions), through libhdf5. */
mxp_status ds_read_h5(mxp_dataset *d, const char *path, mxp_error *err);
mxp_status ds_read_safetensors(mxp_dataset *d, const char *path, const unsigned char *buf,
                               size_t size, mxp_error *err);

#endif /* MIXPREC_DATASET_INTERNAL_H */
