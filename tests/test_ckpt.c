/* tests/test_ckpt.c: the checkpoint file format and its integrity.
 * - CRC32C: RFC 3720 vectors; the SSE4.2 and table implementations agree
 *   on random buffers of every length/alignment up to 300 bytes and more;
 * - safetensors round trip of all five dtypes, scalars and empty tensors,
 *   every tensor aligned to its element size, checked byte for byte
 *   against the bytes given (the oracle is the input itself);
 * - hostile inputs, each built by hand: a clear error naming the file and
 *   the problem, never a crash, and no allocation beyond the input's size
 *   (a counting allocator);
 * - every single-bit flip of a checkpoint's header and 2000 random bit
 *   flips of its data are detected;
 * - checkpoint-level checks: missing / extra tensor, shape mismatch
 *   against a model, weights dtype, non-finite values;
 * - atomic writes: injected ENOSPC / EROFS / fsync / rename failures leave
 *   the previous file byte-identical and no temp file behind;
 * - retention (keep-last-K + keep marks + newest healthy) and listing. */
#include <mixprec/mixprec.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* ---- helpers ----------------------------------------------------------- */

static char g_dir[256];

static void make_tmpdir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mxp_test_ckpt_XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static int count_entries(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, needle)) n++;
    if (d) closedir(d);
    return n;
}

/* A file from header text + data bytes, header length as given. */
static unsigned char *build(const char *header, uint64_t hlen, const void *data, size_t dn,
                            size_t *out_n) {
    size_t hn = strlen(header);
    unsigned char *b = calloc(8 + hn + dn + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, header, hn);
    if (dn) memcpy(b + 8 + hn, data, dn);
    *out_n = 8 + hn + dn;
    return b;
}

/* Counting allocator: the largest single request. */
static size_t g_max_alloc;
static void *count_alloc(void *u, size_t size, size_t align) {
    (void)u;
    if (size > g_max_alloc) g_max_alloc = size;
    void *p = NULL;
    return posix_memalign(&p, align, size) ? NULL : p;
}
static void count_free(void *u, void *p) {
    (void)u;
    free(p);
}

