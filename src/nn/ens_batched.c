/* nn/ens_batched.c: an ensemble's training pass, layer-major (issue 29).
 *
 * Entry points (nn_internal.h): nn_ens_batched_ok, nn_ens_pass,
 * nn_ens_step_batched, nn_ens_batched_default, nn_ens_set_batched.
 * Callers: ensemble.c nn_ens_step (mxp_model_step) and step_pass.c
 * nn_step_pass (the trainer), when nn_ens_batched_ok.
 *
 * The members' forward runs layer by layer over all E x B rows of the
 * batch (member e's rows the block [e B, (e+1) B), as the batch holds
 * them; the arena is planned for E x max_batch rows, model_plan.c):
 *   - a linear layer: its GEMMs for all members in ONE call of the
 *     table's strided-batched GEMM per direction (forward, dW, dX;
 *     kernels.h gemm_strided: member e's operands at its row block and
 *     its slab block e P1, each product the bits of gemm alone), then per
 *     member its bias, store and scan (and the activation after it, fused
 *     as the driver fuses it: ens_fused.c); without gemm_strided (generic
 *     table, the FP16 fast-accumulate GEMM) the layer runs per member;
 *   - element-wise layers (relu, gelu, tanh, residual): once over E x B
 *     rows; layernorm and dropout: per member (its parameters and row
 *     statistics, its mask: the member's view, nn_ens_view, and its rows);
 *   - every output is stored in its dtype and scanned per member into the
 *     member's own result-slot block (ens_fused.c), so each block holds
 *     what the member's own pass would write;
 *   - the loss runs per member on its rows (its Gaussian bounds, its loss
 *     slot), the loss gradient is stored and scanned per member;
 *   - backward runs layer by layer from the top, as forward (each member
 *     writes, or adds to, its own gradient block).
 * After the pass each member's block is read as after its own pass
 * (nn_pass_finish / the trainer's nn_step_read): losses, first non-finite
 * site and monitor records are the member-sequential path's, bit for bit
 * (tests/test_ens_batched.c).
 * Not layer-major (ensemble.c's member loop runs instead, with the same
 * results): FP8 matmul inputs (their delayed scales are updated after each
 * member's pass), per-layer loss scaling, anomaly mode, an armed fault,
 * GPT layer kinds, predict, and models with the switch off (the default:
 * MIXPREC_ENS_BATCHED=1 at model creation, or nn_ens_set_batched, turns it
 * on; the member loop is the tests' and benchmarks' oracle).
 */
#include "nn/nn_internal.h"
#include "nn/step_pass.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* MIXPREC_ENS_BATCHED: "1" layer-major ensemble passes, "0" (or unset) the
 * member-sequential passes (same bits). Off by default: on the 2-core AMD
 * family 26 development machine the member loop measured faster (3.0-4.1
 * against 4.2-4.7 ms per step of a 5-member Gaussian ensemble, batch 256,
 * docs/results/issue29/ens_default_2026-12-02.txt): one member's tensors
 * stay in L2, the batch of five does not. Read once. */
static bool batched_on = false;
static void batched_read(void) {
    const char *v = getenv("MIXPREC_ENS_BATCHED");
    if (!v || strcmp(v, "0") == 0) return;
    if (strcmp(v, "1") == 0)
        batched_on = true;
    else
        mxp_log(MXP_LOG_WARN, "MIXPREC_ENS_BATCHED=%.40s is unknown and ignored; accepted: 0 "
                "(member-sequential ensemble passes, the default) or 1 (layer-major)", v);
}

bool nn_ens_batched_default(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, batched_read);
    return batched_on;
}

void nn_ens_set_batched(mxp_model *m, bool on) {
    if (m) m->ens_batched = on;
}

bool nn_ens_batched_ok(const mxp_model *m) {
    if (m->ens <= 1 || m->ens > NN_ENS_MAX || !m->ens_batched || m->ens_member >= 0)
        return false;
    if (m->fp8 || nn_grad_scaled(m) || m->b.fused_head || m->fault.kind != MXP_FAULT_NONE ||
        nn_mon_anomaly(m))
        return false;
    for (int l = 0; l < m->n_layers; l++)
        switch (m->layers[l].kind) {
        case MXP_LAYER_LINEAR: case MXP_LAYER_RELU: case MXP_LAYER_GELU: case MXP_LAYER_TANH:
        case MXP_LAYER_LAYERNORM: case MXP_LAYER_RESIDUAL: case MXP_LAYER_DROPOUT:
            break;
        default: return false;
        }
    return true;
}

