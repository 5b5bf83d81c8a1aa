/* tools/mixprec/cmd_train.c: `mixprec train`.
 *
 * Resolves the config (errors exit 2 before anything is written), trains
 * the world model with a progress bar on a terminal or plain log lines
 * otherwise, prints a summary (or JSON with --json) and writes
 * OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv.
 */
#include "cli.h"
#include "workload_train.h"
#include "obs_glue.h"
#include "doctor.h"

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
          "                  environment and key=value (docs/checkpoints.md)\n"
          "  key=value       override any key, e.g. training.precision=mixed_bf16 or\n"
          "                  training.mixed_precision.enabled=true\n"
          "                  training.mixed_precision.dtype=bfloat16\n"
          "\n"
          "Writes OUTPUT_DIR/summary.json and OUTPUT_DIR/history.csv (output.dir,\n"
          "default runs/latest). Exit codes: 0 ok, 1 training failed, 2 usage or\n"
          "config error (nothing written), 3 outputs could not be written, 4 a\n"
          "guard rule with action stop ended the run (outputs still written).\n"
          "SIGUSR1 switches a running job to fp32 at the next step boundary.\n"
          "SIGTERM/SIGINT finish the current step, write a checkpoint and the outputs,\n"
          "and exit 0; a second signal exits at once. Checkpoints: checkpoint.* keys.\n",
          f);
}

typedef struct run_summary {
    mxp_world_model *wm; /* for the guard's summary (doctor.h) */
    mxp_train_stats stats;
    double train_loss, val_loss, wall_s, samples_per_s;
    int64_t samples;
    int world_size;      /* data-parallel ranks */
    mxp_comm_stats comm; /* rank 0's all-reduce traffic and time */
} run_summary;


