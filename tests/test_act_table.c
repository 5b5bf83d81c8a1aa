/* tests/test_act_table.c: the activation tables of 16-bit inputs
 * (kernels/x86_avx512/loops_act16.c) and the fused passes that use them
 * (loops_fused.c) give the bits of the computation, for every input.
 *
 * 1. Passes, exhaustive: bias_act_store with y holding every BF16 / FP16
 *    pattern that a store can produce (all 65,536 but the signalling NaNs,
 *    which the store quiets), GELU / tanh / relu into BF16 / FP16 / FP32,
 *    and act_bwd_store with the saved tensor holding all 65,536 patterns
 *    (GELU, tanh), dY a constant 0, -0, subnormal, huge, Inf, NaN or random
 *    vector in FP32 / BF16 / FP16, dX in FP32 / BF16 / FP16; 67,000
 *    elements (pattern i mod 65,536), so the lane tails and the pool split
 *    are taken. The oracle is the unfused sequence of the same table's
 *    kernels (widening convert, gelu/tanh fwd/bwd over FP32 buffers,
 *    convert, absmax), compared bit for bit: every output byte, absmax bits,
 *    non-finite counts. For the generic table (its own reference, no
 *    tables) and, where the CPU runs it, the AVX-512 one; each under the
 *    default MXCSR, with flush-to-zero (mxp_fpenv_set_ftz: the second table
 *    set) and rounding downward (no table: the computed path; 31,000
 *    elements there, under the pool thresholds, as pool threads take over
 *    FTZ/DAZ but not the rounding mode).
 * 2. Tables (AVX-512): every entry against the FP32 kernels gelu_fwd /
 *    tanh_fwd / gelu_bwd (dy = 1) of the widened pattern, signalling NaNs
 *    included, and the 16-bit output tables against convert of those;
 *    no table under a non-nearest rounding mode.
 * 3. The test can fail: one perturbed entry (GELU forward BF16, GELU
 *    derivative FP16, GELU BF16 -> FP16 16-bit) makes the pass checks of
 *    part 1 fail; restored after.
 */
#include "kernels/generic/generic.h"
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/loops.h"
#include "kernel_slots.h"
#include "testutil.h"

#include <fenv.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#else
#define HAVE_MXCSR 0
#endif

enum { NPAT = 1 << 16, N = 67000 };

static const mxp_dtype types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};

/* 16-bit patterns, element i = (start + i) mod 65536; signalling NaNs of
 * dtype t replaced by quiet ones when `quiet` (as a store would leave them). */
static void patterns(uint16_t *p, size_t start, size_t n, mxp_dtype t, bool quiet) {
    const uint16_t qbit = t == MXP_DTYPE_BF16 ? 0x40 : 0x200;
    const uint16_t exp = t == MXP_DTYPE_BF16 ? 0x7f80 : 0x7c00;
    for (size_t i = 0; i < n; i++) {
        uint16_t b = (uint16_t)((start + i) % NPAT);
        const bool nan = (b & exp) == exp && (b & (uint16_t)(~exp & 0x7fff)) != 0;
        if (quiet && nan) b |= qbit;
        p[i] = b;
    }
}

static void act_fwd(const mxp_kernels *k, mxp_act a, float *y, const float *x, size_t n) {
    switch (a) {
    case MXP_ACT_RELU: k->relu_fwd(y, x, n); break;
    case MXP_ACT_GELU: k->gelu_fwd(y, x, n); break;
    default: k->tanh_fwd(y, x, n); break;
    }
}

static void act_bwd(const mxp_kernels *k, mxp_act a, float *dx, const float *dy, const float *s,
                    size_t n) {
    if (a == MXP_ACT_GELU) k->gelu_bwd(dx, dy, s, n);
    else k->tanh_bwd(dx, dy, s, n);
}

/* Scratch shared by the cases. */
static float *f0, *f1, *f2;
static unsigned char *b0, *b1, *b2, *b3;

