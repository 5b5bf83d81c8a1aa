/* guard/guard_internal.h: the guard object and the helpers shared by the
 * files of src/guard (not a public header).
 *   rules.c    rule table, defaults, validation, sliding windows
 *   support.c  precision support levels and the fallback chain
 *   guard.c    the guard: before/after step, actions, events, status
 *   snapshot.c the in-memory rollback store
 *   canary.c   the FP32 canary
 *   advisor.c  preflight and precision: auto
 *   signal.c   operator requests (SIGUSR1, API) to the step controller
 */
#ifndef MIXPREC_GUARD_INTERNAL_H
#define MIXPREC_GUARD_INTERNAL_H

#include <mixprec/guard.h>

#include "train/step_ctl.h"

/* ---- sliding windows (rules.c) ------------------------------------------ */

typedef struct guard_ring {
    double *v;     /* [cap] */
    int64_t cap;   /* window (+ span for GROWTH) */
    int64_t span;  /* GROWTH: samples per median block (guard_growth_span) */
    int64_t n;     /* samples held, <= cap */
    int64_t head;  /* next write position */
    double sum;    /* of the held samples (MEAN) */
} guard_ring;

/* GROWTH rules compare the median of the newest `span` samples with the
 * median of the `span` samples one window earlier: window/10, 1..32. */
#define GUARD_GROWTH_SPAN_MAX 32
int64_t guard_growth_span(int64_t window);
mxp_status guard_ring_init(guard_ring *r, int64_t cap, mxp_error *err);
void guard_ring_free(guard_ring *r);
void guard_ring_clear(guard_ring *r);
void guard_ring_push(guard_ring *r, double x);
/* The aggregate of a full window (NaN while it is not full). */
double guard_ring_value(const guard_ring *r, mxp_rule_agg agg);

/* ---- the in-memory snapshot (snapshot.c) --------------------------------- */

typedef struct guard_snapshot {
    bool valid;
    size_t n;                 /* parameters */
    float *params;            /* FP32 [n]: master, or the widened work weights */
    float *m, *v;             /* optimizer moments [n] (v NULL for SGD) */
    mxp_trainer_state tstate; /* counters, sr position, lr */
    mxp_precision mode;       /* precision at save time */
    mxp_scaler_state scaler;
    int n_groups;             /* per-layer loss scaling: group scaler states */
    mxp_scaler_state groups[MXP_MODEL_MAX_LAYERS];
    float *fp8;               /* FP8 scaling state or NULL */
    size_t fp8_n;
    int64_t fp8_steps;
    mxp_data_position pos;
    int64_t attempt;
} guard_snapshot;

/* The built-in store (save/restore callbacks over a guard_snapshot). */
mxp_status guard_snapshot_save(void *user, mxp_trainer *t, const mxp_data_position *pos,
                               int64_t attempt, mxp_error *err);
mxp_status guard_snapshot_restore(void *user, mxp_trainer *t, mxp_data_position *pos,
                                  int64_t *attempt, mxp_error *err);
void guard_snapshot_free(guard_snapshot *s);

/* ---- canary (canary.c) ---------------------------------------------------- */

typedef struct guard_canary {
    mxp_model *fp32;   /* same spec, FP32 policy, max_batch = probe rows */
    float *x, *y;      /* probe copies */
    int32_t *labels;
    mxp_batch probe;
    double floor;      /* smallest loss the divergence is relative to */
} guard_canary;

mxp_status guard_canary_init(guard_canary *c, const mxp_model *m, const mxp_batch *probe,
                             double loss_floor, mxp_error *err);
void guard_canary_free(guard_canary *c);
/* Loss of the probe in the working precision (m) and in FP32 from m's
 * parameters; *div = |lw - l32| / max(|l32|, floor) (inf when lw is not
 * finite); floor = loss_floor x the probe's best constant-prediction loss. */
