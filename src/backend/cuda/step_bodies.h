/* backend/cuda/step_bodies.h: the step kernels of kernels.cu (grad pass,
 * decide, AdamW, SGD) and the widening kernel of mlp_kernels.cu as MXP_HD
 * bodies of explicit indices, so the CUDA kernels and the host launch
 * emulator of the device step (tests/dstep_emu.h) run the same code.
 *
 * Entry points:
 *   mxp_sb_grad_thread (one thread's grid-stride share of the fused grad
 *     pass; the kernel then merges by the block tree and one thread merges
 *     the block partials in block order: mxp_gradpass_acc_merge);
 *   mxp_sb_decide (the one-thread decision: skip, clip coefficient, step and
 *     SR counters, the scaler rule);
 *   mxp_sb_adamw_body, mxp_sb_sgd_body (one thread's grid-stride share of
 *     the optimizer, skip read from the control block);
 *   mxp_sb_widen_body (16-bit or FP32 storage -> FP32, exact);
 *   mxp_sb_micro_rows / _first (the device step's micro-batch split),
 *   mxp_sb_loss_fold (the step's loss from the micro-batch losses, one
 *     thread).
 * Element rules: backend/numerics/ (one home with the CPU). Plain C and
 * CUDA C++ (MXP_HD); nothing here allocates, logs or synchronises.
 */
#ifndef MIXPREC_BACKEND_CUDA_STEP_BODIES_H
#define MIXPREC_BACKEND_CUDA_STEP_BODIES_H

#include "backend/numerics/mlp.h"
#include "backend/step_ctl.h"

/* One thread's share of the grad pass: g[i] = mxp_gradpass_elem(g[i],
 * ctl.inv_scale, near_at) for i = first, first + stride, ...; returns the
 * thread's partial statistics. */
MXP_HD static inline mxp_gradpass_acc mxp_sb_grad_thread(const mxp_mk_idx *ix, float *g,
                                                         size_t count, float inv,
                                                         float near_at) {
    mxp_gradpass_acc a = mxp_gradpass_acc_init();
    for (size_t i = mxp_mk_first(ix); i < count; i += mxp_mk_stride(ix))
        g[i] = mxp_gradpass_elem(g[i], inv, near_at, &a);
    return a;
}

/* The trainer's decision (train/trainer.c) in one thread: found_inf from the
 * pass, the host's loss flag, extra_inf and the loss slot ctl.loss (a
 * non-finite loss skips even when every gradient is finite); the clip
 * coefficient as PyTorch's clip_grad_norm_ (max_norm / (norm + 1e-6), in
 * double, applied only when norm > max); the counters; the scaler rule. */
MXP_HD static inline void mxp_sb_decide(mxp_step_ctl *ctl, bool extra_inf, uint64_t n_params) {
    const bool loss_bad = !isfinite(ctl->loss);
    bool found_inf = ctl->stats.nonfinite > 0 || ctl->loss_nonfinite != 0 || extra_inf ||
                     loss_bad;
    ctl->skip = found_inf ? 1 : 0;
    double norm = sqrt(ctl->stats.sumsq);
    float clip = ctl->clip_max;
    ctl->clip_coef = (clip > 0.0f && norm > (double)clip) ? (float)((double)clip / (norm + 1e-6))
                                                          : 1.0f;
    if (!found_inf) {
        ctl->opt_steps++;
        ctl->sr_counter += n_params;
    }
    if (ctl->run_scaler_rule)
        ctl->event = mxp_scaler_rule_step(&ctl->rule, &ctl->scaler, found_inf);
}

/* Weight i as FP32: the master, else the 16-bit work copy. */
MXP_HD static inline float mxp_sb_load_w(const float *master, const uint16_t *work, bool bf16,
                                         size_t i) {
    if (master) return master[i];
    return bf16 ? mxp_nr_bf16_to_f32(work[i]) : mxp_nr_fp16_to_f32(work[i]);
}

/* Publish the updated weight: master (then RNE recast into work when
 * given), or the work copy with RNE/SR (decide already advanced sr_counter
 * past this step, hence the base sr_counter - count). */
