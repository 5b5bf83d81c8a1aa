/* tools/mixprec/bench_train.c: `mixprec bench train` (issue 7 item 5 and
 * issue 3 item 5): options, the hardware lines, and the two sections.
 *
 *   scenarios  every cell (workload x scenario x precision mode) run
 *              --runs times as a child process (bench_train_cells.c);
 *              bench.csv, bench.md (bench_train_out.c);
 *   steps      ms per training step by phase, in-process
 *              (bench_train_steps.c); steps.csv and a bench.md section.
 * bench.md is also printed to stdout; the PNG plots come from
 * `mixprec report OUT_DIR` (bench_train_plot.c), run at the end when
 * gnuplot is installed. Exit codes: 0 every cell ran, 1 a cell failed
 * (the outputs are still written), 2 usage, 3 outputs not writable.
 */
#include "bench_train.h"
#include "cli.h"

#include "kernels/kernels.h"
#include "kernels/threads.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void help(FILE *f) {
    fputs("usage: mixprec bench train [--quick] [--runs N] [--out DIR]\n"
          "                           [--only scenarios|steps] [--workloads LIST]\n"
          "                           [key=value ...]\n"
          "\n"
          "Train every workload in every precision mode (fp32, mixed_bf16, mixed_fp16,\n"
          "bf16, fp16, fp8 emulated) and compare each with fp32: median wall time,\n"
          "speedup, overflow rate, train and validation loss (classifier: test\n"
          "accuracy), degradation, memory split and peak RSS. The world model runs the\n"
          "seeds' scenarios warmup (128 trajectories, 1 epoch), standard (256, 3) and\n"
          "stress (512, 5). Section \"steps\" times one training step by phase on the\n"
          "tiny/base/big world-model MLPs. Writes OUT_DIR/bench.csv, steps.csv,\n"
          "bench.md (also printed) and, with gnuplot, PNG plots (mixprec report DIR).\n"
          "\n"
          "  --quick           CI size: 1 run, short episodes, small subsets (< 2 min)\n"
          "  --runs N          runs per cell, median reported, 1..15 (default 3; quick 1)\n"
          "  --out DIR         output directory (default runs/bench-<UTC timestamp>)\n"
          "  --only SECTION    scenarios | steps (default both)\n"
          "  --workloads LIST  comma-separated world_model,classifier,gpt (default all)\n"
          "  key=value         config override for every world-model cell, e.g.\n"
          "                    model.hidden=256 training.batch_size=32 or data.env=ant\n",
          f);
}

static int bad(const char *opt, const char *val, const char *accepted) {
    cli_error("%s %s is invalid; accepted: %s", opt, val ? val : "(missing)", accepted);
    return CLI_EXIT_USAGE;
}

static int parse_workloads(const char *v, bt_opts *o) {
    char buf[256];
    if (!v || strlen(v) >= sizeof buf || !*v)
        return bad("--workloads", v, "a comma-separated list of world_model, classifier, gpt");
    snprintf(buf, sizeof buf, "%s", v);
    for (int w = 0; w < BT_WL_COUNT; w++) o->workload[w] = false;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int w = 0;
        while (w < BT_WL_COUNT && strcmp(t, bt_workload_name((bt_workload)w)) != 0) w++;
        if (w == BT_WL_COUNT)
            return bad("--workloads", v, "a comma-separated list of world_model, classifier, gpt");
        o->workload[w] = true;
    }
    return CLI_EXIT_OK;
}

