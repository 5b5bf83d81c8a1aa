/* tests/test_loops_isa_rows.c: the AVX-512 row-wise kernels and losses,
 * reductions and the fused gradient pass, and the optimizers, against the
 * generic reference kernels (oracles and bounds: test_loops_isa.c's file
 * comment; shared helpers: loops_cases.h). Exits 0 with a message when the
 * CPU cannot run AVX-512.
 */
#include "kernel_slots.h"
#include "loops_cases.h"

#include <stdlib.h>
#include <string.h>

/* ---- row-wise kernels and losses ------------------------------------------- */

/* A "+=" column sum onto the non-zero accumulator d0: generic adds row by
 * row into it, AVX-512 sums the batch from zero and adds once, so the two
 * differ by summation order: |diff| <= 2 (B + 2) u (|d0| + sum_b |t_b|),
 * t_b = dy (x NULL) or dy * xhat. */
static void check_accum(const char *what, const float *ref, const float *got, const float *d0,
                        const float *dy, const float *x, const float *mu, const float *rs,
                        int64_t B, int64_t C) {
    size_t bad = 0;
    for (int64_t c = 0; c < C; c++) {
        double mag = fabs(d0[c]);
        for (int64_t b = 0; b < B; b++) {
            double t = dy[b * C + c];
            if (x) t *= ((double)x[b * C + c] - mu[b]) * rs[b];
            mag += fabs(t);
        }
        if (!test_close(got[c], ref[c], 2.0 * (double)(B + 2) * U32 * mag, 0) && bad++ == 0)
            test_fail(__FILE__, __LINE__, "%s B=%lld C=%lld [%lld]: %a vs %a", what, (long long)B,
                      (long long)C, (long long)c, got[c], ref[c]);
    }
    CHECK_MSG(bad == 0, "%s B=%lld C=%lld: %zu mismatches", what, (long long)B, (long long)C, bad);
}

static const int64_t kRowsB[] = {1, 3, 17};

