/* nn/layer_act.c: element-wise activations relu, gelu (exact, erf), tanh.
 *
 * Entry points: nn_{relu,gelu,tanh}_{forward,backward} (see nn_internal.h).
 * Policy class ELEMENTWISE: the stored input is widened to FP32, the kernel
 * runs in FP32, and the driver stores the result in the activation dtype.
 * Backward widens dY and the saved tensor the derivative needs (relu and
 * gelu: the input x = acts[l]; tanh: the stored output y = acts[l+1], as
 * PyTorch's tanh_backward does). No parameters; the first layer skips dX.
 */
#include "nn/nn_internal.h"

typedef void (*act_fwd_fn)(float *y, const float *x, size_t n);
typedef void (*act_bwd_fn)(float *dx, const float *dy, const float *s, size_t n);

/* y32 [B, C] = f(acts[l]) */
static void act_forward(mxp_model *m, int l, int64_t B, float *y32, act_fwd_fn f) {
    size_t n = (size_t)B * (size_t)m->layers[l].in;
    const float *x = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], n, m->b.sa);
    f(y32, x, n);
}

/* dx32 [B, C] = f'(saved) * dY, saved = acts[l + use_output] */
static void act_backward(mxp_model *m, int l, int64_t B, const void *dy,
                         float *dx32, act_bwd_fn f, int use_output) {
    if (!dx32) return;
    size_t n = (size_t)B * (size_t)m->layers[l].in;
    int s = l + use_output;
    const float *dy32 = nn_view_f32(m, m->b.grad_type, dy, n, m->b.sa);
    const float *sv = nn_view_f32(m, m->b.act_type[s], m->b.acts[s], n, m->b.sb);
    f(dx32, dy32, sv, n);
}

void nn_relu_forward(mxp_model *m, int l, int64_t B, float *y32) {
    act_forward(m, l, B, y32, m->k->relu_fwd);
}
void nn_relu_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    act_backward(m, l, B, dy, dx32, m->k->relu_bwd, 0);
}
void nn_gelu_forward(mxp_model *m, int l, int64_t B, float *y32) {
    act_forward(m, l, B, y32, m->k->gelu_fwd);
}
void nn_gelu_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    act_backward(m, l, B, dy, dx32, m->k->gelu_bwd, 0);
}
void nn_tanh_forward(mxp_model *m, int l, int64_t B, float *y32) {
    act_forward(m, l, B, y32, m->k->tanh_fwd);
}
void nn_tanh_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    act_backward(m, l, B, dy, dx32, m->k->tanh_bwd, 1);
}
