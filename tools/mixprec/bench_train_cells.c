/* tools/mixprec/bench_train_cells.c: the cells of `mixprec bench train`
 * and how one is run.
 *
 * A cell is workload x scenario x precision mode. Each run of a cell is a
 * child process of this very binary (/proc/self/exe):
 *   mixprec train --json --quiet checkpoint.enabled=false
 *       obs.store.enabled=false training.precision=MODE <cell overrides>
 *       output.dir=OUT/cells/<workload>-<scenario>-<mode>-r<k>
 * so a crash, an abort or a memory blow-up of one cell cannot take the
 * bench down, and each cell's memory is measured alone: wait4() returns
 * the child's peak resident set (ru_maxrss). The results come from the
 * child's OUTPUT_DIR/summary.json (read with jansson); its stdout and
 * stderr are kept beside it (stdout.json, stderr.log).
 */
#include "bench_train.h"
#include "cli.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

const char *bt_workload_name(bt_workload w) {
    static const char *const n[BT_WL_COUNT] = {"world_model", "classifier", "gpt"};
    return (unsigned)w < BT_WL_COUNT ? n[w] : "?";
}

const char *bt_mode_label(mxp_precision p) {
    return p == MXP_PRECISION_FP8 ? "fp8 (emulated)" : mxp_precision_name(p);
}

/* label, run-directory suffix, mode and config override of each variant */
static const struct {
    const char *label, *dir;
    mxp_precision mode;
    const char *ovr;
} keeps[BT_KEEP_COUNT] = {
    [BT_KEEP_NONE] = {NULL, "", MXP_PRECISION_FP32, NULL},
    [BT_KEEP_FIRST_LAST] = {"mixed_bf16 (fp32 first/last)", "-fp32fl", MXP_PRECISION_MIXED_BF16,
                            "training.precision_fp32_layers=first,last"},
    [BT_KEEP_FIRST] = {"mixed_bf16 (fp32 first)", "-fp32f", MXP_PRECISION_MIXED_BF16,
                       "training.precision_fp32_layers=first"},
    [BT_KEEP_F16ACC] = {"mixed_fp16 (fp16 accumulate)", "-f16acc", MXP_PRECISION_MIXED_FP16,
                        "training.fp16_accumulate=fp16"},
};

mxp_precision bt_keep_mode(bt_keep k) { return keeps[k].mode; }

const char *bt_keep_label(bt_keep k, mxp_precision p) {
    return k != BT_KEEP_NONE ? keeps[k].label : bt_mode_label(p);
}

const char *bt_cell_label(const bt_cell *c) { return bt_keep_label(c->keep, c->mode); }

size_t bt_cell_mem_total(const bt_cell *c) {
    return c->mem_params + c->mem_grads + c->mem_master + c->mem_optimizer + c->mem_activations;
}

static void add_ovr(bt_cell *c, const char *fmt, long long v) {
    if (c->n_ovr < BT_MAX_OVR) snprintf(c->ovr[c->n_ovr++], BT_OVR_LEN, fmt, v);
}

static void add_str(bt_cell *c, const char *s) {
    if (c->n_ovr < BT_MAX_OVR) snprintf(c->ovr[c->n_ovr++], BT_OVR_LEN, "%s", s);
}

/* The seeds' scenarios (seeds/001, "Real-World CPU Results"). */
static const struct {
    const char *name;
    int64_t trajectories, epochs;
} scenarios[] = {{"warmup", 128, 1}, {"standard", 256, 3}, {"stress", 512, 5}};

/* World model of the scenarios: the "base" configuration of issue 3
 * (hidden 512 x 3, batch 256), where the step is dominated by arithmetic
 * rather than per-step bookkeeping; docs/benchmarks.md gives the reasons.
 * --quick shortens each episode (data.episode_length 25 instead of 200). */
static void world_model_cell(const bt_opts *o, bt_cell *c, int s) {
    c->wl = BT_WL_WORLD_MODEL;
    snprintf(c->scenario, sizeof c->scenario, "%s", scenarios[s].name);
    c->trajectories = scenarios[s].trajectories;
    c->epochs = scenarios[s].epochs;
    c->hidden = 512;
    c->depth = 3;
    c->batch = 256;
    add_ovr(c, "model.hidden=%lld", c->hidden);
    add_ovr(c, "model.depth=%lld", c->depth);
    add_ovr(c, "training.batch_size=%lld", c->batch);
    add_ovr(c, "data.trajectories=%lld", c->trajectories);
    add_ovr(c, "training.epochs=%lld", c->epochs);
    if (o->quick) add_str(c, "data.episode_length=25");
    /* the user's key=value come last, so they win; keep the columns true */
    for (int i = 0; i < o->n_user_ovr; i++) {
        const char *kv = o->user_ovr[i];
        add_str(c, kv);
        const char *v = strchr(kv, '=');
        if (!v) continue;
        long long n = atoll(v + 1);
        if (strncmp(kv, "model.hidden=", 13) == 0) c->hidden = n;
        if (strncmp(kv, "model.depth=", 12) == 0) c->depth = n;
        if (strncmp(kv, "training.batch_size=", 20) == 0) c->batch = n;
    }
}

