/* bench/bench_gemm_cpu.c: GEMM speed (one thread: in thread CPU time), ours
 * against oneDNN (and optionally a baseline libmixprec) in one process.
 *
 * Why CPU time: the development machine is shared (load 2-10 on 2 CPUs), so
 * wall-clock medians measure the other jobs. The time this thread spent on
 * a CPU (CLOCK_THREAD_CPUTIME_ID) is close to what an idle core would take
 * (cache and memory-bandwidth interference remain). Everything runs on the
 * calling thread: our GEMM with 1 thread (mxp_avx512_gemm_ex), oneDNN with
 * OMP_NUM_THREADS=1 and OMP_WAIT_POLICY=passive (set here before loading).
 * For each shape and dtype the implementations are warmed up, then sampled
 * in rounds (ours, baseline, oneDNN; the next round starts one further on,
 * since the first sample of a round read 3-4% slower) `reps` times; each sample
 * is one untimed call (the caches hold the previous implementation's
 * buffers) and then enough calls to last >= 5 ms of CPU time; the figure is
 * the median.
 *
 * oneDNN 2.6 (libdnnl.so.2, dlopen): dnnl_sgemm for f32 and for f16 inputs,
 * and dnnl_gemm_bf16bf16f32 for bf16. oneDNN 2.6 has no FP16 GEMM (its
 * GEMM API is sgemm, bf16bf16f32 and two integer ones, and the library
 * holds no AVX512-FP16 code), so an f16 row is timed two ways: "onednn",
 * dnnl_sgemm on FP32 copies made beforehand (conversion not timed: the
 * bound, what an FP32 GEMM takes on these values), and "dn+cvt", the
 * conversion of both FP16 operands to FP32 on the calling thread (F16C
 * `vcvtph2ps`, 16 values per load and store: the streaming floor) followed
 * by dnnl_sgemm: what a caller holding FP16 data pays to use oneDNN here.
 * With --threads 2 that costs more than the conversion: oneDNN's second
 * thread reads operands the first core just wrote (converting on both
 * threads with mixprec's converter read the same; docs/results/kernels-passes.md "The
 * sixth pass").
 *
 * --base LIB loads another build of libmixprec (RTLD_DEEPBIND, so its GEMM
 * calls its own packers) and calls its mxp_avx512_gemm_ex: "before" and
 * "after" in the same process. The library hides internal functions, so
 * such a build is configured with -DMIXPREC_BENCH_EXPORTS=ON (library
 * target only: `cmake --build B --target mixprec`).
 * --ours LIB loads "ours" the same way instead of calling the linked
 * library: identical code measured once linked and once loaded read up to
 * 3-8% apart on some shapes, so before/after comparisons load both. Before
 * timing, ours and the baseline run once on the same inputs and C, and
 * their results are compared bit for bit ("bits" column: same / DIFF).
 *
 * --threads N (N > 1) measures N threads instead: wall-clock time
 * (CLOCK_MONOTONIC; meaningful only on an otherwise idle machine), ours and
 * the baseline with threads = N, oneDNN with OMP_NUM_THREADS=N and the
 * OpenMP default wait policy (as `mixprec bench kernels` runs it), and
 * MIXPREC_NUM_THREADS=N. The samples alternate as on one thread, each
 * after 30 ms of untimed calls: OpenMP's workers keep spinning for
 * milliseconds after oneDNN's last call and would take the CPUs from our
 * next sample, and the VM's CPUs need 5-20 ms of work after an idle spell
 * to run at full speed (32x256x256 NN f32 read 88 GF/s after one untimed
 * call, 107 after 5 ms of calls, 182 after 20 ms).
 *
 * --dtype f16acc (also in "all", after f16) times the FP16 fast-accumulate
 * GEMM (the table's gemm_f16acc slot with k = --kper, default 16: on
 * AVX512-FP16 vfmadd231ph, else the emulation) on the f16 operands, against
 * the same peers as the f16 rows; the FP32-accumulate f16 row beside it is
 * the GEMM mixed_fp16 runs by default. No base/ours library is timed on
 * these rows.
 *
 * --beta 0|1 runs every shape with that beta instead of the shape list's
 * (dW is issued with beta = 0 by the default training step, grad_accum_steps
 * 1, and with beta = 1 when gradients accumulate).
 *
 * usage: bench_gemm_cpu [--reps N] [--warm N] [--shapes core|training|all]
 *                       [--dtype f32|bf16|f16|all] [--only TEXT] [--base LIB]
 *                       [--ours LIB] [--threads N] [--beta 0|1] [--kper K]
 * Shapes: tools/mixprec/bench_shapes.h (the list `mixprec bench kernels
 * --shapes` uses). Not a test: it prints, and exits 1 only on bad usage or
 * when the baseline's bits differ.
 */
