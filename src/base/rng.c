/* base/rng.c: counter-based random numbers.
 *
 * mxp_rng_at(seed, counter) is Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11) keyed by the seed, on the
 * block counter/4, returning word counter%4. Every draw is a pure function
 * of (seed, counter), so streams are reproducible, splittable and cheap to
 * checkpoint (two integers). */
#include <mixprec/base.h>

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

/* One Philox4x32-10 block for counter c (128-bit: low 64 bits used) and key k. */
static void philox4x32(uint64_t c, uint64_t k, uint32_t out[4]) {
    uint32_t x0 = (uint32_t)c, x1 = (uint32_t)(c >> 32), x2 = 0, x3 = 0;
    uint32_t k0 = (uint32_t)k, k1 = (uint32_t)(k >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, x0, &hi0, &lo0);
        mulhilo(PHILOX_M1, x2, &hi1, &lo1);
        uint32_t y0 = hi1 ^ x1 ^ k0, y1 = lo1, y2 = hi0 ^ x3 ^ k1, y3 = lo0;
        x0 = y0; x1 = y1; x2 = y2; x3 = y3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = x0; out[1] = x1; out[2] = x2; out[3] = x3;
}

uint32_t mxp_rng_at(uint64_t seed, uint64_t counter) {
    uint32_t block[4];
    philox4x32(counter >> 2, seed, block);
    return block[counter & 3];
}

void mxp_rng_init(mxp_rng *r, uint64_t seed) {
    r->seed = seed;
    r->counter = 0;
}

uint32_t mxp_rng_u32(mxp_rng *r) { return mxp_rng_at(r->seed, r->counter++); }

float mxp_rng_uniform(mxp_rng *r) {
    return (float)(mxp_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
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
