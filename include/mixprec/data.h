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
 *   ant       MuJoCo (optional, see below): a four-legged walker in the
 *             style of Gym's Ant, built into mixprec (libmujoco-samples 2.2.2
 *             ships no ant model); state qpos+qvel = 15+14 = 29, action 8
 *             motor controls in [-1, 1]
 *   humanoid  MuJoCo: /usr/share/mujoco/model/humanoid/humanoid.xml from
 *             libmujoco-samples; state 28+27 = 55, action 21 in [-1, 1]
 * Actions outside the bounds are clipped. Physics is computed in double and
 * stored as float.
 *
 * MuJoCo environments (built only when CMake found MuJoCo: MIXPREC_HAVE_MUJOCO;
 * otherwise selecting one fails with MXP_ERR_UNSUPPORTED). The model is the
 * kind's default or any MuJoCo XML given as mxp_replay_config.mujoco_model
 * (data.mujoco_model). With nq, nv, na, nu the model's sizes:
 *   state   [qpos (nq), qvel (nv), act (na)] as float (na = 0 for motors)
 *   action  ctrl [nu], entry a within the actuator's ctrlrange (ctrllimited
 *           actuators) or [-1, 1] (others)
 *   step    the float state and the clipped action are loaded into the
 *           mjData (time 0, qacc_warmstart 0, so a step depends on
 *           (state, action) only), then mj_step runs MXP_MUJOCO_FRAME_SKIP
 *           (5) times: one environment step lasts 5 model timesteps
 *           (ant 5 x 0.01 s, Euler; humanoid 5 x 0.005 s)
 *   reward  (com_x' - com_x) / (5 timestep) - w * sum(ctrl^2): forward
 *           velocity of the whole model's centre of mass (subtree_com of the
 *           world body) minus a control cost, w = 0.5 (ant) or 0.1
 *           (humanoid), Gym's weights; no healthy bonus, no termination
 *   reset   qpos = qpos0 + U(-0.1, 0.1) per entry (nq draws), then
 *           qvel = U(-0.1, 0.1) (nv draws), act = 0; quaternions of free and
 *           ball joints renormalised (mj_normalizeQuat)
 * Each uniform is lo + (hi - lo) * mxp_rng_uniform, computed in double.
 * A trajectory is one episode of exactly `episode_len` steps from a random
 * initial state under a seeded random (uniform) policy. Trajectory i draws
 * from its own RNG stream, a hash of (seed, i): first the initial state
 * (pendulum th ~ U(-pi, pi), th_dot ~ U(-1, 1); cartpole each entry
 * ~ U(-0.05, 0.05)), then action_dim uniform draws in the action bounds per
 * step (MuJoCo: the reset draws listed above). So trajectory i is the same
 * whatever the number of trajectories. A "trajectory" is always one episode
 * of exactly data.episode_length steps (no early termination).
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
    MXP_ENV_ANT,      /* MuJoCo */
    MXP_ENV_HUMANOID, /* MuJoCo */
    MXP_ENV_KIND_COUNT
} mxp_env_kind;

typedef struct mxp_env_info {
    const char *name; /* "pendulum", "cartpole", "ant", "humanoid" */
    int state_dim;      /* MuJoCo kinds: 0, the model decides (mxp_sim_state_dim) */
    int action_dim;     /* MuJoCo kinds: 0, the model decides */
    double action_low;  /* every action entry lies in [action_low, */
    double action_high; /*   action_high]: pendulum +-2, cartpole +-10; MuJoCo: per
                           actuator (mxp_sim_action_range) */
    bool mujoco;        /* simulated by MuJoCo (needs an mxp_sim) */
} mxp_env_info;

/* One MuJoCo environment step is this many model timesteps. */
#define MXP_MUJOCO_FRAME_SKIP 5
/* Size of mxp_replay_config.mujoco_model, terminator included. */
#define MXP_ENV_PATH_MAX 256

