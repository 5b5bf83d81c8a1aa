/* tests/test_dstep_graph.c: the device step's CUDA-Graph path
 * (backend/cuda/dstep_run.c graphed_work) on an emulated device with graph
 * semantics, against the same plan run eagerly on the plain emulated
 * device (tests/dstep_emu.h; itself held to the CPU trainer by
 * test_dstep_emu.c).
 *
 * The recording table (tests/dstep_graph_emu.h, shared with
 * test_bench_dstep_emu.c): the emulated table whose capturable ops, while
 * a capture is open, are recorded, not run, and replayed by graph_launch;
 * an upload, a download, a control-block write, a report or a sync while a
 * capture is open is an error here (gdev.illegal).
 *
 * Checked, N = 10 steps, the world shape (4-256x3-4, layernorm, GELU, MSE,
 * B 32, as 3 micro-batches 11/11/10) and the classifier (12-64x2-10, ReLU,
 * softmax xent, B 32, one micro-batch, SGD), fp32, mixed_bf16 and
 * mixed_fp16 (growth interval 3, so the loss scale changes, and a NaN at
 * step 5 which halves it): step 1 eager, every later step graphed, exactly
 * one device-to-host copy, captured at step 2 and again exactly when the
 * loss scale changed;
 * loss, skip, scale bits identical to the eager plan; master, m, v
 * identical bit for bit after the last step.
 * Negative control (the test can fail): a recorder whose update in place
 * keeps the old graph (the stale loss scale replayed) must be caught in
 * mixed_fp16.
 * MIXPREC_TEST_QUICK (the sanitizer pass; the reference-kernel and
 * mock-device passes skip this program, label emu_only: it never runs the
 * CPU kernels): the world shape 64 wide and in mixed_fp16 only, the
 * classifier in fp32 and mixed_bf16, the negative control as above.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/dstep.h"
#include "dstep_emu.h"
#include "dstep_graph_emu.h"
#include "dstep_harness.h"
#include "testutil.h"

/* ---- the comparison ---------------------------------------------------------- */

enum { NSTEPS = 10, NAN_STEP = 5 };

static uint32_t rs = 4242u;
static float frand(void) { return ds_frand(&rs); }

/* Eager (plain table) vs graphed (recorder) on sh in lowp; true when every
 * step and the final state agree bit for bit. verbose: CHECK each. */
