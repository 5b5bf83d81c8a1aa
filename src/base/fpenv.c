/* base/fpenv.c: the flush-to-zero switch for FP32 compute.
 *
 * Entry points: mxp_fpenv_set_ftz, mxp_fpenv_get_ftz (contract in
 * include/mixprec/base.h). On x86 the switch is MXCSR.FTZ (bit 15: results
 * that would be subnormal become zero) together with MXCSR.DAZ (bit 6:
 * subnormal inputs read as zero), as PyTorch's set_flush_denormal sets
 * both. MXCSR is per thread. Kernels that must keep subnormals (FP16
 * conversions, the fused unscale pass) clear both bits around their work
 * (kernels/x86_avx512/loops.h, mxcsr_exact_enter); the scalar reference
 * conversions use integer arithmetic and never depend on MXCSR.
 * References: Intel SDM vol. 1, 10.2.3 (MXCSR); PyTorch
 * torch.set_flush_denormal.
 */
#include <mixprec/base.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

enum { MXCSR_FTZ = 1u << 15, MXCSR_DAZ = 1u << 6 };

bool mxp_fpenv_set_ftz(bool on) {
    unsigned csr = _mm_getcsr();
    csr = on ? (csr | MXCSR_FTZ | MXCSR_DAZ) : (csr & ~(unsigned)(MXCSR_FTZ | MXCSR_DAZ));
    _mm_setcsr(csr);
    return true;
}

bool mxp_fpenv_get_ftz(void) {
    return (_mm_getcsr() & (MXCSR_FTZ | MXCSR_DAZ)) != 0;
}

#else

bool mxp_fpenv_set_ftz(bool on) {
    (void)on;
    return false;
}

bool mxp_fpenv_get_ftz(void) { return false; }

#endif
