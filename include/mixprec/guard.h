/* mixprec/guard.h: numerical safety built in. What seeds/003 (debugging
 * guide), seeds/004 (precision-safety policy) and seeds/000 (rollback
 * runbook) ask people to do by hand, done by the engine:
 *
 *   - it drives nn's per-layer monitor (model.h: largest |activation| and
 *     |gradient| against the storage format's maximum, fraction of values
 *     below its smallest normal, NaN/Inf provenance, opt-in anomaly mode)
 *     and fault injection (model.h: NaN/Inf/a value into a layer's forward
 *     output or gradient at chosen steps, or a weight scale);
 *   - guard rules over sliding windows with actions alert | fallback |
 *     rollback | stop, each firing an event with rule, severity (P0/P1/P2
 *     as in the runbook), values and the action taken;
 *   - FP32 canary: every K steps the loss of a fixed probe batch computed in
 *     FP32 from the master weights beside the working precision;
 *   - precision support (what runs natively on this CPU), walking amp's
 *     fallback chain (mxp_precision_fallback_next) past modes the CPU
 *     cannot run, and the preflight advisor behind
 *     `training.precision: auto` and `mixprec doctor`;
 *   - operator control: SIGUSR1 (or mxp_guard_request_fp32) switches a
 *     running job to FP32 at the next step boundary.
 *
 * Steps are counted by the guard's ATTEMPT counter: every trainer step
 * call, 1-based, never rewound by a rollback (fault steps use it too, so a
 * rolled-back run does not replay its faults).
 */
#ifndef MIXPREC_GUARD_H
#define MIXPREC_GUARD_H

#include <mixprec/train.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The per-layer monitor and fault injection the guard drives are nn's
 * (model.h: mxp_monitor_*, mxp_fault_config, mxp_model_set_fault). */

/* ==== precision support and fallback chain =============================== */

typedef enum mxp_support {
    MXP_SUPPORT_EMULATED, /* software conversion, FP32 arithmetic */
    MXP_SUPPORT_CONVERT,  /* hardware conversion (F16C / AVX-512), FP32 arithmetic */
    MXP_SUPPORT_NATIVE,   /* hardware arithmetic in the format (FP32 FMA,
                             AVX512_BF16 dot products, AVX512_FP16) */
    MXP_SUPPORT_COUNT
} mxp_support;

MXP_API const char *mxp_support_name(mxp_support s);
/* How precision p runs on a CPU with features f (NULL: this CPU). fp8 is
 * always emulated; a mode's level is that of its low-precision dtype. */
MXP_API mxp_support mxp_precision_support(mxp_precision p, const mxp_cpu_features *f,
                                          const char **why);
/* The next precision after p in the fallback chain whose support is at
 * least CONVERT (or any, when allow_emulated); p itself when there is none
 * (fp32). Chains: fp8 -> mixed_fp16 -> mixed_bf16 -> fp32;
 * fp16 -> bf16 -> fp32; bf16 -> fp32. */
MXP_API mxp_precision mxp_precision_fallback(mxp_precision p, const mxp_cpu_features *f,
                                             bool allow_emulated);

/* ==== guard rules, events ================================================ */

typedef enum mxp_guard_rule {
    MXP_RULE_NONFINITE_LOSS,         /* consecutive non-finite losses >= 10 */
    MXP_RULE_OVERFLOW_RATE_HIGH,     /* skipped-step rate over window > 30% */
    MXP_RULE_OVERFLOW_RATE,          /* skipped-step rate over window >= 10% */
    MXP_RULE_CANARY_DIVERGENCE_HIGH, /* |loss - loss_fp32| / loss_fp32 > 20% */
    MXP_RULE_CANARY_DIVERGENCE,      /* ... > 5% */
    MXP_RULE_ZERO_GRAD,              /* zero-gradient fraction > 5% */
    MXP_RULE_GRAD_NEAR_OVERFLOW,     /* near-overflow gradient fraction > 1% */
    MXP_RULE_GRAD_NORM_GROWTH,       /* grad norm growth over window > 10x */
    MXP_RULE_LOSS_SCALE_LOW,         /* loss scale < 1024 */
    MXP_RULE_HEADROOM,               /* format max / largest |activation| < 8 */
    MXP_RULE_UNDERFLOW,              /* values below the smallest normal > 5% */
    MXP_RULE_COUNT
} mxp_guard_rule;

