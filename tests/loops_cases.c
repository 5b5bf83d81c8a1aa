/* tests/loops_cases.c: what the AVX-512 loop tests share (contracts in
 * loops_cases.h). */
#include "loops_cases.h"

#include <stdlib.h>
#include <string.h>

const mxp_kernels *G, *A;
mxp_rng rng;

const size_t kLens[] = {0, 1, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64,
                        65, 127, 128, 129, 1000, 4099};
_Static_assert(sizeof kLens / sizeof kLens[0] == N_LENS, "N_LENS counts kLens");

bool loops_cases_init(const char *name, uint64_t seed) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("%s: skipped (this CPU cannot run the AVX-512 table)\n", name);
        return false;
    }
    G = mxp_kernels_generic();
    A = mxp_kernels_avx512();
    mxp_rng_init(&rng, seed);
    return true;
}

float *ualloc(size_t n) { return (float *)test_xmalloc((n + 1) * sizeof(float)) + 1; }
void ufree(float *p) { free(p - 1); }

float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

bool same(float a, float b) {
    return (isnan(a) && isnan(b)) || test_f32_bits(a) == test_f32_bits(b);
}

double ulp_dist(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : 1e30;
    int64_t ia = (int32_t)test_f32_bits(a), ib = (int32_t)test_f32_bits(b);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return (double)(ia > ib ? ia - ib : ib - ia);
}

double ulp_of(double x) {
    x = fabs(x);
    if (!(x >= 0x1p-126)) return 0x1p-149;
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 24);
}

size_t cmp_exact(const char *what, size_t n, const float *got, const float *ref) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!same(got[i], ref[i])) {
            if (!bad)
                test_fail(__FILE__, __LINE__, "%s n=%zu [%zu]: %a (0x%08x) vs generic %a (0x%08x)",
                          what, n, i, got[i], test_f32_bits(got[i]), ref[i], test_f32_bits(ref[i]));
            bad++;
        }
    test_checks++;
    return bad;
}

void fill(float *x, size_t n, float s, bool special) {
    static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f,
                               1e30f, -1e30f, 3.4e38f, 1e-30f, 10.0f, -10.0f, 5.0f, -5.0f};
    for (size_t i = 0; i < n; i++) {
        x[i] = s * mxp_rng_normal(&rng);
        if (special && mxp_rng_below(&rng, 16) == 0)
            x[i] = sp[mxp_rng_below(&rng, sizeof sp / sizeof sp[0])];
    }
}
