/* tests/test_ckpt_resume.c: checkpoints of the world model in training.
 * - bit-exact resume: in every precision mode (fp32, mixed_bf16,
 *   mixed_fp16, bf16, fp16, and emulated fp8 with its delayed-scaling
 *   amax histories) and at three step values k (mid-epoch right
 *   after overflow-skipped steps, an epoch boundary, late in the last
 *   epoch), a run stopped at k by the graceful-stop flag, saved, destroyed,
 *   and resumed in a fresh world model produces loss histories and final
 *   weights bit-identical to an uninterrupted run (the oracle). Overflows
 *   are injected at fixed steps and the scaler uses hysteresis 2 and a
 *   growth interval of 4, so scale, growth tracker and hysteresis state all
 *   matter; the cosine LR schedule spans the whole run.
 * - cross-precision: FP16 -> FP32 (master = exact widening of the FP16
 *   weights) and FP32 -> FP16 (weights = RNE of the FP32 master, checked
 *   element by element with the scalar reference) and mixed_bf16 -> pure
 *   bf16, each training on without a non-finite loss or weight.
 * - rollback: newest healthy + verified checkpoint restored (a corrupt and
 *   an unhealthy newer one skipped and set aside), from/to steps and the
 *   reason logged, and training after the rollback repeats the original
 *   losses exactly. */
#include <mixprec/mixprec.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char g_dir[256];

static mxp_config config_for(mxp_precision p, int64_t every_steps) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    char kv[3][320];
    snprintf(kv[0], sizeof kv[0], "training.precision=%s", mxp_precision_name(p));
    snprintf(kv[1], sizeof kv[1], "output.dir=%s/out", g_dir);
    snprintf(kv[2], sizeof kv[2], "checkpoint.every_steps=%lld", (long long)every_steps);
    const char *ov[] = {"data.trajectories=12",
                        "data.episode_length=60",
                        "model.hidden=24",
                        "model.depth=2",
                        "training.epochs=2",
                        "training.batch_size=16",
                        "training.loss_scale.growth_interval=4",
                        "training.loss_scale.hysteresis=2",
                        "training.lr=0.003",
                        kv[0],
                        kv[1],
                        kv[2]};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, ov[i], &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

/* Overflow injected at fixed trainer steps (a pure function of the step). */
static void inject(void *user, int64_t step, float *g, size_t n) {
    (void)user;
    (void)n;
    if (step == 5 || step == 6 || step == 17 || step == 30 || step == 31 || step == 60)
        g[step % 7] = INFINITY;
}

static volatile sig_atomic_t g_stop;
static int64_t g_stop_at;
static void on_progress(void *user, const mxp_progress *p) {
    (void)user;
    if (p->step == g_stop_at) g_stop = 1;
}

typedef struct run {
    size_t n;
    double *loss;
    unsigned char *weights; /* master (or work) bytes at the end */
    size_t wbytes;
    double val;
    int64_t first_step;
} run;

static void free_run(run *r) {
    free(r->loss);
    free(r->weights);
    memset(r, 0, sizeof *r);
}

static void capture(mxp_world_model *wm, run *r) {
    size_t n;
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &n);
    r->n = n;
    r->loss = malloc((n + 1) * sizeof *r->loss);
    for (size_t i = 0; i < n; i++) r->loss[i] = h[i].loss;
    r->first_step = n ? h[0].step : 0;
    mxp_model *m = mxp_world_model_model(wm);
    mxp_error err = {0};
    /* the parameter slab as stored (FP32 master, or the pure modes' 16-bit
     * weights), one copy out of backend memory: runs on the mock device */
    mxp_dtype dt = MXP_DTYPE_F32;
    CHECK_OK(mxp_model_tensor_dtype(m, MXP_TENSOR_PARAM, &dt, &err), &err);
    r->wbytes = mxp_model_num_params(m) * mxp_dtype_info(dt)->size;
    r->weights = malloc(r->wbytes);
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, NULL, dt, r->weights, r->wbytes, &err),
             &err);
    CHECK_OK(mxp_world_model_validation_loss(wm, &r->val, &err), &err);
}

static mxp_world_model *make_wm(const mxp_config *cfg) {
    mxp_world_model *wm = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_world_model_create(cfg, &wm, &err), &err);
    if (wm) mxp_trainer_set_grad_hook(mxp_world_model_trainer(wm), inject, NULL);
    return wm;
}