static void test_rows(void) {
    for (size_t bi = 0; bi < sizeof kRowsB / sizeof kRowsB[0]; bi++)
        for (size_t ci = 1; ci < N_LENS; ci++) {
            const int64_t B = kRowsB[bi], C = (int64_t)kLens[ci];
            const size_t n = (size_t)B * (size_t)C;
            const double cu = 2.0 * (double)(C + 2) * U32; /* reordered FP32 row sum, relative */
            float *x = ualloc(n), *dy = ualloc(n), *r1 = ualloc(n), *g1 = ualloc(n);
            float *gam = ualloc((size_t)C), *bet = ualloc((size_t)C);
            float *rb = ualloc((size_t)C), *gb = ualloc((size_t)C), *rb2 = ualloc((size_t)C),
                  *gb2 = ualloc((size_t)C);
            float *mu = ualloc((size_t)B), *rs = ualloc((size_t)B), *mu2 = ualloc((size_t)B),
                  *rs2 = ualloc((size_t)B);
            float off = 3.0f * mxp_rng_normal(&rng);
            for (size_t i = 0; i < n; i++) x[i] = off + mxp_rng_normal(&rng);
            fill(dy, n, 1.0f, false);
            fill(gam, (size_t)C, 1.0f, false);
            fill(bet, (size_t)C, 1.0f, false);

            /* add_bias, bias_grad: exact */
            memcpy(r1, x, n * 4);
            memcpy(g1, x, n * 4);
            G->add_bias(r1, bet, B, C);
            A->add_bias(g1, bet, B, C);
            cmp_exact("add_bias", n, g1, r1);
            A->add_bias(g1, NULL, B, C);
            cmp_exact("add_bias(NULL)", n, g1, r1);
            memset(rb, 0, (size_t)C * 4);
            memset(gb, 0, (size_t)C * 4);
            G->bias_grad(rb, dy, B, C);
            A->bias_grad(gb, dy, B, C);
            cmp_exact("bias_grad", (size_t)C, gb, rb);
            memcpy(rb, gam, (size_t)C * 4); /* onto a non-zero accumulator */
            memcpy(gb, gam, (size_t)C * 4);
            G->bias_grad(rb, dy, B, C);
            A->bias_grad(gb, dy, B, C);
            check_accum("bias_grad +=", rb, gb, gam, dy, NULL, NULL, NULL, B, C);

            /* layernorm forward, with and without gamma/beta */
            for (int aff = 0; aff < 2; aff++) {
                const float *ga = aff ? gam : NULL, *be = aff ? bet : NULL;
                G->layernorm_fwd(r1, mu, rs, x, ga, be, B, C, 1e-5f);
                A->layernorm_fwd(g1, mu2, rs2, x, ga, be, B, C, 1e-5f);
                size_t bad = 0;
                for (int64_t b = 0; b < B; b++) {
                    const float *xr = x + b * C;
                    double sabs = 0, maxg = 1, xhmax = 0;
                    for (int64_t c = 0; c < C; c++) {
                        sabs += fabs(xr[c]);
                        if (ga && fabs(ga[c]) > maxg) maxg = fabs(ga[c]);
                        double xh = fabs(((double)xr[c] - mu[b]) * rs[b]);
                        if (xh > xhmax) xhmax = xh;
                    }
                    /* mean: reordered sum; rstd: sum of squares (non-negative
                     * terms, and first-order insensitive to the mean). */
                    bad += !test_close(mu2[b], mu[b], cu * sabs / (double)C, 4 * U32);
                    bad += !test_close(rs2[b], rs[b], 0, cu + 8 * U32);
                    /* dy = dmean rstd gamma + xhat drstd gamma (+ roundings) */
                    double tol_y = (cu * sabs / (double)C * rs[b] + (cu + 8 * U32) * (xhmax + 1)) * maxg;
                    for (int64_t c = 0; c < C; c++)
                        if (!test_close(g1[b * C + c], r1[b * C + c], tol_y, 8 * U32) && bad++ == 0)
                            test_fail(__FILE__, __LINE__, "layernorm_fwd B=%lld C=%lld [%lld,%lld]: %a vs %a",
                                      (long long)B, (long long)C, (long long)b, (long long)c,
                                      g1[b * C + c], r1[b * C + c]);
                }
                CHECK_MSG(bad == 0, "layernorm_fwd B=%lld C=%lld aff=%d: %zu mismatches", (long long)B,
                          (long long)C, aff, bad);
                /* in place */
                memcpy(g1, x, n * 4);
                A->layernorm_fwd(g1, mu2, rs2, g1, ga, be, B, C, 1e-5f);
                float *g2 = ualloc(n);
                A->layernorm_fwd(g2, NULL, NULL, x, ga, be, B, C, 1e-5f);
                cmp_exact("layernorm_fwd in place", n, g1, g2);
                ufree(g2);

                /* backward: dgamma/dbeta exact from zero, one rounding onto
                 * a non-zero accumulator; dx within the row-sum bound */
                memcpy(rb, gam, (size_t)C * 4);
                memcpy(gb, gam, (size_t)C * 4);
                memcpy(rb2, bet, (size_t)C * 4);
                memcpy(gb2, bet, (size_t)C * 4);
                G->layernorm_bwd(r1, rb, rb2, dy, x, mu, rs, ga, B, C);
                A->layernorm_bwd(g1, gb, gb2, dy, x, mu, rs, ga, B, C);
                check_accum("layernorm_bwd dgamma +=", rb, gb, gam, dy, x, mu, rs, B, C);
                check_accum("layernorm_bwd dbeta +=", rb2, gb2, bet, dy, NULL, NULL, NULL, B, C);
                memset(rb, 0, (size_t)C * 4);
                memset(gb, 0, (size_t)C * 4);
                memset(rb2, 0, (size_t)C * 4);
                memset(gb2, 0, (size_t)C * 4);
                G->layernorm_bwd(r1, rb, rb2, dy, x, mu, rs, ga, B, C);
                A->layernorm_bwd(g1, gb, gb2, dy, x, mu, rs, ga, B, C);
                cmp_exact("layernorm_bwd dgamma", (size_t)C, gb, rb);
                cmp_exact("layernorm_bwd dbeta", (size_t)C, gb2, rb2);
                bad = 0;
                for (int64_t b = 0; b < B; b++) {
                    double sg = 0, sgx = 0, xhmax = 0, gcmax = 0;
                    for (int64_t c = 0; c < C; c++) {
                        double xh = ((double)x[b * C + c] - mu[b]) * rs[b];
                        double gc = dy[b * C + c] * (ga ? ga[c] : 1.0f);
                        sg += fabs(gc);
                        sgx += fabs(gc * xh);
                        if (fabs(xh) > xhmax) xhmax = fabs(xh);
                        if (fabs(gc) > gcmax) gcmax = fabs(gc);
                    }
                    /* dx = rstd (gc - mean(gc) - xhat mean(gc xhat)): the two
                     * reordered means, plus roundings of the sum's terms */
                    double tol = 2.0 * rs[b] * cu * (sg + (xhmax + 1) * sgx) / (double)C +
                                 4 * U32 * rs[b] * (gcmax + (sg + xhmax * sgx) / (double)C);
                    for (int64_t c = 0; c < C; c++)
                        if (!test_close(g1[b * C + c], r1[b * C + c], tol, 16 * U32) && bad++ == 0)
                            test_fail(__FILE__, __LINE__, "layernorm_bwd dx B=%lld C=%lld [%lld]: %a vs %a",
                                      (long long)B, (long long)C, (long long)c, g1[b * C + c],
                                      r1[b * C + c]);
                }
                CHECK_MSG(bad == 0, "layernorm_bwd B=%lld C=%lld: %zu mismatches", (long long)B,
                          (long long)C, bad);
                memcpy(g1, dy, n * 4); /* dx aliases dy */
                A->layernorm_bwd(g1, NULL, NULL, g1, x, mu, rs, ga, B, C);
                float *g3 = ualloc(n);
                A->layernorm_bwd(g3, NULL, NULL, dy, x, mu, rs, ga, B, C);
                cmp_exact("layernorm_bwd in place", n, g1, g3);
                ufree(g3);
            }

            /* softmax: y = e / s, e within 1+1 ulp, s a reordered sum */
            fill(r1, n, 3.0f, false);
            if (B > 1) { /* specials in rows 1 and 2 */
                r1[C + C / 2] = mxp_rng_below(&rng, 2) ? NAN : INFINITY;
                r1[2 * C - 1] = -INFINITY;
            }
            memcpy(x, r1, n * 4);
            G->softmax_fwd(r1, x, B, C);
            A->softmax_fwd(g1, x, B, C);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                if (!test_close(g1[i], r1[i], 1e-38, 2 * cu + 8 * U32) && bad++ == 0)
                    test_fail(__FILE__, __LINE__, "softmax B=%lld C=%lld [%zu]: %a vs %a", (long long)B,
                              (long long)C, i, g1[i], r1[i]);
            CHECK_MSG(bad == 0, "softmax B=%lld C=%lld: %zu mismatches", (long long)B, (long long)C, bad);
            memcpy(g1, x, n * 4);
            A->softmax_fwd(g1, g1, B, C);
            float *g2 = ualloc(n);
            A->softmax_fwd(g2, x, B, C);
            cmp_exact("softmax in place", n, g1, g2);

            /* mse: dpred exact, loss a reordered double sum of squares */
            fill(x, n, 1.0f, false);
            fill(dy, n, 1.0f, false);
            double lr = ks_mse(G, r1, x, dy, B, C, 1024.0f);
            double lg = ks_mse(A, g1, x, dy, B, C, 1024.0f);
            cmp_exact("mse dpred", n, g1, r1);
            CHECK_CLOSE(lg, lr, 0, 2.0 * (double)n * UD);
            CHECK(ks_mse(A, NULL, x, dy, B, C, 1.0f) == lg);

            /* softmax cross-entropy, labels incl. one out of range */
            int32_t *lab = test_xmalloc((size_t)B * 4);
            for (int64_t b = 0; b < B; b++) lab[b] = (int32_t)mxp_rng_below(&rng, (uint32_t)C);
            if (B > 3) lab[2] = (int32_t)C; /* NaN loss for that row, no one-hot */
            fill(x, n, 3.0f, false);
            lr = ks_softmax_xent(G, r1, x, lab, B, C, 256.0f);
            lg = ks_softmax_xent(A, g1, x, lab, B, C, 256.0f);
            /* per row |d lse| <= ds/s + 2 ulp(lse) <= cu + 2u + 2 |lse| 2^-23,
             * |lse| <= max|x| + log C with max|x| < 20 here */
            CHECK_CLOSE(lg, lr, cu + 2 * U32 + 2 * (20.0 + log((double)C)) * 0x1p-23, 0);
            const double kk = 256.0 / (double)B;
            bad = 0;
            for (size_t i = 0; i < n; i++)
                if (!test_close(g1[i], r1[i], kk * (2 * cu + 8 * U32), 8 * U32) && bad++ == 0)
                    test_fail(__FILE__, __LINE__, "softmax_xent B=%lld C=%lld [%zu]: %a vs %a",
                              (long long)B, (long long)C, i, g1[i], r1[i]);
            CHECK_MSG(bad == 0, "softmax_xent B=%lld C=%lld: %zu mismatches", (long long)B, (long long)C,
                      bad);
            memcpy(g2, x, n * 4);
            double la = ks_softmax_xent(A, g2, g2, lab, B, C, 256.0f);
            CHECK(same((float)la, (float)lg));
            cmp_exact("softmax_xent in place", n, g2, g1);
            CHECK(same((float)ks_softmax_xent(A, NULL, x, lab, B, C, 1.0f), (float)lg));
            free(lab);
            ufree(g2);
            ufree(x);
            ufree(dy);
            ufree(r1);
            ufree(g1);
            ufree(gam);
            ufree(bet);
            ufree(rb);
            ufree(gb);
            ufree(rb2);
            ufree(gb2);
            ufree(mu);
            ufree(rs);
            ufree(mu2);
            ufree(rs2);
        }
    /* empty shapes */
    CHECK(ks_mse(A, NULL, NULL, NULL, 0, 5, 1.0f) == 0.0);
    CHECK(ks_softmax_xent(A, NULL, NULL, NULL, 3, 0, 1.0f) == 0.0);
}

