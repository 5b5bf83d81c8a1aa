/* nn/model_tensors.c: the model's named tensors, reached by copy.
 *
 * Entry points: mxp_tensor_role_name, mxp_model_tensor_find,
 * mxp_model_tensor_dtype, mxp_model_tensor_get, mxp_model_tensor_set,
 * mxp_model_copy_params, mxp_model_transfers (contracts: model.h "named
 * tensors").
 *
 * docs/design.md "Who owns memory": the model's slabs (master, work, grads)
 * belong to the backend; everything outside nn and train reads and writes
 * them through get/set, which copy between a caller's host buffer and the
 * slab (on the CPU a memcpy or a conversion; on a device one transfer each)
 * and count the traffic in m->xfer. A tensor is (role, name): the role
 * picks the slab, the name one parameter tensor's range of it (NULL: the
 * whole slab). Host-buffer conversions use the reference mxp_convert (no
 * alignment needed, RNE narrowing); the recast of the working weights after
 * a set of the master uses the kernel table's convert, as
 * mxp_model_sync_work does, so the bits are those of a whole-slab sync.
 */
#include "backend/devmem.h"
#include "nn/model_sync.h"
#include "nn/nn_internal.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

static const char *const role_names[] = {"param", "master", "work", "grad", "optim.m", "optim.v"};
static_assert(sizeof role_names / sizeof role_names[0] == MXP_TENSOR_ROLE_COUNT,
              "role_names must cover mxp_tensor_role");

const char *mxp_tensor_role_name(mxp_tensor_role r) {
    return (unsigned)r < MXP_TENSOR_ROLE_COUNT ? role_names[r] : NULL;
}

int mxp_model_tensor_find(const mxp_model *m, const char *name) {
    if (!m || !name) return -1;
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

/* The slab of role r: its base, dtype, and whether set may write it. */
typedef struct slab_ref {
    void *base;
    mxp_dtype dt;
} slab_ref;

static mxp_status role_slab(const mxp_model *m, mxp_tensor_role r, const char *fn, slab_ref *out,
                            mxp_error *err) {
    if ((unsigned)r >= MXP_TENSOR_ROLE_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: tensor role %d; accepted 0..%d (param, master, work, grad)", fn,
                             (int)r, (int)MXP_TENSOR_ROLE_COUNT - 1);
    if (r == MXP_TENSOR_OPTIM_M || r == MXP_TENSOR_OPTIM_V)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: role '%s' is optimizer state, which the trainer owns (use "
                             "mxp_trainer_tensor_*); the model's roles: param, master, work, grad",
                             fn, role_names[r]);
    switch (r) {
    case MXP_TENSOR_PARAM:
        *out = m->b.master ? (slab_ref){m->b.master, MXP_DTYPE_F32}
                           : (slab_ref){m->b.work, m->policy.weight};
        break;
    case MXP_TENSOR_MASTER: *out = (slab_ref){m->b.master, MXP_DTYPE_F32}; break;
    case MXP_TENSOR_WORK: *out = (slab_ref){m->b.work, m->policy.weight}; break;
    default: *out = (slab_ref){m->grads, MXP_DTYPE_F32}; break; /* GRAD */
    }
    if (!out->base && m->n_params > 0)
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "%s: the model has no '%s' tensors (%s)", fn, role_names[r],
                             r == MXP_TENSOR_GRAD ? "an inference-only model keeps no gradients"
                                                  : "a pure bf16/fp16 mode keeps no FP32 master");
    return MXP_OK;
}

mxp_status mxp_model_tensor_dtype(const mxp_model *m, mxp_tensor_role r, mxp_dtype *out,
                                  mxp_error *err) {
    if (!m || !out)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_model_tensor_dtype: NULL argument");
    slab_ref sr = {0};
    mxp_status s = role_slab(m, r, "mxp_model_tensor_dtype", &sr, err);
    if (s == MXP_OK) *out = sr.dt;
    return s;
}

