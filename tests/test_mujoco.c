/* tests/test_mujoco.c: the MuJoCo environments (data.env=ant|humanoid).
 *
 * Oracle: MuJoCo itself, called directly here. The replay's transitions are
 * regenerated from the documented recipe (data.h: trajectory stream key,
 * reset draws, uniform actions in ctrlrange, frame skip, reward) on a
 * separately loaded mjModel whose mjData is reset with mj_resetData before
 * every step, and must match the replay bit for bit after the replay's own
 * standardisation; the standardisation statistics are recomputed in double.
 * Hand-known sizes: the ant has a free joint and 8 hinges (nq 15, nv 14,
 * nu 8), the humanoid of libmujoco-samples nq 28, nv 27, nu 21.
 * Also: determinism (same seed -> identical bytes, another seed differs,
 * two replays alive at once), episode length and split, action clipping,
 * errors for bad models, and short CLI training runs (fp32, mixed_bf16).
 * In a build without MuJoCo it checks the MXP_ERR_UNSUPPORTED message and
 * exits 77 (skipped).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/data.h>

#include "data/data_internal.h"
#include "testutil.h"

#ifdef MIXPREC_HAVE_MUJOCO
#include <mujoco/mujoco.h>

#define HUMANOID_XML "/usr/share/mujoco/model/humanoid/humanoid.xml"

static char g_dir[64];
static char g_ant_path[128];
static bool g_quick;

/* ---- the oracle --------------------------------------------------------- */

/* Raw rows of trajectory t (len steps): x [len, sd + nu], y [len, sd + 1],
 * computed with MuJoCo directly. ctrl_w: the documented control cost weight. */
static void oracle_trajectory(const mjModel *m, mjData *d, uint64_t seed, int64_t t,
                              int64_t len, double ctrl_w, float *x, float *y) {
    const int nq = m->nq, nv = m->nv, na = m->na, nu = m->nu, sd = nq + nv + na;
    const int in = sd + nu, out = sd + 1;
    float *state = calloc((size_t)sd, sizeof(float));
    float *next = calloc((size_t)sd, sizeof(float));
    float *act = calloc((size_t)nu, sizeof(float));
    mjtNum *q = calloc((size_t)nq, sizeof(mjtNum));
    mxp_rng r;
    mxp_rng_init(&r, mxp_replay_trajectory_seed(seed, t));
    for (int i = 0; i < nq; i++) q[i] = m->qpos0[i] - 0.1 + 0.2 * (double)mxp_rng_uniform(&r);
    mj_normalizeQuat(m, q);
    for (int i = 0; i < nq; i++) state[i] = (float)q[i];
    for (int i = 0; i < nv; i++) state[nq + i] = (float)(-0.1 + 0.2 * (double)mxp_rng_uniform(&r));
    for (int i = 0; i < na; i++) state[nq + nv + i] = 0.0f;
    double dt = 5 * m->opt.timestep;
    for (int64_t s = 0; s < len; s++) {
        for (int a = 0; a < nu; a++) {
            double lo = m->actuator_ctrllimited[a] ? m->actuator_ctrlrange[2 * a] : -1.0;
            double hi = m->actuator_ctrllimited[a] ? m->actuator_ctrlrange[2 * a + 1] : 1.0;
            act[a] = (float)(lo + (hi - lo) * (double)mxp_rng_uniform(&r));
            CHECK_MSG(act[a] >= lo && act[a] <= hi, "action %d = %g outside [%g, %g]", a,
                      (double)act[a], lo, hi);
        }
        mj_resetData(m, d);
        for (int i = 0; i < nq; i++) d->qpos[i] = state[i];
        for (int i = 0; i < nv; i++) d->qvel[i] = state[nq + i];
        for (int i = 0; i < na; i++) d->act[i] = state[nq + nv + i];
        double cost = 0.0;
        for (int a = 0; a < nu; a++) {
            d->ctrl[a] = act[a];
            cost += (double)act[a] * (double)act[a];
        }
        mj_forward(m, d);
        double x0 = d->subtree_com[0];
        for (int k = 0; k < 5; k++) mj_step(m, d);
        mj_forward(m, d);
        double x1 = d->subtree_com[0];
        for (int i = 0; i < nq; i++) next[i] = (float)d->qpos[i];
        for (int i = 0; i < nv; i++) next[nq + i] = (float)d->qvel[i];
        for (int i = 0; i < na; i++) next[nq + nv + i] = (float)d->act[i];
        float *xr = x + s * in, *yr = y + s * out;
        for (int i = 0; i < sd; i++) {
            xr[i] = state[i];
            yr[i] = next[i] - state[i];
        }
        for (int a = 0; a < nu; a++) xr[sd + a] = act[a];
        yr[sd] = (float)((x1 - x0) / dt - ctrl_w * cost);
        memcpy(state, next, (size_t)sd * sizeof(float));
    }
    free(state);
    free(next);
    free(act);
    free(q);
}

