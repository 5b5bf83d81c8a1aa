/* tests/test_fp8.c: FP8 delayed scaling and the emulated FP8 mode.
 *
 *   - the scaling rule: (fp8_max / amax) / 2^margin, old scale kept for
 *     amax 0, negative, NaN, Inf, or a scale that would overflow float;
 *   - the amax history: max over a window of history_len steps (an old
 *     spike ages out after exactly history_len updates), most_recent,
 *     several observations per step, a non-finite amax freezing the scale
 *     while it is in the window;
 *   - quantisation against the num module's reference conversions (every
 *     FP8 code, the midpoints between codes, random values, saturation,
 *     NaN) and its amax;
 *   - checkpoint state: export, import into a fresh object, identical
 *     continuation; malformed state rejected, object unchanged;
 *   - the FP8 linear layer against a hand-written oracle (BF16-stored
 *     input, E4M3 x and W, E5M2 dY, each with its delayed scale; double
 *     accumulation), for the first step (scales 1) and the second (scales
 *     from the first step's amax), forward and weight gradient;
 *   - model plumbing: state present only in fp8 mode, tensor count, no amax
 *     observed outside training steps, precision switches;
 *   - fp8 trains the world model to a validation loss near FP32;
 *   - a canary divergence that persists across a rollback falls back
 *     (the second rollback goes to the same state) instead of rolling
 *     back to ever newer states.
 */
#include <mixprec/guard.h>
#include <mixprec/world_model.h>

#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void test_rule(void) {
    CHECK(mxp_fp8_scale_rule(2.0f, 1.0f, 448.0, 0) == 224.0f);
    CHECK(mxp_fp8_scale_rule(2.0f, 1.0f, 448.0, 1) == 112.0f);
    CHECK(mxp_fp8_scale_rule(2.0f, 1.0f, 448.0, 3) == 28.0f);
    CHECK(mxp_fp8_scale_rule(57344.0f, 5.0f, 57344.0, 0) == 1.0f);
    CHECK(mxp_fp8_scale_rule(0.001f, 1.0f, 57344.0, 0) == (float)(57344.0 / (double)0.001f));
    CHECK(mxp_fp8_scale_rule(0.0f, 3.5f, 448.0, 0) == 3.5f);
    CHECK(mxp_fp8_scale_rule(-1.0f, 3.5f, 448.0, 0) == 3.5f);
    CHECK(mxp_fp8_scale_rule(NAN, 3.5f, 448.0, 0) == 3.5f);
    CHECK(mxp_fp8_scale_rule(INFINITY, 3.5f, 448.0, 0) == 3.5f);
    CHECK(mxp_fp8_scale_rule(1e-45f, 3.5f, 448.0, 0) == 3.5f); /* 448/1e-45 overflows float */

    mxp_fp8_config c = mxp_fp8_config_default();
    CHECK(c.history_len == 16 && c.amax_algo == MXP_FP8_AMAX_MAX && c.margin == 0);
    mxp_error err = {0};
    CHECK_OK(mxp_fp8_config_validate(&c, &err), &err);
    c.history_len = 0;
    CHECK(mxp_fp8_config_validate(&c, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "training.fp8.history_len=0") != NULL);
    c = mxp_fp8_config_default();
    c.margin = -1;
    CHECK(mxp_fp8_config_validate(&c, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "margin") != NULL);
    c = mxp_fp8_config_default();
    c.amax_algo = MXP_FP8_AMAX_ALGO_COUNT;
    CHECK(mxp_fp8_config_validate(&c, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strcmp(mxp_fp8_amax_algo_name(MXP_FP8_AMAX_MOST_RECENT), "most_recent") == 0);
}

static mxp_fp8_scaling *make_scaling(int H, mxp_fp8_amax_algo algo, int margin) {
    mxp_fp8_config c = {H, algo, margin};
    mxp_dtype fmt[2] = {MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2};
    mxp_fp8_scaling *s = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_fp8_scaling_create(&c, 2, fmt, &s, &err), &err);
    return s;
}

