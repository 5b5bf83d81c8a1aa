/* tools/mixprec/cmd_ckpt.c: `mixprec ckpt verify|inspect|export|diff|keep|list`
 * and the config of `mixprec train --resume` (cli_resume_config; the run
 * itself resumes, saves and stops in the library: mixprec/run.h).
 *
 * Exit codes: verify 0 = every checkpoint verifies, 1 = one does not;
 * diff 0 = identical, 1 = different; 2 usage error; 3 a file could not be
 * written. Library: mixprec/ckpt.h. Format: docs/checkpoints.md.
 */
#include "cli.h"
#include "data_cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void help(FILE *f) {
    fputs("usage: mixprec ckpt <command> ...\n"
          "\n"
          "  verify FILE|DIR [--quiet] [--json]\n"
          "                             header, bounds, checksums, dtypes (master weights\n"
          "                             F32), finite values, and shapes against the\n"
          "                             checkpoint's config; exit 0 only if all pass\n"
          "  inspect FILE|DIR [--json]  metadata and a per-tensor table: name, dtype,\n"
          "                             shape, min, max, percent non-finite (DIR: its\n"
          "                             latest checkpoint, named in the output)\n"
          "  export FILE --dtype bf16|fp16|fp32|f8_e4m3|f8_e5m2 -o OUT\n"
          "  export CKPT_OR_RUN_DIR --torch -o OUT   (user-data models: state_dict + stats)\n"
          "                             the model weights for inference (RNE)\n"
          "  diff A B                   per-tensor max |a-b| and max relative difference;\n"
          "                             exit 0 identical, 1 different\n"
          "  keep FILE [--off]          mark a checkpoint to survive retention\n"
          "  list DIR [--json]          the checkpoints of DIR, oldest first\n"
          "\n"
          "DIR may be a run directory (with a checkpoints/ subdirectory) or the\n"
          "checkpoint directory itself. --json: one JSON object on stdout\n"
          "(schemas mixprec.ckpt_verify/1, mixprec.ckpt_inspect/1, mixprec.ckpt_list/1;\n"
          "docs/json.md), numbers as numbers.\n",
          f);
}

