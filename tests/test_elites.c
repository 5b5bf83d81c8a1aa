/* tests/test_elites.c: per-member keep-best, elites and early stopping of
 * an ensemble (docs/world_models.md "Elites", docs/run.md "Validation
 * during training").
 *
 * Injected sequence: a provider wrapping the built-in world model with
 * model.ensemble=3, model.elites=2, whose evaluate returns a fixed table
 * of member losses (and the mean over the elites in force), with
 * training.early_stop.patience=2 and min_delta=0.1:
 *
 *   eval  member losses        improved  elites after  since best
 *   1     3.0   2.0   1.0      0 1 2     1 2           0
 *   2     2.5   2.5   1.5      0         0 2 (tie 2.5: index 0)  0
 *   3     2.45  1.95  0.95     -         1 2 (each by 0.05 < 0.1)  1
 *   4     2.6   1.0   2.0      1         1 2           0
 *   5     4.0   NaN   5.0      -         0 2 (NaN last) 1
 *   6     3.9   3.9   3.9      -         0 1           2 -> early stop
 *
 * hand-computed, checked: the rows' improved and elites masks, the elites
 * each evaluate saw (all members before the first validation), the early
 * stop after epoch 6, and best.safetensors holding member 0's parameters
 * and Adam moments of epoch 2, member 1's of epoch 4 and member 2's of
 * epoch 1 (captured by an observer after each validation), with elites
 * 1 2 (the two lowest best losses 1.0, 1.0) and best_val_loss 1.0; the
 * live training unchanged by the best file's swap (final weights equal
 * to a run without checkpoints); a stop after epoch 3 and a resume end
 * with the same elites, stop and best file as the uninterrupted run; the
 * same in mixed_bf16 and bf16 (and mixed_fp16, fp16 outside the quick run).
 * Real evaluation: the member losses of an ensemble average to its
 * val_loss with all members elite; model.elites=3 (= E) trains, validates
 * and predicts bit for bit as the default; config errors name the key.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_elites_XXXXXX";

#define E 3
#define NEVAL 6

static mxp_status build_cfg(const char *out, const char *const *extra, size_t n_extra,
                            mxp_config *cfg, mxp_error *err) {
    char od[400];
    snprintf(od, sizeof od, "output.dir=%s/%s", g_dir, out);
    const char *kv[] = {"model.workload=world_model", "data.trajectories=12",
                        "data.episode_length=40", "model.hidden=8", "model.depth=1",
                        "model.head=gaussian", "model.ensemble=3",
                        "training.batch_size=64", "training.precision=fp32",
                        "checkpoint.every_steps=0", od};
    return test_build_config(kv, sizeof kv / sizeof kv[0], extra, n_extra, cfg, err);
}

#define CFG(out, cfg, ...) CHECK_BUILD_CFG(build_cfg, out, cfg, __VA_ARGS__)

/* ---- the table ------------------------------------------------------------- */

static const double kLoss[NEVAL][E] = {{3.0, 2.0, 1.0},   {2.5, 2.5, 1.5}, {2.45, 1.95, 0.95},
                                       {2.6, 1.0, 2.0},   {4.0, NAN, 5.0}, {3.9, 3.9, 3.9}};
/* bit e: member e */
static const uint64_t kImproved[NEVAL] = {7, 1, 0, 2, 0, 0};
static const uint64_t kElites[NEVAL] = {6, 5, 6, 6, 5, 3};
static const bool kBest[NEVAL] = {true, true, false, true, false, false};

/* ---- a provider with injected member losses -------------------------------- */

typedef struct inj {
    mxp_workload_provider in; /* the built-in world model */
    int first, calls;
    int stop_at;              /* request a stop during this call (1-based); 0: never */
    mxp_run *run;
    uint64_t seen[NEVAL];     /* the model's elites each evaluate saw */
} inj;

