/* tests/test_scaler.c: the dynamic loss scaler and the fused unscale check.
 *
 * Oracles:
 *   - PyTorch's own test cases, ported with their numbers
 *     (test_grad_scaling_update_scale, the growth-past-FLT_MAX case,
 *     test_grad_scaling_unscale on a 20x20 gradient with inv_scale 0.25);
 *   - an independent transcription of _amp_update_scale_cuda_kernel
 *     (ref_update below) driven with pseudo-random overflow sequences;
 *   - hand-computed sequences for hysteresis, min/max scale, at-min policies,
 *     the disabled scaler, validation messages and state round trips.
 */
#include <float.h>
#include <string.h>

#include <mixprec/amp.h>

#include "kernels/kernels.h"
#include "testutil.h"

/* Create a scaler or fail the test loudly (NULL returned). */
static mxp_scaler *make(const mxp_scaler_config *c)
{
    mxp_scaler *s = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_scaler_create(c, &s, &err), &err);
    return s;
}

static mxp_scaler_event step(mxp_scaler *s, bool inf)
{
    mxp_scaler_event ev;
    memset(&ev, 0xCD, sizeof ev);
    mxp_error err = {0};
    CHECK_OK(mxp_scaler_update(s, inf, &ev, &err), &err);
    return ev;
}

static mxp_scaler_state state(const mxp_scaler *s)
{
    mxp_scaler_state st;
    memset(&st, 0, sizeof st);
    mxp_scaler_get_state(s, &st);
    return st;
}

/* ---- PyTorch ports ------------------------------------------------------ */

static void test_defaults(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    CHECK(c.enabled);
    CHECK(c.init_scale == 65536.0);
    CHECK(c.growth_factor == 2.0);
    CHECK(c.backoff_factor == 0.5);
    CHECK(c.growth_interval == 2000);
    CHECK(c.hysteresis == 1);
    CHECK(c.min_scale == 0.0);
    CHECK(isinf(c.max_scale) && c.max_scale > 0);
    CHECK(c.at_min == MXP_SCALE_FLOOR_CONTINUE);
    mxp_error err = {0};
    CHECK_OK(mxp_scaler_config_validate(&c, &err), &err);

    mxp_scaler *s = make(&c);
    if (!s) return;
    CHECK(mxp_scaler_scale(s) == 65536.0f);
    CHECK(mxp_scaler_inv_scale(s) == 1.0f / 65536.0f);
    mxp_scaler_state st = state(s);
    CHECK(st.growth_tracker == 0 && st.hysteresis_left == 1 && st.overflow_steps == 0 &&
          st.total_steps == 0 && st.steps_at_min == 0);
    /* 1999 clean steps: no growth yet; the 2000th doubles the scale. */
    for (int i = 0; i < 1999; i++) step(s, false);
    st = state(s);
    CHECK(st.scale == 65536.0f && st.growth_tracker == 1999);
    mxp_scaler_event ev = step(s, false);
    CHECK(ev.grew && !ev.overflow && ev.old_scale == 65536.0f && ev.new_scale == 131072.0f);
    st = state(s);
    CHECK(st.scale == 131072.0f && st.growth_tracker == 0 && st.total_steps == 2000);
    ev = step(s, true);
    CHECK(ev.overflow && ev.backed_off && !ev.grew && !ev.at_min && !ev.fallback);
    CHECK(ev.new_scale == 65536.0f);
    CHECK(state(s).overflow_steps == 1);
    mxp_scaler_destroy(s);
    mxp_scaler_destroy(NULL);
}

/* PyTorch test_grad_scaling_update_scale: growth 2, backoff 0.25,
 * interval 2, scale 4: (tracker, scale) = (1, 4), (0, 8), then (0, 2). */
static void test_pytorch_update_scale(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.init_scale = 4.0;
    c.growth_factor = 2.0;
    c.backoff_factor = 0.25;
    c.growth_interval = 2;
    mxp_scaler *s = make(&c);
    if (!s) return;
    step(s, false);
    CHECK(state(s).growth_tracker == 1 && state(s).scale == 4.0f);
    step(s, false);
    CHECK(state(s).growth_tracker == 0 && state(s).scale == 8.0f);
    step(s, true);
    CHECK(state(s).growth_tracker == 0 && state(s).scale == 2.0f);
    mxp_scaler_destroy(s);
}

