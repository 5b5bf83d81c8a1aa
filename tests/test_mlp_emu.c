/* tests/test_mlp_emu.c: the MLP kernels of the CUDA backend
 * (backend/cuda/mlp_kernels.cu), run on the host by the launch emulator of
 * tests/cuda_emu.h: the same MXP_HD bodies, the same geometry (256-thread
 * blocks, the 65,535-block cap, 1,024 reduction blocks), the same tree and
 * block-order merges. No GPU needed. Oracles:
 *   - the CPU reference table (mxp_kernels_generic) bit for bit where the
 *     rule is the same: bias add, bias grad, ReLU/GELU/tanh forward and
 *     backward (host libm on both sides), the stored bits and amax / count
 *     of the store + scan, dpred of MSE, dgamma/dbeta of layernorm (same
 *     mean/rstd in);
 *   - a long-double oracle with a stated tolerance where the order of a sum
 *     differs from the CPU's: layernorm mean, rstd, y, dx; MSE loss;
 *     softmax cross-entropy loss and dlogits;
 *   - scheduling: every kernel run with its blocks in order, reversed and
 *     permuted gives the same bits.
 * Sizes 1, 255, 256, 257 and past the caps (elements past 65,535 x 256,
 * rows past 65,535 blocks, more than 1,024 x 256 MSE elements).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu.h"
#include "kernels/kernels.h"
#include "testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)urand();
}

static float *fdup(const float *x, size_t n) {
    float *y = test_xmalloc(n * sizeof *y + 1);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* Index of the first differing bit pattern, or n. */
static size_t first_diff(const void *a, const void *b, size_t n, size_t elem) {
    const unsigned char *p = a, *q = b;
    for (size_t i = 0; i < n; i++)
        if (memcmp(p + i * elem, q + i * elem, elem) != 0) return i;
    return n;
}

#define CHECK_BITS(a, b, n, what)                                                         \
    do {                                                                                  \
        size_t d_ = first_diff((a), (b), (n), sizeof *(a));                               \
        CHECK_MSG(d_ == (n), "%s: element %zu of %zu differs", (what), d_, (size_t)(n)); \
    } while (0)

static const size_t ELEM_SIZES[] = {1, 255, 256, 257, 4099};

/* ---- element kernels vs the CPU table, bit for bit ------------------------ */

static void test_bias(void) {
    const mxp_kernels *K = mxp_kernels_generic();
    size_t shapes[][2] = {{1, 1}, {1, 255}, {3, 256}, {2, 257}, {255, 1}, {257, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t B = shapes[s][0], C = shapes[s][1], n = B * C;
        float *y = test_xmalloc(n * 4), *bias = test_xmalloc(C * 4);
        fill(y, n, -3, 3);
        fill(bias, C, -1, 1);
        float *ref = fdup(y, n), *dbr = fdup(bias, C), *dbe = fdup(bias, C);
        K->add_bias(ref, bias, (int64_t)B, (int64_t)C);
        emu_bias_add(y, bias, B, C);
        CHECK_BITS(y, ref, n, "bias add");
        K->bias_grad(dbr, y, (int64_t)B, (int64_t)C);
        emu_bias_grad(dbe, y, B, C);
        CHECK_BITS(dbe, dbr, C, "bias grad");
        free(y), free(bias), free(ref), free(dbr), free(dbe);
    }
    /* Past the block cap: 65,537 x 257 elements > 65,535 x 256, so the
     * grid-stride loop takes a second lap; bias index i % C throughout. */
    size_t B = 65537, C = 257, n = B * C;
    CHECK(mxp_mk_grid(n, MXP_MK_THREADS, MXP_MK_GRID_CAP) == MXP_MK_GRID_CAP);
    float *y = test_xmalloc(n * 4), *bias = test_xmalloc(C * 4);
    for (size_t i = 0; i < n; i++) y[i] = (float)(i % 1000);
    for (size_t c = 0; c < C; c++) bias[c] = 0.5f + (float)c;
    emu_bias_add(y, bias, B, C);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) /* exact: small integers + halves */
        if (y[i] != (float)(i % 1000) + 0.5f + (float)(i % C)) bad++;
    CHECK_MSG(bad == 0, "bias add past the cap: %zu wrong elements", bad);
    free(y), free(bias);
}

