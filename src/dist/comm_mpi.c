/* dist/comm_mpi.c: the MPI communicator (compiled with MPI only when CMake
 * found it: MIXPREC_HAVE_MPI; otherwise mxp_comm_create_mpi reports
 * MXP_ERR_UNSUPPORTED).
 *
 * Entry points: mxp_comm_create_mpi, mxp_dist_mpi_built.
 *
 * Deterministic all-reduce of n floats over N ranks, per segment of at most
 * 2^24 elements (so counts fit MPI's int and scratch stays bounded):
 *   1. split the segment into N contiguous chunks (sizes differ by <= 1);
 *      MPI_Alltoallv sends chunk k of every rank to rank k (reduce-scatter
 *      by exchange; 4 or 2 bytes per element on the wire);
 *   2. rank k sums the N contributions of its chunk in ascending rank order
 *      in FP32 (the order never depends on MPI's algorithm), divides by N
 *      for an average, and (BF16 wire) rounds the result to BF16;
 *   3. MPI_Allgatherv copies every reduced chunk to every rank.
 * Every rank ends with the same bits; each rank sends (N-1)/N of the
 * segment twice, as a ring all-reduce does: 2 (N-1)/N * n * wire bytes.
 * This is also the shape ZeRO-1 needs (optimizer on the owned chunk
 * between steps 2 and 3; docs/scaling.md).
 *
 * Errors: the duplicated communicator returns errors (MPI_ERRORS_RETURN),
 * which become MXP_ERR_IO naming the call, the rank and MPI's message. A
 * rank killed outright is detected by the launcher (Open MPI's mpirun
 * terminates the whole job); mxp_comm_abort ends the job from a rank that
 * cannot go on. References: MPI 3.1 sections 5.8, 5.9, 8.3.
 */
#include <mixprec/dist.h>

#include "dist/dist_internal.h"

#ifdef MIXPREC_HAVE_MPI

#include <limits.h>
#include <mpi.h>
#include <string.h>

#include <mixprec/num.h> /* mxp_bf16 */

#define SEG_DEFAULT ((size_t)1 << 24) /* elements per all-reduce segment */
#define F64_BATCH 32              /* doubles per f64 all-reduce round */

typedef struct mpi_state {
    MPI_Comm comm;
    size_t seg_cap;       /* largest segment the scratch is sized for */
    size_t chunk_cap;     /* ceil(seg_cap / N) */
    float *recv;          /* [N * chunk_cap] FP32 contributions to my chunk */
    mxp_bf16 *wire;       /* [seg_cap] BF16 copy of the segment */
    mxp_bf16 *wire_recv;  /* [N * chunk_cap] BF16 contributions to my chunk */
    double *f64;          /* [N * F64_BATCH] gathered doubles */
    int *counts, *displs; /* [N] chunk sizes and offsets in the segment */
    int *rcounts, *rdispls; /* [N] receive layout of step 1 */
} mpi_state;

/* BF16 <-> FP32 inline, bit for bit as mxp_bf16_to_f32 / mxp_f32_to_bf16
 * (num/bf16.c: RNE, NaN kept quiet): the wire conversion touches every
 * gradient twice per step, too often for a call per element. */
static inline float wire_to_f32(mxp_bf16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline mxp_bf16 wire_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (mxp_bf16){(uint16_t)((u >> 16) | 0x0040u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return (mxp_bf16){(uint16_t)(u >> 16)};
}

/* Live MPI communicators, and whether mixprec initialised MPI. */
static int g_live;
static size_t g_seg_max = SEG_DEFAULT; /* elements per segment */
static bool g_we_initialised;

bool mxp_dist_mpi_built(void) { return true; }

void mxp_dist_mpi_set_segment_max(size_t n) { g_seg_max = n ? n : SEG_DEFAULT; }

static mxp_status mpi_fail(mxp_comm *c, int rc, const char *call, mxp_error *err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len < (int)sizeof msg ? len : (int)sizeof msg - 1] = '\0';
    return mxp_error_set(err, MXP_ERR_IO,
                         "%s failed on rank %d of %d: %s (error %d); a peer rank may have "
                         "died or the interconnect failed, the job cannot continue",
                         call, c->rank, c->size, len ? msg : "unknown MPI error", rc);
}

/* Finalise MPI when mixprec initialised it and no communicator is left. */
static void release_mpi(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (g_live == 0 && g_we_initialised && !finalized) MPI_Finalize();
}

static void free_scratch(mpi_state *st) {
    mxp_free(st->recv);
    mxp_free(st->wire);
    mxp_free(st->wire_recv);
    st->recv = NULL;
    st->wire = NULL;
    st->wire_recv = NULL;
    st->seg_cap = st->chunk_cap = 0;
}

static void mpi_destroy(mxp_comm *c) {
    mpi_state *st = c->impl;
    if (st) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && st->comm != MPI_COMM_NULL) MPI_Comm_free(&st->comm);
        free_scratch(st);
        mxp_free(st->f64);
        mxp_free(st->counts);
        mxp_free(st->displs);
        mxp_free(st->rcounts);
        mxp_free(st->rdispls);
        mxp_free(st);
    }
    mxp_free(c);
    g_live--;
    release_mpi();
}

