/* guard/support.c: which precisions this CPU runs natively, and the
 * automatic fallback chain.
 *
 * Entry points: mxp_support_name, mxp_precision_support,
 * mxp_precision_fallback.
 *
 * Levels (of a mode's low-precision dtype; fp32 is always native):
 *   native    the CPU computes in the format: FP32 FMA; AVX512_BF16 (or
 *             AMX-BF16) BF16 dot products; AVX512_FP16 half arithmetic;
 *   convert   the CPU converts in hardware (F16C for FP16; any AVX-512 or
 *             AVX2 CPU widens BF16 with an integer shift) and computes FP32;
 *   emulated  software conversion and FP32 arithmetic. FP8 is always
 *             emulated: no CPU has FP8 arithmetic (mixprec quantises, then
 *             computes in FP32, and says so).
 * The level describes the CPU, not the kernel table in use (the "how" text
 * of this CPU names what the active table's GEMM computes in, kernels.h
 * gemm_compute: BF16 widened where vdpbf16ps is slow, FP16 FMA only with
 * training.fp16_accumulate=fp16): under
 * MIXPREC_FORCE_ISA=generic the same formats run through the portable
 * reference kernels (`mixprec doctor` shows both).
 *
 * Fallback chain: amp's mxp_precision_fallback_next (fp8 -> mixed_fp16 ->
 * mixed_bf16 -> fp32, and fp16 -> bf16 -> fp32). A step counts only when its
 * level is at least `convert` (or any level with allow_emulated): a CPU
 * without BF16 support skips mixed_bf16 just as a V100 would.
 */
#include "guard/guard_internal.h"

#include "kernels/kernels.h"

#include <assert.h>
#include <string.h>

static const char *const support_names[] = {"emulated", "convert", "native"};
static_assert(sizeof support_names / sizeof support_names[0] == MXP_SUPPORT_COUNT,
              "support names out of sync");

const char *mxp_support_name(mxp_support s) {
    return (unsigned)s < MXP_SUPPORT_COUNT ? support_names[s] : "unknown";
}

mxp_support mxp_precision_support(mxp_precision p, const mxp_cpu_features *f,
                                  const char **why) {
    if (!f) f = mxp_cpu_features_get();
    /* for this CPU, the text says what the active kernel table's GEMM does */
    const mxp_kernels *k = mxp_kernels_get();
    const bool this_cpu = f == mxp_cpu_features_get() && strcmp(k->isa, "avx512") == 0;
    const char *w;
    mxp_support s;
    switch (p) {
    case MXP_PRECISION_FP32:
        s = MXP_SUPPORT_NATIVE;
        w = f->avx512f ? "AVX-512F FMA" : f->fma ? "AVX2 FMA" : "scalar FP32";
        break;
    case MXP_PRECISION_MIXED_BF16:
    case MXP_PRECISION_BF16:
        if (f->avx512_bf16 || f->amx_bf16) {
            s = MXP_SUPPORT_NATIVE;
            w = f->avx512_bf16 ? "AVX512_BF16 dot products (vdpbf16ps)" : "AMX-BF16 tiles";
            if (this_cpu && k->gemm_compute(MXP_DTYPE_BF16, false) == MXP_GEMM_COMPUTE_FP32_WIDENED)
                w = "AVX512_BF16, but vdpbf16ps is slower than FP32 FMA on this CPU: the GEMMs "
                    "widen BF16 to FP32 (FP32 FMA)";
        } else if (f->avx512f || f->avx2) {
            s = MXP_SUPPORT_CONVERT;
            w = "BF16 widened by vector shifts, FP32 arithmetic";
        } else {
            s = MXP_SUPPORT_EMULATED;
            w = "scalar BF16 conversion, FP32 arithmetic";
        }
        break;
    case MXP_PRECISION_MIXED_FP16:
    case MXP_PRECISION_FP16:
        if (f->avx512_fp16) {
            s = MXP_SUPPORT_NATIVE;
            w = "AVX512_FP16 half arithmetic";
            if (this_cpu && k->gemm_compute(MXP_DTYPE_F16, true) == MXP_GEMM_COMPUTE_FP16_FMA)
                w = "AVX512_FP16: GEMMs widen FP16 to FP32 (FP32 FMA), or with "
                    "training.fp16_accumulate=fp16 run vfmadd231ph with FP16 partial sums";
        } else if (f->f16c) {
            s = MXP_SUPPORT_CONVERT;
            w = "F16C conversions, FP32 arithmetic";
        } else {
            s = MXP_SUPPORT_EMULATED;
            w = "scalar FP16 conversion, FP32 arithmetic";
        }
        break;
    case MXP_PRECISION_FP8:
    default:
        s = MXP_SUPPORT_EMULATED;
        w = "no CPU FP8 arithmetic: quantise, then compute in FP32";
        break;
    }
    if (why) *why = w;
    return s;
}

mxp_precision mxp_precision_fallback(mxp_precision p, const mxp_cpu_features *f,
                                     bool allow_emulated) {
    /* amp's one chain, skipping what this CPU cannot run */
    for (mxp_precision prev = p, q = mxp_precision_fallback_next(p); q != prev;
         prev = q, q = mxp_precision_fallback_next(q))
        if (allow_emulated || mxp_precision_support(q, f, NULL) >= MXP_SUPPORT_CONVERT) return q;
    return p;
}
