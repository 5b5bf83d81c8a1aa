/* tools/mixprec/bench_train_plot.c: `mixprec report BENCH_DIR`, the plots
 * of a `mixprec bench train` output directory (cmd_report.c sends a
 * directory holding bench.csv here).
 *
 * Reads BENCH_DIR/bench.csv (columns by header name, so added columns do
 * not break it) and, when present, steps.csv; writes whitespace-separated
 * data files and a gnuplot script, and draws with Debian's gnuplot
 * (pngcairo):
 *   speedup.png      speedup vs fp32 per cell, one bar per mode;
 *   memory.png       memory split (params, grads, master, optimizer,
 *                    activations) per workload and mode, stacked (the
 *                    first scenario of each workload: the split does not
 *                    depend on the scenario);
 *   degradation.png  degradation vs fp32 per cell (validation loss %,
 *                    classifier: accuracy percentage points);
 *   steps.png        ms per step by phase, one panel per configuration
 *                    (from steps.csv).
 * Exit codes: 0 ok; 1 gnuplot missing or failed; 3 unreadable input or
 * unwritable output.
 */
#include "bench_train.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_COLS = 64, MAX_ROWS = 256, LINE = 2048, PATH_N = 700 };

typedef struct csv_table {
    int ncol, nrow;
    char *head[MAX_COLS];
    char *cell[MAX_ROWS][MAX_COLS];
    char *buf[MAX_ROWS + 1]; /* the lines, split in place */
} csv_table;

static int split(char *line, char **out) {
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; n < MAX_COLS;) {
        out[n++] = p;
        char *c = strchr(p, ',');
        if (!c) break;
        *c = '\0';
        p = c + 1;
    }
    return n;
}

/* Read a CSV without quoting (bench_train_out.c never writes commas or
 * quotes inside a field). false when unreadable or without a header. */
static bool csv_read(const char *path, csv_table *t) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[LINE];
    int i = 0;
    while (i <= MAX_ROWS && fgets(line, sizeof line, f)) {
        t->buf[i] = strdup(line);
        if (!t->buf[i]) break;
        if (i == 0)
            t->ncol = split(t->buf[0], t->head);
        else {
            int k = split(t->buf[i], t->cell[i - 1]);
            for (; k < MAX_COLS; k++) t->cell[i - 1][k] = "";
            t->nrow = i;
        }
        i++;
    }
    fclose(f);
    return t->ncol > 0;
}

static void csv_free(csv_table *t) {
    for (int i = 0; i <= MAX_ROWS; i++) free(t->buf[i]);
}

static int col(const csv_table *t, const char *name) {
    for (int i = 0; i < t->ncol; i++)
        if (strcmp(t->head[i], name) == 0) return i;
    return -1;
}

static const char *get(const csv_table *t, int r, int c) {
    return c >= 0 && t->cell[r][c] ? t->cell[r][c] : "";
}

/* A numeric field as text for gnuplot ("NaN" when empty). */
static const char *numtxt(const char *s) {
    return s && *s ? s : "NaN";
}

static void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* group label of row r: "world_model/warmup", "classifier", ... */
static void group_of(const csv_table *t, int r, char *out, size_t n) {
    const char *w = get(t, r, col(t, "workload")), *s = get(t, r, col(t, "scenario"));
    if (strcmp(s, "default") == 0)
        snprintf(out, n, "%s", w);
    else
        snprintf(out, n, "%s/%s", w, s);
}

/* A per-group x per-mode table of column `name` into path. */
static bool write_matrix(const csv_table *t, const char *name, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    int cv = col(t, name), cp = col(t, "precision");
    fputs("group", f);
    for (int p = 0; p < MXP_PRECISION_COUNT; p++)
        fprintf(f, " \"%s\"", bt_mode_label((mxp_precision)p));
    fputc('\n', f);
    char seen[MAX_ROWS][64];
    int ns = 0;
    for (int r = 0; r < t->nrow; r++) {
        char g[64];
        group_of(t, r, g, sizeof g);
        bool dup = false;
        for (int i = 0; i < ns && !dup; i++) dup = strcmp(seen[i], g) == 0;
        if (dup) continue;
        snprintf(seen[ns++], sizeof seen[0], "%s", g);
        fprintf(f, "\"%s\"", g);
        for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
            const char *v = "";
            for (int q = 0; q < t->nrow; q++) {
                char g2[64];
                group_of(t, q, g2, sizeof g2);
                if (strcmp(g2, g) == 0 &&
                    strcmp(get(t, q, cp), mxp_precision_name((mxp_precision)p)) == 0)
                    v = get(t, q, cv);
            }
            fprintf(f, " %s", numtxt(v));
        }
        fputc('\n', f);
    }
    return fclose(f) == 0;
}

