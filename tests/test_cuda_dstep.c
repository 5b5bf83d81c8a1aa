/* tests/test_cuda_dstep.c: the device MLP training step (backend/cuda/dstep.h)
 * on the GPU (the CUDA ops table, dstep_cuda.c) against the same plan on
 * the emulated device (tests/dstep_emu.h, itself held to the CPU trainer by
 * tests/test_dstep_emu.c): same spec, initial weights and batches, N steps,
 * in fp32, mixed_bf16 and mixed_fp16 (dynamic loss scale, growth every 3
 * clean steps), on the world-model shape 4-256x3-4 (linear, layernorm,
 * GELU; MSE; B 32), a classifier 12-64x2-10 (ReLU; softmax xent; B 32), a
 * tanh regressor 6-48x2-3 (MSE; B 16), the world shape as 3 micro-batches
 * (11/11/10) and the classifier with SGD (momentum 0.9, nesterov); step 5
 * has a NaN in its input.
 * Checked per step: skip decision, loss-scale sequence and the first
 * non-finite site (the report's scans; the NaN step's is layer 0's output)
 * identical, ONE
 * device-to-host copy on the CUDA side (the report), loss close; after the
 * last step master, m and v close.
 * Tolerances: those of test_dstep_emu.c (first-step loss 1e-6 relative in
 * fp32, 1e-4 in the mixed modes; later losses 2e-3; master 4 lr absolute;
 * m, v 2% of their largest element), for the same reasons: cuBLASLt sums
 * in FP32 in its own order (the emulator in double, rounded once), and the
 * device's erff/expf/logf/tanhf are within 2 ulp of glibc's, which can
 * flip the rounding of a stored BF16/FP16 activation.
 * CUDA Graphs (graphed_vs_eager): the same plan eager and with
 * spec.graphs on the CUDA table, world-m3 and clf-sgd in every mode: bit
 * for bit identical every step and at the end, one device-to-host copy per
 * step on both, graphed from step 2, re-captured exactly on a new loss
 * scale (the host twin of this check: tests/test_dstep_graph.c).
 * Then timing lines (not asserted): the 72-512x3-65 GELU MLP, batch 256,
 * each mode eager and graphed, the median of CUDA-event step times (the
 * whole step: uploads, kernels or graph launch, the report's copy and
 * sync) after warm-up.
 * Exits 77 (skipped) in a build without CUDA or without a device.
 * MIXPREC_TEST_QUICK (gpu-check.sh under compute-sanitizer): the world and
 * classifier shapes only, 6 steps, graphed vs eager on world-m3 in
 * mixed_fp16 only, short timing runs (graphed: mixed_bf16 only).
 * NOT YET RUN on a GPU (docs/gpu.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/device.h>

#include "backend/cuda/dstep.h"
#include "testutil.h"

#ifndef MIXPREC_HAVE_CUDA
int main(void) {
    printf("test_cuda_dstep: SKIP (built without CUDA)\n");
    return 77;
}
#else

#include "backend/cuda/cuda_backend.h"
#include "dstep_emu.h"
#include "dstep_harness.h"

static char why[512];
static mxp_cudab_ctx *ctx;
/* The side under test: the CUDA table on ctx, or (MIXPREC_DSTEP_SELF=1 on a
 * machine without a device: a check of this program itself) a second
 * emulated device, which must agree exactly. */
static const mxp_ds_ops *dut_ops;
static void *dut_dev;

#define CU(expr)                                                                         \
    do {                                                                                 \
        if ((expr) != 0) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, why); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

enum { NAN_STEP = 5 };

static uint32_t rs = 99u;
static float frand(void) { return ds_frand(&rs); }

