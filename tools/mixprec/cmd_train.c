/* tools/mixprec/cmd_train.c: `mixprec train`, one path for every workload
 * over the library's run object (mixprec/run.h).
 *
 * Resolves the config (errors exit 2 before anything is written), creates
 * the run (which refuses a run directory holding another run, and resumes
 * with --resume), installs the stop signals, trains with a progress bar on
 * a terminal or plain log lines otherwise, prints a summary (or JSON with
 * --json) and writes OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv.
 * Resuming a finished run says so and writes nothing.
 */
#include "cli.h"
#include "train_summary.h"
#include "obs_glue.h"
#include "doctor.h"

#include <signal.h>
#include <stdlib.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void help(FILE *f) {
    fputs("usage: mixprec train [--config FILE] [--json] [--quiet] [--serve]\n"
          "                     [--resume RUN_DIR|CKPT] [--log-format text|json] [key=value ...]\n"
          "\n"
          "Train the world model (an MLP predicting next-state delta and reward\n"
          "from a replay buffer of pendulum or cart-pole trajectories), or with\n"
          "model.workload=classifier the Fashion-MNIST MLP, with model.workload=gpt\n"
          "the character-level GPT (docs/workloads.md).\n"
          "\n"
          "  --config FILE   YAML configuration (see `mixprec config show --keys`)\n"
          "  --json          print the final summary as one JSON object on stdout\n"
          "  --quiet         no progress output\n"
          "  --serve         serve /metrics, the training API and the dashboard on\n"
          "                  obs.http.address:obs.http.port (127.0.0.1:8080)\n"
          "  --log-format F  log lines as text (default) or json\n"
          "  --resume PATH   continue a run from its newest verified checkpoint: PATH is\n"
          "                  a run directory, its checkpoints/ directory or a checkpoint\n"
          "                  file; the checkpoint's config is the base, then --config,\n"
          "                  environment and key=value (docs/checkpoints.md). A finished\n"
          "                  run trains nothing and writes nothing\n"
          "  key=value       override any key, e.g. training.precision=mixed_bf16 or\n"
          "                  training.mixed_precision.enabled=true\n"
          "                  training.mixed_precision.dtype=bfloat16\n"
          "\n"
          "Writes OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv. Without\n"
          "output.dir each run gets a new runs/version_<N>, and runs/latest links to\n"
          "the newest. With training.eval_every=N (or eval_every_steps=N): validation\n"
          "every N epochs (steps) (val_loss in history.csv), early stopping\n"
          "(training.early_stop.*) and the best weights in OUTPUT_DIR/best.safetensors.\n"
          "An output.dir holding another run's checkpoints is refused: --resume it, or\n"
          "choose a new output.dir (docs/run.md).\n"
          "Exit codes: 0 ok, 1 training failed, 2 usage or config error (nothing\n"
          "written), 3 outputs could not be written, 4 a guard rule with action\n"
          "stop ended the run (outputs still written).\n"
          "SIGUSR1 switches a running job to fp32 at the next step boundary.\n"
          "SIGTERM/SIGINT/SIGUSR2 finish the current step, write a checkpoint and the\n"
          "outputs, and exit 0; a second signal exits at once. Under mpirun send SIGUSR2\n"
          "to mpirun (forwarded to every rank). Checkpoints: checkpoint.* keys.\n",
          f);
}

/* SIGTERM/SIGINT/SIGUSR2: the run stops after the current step and writes its
 * checkpoint; SA_RESETHAND lets a second signal take the default action. */
static mxp_run *volatile g_run;

static void on_stop_signal(int sig) {
    (void)sig;
    mxp_run *r = g_run;
    if (r) mxp_run_request_stop(r);
}

static void install_stop_signals(mxp_run *run) {
    g_run = run;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL); /* what mpirun forwards to every rank: a graceful stop */
}

