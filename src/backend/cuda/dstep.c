/* backend/cuda/dstep.c: the device MLP training step (dstep.h): the plan
 * (buffers, storage dtypes, GEMM plans, made once) and the step (a fixed
 * sequence of ops-table calls, one device-to-host copy).
 *
 * Entry points: mxp_ds_plan_create, mxp_ds_plan_destroy, mxp_ds_num_params,
 * mxp_ds_param_offset, mxp_ds_set_params, mxp_ds_step, mxp_ds_get.
 * The op order and storage rules copy the CPU model's (nn/model_step.c,
 * layer_linear.c, layer_act.c, layer_norm.c, loss.c, model_plan.c) and the
 * trainer's step (train/trainer.c); tests/test_dstep_emu.c holds them
 * together. Differences on purpose: decide, the update and the scaler rule
 * run before the report (a single device needs no host agreement on
 * found_inf, so the step has no mid-step sync), and the loss travels in the
 * control block. Plain C; nothing here prints or exits.
 */
#include "backend/cuda/dstep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/numerics/mlp.h"

struct mxp_ds_plan {
    mxp_ds_spec s;
    const mxp_ds_ops *ops;
    void *dev;
    int L;
    int64_t width[MXP_DS_MAX_LAYERS + 1];
    int64_t off_w[MXP_DS_MAX_LAYERS], off_b[MXP_DS_MAX_LAYERS]; /* host slab; -1: none */
    int64_t dev_w[MXP_DS_MAX_LAYERS], dev_b[MXP_DS_MAX_LAYERS]; /* device slabs (padded) */
    int64_t cnt_w[MXP_DS_MAX_LAYERS], cnt_b[MXP_DS_MAX_LAYERS]; /* elements */
    mxp_dtype st[MXP_DS_MAX_LAYERS + 1]; /* storage of acts[l] */
    size_t P;  /* parameters (the CPU slab) */
    size_t PD; /* device slab elements: every tensor starts on a MXP_DS_ALIGN boundary */
    int64_t maxw;
    /* device buffers */
    float *master, *grads, *m, *v, *pw32; /* pw32: the work copy widened (= master in fp32) */
    void *work;                           /* = master in fp32 */
    void *acts[MXP_DS_MAX_LAYERS + 1];
    float *x32, *y32, *sa, *sb, *dx32, *target;
    int32_t *labels;
    void *g[2]; /* activation gradients, ping-pong, in gt */
    float *ln_mean[MXP_DS_MAX_LAYERS], *ln_rstd[MXP_DS_MAX_LAYERS];
    void *lt[MXP_DS_MAX_LAYERS][MXP_LT_GEMM_COUNT];
    mxp_lt_desc desc[MXP_DS_MAX_LAYERS][MXP_LT_GEMM_COUNT];
    /* host state between steps (mirrors of the reported control block) */
    mxp_step_ctl ctl;
};

/* Device slab alignment in elements: 128 (256 bytes in BF16/FP16, 512 in
 * FP32), so every weight, bias and gradient a cuBLASLt GEMM reads or
 * writes starts where cudaMalloc's own buffers do: the algorithm chosen at
 * plan time assumes the default 256-byte operand alignment
 * (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES). The padding elements are
 * zeros in every slab and stay zero (gradient 0, AdamW of zeros); the
 * grad pass counts them among n and zeros, nothing else sees them. */
#define MXP_DS_ALIGN 128

static size_t dsize(mxp_dtype t) { return t == MXP_DTYPE_F32 ? 4 : 2; }

static int act_code(mxp_ds_kind k) {
    return k == MXP_DS_RELU ? MXP_MK_ACT_RELU : k == MXP_DS_GELU ? MXP_MK_ACT_GELU
                                                                 : MXP_MK_ACT_TANH;
}

/* Allocate bytes into *out (tracked for destroy through the plan fields). */
static int dalloc(mxp_ds_plan *p, size_t bytes, void **out, char *why, size_t n) {
    return p->ops->alloc(p->dev, bytes, out, why, n);
}

