/* tests/test_validation.c: validation during training, early stopping and
 * keep-best (docs/run.md "Validation during training").
 *
 * Injected sequence (a provider wrapping the built-in world model whose
 * evaluate returns a fixed list of losses and snapshots the weights it
 * was given): with patience 3, min_delta 0.02 and the losses 1.0, 0.8,
 * 0.85, 0.79, 0.795, ... the hand-computed run is: new bests at epochs 1
 * and 2 (0.79 improves 0.8 by 0.01 < min_delta: not a best), stop after
 * epoch 5; best.safetensors holds the weights evaluated at epoch 2 (not
 * 4), restored bit for bit by a resume from it; a resume after a stop at
 * epoch 3 stops at epoch 5 too (the state is in the checkpoint); the
 * early-stopped run resumed trains nothing; eval_every=2 validates at
 * epochs 2, 4, 6 (history rows at the steps ending them).
 * Real evaluation: the training losses and final weights with
 * training.eval_every=1 are bit for bit those without (fp32, mixed_bf16;
 * also mixed_fp16, bf16, fp8 outside the quick run); train(1) x 3 == train(3)
 * with validation on (losses and validation losses); the stop epoch of a
 * real run recomputed here from its recorded validation losses; the best
 * checkpoint re-evaluated gives the recorded best loss exactly.
 * Config errors name the keys and accepted ranges.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_validation_XXXXXX";

#define MAX_STEPS 8192
#define MAX_EVALS 16

/* ---- config -------------------------------------------------------------- */

static mxp_status build_cfg(const char *out, const char *const *extra, size_t n_extra,
                            mxp_config *cfg, mxp_error *err) {
    char od[400];
    snprintf(od, sizeof od, "output.dir=%s/%s", g_dir, out);
    const char *kv[] = {"model.workload=world_model", "data.trajectories=12",
                        "data.episode_length=40", "model.hidden=16", "model.depth=1",
                        "training.batch_size=32", "training.precision=fp32",
                        "checkpoint.every_steps=0", od};
    return test_build_config(kv, sizeof kv / sizeof kv[0], extra, n_extra, cfg, err);
}

#define CFG(out, cfg, ...) CHECK_BUILD_CFG(build_cfg, out, cfg, __VA_ARGS__)

/* ---- a provider with injected validation losses ----------------------------- */

typedef struct inj {
    mxp_workload_provider in; /* the built-in world model */
    const double *seq;
    int n, calls;
    int stop_at;            /* request a stop during this call (1-based); 0: never */
    mxp_run *run;           /* for the stop request */
    size_t P;
    float *snap[MAX_EVALS]; /* the weights each evaluate saw */
} inj;

static const char *i_meta(void *s) {
    inj *g = s;
    return g->in.checkpoint_meta ? g->in.checkpoint_meta(g->in.self) : NULL;
}
static mxp_status i_eval(void *s, mxp_model *m, mxp_run_eval *o, mxp_error *e) {
    inj *g = s;
    (void)e;
    const int k = g->calls++;
    if (k < MAX_EVALS) {
        g->P = mxp_model_num_params(m);
        g->snap[k] = test_xmalloc(g->P * sizeof(float));
        for (size_t i = 0; i < g->P; i++) g->snap[k][i] = mxp_model_param(m, i);
    }
    if (g->stop_at == k + 1 && g->run) mxp_run_request_stop(g->run);
    snprintf(o->name, sizeof o->name, "val");
    o->loss = k < g->n ? g->seq[k] : 10.0 + k;
    return MXP_OK;
}
static void inj_init(inj *g, const mxp_config *cfg, const double *seq, int n, int first) {
    memset(g, 0, sizeof *g);
    mxp_error err = {0};
    CHECK_OK(mxp_workload_provider_builtin(cfg, &g->in, &err), &err);
    g->seq = seq + first;
    g->n = n - first;
}

static mxp_workload_provider inj_provider(inj *g) {
    mxp_workload_provider p = test_wrap_provider(&g->in); /* self: g, in its first member */
    p.evaluate = i_eval;
    p.checkpoint_meta = i_meta;
    return p;
}

static void inj_free(inj *g) {
    for (int k = 0; k < MAX_EVALS; k++) free(g->snap[k]);
}

/* ---- recording ------------------------------------------------------------- */

typedef struct rec {
    int64_t n;
    double loss[MAX_STEPS];
} rec;

static void on_progress(void *user, const mxp_run_progress *p) {
    rec *r = user;
    if (r->n < MAX_STEPS) r->loss[r->n++] = p->result->loss;
}

