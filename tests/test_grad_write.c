/* tests/test_grad_write.c: a step without a gradient zeroing pass
 * (mxp_model_discard_grads, issue 16 item 2).
 *
 * The oracle is the path every other test checks against PyTorch and
 * finite differences: mxp_model_zero_grads, then backward adding into
 * zeros. The tested path fills the grad slab with NaN, discards it, and
 * lets the first backward write every parameter gradient (a NaN left
 * anywhere is an element nobody wrote; beta = 0 never reads C).
 * - model level, every layer kind (linear, relu/gelu/tanh, layernorm, GPT
 *   embedding, blocks, tied lm_head with and without the fused head,
 *   chunked and unchunked blocks), every precision mode (fp8 included),
 *   FP32-kept layers, the unfused path, the FP16 fast-accumulate GEMM,
 *   per-layer grad scales, 1-3 micro-batches, two steps in a row: the
 *   gradients are the oracle's bit for bit, except that an exact -0.0 may
 *   stay -0.0 where the oracle has +0.0 (tolerated and counted; with the
 *   present kernels none is: every GEMM and "+=" kernel sums from a +0
 *   start, so even a batch-1 ReLU layer's dW = dy * (+0) comes out +0);
 * - reading discarded grads (mxp_model_grads) gives zeros; zero_grads after
 *   discard, and a forward-only step in between, keep the add semantics;
 * - trainer level: mxp_trainer_step (which discards) against the same step
 *   written out by hand from the oracle path and the kernel table (unscale
 *   pass, clip, AdamW): losses, master and working weights, AdamW moments
 *   and the grads after the step all bit for bit; the grad hook sets some
 *   raw gradients to -0.0 where the step by hand has +0.0 (what adding a
 *   -0.0 to a zeroed slab gave), so the grad pass's -0 -> +0 is checked.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/nn_internal.h"
#include "testutil.h"

#define NEG0 0x80000000u

static int64_t total_neg0; /* -0.0 the written gradients kept, over all cases */

static void fill(float *x, size_t n, uint64_t seed, float scale) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = scale * mxp_rng_normal(&r);
}

/* got == ref bit for bit, or got -0.0 where ref is +0.0 (counted). */
static void cmp_grads(const char *label, const float *ref, const float *got, size_t n) {
    int64_t bad = 0, neg0 = 0;
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = test_f32_bits(ref[i]), g = test_f32_bits(got[i]);
        if (r == g) continue;
        if (r == 0 && g == NEG0) {
            neg0++;
            continue;
        }
        if (bad++ == 0) first = i;
    }
    total_neg0 += neg0;
    CHECK_MSG(bad == 0, "%s: %lld of %zu gradients differ; first [%zu] %a, oracle %a", label,
              (long long)bad, n, first, bad ? (double)got[first] : 0.0,
              bad ? (double)ref[first] : 0.0);
}

typedef struct gcase {
    const char *name;
    mxp_model_spec spec;
    mxp_precision mode;
    const char *fp32_layers; /* NULL: none */
    bool unfused;
    int fp16_accum_k;
    int64_t block_rows; /* GPT: 0 default, < 0 unchunked, > 0 rows */
    bool grad_scales;
    int n_micro;
    int64_t micro_b[3];
} gcase;

static mxp_model *make(const gcase *c, uint64_t seed) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(c->mode, &pol);
    pol.fp16_accum_k = c->fp16_accum_k;
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&c->spec, &pol, seed, &m, &err), &err);
    if (!m) return NULL;
    if (c->fp32_layers) {
        mxp_fp32_layers sel;
        CHECK_OK(mxp_fp32_layers_parse(c->fp32_layers, &sel, &err), &err);
        CHECK_OK(mxp_model_set_fp32_layers(m, &sel, &err), &err);
    }
    if (c->block_rows) CHECK_OK(nn_model_set_block_rows(m, c->block_rows, &err), &err);
    if (c->unfused) nn_model_set_fusion(m, false);
    return m;
}

/* The micro-batches of step s: inputs (token ids for a GPT), targets. */
typedef struct gdata {
    float *x, *y;
    int32_t *labels;
    int64_t rows;
} gdata;

