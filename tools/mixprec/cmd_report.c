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
 * written) or the store cannot be read; 2 usage: no run store in RUN_DIR,
 * not a run store, unknown --run; 3 outputs could not be written.
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
#define MAX_VALS 4096
#define MSG_MAX 1024 /* a whole event message: report.md never cuts one */

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
    char kind[32], severity[16], message[MSG_MAX];
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
    FILE *vals;          /* validation losses (events of kind "validation") */
    int64_t n_vals, last_step;
    double val_min, val_max;
    double loss_min, loss_max, gn_min, gn_max, frac_max; /* plot ranges */
    int64_t over_first, over_last, n_over; /* overflow (skipped) steps */
    double scale_min, scale_max;
} report_state;

static void widen(double *lo, double *hi, double v) {
    if (!(v > 0) || !isfinite(v)) return;
    if (isnan(*lo) || v < *lo) *lo = v;
    if (isnan(*hi) || v > *hi) *hi = v;
}

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
    rs->last_step = r->step;
    widen(&rs->loss_min, &rs->loss_max, r->loss);
    widen(&rs->gn_min, &rs->gn_max, r->grad_norm);
    widen(&rs->scale_min, &rs->scale_max, r->scale);
    if (isfinite(r->zero_fraction) && r->zero_fraction > rs->frac_max)
        rs->frac_max = r->zero_fraction;
    if (isfinite(r->near_overflow_fraction) && r->near_overflow_fraction > rs->frac_max)
        rs->frac_max = r->near_overflow_fraction;
    if (r->overflow) {
        if (rs->n_over++ == 0) rs->over_first = r->step;
        rs->over_last = r->step;
    }
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
    char msg[MSG_MAX];
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
    const char *lp = e->detail ? strstr(e->detail, "\"loss\":") : NULL;
    if (strcmp(e->kind, "validation") == 0 && lp && rs->n_vals < MAX_VALS) {
        double v = strtod(lp + 7, NULL);
        /* step -1 events (the end of the run) sit at the last step */
        int64_t at = e->step >= 0 ? e->step : rs->last_step;
        if (isfinite(v) && v > 0) {
            fprintf(rs->vals, "%lld %.9g\n", (long long)at, v);
            widen(&rs->val_min, &rs->val_max, v);
            rs->n_vals++;
        }
    }
    bool mark = strcmp(e->kind, "fallback") == 0 || strcmp(e->kind, "precision_change") == 0 ||
                strcmp(e->kind, "rollback") == 0;
    /* one mark per kind and step (alerts of a rollback step repeat it) */
    for (int i = 0; mark && i < rs->n_marks; i++)
        if (rs->marks[i] == e->step && strcmp(rs->mark_kind[i], e->kind) == 0) mark = false;
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

/* Rollbacks (red, solid), fallbacks (orange, dashed) and operator switches
 * (blue, dotted) as vertical lines; labels of marks at the same step are
 * stacked so they never print over each other. */
static void gp_marks(FILE *f, const report_state *rs) {
    fputs("unset arrow\nunset label\n", f);
    for (int i = 0; i < rs->n_marks; i++) {
        const char *k = rs->mark_kind[i];
        const bool rb = strcmp(k, "rollback") == 0, fb = strcmp(k, "fallback") == 0;
        const char *col = rb ? "#d7263d" : fb ? "#e36209" : "#0969da";
        /* labels of marks within 2% of the run of each other stack */
        const int64_t near = rs->last_step / 50 > 0 ? rs->last_step / 50 : 1;
        int same = 0;
        for (int j = 0; j < i; j++) same += llabs(rs->marks[j] - rs->marks[i]) <= near;
        fprintf(f, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt %d lw 2 "
                   "lc rgb '%s' front\n", (long long)rs->marks[i], (long long)rs->marks[i],
                rb ? 1 : fb ? 2 : 3, col);
        fprintf(f, "set label '%s (step %lld)' at %lld, graph %.2f left offset 0.5,0 "
                   "tc rgb '%s' font ',10' front\n", k, (long long)rs->marks[i],
                (long long)rs->marks[i], 0.95 - 0.07 * same, col);
    }
}

/* Tick marks with numbers on a log-10 axis: 1-2-5 (or 1..9) per decade
 * when the data spans few decades, decades otherwise; gnuplot's own log
 * tics label decades only, and a loss between 0.3 and 0.9 got none. */