static mxp_run *open_run(const mxp_config *cfg, const mxp_workload_provider *prov, rec *r,
                         const char *resume) {
    mxp_error err = {0};
    mxp_run_options o = mxp_run_options_default();
    o.provider = prov;
    o.progress = r ? on_progress : NULL;
    o.progress_user = r;
    o.resume = resume;
    mxp_run *run = NULL;
    CHECK_OK(mxp_run_create(cfg, &o, &run, &err), &err);
    return run;
}

/* The model's parameters equal w[0..P) bit for bit. */
static bool same_params(mxp_model *m, const float *w, size_t P) {
    if (!m || !w || mxp_model_num_params(m) != P) return false;
    for (size_t i = 0; i < P; i++) {
        float a = mxp_model_param(m, i);
        if (memcmp(&a, &w[i], sizeof a) != 0) return false;
    }
    return true;
}

/* the injected validation losses */
static const double kSeq[] = {1.0, 0.8, 0.85, 0.79, 0.795, 0.5, 0.4};
#define NSEQ ((int)(sizeof kSeq / sizeof kSeq[0]))

/* A run of cfg over kSeq from its first-th value on (g: the provider's
 * state; a stop requested at its stop_at-th evaluation when not 0),
 * resumed from resume when not NULL. */
static mxp_run *inj_run(inj *g, const mxp_config *cfg, int first, int stop_at,
                        const char *resume) {
    inj_init(g, cfg, kSeq, NSEQ, first);
    g->stop_at = stop_at;
    mxp_workload_provider p = inj_provider(g);
    g->run = open_run(cfg, &p, NULL, resume);
    return g->run;
}

static int64_t steps_per_epoch(mxp_run *run) {
    mxp_run_info i;
    mxp_run_stats(run, &i);
    return i.samples_per_epoch / 32;
}

/* ---- injected sequence ------------------------------------------------------- */

