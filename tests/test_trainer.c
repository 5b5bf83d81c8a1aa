/* tests/test_trainer.c: the training step.
 *
 * - PyTorch GradScaler case (d): init 128, growth 2, interval 1, two
 *   Linear(8,8), MSE, SGD lr 1, 4 iterations, Inf injected into the second
 *   layer's weight gradient at iteration 2: final scale 512 and parameters
 *   equal to an unscaled FP32 run that simply skipped iteration 2.
 * - a skipped step leaves weights and optimizer state bit-for-bit unchanged.
 * - gradient accumulation: 4 micro-batches of 8 == one batch of 32.
 * - at-minimum policies: error returns MXP_ERR_NONFINITE; fallback moves
 *   mixed_fp16 -> mixed_bf16 and turns loss scaling off.
 * - clipping by global norm after unscaling.
 * - stats API and history.
 * - mxp_trainer_check_state (issue 15, item 1): a fresh trainer passes; one
 *   Inf in the master, NaN in m, a negative v (also in a pure fp16 model's
 *   16-bit weights) each fail naming the part, the tensor and the element,
 *   which are placed by hand; -0.0 in v passes.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define IN 8
#define NB 4 /* batches in the (d) case */

static mxp_model *make_model(const mxp_model_spec *spec, mxp_precision p, uint64_t seed) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(spec, &pol, seed, &m, &err), &err);
    return m;
}

static mxp_model_spec two_linear(void) {
    mxp_model_spec s = {0};
    s.in_dim = IN;
    s.max_batch = 32;
    s.n_layers = 2;
    s.layers[0] = (mxp_layer_spec){MXP_LAYER_LINEAR, IN, 0.0};
    s.layers[1] = (mxp_layer_spec){MXP_LAYER_LINEAR, IN, 0.0};
    s.loss = MXP_LOSS_MSE;
    s.layernorm_eps = 1e-5f;
    return s;
}

static void fill(float *x, size_t n, uint64_t seed) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = mxp_rng_normal(&r);
}

typedef struct inject {
    int64_t at_step;
    size_t from, count; /* element range to poison */
    float value;
} inject;

static void poison(void *user, int64_t step, float *g, size_t n) {
    const inject *in = user;
    if (step != in->at_step && in->at_step != -1) return;
    for (size_t i = in->from; i < in->from + in->count && i < n; i++) g[i] = in->value;
}

