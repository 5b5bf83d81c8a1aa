/* tests/test_gemm_epi.c: the GEMM with the forward epilogue (gemm_epi,
 * kernels.h) is bit for bit the GEMM then bias_act_store.
 *
 * Oracle: the contract's two calls of the same table: C0 = gemm(g) (one
 * thread; the GEMM's results do not depend on the thread count, which
 * test_gemm_isa checks), then bias_act_store over a copy of C0. The fused
 * call must give the same bits in every output: y (the FP32 C with the
 * bias added), y_out, a_out (every byte), y_amax / a_amax (bits) and the
 * non-finite counts.
 * Covered, on the AVX-512 table (mxp_avx512_gemm_epi_ex with 1, 2 and 3
 * threads, and the table slot): y / a stored as FP32 (y_out == y, as the
 * forward issues it), BF16, FP16 in every pair; act none / relu / gelu /
 * tanh; with and without bias; NaN, +-Inf and FP16-overflowing values in C;
 * the small-M path (M <= 32, FP32 B: epilogue per 512 columns), the packed
 * F32 path with M, N not multiples of MR = 14 / NR = 32, N > NC (two column
 * blocks, rows longer than a piece: row segments), several K blocks (K >
 * 512 on the F32 path, K > 1024 on the BF16 path), gemm_range_l2 (FP16 or
 * BF16 operands, a batch-sized M and a wide N), the vdpbf16ps path with
 * BF16 subnormal inputs (the F32 fallback tiles), an M cut and an N cut of
 * the threads, a C whose geometry does not fit (ldc > N: the two calls);
 * B stored [N, K] (the forward's NT GEMM) and [K, N] (the dX GEMM's NN).
 * The generic table's gemm_epi against its gemm then bias_act_store.
 * MIXPREC_TEST_QUICK=1 runs a stride of the combinations.
 */
#include "kernels/generic/generic.h"
#include "kernels/x86_avx512/gemm_internal.h"
#include "kernel_slots.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const mxp_dtype store_types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
enum { N_COMBOS = 3 * 3 * MXP_ACT_COUNT * 2 };

static bool quick;

/* operand dtype pairs of the shape tables (A, B) */
#define F32_F32 MXP_DTYPE_F32, MXP_DTYPE_F32
#define BF_BF MXP_DTYPE_BF16, MXP_DTYPE_BF16
#define H_H MXP_DTYPE_F16, MXP_DTYPE_F16

typedef struct shape {
    const char *what;
    int64_t M, N, K;
    mxp_dtype at, bt;   /* operand dtypes (A [M, K], B [N, K]: the forward's NT) */
    bool specials;      /* NaN / Inf / huge values in A */
    bool bf16_sub;      /* BF16 subnormals in A and B */
    bool packed_only;   /* never the small-M path */
    int stride;         /* run every stride-th combination (>= 1) */
    bool nn;            /* B stored [K, N] (the backward's dX GEMM), else [N, K] */
} shape;

/* rows x cols values N(0, 1) as dtype t (exact in t); with `specials`, one
 * NaN, +-Inf or 3e4 (products past FP16's 65504) in every fifth row, so
 * those rows of C are non-finite or large and the others finite; with
 * `bf16_sub`, BF16 subnormals sprinkled everywhere. */
static void *make_operand(mxp_dtype t, size_t rows, size_t cols, mxp_rng *r, bool specials,
                          bool bf16_sub) {
    const size_t n = rows * cols;
    float *v = test_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = mxp_rng_normal(r);
    if (specials)
        for (size_t i = 1; i < rows; i += 5) {
            static const float sp[] = {NAN, INFINITY, -INFINITY, 3.0e4f};
            v[i * cols + (i * 13) % cols] = sp[i / 5 % 4];
        }
    if (bf16_sub)
        for (size_t i = 3; i < n; i += 61) /* BF16 subnormals */
            v[i] = i & 1 ? 1.0e-39f : -2.5e-39f;
    void *out = test_xmalloc(n * mxp_dtype_info(t)->size);
    mxp_convert(t, out, MXP_DTYPE_F32, v, n);
    free(v);
    return out;
}