static void test_injected(void) {
    mxp_error err = {0};
    mxp_config cfg;
    CFG("inj", &cfg, "training.epochs=10", "training.eval_every=1",
        "training.early_stop.patience=3", "training.early_stop.min_delta=0.02");
    inj g;
    mxp_run *run = inj_run(&g, &cfg, 0, 0, NULL);
    if (!run) return;
    const int64_t spe = steps_per_epoch(run);
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    /* hand-computed: bests at epochs 1, 2; stop after epoch 5 */
    CHECK_MSG(info.early_stopped && !info.stopped && info.finished,
              "early_stopped %d stopped %d finished %d", info.early_stopped, info.stopped,
              info.finished);
    CHECK_MSG(info.training_steps == 5 * spe, "stopped after %lld steps, want %lld",
              (long long)info.training_steps, (long long)(5 * spe));
    CHECK_MSG(info.evaluations == 5 && info.best_epoch == 2 && info.best_val_loss == 0.8 &&
                  info.evals_since_best == 3 && info.val_loss == 0.795,
              "evals %lld best %g at %lld since %lld last %g", (long long)info.evaluations,
              info.best_val_loss, (long long)info.best_epoch, (long long)info.evals_since_best,
              info.val_loss);
    size_t nv = 0;
    const mxp_run_val_row *v = mxp_run_val_history(run, &nv);
    const bool want_best[5] = {true, true, false, false, false};
    CHECK_MSG(nv == 5, "%zu validation rows", nv);
    for (size_t k = 0; v && k < nv && k < 5; k++)
        CHECK_MSG(v[k].epoch == (int64_t)k + 1 && v[k].step == ((int64_t)k + 1) * spe &&
                      v[k].loss == kSeq[k] && v[k].best == want_best[k],
                  "row %zu: epoch %lld step %lld loss %g best %d", k, (long long)v[k].epoch,
                  (long long)v[k].step, v[k].loss, v[k].best);
    char best[700];
    snprintf(best, sizeof best, "%s/inj/best.safetensors", g_dir);
    CHECK_MSG(strcmp(info.best_checkpoint, best) == 0, "best checkpoint '%s'",
              info.best_checkpoint);
    /* a second call trains nothing */
    CHECK_OK(mxp_run_train(run, 1, 0, &err), &err);
    mxp_run_stats(run, &info);
    CHECK(info.training_steps == 5 * spe);
    mxp_run_destroy(run);

    /* best.safetensors holds the weights evaluated at epoch 2 (not at 4,
     * nor the last): a run resumed from it has them, bit for bit */
    CHECK(g.calls == 5 && g.snap[1] && g.snap[3]);
    CHECK(g.P > 0 && g.snap[1] && g.snap[3] && memcmp(g.snap[1], g.snap[3], g.P * 4) != 0);
    mxp_config cr;
    CFG("restored", &cr, "training.epochs=10", "training.eval_every=1",
        "training.early_stop.patience=3", "training.early_stop.min_delta=0.02");
    mxp_run *r2 = open_run(&cr, NULL, NULL, best);
    if (r2) {
        CHECK_MSG(same_params(mxp_run_model(r2), g.snap[1], g.P),
                  "best.safetensors does not hold the weights of epoch 2");
        CHECK(!same_params(mxp_run_model(r2), g.snap[4], g.P));
        mxp_run_stats(r2, &info);
        CHECK_MSG(info.best_epoch == 2 && info.best_val_loss == 0.8 && info.evaluations == 2,
                  "restored state: best %g at %lld, %lld evals", info.best_val_loss,
                  (long long)info.best_epoch, (long long)info.evaluations);
    }
    mxp_run_destroy(r2);

    /* the early-stopped run resumed from its directory trains nothing */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/inj", g_dir);
    inj g3;
    mxp_run *r3 = inj_run(&g3, &cfg, 0, 0, dir);
    if (r3) {
        mxp_run_stats(r3, &info);
        CHECK_MSG(info.finished_before_resume && info.early_stopped,
                  "resumed early-stopped run: finished_before_resume %d",
                  info.finished_before_resume);
        CHECK_OK(mxp_run_train(r3, 0, 0, &err), &err);
        mxp_run_stats(r3, &info);
        CHECK(info.training_steps == 5 * spe && g3.calls == 0);
    }
    mxp_run_destroy(r3);
    inj_free(&g3);

    /* stop at epoch 3, resume: the state comes back, the run stops at 5 */
    CFG("stop", &cfg, "training.epochs=10", "training.eval_every=1",
        "training.early_stop.patience=3", "training.early_stop.min_delta=0.02");
    inj g4;
    mxp_run *r4 = inj_run(&g4, &cfg, 0, 3, NULL);
    if (r4) {
        CHECK_OK(mxp_run_train(r4, 0, 0, &err), &err);
        mxp_run_stats(r4, &info);
        CHECK_MSG(info.stopped && !info.early_stopped && info.training_steps == 3 * spe,
                  "stop request: stopped %d at %lld", info.stopped,
                  (long long)info.training_steps);
    }
    mxp_run_destroy(r4);
    inj_free(&g4);
    snprintf(dir, sizeof dir, "%s/stop", g_dir);
    inj g5;
    mxp_run *r5 = inj_run(&g5, &cfg, 3, 0, dir); /* the evaluations after the third */
    if (r5) {
        CHECK_OK(mxp_run_train(r5, 0, 0, &err), &err);
        mxp_run_stats(r5, &info);
        CHECK_MSG(info.early_stopped && info.training_steps == 5 * spe && info.best_epoch == 2 &&
                      info.evaluations == 5 && g5.calls == 2,
                  "resumed: early %d at %lld steps, best epoch %lld, %lld evals",
                  info.early_stopped, (long long)info.training_steps, (long long)info.best_epoch,
                  (long long)info.evaluations);
        /* and ends with the uninterrupted run's weights of epoch 5 */
        CHECK_MSG(same_params(mxp_run_model(r5), g.snap[4], g.P),
                  "resumed run's weights differ from the uninterrupted run's at epoch 5");
    }
    mxp_run_destroy(r5);
    inj_free(&g5);
    inj_free(&g);

    /* eval_every=2: validations at epochs 2, 4, 6; patience 0: never stops */
    CFG("every2", &cfg, "training.epochs=6", "training.eval_every=2");
    inj g6;
    mxp_run *r6 = inj_run(&g6, &cfg, 0, 0, NULL);
    if (r6) {
        CHECK_OK(mxp_run_train(r6, 0, 0, &err), &err);
        size_t n6 = 0;
        const mxp_run_val_row *v6 = mxp_run_val_history(r6, &n6);
        mxp_run_stats(r6, &info);
        CHECK_MSG(n6 == 3 && !info.early_stopped && info.training_steps == 6 * spe,
                  "eval_every=2: %zu rows", n6);
        for (size_t k = 0; v6 && k < n6 && k < 3; k++)
            CHECK_MSG(v6[k].epoch == 2 * ((int64_t)k + 1) &&
                          v6[k].step == 2 * ((int64_t)k + 1) * spe && v6[k].loss == kSeq[k],
                      "eval_every=2 row %zu: epoch %lld step %lld", k, (long long)v6[k].epoch,
                      (long long)v6[k].step);
    }
    mxp_run_destroy(r6);
    inj_free(&g6);
}

