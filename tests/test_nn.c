/* tests/test_nn.c: the nn module (model slabs, layers, losses, driver).
 *
 * Oracles, all independent of the code under test:
 *   - a double-precision reference forward written here (linear, relu, exact
 *     gelu, tanh, layernorm, mse, softmax cross-entropy) with its own slab
 *     offsets computed from the spec;
 *   - central finite differences of the model loss for EVERY parameter of
 *     models covering every layer kind and both losses (fp32 mode);
 *   - exact algebra: loss scaling by a power of two and accumulation (+=)
 *     scale gradients exactly; RNE rounding of FP32 masters into work.
 * Also: init ranges (PyTorch nn.Linear bounds), tensor table, mixed and pure
 * modes, non-finite provenance, set_policy round trips, memory roles, and
 * rejected arguments.
 */
#include <mixprec/model.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAXW 32
#define MAXB 16

static mxp_precision_policy pol(mxp_precision mode) {
    mxp_precision_policy p;
    mxp_precision_policy_default(mode, &p);
    return p;
}

static mxp_model *make(const mxp_model_spec *s, mxp_precision mode, uint64_t seed) {
    mxp_precision_policy p = pol(mode);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(s, &p, seed, &m, &err), &err);
    return m;
}

static mxp_model_spec spec_of(int64_t in, int64_t B, mxp_loss_kind loss, int n,
                              const mxp_layer_kind *kinds, const int64_t *units) {
    mxp_model_spec s;
    memset(&s, 0, sizeof s);
    s.in_dim = in;
    s.max_batch = B;
    s.loss = loss;
    s.layernorm_eps = 1e-5f;
    s.n_layers = n;
    for (int i = 0; i < n; i++) {
        s.layers[i].kind = kinds[i];
        s.layers[i].units = units[i];
    }
    return s;
}

static void fill_uniform(float *v, size_t n, uint64_t seed, float lo, float hi) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * mxp_rng_uniform(&r);
}

/* ---- double-precision reference --------------------------------------- */

/* Forward of spec s with FP32 parameters p (slab order: per layer weight
 * then bias) on x [B, in]; pred [B, out]. *min_relu_in gets the smallest
 * |input| seen by any relu (kink distance). */
static void ref_forward(const mxp_model_spec *s, const float *p, const float *x,
                        int64_t B, double *pred, double *min_relu_in) {
    double cur[MAXB * MAXW], nxt[MAXB * MAXW];
    int64_t w = s->in_dim;
    size_t off = 0;
    *min_relu_in = INFINITY;
    for (int64_t i = 0; i < B * w; i++) cur[i] = x[i];
    for (int l = 0; l < s->n_layers; l++) {
        const mxp_layer_spec *ls = &s->layers[l];
        int64_t out = ls->kind == MXP_LAYER_LINEAR ? ls->units : w;
        for (int64_t b = 0; b < B; b++) {
            const double *xr = cur + b * w;
            double *yr = nxt + b * out;
            switch (ls->kind) {
            case MXP_LAYER_LINEAR: {
                const float *W = p + off, *bias = p + off + out * w;
                for (int64_t o = 0; o < out; o++) {
                    double a = bias[o];
                    for (int64_t i = 0; i < w; i++) a += (double)W[o * w + i] * xr[i];
                    yr[o] = a;
                }
                break;
            }
            case MXP_LAYER_RELU:
                for (int64_t i = 0; i < w; i++) {
                    yr[i] = xr[i] > 0 ? xr[i] : 0;
                    if (fabs(xr[i]) < *min_relu_in) *min_relu_in = fabs(xr[i]);
                }
                break;
            case MXP_LAYER_GELU:
                for (int64_t i = 0; i < w; i++)
                    yr[i] = 0.5 * xr[i] * (1.0 + erf(xr[i] / sqrt(2.0)));
                break;
            case MXP_LAYER_TANH:
                for (int64_t i = 0; i < w; i++) yr[i] = tanh(xr[i]);
                break;
            case MXP_LAYER_LAYERNORM: {
                double mu = 0, var = 0;
                for (int64_t i = 0; i < w; i++) mu += xr[i];
                mu /= (double)w;
                for (int64_t i = 0; i < w; i++) var += (xr[i] - mu) * (xr[i] - mu);
                var /= (double)w;
                double rs = 1.0 / sqrt(var + (double)s->layernorm_eps);
                for (int64_t i = 0; i < w; i++)
                    yr[i] = (xr[i] - mu) * rs * p[off + i] + p[off + w + i];
                break;
            }
            default:
                break;
            }
        }
        if (ls->kind == MXP_LAYER_LINEAR) off += (size_t)(out * w + out);
        if (ls->kind == MXP_LAYER_LAYERNORM) off += (size_t)(2 * w);
        w = out;
        memcpy(cur, nxt, sizeof(double) * (size_t)(B * w));
    }
    memcpy(pred, cur, sizeof(double) * (size_t)(B * w));
}