static void test_case_d(void) {
    static float x[NB][16 * IN], y[NB][16 * IN];
    for (int b = 0; b < NB; b++) {
        fill(x[b], 16 * IN, 100 + b);
        fill(y[b], 16 * IN, 200 + b);
    }
    mxp_model_spec spec = two_linear();
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.optim.kind = MXP_OPTIM_SGD;
    tc.optim.lr = 1.0f;
    tc.optim.momentum = 0.0f;
    tc.clip_grad_norm = 0.0f;
    mxp_error err = {0};

    /* scaled run with an Inf in layers.1.weight's gradient at iteration 2 */
    mxp_model *ms = make_model(&spec, MXP_PRECISION_FP32, 7);
    mxp_trainer_config tcs = tc;
    tcs.scaler.enabled = true;
    tcs.scaler_override = true;
    tcs.scaler.init_scale = 128;
    tcs.scaler.growth_factor = 2;
    tcs.scaler.growth_interval = 1;
    mxp_trainer *ts = NULL;
    CHECK_OK(mxp_trainer_create(ms, &tcs, &ts, &err), &err);
    const mxp_tensor_info *w1 = mxp_model_tensor(ms, 2);
    CHECK(w1 && strcmp(w1->name, "layers.1.weight") == 0);
    inject in = {3, w1->offset, w1->count, INFINITY}; /* iteration 2 = step 3 */
    mxp_trainer_set_grad_hook(ts, poison, &in);

    /* reference: unscaled FP32, iteration 2 not run at all */
    mxp_model *mr = make_model(&spec, MXP_PRECISION_FP32, 7);
    mxp_trainer *trf = NULL;
    CHECK_OK(mxp_trainer_create(mr, &tc, &trf, &err), &err);

    for (int it = 0; it < NB; it++) {
        mxp_batch b = {x[it], y[it], NULL, 16};
        mxp_step_result res;
        CHECK_OK(mxp_trainer_step(ts, &b, 1, &res, &err), &err);
        CHECK(res.skipped == (it == 2));
        if (it != 2) CHECK_OK(mxp_trainer_step(trf, &b, 1, &res, &err), &err);
    }
    CHECK(mxp_scaler_scale(mxp_trainer_scaler(ts)) == 512.0f);
    size_t P = mxp_model_num_params(ms);
    for (size_t i = 0; i < P; i++)
        CHECK_CLOSE(mxp_model_master(ms)[i], mxp_model_master(mr)[i], 1e-7, 1e-6);
    mxp_train_stats st;
    mxp_trainer_stats(ts, &st);
    CHECK(st.training_steps == 4 && st.optimizer_steps == 3 && st.skipped_steps == 1);
    CHECK_CLOSE(st.overflow_rate, 0.25, 0, 1e-12);
    CHECK(st.current_scale == 512.0f && st.precision == MXP_PRECISION_FP32);
    CHECK(!st.fp16_enabled_runtime);
    size_t nh;
    const mxp_history_row *h = mxp_trainer_history(ts, &nh);
    CHECK(nh == 4 && h[2].skipped && !h[3].skipped && h[0].scale == 128.0f &&
          h[3].scale == 256.0f);
    mxp_trainer_destroy(ts);
    mxp_trainer_destroy(trf);
    mxp_model_destroy(ms);
    mxp_model_destroy(mr);
}

/* Snapshot every byte a skipped step must not touch. */
typedef struct snapshot {
    float *master, *m, *v;
    unsigned char *work;
    size_t P, work_bytes;
} snapshot;

static void take(mxp_trainer *t, snapshot *s) {
    mxp_model *m = mxp_trainer_model(t);
    float *om, *ov;
    int64_t tt;
    mxp_trainer_optim_state(t, &om, &ov, &s->P, &tt);
    mxp_dtype wt;
    void *work = mxp_model_work(m, &wt);
    s->work_bytes = s->P * mxp_dtype_info(wt)->size;
    s->work = malloc(s->work_bytes);
    memcpy(s->work, work, s->work_bytes);
    s->m = malloc(s->P * 4);
    s->v = malloc(s->P * 4);
    memcpy(s->m, om, s->P * 4);
    memcpy(s->v, ov, s->P * 4);
    s->master = NULL;
    if (mxp_model_master(m)) {
        s->master = malloc(s->P * 4);
        memcpy(s->master, mxp_model_master(m), s->P * 4);
    }
}

static bool same(mxp_trainer *t, const snapshot *s) {
    mxp_model *m = mxp_trainer_model(t);
    float *om, *ov;
    size_t P;
    int64_t tt;
    mxp_trainer_optim_state(t, &om, &ov, &P, &tt);
    mxp_dtype wt;
    void *work = mxp_model_work(m, &wt);
    bool ok = memcmp(work, s->work, s->work_bytes) == 0 && memcmp(om, s->m, P * 4) == 0 &&
              memcmp(ov, s->v, P * 4) == 0;
    if (s->master) ok = ok && memcmp(mxp_model_master(m), s->master, P * 4) == 0;
    return ok;
}

static void drop(snapshot *s) {
    free(s->master);
    free(s->m);
    free(s->v);
    free(s->work);
}

