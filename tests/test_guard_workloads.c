/* tests/test_guard_workloads.c: the numerical-safety guard in the
 * classifier and GPT workloads (as the world model has it).
 *
 *   - gpt, mixed_fp16, gpt.embed_scale=1e7 (docs/workloads.md's overflow
 *     recipe, pushed so the embedding output exceeds 65504 from step 1):
 *     every step's loss is non-finite; after 10 the guard's nonfinite_loss
 *     rule (P0, fallback+rollback) fires, names layer 0 (embedding) in the
 *     forward pass, rolls back to the snapshot before step 1 and falls back
 *     to mixed_bf16; the run completes with finite losses and a finite
 *     held-out loss;
 *   - classifier, mixed_fp16, NaN injected into layer 2's output at steps
 *     5..14: the same recovery; the rollback to the snapshot before step 1
 *     replays attempts 1..14 (40 + 14 history rows); a stop action ends train()
 *     early with mxp_classifier_stopped;
 *   - a healthy run's loss history is bit-identical with the guard on and
 *     off (guard.enabled=false), for both workloads;
 *   - guard.enabled=false and no fault: no guard is created.
 * The classifier part needs Fashion-MNIST (Debian dataset-fashion-mnist),
 * as tests/test_classifier.c does.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char g_dir[64];

static mxp_status make_cfg(const char *const *kv, int n, mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    for (int i = 0; s == MXP_OK && i < n; i++) s = mxp_config_apply_override(b, kv[i], err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s;
}

/* Losses of the trainer's history. */
static double *losses(mxp_trainer *t, size_t *n) {
    const mxp_history_row *h = mxp_trainer_history(t, n);
    double *l = malloc(*n * sizeof(double) + 1);
    for (size_t i = 0; i < *n; i++) l[i] = h[i].loss;
    return l;
}

/* ---- gpt ----------------------------------------------------------------- */

static void write_text(const char *path) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    const char *words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog. "};
    for (int i = 0; i < 4000; i++) fputs(words[(i * 5 + i / 8) % 8], f);
    fclose(f);
}

static const char *g_gpt_base[] = {
    "model.workload=gpt", "gpt.layers=1", "gpt.embd=16", "gpt.heads=2", "gpt.context=16",
    "training.batch_size=4", "training.lr=0.003", "training.epochs=1", "data.train_subset=160",
    "data.test_subset=16", NULL /* data.text_file */, NULL, NULL, NULL};

static mxp_gpt *make_gpt(const char *a, const char *b, const char *c) {
    char kv[128];
    snprintf(kv, sizeof kv, "data.text_file=%s/text.txt", g_dir);
    const char *ov[14];
    memcpy(ov, g_gpt_base, sizeof ov);
    int n = 10;
    ov[n++] = kv;
    if (a) ov[n++] = a;
    if (b) ov[n++] = b;
    if (c) ov[n++] = c;
    mxp_config cfg;
    mxp_error err = {0};
    mxp_gpt *g = NULL;
    CHECK_OK(make_cfg(ov, n, &cfg, &err), &err);
    CHECK_OK(mxp_gpt_create(&cfg, &g, &err), &err);
    return g;
}

