/* run/run_eval.c: validation during training (include/mixprec/run.h,
 * docs/run.md "Validation during training").
 *
 * Entry points: run_eval_check, run_eval_after_step, run_eval_state_json,
 * run_eval_restore (run_internal.h), mxp_run_val_history.
 *
 * training.eval_every=N validates after every N-th epoch (or
 * training.eval_every_steps=N after every global step g with g % N == 0,
 * g counted as the learning-rate schedule counts it) through the
 * provider's evaluate (forward passes only: it draws no random numbers and
 * leaves the optimizer, scaler, data position and weights as they were,
 * so the training losses are those of a run without validation). Early
 * stopping (training.early_stop.patience P, min_delta d): a validation
 * loss L improves when it is the first or L < best - d; the run stops at
 * the P-th validation in a row without an improvement. A non-finite L
 * never improves. Each improvement is saved as OUTPUT_DIR/best.safetensors
 * (training.keep_best, checkpoints on) by the atomic checkpoint writer.
 * An ensemble is validated member by member (run_members.c): a validation
 * improves when any member improved on its own best, the elites are
 * named, and the best file holds each member's best weights.
 */
#include "run/run_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int mxp_open_loop_horizon(int i) {
    static const int k[MXP_OPEN_LOOP_N] = {1, 5, 10};
    return i >= 0 && i < MXP_OPEN_LOOP_N ? k[i] : 0;
}

mxp_status run_eval_check(const mxp_run *r, mxp_error *err) {
    const bool steps = r->cfg.eval_every_steps > 0;
    if ((r->cfg.eval_every > 0 || steps) && !r->wl.evaluate)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "training.%s=%lld: workload '%s' has no held-out evaluation; "
                             "accepted: training.%s=0 (off) for it",
                             steps ? "eval_every_steps" : "eval_every",
                             (long long)(steps ? r->cfg.eval_every_steps : r->cfg.eval_every),
                             r->wl.name, steps ? "eval_every_steps" : "eval_every");
    return MXP_OK;
}

const mxp_run_val_row *mxp_run_val_history(const mxp_run *r, size_t *n) {
    if (n) *n = r ? r->val_n : 0;
    return r && r->val_n ? r->val : NULL;
}

/* JSON number or null. */
static void num(char *b, size_t n, double v) {
    if (isfinite(v))
        snprintf(b, n, "%.17g", v);
    else
        snprintf(b, n, "null");
}

void run_eval_state_json(const mxp_run *r, char *buf, size_t n) {
    char best[40], last[40], mem[RUN_STATE_MAX - 512];
    num(best, sizeof best, r->best_val);
    num(last, sizeof last, r->last_val);
    run_members_json(r, true, mem, sizeof mem); /* ensembles: the members, else "" */
    snprintf(buf, n,
             "{\"evaluations\":%lld,\"last_val_loss\":%s,\"best_val_loss\":%s,"
             "\"best_epoch\":%lld,\"best_step\":%lld,\"evals_since_best\":%lld,"
             "\"early_stopped\":%s%s%s}",
             (long long)r->evals, last, best, (long long)r->best_epoch, (long long)r->best_step,
             (long long)r->evals_since_best, r->early_stopped ? "true" : "false",
             mem[0] ? "," : "", mem);
}

/* The run state into the checkpoints the manager writes next. */
static mxp_status publish_state(mxp_run *r, mxp_error *err) {
    if (!r->ckpt) return MXP_OK;
    char js[RUN_STATE_MAX];
    run_eval_state_json(r, js, sizeof js);
    return mxp_ckpt_manager_set_run_state(r->ckpt, js, err);
}

/* A non-negative integer field of o, or a format error naming it. */
static mxp_status get_count(json_t *o, const char *key, int64_t *out, const char *file,
                            mxp_error *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "checkpoint '%s': metadata run_state.%s is missing or not an "
                             "integer >= 0", file, key);
    *out = (int64_t)json_integer_value(v);
    return MXP_OK;
}

/* A finite number or null (NaN) field of o. */
static mxp_status get_loss(json_t *o, const char *key, double *out, const char *file,
                           mxp_error *err) {
    json_t *v = json_object_get(o, key);
    if (json_is_null(v)) {
        *out = NAN;
        return MXP_OK;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "checkpoint '%s': metadata run_state.%s is not a finite number or "
                             "null", file, key);
    *out = json_number_value(v);
    return MXP_OK;
}

