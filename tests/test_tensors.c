/* tests/test_tensors.c: named tensors (model.h "named tensors", train.h
 * "named tensors of a trainer"; docs/design.md "Who owns memory").
 *
 * A model of two linear layers 3 -> 4 -> 2, whose layout is worked out by
 * hand: layers.0.weight [4, 3] at 0, layers.0.bias [4] at 12,
 * layers.1.weight [2, 4] at 16, layers.1.bias [2] at 24, P = 26.
 * - enumeration: names, roles, dtypes, shapes and offsets of a trainer
 *   (AdamW: 12 tensors in checkpoint order; SGD: 8, no optim.v).
 * - values: set/get round trips against hand-computed bits (0.1f is
 *   0x3DCCCCCD, its BF16 RNE 0x3DCD, its FP16 RNE 0x2E66); the working copy
 *   follows a set of the master; a pure mode stores RNE; discarded grads
 *   read as zeros; zero of one optimizer tensor touches only its range;
 *   copy_params widens exactly.
 * - refusals (each MXP_ERR_INVALID_ARG or _UNSUPPORTED, with the name in
 *   the message, nothing changed): unknown name, wrong size (the message
 *   gives the shape and the byte count), a dtype neither the storage one
 *   nor F32, NULL buffer, role out of range, an optimizer role on the
 *   model, the master of a pure mode, grads of an inference model, a set
 *   of the working weights beside a master, optim.v under SGD.
 * - the transfer counter: calls and bytes of each successful get/set
 *   (refusals, zero and copy_params count nothing); a checkpoint save is
 *   exactly one get per slab (3 under AdamW) and a load one set per slab.
 */
#include <mixprec/mixprec.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define P 26

static mxp_model_spec spec_3_4_2(void) {
    mxp_model_spec s = {0};
    s.in_dim = 3;
    s.max_batch = 4;
    s.n_layers = 2;
    s.layers[0] = (mxp_layer_spec){MXP_LAYER_LINEAR, 4, 0.0};
    s.layers[1] = (mxp_layer_spec){MXP_LAYER_LINEAR, 2, 0.0};
    s.loss = MXP_LOSS_MSE;
    s.layernorm_eps = 1e-5f;
    return s;
}

static mxp_model *make(mxp_precision p, bool inference) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model_spec s = spec_3_4_2();
    mxp_model *m = NULL;
    mxp_error err = {0};
    if (inference)
        CHECK_OK(mxp_model_create_inference(&s, &pol, 7, &m, &err), &err);
    else
        CHECK_OK(mxp_model_create(&s, &pol, 7, &m, &err), &err);
    if (!m) exit(test_finish("test_tensors"));
    return m;
}

static mxp_trainer *make_trainer(mxp_model *m, mxp_optim_kind k) {
    mxp_trainer_config c = mxp_trainer_config_default();
    c.optim.kind = k;
    mxp_trainer *t = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_trainer_create(m, &c, &t, &err), &err);
    if (!t) exit(test_finish("test_tensors"));
    return t;
}

static uint16_t u16_of(const void *p, size_t i) {
    uint16_t v;
    memcpy(&v, (const unsigned char *)p + 2 * i, 2);
    return v;
}

/* The expected refusal: status want, and the message contains `needle`. */
static void refused(mxp_status got, mxp_status want, const mxp_error *err, const char *needle,
                    int line) {
    CHECK_MSG(got == want, "line %d: status %d, expected %d (%s)", line, (int)got, (int)want,
              test_errmsg(err));
    CHECK_MSG(strstr(test_errmsg(err), needle) != NULL, "line %d: message '%s' lacks '%s'", line,
              test_errmsg(err), needle);
}
#define REFUSED(expr, want, needle)                                                                \
    do {                                                                                           \
        mxp_error e_ = {0};                                                                        \
        mxp_error *err_ = &e_;                                                                     \
        (void)err_;                                                                                \
        refused((expr), (want), &e_, (needle), __LINE__);                                          \
    } while (0)