static void make_data(const gcase *c, gdata *d) {
    const mxp_model_spec *s = &c->spec;
    d->rows = 0;
    for (int i = 0; i < c->n_micro; i++) d->rows += c->micro_b[i];
    const int64_t out = s->layers[s->n_layers - 1].kind == MXP_LAYER_LM_HEAD
                            ? s->vocab_size
                            : s->layers[s->n_layers - 1].units;
    d->x = test_xmalloc((size_t)(d->rows * s->in_dim) * sizeof(float));
    d->y = test_xmalloc((size_t)(d->rows * out) * sizeof(float));
    d->labels = test_xmalloc((size_t)d->rows * sizeof(int32_t));
    fill(d->x, (size_t)(d->rows * s->in_dim), 7, 1.0f);
    fill(d->y, (size_t)(d->rows * out), 8, 1.0f);
    for (int64_t r = 0; r < d->rows; r++) {
        if (s->vocab_size > 0) d->x[r] = (float)((r * 7 + 3) % s->vocab_size);
        d->labels[r] = (int32_t)((r * 5 + 1) % out);
    }
}

static void free_data(gdata *d) {
    free(d->x);
    free(d->y);
    free(d->labels);
}

/* The micro-batches of c on model m, loss scale 64 split by B_i / B. */
static void run_micro(const gcase *c, const gdata *d, mxp_model *m) {
    mxp_error err = {0};
    int64_t r0 = 0;
    for (int i = 0; i < c->n_micro; i++) {
        const int64_t B = c->micro_b[i];
        mxp_batch b = {d->x + r0 * c->spec.in_dim, NULL, NULL, B};
        if (c->spec.loss == MXP_LOSS_MSE)
            b.y = d->y + r0 * c->spec.layers[c->spec.n_layers - 1].units;
        else
            b.labels = d->labels + r0;
        mxp_nonfinite_site site;
        double loss = 0;
        CHECK_OK(mxp_model_step(m, &b, true, (float)(64.0 * (double)B / (double)d->rows), &loss,
                                &site, &err),
                 &err);
        CHECK(!site.found && isfinite(loss));
        r0 += B;
    }
}

static void run_case(const gcase *c) {
    mxp_model *ref = make(c, 42), *m = make(c, 42);
    if (!ref || !m) goto done;
    const size_t P = mxp_model_num_params(m);
    float scales[MXP_MODEL_MAX_LAYERS];
    for (int l = 0; l < c->spec.n_layers; l++) scales[l] = ldexpf(1.0f, 6 - l % 3);
    if (c->grad_scales) {
        mxp_model_set_grad_scales(ref, scales);
        mxp_model_set_grad_scales(m, scales);
    }
    gdata d;
    make_data(c, &d);
    float *g = mxp_model_grads(m); /* the slab itself: filled with NaN below */
    for (int step = 0; step < 2; step++) {
        mxp_model_zero_grads(ref);
        run_micro(c, &d, ref);
        for (size_t i = 0; i < P; i++) g[i] = NAN;
        mxp_model_discard_grads(m);
        run_micro(c, &d, m);
        char label[160];
        snprintf(label, sizeof label, "%s (%s, step %d)", c->name, mxp_precision_name(c->mode),
                 step);
        cmp_grads(label, mxp_model_grads(ref), g, P);
        CHECK(mxp_model_grads(m) == g);
    }
    free_data(&d);
done:
    mxp_model_destroy(ref);
    mxp_model_destroy(m);
}

