/* tests/test_run_device_emu.c: training.device=cuda through the run API
 * (mixprec/run.h), the trainer's device step (train/trainer_device.h) on
 * the emulated device table (tests/dstep_emu.h, substituted for the CUDA
 * table by trainer_device_override), against the same configs on the CPU.
 *
 *   - the default world model (fp32, mixed_bf16, mixed_fp16; mixed_fp16
 *     also at a train() batch of 16, which re-plans the device) and a small
 *     classifier (fp32, mixed_fp16): per-step losses close (tolerances of
 *     tests/test_dstep_emu.c, with its reasons: the device step differs
 *     from the CPU in summation order only; step 1 is a pure forward from
 *     identical weights, 1e-6 relative in fp32, 1e-4 in mixed modes; later
 *     steps 2e-3), the skip decisions and the loss-scale sequence
 *     identical, with a NaN planted in the input of the 5th batch (both
 *     sides skip it, and the device's site of it, pass, layer and op, is
 *     the CPU model's); also SGD (momentum, nesterov, weight decay) and
 *     grad_accum_steps=3 (the run's micro-batches, concatenated); exactly one device-to-host copy per step: the
 *     emulated device's count over the whole run equals the steps plus 3
 *     per pull (master, m, v; SGD: master, momentum; pulls happen only
 *     outside steps), and the
 *     run's summary says so ("device":"cuda:0", d2h_per_step_max 1);
 *   - fp8 on the default world model (the emulated table with its FP8 ops,
 *     tests/dstep_emu_fp8.h): the device runs the first and last layers in
 *     BF16 (4 inputs / outputs: not multiples of 16) and the hidden ones in
 *     FP8, the CPU side keeps the same layers out of FP8
 *     (precision_fp32_layers=first,last); tolerances of
 *     tests/test_dstep_fp8_emu.c's world shape (first loss 2e-2, later
 *     5e-2); a pull also copies the FP8 scaling state (4 copies per pull);
 *     its checkpoints as below (the FP8 state travels with the weights:
 *     the device resume is bit-exact only if it does);
 *   - a checkpoint saved on the emulated device at step k resumes on the
 *     emulated device bit for bit against the uninterrupted emulated run
 *     (every later loss, every final tensor); the same checkpoint resumes
 *     on the CPU (training.device=cpu) and the CPU continues (its first
 *     loss is a pure forward of the device's weights: within the step-1
 *     tolerance of the device's); a CPU checkpoint resumes on the device
 *     the same way;
 *   - an operator's precision switch (mixed_fp16 -> mixed_bf16, and fp8 ->
 *     mixed_bf16) mid-run: the device re-plans at the same boundary as the
 *     CPU switches, and the modes, scales and losses after it match the
 *     CPU run's (fp8: with the fp8 tolerances above);
 *   - every refusal: what the device step cannot run is refused by
 *     mxp_run_create (MXP_ERR_UNSUPPORTED) with a message naming it, a
 *     gradient hook by the step that meets it, and without the override
 *     this build names why it cannot (no CUDA, no device).
 *
 * MIXPREC_TEST_QUICK (the reference-kernel, mock-device and sanitizer
 * passes of scripts/test.sh): each mode, workload, optimizer, the re-plan,
 * micro-batching and the checkpoint directions once (main() lists them).
 *
 * Negative control for the site (checked by hand: the mapping of the
 * device's site in trainer_device.c disabled): every NaN-site check fails
 * ("device 0 fwd layer 0 (-)" against the CPU's "1 fwd layer 0 (linear)").
 *
 * Negative control (checked by hand: trainer_device_pull made a no-op):
 * the host model keeps its initial weights, so the checkpoint at step k
 * holds them; the CPU resume's first loss is then the initial loss, not a
 * forward of the trained weights (fails the 1e-4 check by orders of
 * magnitude), and the emulated resume pushes those stale weights (its
 * losses differ from the straight run's at once).
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dstep_emu_fp8.h"
#include "testutil.h"
#include "train/trainer_device.h"

#define MAX_STEPS 256

static char g_dir[128];
static emu_dev g_emu;
static mxp_ds_ops g_tab; /* the emulated table with its FP8 ops (dstep_emu_fp8.h) */

