/* tests/test_gemm_isa_split.c: the AVX-512 GEMM's cut between threads
 * (oracle and tolerance: gemm_cases.h).
 *
 * Covered: the plan (rows as equal as possible, whole NR tiles when N is
 * cut, the direction for named training shapes) and BF16 subnormal rows at
 * the cut points, 1, 2 and 3 threads bit for bit, each row equal to the
 * row computed alone.
 */
#include "gemm_cases.h"
#include "kernels/threads.h"

#include <stdlib.h>
#include <string.h>

/* The cut between threads (mxp_avx512_gemm_split): ranges that tile the
 * cut dimension in order; rows as equal as possible when M is cut (at most
 * one row apart), whole NR-column micro-tiles when N is cut (at most one
 * tile apart), 16-column lines on the small-M path; and the direction for
 * named training shapes: M when op(B) is read in place and op(A) packed
 * (FP32 NN with rows <= 1024 apart), N when both are packed and M < N or
 * both read in place (FP32 TN). */
static void test_split_plan(void) {
    static const struct {
        size_t M, N, K;
        mxp_dtype t;
        int tr; /* bit 0: trans_a, bit 1: trans_b */
        int threads;
        int want_n; /* 1: N cut, 0: M cut, -1: either */
        size_t unit; /* columns of the N cut; 0: 16 on the small-M path, else NR */
    } sh[] = {
        {128, 256, 256, MXP_DTYPE_F32, 0, 2, 1, 0},   /* dX: B in place, N (prefer_m) */
        {128, 256, 256, MXP_DTYPE_F32, 2, 2, 1, 0},   /* fwd: both packed */
        {256, 256, 256, MXP_DTYPE_F32, 1, 2, 1, 0},   /* dW: both in place */
        {512, 512, 256, MXP_DTYPE_F32, 0, 3, 1, 0},
        {512, 512, 256, MXP_DTYPE_F32, 1, 3, 1, 0},
        {256, 256, 32, MXP_DTYPE_BF16, 1, 2, 0, 0},
        {128, 256, 256, MXP_DTYPE_BF16, 2, 3, 0, 0},  /* DPBF16, N <= 2 M */
        {65, 2048, 512, MXP_DTYPE_BF16, 1, 2, 1, 0},
        {256, 2048, 2048, MXP_DTYPE_F32, 0, 2, 1, 0}, /* B rows 8 KiB apart: packed */
        {32, 256, 256, MXP_DTYPE_F32, 0, 2, 1, 32}, /* M <= 32, FP32 NN in place: packed */
        {32, 300, 300, MXP_DTYPE_F32, 0, 2, 1, 32}, /* (the small path: 144 + 156) */
        {32, 1120, 300, MXP_DTYPE_F32, 0, 2, 1, 16}, /* B rows > 1024 apart: small-M */
        {32, 560, 464, MXP_DTYPE_F32, 0, 2, 1, 32}, /* op(B) K block 1015 KiB: packed */
        {32, 560, 512, MXP_DTYPE_F32, 0, 2, 1, 16}, /* 1120 KiB: small-M (272 + 288) */
        {30, 300, 300, MXP_DTYPE_F32, 2, 3, 1, 0},
        {300, 300, 300, MXP_DTYPE_F16, 0, 3, -1, 0},
        {100, 1000, 200, MXP_DTYPE_F16, 3, 3, 1, 0},
    };
    int max_threads = mxp_threads_max();
    for (size_t q = 0; q < sizeof sh / sizeof sh[0]; q++) {
        bool ta = sh[q].tr & 1, tb = sh[q].tr >> 1;
        mxp_gemm_args g = {
            .trans_a = ta, .trans_b = tb, .M = (int64_t)sh[q].M, .N = (int64_t)sh[q].N,
            .K = (int64_t)sh[q].K, .a_type = sh[q].t, .A = NULL,
            .lda = (int64_t)(ta ? sh[q].M : sh[q].K), .b_type = sh[q].t, .B = NULL,
            .ldb = (int64_t)(tb ? sh[q].K : sh[q].N), .C = NULL, .ldc = (int64_t)sh[q].N,
            .alpha = 1.0f, .beta = 0.0f,
        };
        /* in_place only forms addresses; a non-NULL base keeps it honest */
        static float dummy;
        g.A = &dummy;
        g.B = &dummy;
        g.C = &dummy;
        mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, sh[q].threads, false};
        size_t lo[MXP_GEMM_MAX_PARTS], hi[MXP_GEMM_MAX_PARTS];
        bool split_n;
        int parts = mxp_avx512_gemm_split(&g, &o, &split_n, lo, hi);
        int want_parts = sh[q].threads < max_threads ? sh[q].threads : max_threads;
        CHECK_MSG(parts == want_parts, "split %zux%zux%zu: %d parts, expected %d", sh[q].M,
                  sh[q].N, sh[q].K, parts, want_parts);
        if (parts < 2) continue;
        /* the named directions and units were written for Zen 4's tune
         * (tune.c: vdpbf16ps fast, FP32 read in place up to ld 1024); on
         * another tune a row whose plan depends on it is checked for the
         * cut's properties only */
        const mxp_avx512_tune *tu = mxp_avx512_tune_get();
        bool zen = tu->dpbf16_fast && tu->in_place_max_ld == 1024;
        bool dep = sh[q].t == MXP_DTYPE_BF16 ||
                   (sh[q].t == MXP_DTYPE_F32 && ((ta && sh[q].M > 256 && sh[q].M <= 1024) ||
                                                 (!tb && sh[q].N > 256 && sh[q].N <= 1024)));
        bool named = zen || !dep;
        if (sh[q].want_n >= 0 && named)
            CHECK_MSG(split_n == (sh[q].want_n == 1), "split %zux%zux%zu %s tr %d: cut %c",
                      sh[q].M, sh[q].N, sh[q].K, mxp_dtype_name(sh[q].t), sh[q].tr,
                      split_n ? 'N' : 'M');
        bool small = split_n && sh[q].M <= MXP_GEMM_SMALL_M && sh[q].t == MXP_DTYPE_F32;
        size_t ext = split_n ? sh[q].N : sh[q].M;
        size_t unit = !split_n ? 1 : sh[q].unit ? sh[q].unit : small ? 16 : MXP_GEMM_NR;
        if (split_n && !named) { /* whole NR tiles, or 16-column lines (small-M path) */
            unit = MXP_GEMM_NR;
            for (int i = 0; i < parts; i++)
                if (lo[i] % MXP_GEMM_NR) unit = 16;
        }
        size_t most = 0, least = SIZE_MAX;
        for (int i = 0; i < parts; i++) {
            CHECK(lo[i] == (i ? hi[i - 1] : 0) && lo[i] <= hi[i]);
            CHECK_MSG(lo[i] % unit == 0, "part %d starts at %zu, not a multiple of %zu", i,
                      lo[i], unit);
            size_t units = (hi[i] - lo[i] + unit - 1) / unit;
            if (units > most) most = units;
            if (units < least) least = units;
        }
        CHECK(hi[parts - 1] == ext);
        CHECK_MSG(most - least <= 1, "split %zux%zux%zu: parts of %zu to %zu units of %zu",
                  sh[q].M, sh[q].N, sh[q].K, least, most, unit);
    }
}