mxp_status run_eval_restore(mxp_run *r, const char *text, const char *file, mxp_error *err) {
    if (!text) return MXP_OK; /* a checkpoint from before validation during training */
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    mxp_status s = MXP_OK;
    if (!json_is_object(o))
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "checkpoint '%s': metadata run_state is not a JSON object", file);
    int64_t evals = 0, best_epoch = 0, best_step = 0, since = 0;
    double best = NAN, last = NAN;
    json_t *es = json_object_get(o, "early_stopped");
    if (s == MXP_OK) s = get_count(o, "evaluations", &evals, file, err);
    if (s == MXP_OK) s = get_count(o, "best_epoch", &best_epoch, file, err);
    if (s == MXP_OK) s = get_count(o, "best_step", &best_step, file, err);
    if (s == MXP_OK) s = get_count(o, "evals_since_best", &since, file, err);
    if (s == MXP_OK) s = get_loss(o, "best_val_loss", &best, file, err);
    if (s == MXP_OK) s = get_loss(o, "last_val_loss", &last, file, err);
    if (s == MXP_OK && !json_is_boolean(es))
        s = mxp_error_set(err, MXP_ERR_FORMAT,
                          "checkpoint '%s': metadata run_state.early_stopped is missing or not "
                          "true/false", file);
    if (s == MXP_OK) s = run_members_restore(r, o, file, err);
    if (s == MXP_OK) {
        r->evals = evals;
        r->best_epoch = best_epoch;
        r->best_step = best_step;
        r->evals_since_best = since;
        r->best_val = best;
        r->last_val = last;
        r->early_stopped = json_is_true(es);
    }
    json_decref(o);
    if (s != MXP_OK) return s;
    char path[MXP_CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/best.safetensors", r->cfg.output_dir);
    FILE *f = r->best_epoch > 0 ? fopen(path, "rb") : NULL;
    if (f) {
        fclose(f);
        snprintf(r->best_path, sizeof r->best_path, "%s", path);
        mxp_status ls = run_members_load_best(r, path, err); /* an ensemble's kept members */
        if (ls != MXP_OK) return ls;
    }
    return publish_state(r, err);
}

/* Append a validation row (grows by doubling). */
static mxp_status push_row(mxp_run *r, const mxp_run_val_row *row, mxp_error *err) {
    if (r->val_n == r->val_cap) {
        size_t cap = r->val_cap ? 2 * r->val_cap : 16;
        mxp_run_val_row *v = mxp_calloc(cap, sizeof *v);
        if (!v) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "validation history");
        if (r->val_n) memcpy(v, r->val, r->val_n * sizeof *v);
        mxp_free(r->val);
        r->val = v;
        r->val_cap = cap;
    }
    r->val[r->val_n++] = *row;
    return MXP_OK;
}

/* OUTPUT_DIR/best.safetensors: the current state, atomically (mxp_run_save
 * writes a temporary file and renames it), so a crash leaves the previous
 * best or the new one, never a torn file. */
static mxp_status save_best(mxp_run *r, mxp_error *err) {
    char path[MXP_CKPT_PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/best.safetensors", r->cfg.output_dir) >=
        sizeof path)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "output.dir '%.200s...' is too long",
                             r->cfg.output_dir);
    int e = mxp_mkdirs(r->cfg.output_dir);
    if (e != 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot create output.dir '%s': %s",
                             r->cfg.output_dir, strerror(e));
    mxp_status s = r->mem.E > 1 ? run_members_save_best(r, path, err) : mxp_run_save(r, path, err);
    if (s == MXP_OK) snprintf(r->best_path, sizeof r->best_path, "%s", path);
    return s;
}

/* The log line's ensemble part: "; members 0.12 0.10* 0.31 (* improved);
 * elites 1,0" (elites in order of their loss). */
static void member_text(const mxp_run *r, uint64_t imp, char *b, size_t n) {
    const run_members *m = &r->mem;
    size_t at = (size_t)snprintf(b, n, "; members");
    for (int e = 0; e < m->E && at < n; e++)
        at += (size_t)snprintf(b + at, n - at, " %.4g%s", m->last[e], imp >> e & 1u ? "*" : "");
    if (at < n) at += (size_t)snprintf(b + at, n - at, " (* improved); elites");
    bool first = true;
    for (int e = 0; e < m->E && at < n; e++)
        if (m->elites >> e & 1u) {
            at += (size_t)snprintf(b + at, n - at, "%s%d", first ? " " : ",", e);
            first = false;
        }
}