/* Growth that would overflow float is refused (PyTorch's isfinite check). */
static void test_pytorch_growth_not_past_inf(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.init_scale = 1e38;
    c.growth_factor = 16.0;
    c.growth_interval = 1;
    mxp_scaler *s = make(&c);
    if (!s) return;
    mxp_scaler_event ev = step(s, false);
    CHECK(!ev.grew);
    CHECK(isfinite(mxp_scaler_scale(s)));
    CHECK(mxp_scaler_scale(s) == (float)1e38);
    CHECK(state(s).growth_tracker == 0); /* reset even though nothing grew */
    mxp_scaler_destroy(s);
}

/* PyTorch test_grad_scaling_unscale, through the fused kernel. */
static void test_unscale_kernel(void)
{
    const mxp_kernels *k = mxp_kernels_get();
    CHECK(k != NULL && k->unscale_stats != NULL);
    if (!k || !k->unscale_stats) return;
    enum { N = 20 * 20 };
    float g[N];
    mxp_grad_stats gs;

    for (int i = 0; i < N; i++) g[i] = 4.0f;
    memset(&gs, 0xEE, sizeof gs);
    k->unscale_stats(g, N, 0.25f, INFINITY, &gs);
    bool all_one = true;
    for (int i = 0; i < N; i++) all_one &= g[i] == 1.0f;
    CHECK(all_one);
    CHECK(gs.nonfinite == 0);
    CHECK(gs.n == N);
    CHECK(gs.zeros == 0 && gs.near_overflow == 0);
    CHECK_CLOSE(gs.sumsq, 400.0, 0.0, 1e-12);
    CHECK(gs.absmax == 1.0f);

    /* One non-finite value anywhere sets found_inf. */
    const float bad[] = {INFINITY, -INFINITY, NAN};
    const int where[] = {0, 2 * 20 + 2, 217, N - 1};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        for (size_t w = 0; w < sizeof where / sizeof where[0]; w++) {
            for (int i = 0; i < N; i++) g[i] = 4.0f;
            g[where[w]] = bad[b];
            k->unscale_stats(g, N, 0.25f, INFINITY, &gs);
            CHECK_MSG(gs.nonfinite == 1, "%g at %d: nonfinite = %lld", (double)bad[b],
                      where[w], (long long)gs.nonfinite);
            bool found_inf = gs.nonfinite > 0;
            CHECK(found_inf);
            CHECK(gs.absmax == 1.0f); /* finite values only */
        }
    }
    /* The generic reference agrees on the found_inf verdict. */
    const mxp_kernels *gk = mxp_kernels_generic();
    if (gk && gk->unscale_stats) {
        for (int i = 0; i < N; i++) g[i] = 4.0f;
        g[N / 2] = NAN;
        gk->unscale_stats(g, N, 0.25f, INFINITY, &gs);
        CHECK(gs.nonfinite == 1);
    }
}

/* Independent transcription of PyTorch's _amp_update_scale_cuda_kernel:
 * float scale, double factors, float rounding of the products. */
static void ref_update(float *scale, int64_t *tracker, bool found_inf, double growth,
                       double backoff, int64_t interval)
{
    if (found_inf) {
        *scale = (float)(*scale * backoff);
        *tracker = 0;
        return;
    }
    int64_t successful = *tracker + 1;
    if (successful == interval) {
        float grown = (float)(*scale * growth);
        if (isfinite(grown)) *scale = grown;
        *tracker = 0;
    } else {
        *tracker = successful;
    }
}

