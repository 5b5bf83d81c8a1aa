/* tools/mixprec/main.c: the `mixprec` command: verb dispatch and help. */
#include "bench.h"
#include "cli.h"
#include "data_cli.h"
#include "doctor.h"
#include "obs_glue.h"
#include "train_summary.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fputs("usage: mixprec <command> [options] [key=value ...]\n"
          "\n"
          "Mixed-precision training engine (FP32, BF16, FP16; FP8 emulated).\n"
          "\n"
          "commands:\n"
          "  train        train the configured workload (default: world model)\n"
          "  config show  print the resolved configuration and each value's source\n"
          "  ckpt         checkpoints: verify, inspect, export, diff, keep, list\n"
          "  sample       generate text from a GPT checkpoint (model.workload=gpt)\n"
          "  eval         loss/accuracy of a model trained on user data (data.path)\n"
          "  predict      run a model trained on user data on inputs from a file\n"
          "  bench        `bench kernels`: kernel GFLOP/s and GB/s against the CPU peak;\n"
          "               `bench train`: every precision mode on the workloads vs fp32\n"
          "  doctor       CPU features, native vs emulated precisions, preflight advisor\n"
          "  report DIR   PNG plots and report.md from a run directory's metrics.db,\n"
          "               or the plots of a `bench train` output directory\n"
          "  version      print the version\n"
          "  help         this text\n"
          "\n"
          "Run `mixprec <command> --help` for a command's options.\n"
          "Exit codes: 0 success, 1 run failed, 2 usage/config error (nothing\n"
          "written), 3 output could not be written, 4 a guard rule stopped the run.\n",
          f);
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} verbs[] = {{"train", cmd_train},   {"config", cmd_config},   {"ckpt", cmd_ckpt},
             {"sample", cmd_sample}, {"eval", cmd_eval},       {"predict", cmd_predict},
             {"bench", cmd_bench},   {"report", cmd_report},   {"doctor", cmd_doctor}};

/* --json anywhere on the line: a failure prints a JSON error object on
 * stdout too (cli_json_error_exit), whichever verb it is. */
static bool wants_json(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *verb = argv[1];
    const int nv = (int)(sizeof verbs / sizeof verbs[0]);
    for (int i = 0; i < nv; i++)
        if (strcmp(verb, verbs[i].name) == 0) {
            cli_json_errors(wants_json(argc, argv));
            int rc = verbs[i].run(argc - 1, argv + 1);
            cli_json_error_exit(rc);
            return rc;
        }
    if (strcmp(verb, "version") == 0 || strcmp(verb, "--version") == 0) {
        printf("mixprec %s\n", MIXPREC_VERSION_STRING);
        return CLI_EXIT_OK;
    }
    if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    static const char *const all[] = {"train",  "config", "ckpt",   "sample",  "eval", "predict",
                                      "bench",  "report", "doctor", "version", "help"};
    const char *near = cli_did_you_mean(verb, all, (int)(sizeof all / sizeof all[0]));
    if (near)
        cli_error("unknown command '%s'; did you mean '%s'? (accepted: train, config, ckpt, "
                  "sample, eval, predict, bench, report, doctor, version, help)", verb, near);
    else
        cli_error("unknown command '%s'; accepted: train, config, ckpt, sample, eval, predict, "
                  "bench, report, doctor, version, help", verb);
    return CLI_EXIT_USAGE;
}