#define _GNU_SOURCE
#include "bench_shapes.h"
#include "kernels/kernels.h"
#include "kernels/x86_avx512/gemm_internal.h"

#include <mixprec/mixprec.h>

#include <dlfcn.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*gemm_ex_fn)(const mxp_gemm_args *, const mxp_avx512_gemm_opts *);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *,
                             int64_t, const float *, int64_t, float, float *, int64_t);
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,
                            int64_t, const uint16_t *, int64_t, float, float *, int64_t);

enum { IMPL_OURS, IMPL_BASE, IMPL_DNNL, IMPL_DNNL_CVT, IMPL_COUNT };

static struct {
    gemm_ex_fn ours; /* --ours LIB, else this build's (linked) */
    gemm_ex_fn base;
    dnnl_sgemm_fn sgemm;
    dnnl_bf16_fn bf16;
} lib;

typedef struct call {
    int impl;
    int kper;         /* > 0: IMPL_OURS is the gemm_f16acc slot with this k */
    mxp_gemm_args g;  /* our operands (dtype of the row) */
    const float *a32; /* FP32 copies for dnnl_sgemm (f16 rows) */
    const float *b32;
    float *a_cvt; /* IMPL_DNNL_CVT: A and B converted here on each call */
    float *b_cvt;
} call;

/* --threads N: untimed calls before each sample (see the top comment). */
#define SWITCH_WARM_S 0.03
static int nthreads = 1; /* --threads: 1 = thread CPU time, else wall clock */

/* The clock of a sample: this thread's CPU time with one thread, else the
 * wall clock (the other threads' work is not in this thread's CPU time). */
