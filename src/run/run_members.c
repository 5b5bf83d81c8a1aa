/* run/run_members.c: validation of an ensemble member by member
 * (model.ensemble=E > 1; docs/world_models.md "Elites", docs/run.md
 * "Validation during training").
 *
 * Entry points (run_internal.h): run_members_init, run_members_free,
 * run_members_after_eval, run_members_save_best, run_members_json,
 * run_members_restore; mxp_run_elites (run.h).
 *
 * As mbrl-lib's ModelTrainer with an ensemble: each validation measures
 * every member's loss (mxp_run_eval.member_loss); member e improves when
 * its loss is finite and the first or below its own best by more than
 * training.early_stop.min_delta; the validation counts as an improvement
 * of the run (early stopping's patience restarts) when any member
 * improved. The model.elites=K members with the lowest losses of this
 * validation become the elites (ties: the lower index; non-finite losses
 * last), which the model's consumers (evaluation, open-loop error,
 * predict) average over from then on.
 *
 * Per-member keep-best: the run keeps a host copy of every member's
 * parameters of record and optimizer moments as they were at that
 * member's best validation (refreshed, for the members that improved,
 * with one tensor get per role). best.safetensors is written when any
 * member improved and holds the assembled ensemble: member e's parameters
 * and Adam moments from its own best validation; everything that is not
 * per member (step, data position, scaler, FP8 history, RNG, guard) is
 * the state at this validation; its run_state names as elites the K
 * members with the lowest best losses. The live weights go into the
 * trainer again after the write (tensor sets of the same bytes: the
 * training continues bit for bit as without keep-best). A resumed run
 * reads its copies back from OUTPUT_DIR/best.safetensors, so a run stopped
 * and resumed writes the best file the uninterrupted one does.
 */
#include "run/run_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Roles a checkpoint stores per parameter: the parameters of record and
 * the optimizer moments (optim.v absent under SGD). */
static const mxp_tensor_role kRoles[RUN_MEM_ROLES] = {MXP_TENSOR_PARAM, MXP_TENSOR_OPTIM_M,
                                                      MXP_TENSOR_OPTIM_V};

void run_members_init(mxp_run *r) {
    run_members *m = &r->mem;
    memset(m, 0, sizeof *m);
    const int E = mxp_model_ensemble(r->model);
    if (E < 2) return;
    m->E = E;
    m->K = r->cfg.elites >= 1 && r->cfg.elites <= E ? (int)r->cfg.elites : E;
    m->elites = m->best_elites = mxp_model_elites(r->model);
    for (int e = 0; e < E; e++) m->best[e] = m->last[e] = NAN;
}

void run_members_free(mxp_run *r) {
    for (int i = 0; i < RUN_MEM_ROLES; i++) {
        mxp_free(r->mem.snap[i]);
        mxp_free(r->mem.live[i]);
        r->mem.snap[i] = r->mem.live[i] = NULL;
    }
}

uint64_t mxp_run_elites(const mxp_run *r) {
    if (!r) return 0;
    return mxp_model_elites(r->model);
}

/* The K members of lowest loss v[0..E) (non-finite last, ties: lower index). */
static uint64_t lowest(const double *v, int E, int K) {
    uint64_t pick = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (pick >> e & 1u) continue;
            if (best < 0) {
                best = e;
                continue;
            }
            const bool fe = isfinite(v[e]), fb = isfinite(v[best]);
            if ((fe && !fb) || (fe && fb && v[e] < v[best])) best = e;
        }
        pick |= 1ull << best;
    }
    return pick;
}

static bool alloc_role(mxp_run *r, int i, mxp_status *s, mxp_error *err);

/* Role i's whole slab into the live buffer (allocated on first use, and
 * again after a precision switch changed its storage: then the snapshot
 * restarts); *present false when the role is absent. */
static mxp_status get_slab(mxp_run *r, int i, bool *present, mxp_error *err) {
    run_members *m = &r->mem;
    const size_t before = m->bytes[i];
    const mxp_dtype dt_before = m->dtype[i];
    mxp_status s;
    *present = alloc_role(r, i, &s, err);
    if (!*present) return s;
    if (before != m->bytes[i] || dt_before != m->dtype[i]) m->snap_valid = false;
    return mxp_trainer_tensor_get(r->trainer, kRoles[i], NULL, m->dtype[i], m->live[i],
                                  m->bytes[i], err);
}

