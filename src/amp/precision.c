/* amp/precision.c: precision modes as data.
 *
 * Entry points: mxp_precision_name / mxp_precision_parse,
 * mxp_op_class_name, mxp_precision_policy_default, and the per-layer
 * override's text form mxp_fp32_layers_parse / _format / _none.
 *
 * Each mode maps to one row of a const table (docs/design.md "Precision modes")
 * and each op class to a dtype triple, following PyTorch autocast: matmul
 * operands in the working-weight dtype with FP32 accumulation, output in
 * the activation dtype; element-wise ops store in the activation dtype;
 * layernorm, softmax, losses and reductions run and store in FP32.
 *
 * Choices recorded here:
 *   - fp32 reports has_master = true: the FP32 parameter slab IS the master
 *     copy and the working weights alias it (no second copy, no recast).
 *     Callers that allocate a separate working copy should do so only when
 *     weight != F32.
 *   - fp8 (emulated): working weights and forward matmul operands are
 *     E4M3, activation gradients E5M2, activations kept in BF16, FP32
 *     master; loss scaling on; `emulated` set (quantise, then FP32 compute).
 *   - pure bf16/fp16 have no master and request a stochastic-rounded update.
 *   - mode names parse case-insensitively; "float32" is an alias of fp32.
 *
 * References: PyTorch autocast op lists (torch/amp/autocast_mode.py docs);
 * NVIDIA Transformer Engine FP8 recipe (E4M3 forward / E5M2 backward).
 */
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <mixprec/amp.h>

static const char *const precision_names[] = {
    "fp32", "mixed_bf16", "mixed_fp16", "bf16", "fp16", "fp8",
};
static_assert(sizeof precision_names / sizeof precision_names[0] == MXP_PRECISION_COUNT,
              "precision_names must cover mxp_precision");

static const char *const op_class_names[] = {
    "matmul", "elementwise", "norm", "softmax", "loss", "reduction",
};
static_assert(sizeof op_class_names / sizeof op_class_names[0] == MXP_OP_CLASS_COUNT,
              "op_class_names must cover mxp_op_class");

const char *mxp_precision_name(mxp_precision p)
{
    if ((unsigned)p >= MXP_PRECISION_COUNT) return "unknown";
    return precision_names[p];
}

mxp_precision mxp_precision_fallback_next(mxp_precision p)
{
    switch (p) {
    case MXP_PRECISION_FP8: return MXP_PRECISION_MIXED_FP16;
    case MXP_PRECISION_MIXED_FP16: return MXP_PRECISION_MIXED_BF16;
    case MXP_PRECISION_FP16: return MXP_PRECISION_BF16;
    case MXP_PRECISION_MIXED_BF16:
    case MXP_PRECISION_BF16: return MXP_PRECISION_FP32;
    default: return p;
    }
}

const char *mxp_op_class_name(mxp_op_class c)
{
    if ((unsigned)c >= MXP_OP_CLASS_COUNT) return "unknown";
    return op_class_names[c];
}

/* ASCII case-insensitive equality (locale independent). */
static bool name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    return *a == *b;
}

mxp_status mxp_precision_parse(const char *s, mxp_precision *out, mxp_error *err)
{
    if (s == NULL || out == NULL)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_precision_parse: NULL %s", s == NULL ? "name" : "output");
    for (int i = 0; i < MXP_PRECISION_COUNT; i++) {
        if (name_eq(s, precision_names[i])) {
            *out = (mxp_precision)i;
            return MXP_OK;
        }
    }
    if (name_eq(s, "float32")) {
        *out = MXP_PRECISION_FP32;
        return MXP_OK;
    }
    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                         "unknown precision mode '%s'; accepted: fp32 (alias float32), "
                         "mixed_bf16, mixed_fp16, bf16, fp16, fp8", s);
}

/* One row of the mode table: the per-mode dtypes and flags. The op table
 * is derived from it by fill_ops() so the autocast rule lives in one place. */
typedef struct mode_row {
    mxp_dtype weight;
    bool has_master;
    bool stochastic_update;
    mxp_dtype activation;
    mxp_dtype grad;
    bool loss_scaling;
    bool emulated;
} mode_row;

static const mode_row mode_rows[] = {
    [MXP_PRECISION_FP32] = {MXP_DTYPE_F32, true, false, MXP_DTYPE_F32, MXP_DTYPE_F32,
                            false, false},
    [MXP_PRECISION_MIXED_BF16] = {MXP_DTYPE_BF16, true, false, MXP_DTYPE_BF16,
                                  MXP_DTYPE_BF16, false, false},
    [MXP_PRECISION_MIXED_FP16] = {MXP_DTYPE_F16, true, false, MXP_DTYPE_F16,
                                  MXP_DTYPE_F16, true, false},
    [MXP_PRECISION_BF16] = {MXP_DTYPE_BF16, false, true, MXP_DTYPE_BF16, MXP_DTYPE_BF16,
                            false, false},
    [MXP_PRECISION_FP16] = {MXP_DTYPE_F16, false, true, MXP_DTYPE_F16, MXP_DTYPE_F16,
                            true, false},
    [MXP_PRECISION_FP8] = {MXP_DTYPE_F8_E4M3, true, false, MXP_DTYPE_BF16,
                           MXP_DTYPE_F8_E5M2, true, true},
};
static_assert(sizeof mode_rows / sizeof mode_rows[0] == MXP_PRECISION_COUNT,
              "mode_rows must cover mxp_precision");

