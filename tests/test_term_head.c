/* tests/test_term_head.c: the termination head (spec.termination: a flag
 * column trained with BCE on a logit) and per-target loss weights
 * (spec.target_weights), for the deterministic and the Gaussian head.
 *
 * Oracles:
 *  - PyTorch (tests/term_cases.py, float64, written from the formulas of
 *    docs/world_models.md): the weighted loss with its BCE column and every
 *    parameter gradient, and five AdamW steps (losses and parameters).
 *  - central finite differences of the model's own forward loss over every
 *    parameter, among them a model whose only weighted column is the flag
 *    (the pure BCE gradient); the kernel's BCE on logits up to +-100 (no
 *    overflow) against the formula in double, in the generic and the
 *    active table (the AVX-512 flag column within the oracle's tolerance).
 *  - hand-built flat transitions: the flags each transition gets
 *    (terminals; dones and timeouts; without next_obs) and the refusals
 *    (dones alone, timeouts alone, the episode layout).
 *  - statistics: a world model on flat data whose termination is a known
 *    function of the next state trains in every precision mode (loss and
 *    validation BCE decrease, accuracy above the majority rate).
 *  - the default stays the old loss bit for bit: weights all 1 without
 *    termination give the plain MSE / Gaussian loss; bad specs, configs and
 *    weight lists are refused by name.
 * Parameters and gradients go through the named-tensor copies, so the
 * test runs on the mock device too. Skips the PyTorch part without
 * /usr/bin/python3 + torch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "data/transitions.h"
#include "kernels/kernels.h"
#include "testutil.h"

/* cfg from the n overrides kv (false: err says why); as xy_cases.h. */
static bool make_config(const char *const *kv, int n, mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    for (int i = 0; s == MXP_OK && i < n; i++) s = mxp_config_apply_override(b, kv[i], err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s == MXP_OK;
}

static char g_dir[] = "/tmp/mxp_term_XXXXXX";

enum { B = 16, IN = 3, H = 8, K = 2, C = K + 1 };

static float *get_params(mxp_model *m) {
    mxp_error err = {0};
    const size_t P = mxp_model_num_params(m);
    float *w = calloc(P, sizeof(float));
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, w, P * 4, &err), &err);
    return w;
}

static void set_params(mxp_model *m, const float *w) {
    mxp_error err = {0};
    CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, w,
                                  mxp_model_num_params(m) * 4, &err),
             &err);
}

static float *get_grads(mxp_model *m) {
    mxp_error err = {0};
    const size_t P = mxp_model_num_params(m);
    float *g = calloc(P, sizeof(float));
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, g, P * 4, &err), &err);
    return g;
}

/* The model of term_cases.py: in 3, linear:8, tanh, linear:O with a
 * termination column; weights w [C] (NULL: none). */
static mxp_model *small_model(bool gauss, const float *w, mxp_precision mode) {
    mxp_error err = {0};
    mxp_model_spec sp;
    const int64_t O = gauss ? 2 * K + 1 : K + 1;
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", IN, O,
                                   gauss ? MXP_LOSS_GAUSSIAN : MXP_LOSS_MSE, B, &sp, &err),
             &err);
    sp.termination = 1;
    sp.target_weights = w;
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&sp, &pol, 7, &m, &err), &err);
    if (m) CHECK(mxp_model_target_dim(m) == C && mxp_model_out_dim(m) == O);
    return m;
}

/* Inputs with |x| up to 3, flags on every third row, the last layer
 * scaled so logits reach +-3 and raw log-variances +-2; Gaussian bounds
 * pulled in (max {0.3, 0.8}, min {-0.4, -1.0}) so both soft bounds bend. */
