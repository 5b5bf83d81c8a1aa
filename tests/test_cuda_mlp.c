/* tests/test_cuda_mlp.c: the MLP kernels (backend/cuda/mlp_kernels.cu) and
 * the linear layer's cuBLASLt GEMMs (lt_gemm.cu) on a GPU (label `gpu`).
 * Exits 77 (skipped) in a build without CUDA or without a device. NOT YET
 * RUN: written for the device kit (scripts/gpu-check.sh runs it, and
 * racecheck over it).
 * Oracles:
 *   - the host launch emulator (tests/cuda_emu.h), which runs the same
 *     MXP_HD bodies in the same tree and block order: bit for bit for every
 *     kernel without libm (bias add/grad, ReLU, tanh bwd, layernorm fwd/bwd,
 *     MSE dpred and loss, store + scan), close for GELU, tanh fwd and the
 *     softmax cross-entropy (CUDA's erff/expf/logf/tanhf: 1e-6 relative);
 *     tests/test_mlp_emu.c ties the emulator to the CPU table and to
 *     long-double oracles, so this closes the chain device = emulator = CPU;
 *   - the GEMMs against a double-precision host product of the same
 *     (FP32, or BF16-rounded) operands, relative to sum |a||b|.
 * Sizes 1, 255, 256, 257, past the 65,535-block cap (elements and rows).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/device.h>

#include "testutil.h"

#ifndef MIXPREC_HAVE_CUDA
int main(void) {
    printf("test_cuda_mlp: SKIP (built without CUDA)\n");
    return 77;
}
#else

#include "backend/cuda/cuda_backend.h"
#include "cuda_emu.h"

static char why[512];
static mxp_cudab_ctx *ctx;

#define CU(expr)                                                                         \
    do {                                                                                 \
        if ((expr) != 0) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, why); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* A device copy of n bytes of host (NULL: uninitialised). */
static void *up(const void *host, size_t bytes) {
    void *p = NULL;
    CU(mxp_cudab_alloc(ctx, bytes, &p, why, sizeof why));
    if (host) CU(mxp_cudab_upload(ctx, p, host, bytes, why, sizeof why));
    return p;
}

static void down(void *host, const void *d, size_t bytes) {
    CU(mxp_cudab_download(ctx, host, d, bytes, why, sizeof why));
    CU(mxp_cudab_sync(ctx, why, sizeof why));
}

static uint64_t rs = 88172645463325252ull;
static float frand(float lo, float hi) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return lo + (hi - lo) * (float)((double)(rs >> 11) * 0x1p-53);
}
static float *rnd(size_t n, float lo, float hi) {
    float *x = test_xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) x[i] = frand(lo, hi);
    return x;
}

static size_t bits_diff(const void *a, const void *b, size_t n, size_t es) {
    size_t bad = 0;
    const char *p = a, *q = b;
    for (size_t i = 0; i < n; i++) bad += memcmp(p + i * es, q + i * es, es) != 0;
    return bad;
}

static size_t close_diff(const float *a, const float *b, size_t n, double rtol, double atol) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) continue;
        if (!(fabs((double)a[i] - (double)b[i]) <= atol + rtol * fabs((double)b[i]))) bad++;
    }
    return bad;
}