static run uninterrupted(mxp_precision p) {
    mxp_config cfg = config_for(p, 0);
    mxp_world_model *wm = make_wm(&cfg);
    run r = {0};
    mxp_error err = {0};
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    capture(wm, &r);
    mxp_world_model_destroy(wm);
    return r;
}

/* Train until step k under a checkpoint manager, stop gracefully. Returns
 * the path of the checkpoint written at the stop. */
static void train_until(mxp_precision p, int64_t k, const char *dir, char *path, size_t n) {
    mxp_config cfg = config_for(p, 10);
    mxp_world_model *wm = make_wm(&cfg);
    mxp_ckpt_policy pol;
    mxp_error err = {0};
    CHECK_OK(mxp_ckpt_policy_from_config(&cfg, &pol, &err), &err);
    snprintf(pol.dir, sizeof pol.dir, "%s", dir);
    mxp_ckpt_manager *m = NULL;
    CHECK_OK(mxp_ckpt_manager_create(&pol, &m, &err), &err);
    mxp_world_model_set_checkpointer(wm, m);
    g_stop = 0;
    g_stop_at = k;
    mxp_world_model_set_stop_flag(wm, &g_stop);
    mxp_world_model_set_progress(wm, on_progress, NULL);
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    CHECK(mxp_world_model_stopped(wm));
    mxp_train_stats st;
    mxp_trainer_stats(mxp_world_model_trainer(wm), &st);
    CHECK(st.training_steps == k);
    snprintf(path, n, "%s", mxp_ckpt_manager_last_path(m));
    mxp_world_model_destroy(wm);
    mxp_ckpt_manager_destroy(m);
    g_stop_at = -1;
}

