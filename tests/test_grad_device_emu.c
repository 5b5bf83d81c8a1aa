/* tests/test_grad_device_emu.c: a gradient read after a device step
 * (training.device=cuda on the emulated table, tests/dstep_emu.h,
 * substituted through trainer_device_override) sees the device's
 * gradients, pulled on the read only; the CPU running the same config is
 * the oracle.
 *
 *   - the default world model (fp32, mixed_bf16, mixed_fp16) and SGD in
 *     mixed_fp16: after every step the whole gradient slab
 *     (mxp_model_tensor_get, role grad) on the device is the CPU's after
 *     the same step within 2e-3 of the CPU slab's largest element (the
 *     later-loss tolerance of tests/test_dstep_emu.c, with its reasons:
 *     summation order; observed worst 2.0e-4; step 1 in fp32,
 *     a pure function of identical weights and data: 1e-5), with a NaN
 *     planted in the 5th batch (both skip it and their gradients then
 *     hold non-finite values at the same positions);
 *   - one copy per read: a second read after the same step and a named
 *     tensor read copy nothing more (grad_pulls counts one per step; the
 *     emulated device's copies are steps + grad reads); reading changes no
 *     loss (the run without reads has bit-identical losses);
 *   - mxp_model_tensor_set of the gradients after a step keeps the other
 *     tensors as the device left them.
 *
 * Negative control (checked by hand: trainer_device_pull_grads made a
 * no-op): the host slab stays zero, and every step's comparison fails.
 */
#include <mixprec/mixprec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstep_emu.h"
#include "testutil.h"
#include "train/trainer_device.h"

#define MAX_STEPS 64

static emu_dev g_emu;

typedef struct rec {
    mxp_run *run;
    bool read;   /* read the gradients after every step */
    size_t P;
    int64_t n;
    double loss[MAX_STEPS];
    float *g[MAX_STEPS]; /* the slab after step i (NULL: not read) */
    int64_t extra_d2h;   /* copies of the second and the named reads */
} rec;

/* ---- a NaN in the 5th batch (test_run_device_emu.c's planting) ---------------- */

static mxp_status (*g_fill)(void *, int, const uint32_t *, int64_t, mxp_batch *, mxp_error *);
static int64_t g_calls, g_in;
static float *g_x;

static mxp_status planted_fill(void *self, int slot, const uint32_t *idx, int64_t n,
                               mxp_batch *out, mxp_error *err) {
    mxp_status s = g_fill(self, slot, idx, n, out, err);
    if (s != MXP_OK || ++g_calls != 5) return s;
    free(g_x);
    g_x = test_xmalloc((size_t)(out->B * g_in) * sizeof(float));
    memcpy(g_x, out->x, (size_t)(out->B * g_in) * sizeof(float));
    g_x[3] = NAN;
    out->x = g_x;
    return MXP_OK;
}

static void on_progress(void *user, const mxp_run_progress *p) {
    rec *r = user;
    const int64_t i = r->n++;
    if (i >= MAX_STEPS) return;
    r->loss[i] = p->result->loss;
    if (!r->read) return;
    mxp_model *m = mxp_run_model(r->run);
    mxp_error err = {0};
    r->g[i] = test_xmalloc(r->P * sizeof(float));
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, r->g[i],
                                  r->P * sizeof(float), &err), &err);
    /* a second read and a named one: nothing more from the device */
    const int64_t d0 = g_emu.d2h;
    float *again = test_xmalloc(r->P * sizeof(float));
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, again,
                                  r->P * sizeof(float), &err), &err);
    CHECK(memcmp(again, r->g[i], r->P * sizeof(float)) == 0);
    const mxp_tensor_info *ti = mxp_model_tensor(m, 0);
    if (ti) {
        CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, ti->name, MXP_DTYPE_F32, again,
                                      ti->count * sizeof(float), &err), &err);
        CHECK(memcmp(again, r->g[i] + ti->offset, ti->count * sizeof(float)) == 0);
    }
    r->extra_d2h += g_emu.d2h - d0;
    free(again);
}

static mxp_config make_cfg(const char *prec, const char *dev, const char *const *extra) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    char kv[2][64];
    snprintf(kv[0], sizeof kv[0], "training.precision=%s", prec);
    snprintf(kv[1], sizeof kv[1], "training.device=%s", dev);
    const char *base[] = {kv[0], kv[1], "model.workload=world_model", "data.trajectories=8",
                          "data.episode_length=40", "training.batch_size=32",
                          "training.epochs=1", "guard.enabled=false", NULL};
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    for (int i = 0; base[i]; i++) CHECK_OK(mxp_config_apply_override(b, base[i], &err), &err);
    for (; extra && *extra; extra++) CHECK_OK(mxp_config_apply_override(b, *extra, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

/* Train cfg into r; st: the device's stats (device runs). */
static void run(const mxp_config *cfg, rec *r, bool read, trainer_device_stats *st) {
    mxp_error err = {0};
    memset(r, 0, sizeof *r);
    r->read = read;
    mxp_workload_provider wl;
    CHECK_OK(mxp_workload_provider_builtin(cfg, &wl, &err), &err);
    mxp_model_spec ms;
    CHECK_OK(wl.model_spec(wl.self, &ms, &err), &err);
    g_in = ms.in_dim;
    g_fill = wl.fill_batch;
    wl.fill_batch = planted_fill;
    g_calls = 0;
    mxp_run_options o = mxp_run_options_default();
    o.provider = &wl;
    o.checkpoints = false;
    o.progress = on_progress;
    o.progress_user = r;
    CHECK_OK(mxp_run_create(cfg, &o, &r->run, &err), &err);
    if (!r->run) return;
    r->P = mxp_model_num_params(mxp_run_model(r->run));
    CHECK_OK(mxp_run_train(r->run, 0, 0, &err), &err);
    if (st) trainer_device_get_stats(mxp_run_trainer(r->run), st);
    /* a write of one gradient tensor keeps the rest as the device left it */
    if (read && r->n > 0 && r->n <= MAX_STEPS) {
        mxp_model *m = mxp_run_model(r->run);
        const mxp_tensor_info *ti = mxp_model_tensor(m, 1);
        float *all = test_xmalloc(r->P * sizeof(float));
        if (ti) {
            float *z = calloc(ti->count, sizeof(float));
            CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_GRAD, ti->name, MXP_DTYPE_F32, z,
                                          ti->count * sizeof(float), &err), &err);
            CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, all,
                                          r->P * sizeof(float), &err), &err);
            const float *last = r->g[r->n - 1];
            bool same = true;
            for (size_t j = 0; j < r->P; j++) {
                const bool in = j >= ti->offset && j < ti->offset + ti->count;
                const float want = in ? 0.0f : last[j];
                same &= memcmp(&all[j], &want, sizeof want) == 0;
            }
            CHECK_MSG(same, "a gradient tensor's write changed the others");
            free(z);
        }
        free(all);
    }
    mxp_run_destroy(r->run);
}

