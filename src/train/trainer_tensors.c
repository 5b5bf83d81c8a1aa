/* train/trainer_tensors.c: a trainer's named tensors, reached by copy.
 *
 * Entry points: mxp_trainer_num_tensors, mxp_trainer_tensor_desc,
 * mxp_trainer_tensor_dtype, mxp_trainer_tensor_bytes,
 * mxp_trainer_tensor_get / _set / _zero, mxp_trainer_transfers (contracts:
 * train.h "named tensors of a trainer").
 *
 * docs/design.md "Who owns memory": the trainer owns the optimizer moments
 * (FP32 [P] each: m, and v for AdamW); the model owns the weights and
 * gradients (nn/model_tensors.c), and this file forwards those roles to
 * it. The enumeration is the checkpoint's tensor list in its order
 * (ckpt/ckpt_io.c writes exactly these names): the parameters of record,
 * then optim.m.<name>, then optim.v.<name>.
 */
#include "backend/devmem.h"
#include "train/trainer_device.h"
#include "train/trainer_internal.h"

#include <stdio.h>
#include <string.h>

#define OPT_M "optim.m."
#define OPT_V "optim.v."

static bool is_optim(mxp_tensor_role r) {
    return r == MXP_TENSOR_OPTIM_M || r == MXP_TENSOR_OPTIM_V;
}

int mxp_trainer_num_tensors(const mxp_trainer *t) {
    if (!t) return 0;
    return mxp_model_num_tensors(t->model) * (t->v ? 3 : 2);
}

mxp_status mxp_trainer_tensor_dtype(const mxp_trainer *t, mxp_tensor_role r, mxp_dtype *out,
                                    mxp_error *err) {
    if (!t || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_trainer_tensor_dtype: NULL argument");
    if (!is_optim(r)) return mxp_model_tensor_dtype(t->model, r, out, err);
    if (r == MXP_TENSOR_OPTIM_V && !t->v)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "mxp_trainer_tensor_dtype: optimizer %s keeps no second moment "
                             "(optim.v)", mxp_optim_kind_name(t->cfg.optim.kind));
    *out = MXP_DTYPE_F32;
    return MXP_OK;
}

size_t mxp_trainer_tensor_bytes(const mxp_trainer *t, mxp_tensor_role r) {
    mxp_dtype dt;
    if (!t || mxp_trainer_tensor_dtype(t, r, &dt, NULL) != MXP_OK) return 0;
    return t->n_params * mxp_dtype_info(dt)->size;
}

mxp_status mxp_trainer_tensor_desc(const mxp_trainer *t, int i, mxp_tensor_desc *out,
                                   mxp_error *err) {
    const int n = mxp_trainer_num_tensors(t);
    if (!t || !out || i < 0 || i >= n)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_trainer_tensor_desc: index %d; accepted 0..%d (and a trainer "
                             "and an output)", i, n - 1);
    const int nt = mxp_model_num_tensors(t->model);
    static const mxp_tensor_role roles[3] = {MXP_TENSOR_PARAM, MXP_TENSOR_OPTIM_M,
                                             MXP_TENSOR_OPTIM_V};
    static const char *const prefix[3] = {"", OPT_M, OPT_V};
    const int pass = i / nt;
    const mxp_tensor_info *ti = mxp_model_tensor(t->model, i % nt);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s%s", prefix[pass], ti->name);
    out->param = ti->name;
    out->role = roles[pass];
    out->ndim = ti->ndim;
    out->shape[0] = ti->shape[0];
    out->shape[1] = ti->shape[1];
    out->offset = ti->offset;
    out->count = ti->count;
    return mxp_trainer_tensor_dtype(t, out->role, &out->dtype, err);
}

/* The range of optimizer tensor (r, name): its slab, element offset and
 * count, and its shape as text for error messages. */
static mxp_status optim_resolve(const mxp_trainer *t, mxp_tensor_role r, const char *name,
                                const char *fn, float **slab, size_t *off, size_t *count,
                                char *shape, size_t shape_n, mxp_error *err) {
    *slab = r == MXP_TENSOR_OPTIM_M ? t->m : t->v;
    if (!*slab)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "%s: optimizer %s keeps no '%s' tensors",
                             fn, mxp_optim_kind_name(t->cfg.optim.kind), mxp_tensor_role_name(r));
    *off = 0;
    *count = t->n_params;
    snprintf(shape, shape_n, "[%zu] (the whole slab)", t->n_params);
    if (!name) return MXP_OK;
    int i = mxp_model_tensor_find(t->model, name);
    if (i < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: the model has no tensor '%.80s'; accepted: the name of one of "
                             "its %d parameter tensors (mxp_model_tensor, without the '%s.' "
                             "prefix) or NULL for the whole slab",
                             fn, name, mxp_model_num_tensors(t->model), mxp_tensor_role_name(r));
    const mxp_tensor_info *ti = mxp_model_tensor(t->model, i);
    *off = ti->offset;
    *count = ti->count;
    if (ti->ndim == 2)
        snprintf(shape, shape_n, "[%lld, %lld]", (long long)ti->shape[0],
                 (long long)ti->shape[1]);
    else
        snprintf(shape, shape_n, "[%lld]", (long long)ti->shape[0]);
    return MXP_OK;
}

