/* tests/test_loops_isa.c: the AVX-512 hot loops (every slot of the AVX-512
 * table except gemm) against the generic reference kernels and num's
 * scalar reference conversions, and the flush-to-zero switch.
 *
 * Oracles: mxp_kernels_generic() and the scalar conversions of num.h;
 * glibc erff/expf/tanhf for the vector math. Exits 0 with a message when
 * the CPU cannot run AVX-512 (the table is never used there).
 *
 * What must hold (and the bounds used; u = 2^-24, uD = 2^-53):
 *   - conversions: bit for bit. Widening over all 65,536 BF16/F16 values;
 *     narrowing over every (top 16 or 19 bits) x (tie / near-tie low bits)
 *     pattern, i.e. every exponent, ties, subnormals, overflow boundaries,
 *     NaN payloads incl. signalling NaNs, plus random bit patterns; SR with
 *     counters that are not multiples of 4, cross 2^32 blocks, or wrap 2^64;
 *   - bit-exact kernels: relu, tanh_bwd, axpy, scale, add_bias, bias_grad
 *     and layernorm_bwd's dgamma/dbeta from a zero accumulator (onto a
 *     non-zero one: one reordered sum), mse's dpred, absmax, every count of
 *     unscale_stats and its unscaled values, adamw and sgd in every weight
 *     path (master + recast, pure RNE, pure SR). "Bit-exact" for floats
 *     means equal bits, or both NaN;
 *   - vector math: erf and exp within 1 ulp of glibc erff/expf, tanh within
 *     2 ulp of tanhf (loops_simd.h). GELU follows: |dy| <= |x| 2^-23 +
 *     4 ulp(ref) forward, |dy| (2^-21) + 4 ulp(ref) backward;
 *   - reordered FP32 row sums of C terms differ by at most 2 C u sum|term|
 *     (Higham, Sec. 3.1); the tests use that bound propagated through each
 *     formula (see each check), with a factor 2 of slack;
 *   - reordered double sums of n terms: |diff| <= 2 n uD sum|term|.
 * Every length in kLens (0, 1, 3, ..., 129 and larger) is run with
 * unaligned pointers into buffers malloc'ed to their exact extent (ASan
 * sees any overrun), and in-place (aliased) where the contract allows it.
 */
#include "kernels/generic/generic.h"
#include "kernels/x86_avx512/loops.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const mxp_kernels *G, *A;
static mxp_rng rng;

static const size_t kLens[] = {0, 1, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64,
                               65, 127, 128, 129, 1000, 4099};
enum { N_LENS = sizeof kLens / sizeof kLens[0], BIG = (1 << 18) + 5 };

#define U32 (1.0 / 16777216.0)
#define UD (1.0 / 9007199254740992.0)

/* n floats at a 4-byte (not 64-byte) aligned address ending exactly at the
 * end of the allocation; release with ufree. */
static float *ualloc(size_t n) { return (float *)test_xmalloc((n + 1) * sizeof(float)) + 1; }
static void ufree(float *p) { free(p - 1); }

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static bool same(float a, float b) {
    return (isnan(a) && isnan(b)) || test_f32_bits(a) == test_f32_bits(b);
}

/* Distance in representable floats (0 when both NaN, huge when one is). */
static double ulp_dist(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : 1e30;
    int64_t ia = (int32_t)test_f32_bits(a), ib = (int32_t)test_f32_bits(b);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return (double)(ia > ib ? ia - ib : ib - ia);
}

static double ulp_of(double x) {
    x = fabs(x);
    if (!(x >= 0x1p-126)) return 0x1p-149;
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 24);
}

/* Count mismatching elements (reports the first). */
static size_t cmp_exact(const char *what, size_t n, const float *got, const float *ref) {
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

/* Random values: mostly N(0, s), with specials sprinkled in when `special`. */
static void fill(float *x, size_t n, float s, bool special) {
    static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f,
                               1e30f, -1e30f, 3.4e38f, 1e-30f, 10.0f, -10.0f, 5.0f, -5.0f};
    for (size_t i = 0; i < n; i++) {
        x[i] = s * mxp_rng_normal(&rng);
        if (special && mxp_rng_below(&rng, 16) == 0)
            x[i] = sp[mxp_rng_below(&rng, sizeof sp / sizeof sp[0])];
    }
}

/* ---- conversions ---------------------------------------------------------- */

/* Convert the 32-bit patterns in[n] to t (avx and reference) and compare. */
static void check_narrow(mxp_dtype t, const uint32_t *in, size_t n) {
    float *src = ualloc(n);
    memcpy(src, in, n * 4);
    uint16_t *got = test_xmalloc(n * 2), *ref = test_xmalloc(n * 2);
    A->convert(t, got, MXP_DTYPE_F32, src, n);
    for (size_t i = 0; i < n; i++)
        ref[i] = t == MXP_DTYPE_BF16 ? mxp_f32_to_bf16(src[i]).bits : mxp_f32_to_fp16(src[i]).bits;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != ref[i] && bad++ == 0)
            test_fail(__FILE__, __LINE__, "f32 0x%08x -> %s: 0x%04x, reference 0x%04x", in[i],
                      mxp_dtype_name(t), got[i], ref[i]);
    CHECK_MSG(bad == 0, "%zu mismatches narrowing to %s", bad, mxp_dtype_name(t));
    ufree(src);
    free(got);
    free(ref);
}

/* Every `hi_bits`-bit top pattern combined with tie and near-tie low bits. */
static void check_narrow_structured(mxp_dtype t) {
    const int low = t == MXP_DTYPE_BF16 ? 16 : 13;
    const uint32_t half = 1u << (low - 1), full = (1u << low) - 1;
    const uint32_t lows[] = {0, 1, half - 1, half, half + 1, full};
    const size_t nl = sizeof lows / sizeof lows[0];
    const size_t nhi = (size_t)1 << (32 - low);
    uint32_t *in = test_xmalloc(nhi * nl * 4);
    for (size_t h = 0; h < nhi; h++)
        for (size_t j = 0; j < nl; j++) in[h * nl + j] = ((uint32_t)h << low) | lows[j];
    check_narrow(t, in, nhi * nl);
    free(in);
}