static void free_rec(rec *r) {
    for (int64_t i = 0; i < MAX_STEPS; i++) free(r->g[i]);
}

/* per_pull: copies of one pull of the parameters and moments (AdamW 3,
 * SGD with momentum 2: the end of training reads the parameters once). */
static void compare(const char *prec, const char *const *extra, const char *tag,
                    int per_pull) {
    static rec rc, rd, rq;
    mxp_config cc = make_cfg(prec, "cpu", extra), cd = make_cfg(prec, "cuda", extra);
    trainer_device_stats st = {0}, sq = {0};
    run(&cc, &rc, true, NULL);
    const int64_t d0 = g_emu.d2h;
    run(&cd, &rd, true, &st);
    const int64_t d2h = g_emu.d2h - d0;
    run(&cd, &rq, false, &sq);
    const bool fp32 = strcmp(prec, "fp32") == 0;
    CHECK_MSG(rc.n == rd.n && rd.n == rq.n && rc.n >= 8 && rc.n <= MAX_STEPS && rc.P == rd.P,
              "%s: %lld steps on the device, %lld on the CPU", tag, (long long)rd.n,
              (long long)rc.n);
    double worst = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < rc.n && i < rd.n && i < MAX_STEPS; i++) {
        const float *a = rc.g[i], *b = rd.g[i];
        if (!a || !b) continue;
        double amax = 0;
        for (size_t j = 0; j < rc.P; j++)
            if (isfinite(a[j]) && fabs(a[j]) > amax) amax = fabs(a[j]);
        double dmax = 0;
        int64_t bad = 0;
        for (size_t j = 0; j < rc.P; j++) {
            if (!isfinite(a[j]) || !isfinite(b[j])) {
                nonfinite += !isfinite(a[j]);
                bad += isfinite(a[j]) != isfinite(b[j]);
                continue;
            }
            dmax = fmax(dmax, fabs((double)a[j] - (double)b[j]));
        }
        const double r = amax > 0 ? dmax / amax : dmax;
        const double tol = i == 0 && fp32 ? 1e-5 : 2e-3;
        if (r > worst) worst = r;
        int64_t nf = 0;
        for (size_t j = 0; j < rc.P; j++) nf += !isfinite(a[j]);
        CHECK_MSG((amax > 0 || nf == (int64_t)rc.P) && r <= tol && bad == 0,
                  "%s step %lld: gradients differ by %.3g of the largest (%.3g), %lld "
                  "non-finite positions differ", tag, (long long)i + 1, r, amax, (long long)bad);
        CHECK_MSG(memcmp(&rq.loss[i], &rd.loss[i], sizeof(double)) == 0,
                  "%s step %lld: reading the gradients changed the loss", tag, (long long)i + 1);
    }
    CHECK_MSG(nonfinite > 0, "%s: the NaN step left no non-finite gradient", tag);
    /* one copy per gradient read: the steps' reports, one per step's first
     * read, and the parameters' pulls (no gradient read pulls them) */
    CHECK_MSG(st.grad_pulls == rd.n && sq.grad_pulls == 0 && rd.extra_d2h == 0 &&
                  d2h == st.steps + st.grad_pulls + per_pull * st.pulls,
              "%s: %lld gradient pulls for %lld steps, %lld copies (%lld pulls)", tag,
              (long long)st.grad_pulls, (long long)rd.n, (long long)d2h, (long long)st.pulls);
    printf("  %-18s %3lld steps, gradients worst diff %.2e of the largest, %lld gradient "
           "pulls, %lld copies\n", tag, (long long)rd.n, worst, (long long)st.grad_pulls,
           (long long)d2h);
    free_rec(&rc);
    free_rec(&rd);
    free_rec(&rq);
}

int main(void) {
    trainer_device_override(&emu_ds_ops, &g_emu);
    compare("fp32", NULL, "fp32", 3);
    compare("mixed_bf16", NULL, "mixed_bf16", 3);
    compare("mixed_fp16", NULL, "mixed_fp16", 3);
    const char *sgd[] = {"training.optimizer=sgd", "training.momentum=0.9", NULL};
    compare("mixed_fp16", sgd, "mixed_fp16 sgd", 2);
    trainer_device_override(NULL, NULL);
    CHECK_MSG(g_emu.live == 0, "%lld emulated buffers leaked", (long long)g_emu.live);
    free(g_x);
    return test_finish("test_grad_device_emu");
}
