/* tests/test_numerics.c: the shared-numerics headers (src/backend/numerics/)
 * on the host, each against an independent oracle:
 *   - Philox4x32-10 against the Random123 known-answer vectors
 *     (kat_vectors, Salmon et al. SC'11), and mxp_rng_at's layout;
 *   - the loss-scaler rule against PyTorch's _amp_update_scale_cuda_kernel
 *     (re-implemented here from its source, non-power-of-two factors so the
 *     double->float roundings matter) and Megatron-LM's DynamicGradScaler
 *     for hysteresis and min_scale;
 *   - AdamW / SGD element updates against torch.optim dumps
 *     (tests/data/optim_ref.bin, scripts/gen_optim_fixture.py), through every
 *     weight path of the CPU kernels;
 *   - the gradient-pass element rule against exact double arithmetic.
 * The CUDA backend compiles these same headers (tests/test_cuda_backend.c
 * compares device and host on a GPU).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/numerics/gradpass.h"
#include "backend/numerics/optim.h"
#include "backend/numerics/philox.h"
#include "backend/numerics/scaler_rule.h"
#include "kernels/kernels.h"
#include "testutil.h"

/* ---- Philox ------------------------------------------------------------- */

static void test_philox_kat(void) {
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        mxp_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int j = 0; j < 4; j++)
            CHECK_MSG(out[j] == kat[i][6 + j], "philox KAT %d word %d: %08x, expected %08x", i,
                      j, out[j], kat[i][6 + j]);
    }
    /* mxp_philox_at / mxp_rng_at: draw c is word c%4 of block c/4 (low 64
     * counter bits), key = seed low word first. */
    uint64_t seed = 0x299f31d0a4093822ull, c = (0x05a308d3243f6a88ull << 2) | 2u;
    uint32_t ctr[4] = {0x243f6a88, 0x05a308d3, 0, 0}, key[2] = {0xa4093822, 0x299f31d0}, out[4];
    mxp_philox4x32_10(ctr, key, out);
    CHECK(mxp_philox_at(seed, c) == out[2]);
    CHECK(mxp_rng_at(seed, c) == out[2]);
}

/* ---- loss-scaler rule ---------------------------------------------------- */

/* PyTorch aten/src/ATen/native/cuda/AmpKernels.cu, _amp_update_scale_cuda_kernel,
 * with Megatron-LM DynamicGradScaler's hysteresis and min_scale wrapped
 * around the backoff (hysteresis counter decremented on every overflow,
 * backoff once it reaches <= 0, reset on growth). */
typedef struct ref_scaler {
    float scale;
    int growth_tracker, hyst;
} ref_scaler;

static void ref_update(ref_scaler *r, bool found_inf, double growth, double backoff,
                       int interval, int hysteresis, float min_scale) {
    if (found_inf) {
        r->growth_tracker = 0;
        r->hyst--;
        if (r->hyst <= 0) {
            float s = (float)(r->scale * backoff); /* float * double -> float */
            r->scale = s < min_scale ? min_scale : s;
        }
    } else {
        int successful = r->growth_tracker + 1;
        if (successful == interval) {
            float ns = (float)(r->scale * growth);
            if (isfinite(ns)) r->scale = ns;
            r->growth_tracker = 0;
            r->hyst = hysteresis;
        } else {
            r->growth_tracker = successful;
        }
    }
}

