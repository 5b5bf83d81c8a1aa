/* amp/fp8.c: FP8 per-tensor delayed scaling (emulated FP8 training).
 *
 * Entry points: mxp_fp8_config_default/_validate, mxp_fp8_amax_algo_name,
 * mxp_fp8_scale_rule, mxp_fp8_quantize, mxp_fp8_scaling_* (contracts in
 * include/mixprec/amp.h).
 *
 * The recipe follows NVIDIA Transformer Engine's DelayedScaling
 * (transformer_engine/pytorch/fp8.py, _default_sf_compute and
 * _default_get_amax_and_update_history): a per-tensor amax history of
 * history_len steps, amax = max over it or its newest entry, scale =
 * (fp8_max / amax) / 2^margin, the old scale kept where amax is 0 or not
 * finite. Quantisation saturates, as TE's casts (satfinite) do. The history
 * is a ring buffer per tensor; `pos` is the slot the next step writes.
 * The quantise itself is a kernel (mxp_kernels fp8_quantize).
 */
#include <mixprec/amp.h>

#include "backend/numerics/fp8_scale.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static const char *const amax_algo_names[] = {"max", "most_recent"};
static_assert(sizeof amax_algo_names / sizeof amax_algo_names[0] == MXP_FP8_AMAX_ALGO_COUNT,
              "amax_algo_names must cover mxp_fp8_amax_algo");

static_assert(MXP_F8_AMAX_MAX == (int)MXP_FP8_AMAX_MAX &&
                  MXP_F8_AMAX_MOST_RECENT == (int)MXP_FP8_AMAX_MOST_RECENT,
              "backend/numerics/fp8_scale.h's algorithm codes are mxp_fp8_amax_algo's");

const char *mxp_fp8_amax_algo_name(mxp_fp8_amax_algo a) {
    if ((unsigned)a >= MXP_FP8_AMAX_ALGO_COUNT) return "unknown";
    return amax_algo_names[a];
}

mxp_fp8_config mxp_fp8_config_default(void) {
    return (mxp_fp8_config){.history_len = 16, .amax_algo = MXP_FP8_AMAX_MAX, .margin = 0};
}

mxp_status mxp_fp8_config_validate(const mxp_fp8_config *c, mxp_error *err) {
    if (!c) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "fp8 config is NULL");
    if (c->history_len < 1 || c->history_len > 65536)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "training.fp8.history_len=%d; accepted: 1..65536", c->history_len);
    if ((unsigned)c->amax_algo >= MXP_FP8_AMAX_ALGO_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "training.fp8.amax_algo=%d; accepted: max, most_recent",
                             (int)c->amax_algo);
    if (c->margin < 0 || c->margin > 64)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "training.fp8.margin=%d; accepted: 0..64", c->margin);
    return MXP_OK;
}

float mxp_fp8_scale_rule(float amax, float old_scale, double fp8_max, int margin) {
    return mxp_f8_scale_rule(amax, old_scale, fp8_max, margin); /* shared with the device */
}

/* The kernel table's fp8_quantize (kernels/generic/fp8.c is the reference;
 * AVX-512 and generic give the same bits). */
float mxp_fp8_quantize(mxp_dtype fmt, float *dst, const float *src, size_t n, float scale) {
    float amax; /* the kernel's result slot: host memory here */
    mxp_kernels_get()->fp8_quantize(fmt, dst, src, n, scale, &amax);
    return amax;
}

/* ---- the scaling state --------------------------------------------------------- */

struct mxp_fp8_scaling {
    mxp_fp8_config cfg;
    int n;
    int pos;          /* ring slot the next update writes */
    int64_t steps;    /* update() calls */
    mxp_dtype *fmt;   /* [n] */
    float *scale;     /* [n] */
    float *pending;   /* [n] amax observed in the current step */
    float *hist;      /* [n][H] ring buffers */
};

mxp_status mxp_fp8_scaling_create(const mxp_fp8_config *c, int n_tensors,
                                  const mxp_dtype *formats, mxp_fp8_scaling **out,
                                  mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_fp8_scaling_create: out NULL");
    *out = NULL;
    mxp_status st = mxp_fp8_config_validate(c, err);
    if (st != MXP_OK) return st;
    if (n_tensors < 1 || !formats)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "fp8 scaling: %d tensors%s; accepted: >= 1 with a format each",
                             n_tensors, formats ? "" : " (formats NULL)");
    for (int i = 0; i < n_tensors; i++)
        if (formats[i] != MXP_DTYPE_F8_E4M3 && formats[i] != MXP_DTYPE_F8_E5M2)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "fp8 scaling: tensor %d has format %s; accepted: f8_e4m3, "
                                 "f8_e5m2",
                                 i, mxp_dtype_name(formats[i]));
    size_t nh;
    if (!mxp_size_mul((size_t)n_tensors, (size_t)c->history_len, &nh))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "fp8 amax history size overflows");
    mxp_fp8_scaling *s = mxp_calloc(1, sizeof *s);
    if (!s) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "fp8 scaling state");
    s->cfg = *c;
    s->n = n_tensors;
    s->fmt = mxp_calloc((size_t)n_tensors, sizeof *s->fmt);
    s->scale = mxp_calloc((size_t)n_tensors, sizeof(float));
    s->pending = mxp_calloc((size_t)n_tensors, sizeof(float));
    s->hist = mxp_calloc(nh, sizeof(float));
    if (!s->fmt || !s->scale || !s->pending || !s->hist) {
        mxp_fp8_scaling_destroy(s);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                             "fp8 scaling state for %d tensors x %d history", n_tensors,
                             c->history_len);
    }
    for (int i = 0; i < n_tensors; i++) {
        s->fmt[i] = formats[i];
        s->scale[i] = 1.0f;
    }
    *out = s;
    return MXP_OK;
}

