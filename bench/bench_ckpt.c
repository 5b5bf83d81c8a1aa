/* bench/bench_ckpt.c: checkpoint save and load speed (a benchmark, not a
 * test; figures in docs/checkpoints.md).
 *
 * usage: bench_ckpt [--dir DIR] [--reps N] [--hidden H] [--precision P]
 *
 * The big world model (pendulum, hidden H = 2048 x 3 layers, AdamW; its
 * parameters and both moments are saved) after one training step:
 *   save     mxp_ckpt_save: CRC32C of every tensor, header, write, fsync,
 *            rename, fsync of the directory;
 *   baseline the same bytes written with write() + fsync() into a new
 *            file of the same directory (both sides create a new file; the
 *            previous one is deleted outside the timed region);
 *   load     mxp_ckpt_load from the page cache: read, parse, verify every
 *            checksum and finite value, copy into the trainer;
 *   verify   mxp_ckpt_verify (read + all checks, no copy);
 *   crc32c   both implementations over the file's bytes in memory.
 * Medians of N repetitions (default 7). The targets: save at most
 * 1.5x the baseline; load with verification at least 1 GB/s.
 */
#include <mixprec/mixprec.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const mxp_error *err) {
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

int main(int argc, char **argv) {
    const char *dir = "/tmp";
    int reps = 7;
    int64_t hidden = 2048;
    mxp_precision prec = MXP_PRECISION_FP32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc)
            hidden = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            if (mxp_precision_parse(argv[++i], &prec, NULL) != MXP_OK) die("--precision", NULL);
        } else {
            fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--reps N] [--hidden H] "
                            "[--precision P]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000) reps = 7;
    mxp_error err = {0};
    const mxp_env_info *env = mxp_env_info_get(MXP_ENV_PENDULUM);
    int64_t in = env->state_dim + env->action_dim, out = env->state_dim + 1;
    const int64_t B = 32;
    mxp_model_spec spec =
        mxp_model_spec_mlp(in, hidden, 3, out, MXP_LAYER_GELU, false, MXP_LOSS_MSE, B);
    mxp_precision_policy pol;
    mxp_precision_policy_default(prec, &pol);
    mxp_model *model = NULL;
    mxp_trainer *tr = NULL;
    if (mxp_model_create(&spec, &pol, 1, &model, &err) != MXP_OK) die("model", &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    if (mxp_trainer_create(model, &tc, &tr, &err) != MXP_OK) die("trainer", &err);
    float *x = calloc((size_t)(B * in), sizeof *x), *y = calloc((size_t)(B * out), sizeof *y);
    mxp_rng r;
    mxp_rng_init(&r, 3);
    for (int64_t i = 0; i < B * in; i++) x[i] = mxp_rng_normal(&r);
    for (int64_t i = 0; i < B * out; i++) y[i] = mxp_rng_normal(&r);
    mxp_batch bt = {x, y, NULL, B};
    mxp_step_result res;
    if (mxp_trainer_step(tr, &bt, 1, &res, &err) != MXP_OK) die("step", &err);

    char path[1024], base[1024];
    snprintf(path, sizeof path, "%s/bench_ckpt.safetensors", dir);
    snprintf(base, sizeof base, "%s/bench_ckpt.baseline", dir);
    double *t_save = calloc((size_t)reps, sizeof(double)),
           *t_base = calloc((size_t)reps, sizeof(double));
    double *t_load = calloc((size_t)reps, sizeof(double)),
           *t_ver = calloc((size_t)reps, sizeof(double));
    mxp_ckpt_save_args a = {.trainer = tr, .healthy = true};
    size_t bytes = 0;
    unsigned char *copy = NULL;
    for (int k = 0; k < reps; k++) {
        /* both sides write a new file; the previous one is removed untimed */
        unlink(path);
        double t0 = mxp_time_now();
        if (mxp_ckpt_save(path, &a, NULL, &err) != MXP_OK) die("save", &err);
        t_save[k] = mxp_time_now() - t0;
        if (!copy) {
            struct stat st;
            stat(path, &st);
            bytes = (size_t)st.st_size;
            copy = malloc(bytes);
            int fd = open(path, O_RDONLY);
            if (fd < 0 || read(fd, copy, bytes) != (ssize_t)bytes) die("read back", NULL);
            close(fd);
        }
        unlink(base);
        t0 = mxp_time_now();
        int fd = open(base, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        size_t done = 0;
        while (done < bytes) {
            ssize_t w = write(fd, copy + done, bytes - done);
            if (w <= 0) die("baseline write", NULL);
            done += (size_t)w;
        }
        if (fsync(fd) != 0) die("baseline fsync", NULL);
        close(fd);
        t_base[k] = mxp_time_now() - t0;
    }
    for (int k = 0; k < reps; k++) {
        double t0 = mxp_time_now();
        if (mxp_ckpt_load(path, tr, NULL, &err) != MXP_OK) die("load", &err);
        t_load[k] = mxp_time_now() - t0;
        t0 = mxp_time_now();
        if (mxp_ckpt_verify(path, model, NULL, &err) != MXP_OK) die("verify", &err);
        t_ver[k] = mxp_time_now() - t0;
    }
    double crc_hw = 0, crc_sw = 0;
    {
        double th[3], ts[3];
        volatile uint32_t sink = 0;
        for (int k = 0; k < 3; k++) {
            double t0 = mxp_time_now();
            sink ^= mxp_crc32c(0, copy, bytes);
            th[k] = mxp_time_now() - t0;
            t0 = mxp_time_now();
            sink ^= mxp_crc32c_generic(0, copy, bytes);
            ts[k] = mxp_time_now() - t0;
        }
        (void)sink;
        crc_hw = (double)bytes / median(th, 3) / 1e9;
        crc_sw = (double)bytes / median(ts, 3) / 1e9;
    }
    double ms = median(t_save, reps), mb = median(t_base, reps);
    double ml = median(t_load, reps), mv = median(t_ver, reps);
    printf("model: pendulum world model, hidden %lld x 3, %s, %zu parameters + AdamW m, v\n",
           (long long)hidden, mxp_precision_name(prec), mxp_model_num_params(model));
    printf("file:  %s, %.1f MB\n", path, (double)bytes / 1e6);
    printf("medians of %d:\n", reps);
    printf("  save (crc32c + write + fsync + rename + dir fsync) %8.1f ms\n", 1e3 * ms);
    printf("  baseline write() + fsync() of the same bytes       %8.1f ms\n", 1e3 * mb);
    printf("  save / baseline                                    %8.2f x   (target <= 1.5)\n",
           ms / mb);
    printf("  load + verify (page cache)                          %8.1f ms  %6.2f GB/s "
           "(target >= 1)\n",
           1e3 * ml, (double)bytes / ml / 1e9);
    printf("  verify only                                        %8.1f ms  %6.2f GB/s\n", 1e3 * mv,
           (double)bytes / mv / 1e9);
    printf("  crc32c %s %.2f GB/s, generic %.2f GB/s\n", mxp_crc32c_impl(), crc_hw, crc_sw);
    unlink(path);
    unlink(base);
    free(copy);
    free(x);
    free(y);
    free(t_save);
    free(t_base);
    free(t_load);
    free(t_ver);
    mxp_trainer_destroy(tr);
    mxp_model_destroy(model);
    return 0;
}
