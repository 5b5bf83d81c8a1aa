/* tests/gemm_cases.h: the AVX-512 GEMM tests' shared cases and checks
 * (test_gemm_isa.c, test_gemm_isa_split.c, test_gemm_isa_inplace.c).
 *
 * Oracle: mxp_kernels_generic()->gemm, which widens inputs exactly and sums
 * in FP32 in k order. The AVX-512 GEMM sums the same FP32 products in a
 * different order (FMA per product, K cut into KC blocks, on the BF16 path
 * vdpbf16ps adds two products per step), so the two may differ by the
 * rounding of FP32 accumulation. For C = alpha*sum_k a_k b_k + beta*c, each
 * result is within gamma_n * S of the exact value, with
 *   S = |alpha| sum_k |a_k||b_k| + |beta||c|,  gamma_n ~ n*u, u = 2^-24,
 * n = K + 2 roundings (products, sums, alpha and beta terms): Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., Sec. 3.1. The
 * two results therefore agree within
 *   atol + rtol*S,  rtol = 2 (K + 2) 2^-24,  atol = 1e-30.
 * atol covers the BF16 path's flush of FP32 subnormal partial sums
 * (vdpbf16ps is defined with FTZ; at most K * 2^-126 in total). One missing
 * or wrong product moves a result by about S/K, far above rtol*S.
 *
 * Buffers are malloc'ed to their exact extent so ASan sees any read past
 * the end; padding of A, B and C holds NaN.
 */
#ifndef MXP_TESTS_GEMM_CASES_H
#define MXP_TESTS_GEMM_CASES_H

#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <stdbool.h>
#include <stddef.h>

#define ATOL 1e-30

/* The random stream every case draws from (seeded by gemm_cases_init). */
extern mxp_rng gemm_rng;

/* Sets MIXPREC_NUM_THREADS to 3 where the environment does not say
 * otherwise (so that 3-way cuts run on any machine: the pool runs what it
 * cannot hand out on the caller, and results must not change), seeds
 * gemm_rng and checks that the AVX-512 table has its own GEMM. Returns
 * false, after printing "<name>: skipped: no AVX-512", where the CPU
 * cannot run the AVX-512 kernels. Call first in main. */
bool gemm_cases_init(const char *name, uint64_t seed);

/* A typed row-major matrix of `rows` lines of `cols` elements, line stride
 * ld; padding elements hold NaN (where the type has one). */
typedef struct tmat {
    mxp_dtype t;
    size_t rows, cols, ld;
    void *p;
} tmat;

/* rows x cols uniform in [-1, 1) from gemm_rng, stride ld. */
tmat tmat_make(mxp_dtype t, size_t rows, size_t cols, size_t ld);
float tmat_at(const tmat *m, size_t r, size_t c);

/* One GEMM case: C = alpha op(A) op(B) + beta C, leading dimensions the
 * stored widths plus pad_a, pad_b, pad_c. */
typedef struct gcase {
    mxp_dtype at, bt;
    bool ta, tb;
    size_t M, N, K, pad_a, pad_b, pad_c;
    float alpha, beta;
} gcase;

/* Operands and C for one case (C padding and, with beta = 0, C itself
 * filled with NaN). */
typedef struct gbufs {
    tmat A, B;
    size_t ldc, nc;
    float *C0; /* initial C */
} gbufs;

gbufs bufs_make(const gcase *c);
void bufs_free(gbufs *b);
/* The GEMM arguments of case c over b's operands, writing C. */
mxp_gemm_args args_for(const gcase *c, const gbufs *b, float *C);
/* op(A)[i][k], op(B)[k][j] */
float opa(const gcase *c, const gbufs *b, size_t i, size_t k);
float opb(const gcase *c, const gbufs *b, size_t k, size_t j);

/* Compare got with the generic result ref element by element (tolerance in
 * the file comment); the padding of C must be untouched. Returns the number
 * of mismatches (each also a failed check, the first few printed). */
int compare(const gcase *c, const gbufs *b, const float *got, const float *ref,
            const char *what);
/* Run one case through generic and AVX-512 (each path, threads 1 and 2
 * where asked) and compare. */
void run_case(const gcase *c, const gbufs *b, bool both_threads);
/* run_case on fresh buffers. */
void run_gcase(const gcase *c, bool both_threads);
/* Elements whose bits differ, both NaN counting as equal. */
size_t count_differ(const float *x, const float *y, size_t n);
/* One case through mxp_avx512_gemm_ex on `path`, 1 .. max_threads
 * threads: against the generic GEMM (tolerance of the file comment) and
 * bit for bit against the packed path (packed_only: no small-M path, op(A)
 * packed; NaN payloads aside). what names the variant under test. */
void vs_packed(const gcase *c, mxp_gemm_path path, int max_threads, const char *what);

/* The F32 path's per-element instruction sequence, as a scalar oracle:
 * K cut into ceil(K / 512) blocks of equal even length (the last shorter);
 * per block acc = +0, then acc = fma(a_k, b_k, acc) in increasing k (one
 * rounding each); the first block stores alpha*acc + beta*c (beta == 0:
 * alpha*acc), later blocks c + alpha*acc, each operation rounded. */
float f32_path_oracle(const gcase *c, const gbufs *b, size_t i, size_t j);
/* mxp_avx512_gemm_ex (AUTO path, th threads) on case c into got (from
 * C0): how many elements differ in bits from f32_path_oracle. */
size_t f32_sequence_diffs(const gcase *c, const gbufs *b, float *got, int th);

#endif