void mxp_fp8_scaling_destroy(mxp_fp8_scaling *s) {
    if (!s) return;
    mxp_free(s->fmt);
    mxp_free(s->scale);
    mxp_free(s->pending);
    mxp_free(s->hist);
    mxp_free(s);
}

int mxp_fp8_scaling_num_tensors(const mxp_fp8_scaling *s) { return s->n; }
const mxp_fp8_config *mxp_fp8_scaling_config(const mxp_fp8_scaling *s) { return &s->cfg; }
mxp_dtype mxp_fp8_scaling_format(const mxp_fp8_scaling *s, int i) { return s->fmt[i]; }
float mxp_fp8_scaling_scale(const mxp_fp8_scaling *s, int i) { return s->scale[i]; }
int64_t mxp_fp8_scaling_steps(const mxp_fp8_scaling *s) { return s->steps; }

float mxp_fp8_scaling_scale_inv(const mxp_fp8_scaling *s, int i) {
    return (float)(1.0 / (double)s->scale[i]);
}

void mxp_fp8_scaling_observe(mxp_fp8_scaling *s, int i, float amax) {
    float *p = &s->pending[i];
    if (!isfinite(*p)) {
        if (isnan(amax)) *p = amax; /* NaN is the stickiest */
        return;
    }
    if (!isfinite(amax) || amax > *p) *p = amax;
}

/* Window amax of tensor i by the configured algorithm (the device step's
 * rule too: backend/numerics/fp8_scale.h). */
static float window_amax(const mxp_fp8_scaling *s, int i) {
    const int H = s->cfg.history_len;
    return mxp_f8_window_amax(s->hist + (size_t)i * (size_t)H, H, s->pos, (int)s->cfg.amax_algo);
}

void mxp_fp8_scaling_update(mxp_fp8_scaling *s) {
    const int H = s->cfg.history_len;
    for (int i = 0; i < s->n; i++) {
        s->hist[(size_t)i * (size_t)H + (size_t)s->pos] = s->pending[i];
        s->pending[i] = 0.0f;
    }
    s->pos = (s->pos + 1) % H;
    for (int i = 0; i < s->n; i++) {
        double fmax = mxp_dtype_info(s->fmt[i])->max;
        s->scale[i] = mxp_fp8_scale_rule(window_amax(s, i), s->scale[i], fmax, s->cfg.margin);
    }
    s->steps++;
}

size_t mxp_fp8_scaling_state_size(const mxp_fp8_scaling *s) {
    return (size_t)s->n * (1 + (size_t)s->cfg.history_len);
}

void mxp_fp8_scaling_get_state(const mxp_fp8_scaling *s, float *buf) {
    const int H = s->cfg.history_len;
    memcpy(buf, s->scale, (size_t)s->n * sizeof(float));
    float *out = buf + s->n;
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < H; k++) /* oldest first: the slot pos is the oldest */
            *out++ = s->hist[(size_t)i * (size_t)H + (size_t)((s->pos + k) % H)];
}

mxp_status mxp_fp8_scaling_set_state(mxp_fp8_scaling *s, const float *buf, size_t n,
                                     int64_t steps, mxp_error *err) {
    if (!s || !buf)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_fp8_scaling_set_state: NULL");
    const size_t want = mxp_fp8_scaling_state_size(s);
    if (n != want)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "fp8 scaling state has %zu floats; accepted: %zu (%d tensors x "
                             "(1 scale + %d history))",
                             n, want, s->n, s->cfg.history_len);
    if (steps < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT, "fp8 scaling steps=%lld; accepted: >= 0",
                             (long long)steps);
    for (int i = 0; i < s->n; i++)
        if (!(buf[i] > 0.0f) || !isfinite(buf[i]))
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "fp8 scaling state: scale[%d]=%g; accepted: finite and > 0", i,
                                 (double)buf[i]);
    for (size_t k = (size_t)s->n; k < want; k++)
        if (buf[k] < 0.0f)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "fp8 scaling state: amax history entry %zu is %g; accepted: "
                                 ">= 0 (or non-finite as recorded)",
                                 k - (size_t)s->n, (double)buf[k]);
    const int H = s->cfg.history_len;
    memcpy(s->scale, buf, (size_t)s->n * sizeof(float));
    memcpy(s->hist, buf + s->n, (size_t)s->n * (size_t)H * sizeof(float));
    memset(s->pending, 0, (size_t)s->n * sizeof(float));
    s->pos = 0; /* the state is stored oldest first */
    s->steps = steps;
    return MXP_OK;
}
