/* backend/cuda/dstep_fp8.c: FP8 in the device step (spec.fp8): the
 * delayed-scaling linear layer of nn/block_dense.c on an ops table.
 *
 * Entry points: mxp_ds_f8_classify, _alloc, _gemm_plans, _reset, _free,
 * _forward, _backward, _update (dstep_internal.h: called by dstep_plan.c
 * and dstep_run.c), mxp_ds_fp8_reason, mxp_ds_fp8_layers,
 * mxp_ds_fp8_state_size, mxp_ds_fp8_get_state, mxp_ds_fp8_set_state
 * (dstep.h).
 *
 * A linear layer in FP8, as the CPU's fp8 mode (Transformer Engine's
 * DelayedScaling, hybrid: E4M3 forward, E5M2 gradients):
 *   forward   xq = E4M3(x * s_x), wq = E4M3(W * s_w) from the FP32 master,
 *             both amaxes into the slots' pending amax;
 *             y = (xq wq^T) * (1/s_x * 1/s_w) + b        (FP32, bias after)
 *   backward  db = sum_rows dY (FP32 values of the stored BF16 dY);
 *             gq = E5M2(dY * s_g), its amax pending; xq^T, wq^T again
 *             with the same scales (no amax: the CPU observes x and W in
 *             forward only);
 *             dW (+)= gq^T xq * (1/s_g * 1/s_x), dX = gq wq * (1/s_g * 1/s_w)
 *   after each pass (micro-batch: the CPU's nn_pass_run updates once per
 *   pass) every slot's pending amax enters its history and its scale is
 *   recomputed, on the device (f8_update).
 * The scales and their inverses live in device memory; the GEMMs read the
 * inverses through cuBLASLt's A/B scale pointers (lt8_run), the quantise
 * kernels the scales, so nothing is read back: the step keeps its one
 * report. cuBLASLt's FP8 GEMMs need the TN layout (mxp_lt_linear_fp8: the
 * transposed copies are written by the quantise kernel) and m, n, k
 * multiples of 16 (mxp_lt_fp8_shape_check): a layer that fails that for
 * some micro-batch's rows runs in BF16 (the mixed_bf16 GEMMs on the BF16
 * work copy) and is reported (mxp_ds_fp8_reason). Biases and layernorm
 * parameters are read from the FP32 master (nn_param_f32 in fp8 mode).
 * Plain C; nothing here prints or exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/dstep_internal.h"
#include "backend/numerics/fp8_scale.h"

void mxp_ds_f8_classify(mxp_ds_plan *p) {
    const mxp_ds_spec *s = &p->s;
    int64_t w = s->in_dim;
    int slot = 0;
    for (int l = 0; l < p->L; l++) {
        p->f8_on[l] = false;
        p->f8_why[l][0] = '\0';
        p->f8_slot[l] = -1;
        if (s->layers[l].kind != MXP_DS_LINEAR) continue;
        const int64_t out = s->layers[l].units;
        p->f8_slot[l] = slot;
        slot += 3; /* every linear layer has its slots, as the CPU model's */
        if (s->fp8) {
            char r[128] = "";
            bool ok = true;
            for (int v = 0; v < p->nvar && ok; v++)
                ok = mxp_lt_fp8_shape_check(p->rows_max - v, w, out, r, sizeof r) == 0;
            p->f8_on[l] = ok;
            if (!ok)
                snprintf(p->f8_why[l], sizeof p->f8_why[l],
                         "layer %d (linear %lld -> %lld): %s; runs in BF16", l, (long long)w,
                         (long long)out, r);
        }
        w = out;
    }
    p->f8_n = slot;
}

int mxp_ds_f8_alloc(mxp_ds_plan *p, char *why, size_t n) {
    const mxp_ds_spec *s = &p->s;
    const mxp_ds_ops *o = p->ops;
    if (!s->fp8) return 0;
    if (!o->bias_add || !o->f8_quant || !o->lt8_create || !o->lt8_run || !o->f8_update)
        return mxp_cudab_why(why, n, "device step: the %s table has no FP8 ops (fp8 plan)",
                             o->name);
    const size_t st = mxp_ds_f8_state_bytes(p->f8_n, s->fp8_cfg.history_len);
    if (o->alloc(p->dev, st, &p->f8_st, why, n)) return 1;
    float *v = mxp_ds_f8_vals(p->f8_st);
    p->f8_scale = v;
    p->f8_inv = v + p->f8_n;
    p->f8_amax = v + 2 * p->f8_n;
    size_t wmax = 0;
    for (int l = 0; l < p->L; l++)
        if (p->f8_on[l] && (size_t)p->cnt_w[l] > wmax) wmax = (size_t)p->cnt_w[l];
    if (wmax > 0) {
        const size_t rows = (size_t)p->rows_max * (size_t)p->maxw;
        void **q[6] = {(void **)&p->q_x, (void **)&p->q_xt, (void **)&p->q_g,
                       (void **)&p->q_gt, (void **)&p->q_w, (void **)&p->q_wt};
        for (int i = 0; i < 6; i++)
            if (o->alloc(p->dev, i < 4 ? rows : wmax, q[i], why, n)) return 1;
    }
    return mxp_ds_f8_reset(p, why, n);
}