static void test_against_reference(void)
{
    static const struct {
        double init, growth, backoff;
        int64_t interval;
        uint32_t p_inf_pct;
    } cases[] = {
        {65536.0, 2.0, 0.5, 3, 15},  {3.0, 1.7, 0.5, 1, 40},  {1e30, 16.0, 0.5, 1, 10},
        {1000.0, 1.1, 0.9, 7, 12},   {0.75, 3.0, 0.5, 2, 20},
    };
    int refused_at_inf = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        mxp_scaler_config c = mxp_scaler_config_default();
        c.init_scale = cases[ci].init;
        c.growth_factor = cases[ci].growth;
        c.backoff_factor = cases[ci].backoff;
        c.growth_interval = cases[ci].interval;
        mxp_scaler *s = make(&c);
        if (!s) return;
        float ref = (float)c.init_scale;
        int64_t tracker = 0, overflows = 0;
        uint64_t lcg = 0x9E3779B97F4A7C15ull + ci;
        int mismatches = 0, grows = 0, backoffs = 0;
        for (int t = 0; t < 5000; t++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            bool inf = (uint32_t)(lcg >> 33) % 100u < cases[ci].p_inf_pct;
            float before = ref;
            ref_update(&ref, &tracker, inf, c.growth_factor, c.backoff_factor,
                       c.growth_interval);
            overflows += inf;
            grows += ref > before;
            backoffs += ref < before;
            refused_at_inf += !inf && tracker == 0 && ref == before &&
                              !isfinite((float)(before * c.growth_factor));
            mxp_scaler_event ev = step(s, inf);
            mxp_scaler_state st = state(s);
            /* the reference must stay in the range where no floor applies */
            CHECK(ref >= FLT_MIN);
            if (st.scale != ref || st.growth_tracker != tracker || ev.overflow != inf ||
                ev.grew != (!inf && ref > before) || ev.backed_off != (inf && ref < before))
                mismatches++;
        }
        CHECK_MSG(mismatches == 0, "case %zu: %d mismatches vs PyTorch reference", ci,
                  mismatches);
        mxp_scaler_state st = state(s);
        CHECK(st.total_steps == 5000 && st.overflow_steps == overflows);
        CHECK_MSG(grows > 10 && backoffs > 10, "case %zu not exercised: %d grows, %d backoffs",
                  ci, grows, backoffs);
        mxp_scaler_destroy(s);
    }
    /* at least one sequence pushed against FLT_MAX and had growth refused */
    CHECK_MSG(refused_at_inf > 0, "no growth was refused at the float limit");
}

static void test_inv_scale(void)
{
    const double inits[] = {65536.0, 3.0, 7.0, 1e-30, 3e38, 0.1};
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++) {
        mxp_scaler_config c = mxp_scaler_config_default();
        c.init_scale = inits[i];
        c.min_scale = 0;
        mxp_scaler *s = make(&c);
        if (!s) return;
        float sc = (float)inits[i];
        CHECK(mxp_scaler_scale(s) == sc);
        CHECK(mxp_scaler_inv_scale(s) == (float)(1.0 / (double)sc));
        CHECK(isfinite(mxp_scaler_inv_scale(s)));
        mxp_scaler_destroy(s);
    }
}

/* ---- extras ------------------------------------------------------------- */

static void test_hysteresis(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.init_scale = 1024.0;
    c.hysteresis = 3;
    c.growth_interval = 4;
    mxp_scaler *s = make(&c);
    if (!s) return;
    CHECK(state(s).hysteresis_left == 3);

    /* Two overflows tolerated: skipped but no backoff. */
    step(s, false);
    mxp_scaler_event ev = step(s, true);
    CHECK(ev.overflow && !ev.backed_off && ev.new_scale == 1024.0f);
    CHECK(state(s).hysteresis_left == 2 && state(s).growth_tracker == 0);
    ev = step(s, true);
    CHECK(ev.overflow && !ev.backed_off && state(s).hysteresis_left == 1);
    /* Third backs off; the budget stays spent: every further overflow backs off. */
    ev = step(s, true);
    CHECK(ev.backed_off && ev.new_scale == 512.0f && state(s).hysteresis_left == 1);
    ev = step(s, true);
    CHECK(ev.backed_off && ev.new_scale == 256.0f && state(s).hysteresis_left == 1);
    /* Clean steps short of the interval do not restore the budget... */
    for (int i = 0; i < 3; i++) step(s, false);
    CHECK(state(s).hysteresis_left == 1 && state(s).growth_tracker == 3);
    /* ...completing the interval grows the scale and restores it. */
    ev = step(s, false);
    CHECK(ev.grew && ev.new_scale == 512.0f);
    CHECK(state(s).hysteresis_left == 3 && state(s).growth_tracker == 0);
    ev = step(s, true);
    CHECK(!ev.backed_off && state(s).hysteresis_left == 2 && ev.new_scale == 512.0f);
    mxp_scaler_destroy(s);

    /* Isolated overflows separated by short clean runs exhaust the budget. */
    c.hysteresis = 2;
    s = make(&c);
    if (!s) return;
    ev = step(s, true);
    CHECK(!ev.backed_off);
    step(s, false);
    step(s, false);
    ev = step(s, true);
    CHECK(ev.backed_off && ev.new_scale == 512.0f);
    mxp_scaler_destroy(s);
}