static void test_history(void) {
    mxp_fp8_scaling *s = make_scaling(4, MXP_FP8_AMAX_MAX, 0);
    if (!s) return;
    CHECK(mxp_fp8_scaling_scale(s, 0) == 1.0f && mxp_fp8_scaling_scale(s, 1) == 1.0f);
    /* step 1: spike of 8 on tensor 0 (two observations: the max counts) */
    mxp_fp8_scaling_observe(s, 0, 3.0f);
    mxp_fp8_scaling_observe(s, 0, 8.0f);
    mxp_fp8_scaling_observe(s, 0, 5.0f);
    mxp_fp8_scaling_observe(s, 1, 2.0f);
    mxp_fp8_scaling_update(s);
    CHECK(mxp_fp8_scaling_scale(s, 0) == 56.0f);     /* 448 / 8 */
    CHECK(mxp_fp8_scaling_scale(s, 1) == 28672.0f);  /* 57344 / 2 */
    CHECK(mxp_fp8_scaling_scale_inv(s, 0) == (float)(1.0 / 56.0));
    /* steps 2..4: amax 1; the spike stays in the window of 4 */
    for (int k = 2; k <= 4; k++) {
        mxp_fp8_scaling_observe(s, 0, 1.0f);
        mxp_fp8_scaling_update(s);
        CHECK_MSG(mxp_fp8_scaling_scale(s, 0) == 56.0f, "step %d scale %g", k,
                  (double)mxp_fp8_scaling_scale(s, 0));
        CHECK(mxp_fp8_scaling_scale(s, 1) == 28672.0f); /* zeros pushed, 2 still in window */
    }
    /* step 5: the spike ages out */
    mxp_fp8_scaling_observe(s, 0, 1.0f);
    mxp_fp8_scaling_update(s);
    CHECK(mxp_fp8_scaling_scale(s, 0) == 448.0f);
    /* tensor 1 saw nothing since step 1: its window is all zeros now -> kept */
    CHECK(mxp_fp8_scaling_scale(s, 1) == 28672.0f);
    CHECK(mxp_fp8_scaling_steps(s) == 5);

    /* a NaN amax freezes the scale while it is in the window */
    mxp_fp8_scaling_observe(s, 0, 2.0f);
    mxp_fp8_scaling_observe(s, 0, NAN);
    mxp_fp8_scaling_observe(s, 0, 100.0f); /* does not displace the NaN */
    mxp_fp8_scaling_update(s);
    CHECK(mxp_fp8_scaling_scale(s, 0) == 448.0f);
    for (int k = 0; k < 3; k++) {
        mxp_fp8_scaling_observe(s, 0, 4.0f);
        mxp_fp8_scaling_update(s);
        CHECK(mxp_fp8_scaling_scale(s, 0) == 448.0f);
    }
    mxp_fp8_scaling_observe(s, 0, 4.0f);
    mxp_fp8_scaling_update(s);
    CHECK(mxp_fp8_scaling_scale(s, 0) == 112.0f); /* NaN aged out: 448 / 4 */
    mxp_fp8_scaling_destroy(s);

    /* most_recent follows the newest amax, margin halves */
    s = make_scaling(8, MXP_FP8_AMAX_MOST_RECENT, 1);
    if (!s) return;
    const float seq[] = {8.0f, 1.0f, 0.5f, 64.0f};
    const float want[] = {28.0f, 224.0f, 448.0f, 3.5f};
    for (int k = 0; k < 4; k++) {
        mxp_fp8_scaling_observe(s, 0, seq[k]);
        mxp_fp8_scaling_update(s);
        CHECK_MSG(mxp_fp8_scaling_scale(s, 0) == want[k], "most_recent step %d: %g", k,
                  (double)mxp_fp8_scaling_scale(s, 0));
    }
    mxp_fp8_scaling_observe(s, 0, INFINITY);
    mxp_fp8_scaling_update(s);
    CHECK(mxp_fp8_scaling_scale(s, 0) == 3.5f);
    mxp_fp8_scaling_update(s); /* nothing observed: amax 0 -> kept */
    CHECK(mxp_fp8_scaling_scale(s, 0) == 3.5f);
    mxp_fp8_scaling_destroy(s);

    mxp_error err = {0};
    mxp_fp8_config c = mxp_fp8_config_default();
    mxp_dtype badf[1] = {MXP_DTYPE_BF16};
    mxp_fp8_scaling *bad = NULL;
    CHECK(mxp_fp8_scaling_create(&c, 1, badf, &bad, &err) == MXP_ERR_INVALID_ARG && !bad);
    CHECK(strstr(err.msg, "bf16") != NULL);
    CHECK(mxp_fp8_scaling_create(&c, 0, badf, &bad, &err) == MXP_ERR_INVALID_ARG);
    mxp_fp8_scaling_destroy(NULL);
}