int mxp_ds_f8_gemm_plans(mxp_ds_plan *p, int l, int v, int64_t rows, char *why, size_t n) {
    const mxp_dtype e4 = MXP_DTYPE_F8_E4M3, e5 = MXP_DTYPE_F8_E5M2;
    for (int w = 0; w < MXP_DS_GEMMS; w++) {
        if (w == MXP_LT_DX && l == 0) continue;
        if (w == MXP_DS_DW_ACC && p->K == 1) continue;
        const mxp_lt_gemm which = w == MXP_DS_DW_ACC ? MXP_LT_DW : (mxp_lt_gemm)w;
        mxp_lt_desc *d = &p->desc[l][v][w];
        /* A: W, W^T or X^T (E4M3); B: X (E4M3) or dY, dY^T (E5M2) */
        if (mxp_lt_linear_fp8(which, rows, p->width[l], p->width[l + 1], w == MXP_DS_DW_ACC, d,
                              why, n) ||
            p->ops->lt8_create(p->dev, d, e4, which == MXP_LT_FWD ? e4 : e5, &p->lt[l][v][w],
                               why, n))
            return 1;
    }
    return 0;
}

int mxp_ds_f8_reset(mxp_ds_plan *p, char *why, size_t n) {
    if (!p->s.fp8) return 0;
    const int N = p->f8_n, H = p->s.fp8_cfg.history_len;
    const size_t bytes = mxp_ds_f8_state_bytes(N, H);
    mxp_ds_f8_state *h = calloc(1, bytes);
    if (!h) return mxp_cudab_why(why, n, "device step: out of host memory (FP8 state)");
    h->n = N;
    h->H = H;
    float *v = mxp_ds_f8_vals(h);
    for (int i = 0; i < 2 * N; i++) v[i] = 1.0f; /* scale, scale_inv */
    int rc = p->ops->upload(p->dev, p->f8_st, h, bytes, why, n);
    if (!rc) rc = p->ops->sync(p->dev, why, n); /* h is freed now */
    free(h);
    return rc;
}

void mxp_ds_f8_free(mxp_ds_plan *p) {
    void *b[7] = {p->f8_st, p->q_x, p->q_xt, p->q_g, p->q_gt, p->q_w, p->q_wt};
    for (int i = 0; i < 7; i++)
        if (b[i]) p->ops->free(p->dev, b[i]);
}

int mxp_ds_f8_forward(mxp_ds_plan *p, int l, int v, int64_t B, const float *x32, float *y,
                      char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const int sx = p->f8_slot[l], sw = sx + 1;
    const int64_t I = p->width[l], O = p->width[l + 1];
    const mxp_dtype e4 = MXP_DTYPE_F8_E4M3;
    return o->f8_quant(p->dev, e4, p->q_x, NULL, x32, B, I, p->f8_scale + sx, p->f8_amax + sx,
                       why, n) ||
           o->f8_quant(p->dev, e4, p->q_w, NULL, p->master + p->dev_w[l], O, I,
                       p->f8_scale + sw, p->f8_amax + sw, why, n) ||
           o->lt8_run(p->dev, p->lt[l][v][MXP_LT_FWD], p->q_w, p->q_x, y,
                      p->f8_inv + sw, p->f8_inv + sx, why, n) ||
           o->bias_add(p->dev, y, p->master + p->dev_b[l], B, O, why, n);
}

int mxp_ds_f8_backward(mxp_ds_plan *p, int l, int v, bool acc, int64_t B, const float *dy32,
                       const float *x32, float *dx32, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const int sx = p->f8_slot[l], sw = sx + 1, sg = sx + 2;
    const int64_t I = p->width[l], O = p->width[l + 1];
    const mxp_dtype e4 = MXP_DTYPE_F8_E4M3, e5 = MXP_DTYPE_F8_E5M2;
    if (o->f8_quant(p->dev, e5, p->q_g, p->q_gt, dy32, B, O, p->f8_scale + sg, p->f8_amax + sg,
                    why, n) ||
        o->f8_quant(p->dev, e4, NULL, p->q_xt, x32, B, I, p->f8_scale + sx, NULL, why, n) ||
        o->lt8_run(p->dev, p->lt[l][v][acc ? MXP_DS_DW_ACC : MXP_LT_DW], p->q_xt,
                   p->q_gt, p->grads + p->dev_w[l], p->f8_inv + sx, p->f8_inv + sg, why, n))
        return 1;
    if (!dx32) return 0;
    return o->f8_quant(p->dev, e4, NULL, p->q_wt, p->master + p->dev_w[l], O, I,
                       p->f8_scale + sw, NULL, why, n) ||
           o->lt8_run(p->dev, p->lt[l][v][MXP_LT_DX], p->q_wt, p->q_g, dx32,
                      p->f8_inv + sw, p->f8_inv + sg, why, n);
}

