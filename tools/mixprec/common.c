/* tools/mixprec/common.c: logging sink, error printing and config
 * resolution shared by the verbs. */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The bar now on the terminal (NULL: none): a log line clears it, prints,
 * and redraws it, so no message lands in the middle of a bar. */
static char g_bar[512];
static bool g_bar_shown;
static bool g_status_shown;

static void bar_clear(void) {
    if (g_bar_shown || g_status_shown) {
        fputs("\r\033[K", g_bar_shown ? stdout : stderr);
        fflush(g_bar_shown ? stdout : stderr);
    }
}

static void log_to_stderr(void *user, mxp_log_level level, const char *msg) {
    (void)user;
    bar_clear();
    g_status_shown = false;
    fprintf(stderr, "[mixprec %s] %s\n", mxp_log_level_name(level), msg);
    if (g_bar_shown) {
        fputs(g_bar, stdout);
        fflush(stdout);
    }
}

void cli_status(const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r\033[K%s", line);
        g_status_shown = true;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

void cli_status_done(void) {
    if (!g_status_shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    g_status_shown = false;
}

void cli_install_logger(void) { mxp_log_set_callback(log_to_stderr, NULL); }

static bool g_errors_to_log, g_json_errors, g_json_error_done;
static char g_last_error[1024];

void cli_errors_to_log(bool on) { g_errors_to_log = on; }
void cli_json_errors(bool on) { g_json_errors = on; }

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    if (g_errors_to_log) {
        mxp_log(MXP_LOG_ERROR, "%s", g_last_error);
        return;
    }
    bar_clear();
    g_status_shown = false;
    fprintf(stderr, "mixprec: error: %s\n", g_last_error);
    if (g_bar_shown) {
        fputs(g_bar, stdout);
        fflush(stdout);
    }
}

void cli_json_print(const void *json) {
    char *t = json_dumps((const json_t *)json, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (t) {
        fputs(t, stdout);
        fputc('\n', stdout);
        free(t);
    }
}

void *cli_json_typed(const char *text) {
    if (!text) return json_null();
    if (!strcmp(text, "true") || !strcmp(text, "false")) return json_boolean(text[0] == 't');
    char *end = NULL;
    errno = 0;
    long long iv = strtoll(text, &end, 10);
    if (*text && *end == '\0' && errno == 0) return json_integer(iv);
    double dv = strtod(text, &end);
    if (*text && *end == '\0' && isfinite(dv)) return json_real(dv);
    if (text[0] == '{' || text[0] == '[') {
        json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
        if (j) return j;
    }
    return json_string(text);
}

const char *cli_exit_name(int rc) {
    switch (rc) {
    case CLI_EXIT_OK: return "ok";
    case CLI_EXIT_FAIL: return "failed";
    case CLI_EXIT_USAGE: return "usage";
    case CLI_EXIT_IO: return "io";
    case 4: return "stopped"; /* CLI_EXIT_GUARD_STOP (doctor.h) */
    default: return "unknown";
    }
}

static void json_escaped(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void cli_json_error_exit(int rc) {
    if (!g_json_errors || rc == CLI_EXIT_OK || g_json_error_done) return;
    g_json_error_done = true;
    fputs("{\"schema\":\"mixprec.error/1\",\"error\":{\"message\":", stdout);
    json_escaped(stdout, g_last_error[0] ? g_last_error : cli_exit_name(rc));
    fprintf(stdout, ",\"exit_code\":%d,\"exit_name\":\"%s\"}}\n", rc, cli_exit_name(rc));
    fflush(stdout);
}

/* Levenshtein distance of a and b, both shorter than 32 bytes (else 99). */
static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n >= 32 || m >= 32) return 99;
    int d[32][32];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[n][m];
}

const char *cli_did_you_mean(const char *word, const char *const *choices, int n) {
    const char *best = NULL;
    int bd = 3;
    for (int i = 0; i < n; i++) {
        int dd = edit_distance(word, choices[i]);
        if (strlen(word) >= 3 && strncmp(choices[i], word, strlen(word)) == 0) dd = 1;
        if (dd < bd) {
            bd = dd;
            best = choices[i];
        }
    }
    return best;
}

int cli_take_config_arg(int argc, char **argv, int *i, cli_config_args *a) {
    const char *arg = argv[*i];
    if (strcmp(arg, "--config") == 0) {
        if (*i + 1 >= argc) {
            cli_error("--config needs a FILE argument");
            return -1;
        }
        a->config_path = argv[++*i];
        return 1;
    }
    if (arg[0] == '-' || !strchr(arg, '=')) return 0;
    if (a->n_overrides == CLI_MAX_OVERRIDES) {
        cli_error("more than %d key=value overrides", CLI_MAX_OVERRIDES);
        return -1;
    }
    a->overrides[a->n_overrides++] = arg;
    return 1;
}

int cli_parse_args(int argc, char **argv, int first, const cli_flag *flags, int n_flags,
                   cli_config_args *a, void (*help)(FILE *), const char *accepted) {
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        }
        int k = 0;
        while (k < n_flags && strcmp(argv[i], flags[k].name) != 0) k++;
        if (k < n_flags) {
            *flags[k].set = true;
            continue;
        }
        int took = cli_take_config_arg(argc, argv, &i, a);
        if (took < 0) return CLI_EXIT_USAGE;
        if (took > 0) continue;
        cli_error("unexpected argument '%s'; accepted: %s", argv[i], accepted);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

int cli_resolve_config(const cli_config_args *a, mxp_config *cfg, mxp_config_builder **keep) {
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, &err);
    if (s == MXP_OK && a->config_path) s = mxp_config_apply_file(b, a->config_path, &err);
    if (s == MXP_OK) s = mxp_config_apply_env(b, NULL, &err);
    for (int i = 0; s == MXP_OK && i < a->n_overrides; i++)
        s = mxp_config_apply_override(b, a->overrides[i], &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, &err);
    if (s != MXP_OK) {
        cli_error("%s", err.msg);
        mxp_config_builder_destroy(b);
        return CLI_EXIT_USAGE;
    }
    if (keep)
        *keep = b;
    else
        mxp_config_builder_destroy(b);
    return CLI_EXIT_OK;
}

int cli_mkdirs(const char *path) {
    if (strlen(path) >= MXP_CONFIG_STR_MAX + 1) return ENAMETOOLONG; /* a config string */
    return mxp_mkdirs(path);
}

void cli_json_number(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, "\"%s\":%.9g,", key, v);
    else
        fprintf(f, "\"%s\":null,", key);
}

