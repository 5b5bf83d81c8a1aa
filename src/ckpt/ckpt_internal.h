/* ckpt/ckpt_internal.h: pieces shared by the files of the checkpoint
 * module (st_reader.c, st_writer.c, ckpt_meta.c, ckpt_io.c, ckpt_dir.c).
 * Not a public header. */
#ifndef MIXPREC_CKPT_INTERNAL_H
#define MIXPREC_CKPT_INTERNAL_H

#include <mixprec/ckpt.h>

/* Metadata keys the writer owns. */
#define ST_META_CHECKSUMS "checksums"
#define ST_META_CHECKSUM_ALGO "checksum_algorithm"
#define ST_META_HEADER_CRC "header_crc32c"

/* The safetensors dtype name of t ("F32", ...), or NULL. */
const char *ckpt_st_dtype_name(mxp_dtype t);
/* Parse a safetensors dtype name (case-sensitive, as the spec spells it). */
bool ckpt_st_dtype_parse(const char *s, mxp_dtype *out);

/* One tensor as the header CRC sees it. */
typedef struct ckpt_canon_tensor {
    const char *name;
    mxp_dtype dtype;
    int ndim;
    const int64_t *shape;
    uint64_t begin, end;
} ckpt_canon_tensor;

/* CRC32C of the canonical form of a header: every tensor in data order
 * (name, dtype, shape, offsets), then every metadata pair except
 * header_crc32c in ascending key order (strcmp), each field followed by a
 * NUL byte. keys/values: n_meta pairs sorted by key. */
uint32_t ckpt_header_crc(const ckpt_canon_tensor *t, int n_tensors, const char *const *keys,
                         const char *const *values, int n_meta);

/* "%08x" of a CRC into buf[9]; parse it back (exactly 8 hex digits). */
void ckpt_crc_hex(uint32_t crc, char buf[9]);
bool ckpt_crc_parse(const char *s, uint32_t *out);

/* Count of non-finite elements of a tensor's data (any alignment), and
 * the fast all-finite test (vectorized for aligned 32/16-bit data). */
size_t ckpt_count_nonfinite(mxp_dtype t, const void *data, size_t n);
bool ckpt_all_finite(mxp_dtype t, const void *data, size_t n);

/* Data position as metadata JSON, and back (validated). */
char *ckpt_position_to_json(const mxp_data_position *p);
bool ckpt_position_from_json(const char *s, mxp_data_position *p, char *why, size_t n);

/* The scaler's state and config as metadata JSON (mxp_free). */
char *ckpt_scaler_to_json(bool enabled, const mxp_scaler_state *st, const mxp_scaler_config *c);

/* The resolved config as a JSON object text {"key": "value"} that
 * mxp_config_apply_override reproduces exactly (mxp_free). */
char *ckpt_config_to_json(const mxp_config *c);
/* An integer key of the stored config ("training.batch_size"); false when
 * no config is recorded or the key is absent or not an integer. */
bool ckpt_config_int(const mxp_st_file *f, const char *key, int64_t *out);

/* Read only the header of a safetensors file and copy the __metadata__
 * value of key into buf (truncated to n). MXP_ERR_FORMAT when absent. */
mxp_status ckpt_read_meta_value(const char *path, const char *key, char *buf, size_t n,
                                mxp_error *err);

#endif /* MIXPREC_CKPT_INTERNAL_H */
