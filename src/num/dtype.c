/* src/num/dtype.c: the dtype traits table, names and name parsing.
 *
 * Entry points: mxp_dtype_info, mxp_dtype_name, mxp_dtype_parse.
 * The table is indexed by mxp_dtype and locked to MXP_DTYPE_COUNT.
 * References: safetensors dtype names (huggingface/safetensors);
 * OCP 8-bit Floating Point Specification (2023) for the FP8 limits.
 */
#include <mixprec/num.h>

#include <assert.h>
#include <ctype.h>
#include <float.h>

static const mxp_dtype_traits dtype_traits[] = {
    [MXP_DTYPE_F32] = {"f32", "F32", 4, 8, 23, true, FLT_MAX, 0x1p-126,
                       0x1p-149, 0x1p-23},
    [MXP_DTYPE_BF16] = {"bf16", "BF16", 2, 8, 7, true, 0x1.fep127, 0x1p-126,
                        0x1p-133, 0x1p-7},
    [MXP_DTYPE_F16] = {"f16", "F16", 2, 5, 10, true, 65504.0, 0x1p-14,
                       0x1p-24, 0x1p-10},
    [MXP_DTYPE_F8_E4M3] = {"f8_e4m3", "F8_E4M3", 1, 4, 3, false, 448.0,
                           0x1p-6, 0x1p-9, 0x1p-3},
    [MXP_DTYPE_F8_E5M2] = {"f8_e5m2", "F8_E5M2", 1, 5, 2, true, 57344.0,
                           0x1p-14, 0x1p-16, 0x1p-2},
};
static_assert(sizeof dtype_traits / sizeof dtype_traits[0] == MXP_DTYPE_COUNT,
              "dtype_traits must have one row per mxp_dtype");

/* Alias spellings accepted by mxp_dtype_parse besides the trait names. */
static const struct {
    const char *alias;
    mxp_dtype type;
} dtype_aliases[] = {
    {"float32", MXP_DTYPE_F32},     {"fp32", MXP_DTYPE_F32},
    {"bfloat16", MXP_DTYPE_BF16},   {"float16", MXP_DTYPE_F16},
    {"fp16", MXP_DTYPE_F16},        {"half", MXP_DTYPE_F16},
    {"e4m3", MXP_DTYPE_F8_E4M3},    {"fp8_e4m3", MXP_DTYPE_F8_E4M3},
    {"e5m2", MXP_DTYPE_F8_E5M2},    {"fp8_e5m2", MXP_DTYPE_F8_E5M2},
};

const mxp_dtype_traits *mxp_dtype_info(mxp_dtype t) {
    if ((unsigned)t >= MXP_DTYPE_COUNT) return NULL;
    return &dtype_traits[t];
}

const char *mxp_dtype_name(mxp_dtype t) {
    if ((unsigned)t >= MXP_DTYPE_COUNT) return "invalid";
    return dtype_traits[t].name;
}

/* ASCII case-insensitive string equality. */
static bool name_equal(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    }
    return *a == *b;
}

/* Contract: see num.h. Matching ignores ASCII case, so the safetensors
 * names ("BF16", "F8_E4M3") parse too. On failure *out is left alone. */
mxp_status mxp_dtype_parse(const char *s, mxp_dtype *out, mxp_error *err) {
    static const char accepted[] =
        "f32 (float32, fp32), bf16 (bfloat16), f16 (float16, fp16, half), "
        "f8_e4m3 (e4m3, fp8_e4m3), f8_e5m2 (e5m2, fp8_e5m2)";
    if (s == NULL || out == NULL) {
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "dtype parse: %s is NULL; accepted: %s",
                             s == NULL ? "the dtype name" : "the output",
                             accepted);
    }
    for (int t = 0; t < MXP_DTYPE_COUNT; t++) {
        if (name_equal(s, dtype_traits[t].name)) {
            *out = (mxp_dtype)t;
            return MXP_OK;
        }
    }
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0];
         i++) {
        if (name_equal(s, dtype_aliases[i].alias)) {
            *out = dtype_aliases[i].type;
            return MXP_OK;
        }
    }
    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                         "unknown dtype '%.64s'; accepted: %s", s, accepted);
}
