/* tools/mixprec/cmd_data.c: use a model trained on user data.
 *   mixprec eval CKPT_OR_RUN_DIR [--data FILE] [--json]
 *   mixprec predict CKPT_OR_RUN_DIR --input FILE --output FILE
 *   mixprec ckpt export CKPT_OR_RUN_DIR --torch -o FILE
 * Exit codes: 0 ok; 2 input data that does not fit the model or an output
 * path that is not a regular file; 1 a checkpoint that does not load or a
 * model that fails on the data; 3 the output cannot be written.
 * All through the library's predictor (mixprec/predict.h); docs/data.md.
 */
#include "cli.h"
#include "data_cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int fail(const mxp_error *err, int code) {
    cli_error("%s", err->msg);
    return code;
}

/* The exit code of a failure on the user's data (docs/json.md "Exit codes"):
 * input that does not fit (shape, dtype, width, values, a FIFO) is a usage
 * error, 2, as for train's data.path; a model that fails on valid input
 * (non-finite outputs, out of memory) is 1. */
static int data_code(mxp_status s) {
    return s == MXP_ERR_NONFINITE || s == MXP_ERR_OUT_OF_MEMORY ? CLI_EXIT_FAIL : CLI_EXIT_USAGE;
}

/* An output path must be new or a regular file (never a device node or
 * FIFO that the write's rename would replace): 2 otherwise. */
static bool output_ok(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return true;
    cli_error("%s '%s' exists and is not a regular file; accepted: a new path or a regular file "
              "to replace",
              what, path);
    return false;
}

