/* tests/test_gemm_pack_bf16.c: the BF16 pair packer (mxp_avx512_pack_bf16)
 * against its layout contract (gemm_internal.h), computed here by scalar
 * code: panel p at dst + p*w*kp, word (q, r) = X[r][k0+2q] | X[r][k0+2q+1]
 * << 16 (0 past kc or past the rows), sub[p] = the rows of panel p with a
 * BF16 subnormal in X[.][k0 .. k0+kc), and nothing written past the last
 * panel. Both layouts of X (k contiguous: the transposing packer with its
 * short-tail path for the last 1..4 pairs of a 16-pair chunk; rows
 * contiguous: the pair interleave), both panel widths (MR = 14: unmasked
 * 16-word stores inside a panel, masked at its end; NR = 32), every kc
 * around the chunk and tail boundaries, row counts around 14/16/32. And
 * the subnormal scan of a k-contiguous block (check_scan).
 */
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

enum { CANARY = 0xa5 };

static mxp_rng rng;

/* A random BF16 value: mostly normal, some zeros, some subnormals (rate in
 * 1/1000 of the values). */
static uint16_t random_bf16(unsigned sub_per_mille) {
    uint32_t u = mxp_rng_u32(&rng);
    if (u % 1000 < sub_per_mille) return (uint16_t)((u >> 16 & 0x8000u) | (1u + (u >> 10) % 0x7fu));
    if (u % 97 == 0) return 0;
    return (uint16_t)(0x3c00u + (u >> 8) % 0x0700u) ^ (uint16_t)(u >> 16 & 0x8000u);
}

static bool subnormal(uint16_t v) { return (v & 0x7f80u) == 0 && (v & 0x7fu) != 0; }

/* X(r, k) of the test matrix (rows x cols = r_total x k_total). */
static uint16_t x_at(const uint16_t *x, size_t ld, bool k_contig, size_t r, size_t k) {
    return k_contig ? x[r * ld + k] : x[k * ld + r];
}

static void check_case(bool k_contig, int w, size_t rows, size_t kc, size_t r0, size_t k0,
                       unsigned sub_per_mille) {
    const size_t r_total = r0 + rows + 3, k_total = k0 + kc + 2;
    const size_t ld = k_contig ? k_total + 1 : r_total + 2; /* odd strides too */
    const size_t n = k_contig ? r_total * ld : k_total * ld;
    uint16_t *x = malloc(n * sizeof *x);
    const size_t kp = (kc + 1) / 2, panels = (rows + (size_t)w - 1) / (size_t)w;
    const size_t words = panels * (size_t)w * kp;
    uint32_t *dst = malloc((words + 64) * sizeof *dst);
    uint32_t sub[64];
    CHECK(x && dst && panels <= 64);
    for (size_t i = 0; i < n; i++) x[i] = random_bf16(sub_per_mille);
    memset(dst, CANARY, (words + 64) * sizeof *dst);
    memset(sub, CANARY, sizeof sub);
    const mxp_gemm_src src = {MXP_DTYPE_BF16, x, ld, k_contig};
    bool any = mxp_avx512_pack_bf16(&src, r0, rows, k0, kc, w, dst, sub);
    bool any_ref = false;
    size_t bad = 0;
    for (size_t p = 0; p < panels; p++) {
        uint32_t sub_ref = 0;
        for (size_t q = 0; q < kp; q++)
            for (size_t r = 0; r < (size_t)w; r++) {
                size_t row = p * (size_t)w + r;
                uint32_t lo = 0, hi = 0;
                if (row < rows) {
                    lo = x_at(x, ld, k_contig, r0 + row, k0 + 2 * q);
                    if (2 * q + 1 < kc) hi = x_at(x, ld, k_contig, r0 + row, k0 + 2 * q + 1);
                    if (subnormal((uint16_t)lo) || subnormal((uint16_t)hi)) sub_ref |= 1u << r;
                }
                if (dst[p * (size_t)w * kp + q * (size_t)w + r] != (lo | hi << 16)) bad++;
            }
        CHECK_MSG(sub[p] == sub_ref,
                  "sub[%zu] %#x, expected %#x (k_contig %d w %d rows %zu kc %zu)", p, sub[p],
                  sub_ref, k_contig, w, rows, kc);
        any_ref |= sub_ref != 0;
    }
    CHECK_MSG(bad == 0, "%zu words differ (k_contig %d w %d rows %zu kc %zu r0 %zu k0 %zu)", bad,
              k_contig, w, rows, kc, r0, k0);
    CHECK(any == any_ref);
    const unsigned char *tail = (const unsigned char *)(dst + words);
    for (size_t i = 0; i < 64 * sizeof *dst; i++)
        CHECK_MSG(tail[i] == CANARY, "written past the panels (k_contig %d w %d rows %zu kc %zu)",
                  k_contig, w, rows, kc);
    free(dst);
    free(x);
}

