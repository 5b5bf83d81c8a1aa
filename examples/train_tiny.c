/* examples/train_tiny.c: use libmixprec from an installed copy: train a
 * small world model on pendulum data in mixed BF16 and print the losses.
 * Build: make -C examples (with PKG_CONFIG_PATH pointing at the install). */
#include <mixprec/mixprec.h>

#include <stdio.h>

int main(void) {
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    mxp_config cfg;
    const char *overrides[] = {"training.precision=mixed_bf16", "training.epochs=2",
                               "data.trajectories=16", "data.episode_length=50",
                               "model.hidden=32"};
    if (mxp_config_builder_create(&b, &err) != MXP_OK) goto fail;
    for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++)
        if (mxp_config_apply_override(b, overrides[i], &err) != MXP_OK) goto fail;
    if (mxp_config_resolve(b, &cfg, &err) != MXP_OK) goto fail;
    mxp_config_builder_destroy(b);
    b = NULL;

    mxp_world_model *wm = NULL;
    double before, after;
    if (mxp_world_model_create(&cfg, &wm, &err) != MXP_OK) goto fail;
    if (mxp_world_model_validation_loss(wm, &before, &err) != MXP_OK) goto fail;
    if (mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err) != MXP_OK) goto fail;
    if (mxp_world_model_validation_loss(wm, &after, &err) != MXP_OK) goto fail;
    mxp_train_stats st;
    mxp_trainer_stats(mxp_world_model_trainer(wm), &st);
    printf("train_tiny: %s, %lld steps, val loss %.4f -> %.4f\n", mxp_precision_name(st.precision),
           (long long)st.training_steps, before, after);
    mxp_world_model_destroy(wm);
    return after < before ? 0 : 1;
fail:
    mxp_config_builder_destroy(b);
    fprintf(stderr, "train_tiny: %s\n", err.msg);
    return 1;
}
