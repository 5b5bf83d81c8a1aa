/* src/obs/store.c: the run store: an SQLite database (WAL, batched
 * transactions) with tables runs, steps, events and fp16_stats, plus a
 * JSONL event log; and the reader `mixprec report` uses.
 *
 * Entry points: mxp_obs_store_open/close/run_begin/log_event/commit/run_end
 * (obs_internal.h; one thread at a time: the writer, writer.c),
 * mxp_obs_store_read (obs.h). Opening the store marks the runs whose
 * process died without closing them 'killed' (close_dead_runs).
 *
 * Durability: rows are queued in memory and written in one transaction per
 * commit (the writer commits every flush_steps steps, flush_seconds after a
 * row was queued, on every event and at the end). In WAL mode with
 * synchronous=NORMAL a commit is an append to the -wal file with no fsync,
 * and survives the death of the process (SIGKILL included); only rows
 * queued since the last commit are lost then. Timestamps are UTC text
 * "YYYY-MM-DD HH:MM:SS.SSS", which compares correctly against SQLite's
 * datetime('now', '-24 hours') (the runbook's fp16_stats query).
 * Reference: https://www.sqlite.org/wal.html
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs_internal.h"

static const char kSchema[] =
    "CREATE TABLE IF NOT EXISTS runs(run_id TEXT PRIMARY KEY, started_at TEXT, ended_at TEXT,"
    " state TEXT, precision TEXT, final_precision TEXT, pid INTEGER, host TEXT, message TEXT,"
    " config TEXT);"
    "CREATE TABLE IF NOT EXISTS steps(run_id TEXT NOT NULL, step INTEGER NOT NULL,"
    " epoch INTEGER, timestamp TEXT, loss REAL, scale REAL, overflow INTEGER, grad_norm REAL,"
    " zero_fraction REAL, near_overflow_fraction REAL, duration_s REAL, precision TEXT,"
    " PRIMARY KEY(run_id, step));"
    "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT,"
    " timestamp TEXT, step INTEGER, kind TEXT, severity TEXT, message TEXT, detail TEXT);"
    "CREATE TABLE IF NOT EXISTS fp16_stats(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT,"
    " timestamp TEXT, step INTEGER, precision TEXT, fp16_enabled INTEGER,"
    " fp16_enabled_runtime INTEGER, overflow_rate REAL, current_scale REAL,"
    " training_steps INTEGER, optimizer_steps INTEGER, skipped_steps INTEGER, loss REAL);"
    "CREATE INDEX IF NOT EXISTS fp16_stats_timestamp ON fp16_stats(timestamp);"
    "CREATE INDEX IF NOT EXISTS events_run ON events(run_id, id);";

struct mxp_obs_store {
    sqlite3 *db;
    sqlite3_stmt *ins_step, *ins_event, *ins_stats;
    FILE *jsonl;
    char run_id[96];
    char db_path[512];
};

static mxp_status db_error(mxp_obs_store *s, mxp_error *err, const char *what) {
    return mxp_error_set(err, MXP_ERR_IO, "run store %s: %s: %s", s->db_path, what,
                         s->db ? sqlite3_errmsg(s->db) : "cannot open");
}

static mxp_status exec(mxp_obs_store *s, const char *sql, mxp_error *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) == SQLITE_OK) return MXP_OK;
    mxp_status st = mxp_error_set(err, MXP_ERR_IO, "run store %s: %.60s: %s", s->db_path, sql,
                                  msg ? msg : "?");
    sqlite3_free(msg);
    return st;
}

void mxp_obs_store_close(mxp_obs_store *s) {
    if (!s) return;
    sqlite3_finalize(s->ins_step);
    sqlite3_finalize(s->ins_event);
    sqlite3_finalize(s->ins_stats);
    if (s->db) sqlite3_close(s->db);
    if (s->jsonl) fclose(s->jsonl);
    mxp_free(s);
}

static void bind_text(sqlite3_stmt *q, int i, const char *t) {
    if (t)
        sqlite3_bind_text(q, i, t, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(q, i);
}

/* NaN binds as NULL (SQLite would store NULL anyway); Inf stays a REAL. */
static void bind_real(sqlite3_stmt *q, int i, double v) {
    if (isnan(v))
        sqlite3_bind_null(q, i);
    else
        sqlite3_bind_double(q, i, v);
}