/* Byte size of `rows` rows of `cols` elements of dtype t. */
static size_t row_bytes(mxp_dtype t, int64_t rows, int64_t cols) {
    return (size_t)rows * (size_t)cols * mxp_dtype_info(t)->size;
}

/* Layer l's parameter gradients of member e (its view current) into slot
 * DW of its block: the driver's scan (nn_scan_dw; no anomaly mode). */
static void scan_member_grads(mxp_model *m, nn_slots *blk, int l, bool issue) {
    nn_slots *own = m->b.slots;
    m->b.slots = blk;
    const bool full = nn_scan_dw(m, l);
    m->b.slots = own;
    if (issue) nn_slot_issued(m, NN_SLOT_DW, l, m->layers[l].n_params, full);
}

/* ---- the linear layer over all members: one strided-batched GEMM per
 * direction (the table's gemm_strided), the operands of each member's
 * own call of layer_linear.c (same GEMM, M = B rows, its parameters at
 * its slab block e P1), bias and its gradient per member. */

/* The table has a strided GEMM and the layer's GEMMs are plain gemm
 * calls (not the FP16 fast-accumulate GEMM, layer_linear.c linear_gemm). */
static bool strided(const mxp_model *m) {
    if (!m->k->gemm_strided) return false;
    const mxp_dtype in = m->policy.ops[MXP_OP_MATMUL].input;
    return !(m->policy.fp16_accum_k > 0 && in == MXP_DTYPE_F16);
}

/* y32 [E B, out] = each member's x W_e^T (nn_linear_forward's GEMM; its
 * bias follows in nn_ens_linear_epilogue). Returns the current view. */
static int linear_forward(mxp_model *m, int l, int64_t B, float *y32, int cur) {
    const int E = m->ens;
    const size_t P1 = m->ens_p1;
    cur = nn_ens_view(m, cur, 0);
    const nn_layer *L = &m->layers[l];
    mxp_dtype xt, wt;
    const void *x = nn_matmul_input(m, l, (int64_t)E * B, &xt); /* all rows, one cast */
    const void *w = nn_layer_weights(m, l, L->w_off, &wt);
    const mxp_gemm_args g = {
        .trans_a = false, .trans_b = true,
        .M = B, .N = L->out, .K = L->in,
        .a_type = xt, .A = x, .lda = L->in,
        .b_type = wt, .B = w, .ldb = L->in,
        .C = y32, .ldc = L->out, .alpha = 1.0f, .beta = 0.0f,
    };
    m->k->gemm_strided(&g, E, (size_t)B * (size_t)L->in, P1, (size_t)B * (size_t)L->out);
    return cur; /* the biases: nn_ens_linear_epilogue */
}

/* Every member's backward of layer l (layer_linear.c backward: db, dW
 * "=" or "+=", dX "=" into dx32 [E B, in] when not NULL), the parameter
 * gradients scanned per member. Returns the current view. */
