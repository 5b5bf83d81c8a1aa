/* tools/mixprec/train_summary.c: the end-of-run report of `mixprec train`
 * for every workload (train_summary.h): the summary object (the library's
 * mxp_run_summary_json: summary.json, --json), the text summary and the
 * guard's lines. The summary names the
 * workload and its evaluation (world model: validation loss; classifier:
 * test loss and accuracy on the Fashion-MNIST test split; gpt: held-out
 * loss and bits per character), and says "emulated" for FP8.
 */
#include "train_summary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_summary_fill(train_summary *s, mxp_run *run, double train_loss) {
    s->run = run;
    mxp_run_stats(run, &s->info);
    mxp_trainer_stats(mxp_run_trainer(run), &s->stats);
    s->train_loss = train_loss;
    s->wall_s = s->info.wall_s;
    s->samples = s->info.samples_trained;
    s->samples_per_s = s->wall_s > 0 ? (double)s->samples / s->wall_s : 0;
}

bool train_summary_json(FILE *f, const train_summary *s) {
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    int n = buf ? mxp_run_summary_json(s->run, &s->eval, s->train_loss, buf, cap) : -1;
    if (n >= 0) fprintf(f, "%s\n", buf);
    free(buf);
    return n >= 0;
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
    char dev[32];
    mxp_device_format(&mxp_run_config(s->run)->device, dev, sizeof dev);
    fprintf(f, "device           %s\n", dev);
    fprintf(f, "steps            %lld (optimizer %lld, skipped %lld)\n",
            (long long)s->stats.training_steps, (long long)s->stats.optimizer_steps,
            (long long)s->stats.skipped_steps);
    fprintf(f, "overflow rate    %.2f%%\n", 100.0 * s->stats.overflow_rate);
    fprintf(f, "loss scale       %g\n", (double)s->stats.current_scale);
    fprintf(f, "final train loss %.6f\n", s->train_loss);
    fprintf(f, "%-16s %.6f\n", strcmp(s->eval.name, "test") == 0 ? "test loss" : "validation loss",
            s->eval.loss);
    if (!isnan(s->eval.bce)) /* model.termination: the flag's BCE and accuracy */
        fprintf(f, "termination      bce %.6f, accuracy %.2f%%\n", s->eval.bce,
                100.0 * s->eval.accuracy);
    else if (!isnan(s->eval.accuracy))
        fprintf(f, "test accuracy    %.2f%%\n", 100.0 * s->eval.accuracy);
    if (!isnan(s->eval.bits_per_char)) fprintf(f, "bits per char    %.4f\n", s->eval.bits_per_char);
    if (!isnan(s->eval.mse) && s->eval.mse != s->eval.loss) /* a Gaussian head: loss is its NLL */
        fprintf(f, "%-16s %.6f\n", strcmp(s->eval.name, "test") == 0 ? "test mse" : "validation mse",
                s->eval.mse);
    if (!isnan(s->eval.open_loop[0])) { /* world models */
        fprintf(f, "open-loop error ");
        for (int i = 0; i < MXP_OPEN_LOOP_N; i++)
            fprintf(f, " %.4g (%d step%s)%s", s->eval.open_loop[i], mxp_open_loop_horizon(i),
                    mxp_open_loop_horizon(i) == 1 ? "" : "s", i + 1 < MXP_OPEN_LOOP_N ? "," : "\n");
    }
    if (s->eval.members > 1) { /* an ensemble: each member's loss, * the elites used */
        fprintf(f, "members          ");
        for (int e = 0; e < s->eval.members; e++)
            fprintf(f, "%.4g%s%s", s->eval.member_loss[e], s->eval.elites >> e & 1u ? "*" : "",
                    e + 1 < s->eval.members ? " " : " (* elite)\n");
    }
    if (s->info.evaluations > 0) /* validation during training */
        fprintf(f, "best val loss    %.6f (epoch %lld of %lld validations)%s%s%s\n",
                s->info.best_val_loss, (long long)s->info.best_epoch,
                (long long)s->info.evaluations,
                s->info.early_stopped ? "; early stopped" : "",
                s->info.best_checkpoint[0] ? "; " : "", s->info.best_checkpoint);
    fprintf(f, "wall time        %.3f s\n", s->wall_s);
    fprintf(f, "samples/s        %.0f\n", s->samples_per_s);
    print_guard(f, mxp_run_guard(s->run));
}
