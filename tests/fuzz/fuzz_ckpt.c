/* tests/fuzz/fuzz_ckpt.c: libFuzzer target for the checkpoint loader.
 *
 * Every input goes through the whole read path: safetensors parse
 * (mxp_st_file_parse), integrity (mxp_st_file_verify), metadata decoding
 * (mxp_ckpt_read_info), the checks against a model (mxp_ckpt_check) and,
 * when all pass, mxp_ckpt_load_file into a trainer of the seed corpus's
 * model (pendulum world model, hidden 4, depth 1, pure bf16 so loads
 * convert); and the predictor's reading of a user-data checkpoint
 * (mxp_predictor_file_spec: stored config, workload_meta, the model it
 * describes against the file's weights). Any crash, sanitizer report, leak or allocation above
 * -malloc_limit_mb is a finding. Built and run by tests/fuzz/run_fuzz.sh;
 * seeds in tests/fuzz/corpus (tests/fuzz/make_corpus.sh). */
#include <mixprec/mixprec.h>

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mxp_model *g_model;
static mxp_trainer *g_trainer;

static void setup(void) {
    const mxp_env_info *env = mxp_env_info_get(MXP_ENV_PENDULUM);
    int64_t in = env->state_dim + env->action_dim, out = env->state_dim + 1;
    mxp_model_spec spec = mxp_model_spec_mlp(in, 4, 1, out, MXP_LAYER_GELU, false, MXP_LOSS_MSE, 1);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_BF16, &pol);
    mxp_trainer_config tc = mxp_trainer_config_default();
    if (mxp_model_create(&spec, &pol, 1, &g_model, NULL) != MXP_OK ||
        mxp_trainer_create(g_model, &tc, &g_trainer, NULL) != MXP_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_trainer) setup();
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    if (mxp_st_file_parse(data, size, "fuzz.safetensors", &f, &err) == MXP_OK) {
        volatile float sink = 0;
        for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
            const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
            if (t->numel) sink += mxp_st_tensor_get(t, 0) + mxp_st_tensor_get(t, t->numel - 1);
            (void)mxp_st_file_find(f, t->name);
        }
        (void)sink;
        (void)mxp_st_file_verify(f, &err);
        mxp_ckpt_info info;
        (void)mxp_ckpt_read_info(f, &info, &err);
        (void)mxp_ckpt_check(f, NULL, &info, &err);
        /* what eval, predict, export and verify read of a user-data run */
        mxp_model_spec spec;
        (void)mxp_predictor_file_spec(f, 1, &spec, &err);
        if (mxp_ckpt_check(f, g_model, &info, &err) == MXP_OK)
            (void)mxp_ckpt_load_file(f, g_trainer, &info, &err);
    }
    mxp_st_file_destroy(f);
    return 0;
}
