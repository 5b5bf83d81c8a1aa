/* kernels/generic/generic.h: internal prototypes of the portable reference
 * kernels. Each function implements the mxp_kernels slot of the same name
 * (see kernels/kernels.h for the contracts); table.c gathers them into the
 * table returned by mxp_kernels_generic(). ISA variants may call these for
 * tails or for ops they do not specialise. */
#ifndef MIXPREC_KERNELS_GENERIC_H
#define MIXPREC_KERNELS_GENERIC_H

#include "kernels/kernels.h"

/* gemm.c */
void mxp_generic_gemm(const mxp_gemm_args *a);

/* gemm_f16acc.c: the emulated FP16 fast-accumulate GEMM, and one step of
 * its FP16 accumulator: RNE_fp16(a*b + acc16), rounded once. */
void mxp_generic_gemm_f16acc(const mxp_gemm_args *a, int k);
float mxp_f16acc_fma(float a, float b, float acc16);

/* eltwise.c */
void mxp_generic_relu_fwd(float *y, const float *x, size_t n);
void mxp_generic_relu_bwd(float *dx, const float *dy, const float *x, size_t n);
void mxp_generic_gelu_fwd(float *y, const float *x, size_t n);
void mxp_generic_gelu_bwd(float *dx, const float *dy, const float *x, size_t n);
void mxp_generic_tanh_fwd(float *y, const float *x, size_t n);
void mxp_generic_tanh_bwd(float *dx, const float *dy, const float *y, size_t n);
void mxp_generic_axpy(float *y, float a, const float *x, size_t n);
void mxp_generic_scale(float *x, float a, size_t n);
void mxp_generic_dropout(float *y, const float *x, size_t n, uint64_t key, uint64_t counter,
                         uint32_t drop_below, float scale);

/* rowwise.c */
void mxp_generic_add_bias(float *y, const float *bias, int64_t B, int64_t C);
void mxp_generic_bias_grad(float *dbias, const float *dy, int64_t B, int64_t C);
void mxp_generic_layernorm_fwd(float *y, float *mean, float *rstd,
                               const float *x, const float *gamma,
                               const float *beta, int64_t B, int64_t C,
                               float eps);
void mxp_generic_layernorm_bwd(float *dx, float *dgamma, float *dbeta,
                               const float *dy, const float *x,
                               const float *mean, const float *rstd,
                               const float *gamma, int64_t B, int64_t C);
void mxp_generic_softmax_fwd(float *y, const float *x, int64_t B, int64_t C);

/* loss.c */
void mxp_generic_mse(float *dpred, const float *pred, const float *target,
                     int64_t B, int64_t C, float grad_scale, double *loss);
void mxp_generic_softmax_xent(float *dlogits, const float *logits,
                              const int32_t *labels, int64_t B, int64_t C,
                              float grad_scale, double *loss);

/* loss_gauss.c */
void mxp_generic_gauss_nll(float *dpred, float *dbounds, const float *pred, const float *target,
                           const float *bounds, int64_t B, int64_t D, float grad_scale,
                           double *loss);

/* loss_head.c */
void mxp_generic_head_loss(float *dpred, float *dbounds, const float *pred, const float *target,
                           const float *bounds, const float *weights, int64_t B, int64_t K,
                           int64_t T, float grad_scale, double *loss);

/* reduce.c */
void mxp_generic_sum(const float *x, size_t n, double *out);
void mxp_generic_sumsq(const float *x, size_t n, double *out);
void mxp_generic_absmax(const float *x, size_t n, float *amax, int64_t *nonfinite);

/* gradpass.c */
void mxp_generic_unscale_stats(float *g, size_t n, float inv_scale,
                               float near_overflow_at, mxp_grad_stats *out);

/* fp8.c */
void mxp_generic_f32_to_fp8(mxp_dtype dst_type, void *dst, const float *src, size_t n,
                            mxp_fp8_overflow mode);
void mxp_generic_fp8_quantize(mxp_dtype fmt, float *dst, const float *src, size_t n,
                              float scale, float *amax);

/* fused.c: bias_act_store / act_bwd_store and their loops over table k's
 * unfused kernels, which ISA variants run per thread part with their own
 * table and, optionally, their own piece kernel (fn; NULL: the reference
 * piece). A piece holds at most MXP_EPI_SEG elements; tx, ta (tdy, ts, tdx)
 * are FP32 scratch of that size. A piece kernel must give the bits of the
 * reference piece over table k and fold its absmax / non-finite count
 * into the running ones (max, +). */
enum { MXP_EPI_SEG = 1024 }; /* y, its store, x, a and a's store fit L1 */
typedef struct mxp_epilogue_part {
    float y_amax, a_amax;
    int64_t y_nonfinite, a_nonfinite;
} mxp_epilogue_part;
typedef void (*mxp_epi_piece_fn)(const mxp_kernels *k, const mxp_epilogue *e, size_t off,
                                 int64_t rows, int64_t w, int64_t c0, mxp_epilogue_part *p,
                                 float *tx, float *ta);
typedef void (*mxp_bwd_piece_fn)(const mxp_kernels *k, const mxp_act_bwd *e, size_t off,
                                 size_t n, float *amax, int64_t *nonfinite, float *tdy,
                                 float *ts, float *tdx);
/* Rows [r0, r1) of e; the part's absmax / non-finite counts into *p. */
void mxp_epilogue_rows(const mxp_kernels *k, mxp_epi_piece_fn fn, const mxp_epilogue *e,
                       int64_t r0, int64_t r1, mxp_epilogue_part *p);
/* Rows [r0, r1) x columns [c0, c1) of e (whole rows as mxp_epilogue_rows
 * cuts them when the block spans them, else segments of one row), folded
 * into *p (max, +: p is NOT reset). */
void mxp_epilogue_block(const mxp_kernels *k, mxp_epi_piece_fn fn, const mxp_epilogue *e,
                        int64_t r0, int64_t r1, int64_t c0, int64_t c1, mxp_epilogue_part *p);
/* e's results from its parts: max of the absmax values, sum of the counts
 * (exact, so independent of how the tensor was cut), into e's result slots
 * (those that are not NULL). */
void mxp_epilogue_finish(mxp_epilogue *e, const mxp_epilogue_part *parts, int count);
void mxp_generic_bias_act_store(mxp_epilogue *e);
void mxp_generic_gemm_epi(const mxp_gemm_args *g, mxp_epilogue *e);
/* Elements [lo, hi) of e; their absmax / non-finite count. */
void mxp_act_bwd_range(const mxp_kernels *k, mxp_bwd_piece_fn fn, const mxp_act_bwd *e,
                       size_t lo, size_t hi, float *amax, int64_t *nonfinite);
void mxp_generic_act_bwd_store(mxp_act_bwd *e);
void mxp_generic_bias_grad_typed(float *dbias, mxp_dtype t, const void *dy, int64_t B,
                                 int64_t C);
/* optim.c */
void mxp_generic_adamw(const mxp_weights *w, const float *g, float *m,
                       float *v, size_t n, const mxp_adamw_hparams *h,
                       int64_t t);
void mxp_generic_sgd(const mxp_weights *w, const float *g, float *buf,
                     size_t n, const mxp_sgd_hparams *h, int64_t t);

#endif /* MIXPREC_KERNELS_GENERIC_H */
