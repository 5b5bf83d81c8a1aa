/* tests/test_data.c: environments and replay buffer.
 *
 * Oracles: the Gym Pendulum-v1 and CartPole-v1 update rules written out
 * again here by hand (double precision, own constants), pendulum energy
 * conservation, the reward formulas on hand-picked states, and for the
 * replay buffer: byte-exact determinism, per-trajectory streams, split
 * arithmetic, moments of the standardised columns, and consistency of the
 * stored transitions with mxp_env_step after un-standardising.
 */
#include <mixprec/data.h>

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define PI 3.14159265358979323846

/* ---- independent oracles --------------------------------------------- */

/* Gym Pendulum-v1, one step on (th, th_dot) in double. */
static void oracle_pendulum(double *th, double *th_dot, double u, double dt) {
    const double g = 10.0, m = 1.0, l = 1.0;
    if (u > 2.0) u = 2.0;
    if (u < -2.0) u = -2.0;
    double nd = *th_dot + (3.0 * g / (2.0 * l) * sin(*th) + 3.0 / (m * l * l) * u) * dt;
    if (nd > 8.0) nd = 8.0;
    if (nd < -8.0) nd = -8.0;
    *th_dot = nd;
    *th = *th + nd * dt;
}

/* Gym CartPole-v1 Euler step on s = (x, x_dot, th, th_dot) in double. */
static void oracle_cartpole(double s[4], double force) {
    const double gravity = 9.8, masscart = 1.0, masspole = 0.1, length = 0.5, tau = 0.02;
    const double total_mass = masspole + masscart, polemass_length = masspole * length;
    double x = s[0], x_dot = s[1], th = s[2], th_dot = s[3];
    double costh = cos(th), sinth = sin(th);
    double temp = (force + polemass_length * th_dot * th_dot * sinth) / total_mass;
    double thetaacc = (gravity * sinth - costh * temp) /
                      (length * (4.0 / 3.0 - masspole * costh * costh / total_mass));
    double xacc = temp - polemass_length * thetaacc * costh / total_mass;
    s[0] = x + tau * x_dot;
    s[1] = x_dot + tau * xacc;
    s[2] = th + tau * th_dot;
    s[3] = th_dot + tau * thetaacc;
}

/* ---- environments ------------------------------------------------------ */

static void test_info_parse(void) {
    const mxp_env_info *p = mxp_env_info_get(MXP_ENV_PENDULUM);
    const mxp_env_info *c = mxp_env_info_get(MXP_ENV_CARTPOLE);
    CHECK(p && c);
    if (!p || !c) return;
    CHECK(strcmp(p->name, "pendulum") == 0 && p->state_dim == 3 && p->action_dim == 1);
    CHECK(strcmp(c->name, "cartpole") == 0 && c->state_dim == 4 && c->action_dim == 1);
    CHECK(p->action_low == -2.0 && p->action_high == 2.0);
    CHECK(c->action_low == -10.0 && c->action_high == 10.0);
    CHECK(mxp_env_info_get(MXP_ENV_KIND_COUNT) == NULL);
    CHECK(mxp_env_info_get((mxp_env_kind)-1) == NULL);

    mxp_error err, *errp = &err; /* CHECK_OK wants a pointer variable */
    mxp_env_kind k = MXP_ENV_KIND_COUNT;
    CHECK_OK(mxp_env_parse("pendulum", &k, errp), errp);
    CHECK(k == MXP_ENV_PENDULUM);
    CHECK_OK(mxp_env_parse("cartpole", &k, errp), errp);
    CHECK(k == MXP_ENV_CARTPOLE);
    k = MXP_ENV_PENDULUM;
    mxp_error_clear(&err);
    CHECK(mxp_env_parse("acrobot", &k, &err) == MXP_ERR_INVALID_ARG);
    CHECK(err.status == MXP_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "acrobot") && strstr(err.msg, "pendulum") &&
                  strstr(err.msg, "cartpole"),
              "parse message should name the value and the accepted names: %s", err.msg);
    CHECK(k == MXP_ENV_PENDULUM); /* untouched on failure */
    CHECK(mxp_env_parse(NULL, &k, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_env_parse("", &k, NULL) == MXP_ERR_INVALID_ARG);
}