static double ref_loss(mxp_loss_kind k, const double *pred, const float *y,
                       const int32_t *lab, int64_t B, int64_t C) {
    double t = 0;
    if (k == MXP_LOSS_MSE) {
        for (int64_t i = 0; i < B * C; i++) t += (pred[i] - y[i]) * (pred[i] - y[i]);
        return t / (double)(B * C);
    }
    for (int64_t b = 0; b < B; b++) {
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++) mx = fmax(mx, pred[b * C + c]);
        for (int64_t c = 0; c < C; c++) s += exp(pred[b * C + c] - mx);
        t += mx + log(s) - pred[b * C + lab[b]];
    }
    return t / (double)B;
}

/* A batch with inputs in [-1.5, 1.5], MSE targets in [-1, 1], labels. */
typedef struct tbatch {
    float x[MAXB * MAXW], y[MAXB * MAXW];
    int32_t lab[MAXB];
    mxp_batch b;
} tbatch;

static void make_batch(tbatch *t, const mxp_model_spec *s, int64_t out, int64_t B,
                       uint64_t seed) {
    fill_uniform(t->x, (size_t)(B * s->in_dim), seed, -1.5f, 1.5f);
    fill_uniform(t->y, (size_t)(B * out), seed + 1000, -1.0f, 1.0f);
    for (int64_t b = 0; b < B; b++) t->lab[b] = (int32_t)((b * 7 + (int64_t)seed) % out);
    t->b.x = t->x;
    t->b.y = s->loss == MXP_LOSS_MSE ? t->y : NULL;
    t->b.labels = s->loss == MXP_LOSS_XENT ? t->lab : NULL;
    t->b.B = B;
}

static double loss_of(mxp_model *m, const mxp_batch *b) {
    double L = NAN;
    mxp_error err = {0};
    CHECK_OK(mxp_model_step(m, b, false, 1.0f, &L, NULL, &err), &err);
    return L;
}

/* ---- structure and init ------------------------------------------------- */

