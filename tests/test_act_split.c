/* tests/test_act_split.c: GELU and its backward with erf's large branch on
 * the large lanes only (kernels/x86_avx512/loops_split.h) give the bits of
 * the per-vector computation (v_gelu, v_gelu_grad of loops_simd.h), for
 * every kind of input.
 *
 * The oracle is the same kernel with the split switched off
 * (mxp_avx512_act_split_enable(false)): the per-vector functions, as the
 * code computed before the split. Compared bit for bit: every output byte,
 * absmax bits and non-finite counts of the fused passes.
 *
 * Inputs: FP32 patterns on a strided grid over all 2^32 (step 4093: every
 * exponent, both signs, ~2,000 mantissas each, NaN payloads), plus +-0,
 * +-Inf, quiet / signalling NaNs, the smallest and largest subnormals and
 * normals, and the neighbours (+-4 ulp) of erf's cut |x| = 0.921875, of
 * |x| = 4 and of exp's clamps, all as x / sqrt 2 = those. They are split
 * into the small pool (|v / sqrt 2| < 0.921875) and the large one (the
 * rest, NaN included) and dealt out vector by vector: each 16-lane vector
 * gets a random number 0..16 of large lanes at random positions (so
 * all-small and all-large vectors occur, and every mix between). dY: random
 * normals with 0, -0, subnormals, huge values, Inf and NaN mixed in.
 *
 * Kernels (AVX-512 table): gelu_fwd and gelu_bwd (also in place) over
 * lengths around the lane and piece sizes; bias_act_store with GELU, y
 * FP32 / BF16 / FP16 (16-bit tables off, so GELU is computed from the
 * widened stored value), a FP32 / BF16, in row shapes that make whole-row
 * pieces, row segments and tails, over the pool; act_bwd_store with GELU,
 * dY / saved / dX in FP32 / BF16 / FP16 combinations (tables off). Under
 * the default MXCSR and again with flush-to-zero (mxp_fpenv_set_ftz).
 *
 * The test can fail: a hand mutation of loops_split.h that perturbs the
 * large branch's result of one lane (lane 0 of each piece's first dense
 * vector, + 1 ulp) made gelu_fwd, gelu_bwd and both fused passes fail
 * here; and the comparison itself is checked to see a one-bit change.
 */
#include "kernels/x86_avx512/avx512.h"
#include "kernels/x86_avx512/loops.h"
#include "kernel_slots.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mxp_rng rng;

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the input pools ---- */

typedef struct pool {
    float *v;
    size_t n, cap;
} pool;

static void pool_add(pool *p, float v) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        float *nv = test_xmalloc(p->cap * sizeof(float));
        if (p->v) memcpy(nv, p->v, p->n * sizeof(float));
        free(p->v);
        p->v = nv;
    }
    p->v[p->n++] = v;
}

static pool small_pool, large_pool;

/* erf's small branch takes x = v / sqrt 2 with |x| < 0.921875 (ordered). */
static void add_value(float v) {
    const float x = v * 0.70710678118654752440f;
    if (fabsf(x) < 0.921875f) pool_add(&small_pool, v);
    else pool_add(&large_pool, v);
}

/* v and its neighbours, +-4 ulp, both signs. */
static void add_around(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    for (int d = -4; d <= 4; d++) {
        add_value(from_bits(u + (uint32_t)d));
        add_value(from_bits((u + (uint32_t)d) ^ 0x80000000u));
    }
}

static void make_pools(void) {
    for (uint64_t u = 0; u < (1ull << 32); u += 4093) add_value(from_bits((uint32_t)u));
    static const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                        0x7fbfffffu, 0x7fc12345u, 0x00000001u, 0x80000001u,
                                        0x007fffffu, 0x807fffffu, 0x00800000u, 0x80800000u,
                                        0x7f7fffffu, 0xff7fffffu};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        add_value(from_bits(specials[i]));
    /* erf's cut, |x| = 4, exp's clamps (-x^2 near -100 .. -160) */
    static const float cuts[] = {0.921875f, 4.0f, 10.0f, 12.649f, 1.0f, 2.4609375f};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        add_around(cuts[i] * 1.41421356237309504880f);
    CHECK(small_pool.n > 1000 && large_pool.n > 1000);
}