static void fill_case(mxp_model *m, bool gauss, float *x, float *y) {
    for (int i = 0; i < B * IN; i++) x[i] = (float)(((i * 7919) % 61) - 30) * 0.1f;
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < K; j++) y[b * C + j] = (float)((((b * K + j) * 104729) % 41) - 20) * 0.05f;
        y[b * C + K] = b % 3 == 0 ? 1.0f : 0.0f;
    }
    float *w = get_params(m);
    const mxp_tensor_info *w2 = mxp_model_tensor(m, 2);
    for (size_t i = 0; i < w2->count; i++) w[w2->offset + i] *= 3.0f;
    if (gauss) {
        const int t = mxp_model_tensor_find(m, "max_logvar"), u = mxp_model_tensor_find(m, "min_logvar");
        CHECK(t >= 0 && u >= 0 && mxp_model_tensor(m, t)->count == K);
        if (t >= 0 && u >= 0) {
            const size_t mx = mxp_model_tensor(m, t)->offset, mn = mxp_model_tensor(m, u)->offset;
            CHECK(w[mx] == 0.5f && w[mn] == -10.0f);
            w[mx] = 0.3f, w[mx + 1] = 0.8f, w[mn] = -0.4f, w[mn + 1] = -1.0f;
        }
    }
    set_params(m, w);
    free(w);
}

static int run_py(const char *what, bool gauss) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/term_cases.py %s %s %s", MXP_TEST_SRC_DIR, what,
             g_dir, gauss ? "gauss" : "det");
    return WEXITSTATUS(system(cmd));
}

/* Loss and gradients against PyTorch float64 (both heads, weights 0.5, 2,
 * 1.5). Tolerance as test_gauss_head.c: FP32 per element (~20 operations,
 * GEMMs of depth <= 8) with double sums, relative error a few 1e-7; atol
 * 1e-6 + rtol 1e-5 holds with margin, while a missing weight (a factor
 * 0.5..2), a BCE sign or a wrong normaliser (C vs K) misses by far more.
 * Then five AdamW steps: the parameters after them within 1e-5 + 1e-4
 * relative (each step moves a parameter by <= lr = 0.01 times a
 * normalised gradient whose FP32 error is ~1e-6 relative). */
static void test_vs_torch(bool gauss) {
    mxp_error err = {0};
    const float tw[C] = {0.5f, 2.0f, 1.5f};
    mxp_model *m = small_model(gauss, tw, MXP_PRECISION_FP32);
    if (!m) return;
    const size_t P = mxp_model_num_params(m);
    const size_t P_want = (size_t)(H * IN + H + (gauss ? 2 * K + 1 : K + 1) * (H + 1) +
                                   (gauss ? 2 * K : 0));
    CHECK_MSG(P == P_want, "P=%zu, want %zu", P, P_want);
    CHECK(mxp_model_target_weight(m, 1) == 2.0f && isnan(mxp_model_target_weight(m, C)));
    float x[B * IN], y[B * C];
    fill_case(m, gauss, x, y);
    float *params = get_params(m);
    CHECK(test_write_file(g_dir, "params.bin", params, P * 4) &&
          test_write_file(g_dir, "x.bin", x, sizeof x) &&
          test_write_file(g_dir, "y.bin", y, sizeof y) &&
          test_write_file(g_dir, "w.bin", tw, sizeof tw));
    int rc = run_py("grad", gauss);
    if (rc == 77) {
        printf("test_term_head: PyTorch comparison skipped (no torch)\n");
        free(params);
        mxp_model_destroy(m);
        return;
    }
    CHECK_MSG(rc == 0, "term_cases.py grad failed (%d)", rc);
    double ref_loss = 0, *ref_g = calloc(P, sizeof(double));
    CHECK(test_read_file(g_dir, "ref_loss.bin", &ref_loss, sizeof ref_loss) &&
          test_read_file(g_dir, "ref_grads.bin", ref_g, P * sizeof(double)));
    mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = B};
    double loss = 0;
    mxp_model_discard_grads(m);
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, &err), &err);
    CHECK_CLOSE(loss, ref_loss, 1e-6, 1e-5);
    float *g = get_grads(m);
    int bad = 0;
    for (size_t i = 0; i < P; i++)
        if (!test_close(g[i], ref_g[i], 1e-6, 1e-5) && bad++ < 5)
            CHECK_MSG(false, "%s grad[%zu] = %.9g, PyTorch %.9g", gauss ? "gauss" : "det", i,
                      (double)g[i], ref_g[i]);
    CHECK(bad == 0);
    /* the logit's row of the last layer carries a gradient of its own */
    const mxp_tensor_info *bias = mxp_model_tensor(m, 3);
    CHECK(fabs(ref_g[bias->offset + bias->count - 1]) > 1e-3);
    free(g);
    /* a loss scale multiplies every gradient */
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &b, true, 1024.0f, &loss, NULL, &err), &err);
    g = get_grads(m);
    for (size_t i = 0; i < P; i++) CHECK_CLOSE(g[i], 1024.0 * ref_g[i], 1024e-6, 1e-5);
    free(g);
    free(ref_g);

    /* five AdamW steps through the trainer */
    rc = run_py("train", gauss);
    CHECK_MSG(rc == 0, "term_cases.py train failed (%d)", rc);
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.optim.kind = MXP_OPTIM_ADAMW;
    tc.optim.lr = 0.01f;
    tc.optim.weight_decay = 0.0f;
    tc.clip_grad_norm = 0.0f;
    tc.grad_accum_steps = 1;
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    double ref_losses[5], *ref_p = calloc(P, sizeof(double));
    CHECK(test_read_file(g_dir, "ref_losses.bin", ref_losses, sizeof ref_losses) &&
          test_read_file(g_dir, "ref_params.bin", ref_p, P * sizeof(double)));
    for (int s = 0; t && s < 5; s++) {
        mxp_step_result res;
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
        CHECK_MSG(test_close(res.loss, ref_losses[s], 1e-5, 1e-4) && !res.skipped,
                  "%s step %d: loss %.9g, PyTorch %.9g", gauss ? "gauss" : "det", s, res.loss,
                  ref_losses[s]);
    }
    CHECK(ref_losses[4] < ref_losses[0]);
    float *after = get_params(m);
    bad = 0;
    for (size_t i = 0; i < P; i++)
        if (!test_close(after[i], ref_p[i], 1e-5, 1e-4) && bad++ < 5)
            CHECK_MSG(false, "%s param %zu after 5 AdamW steps: %.9g, PyTorch %.9g",
                      gauss ? "gauss" : "det", i, (double)after[i], ref_p[i]);
    CHECK(bad == 0);
    free(after);
    free(ref_p);
    mxp_trainer_destroy(t);
    free(params);
    mxp_model_destroy(m);
}