/* bias_act_store against the unfused sequence; true when every bit agrees. */
static bool fwd_case(const mxp_kernels *k, size_t start, size_t n, mxp_dtype yt, mxp_act act,
                     mxp_dtype at, const char *mode) {
    const size_t as = mxp_dtype_info(at)->size;
    patterns((uint16_t *)b0, start, n, yt, true);
    k->convert(MXP_DTYPE_F32, f0, yt, b0, n); /* exact: the FP32 "GEMM output" */
    memcpy(f1, f0, n * sizeof(float));
    memset(b1, 0xa5, n * 4);
    memset(b2, 0x5a, n * 4);
    mxp_epilogue e = {.y = f1, .B = (int64_t)n / 1000, .C = 1000, .y_type = yt, .y_out = b1, .act = act,
                      .a_type = at, .a_out = b2};
    ks_epi_slots r;
    ks_epi_bind(&e, &r);
    k->bias_act_store(&e);
    /* the unfused sequence, into f0 / b0 / f2 / b3 */
    k->convert(yt, b0, MXP_DTYPE_F32, f0, n);
    int64_t ynf = 0, anf = 0;
    const float yam = ks_absmax(k, f0, n, &ynf);
    k->convert(MXP_DTYPE_F32, f2, yt, b0, n);
    float *a = at == MXP_DTYPE_F32 ? (float *)(void *)b3 : f0;
    act_fwd(k, act, a, f2, n);
    if (at != MXP_DTYPE_F32) k->convert(at, b3, MXP_DTYPE_F32, a, n);
    const float aam = ks_absmax(k, a, n, &anf);
    const bool ok = memcmp(b1, b0, n * 2) == 0 && memcmp(b2, b3, n * as) == 0 &&
                    test_f32_bits(r.y_amax) == test_f32_bits(yam) && r.y_nonfinite == ynf &&
                    test_f32_bits(r.a_amax) == test_f32_bits(aam) && r.a_nonfinite == anf;
    if (!ok && test_failures < 20)
        printf("  %s %s fwd y %s act %d a %s: y_out %s, a_out %s, amax %g/%g %g/%g, nf "
               "%lld/%lld %lld/%lld\n",
               k->isa, mode, mxp_dtype_name(yt), (int)act, mxp_dtype_name(at),
               memcmp(b1, b0, n * 2) ? "differs" : "same",
               memcmp(b2, b3, n * as) ? "differs" : "same", (double)r.y_amax, (double)yam,
               (double)r.a_amax, (double)aam, (long long)r.y_nonfinite, (long long)ynf,
               (long long)r.a_nonfinite, (long long)anf);
    return ok;
}

/* dY vectors: 0 constant, -0, subnormal, huge, +Inf, NaN, random N(0, 1). */
enum { DY_KINDS = 7 };

static void fill_dy(float *v, size_t n, int kind) {
    static const float c[] = {0.0f, -0.0f, 1e-41f, 3.0e38f, INFINITY, NAN};
    if (kind < 6) {
        for (size_t i = 0; i < n; i++) v[i] = c[kind];
        return;
    }
    mxp_rng r;
    mxp_rng_init(&r, 16);
    for (size_t i = 0; i < n; i++) v[i] = mxp_rng_normal(&r);
}

/* act_bwd_store against the unfused sequence; true when every bit agrees. */
static bool bwd_case(const mxp_kernels *k, size_t n, mxp_act act, mxp_dtype st, mxp_dtype gt,
                     int dyk, mxp_dtype xt, const char *mode) {
    const size_t xs = mxp_dtype_info(xt)->size;
    fill_dy(f0, n, dyk);
    k->convert(gt, b0, MXP_DTYPE_F32, f0, n); /* dY in gt (huge: Inf in FP16) */
    patterns((uint16_t *)b1, 0, n, st, false);   /* the saved tensor: every pattern */
    memset(b2, 0xa5, n * 4);
    memset(b3, 0x5a, n * 4);
    mxp_act_bwd e = {.act = act, .n = n, .dy_type = gt, .dy = b0, .s_type = st, .s = b1,
                     .dx_type = xt, .dx = b2};
    ks_bwd_slots r;
    ks_bwd_bind(&e, &r);
    k->act_bwd_store(&e);
    k->convert(MXP_DTYPE_F32, f0, gt, b0, n);
    k->convert(MXP_DTYPE_F32, f1, st, b1, n);
    act_bwd(k, act, f2, f0, f1, n);
    k->convert(xt, b3, MXP_DTYPE_F32, f2, n);
    int64_t nf = 0;
    const float am = ks_absmax(k, f2, n, &nf);
    const bool ok = memcmp(b2, b3, n * xs) == 0 &&
                    test_f32_bits(r.dx_amax) == test_f32_bits(am) && r.dx_nonfinite == nf;
    if (!ok && test_failures < 20)
        printf("  %s %s bwd act %d s %s dy %s (kind %d) dx %s: dx %s, amax %g/%g, nf "
               "%lld/%lld\n",
               k->isa, mode, (int)act, mxp_dtype_name(st), mxp_dtype_name(gt), dyk,
               mxp_dtype_name(xt), memcmp(b2, b3, n * xs) ? "differs" : "same",
               (double)r.dx_amax, (double)am, (long long)r.dx_nonfinite, (long long)nf);
    return ok;
}

/* ---- 1. passes, exhaustive ---- */