/* DIR/checkpoints when it exists, else DIR. */
static void ckpt_dir_of(const char *dir, char *out, size_t n) {
    struct stat st;
    snprintf(out, n, "%s/checkpoints", dir);
    if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(out, n, "%s", dir);
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void shape_str(const mxp_st_tensor *t, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* The model a checkpoint's stored config describes (world model only). */
static mxp_status model_of(const mxp_st_file *f, const mxp_ckpt_info *info, mxp_model **out,
                           char *why, size_t why_n) {
    *out = NULL;
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    mxp_status s = mxp_config_builder_create(&b, &err);
    if (s == MXP_OK) s = mxp_ckpt_apply_config(f, b, &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, &cfg, &err);
    mxp_config_builder_destroy(b);
    if (s != MXP_OK) {
        snprintf(why, why_n, "%s", err.msg);
        return s;
    }
    /* a run on user data: the model its workload_meta describes (checked,
     * and sized from the file) */
    mxp_model_spec spec;
    s = mxp_predictor_file_spec(f, 1, &spec, &err);
    if (s == MXP_ERR_UNSUPPORTED && cfg.workload != MXP_WORKLOAD_WORLD_MODEL) {
        snprintf(why, why_n, "shapes not checked: neither a run on user data nor the built-in "
                 "world model");
        return MXP_ERR_UNSUPPORTED;
    }
    if (s == MXP_ERR_UNSUPPORTED) { /* the built-in world model */
        const mxp_env_info *env = mxp_env_info_get(cfg.data.env);
        int64_t in = env->state_dim + env->action_dim, outd = env->state_dim + 1;
        spec = mxp_model_spec_mlp(in, cfg.hidden, (int)cfg.depth, outd, cfg.activation,
                                  cfg.layernorm, MXP_LOSS_MSE, 1);
        /* sized from the file before anything is allocated (an 8 KB file must
         * not make us build a 4096-wide model), and without gradients */
        s = mxp_ckpt_check_spec(f, &spec, &err);
    }
    mxp_precision_policy pol;
    mxp_precision_policy_default(info->precision, &pol);
    if (s == MXP_OK) s = mxp_model_create_inference(&spec, &pol, 0, out, &err);
    if (s != MXP_OK) snprintf(why, why_n, "%s", err.msg);
    return s;
}

/* Verify one file; print a line (or append an object to the JSON array
 * out); true when it passes. */
/* `ckpt export` output (format mixprec-weights): checksums and finite
 * values; *what names it for the report. */
static mxp_status verify_weights(const mxp_st_file *f, mxp_ckpt_info *info, char *what,
                                 size_t n, mxp_error *err) {
    memset(info, 0, sizeof *info);
    const char *st = mxp_st_file_meta(f, "source_step");
    info->step = st ? strtoll(st, NULL, 10) : -1;
    info->healthy = true;
    mxp_status s = mxp_st_file_verify(f, err);
    if (s != MXP_OK) return s;
    for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
        const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
        for (size_t k = 0; k < t->numel; k++)
            if (!isfinite(mxp_st_tensor_get(t, k)))
                return mxp_error_set(err, MXP_ERR_NONFINITE, "tensor %s: element %zu is not "
                                     "finite", t->name, k);
    }
    const char *dt = mxp_st_file_meta(f, "dtype");
    snprintf(what, n, "exported weights (%s), checksums and values ok", dt ? dt : "?");
    return MXP_OK;
}

static bool verify_one(const char *path, bool quiet, json_t *out) {
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    mxp_ckpt_info info;
    memset(&info, 0, sizeof info);
    mxp_status s = mxp_st_file_read(path, &f, &err);
    if (s == MXP_ERR_FORMAT) { /* say what the file is not before why */
        char why[MXP_ERROR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err.msg);
        mxp_error_set(&err, MXP_ERR_FORMAT, "not a safetensors file: %s", why);
    }
    const char *fmt = s == MXP_OK ? mxp_st_file_meta(f, "format") : NULL;
    const bool weights = fmt && strcmp(fmt, "mixprec-weights") == 0;
    char note[MXP_ERROR_MSG_MAX + 16] = "";
    if (s == MXP_OK && weights)
        s = verify_weights(f, &info, note, sizeof note, &err);
    else if (s == MXP_OK)
        s = mxp_ckpt_check(f, NULL, &info, &err);
    if (s == MXP_OK && !weights) {
        mxp_model *m = NULL;
        char why[MXP_ERROR_MSG_MAX];
        mxp_status ms = model_of(f, &info, &m, why, sizeof why);
        if (ms == MXP_OK) {
            s = mxp_ckpt_check(f, m, &info, &err);
            snprintf(note, sizeof note, ", shapes match the config");
        } else if (ms == MXP_ERR_UNSUPPORTED || !mxp_ckpt_config_text(f)) {
            snprintf(note, sizeof note, " (%s)",
                     mxp_ckpt_config_text(f) ? why : "no config recorded");
        } else {
            s = mxp_error_set(&err, MXP_ERR_FORMAT, "%s: stored config: %s", path, why);
        }
        mxp_model_destroy(m);
    }
    mxp_st_file_destroy(f);
    if (out) {
        json_t *e = json_object();
        json_object_set_new(e, "path", json_string(path));
        json_object_set_new(e, "ok", json_boolean(s == MXP_OK));
        json_object_set_new(e, "error", s == MXP_OK ? json_null() : json_string(err.msg));
        json_object_set_new(e, "step", s == MXP_OK ? json_integer(info.step) : json_null());
        json_object_set_new(e, "precision", s == MXP_OK && !weights
                                                ? json_string(mxp_precision_name(info.precision))
                                                : json_null());
        json_object_set_new(e, "kind", json_string(weights ? "weights" : "checkpoint"));
        json_object_set_new(e, "healthy", s == MXP_OK ? json_boolean(info.healthy) : json_null());
        json_object_set_new(e, "note", json_string(note[0] == ',' ? note + 2 : note));
        json_array_append_new(out, e);
        return s == MXP_OK;
    }
    if (s != MXP_OK) {
        printf("FAIL %s\n", err.msg);
        return false;
    }
    if (!quiet && weights)
        printf("ok   %s: step %lld, %s\n", path, (long long)info.step, note);
    else if (!quiet)
        printf("ok   %s: step %lld, %s, %s%s\n", path, (long long)info.step,
               mxp_precision_name(info.precision), info.healthy ? "healthy" : "UNHEALTHY", note);
    return true;
}

/* The JSON document of `ckpt verify --json`: every file and the verdict. */
static int verify_json_end(json_t *arr, const char *dir_error) {
    size_t bad = 0, n = json_array_size(arr);
    for (size_t i = 0; i < n; i++)
        bad += !json_is_true(json_object_get(json_array_get(arr, i), "ok"));
    json_t *j = json_object();
    json_object_set_new(j, "schema", json_string("mixprec.ckpt_verify/1"));
    json_object_set_new(j, "ok", json_boolean(bad == 0 && !dir_error && n > 0));
    json_object_set_new(j, "error", dir_error ? json_string(dir_error) : json_null());
    json_object_set_new(j, "checked", json_integer((json_int_t)n));
    json_object_set_new(j, "failed", json_integer((json_int_t)bad));
    json_object_set_new(j, "checkpoints", arr);
    cli_json_print(j);
    json_decref(j);
    cli_json_errors(false); /* the verdict is the JSON above */
    return bad == 0 && !dir_error && n > 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

static int ckpt_verify(int argc, char **argv) {
    const char *target = NULL;
    bool quiet = false;
    json_t *arr = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && !arr)
            arr = json_array();
        else if (!strcmp(argv[i], "--quiet"))
            quiet = true;
        else if (!target && argv[i][0] != '-')
            target = argv[i];
        else {
            cli_error("ckpt verify: unexpected argument '%s'; usage: ckpt verify FILE|DIR "
                      "[--quiet] [--json]",
                      argv[i]);
            json_decref(arr);
            return CLI_EXIT_USAGE;
        }
    }
    if (!target) {
        cli_error("ckpt verify: FILE or DIR required");
        json_decref(arr);
        return CLI_EXIT_USAGE;
    }
    if (!is_dir(target)) {
        bool ok = verify_one(target, quiet, arr);
        if (arr) return verify_json_end(arr, NULL);
        return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    char dir[MXP_CKPT_PATH_MAX];
    ckpt_dir_of(target, dir, sizeof dir);
    mxp_ckpt_entry *e = NULL;
    size_t n = 0;
    mxp_error err = {0};
    if (mxp_ckpt_list(dir, &e, &n, &err) != MXP_OK) {
        if (arr) return verify_json_end(arr, err.msg);
        printf("FAIL %s\n", err.msg);
        return CLI_EXIT_FAIL;
    }
    if (n == 0) {
        char msg[MXP_CKPT_PATH_MAX + 64];
        snprintf(msg, sizeof msg, "%s: no checkpoints (ckpt-*.safetensors)", dir);
        mxp_free(e);
        if (arr) return verify_json_end(arr, msg);
        printf("FAIL %s\n", msg);
        return CLI_EXIT_FAIL;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !verify_one(e[i].path, quiet, arr);
    if (arr) {
        mxp_free(e);
        return verify_json_end(arr, NULL);
    }
    if (!quiet) printf("%zu of %zu checkpoints verify\n", n - bad, n);
    mxp_free(e);
    return bad ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* ---- inspect ------------------------------------------------------------- */

static void json_str(FILE *o, const char *s) {
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

static void json_num(FILE *o, double v) {
    if (isfinite(v))
        fprintf(o, "%.9g", v);
    else
        fputs("null", o);
}

typedef struct tstats {
    double min, max;
    size_t nonfinite;
} tstats;

static tstats stats_of(const mxp_st_tensor *t) {
    tstats s = {INFINITY, -INFINITY, 0};
    for (size_t i = 0; i < t->numel; i++) {
        float v = mxp_st_tensor_get(t, i);
        if (!isfinite(v)) {
            s.nonfinite++;
            continue;
        }
        if (v < s.min) s.min = v;
        if (v > s.max) s.max = v;
    }
    if (s.nonfinite == t->numel) s.min = s.max = NAN;
    return s;
}

/* `ckpt inspect DIR`: the newest checkpoint (by step) of DIR/checkpoints
 * (a run directory) or of DIR itself into path; false (message printed)
 * when it holds none. Newest by step, verified or not: inspect shows the
 * integrity of what it reads. */
static bool inspect_latest(const char *target, char *path, size_t n, char *dir, size_t dn,
                           size_t *count) {
    ckpt_dir_of(target, dir, dn);
    mxp_ckpt_entry *e = NULL;
    mxp_error err = {0};
    *count = 0;
    if (mxp_ckpt_list(dir, &e, count, &err) != MXP_OK) {
        cli_error("ckpt inspect: %s", err.msg);
        return false;
    }
    if (*count == 0) {
        cli_error("ckpt inspect: %s holds no checkpoint (ckpt-<step>.safetensors); accepted: a "
                  "checkpoint file, or a run directory or checkpoint directory holding one",
                  dir);
        mxp_free(e);
        return false;
    }
    snprintf(path, n, "%s", e[*count - 1].path);
    mxp_free(e);
    return true;
}

static int ckpt_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            cli_error("ckpt inspect: unexpected argument '%s'; usage: ckpt inspect FILE|DIR "
                      "[--json]",
                      argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    if (!path) {
        cli_error("ckpt inspect: FILE or DIR required");
        return CLI_EXIT_USAGE;
    }
    char latest[MXP_CKPT_PATH_MAX], dir[MXP_CKPT_PATH_MAX];
    size_t count = 0;
    const bool from_dir = is_dir(path);
    if (from_dir) {
        if (!inspect_latest(path, latest, sizeof latest, dir, sizeof dir, &count))
            return CLI_EXIT_FAIL;
        path = latest;
    }
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    if (mxp_st_file_read(path, &f, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    mxp_error verr = {0};
    bool integrity = mxp_st_file_verify(f, &verr) == MXP_OK;
    FILE *o = stdout;
    if (json) {
        fputs("{\"file\":", o);
        json_str(o, path);
        if (from_dir) { /* which checkpoint of which directory */
            fputs(",\"dir\":", o);
            json_str(o, dir);
            fprintf(o, ",\"dir_checkpoints\":%zu", count);
        }
        fprintf(o, ",\"schema\":\"mixprec.ckpt_inspect/1\",\"bytes\":%zu,\"checksums_ok\":%s,"
                   "\"metadata\":{", mxp_st_file_size(f), integrity ? "true" : "false");
        /* safetensors metadata values are strings; numbers, booleans and
         * JSON objects among them come out typed */
        for (int i = 0; i < mxp_st_file_num_meta(f); i++) {
            if (i) fputc(',', o);
            json_str(o, mxp_st_file_meta_key(f, i));
            fputc(':', o);
            json_t *v = cli_json_typed(mxp_st_file_meta_value(f, i));
            char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
            fputs(t ? t : "null", o);
            free(t);
            json_decref(v);
        }
        fputs("},\"tensors\":[", o);
    } else {
        if (from_dir)
            fprintf(o, "latest of %zu checkpoint%s in %s:\n", count, count == 1 ? "" : "s",
                    dir);
        fprintf(o, "file: %s (%zu bytes)\nintegrity: %s\n", path, mxp_st_file_size(f),
                integrity ? "ok (crc32c of header and every tensor)" : verr.msg);
        for (int i = 0; i < mxp_st_file_num_meta(f); i++) {
            const char *k = mxp_st_file_meta_key(f, i);
            if (!strcmp(k, "checksums") || !strcmp(k, "config")) continue;
            fprintf(o, "%-16s %s\n", k, mxp_st_file_meta_value(f, i));
        }
        const char *cfg = mxp_st_file_meta(f, "config");
        if (cfg) fprintf(o, "%-16s %s\n", "config", cfg);
        fprintf(o, "\n%-32s %-8s %-14s %14s %14s %10s\n", "name", "dtype", "shape", "min", "max",
                "nonfinite%");
    }
    for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
        const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
        tstats s = stats_of(t);
        char shape[96];
        shape_str(t, shape, sizeof shape);
        double pct = t->numel ? 100.0 * (double)s.nonfinite / (double)t->numel : 0.0;
        const char *dt = mxp_dtype_info(t->dtype)->st_name;
        if (json) {
            if (i) fputc(',', o);
            fputs("{\"name\":", o);
            json_str(o, t->name);
            fprintf(o, ",\"dtype\":\"%s\",\"shape\":[", dt);
            for (int d = 0; d < t->ndim; d++)
                fprintf(o, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            fputs("],\"min\":", o);
            json_num(o, s.min);
            fputs(",\"max\":", o);
            json_num(o, s.max);
            fprintf(o, ",\"nonfinite_pct\":%.6g,\"numel\":%zu}", pct, t->numel);
        } else {
            fprintf(o, "%-32s %-8s %-14s %14.7g %14.7g %10.4f\n", t->name, dt, shape, s.min, s.max,
                    pct);
        }
    }
    if (json) fputs("]}\n", o);
    mxp_st_file_destroy(f);
    return CLI_EXIT_OK;
}

/* ---- export ----------------------------------------------------------------- */

static int ckpt_export(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--torch")) return cli_export_torch(argc, argv);
    const char *path = NULL, *out = NULL, *dts = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
            dts = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else {
            cli_error("ckpt export: unexpected argument '%s'; usage: ckpt export FILE --dtype "
                      "bf16|fp16|fp32 -o OUT",
                      argv[i]);
            return CLI_EXIT_USAGE;
        }
    }
    mxp_dtype dt;
    if (!path || !out || !dts || mxp_dtype_parse(dts, &dt, NULL) != MXP_OK) {
        cli_error("ckpt export: usage: ckpt export FILE --dtype bf16|fp16|fp32|f8_e4m3|f8_e5m2 "
                  "-o OUT%s%s",
                  dts ? "; got --dtype " : "", dts ? dts : "");
        return CLI_EXIT_USAGE;
    }
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    mxp_ckpt_info info;
    mxp_status s = mxp_st_file_read(path, &f, &err);
    if (s == MXP_OK) s = mxp_ckpt_check(f, NULL, &info, &err);
    if (s != MXP_OK) {
        cli_error("%s", err.msg);
        mxp_st_file_destroy(f);
        return CLI_EXIT_FAIL;
    }
    mxp_st_writer *w = NULL;
    s = mxp_st_writer_create(&w, &err);
    int n = mxp_st_file_num_tensors(f);
    void **bufs = calloc((size_t)n + 1, sizeof *bufs);
    char text[64];
    for (int i = 0; s == MXP_OK && i < n; i++) {
        const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
        if (!strncmp(t->name, "optim.", 6)) continue;
        size_t esz = mxp_dtype_info(dt)->size;
        bufs[i] = malloc(t->numel * esz + 1);
        for (size_t e = 0; bufs[i] && e < t->numel; e++) {
            float v = mxp_st_tensor_get(t, e);
            mxp_store_f32(dt, bufs[i], e, v);
            if (!isfinite(mxp_load_f32(dt, bufs[i], e))) {
                s = mxp_error_set(&err, MXP_ERR_NONFINITE,
                                  "%s: tensor '%s' element %zu = %g overflows %s (max %g)", path,
                                  t->name, e, (double)v, mxp_dtype_name(dt),
                                  mxp_dtype_info(dt)->max);
                break;
            }
        }
        if (s == MXP_OK)
            s = mxp_st_writer_add_tensor(w, t->name, dt, t->ndim, t->shape, bufs[i], &err);
    }
    snprintf(text, sizeof text, "%lld", (long long)info.step);
    if (s == MXP_OK) s = mxp_st_writer_add_meta(w, "format", "mixprec-weights", &err);
    if (s == MXP_OK) s = mxp_st_writer_add_meta(w, "source_step", text, &err);
    if (s == MXP_OK)
        s = mxp_st_writer_add_meta(w, "source_precision", mxp_precision_name(info.precision), &err);
    if (s == MXP_OK) s = mxp_st_writer_add_meta(w, "dtype", mxp_dtype_info(dt)->st_name, &err);
    if (s == MXP_OK && mxp_ckpt_config_text(f))
        s = mxp_st_writer_add_meta(w, "config", mxp_ckpt_config_text(f), &err);
    bool write_failed = false;
    if (s == MXP_OK) {
        s = mxp_st_writer_write(w, out, &err);
        write_failed = s != MXP_OK;
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    mxp_st_writer_destroy(w);
    mxp_st_file_destroy(f);
    if (s != MXP_OK) {
        cli_error("%s", err.msg);
        /* an -o that names a device or FIFO is a usage error, never replaced */
        return write_failed ? (s == MXP_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_IO)
                            : CLI_EXIT_FAIL;
    }
    printf("wrote %s: model weights of step %lld as %s\n", out, (long long)info.step,
           mxp_dtype_info(dt)->st_name);
    return CLI_EXIT_OK;
}

/* ---- diff ------------------------------------------------------------------- */

static int ckpt_diff(int argc, char **argv) {
    if (argc != 3) {
        cli_error("ckpt diff: usage: ckpt diff A B");
        return CLI_EXIT_USAGE;
    }
    mxp_error err = {0};
    mxp_st_file *a = NULL, *b = NULL;
    if (mxp_st_file_read(argv[1], &a, &err) != MXP_OK ||
        mxp_st_file_read(argv[2], &b, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        mxp_st_file_destroy(a);
        return CLI_EXIT_USAGE;
    }
    for (int k = 0; k < 2; k++) {
        mxp_st_file *f = k ? b : a;
        if (mxp_st_file_verify(f, &err) != MXP_OK) printf("warning: %s\n", err.msg);
    }
    printf("%-32s %14s %14s %12s\n", "name", "max_abs", "max_rel", "n_differ");
    bool differ = false;
    for (int i = 0; i < mxp_st_file_num_tensors(a); i++) {
        const mxp_st_tensor *ta = mxp_st_file_tensor(a, i), *tb = mxp_st_file_find(b, ta->name);
        if (!tb) {
            printf("%-32s only in %s\n", ta->name, argv[1]);
            differ = true;
            continue;
        }
        bool same_shape = ta->ndim == tb->ndim;
        for (int d = 0; same_shape && d < ta->ndim; d++) same_shape = ta->shape[d] == tb->shape[d];
        if (!same_shape) {
            char sa[96], sb[96];
            shape_str(ta, sa, sizeof sa);
            shape_str(tb, sb, sizeof sb);
            printf("%-32s shape %s vs %s\n", ta->name, sa, sb);
            differ = true;
            continue;
        }
        double max_abs = 0, max_rel = 0;
        size_t nd = 0;
        for (size_t e = 0; e < ta->numel; e++) {
            double x = mxp_st_tensor_get(ta, e), y = mxp_st_tensor_get(tb, e);
            if (x == y || (isnan(x) && isnan(y))) continue;
            nd++;
            double d = fabs(x - y), m = fmax(fabs(x), fabs(y));
            if (!(d <= max_abs)) max_abs = d; /* NaN or Inf differences propagate */
            double r = m > 0 ? d / m : INFINITY;
            if (!(r <= max_rel)) max_rel = r;
        }
        differ |= nd > 0;
        printf("%-32s %14.6g %14.6g %12zu%s\n", ta->name, max_abs, max_rel, nd,
               ta->dtype != tb->dtype ? "  (dtypes differ)" : "");
    }
    for (int i = 0; i < mxp_st_file_num_tensors(b); i++) {
        const mxp_st_tensor *tb = mxp_st_file_tensor(b, i);
        if (!mxp_st_file_find(a, tb->name)) {
            printf("%-32s only in %s\n", tb->name, argv[2]);
            differ = true;
        }
    }
    mxp_st_file_destroy(a);
    mxp_st_file_destroy(b);
    return differ ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* ---- keep / list -------------------------------------------------------------- */

static int ckpt_keep(int argc, char **argv) {
    bool off = argc == 3 && !strcmp(argv[2], "--off");
    if (argc < 2 || argc > 3 || (argc == 3 && !off)) {
        cli_error("ckpt keep: usage: ckpt keep FILE [--off]");
        return CLI_EXIT_USAGE;
    }
    mxp_error err = {0};
    if (mxp_ckpt_mark_keep(argv[1], !off, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return CLI_EXIT_IO;
    }
    printf("%s: %s\n", argv[1], off ? "no longer kept" : "kept by retention");
    return CLI_EXIT_OK;
}

static int ckpt_list(int argc, char **argv) {
    const bool json = argc == 3 && !strcmp(argv[2], "--json");
    if (argc != 2 && !json) {
        cli_error("ckpt list: usage: ckpt list DIR [--json]");
        return CLI_EXIT_USAGE;
    }
    char dir[MXP_CKPT_PATH_MAX];
    ckpt_dir_of(argv[1], dir, sizeof dir);
    mxp_ckpt_entry *e = NULL;
    size_t n = 0;
    mxp_error err = {0};
    if (mxp_ckpt_list(dir, &e, &n, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    json_t *arr = json ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        long long sz = stat(e[i].path, &st) == 0 ? (long long)st.st_size : -1;
        if (arr) {
            json_t *c = json_object();
            json_object_set_new(c, "step", json_integer(e[i].step));
            json_object_set_new(c, "bytes", sz >= 0 ? json_integer(sz) : json_null());
            json_object_set_new(c, "path", json_string(e[i].path));
            json_object_set_new(c, "keep", json_boolean(e[i].keep));
            json_array_append_new(arr, c);
            continue;
        }
        printf("%12lld  %12lld bytes  %s%s\n", (long long)e[i].step, sz, e[i].path,
               e[i].keep ? "  [keep]" : "");
    }
    if (arr) {
        json_t *j = json_object();
        json_object_set_new(j, "schema", json_string("mixprec.ckpt_list/1"));
        json_object_set_new(j, "dir", json_string(dir));
        json_object_set_new(j, "checkpoints", arr);
        cli_json_print(j);
        json_decref(j);
    }
    mxp_free(e);
    return CLI_EXIT_OK;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    cli_install_logger();
    const char *v = argv[1];
    if (!strcmp(v, "verify")) return ckpt_verify(argc - 1, argv + 1);
    if (!strcmp(v, "inspect")) return ckpt_inspect(argc - 1, argv + 1);
    if (!strcmp(v, "export")) return ckpt_export(argc - 1, argv + 1);
    if (!strcmp(v, "diff")) return ckpt_diff(argc - 1, argv + 1);
    if (!strcmp(v, "keep")) return ckpt_keep(argc - 1, argv + 1);
    if (!strcmp(v, "list")) return ckpt_list(argc - 1, argv + 1);
    cli_error("unknown ckpt command '%s'; accepted: verify, inspect, export, diff, keep, list", v);
    return CLI_EXIT_USAGE;
}

/* ---- `mixprec train --resume`: the config of the checkpoint to continue -------- */

/* The per-rank batch that continues f's train() call in progress on world
 * ranks into buf; false when no call is in progress or it does not divide. */
static bool resumed_batch(const char *file, int world, char *buf, size_t n) {
    mxp_st_file *f = NULL;
    mxp_ckpt_info info;
    bool ok = mxp_st_file_read(file, &f, NULL) == MXP_OK &&
              mxp_ckpt_read_info(f, &info, NULL) == MXP_OK && info.pos.run_total > 0 &&
              info.pos.run_step < info.pos.run_total && world > 0 &&
              info.pos.batch_size % world == 0;
    if (ok) snprintf(buf, n, "training.batch_size=%lld", (long long)(info.pos.batch_size / world));
    mxp_st_file_destroy(f);
    return ok;
}

int cli_resume_config(const cli_config_args *a, const char *resume, int world, char *ckpt,
                      size_t n, mxp_config *cfg) {
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    char file[MXP_CKPT_PATH_MAX] = "", batch[64];
    mxp_status s = mxp_config_builder_create(&b, &err);
    if (s == MXP_OK) s = mxp_run_resume_config(resume, b, file, sizeof file, &err);
    if (s == MXP_OK && ckpt && n) snprintf(ckpt, n, "%s", file);
    if (s == MXP_OK && resumed_batch(file, world, batch, sizeof batch))
        s = mxp_config_apply_override(b, batch, &err);
    if (s == MXP_OK && a->config_path) s = mxp_config_apply_file(b, a->config_path, &err);
    if (s == MXP_OK) s = mxp_config_apply_env(b, NULL, &err);
    for (int i = 0; s == MXP_OK && i < a->n_overrides; i++)
        s = mxp_config_apply_override(b, a->overrides[i], &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, &err);
    mxp_config_builder_destroy(b);
    if (s != MXP_OK) {
        cli_error("--resume %s: %s", resume, err.msg);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}