int cli_write_run_outputs(const mxp_config *cfg, const mxp_trainer *tr,
                          const mxp_run_val_row *val, size_t nval,
                          cli_summary_writer write_summary, const void *summary) {
    int e = cli_mkdirs(cfg->output_dir);
    if (e != 0) {
        cli_error("cannot create output.dir '%s': %s", cfg->output_dir, strerror(e));
        return CLI_EXIT_IO;
    }
    char path[MXP_CONFIG_STR_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", cfg->output_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_error("cannot write '%s': %s", path, strerror(errno));
        return CLI_EXIT_IO;
    }
    write_summary(f, cfg, summary);
    int bad = fclose(f) != 0;
    snprintf(path, sizeof path, "%s/history.csv", cfg->output_dir);
    f = fopen(path, "w");
    if (!f) {
        cli_error("cannot write '%s': %s", path, strerror(errno));
        return CLI_EXIT_IO;
    }
    size_t n;
    const mxp_history_row *h = mxp_trainer_history(tr, &n);
    /* epochs 1-based, as every log line, the bar and resume name them */
    const bool with_val = cfg->eval_every > 0 || cfg->eval_every_steps > 0;
    bool with_ol = false; /* world models: the open-loop errors beside val_loss */
    for (size_t i = 0; i < nval; i++) with_ol |= !isnan(val[i].open_loop[0]);
    fputs(with_val ? "step,epoch,loss,scale,grad_norm,skipped,precision,val_loss"
                   : "step,epoch,loss,scale,grad_norm,skipped,precision", f);
    for (int k = 0; with_ol && k < MXP_OPEN_LOOP_N; k++)
        fprintf(f, ",val_open_loop_k%d", mxp_open_loop_horizon(k));
    /* ensembles: each member's validation loss and the elites named after it */
    const int E = with_val && cfg->ensemble > 1 ? (int)cfg->ensemble : 0;
    for (int m = 0; m < E; m++) fprintf(f, ",val_loss_member%d", m);
    if (E) fputs(",val_elites", f);
    fputc('\n', f);
    size_t v = 0; /* val rows are in step order, as the history */
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%lld,%lld,%.9g,%.9g,%.9g,%d,%s", (long long)h[i].step,
                (long long)h[i].epoch + 1, h[i].loss, (double)h[i].scale, h[i].grad_norm,
                h[i].skipped ? 1 : 0, mxp_precision_name(h[i].precision));
        while (v < nval && val[v].step < h[i].step) v++;
        if (with_val && v < nval && val[v].step == h[i].step) {
            fprintf(f, ",%.9g", val[v].loss);
            for (int k = 0; with_ol && k < MXP_OPEN_LOOP_N; k++)
                fprintf(f, ",%.9g", val[v].open_loop[k]);
            for (int m = 0; m < E; m++) fprintf(f, ",%.9g", val[v].member_loss[m]);
            if (E) fputc(',', f); /* the elites' indices, space-separated */
            for (int m = 0, first = 1; m < E; m++)
                if (val[v].elites >> m & 1u) {
                    fprintf(f, first ? "%d" : " %d", m);
                    first = 0;
                }
        } else if (with_val) { /* empty val cells */
            for (int k = 0; k <= (with_ol ? MXP_OPEN_LOOP_N : 0) + (E ? E + 1 : 0); k++)
                fputc(',', f);
        }
        fputc('\n', f);
    }
    bad |= fclose(f) != 0;
    if (bad) {
        cli_error("writing outputs into '%s' failed", cfg->output_dir);
        return CLI_EXIT_IO;
    }
    return CLI_EXIT_OK;
}