/* Memory split per (workload, mode), first scenario of each workload. */
static bool write_memory(const csv_table *t, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    static const char *const parts[] = {"mem_params", "mem_grads", "mem_master",
                                        "mem_optimizer", "mem_activations"};
    fputs("cell params grads master optimizer activations\n", f);
    int cw = col(t, "workload"), cs = col(t, "scenario");
    for (int r = 0; r < t->nrow; r++) {
        bool first = true; /* first scenario of this workload? */
        for (int q = 0; q < r && first; q++)
            first = !(strcmp(get(t, q, cw), get(t, r, cw)) == 0 &&
                      strcmp(get(t, q, cs), get(t, r, cs)) != 0);
        if (!first) continue;
        fprintf(f, "\"%s %s\"", get(t, r, cw), get(t, r, col(t, "precision")));
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            const char *v = get(t, r, col(t, parts[k]));
            if (*v)
                fprintf(f, " %.6f", strtod(v, NULL) / (1024.0 * 1024.0));
            else
                fputs(" NaN", f);
        }
        fputc('\n', f);
    }
    return fclose(f) == 0;
}

/* steps.csv -> one data file per config: "mode forward backward safety
 * optimizer other". Returns the number of configs written (<= 3). */
static int write_steps(const char *dir, const char *out, char names[3][16]) {
    char p[PATH_N];
    snprintf(p, sizeof p, "%s/steps.csv", dir);
    csv_table *t = calloc(1, sizeof *t);
    if (!t) return 0;
    int n = 0;
    if (csv_read(p, t)) {
        int cc = col(t, "config"), cl = col(t, "label");
        static const char *const ph[] = {"ms_forward", "ms_backward", "ms_safety",
                                         "ms_optimizer", "ms_other"};
        for (int r = 0; r < t->nrow; r++) {
            const char *c = get(t, r, cc);
            int k = 0;
            while (k < n && strcmp(names[k], c) != 0) k++;
            if (k == n && n < 3 && *c) snprintf(names[n++], 16, "%s", c);
        }
        for (int k = 0; k < n; k++) {
            snprintf(p, sizeof p, "%s/steps_%s.tsv", out, names[k]);
            FILE *f = fopen(p, "w");
            if (!f) {
                n = k;
                break;
            }
            fputs("mode forward backward safety optimizer other\n", f);
            for (int r = 0; r < t->nrow; r++) {
                if (strcmp(get(t, r, cc), names[k]) != 0) continue;
                fprintf(f, "\"%s\"", get(t, r, cl));
                for (int j = 0; j < 5; j++) fprintf(f, " %s", numtxt(get(t, r, col(t, ph[j]))));
                fputc('\n', f);
            }
            fclose(f);
        }
    }
    csv_free(t);
    free(t);
    return n;
}

/* The degradation axis: 1.5 x the largest |degradation| of the modes that
 * compute in hardware formats when fp8 (emulated) would otherwise flatten
 * them (fp8 more than 4x larger); 0 = autoscale. */
static double degradation_clip(const csv_table *t) {
    int cd = col(t, "degradation"), cp = col(t, "precision");
    double hw = 0, fp8 = 0;
    for (int r = 0; r < t->nrow; r++) {
        const char *v = get(t, r, cd);
        if (!*v) continue;
        double d = fabs(strtod(v, NULL));
        if (strcmp(get(t, r, cp), "fp8") == 0) {
            if (d > fp8) fp8 = d;
        } else if (d > hw) {
            hw = d;
        }
    }
    return hw > 0 && fp8 > 4 * hw ? 1.5 * hw : 0.0;
}

static void gp_out(FILE *f, const char *out, const char *file) {
    char p[PATH_N];
    snprintf(p, sizeof p, "%s/%s", out, file);
    fputs("set output ", f);
    gp_quote(f, p);
    fputc('\n', f);
}

static void gp_data(FILE *f, const char *var, const char *out, const char *file) {
    char p[PATH_N];
    snprintf(p, sizeof p, "%s/%s", out, file);
    fprintf(f, "%s = ", var);
    gp_quote(f, p);
    fputc('\n', f);
}

