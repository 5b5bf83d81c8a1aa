/* tests/test_world_model.c: the world-model workload end to end.
 * - same seed + config: bit-identical loss history and validation loss;
 * - training reduces the validation loss well below the untrained model's;
 * - mixed_bf16 and mixed_fp16 end within 2% of the FP32 validation loss
 *   (the acceptance rule, on a reduced-size run);
 * - pure bf16 (stochastic-rounded weights) trains too (looser bound). */
#include <mixprec/mixprec.h>

#include <math.h>
#include <string.h>

#include "testutil.h"

static mxp_config small_config(mxp_precision p) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    const char *ov[] = {"data.trajectories=48", "data.episode_length=100", "model.hidden=64",
                        "model.depth=2", "training.epochs=4", "training.batch_size=32"};
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, ov[i], &err), &err);
    char kv[64];
    snprintf(kv, sizeof kv, "training.precision=%s", mxp_precision_name(p));
    CHECK_OK(mxp_config_apply_override(b, kv, &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    CHECK(cfg.precision == p);
    return cfg;
}

typedef struct run {
    double val0, val;
    size_t n;
    double *losses;
} run;

static run train(mxp_precision p) {
    mxp_config cfg = small_config(p);
    mxp_world_model *wm = NULL;
    mxp_error err = {0};
    run r = {0};
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    if (!wm) return r;
    CHECK_OK(mxp_world_model_validation_loss(wm, &r.val0, &err), &err);
    CHECK_OK(mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err), &err);
    CHECK_OK(mxp_world_model_validation_loss(wm, &r.val, &err), &err);
    const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &r.n);
    r.losses = mxp_calloc(r.n, sizeof(double));
    for (size_t i = 0; i < r.n; i++) r.losses[i] = h[i].loss;
    mxp_world_model_destroy(wm);
    return r;
}

int main(void) {
    run a = train(MXP_PRECISION_FP32), b = train(MXP_PRECISION_FP32);
    CHECK(a.n > 0 && a.n == b.n);
    CHECK(a.n && memcmp(a.losses, b.losses, a.n * sizeof(double)) == 0);
    CHECK(a.val == b.val);
    CHECK_MSG(a.val < 0.25 * a.val0, "fp32 val loss %g not well below initial %g", a.val, a.val0);
    printf("fp32       val %.6f (initial %.6f)\n", a.val, a.val0);

    const mxp_precision mixed[] = {MXP_PRECISION_MIXED_BF16, MXP_PRECISION_MIXED_FP16};
    for (int i = 0; i < 2; i++) {
        run m = train(mixed[i]);
        printf("%-10s val %.6f (%.2f%% vs fp32)\n", mxp_precision_name(mixed[i]), m.val,
               100.0 * (m.val - a.val) / a.val);
        CHECK_MSG(fabs(m.val - a.val) <= 0.02 * a.val, "%s val %g vs fp32 %g: beyond 2%%",
                  mxp_precision_name(mixed[i]), m.val, a.val);
        mxp_free(m.losses);
    }
    run pb = train(MXP_PRECISION_BF16);
    printf("bf16 pure  val %.6f\n", pb.val);
    CHECK_MSG(isfinite(pb.val) && pb.val < 0.5 * pb.val0, "pure bf16 did not train: %g vs %g",
              pb.val, pb.val0);
    mxp_free(pb.losses);
    mxp_free(a.losses);
    mxp_free(b.losses);
    return test_finish("test_world_model");
}
