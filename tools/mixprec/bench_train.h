/* tools/mixprec/bench_train.h: `mixprec bench train`, the end-to-end
 * benchmark of every precision mode on the real workloads.
 *
 *   bench_train.c        the verb: options, hardware lines, orchestration;
 *   bench_train_cells.c  the cell list (workload x scenario x mode) and
 *                        running one cell: a child process of this binary
 *                        (`mixprec train --json ...`), its peak RSS from
 *                        wait4(), its OUTPUT_DIR/summary.json read with
 *                        jansson;
 *   bench_train_out.c    derived columns (speedup, degradation, memory
 *                        reduction), bench.csv, bench.md and the summary
 *                        line against the issue's target;
 *   bench_train_steps.c  section "steps": ms per mxp_trainer_step split
 *                        into forward, backward, safety pass and optimizer
 *                        on the tiny/base/big world-model MLPs, in-process;
 *   bench_train_plot.c   `mixprec report BENCH_DIR`: PNG plots of bench.csv
 *                        with gnuplot.
 * Columns and method: docs/benchmarks.md, section "mixprec bench train".
 */
#ifndef MIXPREC_TOOLS_BENCH_TRAIN_H
#define MIXPREC_TOOLS_BENCH_TRAIN_H

#include <stdio.h>

#include <mixprec/mixprec.h>

enum { BT_MAX_RUNS = 15, BT_MAX_OVR = 16, BT_OVR_LEN = 160, BT_MAX_CELLS = 96 };

typedef enum bt_workload {
    BT_WL_WORLD_MODEL,
    BT_WL_CLASSIFIER,
    BT_WL_GPT,
    BT_WL_COUNT
} bt_workload;

const char *bt_workload_name(bt_workload w);

typedef struct bt_opts {
    bool quick;
    int runs;                    /* timed runs per cell, 1..BT_MAX_RUNS */
    char out[512];               /* output directory */
    bool scenarios, steps;       /* sections to run */
    bool workload[BT_WL_COUNT];  /* --workloads */
    const char *user_ovr[BT_MAX_OVR]; /* key=value for every world-model cell */
    int n_user_ovr;
} bt_opts;

/* The world model's variants of a mode: mixed_bf16 with linear layers
 * kept in FP32 (training.precision_fp32_layers), and mixed_fp16 with the
 * FP16 fast-accumulate GEMM (training.fp16_accumulate=fp16; only where the
 * kernel table runs it on vfmadd231ph, kernels.h gemm_compute). BT_KEEP_NONE is the
 * plain mode. */
typedef enum bt_keep {
    BT_KEEP_NONE,
    BT_KEEP_FIRST_LAST, /* mixed_bf16, first,last */
    BT_KEEP_FIRST,      /* mixed_bf16, first */
    BT_KEEP_F16ACC,     /* mixed_fp16, training.fp16_accumulate=fp16 */
    BT_KEEP_COUNT
} bt_keep;

/* The mode a variant belongs to (k != BT_KEEP_NONE). */
mxp_precision bt_keep_mode(bt_keep k);

/* "mixed_bf16 (fp32 first/last)", ...; the mode's label for BT_KEEP_NONE. */
const char *bt_keep_label(bt_keep k, mxp_precision p);

/* One benchmark cell: a workload, a scenario and a precision mode, its
 * child-process overrides and, once run, its results (NaN when absent). */
