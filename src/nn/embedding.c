/* nn/embedding.c: the GPT input and output layers, and the model spec.
 *
 * Entry points: mxp_model_spec_gpt, nn_embedding_forward/_backward,
 * nn_lm_head_forward/_backward (contracts in nn_internal.h).
 *
 * Embedding (GPT-2 wte + wpe): rows are B sequences of T positions; row r
 * holds the token id (FP32, exact) of position t = r mod T, and
 *     y[r] = (wte[id] + wpe[t]) * embed_scale            (FP32, then stored
 * in the activation dtype by the driver). Backward scatters:
 *     dwte[id] += embed_scale * dY[r],  dwpe[t] += embed_scale * dY[r]
 * (the first layer: no dX; in a backward that writes the gradients,
 * nn_grad_beta, the slices are zeroed first, wte only when no tied
 * lm_head wrote it). The lookup is not a matmul: it reads FP32
 * parameters (the work slab widened, or the master in FP8 mode).
 *
 * LM head, tied to the embedding as GPT-2 (no bias): logits = x wte^T,
 * a matmul under the policy (operands in the matmul input dtype, FP32
 * accumulation; FP8-emulated in fp8 mode with its own three scaling
 * tensors), with dwte += dlogits^T x accumulated into the embedding's
 * gradient (written, beta 0, when the backward writes: the lm_head's
 * backward runs before the embedding's), and dX = dlogits wte.
 * Reference: Radford et al. 2019 (GPT-2); karpathy/llm.c encoder_forward /
 * encoder_backward and matmul_forward / matmul_backward.
 */
#include "nn/nn_internal.h"

#include <string.h>

mxp_model_spec mxp_model_spec_gpt(int64_t vocab, int64_t context, int64_t embd, int n_heads,
                                  int n_layer, int64_t max_seqs) {
    mxp_model_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = 1;
    s.max_batch = max_seqs > 0 && context > 0 && max_seqs <= INT64_MAX / context
                      ? max_seqs * context
                      : 0; /* rejected by create */
    s.loss = MXP_LOSS_XENT;
    s.layernorm_eps = 1e-5f;
    s.seq_len = context;
    s.vocab_size = vocab;
    s.n_heads = n_heads;
    s.embed_scale = 1.0f;
    if (n_layer < 0 || n_layer + 3 > MXP_MODEL_MAX_LAYERS) {
        s.n_layers = n_layer < 0 ? 0 : n_layer + 3; /* rejected by create, by count */
        return s;
    }
    int n = 0;
    s.layers[n++] = (mxp_layer_spec){MXP_LAYER_EMBEDDING, embd, 0.0};
    for (int i = 0; i < n_layer; i++) s.layers[n++] = (mxp_layer_spec){MXP_LAYER_BLOCK, 0, 0.0};
    s.layers[n++] = (mxp_layer_spec){MXP_LAYER_LAYERNORM, 0, 0.0};
    s.layers[n++] = (mxp_layer_spec){MXP_LAYER_LM_HEAD, 0, 0.0};
    s.n_layers = n;
    return s;
}

/* ---- embedding ---------------------------------------------------------------- */

void nn_embedding_forward(mxp_model *m, int l, int64_t B, float *y32) {
    const nn_layer *L = &m->layers[l];
    const int64_t C = L->out, T = L->T;
    const float *ids = (const float *)m->b.acts[l]; /* act_type[0] is F32 */
    const float *wte = nn_param_f32(m, L->w_off, (size_t)(L->V * C), m->b.xs);
    const float *wpe = nn_param_f32(m, L->p_off, (size_t)(T * C), m->b.xs + L->V * C);
    const float sc = m->spec.embed_scale;
    for (int64_t r = 0; r < B; r++) {
        const float *te = wte + (int64_t)ids[r] * C, *pe = wpe + (r % T) * C;
        float *y = y32 + r * C;
        for (int64_t c = 0; c < C; c++) y[c] = (te[c] + pe[c]) * sc;
    }
}

