/* tools/mixprec/cmd_train.c: `mixprec train`.
 *
 * Resolves the config (errors exit 2 before anything is written), trains
 * the world model with a progress bar on a terminal or plain log lines
 * otherwise, prints a summary (or JSON with --json) and writes
 * OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void help(FILE *f) {
    fputs("usage: mixprec train [--config FILE] [--json] [--quiet] [key=value ...]\n"
          "\n"
          "Train the world model (an MLP predicting next-state delta and reward\n"
          "from a replay buffer of pendulum or cart-pole trajectories).\n"
          "\n"
          "  --config FILE   YAML configuration (see `mixprec config show --keys`)\n"
          "  --json          print the final summary as one JSON object on stdout\n"
          "  --quiet         no progress output\n"
          "  key=value       override any key, e.g. training.precision=mixed_bf16 or\n"
          "                  training.mixed_precision.enabled=true\n"
          "                  training.mixed_precision.dtype=bfloat16\n"
          "\n"
          "Writes OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv (output.dir,\n"
          "default runs/latest). Exit codes: 0 ok, 1 training failed, 2 usage or\n"
          "config error (nothing written), 3 outputs could not be written.\n",
          f);
}

typedef struct progress_state {
    bool tty, quiet;
    int64_t last_print;
    double loss_sum; /* of the current epoch's applied steps */
    int64_t loss_n, cur_epoch;
    double last_epoch_loss;
} progress_state;

static void on_progress(void *user, const mxp_progress *p) {
    progress_state *ps = user;
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

typedef struct run_summary {
    mxp_train_stats stats;
    double train_loss, val_loss, wall_s, samples_per_s;
    int64_t samples;
} run_summary;

/* `"key":value,` with null for NaN/Inf, which JSON cannot represent. */
static void json_number(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, "\"%s\":%.9g,", key, v);
    else
        fprintf(f, "\"%s\":null,", key);
}

static void write_summary_json(FILE *f, const mxp_config *cfg, const run_summary *s) {
    fprintf(f,
            "{\"precision\":\"%s\",\"kill_switch\":%s,\"fp16_enabled_runtime\":%s,"
            "\"training_steps\":%lld,\"optimizer_steps\":%lld,\"skipped_steps\":%lld,"
            "\"overflow_rate\":%.6g,\"current_scale\":%.9g,\"epochs\":%lld,"
            "\"batch_size\":%lld,\"grad_accum_steps\":%lld,\"seed\":%llu,",
            mxp_precision_name(s->stats.precision), cfg->kill_switch ? "true" : "false",
            s->stats.fp16_enabled_runtime ? "true" : "false",
            (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
            (long long)s->stats.skipped_steps, s->stats.overflow_rate,
            (double)s->stats.current_scale, (long long)cfg->epochs, (long long)cfg->batch_size,
            (long long)cfg->grad_accum_steps, (unsigned long long)cfg->seed);
    json_number(f, "final_train_loss", s->train_loss);
    json_number(f, "val_loss", s->val_loss);
    fprintf(f, "\"wall_time_s\":%.6g,\"samples\":%lld,\"samples_per_s\":%.6g}\n", s->wall_s,
            (long long)s->samples, s->samples_per_s);
}

static int write_outputs(const mxp_config *cfg, const run_summary *s, mxp_trainer *tr) {
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
    write_summary_json(f, cfg, s);
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

static void print_summary(const run_summary *s) {
    printf("precision        %s%s\n", mxp_precision_name(s->stats.precision),
           s->stats.fp16_enabled_runtime ? " (fp16 compute)" : "");
    printf("steps            %lld (optimizer %lld, skipped %lld)\n",
           (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
           (long long)s->stats.skipped_steps);
    printf("overflow rate    %.2f%%\n", 100.0 * s->stats.overflow_rate);
    printf("loss scale       %g\n", (double)s->stats.current_scale);
    printf("final train loss %.6f\n", s->train_loss);
    printf("validation loss  %.6f\n", s->val_loss);
    printf("wall time        %.3f s\n", s->wall_s);
    printf("samples/s        %.0f\n", s->samples_per_s);
}

int cmd_train(int argc, char **argv) {
    cli_config_args a = {0};
    bool json = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = true;
        } else {
            int took = cli_take_config_arg(argc, argv, &i, &a);
            if (took < 0) return CLI_EXIT_USAGE;
            if (took > 0) continue;
            cli_error("unexpected argument '%s'; accepted: --config FILE, --json, --quiet, "
                      "--help, key=value", argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    cli_install_logger();
    mxp_config cfg;
    int rc = cli_resolve_config(&a, &cfg, NULL);
    if (rc != CLI_EXIT_OK) return rc;
    mxp_log_set_level(cfg.log_level);

    mxp_error err = {0};
    mxp_world_model *wm = NULL;
    if (mxp_world_model_create(&cfg, &wm, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return err.status == MXP_ERR_CONFIG || err.status == MXP_ERR_INVALID_ARG
                   ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    mxp_log(MXP_LOG_INFO, "training world model: precision %s, %lld epochs, batch %lld",
            mxp_precision_name(cfg.precision), (long long)cfg.epochs,
            (long long)cfg.batch_size);
    progress_state ps = {.tty = isatty(STDOUT_FILENO) && !json, .quiet = quiet, .cur_epoch = -1};
    mxp_world_model_set_progress(wm, on_progress, &ps);

    double t0 = mxp_time_now();
    mxp_status st = mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err);
    run_summary s = {0};
    s.wall_s = mxp_time_now() - t0;
    if (st != MXP_OK) {
        cli_error("training failed: %s", err.msg);
        mxp_world_model_destroy(wm);
        return CLI_EXIT_FAIL;
    }
    if (mxp_world_model_validation_loss(wm, &s.val_loss, &err) != MXP_OK) {
        cli_error("validation failed: %s", err.msg);
        mxp_world_model_destroy(wm);
        return CLI_EXIT_FAIL;
    }
    mxp_trainer *tr = mxp_world_model_trainer(wm);
    mxp_trainer_stats(tr, &s.stats);
    s.train_loss = ps.loss_n ? ps.last_epoch_loss : NAN;
    s.samples = mxp_world_model_samples_per_epoch(wm, cfg.batch_size) * cfg.epochs;
    s.samples_per_s = s.wall_s > 0 ? (double)s.samples / s.wall_s : 0;

    if (json)
        write_summary_json(stdout, &cfg, &s);
    else
        print_summary(&s);
    rc = write_outputs(&cfg, &s, tr);
    mxp_world_model_destroy(wm);
    return rc;
}
