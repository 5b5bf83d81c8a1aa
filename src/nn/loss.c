/* nn/loss.c: the FP32 losses at the end of the model.
 *
 * Entry point: nn_loss_forward. The stored last activation (its policy
 * dtype) is widened to FP32, the loss and its gradient are computed in FP32
 * (policy class LOSS), and the gradient is multiplied by the loss scale
 * here, before the driver rounds it into the grad dtype: this is where a
 * scaled FP16 gradient genuinely overflows or underflows, as under
 * torch.cuda.amp (loss * scale, then backward).
 *   MSE:  mean over B*C of (pred - y)^2   (nn.MSELoss, reduction "mean")
 *   XENT: mean over B of -log softmax(logits)[label]  (nn.CrossEntropyLoss)
 *   GAUSSIAN: the Gaussian head's NLL with its bound penalty (loss_gauss.c)
 *   with spec.termination or spec.target_weights: the weighted head loss
 *   with its BCE column (loss_head.c)
 */
#include "nn/nn_internal.h"

void nn_loss_forward(mxp_model *m, const mxp_batch *b, float *dpred32, float loss_scale,
                     double *loss) {
    const int L = m->n_layers;
    const int64_t C = m->width[L];
    const float *pred = nn_view_f32(m, m->b.act_type[L], m->b.acts[L],
                                    (size_t)b->B * (size_t)C, m->b.sa);
    if (nn_head_on(m)) /* termination flag or per-target weights (loss_head.c) */
        nn_head_loss(m, pred, b->y, b->B, dpred32, loss_scale, loss);
    else if (m->spec.loss == MXP_LOSS_MSE)
        m->k->mse(dpred32, pred, b->y, b->B, C, loss_scale, loss);
    else if (m->spec.loss == MXP_LOSS_GAUSSIAN)
        nn_gauss_loss(m, pred, b->y, b->B, dpred32, loss_scale, loss);
    else
        m->k->softmax_xent(dpred32, pred, b->labels, b->B, C, loss_scale, loss);
}

/* One kernel call per row with B = 1 and grad_scale = k: the kernel then
 * uses exactly k as its factor and writes the row's loss exactly (total /
 * 1) into its slot, and the rows are summed here in order from the
 * caller's total, as the whole-batch call sums them: loss and gradient bits
 * are those of one call on the whole batch (tests/test_gpt.c). This CPU
 * path (the fused head's row chunks) folds each row's slot into *total as
 * it goes; *total is itself the pass's loss slot. */
void nn_xent_rows(const mxp_model *m, float *dl, const float *logits, const int32_t *labels,
                  int64_t R, int64_t V, float k, double *total) {
    for (int64_t r = 0; r < R; r++) {
        const size_t o = (size_t)r * (size_t)V;
        double row;
        m->k->softmax_xent(dl ? dl + o : NULL, logits + o, labels + r, 1, V, k, &row);
        *total += row;
    }
}
