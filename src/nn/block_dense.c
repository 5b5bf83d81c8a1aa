/* nn/block_dense.c: the FP8 (emulated) form of a dense product, the
 * model's FP8 scaling state, and small dtype helpers of the GPT layers.
 *
 * Entry points: nn_dtype_is_fp8, nn_param_f32, nn_fp8_make,
 * nn_fp8_dense_forward/_backward, nn_fp8_linear_forward/_backward,
 * nn_round_f32, mxp_model_set_fp8_config, mxp_model_fp8.
 *
 * A dense product y = x W^T + b in FP8 mode, as Transformer Engine runs a
 * te.Linear under DelayedScaling (hybrid format):
 *   forward   xq = E4M3(x * s_x), wq = E4M3(W * s_w)          (saturating)
 *             y  = (xq wq^T) * (1/s_x * 1/s_w) + b            (FP32 GEMM)
 *   backward  gq = E5M2(dY * s_g)
 *             dX  = (gq wq) * (1/s_g * 1/s_w)
 *             dW += (gq^T xq) * (1/s_g * 1/s_x)
 *             db += sum_rows dY                               (FP32, unquantised)
 * The quantised values are exact in FP32, so the FP32 GEMM on them is the
 * emulation ("quantise, then compute in FP32"). W comes from the FP32
 * master; xq and wq are recomputed in backward from the stored BF16 input
 * and the master with the same scales (scales change only at the end of a
 * step), so they are identical to the forward's. amax is observed only in
 * training steps (m->fp8_observe). Slots: x = slot, W = slot + 1,
 * dY = slot + 2.
 */
#include "nn/nn_internal.h"

#include <string.h>

bool nn_dtype_is_fp8(mxp_dtype t) {
    return t == MXP_DTYPE_F8_E4M3 || t == MXP_DTYPE_F8_E5M2;
}

const float *nn_param_f32(const mxp_model *m, size_t off, size_t n, float *scratch) {
    if (m->fp8 && m->b.master) return m->b.master + off;
    return nn_view_f32(m, m->policy.weight, nn_work_at(m, off), n, scratch);
}

mxp_status nn_fp8_make(const mxp_model *m, const mxp_precision_policy *p,
                       mxp_fp8_scaling **out, mxp_error *err) {
    *out = NULL;
    if (!nn_dtype_is_fp8(p->ops[MXP_OP_MATMUL].input) || m->n_fp8 == 0) return MXP_OK;
    if (!p->has_master)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "policy %s: FP8 matmul operands need an FP32 master copy "
                             "(has_master); accepted: has_master = true",
                             mxp_precision_name(p->mode));
    mxp_dtype *fmt = mxp_calloc((size_t)m->n_fp8, sizeof *fmt);
    if (!fmt) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "fp8 tensor formats");
    /* forward operands (x, W) in the matmul input format, dY in the grad
     * format: E4M3 / E5M2 under the fp8 policy */
    mxp_dtype fwd = p->ops[MXP_OP_MATMUL].input;
    mxp_dtype bwd = nn_dtype_is_fp8(p->grad) ? p->grad : MXP_DTYPE_F8_E5M2;
    for (int i = 0; i < m->n_fp8; i++) fmt[i] = i % 3 == 2 ? bwd : fwd;
    mxp_status s = mxp_fp8_scaling_create(&m->fp8_cfg, m->n_fp8, fmt, out, err);
    mxp_free(fmt);
    return s;
}

mxp_status mxp_model_set_fp8_config(mxp_model *m, const mxp_fp8_config *c, mxp_error *err) {
    if (!m || !c)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_model_set_fp8_config: NULL");
    mxp_status s = mxp_fp8_config_validate(c, err);
    if (s != MXP_OK) return s;
    mxp_fp8_config old = m->fp8_cfg;
    m->fp8_cfg = *c;
    mxp_fp8_scaling *f8 = NULL;
    s = nn_fp8_make(m, &m->policy, &f8, err);
    if (s != MXP_OK) {
        m->fp8_cfg = old;
        return s;
    }
    mxp_fp8_scaling_destroy(m->fp8);
    m->fp8 = f8;
    return MXP_OK;
}

mxp_fp8_scaling *mxp_model_fp8(mxp_model *m) { return m ? m->fp8 : NULL; }

/* ---- the dense product ---------------------------------------------------------- */

/* xq [B, in] <- E4M3(x32 * s_x) (xq may alias x32); wq [out, in] from the
 * master; observes both amaxes in training steps. */
static void quantize_operands(mxp_model *m, int slot, const float *x32, int64_t B, int64_t in,
                              int64_t out, size_t w_off, float *xq, float *wq, bool observe) {
    mxp_fp8_scaling *f = m->fp8;
    const size_t nx = (size_t)B * (size_t)in, nw = (size_t)out * (size_t)in;
    float ax = mxp_fp8_quantize(mxp_fp8_scaling_format(f, slot), xq, x32, nx,
                                mxp_fp8_scaling_scale(f, slot));
    float aw = mxp_fp8_quantize(mxp_fp8_scaling_format(f, slot + 1), wq, m->b.master + w_off,
                                nw, mxp_fp8_scaling_scale(f, slot + 1));
    if (observe && m->fp8_observe) {
        mxp_fp8_scaling_observe(f, slot, ax);
        mxp_fp8_scaling_observe(f, slot + 1, aw);
    }
}