/* The element range [*off, *off + *count) of tensor `name` (NULL: all P). */
static mxp_status tensor_range(const mxp_model *m, const char *name, const char *fn, size_t *off,
                               size_t *count, mxp_error *err) {
    if (!name) {
        *off = 0;
        *count = m->n_params;
        return MXP_OK;
    }
    int i = mxp_model_tensor_find(m, name);
    if (i < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: the model has no tensor '%.80s'; accepted: one of its %d "
                             "parameter tensors ('%s' ... '%s', mxp_model_tensor) or NULL for "
                             "the whole slab",
                             fn, name, m->n_tensors, m->n_tensors ? m->tensors[0].name : "",
                             m->n_tensors ? m->tensors[m->n_tensors - 1].name : "");
    *off = m->tensors[i].offset;
    *count = m->tensors[i].count;
    return MXP_OK;
}

static void shape_text(const mxp_model *m, const char *name, char *buf, size_t n) {
    int i = mxp_model_tensor_find(m, name);
    if (i < 0) {
        snprintf(buf, n, "[%zu] (the whole slab)", m->n_params);
        return;
    }
    const mxp_tensor_info *ti = &m->tensors[i];
    if (ti->ndim == 2)
        snprintf(buf, n, "[%lld, %lld]", (long long)ti->shape[0], (long long)ti->shape[1]);
    else
        snprintf(buf, n, "[%lld]", (long long)ti->shape[0]);
}

/* Every check of get/set: role, name, dtype, buffer, size. */
static mxp_status check_copy(const mxp_model *m, mxp_tensor_role r, const char *name,
                             mxp_dtype dtype, const void *buf, size_t nbytes, const char *fn,
                             slab_ref *sr, size_t *off, size_t *count, mxp_error *err) {
    if (!m) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL model", fn);
    mxp_status s = role_slab(m, r, fn, sr, err);
    if (s == MXP_OK) s = tensor_range(m, name, fn, off, count, err);
    if (s != MXP_OK) return s;
    const char *label = name ? name : "(whole slab)";
    if (dtype != sr->dt && dtype != MXP_DTYPE_F32)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: '%s' tensor '%.80s' as %s; accepted: its storage dtype %s, or "
                             "%s (converted)",
                             fn, role_names[r], label,
                             (unsigned)dtype < MXP_DTYPE_COUNT ? mxp_dtype_name(dtype) : "?",
                             mxp_dtype_name(sr->dt), mxp_dtype_name(MXP_DTYPE_F32));
    const size_t want = *count * mxp_dtype_info(dtype)->size;
    if (!buf && want > 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: '%s' tensor '%.80s': buffer is NULL",
                             fn, role_names[r], label);
    if (nbytes != want) {
        char shape[64];
        shape_text(m, name, shape, sizeof shape);
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: '%s' tensor '%.80s' %s holds %zu values = %zu bytes as %s; the "
                             "buffer has %zu bytes",
                             fn, role_names[r], label, shape, *count, want, mxp_dtype_name(dtype),
                             nbytes);
    }
    return MXP_OK;
}

mxp_status mxp_model_tensor_get(mxp_model *m, mxp_tensor_role r, const char *name,
                                mxp_dtype dtype, void *buf, size_t nbytes, mxp_error *err) {
    slab_ref sr = {0};
    size_t off = 0, count = 0;
    mxp_status s = check_copy(m, r, name, dtype, buf, nbytes, "mxp_model_tensor_get", &sr, &off,
                              &count, err);
    /* a device's record first (model_sync.h): its gradients for role grad */
    if (s == MXP_OK) s = r == MXP_TENSOR_GRAD ? nn_sync_grads(m, err) : nn_sync_pull(m, err);
    if (s != MXP_OK) return s;
    if (r == MXP_TENSOR_GRAD && m->grads_stale) mxp_model_zero_grads(m);
    const size_t esz = mxp_dtype_info(sr.dt)->size;
    mxp_dev_enter(); /* one device-to-host copy (converting on the way) */
    mxp_convert(dtype, buf, sr.dt, (const unsigned char *)sr.base + off * esz, count);
    mxp_dev_count(true, nbytes);
    mxp_dev_leave();
    m->xfer.d2h_calls++;
    m->xfer.d2h_bytes += nbytes;
    return MXP_OK;
}