/* Runs left 'running' by a process that no longer exists (SIGKILL, a
 * crash, power loss) become 'killed' when the next run opens the store
 * (issue 15, item 6): the row's host is this machine and its pid is gone
 * (kill(pid, 0) fails with ESRCH). ended_at is the run's last committed
 * step (or its start). A row of another host, or whose pid is alive (also
 * a reused pid), is left alone: 'running' is only ever replaced when the
 * run is certainly over. */
static mxp_status close_dead_runs(mxp_obs_store *s, mxp_error *err) {
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    sqlite3_stmt *q = NULL, *u = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT run_id, pid FROM runs WHERE state='running' AND host=?",
                           -1, &q, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "UPDATE runs SET state='killed', ended_at=coalesce((SELECT"
                           " max(timestamp) FROM steps WHERE run_id=?1), started_at), message=?2"
                           " WHERE run_id=?1 AND state='running'",
                           -1, &u, NULL) != SQLITE_OK) {
        sqlite3_finalize(q);
        return db_error(s, err, "prepare stale-run check");
    }
    bind_text(q, 1, host);
    mxp_status st = MXP_OK;
    while (st == MXP_OK && sqlite3_step(q) == SQLITE_ROW) {
        const unsigned char *id = sqlite3_column_text(q, 0);
        const sqlite3_int64 pid = sqlite3_column_int64(q, 1);
        if (!id || pid <= 0 || pid == (sqlite3_int64)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char msg[256];
        snprintf(msg, sizeof msg,
                 "process %lld ended without closing the run (SIGKILL, crash or power loss); "
                 "marked killed by run %s", (long long)pid, s->run_id);
        sqlite3_reset(u);
        bind_text(u, 1, (const char *)id);
        bind_text(u, 2, msg);
        if (sqlite3_step(u) != SQLITE_DONE)
            st = db_error(s, err, "mark a dead run killed");
        else
            mxp_log(MXP_LOG_WARN, "run store %s: run %s (pid %lld) was still 'running' but its "
                    "process is gone: marked 'killed'", s->db_path, (const char *)id,
                    (long long)pid);
    }
    sqlite3_finalize(q);
    sqlite3_finalize(u);
    return st;
}

mxp_status mxp_obs_store_open(const char *db_path, const char *events_path, const char *run_id,
                              mxp_obs_store **out, mxp_error *err) {
    *out = NULL;
    mxp_obs_store *s = mxp_calloc(1, sizeof *s);
    if (!s) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "run store");
    snprintf(s->run_id, sizeof s->run_id, "%s", run_id);
    snprintf(s->db_path, sizeof s->db_path, "%s", db_path);
    mxp_status st = MXP_OK;
    if (sqlite3_open_v2(db_path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        st = db_error(s, err, "open");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 5000);
    /* WAL: readers never block the writer; NORMAL: no fsync per commit. */
    sqlite3_stmt *q = NULL;
    bool wal = false;
    if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        const unsigned char *mode = sqlite3_column_text(q, 0);
        wal = mode && strcmp((const char *)mode, "wal") == 0;
    }
    sqlite3_finalize(q);
    if (!wal) {
        st = db_error(s, err, "cannot switch to WAL journal mode");
        goto fail;
    }
    if ((st = exec(s, "PRAGMA synchronous=NORMAL", err)) != MXP_OK) goto fail;
    if ((st = exec(s, kSchema, err)) != MXP_OK) goto fail;
    if ((st = close_dead_runs(s, err)) != MXP_OK) goto fail;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO steps(run_id, step, epoch, timestamp, loss,"
                           " scale, overflow, grad_norm, zero_fraction, near_overflow_fraction,"
                           " duration_s, precision) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &s->ins_step, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "INSERT INTO events(run_id, timestamp, step, kind, severity, message,"
                           " detail) VALUES(?,?,?,?,?,?,?)",
                           -1, &s->ins_event, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "INSERT INTO fp16_stats(run_id, timestamp, step, precision,"
                           " fp16_enabled, fp16_enabled_runtime, overflow_rate, current_scale,"
                           " training_steps, optimizer_steps, skipped_steps, loss)"
                           " VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &s->ins_stats, NULL) != SQLITE_OK) {
        st = db_error(s, err, "prepare");
        goto fail;
    }
    s->jsonl = fopen(events_path, "a");
    if (!s->jsonl) {
        st = mxp_error_set(err, MXP_ERR_IO, "cannot open event log %s", events_path);
        goto fail;
    }
    *out = s;
    return MXP_OK;
fail:
    mxp_obs_store_close(s);
    return st;
}

