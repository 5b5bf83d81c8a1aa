/* tests/test_fused.c: every fused path is bit-identical to the unfused one.
 *
 * 1. Kernels: bias_act_store and act_bwd_store (kernels.h, mxp_epilogue,
 *    mxp_act_bwd) of the generic table
 *    and, where the CPU runs it, the AVX-512 table, against the unfused
 *    sequence of the SAME table's kernels that its contract names (add_bias,
 *    convert, absmax, widen, activation, convert, absmax), compared bit for
 *    bit (every output byte, absmax bits, non-finite counts), over FP32 /
 *    BF16 / FP16 stores, no activation / relu / gelu / tanh, with and
 *    without bias, on shapes that take each path of the row loop (whole
 *    rows, row segments, the pool split) and on data with NaN, +-Inf,
 *    subnormals and values that overflow FP16 when stored; the backward
 *    pass likewise over dy / saved / dx dtypes and lengths; bias_grad_typed
 *    against bias_grad of the widened copy (FP32, BF16, FP16, E4M3).
 * 2. Model: MLPs (gelu, relu, tanh) in every precision mode, trained for a
 *    few steps with the fused forward epilogue and activation backward and
 *    with them off
 *    (nn_model_set_fusion): losses, all weights, the first non-finite site
 *    and the monitor's per-layer statistics must be identical; also with a
 *    batch that overflows FP16 (sites) and with a full monitor scan (which
 *    runs unfused).
 * 3. Threads: the process re-runs itself with MIXPREC_NUM_THREADS=1 and
 *    compares a digest of the trained weights of part 2: the fused results
 *    do not depend on the thread count.
 * MIXPREC_FORCE_ISA=generic runs part 2 on the reference table.
 */
#include "kernels/generic/generic.h"
#include "kernels/threads.h"
#include "kernels/x86_avx512/avx512.h"
#include "nn/nn_internal.h"
#include "kernel_slots.h"
#include "testutil.h"

#include <mixprec/train.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- 1. the kernel ------------------------------------------------------- */

static const mxp_dtype store_types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16};

static void act_fwd(const mxp_kernels *k, mxp_act a, float *y, const float *x, size_t n) {
    switch (a) {
    case MXP_ACT_RELU: k->relu_fwd(y, x, n); break;
    case MXP_ACT_GELU: k->gelu_fwd(y, x, n); break;
    case MXP_ACT_TANH: k->tanh_fwd(y, x, n); break;
    default: break;
    }
}

/* The contract's unfused sequence into ref (same field meanings as e). */
static void unfused(const mxp_kernels *k, mxp_epilogue *e, float *tx, float *ta) {
    const size_t n = (size_t)e->B * (size_t)e->C;
    k->add_bias(e->y, e->bias, e->B, e->C);
    if (e->y_out != (void *)e->y) k->convert(e->y_type, e->y_out, MXP_DTYPE_F32, e->y, n);
    *e->y_amax = ks_absmax(k, e->y, n, e->y_nonfinite);
    if (e->act == MXP_ACT_NONE) return;
    const float *x = e->y;
    if (e->y_type != MXP_DTYPE_F32) {
        k->convert(MXP_DTYPE_F32, tx, e->y_type, e->y_out, n);
        x = tx;
    }
    float *a = e->a_type == MXP_DTYPE_F32 ? (float *)e->a_out : ta;
    act_fwd(k, e->act, a, x, n);
    if (e->a_type != MXP_DTYPE_F32) k->convert(e->a_type, e->a_out, MXP_DTYPE_F32, a, n);
    *e->a_amax = ks_absmax(k, a, n, e->a_nonfinite);
}

/* Inputs: N(0, 3) values, with specials sprinkled in when `specials`. */
static void fill(float *v, size_t n, mxp_rng *r, bool specials) {
    for (size_t i = 0; i < n; i++) v[i] = 3.0f * mxp_rng_normal(r);
    if (!specials) return;
    for (size_t i = 0; i < n; i += 97) {
        switch ((i / 97) % 6) {
        case 0: v[i] = NAN; break;
        case 1: v[i] = INFINITY; break;
        case 2: v[i] = -INFINITY; break;
        case 3: v[i] = 1e-41f; break;  /* FP32 subnormal */
        case 4: v[i] = 7.0e4f; break;  /* overflows FP16 when stored */
        default: v[i] = -3.0e-8f; break; /* FP16 subnormal range */
        }
    }
}

