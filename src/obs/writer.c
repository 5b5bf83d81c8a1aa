/* src/obs/writer.c: the run store's writer thread. The training thread
 * only appends rows and events to an in-memory batch (a mutex and a copy);
 * the writer swaps the batch out and writes it in one SQLite transaction
 * when half of flush_steps rows are queued, flush_seconds after the first
 * queued row, on every event, and on an explicit flush (which waits for
 * it).
 *
 * The durability bound (docs/observability.md): at no moment are more than
 * flush_steps rows queued or being written but not yet committed, so a
 * SIGKILL loses at most flush_steps rows. While the writer keeps up (it
 * commits half a batch in less time than training takes to produce half a
 * batch) the training thread never waits; when it falls a whole batch
 * behind (slow disk, a writer thread starved of CPU), adding a row waits
 * for the commit in flight (back-pressure). Without that wait the rows
 * queued during one slow commit all went into the next one, and a SIGKILL
 * lost thousands of rows (issue 15, item 5).
 *
 * Entry points: mxp_obs_writer_* (obs_internal.h).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "obs/obs_internal.h"

#define MAX_PENDING (1 << 20)

typedef struct batch {
    mxp_obs_step_row *rows;
    size_t n, cap;
    mxp_obs_event_rec *ev;
    size_t ne, cap_e;
} batch;

struct mxp_obs_writer {
    mxp_obs_store *store;
    int64_t flush_steps;  /* bound on uncommitted rows */
    int64_t trigger;      /* queued rows that wake the writer: ceil(flush_steps / 2) */
    double flush_seconds;
    pthread_t th;
    pthread_mutex_t lock; /* guards everything below */
    pthread_mutex_t io;   /* held while the store is written */
    pthread_cond_t wake, done;
    batch a, b;           /* a: being filled; b: being written */
    int64_t queued;       /* rows in a since the last swap */
    mxp_train_stats stats;
    double loss;
    bool have_stats, want, quit;
    uint64_t gen_req, gen_done;
    int64_t dropped;
    mxp_error error;      /* first unreported error */
};

/* Room for one more item in an array of `size`-byte items. */
static bool grow(void **arr, size_t *cap, size_t len, size_t size) {
    if (len < *cap) return true;
    size_t ncap = *cap ? *cap * 2 : 256;
    void *p = mxp_calloc(ncap, size);
    if (!p) return false;
    if (*arr) memcpy(p, *arr, len * size);
    mxp_free(*arr);
    *arr = p;
    *cap = ncap;
    return true;
}

static void deadline_in(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    double s = (double)ts->tv_sec + (double)ts->tv_nsec * 1e-9 + seconds;
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)((s - (double)ts->tv_sec) * 1e9);
}

static void *writer_main(void *arg) {
    mxp_obs_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->want && !w->quit) {
            if (w->a.n || w->a.ne) {
                struct timespec ts;
                deadline_in(&ts, w->flush_seconds);
                if (pthread_cond_timedwait(&w->wake, &w->lock, &ts) == ETIMEDOUT) w->want = true;
            } else {
                pthread_cond_wait(&w->wake, &w->lock);
            }
        }
        batch t = w->a;
        w->a = w->b;
        w->b = t;
        w->queued = 0;
        mxp_train_stats st = w->stats;
        double loss = w->loss;
        bool have = w->have_stats;
        uint64_t gen = w->gen_req;
        w->want = false;
        pthread_mutex_unlock(&w->lock);

        mxp_error err = {0};
        mxp_status s = MXP_OK;
        pthread_mutex_lock(&w->io);
        for (size_t i = 0; i < w->b.ne && s == MXP_OK; i++)
            s = mxp_obs_store_log_event(w->store, &w->b.ev[i], &err);
        mxp_status s2 = mxp_obs_store_commit(w->store, w->b.rows, w->b.n, w->b.ev, w->b.ne,
                                             have ? &st : NULL, loss,
                                             s == MXP_OK ? &err : NULL);
        if (s == MXP_OK) s = s2;
        pthread_mutex_unlock(&w->io);

        pthread_mutex_lock(&w->lock);
        w->b.n = w->b.ne = 0;
        if (s != MXP_OK && w->error.status == MXP_OK) w->error = err;
        w->gen_done = gen;
        pthread_cond_broadcast(&w->done);
        if (w->quit && !w->a.n && !w->a.ne) break;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