static int linear_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32,
                           nn_slots *const *blk, bool scan, int cur) {
    const int E = m->ens;
    const size_t P1 = m->ens_p1;
    const nn_layer *L = &m->layers[l];
    const mxp_dtype gt = m->b.gtype[l + 1];
    for (int e = 0; e < E; e++) { /* db per member, as layer_linear.c */
        cur = nn_ens_view(m, cur, e);
        const void *dye = (const unsigned char *)dy + row_bytes(gt, (int64_t)e * B, L->out);
        nn_grad_zero(m, L->b_off, (size_t)L->out);
        if (m->fuse) {
            m->k->bias_grad_typed(m->grads + L->b_off, gt, dye, B, L->out);
        } else {
            const float *dy32 = nn_view_f32(m, gt, dye, (size_t)B * (size_t)L->out, m->b.sa);
            m->k->bias_grad(m->grads + L->b_off, dy32, B, L->out);
        }
    }
    cur = nn_ens_view(m, cur, 0);
    mxp_dtype xt;
    const void *x = nn_matmul_input(m, l, (int64_t)E * B, &xt);
    const mxp_gemm_args gw = { /* dW_e [out, in] (+)= dY_e^T X_e */
        .trans_a = true, .trans_b = false,
        .M = L->out, .N = L->in, .K = B,
        .a_type = gt, .A = dy, .lda = L->out,
        .b_type = xt, .B = x, .ldb = L->in,
        .C = m->grads + L->w_off, .ldc = L->in, .alpha = 1.0f, .beta = nn_grad_beta(m),
    };
    m->k->gemm_strided(&gw, E, (size_t)B * (size_t)L->out, (size_t)B * (size_t)L->in, P1);
    if (dx32) { /* dX_e [B, in] = dY_e W_e */
        mxp_dtype wt;
        const void *w = nn_layer_weights(m, l, L->w_off, &wt);
        const mxp_gemm_args gx = {
            .trans_a = false, .trans_b = false,
            .M = B, .N = L->in, .K = L->out,
            .a_type = gt, .A = dy, .lda = L->out,
            .b_type = wt, .B = w, .ldb = L->in,
            .C = dx32, .ldc = L->in, .alpha = 1.0f, .beta = 0.0f,
        };
        m->k->gemm_strided(&gx, E, (size_t)B * (size_t)L->out, P1, (size_t)B * (size_t)L->in);
    }
    if (scan)
        for (int e = 0; e < E; e++) {
            cur = nn_ens_view(m, cur, e);
            scan_member_grads(m, blk[e], l, e == 0);
        }
    return cur;
}

/* Layers run per member (its rows, its parameters, its view: a
 * layernorm's gamma/beta and row statistics, a dropout's mask keyed by
 * the member; a linear layer without the strided GEMM), or once over all
 * E x B rows (element-wise: relu, gelu, tanh, residual). */
static bool per_member(const mxp_model *m, mxp_layer_kind k) {
    return k == MXP_LAYER_LAYERNORM || k == MXP_LAYER_DROPOUT ||
           (k == MXP_LAYER_LINEAR && !strided(m));
}

/* The arena's row buffers layer l reads (acts[l], acts[l+1], the
 * layernorm statistics), saved; rows_view points them at member e's rows
 * (and member e's own block of the statistics), rows_restore back. */
typedef struct member_rows_sv {
    void *a0, *a1;
    float *ln;
} member_rows_sv;

static member_rows_sv rows_save(const mxp_model *m, int l) {
    return (member_rows_sv){m->b.acts[l], m->b.acts[l + 1], m->b.ln_stats};
}

static void rows_restore(mxp_model *m, int l, const member_rows_sv *sv) {
    m->b.acts[l] = sv->a0;
    m->b.acts[l + 1] = sv->a1;
    m->b.ln_stats = sv->ln;
}

static void rows_view(mxp_model *m, int l, int64_t B, int e, const member_rows_sv *sv) {
    nn_bufs *b = &m->b;
    b->acts[l] = (unsigned char *)sv->a0 + row_bytes(b->act_type[l], (int64_t)e * B, m->width[l]);
    if (sv->a1)
        b->acts[l + 1] = (unsigned char *)sv->a1 +
                         row_bytes(b->act_type[l + 1], (int64_t)e * B, m->width[l + 1]);
    if (sv->ln) b->ln_stats = sv->ln + (size_t)e * (size_t)m->n_ln * 2 * (size_t)m->spec.max_batch;
}

static int member_forward(mxp_model *m, int l, int64_t B, float *y32, int cur) {
    const nn_layer_vtable *vt = nn_layer_vtable_get(m->layers[l].kind);
    const size_t n = (size_t)B * (size_t)m->width[l + 1];
    const member_rows_sv sv = rows_save(m, l);
    for (int e = 0; e < m->ens; e++) {
        cur = nn_ens_view(m, cur, e);
        rows_view(m, l, B, e, &sv);
        vt->forward(m, l, B, y32 + (size_t)e * n);
    }
    rows_restore(m, l, &sv);
    return cur;
}