static void test_elementwise(size_t B, size_t C) {
    size_t n = B * C;
    float *y = rnd(n, -6, 6), *bias = rnd(C, -1, 1), *dy = rnd(n, -2, 2);
    if (n > 4) y[1] = NAN, y[2] = INFINITY, y[3] = -0.0f;
    float *dY = up(y, n * 4), *dB = up(bias, C * 4), *dDY = up(dy, n * 4), *dO = up(NULL, n * 4);
    float *got = test_xmalloc(n * 4), *ref = test_xmalloc(n * 4);
    /* bias add */
    CU(mxp_cudab_bias_add(ctx, dY, dB, (int64_t)B, (int64_t)C, why, sizeof why));
    down(got, dY, n * 4);
    memcpy(ref, y, n * 4);
    emu_bias_add(ref, bias, B, C);
    CHECK_MSG(bits_diff(got, ref, n, 4) == 0, "bias add %zux%zu", B, C);
    /* bias grad "+=" */
    CU(mxp_cudab_bias_grad(ctx, dB, dDY, (int64_t)B, (int64_t)C, why, sizeof why));
    float *gb = test_xmalloc(C * 4), *rb = test_xmalloc(C * 4);
    down(gb, dB, C * 4);
    memcpy(rb, bias, C * 4);
    emu_bias_grad(rb, dy, B, C);
    CHECK_MSG(bits_diff(gb, rb, C, 4) == 0, "bias grad %zux%zu", B, C);
    /* activations of the biased y, forward then backward with s = the
     * input (relu, gelu) or the device's own output (tanh) */
    float *yb = test_xmalloc(n * 4), *gd = test_xmalloc(n * 4);
    memcpy(yb, y, n * 4);
    emu_bias_add(yb, bias, B, C);
    float *dDx = up(NULL, n * 4);
    for (int act = 1; act <= 3; act++) {
        CU(mxp_cudab_act_fwd(ctx, act, dO, dY, n, why, sizeof why));
        down(got, dO, n * 4);
        emu_act_fwd(act, ref, yb, n);
        size_t bad = act == 1 ? bits_diff(got, ref, n, 4) : close_diff(got, ref, n, 1e-6, 1e-7);
        CHECK_MSG(bad == 0, "act %d fwd %zu: %zu differ", act, n, bad);
        CU(mxp_cudab_act_bwd(ctx, act, dDx, dDY, act == 3 ? dO : dY, n, why, sizeof why));
        down(gd, dDx, n * 4);
        emu_act_bwd(act, ref, dy, act == 3 ? got : yb, n);
        bad = act == 2 ? close_diff(gd, ref, n, 1e-6, 1e-7) : bits_diff(gd, ref, n, 4);
        CHECK_MSG(bad == 0, "act %d bwd %zu: %zu differ", act, n, bad);
    }
    mxp_cudab_free(ctx, dDx);
    free(gd);
    /* store + scan of the biased y into F32 / BF16 / FP16 */
    float *slots = up(NULL, 16);
    for (int f = 0; f < 3; f++) {
        mxp_dtype t = f == 0 ? MXP_DTYPE_F32 : f == 1 ? MXP_DTYPE_BF16 : MXP_DTYPE_F16;
        size_t es = f == 0 ? 4 : 2;
        void *dS = up(NULL, n * es), *hs = test_xmalloc(n * es), *rsb = test_xmalloc(n * es);
        CU(mxp_cudab_store_scan(ctx, t, dS, dY, n, slots, (int64_t *)(slots + 2), why, sizeof why));
        down(hs, dS, n * es);
        float sl[4];
        down(sl, slots, 16);
        float am;
        int64_t nf, gnf;
        emu_store_scan(f, rsb, yb, n, &am, &nf);
        memcpy(&gnf, sl + 2, 8);
        CHECK_MSG(bits_diff(hs, rsb, n, es) == 0 && test_f32_bits(sl[0]) == test_f32_bits(am) &&
                      gnf == nf,
                  "store+scan fmt %d n %zu", f, n);
        mxp_cudab_free(ctx, dS);
        free(hs), free(rsb);
    }
    mxp_cudab_free(ctx, slots);
    mxp_cudab_free(ctx, dY), mxp_cudab_free(ctx, dB), mxp_cudab_free(ctx, dDY), mxp_cudab_free(ctx, dO);
    free(y), free(bias), free(dy), free(got), free(ref), free(gb), free(rb), free(yb);
}