typedef enum mxp_severity {
    MXP_SEV_P0, /* critical: NaN/Inf losses consistently */
    MXP_SEV_P1, /* high: overflow rate > 30%, divergence > 20% */
    MXP_SEV_P2, /* medium: overflow rate 10-30%, early warnings */
    MXP_SEV_COUNT
} mxp_severity;

/* How a rule compares its value with its threshold. */
typedef enum mxp_rule_cmp {
    MXP_CMP_GT, /* fires when value > threshold */
    MXP_CMP_GE, /* fires when value >= threshold */
    MXP_CMP_LT, /* fires when value < threshold */
    MXP_CMP_COUNT
} mxp_rule_cmp;

/* Action sets are bit masks; every firing is at least an alert (an event
 * and a log line). The config names: off (0), alert, fallback, rollback,
 * fallback+rollback, stop. */
enum {
    MXP_ACT_ALERT = 1u,
    MXP_ACT_FALLBACK = 2u,
    MXP_ACT_ROLLBACK = 4u,
    MXP_ACT_STOP = 8u,
};

typedef struct mxp_guard_rule_config {
    double threshold;
    int64_t window; /* samples aggregated (steps; canary rules: canary runs;
                       underflow: full scans); a rule is evaluated only once
                       its window is full. nonfinite_loss: unused. */
    unsigned action; /* MXP_ACT_* mask; 0 switches the rule off */
} mxp_guard_rule_config;

/* How a rule turns its window of samples into one value. */
typedef enum mxp_rule_agg {
    MXP_AGG_STREAK, /* consecutive samples (nonfinite_loss) */
    MXP_AGG_MEAN,   /* mean over the window */
    MXP_AGG_MIN,    /* smallest sample in the window */
    MXP_AGG_GROWTH, /* newest / oldest of window+1 samples */
    MXP_AGG_COUNT
} mxp_rule_agg;

typedef struct mxp_guard_rule_info {
    const char *name;  /* config name: guard.<name>.{threshold,window,action} */
    mxp_severity severity;
    mxp_rule_cmp cmp;
    mxp_rule_agg agg;
    const char *what;  /* what the value is */
} mxp_guard_rule_info;

MXP_API const mxp_guard_rule_info *mxp_guard_rule_get(mxp_guard_rule r);
MXP_API const char *mxp_guard_rule_name(mxp_guard_rule r);
MXP_API const char *mxp_severity_name(mxp_severity s); /* "P0", "P1", "P2" */
/* "off", "alert", "fallback", "rollback", "stop", "fallback+rollback", ... */
MXP_API void mxp_guard_action_text(unsigned action, char *buf, size_t n);
/* Does `value` cross the rule's threshold (comparison of the rule)? */
MXP_API bool mxp_guard_rule_crossed(mxp_guard_rule r, double value, double threshold);