/* Reference: value of fp8(v), saturating, through num's scalar conversions. */
static float ref_q(mxp_dtype f, float v) {
    if (f == MXP_DTYPE_F8_E4M3) return mxp_fp8_e4m3_to_f32(mxp_f32_to_fp8_e4m3(v, MXP_FP8_SATURATE));
    if (!isnan(v) && v > 57344.0f) v = 57344.0f;
    if (!isnan(v) && v < -57344.0f) v = -57344.0f;
    return mxp_fp8_e5m2_to_f32(mxp_f32_to_fp8_e5m2(v));
}

static bool same(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void test_quantize(void) {
    enum { N = 200000 };
    float *src = malloc(N * sizeof(float)), *dst = malloc(N * sizeof(float));
    if (!src || !dst) {
        CHECK(false);
        return;
    }
    const mxp_dtype fmts[2] = {MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2};
    for (int fi = 0; fi < 2; fi++) {
        mxp_dtype f = fmts[fi];
        size_t n = 0;
        /* every code, and the midpoints and near-midpoints to its neighbour */
        for (int c = 0; c < 256; c++) {
            float v = f == MXP_DTYPE_F8_E4M3 ? mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){(uint8_t)c})
                                             : mxp_fp8_e5m2_to_f32((mxp_fp8_e5m2){(uint8_t)c});
            if (!isfinite(v)) continue;
            float w = f == MXP_DTYPE_F8_E4M3
                          ? mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){(uint8_t)(c + 1)})
                          : mxp_fp8_e5m2_to_f32((mxp_fp8_e5m2){(uint8_t)(c + 1)});
            src[n++] = v;
            if (isfinite(w) && (c & 0x7f) != 0x7f) {
                float mid = (float)(((double)v + (double)w) / 2);
                src[n++] = mid;
                src[n++] = nextafterf(mid, INFINITY);
                src[n++] = nextafterf(mid, -INFINITY);
            }
        }
        const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 448.0f, 449.0f, 463.9f,
                                  464.0f, 480.0f, 1e6f, -1e6f, 57344.0f, 61439.0f, 61440.0f,
                                  1e30f, INFINITY, -INFINITY, 1.5e-5f, 7.6e-6f, 3.0e-3f};
        for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) src[n++] = specials[i];
        mxp_rng r;
        mxp_rng_init(&r, 99 + (uint64_t)fi);
        while (n < N) { /* random magnitudes over 2^-30 .. 2^20, both signs */
            float m = ldexpf(1.0f + mxp_rng_uniform(&r), (int)mxp_rng_below(&r, 50) - 30);
            src[n++] = (mxp_rng_u32(&r) & 1) ? -m : m;
        }
        float amax = mxp_fp8_quantize(f, dst, src, N, 1.0f);
        CHECK(isinf(amax)); /* INFINITY is among the specials */
        size_t bad = 0;
        for (size_t i = 0; i < N; i++)
            if (!same(dst[i], ref_q(f, src[i])) && bad++ < 5)
                printf("  %s: q(%a) = %a, reference %a\n", mxp_dtype_name(f), (double)src[i],
                       (double)dst[i], (double)ref_q(f, src[i]));
        CHECK_MSG(bad == 0, "%s: %zu mismatches", mxp_dtype_name(f), bad);

        /* scaling and amax on finite data; in place */
        float x[5] = {0.1f, -3.0f, 2.5f, 0.0f, -0.01f};
        float y[5];
        memcpy(y, x, sizeof x);
        amax = mxp_fp8_quantize(f, y, y, 5, 100.0f);
        CHECK(amax == 3.0f);
        for (int i = 0; i < 5; i++) CHECK(same(y[i], ref_q(f, x[i] * 100.0f)));
        x[2] = NAN;
        x[1] = INFINITY;
        CHECK(isnan(mxp_fp8_quantize(f, y, x, 5, 1.0f))); /* NaN wins over Inf */
        CHECK(isnan(y[2]) && y[1] == (float)mxp_dtype_info(f)->max);
    }
    free(src);
    free(dst);
}

