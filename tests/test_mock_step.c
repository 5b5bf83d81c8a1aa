/* tests/test_mock_step.c: a training step on the mock device
 * (MIXPREC_MOCK_DEVICE=1, backend/devmem.h, docs/design.md "The mock
 * device"), set by this program before its first model.
 *
 * - the model's slabs and arena and the trainer's moments are backend
 *   memory: a host read of the master weights outside a backend call
 *   faults (SIGSEGV in a child), while the same value comes back through
 *   mxp_model_tensor_get (one device-to-host transfer counted);
 * - device-to-host transfers per training step, counted by the mock:
 *   exactly ONE (the step's report: the control block with every pass's
 *   result-slot block), on applied and on skipped steps alike (a fault
 *   armed for step 4 only makes the one skip; before, the fault stayed
 *   armed and every step was skipped), in fp32 and mixed_fp16, with one and two
 *   micro-batches, with per-layer loss scaling (the group table goes up
 *   with the control block, the unscale by group and the groups' rule run
 *   in the backend, their slots come back in the same report) and for an
 *   ensemble (a slot block per member and micro-batch, same one copy):
 *   the figure docs/design.md states, pinned so that any new host read
 *   inside a step fails here (a second mxp_dev_count in nn_step_pass, or
 *   nn_pass_finish's copy per pass as before, makes it 2 or 3);
 * - exactly one upload per step: the host half of the control block (and
 *   the group table) at the step boundary (begin), nothing mid-step (a
 *   separate upload of the group table, tried, makes it 2);
 * - per-layer: the group scales the host reads after the step are decide's,
 *   from the report, against the rule worked by hand: on the skipped step
 *   a NaN loss (forward fault) halves every group; an Inf in the GELU's
 *   dX (layer 2, backward fault) reaches the layernorm's parameters (group
 *   1, the topmost non-finite group: it backs off) and the linear below
 *   (group 0: it holds), so only group 1 halves and the others keep their
 *   scale (default growth interval: no growth in 6 steps). Checked to fail
 *   with trainer_ls_update reading the slots at a wrong offset;
 * - one loss scale (mixed_fp16): the scaler's state lives in the control
 *   block, decide steps it and the host's view takes it from the report:
 *   the skipped step halves the scale; a state the host sets between steps
 *   (scale 1024, one clean step from growing) is the one the next step
 *   uses and grows (1024 -> 2048, tracker 0), still with one upload (the
 *   state rides in the block's host half, scaler_load). Checked to fail
 *   with begin not taking scaler_load (the block's stale state comes back:
 *   its zeros after the first step);
 * - the optimizer step counter the trainer reports (from the report's
 *   control block) counts the applied steps, and the state it exports
 *   matches; set_state writes it back into the control block.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/devmem.h"
#include "testutil.h"

#define IN 8
#define B 16
#define FAULTED 42

static float g_x[2][B * IN], g_y[2][B * IN];

static void on_segv(int sig) {
    (void)sig;
    _exit(FAULTED);
}

/* A child that reads the master weights through the host pointer. */
static int read_master_outside(mxp_model *m) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv;
        sigaction(SIGSEGV, &sa, NULL);
        volatile float v = mxp_model_master(m)[0];
        (void)v;
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int64_t d2h_calls(void) {
    mxp_dev_stats st;
    mxp_dev_stats_get(&st);
    return st.d2h_calls;
}

static int64_t h2d_calls(void) {
    mxp_dev_stats st;
    mxp_dev_stats_get(&st);
    return st.h2d_calls;
}

typedef struct variant {
    mxp_precision p;
    int n_micro;
    bool per_layer; /* per-layer loss scaling (mixed_fp16 only) */
    int ensemble;   /* members (1: one model) */
    bool backward;  /* an Inf in layer 2's backward (its dX), else a NaN in layer 1's output */
} variant;

/* The group scales (per-layer) into s[], their count. */
static int group_scales(mxp_trainer *t, float *s) {
    mxp_scaler_groups *g = mxp_trainer_scaler_groups(t);
    const int n = mxp_scaler_groups_count(g);
    for (int i = 0; i < n; i++) s[i] = mxp_scaler_scale(mxp_scaler_groups_get(g, i));
    return n;
}

