/* tests/gemm_cases.c: the AVX-512 GEMM tests' shared cases and checks
 * (contracts and the tolerance in gemm_cases.h). */
#include "gemm_cases.h"

#include <stdlib.h>
#include <string.h>

mxp_rng gemm_rng;

bool gemm_cases_init(const char *name, uint64_t seed) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("%s: skipped: no AVX-512\n", name);
        return false;
    }
    setenv("MIXPREC_NUM_THREADS", "3", 0);
    mxp_rng_init(&gemm_rng, seed);
    CHECK(mxp_kernels_avx512()->gemm != mxp_kernels_generic()->gemm);
    return true;
}

tmat tmat_make(mxp_dtype t, size_t rows, size_t cols, size_t ld) {
    tmat m = {t, rows, cols, ld, NULL};
    size_t n = rows ? (rows - 1) * ld + cols : 0;
    m.p = test_xmalloc(n * mxp_dtype_info(t)->size);
    for (size_t i = 0; i < n; i++) mxp_store_f32(t, m.p, i, NAN);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            mxp_store_f32(t, m.p, r * ld + c, 2.0f * mxp_rng_uniform(&gemm_rng) - 1.0f);
    return m;
}

float tmat_at(const tmat *m, size_t r, size_t c) {
    return mxp_load_f32(m->t, m->p, r * m->ld + c);
}

gbufs bufs_make(const gcase *c) {
    gbufs b;
    b.A = c->ta ? tmat_make(c->at, c->K, c->M, c->M + c->pad_a)
                : tmat_make(c->at, c->M, c->K, c->K + c->pad_a);
    b.B = c->tb ? tmat_make(c->bt, c->N, c->K, c->K + c->pad_b)
                : tmat_make(c->bt, c->K, c->N, c->N + c->pad_b);
    b.ldc = c->N + c->pad_c;
    b.nc = c->M ? (c->M - 1) * b.ldc + c->N : 0;
    b.C0 = test_xmalloc(b.nc * sizeof(float));
    for (size_t i = 0; i < b.nc; i++) b.C0[i] = NAN;
    if (c->beta != 0.0f)
        for (size_t i = 0; i < c->M; i++)
            for (size_t j = 0; j < c->N; j++)
                b.C0[i * b.ldc + j] = 2.0f * mxp_rng_uniform(&gemm_rng) - 1.0f;
    return b;
}

void bufs_free(gbufs *b) {
    free(b->A.p);
    free(b->B.p);
    free(b->C0);
}

mxp_gemm_args args_for(const gcase *c, const gbufs *b, float *C) {
    return (mxp_gemm_args){
        .trans_a = c->ta, .trans_b = c->tb, .M = (int64_t)c->M, .N = (int64_t)c->N,
        .K = (int64_t)c->K, .a_type = c->at, .A = b->A.p, .lda = (int64_t)b->A.ld,
        .b_type = c->bt, .B = b->B.p, .ldb = (int64_t)b->B.ld, .C = C,
        .ldc = (int64_t)b->ldc, .alpha = c->alpha, .beta = c->beta,
    };
}

float opa(const gcase *c, const gbufs *b, size_t i, size_t k) {
    return c->ta ? tmat_at(&b->A, k, i) : tmat_at(&b->A, i, k);
}

float opb(const gcase *c, const gbufs *b, size_t k, size_t j) {
    return c->tb ? tmat_at(&b->B, j, k) : tmat_at(&b->B, k, j);
}

int compare(const gcase *c, const gbufs *b, const float *got, const float *ref,
            const char *what) {
    int bad = 0;
    double rtol = 2.0 * ((double)c->K + 2.0) * 0x1p-24;
    float *arow = test_xmalloc(c->K * sizeof(float));
    for (size_t i = 0; i < c->M; i++) {
        for (size_t k = 0; k < c->K; k++) arow[k] = opa(c, b, i, k);
        for (size_t j = 0; j < b->ldc && i * b->ldc + j < b->nc; j++) {
            size_t at = i * b->ldc + j;
            bool ok;
            if (j >= c->N) {
                ok = test_f32_bits(got[at]) == test_f32_bits(b->C0[at]);
            } else if (isnan(ref[at]) || isinf(ref[at])) {
                ok = isnan(ref[at]) ? isnan(got[at]) : got[at] == ref[at];
            } else {
                double s = 0.0;
                for (size_t k = 0; k < c->K; k++) s += fabs((double)arow[k] * opb(c, b, k, j));
                s = fabs((double)c->alpha) * s;
                if (c->beta != 0.0f) s += fabs((double)c->beta * b->C0[at]);
                ok = isfinite(got[at]) && fabs((double)got[at] - ref[at]) <= ATOL + rtol * s;
            }
            test_checks++;
            if (!ok) {
                if (bad < 3)
                    test_fail(__FILE__, __LINE__,
                              "%s %s x %s %c%c M=%zu N=%zu K=%zu pads %zu/%zu/%zu a=%g b=%g: "
                              "C[%zu][%zu] = %.9g, generic %.9g",
                              what, mxp_dtype_name(c->at), mxp_dtype_name(c->bt),
                              c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->M, c->N, c->K,
                              c->pad_a, c->pad_b, c->pad_c, (double)c->alpha,
                              (double)c->beta, i, j, (double)got[at], (double)ref[at]);
                else
                    test_failures++;
                bad++;
            }
        }
    }
    free(arow);
    return bad;
}

