/* tests/test_gemm_pack_f32.c: the F32-path packer (mxp_avx512_pack_f32)
 * alone, for every operand dtype, against num's scalar widening (see
 * test_pack_f32 below), and the widening of a block in its own layout
 * (mxp_avx512_widen_f32). Split from test_gemm_isa.c, which tests the GEMM
 * as a whole.
 */
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mxp_rng rng;
static const mxp_dtype all_types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16,
                                      MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E5M2};
enum { NTYPES = sizeof all_types / sizeof all_types[0] };

/* mxp_avx512_pack_f32 alone against num's scalar widening (mxp_load_f32,
 * an independent oracle): every panel value bit for bit (a NaN as any NaN),
 * zeros past `rows` in the last panel, nothing written past the last
 * panel, nothing read past X (exact-size buffers, for ASan). Sizes around
 * the packers' blocks: 16-k groups (MR-wide panels from k-major rows: 14
 * whole zmm per group), 32-k word transposes of 16-bit k-contiguous rows
 * (rows at most 1024 elements apart) and the 16-k transposes after them or
 * with wider rows, 14- and 32-wide panels and partial ones, every dtype. */
static void test_pack_f32(void) {
    static const size_t rows_l[] = {1, 13, 14, 15, 16, 17, 31, 32, 33, 47};
    static const size_t kc_l[] = {1, 15, 16, 17, 31, 32, 33, 48, 64, 65, 100};
    enum { NROWS = sizeof rows_l / sizeof rows_l[0], NKC = sizeof kc_l / sizeof kc_l[0] };
    const size_t r0 = 3, k0 = 5, canary = 16;
    const uint32_t sentinel = 0x7fbadbadu;
    /* random bytes, copied into each exact-size X from a varying offset */
    enum { POOL = 256 * 1024, SHIFT = 64 };
    uint8_t *pool = test_xmalloc(POOL + SHIFT);
    for (size_t i = 0; i < POOL + SHIFT; i++) pool[i] = (uint8_t)mxp_rng_u32(&rng);
    for (int ti = 0; ti < NTYPES; ti++)
        for (int kcont = 0; kcont < 2; kcont++)
            for (int wide = 0; wide < 4; wide++) /* bit 0: rows 1030 apart; bit 1: NR wide */
                for (int ri = 0; ri < NROWS; ri++)
                    for (int ki = 0; ki < NKC; ki++) {
                        mxp_dtype t = all_types[ti];
                        size_t rows = rows_l[ri], kc = kc_l[ki], es = mxp_dtype_info(t)->size;
                        int w = wide & 2 ? MXP_GEMM_NR : MXP_GEMM_MR;
                        /* X(r, k) at r*ld + k (kcont) or k*ld + r */
                        size_t ld = kcont ? (wide & 1 ? 1030 : k0 + kc + 3)
                                          : r0 + rows + (wide & 1 ? 7 : 0);
                        size_t n = kcont ? (r0 + rows - 1) * ld + k0 + kc
                                         : (k0 + kc - 1) * ld + r0 + rows;
                        uint8_t *x = test_xmalloc(n * es);
                        CHECK(n * es <= POOL);
                        memcpy(x, pool + mxp_rng_u32(&rng) % SHIFT, n * es);
                        size_t np = (rows + (size_t)w - 1) / (size_t)w;
                        size_t nd = np * (size_t)w * kc + canary;
                        uint32_t *d = test_xmalloc(nd * sizeof(float));
                        for (size_t i = 0; i < nd; i++) d[i] = sentinel;
                        mxp_gemm_src src = {t, x, ld, kcont};
                        mxp_avx512_pack_f32(&src, r0, rows, k0, kc, w, (float *)d);
                        int bad = 0;
                        for (size_t i = 0; i < nd; i++) {
                            size_t p = i / ((size_t)w * kc), k = i / (size_t)w % kc,
                                   r = p * (size_t)w + i % (size_t)w;
                            float got;
                            memcpy(&got, &d[i], sizeof got);
                            bool ok;
                            if (i >= nd - canary) {
                                ok = d[i] == sentinel;
                            } else if (r >= rows) {
                                ok = d[i] == 0;
                            } else {
                                size_t at = kcont ? (r0 + r) * ld + k0 + k : (k0 + k) * ld + r0 + r;
                                float ref = mxp_load_f32(t, x, at);
                                ok = isnan(ref) ? isnan(got)
                                                : d[i] == test_f32_bits(ref);
                            }
                            if (!ok && bad++ < 3)
                                test_fail(__FILE__, __LINE__, "pack %s %s w %d rows %zu kc %zu "
                                          "ld %zu: float %zu gave %08x", mxp_dtype_name(t),
                                          kcont ? "k-contiguous" : "k-major", w, rows, kc, ld,
                                          i, (unsigned)d[i]);
                            test_checks++;
                        }
                        test_failures += bad > 3 ? bad - 3 : 0;
                        free(x);
                        free(d);
                    }
    free(pool);
}