static void test_enumeration(void) {
    static const char *const names[4] = {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                         "layers.1.bias"};
    static const size_t off[4] = {0, 12, 16, 24}, cnt[4] = {12, 4, 8, 2};
    static const int ndim[4] = {2, 1, 2, 1};
    static const int64_t sh0[4] = {4, 4, 2, 2}, sh1[4] = {3, 0, 4, 0};
    mxp_model *m = make(MXP_PRECISION_BF16, false);
    mxp_trainer *t = make_trainer(m, MXP_OPTIM_ADAMW);
    mxp_error err = {0};
    CHECK(mxp_model_num_params(m) == P);
    CHECK(mxp_trainer_num_tensors(t) == 12);
    static const char *const prefix[3] = {"", "optim.m.", "optim.v."};
    static const mxp_tensor_role roles[3] = {MXP_TENSOR_PARAM, MXP_TENSOR_OPTIM_M,
                                             MXP_TENSOR_OPTIM_V};
    for (int i = 0; i < 12; i++) {
        mxp_tensor_desc d;
        CHECK_OK(mxp_trainer_tensor_desc(t, i, &d, &err), &err);
        char want[64];
        snprintf(want, sizeof want, "%s%s", prefix[i / 4], names[i % 4]);
        CHECK_MSG(strcmp(d.name, want) == 0, "tensor %d is '%s', expected '%s'", i, d.name, want);
        CHECK(strcmp(d.param, names[i % 4]) == 0);
        CHECK(d.role == roles[i / 4]);
        /* pure bf16: the parameters of record are BF16, the moments F32 */
        CHECK(d.dtype == (i < 4 ? MXP_DTYPE_BF16 : MXP_DTYPE_F32));
        CHECK(d.offset == off[i % 4] && d.count == cnt[i % 4] && d.ndim == ndim[i % 4]);
        CHECK(d.shape[0] == sh0[i % 4] && (d.ndim == 1 || d.shape[1] == sh1[i % 4]));
        CHECK(mxp_model_tensor_find(m, names[i % 4]) == i % 4);
    }
    mxp_tensor_desc d;
    REFUSED(mxp_trainer_tensor_desc(t, 12, &d, err_), MXP_ERR_INVALID_ARG, "accepted 0..11");
    REFUSED(mxp_trainer_tensor_desc(t, -1, &d, err_), MXP_ERR_INVALID_ARG, "index -1");
    CHECK(mxp_model_tensor_find(m, "layers.2.weight") == -1);
    CHECK(mxp_model_tensor_find(m, NULL) == -1);
    CHECK(mxp_trainer_tensor_bytes(t, MXP_TENSOR_PARAM) == P * 2);
    CHECK(mxp_trainer_tensor_bytes(t, MXP_TENSOR_MASTER) == 0); /* pure mode: none */
    CHECK(mxp_trainer_tensor_bytes(t, MXP_TENSOR_OPTIM_V) == P * 4);
    CHECK(strcmp(mxp_tensor_role_name(MXP_TENSOR_OPTIM_V), "optim.v") == 0);
    CHECK(mxp_tensor_role_name(MXP_TENSOR_ROLE_COUNT) == NULL);
    mxp_trainer_destroy(t);

    mxp_trainer *s = make_trainer(m, MXP_OPTIM_SGD);
    CHECK(mxp_trainer_num_tensors(s) == 8);
    CHECK(mxp_trainer_tensor_bytes(s, MXP_TENSOR_OPTIM_V) == 0);
    CHECK_OK(mxp_trainer_tensor_desc(s, 7, &d, &err), &err);
    CHECK(strcmp(d.name, "optim.m.layers.1.bias") == 0);
    mxp_dtype dt;
    REFUSED(mxp_trainer_tensor_dtype(s, MXP_TENSOR_OPTIM_V, &dt, err_), MXP_ERR_UNSUPPORTED,
            "sgd");
    float buf[P];
    REFUSED(mxp_trainer_tensor_get(s, MXP_TENSOR_OPTIM_V, NULL, MXP_DTYPE_F32, buf, sizeof buf,
                                   err_),
            MXP_ERR_UNSUPPORTED, "optim.v");
    mxp_trainer_destroy(s);
    mxp_model_destroy(m);
}

