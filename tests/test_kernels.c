/* tests/test_kernels.c: the kernel table returned by mxp_kernels_get()
 * (the generic reference, or whatever MIXPREC_FORCE_ISA selects) against
 * independent oracles:
 *   - GEMM: a double-precision triple loop on inputs widened by num, for
 *     every dtype pair, all transposes, odd sizes, padded leading dims
 *     (padding holds NaN so stray reads show), alpha/beta, beta = 0 over NaN;
 *   - backward kernels: central finite differences of the FP32 forward
 *     kernels (element-wise ops, layernorm, mse, softmax cross-entropy);
 *   - forward kernels, reductions and unscale_stats: double loops and
 *     hand-built buffers with known counts;
 *   - AdamW/SGD: double reimplementations of the PyTorch formulas; the pure
 *     low-precision paths against num's scalar RNE/SR conversions.
 */
#include "kernels/kernels.h"
#include "kernel_slots.h"
#include "testutil.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static const mxp_kernels *K;
static mxp_rng rng;

static float unif(float lo, float hi) { return lo + (hi - lo) * mxp_rng_uniform(&rng); }
static float normal(void) { return mxp_rng_normal(&rng); }

/* ---- dispatch ------------------------------------------------------------ */

static void test_dispatch(void) {
    K = mxp_kernels_get();
    CHECK(K != NULL);
    if (!K) exit(1);
    CHECK(K == mxp_kernels_get());
    CHECK(K->isa != NULL);
    const char *force = getenv("MIXPREC_FORCE_ISA");
    if (force && strcmp(force, "generic") == 0) {
        CHECK(K == mxp_kernels_generic());
        CHECK(strcmp(K->isa, "generic") == 0);
    }
    const mxp_kernels *g = mxp_kernels_generic();
    CHECK(strcmp(g->isa, "generic") == 0);
    void (*const slots[])(void) = {
        (void (*)(void))K->gemm,          (void (*)(void))K->convert,
        (void (*)(void))K->convert_sr,    (void (*)(void))K->relu_fwd,
        (void (*)(void))K->relu_bwd,      (void (*)(void))K->gelu_fwd,
        (void (*)(void))K->gelu_bwd,      (void (*)(void))K->tanh_fwd,
        (void (*)(void))K->tanh_bwd,      (void (*)(void))K->axpy,
        (void (*)(void))K->scale,         (void (*)(void))K->add_bias,
        (void (*)(void))K->bias_grad,     (void (*)(void))K->layernorm_fwd,
        (void (*)(void))K->layernorm_bwd, (void (*)(void))K->softmax_fwd,
        (void (*)(void))K->mse,           (void (*)(void))K->softmax_xent,
        (void (*)(void))K->sum,           (void (*)(void))K->sumsq,
        (void (*)(void))K->absmax,        (void (*)(void))K->unscale_stats,
        (void (*)(void))K->adamw,         (void (*)(void))K->sgd,
    };
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        CHECK_MSG(slots[i] != NULL, "kernel slot %zu is NULL", i);
}

/* ---- GEMM ------------------------------------------------------------------ */

/* rows x cols matrix with leading dim ld; padding columns hold NaN. */
static void fill_matrix(mxp_dtype t, void *buf, size_t rows, size_t cols, size_t ld) {
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < ld; j++)
            mxp_store_f32(t, buf, i * ld + j, j < cols ? unif(-2.0f, 2.0f) : NAN);
}

typedef struct gemm_case {
    int64_t M, N, K;
    bool ta, tb;
    mxp_dtype at, bt;
    float alpha, beta;
} gemm_case;

/* Run one GEMM case and compare each C element with the double oracle:
 * |C - ref| <= rtol * (|alpha| sum|a b| + |beta c0|), rtol = 5e-7 (K + 2). */