static mxp_status i_eval(void *s, mxp_model *m, mxp_run_eval *o, mxp_error *e) {
    inj *g = s;
    (void)e;
    const int k = g->first + g->calls++;
    if (g->stop_at == g->calls && g->run) mxp_run_request_stop(g->run);
    snprintf(o->name, sizeof o->name, "val");
    const uint64_t el = mxp_model_elites(m);
    if (k < NEVAL) g->seen[k] = el;
    o->members = E;
    o->elites = el;
    double sum = 0.0;
    int n = 0;
    for (int j = 0; j < E; j++) {
        o->member_loss[j] = k < NEVAL ? kLoss[k][j] : 10.0 + k;
        if (el >> j & 1u) {
            sum += o->member_loss[j];
            n++;
        }
    }
    o->loss = sum / n;
    return MXP_OK;
}
static void inj_init(inj *g, const mxp_config *cfg, int first) {
    memset(g, 0, sizeof *g);
    mxp_error err = {0};
    CHECK_OK(mxp_workload_provider_builtin(cfg, &g->in, &err), &err);
    g->first = first;
}

static mxp_workload_provider inj_provider(inj *g) {
    mxp_workload_provider p = test_wrap_provider(&g->in); /* self: g, in its first member */
    p.evaluate = i_eval;
    return p;
}

/* ---- the live state after each validation (observer) ------------------------- */

typedef struct snaps {
    size_t P;
    float *w[NEVAL], *m[NEVAL]; /* parameters and optim.m after validation k */
    int n;
} snaps;

static float *get_role(mxp_trainer *t, mxp_tensor_role r, size_t P) {
    float *b = test_xmalloc(P * sizeof(float));
    mxp_error err = {0};
    CHECK_OK(mxp_trainer_tensor_get(t, r, NULL, MXP_DTYPE_F32, b, P * sizeof(float), &err), &err);
    return b;
}

static void on_eval(void *self, mxp_run *run, const mxp_run_val_row *v) {
    (void)v;
    snaps *s = self;
    if (s->n >= NEVAL) return;
    s->P = mxp_model_num_params(mxp_run_model(run));
    s->w[s->n] = get_role(mxp_run_trainer(run), MXP_TENSOR_PARAM, s->P);
    s->m[s->n] = get_role(mxp_run_trainer(run), MXP_TENSOR_OPTIM_M, s->P);
    s->n++;
}

static void snaps_free(snaps *s) {
    for (int k = 0; k < NEVAL; k++) {
        free(s->w[k]);
        free(s->m[k]);
    }
}

static mxp_run *open_run(const mxp_config *cfg, const mxp_workload_provider *prov, snaps *s,
                         mxp_run_observer *obs, const char *resume, bool ckpt) {
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.provider = prov;
    o.resume = resume;
    o.checkpoints = ckpt;
    if (s) {
        memset(obs, 0, sizeof *obs);
        obs->self = s;
        obs->evaluated = on_eval;
        o.observer = obs;
    }
    mxp_run *run = NULL;
    CHECK_OK(mxp_run_create(cfg, &o, &run, &err), &err);
    return run;
}

/* Member e's block of a [P] slab equals that of want. */
static bool same_block(const float *got, const float *want, size_t P, int e) {
    const size_t b = P / E;
    return memcmp(got + (size_t)e * b, want + (size_t)e * b, b * sizeof(float)) == 0;
}

/* best.safetensors (through a run resumed from it) holds member 0 of
 * epoch 2, member 1 of epoch 4, member 2 of epoch 1, and elites 1 2. */
