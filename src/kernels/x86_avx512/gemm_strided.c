/* kernels/x86_avx512/gemm_strided.c: the table's strided-batched GEMM
 * (kernels.h gemm_strided; issue 29 part 2, an ensemble's members).
 *
 * Entry point: mxp_avx512_gemm_strided (avx512.h), filled into the table
 * by mxp_avx512_fill_gemm. The count products are those of gemm on each
 * member's operands (A, B, C advanced by i * sa, i * sb, i * sc
 * elements); mxp_avx512_gemm_many (gemm.c) plans each as gemm alone and
 * runs all their parts in one parallel region, so a layer's GEMMs for E
 * members cost one fork/join (products each too small to be split run on
 * the caller, as alone). Bits: each product's as alone.
 */
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/gemm_internal.h"

void mxp_avx512_gemm_strided(const mxp_gemm_args *g, int count, size_t sa, size_t sb,
                             size_t sc) {
    mxp_gemm_args gs[MXP_AVX512_GEMM_MANY];
    const size_t ea = mxp_dtype_info(g->a_type)->size, eb = mxp_dtype_info(g->b_type)->size;
    for (int i0 = 0; i0 < count; i0 += MXP_AVX512_GEMM_MANY) {
        const int n = count - i0 < MXP_AVX512_GEMM_MANY ? count - i0 : MXP_AVX512_GEMM_MANY;
        for (int k = 0; k < n; k++) {
            const size_t i = (size_t)(i0 + k);
            gs[k] = *g;
            gs[k].A = (const unsigned char *)g->A + i * sa * ea;
            gs[k].B = (const unsigned char *)g->B + i * sb * eb;
            gs[k].C = g->C + i * sc;
        }
        mxp_avx512_gemm_many(gs, n);
    }
}
