/* data/transitions.c: world-model data as episodes of transitions, from the
 * episode layout or from flat transitions (transitions.h, docs/data.md).
 *
 * Entry points: wm_episodes_open / _close, wm_episode_len, wm_episode_rows,
 * wm_episodes_check_terminals, wm_episode_terminals
 * (internal). The episode layout's checks are dataset_check.c's
 * (ds_check_episodes) and, for its terminals/timeouts [E, T],
 * episode_flags.c's; this file chooses the layout, checks the flat one and
 * indexes its episodes. Flat transitions are what replay buffers hold
 * (Stable-Baselines3 ReplayBuffer, CleanRL, d3rlpy, D4RL's HDF5 files,
 * Minari's episodes once concatenated by dataset_h5.c): rows [N, ...] with
 * flags saying where an episode ends.
 */
#include "data/transitions.h"

#include "data/dataset_internal.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum wm_role {
    R_OBS,
    R_ACT,
    R_REW,
    R_NEXT,
    R_TERM,
    R_TIMEOUT,
    R_DONE,
    R_LEN,
    R_COUNT
} wm_role;

/* Accepted names per role: the first is the canonical one. */
static const struct {
    const char *names[3];
    const char *layout; /* for messages */
} kRoles[] = {
    [R_OBS] = {{"obs", "observations", "states"}, "obs [N, S...] float"},
    [R_ACT] = {{"actions", NULL, NULL}, "actions [N, A...] float"},
    [R_REW] = {{"rewards", NULL, NULL}, "rewards [N] or [N, 1] float"},
    [R_NEXT] = {{"next_obs", "next_observations", "next_states"}, "next_obs [N, S...] float"},
    [R_TERM] = {{"terminals", "terminations", NULL}, "terminals [N] or [N, 1] flags 0/1"},
    [R_TIMEOUT] = {{"timeouts", "truncations", NULL}, "timeouts [N] or [N, 1] flags 0/1"},
    [R_DONE] = {{"dones", NULL, NULL}, "dones [N] or [N, 1] flags 0/1"},
    [R_LEN] = {{"lengths", NULL, NULL}, "lengths [E] int (episode layout)"},
};
static_assert(sizeof kRoles / sizeof kRoles[0] == R_COUNT, "one row per wm_role");

#define ACCEPTED                                                                                   \
    "accepted: flat transitions obs (or observations, states), actions, rewards, next_obs (or "    \
    "next_observations, next_states), terminals (or terminations), timeouts (or truncations), "   \
    "dones; or episodes obs, actions, rewards, lengths, terminals, timeouts (docs/data.md)"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        mxp_status s_ = (x);                                                                       \
        if (s_ != MXP_OK) return s_;                                                               \
    } while (0)

/* The array of each role (NULL when absent); an unknown name or two names
 * of one role are errors. */
static mxp_status find_roles(const mxp_dataset *d, const mxp_array **a, mxp_error *err) {
    const char *L = mxp_dataset_label(d);
    for (int r = 0; r < R_COUNT; r++) a[r] = NULL;
    for (int i = 0; i < mxp_dataset_num_arrays(d); i++) {
        const mxp_array *x = mxp_dataset_array(d, i);
        int role = -1;
        for (int r = 0; r < R_COUNT && role < 0; r++)
            for (int k = 0; k < 3 && kRoles[r].names[k]; k++)
                if (strcmp(x->name, kRoles[r].names[k]) == 0) role = r;
        if (role < 0)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: unexpected array '%s' for the world_model "
                                 "workload; " ACCEPTED,
                                 L, x->name);
        if (a[role])
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: arrays '%s' and '%s' both give %s; accepted: one of them",
                                 L, a[role]->name, x->name, kRoles[role].names[0]);
        a[role] = x;
    }
    return MXP_OK;
}

static bool is_float(const mxp_array *a) {
    return a->dtype == MXP_ARRAY_F32 || a->dtype == MXP_ARRAY_F64;
}

/* Product of a's dimensions after the first (1 for rank 1). */
static int64_t row_width(const mxp_array *a) {
    int64_t w = 1;
    for (int i = 1; i < a->ndim; i++) w *= a->shape[i]; /* numel fits: no overflow */
    return w;
}

/* A flat array of role r: rank >= 1 ([N] or [N, 1] when `column`), N rows,
 * float (flags: any dtype, values 0 or 1), float64 within float32's range. */
