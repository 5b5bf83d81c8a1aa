/* tests/dstep_harness.h: the device-step test harness shared by
 * tests/test_dstep_graph.c and tests/test_cuda_dstep.c (backend/cuda/dstep.h
 * plans on the emulated device, the recorder or a real one): an MLP shape,
 * its plan spec with the trainer's defaults, the name of its precision, a
 * seeded uniform stream and a random batch from it. Header only (static
 * inline), so a test includes it without a CMake change. */
#ifndef MIXPREC_TESTS_DSTEP_HARNESS_H
#define MIXPREC_TESTS_DSTEP_HARNESS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/dstep.h"

/* depth x (linear(hidden) [-> layernorm] -> act), linear(out); micro
 * micro-batches per step (0 or 1: one). */
typedef struct ds_shape {
    const char *name;
    int64_t in, hidden, out, batch;
    int depth, micro;
    mxp_ds_kind act;
    bool layernorm;
    mxp_ds_loss loss;
    mxp_ds_optim optim; /* AdamW (lr 1e-3) or SGD (lr 1e-2, momentum 0.9, nesterov) */
} ds_shape;

/* The next value of the LCG state *rs, in [-1, 1). */
static inline float ds_frand(uint32_t *rs) {
    *rs = *rs * 1664525u + 1013904223u;
    return (float)((double)(*rs >> 8) / 8388608.0 - 1.0);
}

/* "fp32", "mixed_bf16" or "mixed_fp16": the mode of low-precision type lowp. */
static inline const char *ds_mode_name(mxp_dtype lowp) {
    return lowp == MXP_DTYPE_F32 ? "fp32" : lowp == MXP_DTYPE_BF16 ? "mixed_bf16" : "mixed_fp16";
}

/* sh's plan in lowp with the trainer defaults (AdamW betas 0.9/0.999, eps
 * 1e-8, clip 1, layernorm eps 1e-5, seed 1234; fp16: dynamic loss scale
 * from 65536, growth every 3 clean steps, hysteresis 1). */
static inline mxp_ds_spec ds_spec_of(const ds_shape *sh, mxp_dtype lowp) {
    mxp_ds_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = sh->in;
    s.batch = sh->batch;
    int l = 0;
    for (int d = 0; d < sh->depth; d++) {
        s.layers[l].kind = MXP_DS_LINEAR;
        s.layers[l++].units = sh->hidden;
        if (sh->layernorm) s.layers[l++].kind = MXP_DS_LAYERNORM;
        s.layers[l++].kind = sh->act;
    }
    s.layers[l].kind = MXP_DS_LINEAR;
    s.layers[l++].units = sh->out;
    s.n_layers = l;
    s.loss = sh->loss;
    s.ln_eps = 1e-5f;
    s.lowp = lowp;
    s.optim = sh->optim;
    s.lr = sh->optim == MXP_DS_SGD ? 1e-2f : 1e-3f;
    s.momentum = 0.9f;
    s.nesterov = true;
    s.micro_batches = sh->micro;
    s.beta1 = 0.9f;
    s.beta2 = 0.999f;
    s.eps = 1e-8f;
    s.clip_max = 1.0f;
    s.near_overflow_frac = 0.125f;
    s.seed = 1234;
    bool on = lowp == MXP_DTYPE_F16;
    s.rule = (mxp_scaler_rule){on, 2.0, 0.5, 3, 1, 1.17549435e-38f, INFINITY};
    s.scaler0.scale = on ? 65536.0f : 1.0f;
    s.scaler0.hysteresis_left = 1;
    return s;
}

/* A random batch of sh from the stream *rs: x [batch, in] in [-1, 1), y
 * [batch, out] (MSE; one float a row for cross-entropy) in [-0.5, 0.5),
 * labels in [0, out). */
static inline void ds_fill_batch(const ds_shape *sh, uint32_t *rs, float *x, float *y,
                                 int32_t *lab) {
    const int64_t B = sh->batch, ydim = sh->loss == MXP_DS_XENT ? 1 : sh->out;
    for (int64_t i = 0; i < B * sh->in; i++) x[i] = ds_frand(rs);
    for (int64_t i = 0; i < B * ydim; i++) y[i] = 0.5f * ds_frand(rs);
    for (int64_t i = 0; i < B; i++)
        lab[i] = (int32_t)((*rs = *rs * 1664525u + 1013904223u) >> 8) % (int32_t)sh->out;
}

#endif
