/* tests/test_precision.c: precision modes and their default policies.
 *
 * The expected tables are written out here from docs/design.md ("Precision
 * modes") and the autocast rule of docs/precision.md ("The per-op policy"), not derived from the library: every mode's
 * per-mode fields and all six op classes are compared field by field.
 * Also: name/parse round trip, aliases, case, and rejected names.
 */
#include <string.h>

#include <mixprec/amp.h>

#include "testutil.h"

#define F32 MXP_DTYPE_F32
#define BF16 MXP_DTYPE_BF16
#define F16 MXP_DTYPE_F16
#define E4M3 MXP_DTYPE_F8_E4M3
#define E5M2 MXP_DTYPE_F8_E5M2

typedef struct expect {
    mxp_precision mode;
    const char *name;
    mxp_dtype weight;
    bool has_master, stochastic_update;
    mxp_dtype activation, grad;
    bool loss_scaling, emulated;
    mxp_dtype mm_in, mm_out; /* matmul input / output */
} expect;

static const expect table[] = {
    {MXP_PRECISION_FP32, "fp32", F32, true, false, F32, F32, false, false, F32, F32},
    {MXP_PRECISION_MIXED_BF16, "mixed_bf16", BF16, true, false, BF16, BF16, false, false,
     BF16, BF16},
    {MXP_PRECISION_MIXED_FP16, "mixed_fp16", F16, true, false, F16, F16, true, false, F16,
     F16},
    {MXP_PRECISION_BF16, "bf16", BF16, false, true, BF16, BF16, false, false, BF16, BF16},
    {MXP_PRECISION_FP16, "fp16", F16, false, true, F16, F16, true, false, F16, F16},
    {MXP_PRECISION_FP8, "fp8", E4M3, true, false, BF16, E5M2, true, true, E4M3, BF16},
};

static void check_op(const mxp_precision_policy *p, mxp_op_class c, mxp_dtype in,
                     mxp_dtype out)
{
    const mxp_op_policy *o = &p->ops[c];
    /* dtypes printed as enum values: this test does not link the num module */
    CHECK_MSG(o->input == in, "%s/%s input %d, expected %d", mxp_precision_name(p->mode),
              mxp_op_class_name(c), (int)o->input, (int)in);
    CHECK_MSG(o->output == out, "%s/%s output %d, expected %d",
              mxp_precision_name(p->mode), mxp_op_class_name(c), (int)o->output,
              (int)out);
    CHECK_MSG(o->accum == F32, "%s/%s accum %d, expected f32", mxp_precision_name(p->mode),
              mxp_op_class_name(c), (int)o->accum);
}

static void test_policies(void)
{
    CHECK(sizeof table / sizeof table[0] == MXP_PRECISION_COUNT);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const expect *x = &table[i];
        mxp_precision_policy p;
        memset(&p, 0xAB, sizeof p); /* every field must be written */
        mxp_precision_policy_default(x->mode, &p);
        CHECK(p.mode == x->mode);
        CHECK_MSG(p.weight == x->weight, "%s weight", x->name);
        CHECK_MSG(p.has_master == x->has_master, "%s has_master", x->name);
        CHECK_MSG(p.stochastic_update == x->stochastic_update, "%s stochastic_update",
                  x->name);
        CHECK_MSG(p.activation == x->activation, "%s activation", x->name);
        CHECK_MSG(p.grad == x->grad, "%s grad", x->name);
        CHECK_MSG(p.loss_scaling == x->loss_scaling, "%s loss_scaling", x->name);
        CHECK_MSG(p.emulated == x->emulated, "%s emulated", x->name);
        check_op(&p, MXP_OP_MATMUL, x->mm_in, x->mm_out);
        check_op(&p, MXP_OP_ELEMENTWISE, x->activation, x->activation);
        check_op(&p, MXP_OP_NORM, F32, F32);
        check_op(&p, MXP_OP_SOFTMAX, F32, F32);
        check_op(&p, MXP_OP_LOSS, F32, F32);
        check_op(&p, MXP_OP_REDUCTION, F32, F32);
        /* pure modes: no master <=> stochastic update */
        CHECK(p.has_master != p.stochastic_update);
    }
    /* Out-of-range mode falls back to the safe fp32 policy. */
    mxp_precision_policy p;
    mxp_precision_policy_default(MXP_PRECISION_COUNT, &p);
    CHECK(p.mode == MXP_PRECISION_FP32 && p.weight == F32 && !p.loss_scaling);
    mxp_precision_policy_default(MXP_PRECISION_FP16, NULL); /* no crash */
}

static void test_names(void)
{
    static const char *const names[] = {"fp32", "mixed_bf16", "mixed_fp16",
                                        "bf16", "fp16",       "fp8"};
    CHECK(sizeof names / sizeof names[0] == MXP_PRECISION_COUNT);
    for (int i = 0; i < MXP_PRECISION_COUNT; i++) {
        CHECK_MSG(strcmp(mxp_precision_name((mxp_precision)i), names[i]) == 0,
                  "name of mode %d is %s", i, mxp_precision_name((mxp_precision)i));
        mxp_precision out = MXP_PRECISION_COUNT;
        mxp_error err = {0};
        CHECK_OK(mxp_precision_parse(names[i], &out, &err), &err);
        CHECK(out == (mxp_precision)i);
    }
    CHECK(strcmp(mxp_precision_name(MXP_PRECISION_COUNT), "unknown") == 0);
    CHECK(strcmp(mxp_precision_name((mxp_precision)-1), "unknown") == 0);

    mxp_precision out = MXP_PRECISION_COUNT;
    CHECK_OK(mxp_precision_parse("float32", &out, NULL), NULL);
    CHECK(out == MXP_PRECISION_FP32);
    CHECK_OK(mxp_precision_parse("Mixed_FP16", &out, NULL), NULL);
    CHECK(out == MXP_PRECISION_MIXED_FP16);
    CHECK_OK(mxp_precision_parse("BF16", &out, NULL), NULL);
    CHECK(out == MXP_PRECISION_BF16);

    static const char *const bad[] = {"", "fp", "fp32 ", " fp32", "fp64", "mixed",
                                      "mixed_fp8", "fp16x", "int8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mxp_error err = {0};
        out = MXP_PRECISION_FP8;
        mxp_status st = mxp_precision_parse(bad[i], &out, &err);
        CHECK_MSG(st == MXP_ERR_INVALID_ARG, "'%s' accepted", bad[i]);
        CHECK(err.status == MXP_ERR_INVALID_ARG);
        CHECK(out == MXP_PRECISION_FP8); /* untouched on error */
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        CHECK_MSG(strstr(err.msg, quoted) != NULL, "message lacks input: %s", err.msg);
        CHECK_MSG(strstr(err.msg, "mixed_bf16") && strstr(err.msg, "fp8"),
                  "message lacks accepted list: %s", err.msg);
    }
    CHECK(mxp_precision_parse(NULL, &out, NULL) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_precision_parse("fp32", NULL, NULL) == MXP_ERR_INVALID_ARG);

    static const char *const classes[] = {"matmul", "elementwise", "norm",
                                          "softmax", "loss",        "reduction"};
    CHECK(sizeof classes / sizeof classes[0] == MXP_OP_CLASS_COUNT);
    for (int i = 0; i < MXP_OP_CLASS_COUNT; i++)
        CHECK(strcmp(mxp_op_class_name((mxp_op_class)i), classes[i]) == 0);
    CHECK(strcmp(mxp_op_class_name(MXP_OP_CLASS_COUNT), "unknown") == 0);
}

int main(void)
{
    test_policies();
    test_names();
    return test_finish("precision");
}
