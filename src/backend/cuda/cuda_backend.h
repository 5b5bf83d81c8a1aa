/* backend/cuda/cuda_backend.h: the C interface of the CUDA side (internal;
 * implemented in device.cu, kernels.cu, mlp_kernels.cu, lt_gemm.cu and
 * graph.cu, compiled by nvcc only when the
 * build has MIXPREC_HAVE_CUDA).
 *
 * Entry points:
 *   queries: mxp_cudab_build_version, mxp_cudab_device_count,
 *            mxp_cudab_device_info (used by backend/device.c);
 *   context: mxp_cudab_ctx_create/_destroy (device, one stream, a cuBLASLt
 *            handle, the device-resident step control block and the
 *            grad-pass partials), mxp_cudab_alloc/_free, mxp_cudab_upload /
 *            _download (async on the context's stream), mxp_cudab_sync;
 *   step kernels (element rules of backend/numerics/, one home with the
 *            CPU): mxp_cudab_ctl_set, mxp_cudab_grad_pass,
 *            mxp_cudab_decide, mxp_cudab_adamw, mxp_cudab_sgd,
 *            mxp_cudab_loss_fold, mxp_cudab_aux_dev (the aux area after
 *            the control block), mxp_cudab_report / _report_aux (the single
 *            device-to-host copy of a step; mxp_cudab_d2h_count counts
 *            them);
 *   graphs:  mxp_cudab_host_alloc/_free, mxp_cudab_graph_begin/_end/
 *            _launch/_destroy (graph.cu);
 *   MLP kernels (mlp_kernels.cu; bodies in backend/numerics/mlp.h and
 *            mlp_rows.h, host-tested by tests/test_mlp_emu.c):
 *            mxp_cudab_bias_add/_grad, mxp_cudab_act_fwd/_bwd,
 *            mxp_cudab_layernorm_fwd/_bwd, mxp_cudab_mse,
 *            mxp_cudab_softmax_xent, mxp_cudab_store_scan, mxp_cudab_widen;
 *   linear-layer GEMMs (lt_gemm.cu; descriptions from lt_map.h):
 *            mxp_cudab_lt_plan_create/_destroy, mxp_cudab_lt_run,
 *            mxp_cudab_lt_desc_check.
 * Every function returns 0 on success, else nonzero with the CUDA error
 * text in why[n]. Nothing here prints, exits or synchronises implicitly
 * except mxp_cudab_sync and mxp_cudab_report.
 * Verified: compiles with nvcc 13.0 for sm_90 (--fmad=false); the element
 * rules are host-tested (tests/test_numerics.c), the MLP kernel bodies
 * through the host launch emulator (tests/test_mlp_emu.c), the cuBLASLt
 * mapping by a naive executor (tests/test_lt_map.c) and its descriptors
 * without a device (tests/test_cuda_lt_desc.c); the kernels and GEMMs
 * themselves have NOT run on a GPU yet (tests/test_cuda_backend.c and
 * test_cuda_mlp.c skip without one).
 */
#ifndef MIXPREC_BACKEND_CUDA_BACKEND_H
#define MIXPREC_BACKEND_CUDA_BACKEND_H

#include <mixprec/device.h>
#include <mixprec/num.h>

#include "backend/cuda/lt_map.h"
#include "backend/step_ctl.h"

