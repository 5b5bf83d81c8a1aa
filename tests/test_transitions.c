/* tests/test_transitions.c: world-model training on flat transitions, in
 * every layout and file format of docs/data.md, against the episode layout.
 *
 * tests/transition_cases.py (NumPy, and Debian's h5py for HDF5) writes one
 * replay buffer of 14 episodes (terminals, timeouts, one cut off by the
 * buffer's end) as flat .npz (with next_obs; D4RL-style without it, final
 * states flagged, plus a one-row episode that must be dropped; SB3-style
 * states/next_states/dones [N, 1]; next_obs alone, episode ends from
 * next_obs[i] != obs[i+1]), float64 safetensors with int64 and BOOL flags,
 * HDF5 in the D4RL layout (gzip+shuffle, with and without
 * next_observations, big-endian floats, uint8 flags) and in Minari's
 * episode_<k> groups - and, converted by hand in NumPy, the episode layout
 * ep.npz (the oracle). Every flat file must give the oracle's episode and
 * transition counts and, trained with the same config, the oracle's
 * last training loss and validation loss bit for bit (the same rows in the
 * same order, the same split by episode, the same standardisation); the
 * same holds for the flat arrays handed over in memory (mxp_dataset_add,
 * bool flags) and for a trained model's evaluation of a flat file, in C and
 * through `mixprec eval --data` / `mixprec predict --input` (HDF5 and .npz,
 * D4RL names). Every malformed file gets its named error (the CLI: exit 2,
 * nothing written). Skips (77) without /usr/bin/python3
 * + numpy; fails when h5py is missing (scripts/install-deps.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_transitions_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[16][512];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static bool make_config(const char *data, const char *out_dir, mxp_config *cfg) {
    char dp[600], od[600];
    snprintf(dp, sizeof dp, "data.path=%s", data);
    snprintf(od, sizeof od, "output.dir=%s", out_dir ? out_dir : path_of("run"));
    const char *kv[] = {"model.workload=world_model", dp, od, "training.epochs=3",
                        "training.batch_size=16", "training.precision=fp32",
                        "data.val_fraction=0.3", "model.layers=[linear:32, gelu, linear]",
                        out_dir ? "checkpoint.enabled=true" : "checkpoint.enabled=false"};
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, &err);
    for (size_t i = 0; s == MXP_OK && i < sizeof kv / sizeof kv[0]; i++)
        s = mxp_config_apply_override(b, kv[i], &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, &err);
    mxp_config_builder_destroy(b);
    CHECK_OK(s, &err);
    return s == MXP_OK;
}

typedef struct result {
    double last_loss, val_loss;
    int64_t steps, samples_per_epoch;
} result;

/* Train on `data` (a file, or mem when non-NULL); out_dir: keep checkpoints. */
static bool train(const char *data, const mxp_dataset *mem, const char *out_dir, result *r) {
    mxp_config cfg;
    if (!make_config(data, out_dir, &cfg)) return false;
    if (mem) snprintf(cfg.wl.data_path, sizeof cfg.wl.data_path, "none");
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.data = mem;
    o.checkpoints = out_dir != NULL;
    mxp_run *run = NULL;
    mxp_status s = mxp_run_create(&cfg, &o, &run, &err);
    CHECK_MSG(s == MXP_OK, "%s: mxp_run_create: %s", data, err.msg);
    if (s != MXP_OK) return false;
    mxp_run_eval ev;
    CHECK_OK(s = mxp_run_train(run, 0, 0, &err), &err);
    if (s == MXP_OK) CHECK_OK(s = mxp_run_evaluate(run, &ev, &err), &err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    r->last_loss = info.last_loss;
    r->val_loss = ev.loss;
    r->steps = info.training_steps;
    r->samples_per_epoch = info.samples_per_epoch;
    mxp_run_destroy(run);
    return s == MXP_OK;
}

/* The oracle's episode and transition counts, from ep.npz's lengths. */
static bool oracle_counts(int64_t *E, int64_t *n) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_read(path_of("ep.npz"), &d, &err), &err);
    const mxp_array *len = d ? mxp_dataset_find(d, "lengths") : NULL;
    CHECK(len != NULL);
    if (!len) {
        mxp_dataset_destroy(d);
        return false;
    }
    *E = len->shape[0];
    *n = 0;
    for (int64_t e = 0; e < *E; e++) *n += mxp_array_get_i64(len, e);
    mxp_dataset_destroy(d);
    return true;
}

