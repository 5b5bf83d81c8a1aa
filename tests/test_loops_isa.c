/* tests/test_loops_isa.c: the AVX-512 hot loops (every slot of the AVX-512
 * table except gemm; here the conversions, vector math and element-wise
 * kernels, and the flush-to-zero switch; the rest in test_loops_isa_rows.c)
 * against the generic reference kernels and num's scalar reference
 * conversions.
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
 * Shared helpers: loops_cases.h.
 */
#include "loops_cases.h"

#include <stdlib.h>
#include <string.h>

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
    if (!loops_cases_init("test_loops_isa", 20240611)) return 0;
    test_convert();
    test_vmath();
    test_eltwise();
    test_ftz();
    return test_finish("test_loops_isa");
}
