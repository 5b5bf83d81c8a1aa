/* tests/test_cuda_dstep_fp8.c: the device step in fp8 (backend/cuda/
 * dstep_fp8.c) on the GPU (the CUDA table: fp8_kernels.cu's quantise and
 * scaling update, cuBLASLt FP8 GEMMs through the A/B scale pointers)
 * against the same plan on the emulated device (tests/dstep_emu_fp8.h,
 * itself held to the CPU trainer's fp8 mode by tests/test_dstep_fp8_emu.c):
 * same spec, initial weights and batches, 8 steps, dynamic loss scale
 * (growth every 3 clean steps), AdamW, on
 *   - "square" 16-64x2-16 (GELU, MSE, B 32): every linear layer FP8;
 *   - the world model 4-256x3-4 (layernorm, GELU, MSE, B 32) and the
 *     classifier 12-64x2-10 (ReLU, xent, B 32): first and last layers
 *     BF16 (reported, the same reasons on both tables);
 *   - "wide" 128-256x2-128 (GELU, MSE, B 128): larger FP8 GEMMs.
 * Step 5 has a NaN in its input. Checked per step: skip decision and
 * loss-scale sequence identical, ONE device-to-host copy (the report),
 * loss close; the FP8 scaling state (scales, amax histories) close after
 * every step; after the last step master, m, v close. Then graphed vs
 * eager (spec.graphs) on "square" on the CUDA table: bit-identical losses
 * and state every step.
 * Tolerances: cuBLASLt accumulates the FP8 products in FP32 in its own
 * order (the emulator in double, rounded once), so an output can differ
 * by FP32 rounding, which can move a stored BF16 activation by one ulp and
 * then a quantised element by one FP8 ulp (2^-3 relative): first-step loss
 * 2e-3 relative, later 2e-2; x and W scale/history entries 1e-2 (two BF16
 * ulps of an amax), dY 5e-2; master 4 lr (an AdamW update the other way),
 * m and v 5% of their largest element. cuBLASLt's own handling of the
 * scale pointers (D = scale_a scale_b sum) is the thing checked here: a
 * wrong pointer or a missing dequantisation is off by the scale itself
 * (x 2^7 or more), far outside these bounds.
 * Exits 77 (skipped) in a build without CUDA or without a device;
 * MIXPREC_DSTEP_SELF=1 on a machine without a device runs the emulated
 * table against itself (a check of this program: exact agreement).
 * MIXPREC_TEST_QUICK (gpu-check.sh under compute-sanitizer): square and
 * world only, 6 steps. NOT YET RUN on a GPU (docs/gpu.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/device.h>

#include "backend/cuda/dstep.h"
#include "testutil.h"
#include "train/trainer_device_fp8.h"

#ifndef MIXPREC_HAVE_CUDA
int main(void) {
    printf("test_cuda_dstep_fp8: SKIP (built without CUDA)\n");
    return 77;
}
#else

#include "backend/cuda/cuda_backend.h"
#include "dstep_emu_fp8.h"

static char why[512];
static mxp_cudab_ctx *ctx;
static const mxp_ds_ops *dut_ops; /* the CUDA table, or (self check) the emulated one */
static void *dut_dev;
static mxp_ds_ops emu_t;