static int fail_code(const mxp_error *err) {
    return err->status == MXP_ERR_CONFIG || err->status == MXP_ERR_INVALID_ARG ||
                   err->status == MXP_ERR_IO || err->status == MXP_ERR_FORMAT ||
                   err->status == MXP_ERR_UNSUPPORTED || err->status == MXP_ERR_STATE
               ? CLI_EXIT_USAGE
               : CLI_EXIT_FAIL;
}

/* ---- history.csv of a resumed run ---------------------------------------------
 * The trainer's history holds the steps this process ran; a resumed run's
 * history.csv keeps the rows of the steps before the checkpoint and gets
 * the new ones appended, so it reads as the uninterrupted run's. */

/* The rows of OUTPUT_DIR/history.csv with step <= upto (malloc'd text,
 * header dropped; "" when there is none), or NULL when out of memory. */
static char *history_prefix(const char *dir, int64_t upto) {
    char path[MXP_CONFIG_STR_MAX + 32], line[512];
    snprintf(path, sizeof path, "%s/history.csv", dir);
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *end;
        long long step = strtoll(line, &end, 10);
        if (end == line || *end != ',' || step > upto) continue;
        size_t n = strlen(line);
        if (len + n + 1 > cap) {
            char *g = realloc(out, cap = 2 * (len + n + 1));
            if (!g) break;
            out = g;
        }
        memcpy(out + len, line, n + 1);
        len += n;
    }
    if (f) fclose(f);
    return out;
}

/* Rewrite OUTPUT_DIR/history.csv as its header, `kept`, then its rows;
 * *last_epoch_loss gets the mean loss of the applied steps of the last
 * epoch over all rows (NaN when none). */