static void test_structure(void) {
    mxp_model_spec s = mxp_model_spec_mlp(5, 7, 2, 3, MXP_LAYER_GELU, true,
                                          MXP_LOSS_MSE, 4);
    CHECK(s.n_layers == 7);
    const mxp_layer_kind want[] = {MXP_LAYER_LINEAR, MXP_LAYER_LAYERNORM, MXP_LAYER_GELU,
                                   MXP_LAYER_LINEAR, MXP_LAYER_LAYERNORM, MXP_LAYER_GELU,
                                   MXP_LAYER_LINEAR};
    for (int i = 0; i < 7; i++) CHECK(s.layers[i].kind == want[i]);
    CHECK(s.layers[0].units == 7 && s.layers[3].units == 7 && s.layers[6].units == 3);
    CHECK(s.layernorm_eps == 1e-5f);

    mxp_model *m = make(&s, MXP_PRECISION_FP32, 42);
    if (!m) return;
    /* P = (7*5+7) + 2*7 + (7*7+7) + 2*7 + (3*7+3) */
    const size_t P = 42 + 14 + 56 + 14 + 24;
    CHECK(mxp_model_num_params(m) == P);
    CHECK(mxp_model_out_dim(m) == 3);
    CHECK(mxp_model_num_tensors(m) == 10);
    const char *names[] = {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                           "layers.1.bias", "layers.3.weight", "layers.3.bias",
                           "layers.4.weight", "layers.4.bias", "layers.6.weight",
                           "layers.6.bias"};
    const size_t offs[] = {0, 35, 42, 49, 56, 105, 112, 119, 126, 147};
    const size_t counts[] = {35, 7, 7, 7, 49, 7, 7, 7, 21, 3};
    for (int i = 0; i < 10; i++) {
        const mxp_tensor_info *t = mxp_model_tensor(m, i);
        CHECK_MSG(t && strcmp(t->name, names[i]) == 0, "tensor %d name %s", i,
                  t ? t->name : "(null)");
        CHECK(t && t->offset == offs[i] && t->count == counts[i]);
    }
    CHECK(mxp_model_tensor(m, 10) == NULL && mxp_model_tensor(m, -1) == NULL);
    const mxp_tensor_info *w0 = mxp_model_tensor(m, 0);
    CHECK(w0->ndim == 2 && w0->shape[0] == 7 && w0->shape[1] == 5);
    CHECK(mxp_model_tensor(m, 1)->ndim == 1 && mxp_model_tensor(m, 1)->shape[0] == 7);

    /* init: linear U(-1/sqrt(in), 1/sqrt(in)); layernorm gamma 1, beta 0 */
    const float *mw = mxp_model_master(m);
    CHECK(mw != NULL);
    for (int i = 0; i < 10; i++) {
        const mxp_tensor_info *t = mxp_model_tensor(m, i);
        bool ln = (i / 2) % 2 == 1 && i < 8;
        double bound = 1.0 / sqrt(i < 2 ? 5.0 : 7.0);
        double mx = 0;
        for (size_t j = 0; j < t->count; j++) {
            float v = mw[t->offset + j];
            if (ln) {
                CHECK(v == (i % 2 == 0 ? 1.0f : 0.0f));
            } else {
                CHECK_MSG(fabs(v) <= bound, "%s[%zu]=%g bound %g", t->name, j, v, bound);
                mx = fmax(mx, fabs(v));
            }
        }
        if (!ln && t->count >= 21) CHECK_MSG(mx > 0.5 * bound, "%s spread", t->name);
    }
    /* bit for bit the stream of mxp_rng_uniform (one draw per parameter of
     * the linear layers, in slab order; layernorm draws nothing), whatever
     * the counter's position in its Philox block at each tensor */
    {
        mxp_rng r;
        mxp_rng_init(&r, 42);
        size_t bad = 0;
        for (int i = 0; i < 10; i++) {
            const mxp_tensor_info *t = mxp_model_tensor(m, i);
            if ((i / 2) % 2 == 1 && i < 8) continue; /* layernorm */
            const float bound = (float)(1.0 / sqrt(i < 2 ? 5.0 : 7.0));
            for (size_t j = 0; j < t->count; j++) {
                const float u = (2.0f * mxp_rng_uniform(&r) - 1.0f) * bound;
                if (memcmp(&u, &mw[t->offset + j], sizeof u) != 0 && bad++ == 0)
                    test_fail(__FILE__, __LINE__, "%s[%zu] = %.9g, mxp_rng_uniform stream %.9g",
                              t->name, j, mw[t->offset + j], u);
            }
        }
        CHECK_MSG(bad == 0, "%zu init values differ from the mxp_rng_uniform stream", bad);
    }
    /* deterministic per seed, different across seeds */
    mxp_model *m2 = make(&s, MXP_PRECISION_FP32, 42), *m3 = make(&s, MXP_PRECISION_FP32, 43);
    if (m2 && m3) {
        CHECK(memcmp(mw, mxp_model_master(m2), P * sizeof(float)) == 0);
        CHECK(memcmp(mw, mxp_model_master(m3), P * sizeof(float)) != 0);
    }
    mxp_model_destroy(m2);
    mxp_model_destroy(m3);
    CHECK(strcmp(mxp_layer_kind_name(MXP_LAYER_LAYERNORM), "layernorm") == 0);
    CHECK(strcmp(mxp_loss_kind_name(MXP_LOSS_MSE), "mse") == 0);
    CHECK(mxp_model_get_spec(m)->n_layers == 7);
    CHECK(mxp_model_policy(m)->mode == MXP_PRECISION_FP32);
    mxp_model_destroy(m);
    mxp_model_destroy(NULL);
}

/* ---- forward against the double reference -------------------------------- */

static void check_forward(const char *label, const mxp_model_spec *s) {
    mxp_model *m = make(s, MXP_PRECISION_FP32, 7);
    if (!m) return;
    int64_t B = s->max_batch, C = mxp_model_out_dim(m);
    tbatch t;
    make_batch(&t, s, C, B, 11);
    float pred[MAXB * MAXW];
    double ref[MAXB * MAXW], mr;
    mxp_error err = {0};
    CHECK_OK(mxp_model_predict(m, t.x, B, pred, &err), &err);
    ref_forward(s, mxp_model_master(m), t.x, B, ref, &mr);
    for (int64_t i = 0; i < B * C; i++)
        CHECK_MSG(test_close(pred[i], ref[i], 1e-5, 1e-4), "%s: pred[%lld]=%.8g ref %.8g",
                  label, (long long)i, pred[i], ref[i]);
    double rl = ref_loss(s->loss, ref, t.y, t.lab, B, C);
    double L = loss_of(m, &t.b);
    CHECK_MSG(test_close(L, rl, 1e-6, 1e-5), "%s: loss %.9g ref %.9g", label, L, rl);
    /* a smaller batch uses only its rows */
    CHECK_OK(mxp_model_predict(m, t.x, 1, pred, &err), &err);
    for (int64_t i = 0; i < C; i++) CHECK(test_close(pred[i], ref[i], 1e-5, 1e-4));
    mxp_model_destroy(m);
}

