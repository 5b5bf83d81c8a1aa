/* bench/bench_cuda_dstep.c: mixprec's side of the GPU training-step
 * benchmark against PyTorch (issue 28 part 5; bench/torch_gpu_step.py is
 * the other side, scripts/gpu-check.sh runs both, docs/gpu.md).
 *
 *   bench_cuda_dstep --write-init DIR [--models LIST] [--seed N] [--ring R]
 *       writes DIR/<model>.safetensors: the initial FP32 weights and the
 *       ring of R distinct batches (default 8) of each model
 *       (bench/dstep_init.h says the layout, the generator and the ring
 *       rule: step s trains on batch (s - 1) mod R), which torch_gpu_step.py
 *       --init-dir reads. Every build.
 *   bench_cuda_dstep --cpu-losses DIR [--models LIST] [--steps N]
 *       mixprec's CPU trainer (mxp_trainer, fp32, the benchmark's AdamW,
 *       no clipping) from DIR/<model>.safetensors on its ring: one JSON
 *       line per model with the losses of steps 1..N (default 8). Every
 *       build; tests/test_torch_gpu_step.sh holds torch's CPU eager fp32
 *       path from the same file to it.
 *   bench_cuda_dstep [--init-dir DIR] [--out-dir DIR] [--models LIST]
 *       [--variants eager,graph] [--precisions fp32,bf16,fp16] [--warmup 20]
 *       [--steps 100] [--budget-s 120] [--seed N] [--ring R]
 *       the benchmark: per model x variant x precision, the device step
 *       (src/backend/cuda/dstep.h: mxp_ds_step, one report per step)
 *       planned once, eager, or graphed (spec.graphs: the device work a
 *       CUDA graph from the second step on, src/backend/cuda/graph.cu), the
 *       weights and ring of DIR/<model>.safetensors (generated in memory by
 *       the same generator, ring --ring, when DIR or the file is absent),
 *       --warmup steps, then --steps steps each timed with CUDA events on
 *       the context's stream, step i on ring batch i mod R. A step is the
 *       whole mxp_ds_step: control block and that step's batch up (host to
 *       device from the page-locked staging: "batch": "h2d"; the device
 *       step has no resident-batch entry), forward, loss, backward, grad
 *       pass, decide, AdamW (replayed as one graph when graphed), the
 *       report's one device-to-host copy and sync. A graph case whose steps
 *       did not run graphed (a table without graph ops) is an error.
 * Records (one JSON object per line, OUT/mixprec_dstep.jsonl when
 * --out-dir is given, else stdout; the field names of torch_gpu_step.py's
 * records, plus impl "mixprec"): an "env" record (device, driver, runtime,
 * cuBLASLt), then per case kind "case", model, variant (eager, graph),
 * batch "h2d", ring (R), graphed_steps and captures (steps that replayed a
 * graph, and captures, over all warmup + steps), precision
 * (fp32, bf16, fp16 as torch's; mode the mixprec name), status (ok, error,
 * not-run), us_per_step (median), us_min, us_p90, host_us_per_step (host
 * clock over the timed loop / steps), samples_per_s (batch / median),
 * peak_mem_bytes (every byte the plan allocated through the ops table: the
 * step's whole device memory, allocated once; cuBLASLt's workspace and the
 * control block belong to the context and are not in it), the device's
 * used memory (cudaMemGetInfo) before the plan, after it and after the
 * steps, syncs_per_step and d2h_per_step (device-to-host copies counted by
 * the context; each is the report's, followed by one stream sync), loss
 * (the loss of step warmup + steps, its forward before its update, on
 * ring batch (warmup + steps - 1) mod R, as torch's), loss_step,
 * first_loss, skipped_steps, final_scale (fp16).
 * Exit: 0 ran (failed cases recorded as errors); 2 bad arguments; 1 an
 * init file could not be written or read (--write-init, --cpu-losses);
 * 77 the benchmark in a build without CUDA or without a usable device.
 * Not a test: it asserts nothing about times.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "backend/cuda/dstep.h"
#include "dstep_init.h"

#define MAX_STEPS 100000

typedef struct args {
    const char *write_init, *cpu_losses, *init_dir, *out_dir;
    bool models[BM_NMODELS];
    bool precs[3];
    bool variants[2];
    int warmup, steps, ring;
    double budget_s;
    uint64_t seed;
} args;

static const char *const PREC_NAMES[3] = {"fp32", "bf16", "fp16"};
static const char *const VARIANT_NAMES[2] = {"eager", "graph"};

static int usage(const char *msg, const char *val) {
    fprintf(stderr,
            "bench_cuda_dstep: %s%s%s\n"
            "usage: bench_cuda_dstep --write-init DIR [--models LIST] [--seed N] [--ring R]\n"
            "       bench_cuda_dstep --cpu-losses DIR [--models LIST] [--steps N]\n"
            "       bench_cuda_dstep [--init-dir DIR] [--out-dir DIR] [--models LIST]\n"
            "           [--variants LIST] [--precisions LIST] [--warmup N] [--steps N]\n"
            "           [--budget-s S] [--seed N] [--ring R]\n"
            "  models: a comma list of wm, mlp512, mlp2048; variants: of eager, graph;\n"
            "  precisions: of fp32, bf16, fp16; warmup 0..%d, steps 1..%d, budget-s > 0,\n"
            "  ring 1..%d\n",
            msg, val ? ": " : "", val ? val : "", MAX_STEPS, MAX_STEPS, BM_RING_MAX);
    return 2;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || *s == '\0' || *end != '\0' || errno || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* A comma list of names[0..n) into on[]; false on an unknown or empty one. */
