/* tools/mixprec/train_summary.h: what `mixprec train` reports at the end of
 * a run, for every workload (train_summary.c): the summary on stdout (text,
 * or one JSON object with --json), summary.json, and the guard's lines. */
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
    int world_size;       /* data-parallel ranks */
    mxp_comm_stats comm;  /* rank 0's all-reduce traffic and time */
} train_summary;

/* Fill the fields every workload shares from the run. */
void train_summary_fill(train_summary *s, mxp_run *run, mxp_comm *comm, double train_loss);
/* The summary as one JSON object (summary.json, --json). */
void train_summary_json(FILE *f, const mxp_config *cfg, const train_summary *s);
/* The summary as aligned text lines, then the guard's lines. */
void train_summary_print(FILE *f, const train_summary *s);

/* summary.json's memory: `"memory_bytes":{"params":..,"master":..,"grads":..,
 * "optimizer":..,"activations":..},` of tr's model, optimizer = the bytes of
 * the optimizer state (AdamW m and v: 8 per parameter; SGD momentum: 4). */
size_t workload_optimizer_bytes(mxp_trainer *tr);
void workload_json_memory(FILE *f, mxp_trainer *tr);
/* "fp32_layers" (as configured) and "fp32_layers_kept" (model layer
 * indices run in FP32) members, each followed by a comma. */
void workload_json_fp32_layers(FILE *f, const mxp_config *cfg, mxp_trainer *tr);

/* `mixprec sample` (cmd_sample.c): text from a GPT checkpoint. */
int cmd_sample(int argc, char **argv);

#endif