/* training.eval_every_steps=5 with the same sequence: validations at run
 * steps 5, 10, ... (inside epochs), the stop after step 25, the best
 * weights those of step 10; stop at step 15 and resume: the same end. */
static void test_injected_steps(void) {
    mxp_error err = {0};
    mxp_config cfg;
    CFG("steps", &cfg, "training.epochs=10", "training.eval_every_steps=5",
        "training.early_stop.patience=3", "training.early_stop.min_delta=0.02");
    inj g;
    mxp_run *run = inj_run(&g, &cfg, 0, 0, NULL);
    if (!run) return;
    const int64_t spe = steps_per_epoch(run);
    CHECK_MSG(spe > 5 && spe % 5 != 0, "steps per epoch %lld: the test wants validations "
              "inside epochs", (long long)spe);
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    CHECK_MSG(info.early_stopped && info.training_steps == 25 && info.best_step == 10 &&
                  info.best_epoch == (10 - 1) / spe + 1 && info.evaluations == 5,
              "eval_every_steps: early %d after %lld steps, best at step %lld epoch %lld",
              info.early_stopped, (long long)info.training_steps, (long long)info.best_step,
              (long long)info.best_epoch);
    size_t nv = 0;
    const mxp_run_val_row *v = mxp_run_val_history(run, &nv);
    CHECK(nv == 5);
    for (size_t k = 0; v && k < nv && k < 5; k++) {
        const int64_t step = 5 * ((int64_t)k + 1);
        CHECK_MSG(v[k].step == step && v[k].epoch == (step - 1) / spe + 1 && v[k].loss == kSeq[k],
                  "eval_every_steps row %zu: step %lld epoch %lld", k, (long long)v[k].step,
                  (long long)v[k].epoch);
    }
    mxp_run_destroy(run);
    char best[700];
    snprintf(best, sizeof best, "%s/steps/best.safetensors", g_dir);
    mxp_config cr;
    CFG("steps_restored", &cr, "training.epochs=10");
    mxp_run *r2 = open_run(&cr, NULL, NULL, best);
    if (r2)
        CHECK_MSG(g.snap[1] && same_params(mxp_run_model(r2), g.snap[1], g.P),
                  "eval_every_steps: best.safetensors does not hold the weights of step 10");
    mxp_run_destroy(r2);
    /* a stop at step 15 (inside an epoch) and a resume end the same way */
    CFG("steps_stop", &cfg, "training.epochs=10", "training.eval_every_steps=5",
        "training.early_stop.patience=3", "training.early_stop.min_delta=0.02");
    inj g4;
    mxp_run *r4 = inj_run(&g4, &cfg, 0, 3, NULL);
    if (r4) {
        CHECK_OK(mxp_run_train(r4, 0, 0, &err), &err);
    }
    mxp_run_destroy(r4);
    inj_free(&g4);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/steps_stop", g_dir);
    inj g5;
    mxp_run *r5 = inj_run(&g5, &cfg, 3, 0, dir);
    if (r5) {
        CHECK_OK(mxp_run_train(r5, 0, 0, &err), &err);
        mxp_run_stats(r5, &info);
        CHECK_MSG(info.early_stopped && info.training_steps == 25 && info.best_step == 10 &&
                      g5.calls == 2 && g.snap[4] && same_params(mxp_run_model(r5), g.snap[4], g.P),
                  "eval_every_steps resumed: early %d after %lld steps, best step %lld",
                  info.early_stopped, (long long)info.training_steps, (long long)info.best_step);
    }
    mxp_run_destroy(r5);
    inj_free(&g5);
    inj_free(&g);
}

/* ---- real evaluation ----------------------------------------------------------- */

static rec g_a, g_b, g_c;

