/* tools/mixprec/cmd_doctor.c: `mixprec doctor` (CPU features, which
 * precisions run natively or emulated, the fallback chain, the GPU seen by
 * the CUDA backend or why there is none, and an optional
 * FP32 preflight of the configured workload with the advisor's verdicts),
 * and the SIGUSR1 handler of `mixprec train` (its guard lines are
 * train_summary.c's, the guard's JSON is in the library's summary).
 */
#include "doctor.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kernels/kernels.h"
#include "kernels/threads.h"

#include <math.h>

#include <jansson.h>

static void help(FILE *f) {
    fputs("usage: mixprec doctor [--preflight] [--json] [--config FILE] [key=value ...]\n"
          "\n"
          "Report this CPU's features, how each precision mode runs on it\n"
          "(native, hardware conversion, or emulated), the automatic fallback\n"
          "chain, and the kernel table in use.\n"
          "\n"
          "  --preflight     also run guard.preflight.batches batches of the\n"
          "                  configured world model in FP32, measure per-layer\n"
          "                  headroom, and print the precision advisor's verdict\n"
          "                  for each format (what training.precision=auto picks)\n"
          "  --json          one JSON object on stdout instead of the tables\n"
          "                  (schema mixprec.doctor/1, docs/json.md)\n"
          "  --config FILE   YAML configuration for --preflight\n"
          "  key=value       config overrides for --preflight\n",
          f);
}

/* The GEMM each precision mode issues, measured on the active table: one
 * hidden layer's forward of the benchmark MLP (y = x W^T, batch 256,
 * 512 x 512), the shape `bench train`'s scenarios spend most time in. */
enum { GEMM_M = 256, GEMM_N = 512, GEMM_K = 512, GEMM_REPS = 5, GEMM_ROWS = 5 };
#define GEMM_SHAPE_TEXT "256x512x512 NT, x W^T"
static const struct {
    const char *label;
    mxp_dtype type;
    bool f16acc;
} gemm_row_defs[GEMM_ROWS] = {
    {"FP32 (fp32)", MXP_DTYPE_F32, false},
    {"BF16 (mixed_bf16, bf16)", MXP_DTYPE_BF16, false},
    {"FP16 (mixed_fp16, fp16)", MXP_DTYPE_F16, false},
    {"FP16, training.fp16_accumulate=fp16", MXP_DTYPE_F16, true},
    {"FP8 E4M3 (fp8)", MXP_DTYPE_F8_E4M3, false},
};

typedef struct gemm_rows {
    double gflops[GEMM_ROWS];
    mxp_gemm_compute compute[GEMM_ROWS];
    int threads;
} gemm_rows;

typedef struct gemm_ctx {
    const mxp_kernels *k;
    mxp_gemm_args g;
    bool f16acc;
} gemm_ctx;

static void gemm_call(void *p) {
    gemm_ctx *c = p;
    if (c->f16acc)
        c->k->gemm_f16acc(&c->g, 16);
    else
        c->k->gemm(&c->g);
}

/* Time every row of gemm_row_defs (about 0.1 s each); NaN where memory
 * ran out. */