static void write_summary_json(FILE *f, const mxp_config *cfg, const run_summary *s) {
    fprintf(f,
            "{\"precision\":\"%s\",\"emulated\":%s,\"kill_switch\":%s,\"fp16_enabled_runtime\":%s,"
            "\"training_steps\":%lld,\"optimizer_steps\":%lld,\"skipped_steps\":%lld,"
            "\"overflow_rate\":%.6g,\"current_scale\":%.9g,\"epochs\":%lld,"
            "\"batch_size\":%lld,\"grad_accum_steps\":%lld,\"seed\":%llu,",
            mxp_precision_name(s->stats.precision),
            s->stats.precision == MXP_PRECISION_FP8 ? "true" : "false",
            cfg->kill_switch ? "true" : "false",
            s->stats.fp16_enabled_runtime ? "true" : "false",
            (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
            (long long)s->stats.skipped_steps, s->stats.overflow_rate,
            (double)s->stats.current_scale, (long long)cfg->epochs, (long long)cfg->batch_size,
            (long long)cfg->grad_accum_steps, (unsigned long long)cfg->seed);
    if (s->wm) doctor_guard_json(f, s->wm);
    if (s->wm) workload_json_memory(f, mxp_world_model_trainer(s->wm));
    if (s->wm) workload_json_fp32_layers(f, cfg, mxp_world_model_trainer(s->wm));
    cli_json_number(f, "final_train_loss", s->train_loss);
    cli_json_number(f, "val_loss", s->val_loss);
    fprintf(f, "\"world_size\":%d,\"comm_bytes_sent\":%llu,\"comm_seconds\":%.6g,",
            s->world_size, (unsigned long long)s->comm.bytes_sent, s->comm.seconds);
    fprintf(f, "\"wall_time_s\":%.6g,\"samples\":%lld,\"samples_per_s\":%.6g}\n", s->wall_s,
            (long long)s->samples, s->samples_per_s);
}

static void write_summary_any(FILE *f, const mxp_config *cfg, const void *s) {
    write_summary_json(f, cfg, s);
}

static void print_summary(const run_summary *s) {
    printf("precision        %s%s%s\n", mxp_precision_name(s->stats.precision),
           s->stats.precision == MXP_PRECISION_FP8 ? " (emulated: FP8 quantise, FP32 compute)"
                                                   : "",
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
    int rc = resume ? cli_resume_config(&a, resume, ckpt, sizeof ckpt, &cfg)
                    : cli_resolve_config(&a, &cfg, NULL);
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
    if (cfg.workload != MXP_WORKLOAD_WORLD_MODEL && mxp_comm_size(comm) > 1) {
        cli_error("model.workload=%s on %d ranks: data-parallel training supports "
                  "model.workload=world_model; accepted: world_model, or one process",
                  cfg.workload == MXP_WORKLOAD_CLASSIFIER ? "classifier" : "gpt",
                  mxp_comm_size(comm));
        return CLI_EXIT_USAGE;
    }
    if (cfg.workload != MXP_WORKLOAD_WORLD_MODEL) return workload_train(&cfg, json, quiet);

    mxp_error err = {0};
    mxp_world_model *wm = NULL;
    if (!quiet) /* the data comes first: MuJoCo takes seconds */
        cli_status("generating %lld %s trajectories of %lld steps%s ...",
                   (long long)cfg.data.trajectories, mxp_env_info_get(cfg.data.env)->name,
                   (long long)cfg.data.episode_len,
                   mxp_env_info_get(cfg.data.env)->mujoco ? " (MuJoCo)" : "");
    mxp_status cs = mxp_world_model_create(&cfg, &wm, &err);
    cli_status_done();
    if (cs != MXP_OK) {
        cli_error("%s", err.msg);
        return err.status == MXP_ERR_CONFIG || err.status == MXP_ERR_INVALID_ARG
                   ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    if (mxp_world_model_set_comm(wm, comm, &cfg.dist, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        mxp_world_model_destroy(wm);
        return err.status == MXP_ERR_CONFIG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    if (mxp_comm_size(comm) > 1)
        mxp_log(MXP_LOG_INFO,
                "data-parallel over %d ranks (%s): batch %lld per rank, %lld global; "
                "gradient all-reduce in %s", mxp_comm_size(comm), mxp_comm_name(comm),
                (long long)cfg.batch_size, (long long)cfg.batch_size * mxp_comm_size(comm),
                mxp_wire_dtype_name(cfg.dist.allreduce_dtype));
    /* the model's mode: training.precision=auto has chosen one by now */
    mxp_log(MXP_LOG_INFO, "training world model: precision %s, %lld epochs, batch %lld",
            mxp_precision_name(mxp_model_policy(mxp_world_model_model(wm))->mode),
            (long long)cfg.epochs,
            (long long)cfg.batch_size);
    obs_glue_progress ps = {.base = {.tty = isatty(STDOUT_FILENO) && !json, .quiet = quiet,
                                   .cur_epoch = -1}};
    mxp_world_model_set_progress(wm, obs_glue_on_progress, &ps);
    obs_glue_run orun = {mxp_world_model_trainer(wm), mxp_world_model_guard(wm),
                         mxp_world_model_samples_per_epoch(wm, cfg.batch_size)};
    rc = primary ? obs_glue_open(&cfg, &orun, &ps.obs) : CLI_EXIT_OK;
    if (rc != CLI_EXIT_OK) {
        mxp_world_model_destroy(wm);
        return rc;
    }

    bool finished = false; /* resumed from the final checkpoint of a finished run */
    rc = cli_ckpt_begin(wm, &cfg, resume ? ckpt : NULL, primary, &finished);
    if (rc != CLI_EXIT_OK) {
        obs_glue_close(ps.obs, false, false, "checkpoint setup failed", NAN);
        mxp_world_model_destroy(wm);
        return rc;
    }

    double t0 = mxp_time_now();
    mxp_status st = finished ? MXP_OK : mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err);
    run_summary s = {0};
    s.wall_s = mxp_time_now() - t0;
    if (st == MXP_OK) cli_ckpt_after_train(wm);
    if (st != MXP_OK) {
        cli_error("training failed: %s", err.msg);
        obs_glue_close(ps.obs, false, false, err.msg, NAN);
        mxp_world_model_destroy(wm);
        return CLI_EXIT_FAIL;
    }
    if (mxp_world_model_validation_loss(wm, &s.val_loss, &err) != MXP_OK) {
        cli_error("validation failed: %s", err.msg);
        obs_glue_close(ps.obs, false, false, err.msg, NAN);
        mxp_world_model_destroy(wm);
        return CLI_EXIT_FAIL;
    }
    mxp_trainer *tr = mxp_world_model_trainer(wm);
    s.wm = wm;
    mxp_trainer_stats(tr, &s.stats);
    s.train_loss = ps.base.loss_n ? ps.base.last_epoch_loss : NAN;
    s.samples = mxp_world_model_samples_per_epoch(wm, cfg.batch_size) * cfg.epochs;
    s.samples_per_s = s.wall_s > 0 ? (double)s.samples / s.wall_s : 0;
    s.world_size = mxp_comm_size(comm);
    mxp_comm_get_stats(comm, &s.comm);

    if (primary && json)
        write_summary_json(stdout, &cfg, &s);
    else if (primary)
        print_summary(&s);
    if (primary && !json) doctor_print_guard(stdout, wm);
    rc = primary ? cli_write_run_outputs(&cfg, tr, write_summary_any, &s) : CLI_EXIT_OK;
    rc = doctor_exit_code(wm, rc);
    obs_glue_close(ps.obs, true, mxp_world_model_stopped(wm), NULL, s.val_loss);
    mxp_world_model_destroy(wm);
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
