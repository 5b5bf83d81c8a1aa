/* tests/test_gemm_f16acc_isa.c: the FP16 fast-accumulate GEMM on
 * AVX512-FP16 (kernels/x86_avx512fp16/gemm_f16acc.c) against the emulation
 * (kernels/generic/gemm_f16acc.c), bit for bit.
 *
 * The emulation is the oracle: tests/test_gemm_f16acc.c proves it against an
 * exact integer model of one rounding per product and its promotion order.
 * Here every element of C must carry the same bits (NaN: NaN on both sides)
 * over: all four transposes; M, N, K around the tile and block edges (MR 8,
 * NR 32, MC 64, the K chunks of 256 products); promotion intervals k from 1
 * to the maximum, dividing the chunk or not; alpha, beta; leading dimensions
 * wider than the matrices with NaN in the gaps; FP16 subnormals, values
 * whose partial sums overflow FP16, Inf and NaN inputs; MXCSR FTZ/DAZ set
 * and clear (FP16 arithmetic ignores both, as the emulation in double does);
 * one and two threads; and the slot of the AVX-512 table (what training
 * calls) equal to the kernel. Operands that are not both FP16 go to the
 * emulation itself.
 *
 * Exits 77 (skipped) when the CPU has no AVX512-FP16.
 */
#include "kernels/generic/generic.h"
#include "kernels/kernels.h"
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512fp16/avx512fp16.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x243F6A8885A308D3ull;

static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* What the operands hold. */
typedef enum fill {
    FILL_UNIT,      /* |x| in [2^-4, 2): training-like values */
    FILL_WIDE,      /* every finite exponent, subnormals included */
    FILL_SUBNORMAL, /* mostly FP16 subnormals and tiny normals */
    FILL_BIG,       /* |x| in [2^4, 2^8): partial sums overflow FP16 */
    FILL_SPECIAL,   /* FILL_UNIT with some Inf and NaN */
} fill;

static uint16_t value(fill f) {
    uint64_t r = rnd();
    uint16_t sign = (uint16_t)((r & 1u) << 15), man = (uint16_t)((r >> 8) & 0x3FFu);
    int e;
    switch (f) {
    case FILL_WIDE: e = (int)((r >> 20) % 31u); break; /* 0 (subnormal) .. 30 */
    case FILL_SUBNORMAL: e = (int)((r >> 20) % 3u); break;
    case FILL_BIG: e = 19 + (int)((r >> 20) % 4u); break;
    case FILL_SPECIAL:
        if ((r >> 40) % 61u == 0) return (uint16_t)(sign | 0x7C00u);         /* Inf */
        if ((r >> 40) % 61u == 1) return (uint16_t)(0x7E00u | (man & 0x1FF)); /* NaN */
        e = 11 + (int)((r >> 20) % 5u);
        break;
    default: e = 11 + (int)((r >> 20) % 5u); break;
    }
    return (uint16_t)(sign | (unsigned)e << 10 | man);
}

/* A rows x cols FP16 matrix with leading dimension ld; NaN in the gaps. */
static uint16_t *matrix(size_t rows, size_t cols, size_t ld, fill f) {
    size_t n = rows ? (rows - 1) * ld + cols : 1;
    uint16_t *m = test_xmalloc(n * sizeof *m);
    for (size_t i = 0; i < n; i++) m[i] = 0x7E00u;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) m[r * ld + c] = value(f);
    return m;
}

typedef struct gcase {
    size_t M, N, K;
    bool ta, tb;
    int kper;
    float alpha, beta;
    size_t pad; /* extra elements per leading dimension */
    fill fa, fb;
} gcase;

static bool same_bits(float a, float b) {
    return (isnan(a) && isnan(b)) || test_f32_bits(a) == test_f32_bits(b);
}