static int validate(const mxp_ds_spec *s, char *why, size_t n) {
    if (s->n_layers < 1 || s->n_layers > MXP_DS_MAX_LAYERS)
        return mxp_cudab_why(why, n, "device step: %d layers; accepted 1..%d", s->n_layers,
                             MXP_DS_MAX_LAYERS);
    if (s->in_dim < 1 || s->batch < 1)
        return mxp_cudab_why(why, n, "device step: in_dim %lld, batch %lld; accepted >= 1",
                             (long long)s->in_dim, (long long)s->batch);
    if (s->lowp != MXP_DTYPE_F32 && s->lowp != MXP_DTYPE_BF16 && s->lowp != MXP_DTYPE_F16)
        return mxp_cudab_why(why, n,
                             "device step: low dtype %d; accepted F32 (fp32), BF16 "
                             "(mixed_bf16), F16 (mixed_fp16)",
                             (int)s->lowp);
    if ((unsigned)s->optim >= MXP_DS_OPTIM_COUNT)
        return mxp_cudab_why(why, n, "device step: optimizer %d; accepted AdamW (0), SGD (1)",
                             (int)s->optim);
    if (s->optim == MXP_DS_SGD && !(s->momentum >= 0.0f && s->momentum < 1.0f))
        return mxp_cudab_why(why, n, "device step: SGD momentum %g; accepted [0, 1)",
                             (double)s->momentum);
    if (s->loss != MXP_DS_MSE && s->loss != MXP_DS_XENT)
        return mxp_cudab_why(why, n, "device step: loss %d; accepted MSE, softmax xent",
                             (int)s->loss);
    for (int l = 0; l < s->n_layers; l++) {
        if ((unsigned)s->layers[l].kind >= MXP_DS_KIND_COUNT)
            return mxp_cudab_why(why, n,
                                 "device step: layer %d kind %d; accepted linear, relu, gelu, "
                                 "tanh, layernorm",
                                 l, (int)s->layers[l].kind);
        if (s->layers[l].kind == MXP_DS_LINEAR && s->layers[l].units < 1)
            return mxp_cudab_why(why, n, "device step: layer %d: linear with %lld units", l,
                                 (long long)s->layers[l].units);
    }
    return 0;
}

/* Widths, parameter offsets (the CPU slab order) and storage dtypes
 * (nn/model_plan.c for a model without FP32-kept layers). */
static int layout(mxp_ds_plan *p, char *why, size_t n) {
    const mxp_ds_spec *s = &p->s;
    size_t off = 0, doff = 0;
    p->width[0] = s->in_dim;
    p->maxw = s->in_dim;
    p->st[0] = s->lowp;
    for (int l = 0; l < p->L; l++) {
        const int64_t in = p->width[l];
        mxp_ds_kind k = s->layers[l].kind;
        p->off_w[l] = p->off_b[l] = p->dev_w[l] = p->dev_b[l] = -1;
        p->cnt_w[l] = p->cnt_b[l] = 0;
        p->width[l + 1] = k == MXP_DS_LINEAR ? s->layers[l].units : in;
        if (k == MXP_DS_LINEAR) {
            p->cnt_w[l] = in * p->width[l + 1];
            p->cnt_b[l] = p->width[l + 1];
        } else if (k == MXP_DS_LAYERNORM) {
            p->cnt_w[l] = p->cnt_b[l] = in;
        }
        if (p->cnt_w[l] > 0) {
            p->off_w[l] = (int64_t)off;
            p->off_b[l] = (int64_t)off + p->cnt_w[l];
            off += (size_t)(p->cnt_w[l] + p->cnt_b[l]);
            p->dev_w[l] = (int64_t)doff;
            doff += ((size_t)p->cnt_w[l] + MXP_DS_ALIGN - 1) / MXP_DS_ALIGN * MXP_DS_ALIGN;
            p->dev_b[l] = (int64_t)doff;
            doff += ((size_t)p->cnt_b[l] + MXP_DS_ALIGN - 1) / MXP_DS_ALIGN * MXP_DS_ALIGN;
        }
        if (p->width[l + 1] > p->maxw) p->maxw = p->width[l + 1];
        /* matmul and element-wise outputs: the activation dtype; norm: F32,
         * or the matmul input dtype when a linear layer reads it */
        mxp_dtype t = s->lowp;
        if (k == MXP_DS_LAYERNORM)
            t = l + 1 < p->L && s->layers[l + 1].kind == MXP_DS_LINEAR ? s->lowp
                                                                       : MXP_DTYPE_F32;
        p->st[l + 1] = t;
    }
    p->st[p->L] = MXP_DTYPE_F32; /* the loss's input */
    for (int l = 0; l < p->L; l++)
        if (s->layers[l].kind == MXP_DS_LINEAR && p->st[l] != s->lowp)
            return mxp_cudab_why(why, n,
                                 "device step: layer %d (linear) reads an input stored as F32 "
                                 "in a %s plan; the device step has no cast before a GEMM",
                                 l, s->lowp == MXP_DTYPE_BF16 ? "BF16" : "F16");
    p->P = off;
    p->PD = doff;
    return 0;
}