/* ---- reductions and the fused gradient pass ------------------------------- */

static void test_reduce(void) {
    for (size_t li = 0; li <= N_LENS; li++) {
        size_t n = li < N_LENS ? kLens[li] : BIG;
        float *x = ualloc(n), *gr = ualloc(n), *ga = ualloc(n);
        fill(x, n, 3.0f, false);
        double sabs = 0, ssq = 0;
        for (size_t i = 0; i < n; i++) sabs += fabs(x[i]), ssq += (double)x[i] * x[i];
        CHECK_CLOSE(ks_sum(A, x, n), ks_sum(G, x, n), 2.0 * (double)n * UD * sabs, 0);
        CHECK_CLOSE(ks_sumsq(A, x, n), ks_sumsq(G, x, n), 0, 2.0 * (double)n * UD);
        /* absmax: exact, including the non-finite count */
        fill(x, n, 3.0f, true);
        int64_t nfg = -1, nfa = -2;
        float mg = ks_absmax(G, x, n, &nfg), ma = ks_absmax(A, x, n, &nfa);
        CHECK_MSG(same(ma, mg) && nfa == nfg, "absmax n=%zu: %a/%lld vs %a/%lld", n, ma,
                  (long long)nfa, mg, (long long)nfg);
        CHECK(same(ks_absmax(A, x, n, NULL), mg));
        double s1 = ks_sum(A, x, n), s0 = ks_sum(G, x, n);
        CHECK(isnan(s1) == isnan(s0) && (isnan(s0) || isinf(s0) == isinf(s1)));

        /* unscale_stats: values, counts and absmax exact; sumsq reordered */
        static const float invs[] = {1.0f / 65536.0f, 1.0f, 4.0f, 1e-30f};
        for (size_t k = 0; k < sizeof invs / sizeof invs[0]; k++)
            for (int nat = 0; nat < 2; nat++) {
                fill(x, n, 1000.0f, true);
                for (size_t i = 0; i < n; i += 5) x[i] = (float)mxp_rng_below(&rng, 3) * 1e-39f;
                for (size_t i = 3; i < n; i += 7) /* -0 (read as +0) and negative subnormals */
                    x[i] = (float)mxp_rng_below(&rng, 3) * -1e-39f;
                memcpy(gr, x, n * 4);
                memcpy(ga, x, n * 4);
                mxp_grad_stats sr, sa;
                float at = nat ? 2048.0f : INFINITY;
                G->unscale_stats(gr, n, invs[k], at, &sr);
                A->unscale_stats(ga, n, invs[k], at, &sa);
                cmp_exact("unscale_stats values", n, ga, gr);
                CHECK_MSG(sa.n == sr.n && sa.nonfinite == sr.nonfinite && sa.zeros == sr.zeros &&
                              sa.near_overflow == sr.near_overflow && same(sa.absmax, sr.absmax),
                          "unscale_stats n=%zu inv=%g: n %lld/%lld nonfinite %lld/%lld zeros "
                          "%lld/%lld near %lld/%lld absmax %a/%a",
                          n, invs[k], (long long)sa.n, (long long)sr.n, (long long)sa.nonfinite,
                          (long long)sr.nonfinite, (long long)sa.zeros, (long long)sr.zeros,
                          (long long)sa.near_overflow, (long long)sr.near_overflow, sa.absmax,
                          sr.absmax);
                CHECK_CLOSE(sa.sumsq, sr.sumsq, 0, 2.0 * (double)n * UD);
            }
        ufree(x);
        ufree(gr);
        ufree(ga);
    }
}