int cmd_eval(int argc, char **argv) {
    const char *path = NULL, *data = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: mixprec eval CKPT_OR_RUN_DIR [--data FILE] [--json]\n"
                   "Loss (and accuracy for a classifier; NLL and MSE of the mean for\n"
                   "model.head=gaussian) of a model trained on user data, on\n"
                   "the held-out split of its data.path or on every row/episode of FILE\n"
                   "(safetensors, .npz or HDF5, docs/data.md), computed in the checkpoint's\n"
                   "precision and in FP32 side by side.\n");
            return CLI_EXIT_OK;
        }
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            cli_error("eval: unexpected argument '%s'; usage: mixprec eval CKPT_OR_RUN_DIR "
                      "[--data FILE] [--json]",
                      argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    if (!path) {
        cli_error("eval: usage: mixprec eval CKPT_OR_RUN_DIR [--data FILE] [--json]");
        return CLI_EXIT_USAGE;
    }
    mxp_error err = {0};
    mxp_dataset *ds = NULL;
    if (data && mxp_dataset_read(data, &ds, &err) != MXP_OK) return fail(&err, CLI_EXIT_USAGE);
    mxp_predictor *p[2] = {NULL, NULL};
    mxp_run_eval ev[2];
    int rc = CLI_EXIT_OK;
    for (int k = 0; k < 2 && rc == CLI_EXIT_OK; k++) {
        mxp_status s;
        if (mxp_predictor_load(path, k == 0 ? -1 : (int)MXP_PRECISION_FP32, &p[k], &err) != MXP_OK)
            rc = fail(&err, CLI_EXIT_FAIL);
        else if ((s = mxp_predictor_evaluate(p[k], ds, &ev[k], &err)) != MXP_OK)
            rc = fail(&err, data_code(s));
    }
    if (rc == CLI_EXIT_OK) {
        const char *prec = mxp_precision_name((mxp_precision)mxp_predictor_precision(p[0]));
        const char *kind = mxp_dataset_kind_name(mxp_predictor_kind(p[0]));
        const char *on = data ? data : "held-out split";
        /* a Gaussian head: the loss is its NLL, the MSE of its mean beside it */
        const bool gauss = mxp_predictor_config(p[0])->head == MXP_LOSS_GAUSSIAN;
        if (json) {
            printf("{\"checkpoint\":\"%s\",\"workload\":\"%s\",\"data\":\"%s\",\"precision\":\"%s\",",
                   mxp_predictor_checkpoint(p[0]), kind, on, prec);
            cli_json_number(stdout, "loss", ev[0].loss);
            cli_json_number(stdout, "accuracy", ev[0].accuracy);
            cli_json_number(stdout, "fp32_loss", ev[1].loss);
            cli_json_number(stdout, "mse", ev[0].mse);
            cli_json_number(stdout, "fp32_mse", ev[1].mse);
            printf("\"head\":\"%s\",", gauss ? "gaussian" : "deterministic");
            if (isfinite(ev[0].bce)) { /* model.termination: accuracy is the flag's */
                cli_json_number(stdout, "bce", ev[0].bce);
                cli_json_number(stdout, "fp32_bce", ev[1].bce);
            }
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < MXP_OPEN_LOOP_N; i++) { /* world models */
                    char key[40];
                    snprintf(key, sizeof key, "%sopen_loop_k%d", k ? "fp32_" : "",
                             mxp_open_loop_horizon(i));
                    if (isfinite(ev[k].open_loop[i])) cli_json_number(stdout, key, ev[k].open_loop[i]);
                }
            printf("\"fp32_accuracy\":");
            if (isfinite(ev[1].accuracy))
                printf("%.9g}\n", ev[1].accuracy);
            else
                printf("null}\n");
        } else {
            printf("checkpoint  %s (%s)\ndata        %s\n", mxp_predictor_checkpoint(p[0]), kind,
                   on);
            const bool ol = isfinite(ev[0].open_loop[0]); /* world models */
            printf("%-10s  %-14s ", "precision", gauss ? "nll" : "loss");
            if (gauss) printf("%-14s ", "mse");
            if (ol)
                printf("open-loop error at %d / %d / %d steps\n", mxp_open_loop_horizon(0),
                       mxp_open_loop_horizon(1), mxp_open_loop_horizon(2));
            else
                printf("%s\n", gauss ? "" : "accuracy");
            for (int k = 0; k < 2; k++) {
                printf("%-10s  %-14.9g ", k ? "fp32" : prec, ev[k].loss);
                if (gauss) printf("%-14.9g ", ev[k].mse);
                if (ol)
                    printf("%.4g / %.4g / %.4g\n", ev[k].open_loop[0], ev[k].open_loop[1],
                           ev[k].open_loop[2]);
                else if (gauss)
                    printf("\n");
                else if (isfinite(ev[k].accuracy))
                    printf("%.4f\n", ev[k].accuracy);
                else
                    printf("-\n");
            }
            for (int k = 0; k < 2 && isfinite(ev[0].bce); k++) /* model.termination */
                printf("%-10s  termination bce %.9g, accuracy %.4f\n", k ? "fp32" : prec,
                       ev[k].bce, ev[k].accuracy);
        }
    }
    mxp_predictor_destroy(p[0]);
    mxp_predictor_destroy(p[1]);
    mxp_dataset_destroy(ds);
    return rc;
}

/* The arrays of d as F32 tensors of a safetensors file. */
static mxp_status write_dataset(const mxp_dataset *d, const char *path, mxp_error *err) {
    mxp_st_writer *w = NULL;
    mxp_status s = mxp_st_writer_create(&w, err);
    for (int i = 0; s == MXP_OK && i < mxp_dataset_num_arrays(d); i++) {
        const mxp_array *a = mxp_dataset_array(d, i);
        s = mxp_st_writer_add_tensor(w, a->name, MXP_DTYPE_F32, a->ndim, a->shape, a->data, err);
    }
    if (s == MXP_OK) s = mxp_st_writer_write(w, path, err);
    mxp_st_writer_destroy(w);
    return s;
}

/* The line a successful predict prints: what was written, from which
 * checkpoint ("wrote OUT: next_obs [5, 3], reward [5] (from CKPT)"). */