static void test_skip_is_bit_exact(mxp_precision p) {
    static float x[16 * IN], y[16 * IN];
    fill(x, sizeof x / 4, 1);
    fill(y, sizeof y / 4, 2);
    mxp_model_spec spec = mxp_model_spec_mlp(IN, 16, 2, IN, MXP_LAYER_GELU, true, MXP_LOSS_MSE, 16);
    mxp_model *m = make_model(&spec, p, 3);
    mxp_trainer_config tc = mxp_trainer_config_default();
    mxp_trainer *t = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    mxp_batch b = {x, y, NULL, 16};
    mxp_step_result res;
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err); /* build optimizer state */
    CHECK(!res.skipped);
    snapshot s;
    take(t, &s);
    inject in = {-1, 5, 1, NAN};
    mxp_trainer_set_grad_hook(t, poison, &in);
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
    CHECK_MSG(res.skipped && res.nonfinite == 1, "%s: NaN grad must skip", mxp_precision_name(p));
    CHECK_MSG(same(t, &s), "%s: skipped step changed weights or state", mxp_precision_name(p));
    mxp_trainer_set_grad_hook(t, NULL, NULL);
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
    CHECK(!res.skipped && !same(t, &s));
    drop(&s);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

static void test_grad_accumulation(void) {
    static float x[32 * IN], y[32 * IN];
    fill(x, sizeof x / 4, 11);
    fill(y, sizeof y / 4, 12);
    mxp_model_spec spec = mxp_model_spec_mlp(IN, 16, 2, IN, MXP_LAYER_TANH, false, MXP_LOSS_MSE, 32);
    mxp_error err = {0};
    mxp_model *one = make_model(&spec, MXP_PRECISION_FP32, 5);
    mxp_model *acc = make_model(&spec, MXP_PRECISION_FP32, 5);
    mxp_trainer_config tc = mxp_trainer_config_default();
    mxp_trainer *t1 = NULL, *t4 = NULL;
    CHECK_OK(mxp_trainer_create(one, &tc, &t1, &err), &err);
    tc.grad_accum_steps = 4;
    CHECK_OK(mxp_trainer_create(acc, &tc, &t4, &err), &err);
    for (int step = 0; step < 3; step++) {
        mxp_batch big = {x, y, NULL, 32};
        mxp_batch micro[4];
        for (int i = 0; i < 4; i++) micro[i] = (mxp_batch){x + i * 8 * IN, y + i * 8 * IN, NULL, 8};
        mxp_step_result r1, r4;
        CHECK_OK(mxp_trainer_step(t1, &big, 1, &r1, &err), &err);
        CHECK_OK(mxp_trainer_step(t4, micro, 4, &r4, &err), &err);
        CHECK_CLOSE(r4.loss, r1.loss, 1e-7, 1e-5);
        CHECK_CLOSE(r4.grad_norm, r1.grad_norm, 1e-7, 1e-5);
    }
    size_t P = mxp_model_num_params(one);
    for (size_t i = 0; i < P; i++)
        CHECK_CLOSE(mxp_model_master(acc)[i], mxp_model_master(one)[i], 1e-6, 1e-5);
    mxp_batch wrong = {x, y, NULL, 32};
    mxp_step_result r;
    CHECK(mxp_trainer_step(t4, &wrong, 1, &r, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "grad_accum_steps") != NULL);
    mxp_trainer_destroy(t1);
    mxp_trainer_destroy(t4);
    mxp_model_destroy(one);
    mxp_model_destroy(acc);
}

