/* backend/numerics/optim.h: the per-element optimizer updates shared by the
 * CPU kernels (kernels/generic/optim.c, kernels/x86_avx512/loops_optim.c
 * for its scalars) and the CUDA kernels (backend/cuda/kernels.cu).
 *
 * Entry points:
 *   mxp_adamw_consts_make (host-side: pow/sqrt in double, once per step),
 *   mxp_adamw_elem, mxp_sgd_elem (MXP_HD: one element, FP32, no FMA when
 *   built with -ffp-contract=off / --fmad=false),
 *   mxp_weight_store_bits (MXP_HD: one updated FP32 weight to its 16-bit
 *   storage, RNE or SR with the Philox draw of its index).
 * Every weight path (FP32 master + recast work copy, pure BF16/FP16 with RNE
 * or SR stores) is: load w as FP32 -> elem update -> store (master as FP32;
 * work via mxp_weight_store_bits). References: PyTorch torch.optim.AdamW
 * and torch.optim.SGD single-tensor implementations (same arrangement of the
 * bias corrections); Loshchilov & Hutter, "Decoupled Weight Decay
 * Regularization" (ICLR 2019).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_OPTIM_H
#define MIXPREC_BACKEND_NUMERICS_OPTIM_H

#include "backend/numerics/philox.h"
#include "backend/numerics/round.h"

#ifndef __CUDA_ARCH__
#include <math.h>
#endif

/* The FP32 scalars of one AdamW step (what travels to the device). */
typedef struct mxp_adamw_consts {
    float b1, b2;     /* beta1, beta2 */
    float omb1, omb2; /* (float)(1 - (double)beta), as PyTorch */
    float eps;
    float decay;      /* (float)(1 - (double)lr * wd) */
    float step_size;  /* (float)(lr / (1 - b1^t)) */
    float bc2_sqrt;   /* (float)sqrt(1 - b2^t) */
} mxp_adamw_consts;

#ifndef __CUDA_ARCH__
/* Host-side (glibc pow/sqrt in double): the constants of AdamW step t
 * (t < 1 treated as 1). Evaluated once per step on the host so that the
 * device never depends on its own pow(). */
static inline mxp_adamw_consts mxp_adamw_consts_make(float lr, float beta1, float beta2,
                                                     float eps, float weight_decay,
                                                     int64_t t) {
    double step = (double)(t < 1 ? 1 : t);
    mxp_adamw_consts c;
    c.b1 = beta1;
    c.b2 = beta2;
    c.omb1 = (float)(1.0 - (double)beta1);
    c.omb2 = (float)(1.0 - (double)beta2);
    c.eps = eps;
    c.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    c.step_size = (float)((double)lr / (1.0 - pow((double)beta1, step)));
    c.bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, step));
    return c;
}
#endif

/* One AdamW element: updates *m, *v and returns the new weight.
 *   m = b1 m + (1-b1) g;  v = b2 v + ((1-b2) g) g;
 *   w = w decay - step_size * (m / (sqrt(v) / bc2_sqrt + eps)).
 * The order of operations is the contract (bit-identity across backends). */
MXP_HD static inline float mxp_adamw_elem(float w, float g, float *m, float *v,
                                          const mxp_adamw_consts *c) {
    float mi = c->b1 * *m + c->omb1 * g;
    float vi = c->b2 * *v + c->omb2 * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
    return w * c->decay - c->step_size * (mi / denom);
}

/* The scalars of one SGD step. */
typedef struct mxp_sgd_consts {
    float lr, momentum, weight_decay;
    bool nesterov;
    bool use_buf; /* momentum != 0 and a buffer exists */
    bool first;   /* t <= 1: buf = g' */
} mxp_sgd_consts;

/* One SGD element (PyTorch, dampening 0): returns the new weight.
 *   g' = g + wd w (only when wd != 0);  buf = first ? g' : mom buf + g';
 *   d = nesterov ? g' + mom buf : buf (d = g' without a buffer); w - lr d. */
MXP_HD static inline float mxp_sgd_elem(float w, float g, float *buf,
                                        const mxp_sgd_consts *c) {
    float gi = c->weight_decay != 0.0f ? g + c->weight_decay * w : g;
    float d = gi;
    if (c->use_buf) {
        float b = c->first ? gi : c->momentum * *buf + gi;
        *buf = b;
        d = c->nesterov ? gi + c->momentum * b : b;
    }
    return w - c->lr * d;
}

/* Storage of an updated FP32 weight as 16-bit bits: bf16 selects BF16
 * (else FP16); sr rounds stochastically with draw mxp_philox_at(seed,
 * counter) (the caller passes counter = step base + element index), else
 * RNE. */
MXP_HD static inline uint16_t mxp_weight_store_bits(float w, bool bf16, bool sr, uint64_t seed,
                                                    uint64_t counter) {
    if (sr) {
        uint32_t r = mxp_philox_at(seed, counter);
        return bf16 ? mxp_nr_f32_to_bf16_sr(w, r) : mxp_nr_f32_to_fp16_sr(w, r);
    }
    return bf16 ? mxp_nr_f32_to_bf16(w) : mxp_nr_f32_to_fp16(w);
}

#endif /* MIXPREC_BACKEND_NUMERICS_OPTIM_H */