/* Each row of C computed alone (a 1-row GEMM on one thread) must equal the
 * same row of got bit for bit: no element's arithmetic depends on the
 * other rows of its micro-tile, the DPBF16 subnormal fallback included. */
static void check_rows_alone(const gcase *c, const gbufs *b, const float *got, const char *what) {
    float *row = test_xmalloc(c->N * sizeof(float) + 1);
    size_t bad_rows = 0;
    for (size_t i = 0; i < c->M; i++) {
        memcpy(row, b->C0 + i * b->ldc, c->N * sizeof(float));
        size_t es = mxp_dtype_info(c->at)->size;
        mxp_gemm_args g = args_for(c, b, row);
        g.M = 1;
        g.A = (const char *)b->A.p + (c->ta ? i : i * b->A.ld) * es;
        mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, 1, true};
        mxp_avx512_gemm_ex(&g, &o);
        bad_rows += count_differ(row, got + i * b->ldc, c->N) != 0;
    }
    test_checks++;
    if (bad_rows)
        test_fail(__FILE__, __LINE__, "%s %zux%zux%zu: %zu rows differ from the row alone", what,
                  c->M, c->N, c->K, bad_rows);
    free(row);
}

/* BF16 subnormals in rows of op(A) at and next to the cut points of 2 and
 * 3 threads (and inside micro-panels that straddle them), some only in
 * the first K block, some columns of op(B) with subnormals too: the other
 * operand ~2^100 so a subnormal read as zero misses by far more than the
 * tolerance. Against the generic GEMM, 1 vs 2 vs 3 threads bit for bit,
 * and every row equal to that row computed alone. The other rows of op(A)
 * span 40 binades, so their sums round and the vdpbf16ps pair order gives
 * other bits than the FP32 fallback: a row that took the fallback for a
 * neighbour's subnormal would show. */
