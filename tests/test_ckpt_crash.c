/* tests/test_ckpt_crash.c: a writer SIGKILLed at 60 random moments during
 * checkpoint saves never costs the previous checkpoint.
 *
 * A child process does nothing but save checkpoints of a ~1.8 MB
 * mixed_fp16 model (manager: save every step, keep the last 2), so every
 * kill lands inside a save (building the header, writing, fsync, rename,
 * directory fsync, retention). The parent kills it with SIGKILL after a
 * random delay of 1 ms to max(40 ms, 3 saves) (a save timed in the parent
 * first, so a loaded machine stretches the window with its saves), every
 * tenth kill after 5 saves' time so that some saves complete whatever the
 * load (the last check needs progress); then it checks that:
 *   - the newest checkpoint of the directory loads and verifies against
 *     the model (mxp_ckpt_find_latest with the model; then mxp_ckpt_load);
 *   - EVERY listed checkpoint verifies (a killed save never leaves a
 *     partial file under a checkpoint name);
 *   - the step never goes backwards between kills;
 *   - a new manager removes the temp files of killed saves.
 * The count of kills that left a temp file (killed mid-write) is printed
 * as evidence that the moments are spread over the save. */
#include <mixprec/mixprec.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static int count_temps(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[600];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, ".."))) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static void set_step(mxp_trainer *t, int64_t step) {
    mxp_trainer_state ts;
    mxp_trainer_get_state(t, &ts);
    ts.training_steps = ts.optimizer_steps = step;
    mxp_trainer_set_state(t, &ts, NULL);
}

/* The child: save forever (bounded), one step further each time. */
static void child_loop(mxp_trainer *t, const mxp_ckpt_policy *pol, int64_t first) {
    mxp_ckpt_manager *m = NULL;
    if (mxp_ckpt_manager_create(pol, &m, NULL) != MXP_OK) _exit(3);
    for (int64_t s = first; s < first + 100000; s++) {
        set_step(t, s);
        if (mxp_ckpt_manager_after_step(m, t, NULL, NULL, true, NULL, NULL) != MXP_OK) _exit(4);
    }
    _exit(0);
}

int main(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/mxp_test_crash_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    mxp_error err = {0};
    mxp_model_spec spec = mxp_model_spec_mlp(5, 256, 3, 4, MXP_LAYER_GELU, true, MXP_LOSS_MSE, 8);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_MIXED_FP16, &pol);
    mxp_model *model = NULL;
    mxp_trainer *tr = NULL;
    CHECK_OK(mxp_model_create(&spec, &pol, 5, &model, &err), &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    CHECK_OK(mxp_trainer_create(model, &tc, &tr, &err), &err);
    if (!tr) return test_finish("test_ckpt_crash");
    float x[40], y[32];
    for (int i = 0; i < 40; i++) x[i] = 0.05f * (float)i - 1.0f;
    for (int i = 0; i < 32; i++) y[i] = 0.03f * (float)i;
    mxp_batch b = {x, y, NULL, 8};
    mxp_step_result res;
    CHECK_OK(mxp_trainer_step(tr, &b, 1, &res, &err), &err);

    mxp_ckpt_policy cp = {{0}, 1, 0, 2};
    snprintf(cp.dir, sizeof cp.dir, "%s", dir);
    mxp_ckpt_manager *m = NULL;
    CHECK_OK(mxp_ckpt_manager_create(&cp, &m, &err), &err);
    set_step(tr, 1);
    const double t0 = mxp_time_now();
    CHECK_OK(mxp_ckpt_manager_after_step(m, tr, NULL, NULL, true, NULL, &err), &err);
    const double t_save = mxp_time_now() - t0;
    mxp_ckpt_manager_destroy(m);
    /* kill windows in ns: 1 ms .. max(40 ms, 3 saves); every tenth 5 saves + 20 ms */
    double span_s = t_save * 3.0 > 0.04 ? t_save * 3.0 : 0.04;
    if (span_s > 4.0) span_s = 4.0; /* mxp_rng_below takes 32 bits of ns */
    const uint32_t span_ns = (uint32_t)(span_s * 1e9) - 1000000u;
    const uint64_t long_ns = (uint64_t)((t_save * 5.0 + 0.02) * 1e9);

    mxp_rng r;
    mxp_rng_init(&r, (uint64_t)time(NULL));
    const int kills = 60;
    int mid_write = 0, verified = 0;
    int64_t last_step = 1;
    for (int k = 0; k < kills; k++) {
        char latest[MXP_CKPT_PATH_MAX];
        mxp_ckpt_info info;
        CHECK_OK(mxp_ckpt_find_latest(dir, false, model, latest, sizeof latest, &info, &err), &err);
        int64_t first = info.step + 1;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) child_loop(tr, &cp, first);
        CHECK(pid > 0);
        const uint64_t wait_ns = k % 10 == 9 ? long_ns : 1000000u + mxp_rng_below(&r, span_ns);
        struct timespec ts = {(time_t)(wait_ns / 1000000000u), (long)(wait_ns % 1000000000u)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "kill %d: child ended on its own (status %d)", k, status);
        mid_write += count_temps(dir) > 0;
        /* the newest complete checkpoint loads and verifies */
        mxp_status s = mxp_ckpt_find_latest(dir, false, model, latest, sizeof latest, &info, &err);
        CHECK_MSG(s == MXP_OK, "kill %d: no loadable checkpoint: %s", k, err.msg);
        if (s == MXP_OK) {
            CHECK_MSG(info.step >= last_step, "kill %d: step went back %lld -> %lld", k,
                      (long long)last_step, (long long)info.step);
            last_step = info.step;
            CHECK_OK(mxp_ckpt_load(latest, tr, NULL, &err), &err);
        }
        mxp_ckpt_entry *e = NULL;
        size_t n = 0;
        CHECK_OK(mxp_ckpt_list(dir, &e, &n, &err), &err);
        for (size_t i = 0; i < n; i++) {
            mxp_status vs = mxp_ckpt_verify(e[i].path, model, NULL, &err);
            CHECK_MSG(vs == MXP_OK, "kill %d: listed checkpoint fails: %s", k, err.msg);
            verified += vs == MXP_OK;
        }
        mxp_free(e);
    }
    /* a new manager sweeps the temp files of killed saves */
    CHECK_OK(mxp_ckpt_manager_create(&cp, &m, &err), &err);
    CHECK(count_temps(dir) == 0);
    mxp_ckpt_manager_destroy(m);
    printf("%d SIGKILLs during saves (one save %.1f ms, windows up to %.1f ms): %d left a "
           "temp file (killed mid-write), %d listed checkpoints verified, newest step %lld\n",
           kills, t_save * 1e3, span_s * 1e3, mid_write, verified, (long long)last_step);
    CHECK(last_step > 1);
    mxp_trainer_destroy(tr);
    mxp_model_destroy(model);
    rm_dir(dir);
    return test_finish("test_ckpt_crash");
}