/* Fashion-MNIST MLP 784-256-256-10, batch 64, 1 epoch (quick: 4,000 /
 * 1,000 images; full: all 60,000 / 10,000). */
static void classifier_cell(const bt_opts *o, bt_cell *c) {
    c->wl = BT_WL_CLASSIFIER;
    snprintf(c->scenario, sizeof c->scenario, "default");
    c->hidden = 256;
    c->depth = 2;
    c->batch = 64;
    c->epochs = 1;
    add_str(c, "model.workload=classifier");
    add_ovr(c, "model.hidden=%lld", c->hidden);
    add_ovr(c, "model.depth=%lld", c->depth);
    add_ovr(c, "training.batch_size=%lld", c->batch);
    add_ovr(c, "training.epochs=%lld", c->epochs);
    add_ovr(c, "data.train_subset=%lld", o->quick ? 4000 : 0);
    add_ovr(c, "data.test_subset=%lld", o->quick ? 1000 : 0);
}

/* Character-level GPT, default model (2 layers, width 128, 4 heads,
 * context 64), batch 32 sequences, lr 3e-3; 100 steps (quick: 10) and
 * 256 held-out windows (quick: 64). */
static void gpt_cell(const bt_opts *o, bt_cell *c) {
    c->wl = BT_WL_GPT;
    snprintf(c->scenario, sizeof c->scenario, "default");
    c->hidden = 128;
    c->depth = 2;
    c->batch = 32;
    c->epochs = 1;
    add_str(c, "model.workload=gpt");
    add_str(c, "training.lr=3e-3");
    add_ovr(c, "training.batch_size=%lld", c->batch);
    add_ovr(c, "training.epochs=%lld", c->epochs);
    add_ovr(c, "data.train_subset=%lld", o->quick ? 320 : 3200);
    add_ovr(c, "data.test_subset=%lld", o->quick ? 64 : 256);
}

/* Whether the active kernel table runs the FP16 fast-accumulate GEMM on
 * FP16 FMA hardware (AVX512-FP16; not the emulation, nor under
 * MIXPREC_FORCE_ISA=generic). */
static bool f16acc_native(void) {
    return mxp_kernels_get()->gemm_compute(MXP_DTYPE_F16, true) == MXP_GEMM_COMPUTE_FP16_FMA;
}

int bt_cells_build(const bt_opts *o, bt_cell *cells, int cap) {
    int n = 0;
    for (int w = 0; w < BT_WL_COUNT; w++) {
        if (!o->workload[w]) continue;
        int ns = w == BT_WL_WORLD_MODEL ? (int)(sizeof scenarios / sizeof scenarios[0]) : 1;
        for (int s = 0; s < ns; s++) {
            for (int p = 0; p < MXP_PRECISION_COUNT && n < cap; p++) {
                /* The world model also runs mixed_bf16 with its first and last
                 * layers, and with its first layer alone, kept FP32
                 * (docs/precision.md), and, on a CPU with AVX512-FP16,
                 * mixed_fp16 with FP16 accumulation; variants are placed
                 * before their plain mode (the plots take the last row of a
                 * mode). */
                bt_keep order[BT_KEEP_COUNT];
                int nv = 0;
                if (w == BT_WL_WORLD_MODEL)
                    for (int k = BT_KEEP_NONE + 1; k < BT_KEEP_COUNT; k++)
                        if (keeps[k].mode == (mxp_precision)p &&
                            (k != BT_KEEP_F16ACC || f16acc_native()))
                            order[nv++] = (bt_keep)k;
                order[nv++] = BT_KEEP_NONE;
                for (int v = 0; v < nv && n < cap; v++) {
                    bt_cell *c = &cells[n++];
                    memset(c, 0, sizeof *c);
                    if (w == BT_WL_WORLD_MODEL) world_model_cell(o, c, s);
                    else if (w == BT_WL_CLASSIFIER) classifier_cell(o, c);
                    else gpt_cell(o, c);
                    c->mode = (mxp_precision)p;
                    c->keep = order[v];
                    if (c->keep != BT_KEEP_NONE) add_str(c, keeps[c->keep].ovr);
                }
            }
        }
    }
    return n;
}