static void test_convert(void) {
    /* widening: all 65,536 values, unaligned source and destination */
    uint16_t *h = test_xmalloc(65537 * 2);
    for (uint32_t i = 0; i < 65536; i++) h[i + 1] = (uint16_t)i;
    float *w = ualloc(65536);
    for (int t = MXP_DTYPE_BF16; t <= MXP_DTYPE_F16; t++) {
        A->convert(MXP_DTYPE_F32, w, (mxp_dtype)t, h + 1, 65536);
        size_t bad = 0;
        for (uint32_t i = 0; i < 65536; i++) {
            float r = t == MXP_DTYPE_BF16 ? mxp_bf16_to_f32((mxp_bf16){(uint16_t)i})
                                          : mxp_fp16_to_f32((mxp_fp16){(uint16_t)i});
            if (test_f32_bits(w[i]) != test_f32_bits(r) && bad++ == 0)
                test_fail(__FILE__, __LINE__, "%s 0x%04x widens to 0x%08x, reference 0x%08x",
                          mxp_dtype_name((mxp_dtype)t), i, test_f32_bits(w[i]), test_f32_bits(r));
        }
        CHECK_MSG(bad == 0, "%zu widening mismatches from %s", bad, mxp_dtype_name((mxp_dtype)t));
    }
    /* narrow -> narrow (BF16 <-> F16) over all 65,536 inputs, and FP8 */
    uint8_t *got = test_xmalloc(65536 * 2), *ref = test_xmalloc(65536 * 2);
    for (int s = MXP_DTYPE_BF16; s < MXP_DTYPE_COUNT; s++)
        for (int d = MXP_DTYPE_F32; d < MXP_DTYPE_COUNT; d++) {
            if (s == d || d == MXP_DTYPE_F32) continue;
            size_t n = mxp_dtype_info((mxp_dtype)s)->size == 2 ? 65536 : 256;
            A->convert((mxp_dtype)d, got, (mxp_dtype)s, h + 1, n);
            mxp_convert((mxp_dtype)d, ref, (mxp_dtype)s, h + 1, n);
            CHECK_MSG(memcmp(got, ref, n * mxp_dtype_info((mxp_dtype)d)->size) == 0,
                      "%s -> %s differs from mxp_convert", mxp_dtype_name((mxp_dtype)s),
                      mxp_dtype_name((mxp_dtype)d));
        }
    free(got);
    free(ref);
    free(h);
    ufree(w);

    /* narrowing: structured patterns, specials, random bit patterns */
    check_narrow_structured(MXP_DTYPE_BF16);
    check_narrow_structured(MXP_DTYPE_F16);
    static const uint32_t sp[] = {
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000,
        0x7f800000, 0xff800000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fc00000, 0xffc00000,
        0x7fffffff, 0xffffffff, 0x7fa00000, 0x7f800100, 0x7f802000, 0x7f7fffff, 0xff7fffff,
        0x7f7f7fff, 0x7f7f8000, 0x7f7f8001, 0x477fefff, 0x477ff000, 0x477ff001, 0x477fffff,
        0x47800000, 0xc77ff000, 0x33000000, 0x33000001, 0x32ffffff, 0x33800000, 0x387fe000,
        0x387ff000, 0x387fffff, 0x38800000, 0x33c00000, 0x34000000};
    const size_t nsp = sizeof sp / sizeof sp[0];
    const size_t nr = 1 << 20;
    uint32_t *in = test_xmalloc((nr + nsp) * 4);
    memcpy(in, sp, sizeof sp);
    for (size_t i = 0; i < nr; i++) in[nsp + i] = mxp_rng_u32(&rng);
    for (size_t k = 0; k < N_LENS; k++) { /* every tail length */
        check_narrow(MXP_DTYPE_BF16, in, kLens[k] < nsp ? kLens[k] : nsp);
        check_narrow(MXP_DTYPE_F16, in, kLens[k] < nsp ? kLens[k] : nsp);
    }
    check_narrow(MXP_DTYPE_BF16, in, nr + nsp);
    check_narrow(MXP_DTYPE_F16, in, nr + nsp);

    /* same type copies; n = 0 writes nothing */
    float *a = ualloc(33), *b = ualloc(33);
    fill(a, 33, 1.0f, true);
    A->convert(MXP_DTYPE_F32, b, MXP_DTYPE_F32, a, 33);
    CHECK(memcmp(a, b, 33 * 4) == 0);
    b[0] = 7.0f;
    A->convert(MXP_DTYPE_BF16, b, MXP_DTYPE_F32, a, 0);
    CHECK(b[0] == 7.0f);
    ufree(a);
    ufree(b);

    /* stochastic rounding against mxp_convert_sr, element-wise counters */
    static const uint64_t counters[] = {0, 1, 2, 3, 5, 1000, 0x3fffffffcull,
                                        ((uint64_t)0xffffffffu << 2) - 7,
                                        UINT64_MAX - 100, UINT64_MAX - 2};
    float *src = ualloc(4099);
    for (size_t i = 0; i < 4099; i++) src[i] = from_bits(in[i]);
    for (size_t i = 0; i < nsp; i++) src[i * 97 % 4099] = from_bits(sp[i]);
    for (size_t i = 0; i < 64; i++) /* FP16 subnormal range */
        src[4000 + i] = ldexpf(1.0f + (float)i / 64.0f, -14 - (int)(i % 26));
    uint16_t *sg = test_xmalloc(4099 * 2), *sref = test_xmalloc(4099 * 2);
    for (int t = MXP_DTYPE_BF16; t <= MXP_DTYPE_F16; t++)
        for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++)
            for (size_t k = 0; k < N_LENS; k++) {
                size_t n = kLens[k];
                uint64_t seed = 0x9e3779b97f4a7c15ull * (c + 1);
                A->convert_sr((mxp_dtype)t, sg, src, n, seed, counters[c]);
                mxp_convert_sr((mxp_dtype)t, sref, src, n, seed, counters[c]);
                CHECK_MSG(memcmp(sg, sref, n * 2) == 0, "SR %s n=%zu counter=%llu differs",
                          mxp_dtype_name((mxp_dtype)t), n, (unsigned long long)counters[c]);
            }
    /* SR to other targets keeps the reference behaviour (RNE) */
    uint8_t f8g[129], f8r[129];
    A->convert_sr(MXP_DTYPE_F8_E4M3, f8g, src, 129, 1, 2);
    mxp_convert_sr(MXP_DTYPE_F8_E4M3, f8r, src, 129, 1, 2);
    CHECK(memcmp(f8g, f8r, 129) == 0);
    /* the vector Philox itself */
    uint32_t r[200];
    for (size_t c = 0; c < sizeof counters / sizeof counters[0]; c++) {
        mxp_avx512_rng_fill(r, 200, 42, counters[c]);
        size_t bad = 0;
        for (size_t j = 0; j < 200; j++) bad += r[j] != mxp_rng_at(42, counters[c] + j);
        CHECK_MSG(bad == 0, "rng_fill counter %llu: %zu words differ",
                  (unsigned long long)counters[c], bad);
    }
    ufree(src);
    free(sg);
    free(sref);
    free(in);
}

