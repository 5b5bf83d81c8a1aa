/* tools/mixprec/bench.h: `mixprec bench` and its measuring helpers.
 *
 *   cmd_bench.c     the verb: options, printing, CSV (the only file here
 *                   that prints);
 *   bench_time.c    median-of-samples timing after a warm-up, of one
 *                   function or of several alternating;
 *   bench_peak.c    machine peak: FP32 FMA, vdpbf16ps and AVX512-FP16
 *                   register-only loops, on 1 and on all threads;
 *   bench_shapes.h  the GEMM shape lists (core, training), shared with
 *                   bench/bench_gemm_cpu.c;
 *   bench_gemm.c    GEMM GFLOP/s through a kernel table, per dtype pair and
 *                   shape, and the optional peers (oneDNN, OpenBLAS) loaded
 *                   with dlopen at run time, never linked;
 *   bench_loops.c   bandwidth-bound kernels through a kernel table, GB/s.
 * Timings are wall-clock medians; the machine may be shared, so every row
 * carries its sample count and the spread (min) next to the median.
 */
#ifndef MIXPREC_TOOLS_BENCH_H
#define MIXPREC_TOOLS_BENCH_H

#include "bench_shapes.h"
#include "kernels/kernels.h"

#include <mixprec/mixprec.h>

int cmd_bench(int argc, char **argv);

/* ---- timing (bench_time.c) ---------------------------------------------- */

typedef struct bench_timing {
    double median_s; /* per call */
    double min_s;    /* per call, fastest sample */
    int samples;     /* timed samples (each one or more calls) */
    int calls;       /* calls per sample */
} bench_timing;

/* Warm up fn(ctx) (at least 2 calls and warm_s seconds), then time `reps`
 * samples of enough calls to last min_sample_s each. */
bench_timing bench_time(void (*fn)(void *), void *ctx, int reps, double warm_s,
                        double min_sample_s);

typedef struct bench_fn {
    void (*fn)(void *);
    void *ctx;
} bench_fn;
enum { BENCH_ALT_MAX = 4 };

/* Time n (<= BENCH_ALT_MAX) functions side by side: each is warmed up as
 * bench_time does, then the samples alternate (rounds of one sample each,
 * the first of a round rotating), so that a slow spell of a shared machine
 * falls on all of them alike. Each sample follows 30 ms of untimed calls of
 * its own function: the previous function's pool may still be spinning
 * (OpenMP's workers, oneDNN's, spin for milliseconds after a call), and its
 * buffers fill the caches. out[i] is f[i]'s timing. */
void bench_time_alternating(const bench_fn *f, int n, int reps, double warm_s,
                            double min_sample_s, bench_timing *out);

/* ---- peak (bench_peak.c) ------------------------------------------------ */

typedef enum bench_peak_kind {
    BENCH_PEAK_FP32_FMA,    /* vfmadd231ps zmm: 32 flops */
    BENCH_PEAK_BF16_DP,     /* vdpbf16ps zmm: 64 flops */
    BENCH_PEAK_FP16_FMA,    /* vfmadd231ph zmm: 64 flops (AVX512-FP16) */
    BENCH_PEAK_KIND_COUNT
} bench_peak_kind;

const char *bench_peak_name(bench_peak_kind k);
/* True when this CPU can run the loop of kind k (cpuid). */
bool bench_peak_supported(bench_peak_kind k);
/* GFLOP/s of the loop of kind k on `threads` threads at once (best of
 * `reps` runs of about run_s seconds each); 0 when unsupported. */
double bench_peak_measure(bench_peak_kind k, int threads, int reps, double run_s);

/* ---- GEMM (bench_gemm.c) ------------------------------------------------ */

/* Operand buffers large enough for every shape (random values in [-1, 1]
 * stored in each dtype). */
typedef struct bench_gemm_bufs bench_gemm_bufs;

bench_gemm_bufs *bench_gemm_bufs_create(int64_t max_mk, int64_t max_kn, int64_t max_mn);
void bench_gemm_bufs_destroy(bench_gemm_bufs *b);

/* Time k->gemm on one shape and dtype pair. */
bench_timing bench_gemm_table(const mxp_kernels *k, bench_gemm_bufs *b,
                              const bench_gemm_shape *s, mxp_dtype at, mxp_dtype bt,
                              int reps, double min_sample_s);
/* The peak kind k's GEMM uses for this dtype pair: BF16 dot products where
 * the table computes in them (k->gemm_compute: BF16/FP8 pairs on the
 * AVX-512 table of a CPU whose vdpbf16ps is fast), else FP32 FMA. */
bench_peak_kind bench_gemm_peak_kind(const mxp_kernels *k, mxp_dtype at, mxp_dtype bt);

typedef enum bench_peer {
    BENCH_PEER_ONEDNN, /* libdnnl.so.2: dnnl_sgemm, dnnl_gemm_bf16bf16f32 */
    BENCH_PEER_OPENBLAS, /* libopenblas.so.0: cblas_sgemm */
    BENCH_PEER_COUNT
} bench_peer;

const char *bench_peer_name(bench_peer p);
/* Load peer p (once); false with a reason in why[] when it is not there or
 * fails a 3x5x4 correctness check against the generic GEMM. */
bool bench_peer_open(bench_peer p, char *why, size_t why_size);
/* True when peer p has a GEMM for this dtype pair (f32 x f32; oneDNN also
 * bf16 x bf16), or runs it as FP32 (f16 x f16: neither peer has an FP16
 * GEMM, so its FP32 GEMM on FP32 operands of the shape is the reference
 * an FP16 row is compared with; the conversion is not timed). */
bool bench_peer_supports(bench_peer p, mxp_dtype at, mxp_dtype bt);
/* k->gemm and the nwith peers in with[] on one shape and dtype pair, alternating
 * (bench_time_alternating): out[0] is k's timing, out[1 + i] with[i]'s. */
void bench_gemm_side_by_side(const mxp_kernels *k, const bench_peer *with, int nwith,
                             bench_gemm_bufs *b, const bench_gemm_shape *s, mxp_dtype at,
                             mxp_dtype bt, int reps, double min_sample_s, bench_timing *out);

/* ---- bandwidth-bound kernels (bench_loops.c) ---------------------------- */

typedef struct bench_loop_result {
    const char *name;     /* "convert f32->bf16", "adamw", ... */
    size_t n;             /* elements per call */
    double bytes;         /* bytes read + written per call */
    bench_timing t;
} bench_loop_result;

enum { BENCH_LOOPS_MAX = 32 };

/* Time every bandwidth-bound slot of k on n-element buffers; returns the
 * number of results written to out (at most BENCH_LOOPS_MAX). */
int bench_loops_run(const mxp_kernels *k, size_t n, int reps, double min_sample_s,
                    bench_loop_result *out);
/* GB/s of a plain memcpy of n floats (the bandwidth reference). */
bench_timing bench_copy(size_t n, int reps, double min_sample_s, double *bytes);

#endif /* MIXPREC_TOOLS_BENCH_H */