static void kernel_case(const mxp_kernels *k, int64_t B, int64_t C, mxp_dtype yt, mxp_dtype at,
                        mxp_act act, bool bias, bool specials, uint64_t seed) {
    const size_t n = (size_t)B * (size_t)C;
    const size_t ys = mxp_dtype_info(yt)->size, as = mxp_dtype_info(at)->size;
    float *y0 = test_xmalloc(n * sizeof(float)), *y1 = test_xmalloc(n * sizeof(float));
    float *y2 = test_xmalloc(n * sizeof(float)), *bv = test_xmalloc((size_t)C * sizeof(float));
    float *tx = test_xmalloc(n * sizeof(float)), *ta = test_xmalloc(n * sizeof(float));
    unsigned char *yo1 = test_xmalloc(n * 4), *yo2 = test_xmalloc(n * 4);
    unsigned char *ao1 = test_xmalloc(n * 4), *ao2 = test_xmalloc(n * 4);
    mxp_rng r;
    mxp_rng_init(&r, seed);
    fill(y0, n, &r, specials);
    fill(bv, (size_t)C, &r, false);
    memcpy(y1, y0, n * sizeof(float));
    memcpy(y2, y0, n * sizeof(float));
    memset(yo1, 0xa5, n * 4);
    memset(yo2, 0x5a, n * 4);
    memset(ao1, 0xa5, n * 4);
    memset(ao2, 0x5a, n * 4);
    const bool in_place = yt == MXP_DTYPE_F32 && seed % 2 == 0; /* y_out == y */
    mxp_epilogue ef = {.y = y1, .bias = bias ? bv : NULL, .B = B, .C = C, .y_type = yt,
                       .y_out = in_place ? (void *)y1 : yo1, .act = act, .a_type = at,
                       .a_out = ao1};
    mxp_epilogue eu = ef;
    eu.y = y2;
    eu.y_out = in_place ? (void *)y2 : yo2;
    eu.a_out = ao2;
    ks_epi_slots rf, ru; /* the two calls' result slots */
    ks_epi_bind(&ef, &rf);
    ks_epi_bind(&eu, &ru);
    k->bias_act_store(&ef);
    unfused(k, &eu, tx, ta);
    char what[160];
    snprintf(what, sizeof what, "%s B=%lld C=%lld y %s a %s act %d bias %d specials %d",
             k->isa, (long long)B, (long long)C, mxp_dtype_name(yt), mxp_dtype_name(at),
             (int)act, bias, specials);
    CHECK_MSG(memcmp(y1, y2, n * sizeof(float)) == 0, "%s: y differs", what);
    if (!in_place) CHECK_MSG(memcmp(yo1, yo2, n * ys) == 0, "%s: y_out differs", what);
    CHECK_MSG(test_f32_bits(rf.y_amax) == test_f32_bits(ru.y_amax) &&
                  rf.y_nonfinite == ru.y_nonfinite,
              "%s: y amax %g/%g nonfinite %lld/%lld", what, (double)rf.y_amax,
              (double)ru.y_amax, (long long)rf.y_nonfinite, (long long)ru.y_nonfinite);
    if (act != MXP_ACT_NONE) {
        CHECK_MSG(memcmp(ao1, ao2, n * as) == 0, "%s: a_out differs", what);
        CHECK_MSG(test_f32_bits(rf.a_amax) == test_f32_bits(ru.a_amax) &&
                      rf.a_nonfinite == ru.a_nonfinite,
                  "%s: a amax %g/%g nonfinite %lld/%lld", what, (double)rf.a_amax,
                  (double)ru.a_amax, (long long)rf.a_nonfinite, (long long)ru.a_nonfinite);
    }
    if (specials && !in_place && yt == MXP_DTYPE_F16) /* the data reached the FP16 overflow */
        CHECK_MSG(ru.y_nonfinite > 0, "%s: no non-finite values in the test data", what);
    free(y0), free(y1), free(y2), free(bv), free(tx), free(ta);
    free(yo1), free(yo2), free(ao1), free(ao2);
}

static void act_bwd(const mxp_kernels *k, mxp_act a, float *dx, const float *dy, const float *s,
                    size_t n) {
    switch (a) {
    case MXP_ACT_RELU: k->relu_bwd(dx, dy, s, n); break;
    case MXP_ACT_GELU: k->gelu_bwd(dx, dy, s, n); break;
    case MXP_ACT_TANH: k->tanh_bwd(dx, dy, s, n); break;
    default: break;
    }
}

