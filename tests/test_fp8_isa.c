/* tests/test_fp8_isa.c: the AVX-512 FP8 kernels (x86_avx512/loops_fp8.c)
 * against num's scalar reference conversions and the generic kernels.
 *
 * Oracles: mxp_fp8_e4m3_to_f32 / mxp_fp8_e5m2_to_f32 /
 * mxp_f32_to_fp8_e4m3 (both overflow modes) / mxp_f32_to_fp8_e5m2 per
 * element, mxp_convert (the scalar bulk reference) for the pairs through
 * FP32, and mxp_kernels_generic()->fp8_quantize for the scaled quantise
 * (itself checked against the reference round trip by tests/test_fp8.c).
 *
 * What must hold: equal bits, NaN payloads included, for
 *   - decoding: all 256 codes of each format, to FP32, BF16 and FP16 and
 *     to the other FP8 format (through the convert slot);
 *   - encoding FP32 -> E4M3 (saturate and NaN modes) and E5M2: every FP32
 *     whose biased exponent is in [100, 145] (2^-27 .. 2^18: every FP8
 *     subnormal, normal, rounding tie and overflow boundary with margin),
 *     with all 2^23 mantissas and positive sign, plus exponents 0..255 with
 *     tie / near-tie mantissa patterns and 2^20 random bit patterns in both
 *     signs. MIXPREC_TEST_QUICK=1 samples 2^15 random mantissas per exponent
 *     instead of all; MIXPREC_TEST_FP8_EXHAUSTIVE=1 checks all 2^32 inputs
 *     (prints the time it took);
 *   - BF16 / FP16 -> FP8 for all 65,536 inputs;
 *   - the quantise: values (finite, subnormal, +-0, +-Inf, NaNs with
 *     payloads) times scales that push them into FP8's subnormal range and
 *     past its maximum, lengths 0 .. 129, 4099 and one long enough to be
 *     split over threads, in place and out of place, with flush-to-zero
 *     off and on; dst and the returned amax (NaN payload: the last NaN)
 *     bit for bit.
 * Buffers are malloc'ed to their exact extent (ASan sees overruns) and
 * used at unaligned offsets. Skips on CPUs without the AVX-512 table.
 */
#include "kernels/generic/generic.h"
#include "kernels/x86_avx512/loops.h"
#include "kernel_slots.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const mxp_kernels *G, *A;
static mxp_rng rng;
static bool quick;

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const mxp_dtype kTypes[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16,
                                   MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2};

/* Convert n elements with A's convert slot at an odd offset into exactly
 * sized buffers, and compare the bytes with mxp_convert's. */
static void check_convert(mxp_dtype dt, mxp_dtype st, const void *src, size_t n) {
    size_t ds = mxp_dtype_info(dt)->size, ss = mxp_dtype_info(st)->size;
    char *s = test_xmalloc(n * ss + 1), *got = test_xmalloc(n * ds + 1);
    char *ref = test_xmalloc(n * ds);
    memcpy(s + 1, src, n * ss);
    A->convert(dt, got + 1, st, s + 1, n);
    mxp_convert(dt, ref, st, src, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + 1 + i * ds, ref + i * ds, ds) != 0 && bad++ == 0) first = i;
    CHECK_MSG(bad == 0, "convert %s -> %s: %zu of %zu differ, first at %zu",
              mxp_dtype_name(st), mxp_dtype_name(dt), bad, n, first);
    free(s);
    free(got);
    free(ref);
}

/* All 256 codes of each FP8 format to every other dtype, and every BF16 and
 * FP16 value to both FP8 formats; lengths that are not multiples of 16. */
static void test_decode_and_pairs(void) {
    uint8_t codes[256];
    for (int i = 0; i < 256; i++) codes[i] = (uint8_t)i;
    /* the FP32 bits against the per-element reference */
    float got[256];
    A->convert(MXP_DTYPE_F32, got, MXP_DTYPE_F8_E4M3, codes, 256);
    for (int i = 0; i < 256; i++) {
        uint32_t want = test_f32_bits(mxp_fp8_e4m3_to_f32((mxp_fp8_e4m3){(uint8_t)i}));
        CHECK_MSG(test_f32_bits(got[i]) == want, "E4M3 0x%02x -> 0x%08x", i,
                  test_f32_bits(got[i]));
    }
    A->convert(MXP_DTYPE_F32, got, MXP_DTYPE_F8_E5M2, codes, 256);
    for (int i = 0; i < 256; i++) {
        uint32_t want = test_f32_bits(mxp_fp8_e5m2_to_f32((mxp_fp8_e5m2){(uint8_t)i}));
        CHECK_MSG(test_f32_bits(got[i]) == want, "E5M2 0x%02x -> 0x%08x", i,
                  test_f32_bits(got[i]));
    }
    for (int s = 3; s < 5; s++)
        for (size_t t = 0; t < 5; t++) {
            if (kTypes[t] == kTypes[s]) continue;
            check_convert(kTypes[t], kTypes[s], codes, 256);
            check_convert(kTypes[t], kTypes[s], codes + 7, 249);
        }
    uint16_t *h = test_xmalloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int s = 1; s < 3; s++)
        for (int d = 3; d < 5; d++) check_convert(kTypes[d], kTypes[s], h, 65536);
    free(h);
}