typedef struct rec {
    double loss[MAX_STEPS];
    float scale[MAX_STEPS];
    bool skip[MAX_STEPS];
    mxp_nonfinite_site site[MAX_STEPS];
    mxp_precision mode[MAX_STEPS]; /* the model's mode after the step */
    int64_t n, stop_at, request_at; /* request_at: mxp_run_request_precision there */
    mxp_run *run;
} rec;

static void on_progress(void *user, const mxp_run_progress *p) {
    rec *r = user;
    if (r->n < MAX_STEPS) {
        r->loss[r->n] = p->result->loss;
        r->scale[r->n] = p->result->scale;
        r->skip[r->n] = p->result->skipped;
        r->site[r->n] = p->result->site;
        r->mode[r->n] = mxp_model_policy(mxp_run_model(r->run))->mode;
    }
    r->n++;
    if (r->request_at > 0 && p->step == r->request_at)
        mxp_run_request_precision(r->run, MXP_PRECISION_MIXED_BF16, "test");
    if (r->stop_at > 0 && p->step == r->stop_at) mxp_run_request_stop(r->run);
}

/* ---- a NaN in one batch: the built-in provider's fill_batch wrapped -------- */

static mxp_status (*g_fill)(void *, int, const uint32_t *, int64_t, mxp_batch *, mxp_error *);
static int64_t g_calls, g_nan_call, g_in;
static float *g_x;

static mxp_status planted_fill(void *self, int slot, const uint32_t *idx, int64_t n,
                               mxp_batch *out, mxp_error *err) {
    mxp_status s = g_fill(self, slot, idx, n, out, err);
    if (s != MXP_OK || ++g_calls != g_nan_call) return s;
    free(g_x);
    g_x = test_xmalloc((size_t)(out->B * g_in) * sizeof(float));
    memcpy(g_x, out->x, (size_t)(out->B * g_in) * sizeof(float));
    g_x[3] = NAN;
    out->x = g_x;
    return MXP_OK;
}

/* ---- data and configs -------------------------------------------------------- */

static void write_data(void) {
    char p[256];
    snprintf(p, sizeof p, "%s/fm", g_dir);
    CHECK_MSG(test_write_fashion_idx(p), "writing the IDX files of %s", p);
}

typedef enum { WM, CL, GPT } workload;

/* cfg of workload w in precision p on device dev, plus extra overrides
 * (NULL-terminated). The world model keeps its default shape. */
