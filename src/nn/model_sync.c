/* nn/model_sync.c: the pull / wrote callbacks of a model whose parameters
 * of record live on a device (contract: nn/model_sync.h).
 * Entry points: nn_model_set_sync, nn_sync_pull, nn_sync_wrote,
 * nn_model_set_grad_sync, nn_sync_grads,
 * nn_model_fp32_mask, nn_model_monitor_pass, nn_model_monitor_site,
 * nn_model_fault.
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

void nn_model_set_grad_sync(mxp_model *m, nn_sync_fn grads) {
    if (m) m->sync_grads = grads;
}

mxp_status nn_sync_grads(const mxp_model *m, mxp_error *err) {
    return m && m->sync_grads ? m->sync_grads(m->sync_user, err) : MXP_OK;
}

uint64_t nn_model_fp32_mask(const mxp_model *m) { return m ? m->fp32_mask : 0; }

void nn_model_monitor_pass(mxp_model *m, int64_t rows, const nn_ext_scan *out,
                           const nn_ext_scan *dx) {
    if (!m || !m->mon) return;
    const int L = m->n_layers;
    nn_mon_begin_pass(m);
    for (int l = 0; l < L; l++) {
        const nn_layer *ly = &m->layers[l];
        if (out[l].has)
            nn_mon_record(m, l, MXP_MON_OUT, (size_t)(rows * ly->out), m->b.act_type[l + 1],
                          out[l].amax, out[l].nf);
        if (dx[l].has)
            nn_mon_record(m, l, MXP_MON_DX, (size_t)(rows * ly->in), m->b.gtype[l], dx[l].amax,
                          dx[l].nf);
    }
    if (L > 0 && dx[L].has) /* the loss gradient, [rows, the last layer's out] */
        nn_mon_record(m, -1, MXP_MON_DX, (size_t)(rows * m->layers[L - 1].out), m->b.gtype[L],
                      dx[L].amax, dx[L].nf);
}

void nn_model_monitor_site(mxp_model *m, const mxp_nonfinite_site *site, const char *what) {
    if (m && m->mon && site && site->found) nn_mon_note_site(m, site, what);
}

const mxp_fault_config *nn_model_fault(const mxp_model *m) {
    return m && m->fault.kind != MXP_FAULT_NONE ? &m->fault : NULL;
}
