/* tests/test_user_model.c: model shape from a layer list (model.layers,
 * mxp_model_spec_layers) and initial weights from a PyTorch-named
 * safetensors file (model.init_from, mxp_ckpt_init_weights). Oracle: the
 * forward pass computed by NumPy in float64 (tests/model_cases.py) from the
 * same weights, F32 or rounded to BF16/F16; every malformed list and file
 * gets its named error. Skips (77) without /usr/bin/python3 + numpy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/ckpt.h>
#include <mixprec/model.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_usermodel_XXXXXX";
static const char *kList = "[linear:5, tanh, layernorm, linear:4, relu, linear]";

static const char *path_of(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

static bool read_f32(const char *name, float *dst, size_t n) {
    FILE *f = fopen(path_of(name), "rb");
    bool ok = f && fread(dst, sizeof(float), n, f) == n;
    if (f) fclose(f);
    return ok;
}

static void test_spec(void) {
    mxp_error err = {0};
    mxp_model_spec s;
    CHECK_OK(mxp_model_spec_layers(kList, 3, 2, MXP_LOSS_MSE, 16, &s, &err), &err);
    static const mxp_layer_kind kinds[] = {MXP_LAYER_LINEAR, MXP_LAYER_TANH, MXP_LAYER_LAYERNORM,
                                           MXP_LAYER_LINEAR, MXP_LAYER_RELU, MXP_LAYER_LINEAR};
    static const int64_t units[] = {5, 0, 0, 4, 0, 2};
    CHECK(s.n_layers == 6 && s.in_dim == 3 && s.max_batch == 16 && s.loss == MXP_LOSS_MSE);
    for (int i = 0; i < 6; i++) {
        CHECK(s.layers[i].kind == kinds[i]);
        if (kinds[i] == MXP_LAYER_LINEAR) CHECK(s.layers[i].units == units[i]);
    }
    /* no brackets, spaces, an explicit matching last width, YAML's join */
    CHECK_OK(mxp_model_spec_layers(" linear:8 ,gelu,linear:2 ", 3, 2, MXP_LOSS_XENT, 4, &s, &err),
             &err);
    CHECK(s.n_layers == 3 && s.layers[1].kind == MXP_LAYER_GELU && s.loss == MXP_LOSS_XENT);
    CHECK_OK(mxp_model_spec_layers("linear", 3, 9, MXP_LOSS_MSE, 4, &s, &err), &err);
    CHECK(s.n_layers == 1 && s.layers[0].units == 9);
    static const struct {
        const char *list, *text;
    } bad[] = {
        {"", "empty"},
        {"[]", "empty"},
        {"[linear:4, swish, linear]", "item 1 'swish' is unknown"},
        {"[linear:0, linear]", "item 0 'linear:0': the width"},
        {"[linear:4x, linear]", "item 0 'linear:4x': the width"},
        {"[linear:-3, linear]", "the width"},
        {"[linear:99999999999, linear]", "the width"},
        {"[linear, gelu, linear]", "item 0 is a 'linear' without a width"},
        {"[linear:4, gelu]", "ends with 'gelu'"},
        {"[linear:4, linear:3]", "the last layer is linear:3, the target width is 2"},
        {"[linear:4,, linear]", "item 1 is empty"},
        {"[linear:4, linear", "without a closing ']'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mxp_status st = mxp_model_spec_layers(bad[i].list, 3, 2, MXP_LOSS_MSE, 4, &s, &err);
        CHECK_MSG(st == MXP_ERR_CONFIG && strstr(err.msg, bad[i].text) &&
                      strstr(err.msg, "model.layers"),
                  "list '%s': status %d, message '%s', expected '%s'", bad[i].list, (int)st,
                  err.msg, bad[i].text);
    }
    char many[1024] = "";
    for (int i = 0; i < 65; i++) strcat(many, "relu,");
    strcat(many, "linear");
    CHECK(mxp_model_spec_layers(many, 3, 2, MXP_LOSS_MSE, 4, &s, &err) == MXP_ERR_CONFIG);
    CHECK(strstr(err.msg, "more than 64 layers"));
}

