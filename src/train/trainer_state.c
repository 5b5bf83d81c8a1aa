/* train/trainer_state.c: export and import of the trainer's checkpointable
 * state (counters, stochastic-rounding position, learning rate).
 *
 * The optimizer step and SR counters live in the backend's control block
 * (backend/step_ctl.h): get reads them from the last report, set writes
 * them there.
 * Entry points: mxp_trainer_get_state, mxp_trainer_set_state,
 * mxp_trainer_get_config, mxp_trainer_check_state. The optimizer moments are exposed as views by
 * mxp_trainer_optim_state (trainer.c) and the scaler by its own
 * get/set_state (amp); the checkpoint module (src/ckpt) combines them.
 */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/devmem.h"
#include "train/trainer_device.h"
#include "train/trainer_internal.h"

void mxp_trainer_get_state(const mxp_trainer *t, mxp_trainer_state *out) {
    if (!t || !out) return;
    out->training_steps = t->training_steps;
    out->optimizer_steps = t->be->ctl.opt_steps; /* the counters: the last report's */
    out->skipped_steps = t->skipped_steps;
    out->epoch = t->epoch;
    out->sr_counter = t->be->ctl.sr_counter;
    out->lr = t->cfg.optim.lr;
}

static mxp_status mxp_trainer_set_state_dev(mxp_trainer *t, const mxp_trainer_state *s, mxp_error *err) {
    if (!t || !s) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_set_state: NULL");
    if (s->training_steps < 0 || s->optimizer_steps < 0 || s->skipped_steps < 0 || s->epoch < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "trainer state training_steps=%lld optimizer_steps=%lld "
                             "skipped_steps=%lld epoch=%lld; accepted: all >= 0",
                             (long long)s->training_steps, (long long)s->optimizer_steps,
                             (long long)s->skipped_steps, (long long)s->epoch);
    if (s->optimizer_steps > s->training_steps || s->skipped_steps > s->training_steps)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "trainer state optimizer_steps=%lld skipped_steps=%lld; accepted: "
                             "each <= training_steps=%lld",
                             (long long)s->optimizer_steps, (long long)s->skipped_steps,
                             (long long)s->training_steps);
    if (!(s->lr > 0) || !isfinite(s->lr))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "trainer state lr=%g; accepted: finite > 0",
                             (double)s->lr);
    /* the device counters live in the control block: written there */
    mxp_status st = t->be->ops->set_counters(t->be, s->optimizer_steps, s->sr_counter, err);
    if (st != MXP_OK) return st;
    t->training_steps = s->training_steps;
    t->skipped_steps = s->skipped_steps;
    t->epoch = s->epoch;
    t->cfg.optim.lr = s->lr;
    return MXP_OK;
}

/* mxp_trainer_set_state inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_set_state(mxp_trainer *t, const mxp_trainer_state *s, mxp_error *err) {
    mxp_dev_enter();
    mxp_status r_ = mxp_trainer_set_state_dev(t, s, err);
    mxp_dev_leave();
    return r_;
}

const mxp_trainer_config *mxp_trainer_get_config(const mxp_trainer *t) {
    return t ? &t->cfg : NULL;
}

/* Bad elements of x[n] (non-finite; with nonneg, also < 0) and the index of
 * the first. Bit tests, so -ffinite-math could not remove them either. */
static size_t count_bad(const float *x, size_t n, bool nonneg, size_t *first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        const bool nonfinite = (u & 0x7f800000u) == 0x7f800000u;
        const bool negative = nonneg && (u >> 31) && (u & 0x7fffffffu) != 0; /* -0 is fine */
        if (nonfinite || negative) {
            if (!bad) *first = i;
            bad++;
        }
    }
    return bad;
}

/* The model tensor holding slab element i, and i's index inside it. */
static const char *tensor_of(const mxp_model *m, size_t i, size_t *local) {
    for (int k = 0; k < mxp_model_num_tensors(m); k++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, k);
        if (i >= ti->offset && i < ti->offset + ti->count) {
            *local = i - ti->offset;
            return ti->name;
        }
    }
    *local = i;
    return "?";
}

static mxp_status mxp_trainer_check_state_dev(mxp_trainer *t, mxp_error *err) {
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_check_state: NULL");
    mxp_model *m = t->model;
    const size_t n = t->n_params;
    size_t first = 0, bad = 0;
    const char *what = "weights";
    const float *holder = NULL; /* the array `what` names; NULL: the weights */
    const float *master = mxp_model_master(m);
    if (master) {
        bad = count_bad(master, n, false, &first);
    } else { /* pure bf16/fp16: the working weights are the only copy (read
              * in place: this runs inside the backend bracket) */
        mxp_dtype wt;
        const void *work = mxp_model_work(m, &wt);
        for (size_t i = 0; i < n; i++)
            if (!isfinite(mxp_load_f32(wt, work, i)) && bad++ == 0) first = i;
    }
    if (!bad && t->m) {
        what = t->v ? "AdamW first moment" : "SGD momentum";
        holder = t->m;
        bad = count_bad(t->m, n, false, &first);
    }
    if (!bad && t->v) {
        what = "AdamW second moment";
        holder = t->v;
        bad = count_bad(t->v, n, true, &first);
    }
    if (!bad) return MXP_OK;
    const bool second = holder && holder == t->v;
    mxp_dtype wt;
    const void *work = mxp_model_work(m, &wt);
    float x = holder ? holder[first] : master ? master[first] : mxp_load_f32(wt, work, first);
    size_t local;
    const char *name = tensor_of(m, first, &local);
    return mxp_error_set(err, MXP_ERR_NONFINITE,
                         "%s hold %zu %s value%s of %zu (the first: '%s' element %zu = %g); "
                         "accepted: finite%s",
                         what, bad, second ? "non-finite or negative" : "non-finite",
                         bad == 1 ? "" : "s", n, name, local, (double)x,
                         second ? " and >= 0" : "");
}

/* mxp_trainer_check_state inside one backend bracket (backend/devmem.h) */
mxp_status mxp_trainer_check_state(mxp_trainer *t, mxp_error *err) {
    mxp_status r_ = trainer_device_pull(t, err); /* a device's record first */
    if (r_ != MXP_OK) return r_;
    mxp_dev_enter();
    r_ = mxp_trainer_check_state_dev(t, err);
    mxp_dev_leave();
    return r_;
}