/* mxp_avx512_widen_f32 alone against num's scalar widening: X's block in
 * its own layout, lines ldd floats apart (ldd = the line's length, or
 * more), every value bit for bit (a NaN as any NaN), the gaps between
 * lines and a canary past the last line untouched, nothing read past X
 * (exact-size buffers). Line lengths around its 64-element step and the
 * 16-element tail, every dtype, both layouts. */
static void test_widen_f32(void) {
    static const size_t rows_l[] = {1, 14, 15, 47, 64, 65, 130};
    static const size_t kc_l[] = {1, 15, 16, 17, 63, 64, 65, 100, 129};
    const size_t r0 = 3, k0 = 5, canary = 16;
    const uint32_t sentinel = 0x7fbadbadu;
    for (int ti = 0; ti < NTYPES; ti++)
        for (int kcont = 0; kcont < 2; kcont++)
            for (int pad = 0; pad < 2; pad++)
                for (size_t ri = 0; ri < sizeof rows_l / sizeof rows_l[0]; ri++)
                    for (size_t ki = 0; ki < sizeof kc_l / sizeof kc_l[0]; ki++) {
                        mxp_dtype t = all_types[ti];
                        size_t rows = rows_l[ri], kc = kc_l[ki], es = mxp_dtype_info(t)->size;
                        size_t ld = kcont ? k0 + kc + 2 : r0 + rows + 1;
                        size_t n = kcont ? (r0 + rows - 1) * ld + k0 + kc
                                         : (k0 + kc - 1) * ld + r0 + rows;
                        uint8_t *x = test_xmalloc(n * es);
                        for (size_t i = 0; i < n * es; i++) x[i] = (uint8_t)mxp_rng_u32(&rng);
                        size_t lines = kcont ? rows : kc, len = kcont ? kc : rows;
                        size_t ldd = len + (pad ? 19 : 0);
                        size_t nd = (lines - 1) * ldd + len + canary;
                        uint32_t *d = test_xmalloc(nd * sizeof(float));
                        for (size_t i = 0; i < nd; i++) d[i] = sentinel;
                        mxp_gemm_src src = {t, x, ld, kcont};
                        mxp_avx512_widen_f32(&src, r0, rows, k0, kc, (float *)d, ldd);
                        int bad = 0;
                        for (size_t i = 0; i < nd; i++) {
                            size_t line = i / ldd, e = i % ldd;
                            bool ok;
                            if (line >= lines || e >= len) {
                                ok = d[i] == sentinel;
                            } else {
                                size_t r = kcont ? line : e, k = kcont ? e : line;
                                size_t at = kcont ? (r0 + r) * ld + k0 + k : (k0 + k) * ld + r0 + r;
                                float ref = mxp_load_f32(t, x, at), got;
                                memcpy(&got, &d[i], sizeof got);
                                ok = isnan(ref) ? isnan(got) : d[i] == test_f32_bits(ref);
                            }
                            if (!ok && bad++ < 3)
                                test_fail(__FILE__, __LINE__, "widen %s %s rows %zu kc %zu "
                                          "ldd %zu: float %zu gave %08x", mxp_dtype_name(t),
                                          kcont ? "k-contiguous" : "k-major", rows, kc, ldd, i,
                                          (unsigned)d[i]);
                            test_checks++;
                        }
                        test_failures += bad > 3 ? bad - 3 : 0;
                        free(x);
                        free(d);
                    }
}

int main(void) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("test_gemm_pack_f32: skipped: no AVX-512\n");
        return 0;
    }
    mxp_avx512_gemm_tables_init(); /* the FP8 decode tables (the GEMM entries build them) */
    mxp_rng_init(&rng, 20261124);
    test_pack_f32();
    test_widen_f32();
    return test_finish("test_gemm_pack_f32");
}
