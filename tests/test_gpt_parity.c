/* tests/test_gpt_parity.c: one transformer block against PyTorch.
 *
 * tests/data/gpt_block.bin is written by scripts/gen_gpt_fixture.py (torch
 * 1.13, float32; the format is in the script's docstring): a GPT with one
 * attention block (embedding, causal multi-head attention, GELU MLP,
 * layernorms, tied lm_head), its weights, a batch, the logits, the loss,
 * every parameter gradient, and 5 AdamW steps. mixprec loads the weights
 * into the same model (mxp_model_spec_gpt), in FP32, and must match:
 * logits and loss to float32 round-off, every gradient (atol 1e-6 +
 * rtol 1e-4; float32 vs float64 in PyTorch differ by < 4e-7), the loss
 * before each of the 5 AdamW updates (rtol 2e-5), and the weights after
 * them (AdamW's early steps are sign-like, so an element whose gradient is
 * ~0 may move by +-lr either way: 99% of weights within 1e-5, all within
 * 2*lr*steps).
 */
#include <mixprec/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct fixture {
    int32_t V, T, C, H, L, Bs, steps;
    uint32_t P;
    float *p0, *logits, *grads, *p1;
    int32_t *ids, *tgt;
    double loss0, losses[16];
    float lr, b1, b2, eps, wd;
} fixture;

static bool rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static bool load(const char *path, fixture *x) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return false;
    }
    uint32_t hdr[2];
    bool ok = rd(f, hdr, 8) && hdr[0] == 0x5450474Du && hdr[1] == 1;
    ok = ok && rd(f, &x->V, 7 * 4) && x->steps > 0 && x->steps <= 16 && rd(f, &x->P, 4);
    if (!ok) {
        fclose(f);
        return false;
    }
    size_t n = (size_t)x->Bs * (size_t)x->T;
    x->p0 = malloc(x->P * sizeof(float));
    x->grads = malloc(x->P * sizeof(float));
    x->p1 = malloc(x->P * sizeof(float));
    x->logits = malloc(n * (size_t)x->V * sizeof(float));
    x->ids = malloc(n * sizeof(int32_t));
    x->tgt = malloc(n * sizeof(int32_t));
    ok = x->p0 && x->grads && x->p1 && x->logits && x->ids && x->tgt;
    ok = ok && rd(f, x->p0, x->P * 4) && rd(f, x->ids, n * 4) && rd(f, x->tgt, n * 4) &&
         rd(f, x->logits, n * (size_t)x->V * 4) && rd(f, &x->loss0, 8) &&
         rd(f, x->grads, x->P * 4) && rd(f, x->losses, (size_t)x->steps * 8) &&
         rd(f, x->p1, x->P * 4) && rd(f, &x->lr, 5 * 4);
    char extra;
    ok = ok && fread(&extra, 1, 1, f) == 0;
    fclose(f);
    return ok;
}

int main(void) {
    fixture fx;
    memset(&fx, 0, sizeof fx);
    const char *path = MXP_TEST_DATA_DIR "/gpt_block.bin";
    CHECK_MSG(load(path, &fx), "fixture %s unreadable or malformed", path);
    if (!fx.p0) return test_finish("test_gpt_parity");

    mxp_model_spec spec = mxp_model_spec_gpt(fx.V, fx.T, fx.C, fx.H, fx.L, fx.Bs);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&spec, &pol, 1, &m, &err), &err);
    if (!m) return test_finish("test_gpt_parity");
    CHECK(mxp_model_num_params(m) == fx.P);
    memcpy(mxp_model_master(m), fx.p0, fx.P * sizeof(float));

    const int64_t n = (int64_t)fx.Bs * fx.T;
    float *x = malloc((size_t)n * sizeof(float));
    float *logits = malloc((size_t)n * (size_t)fx.V * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)fx.ids[i];
    CHECK_OK(mxp_model_predict(m, x, n, logits, &err), &err);
    double worst = 0;
    for (int64_t i = 0; i < n * fx.V; i++) {
        CHECK_CLOSE(logits[i], fx.logits[i], 2e-5, 1e-5);
        worst = fmax(worst, fabs((double)logits[i] - fx.logits[i]));
    }
    printf("logits: max |diff| %.3e\n", worst);

    mxp_batch b = {.x = x, .labels = fx.tgt, .B = n};
    double loss = 0;
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, &err), &err);
    CHECK_CLOSE(loss, fx.loss0, 1e-6, 1e-5);
    const float *g = mxp_model_grads(m);
    worst = 0;
    for (int t = 0; t < mxp_model_num_tensors(m); t++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, t);
        double tw = 0;
        for (size_t i = ti->offset; i < ti->offset + ti->count; i++) {
            tw = fmax(tw, fabs((double)g[i] - fx.grads[i]));
            CHECK_MSG(test_close(g[i], fx.grads[i], 1e-6, 1e-4), "%s[%zu]: %g vs torch %g",
                      ti->name, i - ti->offset, (double)g[i], (double)fx.grads[i]);
        }
        worst = fmax(worst, tw);
    }
    printf("loss %.7f (torch %.7f); grads: max |diff| %.3e over %u parameters\n", loss,
           fx.loss0, worst, fx.P);

    /* AdamW steps, no clipping, as torch.optim.AdamW */
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.optim.kind = MXP_OPTIM_ADAMW;
    tc.optim.lr = fx.lr;
    tc.optim.beta1 = fx.b1;
    tc.optim.beta2 = fx.b2;
    tc.optim.eps = fx.eps;
    tc.optim.weight_decay = fx.wd;
    tc.clip_grad_norm = 0.0f;
    tc.grad_accum_steps = 1;
    mxp_trainer *tr = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &tr, &err), &err);
    for (int s = 0; tr && s < fx.steps; s++) {
        mxp_step_result res;
        CHECK_OK(mxp_trainer_step(tr, &b, 1, &res, &err), &err);
        CHECK_MSG(test_close(res.loss, fx.losses[s], 0, 2e-5), "step %d loss %.8f torch %.8f",
                  s, res.loss, fx.losses[s]);
    }
    const float *w = mxp_model_master(m);
    size_t off = 0;
    double wmax = 0;
    for (uint32_t i = 0; i < fx.P; i++) {
        double d = fabs((double)w[i] - fx.p1[i]);
        off += d > 1e-5;
        wmax = fmax(wmax, d);
    }
    printf("after %d AdamW steps: %zu of %u weights differ by > 1e-5 (max %.2e)\n", fx.steps,
           off, fx.P, wmax);
    CHECK(off <= fx.P / 100);
    CHECK(wmax <= 2.0 * fx.lr * fx.steps);

    mxp_trainer_destroy(tr);
    mxp_model_destroy(m);
    free(x);
    free(logits);
    free(fx.p0);
    free(fx.grads);
    free(fx.p1);
    free(fx.logits);
    free(fx.ids);
    free(fx.tgt);
    return test_finish("test_gpt_parity");
}
