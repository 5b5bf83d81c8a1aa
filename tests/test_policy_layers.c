/* tests/test_policy_layers.c: the per-layer precision override
 * (training.precision_fp32_layers, mxp_model_set_fp32_layers).
 * - parse/format: accepted forms, canonical text, and every bad form
 *   rejected with a message naming the value, the item and what is
 *   accepted; the config key rejects a bad value at resolve naming the key;
 * - a layer kept FP32 is bit-identical to the same layer of an all-FP32
 *   model (the oracle) given the same inputs: forward output y, and in
 *   backward dW, db and dX, in mixed_bf16, mixed_fp16 and fp8 (emulated);
 *   the tensors around it are planned in FP32 (x, y, dY), the others keep
 *   the mode's dtypes, and a layer not kept still computes on BF16-rounded
 *   operands (its output equals a double-accumulated product of the
 *   rounded operands, and differs from FP32);
 * - model errors: an index out of range or not a linear layer names the
 *   layer and lists the linear layers; pure bf16/fp16 refuse it;
 * - the selection survives a policy switch; fp32 mode ignores it;
 * - checkpoint: a mixed_bf16 world model with first,last stopped at step k
 *   and resumed from its checkpoint (config restored from the checkpoint's
 *   resolved config) trains bit-identically to an uninterrupted run.
 */
#include <mixprec/mixprec.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/nn_internal.h"
#include "testutil.h"

/* ---- parse / format ------------------------------------------------------ */

static void test_parse(void) {
    mxp_error err = {0};
    mxp_fp32_layers l;
    char buf[256];
    struct {
        const char *in, *canon;
    } ok[] = {{"none", "none"},        {"first", "first"},     {"LAST", "last"},
              {"first,last", "first,last"}, {" last , first ", "first,last"},
              {"0,6", "0,6"},          {"63", "63"},           {"first,3,3", "first,3"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK_OK(mxp_fp32_layers_parse(ok[i].in, &l, &err), &err);
        mxp_fp32_layers_format(&l, buf, sizeof buf);
        CHECK_MSG(strcmp(buf, ok[i].canon) == 0, "'%s' -> '%s', expected '%s'", ok[i].in, buf,
                  ok[i].canon);
    }
    CHECK_OK(mxp_fp32_layers_parse("none", &l, &err), &err);
    CHECK(mxp_fp32_layers_none(&l));
    CHECK_OK(mxp_fp32_layers_parse("2,5", &l, &err), &err);
    CHECK(l.mask == ((1u << 2) | (1u << 5)) && !l.first && !l.last);

    const char *bad[][2] = {{"", "empty"},          {"firts", "firts"}, {"first,,last", "empty"},
                            {"64", "64"},           {"-1", "-1"},       {"none,first", "none"},
                            {"1e1", "1e1"},         {"99999999999", "99999999999"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mxp_fp32_layers keep = {true, false, 7};
        l = keep;
        mxp_error e = {0};
        CHECK_MSG(mxp_fp32_layers_parse(bad[i][0], &l, &e) == MXP_ERR_INVALID_ARG,
                  "'%s' accepted", bad[i][0]);
        CHECK_MSG(strstr(e.msg, bad[i][1]) && strstr(e.msg, "accepted"), "'%s': %s", bad[i][0],
                  e.msg);
        CHECK(l.first == keep.first && l.mask == keep.mask); /* untouched */
    }

    /* the config key: default none, a bad value named at resolve */
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    CHECK(mxp_fp32_layers_none(&cfg.fp32_layers));
    CHECK_OK(mxp_config_apply_override(b, "training.precision_fp32_layers=first,last", &err),
             &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    CHECK(cfg.fp32_layers.first && cfg.fp32_layers.last && cfg.fp32_layers.mask == 0);
    CHECK_OK(mxp_config_apply_override(b, "training.precision_fp32_layers=middle", &err), &err);
    mxp_error e = {0};
    CHECK(mxp_config_resolve(b, &cfg, &e) == MXP_ERR_CONFIG);
    CHECK_MSG(strstr(e.msg, "training.precision_fp32_layers") && strstr(e.msg, "middle") &&
                  strstr(e.msg, "accepted"),
              "resolve error: %s", e.msg);
    mxp_config_builder_destroy(b);
}

/* ---- the layers ----------------------------------------------------------- */

enum { IN = 7, HID = 24, OUT = 5, BATCH = 9 };

/* linear(24) tanh linear(24) tanh linear(5): linear layers 0, 2, 4. */
static mxp_model *make_model(mxp_precision p, const char *sel) {
    mxp_model_spec spec =
        mxp_model_spec_mlp(IN, HID, 2, OUT, MXP_LAYER_TANH, false, MXP_LOSS_MSE, BATCH);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&spec, &pol, 99, &m, &err), &err);
    if (m && sel) {
        mxp_fp32_layers l;
        CHECK_OK(mxp_fp32_layers_parse(sel, &l, &err), &err);
        CHECK_OK(mxp_model_set_fp32_layers(m, &l, &err), &err);
    }
    return m;
}

static void fill(float *v, size_t n, uint64_t seed, float scale) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) v[i] = (2.0f * mxp_rng_uniform(&r) - 1.0f) * scale;
}

