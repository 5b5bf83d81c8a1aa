/* mixprec/ckpt.h: checkpoints as safetensors files, written atomically,
 * verified by checksums, kept by a retention policy, rolled back to.
 *
 * File format (docs/checkpoints.md): the safetensors layout of Hugging Face
 * (github.com/huggingface/safetensors): a little-endian u64 header length N,
 * N bytes of JSON header (padded with spaces to a multiple of 8), then the
 * raw little-endian tensor bytes, row-major, contiguous, covering the rest
 * of the file exactly. The header maps tensor names to {"dtype", "shape",
 * "data_offsets": [begin, end)} and holds a string->string "__metadata__".
 * Dtypes: F32, F16, BF16, F8_E4M3, F8_E5M2 (the spec's names).
 *
 * A mixprec checkpoint holds:
 *   <model tensor name>      ("layers.0.weight", ...): the FP32 master
 *                            weights; in the pure bf16/fp16 modes, which have
 *                            no master, the 16-bit weights (BF16 / F16);
 *   optim.m.<name>, optim.v.<name>: AdamW moments (SGD: optim.m only), F32;
 *   __metadata__: format name + version, step, epoch, precision, the whole
 *   scaler state, RNG state, data position, the resolved config, a CRC32C
 *   per tensor, a CRC32C of the header itself, healthy flag + guard state.
 *
 * Integrity: every reader check names the file and the problem; a file is
 * read only after its header length has been checked against the file size
 * and a 100 MB cap, so no input makes the reader allocate more than the
 * file's own size (plus the JSON tree of at most 100 MB of header).
 * Writes go to a temporary file in the same directory, are fsync'ed,
 * renamed into place, and the directory is fsync'ed: a crash at any moment
 * leaves the previous checkpoint loadable.
 */
#ifndef MIXPREC_CKPT_H
#define MIXPREC_CKPT_H

#include <mixprec/config.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78) --------------
 * mxp_crc32c(0, buf, n) is the standard CRC32C of buf (iSCSI, RFC 3720):
 * CRC32C("123456789") = 0xE3069283. Chain calls by passing the previous
 * result. Uses the SSE4.2 crc32 instruction when the CPU has it (unless
 * MIXPREC_FORCE_ISA=generic), else a slicing-by-8 table; both agree. */
MXP_API uint32_t mxp_crc32c(uint32_t crc, const void *buf, size_t n);
MXP_API uint32_t mxp_crc32c_generic(uint32_t crc, const void *buf, size_t n);
/* "sse4.2" or "generic": what mxp_crc32c uses. */
MXP_API const char *mxp_crc32c_impl(void);

/* ---- safetensors files ------------------------------------------------- */

#define MXP_ST_MAX_HEADER 100000000ull /* as the reference implementation */
#define MXP_ST_MAX_DIMS 8
#define MXP_ST_MAX_DEPTH 8 /* JSON nesting accepted in a header */

typedef struct mxp_st_tensor {
    const char *name;
    mxp_dtype dtype;
    int ndim;
    int64_t shape[MXP_ST_MAX_DIMS];
    size_t numel;        /* product of shape (1 for a scalar) */
    size_t nbytes;       /* numel * dtype size == end - begin */
    uint64_t begin, end; /* data_offsets, relative to the data section */
    const void *data;    /* into the file's buffer; NOT aligned in general */
} mxp_st_tensor;

typedef struct mxp_st_file mxp_st_file;

/* Read and structurally validate a whole file: header length, UTF-8, JSON
 * (no duplicate keys, nesting <= MXP_ST_MAX_DEPTH), dtypes, shapes
 * (overflow-checked), offsets (in bounds, contiguous, covering the data
 * section exactly), metadata values all strings. Checksums are NOT checked
 * here (mxp_st_file_verify). Errors: MXP_ERR_IO (cannot read) or
 * MXP_ERR_FORMAT, the message starting with the path. */