static void gp_log_tics(FILE *f, const char *axis, double lo, double hi) {
    if (!(lo > 0) || !(hi >= lo)) return;
    int a = (int)floor(log10(lo)), b = (int)ceil(log10(hi)), dec = b - a;
    static const double m9[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, m3[] = {1, 2, 5}, m1[] = {1};
    const double *m = dec <= 1 ? m9 : dec <= 3 ? m3 : m1;
    int nm = dec <= 1 ? 9 : dec <= 3 ? 3 : 1, every = dec <= 8 ? 1 : (dec + 7) / 8, n = 0;
    fprintf(f, "set %stics (", axis);
    for (int e = a; e <= b; e += every)
        for (int i = 0; i < nm; i++) {
            double v = m[i] * pow(10.0, e);
            if (v < lo / 1.2 || v > hi * 1.2) continue;
            fprintf(f, "%s'%.3g' %.9g", n++ ? ", " : "", v, v);
        }
    fputs(")\n", f);
}

static void write_script(FILE *f, const char *out, const report_state *rs, double clip_ms) {
    char p[PATH_LEN + 32];
    fputs("set terminal pngcairo size 1100,560 enhanced font 'DejaVu Sans,11'\n"
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
    double lo = rs->loss_min, hi = rs->loss_max;
    if (rs->n_vals) {
        lo = fmin(lo, rs->val_min);
        hi = fmax(hi, rs->val_max);
    }
    fputs("\nset title 'Training and validation loss'\nset logscale y 10\nset ylabel 'loss (log)'\n",
          f);
    gp_log_tics(f, "y", lo, hi);
    fputs("set autoscale yfix\nset offsets graph 0.01, graph 0.01, graph 0.05, graph 0.05\n"
          "plot data using 1:2 with lines lw 1.2 lc rgb '#1f6feb' title 'training loss'", f);
    if (rs->n_vals) {
        fputs(", \\\n     ", f);
        snprintf(p, sizeof p, "%s/validation.tsv", out);
        gp_quote(f, p);
        fputs(" using 1:2 with linespoints pt 7 ps 1.4 lw 2 lc rgb '#8250df' "
              "title 'validation loss'", f);
    }
    fputs("\nset ytics autofreq\n", f);
    /* loss scale */
    snprintf(p, sizeof p, "%s/loss_scale.png", out);
    fputs("set output ", f);
    gp_quote(f, p);
    /* the whole run, and below it the steps around the overflows when they
     * crowd into a small part of it (they were squeezed on the axis) */
    const int64_t span = rs->last_step > 0 ? rs->last_step : 1;
    const bool zoom = rs->n_over > 0 && (rs->over_last - rs->over_first) * 4 < span;
    /* the key goes under the plot: inside (top right, opaque) it hid the
     * last level, which a growing scale draws exactly there */
    fprintf(f, "\nset key below\nset multiplot layout %d,1\n", zoom ? 2 : 1);
    fprintf(f, "set title 'Loss scale and overflow (skipped) steps: %lld of %lld steps'\n"
               "set logscale y 2\nset ylabel 'loss scale (log2)'\nset format y '2^{%%L}'\n"
               "set autoscale yfix\nset offsets graph 0.02, graph 0.02, graph 0.1, graph 0.1\n",
            (long long)rs->n_over, (long long)rs->n_steps);
    const char *scale_plot =
        "plot data using 1:3 with steps lw 1.5 lc rgb '#8250df' title 'loss scale', \\\n"
        "     data using 1:($4 > 0 ? $3 : 1/0) with points pt 9 ps 1.4 lc rgb '#d7263d' "
        "title 'overflow (skipped step)'\n";
    fputs(scale_plot, f);
    if (zoom) {
        int64_t pad = (rs->over_last - rs->over_first) / 4 + 5;
        int64_t a = rs->over_first - pad > 0 ? rs->over_first - pad : 0;
        fprintf(f, "set title 'zoom: steps %lld-%lld'\nset xrange [%lld:%lld]\n",
                (long long)a, (long long)(rs->over_last + pad), (long long)a,
                (long long)(rs->over_last + pad));
        fputs(scale_plot, f);
        fputs("set autoscale x\nset autoscale xfixmin\nset autoscale xfixmax\n", f);
    }
    fputs("unset multiplot\nset format y '%g'\nset key inside top right opaque\n", f);
    /* gradient health */
    snprintf(p, sizeof p, "%s/grad_health.png", out);
    fputs("set output ", f);
    gp_quote(f, p);
    /* the right axis reaches at least 6%: above the zero_grad (5%) and
     * grad_near_overflow (1%) alert thresholds, so 7e-6 is a flat line,
     * not a full-height bar */
    const double fmax = rs->frac_max * 1.15 > 0.06 ? fmin(1.0, rs->frac_max * 1.15) : 0.06;
    fputs("\nset title 'Gradient health'\nset logscale y 10\nset ylabel 'global grad norm (log)'\n"
          "set autoscale yfix\nset offsets graph 0.01, graph 0.01, graph 0.05, graph 0.05\n", f);
    gp_log_tics(f, "y", rs->gn_min, rs->gn_max);
    fprintf(f, "set y2tics\nset y2range [0:%.6g]\nset y2label 'fraction of gradients'\n"
               "set format y2 '%%.3g'\n", fmax);
    fputs(""
          "plot data using 1:5 with lines lw 1 lc rgb '#1a7f37' title 'grad norm', \\\n"
          "     data using 1:6 axes x1y2 with lines lw 1 lc rgb '#bf8700' title 'zero fraction', "
          "\\\n     data using 1:7 axes x1y2 with lines lw 1 lc rgb '#cf222e' "
          "title 'near-overflow fraction'\n"
          "unset y2tics\nunset y2label\nset ytics autofreq\nset offsets 0, 0, 0, 0\n"
          "set autoscale y\n", f);
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
    if (rs->n_vals)
        fprintf(f, "| validation loss | %lld measurement%s, lowest %.6g |\n",
                (long long)rs->n_vals, rs->n_vals == 1 ? "" : "s", rs->val_min);
    fprintf(f, "| step time | median %.3g ms, p99 %.3g ms |\n", med, p99);
    fprintf(f, "| events | %lld |\n\n", (long long)sum->events);
    if (plots)
        fputs("## Loss\n\n![training and validation loss](loss.png)\n\n"
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
        /* a wrong input, not an output that could not be written */
        cli_error("'%s' holds no run store (%s: %s); accepted: a run directory written by "
                  "`mixprec train` (it keeps metrics.db unless obs.store.enabled=false), a "
                  "`mixprec bench train` directory, or --db FILE", dir, dbp, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    int e = cli_mkdirs(outp);
    if (e != 0) {
        cli_error("cannot create '%s': %s", outp, strerror(e));
        return CLI_EXIT_IO;
    }
    report_state *rs = mxp_calloc(1, sizeof *rs);
    if (!rs) return CLI_EXIT_FAIL;
    rs->last_loss = rs->min_loss = NAN;
    rs->loss_min = rs->loss_max = rs->gn_min = rs->gn_max = NAN;
    rs->val_min = rs->val_max = rs->scale_min = rs->scale_max = NAN;
    snprintf(p, sizeof p, "%s/validation.tsv", outp);
    rs->vals = fopen(p, "w");
    snprintf(p, sizeof p, "%s/steps.tsv", outp);
    rs->steps = fopen(p, "w");
    snprintf(p, sizeof p, "%s/events.tsv", outp);
    rs->events = fopen(p, "w");
    int rc = CLI_EXIT_OK;
    mxp_obs_run_summary sum;
    mxp_error err = {0};
    if (!rs->steps || !rs->events || !rs->vals) {
        cli_error("cannot write into '%s'", outp);
        rc = CLI_EXIT_IO;
    } else {
        fputs("# step loss scale overflow grad_norm zero_fraction near_overflow_fraction "
              "duration_ms epoch\n", rs->steps);
        fputs("# step\tkind\tseverity\tmessage\n", rs->events);
        if (mxp_obs_store_read(dbp, run, &sum, on_step, on_event, rs, &err) != MXP_OK) {
            cli_error("%s", err.msg);
            /* an unreadable store or an unknown --run: the input is wrong */
            rc = err.status == MXP_ERR_IO ? CLI_EXIT_FAIL : CLI_EXIT_USAGE;
        }
    }
    if (rs->steps && fclose(rs->steps) != 0 && rc == CLI_EXIT_OK) rc = CLI_EXIT_IO;
    if (rs->events && fclose(rs->events) != 0 && rc == CLI_EXIT_OK) rc = CLI_EXIT_IO;
    if (rs->vals && fclose(rs->vals) != 0 && rc == CLI_EXIT_OK) rc = CLI_EXIT_IO;
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