/* Load `file` into a model of kList in `mode`, predict x, compare with the
 * NumPy oracle `ref` (rtol). */
static void test_init(const char *file, const char *ref, mxp_precision mode, double rtol) {
    mxp_error err = {0};
    mxp_model_spec s;
    CHECK_OK(mxp_model_spec_layers(kList, 3, 2, MXP_LOSS_MSE, 7, &s, &err), &err);
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&s, &pol, 1, &m, &err), &err);
    if (!m) return;
    CHECK_OK(mxp_ckpt_init_weights(m, path_of(file), &err), &err);
    float x[21], y[14], pred[14];
    CHECK(read_f32("x.bin", x, 21) && read_f32(ref, y, 14));
    CHECK_OK(mxp_model_predict(m, x, 7, pred, &err), &err);
    for (int i = 0; i < 14; i++) CHECK_CLOSE(pred[i], y[i], 1e-6, rtol);
    mxp_model_destroy(m);
}

static void test_init_errors(void) {
    mxp_error err = {0};
    mxp_model_spec s;
    CHECK_OK(mxp_model_spec_layers(kList, 3, 2, MXP_LOSS_MSE, 7, &s, &err), &err);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&s, &pol, 1, &m, &err), &err);
    if (!m) return;
    size_t P = mxp_model_num_params(m);
    float *before = test_xmalloc(P * sizeof(float));
    for (size_t i = 0; i < P; i++) before[i] = mxp_model_param(m, i);
    static const struct {
        const char *file, *text;
        mxp_status st;
    } bad[] = {
        {"missing.safetensors", "missing tensor 'layers.3.bias' [4]", MXP_ERR_FORMAT},
        {"extra.safetensors", "unexpected tensor 'layers.6.weight'", MXP_ERR_FORMAT},
        {"shape.safetensors", "tensor 'layers.3.weight' has shape [5, 4]; the model needs [4, 5]",
         MXP_ERR_FORMAT},
        {"nan.safetensors", "tensor 'layers.0.bias' holds NaN or Inf at flat index 1",
         MXP_ERR_FORMAT},
        {"x.bin", "x.bin", MXP_ERR_FORMAT},
        {"no_such.safetensors", "no_such.safetensors", MXP_ERR_IO},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mxp_status st = mxp_ckpt_init_weights(m, path_of(bad[i].file), &err);
        CHECK_MSG(st == bad[i].st && strstr(err.msg, bad[i].text),
                  "%s: status %d, message '%s', expected '%s'", bad[i].file, (int)st, err.msg,
                  bad[i].text);
        int changed = 0;
        for (size_t k = 0; k < P; k++) changed += mxp_model_param(m, k) != before[k];
        CHECK_MSG(changed == 0, "%s: %d weights changed on error", bad[i].file, changed);
    }
    free(before);
    mxp_model_destroy(m);
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("test_user_model: SKIP (no /usr/bin/python3)\n");
        return 77;
    }
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/model_cases.py %s", MXP_TEST_SRC_DIR, g_dir);
    if (system(cmd) != 0) {
        printf("test_user_model: SKIP (numpy could not write the cases)\n");
        test_rm_rf(g_dir);
        return 77;
    }
    test_spec();
    test_init("init.safetensors", "y.bin", MXP_PRECISION_FP32, 1e-5);
    test_init("init_bf16.safetensors", "y_bf16.bin", MXP_PRECISION_FP32, 1e-5);
    test_init("init_f16.safetensors", "y_f16.bin", MXP_PRECISION_FP32, 1e-5);
    /* pure BF16: the BF16 file's weights are exact in BF16; activations are
     * rounded to BF16 between layers, so 2^-8 relative per layer */
    test_init("init_bf16.safetensors", "y_bf16.bin", MXP_PRECISION_BF16, 0.05);
    test_init_errors();
    test_rm_rf(g_dir);
    return test_finish("test_user_model");
}