/* Every gradient against central differences of the forward loss; h and
 * tolerance as test_gauss_head.c (FP32 forward noise ~1e-5 over 2h, the
 * truncation h^2/6 |f'''| ~ 1e-5; no sign or factor error passes). */
static void fd_case(bool gauss, const float *tw, const char *what) {
    mxp_error err = {0};
    mxp_model *m = small_model(gauss, tw, MXP_PRECISION_FP32);
    if (!m) return;
    const size_t P = mxp_model_num_params(m);
    float x[B * IN], y[B * C];
    fill_case(m, gauss, x, y);
    mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = B};
    double loss = 0;
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, &err), &err);
    float *g = get_grads(m), *w = get_params(m);
    const float h = 1.0f / 512.0f;
    int bad = 0, nonzero = 0;
    for (size_t i = 0; i < P; i++) {
        const float keep = w[i];
        double lp = 0, lm = 0;
        w[i] = keep + h;
        set_params(m, w);
        CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &lp, NULL, &err), &err);
        w[i] = keep - h;
        set_params(m, w);
        CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &lm, NULL, &err), &err);
        w[i] = keep;
        const double fd = (lp - lm) / (2.0 * (double)h);
        nonzero += fabs(fd) > 1e-3;
        if (!test_close(g[i], fd, 1e-4, 1e-3) && bad++ < 5)
            CHECK_MSG(false, "%s: param %zu: grad %.7g, finite difference %.7g", what, i,
                      (double)g[i], fd);
    }
    set_params(m, w);
    CHECK_MSG(bad == 0 && nonzero > (int)P / 4, "%s: %d mismatches, %d nonzero of %zu", what, bad,
              nonzero, P);
    free(g);
    free(w);
    mxp_model_destroy(m);
}

