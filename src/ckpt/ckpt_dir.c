/* ckpt/ckpt_dir.c: directories of checkpoints: listing, newest verified,
 * keep marks, retention, rollback, and the manager that decides when to
 * save.
 *
 * Entry points: mxp_ckpt_list, mxp_ckpt_find_latest, mxp_ckpt_mark_keep,
 * mxp_ckpt_prune, mxp_ckpt_path_for, mxp_ckpt_rollback,
 * mxp_ckpt_policy_from_config, mxp_ckpt_manager_*.
 *
 * Names: DIR/ckpt-<step %012lld>.safetensors; keep mark: the same name plus
 * ".keep"; temp files of saves in progress: DIR/.ckpt-*.tmp-* (st_writer.c),
 * removed when a manager starts; checkpoints of an abandoned timeline after
 * a rollback: DIR/abandoned-ckpt-*.safetensors (never listed, never deleted).
 * One writer per directory is assumed.
 */
#include "ckpt/ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"

/* Step of a checkpoint file name, or -1 when the name is not one. */
static int64_t name_step(const char *name) {
    size_t lp = strlen(CKPT_PREFIX), ls = strlen(CKPT_SUFFIX), n = strlen(name);
    if (n <= lp + ls || strncmp(name, CKPT_PREFIX, lp) || strcmp(name + n - ls, CKPT_SUFFIX))
        return -1;
    int64_t v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int cmp_entry(const void *a, const void *b) {
    const mxp_ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->path, y->path);
}

mxp_status mxp_ckpt_path_for(const char *dir, int64_t step, char *buf, size_t n, mxp_error *err) {
    int w = snprintf(buf, n, "%s/" CKPT_PREFIX "%012lld" CKPT_SUFFIX, dir, (long long)step);
    if (w < 0 || (size_t)w >= n)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "checkpoint directory '%.200s' is too long",
                             dir);
    return MXP_OK;
}

mxp_status mxp_ckpt_list(const char *dir, mxp_ckpt_entry **out, size_t *n, mxp_error *err) {
    if (!dir || !out || !n) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_list: NULL");
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return MXP_OK;
        return mxp_error_set(err, MXP_ERR_IO, "%s: cannot list checkpoints: %s", dir,
                             strerror(errno));
    }
    size_t cap = 0, cnt = 0;
    mxp_ckpt_entry *e = NULL;
    mxp_status s = MXP_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t step = name_step(de->d_name);
        if (step < 0) continue;
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            mxp_ckpt_entry *ne = mxp_calloc(nc, sizeof *ne);
            if (!ne) {
                s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%s: checkpoint list", dir);
                break;
            }
            if (cnt) memcpy(ne, e, cnt * sizeof *e);
            mxp_free(e);
            e = ne;
            cap = nc;
        }
        int w = snprintf(e[cnt].path, sizeof e[cnt].path, "%s/%s", dir, de->d_name);
        if (w < 0 || (size_t)w + 6 >= sizeof e[cnt].path) continue; /* too long to handle */
        e[cnt].step = step;
        char keep[MXP_CKPT_PATH_MAX + 8];
        snprintf(keep, sizeof keep, "%s.keep", e[cnt].path);
        e[cnt].keep = file_exists(keep);
        cnt++;
    }
    closedir(d);
    if (s != MXP_OK) {
        mxp_free(e);
        return s;
    }
    if (cnt) qsort(e, cnt, sizeof *e, cmp_entry);
    *out = e;
    *n = cnt;
    return MXP_OK;
}

/* The newest entry that verifies (and is healthy when asked), opened;
 * *which gets its index. */
static mxp_status find_latest_open(const char *dir, bool need_healthy, const mxp_model *model,
                                   mxp_ckpt_entry **list, size_t *count, size_t *which,
                                   mxp_st_file **file, mxp_ckpt_info *info, mxp_error *err) {
    mxp_status s = mxp_ckpt_list(dir, list, count, err);
    if (s != MXP_OK) return s;
    mxp_error last = {0};
    size_t tried = 0;
    for (size_t i = *count; i-- > 0;) {
        mxp_st_file *f = NULL;
        mxp_ckpt_info in;
        mxp_error e = {0};
        tried++;
        s = mxp_st_file_read((*list)[i].path, &f, &e);
        if (s == MXP_OK) s = mxp_ckpt_check(f, model, &in, &e);
        if (s == MXP_OK && need_healthy && !in.healthy)
            s = mxp_error_set(&e, MXP_ERR_STATE, "%s: marked unhealthy", (*list)[i].path);
        if (s == MXP_OK) {
            *which = i;
            *file = f;
            if (info) *info = in;
            return MXP_OK;
        }
        mxp_st_file_destroy(f);
        mxp_log(MXP_LOG_WARN, "checkpoint skipped: %s", e.msg);
        if (!last.msg[0]) last = e;
    }
    if (!tried)
        return mxp_error_set(err, MXP_ERR_IO, "%s: no checkpoints (ckpt-*.safetensors)", dir);
    return mxp_error_set(err, MXP_ERR_IO, "%s: none of %zu checkpoints %s (newest: %s)", dir, tried,
                         need_healthy ? "is healthy and verifies" : "verifies", last.msg);
}

