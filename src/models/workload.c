/* models/workload.c: see workload.h. */
#include "models/workload.h"

mxp_status workload_model_create(const mxp_model_spec *spec, const mxp_config *cfg,
                                 mxp_model **model, mxp_trainer **trainer, mxp_error *err) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(cfg->precision, &pol);
    pol.fp16_accum_k = cfg->fp16_accumulate ? (int)cfg->fp16_accumulate_k : 0;
    mxp_status s = mxp_model_create(spec, &pol, cfg->seed, model, err);
    if (s != MXP_OK) return s;
    if (cfg->fp8.history_len > 0 && (s = mxp_model_set_fp8_config(*model, &cfg->fp8, err)))
        return s;
    if (!mxp_fp32_layers_none(&cfg->fp32_layers) && /* training.precision_fp32_layers */
        (s = mxp_model_set_fp32_layers(*model, &cfg->fp32_layers, err)))
        return s;
    mxp_trainer_config tc = cfg->trainer;
    tc.grad_accum_steps = (int)cfg->grad_accum_steps;
    tc.seed = cfg->seed;
    return mxp_trainer_create(*model, &tc, trainer, err);
}

mxp_status workload_step(const workload_loop *w, const mxp_batch *micro, int n_micro,
                         mxp_data_position *p, int64_t epoch, mxp_step_result *res, bool *stop,
                         mxp_error *err) {
    const mxp_config *c = w->cfg;
    float lr = mxp_lr_at(c->lr_schedule, c->trainer.optim.lr, c->lr_min_ratio, p->run_step,
                         p->run_total);
    mxp_status s = mxp_trainer_set_lr(w->trainer, lr, err);
    if (s != MXP_OK) return s;
    if (w->guard && (s = mxp_guard_step_begin(w->guard, p, err)) != MXP_OK) return s;
    /* data parallel: an operator switch (rank 0's control API, a signal that
     * reached the ranks at different steps) applies on every rank at once */
    if ((s = mxp_trainer_sync_precision(w->trainer, err)) != MXP_OK) return s;
    if ((s = mxp_trainer_step(w->trainer, micro, n_micro, res, err)) != MXP_OK) return s;
    mxp_data_position_advance(p, w->steps_per_epoch);
    *stop = false; /* the guard may also move p back (rollback) */
    if (w->guard && (s = mxp_guard_step_end(w->guard, res, p, stop, err)) != MXP_OK) return s;
    if (w->progress) {
        mxp_progress pr = {p->run_step, p->run_total, epoch, p->run_first_epoch + p->run_epochs,
                           res};
        w->progress(w->progress_user, &pr);
    }
    return MXP_OK;
}

mxp_status workload_end(const workload_loop *w, mxp_error *err) {
    mxp_error e = {0};
    if (mxp_trainer_check_state(w->trainer, &e) == MXP_OK) return MXP_OK;
    return mxp_error_set(err, e.status, "training ended with unusable weights or optimizer "
                         "state (checkpoints written with it are marked unhealthy): %s", e.msg);
}
