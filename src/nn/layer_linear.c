/* nn/layer_linear.c: fully connected layer y = x W^T + b (PyTorch nn.Linear).
 *
 * Entry points: nn_linear_forward, nn_linear_backward, nn_linear_forward_epi
 * and nn_linear_backward_epi (the forward GEMM, the dX GEMM, with the
 * driver's fused epilogue; see nn_internal.h).
 * Shapes: x [B, in], W [out, in] (work slab, weight dtype), b [out],
 * y [B, out]. The matmul operands enter in their stored dtypes (x cast to the
 * policy's matmul input dtype when its activation dtype differs); the GEMM
 * accumulates in FP32 (or, when the policy sets fp16_accum_k, FP16 x FP16
 * GEMMs use the emulated FP16 fast-accumulate kernel: linear_gemm). Backward (llm.c matmul_backward, in GEMM form):
 *   dX  = dY W          ("=", skipped for the first layer)
 *   dW += dY^T X        (beta = 1 into the FP32 grad slab; beta = 0, "=",
 *                        when the backward writes: nn_grad_beta)
 *   db += sum_b dY      (FP32; its slice zeroed first when writing)
 * FP8 mode (m->fp8) runs the delayed-scaling form in block_dense.c.
 * A layer kept FP32 (mxp_model_set_fp32_layers, nn_layer_fp32) reads W and
 * b from the FP32 master and x, dY in FP32 (the planner stores them so), in
 * every mode FP8 included: its GEMMs are the fp32 mode's GEMMs.
 */
#include "nn/nn_internal.h"

/* The layer's GEMM: the emulated FP16 fast-accumulate GEMM when the policy
 * asks for it (fp16_accum_k > 0) and both operands are FP16, else FP32
 * accumulation (FP32-kept layers and other dtypes). */
static void linear_gemm(const mxp_model *m, const mxp_gemm_args *g) {
    int k = m->policy.fp16_accum_k;
    if (k > 0 && g->a_type == MXP_DTYPE_F16 && g->b_type == MXP_DTYPE_F16)
        m->k->gemm_f16acc(g, k);
    else
        m->k->gemm(g);
}

/* linear_gemm, then the pass of e over its output (g->C == e->y): the
 * table's gemm_epi, or, for the FP16 fast-accumulate GEMM (no fused form),
 * the two calls. */
static void linear_gemm_epi(const mxp_model *m, const mxp_gemm_args *g, mxp_epilogue *e) {
    if (m->policy.fp16_accum_k > 0 && g->a_type == MXP_DTYPE_F16 && g->b_type == MXP_DTYPE_F16) {
        linear_gemm(m, g);
        m->k->bias_act_store(e);
    } else {
        m->k->gemm_epi(g, e);
    }
}

static const float *forward_args(mxp_model *m, int l, int64_t B, float *y32, mxp_gemm_args *g);

void nn_linear_forward(mxp_model *m, int l, int64_t B, float *y32) {
    if (m->fp8 && !nn_layer_fp32(m, l)) {
        nn_fp8_linear_forward(m, l, B, y32);
        return;
    }
    mxp_gemm_args g;
    const float *bias = forward_args(m, l, B, y32, &g);
    linear_gemm(m, &g);
    m->k->add_bias(y32, bias, B, m->layers[l].out);
}

/* The forward GEMM y32 [B, out] = x W^T into *g; returns the layer's FP32
 * bias [out] (widened into p0 when stored narrower). */
static const float *forward_args(mxp_model *m, int l, int64_t B, float *y32, mxp_gemm_args *g) {
    const nn_layer *L = &m->layers[l];
    mxp_dtype xt, wt, bt;
    const void *x = nn_matmul_input(m, l, B, &xt);
    const void *w = nn_layer_weights(m, l, L->w_off, &wt);
    const void *bw = nn_layer_weights(m, l, L->b_off, &bt);
    *g = (mxp_gemm_args){
        .trans_a = false, .trans_b = true,
        .M = B, .N = L->out, .K = L->in,
        .a_type = xt, .A = x, .lda = L->in,
        .b_type = wt, .B = w, .ldb = L->in,
        .C = y32, .ldc = L->out, .alpha = 1.0f, .beta = 0.0f,
    };
    return nn_view_f32(m, bt, bw, (size_t)L->out, m->b.p0);
}

void nn_linear_forward_epi(mxp_model *m, int l, int64_t B, mxp_epilogue *e) {
    mxp_gemm_args g;
    e->bias = forward_args(m, l, B, e->y, &g);
    linear_gemm_epi(m, &g, e);
}

/* The backward; with dx_epi, dX = dx_epi->y and the dX GEMM runs that
 * epilogue (linear_gemm_epi). */
static void backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32,
                     mxp_epilogue *dx_epi) {
    const nn_layer *L = &m->layers[l];
    const mxp_dtype gt = m->b.gtype[l + 1]; /* dY: the gradient of acts[l+1] */

    /* db += column sums of dY, in FP32 (fused: dY widened as it is read) */
    nn_grad_zero(m, L->b_off, (size_t)L->out);
    if (m->fuse) {
        m->k->bias_grad_typed(m->grads + L->b_off, gt, dy, B, L->out);
    } else {
        const float *dy32 = nn_view_f32(m, gt, dy, (size_t)B * (size_t)L->out, m->b.sa);
        m->k->bias_grad(m->grads + L->b_off, dy32, B, L->out);
    }

    /* dW[out, in] += dY^T [out, B] @ X [B, in]  (= when writing) */
    mxp_dtype xt;
    const void *x = nn_matmul_input(m, l, B, &xt);
    mxp_gemm_args gw = {
        .trans_a = true, .trans_b = false,
        .M = L->out, .N = L->in, .K = B,
        .a_type = gt, .A = dy, .lda = L->out,
        .b_type = xt, .B = x, .ldb = L->in,
        .C = m->grads + L->w_off, .ldc = L->in, .alpha = 1.0f, .beta = nn_grad_beta(m),
    };
    linear_gemm(m, &gw);

    if (!dx32) return;
    /* dX[B, in] = dY [B, out] @ W [out, in] */
    mxp_dtype wt;
    const void *w = nn_layer_weights(m, l, L->w_off, &wt);
    mxp_gemm_args gx = {
        .trans_a = false, .trans_b = false,
        .M = B, .N = L->in, .K = L->out,
        .a_type = gt, .A = dy, .lda = L->out,
        .b_type = wt, .B = w, .ldb = L->in,
        .C = dx32, .ldc = L->in, .alpha = 1.0f, .beta = 0.0f,
    };
    if (dx_epi) linear_gemm_epi(m, &gx, dx_epi);
    else linear_gemm(m, &gx);
}

void nn_linear_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    if (m->fp8 && !nn_layer_fp32(m, l)) {
        nn_fp8_linear_backward(m, l, B, dy, dx32);
        return;
    }
    backward(m, l, B, dy, dx32, NULL);
}

void nn_linear_backward_epi(mxp_model *m, int l, int64_t B, const void *dy, mxp_epilogue *e) {
    backward(m, l, B, dy, e->y, e);
}