mxp_status mxp_obs_store_run_begin(mxp_obs_store *s, double started, mxp_precision p,
                                   const char *config_json, mxp_error *err) {
    char ts[40], host[128] = "";
    mxp_obs_format_utc(started, ts, sizeof ts);
    gethostname(host, sizeof host - 1);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO runs(run_id, started_at, ended_at, state,"
                           " precision, final_precision, pid, host, message, config)"
                           " VALUES(?,?,NULL,'running',?,?,?,?,NULL,?)",
                           -1, &q, NULL) != SQLITE_OK)
        return db_error(s, err, "prepare runs");
    bind_text(q, 1, s->run_id);
    bind_text(q, 2, ts);
    bind_text(q, 3, mxp_precision_name(p));
    bind_text(q, 4, mxp_precision_name(p));
    sqlite3_bind_int64(q, 5, (sqlite3_int64)getpid());
    bind_text(q, 6, host);
    bind_text(q, 7, config_json);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? MXP_OK : db_error(s, err, "insert run");
}

mxp_status mxp_obs_store_log_event(mxp_obs_store *s, const mxp_obs_event_rec *ev,
                                   mxp_error *err) {
    char ts[40];
    mxp_obs_format_utc(ev->timestamp, ts, sizeof ts);
    json_t *j = json_object();
    json_object_set_new(j, "timestamp", json_string(ts));
    json_object_set_new(j, "run_id", json_string(s->run_id));
    json_object_set_new(j, "step", json_integer(ev->step));
    json_object_set_new(j, "kind", json_string(ev->kind));
    json_object_set_new(j, "severity", json_string(ev->severity));
    json_object_set_new(j, "message", json_string(ev->message));
    json_t *d = ev->detail[0] ? json_loads(ev->detail, 0, NULL) : NULL;
    json_object_set_new(j, "detail", d ? d : json_null());
    char *line = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!line) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "event log line");
    bool ok = fputs(line, s->jsonl) >= 0 && fputc('\n', s->jsonl) != EOF && fflush(s->jsonl) == 0;
    free(line);
    return ok ? MXP_OK : mxp_error_set(err, MXP_ERR_IO, "writing the event log failed");
}

static bool insert_step(mxp_obs_store *s, const mxp_obs_step_row *r) {
    sqlite3_stmt *q = s->ins_step;
    char ts[40];
    mxp_obs_format_utc(r->timestamp, ts, sizeof ts);
    sqlite3_reset(q);
    bind_text(q, 1, s->run_id);
    sqlite3_bind_int64(q, 2, r->step);
    sqlite3_bind_int64(q, 3, r->epoch);
    bind_text(q, 4, ts);
    bind_real(q, 5, r->loss);
    bind_real(q, 6, r->scale);
    sqlite3_bind_int(q, 7, r->overflow ? 1 : 0);
    bind_real(q, 8, r->grad_norm);
    bind_real(q, 9, r->zero_fraction);
    bind_real(q, 10, r->near_overflow_fraction);
    bind_real(q, 11, r->duration_s);
    bind_text(q, 12, mxp_precision_name(r->precision));
    return sqlite3_step(q) == SQLITE_DONE;
}

static bool insert_event(mxp_obs_store *s, const mxp_obs_event_rec *e) {
    sqlite3_stmt *q = s->ins_event;
    char ts[40];
    mxp_obs_format_utc(e->timestamp, ts, sizeof ts);
    sqlite3_reset(q);
    bind_text(q, 1, s->run_id);
    bind_text(q, 2, ts);
    sqlite3_bind_int64(q, 3, e->step);
    bind_text(q, 4, e->kind);
    bind_text(q, 5, e->severity);
    bind_text(q, 6, e->message);
    bind_text(q, 7, e->detail[0] ? e->detail : NULL);
    return sqlite3_step(q) == SQLITE_DONE;
}

