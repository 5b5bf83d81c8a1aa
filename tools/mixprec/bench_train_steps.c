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
 *
 * Roofline (issue 16, item 5): each row also gives the GEMM flops of one
 * step (forward 2 B sum(in out), backward twice that less the first
 * layer's skipped dX, as docs/kernels.md counts them), the GFLOP/s that
 * ms_step achieves, and that as a % of the peak of the instruction the
 * mode's GEMMs use (bench_gemm_peak_kind: vdpbf16ps for BF16 operands on
 * the AVX-512 table, FP32 FMA otherwise, FP8's FP32 emulation included),
 * measured by bench_peak.c on the kernels' thread count before the rows.
 */
#include "bench.h"
#include "bench_train.h"
#include "kernels/threads.h"

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

/* GEMM flops of one training step of config ci (see the file comment). */
static double step_flops(int ci) {
    const double B = (double)configs[ci].batch, h = (double)configs[ci].hidden;
    const double fwd = 2.0 * B * (IN_DIM * h + (configs[ci].depth - 1) * h * h + h * OUT_DIM);
    return 3.0 * fwd - 2.0 * B * IN_DIM * h;
}

/* The peak kind the GEMMs of mode p use on the active kernel table. */
static bench_peak_kind mode_peak_kind(mxp_precision p) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    const mxp_dtype t = pol.emulated ? MXP_DTYPE_F32 : pol.weight;
    return bench_gemm_peak_kind(mxp_kernels_get(), t, t);
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
    r->gflops = r->pct_peak = r->peak_gflops = NAN;
    r->gflop_step = step_flops(ci) * 1e-9;
    r->peak_name = bench_peak_name(mode_peak_kind(p));
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
        r->gflops = r->gflop_step / (r->ms_step * 1e-3);
    }
    mxp_free(v);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

int bt_steps_run(const bt_opts *o, bt_step_row *rows, FILE *f) {
    int n = 0;
    /* the peaks, on the threads the kernels use (best of the runs) */
    double peak[BENCH_PEAK_KIND_COUNT] = {0};
    const int threads = mxp_threads_max();
    for (int k = 0; k < BENCH_PEAK_KIND_COUNT; k++)
        if (bench_peak_supported((bench_peak_kind)k) && k != BENCH_PEAK_FP16_FMA)
            peak[k] = bench_peak_measure((bench_peak_kind)k, threads, o->quick ? 3 : 7, 0.05);
    fprintf(f, "  peaks on %d thread%s: %s %.1f GFLOP/s, %s %.1f GFLOP/s\n", threads,
            threads > 1 ? "s" : "", bench_peak_name(BENCH_PEAK_FP32_FMA),
            peak[BENCH_PEAK_FP32_FMA], bench_peak_name(BENCH_PEAK_BF16_DP),
            peak[BENCH_PEAK_BF16_DP]);
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
    fprintf(f, "  %-5s %-16s %-15s %6s %10s %9s %9s %9s %9s %9s %10s %8s %7s\n", "cfg",
            "hidden x depth", "precision", "steps", "ms/step", "forward", "backward", "safety",
            "optimizer", "other", "GFLOP/step", "GFLOP/s", "%peak");
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        for (int p = 0; p < MXP_PRECISION_COUNT && n < BT_MAX_STEP_ROWS; p++) {
            bt_step_row *r = &rows[n++];
            run_one(o, (int)c, (mxp_precision)p, x, y, r);
            const double pk = peak[mode_peak_kind((mxp_precision)p)];
            if (pk > 0) {
                r->peak_gflops = pk;
                r->pct_peak = 100.0 * r->gflops / pk;
            }
            char hd[32];
            snprintf(hd, sizeof hd, "%lldx%d b%lld", (long long)r->hidden, r->depth,
                     (long long)r->batch);
            if (!r->ok) {
                fprintf(f, "  %-5s %-16s %-15s FAILED: %s\n", r->config, hd, bt_mode_label(r->mode),
                        r->note);
                continue;
            }
            fprintf(f,
                    "  %-5s %-16s %-15s %6d %10.4f %9.4f %9.4f %9.4f %9.4f %9.4f %10.4f %8.1f "
                    "%6.1f%%%s\n",
                    r->config, hd, bt_mode_label(r->mode), r->steps, r->ms_step, r->ms_forward,
                    r->ms_backward, r->ms_safety, r->ms_optimizer, r->ms_other, r->gflop_step,
                    r->gflops, r->pct_peak, r->skipped ? " (skipped steps)" : "");
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
          "ms_backward,ms_safety,ms_optimizer,ms_other,final_loss,skipped_steps,gflop_step,"
          "gflops,peak_kind,peak_gflops,pct_of_peak,note\n", f);
    for (int i = 0; i < n; i++) {
        const bt_step_row *r = &rows[i];
        fprintf(f, "%s,%lld,%d,%lld,%d,%d,%s,%s,%s,%d,", r->config, (long long)r->hidden,
                r->depth, (long long)r->batch, IN_DIM, OUT_DIM, mxp_precision_name(r->mode),
                bt_mode_label(r->mode), r->ok ? "ok" : "failed", r->steps);
        if (r->ok)
            fprintf(f, "%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.9g,%lld,%.9g,%.3f,%s,%.3f,%.2f,\n",
                    r->ms_step, r->ms_forward, r->ms_backward, r->ms_safety, r->ms_optimizer,
                    r->ms_other, r->final_loss, (long long)r->skipped, r->gflop_step, r->gflops,
                    r->peak_name, r->peak_gflops, r->pct_peak);
        else
            fprintf(f, ",,,,,,,,%.9g,,%s,,,%s\n", r->gflop_step, r->peak_name, r->note);
    }
    return fclose(f) == 0;
}

void bt_steps_write_md(FILE *f, const bt_step_row *rows, int n) {
    fputs("\n## Steps: ms per training step by phase (world-model MLP, in 72, out 65; median "
          "over timed steps)\n\n"
          "| Config | Hidden | Batch | Precision | ms/step | Forward | Backward | Safety pass "
          "| Optimizer | Other | GFLOP/step | GFLOP/s | % of peak |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", f);
    for (int i = 0; i < n; i++) {
        const bt_step_row *r = &rows[i];
        fprintf(f, "| %s | %lld x %d | %lld | %s |", r->config, (long long)r->hidden, r->depth,
                (long long)r->batch, bt_mode_label(r->mode));
        if (r->ok)
            fprintf(f, " %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.1f | %.1f%% of %s |\n",
                    r->ms_step, r->ms_forward, r->ms_backward, r->ms_safety, r->ms_optimizer,
                    r->ms_other, r->gflop_step, r->gflops, r->pct_peak, r->peak_name);
        else
            fprintf(f, " failed: %s | | | | | | | | |\n", r->note);
    }
}
