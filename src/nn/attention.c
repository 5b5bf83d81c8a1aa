/* nn/attention.c: causal multi-head self-attention, forward and backward.
 *
 * Entry points: nn_attention_forward, nn_attention_backward (contracts in
 * nn_internal.h).
 *
 * Shapes (Bs sequences of T positions, C = H * hd channels):
 *   qkv [Bs*T, 3C]  q | k | v, head h in columns h*hd .. h*hd+hd of each
 *   att [Bs, H, T, T] softmax probabilities P (row i: keys j <= i, zeros above)
 *   y   [Bs*T, C]   P v, heads side by side
 * Per (sequence, head), as in GPT-2 / nanoGPT:
 *   S = q k^T / sqrt(hd)                    matmul: operands in their stored
 *                                           dtype, FP32 accumulation, the
 *                                           result rounded to the matmul
 *                                           output dtype (so FP16 overflows
 *                                           here exactly as an FP16 matmul)
 *   P = softmax(S) over j <= i              FP32 (policy class softmax)
 *   y = P v                                 matmul
 * Backward (llm.c attention_backward, in GEMM form):
 *   dP = dy v^T,  dv = P^T dy,
 *   dS = P * (dP - rowsum(P * dP)) / sqrt(hd)   (zero above the diagonal),
 *   dq = dS k,    dk = dS^T q.
 * Intermediate gradients (dP, dS) are rounded to the gradient dtype, as the
 * gradients of low-precision tensors are. Masked entries never enter a sum,
 * so a masked score of any value (even Inf) cannot leak.
 */
#include "nn/nn_internal.h"

#include <math.h>

/* Pointer to element (row, col) of a typed [*, ld] buffer. */
static const void *at_elem(const void *base, mxp_dtype t, int64_t row, int64_t ld, int64_t col) {
    return (const unsigned char *)base +
           (size_t)(row * ld + col) * mxp_dtype_info(t)->size;
}

static void *at_elem_mut(void *base, mxp_dtype t, int64_t row, int64_t ld, int64_t col) {
    return (unsigned char *)base + (size_t)(row * ld + col) * mxp_dtype_info(t)->size;
}