static mxp_status make_cfg(workload w, const char *prec, const char *dev, const char *const *extra,
                           mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    char kv[4][300];
    snprintf(kv[0], sizeof kv[0], "training.precision=%s", prec);
    snprintf(kv[1], sizeof kv[1], "training.device=%s", dev);
    snprintf(kv[2], sizeof kv[2], "data.fashion_mnist_dir=%s/fm", g_dir);
    snprintf(kv[3], sizeof kv[3], "output.dir=%s/out", g_dir);
    const char *common[] = {kv[0], kv[1], kv[3], "training.epochs=2", NULL};
    const char *wm[] = {"model.workload=world_model", "data.trajectories=8",
                        "data.episode_length=40", "training.batch_size=32", NULL};
    const char *cl[] = {"model.workload=classifier", kv[2], "model.hidden=16", "model.depth=1",
                        "training.batch_size=16", NULL};
    const char *gp[] = {"model.workload=gpt", "gpt.layers=1", "gpt.embd=16", "gpt.heads=2",
                        "gpt.context=8", "training.batch_size=4", NULL};
    const char *const *lists[3] = {common, w == WM ? wm : w == CL ? cl : gp, extra};
    for (int l = 0; l < 3; l++)
        for (int i = 0; s == MXP_OK && lists[l] && lists[l][i]; i++)
            s = mxp_config_apply_override(b, lists[l][i], err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s;
}

/* A run of cfg recording into r (no checkpoints of its own; resume: a
 * checkpoint file or NULL; nan_call: the fill_batch call whose input gets
 * a NaN, 0: none). */
static mxp_status open_run(const mxp_config *cfg, rec *r, const char *resume, int64_t nan_call,
                           mxp_run **out, mxp_error *err) {
    mxp_workload_provider wl;
    mxp_status s = mxp_workload_provider_builtin(cfg, &wl, err);
    if (s != MXP_OK) return s;
    mxp_model_spec ms;
    if ((s = wl.model_spec(wl.self, &ms, err)) != MXP_OK) {
        if (wl.destroy) wl.destroy(wl.self);
        return s;
    }
    g_in = ms.in_dim;
    g_fill = wl.fill_batch;
    wl.fill_batch = planted_fill;
    g_calls = 0;
    g_nan_call = nan_call;
    mxp_run_options o = mxp_run_options_default();
    o.provider = &wl;
    o.checkpoints = false;
    o.progress = on_progress;
    o.progress_user = r;
    o.resume = resume;
    memset(r, 0, sizeof *r);
    s = mxp_run_create(cfg, &o, out, err);
    r->run = *out;
    return s;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* ---- device vs CPU ------------------------------------------------------------- */

/* fp8: the device runs the world model's first and last layers (4 inputs,
 * 4 outputs: not multiples of 16, cuBLASLt's FP8 rule) in BF16 and
 * reports them; the CPU side keeps the same layers out of FP8
 * (precision_fp32_layers=first,last: FP32, against the device's BF16, 2^-8
 * relative per element). Tolerances then tests/test_dstep_fp8_emu.c's for
 * the world shape with its reasons: first loss 2e-2, later 5e-2. */
static const char *const kKeepEnds[] = {"training.precision_fp32_layers=first,last", NULL};
static const char *const *cpu_extra(const char *prec, const char *const *extra) {
    return strcmp(prec, "fp8") == 0 && !extra ? kKeepEnds : extra;
}

/* batch: the train() call's batch size (0: the config's 32; 16 makes the
 * device re-plan once) */
static void compare_x(workload w, const char *prec, int64_t batch, const char *const *extra,
                      int k, int per_pull, const char *tag) {
    mxp_error err = {0};
    mxp_config cc, cd;
    CHECK_OK(make_cfg(w, prec, "cpu", cpu_extra(prec, extra), &cc, &err), &err);
    CHECK_OK(make_cfg(w, prec, "cuda", extra, &cd, &err), &err);
    static rec rc, rd;
    mxp_run *run = NULL;
    CHECK_OK(open_run(&cc, &rc, NULL, 5, &run, &err), &err);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, batch, &err), &err);
    mxp_run_destroy(run);
    const int64_t d2h0 = g_emu.d2h;
    CHECK_OK(open_run(&cd, &rd, NULL, 5, &run, &err), &err);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, batch, &err), &err);
    trainer_device_stats st;
    trainer_device_get_stats(mxp_run_trainer(run), &st);
    /* the summary says where the steps ran and how many copies one took */
    static char js[16384];
    CHECK(mxp_run_summary_json(run, NULL, NAN, js, sizeof js) > 0);
    CHECK_MSG(strstr(js, "\"device\":\"cuda:0\"") && strstr(js, "\"d2h_per_step_max\":1,"),
              "summary: %.300s", strstr(js, "\"device\"") ? strstr(js, "\"device\"") : js);
    mxp_run_destroy(run);
    const char *name = tag ? tag : w == WM ? "world_model" : "classifier";
    const int64_t nan_step = (5 - 1) / k; /* the step of fill_batch call 5 (0-based) */
    const bool fp32 = strcmp(prec, "fp32") == 0;
    const bool fp8 = strcmp(prec, "fp8") == 0; /* cpu_extra */
    CHECK_MSG(rd.n == rc.n && rd.n >= 8 && rd.n <= MAX_STEPS, "%s %s: %lld steps, cpu %lld", name,
              prec, (long long)rd.n, (long long)rc.n);
    double worst = 0;
    int skips = 0;
    for (int64_t i = 0; i < rd.n && i < rc.n && i < MAX_STEPS; i++) {
        bool ok = rd.skip[i] == rc.skip[i] && rd.scale[i] == rc.scale[i];
        const double r = rel(rd.loss[i], rc.loss[i]);
        if (rc.skip[i]) {
            skips++;
        } else {
            ok = ok && r <= (i == 0 ? (fp8 ? 2e-2 : fp32 ? 1e-6 : 1e-4) : fp8 ? 5e-2 : 2e-3);
            if (r > worst) worst = r;
        }
        CHECK_MSG(ok, "%s %s step %lld: loss cpu %.9g dev %.9g (rel %.2e) skip %d/%d scale %g/%g",
                  name, prec, (long long)i + 1, rc.loss[i], rd.loss[i], r, rc.skip[i],
                  rd.skip[i], (double)rc.scale[i], (double)rd.scale[i]);
    }
    CHECK_MSG(skips >= 1 && rc.skip[nan_step], "%s %s: the NaN batch was not skipped", name, prec);
    /* the provenance of the NaN step: the CPU model's site (pass, layer, op) */
    const mxp_nonfinite_site *sc = &rc.site[nan_step], *sd = &rd.site[nan_step];
    CHECK_MSG(sc->found && sd->found == sc->found && sd->backward == sc->backward &&
                  sd->layer == sc->layer && sd->op && strcmp(sd->op, sc->op) == 0,
              "%s %s: NaN site cpu %d %s layer %d (%s) x%lld, device %d %s layer %d (%s) x%lld",
              name, prec, sc->found, sc->backward ? "bwd" : "fwd", sc->layer,
              sc->op ? sc->op : "-", (long long)sc->count, sd->found,
              sd->backward ? "bwd" : "fwd", sd->layer, sd->op ? sd->op : "-",
              (long long)sd->count);
    /* one copy per step: nothing but the steps' reports and the pulls */
    CHECK_MSG(st.steps == rd.n && st.step_d2h_max == 1, "%s %s: %lld device steps, at most %lld "
              "copies in one", name, prec, (long long)st.steps, (long long)st.step_d2h_max);
    CHECK_MSG(st.plans == (batch ? 2 : 1), "%s %s: %lld plans", name, prec, (long long)st.plans);
    CHECK_MSG(g_emu.d2h - d2h0 == st.steps + per_pull * st.pulls,
              "%s %s: %lld device-to-host copies for %lld steps and %lld pulls", name, prec,
              (long long)(g_emu.d2h - d2h0), (long long)st.steps, (long long)st.pulls);
    printf("  %-11s %-10s %3lld steps, worst loss rel diff %.2e, %lld pulls, %lld pushes, "
           "%lld plans, d2h %lld\n", name, prec, (long long)rd.n, worst, (long long)st.pulls,
           (long long)st.pushes, (long long)st.plans, (long long)(g_emu.d2h - d2h0));
}

