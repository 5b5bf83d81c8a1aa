/* kernels/generic/loss.c: reference losses, mean over the batch.
 *
 * Entry points: mxp_generic_mse, mxp_generic_softmax_xent (contracts in
 * kernels/kernels.h). Per-element math is FP32; the loss total is summed in
 * double and written, as double, into the caller's result slot *loss. Gradients carry the loss scale
 * (grad_scale) so mixed-precision backward starts from the scaled loss.
 * Reference: PyTorch nn.MSELoss / nn.CrossEntropyLoss (reduction='mean').
 */
#include "kernels/generic/generic.h"

#include <math.h>

void mxp_generic_mse(float *dpred, const float *pred, const float *target,
                     int64_t B, int64_t C, float grad_scale, double *loss) {
    if (B <= 0 || C <= 0) {
        *loss = 0.0;
        return;
    }
    size_t n = (size_t)B * (size_t)C;
    float k = (float)(2.0 * (double)grad_scale / (double)n);
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        float d = pred[i] - target[i];
        total += (double)d * (double)d;
        if (dpred) dpred[i] = k * d;
    }
    *loss = total / (double)n;
}

/* Per row: loss = logsumexp(x) - x[label], with logsumexp = max +
 * log(sum exp(x - max)). A label outside [0, C) gives that row a NaN loss
 * (so guards see it) and a gradient without the one-hot term; it never
 * reads out of bounds. dlogits may alias logits. */
void mxp_generic_softmax_xent(float *dlogits, const float *logits,
                              const int32_t *labels, int64_t B, int64_t C,
                              float grad_scale, double *loss) {
    if (B <= 0 || C <= 0) {
        *loss = 0.0;
        return;
    }
    float k = (float)((double)grad_scale / (double)B);
    double total = 0.0;
    for (int64_t b = 0; b < B; b++) {
        const float *xr = logits + (size_t)b * (size_t)C;
        int32_t lab = labels[b];
        bool valid = lab >= 0 && (int64_t)lab < C;
        float mx = xr[0];
        for (int64_t c = 1; c < C; c++)
            if (xr[c] > mx || xr[c] != xr[c]) mx = xr[c];
        float s = 0.0f;
        for (int64_t c = 0; c < C; c++) s += expf(xr[c] - mx);
        float lse = mx + logf(s);
        total += valid ? (double)lse - (double)xr[lab] : (double)NAN;
        if (dlogits) {
            float *dr = dlogits + (size_t)b * (size_t)C;
            float inv_s = 1.0f / s;
            for (int64_t c = 0; c < C; c++) {
                float p = expf(xr[c] - mx) * inv_s;
                dr[c] = k * (c == (int64_t)lab ? p - 1.0f : p);
            }
        }
    }
    *loss = total / (double)B;
}
