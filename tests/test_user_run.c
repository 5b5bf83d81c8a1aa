/* tests/test_user_run.c: train on the user's own data and use the model.
 *
 * Data written by NumPy (tests/user_run_cases.py): a world model from an
 * .npz replay buffer of a damped spring (episodes of unequal length), a
 * 3-class classifier and a regressor from safetensors. For each: a run
 * through mxp_run (data.path, model.layers, checkpoints on) must learn
 * (validation loss far below the predict-the-mean baseline; classifier
 * accuracy), the checkpoint must carry what predict needs (the predictor's
 * held-out loss equals the run's bit for bit), and `mixprec predict` output
 * must match a PyTorch nn.Sequential loaded from `mixprec ckpt export
 * --torch` to 1e-5 relative (tests/torch_check.py; it also recomputes the
 * world model's standardisation statistics with NumPy). The in-memory path
 * (mxp_run_options.data) must give the same losses as the file, bit for bit,
 * and needs no data.path (a regressor without either is refused by name).
 * Skips (77) without /usr/bin/python3 + numpy; the torch comparison alone
 * is skipped without torch.
 */
#include <math.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_userrun_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static bool make_config(const char *const *kv, int n, mxp_config *cfg) {
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, &err);
    for (int i = 0; s == MXP_OK && i < n; i++) s = mxp_config_apply_override(b, kv[i], &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, &err);
    mxp_config_builder_destroy(b);
    CHECK_OK(s, &err);
    return s == MXP_OK;
}

/* Train cfg (data from the file, or `mem` in memory); return the held-out
 * evaluation and the losses of the first steps. */