/* ---- finite differences --------------------------------------------------- */

/* Analytic grads (step, scale 1) vs central differences of the loss for
 * every parameter, perturbing the master slab. */
static void fd_check(const char *label, const mxp_model_spec *s, uint64_t seed) {
    const double h = 1e-3;
    mxp_model *m = make(s, MXP_PRECISION_FP32, seed);
    if (!m) return;
    int64_t B = s->max_batch, C = mxp_model_out_dim(m);
    tbatch t;
    /* stay away from relu kinks: pick a batch whose relu inputs are far
     * from 0 relative to the perturbation */
    uint64_t ds = seed * 100;
    for (int tries = 0; tries < 200; tries++, ds++) {
        make_batch(&t, s, C, B, ds);
        double ref[MAXB * MAXW], mr;
        ref_forward(s, mxp_model_master(m), t.x, B, ref, &mr);
        if (mr > 0.02) break;
    }
    size_t P = mxp_model_num_params(m);
    float *g = calloc(P, sizeof(float));
    float *mw = mxp_model_master(m);
    mxp_error err = {0};
    double L0 = NAN;
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &t.b, true, 1.0f, &L0, NULL, &err), &err);
    memcpy(g, mxp_model_grads(m), P * sizeof(float));
    int bad = 0;
    double gnorm = 0;
    for (size_t i = 0; i < P; i++) {
        float save = mw[i];
        float up = (float)(save + h), dn = (float)(save - h);
        mw[i] = up;
        mxp_model_sync_work(m);
        double lp = loss_of(m, &t.b);
        mw[i] = dn;
        mxp_model_sync_work(m);
        double lm = loss_of(m, &t.b);
        mw[i] = save;
        mxp_model_sync_work(m);
        double fd = (lp - lm) / ((double)up - (double)dn);
        gnorm += (double)g[i] * g[i];
        if (!test_close(g[i], fd, 1e-3, 1e-2)) {
            bad++;
            test_fail(__FILE__, __LINE__, "%s: grad[%zu] = %.7g, finite difference %.7g",
                      label, i, g[i], fd);
        }
        test_checks++;
    }
    CHECK_MSG(gnorm > 1e-6, "%s: gradient is all zero", label);
    /* the grads are unchanged by the forward-only steps */
    CHECK(memcmp(g, mxp_model_grads(m), P * sizeof(float)) == 0);
    if (bad) fprintf(stderr, "%s: %d of %zu grads off\n", label, bad, P);
    free(g);
    mxp_model_destroy(m);
}

static void test_fd_all(void) {
    const int64_t in = 5, hid = 7, out = 3, B = 4;
    struct {
        const char *label;
        mxp_model_spec s;
    } cases[16];
    int n = 0;
    {
        mxp_layer_kind k[] = {MXP_LAYER_LINEAR};
        int64_t u[] = {out};
        cases[n].label = "linear";
        cases[n++].s = spec_of(in, B, MXP_LOSS_MSE, 1, k, u);
    }
    {
        mxp_layer_kind k[] = {MXP_LAYER_LINEAR, MXP_LAYER_LINEAR};
        int64_t u[] = {6, out};
        cases[n].label = "linear-linear (dX path)";
        cases[n++].s = spec_of(in, B, MXP_LOSS_MSE, 2, k, u);
    }
    const mxp_layer_kind acts[] = {MXP_LAYER_RELU, MXP_LAYER_GELU, MXP_LAYER_TANH};
    const char *alabel[] = {"relu", "gelu", "tanh"};
    for (int a = 0; a < 3; a++) {
        cases[n].label = alabel[a];
        cases[n++].s = mxp_model_spec_mlp(in, hid, 1, out, acts[a], false,
                                          MXP_LOSS_MSE, B);
    }
    cases[n].label = "layernorm+tanh";
    cases[n++].s = mxp_model_spec_mlp(in, hid, 1, out, MXP_LAYER_TANH, true,
                                      MXP_LOSS_MSE, B);
    cases[n].label = "xent gelu depth 2";
    cases[n++].s = mxp_model_spec_mlp(in, hid, 2, 4, MXP_LAYER_GELU, false,
                                      MXP_LOSS_XENT, B);
    {
        mxp_layer_kind k[] = {MXP_LAYER_LINEAR, MXP_LAYER_GELU, MXP_LAYER_LAYERNORM,
                              MXP_LAYER_LINEAR};
        int64_t u[] = {hid, 0, 0, 4};
        cases[n].label = "xent layernorm";
        cases[n++].s = spec_of(in, B, MXP_LOSS_XENT, 4, k, u);
    }
    {
        mxp_layer_kind k[] = {MXP_LAYER_LAYERNORM, MXP_LAYER_LINEAR};
        int64_t u[] = {0, out};
        cases[n].label = "layernorm first";
        cases[n++].s = spec_of(in, B, MXP_LOSS_MSE, 2, k, u);
    }
    {
        mxp_layer_kind k[] = {MXP_LAYER_TANH, MXP_LAYER_LINEAR, MXP_LAYER_RELU,
                              MXP_LAYER_LINEAR};
        int64_t u[] = {0, hid, 0, out};
        cases[n].label = "activation first";
        cases[n++].s = spec_of(in, B, MXP_LOSS_MSE, 4, k, u);
    }
    for (int i = 0; i < n; i++) {
        check_forward(cases[i].label, &cases[i].s);
        fd_check(cases[i].label, &cases[i].s, (uint64_t)(i + 1));
    }
}