int mxp_ds_f8_update(mxp_ds_plan *p, char *why, size_t n) {
    if (!p->s.fp8) return 0;
    return p->ops->f8_update(p->dev, p->f8_st, p->f8_n, &p->s.fp8_cfg, why, n);
}

/* ---- queries ---------------------------------------------------------------- */

const char *mxp_ds_fp8_reason(const mxp_ds_plan *p, int l) {
    if (!p->s.fp8 || l < 0 || l >= p->L || p->s.layers[l].kind != MXP_DS_LINEAR ||
        p->f8_on[l])
        return NULL;
    return p->f8_why[l];
}

int mxp_ds_fp8_layers(const mxp_ds_plan *p) {
    int k = 0;
    for (int l = 0; l < p->L; l++) k += p->f8_on[l];
    return k;
}

size_t mxp_ds_fp8_state_size(const mxp_ds_plan *p) {
    return p->s.fp8 ? (size_t)p->f8_n * (1 + (size_t)p->s.fp8_cfg.history_len) : 0;
}

static int state_args(const mxp_ds_plan *p, size_t nfloats, char *why, size_t n) {
    if (!p->s.fp8) return mxp_cudab_why(why, n, "device step: not an fp8 plan (no FP8 state)");
    if (nfloats != mxp_ds_fp8_state_size(p))
        return mxp_cudab_why(why, n,
                             "device step: FP8 state of %zu floats; accepted %zu (%d slots x "
                             "(1 scale + %d history))",
                             nfloats, mxp_ds_fp8_state_size(p), p->f8_n,
                             p->s.fp8_cfg.history_len);
    return 0;
}

int mxp_ds_fp8_get_state(mxp_ds_plan *p, float *buf, size_t nfloats, int64_t *passes,
                         char *why, size_t n) {
    if (state_args(p, nfloats, why, n)) return 1;
    const int N = p->f8_n, H = p->s.fp8_cfg.history_len;
    const size_t bytes = mxp_ds_f8_state_bytes(N, H);
    mxp_ds_f8_state *h = malloc(bytes);
    if (!h) return mxp_cudab_why(why, n, "device step: out of host memory (FP8 state)");
    int rc = p->ops->download(p->dev, h, p->f8_st, bytes, why, n) || p->ops->sync(p->dev, why, n);
    if (!rc) {
        const float *v = mxp_ds_f8_vals(h), *hist = v + 3 * N;
        memcpy(buf, v, (size_t)N * sizeof(float));
        if (passes) *passes = h->passes;
        float *out = buf + N;
        for (int i = 0; i < N; i++) /* oldest first: slot pos is the oldest */
            for (int k = 0; k < H; k++)
                *out++ = hist[(size_t)i * (size_t)H + (size_t)((h->pos + k) % H)];
    }
    free(h);
    return rc;
}

int mxp_ds_fp8_set_state(mxp_ds_plan *p, const float *buf, size_t nfloats, int64_t passes,
                         char *why, size_t n) {
    if (state_args(p, nfloats, why, n)) return 1;
    if (passes < 0)
        return mxp_cudab_why(why, n, "device step: FP8 passes %lld; accepted >= 0",
                             (long long)passes);
    const int N = p->f8_n, H = p->s.fp8_cfg.history_len;
    for (int i = 0; i < N; i++)
        if (!(buf[i] > 0.0f) || !mxp_f8_finite(buf[i]))
            return mxp_cudab_why(why, n, "device step: FP8 scale[%d] = %g; accepted finite > 0",
                                 i, (double)buf[i]);
    const size_t bytes = mxp_ds_f8_state_bytes(N, H);
    mxp_ds_f8_state *h = calloc(1, bytes);
    if (!h) return mxp_cudab_why(why, n, "device step: out of host memory (FP8 state)");
    h->n = N;
    h->H = H; /* pos 0: the history is stored oldest first */
    h->passes = passes;
    float *v = mxp_ds_f8_vals(h);
    for (int i = 0; i < N; i++) {
        v[i] = buf[i];
        v[N + i] = (float)(1.0 / (double)buf[i]);
    }
    memcpy(v + 3 * N, buf + N, (size_t)N * (size_t)H * sizeof(float));
    int rc = p->ops->upload(p->dev, p->f8_st, h, bytes, why, n) || p->ops->sync(p->dev, why, n);
    free(h);
    return rc;
}