int mxp_ds_plan_create(const mxp_ds_spec *spec, const mxp_ds_ops *ops, void *dev,
                       mxp_ds_plan **out, char *why, size_t n) {
    *out = NULL;
    if (!spec || !ops) return mxp_cudab_why(why, n, "device step: NULL spec or ops");
    if (validate(spec, why, n)) return 1;
    mxp_ds_plan *p = calloc(1, sizeof *p);
    if (!p) return mxp_cudab_why(why, n, "device step: out of host memory for the plan");
    p->s = *spec;
    p->ops = ops;
    p->dev = dev;
    p->L = spec->n_layers;
    if (layout(p, why, n)) goto fail;
    if (spec->optim == MXP_DS_SGD && !ops->sgd) {
        mxp_cudab_why(why, n, "device step: the %s table has no SGD", ops->name);
        goto fail;
    }
    const size_t P = p->PD, B = (size_t)spec->batch, rows = B * (size_t)p->maxw;
    const mxp_dtype lo = spec->lowp;
    const bool f32 = lo == MXP_DTYPE_F32;
    if (dalloc(p, P * 4, (void **)&p->master, why, n) ||
        dalloc(p, P * 4, (void **)&p->grads, why, n) ||
        dalloc(p, P * 4, (void **)&p->m, why, n) ||
        (spec->optim == MXP_DS_ADAMW && dalloc(p, P * 4, (void **)&p->v, why, n)))
        goto fail; /* m: AdamW's first moment or SGD's momentum buffer */
    if (f32) {
        p->work = p->master;
        p->pw32 = p->master;
    } else if (dalloc(p, P * 2, &p->work, why, n) ||
               dalloc(p, P * 4, (void **)&p->pw32, why, n)) {
        goto fail;
    }
    for (int l = 0; l <= p->L; l++)
        if (dalloc(p, B * (size_t)p->width[l] * dsize(p->st[l]), &p->acts[l], why, n)) goto fail;
    if (dalloc(p, B * (size_t)spec->in_dim * 4, (void **)&p->x32, why, n) ||
        dalloc(p, rows * 4, (void **)&p->y32, why, n) ||
        dalloc(p, rows * 4, (void **)&p->sa, why, n) ||
        dalloc(p, rows * 4, (void **)&p->sb, why, n) ||
        dalloc(p, rows * 4, (void **)&p->dx32, why, n) ||
        dalloc(p, rows * dsize(lo), &p->g[0], why, n) ||
        dalloc(p, rows * dsize(lo), &p->g[1], why, n))
        goto fail;
    if (spec->loss == MXP_DS_MSE) {
        if (dalloc(p, B * (size_t)p->width[p->L] * 4, (void **)&p->target, why, n)) goto fail;
    } else if (dalloc(p, B * sizeof(int32_t), (void **)&p->labels, why, n)) {
        goto fail;
    }
    for (int l = 0; l < p->L; l++) {
        if (spec->layers[l].kind == MXP_DS_LAYERNORM &&
            (dalloc(p, B * 4, (void **)&p->ln_mean[l], why, n) ||
             dalloc(p, B * 4, (void **)&p->ln_rstd[l], why, n)))
            goto fail;
        if (spec->layers[l].kind != MXP_DS_LINEAR) continue;
        for (int w = 0; w < MXP_LT_GEMM_COUNT; w++) {
            if (w == MXP_LT_DX && l == 0) continue; /* the first layer has no dX */
            mxp_lt_desc *d = &p->desc[l][w];
            /* dW written (beta 0: the slab is zeroed, the first write is "=") */
            if (mxp_lt_linear((mxp_lt_gemm)w, spec->batch, p->width[l], p->width[l + 1], true,
                              false, d, why, n) ||
                ops->lt_create(dev, d, lo, &p->lt[l][w], why, n))
                goto fail;
        }
    }
    *out = p;
    return 0;
fail:
    mxp_ds_plan_destroy(p);
    return 1;
}