static void test_min_scale(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.init_scale = 8.0;
    c.backoff_factor = 0.25;
    c.min_scale = 3.0;
    c.growth_interval = 100;
    mxp_scaler *s = make(&c);
    if (!s) return;
    mxp_scaler_event ev = step(s, true); /* 8*0.25 = 2 clamps to 3 */
    CHECK(ev.backed_off && !ev.at_min && ev.new_scale == 3.0f);
    CHECK(state(s).steps_at_min == 0);
    ev = step(s, true); /* already at the floor */
    CHECK(ev.overflow && ev.at_min && !ev.backed_off && !ev.fallback);
    CHECK(ev.new_scale == 3.0f && state(s).steps_at_min == 1);
    step(s, true);
    CHECK(state(s).steps_at_min == 2);
    step(s, false); /* consecutive count resets on a clean step */
    CHECK(state(s).steps_at_min == 0 && state(s).scale == 3.0f);
    mxp_scaler_destroy(s);

    /* Exact landing on the floor is not yet "at min". */
    c.init_scale = 8.0;
    c.backoff_factor = 0.5;
    c.min_scale = 2.0;
    s = make(&c);
    if (!s) return;
    CHECK(!step(s, true).at_min); /* 4 */
    CHECK(!step(s, true).at_min); /* 2 */
    CHECK(mxp_scaler_scale(s) == 2.0f);
    CHECK(step(s, true).at_min);
    mxp_scaler_destroy(s);

    /* No min_scale: the scale still never leaves the normal float range. */
    c = mxp_scaler_config_default();
    c.init_scale = 4.0 * FLT_MIN;
    s = make(&c);
    if (!s) return;
    step(s, true);
    step(s, true);
    CHECK(mxp_scaler_scale(s) == FLT_MIN);
    ev = step(s, true);
    CHECK(ev.at_min && mxp_scaler_scale(s) == FLT_MIN);
    CHECK(isfinite(mxp_scaler_inv_scale(s)) && mxp_scaler_inv_scale(s) > 0);
    mxp_scaler_destroy(s);
}

static void test_max_scale(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.init_scale = 4.0;
    c.growth_interval = 1;
    c.max_scale = 10.0;
    mxp_scaler *s = make(&c);
    if (!s) return;
    mxp_scaler_event ev = step(s, false);
    CHECK(ev.grew && ev.new_scale == 8.0f);
    ev = step(s, false);
    CHECK(ev.grew && ev.new_scale == 10.0f); /* capped */
    ev = step(s, false);
    CHECK(!ev.grew && ev.new_scale == 10.0f && state(s).growth_tracker == 0);
    ev = step(s, true);
    CHECK(ev.backed_off && ev.new_scale == 5.0f);
    mxp_scaler_destroy(s);

    /* A finite cap is applied before the finite check: growth to it happens
     * even when the uncapped product would overflow float. */
    c.init_scale = 1e38;
    c.growth_factor = 16.0;
    c.max_scale = 2e38;
    s = make(&c);
    if (!s) return;
    ev = step(s, false);
    CHECK(ev.grew && ev.new_scale == (float)2e38);
    mxp_scaler_destroy(s);
}