static void test_pendulum_trajectory(void) {
    /* zero torque from a swinging state: N steps vs the hand-written update */
    double th = 2.5, th_dot = 0.3;
    float s[3] = {(float)cos(th), (float)sin(th), (float)th_dot};
    float zero = 0.0f;
    for (int i = 0; i < 100; i++) {
        mxp_env_step(MXP_ENV_PENDULUM, s, &zero, s); /* in place: next aliases state */
        oracle_pendulum(&th, &th_dot, 0.0, 0.05);
        CHECK_CLOSE(s[0], cos(th), 2e-4, 0);
        CHECK_CLOSE(s[1], sin(th), 2e-4, 0);
        CHECK_CLOSE(s[2], th_dot, 2e-4, 0);
    }

    /* one step with torque, and torque clipped to 2 */
    const float us[3] = {1.5f, -0.75f, 5.0f};
    for (int i = 0; i < 3; i++) {
        double t0 = -1.2, d0 = -2.0;
        float in[3] = {(float)cos(t0), (float)sin(t0), (float)d0}, out[3];
        mxp_env_step(MXP_ENV_PENDULUM, in, &us[i], out);
        t0 = atan2(in[1], in[0]);
        d0 = in[2];
        oracle_pendulum(&t0, &d0, us[i], 0.05);
        CHECK_CLOSE(out[0], cos(t0), 1e-6, 0);
        CHECK_CLOSE(out[1], sin(t0), 1e-6, 0);
        CHECK_CLOSE(out[2], d0, 1e-6, 0);
    }

    /* speed clip: th = pi/2 (sin 1), th_dot 7.9, u = 2 -> 7.9 + 1.05 > 8 */
    float in[3] = {0.0f, 1.0f, 7.9f}, out[3], u2 = 2.0f;
    mxp_env_step(MXP_ENV_PENDULUM, in, &u2, out);
    CHECK(out[2] == 8.0f);
    CHECK_CLOSE(atan2(out[1], out[0]), PI / 2 + 8.0 * 0.05, 1e-6, 0);
}

/* Energy E = th_dot^2/2 + (3g/2l) cos th is conserved by the continuous
 * dynamics (th_ddot = 15 sin th); the semi-implicit (symplectic) Euler step
 * keeps its error bounded, with no drift, whereas explicit Euler would grow. */
static void test_pendulum_energy(void) {
    double th0 = 2.0;
    float s[3] = {(float)cos(th0), (float)sin(th0), 0.0f};
    double e0 = 15.0 * cos(th0);
    double dev_first = 0, dev_last = 0;
    const int n = 4000;
    float zero = 0.0f;
    for (int i = 0; i < n; i++) {
        mxp_env_step(MXP_ENV_PENDULUM, s, &zero, s);
        double th = atan2(s[1], s[0]);
        double e = 0.5 * (double)s[2] * s[2] + 15.0 * cos(th);
        double dev = fabs(e - e0);
        CHECK(fabs(s[2]) < 8.0); /* never reaches the speed clip from here */
        if (i < 1000 && dev > dev_first) dev_first = dev;
        if (i >= n - 1000 && dev > dev_last) dev_last = dev;
    }
    /* symplectic Euler conserves a modified energy E + O(dt): the error's
     * amplitude stays within ~10% of the peak kinetic energy e0 + 15 */
    CHECK_MSG(dev_first < 0.15 * (e0 + 15.0), "energy error %g", dev_first);
    CHECK_MSG(dev_last < 1.2 * dev_first + 1e-3,
              "energy drifts: first window %g, last window %g", dev_first, dev_last);

    /* the same motion with explicit Euler drifts: the check above can fail */
    double th = th0, w = 0, ex_last = 0;
    for (int i = 0; i < n; i++) {
        double nw = w + 15.0 * sin(th) * 0.05;
        th += w * 0.05; /* explicit: old velocity */
        w = nw;
        double dev = fabs(0.5 * w * w + 15.0 * cos(th) - e0);
        if (i >= n - 1000 && dev > ex_last) ex_last = dev;
    }
    CHECK(ex_last > 1.2 * dev_first + 1e-3);
}

