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

/* dgamma, dbeta += (grad slab); dX = into dx32, or into the driver's idle
 * staging buffer sy when the caller does not need it (first layer). */
void nn_layernorm_backward(mxp_model *m, int l, int64_t B, const void *dy,
                           float *dx32) {
    const nn_layer *L = &m->layers[l];
    const size_t C = (size_t)L->in;
    const size_t n = (size_t)B * C;
    const float *dy32 = nn_view_f32(m, m->b.grad_type, dy, n, m->b.sa);
    const float *x = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], n, m->b.sb);
    const float *gamma = nn_param_f32(m, L->w_off, C, m->b.p0);
    m->k->layernorm_bwd(dx32 ? dx32 : m->b.sy, m->grads + L->w_off,
                        m->grads + L->b_off, dy32, x, ln_mean(m, l),
                        ln_rstd(m, l), gamma, B, L->in);
}