/* Every check of an optimizer-state copy: range, dtype, buffer, size. */
static mxp_status optim_range(const mxp_trainer *t, mxp_tensor_role r, const char *name,
                              mxp_dtype dtype, const void *buf, size_t nbytes, const char *fn,
                              float **slab, size_t *off, size_t *count, mxp_error *err) {
    char shape[64];
    mxp_status s = optim_resolve(t, r, name, fn, slab, off, count, shape, sizeof shape, err);
    if (s != MXP_OK) return s;
    const char *label = name ? name : "(whole slab)";
    if (dtype != MXP_DTYPE_F32)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: '%s' tensor '%.80s' as %s; accepted: %s (its storage dtype)",
                             fn, mxp_tensor_role_name(r), label,
                             (unsigned)dtype < MXP_DTYPE_COUNT ? mxp_dtype_name(dtype) : "?",
                             mxp_dtype_name(MXP_DTYPE_F32));
    if (!buf && *count > 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: '%s' tensor '%.80s': buffer is NULL",
                             fn, mxp_tensor_role_name(r), label);
    if (nbytes != *count * sizeof(float))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: '%s' tensor '%.80s' %s holds %zu values = %zu bytes as f32; "
                             "the buffer has %zu bytes",
                             fn, mxp_tensor_role_name(r), label, shape, *count,
                             *count * sizeof(float), nbytes);
    return MXP_OK;
}

mxp_status mxp_trainer_tensor_get(mxp_trainer *t, mxp_tensor_role r, const char *name,
                                  mxp_dtype dtype, void *buf, size_t nbytes, mxp_error *err) {
    static const char fn[] = "mxp_trainer_tensor_get";
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    if (!is_optim(r)) return mxp_model_tensor_get(t->model, r, name, dtype, buf, nbytes, err);
    float *slab = NULL;
    size_t off = 0, count = 0;
    mxp_status s = optim_range(t, r, name, dtype, buf, nbytes, fn, &slab, &off, &count, err);
    if (s == MXP_OK) s = trainer_device_pull(t, err); /* a device's record first */
    if (s != MXP_OK) return s;
    if (count) mxp_dev_download(buf, slab + off, nbytes);
    t->xfer.d2h_calls++;
    t->xfer.d2h_bytes += nbytes;
    return MXP_OK;
}

mxp_status mxp_trainer_tensor_set(mxp_trainer *t, mxp_tensor_role r, const char *name,
                                  mxp_dtype dtype, const void *buf, size_t nbytes,
                                  mxp_error *err) {
    static const char fn[] = "mxp_trainer_tensor_set";
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    if (!is_optim(r)) return mxp_model_tensor_set(t->model, r, name, dtype, buf, nbytes, err);
    float *slab = NULL;
    size_t off = 0, count = 0;
    mxp_status s = optim_range(t, r, name, dtype, buf, nbytes, fn, &slab, &off, &count, err);
    if (s == MXP_OK) s = trainer_device_pull(t, err); /* the rest of the slab as it is */
    if (s != MXP_OK) return s;
    trainer_device_host_wrote(t); /* uploaded before the next device step */
    if (count) mxp_dev_upload(slab + off, buf, nbytes);
    t->xfer.h2d_calls++;
    t->xfer.h2d_bytes += nbytes;
    return MXP_OK;
}

mxp_status mxp_trainer_tensor_zero(mxp_trainer *t, mxp_tensor_role r, const char *name,
                                   mxp_error *err) {
    static const char fn[] = "mxp_trainer_tensor_zero";
    if (!t) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL trainer", fn);
    if (!is_optim(r))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: role %d; accepted: optim.m, optim.v (the model's gradients: "
                             "mxp_model_zero_grads)", fn, (int)r);
    float *slab = NULL;
    size_t off = 0, count = 0;
    char shape[64];
    mxp_status s = optim_resolve(t, r, name, fn, &slab, &off, &count, shape, sizeof shape, err);
    if (s == MXP_OK) s = trainer_device_pull(t, err);
    if (s != MXP_OK) return s;
    trainer_device_host_wrote(t);
    mxp_dev_enter();
    memset(slab + off, 0, count * sizeof(float));
    mxp_dev_leave();
    return MXP_OK;
}

void mxp_trainer_transfers(const mxp_trainer *t, mxp_transfer_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!t) return;
    mxp_model_transfers(t->model, out);
    out->d2h_calls += t->xfer.d2h_calls;
    out->d2h_bytes += t->xfer.d2h_bytes;
    out->h2d_calls += t->xfer.h2d_calls;
    out->h2d_bytes += t->xfer.h2d_bytes;
}