/* Encode n FP32 bit patterns with the table slots and compare with the
 * scalar reference; returns the number of mismatches (first printed). */
static size_t encode_check(const uint32_t *u, size_t n, uint8_t *o1, uint8_t *o2, uint8_t *o3) {
    const float *f = (const float *)u;
    A->f32_to_fp8(MXP_DTYPE_F8_E4M3, o1, f, n, MXP_FP8_SATURATE);
    A->f32_to_fp8(MXP_DTYPE_F8_E4M3, o2, f, n, MXP_FP8_NAN);
    A->f32_to_fp8(MXP_DTYPE_F8_E5M2, o3, f, n, MXP_FP8_SATURATE);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float x = from_bits(u[i]);
        uint8_t r1 = mxp_f32_to_fp8_e4m3(x, MXP_FP8_SATURATE).bits;
        uint8_t r2 = mxp_f32_to_fp8_e4m3(x, MXP_FP8_NAN).bits;
        uint8_t r3 = mxp_f32_to_fp8_e5m2(x).bits;
        if (o1[i] != r1 || o2[i] != r2 || o3[i] != r3) {
            if (bad++ == 0)
                fprintf(stderr, "encode 0x%08x: e4m3 sat %02x/%02x nan %02x/%02x e5m2 %02x/%02x\n",
                        u[i], o1[i], r1, o2[i], r2, o3[i], r3);
        }
    }
    return bad;
}

enum { CHUNK = 1 << 16 };

static void test_encode(void) {
    uint32_t *u = test_xmalloc(CHUNK * 4);
    uint8_t *o1 = test_xmalloc(CHUNK), *o2 = test_xmalloc(CHUNK), *o3 = test_xmalloc(CHUNK);
    size_t bad = 0;
    /* every mantissa (or a random sample) of exponents 100 .. 145 */
    for (uint32_t e = 100; e <= 145; e++) {
        if (quick) {
            for (size_t i = 0; i < CHUNK / 2; i++)
                u[i] = (e << 23) | (mxp_rng_u32(&rng) & 0x7fffffu);
            bad += encode_check(u, CHUNK / 2, o1, o2, o3);
            continue;
        }
        for (uint32_t m0 = 0; m0 < (1u << 23); m0 += CHUNK) {
            for (uint32_t i = 0; i < CHUNK; i++) u[i] = (e << 23) | (m0 + i);
            bad += encode_check(u, CHUNK, o1, o2, o3);
        }
    }
    /* every exponent and sign with tie / near-tie patterns at each bit k:
     * low k bits = 10..0, 10..01, 01..1, and the bit above k set or not */
    size_t n = 0;
    for (uint32_t se = 0; se < 512; se++)
        for (uint32_t k = 1; k <= 23; k++)
            for (uint32_t up = 0; up < 2; up++) {
                uint32_t hi = ((se << 23) | (k < 23 ? up << k : 0) | (mxp_rng_u32(&rng) & ~((2u << k) - 1u) & 0x7fffffu));
                uint32_t half = 1u << (k - 1);
                uint32_t pats[4] = {half, half + 1, half - 1, 0};
                for (int p = 0; p < 4; p++) {
                    u[n++] = hi | pats[p];
                    if (n == CHUNK) {
                        bad += encode_check(u, n, o1, o2, o3);
                        n = 0;
                    }
                }
            }
    bad += encode_check(u, n, o1, o2, o3);
    /* random bit patterns, both signs */
    for (int r = 0; r < 16; r++) {
        for (size_t i = 0; i < CHUNK; i++) u[i] = mxp_rng_u32(&rng);
        bad += encode_check(u, CHUNK, o1, o2, o3);
    }
    CHECK_MSG(bad == 0, "FP32 -> FP8 encode: %zu mismatches", bad);

    /* the convert slot saturates E4M3 (mxp_convert's rule) */
    for (size_t i = 0; i < CHUNK; i++) u[i] = mxp_rng_u32(&rng);
    check_convert(MXP_DTYPE_F8_E4M3, MXP_DTYPE_F32, u, CHUNK - 3);
    check_convert(MXP_DTYPE_F8_E5M2, MXP_DTYPE_F32, u, CHUNK - 5);

    const char *ex = getenv("MIXPREC_TEST_FP8_EXHAUSTIVE");
    if (ex && strcmp(ex, "1") == 0) {
        double t0 = mxp_time_now();
        size_t xbad = 0;
        for (uint64_t b = 0; b < (1ull << 32); b += CHUNK) {
            for (uint32_t i = 0; i < CHUNK; i++) u[i] = (uint32_t)b + i;
            xbad += encode_check(u, CHUNK, o1, o2, o3);
        }
        printf("test_fp8_isa: all 2^32 FP32 inputs x 3 encoders: %zu mismatches, %.1f s\n", xbad,
               mxp_time_now() - t0);
        CHECK(xbad == 0);
    }
    free(u);
    free(o1);
    free(o2);
    free(o3);
}

