/* models/workload.h: the built-in workload providers (run.h's
 * mxp_workload_provider) of world_model.c, classifier.c and gpt.c, each
 * built from a resolved config. Not a public header: users reach them
 * through mxp_workload_provider_builtin or mxp_run_create. */
#ifndef MIXPREC_MODELS_WORKLOAD_H
#define MIXPREC_MODELS_WORKLOAD_H

#include <mixprec/run.h>

/* Each loads or generates its data from cfg and fills *out (whose destroy
 * releases it); on failure nothing is left allocated. */
mxp_status world_model_provider(const mxp_config *cfg, mxp_workload_provider *out,
                                mxp_error *err);
mxp_status classifier_provider(const mxp_config *cfg, mxp_workload_provider *out,
                               mxp_error *err);
mxp_status gpt_provider(const mxp_config *cfg, mxp_workload_provider *out, mxp_error *err);

/* The MLP workloads' config: batch size, accumulation, model.depth and
 * model.hidden >= 1, depth within the model's layer limit. */
mxp_status workload_check_mlp(const mxp_config *cfg, mxp_error *err);

#endif
