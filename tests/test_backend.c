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
 *   - one report per report call (d2h_reports).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "kernels/kernels.h"
#include "testutil.h"

enum { N = 1000 };

static void fill(mxp_step_ctl *c, float inv_scale, float clip, int64_t opt_steps) {
    memset(c, 0, sizeof *c);
    c->inv_scale = inv_scale;
    c->clip_max = clip;
    c->opt_steps = opt_steps;
    c->seed = 42;
    c->sr_counter = 5000;
    c->lr = 1e-2f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
}

static void test_pass_and_decide(mxp_backend *b) {
    static float g[N], raw[N];
    mxp_rng r;
    mxp_rng_init(&r, 3);
    for (int i = 0; i < N; i++) raw[i] = g[i] = mxp_rng_normal(&r) * 1024.0f;
    fill(&b->ctl, 0x1p-10f, 0.5f, 7);
    CHECK_OK(b->ops->begin(b, NULL), NULL);
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
    CHECK(b->ctl.stats.n == N && b->ctl.stats.nonfinite == 0);
    CHECK((double)b->ctl.stats.absmax == amax);
    CHECK_CLOSE(b->ctl.stats.sumsq, ss, 0, 1e-12);
    CHECK_OK(b->ops->decide(b, false, N, NULL), NULL);
    double norm = sqrt(ss); /* ~ sqrt(1000): far above 0.5, so clipping is on */
    CHECK(norm > 0.5);
    CHECK(!b->ctl.skip && b->ctl.opt_steps == 8 && b->ctl.sr_counter == 5000 + N);
    CHECK_CLOSE(b->ctl.clip_coef, 0.5 / (norm + 1e-6), 0, 1e-7);

    /* no clipping when off or below the threshold */
    fill(&b->ctl, 0x1p-10f, 0.0f, 0);
    b->ctl.stats = (mxp_gradpass_acc){N, 0, 0, 0, ss, (float)amax};
    CHECK_OK(b->ops->decide(b, false, N, NULL), NULL);
    CHECK(b->ctl.clip_coef == 1.0f);
    fill(&b->ctl, 0x1p-10f, 1e6f, 0);
    b->ctl.stats = (mxp_gradpass_acc){N, 0, 0, 0, ss, (float)amax};
    CHECK_OK(b->ops->decide(b, false, N, NULL), NULL);
    CHECK(b->ctl.clip_coef == 1.0f);

    /* the three ways to skip */
    for (int way = 0; way < 3; way++) {
        fill(&b->ctl, 0x1p-10f, 0.5f, 7);
        b->ctl.stats = (mxp_gradpass_acc){N, way == 0, 0, 0, ss, (float)amax};
        b->ctl.loss_nonfinite = way == 1;
        CHECK_OK(b->ops->decide(b, way == 2, N, NULL), NULL);
        CHECK_MSG(b->ctl.skip && b->ctl.opt_steps == 7 && b->ctl.sr_counter == 5000,
                  "skip way %d: skip %d steps %lld", way, b->ctl.skip,
                  (long long)b->ctl.opt_steps);
    }
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
            fill(&b->ctl, 1.0f, 0.25f, 2);
            CHECK_OK(b->ops->begin(b, NULL), NULL);
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
    mxp_step_ctl rep;
    int64_t before = b->d2h_reports;
    CHECK_OK(b->ops->report(b, &rep, NULL), NULL);
    CHECK(b->d2h_reports == before + 1 && rep.opt_steps == b->ctl.opt_steps &&
          rep.sr_counter == b->ctl.sr_counter && rep.stats.n == b->ctl.stats.n);
    mxp_backend_destroy(b);
    mxp_backend_destroy(NULL);
    return test_finish("test_backend");
}