static void test_state(void) {
    mxp_fp8_scaling *a = make_scaling(3, MXP_FP8_AMAX_MAX, 0);
    mxp_fp8_scaling *b = make_scaling(3, MXP_FP8_AMAX_MAX, 0);
    if (!a || !b) return;
    const float obs[5][2] = {{4, 1}, {2, 8}, {NAN, 3}, {1, 0.5f}, {0.25f, 2}};
    for (int k = 0; k < 5; k++) {
        mxp_fp8_scaling_observe(a, 0, obs[k][0]);
        mxp_fp8_scaling_observe(a, 1, obs[k][1]);
        mxp_fp8_scaling_update(a);
    }
    size_t n = mxp_fp8_scaling_state_size(a);
    CHECK(n == 2 * (1 + 3));
    float st[8], st2[8];
    mxp_fp8_scaling_get_state(a, st);
    CHECK(st[0] == mxp_fp8_scaling_scale(a, 0) && st[1] == mxp_fp8_scaling_scale(a, 1));
    /* histories oldest first: steps 3, 4, 5 */
    CHECK(isnan(st[2]) && st[3] == 1.0f && st[4] == 0.25f);
    CHECK(st[5] == 3.0f && st[6] == 0.5f && st[7] == 2.0f);
    mxp_error err = {0};
    CHECK_OK(mxp_fp8_scaling_set_state(b, st, n, 5, &err), &err);
    CHECK(mxp_fp8_scaling_steps(b) == 5);
    for (int k = 0; k < 4; k++) { /* identical continuation */
        float v = (float)(k + 1) * 0.75f;
        mxp_fp8_scaling_observe(a, 0, v);
        mxp_fp8_scaling_observe(b, 0, v);
        mxp_fp8_scaling_update(a);
        mxp_fp8_scaling_update(b);
        mxp_fp8_scaling_get_state(a, st);
        mxp_fp8_scaling_get_state(b, st2);
        for (size_t i = 0; i < n; i++) CHECK(same(st[i], st2[i]));
    }
    /* malformed: wrong size, bad scale, negative history; b unchanged */
    mxp_fp8_scaling_get_state(b, st2);
    float bad[8];
    memcpy(bad, st2, sizeof bad);
    CHECK(mxp_fp8_scaling_set_state(b, bad, n - 1, 0, &err) == MXP_ERR_FORMAT);
    CHECK(strstr(err.msg, "accepted: 8") != NULL);
    bad[1] = 0.0f;
    CHECK(mxp_fp8_scaling_set_state(b, bad, n, 0, &err) == MXP_ERR_FORMAT);
    CHECK(strstr(err.msg, "scale[1]") != NULL);
    bad[1] = st2[1];
    bad[6] = -1.0f;
    CHECK(mxp_fp8_scaling_set_state(b, bad, n, 0, &err) == MXP_ERR_FORMAT);
    CHECK(mxp_fp8_scaling_set_state(b, st2, n, -1, &err) == MXP_ERR_FORMAT);
    mxp_fp8_scaling_get_state(b, st);
    for (size_t i = 0; i < n; i++) CHECK(same(st[i], st2[i]));
    mxp_fp8_scaling_destroy(a);
    mxp_fp8_scaling_destroy(b);
}

/* ---- the FP8 linear layer against an oracle ---------------------------------- */

enum { LB = 4, LI = 6, LO = 3 };

/* Oracle forward of one linear layer in fp8 mode: x stored BF16, then E4M3
 * with scale sx; W (FP32 master) E4M3 with scale sw; y in double. */
static void oracle_forward(const float *x, const float *w, const float *bias, float sx, float sw,
                           double *y, float *xq, float *wq) {
    for (int i = 0; i < LB * LI; i++)
        xq[i] = ref_q(MXP_DTYPE_F8_E4M3, mxp_round_to(MXP_DTYPE_BF16, x[i]) * sx);
    for (int i = 0; i < LO * LI; i++) wq[i] = ref_q(MXP_DTYPE_F8_E4M3, w[i] * sw);
    for (int b = 0; b < LB; b++)
        for (int o = 0; o < LO; o++) {
            double acc = 0;
            for (int i = 0; i < LI; i++) acc += (double)xq[b * LI + i] * (double)wq[o * LI + i];
            y[b * LO + o] = acc / ((double)sx * (double)sw) + (double)bias[o];
        }
}