static void test_activations(void) {
    const mxp_kernels *K = mxp_kernels_generic();
    for (size_t s = 0; s < sizeof ELEM_SIZES / sizeof ELEM_SIZES[0]; s++) {
        size_t n = ELEM_SIZES[s];
        float *x = test_xmalloc(n * 4), *dy = test_xmalloc(n * 4);
        fill(x, n, -6, 6);
        fill(dy, n, -2, 2);
        if (n > 4) x[0] = -0.0f, x[1] = NAN, x[2] = INFINITY, x[3] = -INFINITY;
        float *ye = test_xmalloc(n * 4), *yr = test_xmalloc(n * 4);
        float *de = test_xmalloc(n * 4), *dr = test_xmalloc(n * 4);
        for (int act = MXP_MK_ACT_RELU; act <= MXP_MK_ACT_TANH; act++) {
            void (*fwd)(float *, const float *, size_t) =
                act == MXP_MK_ACT_RELU ? K->relu_fwd : act == MXP_MK_ACT_GELU ? K->gelu_fwd
                                                                                : K->tanh_fwd;
            void (*bwd)(float *, const float *, const float *, size_t) =
                act == MXP_MK_ACT_RELU ? K->relu_bwd : act == MXP_MK_ACT_GELU ? K->gelu_bwd
                                                                                : K->tanh_bwd;
            fwd(yr, x, n);
            emu_act_fwd(act, ye, x, n);
            CHECK_BITS(ye, yr, n, "activation forward");
            const float *sv = act == MXP_MK_ACT_TANH ? yr : x;
            bwd(dr, dy, sv, n);
            emu_act_bwd(act, de, dy, sv, n);
            CHECK_BITS(de, dr, n, "activation backward");
        }
        /* Independent spot values (hand / erf tables): GELU(1) = Phi(1) =
         * 0.841344746..., GELU(-1) = -0.158655254... */
        float one[2] = {1.0f, -1.0f}, g[2];
        emu_act_fwd(MXP_MK_ACT_GELU, g, one, 2);
        CHECK_CLOSE(g[0], 0.8413447460685429, 2e-7, 0);
        CHECK_CLOSE(g[1], -0.15865525393145707, 2e-7, 0);
        free(x), free(dy), free(ye), free(yr), free(de), free(dr);
    }
}

static void test_store_scan(void) {
    const mxp_kernels *K = mxp_kernels_generic();
    /* 1024 x 256 + 3: every reduction block takes a second lap. */
    size_t sizes[] = {1, 255, 256, 257, (size_t)MXP_MK_REDUCE_BLOCKS * MXP_MK_THREADS + 3};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *x = test_xmalloc(n * 4);
        fill(x, n, -70000, 70000); /* FP16 overflow in the store, finite in FP32 */
        if (n > 200) x[7] = NAN, x[n - 1] = -INFINITY, x[100] = 1e-6f, x[101] = -3e-8f;
        mxp_dtype dts[3] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
        for (int f = 0; f < 3; f++) {
            size_t es = f == 0 ? 4 : 2;
            unsigned char *oe = test_xmalloc(n * es), *orf = test_xmalloc(n * es);
            float ae = -1, ar = -2;
            int64_t ne = -1, nr = -2;
            K->convert(dts[f], orf, MXP_DTYPE_F32, x, n);
            K->absmax(x, n, &ar, &nr);
            for (emu_order = 0; emu_order < 3; emu_order++) {
                memset(oe, 0xa5, n * es);
                emu_store_scan(f, oe, x, n, &ae, &ne);
                CHECK_MSG(memcmp(oe, orf, n * es) == 0, "store fmt %d n %zu: bits differ", f,
                          n);
                CHECK(test_f32_bits(ae) == test_f32_bits(ar));
                CHECK(ne == nr);
            }
            emu_order = 0;
            free(oe), free(orf);
        }
        free(x);
    }
}

/* ---- layernorm: long-double oracle; dgamma/dbeta bit for bit --------------- */