/* Copy the improved members' blocks of the live slabs into the snapshot
 * (every member on the first call). */
static mxp_status snapshot(mxp_run *r, uint64_t improved, mxp_error *err) {
    run_members *m = &r->mem;
    bool was_valid = m->snap_valid;
    bool present[RUN_MEM_ROLES];
    for (int i = 0; i < RUN_MEM_ROLES; i++) {
        mxp_status s = get_slab(r, i, &present[i], err);
        if (s != MXP_OK) return s;
    }
    if (m->snap_valid != was_valid && was_valid)
        mxp_log(MXP_LOG_WARN, "keep-best: the parameter storage changed (a precision switch); "
                              "best.safetensors restarts from the current weights of every "
                              "member");
    const uint64_t copy = m->snap_valid ? improved : ~0ull;
    for (int i = 0; i < RUN_MEM_ROLES; i++) {
        if (!present[i]) continue;
        const size_t blk = m->bytes[i] / (size_t)m->E;
        for (int e = 0; e < m->E; e++)
            if (copy >> e & 1u)
                memcpy((char *)m->snap[i] + (size_t)e * blk, (char *)m->live[i] + (size_t)e * blk,
                       blk);
    }
    if (!m->snap_valid) /* members not improved keep their current weights as their best */
        for (int e = 0; e < m->E; e++)
            if (!(improved >> e & 1u)) m->snap_step[e] = m->now_step;
    m->snap_valid = true;
    return MXP_OK;
}

mxp_status run_members_after_eval(mxp_run *r, const mxp_run_eval *ev, int64_t step,
                                  uint64_t *improved, mxp_error *err) {
    run_members *m = &r->mem;
    *improved = 0;
    if (m->E < 2 || ev->members != m->E)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "validation of an ensemble of %d: the evaluation reported %d "
                             "members' losses; accepted: one per member (mxp_run_eval.members)",
                             m->E, ev->members);
    const double d = r->cfg.early_stop_min_delta;
    for (int e = 0; e < m->E; e++) {
        const double L = ev->member_loss[e];
        m->last[e] = L;
        if (isfinite(L) && (!isfinite(m->best[e]) || L < m->best[e] - d)) {
            m->best[e] = L;
            m->best_step[e] = step;
            *improved |= 1ull << e;
        }
    }
    m->now_step = step;
    m->elites = lowest(m->last, m->E, m->K);
    m->best_elites = lowest(m->best, m->E, m->K);
    mxp_status s = mxp_model_set_elites(r->model, m->elites, err);
    if (s == MXP_OK && *improved && r->cfg.keep_best && r->ckpt) {
        s = snapshot(r, *improved, err);
        for (int e = 0; s == MXP_OK && e < m->E; e++)
            if (*improved >> e & 1u) m->snap_step[e] = step;
    }
    return s;
}

double run_members_best_loss(const mxp_run *r) {
    const run_members *m = &r->mem;
    double sum = 0.0;
    int n = 0;
    for (int e = 0; e < m->E; e++)
        if (m->best_elites >> e & 1u) {
            sum += m->best[e];
            n++;
        }
    return n ? sum / n : NAN;
}

/* Set every present role's slab from src[] (snap or live). */
static mxp_status set_slabs(mxp_run *r, void *const *src, mxp_error *err) {
    const run_members *m = &r->mem;
    for (int i = 0; i < RUN_MEM_ROLES; i++) {
        if (!m->bytes[i]) continue;
        mxp_status s =
            mxp_trainer_tensor_set(r->trainer, kRoles[i], NULL, m->dtype[i], src[i], m->bytes[i], err);
        if (s != MXP_OK) return s;
    }
    return MXP_OK;
}