static void scaler_case(double growth, double backoff, int interval, int hysteresis,
                        float min_scale, double p_overflow, uint64_t seed) {
    mxp_scaler_rule rule = {true, growth, backoff, interval, hysteresis,
                            min_scale > FLT_MIN ? min_scale : FLT_MIN, INFINITY};
    mxp_scaler_rule_state st = {65536.0f, 0, hysteresis, 0, 0, 0};
    ref_scaler ref = {65536.0f, 0, hysteresis};
    int64_t overflows = 0;
    for (int i = 0; i < 4000; i++) {
        bool inf = (double)mxp_rng_at(seed, (uint64_t)i) < p_overflow * 4294967296.0;
        overflows += inf;
        float old = st.scale;
        mxp_scaler_rule_event e = mxp_scaler_rule_step(&rule, &st, inf);
        ref_update(&ref, inf, growth, backoff, interval, hysteresis, min_scale);
        if (ref.scale < FLT_MIN) {
            /* Documented difference (amp/scaler.c): mixprec stops at the
             * smallest normal float so that 1/scale stays finite. */
            CHECK(st.scale == FLT_MIN);
            return;
        }
        if (test_f32_bits(st.scale) != test_f32_bits(ref.scale) ||
            st.growth_tracker != ref.growth_tracker) {
            test_fail(__FILE__, __LINE__,
                      "scaler rule (g %g b %g i %d h %d min %g) step %d: scale %a tracker "
                      "%lld, reference %a %d",
                      growth, backoff, interval, hysteresis, (double)min_scale, i,
                      (double)st.scale, (long long)st.growth_tracker, (double)ref.scale,
                      ref.growth_tracker);
            return;
        }
        CHECK(e.old_scale == old && e.new_scale == st.scale && e.overflow == inf);
        CHECK(e.backed_off == (st.scale < old) && e.grew == (st.scale > old));
    }
    CHECK(st.total_steps == 4000 && st.overflow_steps == overflows);
}

static void test_scaler_rule(void) {
    scaler_case(2.0, 0.5, 3, 1, 0.0f, 0.3, 1);       /* PyTorch defaults' shape */
    scaler_case(1.7, 0.37, 2, 1, 0.0f, 0.35, 2);     /* rounding of odd factors */
    scaler_case(3.1, 0.61, 5, 3, 0.0f, 0.2, 3);      /* hysteresis 3 */
    scaler_case(2.0, 0.5, 4, 2, 1024.0f, 0.6, 4);    /* floor at min_scale */
    scaler_case(1.01, 0.999, 1, 1, 0.0f, 0.01, 5);   /* grows every clean step */

    /* at_min and max_scale (no reference scaler has them: by definition). */
    mxp_scaler_rule rule = {true, 2.0, 0.5, 1, 1, 4.0f, 64.0};
    mxp_scaler_rule_state st = {8.0f, 0, 1, 0, 0, 0};
    mxp_scaler_rule_event e = mxp_scaler_rule_step(&rule, &st, true);
    CHECK(st.scale == 4.0f && !e.at_min && st.steps_at_min == 0);
    e = mxp_scaler_rule_step(&rule, &st, true);
    CHECK(st.scale == 4.0f && e.at_min && !e.backed_off && st.steps_at_min == 1);
    for (int i = 0; i < 10; i++) e = mxp_scaler_rule_step(&rule, &st, false);
    CHECK(st.scale == 64.0f && st.steps_at_min == 0 && !e.grew);
    /* disabled: scale pinned to 1, counters still advance */
    mxp_scaler_rule off = {false, 2.0, 0.5, 1, 1, FLT_MIN, INFINITY};
    mxp_scaler_rule_state so = {1.0f, 0, 1, 0, 0, 0};
    e = mxp_scaler_rule_step(&off, &so, true);
    CHECK(so.scale == 1.0f && e.overflow && so.overflow_steps == 1 && so.total_steps == 1);
}

/* ---- optimizers vs torch.optim ----------------------------------------- */

static float *load_fixture(uint32_t *n, uint32_t *s) {
    FILE *f = fopen(MXP_TEST_DATA_DIR "/optim_ref.bin", "rb");
    if (!f) return NULL;
    uint32_t h[4];
    float *buf = NULL;
    if (fread(h, 4, 4, f) == 4 && h[0] == 0x4F50544Du && h[1] == 1u) {
        size_t count = (size_t)h[2] * (1 + 4 * (size_t)h[3]);
        buf = test_xmalloc(count * sizeof(float));
        if (fread(buf, sizeof(float), count, f) != count) {
            free(buf);
            buf = NULL;
        }
        *n = h[2];
        *s = h[3];
    }
    fclose(f);
    return buf;
}

/* One weight path of the CPU kernel (k) for the fixture's case: FP32 master
 * (work NULL), master + BF16 work copy, pure FP32 "work" (no master). The
 * FP32 result must match torch within a few FP32 ulps of the weight (torch's
 * lerp/addcdiv round differently from the written-out formula). */