/* ---- vector math and element-wise kernels ------------------------------------ */

static void test_vmath(void) {
    const size_t n = 1 << 20;
    float *x = ualloc(n), *y = ualloc(n);
    for (size_t i = 0; i < n; i++) x[i] = from_bits(mxp_rng_u32(&rng));
    for (size_t i = 0; i < n / 2; i++) x[i] = 6.0f * mxp_rng_normal(&rng); /* the busy range */
    for (int f = 0; f < 2; f++) {
        if (f == 0) mxp_avx512_erf(y, x, n);
        else mxp_avx512_exp(y, x, n);
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            double d = ulp_dist(y[i], f == 0 ? erff(x[i]) : expf(x[i]));
            if (d > worst) worst = d, at = i;
        }
        CHECK_MSG(worst <= 1, "%s: %g ulp from glibc at %a", f ? "exp" : "erf", worst, x[at]);
    }
    static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, 88.7f, 89.0f, -87.0f, -103.0f,
                               -104.0f, 1e-45f, 4.0f, -4.0f, 3.9f, 0.921875f, -0.921875f};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        mxp_avx512_erf(y, &sp[i], 1);
        CHECK_MSG(ulp_dist(y[0], erff(sp[i])) <= 1, "erf(%a) = %a", sp[i], y[0]);
        mxp_avx512_exp(y, &sp[i], 1);
        CHECK_MSG(ulp_dist(y[0], expf(sp[i])) <= 1, "exp(%a) = %a", sp[i], y[0]);
    }
    float nan = NAN;
    mxp_avx512_erf(y, &nan, 1);
    CHECK(isnan(y[0]));
    mxp_avx512_exp(y, &nan, 1);
    CHECK(isnan(y[0]));
    ufree(x);
    ufree(y);
}

/* Run kernel pair on fresh copies; `inplace` makes out alias in1. */
typedef enum { K_RELU_F, K_RELU_B, K_GELU_F, K_GELU_B, K_TANH_F, K_TANH_B, K_AXPY, K_SCALE, K_COUNT } ew_kind;

static void run_ew(const mxp_kernels *k, ew_kind kind, float *out, const float *a, const float *b,
                   size_t n) {
    switch (kind) {
    case K_RELU_F: k->relu_fwd(out, a, n); break;
    case K_RELU_B: k->relu_bwd(out, a, b, n); break;
    case K_GELU_F: k->gelu_fwd(out, a, n); break;
    case K_GELU_B: k->gelu_bwd(out, a, b, n); break;
    case K_TANH_F: k->tanh_fwd(out, a, n); break;
    case K_TANH_B: k->tanh_bwd(out, a, b, n); break;
    case K_AXPY: memcpy(out, b, n * 4); k->axpy(out, -0.75f, a, n); break;
    case K_SCALE: memcpy(out, a, n * 4); k->scale(out, 0.3f, n); break;
    default: break;
    }
}

static void test_eltwise(void) {
    static const char *names[] = {"relu_fwd", "relu_bwd", "gelu_fwd", "gelu_bwd",
                                  "tanh_fwd", "tanh_bwd", "axpy", "scale"};
    for (size_t li = 0; li <= N_LENS; li++) {
        size_t n = li < N_LENS ? kLens[li] : BIG;
        float *a = ualloc(n), *b = ualloc(n), *ref = ualloc(n), *got = ualloc(n);
        float *al = ualloc(n);
        for (int kind = 0; kind < K_COUNT; kind++) {
            fill(a, n, 2.0f, true);
            fill(b, n, 2.0f, true);
            if (kind == K_TANH_B) G->tanh_fwd(b, b, n); /* tanh_bwd takes y = tanh(x) */
            run_ew(G, (ew_kind)kind, ref, a, b, n);
            run_ew(A, (ew_kind)kind, got, a, b, n);
            /* in place: y aliases x, or dx aliases dy (scale is in place
             * by contract; axpy's x and y are different buffers) */
            memcpy(al, a, n * 4);
            if (kind < K_AXPY) run_ew(A, (ew_kind)kind, al, al, b, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) {
                bool ok;
                float ai = a[i];
                if (kind == K_GELU_F)
                    ok = test_close(got[i], ref[i], fabs(ai) * 0x1p-23 + 4 * ulp_of(ref[i]), 0);
                else if (kind == K_GELU_B)
                    ok = test_close(got[i], ref[i], fabs(ai) * 0x1p-21 + 4 * ulp_of(ref[i]), 0);
                else if (kind == K_TANH_F)
                    ok = ulp_dist(got[i], ref[i]) <= 2;
                else
                    ok = same(got[i], ref[i]);
                if (ok && kind < K_AXPY) ok = same(al[i], got[i]);
                if (!ok && bad++ == 0)
                    test_fail(__FILE__, __LINE__, "%s n=%zu [%zu]: in %a %a: %a (in place %a), generic %a",
                              names[kind], n, i, a[i], b[i], got[i], al[i], ref[i]);
            }
            CHECK_MSG(bad == 0, "%s n=%zu: %zu mismatches", names[kind], n, bad);
        }
        ufree(a);
        ufree(b);
        ufree(ref);
        ufree(got);
        ufree(al);
    }
}