/* Run case c through `kern` and through the emulation; count differences. */
static void run_case(const gcase *c, void (*kern)(const mxp_gemm_args *, int), const char *what) {
    size_t ar = c->ta ? c->K : c->M, acols = c->ta ? c->M : c->K;
    size_t br = c->tb ? c->N : c->K, bcols = c->tb ? c->K : c->N;
    size_t lda = acols + c->pad, ldb = bcols + c->pad, ldc = c->N + c->pad;
    uint16_t *A = matrix(ar, acols, lda, c->fa), *B = matrix(br, bcols, ldb, c->fb);
    size_t cn = (c->M - 1) * ldc + c->N;
    float *C0 = test_xmalloc(cn * sizeof *C0), *C1 = test_xmalloc(cn * sizeof *C1);
    for (size_t i = 0; i < cn; i++) C0[i] = C1[i] = (float)((int)(rnd() % 2001u) - 1000) / 256.0f;
    mxp_gemm_args g = {c->ta, c->tb, (int64_t)c->M, (int64_t)c->N, (int64_t)c->K,
                       MXP_DTYPE_F16, A, (int64_t)lda, MXP_DTYPE_F16, B, (int64_t)ldb,
                       C0, (int64_t)ldc, c->alpha, c->beta};
    mxp_generic_gemm_f16acc(&g, c->kper);
    g.C = C1;
    kern(&g, c->kper);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < cn; i++)
        if (!same_bits(C0[i], C1[i]) && bad++ == 0) first = i;
    CHECK_MSG(bad == 0,
              "%s %zux%zux%zu %c%c k=%d alpha=%g beta=%g pad=%zu fill=%d/%d: %zu of %zu "
              "elements differ, first at %zu: %.9g (emulation) vs %.9g",
              what, c->M, c->N, c->K, c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->kper,
              (double)c->alpha, (double)c->beta, c->pad, (int)c->fa, (int)c->fb, bad, cn, first,
              (double)C0[first], (double)C1[first]);
    free(A);
    free(B);
    free(C0);
    free(C1);
}

/* Shapes around every edge of the blocking, all transposes, several k. */
static void test_edges(bool quick) {
    static const size_t ms[] = {1, 7, 8, 9, 63, 64, 65, 130};
    static const size_t ns[] = {1, 31, 32, 33, 95, 257};
    static const size_t ks[] = {1, 15, 16, 17, 255, 256, 257, 600};
    static const int kps[] = {1, 3, 16, 64};
    int n = 0;
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++, n++) {
                if (quick && n % 5) continue;
                gcase c = {ms[mi], ns[ni], ks[ki], (n & 1) != 0, (n & 2) != 0,
                           kps[n % 4], 1.0f, 0.0f, (size_t)(n % 3), FILL_UNIT, FILL_UNIT};
                run_case(&c, mxp_avx512fp16_gemm_f16acc, "edges");
            }
}

/* Promotion intervals that divide the K chunk, do not, or exceed it. */
static void test_kper(void) {
    static const int kps[] = {1, 2, 5, 16, 17, 100, 255, 256, 257, 1000, 4096, 5000, 0, -3};
    for (size_t i = 0; i < sizeof kps / sizeof *kps; i++)
        for (int t = 0; t < 4; t++) {
            gcase c = {40, 70, 1100, (t & 1) != 0, (t & 2) != 0, kps[i], 1.0f, 0.0f, 1,
                       FILL_UNIT, FILL_UNIT};
            run_case(&c, mxp_avx512fp16_gemm_f16acc, "kper");
        }
}

/* alpha and beta as the contract's stores apply them. */
static void test_alpha_beta(void) {
    static const float ab[][2] = {{1, 0},     {1, 1},       {0.5f, 0}, {-2, 0.25f},
                                  {1e-30f, 1}, {0.3f, 0.7f}, {1, 1.1f}, {-1.3f, -0.9f}};
    for (size_t i = 0; i < sizeof ab / sizeof *ab; i++) {
        gcase c = {33, 65, 300, i & 1, (i >> 1) & 1, 16, ab[i][0], ab[i][1], 2,
                   FILL_UNIT, FILL_UNIT};
        run_case(&c, mxp_avx512fp16_gemm_f16acc, "alpha/beta");
    }
}

/* Subnormals, overflow of the FP16 partial sums, Inf/NaN; FTZ/DAZ set and
 * clear. */