/* act_bwd_store against widen, act_bwd, convert, absmax of the same table. */
static void bwd_case(const mxp_kernels *k, size_t n, mxp_dtype gt, mxp_dtype st, mxp_dtype xt,
                     mxp_act act, bool specials, uint64_t seed) {
    const size_t xs = mxp_dtype_info(xt)->size;
    float *v = test_xmalloc(n * sizeof(float)), *dy32 = test_xmalloc(n * sizeof(float));
    float *s32 = test_xmalloc(n * sizeof(float)), *dx32 = test_xmalloc(n * sizeof(float));
    unsigned char *dy = test_xmalloc(n * 4), *s = test_xmalloc(n * 4);
    unsigned char *dx1 = test_xmalloc(n * 4), *dx2 = test_xmalloc(n * 4);
    mxp_rng r;
    mxp_rng_init(&r, seed);
    fill(v, n, &r, specials);
    k->convert(gt, dy, MXP_DTYPE_F32, v, n);
    fill(v, n, &r, specials);
    if (act == MXP_ACT_TANH) k->tanh_fwd(v, v, n); /* tanh saves its output */
    k->convert(st, s, MXP_DTYPE_F32, v, n);
    memset(dx1, 0xa5, n * 4);
    memset(dx2, 0x5a, n * 4);
    mxp_act_bwd e = {.act = act, .n = n, .dy_type = gt, .dy = dy, .s_type = st, .s = s,
                     .dx_type = xt, .dx = dx1};
    ks_bwd_slots rs;
    ks_bwd_bind(&e, &rs);
    k->act_bwd_store(&e);
    k->convert(MXP_DTYPE_F32, dy32, gt, dy, n);
    k->convert(MXP_DTYPE_F32, s32, st, s, n);
    act_bwd(k, act, dx32, dy32, s32, n);
    k->convert(xt, dx2, MXP_DTYPE_F32, dx32, n);
    int64_t nf = 0;
    const float am = ks_absmax(k, dx32, n, &nf);
    char what[160];
    snprintf(what, sizeof what, "%s bwd n=%zu dy %s s %s dx %s act %d specials %d", k->isa, n,
             mxp_dtype_name(gt), mxp_dtype_name(st), mxp_dtype_name(xt), (int)act, specials);
    CHECK_MSG(memcmp(dx1, dx2, n * xs) == 0, "%s: dx differs", what);
    CHECK_MSG(test_f32_bits(rs.dx_amax) == test_f32_bits(am) && rs.dx_nonfinite == nf,
              "%s: amax %g/%g nonfinite %lld/%lld", what, (double)rs.dx_amax, (double)am,
              (long long)rs.dx_nonfinite, (long long)nf);
    free(v), free(dy32), free(s32), free(dx32), free(dy), free(s), free(dx1), free(dx2);
}

/* bias_grad_typed against bias_grad of the widened copy (same table), onto
 * a non-zero accumulator. */
static void bias_grad_case(const mxp_kernels *k, int64_t B, int64_t C, mxp_dtype t,
                           uint64_t seed) {
    const size_t n = (size_t)B * (size_t)C;
    float *v = test_xmalloc(n * sizeof(float)), *w = test_xmalloc(n * sizeof(float));
    float *d1 = test_xmalloc((size_t)C * sizeof(float)), *d2 = test_xmalloc((size_t)C * sizeof(float));
    unsigned char *dy = test_xmalloc(n * 4);
    mxp_rng r;
    mxp_rng_init(&r, seed);
    fill(v, n, &r, seed % 2 == 1);
    k->convert(t, dy, MXP_DTYPE_F32, v, n);
    k->convert(MXP_DTYPE_F32, w, t, dy, n);
    for (int64_t c = 0; c < C; c++) d1[c] = d2[c] = 0.37f * (float)c - 5.0f;
    k->bias_grad_typed(d1, t, dy, B, C);
    k->bias_grad(d2, w, B, C);
    CHECK_MSG(memcmp(d1, d2, (size_t)C * sizeof(float)) == 0, "%s bias_grad_typed %s B=%lld "
              "C=%lld differs", k->isa, mxp_dtype_name(t), (long long)B, (long long)C);
    free(v), free(w), free(d1), free(d2), free(dy);
}

