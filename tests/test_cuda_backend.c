/* tests/test_cuda_backend.c: the CUDA step kernels against the CPU
 * reference (label `gpu`). Exits 77 (skipped) in a build without CUDA or
 * when the runtime finds no device: on the CPU-only CI this test only proves
 * that the program compiles and links, and that the device query answers.
 *
 * On a GPU it checks, for sizes around the launch geometry:
 *   - grad pass: unscaled gradients bit-identical to the CPU reference;
 *     counts, absmax exact; sumsq within 1e-12 relative (order differs);
 *   - decide: skip flag, clip coefficient and the scaler state equal the
 *     host rule (mxp_scaler_rule_step) for clean and overflowing steps;
 *   - AdamW and SGD in every weight path (FP32 master, master + BF16 /
 *     FP16 work copy, pure BF16 / FP16 with RNE and SR) bit-identical to the
 *     CPU generic kernels, and a skipped step leaves weights and moments
 *     bit-identical;
 *   - exactly one device-to-host copy per step (mxp_cudab_d2h_count).
 * None of this has run yet (no GPU in the sessions so far; docs/gpu.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/device.h>

#include "testutil.h"

#ifndef MIXPREC_HAVE_CUDA
int main(void) {
    mxp_error err = {0};
    int n = -1;
    /* The OFF build still answers, with a reason, and never a device. */
    if (mxp_cuda_built() || mxp_cuda_device_count(&n, &err) != MXP_ERR_UNSUPPORTED || n != 0 ||
        strstr(err.msg, "no CUDA backend") == NULL) {
        fprintf(stderr, "test_cuda_backend: OFF build answered wrongly: %s\n", err.msg);
        return 1;
    }
    printf("test_cuda_backend: SKIP (built without CUDA)\n");
    return 77;
}
#else

#include "backend/cuda/cuda_backend.h"
#include "kernels/kernels.h"

static char why[512];

#define CU(expr)                                                                   \
    do {                                                                           \
        if ((expr) != 0) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, why); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static void *dev(mxp_cudab_ctx *c, size_t bytes) {
    void *p = NULL;
    CU(mxp_cudab_alloc(c, bytes, &p, why, sizeof why));
    return p;
}

static void fill(float *x, size_t n, uint64_t seed, float amp) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = mxp_rng_normal(&r) * amp;
}

static mxp_step_ctl ctl_for(float scale, int64_t opt_steps, uint64_t counter) {
    mxp_step_ctl k;
    memset(&k, 0, sizeof k);
    k.scale = scale;
    k.inv_scale = (float)(1.0 / (double)scale);
    k.clip_max = 0.5f;
    k.opt_steps = opt_steps;
    k.seed = 1234;
    k.sr_counter = counter;
    k.adamw = mxp_adamw_consts_make(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, opt_steps + 1);
    k.sgd = (mxp_sgd_consts){0.01f, 0.9f, 1e-4f, true, true, opt_steps + 1 <= 1};
    k.run_scaler_rule = true;
    k.rule = (mxp_scaler_rule){true, 2.0, 0.5, 2, 1, 1.17549435e-38f, 1e30};
    k.scaler = (mxp_scaler_rule_state){scale, 1, 1, 0, 0, 0};
    return k;
}