static void gemm_measure(gemm_rows *out) {
    const mxp_kernels *k = mxp_kernels_get();
    out->threads = mxp_threads_max();
    size_t na = (size_t)GEMM_M * GEMM_K, nb = (size_t)GEMM_N * GEMM_K;
    float *a32 = mxp_calloc(na, sizeof(float)), *b32 = mxp_calloc(nb, sizeof(float));
    float *c = mxp_calloc((size_t)GEMM_M * GEMM_N, sizeof(float));
    void *a = mxp_calloc(na, sizeof(float)), *b = mxp_calloc(nb, sizeof(float));
    mxp_rng rng;
    mxp_rng_init(&rng, 7);
    for (size_t i = 0; a32 && i < na; i++) a32[i] = 2.0f * mxp_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; b32 && i < nb; i++) b32[i] = 2.0f * mxp_rng_uniform(&rng) - 1.0f;
    for (int i = 0; i < GEMM_ROWS; i++) {
        out->compute[i] = k->gemm_compute(gemm_row_defs[i].type, gemm_row_defs[i].f16acc);
        out->gflops[i] = NAN;
        if (!a32 || !b32 || !c || !a || !b) continue;
        mxp_dtype t = gemm_row_defs[i].type;
        mxp_convert(t, a, MXP_DTYPE_F32, a32, na);
        mxp_convert(t, b, MXP_DTYPE_F32, b32, nb);
        gemm_ctx x = {k,
                      {false, true, GEMM_M, GEMM_N, GEMM_K, t, a, GEMM_K, t, b, GEMM_K, c, GEMM_N,
                       1.0f, 0.0f},
                      gemm_row_defs[i].f16acc};
        bench_timing tm = bench_time(gemm_call, &x, GEMM_REPS, 0.02, 0.01);
        out->gflops[i] = 2.0 * GEMM_M * GEMM_N * GEMM_K / tm.median_s * 1e-9;
    }
    mxp_free(a32);
    mxp_free(b32);
    mxp_free(c);
    mxp_free(a);
    mxp_free(b);
}

static void print_cpu(void) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    const struct {
        const char *name;
        bool on;
    } feats[] = {{"avx2", f->avx2},
                 {"fma", f->fma},
                 {"f16c", f->f16c},
                 {"avx512f", f->avx512f},
                 {"avx512bw", f->avx512bw},
                 {"avx512vl", f->avx512vl},
                 {"avx512_bf16", f->avx512_bf16},
                 {"avx512_fp16", f->avx512_fp16},
                 {"amx_bf16", f->amx_bf16}};
    printf("cpu features   ");
    for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
        printf(" %s%s", feats[i].on ? "+" : "-", feats[i].name);
    printf("\n");
    const mxp_kernels *k = mxp_kernels_get();
    const char *forced = getenv("MIXPREC_FORCE_ISA");
    printf("kernels         %s table%s%s%s\n", k->isa, forced && *forced ? " (MIXPREC_FORCE_ISA=" : "",
           forced && *forced ? forced : "", forced && *forced ? ")" : "");
    if (strcmp(k->isa, "generic") == 0)
        printf("                (portable reference kernels: every format is computed by "
               "scalar code)\n");
    int mjv = mxp_mujoco_version();
    if (mjv > 0)
        printf("mujoco          %d.%d.%d compiled in (data.env=ant|humanoid)\n", mjv / 100,
               mjv / 10 % 10, mjv % 10);
    else
        printf("mujoco          not compiled in (data.env=ant|humanoid unavailable; install "
               "libmujoco-dev and rebuild)\n");
    printf("\n%-11s %-9s %-22s %s\n", "precision", "support", "fallback", "how");
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        const char *why = "";
        mxp_support s = mxp_precision_support((mxp_precision)p, f, &why);
        mxp_precision next = mxp_precision_fallback((mxp_precision)p, f, false);
        char chain[64];
        if (next == (mxp_precision)p)
            snprintf(chain, sizeof chain, "-");
        else
            snprintf(chain, sizeof chain, "-> %s", mxp_precision_name(next));
        printf("%-11s %-9s %-22s %s\n", mxp_precision_name((mxp_precision)p),
               mxp_support_name(s), chain, why);
    }
    printf("\nnative: the CPU computes in the format; convert: hardware conversion, FP32\n"
           "arithmetic; emulated: software conversion (FP8 is always emulated on a CPU).\n"
           "The fallback chain skips emulated formats unless "
           "guard.fallback.allow_emulated=true.\n");
    gemm_rows rows;
    gemm_measure(&rows);
    printf("\nGEMM of each mode on this CPU (%s, %d thread%s, median of %d):\n", GEMM_SHAPE_TEXT,
           rows.threads, rows.threads == 1 ? "" : "s", GEMM_REPS);
    printf("%-36s %8s  %s\n", "operands (modes)", "GFLOP/s", "computes in");
    for (int i = 0; i < GEMM_ROWS; i++)
        printf("%-36s %8.1f  %s\n", gemm_row_defs[i].label, rows.gflops[i],
               mxp_gemm_compute_name(rows.compute[i]));
}