mxp_status mxp_obs_writer_start(mxp_obs_store *store, int64_t flush_steps, double flush_seconds,
                                mxp_obs_writer **out, mxp_error *err) {
    *out = NULL;
    mxp_obs_writer *w = mxp_calloc(1, sizeof *w);
    if (!w) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "store writer");
    w->store = store;
    w->flush_steps = flush_steps > 0 ? flush_steps : 1;
    w->trigger = (w->flush_steps + 1) / 2;
    w->flush_seconds = flush_seconds;
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->io, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&w->done, NULL);
    if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_cond_destroy(&w->done);
        pthread_mutex_destroy(&w->lock);
        pthread_mutex_destroy(&w->io);
        mxp_free(w);
        return mxp_error_set(err, MXP_ERR_STATE, "cannot start the store writer thread");
    }
    *out = w;
    return MXP_OK;
}

void mxp_obs_writer_stop(mxp_obs_writer *w) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->quit = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->io);
    mxp_free(w->a.rows);
    mxp_free(w->a.ev);
    mxp_free(w->b.rows);
    mxp_free(w->b.ev);
    mxp_free(w);
}

void mxp_obs_writer_add_step(mxp_obs_writer *w, const mxp_obs_step_row *row,
                             const mxp_train_stats *st, double loss) {
    pthread_mutex_lock(&w->lock);
    /* back-pressure: never more than flush_steps uncommitted rows */
    while ((int64_t)(w->a.n + w->b.n) >= w->flush_steps && !w->quit) {
        w->want = true;
        pthread_cond_signal(&w->wake);
        pthread_cond_wait(&w->done, &w->lock);
    }
    if (w->a.n + w->b.n < MAX_PENDING &&
        grow((void **)&w->a.rows, &w->a.cap, w->a.n, sizeof *w->a.rows))
        w->a.rows[w->a.n++] = *row;
    else
        w->dropped++;
    w->stats = *st;
    w->loss = loss;
    w->have_stats = true;
    if (++w->queued >= w->trigger && !w->want) {
        w->want = true;
        pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&w->lock);
}

void mxp_obs_writer_add_event(mxp_obs_writer *w, const mxp_obs_event_rec *ev) {
    pthread_mutex_lock(&w->lock);
    if (grow((void **)&w->a.ev, &w->a.cap_e, w->a.ne, sizeof *w->a.ev))
        w->a.ev[w->a.ne++] = *ev;
    else
        w->dropped++;
    w->want = true; /* events go out at once */
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

/* Report (once) an error of the writer or dropped rows; lock held. */
static mxp_status take_error_locked(mxp_obs_writer *w, mxp_error *err) {
    if (w->error.status != MXP_OK) {
        mxp_status s = mxp_error_set(err, w->error.status, "%s", w->error.msg);
        w->error.status = MXP_OK;
        return s;
    }
    if (w->dropped > 0) {
        mxp_status s = mxp_error_set(err, MXP_ERR_IO,
                                     "run store fell behind: %lld rows dropped",
                                     (long long)w->dropped);
        w->dropped = 0;
        return s;
    }
    return MXP_OK;
}

mxp_status mxp_obs_writer_take_error(mxp_obs_writer *w, mxp_error *err) {
    pthread_mutex_lock(&w->lock);
    mxp_status s = take_error_locked(w, err);
    pthread_mutex_unlock(&w->lock);
    return s;
}

mxp_status mxp_obs_writer_flush(mxp_obs_writer *w, mxp_error *err) {
    pthread_mutex_lock(&w->lock);
    uint64_t mine = ++w->gen_req;
    w->want = true;
    pthread_cond_signal(&w->wake);
    while (w->gen_done < mine) pthread_cond_wait(&w->done, &w->lock);
    mxp_status s = take_error_locked(w, err);
    pthread_mutex_unlock(&w->lock);
    return s;
}

void mxp_obs_writer_lock_io(mxp_obs_writer *w) { pthread_mutex_lock(&w->io); }
void mxp_obs_writer_unlock_io(mxp_obs_writer *w) { pthread_mutex_unlock(&w->io); }
