/* tests/test_schedule.c: the learning-rate schedule is planned over the
 * whole run (docs/run.md "The learning-rate schedule").
 * - train(1) called three times == train(3) on a run of training.epochs=3:
 *   every step's loss and learning rate bit for bit, and the final weights;
 * - the learning rate of every step is the documented cosine of the run's
 *   global step g over training.epochs x steps_per_epoch steps, computed
 *   here from the formula: lr (m + (1 - m)(1 + cos(pi g / N)) / 2) in double,
 *   rounded to float;
 * - a finished 2-epoch run resumed with training.epochs=4 trains 2 more
 *   epochs on the 4-epoch plan (g from 2 x steps_per_epoch), and a call
 *   past training.epochs extends the plan to its own end.
 * The learning rate of a step is read from the trainer in the progress
 * callback (set before the step, unchanged after it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_schedule_XXXXXX";

#define MAX_STEPS 4096

typedef struct rec {
    mxp_run *run;
    int64_t n;
    double loss[MAX_STEPS];
    float lr[MAX_STEPS];
} rec;

static void on_progress(void *user, const mxp_run_progress *p) {
    rec *r = user;
    if (r->n >= MAX_STEPS) return;
    r->loss[r->n] = p->result->loss;
    r->lr[r->n] = mxp_trainer_get_config(mxp_run_trainer(r->run))->optim.lr;
    r->n++;
}

static bool make_cfg(const char *out, int epochs, bool ckpt, mxp_config *cfg) {
    char od[400], ep[64];
    snprintf(od, sizeof od, "output.dir=%s/%s", g_dir, out);
    snprintf(ep, sizeof ep, "training.epochs=%d", epochs);
    const char *kv[] = {"model.workload=world_model", "data.trajectories=12",
                        "data.episode_length=40", "model.hidden=16", "model.depth=1",
                        "training.batch_size=32", "training.precision=fp32",
                        "training.lr_schedule=cosine", "training.lr_min_ratio=0.1", od, ep,
                        ckpt ? "checkpoint.enabled=true" : "checkpoint.enabled=false"};
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

static mxp_run *open_run(const mxp_config *cfg, rec *r, const char *resume) {
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.progress = on_progress;
    o.progress_user = r;
    o.resume = resume;
    o.checkpoints = cfg->ckpt_enabled;
    mxp_run *run = NULL;
    CHECK_OK(mxp_run_create(cfg, &o, &run, &err), &err);
    r->run = run;
    return run;
}

/* The documented cosine at global step g of n (training.lr_min_ratio m). */
static float cosine(float lr, float m, int64_t g, int64_t n) {
    const double frac = (double)g / (double)n;
    return (float)((double)lr * ((double)m + (1.0 - (double)m) * 0.5 * (1.0 + cos(M_PI * frac))));
}

static int64_t check_lrs(const char *what, const rec *r, int64_t first, float lr, int64_t g0,
                         int64_t n) {
    int64_t bad = 0;
    for (int64_t i = first; i < r->n; i++) {
        float want = cosine(lr, 0.1f, g0 + i - first, n);
        if (r->lr[i] != want && bad++ < 3)
            fprintf(stderr, "%s: step %lld: lr %.9g, want %.9g (g %lld of %lld)\n", what,
                    (long long)i + 1, r->lr[i], want, (long long)(g0 + i - first), (long long)n);
    }
    CHECK_MSG(bad == 0, "%s: %lld learning rates differ from the cosine over the run", what,
              (long long)bad);
    return bad;
}

static rec g_a, g_b, g_c, g_d, g_w;

/* training.lr_warmup_steps=W: global step g < W gets the cosine's rate
 * times (g + 1) / W (in double, rounded to float), later steps the cosine;
 * train(1) x 2 == train(2) with it. */
static void check_warmup(void) {
    const int64_t W = 10;
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    char od[400];
    snprintf(od, sizeof od, "output.dir=%s/w", g_dir);
    const char *kv[] = {"data.trajectories=12", "data.episode_length=40", "model.hidden=16",
                        "model.depth=1", "training.batch_size=32", "training.precision=fp32",
                        "training.epochs=2", "training.lr_warmup_steps=10",
                        "checkpoint.enabled=false", od};
    mxp_status s = mxp_config_builder_create(&b, &err);
    for (size_t i = 0; s == MXP_OK && i < sizeof kv / sizeof kv[0]; i++)
        s = mxp_config_apply_override(b, kv[i], &err);
    if (s == MXP_OK) s = mxp_config_resolve(b, &cfg, &err);
    mxp_config_builder_destroy(b);
    CHECK_OK(s, &err);
    if (s != MXP_OK) return;
    mxp_run *w = open_run(&cfg, &g_w, NULL);
    for (int k = 0; w && k < 2; k++) CHECK_OK(mxp_run_train(w, 1, 0, &err), &err);
    mxp_run_destroy(w);
    const int64_t N = g_w.n;
    const float lr = cfg.trainer.optim.lr;
    int64_t bad = 0;
    for (int64_t g = 0; g < N; g++) {
        float want = cosine(lr, 0.1f, g, N);
        if (g < W) want = (float)((double)want * (double)(g + 1) / (double)W);
        if (g_w.lr[g] != want && bad++ < 3)
            fprintf(stderr, "warmup: step %lld: lr %.9g, want %.9g\n", (long long)g + 1,
                    g_w.lr[g], want);
    }
    CHECK_MSG(N > 2 * W && bad == 0 && g_w.lr[0] == lr / 10.0f,
              "warmup: %lld of %lld learning rates differ", (long long)bad, (long long)N);
}

