/* tests/test_ensemble.c: ensembles (model.ensemble=E, spec.ensemble;
 * docs/world_models.md).
 *
 * Oracles:
 *  - the single model (itself checked against PyTorch and finite
 *    differences in test_gauss_head.c): an ensemble whose member blocks
 *    hold the weights of E separately created models gives, on a batch of
 *    E member blocks, each member's gradients and predictions bit for bit
 *    as that model alone on its block, and the mean of their losses;
 *    deterministic and Gaussian heads, fp32 and mixed_bf16; also after
 *    mxp_model_discard_grads over a slab holding garbage (every member's
 *    block is written, none added to void memory).
 *  - layout: tensor names members.<e>.<name>, member e's block at e P/E;
 *    member 0 initialised as the single model of the same seed.
 *  - statistics: a 5-member Gaussian ensemble trained (each member on its
 *    own bootstrap) on y = a x + noise of known std, x in [-1, 1]^2, in
 *    fp32, mixed_bf16 and mixed_fp16: the aleatoric variance (mean of the
 *    members' variances) finds the noise (within 1.5x), the epistemic one
 *    (variance of the member means) is small inside the data and at least
 *    5 times larger far outside it (x = 4), where the members were never
 *    fitted; the members differ (bootstraps and inits).
 *  - refusals: an ensemble of GPT layers, a batch that is not E blocks, a
 *    classifier with model.ensemble > 1, precision=auto, per-layer loss
 *    scaling.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "testutil.h"
#include "xy_cases.h"

enum { E = 3, B = 8, IN = 3, K = 2 };

static mxp_model *make(mxp_loss_kind loss, int ens, mxp_precision mode, uint64_t seed) {
    mxp_error err = {0};
    mxp_model_spec sp;
    const int64_t out = loss == MXP_LOSS_GAUSSIAN ? 2 * K : K;
    CHECK_OK(mxp_model_spec_layers("[linear:8, tanh, linear:6, gelu, linear]", IN, out, loss, B,
                                   &sp, &err),
             &err);
    sp.ensemble = ens;
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&sp, &pol, seed, &m, &err), &err);
    return m;
}

static bool same_bits(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            CHECK_MSG(false, "%s[%zu]: %.9g vs %.9g", what, i, (double)a[i], (double)b[i]);
            return false;
        }
    return true;
}

/* An ensemble equals its members run alone, bit for bit. */
static void test_members_are_models(mxp_loss_kind loss, mxp_precision mode) {
    mxp_error err = {0};
    mxp_model *one[E], *ens = make(loss, E, mode, 99);
    for (int e = 0; e < E; e++) one[e] = make(loss, 1, mode, 11 + (uint64_t)e);
    if (!ens || !one[0] || !one[1] || !one[2]) return;
    const size_t P1 = mxp_model_num_params(one[0]);
    CHECK(mxp_model_num_params(ens) == E * P1 && mxp_model_ensemble(ens) == E &&
          mxp_model_ensemble(one[0]) == 1);
    for (int e = 0; e < E; e++) { /* member e := model e */
        memcpy(mxp_model_master(ens) + e * P1, mxp_model_master(one[e]), P1 * sizeof(float));
    }
    mxp_model_sync_work(ens);
    const int64_t KT = mxp_model_target_dim(ens);
    float x[E * B * IN], y[E * B * K];
    for (int i = 0; i < E * B * IN; i++) x[i] = (float)(((i * 37) % 23) - 11) * 0.15f;
    for (int i = 0; i < E * B * K; i++) y[i] = (float)(((i * 53) % 19) - 9) * 0.1f;
    /* garbage in the slab, then discarded: the step must write every block */
    float *g = mxp_model_grads(ens);
    for (size_t i = 0; i < E * P1; i++) g[i] = 7.0f;
    mxp_model_discard_grads(ens);
    mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = E * B};
    double lens = 0, l1[E], mean = 0;
    mxp_nonfinite_site site;
    CHECK_OK(mxp_model_step(ens, &b, true, 256.0f, &lens, &site, &err), &err);
    CHECK(!site.found);
    g = mxp_model_grads(ens);
    for (int e = 0; e < E; e++) {
        mxp_batch be = {.x = x + e * B * IN, .y = y + e * B * KT, .labels = NULL, .B = B};
        mxp_model_zero_grads(one[e]);
        CHECK_OK(mxp_model_step(one[e], &be, true, 256.0f, &l1[e], NULL, &err), &err);
        mean += l1[e];
        char what[64];
        snprintf(what, sizeof what, "%s %s member %d grad", mxp_loss_kind_name(loss),
                 mxp_precision_name(mode), e);
        same_bits(g + e * P1, mxp_model_grads(one[e]), P1, what);
    }
    CHECK_MSG(lens == mean / E, "ensemble loss %.17g, mean of members %.17g", lens, mean / E);
    /* a second step adds (no discard): still each member's own */
    CHECK_OK(mxp_model_step(ens, &b, true, 256.0f, &lens, NULL, &err), &err);
    for (int e = 0; e < E; e++) {
        mxp_batch be = {.x = x + e * B * IN, .y = y + e * B * KT, .labels = NULL, .B = B};
        CHECK_OK(mxp_model_step(one[e], &be, true, 256.0f, &l1[e], NULL, &err), &err);
        same_bits(mxp_model_grads(ens) + e * P1, mxp_model_grads(one[e]), P1, "accumulated grad");
    }
    /* predict: every member on the same x, member-major */
    const int64_t O = mxp_model_out_dim(ens);
    float pe[E * B * 2 * K], p1[B * 2 * K];
    CHECK_OK(mxp_model_predict(ens, x, B, pe, &err), &err);
    for (int e = 0; e < E; e++) {
        CHECK_OK(mxp_model_predict(one[e], x, B, p1, &err), &err);
        same_bits(pe + e * B * O, p1, (size_t)(B * O), "member prediction");
    }
    /* a batch that is not E blocks */
    mxp_batch bad = {.x = x, .y = y, .labels = NULL, .B = E * B - 1};
    CHECK(mxp_model_step(ens, &bad, false, 1.0f, &lens, NULL, &err) == MXP_ERR_INVALID_ARG &&
          strstr(err.msg, "ensemble"));
    for (int e = 0; e < E; e++) mxp_model_destroy(one[e]);
    mxp_model_destroy(ens);
}

