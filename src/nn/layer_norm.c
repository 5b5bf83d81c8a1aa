/* nn/layer_norm.c: layer normalisation over the channels of each row
 * (PyTorch nn.LayerNorm(C), biased variance, eps inside the sqrt).
 *
 * Entry points: nn_layernorm_forward, nn_layernorm_backward.
 * Policy class NORM: statistics and output in FP32 (the default policies
 * store the output as F32). gamma and beta live in the work slab and are
 * widened to FP32; per-row mean and rstd [B] are kept in the layer's
 * ln_stats slot for backward (llm.c layernorm_forward/_backward).
 */
#include "nn/nn_internal.h"

static float *ln_mean(mxp_model *m, int l) {
    return m->b.ln_stats +
           (size_t)m->layers[l].ln_slot * 2 * (size_t)m->spec.max_batch;
}

static float *ln_rstd(mxp_model *m, int l) {
    return ln_mean(m, l) + (size_t)m->spec.max_batch;
}

void nn_layernorm_forward(mxp_model *m, int l, int64_t B, float *y32) {
    const nn_layer *L = &m->layers[l];
    const size_t C = (size_t)L->in;
    const float *x = nn_view_f32(m, m->b.act_type[l], m->b.acts[l],
                                 (size_t)B * C, m->b.sa);
    const float *gamma = nn_param_f32(m, L->w_off, C, m->b.p0);
    const float *beta = nn_param_f32(m, L->b_off, C, m->b.p1);
    m->k->layernorm_fwd(y32, ln_mean(m, l), ln_rstd(m, l), x, gamma, beta, B,
                        L->in, m->spec.layernorm_eps);
}

/* dgamma, dbeta += (grad slab; = when writing, nn_grad_zero); dX = into dx32, or into the driver's idle
 * staging buffer sy when the caller does not need it (first layer).
 * Scratch: xs when it has room for the two FP32 views, else sa and sb. */
void nn_layernorm_backward(mxp_model *m, int l, int64_t B, const void *dy,
                           float *dx32) {
    const nn_layer *L = &m->layers[l];
    const size_t C = (size_t)L->in;
    const size_t n = (size_t)B * C;
    /* the views in xs when it holds both (idle between layer calls; sb
     * may lie over this layer's input, model.c plan_alias_sb) */
    const bool in_xs = m->b.xs && m->b.xs_n / 2 >= n;
    float *va = in_xs ? m->b.xs : m->b.sa, *vb = in_xs ? m->b.xs + n : m->b.sb;
    const float *dy32 = nn_view_f32(m, m->b.grad_type, dy, n, va);
    const float *x = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], n, vb);
    const float *gamma = nn_param_f32(m, L->w_off, C, m->b.p0);
    nn_grad_zero(m, L->w_off, L->n_params); /* gamma then beta: "+=" kernel */
    m->k->layernorm_bwd(dx32 ? dx32 : m->b.sy, m->grads + L->w_off,
                        m->grads + L->b_off, dy32, x, ln_mean(m, l),
                        ln_rstd(m, l), gamma, B, L->in);
}