static void test_pendulum_reward(void) {
    struct { double th, th_dot, u, th_norm, u_cost; } cases[] = {
        {3.5, 1.5, 0.7, 3.5 - 2 * PI, 0.7},
        {-0.5, -2.0, -1.0, -0.5, -1.0},
        {-3.9, 0.25, 3.0, -3.9 + 2 * PI, 2.0}, /* u clipped to 2 in the cost */
        {7.0, 0.0, 0.0, 7.0 - 2 * PI, 0.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float s[3] = {(float)cos(cases[i].th), (float)sin(cases[i].th),
                      (float)cases[i].th_dot};
        float u = (float)cases[i].u, next[3];
        double ref = -(cases[i].th_norm * cases[i].th_norm +
                       0.1 * cases[i].th_dot * cases[i].th_dot +
                       0.001 * cases[i].u_cost * cases[i].u_cost);
        CHECK_CLOSE(mxp_env_step(MXP_ENV_PENDULUM, s, &u, next), ref, 1e-5, 1e-6);
    }
}

static void test_cartpole(void) {
    /* one step against the hand-worked Gym equations */
    const double s0[4] = {0.1, -0.2, 0.05, 0.3};
    const double forces[4] = {4.0, -7.5, 0.0, 25.0};
    for (int f = 0; f < 4; f++) {
        float in[4], out[4];
        double ref[4];
        for (int i = 0; i < 4; i++) {
            in[i] = (float)s0[i];
            ref[i] = in[i];
        }
        float a = (float)forces[f];
        float r = mxp_env_step(MXP_ENV_CARTPOLE, in, &a, out);
        oracle_cartpole(ref, forces[f] > 10.0 ? 10.0 : forces[f]);
        for (int i = 0; i < 4; i++) CHECK_CLOSE(out[i], ref[i], 1e-7, 1e-6);
        CHECK(r == 1.0f);
    }
    /* worked numbers for F = 0 at (0, 0, 0.1, 0): temp = 0,
     * thetaacc = 9.8 sin(0.1) / (0.5 (4/3 - 0.1 cos^2(0.1) / 1.1)) */
    {
        float in[4] = {0, 0, 0.1f, 0}, out[4], a = 0;
        mxp_env_step(MXP_ENV_CARTPOLE, in, &a, out);
        double c = cos((double)0.1f), s = sin((double)0.1f);
        double tacc = 9.8 * s / (0.5 * (4.0 / 3.0 - 0.1 * c * c / 1.1));
        double xacc = -0.05 * tacc * c / 1.1;
        CHECK_CLOSE(out[0], 0.0, 1e-12, 0);
        CHECK_CLOSE(out[1], 0.02 * xacc, 1e-9, 1e-6);
        CHECK_CLOSE(out[2], (double)0.1f, 1e-9, 1e-7);
        CHECK_CLOSE(out[3], 0.02 * tacc, 1e-9, 1e-6);
    }
    /* reward: 1 while |th| <= 12 deg and |x| <= 2.4 after the step */
    struct { float s[4]; float r; } rc[] = {
        {{2.39f, 1.0f, 0.0f, 0.0f}, 0.0f},     /* x -> 2.41 */
        {{-2.39f, -1.0f, 0.0f, 0.0f}, 0.0f},   /* x -> -2.41 */
        {{2.30f, 1.0f, 0.0f, 0.0f}, 1.0f},     /* x -> 2.32 */
        {{0.0f, 0.0f, 0.2f, 0.5f}, 0.0f},      /* th -> 0.21 rad = 12.03 deg */
        {{0.0f, 0.0f, -0.2f, -0.5f}, 0.0f},
        {{0.0f, 0.0f, 0.2f, 0.0f}, 1.0f},      /* th stays 11.46 deg */
        {{0.0f, 0.0f, 0.3f, -10.0f}, 1.0f},    /* th -> 0.1: back inside */
        {{0.0f, 0.0f, 10.0f, 0.0f}, 0.0f},     /* fallen, not wrapped */
    };
    for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
        float out[4], a = 0;
        CHECK_MSG(mxp_env_step(MXP_ENV_CARTPOLE, rc[i].s, &a, out) == rc[i].r,
                  "cartpole reward case %zu", i);
    }
    /* aliasing: in place equals out of place */
    float a = 3.0f, s1[4] = {0.1f, 0.2f, -0.1f, 0.4f}, s2[4], o[4];
    memcpy(s2, s1, sizeof s1);
    float r1 = mxp_env_step(MXP_ENV_CARTPOLE, s1, &a, o);
    float r2 = mxp_env_step(MXP_ENV_CARTPOLE, s2, &a, s2);
    CHECK(r1 == r2 && memcmp(o, s2, sizeof o) == 0);
}

