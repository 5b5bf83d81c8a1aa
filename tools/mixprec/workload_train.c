/* tools/mixprec/workload_train.c: `mixprec train` for model.workload =
 * classifier | gpt (the world model stays in cmd_train.c).
 *
 * Same shape as the world model's run: progress (bar on a terminal, log
 * lines otherwise), a summary on stdout (JSON with --json), and
 * OUTPUT_DIR/summary.json + OUTPUT_DIR/history.csv. The summary names the
 * workload and its evaluation (classifier: test loss and accuracy on the
 * Fashion-MNIST test split; gpt: held-out loss and bits per character),
 * and says "emulated" for FP8.
 */
#include "workload_train.h"

#include "doctor.h"
#include "obs_glue.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/ckpt.h>
#include <mixprec/classifier.h>
#include <mixprec/gpt.h>

/* What one run produced. eval_accuracy is NaN when the workload has none;
 * eval_bpc NaN when it is not a language model. */
typedef struct wl_summary {
    const char *workload, *eval_name;
    mxp_train_stats stats;
    bool emulated;
    double train_loss, eval_loss, eval_accuracy, eval_bpc, wall_s, samples_per_s;
    int64_t samples, params;
    mxp_model_memory mem;
    size_t mem_optimizer; /* optimizer state bytes (AdamW m + v, SGD momentum) */
    mxp_trainer *tr;      /* for the per-layer FP32 override (borrowed) */
} wl_summary;

size_t workload_optimizer_bytes(mxp_trainer *tr) {
    float *m = NULL, *v = NULL;
    size_t n = 0;
    int64_t t = 0;
    mxp_trainer_optim_state(tr, &m, &v, &n, &t);
    return ((m ? n : 0) + (v ? n : 0)) * sizeof(float);
}

static void json_memory(FILE *f, const mxp_model_memory *mem, size_t optimizer) {
    fprintf(f, "\"memory_bytes\":{\"params\":%zu,\"master\":%zu,\"grads\":%zu,"
               "\"optimizer\":%zu,\"activations\":%zu},",
            mem->params, mem->master, mem->grads, optimizer, mem->activations);
}

void workload_json_memory(FILE *f, mxp_trainer *tr) {
    mxp_model_memory mem;
    mxp_model_memory_usage(mxp_trainer_model(tr), &mem);
    json_memory(f, &mem, workload_optimizer_bytes(tr));
}

/* "fp32_layers":"<as configured>","fp32_layers_kept":[<model layer indices>],
 * the per-layer FP32 override (training.precision_fp32_layers); kept is
 * empty in fp32 mode, where every layer is FP32 anyway; then
 * "fp16_accumulate":"fp32"|"fp16 (emulated), k=<k>". */
void workload_json_fp32_layers(FILE *f, const mxp_config *cfg, mxp_trainer *tr) {
    char txt[256];
    mxp_fp32_layers_format(&cfg->fp32_layers, txt, sizeof txt);
    const uint64_t kept = mxp_model_fp32_layers(mxp_trainer_model(tr));
    fprintf(f, "\"fp32_layers\":\"%s\",\"fp32_layers_kept\":[", txt);
    const char *sep = "";
    for (int l = 0; l < 64; l++)
        if (kept >> l & 1) {
            fprintf(f, "%s%d", sep, l);
            sep = ",";
        }
    fprintf(f, "],");
    /* training.fp16_accumulate as the model runs it at the end (a precision
     * fallback out of fp16 drops it) */
    const int acc_k = mxp_model_policy(mxp_trainer_model(tr))->fp16_accum_k;
    if (acc_k > 0)
        fprintf(f, "\"fp16_accumulate\":\"fp16 (emulated), k=%d\",", acc_k);
    else
        fprintf(f, "\"fp16_accumulate\":\"fp32\",");
}

