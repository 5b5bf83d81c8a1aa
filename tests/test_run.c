/* tests/test_run.c: the run object (mixprec/run.h).
 *
 *   - resume never lies: for the world model, the classifier and the GPT,
 *     in every precision mode (MIXPREC_TEST_QUICK=1: fp32 and one 16-bit
 *     mode per workload), a run stopped at step k (mxp_run_request_stop
 *     from the progress callback) and resumed from its run directory gives
 *     the losses of an uninterrupted run bit for bit, and its final state
 *     (every tensor of a checkpoint: weights, optimizer moments) is
 *     byte-identical. The oracle is the straight run;
 *   - run directories never mix: a new run into a directory holding
 *     another run's checkpoints is refused (MXP_ERR_STATE, the message
 *     names --resume and output.dir) and nothing on disk changes; resuming
 *     a finished run trains nothing and changes nothing; another run's
 *     checkpoint is not resumed into this run's directory (MXP_ERR_STATE);
 *     a checkpoint of another workload or of other data is refused
 *     (MXP_ERR_CONFIG);
 *   - a fault-injection window that passed before the checkpoint is not
 *     re-armed by the resume (the same bit-exact comparison, with faults);
 *   - a stop request belongs to the train() call it stopped: train()
 *     again on the same run continues bit for bit (the straight run is the
 *     oracle); one made between calls stops the next call after one step;
 *   - the summary (mxp_run_summary_json) carries its schema and the core
 *     fields, the guard's state included, for every workload;
 *   - mxp_run_resume_config: checkpoint, stored config, saved precision,
 *     output.dir of a run directory;
 *   - the stats JSON holds the fields it says (checked by a tiny scan);
 *   - mxp_obs_run_observer: the run's SQLite store, read back through the
 *     store reader, holds every step with the losses the run reported.
 *
 * The classifier reads a tiny IDX dataset written here and the GPT a small
 * text written here, so the test needs no installed data.
 */
#include <mixprec/mixprec.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char g_dir[128];
static bool g_quick;

#define MAX_STEPS 512

/* Losses seen by the progress callback; stops the run after step stop_at. */
typedef struct rec {
    double loss[MAX_STEPS];
    int64_t n, stop_at;
    mxp_run *run;
} rec;

static void on_progress(void *user, const mxp_run_progress *p) {
    rec *r = user;
    if (r->n < MAX_STEPS) r->loss[r->n++] = p->result->loss;
    if (r->stop_at > 0 && p->step == r->stop_at) mxp_run_request_stop(r->run);
}

/* ---- data files ------------------------------------------------------------- */

static void write_data(void) {
    char p[256];
    snprintf(p, sizeof p, "%s/fm", g_dir);
    CHECK_MSG(test_write_fashion_idx(p), "writing the IDX files of %s", p);
    snprintf(p, sizeof p, "%s/text.txt", g_dir);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    static const char *const words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ",
                                        "lazy ", "dogs.\n"};
    for (uint32_t i = 0; i < 600; i++) fputs(words[(i * 2654435761u >> 13) % 8], f);
    CHECK(fclose(f) == 0);
}

/* ---- configs ---------------------------------------------------------------- */