MXP_API mxp_status mxp_st_file_read(const char *path, mxp_st_file **out, mxp_error *err);
/* The same from memory (copied); `label` names it in messages. */
MXP_API mxp_status mxp_st_file_parse(const void *bytes, size_t n, const char *label,
                                     mxp_st_file **out, mxp_error *err);
MXP_API void mxp_st_file_destroy(mxp_st_file *f);

MXP_API const char *mxp_st_file_label(const mxp_st_file *f);
MXP_API size_t mxp_st_file_size(const mxp_st_file *f);
/* Tensors in data order. */
MXP_API int mxp_st_file_num_tensors(const mxp_st_file *f);
MXP_API const mxp_st_tensor *mxp_st_file_tensor(const mxp_st_file *f, int i);
MXP_API const mxp_st_tensor *mxp_st_file_find(const mxp_st_file *f, const char *name);
/* __metadata__ entries (sorted by key), and lookup (NULL when absent). */
MXP_API int mxp_st_file_num_meta(const mxp_st_file *f);
MXP_API const char *mxp_st_file_meta_key(const mxp_st_file *f, int i);
MXP_API const char *mxp_st_file_meta_value(const mxp_st_file *f, int i);
MXP_API const char *mxp_st_file_meta(const mxp_st_file *f, const char *key);
/* Check the integrity metadata written by mxp_st_writer_write: the header
 * CRC32C ("header_crc32c") and every tensor's CRC32C ("checksums"). A file
 * without them fails (MXP_ERR_FORMAT, "no checksums"). */
MXP_API mxp_status mxp_st_file_verify(const mxp_st_file *f, mxp_error *err);

/* Element i of a tensor as FP32 (any alignment). */
MXP_API float mxp_st_tensor_get(const mxp_st_tensor *t, size_t i);

typedef struct mxp_st_writer mxp_st_writer;

MXP_API mxp_status mxp_st_writer_create(mxp_st_writer **out, mxp_error *err);
MXP_API void mxp_st_writer_destroy(mxp_st_writer *w);
/* Add a metadata pair (both copied; a repeated key replaces the value). The
 * keys "checksums", "checksum_algorithm" and "header_crc32c" are reserved. */
MXP_API mxp_status mxp_st_writer_add_meta(mxp_st_writer *w, const char *key, const char *value,
                                          mxp_error *err);
/* Add a tensor (name copied; data BORROWED until write returns). Tensors
 * are laid out by decreasing element size, then in the order added, so
 * every tensor stays aligned to its element size in the file. */
MXP_API mxp_status mxp_st_writer_add_tensor(mxp_st_writer *w, const char *name, mxp_dtype dtype,
                                            int ndim, const int64_t *shape, const void *data,
                                            mxp_error *err);
/* Write atomically to `path` (temp file in the same directory, fsync,
 * rename, fsync of the directory), adding the checksum metadata. On any
 * error the temp file is removed and an existing `path` is untouched. */
MXP_API mxp_status mxp_st_writer_write(mxp_st_writer *w, const char *path, mxp_error *err);

/* Fault injection for tests: make the next writes fail like a full disk or
 * a read-only directory. `after_bytes` (WRITE only): bytes that still
 * succeed. errno_value: ENOSPC, EROFS, EIO, ... Process-wide; NONE clears. */
typedef enum mxp_io_fault {
    MXP_IO_FAULT_NONE,
    MXP_IO_FAULT_OPEN,   /* creating the temp file fails */
    MXP_IO_FAULT_WRITE,  /* write() fails once after_bytes were written */
    MXP_IO_FAULT_FSYNC,  /* fsync of the temp file fails */
    MXP_IO_FAULT_RENAME, /* rename into place fails */
    MXP_IO_FAULT_COUNT
} mxp_io_fault;
MXP_API void mxp_st_set_io_fault(mxp_io_fault kind, uint64_t after_bytes, int errno_value);

/* ---- checkpoints ------------------------------------------------------- */