static mxp_status check_flat(const mxp_dataset *d, const mxp_array *a, wm_role r, int64_t N,
                             bool column, mxp_error *err) {
    const char *L = mxp_dataset_label(d);
    char sb[128];
    bool flag = r == R_TERM || r == R_TIMEOUT || r == R_DONE;
    if (a->ndim < 1 || (column && !(a->ndim == 1 || (a->ndim == 2 && a->shape[1] == 1))))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%s' has shape %s; accepted: %s (flat transitions)", L,
                             a->name, ds_shape_str(a, sb, sizeof sb), kRoles[r].layout);
    if (a->shape[0] != N)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: shape mismatch: array '%s' has shape %s, its dimension 0 "
                             "(transitions N) must be %lld as in '%s'",
                             L, a->name, ds_shape_str(a, sb, sizeof sb), (long long)N,
                             "obs");
    if (flag) {
        for (int64_t i = 0; i < a->numel; i++) {
            double v = mxp_array_get_f64(a, i);
            if (v != 0.0 && v != 1.0)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: %s[%lld] = %g; accepted: 0 or 1 (false or true; bool, "
                                     "int or float flags)",
                                     L, a->name, (long long)i, v);
        }
        return MXP_OK;
    }
    if (!is_float(a))
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%s' has dtype %s; accepted: %s", L,
                             a->name, mxp_array_dtype_name(a->dtype),
                             "float32 or float64 (flat transitions)");
    if (a->dtype == MXP_ARRAY_F64)
        for (int64_t i = 0; i < a->numel; i++) {
            double v = ((const double *)a->data)[i];
            if (fabs(v) > FLT_MAX)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: array '%s' holds %g at flat index %lld, beyond "
                                     "float32's range (+-3.4e38)",
                                     L, a->name, v, (long long)i);
        }
    return MXP_OK;
}

/* Does flat row i end an episode? */
static bool row_ends(const wm_episodes *w, const mxp_array *const *flags, int64_t i, int64_t N) {
    if (i == N - 1) return true;
    for (int k = 0; k < 3; k++)
        if (flags[k] && mxp_array_get_f64(flags[k], i) != 0.0) return true;
    if (w->next)
        for (int64_t j = 0; j < w->S; j++)
            if (mxp_array_get_f64(w->next, i * w->S + j) !=
                mxp_array_get_f64(w->obs, (i + 1) * w->S + j))
                return true;
    return false;
}

static mxp_status open_flat(const mxp_dataset *d, const mxp_array **a, wm_episodes *w,
                            mxp_error *err) {
    const char *L = mxp_dataset_label(d);
    for (int r = R_OBS; r <= R_REW; r++)
        if (!a[r])
            return mxp_error_set(err, MXP_ERR_FORMAT, "%s: missing array '%s' (%s)", L,
                                 kRoles[r].names[0], kRoles[r].layout);
    if (a[R_OBS]->ndim < 1)
        return mxp_error_set(err, MXP_ERR_FORMAT, "%s: array '%s' is a scalar; accepted: %s", L,
                             a[R_OBS]->name, kRoles[R_OBS].layout);
    const int64_t N = a[R_OBS]->shape[0];
    TRY(check_flat(d, a[R_OBS], R_OBS, N, false, err));
    TRY(check_flat(d, a[R_ACT], R_ACT, N, false, err));
    TRY(check_flat(d, a[R_REW], R_REW, N, true, err));
    for (int r = R_NEXT; r <= R_DONE; r++)
        if (a[r]) TRY(check_flat(d, a[r], (wm_role)r, N, r != R_NEXT, err));
    if (a[R_NEXT]) {
        bool same = a[R_NEXT]->ndim == a[R_OBS]->ndim;
        for (int i = 1; same && i < a[R_OBS]->ndim; i++)
            same = a[R_NEXT]->shape[i] == a[R_OBS]->shape[i];
        if (!same) {
            char s1[128], s2[128];
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: shape mismatch: array '%s' has shape %s; accepted: the "
                                 "shape of '%s', %s",
                                 L, a[R_NEXT]->name, ds_shape_str(a[R_NEXT], s1, sizeof s1),
                                 a[R_OBS]->name, ds_shape_str(a[R_OBS], s2, sizeof s2));
        }
    }
    const mxp_array *flags[3] = {a[R_TERM], a[R_TIMEOUT], a[R_DONE]};
    if (!flags[0] && !flags[1] && !flags[2] && !a[R_NEXT])
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: flat transitions need their episode ends: give terminals "
                             "and/or timeouts (as D4RL), dones (as Stable-Baselines3), or "
                             "next_obs; or use the episode layout (obs [E, T+1, S], docs/data.md)",
                             L);
    *w = (wm_episodes){.flat = true, .obs = a[R_OBS], .act = a[R_ACT], .rew = a[R_REW],
                       .next = a[R_NEXT], .S = row_width(a[R_OBS]), .A = row_width(a[R_ACT]),
                       .rows = N, .term = a[R_TERM], .timeout = a[R_TIMEOUT],
                       .done = a[R_DONE]};
    int64_t ends = 0;
    for (int64_t i = 0; i < N; i++) ends += row_ends(w, flags, i, N);
    w->start = mxp_calloc((size_t)ends, sizeof *w->start);
    w->count = mxp_calloc((size_t)ends, sizeof *w->count);
    if (!w->start || !w->count) {
        wm_episodes_close(w);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: %lld episodes", L, (long long)ends);
    }
    for (int64_t i = 0, b = 0; i < N; i++) {
        if (!row_ends(w, flags, i, N)) continue;
        /* rows b..i: with next_obs every row is a transition; without, the
         * last row is the final state only */
        int64_t n = w->next ? i - b + 1 : i - b;
        if (n > 0) {
            w->start[w->E] = b;
            w->count[w->E] = n;
            w->E++;
            w->transitions += n;
            if (n > w->T) w->T = n;
        } else {
            w->dropped++;
        }
        b = i + 1;
    }
    if (w->E < 2) {
        mxp_status s = mxp_error_set(
            err, MXP_ERR_FORMAT,
            "%s: the flat transitions hold %lld episode(s) with a transition (episode ends from "
            "%s%s%s%s%s); accepted: at least 2 (one to train on, one to validate)",
            L, (long long)w->E, flags[0] ? "terminals, " : "", flags[1] ? "timeouts, " : "",
            flags[2] ? "dones, " : "", w->next ? "next_obs[i] != obs[i+1], " : "",
            w->next ? "the last row" : "the last row; without next_obs an episode's last row "
                                       "is its final state only");
        wm_episodes_close(w);
        return s;
    }
    return MXP_OK;
}