static void test_finite_differences(void) {
    const float only_flag[C] = {0.0f, 0.0f, 1.0f}; /* the loss is the BCE alone */
    const float mixed[C] = {0.5f, 2.0f, 1.5f};
    fd_case(false, only_flag, "pure BCE");
    fd_case(false, mixed, "deterministic, weighted");
    fd_case(true, mixed, "gaussian, weighted");
    fd_case(true, NULL, "gaussian, unweighted");
}

/* Weights of 1 without termination are the plain losses bit for bit. */
static void test_default_bits(void) {
    for (int gauss = 0; gauss < 2; gauss++) {
        mxp_error err = {0};
        mxp_model_spec sp;
        CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", IN, gauss ? 2 * K : K,
                                       gauss ? MXP_LOSS_GAUSSIAN : MXP_LOSS_MSE, B, &sp, &err),
                 &err);
        mxp_precision_policy pol;
        mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
        mxp_model *a = NULL, *c = NULL;
        CHECK_OK(mxp_model_create(&sp, &pol, 3, &a, &err), &err);
        const float ones[K] = {1.0f, 1.0f};
        sp.target_weights = ones;
        CHECK_OK(mxp_model_create(&sp, &pol, 3, &c, &err), &err);
        if (!a || !c) continue;
        CHECK(mxp_model_get_spec(c)->target_weights == NULL); /* counts as none */
        float x[B * IN], y[B * K];
        for (int i = 0; i < B * IN; i++) x[i] = (float)((i * 37) % 11) * 0.1f - 0.5f;
        for (int i = 0; i < B * K; i++) y[i] = (float)((i * 13) % 7) * 0.2f - 0.6f;
        mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = B};
        double la = 0, lc = 0;
        CHECK_OK(mxp_model_step(a, &b, true, 1.0f, &la, NULL, &err), &err);
        CHECK_OK(mxp_model_step(c, &b, true, 1.0f, &lc, NULL, &err), &err);
        float *ga = get_grads(a), *gc = get_grads(c);
        CHECK(la == lc && memcmp(ga, gc, mxp_model_num_params(a) * 4) == 0);
        free(ga);
        free(gc);
        mxp_model_destroy(a);
        mxp_model_destroy(c);
    }
}

/* The kernel on extreme logits: the overflow-free BCE (|z| = 100 gives a
 * loss of 100 when wrong and ~e^-100 when right, never Inf or NaN), its
 * gradient sigmoid(z) - t, in the generic and the active table. Oracle:
 * the formula in double (log1p(exp(-|z|)) is exact to double rounding
 * here). One row per logit, K = 1 regression column of
 * weight 0 so the loss is the flag's alone: loss = w_K mean BCE / C. */
static void test_kernel_extremes(void) {
    enum { R = 8 };
    const float z[R] = {100.0f, -100.0f, 30.0f, -30.0f, 0.0f, 1e-3f, -17.5f, 88.0f};
    const float t[R] = {0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f};
    float pred[R * 2], tgt[R * 2], dg[R * 2], da[R * 2];
    for (int r = 0; r < R; r++) pred[2 * r] = 0.0f, pred[2 * r + 1] = z[r], tgt[2 * r] = 0.0f,
                                tgt[2 * r + 1] = t[r];
    const float w[2] = {0.0f, 3.0f};
    double lg = 0, la = 0, want = 0;
    mxp_kernels_generic()->head_loss(dg, NULL, pred, tgt, NULL, w, R, 1, 1, 1.0f, &lg);
    mxp_kernels_get()->head_loss(da, NULL, pred, tgt, NULL, w, R, 1, 1, 1.0f, &la);
    for (int r = 0; r < R; r++) {
        const double zz = z[r], l = fmax(zz, 0.0) - zz * t[r] + log1p(exp(-fabs(zz)));
        want += 3.0 * l / (2.0 * R);
        const double s = 1.0 / (1.0 + exp(-zz));
        for (int k = 0; k < 2; k++) { /* the generic table, then the active one */
            const float *d = k ? da : dg;
            CHECK_MSG(test_close(d[2 * r + 1], 3.0 * (s - t[r]) / (2.0 * R), 1e-9, 1e-6),
                      "%s z=%g t=%g: dz %.9g, want %.9g", k ? "active" : "generic", (double)z[r],
                      (double)t[r], (double)d[2 * r + 1], 3.0 * (s - t[r]) / (2.0 * R));
            CHECK(d[2 * r] == 0.0f); /* weight 0: no regression gradient */
        }
    }
    CHECK_MSG(isfinite(lg) && test_close(lg, want, 1e-9, 1e-6), "loss %.12g, want %.12g", lg, want);
    /* the AVX-512 table's flag column uses vector exp / log1p
     * (kernels/x86_avx512/loops_head.c): the oracle's tolerance, not the
     * generic bits (tests/test_head_loss_isa.c bounds the difference) */
    CHECK_MSG(isfinite(la) && test_close(la, want, 1e-9, 1e-6), "active loss %.12g, want %.12g",
              la, want);
}