static void test_values_mixed(void) {
    mxp_model *m = make(MXP_PRECISION_MIXED_BF16, false);
    mxp_error err = {0};
    const float b[4] = {1.5f, -2.25f, 3.0f, 0.1f};
    CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, "layers.0.bias", MXP_DTYPE_F32, b,
                                  sizeof b, &err), &err);
    float got[4];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_MASTER, "layers.0.bias", MXP_DTYPE_F32, got,
                                  sizeof got, &err), &err);
    CHECK(memcmp(got, b, sizeof b) == 0);
    /* the working copy followed, RNE: 1.5 0x3FC0, -2.25 0xC010, 3 0x4040, 0.1 0x3DCD */
    uint16_t w[4];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_WORK, "layers.0.bias", MXP_DTYPE_BF16, w, sizeof w,
                                  &err), &err);
    CHECK(w[0] == 0x3FC0 && w[1] == 0xC010 && w[2] == 0x4040 && w[3] == 0x3DCD);
    /* the same work read widened to F32: 0x3DCD0000 */
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_WORK, "layers.0.bias", MXP_DTYPE_F32, got,
                                  sizeof got, &err), &err);
    CHECK(test_f32_bits(got[3]) == 0x3DCD0000u && got[0] == 1.5f);
    /* whole slab: the bias sits at elements 12..15 */
    float all[P];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, all, sizeof all,
                                  &err), &err);
    CHECK(memcmp(all + 12, b, sizeof b) == 0);
    /* the working weights follow the master: a set of work is refused, and
     * changes nothing */
    const uint16_t one[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80};
    REFUSED(mxp_model_tensor_set(m, MXP_TENSOR_WORK, "layers.0.bias", MXP_DTYPE_BF16, one,
                                 sizeof one, err_),
            MXP_ERR_INVALID_ARG, "'param' or 'master'");
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_WORK, "layers.0.bias", MXP_DTYPE_BF16, w, sizeof w,
                                  &err), &err);
    CHECK(w[0] == 0x3FC0 && w[3] == 0x3DCD);

    /* gradients: discarded ones read as zeros; a set reads back */
    mxp_model_discard_grads(m);
    float g[P];
    memset(g, 0xFF, sizeof g);
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, g, sizeof g, &err),
             &err);
    bool zero = true;
    for (int i = 0; i < P; i++) zero = zero && test_f32_bits(g[i]) == 0;
    CHECK(zero);
    const float gb[2] = {-0.5f, 4.0f};
    CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_GRAD, "layers.1.bias", MXP_DTYPE_F32, gb,
                                  sizeof gb, &err), &err);
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, g, sizeof g, &err),
             &err);
    CHECK(g[24] == -0.5f && g[25] == 4.0f && g[23] == 0.0f);

    /* copy into an FP32 inference model: the master widened exactly */
    mxp_model *f = make(MXP_PRECISION_FP32, true);
    mxp_transfer_stats x0, x1;
    mxp_model_transfers(m, &x0);
    CHECK_OK(mxp_model_copy_params(f, m, &err), &err);
    mxp_model_transfers(m, &x1);
    CHECK(memcmp(&x0, &x1, sizeof x0) == 0); /* backend to backend: no transfer */
    float fa[P];
    CHECK_OK(mxp_model_tensor_get(f, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, fa, sizeof fa, &err),
             &err);
    CHECK(memcmp(fa, all, sizeof fa) == 0);
    REFUSED(mxp_model_tensor_get(f, MXP_TENSOR_GRAD, NULL, MXP_DTYPE_F32, g, sizeof g, err_),
            MXP_ERR_UNSUPPORTED, "inference");
    mxp_model_destroy(f);
    mxp_model_destroy(m);
}

