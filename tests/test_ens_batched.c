/* tests/test_ens_batched.c: the layer-major ensemble pass (src/nn/ens_batched.c,
 * issue 29 part 2) against the member-sequential pass (ensemble.c's member
 * loop, itself checked against E separately created models bit for bit in
 * test_ensemble.c).
 *
 * Oracle: the member-sequential path of the same library, reached in the
 * same process by nn_ens_set_batched(m, false). Both paths give each
 * member's GEMMs the same operands, so everything must agree BIT FOR BIT:
 *  - model API: losses, first non-finite sites, gradients (written after
 *    mxp_model_discard_grads over garbage, then accumulated), and the
 *    weights after N hand-applied SGD updates; MSE, Gaussian and
 *    Gaussian + termination flag with per-target weights; relu, gelu,
 *    tanh, layernorm, residual and dropout layers; fp32, mixed_bf16,
 *    mixed_fp16; a wide model (split products); a batch whose member 1
 *    overflows (FP16: inf) names the same site;
 *  - trainer: a 3-member Gaussian run (guard, loss scaling, optimizer,
 *    bootstraps, the trainer's slot blocks in step_pass.c; an MLP, and one
 *    with a residual block, layernorm and dropout) trained twice,
 *    once per path: every master and working weight (the checkpoint's
 *    tensors) and the evaluation loss equal, in the three modes.
 * Each case also checks that the batched path ran (ens_batched_passes) and
 * the sequential one did not.
 * MIXPREC_TEST_QUICK: every pair of head, layer list and mode once (9 of
 * the 27 model-API cases), the wide model and the trainer in fewer modes.
 * Negative controls (done by hand, 2026-12-02; output in
 * docs/results/issue29/ens_batched_negative.txt): (1) the member loop
 * (the path without a strided GEMM) giving member 2 member 0's parameters
 * (nn_ens_view(m, cur, e == 2 ? 0 : e) in forward_layers) failed every
 * model-API case (loss, grad, master) and the three trainer cases
 * (trained weights, eval loss); (2) the AVX-512 strided GEMM giving
 * product 2 product 0's B operand (gemm_strided.c) fails them too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "nn/nn_internal.h"
#include "testutil.h"
#include "xy_cases.h"

enum { E = 3, IN = 3, K = 2, STEPS = 3 };

typedef enum { HEAD_MSE, HEAD_GAUSS, HEAD_TERM } head_kind;

static const char *head_name(head_kind h) {
    return h == HEAD_MSE ? "mse" : h == HEAD_GAUSS ? "gaussian" : "gaussian+termination";
}

static mxp_model *make(head_kind h, const char *layers, mxp_precision mode, int64_t B,
                       bool batched) {
    mxp_error err = {0};
    mxp_model_spec sp;
    const mxp_loss_kind loss = h == HEAD_MSE ? MXP_LOSS_MSE : MXP_LOSS_GAUSSIAN;
    const int64_t out = h == HEAD_MSE ? K : h == HEAD_GAUSS ? 2 * K : 2 * K + 1;
    CHECK_OK(mxp_model_spec_layers(layers, IN, out, loss, B, &sp, &err), &err);
    static const float tw[K + 1] = {1.0f, 0.5f, 2.0f};
    sp.ensemble = E;
    if (h == HEAD_TERM) {
        sp.termination = 1;
        sp.target_weights = tw;
    }
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&sp, &pol, 42, &m, &err), &err);
    if (m) nn_ens_set_batched(m, batched);
    return m;
}

static bool same_bits(const void *a, const void *b, size_t bytes, const char *what,
                      const char *ctx) {
    if (memcmp(a, b, bytes) == 0) return true;
    const unsigned char *x = a, *y = b;
    size_t i = 0;
    while (x[i] == y[i]) i++;
    CHECK_MSG(false, "%s: %s differs (first at byte %zu of %zu)", ctx, what, i, bytes);
    return false;
}

static bool same_site(const mxp_nonfinite_site *a, const mxp_nonfinite_site *b) {
    return a->found == b->found &&
           (!a->found || (a->backward == b->backward && a->layer == b->layer &&
                          a->count == b->count && !strcmp(a->op, b->op)));
}

/* Batch data: x [E B, IN], y [E B, KT] (a 0/1 flag in the last column
 * with termination). */