static void check_best_file(const snaps *s, const char *best, const char *out, const char *prec) {
    mxp_config cr;
    CFG(out, &cr, "training.epochs=20", "training.eval_every=1", prec);
    snaps none = {0};
    mxp_run_observer obs;
    mxp_run *r = open_run(&cr, NULL, &none, &obs, best, true);
    if (!r) return;
    const size_t P = s->P;
    float *w = get_role(mxp_run_trainer(r), MXP_TENSOR_PARAM, P);
    float *m = get_role(mxp_run_trainer(r), MXP_TENSOR_OPTIM_M, P);
    const int from[E] = {1, 3, 0}; /* validation index of each member's best */
    for (int e = 0; e < E; e++) {
        CHECK_MSG(same_block(w, s->w[from[e]], P, e) && same_block(m, s->m[from[e]], P, e),
                  "best.safetensors: member %d is not its weights/moments of epoch %d", e,
                  from[e] + 1);
        const int other = from[e] == 5 ? 4 : 5; /* and not the last ones */
        CHECK_MSG(!same_block(w, s->w[other], P, e), "member %d: weights of epoch %d too", e,
                  other + 1);
    }
    CHECK_MSG(mxp_run_elites(r) == 6 && mxp_model_elites(mxp_run_model(r)) == 6,
              "best file's elites 0x%llx, want members 1 2",
              (unsigned long long)mxp_run_elites(r));
    mxp_run_info info;
    mxp_run_stats(r, &info);
    CHECK_MSG(info.best_val_loss == 1.0 && info.best_epoch == 4,
              "best file's state: best %g at epoch %lld", info.best_val_loss,
              (long long)info.best_epoch);
    free(w);
    free(m);
    mxp_run_destroy(r);
    snaps_free(&none);
}

