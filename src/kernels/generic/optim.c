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
 * The element updates are backend/numerics/optim.h (one home, shared with
 * the CUDA kernels). References: PyTorch torch.optim.AdamW and torch.optim.SGD (single-tensor
 * implementations); Loshchilov & Hutter, "Decoupled Weight Decay
 * Regularization" (2019).
 */
#include "kernels/generic/generic.h"

#include "backend/numerics/optim.h"

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

/* AdamW, with PyTorch's arrangement of the bias corrections (in double,
 * mxp_adamw_consts_make); per element mxp_adamw_elem. t < 1 is treated as
 * 1. No weights (master and work NULL): no-op. */
void mxp_generic_adamw(const mxp_weights *w, const float *g, float *m,
                       float *v, size_t n, const mxp_adamw_hparams *h,
                       int64_t t) {
    if (!w->master && !w->work) return;
    const mxp_adamw_consts c =
        mxp_adamw_consts_make(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, t);
    float tmp[OPT_CHUNK];

    for (size_t off = 0; off < n; off += OPT_CHUNK) {
        size_t len = n - off < OPT_CHUNK ? n - off : OPT_CHUNK;
        float *wp = chunk_load(w, off, len, tmp);
        for (size_t i = 0; i < len; i++)
            wp[i] = mxp_adamw_elem(wp[i], g[off + i], &m[off + i], &v[off + i], &c);
        chunk_store(w, off, len, wp);
    }
}

/* SGD, PyTorch semantics with dampening 0, per element mxp_sgd_elem;
 * momentum == 0 (or buf NULL) gives plain SGD: d = g'. */
void mxp_generic_sgd(const mxp_weights *w, const float *g, float *buf,
                     size_t n, const mxp_sgd_hparams *h, int64_t t) {
    if (!w->master && !w->work) return;
    const mxp_sgd_consts c = {h->lr, h->momentum, h->weight_decay, h->nesterov,
                              h->momentum != 0.0f && buf, t <= 1};
    float tmp[OPT_CHUNK];
    float unused = 0.0f;

    for (size_t off = 0; off < n; off += OPT_CHUNK) {
        size_t len = n - off < OPT_CHUNK ? n - off : OPT_CHUNK;
        float *wp = chunk_load(w, off, len, tmp);
        for (size_t i = 0; i < len; i++)
            wp[i] = mxp_sgd_elem(wp[i], g[off + i], c.use_buf ? &buf[off + i] : &unused, &c);
        chunk_store(w, off, len, wp);
    }
}