static void test_layers_and_modes(void) {
    static const mxp_precision modes[] = {MXP_PRECISION_FP32,       MXP_PRECISION_MIXED_BF16,
                                          MXP_PRECISION_MIXED_FP16, MXP_PRECISION_BF16,
                                          MXP_PRECISION_FP16,       MXP_PRECISION_FP8};
    const mxp_model_spec relu = mxp_model_spec_mlp(10, 24, 3, 5, MXP_LAYER_RELU, false,
                                                   MXP_LOSS_MSE, 8);
    const mxp_model_spec gelu_ln = mxp_model_spec_mlp(12, 20, 2, 6, MXP_LAYER_GELU, true,
                                                      MXP_LOSS_XENT, 8);
    const mxp_model_spec tanh = mxp_model_spec_mlp(9, 16, 2, 3, MXP_LAYER_TANH, true,
                                                   MXP_LOSS_MSE, 8);
    const mxp_model_spec gpt = mxp_model_spec_gpt(11, 4, 8, 2, 2, 3);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const mxp_precision p = modes[i];
        run_case(&(gcase){"relu batch 1", relu, p, .n_micro = 1, .micro_b = {1}});
        run_case(&(gcase){"relu 1+3+2", relu, p, .n_micro = 3, .micro_b = {1, 3, 2}});
        run_case(&(gcase){"gelu layernorm xent 5+3", gelu_ln, p, .n_micro = 2,
                          .micro_b = {5, 3}});
        run_case(&(gcase){"tanh layernorm 8", tanh, p, .n_micro = 1, .micro_b = {8}});
        run_case(&(gcase){"gpt 8+4", gpt, p, .n_micro = 2, .micro_b = {8, 4}});
        run_case(&(gcase){"gpt unchunked 4+8", gpt, p, .block_rows = -1, .n_micro = 2,
                          .micro_b = {4, 8}});
    }
    run_case(&(gcase){"relu unfused 1+3", relu, MXP_PRECISION_MIXED_BF16, .unfused = true,
                      .n_micro = 2, .micro_b = {1, 3}});
    run_case(&(gcase){"gelu first,last fp32", gelu_ln, MXP_PRECISION_MIXED_BF16,
                      .fp32_layers = "first,last", .n_micro = 2, .micro_b = {2, 6}});
    run_case(&(gcase){"gelu last fp32", gelu_ln, MXP_PRECISION_FP8, .fp32_layers = "last",
                      .n_micro = 2, .micro_b = {2, 6}});
    run_case(&(gcase){"relu fp16 accumulate", relu, MXP_PRECISION_MIXED_FP16,
                      .fp16_accum_k = 4, .n_micro = 2, .micro_b = {1, 7}});
    run_case(&(gcase){"tanh per-layer scales", tanh, MXP_PRECISION_MIXED_FP16,
                      .grad_scales = true, .n_micro = 2, .micro_b = {3, 5}});
    run_case(&(gcase){"gpt rows 4, unfused", gpt, MXP_PRECISION_MIXED_BF16, .block_rows = 4,
                      .unfused = true, .n_micro = 3, .micro_b = {4, 4, 4}});
}

/* Discarded grads read before a backward are zeros; zero_grads after a
 * discard and a forward-only step in between keep the add semantics. */
static void test_read_and_reset(void) {
    const gcase c = {"relu", mxp_model_spec_mlp(10, 24, 3, 5, MXP_LAYER_RELU, false,
                                                MXP_LOSS_MSE, 8),
                     MXP_PRECISION_MIXED_BF16, .n_micro = 2, .micro_b = {1, 3}};
    mxp_model *ref = make(&c, 9), *m = make(&c, 9);
    if (!ref || !m) goto done;
    const size_t P = mxp_model_num_params(m);
    gdata d;
    make_data(&c, &d);
    mxp_model_zero_grads(ref);
    run_micro(&c, &d, ref);
    const float *r = mxp_model_grads(ref);

    float *g = mxp_model_grads(m);
    for (size_t i = 0; i < P; i++) g[i] = NAN;
    mxp_model_discard_grads(m);
    CHECK(mxp_model_grads(m) == g);
    size_t nz = 0;
    for (size_t i = 0; i < P; i++) nz += test_f32_bits(g[i]) != 0;
    CHECK_MSG(nz == 0, "discarded grads read before a backward: %zu not +0", nz);
    run_micro(&c, &d, m); /* zeroed by the read: adds, exactly the oracle */
    CHECK(memcmp(g, r, P * sizeof(float)) == 0);

    for (size_t i = 0; i < P; i++) g[i] = NAN;
    mxp_model_discard_grads(m);
    mxp_model_zero_grads(m);
    run_micro(&c, &d, m);
    CHECK(memcmp(g, r, P * sizeof(float)) == 0);

    for (size_t i = 0; i < P; i++) g[i] = NAN;
    mxp_model_discard_grads(m);
    mxp_error err = {0};
    double loss;
    mxp_batch fwd = {d.x, d.y, NULL, 2};
    CHECK_OK(mxp_model_step(m, &fwd, false, 1.0f, &loss, NULL, &err), &err);
    run_micro(&c, &d, m); /* the forward-only step left the discard pending */
    cmp_grads("discard, forward only, backward", r, g, P);
    free_data(&d);
done:
    mxp_model_destroy(ref);
    mxp_model_destroy(m);
}