int main(void) {
    if (!mkdtemp(g_dir)) return 2;
    mxp_error err = {0};
    mxp_config cfg;
    if (!make_cfg("a", 3, false, &cfg)) return test_finish("test_schedule");
    const float lr = cfg.trainer.optim.lr;

    /* one call of 3 epochs vs three calls of 1 */
    mxp_run *a = open_run(&cfg, &g_a, NULL);
    if (a) CHECK_OK(mxp_run_train(a, 0, 0, &err), &err);
    mxp_run *b = open_run(&cfg, &g_b, NULL);
    for (int k = 0; b && k < 3; k++) CHECK_OK(mxp_run_train(b, 1, 0, &err), &err);
    const int64_t N = g_a.n, spe = N / 3;
    CHECK_MSG(N > 6 && N % 3 == 0 && g_b.n == N, "steps: %lld and %lld", (long long)N,
              (long long)g_b.n);
    int64_t diff = -1;
    for (int64_t i = 0; i < N && i < g_b.n && diff < 0; i++)
        if (memcmp(&g_a.loss[i], &g_b.loss[i], sizeof(double)) != 0 || g_a.lr[i] != g_b.lr[i])
            diff = i;
    CHECK_MSG(diff < 0, "train(1) x 3 differs from train(3) at step %lld", (long long)diff + 1);
    check_lrs("train(3)", &g_a, 0, lr, 0, N);
    CHECK(g_a.lr[N - 1] < 0.2f * lr && g_a.lr[0] == lr); /* it decays over the whole run */
    if (a && b) {
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/a.safetensors", g_dir);
        snprintf(pb, sizeof pb, "%s/b.safetensors", g_dir);
        CHECK_OK(mxp_run_save(a, pa, &err), &err);
        CHECK_OK(mxp_run_save(b, pb, &err), &err);
        mxp_st_file *fa = NULL, *fb = NULL;
        CHECK_OK(mxp_st_file_read(pa, &fa, &err), &err);
        CHECK_OK(mxp_st_file_read(pb, &fb, &err), &err);
        int same = 0, n = fa ? mxp_st_file_num_tensors(fa) : 0;
        for (int i = 0; fa && fb && i < n; i++) {
            const mxp_st_tensor *ta = mxp_st_file_tensor(fa, i);
            const mxp_st_tensor *tb = mxp_st_file_find(fb, ta->name);
            same += tb && ta->nbytes == tb->nbytes && !memcmp(ta->data, tb->data, ta->nbytes);
        }
        CHECK_MSG(n > 0 && same == n, "final state: %d of %d tensors identical", same, n);
        mxp_st_file_destroy(fa);
        mxp_st_file_destroy(fb);
    }
    /* a fourth call goes past training.epochs=3: the plan extends to its end */
    int64_t before = g_b.n;
    if (b) CHECK_OK(mxp_run_train(b, 1, 0, &err), &err);
    check_lrs("train(1) past the plan", &g_b, before, lr, 3 * spe, 4 * spe);
    mxp_run_destroy(a);
    mxp_run_destroy(b);

    /* a finished 2-epoch run resumed with training.epochs=4 */
    mxp_config c2, c4;
    if (make_cfg("c", 2, true, &c2) && make_cfg("c", 4, true, &c4)) {
        mxp_run *c = open_run(&c2, &g_c, NULL);
        if (c) CHECK_OK(mxp_run_train(c, 0, 0, &err), &err);
        mxp_run_destroy(c);
        CHECK(g_c.n == 2 * spe);
        check_lrs("2 epochs", &g_c, 0, lr, 0, 2 * spe);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/c", g_dir);
        mxp_run *d = open_run(&c4, &g_d, dir);
        if (d) CHECK_OK(mxp_run_train(d, 0, 0, &err), &err);
        mxp_run_info info;
        if (d) mxp_run_stats(d, &info);
        CHECK_MSG(d && info.resumed && g_d.n == 2 * spe && info.training_steps == 4 * spe,
                  "resumed: %lld steps now, %lld in all", (long long)g_d.n,
                  d ? (long long)info.training_steps : -1LL);
        check_lrs("resumed with training.epochs=4", &g_d, 0, lr, 2 * spe, 4 * spe);
        mxp_run_destroy(d);
    }
    check_warmup();
    test_rm_rf(g_dir);
    return test_finish("test_schedule");
}
