/* kernels/x86_avx512/gemm.c: AVX-512 GEMM (work in progress: keeps the
 * generic GEMM until the packed microkernels land). */
#include "kernels/x86_avx512/avx512.h"

void mxp_avx512_fill_gemm(mxp_kernels *t) { (void)t; }
