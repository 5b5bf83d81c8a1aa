/* backend/numerics/fp8_scale.h: FP8 delayed scaling, the per-tensor rules
 * shared by the CPU's scaling state (amp/fp8.c) and the device step's
 * scaling update (backend/cuda/dstep_fp8.c through the ops table: the
 * CUDA kernel in fp8_kernels.cu, the emulated one in tests/).
 *
 * Entry points (MXP_HD, plain scalars; see hd.h for why the bits agree):
 *   mxp_f8_scale_rule   scale = (fp8_max / amax) / 2^margin in double,
 *                       rounded to FP32; the old scale where amax is 0 or
 *                       not finite, or the result is not finite and > 0
 *   mxp_f8_amax_merge   two amaxes of parts of one tensor into the
 *                       tensor's: NaN over Inf over the larger finite
 *                       (the quantise kernel's result rule)
 *   mxp_f8_window_amax  the amax of a ring history (max over it, a
 *                       non-finite entry making it that entry; or the
 *                       newest entry)
 *   mxp_f8_update_slot  one tensor's end-of-pass update: the pending amax
 *                       into the ring at pos, pending reset, new scale
 *                       from the window after the write, scale_inv
 * The recipe is Transformer Engine's DelayedScaling (amp/fp8.c's header).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_FP8_SCALE_H
#define MIXPREC_BACKEND_NUMERICS_FP8_SCALE_H

#include "backend/numerics/hd.h"

/* amax_algo values (mxp_fp8_amax_algo) */
enum { MXP_F8_AMAX_MAX = 0, MXP_F8_AMAX_MOST_RECENT = 1 };

MXP_HD static inline bool mxp_f8_finite(float f) {
    return (mxp_hd_f32_bits(f) & 0x7f800000u) != 0x7f800000u;
}
MXP_HD static inline bool mxp_f8_isnan(float f) {
    return (mxp_hd_f32_bits(f) & 0x7fffffffu) > 0x7f800000u;
}

MXP_HD static inline float mxp_f8_scale_rule(float amax, float old_scale, double fp8_max,
                                             int margin) {
    if (!(amax > 0.0f) || !mxp_f8_finite(amax)) return old_scale;
    uint64_t pb = (uint64_t)(1023 + margin) << 52; /* 2^margin, exact, margin in [0, 64] */
    double p2;
    memcpy(&p2, &pb, sizeof p2);
    double sf = (fp8_max / (double)amax) / p2;
    float f = (float)sf;
    if (!(f > 0.0f) || !mxp_f8_finite(f)) return old_scale;
    return f;
}

MXP_HD static inline float mxp_f8_amax_merge(float a, float b) {
    if (mxp_f8_isnan(a)) return a;
    if (mxp_f8_isnan(b)) return b;
    if (!mxp_f8_finite(a)) return a;
    if (!mxp_f8_finite(b)) return b;
    return b > a ? b : a;
}

/* h [H] a ring whose slot pos is the next to be written (so pos - 1 is the
 * newest). */
MXP_HD static inline float mxp_f8_window_amax(const float *h, int H, int pos, int algo) {
    if (algo == MXP_F8_AMAX_MOST_RECENT) return h[(pos + H - 1) % H];
    float m = 0.0f;
    for (int k = 0; k < H; k++) {
        if (!mxp_f8_finite(h[k])) return h[k];
        if (h[k] > m) m = h[k];
    }
    return m;
}

/* Tensor update at the end of a pass: h [H] its ring, pos the slot this
 * pass writes (the caller advances pos once for all tensors). */
MXP_HD static inline void mxp_f8_update_slot(float *h, int H, int pos, float *pending,
                                             float *scale, float *scale_inv, int algo,
                                             double fp8_max, int margin) {
    h[pos] = *pending;
    *pending = 0.0f;
    float s = mxp_f8_scale_rule(mxp_f8_window_amax(h, H, (pos + 1) % H, algo), *scale, fp8_max,
                                margin);
    *scale = s;
    *scale_inv = (float)(1.0 / (double)s);
}

#endif /* MIXPREC_BACKEND_NUMERICS_FP8_SCALE_H */