mxp_status mxp_model_tensor_set(mxp_model *m, mxp_tensor_role r, const char *name,
                                mxp_dtype dtype, const void *buf, size_t nbytes, mxp_error *err) {
    static const char fn[] = "mxp_model_tensor_set";
    slab_ref sr = {0};
    size_t off = 0, count = 0;
    mxp_status s = check_copy(m, r, name, dtype, buf, nbytes, fn, &sr, &off, &count, err);
    /* the rest of the slab stays as it is: a device's record first (its
     * gradients for role grad, which the next step overwrites: no push) */
    const bool grad = r == MXP_TENSOR_GRAD;
    if (s == MXP_OK) s = grad ? nn_sync_grads(m, err) : nn_sync_pull(m, err);
    if (s != MXP_OK) return s;
    if (r == MXP_TENSOR_WORK && m->b.master && !m->b.work_is_master)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: the working weights follow the FP32 master in %s mode; set "
                             "role 'param' or 'master' instead of 'work'",
                             fn, mxp_precision_name(m->policy.mode));
    if (grad && m->grads_stale) mxp_model_zero_grads(m);
    const size_t esz = mxp_dtype_info(sr.dt)->size;
    mxp_dev_enter(); /* one host-to-device copy, then the working copy on the device */
    mxp_convert(sr.dt, (unsigned char *)sr.base + off * esz, dtype, buf, count);
    mxp_dev_count(false, nbytes);
    if ((r == MXP_TENSOR_PARAM || r == MXP_TENSOR_MASTER) && m->b.master && !m->b.work_is_master)
        m->k->convert(m->policy.weight, (unsigned char *)m->b.work +
                                            off * mxp_dtype_info(m->policy.weight)->size,
                      MXP_DTYPE_F32, m->b.master + off, count);
    mxp_dev_leave();
    m->xfer.h2d_calls++;
    m->xfer.h2d_bytes += nbytes;
    return grad ? MXP_OK : nn_sync_wrote(m, err);
}

mxp_status mxp_model_copy_params(mxp_model *dst, const mxp_model *src, mxp_error *err) {
    static const char fn[] = "mxp_model_copy_params";
    if (!dst || !src) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL model", fn);
    if (dst->n_params != src->n_params || dst->n_tensors != src->n_tensors)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "%s: the models differ (%zu parameters in %d tensors into %zu in "
                             "%d); accepted: two models of the same spec",
                             fn, src->n_params, src->n_tensors, dst->n_params, dst->n_tensors);
    for (int i = 0; i < src->n_tensors; i++) {
        const mxp_tensor_info *a = &src->tensors[i], *b = &dst->tensors[i];
        if (strcmp(a->name, b->name) != 0 || a->offset != b->offset || a->count != b->count)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "%s: tensor %d is '%s' (%zu values) in the source and '%s' "
                                 "(%zu) in the destination; accepted: two models of the same spec",
                                 fn, i, a->name, a->count, b->name, b->count);
    }
    slab_ref s_ref = {0}, d_ref = {0};
    mxp_status s = role_slab(src, MXP_TENSOR_PARAM, fn, &s_ref, err);
    if (s == MXP_OK) s = role_slab(dst, MXP_TENSOR_PARAM, fn, &d_ref, err);
    if (s == MXP_OK) s = nn_sync_pull(src, err);
    if (s != MXP_OK) return s;
    mxp_dev_enter(); /* device to device: no transfer */
    mxp_convert(d_ref.dt, d_ref.base, s_ref.dt, s_ref.base, src->n_params);
    mxp_dev_leave();
    mxp_model_sync_work(dst);
    return nn_sync_wrote(dst, err);
}

void mxp_model_transfers(const mxp_model *m, mxp_transfer_stats *out) {
    if (!out) return;
    if (!m) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = m->xfer;
}