static void test_injected(void) {
    mxp_error err = {0};
    mxp_config cfg;
    CFG("inj", &cfg, "model.elites=2", "training.epochs=20", "training.eval_every=1",
        "training.early_stop.patience=2", "training.early_stop.min_delta=0.1");
    inj g;
    inj_init(&g, &cfg, 0);
    mxp_workload_provider p = inj_provider(&g);
    snaps s = {0};
    mxp_run_observer obs;
    mxp_run *run = open_run(&cfg, &p, &s, &obs, NULL, true);
    if (!run) return;
    CHECK_MSG(mxp_run_elites(run) == 7, "elites before the first validation: 0x%llx",
              (unsigned long long)mxp_run_elites(run));
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    const int64_t spe = info.samples_per_epoch / 64;
    CHECK_MSG(info.early_stopped && info.training_steps == 6 * spe && info.evaluations == 6 &&
                  info.best_epoch == 4 && info.evals_since_best == 2 &&
                  info.best_val_loss == 1.0,
              "early %d at %lld steps (want %lld), %lld evals, best %g at epoch %lld, since %lld",
              info.early_stopped, (long long)info.training_steps, (long long)(6 * spe),
              (long long)info.evaluations, info.best_val_loss, (long long)info.best_epoch,
              (long long)info.evals_since_best);
    size_t nv = 0;
    const mxp_run_val_row *v = mxp_run_val_history(run, &nv);
    CHECK_MSG(nv == NEVAL, "%zu validation rows", nv);
    for (size_t k = 0; v && k < nv && k < NEVAL; k++) {
        const uint64_t before = k ? kElites[k - 1] : 7;
        CHECK_MSG(v[k].members == E && v[k].improved == kImproved[k] &&
                      v[k].elites == kElites[k] && v[k].best == kBest[k] &&
                      g.seen[k] == before,
                  "validation %zu: members %d improved 0x%llx (want 0x%llx) elites 0x%llx "
                  "(want 0x%llx) best %d, evaluated with elites 0x%llx (want 0x%llx)",
                  k + 1, v[k].members, (unsigned long long)v[k].improved,
                  (unsigned long long)kImproved[k], (unsigned long long)v[k].elites,
                  (unsigned long long)kElites[k], v[k].best, (unsigned long long)g.seen[k],
                  (unsigned long long)before);
        for (int e = 0; e < E; e++)
            CHECK(isnan(kLoss[k][e]) ? isnan(v[k].member_loss[e])
                                     : v[k].member_loss[e] == kLoss[k][e]);
    }
    CHECK(mxp_run_elites(run) == kElites[NEVAL - 1] &&
          mxp_model_elites(mxp_run_model(run)) == kElites[NEVAL - 1]);
    char js[16384];
    CHECK(mxp_run_stats_json(run, js, sizeof js) > 0 && strstr(js, "\"elites\":[0,1]") &&
          strstr(js, "\"member_best_val_loss\":[2.5,1,1]"));
    mxp_run_destroy(run);
    CHECK(s.n == NEVAL);
    /* the live weights differ between the validations (the test can tell) */
    for (int e = 0; s.n == NEVAL && e < E; e++)
        CHECK(!same_block(s.w[1], s.w[3], s.P, e) && !same_block(s.w[0], s.w[1], s.P, e));
    char best[700];
    snprintf(best, sizeof best, "%s/inj/best.safetensors", g_dir);
    if (s.n == NEVAL) check_best_file(&s, best, "from_best", "training.precision=fp32");

    /* the swap for the best file leaves the training as it was: the final
     * weights equal those of a run without checkpoints (no best file) */
    mxp_config c2;
    CFG("nockpt", &c2, "model.elites=2", "training.epochs=20", "training.eval_every=1",
        "training.early_stop.patience=2", "training.early_stop.min_delta=0.1");
    inj g2;
    inj_init(&g2, &c2, 0);
    mxp_workload_provider p2 = inj_provider(&g2);
    snaps s2 = {0};
    mxp_run_observer obs2;
    mxp_run *r2 = open_run(&c2, &p2, &s2, &obs2, NULL, false);
    if (r2) {
        CHECK_OK(mxp_run_train(r2, 0, 0, &err), &err);
        CHECK_MSG(s2.n == NEVAL && s.n == NEVAL &&
                      memcmp(s2.w[NEVAL - 1], s.w[NEVAL - 1], s.P * sizeof(float)) == 0 &&
                      memcmp(s2.m[NEVAL - 1], s.m[NEVAL - 1], s.P * sizeof(float)) == 0,
                  "keep-best changed the training (weights after the last validation)");
    }
    mxp_run_destroy(r2);
    snaps_free(&s2);

    /* stop after epoch 3, resume: the elites come back from the checkpoint,
     * the run stops after epoch 6, and the best file is the uninterrupted one's */
    mxp_config c4;
    CFG("stop", &c4, "model.elites=2", "training.epochs=20", "training.eval_every=1",
        "training.early_stop.patience=2", "training.early_stop.min_delta=0.1");
    inj g4;
    inj_init(&g4, &c4, 0);
    g4.stop_at = 3;
    mxp_workload_provider p4 = inj_provider(&g4);
    mxp_run *r4 = open_run(&c4, &p4, NULL, NULL, NULL, true);
    if (r4) {
        g4.run = r4;
        CHECK_OK(mxp_run_train(r4, 0, 0, &err), &err);
        mxp_run_stats(r4, &info);
        CHECK_MSG(info.stopped && info.training_steps == 3 * spe, "stop: %d at %lld",
                  info.stopped, (long long)info.training_steps);
    }
    mxp_run_destroy(r4);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/stop", g_dir);
    inj g5;
    inj_init(&g5, &c4, 3); /* the evaluations after the third */
    mxp_workload_provider p5 = inj_provider(&g5);
    mxp_run *r5 = open_run(&c4, &p5, NULL, NULL, dir, true);
    if (r5) {
        CHECK_MSG(mxp_run_elites(r5) == kElites[2], "resumed elites 0x%llx, want 0x%llx",
                  (unsigned long long)mxp_run_elites(r5), (unsigned long long)kElites[2]);
        CHECK_OK(mxp_run_train(r5, 0, 0, &err), &err);
        mxp_run_stats(r5, &info);
        CHECK_MSG(info.early_stopped && info.training_steps == 6 * spe && info.best_epoch == 4 &&
                      g5.seen[3] == kElites[2] && mxp_run_elites(r5) == kElites[NEVAL - 1],
                  "resumed: early %d at %lld, best epoch %lld, elites seen 0x%llx",
                  info.early_stopped, (long long)info.training_steps,
                  (long long)info.best_epoch, (unsigned long long)g5.seen[3]);
    }
    mxp_run_destroy(r5);
    snprintf(best, sizeof best, "%s/stop/best.safetensors", g_dir);
    if (s.n == NEVAL) check_best_file(&s, best, "from_best2", "training.precision=fp32");
    snaps_free(&s);
}

