/* tests/dstep_emu.h: the emulated device of the device step (test helper,
 * header-only): an mxp_ds_ops table (backend/cuda/dstep.h) whose "device"
 * is host memory and whose kernels are the MXP_HD bodies the CUDA kernels
 * run (backend/numerics/mlp.h, mlp_rows.h, backend/cuda/step_bodies.h),
 * launched over the .cu launchers' geometry by the host launch emulator
 * (tests/cuda_emu.h; the grad pass, optimizer and widen launchers are
 * copied here from kernels.cu / mlp_kernels.cu: 1024 x 256 with a block
 * tree and a block-order merge, and grid-stride grids capped at 65,535).
 * cuBLASLt is replaced by a column-major executor of the mxp_lt_desc (the
 * same interpretation as tests/test_lt_map.c): A and B widened from their
 * stored dtype, products summed in double and rounded once to FP32, then
 * alpha, beta * C and the bias epilogue in FP32. cuBLASLt sums in FP32 in
 * an order of its own, so the CUDA table agrees with this one to FP32
 * rounding of the GEMMs, not bit for bit.
 *
 * Allocations are 256-byte aligned like cudaMalloc's, and a GEMM whose
 * operand (A, B, D, bias) is not 256-byte aligned is refused: the
 * algorithm a plan picks assumes that alignment.
 * The control block has an aux area (EMU_AUX_CAP bytes, the scans), reported
 * with it in one counted copy (report_aux).
 * Use: emu_dev d = {0}; mxp_ds_plan_create(&spec, &emu_ds_ops, &d, ...);
 * d.d2h counts the device-to-host copies (report and download), d.calls
 * every op call, d.fail_at makes call number fail_at fail (fault tests).
 */
#ifndef MIXPREC_TESTS_DSTEP_EMU_H
#define MIXPREC_TESTS_DSTEP_EMU_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/dstep.h"
#include "backend/cuda/step_bodies.h"
#include "cuda_emu.h"

#define EMU_AUX_CAP ((size_t)64 << 10) /* the aux area (as MXP_CUDAB_AUX_CAP) */

typedef struct emu_dev {
    mxp_step_ctl ctl; /* the "device" control block */
    _Alignas(64) unsigned char aux[EMU_AUX_CAP]; /* its aux area (scans) */
    int64_t d2h, calls, fail_at;
    int64_t live; /* allocations not yet freed */
} emu_dev;

#define EMU_D ((emu_dev *)dev)

/* Count the call; fail it when it is the planted one. */
static int emu_enter(void *dev, const char *op, char *why, size_t n) {
    emu_dev *d = EMU_D;
    d->calls++;
    if (d->fail_at > 0 && d->calls == d->fail_at) {
        if (why && n) snprintf(why, n, "emulated device: %s failed (planted)", op);
        return 1;
    }
    return 0;
}

static int emu_fmt(mxp_dtype t) {
    return t == MXP_DTYPE_BF16 ? MXP_MK_STORE_BF16
           : t == MXP_DTYPE_F16 ? MXP_MK_STORE_FP16
                                : MXP_MK_STORE_F32;
}

static int emu_alloc(void *dev, size_t bytes, void **out, char *why, size_t n) {
    if (emu_enter(dev, "alloc", why, n)) return 1;
    /* 256-byte aligned, as cudaMalloc's (emu_lt_run checks the operands) */
    size_t sz = (bytes + 255) / 256 * 256;
    *out = aligned_alloc(256, sz ? sz : 256);
    if (*out) memset(*out, 0, sz ? sz : 256);
    if (!*out) return mxp_cudab_why(why, n, "emulated device: out of memory (%zu bytes)", bytes);
    EMU_D->live++;
    return 0;
}
static void emu_free(void *dev, void *p) {
    if (p) EMU_D->live--;
    free(p);
}
static int emu_upload(void *dev, void *dst, const void *host, size_t bytes, char *why, size_t n) {
    if (emu_enter(dev, "upload", why, n)) return 1;
    memcpy(dst, host, bytes);
    return 0;
}
static int emu_download(void *dev, void *host, const void *src, size_t bytes, char *why,
                        size_t n) {
    if (emu_enter(dev, "download", why, n)) return 1;
    memcpy(host, src, bytes);
    EMU_D->d2h++;
    return 0;
}
static int emu_sync(void *dev, char *why, size_t n) { return 0; }
static int emu_zero(void *dev, void *p, size_t bytes, char *why, size_t n) {
    if (emu_enter(dev, "zero", why, n)) return 1;
    memset(p, 0, bytes);
    return 0;
}