typedef struct outs {
    float *y;
    unsigned char *yo, *ao;
    ks_epi_slots r; /* the epilogue's result slots */
} outs;

static void outs_init(outs *o, size_t n, int fillbyte) {
    o->y = test_xmalloc(n * sizeof(float));
    o->yo = test_xmalloc(n * 4);
    o->ao = test_xmalloc(n * 4);
    memset(o->yo, fillbyte, n * 4);
    memset(o->ao, fillbyte, n * 4);
}

static void outs_free(outs *o) { free(o->y), free(o->yo), free(o->ao); }

/* The epilogue of combination c over y [B, C] into o. */
static mxp_epilogue epi_of(int c, float *y, outs *o, const float *bias, int64_t B, int64_t C) {
    const mxp_dtype yt = store_types[c % 3], at = store_types[c / 3 % 3];
    const mxp_act act = (mxp_act)(c / 9 % MXP_ACT_COUNT);
    const bool with_bias = c / (9 * MXP_ACT_COUNT) == 1;
    mxp_epilogue e = {.y = y, .bias = with_bias ? bias : NULL, .B = B, .C = C,
                      .y_type = yt, .y_out = yt == MXP_DTYPE_F32 ? (void *)y : o->yo,
                      .act = act, .a_type = at, .a_out = o->ao};
    ks_epi_bind(&e, &o->r);
    return e;
}

/* Every output of f against r (n elements); true when all bits agree. */
static bool same(const mxp_epilogue *f, const mxp_epilogue *r, size_t n, const char *what) {
    const size_t ys = mxp_dtype_info(r->y_type)->size, as = mxp_dtype_info(r->a_type)->size;
    const bool y = memcmp(f->y, r->y, n * sizeof(float)) == 0;
    const bool yo = r->y_out == (void *)r->y || memcmp(f->y_out, r->y_out, n * ys) == 0;
    const bool ys_ok = test_f32_bits((*f->y_amax)) == test_f32_bits((*r->y_amax)) &&
                       (*f->y_nonfinite) == (*r->y_nonfinite);
    CHECK_MSG(y, "%s: y differs", what);
    CHECK_MSG(yo, "%s: y_out differs", what);
    CHECK_MSG(ys_ok, "%s: y amax %g/%g nonfinite %lld/%lld", what, (double)(*f->y_amax),
              (double)(*r->y_amax), (long long)(*f->y_nonfinite), (long long)(*r->y_nonfinite));
    if (r->act == MXP_ACT_NONE) return y && yo && ys_ok;
    const bool ao = memcmp(f->a_out, r->a_out, n * as) == 0;
    const bool as_ok = test_f32_bits((*f->a_amax)) == test_f32_bits((*r->a_amax)) &&
                       (*f->a_nonfinite) == (*r->a_nonfinite);
    CHECK_MSG(ao, "%s: a_out differs", what);
    CHECK_MSG(as_ok, "%s: a amax %g/%g nonfinite %lld/%lld", what, (double)(*f->a_amax),
              (double)(*r->a_amax), (long long)(*f->a_nonfinite), (long long)(*r->a_nonfinite));
    return y && yo && ys_ok && ao && as_ok;
}

