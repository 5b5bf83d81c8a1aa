/* tools/mixprec/cmd_bench.c: `mixprec bench kernels`.
 *
 * Measures, in this order: the machine's peak (FP32 FMA, vdpbf16ps and,
 * where the CPU has it, AVX512-FP16 register loops on 1 and on all threads);
 * GEMM GFLOP/s per dtype pair and shape for the active kernel table, the
 * generic table and the optional peers (oneDNN, OpenBLAS), each as a % of
 * the peak of the instruction it relies on; the bandwidth-bound kernels in
 * GB/s for the active and the generic table, next to memcpy's bandwidth.
 * Every figure is the median of --reps timed samples after a warm-up; a
 * GEMM's samples alternate with the peers' (bench_time_alternating), so a
 * slow spell of a shared machine falls on both sides of a ratio.
 * Results print as they come and, with --csv, go to a CSV file (one row per
 * measurement). The measuring code lives in bench_*.c; this file prints.
 */
#include "bench.h"
#include "bench_train.h"
#include "cli.h"

#include "kernels/threads.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(FILE *f) {
    fputs("usage: mixprec bench kernels [--csv FILE] [--json] [--reps N] [--quick]\n"
          "                             [--shapes core|training|all] [--no-generic] [--no-peers]\n"
          "       mixprec bench train --help   (every precision mode on the workloads)\n"
          "\n"
          "Measure the kernels of the active table (MIXPREC_FORCE_ISA=generic forces\n"
          "the reference) against the machine's peak, the generic table and, where\n"
          "installed, oneDNN (libdnnl.so.2) and OpenBLAS (libopenblas.so.0).\n"
          "Figures are medians of N timed samples after a warm-up (a GEMM's samples\n"
          "alternate with the peers'); run on an idle machine (threads:\n"
          "MIXPREC_NUM_THREADS, default all CPUs).\n"
          "\n"
          "  --csv FILE    also write every measurement to FILE (CSV)\n"
          "  --json        every measurement as one JSON object on stdout (schema\n"
          "                mixprec.bench_kernels/1, docs/json.md; the tables go to stderr)\n"
          "  --reps N      timed samples per measurement, 1..1000 (default 7; quick 3)\n"
          "  --quick       fewer shapes and smaller buffers (about 20 s)\n"
          "  --shapes SET  GEMM shapes: core (default: square, rectangular and the\n"
          "                batch-32 world-model layers), training (every GEMM of a\n"
          "                training step of the benchmark MLPs: hidden 256/512/2048 at\n"
          "                batch 32..512, forward NT, dX NN, dW TN, in f32, bf16 and\n"
          "                f16; a few minutes) or all\n"
          "  --no-generic  skip the generic-table rows (its large GEMMs are slow)\n"
          "  --no-peers    do not load oneDNN/OpenBLAS\n",
          f);
}

typedef struct bench_opts {
    const char *csv_path;
    int reps;
    bool quick, generic, peers, json;
    bench_shape_set shapes;
} bench_opts;

typedef struct bench_out {
    FILE *csv;
    json_t *rows; /* --json: one object per measurement (the CSV's columns) */
} bench_out;

static const char *trans_name(const bench_gemm_shape *s) {
    static const char *const n[] = {"NN", "TN", "NT", "TT"};
    return n[(s->trans_a ? 1 : 0) + (s->trans_b ? 2 : 0)];
}

static void csv_row(bench_out *o, const char *section, const char *name, const char *impl,
                    const char *dtype, const char *trans, int64_t M, int64_t N, int64_t K,
                    int threads, double value, const char *unit, const bench_timing *t,
                    double pct, const char *peak_ref) {
    if (o->rows) {
        json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:i,s:f,s:s,s:f,s:f,s:i,s:f,s:s}",
                              "section", section, "name", name, "impl", impl, "dtype", dtype,
                              "trans", trans, "M", (json_int_t)M, "N", (json_int_t)N, "K",
                              (json_int_t)K, "threads", threads, "value", value, "unit", unit,
                              "median_ms", t ? t->median_s * 1e3 : 0.0, "min_ms",
                              t ? t->min_s * 1e3 : 0.0, "samples", t ? t->samples : 0,
                              "pct_of_peak", pct, "peak_ref", peak_ref);
        if (r) json_array_append_new(o->rows, r);
    }
    if (!o->csv) return;
    fprintf(o->csv, "%s,%s,%s,%s,%s,%lld,%lld,%lld,%d,%.3f,%s,%.6f,%.6f,%d,%.1f,%s\n",
            section, name, impl, dtype, trans, (long long)M, (long long)N, (long long)K,
            threads, value, unit, t ? t->median_s * 1e3 : 0.0, t ? t->min_s * 1e3 : 0.0,
            t ? t->samples : 0, pct, peak_ref);
}