static void check_layout(const mxp_dataset *d, const char *name, int64_t E, int64_t n,
                         int64_t dropped) {
    mxp_error err = {0};
    mxp_dataset_layout lay;
    CHECK_OK(mxp_dataset_check(d, MXP_DATASET_WORLD_MODEL, &lay, &err), &err);
    CHECK_MSG(lay.flat && lay.episodes == E && lay.transitions == n && lay.state_dim == 3 &&
                  lay.action_dim == 2 && lay.dropped_episodes == dropped,
              "%s: flat %d, %lld episodes, %lld transitions, S %lld, A %lld, dropped %lld; "
              "expected flat, %lld, %lld, 3, 2, %lld",
              name, lay.flat, (long long)lay.episodes, (long long)lay.transitions,
              (long long)lay.state_dim, (long long)lay.action_dim,
              (long long)lay.dropped_episodes, (long long)E, (long long)n, (long long)dropped);
}

static void same_result(const char *name, const result *got, const result *ref) {
    CHECK_MSG(got->last_loss == ref->last_loss && got->val_loss == ref->val_loss &&
                  got->steps == ref->steps && got->samples_per_epoch == ref->samples_per_epoch,
              "%s: last loss %.9g, val %.9g, %lld steps; episode layout: %.9g, %.9g, %lld", name,
              got->last_loss, got->val_loss, (long long)got->steps, ref->last_loss,
              ref->val_loss, (long long)ref->steps);
}

/* Run a shell command; its stdout (and stderr) into out [cap]; exit code. */
static int run_cmd(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int rc = pclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* The CLI on flat files: eval and predict on HDF5 and .npz replay files
 * give what they give on the episode file; a bad HDF5 file exits 2 with
 * the named error and writes nothing. */
static void test_cli(void) {
    static char a[8192], b[8192];
    char cmd[2048];
    const char *ref = path_of("ref");
    snprintf(cmd, sizeof cmd, "%s eval %s --data %s --json 2>/dev/null", MXP_CLI_PATH, ref,
             path_of("d4rl.hdf5"));
    int ra = run_cmd(cmd, a, sizeof a);
    snprintf(cmd, sizeof cmd, "%s eval %s --data %s --json 2>/dev/null", MXP_CLI_PATH, ref,
             path_of("ep.npz"));
    int rb = run_cmd(cmd, b, sizeof b);
    const char *la = strstr(a, "\"loss\":"), *lb = strstr(b, "\"loss\":");
    CHECK_MSG(ra == 0 && rb == 0 && la && lb && strncmp(la, lb, 24) == 0,
              "eval --data d4rl.hdf5 (%d): %s\neval --data ep.npz (%d): %s", ra, a, rb, b);
    const char *ins[2] = {"d4rl.hdf5", "flat_next.npz"}, *outs[2] = {"p1.safetensors",
                                                                    "p2.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s predict %s --input %s --output %s 2>&1", MXP_CLI_PATH, ref,
                 path_of(ins[i]), path_of(outs[i]));
        int rc = run_cmd(cmd, a, sizeof a);
        CHECK_MSG(rc == 0, "predict --input %s: exit %d: %s", ins[i], rc, a);
    }
    mxp_error err = {0};
    mxp_dataset *p1 = NULL, *p2 = NULL;
    CHECK_OK(mxp_dataset_read(path_of(outs[0]), &p1, &err), &err);
    CHECK_OK(mxp_dataset_read(path_of(outs[1]), &p2, &err), &err);
    const mxp_array *n1 = p1 ? mxp_dataset_find(p1, "next_obs") : NULL;
    const mxp_array *n2 = p2 ? mxp_dataset_find(p2, "next_obs") : NULL;
    CHECK_MSG(n1 && n2 && n1->numel == n2->numel && n1->numel > 0 &&
                  memcmp(n1->data, n2->data, (size_t)n1->numel * sizeof(float)) == 0,
              "predict: next_obs from d4rl.hdf5 and flat_next.npz differ");
    mxp_dataset_destroy(p1);
    mxp_dataset_destroy(p2);
    snprintf(cmd, sizeof cmd, "%s train data.path=%s output.dir=%s 2>&1", MXP_CLI_PATH,
             path_of("bad_h5_missing.hdf5"), path_of("bad_run"));
    int rc = run_cmd(cmd, a, sizeof a);
    CHECK_MSG(rc == 2 && strstr(a, "missing array 'rewards'") &&
                  access(path_of("bad_run"), F_OK) != 0,
              "train on bad_h5_missing.hdf5: exit %d (want 2), output: %s", rc, a);
}

