/* nn/nn_internal.h: the model object, its layer table and buffer plan
 * (internal to src/nn).
 *
 * A model is an ordered list of layers over flat slabs (llm.c style: one
 * allocation per role, carved by a size table):
 *   master  FP32 [P]        (NULL when the policy keeps no master)
 *   work    weight dtype [P] (aliases master when has_master and weight F32)
 *   grads   FP32 [P]        parameter gradients, accumulated (+=)
 *   arena   everything activation-sized, planned once for max_batch:
 *     acts[l]   [max_batch, width[l]] in act_type[l] (l = 0..L; acts[0] is the
 *               input, acts[l+1] the stored output of layer l)
 *     g[0..1]   [max_batch, max_width] in the policy's grad dtype: activation
 *               gradients, ping-pong in backward
 *     sy        FP32 [max_batch, max_width]: the driver's staging buffer for a
 *               layer's FP32 output before it is stored in its dtype (NULL
 *               when every activation and gradient is FP32 and the first
 *               layer is not a block or layernorm: nothing stages then)
 *     sa, sb    FP32 [max_batch, max_width]: layer-internal scratch (with
 *               a fused head: the widest layer input; for a GPT sb lies
 *               over the last two stored activations, see plan_alias_sb)
 *     t0        [max_batch, max_width] in the matmul input dtype (only when a
 *               linear input must be cast), else NULL
 *     p0, p1    FP32 [max_width]: widened bias / gamma / beta
 *     ln_stats  FP32 [n_layernorm, 2, max_batch]: mean then rstd per row
 *     ext[l]    GPT layers: the tensors a block saves for backward
 *     xs        GPT layers: shared FP32 scratch (block chunks, block.c)
 *     lc        fused lm_head + cross-entropy (nn_fused_head): FP32 [rows
 *               per chunk, V], one chunk of logits; acts[L] is then not
 *               planned, and sy, sa, g[1] and t0 span the widest layer
 *               input instead of the widest layer (the vocabulary)
 * A layernorm read only by a matmul stores its output in the matmul input
 * dtype (what the reader casts it to), so it needs no FP32 copy or t0.
 *
 * Layers compute in FP32. The forward of layer l writes its FP32 output into
 * the buffer the driver gives it (acts[l+1] itself when that is F32, else
 * sy); the driver stores it in the op policy's output dtype and scans it for
 * non-finite values. Backward is symmetric: the layer reads dY (grad dtype)
 * and writes dX in FP32 (g[other] when the grad dtype is F32, else sy).
 * Entry points: see the prototypes below.
 */
#ifndef MIXPREC_NN_INTERNAL_H
#define MIXPREC_NN_INTERNAL_H

#include <mixprec/model.h>

#include "backend/step_ctl.h"
#include "kernels/kernels.h"

/* Which buffers of the arena a layer may use. */
typedef struct nn_layer {
    mxp_layer_kind kind;
    int64_t in, out;  /* features in and out (C_in, C_out) */
    size_t w_off;     /* weight (linear [out, in]) or gamma [C]: element offset */
    size_t b_off;     /* bias [out] or beta [C]: element offset */
    size_t n_params;  /* elements owned in the slabs (0 for activations) */
    int ln_slot;      /* layernorm: index into ln_stats; -1 otherwise */
    int fp8_slot;     /* first of its FP8 scaling tensors (x, W, dY per matmul) */
    /* GPT layers (embedding.c, block.c): */
    int64_t T, heads; /* context length, attention heads */
    size_t p_off;     /* embedding: wpe [T, C]; lm_head: the tied wte [V, C] */
    int64_t V;        /* vocabulary (embedding, lm_head) */
} nn_layer;

/* ---- result slots (slots.c) ----------------------------------------------------
 * A pass writes every scalar it produces (the loss, each scan's absmax and
 * non-finite counts) into the model's result slots, and nothing in the pass
 * reads them back on the host: kernels take slot pointers (kernels.h).
 * After the pass nn_pass_finish reads the slots once (a device backend's
 * one device-to-host copy of the pass) and decides the first non-finite
 * site, the monitor's statistics and the loss the step returns. Slot
 * (kind, layer) for layer -1 .. n_layers - 1 (docs/design.md "The backend
 * seam"). */
typedef enum nn_slot_kind {
    NN_SLOT_OUT, /* forward output of layer l, as stored (-1: the input batch, anomaly mode) */
    NN_SLOT_DX,  /* gradient of layer l's input, as stored (-1: the loss gradient) */
    NN_SLOT_DW,  /* layer l's parameter gradients in the slab, after its backward */
    NN_SLOT_W,   /* anomaly mode: layer l's weight, as stored, before its forward */
    NN_SLOT_B,   /*   and its bias */
    NN_SLOT_GW,  /* anomaly mode: layer l's weight gradient */
    NN_SLOT_GB,  /*   and its bias gradient */
    NN_SLOT_KIND_COUNT
} nn_slot_kind;

/* One scan's results (zero at the start of a training pass; a tensor
 * scanned in chunks folds them: max, +). */
typedef struct nn_scan {
    float amax;        /* largest finite |v| of the FP32 values */
    int64_t nf;        /* non-finite FP32 values */
    int64_t nf_stored; /* non-finite values as stored: nf, or the stored copy's
                          count when it has more (nn_scan_stored); the site count */
    int64_t tiny;      /* full monitor scans: 0 < |v| < the stored format's min normal */
} nn_scan;

/* The result-slot block (in the arena, backend memory: written by the
 * pass, read by nn_pass_finish only). */
