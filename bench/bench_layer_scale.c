/* bench/bench_layer_scale.c: global vs per-layer (adaptive) loss scaling on
 * a deep world-model MLP in mixed_fp16 where the lower layers' gradients
 * underflow FP16.
 *
 * Not a test (no verdict): it prints, for each variant, per parameter layer
 * the fraction of the activation gradients feeding that layer (dY, computed
 * in FP32 and scaled, as stored) that lie below FP16's smallest normal
 * (2^-14: subnormal or zero once stored), the fraction of exactly-zero
 * weight gradients, the final loss scale of the layer, and for the run the
 * skipped steps and the final validation loss. Statistics come from the
 * guard's per-layer monitor with a full scan every step and from the grad
 * hook (scaled gradients, before the unscale pass).
 *
 * usage: bench_layer_scale [--shrink F] [key=value ...]  (overrides for all variants)
 * defaults: depth 10, hidden 64, tanh, 2 epochs, growth_interval 100, and a
 * "small init": every hidden linear layer's weights (all but the output
 * layer) multiplied by F = 0.25 at start, so each layer shrinks the
 * backward signal about 8x and the lowest layers' gradients fall below
 * FP16's normal range at the loss scale the top layers allow.
 */
#include <mixprec/mixprec.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OV 64
#define MAXL MXP_MODEL_MAX_LAYERS

typedef struct acc {
    mxp_world_model *wm;
    double tiny[MAXL + 1], tiny_n[MAXL + 1]; /* per monitor slot: DX below min normal */
    double zeros[MAXL], nz[MAXL];            /* per layer: exact-zero weight grads */
    int64_t skipped, steps;
} acc;

/* After backward, before the unscale pass: the monitor still holds this
 * step's scans. */
static void on_grads(void *user, int64_t step, float *g, size_t n) {
    (void)step;
    (void)n;
    acc *a = user;
    mxp_model *m = mxp_world_model_model(a->wm);
    const mxp_monitor *mon = mxp_guard_monitor(mxp_world_model_guard(a->wm));
    const int L = mxp_model_num_layers(m);
    for (int l = 0; l <= L; l++) {
        const mxp_tensor_stats *t = &mxp_monitor_layer(mon, l)->t[MXP_MON_DX];
        a->tiny[l] += (double)t->tiny;
        a->tiny_n[l] += (double)t->tiny_n;
    }
    for (int l = 0; l < L; l++) {
        size_t off, cnt = mxp_model_layer_params(m, l, &off);
        for (size_t i = off; i < off + cnt; i++) a->zeros[l] += g[i] == 0.0f;
        a->nz[l] += (double)cnt;
    }
}

static void on_step(void *user, const mxp_progress *p) {
    acc *a = user;
    a->steps++;
    a->skipped += p->result->skipped;
}

static double g_shrink = 0.25;

static int run(const char *name, const char *const *ov, int n_ov, const char *extra) {
    mxp_config_builder *b = NULL;
    mxp_error err = {0};
    mxp_config cfg;
    mxp_world_model *wm = NULL;
    acc *a = calloc(1, sizeof *a);
    int rc = 1;
    if (!a || mxp_config_builder_create(&b, &err) != MXP_OK) goto out;
    for (int i = 0; i < n_ov; i++)
        if (mxp_config_apply_override(b, ov[i], &err) != MXP_OK) goto out;
    if (extra && mxp_config_apply_override(b, extra, &err) != MXP_OK) goto out;
    if (mxp_config_resolve(b, &cfg, &err) != MXP_OK) goto out;
    if (mxp_world_model_create(&cfg, &wm, &err) != MXP_OK) goto out;
    a->wm = wm;
    mxp_trainer *t = mxp_world_model_trainer(wm);
    mxp_model *m = mxp_world_model_model(wm);
    for (int l = 0; l + 1 < mxp_model_num_layers(m); l++)
        if (mxp_model_layer_params(m, l, NULL) > 0 &&
            mxp_model_scale_layer_weights(m, l, (float)g_shrink, &err) != MXP_OK)
            goto out;
    mxp_trainer_set_grad_hook(t, on_grads, a);
    mxp_world_model_set_progress(wm, on_step, a);
    if (mxp_world_model_train(wm, cfg.epochs, cfg.batch_size, &err) != MXP_OK) goto out;
    double val = 0;
    if (mxp_world_model_validation_loss(wm, &val, &err) != MXP_OK) goto out;
    mxp_train_stats st;
    mxp_trainer_stats(t, &st);
    printf("\n== %s: %s, %lld steps, %lld skipped, final val loss %.6g, final precision %s\n",
           name, mxp_precision_name(cfg.precision), (long long)a->steps, (long long)a->skipped,
           val, mxp_precision_name(st.precision));
    printf("layer  params  dY<2^-14(fp16 min normal)  zero dW   loss scale\n");
    const int L = mxp_model_num_layers(m);
    mxp_scaler_groups *gr = mxp_trainer_scaler_groups(t);
    int gi = 0;
    for (int l = 0; l < L; l++) {
        if (mxp_model_layer_params(m, l, NULL) == 0) continue;
        /* dY of layer l is the DX of the layer above (slot L: the loss grad) */
        int slot = l + 1;
        while (slot < L && a->tiny_n[slot] == 0) slot++;
        double tf = a->tiny_n[slot] > 0 ? a->tiny[slot] / a->tiny_n[slot] : 0;
        double zf = a->nz[l] > 0 ? a->zeros[l] / a->nz[l] : 0;
        float sc = gr ? mxp_scaler_scale(mxp_scaler_groups_get(gr, gi)) : st.current_scale;
        printf("%5d  %6zu  %24.2f%%  %7.2f%%  %g\n", l, mxp_model_layer_params(m, l, NULL),
               100.0 * tf, 100.0 * zf, (double)sc);
        gi++;
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench_layer_scale: %s: %s\n", name, err.msg);
    mxp_world_model_destroy(wm);
    mxp_config_builder_destroy(b);
    free(a);
    return rc;
}

int main(int argc, char **argv) {
    mxp_log_set_level(MXP_LOG_ERROR);
    const char *ov[MAX_OV] = {
        "model.depth=10",         "model.hidden=64",
        "model.activation=tanh",  "training.epochs=2",
        "training.precision=mixed_fp16", "training.loss_scale.growth_interval=100",
        "guard.headroom.every_steps=1", "guard.canary.every_steps=0",
    };
    int n = 8;
    for (int i = 1; i < argc && n < MAX_OV; i++) {
        if (strcmp(argv[i], "--shrink") == 0 && i + 1 < argc)
            g_shrink = atof(argv[++i]);
        else
            ov[n++] = argv[i];
    }
    printf("deep MLP, hidden linear weights x %g at start; overrides:", g_shrink);
    for (int i = 0; i < n; i++) printf(" %s", ov[i]);
    printf("\n");
    int rc = run("global loss scale", ov, n, "training.loss_scale.per_layer=false");
    rc |= run("per-layer loss scale", ov, n, "training.loss_scale.per_layer=true");
    rc |= run("fp32 reference", ov, n, "training.precision=fp32");
    return rc;
}
