/* tools/mixprec/cmd_report.c: `mixprec report RUN_DIR`.
 *
 * Reads one run of RUN_DIR/metrics.db (mxp_obs_store_read), writes its
 * steps and events as whitespace-separated data files, draws four PNG
 * plots with Debian's gnuplot (pngcairo terminal) -- loss (log), loss
 * scale (log2) with overflow (skipped) steps marked, gradient health
 * (norm, zero and near-overflow fractions), step time -- and a report.md
 * that summarises the run and links the plots. Output: RUN_DIR/report/
 * (or -o DIR). Precision switches, fallbacks and rollbacks from the event
 * table are drawn as dashed vertical lines.
 *
 * A directory written by `mixprec bench train` (it holds bench.csv) gets
 * that benchmark's plots instead (bench_train_plot.c).
 *
 * Exit codes: 0 ok; 1 gnuplot missing or failed (report.md is still
 * written); 2 usage; 3 the store cannot be read or outputs written.
 */
#include "bench_train.h"
#include "obs_glue.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PATH_LEN (2 * MXP_CONFIG_STR_MAX + 64)
#define MAX_MD_EVENTS 200
#define MAX_MARKS 40

static void help(FILE *f) {
    fputs("usage: mixprec report RUN_DIR [--run RUN_ID] [--db FILE] [-o OUT_DIR]\n"
          "\n"
          "Draw PNG plots of a run from its SQLite run store (RUN_DIR/metrics.db):\n"
          "loss.png, loss_scale.png (overflow steps marked), grad_health.png and\n"
          "step_time.png, plus report.md linking them, into OUT_DIR (default\n"
          "RUN_DIR/report). Needs gnuplot (Debian package gnuplot-nox).\n"
          "For a `mixprec bench train` directory (it holds bench.csv): speedup.png,\n"
          "memory.png, degradation.png and steps.png into OUT_DIR (default DIR/report).\n"
          "\n"
          "  --run RUN_ID  which run of the store (default: the latest started)\n"
          "  --db FILE     the store (default: RUN_DIR/metrics.db)\n"
          "  -o OUT_DIR    output directory\n",
          f);
}

typedef struct md_event {
    int64_t step;
    double t;
    char kind[32], severity[16], message[160];
} md_event;

typedef struct report_state {
    FILE *steps, *events;
    double *dur_ms, *dur_step; /* finite step times, in step order */
    size_t n_dur, cap_dur;
    bool oom;
    int64_t n_steps;
    double last_loss, min_loss;
    char last_precision[16];
    md_event ev[MAX_MD_EVENTS];
    int n_ev;
    int64_t ev_total;
    int64_t marks[MAX_MARKS];
    char mark_kind[MAX_MARKS][24];
    int n_marks;
} report_state;

static void put_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, " %.9g", v);
    else
        fputs(" NaN", f);
}

static void on_step(void *user, const mxp_obs_step_row *r) {
    report_state *rs = user;
    fprintf(rs->steps, "%lld", (long long)r->step);
    put_num(rs->steps, r->loss);
    put_num(rs->steps, r->scale);
    fprintf(rs->steps, " %d", r->overflow ? 1 : 0);
    put_num(rs->steps, r->grad_norm);
    put_num(rs->steps, r->zero_fraction);
    put_num(rs->steps, r->near_overflow_fraction);
    put_num(rs->steps, r->duration_s * 1e3);
    fprintf(rs->steps, " %lld\n", (long long)r->epoch);
    rs->n_steps++;
    if (isfinite(r->loss)) {
        rs->last_loss = r->loss;
        if (isnan(rs->min_loss) || r->loss < rs->min_loss) rs->min_loss = r->loss;
    }
    snprintf(rs->last_precision, sizeof rs->last_precision, "%s", mxp_precision_name(r->precision));
    if (isfinite(r->duration_s) && !rs->oom) {
        if (rs->n_dur == rs->cap_dur) {
            size_t cap = rs->cap_dur ? rs->cap_dur * 2 : 4096;
            double *p = mxp_calloc(cap, sizeof *p), *q = mxp_calloc(cap, sizeof *q);
            if (!p || !q) {
                mxp_free(p);
                mxp_free(q);
                rs->oom = true;
                return;
            }
            if (rs->n_dur) {
                memcpy(p, rs->dur_ms, rs->n_dur * sizeof *p);
                memcpy(q, rs->dur_step, rs->n_dur * sizeof *q);
            }
            mxp_free(rs->dur_ms);
            mxp_free(rs->dur_step);
            rs->dur_ms = p;
            rs->dur_step = q;
            rs->cap_dur = cap;
        }
        rs->dur_step[rs->n_dur] = (double)r->step;
        rs->dur_ms[rs->n_dur++] = r->duration_s * 1e3;
    }
}

