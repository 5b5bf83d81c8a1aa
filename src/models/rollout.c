/* models/rollout.c: open-loop multi-step prediction error of a world model.
 *
 * Entry point: wm_open_loop_error (models/rollout.h), called by the world
 * model providers' evaluate (world_model.c, user_data.c).
 *
 * Definition (docs/run.md "Open-loop error"): from every start t of every
 * held-out episode, the model is rolled out on its own predictions with
 * the episode's recorded actions: s^_0 = s_t, s^_{i+1} = s^_i + the
 * predicted state delta of the input [s^_i, a_{t+i}]. After k steps (when
 * the episode holds them, t + k <= its length) the error is the squared
 * difference to the recorded s_{t+k}, per state column divided by that
 * column's standard deviation (the input standardisation), averaged over
 * the columns and the starts. k = 1 is the one-step error in state units.
 * The prediction is the model's mean: a Gaussian head's mean columns, an
 * ensemble's average of its elite members' means (mxp_model_elites: all
 * members unless model.elites says otherwise; double sum, rounded to FP32).
 * A termination head's output is ignored: the rollout runs on through
 * a predicted termination (the recorded episodes end at their own).
 * States are kept in FP32 in the data's units, as a user's rollout would;
 * the sums are in double. The model runs in its current precision.
 */
#include "models/rollout.h"

#include <math.h>
#include <string.h>

typedef struct rollout_buf {
    float *s;     /* [B, S] rolled-out states, data units */
    float *xin;   /* [B, S + A] model input rows (active starts, packed) */
    float *pred;  /* [E, B, O] model outputs (E members, O outputs per row) */
    int64_t *row; /* [B] row of each start */
    int64_t *left; /* [B] transitions of its episode from the start on */
} rollout_buf;

/* The recorded state of row r's transition in data units (k == 0: its
 * state; k == 1: its next state, state + delta). */
static float raw_state(const wm_rollout_src *src, int64_t r, int64_t j, bool next) {
    const int64_t in = src->S + src->A, od = src->y_cols ? src->y_cols : src->S + 1;
    float s = src->x[r * in + j] * src->x_std[j] + src->x_mean[j];
    if (next) s += src->y[r * od + j] * src->y_std[j] + src->y_mean[j];
    return s;
}

/* Roll out the n starts in buf (rows and episode remainders filled) and
 * add their errors into se / cnt. */
static mxp_status roll(mxp_model *m, const wm_rollout_src *src, rollout_buf *buf, int64_t n,
                       double *se, int64_t *cnt, mxp_error *err) {
    const int64_t S = src->S, A = src->A, in = S + A;
    const int E = mxp_model_ensemble(m);
    const uint64_t el = mxp_model_elites(m); /* the members averaged: the elites */
    int nE = 0;
    for (int e = 0; e < E; e++) nE += (int)(el >> e & 1u);
    const int64_t O = mxp_model_out_dim(m); /* the mean is columns [0, S] of each member */
    const int kmax = mxp_open_loop_horizon(MXP_OPEN_LOOP_N - 1);
    for (int64_t b = 0; b < n; b++)
        for (int64_t j = 0; j < S; j++) buf->s[b * S + j] = raw_state(src, buf->row[b], j, false);
    for (int i = 0; i < kmax; i++) {
        int64_t na = 0; /* starts whose episode holds step i: packed first */
        for (int64_t b = 0; b < n; b++) {
            if (buf->left[b] <= i) continue;
            float *x = buf->xin + na * in;
            for (int64_t j = 0; j < S; j++)
                x[j] = (buf->s[b * S + j] - src->x_mean[j]) / src->x_std[j];
            memcpy(x + S, src->x + (buf->row[b] + i) * in + S, (size_t)A * sizeof(float));
            na++;
        }
        if (na == 0) break;
        mxp_status st = mxp_model_predict(m, buf->xin, na, buf->pred, err);
        if (st != MXP_OK) return st;
        int64_t q = 0;
        for (int64_t b = 0; b < n; b++) {
            if (buf->left[b] <= i) continue;
            for (int64_t j = 0; j < S; j++) {
                double mu = 0.0;
                for (int e = 0; e < E; e++)
                    if (el >> e & 1u)
                        mu += buf->pred[((size_t)e * (size_t)na + (size_t)q) * (size_t)O +
                                        (size_t)j];
                const float z = (float)(mu / (double)nE); /* one model: the output itself */
                buf->s[b * S + j] += z * src->y_std[j] + src->y_mean[j];
            }
            q++;
        }
        for (int h = 0; h < MXP_OPEN_LOOP_N; h++) {
            if (mxp_open_loop_horizon(h) != i + 1) continue;
            for (int64_t b = 0; b < n; b++) {
                if (buf->left[b] < i + 1) continue;
                const int64_t r = buf->row[b] + i; /* the transition that ends at t + k */
                for (int64_t j = 0; j < S; j++) {
                    double d = ((double)buf->s[b * S + j] - (double)raw_state(src, r, j, true)) /
                               (double)src->x_std[j];
                    se[h] += d * d;
                }
                cnt[h] += S;
            }
        }
    }
    return MXP_OK;
}

