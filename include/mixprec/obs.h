/* mixprec/obs.h: observability. A metrics registry (Prometheus counters,
 * gauges and histograms with labels), a training observer that keeps the
 * run's status, step history and events, an SQLite run store with a JSONL
 * event log, and an embedded HTTP server (libmicrohttpd) exposing
 *   GET  /metrics                   Prometheus text format 0.0.4
 *   GET  /api/training/status       run id, state, precision, step, last event
 *   GET  /api/training/stats        the trainer's stats API plus guard state
 *   GET  /api/training/events       recent events
 *   GET  /api/metrics/export        the step history, paged (offset, limit)
 *   POST /api/training/precision    {"mode":"fp32"}: bearer token required;
 *                                   applied at the next step boundary
 *   GET  /                          the dashboard (self-contained page)
 *
 * Threads: the training thread records steps and events; any other thread
 * (the HTTP server's) may read. Metric updates are lock-free atomics; the
 * observer's history and status take one short mutex per step. Readers copy
 * out under the mutex and format afterwards, so no request stalls training.
 *
 * See docs/observability.md for the metric list, the SQLite schema and the
 * durability contract of the store.
 */
#ifndef MIXPREC_OBS_H
#define MIXPREC_OBS_H

#include <mixprec/config.h>
#include <mixprec/train.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- metrics registry ---------------------------------------------------- */

typedef enum mxp_metric_type {
    MXP_METRIC_COUNTER,   /* monotonic; name ends in _total */
    MXP_METRIC_GAUGE,
    MXP_METRIC_HISTOGRAM, /* cumulative buckets, _sum and _count */
    MXP_METRIC_TYPE_COUNT
} mxp_metric_type;

/* "counter", "gauge", "histogram" (the Prometheus TYPE words). */
MXP_API const char *mxp_metric_type_name(mxp_metric_type t);

#define MXP_METRICS_MAX_FAMILIES 128 /* metric names per registry */
#define MXP_METRICS_MAX_SERIES 64    /* label combinations per name */
#define MXP_METRICS_MAX_LABELS 4     /* label names per metric */
#define MXP_METRICS_MAX_BUCKETS 32   /* finite histogram bounds (+Inf implicit) */

typedef struct mxp_metrics mxp_metrics;
/* One series: a metric name plus one set of label values. */
typedef struct mxp_metric mxp_metric;

MXP_API mxp_status mxp_metrics_create(mxp_metrics **out, mxp_error *err);
MXP_API void mxp_metrics_destroy(mxp_metrics *r);

/* Register a metric family. name matches [a-zA-Z_:][a-zA-Z0-9_:]*; labels
 * is a comma-separated list of label names ([a-zA-Z_][a-zA-Z0-9_]*, not
 * starting with "__", not "le" for histograms) or NULL/"" for none; buckets
 * (histograms only) are strictly increasing finite upper bounds, +Inf is
 * implicit. A metric without labels gets its single series at once (so it
 * is exported as 0 before its first update). Registering an existing name
 * again with the same type and labels is a no-op; anything else is
 * MXP_ERR_STATE. Thread-safe. */
MXP_API mxp_status mxp_metrics_register(mxp_metrics *r, mxp_metric_type type, const char *name,
                                        const char *help, const char *labels, const double *buckets,
                                        int n_buckets, mxp_error *err);

/* The series of `name` with these label values (one per label name, in
 * order; NULL when the metric has no labels), created on first use, at most
 * MXP_METRICS_MAX_SERIES per name. The pointer stays valid until the
 * registry is destroyed: look it up once, update it in the hot loop. */
MXP_API mxp_status mxp_metrics_series(mxp_metrics *r, const char *name,
                                      const char *const *label_values, mxp_metric **out,
                                      mxp_error *err);

/* Lock-free updates, from any thread. Counters ignore negative and NaN
 * increments; set() applies to gauges only, observe() to histograms only
 * (other calls are ignored). */
MXP_API void mxp_metric_add(mxp_metric *m, double v);
MXP_API void mxp_metric_set(mxp_metric *m, double v);
MXP_API void mxp_metric_observe(mxp_metric *m, double v);
/* Current value (counter, gauge) or sum (histogram); histogram count. */
MXP_API double mxp_metric_value(const mxp_metric *m);
MXP_API uint64_t mxp_metric_count(const mxp_metric *m);

/* By-name conveniences for code that has no series pointer (guard rules,
 * rollbacks). labels is "name=value,name=value" text in the metric's label
 * order (values may not contain ',' or '='), NULL/"" for none. */
MXP_API mxp_status mxp_metrics_inc(mxp_metrics *r, const char *name, const char *labels, double v,
                                   mxp_error *err);
MXP_API mxp_status mxp_metrics_set(mxp_metrics *r, const char *name, const char *labels, double v,
                                   mxp_error *err);
