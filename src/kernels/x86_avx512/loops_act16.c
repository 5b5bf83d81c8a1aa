/* kernels/x86_avx512/loops_act16.c: activations of 16-bit inputs by table.
 *
 * Entry points: mxp_avx512_act16_table and mxp_avx512_act16_table16, used
 * by the fused passes of loops_fused.c, and mxp_avx512_act16_enable
 * (contracts in loops.h).
 *
 * A BF16 or FP16 value has 65,536 bit patterns, so an element-wise function
 * of the widened value is a table lookup: T[bits] = f(widen(bits)) in FP32,
 * with f one of loops_simd.h's v_gelu, v_tanh, v_gelu_deriv and widen the
 * fused passes' exact widening (a shift for BF16, vcvtph2ps for FP16). The
 * entries are computed by those very functions on 16 patterns at a time, so
 * a lookup returns the bits that the computation would have returned, for
 * every input (NaN payloads included). What else can change the bits of a
 * vector computation is the MXCSR: flush-to-zero and denormals-are-zero
 * (training.ftz) and the rounding mode. A table set is built per FTZ/DAZ
 * combination, under exactly that MXCSR, at its first use (at most four
 * sets of 256 KiB per table, in practice one); a caller whose MXCSR rounds
 * other than to nearest or unmasks a floating-point exception gets no table
 * (NULL: compute as before). A lookup raises none of the sticky exception
 * flags that the computation would have set (nothing in mixprec reads them).
 * The 16-bit output tables are the FP32 ones through mxp_avx512_convert,
 * the very store of the fused forward, under the same MXCSR.
 */
#include "kernels/x86_avx512/loops_simd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { N16 = 1 << 16, SETS = 4, KINDS = 2 * MXP_ACT16_FNS };

/* MXCSR fields: exception masks (bits 7-12), rounding control (13-14). */
#define MXCSR_MASKS 0x1f80u
#define MXCSR_RC 0x6000u
#define MXCSR_FTZ 0x8000u
#define MXCSR_DAZ 0x0040u

static _Atomic(float *) tables[SETS][KINDS];
/* 16-bit outputs: [set][f: GELU, tanh][input BF16, FP16][output BF16, FP16] */
static _Atomic(uint16_t *) tables16[SETS][2][2][2];
static atomic_bool enabled = true;
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

/* The 16 patterns i .. i + 15 of dtype t widened to FP32 (as load_wide of
 * loops_fused.c). */
static inline __m512 widen16(mxp_dtype t, uint32_t i) {
    const __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32((int)i),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    if (t == MXP_DTYPE_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(idx, 16));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(idx));
}

/* Fill T for function f of dtype t; the caller has set the MXCSR. */
static void fill(float *T, mxp_act16_fn f, mxp_dtype t) {
    for (uint32_t i = 0; i < N16; i += 16) {
        const __m512 x = widen16(t, i);
        __m512 v;
        switch (f) {
        case MXP_ACT16_GELU: v = v_gelu(x); break;
        case MXP_ACT16_TANH: v = v_tanh(x); break;
        default: v = v_gelu_deriv(x); break;
        }
        _mm512_storeu_ps(T + i, v);
    }
}

/* The table set of an MXCSR value: by its FTZ and DAZ bits. */
static int set_of(unsigned csr) {
    return ((csr & MXCSR_FTZ) ? 1 : 0) | ((csr & MXCSR_DAZ) ? 2 : 0);
}

void mxp_avx512_act16_enable(bool on) { atomic_store_explicit(&enabled, on, memory_order_relaxed); }

const float *mxp_avx512_act16_table(mxp_act16_fn f, mxp_dtype t, unsigned csr) {
    if (!atomic_load_explicit(&enabled, memory_order_relaxed)) return NULL;
    if ((t != MXP_DTYPE_BF16 && t != MXP_DTYPE_F16) || (unsigned)f >= MXP_ACT16_FNS) return NULL;
    if ((csr & MXCSR_MASKS) != MXCSR_MASKS || (csr & MXCSR_RC) != 0) return NULL;
    const int set = set_of(csr);
    const int kind = 2 * (int)f + (t == MXP_DTYPE_F16);
    float *T = atomic_load_explicit(&tables[set][kind], memory_order_acquire);
    if (T) return T;
    pthread_mutex_lock(&build_lock);
    T = atomic_load_explicit(&tables[set][kind], memory_order_relaxed);
    if (!T && (T = malloc(N16 * sizeof(float))) != NULL) {
        const unsigned own = _mm_getcsr();
        _mm_setcsr(MXCSR_MASKS | (csr & (MXCSR_FTZ | MXCSR_DAZ)));
        fill(T, f, t);
        _mm_setcsr(own); /* also the caller's sticky flags */
        atomic_store_explicit(&tables[set][kind], T, memory_order_release);
    }
    pthread_mutex_unlock(&build_lock);
    return T;
}

const uint16_t *mxp_avx512_act16_table16(mxp_act16_fn f, mxp_dtype t, mxp_dtype out,
                                         unsigned csr) {
    if (f == MXP_ACT16_GELU_DERIV || (out != MXP_DTYPE_BF16 && out != MXP_DTYPE_F16)) return NULL;
    const float *T = mxp_avx512_act16_table(f, t, csr); /* checks the rest; takes the lock */
    if (!T) return NULL;
    const int set = set_of(csr);
    _Atomic(uint16_t *) *slot =
        &tables16[set][f == MXP_ACT16_TANH][t == MXP_DTYPE_F16][out == MXP_DTYPE_F16];
    uint16_t *T16 = atomic_load_explicit(slot, memory_order_acquire);
    if (T16) return T16;
    pthread_mutex_lock(&build_lock);
    T16 = atomic_load_explicit(slot, memory_order_relaxed);
    if (!T16 && (T16 = malloc(N16 * sizeof(uint16_t))) != NULL) {
        const unsigned own = _mm_getcsr();
        _mm_setcsr(MXCSR_MASKS | (csr & (MXCSR_FTZ | MXCSR_DAZ)));
        mxp_avx512_convert(out, T16, MXP_DTYPE_F32, T, N16); /* the fused pass's store */
        _mm_setcsr(own);
        atomic_store_explicit(slot, T16, memory_order_release);
    }
    pthread_mutex_unlock(&build_lock);
    return T16;
}
