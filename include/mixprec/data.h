/* mixprec/data.h: built-in environments and the replay buffer.
 *
 * Environments integrate real equations of motion, deterministically from a
 * seed, with no dependency:
 *   pendulum  state (cos th, sin th, th_dot), action torque in [-2, 2];
 *             th_ddot = 3g/(2l) sin th + 3/(m l^2) u  (Gym Pendulum-v1
 *             constants g=10, m=1, l=1, dt=0.05, |th_dot| <= 8);
 *             reward -(th_norm^2 + 0.1 th_dot^2 + 0.001 u^2)
 *             (semi-implicit Euler; th_norm = th wrapped to [-pi, pi); the
 *             reward is that of the state acted in, with u clipped, as Gym)
 *   cartpole  state (x, x_dot, th, th_dot), continuous force in [-10, 10] N;
 *             Barto-Sutton-Anderson dynamics (Gym CartPole-v1 constants,
 *             Euler, dt=0.02); reward 1 while |th| <= 12 deg and |x| <= 2.4
 *             (Gym's termination test, on the RESULTING state), else 0
 *             (episodes do NOT terminate: fixed length, see below; th is
 *             not wrapped, the cart may drift past the track ends)
 * Actions outside the bounds are clipped. Physics is computed in double and
 * stored as float.
 * A trajectory is one episode of exactly `episode_len` steps from a random
 * initial state under a seeded random (uniform) policy. Trajectory i draws
 * from its own RNG stream, a hash of (seed, i): first the initial state
 * (pendulum th ~ U(-pi, pi), th_dot ~ U(-1, 1); cartpole each entry
 * ~ U(-0.05, 0.05)), then action_dim uniform draws in the action bounds per
 * step. So trajectory i is the same whatever the number of trajectories.
 *
 * The replay buffer holds transitions as a supervised dataset:
 *   x = [state, action]              FP32 [N, state_dim + action_dim]
 *   y = [next_state - state, reward] FP32 [N, state_dim + 1]
 * split by trajectory into train (first) and validation (last) parts, and
 * standardised with the TRAIN split's per-column mean and std.
 * Rows are trajectory-major (trajectory i, step s is row i*episode_len + s).
 * Train holds the first n_train = round((1 - val_fraction) * trajectories)
 * trajectories, clamped to [1, trajectories - 1]; validation the rest.
 * Standardisation: z = (v - mean) / std per column, mean and the population
 * std (divide by n) over the train rows, computed in double, rounded to
 * float, std floored at 1e-6; the stored float stats are exactly the ones
 * applied, so v ~= z * std + mean.
 */
#ifndef MIXPREC_DATA_H
#define MIXPREC_DATA_H

#include <mixprec/base.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mxp_env_kind {
    MXP_ENV_PENDULUM,
    MXP_ENV_CARTPOLE,
    MXP_ENV_KIND_COUNT
} mxp_env_kind;

typedef struct mxp_env_info {
    const char *name; /* "pendulum", "cartpole" */
    int state_dim;
    int action_dim;
    double action_low;  /* every action entry lies in [action_low, */
    double action_high; /*   action_high]: pendulum +-2, cartpole +-10 */
} mxp_env_info;

/* NULL when k is not a valid kind. */
const mxp_env_info *mxp_env_info_get(mxp_env_kind k);
/* Name -> kind (exact, lower-case names above); MXP_ERR_INVALID_ARG naming
 * the string and the accepted names otherwise. */
mxp_status mxp_env_parse(const char *s, mxp_env_kind *out, mxp_error *err);

/* One environment step: next = f(state, action); returns the reward.
 * state/next have state_dim entries, action action_dim; next may alias state.
 * An invalid k returns 0 and leaves next untouched. */
float mxp_env_step(mxp_env_kind k, const float *state, const float *action, float *next);
/* A random initial state drawn from r. */
void mxp_env_reset(mxp_env_kind k, mxp_rng *r, float *state);

typedef struct mxp_replay_config {
    mxp_env_kind env;
    int64_t trajectories;  /* >= 2 */
    int64_t episode_len;   /* >= 1 */
    double val_fraction;   /* (0, 1): share of trajectories held out */
    uint64_t seed;
} mxp_replay_config;

/* Defaults: pendulum, 100 trajectories of 200 steps (Gym Pendulum-v1's
 * time limit), val_fraction 0.1, seed 1234. */
mxp_replay_config mxp_replay_config_default(void);

typedef struct mxp_replay mxp_replay;

/* Validate c (MXP_ERR_INVALID_ARG naming the field by its config key,
 * data.env / data.trajectories / data.episode_length / data.val_fraction,
 * its value and the accepted range), generate the trajectories and
 * standardise. MXP_ERR_OUT_OF_MEMORY when the sizes overflow or allocation
 * fails; MXP_ERR_NONFINITE if the dynamics produced a non-finite value.
 * *out is set only on success. */
mxp_status mxp_replay_create(const mxp_replay_config *c, mxp_replay **out, mxp_error *err);
void mxp_replay_destroy(mxp_replay *r);

typedef struct mxp_replay_split {
    const float *x; /* [n, in_dim], standardised */
    const float *y; /* [n, out_dim], standardised */
    int64_t n;
} mxp_replay_split;

int64_t mxp_replay_in_dim(const mxp_replay *r);
int64_t mxp_replay_out_dim(const mxp_replay *r);
mxp_replay_split mxp_replay_train(const mxp_replay *r);
mxp_replay_split mxp_replay_val(const mxp_replay *r);

/* The standardisation applied to both splits: raw = z * std + mean. */
typedef struct mxp_replay_stats {
    const float *x_mean; /* [in_dim] */
    const float *x_std;  /* [in_dim] */
    const float *y_mean; /* [out_dim] */
    const float *y_std;  /* [out_dim] */
} mxp_replay_stats;

mxp_replay_stats mxp_replay_stats_get(const mxp_replay *r);
/* The config the buffer was created from, and its trajectory split. */
const mxp_replay_config *mxp_replay_config_get(const mxp_replay *r);
int64_t mxp_replay_train_trajectories(const mxp_replay *r);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_DATA_H */