static void print_load(const char *when) {
    double l = cli_load_average();
    if (l < 0) return;
    printf("load average %s: %.2f%s\n", when, l,
           l > 0.5 ? " (other work is running: medians are noisy, peaks may read low)" : "");
}

static void print_cpu(void) {
    char model[192];
    cli_cpu_model(model, sizeof model);
    printf("cpu: %s\n", model);
}

/* ---- peak ------------------------------------------------------------------- */

static void run_peak(const bench_opts *opt, bench_out *o, int threads,
                     double peak[BENCH_PEAK_KIND_COUNT]) {
    printf("\npeak (register-only loops, 12 chains, best of %d):\n", opt->reps);
    printf("  %-26s %14s %14s\n", "", "1 thread", threads == 1 ? "" : "all threads");
    for (int k = 0; k < BENCH_PEAK_KIND_COUNT; k++) {
        const char *name = bench_peak_name((bench_peak_kind)k);
        peak[k] = 0.0;
        if (!bench_peak_supported((bench_peak_kind)k)) {
            printf("  %-26s not supported (cpuid: %s)\n", name,
                   k == BENCH_PEAK_FP16_FMA ? "no AVX512-FP16, leaf 7 EDX bit 23"
                   : k == BENCH_PEAK_BF16_DP ? "no AVX512_BF16" : "no AVX-512F");
            csv_row(o, "peak", name, "cpu", "", "", 0, 0, 0, 1, 0.0, "unsupported", NULL, 0, "");
            continue;
        }
        double run_s = opt->quick ? 0.05 : 0.15;
        double one = bench_peak_measure((bench_peak_kind)k, 1, opt->reps, run_s);
        double all = threads > 1 ? bench_peak_measure((bench_peak_kind)k, threads, opt->reps, run_s)
                                 : one;
        peak[k] = all;
        printf("  %-26s %9.1f GF/s %9.1f GF/s\n", name, one, all);
        csv_row(o, "peak", name, "cpu", "", "", 0, 0, 0, 1, one, "GFLOP/s", NULL, 100.0, "");
        csv_row(o, "peak", name, "cpu", "", "", 0, 0, 0, threads, all, "GFLOP/s", NULL, 100.0, "");
    }
}

/* ---- GEMM ------------------------------------------------------------------- */

static const mxp_dtype gemm_pairs[][2] = {
    {MXP_DTYPE_F32, MXP_DTYPE_F32},
    {MXP_DTYPE_BF16, MXP_DTYPE_BF16},
    {MXP_DTYPE_F16, MXP_DTYPE_F16},
    {MXP_DTYPE_F8_E4M3, MXP_DTYPE_F8_E4M3},
};
/* The generic GEMM runs at a few GFLOP/s: skip it above this many flops. */
#define GENERIC_MAX_FLOPS 2.2e9

static void pair_name(mxp_dtype a, mxp_dtype b, char *out, size_t n) {
    snprintf(out, n, "%sx%s", mxp_dtype_name(a), mxp_dtype_name(b));
}

