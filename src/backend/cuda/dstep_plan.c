/* backend/cuda/dstep_plan.c: the device step's plan (dstep.h): validation,
 * the layout (the CPU slab order, padded device slabs, storage dtypes),
 * every device buffer, GEMM plan and the host staging, made once; the
 * parameter upload and the slab download between steps.
 *
 * Entry points: mxp_ds_plan_create, mxp_ds_plan_destroy, mxp_ds_num_params,
 * mxp_ds_param_offset, mxp_ds_set_params, mxp_ds_get, mxp_ds_put,
 * mxp_ds_get_state, mxp_ds_set_state, mxp_ds_micro_rows,
 * mxp_ds_micro_batches, mxp_ds_recapture, mxp_ds_scan_of. The step
 * itself: dstep_run.c.
 * Storage rules copy nn/model_plan.c. Plain C; nothing here prints or
 * exits.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/dstep_internal.h"
#include "backend/numerics/fp8_scale.h"

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
    if (s->fp8 && s->lowp != MXP_DTYPE_BF16)
        return mxp_cudab_why(why, n, "device step: fp8 with low dtype %d; accepted BF16 (the "
                                     "storage of activations and gradients in fp8)",
                             (int)s->lowp);
    if (s->fp8 && (s->fp8_cfg.history_len < 1 || s->fp8_cfg.history_len > 65536 ||
                   (unsigned)s->fp8_cfg.amax_algo > MXP_F8_AMAX_MOST_RECENT ||
                   s->fp8_cfg.margin < 0 || s->fp8_cfg.margin > 64))
        return mxp_cudab_why(why, n,
                             "device step: fp8 history_len %d, amax_algo %d, margin %d; "
                             "accepted 1..65536, max (0) or most_recent (1), 0..64",
                             s->fp8_cfg.history_len, (int)s->fp8_cfg.amax_algo,
                             s->fp8_cfg.margin);
    if ((unsigned)s->optim >= MXP_DS_OPTIM_COUNT)
        return mxp_cudab_why(why, n, "device step: optimizer %d; accepted AdamW (0), SGD (1)",
                             (int)s->optim);
    if (s->optim == MXP_DS_SGD && !(s->momentum >= 0.0f && s->momentum < 1.0f))
        return mxp_cudab_why(why, n, "device step: SGD momentum %g; accepted [0, 1)",
                             (double)s->momentum);
    if (s->micro_batches < 0 || s->micro_batches > s->batch)
        return mxp_cudab_why(why, n,
                             "device step: %d micro-batches for batch %lld; accepted 0 or 1 "
                             "(one) .. batch",
                             s->micro_batches, (long long)s->batch);
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
         * or the matmul input dtype when a linear layer reads it (not an
         * FP8 one: FP8 operands are quantised from FP32, nn/model_plan.c) */
        mxp_dtype t = s->lowp;
        if (k == MXP_DS_LAYERNORM)
            t = l + 1 < p->L && s->layers[l + 1].kind == MXP_DS_LINEAR && !p->f8_on[l + 1]
                    ? s->lowp
                    : MXP_DTYPE_F32;
        p->st[l + 1] = t;
    }
    p->st[p->L] = MXP_DTYPE_F32; /* the loss's input */
    for (int l = 0; l < p->L; l++)
        if (s->layers[l].kind == MXP_DS_LINEAR && p->st[l] != s->lowp && !p->f8_on[l])
            return mxp_cudab_why(why, n,
                                 "device step: layer %d (linear) reads an input stored as F32 "
                                 "in a %s plan; the device step has no cast before a GEMM",
                                 l, s->lowp == MXP_DTYPE_BF16 ? "BF16" : "F16");
    p->P = off;
    p->PD = doff;
    return 0;
}

/* The host staging: control block, x [batch, in_dim], y [batch, out] or
 * labels [batch], each on a 64-byte boundary. */
