/* nn/grad_scale.c: per-layer gradient scales for adaptive (per-layer) loss
 * scaling, and the layer/parameter-range queries it needs.
 *
 * Entry points: mxp_model_num_layers, mxp_model_layer_param_group,
 * mxp_model_layer_params, mxp_model_set_grad_scales (model.h);
 * nn_grad_rescales, nn_grad_scale_ratio, nn_grad_rescale (nn_internal.h).
 * The backward driver (model_step.c) multiplies the FP32 dX of layer l by
 * S(l-1) / S(l) before rounding it into the grad dtype, so a power-of-two
 * ratio is exact and the stored value is the correctly rounded rescaled
 * gradient (no double rounding through FP16). In a trainer step S comes
 * from the step's group table in backend memory (nn_step_group_scales,
 * step_pass.c: the scales the trainer staged from the groups' states as
 * decide left them), read where it lives; docs/design.md "The backend seam".
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

/* S(l): the group table's entry (backend memory: callers run inside a
 * backend call), else the host array's. */
static float scale_of(const mxp_model *m, int l) {
    return m->gs_groups ? m->gs_groups[m->gs_group[l]].scale : m->grad_scales[l];
}

bool nn_grad_rescales(const mxp_model *m, int a, int b) {
    if (m->gs_groups) return m->gs_group[a] != m->gs_group[b];
    return m->grad_scales && m->grad_scales[a] != m->grad_scales[b];
}

float nn_grad_scale_ratio(const mxp_model *m, int a, int b) {
    return nn_grad_scaled(m) ? scale_of(m, a) / scale_of(m, b) : 1.0f;
}

void nn_grad_rescale(mxp_model *m, int a, int b, float *dx32, size_t n) {
    if (!nn_grad_scaled(m)) return;
    const float sa = scale_of(m, a), sb = scale_of(m, b);
    if (sa != sb) m->k->scale(dx32, sa / sb, n);
}
