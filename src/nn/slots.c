/* nn/slots.c: the result slots of a forward/backward pass.
 *
 * Entry points (nn_internal.h): nn_slot, nn_slots_begin, nn_slot_issued,
 * nn_scan_stored, nn_scan_fold, nn_pass_finish, nn_pass_read.
 *
 * The driver (model_step.c) never reads a scalar a kernel produced while
 * the pass runs: the loss and every scan (absmax, non-finite count of the
 * FP32 values and of their stored copy) go into the model's result slots,
 * one per (tensor kind, layer), planned with the arena (model_plan.c), or
 * in a block of the trainer's report area (step_pass.c). After the pass
 * nn_pass_finish reads them once, in one place: the point where a device
 * backend copies the slot block to the host (the trainer's passes are read
 * by nn_pass_read after the step's one report instead). It decides the
 * first non-finite site in the order the pass met the tensors (forward
 * layer by layer, the loss, the loss gradient, backward layer by layer),
 * records every scan in an attached monitor and returns the loss: the same
 * site, statistics and loss bits as deciding each scan as it happened.
 * See docs/design.md "A training step" and "The backend seam".
 */
#include "nn/nn_internal.h"

#include "backend/devmem.h"

#include <math.h>
#include <string.h>

static int slot_index(int layer, nn_slot_kind kind) {
    return (layer + 1) * NN_SLOT_KIND_COUNT + (int)kind;
}

nn_scan *nn_slot(const mxp_model *m, nn_slot_kind kind, int layer) {
    return &m->b.slots->scan[slot_index(layer, kind)];
}

void nn_slots_begin(mxp_model *m) {
    const size_t n = (size_t)m->b.n_slots;
    memset(m->b.slots, 0, sizeof *m->b.slots + n * sizeof(nn_scan)); /* the backend's zero */
    memset(m->b.slot_n, 0, n * sizeof m->b.slot_n[0]);
    memset(m->b.slot_full, 0, n * sizeof m->b.slot_full[0]);
}

void nn_slot_issued(mxp_model *m, nn_slot_kind kind, int layer, size_t n, bool full) {
    const int i = slot_index(layer, kind);
    m->b.slot_n[i] += (int64_t)n;
    if (full) m->b.slot_full[i] = true;
}

void nn_scan_stored(nn_scan *s, mxp_dtype t, const void *stored, size_t n) {
    int64_t count = s->nf;
    if (t != MXP_DTYPE_F32 && (s->nf > 0 || !isfinite(mxp_round_to(t, s->amax)))) {
        int64_t c = 0;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(mxp_load_f32(t, stored, i))) c++;
        if (c > count) count = c;
    }
    s->nf_stored = count;
}

void nn_scan_fold(nn_scan *s, const nn_scan *c) {
    if (c->amax > s->amax) s->amax = c->amax;
    s->nf += c->nf;
    s->nf_stored += c->nf_stored;
    s->tiny += c->tiny;
}

/* ---- after the pass ----------------------------------------------------------- */

/* Slot (kind, layer) when the pass scanned into it, else NULL. */
static const nn_scan *scanned(const mxp_model *m, nn_slot_kind kind, int layer) {
    return m->b.slot_n[slot_index(layer, kind)] > 0 ? nn_slot(m, kind, layer) : NULL;
}

/* Record the first non-finite site (`what` names the tensor for the
 * monitor: "output", "grad_input", "weight", ...). */
static void site_set(mxp_model *m, mxp_nonfinite_site *site, bool backward, int layer,
                     const char *op, int64_t count, const char *what) {
    site->found = true;
    site->backward = backward;
    site->layer = layer;
    site->op = op;
    site->count = count;
    nn_mon_note_site(m, site, what);
}

/* Slot (kind, layer) as a site when it is the first non-finite one. */
static void site_of(mxp_model *m, mxp_nonfinite_site *site, nn_slot_kind kind, int layer,
                    bool backward, const char *op, const char *what) {
    const nn_scan *s = scanned(m, kind, layer);
    if (!site->found && s && s->nf_stored > 0)
        site_set(m, site, backward, layer, op, s->nf_stored, what);
}

static const char *op_name(const mxp_model *m, int l) {
    return nn_layer_vtable_get(m->layers[l].kind)->name;
}

