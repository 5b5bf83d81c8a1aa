/* bench/bench_gemm_split.c: how evenly the AVX-512 GEMM's cut between 2
 * threads shares the work, measured one part at a time.
 *
 * Two threads cannot be timed on the shared development machine, so each
 * thread's part is run alone as its own GEMM on the calling thread (the
 * same sub-problem: its rows or columns of C, the whole of the other
 * dimension and of K, the same path) and timed in thread CPU time. With
 * the parts run side by side on two idle cores, the call would take about
 * max(part) plus fork/join; whole/2 is the ideal. Not modelled: two
 * threads sharing rows of C (the N cut's slowdown, docs/results/kernels-passes.md "Two
 * threads: the split direction") and memory bandwidth.
 *
 * "old" is the cut of main at e64e882 (re-computed here: rows in whole
 * 14-row micro-tiles, columns of the small-M path in whole 14-column
 * groups, the previous prefer_m); "new" is this build's
 * (mxp_avx512_gemm_split). Rounds alternate old parts, new parts and the
 * whole call; each sample is one untimed call and then >= 3 ms of calls;
 * medians of --reps samples.
 *
 * usage: bench_gemm_split [--reps N] [--dtype f32|bf16|f16|all] [--only TEXT]
 * Shapes: the training set of tools/mixprec/bench_shapes.h.
 */
#define _GNU_SOURCE
#include "bench_ab.h"
#include "bench_shapes.h"
#include "kernels/x86_avx512/gemm_internal.h"

#include <mixprec/mixprec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_PARTS = 2, MR = MXP_GEMM_MR, NR = MXP_GEMM_NR };

typedef struct cut {
    bool split_n, small;
    int parts;
    size_t lo[MXP_GEMM_MAX_PARTS], hi[MXP_GEMM_MAX_PARTS];
} cut;

static bool dp_type(mxp_dtype t) {
    return t == MXP_DTYPE_BF16 || t == MXP_DTYPE_F8_E4M3 || t == MXP_DTYPE_F8_E5M2;
}

/* main's cut at e64e882 for 2 threads (gemm.c then: prefer_m, whole tiles). */
static cut old_cut(const mxp_gemm_args *g) {
    cut c = {0};
    size_t M = (size_t)g->M, N = (size_t)g->N, K = (size_t)g->K;
    bool dp = dp_type(g->a_type) && dp_type(g->b_type);
    int threads = 2.0 * (double)M * (double)N * (double)K < 2.0 * 32 * 256 * 256 ? 1 : 2;
    c.small = !dp && g->b_type == MXP_DTYPE_F32 && M <= MXP_GEMM_SMALL_M;
    size_t tiles_m = (M + MR - 1) / MR, tiles_n = (N + NR - 1) / NR;
    bool n_ok = tiles_n >= (size_t)threads, m_ok = tiles_m >= (size_t)threads;
    bool pm = M > N || (K <= 128 && N <= 4 * M) || (dp && N <= 2 * M);
    c.split_n = pm ? !m_ok && (n_ok || tiles_n > tiles_m) : n_ok || (!m_ok && tiles_n >= tiles_m);
    if (c.small) c.split_n = true;
    if (c.small) tiles_n = (N + MR - 1) / MR;
    size_t tiles = c.split_n ? tiles_n : tiles_m;
    c.parts = (size_t)threads < tiles ? threads : (int)tiles;
    size_t ext = c.split_n ? N : M, tile = c.split_n && !c.small ? NR : MR;
    size_t nt = (ext + tile - 1) / tile;
    for (int q = 0; q < c.parts; q++) {
        size_t t0 = nt * (size_t)q / (size_t)c.parts, t1 = nt * (size_t)(q + 1) / (size_t)c.parts;
        c.lo[q] = t0 * tile < ext ? t0 * tile : ext;
        c.hi[q] = t1 * tile < ext ? t1 * tile : ext;
    }
    return c;
}