static void fill(float *x, float *y, int64_t B, int64_t KT, bool term) {
    for (int i = 0; i < E * B * IN; i++) x[i] = (float)(((i * 37) % 23) - 11) * 0.15f;
    for (int i = 0; i < E * B * KT; i++) y[i] = (float)(((i * 53) % 19) - 9) * 0.1f;
    if (term)
        for (int r = 0; r < E * B; r++) y[r * KT + KT - 1] = (float)((r * 7) % 3 == 0);
}

static void test_model_api(head_kind h, const char *layers, mxp_precision mode, int64_t B) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s %s %s B=%lld", head_name(h), layers, mxp_precision_name(mode),
             (long long)B);
    mxp_error err = {0};
    mxp_model *mb = make(h, layers, mode, B, true), *ms = make(h, layers, mode, B, false);
    float *x = calloc((size_t)(E * B * IN), sizeof(float));
    float *y = calloc((size_t)(E * B * (K + 1)), sizeof(float));
    float *xo = calloc((size_t)(E * B * IN), sizeof(float));
    if (!mb || !ms || !x || !y || !xo) goto done;
    CHECK_MSG(nn_ens_batched_ok(mb) && !nn_ens_batched_ok(ms), "%s: paths", ctx);
    const size_t P = mxp_model_num_params(mb);
    const int64_t KT = mxp_model_target_dim(mb);
    fill(x, y, B, KT, h == HEAD_TERM);
    mxp_batch b = {.x = x, .y = y, .labels = NULL, .B = E * B};
    for (int k = 0; k < 2; k++) { /* garbage, discarded: every block written */
        float *g = mxp_model_grads(k ? ms : mb);
        for (size_t i = 0; i < P; i++) g[i] = 7.0f;
        mxp_model_discard_grads(k ? ms : mb);
    }
    for (int step = 0; step < STEPS; step++) {
        double lb = 0, ls = 0;
        mxp_nonfinite_site sb, ss;
        CHECK_OK(mxp_model_step(mb, &b, true, 256.0f, &lb, &sb, &err), &err);
        CHECK_OK(mxp_model_step(ms, &b, true, 256.0f, &ls, &ss, &err), &err);
        CHECK_MSG(memcmp(&lb, &ls, sizeof lb) == 0, "%s step %d: loss %.17g vs %.17g", ctx,
                  step, lb, ls);
        CHECK_MSG(!sb.found && same_site(&sb, &ss), "%s step %d: site", ctx, step);
        if (step == 0) { /* a second backward adds (no discard) */
            CHECK_OK(mxp_model_step(mb, &b, true, 256.0f, &lb, NULL, &err), &err);
            CHECK_OK(mxp_model_step(ms, &b, true, 256.0f, &ls, NULL, &err), &err);
        }
        same_bits(mxp_model_grads(mb), mxp_model_grads(ms), P * sizeof(float), "grad", ctx);
        /* the same SGD update on both (on the master, or the FP32 work slab) */
        for (int k = 0; k < 2; k++) {
            mxp_model *m = k ? ms : mb;
            float *w = mxp_model_master(m);
            mxp_dtype wt;
            if (!w) w = mxp_model_work(m, &wt);
            const float *g = mxp_model_grads(m);
            for (size_t i = 0; i < P; i++) w[i] -= 1e-4f * g[i];
            mxp_model_sync_work(m);
            mxp_model_discard_grads(m);
        }
    }
    /* evaluation passes (no backward) */
    double eb = 0, es = 0;
    CHECK_OK(mxp_model_step(mb, &b, false, 1.0f, &eb, NULL, &err), &err);
    CHECK_OK(mxp_model_step(ms, &b, false, 1.0f, &es, NULL, &err), &err);
    CHECK_MSG(memcmp(&eb, &es, sizeof eb) == 0, "%s: eval loss %.17g vs %.17g", ctx, eb, es);
    if (mxp_model_master(mb))
        same_bits(mxp_model_master(mb), mxp_model_master(ms), P * sizeof(float), "master", ctx);
    mxp_dtype wt;
    const void *wb = mxp_model_work(mb, &wt), *ws = mxp_model_work(ms, &wt);
    same_bits(wb, ws, P * mxp_dtype_info(wt)->size, "work", ctx);
    /* member 1 overflows: the same first site, member by member */
    if (mode == MXP_PRECISION_MIXED_FP16) {
        memcpy(xo, x, (size_t)(E * B * IN) * sizeof(float));
        for (int i = 0; i < B * IN; i++) xo[B * IN + i] = 3e5f;
        mxp_batch bo = {.x = xo, .y = y, .labels = NULL, .B = E * B};
        mxp_nonfinite_site sb, ss;
        double lb, ls;
        CHECK_OK(mxp_model_step(mb, &bo, true, 256.0f, &lb, &sb, &err), &err);
        CHECK_OK(mxp_model_step(ms, &bo, true, 256.0f, &ls, &ss, &err), &err);
        CHECK_MSG(sb.found && same_site(&sb, &ss),
                  "%s overflow: batched site %d %s layer %d count %lld, sequential %d %s "
                  "layer %d count %lld",
                  ctx, (int)sb.found, sb.op, sb.layer, (long long)sb.count, (int)ss.found,
                  ss.op, ss.layer, (long long)ss.count);
        CHECK_MSG(isnan(lb) == isnan(ls) && (isnan(lb) || lb == ls), "%s overflow loss", ctx);
    }
    CHECK_MSG(mb->ens_batched_passes > 0 && ms->ens_batched_passes == 0,
              "%s: batched passes %lld, sequential %lld", ctx,
              (long long)mb->ens_batched_passes, (long long)ms->ens_batched_passes);
