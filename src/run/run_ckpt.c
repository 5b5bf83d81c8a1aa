/* run/run_ckpt.c: checkpoints of a run, run directories, resume
 * (include/mixprec/run.h, docs/run.md).
 *
 * Entry points: run_ckpt_open, run_ckpt_after_step (run_internal.h),
 * mxp_run_resume, mxp_run_save.
 *
 * Rules. Every run has an id (32 hex digits), recorded in
 * output.dir/run.json and in each of its checkpoints ("run_id"), beside the
 * workload name and the provider's data signature. A new run in a
 * directory whose checkpoint directory already holds checkpoints is
 * refused before anything is written. A resume takes the newest checkpoint
 * that verifies against the run's model and refuses one of another
 * workload or data signature; resuming a run whose last train() call had
 * finished trains nothing and writes nothing.
 */
#include "run/run_internal.h"
#include "config/config_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The value of "key" in a flat JSON object of strings ({"k": "v", ...}),
 * unescaped no further than the run id / workload names need; "" when
 * absent. */
static void json_str_get(const char *json, const char *key, char *out, size_t n) {
    out[0] = '\0';
    if (!json) return;
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p) return;
    p += strlen(pat);
    while (*p == ' ' || *p == ':') p++;
    if (*p++ != '"') return;
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < n) out[i++] = *p++;
    out[i] = '\0';
}

/* The number text of "key" in a JSON object ("" when absent). */
static void json_num_get(const char *json, const char *key, char *out, size_t n) {
    out[0] = '\0';
    if (!json) return;
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return;
    p += strlen(pat);
    size_t i = 0;
    while ((*p == '-' || (*p >= '0' && *p <= '9')) && i + 1 < n) out[i++] = *p++;
    out[i] = '\0';
}

/* A fresh run id: 128 bits from the clock, the process id and the address
 * of the run, mixed through the counter-based RNG. */
void run_new_id(mxp_run *r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
                    (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)r;
    mxp_rng g;
    mxp_rng_init(&g, seed);
    for (int i = 0; i < 4; i++)
        snprintf(r->run_id + 8 * i, sizeof r->run_id - 8 * (size_t)i, "%08x",
                 (unsigned)mxp_rng_u32(&g));
}

/* output.dir/run.json: {"run_id","workload","created_at"}; written once
 * (a temp file renamed into place). */