/* Training losses with and without validation, bit for bit. */
static void test_no_effect(const char *prec) {
    mxp_error err = {0};
    char pk[64], oa[64], ob[64];
    snprintf(pk, sizeof pk, "training.precision=%s", prec);
    snprintf(oa, sizeof oa, "plain_%s", prec);
    snprintf(ob, sizeof ob, "eval_%s", prec);
    mxp_config ca, cb;
    CFG(oa, &ca, "training.epochs=3", pk);
    CFG(ob, &cb, "training.epochs=3", pk, "training.eval_every=1");
    memset(&g_a, 0, sizeof g_a);
    memset(&g_b, 0, sizeof g_b);
    mxp_run *a = open_run(&ca, NULL, &g_a, NULL);
    mxp_run *b = open_run(&cb, NULL, &g_b, NULL);
    if (a) CHECK_OK(mxp_run_train(a, 0, 0, &err), &err);
    if (b) CHECK_OK(mxp_run_train(b, 0, 0, &err), &err);
    size_t nv = 0;
    if (b) (void)mxp_run_val_history(b, &nv);
    CHECK_MSG(nv == 3, "%s: %zu validations", prec, nv);
    int64_t diff = g_a.n == g_b.n && g_a.n > 0 ? -1 : 0;
    for (int64_t i = 0; i < g_a.n && diff < 0; i++)
        if (memcmp(&g_a.loss[i], &g_b.loss[i], sizeof(double)) != 0) diff = i;
    CHECK_MSG(diff < 0, "%s: training losses with eval_every=1 differ at step %lld (%lld vs "
              "%lld steps)", prec, (long long)diff + 1, (long long)g_a.n, (long long)g_b.n);
    if (a && b) { /* and the final weights */
        const mxp_model *ma = mxp_run_model(a), *mb = mxp_run_model(b);
        size_t P = mxp_model_num_params(ma), same = 0;
        for (size_t i = 0; i < P; i++) {
            float x = mxp_model_param(ma, i), y = mxp_model_param(mb, i);
            same += memcmp(&x, &y, sizeof x) == 0;
        }
        CHECK_MSG(same == P, "%s: %zu of %zu final weights identical", prec, same, P);
    }
    mxp_run_destroy(a);
    mxp_run_destroy(b);
}

/* train(1) x 3 == train(3) with validation on (every epoch, or every 4
 * steps). */
static void test_split_calls(const char *every) {
    mxp_error err = {0};
    mxp_config c1, c3;
    char o1[64], o3[64];
    snprintf(o1, sizeof o1, "split1_%.20s", every + 9);
    snprintf(o3, sizeof o3, "split3_%.20s", every + 9);
    CFG(o1, &c1, "training.epochs=3", every, "training.early_stop.patience=100");
    CFG(o3, &c3, "training.epochs=3", every, "training.early_stop.patience=100");
    memset(&g_a, 0, sizeof g_a);
    memset(&g_b, 0, sizeof g_b);
    mxp_run *a = open_run(&c3, NULL, &g_a, NULL);
    mxp_run *b = open_run(&c1, NULL, &g_b, NULL);
    if (a) CHECK_OK(mxp_run_train(a, 0, 0, &err), &err);
    for (int k = 0; b && k < 3; k++) CHECK_OK(mxp_run_train(b, 1, 0, &err), &err);
    int64_t diff = g_a.n == g_b.n && g_a.n > 0 ? -1 : 0;
    for (int64_t i = 0; i < g_a.n && diff < 0; i++)
        if (memcmp(&g_a.loss[i], &g_b.loss[i], sizeof(double)) != 0) diff = i;
    CHECK_MSG(diff < 0, "train(1) x 3 != train(3) with validation at step %lld",
              (long long)diff + 1);
    size_t na = 0, nb = 0;
    const mxp_run_val_row *va = a ? mxp_run_val_history(a, &na) : NULL;
    const mxp_run_val_row *vb = b ? mxp_run_val_history(b, &nb) : NULL;
    CHECK_MSG(na >= 3 && nb == na, "%s: validations %zu and %zu", every, na, nb);
    for (size_t k = 0; va && vb && k < na && k < nb; k++)
        CHECK_MSG(memcmp(&va[k].loss, &vb[k].loss, sizeof(double)) == 0 &&
                      va[k].step == vb[k].step,
                  "validation %zu: %.17g vs %.17g", k, va[k].loss, vb[k].loss);
    mxp_run_destroy(a);
    mxp_run_destroy(b);
}

/* A real run: the stop epoch recomputed from the recorded losses; the best
 * checkpoint re-evaluated gives the recorded best loss. */
