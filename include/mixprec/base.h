/* mixprec/base.h: status codes, error context, logging callback, aligned
 * memory with overflow-checked sizes, counter-based RNG, CPU features, timer.
 *
 * Every fallible library call returns mxp_status. When the caller passes an
 * mxp_error*, the call also writes a human-readable message there naming
 * the offending thing and what is accepted. The library never prints and
 * never exits: diagnostics go through the log callback (silent by default).
 */
#ifndef MIXPREC_BASE_H
#define MIXPREC_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mixprec/api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version (api.h) ------------------------------------------------------
 * What the library was built as, to compare with the MIXPREC_VERSION_* and
 * MIXPREC_ABI_VERSION of the headers a caller compiled against (or, from
 * Python, with the binding's own): "0.1.0", 100 (MAJOR*10000 + MINOR*100 +
 * PATCH) and the ABI version, the N of libmixprec.so.N. */
MXP_API const char *mxp_version(void);
MXP_API int mxp_version_number(void);
MXP_API int mxp_abi_version(void);

typedef enum mxp_status {
    MXP_OK = 0,
    MXP_ERR_INVALID_ARG,   /* an API argument is out of its accepted range */
    MXP_ERR_OUT_OF_MEMORY, /* allocation failed or a size overflowed */
    MXP_ERR_IO,            /* a file could not be read or written */
    MXP_ERR_FORMAT,        /* a file or text is malformed */
    MXP_ERR_CONFIG,        /* a configuration key or value is invalid */
    MXP_ERR_NONFINITE,     /* a non-finite value where none is tolerated */
    MXP_ERR_UNSUPPORTED,   /* valid request this build/CPU cannot serve */
    MXP_ERR_STATE,         /* call not valid in the object's current state */
    MXP_STATUS_COUNT
} mxp_status;

/* Stable lower-case name of a status ("ok", "invalid_arg", ...). */
MXP_API const char *mxp_status_name(mxp_status s);

#define MXP_ERROR_MSG_MAX 512

/* Error context: filled by a failing call when non-NULL. */
typedef struct mxp_error {
    mxp_status status;
    char msg[MXP_ERROR_MSG_MAX];
} mxp_error;

/* Record status and a printf-style message in err (if non-NULL) and return
 * the status, so callers can write `return mxp_error_set(err, ...)`. */
