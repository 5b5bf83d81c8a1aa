/* tools/mixprec/bench_gemm.c: GEMM timings through a kernel table, and the
 * optional peer libraries.
 *
 * Peers are loaded with dlopen at run time (never linked, never required):
 *   oneDNN   libdnnl.so.2: dnnl_sgemm and dnnl_gemm_bf16bf16f32 (row-major
 *            BLAS-like entry points, threaded with OpenMP);
 *   OpenBLAS libopenblas.so.0: cblas_sgemm; OPENBLAS_CORETYPE=SkylakeX is
 *            set (unless already set) before loading, because OpenBLAS
 *            misdetects this CPU and would pick slower kernels.
 * A peer is used only after it reproduces the generic GEMM on a small
 * problem in every transpose, so a mismatched calling convention shows as
 * "unavailable" rather than as a fast wrong number.
 */
#include "bench.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bench_gemm_bufs {
    void *a[MXP_DTYPE_COUNT], *b[MXP_DTYPE_COUNT];
    float *c;
    int64_t max_mk, max_kn, max_mn;
};

static void *typed_random(mxp_dtype t, size_t n, mxp_rng *rng, float *tmp) {
    for (size_t i = 0; i < n; i++) tmp[i] = 2.0f * mxp_rng_uniform(rng) - 1.0f;
    void *p = mxp_calloc(n, mxp_dtype_info(t)->size);
    if (p) mxp_convert(t, p, MXP_DTYPE_F32, tmp, n);
    return p;
}

bench_gemm_bufs *bench_gemm_bufs_create(int64_t max_mk, int64_t max_kn, int64_t max_mn) {
    bench_gemm_bufs *b = mxp_calloc(1, sizeof *b);
    if (!b) return NULL;
    b->max_mk = max_mk;
    b->max_kn = max_kn;
    b->max_mn = max_mn;
    size_t nmax = (size_t)(max_mk > max_kn ? max_mk : max_kn);
    float *tmp = mxp_calloc(nmax, sizeof(float));
    b->c = mxp_calloc((size_t)max_mn, sizeof(float));
    bool ok = tmp && b->c;
    mxp_rng rng;
    mxp_rng_init(&rng, 7);
    for (int t = 0; ok && t < MXP_DTYPE_COUNT; t++) {
        b->a[t] = typed_random((mxp_dtype)t, (size_t)max_mk, &rng, tmp);
        b->b[t] = typed_random((mxp_dtype)t, (size_t)max_kn, &rng, tmp);
        ok = b->a[t] && b->b[t];
    }
    mxp_free(tmp);
    if (!ok) {
        bench_gemm_bufs_destroy(b);
        return NULL;
    }
    return b;
}

void bench_gemm_bufs_destroy(bench_gemm_bufs *b) {
    if (!b) return;
    for (int t = 0; t < MXP_DTYPE_COUNT; t++) {
        mxp_free(b->a[t]);
        mxp_free(b->b[t]);
    }
    mxp_free(b->c);
    mxp_free(b);
}

static mxp_gemm_args shape_args(const bench_gemm_bufs *b, const bench_gemm_shape *s,
                                mxp_dtype at, mxp_dtype bt) {
    return (mxp_gemm_args){
        .trans_a = s->trans_a, .trans_b = s->trans_b, .M = s->M, .N = s->N, .K = s->K,
        .a_type = at, .A = b->a[at], .lda = s->trans_a ? s->M : s->K,
        .b_type = bt, .B = b->b[bt], .ldb = s->trans_b ? s->K : s->N,
        .C = b->c, .ldc = s->N, .alpha = 1.0f, .beta = s->beta,
    };
}

typedef struct table_ctx {
    const mxp_kernels *k;
    mxp_gemm_args g;
} table_ctx;

static void call_table(void *p) {
    table_ctx *c = p;
    c->k->gemm(&c->g);
}

bench_timing bench_gemm_table(const mxp_kernels *k, bench_gemm_bufs *b,
                              const bench_gemm_shape *s, mxp_dtype at, mxp_dtype bt,
                              int reps, double min_sample_s) {
    table_ctx c = {k, shape_args(b, s, at, bt)};
    return bench_time(call_table, &c, reps, 0.05, min_sample_s);
}