static float pick(const pool *p) { return p->v[mxp_rng_u32(&rng) % p->n]; }

/* n values, vector by vector: a random count 0..16 of large lanes at
 * random positions, the rest small. */
static void deal(float *v, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        const unsigned large = mxp_rng_u32(&rng) % 17;
        float vec[16];
        for (unsigned j = 0; j < 16; j++) vec[j] = j < large ? pick(&large_pool) : pick(&small_pool);
        for (unsigned j = 15; j > 0; j--) { /* shuffle the lanes */
            const unsigned r = mxp_rng_u32(&rng) % (j + 1);
            const float t = vec[j];
            vec[j] = vec[r], vec[r] = t;
        }
        for (size_t j = 0; j < 16 && i + j < n; j++) v[i + j] = vec[j];
    }
}

static void fill_dy(float *d, size_t n) {
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x00000003u, 0x7f000000u,
                                  0x7f800000u, 0xff800000u, 0x7fc00000u};
    for (size_t i = 0; i < n; i++) {
        const uint32_t r = mxp_rng_u32(&rng) % 64;
        d[i] = r < 7 ? from_bits(sp[r]) : mxp_rng_normal(&rng);
    }
}

/* ---- comparisons ---- */

/* The byte offset of the first element (esize bytes) that differs, or bytes. */
static size_t first_diff(const void *got, const void *ref, size_t bytes, size_t esize) {
    if (memcmp(got, ref, bytes) == 0) return bytes;
    size_t i = 0;
    while (i < bytes && memcmp((const char *)got + i, (const char *)ref + i, esize) == 0) i += esize;
    return i;
}

static bool same_bytes(const char *what, const void *got, const void *ref, size_t bytes,
                       size_t esize) {
    const size_t i = first_diff(got, ref, bytes, esize);
    if (i == bytes) return true;
    uint32_t g = 0, r = 0;
    memcpy(&g, (const char *)got + i, esize);
    memcpy(&r, (const char *)ref + i, esize);
    test_fail(__FILE__, __LINE__, "%s: element %zu: split 0x%08x, per-vector 0x%08x", what,
              i / esize, g, r);
    return false;
}

/* ---- unfused kernels ---- */

static const size_t kLens[] = {1, 5, 15, 16, 17, 31, 33, 1000, 1023, 1024, 1025, 2047, 4113,
                               300001};

static bool eltwise_case(const mxp_kernels *k, size_t n, const char *mode) {
    float *x = test_xmalloc(n * 4), *dy = test_xmalloc(n * 4);
    float *ref = test_xmalloc(n * 4), *got = test_xmalloc(n * 4), *inp = test_xmalloc(n * 4);
    deal(x, n);
    fill_dy(dy, n);
    char what[96];
    bool ok = true;
    for (int bwd = 0; bwd < 2; bwd++) {
        mxp_avx512_act_split_enable(false);
        if (bwd) k->gelu_bwd(ref, dy, x, n);
        else k->gelu_fwd(ref, x, n);
        mxp_avx512_act_split_enable(true);
        if (bwd) k->gelu_bwd(got, dy, x, n);
        else k->gelu_fwd(got, x, n);
        snprintf(what, sizeof what, "%s %s n=%zu", mode, bwd ? "gelu_bwd" : "gelu_fwd", n);
        ok &= same_bytes(what, got, ref, n * 4, 4);
        /* in place: y aliases x, dx aliases dy */
        memcpy(inp, bwd ? dy : x, n * 4);
        if (bwd) k->gelu_bwd(inp, inp, x, n);
        else k->gelu_fwd(inp, inp, n);
        snprintf(what, sizeof what, "%s %s in place n=%zu", mode, bwd ? "gelu_bwd" : "gelu_fwd", n);
        ok &= same_bytes(what, inp, ref, n * 4, 4);
    }
    free(x), free(dy), free(ref), free(got), free(inp);
    return ok;
}

/* ---- fused passes ---- */