/* Column mean / population std of rows [0, n) of v [*, dim], as data.h
 * documents: double, rounded to float, std floored at 1e-6. */
static void oracle_stats(const float *v, int64_t n, int dim, float *mean, float *std) {
    for (int j = 0; j < dim; j++) {
        double s = 0.0, ss = 0.0;
        for (int64_t r = 0; r < n; r++) s += v[r * dim + j];
        s /= (double)n;
        for (int64_t r = 0; r < n; r++) {
            double e = (double)v[r * dim + j] - s;
            ss += e * e;
        }
        mean[j] = (float)s;
        double sd = (double)(float)sqrt(ss / (double)n);
        std[j] = (float)(sd < 1e-6 ? 1e-6 : sd);
    }
}

static mjModel *load(const char *path) {
    char msg[1000] = "";
    mjModel *m = mj_loadXML(path, NULL, msg, (int)sizeof msg);
    CHECK_MSG(m != NULL, "mj_loadXML(%s): %s", path, msg);
    return m;
}

static mxp_replay *make(mxp_env_kind env, const char *model, int64_t t, int64_t len,
                        uint64_t seed) {
    mxp_replay_config c = mxp_replay_config_default();
    c.env = env;
    snprintf(c.mujoco_model, sizeof c.mujoco_model, "%s", model);
    c.trajectories = t;
    c.episode_len = len;
    c.val_fraction = 0.25;
    c.seed = seed;
    mxp_replay *r = NULL;
    mxp_error err = {0}, *errp = &err;
    CHECK_OK(mxp_replay_create(&c, &r, errp), errp);
    return r;
}

