/* nn/headroom.c: the per-layer monitor of the forward/backward driver.
 *
 * Entry points: mxp_monitor_create/_destroy/_reset/_set_full/_set_anomaly,
 * mxp_model_set_monitor, mxp_monitor_layer/_hist/_anomaly,
 * mxp_hist_fraction_below; internal nn_mon_scan, nn_mon_record,
 * nn_mon_record_tiny, nn_mon_plain,
 * nn_mon_note_site,
 * nn_mon_begin_pass, nn_mon_anomaly, nn_count_nonfinite.
 *
 * The driver (model_step.c) already scans every layer output it stores for
 * non-finite values (one absmax pass over data still in cache) into the
 * pass's result slots (slots.c). With a monitor attached the scan may be a
 * full one (nn_mon_scan), and after the pass nn_pass_finish records every
 * slot per layer (nn_mon_record, nn_mon_record_tiny): largest finite
 * |value| against the storage format's maximum (headroom) and non-finite
 * counts. A "full" scan (the guard asks for one every
 * guard.headroom.every_steps) also counts values below the storage format's
 * smallest normal (0 < |v| < min_normal: they underflow to subnormals or
 * zero when stored) and, with histograms on (the preflight), bins |v| by
 * FP32 exponent, so the underflow fraction of ANY format and loss scale
 * follows exactly from one FP32 run.
 *
 * Anomaly mode (opt-in, as PyTorch's detect_anomaly) adds checks of inputs,
 * weights and weight/bias gradients (model_step.c) and attributes the first
 * non-finite value to its first FORWARD culprit rather than a backward op:
 * the non-finite forward op itself, else the first layer whose output came
 * within the headroom margin of its format's maximum in that pass (the
 * likely source of a backward overflow), else the forward op of the layer
 * whose backward failed.
 */
#include "nn/nn_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define MXP_HAVE_AVX512_SCAN 1
#endif

struct mxp_monitor {
    int n_layers;
    bool full, anomaly;
    double margin;
    int64_t *hist; /* [n_layers + 1][MXP_MON_TENSOR_COUNT][MXP_EXP_BINS] or NULL */
    mxp_layer_stats layers[MXP_MODEL_MAX_LAYERS + 1]; /* + the loss slot */
    float cur_out[MXP_MODEL_MAX_LAYERS]; /* output absmax of the current pass */
    int64_t passes;                      /* forward passes since reset */
    mxp_anomaly_report rep;
};

mxp_status mxp_monitor_create(const mxp_model *m, bool hist, mxp_monitor **out,
                              mxp_error *err) {
    if (!m || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_monitor_create: NULL argument");
    *out = NULL;
    mxp_monitor *mon = mxp_calloc(1, sizeof *mon);
    if (!mon) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "monitor");
    mon->n_layers = m->n_layers;
    mon->margin = 8.0;
    if (hist) {
        size_t n;
        if (!mxp_size_mul((size_t)(m->n_layers + 1) * MXP_MON_TENSOR_COUNT, MXP_EXP_BINS, &n) ||
            !(mon->hist = mxp_calloc(n, sizeof(int64_t)))) {
            mxp_free(mon);
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "monitor histograms");
        }
    }
    mxp_monitor_reset(mon);
    *out = mon;
    return MXP_OK;
}

void mxp_monitor_destroy(mxp_monitor *mon) {
    if (!mon) return;
    mxp_free(mon->hist);
    mxp_free(mon);
}

void mxp_model_set_monitor(mxp_model *m, mxp_monitor *mon) {
    if (m) m->mon = mon;
}

void mxp_monitor_set_full(mxp_monitor *mon, bool full) {
    if (mon) mon->full = full;
}

void mxp_monitor_set_anomaly(mxp_monitor *mon, bool on, double margin) {
    if (!mon) return;
    mon->anomaly = on;
    if (margin > 0 && isfinite(margin)) mon->margin = margin;
}

/* Statistics back to empty; dtypes are learnt again from the next scans. */
void mxp_monitor_reset(mxp_monitor *mon) {
    if (!mon) return;
    memset(mon->layers, 0, (size_t)(mon->n_layers + 1) * sizeof mon->layers[0]);
    memset(mon->cur_out, 0, sizeof mon->cur_out);
    for (int l = 0; l <= mon->n_layers; l++) {
        mon->layers[l].out_type = MXP_DTYPE_F32;
        mon->layers[l].grad_type = MXP_DTYPE_F32;
    }
    if (mon->hist)
        memset(mon->hist, 0,
               (size_t)(mon->n_layers + 1) * MXP_MON_TENSOR_COUNT * MXP_EXP_BINS *
                   sizeof(int64_t));
    mon->passes = 0;
    memset(&mon->rep, 0, sizeof mon->rep);
    mon->rep.op = mon->rep.what = mon->rep.culprit_op = "";
}

int mxp_monitor_num_layers(const mxp_monitor *mon) { return mon ? mon->n_layers : 0; }