/* The same facts as print_cpu, as JSON (schema mixprec.doctor/1). */
static json_t *cpu_json(void) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    json_t *j = json_object(), *feats = json_object(), *precs = json_array();
    json_object_set_new(feats, "avx2", json_boolean(f->avx2));
    json_object_set_new(feats, "fma", json_boolean(f->fma));
    json_object_set_new(feats, "f16c", json_boolean(f->f16c));
    json_object_set_new(feats, "avx512f", json_boolean(f->avx512f));
    json_object_set_new(feats, "avx512bw", json_boolean(f->avx512bw));
    json_object_set_new(feats, "avx512vl", json_boolean(f->avx512vl));
    json_object_set_new(feats, "avx512_bf16", json_boolean(f->avx512_bf16));
    json_object_set_new(feats, "avx512_fp16", json_boolean(f->avx512_fp16));
    json_object_set_new(feats, "amx_bf16", json_boolean(f->amx_bf16));
    json_object_set_new(j, "schema", json_string("mixprec.doctor/1"));
    json_object_set_new(j, "cpu_features", feats);
    json_object_set_new(j, "kernels", json_string(mxp_kernels_get()->isa));
    const char *forced = getenv("MIXPREC_FORCE_ISA");
    json_object_set_new(j, "forced_isa", forced && *forced ? json_string(forced) : json_null());
    int mjv = mxp_mujoco_version();
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", mjv / 100, mjv / 10 % 10, mjv % 10);
    json_object_set_new(j, "mujoco", mjv > 0 ? json_string(v) : json_null());
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        const char *why = "";
        mxp_support sup = mxp_precision_support((mxp_precision)p, f, &why);
        mxp_precision next = mxp_precision_fallback((mxp_precision)p, f, false);
        json_t *e = json_object();
        json_object_set_new(e, "precision", json_string(mxp_precision_name((mxp_precision)p)));
        json_object_set_new(e, "support", json_string(mxp_support_name(sup)));
        json_object_set_new(e, "fallback", next == (mxp_precision)p
                                               ? json_null()
                                               : json_string(mxp_precision_name(next)));
        json_object_set_new(e, "how", json_string(why));
        json_array_append_new(precs, e);
    }
    json_object_set_new(j, "precisions", precs);
    gemm_rows rows;
    gemm_measure(&rows);
    json_t *gemm = json_object(), *gr = json_array();
    json_object_set_new(gemm, "shape", json_string(GEMM_SHAPE_TEXT));
    json_object_set_new(gemm, "threads", json_integer(rows.threads));
    for (int i = 0; i < GEMM_ROWS; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "operands", json_string(gemm_row_defs[i].label));
        json_object_set_new(e, "dtype", json_string(mxp_dtype_name(gemm_row_defs[i].type)));
        json_object_set_new(e, "fp16_accumulate", json_boolean(gemm_row_defs[i].f16acc));
        json_object_set_new(e, "computes_in", json_string(mxp_gemm_compute_name(rows.compute[i])));
        json_object_set_new(e, "gflops", isfinite(rows.gflops[i]) ? json_real(rows.gflops[i])
                                                                  : json_null());
        json_array_append_new(gr, e);
    }
    json_object_set_new(gemm, "rows", gr);
    json_object_set_new(j, "gemm", gemm);
    return j;
}