typedef struct fwd_out {
    float *y;
    void *yo, *ao;
    mxp_epilogue e;
    ks_epi_slots r; /* e's result slots */
} fwd_out;

static void run_fwd(const mxp_kernels *k, bool split, const float *y0, const float *bias,
                    int64_t B, int64_t C, mxp_dtype yt, mxp_dtype at, fwd_out *o) {
    const size_t n = (size_t)B * (size_t)C;
    memcpy(o->y, y0, n * 4);
    memset(o->ao, 0x5a, n * 4);
    mxp_avx512_act_split_enable(split);
    o->e = (mxp_epilogue){.y = o->y, .bias = bias, .B = B, .C = C, .y_type = yt,
                          .y_out = yt == MXP_DTYPE_F32 ? (void *)o->y : o->yo,
                          .act = MXP_ACT_GELU, .a_type = at, .a_out = o->ao};
    ks_epi_bind(&o->e, &o->r);
    k->bias_act_store(&o->e);
    mxp_avx512_act_split_enable(true);
}

static bool fwd_case(const mxp_kernels *k, int64_t B, int64_t C, mxp_dtype yt, mxp_dtype at,
                     const char *mode) {
    const size_t n = (size_t)B * (size_t)C;
    float *y0 = test_xmalloc(n * 4), *bias = test_xmalloc((size_t)C * 4);
    deal(y0, n);
    for (int64_t c = 0; c < C; c++) bias[c] = (mxp_rng_u32(&rng) % 4 == 0) ? 0.0f : 0.01f * mxp_rng_normal(&rng);
    fwd_out o[2];
    for (int s = 0; s < 2; s++) {
        o[s].y = test_xmalloc(n * 4);
        o[s].yo = test_xmalloc(n * 4);
        o[s].ao = test_xmalloc(n * 4);
        run_fwd(k, s == 1, y0, bias, B, C, yt, at, &o[s]);
    }
    char what[128];
    snprintf(what, sizeof what, "%s bias_act_store GELU %lldx%lld %s -> %s", mode, (long long)B,
             (long long)C, mxp_dtype_name(yt), mxp_dtype_name(at));
    const size_t as = mxp_dtype_info(at)->size;
    bool ok = same_bytes(what, o[1].ao, o[0].ao, n * as, as);
    ok &= same_bytes(what, o[1].y, o[0].y, n * 4, 4);
    const uint32_t ga = test_f32_bits(o[1].r.a_amax), ra = test_f32_bits(o[0].r.a_amax);
    const bool scan = ga == ra && o[1].r.a_nonfinite == o[0].r.a_nonfinite &&
                      test_f32_bits(o[1].r.y_amax) == test_f32_bits(o[0].r.y_amax) &&
                      o[1].r.y_nonfinite == o[0].r.y_nonfinite;
    CHECK_MSG(scan, "%s: a_amax 0x%08x / 0x%08x, a_nonfinite %lld / %lld", what, ga, ra,
              (long long)o[1].r.a_nonfinite, (long long)o[0].r.a_nonfinite);
    ok &= scan;
    for (int s = 0; s < 2; s++) free(o[s].y), free(o[s].yo), free(o[s].ao);
    free(y0), free(bias);
    return ok;
}