mxp_status guard_canary_run(guard_canary *c, mxp_model *m, double *div, double *lw,
                            double *l32, mxp_error *err);

/* training.precision=auto by measurement (advisor_time.c): the mode and
 * FP16-accumulate interval chosen, and what was measured. */
typedef struct guard_auto_choice {
    mxp_precision mode;
    int fp16_accum_k;  /* > 0: mixed_fp16 with the FP16 fast-accumulate GEMM */
    char why[200];
    char times[400];   /* each candidate's median step time, or why not timed */
    char refused[160]; /* a candidate timed and then refused, and why ("" none) */
} guard_auto_choice;

/* Time the safe candidates of rep (preflight verdicts of m) on batch b with
 * m's current weights and choose (file comment of advisor_time.c);
 * fp16_accum_k: the promotion interval of the FP16-accumulate candidate. */
mxp_status guard_auto_by_time(const mxp_model *m, const mxp_batch *b,
                              const mxp_preflight_report *rep, int fp16_accum_k,
                              guard_auto_choice *out, mxp_error *err);

/* ---- operator requests (signal.c) --------------------------------------- */


/* ---- the guard (guard.c) ------------------------------------------------- */

#define GUARD_EVENTS_KEPT 256
#define GUARD_CHAIN_MAX 8

struct mxp_guard {
    mxp_guard_config cfg;
    mxp_trainer *t;
    mxp_model *model;
    mxp_monitor *mon;
    const mxp_cpu_features *cpu;

    guard_ring ring[MXP_RULE_COUNT];
    bool latched[MXP_RULE_COUNT];
    double value[MXP_RULE_COUNT];
    int64_t fired[MXP_RULE_COUNT];

    int64_t attempts;
    bool sampled;          /* this step runs a full monitor scan */
    bool weights_scaled;   /* scale_weights fault applied */
    int64_t nonfinite_streak;
    mxp_nonfinite_site streak_site;
    int64_t streak_site_step;
    mxp_nonfinite_site first_site;
    int64_t first_site_step;
    mxp_anomaly_report anomaly;
    int64_t anomaly_step;

    guard_canary canary;
    bool have_canary;
    double canary_div, canary_lw, canary_l32;

    mxp_guard_event *events; /* ring of GUARD_EVENTS_KEPT */
    int64_t n_events;        /* total */
    mxp_guard_event *events_linear; /* scratch for mxp_guard_events */
    mxp_guard_event_fn cb;
    void *cb_user;

    mxp_rollback_store store;
    bool store_custom;
    guard_snapshot snap;
    bool have_healthy;       /* something was saved to the store */
    bool unusable_logged;    /* a non-finite state was refused as a rollback point (logged) */
    int64_t last_save_attempt;
    int64_t rollbacks, rollbacks_since_save;

    mxp_precision initial;
    mxp_precision chain[GUARD_CHAIN_MAX]; /* precisions fallen back from */
    int chain_n;
    bool operator_fp32;
    int64_t seen_signals; /* the step controller's signal decisions seen */
    int64_t healthy_streak;
    int64_t retry_wait;      /* healthy steps before the next retry */
    int64_t last_retry_attempt;
    int64_t fallbacks, retries, operator_switches;
    mxp_precision last_mode; /* to notice the scaler's own fallback */
    bool stopped;
    bool started;                  /* first before_step done (initial precision taken) */
    struct mxp_ckpt_manager *ckpt; /* disk rollback store beside the snapshot, or NULL */
    bool ckpt_healthy;             /* health last told to it */
};

/* Rollback through the configured stores (guard.c uses it; workload.c
 * implements the checkpoint side). */
mxp_status guard_restore(mxp_guard *g, mxp_data_position *pos, int64_t *attempt,
                         mxp_error *err);
/* Tell the checkpoint manager (if any) whether the run is healthy now. */
void guard_tell_health(mxp_guard *g, bool healthy);

#endif
