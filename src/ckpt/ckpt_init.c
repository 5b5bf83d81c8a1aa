/* ckpt/ckpt_init.c: initial weights from outside (model.init_from).
 *
 * Entry point: mxp_ckpt_init_weights. The file is any safetensors whose
 * tensors are named as PyTorch nn.Sequential's state_dict
 * (layers.<i>.weight [out, in], layers.<i>.bias [out]), F32, BF16 or F16 (a
 * torch.save_file of a model's state_dict, or `mixprec ckpt export --torch`).
 * Every tensor of the model must be there with its shape, and no other
 * (the standardisation statistics of an export, x_mean x_std y_mean y_std,
 * are skipped: a new run computes its own from its data);
 * everything is checked before the first weight is written, so a failure
 * leaves the model's weights as they were.
 */
#include "ckpt/ckpt_internal.h"

#include <math.h>
#include <string.h>

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static mxp_status check_file(const mxp_st_file *f, const mxp_model *m, mxp_dtype target,
                             mxp_error *err) {
    const char *L = mxp_st_file_label(f);
    const int nt = mxp_model_num_tensors(m);
    char a[96], b[96];
    for (int i = 0; i < nt; i++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, i);
        const mxp_st_tensor *t = mxp_st_file_find(f, ti->name);
        shape_str(ti->ndim, ti->shape, a, sizeof a);
        if (!t)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: missing tensor '%s' %s (model.init_from needs every tensor "
                                 "of the model, named as nn.Sequential's state_dict)",
                                 L, ti->name, a);
        bool same = t->ndim == ti->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == ti->shape[d];
        if (!same) {
            shape_str(t->ndim, t->shape, b, sizeof b);
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: tensor '%s' has shape %s; the model needs %s", L, ti->name,
                                 b, a);
        }
        if (t->dtype != MXP_DTYPE_F32 && t->dtype != MXP_DTYPE_BF16 && t->dtype != MXP_DTYPE_F16)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: tensor '%s' is %s; accepted: F32, BF16, F16", L, ti->name,
                                 mxp_dtype_name(t->dtype));
        float lim = mxp_dtype_info(target)->max;
        for (size_t k = 0; k < t->numel; k++) {
            float v = mxp_st_tensor_get(t, k);
            if (!isfinite(v))
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: tensor '%s' holds NaN or Inf at flat index %zu", L,
                                     ti->name, k);
            if (fabsf(v) > lim)
                return mxp_error_set(err, MXP_ERR_FORMAT,
                                     "%s: tensor '%s' holds %g at flat index %zu, beyond %s's "
                                     "range",
                                     L, ti->name, (double)v, k, mxp_dtype_name(target));
        }
    }
    static const char *const kStats[] = {"x_mean", "x_std", "y_mean", "y_std"};
    for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
        const char *name = mxp_st_file_tensor(f, i)->name;
        bool known = false;
        for (int k = 0; k < 4 && !known; k++) known = !strcmp(name, kStats[k]);
        for (int k = 0; k < nt && !known; k++) known = !strcmp(mxp_model_tensor(m, k)->name, name);
        if (!known)
            return mxp_error_set(err, MXP_ERR_FORMAT,
                                 "%s: unexpected tensor '%.80s': the model (%d layers) has no "
                                 "such parameter (names: layers.<i>.weight, layers.<i>.bias)",
                                 L, name, mxp_model_num_layers(m));
    }
    return MXP_OK;
}

mxp_status mxp_ckpt_init_weights(mxp_model *m, const char *path, mxp_error *err) {
    if (!m || !path)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_ckpt_init_weights: NULL argument");
    mxp_st_file *f = NULL;
    mxp_status s = mxp_st_file_read(path, &f, err);
    if (s != MXP_OK) return s;
    mxp_dtype target = MXP_DTYPE_F32;
    s = mxp_model_tensor_dtype(m, MXP_TENSOR_PARAM, &target, err);
    if (s == MXP_OK) s = check_file(f, m, target, err);
    /* the parameters assembled on the host in FP32, then one set (the
     * working weights follow; a pure mode rounds them RNE) */
    const size_t P = mxp_model_num_params(m);
    float *w = s == MXP_OK ? mxp_calloc(P ? P : 1, sizeof(float)) : NULL;
    if (s == MXP_OK && !w) s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "init: %zu weights", P);
    for (int i = 0; s == MXP_OK && i < mxp_model_num_tensors(m); i++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, i);
        const mxp_st_tensor *t = mxp_st_file_find(f, ti->name);
        for (size_t k = 0; k < t->numel; k++) w[ti->offset + k] = mxp_st_tensor_get(t, k);
    }
    if (s == MXP_OK)
        s = mxp_model_tensor_set(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, w, P * sizeof(float),
                                 err);
    mxp_free(w);
    mxp_st_file_destroy(f);
    return s;
}