/* PyTorch-like initial weights: U(-1/sqrt(in), 1/sqrt(in)); LN 1 and 0. */
static float *init_params(const mxp_ds_spec *s, const mxp_ds_plan *p) {
    size_t P = mxp_ds_num_params(p);
    float *w = test_xmalloc(P * sizeof(float));
    int64_t width = s->in_dim;
    for (int l = 0; l < s->n_layers; l++) {
        int64_t o0 = mxp_ds_param_offset(p, l, 0), o1 = mxp_ds_param_offset(p, l, 1);
        if (s->layers[l].kind == MXP_DS_LINEAR) {
            float k = 1.0f / sqrtf((float)width);
            for (int64_t i = o0; i < o1 + s->layers[l].units; i++) w[i] = k * frand();
            width = s->layers[l].units;
        } else if (s->layers[l].kind == MXP_DS_LAYERNORM) {
            for (int64_t i = 0; i < width; i++) {
                w[o0 + i] = 1.0f;
                w[o1 + i] = 0.0f;
            }
        }
    }
    return w;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static void compare(const ds_shape *sh, mxp_dtype lowp, int nsteps) {
    const char *mode = ds_mode_name(lowp);
    mxp_ds_spec s = ds_spec_of(sh, lowp);
    emu_dev edev;
    memset(&edev, 0, sizeof edev);
    mxp_ds_plan *pe = NULL, *pc = NULL;
    CU(mxp_ds_plan_create(&s, &emu_ds_ops, &edev, &pe, why, sizeof why));
    CU(mxp_ds_plan_create(&s, dut_ops, dut_dev, &pc, why, sizeof why));
    const size_t P = mxp_ds_num_params(pe);
    float *w0 = init_params(&s, pe);
    CU(mxp_ds_set_params(pe, w0, why, sizeof why));
    CU(mxp_ds_set_params(pc, w0, why, sizeof why));
    const int64_t B = sh->batch, ydim = sh->loss == MXP_DS_XENT ? 1 : sh->out;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * ydim) * 4);
    int32_t *lab = test_xmalloc((size_t)B * 4);
    const double tol1 = lowp == MXP_DTYPE_F32 ? 1e-6 : 1e-4;
    for (int st = 1; st <= nsteps; st++) {
        ds_fill_batch(sh, &rs, x, y, lab);
        if (st == NAN_STEP) x[3] = NAN;
        mxp_ds_result re, rc;
        CU(mxp_ds_step(pe, x, y, lab, &re, why, sizeof why));
        CU(mxp_ds_step(pc, x, y, lab, &rc, why, sizeof why));
        double r = rel(rc.loss, re.loss);
        printf("  %-10s %-10s step %d: loss emu %.9g cuda %.9g (rel %.2e) skip %d/%d scale "
               "%g->%g / %g->%g d2h %lld\n",
               sh->name, mode, st, re.loss, rc.loss, r, re.skipped, rc.skipped, re.scale,
               re.next_scale, rc.scale, rc.next_scale, (long long)rc.d2h);
        CHECK_MSG(rc.d2h == 1, "%s %s step %d: %lld device-to-host copies", sh->name, mode, st,
                  (long long)rc.d2h);
        CHECK_MSG(rc.skipped == re.skipped && rc.scale == re.scale &&
                      rc.next_scale == re.next_scale,
                  "%s %s step %d: skip or scale differs", sh->name, mode, st);
        /* provenance from the report's scans: the same site on both */
        CHECK_MSG(rc.scanned && re.scanned && rc.site.found == re.site.found &&
                      rc.site.backward == re.site.backward && rc.site.layer == re.site.layer &&
                      rc.site.micro == re.site.micro,
                  "%s %s step %d: site %d/%d/%d cuda, %d/%d/%d emulated", sh->name, mode, st,
                  rc.site.found, rc.site.backward, rc.site.layer, re.site.found,
                  re.site.backward, re.site.layer);
        if (st == NAN_STEP)
            CHECK_MSG(rc.site.found && !rc.site.backward && rc.site.layer == 0,
                      "%s %s: the NaN input's site is not layer 0's output", sh->name, mode);
        if (re.skipped)
            CHECK(!isfinite(rc.loss) && st == NAN_STEP);
        else
            CHECK_MSG(r <= (st == 1 ? tol1 : 2e-3), "%s %s step %d: loss", sh->name, mode, st);
    }
    float *a = test_xmalloc(P * 4), *c = test_xmalloc(P * 4);
    const mxp_ds_slab slabs[3] = {MXP_DS_MASTER, MXP_DS_M, MXP_DS_V};
    const char *names[3] = {"master", "m", "v"};
    for (int k = 0; k < (s.optim == MXP_DS_SGD ? 2 : 3); k++) {
        CU(mxp_ds_get(pc, slabs[k], a, why, sizeof why));
        CU(mxp_ds_get(pe, slabs[k], c, why, sizeof why));
        double d = 0, cmax = 0;
        for (size_t i = 0; i < P; i++) {
            double e = fabs((double)a[i] - (double)c[i]);
            if (!(e <= d)) d = e;
            if (fabs((double)c[i]) > cmax) cmax = fabs((double)c[i]);
        }
        double tol = k == 0 ? (s.optim == MXP_DS_SGD ? 0.05 : 4.0) * s.lr : 0.02 * cmax;
        printf("  %-10s %-10s %-6s max |cuda - emu| %.3e (largest %.3e, tolerance %.3e)\n",
               sh->name, mode, names[k], d, cmax, tol);
        CHECK_MSG(d <= tol, "%s %s: %s differs", sh->name, mode, names[k]);
    }
    mxp_ds_plan_destroy(pc);
    mxp_ds_plan_destroy(pe);
    free(a);
    free(c);
    free(x);
    free(y);
    free(lab);
    free(w0);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The same plan eager and graphed (spec.graphs) on the device under test,
 * same weights and batches, nsteps steps with a NaN at NAN_STEP: loss,
 * skip, scale and grad norm identical bit for bit every step, ONE
 * device-to-host copy per step on both, the graphed plan graphed from step
 * 2 on (on a table with graph ops), captured at step 2 and again exactly
 * when the loss scale changed; master, m, v identical bit for bit at the end. The
 * kernels' reductions merge in a fixed order and both plans pick the same
 * cuBLASLt algorithm per shape, so nothing may differ. */
