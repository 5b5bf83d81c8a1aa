/* dist/comm.c: the communicator wrappers (argument checks, dispatch), the
 * data-parallel config, launcher detection and the agreement helpers.
 *
 * Entry points: mxp_comm_* wrappers, mxp_comm_create_from_env,
 * mxp_dist_launcher_size, mxp_dist_config_default/validate,
 * mxp_wire_dtype_name, mxp_dist_agree_any, mxp_dist_checksum,
 * mxp_dist_same_u64, mxp_dist_require_same.
 * The implementations live in comm_single.c and comm_mpi.c.
 */
#include <mixprec/dist.h>

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const char *const kWireNames[] = {"fp32", "bf16"};
static_assert(sizeof kWireNames / sizeof kWireNames[0] == MXP_WIRE_DTYPE_COUNT,
              "one name per wire dtype");

const char *mxp_wire_dtype_name(mxp_wire_dtype w) {
    return (unsigned)w < MXP_WIRE_DTYPE_COUNT ? kWireNames[w] : "?";
}

mxp_dist_config mxp_dist_config_default(void) {
    return (mxp_dist_config){.allreduce_dtype = MXP_WIRE_F32, .check_every = 0};
}

mxp_status mxp_dist_config_validate(const mxp_dist_config *c, mxp_error *err) {
    if (!c) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dist_config: NULL");
    if ((unsigned)c->allreduce_dtype >= MXP_WIRE_DTYPE_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "dist.allreduce_dtype=%d; accepted: fp32, bf16",
                             (int)c->allreduce_dtype);
    if (c->check_every < 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "dist.check_every=%lld; accepted: >= 0 (0: first step only)",
                             (long long)c->check_every);
    return MXP_OK;
}

/* ---- launcher detection --------------------------------------------------- */

/* A positive decimal from the environment, or 0. */
static int env_int(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 1 || v > 1 << 24) return 0;
    return (int)v;
}

int mxp_dist_launcher_size(void) {
    int n = env_int("OMPI_COMM_WORLD_SIZE"); /* Open MPI mpirun */
    if (n == 0) n = env_int("PMI_SIZE");     /* MPICH / Hydra, Slurm PMI */
    if (n == 0 && getenv("PMIX_RANK")) n = 1; /* PMIx launcher, size unknown */
    return n;
}

mxp_status mxp_comm_create_from_env(mxp_comm **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_comm_create_from_env: NULL");
    *out = NULL;
    int n = mxp_dist_launcher_size();
    if (n == 0) return mxp_comm_create_single(out, err);
    if (!mxp_dist_mpi_built()) {
        if (n > 1)
            return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                                 "started by an MPI launcher with %d ranks, but this mixprec "
                                 "was built without MPI; accepted: a build configured with "
                                 "Open MPI found (libopenmpi-dev), or one process", n);
        return mxp_comm_create_single(out, err);
    }
    return mxp_comm_create_mpi(out, err);
}

/* ---- wrappers ----------------------------------------------------------------- */

void mxp_comm_destroy(mxp_comm *c) {
    if (c && c->vt && c->vt->destroy) c->vt->destroy(c);
}

int mxp_comm_rank(const mxp_comm *c) { return c ? c->rank : 0; }
int mxp_comm_size(const mxp_comm *c) { return c ? c->size : 1; }
const char *mxp_comm_name(const mxp_comm *c) { return c ? c->vt->name : "none"; }