/* Large reductions run in MXP_AVX512_RED_PARTS fixed parts on the thread
 * pool (loops.h): the whole-buffer result must equal the parts' results
 * (each part below the threading threshold) combined in order, which is
 * what makes it independent of the thread count. */
static void test_reduce_parts(void) {
    const size_t sizes[] = {MXP_AVX512_PAR_MIN, MXP_AVX512_PAR_MIN + 5, 3 * MXP_AVX512_PAR_MIN + 77};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        float *x = ualloc(n), *y = ualloc(n), *g1 = ualloc(n), *g2 = ualloc(n);
        fill(x, n, 100.0f, false); /* finite: sums are compared bit for bit */
        for (size_t i = 0; i < n; i += 3) x[i] *= 1e-37f;
        memcpy(y, x, n * 4);
        for (size_t i = 0; i < n; i += 997) y[i] = i % 2 ? INFINITY : NAN;
        memcpy(g1, y, n * 4);
        memcpy(g2, y, n * 4);
        double sum = 0, ssq = 0;
        float am = 0;
        int64_t nf = 0;
        mxp_grad_stats whole, acc = {0};
        A->unscale_stats(g1, n, 0.25f, 64.0f, &whole);
        const size_t blocks = (n + MXP_AVX512_PAR_ALIGN - 1) / MXP_AVX512_PAR_ALIGN;
        for (size_t p = 0; p < MXP_AVX512_RED_PARTS; p++) {
            size_t lo = blocks * p / MXP_AVX512_RED_PARTS * MXP_AVX512_PAR_ALIGN;
            size_t hi = blocks * (p + 1) / MXP_AVX512_RED_PARTS * MXP_AVX512_PAR_ALIGN;
            if (hi > n) hi = n;
            if (lo > n) lo = n;
            CHECK(hi - lo < MXP_AVX512_PAR_MIN);
            sum += ks_sum(A, x + lo, hi - lo);
            ssq += ks_sumsq(A, x + lo, hi - lo);
            int64_t pnf = 0;
            float pm = ks_absmax(A, y + lo, hi - lo, &pnf);
            if (pm > am) am = pm;
            nf += pnf;
            mxp_grad_stats ps;
            A->unscale_stats(g2 + lo, hi - lo, 0.25f, 64.0f, &ps);
            acc.n += ps.n;
            acc.nonfinite += ps.nonfinite;
            acc.zeros += ps.zeros;
            acc.near_overflow += ps.near_overflow;
            acc.sumsq += ps.sumsq;
            if (ps.absmax > acc.absmax) acc.absmax = ps.absmax;
        }
        int64_t wnf = -1;
        float wm = ks_absmax(A, y, n, &wnf);
        CHECK_MSG(sum == ks_sum(A, x, n), "sum n=%zu: parts %.17g, whole %.17g", n, sum, ks_sum(A, x, n));
        CHECK_MSG(ssq == ks_sumsq(A, x, n), "sumsq n=%zu: parts %.17g, whole %.17g", n, ssq,
                  ks_sumsq(A, x, n));
        CHECK(same(wm, am) && wnf == nf && nf > 0);
        CHECK(memcmp(g1, g2, n * 4) == 0);
        CHECK_MSG(whole.n == acc.n && whole.nonfinite == acc.nonfinite && whole.zeros == acc.zeros &&
                      whole.near_overflow == acc.near_overflow && whole.sumsq == acc.sumsq &&
                      same(whole.absmax, acc.absmax),
                  "unscale_stats n=%zu: whole != its parts combined in order", n);
        ufree(x);
        ufree(y);
        ufree(g1);
        ufree(g2);
    }
}

