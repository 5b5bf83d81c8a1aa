/* models/workload.c: mxp_workload_provider_builtin (run.h): the provider
 * that model.workload names; the MLP workloads' config check. */
#include "models/workload.h"

#include <string.h>

#include "models/user_data.h"

/* data.path: the user's file through the dataset provider. */
static mxp_status from_file(const mxp_config *cfg, mxp_workload_provider *out, mxp_error *err) {
    mxp_dataset *d = NULL;
    mxp_status s = mxp_dataset_read(cfg->wl.data_path, &d, err);
    if (s == MXP_OK) s = ud_provider_create(cfg, d, NULL, false, out, err);
    mxp_dataset_destroy(d);
    return s;
}

mxp_status mxp_workload_provider_builtin(const mxp_config *cfg, mxp_workload_provider *out,
                                         mxp_error *err) {
    if (!cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_workload_provider_builtin: NULL");
    if (strcmp(cfg->wl.data_path, "none") != 0 && cfg->workload != MXP_WORKLOAD_GPT)
        return from_file(cfg, out, err);
    switch (cfg->workload) {
    case MXP_WORKLOAD_REGRESSOR: /* no built-in data */
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "model.workload=regressor has no data: it needs data.path=FILE "
                             "(safetensors or .npz with x [N, D] and y [N, K]; docs/data.md) "
                             "or the arrays in memory (mxp_run_options.data; Python: "
                             "Run(cfg, data={\"x\": ..., \"y\": ...}))");
    case MXP_WORKLOAD_WORLD_MODEL: return world_model_provider(cfg, out, err);
    case MXP_WORKLOAD_CLASSIFIER: return classifier_provider(cfg, out, err);
    case MXP_WORKLOAD_GPT: return gpt_provider(cfg, out, err);
    default:
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "model.workload=%d; accepted: world_model, classifier, gpt",
                             (int)cfg->workload);
    }
}

mxp_status workload_check_mlp(const mxp_config *cfg, mxp_error *err) {
    if (cfg->batch_size < 1 || cfg->grad_accum_steps < 1 || cfg->depth < 1 || cfg->hidden < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch_size=%lld grad_accum_steps=%lld depth=%lld hidden=%lld; "
                             "accepted: all >= 1",
                             (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                             (long long)cfg->depth, (long long)cfg->hidden);
    if (cfg->depth > (MXP_MODEL_MAX_LAYERS - 1) / 3)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model depth %lld; accepted: 1..%d",
                             (long long)cfg->depth, (MXP_MODEL_MAX_LAYERS - 1) / 3);
    return MXP_OK;
}