void mxp_ds_plan_destroy(mxp_ds_plan *p) {
    if (!p) return;
    const mxp_ds_ops *o = p->ops;
    if (o->sync) o->sync(p->dev, NULL, 0); /* nothing in flight reads what is freed */
    for (int l = 0; l < p->L; l++) {
        for (int w = 0; w < MXP_LT_GEMM_COUNT; w++)
            if (p->lt[l][w]) o->lt_destroy(p->dev, p->lt[l][w]);
        if (p->ln_mean[l]) o->free(p->dev, p->ln_mean[l]);
        if (p->ln_rstd[l]) o->free(p->dev, p->ln_rstd[l]);
    }
    for (int l = 0; l <= p->L; l++)
        if (p->acts[l]) o->free(p->dev, p->acts[l]);
    void *bufs[] = {p->grads, p->m, p->v, p->x32, p->y32, p->sa, p->sb, p->dx32,
                    p->g[0], p->g[1], p->target, p->labels};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) o->free(p->dev, bufs[i]);
    if (p->work && p->work != (void *)p->master) o->free(p->dev, p->work);
    if (p->pw32 && p->pw32 != p->master) o->free(p->dev, p->pw32);
    if (p->master) o->free(p->dev, p->master);
    free(p);
}

size_t mxp_ds_num_params(const mxp_ds_plan *p) { return p->P; }

int64_t mxp_ds_param_offset(const mxp_ds_plan *p, int l, int which) {
    if (l < 0 || l >= p->L) return -1;
    return which ? p->off_b[l] : p->off_w[l];
}

int mxp_ds_set_params(mxp_ds_plan *p, const float *host, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const size_t PD = p->PD;
    if (!host) return mxp_cudab_why(why, n, "device step: NULL parameters");
    if (o->zero(p->dev, p->master, PD * 4, why, n) || o->zero(p->dev, p->m, PD * 4, why, n) ||
        (p->v && o->zero(p->dev, p->v, PD * 4, why, n)))
        return 1;
    for (int l = 0; l < p->L; l++) /* tensor by tensor into the padded slab */
        if (p->cnt_w[l] > 0 &&
            (o->upload(p->dev, p->master + p->dev_w[l], host + p->off_w[l],
                       (size_t)p->cnt_w[l] * 4, why, n) ||
             o->upload(p->dev, p->master + p->dev_b[l], host + p->off_b[l],
                       (size_t)p->cnt_b[l] * 4, why, n)))
            return 1;
    if (p->work != (void *)p->master &&
        o->store_scan(p->dev, p->s.lowp, p->work, p->master, PD, NULL, NULL, why, n))
        return 1;
    memset(&p->ctl, 0, sizeof p->ctl);
    p->ctl.rule = p->s.rule;
    p->ctl.scaler = p->s.scaler0;
    if (!p->s.rule.enabled) p->ctl.scaler.scale = 1.0f;
    return o->sync(p->dev, why, n);
}

