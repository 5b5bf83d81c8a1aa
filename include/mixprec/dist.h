/* mixprec/dist.h: the communicator interface of data-parallel training.
 *
 * A communicator (mxp_comm) is a vtable plus rank, size and traffic
 * counters. Two implementations ship: single-process (always) and MPI
 * (Open MPI, when found at configure time: mxp_dist_mpi_built()). A CUDA
 * backend plugs NCCL in by filling the same vtable.
 *
 * Every collective is deterministic and leaves bit-identical results on all
 * ranks: sums are formed in ascending rank order (the MPI implementation
 * does a reduce-scatter by chunk exchange, sums each chunk in rank order,
 * then all-gathers), never in whatever order the MPI library picks. That
 * is what keeps the replicas of a data-parallel run identical bit for bit.
 *
 * Data-parallel step (docs/design.md "A training step"): after backward, the
 * scaled FP32 gradient slab is all-reduced (averaged) with
 * mxp_comm_allreduce_f32, the loss with mxp_comm_allreduce_f64; the fused
 * unscale/finite/stats pass then runs on identical slabs, found_inf is
 * agreed with MAX (mxp_dist_agree_any), and every later decision (clip,
 * skip, scaler, fallback) is one agreed value per step.
 * References: MPI 3.1 (collectives), PyTorch DistributedDataParallel,
 * llm.c llmc/zero.cuh.
 */
#ifndef MIXPREC_DIST_H
#define MIXPREC_DIST_H

#include <mixprec/base.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The dtype a float all-reduce puts on the wire. BF16 halves the traffic:
 * each rank's contribution and the reduced result are rounded to BF16
 * (round-to-nearest-even, relative error <= 2^-9 each), the sum itself is
 * formed in FP32. With one rank nothing is sent and nothing is rounded. */
typedef enum mxp_wire_dtype {
    MXP_WIRE_F32,
    MXP_WIRE_BF16,
    MXP_WIRE_DTYPE_COUNT
} mxp_wire_dtype;

/* "fp32", "bf16" (config spelling). */
MXP_API const char *mxp_wire_dtype_name(mxp_wire_dtype w);

/* Data-parallel options (config keys dist.*). */
typedef struct mxp_dist_config {
    mxp_wire_dtype allreduce_dtype; /* dist.allreduce_dtype fp32|bf16 (fp32) */
    int64_t check_every;            /* dist.check_every: verify that parameters,
                                       optimizer state and loss scale are identical
                                       on all ranks every N steps (and on the first
                                       step); 0 = only on the first step (0) */
} mxp_dist_config;

MXP_API mxp_dist_config mxp_dist_config_default(void);
MXP_API mxp_status mxp_dist_config_validate(const mxp_dist_config *c, mxp_error *err);

/* Traffic and time, per rank, since creation or the last reset. */
typedef struct mxp_comm_stats {
    uint64_t bytes_sent;     /* payload bytes handed to MPI for OTHER ranks */
    uint64_t bytes_received; /* payload bytes received from other ranks */
    uint64_t collectives;    /* collective calls */
    double seconds;          /* wall time inside collectives (waiting included) */
} mxp_comm_stats;

typedef struct mxp_comm mxp_comm;

/* The vtable an implementation fills. Arguments are validated by the
 * mxp_comm_* wrappers before they reach it. Every collective must be called
 * by all ranks in the same order with the same n (as in MPI). */
typedef struct mxp_comm_vtable {
    const char *name; /* "single", "mpi", ... */
    void (*destroy)(mxp_comm *c);
    /* Make later collectives on up to n floats allocation-free. */
    mxp_status (*reserve)(mxp_comm *c, size_t n, mxp_error *err);
    /* In place: buf[i] = sum over ranks (in rank order) of buf[i], divided
     * by size when average; every rank gets the same bits. */
    mxp_status (*allreduce_f32)(mxp_comm *c, float *buf, size_t n, mxp_wire_dtype wire,
                                bool average, mxp_error *err);
    mxp_status (*allreduce_f64)(mxp_comm *c, double *buf, size_t n, bool average,
                                mxp_error *err);
    mxp_status (*allreduce_max_i32)(mxp_comm *c, int32_t *buf, size_t n, mxp_error *err);
    /* Copy root's bytes into every rank's buf. */
    mxp_status (*broadcast)(mxp_comm *c, void *buf, size_t bytes, int root, mxp_error *err);
    mxp_status (*barrier)(mxp_comm *c, mxp_error *err);
    /* Terminate every rank of the job now (never returns for MPI). */
    void (*abort)(mxp_comm *c, int code);
} mxp_comm_vtable;

