/* tools/mixprec/workload_train.h: `mixprec train` for the workloads beyond
 * the world model (model.workload=classifier|gpt), kept out of
 * cmd_train.c. */
#ifndef MIXPREC_WORKLOAD_TRAIN_H
#define MIXPREC_WORKLOAD_TRAIN_H

#include "cli.h"

/* Train cfg->workload (not the world model) with progress output (unless
 * quiet), print a summary (JSON on stdout when json), and write
 * OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv. Returns a CLI exit
 * code. */
int workload_train(const mxp_config *cfg, bool json, bool quiet);

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