typedef struct nn_slots {
    double loss;    /* the pass's mean loss */
    nn_scan scan[]; /* [(n_layers + 1) * NN_SLOT_KIND_COUNT], nn_slot() */
} nn_slots;
#define NN_SLOTS_MAX ((MXP_MODEL_MAX_LAYERS + 1) * NN_SLOT_KIND_COUNT)

/* Everything whose size depends on the precision policy. */
typedef struct nn_bufs {
    float *master;        /* FP32 [P] or NULL */
    void *work;           /* weight dtype [P]; == master when aliased */
    bool work_is_master;
    unsigned char *arena; /* one allocation, carved below */
    size_t arena_bytes;
    void *acts[MXP_MODEL_MAX_LAYERS + 1];        /* [max_batch, width[l]] */
    mxp_dtype act_type[MXP_MODEL_MAX_LAYERS + 1];
    void *g[2];           /* grad dtype [max_batch, max_width] */
    float *sy, *sa, *sb;  /* FP32 [max_batch, max_width] */
    void *t0;             /* matmul input dtype [max_batch, max_width] or NULL */
    float *p0, *p1;       /* FP32 [max_width] */
    float *ln_stats;      /* FP32 [n_ln, 2, max_batch] */
    mxp_dtype grad_type;  /* activation-gradient storage: policy grad, or BF16
                             when that is an FP8 format (FP8 is only a matmul
                             operand format, see mxp_model_fp8) */
    mxp_dtype gtype[MXP_MODEL_MAX_LAYERS + 1]; /* storage of the gradient of acts[i]
                             (i >= 1): grad_type, or F32 when layer i-1 is kept
                             FP32 (mxp_model_set_fp32_layers) */
    float *fw;            /* FP8 mode: FP32 [largest linear weight], the
                             quantised weight; else NULL */
    unsigned char *ext[MXP_MODEL_MAX_LAYERS]; /* GPT layers: saved tensors */
    float *xs;            /* GPT layers: shared FP32 scratch, xs_n floats */
    size_t xs_n;
    bool fused_head;      /* lm_head + cross-entropy run fused, in row chunks
                             (nn_fused_head): acts[L] is NULL and lc holds
                             one chunk of logits, then of their gradient */
    float *lc;            /* FP32 [lc_rows, V] when fused_head, else NULL
                             (inside sa when it fits: sa is idle meanwhile) */
    int64_t lc_rows;
    bool sb_aliased;      /* sb lies over acts[L-2..L-1] (model.c plan_alias_sb) */
    float *nf;            /* nn_count_nonfinite's FP32 chunk, nf_n floats: */
    size_t nf_n;          /*   xs when planned, else sb */
    nn_slots *slots;      /* the result slots, in the arena */
    int n_slots;          /* (n_layers + 1) * NN_SLOT_KIND_COUNT */
    int64_t slot_n[NN_SLOTS_MAX]; /* host record of the pass: elements scanned
                             into each scan slot (0: not scanned) */
    bool slot_full[NN_SLOTS_MAX]; /* and whether it was a full monitor scan */
    void *gs;             /* residual blocks only (else NULL): the grad dtype (FP32
                             when any gradient is) [max_batch, max_width], the
                             skip gradient a residual layer keeps for its block's
                             first layer (layer_skip.c) */
    mxp_dtype gs_type;    /*   the dtype it holds now */
} nn_bufs;

#define NN_MAX_TENSORS (12 * MXP_MODEL_MAX_LAYERS) /* a GPT block has 12 */
#define NN_NAME_MAX 32

