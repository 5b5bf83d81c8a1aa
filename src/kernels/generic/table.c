/* kernels/generic/table.c: the portable reference kernel table.
 *
 * Entry point: mxp_kernels_generic(). Conversions forward to num's
 * reference bulk converters (their signatures match the table slots).
 */
#include "kernels/generic/generic.h"

#include <assert.h>

static mxp_gemm_compute generic_gemm_compute(mxp_dtype t, bool f16acc) {
    (void)t;
    (void)f16acc;
    return MXP_GEMM_COMPUTE_EMULATED;
}

const char *mxp_gemm_compute_name(mxp_gemm_compute c) {
    static const char *const names[] = {
        "FP32 FMA",
        "FP32 FMA after widening to FP32",
        "BF16 pair dot products (vdpbf16ps), FP32 accumulation",
        "FP16 FMA (vfmadd231ph), FP16 partial sums promoted to FP32 every k products",
        "portable scalar code",
    };
    static_assert(sizeof names / sizeof names[0] == MXP_GEMM_COMPUTE_COUNT, "one name each");
    return (unsigned)c < MXP_GEMM_COMPUTE_COUNT ? names[c] : "?";
}

static const mxp_kernels generic_table = {
    .isa = "generic",
    .gemm_compute = generic_gemm_compute,
    .gemm = mxp_generic_gemm,
    .gemm_epi = mxp_generic_gemm_epi,
    .gemm_f16acc = mxp_generic_gemm_f16acc,
    .convert = mxp_convert,
    .convert_sr = mxp_convert_sr,
    .f32_to_fp8 = mxp_generic_f32_to_fp8,
    .fp8_quantize = mxp_generic_fp8_quantize,
    .relu_fwd = mxp_generic_relu_fwd,
    .relu_bwd = mxp_generic_relu_bwd,
    .gelu_fwd = mxp_generic_gelu_fwd,
    .gelu_bwd = mxp_generic_gelu_bwd,
    .tanh_fwd = mxp_generic_tanh_fwd,
    .tanh_bwd = mxp_generic_tanh_bwd,
    .axpy = mxp_generic_axpy,
    .scale = mxp_generic_scale,
    .dropout = mxp_generic_dropout,
    .add_bias = mxp_generic_add_bias,
    .bias_grad = mxp_generic_bias_grad,
    .layernorm_fwd = mxp_generic_layernorm_fwd,
    .layernorm_bwd = mxp_generic_layernorm_bwd,
    .softmax_fwd = mxp_generic_softmax_fwd,
    .mse = mxp_generic_mse,
    .softmax_xent = mxp_generic_softmax_xent,
    .sum = mxp_generic_sum,
    .sumsq = mxp_generic_sumsq,
    .absmax = mxp_generic_absmax,
    .unscale_stats = mxp_generic_unscale_stats,
    .bias_act_store = mxp_generic_bias_act_store,
    .act_bwd_store = mxp_generic_act_bwd_store,
    .bias_grad_typed = mxp_generic_bias_grad_typed,
    .adamw = mxp_generic_adamw,
    .sgd = mxp_generic_sgd,
    .gauss_nll = mxp_generic_gauss_nll,
    .head_loss = mxp_generic_head_loss,
};

const mxp_kernels *mxp_kernels_generic(void) { return &generic_table; }
