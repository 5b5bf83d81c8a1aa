/* tools/mixprec/train_summary.c: the end-of-run report of `mixprec train`
 * for every workload (train_summary.h): the summary object (summary.json,
 * --json), the text summary and the guard's lines. The summary names the
 * workload and its evaluation (world model: validation loss; classifier:
 * test loss and accuracy on the Fashion-MNIST test split; gpt: held-out
 * loss and bits per character), and says "emulated" for FP8.
 */
#include "train_summary.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

void train_summary_fill(train_summary *s, mxp_run *run, mxp_comm *comm, double train_loss) {
    s->run = run;
    mxp_run_stats(run, &s->info);
    mxp_trainer_stats(mxp_run_trainer(run), &s->stats);
    s->train_loss = train_loss;
    s->wall_s = s->info.wall_s;
    s->samples = s->info.samples_trained;
    s->samples_per_s = s->wall_s > 0 ? (double)s->samples / s->wall_s : 0;
    s->world_size = mxp_comm_size(comm);
    mxp_comm_get_stats(comm, &s->comm);
}

/* `"guard":{...},` (null without a guard). */
static void json_guard(FILE *f, mxp_guard *g) {
    char buf[8192];
    if (g && mxp_guard_status_json(g, buf, sizeof buf) > 0)
        fprintf(f, "\"guard\":%s,", buf);
    else
        fputs("\"guard\":null,", f);
}

void train_summary_json(FILE *f, const mxp_config *cfg, const train_summary *s) {
    mxp_trainer *tr = mxp_run_trainer(s->run);
    fprintf(f,
            "{\"workload\":\"%s\",\"run_id\":\"%s\",\"precision\":\"%s\",\"emulated\":%s,"
            "\"kill_switch\":%s,\"fp16_enabled_runtime\":%s,\"training_steps\":%lld,"
            "\"optimizer_steps\":%lld,\"skipped_steps\":%lld,\"overflow_rate\":%.6g,"
            "\"current_scale\":%.9g,\"epochs\":%lld,\"batch_size\":%lld,"
            "\"grad_accum_steps\":%lld,\"seed\":%llu,\"params\":%lld,\"resumed\":%s,",
            s->info.workload, s->info.run_id, mxp_precision_name(s->stats.precision),
            s->info.emulated ? "true" : "false", cfg->kill_switch ? "true" : "false",
            s->stats.fp16_enabled_runtime ? "true" : "false", (long long)s->stats.training_steps,
            (long long)s->stats.optimizer_steps, (long long)s->stats.skipped_steps,
            s->stats.overflow_rate, (double)s->stats.current_scale, (long long)cfg->epochs,
            (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
            (unsigned long long)cfg->seed, (long long)mxp_model_num_params(mxp_run_model(s->run)),
            s->info.resumed ? "true" : "false");
    json_guard(f, mxp_run_guard(s->run));
    workload_json_memory(f, tr);
    workload_json_fp32_layers(f, cfg, tr);
    cli_json_number(f, "final_train_loss", s->train_loss);
    char key[64];
    snprintf(key, sizeof key, "%s_loss", s->eval.name);
    cli_json_number(f, key, s->eval.loss);
    snprintf(key, sizeof key, "%s_accuracy", s->eval.name);
    if (!isnan(s->eval.accuracy)) cli_json_number(f, key, s->eval.accuracy);
    snprintf(key, sizeof key, "%s_bits_per_char", s->eval.name);
    if (!isnan(s->eval.bits_per_char)) cli_json_number(f, key, s->eval.bits_per_char);
    fprintf(f, "\"world_size\":%d,\"comm_bytes_sent\":%llu,\"comm_seconds\":%.6g,",
            s->world_size, (unsigned long long)s->comm.bytes_sent, s->comm.seconds);
    fprintf(f, "\"wall_time_s\":%.6g,\"samples\":%lld,\"samples_per_s\":%.6g}\n", s->wall_s,
            (long long)s->samples, s->samples_per_s);
}

/* The guard's lines: events by severity, fallbacks, rollbacks, the
 * canary's last divergence, the last ten events (nothing without a guard). */
static void print_guard(FILE *f, mxp_guard *g) {
    if (!g) return;
    mxp_guard_status st;
    mxp_guard_get_status(g, &st);
    size_t n;
    const mxp_guard_event *ev = mxp_guard_events(g, &n);
    int64_t sev[MXP_SEV_COUNT] = {0};
    for (size_t i = 0; i < n; i++) sev[ev[i].severity]++;
    fprintf(f, "guard            %lld events (P0 %lld, P1 %lld, P2 %lld); fallbacks %lld, "
               "rollbacks %lld",
            (long long)st.events, (long long)sev[MXP_SEV_P0], (long long)sev[MXP_SEV_P1],
            (long long)sev[MXP_SEV_P2], (long long)st.fallbacks, (long long)st.rollbacks);
    if (st.initial != st.current)
        fprintf(f, "; precision %s -> %s", mxp_precision_name(st.initial),
                mxp_precision_name(st.current));
    if (st.stopped) fprintf(f, "; STOPPED by a guard rule");
    fputc('\n', f);
    if (!isnan(st.canary_divergence))
        fprintf(f, "fp32 canary      last divergence %.3g%%\n", 100 * st.canary_divergence);
    const size_t show = 10;
    for (size_t i = n > show ? n - show : 0; i < n; i++)
        fprintf(f, "  [%s] %s\n", mxp_severity_name(ev[i].severity), ev[i].detail);
}

void train_summary_print(FILE *f, const train_summary *s) {
    fprintf(f, "workload         %s\n", s->info.workload);
    fprintf(f, "precision        %s%s%s\n", mxp_precision_name(s->stats.precision),
            s->info.emulated ? " (emulated: FP8 quantise, FP32 compute)" : "",
            s->stats.fp16_enabled_runtime ? " (fp16 compute)" : "");
    fprintf(f, "steps            %lld (optimizer %lld, skipped %lld)\n",
            (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
            (long long)s->stats.skipped_steps);
    fprintf(f, "overflow rate    %.2f%%\n", 100.0 * s->stats.overflow_rate);
    fprintf(f, "loss scale       %g\n", (double)s->stats.current_scale);
    fprintf(f, "final train loss %.6f\n", s->train_loss);
    fprintf(f, "%-16s %.6f\n", strcmp(s->eval.name, "test") == 0 ? "test loss" : "validation loss",
            s->eval.loss);
    if (!isnan(s->eval.accuracy)) fprintf(f, "test accuracy    %.2f%%\n", 100.0 * s->eval.accuracy);
    if (!isnan(s->eval.bits_per_char)) fprintf(f, "bits per char    %.4f\n", s->eval.bits_per_char);
    fprintf(f, "wall time        %.3f s\n", s->wall_s);
    fprintf(f, "samples/s        %.0f\n", s->samples_per_s);
    print_guard(f, mxp_run_guard(s->run));
}