MXP_HD static inline void mxp_sb_store_w(float *master, uint16_t *work, bool bf16, bool sr,
                                         const mxp_step_ctl *ctl, uint64_t base, size_t i,
                                         float w) {
    if (master) {
        master[i] = w;
        if (work) work[i] = mxp_weight_store_bits(w, bf16, false, 0, 0);
        return;
    }
    work[i] = mxp_weight_store_bits(w, bf16, sr, ctl->seed, base + i);
}

/* AdamW over this thread's elements; nothing when ctl.skip. The clip is
 * applied to g inline (g * coef: the product the CPU's separate scale pass
 * forms). */
MXP_HD static inline void mxp_sb_adamw_body(const mxp_mk_idx *ix, const mxp_step_ctl *ctl,
                                            float *master, uint16_t *work, bool bf16, bool sr,
                                            const float *g, float *m, float *v, size_t count) {
    if (ctl->skip) return;
    const float coef = ctl->clip_coef;
    const uint64_t base = ctl->sr_counter - count;
    for (size_t i = mxp_mk_first(ix); i < count; i += mxp_mk_stride(ix)) {
        float gi = coef == 1.0f ? g[i] : g[i] * coef;
        float w = mxp_adamw_elem(mxp_sb_load_w(master, work, bf16, i), gi, &m[i], &v[i],
                                 &ctl->adamw);
        mxp_sb_store_w(master, work, bf16, sr, ctl, base, i, w);
    }
}

/* SGD (momentum buffer when ctl.sgd.use_buf) over this thread's elements. */
MXP_HD static inline void mxp_sb_sgd_body(const mxp_mk_idx *ix, const mxp_step_ctl *ctl,
                                          float *master, uint16_t *work, bool bf16, bool sr,
                                          const float *g, float *buf, size_t count) {
    if (ctl->skip) return;
    const float coef = ctl->clip_coef;
    const uint64_t base = ctl->sr_counter - count;
    float unused = 0.0f;
    for (size_t i = mxp_mk_first(ix); i < count; i += mxp_mk_stride(ix)) {
        float gi = coef == 1.0f ? g[i] : g[i] * coef;
        float *b = ctl->sgd.use_buf ? &buf[i] : &unused;
        float w = mxp_sgd_elem(mxp_sb_load_w(master, work, bf16, i), gi, b, &ctl->sgd);
        mxp_sb_store_w(master, work, bf16, sr, ctl, base, i, w);
    }
}

/* Micro-batch i of k over `batch` rows (the device step's split): batch / k
 * rows, one more for i < batch % k; mxp_sb_micro_first: its first row. */
MXP_HD static inline int64_t mxp_sb_micro_rows(int64_t batch, int k, int i) {
    return batch / k + (i < batch % k ? 1 : 0);
}
MXP_HD static inline int64_t mxp_sb_micro_first(int64_t batch, int k, int i) {
    const int64_t r = batch % k;
    return (int64_t)i * (batch / k) + (i < r ? i : r);
}

/* The step's loss from the micro-batches' mean losses: sum of slots[i] *
 * B_i / batch in double, in micro-batch order, each term (loss * B_i) /
 * batch as the CPU trainer forms it (train/trainer.c read_passes). */
MXP_HD static inline double mxp_sb_loss_fold(const double *slots, int k, int64_t batch) {
    double sum = 0.0;
    for (int i = 0; i < k; i++)
        sum += slots[i] * (double)mxp_sb_micro_rows(batch, k, i) / (double)batch;
    return sum;
}

/* out[i] = src[i] widened to FP32 (fmt: MXP_MK_STORE_*; exact). */
MXP_HD static inline void mxp_sb_widen_body(const mxp_mk_idx *ix, int fmt, float *out,
                                            const void *src, size_t n) {
    for (size_t i = mxp_mk_first(ix); i < n; i += mxp_mk_stride(ix)) {
        if (fmt == MXP_MK_STORE_BF16)
            out[i] = mxp_nr_bf16_to_f32(((const uint16_t *)src)[i]);
        else if (fmt == MXP_MK_STORE_FP16)
            out[i] = mxp_nr_fp16_to_f32(((const uint16_t *)src)[i]);
        else
            out[i] = ((const float *)src)[i];
    }
}

#endif /* MIXPREC_BACKEND_CUDA_STEP_BODIES_H */