static void test_linear_oracle(void) {
    mxp_model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.in_dim = LI;
    spec.max_batch = LB;
    spec.n_layers = 1;
    spec.layers[0] = (mxp_layer_spec){MXP_LAYER_LINEAR, LO, 0.0};
    spec.loss = MXP_LOSS_MSE;
    spec.layernorm_eps = 1e-5f;
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP8, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&spec, &pol, 5, &m, &err), &err);
    if (!m) return;
    mxp_fp8_scaling *f = mxp_model_fp8(m);
    CHECK(f && mxp_fp8_scaling_num_tensors(f) == 3);
    CHECK(mxp_fp8_scaling_format(f, 0) == MXP_DTYPE_F8_E4M3);
    CHECK(mxp_fp8_scaling_format(f, 1) == MXP_DTYPE_F8_E4M3);
    CHECK(mxp_fp8_scaling_format(f, 2) == MXP_DTYPE_F8_E5M2);
    float *w = mxp_model_master(m);
    mxp_rng r;
    mxp_rng_init(&r, 3);
    float x[LB * LI], y[LB * LO], pred[LB * LO];
    for (int i = 0; i < LB * LI; i++) x[i] = 4.0f * mxp_rng_normal(&r);
    for (int i = 0; i < LB * LO; i++) y[i] = mxp_rng_normal(&r);
    float bias[LO];
    memcpy(bias, w + LO * LI, sizeof bias);
    float w0[LO * LI];
    memcpy(w0, w, sizeof w0);

    double yo[LB * LO];
    float xq[LB * LI], wq[LO * LI];
    for (int step = 0; step < 2; step++) {
        float sx = mxp_fp8_scaling_scale(f, 0), sw = mxp_fp8_scaling_scale(f, 1);
        float sg = mxp_fp8_scaling_scale(f, 2);
        if (step == 0) CHECK(sx == 1.0f && sw == 1.0f && sg == 1.0f);
        /* predict: forward only, must not observe amax */
        CHECK_OK(mxp_model_predict(m, x, LB, pred, &err), &err);
        CHECK(mxp_fp8_scaling_steps(f) == step);
        oracle_forward(x, w0, bias, sx, sw, yo, xq, wq);
        for (int i = 0; i < LB * LO; i++) CHECK_CLOSE(pred[i], yo[i], 1e-5, 1e-5);

        /* a training step: loss MSE with loss scale 8 */
        mxp_model_zero_grads(m);
        mxp_batch bt = {.x = x, .y = y, .B = LB};
        double loss = 0;
        CHECK_OK(mxp_model_step(m, &bt, true, 8.0f, &loss, NULL, &err), &err);
        /* oracle gradient: dY = 8 * 2 (pred - y) / (B*O) in FP32, stored BF16,
         * quantised E5M2 with sg; dW = dYq^T xq / (sg * sx); db = sum dY(bf16) */
        float gq[LB * LO];
        double db[LO] = {0};
        float amax_g = 0;
        for (int i = 0; i < LB * LO; i++) {
            float d = (float)(16.0 / (LB * LO)) * ((float)yo[i] - y[i]);
            float ds = mxp_round_to(MXP_DTYPE_BF16, d);
            if (fabsf(ds) > amax_g) amax_g = fabsf(ds);
            db[i % LO] += ds;
            gq[i] = ref_q(MXP_DTYPE_F8_E5M2, ds * sg);
        }
        const float *g = mxp_model_grads(m);
        for (int o = 0; o < LO; o++) {
            for (int i = 0; i < LI; i++) {
                double acc = 0;
                for (int b = 0; b < LB; b++) acc += (double)gq[b * LO + o] * xq[b * LI + i];
                CHECK_CLOSE(g[o * LI + i], acc / ((double)sg * sx), 1e-4, 1e-3);
            }
            CHECK_CLOSE(g[LO * LI + o], db[o], 1e-4, 1e-3);
        }
        /* the scales after the step come from this step's amax */
        float ax = 0, aw = 0;
        for (int i = 0; i < LB * LI; i++)
            ax = fmaxf(ax, fabsf(mxp_round_to(MXP_DTYPE_BF16, x[i])));
        for (int i = 0; i < LO * LI; i++) aw = fmaxf(aw, fabsf(w0[i]));
        CHECK(mxp_fp8_scaling_steps(f) == step + 1);
        CHECK(mxp_fp8_scaling_scale(f, 0) == mxp_fp8_scale_rule(ax, 1, 448, 0) || step > 0);
        CHECK(mxp_fp8_scaling_scale(f, 1) == mxp_fp8_scale_rule(aw, 1, 448, 0) || step > 0);
        CHECK_MSG(fabsf(mxp_fp8_scaling_scale(f, 2) / mxp_fp8_scale_rule(amax_g, 1, 57344, 0) -
                        1.0f) < 1e-3f || step > 0,
                  "grad scale %g vs %g", (double)mxp_fp8_scaling_scale(f, 2),
                  (double)mxp_fp8_scale_rule(amax_g, 1, 57344, 0));
        CHECK(mxp_fp8_scaling_scale(f, 0) > 10.0f); /* |x| ~ 4..16 -> scale ~ 30-100 */
    }

    /* switching away drops the state; back in gives a fresh one */
    mxp_precision_policy p32;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &p32);
    CHECK_OK(mxp_model_set_policy(m, &p32, &err), &err);
    CHECK(mxp_model_fp8(m) == NULL);
    CHECK_OK(mxp_model_set_policy(m, &pol, &err), &err);
    CHECK(mxp_model_fp8(m) && mxp_fp8_scaling_steps(mxp_model_fp8(m)) == 0);
    mxp_fp8_config c = {4, MXP_FP8_AMAX_MOST_RECENT, 2};
    CHECK_OK(mxp_model_set_fp8_config(m, &c, &err), &err);
    CHECK(mxp_fp8_scaling_config(mxp_model_fp8(m))->history_len == 4);
    c.history_len = 0;
    CHECK(mxp_model_set_fp8_config(m, &c, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_fp8_scaling_config(mxp_model_fp8(m))->history_len == 4); /* unchanged */
    mxp_model_destroy(m);

    /* an MLP has 3 tensors per linear layer; fp32 has no state */
    mxp_model_spec mlp = mxp_model_spec_mlp(4, 8, 3, 2, MXP_LAYER_GELU, true, MXP_LOSS_MSE, 4);
    CHECK_OK(mxp_model_create(&mlp, &pol, 1, &m, &err), &err);
    if (m) CHECK(mxp_fp8_scaling_num_tensors(mxp_model_fp8(m)) == 12);
    mxp_model_destroy(m);
    CHECK_OK(mxp_model_create(&mlp, &p32, 1, &m, &err), &err);
    if (m) CHECK(mxp_model_fp8(m) == NULL);
    mxp_model_destroy(m);
}