const mxp_layer_stats *mxp_monitor_layer(const mxp_monitor *mon, int l) {
    if (!mon || l < 0 || l > mon->n_layers) return NULL;
    return &mon->layers[l];
}

const int64_t *mxp_monitor_hist(const mxp_monitor *mon, int l, mxp_monitor_tensor which) {
    if (!mon || !mon->hist || l < 0 || l > mon->n_layers ||
        (unsigned)which >= MXP_MON_TENSOR_COUNT)
        return NULL;
    return mon->hist + ((size_t)l * MXP_MON_TENSOR_COUNT + which) * MXP_EXP_BINS;
}

void mxp_monitor_anomaly(const mxp_monitor *mon, mxp_anomaly_report *out) {
    if (!out) return;
    if (!mon) {
        memset(out, 0, sizeof *out);
        out->op = out->what = out->culprit_op = "";
        return;
    }
    *out = mon->rep;
}

/* Bin e >= 1 holds |v| < 2^(e-126); it lies wholly below the threshold when
 * 2^(e-126) * scale <= threshold (exact for powers of two; otherwise only
 * bins entirely below are counted). Exact zeros (bin 0) are excluded. */
double mxp_hist_fraction_below(const int64_t *hist, double scale, double threshold) {
    if (!hist) return 0.0;
    int64_t total = 0, below = 0;
    for (int e = 1; e < MXP_EXP_BINS - 1; e++) {
        total += hist[e];
        if (ldexp(1.0, e - 126) * scale <= threshold) below += hist[e];
    }
    return total ? (double)below / (double)total : 0.0;
}

/* ---- driver hooks ---------------------------------------------------------- */

bool nn_mon_anomaly(const mxp_model *m) { return m->mon && m->mon->anomaly; }

void nn_mon_begin_pass(mxp_model *m) {
    mxp_monitor *mon = m->mon;
    memset(mon->cur_out, 0, sizeof mon->cur_out);
    mon->passes++;
}

/* One pass over v: absmax of finite values, non-finite and tiny counts, and
 * the exponent histogram (h may be NULL). Scalar: only for sampled steps. */
static float full_scan(const float *v, size_t n, float min_normal, int64_t *h,
                       int64_t *nonfinite, int64_t *tiny) {
    float amax = 0.0f;
    int64_t nf = 0, tn = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        const uint32_t e = (u >> 23) & 0xffu;
        if (e == 0xffu) {
            nf++;
            continue;
        }
        const float a = fabsf(v[i]);
        if (a > amax) amax = a;
        if (a < min_normal && a != 0.0f) tn++;
        if (h) h[e == 0 && a != 0.0f ? 1 : e]++;
    }
    *nonfinite = nf;
    *tiny = tn;
    return amax;
}

#ifdef MXP_HAVE_AVX512_SCAN
/* full_scan without a histogram, 16 lanes at a time (same results: max and
 * counts are exact). Only called when the CPU has AVX-512F. */
__attribute__((target("avx512f"))) static float full_scan_avx512(const float *v, size_t n,
                                                                 float min_normal,
                                                                 int64_t *nonfinite,
                                                                 int64_t *tiny) {
    const __m512 fmax = _mm512_set1_ps(FLT_MAX), mn = _mm512_set1_ps(min_normal);
    const __m512 zero = _mm512_setzero_ps();
    __m512 vmax = zero;
    int64_t nf = 0, tn = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(v + i));
        const __mmask16 fin = _mm512_cmp_ps_mask(a, fmax, _CMP_LE_OQ); /* false for NaN */
        nf += 16 - __builtin_popcount((unsigned)fin);
        vmax = _mm512_mask_max_ps(vmax, fin, vmax, a);
        const __mmask16 t = _mm512_cmp_ps_mask(a, mn, _CMP_LT_OQ) &
                            _mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ);
        tn += __builtin_popcount((unsigned)t);
    }
    float amax = _mm512_reduce_max_ps(vmax);
    for (; i < n; i++) {
        const float a = fabsf(v[i]);
        if (!(a <= FLT_MAX)) {
            nf++;
            continue;
        }
        if (a > amax) amax = a;
        if (a < min_normal && a > 0.0f) tn++;
    }
    *nonfinite = nf;
    *tiny = tn;
    return amax;
}
#endif

/* The fast scan when this CPU and kernel table allow it (the reference
 * scalar scan under MIXPREC_FORCE_ISA=generic). */
static float tiny_scan(const mxp_model *m, const float *v, size_t n, float min_normal,
                       int64_t *nonfinite, int64_t *tiny) {
#ifdef MXP_HAVE_AVX512_SCAN
    if (mxp_cpu_features_get()->avx512f && strcmp(m->k->isa, "generic") != 0)
        return full_scan_avx512(v, n, min_normal, nonfinite, tiny);
#endif
    return full_scan(v, n, min_normal, NULL, nonfinite, tiny);
}