static int staging(mxp_ds_plan *p, char *why, size_t n) {
    const size_t B = (size_t)p->s.batch;
    const size_t c = (MXP_DS_AUX_OFF + p->aux_bytes + 63) / 64 * 64;
    const size_t xb = (B * (size_t)p->s.in_dim * 4 + 63) / 64 * 64;
    const size_t yb = p->s.loss == MXP_DS_MSE ? B * (size_t)p->width[p->L] * 4 : B * 4;
    const size_t total = (c + xb + yb + 63) / 64 * 64;
    if (p->ops->host_alloc) {
        if (p->ops->host_alloc(p->dev, total, &p->stage, why, n)) return 1;
    } else if (!(p->stage = aligned_alloc(64, total))) {
        return mxp_cudab_why(why, n, "device step: out of host memory (%zu bytes of staging)",
                             total);
    }
    memset(p->stage, 0, total);
    unsigned char *b = p->stage;
    p->ctl = (mxp_step_ctl *)(void *)b;
    p->x_h = (float *)(void *)(b + c);
    p->y_h = (float *)(void *)(b + c + xb);
    p->lab_h = (int32_t *)(void *)(b + c + xb);
    if (p->scans) {
        p->loss_h = (const double *)(const void *)(b + MXP_DS_AUX_OFF);
        p->scan_h = (const mxp_ds_scan *)(const void *)(b + MXP_DS_AUX_OFF + p->scan_off);
    }
    return 0;
}

/* The aux area's layout when the table has one and the slots fit: the
 * micro-batch losses (K > 1), then K * S scans. */
static void aux_layout(mxp_ds_plan *p) {
    const mxp_ds_ops *o = p->ops;
    p->S = 2 * p->L + 2; /* + a planted backward fault's scan (dstep_internal.h) */
    if (!o->aux_dev || !o->report_aux) return;
    size_t cap = 0;
    unsigned char *a = o->aux_dev(p->dev, &cap);
    const size_t lb = p->K > 1 ? ((size_t)p->K * sizeof(double) + 15) / 16 * 16 : 0;
    const size_t bytes = lb + (size_t)p->K * (size_t)p->S * sizeof(mxp_ds_scan);
    if (!a || bytes > cap) return; /* no scans: the plan still runs */
    p->scans = true;
    p->aux_bytes = bytes;
    if (p->K > 1) p->loss_slots = (double *)(void *)a;
    p->scan_d = (mxp_ds_scan *)(void *)(a + lb);
    p->scan_off = lb;
}