static void test_kernel(const mxp_kernels *k) {
    static const int64_t bg[][2] = {{1, 1}, {7, 65}, {33, 64}, {256, 130}, {512, 70}, {5, 2048}};
    static const mxp_dtype bg_types[] = {MXP_DTYPE_F32, MXP_DTYPE_BF16, MXP_DTYPE_F16,
                                         MXP_DTYPE_F8_E4M3};
    for (size_t i = 0; i < sizeof bg / sizeof bg[0]; i++)
        for (size_t t = 0; t < sizeof bg_types / sizeof bg_types[0]; t++)
            bias_grad_case(k, bg[i][0], bg[i][1], bg_types[t], 500 + i * 4 + t);
    /* short, several pieces, a ragged tail, the pool split */
    static const size_t sizes[] = {1, 37, 3000, 70001};
    uint64_t bseed = 1000;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int gt = 0; gt < 3; gt++)
            for (int st = 0; st < 3; st++)
                for (int act = 1; act < MXP_ACT_COUNT; act++, bseed++)
                    bwd_case(k, sizes[i], store_types[gt], store_types[st],
                             store_types[(gt + act) % 3], (mxp_act)act, bseed % 2 == 1, bseed);
    /* whole rows (C <= piece), multi-piece rows, row segments, the pool split
     * (70 x 2048: also without an activation) */
    static const int64_t shapes[][2] = {{1, 1}, {3, 5}, {7, 65}, {64, 700},
                                        {5, 2500}, {70, 2048}, {129, 513}};
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int yt = 0; yt < 3; yt++)
            for (int at = 0; at < 3; at++)
                for (int act = 0; act < MXP_ACT_COUNT; act++) {
                    if (act == MXP_ACT_NONE && at > 0) continue;
                    kernel_case(k, shapes[s][0], shapes[s][1], store_types[yt], store_types[at],
                                (mxp_act)act, seed % 3 != 0, seed % 2 == 1, seed);
                    seed++;
                }
}

/* ---- 2. the model ------------------------------------------------------- */

enum { IN = 24, OUT = 9, BATCH = 48, STEPS = 3 };

typedef struct run_out {
    double loss[STEPS];
    mxp_nonfinite_site site[STEPS];
    mxp_layer_stats mon[MXP_MODEL_MAX_LAYERS + 1];
    int n_layers;
    size_t n_params;
    float *params; /* the master (or widened work) weights after the steps */
} run_out;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* STEPS trainer steps (default config: AdamW, clipping, the mode's loss
 * scaling) of a 3-hidden-layer MLP with a plain (or full) monitor attached,
 * fusion on or off; x scaled by x_scale (large: FP16 overflows). */
static void run_model(mxp_precision p, mxp_layer_kind act, int64_t hidden, bool fuse,
                      float x_scale, bool full_scan, run_out *o) {
    mxp_error err = {0};
    mxp_model_spec spec = mxp_model_spec_mlp(IN, hidden, 3, OUT, act, false, MXP_LOSS_MSE, BATCH);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    CHECK_OK(mxp_model_create(&spec, &pol, 77, &m, &err), &err);
    if (!m) return;
    nn_model_set_fusion(m, fuse);
    mxp_monitor *mon = NULL;
    CHECK_OK(mxp_monitor_create(m, false, &mon, &err), &err);
    mxp_monitor_set_full(mon, full_scan);
    mxp_model_set_monitor(m, mon);
    float x[BATCH * IN], y[BATCH * OUT];
    mxp_rng r;
    mxp_rng_init(&r, 5);
    for (int i = 0; i < BATCH * IN; i++) x[i] = x_scale * mxp_rng_normal(&r);
    for (int i = 0; i < BATCH * OUT; i++) y[i] = mxp_rng_normal(&r);
    mxp_batch b = {.x = x, .y = y, .B = BATCH};
    mxp_trainer_config tc = mxp_trainer_config_default();
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    for (int s = 0; t && s < STEPS; s++) {
        mxp_step_result res;
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
        o->loss[s] = res.loss;
        o->site[s] = res.site;
    }
    o->n_layers = mxp_model_num_layers(m);
    for (int l = 0; l <= o->n_layers; l++) o->mon[l] = *mxp_monitor_layer(mon, l);
    o->n_params = mxp_model_num_params(m);
    o->params = test_xmalloc(o->n_params * sizeof(float));
    mxp_dtype wt;
    const void *w = mxp_model_work(m, &wt);
    mxp_convert(MXP_DTYPE_F32, o->params, wt, w, o->n_params);
    mxp_trainer_destroy(t);
    mxp_model_set_monitor(m, NULL);
    mxp_monitor_destroy(mon);
    mxp_model_destroy(m);
}

static bool site_eq(const mxp_nonfinite_site *a, const mxp_nonfinite_site *b) {
    return a->found == b->found &&
           (!a->found || (a->backward == b->backward && a->layer == b->layer &&
                          a->count == b->count && strcmp(a->op, b->op) == 0));
}