/* ---- row-wise kernels and losses ------------------------------------------- */

/* A "+=" column sum onto the non-zero accumulator d0: generic adds row by
 * row into it, AVX-512 sums the batch from zero and adds once, so the two
 * differ by summation order: |diff| <= 2 (B + 2) u (|d0| + sum_b |t_b|),
 * t_b = dy (x NULL) or dy * xhat. */
static void check_accum(const char *what, const float *ref, const float *got, const float *d0,
                        const float *dy, const float *x, const float *mu, const float *rs,
                        int64_t B, int64_t C) {
    size_t bad = 0;
    for (int64_t c = 0; c < C; c++) {
        double mag = fabs(d0[c]);
        for (int64_t b = 0; b < B; b++) {
            double t = dy[b * C + c];
            if (x) t *= ((double)x[b * C + c] - mu[b]) * rs[b];
            mag += fabs(t);
        }
        if (!test_close(got[c], ref[c], 2.0 * (double)(B + 2) * U32 * mag, 0) && bad++ == 0)
            test_fail(__FILE__, __LINE__, "%s B=%lld C=%lld [%lld]: %a vs %a", what, (long long)B,
                      (long long)C, (long long)c, got[c], ref[c]);
    }
    CHECK_MSG(bad == 0, "%s B=%lld C=%lld: %zu mismatches", what, (long long)B, (long long)C, bad);
}

static const int64_t kRowsB[] = {1, 3, 17};

