/* tests/test_gauss_head.c: the Gaussian head (model.head=gaussian; PETS /
 * mbrl-lib GaussianMLP): mean and soft-bounded log-variance, Gaussian NLL.
 *
 * Oracles:
 *  - PyTorch (tests/gauss_cases.py, float64, written from the documented
 *    formulas): the loss, dloss/doutput and every parameter gradient
 *    (layers and the bounds max_logvar/min_logvar) of a small model whose
 *    bounds are moved off their init so both soft bounds bend.
 *  - central finite differences of the model's own forward loss over every
 *    parameter (FP32 model, loss summed in double).
 *  - statistics: on data y = a x + noise of known per-target std (0.5 and
 *    0.1), a model trained in every precision mode (fp32, mixed_bf16,
 *    mixed_fp16 with the loss scaler, also per layer, fp8, bf16, fp16) must
 *    find the noise variances (exp(log-variance) within a factor 1.5 of
 *    sigma^2), and its validation NLL and MSE of the mean must be near the
 *    optimum mean_j(1 + log sigma_j^2) and mean_j sigma_j^2.
 *  - the default head is the MSE model it always was (same spec, same
 *    parameter count); a Gaussian head outside regression and a last layer
 *    of odd width are refused by name.
 * Skips (77) without /usr/bin/python3 + torch (the PyTorch part only).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"
#include "xy_cases.h"

static char g_dir[] = "/tmp/mxp_gauss_XXXXXX";

enum { B = 16, IN = 3, H = 8, K = 2 };

/* The model of gauss_cases.py grad: in 3, linear:8, tanh, linear:4. */
static mxp_model *small_model(mxp_precision mode) {
    mxp_error err = {0};
    mxp_model_spec sp;
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", IN, 2 * K, MXP_LOSS_GAUSSIAN, B,
                                   &sp, &err),
             &err);
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&sp, &pol, 7, &m, &err), &err);
    return m;
}

/* Inputs with |x| up to 3 and bounds pulled in to max {0.3, 0.8}, min
 * {-0.4, -1.0}: raw log-variances fall on both sides of both bounds. */
static void fill_case(mxp_model *m, float *x, float *y) {
    for (int i = 0; i < B * IN; i++) x[i] = (float)(((i * 7919) % 61) - 30) * 0.1f;
    for (int i = 0; i < B * K; i++) y[i] = (float)(((i * 104729) % 41) - 20) * 0.05f;
    float *w = mxp_model_master(m);
    const mxp_tensor_info *mx = NULL, *mn = NULL;
    for (int t = 0; t < mxp_model_num_tensors(m); t++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, t);
        if (!strcmp(ti->name, "max_logvar")) mx = ti;
        if (!strcmp(ti->name, "min_logvar")) mn = ti;
    }
    CHECK(mx && mn && mx->count == K && mn->count == K && mx->ndim == 2 && mx->shape[0] == 1 &&
          mx->shape[1] == K);
    if (!mx || !mn) return;
    CHECK(w[mx->offset] == 0.5f && w[mn->offset] == -10.0f); /* mbrl-lib's init */
    /* the last layer's weights scaled up so raw outputs reach +-2 */
    const mxp_tensor_info *w2 = mxp_model_tensor(m, 2);
    for (size_t i = 0; i < w2->count; i++) w[w2->offset + i] *= 3.0f;
    w[mx->offset] = 0.3f, w[mx->offset + 1] = 0.8f;
    w[mn->offset] = -0.4f, w[mn->offset + 1] = -1.0f;
    mxp_model_sync_work(m);
}

/* Loss and gradients against PyTorch float64. Tolerance: the C side is
 * FP32 per element (about 20 operations: softplus, exp, two GEMMs of
 * depth <= 8) with double sums; its relative error is a few 1e-7, so
 * atol 1e-6 + rtol 1e-5 holds with margin and a wrong formula (a missing
 * sigmoid factor, the penalty's sign, a 1/2) misses by far more. The grads
 * with loss_scale 1024 are 1024 times those of scale 1 to FP32 rounding. */