#define NEED_COMM(c, what)                                                               \
    do {                                                                                 \
        if (!(c) || !(c)->vt)                                                            \
            return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL communicator", what); \
    } while (0)

mxp_status mxp_comm_reserve(mxp_comm *c, size_t n, mxp_error *err) {
    NEED_COMM(c, "mxp_comm_reserve");
    return c->vt->reserve(c, n, err);
}

mxp_status mxp_comm_allreduce_f32(mxp_comm *c, float *buf, size_t n, mxp_wire_dtype wire,
                                  bool average, mxp_error *err) {
    NEED_COMM(c, "mxp_comm_allreduce_f32");
    if (!buf && n > 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_comm_allreduce_f32: NULL buffer");
    if ((unsigned)wire >= MXP_WIRE_DTYPE_COUNT)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "all-reduce wire dtype %d; accepted: fp32, bf16", (int)wire);
    return c->vt->allreduce_f32(c, buf, n, wire, average, err);
}

mxp_status mxp_comm_allreduce_f64(mxp_comm *c, double *buf, size_t n, bool average,
                                  mxp_error *err) {
    NEED_COMM(c, "mxp_comm_allreduce_f64");
    if (!buf && n > 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_comm_allreduce_f64: NULL buffer");
    return c->vt->allreduce_f64(c, buf, n, average, err);
}

mxp_status mxp_comm_allreduce_max_i32(mxp_comm *c, int32_t *buf, size_t n, mxp_error *err) {
    NEED_COMM(c, "mxp_comm_allreduce_max_i32");
    if (!buf && n > 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_comm_allreduce_max_i32: NULL buffer");
    return c->vt->allreduce_max_i32(c, buf, n, err);
}

mxp_status mxp_comm_broadcast(mxp_comm *c, void *buf, size_t bytes, int root, mxp_error *err) {
    NEED_COMM(c, "mxp_comm_broadcast");
    if (!buf && bytes > 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_comm_broadcast: NULL buffer");
    if (root < 0 || root >= c->size)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "broadcast root %d; accepted: 0..%d", root, c->size - 1);
    return c->vt->broadcast(c, buf, bytes, root, err);
}

mxp_status mxp_comm_barrier(mxp_comm *c, mxp_error *err) {
    NEED_COMM(c, "mxp_comm_barrier");
    return c->vt->barrier(c, err);
}

void mxp_comm_abort(mxp_comm *c, int code) {
    if (c && c->vt && c->vt->abort) c->vt->abort(c, code);
}

void mxp_comm_get_stats(const mxp_comm *c, mxp_comm_stats *out) {
    if (!out) return;
    if (c)
        *out = c->stats;
    else
        memset(out, 0, sizeof *out);
}

void mxp_comm_reset_stats(mxp_comm *c) {
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

/* ---- agreement ---------------------------------------------------------------- */

mxp_status mxp_dist_agree_any(mxp_comm *c, bool *flag, mxp_error *err) {
    if (!flag) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dist_agree_any: NULL flag");
    int32_t v = *flag ? 1 : 0;
    mxp_status s = mxp_comm_allreduce_max_i32(c, &v, 1, err);
    if (s == MXP_OK) *flag = v != 0;
    return s;
}

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* One 8-byte word at a time: xor, rotate, multiply (a chain, so the order
 * of the words matters); a splitmix64 finaliser at the end. */
uint64_t mxp_dist_checksum(const void *buf, size_t bytes, uint64_t h) {
    const unsigned char *p = buf;
    uint64_t acc = h ^ 0x9E3779B97F4A7C15ull ^ (uint64_t)bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc = rotl64(acc ^ w, 29) * 0xBF58476D1CE4E5B9ull;
    }
    if (i < bytes) {
        uint64_t w = 0;
        memcpy(&w, p + i, bytes - i);
        acc = rotl64(acc ^ w ^ 0xFF00000000000000ull, 29) * 0xBF58476D1CE4E5B9ull;
    }
    acc ^= acc >> 30;
    acc *= 0xBF58476D1CE4E5B9ull;
    acc ^= acc >> 27;
    acc *= 0x94D049BB133111EBull;
    acc ^= acc >> 31;
    return acc;
}

/* max(p) == min(p) for each 16-bit piece p of the value, with min(p)
 * obtained as -max(-p): one MAX all-reduce of 8 int32. */
mxp_status mxp_dist_same_u64(mxp_comm *c, uint64_t value, bool *same, mxp_error *err) {
    if (!same) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_dist_same_u64: NULL");
    int32_t v[8];
    for (int k = 0; k < 4; k++) {
        v[k] = (int32_t)((value >> (16 * k)) & 0xFFFFu);
        v[4 + k] = -v[k];
    }
    mxp_status s = mxp_comm_allreduce_max_i32(c, v, 8, err);
    if (s != MXP_OK) return s;
    bool ok = true;
    for (int k = 0; k < 4; k++) ok = ok && v[k] == -v[4 + k];
    *same = ok;
    return MXP_OK;
}

mxp_status mxp_dist_require_same(mxp_comm *c, const void *bytes, size_t n, const char *what,
                                 mxp_error *err) {
    bool same = false;
    mxp_status s = mxp_dist_same_u64(c, mxp_dist_checksum(bytes, n, 0), &same, err);
    if (s != MXP_OK) return s;
    if (!same)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "the %d ranks disagree on %s; accepted: the same configuration "
                             "and seed on every rank", mxp_comm_size(c), what);
    return MXP_OK;
}