static void test_gpt_overflow(void) {
    mxp_gpt *g = make_gpt("training.precision=mixed_fp16", "gpt.embed_scale=1e7", NULL);
    if (!g) return;
    mxp_guard *gd = mxp_gpt_guard(g);
    CHECK(gd != NULL);
    mxp_error err = {0};
    CHECK_OK(mxp_gpt_train(g, 1, &err), &err);
    mxp_guard_status st;
    mxp_guard_get_status(gd, &st);
    CHECK_MSG(st.fired[MXP_RULE_NONFINITE_LOSS] == 1 && st.fallbacks == 1 && st.rollbacks == 1,
              "fired %lld fallbacks %lld rollbacks %lld",
              (long long)st.fired[MXP_RULE_NONFINITE_LOSS], (long long)st.fallbacks,
              (long long)st.rollbacks);
    CHECK(st.initial == MXP_PRECISION_MIXED_FP16 && st.current == MXP_PRECISION_MIXED_BF16);
    CHECK_MSG(st.first_site.found && !st.first_site.backward && st.first_site.layer == 0 &&
                  strcmp(st.first_site.op, "embedding") == 0,
              "site: %s layer %d (%s)", st.first_site.backward ? "backward" : "forward",
              st.first_site.layer, st.first_site.op ? st.first_site.op : "?");
    size_t n = 0;
    const mxp_history_row *h = mxp_trainer_history(mxp_gpt_trainer(g), &n);
    /* 40 steps per epoch; 10 lost ones, replayed after the rollback */
    CHECK_MSG(n == 50, "history rows %zu, expected 40 steps + 10 replayed", n);
    bool tail_ok = n == 50;
    for (size_t i = 10; i < n; i++) tail_ok = tail_ok && isfinite(h[i].loss) && !h[i].skipped;
    CHECK_MSG(tail_ok, "steps after the fallback are not all finite and applied");
    double vl = NAN;
    CHECK_OK(mxp_gpt_evaluate(g, &vl, &err), &err);
    CHECK(isfinite(vl));
    CHECK(!mxp_gpt_stopped(g));
    mxp_gpt_destroy(g);
}

static void test_gpt_healthy_same(void) {
    mxp_gpt *a = make_gpt("training.precision=mixed_bf16", "guard.canary.every_steps=7", NULL);
    mxp_gpt *b = make_gpt("training.precision=mixed_bf16", "guard.enabled=false", NULL);
    if (!a || !b) return;
    CHECK(mxp_gpt_guard(a) != NULL && mxp_gpt_guard(b) == NULL);
    mxp_error err = {0};
    CHECK_OK(mxp_gpt_train(a, 1, &err), &err);
    CHECK_OK(mxp_gpt_train(b, 1, &err), &err);
    size_t na, nb;
    double *la = losses(mxp_gpt_trainer(a), &na), *lb = losses(mxp_gpt_trainer(b), &nb);
    CHECK(na == 40 && nb == na && memcmp(la, lb, na * sizeof(double)) == 0);
    mxp_guard_status st;
    mxp_guard_get_status(mxp_gpt_guard(a), &st);
    CHECK_MSG(isfinite(st.canary_divergence) && st.canary_divergence < 0.05,
              "gpt canary divergence %g", st.canary_divergence);
    free(la);
    free(lb);
    mxp_gpt_destroy(a);
    mxp_gpt_destroy(b);
}

/* ---- classifier ------------------------------------------------------------ */

static mxp_classifier *make_cls(const mxp_fmnist *d, const char *a, const char *b,
                                const char *c) {
    const char *ov[10] = {"model.workload=classifier", "model.hidden=32", "model.depth=2",
                          "training.batch_size=32", "training.epochs=1"};
    int n = 5;
    if (a) ov[n++] = a;
    if (b) ov[n++] = b;
    if (c) ov[n++] = c;
    mxp_config cfg;
    mxp_error err = {0};
    mxp_classifier *cl = NULL;
    CHECK_OK(make_cfg(ov, n, &cfg, &err), &err);
    CHECK_OK(mxp_classifier_create_with_data(&cfg, d, &cl, &err), &err);
    return cl;
}