static void write_json(FILE *f, const mxp_config *cfg, const wl_summary *s) {
    fprintf(f,
            "{\"workload\":\"%s\",\"precision\":\"%s\",\"emulated\":%s,\"kill_switch\":%s,"
            "\"fp16_enabled_runtime\":%s,\"training_steps\":%lld,\"optimizer_steps\":%lld,"
            "\"skipped_steps\":%lld,\"overflow_rate\":%.6g,\"current_scale\":%.9g,"
            "\"epochs\":%lld,\"batch_size\":%lld,\"grad_accum_steps\":%lld,\"seed\":%llu,"
            "\"params\":%lld,",
            s->workload, mxp_precision_name(s->stats.precision), s->emulated ? "true" : "false",
            cfg->kill_switch ? "true" : "false",
            s->stats.fp16_enabled_runtime ? "true" : "false",
            (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
            (long long)s->stats.skipped_steps, s->stats.overflow_rate,
            (double)s->stats.current_scale, (long long)cfg->epochs, (long long)cfg->batch_size,
            (long long)cfg->grad_accum_steps, (unsigned long long)cfg->seed,
            (long long)s->params);
    json_memory(f, &s->mem, s->mem_optimizer);
    if (s->tr) workload_json_fp32_layers(f, cfg, s->tr);
    cli_json_number(f, "final_train_loss", s->train_loss);
    char key[64];
    snprintf(key, sizeof key, "%s_loss", s->eval_name);
    cli_json_number(f, key, s->eval_loss);
    snprintf(key, sizeof key, "%s_accuracy", s->eval_name);
    if (!isnan(s->eval_accuracy)) cli_json_number(f, key, s->eval_accuracy);
    snprintf(key, sizeof key, "%s_bits_per_char", s->eval_name);
    if (!isnan(s->eval_bpc)) cli_json_number(f, key, s->eval_bpc);
    fprintf(f, "\"wall_time_s\":%.6g,\"samples\":%lld,\"samples_per_s\":%.6g}\n", s->wall_s,
            (long long)s->samples, s->samples_per_s);
}

static void print_summary(const wl_summary *s) {
    printf("workload         %s\n", s->workload);
    printf("precision        %s%s%s\n", mxp_precision_name(s->stats.precision),
           s->emulated ? " (emulated: FP8 quantise, FP32 compute)" : "",
           s->stats.fp16_enabled_runtime ? " (fp16 compute)" : "");
    printf("steps            %lld (optimizer %lld, skipped %lld)\n",
           (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
           (long long)s->stats.skipped_steps);
    printf("overflow rate    %.2f%%\n", 100.0 * s->stats.overflow_rate);
    printf("loss scale       %g\n", (double)s->stats.current_scale);
    printf("final train loss %.6f\n", s->train_loss);
    printf("%-16s %.6f\n", strcmp(s->eval_name, "test") == 0 ? "test loss" : "validation loss",
           s->eval_loss);
    if (!isnan(s->eval_accuracy)) printf("test accuracy    %.2f%%\n", 100.0 * s->eval_accuracy);
    if (!isnan(s->eval_bpc)) printf("bits per char    %.4f\n", s->eval_bpc);
    printf("wall time        %.3f s\n", s->wall_s);
    printf("samples/s        %.0f\n", s->samples_per_s);
}

static void write_json_any(FILE *f, const mxp_config *cfg, const void *s) {
    write_json(f, cfg, s);
}

static int fail_code(const mxp_error *err) {
    return err->status == MXP_ERR_CONFIG || err->status == MXP_ERR_INVALID_ARG ||
                   err->status == MXP_ERR_IO || err->status == MXP_ERR_FORMAT ||
                   err->status == MXP_ERR_UNSUPPORTED
               ? CLI_EXIT_USAGE
               : CLI_EXIT_FAIL;
}

/* Fill the fields every workload shares from its trainer. */
static void finish_summary(wl_summary *s, mxp_trainer *tr, const obs_glue_progress *ps) {
    mxp_trainer_stats(tr, &s->stats);
    s->tr = tr;
    mxp_model *m = mxp_trainer_model(tr);
    s->emulated = mxp_model_policy(m)->emulated;
    s->params = (int64_t)mxp_model_num_params(m);
    mxp_model_memory_usage(m, &s->mem);
    s->mem_optimizer = workload_optimizer_bytes(tr);
    s->train_loss = ps->base.loss_n ? ps->base.last_epoch_loss : NAN;
    s->samples_per_s = s->wall_s > 0 ? (double)s->samples / s->wall_s : 0;
}

static int emit(const mxp_config *cfg, const wl_summary *s, const mxp_trainer *tr, bool json) {
    if (json)
        write_json(stdout, cfg, s);
    else
        print_summary(s);
    return cli_write_run_outputs(cfg, tr, write_json_any, s);
}

static int run_classifier(const mxp_config *cfg, obs_glue_progress *ps, wl_summary *s, bool json) {
    mxp_error err = {0};
    mxp_classifier *cl = NULL;
    if (mxp_classifier_create(cfg, &cl, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return fail_code(&err);
    }
    mxp_log(MXP_LOG_INFO, "training classifier: precision %s%s, %lld epochs, batch %lld",
            mxp_precision_name(mxp_model_policy(mxp_classifier_model(cl))->mode),
            cfg->precision == MXP_PRECISION_FP8 ? " (emulated)" : "", (long long)cfg->epochs,
            (long long)cfg->batch_size);
    mxp_classifier_set_progress(cl, obs_glue_on_progress, ps);
    obs_glue_run orun = {mxp_classifier_trainer(cl), mxp_classifier_guard(cl),
                         mxp_classifier_samples_per_epoch(cl)};
    int rc = obs_glue_open(cfg, &orun, &ps->obs);
    if (rc != CLI_EXIT_OK) {
        mxp_classifier_destroy(cl);
        return rc;
    }
    double t0 = mxp_time_now();
    mxp_status st = mxp_classifier_train(cl, cfg->epochs, &err);
    s->wall_s = mxp_time_now() - t0;
    if (st == MXP_OK) st = mxp_classifier_evaluate(cl, &s->eval_loss, &s->eval_accuracy, &err);
    if (st != MXP_OK) {
        cli_error("training failed: %s", err.msg);
        obs_glue_close(ps->obs, false, false, err.msg, NAN);
        mxp_classifier_destroy(cl);
        return CLI_EXIT_FAIL;
    }
    s->workload = "classifier";
    s->eval_name = "test";
    s->eval_bpc = NAN;
    s->samples = mxp_classifier_samples_per_epoch(cl) * cfg->epochs;
    finish_summary(s, mxp_classifier_trainer(cl), ps);
    rc = emit(cfg, s, mxp_classifier_trainer(cl), json);
    bool stopped = mxp_classifier_stopped(cl);
    obs_glue_close(ps->obs, true, stopped, NULL, s->eval_loss);
    mxp_classifier_destroy(cl);
    return rc == CLI_EXIT_OK && stopped ? CLI_EXIT_GUARD_STOP : rc;
}

static int run_gpt(const mxp_config *cfg, obs_glue_progress *ps, wl_summary *s, bool json) {
    mxp_error err = {0};
    mxp_gpt *g = NULL;
    if (mxp_gpt_create(cfg, &g, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return fail_code(&err);
    }
    mxp_log(MXP_LOG_INFO, "training gpt: precision %s%s, %lld epochs, batch %lld x %lld chars",
            mxp_precision_name(mxp_model_policy(mxp_gpt_model(g))->mode),
            cfg->precision == MXP_PRECISION_FP8 ? " (emulated)" : "", (long long)cfg->epochs,
            (long long)cfg->batch_size, (long long)cfg->wl.gpt_context);
    mxp_gpt_set_progress(g, obs_glue_on_progress, ps);
    const int64_t context = cfg->wl.gpt_context; /* sequences = tokens / context */
    obs_glue_run orun = {mxp_gpt_trainer(g), mxp_gpt_guard(g),
                         mxp_gpt_tokens_per_epoch(g) / (context > 0 ? context : 1)};
    int rc = obs_glue_open(cfg, &orun, &ps->obs);
    if (rc != CLI_EXIT_OK) {
        mxp_gpt_destroy(g);
        return rc;
    }
    double t0 = mxp_time_now();
    mxp_status st = mxp_gpt_train(g, cfg->epochs, &err);
    s->wall_s = mxp_time_now() - t0;
    if (st == MXP_OK) st = mxp_gpt_evaluate(g, &s->eval_loss, &err);
    if (st != MXP_OK) {
        cli_error("training failed: %s", err.msg);
        obs_glue_close(ps->obs, false, false, err.msg, NAN);
        mxp_gpt_destroy(g);
        return CLI_EXIT_FAIL;
    }
    s->workload = "gpt";
    s->eval_name = "val";
    s->eval_accuracy = NAN;
    s->eval_bpc = s->eval_loss / log(2.0);
    s->samples = mxp_gpt_tokens_per_epoch(g) * cfg->epochs;
    finish_summary(s, mxp_gpt_trainer(g), ps);
    rc = emit(cfg, s, mxp_gpt_trainer(g), json);
    if (rc == CLI_EXIT_OK) { /* the model for `mixprec sample` */
        char path[MXP_CONFIG_STR_MAX + 32];
        snprintf(path, sizeof path, "%s/model.safetensors", cfg->output_dir);
        mxp_ckpt_save_args sa = {.trainer = mxp_gpt_trainer(g), .config = cfg, .healthy = true};
        if (mxp_ckpt_save(path, &sa, NULL, &err) != MXP_OK) {
            cli_error("cannot save the model: %s", err.msg);
            rc = CLI_EXIT_IO;
        } else if (!json) {
            printf("model            %s (mixprec sample --checkpoint %s)\n", path, path);
        }
    }
    bool stopped = mxp_gpt_stopped(g);
    obs_glue_close(ps->obs, true, stopped, NULL, s->eval_loss);
    mxp_gpt_destroy(g);
    return rc == CLI_EXIT_OK && stopped ? CLI_EXIT_GUARD_STOP : rc;
}

int workload_train(const mxp_config *cfg, bool json, bool quiet) {
    obs_glue_progress ps = {.base = {.tty = isatty(STDOUT_FILENO) && !json, .quiet = quiet,
                               .cur_epoch = -1}};
    wl_summary s;
    memset(&s, 0, sizeof s);
    switch (cfg->workload) {
    case MXP_WORKLOAD_CLASSIFIER: return run_classifier(cfg, &ps, &s, json);
    case MXP_WORKLOAD_GPT: return run_gpt(cfg, &ps, &s, json);
    default:
        cli_error("model.workload=%d is not handled here; accepted: classifier, gpt",
                  (int)cfg->workload);
        return CLI_EXIT_USAGE;
    }
}
