/* src/num/bf16.c: scalar reference conversions between FP32 and bfloat16
 * (BF16: the top 16 bits of an FP32; 8 exponent bits, 7 mantissa bits).
 *
 * Entry points: mxp_bf16_to_f32, mxp_f32_to_bf16 (round to nearest even),
 * mxp_f32_to_bf16_sr (stochastic rounding). Every bulk or SIMD converter
 * must match these bit for bit.
 *
 * Rules (see include/mixprec/num.h):
 *   - BF16 -> FP32 is the exact 16-bit shift (NaN payloads, signalling or
 *     not, pass unchanged).
 *   - FP32 -> BF16 RNE by the carry trick x + 0x7fff + lsb, which also
 *     rounds subnormals correctly and overflows to +-Inf past the midpoint
 *     of 0x1.fep127 and 2^128; +-0 and +-Inf are kept.
 *   - NaN takes an explicit branch first: the carry trick would turn a NaN
 *     with only low payload bits (e.g. 0x7f800001 or 0x7fffffff) into Inf
 *     or wrap it. Result: sign kept, top 7 payload bits kept, quiet bit set
 *     (as AVX512-BF16 vcvtneps2bf16 does).
 *   - SR: the 16 random bits r & 0xffff are added to the 16 dropped bits
 *     and the sum truncated, so P(round away from zero) = dropped/2^16
 *     exactly; sums carrying past 0x1.fep127 give +-Inf, as in RNE.
 * The bit-level code is in backend/numerics/round.h (one home, shared
 * with the CUDA kernels); these are the typed public wrappers.
 * References: IEEE 754-2019; Intel SDM "convert_fp32_to_bfloat16".
 */
#include <mixprec/num.h>

#include "backend/numerics/round.h"


float mxp_bf16_to_f32(mxp_bf16 h) { return mxp_nr_bf16_to_f32(h.bits); }

mxp_bf16 mxp_f32_to_bf16(float f) {
    mxp_bf16 h = {mxp_nr_f32_to_bf16(f)};
    return h;
}

mxp_bf16 mxp_f32_to_bf16_sr(float f, uint32_t r) {
    mxp_bf16 h = {mxp_nr_f32_to_bf16_sr(f, r)};
    return h;
}