/* ---- trainer level ---------------------------------------------------------------- */

#define NEG0_STRIDE 7 /* raw gradients 0, 7, 14, ... set to -0.0 by the hook */

static void put_neg0(void *user, int64_t step, float *g, size_t n) {
    (void)user;
    (void)step;
    for (size_t i = 0; i < n; i += NEG0_STRIDE) g[i] = -0.0f;
}

static bool same_bytes(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

static void test_trainer(mxp_precision mode) {
    const mxp_model_spec spec = mxp_model_spec_mlp(10, 24, 3, 5, MXP_LAYER_RELU, true,
                                                   MXP_LOSS_MSE, 8);
    const gcase c = {"trainer", spec, mode, .n_micro = 2, .micro_b = {1, 1}};
    mxp_model *ref = make(&c, 5), *m = make(&c, 5);
    mxp_trainer *t = NULL;
    float *rm = NULL, *rv = NULL;
    mxp_error err = {0};
    if (!ref || !m) goto done;
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.grad_accum_steps = 2;
    tc.clip_grad_norm = 0.05f; /* clips: the scale kernel runs too */
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) goto done;
    mxp_trainer_set_grad_hook(t, put_neg0, NULL);
    const size_t P = mxp_model_num_params(m);
    rm = calloc(P, sizeof(float));
    rv = calloc(P, sizeof(float));
    gdata d;
    make_data(&c, &d);
    const mxp_kernels *k = mxp_kernels_get();
    const mxp_precision_policy *pol = mxp_model_policy(ref);
    for (int64_t step = 1; step <= 3; step++) {
        const mxp_scaler *sc = mxp_trainer_scaler(t);
        const float scale = mxp_scaler_scale(sc), inv = mxp_scaler_inv_scale(sc);
        /* the step by hand on the oracle path */
        mxp_model_zero_grads(ref);
        double loss_ref = 0;
        for (int i = 0; i < 2; i++) {
            mxp_batch b = {d.x + i * spec.in_dim, d.y + i * 5, NULL, 1};
            double l = 0;
            CHECK_OK(mxp_model_step(ref, &b, true, (float)((double)scale * 1.0 / 2.0), &l, NULL,
                                    &err),
                     &err);
            loss_ref += l * 1.0 / 2.0;
        }
        float *rg = mxp_model_grads(ref);
        for (size_t i = 0; i < P; i += NEG0_STRIDE) rg[i] = 0.0f;
        mxp_grad_stats gs;
        k->unscale_stats(rg, P, inv, INFINITY, &gs);
        CHECK(gs.nonfinite == 0);
        const double norm = sqrt(gs.sumsq);
        const float coef = norm > tc.clip_grad_norm
                               ? (float)(tc.clip_grad_norm / (norm + 1e-6))
                               : 1.0f;
        if (coef != 1.0f) k->scale(rg, coef, P);
        mxp_dtype wt;
        void *work = mxp_model_work(ref, &wt);
        float *master = mxp_model_master(ref);
        mxp_weights w = {master, (void *)master == work ? NULL : work, wt, false, 0, 0};
        mxp_adamw_hparams h = {tc.optim.lr, tc.optim.beta1, tc.optim.beta2, tc.optim.eps,
                               tc.optim.weight_decay};
        k->adamw(&w, rg, rm, rv, P, &h, step);

        mxp_batch micro[2] = {{d.x, d.y, NULL, 1}, {d.x + spec.in_dim, d.y + 5, NULL, 1}};
        mxp_step_result res;
        CHECK_OK(mxp_trainer_step(t, micro, 2, &res, &err), &err);
        CHECK(!res.skipped && coef != 1.0f);
        CHECK_MSG(res.loss == loss_ref, "%s step %lld: loss %.17g, by hand %.17g",
                  mxp_precision_name(mode), (long long)step, res.loss, loss_ref);
        float *tm, *tv;
        size_t tn;
        int64_t tt;
        mxp_trainer_optim_state(t, &tm, &tv, &tn, &tt);
        void *twork = mxp_model_work(m, NULL);
        const size_t wsz = mxp_dtype_info(pol->weight)->size;
        const char *mn = mxp_precision_name(mode);
        CHECK_MSG(same_bytes(mxp_model_grads(m), rg, P * 4), "%s step %lld: grads differ", mn,
                  (long long)step);
        CHECK_MSG(same_bytes(tm, rm, P * 4) && same_bytes(tv, rv, P * 4),
                  "%s step %lld: AdamW moments differ", mn, (long long)step);
        CHECK_MSG(same_bytes(mxp_model_master(m), master, P * 4) &&
                      same_bytes(twork, work, P * wsz),
                  "%s step %lld: weights differ", mn, (long long)step);
    }
    free_data(&d);
done:
    free(rm);
    free(rv);
    mxp_trainer_destroy(t);
    mxp_model_destroy(ref);
    mxp_model_destroy(m);
}