static void test_at_min_policies(void) {
    static float x[16 * IN], y[16 * IN];
    fill(x, sizeof x / 4, 21);
    fill(y, sizeof y / 4, 22);
    mxp_model_spec spec = mxp_model_spec_mlp(IN, 16, 1, IN, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 16);
    mxp_batch b = {x, y, NULL, 16};
    inject in = {-1, 0, 1, INFINITY};
    mxp_error err = {0};
    mxp_step_result res;

    /* error policy: the overflow at the floor is an error, state still counted */
    mxp_model *m = make_model(&spec, MXP_PRECISION_MIXED_FP16, 1);
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.scaler.init_scale = 4;
    tc.scaler.min_scale = 2;
    tc.scaler.at_min = MXP_SCALE_FLOOR_ERROR;
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    mxp_trainer_set_grad_hook(t, poison, &in);
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err); /* 4 -> 2 */
    CHECK(res.skipped && mxp_scaler_scale(mxp_trainer_scaler(t)) == 2.0f);
    CHECK(mxp_trainer_step(t, &b, 1, &res, &err) == MXP_ERR_NONFINITE);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);

    /* fallback policy: mixed_fp16 -> mixed_bf16, loss scaling off, training goes on */
    m = make_model(&spec, MXP_PRECISION_MIXED_FP16, 1);
    tc.scaler.at_min = MXP_SCALE_FLOOR_FALLBACK;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    mxp_trainer_set_grad_hook(t, poison, &in);
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
    CHECK(!res.fallback);
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
    CHECK(res.fallback);
    mxp_train_stats st;
    mxp_trainer_stats(t, &st);
    CHECK(st.precision == MXP_PRECISION_MIXED_BF16 && !st.fp16_enabled_runtime);
    CHECK(st.current_scale == 1.0f);
    mxp_trainer_set_grad_hook(t, NULL, NULL);
    CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
    CHECK(!res.skipped && isfinite(res.loss));
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

static void test_clipping(void) {
    static float x[16 * IN], y[16 * IN];
    fill(x, sizeof x / 4, 31);
    fill(y, sizeof y / 4, 32);
    for (size_t i = 0; i < sizeof y / 4; i++) y[i] *= 100.0f; /* large grads */
    mxp_model_spec spec = two_linear();
    mxp_error err = {0};
    mxp_model *a = make_model(&spec, MXP_PRECISION_FP32, 9);
    mxp_model *b = make_model(&spec, MXP_PRECISION_FP32, 9);
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.optim.kind = MXP_OPTIM_SGD;
    tc.optim.momentum = 0;
    tc.optim.lr = 0.1f;
    tc.clip_grad_norm = 0.5f;
    mxp_trainer *ta = NULL;
    CHECK_OK(mxp_trainer_create(a, &tc, &ta, &err), &err);
    mxp_batch batch = {x, y, NULL, 16};
    mxp_step_result res;
    CHECK_OK(mxp_trainer_step(ta, &batch, 1, &res, &err), &err);
    CHECK(res.grad_norm > 0.5);
    /* SGD without momentum moved the weights by lr * clipped gradient: the
     * displacement's norm is lr * 0.5 (to the 1e-6 of clip_coef's epsilon) */
    size_t P = mxp_model_num_params(a);
    double d2 = 0;
    for (size_t i = 0; i < P; i++) {
        double d = (double)mxp_model_master(a)[i] - (double)mxp_model_master(b)[i];
        d2 += d * d;
    }
    CHECK_CLOSE(sqrt(d2), 0.1 * 0.5, 1e-6, 1e-4);
    mxp_trainer_destroy(ta);
    mxp_model_destroy(a);
    mxp_model_destroy(b);
}

/* The phase clocks: every phase ran, none is negative, and together they
 * fit inside the wall time of the steps measured around them. */
