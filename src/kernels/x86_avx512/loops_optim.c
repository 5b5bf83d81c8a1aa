/* kernels/x86_avx512/loops_optim.c: AVX-512 optimizer updates (AdamW, SGD
 * with momentum) for FP32 master weights (with recast into the working
 * copy) or pure low-precision weights (RNE or stochastic-rounded stores).
 *
 * Entry points: mxp_avx512_adamw, mxp_avx512_sgd (contracts in
 * kernels/kernels.h). Bit-identical to kernels/generic/optim.c: the same
 * scalar hyper-parameter arithmetic (mxp_adamw_consts_make of
 * backend/numerics/optim.h), and the vector form of mxp_adamw_elem:
 * per element the same FP32 operations in the same order with separate
 * multiplies and adds (no FMA); vsqrtps and vdivps round correctly like
 * sqrtf and '/'. The weights are processed in chunks of OPT_CHUNK: the
 * master path updates a chunk in place and recasts it into `work` while it
 * is in cache; the pure path widens a chunk of `work` into a stack buffer,
 * updates it and stores it back through mxp_avx512_convert_sr (element i
 * draws mxp_rng_at(seed, counter + i), as the reference) or
 * mxp_avx512_convert. Chunking does not change results: every operation is
 * element-wise. Large updates (>= PAR_MIN elements) are split over the
 * kernel thread pool at chunk boundaries (loops_simd.h), which changes
 * nothing either.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include "backend/numerics/optim.h"

#include <assert.h>
#include <math.h>

enum { OPT_CHUNK = 1024 }; /* PAR_ALIGN is a multiple of it */
static_assert(PAR_ALIGN % OPT_CHUNK == 0, "thread ranges must start on chunks");

static void *work_at(const mxp_weights *w, size_t off) {
    return (char *)w->work + off * mxp_dtype_info(w->work_type)->size;
}

static float *chunk_load(const mxp_weights *w, size_t off, size_t len, float *tmp) {
    if (w->master) return w->master + off;
    mxp_avx512_convert(MXP_DTYPE_F32, tmp, w->work_type, work_at(w, off), len);
    return tmp;
}

static void chunk_store(const mxp_weights *w, size_t off, size_t len, const float *wp) {
    if (w->master) {
        if (w->work && w->work != (void *)w->master)
            mxp_avx512_convert(w->work_type, work_at(w, off), MXP_DTYPE_F32, wp, len);
        return;
    }
    if (w->sr)
        mxp_avx512_convert_sr(w->work_type, work_at(w, off), wp, len, w->seed, w->counter + off);
    else
        mxp_avx512_convert(w->work_type, work_at(w, off), MXP_DTYPE_F32, wp, len);
}

/* The scalars of one AdamW call (computed once, as the reference does). */
typedef struct adamw_ctx {
    const mxp_weights *w;
    const float *g;
    float *m, *v;
    size_t n;
    float b1, b2, omb1, omb2, eps, decay, step_size, bc2_sqrt;
} adamw_ctx;

/* AdamW on elements [lo, hi) (lo a multiple of OPT_CHUNK). */
static void adamw_range(const adamw_ctx *c, size_t lo, size_t hi) {
    const __m512 vb1 = _mm512_set1_ps(c->b1), vb2 = _mm512_set1_ps(c->b2);
    const __m512 vomb1 = _mm512_set1_ps(c->omb1), vomb2 = _mm512_set1_ps(c->omb2);
    const __m512 veps = _mm512_set1_ps(c->eps), vdecay = _mm512_set1_ps(c->decay);
    const __m512 vstep = _mm512_set1_ps(c->step_size), vbc2 = _mm512_set1_ps(c->bc2_sqrt);
    float tmp[OPT_CHUNK];

    for (size_t off = lo; off < hi; off += OPT_CHUNK) {
        size_t len = hi - off < OPT_CHUNK ? hi - off : OPT_CHUNK;
        float *wp = chunk_load(c->w, off, len, tmp);
        const float *gc = c->g + off;
        float *mc = c->m + off, *vc = c->v + off;
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = lanes16(len - i);
            __m512 gi = _mm512_maskz_loadu_ps(k, gc + i);
            __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, mc + i)),
                                      _mm512_mul_ps(vomb1, gi));
            __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, vc + i)),
                                      _mm512_mul_ps(_mm512_mul_ps(vomb2, gi), gi));
            _mm512_mask_storeu_ps(mc + i, k, mi);
            _mm512_mask_storeu_ps(vc + i, k, vi);
            __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2), veps);
            __m512 wi = _mm512_maskz_loadu_ps(k, wp + i);
            wi = _mm512_sub_ps(_mm512_mul_ps(wi, vdecay),
                               _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom)));
            _mm512_mask_storeu_ps(wp + i, k, wi);
        }
        chunk_store(c->w, off, len, wp);
    }
}