mxp_status run_members_save_best(mxp_run *r, const char *path, mxp_error *err) {
    run_members *m = &r->mem;
    bool all_now = m->best_elites == m->elites;
    for (int e = 0; e < m->E && all_now; e++) all_now = m->snap_step[e] == m->now_step;
    if (all_now || !m->snap_valid) return mxp_run_save(r, path, err); /* best == live */
    mxp_status s = set_slabs(r, m->snap, err);
    if (s == MXP_OK) s = mxp_model_set_elites(r->model, m->best_elites, err);
    m->writing_best = true;
    if (s == MXP_OK) s = mxp_run_save(r, path, err);
    m->writing_best = false;
    /* the live state again, whatever happened above */
    mxp_error e2;
    mxp_status s2 = set_slabs(r, m->live, &e2);
    if (s2 == MXP_OK) s2 = mxp_model_set_elites(r->model, m->elites, &e2);
    if (s2 != MXP_OK && s == MXP_OK) {
        if (err) *err = e2;
        s = s2;
    }
    return s;
}

/* Append `"key":[...]` of E numbers (null for non-finite) or indices. */
static size_t put_arr(char *b, size_t n, size_t at, const char *key, const double *v,
                      const int64_t *iv, uint64_t mask, int E) {
    if (at >= n) return at;
    at += (size_t)snprintf(b + at, n - at, "%s\"%s\":[", at ? "," : "", key);
    bool first = true;
    for (int e = 0; e < E && at < n; e++) {
        if (!v && !iv && !(mask >> e & 1u)) continue;
        const char *sep = first ? "" : ",";
        first = false;
        if (v)
            at += isfinite(v[e]) ? (size_t)snprintf(b + at, n - at, "%s%.17g", sep, v[e])
                                 : (size_t)snprintf(b + at, n - at, "%snull", sep);
        else if (iv)
            at += (size_t)snprintf(b + at, n - at, "%s%lld", sep, (long long)iv[e]);
        else
            at += (size_t)snprintf(b + at, n - at, "%s%d", sep, e);
    }
    if (at < n) at += (size_t)snprintf(b + at, n - at, "]");
    return at;
}

size_t run_members_json(const mxp_run *r, bool state, char *b, size_t n) {
    const run_members *m = &r->mem;
    if (n) b[0] = '\0';
    if (m->E < 2 || n == 0) return 0;
    size_t at = 0;
    const uint64_t el = m->writing_best ? m->best_elites : m->elites;
    at = put_arr(b, n, at, "elites", NULL, NULL, el, m->E);
    at = put_arr(b, n, at, "member_val_loss", m->last, NULL, 0, m->E);
    at = put_arr(b, n, at, "member_best_val_loss", m->best, NULL, 0, m->E);
    at = put_arr(b, n, at, "member_best_step", NULL, m->best_step, 0, m->E);
    if (state && at < n)
        at += (size_t)snprintf(b + at, n - at, ",\"members\":%d", m->E);
    return at < n ? at : n - 1;
}

/* A JSON array of E numbers (null: NaN) into v. */
static bool read_nums(json_t *a, int E, double *v, bool integers, int64_t *iv) {
    if (!json_is_array(a) || (int)json_array_size(a) != E) return false;
    for (int e = 0; e < E; e++) {
        json_t *x = json_array_get(a, (size_t)e);
        if (integers) {
            if (!json_is_integer(x) || json_integer_value(x) < 0) return false;
            iv[e] = (int64_t)json_integer_value(x);
        } else if (json_is_null(x)) {
            v[e] = NAN;
        } else if (json_is_number(x) && isfinite(json_number_value(x))) {
            v[e] = json_number_value(x);
        } else {
            return false;
        }
    }
    return true;
}

mxp_status run_members_restore(mxp_run *r, json_t *o, const char *file, mxp_error *err) {
    run_members *m = &r->mem;
    json_t *jm = json_object_get(o, "members");
    if (!jm) return MXP_OK; /* one model, or a checkpoint from before elites */
    if (m->E < 2 || !json_is_integer(jm) || json_integer_value(jm) != m->E)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "checkpoint '%s': metadata run_state.members is not the model's %d "
                             "ensemble members", file, m->E);
    double last[MXP_MODEL_MAX_ENSEMBLE], best[MXP_MODEL_MAX_ENSEMBLE];
    int64_t step[MXP_MODEL_MAX_ENSEMBLE];
    json_t *je = json_object_get(o, "elites");
    uint64_t el = 0;
    bool ok = json_is_array(je) && json_array_size(je) >= 1;
    for (size_t i = 0; ok && i < json_array_size(je); i++) {
        json_t *x = json_array_get(je, i);
        ok = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) < m->E &&
             !(el >> json_integer_value(x) & 1u);
        if (ok) el |= 1ull << json_integer_value(x);
    }
    if (!ok || !read_nums(json_object_get(o, "member_val_loss"), m->E, last, false, NULL) ||
        !read_nums(json_object_get(o, "member_best_val_loss"), m->E, best, false, NULL) ||
        !read_nums(json_object_get(o, "member_best_step"), m->E, NULL, true, step))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "checkpoint '%s': metadata run_state.elites / member_val_loss / "
                             "member_best_val_loss / member_best_step are not %d members' "
                             "indices, losses (or null) and steps", file, m->E);
    memcpy(m->last, last, sizeof last);
    memcpy(m->best, best, sizeof best);
    memcpy(m->best_step, step, sizeof step);
    m->elites = el;
    m->best_elites = lowest(m->best, m->E, m->K);
    return mxp_model_set_elites(r->model, el, err);
}