static void test_values_pure(void) {
    mxp_model *m = make(MXP_PRECISION_FP16, false);
    mxp_error err = {0};
    const float v[2] = {0.1f, -3.0f}; /* FP16 RNE: 0x2E66, 0xC200 */
    CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, "layers.1.bias", MXP_DTYPE_F32, v,
                                  sizeof v, &err), &err);
    uint16_t h[P];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_WORK, NULL, MXP_DTYPE_F16, h, sizeof h, &err),
             &err);
    CHECK(u16_of(h, 24) == 0x2E66 && u16_of(h, 25) == 0xC200);
    float f[2];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, "layers.1.bias", MXP_DTYPE_F32, f,
                                  sizeof f, &err), &err);
    CHECK(f[0] == 0.0999755859375f && f[1] == -3.0f); /* 0x2E66 = 1638/16384 */
    /* a set in the storage dtype is a bit copy, and the work may be set here */
    const uint16_t raw[2] = {0x3C00, 0x7BFF}; /* 1, 65504 */
    CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_WORK, "layers.1.bias", MXP_DTYPE_F16, raw,
                                  sizeof raw, &err), &err);
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, "layers.1.bias", MXP_DTYPE_F32, f,
                                  sizeof f, &err), &err);
    CHECK(f[0] == 1.0f && f[1] == 65504.0f);
    mxp_dtype dt;
    REFUSED(mxp_model_tensor_dtype(m, MXP_TENSOR_MASTER, &dt, err_), MXP_ERR_UNSUPPORTED,
            "no FP32 master");
    REFUSED(mxp_model_tensor_get(m, MXP_TENSOR_MASTER, NULL, MXP_DTYPE_F32, f, sizeof f, err_),
            MXP_ERR_UNSUPPORTED, "'master'");
    mxp_model_destroy(m);
}