static void test_passes(const mxp_kernels *k, size_t n, const char *mode) {
    static const mxp_act acts[] = {MXP_ACT_GELU, MXP_ACT_TANH, MXP_ACT_RELU};
    for (int yi = 1; yi < 3; yi++)
        for (int ai = 0; ai < 3; ai++)
            for (int ti = 0; ti < 3; ti++)
            {
                CHECK_MSG(fwd_case(k, 0, n, types[yi], acts[ai], types[ti], mode),
                          "%s %s: forward y %s act %d a %s differs", k->isa, mode,
                          mxp_dtype_name(types[yi]), (int)acts[ai], mxp_dtype_name(types[ti]));
                /* one row at a time: every piece's scan shows (a whole pass
                 * shows only the largest), and pieces that end at +Inf (a
                 * non-finite a without NaN in the piece) */
                const size_t inf = types[yi] == MXP_DTYPE_BF16 ? 0x7f80 : 0x7c00;
                size_t bad = 0, first = 0;
                const size_t rows = (NPAT + 999) / 1000;
                for (size_t r = 0; r < rows + 2; r++) {
                    const size_t s0 = r < rows ? 1000 * r : (r == rows ? inf - 999 : inf + 0x8000 - 999);
                    if (!fwd_case(k, s0, 1000, types[yi], acts[ai], types[ti], mode) && bad++ == 0)
                        first = s0;
                }
                CHECK_MSG(bad == 0, "%s %s: forward rows y %s act %d a %s: %zu differ, first from 0x%04zx",
                          k->isa, mode, mxp_dtype_name(types[yi]), (int)acts[ai],
                          mxp_dtype_name(types[ti]), bad, first);
            }
    for (int ai = 0; ai < 2; ai++)
        for (int si = 1; si < 3; si++)
            for (int gi = 0; gi < 3; gi++)
                for (int dyk = 0; dyk < DY_KINDS; dyk++)
                    for (int xi = 0; xi < 3; xi++) {
                        if (dyk < DY_KINDS - 1 && xi != gi) continue; /* constants: one dX */
                        CHECK_MSG(bwd_case(k, n, acts[ai], types[si], types[gi], dyk, types[xi], mode),
                                  "%s %s: backward act %d s %s dy %s kind %d dx %s differs",
                                  k->isa, mode, (int)acts[ai], mxp_dtype_name(types[si]),
                                  mxp_dtype_name(types[gi]), dyk, mxp_dtype_name(types[xi]));
                    }
}

/* ---- 2. the tables ---- */

static unsigned csr_now(void) {
#if HAVE_MXCSR
    return _mm_getcsr();
#else
    return 0;
#endif
}

static void test_tables(const mxp_kernels *k, const char *mode, bool want) {
    static const mxp_act16_fn fns[] = {MXP_ACT16_GELU, MXP_ACT16_TANH, MXP_ACT16_GELU_DERIV};
    for (int ti = 1; ti < 3; ti++)
        for (int fi = 0; fi < 3; fi++) {
            const float *T = mxp_avx512_act16_table(fns[fi], types[ti], csr_now());
            CHECK_MSG((T != NULL) == want, "%s: table %d %s %s", mode, (int)fns[fi],
                      mxp_dtype_name(types[ti]), want ? "missing" : "where none may be");
            if (!T) continue;
            patterns((uint16_t *)b0, 0, NPAT, types[ti], false);
            k->convert(MXP_DTYPE_F32, f0, types[ti], b0, NPAT);
            if (fns[fi] == MXP_ACT16_GELU) k->gelu_fwd(f1, f0, NPAT);
            else if (fns[fi] == MXP_ACT16_TANH) k->tanh_fwd(f1, f0, NPAT);
            else {
                for (size_t i = 0; i < NPAT; i++) f2[i] = 1.0f;
                k->gelu_bwd(f1, f2, f0, NPAT);
            }
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < NPAT; i++)
                if (test_f32_bits(T[i]) != test_f32_bits(f1[i]) && bad++ == 0) first = i;
            CHECK_MSG(bad == 0, "%s: table %d %s: %zu entries differ, first 0x%04zx: %a vs %a",
                      mode, (int)fns[fi], mxp_dtype_name(types[ti]), bad, first,
                      (double)T[first], (double)f1[first]);
            if (fns[fi] == MXP_ACT16_GELU_DERIV) continue;
            for (int oi = 1; oi < 3; oi++) { /* the 16-bit output tables: f1 as stored */
                const uint16_t *T16 =
                    mxp_avx512_act16_table16(fns[fi], types[ti], types[oi], csr_now());
                CHECK_MSG(T16 != NULL, "%s: 16-bit table %d %s -> %s missing", mode, (int)fns[fi],
                          mxp_dtype_name(types[ti]), mxp_dtype_name(types[oi]));
                if (!T16) continue;
                uint16_t *want16 = (uint16_t *)(void *)b1;
                k->convert(types[oi], want16, MXP_DTYPE_F32, f1, NPAT);
                bad = 0;
                for (size_t i = 0; i < NPAT; i++)
                    if (T16[i] != want16[i] && bad++ == 0) first = i;
                CHECK_MSG(bad == 0, "%s: 16-bit table %d %s -> %s: %zu entries differ, first 0x%04zx",
                          mode, (int)fns[fi], mxp_dtype_name(types[ti]),
                          mxp_dtype_name(types[oi]), bad, first);
            }
        }
    CHECK_MSG((mxp_avx512_act16_table16(MXP_ACT16_GELU, MXP_DTYPE_F16, MXP_DTYPE_BF16,
                                        csr_now()) != NULL) == want,
              "%s: 16-bit table presence", mode);
}