#define CU(expr)                                                                         \
    do {                                                                                 \
        if ((expr) != 0) {                                                               \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, why); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

enum { NAN_STEP = 5 };

typedef struct shape {
    const char *name;
    int64_t in, hidden, out, batch;
    int depth;
    mxp_ds_kind act;
    bool layernorm;
    mxp_ds_loss loss;
} shape;

static uint32_t rs = 99u;
static float frand(void) {
    rs = rs * 1664525u + 1013904223u;
    return (float)((double)(rs >> 8) / 8388608.0 - 1.0);
}

static mxp_ds_spec spec_of(const shape *sh, bool graphs) {
    mxp_ds_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = sh->in;
    s.batch = sh->batch;
    int L = 0;
    for (int d = 0; d < sh->depth; d++) {
        s.layers[L].kind = MXP_DS_LINEAR;
        s.layers[L++].units = sh->hidden;
        if (sh->layernorm) s.layers[L++].kind = MXP_DS_LAYERNORM;
        s.layers[L++].kind = sh->act;
    }
    s.layers[L].kind = MXP_DS_LINEAR;
    s.layers[L++].units = sh->out;
    s.n_layers = L;
    s.loss = sh->loss;
    s.ln_eps = 1e-5f;
    s.lowp = MXP_DTYPE_BF16;
    s.fp8 = true;
    const mxp_fp8_config f8 = mxp_fp8_config_default();
    s.fp8_cfg = trainer_device_fp8_cfg(&f8);
    s.lr = 1e-3f;
    s.beta1 = 0.9f;
    s.beta2 = 0.999f;
    s.eps = 1e-8f;
    s.weight_decay = 0.01f;
    s.near_overflow_frac = 0.125f;
    s.seed = 7;
    s.rule = (mxp_scaler_rule){true, 2.0f, 0.5f, 3, 1, 1.17549435e-38f, 16777216.0f};
    s.scaler0.scale = 65536.0f;
    s.scaler0.hysteresis_left = 1;
    s.graphs = graphs;
    return s;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* worst relative difference per slot kind (x, W, dY) of two states */
static void state_worst(const float *a, const float *b, int ns, int H, double w[3]) {
    w[0] = w[1] = w[2] = 0;
    for (size_t i = 0; i < (size_t)ns * (1 + (size_t)H); i++) {
        const int k = (int)(i < (size_t)ns ? i : (i - (size_t)ns) / (size_t)H) % 3;
        double r = 0;
        if (isfinite(a[i]) && isfinite(b[i])) r = rel(a[i], b[i]);
        else if (!((isnan(a[i]) && isnan(b[i])) || a[i] == b[i])) r = INFINITY;
        if (!(r <= w[k])) w[k] = r;
    }
}

static void compare(const shape *sh, int nsteps) {
    const mxp_ds_spec s = spec_of(sh, false);
    emu_dev ed;
    memset(&ed, 0, sizeof ed);
    mxp_ds_plan *pe = NULL, *pd = NULL;
    CU(mxp_ds_plan_create(&s, &emu_t, &ed, &pe, why, sizeof why));
    CU(mxp_ds_plan_create(&s, dut_ops, dut_dev, &pd, why, sizeof why));
    for (int l = 0; l < s.n_layers; l++) {
        const char *a = mxp_ds_fp8_reason(pe, l), *b = mxp_ds_fp8_reason(pd, l);
        CHECK_MSG((!a && !b) || (a && b && strcmp(a, b) == 0), "%s layer %d: reasons differ",
                  sh->name, l);
    }
    const size_t P = mxp_ds_num_params(pe), NS = mxp_ds_fp8_state_size(pe);
    const int ns = (int)(NS / (1 + (size_t)s.fp8_cfg.history_len));
    float *w0 = test_xmalloc(P * 4), *a = test_xmalloc(P * 4), *c = test_xmalloc(P * 4);
    float *sa = test_xmalloc(NS * 4), *sb = test_xmalloc(NS * 4);
    for (size_t i = 0; i < P; i++) w0[i] = 0.1f * frand();
    CU(mxp_ds_set_params(pe, w0, why, sizeof why));
    CU(mxp_ds_set_params(pd, w0, why, sizeof why));
    const int64_t B = sh->batch, ydim = sh->loss == MXP_DS_XENT ? 1 : sh->out;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * ydim) * 4);
    int32_t *lab = test_xmalloc((size_t)B * 4);
    double worst[3] = {0, 0, 0}, wl = 0;
    for (int st = 0; st < nsteps; st++) {
        for (int64_t i = 0; i < B * sh->in; i++) x[i] = 2.0f * frand();
        for (int64_t i = 0; i < B * ydim; i++) y[i] = 0.5f * frand();
        for (int64_t i = 0; i < B; i++)
            lab[i] = (int32_t)((rs = rs * 1664525u + 1013904223u) >> 8) % (int32_t)sh->out;
        if (st + 1 == NAN_STEP) x[(B - 1) * sh->in + 1] = NAN;
        mxp_ds_result re, rd;
        CU(mxp_ds_step(pe, x, y, lab, &re, why, sizeof why));
        CU(mxp_ds_step(pd, x, y, lab, &rd, why, sizeof why));
        const double lr_ = rel(rd.loss, re.loss);
        bool ok = rd.skipped == re.skipped && rd.scale == re.scale &&
                  rd.next_scale == re.next_scale && rd.d2h == 1;
        if (re.skipped) ok = ok && !isfinite(rd.loss);
        else ok = ok && lr_ <= (st == 0 ? 2e-3 : 2e-2);
        if (!re.skipped && lr_ > wl) wl = lr_;
        CU(mxp_ds_fp8_get_state(pe, sa, NS, NULL, why, sizeof why));
        CU(mxp_ds_fp8_get_state(pd, sb, NS, NULL, why, sizeof why));
        double w[3];
        state_worst(sb, sa, ns, s.fp8_cfg.history_len, w);
        for (int k = 0; k < 3; k++) worst[k] = fmax(worst[k], w[k]);
        ok = ok && w[0] <= 1e-2 && w[1] <= 1e-2 && w[2] <= 5e-2;
        printf("  %-8s step %d: loss emu %.9g dev %.9g (rel %.2e) skip %d/%d scale %g->%g / "
               "%g->%g d2h %lld state x %.1e W %.1e dY %.1e\n",
               sh->name, st + 1, re.loss, rd.loss, lr_, re.skipped, rd.skipped, re.scale,
               re.next_scale, rd.scale, rd.next_scale, (long long)rd.d2h, w[0], w[1], w[2]);
        CHECK_MSG(ok, "%s step %d: the CUDA fp8 step disagrees with the emulated one", sh->name,
                  st + 1);
    }
    const mxp_ds_slab slabs[3] = {MXP_DS_MASTER, MXP_DS_M, MXP_DS_V};
    for (int k = 0; k < 3; k++) {
        CU(mxp_ds_get(pe, slabs[k], a, why, sizeof why));
        CU(mxp_ds_get(pd, slabs[k], c, why, sizeof why));
        double d = 0, m = 0;
        for (size_t i = 0; i < P; i++) {
            double e = fabs((double)a[i] - (double)c[i]);
            if (!(e <= d)) d = e;
            m = fmax(m, fabs((double)a[i]));
        }
        const double tol = k == 0 ? 4.0 * s.lr : 0.05 * m;
        printf("  %-8s %s max |dev - emu| %.3e (tolerance %.3e)\n", sh->name,
               k == 0 ? "master" : k == 1 ? "m" : "v", d, tol);
        CHECK_MSG(d <= tol, "%s: slab %d differs", sh->name, k);
    }
    printf("  %-8s worst: loss %.2e, state x %.2e W %.2e dY %.2e\n", sh->name, wl, worst[0],
           worst[1], worst[2]);
    mxp_ds_plan_destroy(pe);
    mxp_ds_plan_destroy(pd);
    free(w0), free(a), free(c), free(sa), free(sb), free(x), free(y), free(lab);
}