bench_peak_kind bench_gemm_peak_kind(const mxp_kernels *k, mxp_dtype at, mxp_dtype bt) {
    /* the table says what it computes in (kernels.h, gemm_compute); a BF16 x
     * FP8 pair goes the way of its wider operand */
    mxp_dtype t = at == bt ? at : (at == MXP_DTYPE_BF16 || bt == MXP_DTYPE_BF16) &&
                                          mxp_dtype_info(at)->size <= 2 &&
                                          mxp_dtype_info(bt)->size <= 2
                                      ? MXP_DTYPE_BF16
                                      : MXP_DTYPE_F32;
    return k->gemm_compute(t, false) == MXP_GEMM_COMPUTE_BF16_DOT ? BENCH_PEAK_BF16_DP
                                                                   : BENCH_PEAK_FP32_FMA;
}

/* ---- peers ---------------------------------------------------------------- */

typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *,
                             int64_t, const float *, int64_t, float, float *, int64_t);
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,
                            int64_t, const uint16_t *, int64_t, float, float *, int64_t);
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

static struct {
    bool tried, ok;
    char why[160];
    void *lib;
    dnnl_sgemm_fn dnnl_sgemm;
    dnnl_bf16_fn dnnl_bf16;
    cblas_sgemm_fn cblas_sgemm;
} peers[BENCH_PEER_COUNT];

const char *bench_peer_name(bench_peer p) {
    static const char *const names[] = {"onednn", "openblas"};
    _Static_assert(sizeof names / sizeof names[0] == BENCH_PEER_COUNT, "peer names");
    return p < BENCH_PEER_COUNT ? names[p] : "invalid";
}

bool bench_peer_supports(bench_peer p, mxp_dtype at, mxp_dtype bt) {
    if (at != bt) return false;
    if (at == MXP_DTYPE_F32 || at == MXP_DTYPE_F16) return true; /* f16: as FP32 */
    return p == BENCH_PEER_ONEDNN && at == MXP_DTYPE_BF16 && peers[p].dnnl_bf16;
}

/* Run peer p's GEMM for g (alpha/beta as given). */
static void peer_call(bench_peer p, const mxp_gemm_args *g) {
    char ta = g->trans_a ? 'T' : 'N', tb = g->trans_b ? 'T' : 'N';
    if (p == BENCH_PEER_ONEDNN && g->a_type == MXP_DTYPE_BF16)
        peers[p].dnnl_bf16(ta, tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb,
                           g->beta, g->C, g->ldc);
    else if (p == BENCH_PEER_ONEDNN)
        peers[p].dnnl_sgemm(ta, tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb,
                            g->beta, g->C, g->ldc);
    else
        peers[p].cblas_sgemm(CBLAS_ROW_MAJOR, g->trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                             g->trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)g->M, (int)g->N,
                             (int)g->K, g->alpha, g->A, (int)g->lda, g->B, (int)g->ldb,
                             g->beta, g->C, (int)g->ldc);
}

/* The peer against the generic GEMM on a 3 x 5 x 4 problem, all transposes,
 * for dtype t. */
static bool peer_check(bench_peer p, mxp_dtype t) {
    float a32[12], b32[20];
    uint16_t a16[12], b16[20];
    mxp_rng rng;
    mxp_rng_init(&rng, 11);
    for (int i = 0; i < 12; i++) a32[i] = mxp_round_to(t, 2.0f * mxp_rng_uniform(&rng) - 1.0f);
    for (int i = 0; i < 20; i++) b32[i] = mxp_round_to(t, 2.0f * mxp_rng_uniform(&rng) - 1.0f);
    mxp_convert(MXP_DTYPE_BF16, a16, MXP_DTYPE_F32, a32, 12);
    mxp_convert(MXP_DTYPE_BF16, b16, MXP_DTYPE_F32, b32, 20);
    for (int tr = 0; tr < 4; tr++) {
        float ref[15], got[15];
        mxp_gemm_args g = {
            .trans_a = tr & 1, .trans_b = tr >> 1, .M = 3, .N = 5, .K = 4,
            .a_type = MXP_DTYPE_F32, .A = a32, .lda = (tr & 1) ? 3 : 4,
            .b_type = MXP_DTYPE_F32, .B = b32, .ldb = (tr >> 1) ? 4 : 5,
            .C = ref, .ldc = 5, .alpha = 1.0f, .beta = 0.0f,
        };
        mxp_kernels_generic()->gemm(&g);
        g.C = got;
        if (t == MXP_DTYPE_BF16) {
            g.a_type = g.b_type = MXP_DTYPE_BF16;
            g.A = a16;
            g.B = b16;
        }
        peer_call(p, &g);
        for (int i = 0; i < 15; i++)
            if (!(fabsf(got[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])))) return false;
    }
    return true;
}

