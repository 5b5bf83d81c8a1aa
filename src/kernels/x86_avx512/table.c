/* kernels/x86_avx512/table.c: assemble the AVX-512 kernel table: the
 * generic table with the slots each AVX-512 file overrides. Built once, on
 * first use, under pthread_once. */
#include "kernels/x86_avx512/avx512.h"

#include <pthread.h>

static mxp_kernels table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build(void) {
    table = *mxp_kernels_generic();
    table.isa = "avx512";
    mxp_avx512_fill_gemm(&table);
    mxp_avx512_fill_loops(&table);
}

const mxp_kernels *mxp_kernels_avx512(void) {
    pthread_once(&table_once, build);
    return &table;
}

bool mxp_avx512_usable(const mxp_cpu_features *f) {
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512_bf16 && f->f16c && f->fma;
}