/* graphed and eager on the device under test: bit-identical */
static void graphed_vs_eager(const shape *sh, int nsteps) {
    mxp_ds_spec se = spec_of(sh, false), sg = spec_of(sh, true);
    mxp_ds_plan *pe = NULL, *pg = NULL;
    CU(mxp_ds_plan_create(&se, dut_ops, dut_dev, &pe, why, sizeof why));
    CU(mxp_ds_plan_create(&sg, dut_ops, dut_dev, &pg, why, sizeof why));
    const size_t P = mxp_ds_num_params(pe), NS = mxp_ds_fp8_state_size(pe);
    float *w0 = test_xmalloc(P * 4), *sa = test_xmalloc(NS * 4), *sb = test_xmalloc(NS * 4);
    for (size_t i = 0; i < P; i++) w0[i] = 0.1f * frand();
    CU(mxp_ds_set_params(pe, w0, why, sizeof why));
    CU(mxp_ds_set_params(pg, w0, why, sizeof why));
    const int64_t B = sh->batch;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * sh->out) * 4);
    int graphed = 0;
    for (int st = 0; st < nsteps; st++) {
        for (int64_t i = 0; i < B * sh->in; i++) x[i] = 2.0f * frand();
        for (int64_t i = 0; i < B * sh->out; i++) y[i] = 0.5f * frand();
        mxp_ds_result re, rg;
        CU(mxp_ds_step(pe, x, y, NULL, &re, why, sizeof why));
        CU(mxp_ds_step(pg, x, y, NULL, &rg, why, sizeof why));
        graphed += rg.graphed;
        CU(mxp_ds_fp8_get_state(pe, sa, NS, NULL, why, sizeof why));
        CU(mxp_ds_fp8_get_state(pg, sb, NS, NULL, why, sizeof why));
        CHECK_MSG(memcmp(&re.loss, &rg.loss, sizeof re.loss) == 0 && rg.d2h == 1 &&
                      memcmp(sa, sb, NS * 4) == 0,
                  "%s step %d: graphed fp8 differs from eager", sh->name, st + 1);
    }
    printf("  %-8s graphed vs eager: %d of %d steps graphed, bit-identical\n", sh->name, graphed,
           nsteps);
    mxp_ds_plan_destroy(pe);
    mxp_ds_plan_destroy(pg);
    free(w0), free(sa), free(sb), free(x), free(y);
}