static void test_layout(void) {
    mxp_model *ens = make(MXP_LOSS_GAUSSIAN, E, MXP_PRECISION_FP32, 5);
    mxp_model *one = make(MXP_LOSS_GAUSSIAN, 1, MXP_PRECISION_FP32, 5);
    if (!ens || !one) return;
    const int n1 = mxp_model_num_tensors(one);
    const size_t P1 = mxp_model_num_params(one);
    CHECK(mxp_model_num_tensors(ens) == E * n1);
    for (int e = 0; e < E; e++)
        for (int t = 0; t < n1; t++) {
            const mxp_tensor_info *a = mxp_model_tensor(ens, e * n1 + t), *o = mxp_model_tensor(one, t);
            char want[64];
            snprintf(want, sizeof want, "members.%d.%s", e, o->name);
            CHECK_MSG(!strcmp(a->name, want), "tensor %d: %s, expected %s", e * n1 + t, a->name,
                      want);
            CHECK(a->offset == o->offset + e * P1 && a->count == o->count &&
                  a->ndim == o->ndim && a->shape[0] == o->shape[0] && a->shape[1] == o->shape[1]);
        }
    same_bits(mxp_model_master(ens), mxp_model_master(one), P1, "member 0 init");
    /* the other members differ from member 0 (their own draws), bounds alike */
    CHECK(memcmp(mxp_model_master(ens), mxp_model_master(ens) + P1, 8 * sizeof(float)) != 0);
    CHECK(mxp_model_param(ens, 2 * P1 + P1 - 1) == -10.0f &&
          mxp_model_param(ens, 2 * P1 + P1 - 2 * K) == 0.5f);
    mxp_model_destroy(ens);
    mxp_model_destroy(one);
    /* refusals */
    mxp_error err = {0};
    mxp_model_spec sp = mxp_model_spec_gpt(16, 8, 16, 2, 1, 2);
    sp.ensemble = 2;
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    CHECK(mxp_model_create(&sp, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG && !m &&
          strstr(err.msg, "ensemble"));
}

/* Aleatoric and epistemic variance, averaged over rows and per target,
 * of the ensemble m (5 members, Gaussian) on x [n, 2]. */
static void uncertainty(mxp_model *m, const float *x, int n, double alea[2], double epi[2]) {
    mxp_error err = {0};
    float pred[5 * 64 * 4];
    alea[0] = alea[1] = epi[0] = epi[1] = 0;
    CHECK(n <= 64);
    CHECK_OK(mxp_model_predict(m, x, n, pred, &err), &err);
    for (int b = 0; b < n; b++)
        for (int j = 0; j < 2; j++) {
            double mu = 0, a = 0, v = 0;
            for (int e = 0; e < 5; e++) {
                mu += pred[(e * n + b) * 4 + j] / 5.0;
                a += exp((double)pred[(e * n + b) * 4 + 2 + j]) / 5.0;
            }
            for (int e = 0; e < 5; e++) {
                const double d = pred[(e * n + b) * 4 + j] - mu;
                v += d * d / 5.0;
            }
            alea[j] += a / n;
            epi[j] += v / n;
        }
}

static void test_train(void) {
    const int64_t N = 4096;
    float *x = calloc((size_t)N * 2, sizeof(float)), *y = calloc((size_t)N * 2, sizeof(float));
    noisy_data(777, N, x, y);
    float far[64 * 2];
    for (int i = 0; i < 64; i++) { /* |x| = 4: outside the data */
        far[i * 2] = (i & 1) ? 4.0f : -4.0f;
        far[i * 2 + 1] = (i & 2) ? 4.0f : -4.0f;
    }
    static const char *const modes[] = {"fp32", "mixed_bf16", "mixed_fp16"};
    for (int k = 0; k < 3; k++) {
        mxp_error err = {0};
        char prec[64];
        snprintf(prec, sizeof prec, "training.precision=%s", modes[k]);
        const char *kv[] = {"model.workload=regressor", "model.head=gaussian", "model.ensemble=5",
                            "model.layers=[linear:32, tanh, linear]", "training.batch_size=64",
                            test_quick() ? "training.epochs=8" : "training.epochs=12",
                            "training.lr=0.01", "checkpoint.enabled=false", prec,
                            "data.val_fraction=0.25"};
        mxp_config cfg;
        if (!make_config(kv, 10, &cfg, &err)) {
            CHECK_MSG(false, "%s: config: %s", modes[k], err.msg);
            continue;
        }
        mxp_run *run = NULL;
        CHECK_OK(xy_run_create(&cfg, x, y, N, &run, &err), &err);
        if (!run) continue;
        CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        mxp_run_eval ev;
        CHECK_OK(mxp_run_evaluate(run, &ev, &err), &err);
        mxp_model *m = mxp_run_model(run);
        CHECK(mxp_model_ensemble(m) == 5);
        double ai[2], ei[2], ao[2], eo[2];
        uncertainty(m, x + (N - 64) * 2, 64, ai, ei); /* held-out rows */
        uncertainty(m, far, 64, ao, eo);
        printf("test_ensemble: %-10s val NLL %.4f MSE %.4f | inside: aleatoric %.4f %.5f "
               "epistemic %.2e %.2e | x=4: epistemic %.2e %.2e\n",
               modes[k], ev.loss, ev.mse, ai[0], ai[1], ei[0], ei[1], eo[0], eo[1]);
        const double var[2] = {0.25, 0.01};
        for (int j = 0; j < 2; j++) {
            CHECK_MSG(ai[j] > var[j] / 1.5 && ai[j] < var[j] * 1.5,
                      "%s: aleatoric variance %d %.4g, noise %.4g", modes[k], j, ai[j], var[j]);
            CHECK_MSG(ei[j] > 0 && eo[j] > 5 * ei[j],
                      "%s: epistemic variance %d inside %.3g, far outside %.3g", modes[k], j,
                      ei[j], eo[j]);
        }
        CHECK_MSG(isfinite(ev.loss) && ev.loss < -1.8 && ev.mse < 0.15,
                  "%s: val NLL %.4f MSE %.4f", modes[k], ev.loss, ev.mse);
        mxp_run_destroy(run);
    }
    free(x);
    free(y);
}

static void test_config(void) {
    mxp_error err = {0};
    mxp_config cfg;
    const char *cls[] = {"model.workload=classifier", "model.ensemble=3"};
    CHECK(!make_config(cls, 2, &cfg, &err) && strstr(err.msg, "model.ensemble"));
    const char *big[] = {"model.ensemble=65"};
    CHECK(!make_config(big, 1, &cfg, &err) && strstr(err.msg, "model.ensemble"));
    const char *def[] = {"model.workload=regressor"};
    CHECK(make_config(def, 1, &cfg, &err) && cfg.ensemble == 1);
    /* refused for ensembles, by name: per-layer loss scaling, precision auto */
    static float x[64 * 2], y[64 * 2];
    for (int i = 0; i < 128; i++) x[i] = y[i] = (float)(i % 7) * 0.1f;
    static const char *const refused[2] = {"training.loss_scale.per_layer=true",
                                           "training.precision=auto"};
    for (int k = 0; k < 2; k++) {
        const char *kv[] = {"model.workload=regressor", "model.ensemble=2",
                            "training.precision=mixed_fp16", "training.batch_size=8",
                            "checkpoint.enabled=false", refused[k]};
        if (!make_config(kv, 6, &cfg, &err)) {
            CHECK_MSG(false, "config: %s", err.msg);
            continue;
        }
        mxp_run *run = NULL;
        mxp_status s = xy_run_create(&cfg, x, y, 64, &run, &err);
        if (s == MXP_OK) s = mxp_run_train(run, 0, 0, &err);
        CHECK_MSG(s != MXP_OK && strstr(err.msg, "ensembles"), "%s with an ensemble: %d %s",
                  refused[k], (int)s, err.msg);
        mxp_run_destroy(run);
    }
}

int main(void) {
    test_members_are_models(MXP_LOSS_MSE, MXP_PRECISION_FP32);
    test_members_are_models(MXP_LOSS_GAUSSIAN, MXP_PRECISION_FP32);
    test_members_are_models(MXP_LOSS_GAUSSIAN, MXP_PRECISION_MIXED_BF16);
    test_members_are_models(MXP_LOSS_MSE, MXP_PRECISION_MIXED_FP16);
    test_layout();
    test_config();
    test_train();
    return test_finish("test_ensemble");
}