/* ---- flat transitions: the flags each transition gets ---------------------------- */

static mxp_dataset *flat(int n, bool next, const float *term, const float *done,
                         const float *tmo) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    float obs[16], act[16], rew[16], nx[16];
    for (int i = 0; i < n; i++) obs[i] = (float)i, act[i] = 0.5f, rew[i] = 1.0f, nx[i] = i + 1.0f;
    const int64_t s2[2] = {n, 1}, s1[1] = {n};
    CHECK_OK(mxp_dataset_add(d, "obs", MXP_ARRAY_F32, 2, s2, obs, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "actions", MXP_ARRAY_F32, 2, s2, act, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "rewards", MXP_ARRAY_F32, 1, s1, rew, &err), &err);
    if (next) CHECK_OK(mxp_dataset_add(d, "next_obs", MXP_ARRAY_F32, 2, s2, nx, &err), &err);
    if (term) CHECK_OK(mxp_dataset_add(d, "terminals", MXP_ARRAY_F32, 1, s1, term, &err), &err);
    if (done) CHECK_OK(mxp_dataset_add(d, "dones", MXP_ARRAY_F32, 1, s1, done, &err), &err);
    if (tmo) CHECK_OK(mxp_dataset_add(d, "timeouts", MXP_ARRAY_F32, 1, s1, tmo, &err), &err);
    return d;
}

/* The flags of every transition of d, or a refusal naming want_err. */
static void flags_case(mxp_dataset *d, const char *what, const float *want, int n_want,
                       const char *want_err) {
    mxp_error err = {0};
    wm_episodes w;
    if (!d) return;
    CHECK_OK(wm_episodes_open(d, &w, &err), &err);
    mxp_status s = wm_episodes_check_terminals(&w, "case", &err);
    if (want_err) {
        CHECK_MSG(s == MXP_ERR_FORMAT && strstr(err.msg, want_err) && strstr(err.msg, "terminals") &&
                      strstr(err.msg, "model.termination"),
                  "%s: %s", what, err.msg);
    } else {
        CHECK_OK(s, &err);
        CHECK_MSG(w.transitions == n_want, "%s: %lld transitions, want %d", what,
                  (long long)w.transitions, n_want);
        float t[16];
        memset(t, 0x7f, sizeof t);
        if (w.transitions == n_want) {
            wm_episode_terminals(&w, 0, w.E, t, 1);
            for (int i = 0; i < n_want; i++)
                CHECK_MSG(t[i] == want[i], "%s: transition %d flag %g, want %g", what, i,
                          (double)t[i], (double)want[i]);
        }
    }
    wm_episodes_close(&w);
    mxp_dataset_destroy(d);
}

