/* tools/mixprec/common.c: logging sink, error printing and config
 * resolution shared by the verbs. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

extern char **environ;

static void log_to_stderr(void *user, mxp_log_level level, const char *msg) {
    (void)user;
    fprintf(stderr, "[mixprec %s] %s\n", mxp_log_level_name(level), msg);
}

void cli_install_logger(void) { mxp_log_set_callback(log_to_stderr, NULL); }

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mixprec: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
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
    fputs("step,epoch,loss,scale,grad_norm,skipped,precision\n", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%lld,%lld,%.9g,%.9g,%.9g,%d,%s\n", (long long)h[i].step,
                (long long)h[i].epoch, h[i].loss, (double)h[i].scale, h[i].grad_norm,
                h[i].skipped ? 1 : 0, mxp_precision_name(h[i].precision));
    bad |= fclose(f) != 0;
    if (bad) {
        cli_error("writing outputs into '%s' failed", cfg->output_dir);
        return CLI_EXIT_IO;
    }
    return CLI_EXIT_OK;
}

void cli_progress_update(cli_progress *ps, const mxp_progress *p) {
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
    if (ps->tty) {
        const int width = 30;
        int filled = (int)((double)width * (double)p->step / (double)p->total_steps);
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = '\0';
        fprintf(stdout, "\r[%s] step %lld/%lld  epoch %lld/%lld  loss %.5f  scale %g ", bar,
                (long long)p->step, (long long)p->total_steps, (long long)p->epoch + 1,
                (long long)p->total_epochs, p->result->loss, p->result->scale);
        if (p->step == p->total_steps) fputc('\n', stdout);
        fflush(stdout);
        return;
    }
    int64_t every = p->total_steps / 10 > 0 ? p->total_steps / 10 : 1;
    if (p->step - ps->last_print >= every || p->step == p->total_steps || p->result->skipped) {
        fprintf(stderr, "step %lld/%lld epoch %lld loss %.6f scale %g grad_norm %.4g%s\n",
                (long long)p->step, (long long)p->total_steps, (long long)p->epoch + 1,
                p->result->loss, p->result->scale, p->result->grad_norm,
                p->result->skipped ? " SKIPPED" : "");
        ps->last_print = p->step;
    }
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