mxp_status mxp_ckpt_find_latest(const char *dir, bool need_healthy, const mxp_model *model,
                                char *path, size_t path_n, mxp_ckpt_info *info, mxp_error *err) {
    if (!dir || !path || !path_n)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_find_latest: NULL");
    mxp_ckpt_entry *list = NULL;
    size_t n = 0, which = 0;
    mxp_st_file *f = NULL;
    mxp_status s = find_latest_open(dir, need_healthy, model, &list, &n, &which, &f, info, err);
    if (s == MXP_OK) snprintf(path, path_n, "%s", list[which].path);
    mxp_st_file_destroy(f);
    mxp_free(list);
    return s;
}

mxp_status mxp_ckpt_mark_keep(const char *path, bool keep, mxp_error *err) {
    char mark[MXP_CKPT_PATH_MAX + 8];
    if (!path || snprintf(mark, sizeof mark, "%s.keep", path) >= (int)sizeof mark)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_mark_keep: bad path");
    if (!keep) {
        if (unlink(mark) != 0 && errno != ENOENT)
            return mxp_error_set(err, MXP_ERR_IO, "%s: cannot remove: %s", mark, strerror(errno));
        return MXP_OK;
    }
    if (!file_exists(path)) return mxp_error_set(err, MXP_ERR_IO, "%s: no such checkpoint", path);
    FILE *fp = fopen(mark, "w");
    if (!fp || fputs("keep\n", fp) < 0 || fclose(fp) != 0)
        return mxp_error_set(err, MXP_ERR_IO, "%s: cannot write: %s", mark, strerror(errno));
    return MXP_OK;
}

static bool header_healthy(const char *path) {
    char v[16];
    return ckpt_read_meta_value(path, "healthy", v, sizeof v, NULL) == MXP_OK &&
           strcmp(v, "true") == 0;
}

mxp_status mxp_ckpt_prune(const char *dir, int64_t keep_last, mxp_error *err) {
    if (keep_last < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "keep_last=%lld; accepted: >= 1",
                             (long long)keep_last);
    mxp_ckpt_entry *e = NULL;
    size_t n = 0;
    mxp_status s = mxp_ckpt_list(dir, &e, &n, err);
    if (s != MXP_OK || n <= (size_t)keep_last) {
        mxp_free(e);
        return s;
    }
    size_t first_kept = n - (size_t)keep_last;
    /* the newest healthy checkpoint survives: a rollback target */
    size_t healthy = n;
    for (size_t i = n; i-- > 0;)
        if (header_healthy(e[i].path)) {
            healthy = i;
            break;
        }
    for (size_t i = 0; i < first_kept; i++) {
        if (e[i].keep || i == healthy) continue;
        if (unlink(e[i].path) != 0 && errno != ENOENT && s == MXP_OK)
            s = mxp_error_set(err, MXP_ERR_IO, "%s: cannot delete: %s", e[i].path, strerror(errno));
    }
    mxp_free(e);
    return s;
}

/* ---- rollback ------------------------------------------------------------------ */

/* Rename checkpoints newer than list[keep] out of the listing. */
static void abandon_newer(const mxp_ckpt_entry *list, size_t n, size_t keep, const char *dir) {
    for (size_t i = keep + 1; i < n; i++) {
        const char *base = strrchr(list[i].path, '/');
        base = base ? base + 1 : list[i].path;
        char to[MXP_CKPT_PATH_MAX + 32], mk[MXP_CKPT_PATH_MAX + 8], mk_to[MXP_CKPT_PATH_MAX + 48];
        snprintf(to, sizeof to, "%s/abandoned-%s", dir, base);
        if (rename(list[i].path, to) != 0)
            mxp_log(MXP_LOG_WARN, "rollback: cannot set aside %s: %s", list[i].path,
                    strerror(errno));
        snprintf(mk, sizeof mk, "%s.keep", list[i].path);
        snprintf(mk_to, sizeof mk_to, "%s.keep", to);
        if (list[i].keep) rename(mk, mk_to);
    }
}