static void gemm_check(const gemm_case *gc, void *A, void *B, float *C, float *C0,
                       double *Ad, double *Bd) {
    size_t M = (size_t)gc->M, N = (size_t)gc->N, Kd = (size_t)gc->K;
    size_t a_rows = gc->ta ? Kd : M, a_cols = gc->ta ? M : Kd;
    size_t b_rows = gc->tb ? N : Kd, b_cols = gc->tb ? Kd : N;
    size_t lda = a_cols + 3, ldb = b_cols + 1, ldc = N + 2;
    fill_matrix(gc->at, A, a_rows, a_cols, lda);
    fill_matrix(gc->bt, B, b_rows, b_cols, ldb);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < ldc; j++)
            C[i * ldc + j] = j >= N ? 777.0f : gc->beta == 0.0f ? NAN : unif(-1.0f, 1.0f);
    memcpy(C0, C, M * ldc * sizeof *C);
    for (size_t i = 0; i < M; i++)
        for (size_t k = 0; k < Kd; k++)
            Ad[i * Kd + k] = mxp_load_f32(gc->at, A, gc->ta ? k * lda + i : i * lda + k);
    for (size_t k = 0; k < Kd; k++)
        for (size_t j = 0; j < N; j++)
            Bd[k * N + j] = mxp_load_f32(gc->bt, B, gc->tb ? j * ldb + k : k * ldb + j);

    mxp_gemm_args args = {
        .trans_a = gc->ta, .trans_b = gc->tb, .M = gc->M, .N = gc->N, .K = gc->K,
        .a_type = gc->at, .A = A, .lda = (int64_t)lda,
        .b_type = gc->bt, .B = B, .ldb = (int64_t)ldb,
        .C = C, .ldc = (int64_t)ldc, .alpha = gc->alpha, .beta = gc->beta,
    };
    K->gemm(&args);

    double rtol = 5e-7 * (double)(Kd + 2);
    int bad = 0;
    for (size_t i = 0; i < M; i++) {
        for (size_t j = 0; j < ldc; j++) {
            float got = C[i * ldc + j];
            if (j >= N) {
                if (got != 777.0f) bad++;
                continue;
            }
            double s = 0.0, sa = 0.0;
            for (size_t k = 0; k < Kd; k++) {
                s += Ad[i * Kd + k] * Bd[k * N + j];
                sa += fabs(Ad[i * Kd + k] * Bd[k * N + j]);
            }
            double ref = gc->alpha * s, bound = fabs((double)gc->alpha) * sa;
            if (gc->beta != 0.0f) {
                ref += (double)gc->beta * C0[i * ldc + j];
                bound += fabs((double)gc->beta * C0[i * ldc + j]);
            }
            if (!(fabs(got - ref) <= 1e-30 + rtol * bound)) {
                if (bad++ < 3)
                    fprintf(stderr, "  C[%zu,%zu] = %.9g, ref %.9g (bound %.3g)\n", i, j,
                            got, ref, bound);
            }
        }
    }
    CHECK_MSG(bad == 0,
              "gemm %s x %s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g: %d bad",
              mxp_dtype_name(gc->at), mxp_dtype_name(gc->bt), gc->ta, gc->tb,
              (long long)gc->M, (long long)gc->N, (long long)gc->K, gc->alpha, gc->beta,
              bad);
}

static void test_gemm(void) {
    static const int64_t dims[] = {1, 3, 7, 17, 33};
    static const int64_t big[][3] = {{5, 129, 257}, {65, 70, 130}, {2, 200, 300}};
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 1.0f}, {1.0f, 1.0f}};
    const size_t nd = sizeof dims / sizeof dims[0], nbig = sizeof big / sizeof big[0];
    const size_t maxe = 310 * 310; /* >= rows * ld of any operand */
    void *A = test_xmalloc(maxe * 4), *B = test_xmalloc(maxe * 4);
    float *C = test_xmalloc(maxe * 4), *C0 = test_xmalloc(maxe * 4);
    double *Ad = test_xmalloc(maxe * 8), *Bd = test_xmalloc(maxe * 8);
    size_t variant = 0;
    for (int at = 0; at < MXP_DTYPE_COUNT; at++) {
        for (int bt = 0; bt < MXP_DTYPE_COUNT; bt++) {
            for (int tr = 0; tr < 4; tr++) {
                gemm_case gc = {.ta = tr & 1, .tb = (tr >> 1) & 1,
                                .at = (mxp_dtype)at, .bt = (mxp_dtype)bt};
                for (size_t s = 0; s < nd * nd * nd + nbig; s++) {
                    if (s < nd * nd * nd) {
                        gc.M = dims[s % nd];
                        gc.N = dims[(s / nd) % nd];
                        gc.K = dims[s / (nd * nd)];
                    } else {
                        gc.M = big[s - nd * nd * nd][0];
                        gc.N = big[s - nd * nd * nd][1];
                        gc.K = big[s - nd * nd * nd][2];
                    }
                    gc.alpha = ab[variant % 4][0];
                    gc.beta = ab[variant % 4][1];
                    variant++;
                    gemm_check(&gc, A, B, C, C0, Ad, Bd);
                }
            }
        }
    }
    /* K == 0: C = beta C; beta == 0 clears NaN. */
    float c2[4] = {NAN, NAN, 2.0f, -4.0f};
    mxp_gemm_args z = {.M = 1, .N = 2, .K = 0, .a_type = MXP_DTYPE_F32, .A = A, .lda = 1,
                       .b_type = MXP_DTYPE_F32, .B = B, .ldb = 2, .C = c2, .ldc = 2,
                       .alpha = 1.0f, .beta = 0.0f};
    K->gemm(&z);
    CHECK(c2[0] == 0.0f && c2[1] == 0.0f);
    z.C = c2 + 2;
    z.beta = 0.5f;
    K->gemm(&z);
    CHECK(c2[2] == 1.0f && c2[3] == -2.0f);
    /* Inf in A still propagates through a zero in B (no zero skipping). */
    float a1[2] = {INFINITY, 1.0f}, b1[2] = {0.0f, 1.0f}, c1 = 5.0f;
    mxp_gemm_args q = {.M = 1, .N = 1, .K = 2, .a_type = MXP_DTYPE_F32, .A = a1, .lda = 2,
                       .b_type = MXP_DTYPE_F32, .B = b1, .ldb = 1, .C = &c1, .ldc = 1,
                       .alpha = 1.0f, .beta = 0.0f};
    K->gemm(&q);
    CHECK(isnan(c1));
    free(A);
    free(B);
    free(C);
    free(C0);
    free(Ad);
    free(Bd);
}