static cut new_cut(const mxp_gemm_args *g) {
    cut c = {0};
    mxp_avx512_gemm_opts o = {MXP_GEMM_PATH_AUTO, 2, false};
    c.parts = mxp_avx512_gemm_split(g, &o, &c.split_n, c.lo, c.hi);
    c.small = c.split_n && !(dp_type(g->a_type) && dp_type(g->b_type)) &&
              g->b_type == MXP_DTYPE_F32 && g->M <= MXP_GEMM_SMALL_M;
    return c;
}

/* The sub-GEMM of part q of c, and its options (one thread; an M part
 * never takes the small-M path, as inside the whole call). */
static mxp_gemm_args part_args(const mxp_gemm_args *g, const cut *c, int q,
                               mxp_avx512_gemm_opts *o) {
    mxp_gemm_args s = *g;
    size_t lo = c->lo[q], n = c->hi[q] - c->lo[q];
    *o = (mxp_avx512_gemm_opts){MXP_GEMM_PATH_AUTO, 1, !c->split_n};
    if (c->split_n) {
        size_t es = mxp_dtype_info(g->b_type)->size;
        s.N = (int64_t)n;
        s.B = (const char *)g->B + (g->trans_b ? lo * (size_t)g->ldb : lo) * es;
        s.C = g->C + lo;
    } else {
        size_t es = mxp_dtype_info(g->a_type)->size;
        s.M = (int64_t)n;
        s.A = (const char *)g->A + (g->trans_a ? lo : lo * (size_t)g->lda) * es;
        s.C = g->C + lo * (size_t)g->ldc;
    }
    return s;
}

/* CPU seconds per call of g under o: one untimed call, then >= 3 ms. */
static double per_call(const mxp_gemm_args *g, const mxp_avx512_gemm_opts *o) {
    mxp_avx512_gemm_ex(g, o);
    int calls = 0;
    double t0 = ab_thread_ms() * 1e-3, t;
    do {
        mxp_avx512_gemm_ex(g, o);
        calls++;
        t = ab_thread_ms() * 1e-3 - t0;
    } while (t < 3e-3);
    return t / calls;
}

static void *random_buf(mxp_dtype t, size_t n, unsigned seed) {
    mxp_rng rng;
    mxp_rng_init(&rng, seed);
    float *f = malloc(n * sizeof(float));
    void *p = mxp_calloc(n, mxp_dtype_info(t)->size);
    if (!f || !p) exit(1);
    for (size_t i = 0; i < n; i++) f[i] = 2.0f * mxp_rng_uniform(&rng) - 1.0f;
    mxp_convert(t, p, MXP_DTYPE_F32, f, n);
    free(f);
    return p;
}

static void describe(const cut *c, char *out, size_t n) {
    if (c->parts < 2) {
        snprintf(out, n, "1 thread");
        return;
    }
    snprintf(out, n, "%c %zu+%zu", c->split_n ? 'N' : 'M', c->hi[0] - c->lo[0],
             c->hi[1] - c->lo[1]);
}