/* "1:02:03", "02:03" */
static void fmt_hms(char *out, size_t n, double s) {
    if (!(s >= 0) || s > 359999) {
        snprintf(out, n, "--:--");
        return;
    }
    const int t = (int)(s + 0.5); /* < 100 h */
    if (t >= 3600)
        snprintf(out, n, "%d:%02d:%02d", t / 3600 % 100, t / 60 % 60, t % 60);
    else
        snprintf(out, n, "%02d:%02d", t / 60 % 60, t % 60);
}

/* A rate in at most 4 significant characters and never in e-notation:
 * 0.52, 9.87, 98.7, 987, 1.3k, 38.5k, 385k, 1.2M. */
static void fmt_rate(char *out, size_t n, double r) {
    static const char *const unit[] = {"", "k", "M", "G"};
    if (!(r >= 0) || r > 9.99e11) {
        snprintf(out, n, "-");
        return;
    }
    int u = 0;
    while (u < 3 && r >= 999.5) {
        r /= 1e3;
        u++;
    }
    snprintf(out, n, r >= 99.95 ? "%.0f%s" : r >= 9.995 ? "%.1f%s" : "%.2f%s", r, unit[u]);
}

/* Columns of the terminal on stdout (80 when it cannot say). */
static int term_width(void) {
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

/* The fields after the bar/step counter: timing, rates, lr, val, precision. */
static void progress_fields(const cli_progress *ps, const mxp_progress *p, double now,
                            char *out, size_t n) {
    const double el = now - ps->t_start;
    const int64_t done = p->step - ps->step0;
    const double sps = el > 0 && done > 0 ? (double)done / el : NAN;
    const double eta = sps > 0 ? (double)(p->total_steps - p->step) / sps : NAN;
    char e1[64], e2[64], r1[32], r2[32];
    fmt_hms(e1, sizeof e1, el);
    fmt_hms(e2, sizeof e2, p->step >= p->total_steps ? 0.0 : eta);
    fmt_rate(r1, sizeof r1, sps);
    size_t pos = 0;
    int w = snprintf(out, n, "elapsed %s ETA %s  %s steps/s", e1, e2, r1);
    pos = w > 0 ? (size_t)w : 0;
    if (ps->samples_per_step > 0 && pos < n) {
        fmt_rate(r2, sizeof r2, sps * (double)ps->samples_per_step);
        w = snprintf(out + pos, n - pos, " %s samples/s", r2);
        pos += w > 0 ? (size_t)w : 0;
    }
    if (pos < n)
        pos += (size_t)snprintf(out + pos, n - pos, "  loss %.4g", p->result->loss);
    if (ps->tr && pos < n) {
        mxp_trainer_state st;
        mxp_trainer_get_state(ps->tr, &st);
        mxp_train_stats ts;
        mxp_trainer_stats(ps->tr, &ts);
        pos += (size_t)snprintf(out + pos, n - pos, " lr %.3g", (double)st.lr);
        if (pos < n && ps->val_loss > 0)
            pos += (size_t)snprintf(out + pos, n - pos, " val %.4g", ps->val_loss);
        if (pos < n)
            pos += (size_t)snprintf(out + pos, n - pos, "  %s", mxp_precision_name(ts.precision));
    } else if (pos < n && ps->val_loss > 0) {
        pos += (size_t)snprintf(out + pos, n - pos, " val %.4g", ps->val_loss);
    }
    if (pos < n && p->result->scale != 1.0f)
        snprintf(out + pos, n - pos, " scale %g", (double)p->result->scale);
}

typedef struct bar_field {
    char s[64];
    int prio; /* dropped lowest first; 0: not shown */
} bar_field;

static void bar_put(bar_field *f, int prio, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->s, sizeof f->s, fmt, ap);
    va_end(ap);
    f->prio = prio;
}