static void ln_oracle(long double *y, long double *mean, long double *rstd, const float *x,
                      const float *gamma, const float *beta, size_t B, size_t C, float eps) {
    for (size_t b = 0; b < B; b++) {
        long double s = 0, ss = 0;
        for (size_t c = 0; c < C; c++) s += x[b * C + c];
        long double mu = s / C;
        for (size_t c = 0; c < C; c++) ss += (x[b * C + c] - mu) * (x[b * C + c] - mu);
        long double rs = 1.0L / sqrtl(ss / C + eps);
        mean[b] = mu, rstd[b] = rs;
        for (size_t c = 0; c < C; c++)
            y[b * C + c] = (x[b * C + c] - mu) * rs * gamma[c] + beta[c];
    }
}

static void test_layernorm(void) {
    const mxp_kernels *K = mxp_kernels_generic();
    size_t shapes[][2] = {{1, 1}, {3, 255}, {2, 256}, {5, 257}, {4, 1000}, {257, 7}};
    const float eps = 1e-5f;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t B = shapes[s][0], C = shapes[s][1], n = B * C;
        float *x = test_xmalloc(n * 4), *gamma = test_xmalloc(C * 4), *beta = test_xmalloc(C * 4);
        float *dy = test_xmalloc(n * 4);
        fill(x, n, 2, 6); /* a common offset: the two-pass variance matters */
        fill(gamma, C, 0.5f, 1.5f);
        fill(beta, C, -0.5f, 0.5f);
        fill(dy, n, -1, 1);
        float *y = test_xmalloc(n * 4), *mean = test_xmalloc(B * 4), *rstd = test_xmalloc(B * 4);
        long double *yo = test_xmalloc(n * sizeof *yo), *mo = test_xmalloc(B * sizeof *mo),
                    *ro = test_xmalloc(B * sizeof *ro);
        ln_oracle(yo, mo, ro, x, gamma, beta, B, C, eps);
        float *y0 = NULL, *m0 = NULL, *r0 = NULL;
        for (emu_order = 0; emu_order < 3; emu_order++) {
            emu_layernorm_fwd(y, mean, rstd, x, gamma, beta, B, C, eps);
            if (emu_order == 0) {
                y0 = fdup(y, n), m0 = fdup(mean, B), r0 = fdup(rstd, B);
            } else {
                CHECK_BITS(y, y0, n, "layernorm y across block orders");
                CHECK_BITS(mean, m0, B, "layernorm mean across block orders");
                CHECK_BITS(rstd, r0, B, "layernorm rstd across block orders");
            }
        }
        emu_order = 0;
        /* Tolerance: FP32 sums of <= 1000 terms in two different orders;
         * rstd can be large (C == 1: 1/sqrt(eps)), so relative. */
        size_t bad = 0;
        for (size_t b = 0; b < B; b++) {
            if (!test_close(mean[b], (double)mo[b], 1e-6, 1e-5)) bad++;
            if (!test_close(rstd[b], (double)ro[b], 0, 1e-4)) bad++;
        }
        for (size_t i = 0; i < n; i++)
            if (!test_close(y[i], (double)yo[i], 2e-5, 1e-4)) bad++;
        CHECK_MSG(bad == 0, "layernorm fwd B %zu C %zu: %zu values off the oracle", B, C, bad);

        /* backward: dx against the oracle formula on the emulator's own
         * mean/rstd; dgamma/dbeta bit for bit with the CPU given them. */
        float *dx = test_xmalloc(n * 4), *dg = test_xmalloc(C * 4), *db = test_xmalloc(C * 4);
        float *dgr = test_xmalloc(C * 4), *dbr = test_xmalloc(C * 4), *dxr = test_xmalloc(n * 4);
        fill(dg, C, -1, 1);
        fill(db, C, -1, 1);
        memcpy(dgr, dg, C * 4), memcpy(dbr, db, C * 4);
        emu_layernorm_bwd(dx, dg, db, dy, x, mean, rstd, gamma, B, C);
        K->layernorm_bwd(dxr, dgr, dbr, dy, x, mean, rstd, gamma, (int64_t)B, (int64_t)C);
        CHECK_BITS(dg, dgr, C, "layernorm dgamma");
        CHECK_BITS(db, dbr, C, "layernorm dbeta");
        bad = 0;
        for (size_t b = 0; b < B; b++) {
            long double sg = 0, sgx = 0;
            for (size_t c = 0; c < C; c++) {
                long double xh = ((long double)x[b * C + c] - mean[b]) * rstd[b];
                long double g = (long double)dy[b * C + c] * gamma[c];
                sg += g, sgx += g * xh;
            }
            for (size_t c = 0; c < C; c++) {
                long double xh = ((long double)x[b * C + c] - mean[b]) * rstd[b];
                long double g = (long double)dy[b * C + c] * gamma[c];
                long double ref = rstd[b] * (g - sg / C - xh * sgx / C);
                /* |dx| scale: rstd * |g|; C == 1 gives rstd ~ 316 */
                if (!test_close(dx[b * C + c], (double)ref, 2e-5 * rstd[b], 1e-4)) bad++;
            }
        }
        CHECK_MSG(bad == 0, "layernorm dx B %zu C %zu: %zu values off the oracle", B, C, bad);
        /* in place: dx aliasing dy gives the same bits */
        float *alias = fdup(dy, n), *dg2 = fdup(dgr, C);
        emu_layernorm_bwd(alias, NULL, NULL, alias, x, mean, rstd, gamma, B, C);
        CHECK_BITS(alias, dx, n, "layernorm dx in place");
        free(alias), free(dg2);
        free(x), free(gamma), free(beta), free(dy), free(y), free(mean), free(rstd);
        free(yo), free(mo), free(ro), free(y0), free(m0), free(r0);
        free(dx), free(dg), free(db), free(dgr), free(dbr), free(dxr);
    }
    /* Rows past the block cap: 65,543 rows of 5 on 65,535 blocks; rows
     * 65,535.. are the second lap of blocks 0..7. Checked on exact data:
     * x = (r % 3, ...) permutations of {-2, -1, 0, 1, 2}: mean 0, var 2. */
    size_t B = 65543, C = 5;
    CHECK(mxp_mk_grid(B, 1, MXP_MK_GRID_CAP) == MXP_MK_GRID_CAP);
    float *x = test_xmalloc(B * C * 4), *y = test_xmalloc(B * C * 4);
    float *mean = test_xmalloc(B * 4), *rstd = test_xmalloc(B * 4);
    for (size_t b = 0; b < B; b++)
        for (size_t c = 0; c < C; c++) x[b * C + c] = (float)((int)((c + b) % C) - 2);
    float gamma[5] = {1, 1, 1, 1, 1}, beta[5] = {0, 0, 0, 0, 0};
    memset(mean, 0xff, B * 4); /* NaN: an unwritten row shows */
    emu_layernorm_fwd(y, mean, rstd, x, gamma, beta, B, C, 0.0f);
    size_t bad = 0;
    float rs = 1.0f / sqrtf(2.0f);
    for (size_t b = 0; b < B; b++) {
        if (mean[b] != 0.0f || rstd[b] != rs) bad++;
        for (size_t c = 0; c < C; c++)
            if (y[b * C + c] != x[b * C + c] * rs) bad++;
    }
    CHECK_MSG(bad == 0, "layernorm past the block cap: %zu wrong values", bad);
    free(x), free(y), free(mean), free(rstd);
}

