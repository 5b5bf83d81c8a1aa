/* kernels/generic/optim.c: reference optimizer updates (AdamW, SGD with
 * momentum) on flat FP32 gradients, for FP32 master weights or for pure
 * low-precision weights with stochastic-rounded stores.
 *
 * Entry points: mxp_generic_adamw, mxp_generic_sgd (contracts in
 * kernels/kernels.h). The weights are processed in chunks of OPT_CHUNK:
 * a chunk is read as FP32 (the master itself, or the work copy widened into
 * a stack buffer), updated in FP32, and written back (master path: the chunk
 * is then recast into work with RNE; pure path: stored into work with SR
 * drawing mxp_rng_at(seed, counter + i) for element i, or RNE).
 * References: PyTorch torch.optim.AdamW and torch.optim.SGD (single-tensor
 * implementations); Loshchilov & Hutter, "Decoupled Weight Decay
 * Regularization" (2019).
 */
#include "kernels/generic/generic.h"

#include <math.h>

enum { OPT_CHUNK = 256 };

static void *work_at(const mxp_weights *w, size_t off) {
    return (char *)w->work + off * mxp_dtype_info(w->work_type)->size;
}

/* FP32 view of weights [off, off+len): the master, or work widened into tmp. */
static float *chunk_load(const mxp_weights *w, size_t off, size_t len, float *tmp) {
    if (w->master) return w->master + off;
    mxp_convert(MXP_DTYPE_F32, tmp, w->work_type, work_at(w, off), len);
    return tmp;
}

/* Publish an updated chunk (see the file comment). */
static void chunk_store(const mxp_weights *w, size_t off, size_t len, const float *wp) {
    if (w->master) {
        if (w->work && w->work != (void *)w->master)
            mxp_convert(w->work_type, work_at(w, off), MXP_DTYPE_F32, wp, len);
        return;
    }
    if (w->sr)
        mxp_convert_sr(w->work_type, work_at(w, off), wp, len, w->seed, w->counter + off);
    else
        mxp_convert(w->work_type, work_at(w, off), MXP_DTYPE_F32, wp, len);
}

/* AdamW, with PyTorch's arrangement of the bias corrections (in double):
 *   step_size = lr / (1 - b1^t);  denom = sqrt(v) / sqrt(1 - b2^t) + eps;
 *   w = w * (1 - lr wd);  w -= step_size * m / denom.
 * t < 1 is treated as 1. No weights (master and work NULL): no-op. */
void mxp_generic_adamw(const mxp_weights *w, const float *g, float *m,
                       float *v, size_t n, const mxp_adamw_hparams *h,
                       int64_t t) {
    if (!w->master && !w->work) return;
    double step = (double)(t < 1 ? 1 : t);
    float b1 = h->beta1, b2 = h->beta2, eps = h->eps;
    float omb1 = (float)(1.0 - (double)b1), omb2 = (float)(1.0 - (double)b2);
    float decay = (float)(1.0 - (double)h->lr * (double)h->weight_decay);
    double bc1 = 1.0 - pow((double)b1, step);
    double bc2 = 1.0 - pow((double)b2, step);
    float step_size = (float)((double)h->lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float tmp[OPT_CHUNK];

    for (size_t off = 0; off < n; off += OPT_CHUNK) {
        size_t len = n - off < OPT_CHUNK ? n - off : OPT_CHUNK;
        float *wp = chunk_load(w, off, len, tmp);
        const float *gc = g + off;
        float *mc = m + off, *vc = v + off;
        for (size_t i = 0; i < len; i++) {
            float gi = gc[i];
            float mi = b1 * mc[i] + omb1 * gi;
            float vi = b2 * vc[i] + omb2 * gi * gi;
            mc[i] = mi;
            vc[i] = vi;
            float denom = sqrtf(vi) / bc2_sqrt + eps;
            wp[i] = wp[i] * decay - step_size * (mi / denom);
        }
        chunk_store(w, off, len, wp);
    }
}

/* SGD, PyTorch semantics with dampening 0:
 *   g' = g + wd w;  buf = (t <= 1) ? g' : momentum buf + g';
 *   d = nesterov ? g' + momentum buf : buf;  w -= lr d.
 * momentum == 0 (or buf NULL) gives plain SGD: d = g'. */
void mxp_generic_sgd(const mxp_weights *w, const float *g, float *buf,
                     size_t n, const mxp_sgd_hparams *h, int64_t t) {
    if (!w->master && !w->work) return;
    float lr = h->lr, mom = h->momentum, wd = h->weight_decay;
    bool use_buf = mom != 0.0f && buf;
    bool first = t <= 1;
    float tmp[OPT_CHUNK];

    for (size_t off = 0; off < n; off += OPT_CHUNK) {
        size_t len = n - off < OPT_CHUNK ? n - off : OPT_CHUNK;
        float *wp = chunk_load(w, off, len, tmp);
        const float *gc = g + off;
        for (size_t i = 0; i < len; i++) {
            float wi = wp[i];
            float gi = wd != 0.0f ? gc[i] + wd * wi : gc[i];
            float d = gi;
            if (use_buf) {
                float b = first ? gi : mom * buf[off + i] + gi;
                buf[off + i] = b;
                d = h->nesterov ? gi + mom * b : b;
            }
            wp[i] = wi - lr * d;
        }
        chunk_store(w, off, len, wp);
    }
}