static mxp_status write_run_json(const mxp_run *r, mxp_error *err) {
    char path[MXP_CKPT_PATH_MAX], tmp[MXP_CKPT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/run.json", r->cfg.output_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int e = mxp_mkdirs(r->cfg.output_dir);
    FILE *f = e == 0 ? fopen(tmp, "w") : NULL;
    if (!f)
        return mxp_error_set(err, MXP_ERR_IO, "cannot write '%s': %s", path,
                             strerror(e ? e : errno));
    fprintf(f, "{\"run_id\":\"%s\",\"workload\":\"%s\",\"created_at\":%lld}\n", r->run_id,
            r->wl.name, (long long)time(NULL));
    bool ok = fflush(f) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        return mxp_error_set(err, MXP_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    return MXP_OK;
}

/* The run id recorded in output.dir/run.json ("" when none). */
static void read_run_json(const char *dir, char *id, size_t n) {
    char path[MXP_CKPT_PATH_MAX], buf[512] = "";
    snprintf(path, sizeof path, "%s/run.json", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        buf[k] = '\0';
        fclose(f);
    }
    json_str_get(buf, "run_id", id, n);
}

mxp_status run_ckpt_open(mxp_run *r, bool resuming, mxp_error *err) {
    mxp_ckpt_policy pol;
    mxp_status s = mxp_ckpt_policy_from_config(&r->cfg, &pol, err);
    if (s != MXP_OK) return s;
    if (!resuming) { /* a new run: the directory must not hold another run */
        mxp_ckpt_entry *list = NULL;
        size_t n = 0;
        if ((s = mxp_ckpt_list(pol.dir, &list, &n, err)) != MXP_OK) return s;
        int64_t newest = n ? list[n - 1].step : 0;
        mxp_free(list);
        if (n > 0) {
            char other[RUN_ID_LEN];
            read_run_json(r->cfg.output_dir, other, sizeof other);
            return mxp_error_set(err, MXP_ERR_STATE,
                                 "output.dir '%s' holds the checkpoints of another run (run %s, "
                                 "newest step %lld in %s); accepted: continue that run with "
                                 "--resume %s (mxp_run_options.resume), or start this one in a "
                                 "new output.dir",
                                 r->cfg.output_dir, other[0] ? other : "without an id",
                                 (long long)newest, pol.dir, r->cfg.output_dir);
        }
    }
    if ((s = mxp_ckpt_manager_create(&pol, &r->ckpt, err)) != MXP_OK) return s;
    r->own_ckpt = true;
    mxp_guard_set_checkpoints(r->guard, r->ckpt); /* rollback may use the checkpoints */
    if (!resuming) {
        run_new_id(r);
        if ((s = write_run_json(r, err)) != MXP_OK) return s;
    }
    mxp_status s2 = mxp_ckpt_manager_set_run(r->ckpt, r->run_id[0] ? r->run_id : NULL,
                                             r->wl.name, r->data_sig, err);
    if (s2 == MXP_OK && r->wl.checkpoint_meta)
        s2 = mxp_ckpt_manager_set_workload_meta(r->ckpt, r->wl.checkpoint_meta(r->wl.self), err);
    return s2;
}

mxp_status run_ckpt_after_step(mxp_run *r, bool force, mxp_error *err) {
    bool saved = false;
    mxp_status s = mxp_ckpt_manager_after_step(r->ckpt, r->trainer, &r->cfg, &r->pos, force,
                                               &saved, err);
    if (saved) r->ckpts_written++;
    return s;
}

/* path (file, checkpoint directory or run directory) -> a checkpoint file:
 * in a directory, the newest one that verifies against the model. */
static mxp_status resolve(mxp_run *r, const char *path, char *out, size_t n, mxp_error *err) {
    if (!is_dir(path)) {
        snprintf(out, n, "%s", path);
        return MXP_OK;
    }
    char dir[MXP_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/checkpoints", path);
    if (!is_dir(dir)) snprintf(dir, sizeof dir, "%s", path);
    return mxp_ckpt_find_latest(dir, false, r->model, out, n, NULL, err);
}

/* The checkpoint belongs to this run's workload and data. */
static mxp_status check_match(const mxp_run *r, const mxp_st_file *f, const char *path,
                              mxp_error *err) {
    char wl[64];
    const char *w = mxp_st_file_meta(f, "workload");
    if (w)
        snprintf(wl, sizeof wl, "%s", w);
    else
        json_str_get(mxp_ckpt_config_text(f), "model.workload", wl, sizeof wl);
    if (wl[0] && strcmp(wl, r->wl.name) != 0)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "checkpoint '%s' is of workload %s; this run trains %s; accepted: "
                             "a checkpoint of model.workload=%s", path, wl, r->wl.name,
                             r->wl.name);
    /* the widths the checkpoint's workload metadata records are the ones
     * this run's model is built with (an edited out_dim is not ignored) */
    const char *mine = r->wl.checkpoint_meta ? r->wl.checkpoint_meta(r->wl.self) : NULL;
    if (mine) {
        const char *theirs = mxp_st_file_meta(f, "workload_meta");
        json_t *a = json_loads(mine, 0, NULL);
        json_t *b = theirs ? json_loads(theirs, JSON_REJECT_DUPLICATES, NULL) : NULL;
        const char *key = NULL;
        json_t *v;
        char bad[160] = "";
        /* the provider's integer fields (widths) must be the file's; a
         * provider without any (the GPT's vocabulary) is checked by shapes */
        bool widths = false;
        json_object_foreach(a, key, v) widths = widths || json_is_integer(v);
        if (widths && !json_is_object(b))
            snprintf(bad, sizeof bad, "is %s", theirs ? "not a JSON object" : "missing");
        else if (widths)
            json_object_foreach(a, key, v) {
                json_t *u = json_object_get(b, key);
                if (json_is_integer(v) && !(json_is_integer(u) &&
                                            json_integer_value(u) == json_integer_value(v))) {
                    snprintf(bad, sizeof bad, "has %.60s = %lld, this run's model %lld", key,
                             json_is_integer(u) ? (long long)json_integer_value(u) : -1LL,
                             (long long)json_integer_value(v));
                    break;
                }
            }
        json_decref(a);
        json_decref(b);
        if (bad[0])
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "checkpoint '%s': metadata 'workload_meta' %s; accepted: a "
                                 "checkpoint of the same model and data widths",
                                 path, bad);
    }
    const char *sig = mxp_st_file_meta(f, "data_signature");
    if (sig && r->data_sig[0] && strcmp(sig, r->data_sig) != 0)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "checkpoint '%s' was trained on data '%s'; this run's data is '%s'; "
                             "accepted: the same data shape", path, sig, r->data_sig);
    return MXP_OK;
}