/* Store FP32 values v [n] into the typed buffer dst of dtype t. */
static void put(mxp_dtype t, void *dst, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++) mxp_store_f32(t, dst, i, v[i]);
}

static bool same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Layer l of model m, kept FP32, against the same layer of the FP32 oracle
 * f given the same input x, weights (same seed) and output gradient dy. */
static void check_kept_layer(mxp_model *m, mxp_model *f, int l, const char *what) {
    const nn_layer *L = &m->layers[l];
    const size_t nx = (size_t)BATCH * (size_t)L->in, ny = (size_t)BATCH * (size_t)L->out;
    float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
    float *ym = malloc(ny * sizeof *ym), *yf = malloc(ny * sizeof *yf);
    float *dxm = malloc(nx * sizeof *dxm), *dxf = malloc(nx * sizeof *dxf);
    fill(x, nx, 1000 + (uint64_t)l, 1.5f);
    fill(dy, ny, 2000 + (uint64_t)l, 0.25f);
    CHECK_MSG(m->b.act_type[l] == MXP_DTYPE_F32 && m->b.act_type[l + 1] == MXP_DTYPE_F32 &&
                  m->b.gtype[l + 1] == MXP_DTYPE_F32,
              "%s layer %d: x/y/dY not planned in FP32", what, l);
    put(m->b.act_type[l], m->b.acts[l], x, nx);
    put(f->b.act_type[l], f->b.acts[l], x, nx);
    nn_linear_forward(m, l, BATCH, ym);
    nn_linear_forward(f, l, BATCH, yf);
    CHECK_MSG(same_bits(ym, yf, ny), "%s layer %d: forward output differs from FP32", what, l);

    mxp_model_zero_grads(m);
    mxp_model_zero_grads(f);
    nn_linear_backward(m, l, BATCH, dy, dxm); /* dY stored FP32 for a kept layer */
    nn_linear_backward(f, l, BATCH, dy, dxf);
    CHECK_MSG(same_bits(mxp_model_grads(m) + L->w_off, mxp_model_grads(f) + L->w_off,
                        L->n_params),
              "%s layer %d: dW/db differ from FP32", what, l);
    CHECK_MSG(same_bits(dxm, dxf, nx), "%s layer %d: dX differs from FP32", what, l);
    free(x), free(dy), free(ym), free(yf), free(dxm), free(dxf);
}

/* Layer l (not kept) of a mixed_bf16 model computes on BF16 operands: its
 * output equals sum_k bf16(x) bf16(W) (double) + bf16(b) to FP32 rounding
 * and differs from the FP32 layer's output. */