/* Size the scratch for segments of min(n, g_seg_max) elements (grow only). */
static mxp_status mpi_reserve(mxp_comm *c, size_t n, mxp_error *err) {
    mpi_state *st = c->impl;
    size_t seg = n < g_seg_max ? n : g_seg_max;
    if (seg <= st->seg_cap) return MXP_OK;
    size_t N = (size_t)c->size, chunk = (seg + N - 1) / N, all;
    if (!mxp_size_mul(chunk, N, &all))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "all-reduce scratch overflows size_t");
    free_scratch(st);
    st->recv = mxp_calloc(all, sizeof(float));
    st->wire = mxp_calloc(seg, sizeof(mxp_bf16));
    st->wire_recv = mxp_calloc(all, sizeof(mxp_bf16));
    if (!st->recv || !st->wire || !st->wire_recv) {
        free_scratch(st);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY,
                             "all-reduce scratch for %zu elements x %zu ranks", chunk, N);
    }
    st->seg_cap = seg;
    st->chunk_cap = chunk;
    return MXP_OK;
}

/* Chunk layout of a segment of n elements: rank k owns [displs[k],
 * displs[k] + counts[k]); receive layout: N blocks of my chunk size. */
static void layout(mxp_comm *c, size_t n) {
    mpi_state *st = c->impl;
    int N = c->size;
    size_t base = n / (size_t)N, extra = n % (size_t)N, off = 0;
    for (int k = 0; k < N; k++) {
        size_t cnt = base + ((size_t)k < extra ? 1 : 0);
        st->counts[k] = (int)cnt;
        st->displs[k] = (int)off;
        off += cnt;
    }
    for (int j = 0; j < N; j++) {
        st->rcounts[j] = st->counts[c->rank];
        st->rdispls[j] = j * st->counts[c->rank];
    }
}

/* Bytes this rank exchanges with others for one segment (both steps). */
static void count_traffic(mxp_comm *c, size_t elem) {
    mpi_state *st = c->impl;
    uint64_t out = 0, in = 0;
    int N = c->size, r = c->rank;
    for (int k = 0; k < N; k++) {
        if (k == r) continue;
        out += (uint64_t)st->counts[k] * elem;       /* step 1: chunk k to rank k */
        in += (uint64_t)st->counts[r] * elem;        /* step 1: my chunk from rank k */
        out += (uint64_t)st->counts[r] * elem;       /* step 3: my chunk to rank k */
        in += (uint64_t)st->counts[k] * elem;        /* step 3: chunk k from rank k */
    }
    c->stats.bytes_sent += out;
    c->stats.bytes_received += in;
}