mxp_status wm_open_loop_error(mxp_model *m, const wm_rollout_src *src, int64_t max_batch,
                              double out[MXP_OPEN_LOOP_N], mxp_error *err) {
    for (int h = 0; h < MXP_OPEN_LOOP_N; h++) out[h] = NAN;
    if (!m || !src || src->S < 1 || src->A < 0 || src->n_ep < 0 || max_batch < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "open-loop error: no model, or state_dim %lld / action_dim %lld / "
                             "episodes %lld / batch %lld out of range; accepted: >= 1, >= 0, "
                             ">= 0, >= 1",
                             src ? (long long)src->S : -1LL, src ? (long long)src->A : -1LL,
                             src ? (long long)src->n_ep : -1LL, (long long)max_batch);
    const int64_t mb = mxp_model_get_spec(m)->max_batch;
    const int64_t B = max_batch < mb ? max_batch : mb;
    const int64_t S = src->S;
    const int64_t outs = (int64_t)mxp_model_ensemble(m) * mxp_model_out_dim(m);
    const int64_t od = src->y_cols ? src->y_cols : S + 1;
    if (mxp_model_target_dim(m) != od || od < S + 1 || od > S + 2)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "open-loop error: the model predicts %lld targets; accepted: state "
                             "delta and reward (and a termination flag), %lld",
                             (long long)mxp_model_target_dim(m), (long long)od);
    rollout_buf buf = {mxp_calloc((size_t)(B * S), sizeof(float)),
                       mxp_calloc((size_t)(B * (S + src->A) + 1), sizeof(float)),
                       mxp_calloc((size_t)(B * outs), sizeof(float)),
                       mxp_calloc((size_t)B, sizeof(int64_t)), mxp_calloc((size_t)B, sizeof(int64_t))};
    double se[MXP_OPEN_LOOP_N] = {0};
    int64_t cnt[MXP_OPEN_LOOP_N] = {0};
    mxp_status st = MXP_OK;
    if (!buf.s || !buf.xin || !buf.pred || !buf.row || !buf.left)
        st = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "open-loop error: buffers for %lld rows",
                           (long long)B);
    int64_t n = 0, r0 = 0;
    for (int64_t e = 0; st == MXP_OK && e < src->n_ep; e++) {
        const int64_t len = src->len ? src->len[e] : src->T;
        for (int64_t t = 0; st == MXP_OK && t < len; t++) {
            buf.row[n] = r0 + t;
            buf.left[n] = len - t;
            if (++n == B) {
                st = roll(m, src, &buf, n, se, cnt, err);
                n = 0;
            }
        }
        r0 += len;
    }
    if (st == MXP_OK && n > 0) st = roll(m, src, &buf, n, se, cnt, err);
    mxp_free(buf.s);
    mxp_free(buf.xin);
    mxp_free(buf.pred);
    mxp_free(buf.row);
    mxp_free(buf.left);
    if (st != MXP_OK) return st;
    for (int h = 0; h < MXP_OPEN_LOOP_N; h++)
        if (cnt[h] > 0) out[h] = se[h] / (double)cnt[h];
    return MXP_OK;
}
