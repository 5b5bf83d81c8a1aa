/* data/env.c: the built-in environments (pendulum, cart-pole) and the
 * mxp_sim instance object every kind is used through.
 *
 * Entry points: mxp_env_info_get, mxp_env_parse, mxp_env_step,
 * mxp_env_reset (pure functions of their inputs; reset: of the RNG state;
 * physics in double, states stored as float); mxp_sim_create/_destroy,
 * _reset, _step and accessors (MuJoCo kinds go to env_mujoco.c).
 *
 * References:
 *   Gym/Gymnasium Pendulum-v1 (gymnasium/envs/classic_control/pendulum.py):
 *     semi-implicit Euler, g=10, m=1, l=1, dt=0.05, max speed 8, max torque 2.
 *   Gym/Gymnasium CartPole-v1 (classic_control/cartpole.py), after Barto,
 *     Sutton & Anderson (1983) with Florian's (2007) corrected equations:
 *     g=9.8, m_cart=1, m_pole=0.1, half length 0.5, tau=0.02, Euler; here
 *     with a continuous force in [-10, 10] N and no termination.
 */
#include "data/data_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define ENV_PI 3.14159265358979323846

static const mxp_env_info env_infos[] = {
    [MXP_ENV_PENDULUM] = {"pendulum", 3, 1, -2.0, 2.0, false},
    [MXP_ENV_CARTPOLE] = {"cartpole", 4, 1, -10.0, 10.0, false},
    [MXP_ENV_ANT] = {"ant", 0, 0, 0.0, 0.0, true},
    [MXP_ENV_HUMANOID] = {"humanoid", 0, 0, 0.0, 0.0, true},
};
static_assert(sizeof env_infos / sizeof env_infos[0] == MXP_ENV_KIND_COUNT,
              "env_infos must list every mxp_env_kind");

/* Pendulum-v1 constants. */
#define PEND_G 10.0
#define PEND_M 1.0
#define PEND_L 1.0
#define PEND_DT 0.05
#define PEND_MAX_SPEED 8.0
#define PEND_MAX_TORQUE 2.0

/* CartPole-v1 constants. */
#define CP_G 9.8
#define CP_MASSCART 1.0
#define CP_MASSPOLE 0.1
#define CP_TOTAL_MASS (CP_MASSCART + CP_MASSPOLE)
#define CP_LENGTH 0.5 /* half the pole's length */
#define CP_POLEMASS_LENGTH (CP_MASSPOLE * CP_LENGTH)
#define CP_FORCE_MAG 10.0
#define CP_TAU 0.02
#define CP_X_THRESHOLD 2.4
#define CP_THETA_THRESHOLD (12.0 * 2.0 * ENV_PI / 360.0)

const mxp_env_info *mxp_env_info_get(mxp_env_kind k) {
    if ((unsigned)k >= (unsigned)MXP_ENV_KIND_COUNT) return NULL;
    return &env_infos[k];
}

mxp_status mxp_env_parse(const char *s, mxp_env_kind *out, mxp_error *err) {
    if (s) {
        for (int k = 0; k < MXP_ENV_KIND_COUNT; k++) {
            if (strcmp(s, env_infos[k].name) == 0) {
                if (out) *out = (mxp_env_kind)k;
                return MXP_OK;
            }
        }
    }
    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                         "environment '%s' is unknown; accepted: pendulum, cartpole, "
                         "ant, humanoid (the last two need MuJoCo)",
                         s ? s : "(null)");
}