static void test_rows(void) {
    for (size_t bi = 0; bi < sizeof kRowsB / sizeof kRowsB[0]; bi++)
        for (size_t ci = 1; ci < N_LENS; ci++) {
            const int64_t B = kRowsB[bi], C = (int64_t)kLens[ci];
            const size_t n = (size_t)B * (size_t)C;
            const double cu = 2.0 * (double)(C + 2) * U32; /* reordered FP32 row sum, relative */
            float *x = ualloc(n), *dy = ualloc(n), *r1 = ualloc(n), *g1 = ualloc(n);
            float *gam = ualloc((size_t)C), *bet = ualloc((size_t)C);
            float *rb = ualloc((size_t)C), *gb = ualloc((size_t)C), *rb2 = ualloc((size_t)C),
                  *gb2 = ualloc((size_t)C);
            float *mu = ualloc((size_t)B), *rs = ualloc((size_t)B), *mu2 = ualloc((size_t)B),
                  *rs2 = ualloc((size_t)B);
            float off = 3.0f * mxp_rng_normal(&rng);
            for (size_t i = 0; i < n; i++) x[i] = off + mxp_rng_normal(&rng);
            fill(dy, n, 1.0f, false);
            fill(gam, (size_t)C, 1.0f, false);
            fill(bet, (size_t)C, 1.0f, false);

            /* add_bias, bias_grad: exact */
            memcpy(r1, x, n * 4);
            memcpy(g1, x, n * 4);
            G->add_bias(r1, bet, B, C);
            A->add_bias(g1, bet, B, C);
            cmp_exact("add_bias", n, g1, r1);
            A->add_bias(g1, NULL, B, C);
            cmp_exact("add_bias(NULL)", n, g1, r1);
            memset(rb, 0, (size_t)C * 4);
            memset(gb, 0, (size_t)C * 4);
            G->bias_grad(rb, dy, B, C);
            A->bias_grad(gb, dy, B, C);
            cmp_exact("bias_grad", (size_t)C, gb, rb);
            memcpy(rb, gam, (size_t)C * 4); /* onto a non-zero accumulator */
            memcpy(gb, gam, (size_t)C * 4);
            G->bias_grad(rb, dy, B, C);
            A->bias_grad(gb, dy, B, C);
            check_accum("bias_grad +=", rb, gb, gam, dy, NULL, NULL, NULL, B, C);

            /* layernorm forward, with and without gamma/beta */
            for (int aff = 0; aff < 2; aff++) {
                const float *ga = aff ? gam : NULL, *be = aff ? bet : NULL;
                G->layernorm_fwd(r1, mu, rs, x, ga, be, B, C, 1e-5f);
                A->layernorm_fwd(g1, mu2, rs2, x, ga, be, B, C, 1e-5f);
                size_t bad = 0;
                for (int64_t b = 0; b < B; b++) {
                    const float *xr = x + b * C;
                    double sabs = 0, maxg = 1, xhmax = 0;
                    for (int64_t c = 0; c < C; c++) {
                        sabs += fabs(xr[c]);
                        if (ga && fabs(ga[c]) > maxg) maxg = fabs(ga[c]);
                        double xh = fabs(((double)xr[c] - mu[b]) * rs[b]);
                        if (xh > xhmax) xhmax = xh;
                    }
                    /* mean: reordered sum; rstd: sum of squares (non-negative
                     * terms, and first-order insensitive to the mean). */
                    bad += !test_close(mu2[b], mu[b], cu * sabs / (double)C, 4 * U32);
                    bad += !test_close(rs2[b], rs[b], 0, cu + 8 * U32);
                    /* dy = dmean rstd gamma + xhat drstd gamma (+ roundings) */
                    double tol_y = (cu * sabs / (double)C * rs[b] + (cu + 8 * U32) * (xhmax + 1)) * maxg;
                    for (int64_t c = 0; c < C; c++)
                        if (!test_close(g1[b * C + c], r1[b * C + c], tol_y, 8 * U32) && bad++ == 0)
                            test_fail(__FILE__, __LINE__, "layernorm_fwd B=%lld C=%lld [%lld,%lld]: %a vs %a",
                                      (long long)B, (long long)C, (long long)b, (long long)c,
                                      g1[b * C + c], r1[b * C + c]);
                }
                CHECK_MSG(bad == 0, "layernorm_fwd B=%lld C=%lld aff=%d: %zu mismatches", (long long)B,
                          (long long)C, aff, bad);
                /* in place */
                memcpy(g1, x, n * 4);
                A->layernorm_fwd(g1, mu2, rs2, g1, ga, be, B, C, 1e-5f);
                float *g2 = ualloc(n);
                A->layernorm_fwd(g2, NULL, NULL, x, ga, be, B, C, 1e-5f);
                cmp_exact("layernorm_fwd in place", n, g1, g2);
                ufree(g2);

                /* backward: dgamma/dbeta exact from zero, one rounding onto
                 * a non-zero accumulator; dx within the row-sum bound */
                memcpy(rb, gam, (size_t)C * 4);
                memcpy(gb, gam, (size_t)C * 4);
                memcpy(rb2, bet, (size_t)C * 4);
                memcpy(gb2, bet, (size_t)C * 4);
                G->layernorm_bwd(r1, rb, rb2, dy, x, mu, rs, ga, B, C);
                A->layernorm_bwd(g1, gb, gb2, dy, x, mu, rs, ga, B, C);
                check_accum("layernorm_bwd dgamma +=", rb, gb, gam, dy, x, mu, rs, B, C);
                check_accum("layernorm_bwd dbeta +=", rb2, gb2, bet, dy, NULL, NULL, NULL, B, C);
                memset(rb, 0, (size_t)C * 4);
                memset(gb, 0, (size_t)C * 4);
                memset(rb2, 0, (size_t)C * 4);
                memset(gb2, 0, (size_t)C * 4);
                G->layernorm_bwd(r1, rb, rb2, dy, x, mu, rs, ga, B, C);
                A->layernorm_bwd(g1, gb, gb2, dy, x, mu, rs, ga, B, C);
                cmp_exact("layernorm_bwd dgamma", (size_t)C, gb, rb);
                cmp_exact("layernorm_bwd dbeta", (size_t)C, gb2, rb2);
                bad = 0;
                for (int64_t b = 0; b < B; b++) {
                    double sg = 0, sgx = 0, xhmax = 0, gcmax = 0;
                    for (int64_t c = 0; c < C; c++) {
                        double xh = ((double)x[b * C + c] - mu[b]) * rs[b];
                        double gc = dy[b * C + c] * (ga ? ga[c] : 1.0f);
                        sg += fabs(gc);
                        sgx += fabs(gc * xh);
                        if (fabs(xh) > xhmax) xhmax = fabs(xh);
                        if (fabs(gc) > gcmax) gcmax = fabs(gc);
                    }
                    /* dx = rstd (gc - mean(gc) - xhat mean(gc xhat)): the two
                     * reordered means, plus roundings of the sum's terms */
                    double tol = 2.0 * rs[b] * cu * (sg + (xhmax + 1) * sgx) / (double)C +
                                 4 * U32 * rs[b] * (gcmax + (sg + xhmax * sgx) / (double)C);
                    for (int64_t c = 0; c < C; c++)
                        if (!test_close(g1[b * C + c], r1[b * C + c], tol, 16 * U32) && bad++ == 0)
                            test_fail(__FILE__, __LINE__, "layernorm_bwd dx B=%lld C=%lld [%lld]: %a vs %a",
                                      (long long)B, (long long)C, (long long)c, g1[b * C + c],
                                      r1[b * C + c]);
                }
                CHECK_MSG(bad == 0, "layernorm_bwd B=%lld C=%lld: %zu mismatches", (long long)B,
                          (long long)C, bad);
                memcpy(g1, dy, n * 4); /* dx aliases dy */
                A->layernorm_bwd(g1, NULL, NULL, g1, x, mu, rs, ga, B, C);
                float *g3 = ualloc(n);
                A->layernorm_bwd(g3, NULL, NULL, dy, x, mu, rs, ga, B, C);
                cmp_exact("layernorm_bwd in place", n, g1, g3);
                ufree(g3);
            }

            /* softmax: y = e / s, e within 1+1 ulp, s a reordered sum */
            fill(r1, n, 3.0f, false);
            if (B > 1) { /* specials in rows 1 and 2 */
                r1[C + C / 2] = mxp_rng_below(&rng, 2) ? NAN : INFINITY;
                r1[2 * C - 1] = -INFINITY;
            }
            memcpy(x, r1, n * 4);
            G->softmax_fwd(r1, x, B, C);
            A->softmax_fwd(g1, x, B, C);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                if (!test_close(g1[i], r1[i], 1e-38, 2 * cu + 8 * U32) && bad++ == 0)
                    test_fail(__FILE__, __LINE__, "softmax B=%lld C=%lld [%zu]: %a vs %a", (long long)B,
                              (long long)C, i, g1[i], r1[i]);
            CHECK_MSG(bad == 0, "softmax B=%lld C=%lld: %zu mismatches", (long long)B, (long long)C, bad);
            memcpy(g1, x, n * 4);
            A->softmax_fwd(g1, g1, B, C);
            float *g2 = ualloc(n);
            A->softmax_fwd(g2, x, B, C);
            cmp_exact("softmax in place", n, g1, g2);

            /* mse: dpred exact, loss a reordered double sum of squares */
            fill(x, n, 1.0f, false);
            fill(dy, n, 1.0f, false);
            double lr = G->mse(r1, x, dy, B, C, 1024.0f);
            double lg = A->mse(g1, x, dy, B, C, 1024.0f);
            cmp_exact("mse dpred", n, g1, r1);
            CHECK_CLOSE(lg, lr, 0, 2.0 * (double)n * UD);
            CHECK(A->mse(NULL, x, dy, B, C, 1.0f) == lg);

            /* softmax cross-entropy, labels incl. one out of range */
            int32_t *lab = test_xmalloc((size_t)B * 4);
            for (int64_t b = 0; b < B; b++) lab[b] = (int32_t)mxp_rng_below(&rng, (uint32_t)C);
            if (B > 3) lab[2] = (int32_t)C; /* NaN loss for that row, no one-hot */
            fill(x, n, 3.0f, false);
            lr = G->softmax_xent(r1, x, lab, B, C, 256.0f);
            lg = A->softmax_xent(g1, x, lab, B, C, 256.0f);
            /* per row |d lse| <= ds/s + 2 ulp(lse) <= cu + 2u + 2 |lse| 2^-23,
             * |lse| <= max|x| + log C with max|x| < 20 here */
            CHECK_CLOSE(lg, lr, cu + 2 * U32 + 2 * (20.0 + log((double)C)) * 0x1p-23, 0);
            const double kk = 256.0 / (double)B;
            bad = 0;
            for (size_t i = 0; i < n; i++)
                if (!test_close(g1[i], r1[i], kk * (2 * cu + 8 * U32), 8 * U32) && bad++ == 0)
                    test_fail(__FILE__, __LINE__, "softmax_xent B=%lld C=%lld [%zu]: %a vs %a",
                              (long long)B, (long long)C, i, g1[i], r1[i]);
            CHECK_MSG(bad == 0, "softmax_xent B=%lld C=%lld: %zu mismatches", (long long)B, (long long)C,
                      bad);
            memcpy(g2, x, n * 4);
            double la = A->softmax_xent(g2, g2, lab, B, C, 256.0f);
            CHECK(same((float)la, (float)lg));
            cmp_exact("softmax_xent in place", n, g2, g1);
            CHECK(same((float)A->softmax_xent(NULL, x, lab, B, C, 1.0f), (float)lg));
            free(lab);
            ufree(g2);
            ufree(x);
            ufree(dy);
            ufree(r1);
            ufree(g1);
            ufree(gam);
            ufree(bet);
            ufree(rb);
            ufree(gb);
            ufree(rb2);
            ufree(gb2);
            ufree(mu);
            ufree(rs);
            ufree(mu2);
            ufree(rs2);
        }
    /* empty shapes */
    CHECK(A->mse(NULL, NULL, NULL, 0, 5, 1.0f) == 0.0);
    CHECK(A->softmax_xent(NULL, NULL, NULL, 3, 0, 1.0f) == 0.0);
}