MXP_API mxp_status mxp_metrics_observe(mxp_metrics *r, const char *name, const char *labels,
                                       double v, mxp_error *err);
MXP_API mxp_status mxp_metrics_get(mxp_metrics *r, const char *name, const char *labels,
                                   double *value, mxp_error *err);

/* The whole registry in Prometheus text exposition format 0.0.4 (HELP and
 * TYPE lines, families in registration order). *text is NUL-terminated,
 * allocated with mxp_calloc: release it with mxp_free. */
MXP_API mxp_status mxp_metrics_render(mxp_metrics *r, char **text, size_t *len, mxp_error *err);

/* Register the mixprec_* training metrics (docs/observability.md). */
MXP_API mxp_status mxp_metrics_register_training(mxp_metrics *r, mxp_error *err);

/* ---- training observer --------------------------------------------------- */

typedef enum mxp_run_state {
    MXP_RUN_RUNNING,
    MXP_RUN_FINISHED,
    MXP_RUN_FAILED,
    MXP_RUN_STATE_COUNT
} mxp_run_state;

MXP_API const char *mxp_run_state_name(mxp_run_state s); /* "running", "finished", "failed" */

typedef struct mxp_obs mxp_obs;

/* Create an observer for one run: a registry with the training metrics,
 * the in-memory history (settings->history_max rows, oldest dropped first)
 * and, when settings->store_enabled and run_dir is set, the run store:
 * run_dir/<store_db> (SQLite, WAL) and run_dir/<store_events> (JSONL).
 * run_dir must exist. run_id NULL: generated (UTC time + pid). The HTTP
 * server is not started here (mxp_obs_serve). */
MXP_API mxp_status mxp_obs_create(const mxp_obs_settings *settings, const char *run_dir,
                                  const char *run_id, mxp_obs **out, mxp_error *err);
/* Stops the server, flushes and closes the store. */
MXP_API void mxp_obs_destroy(mxp_obs *o);

MXP_API mxp_metrics *mxp_obs_metrics(mxp_obs *o);
MXP_API const char *mxp_obs_run_id(const mxp_obs *o);

/* Start of the run: borrows the trainer (training thread only) to read its
 * stats, model memory and precision; total_steps for progress;
 * samples_per_step = batch * accumulation; config_json (may be NULL) is
 * stored in the runs table. Writes the runs row and a run_start event. */
MXP_API mxp_status mxp_obs_run_begin(mxp_obs *o, mxp_trainer *trainer, int64_t total_steps,
                                     int64_t samples_per_step, const char *config_json,
                                     mxp_error *err);

/* Update the planned step count (progress ratio, status). */
MXP_API void mxp_obs_set_total_steps(mxp_obs *o, int64_t total_steps);
/* The run's position in its plan (1-based step of total_steps; a rollback
 * rewinds it): /api/training/status "step" and "progress" and the
 * mixprec_progress_ratio gauge; without it they use the training
 * steps, which count replayed steps too and can pass total_steps. */
MXP_API void mxp_obs_set_run_step(mxp_obs *o, int64_t step);

/* One finished optimizer step (training thread): updates the metrics,
 * appends a history row, hands a row to the store's writer thread
 * (committed every flush_steps steps or flush_seconds seconds; an error of
 * the writer is reported once by a later call). A precision change since
 * the previous step that was not announced with mxp_obs_precision_changed
 * is recorded as a fallback. duration_s is the step's wall time. */
MXP_API mxp_status mxp_obs_record_step(mxp_obs *o, int64_t epoch, const mxp_step_result *res,
                                       double duration_s, mxp_error *err);

/* Record an event: kind (e.g. "guard", "fallback", "rollback",
 * "checkpoint", "precision_change", "run_start", "run_end"), severity
 * ("info", "warning", "P0", "P1", "P2", ...), message, and detail_json (a
 * JSON object text or NULL). step < 0: the current step. Goes to the event
 * ring and, through the writer thread at once, to the events table and
 * the JSONL log. A "guard" event with detail {"rule": R} also counts in
 * mixprec_guard_events_total{rule=R,severity=S}; "rollback" in
 * mixprec_rollbacks_total. Training thread. */
MXP_API mxp_status mxp_obs_event(mxp_obs *o, int64_t step, const char *kind, const char *severity,
                                 const char *message, const char *detail_json, mxp_error *err);

/* Announce a precision switch made at a step boundary by the caller:
 * reason "operator" (control API, signal) or "fallback" (counted in
 * mixprec_precision_fallbacks_total). Updates precision_info and memory. */
MXP_API mxp_status mxp_obs_precision_changed(mxp_obs *o, mxp_precision from, mxp_precision to,
                                             const char *reason, mxp_error *err);

/* Operator precision requests (control API): request from any thread;
 * the training loop takes it between steps and applies it through
 * mxp_trainer_set_precision. take() returns false when none is pending. */