static bool parse_list(const char *s, const char *const *names, int n, bool *on) {
    memset(on, 0, (size_t)n * sizeof *on);
    char buf[256];
    if (!s || strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
    int count = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < n && strcmp(names[k], tok) != 0) k++;
        if (k == n) return false;
        on[k] = true;
        count++;
    }
    return count > 0;
}

static int parse(int argc, char **argv, args *a) {
    memset(a, 0, sizeof *a);
    for (int m = 0; m < BM_NMODELS; m++) a->models[m] = true;
    for (int p = 0; p < 3; p++) a->precs[p] = true;
    a->variants[0] = a->variants[1] = true;
    a->ring = BM_RING;
    a->warmup = 20;
    a->steps = -1;
    a->budget_s = 120;
    a->seed = 1234;
    const char *model_names[BM_NMODELS];
    for (int m = 0; m < BM_NMODELS; m++) model_names[m] = BM_MODELS[m].name;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n = 0;
        if (!v) return usage("a value is needed after", o);
        if (strcmp(o, "--write-init") == 0) a->write_init = v;
        else if (strcmp(o, "--cpu-losses") == 0) a->cpu_losses = v;
        else if (strcmp(o, "--init-dir") == 0) a->init_dir = v;
        else if (strcmp(o, "--out-dir") == 0) a->out_dir = v;
        else if (strcmp(o, "--models") == 0) {
            if (!parse_list(v, model_names, BM_NMODELS, a->models)) return usage("bad --models", v);
        } else if (strcmp(o, "--variants") == 0) {
            if (!parse_list(v, VARIANT_NAMES, 2, a->variants)) return usage("bad --variants", v);
        } else if (strcmp(o, "--ring") == 0) {
            if (!parse_i64(v, 1, BM_RING_MAX, &n)) return usage("bad --ring", v);
            a->ring = (int)n;
        } else if (strcmp(o, "--precisions") == 0) {
            if (!parse_list(v, PREC_NAMES, 3, a->precs)) return usage("bad --precisions", v);
        } else if (strcmp(o, "--warmup") == 0) {
            if (!parse_i64(v, 0, MAX_STEPS, &n)) return usage("bad --warmup", v);
            a->warmup = (int)n;
        } else if (strcmp(o, "--steps") == 0) {
            if (!parse_i64(v, 1, MAX_STEPS, &n)) return usage("bad --steps", v);
            a->steps = (int)n;
        } else if (strcmp(o, "--budget-s") == 0) {
            if (!parse_i64(v, 1, 86400, &n)) return usage("bad --budget-s", v);
            a->budget_s = (double)n;
        } else if (strcmp(o, "--seed") == 0) {
            if (!parse_i64(v, 0, INT64_MAX, &n)) return usage("bad --seed", v);
            a->seed = (uint64_t)n;
        } else
            return usage("unknown argument", o);
        i++;
    }
    if (a->write_init && a->cpu_losses)
        return usage("--write-init and --cpu-losses are separate runs", NULL);
    if (a->steps < 0) a->steps = a->cpu_losses ? 8 : 100;
    return 0;
}