mxp_status mxp_run_resume(mxp_run *r, const char *path, mxp_error *err) {
    if (!r || !path || !*path)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_resume: NULL or empty path");
    char file[MXP_CKPT_PATH_MAX];
    mxp_status s = resolve(r, path, file, sizeof file, err);
    if (s != MXP_OK) return s;
    mxp_st_file *f = NULL;
    mxp_ckpt_info info;
    if ((s = mxp_st_file_read(file, &f, err)) != MXP_OK) return s;
    s = check_match(r, f, file, err);
    if (s == MXP_OK) { /* model shape: names and shapes of every tensor */
        s = mxp_ckpt_check(f, r->model, &info, err);
        if (s != MXP_OK && err) err->status = MXP_ERR_CONFIG;
        if (s != MXP_OK) s = MXP_ERR_CONFIG;
    }
    if (s == MXP_OK) s = mxp_ckpt_load_file(f, r->trainer, &info, err);
    /* the guard counts on from the checkpoint's step attempts (a fault
     * window already passed is not re-armed) */
    char attempts[32];
    json_num_get(mxp_st_file_meta(f, "guard_state"), "steps", attempts, sizeof attempts);
    if (s == MXP_OK && r->guard)
        mxp_guard_set_attempts(r->guard, attempts[0] ? strtoll(attempts, NULL, 10) : info.step);
    if (s == MXP_OK) s = run_eval_restore(r, mxp_st_file_meta(f, "run_state"), file, err);
    char id[RUN_ID_LEN] = "";
    const char *mid = mxp_st_file_meta(f, "run_id");
    if (mid) snprintf(id, sizeof id, "%s", mid);
    mxp_st_file_destroy(f);
    if (s != MXP_OK) return s;
    /* a train() call in progress continues at its global micro-batch (the
     * position records all ranks' rows): refused here, before anything is
     * trained or recorded, when this run's batch size and world size do not
     * give it */
    const mxp_data_position *ip = &info.pos;
    if (ip->run_total > 0 && ip->run_step < ip->run_total &&
        r->cfg.batch_size * r->dp_size != ip->batch_size)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "checkpoint '%s' is at step %lld of %lld of a train() call with a "
                             "micro-batch of %lld rows over all ranks; training.batch_size=%lld "
                             "on %d rank(s) gives %lld; accepted: training.batch_size=%s%lld "
                             "(or let the run finish that call first)",
                             file, (long long)ip->run_step, (long long)ip->run_total,
                             (long long)ip->batch_size, (long long)r->cfg.batch_size, r->dp_size,
                             (long long)(r->cfg.batch_size * r->dp_size),
                             ip->batch_size % r->dp_size ? "(not possible on this many ranks) "
                                                         : "",
                             (long long)(ip->batch_size / r->dp_size));
    r->pos = info.pos;
    r->resumed = true;
    /* a finished run is complete unless the config asks for more epochs,
     * which a new train() call then adds */
    const bool ended =
        mxp_data_position_done(&info.pos) || (info.pos.run_total == 0 && info.step > 0);
    if (r->early_stopped) { /* early stopping finished the run */
        r->finished_before_resume = true;
    } else if (!ended) {
        r->resume_epochs = info.pos.run_epochs; /* the interrupted call */
    } else if (r->cfg.epochs > info.pos.epoch) {
        mxp_data_position_end(&r->pos);
        r->resume_epochs = r->cfg.epochs - info.pos.epoch;
    } else {
        r->finished_before_resume = true;
    }
    if (!id[0]) read_run_json(r->cfg.output_dir, id, sizeof id);
    if (!id[0]) run_new_id(r);
    else snprintf(r->run_id, sizeof r->run_id, "%s", id);
    if (r->ckpt) { /* continuing into this directory: it belongs to the run */
        char here[RUN_ID_LEN];
        read_run_json(r->cfg.output_dir, here, sizeof here);
        if (here[0] && strcmp(here, r->run_id) != 0)
            return mxp_error_set(err, MXP_ERR_STATE,
                                 "output.dir '%s' belongs to run %s; resuming run %s there would "
                                 "mix the two; accepted: --resume into a new output.dir",
                                 r->cfg.output_dir, here, r->run_id);
        if (!r->finished_before_resume && strcmp(here, r->run_id) != 0 &&
            (s = write_run_json(r, err)) != MXP_OK)
            return s;
        s = mxp_ckpt_manager_set_run(r->ckpt, r->run_id, r->wl.name, r->data_sig, err);
        if (s != MXP_OK) return s;
        if (r->wl.checkpoint_meta &&
            (s = mxp_ckpt_manager_set_workload_meta(r->ckpt, r->wl.checkpoint_meta(r->wl.self),
                                                    err)) != MXP_OK)
            return s;
    }
    mxp_log(MXP_LOG_INFO, "resumed run %s from %s: step %lld, epoch %lld, step %lld of %lld%s",
            r->run_id, file, (long long)info.step, (long long)info.pos.epoch + 1,
            (long long)info.pos.run_step, (long long)info.pos.run_total,
            r->finished_before_resume ? " (the run had finished: nothing to train)" : "");
    return MXP_OK;
}

