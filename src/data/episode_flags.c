/* data/episode_flags.c: termination and time-limit flags in the episode
 * layout (obs [E, T+1, S], actions [E, T, A], rewards [E, T], optional
 * lengths [E]), docs/data.md "Flags in the episode layout".
 *
 * Entry point: wm_check_episode_flag (transitions.h; transitions.c calls it
 * for terminals/terminations and timeouts/truncations [E, T]).
 *
 * An episode of this layout ends at its length (lengths[e], or T), never
 * earlier: the rows after a termination would belong to no episode. So a
 * flag may be set only at an episode's last transition t = lengths[e] - 1;
 * anywhere else (earlier in the episode, or in the padding past its length,
 * where a flag is most likely an off-by-one on the state index) the file
 * is refused by name with the fix. A flag is 0 or 1 of any dtype (bool,
 * int, float), as in the flat layout.
 */
#include "data/dataset_internal.h"
#include "data/transitions.h"

#include <stdio.h>

mxp_status wm_check_episode_flag(const mxp_dataset *d, const mxp_array *f, const mxp_array *len,
                                 int64_t E, int64_t T, mxp_error *err) {
    const char *L = mxp_dataset_label(d);
    char sb[128];
    if (f->ndim != 2 || f->shape[0] != E || f->shape[1] != T)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: array '%s' has shape %s; accepted: [E, T] = [%lld, %lld] as "
                             "rewards in the episode layout (obs [E, T+1, S]): one flag per "
                             "transition, bool, int or float 0/1",
                             L, f->name, ds_shape_str(f, sb, sizeof sb), (long long)E,
                             (long long)T);
    for (int64_t i = 0; i < f->numel; i++) {
        double v = mxp_array_get_f64(f, i);
        if (v != 0.0 && v != 1.0)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: %s[%lld, %lld] = %g; accepted: 0 or 1 (false or true; "
                                 "bool, int or float flags)",
                                 L, f->name, (long long)(i / T), (long long)(i % T), v);
    }
    for (int64_t e = 0; e < E; e++) {
        const int64_t n = len ? mxp_array_get_i64(len, e) : T;
        for (int64_t t = 0; t < T; t++) {
            if (t == n - 1 || mxp_array_get_f64(f, e * T + t) == 0.0) continue;
            if (t < n - 1)
                return mxp_error_set(
                    err, MXP_ERR_FORMAT,
                    "%s: %s[%lld, %lld] = 1 but episode %lld has %lld transitions (%s), so its "
                    "last is t = %lld; accepted: a flag only at an episode's last transition, "
                    "since an episode of the episode layout ends at its length (cut the "
                    "episode at the flag: lengths[%lld] = %lld, the rest a new episode)",
                    L, f->name, (long long)e, (long long)t, (long long)e, (long long)n,
                    len ? "lengths" : "T, no lengths", (long long)(n - 1), (long long)e,
                    (long long)(t + 1));
            return mxp_error_set(
                err, MXP_ERR_FORMAT,
                "%s: %s[%lld, %lld] = 1 lies in the padding past episode %lld's %lld "
                "transitions (lengths[%lld] = %lld); accepted: a flag only at an episode's "
                "last transition t = lengths[e] - 1 (here %lld; flags index transitions, not "
                "states)",
                L, f->name, (long long)e, (long long)t, (long long)e, (long long)n, (long long)e,
                (long long)n, (long long)(n - 1));
        }
    }
    return MXP_OK;
}