static void test_at_min_policies(void)
{
    for (int p = 0; p < MXP_SCALE_FLOOR_COUNT; p++) {
        mxp_scaler_config c = mxp_scaler_config_default();
        c.init_scale = 4.0;
        c.min_scale = 2.0;
        c.at_min = (mxp_scale_floor_policy)p;
        mxp_scaler *s = make(&c);
        if (!s) return;
        mxp_scaler_event ev;
        mxp_error err = {0};
        /* First overflow reaches the floor: never an at-min event. */
        CHECK(mxp_scaler_update(s, true, &ev, &err) == MXP_OK);
        CHECK(!ev.at_min && !ev.fallback && ev.new_scale == 2.0f);
        mxp_status st = mxp_scaler_update(s, true, &ev, &err);
        CHECK(ev.at_min && ev.overflow && ev.new_scale == 2.0f);
        CHECK(state(s).overflow_steps == 2 && state(s).total_steps == 2);
        CHECK(state(s).steps_at_min == 1);
        switch ((mxp_scale_floor_policy)p) {
        case MXP_SCALE_FLOOR_CONTINUE:
            CHECK(st == MXP_OK && !ev.fallback);
            break;
        case MXP_SCALE_FLOOR_ERROR:
            CHECK(st == MXP_ERR_NONFINITE && err.status == MXP_ERR_NONFINITE);
            CHECK_MSG(strstr(err.msg, "minimum") != NULL, "msg: %s", err.msg);
            CHECK(!ev.fallback);
            /* NULL ev and NULL err are allowed and the status is kept. */
            CHECK(mxp_scaler_update(s, true, NULL, NULL) == MXP_ERR_NONFINITE);
            CHECK(state(s).steps_at_min == 2);
            /* a clean step is fine again */
            CHECK(mxp_scaler_update(s, false, NULL, NULL) == MXP_OK);
            break;
        case MXP_SCALE_FLOOR_FALLBACK:
            CHECK(st == MXP_OK && ev.fallback);
            break;
        default:
            CHECK(false);
        }
        mxp_scaler_destroy(s);
    }
}

static void test_disabled(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.enabled = false;
    c.growth_interval = 1;
    mxp_scaler *s = make(&c);
    if (!s) return;
    CHECK(mxp_scaler_scale(s) == 1.0f && mxp_scaler_inv_scale(s) == 1.0f);
    mxp_scaler_event ev = step(s, true);
    CHECK(ev.overflow && !ev.backed_off && !ev.at_min && ev.new_scale == 1.0f);
    for (int i = 0; i < 5; i++) {
        ev = step(s, false);
        CHECK(!ev.overflow && !ev.grew && ev.new_scale == 1.0f);
    }
    step(s, true);
    mxp_scaler_state st = state(s);
    CHECK(st.scale == 1.0f && st.overflow_steps == 2 && st.total_steps == 7);
    mxp_scaler_destroy(s);
}

/* ---- validation ---------------------------------------------------------- */

typedef struct bad_case {
    const char *field;
    void (*mutate)(mxp_scaler_config *c, double v);
    double value;
} bad_case;

static void set_init(mxp_scaler_config *c, double v) { c->init_scale = v; }
static void set_growth(mxp_scaler_config *c, double v) { c->growth_factor = v; }
static void set_backoff(mxp_scaler_config *c, double v) { c->backoff_factor = v; }
static void set_interval(mxp_scaler_config *c, double v) { c->growth_interval = (int64_t)v; }
static void set_hyst(mxp_scaler_config *c, double v) { c->hysteresis = (int)v; }
static void set_min(mxp_scaler_config *c, double v) { c->min_scale = v; }
static void set_max(mxp_scaler_config *c, double v) { c->max_scale = v; }
static void set_at_min(mxp_scaler_config *c, double v) { c->at_min = (mxp_scale_floor_policy)(int)v; }