static void test_rows(size_t B, size_t C) {
    size_t n = B * C;
    float *x = rnd(n, 2, 6), *g = rnd(C, 0.5f, 1.5f), *b = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
    float *dX = up(x, n * 4), *dG = up(g, C * 4), *dBt = up(b, C * 4), *dDY = up(dy, n * 4);
    float *dYo = up(NULL, n * 4), *dM = up(NULL, B * 4), *dR = up(NULL, B * 4);
    CU(mxp_cudab_layernorm_fwd(ctx, dYo, dM, dR, dX, dG, dBt, (int64_t)B, (int64_t)C, 1e-5f, why,
                               sizeof why));
    float *y = test_xmalloc(n * 4), *m = test_xmalloc(B * 4), *r = test_xmalloc(B * 4);
    float *ye = test_xmalloc(n * 4), *me = test_xmalloc(B * 4), *re = test_xmalloc(B * 4);
    down(y, dYo, n * 4), down(m, dM, B * 4), down(r, dR, B * 4);
    emu_layernorm_fwd(ye, me, re, x, g, b, B, C, 1e-5f);
    CHECK_MSG(bits_diff(y, ye, n, 4) == 0 && bits_diff(m, me, B, 4) == 0 &&
                  bits_diff(r, re, B, 4) == 0,
              "layernorm fwd %zux%zu", B, C);
    /* backward on the emulator's statistics (equal bits if the above held) */
    float *dGg = up(g, C * 4), *dBb = up(b, C * 4), *dDx = up(NULL, n * 4);
    CU(mxp_cudab_upload(ctx, dM, me, B * 4, why, sizeof why));
    CU(mxp_cudab_upload(ctx, dR, re, B * 4, why, sizeof why));
    CU(mxp_cudab_layernorm_bwd(ctx, dDx, dGg, dBb, dDY, dX, dM, dR, dG, (int64_t)B, (int64_t)C,
                               why, sizeof why));
    float *dx = test_xmalloc(n * 4), *dg = test_xmalloc(C * 4), *db = test_xmalloc(C * 4);
    float *dxe = test_xmalloc(n * 4), *dge = test_xmalloc(C * 4), *dbe = test_xmalloc(C * 4);
    down(dx, dDx, n * 4), down(dg, dGg, C * 4), down(db, dBb, C * 4);
    memcpy(dge, g, C * 4), memcpy(dbe, b, C * 4);
    emu_layernorm_bwd(dxe, dge, dbe, dy, x, me, re, g, B, C);
    CHECK_MSG(bits_diff(dx, dxe, n, 4) == 0 && bits_diff(dg, dge, C, 4) == 0 &&
                  bits_diff(db, dbe, C, 4) == 0,
              "layernorm bwd %zux%zu", B, C);
    /* MSE against target = dy */
    double *dL = up(NULL, 8), l, le;
    CU(mxp_cudab_mse(ctx, dDx, dX, dDY, (int64_t)B, (int64_t)C, 1024.0f, dL, why, sizeof why));
    down(dx, dDx, n * 4), down(&l, dL, 8);
    emu_mse(dxe, x, dy, B, C, 1024.0f, &le);
    CHECK_MSG(bits_diff(dx, dxe, n, 4) == 0 && l == le, "mse %zux%zu", B, C);
    /* softmax cross-entropy (libm: close) */
    int32_t *lab = test_xmalloc(B * 4);
    for (size_t i = 0; i < B; i++) lab[i] = (int32_t)(i * 7 % C);
    if (B > 2) lab[1] = (int32_t)C; /* out of range: NaN loss */
    int32_t *dLab = up(lab, B * 4);
    CU(mxp_cudab_softmax_xent(ctx, dDx, dX, dLab, (int64_t)B, (int64_t)C, 65536.0f, dL, why,
                              sizeof why));
    down(dx, dDx, n * 4), down(&l, dL, 8);
    emu_softmax_xent(dxe, x, lab, B, C, 65536.0f, &le);
    CHECK_MSG(close_diff(dx, dxe, n, 1e-5, 1e-6 * 65536.0 / (double)B) == 0 &&
                  (isnan(le) ? isnan(l) : fabs(l - le) <= 1e-5 * fabs(le) + 1e-6),
              "softmax xent %zux%zu: loss %.9g vs %.9g", B, C, l, le);
    void *ptrs[] = {dX, dG, dBt, dDY, dYo, dM, dR, dGg, dBb, dDx, dL, dLab};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) mxp_cudab_free(ctx, ptrs[i]);
    free(x), free(g), free(b), free(dy), free(y), free(m), free(r), free(ye), free(me), free(re);
    free(dx), free(dg), free(db), free(dxe), free(dge), free(dbe), free(lab);
}