static void test_reset(void) {
    mxp_rng r;
    mxp_rng_init(&r, 7);
    double sum = 0;
    float lo = 1, hi = -1;
    for (int i = 0; i < 2000; i++) {
        float s[3];
        mxp_env_reset(MXP_ENV_PENDULUM, &r, s);
        CHECK_CLOSE((double)s[0] * s[0] + (double)s[1] * s[1], 1.0, 1e-6, 0);
        CHECK(s[2] >= -1.0f && s[2] <= 1.0f);
        sum += atan2(s[1], s[0]);
        if (s[2] < lo) lo = s[2];
        if (s[2] > hi) hi = s[2];
    }
    CHECK(r.counter == 4000); /* two draws per reset */
    CHECK(fabs(sum / 2000) < 0.2); /* th ~ U(-pi, pi): mean 0, sd 1.81/sqrt(2000) */
    CHECK(lo < -0.95f && hi > 0.95f);
    for (int i = 0; i < 500; i++) {
        float s[4];
        mxp_env_reset(MXP_ENV_CARTPOLE, &r, s);
        for (int j = 0; j < 4; j++) CHECK(s[j] >= -0.05f && s[j] <= 0.05f);
    }
}

/* ---- replay buffer ------------------------------------------------------ */

static mxp_replay *make(mxp_env_kind env, int64_t t, int64_t len, double vf, uint64_t seed) {
    mxp_replay_config c = mxp_replay_config_default();
    c.env = env;
    c.trajectories = t;
    c.episode_len = len;
    c.val_fraction = vf;
    c.seed = seed;
    mxp_replay *r = NULL;
    mxp_error err, *errp = &err;
    CHECK_OK(mxp_replay_create(&c, &r, errp), errp);
    return r;
}

/* Raw value of column j of row `row` in the full [n, d] slab. */
static double raw(const float *v, int64_t row, int64_t d, int64_t j, const float *mean,
                  const float *std) {
    return (double)v[row * d + j] * std[j] + mean[j];
}

static void test_shapes_split(void) {
    struct { mxp_env_kind env; int64_t t, len; double vf; int64_t n_train_traj; } cs[] = {
        {MXP_ENV_PENDULUM, 10, 7, 0.25, 8},  /* round(7.5) = 8 */
        {MXP_ENV_PENDULUM, 10, 3, 0.01, 9},  /* round(9.9) = 10 -> clamp 9 */
        {MXP_ENV_CARTPOLE, 10, 5, 0.99, 1},  /* round(0.1) = 0 -> clamp 1 */
        {MXP_ENV_CARTPOLE, 2, 1, 0.5, 1},
        {MXP_ENV_CARTPOLE, 7, 4, 0.3, 5},    /* round(4.9) = 5 */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        mxp_replay *r = make(cs[i].env, cs[i].t, cs[i].len, cs[i].vf, 3);
        if (!r) continue;
        int64_t sd = mxp_env_info_get(cs[i].env)->state_dim;
        CHECK(mxp_replay_in_dim(r) == sd + 1);
        CHECK(mxp_replay_out_dim(r) == sd + 1);
        mxp_replay_split tr = mxp_replay_train(r), va = mxp_replay_val(r);
        CHECK_MSG(tr.n == cs[i].n_train_traj * cs[i].len, "case %zu: train n %lld", i,
                  (long long)tr.n);
        CHECK(va.n == (cs[i].t - cs[i].n_train_traj) * cs[i].len);
        CHECK(mxp_replay_train_trajectories(r) == cs[i].n_train_traj);
        CHECK(va.x == tr.x + tr.n * (sd + 1) && va.y == tr.y + tr.n * (sd + 1));
        CHECK(mxp_replay_config_get(r)->trajectories == cs[i].t);
        CHECK(((uintptr_t)tr.x % 64) == 0 && ((uintptr_t)tr.y % 64) == 0);
        mxp_replay_destroy(r);
    }
    mxp_replay_destroy(NULL);
}

