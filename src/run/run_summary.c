/* run/run_summary.c: the run's summary object, schema "mixprec.summary/1"
 * (run.h: mxp_run_summary_json; docs/json.md lists the fields). Every front
 * end writes OUTPUT_DIR/summary.json through it: `mixprec train` (also its
 * --json line) and the Python binding's Run.train, so the object has one
 * home and the same core fields for every workload, the guard's included.
 * FILE-free: it fills a caller's buffer.
 */
#include "run/run_internal.h"

#include "kernels/kernels.h"
#include "train/trainer_device.h"

#include <math.h>
#include <string.h>
#include <stdarg.h>
#include <stdio.h>

/* Appends to a fixed buffer; `over` once something did not fit. */
typedef struct jw {
    char *buf;
    size_t cap, len;
    bool over;
} jw;

static void put(jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(jw *w, const char *fmt, ...) {
    if (w->over) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, w->cap - w->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= w->cap - w->len)
        w->over = true;
    else
        w->len += (size_t)n;
}

static const char *tf(bool b) { return b ? "true" : "false"; }

/* `"key":<%.9g or null>,` */
static void put_num(jw *w, const char *key, double v) {
    if (isfinite(v))
        put(w, "\"%s\":%.9g,", key, v);
    else
        put(w, "\"%s\":null,", key);
}

/* Optimizer state bytes: AdamW m and v (8 per parameter), SGD momentum (4). */
static size_t optimizer_bytes(mxp_trainer *tr) {
    return mxp_trainer_tensor_bytes(tr, MXP_TENSOR_OPTIM_M) +
           mxp_trainer_tensor_bytes(tr, MXP_TENSOR_OPTIM_V);
}

/* `"memory_bytes":{...},"fp32_layers":"..","fp32_layers_kept":[..],
 * "fp16_accumulate":"..",`: the model's memory, the per-layer FP32 override
 * as configured and as the model keeps it (empty in fp32 mode, where every
 * layer is FP32 anyway), the FP16 accumulation as the model runs it at the
 * end (a precision fallback out of fp16 drops it). */
static void put_model(jw *w, const mxp_config *cfg, mxp_trainer *tr) {
    const mxp_model *m = mxp_trainer_model(tr);
    mxp_model_memory mem;
    mxp_model_memory_usage(m, &mem);
    put(w, "\"memory_bytes\":{\"params\":%zu,\"master\":%zu,\"grads\":%zu,\"optimizer\":%zu,"
           "\"activations\":%zu},",
        mem.params, mem.master, mem.grads, optimizer_bytes(tr), mem.activations);
    char txt[256];
    mxp_fp32_layers_format(&cfg->fp32_layers, txt, sizeof txt);
    put(w, "\"fp32_layers\":\"%s\",\"fp32_layers_kept\":[", txt);
    const uint64_t kept = mxp_model_fp32_layers(m);
    const char *sep = "";
    for (int l = 0; l < 64; l++)
        if (kept >> l & 1) {
            put(w, "%s%d", sep, l);
            sep = ",";
        }
    put(w, "],");
    const int acc_k = mxp_model_policy(m)->fp16_accum_k;
    if (acc_k > 0)
        put(w, "\"fp16_accumulate\":\"fp16 (%s), k=%d\",",
            mxp_kernels_get()->gemm_compute(MXP_DTYPE_F16, true) == MXP_GEMM_COMPUTE_FP16_FMA
                ? "vfmadd231ph"
                : "emulated",
            acc_k);
    else
        put(w, "\"fp16_accumulate\":\"fp32\",");
}