int main(int argc, char **argv) {
    int reps = 9;
    const char *dtype = "all", *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dtype") == 0) dtype = argv[i + 1];
        else if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
        else {
            fputs("usage: bench_gemm_split [--reps N] [--dtype f32|bf16|f16|all] "
                  "[--only TEXT]\n", stderr);
            return 1;
        }
    }
    if (reps < 1 || reps > 101) reps = 9;
    setenv("MIXPREC_NUM_THREADS", "2", 0); /* the split of 2 threads */
    bench_gemm_shape shapes[BENCH_SHAPES_MAX];
    int ns = bench_shapes_fill(BENCH_SHAPES_TRAINING, false, shapes);
    static const mxp_dtype types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    printf("| shape | MxNxK op | dtype | old cut | new cut | whole/2 us | old max part us | "
           "new max part us | old/new |\n| --- | --- | --- | --- | --- | --- | --- | --- | "
           "--- |\n");
    double log_sum = 0.0;
    int changed = 0;
    for (int si = 0; si < ns; si++) {
        const bench_gemm_shape *sh = &shapes[si];
        if (only && !strstr(sh->label, only)) continue;
        for (int ti = 0; ti < 3; ti++) {
            mxp_dtype t = types[ti];
            if (strcmp(dtype, "all") != 0 && strcmp(dtype, mxp_dtype_name(t)) != 0) continue;
            size_t M = (size_t)sh->M, N = (size_t)sh->N, K = (size_t)sh->K;
            void *A = random_buf(t, M * K, 1u + (unsigned)si);
            void *B = random_buf(t, K * N, 1000u + (unsigned)si);
            float *C = mxp_calloc(M * N, sizeof(float));
            if (!C) return 1;
            mxp_gemm_args g = {
                .trans_a = sh->trans_a, .trans_b = sh->trans_b, .M = sh->M, .N = sh->N,
                .K = sh->K, .a_type = t, .A = A, .lda = sh->trans_a ? sh->M : sh->K,
                .b_type = t, .B = B, .ldb = sh->trans_b ? sh->K : sh->N, .C = C,
                .ldc = sh->N, .alpha = 1.0f, .beta = sh->beta,
            };
            cut cuts[2] = {old_cut(&g), new_cut(&g)};
            double samples[2][MAX_PARTS][101], whole[101];
            const mxp_avx512_gemm_opts one = {MXP_GEMM_PATH_AUTO, 1, false};
            for (int r = 0; r < reps; r++) {
                for (int w = 0; w < 2; w++) {
                    int v = (w + r) % 2; /* alternate which cut goes first */
                    for (int q = 0; q < cuts[v].parts && q < MAX_PARTS; q++) {
                        mxp_avx512_gemm_opts o;
                        mxp_gemm_args s = part_args(&g, &cuts[v], q, &o);
                        samples[v][q][r] = s.M > 0 && s.N > 0 ? per_call(&s, &o) : 0.0;
                    }
                }
                whole[r] = per_call(&g, &one);
            }
            double most[2] = {0, 0};
            for (int v = 0; v < 2; v++)
                for (int q = 0; q < cuts[v].parts && q < MAX_PARTS; q++) {
                    double m = ab_median(samples[v][q], reps);
                    if (m > most[v]) most[v] = m;
                }
            double w2 = 0.5 * ab_median(whole, reps);
            char oc[48], nc[48], op[8];
            describe(&cuts[0], oc, sizeof oc);
            describe(&cuts[1], nc, sizeof nc);
            snprintf(op, sizeof op, "%c%c", sh->trans_a ? 'T' : 'N', sh->trans_b ? 'T' : 'N');
            bool same = cuts[0].parts == cuts[1].parts && cuts[0].split_n == cuts[1].split_n &&
                        memcmp(cuts[0].lo, cuts[1].lo, sizeof(size_t) * 2) == 0 &&
                        memcmp(cuts[0].hi, cuts[1].hi, sizeof(size_t) * 2) == 0;
            printf("| %s | %zux%zux%zu %s | %s | %s | %s | %.1f | %.1f | %.1f | %.3f%s |\n",
                   sh->label, M, N, K, op, mxp_dtype_name(t), oc, nc, 1e6 * w2, 1e6 * most[0],
                   1e6 * most[1], most[0] / most[1], same ? " (same cut)" : "");
            fflush(stdout);
            if (!same && cuts[1].parts > 1) {
                log_sum += log(most[0] / most[1]);
                changed++;
            }
            mxp_free(A);
            mxp_free(B);
            mxp_free(C);
        }
    }
    if (changed)
        printf("\nrows whose cut changed: %d; geometric mean of old max part / new max part: "
               "%.3f\n", changed, exp(log_sum / changed));
    return 0;
}
