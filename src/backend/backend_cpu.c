/* backend/backend_cpu.c: the CPU implementation of the step seam
 * (backend/backend.h) over the kernel table (kernels/kernels.h).
 *
 * Entry points: mxp_backend_cpu_create, mxp_backend_destroy,
 * mxp_backend_decide_rule.
 * The group table's host half, the control block and the aux area (a
 * step's result slots) are one region of backend memory, in that order
 * (backend/devmem.h: unreadable by the host outside backend calls on the
 * mock device); begin uploads the staged table and the host-written half
 * of b->ctl into it in one copy, the ops read and write it there (they run inside
 * the caller's backend bracket, synchronously), report downloads the block
 * and the aux area in one counted copy. The arithmetic is the trainer's
 * before the seam existed, operation for operation (unscale_stats, clip by
 * k->scale with PyTorch's coefficient, k->adamw / k->sgd with t =
 * opt_steps), so results are bit-identical.
 */
#include "backend/backend.h"
#include "backend/devmem.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

/* The CPU backend: the public part, then its region and host staging. */
typedef struct cpu_backend {
    mxp_backend b;
    unsigned char *base;  /* backend memory: in_off + AUX_OFF + cap bytes */
    unsigned char *stage; /* host: the same layout (begin's upload, the report's copy) */
    size_t in_off;        /* the group table's room, ending at the control block */
    size_t cap;           /* aux bytes the region and stage hold */
    int gcap;             /* group table entries the region holds */
} cpu_backend;

/* The aux area's offset after the control block (64-byte aligned). */
#define AUX_OFF ((sizeof(mxp_step_ctl) + 63) / 64 * 64)
#define GRP_SZ sizeof(mxp_step_group_in)

/* Point the public pointers at the region: n table entries ending right
 * where the control block starts (so begin uploads both in one copy). */
static void place(cpu_backend *c, int n, size_t bytes) {
    mxp_backend *b = &c->b;
    b->dev = (mxp_step_ctl *)(void *)(c->base + c->in_off);
    b->aux = c->base + c->in_off + AUX_OFF;
    b->aux_bytes = bytes;
    b->grp_in = (mxp_step_group_in *)(void *)(c->base + c->in_off - (size_t)n * GRP_SZ);
    b->grp_host = (mxp_step_group_in *)(void *)(c->stage + c->in_off - (size_t)n * GRP_SZ);
    b->grp_reserved = n;
}

static mxp_status cpu_reserve(mxp_backend *b, int n_groups, size_t bytes, mxp_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    if (n_groups < 0 || n_groups > MXP_STEP_MAX_GROUPS)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "backend report area: %d loss-scale groups; accepted: 0..%d",
                             n_groups, MXP_STEP_MAX_GROUPS);
    if (bytes <= c->cap && n_groups <= c->gcap) {
        place(c, n_groups, bytes);
        return MXP_OK;
    }
    const size_t cap = bytes > c->cap ? bytes : c->cap;
    const int gcap = n_groups > c->gcap ? n_groups : c->gcap;
    const size_t in_off = ((size_t)gcap * GRP_SZ + 63) / 64 * 64;
    size_t total;
    if (!mxp_size_add(cap, AUX_OFF + in_off, &total))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "backend report area: %zu bytes", bytes);
    unsigned char *dev = mxp_dev_alloc(total), *stage = mxp_calloc(total, 1);
    if (!dev || !stage) {
        mxp_dev_free(dev);
        mxp_free(stage);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "backend report area: %zu bytes",
                             total);
    }
    mxp_dev_enter(); /* device to device: the control block carries over */
    memcpy(dev + in_off, b->dev, sizeof(mxp_step_ctl));
    mxp_dev_leave();
    mxp_dev_free(c->base);
    mxp_free(c->stage);
    c->base = dev;
    c->stage = stage;
    c->in_off = in_off;
    c->cap = cap;
    c->gcap = gcap;
    place(c, n_groups, bytes);
    return MXP_OK;
}

/* One upload: the reserved group entries staged in b->grp_host, then the
 * host half of b->ctl, contiguous in the stage as in the region. */