mxp_status run_eval_after_step(mxp_run *r, int64_t epoch, bool ended, int64_t steps_per_epoch,
                               bool *stop, mxp_error *err) {
    const mxp_config *c = &r->cfg;
    const int64_t done = epoch + 1; /* 1-based: the epoch the step trained in */
    const int64_t g = r->pos.epoch * steps_per_epoch + r->pos.step_in_epoch; /* steps done */
    const bool due = c->eval_every > 0 ? ended && done % c->eval_every == 0
                                       : c->eval_every_steps > 0 && g > 0 &&
                                             g % c->eval_every_steps == 0;
    if (!due) return MXP_OK;
    mxp_run_eval ev;
    mxp_status s = mxp_run_evaluate(r, &ev, err);
    if (s != MXP_OK) return s;
    mxp_train_stats ts;
    mxp_trainer_stats(r->trainer, &ts);
    const double L = ev.loss;
    const bool first = !isfinite(r->best_val);
    bool improved = isfinite(L) && (first || L < r->best_val - c->early_stop_min_delta);
    uint64_t imp = 0; /* an ensemble: the members that improved on their own best */
    const bool members = r->mem.E > 1 && ev.members == r->mem.E; /* else: as one model (a
                                                 custom provider reporting no member losses) */
    if (members) {
        if ((s = run_members_after_eval(r, &ev, ts.training_steps, &imp, err)) != MXP_OK)
            return s;
        improved = imp != 0; /* any member improved (mbrl-lib's ModelTrainer) */
    }
    r->evals++;
    r->last_val = L;
    if (improved) {
        r->best_val = members ? run_members_best_loss(r) : L;
        r->best_epoch = done;
        r->best_step = ts.training_steps;
        r->evals_since_best = 0;
    } else {
        r->evals_since_best++;
    }
    mxp_run_val_row row = {ts.training_steps, done, L, improved, {0}, 0, 0, 0, {0}};
    memcpy(row.open_loop, ev.open_loop, sizeof row.open_loop);
    for (int e = 0; e < MXP_MODEL_MAX_ENSEMBLE; e++) row.member_loss[e] = NAN;
    if (members) {
        row.members = r->mem.E;
        row.improved = imp;
        row.elites = r->mem.elites;
        memcpy(row.member_loss, ev.member_loss, sizeof row.member_loss);
    }
    if ((s = push_row(r, &row, err)) != MXP_OK) return s;
    _Static_assert(MXP_OPEN_LOOP_N == 3, "the log line names three horizons");
    char ol[96] = "";
    if (isfinite(ev.open_loop[0]))
        snprintf(ol, sizeof ol, "; open-loop error %.4g / %.4g / %.4g at %d / %d / %d steps",
                 ev.open_loop[0], ev.open_loop[1], ev.open_loop[2], mxp_open_loop_horizon(0),
                 mxp_open_loop_horizon(1), mxp_open_loop_horizon(2));
    char mem[1600] = "";
    if (members) member_text(r, imp, mem, sizeof mem);
    mxp_log(MXP_LOG_INFO, "epoch %lld step %lld: %s_loss %.6g (best %.6g at step %lld%s)%s%s",
            (long long)done, (long long)ts.training_steps, ev.name[0] ? ev.name : "val", L,
            r->best_val, (long long)r->best_step, improved ? ", new best" : "", ol, mem);
    if (c->early_stop_patience > 0 && r->evals_since_best >= c->early_stop_patience) {
        r->early_stopped = true;
        *stop = true;
        mxp_log(MXP_LOG_WARN,
                "early stopping after epoch %lld (step %lld): %lld validations without an "
                "improvement > %g (training.early_stop.patience=%lld); best %s_loss %.6g at "
                "epoch %lld (step %lld)",
                (long long)done, (long long)ts.training_steps, (long long)r->evals_since_best,
                c->early_stop_min_delta, (long long)c->early_stop_patience,
                ev.name[0] ? ev.name : "val", r->best_val, (long long)r->best_epoch,
                (long long)r->best_step);
    }
    if ((s = publish_state(r, err)) != MXP_OK) return s;
    if (improved && c->keep_best && r->ckpt && (s = save_best(r, err)) != MXP_OK) return s;
    if (r->obs.evaluated) r->obs.evaluated(r->obs.self, r, &r->val[r->val_n - 1]);
    return MXP_OK;
}