static bool insert_stats(mxp_obs_store *s, const mxp_train_stats *st, double loss) {
    sqlite3_stmt *q = s->ins_stats;
    char ts[40];
    mxp_obs_format_utc(mxp_obs_unix_now(), ts, sizeof ts);
    mxp_precision_policy pol;
    mxp_precision_policy_default(st->precision, &pol);
    sqlite3_reset(q);
    bind_text(q, 1, s->run_id);
    bind_text(q, 2, ts);
    sqlite3_bind_int64(q, 3, st->training_steps);
    bind_text(q, 4, mxp_precision_name(st->precision));
    /* fp16_enabled: the mode asked for 16-bit compute; _runtime: FP16 itself. */
    sqlite3_bind_int(q, 5, pol.weight != MXP_DTYPE_F32 ? 1 : 0);
    sqlite3_bind_int(q, 6, st->fp16_enabled_runtime ? 1 : 0);
    bind_real(q, 7, st->overflow_rate);
    bind_real(q, 8, st->current_scale);
    sqlite3_bind_int64(q, 9, st->training_steps);
    sqlite3_bind_int64(q, 10, st->optimizer_steps);
    sqlite3_bind_int64(q, 11, st->skipped_steps);
    bind_real(q, 12, loss);
    return sqlite3_step(q) == SQLITE_DONE;
}

mxp_status mxp_obs_store_commit(mxp_obs_store *s, const mxp_obs_step_row *rows, size_t n,
                                const mxp_obs_event_rec *events, size_t n_events,
                                const mxp_train_stats *stats, double last_loss, mxp_error *err) {
    if (n == 0 && n_events == 0 && !stats) return MXP_OK;
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return db_error(s, err, "begin");
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) ok = insert_step(s, &rows[i]);
    for (size_t i = 0; ok && i < n_events; i++) ok = insert_event(s, &events[i]);
    if (ok && stats) ok = insert_stats(s, stats, last_loss);
    /* On failure the rows are dropped: a full disk must not grow memory. */
    if (ok && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return MXP_OK;
    mxp_status st = db_error(s, err, "commit");
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

mxp_status mxp_obs_store_run_end(mxp_obs_store *s, double ended, mxp_run_state state,
                                 mxp_precision p, const char *message, mxp_error *err) {
    char ts[40];
    mxp_obs_format_utc(ended, ts, sizeof ts);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "UPDATE runs SET ended_at=?, state=?, final_precision=?, message=?"
                           " WHERE run_id=?",
                           -1, &q, NULL) != SQLITE_OK)
        return db_error(s, err, "prepare run end");
    bind_text(q, 1, ts);
    bind_text(q, 2, mxp_run_state_name(state));
    bind_text(q, 3, mxp_precision_name(p));
    bind_text(q, 4, message);
    bind_text(q, 5, s->run_id);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? MXP_OK : db_error(s, err, "update run");
}

/* ---- reader ------------------------------------------------------------------ */

static void col_text(sqlite3_stmt *q, int i, char *dst, size_t n) {
    const unsigned char *t = sqlite3_column_text(q, i);
    snprintf(dst, n, "%s", t ? (const char *)t : "");
}

static double col_real(sqlite3_stmt *q, int i) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