/* The GEMM plans of linear layer l for micro-batches of `rows` rows. */
static int gemm_plans(mxp_ds_plan *p, int l, int v, int64_t rows, char *why, size_t n) {
    if (p->f8_on[l]) return mxp_ds_f8_gemm_plans(p, l, v, rows, why, n);
    for (int w = 0; w < MXP_DS_GEMMS; w++) {
        if (w == MXP_LT_DX && l == 0) continue; /* the first layer has no dX */
        if (w == MXP_DS_DW_ACC && p->K == 1) continue;
        const mxp_lt_gemm which = w == MXP_DS_DW_ACC ? MXP_LT_DW : (mxp_lt_gemm)w;
        mxp_lt_desc *d = &p->desc[l][v][w];
        /* dW: beta 0 for the first micro-batch (the slab is zeroed, its
         * write is "="), beta 1 (DW_ACC) for the later ones */
        if (mxp_lt_linear(which, rows, p->width[l], p->width[l + 1], true, w == MXP_DS_DW_ACC,
                          d, why, n) ||
            p->ops->lt_create(p->dev, d, p->s.lowp, &p->lt[l][v][w], why, n))
            return 1;
    }
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
    p->K = spec->micro_batches > 1 ? spec->micro_batches : 1;
    p->rows_max = mxp_sb_micro_rows(spec->batch, p->K, 0);
    p->nvar = spec->batch % p->K ? 2 : 1;
    p->use_graphs = spec->graphs && ops->graph_begin && ops->graph_end && ops->graph_launch &&
                    ops->graph_destroy;
    mxp_ds_f8_classify(p);
    if (layout(p, why, n)) goto fail;
    if (spec->optim == MXP_DS_SGD && !ops->sgd) {
        mxp_cudab_why(why, n, "device step: the %s table has no SGD", ops->name);
        goto fail;
    }
    if (p->K > 1 && !ops->loss_fold) {
        mxp_cudab_why(why, n, "device step: the %s table has no loss fold (micro-batches)",
                      ops->name);
        goto fail;
    }
    aux_layout(p);
    if (staging(p, why, n)) goto fail;
    const size_t P = p->PD, B = (size_t)spec->batch, R = (size_t)p->rows_max;
    const size_t rows = R * (size_t)p->maxw;
    const mxp_dtype lo = spec->lowp;
    const bool f32 = lo == MXP_DTYPE_F32;
    p->x_direct = f32 && p->K == 1;
    if (dalloc(p, P * 4, (void **)&p->master, why, n) ||
        dalloc(p, P * 4, (void **)&p->grads, why, n) ||
        dalloc(p, P * 4, (void **)&p->m, why, n) ||
        (spec->optim == MXP_DS_ADAMW && dalloc(p, P * 4, (void **)&p->v, why, n)))
        goto fail; /* m: AdamW's first moment or SGD's momentum buffer */
    if (f32) {
        p->work = p->master;
        p->pw32 = p->master;
    } else if (dalloc(p, P * 2, &p->work, why, n) ||
               (!spec->fp8 && dalloc(p, P * 4, (void **)&p->pw32, why, n))) {
        goto fail;
    }
    if (spec->fp8) p->pw32 = p->master; /* fp8 reads biases, LN parameters from the master */
    if (mxp_ds_f8_alloc(p, why, n)) goto fail;
    for (int l = 0; l <= p->L; l++)
        if (dalloc(p, R * (size_t)p->width[l] * mxp_ds_dsize(p->st[l]), &p->acts[l], why, n))
            goto fail;
    if ((!p->x_direct && dalloc(p, B * (size_t)spec->in_dim * 4, (void **)&p->x32, why, n)) ||
        dalloc(p, rows * 4, (void **)&p->y32, why, n) ||
        dalloc(p, rows * 4, (void **)&p->sa, why, n) ||
        dalloc(p, rows * 4, (void **)&p->sb, why, n) ||
        dalloc(p, rows * 4, (void **)&p->dx32, why, n) ||
        dalloc(p, rows * mxp_ds_dsize(lo), &p->g[0], why, n) ||
        dalloc(p, rows * mxp_ds_dsize(lo), &p->g[1], why, n) ||
        (p->K > 1 && !p->scans &&
         dalloc(p, (size_t)p->K * sizeof(double), (void **)&p->loss_slots, why, n)))
        goto fail;
    if (spec->loss == MXP_DS_MSE) {
        if (dalloc(p, B * (size_t)p->width[p->L] * 4, (void **)&p->target, why, n)) goto fail;
    } else if (dalloc(p, B * sizeof(int32_t), (void **)&p->labels, why, n)) {
        goto fail;
    }
    for (int l = 0; l < p->L; l++) {
        if (spec->layers[l].kind == MXP_DS_LAYERNORM &&
            (dalloc(p, R * 4, (void **)&p->ln_mean[l], why, n) ||
             dalloc(p, R * 4, (void **)&p->ln_rstd[l], why, n)))
            goto fail;
        if (spec->layers[l].kind != MXP_DS_LINEAR) continue;
        for (int v = 0; v < p->nvar; v++)
            if (gemm_plans(p, l, v, p->rows_max - v, why, n)) goto fail;
    }
    memset(p->ctl, 0, sizeof *p->ctl);
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
    if (p->graph) o->graph_destroy(p->dev, p->graph);
    mxp_ds_f8_free(p);
    for (int l = 0; l < p->L; l++) {
        for (int v = 0; v < 2; v++)
            for (int w = 0; w < MXP_DS_GEMMS; w++)
                if (p->lt[l][v][w]) o->lt_destroy(p->dev, p->lt[l][v][w]);
        if (p->ln_mean[l]) o->free(p->dev, p->ln_mean[l]);
        if (p->ln_rstd[l]) o->free(p->dev, p->ln_rstd[l]);
    }
    for (int l = 0; l <= p->L; l++)
        if (p->acts[l]) o->free(p->dev, p->acts[l]);
    void *bufs[] = {p->grads, p->m,      p->v,      p->x32,    p->y32,   p->sa,
                    p->sb,    p->dx32,   p->g[0],   p->g[1],   p->target, p->labels,
                    p->scans ? NULL : p->loss_slots};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) o->free(p->dev, bufs[i]);
    if (p->work && p->work != (void *)p->master) o->free(p->dev, p->work);
    if (p->pw32 && p->pw32 != p->master) o->free(p->dev, p->pw32);
    if (p->master) o->free(p->dev, p->master);
    if (p->stage) {
        if (o->host_alloc)
            o->host_free(p->dev, p->stage);
        else
            free(p->stage);
    }
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
    if (mxp_ds_f8_reset(p, why, n)) return 1;
    memset(p->ctl, 0, sizeof *p->ctl);
    p->ctl->rule = p->s.rule;
    p->ctl->scaler = p->s.scaler0;
    if (!p->s.rule.enabled) p->ctl->scaler.scale = 1.0f;
    return o->sync(p->dev, why, n);
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