/* The same sequence in another precision mode (mixed: FP32 master; pure:
 * the BF16/FP16 working weights are the parameters of record, with
 * stochastic rounding): best.safetensors holds each member's own best
 * weights and moments, and writing it leaves the training bit for bit as a
 * run without checkpoints. */
static void test_mode(const char *mode) {
    mxp_error err = {0};
    char prec[64], on[64], off[64], from[64];
    snprintf(prec, sizeof prec, "training.precision=%s", mode);
    snprintf(on, sizeof on, "mode_%s", mode);
    snprintf(off, sizeof off, "mode_%s_nockpt", mode);
    snprintf(from, sizeof from, "mode_%s_best", mode);
    snaps s[2] = {{0}, {0}};
    for (int k = 0; k < 2; k++) {
        mxp_config cfg;
        CFG(k ? off : on, &cfg, "model.elites=2", "training.epochs=20", "training.eval_every=1",
            "training.early_stop.patience=2", "training.early_stop.min_delta=0.1", prec);
        inj g;
        inj_init(&g, &cfg, 0);
        mxp_workload_provider p = inj_provider(&g);
        mxp_run_observer obs;
        mxp_run *run = open_run(&cfg, &p, &s[k], &obs, NULL, k == 0);
        if (run) CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
        mxp_run_destroy(run);
    }
    CHECK_MSG(s[0].n == NEVAL && s[1].n == NEVAL &&
                  memcmp(s[0].w[NEVAL - 1], s[1].w[NEVAL - 1], s[0].P * sizeof(float)) == 0 &&
                  memcmp(s[0].m[NEVAL - 1], s[1].m[NEVAL - 1], s[0].P * sizeof(float)) == 0,
              "%s: keep-best changed the training", mode);
    char best[700];
    snprintf(best, sizeof best, "%s/%s/best.safetensors", g_dir, on);
    if (s[0].n == NEVAL) check_best_file(&s[0], best, from, prec);
    snaps_free(&s[0]);
    snaps_free(&s[1]);
}

/* ---- real evaluation --------------------------------------------------------- */

/* Train cfg 2 epochs with validation; the final weights into *w, the
 * history losses into loss[], the last evaluation into *ev. */
static size_t train_real(const mxp_config *cfg, float **w, double *loss, size_t nmax,
                         mxp_run_eval *ev) {
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.checkpoints = false;
    mxp_run *run = NULL;
    CHECK_OK(mxp_run_create(cfg, &o, &run, &err), &err);
    if (!run) return 0;
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    const size_t P = mxp_model_num_params(mxp_run_model(run));
    *w = get_role(mxp_run_trainer(run), MXP_TENSOR_PARAM, P);
    size_t n = 0;
    const mxp_history_row *h = mxp_trainer_history(mxp_run_trainer(run), &n);
    for (size_t i = 0; i < n && i < nmax; i++) loss[i] = h[i].loss;
    CHECK_OK(mxp_run_evaluate(run, ev, &err), &err);
    size_t nv = 0;
    mxp_run_val_history(run, &nv);
    CHECK(nv == 2);
    mxp_run_destroy(run);
    return P;
}