/* Fused vs unfused for one configuration; folds the fused weights into *h. */
static void model_case(mxp_precision p, mxp_layer_kind act, int64_t hidden, float x_scale,
                       bool full_scan, uint64_t *h) {
    run_out f = {0}, u = {0};
    run_model(p, act, hidden, true, x_scale, full_scan, &f);
    run_model(p, act, hidden, false, x_scale, full_scan, &u);
    char what[128];
    snprintf(what, sizeof what, "%s act %d hidden %lld x*%g full %d", mxp_precision_name(p),
             (int)act, (long long)hidden, (double)x_scale, full_scan);
    if (!f.params || !u.params) {
        CHECK_MSG(false, "%s: model run failed", what);
        return;
    }
    bool any_site = false;
    for (int s = 0; s < STEPS; s++) {
        CHECK_MSG(memcmp(&f.loss[s], &u.loss[s], sizeof(double)) == 0, "%s: step %d loss %.17g "
                  "fused vs %.17g", what, s, f.loss[s], u.loss[s]);
        CHECK_MSG(site_eq(&f.site[s], &u.site[s]), "%s: step %d site differs (layer %d/%d)",
                  what, s, f.site[s].layer, u.site[s].layer);
        any_site |= f.site[s].found;
    }
    CHECK_MSG(memcmp(f.params, u.params, f.n_params * sizeof(float)) == 0,
              "%s: weights differ", what);
    for (int l = 0; l <= f.n_layers; l++)
        CHECK_MSG(memcmp(&f.mon[l], &u.mon[l], sizeof f.mon[l]) == 0,
                  "%s: monitor stats of layer %d differ (out absmax %g vs %g)", what, l,
                  (double)f.mon[l].t[MXP_MON_OUT].absmax, (double)u.mon[l].t[MXP_MON_OUT].absmax);
    if (x_scale > 1e3f && p == MXP_PRECISION_FP16)
        CHECK_MSG(any_site, "%s: the overflow case found no non-finite site", what);
    *h = fnv(*h, f.params, f.n_params * sizeof(float));
    *h = fnv(*h, f.loss, sizeof f.loss);
    free(f.params);
    free(u.params);
}

static uint64_t test_models(void) {
    uint64_t h = 1469598103934665603ull;
    static const mxp_layer_kind acts[] = {MXP_LAYER_GELU, MXP_LAYER_RELU, MXP_LAYER_TANH};
    for (int p = 0; p < MXP_PRECISION_COUNT; p++)
        for (int a = 0; a < 3; a++)
            model_case((mxp_precision)p, acts[a], 40, 1.0f, false, &h);
    /* hidden 1024 x batch 48: the pool split of the epilogue */
    model_case(MXP_PRECISION_MIXED_BF16, MXP_LAYER_GELU, 1024, 1.0f, false, &h);
    model_case(MXP_PRECISION_FP32, MXP_LAYER_GELU, 1024, 1.0f, false, &h);
    /* FP16 overflow in the forward: sites; a full monitor scan (unfused) */
    model_case(MXP_PRECISION_FP16, MXP_LAYER_GELU, 40, 3.0e4f, false, &h);
    model_case(MXP_PRECISION_MIXED_FP16, MXP_LAYER_RELU, 40, 1.0f, true, &h);
    return h;
}

/* ---- 3. thread counts ----------------------------------------------------- */

int main(int argc, char **argv) {
    const bool child = argc > 1 && strcmp(argv[1], "--digest") == 0;
    if (!child) {
        test_kernel(mxp_kernels_generic());
        if (mxp_avx512_usable(mxp_cpu_features_get())) test_kernel(mxp_kernels_avx512());
        else printf("test_fused: AVX-512 kernel part skipped (CPU cannot run it)\n");
    }
    const uint64_t h = test_models();
    if (child) {
        printf("%016llx\n", (unsigned long long)h);
        return test_finish("test_fused (digest)");
    }
    /* the same models on one thread: the same digest */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "MIXPREC_NUM_THREADS=1 '%s' --digest", argv[0]);
    FILE *f = popen(cmd, "r");
    char line[64] = "";
    CHECK(f && fgets(line, sizeof line, f));
    const int rc = f ? pclose(f) : -1;
    char want[32];
    snprintf(want, sizeof want, "%016llx\n", (unsigned long long)h);
    CHECK_MSG(rc == 0 && strcmp(line, want) == 0,
              "one thread: digest %s (exit %d), %d threads: %s", line, rc, mxp_threads_max(),
              want);
    return test_finish("test_fused");
}
