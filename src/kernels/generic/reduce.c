/* kernels/generic/reduce.c: reference reductions over flat FP32 buffers.
 *
 * Entry points: mxp_generic_sum, mxp_generic_sumsq (double accumulation,
 * non-finite values propagate), mxp_generic_absmax (finite values only,
 * counting the others). Each writes its result into the caller's slot.
 * Contracts in kernels/kernels.h.
 */
#include "kernels/generic/generic.h"

#include <math.h>

void mxp_generic_sum(const float *x, size_t n, double *out) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i];
    *out = s;
}

void mxp_generic_sumsq(const float *x, size_t n, double *out) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    *out = s;
}

/* *amax = largest |x| over finite elements (0 when there are none);
 * *nonfinite = the number of NaN/Inf elements (either may be NULL). */
void mxp_generic_absmax(const float *x, size_t n, float *amax, int64_t *nonfinite) {
    float m = 0.0f;
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a)) {
            bad++;
            continue;
        }
        if (a > m) m = a;
    }
    if (amax) *amax = m;
    if (nonfinite) *nonfinite = bad;
}