/* Parse must fail with a message naming the label and containing needle. */
static void expect_bad(const char *what, const unsigned char *b, size_t n, const char *needle) {
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    g_max_alloc = 0;
    mxp_status s = mxp_st_file_parse(b, n, "hostile.safetensors", &f, &err);
    if (s == MXP_OK) {
        s = mxp_st_file_verify(f, &err);
        if (s == MXP_OK) {
            mxp_ckpt_info info;
            s = mxp_ckpt_check(f, NULL, &info, &err);
        }
    }
    CHECK_MSG(s != MXP_OK, "%s: accepted", what);
    CHECK_MSG(strstr(err.msg, "hostile.safetensors") != NULL, "%s: message lacks the file: %s",
              what, err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
    /* the copy of the input, the JSON tree and small tables, never more */
    CHECK_MSG(g_max_alloc <= n + 4096 + 64, "%s: allocated %zu bytes for a %zu-byte input", what,
              g_max_alloc, n);
    mxp_st_file_destroy(f);
}

/* ---- CRC32C ------------------------------------------------------------------ */

static void test_crc(void) {
    CHECK(mxp_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(mxp_crc32c_generic(0, "123456789", 9) == 0xE3069283u);
    unsigned char z[32] = {0}, ff[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) {
        ff[i] = 0xff;
        inc[i] = (unsigned char)i;
        dec[i] = (unsigned char)(31 - i);
    }
    /* RFC 3720 B.4 */
    CHECK(mxp_crc32c_generic(0, z, 32) == 0x8A9136AAu);
    CHECK(mxp_crc32c_generic(0, ff, 32) == 0x62A8AB43u);
    CHECK(mxp_crc32c_generic(0, inc, 32) == 0x46DD794Eu);
    CHECK(mxp_crc32c_generic(0, dec, 32) == 0x113FDB5Cu);
    CHECK(mxp_crc32c(0, inc, 32) == 0x46DD794Eu);
    mxp_rng r;
    mxp_rng_init(&r, 7);
    size_t n = 70000;
    unsigned char *buf = malloc(n + 16);
    for (size_t i = 0; i < n + 16; i++) buf[i] = (unsigned char)mxp_rng_u32(&r);
    int bad = 0;
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len <= 300; len++)
            bad += mxp_crc32c(0, buf + off, len) != mxp_crc32c_generic(0, buf + off, len);
    CHECK(bad == 0);
    CHECK(mxp_crc32c(0, buf + 3, n) == mxp_crc32c_generic(0, buf + 3, n));
    /* around the three-stream block (3 x 4096 bytes) boundaries */
    size_t lens[] = {12287, 12288, 12289, 12295, 24576, 24583, 36864 + 5, 69999};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (size_t off = 0; off < 3; off++)
            bad += mxp_crc32c(0, buf + off, lens[i]) != mxp_crc32c_generic(0, buf + off, lens[i]);
    CHECK(bad == 0);
    /* chaining */
    uint32_t c = mxp_crc32c(0, buf, 1000);
    CHECK(mxp_crc32c(c, buf + 1000, 5000) == mxp_crc32c_generic(0, buf, 6000));
    free(buf);
    printf("crc32c implementation: %s\n", mxp_crc32c_impl());
}

/* ---- round trip ------------------------------------------------------------------ */

static void test_roundtrip(void) {
    mxp_error err = {0};
    mxp_st_writer *w = NULL;
    CHECK_OK(mxp_st_writer_create(&w, &err), &err);
    float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    uint16_t f16[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
    uint16_t bf16[3] = {0x3f80, 0xc2f7, 0x0080};
    uint8_t e4[7] = {0x00, 0x38, 0x7e, 0xfe, 0x01, 0x40, 0x80};
    uint8_t e5[3] = {0x3c, 0x7b, 0x84};
    float scalar = 42.0f;
    int64_t s23[2] = {2, 3}, s5[1] = {5}, s3[1] = {3}, s7[1] = {7}, s13[2] = {1, 3}, s0[1] = {0};
    /* add the 1-byte tensors first: the writer must still align the F32 ones */
    CHECK_OK(mxp_st_writer_add_tensor(w, "e4", MXP_DTYPE_F8_E4M3, 1, s7, e4, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "f16", MXP_DTYPE_F16, 1, s5, f16, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "f32", MXP_DTYPE_F32, 2, s23, f32, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "bf16", MXP_DTYPE_BF16, 1, s3, bf16, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "e5", MXP_DTYPE_F8_E5M2, 2, s13, e5, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "scalar", MXP_DTYPE_F32, 0, NULL, &scalar, &err), &err);
    CHECK_OK(mxp_st_writer_add_tensor(w, "empty", MXP_DTYPE_F32, 1, s0, NULL, &err), &err);
    CHECK(mxp_st_writer_add_tensor(w, "f32", MXP_DTYPE_F32, 1, s5, f32, &err) != MXP_OK);
    CHECK(mxp_st_writer_add_meta(w, "checksums", "x", &err) != MXP_OK);
    CHECK_OK(mxp_st_writer_add_meta(w, "note", "héllo \"quoted\"\n", &err), &err);
    char path[300];
    snprintf(path, sizeof path, "%s/rt.safetensors", g_dir);
    CHECK_OK(mxp_st_writer_write(w, path, &err), &err);
    mxp_st_writer_destroy(w);

    mxp_st_file *f = NULL;
    CHECK_OK(mxp_st_file_read(path, &f, &err), &err);
    if (!f) return;
    CHECK_OK(mxp_st_file_verify(f, &err), &err);
    CHECK(mxp_st_file_num_tensors(f) == 7);
    CHECK(strcmp(mxp_st_file_meta(f, "note"), "héllo \"quoted\"\n") == 0);
    CHECK(strcmp(mxp_st_file_meta(f, "checksum_algorithm"), "crc32c") == 0);
    struct {
        const char *name;
        mxp_dtype dt;
        int ndim;
        const void *data;
        size_t nbytes;
    } want[] = {{"f32", MXP_DTYPE_F32, 2, f32, sizeof f32},
                {"f16", MXP_DTYPE_F16, 1, f16, sizeof f16},
                {"bf16", MXP_DTYPE_BF16, 1, bf16, sizeof bf16},
                {"e4", MXP_DTYPE_F8_E4M3, 1, e4, sizeof e4},
                {"e5", MXP_DTYPE_F8_E5M2, 2, e5, sizeof e5},
                {"scalar", MXP_DTYPE_F32, 0, &scalar, 4},
                {"empty", MXP_DTYPE_F32, 1, NULL, 0}};
    const unsigned char *data0 = mxp_st_file_tensor(f, 0)->data;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const mxp_st_tensor *t = mxp_st_file_find(f, want[i].name);
        CHECK_MSG(t != NULL, "tensor %s missing", want[i].name);
        if (!t) continue;
        CHECK(t->dtype == want[i].dt && t->ndim == want[i].ndim && t->nbytes == want[i].nbytes);
        CHECK(want[i].nbytes == 0 || memcmp(t->data, want[i].data, want[i].nbytes) == 0);
        size_t esz = mxp_dtype_info(t->dtype)->size;
        CHECK_MSG(((const unsigned char *)t->data - data0) % (ptrdiff_t)esz == 0 &&
                      ((uintptr_t)data0 % 8) == 0,
                  "tensor %s not aligned to %zu", t->name, esz);
    }
    CHECK(mxp_st_tensor_get(mxp_st_file_find(f, "f16"), 0) == 1.0f);
    CHECK(mxp_st_tensor_get(mxp_st_file_find(f, "bf16"), 0) == 1.0f);
    CHECK(mxp_st_tensor_get(mxp_st_file_find(f, "e4"), 1) == 1.0f);
    CHECK(mxp_st_tensor_get(mxp_st_file_find(f, "e5"), 0) == 1.0f);
    CHECK(mxp_st_file_find(f, "nope") == NULL);
    mxp_st_file_destroy(f);
}

/* ---- hostile inputs ---------------------------------------------------------------- */

static void test_hostile(void) {
    mxp_set_allocator(&(mxp_allocator){count_alloc, count_free, NULL});
    float d4[4] = {1, 2, 3, 4};
    size_t n;
    unsigned char *b;
    const char *ok_h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    /* the base case parses */
    b = build(ok_h, strlen(ok_h), d4, 16, &n);
    mxp_st_file *f = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_st_file_parse(b, n, "ok", &f, &err), &err);
    mxp_st_file_destroy(f);
    expect_bad("truncated data", b, n - 3, "run past the data section");
    expect_bad("tiny file", b, 5, "8-byte header length");
    free(b);
#define BAD(what, hdr, hl, dn, needle)                                                             \
    do {                                                                                           \
        b = build(hdr, hl, d4, dn, &n);                                                            \
        expect_bad(what, b, n, needle);                                                            \
        free(b);                                                                                   \
    } while (0)
    BAD("header beyond file", ok_h, strlen(ok_h) + 100, 16, "runs past the end");
    BAD("multi-GB header length", ok_h, 5000000000ull, 16, "exceeds the 100000000-byte limit");
    BAD("huge u64 header length", ok_h, UINT64_MAX, 16, "exceeds");
    BAD("overlap",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        strlen("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}"),
        12, "overlap");
    const char *h;
#define BADH(what, hdr, dn, needle) BAD(what, hdr, strlen(hdr), dn, needle)
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1000],\"data_offsets\":[16,4016]}}";
    BADH("out of bounds", h, 16, "run past the data section");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    BADH("gap", h, 16, "unclaimed");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    BADH("trailing bytes", h, 16, "trailing");
    h = "{\"a\":{\"dtype\":\"F33\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    BADH("unknown dtype", h, 16, "unknown or unsupported dtype 'F33'");
    h = "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    BADH("unsupported dtype", h, 16, "unsupported dtype 'I64'");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,16]}}";
    BADH("shape overflow", h, 16, "overflows");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}";
    BADH("negative dim", h, 16, "not a non-negative integer");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}";
    BADH("size mismatch", h, 16, "need 12");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}";
    BADH("reversed offsets", h, 16, "end before");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,16]}}";
    BADH("too many dims", h, 16, "at most 8");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"x\":1}}";
    BADH("extra field", h, 16, "unexpected field 'x'");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}";
    BADH("missing offsets", h, 16, "lacks 'data_offsets'");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    BADH("duplicate key", h, 16, "duplicate");
    h = "{\"__metadata__\":{\"k\":3},\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"
        "}}";
    BADH("metadata not string", h, 16, "is not a string");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}\xff}";
    BADH("non-UTF-8", h, 16, "not valid UTF-8");
    h = "{\"\xc0\xaf\":1}";
    BADH("overlong UTF-8", h, 16, "not valid UTF-8");
    h = "[1,2]";
    BADH("not an object", h, 16, "does not start with '{'");
    h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}";
    BADH("broken JSON", h, 16, "not valid JSON");
    h = "{\"a\":5}";
    BADH("entry not an object", h, 16, "is not an object");
    char deep[4096];
    size_t at = (size_t)snprintf(deep, sizeof deep, "{\"a\":");
    for (int i = 0; i < 1000; i++) deep[at++] = '[';
    for (int i = 0; i < 1000; i++) deep[at++] = ']';
    deep[at++] = '}';
    deep[at] = 0;
    BADH("deeply nested", deep, 16, "nests more than");
    /* a valid safetensors file without mixprec checksums */
    BADH("no checksums", ok_h, 16, "no checksums");
    /* well-formed safetensors, but not a mixprec checkpoint */
    mxp_set_allocator(NULL);