void nn_embedding_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    (void)dx32; /* the input is token ids: no gradient */
    const nn_layer *L = &m->layers[l];
    const int64_t C = L->out, T = L->T;
    const float *ids = (const float *)m->b.acts[l];
    const float *d = nn_view_f32(m, m->b.grad_type, dy, (size_t)(B * C), m->b.sa);
    const float sc = m->spec.embed_scale;
    float *gte = m->grads + L->w_off, *gpe = m->grads + L->p_off;
    /* a writing backward (nn_grad_beta): the scatter adds, so its slices
     * start from zero, except a wte the tied lm_head (the last layer, whose
     * backward ran first) has already written */
    if (m->layers[m->n_layers - 1].kind != MXP_LAYER_LM_HEAD)
        nn_grad_zero(m, L->w_off, (size_t)(L->V * C));
    nn_grad_zero(m, L->p_off, (size_t)(T * C));
    for (int64_t r = 0; r < B; r++) {
        float *a = gte + (int64_t)ids[r] * C, *p = gpe + (r % T) * C;
        const float *dr = d + r * C;
        for (int64_t c = 0; c < C; c++) {
            a[c] += sc * dr[c];
            p[c] += sc * dr[c];
        }
    }
}

/* ---- tied output layer ------------------------------------------------------------ */

void nn_lm_head_forward(mxp_model *m, int l, int64_t B, float *y32) {
    const nn_layer *L = &m->layers[l];
    const int64_t C = L->in, V = L->out;
    if (m->fp8) {
        const float *x32 =
            nn_view_f32(m, m->b.act_type[l], m->b.acts[l], (size_t)(B * C), m->b.sa);
        nn_fp8_dense_forward(m, L->fp8_slot, x32, B, C, V, L->p_off, false, 0, y32, m->b.xs,
                             m->b.xs + m->spec.max_batch * C);
        return;
    }
    mxp_dtype xt;
    const void *x = nn_matmul_input(m, l, B, &xt);
    mxp_gemm_args g = {
        .trans_a = false, .trans_b = true, .M = B, .N = V, .K = C,
        .a_type = xt, .A = x, .lda = C,
        .b_type = m->policy.weight, .B = nn_work_at(m, L->p_off), .ldb = C,
        .C = y32, .ldc = V, .alpha = 1.0f, .beta = 0.0f,
    };
    m->k->gemm(&g);
}

void nn_lm_head_backward(mxp_model *m, int l, int64_t B, const void *dy, float *dx32) {
    const nn_layer *L = &m->layers[l];
    const int64_t C = L->in, V = L->out;
    if (m->fp8) {
        const size_t ny = (size_t)(B * V);
        const float *dyv = nn_view_f32(m, m->b.grad_type, dy, ny, m->b.sa);
        if (dyv != m->b.sa) memcpy(m->b.sa, dyv, ny * sizeof(float));
        const float *x32 =
            nn_view_f32(m, m->b.act_type[l], m->b.acts[l], (size_t)(B * C), m->b.sb);
        nn_fp8_dense_backward(m, L->fp8_slot, x32, B, C, V, L->p_off, false, 0, m->b.sa, dx32,
                              m->b.sb, m->b.xs + m->spec.max_batch * C);
        return;
    }
    const mxp_dtype gt = m->b.grad_type;
    mxp_dtype xt;
    const void *x = nn_matmul_input(m, l, B, &xt);
    mxp_gemm_args gw = { /* dwte [V, C] += dY^T [V, B] @ X [B, C] */
        .trans_a = true, .trans_b = false, .M = V, .N = C, .K = B,
        .a_type = gt, .A = dy, .lda = V,
        .b_type = xt, .B = x, .ldb = C,
        .C = m->grads + L->p_off, .ldc = C, .alpha = 1.0f, .beta = nn_grad_beta(m),
    };
    m->k->gemm(&gw);
    if (!dx32) return;
    mxp_gemm_args gx = { /* dX [B, C] = dY [B, V] @ wte [V, C] */
        .trans_a = false, .trans_b = false, .M = B, .N = C, .K = V,
        .a_type = gt, .A = dy, .lda = V,
        .b_type = m->policy.weight, .B = nn_work_at(m, L->p_off), .ldb = C,
        .C = dx32, .ldc = C, .alpha = 1.0f, .beta = 0.0f,
    };
    m->k->gemm(&gx);
}