/* ---------------------------------------------------------------- CPU modes */

static int write_init(const args *a) {
    if (mkdir(a->write_init, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_cuda_dstep: cannot create %s: %s\n", a->write_init,
                strerror(errno));
        return 1;
    }
    for (int m = 0; m < BM_NMODELS; m++) {
        if (!a->models[m]) continue;
        mxp_error err = {0};
        mxp_model *model = NULL;
        bm_init in;
        mxp_status st = bm_model_new(&BM_MODELS[m], MXP_PRECISION_FP32, &model, &err);
        if (st == MXP_OK && bm_generate(&BM_MODELS[m], model, a->seed, a->ring, &in) != 0)
            st = mxp_error_set(&err, MXP_ERR_OUT_OF_MEMORY, "out of memory");
        if (st == MXP_OK) {
            st = bm_write(a->write_init, &BM_MODELS[m], model, &in, a->seed, &err);
            bm_init_free(&in);
        }
        if (st == MXP_OK)
            printf("bench_cuda_dstep: %s/%s.safetensors: %zu parameters, batch %lld, ring %d\n",
                   a->write_init, BM_MODELS[m].name, mxp_model_num_params(model),
                   (long long)BM_MODELS[m].batch, a->ring);
        mxp_model_destroy(model);
        if (st != MXP_OK) {
            fprintf(stderr, "bench_cuda_dstep: --write-init %s: %s\n", BM_MODELS[m].name, err.msg);
            return 1;
        }
    }
    return 0;
}

static int cpu_losses(const args *a) {
    double *losses = malloc((size_t)a->steps * sizeof *losses);
    if (!losses) return 1;
    int rc = 0;
    for (int m = 0; m < BM_NMODELS && rc == 0; m++) {
        if (!a->models[m]) continue;
        const bm_model *bm = &BM_MODELS[m];
        char path[4096], why[1024] = "";
        snprintf(path, sizeof path, "%s/%s.safetensors", a->cpu_losses, bm->name);
        mxp_error err = {0};
        mxp_model *model = NULL;
        bm_init in;
        int ring = 0;
        if (bm_model_new(bm, MXP_PRECISION_FP32, &model, &err) != MXP_OK) {
            snprintf(why, sizeof why, "%s", err.msg);
            rc = 1;
        } else if ((rc = bm_read(path, bm, model, &in, why, sizeof why)) == 0) {
            ring = in.ring;
            rc = bm_cpu_losses(bm, &in, a->steps, losses, why, sizeof why);
            bm_init_free(&in);
        }
        mxp_model_destroy(model);
        if (rc) {
            fprintf(stderr, "bench_cuda_dstep: --cpu-losses %s: %s\n", bm->name, why);
            break;
        }
        printf("{\"kind\": \"cpu-losses\", \"model\": \"%s\", \"precision\": \"fp32\", "
               "\"steps\": %d, \"ring\": %d, \"init\": \"%s\", \"losses\": [",
               bm->name, a->steps, ring, path);
        for (int s = 0; s < a->steps; s++) printf("%s%.9g", s ? ", " : "", losses[s]);
        printf("]}\n");
    }
    free(losses);
    return rc;
}

#if defined(MIXPREC_HAVE_CUDA) || defined(BENCH_DSTEP_EMULATED)
#include "bench_cuda_dstep_run.h"
#endif

int main(int argc, char **argv) {
    args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc;
    if (a.write_init) return write_init(&a);
    if (a.cpu_losses) return cpu_losses(&a);
#if defined(MIXPREC_HAVE_CUDA) || defined(BENCH_DSTEP_EMULATED)
    return bench_run(&a);
#else
    printf("bench_cuda_dstep: SKIP (built without CUDA; --write-init and --cpu-losses run "
           "in every build)\n");
    return 77;
#endif
}
