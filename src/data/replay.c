/* data/replay.c: the replay buffer as a standardised supervised dataset.
 *
 * Entry points: mxp_replay_config_default, mxp_replay_create/_destroy and
 * the accessors declared in mixprec/data.h.
 *
 * Layout: one x slab [N, in_dim] and one y slab [N, out_dim], N =
 * trajectories * episode_len rows, trajectory-major; the train split is
 * the first n_train trajectories' rows, validation the rest, so each split
 * is a view into the slabs. Trajectory i uses its own Philox stream keyed by
 * a splitmix64 hash of (seed, i), so data do not depend on generation
 * order or on the number of trajectories. Every kind is stepped through
 * one mxp_sim created for the build and destroyed after it (MuJoCo kinds:
 * their own mjModel/mjData), so buffers built at the same time share nothing.
 */
#include <mixprec/data.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define REPLAY_MAX_DIM 4096 /* bound on state_dim + action_dim (any MuJoCo model) */
#define REPLAY_STD_FLOOR 1e-6

struct mxp_replay {
    mxp_replay_config cfg;
    int64_t in_dim;        /* state_dim + action_dim */
    int64_t out_dim;       /* state_dim + 1 */
    int64_t n;             /* rows: trajectories * episode_len */
    int64_t n_train_traj;  /* trajectories in the train split */
    int64_t n_train;       /* train rows */
    float *x;              /* [n, in_dim], standardised */
    float *y;              /* [n, out_dim], standardised */
    float *stats;          /* [2 * (in_dim + out_dim)]: x_mean, x_std, y_mean, y_std */
};

mxp_replay_config mxp_replay_config_default(void) {
    mxp_replay_config c;
    memset(&c, 0, sizeof c);
    c.env = MXP_ENV_PENDULUM;
    c.trajectories = 100;
    c.episode_len = 200;
    c.val_fraction = 0.1;
    c.seed = 1234;
    snprintf(c.mujoco_model, sizeof c.mujoco_model, "default");
    return c;
}

/* splitmix64 finaliser (Steele, Lea & Flood, OOPSLA 2014). */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The RNG stream key of trajectory i under seed: depends on (seed, i) only. */
uint64_t mxp_replay_trajectory_seed(uint64_t seed, int64_t i) {
    return mix64(mix64(seed) ^ mix64((uint64_t)i + 0x9E3779B97F4A7C15ull));
}

static mxp_status validate(const mxp_replay_config *c, mxp_error *err) {
    if (!mxp_env_info_get(c->env))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data.env = %d is not an environment; accepted: "
                             "0 (pendulum), 1 (cartpole), 2 (ant), 3 (humanoid)",
                             (int)c->env);
    if (!memchr(c->mujoco_model, '\0', sizeof c->mujoco_model))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data.mujoco_model is not terminated; accepted: a path "
                             "shorter than %d bytes", MXP_ENV_PATH_MAX);
    if (c->trajectories < 2)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data.trajectories = %lld; accepted: >= 2 (one for "
                             "train, one for validation)", (long long)c->trajectories);
    if (c->episode_len < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data.episode_length = %lld; accepted: >= 1",
                             (long long)c->episode_len);
    if (!(c->val_fraction > 0.0 && c->val_fraction < 1.0))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "data.val_fraction = %g; accepted: the open interval (0, 1)",
                             c->val_fraction);
    return MXP_OK;
}

/* Train trajectories: round((1 - val_fraction) * T), clamped to [1, T-1]. */
static int64_t train_trajectories(const mxp_replay_config *c) {
    double t = round((1.0 - c->val_fraction) * (double)c->trajectories);
    if (t < 1.0) return 1;
    if (t > (double)(c->trajectories - 1)) return c->trajectories - 1;
    return (int64_t)t;
}

/* Generate every trajectory into r->x / r->y (raw, unstandardised) with
 * sim; scratch holds 3 * in_dim floats (state, next, action). */
