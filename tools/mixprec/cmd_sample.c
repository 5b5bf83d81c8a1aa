/* tools/mixprec/cmd_sample.c: `mixprec sample`: text from a GPT checkpoint.
 *
 * The checkpoint (written by `mixprec train model.workload=gpt` as
 * OUTPUT_DIR/model.safetensors, or any mixprec checkpoint of a GPT run)
 * carries the resolved config; the model is rebuilt from it (the
 * vocabulary from its data.text_file, which must still be readable:
 * key=value arguments override, e.g. data.text_file=...), the weights are
 * loaded and verified (checksums, names, shapes), and the bytes are
 * generated in the checkpoint's precision (or training.precision=...;
 * an fp8 checkpoint samples in mixed_bf16 unless fp8 is asked for, since
 * delayed FP8 scales come from training steps).
 */
#include "train_summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/ckpt.h>
#include <mixprec/gpt.h>

static void help(FILE *f) {
    fputs("usage: mixprec sample --checkpoint FILE [--prompt TEXT] [--length N]\n"
          "                      [--temperature T] [--seed S] [key=value ...]\n"
          "\n"
          "Generate N bytes (default 400) from a character-level GPT checkpoint\n"
          "(`mixprec train model.workload=gpt` writes OUTPUT_DIR/model.safetensors).\n"
          "The model and its vocabulary are rebuilt from the config stored in the\n"
          "checkpoint; key=value overrides it (e.g. data.text_file=PATH if the text\n"
          "moved, training.precision=fp32).\n"
          "\n"
          "  --checkpoint FILE  the checkpoint (required)\n"
          "  --prompt TEXT      text to continue (default: a newline)\n"
          "  --length N         bytes to generate, 1..1000000 (400)\n"
          "  --temperature T    softmax temperature, > 0; <= 0.001 is greedy (0.8)\n"
          "  --seed S           sampling seed (1)\n"
          "\n"
          "Exit codes: 0 ok, 1 generation failed, 2 usage or bad checkpoint.\n",
          f);
}

/* Parse a number argument; prints the error. */
static bool num_arg(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || *end || !(v >= lo && v <= hi)) {
        cli_error("%s '%s'; accepted: a number in [%g, %g]", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

int cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "";
    double length = 400, temperature = 0.8, seed = 1;
    cli_config_args a = {0};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        }
        bool takes = strcmp(o, "--checkpoint") == 0 || strcmp(o, "--prompt") == 0 ||
                     strcmp(o, "--length") == 0 || strcmp(o, "--temperature") == 0 ||
                     strcmp(o, "--seed") == 0;
        if (takes && i + 1 >= argc) {
            cli_error("%s needs a value", o);
            return CLI_EXIT_USAGE;
        }
        if (strcmp(o, "--checkpoint") == 0) {
            ckpt = argv[++i];
        } else if (strcmp(o, "--prompt") == 0) {
            prompt = argv[++i];
        } else if (strcmp(o, "--length") == 0) {
            if (!num_arg(o, argv[++i], 1, 1e6, &length)) return CLI_EXIT_USAGE;
        } else if (strcmp(o, "--temperature") == 0) {
            if (!num_arg(o, argv[++i], 1e-9, 1e6, &temperature)) return CLI_EXIT_USAGE;
        } else if (strcmp(o, "--seed") == 0) {
            if (!num_arg(o, argv[++i], 0, 9007199254740992.0, &seed)) return CLI_EXIT_USAGE;
        } else if (o[0] != '-' && strchr(o, '=')) {
            if (a.n_overrides == CLI_MAX_OVERRIDES) {
                cli_error("more than %d key=value overrides", CLI_MAX_OVERRIDES);
                return CLI_EXIT_USAGE;
            }
            a.overrides[a.n_overrides++] = o;
        } else {
            cli_error("unexpected argument '%s'; accepted: --checkpoint FILE, --prompt TEXT, "
                      "--length N, --temperature T, --seed S, --help, key=value", o);
            return CLI_EXIT_USAGE;
        }
    }
    if (!ckpt) {
        cli_error("--checkpoint FILE is required (a GPT run's OUTPUT_DIR/model.safetensors)");
        return CLI_EXIT_USAGE;
    }
    cli_install_logger();
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    mxp_gpt *g = NULL;
    char *out = NULL;
    int rc = CLI_EXIT_USAGE;
    mxp_status s = mxp_st_file_read(ckpt, &f, &err);
    if (s == MXP_OK) s = mxp_config_builder_create(&b, &err);
    if (s == MXP_OK) s = mxp_ckpt_apply_config(f, b, &err);
    for (int i = 0; s == MXP_OK && i < a.n_overrides; i++)
        s = mxp_config_apply_override(b, a.overrides[i], &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, &cfg, &err);
    if (s == MXP_OK && cfg.workload != MXP_WORKLOAD_GPT)
        s = mxp_error_set(&err, MXP_ERR_CONFIG,
                          "checkpoint '%s' is not a GPT run (model.workload is not gpt); "
                          "accepted: a checkpoint of `mixprec train model.workload=gpt`", ckpt);
    if (s == MXP_OK) {
        mxp_log_set_level(cfg.log_level);
        bool asked = false;
        for (int i = 0; i < a.n_overrides; i++)
            asked |= strncmp(a.overrides[i], "training.precision=", 19) == 0;
        if (cfg.precision == MXP_PRECISION_FP8 && !asked) {
            /* delayed FP8 scales need the amax history of training steps,
             * which generation does not run */
            mxp_log(MXP_LOG_INFO, "fp8 (emulated) checkpoint: sampling in mixed_bf16 "
                                  "(training.precision=fp8 to force)");
            cfg.precision = MXP_PRECISION_MIXED_BF16;
        }
        s = mxp_gpt_create_for_checkpoint(&cfg, f, &g, &err);
    }
    if (s == MXP_OK) s = mxp_ckpt_load_file(f, mxp_gpt_trainer(g), NULL, &err);
    if (s != MXP_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    out = malloc((size_t)length + 1);
    if (!out) {
        cli_error("out of memory for %.0f bytes", length);
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    s = mxp_gpt_sample(g, prompt, (int64_t)length, (float)temperature, (uint64_t)seed, out,
                       &err);
    if (s != MXP_OK) {
        cli_error("%s", err.msg);
        rc = s == MXP_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        goto done;
    }
    fputs(prompt, stdout);
    fwrite(out, 1, (size_t)length, stdout);
    fputc('\n', stdout);
    rc = CLI_EXIT_OK;
done:
    free(out);
    mxp_gpt_destroy(g);
    mxp_config_builder_destroy(b);
    mxp_st_file_destroy(f);
    return rc;
}
