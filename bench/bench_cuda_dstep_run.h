/* bench/bench_cuda_dstep_run.h: the timed part of bench/bench_cuda_dstep.c
 * (CUDA builds only; included by it after its argument parsing). Entry
 * point: bench_run (the records its header describes). The plan runs on
 * a copy of the CUDA ops table whose alloc/free count the bytes the plan
 * holds (peak_mem_bytes); nothing of src/backend/cuda/dstep.c is changed.
 * BENCH_DSTEP_EMULATED (tests/test_bench_dstep_emu.c): the includer
 * brings used_bytes() and renames the CUDA calls to the emulated device's.
 */
#include "backend/cuda/cuda_backend.h"

#ifndef BENCH_DSTEP_EMULATED
#include <cuda_runtime_api.h>

/* The device's used memory (0 when the runtime cannot say). */
static size_t used_bytes(void) {
    size_t fr = 0, tot = 0;
    return cudaMemGetInfo(&fr, &tot) == cudaSuccess ? tot - fr : 0;
}
#endif

static const char *const MODE_NAMES[3] = {"fp32", "mixed_bf16", "mixed_fp16"};

/* ---- the counting ops table */
static const mxp_ds_ops *g_real;
static size_t g_cur, g_peak;
static int64_t g_allocs;
static struct { void *p; size_t bytes; } g_tab[4096];

static int cnt_alloc(void *dev, size_t bytes, void **out, char *why, size_t n) {
    int rc = g_real->alloc(dev, bytes, out, why, n);
    if (rc == 0) {
        for (size_t i = 0; i < sizeof g_tab / sizeof g_tab[0]; i++)
            if (!g_tab[i].p) {
                g_tab[i].p = *out;
                g_tab[i].bytes = bytes;
                break;
            }
        g_cur += bytes;
        g_allocs++;
        if (g_cur > g_peak) g_peak = g_cur;
    }
    return rc;
}

static void cnt_free(void *dev, void *p) {
    for (size_t i = 0; p && i < sizeof g_tab / sizeof g_tab[0]; i++)
        if (g_tab[i].p == p) {
            g_cur -= g_tab[i].bytes;
            g_tab[i].p = NULL;
            break;
        }
    g_real->free(dev, p);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double u = *(const double *)x, v = *(const double *)y;
    return (u > v) - (u < v);
}

static FILE *g_out;

/* One JSON line (already formatted) to the records. */
static void emit(const char *line) {
    fprintf(g_out, "%s\n", line);
    fflush(g_out);
}

static mxp_ds_spec spec_of(const bm_model *m, int prec) {
    mxp_ds_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = m->in;
    s.batch = m->batch;
    int l = 0;
    for (int d = 0; d < m->depth; d++) {
        s.layers[l].kind = MXP_DS_LINEAR;
        s.layers[l++].units = m->hidden;
        s.layers[l++].kind = MXP_DS_GELU;
    }
    s.layers[l].kind = MXP_DS_LINEAR;
    s.layers[l++].units = m->out;
    s.n_layers = l;
    s.loss = MXP_DS_MSE;
    s.ln_eps = 1e-5f;
    s.lowp = prec == 0 ? MXP_DTYPE_F32 : prec == 1 ? MXP_DTYPE_BF16 : MXP_DTYPE_F16;
    s.lr = BM_LR;
    s.beta1 = BM_BETA1;
    s.beta2 = BM_BETA2;
    s.eps = BM_EPS;
    s.weight_decay = BM_WD;
    s.clip_max = 0.0f; /* off, as torch_gpu_step.py */
    const mxp_trainer_config tc = mxp_trainer_config_default();
    s.near_overflow_frac = tc.near_overflow_frac;
    s.seed = 1234;
    /* fp16: mixprec's default loss scaler (the trainer's: init 65536, x2
     * every growth_interval clean steps, x0.5 on overflow; GradScaler's
     * defaults are the same numbers) */
    const mxp_scaler_config *sc = &tc.scaler;
    const bool on = prec == 2;
    const float min_f = (float)sc->min_scale;
    s.rule = (mxp_scaler_rule){on, sc->growth_factor, sc->backoff_factor, sc->growth_interval,
                               sc->hysteresis, min_f > 1.17549435e-38f ? min_f : 1.17549435e-38f,
                               sc->max_scale};
    s.scaler0.scale = on ? (float)sc->init_scale : 1.0f;
    s.scaler0.hysteresis_left = sc->hysteresis;
    return s;
}

