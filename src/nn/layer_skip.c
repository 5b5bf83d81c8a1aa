/* nn/layer_skip.c: residual blocks and dropout in an MLP's layer list.
 *
 * Entry points: nn_residual_forward/_backward, nn_residual_closing,
 * nn_residual_skip_add, nn_has_residual, nn_dropout_forward/_backward,
 * nn_skip_validate (nn_internal.h), mxp_model_set_dropout_pass (model.h).
 *
 * Residual (residual:N at layer c, its block s = c - N .. c - 1):
 *   forward   y = x + f(x), x = acts[s] (the block's input), f(x) = acts[c];
 *             both widened to FP32, added once (PyTorch's x + f(x)), the
 *             driver stores y in the activation dtype (op class
 *             ELEMENTWISE, like an activation).
 *   backward  dX_c = dY (f's output gradient), and dY as stored is kept in
 *             b.gs; the driver adds it to the FP32 dX of layer s before
 *             rounding that once (nn_residual_skip_add): dx = f'(dy) + dy.
 * Blocks do not nest (nn_skip_validate), so one kept gradient suffices.
 *
 * Dropout (dropout:P at layer l): in a training pass (m->drop_train, set
 * by mxp_model_step with backward) y = x * mask / (1 - P), the scale the
 * FP32 value 1.0f / (float)(1 - P) as PyTorch's CPU dropout computes it
 * (noise.div_(1 - p)), and dX = dY * the same; otherwise y = x. The mask
 * is never stored: forward and backward draw it from the same Philox
 * counters (model.h, mxp_model_set_dropout_pass): element i of layer l of
 * member e is dropped iff word (e * 64 + l) 2^40 + i of the pass's stream
 * is below round(P 2^32), so the drop probability is P to within 2^-33.
 * The kernel is the table's `dropout` (generic and AVX-512, same bits).
 */
#include "backend/devmem.h"
#include "backend/numerics/philox.h"
#include "nn/nn_internal.h"

#include <math.h>
#include <string.h>

/* ---- residual ----------------------------------------------------------- */

bool nn_has_residual(const mxp_model *m) {
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].kind == MXP_LAYER_RESIDUAL) return true;
    return false;
}

int nn_residual_closing(const mxp_model *m, int l) {
    for (int c = l + 1; c < m->n_layers; c++)
        if (m->layers[c].kind == MXP_LAYER_RESIDUAL && c - m->spec.layers[c].units == l)
            return c;
    return -1;
}

void nn_residual_forward(mxp_model *m, int c, int64_t B, float *y32) {
    const int s = c - (int)m->spec.layers[c].units;
    const size_t n = (size_t)B * (size_t)m->width[c];
    const nn_bufs *b = &m->b;
    const float *f = nn_view_f32(m, b->act_type[c], b->acts[c], n, b->sa);
    const float *x = nn_view_f32(m, b->act_type[s], b->acts[s], n, b->sb);
    if (f != y32) memcpy(y32, f, n * sizeof(float));
    m->k->axpy(y32, 1.0f, x, n); /* f(x) + x: one rounding, as x + f(x) */
}

void nn_residual_backward(mxp_model *m, int c, int64_t B, const void *dy, float *dx32) {
    nn_bufs *b = &m->b;
    const size_t n = (size_t)B * (size_t)m->width[c + 1];
    const mxp_dtype t = b->gtype[c + 1];
    memcpy(b->gs, dy, n * mxp_dtype_info(t)->size); /* the skip path's gradient */
    b->gs_type = t;
    if (!dx32) return;
    const float *d = nn_view_f32(m, t, dy, n, b->sa);
    if (d != dx32) memcpy(dx32, d, n * sizeof(float));
}

void nn_residual_skip_add(mxp_model *m, int s, int64_t B, float *dx32) {
    const int c = nn_residual_closing(m, s);
    if (c < 0 || !dx32) return;
    const nn_bufs *b = &m->b;
    const size_t n = (size_t)B * (size_t)m->width[s];
    const float *g = nn_view_f32(m, b->gs_type, b->gs, n, b->sa);
    /* under per-layer loss scaling the skip carries layer c's scale and
     * dX of layer s layer s's (before the driver's rescale to s - 1) */
    const float r = nn_grad_scale_ratio(m, s, c);
    m->k->axpy(dx32, r, g, n);
}