static void test_refusals(void) {
    mxp_model *m = make(MXP_PRECISION_MIXED_FP16, false);
    mxp_trainer *t = make_trainer(m, MXP_OPTIM_ADAMW);
    mxp_error err = {0};
    float before[P], buf[P], after[P];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, before, sizeof before,
                                  &err), &err);
    for (int i = 0; i < P; i++) buf[i] = 9.0f;
    mxp_transfer_stats x0, x1;
    mxp_trainer_transfers(t, &x0);

    REFUSED(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, "layers.9.weight", MXP_DTYPE_F32, buf, 48,
                                 err_),
            MXP_ERR_INVALID_ARG, "no tensor 'layers.9.weight'");
    REFUSED(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, "layers.0.weight", MXP_DTYPE_F32, buf, 44,
                                 err_),
            MXP_ERR_INVALID_ARG, "[4, 3] holds 12 values = 48 bytes");
    REFUSED(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, "layers.0.weight", MXP_DTYPE_F32, buf, 52,
                                 err_),
            MXP_ERR_INVALID_ARG, "the buffer has 52 bytes");
    REFUSED(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, buf, 4 * (P - 1), err_),
            MXP_ERR_INVALID_ARG, "[26] (the whole slab)");
    REFUSED(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, "layers.0.bias", MXP_DTYPE_F32, NULL, 16,
                                 err_),
            MXP_ERR_INVALID_ARG, "buffer is NULL");
    REFUSED(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, "layers.0.bias", MXP_DTYPE_F32, NULL, 16,
                                 err_),
            MXP_ERR_INVALID_ARG, "buffer is NULL");
    /* the work of mixed_fp16 is F16: BF16 is neither it nor F32 */
    REFUSED(mxp_model_tensor_get(m, MXP_TENSOR_WORK, "layers.0.bias", MXP_DTYPE_BF16, buf, 8,
                                 err_),
            MXP_ERR_INVALID_ARG, "accepted: its storage dtype f16, or f32");
    REFUSED(mxp_model_tensor_get(m, (mxp_tensor_role)17, NULL, MXP_DTYPE_F32, buf, sizeof buf,
                                 err_),
            MXP_ERR_INVALID_ARG, "role 17");
    REFUSED(mxp_model_tensor_get(m, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, buf, sizeof buf,
                                 err_),
            MXP_ERR_INVALID_ARG, "mxp_trainer_tensor_");
    REFUSED(mxp_model_tensor_get(NULL, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, buf, sizeof buf,
                                 err_),
            MXP_ERR_INVALID_ARG, "NULL model");
    /* the trainer's own tensors: the same checks */
    REFUSED(mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_M, "optim.m.layers.0.bias", MXP_DTYPE_F32,
                                   buf, 16, err_),
            MXP_ERR_INVALID_ARG, "without the 'optim.m.' prefix");
    REFUSED(mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_V, "layers.1.weight", MXP_DTYPE_F32, buf,
                                   16, err_),
            MXP_ERR_INVALID_ARG, "[2, 4] holds 8 values = 32 bytes");
    REFUSED(mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_V, "layers.1.weight", MXP_DTYPE_BF16, buf,
                                   16, err_),
            MXP_ERR_INVALID_ARG, "accepted: f32");
    REFUSED(mxp_trainer_tensor_get(t, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, NULL, 4 * P, err_),
            MXP_ERR_INVALID_ARG, "buffer is NULL");
    REFUSED(mxp_trainer_tensor_zero(t, MXP_TENSOR_GRAD, NULL, err_), MXP_ERR_INVALID_ARG,
            "mxp_model_zero_grads");
    REFUSED(mxp_trainer_tensor_zero(t, MXP_TENSOR_OPTIM_M, "nope", err_), MXP_ERR_INVALID_ARG,
            "no tensor 'nope'");
    REFUSED(mxp_trainer_tensor_get(NULL, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, buf, 4 * P,
                                   err_),
            MXP_ERR_INVALID_ARG, "NULL trainer");

    /* nothing changed, and no refusal counted as a transfer */
    mxp_trainer_transfers(t, &x1);
    CHECK(memcmp(&x0, &x1, sizeof x0) == 0);
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, after, sizeof after,
                                  &err), &err);
    CHECK(memcmp(before, after, sizeof before) == 0);
    float mo[P];
    CHECK_OK(mxp_trainer_tensor_get(t, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, mo, sizeof mo,
                                    &err), &err);
    bool zero = true;
    for (int i = 0; i < P; i++) zero = zero && mo[i] == 0.0f; /* fresh moments */
    CHECK(zero);

    /* zero of one optimizer tensor touches its range only */
    for (int i = 0; i < P; i++) buf[i] = 1.0f;
    CHECK_OK(mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, buf, sizeof buf,
                                    &err), &err);
    CHECK_OK(mxp_trainer_tensor_zero(t, MXP_TENSOR_OPTIM_M, "layers.0.bias", &err), &err);
    CHECK_OK(mxp_trainer_tensor_get(t, MXP_TENSOR_OPTIM_M, NULL, MXP_DTYPE_F32, mo, sizeof mo,
                                    &err), &err);
    bool ok = true;
    for (int i = 0; i < P; i++) ok = ok && mo[i] == ((i >= 12 && i < 16) ? 0.0f : 1.0f);
    CHECK(ok);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

