/* tools/mixprec/cmd_config.c: `mixprec config show`. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fputs("usage: mixprec config show [--json] [--keys] [--config FILE] [key=value ...]\n"
          "\n"
          "Print every configuration key with its resolved value and where it\n"
          "came from (default, file, env, cli, kill-switch). Precedence, lowest\n"
          "first: defaults < YAML file < environment < key=value arguments; the\n"
          "kill switch ENABLE_FP16_TRAINING=false forces fp32.\n"
          "\n"
          "  --keys        list the accepted keys with their help\n"
          "  --json        one JSON object on stdout (schema mixprec.config/1,\n"
          "                docs/json.md): {\"keys\": {KEY: {\"value\": typed value,\n"
          "                \"source\": default|file|env|cli|kill-switch}}}; with --keys\n"
          "                {\"keys\": {KEY: {\"help\": text}}}\n",
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
    bool json = false, keys = false;
    const cli_flag flags[] = {{"--keys", &keys}, {"--json", &json}};
    int parsed = cli_parse_args(argc, argv, 2, flags, 2, &a, help,
                                "--config FILE, --keys, --json, key=value");
    if (parsed >= 0) return parsed;
    if (keys) {
        json_t *j = json_object(), *o = json_object();
        for (int k = 0; k < mxp_config_num_keys(); k++) {
            if (!json) {
                printf("%-36s %s\n", mxp_config_key_name(k), mxp_config_key_help(k));
                continue;
            }
            json_t *e = json_object();
            json_object_set_new(e, "help", json_string(mxp_config_key_help(k)));
            json_object_set_new(o, mxp_config_key_name(k), e);
        }
        json_object_set_new(j, "schema", json_string("mixprec.config_keys/1"));
        json_object_set_new(j, "keys", o);
        if (json) cli_json_print(j);
        json_decref(j);
        return CLI_EXIT_OK;
    }
    cli_install_logger();
    mxp_config cfg;
    mxp_config_builder *b = NULL;
    int rc = cli_resolve_config(&a, &cfg, &b);
    if (rc != CLI_EXIT_OK) return rc;
    if (!json) {
        mxp_config_print(b, stdout);
        mxp_config_builder_destroy(b);
        return CLI_EXIT_OK;
    }
    json_t *j = json_object(), *o = json_object();
    json_object_set_new(j, "schema", json_string("mixprec.config/1"));
    for (int k = 0; k < mxp_config_num_keys(); k++) {
        char val[2 * MXP_CONFIG_STR_MAX];
        mxp_config_source src = mxp_config_key_value(b, k, val, sizeof val);
        json_t *e = json_object();
        json_object_set_new(e, "value", (json_t *)cli_json_typed(val));
        json_object_set_new(e, "source", json_string(mxp_config_source_name(src)));
        json_object_set_new(o, mxp_config_key_name(k), e);
    }
    json_object_set_new(j, "keys", o);
    cli_json_print(j);
    json_decref(j);
    mxp_config_builder_destroy(b);
    return CLI_EXIT_OK;
}