/* NULL when k is not a valid kind. */
MXP_API const mxp_env_info *mxp_env_info_get(mxp_env_kind k);
/* Name -> kind (exact, lower-case names above); MXP_ERR_INVALID_ARG naming
 * the string and the accepted names otherwise. */
MXP_API mxp_status mxp_env_parse(const char *s, mxp_env_kind *out, mxp_error *err);

/* One environment step of a built-in kind: next = f(state, action); returns
 * the reward. state/next have state_dim entries, action action_dim; next may
 * alias state. An invalid or MuJoCo k returns 0 and leaves next untouched
 * (MuJoCo kinds step through an mxp_sim). */
MXP_API float mxp_env_step(mxp_env_kind k, const float *state, const float *action, float *next);
/* A random initial state of a built-in kind drawn from r (MuJoCo kinds and
 * invalid k: state untouched, r not advanced). */
MXP_API void mxp_env_reset(mxp_env_kind k, mxp_rng *r, float *state);

/* mxp_sim: one environment instance, the single path the replay builder
 * uses for every kind. Built-in kinds wrap mxp_env_step/_reset; MuJoCo kinds
 * own their mjModel and mjData, so any number of sims (and replays) can live
 * at once; one sim must not be stepped from two threads at a time. */
typedef struct mxp_sim mxp_sim;

/* Create an instance of kind k. mujoco_model: path of a MuJoCo XML for the
 * MuJoCo kinds, NULL, "" or "default" for the kind's own model; ignored by
 * built-in kinds. Errors: MXP_ERR_INVALID_ARG for an invalid k;
 * MXP_ERR_UNSUPPORTED for a MuJoCo kind in a build without MuJoCo;
 * MXP_ERR_IO / MXP_ERR_FORMAT naming data.mujoco_model when the file is
 * missing or MuJoCo rejects it (with MuJoCo's message); MXP_ERR_UNSUPPORTED
 * for a model with no actuator or no degree of freedom. *out only on success. */
MXP_API mxp_status mxp_sim_create(mxp_env_kind k, const char *mujoco_model, mxp_sim **out,
                                  mxp_error *err);
/* Free everything; NULL is a no-op. */
MXP_API void mxp_sim_destroy(mxp_sim *s);
MXP_API mxp_env_kind mxp_sim_kind(const mxp_sim *s);
MXP_API int mxp_sim_state_dim(const mxp_sim *s);
MXP_API int mxp_sim_action_dim(const mxp_sim *s);
/* Bounds of action entry a (0 <= a < action_dim). */
MXP_API void mxp_sim_action_range(const mxp_sim *s, int a, double *lo, double *hi);
/* A random initial state [state_dim] drawn from r (see the header comment). */
MXP_API void mxp_sim_reset(mxp_sim *s, mxp_rng *r, float *state);
/* next = f(state, action) [state_dim], *reward; next may alias state; the
 * action is clipped to its bounds. MXP_ERR_NONFINITE when the result is not
 * finite or MuJoCo flagged a bad qpos/qvel/qacc (it then resets its mjData;
 * such a step is an error, never silently kept); next is then unspecified. */
MXP_API mxp_status mxp_sim_step(mxp_sim *s, const float *state, const float *action, float *next,
                                float *reward, mxp_error *err);
/* MuJoCo's library version (mj_version(), e.g. 222 for 2.2.2) when mixprec
 * was built with MuJoCo, else 0. */
MXP_API int mxp_mujoco_version(void);

typedef struct mxp_replay_config {
    mxp_env_kind env;
    char mujoco_model[MXP_ENV_PATH_MAX]; /* data.mujoco_model: MuJoCo XML path, or
                                            "default" (see mxp_sim_create) */
    int64_t trajectories;  /* >= 2 */
    int64_t episode_len;   /* >= 1 */
    double val_fraction;   /* (0, 1): share of trajectories held out */
    uint64_t seed;
} mxp_replay_config;

/* Defaults: pendulum, 100 trajectories of 200 steps (Gym Pendulum-v1's
 * time limit), val_fraction 0.1, seed 1234, mujoco_model "default". */
MXP_API mxp_replay_config mxp_replay_config_default(void);