bool nn_mon_scan(mxp_model *m, int layer, mxp_monitor_tensor which,
                 const float *v, size_t n, mxp_dtype t, nn_scan *out) {
    mxp_monitor *mon = m->mon;
    if (layer < 0) layer = mon->n_layers; /* the loss gradient's slot */
    int64_t *h = mon->hist ? mon->hist + ((size_t)layer * MXP_MON_TENSOR_COUNT + which) *
                                             MXP_EXP_BINS
                           : NULL;
    /* the parameter gradients live in the FP32 slab: nothing there underflows
     * a narrower format, so they get the full scan only for histograms */
    if (h || (mon->full && which != MXP_MON_DW)) {
        const float mn = (float)mxp_dtype_info(t)->min_normal;
        out->amax = h ? full_scan(v, n, mn, h, &out->nf, &out->tiny)
                      : tiny_scan(m, v, n, mn, &out->nf, &out->tiny);
        return true;
    }
    m->k->absmax(v, n, &out->amax, &out->nf);
    return false;
}

void nn_mon_record_tiny(mxp_model *m, int layer, mxp_monitor_tensor which, size_t n,
                        int64_t tiny) {
    mxp_monitor *mon = m->mon;
    if (layer < 0) layer = mon->n_layers; /* the loss gradient's slot */
    mxp_tensor_stats *st = &mon->layers[layer].t[which];
    st->tiny += tiny;
    st->tiny_n += (int64_t)n;
}

bool nn_mon_plain(const mxp_model *m) {
    return !m->mon || (!m->mon->hist && !m->mon->full);
}

void nn_mon_record(mxp_model *m, int layer, mxp_monitor_tensor which, size_t n, mxp_dtype t,
                   float amax, int64_t nf) {
    mxp_monitor *mon = m->mon;
    if (layer < 0) layer = mon->n_layers; /* the loss gradient's slot */
    mxp_layer_stats *ls = &mon->layers[layer];
    mxp_tensor_stats *st = &ls->t[which];
    if (amax > st->absmax) st->absmax = amax;
    st->n += (int64_t)n;
    st->nonfinite += nf;
    if (which == MXP_MON_OUT && layer < mon->n_layers) {
        ls->out_type = t;
        if (amax > mon->cur_out[layer]) mon->cur_out[layer] = amax; /* max over chunks */
    } else if (which == MXP_MON_DX) {
        ls->grad_type = t;
    }
}

static double headroom_of(mxp_dtype t, float absmax) {
    if (!(absmax > 0.0f)) return INFINITY;
    return mxp_dtype_info(t)->max / (double)absmax;
}

/* The first forward culprit of a site (see the file comment). */
static void find_culprit(const mxp_model *m, const mxp_nonfinite_site *site,
                         mxp_anomaly_report *r) {
    const mxp_monitor *mon = m->mon;
    int cl = site->layer;
    const char *cop = site->op;
    if (site->backward) {
        for (int l = 0; l < m->n_layers; l++) {
            if (headroom_of(m->b.act_type[l + 1], mon->cur_out[l]) < mon->margin) {
                cl = l;
                cop = nn_layer_vtable_get(m->layers[l].kind)->name;
                break;
            }
        }
    }
    r->has_culprit = true;
    r->culprit_layer = cl;
    r->culprit_op = cop;
    r->culprit_absmax = cl >= 0 ? mon->cur_out[cl] : 0.0f;
    r->culprit_headroom =
        cl >= 0 ? headroom_of(m->b.act_type[cl + 1], mon->cur_out[cl]) : INFINITY;
}

void nn_mon_note_site(mxp_model *m, const mxp_nonfinite_site *site, const char *what) {
    mxp_monitor *mon = m->mon;
    if (!mon || mon->rep.found) return;
    mxp_anomaly_report *r = &mon->rep;
    r->found = true;
    r->pass_index = mon->passes;
    r->backward = site->backward;
    r->layer = site->layer;
    r->op = site->op;
    r->what = what;
    r->count = site->count;
    if (mon->anomaly) find_culprit(m, site, r);
}

void nn_count_nonfinite(mxp_model *m, mxp_dtype t, const void *buf, size_t n, int64_t *out) {
    int64_t total = 0, nf = 0;
    if (t == MXP_DTYPE_F32) {
        m->k->absmax((const float *)buf, n, NULL, out);
        return;
    }
    const size_t chunk = m->b.nf_n; /* its own scratch (xs or sb), idle here */
    const size_t esz = mxp_dtype_info(t)->size;
    for (size_t i = 0; i < n; i += chunk) {
        size_t c = n - i < chunk ? n - i : chunk;
        m->k->convert(MXP_DTYPE_F32, m->b.nf, t, (const unsigned char *)buf + i * esz, c);
        m->k->absmax(m->b.nf, c, NULL, &nf);
        total += nf;
    }
    *out = total;
}