static int history_merge(const char *dir, const char *kept, double *last_epoch_loss) {
    char path[MXP_CONFIG_STR_MAX + 32], tmp[MXP_CONFIG_STR_MAX + 48], line[512];
    snprintf(path, sizeof path, "%s/history.csv", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = fopen(path, "r"), *out = fopen(tmp, "w");
    bool ok = in && out && fgets(line, sizeof line, in) && fputs(line, out) >= 0 &&
              fputs(kept, out) >= 0;
    while (ok && fgets(line, sizeof line, in)) ok = fputs(line, out) >= 0;
    if (in) fclose(in);
    ok = out && fclose(out) == 0 && ok && rename(tmp, path) == 0;
    if (!ok) {
        remove(tmp);
        cli_error("cannot rewrite '%s': %s", path, strerror(errno));
        return CLI_EXIT_IO;
    }
    /* step,epoch,loss,scale,grad_norm,skipped,precision */
    in = fopen(path, "r");
    long long epoch = -1, e;
    double sum = 0, loss, scale, gn;
    int64_t n = 0;
    int skipped;
    while (in && fgets(line, sizeof line, in))
        if (sscanf(line, "%*d,%lld,%lf,%lf,%lf,%d", &e, &loss, &scale, &gn, &skipped) == 5) {
            if (e != epoch) sum = 0, n = 0, epoch = e;
            if (!skipped) sum += loss, n++;
        }
    if (in) fclose(in);
    *last_epoch_loss = n ? sum / (double)n : NAN;
    return CLI_EXIT_OK;
}

static void write_summary_any(FILE *f, const mxp_config *cfg, const void *s) {
    if (!train_summary_json(f, s))
        cli_error("the summary of the run in '%s' could not be made", cfg->output_dir);
}

/* OUTPUT_DIR/summary.json alone (after history_merge). */
static int write_summary_file(const mxp_config *cfg, const train_summary *s) {
    char path[MXP_CONFIG_STR_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", cfg->output_dir);
    FILE *f = fopen(path, "w");
    bool made = f && train_summary_json(f, s);
    if (!f || fclose(f) != 0 || !made) {
        cli_error("cannot write '%s': %s", path, strerror(errno));
        return CLI_EXIT_IO;
    }
    return CLI_EXIT_OK;
}

/* The GPT's weights for `mixprec sample`: OUTPUT_DIR/model.safetensors. */
static int save_model(mxp_run *run, const mxp_config *cfg, bool json) {
    char path[MXP_CONFIG_STR_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", cfg->output_dir);
    mxp_error err = {0};
    if (mxp_run_save(run, path, &err) != MXP_OK) {
        cli_error("cannot save the model: %s", err.msg);
        return CLI_EXIT_IO;
    }
    if (!json) printf("model            %s (mixprec sample --checkpoint %s)\n", path, path);
    return CLI_EXIT_OK;
}

static void log_start(const mxp_config *cfg, mxp_comm *comm, const mxp_run *run) {
    if (mxp_comm_size(comm) > 1)
        mxp_log(MXP_LOG_INFO,
                "data-parallel over %d ranks (%s): batch %lld per rank, %lld global; "
                "gradient all-reduce in %s", mxp_comm_size(comm), mxp_comm_name(comm),
                (long long)cfg->batch_size, (long long)cfg->batch_size * mxp_comm_size(comm),
                mxp_wire_dtype_name(cfg->dist.allreduce_dtype));
    const char *name = mxp_run_provider(run)->name;
    mxp_log(MXP_LOG_INFO, "training %s: precision %s%s, %lld epochs, batch %lld",
            strcmp(name, "world_model") == 0 ? "world model" : name, mxp_precision_name(cfg->precision),
            cfg->precision == MXP_PRECISION_FP8 ? " (emulated)" : "", (long long)cfg->epochs,
            (long long)cfg->batch_size);
}

/* Train the created run and report; returns the exit code. */
/* latest: the run directory pointer to move to this run's output.dir once
 * it is about to train (runs/latest), or "" (output.dir was given). */
static int train_run(mxp_run *run, const mxp_config *cfg, mxp_comm *comm, obs_glue_progress *ps,
                     bool primary, bool json, const char *latest) {
    mxp_error err = {0};
    const mxp_workload_provider *wl = mxp_run_provider(run);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    obs_glue_run orun = {run, mxp_run_trainer(run), mxp_run_guard(run),
                         info.samples_per_epoch / wl->rows_per_sample};
    int rc = primary ? obs_glue_open(cfg, &orun, &ps->obs) : CLI_EXIT_OK;
    if (rc != CLI_EXIT_OK) return rc;
    /* the run starts: latest names it (not before: a run that failed to
     * start, e.g. on a port in use, leaves latest on the previous one) */
    if (latest[0] && mxp_run_dir_publish(latest, cfg->output_dir, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        obs_glue_close(ps->obs, false, false, err.msg, NAN);
        return CLI_EXIT_IO;
    }
    char *kept = info.resumed && primary ? history_prefix(cfg->output_dir, info.training_steps)
                                         : NULL;
    install_stop_signals(run);
    mxp_status st = mxp_run_train(run, 0, 0, &err); /* the config's, or the resumed call's */
    g_run = NULL;
    train_summary s;
    memset(&s, 0, sizeof s);
    if (st == MXP_OK) st = mxp_run_evaluate(run, &s.eval, &err);
    if (st != MXP_OK) {
        cli_error("training failed: %s", err.msg);
        obs_glue_close(ps->obs, false, false, err.msg, NAN);
        free(kept);
        return CLI_EXIT_FAIL;
    }
    train_summary_fill(&s, run, ps->base.loss_n ? ps->base.last_epoch_loss : NAN);
    size_t nval = 0;
    const mxp_run_val_row *val = mxp_run_val_history(run, &nval);
    rc = primary ? cli_write_run_outputs(cfg, mxp_run_trainer(run), val, nval, write_summary_any,
                                         &s)
                 : CLI_EXIT_OK;
    if (kept && rc == CLI_EXIT_OK) { /* the whole run's history and last epoch's loss */
        rc = history_merge(cfg->output_dir, kept, &s.train_loss);
        if (rc == CLI_EXIT_OK) rc = write_summary_file(cfg, &s);
    }
    free(kept);
    if (s.info.early_stopped)
        mxp_log(MXP_LOG_INFO, "early stopping ended the run after step %lld: best validation "
                "loss %.6g at epoch %lld%s%s", (long long)s.stats.training_steps,
                s.info.best_val_loss, (long long)s.info.best_epoch,
                s.info.best_checkpoint[0] ? "; weights in " : "", s.info.best_checkpoint);
    if (s.info.stopped && !mxp_guard_stopped(mxp_run_guard(run)))
        mxp_log(MXP_LOG_WARN, "stopped by signal after step %lld%s%s; resume with --resume %s",
                (long long)s.stats.training_steps,
                s.info.last_checkpoint[0] ? "; checkpoint " : " (checkpoints disabled)",
                s.info.last_checkpoint, cfg->output_dir);
    if (primary && json)
        train_summary_json(stdout, &s);
    else if (primary)
        train_summary_print(stdout, &s);
    if (rc == CLI_EXIT_OK && primary && cfg->workload == MXP_WORKLOAD_GPT)
        rc = save_model(run, cfg, json);
    const bool guard_stop = mxp_guard_stopped(mxp_run_guard(run));
    obs_glue_close(ps->obs, true, guard_stop || s.info.stopped, NULL, s.eval.loss);
    return rc == CLI_EXIT_OK && guard_stop ? CLI_EXIT_GUARD_STOP : rc;
}

static int train_verb(int argc, char **argv, mxp_comm *comm) {
    cli_config_args a = {0};
    bool json = false, quiet = false;
    const char *resume = NULL;            /* --resume RUN_DIR|FILE */
    char ckpt[MXP_CKPT_PATH_MAX] = "";    /* the checkpoint it resolves to */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = true;
        } else if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc) {
            resume = argv[++i];
        } else {
            int took = obs_glue_take_arg(argc, argv, &i); /* --serve, --log-format */
            if (took == 0) took = cli_take_config_arg(argc, argv, &i, &a);
            if (took < 0) return CLI_EXIT_USAGE;
            if (took > 0) continue;
            cli_error("unexpected argument '%s'; accepted: --config FILE, --json, --quiet, "
                      "--resume PATH, "
                      "--help, key=value", argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    cli_install_logger();
    obs_glue_install_logger();
    doctor_install_signal(); /* SIGUSR1: fp32 at the next step boundary */
    mxp_config cfg;
    mxp_config_builder *b = NULL;
    int rc = resume ? cli_resume_config(&a, resume, mxp_comm_size(comm), ckpt, sizeof ckpt,
                                        &cfg)
                    : cli_resolve_config(&a, &cfg, &b);
    /* output.dir that no source set: this run gets runs/version_<N> */
    const bool own_dir = b && mxp_config_key_value(b, mxp_config_key_find("output.dir"), NULL,
                                                   0) == MXP_SRC_DEFAULT;
    mxp_config_builder_destroy(b);
    if (rc != CLI_EXIT_OK) return rc;
    /* training.device: refused before anything is created or written */
    mxp_error derr = {0};
    if (mxp_device_require(&cfg.device, &derr) != MXP_OK) {
        cli_error("training.device=%s: %s", cfg.device_text, derr.msg);
        return CLI_EXIT_USAGE;
    }
    /* data parallel: rank 0 alone prints, writes outputs, checkpoints and
     * metrics and serves HTTP; the other ranks log warnings and errors */
    const bool primary = mxp_comm_rank(comm) == 0;
    if (!primary) {
        quiet = true;
        json = false;
        if (cfg.log_level < MXP_LOG_WARN) cfg.log_level = MXP_LOG_WARN;
    }
    mxp_log_set_level(cfg.log_level);
    /* FTZ/DAZ for FP32 compute, before any model or kernel thread exists */
    if (cfg.flush_denormals && !mxp_fpenv_set_ftz(true))
        mxp_log(MXP_LOG_WARN, "training.flush_denormals=true: no flush-to-zero mode on this "
                              "platform; ignored");
    if (obs_glue_apply_config(&cfg)) quiet = true; /* JSON logs: progress goes through the log */

    obs_glue_progress ps = {.base = {.tty = isatty(STDOUT_FILENO) && !json, .quiet = quiet,
                                     .cur_epoch = -1}};
    const mxp_run_observer observer = {.self = &ps, .precision_changed = obs_glue_on_precision,
                                       .evaluated = obs_glue_on_eval};
    mxp_run_options opt = mxp_run_options_default();
    opt.comm = comm;
    opt.observer = &observer;
    opt.progress = obs_glue_on_progress;
    opt.progress_user = &ps;
    opt.checkpoints = primary;
    opt.resume = resume ? ckpt : NULL;
    mxp_error err = {0};
    mxp_run *run = NULL;
    char latest[sizeof cfg.output_dir] = "";
    if (own_dir && primary) {
        snprintf(latest, sizeof latest, "%s", cfg.output_dir);
        if (mxp_run_dir_reserve(latest, cfg.output_dir, sizeof cfg.output_dir, &err) != MXP_OK) {
            cli_error("%s", err.msg);
            return fail_code(&err);
        }
    }
    if (!quiet && strcmp(cfg.wl.data_path, "none") != 0) /* the data comes first */
        cli_status("loading %s ...", cfg.wl.data_path);
    else if (!quiet) /* MuJoCo takes seconds */
        cli_status("preparing the %s data ...", cfg.workload == MXP_WORKLOAD_WORLD_MODEL
                                                    ? mxp_env_info_get(cfg.data.env)->name
                                                    : "training");
    mxp_status cs = mxp_run_create(&cfg, &opt, &run, &err);
    cli_status_done();
    if (cs != MXP_OK) {
        cli_error("%s", err.msg);
        if (latest[0]) rmdir(cfg.output_dir); /* reserved and empty: nothing was written */
        return fail_code(&err);
    }
    mxp_run_info info;
    mxp_run_stats(run, &info);
    if (info.finished_before_resume) { /* nothing to train, nothing to write */
        if (primary)
            mxp_log(MXP_LOG_WARN, "run %s in %s is already complete (step %lld): nothing to "
                    "train; outputs unchanged", info.run_id, cfg.output_dir,
                    (long long)info.training_steps);
        mxp_run_destroy(run);
        return CLI_EXIT_OK;
    }
    log_start(mxp_run_config(run), comm, run); /* the run's: auto has chosen by now */
    rc = train_run(run, &cfg, comm, &ps, primary, json, latest);
    mxp_run_destroy(run);
    return rc;
}

/* `mixprec train` under a communicator: MPI when started by mpirun (or
 * another MPI launcher), else one process. On a data-parallel run, a rank
 * that exits with an error ends the whole job (MPI_Abort keeps the exit
 * code), so no rank waits forever in a collective for it; a guard's stop is
 * a decision all ranks take together and exits normally. */
int cmd_train(int argc, char **argv) {
    mxp_error err = {0};
    mxp_comm *comm = NULL;
    if (mxp_comm_create_from_env(&comm, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return CLI_EXIT_USAGE;
    }
    int rc = train_verb(argc, argv, comm);
    if (rc != CLI_EXIT_OK && rc != CLI_EXIT_GUARD_STOP && mxp_comm_size(comm) > 1) {
        cli_error("rank %d of %d failed (exit %d): stopping every rank", mxp_comm_rank(comm),
                  mxp_comm_size(comm), rc);
        mxp_comm_abort(comm, rc);
    }
    mxp_comm_destroy(comm);
    return rc;
}