/* One random test value: mostly scaled normals, sometimes special. */
static float qvalue(void) {
    uint32_t r = mxp_rng_u32(&rng);
    switch (r % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return from_bits(0x00000001u + (mxp_rng_u32(&rng) & 0x7fffffu)); /* subnormal */
    case 3: return (r & 16) ? INFINITY : -INFINITY;
    case 4: return from_bits(0x7f800001u | (mxp_rng_u32(&rng) & 0x807fffffu)); /* NaNs */
    default: {
        float m = (float)(mxp_rng_u32(&rng) >> 8) * 0x1p-24f; /* [0, 1) */
        int e = (int)(mxp_rng_u32(&rng) % 80) - 40;
        return ((r & 32) ? -1.0f : 1.0f) * ldexpf(1.0f + m, e);
    }
    }
}

static bool same_bits(float a, float b) { return test_f32_bits(a) == test_f32_bits(b); }

static void quant_case(mxp_dtype fmt, const float *src, size_t n, float scale, bool inplace) {
    float *s1 = test_xmalloc((n + 1) * 4), *s2 = test_xmalloc((n + 1) * 4);
    float *d1 = test_xmalloc((n + 1) * 4), *d2 = test_xmalloc((n + 1) * 4);
    memcpy(s1 + 1, src, n * 4);
    memcpy(s2 + 1, src, n * 4);
    float *o1 = inplace ? s1 + 1 : d1 + 1, *o2 = inplace ? s2 + 1 : d2 + 1;
    float ra = ks_fp8_quantize(A, fmt, o1, s1 + 1, n, scale);
    float rg = ks_fp8_quantize(G, fmt, o2, s2 + 1, n, scale);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_bits(o1[i], o2[i]) && bad++ == 0) first = i;
    CHECK_MSG(bad == 0, "quantize %s n=%zu scale=%g inplace=%d ftz=%d: %zu differ, first [%zu] "
              "src 0x%08x got 0x%08x want 0x%08x", mxp_dtype_name(fmt), n, (double)scale,
              inplace, mxp_fpenv_get_ftz(), bad, first, n ? test_f32_bits(src[first]) : 0,
              n ? test_f32_bits(o1[first]) : 0, n ? test_f32_bits(o2[first]) : 0);
    CHECK_MSG(same_bits(ra, rg), "quantize %s n=%zu: amax 0x%08x, want 0x%08x",
              mxp_dtype_name(fmt), n, test_f32_bits(ra), test_f32_bits(rg));
    free(s1);
    free(s2);
    free(d1);
    free(d2);
}

static void test_quantize(void) {
    static const size_t lens[] = {0, 1, 3, 15, 16, 17, 31, 33, 63, 65, 127, 129, 4099};
    const size_t big = (size_t)MXP_AVX512_PAR_MIN * 2 + 33;
    const float scales[] = {1.0f, 0x1p-20f, 0x1p12f, 0.37f, 1e-3f, 3e4f, 1e30f, 1e-30f};
    float *src = test_xmalloc(big * 4);
    for (int ftz = 0; ftz <= 1; ftz++) {
        CHECK(mxp_fpenv_set_ftz(ftz != 0));
        for (int f = 3; f < 5; f++)
            for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
                for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                    for (size_t i = 0; i < lens[l]; i++) src[i] = qvalue();
                    quant_case(kTypes[f], src, lens[l], scales[s], false);
                    quant_case(kTypes[f], src, lens[l], scales[s], true);
                }
                /* only finite values (amax path), then the long split one */
                for (size_t i = 0; i < 129; i++) src[i] = (float)i * 0.75f - 40.0f;
                quant_case(kTypes[f], src, 129, scales[s], false);
                if (s % 3 == 0) {
                    for (size_t i = 0; i < big; i++) src[i] = qvalue();
                    quant_case(kTypes[f], src, big, scales[s], s == 0);
                    for (size_t i = 0; i < big; i++) {
                        float v = qvalue();
                        src[i] = isfinite(v) ? v : 1.0f;
                    }
                    src[big / 3] = INFINITY; /* Inf in one part, NaNs with payloads later */
                    src[big / 2] = from_bits(0x7fc00123u);
                    src[big - 2] = from_bits(0xffc00456u);
                    src[big - 1] = -INFINITY;
                    quant_case(kTypes[f], src, big, scales[s], false);
                    src[big / 2] = 1.0f;
                    src[big - 2] = 1.0f;
                    quant_case(kTypes[f], src, big, scales[s], false);
                }
            }
    }
    CHECK(mxp_fpenv_set_ftz(false));
    free(src);
}

int main(void) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("test_fp8_isa: skipped (this CPU cannot run the AVX-512 table)\n");
        return 0;
    }
    const char *q = getenv("MIXPREC_TEST_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    G = mxp_kernels_generic();
    A = mxp_kernels_avx512();
    CHECK(A->f32_to_fp8 != G->f32_to_fp8 && A->fp8_quantize != G->fp8_quantize);
    mxp_rng_init(&rng, 20240621);
    test_decode_and_pairs();
    test_encode();
    test_quantize();
    return test_finish("test_fp8_isa");
}