static int member_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32,
                           nn_slots *const *blk, bool scan, int cur) {
    const nn_layer *L = &m->layers[l];
    const nn_layer_vtable *vt = nn_layer_vtable_get(L->kind);
    const member_rows_sv sv = rows_save(m, l);
    for (int e = 0; e < m->ens; e++) {
        cur = nn_ens_view(m, cur, e);
        rows_view(m, l, B, e, &sv);
        vt->backward(m, l, B,
                     (const unsigned char *)dy + row_bytes(m->b.gtype[l + 1], (int64_t)e * B, L->out),
                     dx32 ? dx32 + (size_t)e * (size_t)B * (size_t)L->in : NULL);
        if (scan && L->n_params > 0) scan_member_grads(m, blk[e], l, e == 0);
    }
    rows_restore(m, l, &sv);
    return cur;
}

/* Forward of all members, layer by layer; returns the current view. */
static int forward_layers(mxp_model *m, const float *x, int64_t B, nn_slots *const *blk, bool scan,
                   int cur) {
    nn_bufs *b = &m->b;
    const int E = m->ens;
    const int64_t R = (int64_t)E * B;
    const size_t nx = (size_t)R * (size_t)m->width[0];
    if (b->act_type[0] == MXP_DTYPE_F32) /* the input, as the driver stores it */
        memcpy(b->acts[0], x, nx * sizeof(float));
    else
        m->k->convert(b->act_type[0], b->acts[0], MXP_DTYPE_F32, x, nx);
    for (int l = 0; l < m->n_layers; l++) {
        const nn_layer *L = &m->layers[l];
        const mxp_dtype t = b->act_type[l + 1];
        const int64_t C = m->width[l + 1];
        float *y32 = t == MXP_DTYPE_F32 ? (float *)b->acts[l + 1] : b->sy;
        if (L->kind == MXP_LAYER_LINEAR && !per_member(m, L->kind)) {
            cur = linear_forward(m, l, B, y32, cur);
            l += nn_ens_linear_epilogue(m, l, B, y32, blk, scan, &cur) - 1;
            continue;
        }
        if (per_member(m, L->kind))
            cur = member_forward(m, l, B, y32, cur);
        else
            nn_layer_vtable_get(L->kind)->forward(m, l, R, y32);
        nn_ens_store_scan(m, blk, scan, NN_SLOT_OUT, l, y32, t, b->acts[l + 1], B, C);
    }
    return cur;
}

/* Backward of all members from the loss gradient in g[0]; returns the
 * current view. */
static int backward_layers(mxp_model *m, int64_t B, nn_slots *const *blk, bool scan, int cur) {
    nn_bufs *b = &m->b;
    const int E = m->ens;
    const int64_t R = (int64_t)E * B;
    int lo = 0;
    while (lo < m->n_layers && m->layers[lo].n_params == 0) lo++;
    int g = 0; /* g[g] holds dY of layer l */
    for (int l = m->n_layers - 1; l >= lo; l--) {
        const nn_layer *L = &m->layers[l];
        const bool need_dx = l > lo;
        const mxp_dtype gt = b->gtype[l];
        if (need_dx && nn_ens_act_bwd_fused(m, l, B, b->g[g], b->g[g ^ 1], blk, scan)) {
            g ^= 1;
            continue;
        }
        float *dx32 = NULL;
        if (need_dx) dx32 = gt == MXP_DTYPE_F32 ? (float *)b->g[g ^ 1] : b->sy;
        if (per_member(m, L->kind)) {
            cur = member_backward(m, l, B, b->g[g], dx32, blk, scan, cur);
        } else if (L->kind == MXP_LAYER_LINEAR) {
            cur = linear_backward(m, l, B, b->g[g], dx32, blk, scan, cur);
        } else {
            nn_layer_vtable_get(L->kind)->backward(m, l, R, b->g[g], dx32);
        }
        if (need_dx) {
            nn_residual_skip_add(m, l, R, dx32); /* a block's first layer */
            nn_ens_store_scan(m, blk, scan, NN_SLOT_DX, l, dx32, gt, b->g[g ^ 1], B, L->in);
            g ^= 1;
        }
    }
    return cur;
}