static int parse(int argc, char **argv, bt_opts *o, bool *help_only) {
    memset(o, 0, sizeof *o);
    o->scenarios = o->steps = true;
    for (int w = 0; w < BT_WL_COUNT; w++) o->workload[w] = true;
    *help_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            *help_only = true;
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--quick") == 0) {
            o->quick = true;
        } else if (strcmp(a, "--runs") == 0) {
            char *end;
            long r = v ? strtol(v, &end, 10) : 0;
            if (!v || !*v || *end || r < 1 || r > BT_MAX_RUNS)
                return bad(a, v, "an integer in [1, 15]");
            o->runs = (int)r;
            i++;
        } else if (strcmp(a, "--out") == 0) {
            if (!v || !*v || strlen(v) >= sizeof o->out - 64)
                return bad(a, v, "a directory path shorter than 440 characters");
            snprintf(o->out, sizeof o->out, "%s", v);
            i++;
        } else if (strcmp(a, "--only") == 0) {
            if (v && strcmp(v, "scenarios") == 0) o->steps = false;
            else if (v && strcmp(v, "steps") == 0) o->scenarios = false;
            else return bad(a, v, "scenarios, steps");
            i++;
        } else if (strcmp(a, "--workloads") == 0) {
            int rc = parse_workloads(v, o);
            if (rc != CLI_EXIT_OK) return rc;
            i++;
        } else if (a[0] != '-' && strchr(a, '=') && strlen(a) < BT_OVR_LEN) {
            if (o->n_user_ovr == BT_MAX_OVR - 8) {
                cli_error("too many key=value overrides (at most %d)", BT_MAX_OVR - 8);
                return CLI_EXIT_USAGE;
            }
            o->user_ovr[o->n_user_ovr++] = a;
        } else {
            cli_error("unexpected argument '%s'; accepted: --quick, --runs N, --out DIR, "
                      "--only scenarios|steps, --workloads LIST, key=value, --help", a);
            return CLI_EXIT_USAGE;
        }
    }
    if (o->runs == 0) o->runs = o->quick ? 1 : 3;
    if (!o->out[0]) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char ts[32];
        strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(o->out, sizeof o->out, "runs/bench-%s", ts);
    }
    return CLI_EXIT_OK;
}

/* ---- hardware --------------------------------------------------------------- */

/* The hardware block, as markdown (also the top of the printed output). */
static void hardware_md(FILE *f, const bt_opts *o, int argc, char **argv) {
    const mxp_cpu_features *cf = mxp_cpu_features_get();
    char model[192];
    cli_cpu_model(model, sizeof model);
    const char *force = getenv("MIXPREC_FORCE_ISA");
    fprintf(f, "# mixprec bench train\n\n");
    fprintf(f, "- command: `mixprec bench");
    for (int i = 0; i < argc; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, "`\n- cpu: %s; %ld online cores; kernel threads %d\n", model,
            sysconf(_SC_NPROCESSORS_ONLN), mxp_threads_max());
    fprintf(f, "- features: %sAVX-512F %sAVX512-BF16 %sAVX512-FP16 %sF16C %sAVX2 %sFMA\n",
            cf->avx512f ? "+" : "-", cf->avx512_bf16 ? "+" : "-", cf->avx512_fp16 ? "+" : "-",
            cf->f16c ? "+" : "-", cf->avx2 ? "+" : "-", cf->fma ? "+" : "-");
    fprintf(f, "- kernel table: %s%s%s%s\n", mxp_kernels_get()->isa,
            force ? " (MIXPREC_FORCE_ISA=" : "", force ? force : "", force ? ")" : "");
    if (mxp_kernels_get()->gemm_compute(MXP_DTYPE_F16, true) == MXP_GEMM_COMPUTE_FP16_FMA)
        fprintf(f, "- fp16 fast-accumulate GEMM (training.fp16_accumulate=fp16): vfmadd231ph on "
                   "this CPU (AVX512-FP16); the world model's scenarios also run mixed_fp16 "
                   "with it\n");
    else
        fprintf(f, "- fp16 fast-accumulate GEMM (training.fp16_accumulate=fp16): emulated "
                   "numerics only here (no AVX512-FP16, or the generic table), not timed\n");
    double l = cli_load_average();
    if (l >= 0)
        fprintf(f, "- load average at start: %.2f%s\n", l,
                l > 0.5 ? " (other work is running: times are noisy)" : "");
    fprintf(f, "- runs per cell: %d%s\n", o->runs, o->quick ? " (--quick)" : "");
}

/* ---- main ------------------------------------------------------------------- */

