/* tools/mixprec/bench_train_steps.c: section "steps" of `mixprec bench
 * train` (issue 3, item 5): milliseconds per mxp_trainer_step, split into
 * forward, backward, safety pass and optimizer, for every precision mode
 * on the world-model MLP configurations
 *   tiny  hidden [128, 128]         batch 32
 *   base  hidden [512, 512, 512]    batch 256
 *   big   hidden [2048, 2048, 2048] batch 512
 * with input 64 + 8 = 72 (state + action) and output 64 + 1 = 65 (next
 * state + reward). Model and loop as bench/bench_train_step.c: linear ->
 * GELU per hidden layer, MSE, AdamW (lr 1e-3, default betas/eps, no weight
 * decay), no gradient clipping, one fixed batch x, y ~ N(0, 1) (seed 42),
 * model seed 1234. In-process: each step's phase times are the deltas of
 * the trainer's cumulative phase clocks (mxp_train_stats time_*_s);
 * every figure is the median over the timed steps after a warm-up;
 * "other" is the median of (step - phases): zeroing, history, bookkeeping.
 */
#include "bench_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int64_t hidden, batch;
    int depth;
    int warmup, steps, warmup_quick, steps_quick;
} configs[] = {
    {"tiny", 128, 32, 2, 50, 500, 10, 60},
    {"base", 512, 256, 3, 10, 100, 3, 15},
    {"big", 2048, 512, 3, 3, 20, 1, 3},
};