static int run_gemm(const bench_opts *opt, bench_out *o, int threads,
                    const double peak[BENCH_PEAK_KIND_COUNT]) {
    const mxp_kernels *act = mxp_kernels_get(), *gen = mxp_kernels_generic();
    bench_gemm_shape shapes[BENCH_SHAPES_MAX];
    size_t nshapes = (size_t)bench_shapes_fill(opt->shapes, opt->quick, shapes);
    int64_t mk = 1, kn = 1, mn = 1;
    for (size_t i = 0; i < nshapes; i++) {
        if (shapes[i].M * shapes[i].K > mk) mk = shapes[i].M * shapes[i].K;
        if (shapes[i].K * shapes[i].N > kn) kn = shapes[i].K * shapes[i].N;
        if (shapes[i].M * shapes[i].N > mn) mn = shapes[i].M * shapes[i].N;
    }
    bench_gemm_bufs *bufs = bench_gemm_bufs_create(mk, kn, mn);
    if (!bufs) {
        cli_error("bench: out of memory for the GEMM buffers");
        return CLI_EXIT_FAIL;
    }
    bool peer_ok[BENCH_PEER_COUNT] = {false};
    for (int p = 0; opt->peers && p < BENCH_PEER_COUNT; p++) {
        char why[160] = "";
        peer_ok[p] = bench_peer_open((bench_peer)p, why, sizeof why);
        printf("peer %s: %s\n", bench_peer_name((bench_peer)p), peer_ok[p] ? "loaded" : why);
    }
    bool with_generic = opt->generic && act != gen;
    printf("\ngemm (C = op(A) op(B), FP32 accumulation; GF/s and %% of the %d-thread peak "
           "of the instruction used; the peers run f16 x f16 rows as FP32, having no FP16 "
           "GEMM):\n", threads);
    printf("  %-15s %-15s %-2s %-11s %16s", "shape", "MxNxK", "tr", "dtype", act->isa);
    if (with_generic) printf(" %9s %7s", "generic", "speedup");
    for (int p = 0; p < BENCH_PEER_COUNT; p++)
        if (peer_ok[p]) printf(" %9s %6s", bench_peer_name((bench_peer)p), "ratio");
    printf("\n");
    for (size_t i = 0; i < nshapes; i++) {
        const bench_gemm_shape *s = &shapes[i];
        double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
        char mnk[48];
        snprintf(mnk, sizeof mnk, "%lldx%lldx%lld", (long long)s->M, (long long)s->N,
                 (long long)s->K);
        for (size_t q = 0; q < sizeof gemm_pairs / sizeof gemm_pairs[0]; q++) {
            mxp_dtype at = gemm_pairs[q][0], bt = gemm_pairs[q][1];
            if (s->training && at == MXP_DTYPE_F8_E4M3) continue; /* f32, bf16, f16 only */
            char dt[32];
            pair_name(at, bt, dt, sizeof dt);
            bench_peak_kind pk = bench_gemm_peak_kind(act, at, bt);
            bench_peer with[BENCH_PEER_COUNT];
            int nwith = 0;
            for (int p = 0; p < BENCH_PEER_COUNT; p++)
                if (peer_ok[p] && bench_peer_supports((bench_peer)p, at, bt))
                    with[nwith++] = (bench_peer)p;
            bench_timing tw[1 + BENCH_PEER_COUNT];
            bench_gemm_side_by_side(act, with, nwith, bufs, s, at, bt, opt->reps, 0.02, tw);
            const bench_timing t = tw[0];
            double gf = flops / t.median_s / 1e9;
            double pct = peak[pk] > 0 ? 100.0 * gf / peak[pk] : 0.0;
            printf("  %-15s %-15s %-2s %-11s %7.1f (%4.0f%%)", s->label, mnk, trans_name(s), dt,
                   gf, pct);
            csv_row(o, "gemm", s->label, act->isa, dt, trans_name(s), s->M, s->N, s->K, threads,
                    gf, "GFLOP/s", &t, pct, bench_peak_name(pk));
            if (with_generic) {
                if (flops <= GENERIC_MAX_FLOPS) {
                    int reps = opt->reps < 3 ? opt->reps : 3;
                    bench_timing tg = bench_gemm_table(gen, bufs, s, at, bt, reps, 0.02);
                    double gg = flops / tg.median_s / 1e9;
                    double pg = peak[BENCH_PEAK_FP32_FMA] > 0
                                    ? 100.0 * gg / peak[BENCH_PEAK_FP32_FMA] : 0.0;
                    printf(" %9.1f %6.1fx", gg, gf / gg);
                    csv_row(o, "gemm", s->label, "generic", dt, trans_name(s), s->M, s->N, s->K,
                            1, gg, "GFLOP/s", &tg, pg, bench_peak_name(BENCH_PEAK_FP32_FMA));
                } else {
                    printf(" %9s %7s", "skipped", "");
                }
            }
            for (int p = 0, w = 0; p < BENCH_PEER_COUNT; p++) {
                if (!peer_ok[p]) continue;
                if (w == nwith || with[w] != (bench_peer)p) {
                    printf(" %9s %6s", "-", "");
                    continue;
                }
                const bench_timing tp = tw[1 + w++];
                double gp = flops / tp.median_s / 1e9;
                double pp = peak[pk] > 0 ? 100.0 * gp / peak[pk] : 0.0;
                printf(" %9.1f %5.2fx", gp, gf / gp);
                csv_row(o, "gemm", s->label, bench_peer_name((bench_peer)p), dt, trans_name(s),
                        s->M, s->N, s->K, threads, gp, "GFLOP/s", &tp, pp, bench_peak_name(pk));
            }
            printf("\n");
            fflush(stdout);
        }
    }
    bench_gemm_bufs_destroy(bufs);
    return CLI_EXIT_OK;
}

