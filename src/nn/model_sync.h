/* nn/model_sync.h: a model whose parameters of record live elsewhere
 * (internal; train/trainer_device.c).
 *
 * When a trainer runs its steps on a device (docs/design.md "The device
 * step"), the model's host slabs are a copy that goes stale after each
 * device step. The trainer installs two callbacks here, and the model's
 * entry points that read or write parameters on the host call them:
 *   pull  before a read: mxp_model_tensor_get / _set (a named tensor's set
 *         leaves the rest as it was), mxp_model_predict, mxp_model_step,
 *         mxp_model_copy_params (the source), mxp_model_scale_layer_weights,
 *         mxp_model_set_policy, mxp_model_master / _work / _param;
 *   wrote after a write: mxp_model_tensor_set, mxp_model_copy_params (the
 *         destination), mxp_model_scale_layer_weights, mxp_model_set_policy.
 * A third, grads, is called before the gradients are read or written
 * (mxp_model_tensor_get / _set of role grad, mxp_model_grads): the device's
 * gradients of its last step, pulled only then.
 * With none installed (every CPU trainer) each call is one NULL test.
 * The step that runs elsewhere also hands its scans of the stored tensors
 * to the model's monitor (nn_model_monitor_pass), as the CPU's passes do.
 * Entry points: nn_model_set_sync, nn_sync_pull, nn_sync_wrote,
 * nn_model_set_grad_sync, nn_sync_grads,
 * nn_model_fp32_mask, nn_model_monitor_pass, nn_model_monitor_site,
 * nn_model_fault.
 */
#ifndef MIXPREC_NN_MODEL_SYNC_H
#define MIXPREC_NN_MODEL_SYNC_H

#include <mixprec/model.h>

typedef mxp_status (*nn_sync_fn)(void *user, mxp_error *err);

/* Install (pull, wrote, user); NULLs remove them. */
void nn_model_set_sync(mxp_model *m, nn_sync_fn pull, nn_sync_fn wrote, void *user);
/* Call the model's pull / wrote (MXP_OK when none). */
mxp_status nn_sync_pull(const mxp_model *m, mxp_error *err);
mxp_status nn_sync_wrote(const mxp_model *m, mxp_error *err);
/* Install the gradient pull (same user as nn_model_set_sync; NULL removes
 * it) and call it (MXP_OK when none). */
void nn_model_set_grad_sync(mxp_model *m, nn_sync_fn grads);
mxp_status nn_sync_grads(const mxp_model *m, mxp_error *err);
/* Layers the model keeps in FP32 in its low-precision mode (amp.h
 * mxp_fp32_layers): a bit per layer, 0 when none. */
uint64_t nn_model_fp32_mask(const mxp_model *m);

/* The fault armed on m's training passes (mxp_model_set_fault: nan, inf
 * or value), for a step that runs elsewhere to plant; NULL when none. */
const mxp_fault_config *nn_model_fault(const mxp_model *m);

/* One tensor's scan taken elsewhere: largest finite |v| of its FP32 values
 * before they were stored, and their NaN/Inf count; has: it was scanned. */
typedef struct nn_ext_scan {
    bool has;
    float amax;
    int64_t nf;
} nn_ext_scan;

/* One training pass of `rows` rows run elsewhere (the device step), into
 * m's monitor as nn_pass_read records a CPU pass (nn/slots.c): a pass
 * begins, then layer l's output out[l] (0 <= l < n_layers) and input
 * gradient dx[l] (dx[n_layers]: the loss gradient) with m's storage
 * dtypes for its current policy and rows x width elements. No parameter
 * gradients (MXP_MON_DW) and no tiny counts: plain scans. No-op without a
 * monitor. */
void nn_model_monitor_pass(mxp_model *m, int64_t rows, const nn_ext_scan *out,
                           const nn_ext_scan *dx);
/* The pass's first non-finite site into the monitor's report (what:
 * "output", "grad_input"), as nn_pass_read notes it; no-op without one. */
void nn_model_monitor_site(mxp_model *m, const mxp_nonfinite_site *site, const char *what);

#endif
