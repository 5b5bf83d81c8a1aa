/* tests/test_dataset.c: user data files (safetensors, .npz) and the
 * in-memory dataset, against files written by NumPy (tests/data_cases.py run
 * by /usr/bin/python3): every value read back equals the formula the script
 * used, and every malformed class gets its named error. Skips (77) when
 * /usr/bin/python3 with numpy is absent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/dataset.h>

#include "testutil.h"

static char g_dir[] = "/tmp/mxp_dataset_XXXXXX";

static double ramp(int64_t i) { return (double)i * 0.25 - 1.0; }

static const char *path_of(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

/* Read `name`, optionally check it as workload k; the whole must fail with
 * status want and a message containing `text`. */
static void expect_fail(const char *name, int k, mxp_status want, const char *text) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    mxp_status s = mxp_dataset_read(path_of(name), &d, &err);
    if (s == MXP_OK) {
        CHECK_MSG(k >= 0, "%s: read succeeded, expected %s", name, text);
        if (k >= 0) s = mxp_dataset_check(d, (mxp_dataset_kind)k, NULL, &err);
        mxp_dataset_destroy(d);
    } else {
        CHECK_MSG(d == NULL, "%s: *out set on error", name);
    }
    CHECK_MSG(s == want, "%s: status %d, expected %d (%s)", name, (int)s, (int)want, err.msg);
    CHECK_MSG(strstr(err.msg, text) != NULL, "%s: message '%s' lacks '%s'", name, err.msg, text);
    if (s != MXP_OK && strstr(err.msg, text)) printf("  ok %-22s %s\n", name, err.msg);
}

static void check_ramp(const mxp_array *a) {
    CHECK(a != NULL);
    if (!a) return;
    int bad = 0;
    for (int64_t i = 0; i < a->numel; i++) bad += mxp_array_get_f64(a, i) != ramp(i);
    CHECK_MSG(bad == 0, "array %s: %d values differ from the ramp", a->name, bad);
}

static void test_world_model(const char *name, mxp_array_dtype fdt, mxp_array_dtype idt) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_read(path_of(name), &d, &err), &err);
    if (!d) return;
    CHECK(mxp_dataset_num_arrays(d) == 4);
    const mxp_array *obs = mxp_dataset_find(d, "obs"), *len = mxp_dataset_find(d, "lengths");
    CHECK(obs && obs->dtype == fdt && obs->ndim == 3 && obs->shape[0] == 4 &&
          obs->shape[1] == 6 && obs->shape[2] == 3);
    CHECK(len && len->dtype == idt && len->ndim == 1 && len->shape[0] == 4);
    check_ramp(obs);
    check_ramp(mxp_dataset_find(d, "actions"));
    check_ramp(mxp_dataset_find(d, "rewards"));
    static const int64_t want_len[] = {5, 3, 5, 1};
    for (int e = 0; len && e < 4; e++) CHECK(mxp_array_get_i64(len, e) == want_len[e]);
    mxp_dataset_layout lay;
    CHECK_OK(mxp_dataset_check(d, MXP_DATASET_WORLD_MODEL, &lay, &err), &err);
    CHECK(lay.episodes == 4 && lay.max_steps == 5 && lay.state_dim == 3 && lay.action_dim == 2);
    CHECK(lay.transitions == 14 && lay.has_lengths);
    /* the same arrays are not a classifier */
    CHECK(mxp_dataset_check(d, MXP_DATASET_CLASSIFIER, NULL, &err) == MXP_ERR_FORMAT);
    CHECK(strstr(err.msg, "unexpected array") != NULL);
    float f[6];
    mxp_array_to_f32(obs, 3, 6, f);
    for (int i = 0; i < 6; i++) CHECK(f[i] == (float)ramp(3 + i));
    mxp_dataset_destroy(d);
}

static void test_supervised(void) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    mxp_dataset_layout lay;
    CHECK_OK(mxp_dataset_read(path_of("cls.safetensors"), &d, &err), &err);
    if (d) {
        CHECK_OK(mxp_dataset_check(d, MXP_DATASET_CLASSIFIER, &lay, &err), &err);
        CHECK(lay.n == 6 && lay.in_dim == 4 && lay.out_dim == 3 && lay.n_val == 2);
        check_ramp(mxp_dataset_find(d, "x"));
        const mxp_array *y = mxp_dataset_find(d, "y");
        CHECK(y && y->dtype == MXP_ARRAY_I64);
        for (int i = 0; y && i < 6; i++) CHECK(mxp_array_get_i64(y, i) == i % 3);
        /* float y: not a regressor target of rank 2 */
        CHECK(mxp_dataset_check(d, MXP_DATASET_REGRESSOR, NULL, &err) == MXP_ERR_FORMAT);
        mxp_dataset_destroy(d);
    }
    d = NULL;
    CHECK_OK(mxp_dataset_read(path_of("reg.safetensors"), &d, &err), &err);
    if (d) {
        CHECK_OK(mxp_dataset_check(d, MXP_DATASET_REGRESSOR, &lay, &err), &err);
        CHECK(lay.n == 6 && lay.in_dim == 4 && lay.out_dim == 2 && lay.n_val == 0);
        CHECK(mxp_dataset_find(d, "x")->dtype == MXP_ARRAY_F64);
        check_ramp(mxp_dataset_find(d, "x"));
        check_ramp(mxp_dataset_find(d, "y"));
        mxp_dataset_destroy(d);
    }
}