/* ---- loss scaling and accumulation ----------------------------------------- */

static void test_scaling(void) {
    mxp_model_spec s = mxp_model_spec_mlp(5, 7, 2, 3, MXP_LAYER_GELU, true,
                                          MXP_LOSS_MSE, 4);
    mxp_model *m = make(&s, MXP_PRECISION_FP32, 3);
    if (!m) return;
    tbatch t;
    make_batch(&t, &s, 3, 4, 5);
    size_t P = mxp_model_num_params(m);
    float *g1 = calloc(P, sizeof(float));
    mxp_error err = {0};
    double l1, l2;
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &t.b, true, 1.0f, &l1, NULL, &err), &err);
    memcpy(g1, mxp_model_grads(m), P * sizeof(float));
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &t.b, true, 1024.0f, &l2, NULL, &err), &err);
    CHECK(l1 == l2); /* the reported loss is unscaled */
    const float *g = mxp_model_grads(m);
    for (size_t i = 0; i < P; i++)
        CHECK_MSG(test_close(g[i], 1024.0 * g1[i], 1e-30, 1e-6), "scaled grad[%zu] %g vs %g",
                  i, g[i], 1024.0 * g1[i]);
    /* accumulation: a second identical step adds the same grads */
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &t.b, true, 1.0f, NULL, NULL, &err), &err);
    CHECK_OK(mxp_model_step(m, &t.b, true, 1.0f, NULL, NULL, &err), &err);
    /* (kernels may accumulate term by term into the slab: ulp-level rounding) */
    for (size_t i = 0; i < P; i++)
        CHECK_MSG(test_close(g[i], 2.0 * g1[i], 1e-12, 1e-6), "accumulated grad[%zu] %.9g vs %.9g",
                  i, g[i], 2.0 * g1[i]);
    mxp_model_zero_grads(m);
    for (size_t i = 0; i < P; i++) CHECK(g[i] == 0.0f);
    free(g1);
    mxp_model_destroy(m);
}

/* ---- mixed and pure modes --------------------------------------------------- */

