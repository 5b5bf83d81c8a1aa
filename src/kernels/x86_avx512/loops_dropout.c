/* kernels/x86_avx512/loops_dropout.c: the AVX-512 inverted-dropout kernel.
 *
 * Entry point: mxp_avx512_dropout (contract: kernels/kernels.h, dropout).
 * The Philox words come from mxp_avx512_rng_fill (loops_convert.c, 16
 * blocks per vector pass) in chunks of DROP_CHUNK; each lane then
 * multiplies x by scale or by 0.0f, the operations of the generic kernel,
 * so the bits agree with kernels/generic/eltwise.c exactly. Buffers of
 * PAR_MIN elements or more are split over the kernel thread pool (element
 * i always draws word counter + i, so the split does not change a bit).
 */
#include "kernels/x86_avx512/loops.h"
#include "kernels/x86_avx512/loops_simd.h"

enum { DROP_CHUNK = 512 };

static void dropout_range(float *y, const float *x, size_t n, uint64_t key, uint64_t counter,
                          uint32_t drop_below, float scale) {
    uint32_t rnd[DROP_CHUNK];
    const __m512i thr = _mm512_set1_epi32((int)drop_below);
    const __m512 sv = _mm512_set1_ps(scale);
    for (size_t off = 0; off < n; off += DROP_CHUNK) {
        size_t len = n - off < DROP_CHUNK ? n - off : DROP_CHUNK;
        mxp_avx512_rng_fill(rnd, len, key, counter + off);
        for (size_t i = 0; i < len; i += 16) {
            __mmask16 k = lanes16(len - i);
            __m512i r = _mm512_maskz_loadu_epi32(k, rnd + i);
            __mmask16 keep = _mm512_cmpge_epu32_mask(r, thr);
            __m512 f = _mm512_maskz_mov_ps(keep, sv); /* scale or +0.0f */
            __m512 v = _mm512_maskz_loadu_ps(k, x + off + i);
            _mm512_mask_storeu_ps(y + off + i, k, _mm512_mul_ps(v, f));
        }
    }
}

typedef struct drop_ctx {
    float *y;
    const float *x;
    size_t n;
    uint64_t key, counter;
    uint32_t drop_below;
    float scale;
} drop_ctx;

static void dropout_task(void *ctx, int i, int count) {
    const drop_ctx *c = ctx;
    size_t lo, hi;
    par_range(c->n, i, count, &lo, &hi);
    if (hi > lo)
        dropout_range(c->y + lo, c->x + lo, hi - lo, c->key, c->counter + lo, c->drop_below,
                      c->scale);
}

/* Contract: kernels.h (dropout), bit for bit with the generic kernel. */
void mxp_avx512_dropout(float *y, const float *x, size_t n, uint64_t key, uint64_t counter,
                        uint32_t drop_below, float scale) {
    drop_ctx c = {y, x, n, key, counter, drop_below, scale};
    par_run(n, dropout_task, &c);
}
