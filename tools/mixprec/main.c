/* tools/mixprec/main.c: the `mixprec` command: verb dispatch and help. */
#include "cli.h"

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
          "  version      print the version\n"
          "  help         this text\n"
          "\n"
          "Run `mixprec <command> --help` for a command's options.\n"
          "Exit codes: 0 success, 1 run failed, 2 usage/config error (nothing\n"
          "written), 3 output could not be written.\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(verb, "config") == 0) return cmd_config(argc - 1, argv + 1);
    if (strcmp(verb, "version") == 0 || strcmp(verb, "--version") == 0) {
        printf("mixprec %s\n", MIXPREC_VERSION_STRING);
        return CLI_EXIT_OK;
    }
    if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    cli_error("unknown command '%s'; accepted: train, config, version, help", verb);
    return CLI_EXIT_USAGE;
}