typedef struct mxp_guard_config {
    bool enabled;               /* guard.enabled (true) */
    mxp_guard_rule_config rules[MXP_RULE_COUNT];
    int64_t canary_every;       /* guard.canary.every_steps: K, 0 = off (100) */
    int64_t canary_batch;       /* guard.canary.batch_size: probe rows (64) */
    double canary_loss_floor;   /* guard.canary.loss_floor: the divergence is relative
                                   to max(loss_fp32, this x the probe's best
                                   constant-prediction loss), 0..1 (1e-3) */
    int64_t headroom_every;     /* guard.headroom.every_steps: full scans (10) */
    bool anomaly_mode;          /* guard.anomaly_mode (false) */
    bool allow_emulated;        /* guard.fallback.allow_emulated (false) */
    int64_t retry_after;        /* guard.fallback.retry_after: healthy steps
                                   before retrying the faster precision, 0 = never */
    int64_t snapshot_every;     /* guard.rollback.snapshot_every (100) */
    int64_t max_rollbacks;      /* guard.rollback.max (5) */
    int64_t preflight_batches;  /* guard.preflight.batches (8) */
    mxp_fault_config fault;     /* fault.* */
} mxp_guard_config;

/* The defaults of docs/safety.md "Guard rules" (see the rule enum). */
MXP_API mxp_guard_config mxp_guard_config_default(void);
MXP_API mxp_status mxp_guard_config_validate(const mxp_guard_config *c, mxp_error *err);

typedef enum mxp_guard_event_kind {
    MXP_EVENT_RULE,        /* a rule fired */
    MXP_EVENT_OPERATOR,    /* operator request (SIGUSR1 / API): switch to fp32 */
    MXP_EVENT_RETRY,       /* retry of the faster precision after a fallback */
    MXP_EVENT_SCALER,      /* the loss scaler's at-min policy changed precision */
    MXP_EVENT_KIND_COUNT
} mxp_guard_event_kind;

/* "rule", "operator", "retry", "scaler" */
MXP_API const char *mxp_guard_event_kind_name(mxp_guard_event_kind k);

typedef struct mxp_guard_event {
    mxp_guard_event_kind kind;
    mxp_guard_rule rule;       /* valid for MXP_EVENT_RULE */
    mxp_severity severity;
    int64_t step;              /* attempt step */
    double value, threshold;
    int64_t window;
    unsigned action;           /* configured */
    unsigned taken;            /* done: ALERT always; FALLBACK/ROLLBACK/STOP when done */
    mxp_precision from, to;    /* precision before and after */
    int64_t rollback_to;       /* attempt step of the restored in-memory state;
                                  -1: no rollback, or one to a disk checkpoint */
    mxp_nonfinite_site site;   /* provenance (nonfinite rules), found=false else */
    char detail[512];          /* one line, human-readable */
} mxp_guard_event;

typedef void (*mxp_guard_event_fn)(void *user, const mxp_guard_event *ev);

/* ==== the guard ========================================================== */

/* Positions are train.h's mxp_data_position: where the workload is in its
 * data, enough to continue from there (a rollback hands it back). */

/* What the workload loop must do after a guard call. */
typedef struct mxp_guard_decision {
    bool stop;   /* a stop action fired: end the run gracefully */
    bool rewind; /* a rollback restored older state: continue from pos */
    mxp_data_position pos;
    bool precision_changed;
} mxp_guard_decision;

/* Rollback store: the in-memory snapshot by default; a checkpoint store can
 * replace it (one call to mxp_guard_set_rollback_store). */
typedef struct mxp_rollback_store {
    /* Record the trainer's current state as healthy; resumable at pos. */
    mxp_status (*save)(void *user, mxp_trainer *t, const mxp_data_position *pos,
                       int64_t attempt, mxp_error *err);
    /* Restore the newest healthy state into t (any precision mode); fill
     * *pos and *attempt. MXP_ERR_STATE when there is none. */
    mxp_status (*restore)(void *user, mxp_trainer *t, mxp_data_position *pos,
                          int64_t *attempt, mxp_error *err);
    void *user;
} mxp_rollback_store;

typedef struct mxp_guard mxp_guard;

/* A guard for trainer t (borrowed; it must outlive the guard). Attaches a
 * monitor to t's model. probe (may be NULL: no canary) is copied. Applies
 * a scale_weights fault of step 0 at once. */