static void adamw_task(void *ctx, int i, int count) {
    const adamw_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    adamw_range(c, lo, hi);
}

void mxp_avx512_adamw(const mxp_weights *w, const float *g, float *m,
                      float *v, size_t n, const mxp_adamw_hparams *h,
                      int64_t t) {
    if (!w->master && !w->work) return;
    /* The step's scalars from the shared host-side function (one home). */
    const mxp_adamw_consts k =
        mxp_adamw_consts_make(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, t);
    adamw_ctx c = {.w = w, .g = g, .m = m, .v = v, .n = n, .b1 = k.b1, .b2 = k.b2,
                   .omb1 = k.omb1, .omb2 = k.omb2, .eps = k.eps, .decay = k.decay,
                   .step_size = k.step_size, .bc2_sqrt = k.bc2_sqrt};
    par_run(n, adamw_task, &c);
}

typedef struct sgd_ctx {
    const mxp_weights *w;
    const float *g;
    float *buf;
    size_t n;
    const mxp_sgd_hparams *h;
    bool use_buf, first;
} sgd_ctx;

/* SGD on elements [lo, hi) (lo a multiple of OPT_CHUNK). */
static void sgd_range(const sgd_ctx *c, size_t lo, size_t hi) {
    const bool nesterov = c->h->nesterov, decay = c->h->weight_decay != 0.0f;
    const __m512 vlr = _mm512_set1_ps(c->h->lr), vmom = _mm512_set1_ps(c->h->momentum);
    const __m512 vwd = _mm512_set1_ps(c->h->weight_decay);
    float tmp[OPT_CHUNK];

    for (size_t off = lo; off < hi; off += OPT_CHUNK) {
        size_t len = hi - off < OPT_CHUNK ? hi - off : OPT_CHUNK;
        float *wp = chunk_load(c->w, off, len, tmp);
        const float *gc = c->g + off;
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = lanes16(len - i);
            __m512 wi = _mm512_maskz_loadu_ps(k, wp + i);
            __m512 gi = _mm512_maskz_loadu_ps(k, gc + i);
            if (decay) gi = _mm512_add_ps(gi, _mm512_mul_ps(vwd, wi));
            __m512 d = gi;
            if (c->use_buf) {
                float *bp = c->buf + off + i;
                __m512 b = c->first ? gi
                                    : _mm512_add_ps(_mm512_mul_ps(vmom, _mm512_maskz_loadu_ps(k, bp)), gi);
                _mm512_mask_storeu_ps(bp, k, b);
                d = nesterov ? _mm512_add_ps(gi, _mm512_mul_ps(vmom, b)) : b;
            }
            _mm512_mask_storeu_ps(wp + i, k, _mm512_sub_ps(wi, _mm512_mul_ps(vlr, d)));
        }
        chunk_store(c->w, off, len, wp);
    }
}

static void sgd_task(void *ctx, int i, int count) {
    const sgd_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    sgd_range(c, lo, hi);
}

void mxp_avx512_sgd(const mxp_weights *w, const float *g, float *buf,
                    size_t n, const mxp_sgd_hparams *h, int64_t t) {
    if (!w->master && !w->work) return;
    sgd_ctx c = {.w = w, .g = g, .buf = buf, .n = n, .h = h,
                 .use_buf = h->momentum != 0.0f && buf, .first = t <= 1};
    par_run(n, sgd_task, &c);
}
