/* src/num/fp16.c: scalar reference conversions between FP32 and IEEE 754
 * binary16 (FP16: 1 sign, 5 exponent bits with bias 15, 10 mantissa bits).
 *
 * Entry points: mxp_fp16_to_f32, mxp_f32_to_fp16 (round to nearest even),
 * mxp_f32_to_fp16_sr (stochastic rounding). Every bulk or SIMD converter
 * must match these bit for bit.
 *
 * Rules (see include/mixprec/num.h):
 *   - FP32 -> FP16 RNE: subnormal results are produced (smallest 2^-24,
 *     exactly 2^-25 rounds to +-0 as the tie goes to the even zero), +-0
 *     kept, |x| >= 65520 (the midpoint 65504..65536) and +-Inf give +-Inf.
 *   - NaN (explicit branch, never through the rounding add): sign kept,
 *     quiet bit set, the top 9 payload bits kept (as F16C vcvtps2ph does).
 *   - FP16 -> FP32 is exact; a NaN comes back quiet with its payload in the
 *     top mantissa bits (as F16C vcvtph2ps does).
 *   - SR: 13 random bits u = r & 0x1fff are added 13 bits below the FP16
 *     ulp and the sum truncated, so round up happens with probability
 *     (dropped part)/ulp quantised to 2^-13. For normal results that is
 *     exactly the 13 dropped FP32 bits. For subnormal results (ulp 2^-24)
 *     the same 13 bits are added at position 2^-37 of the absolute value,
 *     so the round-up probability is exact to 2^-13 of an ulp there too.
 *     Results past 65504 become +-Inf, as in RNE.
 * The bit-level code is in backend/numerics/round.h (one home, shared
 * with the CUDA kernels); these are the typed public wrappers.
 * References: IEEE 754-2019 sec. 3.6, 4.3.1; Intel SDM VCVTPS2PH/VCVTPH2PS.
 */
#include <mixprec/num.h>

#include "backend/numerics/round.h"


float mxp_fp16_to_f32(mxp_fp16 h) { return mxp_nr_fp16_to_f32(h.bits); }

mxp_fp16 mxp_f32_to_fp16(float f) {
    mxp_fp16 h = {mxp_nr_f32_to_fp16(f)};
    return h;
}

mxp_fp16 mxp_f32_to_fp16_sr(float f, uint32_t r) {
    mxp_fp16 h = {mxp_nr_f32_to_fp16_sr(f, r)};
    return h;
}