mxp_status mxp_ckpt_rollback(const char *dir, mxp_trainer *t, const char *reason,
                             mxp_data_position *pos, mxp_ckpt_rollback_result *res,
                             mxp_error *err) {
    if (!dir || !t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_rollback: NULL");
    mxp_trainer_state before;
    mxp_trainer_get_state(t, &before);
    mxp_ckpt_entry *list = NULL;
    size_t n = 0, which = 0;
    mxp_st_file *f = NULL;
    mxp_ckpt_info info;
    mxp_status s =
        find_latest_open(dir, true, mxp_trainer_model(t), &list, &n, &which, &f, &info, err);
    if (s == MXP_OK) s = mxp_ckpt_load_file(f, t, &info, err);
    mxp_st_file_destroy(f);
    if (s != MXP_OK) {
        mxp_free(list);
        mxp_log(MXP_LOG_ERROR, "rollback from step %lld failed (%s): %s",
                (long long)before.training_steps, reason ? reason : "no reason given",
                err ? err->msg : "");
        return s;
    }
    abandon_newer(list, n, which, dir);
    if (pos) *pos = info.pos;
    if (res) {
        res->from_step = before.training_steps;
        res->to_step = info.step;
        snprintf(res->path, sizeof res->path, "%s", list[which].path);
    }
    mxp_log(MXP_LOG_WARN, "rollback: from step %lld to step %lld (%s): %s",
            (long long)before.training_steps, (long long)info.step, list[which].path,
            reason ? reason : "no reason given");
    mxp_free(list);
    return MXP_OK;
}

/* ---- the manager ------------------------------------------------------------------ */

struct mxp_ckpt_manager {
    mxp_ckpt_policy p;
    double last_save;  /* mxp_time_now() of the last save (or of create) */
    int64_t last_step; /* step of the last save, -1 before */
    bool healthy;
    char *guard_state;
    char *run_id, *workload, *data_signature; /* the run's (run.h), or NULL */
    char *workload_meta;                      /* the provider's (run.h), or NULL */
    char *run_state;                          /* the run's (run.h), or NULL */
    char last_path[MXP_CKPT_PATH_MAX];
};

mxp_status mxp_ckpt_policy_from_config(const mxp_config *c, mxp_ckpt_policy *out, mxp_error *err) {
    if (!c || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_policy_from_config: NULL");
    memset(out, 0, sizeof *out);
    const char *d = c->ckpt_dir[0] ? c->ckpt_dir : "checkpoints";
    int w = d[0] == '/' ? snprintf(out->dir, sizeof out->dir, "%s", d)
                        : snprintf(out->dir, sizeof out->dir, "%s/%s", c->output_dir, d);
    if (w < 0 || (size_t)w >= sizeof out->dir)
        return mxp_error_set(err, MXP_ERR_CONFIG, "checkpoint directory is too long");
    out->every_steps = c->ckpt_every_steps;
    out->every_seconds = c->ckpt_every_seconds;
    out->keep_last = c->ckpt_keep_last;
    return MXP_OK;
}

/* Remove temp files left by saves that were killed. */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[MXP_CKPT_PATH_MAX + 256];
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "." CKPT_PREFIX, strlen(CKPT_PREFIX) + 1) != 0 ||
            !strstr(de->d_name, ".tmp-"))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) == 0) mxp_log(MXP_LOG_INFO, "removed %s (an interrupted save)", p);
    }
    closedir(d);
}

