/* kernels/x86_avx512fp16/avx512fp16.h: kernels that need AVX512-FP16
 * (internal).
 *
 * Files in this folder are compiled with the AVX-512 flags plus
 * -mavx512fp16 (CMakeLists.txt) and are only called after cpuid reported
 * the feature: kernels/x86_avx512/table.c installs them into the AVX-512
 * table when mxp_avx512fp16_usable() holds.
 */
#ifndef MIXPREC_KERNELS_AVX512FP16_H
#define MIXPREC_KERNELS_AVX512FP16_H

#include "kernels/kernels.h"

/* True when the CPU and OS support AVX512-FP16 (on top of the AVX-512
 * table's own requirements). */
bool mxp_avx512fp16_usable(const mxp_cpu_features *f);

/* The gemm_f16acc slot on vfmadd231ph: contract of kernels.h, bit for bit
 * the emulation mxp_generic_gemm_f16acc (gemm_f16acc.c). */
void mxp_avx512fp16_gemm_f16acc(const mxp_gemm_args *g, int k);

#endif