static mxp_status make_cfg(mxp_workload w, mxp_precision p, const char *out, const char *extra,
                           mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    char kv[4][300];
    snprintf(kv[0], sizeof kv[0], "training.precision=%s", mxp_precision_name(p));
    snprintf(kv[1], sizeof kv[1], "output.dir=%s/%s", g_dir, out);
    snprintf(kv[2], sizeof kv[2], "data.fashion_mnist_dir=%s/fm", g_dir);
    snprintf(kv[3], sizeof kv[3], "data.text_file=%s/text.txt", g_dir);
    const char *common[] = {kv[0], kv[1], "training.epochs=2", "checkpoint.every_steps=4"};
    const char *wm[] = {"model.workload=world_model", "data.trajectories=12",
                        "data.episode_length=40", "model.hidden=16", "model.depth=1",
                        "training.batch_size=32"};
    const char *cl[] = {"model.workload=classifier", kv[2], "model.hidden=16", "model.depth=1",
                        "training.batch_size=16", "training.grad_accum_steps=2"};
    const char *gp[] = {"model.workload=gpt", kv[3], "gpt.layers=1", "gpt.embd=16",
                        "gpt.heads=2", "gpt.context=8", "training.batch_size=4",
                        "data.train_subset=48", "data.test_subset=8"};
    const char **spec = w == MXP_WORKLOAD_WORLD_MODEL ? wm : w == MXP_WORKLOAD_CLASSIFIER ? cl : gp;
    size_t ns = w == MXP_WORKLOAD_WORLD_MODEL ? 6 : w == MXP_WORKLOAD_CLASSIFIER ? 6 : 9;
    for (size_t i = 0; s == MXP_OK && i < sizeof common / sizeof common[0]; i++)
        s = mxp_config_apply_override(b, common[i], err);
    for (size_t i = 0; s == MXP_OK && i < ns; i++) s = mxp_config_apply_override(b, spec[i], err);
    if (s == MXP_OK && extra) s = mxp_config_apply_override(b, extra, err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s;
}

/* Create a run of cfg recording losses into r (resume: NULL or a path). */
static mxp_status open_run(const mxp_config *cfg, rec *r, const char *resume, mxp_run **out,
                           mxp_error *err) {
    mxp_run_options o = mxp_run_options_default();
    o.progress = on_progress;
    o.progress_user = r;
    o.resume = resume;
    mxp_status s = mxp_run_create(cfg, &o, out, err);
    if (r) r->run = *out;
    return s;
}

/* Straight run vs stop at k + resume from the run directory (extra: one
 * more override, named by `suffix` in the directory names). */
static void check_resume(mxp_workload w, mxp_precision p, const char *extra, const char *suffix) {
    char tag[48], dir_a[64], dir_b[64], path[256], fa[256], fb[256];
    snprintf(tag, sizeof tag, "%s-%s%s", w == MXP_WORKLOAD_WORLD_MODEL ? "wm"
                                         : w == MXP_WORKLOAD_CLASSIFIER ? "cl" : "gpt",
             mxp_precision_name(p), suffix);
    snprintf(dir_a, sizeof dir_a, "%s-straight", tag);
    snprintf(dir_b, sizeof dir_b, "%s-resumed", tag);
    mxp_error err = {0};
    mxp_config ca, cb;
    CHECK_OK(make_cfg(w, p, dir_a, extra, &ca, &err), &err);
    CHECK_OK(make_cfg(w, p, dir_b, extra, &cb, &err), &err);
    static rec ra, rb1, rb2;
    memset(&ra, 0, sizeof ra);
    memset(&rb1, 0, sizeof rb1);
    memset(&rb2, 0, sizeof rb2);
    mxp_run *run = NULL;
    CHECK_OK(open_run(&ca, &ra, NULL, &run, &err), &err);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    snprintf(fa, sizeof fa, "%s/%s/final.safetensors", g_dir, dir_a);
    CHECK_OK(mxp_run_save(run, fa, &err), &err);
    mxp_run_destroy(run);
    const int64_t total = ra.n, k = total / 2 + 1; /* not a multiple of every_steps */
    CHECK_MSG(total >= 8, "%s: only %lld steps", tag, (long long)total);

    rb1.stop_at = k;
    CHECK_OK(open_run(&cb, &rb1, NULL, &run, &err), &err);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_info st;
    mxp_run_stats(run, &st);
    CHECK_MSG(st.stopped && st.training_steps == k, "%s: stopped=%d at %lld, asked %lld", tag,
              st.stopped, (long long)st.training_steps, (long long)k);
    mxp_run_destroy(run);

    snprintf(path, sizeof path, "%s/%s", g_dir, dir_b);
    CHECK_OK(open_run(&cb, &rb2, path, &run, &err), &err);
    if (!run) return;
    mxp_run_stats(run, &st);
    CHECK(st.resumed && !st.finished_before_resume && st.training_steps == k);
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    snprintf(fb, sizeof fb, "%s/%s/final.safetensors", g_dir, dir_b);
    CHECK_OK(mxp_run_save(run, fb, &err), &err);
    mxp_run_destroy(run);

    CHECK_MSG(rb1.n == k && rb1.n + rb2.n == total, "%s: %lld + %lld steps, straight %lld", tag,
              (long long)rb1.n, (long long)rb2.n, (long long)total);
    int64_t diff = -1;
    for (int64_t i = 0; i < total && i < rb1.n + rb2.n && diff < 0; i++) {
        double b = i < rb1.n ? rb1.loss[i] : rb2.loss[i - rb1.n];
        if (memcmp(&b, &ra.loss[i], sizeof b) != 0) diff = i;
    }
    CHECK_MSG(diff < 0, "%s: loss of step %lld differs after resume at %lld", tag,
              (long long)diff + 1, (long long)k);
    CHECK_MSG(test_same_tensors(fa, fb), "%s: final tensors differ", tag);
}

/* ---- stop requests ---------------------------------------------------------- */

/* A stop request belongs to the train() call it stopped: stop at k, then
 * train() again on the same run continues the interrupted call and gives
 * the straight run's losses bit for bit (the oracle); a request made
 * between calls stops the next call after exactly one step, and the call
 * after that runs to the end. */
static void test_stop_rule(void) {
    mxp_error err = {0};
    mxp_config ca, cb;
    CHECK_OK(make_cfg(MXP_WORKLOAD_WORLD_MODEL, MXP_PRECISION_MIXED_FP16, "stop-straight", NULL,
                      &ca, &err), &err);
    CHECK_OK(make_cfg(MXP_WORKLOAD_WORLD_MODEL, MXP_PRECISION_MIXED_FP16, "stop-again", NULL, &cb,
                      &err), &err);
    static rec ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    mxp_run *run = NULL;
    CHECK_OK(open_run(&ca, &ra, NULL, &run, &err), &err);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_destroy(run);
    const int64_t total = ra.n, k = total / 3 + 1;
    CHECK_MSG(total >= 8, "stop rule: only %lld steps", (long long)total);

    rb.stop_at = k;
    CHECK_OK(open_run(&cb, &rb, NULL, &run, &err), &err);
    if (!run) return;
    mxp_run_info st;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_stats(run, &st);
    CHECK_MSG(st.stopped && st.training_steps == k, "first call: stopped=%d after %lld, asked %lld",
              st.stopped, (long long)st.training_steps, (long long)k);
    rb.stop_at = 0;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_stats(run, &st);
    CHECK_MSG(!st.stopped && st.finished && st.training_steps == total,
              "second call: stopped=%d finished=%d after %lld of %lld steps", st.stopped,
              st.finished, (long long)st.training_steps, (long long)total);
    CHECK_MSG(rb.n == total, "stop + train again: %lld steps, straight %lld", (long long)rb.n,
              (long long)total);
    int64_t diff = -1;
    for (int64_t i = 0; i < total && i < rb.n && diff < 0; i++)
        if (memcmp(&rb.loss[i], &ra.loss[i], sizeof(double)) != 0) diff = i;
    CHECK_MSG(diff < 0, "stop at %lld + train again: loss of step %lld differs", (long long)k,
              (long long)diff + 1);

    /* between calls: the next call (a new one: 1 epoch) stops after one step */
    mxp_run_request_stop(run);
    CHECK_OK(mxp_run_train(run, 1, 0, &err), &err);
    mxp_run_stats(run, &st);
    CHECK_MSG(st.stopped && st.training_steps == total + 1,
              "request between calls: stopped=%d after %lld steps, expected %lld", st.stopped,
              (long long)st.training_steps, (long long)total + 1);
    CHECK_OK(mxp_run_train(run, 1, 0, &err), &err);
    mxp_run_stats(run, &st);
    /* the interrupted one-epoch call runs to its end (cfg: 2 epochs) */
    CHECK_MSG(!st.stopped && st.training_steps == total + total / 2,
              "after the honoured request: stopped=%d after %lld steps, expected %lld",
              st.stopped, (long long)st.training_steps, (long long)(total + total / 2));
    mxp_run_destroy(run);
}

/* ---- the summary ------------------------------------------------------------ */

/* mxp_run_summary_json: for every workload the object carries its schema
 * and the core fields of docs/json.md, the guard's state included (a
 * tiny scan for each key; python/tests checks it against the CLI's file
 * with a JSON parser), the evaluation under the split's name, and -1 when
 * the buffer is too small. */
static void test_summary(void) {
    static const char *const core[] = {
        "\"schema\":\"mixprec.summary/1\"", "\"workload\":", "\"run_id\":", "\"precision\":",
        "\"emulated\":", "\"kill_switch\":", "\"fp16_enabled_runtime\":",
        "\"training_steps\":", "\"optimizer_steps\":", "\"skipped_steps\":",
        "\"overflow_rate\":", "\"current_scale\":", "\"epochs\":2,", "\"batch_size\":",
        "\"grad_accum_steps\":", "\"seed\":", "\"memory_bytes\":{", "\"fp32_layers\":",
        "\"fp32_layers_kept\":[", "\"fp16_accumulate\":", "\"final_train_loss\":",
        "\"guard\":{", "\"world_size\":1,", "\"wall_time_s\":", "\"samples\":",
        "\"samples_per_s\":"};
    const mxp_workload wls[3] = {MXP_WORKLOAD_WORLD_MODEL, MXP_WORKLOAD_CLASSIFIER,
                                 MXP_WORKLOAD_GPT};
    const char *names[3] = {"world_model", "classifier", "gpt"};
    for (int w = 0; w < 3; w++) {
        mxp_error err = {0};
        mxp_config cfg;
        char dir[64];
        snprintf(dir, sizeof dir, "summary-%s", names[w]);
        CHECK_OK(make_cfg(wls[w], MXP_PRECISION_MIXED_FP16, dir, NULL, &cfg, &err), &err);
        mxp_run *run = NULL;
        static rec r;
        memset(&r, 0, sizeof r);
        CHECK_OK(open_run(&cfg, &r, NULL, &run, &err), &err);
        if (!run) continue;
        CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        mxp_run_eval ev;
        CHECK_OK(mxp_run_evaluate(run, &ev, &err), &err);
        static char js[1 << 16];
        int n = mxp_run_summary_json(run, &ev, NAN, js, sizeof js);
        CHECK_MSG(n > 0 && (size_t)n == strlen(js) && js[0] == '{' && js[n - 1] == '}',
                  "%s: summary length %d", names[w], n);
        for (size_t k = 0; n > 0 && k < sizeof core / sizeof core[0]; k++)
            CHECK_MSG(strstr(js, core[k]) != NULL, "%s: summary lacks %s", names[w], core[k]);
        char key[96];
        snprintf(key, sizeof key, "\"workload\":\"%s\"", names[w]);
        CHECK_MSG(n > 0 && strstr(js, key), "%s: %s", names[w], js);
        snprintf(key, sizeof key, "\"%s_loss\":", ev.name);
        CHECK_MSG(n > 0 && strstr(js, key), "%s: no %s", names[w], key);
        CHECK(mxp_run_summary_json(run, NULL, NAN, js, sizeof js) > 0 && !strstr(js, key));
        CHECK(mxp_run_summary_json(run, &ev, NAN, js, 64) == -1);
        CHECK(mxp_run_summary_json(NULL, &ev, NAN, js, sizeof js) == -1);
        mxp_run_destroy(run);
    }
}

/* ---- the config of a resume ------------------------------------------------- */

/* mxp_run_resume_config (the CLI's --resume and Python's from_checkpoint):
 * a run directory gives its newest checkpoint, the stored config, the
 * saved precision and output.dir = the directory; sources applied after it
 * win; a path without checkpoints is an error naming it. */
static void test_resume_config(void) {
    char dir[256], ckpt[MXP_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/wm-mixed_fp16-straight", g_dir);
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    if (!b) return;
    CHECK_OK(mxp_run_resume_config(dir, b, ckpt, sizeof ckpt, &err), &err);
    CHECK_OK(mxp_config_apply_override(b, "training.lr=0.125", &err), &err);
    mxp_config cfg;
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    char want[300];
    snprintf(want, sizeof want, "%s/checkpoints/ckpt-", dir);
    CHECK_MSG(strncmp(ckpt, want, strlen(want)) == 0, "checkpoint %s, want %s*", ckpt, want);
    CHECK_MSG(strcmp(cfg.output_dir, dir) == 0, "output.dir %s", cfg.output_dir);
    CHECK(cfg.workload == MXP_WORKLOAD_WORLD_MODEL && cfg.precision == MXP_PRECISION_MIXED_FP16);
    CHECK(cfg.epochs == 2 && cfg.trainer.optim.lr == 0.125f);
    /* the chosen file resumes like the directory, without moving output.dir */
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    if (!b) return;
    CHECK_OK(mxp_config_apply_override(b, "output.dir=elsewhere", &err), &err);
    CHECK_OK(mxp_run_resume_config(ckpt, b, NULL, 0, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    CHECK_MSG(strcmp(cfg.output_dir, dir) == 0, "file: output.dir %s (stored: %s)",
              cfg.output_dir, dir);
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    if (!b) return;
    snprintf(want, sizeof want, "%s/no-such-run", g_dir);
    err = (mxp_error){0};
    CHECK(mxp_run_resume_config(want, b, ckpt, sizeof ckpt, &err) != MXP_OK &&
          strstr(err.msg, "no-such-run") != NULL);
    CHECK(mxp_run_resume_config(NULL, b, NULL, 0, &err) == MXP_ERR_INVALID_ARG);
    mxp_config_builder_destroy(b);
}

/* ---- run directories ------------------------------------------------------ */

/* A listing of dir (recursive): names, sizes and modification times. */
static void listing(const char *dir, char *out, size_t n) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) != 0) continue;
        size_t at = strlen(out);
        snprintf(out + at, n - at, "%s %lld %lld.%09ld\n", p, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        if (S_ISDIR(st.st_mode)) listing(p, out, n);
    }
    closedir(d);
}

static void test_run_dirs(void) {
    mxp_error err = {0};
    mxp_config cfg;
    CHECK_OK(make_cfg(MXP_WORKLOAD_WORLD_MODEL, MXP_PRECISION_FP32, "wm-fp32-straight", NULL, &cfg,
                      &err), &err);
    static char before[16384], after[16384];
    char dir[256];
    snprintf(dir, sizeof dir, "%s/wm-fp32-straight", g_dir);
    before[0] = after[0] = '\0';
    listing(dir, before, sizeof before);
    CHECK(strstr(before, "run.json") && strstr(before, "ckpt-"));

    /* a second run into the used directory: refused, nothing written */
    mxp_run *run = NULL;
    mxp_status s = open_run(&cfg, NULL, NULL, &run, &err);
    CHECK(s == MXP_ERR_STATE && run == NULL);
    CHECK_MSG(strstr(err.msg, "--resume") && strstr(err.msg, "output.dir"), "message: %s",
              err.msg);
    listing(dir, after, sizeof after);
    CHECK_MSG(strcmp(before, after) == 0, "the refused run changed the directory");

    /* resuming the finished run: nothing to train, nothing written */
    err = (mxp_error){0};
    CHECK_OK(open_run(&cfg, NULL, dir, &run, &err), &err);
    if (run) {
        mxp_run_info st;
        mxp_run_stats(run, &st);
        CHECK(st.finished_before_resume && st.resumed && st.run_id[0]);
        int64_t steps = st.training_steps;
        CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        mxp_run_stats(run, &st);
        CHECK(st.training_steps == steps);
        char js[4096];
        int n = mxp_run_stats_json(run, js, sizeof js);
        CHECK(n > 0 && js[0] == '{' && js[n - 1] == '}');
        CHECK(strstr(js, "\"finished_before_resume\":true") != NULL);
        CHECK(strstr(js, "\"workload\":\"world_model\"") != NULL);
        CHECK(mxp_run_stats_json(run, js, 8) == -1);
        mxp_run_destroy(run);
    }
    after[0] = '\0';
    listing(dir, after, sizeof after);
    CHECK_MSG(strcmp(before, after) == 0, "resuming a finished run changed the directory");

    /* another run's checkpoint resumed into this run's directory: refused */
    char other_run[256];
    snprintf(other_run, sizeof other_run, "%s/wm-fp32-resumed", g_dir);
    err = (mxp_error){0};
    s = open_run(&cfg, NULL, other_run, &run, &err);
    CHECK_MSG(s == MXP_ERR_STATE && run == NULL && strstr(err.msg, "mix"), "mixing runs: %d %s",
              (int)s, err.msg);
    after[0] = '\0';
    listing(dir, after, sizeof after);
    CHECK_MSG(strcmp(before, after) == 0, "the refused resume changed the directory");

    /* a checkpoint of another workload, and of other data: refused */
    char gdir[256];
    snprintf(gdir, sizeof gdir, "%s/gpt-fp32-straight", g_dir);
    mxp_config other;
    CHECK_OK(make_cfg(MXP_WORKLOAD_WORLD_MODEL, MXP_PRECISION_FP32, "x1", NULL, &other, &err),
             &err);
    err = (mxp_error){0};
    s = open_run(&other, NULL, gdir, &run, &err);
    CHECK_MSG(s != MXP_OK && run == NULL, "a GPT checkpoint resumed into the world model");
    CHECK_OK(make_cfg(MXP_WORKLOAD_WORLD_MODEL, MXP_PRECISION_FP32, "x2", "data.trajectories=13",
                      &other, &err), &err);
    err = (mxp_error){0};
    s = open_run(&other, NULL, dir, &run, &err);
    CHECK_MSG(s == MXP_ERR_CONFIG && strstr(err.msg, "data"), "other data: %d %s", (int)s,
              err.msg);
}

/* ---- the obs observer ------------------------------------------------------- */

typedef struct store_seen {
    int64_t steps;
    double loss[MAX_STEPS];
} store_seen;

static void on_store_step(void *user, const mxp_obs_step_row *row) {
    store_seen *s = user;
    if (s->steps < MAX_STEPS) s->loss[s->steps] = row->loss;
    s->steps++;
}

/* mxp_obs_run_observer: the SQLite store (read back by its own reader)
 * holds every step of the run with the losses the progress callback saw,
 * and the run ends "finished". */
static void test_observer(void) {
    mxp_error err = {0};
    mxp_config cfg;
    CHECK_OK(make_cfg(MXP_WORKLOAD_GPT, MXP_PRECISION_FP32, "observed", NULL, &cfg, &err), &err);
    CHECK(mxp_mkdirs(cfg.output_dir) == 0);
    mxp_obs *obs = NULL;
    mxp_run_observer ob;
    CHECK_OK(mxp_obs_create(&cfg.obs, cfg.output_dir, NULL, &obs, &err), &err);
    CHECK_OK(mxp_obs_run_observer(obs, &ob, &err), &err);
    static rec r;
    memset(&r, 0, sizeof r);
    mxp_run_options o = mxp_run_options_default();
    o.observer = &ob;
    o.progress = on_progress;
    o.progress_user = &r;
    mxp_run *run = NULL;
    CHECK_OK(mxp_run_create(&cfg, &o, &run, &err), &err);
    if (run) CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_destroy(run);
    mxp_obs_destroy(obs);
    char db[300];
    snprintf(db, sizeof db, "%s/metrics.db", cfg.output_dir);
    static store_seen seen;
    memset(&seen, 0, sizeof seen);
    mxp_obs_run_summary sum;
    CHECK_OK(mxp_obs_store_read(db, NULL, &sum, on_store_step, NULL, &seen, &err), &err);
    CHECK_MSG(seen.steps == r.n && r.n > 0, "store %lld steps, run %lld", (long long)seen.steps,
              (long long)r.n);
    for (int64_t i = 0; i < r.n && i < seen.steps; i++)
        CHECK_CLOSE(seen.loss[i], r.loss[i], 0, 1e-12);
    CHECK_MSG(strcmp(sum.state, "finished") == 0, "store state %s", sum.state);
}

int main(void) {
    g_quick = getenv("MIXPREC_TEST_QUICK") != NULL;
    mxp_log_set_level(MXP_LOG_WARN);
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_run_XXXXXX");
    if (!mkdtemp(g_dir)) return 2;
    write_data();
    const mxp_workload wls[3] = {MXP_WORKLOAD_WORLD_MODEL, MXP_WORKLOAD_CLASSIFIER,
                                 MXP_WORKLOAD_GPT};
    /* the 16-bit mode each workload keeps in the quick list */
    const mxp_precision quick16[3] = {MXP_PRECISION_MIXED_FP16, MXP_PRECISION_MIXED_BF16,
                                      MXP_PRECISION_FP16};
    for (int w = 0; w < 3; w++)
        for (int p = 0; p < MXP_PRECISION_COUNT; p++)
            if (!g_quick || p == MXP_PRECISION_FP32 || p == (int)quick16[w])
                check_resume(wls[w], (mxp_precision)p, NULL, "");
    /* NaN gradients in steps 3..5 (skipped steps): a resume after the
     * window does not re-arm it (the guard counts on from the checkpoint) */
    check_resume(MXP_WORKLOAD_WORLD_MODEL, MXP_PRECISION_MIXED_FP16, "fault.kind=nan", "-fault");
    test_stop_rule();
    test_summary();
    test_resume_config();
    test_run_dirs();
    test_observer();
    test_rm_rf(g_dir);
    return test_finish("test_run");
}
