/* tests/test_backend.c: the CPU implementation of the step seam
 * (src/backend/backend.h), against independent arithmetic:
 *   - grad pass: unscaled values and stats equal exact double arithmetic
 *     (power-of-two 1/scale);
 *   - decide: skip on a non-finite gradient, on a non-finite loss and on
 *     another rank's overflow (extra_inf); the clip coefficient is
 *     PyTorch's clip_grad_norm_ (max_norm / (norm + 1e-6), norm in double);
 *     opt_steps and sr_counter advance only on applied steps;
 *   - a skipped step leaves weights, master and moments bit-identical;
 *   - an applied AdamW step through the seam equals the kernel table's
 *     adamw on the clipped gradient (the trainer's arithmetic before the
 *     seam); pure BF16 with SR draws the stream at sr_counter - n;
 *   - check_loss flags a NaN or Inf among strided loss slots in the aux
 *     area; the report brings the control block and the aux area back in
 *     one counted copy; reserve keeps the block when it grows; the host's
 *     replay of decide's rule (mxp_backend_decide_rule) equals the op;
 *   - one report per report call (d2h_reports).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/devmem.h"
#include "kernels/kernels.h"
#include "testutil.h"

enum { N = 1000 };

/* The host half of the control block into the image, the counters into
 * the device block (resume's set_counters), then begin's upload. */
static void fill(mxp_backend *b, float inv_scale, float clip, int64_t opt_steps) {
    mxp_step_ctl *c = &b->ctl;
    memset(c, 0, sizeof *c);
    c->inv_scale = inv_scale;
    c->clip_max = clip;
    c->seed = 42;
    c->lr = 1e-2f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
    CHECK_OK(b->ops->set_counters(b, opt_steps, 5000, NULL), NULL);
    CHECK_OK(b->ops->begin(b, NULL), NULL);
}

/* The device block's statistics and loss flag, as a grad pass and
 * check_loss would leave them (a test's write inside a backend bracket). */
static void poke(mxp_backend *b, mxp_gradpass_acc st, int32_t loss_nonfinite) {
    mxp_dev_enter();
    b->dev->stats = st;
    b->dev->loss_nonfinite = loss_nonfinite;
    mxp_dev_leave();
}

static void report(mxp_backend *b) { CHECK_OK(b->ops->report(b, NULL, NULL), NULL); }

static void test_pass_and_decide(mxp_backend *b) {
    static float g[N], raw[N];
    mxp_rng r;
    mxp_rng_init(&r, 3);
    for (int i = 0; i < N; i++) raw[i] = g[i] = mxp_rng_normal(&r) * 1024.0f;
    fill(b, 0x1p-10f, 0.5f, 7);
    CHECK_OK(b->ops->grad_pass(b, g, N, 60000.0f, NULL), NULL);
    double ss = 0, amax = 0;
    bool exact = true;
    for (int i = 0; i < N; i++) {
        double v = (double)raw[i] / 1024.0;
        exact &= (double)g[i] == v;
        ss += v * v;
        if (fabs(v) > amax) amax = fabs(v);
    }
    CHECK(exact);
    report(b);
    CHECK(b->ctl.stats.n == N && b->ctl.stats.nonfinite == 0);
    CHECK((double)b->ctl.stats.absmax == amax);
    CHECK_CLOSE(b->ctl.stats.sumsq, ss, 0, 1e-12);
    CHECK_OK(b->ops->decide(b, false, N, NULL), NULL);
    report(b);
    double norm = sqrt(ss); /* ~ sqrt(1000): far above 0.5, so clipping is on */
    CHECK(norm > 0.5);
    CHECK(!b->ctl.skip && b->ctl.opt_steps == 8 && b->ctl.sr_counter == 5000 + N);
    CHECK_CLOSE(b->ctl.clip_coef, 0.5 / (norm + 1e-6), 0, 1e-7);
    /* the host's replay of the rule on a copy of the block agrees */
    mxp_step_ctl img = b->ctl;
    img.opt_steps = 7;
    img.sr_counter = 5000;
    mxp_backend_decide_rule(&img, false, N);
    CHECK(memcmp(&img, &b->ctl, sizeof img) == 0);

    /* no clipping when off or below the threshold */
    fill(b, 0x1p-10f, 0.0f, 0);
    poke(b, (mxp_gradpass_acc){N, 0, 0, 0, ss, (float)amax}, 0);
    CHECK_OK(b->ops->decide(b, false, N, NULL), NULL);
    report(b);
    CHECK(b->ctl.clip_coef == 1.0f);
    fill(b, 0x1p-10f, 1e6f, 0);
    poke(b, (mxp_gradpass_acc){N, 0, 0, 0, ss, (float)amax}, 0);
    CHECK_OK(b->ops->decide(b, false, N, NULL), NULL);
    report(b);
    CHECK(b->ctl.clip_coef == 1.0f);

    /* the three ways to skip */
    for (int way = 0; way < 3; way++) {
        fill(b, 0x1p-10f, 0.5f, 7);
        poke(b, (mxp_gradpass_acc){N, way == 0, 0, 0, ss, (float)amax}, way == 1);
        CHECK_OK(b->ops->decide(b, way == 2, N, NULL), NULL);
        report(b);
        CHECK_MSG(b->ctl.skip && b->ctl.opt_steps == 7 && b->ctl.sr_counter == 5000,
                  "skip way %d: skip %d steps %lld", way, b->ctl.skip,
                  (long long)b->ctl.opt_steps);
    }
}

/* check_loss over strided loss slots in the aux area, and the report's one
 * copy of block and aux area. */