/* Calls and bytes, by hand: each get/set is one call of its buffer's bytes. */
static void test_counter(void) {
    mxp_model *m = make(MXP_PRECISION_MIXED_BF16, false);
    mxp_trainer *t = make_trainer(m, MXP_OPTIM_ADAMW);
    mxp_error err = {0};
    mxp_transfer_stats x;
    mxp_trainer_transfers(t, &x);
    CHECK(x.d2h_calls == 0 && x.d2h_bytes == 0 && x.h2d_calls == 0 && x.h2d_bytes == 0);
    float buf[P];
    uint16_t h[P];
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_PARAM, "layers.0.weight", MXP_DTYPE_F32, buf, 48,
                                  &err), &err);
    CHECK_OK(mxp_model_tensor_get(m, MXP_TENSOR_WORK, NULL, MXP_DTYPE_BF16, h, 2 * P, &err), &err);
    CHECK_OK(mxp_model_tensor_set(m, MXP_TENSOR_PARAM, NULL, MXP_DTYPE_F32, buf, 4 * P, &err),
             &err);
    mxp_model_transfers(m, &x);
    CHECK(x.d2h_calls == 2 && x.d2h_bytes == 48 + 2 * P && x.h2d_calls == 1 &&
          x.h2d_bytes == 4 * P);
    CHECK_OK(mxp_trainer_tensor_get(t, MXP_TENSOR_OPTIM_V, "layers.1.bias", MXP_DTYPE_F32, buf, 8,
                                    &err), &err);
    CHECK_OK(mxp_trainer_tensor_set(t, MXP_TENSOR_OPTIM_M, "layers.1.bias", MXP_DTYPE_F32, buf, 8,
                                    &err), &err);
    CHECK_OK(mxp_trainer_tensor_zero(t, MXP_TENSOR_OPTIM_M, NULL, &err), &err); /* not a transfer */
    mxp_trainer_transfers(t, &x); /* the model's and the trainer's own */
    CHECK(x.d2h_calls == 3 && x.d2h_bytes == 48 + 2 * P + 8 && x.h2d_calls == 2 &&
          x.h2d_bytes == 4 * P + 8);
    mxp_model_transfers(m, &x); /* the model's alone are unchanged */
    CHECK(x.d2h_calls == 2 && x.h2d_calls == 1);

    /* a checkpoint: one get per slab (weights F32, m, v); a load one set each */
    char dir[] = "/tmp/mxp_test_tensors_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[96];
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    mxp_transfer_stats a, b;
    mxp_trainer_transfers(t, &a);
    mxp_ckpt_save_args sa = {.trainer = t, .healthy = true};
    CHECK_OK(mxp_ckpt_save(path, &sa, NULL, &err), &err);
    mxp_trainer_transfers(t, &b);
    CHECK_MSG(b.d2h_calls - a.d2h_calls == 3 && b.d2h_bytes - a.d2h_bytes == 3 * 4 * P &&
                  b.h2d_calls == a.h2d_calls,
              "save: %llu gets of %llu bytes, %llu sets; expected 3 of %d, 0",
              (unsigned long long)(b.d2h_calls - a.d2h_calls),
              (unsigned long long)(b.d2h_bytes - a.d2h_bytes),
              (unsigned long long)(b.h2d_calls - a.h2d_calls), 3 * 4 * P);
    CHECK_OK(mxp_ckpt_load(path, t, NULL, &err), &err);
    mxp_trainer_transfers(t, &a);
    CHECK_MSG(a.h2d_calls - b.h2d_calls == 3 && a.h2d_bytes - b.h2d_bytes == 3 * 4 * P &&
                  a.d2h_calls == b.d2h_calls,
              "load: %llu sets of %llu bytes, %llu gets; expected 3 of %d, 0",
              (unsigned long long)(a.h2d_calls - b.h2d_calls),
              (unsigned long long)(a.h2d_bytes - b.h2d_bytes),
              (unsigned long long)(a.d2h_calls - b.d2h_calls), 3 * 4 * P);
    unlink(path);
    test_rm_rf(dir);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

int main(void) {
    test_enumeration();
    test_values_mixed();
    test_values_pure();
    test_refusals();
    test_counter();
    return test_finish("test_tensors");
}