/* ---- reductions and the fused gradient pass ------------------------------- */

static void test_reduce(void) {
    for (size_t li = 0; li <= N_LENS; li++) {
        size_t n = li < N_LENS ? kLens[li] : BIG;
        float *x = ualloc(n), *gr = ualloc(n), *ga = ualloc(n);
        fill(x, n, 3.0f, false);
        double sabs = 0, ssq = 0;
        for (size_t i = 0; i < n; i++) sabs += fabs(x[i]), ssq += (double)x[i] * x[i];
        CHECK_CLOSE(A->sum(x, n), G->sum(x, n), 2.0 * (double)n * UD * sabs, 0);
        CHECK_CLOSE(A->sumsq(x, n), G->sumsq(x, n), 0, 2.0 * (double)n * UD);
        /* absmax: exact, including the non-finite count */
        fill(x, n, 3.0f, true);
        int64_t nfg = -1, nfa = -2;
        float mg = G->absmax(x, n, &nfg), ma = A->absmax(x, n, &nfa);
        CHECK_MSG(same(ma, mg) && nfa == nfg, "absmax n=%zu: %a/%lld vs %a/%lld", n, ma,
                  (long long)nfa, mg, (long long)nfg);
        CHECK(same(A->absmax(x, n, NULL), mg));
        double s1 = A->sum(x, n), s0 = G->sum(x, n);
        CHECK(isnan(s1) == isnan(s0) && (isnan(s0) || isinf(s0) == isinf(s1)));

        /* unscale_stats: values, counts and absmax exact; sumsq reordered */
        static const float invs[] = {1.0f / 65536.0f, 1.0f, 4.0f, 1e-30f};
        for (size_t k = 0; k < sizeof invs / sizeof invs[0]; k++)
            for (int nat = 0; nat < 2; nat++) {
                fill(x, n, 1000.0f, true);
                for (size_t i = 0; i < n; i += 5) x[i] = (float)mxp_rng_below(&rng, 3) * 1e-39f;
                for (size_t i = 3; i < n; i += 7) /* -0 (read as +0) and negative subnormals */
                    x[i] = (float)mxp_rng_below(&rng, 3) * -1e-39f;
                memcpy(gr, x, n * 4);
                memcpy(ga, x, n * 4);
                mxp_grad_stats sr, sa;
                float at = nat ? 2048.0f : INFINITY;
                G->unscale_stats(gr, n, invs[k], at, &sr);
                A->unscale_stats(ga, n, invs[k], at, &sa);
                cmp_exact("unscale_stats values", n, ga, gr);
                CHECK_MSG(sa.n == sr.n && sa.nonfinite == sr.nonfinite && sa.zeros == sr.zeros &&
                              sa.near_overflow == sr.near_overflow && same(sa.absmax, sr.absmax),
                          "unscale_stats n=%zu inv=%g: n %lld/%lld nonfinite %lld/%lld zeros "
                          "%lld/%lld near %lld/%lld absmax %a/%a",
                          n, invs[k], (long long)sa.n, (long long)sr.n, (long long)sa.nonfinite,
                          (long long)sr.nonfinite, (long long)sa.zeros, (long long)sr.zeros,
                          (long long)sa.near_overflow, (long long)sr.near_overflow, sa.absmax,
                          sr.absmax);
                CHECK_CLOSE(sa.sumsq, sr.sumsq, 0, 2.0 * (double)n * UD);
            }
        ufree(x);
        ufree(gr);
        ufree(ga);
    }
}

/* Large reductions run in MXP_AVX512_RED_PARTS fixed parts on the thread
 * pool (loops.h): the whole-buffer result must equal the parts' results
 * (each part below the threading threshold) combined in order, which is
 * what makes it independent of the thread count. */