static void copy_clean(char *dst, size_t n, const char *src) {
    size_t j = 0;
    for (size_t i = 0; src[i] && j + 1 < n; i++) {
        char c = src[i];
        dst[j++] = (c == '|' || c == '\n' || c == '\r' || c == '\t' || c == '\'') ? ' ' : c;
    }
    dst[j] = '\0';
}

static void on_event(void *user, const mxp_obs_event_row *e) {
    report_state *rs = user;
    char msg[160];
    copy_clean(msg, sizeof msg, e->message);
    fprintf(rs->events, "%lld\t%s\t%s\t%s\n", (long long)e->step, e->kind, e->severity, msg);
    rs->ev_total++;
    if (rs->n_ev < MAX_MD_EVENTS) {
        md_event *m = &rs->ev[rs->n_ev++];
        m->step = e->step;
        m->t = e->timestamp;
        copy_clean(m->kind, sizeof m->kind, e->kind);
        copy_clean(m->severity, sizeof m->severity, e->severity);
        snprintf(m->message, sizeof m->message, "%s", msg);
    }
    bool mark = strcmp(e->kind, "fallback") == 0 || strcmp(e->kind, "precision_change") == 0 ||
                strcmp(e->kind, "rollback") == 0;
    if (mark && rs->n_marks < MAX_MARKS) {
        rs->marks[rs->n_marks] = e->step;
        copy_clean(rs->mark_kind[rs->n_marks], sizeof rs->mark_kind[0], e->kind);
        rs->n_marks++;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Step-time trend: the median of each of ~200 consecutive blocks of steps
 * (robust to the outliers a mean or a spline would chase). */
static bool write_trend(const char *path, const report_state *rs) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    size_t n = rs->n_dur, b = n / 200 > 0 ? n / 200 : 1;
    double *tmp = mxp_calloc(b, sizeof *tmp);
    if (!tmp) {
        fclose(f);
        return false;
    }
    fputs("# step median_ms\n", f);
    for (size_t i = 0; i + b <= n; i += b) {
        memcpy(tmp, rs->dur_ms + i, b * sizeof *tmp);
        qsort(tmp, b, sizeof *tmp, cmp_double);
        fprintf(f, "%.9g %.9g\n", rs->dur_step[i + b / 2], tmp[b / 2]);
    }
    mxp_free(tmp);
    return fclose(f) == 0;
}

static double quantile(const double *sorted, size_t n, double q) {
    if (n == 0) return NAN;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* A path inside single quotes for gnuplot ('' is a quote). */
static void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static void gp_marks(FILE *f, const report_state *rs) {
    fputs("unset arrow\nunset label\n", f);
    for (int i = 0; i < rs->n_marks; i++) {
        fprintf(f, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 2 lw 1.5 "
                   "lc rgb '#e36209'\n", (long long)rs->marks[i], (long long)rs->marks[i]);
        fprintf(f, "set label '%s' at %lld, graph 0.97 right rotate by 90 offset -0.4,0 "
                   "tc rgb '#e36209' font ',9'\n", rs->mark_kind[i], (long long)rs->marks[i]);
    }
}

static void write_script(FILE *f, const char *out, const report_state *rs, double clip_ms) {
    char p[PATH_LEN + 32];
    fputs("set terminal pngcairo size 1100,520 enhanced font 'DejaVu Sans,11'\n"
          "set datafile missing 'NaN'\nset grid lc rgb '#dddddd'\nset key top right opaque\n"
          "set xlabel 'step'\nset autoscale xfixmin\nset autoscale xfixmax\n", f);
    fputs("data = ", f);
    snprintf(p, sizeof p, "%s/steps.tsv", out);
    gp_quote(f, p);
    fputc('\n', f);
    /* loss */
    snprintf(p, sizeof p, "%s/loss.png", out);
    fputs("set output ", f);
    gp_quote(f, p);
    fputc('\n', f);
    gp_marks(f, rs);
    fputs("\nset title 'Training loss'\nset logscale y 10\nset ylabel 'loss (log)'\n"
          "set format y '%.0e'\n"
          "plot data using 1:2 with lines lw 1.2 lc rgb '#1f6feb' title 'training loss'\n", f);
    /* loss scale */
    snprintf(p, sizeof p, "%s/loss_scale.png", out);
    fputs("set output ", f);
    gp_quote(f, p);
    fputs("\nset title 'Loss scale and overflow (skipped) steps'\nset logscale y 2\n"
          "set ylabel 'loss scale (log2)'\nset format y '2^{%L}'\n"
          "plot data using 1:3 with steps lw 1.5 lc rgb '#8250df' title 'loss scale', \\\n"
          "     data using 1:($4 > 0 ? $3 : 1/0) with points pt 9 ps 1.2 lc rgb '#d7263d' "
          "title 'overflow (skipped step)'\n", f);
    /* gradient health */
    snprintf(p, sizeof p, "%s/grad_health.png", out);
    fputs("set output ", f);
    gp_quote(f, p);
    fputs("\nset title 'Gradient health'\nset logscale y 10\nset ylabel 'global grad norm (log)'\n"
          "set format y '%.0e'\nset y2tics\nset y2range [0:*]\nset y2label 'fraction'\n"
          "set format y2 '%.2g'\n"
          "plot data using 1:5 with lines lw 1 lc rgb '#1a7f37' title 'grad norm', \\\n"
          "     data using 1:6 axes x1y2 with lines lw 1 lc rgb '#bf8700' title 'zero fraction', "
          "\\\n     data using 1:7 axes x1y2 with lines lw 1 lc rgb '#cf222e' "
          "title 'near-overflow fraction'\n"
          "unset y2tics\nunset y2label\n", f);
    /* step time */
    snprintf(p, sizeof p, "%s/step_time.png", out);
    fputs("set output ", f);
    gp_quote(f, p);
    fputs("\nunset arrow\nunset label\nunset logscale y\nset format y '%g'\n", f);
    fprintf(f, "set title 'Step time%s'\nset ylabel 'ms'\nset yrange [0:%.6g]\n",
            isfinite(clip_ms) ? " (axis clipped at 1.5 x p99)" : "",
            isfinite(clip_ms) && clip_ms > 0 ? clip_ms : 1.0);
    fputs("plot data using 1:8 with points pt 7 ps 0.35 lc rgb '#0969da' title 'step time', \\\n"
          "     ", f);
    snprintf(p, sizeof p, "%s/trend.tsv", out);
    gp_quote(f, p);
    fputs(" using 1:2 with lines lw 2 lc rgb '#24292f' title 'median of each 0.5% of steps'\n"
          "unset output\n", f);
}

static void utc_text(double t, char *buf, size_t n) {
    if (!isfinite(t) || t <= 0) {
        snprintf(buf, n, "-");
        return;
    }
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

static void write_md(FILE *f, const mxp_obs_run_summary *sum, const report_state *rs,
                     double med, double p99, bool plots) {
    fprintf(f, "# mixprec run report\n\n| | |\n|---|---|\n");
    fprintf(f, "| run | `%s` |\n| state | %s |\n", sum->run_id, sum->state);
    fprintf(f, "| precision | %s (at the end: %s) |\n", sum->precision,
            rs->last_precision[0] ? rs->last_precision : sum->precision);
    fprintf(f, "| started / ended (UTC) | %s / %s |\n", sum->started_at,
            sum->ended_at[0] ? sum->ended_at : "-");
    fprintf(f, "| steps | %lld (skipped on overflow: %lld, %.2f%%) |\n", (long long)sum->steps,
            (long long)sum->overflow_steps,
            sum->steps ? 100.0 * (double)sum->overflow_steps / (double)sum->steps : 0.0);
    fprintf(f, "| final / lowest training loss | %.6g / %.6g |\n", rs->last_loss, rs->min_loss);
    fprintf(f, "| step time | median %.3g ms, p99 %.3g ms |\n", med, p99);
    fprintf(f, "| events | %lld |\n\n", (long long)sum->events);
    if (plots)
        fputs("## Loss\n\n![training loss](loss.png)\n\n"
              "## Loss scale and overflow events\n\n![loss scale](loss_scale.png)\n\n"
              "## Gradient health\n\n![gradient health](grad_health.png)\n\n"
              "## Step time\n\n![step time](step_time.png)\n\n", f);
    else
        fputs("Plots were not drawn (gnuplot missing or failed); the data is in steps.tsv.\n\n",
              f);
    fputs("## Events\n\n| step | time (UTC) | kind | severity | message |\n|---|---|---|---|---|\n",
          f);
    for (int i = 0; i < rs->n_ev; i++) {
        char t[32];
        utc_text(rs->ev[i].t, t, sizeof t);
        fprintf(f, "| %lld | %s | %s | %s | %s |\n", (long long)rs->ev[i].step, t, rs->ev[i].kind,
                rs->ev[i].severity, rs->ev[i].message);
    }
    if (rs->ev_total > rs->n_ev)
        fprintf(f, "\n(%lld more events in events.tsv)\n", (long long)(rs->ev_total - rs->n_ev));
}

int cmd_report(int argc, char **argv) {
    const char *dir = NULL, *run = NULL, *db = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--run") == 0 && i + 1 < argc) {
            run = argv[++i];
        } else if (strcmp(argv[i], "--db") == 0 && i + 1 < argc) {
            db = argv[++i];
        } else if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--out") == 0) && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] != '-' && !dir) {
            dir = argv[i];
        } else {
            cli_error("unexpected argument '%s'; accepted: RUN_DIR, --run ID, --db FILE, -o DIR",
                      argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    if (!dir) {
        help(stderr);
        return CLI_EXIT_USAGE;
    }
    char dbp[PATH_LEN], outp[PATH_LEN], p[PATH_LEN + 32];
    struct stat sb;
    snprintf(p, sizeof p, "%s/bench.csv", dir);
    if (!db && !run && stat(p, &sb) == 0) { /* a `mixprec bench train` directory */
        if (out)
            snprintf(outp, sizeof outp, "%s", out);
        else
            snprintf(outp, sizeof outp, "%s/report", dir);
        return bench_train_report(dir, outp);
    }
    snprintf(dbp, sizeof dbp, "%s", db ? db : "");
    if (!db) snprintf(dbp, sizeof dbp, "%s/metrics.db", dir);
    if (out)
        snprintf(outp, sizeof outp, "%s", out);
    else
        snprintf(outp, sizeof outp, "%s/report", dir);
    if (stat(dbp, &sb) != 0) {
        cli_error("no run store at '%s': %s (runs write it unless obs.store.enabled=false)", dbp,
                  strerror(errno));
        return CLI_EXIT_IO;
    }
    int e = cli_mkdirs(outp);
    if (e != 0) {
        cli_error("cannot create '%s': %s", outp, strerror(e));
        return CLI_EXIT_IO;
    }
    report_state *rs = mxp_calloc(1, sizeof *rs);
    if (!rs) return CLI_EXIT_FAIL;
    rs->last_loss = rs->min_loss = NAN;
    snprintf(p, sizeof p, "%s/steps.tsv", outp);
    rs->steps = fopen(p, "w");
    snprintf(p, sizeof p, "%s/events.tsv", outp);
    rs->events = fopen(p, "w");
    int rc = CLI_EXIT_OK;
    mxp_obs_run_summary sum;
    mxp_error err = {0};
    if (!rs->steps || !rs->events) {
        cli_error("cannot write into '%s'", outp);
        rc = CLI_EXIT_IO;
    } else {
        fputs("# step loss scale overflow grad_norm zero_fraction near_overflow_fraction "
              "duration_ms epoch\n", rs->steps);
        fputs("# step\tkind\tseverity\tmessage\n", rs->events);
        if (mxp_obs_store_read(dbp, run, &sum, on_step, on_event, rs, &err) != MXP_OK) {
            cli_error("%s", err.msg);
            rc = CLI_EXIT_IO;
        }
    }
    if (rs->steps && fclose(rs->steps) != 0 && rc == CLI_EXIT_OK) rc = CLI_EXIT_IO;
    if (rs->events && fclose(rs->events) != 0 && rc == CLI_EXIT_OK) rc = CLI_EXIT_IO;
    snprintf(p, sizeof p, "%s/trend.tsv", outp);
    if (rc == CLI_EXIT_OK && !write_trend(p, rs)) {
        cli_error("cannot write '%s'", p);
        rc = CLI_EXIT_IO;
    }
    if (rc != CLI_EXIT_OK) {
        mxp_free(rs->dur_ms);
        mxp_free(rs->dur_step);
        mxp_free(rs);
        return rc;
    }
    qsort(rs->dur_ms, rs->n_dur, sizeof *rs->dur_ms, cmp_double);
    double med = quantile(rs->dur_ms, rs->n_dur, 0.5), p99 = quantile(rs->dur_ms, rs->n_dur, 0.99);
    bool plots = false;
    char why[PATH_LEN + 64] = "";
    if (rs->n_steps == 0) {
        snprintf(why, sizeof why, "run %s has no steps to plot", sum.run_id);
    } else {
        snprintf(p, sizeof p, "%s/plots.gp", outp);
        FILE *f = fopen(p, "w");
        if (f) {
            write_script(f, outp, rs, 1.5 * p99);
            if (fclose(f) == 0) {
                char log[PATH_LEN + 32];
                snprintf(log, sizeof log, "%s/gnuplot.log", outp);
                plots = cli_run_gnuplot(p, log, why, sizeof why) == 0;
            }
        } else {
            snprintf(why, sizeof why, "cannot write %s", p);
        }
    }
    snprintf(p, sizeof p, "%s/report.md", outp);
    FILE *md = fopen(p, "w");
    if (!md) {
        cli_error("cannot write '%s': %s", p, strerror(errno));
        rc = CLI_EXIT_IO;
    } else {
        write_md(md, &sum, rs, med, p99, plots);
        if (fclose(md) != 0) rc = CLI_EXIT_IO;
    }
    mxp_free(rs->dur_ms);
    mxp_free(rs->dur_step);
    mxp_free(rs);
    if (rc != CLI_EXIT_OK) return rc;
    if (!plots) {
        cli_error("%s", why);
        return CLI_EXIT_FAIL;
    }
    printf("%s\n", p);
    return CLI_EXIT_OK;
}