done:
    free(x);
    free(y);
    free(xo);
    mxp_model_destroy(mb);
    mxp_model_destroy(ms);
}

/* A 3-member Gaussian run, trained by one path; its model's slabs. */
static mxp_run *train(const char *prec, const char *layers, bool batched, const float *x,
                      const float *y, int64_t N, double *eval_loss) {
    mxp_error err = {0};
    const char *kv[] = {"model.workload=regressor", "model.head=gaussian", "model.ensemble=3",
                        layers,
                        "training.batch_size=16", "training.epochs=2", "training.lr=0.01",
                        "checkpoint.enabled=false", prec, "data.val_fraction=0.25"};
    mxp_config cfg;
    if (!make_config(kv, 10, &cfg, &err)) {
        CHECK_MSG(false, "%s: config: %s", prec, err.msg);
        return NULL;
    }
    mxp_run *run = NULL;
    CHECK_OK(xy_run_create(&cfg, x, y, N, &run, &err), &err);
    if (!run) return NULL;
    mxp_model *m = mxp_run_model(run);
    CHECK_MSG(m != NULL, "%s: no model before training", prec);
    if (!m) return run;
    nn_ens_set_batched(m, batched);
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_eval ev;
    CHECK_OK(mxp_run_evaluate(run, &ev, &err), &err);
    *eval_loss = ev.loss;
    CHECK_MSG(batched ? m->ens_batched_passes > 0 : m->ens_batched_passes == 0,
              "%s batched=%d: %lld layer-major passes", prec, (int)batched,
              (long long)m->ens_batched_passes);
    return run;
}

/* quick: each mode once (fp32 and mixed_fp16 on the MLP, mixed_bf16 on
 * the residual/layernorm/dropout list) */