static json_t *preflight_json(const mxp_preflight_report *rep, const mxp_model_spec *sp,
                              int64_t B) {
    json_t *j = json_object(), *layers = json_array(), *verdicts = json_array();
    json_object_set_new(j, "batches", json_integer(rep->n_batches));
    json_object_set_new(j, "batch_size", json_integer(B));
    for (int l = 0; l < rep->n_layers; l++) {
        json_t *e = json_object();
        json_object_set_new(e, "layer", json_integer(l));
        json_object_set_new(e, "kind", json_string(mxp_layer_kind_name(sp->layers[l].kind)));
        json_object_set_new(e, "max_abs_output", json_real(rep->act_absmax[l]));
        json_object_set_new(e, "max_abs_grad", json_real(rep->grad_absmax[l]));
        json_array_append_new(layers, e);
    }
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        const mxp_format_verdict *v = &rep->verdict[p];
        if (!v->evaluated) continue;
        json_t *e = json_object();
        json_object_set_new(e, "precision", json_string(mxp_precision_name((mxp_precision)p)));
        json_object_set_new(e, "safe", json_boolean(v->safe));
        json_object_set_new(e, "support", json_string(mxp_support_name(v->support)));
        json_object_set_new(e, "reason", json_string(v->reason));
        json_array_append_new(verdicts, e);
    }
    json_object_set_new(j, "layers", layers);
    json_object_set_new(j, "verdicts", verdicts);
    json_object_set_new(j, "recommended", json_string(mxp_precision_name(rep->recommended)));
    json_object_set_new(j, "why", json_string(rep->why));
    return j;
}

/* The GPU section: what the CUDA runtime reports, or why there is none
 * (built without CUDA: nothing of CUDA is linked or loaded; no device or no
 * driver: the runtime's error text). */
static void print_gpu(void) {
    mxp_error err = {0};
    int n = 0;
    if (!mxp_cuda_built()) {
        printf("gpu             none: %s\n", "built without CUDA (MIXPREC_CUDA=OFF, or AUTO "
                                              "without nvcc)");
        return;
    }
    int rt = mxp_cuda_build_version();
    printf("cuda            backend compiled in (CUDA %d.%d runtime, sm_90)\n", rt / 1000,
           rt % 1000 / 10);
    if (mxp_cuda_device_count(&n, &err) != MXP_OK) {
        printf("gpu             none: %s\n", err.msg);
        return;
    }
    for (int i = 0; i < n; i++) {
        mxp_gpu_info g;
        if (mxp_cuda_device_info(i, &g, &err) != MXP_OK) {
            printf("gpu %-11d error: %s\n", i, err.msg);
            continue;
        }
        printf("gpu %-11d %s, %.1f GiB (%.1f GiB free), compute capability %d.%d, %d SMs, "
               "driver %d.%d\n",
               i, g.name, (double)g.total_mem / 1073741824.0, (double)g.free_mem / 1073741824.0,
               g.cc_major, g.cc_minor, g.multiprocessors, g.driver_version / 1000,
               g.driver_version % 1000 / 10);
    }
    printf("                (training.device=cuda is not implemented yet: docs/gpu.md)\n");
}