static void test_flags(void) {
    /* 8 rows, episodes end after row 2 (terminal), 5 (timeout) and 7 (the end) */
    const float term[8] = {0, 0, 1, 0, 0, 0, 0, 0};
    const float tmo[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    const float done[8] = {0, 0, 1, 0, 0, 1, 0, 0};
    const float flags_next[8] = {0, 0, 1, 0, 0, 0, 0, 0}; /* with next_obs: row i's flag */
    flags_case(flat(8, true, term, NULL, tmo), "terminals + next_obs", flags_next, 8, NULL);
    flags_case(flat(8, true, NULL, done, tmo), "dones - timeouts + next_obs", flags_next, 8, NULL);
    /* without next_obs the last row of each episode is its final state:
     * episodes rows 0-2 (2 transitions, into the terminal row 2), 3-5 (2,
     * into the timeout row 5), 6-7 (1) */
    const float term2[8] = {0, 0, 1, 0, 0, 0, 0, 0};
    const float flags_obs[5] = {0, 1, 0, 0, 0};
    flags_case(flat(8, false, term2, NULL, tmo), "terminals, no next_obs", flags_obs, 5, NULL);
    flags_case(flat(8, false, NULL, done, tmo), "dones - timeouts, no next_obs", flags_obs, 5,
               NULL);
    flags_case(flat(8, true, NULL, done, NULL), "dones alone", NULL, 0, "dones without timeouts");
    flags_case(flat(8, true, NULL, NULL, tmo), "timeouts alone", NULL, 0, "no terminals");
    /* the episode layout: obs [E, T+1, S] */
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    float obs[2 * 4], act[2 * 3], rew[2 * 3];
    for (int i = 0; i < 8; i++) obs[i] = (float)i;
    for (int i = 0; i < 6; i++) act[i] = 0.1f * i, rew[i] = 1.0f;
    const int64_t so[3] = {2, 4, 1}, sa[3] = {2, 3, 1}, sr[2] = {2, 3};
    CHECK_OK(mxp_dataset_add(d, "obs", MXP_ARRAY_F32, 3, so, obs, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "actions", MXP_ARRAY_F32, 3, sa, act, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "rewards", MXP_ARRAY_F32, 2, sr, rew, &err), &err);
    flags_case(d, "episode layout", NULL, 0, "episode layout");
}

/* ---- training on flat data in every precision mode -------------------------------- */

/* Flat transitions of a 2-D state: next = obs + 0.2 [a, -obs0] + uniform
 * noise (std 0.03, so a Gaussian head's variances stay away from its
 * bound), terminal when |next0| > 1 (nearly a function of the input),
 * episodes cut by the terminals and a timeout every 25 rows; next_obs
 * given. */
static mxp_dataset *term_data(int n) {
    mxp_error err = {0};
    float *obs = calloc((size_t)n * 2, 4), *nx = calloc((size_t)n * 2, 4), *act = calloc((size_t)n, 4);
    float *rew = calloc((size_t)n, 4), *term = calloc((size_t)n, 4), *tmo = calloc((size_t)n, 4);
    uint64_t s = 99;
#define U01() ((double)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11) * \
               (1.0 / 9007199254740992.0))
    for (int i = 0; i < n; i++) {
        obs[2 * i] = (float)(2.4 * U01() - 1.2);
        obs[2 * i + 1] = (float)(2.0 * U01() - 1.0);
        act[i] = (float)(2.0 * U01() - 1.0);
        const double n0 = U01() - 0.5, n1 = U01() - 0.5; /* process noise, std 0.03 */
        nx[2 * i] = obs[2 * i] + 0.2f * act[i] + (float)(0.1 * n0);
        nx[2 * i + 1] = obs[2 * i + 1] - 0.2f * obs[2 * i] + (float)(0.1 * n1);
        rew[i] = -nx[2 * i] * nx[2 * i];
        term[i] = fabsf(nx[2 * i]) > 1.0f ? 1.0f : 0.0f;
        tmo[i] = term[i] == 0.0f && i % 25 == 24 ? 1.0f : 0.0f;
    }
#undef U01
    mxp_dataset *d = NULL;
    const int64_t s2[2] = {n, 2}, s1[1] = {n}, sa[2] = {n, 1};
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "obs", MXP_ARRAY_F32, 2, s2, obs, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "next_obs", MXP_ARRAY_F32, 2, s2, nx, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "actions", MXP_ARRAY_F32, 2, sa, act, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "rewards", MXP_ARRAY_F32, 1, s1, rew, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "terminals", MXP_ARRAY_F32, 1, s1, term, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "timeouts", MXP_ARRAY_F32, 1, s1, tmo, &err), &err);
    free(obs), free(nx), free(act), free(rew), free(term), free(tmo);
    return d;
}