#undef BAD
#undef BADH
}

/* ---- a tiny trainer and its checkpoint ------------------------------------------ */

static mxp_model *g_model;
static mxp_trainer *g_tr;

static void make_trainer(mxp_precision p, int64_t hidden) {
    mxp_error err = {0};
    mxp_model_spec spec =
        mxp_model_spec_mlp(3, hidden, 2, 2, MXP_LAYER_TANH, true, MXP_LOSS_MSE, 4);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    CHECK_OK(mxp_model_create(&spec, &pol, 11, &g_model, &err), &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    CHECK_OK(mxp_trainer_create(g_model, &tc, &g_tr, &err), &err);
    /* one real step so the moments are non-zero */
    float x[12], y[8];
    for (int i = 0; i < 12; i++) x[i] = 0.1f * (float)i - 0.5f;
    for (int i = 0; i < 8; i++) y[i] = 0.2f * (float)i;
    mxp_batch bt = {x, y, NULL, 4};
    mxp_step_result res;
    CHECK_OK(mxp_trainer_step(g_tr, &bt, 1, &res, &err), &err);
}

static void free_trainer(void) {
    mxp_trainer_destroy(g_tr);
    mxp_model_destroy(g_model);
    g_tr = NULL;
    g_model = NULL;
}

static void save_at(const char *path, int64_t step, bool healthy) {
    mxp_error err = {0};
    mxp_trainer_state ts;
    mxp_trainer_get_state(g_tr, &ts);
    ts.training_steps = ts.optimizer_steps = step;
    CHECK_OK(mxp_trainer_set_state(g_tr, &ts, &err), &err);
    mxp_ckpt_save_args a = {.trainer = g_tr, .healthy = healthy,
                            .guard_state = "{\"rules\":\"ok\"}"};
    CHECK_OK(mxp_ckpt_save(path, &a, NULL, &err), &err);
}

static void test_bitflips(void) {
    make_trainer(MXP_PRECISION_MIXED_BF16, 6);
    char path[300];
    snprintf(path, sizeof path, "%s/flip.safetensors", g_dir);
    save_at(path, 3, true);
    size_t n;
    unsigned char *b = slurp(path, &n);
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    CHECK_OK(mxp_st_file_parse(b, n, "flip", &f, &err), &err);
    mxp_ckpt_info info;
    CHECK_OK(mxp_ckpt_check(f, g_model, &info, &err), &err);
    CHECK(info.step == 3 && info.healthy && info.precision == MXP_PRECISION_MIXED_BF16);
    mxp_st_file_destroy(f);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    size_t header_end = 8 + (size_t)hl, undetected = 0, tried = 0;
    mxp_rng r;
    mxp_rng_init(&r, 99);
    for (size_t k = 0; k < header_end * 8 + 2000; k++) {
        size_t bit = k < header_end * 8
                         ? k
                         : header_end * 8 + mxp_rng_below(&r, (uint32_t)((n - header_end) * 8));
        b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        f = NULL;
        mxp_status s = mxp_st_file_parse(b, n, "flip", &f, &err);
        if (s == MXP_OK) s = mxp_ckpt_check(f, g_model, &info, &err);
        mxp_st_file_destroy(f);
        if (s == MXP_OK && undetected++ < 5) printf("undetected flip at bit %zu\n", bit);
        tried++;
        b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    CHECK_MSG(undetected == 0, "%zu of %zu bit flips went undetected", undetected, tried);
    printf("bit flips: %zu tried (all %zu header bits), %zu undetected\n", tried, header_end * 8,
           undetected);
    free(b);
    free_trainer();
}

/* Write a checkpoint-like file from a real one with one change. */
typedef enum { DROP, EXTRA, RESHAPE, RETYPE, NONFINITE } edit_kind;

static void rewrite(const char *src, const char *dst, edit_kind kind, const char *target) {
    mxp_error err = {0};
    mxp_st_file *f = NULL;
    CHECK_OK(mxp_st_file_read(src, &f, &err), &err);
    mxp_st_writer *w = NULL;
    CHECK_OK(mxp_st_writer_create(&w, &err), &err);
    for (int i = 0; i < mxp_st_file_num_meta(f); i++) {
        const char *k = mxp_st_file_meta_key(f, i);
        if (strcmp(k, "checksums") && strcmp(k, "checksum_algorithm") && strcmp(k, "header_crc32c"))
            CHECK_OK(mxp_st_writer_add_meta(w, k, mxp_st_file_meta_value(f, i), &err), &err);
    }
    static float junk[64] = {1, 2, 3, 4};
    static uint16_t half[4096];
    for (int i = 0; i < mxp_st_file_num_tensors(f); i++) {
        const mxp_st_tensor *t = mxp_st_file_tensor(f, i);
        bool hit = strcmp(t->name, target) == 0;
        if (hit && kind == DROP) continue;
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 0};
        const void *data = t->data;
        mxp_dtype dt = t->dtype;
        if (hit && kind == RESHAPE) {
            int64_t s1[1] = {(int64_t)t->numel};
            CHECK_OK(mxp_st_writer_add_tensor(w, t->name, dt, 1, s1, data, &err), &err);
            continue;
        }
        if (hit && kind == RETYPE) {
            for (size_t e = 0; e < t->numel && e < 4096; e++)
                half[e] = mxp_f32_to_bf16(mxp_st_tensor_get(t, e)).bits;
            dt = MXP_DTYPE_BF16;
            data = half;
        }
        if (hit && kind == NONFINITE) {
            memcpy(junk, t->data, t->nbytes < sizeof junk ? t->nbytes : sizeof junk);
            junk[0] = NAN;
            data = junk;
        }
        CHECK_OK(mxp_st_writer_add_tensor(w, t->name, dt, t->ndim, shape, data, &err), &err);
    }
    if (kind == EXTRA) {
        int64_t s4[1] = {4};
        CHECK_OK(mxp_st_writer_add_tensor(w, target, MXP_DTYPE_F32, 1, s4, junk, &err), &err);
    }
    CHECK_OK(mxp_st_writer_write(w, dst, &err), &err);
    mxp_st_writer_destroy(w);
    mxp_st_file_destroy(f);
}

static void expect_check_fails(const char *path, const mxp_model *m, const char *needle) {
    mxp_error err = {0};
    mxp_ckpt_info info;
    mxp_status s = mxp_ckpt_verify(path, m, &info, &err);
    CHECK_MSG(s != MXP_OK, "%s: accepted (%s)", path, needle);
    CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, needle), "%s: message lacks '%s': %s", path,
              needle, err.msg);
}

