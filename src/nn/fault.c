/* nn/fault.c: fault injection for tests and drills (switched on by the
 * fault.* config keys through the guard).
 *
 * Entry points: mxp_fault_config_default, mxp_fault_kind_name,
 * mxp_fault_pass_name, mxp_model_set_fault, mxp_model_scale_layer_weights;
 * internal nn_fault_apply, nn_fault_targets (called by model_step.c).
 *
 * An armed fault poisons `elements` evenly spaced FP32 values of one
 * layer's forward output (before it is rounded into its storage dtype, so
 * provenance sees it exactly where a real overflow would appear) or of its
 * gradient (the parameter gradient when the layer has parameters, else the
 * gradient it passes down). Only training passes are faulted: validation,
 * predict and the FP32 canary never are. The guard arms and disarms the
 * fault per step; scale_weights is a one-off edit of the weights.
 */
#include "backend/devmem.h"
#include "nn/model_sync.h"
#include "nn/nn_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static const char *const fault_kind_names[] = {"none", "nan", "inf", "value",
                                               "scale_weights"};
static_assert(sizeof fault_kind_names / sizeof fault_kind_names[0] == MXP_FAULT_KIND_COUNT,
              "fault kind names out of sync");
static const char *const fault_pass_names[] = {"forward", "backward"};
static_assert(sizeof fault_pass_names / sizeof fault_pass_names[0] == MXP_FAULT_PASS_COUNT,
              "fault pass names out of sync");

const char *mxp_fault_kind_name(mxp_fault_kind k) {
    return (unsigned)k < MXP_FAULT_KIND_COUNT ? fault_kind_names[k] : "unknown";
}

const char *mxp_fault_pass_name(mxp_fault_pass p) {
    return (unsigned)p < MXP_FAULT_PASS_COUNT ? fault_pass_names[p] : "unknown";
}

mxp_fault_config mxp_fault_config_default(void) {
    return (mxp_fault_config){.kind = MXP_FAULT_NONE,
                              .pass = MXP_FAULT_FORWARD,
                              .layer = 0,
                              .step = 1,
                              .count = 1,
                              .elements = 1,
                              .value = 1e5};
}

void mxp_model_set_fault(mxp_model *m, const mxp_fault_config *f) {
    if (!m) return;
    if (f && (f->kind == MXP_FAULT_NAN || f->kind == MXP_FAULT_INF ||
              f->kind == MXP_FAULT_VALUE))
        m->fault = *f;
    else
        m->fault.kind = MXP_FAULT_NONE;
}

bool nn_fault_targets(const mxp_model *m, bool backward, int layer) {
    return m->fault.kind != MXP_FAULT_NONE && m->fault.layer == layer &&
           (m->fault.pass == MXP_FAULT_BACKWARD) == backward;
}

void nn_fault_apply(const mxp_model *m, bool backward, int layer, float *v, size_t n) {
    if (n == 0 || !nn_fault_targets(m, backward, layer)) return;
    float val = m->fault.kind == MXP_FAULT_NAN   ? NAN
                : m->fault.kind == MXP_FAULT_INF ? INFINITY
                                                 : (float)m->fault.value;
    size_t k = m->fault.elements < 1 ? 1 : (size_t)m->fault.elements;
    if (k > n) k = n;
    const size_t stride = n / k;
    for (size_t i = 0; i < k; i++) v[i * stride] = val;
}

static mxp_status mxp_model_scale_layer_weights_dev(mxp_model *m, int layer, float factor,
                                         mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "model is NULL");
    if (layer < 0 || layer >= m->n_layers || m->layers[layer].n_params == 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "fault.layer=%d: not a layer with weights; accepted: a linear "
                             "or layernorm layer index in 0..%d",
                             layer, m->n_layers - 1);
    if (!isfinite(factor))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "fault.value=%g: not finite",
                             (double)factor);
    const nn_layer *L = &m->layers[layer];
    const size_t wn = L->b_off - L->w_off;
    if (m->b.master) {
        m->k->scale(m->b.master + L->w_off, factor, wn);
        mxp_model_sync_work(m);
    } else {
        for (size_t i = 0; i < wn; i++) {
            float v = mxp_load_f32(m->policy.weight, m->b.work, L->w_off + i);
            mxp_store_f32(m->policy.weight, m->b.work, L->w_off + i, v * factor);
        }
    }
    return MXP_OK;
}

/* mxp_model_scale_layer_weights inside one backend bracket (backend/devmem.h) */
mxp_status mxp_model_scale_layer_weights(mxp_model *m, int layer, float factor,
                                         mxp_error *err) {
    mxp_status r_ = nn_sync_pull(m, err);
    if (r_ != MXP_OK) return r_;
    mxp_dev_enter();
    r_ = mxp_model_scale_layer_weights_dev(m, layer, factor, err);
    mxp_dev_leave();
    return r_ == MXP_OK ? nn_sync_wrote(m, err) : r_;
}
