/* base/rng.c: counter-based random numbers.
 *
 * mxp_rng_at(seed, counter) is Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11) keyed by the seed, on the
 * block counter/4, returning word counter%4. Every draw is a pure function
 * of (seed, counter), so streams are reproducible, splittable and cheap to
 * checkpoint (two integers). The generator itself lives in
 * backend/numerics/philox.h, shared with the CUDA kernels. */
#include <mixprec/base.h>

#include "backend/numerics/philox.h"

#include <math.h>

uint32_t mxp_rng_at(uint64_t seed, uint64_t counter) {
    return mxp_philox_at(seed, counter);
}

void mxp_rng_init(mxp_rng *r, uint64_t seed) {
    r->seed = seed;
    r->counter = 0;
}

uint32_t mxp_rng_u32(mxp_rng *r) { return mxp_rng_at(r->seed, r->counter++); }

/* A draw as a uniform in [0, 1): its top 24 bits times 2^-24. */
static float unit24(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float mxp_rng_uniform(mxp_rng *r) { return unit24(mxp_rng_u32(r)); }

/* One Philox block per 4 draws (mxp_philox_block) instead of one per draw
 * (mxp_rng_uniform): the same words, a quarter of the work. */
void mxp_rng_uniform_fill(mxp_rng *r, float *dst, size_t n) {
    uint32_t w[4];
    uint64_t held = UINT64_MAX; /* the block in w */
    for (size_t i = 0; i < n; i++) {
        const uint64_t c = r->counter + i;
        if (c >> 2 != held) {
            held = c >> 2;
            mxp_philox_block(r->seed, held, w);
        }
        dst[i] = unit24(w[c & 3u]);
    }
    r->counter += n;
}

float mxp_rng_normal(mxp_rng *r) {
    /* u1 in (0, 1] so log never sees 0 */
    double u1 = ((double)(mxp_rng_u32(r) >> 8) + 1.0) / 16777216.0;
    double u2 = (double)(mxp_rng_u32(r) >> 8) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t mxp_rng_below(mxp_rng *r, uint32_t n) {
    /* Lemire-style rejection: the threshold removes the modulo bias */
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = mxp_rng_u32(r);
        if (x >= threshold) return x % n;
    }
}

void mxp_rng_permutation(uint32_t *perm, int64_t n, uint64_t seed) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (int64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t j = mxp_rng_below(&r, (uint32_t)(i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