static mxp_status segment_f32(mxp_comm *c, float *buf, size_t n, bool average,
                              mxp_error *err) {
    mpi_state *st = c->impl;
    int N = c->size, r = c->rank;
    layout(c, n);
    int rc = MPI_Alltoallv(buf, st->counts, st->displs, MPI_FLOAT, st->recv, st->rcounts,
                           st->rdispls, MPI_FLOAT, st->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Alltoallv (gradient reduce-scatter)", err);
    size_t m = (size_t)st->counts[r];
    float *mine = buf + st->displs[r];
    const float fN = (float)N;
    for (size_t i = 0; i < m; i++) {
        float s = st->recv[i];
        for (int j = 1; j < N; j++) s += st->recv[(size_t)j * m + i];
        mine[i] = average ? s / fN : s;
    }
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, st->counts, st->displs,
                        MPI_FLOAT, st->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Allgatherv (gradient all-gather)", err);
    count_traffic(c, sizeof(float));
    return MXP_OK;
}

static mxp_status segment_bf16(mxp_comm *c, float *buf, size_t n, bool average,
                               mxp_error *err) {
    mpi_state *st = c->impl;
    int N = c->size, r = c->rank;
    layout(c, n);
    for (size_t i = 0; i < n; i++) st->wire[i] = wire_from_f32(buf[i]);
    int rc = MPI_Alltoallv(st->wire, st->counts, st->displs, MPI_UINT16_T, st->wire_recv,
                           st->rcounts, st->rdispls, MPI_UINT16_T, st->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Alltoallv (gradient reduce-scatter)", err);
    size_t m = (size_t)st->counts[r];
    mxp_bf16 *mine = st->wire + st->displs[r];
    const float fN = (float)N;
    for (size_t i = 0; i < m; i++) {
        float s = wire_to_f32(st->wire_recv[i]);
        for (int j = 1; j < N; j++) s += wire_to_f32(st->wire_recv[(size_t)j * m + i]);
        mine[i] = wire_from_f32(average ? s / fN : s);
    }
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, st->wire, st->counts, st->displs,
                        MPI_UINT16_T, st->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Allgatherv (gradient all-gather)", err);
    for (size_t i = 0; i < n; i++) buf[i] = wire_to_f32(st->wire[i]);
    count_traffic(c, sizeof(mxp_bf16));
    return MXP_OK;
}

static mxp_status mpi_allreduce_f32(mxp_comm *c, float *buf, size_t n, mxp_wire_dtype wire,
                                    bool average, mxp_error *err) {
    double t0 = mxp_time_now();
    mxp_status s = mpi_reserve(c, n, err);
    for (size_t off = 0; s == MXP_OK && off < n; off += g_seg_max) {
        size_t m = n - off < g_seg_max ? n - off : g_seg_max;
        s = wire == MXP_WIRE_BF16 ? segment_bf16(c, buf + off, m, average, err)
                                  : segment_f32(c, buf + off, m, average, err);
    }
    c->stats.collectives++;
    c->stats.seconds += mxp_time_now() - t0;
    return s;
}

/* All-gather the values, then sum them in rank order on every rank. */
static mxp_status mpi_allreduce_f64(mxp_comm *c, double *buf, size_t n, bool average,
                                    mxp_error *err) {
    mpi_state *st = c->impl;
    double t0 = mxp_time_now();
    int N = c->size;
    mxp_status s = MXP_OK;
    for (size_t off = 0; off < n; off += F64_BATCH) {
        int m = (int)(n - off < F64_BATCH ? n - off : F64_BATCH);
        int rc = MPI_Allgather(buf + off, m, MPI_DOUBLE, st->f64, m, MPI_DOUBLE, st->comm);
        if (rc != MPI_SUCCESS) {
            s = mpi_fail(c, rc, "MPI_Allgather (loss all-reduce)", err);
            break;
        }
        for (int i = 0; i < m; i++) {
            double v = st->f64[i];
            for (int j = 1; j < N; j++) v += st->f64[(size_t)j * (size_t)m + (size_t)i];
            buf[off + (size_t)i] = average ? v / (double)N : v;
        }
        c->stats.bytes_sent += (uint64_t)(N - 1) * (uint64_t)m * sizeof(double);
        c->stats.bytes_received += (uint64_t)(N - 1) * (uint64_t)m * sizeof(double);
    }
    c->stats.collectives++;
    c->stats.seconds += mxp_time_now() - t0;
    return s;
}

static mxp_status mpi_max_i32(mxp_comm *c, int32_t *buf, size_t n, mxp_error *err) {
    mpi_state *st = c->impl;
    if (n > INT_MAX)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "max all-reduce of %zu values; "
                             "accepted: <= %d", n, INT_MAX);
    double t0 = mxp_time_now();
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_INT32_T, MPI_MAX, st->comm);
    c->stats.collectives++;
    if (c->size > 1) {
        c->stats.bytes_sent += (uint64_t)n * sizeof(int32_t);
        c->stats.bytes_received += (uint64_t)n * sizeof(int32_t);
    }
    c->stats.seconds += mxp_time_now() - t0;
    return rc == MPI_SUCCESS ? MXP_OK : mpi_fail(c, rc, "MPI_Allreduce (MAX)", err);
}