static void test_resume(mxp_precision p) {
    run full = uninterrupted(p);
    int64_t spe = 0;
    {
        mxp_config cfg = config_for(p, 0);
        mxp_world_model *wm = make_wm(&cfg);
        spe = mxp_world_model_samples_per_epoch(wm, cfg.batch_size) / cfg.batch_size;
        mxp_world_model_destroy(wm);
    }
    CHECK(full.n == (size_t)(2 * spe));
    int64_t ks[3] = {7, spe, 2 * spe - 3};
    for (int i = 0; i < 3; i++) {
        int64_t k = ks[i];
        char dir[300], path[MXP_CKPT_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s-%lld", g_dir, mxp_precision_name(p), (long long)k);
        train_until(p, k, dir, path, sizeof path);
        /* resume in a fresh world model from the newest checkpoint */
        mxp_config cfg = config_for(p, 0);
        mxp_world_model *wm = make_wm(&cfg);
        mxp_error err = {0};
        char latest[MXP_CKPT_PATH_MAX];
        mxp_ckpt_info info;
        CHECK_OK(mxp_ckpt_find_latest(dir, false, mxp_world_model_model(wm), latest, sizeof latest,
                                      &info, &err),
                 &err);
        CHECK_MSG(strcmp(latest, path) == 0, "latest %s, stop checkpoint %s", latest, path);
        CHECK(info.step == k && info.precision == p && info.healthy);
        CHECK_OK(mxp_world_model_load_checkpoint(wm, latest, &info, &err), &err);
        CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
        run r = {0};
        capture(wm, &r);
        mxp_world_model_destroy(wm);
        CHECK_MSG(r.n == full.n - (size_t)k && r.first_step == k + 1,
                  "%s k=%lld: %zu rows from step %lld", mxp_precision_name(p), (long long)k, r.n,
                  (long long)r.first_step);
        bool same =
            r.n == full.n - (size_t)k && memcmp(r.loss, full.loss + k, r.n * sizeof *r.loss) == 0;
        CHECK_MSG(same, "%s k=%lld: losses after k differ from the uninterrupted run",
                  mxp_precision_name(p), (long long)k);
        CHECK_MSG(r.wbytes == full.wbytes && memcmp(r.weights, full.weights, r.wbytes) == 0,
                  "%s k=%lld: final weights differ", mxp_precision_name(p), (long long)k);
        CHECK(r.val == full.val);
        free_run(&r);
    }
    printf("resume %-10s bit-identical at k = %lld, %lld, %lld (%zu steps)\n",
           mxp_precision_name(p), (long long)ks[0], (long long)ks[1], (long long)ks[2], full.n);
    free_run(&full);
}

/* ---- cross precision -------------------------------------------------------------- */

static void test_cross(mxp_precision from, mxp_precision to) {
    char dir[300], path[MXP_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/cross-%s-%s", g_dir, mxp_precision_name(from),
             mxp_precision_name(to));
    train_until(from, 25, dir, path, sizeof path);
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    CHECK_OK(mxp_st_file_read(path, &f, &err), &err);
    mxp_config cfg = config_for(to, 0);
    mxp_world_model *wm = make_wm(&cfg);
    mxp_trainer_set_grad_hook(mxp_world_model_trainer(wm), NULL, NULL);
    mxp_ckpt_info info;
    CHECK_OK(mxp_world_model_load_checkpoint(wm, path, &info, &err), &err);
    CHECK(info.precision == from);
    /* the loaded weights are the checkpoint's, rounded once into the target */
    mxp_model *m = mxp_world_model_model(wm);
    mxp_precision_policy pol;
    mxp_precision_policy_default(to, &pol);
    size_t mismatches = 0;
    for (int i = 0; f && i < mxp_model_num_tensors(m); i++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, i);
        const mxp_st_tensor *t = mxp_st_file_find(f, ti->name);
        for (size_t e = 0; t && e < ti->count; e++) {
            float src = mxp_st_tensor_get(t, e);
            float want = pol.has_master ? src : mxp_round_to(pol.weight, src);
            float got = mxp_model_param(m, ti->offset + e);
            mismatches += memcmp(&got, &want, 4) != 0;
        }
    }
    CHECK_MSG(mismatches == 0, "%s -> %s: %zu weights differ from the converted checkpoint",
              mxp_precision_name(from), mxp_precision_name(to), mismatches);
    mxp_st_file_destroy(f);
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    size_t n, bad = 0;
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &n);
    size_t skipped = 0;
    for (size_t i = 0; i < n; i++) {
        bad += !isfinite(h[i].loss);
        skipped += h[i].skipped;
    }
    for (size_t i = 0; i < mxp_model_num_params(m); i++) bad += !isfinite(mxp_model_param(m, i));
    CHECK_MSG(n > 0 && bad == 0, "%s -> %s: %zu non-finite losses or weights in %zu steps",
              mxp_precision_name(from), mxp_precision_name(to), bad, n);
    double val;
    CHECK_OK(mxp_world_model_validation_loss(wm, &val, &err), &err);
    CHECK(isfinite(val));
    printf("cross %s -> %s: %zu steps trained on (%zu skipped by the loss scaler), val loss "
           "%.5f\n",
           mxp_precision_name(from), mxp_precision_name(to), n, skipped, val);
    mxp_world_model_destroy(wm);
}

/* ---- rollback ------------------------------------------------------------------------- */

static char g_log[8][512];
static int g_nlog;
static void capture_log(void *user, mxp_log_level lv, const char *msg) {
    (void)user;
    if (lv >= MXP_LOG_WARN && strstr(msg, "rollback") && g_nlog < 8)
        snprintf(g_log[g_nlog++], sizeof g_log[0], "%s", msg);
}