/* fp8 (emulated) trains the world model close to FP32 (the canary off, so
 * the run stays in fp8; see docs/workloads.md for the E4M3 input floor). */
static void test_world_model(void) {
    double val[2] = {0, 0};
    const mxp_precision modes[2] = {MXP_PRECISION_FP32, MXP_PRECISION_FP8};
    for (int k = 0; k < 2; k++) {
        mxp_config_builder *b = NULL;
        mxp_error err = {0};
        CHECK_OK(mxp_config_builder_create(&b, &err), &err);
        const char *kv[] = {"data.trajectories=40", "data.episode_length=100", "model.hidden=64",
                            "training.epochs=4", "training.batch_size=32",
                            /* the numerics alone: the canary's divergence rule would
                             * move this fp8 run off fp8 (test_canary_fallback) */
                            "guard.canary.every_steps=0",
                            k ? "training.precision=fp8" : "training.precision=fp32"};
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
            CHECK_OK(mxp_config_apply_override(b, kv[i], &err), &err);
        mxp_config cfg;
        CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
        mxp_config_builder_destroy(b);
        mxp_world_model *wm = NULL;
        CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
        if (!wm) return;
        CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
        CHECK_OK(mxp_world_model_validation_loss(wm, &val[k], &err), &err);
        mxp_train_stats st;
        mxp_trainer_stats(mxp_world_model_trainer(wm), &st);
        CHECK(st.precision == modes[k]);
        printf("  world model %-5s val loss %.6f (skipped %lld)%s\n",
               mxp_precision_name(modes[k]), val[k], (long long)st.skipped_steps,
               k ? " [emulated]" : "");
        if (k) {
            mxp_fp8_scaling *f = mxp_model_fp8(mxp_world_model_model(wm));
            /* one update per training micro-step; the scales moved off 1 */
        CHECK(f && mxp_fp8_scaling_steps(f) >= st.optimizer_steps);
        CHECK(f && mxp_fp8_scaling_scale(f, 0) != 1.0f && mxp_fp8_scaling_scale(f, 2) != 1.0f);
            CHECK(mxp_fp8_scaling_config(f)->history_len == 16);
        }
        mxp_world_model_destroy(wm);
    }
    CHECK_MSG(isfinite(val[1]) && val[1] < 2.0 * val[0] + 1e-3,
              "fp8 val loss %g vs fp32 %g", val[1], val[0]);
}