struct mxp_model {
    mxp_model_spec spec;
    mxp_precision_policy policy;
    const mxp_kernels *k;
    int n_layers;
    nn_layer layers[MXP_MODEL_MAX_LAYERS];
    int64_t width[MXP_MODEL_MAX_LAYERS + 1]; /* width[0] = in_dim */
    int64_t max_width;
    int n_ln;
    size_t n_params; /* P */
    int n_tensors;
    mxp_tensor_info tensors[NN_MAX_TENSORS];
    char names[NN_MAX_TENSORS][NN_NAME_MAX];
    float *grads; /* FP32 [P]; NULL for an inference-only model */
    bool inference; /* mxp_model_create_inference: forward passes only */
    nn_bufs b;
    int n_fp8;                 /* FP8 scaling tensors the layers use */
    mxp_fp8_config fp8_cfg;
    mxp_fp8_scaling *fp8;      /* non-NULL iff the policy's matmul input is FP8 */
    bool fp8_observe;          /* inside a training step: record amax */
    mxp_monitor *mon;          /* optional per-layer monitor (headroom.c), borrowed */
    mxp_fault_config fault;    /* armed fault of the training passes (fault.c) */
    const float *grad_scales;  /* [n_layers] per-layer gradient scales of
                                  mxp_model_set_grad_scales (host memory, borrowed);
                                  NULL: none (grad_scale.c) */
    const mxp_step_group_in *gs_groups; /* inside a trainer step's passes with per-layer
                                  loss scaling (nn_step_group_scales): the step's group
                                  table in backend memory (backend/step_ctl.h), read
                                  where it lives; layer l's scale is
                                  gs_groups[gs_group[l]].scale. NULL otherwise;
                                  it takes precedence over grad_scales */
    int gs_group[MXP_MODEL_MAX_LAYERS]; /* layer -> group of gs_groups */
    int64_t blk_rows;          /* GPT blocks: rows per chunk of their FP32 scratch
                                  (0: NN_BLOCK_ROWS; < 0: whole batch, unchunked;
                                  set through nn_model_set_block_rows) */
    mxp_fp32_layers fp32_sel;  /* per-layer FP32 override as asked (amp.h) */
    uint64_t fp32_mask;        /* resolved: bit l = linear layer l kept FP32 (any mode
                                  but fp32; nn_layer_fp32) */
    bool fuse;                 /* fused forward epilogues (model_step.c; default on,
                                  MIXPREC_FUSION=0 or nn_model_set_fusion turn
                                  them off; the bits are the same either way) */
    bool grads_stale;          /* mxp_model_discard_grads: the slab's contents are void
                                  until the next backward, which writes them */
    bool grad_write;           /* inside that backward: parameter gradients are written
                                  ("=": GEMM beta 0, slices of "+=" kernels zeroed
                                  first, nn_grad_beta / nn_grad_zero), not added */
    const float *ctl_beta;     /* inside a trainer step's pass (step_pass.c): the
                                  control block's grad_beta in backend memory
                                  (backend/step_ctl.h), which decides write or add
                                  instead of the host flags; NULL otherwise */
    int ens;                   /* ensemble members E >= 1 (spec.ensemble; ensemble.c) */
    size_t ens_p1;             /* parameters per member (P / E) */
    int ens_member;            /* inside a member's pass: its index (the layers'
                                  offsets point into its block); -1 outside */
    bool ens_batched;          /* ensemble training passes layer-major (ens_batched.c)
                                  when nn_ens_batched_ok; off: member-sequential */
    int64_t ens_batched_passes; /* layer-major passes run (the tests' check that they ran) */
    uint64_t ens_elites;       /* the members that predict (bit e: member e; all E
                                  at create): mxp_model_set_elites, ensemble.c */
    double time_forward_s;     /* wall seconds in mxp_model_step's forward + loss */
    double time_backward_s;    /*   and in its backward, summed over all calls */
    mxp_transfer_stats xfer;   /* host <-> backend copies of named tensors (model_tensors.c) */
    float *tw;                 /* per-target loss weights [target_dim], backend memory;
                                  NULL: all 1 (loss_head.c) */
    float *tw_host;            /* their host copy (spec.target_weights points here) */
    /* residual blocks and dropout (layer_skip.c) */
    uint64_t seed;             /* the creation seed: keys the dropout masks */
    bool drop_train;           /* inside a training pass (mxp_model_step with backward):
                                  dropout layers drop; else they are the identity */
    int64_t drop_step;         /* mxp_model_set_dropout_pass: the (step, pass) */
    int drop_pass;             /*   the coming training passes draw their masks for */
    unsigned char *step_blocks; /* a trainer step's slot blocks (backend memory, the
                                  trainer's report area; step_pass.c), or NULL */
    struct nn_pass_rec *recs;  /* host: one record per block of the step */
    int n_recs, cap_recs;
    /* parameters of record on a device (model_sync.c): pull before a host
     * read, wrote after a host write; NULL: the host slabs are the record */
    mxp_status (*sync_pull)(void *user, mxp_error *err);
    mxp_status (*sync_wrote)(void *user, mxp_error *err);
    mxp_status (*sync_grads)(void *user, mxp_error *err); /* before a gradient read */
    void *sync_user;
};

/* ---- per-kind layer table ------------------------------------------------ */

/* forward: read acts[l] (its dtype), write the FP32 output [B, out] to y32.
 * backward: dy is [B, out] in the grad dtype; add the parameter grads
 * (scaled, +=) into m->grads, or write them all when m->grad_write
 * (nn_grad_beta, nn_grad_zero); when dx32 != NULL write dX [B, in] ("=").
 * Layers use only sa, sb, t0, p0, p1 and their ln_stats slot as scratch
 * (GPT layers also xs and their ext region; a block called with dx32 NULL
 * also the then idle sy). */
typedef struct nn_layer_vtable {
    const char *name;
    mxp_op_class op_class;
    void (*forward)(mxp_model *m, int l, int64_t B, float *y32);
    void (*backward)(mxp_model *m, int l, int64_t B, const void *dy,
                     float *dx32);
} nn_layer_vtable;

const nn_layer_vtable *nn_layer_vtable_get(mxp_layer_kind kind);

void nn_linear_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_linear_backward(mxp_model *m, int l, int64_t B, const void *dy,
                        float *dx32);
/* nn_linear_forward with the driver's fused epilogue: e->y [B, out] = x W^T,
 * then e's pass (kernels.h, mxp_epilogue) with e->bias set here to the
 * layer's FP32 bias (widened into p0 when stored narrower): the table's
 * gemm_epi, or the GEMM then bias_act_store for the FP16 fast-accumulate
 * GEMM. The caller fills e's other inputs (B = batch, C = out). Not for the
 * FP8 form (m->fp8 and the layer not kept FP32). */
void nn_linear_forward_epi(mxp_model *m, int l, int64_t B, mxp_epilogue *e);
/* nn_linear_backward with dX = e->y [B, in] (FP32) and the dX GEMM running
 * e's pass over it (the driver's store + scan of dX: e has no bias and no
 * activation), by the same table calls as nn_linear_forward_epi. Not for
 * the FP8 form. */
void nn_linear_backward_epi(mxp_model *m, int l, int64_t B, const void *dy, mxp_epilogue *e);
void nn_relu_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_relu_backward(mxp_model *m, int l, int64_t B, const void *dy,
                      float *dx32);
void nn_gelu_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_gelu_backward(mxp_model *m, int l, int64_t B, const void *dy,
                      float *dx32);
