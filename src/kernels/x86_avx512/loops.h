/* kernels/x86_avx512/loops.h: internal interface of the AVX-512 hot loops
 * (loops_*.c).
 *
 * Entry points (all implement the mxp_kernels slot of the same name, see
 * kernels/kernels.h): conversions (loops_convert.c), element-wise ops
 * (loops_eltwise.c), row-wise ops and losses (loops_rows.c), the regression
 * head's loss (loops_head.c), reductions and
 * the fused gradient pass (loops_grad.c), optimizers (loops_optim.c), the
 * fused forward epilogue (loops_fused.c);
 * loops.c puts them into the table. They are compiled with the AVX-512
 * flags of CMakeLists.txt and may only be called once mxp_avx512_usable()
 * holds for this CPU (dispatch.c and the tests check it).
 *
 * The shared vector helpers (vector exp/erf/tanh, MXCSR guard, lane masks)
 * are in loops_simd.h, which only AVX-512-compiled files may include; this
 * header has prototypes only, so tests can include it.
 */
#ifndef MIXPREC_KERNELS_AVX512_LOOPS_H
#define MIXPREC_KERNELS_AVX512_LOOPS_H

#include "kernels/generic/generic.h" /* mxp_epilogue_part */
#include "kernels/x86_avx512/avx512.h"

/* Threads. Passes over at least MXP_AVX512_PAR_MIN elements run on the
 * kernel thread pool (kernels/threads.h). Element-wise passes split [0, n)
 * into one range per thread. Reductions (sum, sumsq, absmax,
 * unscale_stats) always split it into MXP_AVX512_RED_PARTS ranges, range p
 * being [b_p, b_{p+1}) * MXP_AVX512_PAR_ALIGN (clamped to n) with
 * b_p = floor(ceil(n / PAR_ALIGN) * p / RED_PARTS), whatever the thread
 * count, and combine the parts' results in order p = 0, 1, ...: every
 * result depends on n and the data only, never on the number of threads. */
#define MXP_AVX512_PAR_MIN (1 << 18)
#define MXP_AVX512_PAR_ALIGN 1024
#define MXP_AVX512_RED_PARTS 8

/* ---- loops_convert.c ---- */
void mxp_avx512_convert(mxp_dtype dst_type, void *dst, mxp_dtype src_type,
                        const void *src, size_t n);
void mxp_avx512_convert_sr(mxp_dtype dst_type, void *dst, const float *src,
                           size_t n, uint64_t seed, uint64_t counter);
/* out[j] = mxp_rng_at(seed, counter + j) for j < n (vectorised Philox). */
void mxp_avx512_rng_fill(uint32_t *out, size_t n, uint64_t seed,
                         uint64_t counter);

/* ---- loops_fp8.c ---- */
/* The convert slot for pairs where either type is FP8 (both valid). */
void mxp_avx512_convert_fp8(mxp_dtype dst_type, void *dst, mxp_dtype src_type,
                            const void *src, size_t n);
void mxp_avx512_f32_to_fp8(mxp_dtype dst_type, void *dst, const float *src,
                           size_t n, mxp_fp8_overflow mode);
void mxp_avx512_fp8_quantize(mxp_dtype fmt, float *dst, const float *src,
                             size_t n, float scale, float *amax);

/* ---- loops_eltwise.c ---- */
void mxp_avx512_relu_fwd(float *y, const float *x, size_t n);
void mxp_avx512_relu_bwd(float *dx, const float *dy, const float *x, size_t n);
void mxp_avx512_gelu_fwd(float *y, const float *x, size_t n);
void mxp_avx512_gelu_bwd(float *dx, const float *dy, const float *x, size_t n);
void mxp_avx512_tanh_fwd(float *y, const float *x, size_t n);
void mxp_avx512_tanh_bwd(float *dx, const float *dy, const float *y, size_t n);
void mxp_avx512_axpy(float *y, float a, const float *x, size_t n);
void mxp_avx512_scale(float *x, float a, size_t n);
/* kernels.h dropout (loops_dropout.c) */
void mxp_avx512_dropout(float *y, const float *x, size_t n, uint64_t key, uint64_t counter,
                        uint32_t drop_below, float scale);
/* y[i] = erf(x[i]) and y[i] = exp(x[i]) with v_erf / v_exp of loops_simd.h (for tests and
 * benchmarks of the vector math; y may alias x). */
void mxp_avx512_erf(float *y, const float *x, size_t n);
void mxp_avx512_exp(float *y, const float *x, size_t n);
/* Process-wide switch (default on) of GELU and its backward with erf's
 * large branch on the large lanes only (loops_split.h), in gelu_fwd,
 * gelu_bwd and the fused passes (computed, not by table); off: per vector
 * (v_gelu, v_gelu_grad), as before. The bits are the same either
 * way; the switch is for tests and benchmarks. */
void mxp_avx512_act_split_enable(bool on);
bool mxp_avx512_act_split_enabled(void);