/* ---- dropout ------------------------------------------------------------ */

/* The Philox key of the current pass (model.h, mxp_model_set_dropout_pass). */
static uint64_t pass_key(const mxp_model *m) {
    const uint64_t st = (uint64_t)m->drop_step;
    const uint32_t ctr[4] = {(uint32_t)st, (uint32_t)(st >> 32), (uint32_t)m->drop_pass,
                             0x44524F50u /* "DROP" */};
    const uint32_t key[2] = {(uint32_t)m->seed, (uint32_t)(m->seed >> 32)};
    uint32_t out[4];
    mxp_philox4x32_10(ctr, key, out);
    return (uint64_t)out[0] | (uint64_t)out[1] << 32;
}

/* y32 or dx32 [n] = v [n] times layer l's mask and scale. */
static void apply_mask(mxp_model *m, int l, const float *v, float *out, size_t n) {
    const double p = m->spec.layers[l].rate;
    double t = nearbyint(p * 4294967296.0);
    if (t > 4294967295.0) t = 4294967295.0;
    const float scale = 1.0f / (float)(1.0 - p);
    const uint64_t e = m->ens_member > 0 ? (uint64_t)m->ens_member : 0u;
    const uint64_t counter = (e * 64u + (uint64_t)l) << 40;
    m->k->dropout(out, v, n, pass_key(m), counter, (uint32_t)t, scale);
}

void nn_dropout_forward(mxp_model *m, int l, int64_t B, float *y32) {
    const size_t n = (size_t)B * (size_t)m->width[l];
    const float *x = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], n, m->b.sa);
    if (m->drop_train)
        apply_mask(m, l, x, y32, n);
    else if (x != y32)
        memcpy(y32, x, n * sizeof(float));
}

void nn_dropout_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    if (!dx32) return;
    const size_t n = (size_t)B * (size_t)m->width[l];
    const float *d = nn_view_f32(m, m->b.gtype[l + 1], dy, n, m->b.sa);
    if (m->drop_train)
        apply_mask(m, l, d, dx32, n);
    else if (d != dx32)
        memcpy(dx32, d, n * sizeof(float));
}

static void set_dropout_pass_dev(mxp_model *m, int64_t step, int pass) {
    if (!m) return;
    m->drop_step = step;
    m->drop_pass = pass;
}

/* mxp_model_set_dropout_pass inside one backend bracket (backend/devmem.h) */
void mxp_model_set_dropout_pass(mxp_model *m, int64_t step, int pass) {
    mxp_dev_enter();
    set_dropout_pass_dev(m, step, pass);
    mxp_dev_leave();
}

/* ---- spec rules ----------------------------------------------------------- */

mxp_status nn_skip_validate(const mxp_model_spec *s, const int64_t *in_w, mxp_error *err) {
    for (int i = 0; i < s->n_layers; i++) {
        const mxp_layer_spec *ls = &s->layers[i];
        if (ls->kind == MXP_LAYER_DROPOUT && !(ls->rate >= 0.0 && ls->rate < 1.0))
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d] dropout rate=%g; accepted: 0 <= rate < 1", i,
                                 ls->rate);
        if (ls->kind != MXP_LAYER_RESIDUAL) continue;
        if (ls->units < 1 || ls->units > i)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d] residual units=%lld (the layers it wraps); "
                                 "accepted: 1..%d (the layers before it)",
                                 i, (long long)ls->units, i);
        const int b0 = i - (int)ls->units;
        for (int j = b0; j < i; j++)
            if (s->layers[j].kind == MXP_LAYER_RESIDUAL)
                return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                     "spec.layers[%d] residual units=%lld wraps layers %d..%d, "
                                     "which hold the residual layer %d; accepted: blocks that "
                                     "do not nest or overlap",
                                     i, (long long)ls->units, b0, i - 1, j);
        if (in_w[b0] != in_w[i])
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "spec.layers[%d] residual units=%lld: the block (layers %d..%d) "
                                 "takes %lld features and gives %lld; accepted: equal widths",
                                 i, (long long)ls->units, b0, i - 1, (long long)in_w[b0],
                                 (long long)in_w[i]);
    }
    return MXP_OK;
}