/* A canary divergence that is the format's own (fp8's forward differs from
 * FP32's at the same weights however often the run rolls back) must end in
 * a fallback, not in rollbacks to ever newer states until the budget is
 * spent. Forced here with canary_divergence_high.threshold=0 (any
 * divergence fires) and canary/snapshot every 20 steps: the first firing
 * rolls back to the state before step 1; the second (20 replayed steps
 * later, no rollback point saved in between) rolls back to the SAME state
 * and falls back from fp8 (docs/safety.md: "a second rollback to the same
 * state also falls back"). Before the fix the first replayed step became a
 * rollback point at once, so the second rollback went to step 21 and fp8
 * stayed. */
static void test_canary_fallback(void) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    const char *kv[] = {"data.trajectories=40", "data.episode_length=100", "model.hidden=64",
                        "training.epochs=1", "training.batch_size=32",
                        "training.precision=fp8", "guard.canary.every_steps=20",
                        "guard.canary.batch_size=32", "guard.rollback.snapshot_every=20",
                        "guard.canary_divergence_high.threshold=0"};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, kv[i], &err), &err);
    mxp_config cfg;
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    mxp_world_model *wm = NULL;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    if (!wm) return;
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    size_t n = 0;
    const mxp_guard_event *ev = mxp_guard_events(mxp_world_model_guard(wm), &n);
    const mxp_guard_event *hit[2] = {NULL, NULL};
    int k = 0;
    for (size_t i = 0; i < n && k < 2; i++)
        if (ev[i].kind == MXP_EVENT_RULE && ev[i].rule == MXP_RULE_CANARY_DIVERGENCE_HIGH)
            hit[k++] = &ev[i];
    CHECK_MSG(k == 2, "canary_divergence_high fired %d times; expected >= 2", k);
    if (k == 2) {
        printf("  canary rollbacks: step %lld -> %lld (%s), step %lld -> %lld (%s -> %s)\n",
               (long long)hit[0]->step, (long long)hit[0]->rollback_to,
               mxp_precision_name(hit[0]->to), (long long)hit[1]->step,
               (long long)hit[1]->rollback_to, mxp_precision_name(hit[1]->from),
               mxp_precision_name(hit[1]->to));
        CHECK(hit[0]->step == 20 && hit[1]->step == 40);
        CHECK(hit[0]->value > 0.0 && hit[1]->value > 0.0);
        CHECK((hit[0]->taken & MXP_ACT_ROLLBACK) && !(hit[0]->taken & MXP_ACT_FALLBACK));
        CHECK(hit[0]->from == MXP_PRECISION_FP8 && hit[0]->to == MXP_PRECISION_FP8);
        CHECK_MSG(hit[1]->rollback_to == hit[0]->rollback_to,
                  "second rollback went to step %lld, the first to %lld",
                  (long long)hit[1]->rollback_to, (long long)hit[0]->rollback_to);
        CHECK((hit[1]->taken & MXP_ACT_ROLLBACK) && (hit[1]->taken & MXP_ACT_FALLBACK));
        CHECK(hit[1]->from == MXP_PRECISION_FP8 && hit[1]->to != MXP_PRECISION_FP8);
    }
    CHECK(mxp_model_policy(mxp_world_model_model(wm))->mode != MXP_PRECISION_FP8);
    mxp_world_model_destroy(wm);
}

int main(void) {
    test_rule();
    test_history();
    test_quantize();
    test_state();
    test_linear_oracle();
    test_world_model();
    test_canary_fallback();
    return test_finish("test_fp8");
}