void nn_tanh_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_tanh_backward(mxp_model *m, int l, int64_t B, const void *dy,
                      float *dx32);
void nn_layernorm_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_layernorm_backward(mxp_model *m, int l, int64_t B, const void *dy,
                           float *dx32);

/* ---- per-layer loss scaling (grad_scale.c) ---------------------------------
 * S(l), the scale the gradient of layer l's output carries (model.h
 * mxp_model_set_grad_scales): in a trainer step's passes the group table
 * in backend memory (m->gs_groups, the scales begin uploaded, read where
 * they live, at the call: every caller runs inside a backend call), else
 * the caller's host array (m->grad_scales). The backward multiplies the
 * FP32 dX that layer b passes down to layer a < b by S(a) / S(b) where the
 * two differ. */
static inline bool nn_grad_scaled(const mxp_model *m) {
    return m->gs_groups != NULL || m->grad_scales != NULL;
}
/* Whether the dX from layer b down to layer a may need that rescale, asked
 * without reading a scale in backend memory (the driver's choice of its
 * unfused path): with the group table, a and b in different groups; with a
 * host array, S(a) != S(b). False: S(a) == S(b) for certain. */
bool nn_grad_rescales(const mxp_model *m, int a, int b);
/* S(a) / S(b), 1 without per-layer scaling. */
float nn_grad_scale_ratio(const mxp_model *m, int a, int b);
/* dx32 [n] *= S(a) / S(b) (the kernel table's scale) when S(a) != S(b). */
void nn_grad_rescale(mxp_model *m, int a, int b, float *dx32, size_t n);

/* ---- residual blocks and dropout (layer_skip.c) ---------------------------
 * A residual layer c (residual:N) closes the block of layers s = c - N ..
 * c - 1: forward y = acts[s] + acts[c] in FP32 (the block's input plus
 * f's output, each widened from its stored dtype). Backward passes dY to
 * f unchanged (dX = dY) and keeps the stored dY in b.gs; the driver adds
 * it (times S(s) / S(c) under per-layer loss scaling, nn_grad_scale_ratio)
 * to the FP32 dX of layer s before storing it (nn_residual_skip_add), so
 * layer s's dX is the sum of both paths, rounded once. Dropout layers
 * (dropout:P) multiply by the mask times 1/(1-P) in training passes
 * (m->drop_train) and copy otherwise; backward applies the same mask,
 * redrawn from its counter (mxp_model_set_dropout_pass). */
void nn_residual_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_residual_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32);
void nn_dropout_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_dropout_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32);
/* The residual layer whose block starts at layer l (its skip gradient
 * goes into l's dX), or -1. */
int nn_residual_closing(const mxp_model *m, int l);
/* dx32 [B, width[l]] += the kept skip gradient of the block starting at
 * layer l (nn_residual_closing(m, l) >= 0), widened, times the per-layer
 * scale ratio. */
void nn_residual_skip_add(mxp_model *m, int l, int64_t B, float *dx32);
/* The model has a residual layer (model_plan.c plans b.gs then). */
bool nn_has_residual(const mxp_model *m);
/* Spec rules of the residual and dropout layers at index i (count, rate,
 * nesting, widths given the input width of each layer in_w[0..n]):
 * MXP_ERR_INVALID_ARG naming spec.layers[i] and what is accepted. */
mxp_status nn_skip_validate(const mxp_model_spec *s, const int64_t *in_w, mxp_error *err);

/* Loss over the stored last activation acts[L], in FP32, into the result
 * slot *loss. When dpred32 is not NULL it receives loss_scale *
 * dLoss/dpred [B, out_dim] ("="). Uses sa. */
void nn_loss_forward(mxp_model *m, const mxp_batch *b, float *dpred32, float loss_scale,
                     double *loss);

/* ---- the Gaussian head (loss_gauss.c) --------------------------------------
 * Its bounds max_logvar [1, D] then min_logvar [1, D] follow the last
 * linear layer's bias in every slab and count among that layer's
 * parameters (n_params), so per-layer ranges (loss-scale groups, monitor,
 * checkpoints by tensor) cover them; the linear kernels never read them. */

/* Add the bounds of last linear layer L (2D outputs) to the tensor table
 * and to L->n_params, advancing *P; false on size overflow. */
bool nn_gauss_add_bounds(mxp_model *m, nn_layer *L, size_t *P);
/* Slab offset of max_logvar (min_logvar follows at + D). */
size_t nn_gauss_bounds_off(const mxp_model *m);
/* Their initial values into dst [P]: max 0.5, min -10 (mbrl-lib). */
void nn_gauss_init_bounds(const mxp_model *m, float *dst);
/* The loss of the Gaussian head on FP32 predictions pred [B, 2D], targets
 * y [B, D]; with dpred32 (!= NULL) it gets loss_scale * dloss/dpred and the
 * bound gradients go into the grad slab (written when the gradients were
 * discarded, else added). Bounds read from the master when there is one. */
void nn_gauss_loss(mxp_model *m, const float *pred, const float *y, int64_t B,
                   float *dpred32, float loss_scale, double *loss);
/* pred [B, 2D (+1)] raw outputs -> mean and bounded log-variance, in
 * place (a termination logit in the last column is left as it is). */
void nn_gauss_bound_pred(const mxp_model *m, float *pred, int64_t B);
/* D: the Gaussian head's regression targets ((out - termination) / 2). */
int64_t nn_gauss_dim(const mxp_model *m);
/* The bounds [2D] as FP32 (the master, or the working weights widened
 * into p0 in pure modes). */
