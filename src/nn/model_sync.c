/* nn/model_sync.c: the pull / wrote callbacks of a model whose parameters
 * of record live on a device (contract: nn/model_sync.h).
 * Entry points: nn_model_set_sync, nn_sync_pull, nn_sync_wrote,
 * nn_model_fp32_mask.
 */
#include "nn/model_sync.h"

#include "nn/nn_internal.h"

void nn_model_set_sync(mxp_model *m, nn_sync_fn pull, nn_sync_fn wrote, void *user) {
    if (!m) return;
    m->sync_pull = pull;
    m->sync_wrote = wrote;
    m->sync_user = user;
}

mxp_status nn_sync_pull(const mxp_model *m, mxp_error *err) {
    return m && m->sync_pull ? m->sync_pull(m->sync_user, err) : MXP_OK;
}

mxp_status nn_sync_wrote(const mxp_model *m, mxp_error *err) {
    return m && m->sync_wrote ? m->sync_wrote(m->sync_user, err) : MXP_OK;
}

uint64_t nn_model_fp32_mask(const mxp_model *m) { return m ? m->fp32_mask : 0; }
