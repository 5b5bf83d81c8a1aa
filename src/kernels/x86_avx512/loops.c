/* kernels/x86_avx512/loops.c: AVX-512 hot loops (work in progress: keeps
 * the generic slots until the vector versions land). */
#include "kernels/x86_avx512/avx512.h"

void mxp_avx512_fill_loops(mxp_kernels *t) { (void)t; }