/* v32 [count] FP32 into acts-like storage dst of dtype t (the rounding step
 * of the CPU driver): nothing when dst already is v32. */
static int store(mxp_ds_plan *p, mxp_dtype t, void *dst, const float *v32, size_t count,
                 char *why, size_t n) {
    if ((const void *)dst == (const void *)v32) return 0;
    return p->ops->store_scan(p->dev, t, dst, v32, count, NULL, NULL, why, n);
}

/* buf [count] of dtype t as FP32: buf itself, or widened into scratch. */
static const float *view(mxp_ds_plan *p, mxp_dtype t, const void *buf, float *scratch,
                         size_t count, int *err, char *why, size_t n) {
    if (t == MXP_DTYPE_F32) return (const float *)buf;
    if (p->ops->widen(p->dev, t, scratch, buf, count, why, n)) *err = 1;
    return scratch;
}

/* The operand buffers of GEMM (l, w): A and B per the description. */
static int gemm(mxp_ds_plan *p, int l, mxp_lt_gemm w, const void *X, const void *W,
                const void *dY, float *D, const float *bias, char *why, size_t n) {
    const mxp_lt_desc *d = &p->desc[l][w];
    const void *ops[MXP_LT_OPERAND_COUNT] = {X, W, dY};
    return p->ops->lt_run(p->dev, p->lt[l][w], ops[d->a_op], ops[d->b_op], D, bias, why, n);
}

static const void *work_at(const mxp_ds_plan *p, int64_t off) {
    return (const unsigned char *)p->work + (size_t)off * dsize(p->s.lowp);
}

static int forward(mxp_ds_plan *p, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const int64_t B = p->s.batch;
    int err = 0;
    for (int l = 0; l < p->L && !err; l++) {
        const size_t cnt = (size_t)B * (size_t)p->width[l + 1];
        const mxp_dtype to = p->st[l + 1];
        float *y = to == MXP_DTYPE_F32 ? (float *)p->acts[l + 1] : p->y32;
        const mxp_ds_kind k = p->s.layers[l].kind;
        if (k == MXP_DS_LINEAR) {
            err = gemm(p, l, MXP_LT_FWD, p->acts[l], work_at(p, p->dev_w[l]), NULL, y,
                       p->pw32 + p->dev_b[l], why, n);
        } else {
            const float *x = view(p, p->st[l], p->acts[l], p->sa, cnt, &err, why, n);
            if (err) return 1;
            if (k == MXP_DS_LAYERNORM)
                err = o->ln_fwd(p->dev, y, p->ln_mean[l], p->ln_rstd[l], x,
                                p->pw32 + p->dev_w[l], p->pw32 + p->dev_b[l], B, p->width[l],
                                p->s.ln_eps, why, n);
            else
                err = o->act_fwd(p->dev, act_code(k), y, x, cnt, why, n);
        }
        if (!err) err = store(p, to, p->acts[l + 1], y, cnt, why, n);
    }
    return err;
}

/* Loss into the control block's slot, dpred (scaled) stored into g[0]. */
static int loss(mxp_ds_plan *p, float scale, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const int64_t B = p->s.batch, C = p->width[p->L];
    const mxp_dtype gt = p->s.lowp;
    float *d32 = gt == MXP_DTYPE_F32 ? (float *)p->g[0] : p->dx32;
    double *slot = &o->ctl_dev(p->dev)->loss;
    int err = p->s.loss == MXP_DS_MSE
                  ? o->mse(p->dev, d32, p->acts[p->L], p->target, B, C, scale, slot, why, n)
                  : o->xent(p->dev, d32, p->acts[p->L], p->labels, B, C, scale, slot, why, n);
    return err || store(p, gt, p->g[0], d32, (size_t)B * (size_t)C, why, n);
}