static void compare(workload w, const char *prec, int64_t batch) {
    compare_x(w, prec, batch, NULL, 1, 3, NULL);
}

/* An operator's precision switch (mixed_fp16 -> mixed_bf16 requested after
 * step 6) on the device and on the CPU: the same steps in the same modes
 * (the switch at the same boundary), losses within 2.5e-4 (observed worst
 * 6.0e-5; deterministic on both sides), scales identical (the scaler
 * restarted on both). Negative control (checked by hand: the re-plan in
 * trainer_device_step skipped, the old plan kept): the device keeps
 * stepping in fp16, one plan, and the losses after the switch differ by
 * up to 7.9e-4 (both checks fail). From fp8 (`from` "fp8": the CPU keeps
 * the ends out of FP8, cpu_extra) the tolerances are the fp8 ones (2e-2
 * first step, 5e-2 later; observed 5.1e-4). */
static void test_switch(const char *from) {
    mxp_error err = {0};
    mxp_config cc, cd;
    const bool fp8 = strcmp(from, "fp8") == 0; /* cpu_extra's ends, its tolerances */
    CHECK_OK(make_cfg(WM, from, "cpu", cpu_extra(from, NULL), &cc, &err), &err);
    CHECK_OK(make_cfg(WM, from, "cuda", NULL, &cd, &err), &err);
    static rec rc, rd;
    mxp_run *run = NULL;
    const mxp_config *cfgs[2] = {&cc, &cd};
    rec *recs[2] = {&rc, &rd};
    trainer_device_stats st = {0};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(open_run(cfgs[k], recs[k], NULL, 0, &run, &err), &err);
        if (!run) return;
        recs[k]->request_at = 6;
        CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        if (k == 1) trainer_device_get_stats(mxp_run_trainer(run), &st);
        mxp_run_destroy(run);
    }
    CHECK_MSG(rd.n == rc.n && rc.n >= 10 && rc.n <= MAX_STEPS, "switch: %lld steps, cpu %lld",
              (long long)rd.n, (long long)rc.n);
    int64_t at = -1;
    double worst = 0;
    for (int64_t i = 0; i < rc.n && i < rd.n && i < MAX_STEPS; i++) {
        if (at < 0 && rc.mode[i] == MXP_PRECISION_MIXED_BF16) at = i;
        const double r = rel(rd.loss[i], rc.loss[i]);
        if (r > worst) worst = r;
        CHECK_MSG(rd.mode[i] == rc.mode[i] && rd.skip[i] == rc.skip[i] &&
                      rd.scale[i] == rc.scale[i] &&
                      r <= (i == 0 ? (fp8 ? 2e-2 : 1e-4) : fp8 ? 5e-2 : 2.5e-4),
                  "switch step %lld: mode cpu %s dev %s, loss cpu %.9g dev %.9g, scale %g/%g",
                  (long long)i + 1, mxp_precision_name(rc.mode[i]),
                  mxp_precision_name(rd.mode[i]), rc.loss[i], rd.loss[i],
                  (double)rc.scale[i], (double)rd.scale[i]);
    }
    CHECK_MSG(at >= 5 && rc.mode[rc.n - 1] == MXP_PRECISION_MIXED_BF16,
              "switch: the CPU run switched after step %lld", (long long)at + 1);
    CHECK_MSG(st.plans == 2, "switch: %lld device plans (expected 2: the re-plan)",
              (long long)st.plans);
    printf("  switch      %s->bf16  from step %lld on both, %lld steps, worst loss rel diff "
           "%.2e, %lld plans\n", from, (long long)at + 1, (long long)rd.n, worst,
           (long long)st.plans);
}