static void steps(variant v) {
    mxp_model_spec s = mxp_model_spec_mlp(IN, 32, 2, IN, MXP_LAYER_GELU, true, MXP_LOSS_MSE, B);
    s.ensemble = v.ensemble;
    mxp_precision_policy pol;
    mxp_precision_policy_default(v.p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&s, &pol, 5, &m, &err), &err);
    if (!m) return;
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.grad_accum_steps = v.n_micro;
    tc.scaler.per_layer = v.per_layer;
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) {
        mxp_model_destroy(m);
        return;
    }
    CHECK(!v.per_layer || mxp_trainer_scaler_groups(t) != NULL);
    mxp_batch mb[2] = {{g_x[0], g_y[0], NULL, B}, {g_x[1], g_y[1], NULL, B}};
    mxp_fault_config f = mxp_fault_config_default();
    f.layer = v.backward ? 2 : 1; /* layers: linear, layernorm, gelu, linear, ... */
    f.pass = v.backward ? MXP_FAULT_BACKWARD : MXP_FAULT_FORWARD;
    f.kind = v.backward ? MXP_FAULT_INF : MXP_FAULT_NAN;
    /* armed for step 4 only (the model's fault fires on every training
     * pass while set; f.step is the guard's): steps 1-3 and 5-6 apply */
    int skipped = 0, applied = 0;
    const char *name = mxp_precision_name(v.p);
    for (int i = 0; i < 6; i++) {
        const int64_t d0 = d2h_calls(), u0 = h2d_calls();
        float g0[MXP_MODEL_MAX_LAYERS], g1[MXP_MODEL_MAX_LAYERS];
        const int ng = v.per_layer ? group_scales(t, g0) : 0;
        mxp_step_result r;
        mxp_scaler *sc = mxp_trainer_scaler(t);
        const bool scaled = !v.per_layer && mxp_scaler_get_config(sc)->enabled;
        const float s0 = mxp_scaler_scale(sc);
        if (scaled && i == 5) { /* a host write between steps (as a rollback's) */
            mxp_scaler_state ss;
            mxp_scaler_get_state(sc, &ss);
            ss.scale = 1024.0f;
            ss.growth_tracker = mxp_scaler_get_config(sc)->growth_interval - 1;
            CHECK_OK(mxp_scaler_set_state(sc, &ss, &err), &err);
        }
        mxp_model_set_fault(m, i == 3 ? &f : NULL);
        CHECK_OK(mxp_trainer_step(t, mb, v.n_micro, &r, &err), &err);
        CHECK_MSG(r.skipped == (i == 3), "%s%s: step %d %s", name,
                  v.per_layer ? " per-layer" : "", i + 1, r.skipped ? "skipped" : "applied");
        if (scaled) { /* the block's state, from the report; hand-worked */
            mxp_scaler_state ss;
            mxp_scaler_get_state(sc, &ss);
            const float want = i == 5 ? 2048.0f : r.skipped ? s0 * 0.5f : s0;
            CHECK_MSG(ss.scale == want && (i != 5 || (r.scale == 1024.0f && ss.growth_tracker == 0)),
                      "%s step %d: scale %g -> %g (step's %g, tracker %lld); expected %g", name,
                      i + 1, (double)s0, (double)ss.scale, (double)r.scale,
                      (long long)ss.growth_tracker, (double)want);
        }
        if (v.per_layer) { /* decide's rule, from the report; hand-worked */
            CHECK(group_scales(t, g1) == ng && ng >= 2);
            for (int k = 0; k < ng; k++) {
                const bool halves = r.skipped && (!v.backward || k == 1);
                CHECK_MSG(g1[k] == (halves ? g0[k] * 0.5f : g0[k]),
                          "per-layer%s step %d (%s): group %d scale %g -> %g",
                          v.backward ? " backward fault" : "", i + 1,
                          r.skipped ? "skipped" : "applied", k, (double)g0[k], (double)g1[k]);
            }
        }
        skipped += r.skipped;
        applied += !r.skipped;
        CHECK_MSG(d2h_calls() - d0 == 1,
                  "%s%s, ensemble %d, %d micro-batches, step %d (%s): %lld device-to-host "
                  "transfers, expected 1",
                  name, v.per_layer ? " per-layer" : "", v.ensemble, v.n_micro, i + 1,
                  r.skipped ? "skipped" : "applied", (long long)(d2h_calls() - d0));
        CHECK_MSG(h2d_calls() - u0 == 1, "%s: %lld uploads in a step, expected 1", name,
                  (long long)(h2d_calls() - u0));
        CHECK_MSG(r.skipped || isfinite(r.loss), "%s: step %d loss %g", name, i + 1, r.loss);
    }
    CHECK_MSG(skipped == 1 && applied == 5, "%s: %d steps skipped, %d applied; expected 1, 5",
              name, skipped, applied);
    mxp_train_stats ts;
    mxp_trainer_stats(t, &ts);
    mxp_trainer_state st;
    mxp_trainer_get_state(t, &st);
    CHECK_MSG(ts.optimizer_steps == applied && st.optimizer_steps == applied &&
                  ts.skipped_steps == skipped,
              "%s: optimizer steps %lld (state %lld), applied %d", name,
              (long long)ts.optimizer_steps, (long long)st.optimizer_steps, applied);
    CHECK(st.sr_counter == (uint64_t)applied * mxp_model_num_params(m));
    /* resume: the counters go into the control block (one upload) */
    st.optimizer_steps = 3;
    st.sr_counter = 12345;
    const int64_t u0 = h2d_calls();
    CHECK_OK(mxp_trainer_set_state(t, &st, &err), &err);
    CHECK(h2d_calls() - u0 == 1);
    mxp_trainer_get_state(t, &st);
    CHECK(st.optimizer_steps == 3 && st.sr_counter == 12345);
    if (v.ensemble == 1 && !v.per_layer) {
        /* outside a step the weights are out of the host's reach; a get works */
        CHECK_MSG(read_master_outside(m) == FAULTED, "a host read of the master did not fault");
        const mxp_tensor_info *ti = mxp_model_tensor(m, 0);
        float *w = test_xmalloc(ti->count * sizeof(float));
        const int64_t d0 = d2h_calls();
        CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_MASTER, ti->name, MXP_DTYPE_F32, w,
                                      ti->count * sizeof(float), &err),
                 &err);
        CHECK(d2h_calls() - d0 == 1);
        CHECK(w[0] == mxp_model_param(m, ti->offset)); /* a counted single-value read */
        CHECK(d2h_calls() - d0 == 2);
        free(w);
    }
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

int main(void) {
    setenv("MIXPREC_MOCK_DEVICE", "1", 1);
    mxp_error err = {0};
    CHECK_OK(mxp_dev_init(&err), &err);
    CHECK(mxp_dev_is_mock());
    mxp_rng r;
    mxp_rng_init(&r, 3);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < B * IN; i++) {
            g_x[k][i] = mxp_rng_normal(&r);
            g_y[k][i] = mxp_rng_normal(&r);
        }
    for (int n_micro = 1; n_micro <= 2; n_micro++) {
        steps((variant){MXP_PRECISION_FP32, n_micro, false, 1, false});
        steps((variant){MXP_PRECISION_MIXED_FP16, n_micro, false, 1, false});
        steps((variant){MXP_PRECISION_MIXED_FP16, n_micro, true, 1, false});
        steps((variant){MXP_PRECISION_MIXED_FP16, n_micro, true, 1, true});
        steps((variant){MXP_PRECISION_MIXED_FP16, n_micro, false, 2, false});
    }
    mxp_dev_stats st;
    mxp_dev_stats_get(&st);
    CHECK(st.protect_errors == 0);
    CHECK(st.regions == 0); /* everything freed */
    return test_finish("test_mock_step");
}