static mxp_status generate(mxp_replay *r, mxp_sim *sim, float *scratch, mxp_error *err) {
    const char *name = mxp_env_info_get(r->cfg.env)->name;
    const int sd = mxp_sim_state_dim(sim), ad = mxp_sim_action_dim(sim);
    const int64_t in = r->in_dim, out = r->out_dim, len = r->cfg.episode_len;
    float *state = scratch, *next = scratch + in, *action = scratch + 2 * in;

    for (int64_t t = 0; t < r->cfg.trajectories; t++) {
        mxp_rng rng;
        mxp_rng_init(&rng, mxp_replay_trajectory_seed(r->cfg.seed, t));
        mxp_sim_reset(sim, &rng, state);
        for (int64_t s = 0; s < len; s++) {
            for (int a = 0; a < ad; a++) {
                double lo, hi, u = mxp_rng_uniform(&rng);
                mxp_sim_action_range(sim, a, &lo, &hi);
                action[a] = (float)(lo + (hi - lo) * u);
            }
            float reward = 0.0f;
            mxp_status st = mxp_sim_step(sim, state, action, next, &reward, err);
            if (st != MXP_OK && st != MXP_ERR_NONFINITE) return st;
            float *xr = r->x + (t * len + s) * in;
            float *yr = r->y + (t * len + s) * out;
            bool finite = st == MXP_OK && isfinite(reward);
            for (int i = 0; i < sd && finite; i++) {
                xr[i] = state[i];
                yr[i] = next[i] - state[i];
                finite = isfinite(yr[i]);
            }
            for (int a = 0; a < ad; a++) xr[sd + a] = action[a];
            yr[sd] = reward;
            if (!finite) {
                char why[200] = ""; /* the environment's own diagnosis, if any */
                if (st != MXP_OK && err) snprintf(why, sizeof why, " (%.190s)", err->msg);
                return mxp_error_set(err, MXP_ERR_NONFINITE,
                                     "environment %s produced a non-finite value at "
                                     "trajectory %lld, step %lld%s; accepted: finite "
                                     "dynamics (shorten data.episode_length)",
                                     name, (long long)t, (long long)s, why);
            }
            memcpy(state, next, (size_t)sd * sizeof(float));
        }
    }
    return MXP_OK;
}

/* Per-column mean and population std of the first n_rows rows of a [*, d]
 * slab, in double, rounded to float; std floored. mean/std have d entries;
 * acc is zeroed scratch of 2 * d doubles. */
static void column_stats(const float *v, int64_t n_rows, int64_t d, float *mean, float *std,
                         double *acc) {
    double *sum = acc, *ss = acc + d;
    memset(acc, 0, 2 * (size_t)d * sizeof(double));
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < d; j++) sum[j] += v[r * d + j];
    for (int64_t j = 0; j < d; j++) sum[j] /= (double)n_rows;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < d; j++) {
            double e = (double)v[r * d + j] - sum[j];
            ss[j] += e * e;
        }
    for (int64_t j = 0; j < d; j++) {
        mean[j] = (float)sum[j];
        double s = (double)(float)sqrt(ss[j] / (double)n_rows);
        std[j] = (float)(s < REPLAY_STD_FLOOR ? REPLAY_STD_FLOOR : s);
    }
}

/* Standardise all n_rows rows of a [*, d] slab in place with mean/std. */
static void standardise(float *v, int64_t n_rows, int64_t d, const float *mean,
                        const float *std) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < d; j++)
            v[r * d + j] = (float)(((double)v[r * d + j] - (double)mean[j]) / (double)std[j]);
}

