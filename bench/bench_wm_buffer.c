/* bench/bench_wm_buffer.c: write a flat replay buffer from a MuJoCo (or
 * built-in) environment, as an RL team's own buffer would look
 * (docs/data.md "Flat transitions"), for bench/wm_ensemble_figures.sh.
 *
 *   bench_wm_buffer OUT.safetensors [ENV [EPISODES [STEPS [SEED [MODEL_XML]]]]]
 *
 * ENV: ant (default; MuJoCo, the built-in ant), humanoid (libmujoco-samples'
 * humanoid.xml, or MODEL_XML), pendulum, cartpole. Each episode starts
 * from mxp_sim_reset of its own seed and runs STEPS (default 100) steps of
 * uniformly random actions in the actuators' ranges (the random-policy
 * data mixprec's own replay uses); EPISODES default 100, SEED 1. Arrays
 * (F32): obs [N, S], actions [N, A], rewards [N], next_obs [N, S],
 * terminals [N] (0: the environments have no terminal states), timeouts
 * [N] (1 on each episode's last step). A step MuJoCo flags as non-finite
 * ends its episode early (timeout set on the step before; counted on
 * stderr). Exit 0 ok, 1 failure (the message on stderr), 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec.h>

static int fail(const mxp_error *e) {
    fprintf(stderr, "bench_wm_buffer: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 7 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: %s OUT.safetensors [ENV [EPISODES [STEPS [SEED [MODEL_XML]]]]]\n",
                argv[0]);
        return 2;
    }
    const char *out = argv[1], *env = argc > 2 ? argv[2] : "ant";
    const long eps = argc > 3 ? strtol(argv[3], NULL, 10) : 100;
    const long T = argc > 4 ? strtol(argv[4], NULL, 10) : 100;
    const unsigned long long seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
    const char *xml = argc > 6 ? argv[6] : "default";
    if (eps < 2 || T < 1 || eps * T > 10000000) {
        fprintf(stderr, "bench_wm_buffer: EPISODES %ld, STEPS %ld; accepted: >= 2, >= 1, "
                        "product <= 1e7\n", eps, T);
        return 2;
    }
    mxp_error err = {0};
    mxp_env_kind k;
    if (mxp_env_parse(env, &k, &err) != MXP_OK) return fail(&err);
    mxp_sim *sim = NULL;
    if (mxp_sim_create(k, xml, &sim, &err) != MXP_OK) return fail(&err);
    const int S = mxp_sim_state_dim(sim), A = mxp_sim_action_dim(sim);
    const size_t N = (size_t)eps * (size_t)T;
    float *obs = calloc(N * (size_t)S, sizeof(float)), *nxt = calloc(N * (size_t)S, sizeof(float));
    float *act = calloc(N * (size_t)A, sizeof(float)), *rew = calloc(N, sizeof(float));
    float *term = calloc(N, sizeof(float)), *tout = calloc(N, sizeof(float));
    if (!obs || !nxt || !act || !rew || !term || !tout) {
        fprintf(stderr, "bench_wm_buffer: out of memory for %zu transitions\n", N);
        return 1;
    }
    size_t n = 0;
    long cut = 0;
    for (long e = 0; e < eps; e++) {
        mxp_rng r;
        mxp_rng_init(&r, mxp_replay_trajectory_seed(seed, e));
        float *s = obs + n * (size_t)S;
        mxp_sim_reset(sim, &r, s);
        for (long t = 0; t < T; t++) {
            float *a = act + n * (size_t)A, *s1 = nxt + n * (size_t)S;
            for (int j = 0; j < A; j++) {
                double lo, hi;
                mxp_sim_action_range(sim, j, &lo, &hi);
                a[j] = (float)(lo + (hi - lo) * mxp_rng_uniform(&r));
            }
            mxp_error se = {0};
            if (mxp_sim_step(sim, obs + n * (size_t)S, a, s1, &rew[n], &se) != MXP_OK) {
                cut++; /* the episode ends at the previous step */
                if (t > 0) tout[n - 1] = 1.0f;
                break;
            }
            tout[n] = t == T - 1 ? 1.0f : 0.0f;
            n++;
            if (t + 1 < T) memcpy(obs + n * (size_t)S, s1, (size_t)S * sizeof(float));
        }
    }
    mxp_sim_destroy(sim);
    mxp_st_writer *w = NULL;
    mxp_status st = mxp_st_writer_create(&w, &err);
    const int64_t sh_s[2] = {(int64_t)n, S}, sh_a[2] = {(int64_t)n, A}, sh_1[1] = {(int64_t)n};
    if (st == MXP_OK) st = mxp_st_writer_add_tensor(w, "obs", MXP_DTYPE_F32, 2, sh_s, obs, &err);
    if (st == MXP_OK)
        st = mxp_st_writer_add_tensor(w, "actions", MXP_DTYPE_F32, 2, sh_a, act, &err);
    if (st == MXP_OK)
        st = mxp_st_writer_add_tensor(w, "rewards", MXP_DTYPE_F32, 1, sh_1, rew, &err);
    if (st == MXP_OK)
        st = mxp_st_writer_add_tensor(w, "next_obs", MXP_DTYPE_F32, 2, sh_s, nxt, &err);
    if (st == MXP_OK)
        st = mxp_st_writer_add_tensor(w, "terminals", MXP_DTYPE_F32, 1, sh_1, term, &err);
    if (st == MXP_OK)
        st = mxp_st_writer_add_tensor(w, "timeouts", MXP_DTYPE_F32, 1, sh_1, tout, &err);
    if (st == MXP_OK) st = mxp_st_writer_add_meta(w, "env", env, &err);
    if (st == MXP_OK) st = mxp_st_writer_write(w, out, &err);
    mxp_st_writer_destroy(w);
    free(obs);
    free(nxt);
    free(act);
    free(rew);
    free(term);
    free(tout);
    if (st != MXP_OK) return fail(&err);
    printf("wrote %s: %zu transitions of %ld episodes of env %s (obs [%zu, %d], actions [%zu, "
           "%d]); %ld episodes cut short by a non-finite step\n",
           out, n, eps, env, n, S, n, A, cut);
    return 0;
}
