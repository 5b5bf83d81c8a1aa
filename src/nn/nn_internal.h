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
 *               layer's FP32 output before it is stored in its dtype
 *     sa, sb    FP32 [max_batch, max_width]: layer-internal scratch
 *     t0        [max_batch, max_width] in the matmul input dtype (only when a
 *               linear input must be cast), else NULL
 *     p0, p1    FP32 [max_width]: widened bias / gamma / beta
 *     ln_stats  FP32 [n_layernorm, 2, max_batch]: mean then rstd per row
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

#include "kernels/kernels.h"

/* Which buffers of the arena a layer may use. */
typedef struct nn_layer {
    mxp_layer_kind kind;
    int64_t in, out;  /* features in and out (C_in, C_out) */
    size_t w_off;     /* weight (linear [out, in]) or gamma [C]: element offset */
    size_t b_off;     /* bias [out] or beta [C]: element offset */
    size_t n_params;  /* elements owned in the slabs (0 for activations) */
    int ln_slot;      /* layernorm: index into ln_stats; -1 otherwise */
} nn_layer;

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
} nn_bufs;

#define NN_MAX_TENSORS (2 * MXP_MODEL_MAX_LAYERS)
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
    float *grads; /* FP32 [P] */
    nn_bufs b;
};

/* ---- per-kind layer table ------------------------------------------------ */

/* forward: read acts[l] (its dtype), write the FP32 output [B, out] to y32.
 * backward: dy is [B, out] in the grad dtype; add the parameter grads
 * (scaled, +=) into m->grads; when dx32 != NULL write dX [B, in] ("=") there.
 * Layers use only sa, sb, t0, p0, p1 and their ln_stats slot as scratch. */
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

/* Loss over the stored last activation acts[L], in FP32. When dpred32 is not
 * NULL it receives loss_scale * dLoss/dpred [B, out_dim] ("="). Uses sa. */
double nn_loss_forward(mxp_model *m, const mxp_batch *b, float *dpred32,
                       float loss_scale);

/* ---- helpers shared by the layer files ----------------------------------- */

/* An FP32 view of n elements of a typed buffer: the buffer itself when it is
 * F32, else its widened copy in scratch. */
const float *nn_view_f32(const mxp_model *m, mxp_dtype t, const void *buf,
                         size_t n, float *scratch);
/* Pointer to element `off` of the work slab. */
const void *nn_work_at(const mxp_model *m, size_t off);
/* The matmul A operand for a linear layer input acts[l] ([B, in]): acts[l]
 * itself when its dtype is the matmul input dtype, else its cast in t0. */
const void *nn_matmul_input(mxp_model *m, int l, int64_t B, mxp_dtype *type);

/* The forward pass for B rows of x; scans outputs into site (may be NULL). */
void nn_forward(mxp_model *m, const float *x, int64_t B,
                mxp_nonfinite_site *site);

#endif /* MIXPREC_NN_INTERNAL_H */
