/* tools/mixprec/train_summary.h: what `mixprec train` reports at the end of
 * a run, for every workload (train_summary.c): the summary on stdout (text,
 * or the library's summary object with --json), summary.json, and the
 * guard's lines. */
#ifndef MIXPREC_TRAIN_SUMMARY_H
#define MIXPREC_TRAIN_SUMMARY_H

#include "cli.h"

/* What one run produced. */
typedef struct train_summary {
    mxp_run *run;         /* borrowed: trainer, guard, model, stats */
    mxp_run_info info;    /* mxp_run_stats at the end */
    mxp_train_stats stats;
    mxp_run_eval eval;    /* fields NaN where the workload has none */
    double train_loss;    /* mean loss of the last epoch (NaN: none) */
    double wall_s, samples_per_s;
    int64_t samples;
} train_summary;

/* Fill the fields every workload shares from the run. */
void train_summary_fill(train_summary *s, mxp_run *run, double train_loss);
/* The summary as one JSON line (mxp_run_summary_json: summary.json,
 * --json); false when it could not be made. */
bool train_summary_json(FILE *f, const train_summary *s);
/* The summary as aligned text lines, then the guard's lines. */
void train_summary_print(FILE *f, const train_summary *s);

/* `mixprec sample` (cmd_sample.c): text from a GPT checkpoint. */
int cmd_sample(int argc, char **argv);

#endif