/* AdamW on a zero gradient of either sign (both kernel tables): from
 * moments that are never -0.0 (they start +0.0, and b1 m + (1-b1) g is
 * -0.0 only when b1 m is), the new moments and weights do not depend on
 * the sign; a -0.0 moment (b1 m underflowing, possible only for beta1 <=
 * 0.5) would, which is why the grad pass maps -0.0 to +0.0 instead of
 * relying on this. */
static void test_adamw_signed_zero(void) {
    enum { N = 100 };
    const mxp_kernels *tables[2] = {mxp_kernels_generic(), mxp_kernels_get()};
    for (int k = 0; k < 2; k++) {
        float w[2][N], m[2][N], v[2][N], g[2][N];
        fill(w[0], N, 1, 1.0f);
        fill(m[0], N, 2, 1e-3f);
        fill(v[0], N, 3, 1e-3f);
        for (int i = 0; i < N; i++) {
            v[0][i] = fabsf(v[0][i]);
            if (i % 3 == 0) m[0][i] = 0.0f, v[0][i] = 0.0f;
            if (i % 5 == 0) w[0][i] = 0.0f;
            g[0][i] = 0.0f;
            g[1][i] = -0.0f;
        }
        memcpy(w[1], w[0], sizeof w[0]);
        memcpy(m[1], m[0], sizeof m[0]);
        memcpy(v[1], v[0], sizeof v[0]);
        const mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
        for (int s = 0; s < 2; s++) {
            mxp_weights wt = {w[s], NULL, MXP_DTYPE_F32, false, 0, 0};
            for (int64_t t = 1; t <= 3; t++) tables[k]->adamw(&wt, g[s], m[s], v[s], N, &h, t);
        }
        CHECK_MSG(memcmp(w[0], w[1], sizeof w[0]) == 0 && memcmp(m[0], m[1], sizeof m[0]) == 0 &&
                      memcmp(v[0], v[1], sizeof v[0]) == 0,
                  "adamw (%s table): +0 and -0 gradients gave different bits",
                  k ? "active" : "generic");
    }
}

int main(void) {
    test_adamw_signed_zero();
    test_layers_and_modes();
    test_read_and_reset();
    test_trainer(MXP_PRECISION_FP32);
    test_trainer(MXP_PRECISION_MIXED_BF16);
    test_trainer(MXP_PRECISION_MIXED_FP16);
    printf("test_grad_write: %lld written gradients were -0.0 where the oracle has +0.0\n",
           (long long)total_neg0);
    return test_finish("test_grad_write");
}