static void graphed_vs_eager(const ds_shape *sh, mxp_dtype lowp, int nsteps) {
    const char *mode = ds_mode_name(lowp);
    mxp_ds_spec s = ds_spec_of(sh, lowp);
    mxp_ds_plan *pe = NULL, *pg = NULL;
    CU(mxp_ds_plan_create(&s, dut_ops, dut_dev, &pe, why, sizeof why));
    s.graphs = true;
    CU(mxp_ds_plan_create(&s, dut_ops, dut_dev, &pg, why, sizeof why));
    const bool can_graph = dut_ops->graph_begin != NULL;
    const size_t P = mxp_ds_num_params(pe);
    float *w0 = init_params(&s, pe);
    CU(mxp_ds_set_params(pe, w0, why, sizeof why));
    CU(mxp_ds_set_params(pg, w0, why, sizeof why));
    const int64_t B = sh->batch, ydim = sh->loss == MXP_DS_XENT ? 1 : sh->out;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * ydim) * 4);
    int32_t *lab = test_xmalloc((size_t)B * 4);
    float last = NAN;
    int captures = 0;
    for (int st = 1; st <= nsteps; st++) {
        ds_fill_batch(sh, &rs, x, y, lab);
        if (st == NAN_STEP) x[3] = NAN;
        mxp_ds_result re, rg;
        CU(mxp_ds_step(pe, x, y, lab, &re, why, sizeof why));
        CU(mxp_ds_step(pg, x, y, lab, &rg, why, sizeof why));
        /* step 1 eager; captured at step 2 and on every new scale after */
        const bool recap = can_graph && st >= 2 && (st == 2 || !(rg.scale == last));
        last = rg.scale;
        captures += rg.captured;
        printf("  %-10s %-10s step %d: loss eager %.9g graphed %.9g skip %d/%d scale %g->%g "
               "graphed %d captured %d d2h %lld/%lld\n",
               sh->name, mode, st, re.loss, rg.loss, re.skipped, rg.skipped, rg.scale,
               rg.next_scale, rg.graphed, rg.captured, (long long)re.d2h, (long long)rg.d2h);
        CHECK_MSG(re.d2h == 1 && rg.d2h == 1, "%s %s step %d: d2h %lld eager, %lld graphed",
                  sh->name, mode, st, (long long)re.d2h, (long long)rg.d2h);
        CHECK_MSG(memcmp(&re.loss, &rg.loss, sizeof re.loss) == 0 && re.skipped == rg.skipped &&
                      re.scale == rg.scale && re.next_scale == rg.next_scale &&
                      memcmp(&re.grad_norm, &rg.grad_norm, sizeof re.grad_norm) == 0,
                  "%s %s step %d: graphed differs from eager", sh->name, mode, st);
        CHECK_MSG(rg.graphed == (can_graph && st >= 2) && rg.captured == recap,
                  "%s %s step %d: graphed %d captured %d (expected %d, %d)", sh->name, mode, st,
                  rg.graphed, rg.captured, can_graph, recap);
    }
    float *a = test_xmalloc(P * 4), *c = test_xmalloc(P * 4);
    const mxp_ds_slab slabs[3] = {MXP_DS_MASTER, MXP_DS_M, MXP_DS_V};
    for (int k = 0; k < (s.optim == MXP_DS_SGD ? 2 : 3); k++) {
        CU(mxp_ds_get(pe, slabs[k], a, why, sizeof why));
        CU(mxp_ds_get(pg, slabs[k], c, why, sizeof why));
        CHECK_MSG(memcmp(a, c, P * 4) == 0, "%s %s: slab %d differs graphed vs eager", sh->name,
                  mode, k);
    }
    printf("  %-10s %-10s graphed vs eager: %d steps bit-identical, %d captures\n", sh->name,
           mode, nsteps, captures);
    mxp_ds_plan_destroy(pg);
    mxp_ds_plan_destroy(pe);
    free(a);
    free(c);
    free(x);
    free(y);
    free(lab);
    free(w0);
}