/* The terminal's bar line: whole fields, in display order, as many as fit
 * in cols - 1 columns (a line as wide as the terminal wraps on some, and a
 * wrapped bar cannot be redrawn); the least useful are dropped first, never
 * a field cut in the middle of a number. Kept longest: the step counter,
 * the bar and percent, the loss, the precision, the ETA. */
static void progress_bar_line(const cli_progress *ps, const mxp_progress *p, double now,
                              double pct, int cols, char *out, size_t n) {
    enum { NF = 12 };
    bar_field f[NF];
    memset(f, 0, sizeof f);
    const double el = now - ps->t_start;
    const int64_t done = p->step - ps->step0;
    const double sps = el > 0 && done > 0 ? (double)done / el : NAN;
    const double eta = sps > 0 ? (double)(p->total_steps - p->step) / sps : NAN;
    const int bw = cols >= 100 ? 20 : 10;
    char bar[24], t[32];
    int filled = (int)((double)bw * pct / 100.0);
    for (int i = 0; i < bw; i++) bar[i] = i < filled ? '#' : '.';
    bar[bw] = '\0';
    bar_put(&f[0], 9, "[%s] %3.0f%%", bar, pct);
    bar_put(&f[1], 10, "step %lld/%lld", (long long)p->step, (long long)p->total_steps);
    bar_put(&f[2], 4, "epoch %lld/%lld", (long long)p->epoch + 1, (long long)p->total_epochs);
    bar_put(&f[3], 8, "loss %.4g", p->result->loss);
    if (ps->val_loss > 0) bar_put(&f[4], 5, "val %.4g", ps->val_loss);
    if (ps->tr) {
        mxp_trainer_state st;
        mxp_trainer_get_state(ps->tr, &st);
        mxp_train_stats ts;
        mxp_trainer_stats(ps->tr, &ts);
        bar_put(&f[5], 3, "lr %.3g", (double)st.lr);
        bar_put(&f[6], 7, "%s", mxp_precision_name(ts.precision));
    }
    if (p->result->scale != 1.0f) bar_put(&f[7], 4, "scale %g", (double)p->result->scale);
    fmt_hms(t, sizeof t, p->step >= p->total_steps ? 0.0 : eta);
    bar_put(&f[8], 6, "ETA %s", t);
    fmt_rate(t, sizeof t, sps);
    bar_put(&f[9], 5, "%s steps/s", t);
    if (ps->samples_per_step > 0) {
        fmt_rate(t, sizeof t, sps * (double)ps->samples_per_step);
        bar_put(&f[10], 2, "%s samples/s", t);
    }
    fmt_hms(t, sizeof t, el);
    bar_put(&f[11], 1, "elapsed %s", t);
    /* separators: one space inside "[bar] pct% step a/b epoch e/E", two after */
    for (;;) {
        int width = 0, shown = 0, low = -1;
        for (int i = 0; i < NF; i++) {
            if (!f[i].prio) continue;
            width += (shown++ ? (i <= 2 ? 1 : 2) : 0) + (int)strlen(f[i].s);
            if (low < 0 || f[i].prio < f[low].prio) low = i;
        }
        if (width <= cols - 1 || shown <= 1) break;
        f[low].prio = 0;
    }
    size_t pos = 0;
    int shown = 0;
    for (int i = 0; i < NF && pos < n; i++) {
        if (!f[i].prio) continue;
        int w = snprintf(out + pos, n - pos, "%s%s", shown++ ? (i <= 2 ? " " : "  ") : "",
                         f[i].s);
        pos += w > 0 ? (size_t)w : 0;
    }
}

