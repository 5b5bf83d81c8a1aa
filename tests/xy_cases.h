/* tests/xy_cases.h: shared by the regression-head tests (test_gauss_head.c,
 * test_ensemble.c): a config from key=value overrides, two-target data
 * with known noise, and a run on such arrays. Static functions: each test
 * program includes it once. */
#ifndef MIXPREC_TESTS_XY_CASES_H
#define MIXPREC_TESTS_XY_CASES_H

#include <mixprec/mixprec.h>

#include <math.h>

/* cfg from the n overrides kv (false: err says why). */
static bool make_config(const char *const *kv, int n, mxp_config *cfg, mxp_error *err) {
    mxp_config_builder *b = NULL;
    mxp_status s = mxp_config_builder_create(&b, err);
    for (int i = 0; s == MXP_OK && i < n; i++) s = mxp_config_apply_override(b, kv[i], err);
    if (s == MXP_OK) s = mxp_config_resolve(b, cfg, err);
    mxp_config_builder_destroy(b);
    return s == MXP_OK;
}

/* Data with known noise: x ~ U(-1, 1)^2, y0 = 0.8 x0 + 0.5 n0, y1 = -x1 +
 * 0.1 n1 (n standard normal, Box-Muller from a fixed LCG seeded by seed). */
static void noisy_data(uint64_t seed, int64_t n, float *x, float *y) {
    uint64_t s = seed;
#define U01() ((double)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 11) * \
               (1.0 / 9007199254740992.0))
    for (int64_t i = 0; i < n; i++) {
        x[i * 2] = (float)(2.0 * U01() - 1.0);
        x[i * 2 + 1] = (float)(2.0 * U01() - 1.0);
        const double u1 = U01() + 1e-12, u2 = U01();
        const double r = sqrt(-2.0 * log(u1));
        y[i * 2] = (float)(0.8 * x[i * 2] + 0.5 * r * cos(6.283185307179586 * u2));
        y[i * 2 + 1] = (float)(-x[i * 2 + 1] + 0.1 * r * sin(6.283185307179586 * u2));
    }
#undef U01
}

/* A run of cfg on x, y [n, 2] (checkpoints off); the status of
 * mxp_run_create, *out NULL on failure. */
static mxp_status xy_run_create(const mxp_config *cfg, const float *x, const float *y, int64_t n,
                                mxp_run **out, mxp_error *err) {
    *out = NULL;
    mxp_dataset *d = NULL;
    const int64_t sh[2] = {n, 2};
    mxp_status s = mxp_dataset_create(&d, err);
    if (s == MXP_OK) s = mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, sh, x, err);
    if (s == MXP_OK) s = mxp_dataset_add(d, "y", MXP_ARRAY_F32, 2, sh, y, err);
    if (s == MXP_OK) {
        mxp_run_options o = mxp_run_options_default();
        o.data = d;
        o.checkpoints = false;
        s = mxp_run_create(cfg, &o, out, err);
    }
    mxp_dataset_destroy(d);
    return s;
}

#endif /* MIXPREC_TESTS_XY_CASES_H */
