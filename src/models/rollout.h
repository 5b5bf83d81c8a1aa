/* models/rollout.h: open-loop multi-step prediction error of a world model
 * on held-out episodes (internal; rollout.c, docs/run.md "Open-loop error").
 */
#ifndef MIXPREC_MODELS_ROLLOUT_H
#define MIXPREC_MODELS_ROLLOUT_H

#include <mixprec/model.h>
#include <mixprec/run.h>

/* Held-out episodes as the world-model providers keep them: standardised
 * rows x = [state, action] [n, S + A], y = [state delta, reward] [n, S + 1],
 * episode-major, episode e holding len[e] transitions (len NULL: every
 * episode holds T); raw = z * std + mean per column. */
typedef struct wm_rollout_src {
    const float *x, *y;
    int64_t S, A;
    int64_t n_ep;
    const int64_t *len; /* [n_ep], or NULL */
    int64_t T;          /* transitions per episode when len is NULL */
    const float *x_mean, *x_std; /* [S + A] */
    const float *y_mean, *y_std; /* [S + 1] */
    int64_t y_cols;     /* columns of y: S + 1, or S + 2 with a termination flag last
                           (model.termination; the rollout ignores it); 0: S + 1 */
} wm_rollout_src;

/* out[i] = the open-loop error after mxp_open_loop_horizon(i) steps
 * (rollout.c's file comment defines it), NaN where no episode is that
 * long. Forward passes of m in its current precision, at most max_batch
 * rows each; draws no random numbers and changes nothing in m but its
 * activation buffers. */
mxp_status wm_open_loop_error(mxp_model *m, const wm_rollout_src *src, int64_t max_batch,
                              double out[MXP_OPEN_LOOP_N], mxp_error *err);

#endif /* MIXPREC_MODELS_ROLLOUT_H */