static void test_vs_torch(void) {
    mxp_error err = {0};
    mxp_model *m = small_model(MXP_PRECISION_FP32);
    if (!m) return;
    const size_t P = mxp_model_num_params(m);
    CHECK_MSG(P == (size_t)(H * IN + H + 2 * K * H + 2 * K + 2 * K), "P=%zu", P);
    float x[B * IN], y[B * K];
    fill_case(m, x, y);
    float *params = calloc(P, sizeof(float));
    for (size_t i = 0; i < P; i++) params[i] = mxp_model_param(m, i);
    CHECK(test_write_file(g_dir, "params.bin", params, P * sizeof(float)) &&
          test_write_file(g_dir, "x.bin", x, sizeof x) &&
          test_write_file(g_dir, "y.bin", y, sizeof y));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/gauss_cases.py grad %s", MXP_TEST_SRC_DIR,
             g_dir);
    int rc = system(cmd);
    if (WEXITSTATUS(rc) == 77) {
        printf("test_gauss_head: PyTorch comparison skipped (no torch)\n");
    } else {
        CHECK_MSG(rc == 0, "gauss_cases.py grad failed (%d)", rc);
        double ref_loss = 0, *ref_g = calloc(P, sizeof(double));
        CHECK(test_read_file(g_dir, "ref_loss.bin", &ref_loss, sizeof ref_loss) &&
              test_read_file(g_dir, "ref_grads.bin", ref_g, P * sizeof(double)));
        mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = B};
        double loss = 0;
        mxp_model_discard_grads(m);
        CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, &err), &err);
        CHECK_CLOSE(loss, ref_loss, 1e-6, 1e-5);
        const float *g = mxp_model_grads(m);
        int bad = 0;
        for (size_t i = 0; i < P; i++)
            if (!test_close(g[i], ref_g[i], 1e-6, 1e-5) && bad++ < 5)
                CHECK_MSG(false, "grad[%zu] = %.9g, PyTorch %.9g", i, (double)g[i], ref_g[i]);
        CHECK(bad == 0);
        /* both bounds carry a gradient of their own (not just the penalty) */
        CHECK(fabs(ref_g[P - 4] - 0.01) > 1e-3 && fabs(ref_g[P - 1] + 0.01) > 1e-3);
        /* accumulate: a second backward adds the same again */
        CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, &err), &err);
        g = mxp_model_grads(m);
        for (size_t i = 0; i < P; i++) CHECK_CLOSE(g[i], 2.0 * ref_g[i], 2e-6, 1e-5);
        /* a loss scale multiplies every gradient, the bounds' included */
        mxp_model_zero_grads(m);
        CHECK_OK(mxp_model_step(m, &b, true, 1024.0f, &loss, NULL, &err), &err);
        CHECK_CLOSE(loss, ref_loss, 1e-6, 1e-5);
        g = mxp_model_grads(m);
        for (size_t i = 0; i < P; i++) CHECK_CLOSE(g[i], 1024.0 * ref_g[i], 1024e-6, 1e-5);
        free(ref_g);
    }
    free(params);
    mxp_model_destroy(m);
}

/* Every gradient against central differences of the forward loss. h =
 * 2^-7: the FP32 forward's rounding noise (|loss| ~ 1, eps 6e-8, 32 terms)
 * over 2h is ~1e-5; the truncation error h^2/6 |f'''| ~ 1e-5 with |f'''|
 * of a few; atol 1e-4 + rtol 1e-3 covers both, and no sign or factor error
 * could pass it on gradients of size 1e-2..1. */
static void test_finite_differences(void) {
    mxp_error err = {0};
    mxp_model *m = small_model(MXP_PRECISION_FP32);
    if (!m) return;
    const size_t P = mxp_model_num_params(m);
    float x[B * IN], y[B * K];
    fill_case(m, x, y);
    mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = B};
    double loss = 0;
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, &err), &err);
    float *g = calloc(P, sizeof(float));
    memcpy(g, mxp_model_grads(m), P * sizeof(float));
    float *w = mxp_model_master(m);
    const float h = 1.0f / 512.0f;
    int bad = 0;
    for (size_t i = 0; i < P; i++) {
        const float keep = w[i];
        double lp = 0, lm = 0;
        w[i] = keep + h;
        CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &lp, NULL, &err), &err);
        w[i] = keep - h;
        CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &lm, NULL, &err), &err);
        w[i] = keep;
        const double fd = (lp - lm) / (2.0 * (double)h);
        if (!test_close(g[i], fd, 1e-4, 1e-3) && bad++ < 5)
            CHECK_MSG(false, "param %zu: grad %.7g, finite difference %.7g", i, (double)g[i], fd);
    }
    CHECK(bad == 0);
    free(g);
    mxp_model_destroy(m);
}

/* The head's refusals and the default. */
static void test_config(void) {
    mxp_error err = {0};
    mxp_config cfg;
    const char *def[] = {"model.workload=regressor"};
    CHECK(make_config(def, 1, &cfg, &err) && cfg.head == MXP_LOSS_MSE);
    const char *cls[] = {"model.workload=classifier", "model.head=gaussian"};
    CHECK(!make_config(cls, 2, &cfg, &err) && strstr(err.msg, "model.head") &&
          strstr(err.msg, "deterministic"));
    const char *bad[] = {"model.head=laplace"};
    CHECK(!make_config(bad, 1, &cfg, &err) && strstr(err.msg, "gaussian"));
    mxp_model_spec sp;
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", 3, 3, MXP_LOSS_GAUSSIAN, 4, &sp,
                                   &err),
             &err);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG && !m &&
          strstr(err.msg, "gaussian") && strstr(err.msg, "2D"));
    /* the deterministic head: exactly the MSE model (no bounds) */
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear]", 3, 2, MXP_LOSS_MSE, 4, &sp, &err),
             &err);
    CHECK_OK(mxp_model_create(&sp, &pol, 1, &m, &err), &err);
    if (m) {
        CHECK(mxp_model_num_params(m) == 8 * 3 + 8 + 2 * 8 + 2 && mxp_model_num_tensors(m) == 4);
        CHECK(mxp_model_target_dim(m) == 2);
        mxp_model_destroy(m);
    }
}

