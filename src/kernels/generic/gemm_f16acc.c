/* kernels/generic/gemm_f16acc.c: the FP16 fast-accumulate GEMM, emulated.
 *
 * Entry points: mxp_generic_gemm_f16acc (slot gemm_f16acc, contract in
 * kernels/kernels.h) and mxp_f16acc_fma (one accumulator step).
 *
 * What it emulates: AVX512-FP16's vfmadd231ph, acc16 = RNE_fp16(a*b + acc16)
 * with ONE rounding, with the FP16 partial sum promoted (vcvtph2ps +
 * vaddps) into an FP32 accumulator after every k products and reset, as
 * FP8 GEMMs on GPUs promote their partial sums. This CPU has no
 * AVX512-FP16, so the speed does not exist here: the numerics do, so users
 * can measure whether a model tolerates FP16 accumulation.
 *
 * Why the emulation rounds once (mxp_f16acc_fma):
 *   1. p = a*b in double is exact: a and b are widened exactly to FP32
 *      (<= 24 significant bits each), so p has <= 48 < 53 bits, and its
 *      exponent (>= -298) is far inside double's range.
 *   2. TwoSum(acc, p) gives s = RN53(acc + p) and e with s + e == acc + p
 *      exactly (Knuth; error-free for any finite doubles under RN).
 *   3. s is replaced by the round-to-odd value r of acc + p (s itself when
 *      e == 0 or s's last significand bit is odd, else its neighbour towards
 *      e). Round-to-odd to 53 bits followed by RNE to 11 bits equals one
 *      RNE of the exact value, since 53 >= 11 + 2 (Boldo & Melquiond,
 *      "Emulation of FMA and correctly rounded sums: proved algorithms using
 *      rounding to odd", IEEE TC 2008).
 *   4. r is rounded to FP16 once (round_f16: RNE to the quantum of r's
 *      FP16 binade, subnormals included); |r| >= 65520 gives +-Inf, as the
 *      hardware overflows. Inf/NaN propagate as in IEEE arithmetic.
 *   (For FP16 inputs e != 0 only when acc and a*b are more than about
 *   2^32 apart in magnitude, far from any FP16 tie, so step 3 matters only
 *   for wider operands; it keeps the kernel exact for every input dtype.)
 * tests/test_gemm_f16acc.c checks steps 1-4 against an exact integer
 * (__int128) oracle.
 *
 * Order (the semantics an ISA variant must reproduce bit for bit): for each
 * C[i,j], acc32 = 0 (FP32), acc16 = +0; for kk = 0..K-1: acc16 =
 * fma16(op(A)[i,kk], op(B)[kk,j], acc16); after products k, 2k, ... and
 * after the last: acc32 += (float)acc16, acc16 = +0. Then C = alpha*acc32
 * (+ beta*C when beta != 0), in FP32.
 */
#include "kernels/generic/generic.h"

#include <math.h>
#include <string.h>

enum { F16ACC_MB = 8, F16ACC_NB = 64, F16ACC_KB = 128 };

static inline uint64_t dbits(double x) {
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}
static inline double bitsd(uint64_t b) {
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* RNE of a double to the nearest FP16 value, returned as a double (exact:
 * one rounding). The quantum q of x's binade (2^(E-10), E >= -14, so
 * subnormals share 2^-24) is applied with sigma = 1.5 * 2^52 * q: x + sigma
 * has ulp q, so (x + sigma) - sigma is x rounded (RNE) to a multiple of q,
 * the second subtraction being exact (|x| < 2^11 q << 2^51 q). |x| beyond
 * 65504 after rounding (>= 65520 before) is +-Inf; Inf and NaN pass. */
static inline double round_f16(double x) {
    uint64_t xb = dbits(x);
    int E = (int)((xb >> 52) & 0x7FF) - 1023;
    if (E == 1024) return x;                     /* Inf, NaN */
    if (E > 15) return copysign(INFINITY, x);
    if (E < -14) E = -14;
    double sigma = bitsd((uint64_t)(E - 10 + 52 + 1023) << 52 | 0x8000000000000ull);
    double r = (x + sigma) - sigma;
    if (fabs(r) > 65504.0) return copysign(INFINITY, x);
    return copysign(r, x); /* a zero result keeps x's sign */
}

/* acc16 + a*b rounded once to FP16 (see the file comment, steps 1-4). */
static inline double fma16(double a, double b, double c) {
    double p = a * b; /* exact */
    double s = c + p;
    if (!isfinite(s)) return s; /* Inf or NaN, as IEEE addition gives */
    double bv = s - c, av = s - bv; /* TwoSum: s + e == c + p exactly */
    double e = (c - av) + (p - bv);
    uint64_t sb = dbits(s);
    if (e != 0.0 && !(sb & 1u)) /* round to odd: the neighbour on e's side */
        s = bitsd(((e > 0.0) == (s > 0.0)) ? sb + 1u : sb - 1u);
    return round_f16(s);
}

