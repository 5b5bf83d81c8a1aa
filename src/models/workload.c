/* models/workload.c: mxp_workload_provider_builtin (run.h): the provider
 * that model.workload names. */
#include "models/workload.h"

mxp_status mxp_workload_provider_builtin(const mxp_config *cfg, mxp_workload_provider *out,
                                         mxp_error *err) {
    if (!cfg || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_workload_provider_builtin: NULL");
    switch (cfg->workload) {
    case MXP_WORKLOAD_WORLD_MODEL: return world_model_provider(cfg, out, err);
    case MXP_WORKLOAD_CLASSIFIER: return classifier_provider(cfg, out, err);
    case MXP_WORKLOAD_GPT: return gpt_provider(cfg, out, err);
    default:
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "model.workload=%d; accepted: world_model, classifier, gpt",
                             (int)cfg->workload);
    }
}