const float *nn_gauss_bounds_f32(const mxp_model *m);

/* ---- per-target weights and the termination flag (loss_head.c) -------------
 * spec.termination and spec.target_weights (model.h). m->tw: the weights
 * [target_dim] in backend memory, NULL when every weight is 1; m->tw_host
 * their host copy (what spec.target_weights points to). */

/* Validate spec's termination and target_weights (create, spec_num_params). */
mxp_status nn_head_validate(const mxp_model_spec *s, mxp_error *err);
/* Copy spec.target_weights into m->tw / m->tw_host (NULL both when they
 * are all 1 without termination); repoints m->spec.target_weights. */
mxp_status nn_head_install(mxp_model *m, mxp_error *err);
void nn_head_free(mxp_model *m);
/* True when the loss is the head kernel's (termination or weights). */
bool nn_head_on(const mxp_model *m);
/* The head kernel's loss of pred [B, out_dim] against y [B, target_dim]
 * (as nn_gauss_loss for the bounds' gradients). */
void nn_head_loss(mxp_model *m, const float *pred, const float *y, int64_t B, float *dpred32,
                  float loss_scale, double *loss);

/* ---- ensembles (ensemble.c) -------------------------------------------------
 * Member e's parameters are the single model's, shifted by e * ens_p1 in
 * every slab; during member e's pass every layer's offsets are shifted so,
 * and the layer code runs unchanged. */

/* Shift every layer's parameter offsets to member e's block (from member
 * cur's) and mark the pass as member e's (m->ens_member = e; the caller
 * sets -1 when done); returns e. */
int nn_ens_view(mxp_model *m, int cur, int e);
/* Replicate the tensor table of member 0 for members 1..E-1 and prefix
 * every name with "members.<e>."; false when the table overflows. */
bool nn_ens_tensors(mxp_model *m);
/* mxp_model_step / mxp_model_predict of an ensemble (m->ens > 1, outside a
 * member's pass): every member on its rows / on x. */
mxp_status nn_ens_step(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       double *loss, mxp_nonfinite_site *site, mxp_error *err);
mxp_status nn_ens_predict(mxp_model *m, const float *x, int64_t B, float *pred, mxp_error *err);
/* The mask of all E members (bits 0..E-1). */
static inline uint64_t nn_ens_all(int E) { return E >= 64 ? ~0ull : (1ull << E) - 1ull; }

/* ---- helpers shared by the layer files ----------------------------------- */

/* Parameter gradients, "=" or "+=" (the = vs += rule of llm.c): a backward
 * normally ADDS into the grad slab; the first backward after
 * mxp_model_discard_grads WRITES it instead (m->grad_write), so no pass
 * zeroes the slab. Every layer's backward writes each of its parameter
 * gradients exactly once in that backward: a GEMM producing a whole
 * gradient takes beta nn_grad_beta(m) (0 when writing: C is not read; in a
 * trainer step the value is the control block's grad_beta, read where it
 * lives, backend/step_ctl.h); a
 * "+=" kernel or a scatter (bias_grad, layernorm_bwd, embedding) first
 * clears its slice with nn_grad_zero. The written values are those of
 * "zero, then add" except that an exactly -0.0 gradient stays -0.0 (0 + x
 * is x for every other x); the trainer's grad pass turns it into +0.0
 * (mxp_gradpass_elem), so what the step computes from them is unchanged. */
static inline float nn_grad_beta(const mxp_model *m) {
    if (m->ctl_beta) return *m->ctl_beta; /* read at the kernel call, from the block */
    return m->grad_write ? 0.0f : 1.0f;
}
/* The same question asked by the loss's gradient kernels, which run before
 * the layers' backward (m->grad_write is set only around that). */
static inline bool nn_loss_grad_writes(const mxp_model *m) {
    return m->ctl_beta ? *m->ctl_beta == 0.0f : m->grads_stale;
}
/* Zero the n gradients at slab offset off when this backward writes. */
void nn_grad_zero(mxp_model *m, size_t off, size_t n);

/* An FP32 view of n elements of a typed buffer: the buffer itself when it is
 * F32, else its widened copy in scratch. */
const float *nn_view_f32(const mxp_model *m, mxp_dtype t, const void *buf,
                         size_t n, float *scratch);
/* Pointer to element `off` of the work slab. */
const void *nn_work_at(const mxp_model *m, size_t off);
/* Layer l is kept in FP32 by the per-layer override under the current
 * policy (never in fp32 mode, where everything is). */
bool nn_layer_fp32(const mxp_model *m, int l);
/* The weights layer l computes with, at slab offset off: the FP32 master
 * for a layer kept FP32 (*type F32), else the work slab (policy weight). */
const void *nn_layer_weights(const mxp_model *m, int l, size_t off, mxp_dtype *type);
/* The matmul A operand for a linear layer input acts[l] ([B, in]): acts[l]
 * itself when its dtype is the matmul input dtype, else its cast in t0. */
const void *nn_matmul_input(mxp_model *m, int l, int64_t B, mxp_dtype *type);

/* ---- FP8 emulation (block_dense.c) ---------------------------------------- */

/* True for F8_E4M3 and F8_E5M2. */
bool nn_dtype_is_fp8(mxp_dtype t);
/* The FP8 form of a linear layer (used by nn_linear_* when m->fp8): x and W
 * quantised to E4M3, dY to E5M2 with their delayed scales, FP32 compute on
 * the quantised values, results multiplied by the scale inverses. Bias from
 * the FP32 master. Scratch: sa, sb, fw. */