static double clampd(double v, double lo, double hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Angle wrapped to [-pi, pi), as Gym's angle_normalize ((x+pi) % 2pi) - pi
 * with Python's floor-modulo. */
static double angle_normalize(double th) {
    double two_pi = 2.0 * ENV_PI;
    double m = fmod(th + ENV_PI, two_pi);
    if (m < 0.0) m += two_pi;
    return m - ENV_PI;
}

/* Pendulum-v1 step. state (cos th, sin th, th_dot) [3], action [1]. */
static float pendulum_step(const float *state, const float *action, float *next) {
    double th = atan2((double)state[1], (double)state[0]);
    double th_dot = state[2];
    double u = clampd(action[0], -PEND_MAX_TORQUE, PEND_MAX_TORQUE);
    double th_n = angle_normalize(th);
    double cost = th_n * th_n + 0.1 * th_dot * th_dot + 0.001 * u * u;

    double new_th_dot = th_dot + (3.0 * PEND_G / (2.0 * PEND_L) * sin(th) +
                                  3.0 / (PEND_M * PEND_L * PEND_L) * u) * PEND_DT;
    new_th_dot = clampd(new_th_dot, -PEND_MAX_SPEED, PEND_MAX_SPEED);
    double new_th = th + new_th_dot * PEND_DT;

    next[0] = (float)cos(new_th);
    next[1] = (float)sin(new_th);
    next[2] = (float)new_th_dot;
    return (float)-cost;
}

/* CartPole-v1 step (continuous force). state (x, x_dot, th, th_dot) [4],
 * action [1]. Reward from the resulting state. */
static float cartpole_step(const float *state, const float *action, float *next) {
    double x = state[0], x_dot = state[1], th = state[2], th_dot = state[3];
    double force = clampd(action[0], -CP_FORCE_MAG, CP_FORCE_MAG);
    double c = cos(th), s = sin(th);
    double temp = (force + CP_POLEMASS_LENGTH * th_dot * th_dot * s) / CP_TOTAL_MASS;
    double th_acc = (CP_G * s - c * temp) /
                    (CP_LENGTH * (4.0 / 3.0 - CP_MASSPOLE * c * c / CP_TOTAL_MASS));
    double x_acc = temp - CP_POLEMASS_LENGTH * th_acc * c / CP_TOTAL_MASS;

    double nx = x + CP_TAU * x_dot;
    double nx_dot = x_dot + CP_TAU * x_acc;
    double nth = th + CP_TAU * th_dot;
    double nth_dot = th_dot + CP_TAU * th_acc;

    next[0] = (float)nx;
    next[1] = (float)nx_dot;
    next[2] = (float)nth;
    next[3] = (float)nth_dot;
    bool alive = fabs(nx) <= CP_X_THRESHOLD && fabs(nth) <= CP_THETA_THRESHOLD;
    return alive ? 1.0f : 0.0f;
}

float mxp_env_step(mxp_env_kind k, const float *state, const float *action, float *next) {
    switch (k) {
    case MXP_ENV_PENDULUM: return pendulum_step(state, action, next);
    case MXP_ENV_CARTPOLE: return cartpole_step(state, action, next);
    case MXP_ENV_ANT:
    case MXP_ENV_HUMANOID:
    case MXP_ENV_KIND_COUNT: break;
    }
    return 0.0f;
}

/* Uniform in [lo, hi) from one draw of r. */
static double uniform_in(mxp_rng *r, double lo, double hi) {
    return lo + (hi - lo) * (double)mxp_rng_uniform(r);
}

void mxp_env_reset(mxp_env_kind k, mxp_rng *r, float *state) {
    switch (k) {
    case MXP_ENV_PENDULUM: {
        double th = uniform_in(r, -ENV_PI, ENV_PI);
        double th_dot = uniform_in(r, -1.0, 1.0);
        state[0] = (float)cos(th);
        state[1] = (float)sin(th);
        state[2] = (float)th_dot;
        return;
    }
    case MXP_ENV_CARTPOLE:
        for (int i = 0; i < 4; i++) state[i] = (float)uniform_in(r, -0.05, 0.05);
        return;
    case MXP_ENV_ANT:
    case MXP_ENV_HUMANOID:
    case MXP_ENV_KIND_COUNT: break;
    }
}

/* ---- mxp_sim ------------------------------------------------------------ */

mxp_status mxp_sim_create(mxp_env_kind k, const char *mujoco_model, mxp_sim **out,
                          mxp_error *err) {
    const mxp_env_info *info = mxp_env_info_get(k);
    if (!out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_sim_create: out must be non-NULL");
    if (!info)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data.env = %d is not an environment; accepted: 0 (pendulum), "
                             "1 (cartpole), 2 (ant), 3 (humanoid)", (int)k);
    mxp_sim *s = mxp_calloc(1, sizeof *s);
    if (!s) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "environment %s", info->name);
    s->kind = k;
    if (info->mujoco) {
        mxp_status st = mxp_sim_mujoco_open(s, mujoco_model, err);
        if (st != MXP_OK) {
            mxp_sim_destroy(s);
            return st;
        }
    } else {
        s->state_dim = info->state_dim;
        s->action_dim = info->action_dim;
        s->action_lo = mxp_calloc((size_t)info->action_dim, sizeof(double));
        s->action_hi = mxp_calloc((size_t)info->action_dim, sizeof(double));
        if (!s->action_lo || !s->action_hi) {
            mxp_sim_destroy(s);
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "environment %s", info->name);
        }
        for (int a = 0; a < info->action_dim; a++) {
            s->action_lo[a] = info->action_low;
            s->action_hi[a] = info->action_high;
        }
    }
    *out = s;
    return MXP_OK;
}

void mxp_sim_destroy(mxp_sim *s) {
    if (!s) return;
    if (s->mj) mxp_sim_mujoco_close(s);
    mxp_free(s->action_lo);
    mxp_free(s->action_hi);
    mxp_free(s);
}

mxp_env_kind mxp_sim_kind(const mxp_sim *s) { return s->kind; }
int mxp_sim_state_dim(const mxp_sim *s) { return s->state_dim; }
int mxp_sim_action_dim(const mxp_sim *s) { return s->action_dim; }

void mxp_sim_action_range(const mxp_sim *s, int a, double *lo, double *hi) {
    *lo = s->action_lo[a];
    *hi = s->action_hi[a];
}

void mxp_sim_reset(mxp_sim *s, mxp_rng *r, float *state) {
    if (s->mj)
        mxp_sim_mujoco_reset(s, r, state);
    else
        mxp_env_reset(s->kind, r, state);
}

mxp_status mxp_sim_step(mxp_sim *s, const float *state, const float *action, float *next,
                        float *reward, mxp_error *err) {
    if (s->mj) return mxp_sim_mujoco_step(s, state, action, next, reward, err);
    *reward = mxp_env_step(s->kind, state, action, next);
    return MXP_OK;
}