static bool gnuplot_present(void) {
    const char *path = getenv("PATH");
    char buf[4096], p[4200];
    snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(p, sizeof p, "%s/gnuplot", d);
        if (access(p, X_OK) == 0) return true;
    }
    return false;
}

int bench_train(int argc, char **argv) {
    bt_opts o;
    bool help_only;
    int rc = parse(argc, argv, &o, &help_only);
    if (rc != CLI_EXIT_OK || help_only) return rc;
    int e = cli_mkdirs(o.out);
    if (e != 0) {
        cli_error("cannot create --out %s: %s", o.out, strerror(e));
        return CLI_EXIT_IO;
    }
    cli_install_logger();
    mxp_log_set_level(MXP_LOG_WARN);
    char *md = NULL;
    size_t md_len = 0;
    FILE *m = open_memstream(&md, &md_len);
    if (!m) return CLI_EXIT_FAIL;
    hardware_md(m, &o, argc, argv);
    fflush(m);
    fputs(md, stdout); /* the hardware block first */
    printf("\n");
    fflush(stdout);

    bool failed = false;
    bt_cell *cells = NULL;
    int nc = 0;
    if (o.scenarios) {
        cells = mxp_calloc(BT_MAX_CELLS, sizeof *cells);
        if (!cells) {
            fclose(m);
            free(md);
            cli_error("out of memory for the cells");
            return CLI_EXIT_FAIL;
        }
        nc = bt_cells_build(&o, cells, BT_MAX_CELLS);
        printf("section scenarios: %d cells x %d run%s (child processes; logs in %s/cells)\n", nc,
               o.runs, o.runs > 1 ? "s" : "", o.out);
        bt_cells_run(&o, cells, nc, stdout);
        for (int i = 0; i < nc; i++) failed |= !cells[i].ok;
        bt_derive(cells, nc);
        char p[600];
        snprintf(p, sizeof p, "%s/bench.csv", o.out);
        if (!bt_write_csv(p, cells, nc)) {
            cli_error("cannot write %s", p);
            rc = CLI_EXIT_IO;
        }
        bt_write_md(m, &o, cells, nc);
    }
    if (o.steps) {
        bt_step_row rows[BT_MAX_STEP_ROWS];
        printf("\nsection steps: ms per mxp_trainer_step by phase (median of timed steps)\n");
        int nr = bt_steps_run(&o, rows, stdout);
        for (int i = 0; i < nr; i++) failed |= !rows[i].ok;
        char p[600];
        snprintf(p, sizeof p, "%s/steps.csv", o.out);
        if (!bt_steps_write_csv(p, rows, nr)) {
            cli_error("cannot write %s", p);
            rc = CLI_EXIT_IO;
        }
        bt_steps_write_md(m, rows, nr);
    }
    double l = cli_load_average();
    if (l >= 0) fprintf(m, "\nLoad average at the end: %.2f\n", l);
    fclose(m);
    char p[600];
    snprintf(p, sizeof p, "%s/bench.md", o.out);
    FILE *f = fopen(p, "w");
    if (!f || fputs(md, f) < 0 || fclose(f) != 0) {
        cli_error("cannot write %s: %s", p, strerror(errno));
        rc = CLI_EXIT_IO;
    }
    /* the hardware block was printed already: print what follows it */
    const char *rest = strstr(md, "\n## ");
    printf("%s\n", rest ? rest : "");
    free(md);
    mxp_free(cells);
    if (o.scenarios && rc == CLI_EXIT_OK) {
        if (gnuplot_present()) {
            char out[600];
            snprintf(out, sizeof out, "%s/report", o.out);
            if (bench_train_report(o.out, out) != CLI_EXIT_OK)
                printf("plots: failed (see %s/gnuplot.log)\n", out);
        } else {
            printf("plots: gnuplot not found; install gnuplot-nox and run `mixprec report %s`\n",
                   o.out);
        }
    }
    printf("wrote %s/bench.csv, %s/bench.md%s\n", o.out, o.out,
           o.steps ? " and steps.csv" : "");
    if (rc != CLI_EXIT_OK) return rc;
    return failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