/* ---- checkpoints across devices ------------------------------------------------ */

/* Run (dev) to the end: into r, the final state saved to final. */
static void run_through(const mxp_config *c, rec *r, const char *resume, const char *final) {
    mxp_error err = {0};
    mxp_run *run = NULL;
    CHECK_OK(open_run(c, r, resume, 0, &run, &err), &err);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    if (final) CHECK_OK(mxp_run_save(run, final, &err), &err);
    mxp_run_destroy(run);
}

/* Stop after step k and save the checkpoint to path. */
static void run_to(const mxp_config *c, int64_t k, const char *path) {
    mxp_error err = {0};
    mxp_run *run = NULL;
    static rec r;
    CHECK_OK(open_run(c, &r, NULL, 0, &run, &err), &err);
    if (!run) return;
    r.stop_at = k;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    CHECK_OK(mxp_run_save(run, path, &err), &err);
    mxp_run_destroy(run);
}

static void check_ckpt(const char *prec) {
    mxp_error err = {0};
    mxp_config cc, cd;
    CHECK_OK(make_cfg(WM, prec, "cpu", cpu_extra(prec, NULL), &cc, &err), &err);
    CHECK_OK(make_cfg(WM, prec, "cuda", NULL, &cd, &err), &err);
    const bool fp32 = strcmp(prec, "fp32") == 0, fp8 = strcmp(prec, "fp8") == 0;
    const double tol1 = fp8 ? 2e-2 : fp32 ? 1e-6 : 1e-4, toln = fp8 ? 5e-2 : 2e-3;
    char ks[256], kc[256], fa[256], fb[256];
    snprintf(ks, sizeof ks, "%s/dev-k-%s.safetensors", g_dir, prec);
    snprintf(kc, sizeof kc, "%s/cpu-k-%s.safetensors", g_dir, prec);
    snprintf(fa, sizeof fa, "%s/dev-straight-%s.safetensors", g_dir, prec);
    snprintf(fb, sizeof fb, "%s/dev-resumed-%s.safetensors", g_dir, prec);
    static rec straight, resumed, cpu_straight, on_cpu, on_dev;
    run_through(&cd, &straight, NULL, fa);
    const int64_t total = straight.n, k = total / 2 + 1;
    CHECK_MSG(total >= 8 && total <= MAX_STEPS, "%lld steps", (long long)total);
    run_to(&cd, k, ks);
    /* device -> device: bit for bit */
    run_through(&cd, &resumed, ks, fb);
    CHECK_MSG(resumed.n == total - k, "%s: resumed for %lld steps, expected %lld", prec,
              (long long)resumed.n, (long long)(total - k));
    int64_t diff = -1;
    for (int64_t i = 0; i < resumed.n && diff < 0; i++)
        if (memcmp(&resumed.loss[i], &straight.loss[k + i], sizeof(double)) != 0 ||
            resumed.scale[i] != straight.scale[k + i])
            diff = i;
    CHECK_MSG(diff < 0, "%s: device resume at %lld: step %lld differs (%.17g vs %.17g)", prec,
              (long long)k, (long long)(k + diff + 1), resumed.loss[diff < 0 ? 0 : diff],
              straight.loss[k + (diff < 0 ? 0 : diff)]);
    CHECK_MSG(test_same_tensors(fa, fb), "%s: device resume: final tensors differ", prec);
    /* device -> CPU: the CPU's first loss is a forward of the device's weights */
    run_through(&cc, &on_cpu, ks, NULL);
    CHECK_MSG(on_cpu.n == total - k, "%s: CPU resume ran %lld steps", prec, (long long)on_cpu.n);
    double r1 = rel(on_cpu.loss[0], straight.loss[k]);
    CHECK_MSG(r1 <= tol1, "%s: CPU resume of a device checkpoint: first loss %.9g, device %.9g "
              "(rel %.2e)", prec, on_cpu.loss[0], straight.loss[k], r1);
    for (int64_t i = 0; i < on_cpu.n; i++)
        CHECK_MSG(isfinite(on_cpu.loss[i]) && rel(on_cpu.loss[i], straight.loss[k + i]) <= toln,
                  "%s: CPU continuation step %lld: %.9g vs device %.9g", prec,
                  (long long)(k + i + 1), on_cpu.loss[i], straight.loss[k + i]);
    /* CPU -> device */
    run_through(&cc, &cpu_straight, NULL, NULL);
    run_to(&cc, k, kc);
    run_through(&cd, &on_dev, kc, NULL);
    CHECK_MSG(on_dev.n == total - k && cpu_straight.n == total, "%s: %lld / %lld steps", prec,
              (long long)on_dev.n, (long long)cpu_straight.n);
    double r2 = rel(on_dev.loss[0], cpu_straight.loss[k]);
    CHECK_MSG(r2 <= tol1, "%s: device resume of a CPU checkpoint: first loss %.9g, CPU %.9g "
              "(rel %.2e)", prec, on_dev.loss[0], cpu_straight.loss[k], r2);
    for (int64_t i = 0; i < on_dev.n; i++)
        CHECK_MSG(rel(on_dev.loss[i], cpu_straight.loss[k + i]) <= toln,
                  "%s: device continuation step %lld: %.9g vs CPU %.9g", prec,
                  (long long)(k + i + 1), on_dev.loss[i], cpu_straight.loss[k + i]);
    printf("  checkpoints %-10s resume at %lld of %lld: device->device bit-exact, "
           "device->CPU rel %.2e, CPU->device rel %.2e\n", prec, (long long)k, (long long)total,
           r1, r2);
}