static mxp_status mpi_broadcast(mxp_comm *c, void *buf, size_t bytes, int root,
                                mxp_error *err) {
    mpi_state *st = c->impl;
    double t0 = mxp_time_now();
    char *p = buf;
    mxp_status s = MXP_OK;
    for (size_t off = 0; off < bytes; off += (size_t)INT_MAX) {
        int m = (int)(bytes - off < (size_t)INT_MAX ? bytes - off : (size_t)INT_MAX);
        int rc = MPI_Bcast(p + off, m, MPI_BYTE, root, st->comm);
        if (rc != MPI_SUCCESS) {
            s = mpi_fail(c, rc, "MPI_Bcast", err);
            break;
        }
    }
    c->stats.collectives++;
    if (c->size > 1) {
        if (c->rank == root)
            c->stats.bytes_sent += (uint64_t)bytes;
        else
            c->stats.bytes_received += (uint64_t)bytes;
    }
    c->stats.seconds += mxp_time_now() - t0;
    return s;
}

static mxp_status mpi_barrier(mxp_comm *c, mxp_error *err) {
    mpi_state *st = c->impl;
    double t0 = mxp_time_now();
    int rc = MPI_Barrier(st->comm);
    c->stats.collectives++;
    c->stats.seconds += mxp_time_now() - t0;
    return rc == MPI_SUCCESS ? MXP_OK : mpi_fail(c, rc, "MPI_Barrier", err);
}

static void mpi_abort(mxp_comm *c, int code) {
    mpi_state *st = c->impl;
    MPI_Abort(st->comm != MPI_COMM_NULL ? st->comm : MPI_COMM_WORLD, code);
}

static const mxp_comm_vtable kMpi = {
    .name = "mpi",
    .destroy = mpi_destroy,
    .reserve = mpi_reserve,
    .allreduce_f32 = mpi_allreduce_f32,
    .allreduce_f64 = mpi_allreduce_f64,
    .allreduce_max_i32 = mpi_max_i32,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
};

mxp_status mxp_comm_create_mpi(mxp_comm **out, mxp_error *err) {
    if (!out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_comm_create_mpi: NULL");
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "MPI was already finalised in this process; accepted: create the "
                             "MPI communicator once per process");
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return mxp_error_set(err, MXP_ERR_IO, "MPI_Init_thread failed");
        g_we_initialised = true;
    }
    mxp_comm *c = mxp_calloc(1, sizeof *c);
    mpi_state *st = c ? mxp_calloc(1, sizeof *st) : NULL;
    if (!c || !st) {
        mxp_free(c);
        release_mpi();
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "MPI communicator");
    }
    g_live++;
    c->vt = &kMpi;
    c->impl = st;
    st->comm = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &st->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(st->comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(st->comm, &c->size);
    if (rc != MPI_SUCCESS) {
        mxp_status s = mpi_fail(c, rc, "MPI communicator setup", err);
        mpi_destroy(c);
        return s;
    }
    size_t N = (size_t)c->size;
    st->f64 = mxp_calloc(N * F64_BATCH, sizeof(double));
    st->counts = mxp_calloc(N, sizeof(int));
    st->displs = mxp_calloc(N, sizeof(int));
    st->rcounts = mxp_calloc(N, sizeof(int));
    st->rdispls = mxp_calloc(N, sizeof(int));
    if (!st->f64 || !st->counts || !st->displs || !st->rcounts || !st->rdispls) {
        mpi_destroy(c);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "MPI communicator for %zu ranks", N);
    }
    *out = c;
    return MXP_OK;
}

#else /* !MIXPREC_HAVE_MPI */

bool mxp_dist_mpi_built(void) { return false; }

void mxp_dist_mpi_set_segment_max(size_t n) { (void)n; }

mxp_status mxp_comm_create_mpi(mxp_comm **out, mxp_error *err) {
    if (out) *out = NULL;
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                         "this mixprec was built without MPI; accepted: reconfigure with "
                         "Open MPI installed (libopenmpi-dev) to train on several ranks");
}

#endif