static void test_values(void) {
    static const fill fs[][2] = {{FILL_WIDE, FILL_WIDE},         {FILL_SUBNORMAL, FILL_UNIT},
                                 {FILL_SUBNORMAL, FILL_SUBNORMAL}, {FILL_BIG, FILL_BIG},
                                 {FILL_SPECIAL, FILL_UNIT},        {FILL_UNIT, FILL_SPECIAL},
                                 {FILL_WIDE, FILL_BIG}};
    for (int ftz = 0; ftz < 2; ftz++) {
        bool was = mxp_fpenv_set_ftz(ftz != 0);
        for (size_t i = 0; i < sizeof fs / sizeof *fs; i++)
            for (int t = 0; t < 4; t++) {
                gcase c = {17, 45, 290, (t & 1) != 0, (t & 2) != 0, t == 3 ? 1 : 16, 1.0f,
                           t == 2 ? 1.0f : 0.0f, 1, fs[i][0], fs[i][1]};
                run_case(&c, mxp_avx512fp16_gemm_f16acc, ftz ? "values (FTZ/DAZ)" : "values");
            }
        mxp_fpenv_set_ftz(was);
    }
}

/* Products big enough for two threads (and the acc buffer's column blocks:
 * 2048 rows leave 256 columns per block), the training shapes' sizes; and
 * the table slot training calls. */
static void test_large(bool quick) {
    gcase cs[] = {
        {256, 512, 512, false, true, 16, 1, 0, 0, FILL_UNIT, FILL_UNIT},  /* fwd */
        {256, 512, 512, false, false, 16, 1, 0, 0, FILL_UNIT, FILL_UNIT}, /* dX */
        {512, 512, 256, true, false, 16, 1, 1, 0, FILL_UNIT, FILL_UNIT},  /* dW, beta 1 */
        {2048, 600, 96, true, false, 32, 1, 0, 3, FILL_UNIT, FILL_UNIT},
        {8, 2048, 700, false, true, 7, 1, 0, 0, FILL_UNIT, FILL_UNIT},
    };
    size_t n = sizeof cs / sizeof *cs;
    for (size_t i = 0; i < (quick ? 2 : n); i++) {
        run_case(&cs[i], mxp_avx512fp16_gemm_f16acc, "large");
        run_case(&cs[i], mxp_kernels_avx512()->gemm_f16acc, "table slot");
    }
}

/* Operands that are not both FP16: the emulation's own result. */
static void test_other_dtypes(void) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5f, 1, 1.5f, 2, 2.5f, 3}, c0[4], c1[4];
    mxp_gemm_args g = {false, false, 2, 2, 3, MXP_DTYPE_F32, a, 3, MXP_DTYPE_F32, b, 2,
                       c0, 2, 1.0f, 0.0f};
    mxp_generic_gemm_f16acc(&g, 2);
    g.C = c1;
    mxp_avx512fp16_gemm_f16acc(&g, 2);
    CHECK(memcmp(c0, c1, sizeof c0) == 0);
    /* K == 0: C = beta*C */
    float c[2] = {3, 4};
    g.K = 0;
    g.C = c;
    g.N = 1;
    g.ldc = 1;
    g.a_type = g.b_type = MXP_DTYPE_F16;
    g.beta = 0.5f;
    mxp_avx512fp16_gemm_f16acc(&g, 16);
    CHECK(c[0] == 1.5f && c[1] == 2.0f);
}

int main(void) {
    if (!mxp_avx512fp16_usable(mxp_cpu_features_get())) {
        printf("test_gemm_f16acc_isa: skipped: this CPU has no AVX512-FP16 (cpuid 7.0 EDX bit "
               "23, or no AVX-512 table)\n");
        return 77;
    }
    setenv("MIXPREC_NUM_THREADS", "2", 0);
    bool quick = test_quick();
    CHECK(mxp_kernels_avx512()->gemm_f16acc == mxp_avx512fp16_gemm_f16acc);
    test_edges(quick);
    test_kper();
    test_alpha_beta();
    test_values();
    test_large(quick);
    test_other_dtypes();
    return test_finish("test_gemm_f16acc_isa");
}