/* ---- bandwidth-bound kernels ------------------------------------------------ */

static void run_loops(const bench_opts *opt, bench_out *o) {
    const mxp_kernels *act = mxp_kernels_get(), *gen = mxp_kernels_generic();
    size_t n = opt->quick ? (size_t)1 << 20 : (size_t)1 << 22;
    double copy_bytes;
    bench_timing tc = bench_copy(n, opt->reps, 0.02, &copy_bytes);
    double copy_gbs = tc.median_s > 0 ? copy_bytes / tc.median_s / 1e9 : 0.0;
    printf("\nbandwidth-bound kernels (n = %zu FP32 elements, rows of 1024; GB/s of bytes the "
           "contract reads + writes; memcpy: %.1f GB/s):\n", n, copy_gbs);
    csv_row(o, "bandwidth", "memcpy", "libc", "f32", "", 0, 0, 0, 1, copy_gbs, "GB/s", &tc,
            100.0, "memcpy");
    bench_loop_result ra[BENCH_LOOPS_MAX], rg[BENCH_LOOPS_MAX];
    int na = bench_loops_run(act, n, opt->reps, 0.02, ra);
    bool with_generic = opt->generic && act != gen;
    int ng = with_generic ? bench_loops_run(gen, n, opt->reps, 0.02, rg) : 0;
    printf("  %-28s %16s", "kernel", act->isa);
    if (with_generic) printf(" %9s %7s", "generic", "speedup");
    printf("\n");
    for (int i = 0; i < na; i++) {
        double ga = ra[i].bytes / ra[i].t.median_s / 1e9;
        double pa = copy_gbs > 0 ? 100.0 * ga / copy_gbs : 0.0;
        printf("  %-28s %7.1f (%4.0f%%)", ra[i].name, ga, pa);
        csv_row(o, "bandwidth", ra[i].name, act->isa, "", "", (int64_t)ra[i].n, 0, 0, 1, ga,
                "GB/s", &ra[i].t, pa, "memcpy");
        if (i < ng) {
            double gg = rg[i].bytes / rg[i].t.median_s / 1e9;
            printf(" %9.1f %6.1fx", gg, ga / gg);
            csv_row(o, "bandwidth", rg[i].name, "generic", "", "", (int64_t)rg[i].n, 0, 0, 1, gg,
                    "GB/s", &rg[i].t, copy_gbs > 0 ? 100.0 * gg / copy_gbs : 0.0, "memcpy");
        }
        printf("\n");
    }
    if (na == 0) printf("  (out of memory for the buffers)\n");
}

