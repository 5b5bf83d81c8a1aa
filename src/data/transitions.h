/* src/data/transitions.h: a world-model dataset as episodes of transitions,
 * whichever of the two layouts of docs/data.md it holds (transitions.c).
 * Not installed: dataset_check.c (mxp_dataset_check) and the user-data
 * provider (models/user_data.c) use it.
 *
 *   episode layout  obs [E, T+1, S], actions [E, T, A], rewards [E, T],
 *                   optional lengths [E] and flags terminals (or
 *                   terminations) / timeouts (or truncations) [E, T], set
 *                   only at an episode's last transition (episode_flags.c)
 *   flat layout     obs [N, ...], actions [N, ...], rewards [N] (or [N, 1]),
 *                   optional next_obs [N, ...] and flags terminals /
 *                   timeouts / dones [N] (or [N, 1]); aliases observations
 *                   and states (obs), next_observations and next_states
 *                   (next_obs), terminations (terminals), truncations
 *                   (timeouts)
 *
 * Flat rows are cut into episodes after every row i whose flag is set, and,
 * with next_obs, after every row i < N-1 whose next_obs[i] differs from
 * obs[i+1] (then the rows are not one trajectory); the last row ends the
 * last episode. Transition i of an episode is (obs[i], actions[i],
 * rewards[i]) -> next_obs[i], or without next_obs -> obs[i+1], which makes
 * the last row of every episode a final state only (its action and reward
 * are not used). Episodes without a transition are dropped.
 */
#ifndef MIXPREC_DATA_TRANSITIONS_H
#define MIXPREC_DATA_TRANSITIONS_H

#include <mixprec/dataset.h>

typedef struct wm_episodes {
    bool flat;                      /* which layout */
    const mxp_array *obs, *act, *rew; /* found under their names or aliases */
    const mxp_array *next;          /* flat: next_obs, or NULL */
    const mxp_array *len;           /* episode layout: lengths, or NULL */
    int64_t S, A;                   /* state and action widths (flat: trailing dims flattened) */
    int64_t E;                      /* episodes holding at least one transition */
    int64_t T;                      /* episode layout: padded steps; flat: longest episode */
    int64_t transitions;            /* sum of the episode lengths */
    int64_t rows;                   /* flat: N; episode layout: E*T */
    int64_t dropped;                /* flat: episodes without a transition (dropped) */
    int64_t *start;                 /* flat: [E] first row of episode e */
    int64_t *count;                 /* flat: [E] transitions of episode e */
    const mxp_array *term, *timeout, *done; /* the flags given, or NULL (episode layout:
                                               terminals and timeouts [E, T] only) */
} wm_episodes;

/* Find the layout of d, check it (names, ranks, dtypes, shapes, flag
 * values, at least 2 episodes) and index its episodes. MXP_ERR_FORMAT
 * naming d's label, the array and what is accepted on any problem;
 * MXP_ERR_OUT_OF_MEMORY. On failure *w holds nothing to close. d must
 * outlive w (the arrays are borrowed). */
mxp_status wm_episodes_open(const mxp_dataset *d, wm_episodes *w, mxp_error *err);
/* Free the index (not the arrays); a zeroed or closed w is a no-op. */
void wm_episodes_close(wm_episodes *w);
/* Transitions of episode e (0 <= e < E). */
int64_t wm_episode_len(const wm_episodes *w, int64_t e);
/* The transitions of episodes [e0, e1), episode-major, as training rows:
 * x [rows, S+A] = [obs, action], y [rows, S+1] = [next - obs, reward],
 * each value converted to float32 from its own dtype (differences taken in
 * double, then rounded) - the same bits for the same numbers in either
 * layout. x and y must hold the sum of the episodes' lengths rows. */
void wm_episode_rows(const wm_episodes *w, int64_t e0, int64_t e1, float *x, float *y);
/* Can w give each transition its true-termination flag (model.termination)?
 * Flat layout: terminals (or terminations) as given; else dones and
 * timeouts together (terminal = done and not timeout). Episode layout:
 * terminals [E, T]. Dones alone (a timeout and a termination look alike),
 * timeouts alone, next_obs only and the episode layout without terminals
 * cannot: MXP_ERR_FORMAT naming d's label, what is missing and what is
 * accepted. */
mxp_status wm_episodes_check_terminals(const wm_episodes *w, const char *label, mxp_error *err);
/* The flags of the transitions of episodes [e0, e1) (as wm_episode_rows
 * orders them) into t with stride ts (t[r ts] = 0 or 1): flat with
 * next_obs, transition i's flag is row i's; flat without, the transition
 * into an episode's last row (its final state) carries that row's flag and
 * the others 0; episode layout, terminals[e, t]. w must pass
 * wm_episodes_check_terminals. */
void wm_episode_terminals(const wm_episodes *w, int64_t e0, int64_t e1, float *t, int64_t ts);
/* Check flag array f of the episode layout (E episodes of at most T
 * transitions, lengths len or NULL): shape [E, T], values 0/1, set only at
 * an episode's last transition (episode_flags.c). MXP_ERR_FORMAT naming
 * d's label, f, the place and what is accepted. */
mxp_status wm_check_episode_flag(const mxp_dataset *d, const mxp_array *f, const mxp_array *len,
                                 int64_t E, int64_t T, mxp_error *err);

#endif /* MIXPREC_DATA_TRANSITIONS_H */