int main(void) {
    mxp_error err = {0};
    int nd = 0;
    const char *self = getenv("MIXPREC_DSTEP_SELF");
    emu_dev self_dev;
    memset(&self_dev, 0, sizeof self_dev);
    emu_t = emu_fp8_table();
    if (mxp_cuda_device_count(&nd, &err) != MXP_OK) {
        if (!(self && strcmp(self, "1") == 0)) {
            printf("test_cuda_dstep_fp8: SKIP (%s)\n", err.msg);
            return 77;
        }
        printf("test_cuda_dstep_fp8: no device; MIXPREC_DSTEP_SELF=1: emulated vs emulated\n");
        dut_ops = &emu_t;
        dut_dev = &self_dev;
    } else {
        CU(mxp_cudab_ctx_create(0, &ctx, why, sizeof why));
        dut_ops = mxp_ds_ops_cuda();
        dut_dev = ctx;
    }
    const bool quick = test_quick();
    const shape shapes[] = {
        {"square", 16, 64, 16, 32, 2, MXP_DS_GELU, false, MXP_DS_MSE},
        {"world", 4, 256, 4, 32, 3, MXP_DS_GELU, true, MXP_DS_MSE},
        {"clf", 12, 64, 10, 32, 2, MXP_DS_RELU, false, MXP_DS_XENT},
        {"wide", 128, 256, 128, 128, 2, MXP_DS_GELU, false, MXP_DS_MSE},
    };
    const size_t nshapes = quick ? 2 : sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < nshapes; i++) compare(&shapes[i], quick ? 6 : 8);
    graphed_vs_eager(&shapes[0], quick ? 4 : 8);
    if (ctx) mxp_cudab_ctx_destroy(ctx);
    return test_finish("test_cuda_dstep_fp8");
}
#endif