typedef struct bt_cell {
    bt_workload wl;
    char scenario[16];           /* warmup|standard|stress, or "default" */
    mxp_precision mode;
    bt_keep keep;                /* variant: linear layers kept in FP32
                                    (world model, mixed_bf16 only) */
    int64_t trajectories, epochs, batch, hidden, depth; /* as configured */
    char ovr[BT_MAX_OVR][BT_OVR_LEN];
    int n_ovr;
    /* results */
    bool ok;                     /* every run succeeded */
    int exit_code;               /* of the first failing run (0 when ok) */
    char note[160];              /* failure reason or remark, no commas */
    int runs_ok;
    double wall_s[BT_MAX_RUNS];  /* training wall time of each run */
    double wall_median, wall_min;
    double overflow_rate, train_loss, eval_loss, accuracy;
    bool losses_identical;       /* every run gave the same losses */
    int64_t steps, skipped, rollbacks, fallbacks;
    char end_precision[16];      /* summary's precision at the end */
    bool emulated;
    size_t mem_params, mem_grads, mem_master, mem_optimizer, mem_activations;
    bool mem_known;
    long peak_rss_kb;            /* max over runs (wait4 ru_maxrss) */
    /* derived (bt_derive) */
    double speedup, degradation, train_degradation_pct, mem_reduction_pct;
} bt_cell;

/* ---- cells (bench_train_cells.c) ---------------------------------------- */

/* Fill cells[] for the enabled workloads x scenarios x modes; returns the
 * count (at most cap). */
int bt_cells_build(const bt_opts *o, bt_cell *cells, int cap);
/* Run every cell o->runs times as child processes, in rounds (run k of
 * every cell before run k + 1 of any, so that a slow spell of the machine
 * is spread over the cells instead of falling on one cell's runs), their
 * run directories under o->out/cells/; fills the cells' results. Never
 * fails the whole bench: a failed run marks its cell, which runs no more.
 * progress (may be NULL) is printed to before each run. */
void bt_cells_run(const bt_opts *o, bt_cell *cells, int n, FILE *progress);
/* The label of mode p in reports ("fp8 (emulated)" for fp8). */
const char *bt_mode_label(mxp_precision p);
/* The label of cell c: its mode's, or its variant's (bt_keep_label). */
const char *bt_cell_label(const bt_cell *c);
size_t bt_cell_mem_total(const bt_cell *c);

/* ---- outputs (bench_train_out.c) ---------------------------------------- */

/* Speedup, degradation and memory reduction of each cell against the fp32
 * cell of the same workload and scenario (NaN without one). */
void bt_derive(bt_cell *cells, int n);
/* bench.csv (header + one row per cell). false on I/O error. */
bool bt_write_csv(const char *path, const bt_cell *cells, int n);
/* The markdown tables (seeds-shaped scenario tables per mode, per-workload
 * tables, the target line) to f. */
void bt_write_md(FILE *f, const bt_opts *o, const bt_cell *cells, int n);

/* ---- steps section (bench_train_steps.c) -------------------------------- */

typedef struct bt_step_row {
    const char *config;   /* tiny|base|big */
    int64_t hidden, batch;
    int depth;
    mxp_precision mode;
    bool ok;
    char note[128];
    int steps;
    double ms_step, ms_forward, ms_backward, ms_safety, ms_optimizer, ms_other;
    double final_loss;
    int64_t skipped;
    /* roofline: GEMM flops of one step (forward + backward, as
     * docs/kernels.md counts them), achieved at ms_step, and the measured
     * peak of the instruction this mode's GEMMs use (peak_name) */
    double gflop_step, gflops, peak_gflops, pct_peak;
    const char *peak_name;
} bt_step_row;

enum { BT_MAX_STEP_ROWS = 3 * MXP_PRECISION_COUNT };

/* Run the steps section (rows printed to f as they come); returns the
 * number of rows written to rows. */
int bt_steps_run(const bt_opts *o, bt_step_row *rows, FILE *f);
bool bt_steps_write_csv(const char *path, const bt_step_row *rows, int n);
void bt_steps_write_md(FILE *f, const bt_step_row *rows, int n);

/* ---- `mixprec bench train` and `mixprec report BENCH_DIR` --------------- */

int bench_train(int argc, char **argv);
/* PNG plots of DIR/bench.csv (and steps.csv) into out_dir; a CLI exit code. */
int bench_train_report(const char *dir, const char *out_dir);

#endif /* MIXPREC_TOOLS_BENCH_TRAIN_H */