MXP_API mxp_status mxp_guard_create(const mxp_guard_config *c, mxp_trainer *t,
                                    const mxp_batch *probe, mxp_guard **out, mxp_error *err);
MXP_API void mxp_guard_destroy(mxp_guard *g);
MXP_API void mxp_guard_set_event_callback(mxp_guard *g, mxp_guard_event_fn fn, void *user);
/* NULL restores the built-in in-memory snapshot. */
MXP_API void mxp_guard_set_rollback_store(mxp_guard *g, const mxp_rollback_store *store);

/* Call before each trainer step with the position of that step: without
 * a run around it, the step boundary (the trainer's step controller
 * applies a pending operator signal); reports a signal's switch as an
 * operator event, takes the first healthy snapshot, arms faults and
 * monitor sampling. */
MXP_API mxp_status mxp_guard_before_step(mxp_guard *g, const mxp_data_position *pos,
                                         mxp_guard_decision *d, mxp_error *err);
/* Call after each trainer step with its result and the position the loop
 * continues from: updates windows, runs the canary when due, evaluates the
 * rules, takes actions (a fallback or retry is a request to the step
 * controller; a stop also refuses later trainer steps), snapshots healthy
 * state; without a run around it, the step boundary closes the step. */
MXP_API mxp_status mxp_guard_after_step(mxp_guard *g, const mxp_step_result *res,
                                        const mxp_data_position *next, mxp_guard_decision *d,
                                        mxp_error *err);

/* A resumed run: continue counting step attempts at `attempts` (the
 * checkpoint's), so fault-injection windows and the guard's schedules keep
 * their place and are not re-armed; a scale_weights fault whose step has
 * passed is not applied again (the checkpoint holds its effect). */
MXP_API void mxp_guard_set_attempts(mxp_guard *g, int64_t attempts);

/* Run the canary now: *div gets |loss_work - loss_fp32| / |loss_fp32|. */
MXP_API mxp_status mxp_guard_canary(mxp_guard *g, double *div, double *loss_work, double *loss_fp32,
                                    mxp_error *err);

typedef struct mxp_guard_status {
    int64_t attempts;
    int64_t events;                    /* total events */
    int64_t fired[MXP_RULE_COUNT];     /* firings per rule */
    double value[MXP_RULE_COUNT];      /* last evaluated value (NaN: not yet) */
    int64_t fallbacks, rollbacks, retries, operator_switches;
    mxp_precision initial, current;
    bool stopped;
    double canary_divergence;          /* last (NaN: none yet) */
    double canary_loss, canary_loss_fp32;
    int64_t nonfinite_streak;
    mxp_nonfinite_site first_site;     /* first non-finite value of the run */
    int64_t first_site_step;
    mxp_anomaly_report anomaly;        /* of the last step with a non-finite value */
    int64_t anomaly_step;
    const char *rollback_store;        /* "memory" or the store's name */
} mxp_guard_status;

MXP_API void mxp_guard_get_status(const mxp_guard *g, mxp_guard_status *out);
/* The events so far, oldest first (the last 256 are kept; the status
 * counts all of them). */
MXP_API const mxp_guard_event *mxp_guard_events(const mxp_guard *g, size_t *n);
MXP_API bool mxp_guard_stopped(const mxp_guard *g);
/* The status as one JSON object (for mxp_obs_set_guard_state and the
 * checkpoints' guard state): its length, or -1 when it does not fit in n. */
MXP_API int mxp_guard_status_json(const mxp_guard *g, char *buf, size_t n);
/* The monitor the guard attached (per-layer headroom, anomaly report). */
MXP_API const mxp_monitor *mxp_guard_monitor(const mxp_guard *g);

/* ---- workload glue ------------------------------------------------------
 * For loops that keep an mxp_data_position (train.h), e.g. the run's. */
struct mxp_ckpt_manager;

/* The guard of a workload: created when c->enabled or a fault is configured
 * (with every rule off and no canary when only the fault asks for it);
 * *out stays NULL otherwise. probe: a fixed batch for the canary (copied). */