typedef struct emu_lt {
    mxp_lt_desc d;
    mxp_dtype ab;
} emu_lt;

static int emu_lt_create(void *dev, const mxp_lt_desc *d, mxp_dtype ab, void **plan, char *why,
                         size_t n) {
    if (emu_enter(dev, "lt plan", why, n)) return 1;
    if (ab != MXP_DTYPE_F32 && ab != MXP_DTYPE_BF16 && ab != MXP_DTYPE_F16)
        return mxp_cudab_why(why, n, "emulated cuBLASLt: dtype %d", (int)ab);
    emu_lt *p = calloc(1, sizeof *p);
    if (!p) return mxp_cudab_why(why, n, "emulated cuBLASLt: out of memory");
    p->d = *d;
    p->ab = ab;
    *plan = p;
    return 0;
}
static void emu_lt_destroy(void *dev, void *plan) { free(plan); }

static double emu_ld(mxp_dtype t, const void *buf, size_t i) {
    if (t == MXP_DTYPE_BF16) return (double)mxp_nr_bf16_to_f32(((const uint16_t *)buf)[i]);
    if (t == MXP_DTYPE_F16) return (double)mxp_nr_fp16_to_f32(((const uint16_t *)buf)[i]);
    return (double)((const float *)buf)[i];
}

/* D = alpha op(A) op(B) + beta D (+ bias[i]), column-major (test_lt_map.c). */
static int emu_lt_run(void *dev, void *plan, const void *A, const void *B, float *D,
                      const float *bias, char *why, size_t n) {
    if (emu_enter(dev, "lt run", why, n)) return 1;
    const emu_lt *p = plan;
    const mxp_lt_desc *d = &p->d;
    if (d->bias && !bias) return mxp_cudab_why(why, n, "emulated cuBLASLt: bias NULL");
    /* the plan's algorithm assumes cuBLASLt's default 256-byte alignment of
     * every operand (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES) */
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)D | (uintptr_t)(d->bias ? bias : NULL)) & 255u)
        return mxp_cudab_why(why, n, "emulated cuBLASLt: an operand is not 256-byte aligned");
    for (int64_t j = 0; j < d->n; j++)
        for (int64_t i = 0; i < d->m; i++) {
            double s = 0;
            for (int64_t q = 0; q < d->k; q++) {
                size_t ia = (size_t)(d->trans_a ? q + i * d->lda : i + q * d->lda);
                size_t ib = (size_t)(d->trans_b ? j + q * d->ldb : q + j * d->ldb);
                s += emu_ld(p->ab, A, ia) * emu_ld(p->ab, B, ib);
            }
            float *o = &D[i + j * d->ldc];
            float v = d->alpha * (float)s;
            if (d->beta != 0.0f) v = v + d->beta * *o;
            *o = v;
        }
    /* the epilogue: D[i, j] += bias[i] is the row-major bias add over
     * n rows of m columns (ldc == m for the linear layer's plans) */
    if (d->bias) emu_bias_add(D, bias, (size_t)d->n, (size_t)d->m);
    return 0;
}