static mxp_status cpu_begin(mxp_backend *b, mxp_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    if (b->ctl.n_groups < 0 || b->ctl.n_groups > b->grp_reserved)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "backend begin: control block n_groups=%d; accepted: 0..%d "
                             "(the groups reserve made room for)",
                             (int)b->ctl.n_groups, b->grp_reserved);
    const size_t tbl = (size_t)b->grp_reserved * GRP_SZ;
    memcpy(c->stage + c->in_off, &b->ctl, MXP_STEP_CTL_HOST_BYTES);
    mxp_dev_upload(b->grp_in, b->grp_host, tbl + MXP_STEP_CTL_HOST_BYTES);
    mxp_dev_enter(); /* in backend memory: the host's write of the scaler state */
    if (b->dev->scaler_load) b->dev->scaler = b->dev->scaler_set;
    mxp_dev_leave();
    return MXP_OK;
}

static mxp_status cpu_set_counters(mxp_backend *b, int64_t opt_steps, uint64_t sr_counter,
                                   mxp_error *err) {
    b->ctl.opt_steps = opt_steps;
    b->ctl.sr_counter = sr_counter;
    mxp_dev_enter();
    b->dev->opt_steps = opt_steps;
    b->dev->sr_counter = sr_counter;
    mxp_dev_count(false, sizeof opt_steps + sizeof sr_counter);
    mxp_dev_leave();
    return MXP_OK;
}

static mxp_gradpass_acc acc_of(const mxp_grad_stats *gs) {
    return (mxp_gradpass_acc){gs->n, gs->nonfinite, gs->zeros, gs->near_overflow, gs->sumsq,
                              gs->absmax};
}

/* Per-layer loss scaling: one pass per group with its own 1/scale into
 * its slot, then the sum in group order (the trainer's host loop before
 * the seam took it, term for term). */
static mxp_status grad_pass_groups(mxp_backend *b, float *g, size_t n, float near_at,
                                   mxp_error *err) {
    const int32_t ng = b->dev->n_groups;
    const mxp_step_group_in *in = b->grp_in;
    mxp_step_group_out *out = b->aux;
    if (mxp_step_groups_out_bytes(ng) > b->aux_bytes)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "backend grad pass: %d group slots do not fit the %zu aux bytes "
                             "reserved", (int)ng, b->aux_bytes);
    for (int32_t i = 0; i < ng; i++)
        if (in[i].off > n || in[i].cnt > n - in[i].off)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "backend grad pass: group %d range [%llu, +%llu) outside the "
                                 "%zu gradients; accepted: inside", (int)i,
                                 (unsigned long long)in[i].off, (unsigned long long)in[i].cnt, n);
    const mxp_kernels *k = mxp_kernels_get();
    for (int32_t i = 0; i < ng; i++) { /* the passes: results into slots only */
        mxp_grad_stats gs;
        k->unscale_stats(g + in[i].off, (size_t)in[i].cnt, in[i].inv_scale, near_at, &gs);
        out[i].stats = acc_of(&gs);
    }
    mxp_gradpass_acc sum = {0, 0, 0, 0, 0.0, 0.0f};
    for (int32_t i = 0; i < ng; i++) { /* then the sum, in group order */
        const mxp_gradpass_acc q = out[i].stats;
        sum.n += q.n;
        sum.nonfinite += q.nonfinite;
        sum.zeros += q.zeros;
        sum.near_overflow += q.near_overflow;
        sum.sumsq += q.sumsq;
        if (q.absmax > sum.absmax) sum.absmax = q.absmax;
    }
    b->dev->stats = sum;
    return MXP_OK;
}

static mxp_status cpu_grad_pass(mxp_backend *b, float *g, size_t n, float near_at,
                                mxp_error *err) {
    if (b->dev->n_groups > 0) return grad_pass_groups(b, g, n, near_at, err);
    mxp_grad_stats gs;
    mxp_kernels_get()->unscale_stats(g, n, b->dev->inv_scale, near_at, &gs);
    b->dev->stats = acc_of(&gs);
    return MXP_OK;
}

static mxp_status cpu_check_loss(mxp_backend *b, const double *loss, size_t stride, int n,
                                 mxp_error *err) {
    int32_t bad = 0;
    for (int i = 0; i < n; i++)
        if (!isfinite(*(const double *)(const void *)((const unsigned char *)loss +
                                                      (size_t)i * stride)))
            bad = 1;
    b->dev->loss_nonfinite = bad;
    return MXP_OK;
}