static void test_memory(void) {
    mxp_error err = {0};
    mxp_dataset *d = NULL;
    CHECK_OK(mxp_dataset_create(&d, &err), &err);
    if (!d) return;
    float x[12];
    int32_t y[3] = {0, 1, 1};
    for (int i = 0; i < 12; i++) x[i] = (float)ramp(i);
    int64_t xs[2] = {3, 4}, ys[1] = {3};
    CHECK_OK(mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, xs, x, &err), &err);
    x[0] = 99; /* copied: the dataset keeps the old value */
    CHECK_OK(mxp_dataset_add(d, "y", MXP_ARRAY_I32, 1, ys, y, &err), &err);
    CHECK(strcmp(mxp_dataset_label(d), "memory") == 0);
    check_ramp(mxp_dataset_find(d, "x"));
    mxp_dataset_layout lay;
    CHECK_OK(mxp_dataset_check(d, MXP_DATASET_CLASSIFIER, &lay, &err), &err);
    CHECK(lay.out_dim == 2 && lay.n == 3);
    /* errors, each leaving d unchanged */
    CHECK(mxp_dataset_add(d, "x", MXP_ARRAY_F32, 2, xs, x, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "twice"));
    int64_t zero[2] = {0, 4};
    CHECK(mxp_dataset_add(d, "x_val", MXP_ARRAY_F32, 2, zero, x, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "empty"));
    CHECK(mxp_dataset_add(d, "x_val", (mxp_array_dtype)7, 2, xs, x, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "dtype"));
    CHECK(mxp_dataset_add(d, "x_val", MXP_ARRAY_F32, 9, xs, x, &err) == MXP_ERR_INVALID_ARG);
    x[5] = NAN;
    CHECK(mxp_dataset_add(d, "x_val", MXP_ARRAY_F32, 2, xs, x, &err) == MXP_ERR_NONFINITE);
    CHECK(strstr(err.msg, "flat index 5"));
    CHECK(mxp_dataset_num_arrays(d) == 2);
    mxp_dataset_destroy(d);
    mxp_dataset_destroy(NULL);
}

int main(void) {
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("test_dataset: SKIP (no /usr/bin/python3)\n");
        return 77;
    }
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/data_cases.py %s", MXP_TEST_SRC_DIR, g_dir);
    if (system(cmd) != 0) {
        printf("test_dataset: SKIP (numpy could not write the cases)\n");
        test_rm_rf(g_dir);
        return 77;
    }
    test_world_model("wm.npz", MXP_ARRAY_F32, MXP_ARRAY_I64);
    test_world_model("wm_z.npz", MXP_ARRAY_F32, MXP_ARRAY_I64);
    test_world_model("wm64.npz", MXP_ARRAY_F64, MXP_ARRAY_I32);
    test_supervised();
    test_memory();

    enum { WM = MXP_DATASET_WORLD_MODEL, CL = MXP_DATASET_CLASSIFIER, RG = MXP_DATASET_REGRESSOR };
    const mxp_status F = MXP_ERR_FORMAT;
    expect_fail("wm_rank.npz", WM, F, "array 'obs' has rank 2");
    expect_fail("wm_shape.npz", WM, F, "shape mismatch: array 'actions'");
    expect_fail("wm_steps.npz", WM, F, "shape mismatch: array 'actions'");
    expect_fail("wm_missing.npz", WM, F, "missing array 'rewards'");
    expect_fail("wm_extra.npz", WM, F, "unexpected array 'reward'");
    expect_fail("wm_lengths.npz", WM, F, "lengths[1] = 0");
    expect_fail("wm_lendtype.npz", WM, F, "array 'lengths' has dtype float64");
    expect_fail("wm_nan.npz", -1, F, "array 'obs' holds NaN or Inf");
    expect_fail("wm_inf.npz", -1, F, "array 'rewards' holds NaN or Inf");
    expect_fail("empty.npz", -1, F, "array 'obs' is empty");
    expect_fail("f16.npz", -1, F, "has dtype '<f2'");
    expect_fail("u8.npz", -1, F, "has dtype '|u1'");
    expect_fail("bigendian.npz", -1, F, "is big-endian");
    expect_fail("fortran.npz", -1, F, "Fortran order");
    expect_fail("trunc.npz", -1, F, "truncated");
    expect_fail("crc.npz", -1, F, "corrupted");
    expect_fail("cls_float_y.npz", CL, F, "array 'y' has dtype float32");
    expect_fail("cls_neg.npz", CL, F, "y[2] = -1");
    expect_fail("cls_rows.npz", CL, F, "shape mismatch: array 'y'");
    expect_fail("cls_valonly.npz", CL, F, "missing array 'y_val'");
    expect_fail("cls_vald.npz", CL, F, "shape mismatch: array 'x_val'");
    expect_fail("reg_k.npz", RG, F, "shape mismatch: array 'y_val'");
    expect_fail("reg_f64big.npz", RG, F, "beyond float32's range");
    expect_fail("st_trunc.safetensors", -1, F, "truncated");
    expect_fail("st_hlen.safetensors", -1, F, "header length");
    expect_fail("st_bf16.safetensors", -1, F, "has dtype 'BF16'");
    expect_fail("st_nan.safetensors", -1, F, "array 'x' holds NaN or Inf");
    /* files of another kind are named as what they look like */
    expect_fail("garbage.bin", -1, F, "looks like text (CSV or JSON?); accepted: .npz");
    expect_fail("table.csv", -1, F, "looks like text (CSV or JSON?); accepted: .npz");
    expect_fail("one.npy", -1, F, "looks like a single .npy array; accepted: .npz");
    expect_fail("empty.bin", -1, F, "looks like an empty file");
    expect_fail("binary.bin", -1, F, "neither safetensors nor .npz");
    expect_fail("no_such_file.npz", -1, MXP_ERR_IO, "cannot open");
    test_rm_rf(g_dir);
    return test_finish("test_dataset");
}