static int backward(mxp_ds_plan *p, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const int64_t B = p->s.batch;
    const mxp_dtype gt = p->s.lowp;
    int cur = 0, err = 0;
    for (int l = p->L - 1; l >= 0 && !err; l--) {
        const mxp_ds_kind k = p->s.layers[l].kind;
        const size_t n_out = (size_t)B * (size_t)p->width[l + 1];
        const size_t n_in = (size_t)B * (size_t)p->width[l];
        const void *dy = p->g[cur];
        void *dx = p->g[cur ^ 1];
        float *dx32 = gt == MXP_DTYPE_F32 ? (float *)dx : p->dx32;
        const bool need_dx = l > 0;
        if (k == MXP_DS_LINEAR) {
            const float *dy32 = view(p, gt, dy, p->sa, n_out, &err, why, n);
            if (!err)
                err = o->bias_grad(p->dev, p->grads + p->dev_b[l], dy32, B, p->width[l + 1],
                                   why, n);
            if (!err)
                err = gemm(p, l, MXP_LT_DW, p->acts[l], NULL, dy, p->grads + p->dev_w[l], NULL,
                           why, n);
            if (!err && need_dx)
                err = gemm(p, l, MXP_LT_DX, NULL, work_at(p, p->dev_w[l]), dy, dx32, NULL, why,
                           n);
        } else if (k == MXP_DS_LAYERNORM) {
            const float *dy32 = view(p, gt, dy, p->sa, n_out, &err, why, n);
            const float *x32 = err ? NULL : view(p, p->st[l], p->acts[l], p->sb, n_in, &err, why, n);
            if (!err)
                err = o->ln_bwd(p->dev, need_dx ? dx32 : p->y32, p->grads + p->dev_w[l],
                                p->grads + p->dev_b[l], dy32, x32, p->ln_mean[l], p->ln_rstd[l],
                                p->pw32 + p->dev_w[l], B, p->width[l], why, n);
        } else if (need_dx) {
            const int s = k == MXP_DS_TANH ? l + 1 : l; /* tanh: its output */
            const float *dy32 = view(p, gt, dy, p->sa, n_out, &err, why, n);
            const float *s32 = err ? NULL : view(p, p->st[s], p->acts[s], p->sb, n_in, &err, why, n);
            if (!err) err = o->act_bwd(p->dev, act_code(k), dx32, dy32, s32, n_in, why, n);
        }
        if (!err && need_dx) {
            err = store(p, gt, dx, dx32, n_in, why, n);
            cur ^= 1;
        }
    }
    return err;
}