/* ---- 3. a perturbed entry is caught ---- */

static void test_mutation(const mxp_kernels *k) {
    float *T = (float *)mxp_avx512_act16_table(MXP_ACT16_GELU, MXP_DTYPE_BF16, csr_now());
    float *D = (float *)mxp_avx512_act16_table(MXP_ACT16_GELU_DERIV, MXP_DTYPE_F16, csr_now());
    CHECK(T && D);
    if (!T || !D) return;
    const int saved = test_failures;
    uint32_t u;
    memcpy(&u, &T[0x3f80], 4); /* GELU(1.0): one ulp off */
    const float keep = T[0x3f80];
    u ^= 1u;
    memcpy(&T[0x3f80], &u, 4);
    const bool f_ok = fwd_case(k, 0, N, MXP_DTYPE_BF16, MXP_ACT_GELU, MXP_DTYPE_F32, "perturbed");
    T[0x3f80] = keep;
    const float keepd = D[0x3c00]; /* GELU'(1.0) for FP16 */
    memcpy(&u, &D[0x3c00], 4);
    u ^= 1u;
    memcpy(&D[0x3c00], &u, 4);
    const bool b_ok =
        bwd_case(k, N, MXP_ACT_GELU, MXP_DTYPE_F16, MXP_DTYPE_F32, DY_KINDS - 1, MXP_DTYPE_F32,
                 "perturbed");
    D[0x3c00] = keepd;
    uint16_t *T16 = (uint16_t *)mxp_avx512_act16_table16(MXP_ACT16_GELU, MXP_DTYPE_BF16,
                                                         MXP_DTYPE_F16, csr_now());
    bool h_ok = true;
    if (T16) {
        const uint16_t keeph = T16[0x3f80];
        T16[0x3f80] ^= 1u;
        h_ok = fwd_case(k, 0, N, MXP_DTYPE_BF16, MXP_ACT_GELU, MXP_DTYPE_F16, "perturbed");
        T16[0x3f80] = keeph;
    }
    test_failures = saved; /* the expected mismatches above are not failures */
    CHECK_MSG(!f_ok, "a perturbed GELU table entry went unnoticed");
    CHECK_MSG(!b_ok, "a perturbed GELU derivative entry went unnoticed");
    CHECK_MSG(T16 && !h_ok, "a perturbed 16-bit GELU table entry went unnoticed");
    CHECK(fwd_case(k, 0, N, MXP_DTYPE_BF16, MXP_ACT_GELU, MXP_DTYPE_F32, "restored"));
}

static void run_modes(const mxp_kernels *k, bool tables) {
    test_passes(k, N, "default");
    if (tables) test_tables(k, "default", true);
    if (tables) test_mutation(k);
    if (mxp_fpenv_set_ftz(true)) {
        test_passes(k, N, "ftz");
        if (tables) test_tables(k, "ftz", true);
        mxp_fpenv_set_ftz(false);
    } else {
        printf("test_act_table: flush-to-zero not supported here, that part skipped\n");
    }
    if (fesetround(FE_DOWNWARD) == 0) {
        /* below the pools' thresholds: pool threads take over FTZ/DAZ
         * only, not the rounding mode */
        test_passes(k, 31000, "downward");
        if (tables) test_tables(k, "downward", false);
        fesetround(FE_TONEAREST);
    }
}

int main(void) {
    f0 = test_xmalloc(N * 4), f1 = test_xmalloc(N * 4), f2 = test_xmalloc(N * 4);
    b0 = test_xmalloc(N * 4), b1 = test_xmalloc(N * 4), b2 = test_xmalloc(N * 4);
    b3 = test_xmalloc(N * 4);
    run_modes(mxp_kernels_generic(), false);
    if (mxp_avx512_usable(mxp_cpu_features_get())) run_modes(mxp_kernels_avx512(), true);
    else printf("test_act_table: AVX-512 part skipped (CPU cannot run it)\n");
    free(f0), free(f1), free(f2), free(b0), free(b1), free(b2), free(b3);
    return test_finish("test_act_table");
}
