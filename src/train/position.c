/* train/position.c: the data position of a training run (train.h):
 * where the data loader is (epoch, step in it) and the train() call in
 * progress (the learning-rate schedule's position). One struct for the run
 * loop, the guard's rollbacks and the checkpoints.
 *
 * Entry points: mxp_data_position_begin / _advance / _done / _end.
 */
#include <mixprec/train.h>

mxp_status mxp_data_position_begin(mxp_data_position *p, int64_t num_epochs, int64_t batch_size,
                                   int64_t steps_per_epoch, mxp_error *err) {
    if (!p || num_epochs < 1 || batch_size < 1 || steps_per_epoch < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data position: num_epochs=%lld batch_size=%lld steps_per_epoch=%lld;"
                             " accepted: all >= 1",
                             (long long)num_epochs, (long long)batch_size,
                             (long long)steps_per_epoch);
    bool in_progress = p->run_total > 0 && p->run_step < p->run_total;
    if (in_progress) {
        if (p->run_epochs != num_epochs || p->batch_size != batch_size)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "a resumed run of %lld epochs at batch_size %lld is in progress "
                                 "(step %lld of %lld); train() was called with %lld epochs at "
                                 "batch_size %lld: call it with the resumed run's values",
                                 (long long)p->run_epochs, (long long)p->batch_size,
                                 (long long)p->run_step, (long long)p->run_total,
                                 (long long)num_epochs, (long long)batch_size);
        if (p->run_total != steps_per_epoch * num_epochs)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "the resumed run has %lld steps but this data gives %lld x %lld:"
                                 " the data or grad_accum_steps changed since the checkpoint",
                                 (long long)p->run_total, (long long)steps_per_epoch,
                                 (long long)num_epochs);
    } else {
        if (p->step_in_epoch != 0 && p->run_total == 0)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "data position step_in_epoch=%lld without a run in progress",
                                 (long long)p->step_in_epoch);
        if (p->run_total > 0) p->step_in_epoch = 0; /* finished call: next epoch */
        p->run_first_epoch = p->epoch;
        p->run_epochs = num_epochs;
        p->batch_size = batch_size;
        p->run_step = 0;
        p->run_total = steps_per_epoch * num_epochs;
    }
    if (p->step_in_epoch >= steps_per_epoch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data position step_in_epoch=%lld but an epoch has only %lld steps",
                             (long long)p->step_in_epoch, (long long)steps_per_epoch);
    return MXP_OK;
}

void mxp_data_position_advance(mxp_data_position *p, int64_t steps_per_epoch) {
    p->run_step++;
    if (++p->step_in_epoch >= steps_per_epoch) {
        p->step_in_epoch = 0;
        p->epoch++;
    }
}

bool mxp_data_position_done(const mxp_data_position *p) {
    return p->run_total > 0 && p->run_step >= p->run_total;
}

void mxp_data_position_end(mxp_data_position *p) {
    p->run_first_epoch = p->run_epochs = p->run_step = p->run_total = 0;
    p->step_in_epoch = 0;
}