/* The plan's slab layout is the CPU model's (names and offsets): 0 or 1. */
static int same_layout(const mxp_ds_plan *p, const mxp_model *model, char *why, size_t n) {
    if (mxp_ds_num_params(p) != mxp_model_num_params(model)) {
        snprintf(why, n, "the device plan has %zu parameters, the CPU model %zu",
                 mxp_ds_num_params(p), mxp_model_num_params(model));
        return 1;
    }
    for (int i = 0; i < mxp_model_num_tensors(model); i++) {
        const mxp_tensor_info *t = mxp_model_tensor(model, i);
        int l = 0;
        const char *dot = strchr(t->name, '.');
        if (dot) l = atoi(dot + 1);
        const int64_t off = mxp_ds_param_offset(p, l, t->ndim == 2 ? 0 : 1);
        if (off != (int64_t)t->offset) {
            snprintf(why, n, "%s: CPU offset %zu, device plan %lld", t->name, t->offset,
                     (long long)off);
            return 1;
        }
    }
    return 0;
}

/* One case into rec (a JSON object's tail, starting with ", "); 0, or 1
 * with why (the case is recorded as an error). */
static int run_case(mxp_cudab_ctx *ctx, const args *a, const bm_model *m, int variant, int prec,
                    const mxp_model *model, const bm_init *in, char *rec, size_t rn, char *why,
                    size_t n) {
    static mxp_ds_ops ops;
    g_real = mxp_ds_ops_cuda();
    ops = *g_real;
    ops.alloc = cnt_alloc;
    ops.free = cnt_free;
    g_cur = g_peak = 0;
    g_allocs = 0;
    memset(g_tab, 0, sizeof g_tab);
    mxp_ds_spec s = spec_of(m, prec);
    s.graphs = variant == 1;
    mxp_ds_plan *p = NULL;
    const int total = a->warmup + a->steps;
    double *us = malloc((size_t)a->steps * sizeof *us);
    if (!us) {
        snprintf(why, n, "out of host memory");
        return 1;
    }
    (void)mxp_cudab_sync(ctx, why, n);
    const size_t used0 = used_bytes();
    int rc = mxp_ds_plan_create(&s, &ops, ctx, &p, why, n);
    const size_t used_plan = used_bytes();
    if (rc == 0) rc = same_layout(p, model, why, n);
    if (rc == 0) rc = mxp_ds_set_params(p, in->w, why, n);
    mxp_ds_result r;
    memset(&r, 0, sizeof r);
    double first = NAN, host_s = 0;
    int64_t d2h = 0, skipped = 0, graphed = 0, captures = 0;
    for (int i = 0; rc == 0 && i < total; i++) {
        void *e0 = NULL, *e1 = NULL;
        if (i == a->warmup) host_s = now_s(); /* the timed loop's start */
        rc = mxp_cudab_timer_mark(ctx, &e0, why, n);
        if (rc == 0) rc = mxp_ds_step(p, bm_x(m, in, i), bm_y(m, in, i), NULL, &r, why, n);
        if (rc == 0) rc = mxp_cudab_timer_mark(ctx, &e1, why, n);
        float ms = 0;
        if (rc == 0) rc = mxp_cudab_timer_ms(e0, e1, &ms, why, n);
        if (rc) break;
        if (i == 0) first = r.loss;
        skipped += r.skipped;
        graphed += r.graphed;
        captures += r.captured;
        if (i >= a->warmup) {
            us[i - a->warmup] = 1e3 * (double)ms;
            d2h += r.d2h;
        }
    }
    host_s = now_s() - host_s;
    const size_t used_end = used_bytes();
    if (rc == 0 && variant == 1 && graphed < total - 1) {
        snprintf(why, n, "variant graph: %lld of the %d steps ran graphed (all but the first "
                 "should): the ops table %s has no graph ops, the plan stayed eager",
                 (long long)graphed, total, ops.name);
        rc = 1;
    }
    if (rc == 0) {
        qsort(us, (size_t)a->steps, sizeof *us, cmp_double);
        const double med = us[a->steps / 2];
        const int i90 = (int)(0.9 * a->steps) < a->steps - 1 ? (int)(0.9 * a->steps) : a->steps - 1;
        char scale[64] = "";
        if (prec == 2) snprintf(scale, sizeof scale, ", \"final_scale\": %.9g", r.next_scale);
        snprintf(rec, rn,
                 ", \"status\": \"ok\", \"timer\": \"CUDA events around each mxp_ds_step\", "
                 "\"us_per_step\": %.3f, \"us_min\": %.3f, \"us_p90\": %.3f, "
                 "\"host_us_per_step\": %.3f, \"samples_per_s\": %.1f, \"loss\": %.9g, "
                 "\"loss_step\": %d, \"first_loss\": %.9g, \"skipped_steps\": %lld, "
                 "\"graphed_steps\": %lld, \"captures\": %lld, "
                 "\"peak_mem_bytes\": %zu, \"plan_allocs\": %lld, "
                 "\"dev_used_before_bytes\": %zu, \"dev_used_after_plan_bytes\": %zu, "
                 "\"dev_used_after_steps_bytes\": %zu, \"syncs_per_step\": %.3f, "
                 "\"d2h_per_step\": %.3f, \"syncs_how\": \"device-to-host copies counted by "
                 "the context over the timed steps; each is the report's, followed by one "
                 "stream sync\", \"optimizer\": \"AdamW (mixprec device kernel)\"%s",
                 med, us[0], us[i90], 1e6 * host_s / a->steps,
                 (double)m->batch / (med * 1e-6), r.loss, total, first, (long long)skipped,
                 (long long)graphed, (long long)captures,
                 g_peak, (long long)g_allocs, used0, used_plan, used_end,
                 (double)d2h / a->steps, (double)d2h / a->steps, scale);
    }
    mxp_ds_plan_destroy(p);
    free(us);
    return rc;
}