/* The Philox key of trajectory i's stream under seed: a splitmix64 hash of
 * (seed, i) (so a test can regenerate one trajectory on its own). */
MXP_API uint64_t mxp_replay_trajectory_seed(uint64_t seed, int64_t i);

typedef struct mxp_replay mxp_replay;

/* Validate c (MXP_ERR_INVALID_ARG naming the field by its config key,
 * data.env / data.trajectories / data.episode_length / data.val_fraction,
 * its value and the accepted range), create the environment (the errors of
 * mxp_sim_create), generate the trajectories and standardise. MXP_ERR_OUT_OF_MEMORY when the sizes overflow or allocation
 * fails; MXP_ERR_NONFINITE if the dynamics produced a non-finite value.
 * *out is set only on success. */
MXP_API mxp_status mxp_replay_create(const mxp_replay_config *c, mxp_replay **out, mxp_error *err);
MXP_API void mxp_replay_destroy(mxp_replay *r);

typedef struct mxp_replay_split {
    const float *x; /* [n, in_dim], standardised */
    const float *y; /* [n, out_dim], standardised */
    int64_t n;
} mxp_replay_split;

MXP_API int64_t mxp_replay_in_dim(const mxp_replay *r);
MXP_API int64_t mxp_replay_out_dim(const mxp_replay *r);
MXP_API mxp_replay_split mxp_replay_train(const mxp_replay *r);
MXP_API mxp_replay_split mxp_replay_val(const mxp_replay *r);

/* The standardisation applied to both splits: raw = z * std + mean. */
typedef struct mxp_replay_stats {
    const float *x_mean; /* [in_dim] */
    const float *x_std;  /* [in_dim] */
    const float *y_mean; /* [out_dim] */
    const float *y_std;  /* [out_dim] */
} mxp_replay_stats;

MXP_API mxp_replay_stats mxp_replay_stats_get(const mxp_replay *r);
/* The config the buffer was created from, and its trajectory split. */
MXP_API const mxp_replay_config *mxp_replay_config_get(const mxp_replay *r);
MXP_API int64_t mxp_replay_train_trajectories(const mxp_replay *r);

/* ---- IDX files (src/data/idx.c) -------------------------------------------
 * IDX (the MNIST file format, yann.lecun.com/exdb/mnist): two zero bytes,
 * a type code (0x08 unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C
 * int32, 0x0D float32, 0x0E float64), the number of dimensions, then one
 * big-endian uint32 per dimension, then the elements in row-major order,
 * big-endian. mixprec reads unsigned-byte files (every MNIST-style image
 * and label file), plain or gzip-compressed (detected by content, through
 * zlib), and rejects anything else with an error naming the file and the
 * problem: bad magic, an unsupported type, a zero or oversized dimension,
 * a truncated header or body, trailing bytes, or a corrupt gzip stream. */

#define MXP_IDX_MAX_DIMS 8
/* Largest element count accepted (2^32): guards against absurd headers. */
#define MXP_IDX_MAX_ELEMENTS ((uint64_t)1 << 32)

typedef struct mxp_idx {
    int ndims;                       /* 1..MXP_IDX_MAX_DIMS */
    int64_t dims[MXP_IDX_MAX_DIMS];  /* each >= 1 */
    size_t count;                    /* product of dims */
    uint8_t *data;                   /* [count] unsigned bytes (mxp_free) */
} mxp_idx;

/* Read an unsigned-byte IDX file (plain or gzip). On success *out owns its
 * data; on failure *out is zeroed, nothing is leaked, and err names the
 * path and the problem (MXP_ERR_IO: cannot open/read; MXP_ERR_FORMAT:
 * malformed, truncated, trailing bytes, corrupt gzip; MXP_ERR_UNSUPPORTED:
 * a valid IDX type other than unsigned byte). */
MXP_API mxp_status mxp_idx_read(const char *path, mxp_idx *out, mxp_error *err);
MXP_API void mxp_idx_free(mxp_idx *x);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_DATA_H */