#define MXP_CKPT_FORMAT_NAME "mixprec-checkpoint"
#define MXP_CKPT_FORMAT_VERSION 1
#define MXP_CKPT_PATH_MAX 1024

/* The data position a checkpoint records: mxp_data_position (train.h). */


/* What a checkpoint's metadata says. */
typedef struct mxp_ckpt_info {
    int format_version;
    int64_t step;           /* trainer steps (training_steps) */
    int64_t optimizer_step; /* applied updates (AdamW t) */
    int64_t skipped_steps;
    int64_t epoch;
    mxp_precision precision; /* mode it was written in */
    mxp_dtype weight_dtype;  /* dtype of the weight tensors */
    mxp_optim_kind optimizer;
    float lr;                  /* learning rate of the last step */
    uint64_t seed, sr_counter; /* RNG: stream seed and stochastic-rounding position */
    bool scaler_enabled;
    mxp_scaler_state scaler;
    mxp_data_position pos;
    bool healthy;
    double saved_at; /* Unix time, seconds */
} mxp_ckpt_info;

/* Decode and validate a checkpoint's metadata (format name, version,
 * every field in range). MXP_ERR_FORMAT naming the file and the key. */
MXP_API mxp_status mxp_ckpt_read_info(const mxp_st_file *f, mxp_ckpt_info *out, mxp_error *err);
/* The stored resolved config as JSON text {"key": "value", ...} (NULL if
 * absent), and applied to a builder as overrides (unknown keys are skipped
 * with a WARN log; bad values are MXP_ERR_CONFIG). */
MXP_API const char *mxp_ckpt_config_text(const mxp_st_file *f);
MXP_API mxp_status mxp_ckpt_apply_config(const mxp_st_file *f, mxp_config_builder *b,
                                         mxp_error *err);

/* The content of a save. All borrowed. */
typedef struct mxp_ckpt_save_args {
    mxp_trainer *trainer;         /* model, optimizer, scaler, counters */
    const mxp_config *config;     /* resolved config to record (may be NULL) */
    const mxp_data_position *pos; /* may be NULL (all zero) */
    bool healthy;                 /* ANDed with: weights, moments and last loss finite */
    const char *guard_state;      /* free text (JSON) from the guards; may be NULL */
    /* The run (run.h) the checkpoint belongs to; each may be NULL (not
     * recorded): metadata "run_id", "workload", "data_signature". */
    const char *run_id, *workload, *data_signature;
    /* Workload metadata (run.h's checkpoint_meta: the user-data
     * standardisation statistics, the GPT vocabulary), JSON object text,
     * metadata "workload_meta"; NULL: not recorded. */
    const char *workload_meta;
    /* The run's own state (run.h: the best validation loss, its epoch, the
     * validations since, whether early stopping ended the run), JSON object
     * text, metadata "run_state"; NULL: not recorded. */
    const char *run_state;
} mxp_ckpt_save_args;

/* Write a checkpoint atomically to path. *healthy_out (may be NULL) gets
 * the healthy flag written. Nothing already on disk is damaged by a failure. */
MXP_API mxp_status mxp_ckpt_save(const char *path, const mxp_ckpt_save_args *a, bool *healthy_out,
                                 mxp_error *err);

/* Full verification of an open file: metadata, checksums, dtypes (weights
 * F32, or the pure mode's 16-bit type; moments F32), finite values, the
 * optimizer tensors matching the weights, and, when `model` is non-NULL,
 * exactly the model's tensor names and shapes (missing / extra / shape
 * errors name the tensor). */
MXP_API mxp_status mxp_ckpt_check(const mxp_st_file *f, const mxp_model *model, mxp_ckpt_info *info,
                                  mxp_error *err);
/* Whether a model of spec could match the file before one is built: the
 * spec's parameter count (mxp_model_spec_num_params, no allocation) must
 * equal the elements of the file's weight tensors (MXP_ERR_FORMAT naming
 * both). A model built after this check holds no more parameters than the
 * file, so verifying against a stored config costs memory in proportion to
 * the file, whatever sizes that config names (issue 15, item 4). */