mxp_status wm_episodes_open(const mxp_dataset *d, wm_episodes *w, mxp_error *err) {
    memset(w, 0, sizeof *w);
    const mxp_array *a[R_COUNT];
    TRY(find_roles(d, a, err));
    bool flat_only = a[R_NEXT] || a[R_TERM] || a[R_TIMEOUT] || a[R_DONE];
    bool alias = a[R_OBS] && strcmp(a[R_OBS]->name, "obs") != 0;
    bool ranks = a[R_OBS] && a[R_OBS]->ndim != 3 && a[R_REW] && a[R_REW]->ndim == 1;
    /* terminals/timeouts [E, T] beside obs [E, T+1, S] and rewards [E, T]:
     * the episode layout with flags. rewards [E, 1] without lengths stays
     * flat (rewards [N, 1], obs [N, 2, S]) as it always was */
    bool ep_flags = (a[R_TERM] || a[R_TIMEOUT]) && a[R_OBS] && !alias && a[R_OBS]->ndim == 3 &&
                    a[R_REW] && a[R_REW]->ndim == 2 && (a[R_LEN] || a[R_REW]->shape[1] != 1);
    if (ep_flags) {
        if (a[R_NEXT] || a[R_DONE])
            return mxp_error_set(
                err, MXP_ERR_FORMAT,
                "%s: array '%s' belongs to flat transitions, but obs %s and rewards [E, T] are "
                "the episode layout; accepted: in the episode layout obs, actions, rewards, "
                "lengths, terminals (or terminations) and timeouts (or truncations) [E, T] "
                "(docs/data.md)",
                mxp_dataset_label(d), (a[R_NEXT] ? a[R_NEXT] : a[R_DONE])->name,
                "[E, T+1, S]");
    } else if (a[R_LEN] && (flat_only || alias)) {
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array 'lengths' belongs to the episode layout (obs [E, T+1, "
                             "S]); flat transitions mark episode ends with terminals, timeouts "
                             "or dones instead; accepted: one layout (docs/data.md)",
                             mxp_dataset_label(d));
    }
    if (!ep_flags && !a[R_LEN] && (flat_only || alias || ranks)) return open_flat(d, a, w, err);
    mxp_dataset_layout lay;
    TRY(ds_check_episodes(d, &lay, err));
    for (int r = R_TERM; r <= R_TIMEOUT; r++)
        if (a[r])
            TRY(wm_check_episode_flag(d, a[r], a[R_LEN], lay.episodes, lay.max_steps, err));
    *w = (wm_episodes){.flat = false, .obs = a[R_OBS], .act = a[R_ACT], .rew = a[R_REW],
                       .len = a[R_LEN], .S = lay.state_dim, .A = lay.action_dim,
                       .E = lay.episodes, .T = lay.max_steps, .transitions = lay.transitions,
                       .rows = lay.episodes * lay.max_steps, .term = a[R_TERM],
                       .timeout = a[R_TIMEOUT]};
    return MXP_OK;
}

void wm_episodes_close(wm_episodes *w) {
    mxp_free(w->start);
    mxp_free(w->count);
    w->start = w->count = NULL;
}

int64_t wm_episode_len(const wm_episodes *w, int64_t e) {
    if (w->flat) return w->count[e];
    return w->len ? mxp_array_get_i64(w->len, e) : w->T;
}

void wm_episode_rows(const wm_episodes *w, int64_t e0, int64_t e1, float *x, float *y) {
    const int64_t S = w->S, A = w->A, T = w->T;
    int64_t r = 0;
    for (int64_t e = e0; e < e1; e++) {
        const int64_t n = wm_episode_len(w, e);
        for (int64_t t = 0; t < n; t++, r++) {
            float *xr = x + r * (S + A), *yr = y + r * (S + 1);
            /* element offsets of this transition's state, next state, action, reward */
            int64_t o0, o1, oa, orw;
            const mxp_array *nx = w->obs;
            if (w->flat) {
                int64_t i = w->start[e] + t;
                o0 = i * S;
                o1 = w->next ? i * S : (i + 1) * S;
                if (w->next) nx = w->next;
                oa = i * A;
                orw = i;
            } else {
                o0 = (e * (T + 1) + t) * S;
                o1 = o0 + S;
                oa = (e * T + t) * A;
                orw = e * T + t;
            }
            for (int64_t j = 0; j < S; j++) {
                double v0 = mxp_array_get_f64(w->obs, o0 + j);
                double v1 = mxp_array_get_f64(nx, o1 + j);
                xr[j] = (float)v0;
                yr[j] = (float)(v1 - v0);
            }
            for (int64_t j = 0; j < A; j++) xr[S + j] = (float)mxp_array_get_f64(w->act, oa + j);
            yr[S] = (float)mxp_array_get_f64(w->rew, orw);
        }
    }
}

mxp_status wm_episodes_check_terminals(const wm_episodes *w, const char *label, mxp_error *err) {
    if (w->term || (w->flat && w->done && w->timeout)) return MXP_OK;
    const char *what =
        !w->flat && w->timeout ? "the episode layout (obs [E, T+1, S]) has timeouts (time "
                                 "limits) but no terminals"
        : !w->flat             ? "the episode layout (obs [E, T+1, S]) records no terminal flags"
        : w->done              ? "it has dones without timeouts, and a done may be a time limit"
        : w->timeout           ? "it has timeouts (time limits) but no terminals"
                               : "it has no terminals, dones or timeouts";
    return mxp_error_set(err, MXP_ERR_FORMAT,
                         "%s: model.termination=true needs each transition's true termination "
                         "flag, and %s; accepted: flat transitions with terminals (or "
                         "terminations), or with dones and timeouts (terminal = done and not "
                         "timeout), or the episode layout with terminals (or terminations) "
                         "[E, T] (docs/world_models.md)",
                         label, what);
}

/* Flat row i's true-termination flag (wm_episodes_check_terminals' rule). */
static float term_flag(const wm_episodes *w, int64_t i) {
    if (w->term) return mxp_array_get_f64(w->term, i) != 0.0 ? 1.0f : 0.0f;
    return mxp_array_get_f64(w->done, i) != 0.0 && mxp_array_get_f64(w->timeout, i) == 0.0
               ? 1.0f
               : 0.0f;
}

void wm_episode_terminals(const wm_episodes *w, int64_t e0, int64_t e1, float *t, int64_t ts) {
    int64_t r = 0;
    if (!w->flat) { /* terminals [E, T]: transition (e, k)'s own flag */
        for (int64_t e = e0; e < e1; e++)
            for (int64_t k = 0, n = wm_episode_len(w, e); k < n; k++, r++)
                t[r * ts] = mxp_array_get_f64(w->term, e * w->T + k) != 0.0 ? 1.0f : 0.0f;
        return;
    }
    for (int64_t e = e0; e < e1; e++) {
        const int64_t n = wm_episode_len(w, e);
        for (int64_t k = 0; k < n; k++, r++) {
            const int64_t i = w->start[e] + k;
            /* without next_obs transition i leads to row i + 1, the final
             * state when it is the episode's last transition */
            t[r * ts] = w->next ? term_flag(w, i) : (k == n - 1 ? term_flag(w, i + 1) : 0.0f);
        }
    }
}