/* Training in every precision mode finds the noise. */
static void test_train_modes(void) {
    const int64_t N = 4096;
    float *x = calloc((size_t)N * 2, sizeof(float)), *y = calloc((size_t)N * 2, sizeof(float));
    noisy_data(12345, N, x, y);
    const double var[2] = {0.25, 0.01};
    const double nll_opt = (2.0 + log(var[0]) + log(var[1])) / 2.0; /* -1.996 */
    const double mse_opt = (var[0] + var[1]) / 2.0;
    /* every mode is held to the statistics, and each stays in its mode
     * (no guard fallback) */
    static const struct {
        const char *mode, *extra;
    } modes[] = {
        {"fp32", "training.seed=1234"},
        {"mixed_bf16", "training.seed=1234"},
        {"mixed_fp16", "training.seed=1234"},
        {"mixed_fp16", "training.loss_scale.per_layer=true"},
        {"fp8", "training.seed=1234"},
        {"bf16", "training.seed=1234"},
        {"fp16", "training.seed=1234"},
    };
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        mxp_error err = {0};
        char prec[64];
        snprintf(prec, sizeof prec, "training.precision=%s", modes[k].mode);
        const char *kv[] = {"model.workload=regressor", "model.head=gaussian",
                            "model.layers=[linear:32, tanh, linear]", "training.batch_size=64",
                            test_quick() ? "training.epochs=8" : "training.epochs=12",
                            "training.lr=0.01", "checkpoint.enabled=false", prec,
                            "data.val_fraction=0.25", modes[k].extra};
        mxp_config cfg;
        if (!make_config(kv, 10, &cfg, &err)) {
            CHECK_MSG(false, "%s: config: %s", modes[k].mode, err.msg);
            continue;
        }
        mxp_run *run = NULL;
        CHECK_OK(xy_run_create(&cfg, x, y, N, &run, &err), &err);
        if (!run) continue;
        CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        mxp_run_eval ev;
        CHECK_OK(mxp_run_evaluate(run, &ev, &err), &err);
        mxp_run_info info;
        mxp_run_stats(run, &info);
        mxp_model *m = mxp_run_model(run);
        CHECK(mxp_model_get_spec(m)->loss == MXP_LOSS_GAUSSIAN && mxp_model_out_dim(m) == 4);
        /* the predicted variances on the last quarter (the held-out rows) */
        double mean_var[2] = {0, 0};
        float pred[64 * 4];
        const int64_t v0 = N - N / 4, nv = N / 4;
        for (int64_t i = v0; i < N; i += 64) {
            CHECK_OK(mxp_model_predict(m, x + i * 2, 64, pred, &err), &err);
            for (int b = 0; b < 64; b++)
                for (int j = 0; j < 2; j++) mean_var[j] += exp((double)pred[b * 4 + 2 + j]) / nv;
        }
        printf("test_gauss_head: %-10s %s: steps %lld val NLL %.4f (optimum %.4f) MSE %.4f "
               "(optimum %.4f) var %.4f %.5f (true 0.25 0.01) skipped %lld\n",
               modes[k].mode, modes[k].extra, (long long)info.training_steps, ev.loss, nll_opt,
               ev.mse, mse_opt, mean_var[0], mean_var[1], (long long)info.skipped_steps);
        CHECK_MSG(!strcmp(mxp_precision_name(mxp_model_policy(m)->mode), modes[k].mode),
                  "%s: the run ended in %s", modes[k].mode,
                  mxp_precision_name(mxp_model_policy(m)->mode));
        const mxp_tensor_info *mn = mxp_model_tensor(m, mxp_model_num_tensors(m) - 1);
        CHECK(!strcmp(mn->name, "min_logvar") && mxp_model_param(m, mn->offset) != -10.0f &&
              isfinite(mxp_model_param(m, mn->offset)));
        for (int j = 0; j < 2; j++)
            CHECK_MSG(mean_var[j] > var[j] / 1.5 && mean_var[j] < var[j] * 1.5,
                      "%s: predicted variance of target %d %.4g, true %.4g", modes[k].mode, j,
                      mean_var[j], var[j]);
        CHECK_MSG(isfinite(ev.loss) && fabs(ev.loss - nll_opt) < 0.25,
                  "%s: val NLL %.4f, optimum %.4f", modes[k].mode, ev.loss, nll_opt);
        CHECK_MSG(isfinite(ev.mse) && ev.mse > mse_opt * 0.8 && ev.mse < mse_opt * 1.25,
                  "%s: val MSE %.4f, optimum %.4f", modes[k].mode, ev.mse, mse_opt);
        mxp_run_destroy(run);
    }
    free(x);
    free(y);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    bool py = access("/usr/bin/python3", X_OK) == 0;
    if (py)
        test_vs_torch();
    else
        printf("test_gauss_head: PyTorch comparison skipped (no /usr/bin/python3)\n");
    test_finite_differences();
    test_config();
    test_train_modes();
    test_rm_rf(g_dir);
    return test_finish("test_gauss_head");
}
