/* tests/dstep_emu_fp8.h: the FP8 ops of the emulated device step table
 * (test helper, header-only, over tests/dstep_emu.h): emu_fp8_table()
 * is emu_ds_ops plus
 *   bias_add   the MXP_HD bias-add body through the launch emulator;
 *   f8_quant   the project's FP8 quantise (mxp_fp8_quantize: the kernel
 *              table's fp8_quantize, the CPU's own), its FP32 values then
 *              encoded as 1-byte E4M3/E5M2 codes with num's conversions
 *              (exact: the values are representable), into q and/or the
 *              transpose qt; the amax is the kernel's;
 *   lt8_*      the column-major executor of an mxp_lt_desc on FP8 codes
 *              (decoded exactly), summed in double, rounded once to FP32,
 *              times a_scale * b_scale (FP32, read from "device" memory
 *              at run time), plus beta D;
 *   f8_update  backend/numerics/fp8_scale.h's slot update over every
 *              slot, then pos advanced (the CUDA kernel's rule).
 * The GEMM sums in double and rounds once, the CPU's GEMM in FP32 blocks:
 * the same difference as the BF16 GEMMs of dstep_emu.h.
 */
#ifndef MIXPREC_TESTS_DSTEP_EMU_FP8_H
#define MIXPREC_TESTS_DSTEP_EMU_FP8_H

#include <mixprec/amp.h>

#include "backend/numerics/fp8_scale.h"
#include "dstep_emu.h"

static int emu_bias_add_op(void *dev, float *y, const float *bias, int64_t B, int64_t C,
                           char *why, size_t n) {
    if (emu_enter(dev, "bias add", why, n)) return 1;
    emu_bias_add(y, bias, (size_t)B, (size_t)C);
    return 0;
}

static uint8_t emu_f8_code(mxp_dtype fmt, float v) {
    return fmt == MXP_DTYPE_F8_E4M3 ? mxp_f32_to_fp8_e4m3(v, MXP_FP8_SATURATE).bits
                                    : mxp_f32_to_fp8_e5m2(v).bits;
}
static double emu_f8_val(mxp_dtype fmt, uint8_t c) {
    return fmt == MXP_DTYPE_F8_E4M3 ? (double)mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){c})
                                    : (double)mxp_fp8_e5m2_to_f32((mxp_fp8_e5m2){c});
}

static int emu_f8_quant_op(void *dev, mxp_dtype fmt, uint8_t *q, uint8_t *qt, const float *src,
                           int64_t rows, int64_t cols, const float *scale, float *amax,
                           char *why, size_t n) {
    if (emu_enter(dev, "fp8 quantise", why, n)) return 1;
    if (fmt != MXP_DTYPE_F8_E4M3 && fmt != MXP_DTYPE_F8_E5M2)
        return mxp_cudab_why(why, n, "emulated fp8 quantise: format %d", (int)fmt);
    const size_t cnt = (size_t)rows * (size_t)cols;
    float *v = malloc(cnt * sizeof *v + 1);
    if (!v) return mxp_cudab_why(why, n, "emulated fp8 quantise: out of memory");
    const float a = mxp_fp8_quantize(fmt, v, src, cnt, *scale);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const uint8_t code = emu_f8_code(fmt, v[r * cols + c]);
            if (q) q[r * cols + c] = code;
            if (qt) qt[c * rows + r] = code;
        }
    free(v);
    if (amax) *amax = a;
    return 0;
}

typedef struct emu_lt8 {
    mxp_lt_desc d;
    mxp_dtype a, b;
} emu_lt8;

static int emu_lt8_create(void *dev, const mxp_lt_desc *d, mxp_dtype a, mxp_dtype b,
                          void **plan, char *why, size_t n) {
    if (emu_enter(dev, "lt8 plan", why, n)) return 1;
    const bool fa = a == MXP_DTYPE_F8_E4M3 || a == MXP_DTYPE_F8_E5M2;
    const bool fb = b == MXP_DTYPE_F8_E4M3 || b == MXP_DTYPE_F8_E5M2;
    if (!fa || !fb || (a == MXP_DTYPE_F8_E5M2 && b == MXP_DTYPE_F8_E5M2))
        return mxp_cudab_why(why, n, "emulated cuBLASLt FP8: types %d x %d", (int)a, (int)b);
    /* cuBLASLt's FP8 rules: TN, no bias epilogue here, dimensions / 16 */
    if (!d->trans_a || d->trans_b || d->bias || d->m % 16 || d->n % 16 || d->k % 16)
        return mxp_cudab_why(why, n, "emulated cuBLASLt FP8: not TN or not /16 (m %lld n %lld "
                                     "k %lld)",
                             (long long)d->m, (long long)d->n, (long long)d->k);
    emu_lt8 *p = calloc(1, sizeof *p);
    if (!p) return mxp_cudab_why(why, n, "emulated cuBLASLt: out of memory");
    p->d = *d;
    p->a = a;
    p->b = b;
    *plan = p;
    return 0;
}

static int emu_lt8_run(void *dev, void *plan, const void *A, const void *B, float *D,
                       const float *a_scale, const float *b_scale, char *why, size_t n) {
    if (emu_enter(dev, "lt8 run", why, n)) return 1;
    const emu_lt8 *p = plan;
    const mxp_lt_desc *d = &p->d;
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)D) & 255u)
        return mxp_cudab_why(why, n, "emulated cuBLASLt: an operand is not 256-byte aligned");
    const uint8_t *a8 = A, *b8 = B;
    const float al = a_scale[0] * b_scale[0];
    for (int64_t j = 0; j < d->n; j++)
        for (int64_t i = 0; i < d->m; i++) {
            double s = 0;
            for (int64_t q = 0; q < d->k; q++) {
                size_t ia = (size_t)(d->trans_a ? q + i * d->lda : i + q * d->lda);
                size_t ib = (size_t)(d->trans_b ? j + q * d->ldb : q + j * d->ldb);
                s += emu_f8_val(p->a, a8[ia]) * emu_f8_val(p->b, b8[ib]);
            }
            float *o = &D[i + j * d->ldc];
            float v = al * (float)s;
            if (d->beta != 0.0f) v = v + d->beta * *o;
            *o = v;
        }
    return 0;
}

static int emu_f8_update_op(void *dev, void *st, int n_slots, const mxp_ds_fp8_cfg *cfg,
                            char *why, size_t n) {
    if (emu_enter(dev, "fp8 update", why, n)) return 1;
    mxp_ds_f8_state *h = st;
    float *v = mxp_ds_f8_vals(st);
    const int H = h->H;
    for (int i = 0; i < n_slots; i++)
        mxp_f8_update_slot(v + 3 * n_slots + (size_t)i * (size_t)H, H, h->pos,
                           &v[2 * n_slots + i], &v[i], &v[n_slots + i], (int)cfg->amax_algo,
                           i % 3 == 2 ? 57344.0 : 448.0, cfg->margin);
    h->pos = (h->pos + 1) % H;
    h->passes++;
    return 0;
}

static mxp_ds_ops emu_fp8_table(void) {
    mxp_ds_ops t = emu_ds_ops;
    t.name = "emulated (fp8)";
    t.bias_add = emu_bias_add_op;
    t.f8_quant = emu_f8_quant_op;
    t.lt8_create = emu_lt8_create;
    t.lt8_run = emu_lt8_run;
    t.f8_update = emu_f8_update_op;
    return t;
}

#endif /* MIXPREC_TESTS_DSTEP_EMU_FP8_H */