struct mxp_comm {
    const mxp_comm_vtable *vt;
    int rank, size;       /* 0 <= rank < size */
    mxp_comm_stats stats; /* kept up to date by the implementation */
    void *impl;           /* implementation state */
};

/* ---- construction ------------------------------------------------------ */

/* A one-rank communicator: every collective is the identity. */
MXP_API mxp_status mxp_comm_create_single(mxp_comm **out, mxp_error *err);
/* An MPI communicator over (a duplicate of) MPI_COMM_WORLD. Initialises
 * MPI (MPI_THREAD_FUNNELED) unless the caller already did, and finalises
 * it in destroy if it initialised it. Errors are returned, not fatal.
 * MXP_ERR_UNSUPPORTED when this build has no MPI. */
MXP_API mxp_status mxp_comm_create_mpi(mxp_comm **out, mxp_error *err);
/* MPI when the process was started by an MPI launcher (mpirun/mpiexec:
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment), else
 * single-process: a build with MPI run without mpirun is single-process and
 * never touches MPI. Launched with more than one rank by a build without
 * MPI: MXP_ERR_UNSUPPORTED (every rank would otherwise train alone). */
MXP_API mxp_status mxp_comm_create_from_env(mxp_comm **out, mxp_error *err);
/* True when this library was built with MPI. */
MXP_API bool mxp_dist_mpi_built(void);
/* World size announced by the launcher's environment (0: not launched). */
MXP_API int mxp_dist_launcher_size(void);

/* NULL is a no-op. */
MXP_API void mxp_comm_destroy(mxp_comm *c);

/* ---- collectives (wrappers that validate and dispatch) ------------------ */

MXP_API int mxp_comm_rank(const mxp_comm *c);
MXP_API int mxp_comm_size(const mxp_comm *c);
MXP_API const char *mxp_comm_name(const mxp_comm *c);
MXP_API mxp_status mxp_comm_reserve(mxp_comm *c, size_t n, mxp_error *err);
MXP_API mxp_status mxp_comm_allreduce_f32(mxp_comm *c, float *buf, size_t n, mxp_wire_dtype wire,
                                          bool average, mxp_error *err);
MXP_API mxp_status mxp_comm_allreduce_f64(mxp_comm *c, double *buf, size_t n, bool average,
                                          mxp_error *err);
MXP_API mxp_status mxp_comm_allreduce_max_i32(mxp_comm *c, int32_t *buf, size_t n, mxp_error *err);
MXP_API mxp_status mxp_comm_broadcast(mxp_comm *c, void *buf, size_t bytes, int root,
                                      mxp_error *err);
MXP_API mxp_status mxp_comm_barrier(mxp_comm *c, mxp_error *err);
MXP_API void mxp_comm_abort(mxp_comm *c, int code);
MXP_API void mxp_comm_get_stats(const mxp_comm *c, mxp_comm_stats *out);
MXP_API void mxp_comm_reset_stats(mxp_comm *c);

/* ---- agreement helpers --------------------------------------------------- */

/* *flag becomes true on every rank when it is true on any rank (MAX).
 * Use it for every per-step decision a rank could reach on its own
 * (found_inf, a guard action, an operator's precision switch). */
MXP_API mxp_status mxp_dist_agree_any(mxp_comm *c, bool *flag, mxp_error *err);

/* 64-bit checksum of bytes (order-sensitive, fast, not cryptographic);
 * chain buffers by passing the previous result as h (start with 0). */
MXP_API uint64_t mxp_dist_checksum(const void *buf, size_t bytes, uint64_t h);

/* *same = whether every rank passed the same value (one all-reduce of
 * 8 int32). */
MXP_API mxp_status mxp_dist_same_u64(mxp_comm *c, uint64_t value, bool *same, mxp_error *err);

/* MXP_ERR_CONFIG ("the N ranks disagree on <what>") unless every rank
 * passed the same n bytes (compared by checksum). */
MXP_API mxp_status mxp_dist_require_same(mxp_comm *c, const void *bytes, size_t n, const char *what,
                                         mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_DIST_H */
