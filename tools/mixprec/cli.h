/* tools/mixprec/cli.h: shared pieces of the mixprec command-line tool.
 * The CLI is the only place that prints or exits. Exit codes:
 *   0 success, 1 the run failed (training error), 2 usage or configuration
 *   error (nothing written), 3 output files could not be written. */
#ifndef MIXPREC_CLI_H
#define MIXPREC_CLI_H

#include <stdio.h>

#include <mixprec/mixprec.h>

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2, CLI_EXIT_IO = 3 };

#define CLI_MAX_OVERRIDES 256

/* Options every config-taking verb shares. */
typedef struct cli_config_args {
    const char *config_path;  /* --config FILE */
    const char *overrides[CLI_MAX_OVERRIDES]; /* key=value arguments, in order */
    int n_overrides;
} cli_config_args;

/* If argv[*i] is a shared config argument (--config FILE or key=value),
 * take it (advancing *i past a FILE) and return 1; return 0 when it is not
 * one; print an error and return -1 when it is malformed. */
int cli_take_config_arg(int argc, char **argv, int *i, cli_config_args *a);

/* A boolean flag of a verb's command line ("--json"): set when given. */
typedef struct cli_flag {
    const char *name;
    bool *set;
} cli_flag;
/* Parse argv[first..argc) of a verb: --help/-h (help(stdout)), the flags
 * flags[0..n_flags), and the shared config arguments (cli_take_config_arg)
 * into a; anything else is an error naming the argument and, after
 * "accepted: ", the text `accepted`. Returns -1 to go on, else the exit
 * code for the verb to return (CLI_EXIT_OK after --help, CLI_EXIT_USAGE). */
int cli_parse_args(int argc, char **argv, int first, const cli_flag *flags, int n_flags,
                   cli_config_args *a, void (*help)(FILE *), const char *accepted);

/* Route library log messages to stderr with a level prefix. */
void cli_install_logger(void);
/* Print "mixprec: error: ..." to stderr (through the library log, as a
 * JSON line, after cli_errors_to_log(true): --log-format json). The
 * message is also kept for cli_json_error_exit. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_errors_to_log(bool on);
/* --json verbs: on a non-zero exit, main() prints one JSON object on
 * stdout, {"schema":"mixprec.error/1","error":{"message":..,"exit_code":..,
 * "exit_name":..}} (docs/json.md), so a consumer of stdout always gets
 * JSON. cli_json_error_exit prints it (once) when on and rc != 0. */
void cli_json_errors(bool on);
void cli_json_error_exit(int rc);
/* The name of an exit code: ok, failed, usage, io, stopped. */
const char *cli_exit_name(int rc);
/* The closest of n choices to word (edit distance <= 2, or a prefix of
 * at least 3 letters), or NULL: "did you mean" for a typo'd verb. */
const char *cli_did_you_mean(const char *word, const char *const *choices, int n);
/* Resolve defaults < file < env < overrides into *cfg; on failure print the
 * error and return CLI_EXIT_USAGE. The builder is returned for printing
 * provenance (caller destroys), or NULL when not wanted. */
int cli_resolve_config(const cli_config_args *a, mxp_config *cfg, mxp_config_builder **keep);
/* mkdir -p (mxp_mkdirs) of a path no longer than a config string; 0 or errno. */
int cli_mkdirs(const char *path);

/* Print a jansson value (json_t *; void * keeps jansson out of this header)
 * as one line of compact JSON on stdout. */
void cli_json_print(const void *json);
/* A config value's text as a typed JSON value (json_t *): true/false,
 * integers and reals as numbers, JSON objects/arrays as themselves, else a
 * string. The caller owns the reference. */
void *cli_json_typed(const char *text);

/* `"key":value,` with null for NaN/Inf, which JSON cannot represent. */
void cli_json_number(FILE *f, const char *key, double v);

/* The machine, for benchmark headers: the 1-minute load average (-1 when
 * unknown) and the CPU model name from /proc/cpuinfo ("unknown" if absent). */
double cli_load_average(void);
void cli_cpu_model(char *out, size_t n);

/* Run `gnuplot script` with its stdout and stderr into log and wait.
 * Returns 0, or -1 with why (not installed, or its exit status). */
int cli_run_gnuplot(const char *script, const char *log, char *why, size_t n);

/* Writes a run's summary (one JSON object) for cli_write_run_outputs. */
typedef void (*cli_summary_writer)(FILE *f, const mxp_config *cfg, const void *summary);
/* Create output.dir and write summary.json (through write_summary) and
 * history.csv (the trainer's history; with cfg->eval_every >= 1 a val_loss
 * column holding val[i].loss on the row of step val[i].step, empty on the
 * others); CLI_EXIT_IO with a message on failure. */
int cli_write_run_outputs(const mxp_config *cfg, const mxp_trainer *tr,
                          const mxp_run_val_row *val, size_t nval,
                          cli_summary_writer write_summary, const void *summary);

/* Progress of a training run: a bar on a terminal, a log line per ~10% (and
 * per skipped step) otherwise, and the mean loss of the current epoch's
 * applied steps. Both show percent, elapsed, ETA, steps/s, samples/s, the
 * learning rate, the last validation loss and the precision (tr and
 * samples_per_step: set by the caller, else those fields are left out).
 * While a bar is on screen, log lines clear it, print, and redraw it. */
typedef struct cli_progress {
    bool tty, quiet;
    int64_t last_print, cur_epoch, loss_n;
    double loss_sum, last_epoch_loss;
    const mxp_trainer *tr;    /* lr and precision (NULL: not shown) */
    int64_t samples_per_step; /* 0: samples/s not shown */
    double val_loss;          /* last validation loss; 0 or NaN: none yet */
    double t_start, t_drawn;  /* internal: first update, last bar drawn */
    int64_t step0;            /* internal: step of the first update */
} cli_progress;
void cli_progress_update(cli_progress *ps, const mxp_progress *p);
/* Take the bar off the screen for good (end of run, error). */
void cli_progress_end(cli_progress *ps);
/* A one-line status on stderr for long phases before the first step
 * ("generating 256 trajectories of ant (MuJoCo)..."); a terminal gets it
 * redrawn in place, a log one line. cli_status_done ends it. */
void cli_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_status_done(void);

int cmd_train(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);

/* `mixprec train --resume` (cmd_ckpt.c): find the checkpoint of `resume`
 * (a file, a run directory or a checkpoint directory; newest that
 * verifies) into ckpt, and resolve the config from its stored config <
 * file < env < overrides (a run directory also sets output.dir): the
 * library's mxp_run_resume_config, then the CLI's sources. The run
 * (mixprec/run.h) then loads it and checks it against the config. A
 * train() call in progress continues at its global micro-batch: its
 * training.batch_size defaults to that batch / world ranks (a two-rank run
 * resumes in one process as it is), below the file, env and overrides. */
int cli_resume_config(const cli_config_args *a, const char *resume, int world, char *ckpt,
                      size_t n, mxp_config *cfg);

#endif