static void test_model_checks(void) {
    make_trainer(MXP_PRECISION_FP32, 6);
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/good.safetensors", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", g_dir);
    save_at(good, 1, true);
    mxp_error err = {0};
    CHECK_OK(mxp_ckpt_verify(good, g_model, NULL, &err), &err);
    rewrite(good, bad, DROP, "layers.0.bias");
    expect_check_fails(bad, g_model, "tensor 'layers.0.bias' is missing");
    expect_check_fails(bad, NULL, "has no weight tensor 'layers.0.bias'");
    rewrite(good, bad, DROP, "optim.v.layers.3.weight");
    expect_check_fails(bad, g_model, "'optim.v.layers.3.weight' is missing");
    rewrite(good, bad, EXTRA, "layers.99.weight");
    expect_check_fails(bad, g_model, "unexpected tensor 'layers.99.weight'");
    rewrite(good, bad, RESHAPE, "layers.0.weight");
    expect_check_fails(bad, NULL, "'optim.m.layers.0.weight' has shape [6, 3] but its weight [18]");
    expect_check_fails(bad, g_model, "'layers.0.weight' has shape [18]; the model expects [6, 3]");
    rewrite(good, bad, RETYPE, "layers.0.weight");
    expect_check_fails(bad, g_model, "weights must be F32");
    rewrite(good, bad, NONFINITE, "optim.m.layers.0.bias");
    expect_check_fails(bad, g_model, "non-finite");
    /* a model of another width */
    mxp_model *other = NULL;
    mxp_model_spec spec = mxp_model_spec_mlp(3, 7, 2, 2, MXP_LAYER_TANH, true, MXP_LOSS_MSE, 4);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    CHECK_OK(mxp_model_create(&spec, &pol, 1, &other, &err), &err);
    expect_check_fails(good, other, "the model expects [7, 3]");
    mxp_model_destroy(other);
    free_trainer();
}