MXP_API mxp_status mxp_error_set(mxp_error *err, mxp_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reset err to MXP_OK with an empty message (NULL is a no-op). */
MXP_API void mxp_error_clear(mxp_error *err);

/* ---- logging ----------------------------------------------------------- */

typedef enum mxp_log_level {
    MXP_LOG_DEBUG,
    MXP_LOG_INFO,
    MXP_LOG_WARN,
    MXP_LOG_ERROR,
    MXP_LOG_LEVEL_COUNT
} mxp_log_level;

typedef void (*mxp_log_fn)(void *user, mxp_log_level level, const char *msg);

/* Install the process-wide log sink (NULL: discard). Not thread-safe with
 * respect to concurrent logging; set it once at start-up. */
MXP_API void mxp_log_set_callback(mxp_log_fn fn, void *user);
/* Messages below this level are dropped before formatting (default INFO). */
MXP_API void mxp_log_set_level(mxp_log_level min_level);
MXP_API const char *mxp_log_level_name(mxp_log_level level);
MXP_API void mxp_log(mxp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- memory ------------------------------------------------------------ */

#define MXP_ALIGN 64

/* Overflow-checked size arithmetic: return false (and leave *out alone) on
 * overflow. */
MXP_API bool mxp_size_mul(size_t a, size_t b, size_t *out);
MXP_API bool mxp_size_add(size_t a, size_t b, size_t *out);

/* Pluggable allocator. alloc(user, size, align) returns memory aligned to
 * `align` (a power of two) or NULL; free(user, p) releases it. */
typedef struct mxp_allocator {
    void *(*alloc)(void *user, size_t size, size_t align);
    void (*free)(void *user, void *p);
    void *user;
} mxp_allocator;

/* Replace the process allocator (NULL restores the default). Only call it
 * while no mixprec object is alive. */
MXP_API void mxp_set_allocator(const mxp_allocator *a);

/* 64-byte aligned, zero-initialised allocation of n*size bytes; NULL on
 * overflow or failure. mxp_free(NULL) is a no-op. */
MXP_API void *mxp_calloc(size_t n, size_t size);
MXP_API void mxp_free(void *p);
/* strdup through the mixprec allocator. */
MXP_API char *mxp_strdup(const char *s);

/* ---- counter-based RNG --------------------------------------------------
 * Philox-style: every draw is a pure function of (seed, counter), so the
 * state is two integers, trivially checkpointed, and any stream position can
 * be reached without replay. */

typedef struct mxp_rng {
    uint64_t seed;
    uint64_t counter; /* number of 32-bit draws taken so far */
} mxp_rng;

/* The 32-bit word at position `counter` of stream `seed`. */
MXP_API uint32_t mxp_rng_at(uint64_t seed, uint64_t counter);
MXP_API void mxp_rng_init(mxp_rng *r, uint64_t seed);
MXP_API uint32_t mxp_rng_u32(mxp_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
MXP_API float mxp_rng_uniform(mxp_rng *r);
/* dst[0 .. n) = the next n values of mxp_rng_uniform(r), bit for bit (r's
 * counter advances by n), computed a Philox block at a time. */
MXP_API void mxp_rng_uniform_fill(mxp_rng *r, float *dst, size_t n);
/* Standard normal (Box-Muller on two uniforms). */
MXP_API float mxp_rng_normal(mxp_rng *r);
/* Uniform integer in [0, n), n > 0 (rejection sampling, unbiased). */
MXP_API uint32_t mxp_rng_below(mxp_rng *r, uint32_t n);

/* perm = a uniformly random permutation of 0..n-1 (Fisher-Yates) drawn
 * from stream `seed` (n < 2^32). */
MXP_API void mxp_rng_permutation(uint32_t *perm, int64_t n, uint64_t seed);

/* ---- CPU features and time --------------------------------------------- */

typedef struct mxp_cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512_bf16, avx512_fp16, amx_bf16;
} mxp_cpu_features;

/* Filled from cpuid (and XGETBV for OS support) once; thread-safe. */
MXP_API const mxp_cpu_features *mxp_cpu_features_get(void);

/* Monotonic wall clock in seconds. */
MXP_API double mxp_time_now(void);

/* ---- files --------------------------------------------------------------- */

/* Bytes of a path, its NUL included, that mxp_mkdirs accepts at most. */
#define MXP_PATH_MAX 1024

/* mkdir -p: create path and its missing parents (mode 0755). Returns 0
 * when path is a directory afterwards, else an errno value (ENAMETOOLONG
 * for "" or a path of MXP_PATH_MAX bytes or more, ENOTDIR when it exists as
 * something else). */
MXP_API int mxp_mkdirs(const char *path);

/* Open path read-only (O_CLOEXEC, plus `flags`, e.g. O_NOFOLLOW) only if it
 * is a regular file, without ever blocking in open(): O_NONBLOCK makes the
 * open of a FIFO (or a device) return at once, fstat then refuses anything
 * that is not a regular file, and O_NONBLOCK is cleared on the descriptor
 * returned in *fd. Errors (MXP_ERR_IO) name `what` ("config file"), the
 * path, and the reason or the file's type ("is a FIFO"). */
MXP_API mxp_status mxp_open_regular(const char *path, int flags, const char *what, int *fd,
                                    mxp_error *err);

/* ---- floating-point environment ----------------------------------------
 * Flush-to-zero + denormals-are-zero for FP32 compute, like PyTorch's
 * torch.set_flush_denormal: subnormal FP32 inputs of arithmetic read as 0
 * and subnormal results become 0, which avoids the x86 slow path for
 * subnormal operands. Off by default. It sets MXCSR of the CALLING thread;
 * threads it creates afterwards inherit it, and the kernels' thread pool
 * runs each job with the flush bits of the thread that called the kernel,
 * so it may be switched at any time. It never applies where FP16 gradients
 * need their subnormals: the dtype conversions and the fused unscale pass
 * (kernels) keep subnormals whatever this setting says. */

/* Turn FTZ+DAZ on or off; returns false (and changes nothing) where the
 * platform has no such mode (non-x86), true otherwise. */
MXP_API bool mxp_fpenv_set_ftz(bool on);
/* True when FTZ or DAZ is on in the calling thread. */
MXP_API bool mxp_fpenv_get_ftz(void);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_BASE_H */