static void run_shape(const mxp_kernels *k, const shape *s, uint64_t seed) {
    const size_t M = (size_t)s->M, N = (size_t)s->N, K = (size_t)s->K, n = M * N;
    mxp_rng r;
    mxp_rng_init(&r, seed);
    void *A = make_operand(s->at, M, K, &r, s->specials, s->bf16_sub);
    void *Bw = s->nn ? make_operand(s->bt, K, N, &r, false, s->bf16_sub)
                     : make_operand(s->bt, N, K, &r, false, s->bf16_sub);
    float *bias = test_xmalloc(N * sizeof(float));
    for (size_t j = 0; j < N; j++) bias[j] = mxp_rng_normal(&r);
    float *C0 = test_xmalloc(n * sizeof(float));
    mxp_gemm_args g = {.trans_a = false, .trans_b = !s->nn, .M = s->M, .N = s->N, .K = s->K,
                       .a_type = s->at, .A = A, .lda = s->K, .b_type = s->bt, .B = Bw,
                       .ldb = s->nn ? s->N : s->K, .C = C0, .ldc = s->N, .alpha = 1.0f,
                       .beta = 0.0f};
    const bool avx = strcmp(k->isa, "avx512") == 0;
    const mxp_avx512_gemm_opts one = {MXP_GEMM_PATH_AUTO, 1, s->packed_only};
    if (avx) mxp_avx512_gemm_ex(&g, &one);
    else k->gemm(&g);
    outs ro, fo;
    outs_init(&ro, n, 0xa5);
    outs_init(&fo, n, 0x5a);
    const int stride = quick ? s->stride * 5 : s->stride;
    int64_t nonfinite_seen = 0, finite_rows = 0;
    for (size_t i = 0; i < M; i++) finite_rows += isfinite(C0[i * N]) != 0;
    for (int c = (int)(seed % (uint64_t)stride); c < N_COMBOS; c += stride) {
        memcpy(ro.y, C0, n * sizeof(float));
        mxp_epilogue re = epi_of(c, ro.y, &ro, bias, s->M, s->N);
        k->bias_act_store(&re);
        nonfinite_seen += *re.y_nonfinite;
        /* AVX-512: 1, 2, 3 threads, then the table slot; generic: the slot */
        for (int run = 0; run < (avx ? 4 : 1); run++) {
            const bool slot = !avx || run == 3;
            const int th = run + 1;
            memset(fo.y, 0xff, n * sizeof(float)); /* NaN: beta = 0 must not read it */
            mxp_epilogue fe = epi_of(c, fo.y, &fo, bias, s->M, s->N);
            mxp_gemm_args gf = g;
            gf.C = fo.y;
            const mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, th, s->packed_only};
            if (slot || !avx) k->gemm_epi(&gf, &fe);
            else mxp_avx512_gemm_epi_ex(&gf, &fe, &o);
            char what[200], how[16];
            snprintf(how, sizeof how, slot ? "table slot" : "%d thread(s)", th);
            snprintf(what, sizeof what,
                     "%s %s%s %lldx%lldx%lld %s x %s: y %s a %s act %d bias %d, %s", k->isa,
                     s->what, s->nn ? " NN" : "", (long long)s->M, (long long)s->N,
                     (long long)s->K, mxp_dtype_name(s->at), mxp_dtype_name(s->bt),
                     mxp_dtype_name(re.y_type), mxp_dtype_name(re.a_type), (int)re.act,
                     re.bias != NULL, how);
            if (!same(&fe, &re, n, what)) break;
        }
    }
    if (s->specials) /* the data reached the non-finite paths, and not only them */
        CHECK_MSG(nonfinite_seen > 0 && finite_rows > 0, "%s: C has %lld non-finite values, "
                  "%lld finite rows", s->what, (long long)nonfinite_seen, (long long)finite_rows);
    outs_free(&ro), outs_free(&fo);
    free(A), free(Bw), free(bias), free(C0);
}

/* A C with ldc > N does not fit the fused form: the two calls, same bits. */
static void test_ldc_mismatch(const mxp_kernels *k) {
    const int64_t M = 20, N = 40, K = 30, ldc = 48;
    mxp_rng r;
    mxp_rng_init(&r, 7);
    float *A = make_operand(MXP_DTYPE_F32, (size_t)M, (size_t)K, &r, false, false);
    float *B = make_operand(MXP_DTYPE_F32, (size_t)N, (size_t)K, &r, false, false);
    float *C1 = test_xmalloc((size_t)(M * ldc) * sizeof(float));
    float *C2 = test_xmalloc((size_t)(M * ldc) * sizeof(float));
    float *a1 = test_xmalloc((size_t)(M * ldc) * sizeof(float));
    float *a2 = test_xmalloc((size_t)(M * ldc) * sizeof(float));
    memset(C1, 0, (size_t)(M * ldc) * sizeof(float));
    memset(C2, 0, (size_t)(M * ldc) * sizeof(float));
    mxp_gemm_args g = {.trans_a = false, .trans_b = true, .M = M, .N = N, .K = K,
                       .a_type = MXP_DTYPE_F32, .A = A, .lda = K, .b_type = MXP_DTYPE_F32,
                       .B = B, .ldb = K, .C = C1, .ldc = ldc, .alpha = 1.0f, .beta = 0.0f};
    /* the epilogue over C's storage as a dense [M, ldc] tensor */
    mxp_epilogue e1 = {.y = C1, .B = M, .C = ldc, .y_type = MXP_DTYPE_F32, .y_out = C1,
                       .act = MXP_ACT_GELU, .a_type = MXP_DTYPE_F32, .a_out = a1};
    mxp_epilogue e2 = e1;
    e2.y = e2.y_out = C2;
    e2.a_out = a2;
    ks_epi_slots r1, r2;
    ks_epi_bind(&e1, &r1);
    ks_epi_bind(&e2, &r2);
    k->gemm_epi(&g, &e1);
    g.C = C2;
    k->gemm(&g);
    k->bias_act_store(&e2);
    (void)same(&e1, &e2, (size_t)(M * ldc), "ldc > N");
    free(A), free(B), free(C1), free(C2), free(a1), free(a2);
}