static void test_loss_and_report(mxp_backend *b) {
    enum { STRIDE = 64, NB = 3 };
    CHECK_OK(b->ops->reserve(b, 0, STRIDE * NB, NULL), NULL);
    CHECK(b->aux != NULL && b->aux_bytes == STRIDE * NB);
    const double vals[3][NB] = {{1.0, 2.0, -3.0}, {1.0, INFINITY, 2.0}, {1.0, 2.0, NAN}};
    for (int c = 0; c < 3; c++) {
        mxp_dev_enter();
        for (int k = 0; k < NB; k++)
            *(double *)(void *)((unsigned char *)b->aux + k * STRIDE + 8) = vals[c][k];
        mxp_dev_leave();
        const double *first = (const double *)(const void *)((unsigned char *)b->aux + 8);
        CHECK_OK(b->ops->check_loss(b, first, STRIDE, NB, NULL), NULL);
        mxp_dev_stats d0, d1;
        mxp_dev_stats_get(&d0);
        report(b);
        mxp_dev_stats_get(&d1);
        CHECK(d1.d2h_calls - d0.d2h_calls == 1); /* block and aux area: one copy */
        CHECK_MSG(b->ctl.loss_nonfinite == (c > 0), "case %d: loss_nonfinite %d", c,
                  b->ctl.loss_nonfinite);
        double got;
        memcpy(&got, (const unsigned char *)b->aux_host + 2 * STRIDE + 8, sizeof got);
        CHECK(memcmp(&got, &vals[c][2], sizeof got) == 0);
    }
    /* growing keeps the control block */
    fill(b, 1.0f, 0.0f, 11);
    CHECK_OK(b->ops->reserve(b, 0, 1 << 16, NULL), NULL);
    report(b);
    CHECK(b->ctl.opt_steps == 11 && b->ctl.sr_counter == 5000 && b->aux_bytes == 1 << 16);
}

static void test_updates(mxp_backend *b) {
    static float g[N], g0[N], master[N], m[N], v[N], rm[N], rmaster[N], rv[N], rg[N];
    static uint16_t work[N], rwork[N];
    mxp_rng r;
    mxp_rng_init(&r, 4);
    for (int i = 0; i < N; i++) {
        g0[i] = mxp_rng_normal(&r) * 0.1f;
        master[i] = mxp_rng_normal(&r);
        m[i] = mxp_rng_normal(&r) * 0.01f;
        v[i] = m[i] * m[i];
        work[i] = mxp_f32_to_bf16(master[i]).bits;
    }
    for (int pure = 0; pure < 2; pure++) {
        for (int skip = 0; skip < 2; skip++) {
            memcpy(g, g0, sizeof g);
            memcpy(rmaster, master, sizeof master);
            memcpy(rm, m, sizeof m);
            memcpy(rv, v, sizeof v);
            memcpy(rwork, work, sizeof work);
            memcpy(rg, g0, sizeof g0);
            fill(b, 1.0f, 0.25f, 2);
            CHECK_OK(b->ops->grad_pass(b, g, N, INFINITY, NULL), NULL);
            CHECK_OK(b->ops->decide(b, skip, N, NULL), NULL);
            mxp_backend_weights w = {pure ? NULL : master, work, MXP_DTYPE_BF16, pure};
            CHECK_OK(b->ops->adamw(b, &w, g, m, v, N, NULL), NULL);
            if (skip) {
                CHECK(memcmp(master, rmaster, sizeof master) == 0);
                CHECK(memcmp(m, rm, sizeof m) == 0 && memcmp(v, rv, sizeof v) == 0);
                CHECK(memcmp(work, rwork, sizeof work) == 0);
                continue;
            }
            /* the trainer's arithmetic before the seam */
            const mxp_kernels *k = mxp_kernels_get();
            double ss = 0;
            for (int i = 0; i < N; i++) ss += (double)rg[i] * rg[i];
            double norm = sqrt(ss);
            if (norm > 0.25) k->scale(rg, (float)(0.25 / (norm + 1e-6)), N);
            mxp_weights kw = {pure ? NULL : rmaster, rwork, MXP_DTYPE_BF16, pure, 42, 5000};
            mxp_adamw_hparams h = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
            k->adamw(&kw, rg, rm, rv, N, &h, 3);
            CHECK_MSG(memcmp(master, rmaster, sizeof master) == 0, "pure %d: master", pure);
            CHECK_MSG(memcmp(m, rm, sizeof m) == 0 && memcmp(v, rv, sizeof v) == 0,
                      "pure %d: moments", pure);
            CHECK_MSG(memcmp(work, rwork, sizeof work) == 0, "pure %d: work", pure);
            CHECK(memcmp(work, (uint16_t[N]){0}, sizeof work) != 0);
        }
    }
}

int main(void) {
    mxp_backend *b = NULL;
    CHECK_OK(mxp_backend_cpu_create(&b, NULL), NULL);
    if (!b) return test_finish("test_backend");
    CHECK(strcmp(b->ops->name, "cpu") == 0);
    test_pass_and_decide(b);
    test_updates(b);
    test_loss_and_report(b);
    mxp_step_ctl rep;
    int64_t before = b->d2h_reports;
    CHECK_OK(b->ops->report(b, &rep, NULL), NULL);
    CHECK(b->d2h_reports == before + 1 && rep.opt_steps == b->ctl.opt_steps &&
          rep.sr_counter == b->ctl.sr_counter && rep.stats.n == b->ctl.stats.n);
    mxp_backend_destroy(b);
    mxp_backend_destroy(NULL);
    return test_finish("test_backend");
}