static void check_low_layer(mxp_model *m, mxp_model *f, int l) {
    const nn_layer *L = &m->layers[l];
    const size_t nx = (size_t)BATCH * (size_t)L->in, ny = (size_t)BATCH * (size_t)L->out;
    CHECK(m->b.act_type[l] == MXP_DTYPE_BF16 && m->b.act_type[l + 1] == MXP_DTYPE_BF16);
    CHECK(m->b.gtype[l + 1] == MXP_DTYPE_BF16);
    float *x = malloc(nx * sizeof *x), *ym = malloc(ny * sizeof *ym), *yf = malloc(ny * sizeof *yf);
    fill(x, nx, 3000, 1.5f);
    put(m->b.act_type[l], m->b.acts[l], x, nx);
    put(f->b.act_type[l], f->b.acts[l], x, nx);
    nn_linear_forward(m, l, BATCH, ym);
    nn_linear_forward(f, l, BATCH, yf);
    const float *W = mxp_model_master(m) + L->w_off, *bias = mxp_model_master(m) + L->b_off;
    double maxerr = 0, maxdiff = 0;
    for (int64_t b = 0; b < BATCH; b++)
        for (int64_t o = 0; o < L->out; o++) {
            double acc = mxp_round_to(MXP_DTYPE_BF16, bias[o]);
            for (int64_t k = 0; k < L->in; k++)
                acc += (double)mxp_round_to(MXP_DTYPE_BF16, x[b * L->in + k]) *
                       (double)mxp_round_to(MXP_DTYPE_BF16, W[o * L->in + k]);
            const size_t i = (size_t)(b * L->out + o);
            double e = fabs(ym[i] - acc) / (1e-6 + fabs(acc));
            if (e > maxerr) maxerr = e;
            if (fabs(ym[i] - yf[i]) > maxdiff) maxdiff = fabs(ym[i] - yf[i]);
        }
    CHECK_MSG(maxerr < 1e-4, "layer %d: output vs BF16-operand oracle rel err %g", l, maxerr);
    CHECK_MSG(maxdiff > 0, "layer %d: a layer not kept computes exactly as FP32", l);
    free(x), free(ym), free(yf);
}

