/* nn/ensemble.c: ensembles of E MLPs in one model (spec.ensemble, model.h).
 *
 * Entry points (nn_internal.h): nn_ens_view, nn_ens_tensors, nn_ens_check_batch, nn_ens_each,
 * nn_ens_step, nn_ens_predict; mxp_model_elites, mxp_model_set_elites
 * (model.h). Member e's parameters are a copy of the single model's
 * layout at element offset e * P1 of every slab (master, work, grads), so
 * one optimizer step, one loss-scaler update, one guard check and one
 * checkpoint cover all members. A training or evaluation step
 * (nn_ens_step, and the trainer's nn_step_pass) runs layer-major when
 * nn_ens_batched_ok (ens_batched.c: all members' rows per layer, each
 * linear layer's GEMMs for all members in one strided-batched call, the
 * same bits); otherwise, and for predict, the member loop here: member
 * 0's forward, loss and backward on its B rows, then member 1's, ...
 * (nn_ens_view shifts every layer's parameter offsets to the member's
 * block, and the unchanged layer code runs on the first B rows of the
 * arena, which is planned for E x max_batch rows for the layer-major
 * pass). The member loop is the layer-major pass's oracle
 * (tests/test_ens_batched.c).
 * Gradients: the first member's backward after mxp_model_discard_grads
 * must not leave the others adding into void memory, so every member's
 * pass starts with the discard state of the step (each member then writes
 * its own block). The FP8 delayed scales are per layer, shared by the
 * members and updated after each member's pass.
 */
#include "nn/nn_internal.h"

#include <stdio.h>
#include <string.h>

int nn_ens_view(mxp_model *m, int cur, int e) {
    m->ens_member = e;
    if (e == cur) return e;
    const size_t from = (size_t)cur * m->ens_p1, to = (size_t)e * m->ens_p1;
    for (int l = 0; l < m->n_layers; l++) {
        nn_layer *L = &m->layers[l];
        if (L->n_params == 0) continue;
        L->w_off = L->w_off - from + to;
        L->b_off = L->b_off - from + to;
    }
    return e;
}

bool nn_ens_tensors(mxp_model *m) {
    const int n1 = m->n_tensors, E = m->ens;
    if ((int64_t)n1 * E > NN_MAX_TENSORS) return false;
    for (int e = E - 1; e >= 0; e--) /* backwards: member 0's entries are read last */
        for (int t = 0; t < n1; t++) {
            const int ti = e * n1 + t;
            char full[NN_NAME_MAX + 24];
            snprintf(full, sizeof full, "members.%d.%s", e, m->names[t]);
            if (strlen(full) >= NN_NAME_MAX) return false; /* never: <= 27 characters */
            m->tensors[ti] = m->tensors[t];
            m->tensors[ti].offset += (size_t)e * m->ens_p1;
            memcpy(m->names[ti], full, strlen(full) + 1);
            m->tensors[ti].name = m->names[ti];
        }
    m->n_tensors = n1 * E;
    return true;
}

/* The first non-finite site of the members' passes (a member's own site is
 * reset by its step). */
static void merge_site(mxp_nonfinite_site *site, const mxp_nonfinite_site *ms) {
    if (site && !site->found && ms->found) *site = *ms;
}

mxp_status nn_ens_check_batch(const mxp_model *m, const mxp_batch *b, mxp_error *err) {
    if (!b)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "batch is NULL; accepted: an mxp_batch");
    const int E = m->ens;
    if (b->B < E || b->B % E != 0 || b->B / E > m->spec.max_batch)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "batch B=%lld rows for an ensemble of %d; accepted: %d * B rows "
                             "(member e's B rows at [e B, (e+1) B)), B in 1..%lld "
                             "(spec.max_batch)",
                             (long long)b->B, E, E, (long long)m->spec.max_batch);
    return MXP_OK;
}

mxp_status nn_ens_each(mxp_model *m, const mxp_batch *b, nn_member_fn fn, void *ctx,
                       mxp_error *err) {
    mxp_status bs = nn_ens_check_batch(m, b, err);
    if (bs != MXP_OK) return bs;
    const int E = m->ens;
    const int64_t B = b->B / E, D = m->spec.in_dim, K = mxp_model_target_dim(m);
    const bool stale = m->grads_stale;
    mxp_status s = MXP_OK;
    int cur = 0;
    for (int e = 0; e < E && s == MXP_OK; e++) {
        cur = nn_ens_view(m, cur, e);
        mxp_batch mb = {.x = b->x ? b->x + e * B * D : NULL,
                        .y = b->y ? b->y + e * B * K : NULL,
                        .labels = b->labels ? b->labels + e * B : NULL,
                        .B = B};
        m->grads_stale = stale; /* each member writes its own block, or adds to it */
        s = fn(m, e, &mb, ctx, err);
    }
    nn_ens_view(m, cur, 0);
    m->ens_member = -1;
    if (s != MXP_OK) m->grads_stale = stale;
    return s;
}

typedef struct ens_step_ctx {
    bool backward;
    float loss_scale;
    mxp_nonfinite_site *site;
    double total;
} ens_step_ctx;

static mxp_status member_step(mxp_model *m, int e, const mxp_batch *mb, void *ctx,
                              mxp_error *err) {
    ens_step_ctx *c = ctx;
    mxp_nonfinite_site ms;
    double l = 0.0;
    mxp_status s = mxp_model_step(m, mb, c->backward, c->loss_scale, &l, c->site ? &ms : NULL,
                                  err);
    if (s == MXP_OK && c->site) merge_site(c->site, &ms);
    c->total += l;
    return s;
}

mxp_status nn_ens_step(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       double *loss, mxp_nonfinite_site *site, mxp_error *err) {
    if (site && b) {
        memset(site, 0, sizeof *site);
        site->op = "";
    }
    if (nn_ens_batched_ok(m)) /* layer-major, the same bits (ens_batched.c) */
        return nn_ens_step_batched(m, b, backward, loss_scale, loss, site, err);
    ens_step_ctx c = {backward, loss_scale, site, 0.0};
    mxp_status s = nn_ens_each(m, b, member_step, &c, err);
    if (s != MXP_OK) return s;
    if (loss) *loss = c.total / (double)m->ens;
    return MXP_OK;
}

mxp_status nn_ens_predict(mxp_model *m, const float *x, int64_t B, float *pred, mxp_error *err) {
    if (!pred)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "pred is NULL; accepted: FP32 [%d, B, %lld] (ensemble)", m->ens,
                             (long long)mxp_model_out_dim(m));
    const size_t per = (size_t)B * (size_t)mxp_model_out_dim(m);
    mxp_status s = MXP_OK;
    int cur = 0;
    for (int e = 0; e < m->ens && s == MXP_OK; e++) {
        cur = nn_ens_view(m, cur, e);
        s = mxp_model_predict(m, x, B, pred + (size_t)e * per, err);
    }
    nn_ens_view(m, cur, 0);
    m->ens_member = -1;
    return s;
}

uint64_t mxp_model_elites(const mxp_model *m) { return m ? m->ens_elites : 0; }

mxp_status mxp_model_set_elites(mxp_model *m, uint64_t mask, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_model_set_elites: NULL model");
    const uint64_t all = nn_ens_all(m->ens);
    if (mask == 0 || (mask & ~all))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "elites mask 0x%llx for an ensemble of %d; accepted: a non-empty "
                             "subset of its members, bits 0..%d (0x%llx: all)",
                             (unsigned long long)mask, m->ens, m->ens - 1,
                             (unsigned long long)all);
    m->ens_elites = mask;
    return MXP_OK;
}