/* y32 [B, out] = x W^T (+ b), FP8-emulated. x32 is the FP32 input [B, in];
 * xq [B, in] and wq [out, in] are scratch (xq may alias x32 when the input
 * is not needed afterwards). has_bias selects b at b_off. */
void nn_fp8_dense_forward(mxp_model *m, int slot, const float *x32, int64_t B, int64_t in,
                          int64_t out, size_t w_off, bool has_bias, size_t b_off, float *y32,
                          float *xq, float *wq) {
    quantize_operands(m, slot, x32, B, in, out, w_off, xq, wq, true);
    const mxp_fp8_scaling *f = m->fp8;
    mxp_gemm_args g = {
        .trans_a = false, .trans_b = true, .M = B, .N = out, .K = in,
        .a_type = MXP_DTYPE_F32, .A = xq, .lda = in,
        .b_type = MXP_DTYPE_F32, .B = wq, .ldb = in,
        .C = y32, .ldc = out,
        .alpha = mxp_fp8_scaling_scale_inv(f, slot) * mxp_fp8_scaling_scale_inv(f, slot + 1),
        .beta = 0.0f,
    };
    m->k->gemm(&g);
    if (has_bias) m->k->add_bias(y32, m->b.master + b_off, B, out);
}

/* Backward of nn_fp8_dense_forward. dy32 [B, out] holds the FP32 output
 * gradient and is OVERWRITTEN with its quantised form; parameter grads are
 * added (+=) to the grad slab (written when the backward writes); dx32 [B, in] ("=") may be NULL. x32, xq, wq
 * as in forward (xq must not alias dy32). */
void nn_fp8_dense_backward(mxp_model *m, int slot, const float *x32, int64_t B, int64_t in,
                           int64_t out, size_t w_off, bool has_bias, size_t b_off, float *dy32,
                           float *dx32, float *xq, float *wq) {
    mxp_fp8_scaling *f = m->fp8;
    if (has_bias) {
        nn_grad_zero(m, b_off, (size_t)out);
        m->k->bias_grad(m->grads + b_off, dy32, B, out);
    }
    float ag = mxp_fp8_quantize(mxp_fp8_scaling_format(f, slot + 2), dy32, dy32,
                                (size_t)B * (size_t)out, mxp_fp8_scaling_scale(f, slot + 2));
    if (m->fp8_observe) mxp_fp8_scaling_observe(f, slot + 2, ag);
    quantize_operands(m, slot, x32, B, in, out, w_off, xq, wq, false);
    const float inv_g = mxp_fp8_scaling_scale_inv(f, slot + 2);
    mxp_gemm_args gw = {
        .trans_a = true, .trans_b = false, .M = out, .N = in, .K = B,
        .a_type = MXP_DTYPE_F32, .A = dy32, .lda = out,
        .b_type = MXP_DTYPE_F32, .B = xq, .ldb = in,
        .C = m->grads + w_off, .ldc = in,
        .alpha = inv_g * mxp_fp8_scaling_scale_inv(f, slot), .beta = nn_grad_beta(m),
    };
    m->k->gemm(&gw);
    if (!dx32) return;
    mxp_gemm_args gx = {
        .trans_a = false, .trans_b = false, .M = B, .N = in, .K = out,
        .a_type = MXP_DTYPE_F32, .A = dy32, .lda = out,
        .b_type = MXP_DTYPE_F32, .B = wq, .ldb = in,
        .C = dx32, .ldc = in,
        .alpha = inv_g * mxp_fp8_scaling_scale_inv(f, slot + 1), .beta = 0.0f,
    };
    m->k->gemm(&gx);
}

/* ---- the sequential linear layer in FP8 mode ---------------------------------------- */

void nn_fp8_linear_forward(mxp_model *m, int l, int64_t B, float *y32) {
    const nn_layer *L = &m->layers[l];
    const size_t n = (size_t)B * (size_t)L->in;
    const float *x32 = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], n, m->b.sa);
    nn_fp8_dense_forward(m, L->fp8_slot, x32, B, L->in, L->out, L->w_off, true, L->b_off, y32,
                         m->b.sa, m->b.fw);
}

void nn_fp8_linear_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    const nn_layer *L = &m->layers[l];
    const size_t ny = (size_t)B * (size_t)L->out, nx = (size_t)B * (size_t)L->in;
    const float *dyv = nn_view_f32(m, m->b.grad_type, dy, ny, m->b.sa);
    if (dyv != m->b.sa) memcpy(m->b.sa, dyv, ny * sizeof(float));
    const float *x32 = nn_view_f32(m, m->b.act_type[l], m->b.acts[l], nx, m->b.sb);
    nn_fp8_dense_backward(m, L->fp8_slot, x32, B, L->in, L->out, L->w_off, true, L->b_off,
                          m->b.sa, dx32, m->b.sb, m->b.fw);
}

/* ---- in-place rounding ------------------------------------------------------------ */

void nn_round_f32(const mxp_model *m, mxp_dtype t, float *buf, size_t n) {
    if (t == MXP_DTYPE_F32) return;
    enum { CHUNK = 2048 };
    uint16_t tmp[CHUNK]; /* 16-bit or 8-bit codes */
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        m->k->convert(t, tmp, MXP_DTYPE_F32, buf + i, k);
        m->k->convert(MXP_DTYPE_F32, buf + i, t, tmp, k);
    }
}