static void test_trainer(bool quick) {
    const int64_t N = 512;
    float *x = calloc((size_t)N * 2, sizeof(float)), *y = calloc((size_t)N * 2, sizeof(float));
    noisy_data(4242, N, x, y);
    static const char *const modes[] = {"training.precision=fp32",
                                        "training.precision=mixed_bf16",
                                        "training.precision=mixed_fp16"};
    static const char *const layers[] = {
        "model.layers=[linear:16, relu, linear:16, tanh, linear]",
        "model.layers=[linear:16, relu, linear:16, gelu, residual:2, layernorm, dropout:0.2, "
        "linear]"};
    for (int q = 0; q < 6; q++) {
        const int k = q % 3;
        if (quick && q != 0 && q != 2 && q != 4) continue;
        double lb = 0, ls = 0;
        mxp_run *rb = train(modes[k], layers[q / 3], true, x, y, N, &lb);
        mxp_run *rs = train(modes[k], layers[q / 3], false, x, y, N, &ls);
        if (rb && rs) {
            mxp_model *mb = mxp_run_model(rb), *ms = mxp_run_model(rs);
            const size_t P = mxp_model_num_params(mb);
            CHECK(P == mxp_model_num_params(ms));
            if (mxp_model_master(mb))
                same_bits(mxp_model_master(mb), mxp_model_master(ms), P * sizeof(float),
                          "trained master", modes[k]);
            mxp_dtype wt;
            const void *wb = mxp_model_work(mb, &wt), *ws = mxp_model_work(ms, &wt);
            same_bits(wb, ws, P * mxp_dtype_info(wt)->size, "trained work", modes[k]);
            CHECK_MSG(memcmp(&lb, &ls, sizeof lb) == 0 && isfinite(lb),
                      "%s: eval loss %.17g vs %.17g", modes[k], lb, ls);
            printf("test_ens_batched: trainer %s %s: eval loss %.9g batched, %.9g sequential\n",
                   modes[k], layers[q / 3], lb, ls);
        }
        mxp_run_destroy(rb);
        mxp_run_destroy(rs);
    }
    free(x);
    free(y);
}

int main(void) {
    static const char *const layers[] = {
        "[linear:8, tanh, linear:6, gelu, linear]", "[linear:16, relu, linear]",
        "[linear:16, relu, linear:16, gelu, residual:2, layernorm, dropout:0.25, linear]"};
    static const mxp_precision modes[] = {MXP_PRECISION_FP32, MXP_PRECISION_MIXED_BF16,
                                          MXP_PRECISION_MIXED_FP16};
    /* MIXPREC_TEST_QUICK (the reference-kernel and sanitizer passes of
     * scripts/test.sh): a Latin square of heads x layer lists x modes (every
     * pair of them once: 9 of the 27 cases), the wide model in mixed_bf16,
     * the trainer cases of test_trainer's quick list */
    const bool quick = test_quick();
    for (int h = 0; h < 3; h++)
        for (int l = 0; l < 3; l++)
            for (int k = 0; k < 3; k++)
                if (!quick || k == (h + l) % 3)
                    test_model_api((head_kind)h, layers[l], modes[k], 8);
    /* wide: products large enough to be split between threads (several
     * parts each in the strided GEMM's one parallel region) */
    for (int k = 0; k < 3; k++)
        if (!quick || modes[k] == MXP_PRECISION_MIXED_BF16)
            test_model_api(HEAD_GAUSS, "[linear:200, gelu, linear:200, gelu, linear]", modes[k],
                           256);
    test_trainer(quick);
    /* FP8 ensembles keep the member loop (their delayed scales are updated
     * after each member's pass), as does the switch off */
    mxp_model *f8 = make(HEAD_GAUSS, layers[0], MXP_PRECISION_FP8, 8, true);
    CHECK(f8 && !nn_ens_batched_ok(f8));
    mxp_model_destroy(f8);
    return test_finish("test_ens_batched");
}