int64_t mxp_ds_micro_rows(const mxp_ds_plan *p, int i) {
    return i < 0 || i >= p->K ? 0 : mxp_sb_micro_rows(p->s.batch, p->K, i);
}

int mxp_ds_micro_batches(const mxp_ds_plan *p) { return p->K; }

void mxp_ds_recapture(mxp_ds_plan *p) {
    if (p && p->graph) {
        p->ops->sync(p->dev, NULL, 0);
        p->ops->graph_destroy(p->dev, p->graph);
        p->graph = NULL;
    }
}

const mxp_ds_scan *mxp_ds_scan_of(const mxp_ds_plan *p, int micro, bool backward, int layer) {
    if (!p || !p->scans || micro < 0 || micro >= p->K) return NULL;
    const mxp_ds_scan *b = p->scan_h + (size_t)micro * (size_t)p->S;
    if (!backward) return layer >= 0 && layer < p->L ? &b[layer] : NULL;
    if (layer == -1) return &b[p->L];
    return layer >= 1 && layer < p->L ? &b[p->L + 1 + layer] : NULL;
}

void mxp_ds_get_state(const mxp_ds_plan *p, mxp_ds_state *out) {
    out->opt_steps = p->ctl->opt_steps;
    out->sr_counter = p->ctl->sr_counter;
    out->scaler = p->ctl->scaler;
    out->lr = p->s.lr;
    out->stats = p->ctl->stats;
    out->event = p->ctl->event;
}

void mxp_ds_set_state(mxp_ds_plan *p, const mxp_ds_state *in) {
    p->ctl->opt_steps = in->opt_steps;
    p->ctl->sr_counter = in->sr_counter;
    p->ctl->scaler = in->scaler;
    p->s.lr = in->lr;
}

int mxp_ds_put(mxp_ds_plan *p, mxp_ds_slab s, const float *host, char *why, size_t n) {
    float *dst = s == MXP_DS_MASTER ? p->master : s == MXP_DS_M ? p->m : s == MXP_DS_V ? p->v
                                                                                  : NULL;
    if (!dst)
        return mxp_cudab_why(why, n,
                             "device step: put of slab %d; accepted master, m, v (v: AdamW "
                             "plans only)",
                             (int)s);
    if (!host) return mxp_cudab_why(why, n, "device step: NULL host buffer");
    const mxp_ds_ops *o = p->ops;
    for (int l = 0; l < p->L; l++) /* tensor by tensor into the padded slab (padding stays 0) */
        if (p->cnt_w[l] > 0 &&
            (o->upload(p->dev, dst + p->dev_w[l], host + p->off_w[l], (size_t)p->cnt_w[l] * 4,
                       why, n) ||
             o->upload(p->dev, dst + p->dev_b[l], host + p->off_b[l], (size_t)p->cnt_b[l] * 4,
                       why, n)))
            return 1;
    if (s == MXP_DS_MASTER && p->work != (void *)p->master &&
        o->store_scan(p->dev, p->s.lowp, p->work, p->master, p->PD, NULL, NULL, why, n))
        return 1;
    return o->sync(p->dev, why, n);
}