/* ---- conversion slots ------------------------------------------------------ */

static void test_convert(void) {
    enum { N = 64 };
    float src[N];
    mxp_bf16 d1[N], d2[N];
    mxp_fp16 h1[N];
    for (int i = 0; i < N; i++) src[i] = normal() * 100.0f;
    K->convert(MXP_DTYPE_BF16, d1, MXP_DTYPE_F32, src, N);
    K->convert(MXP_DTYPE_F16, h1, MXP_DTYPE_F32, src, N);
    K->convert_sr(MXP_DTYPE_BF16, d2, src, N, 42, 1000);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += d1[i].bits != mxp_f32_to_bf16(src[i]).bits;
        bad += h1[i].bits != mxp_f32_to_fp16(src[i]).bits;
        bad += d2[i].bits != mxp_f32_to_bf16_sr(src[i], mxp_rng_at(42, 1000 + (uint64_t)i)).bits;
    }
    CHECK_MSG(bad == 0, "convert slots differ from num's scalar conversions: %d", bad);
}

/* ---- element-wise ------------------------------------------------------------ */

typedef void (*fwd_fn)(float *y, const float *x, size_t n);
typedef void (*bwd_fn)(float *dx, const float *dy, const float *xy, size_t n);

/* Central differences of fwd at x (step h) against bwd(dy); bwd gets the
 * forward input, or the forward output when `uses_y`. */
static void fd_eltwise(const char *name, fwd_fn fwd, bwd_fn bwd, bool uses_y,
                       const float *x, size_t n) {
    float xp[128] = {0}, xm[128] = {0}, yp[128], ym[128], y[128], dy[128] = {0}, dx[128];
    const float h = 1e-2f;
    for (size_t i = 0; i < n; i++) {
        xp[i] = x[i] + h;
        xm[i] = x[i] - h;
        dy[i] = normal();
    }
    fwd(yp, xp, n);
    fwd(ym, xm, n);
    fwd(y, x, n);
    bwd(dx, dy, uses_y ? y : x, n);
    for (size_t i = 0; i < n; i++) {
        double fd = ((double)yp[i] - ym[i]) / ((double)xp[i] - xm[i]);
        double ref = dy[i] * fd;
        CHECK_MSG(test_close(dx[i], ref, 1e-3, 1e-2), "%s bwd at x=%g: %.7g vs fd %.7g",
                  name, x[i], dx[i], ref);
    }
    /* in place: dx aliases dy */
    float d2[128];
    memcpy(d2, dy, n * sizeof *dy);
    bwd(d2, d2, uses_y ? y : x, n);
    CHECK_MSG(memcmp(d2, dx, n * sizeof *dx) == 0, "%s bwd in place differs", name);
}

static void test_eltwise(void) {
    enum { N = 96 };
    float x[N], y[N], y2[N];
    for (int i = 0; i < N; i++) {
        do x[i] = 2.5f * normal();
        while (fabsf(x[i]) < 0.05f); /* keep relu's FD away from the kink */
    }
    x[0] = 0.0f + 0.3f;
    x[1] = -6.0f;
    x[2] = 5.5f;

    K->gelu_fwd(y, x, N);
    for (int i = 0; i < N; i++) {
        double ref = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
        CHECK_CLOSE(y[i], ref, 1e-6, 1e-5);
    }
    memcpy(y2, x, sizeof x);
    K->gelu_fwd(y2, y2, N);
    CHECK(memcmp(y, y2, sizeof y) == 0);
    K->tanh_fwd(y, x, N);
    for (int i = 0; i < N; i++) CHECK_CLOSE(y[i], tanh(x[i]), 1e-7, 1e-6);
    K->relu_fwd(y, x, N);
    for (int i = 0; i < N; i++) CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    float sp[3] = {NAN, -0.0f, -INFINITY}, so[3];
    K->relu_fwd(so, sp, 3);
    CHECK(isnan(so[0]));
    CHECK(so[1] == 0.0f && so[2] == 0.0f);

    fd_eltwise("gelu", K->gelu_fwd, K->gelu_bwd, false, x, N);
    fd_eltwise("tanh", K->tanh_fwd, K->tanh_bwd, true, x, N);
    fd_eltwise("relu", K->relu_fwd, K->relu_bwd, false, x, N);

    /* axpy and scale */
    float a[N], b[N], b0[N];
    for (int i = 0; i < N; i++) {
        a[i] = normal();
        b[i] = b0[i] = normal();
    }
    K->axpy(b, -0.75f, a, N);
    for (int i = 0; i < N; i++) CHECK_CLOSE(b[i], -0.75 * a[i] + b0[i], 1e-6, 1e-6);
    memcpy(b, b0, sizeof b);
    K->scale(b, 3.0f, N);
    for (int i = 0; i < N; i++) CHECK_CLOSE(b[i], 3.0 * b0[i], 0, 1e-7);
}