void nn_fp8_linear_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_fp8_linear_backward(mxp_model *m, int l, int64_t B, const void *dy,
                            float *dx32);
/* y32 [B, out] = x W^T (+ b at b_off when has_bias), FP8-emulated, W at
 * w_off, scaling tensors slot..slot+2. x32 is the FP32 input [B, in]; xq
 * [B, in] and wq [out, in] are scratch (xq may alias x32 when the input is
 * not needed afterwards). */
void nn_fp8_dense_forward(mxp_model *m, int slot, const float *x32, int64_t B,
                          int64_t in, int64_t out, size_t w_off, bool has_bias,
                          size_t b_off, float *y32, float *xq, float *wq);
/* Its backward: dy32 [B, out] holds the FP32 output gradient and is
 * OVERWRITTEN with its quantised form; parameter grads are added (+=) to
 * the grad slab; dx32 [B, in] ("=") may be NULL; xq must not alias dy32. */
void nn_fp8_dense_backward(mxp_model *m, int slot, const float *x32, int64_t B,
                           int64_t in, int64_t out, size_t w_off, bool has_bias,
                           size_t b_off, float *dy32, float *dx32, float *xq,
                           float *wq);
/* Round buf [n] in place to the values of dtype t (RNE; identity for F32):
 * a transient FP32 tensor that stands for a tensor of dtype t. */
void nn_round_f32(const mxp_model *m, mxp_dtype t, float *buf, size_t n);
/* FP32 view of n parameters at slab offset off: the master when the model
 * is in FP8 mode (FP8 is for matmul operands only), else the work slab
 * widened into scratch. */
const float *nn_param_f32(const mxp_model *m, size_t off, size_t n, float *scratch);
/* (Re)create m->fp8 for policy p: NULL when p's matmul input is not FP8.
 * On error *out is NULL and err says why. */
mxp_status nn_fp8_make(const mxp_model *m, const mxp_precision_policy *p,
                       mxp_fp8_scaling **out, mxp_error *err);

/* ---- monitor, anomaly mode and faults (headroom.c, fault.c) --------------
 * Only training passes (a non-NULL site) are monitored or faulted. */

/* The monitor's scan of v [n] (values about to be stored in t), tensor
 * `which` of layer `layer` (m->mon non-NULL; layer -1, the loss gradient,
 * is the monitor's entry n_layers): out's amax and nf, and, for a full
 * scan, tiny (returns true) and the histogram (accumulated in the
 * monitor). Nothing is recorded here: nn_pass_finish records the slot. */
bool nn_mon_scan(mxp_model *m, int layer, mxp_monitor_tensor which,
                 const float *v, size_t n, mxp_dtype t, nn_scan *out);
/* Record a scan's results in the monitor (nn_pass_finish): amax and nf of
 * n values stored in t; _tiny adds a full scan's tiny count. */
void nn_mon_record(mxp_model *m, int layer, mxp_monitor_tensor which, size_t n, mxp_dtype t,
                   float amax, int64_t nf);
void nn_mon_record_tiny(mxp_model *m, int layer, mxp_monitor_tensor which, size_t n,
                        int64_t tiny);
/* No monitor, or one whose scans are plain absmax passes (not full, no
 * histograms): what a fused pass can report through nn_mon_record. */
bool nn_mon_plain(const mxp_model *m);
/* Record the first non-finite site since the monitor's reset (what:
 * "output", "weight", "grad_input", ...) and, in anomaly mode, its first
 * forward culprit. No-op without a monitor. */
void nn_mon_note_site(mxp_model *m, const mxp_nonfinite_site *site,
                      const char *what);
/* Start of a monitored pass, as its slots are read (nn_pass_read). */
void nn_mon_begin_pass(mxp_model *m);
/* Anomaly mode is on (monitor attached and anomaly set). */
bool nn_mon_anomaly(const mxp_model *m);
/* *out = non-finite values among n elements of a typed buffer (widened in
 * chunks through the FP32 scratch b.nf: only call between layer calls). */
void nn_count_nonfinite(mxp_model *m, mxp_dtype t, const void *buf, size_t n, int64_t *out);
/* Poison v [n] when the armed fault targets (pass, layer). */
void nn_fault_apply(const mxp_model *m, bool backward, int layer, float *v, size_t n);
/* The armed fault targets (pass, layer). */
bool nn_fault_targets(const mxp_model *m, bool backward, int layer);

/* ---- GPT layers (embedding.c, block.c, attention.c) -------------------------- */

/* True for the layer kinds implemented outside the MLP core. */
bool nn_kind_is_ext(mxp_layer_kind k);
/* Structure of ext layer i with input width `in`: sets in/out/offsets/
 * n_params/fp8 slots, adds its tensors to the table, advances *P. */
mxp_status nn_ext_build(mxp_model *m, int i, int64_t in, size_t *P, mxp_error *err);
/* Bytes of saved tensors layer l keeps under policy p (0 if none), and the
 * FP32 scratch floats all ext layers need (max over layers). */
size_t nn_ext_saved_bytes(const mxp_model *m, int l, const mxp_precision_policy *p);
size_t nn_ext_scratch_floats(const mxp_model *m, const mxp_precision_policy *p);
/* GPT-2 initialisation of layer l's parameters into dst [P] from r. */
void nn_ext_init(const mxp_model *m, int l, mxp_rng *r, float *dst);
/* Spec checks for the GPT kinds (names the field and the accepted range). */
mxp_status nn_ext_validate(const mxp_model_spec *s, mxp_error *err);