/* ---- losses ---------------------------------------------------------------- */

static void test_mse(void) {
    const mxp_kernels *K = mxp_kernels_generic();
    size_t shapes[][2] = {{1, 1}, {1, 255}, {256, 1}, {1, 257}, {1027, 257}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t B = shapes[s][0], C = shapes[s][1], n = B * C;
        float *p = test_xmalloc(n * 4), *t = test_xmalloc(n * 4);
        fill(p, n, -2, 2);
        fill(t, n, -2, 2);
        float *de = test_xmalloc(n * 4), *dr = test_xmalloc(n * 4);
        double le = -1, lr = -2, l0 = 0;
        K->mse(dr, p, t, (int64_t)B, (int64_t)C, 1024.0f, &lr);
        for (emu_order = 0; emu_order < 3; emu_order++) {
            emu_mse(de, p, t, B, C, 1024.0f, &le);
            CHECK_BITS(de, dr, n, "mse dpred");
            if (emu_order == 0) l0 = le;
            CHECK(le == l0); /* bit-identical across block orders */
        }
        emu_order = 0;
        /* the difference is FP32 by contract (loss.c), its square and
         * the sum exact here */
        long double o = 0;
        for (size_t i = 0; i < n; i++) {
            long double d = (float)(p[i] - t[i]);
            o += d * d;
        }
        o /= n;
        CHECK_CLOSE(le, (double)o, 0, 1e-12); /* double sums of <= 264k terms */
        CHECK_CLOSE(lr, (double)o, 0, 1e-12);
        free(p), free(t), free(de), free(dr);
    }
    double l = -1;
    emu_mse(NULL, NULL, NULL, 0, 5, 1.0f, &l);
    CHECK(l == 0.0);
}