static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(nthreads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* dst[i] = FP16 src[i] widened (exact), 16 at a time (n: any). */
__attribute__((target("avx512f"))) static void widen_f16(float *dst, const void *src,
                                                          size_t n) {
    const uint16_t *h = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
    for (; i < n; i++) dst[i] = mxp_load_f32(MXP_DTYPE_F16, h, i);
}

static void run_call(const call *c) {
    const mxp_avx512_gemm_opts one = {MXP_GEMM_PATH_AUTO, nthreads, false};
    const mxp_gemm_args *g = &c->g;
    char ta = g->trans_a ? 'T' : 'N', tb = g->trans_b ? 'T' : 'N';
    switch (c->impl) {
    case IMPL_OURS:
        if (c->kper > 0)
            mxp_kernels_get()->gemm_f16acc(g, c->kper);
        else
            lib.ours(g, &one);
        break;
    case IMPL_BASE: lib.base(g, &one); break;
    case IMPL_DNNL_CVT:
        widen_f16(c->a_cvt, g->A, (size_t)g->M * (size_t)g->K);
        widen_f16(c->b_cvt, g->B, (size_t)g->K * (size_t)g->N);
        lib.sgemm(ta, tb, g->M, g->N, g->K, g->alpha, c->a_cvt, g->lda, c->b_cvt, g->ldb,
                  g->beta, g->C, g->ldc);
        break;
    default:
        if (g->a_type == MXP_DTYPE_BF16)
            lib.bf16(ta, tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta,
                     g->C, g->ldc);
        else
            lib.sgemm(ta, tb, g->M, g->N, g->K, g->alpha, c->a32, g->lda,
                      c->b32, g->ldb, g->beta, g->C, g->ldc);
        break;
    }
}

/* CPU seconds of `calls` calls, after one untimed call (the previous
 * sample belonged to another implementation, whose buffers now fill the
 * caches). */
static double sample(const call *c, int calls) {
    run_call(c);
    double t0 = thread_cpu_s();
    for (int i = 0; i < calls; i++) run_call(c);
    return thread_cpu_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *random_buf(mxp_dtype t, size_t n, unsigned seed, float *f32) {
    mxp_rng rng;
    mxp_rng_init(&rng, seed);
    for (size_t i = 0; i < n; i++) f32[i] = 2.0f * mxp_rng_uniform(&rng) - 1.0f;
    void *p = mxp_calloc(n, mxp_dtype_info(t)->size);
    if (p) mxp_convert(t, p, MXP_DTYPE_F32, f32, n);
    if (p) mxp_convert(MXP_DTYPE_F32, f32, t, p, n); /* f32 = the stored values */
    return p;
}

static void usage(void) {
    fputs("usage: bench_gemm_cpu [--reps N] [--warm N] [--shapes core|training|all]\n"
          "                      [--dtype f32|bf16|f16|all] [--only TEXT] [--base LIB]\n"
          "                      [--ours LIB] [--threads N] [--beta 0|1] [--kper K]\n"
          "       --dtype also takes f16acc (the FP16 fast-accumulate GEMM)\n",
          stderr);
}

int main(int argc, char **argv) {
    int reps = 5, warm = 2, kper = 16;
    bench_shape_set set = BENCH_SHAPES_TRAINING;
    const char *only = NULL, *base_path = NULL, *ours_path = NULL, *dtype = "all";
    int beta_override = -1; /* --beta: 0 or 1; -1 = the shape list's */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 1;
        }
        i++;
        if (strcmp(a, "--reps") == 0) reps = atoi(v);
        else if (strcmp(a, "--warm") == 0) warm = atoi(v);
        else if (strcmp(a, "--only") == 0) only = v;
        else if (strcmp(a, "--base") == 0) base_path = v;
        else if (strcmp(a, "--ours") == 0) ours_path = v;
        else if (strcmp(a, "--dtype") == 0) dtype = v;
        else if (strcmp(a, "--threads") == 0) nthreads = atoi(v);
        else if (strcmp(a, "--kper") == 0) kper = atoi(v);
        else if (strcmp(a, "--beta") == 0) {
            if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
                usage();
                return 1;
            }
            beta_override = atoi(v);
        }
        else if (strcmp(a, "--shapes") == 0) {
            int k = 0;
            while (k < BENCH_SHAPES_COUNT && strcmp(v, bench_shape_set_names[k]) != 0) k++;
            if (k == BENCH_SHAPES_COUNT) {
                usage();
                return 1;
            }
            set = (bench_shape_set)k;
        } else {
            usage();
            return 1;
        }
    }
    if (reps < 1 || reps > 101 || warm < 0 || nthreads < 1 || nthreads > 64 || kper < 1 ||
        kper > MXP_F16ACC_K_MAX) {
        usage();
        return 1;
    }
    char nt[16];
    snprintf(nt, sizeof nt, "%d", nthreads);
    setenv("OMP_NUM_THREADS", nt, 1);
    if (nthreads == 1) setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("MIXPREC_NUM_THREADS", nt, 1);
    if (strcmp(mxp_kernels_get()->isa, "avx512") != 0) {
        printf("bench_gemm_cpu: the avx512 table is not active on this CPU; nothing to do\n");
        return 0;
    }
    void *dnl = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (dnl) {
        *(void **)&lib.sgemm = dlsym(dnl, "dnnl_sgemm");
        *(void **)&lib.bf16 = dlsym(dnl, "dnnl_gemm_bf16bf16f32");
    }
    if (!lib.sgemm || !lib.bf16) printf("oneDNN: not available (%s)\n", dlerror());
    lib.ours = mxp_avx512_gemm_ex;
    const char *paths[2] = {base_path, ours_path};
    gemm_ex_fn *fns[2] = {&lib.base, &lib.ours};
    for (int i = 0; i < 2; i++) {
        if (!paths[i]) continue;
        void *l = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        *fns[i] = l ? (gemm_ex_fn)(uintptr_t)dlsym(l, "mxp_avx512_gemm_ex") : NULL;
        if (!*fns[i]) {
            fprintf(stderr, "bench_gemm_cpu: cannot load %s: %s\n", paths[i], dlerror());
            return 1;
        }
    }

    bench_gemm_shape shapes[BENCH_SHAPES_MAX];
    int ns = bench_shapes_fill(set, false, shapes);
    size_t mk = 1, kn = 1, mn = 1;
    for (int i = 0; i < ns; i++) {
        size_t M = (size_t)shapes[i].M, N = (size_t)shapes[i].N, K = (size_t)shapes[i].K;
        if (M * K > mk) mk = M * K;
        if (K * N > kn) kn = K * N;
        if (M * N > mn) mn = M * N;
    }
    static const mxp_dtype types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    float *a32[3], *b32[3];
    void *a[3], *b[3];
    float *c = mxp_calloc(mn, sizeof(float)), *c_ref = mxp_calloc(mn, sizeof(float));
    float *c_init = mxp_calloc(mn, sizeof(float));
    float *a_cvt = mxp_calloc(mk, sizeof(float)), *b_cvt = mxp_calloc(kn, sizeof(float));
    for (int t = 0; t < 3; t++) {
        a32[t] = mxp_calloc(mk, sizeof(float));
        b32[t] = mxp_calloc(kn, sizeof(float));
        a[t] = a32[t] ? random_buf(types[t], mk, 1 + (unsigned)t, a32[t]) : NULL;
        b[t] = b32[t] ? random_buf(types[t], kn, 11 + (unsigned)t, b32[t]) : NULL;
        if (!a[t] || !b[t]) {
            fprintf(stderr, "bench_gemm_cpu: out of memory\n");
            return 1;
        }
    }
    if (!c || !c_ref || !c_init || !a_cvt || !b_cvt) return 1;
    for (size_t i = 0; i < mn; i++) c_init[i] = (float)(i % 7) * 0.25f - 0.75f;

    if (nthreads == 1)
        printf("one thread, GFLOP/s of thread CPU time");
    else
        printf("%d threads, GFLOP/s of wall-clock time", nthreads);
    printf(", median of %d samples (>= 5 ms each, after %s) after %d warm-up "
           "calls, alternating; ratio = / oneDNN", reps,
           nthreads == 1 ? "an untimed call" : "30 ms of untimed calls", warm);
    if (beta_override >= 0) printf("; beta = %d on every shape", beta_override);
    printf("\n");
    printf("%-16s %-15s %-2s %-6s %8s", "shape", "MxNxK", "tr", "dtype", "ours");
    if (lib.base) printf(" %8s", "base");
    printf(" %8s %7s", "onednn", "ours/dn");
    if (lib.base) printf(" %7s %5s", "base/dn", "bits");
    printf(" %8s %7s\n", "dn+cvt", "ours/dc");
    int diffs = 0;
    for (int i = 0; i < ns; i++) {
        const bench_gemm_shape *s = &shapes[i];
        if (only && !strstr(s->label, only)) continue;
        double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
        for (int row = 0; row < 4; row++) {
            int t = row < 3 ? row : 2; /* row 3: f16acc on the f16 operands */
            const char *name = row < 3 ? mxp_dtype_name(types[t]) : "f16acc";
            if (strcmp(dtype, "all") != 0 && strcmp(dtype, name) != 0) continue;
            mxp_gemm_args g = {
                .trans_a = s->trans_a, .trans_b = s->trans_b, .M = s->M, .N = s->N, .K = s->K,
                .a_type = types[t], .A = a[t], .lda = s->trans_a ? s->M : s->K,
                .b_type = types[t], .B = b[t], .ldb = s->trans_b ? s->K : s->N,
                .C = c, .ldc = s->N, .alpha = 1.0f,
                .beta = beta_override >= 0 ? (float)beta_override : s->beta,
            };
            call calls[IMPL_COUNT];
            for (int k = 0; k < IMPL_COUNT; k++)
                calls[k] = (call){k, row == 3 ? kper : 0, g, a32[t], b32[t], a_cvt, b_cvt};
            bool have[IMPL_COUNT] = {true, lib.base != NULL && row < 3, lib.sgemm && lib.bf16,
                                     lib.sgemm && types[t] == MXP_DTYPE_F16};
            const char *bits = "";
            if (have[IMPL_BASE]) {
                size_t n = (size_t)s->M * (size_t)s->N;
                memcpy(c, c_init, n * sizeof(float));
                run_call(&calls[IMPL_BASE]);
                memcpy(c_ref, c, n * sizeof(float));
                memcpy(c, c_init, n * sizeof(float));
                run_call(&calls[IMPL_OURS]);
                bool same = memcmp(c, c_ref, n * sizeof(float)) == 0;
                bits = same ? "same" : "DIFF";
                diffs += !same;
            }
            int per[IMPL_COUNT];
            for (int k = 0; k < IMPL_COUNT; k++) {
                if (!have[k]) continue;
                for (int w = 0; w < warm; w++) run_call(&calls[k]);
                double one = sample(&calls[k], 1);
                per[k] = one > 0 ? (int)(0.005 / one) + 1 : 1;
            }
            double med[IMPL_COUNT] = {0}, x[IMPL_COUNT][101];
            for (int r = 0; r < reps; r++) /* the first of a round reads slower: rotate */
                for (int q = 0; q < IMPL_COUNT; q++) {
                    int k = (q + r) % IMPL_COUNT;
                    if (!have[k]) continue;
                    if (nthreads > 1) { /* see --threads above */
                        double w0 = thread_cpu_s();
                        while (thread_cpu_s() - w0 < SWITCH_WARM_S) run_call(&calls[k]);
                    }
                    x[k][r] = sample(&calls[k], per[k]) / per[k];
                }
            for (int k = 0; k < IMPL_COUNT; k++) {
                if (!have[k]) continue;
                qsort(x[k], (size_t)reps, sizeof(double), cmp_double);
                med[k] = flops / x[k][reps / 2] / 1e9;
            }
            char mnk[48];
            snprintf(mnk, sizeof mnk, "%lldx%lldx%lld", (long long)s->M, (long long)s->N,
                     (long long)s->K);
            static const char *const tr[] = {"NN", "TN", "NT", "TT"};
            printf("%-16s %-15s %-2s %-6s %8.1f", s->label, mnk,
                   tr[(s->trans_a ? 1 : 0) + (s->trans_b ? 2 : 0)], name, med[IMPL_OURS]);
            if (lib.base) printf(" %8.1f", med[IMPL_BASE]);
            double dn = med[IMPL_DNNL];
            printf(" %8.1f %7.2f", dn, dn > 0 ? med[IMPL_OURS] / dn : 0.0);
            if (lib.base) printf(" %7.2f %5s", dn > 0 ? med[IMPL_BASE] / dn : 0.0, bits);
            double dc = med[IMPL_DNNL_CVT];
            if (have[IMPL_DNNL_CVT]) printf(" %8.1f %7.2f", dc, med[IMPL_OURS] / dc);
            printf("\n");
            fflush(stdout);
        }
    }
    for (int t = 0; t < 3; t++) {
        mxp_free(a[t]);
        mxp_free(b[t]);
        mxp_free(a32[t]);
        mxp_free(b32[t]);
    }
    mxp_free(c);
    mxp_free(c_ref);
    mxp_free(c_init);
    mxp_free(a_cvt);
    mxp_free(b_cvt);
    if (diffs) printf("%d rows differ from the baseline bit for bit\n", diffs);
    return diffs ? 1 : 0;
}