/* An empty spec (no layers) with the fields every builder sets the same
 * way: input width, largest batch, loss, layernorm epsilon 1e-5
 * (mxp_model_spec_mlp, mxp_model_spec_layers). */
mxp_model_spec nn_spec_empty(int64_t in_dim, mxp_loss_kind loss, int64_t max_batch);

/* Default rows per chunk of a block's FP32 scratch (rounded up to whole
 * sequences): small enough that the [R, 4C] chunk is a fraction of the
 * saved tensors, large enough that the GEMMs keep their speed (128: the
 * default GPT's scratch is 0.38 MiB smaller than at 256). */
#define NN_BLOCK_ROWS 128

/* Re-plan m's buffers with `rows` rows per block chunk and per fused-head
 * chunk (0: defaults, < 0: unchunked, unfused head). Weights are kept,
 * grads zeroed; nothing changes on error.
 * Results are bit-identical for every value (tests/test_gpt.c). */
mxp_status nn_model_set_block_rows(mxp_model *m, int64_t rows, mxp_error *err);

/* Fused forward epilogues on or off (model_step.c): for tests comparing the
 * two paths bit for bit, and for timing them. */
void nn_model_set_fusion(mxp_model *m, bool on);

/* Causal self-attention of Bs sequences of T rows (attention.c): qkv
 * [Bs*T, 3C] and att [Bs, H, T, T] in dtype at; scores rounded to st (the
 * matmul output dtype); y32 [Bs*T, C] ("="); tmp: FP32 [T*T]. */
void nn_attention_forward(const mxp_model *m, int64_t Bs, int64_t T, int64_t C,
                          int64_t H, mxp_dtype at, mxp_dtype st, const void *qkv,
                          void *att, float *y32, float *tmp);
/* Its backward: dy32 [Bs*T, C] (FP32, values of dtype gt) -> dqkv32
 * [Bs*T, 3C] ("="); intermediate grads rounded to gt; tmp FP32 [2*T*T]. */
void nn_attention_backward(const mxp_model *m, int64_t Bs, int64_t T, int64_t C,
                           int64_t H, mxp_dtype at, mxp_dtype gt, const void *qkv,
                           const void *att, const float *dy32, float *dqkv32,
                           float *tmp);

void nn_embedding_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_embedding_backward(mxp_model *m, int l, int64_t B, const void *dy,
                           float *dx32);
void nn_lm_head_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_lm_head_backward(mxp_model *m, int l, int64_t B, const void *dy,
                         float *dx32);
void nn_block_forward(mxp_model *m, int l, int64_t B, float *y32);
void nn_block_backward(mxp_model *m, int l, int64_t B, const void *dy,
                       float *dx32);

/* Rows per chunk of the fused lm_head + cross-entropy (model_step.c);
 * nn_model_set_block_rows(rows > 0) sets it to rows (any value). */
#define NN_HEAD_ROWS 256

/* True when policy p runs m's lm_head and loss fused in row chunks: the
 * last layer is an lm_head, the loss is cross-entropy on FP32 logits, the
 * matmul input is not FP8 (fp8 keeps the whole-batch path), and m is not
 * on the unchunked reference path (blk_rows < 0, the tests' reference). */
bool nn_fused_head(const mxp_model *m, const mxp_precision_policy *p);

/* The memory plan (model_plan.c): allocate the master/work slabs and the
 * arena of b for policy p, contents zero (MXP_ERR_OUT_OF_MEMORY or an
 * overflow naming the sizes on failure, b then empty); nn_free_bufs
 * releases them (b may be empty). */
mxp_status nn_plan_bufs(const mxp_model *m, const mxp_precision_policy *p, nn_bufs *b,
                        mxp_error *err);
void nn_free_bufs(nn_bufs *b);

/* Result slot (kind, layer) of the pass, layer -1 .. n_layers - 1. */
nn_scan *nn_slot(const mxp_model *m, nn_slot_kind kind, int layer);
/* Start of a training pass: every slot zero, nothing scanned. */
void nn_slots_begin(mxp_model *m);
/* The driver's record that n elements were scanned into slot (kind, layer)
 * (full: a full monitor scan): host bookkeeping, not a slot read. */
void nn_slot_issued(mxp_model *m, nn_slot_kind kind, int layer, size_t n, bool full);
/* s->nf_stored from s's amax and nf: nf, or, when t is not FP32 and the
 * FP32 values hold a non-finite value or their largest overflows in t, the
 * count of non-finite values in `stored` (n elements of t) if larger: the
 * stored copy is what the next layer reads. Reads the slot where it lives
 * (a device kernel would), never from the host driver. */
void nn_scan_stored(nn_scan *s, mxp_dtype t, const void *stored, size_t n);
/* Layer l's parameter gradients (the grad slab from its w_off, n_params
 * FP32 values) into slot DW of the current block (m->b.slots): the
 * monitor's scan when one is attached, else one absmax pass, then the
 * stored count. Returns whether the monitor's scan was full (for
 * nn_slot_issued, which the caller records). model_step.c. */
bool nn_scan_dw(mxp_model *m, int l);
/* Fold a chunk's results c into slot s (max, +). */
void nn_scan_fold(nn_scan *s, const nn_scan *c);
/* After a pass (forward, loss and, with `backward`, backward) of a model:
 * the one read of the result slots. With site (a training pass): the first
 * non-finite site in forward order, then the loss, then backward order, as
 * the pass would have met them, noted in the monitor, and every scan
 * recorded in the monitor when one is attached. *loss (may be NULL) gets
 * the loss slot. */