mxp_status mxp_replay_create(const mxp_replay_config *c, mxp_replay **out, mxp_error *err) {
    if (!c || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_replay_create: config and out must be non-NULL");
    mxp_status st = validate(c, err);
    if (st != MXP_OK) return st;

    const mxp_env_info *info = mxp_env_info_get(c->env);
    mxp_sim *sim = NULL;
    st = mxp_sim_create(c->env, c->mujoco_model, &sim, err);
    if (st != MXP_OK) return st;
    size_t n, nx, ny, xbytes, ybytes;
    const size_t in_dim = (size_t)mxp_sim_state_dim(sim) + (size_t)mxp_sim_action_dim(sim);
    const size_t out_dim = (size_t)mxp_sim_state_dim(sim) + 1;
    if (in_dim > REPLAY_MAX_DIM) {
        mxp_sim_destroy(sim);
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "environment %s has %zu inputs (state + action); accepted: "
                             "<= %d", info->name, in_dim, REPLAY_MAX_DIM);
    }
    if (!mxp_size_mul((size_t)c->trajectories, (size_t)c->episode_len, &n) ||
        n > (size_t)INT64_MAX || !mxp_size_mul(n, in_dim, &nx) ||
        !mxp_size_mul(n, out_dim, &ny) || !mxp_size_mul(nx, sizeof(float), &xbytes) ||
        !mxp_size_mul(ny, sizeof(float), &ybytes)) {
        mxp_sim_destroy(sim);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                             "replay buffer size overflows: data.trajectories = %lld "
                             "x data.episode_length = %lld transitions; accepted: a "
                             "product that fits in memory",
                             (long long)c->trajectories, (long long)c->episode_len);
    }

    /* Plan every buffer now: the slabs, the stats, the step scratch (state,
     * next, action: in_dim floats each) and the stats accumulators. */
    mxp_replay *r = mxp_calloc(1, sizeof *r);
    float *scratch = mxp_calloc(3 * in_dim, sizeof(float));
    double *acc = mxp_calloc(2 * in_dim, sizeof(double)); /* in_dim >= out_dim */
    if (r) {
        r->x = mxp_calloc(nx, sizeof(float));
        r->y = mxp_calloc(ny, sizeof(float));
        r->stats = mxp_calloc(2 * (in_dim + out_dim), sizeof(float));
    }
    if (!r || !scratch || !acc || !r->x || !r->y || !r->stats) {
        st = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                           "replay buffer: out of memory for %zu + %zu bytes "
                           "(data.trajectories = %lld, data.episode_length = %lld)",
                           xbytes, ybytes, (long long)c->trajectories,
                           (long long)c->episode_len);
        goto done;
    }
    r->cfg = *c;
    r->in_dim = (int64_t)in_dim;
    r->out_dim = (int64_t)out_dim;
    r->n = (int64_t)n;
    r->n_train_traj = train_trajectories(c);
    r->n_train = r->n_train_traj * c->episode_len;

    st = generate(r, sim, scratch, err);
    if (st != MXP_OK) goto done;

    float *x_mean = r->stats, *x_std = x_mean + in_dim;
    float *y_mean = x_std + in_dim, *y_std = y_mean + out_dim;
    column_stats(r->x, r->n_train, r->in_dim, x_mean, x_std, acc);
    column_stats(r->y, r->n_train, r->out_dim, y_mean, y_std, acc);
    standardise(r->x, r->n, r->in_dim, x_mean, x_std);
    standardise(r->y, r->n, r->out_dim, y_mean, y_std);
    *out = r;
    r = NULL;
done:
    mxp_replay_destroy(r);
    mxp_free(scratch);
    mxp_free(acc);
    mxp_sim_destroy(sim);
    return st;
}

void mxp_replay_destroy(mxp_replay *r) {
    if (!r) return;
    mxp_free(r->x);
    mxp_free(r->y);
    mxp_free(r->stats);
    mxp_free(r);
}

int64_t mxp_replay_in_dim(const mxp_replay *r) { return r->in_dim; }
int64_t mxp_replay_out_dim(const mxp_replay *r) { return r->out_dim; }

mxp_replay_split mxp_replay_train(const mxp_replay *r) {
    mxp_replay_split s = {r->x, r->y, r->n_train};
    return s;
}

mxp_replay_split mxp_replay_val(const mxp_replay *r) {
    mxp_replay_split s = {r->x + r->n_train * r->in_dim, r->y + r->n_train * r->out_dim,
                          r->n - r->n_train};
    return s;
}

mxp_replay_stats mxp_replay_stats_get(const mxp_replay *r) {
    mxp_replay_stats s;
    s.x_mean = r->stats;
    s.x_std = r->stats + r->in_dim;
    s.y_mean = r->stats + 2 * r->in_dim;
    s.y_std = r->stats + 2 * r->in_dim + r->out_dim;
    return s;
}

const mxp_replay_config *mxp_replay_config_get(const mxp_replay *r) { return &r->cfg; }

int64_t mxp_replay_train_trajectories(const mxp_replay *r) { return r->n_train_traj; }