/* ---- loops_rows.c ---- */
void mxp_avx512_add_bias(float *y, const float *bias, int64_t B, int64_t C);
void mxp_avx512_bias_grad(float *dbias, const float *dy, int64_t B, int64_t C);
void mxp_avx512_layernorm_fwd(float *y, float *mean, float *rstd,
                              const float *x, const float *gamma,
                              const float *beta, int64_t B, int64_t C,
                              float eps);
void mxp_avx512_layernorm_bwd(float *dx, float *dgamma, float *dbeta,
                              const float *dy, const float *x,
                              const float *mean, const float *rstd,
                              const float *gamma, int64_t B, int64_t C);
void mxp_avx512_softmax_fwd(float *y, const float *x, int64_t B, int64_t C);
void mxp_avx512_mse(float *dpred, const float *pred, const float *target,
                    int64_t B, int64_t C, float grad_scale, double *loss);
void mxp_avx512_softmax_xent(float *dlogits, const float *logits,
                             const int32_t *labels, int64_t B, int64_t C,
                             float grad_scale, double *loss);

/* ---- loops_head.c ---- */
void mxp_avx512_head_loss(float *dpred, float *dbounds, const float *pred, const float *target,
                          const float *bounds, const float *weights, int64_t B, int64_t K,
                          int64_t T, float grad_scale, double *loss);
void mxp_avx512_gauss_nll(float *dpred, float *dbounds, const float *pred, const float *target,
                          const float *bounds, int64_t B, int64_t D, float grad_scale,
                          double *loss);

/* ---- loops_grad.c ---- */
void mxp_avx512_sum(const float *x, size_t n, double *out);
void mxp_avx512_sumsq(const float *x, size_t n, double *out);
void mxp_avx512_absmax(const float *x, size_t n, float *amax, int64_t *nonfinite);
void mxp_avx512_unscale_stats(float *g, size_t n, float inv_scale,
                              float near_overflow_at, mxp_grad_stats *out);

/* ---- loops_optim.c ---- */
void mxp_avx512_adamw(const mxp_weights *w, const float *g, float *m,
                      float *v, size_t n, const mxp_adamw_hparams *h,
                      int64_t t);
void mxp_avx512_sgd(const mxp_weights *w, const float *g, float *buf,
                    size_t n, const mxp_sgd_hparams *h, int64_t t);

/* ---- loops_fused.c ---- */
void mxp_avx512_bias_act_store(mxp_epilogue *e);
/* How many threads bias_act_store gives e (1 below its size threshold). */
int mxp_avx512_epilogue_threads(const mxp_epilogue *e);
/* Rows [r0, r1) x columns [c0, c1) of bias_act_store's pass over e, on the
 * calling thread, folded into *p (max, +): the same pieces' code as
 * bias_act_store, so the same bits per element. */
void mxp_avx512_epilogue_block(const mxp_epilogue *e, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1, mxp_epilogue_part *p);
void mxp_avx512_act_bwd_store(mxp_act_bwd *e);
void mxp_avx512_bias_grad_typed(float *dbias, mxp_dtype t, const void *dy, int64_t B,
                                int64_t C);

/* ---- loops_act16.c ---- */
/* Element-wise functions of a 16-bit input, as tables (loops_act16.c). */
typedef enum mxp_act16_fn {
    MXP_ACT16_GELU,       /* v_gelu (loops_simd.h) */
    MXP_ACT16_TANH,       /* v_tanh */
    MXP_ACT16_GELU_DERIV, /* v_gelu_deriv: GELU backward is dy * T[x] */
    MXP_ACT16_FNS
} mxp_act16_fn;
/* T[b] = f(x) in FP32 for each bit pattern b (0 .. 65535) of t (BF16 or
 * FP16), x its exact widening, computed by f itself under the FTZ/DAZ bits
 * of csr (an MXCSR value; the calling thread's own is _mm_getcsr()): the
 * bits that f returns for x when the MXCSR is csr. NULL when t is another
 * dtype, when csr rounds other than to nearest or unmasks an exception, or
 * when memory ran out: then compute f. Built once per (f, t, FTZ/DAZ) at
 * first use, thread-safe; never freed. */
const float *mxp_avx512_act16_table(mxp_act16_fn f, mxp_dtype t, unsigned csr);
/* T16[b] = the bits of convert(out, F32, T[b]) for T = the table above
 * (f GELU or tanh, out BF16 or FP16): the activation as the fused forward
 * stores it. NULL as above, or for GELU_DERIV or another out. */
const uint16_t *mxp_avx512_act16_table16(mxp_act16_fn f, mxp_dtype t, mxp_dtype out,
                                         unsigned csr);
/* Process-wide switch (default on); off: mxp_avx512_act16_table returns
 * NULL, so the fused passes compute as before (benchmarks, tests). */
void mxp_avx512_act16_enable(bool on);

#endif /* MIXPREC_KERNELS_AVX512_LOOPS_H */
