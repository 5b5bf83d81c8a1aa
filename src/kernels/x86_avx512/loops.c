/* kernels/x86_avx512/loops.c: put the AVX-512 hot loops into the table.
 *
 * Entry point: mxp_avx512_fill_loops (called once by table.c). Every slot
 * except gemm gets its AVX-512 version; what each loop guarantees relative
 * to the generic reference (bit-exact or a stated bound) is written at the
 * top of its file: loops_convert.c, loops_eltwise.c, loops_rows.c,
 * loops_grad.c, loops_optim.c, loops_dropout.c, loops_head.c, loops_fp8.c (FP8 conversions, reached
 * through convert, and the FP8 quantise).
 */
#include "kernels/x86_avx512/loops.h"

void mxp_avx512_fill_loops(mxp_kernels *t) {
    t->convert = mxp_avx512_convert;
    t->convert_sr = mxp_avx512_convert_sr;
    t->f32_to_fp8 = mxp_avx512_f32_to_fp8;
    t->fp8_quantize = mxp_avx512_fp8_quantize;
    t->relu_fwd = mxp_avx512_relu_fwd;
    t->relu_bwd = mxp_avx512_relu_bwd;
    t->gelu_fwd = mxp_avx512_gelu_fwd;
    t->gelu_bwd = mxp_avx512_gelu_bwd;
    t->tanh_fwd = mxp_avx512_tanh_fwd;
    t->tanh_bwd = mxp_avx512_tanh_bwd;
    t->axpy = mxp_avx512_axpy;
    t->scale = mxp_avx512_scale;
    t->dropout = mxp_avx512_dropout;
    t->add_bias = mxp_avx512_add_bias;
    t->bias_grad = mxp_avx512_bias_grad;
    t->layernorm_fwd = mxp_avx512_layernorm_fwd;
    t->layernorm_bwd = mxp_avx512_layernorm_bwd;
    t->softmax_fwd = mxp_avx512_softmax_fwd;
    t->mse = mxp_avx512_mse;
    t->softmax_xent = mxp_avx512_softmax_xent;
    t->head_loss = mxp_avx512_head_loss;
    t->gauss_nll = mxp_avx512_gauss_nll;
    t->sum = mxp_avx512_sum;
    t->sumsq = mxp_avx512_sumsq;
    t->absmax = mxp_avx512_absmax;
    t->unscale_stats = mxp_avx512_unscale_stats;
    t->bias_act_store = mxp_avx512_bias_act_store;
    t->act_bwd_store = mxp_avx512_act_bwd_store;
    t->bias_grad_typed = mxp_avx512_bias_grad_typed;
    t->adamw = mxp_avx512_adamw;
    t->sgd = mxp_avx512_sgd;
}