static mxp_status wm_run(const char *const *kv, int n, mxp_dataset *d, mxp_run **run,
                         mxp_error *err) {
    *run = NULL;
    mxp_config cfg;
    if (!make_config(kv, n, &cfg, err)) return err->status ? err->status : MXP_ERR_CONFIG;
    mxp_run_options o = mxp_run_options_default();
    o.data = d;
    o.checkpoints = false;
    return mxp_run_create(&cfg, &o, run, err);
}

static void test_train_modes(void) {
    const int N = 6000;
    mxp_dataset *d = term_data(N);
    if (!d) return;
    static const struct {
        const char *mode, *head;
    } modes[] = {
        {"fp32", "deterministic"}, {"fp32", "gaussian"},     {"mixed_bf16", "deterministic"},
        {"mixed_bf16", "gaussian"}, {"mixed_fp16", "deterministic"}, {"mixed_fp16", "gaussian"},
        {"bf16", "deterministic"}, {"fp16", "deterministic"}, {"fp8", "deterministic"},
    };
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        mxp_error err = {0};
        char prec[64], head[64];
        const bool gauss = !strcmp(modes[k].head, "gaussian");
        snprintf(prec, sizeof prec, "training.precision=%s", modes[k].mode);
        snprintf(head, sizeof head, "model.head=%s", modes[k].head);
        const char *kv[] = {"model.workload=world_model", "model.termination=true",
                            "model.layers=[linear:64, tanh, linear:64, tanh, linear]",
                            "training.batch_size=64",
                            test_quick() ? "training.epochs=4" : "training.epochs=8",
                            "training.lr=0.005", prec, head, "data.val_fraction=0.2",
                            /* the Gaussian NLL of noise-free targets keeps falling (its
                             * variances shrink to the bound) and outweighs an equal BCE in
                             * the shared layers: the flag's weight balances it */
                            gauss ? "model.target_weights=[1, 1, 1, 20]"
                                  : "model.target_weights=[1, 1, 1, 2]"};
        mxp_run *run = NULL;
        CHECK_OK(wm_run(kv, 10, d, &run, &err), &err);
        if (!run) continue;
        mxp_run_eval e0, e1;
        CHECK_OK(mxp_run_evaluate(run, &e0, &err), &err);
        CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        CHECK_OK(mxp_run_evaluate(run, &e1, &err), &err);
        mxp_model *m = mxp_run_model(run);
        CHECK(mxp_model_target_dim(m) == 4 && mxp_model_get_spec(m)->termination == 1 &&
              mxp_model_target_weight(m, 3) == (gauss ? 20.0f : 2.0f));
        printf("test_term_head: %-10s %-13s val loss %.4f -> %.4f, bce %.4f -> %.4f, "
               "accuracy %.4f -> %.4f, mse %.4f\n",
               modes[k].mode, modes[k].head, e0.loss, e1.loss, e0.bce, e1.bce, e0.accuracy,
               e1.accuracy, e1.mse);
        CHECK_MSG(!strcmp(mxp_precision_name(mxp_model_policy(m)->mode), modes[k].mode),
                  "%s: the run ended in %s", modes[k].mode,
                  mxp_precision_name(mxp_model_policy(m)->mode));
        CHECK_MSG(isfinite(e1.loss) && e1.loss < e0.loss && e1.bce < 0.5 * e0.bce &&
                      e1.bce < 0.25 && e1.accuracy > 0.93,
                  "%s %s: loss %g -> %g, bce %g -> %g, accuracy %g", modes[k].mode,
                  modes[k].head, e0.loss, e1.loss, e0.bce, e1.bce, e1.accuracy);
        mxp_run_destroy(run);
    }
    mxp_dataset_destroy(d);
}

/* ---- refusals ---------------------------------------------------------------------- */