static void test_reduce_parts(void) {
    const size_t sizes[] = {MXP_AVX512_PAR_MIN, MXP_AVX512_PAR_MIN + 5, 3 * MXP_AVX512_PAR_MIN + 77};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        float *x = ualloc(n), *y = ualloc(n), *g1 = ualloc(n), *g2 = ualloc(n);
        fill(x, n, 100.0f, false); /* finite: sums are compared bit for bit */
        for (size_t i = 0; i < n; i += 3) x[i] *= 1e-37f;
        memcpy(y, x, n * 4);
        for (size_t i = 0; i < n; i += 997) y[i] = i % 2 ? INFINITY : NAN;
        memcpy(g1, y, n * 4);
        memcpy(g2, y, n * 4);
        double sum = 0, ssq = 0;
        float am = 0;
        int64_t nf = 0;
        mxp_grad_stats whole, acc = {0};
        A->unscale_stats(g1, n, 0.25f, 64.0f, &whole);
        const size_t blocks = (n + MXP_AVX512_PAR_ALIGN - 1) / MXP_AVX512_PAR_ALIGN;
        for (size_t p = 0; p < MXP_AVX512_RED_PARTS; p++) {
            size_t lo = blocks * p / MXP_AVX512_RED_PARTS * MXP_AVX512_PAR_ALIGN;
            size_t hi = blocks * (p + 1) / MXP_AVX512_RED_PARTS * MXP_AVX512_PAR_ALIGN;
            if (hi > n) hi = n;
            if (lo > n) lo = n;
            CHECK(hi - lo < MXP_AVX512_PAR_MIN);
            sum += A->sum(x + lo, hi - lo);
            ssq += A->sumsq(x + lo, hi - lo);
            int64_t pnf = 0;
            float pm = A->absmax(y + lo, hi - lo, &pnf);
            if (pm > am) am = pm;
            nf += pnf;
            mxp_grad_stats ps;
            A->unscale_stats(g2 + lo, hi - lo, 0.25f, 64.0f, &ps);
            acc.n += ps.n;
            acc.nonfinite += ps.nonfinite;
            acc.zeros += ps.zeros;
            acc.near_overflow += ps.near_overflow;
            acc.sumsq += ps.sumsq;
            if (ps.absmax > acc.absmax) acc.absmax = ps.absmax;
        }
        int64_t wnf = -1;
        float wm = A->absmax(y, n, &wnf);
        CHECK_MSG(sum == A->sum(x, n), "sum n=%zu: parts %.17g, whole %.17g", n, sum, A->sum(x, n));
        CHECK_MSG(ssq == A->sumsq(x, n), "sumsq n=%zu: parts %.17g, whole %.17g", n, ssq,
                  A->sumsq(x, n));
        CHECK(same(wm, am) && wnf == nf && nf > 0);
        CHECK(memcmp(g1, g2, n * 4) == 0);
        CHECK_MSG(whole.n == acc.n && whole.nonfinite == acc.nonfinite && whole.zeros == acc.zeros &&
                      whole.near_overflow == acc.near_overflow && whole.sumsq == acc.sumsq &&
                      same(whole.absmax, acc.absmax),
                  "unscale_stats n=%zu: whole != its parts combined in order", n);
        ufree(x);
        ufree(y);
        ufree(g1);
        ufree(g2);
    }
}

/* ---- optimizers -------------------------------------------------------------- */

typedef struct opt_case {
    bool master;     /* master + recast, else pure */
    mxp_dtype work;  /* work dtype (F32 with master: no separate work) */
    bool sr;
} opt_case;

/* One optimizer step with table k on copies of the state; returns buffers. */
static void opt_run(const mxp_kernels *k, bool adam, const opt_case *oc, size_t n, const float *w0,
                    const float *g, const float *m0, const float *v0, int64_t t, float *w_out,
                    void *work_out, float *m_out, float *v_out, bool use_buf) {
    memcpy(w_out, w0, n * 4);
    memcpy(m_out, m0, n * 4);
    memcpy(v_out, v0, n * 4);
    mxp_convert(oc->work, work_out, MXP_DTYPE_F32, w0, n);
    mxp_weights w = {0};
    w.master = oc->master ? w_out : NULL;
    w.work = oc->master && oc->work == MXP_DTYPE_F32 ? NULL : work_out;
    w.work_type = oc->work;
    w.sr = oc->sr;
    w.seed = 77;
    w.counter = 13;
    if (adam) {
        mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, t == 2 ? 0.01f : 0.0f};
        k->adamw(&w, g, m_out, v_out, n, &h, t);
    } else {
        mxp_sgd_hparams h = {0.05f, t == 1 ? 0.0f : 0.9f, t == 3 ? 1e-4f : 0.0f, t == 3};
        k->sgd(&w, g, use_buf ? m_out : NULL, n, &h, t);
    }
}

static void test_optim(void) {
    static const opt_case cases[] = {
        {true, MXP_DTYPE_F32, false},  {true, MXP_DTYPE_BF16, false}, {true, MXP_DTYPE_F16, false},
        {true, MXP_DTYPE_F8_E4M3, false}, {false, MXP_DTYPE_BF16, true}, {false, MXP_DTYPE_F16, true},
        {false, MXP_DTYPE_BF16, false}, {false, MXP_DTYPE_F16, false}, {false, MXP_DTYPE_F32, false}};
    for (size_t li = 0; li <= N_LENS; li++) {
        size_t n = li < N_LENS ? kLens[li] : 5000;
        float *w0 = ualloc(n), *g = ualloc(n), *m0 = ualloc(n), *v0 = ualloc(n);
        float *wr = ualloc(n), *wa = ualloc(n), *mr = ualloc(n), *ma = ualloc(n), *vr = ualloc(n),
              *va = ualloc(n);
        void *kr = test_xmalloc(n * 4), *ka = test_xmalloc(n * 4);
        fill(w0, n, 0.1f, false);
        fill(g, n, 0.01f, false);
        fill(m0, n, 0.001f, false);
        for (size_t i = 0; i < n; i++) v0[i] = 1e-6f * mxp_rng_uniform(&rng);
        for (size_t i = 0; i < n; i += 7) g[i] = i % 2 ? 0.0f : 1e-30f;
        for (size_t i = 5; i < n; i += 11) { /* weights that stay FP32 subnormals (the */
            w0[i] = (i % 3 ? 1.0f : -1.0f) * 1e-40f * (float)(1 + i % 5); /* integer path */
            g[i] = m0[i] = 0.0f;                                          /* of a recast) */
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int adam = 0; adam < 2; adam++)
                for (int64_t t = 1; t <= 3; t++) {
                    const opt_case *oc = &cases[c];
                    bool use_buf = t != 2 || adam;
                    opt_run(G, adam, oc, n, w0, g, m0, v0, t, wr, kr, mr, vr, use_buf);
                    opt_run(A, adam, oc, n, w0, g, m0, v0, t, wa, ka, ma, va, use_buf);
                    size_t esz = mxp_dtype_info(oc->work)->size;
                    size_t bad = cmp_exact("optim master", n, wa, wr) + cmp_exact("optim m", n, ma, mr) +
                                 cmp_exact("optim v", n, va, vr);
                    bad += memcmp(ka, kr, n * esz) != 0;
                    CHECK_MSG(bad == 0, "%s n=%zu t=%lld master=%d work=%s sr=%d: not bit-identical",
                              adam ? "adamw" : "sgd", n, (long long)t, oc->master,
                              mxp_dtype_name(oc->work), oc->sr);
                }
        ufree(w0);
        ufree(g);
        ufree(m0);
        ufree(v0);
        ufree(wr);
        ufree(wa);
        ufree(mr);
        ufree(ma);
        ufree(vr);
        ufree(va);
        free(kr);
        free(ka);
    }
    mxp_weights none = {0};
    mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    A->adamw(&none, NULL, NULL, NULL, 10, &h, 1); /* no weights: no-op, no access */
}