static void test_split_subnormal_rows(void) {
    static const struct { size_t M, N, K; int tr; } sh[] = {
        {128, 256, 256, 2}, {128, 200, 1100, 1}, {129, 96, 300, 0}, {64, 512, 256, 3},
    };
    /* rows near the cuts of 128 rows: 2 threads at 64, 3 at 42 and 85 (129:
     * 43, 86), micro-panel edges at 14 and 56; -1 ends */
    static const int sub_rows[] = {13, 14, 41, 42, 43, 63, 64, 85, 86, 127, -1};
    for (size_t q = 0; q < sizeof sh / sizeof sh[0]; q++) {
        gcase d = {.at = MXP_DTYPE_BF16, .bt = MXP_DTYPE_BF16, .ta = sh[q].tr & 1,
                   .tb = sh[q].tr >> 1, .M = sh[q].M, .N = sh[q].N, .K = sh[q].K,
                   .pad_a = 1, .pad_b = 2, .pad_c = 3, .alpha = q & 1 ? 1.0f : 0.75f,
                   .beta = q & 1 ? 1.0f : 0.0f};
        gbufs e = bufs_make(&d);
        for (int o = 0; o < 2; o++) {
            size_t rows = o == 0 ? d.M : d.N;
            tmat *m = o == 0 ? &e.A : &e.B;
            bool k_fast = o == 0 ? !d.ta : d.tb; /* k contiguous in storage */
            for (size_t r = 0; r < rows; r++) {
                bool sub = false;
                if (o == 0)
                    for (int s = 0; sub_rows[s] >= 0; s++) sub |= (size_t)sub_rows[s] == r;
                else
                    sub = r == 40 || r == 100; /* two B micro-panels */
                for (size_t k = 0; k < d.K; k++) {
                    uint16_t sign = (uint16_t)(mxp_rng_below(&gemm_rng, 2) << 15), bits;
                    uint16_t man = (uint16_t)mxp_rng_below(&gemm_rng, 128);
                    bool early = k < (d.K + 1) / 2; /* K = 1100: the first of 2 blocks */
                    if (sub && (o == 1 ? k % 5 == 0 : (early || r % 2 == 0) && k % 3 == 0))
                        bits = (uint16_t)(sign | 64u | (man & 63u)); /* subnormal */
                    else if (o == 1) /* op(B): 2^100 .. 2^104 */
                        bits = (uint16_t)(sign | ((227u + mxp_rng_below(&gemm_rng, 4)) << 7) | man);
                    else if (sub) /* op(A): 2^-126 .. 2^-123, normal */
                        bits = (uint16_t)(sign | ((1u + mxp_rng_below(&gemm_rng, 3)) << 7) | man);
                    else /* 2^-126 .. 2^-86: sums that round, so that the vdpbf16ps
                          * and FP32 FMA orders give different bits */
                        bits = (uint16_t)(sign | ((1u + mxp_rng_below(&gemm_rng, 40)) << 7) | man);
                    ((uint16_t *)m->p)[k_fast ? r * m->ld + k : k * m->ld + r] = bits;
                }
            }
        }
        run_case(&d, &e, true);
        float *one = test_xmalloc(e.nc * sizeof(float) + 1);
        float *got = test_xmalloc(e.nc * sizeof(float) + 1);
        for (int th = 1; th <= 3; th++) {
            float *dst = th == 1 ? one : got;
            memcpy(dst, e.C0, e.nc * sizeof(float));
            mxp_gemm_args g = args_for(&d, &e, dst);
            mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, false};
            mxp_avx512_gemm_ex(&g, &o);
            if (th == 1) {
                check_rows_alone(&d, &e, one, "subnormal rows");
                continue;
            }
            size_t n = count_differ(one, got, e.nc);
            CHECK_MSG(n == 0, "subnormal rows %zux%zux%zu: 1 and %d threads differ in %zu",
                      d.M, d.N, d.K, th, n);
        }
        free(one);
        free(got);
        bufs_free(&e);
    }
}

int main(void) {
    if (!gemm_cases_init("test_gemm_isa_split", 20240603)) return 0;
    test_split_plan();
    test_split_subnormal_rows();
    return test_finish("test_gemm_isa_split");
}