/* ---- atomic writes under failure ---------------------------------------------------- */

static void test_faults(void) {
    make_trainer(MXP_PRECISION_MIXED_FP16, 6);
    char path[300];
    snprintf(path, sizeof path, "%s/fault/ckpt-000000000001.safetensors", g_dir);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/fault", g_dir);
    mkdir(sub, 0755);
    save_at(path, 1, true);
    size_t n0;
    unsigned char *before = slurp(path, &n0);
    struct {
        mxp_io_fault kind;
        uint64_t after;
        int e;
        const char *needle;
    } cases[] = {{MXP_IO_FAULT_WRITE, 0, ENOSPC, "No space left"},
                 {MXP_IO_FAULT_WRITE, 100, ENOSPC, "No space left"},
                 {MXP_IO_FAULT_WRITE, 3000, ENOSPC, "No space left"},
                 {MXP_IO_FAULT_OPEN, 0, EROFS, "Read-only file system"},
                 {MXP_IO_FAULT_FSYNC, 0, EIO, "fsync"},
                 {MXP_IO_FAULT_RENAME, 0, EACCES, "rename"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* the trainer moves on, so a successful write would change the bytes */
        mxp_error err = {0};
        mxp_st_set_io_fault(cases[i].kind, cases[i].after, cases[i].e);
        mxp_trainer_state ts;
        mxp_trainer_get_state(g_tr, &ts);
        ts.training_steps = ts.optimizer_steps = 2 + (int64_t)i;
        mxp_trainer_set_state(g_tr, &ts, NULL);
        mxp_ckpt_save_args a = {.trainer = g_tr, .healthy = true};
        mxp_status s = mxp_ckpt_save(path, &a, NULL, &err);
        mxp_st_set_io_fault(MXP_IO_FAULT_NONE, 0, 0);
        CHECK_MSG(s == MXP_ERR_IO, "fault %zu: status %d", i, (int)s);
        CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, cases[i].needle),
                  "fault %zu: message: %s", i, err.msg);
        size_t n1;
        unsigned char *after = slurp(path, &n1);
        CHECK_MSG(after && n1 == n0 && memcmp(before, after, n0) == 0,
                  "fault %zu: previous checkpoint changed", i);
        free(after);
        CHECK_MSG(count_entries(sub, ".tmp-") == 0, "fault %zu: temp file left behind", i);
        CHECK_OK(mxp_ckpt_verify(path, g_model, NULL, &err), &err);
    }
    free(before);
    free_trainer();
}