mxp_status mxp_run_save(mxp_run *r, const char *path, mxp_error *err) {
    if (!r || !path) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_save: NULL");
    char gs[8192], rs[RUN_STATE_MAX];
    run_eval_state_json(r, rs, sizeof rs);
    mxp_ckpt_save_args a = {.trainer = r->trainer, .config = &r->cfg, .pos = &r->pos,
                            .healthy = true, .run_id = r->run_id[0] ? r->run_id : NULL,
                            .workload = r->wl.name, .data_signature = r->data_sig,
                            .workload_meta = r->wl.checkpoint_meta
                                                 ? r->wl.checkpoint_meta(r->wl.self)
                                                 : NULL,
                            .run_state = r->evals > 0 ? rs : NULL};
    if (r->guard && mxp_guard_status_json(r->guard, gs, sizeof gs) > 0) a.guard_state = gs;
    return mxp_ckpt_save(path, &a, NULL, err);
}

/* ---- the config of a resume ------------------------------------------------ */

static mxp_status put_kv(mxp_config_builder *b, const char *key, const char *val,
                         mxp_error *err) {
    char kv[MXP_CKPT_PATH_MAX + 64];
    if ((size_t)snprintf(kv, sizeof kv, "%s=%s", key, val) >= sizeof kv)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: value of %zu bytes is too long", key,
                             strlen(val));
    return mxp_config_apply_override(b, kv, err);
}

