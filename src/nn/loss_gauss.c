/* nn/loss_gauss.c: the Gaussian head's parameters and loss (PETS;
 * mbrl-lib GaussianMLP).
 *
 * Entry points (nn_internal.h): nn_gauss_add_bounds, nn_gauss_bounds_off,
 * nn_gauss_init_bounds, nn_gauss_loss, nn_gauss_bound_pred. The last
 * linear layer outputs 2D values per row (mean [D], raw log-variance [D]);
 * the learned soft bounds max_logvar, min_logvar ([1, D] each, as
 * mbrl-lib's nn.Parameter shapes) live right after that layer's bias and
 * count among its parameters. The loss itself is the kernel table's
 * gauss_nll (kernels.h, formulas in kernels/generic/loss_gauss.c), in FP32
 * like every loss, on the FP32 last activation (policy class LOSS).
 */
#include "nn/nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GAUSS_MAX_LOGVAR_INIT 0.5f
#define GAUSS_MIN_LOGVAR_INIT (-10.0f)

int64_t nn_gauss_dim(const mxp_model *m) {
    return (m->layers[m->n_layers - 1].out - (m->spec.termination ? 1 : 0)) / 2;
}

bool nn_gauss_add_bounds(mxp_model *m, nn_layer *L, size_t *P) {
    const size_t D = (size_t)(L->out - (m->spec.termination ? 1 : 0)) / 2;
    static const char *const names[2] = {"max_logvar", "min_logvar"};
    for (int t = 0; t < 2; t++) {
        const int ti = m->n_tensors++;
        mxp_tensor_info *info = &m->tensors[ti];
        snprintf(m->names[ti], NN_NAME_MAX, "%s", names[t]);
        info->name = m->names[ti];
        info->offset = *P;
        info->count = D;
        info->ndim = 2;
        info->shape[0] = 1;
        info->shape[1] = (int64_t)D;
        if (!mxp_size_add(*P, D, P)) return false;
    }
    L->n_params += 2 * D;
    return true;
}

size_t nn_gauss_bounds_off(const mxp_model *m) {
    const nn_layer *L = &m->layers[m->n_layers - 1];
    return L->b_off + (size_t)L->out;
}

void nn_gauss_init_bounds(const mxp_model *m, float *dst) {
    const size_t D = (size_t)nn_gauss_dim(m), o = nn_gauss_bounds_off(m);
    for (size_t j = 0; j < D; j++) {
        dst[o + j] = GAUSS_MAX_LOGVAR_INIT;
        dst[o + D + j] = GAUSS_MIN_LOGVAR_INIT;
    }
}

/* The bounds [2D] as FP32: the master when there is one, else the working
 * weights (pure modes) widened into p0 (FP32 [max_width] >= 2D). nn_internal.h */
const float *nn_gauss_bounds_f32(const mxp_model *m) {
    const int64_t D = nn_gauss_dim(m);
    const size_t o = nn_gauss_bounds_off(m);
    if (m->b.master) return m->b.master + o;
    return nn_view_f32(m, m->policy.weight, nn_work_at(m, o), 2 * (size_t)D, m->b.p0);
}

void nn_gauss_loss(mxp_model *m, const float *pred, const float *y, int64_t B,
                   float *dpred32, float loss_scale, double *loss) {
    const int64_t D = nn_gauss_dim(m);
    const float *bounds = nn_gauss_bounds_f32(m);
    float *dbounds = NULL;
    if (dpred32) {
        dbounds = m->grads + nn_gauss_bounds_off(m);
        /* the first backward after a discard writes every gradient */
        if (nn_loss_grad_writes(m)) memset(dbounds, 0, 2 * (size_t)D * sizeof(float));
    }
    m->k->gauss_nll(dpred32, dbounds, pred, y, bounds, B, D, loss_scale, loss);
}

/* softplus as the kernel computes it (kernels/generic/loss_gauss.c). */
static float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

void nn_gauss_bound_pred(const mxp_model *m, float *pred, int64_t B) {
    const int64_t D = nn_gauss_dim(m);
    const size_t row = (size_t)m->layers[m->n_layers - 1].out; /* 2D, or 2D + 1 (termination) */
    const float *bd = nn_gauss_bounds_f32(m);
    for (int64_t b = 0; b < B; b++) {
        float *lv = pred + (size_t)b * row + (size_t)D;
        for (int64_t j = 0; j < D; j++) {
            const float mx = bd[j], mn = bd[D + j];
            const float lv1 = mx - softplus(mx - lv[j]);
            lv[j] = mn + softplus(lv1 - mn);
        }
    }
}