static void test_modes(void) {
    mxp_model_spec s = mxp_model_spec_mlp(8, 16, 2, 4, MXP_LAYER_GELU, true,
                                          MXP_LOSS_MSE, 8);
    mxp_model *f = make(&s, MXP_PRECISION_FP32, 9);
    if (!f) return;
    size_t P = mxp_model_num_params(f);
    tbatch t;
    make_batch(&t, &s, 4, 8, 77);
    double lf = loss_of(f, &t.b);
    mxp_error err = {0};
    mxp_model_zero_grads(f);
    CHECK_OK(mxp_model_step(f, &t.b, true, 1.0f, NULL, NULL, &err), &err);
    const float *gf = mxp_model_grads(f);

    const mxp_precision modes[] = {MXP_PRECISION_MIXED_BF16, MXP_PRECISION_MIXED_FP16,
                                   MXP_PRECISION_BF16, MXP_PRECISION_FP16};
    const mxp_dtype wt[] = {MXP_DTYPE_BF16, MXP_DTYPE_F16, MXP_DTYPE_BF16, MXP_DTYPE_F16};
    const double rtol[] = {1e-2, 1e-2, 1e-2, 1e-2};
    for (int i = 0; i < 4; i++) {
        mxp_model *m = make(&s, modes[i], 9);
        if (!m) continue;
        bool pure = i >= 2;
        mxp_dtype t_;
        void *work = mxp_model_work(m, &t_);
        CHECK(t_ == wt[i] && work != NULL);
        CHECK((mxp_model_master(m) == NULL) == pure);
        const float *fm = mxp_model_master(f);
        for (size_t j = 0; j < P; j++) {
            if (!pure) CHECK(mxp_model_master(m)[j] == fm[j]);
            CHECK(mxp_load_f32(wt[i], work, j) == mxp_round_to(wt[i], fm[j]));
            CHECK(mxp_model_param(m, j) == (pure ? mxp_round_to(wt[i], fm[j]) : fm[j]));
        }
        double lm = loss_of(m, &t.b);
        CHECK_MSG(test_close(lm, lf, 0, rtol[i]), "%s loss %.6g vs fp32 %.6g",
                  mxp_precision_name(modes[i]), lm, lf);
        CHECK(lm != lf); /* really computed in low precision */
        /* grads close to fp32 in relative L2 */
        mxp_model_zero_grads(m);
        CHECK_OK(mxp_model_step(m, &t.b, true, 256.0f, NULL, NULL, &err), &err);
        const float *gm = mxp_model_grads(m);
        double num = 0, den = 0;
        for (size_t j = 0; j < P; j++) {
            double d = gm[j] / 256.0 - gf[j];
            num += d * d;
            den += (double)gf[j] * gf[j];
        }
        CHECK_MSG(sqrt(num / den) < 2e-2, "%s grad rel err %.3g",
                  mxp_precision_name(modes[i]), sqrt(num / den));
        mxp_model_memory mem;
        mxp_model_memory_usage(m, &mem);
        CHECK(mem.params == 2 * P && mem.grads == 4 * P);
        CHECK(mem.master == (pure ? 0 : 4 * P));
        CHECK(mem.activations > 0);
        mxp_model_destroy(m);
    }
    mxp_model_memory mem;
    mxp_model_memory_usage(f, &mem);
    CHECK(mem.params == 4 * P && mem.master == 0 && mem.grads == 4 * P);
    /* fp32 activations: at least inputs + 7 outputs + 2 grad + 2 scratch
     * (sa, sb; an all-FP32 model has no staging buffer sy) */
    CHECK(mem.activations >= 4 * 8 * (8 + 16 * 6 + 4 + 4 * 16));

    /* fp8 (emulated) runs and gives a finite loss near fp32 */
    mxp_model *m8 = make(&s, MXP_PRECISION_FP8, 9);
    if (m8) {
        double l8 = loss_of(m8, &t.b);
        CHECK_MSG(isfinite(l8) && test_close(l8, lf, 0, 0.1), "fp8 loss %g vs %g", l8, lf);
        mxp_nonfinite_site site;
        CHECK_OK(mxp_model_step(m8, &t.b, true, 1.0f, NULL, &site, &err), &err);
        mxp_model_destroy(m8);
    }
    mxp_model_destroy(f);
}

/* ---- non-finite provenance -------------------------------------------------- */

static void test_nonfinite(void) {
    mxp_model_spec s = mxp_model_spec_mlp(4, 8, 1, 2, MXP_LAYER_RELU, false,
                                          MXP_LOSS_MSE, 4);
    tbatch t;
    make_batch(&t, &s, 2, 4, 3);
    for (int b = 0; b < 4; b++) t.x[b * 4] = 10.0f;
    mxp_error err = {0};
    mxp_nonfinite_site site;
    double L;

    mxp_model *h = make(&s, MXP_PRECISION_MIXED_FP16, 1);
    mxp_model *f = make(&s, MXP_PRECISION_FP32, 1);
    if (!h || !f) return;
    /* clean run */
    CHECK_OK(mxp_model_step(h, &t.b, true, 1.0f, &L, &site, &err), &err);
    CHECK(!site.found && isfinite(L));
    /* 3e4 fits FP16, 3e5 = 3e4 * 10 does not: layer 0's stored output overflows */
    mxp_model_master(h)[0] = 3e4f;
    mxp_model_sync_work(h);
    mxp_model_master(f)[0] = 3e4f;
    CHECK_OK(mxp_model_step(h, &t.b, true, 1.0f, &L, &site, &err), &err);
    CHECK(site.found && !site.backward && site.layer == 0);
    CHECK(site.op && strcmp(site.op, "linear") == 0);
    CHECK_MSG(site.count == 4, "count %lld", (long long)site.count);
    /* the same weights are fine in FP32 */
    CHECK_OK(mxp_model_step(f, &t.b, true, 1.0f, &L, &site, &err), &err);
    CHECK(!site.found && isfinite(L));

    /* scaled loss gradient overflowing FP16: backward, the loss (-1) */
    mxp_model_master(h)[0] = 0.1f;
    mxp_model_sync_work(h);
    CHECK_OK(mxp_model_step(h, &t.b, true, 1e9f, &L, &site, &err), &err);
    CHECK(isfinite(L));
    CHECK(site.found && site.backward && site.layer == -1);
    CHECK(site.op && strcmp(site.op, "mse") == 0 && site.count >= 1);
    /* forward only: no backward scan */
    CHECK_OK(mxp_model_step(h, &t.b, false, 1e9f, &L, &site, &err), &err);
    CHECK(!site.found);

    /* NaN weight in the last linear (layer 2) of an fp32 model */
    const mxp_tensor_info *w2 = mxp_model_tensor(f, 2);
    CHECK(strcmp(w2->name, "layers.2.weight") == 0);
    mxp_model_master(f)[0] = 0.1f;
    mxp_model_master(f)[w2->offset] = NAN;
    CHECK_OK(mxp_model_step(f, &t.b, true, 1.0f, &L, &site, &err), &err);
    CHECK(isnan(L));
    CHECK(site.found && !site.backward && site.layer == 2 && site.count == 4);
    CHECK(site.op && strcmp(site.op, "linear") == 0);

    /* finite outputs, non-finite loss (an infinite target): the loss, forward */
    mxp_model_master(f)[w2->offset] = 0.1f;
    t.y[3] = INFINITY;
    CHECK_OK(mxp_model_step(f, &t.b, false, 1.0f, &L, &site, &err), &err);
    CHECK(isinf(L));
    CHECK(site.found && !site.backward && site.layer == -1 && site.count == 1);
    CHECK(site.op && strcmp(site.op, "mse") == 0);
    mxp_model_destroy(h);
    mxp_model_destroy(f);
}