MXP_API mxp_status mxp_ckpt_check_spec(const mxp_st_file *f, const mxp_model_spec *spec,
                                       mxp_error *err);
/* mxp_st_file_read + mxp_ckpt_check. */
MXP_API mxp_status mxp_ckpt_verify(const char *path, const mxp_model *model, mxp_ckpt_info *info,
                                   mxp_error *err);

/* Load a checkpoint into a trainer (and its model), whatever the precision
 * modes: weights are widened or rounded (RNE) into the trainer's mode (a
 * value that would overflow the target format is an error); moments,
 * counters, RNG position and scaler state are restored (the scaler state
 * only when both sides use loss scaling; else the trainer keeps its own,
 * counters aside). The file is fully verified first: on any error nothing
 * changes. info (may be NULL) receives the metadata, info->pos the data
 * position to hand to the workload. */
MXP_API mxp_status mxp_ckpt_load(const char *path, mxp_trainer *t, mxp_ckpt_info *info,
                                 mxp_error *err);
MXP_API mxp_status mxp_ckpt_load_file(const mxp_st_file *f, mxp_trainer *t, mxp_ckpt_info *info,
                                      mxp_error *err);

/* Initial weights from outside (model.init_from): a safetensors file with
 * exactly the model's tensors, named as PyTorch nn.Sequential's state_dict
 * (layers.<i>.weight [out, in], layers.<i>.bias [out]), F32, BF16 or F16,
 * finite; an export's statistics tensors (x_mean, x_std, y_mean, y_std)
 * are skipped. Written into the master weights (pure modes: rounded RNE into
 * the working weights), then the working copy is recast. Errors
 * (MXP_ERR_FORMAT, NaN/Inf included, or the reader's) name the file and the
 * missing, extra or mis-shaped tensor; on error the weights are unchanged. */
MXP_API mxp_status mxp_ckpt_init_weights(mxp_model *m, const char *path, mxp_error *err);

/* ---- checkpoint directories -------------------------------------------
 * Checkpoints are DIR/ckpt-<step, 12 digits>.safetensors; a checkpoint is
 * marked to keep by a sidecar file <name>.keep. Temp files of interrupted
 * saves (.ckpt-*.tmp-*) are never listed. */

typedef struct mxp_ckpt_entry {
    char path[MXP_CKPT_PATH_MAX];
    int64_t step; /* from the file name */
    bool keep;
} mxp_ckpt_entry;

/* The checkpoints of dir sorted by step, oldest first (*out: mxp_free).
 * A missing directory is an empty list. */
MXP_API mxp_status mxp_ckpt_list(const char *dir, mxp_ckpt_entry **out, size_t *n, mxp_error *err);
/* The newest checkpoint of dir that passes mxp_ckpt_verify (against model
 * when non-NULL) and, when need_healthy, is marked healthy. Newer ones that
 * fail are logged at WARN with the reason. MXP_ERR_IO when none qualifies. */
MXP_API mxp_status mxp_ckpt_find_latest(const char *dir, bool need_healthy, const mxp_model *model,
                                        char *path, size_t path_n, mxp_ckpt_info *info,
                                        mxp_error *err);
/* Mark (or unmark) a checkpoint to be kept by retention. */
MXP_API mxp_status mxp_ckpt_mark_keep(const char *path, bool keep, mxp_error *err);
/* Retention: delete all but the newest keep_last checkpoints, the marked
 * ones, and the newest healthy one (so a rollback target always survives). */
MXP_API mxp_status mxp_ckpt_prune(const char *dir, int64_t keep_last, mxp_error *err);

/* Path of the checkpoint of `step` in dir. */
MXP_API mxp_status mxp_ckpt_path_for(const char *dir, int64_t step, char *buf, size_t n,
                                     mxp_error *err);

typedef struct mxp_ckpt_rollback_result {
    int64_t from_step, to_step;
    char path[MXP_CKPT_PATH_MAX];
} mxp_ckpt_rollback_result;

