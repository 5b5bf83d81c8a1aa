/* tests/loops_cases.h: what the AVX-512 loop tests share
 * (test_loops_isa.c, test_loops_isa_rows.c): the two tables, the random
 * stream, the lengths every kernel runs at, unaligned exact-extent buffers
 * and the comparisons. The oracles and bounds are in test_loops_isa.c's
 * file comment.
 */
#ifndef MXP_TESTS_LOOPS_CASES_H
#define MXP_TESTS_LOOPS_CASES_H

#include "kernels/generic/generic.h"
#include "kernels/x86_avx512/loops.h"
#include "testutil.h"

#include <stdbool.h>
#include <stddef.h>

/* G: the generic table (the oracle), A: the AVX-512 table under test. */
extern const mxp_kernels *G, *A;
extern mxp_rng rng;

/* Every length a kernel runs at; BIG: one length large enough for the
 * pool's split. */
extern const size_t kLens[];
enum { N_LENS = 18, BIG = (1 << 18) + 5 };

#define U32 (1.0 / 16777216.0)
#define UD (1.0 / 9007199254740992.0)

/* Returns false, after printing "<name>: skipped ...", where the CPU cannot
 * run the AVX-512 table; else sets G and A and seeds rng. */
bool loops_cases_init(const char *name, uint64_t seed);

/* n floats at a 4-byte (not 64-byte) aligned address ending exactly at the
 * end of the allocation; release with ufree. */
float *ualloc(size_t n);
void ufree(float *p);

float from_bits(uint32_t u);
/* Equal bits, or both NaN. */
bool same(float a, float b);
/* Distance in representable floats (0 when both NaN, huge when one is). */
double ulp_dist(float a, float b);
/* The spacing of floats at |x| (2^-149 below the normal range). */
double ulp_of(double x);
/* Count mismatching elements (reports the first). */
size_t cmp_exact(const char *what, size_t n, const float *got, const float *ref);
/* Random values: mostly N(0, s), with specials sprinkled in when `special`. */
void fill(float *x, size_t n, float s, bool special);

#endif