/* ---- set_policy -------------------------------------------------------------- */

static void test_set_policy(void) {
    mxp_model_spec s = mxp_model_spec_mlp(6, 10, 2, 3, MXP_LAYER_TANH, true,
                                          MXP_LOSS_XENT, 5);
    mxp_model *m = make(&s, MXP_PRECISION_FP32, 21);
    if (!m) return;
    size_t P = mxp_model_num_params(m);
    float *orig = malloc(P * sizeof(float));
    memcpy(orig, mxp_model_master(m), P * sizeof(float));
    tbatch t;
    make_batch(&t, &s, 3, 5, 8);
    double l0 = loss_of(m, &t.b);
    mxp_error err = {0};
    mxp_precision_policy p16 = pol(MXP_PRECISION_MIXED_FP16), p32 = pol(MXP_PRECISION_FP32),
                         pb = pol(MXP_PRECISION_BF16);

    CHECK_OK(mxp_model_step(m, &t.b, true, 1.0f, NULL, NULL, &err), &err);
    CHECK_OK(mxp_model_set_policy(m, &p16, &err), &err);
    CHECK(mxp_model_policy(m)->mode == MXP_PRECISION_MIXED_FP16);
    CHECK(memcmp(orig, mxp_model_master(m), P * sizeof(float)) == 0);
    mxp_dtype wt;
    void *work = mxp_model_work(m, &wt);
    CHECK(wt == MXP_DTYPE_F16);
    for (size_t i = 0; i < P; i++) {
        CHECK(mxp_load_f32(wt, work, i) == mxp_round_to(MXP_DTYPE_F16, orig[i]));
        CHECK(mxp_model_grads(m)[i] == 0.0f);
    }
    double l16 = loss_of(m, &t.b);
    CHECK(test_close(l16, l0, 0, 1e-2));
    CHECK_OK(mxp_model_step(m, &t.b, true, 1024.0f, NULL, NULL, &err), &err);
    CHECK_OK(mxp_model_set_policy(m, &p32, &err), &err);
    CHECK(memcmp(orig, mxp_model_master(m), P * sizeof(float)) == 0);
    CHECK(loss_of(m, &t.b) == l0);

    /* through a pure mode the weights come back rounded */
    CHECK_OK(mxp_model_set_policy(m, &pb, &err), &err);
    CHECK(mxp_model_master(m) == NULL);
    for (size_t i = 0; i < P; i++)
        CHECK(mxp_model_param(m, i) == mxp_round_to(MXP_DTYPE_BF16, orig[i]));
    CHECK_OK(mxp_model_set_policy(m, &p32, &err), &err);
    for (size_t i = 0; i < P; i++)
        CHECK(mxp_model_master(m)[i] == mxp_round_to(MXP_DTYPE_BF16, orig[i]));

    /* a bad policy changes nothing */
    mxp_precision_policy bad = p16;
    bad.grad = MXP_DTYPE_COUNT;
    CHECK(mxp_model_set_policy(m, &bad, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "grad") != NULL);
    CHECK(mxp_model_policy(m)->mode == MXP_PRECISION_FP32);
    CHECK(mxp_model_set_policy(m, NULL, &err) == MXP_ERR_INVALID_ARG);
    free(orig);
    mxp_model_destroy(m);
}

/* ---- argument validation ------------------------------------------------------ */