/* Train columns have mean 0 and (population) std 1; constant columns are 0. */
static void check_moments(const float *v, int64_t n, int64_t d, const float *std) {
    for (int64_t j = 0; j < d; j++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) s += v[i * d + j];
        double m = s / n;
        for (int64_t i = 0; i < n; i++) ss += (v[i * d + j] - m) * (v[i * d + j] - m);
        double sdv = sqrt(ss / n);
        if (std[j] <= 1e-6f) {
            CHECK_MSG(m == 0.0 && sdv == 0.0, "constant column %lld not zero", (long long)j);
            continue;
        }
        CHECK_MSG(fabs(m) < 1e-4, "column %lld mean %g", (long long)j, m);
        CHECK_MSG(fabs(sdv - 1.0) < 1e-4, "column %lld std %g", (long long)j, sdv);
    }
}

static void test_standardise_and_transitions(mxp_env_kind env, int64_t t, int64_t len) {
    mxp_replay *r = make(env, t, len, 0.2, 42);
    if (!r) return;
    const mxp_env_info *info = mxp_env_info_get(env);
    const int64_t sd = info->state_dim, in = mxp_replay_in_dim(r), out = mxp_replay_out_dim(r);
    mxp_replay_split tr = mxp_replay_train(r), va = mxp_replay_val(r);
    mxp_replay_stats st = mxp_replay_stats_get(r);
    check_moments(tr.x, tr.n, in, st.x_std);
    check_moments(tr.y, tr.n, out, st.y_std);

    /* the action column: U(lo, hi) has std (hi - lo)/sqrt(12), mean 0;
     * 4-sigma bounds (the sample std of a uniform has rel. sd 0.45/sqrt(n)) */
    double a_sd = (info->action_high - info->action_low) / sqrt(12.0);
    CHECK_CLOSE(st.x_std[sd], a_sd, 0, 4 * 0.45 / sqrt((double)tr.n));
    CHECK(fabs(st.x_mean[sd]) < 4 * a_sd / sqrt((double)tr.n));
    if (len <= 10 && env == MXP_ENV_CARTPOLE) /* short: the pole has not fallen */
        CHECK(st.y_std[sd] == 1e-6f && st.y_mean[sd] == 1.0f);

    /* every stored transition re-simulated with mxp_env_step after
     * un-standardising; states chain across steps; actions in bounds */
    const float *x = tr.x, *y = tr.y; /* full slabs: train then val */
    int64_t n = tr.n + va.n;
    int bad_step = 0, bad_chain = 0, bad_action = 0;
    for (int64_t row = 0; row < n; row++) {
        float s[8], a[8], nx[8];
        for (int64_t j = 0; j < sd; j++) s[j] = (float)raw(x, row, in, j, st.x_mean, st.x_std);
        a[0] = (float)raw(x, row, in, sd, st.x_mean, st.x_std);
        if (!(a[0] >= info->action_low - 1e-4 && a[0] <= info->action_high + 1e-4))
            bad_action++;
        float rew = mxp_env_step(env, s, a, nx);
        for (int64_t j = 0; j < sd; j++) {
            double d = raw(y, row, out, j, st.y_mean, st.y_std);
            double tol = 1e-5 * (1.0 + fabs(st.y_mean[j]) + st.y_std[j] + fabs(s[j]));
            if (!test_close(d, (double)nx[j] - s[j], tol, 1e-4)) bad_step++;
            if (row % len != len - 1) { /* next row's state = this state + delta */
                double s_next = raw(x, row + 1, in, j, st.x_mean, st.x_std);
                double tol2 = 1e-5 * (1.0 + fabs(st.x_mean[j]) + st.x_std[j] + fabs(s[j]));
                if (!test_close(s_next, s[j] + d, tol2 + tol, 1e-5)) bad_chain++;
            }
        }
        double rr = raw(y, row, out, sd, st.y_mean, st.y_std);
        if (!test_close(rr, rew, 1e-4, 1e-4)) bad_step++;
        if (row % len == 0 && env == MXP_ENV_CARTPOLE)
            for (int64_t j = 0; j < 4; j++) if (fabs(s[j]) > 0.05 + 1e-5) bad_chain++;
        if (row % len == 0 && env == MXP_ENV_PENDULUM && fabs(s[2]) > 1.0 + 1e-5)
            bad_chain++;
    }
    CHECK_MSG(bad_step == 0, "%s: %d transitions disagree with env_step", info->name, bad_step);
    CHECK_MSG(bad_chain == 0, "%s: %d breaks in the state chain", info->name, bad_chain);
    CHECK_MSG(bad_action == 0, "%s: %d actions out of bounds", info->name, bad_action);

    /* a sampled transition, spelled out: the reward column for pendulum is
     * the formula on the un-standardised state and action */
    if (env == MXP_ENV_PENDULUM) {
        int64_t row = tr.n + 3; /* a validation row */
        double c = raw(x, row, in, 0, st.x_mean, st.x_std);
        double s = raw(x, row, in, 1, st.x_mean, st.x_std);
        double w = raw(x, row, in, 2, st.x_mean, st.x_std);
        double u = raw(x, row, in, 3, st.x_mean, st.x_std);
        double th = atan2(s, c);
        CHECK_CLOSE(raw(y, row, out, 3, st.y_mean, st.y_std),
                    -(th * th + 0.1 * w * w + 0.001 * u * u), 1e-3, 1e-4);
    }
    for (int64_t i = 0; i < n * in; i++) CHECK(isfinite(x[i]));
    for (int64_t i = 0; i < n * out; i++) CHECK(isfinite(y[i]));
    mxp_replay_destroy(r);
}