static void expect_fail(const char *name, const char *text) {
    test_expect_dataset_error(path_of(name), name, text);
}

int main(void) {
    if (!test_have_numpy()) {
        printf("test_transitions: SKIP (/usr/bin/python3 with numpy is needed)\n");
        return 77;
    }
    if (!mkdtemp(g_dir)) return 2;
    int rc = test_run_python(MXP_TEST_SRC_DIR, "transition_cases.py", g_dir);
    CHECK_MSG(rc == 0, "transition_cases.py failed (%d; 3: python3-h5py is missing, "
                       "scripts/install-deps.sh installs it)", rc);
    int64_t E = 0, n = 0;
    if (rc != 0 || !oracle_counts(&E, &n)) {
        test_rm_rf(g_dir);
        return test_finish("test_transitions");
    }
    result ref;
    if (!train(path_of("ep.npz"), NULL, path_of("ref"), &ref)) {
        test_rm_rf(g_dir);
        return test_finish("test_transitions");
    }
    printf("episode layout: %lld episodes, %lld transitions: last loss %.9g, val %.9g, %lld "
           "steps\n",
           (long long)E, (long long)n, ref.last_loss, ref.val_loss, (long long)ref.steps);

    static const struct {
        const char *file;
        int dropped;
    } good[] = {{"flat_next.npz", 0},      {"flat_sb3.npz", 0},       {"flat_nextonly.npz", 0},
                {"flat_d4rl.npz", 1},      {"flat64.safetensors", 0}, {"d4rl.hdf5", 0},
                {"d4rl_nonext.hdf5", 1},   {"minari.hdf5", 0},        {"ep64.npz", -1}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        mxp_error err = {0};
        mxp_dataset *d = NULL;
        CHECK_OK(mxp_dataset_read(path_of(good[i].file), &d, &err), &err);
        if (!d) continue;
        if (good[i].dropped >= 0) check_layout(d, good[i].file, E, n, good[i].dropped);
        result r;
        if (train(path_of(good[i].file), NULL, NULL, &r)) {
            same_result(good[i].file, &r, &ref);
            printf("  ok %-20s same losses as the episode layout\n", good[i].file);
        }
        /* evaluating the trained model on the flat file: the loss over every
         * episode, as on the episode file */
        mxp_predictor *p = NULL;
        CHECK_OK(mxp_predictor_load(path_of("ref"), -1, &p, &err), &err);
        mxp_dataset *ep = NULL;
        CHECK_OK(mxp_dataset_read(path_of("ep.npz"), &ep, &err), &err);
        mxp_run_eval a, b;
        if (p && ep) {
            CHECK_OK(mxp_predictor_evaluate(p, d, &a, &err), &err);
            CHECK_OK(mxp_predictor_evaluate(p, ep, &b, &err), &err);
            CHECK_MSG(a.loss == b.loss, "%s: evaluate %.9g, episode layout %.9g", good[i].file,
                      a.loss, b.loss);
        }
        mxp_dataset_destroy(ep);
        mxp_predictor_destroy(p);
        mxp_dataset_destroy(d);
    }

    /* the flat arrays in memory (bool flags, as a binding passes them) */
    mxp_error err = {0};
    mxp_dataset *file = NULL, *mem = NULL;
    CHECK_OK(mxp_dataset_read(path_of("flat_next.npz"), &file, &err), &err);
    CHECK_OK(mxp_dataset_create(&mem, &err), &err);
    for (int i = 0; file && mem && i < mxp_dataset_num_arrays(file); i++) {
        const mxp_array *a = mxp_dataset_array(file, i);
        if (strcmp(a->name, "terminals") == 0) CHECK(a->dtype == MXP_ARRAY_BOOL);
        CHECK_OK(mxp_dataset_add(mem, a->name, a->dtype, a->ndim, a->shape, a->data, &err), &err);
    }
    result r;
    if (mem && train("memory", mem, NULL, &r)) same_result("in memory", &r, &ref);
    /* a bool byte other than 0/1 is refused on the way in */
    const uint8_t two[3] = {0, 2, 1};
    const int64_t sh3[1] = {3};
    CHECK(mem && mxp_dataset_add(mem, "dones", MXP_ARRAY_BOOL, 1, sh3, two, &err) ==
                     MXP_ERR_INVALID_ARG &&
          strstr(err.msg, "holds the byte 2"));
    mxp_dataset_destroy(mem);
    mxp_dataset_destroy(file);

    test_cli();

    expect_fail("bad_unknown.npz", "unexpected array 'reward_typo' for the world_model "
                                   "workload; accepted: flat transitions obs (or observations");
    expect_fail("bad_twice.npz", "arrays 'obs' and 'observations' both give obs");
    expect_fail("bad_rows.npz", "shape mismatch: array 'rewards' has shape [182]");
    expect_fail("bad_flag.npz", "terminals[3] = 2; accepted: 0 or 1");
    expect_fail("bad_next.npz", "shape mismatch: array 'next_obs'");
    expect_fail("bad_noends.npz", "flat transitions need their episode ends");
    expect_fail("bad_one.npz", "hold 1 episode(s) with a transition");
    expect_fail("bad_lengths.npz", "array 'lengths' belongs to the episode layout");
    expect_fail("bad_rew.npz", "array 'rewards' has shape [183, 2]; accepted: rewards [N] or");
    expect_fail("bad_dtype.npz", "array 'actions' has dtype int32; accepted: float32 or float64");
    expect_fail("bad_missing.npz", "missing array 'actions'");
    expect_fail("bad_f64.npz", "beyond float32's range");
    expect_fail("bad_bool.safetensors", "is bool but holds the byte 2");
    expect_fail("bad_h5_string.hdf5", "has HDF5 type class string");
    expect_fail("bad_h5_missing.hdf5", "missing array 'rewards'");
    expect_fail("bad_h5_u64.hdf5", "dataset 'terminals' is uint64");
    expect_fail("bad_h5_nan.hdf5", "array 'observations' holds NaN or Inf");
    expect_fail("bad_h5_external.hdf5", "is an external link");
    expect_fail("bad_h5_trunc.hdf5", "not a readable HDF5 file");
    expect_fail("bad_minari_dict.hdf5", "'episode_0/observations' is a group");
    expect_fail("bad_minari_len.hdf5", "'episode_0/observations' (2 dimensions, first "
                                       "dimension 3) does not fit");
    test_rm_rf(g_dir);
    return test_finish("test_transitions");
}