/* ---- optimizers -------------------------------------------------------------- */

typedef struct opt_case {
    bool master;     /* master + recast, else pure */
    mxp_dtype work;  /* work dtype (F32 with master: no separate work) */
    bool sr;
} opt_case;

/* One optimizer step with table k on copies of the state; returns buffers. */
static void opt_run(const mxp_kernels *k, bool adam, const opt_case *oc, size_t n, const float *w0,
                    const float *g, const float *m0, const float *v0, int64_t t, float *w_out,
                    void *work_out, float *m_out, float *v_out, bool use_buf) {
    memcpy(w_out, w0, n * 4);
    memcpy(m_out, m0, n * 4);
    memcpy(v_out, v0, n * 4);
    mxp_convert(oc->work, work_out, MXP_DTYPE_F32, w0, n);
    mxp_weights w = {0};
    w.master = oc->master ? w_out : NULL;
    w.work = oc->master && oc->work == MXP_DTYPE_F32 ? NULL : work_out;
    w.work_type = oc->work;
    w.sr = oc->sr;
    w.seed = 77;
    w.counter = 13;
    if (adam) {
        mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, t == 2 ? 0.01f : 0.0f};
        k->adamw(&w, g, m_out, v_out, n, &h, t);
    } else {
        mxp_sgd_hparams h = {0.05f, t == 1 ? 0.0f : 0.9f, t == 3 ? 1e-4f : 0.0f, t == 3};
        k->sgd(&w, g, use_buf ? m_out : NULL, n, &h, t);
    }
}