/* model.layers is set in b (not "none"). */
static bool layers_set(const mxp_config_builder *b) {
    char v[16];
    mxp_config_key_value(b, mxp_config_key_find("model.layers"), v, sizeof v);
    return strcmp(v, "none") != 0;
}

mxp_status mxp_run_resume_config(const char *path, mxp_config_builder *b, char *ckpt, size_t n,
                                 mxp_error *err) {
    if (!path || !b)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_resume_config: NULL");
    char file[MXP_CKPT_PATH_MAX];
    bool run_dir = false;
    mxp_status s = MXP_OK;
    if (is_dir(path)) { /* a run directory (with checkpoints/) or a checkpoint directory */
        char dir[MXP_CKPT_PATH_MAX];
        if ((size_t)snprintf(dir, sizeof dir, "%s/checkpoints", path) >= sizeof dir)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "resume path '%.200s...' is too long",
                                 path);
        run_dir = is_dir(dir);
        if (!run_dir) snprintf(dir, sizeof dir, "%s", path);
        s = mxp_ckpt_find_latest(dir, false, NULL, file, sizeof file, NULL, err);
    } else if ((size_t)snprintf(file, sizeof file, "%s", path) >= sizeof file) {
        s = mxp_error_set(err, MXP_ERR_INVALID_ARG, "resume path '%.200s...' is too long", path);
    }
    if (s != MXP_OK) return s;
    if (ckpt && n) snprintf(ckpt, n, "%s", file);
    mxp_st_file *f = NULL;
    mxp_ckpt_info info;
    s = mxp_st_file_read(file, &f, err);
    if (s == MXP_OK) s = mxp_ckpt_check(f, NULL, &info, err);
    if (s == MXP_OK) s = mxp_ckpt_apply_config(f, b, err);
    /* the mode the run was in when saved (after a fallback: the fallback's) */
    if (s == MXP_OK) s = put_kv(b, "training.precision", mxp_precision_name(info.precision), err);
    /* a fallback out of fp16/mixed_fp16 left no FP16 operands: the saved
     * run accumulates in FP32 now, whatever training.fp16_accumulate said */
    if (s == MXP_OK && info.precision != MXP_PRECISION_FP16 &&
        info.precision != MXP_PRECISION_MIXED_FP16)
        s = put_kv(b, "training.fp16_accumulate", "fp32", err);
    /* the checkpoint holds the weights: a model.init_from file that is gone
     * (Python's Run(init=state_dict) wrote it to a temporary folder) is not
     * needed */
    /* a checkpoint from before model.layers refused shape keys beside it
     * may record them (they had no effect): their defaults, so it resumes */
    static const char *const shape_keys[] = {"model.hidden", "model.depth", "model.activation",
                                             "model.layernorm"};
    for (size_t j = 0; s == MXP_OK && layers_set(b) && j < 4; j++) {
        const mxp_config_key *k = mxp_config_key_at(mxp_config_key_find(shape_keys[j]));
        mxp_key_value dv;
        char def[64];
        mxp_config_value_default(k, &dv);
        mxp_config_value_format(k, &dv, def, sizeof def);
        s = put_kv(b, shape_keys[j], def, err);
    }
    mxp_config stored;
    if (s == MXP_OK && mxp_config_resolve(b, &stored, NULL) == MXP_OK &&
        strcmp(stored.init_from, "none") != 0 && access(stored.init_from, F_OK) != 0)
        s = put_kv(b, "model.init_from", "none", err);
    if (s == MXP_OK && run_dir) { /* runs/latest -> runs/version_<N>: the run's own */
        char own[MXP_CKPT_PATH_MAX];
        run_dir_follow_link(path, own, sizeof own);
        s = put_kv(b, "output.dir", own, err);
    }
    mxp_st_file_destroy(f);
    return s;
}