static int emu_bias_grad_op(void *dev, float *dbias, const float *dy, int64_t B, int64_t C,
                            char *why, size_t n) {
    if (emu_enter(dev, "bias grad", why, n)) return 1;
    emu_bias_grad(dbias, dy, (size_t)B, (size_t)C);
    return 0;
}
static int emu_act_fwd_op(void *dev, int act, float *y, const float *x, size_t count, char *why,
                          size_t n) {
    if (emu_enter(dev, "act fwd", why, n)) return 1;
    emu_act_fwd(act, y, x, count);
    return 0;
}
static int emu_act_bwd_op(void *dev, int act, float *dx, const float *dy, const float *s,
                          size_t count, char *why, size_t n) {
    if (emu_enter(dev, "act bwd", why, n)) return 1;
    emu_act_bwd(act, dx, dy, s, count);
    return 0;
}
static int emu_ln_fwd_op(void *dev, float *y, float *mean, float *rstd, const float *x,
                         const float *gamma, const float *beta, int64_t B, int64_t C, float eps,
                         char *why, size_t n) {
    if (emu_enter(dev, "layernorm fwd", why, n)) return 1;
    emu_layernorm_fwd(y, mean, rstd, x, gamma, beta, (size_t)B, (size_t)C, eps);
    return 0;
}
static int emu_ln_bwd_op(void *dev, float *dx, float *dgamma, float *dbeta, const float *dy,
                         const float *x, const float *mean, const float *rstd,
                         const float *gamma, int64_t B, int64_t C, char *why, size_t n) {
    if (emu_enter(dev, "layernorm bwd", why, n)) return 1;
    emu_layernorm_bwd(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, (size_t)B, (size_t)C);
    return 0;
}
static int emu_mse_op(void *dev, float *dpred, const float *pred, const float *target, int64_t B,
                      int64_t C, float grad_scale, double *loss, char *why, size_t n) {
    if (emu_enter(dev, "mse", why, n)) return 1;
    emu_mse(dpred, pred, target, (size_t)B, (size_t)C, grad_scale, loss);
    return 0;
}
static int emu_xent_op(void *dev, float *dlogits, const float *logits, const int32_t *labels,
                       int64_t B, int64_t C, float grad_scale, double *loss, char *why,
                       size_t n) {
    if (emu_enter(dev, "xent", why, n)) return 1;
    emu_softmax_xent(dlogits, logits, labels, (size_t)B, (size_t)C, grad_scale, loss);
    return 0;
}
static int emu_store_scan_op(void *dev, mxp_dtype t, void *out, const float *src, size_t count,
                             float *amax, int64_t *nonfinite, char *why, size_t n) {
    if (emu_enter(dev, "store scan", why, n)) return 1;
    emu_store_scan(emu_fmt(t), out, src, count, amax, nonfinite);
    return 0;
}
/* mlp_kernels.cu k_mk_widen: grid-stride over mxp_mk_grid(n, 256, 65535). */
static int emu_widen_op(void *dev, mxp_dtype t, float *out, const void *src, size_t count,
                        char *why, size_t n) {
    if (emu_enter(dev, "widen", why, n)) return 1;
    if (count == 0) return 0;
    unsigned grid = mxp_mk_grid(count, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned th = 0; th < MXP_MK_THREADS; th++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), th);
            mxp_sb_widen_body(&ix, emu_fmt(t), out, src, count);
        }
    return 0;
}
static int emu_ctl_set(void *dev, const mxp_step_ctl *host, char *why, size_t n) {
    if (emu_enter(dev, "ctl set", why, n)) return 1;
    EMU_D->ctl = *host;
    return 0;
}
static mxp_step_ctl *emu_ctl_dev(void *dev) { return &EMU_D->ctl; }

/* kernels.cu k_grad_pass + k_grad_merge: 1024 blocks of 256, block tree,
 * partials merged by one thread in block order. */
static int emu_grad_pass_op(void *dev, float *g, size_t count, float near_at, char *why,
                            size_t n) {
    if (emu_enter(dev, "grad pass", why, n)) return 1;
    enum { GRID = 1024 };
    static mxp_gradpass_acc partials[GRID];
    mxp_gradpass_acc sh[MXP_MK_THREADS];
    const float inv = EMU_D->ctl.inv_scale;
    for (unsigned k = 0; k < GRID; k++) {
        unsigned bid = emu_bid(k, GRID);
        for (unsigned th = 0; th < MXP_MK_THREADS; th++) {
            mxp_mk_idx ix = emu_ix(GRID, bid, th);
            sh[th] = mxp_sb_grad_thread(&ix, g, count, inv, near_at);
        }
        for (unsigned s = MXP_MK_THREADS / 2; s > 0; s >>= 1)
            for (unsigned th = 0; th < s; th++) mxp_gradpass_acc_merge(&sh[th], &sh[th + s]);
        partials[bid] = sh[0];
    }
    mxp_gradpass_acc a = mxp_gradpass_acc_init();
    for (unsigned b = 0; b < GRID; b++) mxp_gradpass_acc_merge(&a, &partials[b]);
    EMU_D->ctl.stats = a;
    return 0;
}
static int emu_decide_op(void *dev, bool extra_inf, uint64_t n_params, char *why, size_t n) {
    if (emu_enter(dev, "decide", why, n)) return 1;
    mxp_sb_decide(&EMU_D->ctl, extra_inf, n_params);
    return 0;
}
static int emu_adamw_op(void *dev, float *master, uint16_t *work, bool work_bf16, bool sr,
                        const float *g, float *m, float *v, size_t count, char *why, size_t n) {
    if (emu_enter(dev, "adamw", why, n)) return 1;
    unsigned grid = mxp_mk_grid(count, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned th = 0; th < MXP_MK_THREADS; th++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), th);
            mxp_sb_adamw_body(&ix, &EMU_D->ctl, master, work, work_bf16, sr, g, m, v, count);
        }
    return 0;
}
static int emu_report(void *dev, mxp_step_ctl *host, char *why, size_t n) {
    if (emu_enter(dev, "report", why, n)) return 1;
    *host = EMU_D->ctl;
    EMU_D->d2h++;
    return 0;
}
static void *emu_aux_dev(void *dev, size_t *cap) {
    *cap = EMU_AUX_CAP;
    return EMU_D->aux;
}
/* device.cu mxp_cudab_report_aux: ONE copy of block + aux (here two
 * memcpys into the same layout, counted once). */