static void test_real(void) {
    mxp_config a, b;
    CFG("real_default", &a, "training.epochs=2", "training.eval_every=1");
    CFG("real_k3", &b, "training.epochs=2", "training.eval_every=1", "model.elites=3");
    static double la[4096], lb[4096];
    float *wa = NULL, *wb = NULL;
    mxp_run_eval ea, eb;
    const size_t P = train_real(&a, &wa, la, 4096, &ea);
    const size_t P2 = train_real(&b, &wb, lb, 4096, &eb);
    CHECK(P > 0 && P == P2 && wa && wb && memcmp(wa, wb, P * sizeof(float)) == 0 &&
          memcmp(la, lb, sizeof la) == 0);
    /* every member elite: the val_loss is the mean of the member losses */
    CHECK_MSG(ea.members == E && ea.elites == 7 && eb.elites == 7 &&
                  memcmp(&ea.loss, &eb.loss, sizeof ea.loss) == 0 &&
                  fabs((ea.member_loss[0] + ea.member_loss[1] + ea.member_loss[2]) / 3 -
                       ea.loss) <= 1e-12 * fabs(ea.loss) &&
                  isnan(ea.member_loss[E]),
              "members %d elites 0x%llx loss %.17g member mean %.17g", ea.members,
              (unsigned long long)ea.elites, ea.loss,
              (ea.member_loss[0] + ea.member_loss[1] + ea.member_loss[2]) / 3);
    free(wa);
    free(wb);

    /* K = 1: after the validations, the one elite is the member of lowest
     * loss, and the evaluation's loss is that member's */
    mxp_config c;
    CFG("real_k1", &c, "training.epochs=2", "training.eval_every=1", "model.elites=1");
    float *wc = NULL;
    static double lc[4096];
    mxp_run_eval ec;
    train_real(&c, &wc, lc, 4096, &ec);
    int lo = 0;
    for (int e = 1; e < E; e++)
        if (ec.member_loss[e] < ec.member_loss[lo]) lo = e;
    CHECK_MSG(ec.elites == (1ull << lo) && ec.loss == ec.member_loss[lo] &&
                  memcmp(lc, la, sizeof la) == 0,
              "elites=1: elites 0x%llx loss %.17g, lowest member %d %.17g",
              (unsigned long long)ec.elites, ec.loss, lo, ec.member_loss[lo]);
    free(wc);
}

static void test_config_errors(void) {
    mxp_config cfg;
    mxp_error err = {0};
    const char *ex[] = {"model.elites=4"};
    CHECK(build_cfg("bad", ex, 1, &cfg, &err) == MXP_ERR_CONFIG);
    CHECK_MSG(strstr(err.msg, "model.elites=4") && strstr(err.msg, "accepted: 1..3"),
              "message: %s", err.msg);
    const char *ex2[] = {"model.elites=65"};
    CHECK(build_cfg("bad", ex2, 1, &cfg, &err) != MXP_OK && strstr(err.msg, "model.elites"));
    mxp_model *m = NULL;
    mxp_model_spec sp = mxp_model_spec_mlp(3, 4, 1, 2, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 8);
    sp.ensemble = 3;
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    CHECK_OK(mxp_model_create(&sp, &pol, 1, &m, &err), &err);
    if (!m) return;
    CHECK(mxp_model_elites(m) == 7);
    CHECK(mxp_model_set_elites(m, 0, &err) == MXP_ERR_INVALID_ARG && strstr(err.msg, "0x7"));
    CHECK(mxp_model_set_elites(m, 8, &err) == MXP_ERR_INVALID_ARG);
    CHECK_OK(mxp_model_set_elites(m, 5, &err), &err);
    CHECK(mxp_model_elites(m) == 5);
    mxp_model_destroy(m);
}

int main(void) {
    if (!mkdtemp(g_dir)) return 2;
    test_config_errors();
    test_injected();
    test_mode("mixed_bf16");
    test_mode("bf16");
    if (!test_quick()) {
        test_mode("mixed_fp16");
        test_mode("fp16");
    }
    test_real();
    test_rm_rf(g_dir);
    return test_finish("test_elites");
}