void cli_progress_update(cli_progress *ps, const mxp_progress *p) {
    const double now = mxp_time_now();
    if (ps->t_start <= 0) {
        /* the first step's rate counts from its own start: one step back */
        ps->t_start = now;
        ps->step0 = p->step;
    }
    if (p->epoch != ps->cur_epoch) {
        ps->cur_epoch = p->epoch;
        ps->loss_sum = 0;
        ps->loss_n = 0;
    }
    if (!p->result->skipped) {
        ps->loss_sum += p->result->loss;
        ps->loss_n++;
        ps->last_epoch_loss = ps->loss_sum / (double)ps->loss_n;
    }
    if (ps->quiet) return;
    const bool last = p->step == p->total_steps;
    const double pct = p->total_steps > 0 ? 100.0 * (double)p->step / (double)p->total_steps : 0;
    char fields[256];
    if (ps->tty) {
        /* redraw at most 10 times a second (and the last step) */
        if (!last && now - ps->t_drawn < 0.1 && ps->t_drawn > 0) return;
        ps->t_drawn = now;
        char line[sizeof g_bar];
        line[0] = '\r';
        progress_bar_line(ps, p, now, pct, term_width(), line + 1, sizeof line - 1);
        snprintf(g_bar, sizeof g_bar, "%s", line);
        fputs("\r\033[K", stdout);
        fputs(line, stdout);
        g_bar_shown = true;
        if (last) cli_progress_end(ps);
        fflush(stdout);
        return;
    }
    int64_t every = p->total_steps / 10 > 0 ? p->total_steps / 10 : 1;
    if (p->step - ps->last_print >= every || last || p->result->skipped) {
        progress_fields(ps, p, now, fields, sizeof fields);
        fprintf(stderr, "step %lld/%lld (%.0f%%) epoch %lld/%lld  %s grad_norm %.4g%s\n",
                (long long)p->step, (long long)p->total_steps, pct, (long long)p->epoch + 1,
                (long long)p->total_epochs, fields, p->result->grad_norm,
                p->result->skipped ? " SKIPPED" : "");
        ps->last_print = p->step;
    }
}

void cli_progress_end(cli_progress *ps) {
    (void)ps;
    if (!g_bar_shown) return;
    fputc('\n', stdout); /* the final bar stays as the run's last line */
    fflush(stdout);
    g_bar_shown = false;
}

double cli_load_average(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = -1.0;
    if (f) fclose(f);
    return l;
}

void cli_cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            snprintf(out, n, "%s", c + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    }
    if (f) fclose(f);
}

int cli_run_gnuplot(const char *script, const char *log, char *why, size_t n) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *args[] = {"gnuplot", (char *)script, NULL};
    pid_t pid;
    int e = posix_spawnp(&pid, "gnuplot", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) {
        snprintf(why, n, "cannot run gnuplot: %s (install Debian's gnuplot-nox)", strerror(e));
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        snprintf(why, n, "gnuplot not found (install Debian's gnuplot-nox)");
    else
        snprintf(why, n, "gnuplot failed (status %d); see %s", status, log);
    return -1;
}