/* out: the JSON document (--json) to add "preflight" to, or NULL: text. */
static int preflight(const cli_config_args *a, json_t *out) {
    mxp_config cfg;
    int rc = cli_resolve_config(a, &cfg, NULL);
    if (rc != CLI_EXIT_OK) return rc;
    if (cfg.workload != MXP_WORKLOAD_WORLD_MODEL) {
        cli_error("doctor --preflight runs the world model; model.workload=%s is not supported "
                  "yet", cfg.workload == MXP_WORKLOAD_GPT ? "gpt" : "classifier");
        return CLI_EXIT_USAGE;
    }
    mxp_error err = {0};
    mxp_world_model *wm = NULL;
    if (mxp_world_model_create(&cfg, &wm, &err) != MXP_OK) {
        cli_error("%s", err.msg);
        return err.status == MXP_ERR_CONFIG || err.status == MXP_ERR_INVALID_ARG
                   ? CLI_EXIT_USAGE
                   : CLI_EXIT_FAIL;
    }
    const mxp_replay *rp = mxp_world_model_replay(wm);
    mxp_replay_split tr = mxp_replay_train(rp);
    const int64_t in = mxp_replay_in_dim(rp), od = mxp_replay_out_dim(rp), B = cfg.batch_size;
    int n = (int)(tr.n / B < cfg.guard.preflight_batches ? tr.n / B : cfg.guard.preflight_batches);
    if (n > 64) n = 64;
    mxp_batch bs[64];
    for (int i = 0; i < n; i++)
        bs[i] = (mxp_batch){tr.x + (size_t)(i * B * in), tr.y + (size_t)(i * B * od), NULL, B};
    mxp_preflight_report rep;
    mxp_model *m = mxp_world_model_model(wm);
    if (n < 1 || mxp_guard_preflight(m, bs, n, cfg.guard.rules[MXP_RULE_HEADROOM].threshold,
                                     cfg.guard.rules[MXP_RULE_UNDERFLOW].threshold, NULL, &rep,
                                     &err) != MXP_OK) {
        cli_error("preflight failed: %s", n < 1 ? "no full batch" : err.msg);
        mxp_world_model_destroy(wm);
        return CLI_EXIT_FAIL;
    }
    const mxp_model_spec *sp = mxp_model_get_spec(m);
    if (out) {
        json_object_set_new(out, "preflight", preflight_json(&rep, sp, B));
        mxp_world_model_destroy(wm);
        return CLI_EXIT_OK;
    }
    printf("\npreflight: %d FP32 batches of %lld on the configured world model\n", rep.n_batches,
           (long long)B);
    printf("%-6s %-10s %14s %14s\n", "layer", "kind", "max |output|", "max |grad|");
    for (int l = 0; l < rep.n_layers; l++)
        printf("%-6d %-10s %14.4g %14.4g%s\n", l, mxp_layer_kind_name(sp->layers[l].kind),
               (double)rep.act_absmax[l], (double)rep.grad_absmax[l],
               l + 1 == rep.n_layers ? "   (written in FP32 for the loss)" : "");
    printf("\n%-11s %-7s %-9s %s\n", "format", "verdict", "support", "why");
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        const mxp_format_verdict *v = &rep.verdict[p];
        if (!v->evaluated) continue;
        printf("%-11s %-7s %-9s %s\n", mxp_precision_name((mxp_precision)p),
               v->safe ? "safe" : "UNSAFE", mxp_support_name(v->support), v->reason);
    }
    printf("\nrecommended: %s\n  %s\n", mxp_precision_name(rep.recommended), rep.why);
    mxp_world_model_destroy(wm);
    return CLI_EXIT_OK;
}

int cmd_doctor(int argc, char **argv) {
    cli_config_args a = {0};
    bool pre = false, json = false;
    const cli_flag flags[] = {{"--preflight", &pre}, {"--json", &json}};
    int parsed = cli_parse_args(argc, argv, 1, flags, 2, &a, help,
                                "--preflight, --json, --config FILE, --help, key=value");
    if (parsed >= 0) return parsed;
    cli_install_logger();
    mxp_log_set_level(MXP_LOG_WARN);
    if (!json) {
        print_cpu();
        print_gpu();
        return pre ? preflight(&a, NULL) : CLI_EXIT_OK;
    }
    json_t *j = cpu_json();
    int rc = pre ? preflight(&a, j) : CLI_EXIT_OK;
    if (rc == CLI_EXIT_OK) cli_json_print(j);
    json_decref(j);
    return rc;
}

/* ---- the SIGUSR1 handler of `mixprec train` ------------------------------ */

void doctor_install_signal(void) {
    mxp_error err = {0};
    if (mxp_guard_install_signal(SIGUSR1, &err) != MXP_OK)
        mxp_log(MXP_LOG_WARN, "SIGUSR1 -> fp32 switch unavailable: %s", err.msg);
}