static void say_wrote(const char *out, const mxp_dataset *d, const mxp_predictor *p) {
    printf("wrote %s:", out);
    for (int i = 0; i < mxp_dataset_num_arrays(d); i++) {
        const mxp_array *a = mxp_dataset_array(d, i);
        printf("%s %s [", i ? "," : "", a->name);
        for (int k = 0; k < a->ndim; k++) printf("%s%lld", k ? ", " : "", (long long)a->shape[k]);
        printf("]");
    }
    printf(" (from %s)\n", mxp_predictor_checkpoint(p));
}

int cmd_predict(int argc, char **argv) {
    const char *path = NULL, *in = NULL, *out = NULL;
    const char *use = "usage: mixprec predict CKPT_OR_RUN_DIR --input FILE --output FILE";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s\n"
                   "Run a model trained on user data on inputs from safetensors/.npz/HDF5: x [N, D]\n"
                   "(world model: obs [N, S] and actions [N, A]); writes safetensors with y\n"
                   "[N, K] (classifier: logits) or next_obs [N, S] and reward [N] in the\n"
                   "data's own units. Computed in the checkpoint's precision.\n",
                   use);
            return CLI_EXIT_OK;
        }
        if (!strcmp(argv[i], "--input") && i + 1 < argc)
            in = argv[++i];
        else if (!strcmp(argv[i], "--output") && i + 1 < argc)
            out = argv[++i];
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            cli_error("predict: unexpected argument '%s'; %s", argv[i], use);
            return CLI_EXIT_USAGE;
        }
    }
    if (!path || !in || !out) {
        cli_error("predict: %s", use);
        return CLI_EXIT_USAGE;
    }
    if (!output_ok(out, "predict: --output")) return CLI_EXIT_USAGE;
    mxp_error err = {0};
    mxp_dataset *ds = NULL, *res = NULL;
    mxp_predictor *p = NULL;
    if (mxp_dataset_read(in, &ds, &err) != MXP_OK) return fail(&err, CLI_EXIT_USAGE);
    int rc = CLI_EXIT_OK;
    mxp_status s;
    if (mxp_predictor_load(path, -1, &p, &err) != MXP_OK)
        rc = fail(&err, CLI_EXIT_FAIL);
    else if ((s = mxp_predictor_predict(p, ds, &res, &err)) != MXP_OK)
        rc = fail(&err, data_code(s));
    else if ((s = write_dataset(res, out, &err)) != MXP_OK)
        rc = fail(&err, s == MXP_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_IO);
    else
        say_wrote(out, res, p);
    mxp_dataset_destroy(res);
    mxp_predictor_destroy(p);
    mxp_dataset_destroy(ds);
    return rc;
}

int cli_export_torch(int argc, char **argv) {
    const char *path = NULL, *out = NULL;
    const char *use = "usage: mixprec ckpt export CKPT_OR_RUN_DIR --torch -o FILE";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--torch"))
            continue;
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            cli_error("ckpt export --torch: unexpected argument '%s'; %s", argv[i], use);
            return CLI_EXIT_USAGE;
        }
    }
    if (!path || !out) {
        cli_error("ckpt export --torch: %s", use);
        return CLI_EXIT_USAGE;
    }
    if (!output_ok(out, "ckpt export --torch: -o")) return CLI_EXIT_USAGE;
    mxp_error err = {0};
    mxp_predictor *p = NULL;
    if (mxp_predictor_load(path, (int)MXP_PRECISION_FP32, &p, &err) != MXP_OK)
        return fail(&err, CLI_EXIT_FAIL);
    mxp_status s = mxp_predictor_export_torch(p, out, &err);
    int rc = s == MXP_OK ? CLI_EXIT_OK
                         : fail(&err, s == MXP_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_IO);
    if (rc == CLI_EXIT_OK)
        printf("wrote %s: FP32 weights as layers.<i>.weight/.bias%s (from %s); in PyTorch: "
               "mixprec.load_torch(\"%s\")\n", out,
               mxp_predictor_kind(p) == MXP_DATASET_WORLD_MODEL
                   ? ", standardisation x_mean/x_std/y_mean/y_std" : "",
               mxp_predictor_checkpoint(p), out);
    mxp_predictor_destroy(p);
    return rc;
}