static void expect_create_fail(const mxp_model_spec *s, const char *needle) {
    mxp_precision_policy p = pol(MXP_PRECISION_FP32);
    mxp_model *m = (mxp_model *)&p; /* must be reset to NULL */
    mxp_error err = {0};
    mxp_status st = mxp_model_create(s, &p, 1, &m, &err);
    CHECK_MSG(st == MXP_ERR_INVALID_ARG && m == NULL, "create accepted (%s)", needle);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

static void test_bad_args(void) {
    mxp_model_spec good = mxp_model_spec_mlp(4, 6, 1, 3, MXP_LAYER_RELU, false,
                                             MXP_LOSS_XENT, 4);
    mxp_model_spec s;
    s = good; s.n_layers = 0; expect_create_fail(&s, "n_layers");
    s = good; s.n_layers = 65; expect_create_fail(&s, "n_layers");
    s = mxp_model_spec_mlp(4, 6, 40, 3, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 4);
    expect_create_fail(&s, "n_layers");
    s = good; s.in_dim = 0; expect_create_fail(&s, "in_dim");
    s = good; s.max_batch = 0; expect_create_fail(&s, "max_batch");
    s = good; s.layers[0].units = 0; expect_create_fail(&s, "units");
    s = good; s.layers[2].kind = MXP_LAYER_TANH; expect_create_fail(&s, "last layer");
    s = good; s.layers[1].kind = MXP_LAYER_KIND_COUNT; expect_create_fail(&s, "kind");
    s = good; s.layers[2].units = 1; expect_create_fail(&s, "out_dim");
    s = good; s.loss = MXP_LOSS_KIND_COUNT; expect_create_fail(&s, "loss");
    s = mxp_model_spec_mlp(4, 6, 1, 3, MXP_LAYER_RELU, true, MXP_LOSS_MSE, 4);
    s.layernorm_eps = 0.0f;
    expect_create_fail(&s, "layernorm_eps");
    {
        mxp_error err = {0};
        mxp_model *m = NULL;
        CHECK(mxp_model_create(&good, NULL, 1, &m, &err) == MXP_ERR_INVALID_ARG && !m);
        CHECK(strstr(err.msg, "policy") != NULL);
        CHECK(mxp_model_create(NULL, NULL, 1, &m, &err) == MXP_ERR_INVALID_ARG);
    }

    mxp_model *m = make(&good, MXP_PRECISION_MIXED_BF16, 1);
    if (!m) return;
    tbatch t;
    make_batch(&t, &good, 3, 4, 1);
    mxp_error err = {0};
    double L;
    mxp_batch b = t.b;
    b.B = 0;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "B=0") != NULL && strstr(err.msg, "1..4") != NULL);
    b.B = 5;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    b = t.b;
    b.x = NULL;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "x") != NULL);
    b = t.b;
    b.labels = NULL;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "labels") != NULL);
    b = t.b;
    t.lab[2] = 3;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "labels[2]=3") != NULL && strstr(err.msg, "0..2") != NULL);
    t.lab[2] = -1;
    CHECK(mxp_model_step(m, &b, false, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    t.lab[2] = 2;
    CHECK(mxp_model_step(m, &b, true, 0.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "loss_scale") != NULL);
    CHECK(mxp_model_step(m, &b, true, INFINITY, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_model_step(m, &b, true, NAN, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_model_step(m, NULL, true, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
    /* nothing was accumulated by the rejected calls */
    for (size_t i = 0; i < mxp_model_num_params(m); i++) CHECK(mxp_model_grads(m)[i] == 0.0f);
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, NULL, &err), &err);
    CHECK(isfinite(L));

    float pred[16];
    CHECK(mxp_model_predict(m, NULL, 2, pred, &err) == MXP_ERR_INVALID_ARG);
    CHECK(mxp_model_predict(m, t.x, 2, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "pred") != NULL);
    CHECK(mxp_model_predict(m, t.x, 9, pred, &err) == MXP_ERR_INVALID_ARG);

    /* MSE needs y */
    mxp_model_spec sm = good;
    sm.loss = MXP_LOSS_MSE;
    mxp_model *mm = make(&sm, MXP_PRECISION_FP32, 1);
    if (mm) {
        b = t.b;
        b.y = NULL;
        CHECK(mxp_model_step(mm, &b, false, 1.0f, &L, NULL, &err) == MXP_ERR_INVALID_ARG);
        CHECK(strstr(err.msg, "y") != NULL);
    }
    mxp_model_destroy(mm);
    mxp_model_destroy(m);
}

int main(void) {
    test_structure();
    test_fd_all();
    test_scaling();
    test_modes();
    test_nonfinite();
    test_set_policy();
    test_bad_args();
    return test_finish("test_nn");
}