static int bench_run(const args *a) {
    mxp_error err = {0};
    int ndev = 0;
    if (mxp_cuda_device_count(&ndev, &err) != MXP_OK || ndev < 1) {
        printf("bench_cuda_dstep: SKIP (%s)\n", ndev < 1 && !err.msg[0] ? "no device" : err.msg);
        return 77;
    }
    mxp_gpu_info info;
    if (mxp_cuda_device_info(0, &info, &err) != MXP_OK) {
        fprintf(stderr, "bench_cuda_dstep: %s\n", err.msg);
        return 1;
    }
    char why[1024] = "";
    mxp_cudab_ctx *ctx = NULL;
    if (mxp_cudab_ctx_create(0, &ctx, why, sizeof why) != 0) {
        fprintf(stderr, "bench_cuda_dstep: context: %s\n", why);
        return 1;
    }
    g_out = stdout;
    char path[4096];
    if (a->out_dir) {
        if (mkdir(a->out_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "bench_cuda_dstep: cannot create %s: %s\n", a->out_dir,
                    strerror(errno));
            return 1;
        }
        snprintf(path, sizeof path, "%s/mixprec_dstep.jsonl", a->out_dir);
        g_out = fopen(path, "w");
        if (!g_out) {
            fprintf(stderr, "bench_cuda_dstep: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    const double t_start = now_s();
    char line[8192], rec[4096];
    time_t now = time(NULL);
    char started[32];
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    snprintf(line, sizeof line,
             "{\"kind\": \"env\", \"impl\": \"mixprec\", \"device\": \"%s\", \"capability\": "
             "\"%d.%d\", \"sms\": %d, \"memory_bytes\": %zu, \"driver\": %d, \"cuda\": %d, "
             "\"cublaslt\": \"%s\", \"warmup\": %d, \"steps\": %d, \"started\": \"%s\", "
             "\"tf32\": \"off (CUBLAS_COMPUTE_32F in fp32)\"}",
             info.name, info.cc_major, info.cc_minor, info.multiprocessors, info.total_mem,
             info.driver_version, info.runtime_version, mxp_cudab_lt_soname(), a->warmup,
             a->steps, started);
    emit(line);
    for (int mi = 0; mi < BM_NMODELS; mi++) {
        if (!a->models[mi]) continue;
        const bm_model *m = &BM_MODELS[mi];
        mxp_model *model = NULL;
        bm_init in;
        memset(&in, 0, sizeof in);
        int bad = bm_model_new(m, MXP_PRECISION_FP32, &model, &err) != MXP_OK;
        if (bad) snprintf(why, sizeof why, "%s", err.msg);
        char ipath[4096] = "";
        struct stat sb;
        if (a->init_dir) snprintf(ipath, sizeof ipath, "%s/%s.safetensors", a->init_dir, m->name);
        if (!bad && ipath[0] && stat(ipath, &sb) == 0)
            bad = bm_read(ipath, m, model, &in, why, sizeof why);
        else if (!bad && bm_generate(m, model, a->seed, a->ring, &in) != 0)
            bad = snprintf(why, sizeof why, "out of host memory") > 0;
        for (int ci = 0; ci < 6; ci++) {
            const int vi = ci / 3, pi = ci % 3;
            if (!a->variants[vi] || !a->precs[pi]) continue;
            const double t0 = now_s();
            int rc = bad;
            rec[0] = '\0';
            if (rc == 0 && t0 - t_start > a->budget_s) {
                snprintf(rec, sizeof rec, ", \"status\": \"not-run\", \"reason\": \"the time "
                                          "budget (--budget-s %.0f) is spent\"", a->budget_s);
            } else if (rc == 0) {
                rc = run_case(ctx, a, m, vi, pi, model, &in, rec, sizeof rec, why, sizeof why);
            }
            if (rc) {
                for (char *c = why; *c; c++)
                    if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = ' ';
                snprintf(rec, sizeof rec, ", \"status\": \"error\", \"reason\": \"%s\"", why);
            }
            snprintf(line, sizeof line,
                     "{\"kind\": \"case\", \"impl\": \"mixprec\", \"model\": \"%s\", "
                     "\"variant\": \"%s\", \"batch\": \"h2d\", \"ring\": %d, "
                     "\"precision\": \"%s\", \"mode\": \"%s\", "
                     "\"shape\": {\"in\": %lld, \"hidden\": %lld, \"depth\": %d, "
                     "\"out\": %lld, \"batch\": %lld}, "
                     "\"init\": {\"source\": \"%s\"}, \"case_s\": %.3f%s}",
                     m->name, VARIANT_NAMES[vi], in.ring, PREC_NAMES[pi], MODE_NAMES[pi],
                     (long long)m->in,
                     (long long)m->hidden, m->depth, (long long)m->out, (long long)m->batch,
                     in.source, now_s() - t0, rec);
            emit(line);
            const char *us = strstr(rec, "\"us_per_step\"");
            fprintf(stderr, "case %s %s %s: %s\n", m->name, VARIANT_NAMES[vi], MODE_NAMES[pi],
                    rc ? why : us ? us : rec);
        }
        bm_init_free(&in);
        mxp_model_destroy(model);
    }
    snprintf(line, sizeof line, "{\"kind\": \"end\", \"impl\": \"mixprec\", \"total_s\": %.3f, "
                                "\"d2h_total\": %lld}",
             now_s() - t_start, (long long)mxp_cudab_d2h_count(ctx));
    emit(line);
    if (g_out != stdout) fclose(g_out);
    mxp_cudab_ctx_destroy(ctx);
    return 0;
}