int mxp_run_summary_json(mxp_run *r, const mxp_run_eval *eval, double train_loss, char *buf,
                         size_t cap) {
    if (!r || !buf || cap == 0) return -1;
    jw w = {buf, cap, 0, false};
    const mxp_config *cfg = &r->cfg;
    mxp_run_info info;
    mxp_run_stats(r, &info);
    mxp_train_stats st;
    mxp_trainer_stats(r->trainer, &st);
    put(&w,
        "{\"schema\":\"mixprec.summary/1\",\"workload\":\"%s\",\"run_id\":\"%s\","
        "\"precision\":\"%s\",\"emulated\":%s,\"kill_switch\":%s,\"fp16_enabled_runtime\":%s,"
        "\"training_steps\":%lld,\"optimizer_steps\":%lld,\"skipped_steps\":%lld,"
        "\"overflow_rate\":%.6g,\"current_scale\":%.9g,\"epochs\":%lld,\"batch_size\":%lld,"
        "\"grad_accum_steps\":%lld,\"seed\":%llu,\"params\":%lld,\"resumed\":%s,",
        info.workload, info.run_id, mxp_precision_name(st.precision), tf(info.emulated),
        tf(cfg->kill_switch), tf(st.fp16_enabled_runtime), (long long)st.training_steps,
        (long long)st.optimizer_steps, (long long)st.skipped_steps, st.overflow_rate,
        (double)st.current_scale, (long long)cfg->epochs, (long long)cfg->batch_size,
        (long long)cfg->grad_accum_steps, (unsigned long long)cfg->seed,
        (long long)mxp_model_num_params(r->model), tf(info.resumed));
    /* the guard's state, or null without a guard */
    if (r->guard) {
        put(&w, "\"guard\":");
        int n = w.over ? -1 : mxp_guard_status_json(r->guard, w.buf + w.len, w.cap - w.len);
        if (n < 0)
            w.over = true;
        else
            w.len += (size_t)n;
        put(&w, ",");
    } else {
        put(&w, "\"guard\":null,");
    }
    put_model(&w, cfg, r->trainer);
    put_num(&w, "final_train_loss", isnan(train_loss) ? info.epoch_mean_loss : train_loss);
    if (eval) {
        char key[64];
        snprintf(key, sizeof key, "%s_loss", eval->name);
        put_num(&w, key, eval->loss);
        snprintf(key, sizeof key, "%s_accuracy", eval->name);
        if (!isnan(eval->accuracy)) put_num(&w, key, eval->accuracy);
        snprintf(key, sizeof key, "%s_bits_per_char", eval->name);
        if (!isnan(eval->bits_per_char)) put_num(&w, key, eval->bits_per_char);
        snprintf(key, sizeof key, "%s_mse", eval->name);
        if (!isnan(eval->mse) && (cfg->head == MXP_LOSS_GAUSSIAN || !isnan(eval->bce) ||
                                  strcmp(cfg->target_weights, "none") != 0))
            put_num(&w, key, eval->mse);
        snprintf(key, sizeof key, "%s_bce", eval->name); /* model.termination */
        if (!isnan(eval->bce)) put_num(&w, key, eval->bce);
        for (int i = 0; i < MXP_OPEN_LOOP_N; i++) { /* world models */
            snprintf(key, sizeof key, "%s_open_loop_k%d", eval->name, mxp_open_loop_horizon(i));
            if (!isnan(eval->open_loop[i])) put_num(&w, key, eval->open_loop[i]);
        }
        if (eval->members > 1) { /* an ensemble: each member's loss, the elites used */
            put(&w, "\"%s_member_loss\":[", eval->name);
            for (int e = 0; e < eval->members; e++) {
                if (isfinite(eval->member_loss[e]))
                    put(&w, "%s%.17g", e ? "," : "", eval->member_loss[e]);
                else
                    put(&w, "%snull", e ? "," : "");
            }
            put(&w, "],\"%s_elites\":[", eval->name);
            for (int e = 0, f = 0; e < eval->members; e++)
                if (eval->elites >> e & 1u) put(&w, "%s%d", f++ ? "," : "", e);
            put(&w, "],");
        }
    }
    /* validation during training (training.eval_every[_steps]): null when off */
    if (cfg->eval_every > 0 || cfg->eval_every_steps > 0) {
        put(&w, "\"validation\":{\"eval_every\":%lld,\"eval_every_steps\":%lld,"
                "\"evaluations\":%lld,",
            (long long)cfg->eval_every, (long long)cfg->eval_every_steps,
            (long long)info.evaluations);
        put_num(&w, "last_val_loss", info.val_loss);
        put_num(&w, "best_val_loss", info.best_val_loss);
        put(&w, "\"best_epoch\":%lld,\"best_step\":%lld,\"evals_since_best\":%lld,"
                "\"best_checkpoint\":",
            (long long)info.best_epoch, (long long)info.best_step,
            (long long)info.evals_since_best);
        if (info.best_checkpoint[0])
            put(&w, "\"%s\",", info.best_checkpoint);
        else
            put(&w, "null,");
        if (r->mem.E > 1) { /* an ensemble: elites and per-member losses */
            char mem[RUN_STATE_MAX];
            run_members_json(r, false, mem, sizeof mem);
            put(&w, "%s,", mem);
        }
        put(&w, "\"early_stopped\":%s,\"stop_reason\":", tf(info.early_stopped));
        if (info.early_stopped)
            put(&w, "\"early_stop: %lld validations without an improvement > %g "
                    "(patience %lld)\"},",
                (long long)info.evals_since_best, cfg->early_stop_min_delta,
                (long long)cfg->early_stop_patience);
        else
            put(&w, "null},");
    } else {
        put(&w, "\"validation\":null,");
    }
    mxp_comm_stats cs;
    mxp_comm_get_stats(mxp_trainer_comm(r->trainer), &cs);
    put(&w, "\"world_size\":%d,\"comm_bytes_sent\":%llu,\"comm_seconds\":%.6g,", r->dp_size,
        (unsigned long long)cs.bytes_sent, cs.seconds);
    char dev[32]; /* training.device the steps ran on (train/trainer_device.c) */
    mxp_device_format(&cfg->device, dev, sizeof dev);
    put(&w, "\"device\":\"%s\",", dev);
    trainer_device_stats ds; /* on a device: its steps, copies per step, pulls and pushes */
    trainer_device_get_stats(r->trainer, &ds);
    if (trainer_device_attached(r->trainer))
        put(&w, "\"device_step\":{\"table\":\"%s\",\"steps\":%lld,\"d2h_per_step_max\":%lld,"
                "\"pulls\":%lld,\"pushes\":%lld,\"plans\":%lld},",
            ds.table ? ds.table : "?", (long long)ds.steps, (long long)ds.step_d2h_max, (long long)ds.pulls,
            (long long)ds.pushes, (long long)ds.plans);
    const double sps = info.wall_s > 0 ? (double)info.samples_trained / info.wall_s : 0;
    put(&w, "\"wall_time_s\":%.6g,\"samples\":%lld,\"samples_per_s\":%.6g}", info.wall_s,
        (long long)info.samples_trained, sps);
    return w.over ? -1 : (int)w.len;
}