static void test_rollback(void) {
    const mxp_precision p = MXP_PRECISION_MIXED_FP16;
    run full = uninterrupted(p);
    mxp_config cfg = config_for(p, 10);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/rollback", g_dir);
    mxp_world_model *wm = make_wm(&cfg);
    mxp_ckpt_policy pol;
    mxp_error err = {0};
    CHECK_OK(mxp_ckpt_policy_from_config(&cfg, &pol, &err), &err);
    snprintf(pol.dir, sizeof pol.dir, "%s", dir);
    pol.keep_last = 5;
    mxp_ckpt_manager *m = NULL;
    CHECK_OK(mxp_ckpt_manager_create(&pol, &m, &err), &err);
    mxp_world_model_set_checkpointer(wm, m);
    mxp_world_model_set_stop_flag(wm, &g_stop);
    mxp_world_model_set_progress(wm, on_progress, NULL);
    /* 10 (healthy), 15 (healthy, the stop's; then corrupted), 20 and 30 and
     * the stop's 35 (unhealthy) */
    g_stop = 0;
    g_stop_at = 15;
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    char p15[MXP_CKPT_PATH_MAX];
    CHECK_OK(mxp_ckpt_path_for(dir, 15, p15, sizeof p15, &err), &err);
    FILE *fp = fopen(p15, "r+b");
    CHECK(fp != NULL);
    if (fp) {
        fseek(fp, -100, SEEK_END);
        int c = fgetc(fp);
        fseek(fp, -100, SEEK_END);
        fputc(c ^ 0x10, fp);
        fclose(fp);
    }
    mxp_ckpt_manager_set_health(m, false, "{\"nonfinite_loss\":\"fired\"}");
    g_stop = 0;
    g_stop_at = 35;
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    mxp_ckpt_info info;
    char p30[MXP_CKPT_PATH_MAX];
    CHECK_OK(mxp_ckpt_path_for(dir, 30, p30, sizeof p30, &err), &err);
    CHECK_OK(mxp_ckpt_verify(p30, NULL, &info, &err), &err);
    CHECK(!info.healthy);
    mxp_ckpt_manager_set_health(m, true, NULL);

    mxp_log_set_callback(capture_log, NULL);
    g_nlog = 0;
    mxp_ckpt_rollback_result res;
    CHECK_OK(mxp_world_model_rollback(wm, "test: 10 consecutive non-finite losses", &res, &err),
             &err);
    mxp_log_set_callback(NULL, NULL);
    CHECK_MSG(res.from_step == 35 && res.to_step == 10, "rollback from %lld to %lld",
              (long long)res.from_step, (long long)res.to_step);
    bool logged = false;
    for (int i = 0; i < g_nlog; i++)
        logged |= strstr(g_log[i], "rollback: from step 35 to step 10") &&
                  strstr(g_log[i], "10 consecutive non-finite losses");
    CHECK_MSG(logged, "rollback event not logged (%d lines)", g_nlog);
    mxp_train_stats st;
    mxp_trainer_stats(mxp_world_model_trainer(wm), &st);
    CHECK(st.training_steps == 10);
    /* the abandoned timeline is set aside, not deleted */
    char ab[MXP_CKPT_PATH_MAX + 64];
    snprintf(ab, sizeof ab, "%s/abandoned-ckpt-000000000030.safetensors", dir);
    CHECK(access(ab, F_OK) == 0);
    CHECK(access(p30, F_OK) != 0);
    /* training after the rollback repeats the original steps 11.. exactly */
    size_t n0;
    mxp_trainer_history(mxp_world_model_trainer(wm), &n0);
    g_stop_at = -1;
    g_stop = 0;
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    size_t n;
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &n);
    CHECK(n - n0 == full.n - 10);
    bool same = n - n0 == full.n - 10;
    for (size_t i = 0; same && i < n - n0; i++) same = h[n0 + i].loss == full.loss[10 + i];
    CHECK_MSG(same, "losses after the rollback differ from the original run");
    /* nothing to roll back to: an error, nothing changes */
    mxp_world_model_destroy(wm);
    mxp_ckpt_manager_destroy(m);
    test_rm_rf(dir);
    wm = make_wm(&cfg);
    CHECK_OK(mxp_ckpt_manager_create(&pol, &m, &err), &err);
    mxp_world_model_set_checkpointer(wm, m);
    CHECK(mxp_world_model_rollback(wm, "nothing saved", &res, &err) == MXP_ERR_IO);
    CHECK(strstr(err.msg, dir) != NULL);
    mxp_world_model_destroy(wm);
    mxp_ckpt_manager_destroy(m);
    free_run(&full);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_resume_XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
    const mxp_precision modes[] = {MXP_PRECISION_FP32, MXP_PRECISION_MIXED_BF16,
                                   MXP_PRECISION_MIXED_FP16, MXP_PRECISION_BF16,
                                   MXP_PRECISION_FP16, MXP_PRECISION_FP8};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) test_resume(modes[i]);
    test_cross(MXP_PRECISION_FP16, MXP_PRECISION_FP32);
    test_cross(MXP_PRECISION_FP32, MXP_PRECISION_FP16);
    test_cross(MXP_PRECISION_MIXED_BF16, MXP_PRECISION_BF16);
    test_cross(MXP_PRECISION_MIXED_FP16, MXP_PRECISION_FP32);
    test_rollback();
    test_rm_rf(g_dir);
    return test_finish("test_ckpt_resume");
}