bool bench_peer_open(bench_peer p, char *why, size_t why_size) {
    if (p >= BENCH_PEER_COUNT) return false;
    if (!peers[p].tried) {
        peers[p].tried = true;
        const char *so = p == BENCH_PEER_ONEDNN ? "libdnnl.so.2" : "libopenblas.so.0";
        if (p == BENCH_PEER_OPENBLAS) setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
        peers[p].lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
        if (!peers[p].lib) {
            snprintf(peers[p].why, sizeof peers[p].why, "%s not installed", so);
        } else if (p == BENCH_PEER_ONEDNN) {
            *(void **)&peers[p].dnnl_sgemm = dlsym(peers[p].lib, "dnnl_sgemm");
            *(void **)&peers[p].dnnl_bf16 = dlsym(peers[p].lib, "dnnl_gemm_bf16bf16f32");
            if (!peers[p].dnnl_sgemm)
                snprintf(peers[p].why, sizeof peers[p].why, "%s lacks dnnl_sgemm", so);
            else if (!peer_check(p, MXP_DTYPE_F32))
                snprintf(peers[p].why, sizeof peers[p].why, "dnnl_sgemm failed the check");
            else
                peers[p].ok = true;
            if (peers[p].ok && peers[p].dnnl_bf16 && !peer_check(p, MXP_DTYPE_BF16))
                peers[p].dnnl_bf16 = NULL;
        } else {
            *(void **)&peers[p].cblas_sgemm = dlsym(peers[p].lib, "cblas_sgemm");
            if (!peers[p].cblas_sgemm)
                snprintf(peers[p].why, sizeof peers[p].why, "%s lacks cblas_sgemm", so);
            else if (!peer_check(p, MXP_DTYPE_F32))
                snprintf(peers[p].why, sizeof peers[p].why, "cblas_sgemm failed the check");
            else
                peers[p].ok = true;
        }
    }
    if (!peers[p].ok && why) snprintf(why, why_size, "%s", peers[p].why);
    return peers[p].ok;
}

typedef struct peer_ctx {
    bench_peer p;
    mxp_gemm_args g;
} peer_ctx;

static void call_peer(void *c) {
    peer_ctx *x = c;
    peer_call(x->p, &x->g);
}

void bench_gemm_side_by_side(const mxp_kernels *k, const bench_peer *with, int nwith,
                             bench_gemm_bufs *b, const bench_gemm_shape *s, mxp_dtype at,
                             mxp_dtype bt, int reps, double min_sample_s, bench_timing *out) {
    table_ctx t = {k, shape_args(b, s, at, bt)};
    peer_ctx pc[BENCH_PEER_COUNT];
    bench_fn f[1 + BENCH_PEER_COUNT] = {{call_table, &t}};
    if (nwith > BENCH_PEER_COUNT) nwith = BENCH_PEER_COUNT;
    /* no peer has an FP16 GEMM: f16 rows give them the FP32 operands */
    const mxp_dtype pa = at == MXP_DTYPE_F16 ? MXP_DTYPE_F32 : at;
    const mxp_dtype pb = bt == MXP_DTYPE_F16 ? MXP_DTYPE_F32 : bt;
    for (int i = 0; i < nwith; i++) {
        pc[i] = (peer_ctx){with[i], shape_args(b, s, pa, pb)};
        f[1 + i] = (bench_fn){call_peer, &pc[i]};
    }
    bench_time_alternating(f, 1 + nwith, reps, 0.05, min_sample_s, out);
}