static void test_determinism(void) {
    mxp_replay *a = make(MXP_ENV_PENDULUM, 6, 50, 0.3, 99);
    mxp_replay *b = make(MXP_ENV_PENDULUM, 6, 50, 0.3, 99);
    mxp_replay *c = make(MXP_ENV_PENDULUM, 6, 50, 0.3, 100);
    if (!a || !b || !c) return;
    size_t xb = 6 * 50 * 4 * sizeof(float), yb = 6 * 50 * 4 * sizeof(float);
    CHECK(memcmp(mxp_replay_train(a).x, mxp_replay_train(b).x, xb) == 0);
    CHECK(memcmp(mxp_replay_train(a).y, mxp_replay_train(b).y, yb) == 0);
    CHECK(memcmp(mxp_replay_stats_get(a).x_mean, mxp_replay_stats_get(b).x_mean,
                 4 * sizeof(float)) == 0);
    CHECK(memcmp(mxp_replay_train(a).x, mxp_replay_train(c).x, xb) != 0);
    CHECK(memcmp(mxp_replay_train(a).y, mxp_replay_train(c).y, yb) != 0);
    mxp_replay_destroy(a);
    mxp_replay_destroy(b);
    mxp_replay_destroy(c);

    /* trajectory i is the same raw data whatever the total count (the stats,
     * hence the stored z values, differ) */
    const int64_t len = 20, in = 5;
    mxp_replay *s = make(MXP_ENV_CARTPOLE, 4, len, 0.5, 5);
    mxp_replay *l = make(MXP_ENV_CARTPOLE, 11, len, 0.1, 5);
    if (!s || !l) return;
    mxp_replay_stats ss = mxp_replay_stats_get(s), ls = mxp_replay_stats_get(l);
    const float *sx = mxp_replay_train(s).x, *lx = mxp_replay_train(l).x;
    int mismatch = 0, differs_from_next = 0;
    for (int64_t row = 0; row < 4 * len; row++)
        for (int64_t j = 0; j < in; j++) {
            double v1 = raw(sx, row, in, j, ss.x_mean, ss.x_std);
            double v2 = raw(lx, row, in, j, ls.x_mean, ls.x_std);
            double tol = 1e-6 * (1 + fabs(ss.x_mean[j]) + ss.x_std[j] + fabs(ls.x_mean[j]) +
                                 ls.x_std[j]);
            if (!test_close(v1, v2, tol, 1e-5)) mismatch++;
            double v3 = raw(lx, row + len, in, j, ls.x_mean, ls.x_std);
            if (!test_close(v1, v3, tol, 1e-5)) differs_from_next++;
        }
    CHECK_MSG(mismatch == 0, "%d values of the first 4 trajectories depend on the count",
              mismatch);
    CHECK(differs_from_next > 4 * len * in / 2); /* trajectories are not all alike */
    mxp_replay_destroy(s);
    mxp_replay_destroy(l);
}