/* ---- flush-to-zero -------------------------------------------------------- */

static void test_ftz(void) {
    CHECK(!mxp_fpenv_get_ftz());
    /* a baseline with FTZ off */
    const size_t n = 65536;
    uint16_t *h = test_xmalloc(n * 2), *h2 = test_xmalloc(n * 2), *h3 = test_xmalloc(n * 2);
    for (uint32_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    float *w_ref = ualloc(n), *w = ualloc(n), *w2 = ualloc(n);
    A->convert(MXP_DTYPE_F32, w_ref, MXP_DTYPE_F16, h, n);
    float *gs = ualloc(4099), *gs_ref = ualloc(4099), *gs2 = ualloc(4099);
    /* subnormal inputs (DAZ would read them as 0) and normal inputs whose
     * unscaled value is subnormal (FTZ would flush it) */
    for (size_t i = 0; i < 4099; i++)
        gs[i] = i % 3 == 0 ? 1e-39f * (float)(i % 7) : (i % 3 == 1 ? 2e-38f : 2.0f);
    memcpy(gs_ref, gs, 4099 * 4);
    mxp_grad_stats s_ref, s;
    A->unscale_stats(gs_ref, 4099, 0.5f, INFINITY, &s_ref);
    CHECK(s_ref.zeros == 4099 / 21 + 1); /* only the exact zeros (i % 21 == 0) */

    CHECK(mxp_fpenv_set_ftz(true));
    CHECK(mxp_fpenv_get_ftz());
    volatile float tiny = 1e-30f, f = 1e-10f;
    CHECK(tiny * f == 0.0f); /* FP32 compute flushes */
    /* FP16 widening keeps every subnormal: AVX-512 and the scalar reference */
    A->convert(MXP_DTYPE_F32, w, MXP_DTYPE_F16, h, n);
    mxp_convert(MXP_DTYPE_F32, w2, MXP_DTYPE_F16, h, n);
    CHECK(memcmp(w, w_ref, n * 4) == 0);
    CHECK(memcmp(w2, w_ref, n * 4) == 0);
    /* FP16 narrowing of every FP16 value (incl. subnormals) round-trips */
    A->convert(MXP_DTYPE_F16, h2, MXP_DTYPE_F32, w_ref, n);
    mxp_convert(MXP_DTYPE_F16, h3, MXP_DTYPE_F32, w_ref, n);
    size_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        bool is_nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
        bad += !is_nan && (h2[i] != i || h3[i] != i);
    }
    CHECK_MSG(bad == 0, "FP16 round trip under FTZ: %zu values changed", bad);
    /* SR narrowing of FP16 subnormals and BF16 of FP32 subnormals */
    A->convert_sr(MXP_DTYPE_F16, h2, w_ref, n, 5, 9);
    mxp_convert_sr(MXP_DTYPE_F16, h3, w_ref, n, 5, 9);
    CHECK(memcmp(h2, h3, n * 2) == 0);
    const float sub[3] = {from_bits(0x00000001), from_bits(0x807fffff), from_bits(0x00400000)};
    A->convert(MXP_DTYPE_BF16, h2, MXP_DTYPE_F32, sub, 3);
    for (int i = 0; i < 3; i++) CHECK(h2[i] == mxp_f32_to_bf16(sub[i]).bits);
    CHECK(h2[2] == 0x0040);
    /* the fused unscale pass sees and produces subnormals as with FTZ off */
    memcpy(gs2, gs, 4099 * 4);
    A->unscale_stats(gs2, 4099, 0.5f, INFINITY, &s);
    CHECK(memcmp(gs2, gs_ref, 4099 * 4) == 0);
    CHECK(s.zeros == s_ref.zeros && s.nonfinite == s_ref.nonfinite && s.sumsq == s_ref.sumsq);
    CHECK(mxp_fpenv_get_ftz()); /* kernels restore the caller's MXCSR */

    CHECK(mxp_fpenv_set_ftz(false));
    CHECK(!mxp_fpenv_get_ftz());
    CHECK(tiny * f != 0.0f);
    free(h);
    free(h2);
    free(h3);
    ufree(w_ref);
    ufree(w);
    ufree(w2);
    ufree(gs);
    ufree(gs_ref);
    ufree(gs2);
}

int main(void) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("test_loops_isa: skipped (this CPU cannot run the AVX-512 table)\n");
        return 0;
    }
    G = mxp_kernels_generic();
    A = mxp_kernels_avx512();
    mxp_rng_init(&rng, 20240611);
    test_convert();
    test_vmath();
    test_eltwise();
    test_rows();
    test_reduce();
    test_reduce_parts();
    test_optim();
    test_ftz();
    return test_finish("test_loops_isa");
}