/* ---- one run ---------------------------------------------------------------- */

static void note(bt_cell *c, const char *fmt, const char *arg) {
    if (c->note[0]) return; /* keep the first reason */
    snprintf(c->note, sizeof c->note, fmt, arg);
    for (char *p = c->note; *p; p++)
        if (*p == ',' || *p == '\n' || *p == '|' || *p == '"') *p = ' ';
}

/* Spawn the child with stdout/stderr into files in dir; wait for it (at
 * most limit_s seconds, then SIGKILL). Returns the exit status as wait4
 * gives it, or -1 when it could not start; *rss_kb gets ru_maxrss. */
static int spawn_wait(char *const argv[], const char *dir, double limit_s, long *rss_kb,
                      bool *timed_out) {
    char out[800], errp[800];
    snprintf(out, sizeof out, "%s/stdout.json", dir);
    snprintf(errp, sizeof errp, "%s/stderr.log", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int e = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    *timed_out = false;
    *rss_kb = 0;
    if (e != 0) return -1;
    double t0 = mxp_time_now();
    int status = 0;
    struct rusage ru;
    for (;;) {
        memset(&ru, 0, sizeof ru);
        pid_t r = wait4(pid, &status, WNOHANG, &ru);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -1;
        if (!*timed_out && mxp_time_now() - t0 > limit_s) {
            kill(pid, SIGKILL);
            *timed_out = true;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    *rss_kb = ru.ru_maxrss;
    return status;
}

static double jnum(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int64_t jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

static size_t jsize(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (size_t)json_integer_value(v) : 0;
}

/* Bit-equal or both NaN. */
static bool same(double a, double b) {
    return (isnan(a) && isnan(b)) || a == b;
}

/* Read run k's summary.json into c; false (with a note) when unusable. */
static bool read_summary(bt_cell *c, const char *dir, int k) {
    char p[800];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    json_error_t je;
    json_t *s = json_load_file(p, 0, &je);
    if (!json_is_object(s)) {
        note(c, "unreadable summary.json: %.100s", je.text);
        json_decref(s);
        return false;
    }
    double wall = jnum(s, "wall_time_s");
    double train = jnum(s, "final_train_loss");
    const char *ev = c->wl == BT_WL_CLASSIFIER ? "test_loss" : "val_loss";
    double eval = jnum(s, ev);
    double acc = jnum(s, "test_accuracy");
    if (!isfinite(wall)) {
        note(c, "summary.json has no wall_time_s%s", "");
        json_decref(s);
        return false;
    }
    c->wall_s[k] = wall;
    if (k == 0) {
        c->train_loss = train;
        c->eval_loss = eval;
        c->accuracy = acc;
        c->overflow_rate = jnum(s, "overflow_rate");
        c->steps = jint(s, "training_steps");
        c->skipped = jint(s, "skipped_steps");
        c->emulated = json_is_true(json_object_get(s, "emulated"));
        json_t *pr = json_object_get(s, "precision");
        snprintf(c->end_precision, sizeof c->end_precision, "%s",
                 json_is_string(pr) ? json_string_value(pr) : "?");
        json_t *g = json_object_get(s, "guard");
        if (json_is_object(g)) {
            c->rollbacks = jint(g, "rollbacks");
            c->fallbacks = jint(g, "fallbacks");
        }
        json_t *m = json_object_get(s, "memory_bytes");
        if (json_is_object(m)) {
            c->mem_known = true;
            c->mem_params = jsize(m, "params");
            c->mem_grads = jsize(m, "grads");
            c->mem_master = jsize(m, "master");
            c->mem_optimizer = jsize(m, "optimizer");
            c->mem_activations = jsize(m, "activations");
        }
        c->losses_identical = true;
    } else if (!same(train, c->train_loss) || !same(eval, c->eval_loss) || !same(acc, c->accuracy)) {
        c->losses_identical = false;
    }
    json_decref(s);
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void cell_reset(bt_cell *c) {
    c->ok = true;
    c->exit_code = 0;
    c->note[0] = '\0';
    c->runs_ok = 0;
    c->train_loss = c->eval_loss = c->accuracy = c->overflow_rate = NAN;
    c->wall_median = c->wall_min = NAN;
    c->peak_rss_kb = 0;
}

/* Run k (0-based) of cell c; false (and c marked failed) when it failed. */
static bool cell_run_one(const bt_opts *o, bt_cell *c, int k, FILE *progress) {
    const double limit_s = o->quick ? 120.0 : 1800.0;
    char dir[700], outkv[720], prec[64];
    snprintf(dir, sizeof dir, "%s/cells/%s-%s-%s%s-r%d", o->out, bt_workload_name(c->wl),
             c->scenario, mxp_precision_name(c->mode), keeps[c->keep].dir, k + 1);
    int e = cli_mkdirs(dir);
    if (e != 0) {
        note(c, "cannot create the run directory: %s", strerror(e));
        c->ok = false;
        c->exit_code = CLI_EXIT_IO;
        return false;
    }
    snprintf(outkv, sizeof outkv, "output.dir=%s", dir);
    snprintf(prec, sizeof prec, "training.precision=%s", mxp_precision_name(c->mode));
    char *argv[8 + BT_MAX_OVR + 2];
    int a = 0;
    argv[a++] = "mixprec";
    argv[a++] = "train";
    argv[a++] = "--json";
    argv[a++] = "--quiet";
    argv[a++] = "checkpoint.enabled=false";
    argv[a++] = "obs.store.enabled=false";
    argv[a++] = prec;
    for (int i = 0; i < c->n_ovr; i++) argv[a++] = c->ovr[i];
    argv[a++] = outkv;
    argv[a] = NULL;
    if (progress) {
        fprintf(progress, "  run %d/%d: %s %s %s ...", k + 1, o->runs, bt_workload_name(c->wl),
                c->scenario, bt_cell_label(c));
        fflush(progress);
    }
    long rss = 0;
    bool timed_out = false;
    int st = spawn_wait(argv, dir, limit_s, &rss, &timed_out);
    if (rss > c->peak_rss_kb) c->peak_rss_kb = rss;
    bool ok = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
        c->ok = false;
        char why[96];
        if (st < 0)
            snprintf(why, sizeof why, "could not start /proc/self/exe");
        else if (timed_out)
            snprintf(why, sizeof why, "killed after %.0f s", limit_s);
        else if (WIFSIGNALED(st))
            snprintf(why, sizeof why, "killed by signal %d", WTERMSIG(st));
        else
            snprintf(why, sizeof why, "exit code %d", WEXITSTATUS(st));
        c->exit_code = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        note(c, "%s (see stderr.log)", why);
        if (progress) fprintf(progress, " FAILED: %s; %s/stderr.log\n", why, dir);
        return false;
    }
    if (!read_summary(c, dir, k)) {
        c->ok = false;
        c->exit_code = CLI_EXIT_FAIL;
        if (progress) fprintf(progress, " FAILED: %s\n", c->note);
        return false;
    }
    c->runs_ok++;
    if (progress) fprintf(progress, " %.3f s, peak RSS %.1f MB\n", c->wall_s[k], rss / 1024.0);
    return true;
}

/* c's medians and notes from its runs. */
static void cell_finish(bt_cell *c) {
    if (c->runs_ok > 0) {
        double w[BT_MAX_RUNS];
        memcpy(w, c->wall_s, (size_t)c->runs_ok * sizeof w[0]);
        qsort(w, (size_t)c->runs_ok, sizeof w[0], cmp_double);
        c->wall_median = c->runs_ok % 2 ? w[c->runs_ok / 2]
                                        : 0.5 * (w[c->runs_ok / 2 - 1] + w[c->runs_ok / 2]);
        c->wall_min = w[0];
    }
    if (c->ok && strcmp(c->end_precision, mxp_precision_name(c->mode)) != 0) {
        char why[96];
        snprintf(why, sizeof why, "ended in %s (guard fallback or kill switch)", c->end_precision);
        note(c, "%s", why);
    }
    if (c->ok && c->runs_ok > 1 && !c->losses_identical)
        note(c, "losses differ between runs of the same seed%s", "");
}

void bt_cells_run(const bt_opts *o, bt_cell *cells, int n, FILE *progress) {
    for (int i = 0; i < n; i++) cell_reset(&cells[i]);
    for (int k = 0; k < o->runs; k++)
        for (int i = 0; i < n; i++)
            if (cells[i].ok) (void)cell_run_one(o, &cells[i], k, progress);
    for (int i = 0; i < n; i++) cell_finish(&cells[i]);
}
