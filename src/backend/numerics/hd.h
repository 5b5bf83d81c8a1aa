/* backend/numerics/hd.h: the one switch that lets the shared-numerics
 * headers compile under both gcc (host C11) and nvcc (CUDA C++).
 *
 * MXP_HD marks a function __host__ __device__ under nvcc and is empty under
 * a plain C compiler. Every function in backend/numerics/ is
 * `MXP_HD static inline`, takes and returns plain scalars or small POD
 * structs, allocates nothing, never logs, and uses only operations whose
 * IEEE-754 results are the same on x86-64 (SSE, no x87, -ffp-contract=off)
 * and on an NVIDIA GPU built with --fmad=false: +, -, *, / and sqrtf
 * (correctly rounded on both), integer ops and comparisons. That is why the
 * CPU and the CUDA backend can call the same element function and get the
 * same bits. Functions that need libm transcendental (pow) are marked
 * "host-side" and are evaluated once per step on the host; their result
 * travels to the device as data (backend/backend.h, mxp_step_ctl).
 */
#ifndef MIXPREC_BACKEND_NUMERICS_HD_H
#define MIXPREC_BACKEND_NUMERICS_HD_H

#ifdef __CUDACC__
#define MXP_HD __host__ __device__
#else
#define MXP_HD
#endif

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* FP32 <-> raw bits (memcpy: valid C and valid CUDA device code). */
MXP_HD static inline uint32_t mxp_hd_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

MXP_HD static inline float mxp_hd_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* isfinite without libm (no -ffast-math can fold a bit test away). */
MXP_HD static inline bool mxp_hd_isfinite(float f) {
    return (mxp_hd_f32_bits(f) & 0x7f800000u) != 0x7f800000u;
}

#endif /* MIXPREC_BACKEND_NUMERICS_HD_H */
