#define _POSIX_C_SOURCE 200809L /* mkdtemp */
/* examples/train_run.c: a training run through the library's run object
 * (mixprec/run.h) with everything the CLI has: the numerical-safety guard
 * (on by default), periodic checkpoints in a run directory, a stop request
 * and a resume, and metrics (an mxp_obs with its SQLite store and events)
 * from one observer call.
 *
 * It trains the world model in mixed FP16, asks the run to stop after step
 * 20 (as a SIGTERM handler would), then resumes the run from its directory
 * and finishes it. Build: make -C examples (PKG_CONFIG_PATH pointing at an
 * installed libmixprec). Usage: train_run [RUN_DIR] (default a new
 * directory under /tmp). */
#include <mixprec/mixprec.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Progress: print every 20th step; stop the first session after step 20. */
typedef struct session {
    mxp_run *run;
    int64_t stop_after; /* 0: never */
} session;

static void on_progress(void *user, const mxp_run_progress *p) {
    session *s = user;
    if (p->step % 20 == 0)
        printf("  step %3lld/%lld  epoch %lld  loss %.5f  scale %g%s\n", (long long)p->step,
               (long long)p->total_steps, (long long)p->epoch + 1, p->result->loss,
               (double)p->result->scale, p->result->skipped ? "  (skipped)" : "");
    if (s->stop_after > 0 && p->step == s->stop_after) mxp_run_request_stop(s->run);
}

/* One session: a run on cfg (resume: NULL for a new run) observed by a
 * fresh mxp_obs writing into the run directory. */
static int session_run(const mxp_config *cfg, const char *resume, int64_t stop_after,
                       mxp_error *err) {
    mxp_obs *obs = NULL;
    mxp_run *run = NULL;
    session s = {NULL, stop_after};
    mxp_run_observer observer;
    mxp_run_options opt = mxp_run_options_default();
    opt.progress = on_progress;
    opt.progress_user = &s;
    opt.observer = &observer;
    opt.resume = resume;
    int ok = mxp_mkdirs(cfg->output_dir) == 0 && /* the store lives in the run directory */
             mxp_obs_create(&cfg->obs, cfg->output_dir, NULL, &obs, err) == MXP_OK &&
             mxp_obs_run_observer(obs, &observer, err) == MXP_OK &&
             mxp_run_create(cfg, &opt, &run, err) == MXP_OK;
    if (ok) {
        s.run = run;
        ok = mxp_run_train(run, 0, 0, err) == MXP_OK;
    }
    if (ok) {
        char js[2048];
        mxp_run_eval ev;
        ok = mxp_run_evaluate(run, &ev, err) == MXP_OK &&
             mxp_run_stats_json(run, js, sizeof js) > 0;
        if (ok) printf("  validation loss %.5f\n  stats %s\n", ev.loss, js);
    }
    mxp_run_destroy(run); /* the observer ends the run in the store */
    mxp_obs_destroy(obs);
    return ok;
}

int main(int argc, char **argv) {
    char dir[256];
    if (argc > 1) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        snprintf(dir, sizeof dir, "/tmp/mixprec_train_run_XXXXXX");
        if (!mkdtemp(dir)) return 1;
        strncat(dir, "/run", sizeof dir - strlen(dir) - 1);
    }
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    char out[300];
    snprintf(out, sizeof out, "output.dir=%s", dir);
    const char *overrides[] = {"training.precision=mixed_fp16", "training.epochs=2",
                               "data.trajectories=16", "data.episode_length=50",
                               "model.hidden=32", "checkpoint.every_steps=10", out};
    int ok = mxp_config_builder_create(&b, &err) == MXP_OK;
    for (size_t i = 0; ok && i < sizeof overrides / sizeof overrides[0]; i++)
        ok = mxp_config_apply_override(b, overrides[i], &err) == MXP_OK;
    ok = ok && mxp_config_resolve(b, &cfg, &err) == MXP_OK;
    mxp_config_builder_destroy(b);

    if (ok) printf("train_run: a new run in %s, stopped after step 20\n", dir);
    ok = ok && session_run(&cfg, NULL, 20, &err);
    if (ok) printf("train_run: resumed from %s\n", dir);
    ok = ok && session_run(&cfg, dir, 0, &err);
    if (!ok) {
        fprintf(stderr, "train_run: %s\n", err.msg);
        return 1;
    }
    printf("train_run: done; checkpoints in %s/checkpoints, metrics in %s\n", dir, dir);
    return 0;
}