int mxp_ds_step(mxp_ds_plan *p, const float *x, const float *y, const int32_t *labels,
                mxp_ds_result *res, char *why, size_t n) {
    const mxp_ds_ops *o = p->ops;
    const mxp_ds_spec *s = &p->s;
    const int64_t B = s->batch;
    memset(res, 0, sizeof *res);
    if (!x || (s->loss == MXP_DS_MSE ? !y : !labels))
        return mxp_cudab_why(why, n, "device step: NULL batch (x, and y for MSE or labels for "
                                     "softmax xent)");
    const int64_t d2h0 = o->d2h_count(p->dev);
    /* the control block for update opt_steps + 1 (train/trainer.c fill_ctl) */
    mxp_step_ctl *c = &p->ctl;
    const float scale = c->scaler.scale;
    c->scale = scale;
    c->inv_scale = (float)(1.0 / (double)scale);
    c->clip_max = s->clip_max;
    c->clip_coef = 1.0f;
    c->skip = 0;
    c->loss_nonfinite = 0;
    c->loss = 0.0;
    c->seed = s->seed;
    c->lr = s->lr;
    c->beta1 = s->beta1;
    c->beta2 = s->beta2;
    c->eps = s->eps;
    c->weight_decay = s->weight_decay;
    c->momentum = s->momentum;
    c->nesterov = s->nesterov;
    c->adamw = mxp_adamw_consts_make(s->lr, s->beta1, s->beta2, s->eps, s->weight_decay,
                                     c->opt_steps + 1);
    c->sgd = (mxp_sgd_consts){s->lr, s->momentum, s->weight_decay, s->nesterov,
                              s->momentum != 0.0f, c->opt_steps + 1 <= 1};
    c->run_scaler_rule = true;
    c->rule = s->rule;
    const size_t P = p->PD, nx = (size_t)B * (size_t)s->in_dim;
    const bool f32 = s->lowp == MXP_DTYPE_F32;
    float *x_dst = f32 ? (float *)p->acts[0] : p->x32;
    if (o->ctl_set(p->dev, c, why, n) || o->upload(p->dev, x_dst, x, nx * 4, why, n))
        return 1;
    if (s->loss == MXP_DS_MSE
            ? o->upload(p->dev, p->target, y, (size_t)B * (size_t)p->width[p->L] * 4, why, n)
            : o->upload(p->dev, p->labels, labels, (size_t)B * sizeof(int32_t), why, n))
        return 1;
    if (store(p, s->lowp, p->acts[0], x_dst, nx, why, n)) return 1;
    if (!f32 && o->widen(p->dev, s->lowp, p->pw32, p->work, P, why, n)) return 1;
    if (o->zero(p->dev, p->grads, P * 4, why, n)) return 1;
    if (forward(p, why, n) || loss(p, scale, why, n) || backward(p, why, n)) return 1;
    const float near = s->near_overflow_frac * (float)mxp_dtype_info(s->lowp)->max;
    /* decide advances the SR counter by the CPU's P (padding excluded) */
    if (o->grad_pass(p->dev, p->grads, P, near, why, n) ||
        o->decide(p->dev, false, p->P, why, n))
        return 1;
    uint16_t *work16 = f32 ? NULL : (uint16_t *)p->work;
    const bool bf16 = s->lowp == MXP_DTYPE_BF16;
    if (s->optim == MXP_DS_SGD
            ? o->sgd(p->dev, p->master, work16, bf16, false, p->grads, p->m, P, why, n)
            : o->adamw(p->dev, p->master, work16, bf16, false, p->grads, p->m, p->v, P, why, n))
        return 1;
    if (o->report(p->dev, c, why, n)) return 1; /* the step's one copy */
    res->loss = c->loss;
    res->skipped = c->skip != 0;
    res->scale = scale;
    res->next_scale = c->scaler.scale;
    res->grad_norm = sqrt(c->stats.sumsq);
    res->nonfinite = c->stats.nonfinite;
    res->d2h = o->d2h_count(p->dev) - d2h0;
    return 0;
}

int mxp_ds_get(mxp_ds_plan *p, mxp_ds_slab s, float *host, char *why, size_t n) {
    const float *src = s == MXP_DS_MASTER ? p->master
                       : s == MXP_DS_GRAD ? p->grads
                       : s == MXP_DS_M    ? p->m
                       : s == MXP_DS_V    ? p->v
                                          : NULL;
    if (!src)
        return mxp_cudab_why(why, n,
                             "device step: slab %d; accepted master, grad, m, v (v: AdamW "
                             "plans only)",
                             (int)s);
    if (!host) return mxp_cudab_why(why, n, "device step: NULL host buffer");
    float *tmp = malloc(p->PD * 4 + 4);
    if (!tmp) return mxp_cudab_why(why, n, "device step: out of host memory (%zu floats)", p->PD);
    /* one copy of the padded slab, then the tensors gathered in CPU order */
    int rc = p->ops->download(p->dev, tmp, src, p->PD * 4, why, n) ||
             p->ops->sync(p->dev, why, n);
    for (int l = 0; !rc && l < p->L; l++)
        if (p->cnt_w[l] > 0) {
            memcpy(host + p->off_w[l], tmp + p->dev_w[l], (size_t)p->cnt_w[l] * 4);
            memcpy(host + p->off_b[l], tmp + p->dev_b[l], (size_t)p->cnt_b[l] * 4);
        }
    free(tmp);
    return rc;
}