static int bench_kernels(int argc, char **argv) {
    bench_opts opt = {NULL, 0, false, true, true, false, BENCH_SHAPES_CORE};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            help(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--quick") == 0) {
            opt.quick = true;
        } else if (strcmp(a, "--no-generic") == 0) {
            opt.generic = false;
        } else if (strcmp(a, "--no-peers") == 0) {
            opt.peers = false;
        } else if (strcmp(a, "--json") == 0) {
            opt.json = true;
        } else if (strcmp(a, "--shapes") == 0) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            int k = 0;
            while (v && k < BENCH_SHAPES_COUNT && strcmp(v, bench_shape_set_names[k]) != 0) k++;
            if (!v || k == BENCH_SHAPES_COUNT) {
                cli_error("--shapes %s is invalid; accepted: core, training, all", v ? v : "(none)");
                return CLI_EXIT_USAGE;
            }
            opt.shapes = (bench_shape_set)k;
        } else if (strcmp(a, "--csv") == 0 || strcmp(a, "--reps") == 0) {
            if (i + 1 >= argc) {
                cli_error("%s needs a value", a);
                return CLI_EXIT_USAGE;
            }
            const char *v = argv[++i];
            if (a[2] == 'c') {
                opt.csv_path = v;
            } else {
                char *end;
                long r = strtol(v, &end, 10);
                if (*v == '\0' || *end != '\0' || r < 1 || r > 1000) {
                    cli_error("--reps %s is invalid; accepted: an integer in [1, 1000]", v);
                    return CLI_EXIT_USAGE;
                }
                opt.reps = (int)r;
            }
        } else {
            cli_error("unexpected argument '%s'; accepted: --csv FILE, --json, --reps N, --quick, "
                      "--shapes SET, --no-generic, --no-peers", a);
            return CLI_EXIT_USAGE;
        }
    }
    if (opt.reps == 0) opt.reps = opt.quick ? 3 : 7;
    cli_install_logger();
    bench_out o = {NULL, NULL};
    int saved_stdout = -1;
    if (opt.json) { /* the tables go to stderr, stdout keeps the one JSON object */
        fflush(stdout);
        saved_stdout = dup(STDOUT_FILENO);
        if (saved_stdout < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            cli_error("--json: cannot redirect the tables to stderr: %s", strerror(errno));
            return CLI_EXIT_IO;
        }
        o.rows = json_array();
    }
    if (opt.csv_path) {
        o.csv = fopen(opt.csv_path, "w");
        if (!o.csv) {
            cli_error("cannot write %s: %s", opt.csv_path, strerror(errno));
            return CLI_EXIT_IO;
        }
        fputs("section,name,impl,dtype,trans,M,N,K,threads,value,unit,median_ms,min_ms,"
              "samples,pct_of_peak,peak_ref\n", o.csv);
    }
    const mxp_kernels *act = mxp_kernels_get();
    int threads = mxp_threads_max();
    const char *force = getenv("MIXPREC_FORCE_ISA");
    printf("mixprec bench kernels: table %s%s%s, threads %d, median of %d samples%s, "
           "shapes %s\n",
           act->isa, force ? " (MIXPREC_FORCE_ISA=" : "", force ? force : "", threads, opt.reps,
           force ? ")" : "", bench_shape_set_names[opt.shapes]);
    print_cpu();
    print_load("at start");
    double peak[BENCH_PEAK_KIND_COUNT];
    run_peak(&opt, &o, threads, peak);
    int rc = run_gemm(&opt, &o, threads, peak);
    if (rc == CLI_EXIT_OK) run_loops(&opt, &o);
    print_load("at end");
    if (opt.json) {
        fflush(stdout);
        dup2(saved_stdout, STDOUT_FILENO);
        close(saved_stdout);
        json_t *j = json_object();
        json_object_set_new(j, "schema", json_string("mixprec.bench_kernels/1"));
        json_object_set_new(j, "table", json_string(act->isa));
        json_object_set_new(j, "threads", json_integer(threads));
        json_object_set_new(j, "reps", json_integer(opt.reps));
        json_object_set_new(j, "load_average", json_real(cli_load_average()));
        json_object_set_new(j, "ok", json_boolean(rc == CLI_EXIT_OK));
        json_object_set_new(j, "rows", o.rows);
        cli_json_print(j);
        json_decref(j);
    }
    if (o.csv && fclose(o.csv) != 0) {
        cli_error("cannot write %s: %s", opt.csv_path, strerror(errno));
        return CLI_EXIT_IO;
    }
    if (opt.csv_path) printf("\nwrote %s\n", opt.csv_path);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "kernels") == 0) return bench_kernels(argc - 1, argv + 1);
    if (strcmp(argv[1], "train") == 0) return bench_train(argc - 1, argv + 1);
    cli_error("unknown bench command '%s'; accepted: kernels, train", argv[1]);
    return CLI_EXIT_USAGE;
}
