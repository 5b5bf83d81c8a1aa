/* dist/comm_single.c: the one-rank communicator. Every collective is the
 * identity (the sum over one rank is the value itself, the average divides
 * by 1), nothing is sent, and the BF16 wire option rounds nothing. Calls
 * are counted so a single-process run reports the same counters' shape.
 *
 * Entry point: mxp_comm_create_single.
 */
#include <mixprec/dist.h>

static void single_destroy(mxp_comm *c) { mxp_free(c); }

static mxp_status single_reserve(mxp_comm *c, size_t n, mxp_error *err) {
    (void)c, (void)n, (void)err;
    return MXP_OK;
}

static mxp_status single_allreduce_f32(mxp_comm *c, float *buf, size_t n, mxp_wire_dtype wire,
                                       bool average, mxp_error *err) {
    (void)buf, (void)n, (void)wire, (void)average, (void)err;
    c->stats.collectives++;
    return MXP_OK;
}

static mxp_status single_allreduce_f64(mxp_comm *c, double *buf, size_t n, bool average,
                                       mxp_error *err) {
    (void)buf, (void)n, (void)average, (void)err;
    c->stats.collectives++;
    return MXP_OK;
}

static mxp_status single_max_i32(mxp_comm *c, int32_t *buf, size_t n, mxp_error *err) {
    (void)buf, (void)n, (void)err;
    c->stats.collectives++;
    return MXP_OK;
}

static mxp_status single_broadcast(mxp_comm *c, void *buf, size_t bytes, int root,
                                   mxp_error *err) {
    (void)buf, (void)bytes, (void)root, (void)err;
    c->stats.collectives++;
    return MXP_OK;
}

static mxp_status single_barrier(mxp_comm *c, mxp_error *err) {
    (void)err;
    c->stats.collectives++;
    return MXP_OK;
}

/* Nothing else to stop: the caller exits on its own. */
static void single_abort(mxp_comm *c, int code) { (void)c, (void)code; }

static const mxp_comm_vtable kSingle = {
    .name = "single",
    .destroy = single_destroy,
    .reserve = single_reserve,
    .allreduce_f32 = single_allreduce_f32,
    .allreduce_f64 = single_allreduce_f64,
    .allreduce_max_i32 = single_max_i32,
    .broadcast = single_broadcast,
    .barrier = single_barrier,
    .abort = single_abort,
};

mxp_status mxp_comm_create_single(mxp_comm **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_comm_create_single: NULL");
    mxp_comm *c = mxp_calloc(1, sizeof *c);
    if (!c) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "communicator");
    c->vt = &kSingle;
    c->rank = 0;
    c->size = 1;
    *out = c;
    return MXP_OK;
}