static void test_layers(void) {
    mxp_model *f = make_model(MXP_PRECISION_FP32, NULL);
    const mxp_precision modes[] = {MXP_PRECISION_MIXED_BF16, MXP_PRECISION_MIXED_FP16,
                                   MXP_PRECISION_FP8};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        mxp_model *m = make_model(modes[i], "first,last");
        const char *nm = mxp_precision_name(modes[i]);
        CHECK_MSG(mxp_model_fp32_layers(m) == ((1u << 0) | (1u << 4)), "%s: mask %llx", nm,
                  (unsigned long long)mxp_model_fp32_layers(m));
        check_kept_layer(m, f, 0, nm);
        check_kept_layer(m, f, 4, nm);
        /* the middle linear keeps the mode's dtypes */
        const mxp_dtype act = mxp_model_policy(m)->activation;
        CHECK(m->b.act_type[2] == act && m->b.act_type[3] == act);
        CHECK(m->b.gtype[2] == m->b.grad_type && m->b.gtype[3] == m->b.grad_type);
        if (modes[i] == MXP_PRECISION_MIXED_BF16) check_low_layer(m, f, 2);
        /* a whole training step stays finite; the loss is close to FP32's */
        float x[BATCH * IN], y[BATCH * OUT];
        fill(x, sizeof x / sizeof x[0], 7, 1.0f);
        fill(y, sizeof y / sizeof y[0], 8, 1.0f);
        mxp_batch bt = {x, y, NULL, BATCH};
        double lm = 0, lf = 0;
        mxp_error err = {0};
        mxp_model_zero_grads(m);
        CHECK_OK(mxp_model_step(m, &bt, true, 1.0f, &lm, NULL, &err), &err);
        CHECK_OK(mxp_model_step(f, &bt, false, 1.0f, &lf, NULL, &err), &err);
        CHECK_MSG(isfinite(lm) && fabs(lm - lf) < 0.05 * lf, "%s: loss %g vs fp32 %g", nm, lm, lf);
        /* the same layer run by a model without the override is not FP32 */
        mxp_model *plain = make_model(modes[i], NULL);
        CHECK(plain->b.act_type[0] != MXP_DTYPE_F32 || modes[i] == MXP_PRECISION_FP8);
        CHECK(plain->b.gtype[OUT > 0 ? plain->n_layers : 0] == plain->b.grad_type);
        mxp_model_destroy(plain);
        mxp_model_destroy(m);
    }

    /* an explicit list: only layer 2 */
    mxp_model *m = make_model(MXP_PRECISION_MIXED_BF16, "2");
    CHECK(mxp_model_fp32_layers(m) == (1u << 2));
    check_kept_layer(m, f, 2, "mixed_bf16 [2]");
    CHECK(m->b.act_type[0] == MXP_DTYPE_BF16 && m->b.act_type[5] == MXP_DTYPE_F32);
    /* survives a policy switch; fp32 mode ignores it */
    mxp_error err = {0};
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_MIXED_FP16, &pol);
    CHECK_OK(mxp_model_set_policy(m, &pol, &err), &err);
    CHECK(mxp_model_fp32_layers(m) == (1u << 2));
    check_kept_layer(m, f, 2, "mixed_fp16 after switch");
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    CHECK_OK(mxp_model_set_policy(m, &pol, &err), &err);
    CHECK(mxp_model_fp32_layers(m) == 0);
    /* pure modes refuse a non-empty selection, and nothing changes */
    mxp_precision_policy_default(MXP_PRECISION_BF16, &pol);
    mxp_error e = {0};
    CHECK(mxp_model_set_policy(m, &pol, &e) == MXP_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(e.msg, "training.precision_fp32_layers") && strstr(e.msg, "bf16"), "%s",
              e.msg);
    CHECK(mxp_model_policy(m)->mode == MXP_PRECISION_FP32);
    mxp_model_destroy(m);

    /* errors name the layer and list the linear layers */
    m = make_model(MXP_PRECISION_MIXED_BF16, NULL);
    const char *bad[][2] = {{"9", "layer 9 is out of range"}, {"1", "layer 1 is not a linear"}};
    for (int i = 0; i < 2; i++) {
        mxp_fp32_layers l;
        CHECK_OK(mxp_fp32_layers_parse(bad[i][0], &l, &err), &err);
        memset(&e, 0, sizeof e);
        CHECK(mxp_model_set_fp32_layers(m, &l, &e) == MXP_ERR_INVALID_ARG);
        CHECK_MSG(strstr(e.msg, bad[i][1]) && strstr(e.msg, "(0,2,4)"), "%s", e.msg);
        CHECK(mxp_model_fp32_layers(m) == 0);
    }
    mxp_model_destroy(m);
    m = make_model(MXP_PRECISION_BF16, NULL);
    mxp_fp32_layers l = {false, true, 0};
    memset(&e, 0, sizeof e);
    CHECK(mxp_model_set_fp32_layers(m, &l, &e) == MXP_ERR_UNSUPPORTED);
    mxp_model_destroy(m);
    mxp_model_destroy(f);
}

/* ---- checkpoint resume ------------------------------------------------------ */

static char g_dir[256];

static void apply_common(mxp_config_builder *b, int64_t every) {
    mxp_error err = {0};
    char kv[2][320];
    snprintf(kv[0], sizeof kv[0], "output.dir=%s/out", g_dir);
    snprintf(kv[1], sizeof kv[1], "checkpoint.every_steps=%lld", (long long)every);
    const char *ov[] = {"data.trajectories=8", "data.episode_length=50", "model.hidden=24",
                        "model.depth=2",       "training.epochs=2",       "training.batch_size=16",
                        "training.lr=0.003",   "training.precision=mixed_bf16",
                        "training.precision_fp32_layers=first,last", kv[0], kv[1]};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, ov[i], &err), &err);
}

static mxp_config config_for(int64_t every) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    apply_common(b, every);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

static volatile sig_atomic_t g_stop;
static int64_t g_stop_at = -1;
static void on_progress(void *user, const mxp_progress *p) {
    (void)user;
    if (p->step == g_stop_at) g_stop = 1;
}