/* Restore the newest checkpoint of dir that is healthy and verifies against
 * the trainer's model into the trainer; *pos (may be NULL) gets its data
 * position. Newer checkpoints (an abandoned timeline) are renamed to
 * abandoned-ckpt-<step>.safetensors, never deleted. Logged at WARN as
 * "rollback: from step A to step B (PATH): REASON". On error nothing
 * changes. */
MXP_API mxp_status mxp_ckpt_rollback(const char *dir, mxp_trainer *t, const char *reason,
                                     mxp_data_position *pos, mxp_ckpt_rollback_result *res,
                                     mxp_error *err);

/* ---- the checkpoint manager: when to save, where, what to keep --------- */

typedef struct mxp_ckpt_policy {
    char dir[MXP_CKPT_PATH_MAX];
    int64_t every_steps;  /* save when the step count is a multiple; 0: off */
    double every_seconds; /* save when this long since the last save; 0: off */
    int64_t keep_last;    /* >= 1 */
} mxp_ckpt_policy;

/* The policy of a resolved config: checkpoint.dir, a relative one under
 * output.dir (default <output.dir>/checkpoints). */
MXP_API mxp_status mxp_ckpt_policy_from_config(const mxp_config *c, mxp_ckpt_policy *out,
                                               mxp_error *err);

typedef struct mxp_ckpt_manager mxp_ckpt_manager;

/* Create dir (mkdir -p) and remove stale temp files of interrupted saves. */
MXP_API mxp_status mxp_ckpt_manager_create(const mxp_ckpt_policy *p, mxp_ckpt_manager **out,
                                           mxp_error *err);
MXP_API void mxp_ckpt_manager_destroy(mxp_ckpt_manager *m);
MXP_API const char *mxp_ckpt_manager_dir(const mxp_ckpt_manager *m);
/* Health as the guards see it (default healthy, no state); written into
 * the next checkpoints. guard_state is copied (NULL clears it). */
MXP_API void mxp_ckpt_manager_set_health(mxp_ckpt_manager *m, bool healthy,
                                         const char *guard_state);
/* Called after every optimizer step: saves when the policy says so or
 * when `force` (graceful stop, end of a run), then applies retention.
 * *saved (may be NULL) tells whether it saved. */
MXP_API mxp_status mxp_ckpt_manager_after_step(mxp_ckpt_manager *m, mxp_trainer *t,
                                               const mxp_config *cfg, const mxp_data_position *pos,
                                               bool force, bool *saved, mxp_error *err);
/* Record the run's state (mxp_ckpt_save_args.run_state; copied; NULL:
 * none) in the next checkpoints. */
MXP_API mxp_status mxp_ckpt_manager_set_run_state(mxp_ckpt_manager *m, const char *json,
                                                  mxp_error *err);
/* Record the run's id, workload and data signature (run.h) in the next
 * checkpoints (copied; NULL: not recorded). */
MXP_API mxp_status mxp_ckpt_manager_set_run(mxp_ckpt_manager *m, const char *run_id,
                                            const char *workload, const char *data_signature,
                                            mxp_error *err);
/* Record the workload's metadata (mxp_ckpt_save_args.workload_meta) in the
 * next checkpoints (copied; NULL: not recorded). */
MXP_API mxp_status mxp_ckpt_manager_set_workload_meta(mxp_ckpt_manager *m, const char *json,
                                                      mxp_error *err);
/* Path of the last checkpoint this manager wrote ("" before the first). */
MXP_API const char *mxp_ckpt_manager_last_path(const mxp_ckpt_manager *m);
/* mxp_ckpt_rollback on the manager's directory. */
MXP_API mxp_status mxp_ckpt_manager_rollback(mxp_ckpt_manager *m, mxp_trainer *t,
                                             const char *reason, mxp_data_position *pos,
                                             mxp_ckpt_rollback_result *res, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_CKPT_H */