/* The three linear GEMMs through cuBLASLt vs a double host product. */
static void test_gemm(int64_t B, int64_t I, int64_t O, mxp_dtype t) {
    size_t es = t == MXP_DTYPE_F32 ? 4 : 2;
    size_t len[3] = {(size_t)(B * I), (size_t)(O * I), (size_t)(B * O)};
    float *h[3];
    void *hv[3], *dv[3];
    for (int i = 0; i < 3; i++) {
        h[i] = rnd(len[i], -1, 1);
        hv[i] = test_xmalloc(len[i] * es);
        for (size_t j = 0; j < len[i]; j++) { /* the operand in t, and its exact FP32 value */
            if (t == MXP_DTYPE_BF16) {
                ((uint16_t *)hv[i])[j] = mxp_nr_f32_to_bf16(h[i][j]);
                h[i][j] = mxp_nr_bf16_to_f32(((uint16_t *)hv[i])[j]);
            } else if (t == MXP_DTYPE_F16) {
                ((uint16_t *)hv[i])[j] = mxp_nr_f32_to_fp16(h[i][j]);
                h[i][j] = mxp_nr_fp16_to_f32(((uint16_t *)hv[i])[j]);
            } else {
                ((float *)hv[i])[j] = h[i][j];
            }
        }
        dv[i] = up(hv[i], len[i] * es);
    }
    float *bias = rnd((size_t)O, -1, 1), *dBias = up(bias, (size_t)O * 4);
    for (int w = 0; w < 3; w++) {
        mxp_lt_desc d;
        CU(mxp_lt_linear((mxp_lt_gemm)w, B, I, O, true, true, &d, why, sizeof why));
        mxp_cudab_lt_plan *p = NULL;
        CU(mxp_cudab_lt_plan_create(ctx, &d, t, &p, why, sizeof why));
        size_t nd = w == 0 ? len[2] : w == 1 ? len[0] : len[1];
        float *init = rnd(nd, -1, 1), *out = test_xmalloc(nd * 4);
        float *dD = up(init, nd * 4);
        CU(mxp_cudab_lt_run(ctx, p, dv[d.a_op], dv[d.b_op], dD, dBias, why, sizeof why));
        down(out, dD, nd * 4);
        const float *X = h[0], *W = h[1], *dY = h[2];
        size_t bad = 0;
        int64_t R = w == 1 ? B : w == 0 ? B : O, Cc = w == 0 ? O : I, K = w == 0 ? I : w == 1 ? O : B;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < Cc; c++) {
                double s = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double a = w == 0 ? X[r * I + k] : w == 1 ? dY[r * O + k] : dY[k * O + r];
                    double bb = w == 0 ? W[c * I + k] : w == 1 ? W[k * I + c] : X[k * I + c];
                    s += a * bb, mag += fabs(a * bb);
                }
                if (w == 0) s += bias[c], mag += fabs(bias[c]);
                if (w == 2) s += init[r * Cc + c], mag += fabs(init[r * Cc + c]);
                /* any summation order: |err| <= (K + 2) u sum|a b|, u = 2^-24 */
                if (fabs(out[r * Cc + c] - s) > 2.0 * (double)(K + 2) * 0x1p-24 * mag) bad++;
            }
        CHECK_MSG(bad == 0, "cuBLASLt %s B%lld I%lld O%lld dtype %d: %zu off",
                  mxp_lt_gemm_name((mxp_lt_gemm)w),
                  (long long)B, (long long)I, (long long)O, (int)t, bad);
        mxp_cudab_lt_plan_destroy(p);
        mxp_cudab_free(ctx, dD);
        free(init), free(out);
    }
    for (int i = 0; i < 3; i++) mxp_cudab_free(ctx, dv[i]), free(h[i]), free(hv[i]);
    mxp_cudab_free(ctx, dBias);
    free(bias);
}

int main(void) {
    mxp_error err = {0};
    int nd = 0;
    if (mxp_cuda_device_count(&nd, &err) != MXP_OK) {
        printf("test_cuda_mlp: SKIP (%s)\n", err.msg);
        return 77;
    }
    CU(mxp_cudab_ctx_create(0, &ctx, why, sizeof why));
    /* MIXPREC_TEST_QUICK (gpu-check.sh sets it under compute-sanitizer):
     * the last, largest case of each list is left out */
    const size_t q = test_quick() ? 1 : 0;
    const size_t el[][2] = {{1, 1}, {1, 255}, {1, 256}, {1, 257}, {3, 257}, {65537, 257}};
    for (size_t i = 0; i < sizeof el / sizeof el[0] - q; i++) test_elementwise(el[i][0], el[i][1]);
    const size_t rows[][2] = {{1, 1}, {3, 255}, {2, 256}, {5, 257}, {1030, 1000}, {65543, 5}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] - q; i++)
        test_rows(rows[i][0], rows[i][1]);
    const int64_t gs[][3] = {{1, 1, 1}, {3, 5, 7}, {37, 19, 23}, {256, 512, 512}};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0] - q; i++)
        for (int t = 0; t < 3; t++)
            test_gemm(gs[i][0], gs[i][1], gs[i][2],
                      t == 0 ? MXP_DTYPE_F32 : t == 1 ? MXP_DTYPE_BF16 : MXP_DTYPE_F16);
    mxp_cudab_ctx_destroy(ctx);
    return test_finish("test_cuda_mlp");
}
#endif
