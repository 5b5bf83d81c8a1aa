/* kernels/x86_avx512/loops_optim.c: AVX-512 optimizer updates (AdamW, SGD
 * with momentum) for FP32 master weights (with recast into the working
 * copy) or pure low-precision weights (RNE or stochastic-rounded stores).
 *
 * Entry points: mxp_avx512_adamw, mxp_avx512_sgd (contracts in
 * kernels/kernels.h). Bit-identical to kernels/generic/optim.c: the same
 * scalar hyper-parameter arithmetic (in double, then rounded to float), and
 * per element the same FP32 operations in the same order with separate
 * multiplies and adds (no FMA); vsqrtps and vdivps round correctly like
 * sqrtf and '/'. The weights are processed in chunks of OPT_CHUNK: the
 * master path updates a chunk in place and recasts it into `work` while it
 * is in cache; the pure path widens a chunk of `work` into a stack buffer,
 * updates it and stores it back through mxp_avx512_convert_sr (element i
 * draws mxp_rng_at(seed, counter + i), as the reference) or
 * mxp_avx512_convert. Chunking does not change results: every operation is
 * element-wise.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include <math.h>

enum { OPT_CHUNK = 1024 };

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

void mxp_avx512_adamw(const mxp_weights *w, const float *g, float *m,
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
    const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2);
    const __m512 vomb1 = _mm512_set1_ps(omb1), vomb2 = _mm512_set1_ps(omb2);
    const __m512 veps = _mm512_set1_ps(eps), vdecay = _mm512_set1_ps(decay);
    const __m512 vstep = _mm512_set1_ps(step_size), vbc2 = _mm512_set1_ps(bc2_sqrt);
    float tmp[OPT_CHUNK];

    for (size_t off = 0; off < n; off += OPT_CHUNK) {
        size_t len = n - off < OPT_CHUNK ? n - off : OPT_CHUNK;
        float *wp = chunk_load(w, off, len, tmp);
        const float *gc = g + off;
        float *mc = m + off, *vc = v + off;
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
        chunk_store(w, off, len, wp);
    }
}

void mxp_avx512_sgd(const mxp_weights *w, const float *g, float *buf,
                    size_t n, const mxp_sgd_hparams *h, int64_t t) {
    if (!w->master && !w->work) return;
    const float mom = h->momentum, wd = h->weight_decay;
    const bool use_buf = mom != 0.0f && buf;
    const bool first = t <= 1, nesterov = h->nesterov, decay = wd != 0.0f;
    const __m512 vlr = _mm512_set1_ps(h->lr), vmom = _mm512_set1_ps(mom);
    const __m512 vwd = _mm512_set1_ps(wd);
    float tmp[OPT_CHUNK];

    for (size_t off = 0; off < n; off += OPT_CHUNK) {
        size_t len = n - off < OPT_CHUNK ? n - off : OPT_CHUNK;
        float *wp = chunk_load(w, off, len, tmp);
        const float *gc = g + off;
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = lanes16(len - i);
            __m512 wi = _mm512_maskz_loadu_ps(k, wp + i);
            __m512 gi = _mm512_maskz_loadu_ps(k, gc + i);
            if (decay) gi = _mm512_add_ps(gi, _mm512_mul_ps(vwd, wi));
            __m512 d = gi;
            if (use_buf) {
                float *bp = buf + off + i;
                __m512 b = first ? gi
                                 : _mm512_add_ps(_mm512_mul_ps(vmom, _mm512_maskz_loadu_ps(k, bp)), gi);
                _mm512_mask_storeu_ps(bp, k, b);
                d = nesterov ? _mm512_add_ps(gi, _mm512_mul_ps(vmom, b)) : b;
            }
            _mm512_mask_storeu_ps(wp + i, k, _mm512_sub_ps(wi, _mm512_mul_ps(vlr, d)));
        }
        chunk_store(w, off, len, wp);
    }
}
