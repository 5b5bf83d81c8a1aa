/* mixprec/device.h: where a run computes (training.device), and what the
 * CUDA backend of this build can see.
 *
 * A build has the CUDA backend when it was configured with MIXPREC_CUDA=ON,
 * or AUTO with nvcc found (docs/gpu.md). Without it every query below
 * answers "built without CUDA" and links no CUDA library. With it, the
 * queries go to the CUDA runtime; on a machine without a GPU or driver they
 * return MXP_ERR_UNSUPPORTED with the runtime's own error text.
 *
 * Status of the backend (docs/gpu.md): with training.device=cuda a run
 * trains an MLP (linear, relu, gelu, tanh, layernorm; mse or xent) in
 * fp32, mixed_bf16 or mixed_fp16 with AdamW, one micro-batch, one process,
 * through the device training step; what that step cannot run (the GPT,
 * ensembles, other heads and modes, SGD, micro-batches, precision
 * switches, ...) is refused by mxp_run_create with an error naming it.
 * mxp_device_require accepts MXP_DEVICE_CUDA when this build has CUDA and
 * the device exists.
 */
#ifndef MIXPREC_DEVICE_H
#define MIXPREC_DEVICE_H

#include <mixprec/base.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mxp_device_kind {
    MXP_DEVICE_CPU,
    MXP_DEVICE_CUDA,
    MXP_DEVICE_KIND_COUNT
} mxp_device_kind;

typedef struct mxp_device {
    mxp_device_kind kind;
    int index; /* CUDA ordinal (0 for "cuda"); 0 for the CPU */
} mxp_device;

/* Longest accepted training.device text and device name. */
#define MXP_DEVICE_NAME_MAX 256

/* Parse "cpu", "cuda" or "cuda:N" (N a decimal ordinal 0..1023, no sign,
 * no spaces); anything else: MXP_ERR_INVALID_ARG naming the text and what
 * is accepted. Parsing needs no GPU. */
MXP_API mxp_status mxp_device_parse(const char *text, mxp_device *out, mxp_error *err);
/* "cpu", "cuda:N" into buf (NUL-terminated, truncated to n). */
MXP_API void mxp_device_format(const mxp_device *d, char *buf, size_t n);

/* Whether this build carries the CUDA backend. */
MXP_API bool mxp_cuda_built(void);

/* What the CUDA runtime reports about one device. */
typedef struct mxp_gpu_info {
    char name[MXP_DEVICE_NAME_MAX];
    int index;
    int cc_major, cc_minor;    /* compute capability */
    size_t total_mem;          /* bytes */
    size_t free_mem;           /* bytes, at query time */
    int multiprocessors;
    int driver_version;        /* cudaDriverGetVersion: 1000*major + 10*minor */
    int runtime_version;       /* cudaRuntimeGetVersion */
} mxp_gpu_info;

/* Number of visible CUDA devices into *n. MXP_ERR_UNSUPPORTED (and *n = 0)
 * when built without CUDA, or when the runtime reports no device or no
 * usable driver; err then carries the reason (the runtime's error text). */
MXP_API mxp_status mxp_cuda_device_count(int *n, mxp_error *err);
/* Properties of device `index` (0 <= index < count). */
MXP_API mxp_status mxp_cuda_device_info(int index, mxp_gpu_info *out, mxp_error *err);
/* The CUDA runtime version this library was built against
 * (1000*major + 10*minor), 0 when built without CUDA. */
MXP_API int mxp_cuda_build_version(void);

/* Can a training run use device d? CPU: always MXP_OK. CUDA: MXP_OK when
 * this build has CUDA and device d->index exists, else an error naming why
 * not (built without CUDA, no device, ordinal out of range). What a run
 * asks of the device is checked by mxp_run_create. */
MXP_API mxp_status mxp_device_require(const mxp_device *d, mxp_error *err);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_DEVICE_H */