void run_case(const gcase *c, const gbufs *b, bool both_threads) {
    float *ref = test_xmalloc(b->nc * sizeof(float) + 1);
    float *got = test_xmalloc(b->nc * sizeof(float) + 1);
    memcpy(ref, b->C0, b->nc * sizeof(float));
    mxp_gemm_args g = args_for(c, b, ref);
    mxp_kernels_generic()->gemm(&g);
    /* AUTO, F32, and DPBF16 where it applies but AUTO does not take it (a
     * CPU whose vdpbf16ps is slow, tune.c): every path is checked on every
     * CPU */
    for (int path = MXP_GEMM_PATH_AUTO; path <= MXP_GEMM_PATH_DPBF16; path++) {
        if (path == MXP_GEMM_PATH_DPBF16 &&
            (mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_DPBF16) != MXP_GEMM_PATH_DPBF16 ||
             mxp_avx512_gemm_path_for(&g, MXP_GEMM_PATH_AUTO) == MXP_GEMM_PATH_DPBF16))
            continue;
        float *one = NULL;
        for (int threads = 1; threads <= (both_threads ? 2 : 1); threads++) {
            memcpy(got, b->C0, b->nc * sizeof(float));
            g = args_for(c, b, got);
            mxp_avx512_gemm_opts o = {(mxp_gemm_path)path, threads, false};
            mxp_avx512_gemm_ex(&g, &o);
            compare(c, b, got, ref, path == MXP_GEMM_PATH_F32      ? "f32-path"
                                    : path == MXP_GEMM_PATH_DPBF16 ? "dpbf16-path"
                                                                   : "auto-path");
            if (threads == 1 && both_threads) {
                one = test_xmalloc(b->nc * sizeof(float) + 1);
                memcpy(one, got, b->nc * sizeof(float));
            } else if (one) {
                CHECK_MSG(memcmp(one, got, b->nc * sizeof(float)) == 0,
                          "1 and 2 threads differ: M=%zu N=%zu K=%zu", c->M, c->N, c->K);
            }
        }
        free(one);
    }
    free(ref);
    free(got);
}

void run_gcase(const gcase *c, bool both_threads) {
    gbufs b = bufs_make(c);
    run_case(c, &b, both_threads);
    bufs_free(&b);
}

size_t count_differ(const float *x, const float *y, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += test_f32_bits(x[i]) != test_f32_bits(y[i]) && !(isnan(x[i]) && isnan(y[i]));
    return d;
}

void vs_packed(const gcase *c, mxp_gemm_path path, int max_threads, const char *what) {
    gbufs b = bufs_make(c);
    float *ref = test_xmalloc(b.nc * sizeof(float) + 1);
    float *got = test_xmalloc(b.nc * sizeof(float) + 1);
    float *pk = test_xmalloc(b.nc * sizeof(float) + 1);
    memcpy(ref, b.C0, b.nc * sizeof(float));
    mxp_gemm_args g = args_for(c, &b, ref);
    mxp_kernels_generic()->gemm(&g);
    memcpy(pk, b.C0, b.nc * sizeof(float));
    g = args_for(c, &b, pk);
    mxp_avx512_gemm_opts po = {MXP_GEMM_PATH_AUTO, 1, true};
    mxp_avx512_gemm_ex(&g, &po);
    for (int threads = 1; threads <= max_threads; threads++) {
        memcpy(got, b.C0, b.nc * sizeof(float));
        g = args_for(c, &b, got);
        mxp_avx512_gemm_opts o = {path, threads, false};
        mxp_avx512_gemm_ex(&g, &o);
        compare(c, &b, got, ref, what);
        size_t d = count_differ(got, pk, b.nc);
        CHECK_MSG(d == 0, "%s vs packed path: %zu differ (%s A, %s B, %c%c M=%zu N=%zu K=%zu "
                  "lda=%zu threads=%d)", what, d, mxp_dtype_name(c->at), mxp_dtype_name(c->bt),
                  c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->M, c->N, c->K, b.A.ld, threads);
    }
    free(ref);
    free(got);
    free(pk);
    bufs_free(&b);
}

float f32_path_oracle(const gcase *c, const gbufs *b, size_t i, size_t j) {
    size_t nb = (c->K + 511) / 512, kb = (c->K + nb - 1) / nb;
    kb += kb & 1;
    float out = b->C0[i * b->ldc + j];
    for (size_t p0 = 0; p0 < c->K; p0 += kb) {
        float acc = 0.0f;
        for (size_t k = p0; k < c->K && k < p0 + kb; k++)
            acc = fmaf(opa(c, b, i, k), opb(c, b, k, j), acc);
        volatile float x = c->alpha * acc; /* rounded to float here */
        if (p0 > 0) out = out + x;
        else out = c->beta == 0.0f ? x : x + c->beta * out;
    }
    return out;
}

size_t f32_sequence_diffs(const gcase *c, const gbufs *b, float *got, int th) {
    memcpy(got, b->C0, b->nc * sizeof(float));
    mxp_gemm_args g = args_for(c, b, got);
    mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, false};
    mxp_avx512_gemm_ex(&g, &o);
    size_t bad = 0;
    for (size_t i = 0; i < c->M; i++)
        for (size_t j = 0; j < c->N; j++)
            bad += test_f32_bits(got[i * b->ldc + j]) !=
                   test_f32_bits(f32_path_oracle(c, b, i, j));
    return bad;
}

