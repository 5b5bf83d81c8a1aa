/* tools/mixprec/cmd_config.c: `mixprec config show`. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fputs("usage: mixprec config show [--config FILE] [key=value ...]\n"
          "\n"
          "Print every configuration key with its resolved value and where it\n"
          "came from (default, file, env, cli, kill-switch). Precedence, lowest\n"
          "first: defaults < YAML file < environment < key=value arguments; the\n"
          "kill switch ENABLE_FP16_TRAINING=false forces fp32.\n"
          "\n"
          "  --keys        list the accepted keys with their help\n",
          f);
}

int cmd_config(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "show") != 0) {
        cli_error("unknown config command '%s'; accepted: show", argv[1]);
        return CLI_EXIT_USAGE;
    }
    cli_config_args a = {0};
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--keys") == 0) {
            for (int k = 0; k < mxp_config_num_keys(); k++)
                printf("%-36s %s\n", mxp_config_key_name(k), mxp_config_key_help(k));
            return CLI_EXIT_OK;
        } else {
            int took = cli_take_config_arg(argc, argv, &i, &a);
            if (took < 0) return CLI_EXIT_USAGE;
            if (took > 0) continue;
            cli_error("unexpected argument '%s'; accepted: --config FILE, --keys, key=value",
                      argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    cli_install_logger();
    mxp_config cfg;
    mxp_config_builder *b = NULL;
    int rc = cli_resolve_config(&a, &cfg, &b);
    if (rc != CLI_EXIT_OK) return rc;
    mxp_config_print(b, stdout);
    mxp_config_builder_destroy(b);
    return CLI_EXIT_OK;
}