static void test_validation(void)
{
    const bad_case bad[] = {
        {"init_scale", set_init, 0.0},         {"init_scale", set_init, -1.0},
        {"init_scale", set_init, NAN},         {"init_scale", set_init, INFINITY},
        {"init_scale", set_init, 1e39},        {"init_scale", set_init, 1e-300},
        {"growth_factor", set_growth, 1.0},    {"growth_factor", set_growth, 0.5},
        {"growth_factor", set_growth, NAN},    {"growth_factor", set_growth, INFINITY},
        {"backoff_factor", set_backoff, 0.0},  {"backoff_factor", set_backoff, 1.0},
        {"backoff_factor", set_backoff, -0.5}, {"backoff_factor", set_backoff, NAN},
        {"growth_interval", set_interval, 0},  {"growth_interval", set_interval, -3},
        {"hysteresis", set_hyst, 0},           {"hysteresis", set_hyst, -1},
        {"min_scale", set_min, -1.0},          {"min_scale", set_min, NAN},
        {"min_scale", set_min, 65537.0},       {"min_scale", set_min, INFINITY},
        {"max_scale", set_max, 0.0},           {"max_scale", set_max, -INFINITY},
        {"max_scale", set_max, NAN},           {"max_scale", set_max, 65535.0},
        {"at_min", set_at_min, MXP_SCALE_FLOOR_COUNT},
        {"at_min", set_at_min, -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mxp_scaler_config c = mxp_scaler_config_default();
        bad[i].mutate(&c, bad[i].value);
        mxp_error err = {0};
        mxp_status st = mxp_scaler_config_validate(&c, &err);
        CHECK_MSG(st == MXP_ERR_INVALID_ARG, "%s = %g accepted", bad[i].field,
                  bad[i].value);
        CHECK_MSG(strstr(err.msg, bad[i].field) != NULL, "message lacks '%s': %s",
                  bad[i].field, err.msg);
        CHECK_MSG(strstr(err.msg, "accepted") != NULL, "message lacks range: %s", err.msg);
        /* create refuses the same config and leaves *out NULL */
        mxp_scaler *s = (mxp_scaler *)&err;
        CHECK(mxp_scaler_create(&c, &s, NULL) == MXP_ERR_INVALID_ARG && s == NULL);
    }
    /* The value itself is echoed. */
    mxp_scaler_config c = mxp_scaler_config_default();
    c.growth_factor = 0.75;
    mxp_error err = {0};
    mxp_scaler_config_validate(&c, &err);
    CHECK_MSG(strstr(err.msg, "0.75") != NULL, "msg: %s", err.msg);

    /* Boundary values that are accepted. */
    c = mxp_scaler_config_default();
    c.min_scale = c.init_scale;
    c.max_scale = c.init_scale;
    c.hysteresis = 1000;
    c.growth_interval = 1;
    c.growth_factor = 1.0000001;
    c.backoff_factor = 0.999;
    CHECK_OK(mxp_scaler_config_validate(&c, &err), &err);
    c = mxp_scaler_config_default();
    c.enabled = false;
    CHECK_OK(mxp_scaler_config_validate(&c, &err), &err);
    c.max_scale = 1e300; /* beyond float: acts as no cap */
    CHECK_OK(mxp_scaler_config_validate(&c, &err), &err);
    CHECK(mxp_scaler_config_validate(NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_scaler_create(&c, NULL, NULL) == MXP_ERR_INVALID_ARG);
}

/* ---- state --------------------------------------------------------------- */

static void test_state_round_trip(void)
{
    mxp_scaler_config c = mxp_scaler_config_default();
    c.init_scale = 1024.0;
    c.growth_interval = 3;
    c.hysteresis = 2;
    c.min_scale = 16.0;
    mxp_scaler *a = make(&c), *b = make(&c);
    if (!a || !b) return;
    const bool seq1[] = {false, true, false, true, true, true, true, true, true, false};
    for (size_t i = 0; i < sizeof seq1 / sizeof seq1[0]; i++) step(a, seq1[i]);
    mxp_scaler_state sa = state(a);
    CHECK(sa.total_steps == 10 && sa.overflow_steps == 7 && sa.growth_tracker == 1);
    mxp_error err = {0};
    CHECK_OK(mxp_scaler_set_state(b, &sa, &err), &err);
    mxp_scaler_state sb = state(b);
    CHECK(sb.scale == sa.scale && sb.growth_tracker == sa.growth_tracker &&
          sb.hysteresis_left == sa.hysteresis_left && sb.overflow_steps == sa.overflow_steps &&
          sb.total_steps == sa.total_steps && sb.steps_at_min == sa.steps_at_min);
    /* Both continue identically. */
    const bool seq2[] = {false, false, false, true, false, false, false, false, true, true};
    for (size_t i = 0; i < sizeof seq2 / sizeof seq2[0]; i++) {
        mxp_scaler_event ea = step(a, seq2[i]), eb = step(b, seq2[i]);
        CHECK(ea.new_scale == eb.new_scale && ea.grew == eb.grew &&
              ea.backed_off == eb.backed_off && ea.at_min == eb.at_min);
    }
    sa = state(a);
    sb = state(b);
    CHECK(sb.scale == sa.scale && sb.growth_tracker == sa.growth_tracker &&
          sb.hysteresis_left == sa.hysteresis_left && sb.total_steps == sa.total_steps);

    /* Bad states are rejected by field name and change nothing. */
    struct {
        const char *field;
        mxp_scaler_state st;
    } bad[6];
    for (int i = 0; i < 6; i++) bad[i].st = sa;
    bad[0].field = "scale";
    bad[0].st.scale = 0.0f;
    bad[1].field = "scale";
    bad[1].st.scale = NAN;
    bad[2].field = "scale";
    bad[2].st.scale = INFINITY;
    bad[3].field = "growth_tracker";
    bad[3].st.growth_tracker = -1;
    bad[4].field = "hysteresis_left";
    bad[4].st.hysteresis_left = 0;
    bad[5].field = "overflow_steps";
    bad[5].st.overflow_steps = -2;
    for (int i = 0; i < 6; i++) {
        mxp_error e2 = {0};
        CHECK(mxp_scaler_set_state(b, &bad[i].st, &e2) == MXP_ERR_INVALID_ARG);
        CHECK_MSG(strstr(e2.msg, bad[i].field) != NULL, "msg lacks %s: %s", bad[i].field,
                  e2.msg);
        CHECK(state(b).scale == sa.scale && state(b).total_steps == sa.total_steps);
    }
    mxp_scaler_state neg = sa;
    neg.scale = -4.0f;
    CHECK(mxp_scaler_set_state(b, &neg, NULL) == MXP_ERR_INVALID_ARG);

    /* A checkpoint from another config is adapted, not refused. */
    mxp_scaler_state big = sa;
    big.scale = 8.0f; /* below this scaler's min_scale 16 */
    big.hysteresis_left = 9;
    big.growth_tracker = 50;
    CHECK_OK(mxp_scaler_set_state(b, &big, &err), &err);
    CHECK(state(b).scale == 16.0f && state(b).hysteresis_left == 2 &&
          state(b).growth_tracker == 2);
    mxp_scaler_destroy(a);
    mxp_scaler_destroy(b);

    /* A disabled scaler keeps scale 1 but takes the counters. */
    c.enabled = false;
    mxp_scaler *d = make(&c);
    if (!d) return;
    CHECK_OK(mxp_scaler_set_state(d, &sa, &err), &err);
    CHECK(state(d).scale == 1.0f && state(d).total_steps == sa.total_steps &&
          state(d).overflow_steps == sa.overflow_steps);
    mxp_scaler_destroy(d);
}

static void test_floor_policy_names(void)
{
    static const char *const names[] = {"continue", "error", "fallback"};
    CHECK(sizeof names / sizeof names[0] == MXP_SCALE_FLOOR_COUNT);
    for (int i = 0; i < MXP_SCALE_FLOOR_COUNT; i++) {
        CHECK(strcmp(mxp_scale_floor_policy_name((mxp_scale_floor_policy)i), names[i]) == 0);
        mxp_scale_floor_policy p = MXP_SCALE_FLOOR_COUNT;
        mxp_error err = {0};
        CHECK_OK(mxp_scale_floor_policy_parse(names[i], &p, &err), &err);
        CHECK(p == (mxp_scale_floor_policy)i);
    }
    CHECK(strcmp(mxp_scale_floor_policy_name(MXP_SCALE_FLOOR_COUNT), "unknown") == 0);
    mxp_scale_floor_policy p = MXP_SCALE_FLOOR_ERROR;
    mxp_error err = {0};
    CHECK(mxp_scale_floor_policy_parse("stop", &p, &err) == MXP_ERR_INVALID_ARG);
    CHECK(p == MXP_SCALE_FLOOR_ERROR);
    CHECK(strstr(err.msg, "'stop'") && strstr(err.msg, "fallback"));
}

int main(void)
{
    test_defaults();
    test_pytorch_update_scale();
    test_pytorch_growth_not_past_inf();
    test_unscale_kernel();
    test_against_reference();
    test_inv_scale();
    test_hysteresis();
    test_min_scale();
    test_max_scale();
    test_at_min_policies();
    test_disabled();
    test_validation();
    test_state_round_trip();
    test_floor_policy_names();
    return test_finish("scaler");
}
