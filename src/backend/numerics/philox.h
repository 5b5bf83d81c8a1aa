/* backend/numerics/philox.h: Philox4x32-10, the counter-based generator
 * behind every random draw of mixprec (stochastic rounding, data order).
 *
 * Entry points: mxp_philox4x32_10 (one 128-bit block), mxp_philox_block
 * (block b of stream seed: draws 4b .. 4b+3), mxp_philox_at (the draw
 * mxp_rng_at(seed, counter) of include/mixprec/base.h: word counter%4 of
 * block counter/4).
 * Reference: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11 (Random123): multipliers 0xD2511F53 / 0xCD9E8D57,
 * Weyl key increments 0x9E3779B9 / 0xBB67AE85, 10 rounds. Known-answer
 * vectors of Random123's kat_vectors are checked in tests/test_numerics.c.
 */
#ifndef MIXPREC_BACKEND_NUMERICS_PHILOX_H
#define MIXPREC_BACKEND_NUMERICS_PHILOX_H

#include "backend/numerics/hd.h"

#define MXP_PHILOX_M0 0xD2511F53u
#define MXP_PHILOX_M1 0xCD9E8D57u
#define MXP_PHILOX_W0 0x9E3779B9u
#define MXP_PHILOX_W1 0xBB67AE85u

/* ctr[4] and key[2] in, out[4] = Philox4x32-10(ctr, key). */
MXP_HD static inline void mxp_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                            uint32_t out[4]) {
    uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)MXP_PHILOX_M0 * x0;
        uint64_t p1 = (uint64_t)MXP_PHILOX_M1 * x2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t y0 = hi1 ^ x1 ^ k0, y1 = lo1, y2 = hi0 ^ x3 ^ k1, y3 = lo0;
        x0 = y0; x1 = y1; x2 = y2; x3 = y3;
        k0 += MXP_PHILOX_W0;
        k1 += MXP_PHILOX_W1;
    }
    out[0] = x0; out[1] = x1; out[2] = x2; out[3] = x3;
}

/* Block `block` of stream `seed` (draws 4 block .. 4 block + 3): the
 * 128-bit block counter is `block` in its low 64 bits, the key is the seed
 * (low word first). */
MXP_HD static inline void mxp_philox_block(uint64_t seed, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0u, 0u};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    mxp_philox4x32_10(ctr, key, out);
}

/* Draw `counter` of stream `seed`: word counter % 4 of block counter / 4. */
MXP_HD static inline uint32_t mxp_philox_at(uint64_t seed, uint64_t counter) {
    uint32_t out[4];
    mxp_philox_block(seed, counter >> 2, out);
    return out[counter & 3];
}

#endif /* MIXPREC_BACKEND_NUMERICS_PHILOX_H */