static void test_real(void) {
    mxp_error err = {0};
    mxp_config cfg;
    /* a learning rate high enough that validation goes up and down */
    CFG("real", &cfg, "training.epochs=12", "training.eval_every=1",
        "training.early_stop.patience=2", "training.early_stop.min_delta=0.0005",
        "training.lr=0.01", "training.lr_schedule=constant");
    memset(&g_c, 0, sizeof g_c);
    mxp_run *run = open_run(&cfg, NULL, &g_c, NULL);
    if (!run) return;
    const int64_t spe = steps_per_epoch(run);
    CHECK_OK(mxp_run_train(run, 0, 0, &err), &err);
    size_t nv = 0;
    const mxp_run_val_row *v = mxp_run_val_history(run, &nv);
    /* the rule of docs/run.md, recomputed */
    double best = INFINITY;
    int64_t best_epoch = 0, since = 0, stop_epoch = 0;
    for (size_t k = 0; v && k < nv && !stop_epoch; k++) {
        if (k == 0 || v[k].loss < best - 0.0005) {
            best = v[k].loss;
            best_epoch = v[k].epoch;
            since = 0;
        } else if (++since >= 2) {
            stop_epoch = v[k].epoch;
        }
    }
    fprintf(stderr, "real run: %zu validations, stop after epoch %lld, best %.6g at epoch %lld\n",
            nv, (long long)stop_epoch, best, (long long)best_epoch);
    mxp_run_info info;
    mxp_run_stats(run, &info);
    const int64_t want_steps = (stop_epoch ? stop_epoch : 12) * spe;
    CHECK_MSG(info.early_stopped == (stop_epoch > 0) && info.training_steps == want_steps &&
                  info.best_epoch == best_epoch && info.best_val_loss == best,
              "real run: early %d (want %d) after %lld steps (want %lld), best %g at %lld "
              "(want %g at %lld)", info.early_stopped, stop_epoch > 0,
              (long long)info.training_steps, (long long)want_steps, info.best_val_loss,
              (long long)info.best_epoch, best, (long long)best_epoch);
    mxp_run_destroy(run);
    mxp_config cr;
    CFG("real_restored", &cr, "training.epochs=12");
    char path[700];
    snprintf(path, sizeof path, "%s/real/best.safetensors", g_dir);
    mxp_run *r2 = open_run(&cr, NULL, NULL, path);
    if (r2) {
        mxp_run_eval ev;
        CHECK_OK(mxp_run_evaluate(r2, &ev, &err), &err);
        CHECK_MSG(ev.loss == best, "best.safetensors re-evaluated: %.17g, recorded best %.17g",
                  ev.loss, best);
    }
    mxp_run_destroy(r2);
}

/* ---- config errors ---------------------------------------------------------------- */

static void expect_config_error(const char *kv1, const char *kv2, const char *needle) {
    mxp_config cfg;
    mxp_error err = {0};
    const char *ex[] = {kv1, kv2};
    mxp_status s = build_cfg("bad", ex, kv2 ? 2 : 1, &cfg, &err);
    CHECK_MSG(s == MXP_ERR_CONFIG && strstr(err.msg, needle),
              "%s %s: status %d, message '%s' (want '%s')", kv1, kv2 ? kv2 : "", s, err.msg,
              needle);
}

static void test_config_errors(void) {
    expect_config_error("training.eval_every=-1", NULL, "training.eval_every");
    expect_config_error("training.early_stop.patience=-2", NULL, "training.early_stop.patience");
    expect_config_error("training.early_stop.min_delta=-0.1", NULL, ">= 0");
    expect_config_error("training.early_stop.min_delta=nan", NULL, "min_delta");
    expect_config_error("training.lr_warmup_steps=-1", NULL, "training.lr_warmup_steps");
    expect_config_error("training.early_stop.patience=3", NULL, "training.eval_every >= 1");
    expect_config_error("training.early_stop.patience=3", "training.eval_every=0",
                        "training.eval_every=0");
    expect_config_error("training.eval_every=1", "training.eval_every_steps=10",
                        "one of them >= 1");
    expect_config_error("training.eval_every_steps=-5", NULL, "training.eval_every_steps");
}

int main(void) {
    if (!mkdtemp(g_dir)) return 2;
    test_config_errors();
    test_injected();
    test_injected_steps();
    test_no_effect("fp32");
    test_no_effect("mixed_bf16");
    if (!test_quick()) { /* and the modes with stochastic rounding / FP8 scaling state */
        test_no_effect("mixed_fp16");
        test_no_effect("bf16");
        test_no_effect("fp8");
    }
    test_split_calls("training.eval_every=1");
    test_split_calls("training.eval_every_steps=4");
    test_real();
    test_rm_rf(g_dir);
    return test_finish("test_validation");
}