/* ---- row-wise ------------------------------------------------------------------ */

static void test_bias(void) {
    enum { B = 5, C = 9 };
    float y[B * C], y0[B * C], bias[C], db[C];
    for (int i = 0; i < B * C; i++) y[i] = y0[i] = normal();
    for (int c = 0; c < C; c++) {
        bias[c] = normal();
        db[c] = 0.5f;
    }
    K->add_bias(y, bias, B, C);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            CHECK_CLOSE(y[b * C + c], (double)y0[b * C + c] + bias[c], 1e-6, 1e-6);
    K->add_bias(y, NULL, B, C); /* no-op */
    K->bias_grad(db, y0, B, C);
    for (int c = 0; c < C; c++) {
        double s = 0.5;
        for (int b = 0; b < B; b++) s += y0[b * C + c];
        CHECK_CLOSE(db[c], s, 1e-6, 1e-6);
    }
    CHECK_CLOSE(y[3], (double)y0[3] + bias[3], 1e-6, 1e-6);
}

enum { LN_B = 3, LN_C = 11 };

/* L = sum W * layernorm(x; gamma, beta), in double from the FP32 kernel. */
static double ln_loss(const float *x, const float *gamma, const float *beta, const float *W) {
    float y[LN_B * LN_C], mu[LN_B], rs[LN_B];
    K->layernorm_fwd(y, mu, rs, x, gamma, beta, LN_B, LN_C, 1e-5f);
    double L = 0.0;
    for (int i = 0; i < LN_B * LN_C; i++) L += (double)W[i] * y[i];
    return L;
}

/* d ln_loss / d p[i] by central differences with step h. */
static double ln_fd(float *p, int i, const float *x, const float *gamma, const float *beta,
                    const float *W) {
    const float h = 1e-2f;
    float p0 = p[i];
    p[i] = p0 + h;
    float hp = p[i];
    double Lp = ln_loss(x, gamma, beta, W);
    p[i] = p0 - h;
    float hm = p[i];
    double Lm = ln_loss(x, gamma, beta, W);
    p[i] = p0;
    return (Lp - Lm) / ((double)hp - hm);
}