MXP_API mxp_status mxp_guard_for_workload(const mxp_guard_config *c, mxp_trainer *t,
                                          const mxp_batch *probe, mxp_guard **out, mxp_error *err);
/* before_step / after_step with the workload's data position; after a
 * rollback *p is the restored position; *stop is set by a stop action. */
MXP_API mxp_status mxp_guard_step_begin(mxp_guard *g, const mxp_data_position *p, mxp_error *err);
MXP_API mxp_status mxp_guard_step_end(mxp_guard *g, const mxp_step_result *res,
                                      mxp_data_position *p, bool *stop, mxp_error *err);
/* Use a checkpoint manager as the rollback store beside the in-memory
 * snapshot (NULL: the snapshot alone): a rollback restores the NEWER of the
 * snapshot and the manager's newest healthy, verified checkpoint
 * (mxp_ckpt_manager_rollback), and the guard keeps the manager's health
 * flag current (unhealthy while a P0/P1 rule holds or losses are
 * non-finite), so checkpoints written then are never rollback targets. */
MXP_API void mxp_guard_set_checkpoints(mxp_guard *g, struct mxp_ckpt_manager *m);

/* Operator kill switch while running: ask every guard of the process to
 * switch to FP32 at its next step boundary (a flag its trainer's step
 * controller takes there; a request of the highest priority).
 * Async-signal-safe. */
MXP_API void mxp_guard_request_fp32(void);
/* Install a handler for signo (SIGUSR1) that calls mxp_guard_request_fp32. */
MXP_API mxp_status mxp_guard_install_signal(int signo, mxp_error *err);

/* ==== precision advisor ================================================== */

typedef struct mxp_format_verdict {
    bool evaluated;
    bool safe;
    mxp_support support;
    double act_absmax;     /* largest |activation| seen in FP32 */
    double act_headroom;   /* format max / act_absmax (after per-tensor
                              scaling for fp8) */
    double loss_scale;     /* loss scale assumed for gradients (1: none) */
    double grad_underflow; /* fraction of nonzero activation gradients that
                              underflow in the grad format at that scale */
    double act_underflow;  /* fraction of nonzero activations below the
                              smallest normal of the activation format */
    char reason[240];
} mxp_format_verdict;

typedef struct mxp_preflight_report {
    int n_batches;
    int n_layers;
    float act_absmax[MXP_MODEL_MAX_LAYERS];  /* per layer, FP32 run */
    float grad_absmax[MXP_MODEL_MAX_LAYERS]; /* per layer dx (dw for the first) */
    double max_act, max_grad;
    int max_act_layer;
    mxp_format_verdict verdict[MXP_PRECISION_COUNT]; /* fp8, mixed_fp16, mixed_bf16, fp32 */
    mxp_precision recommended;
    char why[320];
} mxp_preflight_report;

/* Run n batches forward and backward (loss scale 1) in FP32 on a copy of
 * m's parameters (m is untouched), measure headroom, and recommend a format
 * (decision logic in docs/safety.md). margin: headroom margin (8);
 * underflow_max: tolerated underflow fraction (0.05); cpu NULL: this CPU. */
MXP_API mxp_status mxp_guard_preflight(const mxp_model *m, const mxp_batch *batches, int n,
                                       double margin, double underflow_max,
                                       const mxp_cpu_features *cpu, mxp_preflight_report *out,
                                       mxp_error *err);
/* training.precision: auto for an MSE workload: preflight on the first
 * c->preflight_batches batches of B rows of (x [rows, in], y [rows, out]),
 * switch t to the recommendation and log why. */
MXP_API mxp_status mxp_guard_auto_precision(mxp_trainer *t, const mxp_guard_config *c,
                                            const float *x, const float *y, int64_t rows, int64_t B,
                                            mxp_preflight_report *out, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_GUARD_H */