/* One step of grad pass + decide + AdamW on the device and on the host. */
static void step_case(mxp_cudab_ctx *c, size_t n, int path, bool poison) {
    const size_t fb = n * sizeof(float), hb = n * 2;
    float *g = test_xmalloc(fb), *w = test_xmalloc(fb), *m = test_xmalloc(fb),
          *v = test_xmalloc(fb), *out = test_xmalloc(fb);
    uint16_t *work = test_xmalloc(hb), *work_out = test_xmalloc(hb);
    fill(g, n, 7 + n, 300.0f);
    fill(w, n, 8 + n, 1.0f);
    fill(m, n, 9 + n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = m[i] * m[i];
    if (poison && n > 3) g[n / 2] = INFINITY;
    bool bf16 = path == 1 || path == 3 || path == 5, pure = path >= 3, sr = path >= 5;
    mxp_dtype wt = bf16 ? MXP_DTYPE_BF16 : MXP_DTYPE_F16;
    for (size_t i = 0; i < n; i++) work[i] = mxp_weight_store_bits(w[i], bf16, false, 0, 0);

    float *dg = dev(c, fb), *dw = dev(c, fb), *dm = dev(c, fb), *dv = dev(c, fb);
    uint16_t *dwork = dev(c, hb);
    CU(mxp_cudab_upload(c, dg, g, fb, why, sizeof why));
    CU(mxp_cudab_upload(c, dw, w, fb, why, sizeof why));
    CU(mxp_cudab_upload(c, dm, m, fb, why, sizeof why));
    CU(mxp_cudab_upload(c, dv, v, fb, why, sizeof why));
    CU(mxp_cudab_upload(c, dwork, work, hb, why, sizeof why));
    mxp_step_ctl ctl = ctl_for(65536.0f, 4, 1000), rep;
    CU(mxp_cudab_ctl_set(c, &ctl, why, sizeof why));
    int64_t d2h0 = mxp_cudab_d2h_count(c);
    CU(mxp_cudab_grad_pass(c, dg, n, 60000.0f, why, sizeof why));
    CU(mxp_cudab_decide(c, false, n, why, sizeof why));
    CU(mxp_cudab_adamw(c, pure ? NULL : dw, path == 0 ? NULL : dwork, bf16, sr, dg, dm, dv, n,
                       why, sizeof why));
    CU(mxp_cudab_report(c, &rep, why, sizeof why));
    CHECK(mxp_cudab_d2h_count(c) - d2h0 == 1);

    /* host reference */
    const mxp_kernels *k = mxp_kernels_generic();
    mxp_grad_stats gs;
    k->unscale_stats(g, n, ctl.inv_scale, 60000.0f, &gs);
    bool skip = gs.nonfinite > 0;
    CHECK(rep.skip == skip && rep.stats.nonfinite == gs.nonfinite && rep.stats.zeros == gs.zeros);
    CHECK(rep.stats.near_overflow == gs.near_overflow && rep.stats.absmax == gs.absmax);
    CHECK_CLOSE(rep.stats.sumsq, gs.sumsq, 0, 1e-12);
    mxp_scaler_rule_state hs = ctl.scaler;
    mxp_scaler_rule_step(&ctl.rule, &hs, skip);
    CHECK(rep.scaler.scale == hs.scale && rep.scaler.growth_tracker == hs.growth_tracker);
    CHECK(rep.opt_steps == ctl.opt_steps + (skip ? 0 : 1));
    float *gd = test_xmalloc(fb);
    CU(mxp_cudab_download(c, gd, dg, fb, why, sizeof why));
    CU(mxp_cudab_sync(c, why, sizeof why));
    CHECK(memcmp(gd, g, fb) == 0 || skip);
    if (!skip) {
        double norm = sqrt(rep.stats.sumsq);
        if (norm > ctl.clip_max) k->scale(g, (float)(ctl.clip_max / (norm + 1e-6)), n);
        mxp_weights hw = {pure ? NULL : w, path == 0 ? NULL : work, wt, sr, ctl.seed,
                          ctl.sr_counter};
        mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
        k->adamw(&hw, g, m, v, n, &h, ctl.opt_steps + 1);
    }
    CU(mxp_cudab_download(c, out, pure ? (void *)dwork : (void *)dw, pure ? hb : fb, why,
                          sizeof why));
    CU(mxp_cudab_download(c, work_out, dwork, hb, why, sizeof why));
    CU(mxp_cudab_sync(c, why, sizeof why));
    if (!pure) CHECK_MSG(memcmp(out, w, fb) == 0, "adamw n=%zu path %d: master differs", n, path);
    CHECK_MSG(memcmp(work_out, work, hb) == 0, "adamw n=%zu path %d: work copy differs", n, path);
    mxp_cudab_free(c, dg);
    mxp_cudab_free(c, dw);
    mxp_cudab_free(c, dm);
    mxp_cudab_free(c, dv);
    mxp_cudab_free(c, dwork);
    free(g), free(w), free(m), free(v), free(out), free(work), free(work_out), free(gd);
}

int main(void) {
    mxp_error err = {0};
    int n = 0;
    if (mxp_cuda_device_count(&n, &err) != MXP_OK) {
        printf("test_cuda_backend: SKIP (%s)\n", err.msg);
        return 77;
    }
    mxp_gpu_info info;
    CHECK_OK(mxp_cuda_device_info(0, &info, &err), &err);
    printf("device 0: %s, cc %d.%d, %zu MiB\n", info.name, info.cc_major, info.cc_minor,
           info.total_mem >> 20);
    mxp_cudab_ctx *c = NULL;
    CU(mxp_cudab_ctx_create(0, &c, why, sizeof why));
    const size_t sizes[] = {1, 255, 256, 257, 4099, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int path = 0; path < 7; path++)
            for (int poison = 0; poison < 2; poison++) step_case(c, sizes[s], path, poison);
    mxp_cudab_ctx_destroy(c);
    return test_finish("test_cuda_backend");
}
#endif