mxp_status mxp_ckpt_manager_create(const mxp_ckpt_policy *p, mxp_ckpt_manager **out,
                                   mxp_error *err) {
    if (!p || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_manager_create: NULL");
    *out = NULL;
    if (!p->dir[0] || p->every_steps < 0 || !(p->every_seconds >= 0) ||
        !isfinite(p->every_seconds) || p->keep_last < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "checkpoint policy dir='%.200s' every_steps=%lld every_seconds=%g "
                             "keep_last=%lld; accepted: non-empty dir, every_steps >= 0, "
                             "every_seconds >= 0, keep_last >= 1",
                             p->dir, (long long)p->every_steps, p->every_seconds,
                             (long long)p->keep_last);
    int e = mxp_mkdirs(p->dir);
    if (e != 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot create checkpoint directory '%s': %s", p->dir,
                             strerror(e));
    mxp_ckpt_manager *m = mxp_calloc(1, sizeof *m);
    if (!m) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint manager");
    m->p = *p;
    m->last_save = mxp_time_now();
    m->last_step = -1;
    m->healthy = true;
    remove_stale_temps(p->dir);
    *out = m;
    return MXP_OK;
}

void mxp_ckpt_manager_destroy(mxp_ckpt_manager *m) {
    if (!m) return;
    mxp_free(m->guard_state);
    mxp_free(m->run_id);
    mxp_free(m->workload);
    mxp_free(m->data_signature);
    mxp_free(m->workload_meta);
    mxp_free(m->run_state);
    mxp_free(m);
}

/* *dst = a copy of src (NULL stays NULL); false when out of memory. */
static bool set_str(char **dst, const char *src) {
    char *c = src ? mxp_strdup(src) : NULL;
    if (src && !c) return false;
    mxp_free(*dst);
    *dst = c;
    return true;
}

mxp_status mxp_ckpt_manager_set_run(mxp_ckpt_manager *m, const char *run_id,
                                    const char *workload, const char *data_signature,
                                    mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_manager_set_run: NULL");
    if (!set_str(&m->run_id, run_id) || !set_str(&m->workload, workload) ||
        !set_str(&m->data_signature, data_signature))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint run metadata");
    return MXP_OK;
}

mxp_status mxp_ckpt_manager_set_workload_meta(mxp_ckpt_manager *m, const char *json,
                                              mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_manager_set_workload_meta");
    if (!set_str(&m->workload_meta, json))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint workload metadata");
    return MXP_OK;
}

mxp_status mxp_ckpt_manager_set_run_state(mxp_ckpt_manager *m, const char *json,
                                          mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_manager_set_run_state");
    if (!set_str(&m->run_state, json))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "checkpoint run state");
    return MXP_OK;
}

const char *mxp_ckpt_manager_dir(const mxp_ckpt_manager *m) { return m->p.dir; }
const char *mxp_ckpt_manager_last_path(const mxp_ckpt_manager *m) { return m->last_path; }

void mxp_ckpt_manager_set_health(mxp_ckpt_manager *m, bool healthy, const char *guard_state) {
    if (!m) return;
    m->healthy = healthy;
    mxp_free(m->guard_state);
    m->guard_state = guard_state ? mxp_strdup(guard_state) : NULL;
}

mxp_status mxp_ckpt_manager_after_step(mxp_ckpt_manager *m, mxp_trainer *t, const mxp_config *cfg,
                                       const mxp_data_position *pos, bool force, bool *saved,
                                       mxp_error *err) {
    if (saved) *saved = false;
    if (!m || !t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "checkpoint manager: NULL");
    mxp_trainer_state ts;
    mxp_trainer_get_state(t, &ts);
    double now = mxp_time_now();
    bool due = force || (m->p.every_steps > 0 && ts.training_steps % m->p.every_steps == 0) ||
               (m->p.every_seconds > 0 && now - m->last_save >= m->p.every_seconds);
    if (!due || ts.training_steps == m->last_step) return MXP_OK;
    char path[MXP_CKPT_PATH_MAX];
    mxp_status s = mxp_ckpt_path_for(m->p.dir, ts.training_steps, path, sizeof path, err);
    if (s != MXP_OK) return s;
    mxp_ckpt_save_args a = {.trainer = t, .config = cfg, .pos = pos, .healthy = m->healthy,
                            .guard_state = m->guard_state, .run_id = m->run_id,
                            .workload = m->workload, .data_signature = m->data_signature,
                            .workload_meta = m->workload_meta, .run_state = m->run_state};
    bool healthy = false;
    if ((s = mxp_ckpt_save(path, &a, &healthy, err)) != MXP_OK) return s;
    m->last_save = mxp_time_now();
    m->last_step = ts.training_steps;
    snprintf(m->last_path, sizeof m->last_path, "%s", path);
    mxp_log(MXP_LOG_INFO, "checkpoint: step %lld -> %s%s", (long long)ts.training_steps, path,
            healthy ? "" : " (marked UNHEALTHY)");
    mxp_error pe = {0};
    if (mxp_ckpt_prune(m->p.dir, m->p.keep_last, &pe) != MXP_OK)
        mxp_log(MXP_LOG_WARN, "checkpoint retention: %s", pe.msg);
    if (saved) *saved = true;
    return MXP_OK;
}

mxp_status mxp_ckpt_manager_rollback(mxp_ckpt_manager *m, mxp_trainer *t, const char *reason,
                                     mxp_data_position *pos, mxp_ckpt_rollback_result *res,
                                     mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_manager_rollback: NULL");
    mxp_status s = mxp_ckpt_rollback(m->p.dir, t, reason, pos, res, err);
    if (s == MXP_OK) m->last_step = -1;
    return s;
}
