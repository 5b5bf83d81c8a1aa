/* nn/step_pass.c: a trainer step's passes into slot blocks in the
 * trainer's backend memory, read after the step's one report
 * (nn/step_pass.h; docs/design.md "A training step").
 *
 * Entry points: nn_step_block_bytes, nn_step_blocks, nn_step_loss_offset,
 * nn_step_begin, nn_step_group_scales, nn_step_pass, nn_step_read,
 * nn_step_end.
 * The gradient beta: a pass's kernels read the control block's grad_beta
 * (m->ctl_beta, nn_grad_beta) where it lives, and the end of the
 * micro-batch sets it to 1 there (every member of an ensemble's
 * micro-batch writes its own block first, then they all add).
 * A pass points the model's slot block (m->b.slots) at its own block for
 * the pass and keeps the pass's host record (elements scanned per slot);
 * the read points m->b.slots at the host copy of the block, restores the
 * record and runs nn_pass_read, so the site, the monitor and the loss come
 * out as after mxp_model_step (the same code on the same bits, in the same
 * pass order). An ensemble's micro-batch is E blocks, one per member, read
 * and merged as nn_ens_step merges them.
 */
#include "nn/step_pass.h"

#include <stddef.h>
#include <string.h>

#include "nn/nn_internal.h"

size_t nn_step_block_bytes(const mxp_model *m) {
    const size_t n = sizeof(nn_slots) + (size_t)m->b.n_slots * sizeof(nn_scan);
    return (n + 63) / 64 * 64;
}

static int members(const mxp_model *m) { return m->ens > 1 ? m->ens : 1; }

int nn_step_blocks(const mxp_model *m, int n_batches) { return n_batches * members(m); }

size_t nn_step_loss_offset(void) { return offsetof(nn_slots, loss); }

mxp_status nn_step_begin(mxp_model *m, void *blocks, int n_batches, mxp_error *err) {
    const int n = nn_step_blocks(m, n_batches);
    if (n > m->cap_recs) {
        nn_pass_rec *r = mxp_calloc((size_t)n, sizeof *r);
        if (!r)
            return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "pass records for %d passes", n);
        mxp_free(m->recs);
        m->recs = r;
        m->cap_recs = n;
    }
    m->step_blocks = blocks;
    m->n_recs = n;
    return MXP_OK;
}

void nn_step_group_scales(mxp_model *m, const mxp_step_group_in *groups,
                          const int *layer_group) {
    m->gs_groups = groups;
    if (groups) memcpy(m->gs_group, layer_group, (size_t)m->n_layers * sizeof m->gs_group[0]);
}

void nn_step_end(mxp_model *m) {
    m->step_blocks = NULL;
    m->gs_groups = NULL;
}

/* Block k's pass: m->b.slots is block k meanwhile; its record kept. */
static mxp_status block_pass(mxp_model *m, int k, const mxp_batch *b, float scale,
                             mxp_error *err) {
    nn_slots *own = m->b.slots;
    m->b.slots = (nn_slots *)(void *)(m->step_blocks + (size_t)k * nn_step_block_bytes(m));
    mxp_status s = nn_pass_run(m, b, true, scale, true, err);
    const size_t n = (size_t)m->b.n_slots;
    memcpy(m->recs[k].n, m->b.slot_n, n * sizeof m->b.slot_n[0]);
    memcpy(m->recs[k].full, m->b.slot_full, n * sizeof m->b.slot_full[0]);
    m->b.slots = own;
    return s;
}

typedef struct member_ctx {
    int first; /* block of member 0 */
    float scale;
} member_ctx;

static mxp_status member_pass(mxp_model *m, int e, const mxp_batch *mb, void *ctx,
                              mxp_error *err) {
    const member_ctx *c = ctx;
    return block_pass(m, c->first + e, mb, c->scale, err);
}

mxp_status nn_step_pass(mxp_model *m, int i, const mxp_batch *b, const float *scale,
                        float *grad_beta, int64_t num, int64_t den, mxp_error *err) {
    if (!m->step_blocks || i < 0 || nn_step_blocks(m, i + 1) > m->n_recs)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "nn_step_pass: micro-batch %d outside the step's %d blocks", i,
                             m->n_recs);
    /* the kernel's read of the control block: scale * B_i / B_total */
    const float s = (float)((double)*scale * (double)num / (double)den);
    mxp_status st;
    m->ctl_beta = grad_beta; /* the gradient kernels read write/add there */
    if (nn_ens_batched_ok(m)) { /* layer-major (ens_batched.c): member e into block i E + e */
        nn_slots *blk[NN_ENS_MAX];
        const int first = i * m->ens;
        for (int e = 0; e < m->ens; e++)
            blk[e] = (nn_slots *)(void *)(m->step_blocks +
                                          (size_t)(first + e) * nn_step_block_bytes(m));
        st = nn_ens_pass(m, b, true, s, true, blk, err);
        const size_t n = (size_t)m->b.n_slots;
        for (int e = 0; e < m->ens; e++) { /* every member's record is the pass's */
            memcpy(m->recs[first + e].n, m->b.slot_n, n * sizeof m->b.slot_n[0]);
            memcpy(m->recs[first + e].full, m->b.slot_full, n * sizeof m->b.slot_full[0]);
        }
    } else if (m->ens > 1 && m->ens_member < 0) {
        member_ctx c = {i * m->ens, s};
        st = nn_ens_each(m, b, member_pass, &c, err);
    } else {
        st = block_pass(m, i, b, s, err);
    }
    m->ctl_beta = NULL;
    *grad_beta = 1.0f; /* in backend memory: the micro-batches after this one add */
    return st;
}

/* Block k's read from the host copy. */
static void block_read(mxp_model *m, int k, const void *host, mxp_nonfinite_site *site,
                       double *loss) {
    nn_slots *own = m->b.slots;
    m->b.slots = (nn_slots *)((unsigned char *)(uintptr_t)host +
                              (size_t)k * nn_step_block_bytes(m));
    const size_t n = (size_t)m->b.n_slots;
    memcpy(m->b.slot_n, m->recs[k].n, n * sizeof m->b.slot_n[0]);
    memcpy(m->b.slot_full, m->recs[k].full, n * sizeof m->b.slot_full[0]);
    nn_pass_read(m, true, site, loss);
    m->b.slots = own;
}

void nn_step_read(mxp_model *m, int i, const void *host_blocks, mxp_nonfinite_site *site,
                  double *loss) {
    if (m->ens <= 1 || m->ens_member >= 0) {
        block_read(m, i, host_blocks, site, loss);
        return;
    }
    /* an ensemble: member by member, as nn_ens_step */
    memset(site, 0, sizeof *site);
    site->op = "";
    double total = 0.0;
    for (int e = 0; e < m->ens; e++) {
        mxp_nonfinite_site ms;
        double l = 0.0;
        block_read(m, i * m->ens + e, host_blocks, &ms, &l);
        if (!site->found && ms.found) *site = ms;
        total += l;
    }
    *loss = total / (double)m->ens;
}