void nn_pass_finish(mxp_model *m, bool backward, mxp_nonfinite_site *site, double *loss);
/* nn_pass_finish without the copy: m->b.slots and m->b.slot_n / slot_full
 * already hold the pass's block and record in host memory (step_pass.c,
 * after the trainer's report). The monitor's pass begins here (a site's
 * pass index and its culprit's output absmax are this pass's). */
void nn_pass_read(mxp_model *m, bool backward, mxp_nonfinite_site *site, double *loss);

/* A pass's host record: elements scanned into each slot (0: not
 * scanned) and whether it was a full monitor scan (nn_bufs.slot_n,
 * slot_full as one pass left them). */
typedef struct nn_pass_rec {
    int64_t n[NN_SLOTS_MAX];
    bool full[NN_SLOTS_MAX];
} nn_pass_rec;

/* The forward, loss and (with backward) backward of batch b, results into
 * m->b.slots (zeroed first when scan), nothing read back; the batch checks
 * of mxp_model_step. Not for an ensemble's whole batch (one member's). */
mxp_status nn_pass_run(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       bool scan, mxp_error *err);

/* An ensemble's batch (ensemble.c): not NULL, E * B rows with B in
 * 1..spec.max_batch; MXP_ERR_INVALID_ARG naming the rows and what is
 * accepted. Checked by the member loop and the layer-major pass. */
mxp_status nn_ens_check_batch(const mxp_model *m, const mxp_batch *b, mxp_error *err);
/* The ensemble's member loop (ensemble.c): for e = 0..E-1 the member's view
 * and its rows of b as mb (the discard state of the step restored for each
 * member), fn(m, e, &mb, ctx, err) until an error; the view restored. */
typedef mxp_status (*nn_member_fn)(mxp_model *m, int e, const mxp_batch *mb, void *ctx,
                                   mxp_error *err);
mxp_status nn_ens_each(mxp_model *m, const mxp_batch *b, nn_member_fn fn, void *ctx,
                       mxp_error *err);

/* ---- the layer-major ensemble pass (ens_batched.c) --------------------------- */
#define NN_ENS_MAX MXP_MODEL_MAX_ENSEMBLE
/* The model's ensemble passes can run layer-major (m->ens_batched; MLP
 * layer kinds: linear, relu, gelu, tanh, layernorm, residual, dropout; no
 * FP8, per-layer loss scaling, anomaly mode or armed fault): the same
 * bits as the member loop. */
bool nn_ens_batched_ok(const mxp_model *m);
/* The pass of all members of ensemble batch b (E blocks of B rows),
 * layer-major; member e's loss and scans into blk[e] (zeroed first when
 * scan), the host record (the same for every member) in m->b.slot_n. */
mxp_status nn_ens_pass(mxp_model *m, const mxp_batch *b, bool backward, float loss_scale,
                       bool scan, nn_slots *const *blk, mxp_error *err);
/* nn_ens_step by nn_ens_pass into the E slot blocks the plan keeps. */
mxp_status nn_ens_step_batched(mxp_model *m, const mxp_batch *b, bool backward,
                               float loss_scale, double *loss, mxp_nonfinite_site *site,
                               mxp_error *err);
/* Its stores, scans and fused epilogues, per member (ens_fused.c), with
 * the driver's kernels and conditions. v32 [E B, C] stored into dst
 * (dtype t) and scanned per member into slot (kind, layer) of blk[e]: */
void nn_ens_store_scan(mxp_model *m, nn_slots *const *blk, bool scan, nn_slot_kind kind,
                       int layer, float *v32, mxp_dtype t, void *dst, int64_t B, int64_t C);
/* Linear layer l's output y32 [E B, out] (the GEMMs done, no bias yet):
 * each member's bias, store and scan, and the activation after it when
 * fused (then returns 2, the layers done; else 1). *cur: the view. */
int nn_ens_linear_epilogue(mxp_model *m, int l, int64_t B, float *y32, nn_slots *const *blk,
                           bool scan, int *cur);
/* Activation layer l's backward, store and scan fused per member (dy in
 * the grad dtype, dx [E B, in] in gtype[l]); false: run it unfused. */
bool nn_ens_act_bwd_fused(mxp_model *m, int l, int64_t B, const void *dy, void *dx,
                          nn_slots *const *blk, bool scan);
/* MIXPREC_ENS_BATCHED (1: on; unset or 0: off), read once; and the
 * per-model switch (tests compare both paths in one process). */
bool nn_ens_batched_default(void);
void nn_ens_set_batched(mxp_model *m, bool on);
/* mxp_model_step's checks of one pass's batch (model_step.c). */
mxp_status nn_check_batch(const mxp_model *m, const mxp_batch *b, bool backward,
                          float loss_scale, mxp_error *err);

/* Cross-entropy of R rows of FP32 logits [R, V] (labels [R]), added row by
 * row to *total in the order the whole-batch kernel sums them; when dl is
 * not NULL it receives k * (softmax - onehot) ("=", may alias logits), k
 * the per-row factor grad_scale / B of the whole batch (loss.c). */
void nn_xent_rows(const mxp_model *m, float *dl, const float *logits, const int32_t *labels,
                  int64_t R, int64_t V, float k, double *total);

/* The forward pass for B rows of x; with `scan` (a training pass) the
 * outputs are scanned into the result slots (nn_slots_begin first).
 * With a fused head (b.fused_head) it stops before the lm_head, which
 * mxp_model_step runs with the loss (and predict on its own). */
void nn_forward(mxp_model *m, const float *x, int64_t B, bool scan);

#endif /* MIXPREC_NN_INTERNAL_H */