void mxp_backend_decide_rule(mxp_step_ctl *c, bool extra_inf, uint64_t n_params) {
    bool found_inf = c->stats.nonfinite > 0 || c->loss_nonfinite || extra_inf;
    c->skip = found_inf;
    double norm = sqrt(c->stats.sumsq);
    c->clip_coef = c->clip_max > 0 && norm > c->clip_max
                       ? (float)(c->clip_max / (norm + 1e-6))
                       : 1.0f;
    if (!found_inf) {
        c->opt_steps++;
        c->sr_counter += n_params;
    }
    if (c->run_scaler_rule) c->event = mxp_scaler_rule_step(&c->rule, &c->scaler, found_inf);
}

static mxp_status cpu_decide(mxp_backend *b, bool extra_inf, uint64_t n_params, mxp_error *err) {
    mxp_step_ctl *c = b->dev;
    mxp_backend_decide_rule(c, extra_inf, n_params);
    if (c->n_groups > 0) /* grad_pass checked that the slots fit */
        mxp_step_groups_decide(&c->rule, b->grp_in, b->aux, c->n_groups, c->loss_nonfinite != 0);
    return MXP_OK;
}

/* kernels.h weights for this step's update (SR stream from the block). */
static mxp_weights kweights(const mxp_step_ctl *c, const mxp_backend_weights *w, size_t n) {
    mxp_weights k = {w->master, w->work, w->work_type, w->sr, c->seed, c->sr_counter - n};
    return k;
}

static void clip(const mxp_step_ctl *c, float *g, size_t n) {
    if (c->clip_coef != 1.0f) mxp_kernels_get()->scale(g, c->clip_coef, n);
}

static mxp_status cpu_adamw(mxp_backend *b, const mxp_backend_weights *w, float *g, float *m,
                            float *v, size_t n, mxp_error *err) {
    const mxp_step_ctl *c = b->dev;
    if (c->skip) return MXP_OK;
    clip(c, g, n);
    mxp_weights k = kweights(c, w, n);
    mxp_adamw_hparams h = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    mxp_kernels_get()->adamw(&k, g, m, v, n, &h, c->opt_steps);
    return MXP_OK;
}

static mxp_status cpu_sgd(mxp_backend *b, const mxp_backend_weights *w, float *g, float *buf,
                          size_t n, mxp_error *err) {
    const mxp_step_ctl *c = b->dev;
    if (c->skip) return MXP_OK;
    clip(c, g, n);
    mxp_weights k = kweights(c, w, n);
    mxp_sgd_hparams h = {c->lr, c->momentum, c->weight_decay, c->nesterov};
    mxp_kernels_get()->sgd(&k, g, buf, n, &h, c->opt_steps);
    return MXP_OK;
}

static mxp_status cpu_report(mxp_backend *b, mxp_step_ctl *out, mxp_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    b->d2h_reports++;
    /* the step's one device-to-host copy: control block and aux area */
    unsigned char *img = c->stage + c->in_off;
    mxp_dev_download(img, b->dev, AUX_OFF + b->aux_bytes);
    memcpy(&b->ctl, img, sizeof b->ctl);
    b->aux_host = img + AUX_OFF;
    if (out) *out = b->ctl;
    return MXP_OK;
}

static void cpu_destroy(mxp_backend *b) {
    cpu_backend *c = (cpu_backend *)b;
    mxp_dev_free(c->base);
    mxp_free(c->stage);
    mxp_free(c);
}

static const mxp_backend_ops cpu_ops = {
    .name = "cpu",
    .reserve = cpu_reserve,
    .begin = cpu_begin,
    .set_counters = cpu_set_counters,
    .grad_pass = cpu_grad_pass,
    .check_loss = cpu_check_loss,
    .decide = cpu_decide,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
    .report = cpu_report,
    .destroy = cpu_destroy,
};

mxp_status mxp_backend_cpu_create(mxp_backend **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_backend_cpu_create: NULL");
    *out = NULL;
    cpu_backend *c = mxp_calloc(1, sizeof *c);
    if (!c) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "CPU backend");
    c->b.ops = &cpu_ops;
    c->cap = 0;
    /* the control block with an empty aux area (zero: no steps yet) */
    unsigned char *dev = mxp_dev_alloc(AUX_OFF), *stage = mxp_calloc(AUX_OFF, 1);
    if (!dev || !stage) {
        mxp_dev_free(dev);
        mxp_free(stage);
        mxp_free(c);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "CPU backend control block");
    }
    c->base = dev;
    c->stage = stage;
    place(c, 0, 0);
    *out = &c->b;
    return MXP_OK;
}

void mxp_backend_destroy(mxp_backend *b) {
    if (b) b->ops->destroy(b);
}