static void test_phase_times(void) {
    static float x[16 * IN], y[16 * IN];
    fill(x, sizeof x / 4, 41);
    fill(y, sizeof y / 4, 42);
    mxp_model_spec spec = two_linear();
    mxp_error err = {0};
    mxp_model *m = make_model(&spec, MXP_PRECISION_MIXED_FP16, 3);
    mxp_trainer_config tc = mxp_trainer_config_default();
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    mxp_batch batch = {x, y, NULL, 16};
    mxp_step_result res;
    double t0 = mxp_time_now();
    for (int i = 0; i < 20; i++) CHECK_OK(mxp_trainer_step(t, &batch, 1, &res, &err), &err);
    double wall = mxp_time_now() - t0;
    mxp_train_stats st;
    mxp_trainer_stats(t, &st);
    const double ph[4] = {st.time_forward_s, st.time_backward_s, st.time_safety_s,
                          st.time_optimizer_s};
    double sum = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(ph[i] > 0, "phase %d time %g", i, ph[i]);
        sum += ph[i];
    }
    CHECK_MSG(sum <= wall, "phases %g s > wall %g s", sum, wall);
    double fwd = 0, bwd = 0;
    mxp_model_phase_times(m, &fwd, &bwd);
    CHECK_CLOSE(fwd, st.time_forward_s, 1e-9, 1e-6); /* the model's clock, telescoped */
    CHECK(bwd <= st.time_backward_s * (1 + 1e-6));   /* trainer adds zeroing grads */
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

static void expect_state(mxp_trainer *t, mxp_status want, const char *needle) {
    mxp_error err = {0};
    mxp_status s = mxp_trainer_check_state(t, &err);
    CHECK_MSG(s == want, "check_state %d, expected %d: %s", (int)s, (int)want, err.msg);
    if (needle) CHECK_MSG(strstr(err.msg, needle) != NULL, "'%s' not in: %s", needle, err.msg);
}

static void test_check_state(void) {
    mxp_model_spec spec = mxp_model_spec_mlp(IN, 8, 1, 2, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 4);
    for (int pure = 0; pure < 2; pure++) {
        mxp_model *m = make_model(&spec, pure ? MXP_PRECISION_FP16 : MXP_PRECISION_FP32, 5);
        mxp_trainer_config tc = mxp_trainer_config_default();
        mxp_trainer *t = NULL;
        mxp_error err = {0};
        CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
        expect_state(t, MXP_OK, NULL);
        float *mo, *v;
        size_t n;
        int64_t steps;
        mxp_trainer_optim_state(t, &mo, &v, &n, &steps);
        /* layers.2.bias (the output layer's) starts at 8*8 + 8 + 8*2 */
        const size_t at = 8 * IN + 8 + 2 * 8 + 1;
        CHECK(n == at + 1);
        v[3] = -0.0f;
        expect_state(t, MXP_OK, NULL);
        v[at] = -1e-30f;
        expect_state(t, MXP_ERR_NONFINITE, "second moment hold 1 non-finite or negative value");
        expect_state(t, MXP_ERR_NONFINITE, "'layers.2.bias' element 1 = -1e-30");
        v[at] = 0.0f;
        mo[10] = NAN;
        expect_state(t, MXP_ERR_NONFINITE, "AdamW first moment hold 1 non-finite value");
        expect_state(t, MXP_ERR_NONFINITE, "'layers.0.weight' element 10 = nan");
        mo[10] = 0.0f;
        expect_state(t, MXP_OK, NULL);
        if (pure) { /* the FP16 working weights are the only copy */
            mxp_dtype wt;
            uint16_t *w = mxp_model_work(m, &wt);
            CHECK(wt == MXP_DTYPE_F16 && !mxp_model_master(m));
            w[8 * IN + 2] = 0x7c00; /* +Inf: layers.0.bias element 2 */
        } else {
            mxp_model_master(m)[8 * IN + 2] = INFINITY;
        }
        expect_state(t, MXP_ERR_NONFINITE, "weights hold 1 non-finite value");
        expect_state(t, MXP_ERR_NONFINITE, "'layers.0.bias' element 2 = inf");
        mxp_trainer_destroy(t);
        mxp_model_destroy(m);
    }
}

int main(void) {
    test_case_d();
    test_phase_times();
    for (int p = 0; p < MXP_PRECISION_FP8; p++) test_skip_is_bit_exact((mxp_precision)p);
    test_grad_accumulation();
    test_at_min_policies();
    test_clipping();
    test_check_state();
    return test_finish("test_trainer");
}