/* The 72-512x3-65 GELU MLP, batch 256: median CUDA-event time of a whole
 * step (printed, not asserted), eager or graphed. */
static void timing(mxp_dtype lowp, bool graphed, int warm, int steps) {
    const ds_shape sh = {"mlp512", 72, 512, 65, 256, 3, 1, MXP_DS_GELU, false, MXP_DS_MSE,
                         MXP_DS_ADAMW};
    mxp_ds_spec s = ds_spec_of(&sh, lowp);
    s.graphs = graphed;
    mxp_ds_plan *p = NULL;
    CU(mxp_ds_plan_create(&s, mxp_ds_ops_cuda(), ctx, &p, why, sizeof why));
    float *w0 = init_params(&s, p);
    CU(mxp_ds_set_params(p, w0, why, sizeof why));
    float *x = test_xmalloc(256 * 72 * 4), *y = test_xmalloc(256 * 65 * 4);
    for (int i = 0; i < 256 * 72; i++) x[i] = frand();
    for (int i = 0; i < 256 * 65; i++) y[i] = 0.5f * frand();
    float *ms = test_xmalloc((size_t)steps * sizeof(float));
    mxp_ds_result r;
    int64_t d2h = 0;
    for (int i = 0; i < warm + steps; i++) {
        void *e0 = NULL, *e1 = NULL;
        CU(mxp_cudab_timer_mark(ctx, &e0, why, sizeof why));
        CU(mxp_ds_step(p, x, y, NULL, &r, why, sizeof why));
        CU(mxp_cudab_timer_mark(ctx, &e1, why, sizeof why));
        float t = 0;
        CU(mxp_cudab_timer_ms(e0, e1, &t, why, sizeof why));
        if (i >= warm) ms[i - warm] = t;
        d2h += r.d2h;
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_float);
    printf("timing: mlp 72-512x3-65 GELU batch 256 %-10s %-7s %8.1f us/step (median of %d, CUDA "
           "events, after %d warm-up; %lld d2h copies in %d steps; last loss %.6g)\n",
           lowp == MXP_DTYPE_F32 ? "fp32" : lowp == MXP_DTYPE_BF16 ? "mixed_bf16" : "mixed_fp16",
           graphed ? "graphed" : "eager", 1000.0 * ms[steps / 2], steps, warm, (long long)d2h,
           warm + steps, r.loss);
    CHECK(d2h == warm + steps);
    CHECK(r.graphed == graphed); /* the last step: past the eager first */
    mxp_ds_plan_destroy(p);
    free(ms);
    free(x);
    free(y);
    free(w0);
}