static void test_xent(void) {
    size_t shapes[][2] = {{1, 1}, {3, 255}, {2, 256}, {5, 257}, {1030, 10}, {2, 1000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t B = shapes[s][0], C = shapes[s][1], n = B * C;
        float *x = test_xmalloc(n * 4);
        int32_t *lab = test_xmalloc(B * 4);
        fill(x, n, -8, 8);
        for (size_t b = 0; b < B; b++) lab[b] = (int32_t)(urand() * (double)C);
        float *d = test_xmalloc(n * 4), *d0 = NULL;
        double l = -1, l0 = 0;
        const float gs = 65536.0f;
        for (emu_order = 0; emu_order < 3; emu_order++) {
            emu_softmax_xent(d, x, lab, B, C, gs, &l);
            if (emu_order == 0) {
                d0 = fdup(d, n), l0 = l;
            } else {
                CHECK_BITS(d, d0, n, "xent dlogits across block orders");
                CHECK(l == l0);
            }
        }
        emu_order = 0;
        long double tot = 0;
        size_t bad = 0;
        long double k = (long double)gs / B;
        for (size_t b = 0; b < B; b++) {
            const float *xr = x + b * C;
            long double mx = xr[0], se = 0;
            for (size_t c = 1; c < C; c++) mx = xr[c] > mx ? xr[c] : mx;
            for (size_t c = 0; c < C; c++) se += expl(xr[c] - mx);
            tot += mx + logl(se) - xr[lab[b]];
            for (size_t c = 0; c < C; c++) {
                long double p = expl(xr[c] - mx) / se;
                long double ref = k * (p - ((int32_t)c == lab[b] ? 1 : 0));
                /* FP32 exp/log (<= 2 ulp) and a float sum: 1e-5 relative */
                if (!test_close(d[b * C + c], (double)ref, 1e-6 * (double)k, 1e-5)) bad++;
            }
        }
        CHECK_MSG(bad == 0, "xent B %zu C %zu: %zu dlogits off the oracle", B, C, bad);
        CHECK_CLOSE(l, (double)(tot / B), 1e-6, 1e-5);
        /* in place (dlogits aliasing logits) gives the same bits */
        float *alias = fdup(x, n);
        double la = -1;
        emu_softmax_xent(alias, alias, lab, B, C, gs, &la);
        CHECK_BITS(alias, d0, n, "xent in place");
        CHECK(la == l0);
        free(x), free(lab), free(d), free(d0), free(alias);
    }
    /* A label outside [0, C): that row's loss is NaN, no one-hot term. */
    float x[6] = {0, 0, 0, 1, 2, 3};
    int32_t lab[2] = {1, 3};
    float d[6];
    double l = 0;
    emu_softmax_xent(d, x, lab, 2, 3, 1.0f, &l);
    CHECK(isnan(l));
    CHECK_CLOSE(d[0], 1.0 / 6.0, 1e-7, 0);
    CHECK_CLOSE(d[1], (1.0 / 3.0 - 1.0) / 2.0, 1e-7, 0);
    CHECK(d[3] > 0 && d[4] > 0 && d[5] > 0);
}

int main(void) {
    test_bias();
    test_activations();
    test_store_scan();
    test_layernorm();
    test_mse();
    test_xent();
    return test_finish("test_mlp_emu");
}