/* The replay of (env, model file) against the oracle on the same file. */
static void check_against_oracle(mxp_env_kind env, const char *replay_model,
                                 const char *oracle_file, int nq, int nv, int nu,
                                 double ctrl_w, int64_t T, int64_t len) {
    mjModel *m = load(oracle_file);
    if (!m) return;
    mjData *d = mj_makeData(m);
    CHECK_MSG(m->nq == nq && m->nv == nv && m->nu == nu && m->na == 0,
              "%s: nq %d nv %d nu %d na %d", oracle_file, m->nq, m->nv, m->nu, m->na);
    const uint64_t seed = 4242;
    mxp_replay *r = make(env, replay_model, T, len, seed);
    if (!r) {
        mj_deleteData(d);
        mj_deleteModel(m);
        return;
    }
    const int sd = m->nq + m->nv, in = sd + m->nu, out = sd + 1;
    CHECK(mxp_replay_in_dim(r) == in && mxp_replay_out_dim(r) == out);

    /* a sim of the same kind reports the model's dims and ctrlranges */
    mxp_sim *sim = NULL;
    mxp_error err = {0}, *errp = &err;
    CHECK_OK(mxp_sim_create(env, replay_model, &sim, errp), errp);
    if (sim) {
        CHECK(mxp_sim_state_dim(sim) == sd && mxp_sim_action_dim(sim) == m->nu);
        for (int a = 0; a < m->nu; a++) {
            double lo, hi;
            mxp_sim_action_range(sim, a, &lo, &hi);
            CHECK(lo == m->actuator_ctrlrange[2 * a] && hi == m->actuator_ctrlrange[2 * a + 1]);
        }
        mxp_sim_destroy(sim);
    }

    /* episode length and split: trajectory-major rows, whole trajectories */
    mxp_replay_split tr = mxp_replay_train(r), va = mxp_replay_val(r);
    CHECK(tr.n + va.n == T * len && tr.n == mxp_replay_train_trajectories(r) * len);
    int64_t want = llround(0.75 * (double)T); /* round((1 - val_fraction) T) in [1, T-1] */
    want = want < 1 ? 1 : (want > T - 1 ? T - 1 : want);
    CHECK(mxp_replay_train_trajectories(r) == want);

    float *x = calloc((size_t)(T * len * in), sizeof(float));
    float *y = calloc((size_t)(T * len * out), sizeof(float));
    for (int64_t t = 0; t < T; t++)
        oracle_trajectory(m, d, seed, t, len, ctrl_w, x + t * len * in, y + t * len * out);

    /* stats over the train rows */
    float *xm = calloc((size_t)in, sizeof(float)), *xs = calloc((size_t)in, sizeof(float));
    float *ym = calloc((size_t)out, sizeof(float)), *ys = calloc((size_t)out, sizeof(float));
    oracle_stats(x, tr.n, in, xm, xs);
    oracle_stats(y, tr.n, out, ym, ys);
    mxp_replay_stats st = mxp_replay_stats_get(r);
    int bad = 0;
    for (int j = 0; j < in; j++) bad += st.x_mean[j] != xm[j] || st.x_std[j] != xs[j];
    for (int j = 0; j < out; j++) bad += st.y_mean[j] != ym[j] || st.y_std[j] != ys[j];
    CHECK_MSG(bad == 0, "%s: %d standardisation statistics differ from the oracle's",
              oracle_file, bad);

    /* every row, bit for bit after the replay's standardisation */
    int64_t bad_x = 0, bad_y = 0, first = -1;
    for (int64_t row = 0; row < T * len; row++) {
        const float *rx = row < tr.n ? tr.x + row * in : va.x + (row - tr.n) * in;
        const float *ry = row < tr.n ? tr.y + row * out : va.y + (row - tr.n) * out;
        for (int j = 0; j < in; j++) {
            float z = (float)(((double)x[row * in + j] - (double)st.x_mean[j]) /
                              (double)st.x_std[j]);
            if (memcmp(&z, &rx[j], sizeof z) != 0) {
                bad_x++;
                if (first < 0) first = row;
            }
        }
        for (int j = 0; j < out; j++) {
            float z = (float)(((double)y[row * out + j] - (double)st.y_mean[j]) /
                              (double)st.y_std[j]);
            if (memcmp(&z, &ry[j], sizeof z) != 0) {
                bad_y++;
                if (first < 0) first = row;
            }
        }
    }
    CHECK_MSG(bad_x == 0 && bad_y == 0,
              "%s: %lld x and %lld y entries differ from MuJoCo stepped directly (first row "
              "%lld)", oracle_file, (long long)bad_x, (long long)bad_y, (long long)first);

    /* the physics is alive: the state changes and the reward varies */
    double dmax = 0.0, rmin = INFINITY, rmax = -INFINITY;
    for (int64_t row = 0; row < T * len; row++) {
        for (int j = 0; j < sd; j++) dmax = fmax(dmax, fabs((double)y[row * out + j]));
        rmin = fmin(rmin, y[row * out + sd]);
        rmax = fmax(rmax, y[row * out + sd]);
    }
    CHECK_MSG(dmax > 1e-3 && rmax > rmin, "%s: max |delta| %g, reward [%g, %g]", oracle_file,
              dmax, rmin, rmax);
    printf("%s: %lld transitions bit-identical to MuJoCo; max |delta state| %.3g, reward in "
           "[%.3g, %.3g]\n", oracle_file, (long long)(T * len), dmax, rmin, rmax);

    free(x);
    free(y);
    free(xm);
    free(xs);
    free(ym);
    free(ys);
    mxp_replay_destroy(r);
    mj_deleteData(d);
    mj_deleteModel(m);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* ---- tests --------------------------------------------------------------- */

static void test_version(void) {
    CHECK_MSG(mxp_mujoco_version() == mj_version() && mj_version() >= 200,
              "mxp_mujoco_version %d, mj_version %d", mxp_mujoco_version(), mj_version());
    const mxp_env_info *a = mxp_env_info_get(MXP_ENV_ANT);
    const mxp_env_info *h = mxp_env_info_get(MXP_ENV_HUMANOID);
    CHECK(a && h && a->mujoco && h->mujoco && strcmp(a->name, "ant") == 0 &&
          strcmp(h->name, "humanoid") == 0);
    mxp_env_kind k = MXP_ENV_PENDULUM;
    mxp_error err = {0}, *errp = &err;
    CHECK_OK(mxp_env_parse("ant", &k, errp), errp);
    CHECK(k == MXP_ENV_ANT);
    CHECK_OK(mxp_env_parse("humanoid", &k, errp), errp);
    CHECK(k == MXP_ENV_HUMANOID);
}

static void test_ant_oracle(void) {
    /* the built-in ant's XML, written to a file for the oracle and for the
     * data.mujoco_model path */
    char *xml = calloc(8192, 1);
    CHECK(mxp_mujoco_ant_xml(xml, 8192));
    CHECK(!mxp_mujoco_ant_xml(xml, 100)); /* too small: reported, not cut */
    CHECK(mxp_mujoco_ant_xml(xml, 8192));
    write_file(g_ant_path, xml);
    free(xml);
    int64_t T = g_quick ? 3 : 6, len = g_quick ? 20 : 60;
    check_against_oracle(MXP_ENV_ANT, "default", g_ant_path, 15, 14, 8, 0.5, T, len);
    check_against_oracle(MXP_ENV_ANT, g_ant_path, g_ant_path, 15, 14, 8, 0.5, T, len);
}

static void test_humanoid_oracle(void) {
    if (access(HUMANOID_XML, R_OK) != 0) {
        printf("skip humanoid: %s not installed (libmujoco-samples)\n", HUMANOID_XML);
        return;
    }
    check_against_oracle(MXP_ENV_HUMANOID, "default", HUMANOID_XML, 28, 27, 21, 0.1, 2,
                         g_quick ? 8 : 25);
}

static bool same_replay(const mxp_replay *a, const mxp_replay *b) {
    mxp_replay_split ta = mxp_replay_train(a), tb = mxp_replay_train(b);
    mxp_replay_split va = mxp_replay_val(a), vb = mxp_replay_val(b);
    int64_t in = mxp_replay_in_dim(a), out = mxp_replay_out_dim(a);
    return in == mxp_replay_in_dim(b) && ta.n == tb.n && va.n == vb.n &&
           memcmp(ta.x, tb.x, (size_t)(ta.n * in) * sizeof(float)) == 0 &&
           memcmp(ta.y, tb.y, (size_t)(ta.n * out) * sizeof(float)) == 0 &&
           memcmp(va.x, vb.x, (size_t)(va.n * in) * sizeof(float)) == 0 &&
           memcmp(va.y, vb.y, (size_t)(va.n * out) * sizeof(float)) == 0;
}

static void test_determinism(void) {
    /* two replays alive at once, built interleaved with a third */
    mxp_replay *a = make(MXP_ENV_ANT, "default", 4, 30, 99);
    mxp_replay *c = make(MXP_ENV_ANT, "default", 4, 30, 100);
    mxp_replay *b = make(MXP_ENV_ANT, "default", 4, 30, 99);
    mxp_replay *p = make(MXP_ENV_PENDULUM, "default", 4, 30, 99);
    if (a && b && c && p) {
        CHECK_MSG(same_replay(a, b), "same seed must give identical bytes");
        CHECK_MSG(!same_replay(a, c), "another seed must give other data");
        CHECK(mxp_replay_in_dim(p) == 4 && mxp_replay_in_dim(a) == 37);
    }
    mxp_replay_destroy(a);
    mxp_replay_destroy(b);
    mxp_replay_destroy(c);
    mxp_replay_destroy(p);
}

static void test_step_contract(void) {
    mxp_sim *s = NULL;
    mxp_error err = {0}, *errp = &err;
    CHECK_OK(mxp_sim_create(MXP_ENV_ANT, NULL, &s, errp), errp);
    if (!s) return;
    CHECK(mxp_sim_kind(s) == MXP_ENV_ANT);
    float st[29], n1[29], n2[29], big[8], clip[8], r1, r2;
    mxp_rng r;
    mxp_rng_init(&r, 5);
    mxp_sim_reset(s, &r, st);
    for (int a = 0; a < 8; a++) {
        big[a] = (a & 1) ? 7.0f : -3.0f; /* outside [-1, 1] */
        clip[a] = (a & 1) ? 1.0f : -1.0f;
    }
    CHECK_OK(mxp_sim_step(s, st, big, n1, &r1, errp), errp);
    CHECK_OK(mxp_sim_step(s, st, clip, n2, &r2, errp), errp);
    CHECK_MSG(memcmp(n1, n2, sizeof n1) == 0 && r1 == r2, "actions are clipped to ctrlrange");
    /* a pure function of (state, action): repeating gives the same bits, in place too */
    memcpy(n2, st, sizeof st);
    CHECK_OK(mxp_sim_step(s, n2, big, n2, &r2, errp), errp);
    CHECK(memcmp(n1, n2, sizeof n1) == 0 && r1 == r2);
    st[3] = NAN;
    CHECK(mxp_sim_step(s, st, clip, n1, &r1, &err) == MXP_ERR_NONFINITE);
    CHECK_MSG(strstr(err.msg, "ant") && strstr(err.msg, "not finite"), "%s", err.msg);
    mxp_sim_destroy(s);
    mxp_sim_destroy(NULL);
}

static void expect_error(const char *model, mxp_status want, const char *needle) {
    mxp_replay_config c = mxp_replay_config_default();
    c.env = MXP_ENV_ANT;
    c.trajectories = 2;
    c.episode_len = 2;
    snprintf(c.mujoco_model, sizeof c.mujoco_model, "%s", model);
    mxp_replay *r = NULL;
    mxp_error err = {0};
    mxp_status st = mxp_replay_create(&c, &r, &err);
    CHECK_MSG(st == want && r == NULL, "%s: status %d, want %d", model, (int)st, (int)want);
    CHECK_MSG(strstr(err.msg, "data.mujoco_model") && strstr(err.msg, needle),
              "%s: message should name the key and %s: %s", model, needle, err.msg);
}

static void test_errors(void) {
    char bad[128], noact[128];
    expect_error("/nonexistent/model.xml", MXP_ERR_IO, "/nonexistent/model.xml");
    snprintf(bad, sizeof bad, "%s/bad.xml", g_dir);
    write_file(bad, "<mujoco><worldbody><body><geom type=\"sphere\"></worldbody></mujoco>\n");
    expect_error(bad, MXP_ERR_FORMAT, "bad.xml");
    snprintf(noact, sizeof noact, "%s/noact.xml", g_dir);
    write_file(noact, "<mujoco><worldbody><body><joint type=\"hinge\"/>"
                      "<geom type=\"sphere\" size=\"0.1\"/></body></worldbody></mujoco>\n");
    mxp_sim *s = NULL;
    mxp_error err = {0};
    CHECK(mxp_sim_create(MXP_ENV_ANT, noact, &s, &err) == MXP_ERR_UNSUPPORTED && s == NULL);
    CHECK_MSG(strstr(err.msg, "0 actuators"), "%s", err.msg);
    CHECK(mxp_sim_create(MXP_ENV_KIND_COUNT, NULL, &s, &err) == MXP_ERR_INVALID_ARG);
}

/* `mixprec train` on the ant in a precision: exit 0, finite val_loss. */
static void test_cli(const char *precision) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s train --json --quiet checkpoint.enabled=false data.env=ant "
             "data.trajectories=16 data.episode_length=%d training.epochs=1 "
             "training.precision=%s model.hidden=64 output.dir=%s/run_%s 2>/dev/null",
             MXP_CLI_PATH, g_quick ? 50 : 200, precision, g_dir, precision);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    if (!f) return;
    char out[8192] = {0};
    size_t n = fread(out, 1, sizeof out - 1, f);
    int rc = pclose(f);
    out[n] = 0;
    CHECK_MSG(rc == 0, "cli exit %d: %s", rc, out);
    const char *v = strstr(out, "\"val_loss\":");
    double val = v ? strtod(v + strlen("\"val_loss\":"), NULL) : NAN;
    CHECK_MSG(isfinite(val) && val > 0.0, "%s: val_loss %g in %s", precision, val, out);
    CHECK_MSG(strstr(out, "\"skipped_steps\":0"), "%s: skipped steps: %s", precision, out);
    printf("cli ant %s: val_loss %.6g\n", precision, val);
}

int main(void) {
    const char *q = getenv("MIXPREC_TEST_QUICK");
    g_quick = q && *q && strcmp(q, "0") != 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_mujoco_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_ant_path, sizeof g_ant_path, "%s/ant.xml", g_dir);
    test_version();
    test_ant_oracle();
    test_humanoid_oracle();
    test_determinism();
    test_step_contract();
    test_errors();
    test_cli("fp32");
    test_cli("mixed_bf16");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("could not remove %s\n", g_dir);
    return test_finish("test_mujoco");
}

#else /* !MIXPREC_HAVE_MUJOCO */

int main(void) {
    mxp_sim *s = NULL;
    mxp_error err = {0};
    CHECK(mxp_mujoco_version() == 0);
    CHECK(mxp_sim_create(MXP_ENV_ANT, NULL, &s, &err) == MXP_ERR_UNSUPPORTED && s == NULL);
    CHECK_MSG(strstr(err.msg, "built without MuJoCo") && strstr(err.msg, "libmujoco-dev"),
              "%s", err.msg);
    if (test_failures) return test_finish("test_mujoco");
    printf("test_mujoco: skipped: mixprec was built without MuJoCo\n");
    return 77;
}

#endif /* MIXPREC_HAVE_MUJOCO */
