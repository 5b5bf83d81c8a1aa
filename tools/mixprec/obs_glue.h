/* tools/mixprec/obs_glue.h: observability glue of the CLI (obs_glue.c) and
 * the `mixprec report` verb (cmd_report.c). */
#ifndef MIXPREC_OBS_GLUE_H
#define MIXPREC_OBS_GLUE_H

#include "cli.h"

typedef struct obs_glue obs_glue;

/* Take --serve or --log-format text|json at argv[*i] (advancing *i past a
 * value): 1 taken, 0 not ours, -1 malformed (error printed). */
int obs_glue_take_arg(int argc, char **argv, int *i);
/* Install the JSON log sink when --log-format json was given (call right
 * after cli_install_logger, before the config is resolved, so the kill
 * switch line is JSON too). */
void obs_glue_install_logger(void);
/* Apply --serve and log.format to a resolved config; true when log lines
 * are JSON (the caller then keeps stderr free of plain progress lines). */
bool obs_glue_apply_config(mxp_config *cfg);

/* What the observer watches, for any workload: the run (operator
 * precision requests go to it), its trainer, its guard (NULL when off; its
 * events go to the event log, store and metrics) and the training samples
 * per epoch (for the step total). */
typedef struct obs_glue_run {
    mxp_run *run;
    mxp_trainer *trainer;
    mxp_guard *guard;
    int64_t samples_per_epoch;
} obs_glue_run;

/* Create the run's observer (run store in output.dir, HTTP server when
 * obs.http.enabled), log "fp16_enabled: True|False", begin the run.
 * Returns a CLI exit code (errors printed). */
int obs_glue_open(const mxp_config *cfg, const obs_glue_run *run, obs_glue **out);
/* The progress state of a CLI run: bar/log lines and the epoch's mean loss
 * (cli_progress) and the run's observer (NULL: none).
 * obs_glue_on_progress(user = an obs_glue_progress) records the step with
 * obs_glue_step, then updates the progress output. */
typedef struct obs_glue_progress {
    cli_progress base;
    obs_glue *obs;
} obs_glue_progress;
void obs_glue_on_progress(void *user, const mxp_progress *p);

/* Per step, from the progress callback: record the step, then hand a
 * pending operator precision request (POST /api/training/precision) to
 * the run, which applies it at this step boundary. NULL g: no-op. */
void obs_glue_step(obs_glue *g, const mxp_progress *p);
/* The run applied a precision switch (mxp_run_observer.precision_changed;
 * self = an obs_glue_progress): record it and log the runbook lines. */
void obs_glue_on_precision(void *self, mxp_run *run, mxp_precision from, mxp_precision to,
                           const char *reason);
/* A validation during training (mxp_run_observer.evaluated; self = an
 * obs_glue_progress): the progress line's "val", the validation-loss
 * gauge and a "validation" event in the store. */
void obs_glue_on_eval(void *self, mxp_run *run, const mxp_run_val_row *v);
/* End of run (ok: finished, else failed with msg; stopped: a guard rule
 * with action stop ended it), linger if configured, flush and release.
 * val_loss may be NaN. NULL g: no-op. */
void obs_glue_close(obs_glue *g, bool ok, bool stopped, const char *msg, double val_loss);

int cmd_report(int argc, char **argv);

#endif
