/* train/trainer_device_fp8.c: the FP8 scaling state's moves between the
 * device plan and the host model (contract in trainer_device_fp8.h). Both
 * sides use mxp_fp8_scaling_get_state's layout (per slot the scale, then
 * every history oldest first), so the move is one buffer each way: one
 * counted device copy on a pull, one upload on a push, outside steps.
 */
#include "train/trainer_device_fp8.h"

#include <mixprec/amp.h>

mxp_status trainer_device_fp8_sync(mxp_ds_plan *plan, mxp_model *m, bool to_host,
                                   mxp_error *err) {
    const size_t n = plan ? mxp_ds_fp8_state_size(plan) : 0;
    mxp_fp8_scaling *f = mxp_model_fp8(m);
    if (n == 0) return MXP_OK; /* not an FP8 plan */
    if (!f || mxp_fp8_scaling_state_size(f) != n)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "training.device=cuda fp8: the model's FP8 scaling state (%zu "
                             "floats) does not match the device plan's (%zu)",
                             f ? mxp_fp8_scaling_state_size(f) : (size_t)0, n);
    float *buf = mxp_calloc(n, sizeof *buf);
    if (!buf) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "fp8 state staging");
    char why[256] = "";
    mxp_status s = MXP_OK;
    int64_t passes = 0;
    if (to_host) {
        if (mxp_ds_fp8_get_state(plan, buf, n, &passes, why, sizeof why))
            s = mxp_error_set(err, MXP_ERR_IO, "download of the FP8 scaling state: %s", why);
        else
            s = mxp_fp8_scaling_set_state(f, buf, n, passes, err);
    } else {
        mxp_fp8_scaling_get_state(f, buf);
        if (mxp_ds_fp8_set_state(plan, buf, n, mxp_fp8_scaling_steps(f), why, sizeof why))
            s = mxp_error_set(err, MXP_ERR_IO, "upload of the FP8 scaling state: %s", why);
    }
    mxp_free(buf);
    return s;
}