static bool compare(const ds_shape *sh, mxp_dtype lowp, bool stale, bool verbose) {
    char why[256] = "";
    const char *mode = ds_mode_name(lowp);
    mxp_ds_spec s = ds_spec_of(sh, lowp);
    emu_dev ed;
    gdev gd;
    memset(&ed, 0, sizeof ed);
    memset(&gd, 0, sizeof gd);
    gd.stale_update = stale;
    const mxp_ds_ops ro = rec_ops();
    mxp_ds_plan *pe = NULL, *pg = NULL;
    CHECK_MSG(mxp_ds_plan_create(&s, &emu_ds_ops, &ed, &pe, why, sizeof why) == 0, "%s", why);
    s.graphs = true;
    CHECK_MSG(mxp_ds_plan_create(&s, &ro, &gd, &pg, why, sizeof why) == 0, "%s", why);
    const size_t P = mxp_ds_num_params(pe);
    float *w = test_xmalloc(P * 4), *a = test_xmalloc(P * 4), *b = test_xmalloc(P * 4);
    for (size_t i = 0; i < P; i++) w[i] = 0.2f * frand();
    CHECK(mxp_ds_set_params(pe, w, why, sizeof why) == 0);
    CHECK(mxp_ds_set_params(pg, w, why, sizeof why) == 0);
    const int64_t B = sh->batch, ydim = sh->loss == MXP_DS_XENT ? 1 : sh->out;
    float *x = test_xmalloc((size_t)(B * sh->in) * 4), *y = test_xmalloc((size_t)(B * ydim) * 4);
    int32_t *lab = test_xmalloc((size_t)B * 4);
    bool ok = true;
    int expect_captures = 0;
    float last_scale = NAN;
    for (int st = 1; st <= NSTEPS; st++) {
        ds_fill_batch(sh, &rs, x, y, lab);
        if (st == NAN_STEP) x[(B - 1) * sh->in] = NAN;
        mxp_ds_result re, rg;
        CHECK_MSG(mxp_ds_step(pe, x, y, lab, &re, why, sizeof why) == 0, "%s", why);
        CHECK_MSG(mxp_ds_step(pg, x, y, lab, &rg, why, sizeof why) == 0, "%s", why);
        /* step 1 eager; captured at step 2 and on every new scale after */
        const bool recap = st >= 2 && (st == 2 || !(rg.scale == last_scale));
        last_scale = rg.scale;
        expect_captures += recap;
        bool step_ok = memcmp(&re.loss, &rg.loss, sizeof re.loss) == 0 &&
                       re.skipped == rg.skipped && re.scale == rg.scale &&
                       re.next_scale == rg.next_scale && re.grad_norm == rg.grad_norm &&
                       rg.d2h == 1 && rg.graphed == (st >= 2) && !re.graphed &&
                       rg.captured == recap;
        if (verbose) {
            printf("  %-10s %-10s step %2d: loss eager %.9g graphed %.9g skip %d/%d scale %g->%g "
                   "captured %d d2h %lld\n",
                   sh->name, mode, st, re.loss, rg.loss, re.skipped, rg.skipped, rg.scale,
                   rg.next_scale, rg.captured, (long long)rg.d2h);
            CHECK_MSG(step_ok, "%s %s step %d: graphed differs from eager", sh->name, mode, st);
        }
        ok = ok && step_ok;
    }
    const mxp_ds_slab slabs[3] = {MXP_DS_MASTER, MXP_DS_M, MXP_DS_V};
    for (int k = 0; k < (sh->optim == MXP_DS_SGD ? 2 : 3); k++) {
        CHECK(mxp_ds_get(pe, slabs[k], a, why, sizeof why) == 0);
        CHECK(mxp_ds_get(pg, slabs[k], b, why, sizeof why) == 0);
        const bool same = memcmp(a, b, P * 4) == 0;
        if (verbose) CHECK_MSG(same, "%s %s: slab %d differs", sh->name, mode, k);
        ok = ok && same;
    }
    const bool counts = gd.illegal == 0 && gd.captures == 1 &&
                        gd.captures + gd.updates == expect_captures &&
                        gd.launches == NSTEPS - 1;
    if (verbose) {
        printf("  %-10s %-10s captures %d, updates in place %d, launches %d, calls inside a "
               "capture that must not be there %d\n",
               sh->name, mode, gd.captures, gd.updates, gd.launches, gd.illegal);
        CHECK(counts);
    }
    ok = ok && counts;
    mxp_ds_plan_destroy(pe);
    mxp_ds_plan_destroy(pg);
    CHECK_MSG(ed.live == 0 && gd.e.live == 0, "device buffers leaked");
    free(gd.r);
    free(w);
    free(a);
    free(b);
    free(x);
    free(y);
    free(lab);
    return ok;
}

int main(void) {
    /* MIXPREC_TEST_QUICK (the sanitizer pass): the world shape 64 wide
     * (the graph logic does not depend on the width; the emulator's cost
     * does) in mixed_fp16 only, where the scale changes; the classifier in
     * fp32 and mixed_bf16 */
    const bool quick = test_quick();
    const ds_shape shapes[] = {
        {"world", 4, quick ? 64 : 256, 4, 32, 3, 3, MXP_DS_GELU, true, MXP_DS_MSE, MXP_DS_ADAMW},
        {"classifier", 12, 64, 10, 32, 2, 1, MXP_DS_RELU, false, MXP_DS_XENT, MXP_DS_SGD},
    };
    const mxp_dtype modes[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < sizeof modes / sizeof modes[0]; j++)
            if (!quick || (i == 0 ? modes[j] == MXP_DTYPE_F16 : modes[j] != MXP_DTYPE_F16))
                compare(&shapes[i], modes[j], false, true);
    /* a graph whose update keeps the stale loss scale: caught */
    CHECK_MSG(!compare(&shapes[0], MXP_DTYPE_F16, true, false),
              "a graph replayed with a stale loss scale went unnoticed");
    /* a table without graph ops stays eager (graphed false; the emulated
     * table: test_dstep_emu runs it with spec.graphs unset) */
    {
        char why[256];
        emu_dev d;
        memset(&d, 0, sizeof d);
        mxp_ds_spec s = ds_spec_of(&shapes[1], MXP_DTYPE_F32);
        s.graphs = true;
        mxp_ds_plan *p = NULL;
        CHECK_MSG(mxp_ds_plan_create(&s, &emu_ds_ops, &d, &p, why, sizeof why) == 0, "%s", why);
        const size_t P = mxp_ds_num_params(p);
        float *w = calloc(P, 4), x[32 * 12] = {0};
        int32_t lab[32] = {0};
        CHECK(w && mxp_ds_set_params(p, w, why, sizeof why) == 0);
        mxp_ds_result r;
        CHECK(mxp_ds_step(p, x, NULL, lab, &r, why, sizeof why) == 0);
        CHECK(!r.graphed && !r.captured && r.d2h == 1);
        mxp_ds_plan_destroy(p);
        free(w);
    }
    return test_finish("test_dstep_graph");
}