static void optim_case(const mxp_kernels *k, int which, const float *w0, const float *grads,
                       const float *ref, uint32_t n, uint32_t steps, int path) {
    float *w = test_xmalloc(n * sizeof(float)), *m = test_xmalloc(n * sizeof(float));
    float *v = test_xmalloc(n * sizeof(float));
    uint16_t *work = test_xmalloc(n * 2);
    memcpy(w, w0, n * sizeof(float));
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    mxp_weights wt = {0};
    if (path == 2) {
        wt.work = w;
        wt.work_type = MXP_DTYPE_F32;
    } else {
        wt.master = w;
        if (path == 1) {
            wt.work = work;
            wt.work_type = MXP_DTYPE_BF16;
        }
    }
    double worst = 0, upd = 0;
    double *moved = calloc(n, sizeof(double)); /* sum of |torch step| per element */
    if (!moved) abort();
    for (uint32_t s = 0; s < steps; s++) {
        const float *g = grads + (size_t)s * n;
        if (which == 0) {
            mxp_adamw_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
            k->adamw(&wt, g, m, v, n, &h, (int64_t)s + 1);
        } else if (which == 1) {
            mxp_sgd_hparams h = {0.01f, 0.9f, 1e-4f, true};
            k->sgd(&wt, g, m, n, &h, (int64_t)s + 1);
        } else {
            mxp_sgd_hparams h = {0.05f, 0.5f, 0.0f, false};
            k->sgd(&wt, g, m, n, &h, (int64_t)s + 1);
        }
        const float *r = ref + (size_t)s * n;
        for (uint32_t i = 0; i < n; i++) {
            double d = fabs((double)w[i] - (double)r[i]);
            double prev = s ? ref[(size_t)(s - 1) * n + i] : w0[i];
            if (fabs((double)r[i] - prev) > upd) upd = fabs((double)r[i] - prev);
            moved[i] += fabs((double)r[i] - prev);
            /* Rounding differences (lerp, addcdiv) are a few ulps of the
             * weight and of each step, and they propagate: the bound grows
             * with the distance travelled. A wrong formula misses by a
             * fraction of a step, far above it. */
            double tol = 8.0 * FLT_EPSILON * (fabs((double)r[i]) + moved[i]) + 1e-12;
            if (d / tol > worst) worst = d / tol;
            if (d > tol) {
                test_fail(__FILE__, __LINE__, "%s path %d step %u elem %u: %.9g, torch %.9g",
                          which == 0 ? "adamw" : "sgd", path, s + 1, i, (double)w[i],
                          (double)r[i]);
                goto done;
            }
            if (path == 1) {
                mxp_bf16 b = {work[i]};
                CHECK(b.bits == mxp_f32_to_bf16(w[i]).bits);
            }
        }
    }
    /* The tolerance must be far below a step's size, or the test could not
     * tell a wrong update from rounding. */
    CHECK_MSG(upd > 1e-4, "case %d: updates (largest %g) too small to test", which, upd);
    printf("  %-13s %-6s path %d: worst |mixprec - torch| = %.2f of tolerance\n",
           which == 0 ? "adamw" : which == 1 ? "sgd_nesterov" : "sgd_momentum", k->isa, path,
           worst);
done:
    free(w);
    free(m);
    free(v);
    free(work);
    free(moved);
}

static void test_optim_vs_torch(void) {
    uint32_t n = 0, s = 0;
    float *fx = load_fixture(&n, &s);
    CHECK_MSG(fx != NULL, "cannot read %s/optim_ref.bin", MXP_TEST_DATA_DIR);
    if (!fx) return;
    const float *w0 = fx, *grads = fx + n;
    for (int which = 0; which < 3; which++) {
        const float *ref = grads + (size_t)s * n * (1 + (size_t)which);
        for (int path = 0; path < 3; path++) {
            optim_case(mxp_kernels_generic(), which, w0, grads, ref, n, s, path);
            optim_case(mxp_kernels_get(), which, w0, grads, ref, n, s, path);
        }
    }
    free(fx);
}

/* Pure low-precision path: the stored bits are mxp_weight_store_bits of the
 * FP32 update, with SR drawing mxp_rng_at(seed, counter + i). */