static int emu_report_aux(void *dev, void *host, size_t aux_bytes, char *why, size_t n) {
    if (emu_enter(dev, "report", why, n)) return 1;
    if (aux_bytes > EMU_AUX_CAP) return mxp_cudab_why(why, n, "emulated report: aux too large");
    memcpy(host, &EMU_D->ctl, sizeof EMU_D->ctl);
    memcpy((unsigned char *)host + MXP_DS_AUX_OFF, EMU_D->aux, aux_bytes);
    EMU_D->d2h++;
    return 0;
}
static int64_t emu_d2h_count(const void *dev) { return ((const emu_dev *)dev)->d2h; }

/* kernels.cu k_sgd: the same launch as k_adamw. */
static int emu_sgd_op(void *dev, float *master, uint16_t *work, bool work_bf16, bool sr,
                      const float *g, float *buf, size_t count, char *why, size_t n) {
    if (emu_enter(dev, "sgd", why, n)) return 1;
    unsigned grid = mxp_mk_grid(count, MXP_MK_THREADS, MXP_MK_GRID_CAP);
    for (unsigned k = 0; k < grid; k++)
        for (unsigned th = 0; th < MXP_MK_THREADS; th++) {
            mxp_mk_idx ix = emu_ix(grid, emu_bid(k, grid), th);
            mxp_sb_sgd_body(&ix, &EMU_D->ctl, master, work, work_bf16, sr, g, buf, count);
        }
    return 0;
}

/* kernels.cu k_loss_fold: one thread. */
static int emu_loss_fold_op(void *dev, double *loss, const double *slots, int k, int64_t batch,
                            char *why, size_t n) {
    if (emu_enter(dev, "loss fold", why, n)) return 1;
    *loss = mxp_sb_loss_fold(slots, k, batch);
    return 0;
}

/* No graph ops: plans on this table stay eager. No pinned memory either. */
static const mxp_ds_ops emu_ds_ops = {
    .name = "emulated",
    .alloc = emu_alloc,
    .free = emu_free,
    .upload = emu_upload,
    .download = emu_download,
    .sync = emu_sync,
    .zero = emu_zero,
    .lt_create = emu_lt_create,
    .lt_destroy = emu_lt_destroy,
    .lt_run = emu_lt_run,
    .bias_grad = emu_bias_grad_op,
    .act_fwd = emu_act_fwd_op,
    .act_bwd = emu_act_bwd_op,
    .ln_fwd = emu_ln_fwd_op,
    .ln_bwd = emu_ln_bwd_op,
    .mse = emu_mse_op,
    .xent = emu_xent_op,
    .store_scan = emu_store_scan_op,
    .widen = emu_widen_op,
    .ctl_set = emu_ctl_set,
    .ctl_dev = emu_ctl_dev,
    .grad_pass = emu_grad_pass_op,
    .decide = emu_decide_op,
    .adamw = emu_adamw_op,
    .report = emu_report,
    .d2h_count = emu_d2h_count,
    .sgd = emu_sgd_op,
    .loss_fold = emu_loss_fold_op,
    .aux_dev = emu_aux_dev,
    .report_aux = emu_report_aux,
};

#endif /* MIXPREC_TESTS_DSTEP_EMU_H */
