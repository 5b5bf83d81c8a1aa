/* kernels/x86_avx512/avx512.h: the AVX-512 kernel table (internal).
 *
 * Files in this folder are compiled with AVX-512 flags (see CMakeLists.txt)
 * and are only called after dispatch.c has checked the CPU. The table starts
 * as a copy of the generic one; each concern overrides its own slots:
 *   gemm_*.c   -> mxp_avx512_fill_gemm
 *   loops_*.c  -> mxp_avx512_fill_loops (conversion, element-wise, rows,
 *                 fused gradient pass, optimizers)
 */
#ifndef MIXPREC_KERNELS_AVX512_H
#define MIXPREC_KERNELS_AVX512_H

#include "kernels/kernels.h"

/* The AVX-512 table (generic slots where no AVX-512 variant exists). */
const mxp_kernels *mxp_kernels_avx512(void);
/* True when the CPU and OS support everything this folder is compiled for. */
bool mxp_avx512_usable(const mxp_cpu_features *f);

void mxp_avx512_fill_gemm(mxp_kernels *t);
/* The table's gemm_strided (gemm_strided.c; kernels.h). */
void mxp_avx512_gemm_strided(const mxp_gemm_args *g, int count, size_t sa, size_t sb,
                             size_t sc);
void mxp_avx512_fill_loops(mxp_kernels *t);

#endif