MXP_API mxp_status mxp_obs_request_precision(mxp_obs *o, mxp_precision p, mxp_error *err);
MXP_API bool mxp_obs_take_precision_request(mxp_obs *o, mxp_precision *out);

/* The last validation loss: the gauge, the stats API, and an event of kind
 * "validation" (detail {"loss": x}) so the store keeps every measurement. */
MXP_API void mxp_obs_set_validation_loss(mxp_obs *o, double loss);
/* Guard state shown by /api/training/stats and the dashboard: a JSON
 * object text (copied; invalid JSON is MXP_ERR_FORMAT). */
MXP_API mxp_status mxp_obs_set_guard_state(mxp_obs *o, const char *json_object, mxp_error *err);

/* ---- the run observer (mixprec/run.h) ------------------------------------
 * Fills *out with an observer that feeds o from an mxp_run: run begin
 * (total steps, samples per step), every step (metrics, store row, step
 * time), precision switches, guard events (rule firings as "guard"
 * events, rollbacks), run end, and hands operator precision requests
 * (POST /api/training/precision) to the run at the step boundary. The run
 * releases the observer's state (out->destroy); o is borrowed and must
 * outlive the run. */
struct mxp_run_observer;
MXP_API mxp_status mxp_obs_run_observer(mxp_obs *o, struct mxp_run_observer *out, mxp_error *err);

/* Commit batched store rows and a fp16_stats snapshot now. */
MXP_API mxp_status mxp_obs_flush(mxp_obs *o, mxp_error *err);
/* End of the run: state, final flush, runs row update, run_end event. */
MXP_API mxp_status mxp_obs_run_end(mxp_obs *o, mxp_run_state state, const char *message,
                                   mxp_error *err);

/* The API documents as JSON text (mxp_free them): what the endpoints
 * serve. export: rows [offset, offset+limit) of the history, limit
 * 1..10000; rows that left the in-memory ring are reported by
 * "first_offset". */
MXP_API mxp_status mxp_obs_status_json(mxp_obs *o, char **out, mxp_error *err);
MXP_API mxp_status mxp_obs_stats_json(mxp_obs *o, char **out, mxp_error *err);
MXP_API mxp_status mxp_obs_events_json(mxp_obs *o, int64_t limit, char **out, mxp_error *err);
MXP_API mxp_status mxp_obs_export_json(mxp_obs *o, int64_t offset, int64_t limit, char **out,
                                       mxp_error *err);

/* ---- HTTP server ---------------------------------------------------------- */

/* Start serving o per its settings (address, port, token file, limits).
 * The token file must be a regular file of mode 0600 (or stricter) whose
 * first line is the token (8..255 printable characters); "none" disables
 * the control API (control calls answer 403). */
MXP_API mxp_status mxp_obs_serve(mxp_obs *o, mxp_error *err);
/* The bound port (useful with port 0), or 0 when not serving. */
MXP_API int mxp_obs_port(const mxp_obs *o);
MXP_API void mxp_obs_stop_serving(mxp_obs *o);

/* Constant-time equality of a presented token and the expected one: the
 * time depends on neither content nor where they differ (both are padded
 * to 256 bytes; a length mismatch is folded in). */
MXP_API bool mxp_obs_token_equal(const char *presented, size_t presented_len, const char *expected,
                                 size_t expected_len);

/* ---- reading a run store ---------------------------------------------------- */

typedef struct mxp_obs_step_row {
    int64_t step, epoch;
    double timestamp;     /* Unix time, seconds */
    double loss;          /* NaN when not finite */
    double scale;
    double grad_norm;
    double zero_fraction;
    double near_overflow_fraction;
    double duration_s;
    bool overflow;        /* the step was skipped */
    mxp_precision precision;
    double lr;            /* learning rate the step used */
} mxp_obs_step_row;

typedef struct mxp_obs_event_row {
    int64_t step;
    double timestamp;
    const char *kind, *severity, *message, *detail; /* valid during the callback */
} mxp_obs_event_row;

typedef struct mxp_obs_run_summary {
    char run_id[96];
    char state[16];
    char precision[16];
    char started_at[32], ended_at[32]; /* "YYYY-MM-DD HH:MM:SS.SSS" UTC or "" */
    int64_t steps, overflow_steps, events;
} mxp_obs_run_summary;

typedef void (*mxp_obs_step_fn)(void *user, const mxp_obs_step_row *row);
typedef void (*mxp_obs_event_fn)(void *user, const mxp_obs_event_row *row);

/* Read one run of a store (run_id NULL: the most recently started run):
 * its summary, then every step (in step order) and every event (in order)
 * through the callbacks (either may be NULL). Opens the file read-only. */
MXP_API mxp_status mxp_obs_store_read(const char *db_path, const char *run_id,
                                      mxp_obs_run_summary *summary, mxp_obs_step_fn on_step,
                                      mxp_obs_event_fn on_event, void *user, mxp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_OBS_H */