static bool train(const mxp_config *cfg, const mxp_dataset *mem, bool ckpt, mxp_run_eval *ev,
                  double *first_loss) {
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.data = mem;
    o.checkpoints = ckpt;
    mxp_run *run = NULL;
    mxp_status s = mxp_run_create(cfg, &o, &run, &err);
    CHECK_OK(s, &err);
    if (s != MXP_OK) return false;
    CHECK_OK(s = mxp_run_train(run, 0, 0, &err), &err);
    if (s == MXP_OK) CHECK_OK(s = mxp_run_evaluate(run, ev, &err), &err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    *first_loss = info.last_loss;
    mxp_run_destroy(run);
    return s == MXP_OK;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* predict + export --torch through the CLI, then the PyTorch comparison. */
static void check_torch(const char *run_dir, const char *input, const char *replay) {
    const char *pred = path_of("pred.safetensors"), *exp = path_of("export.safetensors");
    CHECK(sh("%s predict %s --input %s --output %s", MXP_CLI_PATH, run_dir, input, pred) == 0);
    CHECK(sh("%s ckpt export %s --torch -o %s", MXP_CLI_PATH, run_dir, exp) == 0);
    int rc = sh("/usr/bin/python3 %s/torch_check.py %s %s %s %s", MXP_TEST_SRC_DIR, exp, input,
                pred, replay ? replay : "");
    CHECK_MSG(rc == 0 || rc == 77, "torch_check.py failed (%d) for %s", rc, run_dir);
}

/* The predictor's held-out loss equals the run's (same precision). */
static void check_predictor(const char *run_dir, const mxp_run_eval *ev, bool cls) {
    mxp_error err = {0};
    mxp_predictor *p = NULL;
    CHECK_OK(mxp_predictor_load(run_dir, -1, &p, &err), &err);
    if (!p) return;
    mxp_run_eval pe;
    CHECK_OK(mxp_predictor_evaluate(p, NULL, &pe, &err), &err);
    CHECK_MSG(pe.loss == ev->loss, "%s: predictor loss %.9g, run %.9g", run_dir, pe.loss,
              ev->loss);
    if (cls) CHECK(pe.accuracy == ev->accuracy);
    mxp_predictor_destroy(p);
}

static void test_world_model(void) {
    char dp[600], od[600];
    snprintf(dp, sizeof dp, "data.path=%s", path_of("spring.npz"));
    snprintf(od, sizeof od, "output.dir=%s", path_of("wm"));
    const char *kv[] = {"model.workload=world_model", dp, od, "training.epochs=20",
                        "training.batch_size=32", "training.lr=3e-3",
                        "model.layers=[linear:64, gelu, linear:64, gelu, linear]"};
    mxp_config cfg;
    if (!make_config(kv, 7, &cfg)) return;
    mxp_run_eval ev;
    double last;
    if (!train(&cfg, NULL, true, &ev, &last)) return;
    printf("world model (damped spring): val loss %.6g (standardised targets; mean baseline ~1)\n",
           ev.loss);
    CHECK_MSG(ev.loss < 0.05, "world model val loss %g: did not learn", ev.loss);
    check_predictor(path_of("wm"), &ev, false);
    check_torch(path_of("wm"), path_of("pred_wm.npz"), path_of("spring.npz"));

    /* the same arrays in memory: the same run, bit for bit */
    mxp_error err = {0};
    mxp_dataset *file = NULL, *mem = NULL;
    CHECK_OK(mxp_dataset_read(path_of("spring.npz"), &file, &err), &err);
    CHECK_OK(mxp_dataset_create(&mem, &err), &err);
    for (int i = 0; file && mem && i < mxp_dataset_num_arrays(file); i++) {
        const mxp_array *a = mxp_dataset_array(file, i);
        CHECK_OK(mxp_dataset_add(mem, a->name, a->dtype, a->ndim, a->shape, a->data, &err), &err);
    }
    mxp_dataset_destroy(file);
    const char *kv2[] = {"model.workload=world_model", dp, "training.epochs=2",
                         "training.batch_size=32", "checkpoint.enabled=false",
                         "model.layers=[linear:16, tanh, linear]"};
    mxp_config c2;
    mxp_run_eval e_file, e_mem;
    double l_file = 0, l_mem = 1;
    if (mem && make_config(kv2, 6, &c2) && train(&c2, NULL, false, &e_file, &l_file)) {
        snprintf(c2.wl.data_path, sizeof c2.wl.data_path, "none");
        if (train(&c2, mem, false, &e_mem, &l_mem)) {
            CHECK_MSG(l_file == l_mem && e_file.loss == e_mem.loss,
                      "in memory: last loss %.9g val %.9g; file: %.9g %.9g", l_mem, e_mem.loss,
                      l_file, e_file.loss);
        }
    }
    mxp_dataset_destroy(mem);
}

static void test_supervised(bool cls) {
    char dp[600], od[600];
    snprintf(dp, sizeof dp, "data.path=%s", path_of(cls ? "cls3.safetensors" : "reg.safetensors"));
    snprintf(od, sizeof od, "output.dir=%s", path_of(cls ? "cls" : "reg"));
    const char *kv[] = {cls ? "model.workload=classifier" : "model.workload=regressor", dp, od,
                        "training.epochs=30", "training.batch_size=16", "training.lr=3e-3",
                        "data.val_fraction=0.2",
                        cls ? "model.layers=[linear:32, relu, layernorm, linear]"
                            : "model.layers=[linear:64, tanh, linear:32, gelu, linear]"};
    mxp_config cfg;
    if (!make_config(kv, 8, &cfg)) return;
    mxp_run_eval ev;
    double last;
    if (!train(&cfg, NULL, true, &ev, &last)) return;
    if (cls) {
        printf("classifier (3 blobs): val loss %.6g accuracy %.4f\n", ev.loss, ev.accuracy);
        /* the blobs overlap a little: the Bayes accuracy is about 0.95 */
        CHECK_MSG(ev.accuracy > 0.85 && ev.loss < 0.4, "classifier: loss %g accuracy %g",
                  ev.loss, ev.accuracy);
    } else {
        /* the targets' variance is about 0.3 each: a mean predictor scores ~0.3 */
        printf("regressor: val loss %.6g (mean baseline ~0.3)\n", ev.loss);
        CHECK_MSG(ev.loss < 0.03, "regressor val loss %g: did not learn", ev.loss);
    }
    check_predictor(path_of(cls ? "cls" : "reg"), &ev, cls);
    check_torch(path_of(cls ? "cls" : "reg"),
                path_of(cls ? "pred_x.safetensors" : "pred_r.npz"), NULL);
}

/* x_val/y_val are the held-out split; without them data.val_fraction
 * splits the rows (batch 1: samples per epoch = training rows). */
static void test_split(void) {
    mxp_error err = {0};
    float x[60 * 3];
    int64_t y[60];
    for (int i = 0; i < 60 * 3; i++) x[i] = (float)((i * 7) % 11) * 0.1f;
    for (int i = 0; i < 60; i++) y[i] = i % 4;
    const int64_t xs[2] = {50, 3}, ys[1] = {50}, xvs[2] = {10, 3}, yvs[1] = {10};
    for (int with_val = 0; with_val < 2; with_val++) {
        mxp_dataset *d = NULL;
        CHECK_OK(mxp_dataset_create(&d, &err), &err);
        if (!d) return;
        CHECK_OK(mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, xs, x, &err), &err);
        CHECK_OK(mxp_dataset_add(d, "y", MXP_ARRAY_I64, 1, ys, y, &err), &err);
        if (with_val) {
            CHECK_OK(mxp_dataset_add(d, "x_val", MXP_ARRAY_F32, 2, xvs, x + 150, &err), &err);
            CHECK_OK(mxp_dataset_add(d, "y_val", MXP_ARRAY_I64, 1, yvs, y + 50, &err), &err);
        }
        const char *kv[] = {"model.workload=classifier", "training.batch_size=1",
                            "training.epochs=1", "data.val_fraction=0.2",
                            "checkpoint.enabled=false", "model.layers=[linear:8, relu, linear]"};
        mxp_config cfg;
        mxp_run_options o = mxp_run_options_default();
        o.data = d;
        mxp_run *run = NULL;
        if (make_config(kv, 6, &cfg)) CHECK_OK(mxp_run_create(&cfg, &o, &run, &err), &err);
        mxp_dataset_destroy(d);
        if (!run) return;
        mxp_run_info info;
        mxp_run_stats(run, &info);
        CHECK_MSG(info.samples_per_epoch == (with_val ? 50 : 40),
                  "with_val=%d: %lld training rows", with_val, (long long)info.samples_per_epoch);
        mxp_run_destroy(run);
    }
}

/* A regressor on arrays in memory needs no data.path: the config resolves
 * without it, mxp_run_create trains on mxp_run_options.data, and without
 * either it refuses with MXP_ERR_CONFIG naming both ways to give data. */
static void test_regressor_without_path(void) {
    mxp_error err = {0};
    float x[40 * 3], y[40 * 2];
    for (int i = 0; i < 40 * 3; i++) x[i] = (float)((i * 5) % 13) * 0.1f;
    for (int i = 0; i < 40 * 2; i++) y[i] = (float)((i * 3) % 7) * 0.2f;
    const int64_t xs[2] = {40, 3}, ys[2] = {40, 2};
    const char *kv[] = {"model.workload=regressor", "training.batch_size=4", "training.epochs=1",
                        "checkpoint.enabled=false", "model.layers=[linear:8, tanh, linear]"};
    mxp_config cfg;
    if (!make_config(kv, 5, &cfg)) return; /* resolves: the data may come from memory */
    mxp_run *run = NULL;
    mxp_status s = mxp_run_create(&cfg, NULL, &run, &err);
    CHECK_MSG(s == MXP_ERR_CONFIG && run == NULL, "regressor without data: status %d", (int)s);
    CHECK_MSG(strstr(err.msg, "data.path") && strstr(err.msg, "mxp_run_options.data"),
              "the error names data.path and mxp_run_options.data: %s", err.msg);
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    if (!d) return;
    CHECK_OK(mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, xs, x, &err), &err);
    CHECK_OK(mxp_dataset_add(d, "y", MXP_ARRAY_F32, 2, ys, y, &err), &err);
    mxp_run_options o = mxp_run_options_default();
    o.data = d;
    CHECK_OK(mxp_run_create(&cfg, &o, &run, &err), &err);
    mxp_dataset_destroy(d);
    if (!run) return;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    CHECK_MSG(info.finished && info.training_steps > 0 && isfinite(info.last_loss),
              "regressor from memory: finished=%d steps=%lld loss=%g", info.finished,
              (long long)info.training_steps, info.last_loss);
    mxp_run_destroy(run);
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("test_user_run: SKIP (no /usr/bin/python3)\n");
        return 77;
    }
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    mxp_log_set_level(MXP_LOG_WARN);
    if (sh("/usr/bin/python3 %s/user_run_cases.py %s", MXP_TEST_SRC_DIR, g_dir) != 0) {
        printf("test_user_run: SKIP (numpy could not write the cases)\n");
        test_rm_rf(g_dir);
        return 77;
    }
    test_split();
    test_regressor_without_path();
    test_world_model();
    test_supervised(true);
    test_supervised(false);
    test_rm_rf(g_dir);
    return test_finish("test_user_run");
}