int main(void) {
    setenv("MIXPREC_NUM_THREADS", "3", 1); /* 1, 2 and 3 threads below */
    quick = getenv("MIXPREC_TEST_QUICK") != NULL;
    const mxp_kernels *G = mxp_kernels_generic();
    const shape generic_shapes[] = {
        {"generic", 33, 70, 45, F32_F32, true, false, false, 1, false},
        {"generic bf16", 17, 1100, 20, BF_BF, false, false, false, 7, false},
    };
    for (size_t i = 0; i < sizeof generic_shapes / sizeof *generic_shapes; i++)
        run_shape(G, &generic_shapes[i], 100 + i);
    test_ldc_mismatch(G);
    const mxp_cpu_features *f = mxp_cpu_features_get();
    if (!mxp_avx512_usable(f)) {
        printf("test_gemm_epi: AVX-512 part skipped: no AVX-512\n");
        return test_finish("test_gemm_epi");
    }
    const mxp_kernels *X = mxp_kernels_avx512();
    CHECK(X->gemm_epi != G->gemm_epi);
    const shape shapes[] = {
        /* small-M path: C^T tiles, the epilogue per 512 columns */
        {"small-M", 7, 75, 40, F32_F32, true, false, false, 1, false},
        {"small-M 2 K blocks", 32, 1100, 600, F32_F32, true, false, false, 5, false},
        /* packed F32 path: edges, M cut */
        {"packed edges", 45, 77, 33, F32_F32, true, false, true, 1, false},
        {"packed 2 K blocks N>NC", 100, 1100, 520, F32_F32, true, false, false, 11, false},
        {"packed bf16 x f32", 300, 200, 70, MXP_DTYPE_BF16, MXP_DTYPE_F32, true, false, false, 3,
         false},
        /* gemm_range_l2: widened FP16 B, then BF16 pairs over 2 K blocks */
        {"l2 f16", 40, 1000, 600, H_H, true, false, false, 7, false},
        {"l2 bf16 2 K blocks", 50, 1300, 1100, BF_BF, true, false, false, 13, false},
        /* vdpbf16ps with BF16 subnormals: the F32 fallback tiles */
        {"dpbf16 subnormals", 61, 130, 90, BF_BF, false, true, false, 1, false},
        {"dpbf16 subnormals l2", 30, 900, 1030, BF_BF, true, true, false, 9, false},
        /* B stored [K, N], as the backward's dX GEMM issues it */
        {"small-M", 20, 600, 70, F32_F32, true, false, false, 3, true},
        {"packed", 150, 300, 530, F32_F32, true, false, false, 5, true},
        {"dpbf16", 64, 260, 1100, BF_BF, true, true, false, 5, true},
        {"l2 f16", 40, 1000, 300, H_H, true, false, false, 7, true},
        /* a batch-sized dX GEMM with a 16-bit weight (the small-M path
         * where it takes FP16 / BF16 op(B), else the packed one) */
        {"M 24 f16", 24, 700, 200, H_H, true, false, false, 5, true},
        {"M 24 bf16", 24, 700, 200, BF_BF, true, true, false, 5, true},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) run_shape(X, &shapes[i], 200 + i);
    test_ldc_mismatch(X);
    return test_finish("test_gemm_epi");
}