/* ---- retention ------------------------------------------------------------------------ */

static void test_retention(void) {
    make_trainer(MXP_PRECISION_FP32, 5);
    char dir[300], p[400];
    snprintf(dir, sizeof dir, "%s/ret", g_dir);
    mxp_ckpt_policy pol = {{0}, 0, 0, 3};
    snprintf(pol.dir, sizeof pol.dir, "%s", dir);
    mxp_ckpt_manager *m = NULL;
    mxp_error err = {0};
    /* a stale temp file of a killed save, and an unrelated file */
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(p, sizeof p, "%s/.ckpt-000000000007.safetensors.tmp-1-0", dir);
    fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    fclose(fopen(p, "w"));
    CHECK_OK(mxp_ckpt_manager_create(&pol, &m, &err), &err);
    CHECK(count_entries(dir, ".tmp-") == 0);
    for (int64_t step = 1; step <= 10; step++) {
        CHECK_OK(mxp_ckpt_path_for(dir, step, p, sizeof p, &err), &err);
        save_at(p, step, step == 4);
        if (step == 2) CHECK_OK(mxp_ckpt_mark_keep(p, true, &err), &err);
        CHECK_OK(mxp_ckpt_prune(dir, 3, &err), &err);
    }
    mxp_ckpt_entry *e = NULL;
    size_t n = 0;
    CHECK_OK(mxp_ckpt_list(dir, &e, &n, &err), &err);
    int64_t want[] = {2, 4, 8, 9, 10};
    CHECK_MSG(n == 5, "%zu checkpoints kept", n);
    for (size_t i = 0; i < n && i < 5; i++) CHECK(e[i].step == want[i]);
    CHECK(n >= 1 && e[0].keep && !e[1].keep);
    mxp_free(e);
    /* newest verified and newest healthy */
    char path[MXP_CKPT_PATH_MAX];
    mxp_ckpt_info info;
    CHECK_OK(mxp_ckpt_find_latest(dir, false, g_model, path, sizeof path, &info, &err), &err);
    CHECK(info.step == 10 && !info.healthy);
    CHECK_OK(mxp_ckpt_find_latest(dir, true, g_model, path, sizeof path, &info, &err), &err);
    CHECK(info.step == 4 && info.healthy);
    /* corrupt the newest: it is skipped */
    CHECK_OK(mxp_ckpt_path_for(dir, 10, p, sizeof p, &err), &err);
    FILE *fp = fopen(p, "r+b");
    fseek(fp, -5, SEEK_END);
    fputc('X', fp);
    fclose(fp);
    CHECK_OK(mxp_ckpt_find_latest(dir, false, g_model, path, sizeof path, &info, &err), &err);
    CHECK(info.step == 9);
    /* manager: every 2 steps */
    mxp_ckpt_manager_destroy(m);
    mxp_free(NULL);
    test_rm_rf(dir);
    pol.every_steps = 2;
    pol.keep_last = 2;
    CHECK_OK(mxp_ckpt_manager_create(&pol, &m, &err), &err);
    int saves = 0;
    for (int64_t step = 1; step <= 7; step++) {
        mxp_trainer_state ts;
        mxp_trainer_get_state(g_tr, &ts);
        ts.training_steps = ts.optimizer_steps = step;
        mxp_trainer_set_state(g_tr, &ts, NULL);
        bool saved = false;
        CHECK_OK(mxp_ckpt_manager_after_step(m, g_tr, NULL, NULL, step == 7, &saved, &err), &err);
        saves += saved;
    }
    CHECK(saves == 4); /* 2, 4, 6 and the forced 7 */
    CHECK_OK(mxp_ckpt_list(dir, &e, &n, &err), &err);
    CHECK(n == 2 && e[0].step == 6 && e[1].step == 7);
    mxp_free(e);
    mxp_ckpt_manager_destroy(m);
    /* bad policies */
    pol.keep_last = 0;
    CHECK(mxp_ckpt_manager_create(&pol, &m, &err) == MXP_ERR_INVALID_ARG);
    pol.keep_last = 1;
    snprintf(pol.dir, sizeof pol.dir, "%s/notes.txt/sub", dir);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    fclose(fopen(p, "w"));
    CHECK(mxp_ckpt_manager_create(&pol, &m, &err) == MXP_ERR_IO);
    CHECK(strstr(err.msg, "notes.txt") != NULL);
    free_trainer();
}

int main(void) {
    make_tmpdir();
    test_crc();
    test_roundtrip();
    test_hostile();
    test_bitflips();
    test_model_checks();
    test_faults();
    test_retention();
    test_rm_rf(g_dir);
    return test_finish("test_ckpt");
}