mxp_status mxp_obs_store_read(const char *db_path, const char *run_id,
                              mxp_obs_run_summary *summary, mxp_obs_step_fn on_step,
                              mxp_obs_event_fn on_event, void *user, mxp_error *err) {
    if (!db_path || !summary)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_store_read: NULL argument");
    memset(summary, 0, sizeof *summary);
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        mxp_status st = mxp_error_set(err, MXP_ERR_IO, "cannot open run store %s: %s", db_path,
                                      db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return st;
    }
    sqlite3_busy_timeout(db, 5000);
    mxp_status st = MXP_OK;
    sqlite3_stmt *q = NULL;
    const char *sql = run_id ? "SELECT run_id, state, precision, started_at, ended_at FROM runs"
                               " WHERE run_id=?"
                             : "SELECT run_id, state, precision, started_at, ended_at FROM runs"
                               " ORDER BY started_at DESC LIMIT 1";
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        st = mxp_error_set(err, MXP_ERR_FORMAT, "%s is not a mixprec run store: %s", db_path,
                           sqlite3_errmsg(db));
        goto done;
    }
    if (run_id) bind_text(q, 1, run_id);
    if (sqlite3_step(q) != SQLITE_ROW) {
        st = mxp_error_set(err, MXP_ERR_STATE, "run store %s holds no run%s%s", db_path,
                           run_id ? " named " : "", run_id ? run_id : "");
        goto done;
    }
    col_text(q, 0, summary->run_id, sizeof summary->run_id);
    col_text(q, 1, summary->state, sizeof summary->state);
    col_text(q, 2, summary->precision, sizeof summary->precision);
    col_text(q, 3, summary->started_at, sizeof summary->started_at);
    col_text(q, 4, summary->ended_at, sizeof summary->ended_at);
    sqlite3_finalize(q);
    q = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT count(*) FROM steps WHERE run_id=?1),"
                           " (SELECT count(*) FROM steps WHERE run_id=?1 AND overflow=1),"
                           " (SELECT count(*) FROM events WHERE run_id=?1)",
                           -1, &q, NULL) != SQLITE_OK) {
        st = mxp_error_set(err, MXP_ERR_FORMAT, "run store %s: %s", db_path, sqlite3_errmsg(db));
        goto done;
    }
    bind_text(q, 1, summary->run_id);
    if (sqlite3_step(q) == SQLITE_ROW) {
        summary->steps = sqlite3_column_int64(q, 0);
        summary->overflow_steps = sqlite3_column_int64(q, 1);
        summary->events = sqlite3_column_int64(q, 2);
    }
    sqlite3_finalize(q);
    q = NULL;
    if (on_step) {
        if (sqlite3_prepare_v2(db,
                               "SELECT step, epoch, (julianday(timestamp) - 2440587.5) * 86400.0,"
                               " loss, scale, grad_norm, zero_fraction, near_overflow_fraction,"
                               " duration_s, overflow, precision FROM steps WHERE run_id=?"
                               " ORDER BY step",
                               -1, &q, NULL) != SQLITE_OK) {
            st = mxp_error_set(err, MXP_ERR_FORMAT, "run store %s: %s", db_path,
                               sqlite3_errmsg(db));
            goto done;
        }
        bind_text(q, 1, summary->run_id);
        while (sqlite3_step(q) == SQLITE_ROW) {
            mxp_obs_step_row r = {0};
            r.step = sqlite3_column_int64(q, 0);
            r.epoch = sqlite3_column_int64(q, 1);
            r.timestamp = col_real(q, 2);
            r.loss = col_real(q, 3);
            r.scale = col_real(q, 4);
            r.grad_norm = col_real(q, 5);
            r.zero_fraction = col_real(q, 6);
            r.near_overflow_fraction = col_real(q, 7);
            r.duration_s = col_real(q, 8);
            r.overflow = sqlite3_column_int(q, 9) != 0;
            const unsigned char *p = sqlite3_column_text(q, 10);
            mxp_precision prec = MXP_PRECISION_FP32;
            if (p) mxp_precision_parse((const char *)p, &prec, NULL);
            r.precision = prec;
            on_step(user, &r);
        }
        sqlite3_finalize(q);
        q = NULL;
    }
    if (on_event) {
        if (sqlite3_prepare_v2(db,
                               "SELECT step, (julianday(timestamp) - 2440587.5) * 86400.0, kind,"
                               " severity, message, detail FROM events WHERE run_id=? ORDER BY id",
                               -1, &q, NULL) != SQLITE_OK) {
            st = mxp_error_set(err, MXP_ERR_FORMAT, "run store %s: %s", db_path,
                               sqlite3_errmsg(db));
            goto done;
        }
        bind_text(q, 1, summary->run_id);
        while (sqlite3_step(q) == SQLITE_ROW) {
            mxp_obs_event_row e;
            e.step = sqlite3_column_int64(q, 0);
            e.timestamp = col_real(q, 1);
            e.kind = (const char *)sqlite3_column_text(q, 2);
            e.severity = (const char *)sqlite3_column_text(q, 3);
            e.message = (const char *)sqlite3_column_text(q, 4);
            e.detail = (const char *)sqlite3_column_text(q, 5);
            if (!e.kind) e.kind = "";
            if (!e.severity) e.severity = "";
            if (!e.message) e.message = "";
            if (!e.detail) e.detail = "";
            on_event(user, &e);
        }
    }
done:
    sqlite3_finalize(q);
    sqlite3_close(db);
    return st;
}