/* Contract: out->mode and the per-mode fields are set to the docs/design.md row
 * of `mode`; every op class gets its dtype triple. An out-of-range mode is
 * treated as fp32 (the safe default). */
void mxp_precision_policy_default(mxp_precision mode, mxp_precision_policy *out)
{
    if (out == NULL) return;
    if ((unsigned)mode >= MXP_PRECISION_COUNT) mode = MXP_PRECISION_FP32;
    const mode_row *r = &mode_rows[mode];

    memset(out, 0, sizeof *out);
    out->mode = mode;
    out->weight = r->weight;
    out->has_master = r->has_master;
    out->stochastic_update = r->stochastic_update;
    out->activation = r->activation;
    out->grad = r->grad;
    out->loss_scaling = r->loss_scaling;
    out->emulated = r->emulated;

    /* Matmul: operands in the working-weight dtype (activations are rounded
     * to it too), FP32 accumulation, output kept in the activation dtype. */
    out->ops[MXP_OP_MATMUL] = (mxp_op_policy){r->weight, r->activation, MXP_DTYPE_F32};
    /* Element-wise: computed in FP32 registers, stored as activations. */
    out->ops[MXP_OP_ELEMENTWISE] =
        (mxp_op_policy){r->activation, r->activation, MXP_DTYPE_F32};
    /* Numerically sensitive classes stay in FP32 end to end. */
    static_assert(MXP_OP_CLASS_COUNT == 6, "a new op class needs a rule here");
    static const mxp_op_class fp32_classes[] = {MXP_OP_NORM, MXP_OP_SOFTMAX, MXP_OP_LOSS,
                                                MXP_OP_REDUCTION};
    for (size_t i = 0; i < sizeof fp32_classes / sizeof fp32_classes[0]; i++)
        out->ops[fp32_classes[i]] = (mxp_op_policy){MXP_DTYPE_F32, MXP_DTYPE_F32,
                                                    MXP_DTYPE_F32};
}

/* ---- per-layer FP32 override ------------------------------------------- */

static_assert(MXP_FP32_LAYERS_MAX == 64, "the mask is a uint64_t");

bool mxp_fp32_layers_none(const mxp_fp32_layers *l)
{
    return l == NULL || (!l->first && !l->last && l->mask == 0);
}

/* Contract: items are separated by ','; each, with blanks trimmed, is
 * "first", "last" (any case) or a decimal index 0..63; "none" only alone.
 * Empty items and anything else are errors naming the item. */
mxp_status mxp_fp32_layers_parse(const char *s, mxp_fp32_layers *out, mxp_error *err)
{
    static const char accepted[] =
        "accepted: none, first, last, first,last, or a comma list of layer indices "
        "0..63 (the <i> of layers.<i>.weight), e.g. 0,6";
    if (s == NULL || out == NULL)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_fp32_layers_parse: NULL %s",
                             s == NULL ? "text" : "output");
    mxp_fp32_layers r = {false, false, 0};
    const char *p = s;
    int items = 0;
    bool saw_none = false;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *a = p;
        while (len > 0 && isspace((unsigned char)*a)) a++, len--;
        while (len > 0 && isspace((unsigned char)a[len - 1])) len--;
        char item[24];
        if (len == 0 || len >= sizeof item)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "fp32 layers '%.64s': %s item; %s", s,
                                 len == 0 ? "empty" : "too long an", accepted);
        memcpy(item, a, len);
        item[len] = '\0';
        items++;
        if (name_eq(item, "none")) {
            saw_none = true;
        } else if (name_eq(item, "first")) {
            r.first = true;
        } else if (name_eq(item, "last")) {
            r.last = true;
        } else {
            int v = 0;
            for (size_t i = 0; i < len; i++) {
                if (!isdigit((unsigned char)item[i]) || v >= MXP_FP32_LAYERS_MAX)
                    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                         "fp32 layers '%.64s': item '%s' is not first, last or "
                                         "a layer index 0..%d; %s",
                                         s, item, MXP_FP32_LAYERS_MAX - 1, accepted);
                v = v * 10 + (item[i] - '0');
            }
            if (v >= MXP_FP32_LAYERS_MAX)
                return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                     "fp32 layers '%.64s': layer index %d out of range; %s", s,
                                     v, accepted);
            r.mask |= (uint64_t)1 << v;
        }
        if (!e) break;
        p = e + 1;
    }
    if (saw_none && items > 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "fp32 layers '%.64s': 'none' cannot be combined with other items; %s",
                             s, accepted);
    *out = r;
    return MXP_OK;
}

/* Append one formatted item to buf [n] at *used (truncating safely). */
static void append_item(char *buf, size_t n, size_t *used, const char *sep, const char *word,
                        int idx)
{
    if (*used >= n) return;
    int w = word ? snprintf(buf + *used, n - *used, "%s%s", sep, word)
                 : snprintf(buf + *used, n - *used, "%s%d", sep, idx);
    if (w > 0) *used += (size_t)w;
}

void mxp_fp32_layers_format(const mxp_fp32_layers *l, char *buf, size_t n)
{
    if (buf == NULL || n == 0) return;
    buf[0] = '\0';
    if (mxp_fp32_layers_none(l)) {
        snprintf(buf, n, "none");
        return;
    }
    size_t used = 0;
    if (l->first) append_item(buf, n, &used, "", "first", 0);
    if (l->last) append_item(buf, n, &used, used ? "," : "", "last", 0);
    for (int i = 0; i < MXP_FP32_LAYERS_MAX; i++)
        if (l->mask >> i & 1) append_item(buf, n, &used, used ? "," : "", NULL, i);
}
