/* src/obs/obs_internal.h: pieces shared by the files of the obs module
 * (metrics.c, obs.c, obs_json.c, store.c, http.c, dashboard.c, buf.c).
 * Not a public header.
 *
 * Locking: o->lock guards the status fields, the history ring and the
 * event ring (held for copies only, never while formatting or doing I/O);
 * the run store is written by the writer thread only (writer.c). Metric
 * series are atomics.
 */
#ifndef MIXPREC_OBS_INTERNAL_H
#define MIXPREC_OBS_INTERNAL_H

#include <mixprec/obs.h>

#include <pthread.h>
#include <stdatomic.h>

/* ---- buf.c: growable NUL-terminated text buffer ------------------------- */

typedef struct mxp_obs_buf {
    char *p;
    size_t len, cap;
    bool oom; /* an append failed: the content is truncated */
} mxp_obs_buf;

void mxp_obs_buf_append(mxp_obs_buf *b, const char *s, size_t n);
void mxp_obs_buf_puts(mxp_obs_buf *b, const char *s);
void mxp_obs_buf_printf(mxp_obs_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void mxp_obs_buf_free(mxp_obs_buf *b);
/* Hand the text to the caller (never NULL unless oom) and reset b. */
char *mxp_obs_buf_take(mxp_obs_buf *b, size_t *len);

/* Shortest text of v that reads back exactly; "NaN", "+Inf", "-Inf" for
 * non-finite values (Prometheus / Go spelling). buf >= 32 bytes. */
void mxp_obs_format_double(double v, char *buf, size_t n);
/* Unix time now (CLOCK_REALTIME). */
double mxp_obs_unix_now(void);
/* "YYYY-MM-DD HH:MM:SS.SSS" in UTC: the text SQLite's datetime() compares
 * against. buf >= 32 bytes. */
void mxp_obs_format_utc(double unix_s, char *buf, size_t n);

/* ---- store.c: SQLite run store + JSONL event log ------------------------- */

typedef struct mxp_obs_store mxp_obs_store;

typedef struct mxp_obs_event_rec {
    int64_t step;
    double timestamp;
    char kind[32];
    char severity[16];
    char message[256];
    char detail[512]; /* JSON object text, "" for none */
} mxp_obs_event_rec;

mxp_status mxp_obs_store_open(const char *db_path, const char *events_path, const char *run_id,
                              mxp_obs_store **out, mxp_error *err);
void mxp_obs_store_close(mxp_obs_store *s);
mxp_status mxp_obs_store_run_begin(mxp_obs_store *s, double started, mxp_precision p,
                                   const char *config_json, mxp_error *err);
/* Append one event to the JSONL log (flushed). */
mxp_status mxp_obs_store_log_event(mxp_obs_store *s, const mxp_obs_event_rec *ev,
                                   mxp_error *err);
/* One transaction: rows, events and (stats non-NULL) one fp16_stats row. */
mxp_status mxp_obs_store_commit(mxp_obs_store *s, const mxp_obs_step_row *rows, size_t n,
                                const mxp_obs_event_rec *events, size_t n_events,
                                const mxp_train_stats *stats, double last_loss, mxp_error *err);

/* ---- writer.c: the store's writer thread ---------------------------------- */

typedef struct mxp_obs_writer mxp_obs_writer;

mxp_status mxp_obs_writer_start(mxp_obs_store *store, int64_t flush_steps, double flush_seconds,
                                mxp_obs_writer **out, mxp_error *err);
/* Commit what is queued, stop the thread, free (the store stays open). */
void mxp_obs_writer_stop(mxp_obs_writer *w);
/* Training thread: queue a row (with the stats of the fp16_stats row of
 * the next commit); never waits for I/O. */
void mxp_obs_writer_add_step(mxp_obs_writer *w, const mxp_obs_step_row *row,
                             const mxp_train_stats *st, double loss);
/* Queue an event and wake the writer. */
void mxp_obs_writer_add_event(mxp_obs_writer *w, const mxp_obs_event_rec *ev);
/* Commit everything queued so far and wait for it; returns (once) an error
 * the writer met since the last report, or dropped rows. */
mxp_status mxp_obs_writer_flush(mxp_obs_writer *w, mxp_error *err);
/* That error report without waiting. */
mxp_status mxp_obs_writer_take_error(mxp_obs_writer *w, mxp_error *err);
/* Exclusive use of the store (runs row writes) while the writer is idle. */
void mxp_obs_writer_lock_io(mxp_obs_writer *w);
void mxp_obs_writer_unlock_io(mxp_obs_writer *w);
mxp_status mxp_obs_store_run_end(mxp_obs_store *s, double ended, mxp_run_state st,
                                 mxp_precision p, const char *message, mxp_error *err);

/* ---- obs.c: the observer --------------------------------------------------- */

#define MXP_OBS_EVENT_RING 256
#define MXP_OBS_TOKEN_MAX 255
#define MXP_OBS_GUARD_JSON_MAX 8192

enum { MXP_MEM_PARAMS, MXP_MEM_GRADS, MXP_MEM_MASTER, MXP_MEM_OPTIMIZER, MXP_MEM_ACTIVATIONS,
       MXP_MEM_KIND_COUNT };

typedef struct mxp_obs_server mxp_obs_server;

struct mxp_obs {
    mxp_obs_settings set;
    char run_id[96];
    mxp_metrics *reg;
    /* series of the training metrics (see mxp_metrics_register_training) */
    mxp_metric *m_steps, *m_opt_steps, *m_overflow, *m_samples;
    mxp_metric *m_scale, *m_loss, *m_val_loss, *m_grad_norm, *m_zero, *m_near, *m_div;
    mxp_metric *m_duration, *m_fallbacks, *m_rollbacks, *m_epoch, *m_progress, *m_fp16;
    mxp_metric *m_mem[MXP_MEM_KIND_COUNT];
    mxp_metric *m_prec[MXP_PRECISION_COUNT];
    mxp_metric *m_state[MXP_RUN_STATE_COUNT];
    /* training thread only */
    mxp_trainer *trainer;
    int64_t samples_per_step;
    mxp_precision cur_prec;
    bool prec_metrics_stale; /* cur_prec announced before the step boundary applied it */
    double ema_loss;    /* for mixprec_fp32_divergence_ratio */
    /* guarded by lock */
    pthread_mutex_t lock;
    mxp_run_state state;
    bool begun;
    mxp_train_stats stats;
    int64_t step, epoch, total_steps; /* step: training steps (attempts) */
    int64_t run_step; /* position in the planned run (rewinds on rollback); -1: unknown */
    double last_loss, val_loss; /* NaN when unknown */
    double started, ended;      /* Unix time, 0 when not yet */
    char guard_json[MXP_OBS_GUARD_JSON_MAX];
    mxp_obs_step_row *hist;     /* ring: global row i at hist[i % hist_cap] */
    size_t hist_cap;
    int64_t hist_total;         /* rows ever recorded */
    mxp_obs_event_rec events[MXP_OBS_EVENT_RING];
    int64_t ev_total;
    /* any thread */
    atomic_int req_prec; /* -1: none */
    /* run store and its writer thread */
    mxp_obs_store *store;
    mxp_obs_writer *writer;
    /* HTTP */
    mxp_obs_server *server;
    bool token_loaded; /* read at create when http_enabled, else at serve */
    char token[MXP_OBS_TOKEN_MAX + 1];
    size_t token_len;
};

/* ---- http.c ------------------------------------------------------------------ */
/* Read and check the bearer token file (regular file, no group/other
 * permission bits, first line 8..255 printable characters). */
mxp_status mxp_obs_read_token(const char *path, char *token, size_t *len, mxp_error *err);

/* ---- dashboard.c ------------------------------------------------------------ */
extern const char mxp_obs_dashboard_html[];

#endif /* MIXPREC_OBS_INTERNAL_H */
