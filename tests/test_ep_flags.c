/* tests/test_ep_flags.c: terminals and timeouts [E, T] in the episode layout
 * (obs [E, T+1, S]), docs/data.md "Flags in the episode layout" and
 * docs/world_models.md "Termination head".
 *
 * tests/ep_flag_cases.py (NumPy, and Debian's h5py) writes one buffer of 12
 * episodes as the episode layout with flags (.npz with bool flags; float64
 * safetensors under the aliases terminations/truncations, int64 and float32
 * flags; HDF5 top-level datasets, uint8 timeouts) and, as the oracle, the
 * same episodes as flat transitions (flat.npz, the flat path of
 * transitions.c that test_transitions.c checks against hand-converted
 * episodes). With model.termination=true every episode file must train to
 * the flat file's last loss, validation loss and validation BCE/accuracy
 * bit for bit (the same rows and the same flags in the same order); so must
 * the fixed-length layout (no lengths) against its flat twin; without the
 * option the flags change nothing (ep.npz == ep_noflags.npz); a
 * termination model trained on the flat file evaluates the episode files
 * (mxp_predictor_evaluate, as eval --data) as the flat one. Every
 * malformed file gets its named error; timeouts alone are refused for
 * model.termination as in the flat layout.
 *
 * Negative control: with wm_episode_terminals reading terminals[e, k + 1]
 * instead of [e, k] (run by hand while writing this test) every episode
 * file's loss and BCE differ from the flat oracle's: 4 failures. Without
 * the position check of episode_flags.c, bad_mid / bad_pad / bad_fixed_mid
 * would load and their expect_fail checks fail.
 * Skips (77) without /usr/bin/python3 + numpy; fails when h5py is missing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_ep_flags_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

typedef struct result {
    double last_loss, val_loss, bce, accuracy;
    int64_t steps;
} result;

/* Train on file `data` (keep: checkpoints in run_ckpt/); the status of
 * the first call that fails. */