static void write_script(FILE *f, const char *out, char steps[3][16], int nsteps,
                         double clip) {
    fputs("set terminal pngcairo size 1200,560 noenhanced font 'DejaVu Sans,10'\n"
          "set datafile missing 'NaN'\nset grid ytics lc rgb '#dddddd'\n"
          "set style data histograms\nset style histogram clustered gap 1\n"
          "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
          "set key outside right top\nset xtics rotate by -25 noenhanced\n", f);
    gp_data(f, "sp", out, "speedup.tsv");
    gp_data(f, "dg", out, "degradation.tsv");
    gp_data(f, "mem", out, "memory.tsv");
    gp_out(f, out, "speedup.png");
    fputs("set title 'Speedup vs fp32 (median wall time)'\nset ylabel 'x fp32'\n"
          "set yrange [0:*]\nset arrow 1 from graph 0, first 1 to graph 1, first 1 nohead "
          "dt 2 lc rgb '#444444'\n"
          "plot for [i=2:7] sp using i:xtic(1) title columnheader(i)\nunset arrow 1\n", f);
    gp_out(f, out, "degradation.png");
    fprintf(f, "set title 'Degradation vs fp32 (validation loss %%; classifier: accuracy "
               "points)%s'\nset ylabel 'worse ->'\n",
            clip > 0 ? ", axis clipped: fp8 (emulated) bars run off it, values in bench.csv" : "");
    if (clip > 0)
        fprintf(f, "set yrange [%.6g:%.6g]\n", -clip, clip);
    else
        fputs("set yrange [*:*]\n", f);
    fputs("plot for [i=2:7] dg using i:xtic(1) title columnheader(i)\n", f);
    gp_out(f, out, "memory.png");
    fputs("set title 'Memory by role (MB)'\nset ylabel 'MB'\nset yrange [0:*]\n"
          "set style histogram rowstacked\nset key invert\n"
          "plot for [i=2:6] mem using i:xtic(1) title columnheader(i)\nset key noinvert\n", f);
    if (nsteps > 0) {
        gp_out(f, out, "steps.png");
        fprintf(f, "set terminal pngcairo size %d,560 noenhanced font 'DejaVu Sans,10'\n",
                450 * nsteps + 200);
        fprintf(f, "set multiplot layout 1,%d title 'ms per training step by phase'\n", nsteps);
        for (int k = 0; k < nsteps; k++) {
            char file[64];
            snprintf(file, sizeof file, "steps_%s.tsv", steps[k]);
            gp_data(f, "st", out, file);
            fprintf(f, "set title '%s'\nset ylabel 'ms'\n%s\n"
                       "plot for [i=2:6] st using i:xtic(1) title columnheader(i)\n",
                    steps[k], k + 1 == nsteps ? "set key outside right top" : "unset key");
        }
        fputs("unset multiplot\n", f);
    }
    fputs("unset output\n", f);
}

/* gnuplot on script, its output into log; CLI_EXIT_FAIL with a message. */
static int run_gnuplot(const char *script, const char *log) {
    char why[PATH_N + 64];
    if (cli_run_gnuplot(script, log, why, sizeof why) == 0) return CLI_EXIT_OK;
    cli_error("%s", why);
    return CLI_EXIT_FAIL;
}

int bench_train_report(const char *dir, const char *out) {
    char p[PATH_N], q[PATH_N];
    csv_table *t = calloc(1, sizeof *t);
    if (!t) return CLI_EXIT_FAIL;
    snprintf(p, sizeof p, "%s/bench.csv", dir);
    if (!csv_read(p, t) || col(t, "precision") < 0 || col(t, "speedup") < 0) {
        cli_error("'%s' is not a `mixprec bench train` CSV (no precision/speedup columns)", p);
        csv_free(t);
        free(t);
        return CLI_EXIT_IO;
    }
    int e = cli_mkdirs(out);
    int rc = CLI_EXIT_OK;
    snprintf(p, sizeof p, "%s/speedup.tsv", out);
    snprintf(q, sizeof q, "%s/degradation.tsv", out);
    if (e != 0 || !write_matrix(t, "speedup", p) || !write_matrix(t, "degradation", q)) {
        cli_error("cannot write into '%s'", out);
        rc = CLI_EXIT_IO;
    }
    snprintf(p, sizeof p, "%s/memory.tsv", out);
    if (rc == CLI_EXIT_OK && !write_memory(t, p)) rc = CLI_EXIT_IO;
    double clip = degradation_clip(t);
    csv_free(t);
    free(t);
    if (rc != CLI_EXIT_OK) return rc;
    char steps[3][16];
    int ns = write_steps(dir, out, steps);
    snprintf(p, sizeof p, "%s/plots.gp", out);
    FILE *f = fopen(p, "w");
    if (!f) {
        cli_error("cannot write '%s': %s", p, strerror(errno));
        return CLI_EXIT_IO;
    }
    write_script(f, out, steps, ns, clip);
    if (fclose(f) != 0) return CLI_EXIT_IO;
    snprintf(q, sizeof q, "%s/gnuplot.log", out);
    rc = run_gnuplot(p, q);
    if (rc == CLI_EXIT_OK)
        printf("plots: %s/speedup.png, memory.png, degradation.png%s\n", out,
               ns > 0 ? ", steps.png" : "");
    return rc;
}