static void test_classifier(const mxp_fmnist *d) {
    /* 1280 images / 32 = 40 steps; NaN in layer 2's output at steps 5..14 */
    mxp_error err = {0};
    mxp_classifier *cl = NULL;
    const char *ov[10] = {"model.workload=classifier", "model.hidden=32", "model.depth=2",
                          "training.batch_size=32", "training.epochs=1",
                          "training.precision=mixed_fp16", "fault.kind=nan", "fault.layer=2",
                          "fault.step=5", "fault.count=10"};
    mxp_config cfg;
    CHECK_OK(make_cfg(ov, 10, &cfg, &err), &err);
    CHECK_OK(mxp_classifier_create_with_data(&cfg, d, &cl, &err), &err);
    if (!cl) return;
    mxp_guard *gd = mxp_classifier_guard(cl);
    CHECK(gd != NULL);
    CHECK_OK(mxp_classifier_train(cl, 1, &err), &err);
    mxp_guard_status st;
    mxp_guard_get_status(gd, &st);
    CHECK_MSG(st.fired[MXP_RULE_NONFINITE_LOSS] == 1 && st.fallbacks == 1 && st.rollbacks == 1,
              "classifier: fired %lld fallbacks %lld rollbacks %lld",
              (long long)st.fired[MXP_RULE_NONFINITE_LOSS], (long long)st.fallbacks,
              (long long)st.rollbacks);
    CHECK(st.current == MXP_PRECISION_MIXED_BF16);
    CHECK(st.first_site.found && !st.first_site.backward && st.first_site.layer == 2);
    size_t n = 0;
    mxp_trainer_history(mxp_classifier_trainer(cl), &n);
    /* rolled back to the snapshot before step 1 (the next is due after 100
     * healthy steps): attempts 1..14 are replayed */
    CHECK_MSG(n == 54, "classifier history %zu rows, expected 40 + 14 replayed", n);
    double loss = NAN, acc = NAN;
    CHECK_OK(mxp_classifier_evaluate(cl, &loss, &acc, &err), &err);
    CHECK(isfinite(loss) && acc > 0.3);
    mxp_classifier_destroy(cl);

    /* a stop action ends train() early */
    const char *ov2[11] = {"model.workload=classifier", "model.hidden=32", "model.depth=2",
                           "training.batch_size=32", "training.epochs=1",
                           "training.precision=mixed_fp16", "fault.kind=nan", "fault.step=3",
                           "fault.count=0", "guard.nonfinite_loss.action=stop"};
    CHECK_OK(make_cfg(ov2, 10, &cfg, &err), &err);
    cl = NULL;
    CHECK_OK(mxp_classifier_create_with_data(&cfg, d, &cl, &err), &err);
    if (!cl) return;
    CHECK_OK(mxp_classifier_train(cl, 1, &err), &err);
    CHECK(mxp_classifier_stopped(cl));
    mxp_trainer_history(mxp_classifier_trainer(cl), &n);
    CHECK_MSG(n == 12, "stopped after %zu steps, expected 12 (NaN from step 3, 10 in a row)", n);
    mxp_classifier_destroy(cl);

    /* healthy: bit-identical with and without the guard */
    mxp_classifier *a = make_cls(d, "training.precision=mixed_fp16", "guard.canary.every_steps=5",
                                 NULL);
    mxp_classifier *b = make_cls(d, "training.precision=mixed_fp16", "guard.enabled=false", NULL);
    if (!a || !b) return;
    CHECK(mxp_classifier_guard(b) == NULL);
    CHECK_OK(mxp_classifier_train(a, 1, &err), &err);
    CHECK_OK(mxp_classifier_train(b, 1, &err), &err);
    size_t na, nb;
    double *la = losses(mxp_classifier_trainer(a), &na), *lb = losses(mxp_classifier_trainer(b), &nb);
    CHECK(na == 40 && nb == na && memcmp(la, lb, na * sizeof(double)) == 0);
    mxp_guard_get_status(mxp_classifier_guard(a), &st);
    CHECK_MSG(isfinite(st.canary_divergence) && st.canary_divergence < 0.05,
              "classifier canary divergence %g", st.canary_divergence);
    free(la);
    free(lb);
    mxp_classifier_destroy(a);
    mxp_classifier_destroy(b);
}

int main(void) {
    mxp_log_set_level(MXP_LOG_ERROR);
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_gw_%d", (int)getpid());
    CHECK(mkdir(g_dir, 0700) == 0);
    char path[128];
    snprintf(path, sizeof path, "%s/text.txt", g_dir);
    write_text(path);
    test_gpt_overflow();
    test_gpt_healthy_same();
    remove(path);
    rmdir(g_dir);

    mxp_fmnist *d = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_fmnist_load(MXP_FMNIST_DEFAULT_DIR, 1280, 256, &d, &err), &err);
    if (d) test_classifier(d);
    mxp_fmnist_destroy(d);
    return test_finish("test_guard_workloads");
}
