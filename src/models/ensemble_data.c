/* models/ensemble_data.c: the data side of an ensemble (model.ensemble=E,
 * docs/world_models.md): each member trains on its own bootstrap of the
 * training rows, as mbrl-lib's BootstrapIterator does.
 *
 * Entry points (user_data.h): ud_bootstrap, ud_fill_members. At create,
 * member e draws n_train row indices uniformly WITH replacement (its
 * bootstrap sample, fixed for the run; an RNG stream of training.seed of
 * its own); the run's shuffle of 0..n_train-1 then picks, for batch
 * position b with shuffled index i, row boot[e][i] for member e: every
 * member sees its own sample in the run's order, one epoch being n_train
 * draws per member.
 */
#include "models/user_data.h"

#include <string.h>

/* RNG stream of the bootstraps: far from the model-init and shuffle
 * streams of the same seed. */
#define BOOT_STREAM 0x424f4f54ull /* "BOOT" */

uint32_t *ud_bootstrap(int E, int64_t n, uint64_t seed) {
    size_t total;
    if (E < 2 || n < 1 || n > (int64_t)UINT32_MAX ||
        !mxp_size_mul((size_t)E, (size_t)n, &total))
        return NULL;
    uint32_t *boot = mxp_calloc(total, sizeof(uint32_t));
    if (!boot) return NULL;
    mxp_rng r;
    mxp_rng_init(&r, seed ^ (BOOT_STREAM << 20));
    for (size_t i = 0; i < total; i++) boot[i] = mxp_rng_below(&r, (uint32_t)n);
    return boot;
}

void ud_fill_members(const float *x, const float *y, int64_t D, int64_t K, const uint32_t *boot,
                     int E, int64_t n_train, const uint32_t *idx, int64_t n, float *bx,
                     float *by) {
    for (int e = 0; e < E; e++)
        for (int64_t b = 0; b < n; b++) {
            const size_t row = boot ? boot[(size_t)e * (size_t)n_train + idx[b]] : idx[b];
            const size_t at = (size_t)e * (size_t)n + (size_t)b;
            memcpy(bx + at * (size_t)D, x + row * (size_t)D, (size_t)D * sizeof(float));
            memcpy(by + at * (size_t)K, y + row * (size_t)K, (size_t)K * sizeof(float));
        }
}