static double *losses(mxp_world_model *wm, size_t *n) {
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), n);
    double *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = h[i].loss;
    return v;
}

static void test_resume(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_policy_%d", (int)getpid());
    test_rm_rf(g_dir);
    mkdir(g_dir, 0755);
    mxp_error err = {0};
    /* uninterrupted */
    mxp_config cfg = config_for(0);
    mxp_world_model *wm = NULL;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    if (!wm) return;
    CHECK(mxp_model_fp32_layers(mxp_world_model_model(wm)) == ((1u << 0) | (1u << 4)));
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    size_t nfull;
    double *full = losses(wm, &nfull);
    const size_t P = mxp_model_num_params(mxp_world_model_model(wm));
    float *wfull = malloc(P * sizeof *wfull);
    memcpy(wfull, mxp_model_master(mxp_world_model_model(wm)), P * sizeof *wfull);
    mxp_world_model_destroy(wm);

    /* stop at k with a checkpoint */
    const int64_t k = 11;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/ck", g_dir);
    cfg = config_for(5);
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    mxp_ckpt_policy pol;
    CHECK_OK(mxp_ckpt_policy_from_config(&cfg, &pol, &err), &err);
    snprintf(pol.dir, sizeof pol.dir, "%s", dir);
    mxp_ckpt_manager *mgr = NULL;
    CHECK_OK(mxp_ckpt_manager_create(&pol, &mgr, &err), &err);
    mxp_world_model_set_checkpointer(wm, mgr);
    g_stop = 0;
    g_stop_at = k;
    mxp_world_model_set_stop_flag(wm, &g_stop);
    mxp_world_model_set_progress(wm, on_progress, NULL);
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    char path[MXP_CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s", mxp_ckpt_manager_last_path(mgr));
    mxp_world_model_destroy(wm);
    mxp_ckpt_manager_destroy(mgr);
    g_stop_at = -1;

    /* resume: the config comes from the checkpoint's resolved config */
    mxp_st_file *sf = NULL;
    CHECK_OK(mxp_st_file_read(path, &sf, &err), &err);
    mxp_config_builder *b = NULL;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    if (sf) CHECK_OK(mxp_ckpt_apply_config(sf, b, &err), &err);
    CHECK_OK(mxp_config_apply_override(b, "checkpoint.every_steps=0", &err), &err);
    mxp_config rc;
    CHECK_OK(mxp_config_resolve(b, &rc, &err), &err);
    mxp_config_builder_destroy(b);
    mxp_st_file_destroy(sf);
    CHECK_MSG(rc.fp32_layers.first && rc.fp32_layers.last && rc.fp32_layers.mask == 0,
              "checkpoint config lost training.precision_fp32_layers ('%s')",
              rc.fp32_layers_text);
    CHECK_OK(mxp_world_model_create(&rc, &wm, &err), &err);
    if (!wm) return;
    mxp_ckpt_info info;
    CHECK_OK(mxp_world_model_load_checkpoint(wm, path, &info, &err), &err);
    CHECK(info.step == k);
    CHECK_OK(mxp_world_model_train(wm, rc.epochs, rc.batch_size, &err), &err);
    size_t nr;
    double *res = losses(wm, &nr);
    CHECK_MSG(nr == nfull - (size_t)k && memcmp(res, full + k, nr * sizeof *res) == 0,
              "resumed losses differ (%zu rows, %zu expected)", nr, nfull - (size_t)k);
    CHECK_MSG(memcmp(wfull, mxp_model_master(mxp_world_model_model(wm)), P * sizeof *wfull) == 0,
              "resumed final weights differ");
    printf("resume mixed_bf16 fp32_layers=first,last bit-identical at k=%lld (%zu steps)\n",
           (long long)k, nfull);
    mxp_world_model_destroy(wm);
    free(full), free(res), free(wfull);
    test_rm_rf(g_dir);
}

int main(void) {
    test_parse();
    test_layers();
    test_resume();
    return test_finish("test_policy_layers");
}