static void test_optim(void) {
    static const opt_case cases[] = {
        {true, MXP_DTYPE_F32, false},  {true, MXP_DTYPE_BF16, false}, {true, MXP_DTYPE_F16, false},
        {true, MXP_DTYPE_F8_E4M3, false}, {false, MXP_DTYPE_BF16, true}, {false, MXP_DTYPE_F16, true},
        {false, MXP_DTYPE_BF16, false}, {false, MXP_DTYPE_F16, false}, {false, MXP_DTYPE_F32, false}};
    for (size_t li = 0; li <= N_LENS; li++) {
        size_t n = li < N_LENS ? kLens[li] : 5000;
        float *w0 = ualloc(n), *g = ualloc(n), *m0 = ualloc(n), *v0 = ualloc(n);
        float *wr = ualloc(n), *wa = ualloc(n), *mr = ualloc(n), *ma = ualloc(n), *vr = ualloc(n),
              *va = ualloc(n);
        void *kr = test_xmalloc(n * 4), *ka = test_xmalloc(n * 4);
        fill(w0, n, 0.1f, false);
        fill(g, n, 0.01f, false);
        fill(m0, n, 0.001f, false);
        for (size_t i = 0; i < n; i++) v0[i] = 1e-6f * mxp_rng_uniform(&rng);
        for (size_t i = 0; i < n; i += 7) g[i] = i % 2 ? 0.0f : 1e-30f;
        for (size_t i = 5; i < n; i += 11) { /* weights that stay FP32 subnormals (the */
            w0[i] = (i % 3 ? 1.0f : -1.0f) * 1e-40f * (float)(1 + i % 5); /* integer path */
            g[i] = m0[i] = 0.0f;                                          /* of a recast) */
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int adam = 0; adam < 2; adam++)
                for (int64_t t = 1; t <= 3; t++) {
                    const opt_case *oc = &cases[c];
                    bool use_buf = t != 2 || adam;
                    opt_run(G, adam, oc, n, w0, g, m0, v0, t, wr, kr, mr, vr, use_buf);
                    opt_run(A, adam, oc, n, w0, g, m0, v0, t, wa, ka, ma, va, use_buf);
                    size_t esz = mxp_dtype_info(oc->work)->size;
                    size_t bad = cmp_exact("optim master", n, wa, wr) + cmp_exact("optim m", n, ma, mr) +
                                 cmp_exact("optim v", n, va, vr);
                    bad += memcmp(ka, kr, n * esz) != 0;
                    CHECK_MSG(bad == 0, "%s n=%zu t=%lld master=%d work=%s sr=%d: not bit-identical",
                              adam ? "adamw" : "sgd", n, (long long)t, oc->master,
                              mxp_dtype_name(oc->work), oc->sr);
                }
        ufree(w0);
        ufree(g);
        ufree(m0);
        ufree(v0);
        ufree(wr);
        ufree(wa);
        ufree(mr);
        ufree(ma);
        ufree(vr);
        ufree(va);
        free(kr);
        free(ka);
    }
    mxp_weights none = {0};
    mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    A->adamw(&none, NULL, NULL, NULL, 10, &h, 1); /* no weights: no-op, no access */
}


int main(void) {
    if (!loops_cases_init("test_loops_isa_rows", 20240611)) return 0;
    test_rows();
    test_reduce();
    test_reduce_parts();
    test_optim();
    return test_finish("test_loops_isa_rows");
}
