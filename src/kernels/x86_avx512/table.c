/* kernels/x86_avx512/table.c: assemble the AVX-512 kernel table: the
 * generic table with the slots each AVX-512 file overrides, and those of
 * kernels/x86_avx512fp16/ when the CPU has AVX512-FP16. Built once, on
 * first use, under pthread_once. */
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/x86_avx512fp16/avx512fp16.h"

#include <pthread.h>

static mxp_kernels table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static mxp_gemm_compute avx512_gemm_compute(mxp_dtype t, bool f16acc) {
    if (f16acc)
        return table.gemm_f16acc == mxp_avx512fp16_gemm_f16acc ? MXP_GEMM_COMPUTE_FP16_FMA
                                                               : MXP_GEMM_COMPUTE_EMULATED;
    mxp_gemm_args g = {.a_type = t, .b_type = t};
    if (mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_DPBF16)
        return MXP_GEMM_COMPUTE_BF16_DOT;
    return t == MXP_DTYPE_F32 ? MXP_GEMM_COMPUTE_FP32_FMA : MXP_GEMM_COMPUTE_FP32_WIDENED;
}

static void build(void) {
    table = *mxp_kernels_generic();
    table.isa = "avx512";
    table.gemm_compute = avx512_gemm_compute;
    mxp_avx512_fill_gemm(&table);
    mxp_avx512_fill_loops(&table);
    /* AVX512-FP16 where cpuid has it: the FP16 fast-accumulate GEMM runs on
     * vfmadd231ph (same bits as the emulation) */
    if (mxp_avx512fp16_usable(mxp_cpu_features_get()))
        table.gemm_f16acc = mxp_avx512fp16_gemm_f16acc;
}

const mxp_kernels *mxp_kernels_avx512(void) {
    pthread_once(&table_once, build);
    return &table;
}

bool mxp_avx512_usable(const mxp_cpu_features *f) {
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512_bf16 && f->f16c && f->fma;
}

/* Defined here, not in kernels/x86_avx512fp16/ (built with -mavx512fp16),
 * so that the check itself can never execute an AVX512-FP16 instruction. */
bool mxp_avx512fp16_usable(const mxp_cpu_features *f) {
    return mxp_avx512_usable(f) && f->avx512_fp16;
}
