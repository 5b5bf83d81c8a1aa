/* nn/grad_scale.c: per-layer gradient scales for adaptive (per-layer) loss
 * scaling, and the layer/parameter-range queries it needs.
 *
 * Entry points: mxp_model_num_layers, mxp_model_layer_param_group,
 * mxp_model_layer_params, mxp_model_set_grad_scales (model.h). The backward
 * driver (model_step.c) multiplies the FP32 dX of layer l by
 * scales[l-1] / scales[l] before rounding it into the grad dtype, so a
 * power-of-two ratio is exact and the stored value is the correctly rounded
 * rescaled gradient (no double rounding through FP16).
 */
#include "nn/nn_internal.h"

int mxp_model_num_layers(const mxp_model *m) { return m ? m->n_layers : 0; }

/* Contract: the layer whose parameter range receives layer l's parameter
 * gradients: l itself when it owns parameters; for a layer without its own
 * parameters that writes tied ones (lm_head -> the embedding's wte), the
 * owner of those; -1 when the layer has no parameter gradients. */
int mxp_model_layer_param_group(const mxp_model *m, int l) {
    if (!m || l < 0 || l >= m->n_layers) return -1;
    const nn_layer *L = &m->layers[l];
    if (L->n_params > 0) return l;
    if (L->kind != MXP_LAYER_LM_HEAD) return -1;
    for (int j = 0; j < m->n_layers; j++) {
        const nn_layer *J = &m->layers[j];
        if (J->n_params > 0 && L->p_off >= J->w_off && L->p_off < J->w_off + J->n_params)
            return j;
    }
    return -1;
}

size_t mxp_model_layer_params(const mxp_model *m, int l, size_t *offset) {
    if (!m || l < 0 || l >= m->n_layers) {
        if (offset) *offset = 0;
        return 0;
    }
    if (offset) *offset = m->layers[l].w_off;
    return m->layers[l].n_params;
}

void mxp_model_set_grad_scales(mxp_model *m, const float *scales) {
    if (m) m->grad_scales = scales;
}