void nn_attention_forward(const mxp_model *m, int64_t Bs, int64_t T, int64_t C, int64_t H,
                          mxp_dtype at, mxp_dtype st, const void *qkv, void *att, float *y32,
                          float *tmp) {
    const int64_t hd = C / H, C3 = 3 * C;
    const float inv = (float)(1.0 / sqrt((double)hd));
    for (int64_t b = 0; b < Bs; b++) {
        for (int64_t h = 0; h < H; h++) {
            const int64_t r0 = b * T;
            const void *q = at_elem(qkv, at, r0, C3, h * hd);
            const void *k = at_elem(qkv, at, r0, C3, C + h * hd);
            const void *v = at_elem(qkv, at, r0, C3, 2 * C + h * hd);
            mxp_gemm_args gs = {
                .trans_a = false, .trans_b = true, .M = T, .N = T, .K = hd,
                .a_type = at, .A = q, .lda = C3, .b_type = at, .B = k, .ldb = C3,
                .C = tmp, .ldc = T, .alpha = inv, .beta = 0.0f,
            };
            m->k->gemm(&gs);
            nn_round_f32(m, st, tmp, (size_t)(T * T));
            for (int64_t i = 0; i < T; i++) {
                float *row = tmp + i * T;
                float mx = row[0];
                for (int64_t j = 1; j <= i; j++)
                    if (row[j] > mx || row[j] != row[j]) mx = row[j];
                float sum = 0.0f;
                for (int64_t j = 0; j <= i; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                const float is = 1.0f / sum;
                for (int64_t j = 0; j <= i; j++) row[j] *= is;
                for (int64_t j = i + 1; j < T; j++) row[j] = 0.0f;
            }
            void *p = at_elem_mut(att, at, (b * H + h) * T, T, 0);
            m->k->convert(at, p, MXP_DTYPE_F32, tmp, (size_t)(T * T));
            mxp_gemm_args gy = {
                .trans_a = false, .trans_b = false, .M = T, .N = hd, .K = T,
                .a_type = at, .A = p, .lda = T, .b_type = at, .B = v, .ldb = C3,
                .C = y32 + r0 * C + h * hd, .ldc = C, .alpha = 1.0f, .beta = 0.0f,
            };
            m->k->gemm(&gy);
        }
    }
}

void nn_attention_backward(const mxp_model *m, int64_t Bs, int64_t T, int64_t C, int64_t H,
                           mxp_dtype at, mxp_dtype gt, const void *qkv, const void *att,
                           const float *dy32, float *dqkv32, float *tmp) {
    const int64_t hd = C / H, C3 = 3 * C;
    const float inv = (float)(1.0 / sqrt((double)hd));
    float *dp = tmp, *pf = tmp + T * T;
    for (int64_t b = 0; b < Bs; b++) {
        for (int64_t h = 0; h < H; h++) {
            const int64_t r0 = b * T;
            const void *q = at_elem(qkv, at, r0, C3, h * hd);
            const void *k = at_elem(qkv, at, r0, C3, C + h * hd);
            const void *v = at_elem(qkv, at, r0, C3, 2 * C + h * hd);
            const void *p = at_elem(att, at, (b * H + h) * T, T, 0);
            const float *dy = dy32 + r0 * C + h * hd;
            /* dP [T, T] = dy [T, hd] v^T */
            mxp_gemm_args g1 = {
                .trans_a = false, .trans_b = true, .M = T, .N = T, .K = hd,
                .a_type = MXP_DTYPE_F32, .A = dy, .lda = C, .b_type = at, .B = v, .ldb = C3,
                .C = dp, .ldc = T, .alpha = 1.0f, .beta = 0.0f,
            };
            m->k->gemm(&g1);
            nn_round_f32(m, gt, dp, (size_t)(T * T));
            /* dv [T, hd] = P^T dy */
            mxp_gemm_args g2 = {
                .trans_a = true, .trans_b = false, .M = T, .N = hd, .K = T,
                .a_type = at, .A = p, .lda = T, .b_type = MXP_DTYPE_F32, .B = dy, .ldb = C,
                .C = dqkv32 + r0 * C3 + 2 * C + h * hd, .ldc = C3, .alpha = 1.0f, .beta = 0.0f,
            };
            m->k->gemm(&g2);
            /* dS = P * (dP - rowsum(P * dP)) / sqrt(hd), causal */
            m->k->convert(MXP_DTYPE_F32, pf, at, p, (size_t)(T * T));
            for (int64_t i = 0; i < T; i++) {
                float *dr = dp + i * T;
                const float *pr = pf + i * T;
                float dot = 0.0f;
                for (int64_t j = 0; j <= i; j++) dot += pr[j] * dr[j];
                for (int64_t j = 0; j <= i; j++) dr[j] = pr[j] * (dr[j] - dot) * inv;
                for (int64_t j = i + 1; j < T; j++) dr[j] = 0.0f;
            }
            nn_round_f32(m, gt, dp, (size_t)(T * T));
            /* dq [T, hd] = dS k ;  dk [T, hd] = dS^T q */
            mxp_gemm_args g3 = {
                .trans_a = false, .trans_b = false, .M = T, .N = hd, .K = T,
                .a_type = MXP_DTYPE_F32, .A = dp, .lda = T, .b_type = at, .B = k, .ldb = C3,
                .C = dqkv32 + r0 * C3 + h * hd, .ldc = C3, .alpha = 1.0f, .beta = 0.0f,
            };
            m->k->gemm(&g3);
            mxp_gemm_args g4 = {
                .trans_a = true, .trans_b = false, .M = T, .N = hd, .K = T,
                .a_type = MXP_DTYPE_F32, .A = dp, .lda = T, .b_type = at, .B = q, .ldb = C3,
                .C = dqkv32 + r0 * C3 + C + h * hd, .ldc = C3, .alpha = 1.0f, .beta = 0.0f,
            };
            m->k->gemm(&g4);
        }
    }
}