static mxp_status train_in(const char *data, bool termination, bool keep, result *r,
                           mxp_error *err) {
    char dp[600], od[600];
    snprintf(dp, sizeof dp, "data.path=%s", data);
    snprintf(od, sizeof od, "output.dir=%s", path_of(keep ? "run_ckpt" : "run"));
    const char *kv[] = {"model.workload=world_model", dp, od, "training.epochs=3",
                        "training.batch_size=16", "training.precision=fp32",
                        "data.val_fraction=0.3", "model.layers=[linear:32, gelu, linear]",
                        keep ? "checkpoint.enabled=true" : "checkpoint.enabled=false",
                        termination ? "model.termination=true" : "model.termination=false"};
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    mxp_status s = mxp_config_builder_create(&b, err);
    for (size_t i = 0; s == MXP_OK && i < sizeof kv / sizeof kv[0]; i++)
        s = mxp_config_apply_override(b, kv[i], err);
    if (s == MXP_OK) s = mxp_config_resolve(b, &cfg, err);
    mxp_config_builder_destroy(b);
    if (s != MXP_OK) return s;
    mxp_run_options o = mxp_run_options_default();
    o.checkpoints = keep;
    mxp_run *run = NULL;
    if ((s = mxp_run_create(&cfg, &o, &run, err)) != MXP_OK) return s;
    mxp_run_eval ev;
    s = mxp_run_train(run, 0, 0, err);
    if (s == MXP_OK) s = mxp_run_evaluate(run, &ev, err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    *r = (result){info.last_loss, ev.loss, ev.bce, ev.accuracy, info.training_steps};
    mxp_run_destroy(run);
    return s;
}

static mxp_status train(const char *data, bool termination, result *r, mxp_error *err) {
    return train_in(data, termination, false, r, err);
}

/* A termination model trained on the flat file evaluates every episode
 * of the episode files (eval --data) as of the flat one: loss, BCE and
 * accuracy bit for bit. */
static void test_evaluate(void) {
    mxp_error err = {0};
    result r;
    CHECK_OK(train_in(path_of("flat.npz"), true, true, &r, &err), &err);
    mxp_predictor *p = NULL;
    CHECK_OK(mxp_predictor_load(path_of("run_ckpt"), -1, &p, &err), &err);
    static const char *const files[] = {"flat.npz", "ep.npz", "ep64.safetensors", "ep.hdf5"};
    mxp_run_eval ev[4];
    for (int i = 0; p && i < 4; i++) {
        mxp_dataset *d = NULL;
        CHECK_OK(mxp_dataset_read(path_of(files[i]), &d, &err), &err);
        if (d) CHECK_OK(mxp_predictor_evaluate(p, d, &ev[i], &err), &err);
        mxp_dataset_destroy(d);
        if (i > 0 && d)
            CHECK_MSG(ev[i].loss == ev[0].loss && ev[i].bce == ev[0].bce &&
                          ev[i].accuracy == ev[0].accuracy && isfinite(ev[0].bce),
                      "evaluate %s: loss %.9g bce %.9g acc %.6g; flat.npz %.9g %.9g %.6g",
                      files[i], ev[i].loss, ev[i].bce, ev[i].accuracy, ev[0].loss, ev[0].bce,
                      ev[0].accuracy);
    }
    mxp_predictor_destroy(p);
}

/* Bitwise: NaN == NaN (bce without the head). */
static bool same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void same_as(const char *name, bool term, const char *ref_name) {
    mxp_error err = {0};
    result a, b;
    CHECK_OK(train(path_of(name), term, &a, &err), &err);
    CHECK_OK(train(path_of(ref_name), term, &b, &err), &err);
    CHECK_MSG(same(a.last_loss, b.last_loss) && same(a.val_loss, b.val_loss) &&
                  same(a.bce, b.bce) && same(a.accuracy, b.accuracy) && a.steps == b.steps,
              "%s (termination %d): last %.9g val %.9g bce %.9g acc %.6g steps %lld; %s: %.9g "
              "%.9g %.9g %.6g %lld",
              name, term, a.last_loss, a.val_loss, a.bce, a.accuracy, (long long)a.steps,
              ref_name, b.last_loss, b.val_loss, b.bce, b.accuracy, (long long)b.steps);
    if (same(a.val_loss, b.val_loss) && same(a.bce, b.bce))
        printf("  ok %-18s = %-14s termination %d: val %.6g bce %.6g acc %.4g\n", name, ref_name,
               term, a.val_loss, a.bce, a.accuracy);
}

static void expect_fail(const char *name, const char *text) {
    test_expect_dataset_error(path_of(name), name, text);
}

int main(void) {
    if (!test_have_numpy()) {
        printf("test_ep_flags: SKIP (/usr/bin/python3 with numpy is needed)\n");
        return 77;
    }
    if (!mkdtemp(g_dir)) return 2;
    int rc = test_run_python(MXP_TEST_SRC_DIR, "ep_flag_cases.py", g_dir);
    CHECK_MSG(rc == 0, "ep_flag_cases.py failed (%d; 3: python3-h5py is missing)", rc);
    if (rc != 0) {
        test_rm_rf(g_dir);
        return test_finish("test_ep_flags");
    }

    /* the layout: episodes, not flat */
    static const char *const files[] = {"ep.npz", "ep64.safetensors", "ep.hdf5"};
    for (size_t i = 0; i < 3; i++) {
        mxp_error err = {0};
        mxp_dataset *d = NULL;
        mxp_dataset_layout lay;
        CHECK_OK(mxp_dataset_read(path_of(files[i]), &d, &err), &err);
        if (d) CHECK_OK(mxp_dataset_check(d, MXP_DATASET_WORLD_MODEL, &lay, &err), &err);
        CHECK_MSG(d && !lay.flat && lay.has_lengths && lay.episodes == 12 && lay.state_dim == 3 &&
                      lay.action_dim == 2,
                  "%s: flat %d, lengths %d, %lld episodes", files[i], lay.flat, lay.has_lengths,
                  (long long)lay.episodes);
        mxp_dataset_destroy(d);
    }
    for (size_t i = 0; i < 3; i++) same_as(files[i], true, "flat.npz");
    same_as("ep_fixed.npz", true, "flat_fixed.npz");
    same_as("ep.npz", false, "ep_noflags.npz");
    same_as("ep.npz", false, "flat.npz");
    test_evaluate();

    /* model.termination needs terminals: timeouts alone, or no flag, refused */
    static const struct {
        const char *file, *text;
    } refused[] = {{"ep_timeouts.npz", "the episode layout (obs [E, T+1, S]) has timeouts (time "
                                       "limits) but no terminals; accepted:"},
                   {"ep_noflags.npz", "records no terminal flags; accepted: flat transitions "
                                      "with terminals"}};
    for (size_t i = 0; i < 2; i++) {
        mxp_error err = {0};
        result r;
        mxp_status s = train(path_of(refused[i].file), true, &r, &err);
        CHECK_MSG(s == MXP_ERR_FORMAT && strstr(err.msg, refused[i].text) &&
                      strstr(err.msg, "or the episode layout with terminals"),
                  "%s with model.termination: status %d, '%s'", refused[i].file, (int)s, err.msg);
    }

    expect_fail("bad_mid.npz", "terminals[1, 2] = 1 but episode 1 has");
    expect_fail("bad_mid.npz", "accepted: a flag only at an episode's last transition");
    expect_fail("bad_pad.npz", "lies in the padding past episode");
    expect_fail("bad_shape.npz", "array 'terminals' has shape [12, ");
    expect_fail("bad_shape.npz", "accepted: [E, T] = [12, ");
    expect_fail("bad_rank.npz", "array 'timeouts' has shape [12]; accepted: [E, T]");
    expect_fail("bad_value.npz", "timeouts[1, 4] = 2; accepted: 0 or 1");
    expect_fail("bad_dones.npz", "array 'dones' belongs to flat transitions");
    expect_fail("bad_next.npz", "array 'next_obs' belongs to flat transitions");
    expect_fail("bad_twice.npz", "both give terminals");
    expect_fail("bad_fixed_mid.npz", "terminals[2, 4] = 1 but episode 2 has 9 transitions (T, "
                                     "no lengths)");
    expect_fail("bad_h5_mid.hdf5", "terminals[1, 2] = 1 but episode 1 has");
    test_rm_rf(g_dir);
    return test_finish("test_ep_flags");
}