int main(void) {
    mxp_error err = {0};
    int nd = 0;
    const char *self = getenv("MIXPREC_DSTEP_SELF");
    const bool self_check = self && strcmp(self, "1") == 0;
    emu_dev self_dev;
    memset(&self_dev, 0, sizeof self_dev);
    if (mxp_cuda_device_count(&nd, &err) != MXP_OK) {
        if (!self_check) {
            printf("test_cuda_dstep: SKIP (%s)\n", err.msg);
            return 77;
        }
        printf("test_cuda_dstep: no device; MIXPREC_DSTEP_SELF=1: emulated vs emulated\n");
        dut_ops = &emu_ds_ops;
        dut_dev = &self_dev;
    } else {
        CU(mxp_cudab_ctx_create(0, &ctx, why, sizeof why));
        dut_ops = mxp_ds_ops_cuda();
        dut_dev = ctx;
    }
    const bool quick = test_quick();
    const ds_shape shapes[] = {
        {"world", 4, 256, 4, 32, 3, 1, MXP_DS_GELU, true, MXP_DS_MSE, MXP_DS_ADAMW},
        {"classifier", 12, 64, 10, 32, 2, 1, MXP_DS_RELU, false, MXP_DS_XENT, MXP_DS_ADAMW},
        {"tanh", 6, 48, 3, 16, 2, 1, MXP_DS_TANH, false, MXP_DS_MSE, MXP_DS_ADAMW},
        /* micro-batches 11/11/10 (two GEMM row variants) and SGD */
        {"world-m3", 4, 256, 4, 32, 3, 3, MXP_DS_GELU, true, MXP_DS_MSE, MXP_DS_ADAMW},
        {"clf-sgd", 12, 64, 10, 32, 2, 1, MXP_DS_RELU, false, MXP_DS_XENT, MXP_DS_SGD},
    };
    const mxp_dtype modes[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    const size_t nshapes = quick ? 2 : sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < nshapes; i++)
        for (size_t j = 0; j < 3; j++) compare(&shapes[i], modes[j], quick ? 6 : 8);
    /* CUDA Graphs: eager and graphed bit-identical (world micro-batched,
     * the SGD classifier; every mode, the scale changing in fp16) */
    /* (MIXPREC_TEST_QUICK, the sanitizer runs: world-m3 in mixed_fp16
     * only, where the scale changes; graphed timing in mixed_bf16 only) */
    for (size_t j = 0; j < 3; j++) {
        if (!quick || modes[j] == MXP_DTYPE_F16) graphed_vs_eager(&shapes[3], modes[j], 10);
        if (!quick) graphed_vs_eager(&shapes[4], modes[j], 10);
    }
    if (ctx) {
        for (size_t j = 0; j < 3; j++) {
            timing(modes[j], false, quick ? 1 : 5, quick ? 3 : 50);
            if (!quick || modes[j] == MXP_DTYPE_BF16)
                timing(modes[j], true, quick ? 1 : 5, quick ? 3 : 50);
        }
        mxp_cudab_ctx_destroy(ctx);
    }
    return test_finish("test_cuda_dstep");
}
#endif