/* Member e's rows of the ensemble batch b (B rows per member). */
static mxp_batch member_rows(const mxp_model *m, const mxp_batch *b, int e, int64_t B) {
    const int64_t D = m->spec.in_dim, K = mxp_model_target_dim(m);
    return (mxp_batch){.x = b->x ? b->x + e * B * D : NULL,
                       .y = b->y ? b->y + e * B * K : NULL,
                       .labels = b->labels ? b->labels + e * B : NULL,
                       .B = B};
}

mxp_status nn_ens_pass(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       bool scan, nn_slots *const *blk, mxp_error *err) {
    mxp_status bs = nn_ens_check_batch(m, b, err);
    if (bs != MXP_OK) return bs;
    const int E = m->ens;
    if (backward && m->inference)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "mxp_model_step: backward=true on a model created with "
                             "mxp_model_create_inference (no gradients); accepted: "
                             "backward=false, or a model from mxp_model_create");
    const int64_t B = b->B / E;
    for (int e = 0; e < E; e++) { /* every member's checks before any member runs */
        const mxp_batch mb = member_rows(m, b, e, B);
        mxp_status s = nn_check_batch(m, &mb, backward, loss_scale, err);
        if (s) return s;
    }
    m->ens_batched_passes++;
    nn_slots *own = m->b.slots;
    if (scan)
        for (int e = 0; e < E; e++) {
            m->b.slots = blk[e];
            nn_slots_begin(m); /* its block zero; the shared record zero */
        }
    m->b.slots = own;
    m->drop_train = backward;
    const double t0 = mxp_time_now();
    int cur = forward_layers(m, b->x, B, blk, scan, 0);

    nn_bufs *bf = &m->b;
    const int L = m->n_layers;
    const int64_t C = m->width[L];
    const mxp_dtype gt = bf->gtype[L];
    float *dpred32 = NULL;
    if (backward) dpred32 = gt == MXP_DTYPE_F32 ? (float *)bf->g[0] : bf->sy;
    unsigned char *pred0 = bf->acts[L];
    for (int e = 0; e < E; e++) { /* the loss per member: its rows, its bounds, its slot */
        cur = nn_ens_view(m, cur, e);
        const mxp_batch mb = member_rows(m, b, e, B);
        bf->acts[L] = pred0 + row_bytes(bf->act_type[L], (int64_t)e * B, C);
        nn_loss_forward(m, &mb, dpred32 ? dpred32 + (size_t)e * (size_t)B * (size_t)C : NULL,
                        backward ? loss_scale : 1.0f, &blk[e]->loss);
    }
    bf->acts[L] = pred0;
    const double t1 = mxp_time_now();
    m->time_forward_s += t1 - t0;

    if (backward) {
        nn_ens_store_scan(m, blk, scan, NN_SLOT_DX, -1, dpred32, gt, bf->g[0], B, C);
        m->grad_write = m->grads_stale; /* discarded: every member's block is written */
        cur = backward_layers(m, B, blk, scan, cur);
        m->grad_write = false;
        m->grads_stale = false;
        m->time_backward_s += mxp_time_now() - t1;
    }
    nn_ens_view(m, cur, 0);
    m->ens_member = -1;
    m->drop_train = false;
    return MXP_OK;
}

mxp_status nn_ens_step_batched(mxp_model *m, const mxp_batch *b, bool backward,
                               float loss_scale, double *loss, mxp_nonfinite_site *site,
                               mxp_error *err) {
    nn_slots *blk[NN_ENS_MAX];
    const size_t stride = nn_step_block_bytes(m);
    nn_slots *own = m->b.slots;
    for (int e = 0; e < m->ens; e++) /* the E blocks planned with the arena */
        blk[e] = (nn_slots *)(void *)((unsigned char *)own + (size_t)e * stride);
    mxp_status s = nn_ens_pass(m, b, backward, loss_scale, site != NULL, blk, err);
    if (s != MXP_OK) return s;
    double total = 0.0;
    for (int e = 0; e < m->ens; e++) { /* member by member, as nn_ens_step merges them */
        mxp_nonfinite_site ms;
        double l = 0.0;
        m->b.slots = blk[e];
        nn_pass_finish(m, backward, site ? &ms : NULL, &l);
        if (site && !site->found && ms.found) *site = ms;
        total += l;
    }
    m->b.slots = own;
    if (loss) *loss = total / (double)m->ens;
    return MXP_OK;
}