/* Every scan of the pass into the monitor (the statistics are max and
 * sums, so the order does not matter). */
static void record_all(mxp_model *m) {
    static const struct {
        nn_slot_kind kind;
        mxp_monitor_tensor which;
    } rec[] = {{NN_SLOT_OUT, MXP_MON_OUT}, {NN_SLOT_DX, MXP_MON_DX}, {NN_SLOT_DW, MXP_MON_DW}};
    for (int l = -1; l < m->n_layers; l++)
        for (size_t r = 0; r < sizeof rec / sizeof rec[0]; r++) {
            if (l < 0 && rec[r].kind != NN_SLOT_DX) continue; /* the input: not monitored */
            const nn_scan *s = scanned(m, rec[r].kind, l);
            if (!s) continue;
            const size_t n = (size_t)m->b.slot_n[slot_index(l, rec[r].kind)];
            const mxp_dtype t = rec[r].kind == NN_SLOT_DW ? MXP_DTYPE_F32
                                : rec[r].kind == NN_SLOT_OUT ? m->b.act_type[l + 1]
                                : l < 0                      ? m->b.gtype[m->n_layers]
                                                             : m->b.gtype[l];
            nn_mon_record(m, l, rec[r].which, n, t, s->amax, s->nf);
            if (m->b.slot_full[slot_index(l, rec[r].kind)])
                nn_mon_record_tiny(m, l, rec[r].which, n, s->tiny);
        }
}

void nn_pass_finish(mxp_model *m, bool backward, mxp_nonfinite_site *site, double *loss) {
    /* the slot block's copy to the host (counted for the mock device) */
    mxp_dev_count(true, sizeof(nn_slots) + (size_t)m->b.n_slots * sizeof(nn_scan));
    nn_pass_read(m, backward, site, loss);
}

void nn_pass_read(mxp_model *m, bool backward, mxp_nonfinite_site *site, double *loss) {
    const double lv = m->b.slots->loss;
    if (loss) *loss = lv;
    if (!site) return;
    memset(site, 0, sizeof *site);
    site->op = "";
    if (m->mon) { /* the pass as the monitor counts it, then its scans */
        nn_mon_begin_pass(m);
        record_all(m);
    }
    const int L = m->n_layers;
    /* forward: the input batch (anomaly mode), then per layer its weight
     * and bias (anomaly mode) and its output */
    site_of(m, site, NN_SLOT_OUT, -1, false, "input", "input");
    for (int l = 0; l < L && !site->found; l++) {
        const nn_scan *w = scanned(m, NN_SLOT_W, l), *b = scanned(m, NN_SLOT_B, l);
        if (w && w->nf > 0)
            site_set(m, site, false, l, op_name(m, l), w->nf, "weight");
        else if (b && b->nf > 0)
            site_set(m, site, false, l, op_name(m, l), b->nf, "bias");
        site_of(m, site, NN_SLOT_OUT, l, false, op_name(m, l), "output");
    }
    const char *lname = mxp_loss_kind_name(m->spec.loss);
    if (!site->found && !isfinite(lv)) site_set(m, site, false, -1, lname, 1, "output");
    if (!backward) return;
    /* backward: the loss gradient, then per layer from the top its dX and
     * its parameter gradients */
    site_of(m, site, NN_SLOT_DX, -1, true, lname, "grad_input");
    for (int l = L - 1; l >= 0 && !site->found; l--) {
        site_of(m, site, NN_SLOT_DX, l, true, op_name(m, l), "grad_input");
        const nn_scan *g = scanned(m, NN_SLOT_DW, l);
        if (site->found || !g || g->nf == 0) continue;
        const nn_scan *gw = scanned(m, NN_SLOT_GW, l), *gb = scanned(m, NN_SLOT_GB, l);
        if (gw || gb) { /* anomaly mode: weight and bias apart */
            const int64_t cw = gw ? gw->nf : 0;
            if (cw > 0)
                site_set(m, site, true, l, op_name(m, l), cw, "grad_weight");
            else
                site_set(m, site, true, l, op_name(m, l), gb ? gb->nf : 0, "grad_bias");
        } else {
            site_set(m, site, true, l, op_name(m, l), g->nf, "grad_param");
        }
    }
}