static void test_errors(void) {
    mxp_error err = {0};
    mxp_config cfg;
    const char *cls[] = {"model.workload=classifier", "model.termination=true"};
    CHECK(!make_config(cls, 2, &cfg, &err) && strstr(err.msg, "model.termination") &&
          strstr(err.msg, "world model"));
    const char *reg[] = {"model.workload=regressor", "model.termination=true"};
    CHECK(!make_config(reg, 2, &cfg, &err) && strstr(err.msg, "model.termination"));
    static const char *const bad_lists[][2] = {
        {"model.target_weights=[1, -1]", "item 1"},
        {"model.target_weights=[1, nan]", "item 1"},
        {"model.target_weights=[1, inf]", "item 1"},
        {"model.target_weights=[0, 0]", "every weight is 0"},
        {"model.target_weights=[1, x]", "not a number"},
        {"model.target_weights=[]", "empty"},
        {"model.target_weights=[1, 2", "closing"},
    };
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        const char *kv[] = {bad_lists[i][0]};
        CHECK_MSG(!make_config(kv, 1, &cfg, &err) && strstr(err.msg, "model.target_weights") &&
                      strstr(err.msg, bad_lists[i][1]) && strstr(err.msg, "accepted"),
                  "%s: %s", bad_lists[i][0], err.msg);
    }
    const char *gpt[] = {"model.workload=gpt", "model.target_weights=[1]"};
    CHECK(!make_config(gpt, 2, &cfg, &err) && strstr(err.msg, "regression"));
    /* the built-in environments record no terminations */
    const char *env[] = {"model.termination=true", "data.trajectories=8"};
    mxp_run *run = NULL;
    CHECK(wm_run(env, 2, NULL, &run, &err) == MXP_ERR_CONFIG && !run &&
          strstr(err.msg, "pendulum") && strstr(err.msg, "data.path"));
    /* the wrong length, named with what the columns are */
    mxp_dataset *d = term_data(600);
    const char *len3[] = {"model.termination=true", "model.target_weights=[1, 1, 1]"};
    CHECK(wm_run(len3, 2, d, &run, &err) == MXP_ERR_CONFIG && !run &&
          strstr(err.msg, "exactly 4") && strstr(err.msg, "2 state deltas, the reward, the "
                                                          "termination flag"));
    const char *len4[] = {"model.target_weights=[1, 1, 1, 1]"}; /* no termination: 3 */
    CHECK(wm_run(len4, 1, d, &run, &err) == MXP_ERR_CONFIG && !run && strstr(err.msg, "exactly 3"));
    mxp_dataset_destroy(d);
    /* spec level */
    mxp_model_spec sp;
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", 3, 4, MXP_LOSS_GAUSSIAN, 4, &sp,
                                   &err),
             &err);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    sp.termination = 1; /* 4 = 2K + 1 has no integer K */
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG && !m &&
          strstr(err.msg, "2K + 1"));
    sp.termination = 2;
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG &&
          strstr(err.msg, "spec.termination=2"));
    sp.termination = 0;
    const float neg[2] = {1.0f, -0.5f}, zero[2] = {0.0f, 0.0f};
    sp.target_weights = neg;
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG &&
          strstr(err.msg, "target_weights[1]"));
    sp.target_weights = zero;
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG &&
          strstr(err.msg, "all 2 weights are 0"));
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", 3, 5, MXP_LOSS_XENT, 4, &sp, &err),
             &err);
    sp.termination = 1;
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG &&
          strstr(err.msg, "loss xent"));
    int64_t n = 0;
    float w3[3];
    CHECK(mxp_model_target_weights_parse(" [0.5, 2 ,1e-3] ", 3, w3, &n, NULL, &err) == MXP_OK &&
          n == 3 && w3[0] == 0.5f && w3[1] == 2.0f && w3[2] == 1e-3f);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (access("/usr/bin/python3", X_OK) == 0) {
        test_vs_torch(false);
        test_vs_torch(true);
    } else {
        printf("test_term_head: PyTorch comparison skipped (no /usr/bin/python3)\n");
    }
    test_finite_differences();
    test_kernel_extremes();
    test_default_bits();
    test_flags();
    test_errors();
    test_train_modes();
    test_rm_rf(g_dir);
    return test_finish("test_term_head");
}