/* Allocate role i's buffers for the trainer's current layout (no
 * transfer); false when the role is absent. */
static bool alloc_role(mxp_run *r, int i, mxp_status *s, mxp_error *err) {
    run_members *m = &r->mem;
    mxp_dtype dt;
    mxp_error ignore;
    const size_t bytes = mxp_trainer_tensor_bytes(r->trainer, kRoles[i]);
    *s = MXP_OK;
    if (mxp_trainer_tensor_dtype(r->trainer, kRoles[i], &dt, &ignore) != MXP_OK || !bytes)
        return false;
    if (m->bytes[i] == bytes && m->dtype[i] == dt) return true;
    mxp_free(m->snap[i]);
    mxp_free(m->live[i]);
    m->snap[i] = mxp_calloc(bytes, 1);
    m->live[i] = mxp_calloc(bytes, 1);
    m->bytes[i] = bytes;
    m->dtype[i] = dt;
    if (!m->snap[i] || !m->live[i]) {
        m->bytes[i] = 0;
        *s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "keep-best: %zu bytes", bytes);
        return false;
    }
    return true;
}

mxp_status run_members_load_best(mxp_run *r, const char *path, mxp_error *err) {
    run_members *m = &r->mem;
    m->snap_valid = false;
    if (m->E < 2 || !r->cfg.keep_best) return MXP_OK;
    mxp_st_file *f = NULL;
    mxp_error e2;
    if (mxp_st_file_read(path, &f, &e2) != MXP_OK) {
        mxp_log(MXP_LOG_WARN, "keep-best: cannot read %s (%s); the members' kept weights "
                              "restart from the next validation", path, e2.msg);
        return MXP_OK;
    }
    mxp_status s = MXP_OK;
    bool ok = true;
    bool present[RUN_MEM_ROLES];
    for (int i = 0; i < RUN_MEM_ROLES && s == MXP_OK; i++) present[i] = alloc_role(r, i, &s, err);
    const int n = mxp_trainer_num_tensors(r->trainer);
    for (int t = 0; s == MXP_OK && ok && t < n; t++) {
        mxp_tensor_desc d;
        if ((s = mxp_trainer_tensor_desc(r->trainer, t, &d, err)) != MXP_OK) break;
        int i = 0;
        while (i < RUN_MEM_ROLES && kRoles[i] != d.role) i++;
        if (i == RUN_MEM_ROLES || !present[i]) continue;
        const size_t es = mxp_dtype_info(m->dtype[i])->size;
        const mxp_st_tensor *st = mxp_st_file_find(f, d.name);
        ok = st && st->dtype == m->dtype[i] && st->nbytes == d.count * es &&
             (d.offset + d.count) * es <= m->bytes[i];
        if (ok) memcpy((char *)m->snap[i] + d.offset * es, st->data, st->nbytes);
    }
    mxp_st_file_destroy(f);
    if (s != MXP_OK) return s;
    if (!ok) {
        mxp_log(MXP_LOG_WARN, "keep-best: %s does not hold this model's tensors in its current "
                              "storage; the members' kept weights restart from the next "
                              "validation", path);
        return MXP_OK;
    }
    for (int e = 0; e < m->E; e++) m->snap_step[e] = m->best_step[e];
    m->now_step = -1;
    m->snap_valid = true;
    return MXP_OK;
}