static bool bwd_case(const mxp_kernels *k, size_t n, mxp_dtype dt, mxp_dtype st, mxp_dtype xt,
                     const char *mode) {
    float *v = test_xmalloc(n * 4);
    void *dy = test_xmalloc(n * 4), *s = test_xmalloc(n * 4);
    void *dx[2] = {test_xmalloc(n * 4), test_xmalloc(n * 4)};
    fill_dy(v, n);
    k->convert(dt, dy, MXP_DTYPE_F32, v, n);
    deal(v, n);
    k->convert(st, s, MXP_DTYPE_F32, v, n);
    mxp_act_bwd e[2];
    ks_bwd_slots r[2]; /* their result slots */
    for (int i = 0; i < 2; i++) {
        memset(dx[i], 0x5a, n * 4);
        e[i] = (mxp_act_bwd){.act = MXP_ACT_GELU, .n = n, .dy_type = dt, .dy = dy, .s_type = st,
                             .s = s, .dx_type = xt, .dx = dx[i]};
        ks_bwd_bind(&e[i], &r[i]);
        mxp_avx512_act_split_enable(i == 1);
        k->act_bwd_store(&e[i]);
        mxp_avx512_act_split_enable(true);
    }
    char what[128];
    snprintf(what, sizeof what, "%s act_bwd_store GELU n=%zu dy %s s %s dx %s", mode, n,
             mxp_dtype_name(dt), mxp_dtype_name(st), mxp_dtype_name(xt));
    const size_t xs = mxp_dtype_info(xt)->size;
    bool ok = same_bytes(what, dx[1], dx[0], n * xs, xs);
    const bool scan = test_f32_bits(r[1].dx_amax) == test_f32_bits(r[0].dx_amax) &&
                      r[1].dx_nonfinite == r[0].dx_nonfinite;
    CHECK_MSG(scan, "%s: amax 0x%08x / 0x%08x, nonfinite %lld / %lld", what,
              test_f32_bits(r[1].dx_amax), test_f32_bits(r[0].dx_amax),
              (long long)r[1].dx_nonfinite, (long long)r[0].dx_nonfinite);
    ok &= scan;
    free(v), free(dy), free(s), free(dx[0]), free(dx[1]);
    return ok;
}

static void run_all(const mxp_kernels *k, const char *mode) {
    for (size_t i = 0; i < sizeof kLens / sizeof kLens[0]; i++)
        CHECK(eltwise_case(k, kLens[i], mode));
    static const int64_t shapes[][2] = {{1, 1}, {3, 17}, {7, 1000}, {5, 1024}, {2, 3001},
                                        {256, 512}, {64, 700}};
    static const mxp_dtype ys[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    mxp_avx512_act16_enable(false); /* 16-bit inputs computed, not looked up */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t yi = 0; yi < 3; yi++)
            for (int ai = 0; ai < 2; ai++)
                CHECK(fwd_case(k, shapes[si][0], shapes[si][1], ys[yi],
                               ai ? MXP_DTYPE_BF16 : MXP_DTYPE_F32, mode));
    static const mxp_dtype combos[][3] = {
        {MXP_DTYPE_F32, MXP_DTYPE_F32, MXP_DTYPE_F32},   {MXP_DTYPE_BF16, MXP_DTYPE_F32, MXP_DTYPE_F32},
        {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F32},  {MXP_DTYPE_F16, MXP_DTYPE_F16, MXP_DTYPE_F16},
        {MXP_DTYPE_BF16, MXP_DTYPE_BF16, MXP_DTYPE_BF16}, {MXP_DTYPE_F32, MXP_DTYPE_F32, MXP_DTYPE_BF16}};
    static const size_t bl[] = {1, 17, 1000, 1025, 40000, 131072};
    for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++)
        for (size_t li = 0; li < sizeof bl / sizeof bl[0]; li++)
            CHECK(bwd_case(k, bl[li], combos[ci][0], combos[ci][1], combos[ci][2], mode));
    mxp_avx512_act16_enable(true);
}

int main(void) {
    if (!mxp_avx512_usable(mxp_cpu_features_get())) {
        printf("test_act_split: the CPU cannot run the AVX-512 table; nothing to test\n");
        return test_finish("test_act_split");
    }
    mxp_rng_init(&rng, 20261124);
    make_pools();
    /* the comparison sees a one-bit change */
    const float a[2] = {1.0f, 2.0f};
    float b[2] = {1.0f, 2.0f};
    b[1] = from_bits(test_f32_bits(b[1]) ^ 1u);
    CHECK_MSG(first_diff(b, a, sizeof a, 4) == 4, "the comparison missed a one-bit change");
    const mxp_kernels *k = mxp_kernels_avx512();
    run_all(k, "default");
    if (mxp_fpenv_set_ftz(true)) {
        run_all(k, "ftz");
        mxp_fpenv_set_ftz(false);
    } else {
        printf("test_act_split: flush-to-zero not supported here, that part skipped\n");
    }
    CHECK(mxp_avx512_act_split_enabled());
    free(small_pool.v), free(large_pool.v);
    return test_finish("test_act_split");
}