static void test_layernorm(void) {
    enum { B = LN_B, C = LN_C, N = LN_B * LN_C };
    float x[N], W[N], gamma[C], beta[C], y[N], mu[B], rs[B];
    for (int i = 0; i < N; i++) {
        x[i] = 1.5f * normal() + 3.0f;
        W[i] = normal();
    }
    for (int c = 0; c < C; c++) {
        gamma[c] = 1.0f + 0.5f * normal();
        beta[c] = normal();
    }
    K->layernorm_fwd(y, mu, rs, x, gamma, beta, B, C, 1e-5f);
    for (int b = 0; b < B; b++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[b * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[b * C + c] - m) * (x[b * C + c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        CHECK_CLOSE(mu[b], m, 1e-6, 1e-6);
        CHECK_CLOSE(rs[b], r, 1e-6, 1e-5);
        for (int c = 0; c < C; c++)
            CHECK_CLOSE(y[b * C + c], (x[b * C + c] - m) * r * gamma[c] + beta[c], 1e-5, 1e-5);
    }
    /* NULL gamma/beta mean 1/0 */
    float ones[C], zeros[C], y1[N], y2[N];
    for (int c = 0; c < C; c++) {
        ones[c] = 1.0f;
        zeros[c] = 0.0f;
    }
    K->layernorm_fwd(y1, NULL, NULL, x, NULL, NULL, B, C, 1e-5f);
    K->layernorm_fwd(y2, mu, rs, x, ones, zeros, B, C, 1e-5f);
    for (int i = 0; i < N; i++) CHECK_CLOSE(y1[i], y2[i], 1e-6, 1e-6);

    /* backward vs finite differences of L = sum W y */
    float dx[N], dgamma[C], dbeta[C];
    for (int i = 0; i < N; i++) dx[i] = NAN; /* "=": must be overwritten */
    for (int c = 0; c < C; c++) {
        dgamma[c] = 0.25f; /* "+=": must be accumulated onto */
        dbeta[c] = -0.5f;
    }
    K->layernorm_fwd(y, mu, rs, x, gamma, beta, B, C, 1e-5f);
    K->layernorm_bwd(dx, dgamma, dbeta, W, x, mu, rs, gamma, B, C);
    for (int i = 0; i < N; i++) {
        double fd = ln_fd(x, i, x, gamma, beta, W);
        CHECK_MSG(test_close(dx[i], fd, 2e-3, 2e-2), "layernorm dx[%d] = %.7g, fd %.7g", i,
                  dx[i], fd);
    }
    for (int c = 0; c < C; c++) {
        double fdg = ln_fd(gamma, c, x, gamma, beta, W);
        double fdb = ln_fd(beta, c, x, gamma, beta, W);
        CHECK_MSG(test_close(dgamma[c] - 0.25, fdg, 2e-3, 2e-2),
                  "layernorm dgamma[%d] = %.7g, fd %.7g", c, dgamma[c] - 0.25, fdg);
        CHECK_MSG(test_close(dbeta[c] + 0.5, fdb, 2e-3, 2e-2),
                  "layernorm dbeta[%d] = %.7g, fd %.7g", c, dbeta[c] + 0.5, fdb);
    }
}

static void test_softmax(void) {
    enum { B = 4, C = 13 };
    float x[B * C], y[B * C];
    for (int i = 0; i < B * C; i++) x[i] = 3.0f * normal() + (i >= 2 * C ? 1000.0f : 0.0f);
    K->softmax_fwd(y, x, B, C);
    for (int b = 0; b < B; b++) {
        double mx = -INFINITY, s = 0, sy = 0;
        for (int c = 0; c < C; c++) mx = fmax(mx, x[b * C + c]);
        for (int c = 0; c < C; c++) s += exp((double)x[b * C + c] - mx);
        for (int c = 0; c < C; c++) {
            CHECK_CLOSE(y[b * C + c], exp((double)x[b * C + c] - mx) / s, 1e-7, 1e-5);
            sy += y[b * C + c];
        }
        CHECK_CLOSE(sy, 1.0, 1e-6, 0);
    }
    float y2[B * C];
    memcpy(y2, x, sizeof x);
    K->softmax_fwd(y2, y2, B, C);
    CHECK(memcmp(y, y2, sizeof y) == 0);
}

/* ---- losses ------------------------------------------------------------------ */

static void test_mse(void) {
    enum { B = 4, C = 5, N = B * C };
    float p[N], t[N], d[N], d2[N];
    for (int i = 0; i < N; i++) {
        p[i] = normal();
        t[i] = normal();
    }
    double ref = 0;
    for (int i = 0; i < N; i++) ref += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
    ref /= N;
    CHECK_CLOSE(ks_mse(K, NULL, p, t, B, C, 1.0f), ref, 1e-7, 1e-6);
    CHECK_CLOSE(ks_mse(K, d, p, t, B, C, 1.0f), ref, 1e-7, 1e-6);
    for (int i = 0; i < N; i++) {
        const float h = 1e-2f;
        float p0 = p[i];
        p[i] = p0 + h;
        float hp = p[i];
        double Lp = ks_mse(K, NULL, p, t, B, C, 1.0f);
        p[i] = p0 - h;
        float hm = p[i];
        double Lm = ks_mse(K, NULL, p, t, B, C, 1.0f);
        p[i] = p0;
        CHECK_CLOSE(d[i], (Lp - Lm) / ((double)hp - hm), 1e-4, 1e-3);
    }
    ks_mse(K, d2, p, t, B, C, 1024.0f);
    for (int i = 0; i < N; i++) CHECK_CLOSE(d2[i], 1024.0 * d[i], 0, 1e-6);
}

static void test_xent(void) {
    enum { B = 5, C = 7, N = B * C };
    float x[N], d[N], d2[N];
    int32_t lab[B];
    for (int i = 0; i < N; i++) x[i] = 2.0f * normal();
    for (int b = 0; b < B; b++) lab[b] = (int32_t)mxp_rng_below(&rng, C);
    double ref = 0;
    for (int b = 0; b < B; b++) {
        double mx = -INFINITY, s = 0;
        for (int c = 0; c < C; c++) mx = fmax(mx, x[b * C + c]);
        for (int c = 0; c < C; c++) s += exp(x[b * C + c] - mx);
        ref += mx + log(s) - x[b * C + lab[b]];
    }
    ref /= B;
    CHECK_CLOSE(ks_softmax_xent(K, NULL, x, lab, B, C, 1.0f), ref, 1e-6, 1e-6);
    CHECK_CLOSE(ks_softmax_xent(K, d, x, lab, B, C, 1.0f), ref, 1e-6, 1e-6);
    for (int i = 0; i < N; i++) {
        const float h = 1e-2f;
        float x0 = x[i];
        x[i] = x0 + h;
        float hp = x[i];
        double Lp = ks_softmax_xent(K, NULL, x, lab, B, C, 1.0f);
        x[i] = x0 - h;
        float hm = x[i];
        double Lm = ks_softmax_xent(K, NULL, x, lab, B, C, 1.0f);
        x[i] = x0;
        double fd = (Lp - Lm) / ((double)hp - hm);
        CHECK_MSG(test_close(d[i], fd, 2e-4, 1e-2), "xent dlogits[%d] = %.7g, fd %.7g", i,
                  d[i], fd);
    }
    ks_softmax_xent(K, d2, x, lab, B, C, 512.0f);
    for (int i = 0; i < N; i++) CHECK_CLOSE(d2[i], 512.0 * d[i], 1e-9, 1e-6);

    /* uniform logits: loss = log C; grads (1/C - onehot) / B */
    for (int i = 0; i < N; i++) x[i] = 3.7f;
    CHECK_CLOSE(ks_softmax_xent(K, d, x, lab, B, C, 1.0f), log((double)C), 1e-6, 1e-6);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            CHECK_CLOSE(d[b * C + c], ((1.0 / C) - (c == lab[b])) / B, 1e-7, 1e-6);
    /* huge logits stay finite (max subtracted) */
    for (int i = 0; i < N; i++) x[i] = 1000.0f + (float)(i % C);
    double big = ks_softmax_xent(K, d, x, lab, B, C, 1.0f);
    CHECK(isfinite(big));
    for (int i = 0; i < N; i++) CHECK(isfinite(d[i]));
    /* an out-of-range label poisons the loss instead of reading out of bounds */
    lab[2] = C;
    CHECK(isnan(ks_softmax_xent(K, NULL, x, lab, B, C, 1.0f)));
}

/* ---- reductions and the fused gradient pass ------------------------------- */

static void test_reduce(void) {
    enum { N = 1000 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = 10.0f * normal();
    double s = 0, ss = 0, am = 0;
    for (int i = 0; i < N; i++) {
        s += x[i];
        ss += (double)x[i] * x[i];
        am = fmax(am, fabs(x[i]));
    }
    CHECK_CLOSE(ks_sum(K, x, N), s, 1e-9, 1e-12);
    CHECK_CLOSE(ks_sumsq(K, x, N), ss, 1e-9, 1e-12);
    int64_t nf = -1;
    CHECK(ks_absmax(K, x, N, &nf) == (float)am);
    CHECK(nf == 0);
    x[5] = INFINITY;
    x[6] = -INFINITY;
    x[7] = NAN;
    CHECK(ks_absmax(K, x, N, &nf) <= (float)am);
    CHECK(nf == 3);
    CHECK(ks_absmax(K, x, N, NULL) <= (float)am);
    CHECK(ks_absmax(K, x, 0, &nf) == 0.0f && nf == 0);
    CHECK(isnan(ks_sum(K, x, N)));
}

static void test_unscale_stats(void) {
    /* hand-built: inv_scale 0.5, near_overflow_at 60000 */
    /* a raw -0.0 becomes +0.0 (mxp_gradpass_canon: what adding it to a
     * zeroed slab gives); a negative value that underflows stays -0.0 */
    float g[] = {4.0f,     0.0f,  -0.0f, INFINITY, -INFINITY, NAN,
                 60000.0f, -65504.0f, 1.4e-45f, -3.0f, 59999.0f, -1.4e-45f};
    const float after[] = {2.0f, 0.0f,      0.0f,  0,     0,         0,
                           30000.0f, -32752.0f, 0.0f, -1.5f, 29999.5f, -0.0f};
    const size_t n = sizeof g / sizeof g[0];
    mxp_grad_stats st;
    memset(&st, 0xff, sizeof st);
    K->unscale_stats(g, n, 0.5f, 60000.0f, &st);
    CHECK(st.n == (int64_t)n);
    CHECK(st.nonfinite == 3);
    CHECK(st.zeros == 4); /* 0, -0 and the two subnormals that underflowed */
    CHECK(st.near_overflow == 2);
    CHECK(st.absmax == 32752.0f);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)after[i] * after[i];
    CHECK_CLOSE(st.sumsq, ss, 0, 1e-15);
    CHECK(isinf(g[3]) && g[3] > 0 && isinf(g[4]) && g[4] < 0 && isnan(g[5]));
    for (size_t i = 0; i < n; i++)
        if (i < 3 || i > 5) CHECK(test_f32_bits(g[i]) == test_f32_bits(after[i]));

    /* random buffer, near-overflow disabled */
    enum { N = 1000 };
    float r[N], r0[N];
    for (int i = 0; i < N; i++) r[i] = r0[i] = 3000.0f * normal();
    r[10] = r0[10] = 0.0f;
    K->unscale_stats(r, N, 1.0f / 1024.0f, INFINITY, &st);
    double s2 = 0, am = 0;
    for (int i = 0; i < N; i++) {
        double v = (double)r0[i] / 1024.0;
        CHECK(r[i] == (float)v);
        s2 += v * v;
        am = fmax(am, fabs(v));
    }
    CHECK(st.n == N && st.nonfinite == 0 && st.near_overflow == 0 && st.zeros == 1);
    CHECK_CLOSE(st.sumsq, s2, 0, 1e-12);
    CHECK(st.absmax == (float)am);
}

/* ---- optimizers ------------------------------------------------------------ */

/* Double-precision AdamW, written from the PyTorch documentation. */
static void adamw_ref(double *w, double *m, double *v, const float *g, size_t n,
                      const mxp_adamw_hparams *h, int t) {
    double lr = h->lr, b1 = h->beta1, b2 = h->beta2, eps = h->eps, wd = h->weight_decay;
    for (size_t i = 0; i < n; i++) {
        w[i] -= lr * wd * w[i];
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
        w[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

static void test_adamw_master(void) {
    enum { N = 7 };
    const mxp_adamw_hparams hs[] = {
        {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f},
        {.lr = 1e-1f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-2f, .weight_decay = 0.01f},
    };
    for (size_t c = 0; c < sizeof hs / sizeof hs[0]; c++) {
        float w[N], m[N] = {0}, v[N] = {0}, g[N];
        mxp_bf16 work[N];
        double wd[N], md[N] = {0}, vd[N] = {0};
        for (int i = 0; i < N; i++) wd[i] = w[i] = normal();
        mxp_weights wt = {.master = w, .work = work, .work_type = MXP_DTYPE_BF16};
        for (int t = 1; t <= 3; t++) {
            for (int i = 0; i < N; i++) g[i] = (i == 0 && t == 1) ? 0.0f : 1e-2f * normal();
            K->adamw(&wt, g, m, v, N, &hs[c], t);
            adamw_ref(wd, md, vd, g, N, &hs[c], t);
        }
        for (int i = 0; i < N; i++) {
            CHECK_CLOSE(w[i], wd[i], 1e-6, 1e-6);
            CHECK_CLOSE(m[i], md[i], 1e-9, 1e-5);
            CHECK_CLOSE(v[i], vd[i], 1e-12, 1e-5);
            CHECK(work[i].bits == mxp_f32_to_bf16(w[i]).bits);
        }
    }
}

static void test_sgd_master(void) {
    enum { N = 6 };
    const mxp_sgd_hparams hs[] = {
        {.lr = 0.1f, .momentum = 0.0f, .weight_decay = 0.0f, .nesterov = false},
        {.lr = 0.1f, .momentum = 0.0f, .weight_decay = 0.05f, .nesterov = false},
        {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = false},
        {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true},
    };
    for (size_t c = 0; c < sizeof hs / sizeof hs[0]; c++) {
        float w[N], buf[N], g[N];
        mxp_fp16 work[N];
        double wd[N], bd[N];
        for (int i = 0; i < N; i++) {
            wd[i] = w[i] = normal();
            buf[i] = 123.0f; /* t == 1 must ignore the old buffer */
        }
        mxp_weights wt = {.master = w, .work = work, .work_type = MXP_DTYPE_F16};
        for (int t = 1; t <= 3; t++) {
            for (int i = 0; i < N; i++) g[i] = normal();
            K->sgd(&wt, g, hs[c].momentum != 0.0f ? buf : NULL, N, &hs[c], t);
            double mom = hs[c].momentum;
            for (int i = 0; i < N; i++) {
                double gp = g[i] + (double)hs[c].weight_decay * wd[i];
                double d = gp;
                if (mom != 0) {
                    bd[i] = t == 1 ? gp : mom * bd[i] + gp;
                    d = hs[c].nesterov ? gp + mom * bd[i] : bd[i];
                }
                wd[i] -= (double)hs[c].lr * d;
            }
        }
        for (int i = 0; i < N; i++) {
            CHECK_CLOSE(w[i], wd[i], 1e-6, 1e-6);
            if (hs[c].momentum != 0.0f) CHECK_CLOSE(buf[i], bd[i], 1e-6, 1e-6);
            CHECK(work[i].bits == mxp_f32_to_fp16(w[i]).bits);
        }
    }
}

/* Pure BF16 AdamW over more than one internal chunk: RNE store equals the
 * RNE of the FP32 master-path update; the SR store equals num's scalar SR
 * with mxp_rng_at(seed, counter + i), is deterministic, and lands on one of
 * the two BF16 neighbours of the FP32 update. */
static void test_adamw_pure(void) {
    enum { N = 600 };
    const mxp_adamw_hparams h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                 .weight_decay = 0.01f};
    static mxp_bf16 w0[N], wr[N], ws1[N], ws2[N];
    static float master[N], g[N], m0[N], v0[N], mm[N], vm[N], mr[N], vr[N], ms[N], vs[N];
    for (int i = 0; i < N; i++) {
        w0[i] = mxp_f32_to_bf16(normal());
        g[i] = normal();
        m0[i] = 0.1f * normal();
        v0[i] = 0.01f * fabsf(normal());
    }
    const int64_t t = 5;
    const uint64_t seed = 7, counter = 1u << 20;
    /* oracle: FP32 master path */
    for (int i = 0; i < N; i++) master[i] = mxp_bf16_to_f32(w0[i]);
    memcpy(mm, m0, sizeof mm);
    memcpy(vm, v0, sizeof vm);
    mxp_weights wm = {.master = master};
    K->adamw(&wm, g, mm, vm, N, &h, t);

    memcpy(wr, w0, sizeof wr);
    memcpy(mr, m0, sizeof mr);
    memcpy(vr, v0, sizeof vr);
    mxp_weights wp = {.work = wr, .work_type = MXP_DTYPE_BF16, .sr = false};
    K->adamw(&wp, g, mr, vr, N, &h, t);

    int bad_rne = 0, bad_sr = 0, bad_det = 0, bad_nb = 0, changed = 0;
    for (int i = 0; i < N; i++) bad_rne += wr[i].bits != mxp_f32_to_bf16(master[i]).bits;
    CHECK_MSG(bad_rne == 0, "pure bf16 RNE path: %d mismatches", bad_rne);
    CHECK(memcmp(mr, mm, sizeof mm) == 0 && memcmp(vr, vm, sizeof vm) == 0);

    for (int rep = 0; rep < 2; rep++) {
        mxp_bf16 *dst = rep ? ws2 : ws1;
        memcpy(dst, w0, sizeof w0);
        memcpy(ms, m0, sizeof ms);
        memcpy(vs, v0, sizeof vs);
        mxp_weights wsr = {.work = dst, .work_type = MXP_DTYPE_BF16, .sr = true,
                           .seed = seed, .counter = counter};
        K->adamw(&wsr, g, ms, vs, N, &h, t);
    }
    for (int i = 0; i < N; i++) {
        uint16_t want = mxp_f32_to_bf16_sr(master[i], mxp_rng_at(seed, counter + (uint64_t)i)).bits;
        bad_sr += ws1[i].bits != want;
        bad_det += ws1[i].bits != ws2[i].bits;
        uint16_t trunc = (uint16_t)(test_f32_bits(master[i]) >> 16);
        bad_nb += ws1[i].bits != trunc && ws1[i].bits != (uint16_t)(trunc + 1);
        changed += ws1[i].bits != wr[i].bits;
    }
    CHECK_MSG(bad_sr == 0, "SR store differs from mxp_f32_to_bf16_sr at counter+i: %d", bad_sr);
    CHECK(bad_det == 0);
    CHECK_MSG(bad_nb == 0, "SR result not a bf16 neighbour: %d", bad_nb);
    CHECK_MSG(changed > 0, "SR never differed from RNE over %d elements", N);
}

/* SR is unbiased: 4096 copies of 1 + 0.3 ulp round up about 30% of the time. */
static void test_sgd_sr_mean(void) {
    enum { N = 4096 };
    static mxp_bf16 w[N];
    static float g[N];
    const double ulp = 1.0 / 128.0; /* bf16 spacing in [1, 2) */
    for (int i = 0; i < N; i++) {
        w[i] = mxp_f32_to_bf16(1.0f);
        g[i] = -1.0f;
    }
    const mxp_sgd_hparams h = {.lr = (float)(0.3 * ulp)};
    mxp_weights wt = {.work = w, .work_type = MXP_DTYPE_BF16, .sr = true, .seed = 99, .counter = 0};
    K->sgd(&wt, g, NULL, N, &h, 1);
    double mean = 0;
    int ups = 0, other = 0;
    for (int i = 0; i < N; i++) {
        float v = mxp_bf16_to_f32(w[i]);
        mean += v;
        ups += v == (float)(1.0 + ulp);
        other += v != 1.0f && v != (float)(1.0 + ulp);
    }
    mean /= N;
    CHECK(other == 0);
    CHECK_MSG(fabs(mean - (1.0 + 0.3 * ulp)) < 0.05 * ulp, "SR mean %.9g, want %.9g", mean,
              1.0 + 0.3 * ulp);
    CHECK_MSG(ups > N / 4 && ups < N * 7 / 20, "SR rounded up %d of %d", ups, N);
    /* RNE rounds every copy down */
    for (int i = 0; i < N; i++) w[i] = mxp_f32_to_bf16(1.0f);
    wt.sr = false;
    K->sgd(&wt, g, NULL, N, &h, 1);
    int moved = 0;
    for (int i = 0; i < N; i++) moved += mxp_bf16_to_f32(w[i]) != 1.0f;
    CHECK(moved == 0);
}

int main(void) {
    mxp_rng_init(&rng, 20240611);
    test_dispatch();
    test_gemm();
    test_convert();
    test_eltwise();
    test_bias();
    test_layernorm();
    test_softmax();
    test_mse();
    test_xent();
    test_reduce();
    test_unscale_stats();
    test_adamw_master();
    test_sgd_master();
    test_adamw_pure();
    test_sgd_sr_mean();
    return test_finish("test_kernels");
}