static void expect_reject(mxp_replay_config c, mxp_status want, const char *field,
                          const char *value) {
    mxp_error err;
    mxp_error_clear(&err);
    mxp_replay *sentinel = (mxp_replay *)&err, *r = sentinel;
    mxp_status st = mxp_replay_create(&c, &r, &err);
    CHECK_MSG(st == want, "%s=%s: status %d, want %d", field, value, (int)st, (int)want);
    CHECK(err.status == want);
    CHECK(r == sentinel);
    CHECK_MSG(strstr(err.msg, field) && strstr(err.msg, value) && strstr(err.msg, "accepted"),
              "message should name %s and %s: %s", field, value, err.msg);
}

static void test_bad_configs(void) {
    mxp_replay_config d = mxp_replay_config_default(), c;
    c = d; c.trajectories = 1;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.trajectories", "1");
    c = d; c.trajectories = -5;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.trajectories", "-5");
    c = d; c.episode_len = 0;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.episode_length", "0");
    c = d; c.val_fraction = 0.0;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.val_fraction", "0");
    c = d; c.val_fraction = 1.0;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.val_fraction", "1");
    c = d; c.val_fraction = NAN;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.val_fraction", "nan");
    c = d; c.val_fraction = -0.5;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.val_fraction", "-0.5");
    c = d; c.env = MXP_ENV_KIND_COUNT;
    expect_reject(c, MXP_ERR_INVALID_ARG, "data.env", "2");
    c = d; c.trajectories = INT64_MAX / 2; c.episode_len = 1000;
    expect_reject(c, MXP_ERR_OUT_OF_MEMORY, "data.trajectories", "4611686018427387903");

    mxp_error err;
    mxp_replay *r = NULL;
    CHECK(mxp_replay_create(NULL, &r, &err) == MXP_ERR_INVALID_ARG && r == NULL);
    CHECK(mxp_replay_create(&d, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_replay_create(&c, &r, NULL) == MXP_ERR_OUT_OF_MEMORY); /* NULL err is fine */

    /* the defaults are valid */
    CHECK(d.env == MXP_ENV_PENDULUM && d.trajectories >= 2 && d.episode_len >= 1 &&
          d.val_fraction > 0 && d.val_fraction < 1);
}

int main(void) {
    test_info_parse();
    test_pendulum_trajectory();
    test_pendulum_energy();
    test_pendulum_reward();
    test_cartpole();
    test_reset();
    test_shapes_split();
    test_standardise_and_transitions(MXP_ENV_PENDULUM, 40, 100);
    test_standardise_and_transitions(MXP_ENV_CARTPOLE, 40, 100);
    test_standardise_and_transitions(MXP_ENV_CARTPOLE, 10, 10); /* constant reward column */
    test_determinism();
    test_bad_configs();
    return test_finish("test_data");
}
