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
 * With none installed (every CPU trainer) each call is one NULL test.
 * Entry points: nn_model_set_sync, nn_sync_pull, nn_sync_wrote,
 * nn_model_fp32_mask.
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
/* Layers the model keeps in FP32 in its low-precision mode (amp.h
 * mxp_fp32_layers): a bit per layer, 0 when none. */
uint64_t nn_model_fp32_mask(const mxp_model *m);

#endif