/* ---- refusals ------------------------------------------------------------------ */

static void refused(workload w, const char *prec, const char *const *extra, const char *needle) {
    mxp_error err = {0};
    mxp_config c;
    CHECK_OK(make_cfg(w, prec, "cuda", extra, &c, &err), &err);
    mxp_run *run = NULL;
    static rec r;
    mxp_status s = open_run(&c, &r, NULL, 0, &run, &err);
    CHECK_MSG(s == MXP_ERR_UNSUPPORTED && !run && strstr(err.msg, needle) &&
                  strstr(err.msg, "accepted"),
              "expected a refusal naming '%s': status %d, '%s'", needle, (int)s, err.msg);
    if (run) mxp_run_destroy(run);
}

static void no_hook(void *user, int64_t step, float *g, size_t n) {
    (void)user;
    (void)step;
    (void)g;
    (void)n;
}

static void test_refusals(void) {
    const char *per_layer[] = {"training.loss_scale.per_layer=true", NULL};
    const char *fp32l[] = {"training.precision_fp32_layers=first", NULL};
    const char *ens[] = {"model.ensemble=2", NULL};
    const char *gauss[] = {"model.head=gaussian", NULL};
    const char *drop[] = {"model.layers=[linear:32, gelu, dropout:0.1, linear]", NULL};
    const char *res[] = {"model.layers=[linear:32, gelu, linear:32, gelu, residual:2, linear]",
                         NULL};
    refused(WM, "bf16", NULL, "precision bf16");
    refused(WM, "fp16", NULL, "precision fp16");
    refused(WM, "auto", NULL, "precision=auto");
    refused(WM, "mixed_fp16", per_layer, "per-layer loss scaling");
    refused(WM, "mixed_bf16", fp32l, "FP32");
    refused(WM, "fp32", ens, "ensemble");
    refused(WM, "fp32", gauss, "loss gaussian");
    refused(GPT, "fp32", NULL, "GPT");
    refused(WM, "fp32", drop, "(dropout)");
    refused(WM, "fp32", res, "(residual)");
    mxp_error err = {0};
    mxp_config c;
    static rec r;
    mxp_run *run = NULL;
    /* a gradient hook set after create: refused by the step */
    CHECK_OK(make_cfg(WM, "fp32", "cuda", NULL, &c, &err), &err);
    CHECK_OK(open_run(&c, &r, NULL, 0, &run, &err), &err);
    if (run) {
        mxp_trainer_set_grad_hook(mxp_run_trainer(run), no_hook, NULL);
        mxp_status s = mxp_run_train(run, 0, 0, &err);
        CHECK_MSG(s == MXP_ERR_UNSUPPORTED && strstr(err.msg, "gradient hook"),
                  "a gradient hook on the device: status %d '%s'", (int)s, err.msg);
        mxp_run_destroy(run);
    }
    /* without the emulated table: this build names why (no CUDA, no GPU) */
    trainer_device_override(NULL, NULL);
    int n = 0;
    mxp_error q = {0};
    if (mxp_cuda_device_count(&n, &q) != MXP_OK || n == 0) {
        CHECK_OK(make_cfg(WM, "fp32", "cuda", NULL, &c, &err), &err);
        mxp_status s = open_run(&c, &r, NULL, 0, &run, &err);
        CHECK_MSG(s != MXP_OK && !run && strstr(err.msg, "CUDA"),
                  "training.device=cuda without a device: status %d '%s'", (int)s, err.msg);
        if (run) mxp_run_destroy(run);
    }
    trainer_device_override(&g_tab, &g_emu);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_rundev_XXXXXX");
    if (!mkdtemp(g_dir)) return 2;
    write_data();
    g_tab = emu_fp8_table();
    trainer_device_override(&g_tab, &g_emu);
    test_refusals();
    /* MIXPREC_TEST_QUICK (the reference-kernel, mock-device and sanitizer
     * passes of scripts/test.sh, after the release pass ran all of it):
     * each mode, workload, optimizer, re-plan, micro-batching and
     * checkpoint direction once */
    const bool quick = test_quick();
    if (!quick) {
        compare(WM, "fp32", 0);
        compare(WM, "mixed_bf16", 0);
        compare(WM, "mixed_fp16", 0);
    }
    compare(WM, "mixed_fp16", 16);
    compare(CL, "fp32", 0);
    if (!quick) compare(CL, "mixed_fp16", 0);
    /* SGD (momentum, nesterov, L2 weight decay: master + momentum per pull) */
    const char *sgd[] = {"training.optimizer=sgd", "training.momentum=0.9",
                         "training.nesterov=true", "training.weight_decay=0.01", NULL};
    if (!quick) compare_x(WM, "mixed_fp16", 0, sgd, 1, 2, "wm sgd");
    compare_x(CL, "mixed_bf16", 0, sgd, 1, 2, "cl sgd");
    /* three micro-batches per step: the NaN in the 2nd step's 2nd one */
    const char *accum[] = {"training.grad_accum_steps=3", "training.batch_size=8", NULL};
    compare_x(WM, "mixed_fp16", 0, accum, 3, 3, "wm accum3");
    if (!quick) compare_x(WM, "fp32", 0, accum, 3, 3, "wm accum3");
    /* fp8: FP8 hidden layers, BF16 ends; a pull also copies the FP8
     * scaling state (master, m, v, fp8 state) */
    compare_x(WM, "fp8", 0, NULL, 1, 4, "wm fp8");
    test_switch("mixed_fp16");
    test_switch("fp8"); /* out of fp8: the FP8 state pulled, then a BF16 plan */
    if (!quick) check_ckpt("fp32");
    check_ckpt("fp8");
    check_ckpt("mixed_fp16");
    trainer_device_override(NULL, NULL);
    CHECK_MSG(g_emu.live == 0, "%lld emulated buffers leaked", (long long)g_emu.live);
    free(g_x);
    test_rm_rf(g_dir);
    return test_finish("test_run_device_emu");
}