static void test_pure_store(void) {
    enum { N = 777 };
    static float w32[N], g[N], m[N], v[N];
    static uint16_t work[N], expect[N];
    for (int i = 0; i < N; i++) {
        w32[i] = sinf((float)i) * 3.0f;
        g[i] = cosf((float)i * 0.7f) * 0.01f;
    }
    for (int bf = 0; bf < 2; bf++) {
        for (int sr = 0; sr < 2; sr++) {
            for (int i = 0; i < N; i++) {
                work[i] = mxp_weight_store_bits(w32[i], bf, false, 0, 0);
                m[i] = v[i] = 0.0f;
            }
            mxp_adamw_hparams h = {0.01f, 0.9f, 0.99f, 1e-8f, 0.1f};
            mxp_adamw_consts c = mxp_adamw_consts_make(0.01f, 0.9f, 0.99f, 1e-8f, 0.1f, 3);
            for (int i = 0; i < N; i++) {
                float mi = 0.0f, vi = 0.0f;
                float w = bf ? mxp_nr_bf16_to_f32(work[i]) : mxp_nr_fp16_to_f32(work[i]);
                float nw = mxp_adamw_elem(w, g[i], &mi, &vi, &c);
                expect[i] = mxp_weight_store_bits(nw, bf, sr, 99, 1000 + (uint64_t)i);
            }
            mxp_weights wt = {NULL, work, bf ? MXP_DTYPE_BF16 : MXP_DTYPE_F16, sr, 99, 1000};
            const mxp_kernels *ks[2] = {mxp_kernels_generic(), mxp_kernels_get()};
            uint16_t start[N];
            memcpy(start, work, sizeof start);
            for (int ki = 0; ki < 2; ki++) {
                memcpy(work, start, sizeof start);
                memset(m, 0, sizeof m);
                memset(v, 0, sizeof v);
                ks[ki]->adamw(&wt, g, m, v, N, &h, 3);
                CHECK_MSG(memcmp(work, expect, sizeof expect) == 0,
                          "pure %s sr=%d (%s): stored bits differ from the element rule",
                          bf ? "bf16" : "fp16", sr, ks[ki]->isa);
            }
        }
    }
    /* SR really is stochastic and unbiased-ish: 1 + 2^-10 in BF16 (ulp 2^-7)
     * rounds up with probability 1/8. */
    int up = 0;
    for (uint64_t i = 0; i < 80000; i++)
        up += mxp_weight_store_bits(1.0f + 0x1p-10f, true, true, 5, i) != 0x3f80;
    CHECK_MSG(up > 9400 && up < 10600, "SR round-up count %d of 80000, expected ~10000", up);
}

/* ---- gradient pass -------------------------------------------------------- */

static void test_gradpass(void) {
    const float inv = 0x1p-16f, near = 60000.0f;
    const float raw[] = {1.0f, -0.0f, 0.0f, 65504.0f, -61000.0f, 3.0e-30f, NAN, INFINITY,
                         -INFINITY, 1.0e38f, -2.5f, 59999.0f, 1e-45f};
    const int n = (int)(sizeof raw / sizeof raw[0]);
    mxp_gradpass_acc a = mxp_gradpass_acc_init(), b = mxp_gradpass_acc_init();
    int64_t nf = 0, zeros = 0, nr = 0;
    double ss = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        double exact = (double)raw[i] * 0x1p-16; /* power of two: exact in double */
        float got = mxp_gradpass_elem(raw[i], inv, near, i < 6 ? &a : &b);
        if (isnan(exact)) {
            CHECK(isnan(got));
        } else {
            /* 1e-45 * 2^-16 underflows to 0 in float (round to nearest) */
            double want = fabs(exact) < 0x1p-150 ? copysign(0.0, exact) : exact;
            CHECK_MSG((double)got == want, "elem %d: %a, expected %a", i, (double)got, want);
        }
        if (!isfinite(exact)) {
            nf++;
            continue;
        }
        double v = (double)got;
        if (v == 0) zeros++;
        if (fabs((double)raw[i]) >= near) nr++;
        if (fabs(v) > amax) amax = fabs(v);
        ss += v * v;
    }
    mxp_gradpass_acc_merge(&a, &b);
    CHECK(a.n == n && a.nonfinite == nf && a.zeros == zeros && a.near_overflow == nr);
    CHECK(a.nonfinite == 3 && a.zeros == 3 && a.near_overflow == 3);
    CHECK((double)a.absmax == amax);
    CHECK_CLOSE(a.sumsq, ss, 0, 1e-15);
}

int main(void) {
    test_philox_kat();
    test_scaler_rule();
    test_optim_vs_torch();
    test_pure_store();
    test_gradpass();
    return test_finish("test_numerics");
}