float mxp_f16acc_fma(float a, float b, float acc16) {
    return (float)fma16((double)a, (double)b, (double)acc16);
}

/* Widen op(X)[r, c0 .. c0+n) to FP32 into dst: element (r, c) lives at
 * index r*ld + c (not transposed) or c*ld + r (transposed). */
static void widen_row(mxp_dtype t, const void *x, bool trans, size_t ld, size_t r,
                      size_t c0, size_t n, float *dst) {
    if (!trans) {
        size_t es = mxp_dtype_info(t)->size;
        mxp_convert(MXP_DTYPE_F32, dst, t, (const char *)x + (r * ld + c0) * es, n);
    } else {
        for (size_t c = 0; c < n; c++) dst[c] = mxp_load_f32(t, x, (c0 + c) * ld + r);
    }
}

/* One [mb x nb] block of C: acc16/acc32 persist across the K chunks, so
 * chunking K does not change the result. */
static void block(const mxp_gemm_args *g, size_t i0, size_t mb, size_t j0, size_t nb,
                  int64_t kper) {
    double acc16[F16ACC_MB][F16ACC_NB], bp[F16ACC_KB][F16ACC_NB];
    float acc32[F16ACC_MB][F16ACC_NB], ap[F16ACC_MB][F16ACC_KB], row[F16ACC_NB];
    float col[F16ACC_KB];
    size_t K = (size_t)g->K, kp = (size_t)kper;
    for (size_t i = 0; i < mb; i++)
        for (size_t j = 0; j < nb; j++) acc16[i][j] = acc32[i][j] = 0.0f;
    size_t done = 0; /* products in the current FP16 partial sums */
    for (size_t k0 = 0; k0 < K; k0 += F16ACC_KB) {
        size_t kb = K - k0 < F16ACC_KB ? K - k0 : F16ACC_KB;
        for (size_t i = 0; i < mb; i++)
            widen_row(g->a_type, g->A, g->trans_a, (size_t)g->lda, i0 + i, k0, kb, ap[i]);
        /* bp[k][j] = op(B)[k0+k, j0+j]: row k0+k of op(B), or column j0+j */
        if (!g->trans_b) {
            for (size_t k = 0; k < kb; k++) {
                widen_row(g->b_type, g->B, false, (size_t)g->ldb, k0 + k, j0, nb, row);
                for (size_t j = 0; j < nb; j++) bp[k][j] = row[j];
            }
        } else {
            for (size_t j = 0; j < nb; j++) {
                widen_row(g->b_type, g->B, false, (size_t)g->ldb, j0 + j, k0, kb, col);
                for (size_t k = 0; k < kb; k++) bp[k][j] = col[k];
            }
        }
        for (size_t k = 0; k < kb; k++) {
            for (size_t i = 0; i < mb; i++) {
                double a = ap[i][k];
                for (size_t j = 0; j < nb; j++) acc16[i][j] = fma16(a, bp[k][j], acc16[i][j]);
            }
            if (++done == kp || k0 + k + 1 == K) { /* promote and reset */
                for (size_t i = 0; i < mb; i++)
                    for (size_t j = 0; j < nb; j++) {
                        acc32[i][j] += (float)acc16[i][j]; /* exact: an FP16 value */
                        acc16[i][j] = 0.0;
                    }
                done = 0;
            }
        }
    }
    for (size_t i = 0; i < mb; i++) {
        float *c = g->C + (i0 + i) * (size_t)g->ldc + j0;
        for (size_t j = 0; j < nb; j++)
            c[j] = g->beta == 0.0f ? g->alpha * acc32[i][j]
                                   : g->alpha * acc32[i][j] + g->beta * c[j];
    }
}

void mxp_generic_gemm_f16acc(const mxp_gemm_args *g, int k) {
    if (g->M <= 0 || g->N <= 0) return;
    if (k < 1) k = 1;
    if (k > MXP_F16ACC_K_MAX) k = MXP_F16ACC_K_MAX;
    if (g->K <= 0) {
        for (int64_t i = 0; i < g->M; i++) {
            float *c = g->C + (size_t)i * (size_t)g->ldc;
            for (int64_t j = 0; j < g->N; j++) c[j] = g->beta == 0.0f ? 0.0f : g->beta * c[j];
        }
        return;
    }
    size_t M = (size_t)g->M, N = (size_t)g->N;
    for (size_t i0 = 0; i0 < M; i0 += F16ACC_MB) {
        size_t mb = M - i0 < F16ACC_MB ? M - i0 : F16ACC_MB;
        for (size_t j0 = 0; j0 < N; j0 += F16ACC_NB)
            block(g, i0, mb, j0, N - j0 < F16ACC_NB ? N - j0 : F16ACC_NB, k);
    }
}