#ifdef __cplusplus
extern "C" {
#endif

int mxp_cudab_build_version(void);
/* Visible devices (> 0), or 0 with the reason in why. */
int mxp_cudab_device_count(char *why, size_t n);
int mxp_cudab_device_info(int index, mxp_gpu_info *out, char *why, size_t n);

typedef struct mxp_cudab_ctx mxp_cudab_ctx;

int mxp_cudab_ctx_create(int device, mxp_cudab_ctx **out, char *why, size_t n);
void mxp_cudab_ctx_destroy(mxp_cudab_ctx *c);
int mxp_cudab_alloc(mxp_cudab_ctx *c, size_t bytes, void **out, char *why, size_t n);
void mxp_cudab_free(mxp_cudab_ctx *c, void *p);
int mxp_cudab_upload(mxp_cudab_ctx *c, void *dst, const void *src, size_t bytes, char *why,
                     size_t n);
int mxp_cudab_download(mxp_cudab_ctx *c, void *dst, const void *src, size_t bytes, char *why,
                       size_t n);
int mxp_cudab_sync(mxp_cudab_ctx *c, char *why, size_t n);
/* dst[0, bytes) = 0 (async). */
int mxp_cudab_zero(mxp_cudab_ctx *c, void *dst, size_t bytes, char *why, size_t n);
/* The device address of the context's control block (for result slots that
 * kernels write into it, e.g. &ctl->loss; never dereferenced on the host). */
mxp_step_ctl *mxp_cudab_ctl_dev(mxp_cudab_ctx *c);
/* Timing for tests and benchmarks: mark records a new CUDA event on the
 * context's stream into *ev; timer_ms waits for ev1 and gives the
 * milliseconds from ev0 to ev1, destroying both. */
int mxp_cudab_timer_mark(mxp_cudab_ctx *c, void **ev, char *why, size_t n);
int mxp_cudab_timer_ms(void *ev0, void *ev1, float *ms, char *why, size_t n);

/* Replace the device control block with *host (async; host must stay valid
 * until the next sync). */
int mxp_cudab_ctl_set(mxp_cudab_ctx *c, const mxp_step_ctl *host, char *why, size_t n);
/* g[i] = mxp_gradpass_elem(g[i], ctl.inv_scale, near_at); ctl.stats = the
 * merged statistics (per-block partials merged in block order: the result
 * does not depend on scheduling). */
int mxp_cudab_grad_pass(mxp_cudab_ctx *c, float *g, size_t count, float near_at, char *why,
                        size_t n);
/* One thread, the contract of mxp_backend_ops.decide (backend/backend.h):
 * skip, clip_coef, opt_steps / sr_counter, the scaler rule when
 * ctl.run_scaler_rule; also skips on a non-finite ctl.loss (the device
 * step's loss slot; mxp_sb_decide in step_bodies.h). */
int mxp_cudab_decide(mxp_cudab_ctx *c, bool extra_inf, uint64_t n_params, char *why, size_t n);
/* The optimizer over `count` elements, reading skip/clip/consts from ctl
 * (no-op when skip). master may be NULL (pure 16-bit path: work_bf16
 * selects BF16 else FP16; sr from ctl.sgd/adamw path flag). */
int mxp_cudab_adamw(mxp_cudab_ctx *c, float *master, uint16_t *work, bool work_bf16, bool sr,
                    const float *g, float *m, float *v, size_t count, char *why, size_t n);
int mxp_cudab_sgd(mxp_cudab_ctx *c, float *master, uint16_t *work, bool work_bf16, bool sr,
                  const float *g, float *buf, size_t count, char *why, size_t n);
/* *loss (device) = mxp_sb_loss_fold(slots, k, batch) (one thread; the
 * device step's loss over k micro-batches). */
int mxp_cudab_loss_fold(mxp_cudab_ctx *c, double *loss, const double *slots, int k,
                        int64_t batch, char *why, size_t n);
/* The aux area: device memory right after the control block (at byte
 * MXP_CUDAB_AUX_OFF of the block's allocation), MXP_CUDAB_AUX_CAP bytes, for
 * result slots a step reports along with the block (the device step's
 * scans and micro-batch losses). aux_dev: its device address. */
#define MXP_CUDAB_AUX_OFF ((sizeof(mxp_step_ctl) + 63) / 64 * 64)
#define MXP_CUDAB_AUX_CAP ((size_t)64 << 10)
void *mxp_cudab_aux_dev(mxp_cudab_ctx *c);
/* The step report with aux_bytes (<= MXP_CUDAB_AUX_CAP) of the aux area:
 * ONE async copy of MXP_CUDAB_AUX_OFF + aux_bytes bytes into host (the
 * control block at host, the aux area at host + MXP_CUDAB_AUX_OFF), then a
 * stream sync. */
int mxp_cudab_report_aux(mxp_cudab_ctx *c, void *host, size_t aux_bytes, char *why, size_t n);
/* The step report: one async device-to-host copy of the control block into
 * *host, then a stream sync (the only one of a step). */
int mxp_cudab_report(mxp_cudab_ctx *c, mxp_step_ctl *host, char *why, size_t n);
/* Device-to-host copies issued through this context so far. */
int64_t mxp_cudab_d2h_count(const mxp_cudab_ctx *c);

/* ---- MLP kernels (mlp_kernels.cu) ----
 * Async on the context's stream; every pointer is device memory (result
 * slots included); the contracts are those of the same-named slots of
 * kernels/kernels.h (mxp_kernels), with the exactness written in
 * backend/numerics/mlp.h and mlp_rows.h: bias add/grad, ReLU, tanh bwd,
 * dpred, dgamma/dbeta, stored bits, amax and counts are the CPU's bits;
 * layernorm statistics, GELU, tanh fwd, softmax and the loss totals are
 * close (other sum order, CUDA libm). A shape with B or C < 0, B*C past
 * size_t, an unknown act or dtype is refused with the reason in why. The
 * loss kernels and store_scan use the context's block partials: calls on
 * one context must stay on its stream (they do). */
/* y[b, c] += bias[c] (bias NULL: no-op). */
int mxp_cudab_bias_add(mxp_cudab_ctx *c, float *y, const float *bias, int64_t B, int64_t C,
                       char *why, size_t n);
/* dbias[c] += sum_b dy[b, c] (b in order, as the CPU). */
int mxp_cudab_bias_grad(mxp_cudab_ctx *c, float *dbias, const float *dy, int64_t B, int64_t C,
                        char *why, size_t n);
/* act: 1 relu, 2 gelu (exact erf form), 3 tanh (the values of mxp_act);
 * y may alias x. */
int mxp_cudab_act_fwd(mxp_cudab_ctx *c, int act, float *y, const float *x, size_t count,
                      char *why, size_t n);
/* s: the activation's input (relu, gelu) or output (tanh); dx may alias dy. */
int mxp_cudab_act_bwd(mxp_cudab_ctx *c, int act, float *dx, const float *dy, const float *s,
                      size_t count, char *why, size_t n);
/* Per row of [B, C]: y = (x - mean) * rstd [* gamma] [+ beta]; mean/rstd [B]
 * (may be NULL); eps finite >= 0. */
int mxp_cudab_layernorm_fwd(mxp_cudab_ctx *c, float *y, float *mean, float *rstd,
                            const float *x, const float *gamma, const float *beta, int64_t B,
                            int64_t C, float eps, char *why, size_t n);
/* dx "=", dgamma/dbeta "+=" (either NULL: not accumulated); dx may alias dy. */
int mxp_cudab_layernorm_bwd(mxp_cudab_ctx *c, float *dx, float *dgamma, float *dbeta,
                            const float *dy, const float *x, const float *mean,
                            const float *rstd, const float *gamma, int64_t B, int64_t C,
                            char *why, size_t n);
/* *loss (device slot) = mean (pred - target)^2; dpred = grad_scale * 2 d / (B*C)
 * (may be NULL). */
int mxp_cudab_mse(mxp_cudab_ctx *c, float *dpred, const float *pred, const float *target,
                  int64_t B, int64_t C, float grad_scale, double *loss, char *why, size_t n);
/* *loss (device slot) = mean over rows of logsumexp - x[label] (NaN row for
 * a label outside [0, C)); dlogits = grad_scale (softmax - onehot) / B (may
 * be NULL, may alias logits). */
int mxp_cudab_softmax_xent(mxp_cudab_ctx *c, float *dlogits, const float *logits,
                           const int32_t *labels, int64_t B, int64_t C, float grad_scale,
                           double *loss, char *why, size_t n);
/* out = src stored in t (F32, BF16, F16; RNE); *amax / *nonfinite (device
 * slots, either NULL) = the scan of src (largest finite |v|, NaN/Inf count). */
int mxp_cudab_store_scan(mxp_cudab_ctx *c, mxp_dtype t, void *out, const float *src,
                         size_t count, float *amax, int64_t *nonfinite, char *why, size_t n);

/* out = src (F32, BF16, F16) widened to FP32, exact (the CPU's
 * nn_view_f32; body mxp_sb_widen_body in step_bodies.h). */
int mxp_cudab_widen(mxp_cudab_ctx *c, mxp_dtype t, float *out, const void *src, size_t count,
                    char *why, size_t n);

/* ---- CUDA Graphs and pinned host memory (graph.cu) ----
 * host_alloc: page-locked host memory (cudaMallocHost); host_free(NULL)
 * is a no-op. graph_begin starts capturing the context's stream (thread-
 * local mode); graph_end ends it into *graph: the executable graph updated
 * in place when *graph is not NULL and cudaGraphExecUpdate accepts the new
 * capture, else a new one instantiated (the old one destroyed);
 * graph_launch replays it on the stream (async); graph_destroy(NULL) is a
 * no-op. */
int mxp_cudab_host_alloc(mxp_cudab_ctx *c, size_t bytes, void **out, char *why, size_t n);
void mxp_cudab_host_free(mxp_cudab_ctx *c, void *p);
int mxp_cudab_graph_begin(mxp_cudab_ctx *c, char *why, size_t n);
int mxp_cudab_graph_end(mxp_cudab_ctx *c, void **graph, char *why, size_t n);
int mxp_cudab_graph_launch(mxp_cudab_ctx *c, void *graph, char *why, size_t n);
void mxp_cudab_graph_destroy(mxp_cudab_ctx *c, void *graph);

/* ---- linear-layer GEMMs on cuBLASLt (lt_gemm.cu) ----
 * A plan: the matmul descriptor and layouts of description d (mxp_lt_linear
 * or mxp_lt_from_rowmajor), A/B of dtype ab (F32, BF16, F16), C/D FP32,
 * CUBLAS_COMPUTE_32F (no TF32), and the algorithm cuBLASLt's heuristic
 * picks for it within the context's workspace: made once per shape. */
typedef struct mxp_cudab_lt_plan mxp_cudab_lt_plan;
int mxp_cudab_lt_plan_create(mxp_cudab_ctx *c, const mxp_lt_desc *d, mxp_dtype ab,
                             mxp_cudab_lt_plan **out, char *why, size_t n);
void mxp_cudab_lt_plan_destroy(mxp_cudab_lt_plan *p); /* NULL: no-op */
/* D = alpha op(A) op(B) + beta D (+ bias when the plan has the epilogue;
 * then bias must not be NULL), async on the context's stream. A and B are
 * the buffers named by d->a_op / d->b_op for a linear-layer plan. */
int mxp_cudab_lt_run(mxp_cudab_ctx *c, mxp_cudab_lt_plan *p, const void *A, const void *B,
                     float *D, const float *bias, char *why, size_t n);
/* Build d's descriptors with libcublasLt (no device, no context) and read
 * every attribute back: 0 when they say what d says, 1 with the difference
 * in why (also for a dtype other than F32, BF16, F16), 77 when libcublasLt
 * cannot be loaded or the objects cannot be created (why says which). For
 * tests. */
int mxp_cudab_lt_desc_check(const mxp_lt_desc *d, mxp_dtype ab, char *why, size_t n);
/* The soname this build opens ("libcublasLt.so.<major>"). */
const char *mxp_cudab_lt_soname(void);

/* ---- FP8 (lt_gemm.cu, fp8_kernels.cu; the device step's FP8 ops, contracts
 * in backend/cuda/dstep.h mxp_ds_ops) ----
 * An FP8 plan: d from mxp_lt_linear_fp8 (TN, no bias epilogue), A of dtype
 * a, B of dtype b (F8_E4M3 / F8_E5M2, not both E5M2), C/D FP32,
 * CUBLAS_COMPUTE_32F, FP32 scale type, fast accumulation off; destroyed by
 * mxp_cudab_lt_plan_destroy. Run: D = a_scale[0] b_scale[0] op(A) op(B) +
 * beta D, the scales device pointers set as CUBLASLT_MATMUL_DESC_A/B_
 * SCALE_POINTER. desc_check: as mxp_cudab_lt_desc_check, for an FP8 plan
 * (also the fast-accumulation flag and the scale pointers read back). */
int mxp_cudab_lt8_plan_create(mxp_cudab_ctx *c, const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b,
                              mxp_cudab_lt_plan **out, char *why, size_t n);
int mxp_cudab_lt8_run(mxp_cudab_ctx *c, mxp_cudab_lt_plan *p, const void *A, const void *B,
                      float *D, const float *a_scale, const float *b_scale, char *why,
                      size_t n);
int mxp_cudab_lt8_desc_check(const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b, char *why,
                             size_t n);
/* FP8 quantise (mxp_ds_ops.f8_quant): codes of src * *scale (RNE,
 * saturating, __nv_cvt_float_to_fp8 __NV_SATFINITE) into q and/or the
 * transpose qt; *amax (when not NULL) the tensor's amax, block partials
 * merged in block order (c->mk_partials). */
int mxp_cudab_f8_quant(mxp_cudab_ctx *c, mxp_dtype fmt, uint8_t *q, uint8_t *qt,
                       const float *src, int64_t rows, int64_t cols, const float *scale,
                       float *amax, char *why, size_t n);
/* The scaling update (mxp_ds_ops.f8_update) of n_slots slots of the state
 * st (mxp_ds_f8_state layout), one block. */
int mxp_cudab_f8_update(mxp_cudab_ctx *c, void *st, int n_slots, int algo, int margin,
                        char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* MIXPREC_BACKEND_CUDA_BACKEND_H */