/* mxp_avx512_bf16_kcontig_subnormal (gemm.c reads a BF16 op(A) in place
 * only where it says no) against the scalar definition: a block of
 * normal values and zeros with one special value planted (or none) at
 * every position class (first / last element of a row, a 32-lane chunk's
 * tail, the middle), the value one of the boundary classes (the smallest
 * and largest subnormals of both signs: yes; +-0, the smallest normal,
 * Inf, NaN: no); subnormals outside the block (the rows' padding, the
 * rows before and after, k before k0) must not count. Rows contiguous
 * (ld == kc: one run) and padded. */
static void check_scan(size_t rows, size_t kc, size_t pad) {
    static const uint16_t special[] = {0x0001, 0x007f, 0x8001, 0x807f, 0x0040,
                                       0x0000, 0x8000, 0x0080, 0x8080, 0x7f80, 0x7fc1};
    const size_t r0 = 1, k0 = pad ? 2 : 0, ld = kc + k0 + pad, n = (rows + 2) * ld;
    uint16_t *x = malloc(n * sizeof *x);
    CHECK(x != NULL);
    const mxp_gemm_src src = {MXP_DTYPE_BF16, x, ld, true};
    const size_t pos[][2] = {{0, 0}, {0, kc - 1}, {rows - 1, kc - 1}, {rows / 2, kc / 2},
                             {rows - 1, kc > 31 ? 31 : kc - 1}, {rows / 3, kc > 33 ? 33 : 0}};
    for (size_t v = 0; v <= sizeof special / sizeof special[0]; v++)
        for (size_t q = 0; q < sizeof pos / sizeof pos[0]; q++) {
            for (size_t i = 0; i < n; i++) {
                size_t r = i / ld, k = i % ld;
                bool inside = r >= r0 && r < r0 + rows && k >= k0 && k < k0 + kc;
                x[i] = inside ? random_bf16(0) : (uint16_t)(0x0001u + i % 0x7eu);
            }
            bool want = false;
            if (v < sizeof special / sizeof special[0]) {
                x[(r0 + pos[q][0]) * ld + k0 + pos[q][1]] = special[v];
                want = subnormal(special[v]);
            }
            bool got = mxp_avx512_bf16_kcontig_subnormal(&src, r0, rows, k0, kc);
            CHECK_MSG(got == want, "subnormal scan %d, expected %d (rows %zu kc %zu ld %zu, "
                      "value %#x at %zu, %zu)", got, want, rows, kc, ld,
                      v < sizeof special / sizeof special[0] ? special[v] : 0, pos[q][0],
                      pos[q][1]);
        }
    free(x);
}

int main(void) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    if (!mxp_avx512_usable(f)) {
        printf("test_gemm_pack_bf16: skipped: no AVX-512\n");
        return 0;
    }
    mxp_rng_init(&rng, 20261124);
    static const size_t rows_list[] = {1, 4, 13, 14, 15, 16, 17, 28, 31, 32, 33, 47, 65};
    static const size_t kc_list[] = {1,  2,  3,  7,  8,  9,  15, 16, 17, 31, 32, 33,
                                     34, 39, 40, 41, 63, 64, 65, 71, 72, 73, 96, 129};
    for (int kcontig = 0; kcontig < 2; kcontig++)
        for (int wi = 0; wi < 2; wi++)
            for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
                for (size_t ki = 0; ki < sizeof kc_list / sizeof kc_list[0]; ki++) {
                    const int w = wi ? MXP_GEMM_NR : MXP_GEMM_MR;
                    const size_t rows = rows_list[ri], kc = kc_list[ki];
                    check_case(kcontig, w, rows, kc, 0, 0, 0);
                    check_case(kcontig, w, rows, kc, 3, 5, 20); /* offsets, subnormals */
                }
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
        for (size_t ki = 0; ki < sizeof kc_list / sizeof kc_list[0]; ki++)
            for (size_t pad = 0; pad < 2; pad++) check_scan(rows_list[ri], kc_list[ki], pad * 3);
    return test_finish("test_gemm_pack_bf16");
}