enum { IN_DIM = 72, OUT_DIM = 65 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[n] (sorts v). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Time one config in mode p into r. Phases: 0 fwd, 1 bwd, 2 safety,
 * 3 optimizer, 4 total, 5 other. */
static void run_one(const bt_opts *o, int ci, mxp_precision p, const float *x, const float *y,
                    bt_step_row *r) {
    memset(r, 0, sizeof *r);
    r->config = configs[ci].name;
    r->hidden = configs[ci].hidden;
    r->batch = configs[ci].batch;
    r->depth = configs[ci].depth;
    r->mode = p;
    r->ms_step = r->ms_forward = r->ms_backward = r->ms_safety = r->ms_optimizer = NAN;
    r->ms_other = r->final_loss = NAN;
    int warm = o->quick ? configs[ci].warmup_quick : configs[ci].warmup;
    int steps = o->quick ? configs[ci].steps_quick : configs[ci].steps;
    mxp_error err = {0};
    mxp_model_spec spec = mxp_model_spec_mlp(IN_DIM, r->hidden, r->depth, OUT_DIM,
                                             MXP_LAYER_GELU, false, MXP_LOSS_MSE, r->batch);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_trainer *t = NULL;
    double *v = mxp_calloc((size_t)steps * 6, sizeof *v);
    if (!v) {
        snprintf(r->note, sizeof r->note, "out of memory");
        return;
    }
    if (mxp_model_create(&spec, &pol, 1234, &m, &err) == MXP_OK) {
        mxp_trainer_config tc = mxp_trainer_config_default();
        tc.clip_grad_norm = 0.0f;
        mxp_trainer_create(m, &tc, &t, &err);
    }
    mxp_batch b = {.x = x, .y = y, .B = r->batch};
    mxp_step_result res = {0};
    for (int s = 0; t && s < warm + steps; s++) {
        mxp_train_stats s0, s1;
        mxp_trainer_stats(t, &s0);
        double t0 = mxp_time_now();
        if (mxp_trainer_step(t, &b, 1, &res, &err) != MXP_OK) {
            mxp_trainer_destroy(t);
            t = NULL;
            break;
        }
        double dt = mxp_time_now() - t0;
        mxp_trainer_stats(t, &s1);
        if (s < warm) continue;
        int k = s - warm;
        double ph[4] = {s1.time_forward_s - s0.time_forward_s,
                        s1.time_backward_s - s0.time_backward_s,
                        s1.time_safety_s - s0.time_safety_s,
                        s1.time_optimizer_s - s0.time_optimizer_s};
        for (int q = 0; q < 4; q++) v[q * steps + k] = ph[q] * 1e3;
        v[4 * steps + k] = dt * 1e3;
        v[5 * steps + k] = (dt - ph[0] - ph[1] - ph[2] - ph[3]) * 1e3;
    }
    if (!t) {
        snprintf(r->note, sizeof r->note, "%.120s", err.msg[0] ? err.msg : "trainer failed");
        for (char *c = r->note; *c; c++)
            if (*c == ',' || *c == '|' || *c == '\n') *c = ' ';
    } else {
        mxp_train_stats st;
        mxp_trainer_stats(t, &st);
        r->ok = true;
        r->steps = steps;
        r->skipped = st.skipped_steps;
        r->final_loss = res.loss;
        r->ms_forward = median(v, steps);
        r->ms_backward = median(v + steps, steps);
        r->ms_safety = median(v + 2 * steps, steps);
        r->ms_optimizer = median(v + 3 * steps, steps);
        r->ms_step = median(v + 4 * steps, steps);
        r->ms_other = median(v + 5 * steps, steps);
    }
    mxp_free(v);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

int bt_steps_run(const bt_opts *o, bt_step_row *rows, FILE *f) {
    int n = 0;
    int64_t maxb = 0;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        if (configs[c].batch > maxb) maxb = configs[c].batch;
    float *x = mxp_calloc((size_t)(maxb * IN_DIM), sizeof *x);
    float *y = mxp_calloc((size_t)(maxb * OUT_DIM), sizeof *y);
    if (!x || !y) {
        mxp_free(x);
        mxp_free(y);
        fprintf(f, "steps: out of memory for the batch\n");
        return 0;
    }
    mxp_rng rng;
    mxp_rng_init(&rng, 42);
    for (int64_t i = 0; i < maxb * IN_DIM; i++) x[i] = mxp_rng_normal(&rng);
    for (int64_t i = 0; i < maxb * OUT_DIM; i++) y[i] = mxp_rng_normal(&rng);
    fprintf(f, "  %-5s %-16s %-15s %6s %10s %9s %9s %9s %9s %9s\n", "cfg", "hidden x depth",
            "precision", "steps", "ms/step", "forward", "backward", "safety", "optimizer",
            "other");
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        for (int p = 0; p < MXP_PRECISION_COUNT && n < BT_MAX_STEP_ROWS; p++) {
            bt_step_row *r = &rows[n++];
            run_one(o, (int)c, (mxp_precision)p, x, y, r);
            char hd[32];
            snprintf(hd, sizeof hd, "%lldx%d b%lld", (long long)r->hidden, r->depth,
                     (long long)r->batch);
            if (!r->ok) {
                fprintf(f, "  %-5s %-16s %-15s FAILED: %s\n", r->config, hd, bt_mode_label(r->mode),
                        r->note);
                continue;
            }
            fprintf(f, "  %-5s %-16s %-15s %6d %10.4f %9.4f %9.4f %9.4f %9.4f %9.4f%s\n",
                    r->config, hd, bt_mode_label(r->mode), r->steps, r->ms_step, r->ms_forward,
                    r->ms_backward, r->ms_safety, r->ms_optimizer, r->ms_other,
                    r->skipped ? " (skipped steps)" : "");
            fflush(f);
        }
    }
    mxp_free(x);
    mxp_free(y);
    return n;
}

bool bt_steps_write_csv(const char *path, const bt_step_row *rows, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fputs("config,hidden,depth,batch,in,out,precision,label,status,steps,ms_step,ms_forward,"
          "ms_backward,ms_safety,ms_optimizer,ms_other,final_loss,skipped_steps,note\n", f);
    for (int i = 0; i < n; i++) {
        const bt_step_row *r = &rows[i];
        fprintf(f, "%s,%lld,%d,%lld,%d,%d,%s,%s,%s,%d,", r->config, (long long)r->hidden,
                r->depth, (long long)r->batch, IN_DIM, OUT_DIM, mxp_precision_name(r->mode),
                bt_mode_label(r->mode), r->ok ? "ok" : "failed", r->steps);
        if (r->ok)
            fprintf(f, "%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.9g,%lld,\n", r->ms_step, r->ms_forward,
                    r->ms_backward, r->ms_safety, r->ms_optimizer, r->ms_other, r->final_loss,
                    (long long)r->skipped);
        else
            fprintf(f, ",,,,,,,,%s\n", r->note);
    }
    return fclose(f) == 0;
}

void bt_steps_write_md(FILE *f, const bt_step_row *rows, int n) {
    fputs("\n## Steps: ms per training step by phase (world-model MLP, in 72, out 65; median "
          "over timed steps)\n\n"
          "| Config | Hidden | Batch | Precision | ms/step | Forward | Backward | Safety pass "
          "| Optimizer | Other |\n|---|---|---|---|---|---|---|---|---|---|\n", f);
    for (int i = 0; i < n; i++) {
        const bt_step_row *r = &rows[i];
        fprintf(f, "| %s | %lld x %d | %lld | %s |", r->config, (long long)r->hidden, r->depth,
                (long long)r->batch, bt_mode_label(r->mode));
        if (r->ok)
            fprintf(f, " %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", r->ms_step, r->ms_forward,
                    r->ms_backward, r->ms_safety, r->ms_optimizer, r->ms_other);
        else
            fprintf(f, " failed: %s | | | | | |\n", r->note);
    }
}
