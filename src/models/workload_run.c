/* models/workload_run.c: the run behind the older per-workload handles
 * (models/workload_run.h), through run.h's public functions only.
 *
 * Progress: the run reports every step to on_progress, which calls the
 * handle's current callback (set_progress may change it at any time), then
 * turns a raised stop flag (world_model.h's set_stop_flag) into
 * mxp_run_request_stop: the run stops at that same step boundary, as it
 * stops on any request. */
#include "models/workload_run.h"

static void on_progress(void *user, const mxp_run_progress *p) {
    workload_run *w = user;
    if (w->progress) w->progress(w->progress_user, p);
    if (w->stop_flag && *w->stop_flag) mxp_run_request_stop(w->run);
}

mxp_status workload_run_create(workload_run *w, const mxp_config *cfg,
                               const mxp_workload_provider *p, mxp_error *err) {
    *w = (workload_run){0};
    mxp_run_options o = mxp_run_options_default();
    o.provider = p;
    o.checkpoints = false; /* the handles' set_checkpointer */
    o.progress = on_progress;
    o.progress_user = w;
    return mxp_run_create(cfg, &o, &w->run, err);
}

void workload_run_destroy(workload_run *w) {
    mxp_run_destroy(w->run);
    w->run = NULL;
}

void *workload_run_self(const workload_run *w) { return mxp_run_provider(w->run)->self; }

bool workload_run_stopped(const workload_run *w) {
    mxp_run_info info;
    mxp_run_stats(w->run, &info);
    return info.stopped;
}

mxp_status workload_run_load(workload_run *w, const char *path, mxp_ckpt_info *info,
                             mxp_error *err) {
    mxp_ckpt_info in;
    mxp_status s = mxp_ckpt_load(path, mxp_run_trainer(w->run), &in, err);
    if (s != MXP_OK) return s;
    mxp_run_set_position(w->run, &in.pos);
    if (info) *info = in;
    return MXP_OK;
}

mxp_status workload_run_rollback(workload_run *w, const char *reason,
                                 mxp_ckpt_rollback_result *res, mxp_error *err) {
    mxp_ckpt_manager *m = mxp_run_checkpointer(w->run);
    if (!m) return mxp_error_set(err, MXP_ERR_STATE, "rollback: no checkpoint manager attached");
    mxp_data_position pos;
    mxp_run_position(w->run, &pos);
    mxp_status s = mxp_ckpt_manager_rollback(m, mxp_run_trainer(w->run), reason, &pos, res, err);
    mxp_run_set_position(w->run, &pos); /* as the rollback left it, whatever it returned */
    return s;
}
