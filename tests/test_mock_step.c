/* tests/test_mock_step.c: a training step on the mock device
 * (MIXPREC_MOCK_DEVICE=1, backend/devmem.h, docs/design.md "The mock
 * device"), set by this program before its first model.
 *
 * - the model's slabs and arena and the trainer's moments are backend
 *   memory: a host read of the master weights outside a backend call
 *   faults (SIGSEGV in a child), while the same value comes back through
 *   mxp_model_tensor_get (one device-to-host transfer counted);
 * - device-to-host transfers per training step, counted by the mock:
 *   exactly one slot-block copy per forward/backward pass plus the one
 *   step report, on applied and on skipped steps alike (a NaN fault makes
 *   the skip), in fp32 and mixed_fp16, with one and two micro-batches:
 *   the figure docs/design.md states, pinned so that any new host read
 *   inside a step fails here;
 * - nothing is uploaded during a step.
 */
#include <mixprec/mixprec.h>

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

static mxp_model *make_model(mxp_precision p) {
    mxp_model_spec s = mxp_model_spec_mlp(IN, 32, 2, IN, MXP_LAYER_GELU, true, MXP_LOSS_MSE, B);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&s, &pol, 5, &m, &err), &err);
    return m;
}

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

static void steps(mxp_precision p, int n_micro) {
    mxp_model *m = make_model(p);
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.grad_accum_steps = n_micro;
    mxp_trainer *t = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) return;
    mxp_batch mb[2] = {{g_x[0], g_y[0], NULL, B}, {g_x[1], g_y[1], NULL, B}};
    mxp_fault_config f = mxp_fault_config_default();
    f.kind = MXP_FAULT_NAN;
    f.layer = 1;
    f.step = 4; /* attempt 4 gets a NaN: a skipped step */
    f.count = 1;
    mxp_model_set_fault(m, &f);
    int skipped = 0;
    for (int i = 0; i < 6; i++) {
        const int64_t d0 = d2h_calls(), u0 = h2d_calls();
        mxp_step_result r;
        CHECK_OK(mxp_trainer_step(t, mb, n_micro, &r, &err), &err);
        skipped += r.skipped;
        CHECK_MSG(d2h_calls() - d0 == n_micro + 1,
                  "%s, %d micro-batches, step %d (%s): %lld device-to-host transfers, "
                  "expected %d",
                  mxp_precision_name(p), n_micro, i + 1, r.skipped ? "skipped" : "applied",
                  (long long)(d2h_calls() - d0), n_micro + 1);
        CHECK(h2d_calls() == u0);
    }
    CHECK_MSG(skipped >= 1, "%s: the NaN fault skipped no step", mxp_precision_name(p));
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
        steps(MXP_PRECISION_FP32, n_micro);
        steps(MXP_PRECISION_MIXED_FP16, n_micro);
    }
    mxp_dev_stats st;
    mxp_dev_stats_get(&st);
    CHECK(st.protect_errors == 0);
    CHECK(st.regions == 0); /* everything freed */
    return test_finish("test_mock_step");
}
