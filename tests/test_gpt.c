/* tests/test_gpt.c: the GPT layers (embedding, transformer block with
 * causal self-attention, tied lm_head) by finite differences and oracles.
 *
 *   - attention alone: forward against a naive double-precision reference
 *     (explicit loops, causal softmax), backward against central finite
 *     differences of sum(y * R) in double;
 *   - the whole model in FP32: every parameter tensor's gradient (sampled
 *     elements of wte (embedding + tied head), wpe, all 12 tensors of each
 *     block, ln_f) against central differences of the loss;
 *   - causality: changing the token at position t leaves the logits of
 *     positions < t bit-identical;
 *   - the spec checks (bad heads, embedding not first, ...) and the token-id
 *     check name the field;
 *   - every precision mode runs a step: loss finite and near FP32's, fp8
 *     state present only in fp8 mode;
 *   - a short FP32 training run on a repeating text lowers the loss a lot;
 *   - FP16 activation overflow (huge embedding scale): skipped steps naming
 *     the embedding's forward pass, fallback to mixed_bf16, which is clean;
 *   - the blocks' chunked FP32 scratch: loss, gradients and logits
 *     bit-identical to the unchunked path in every mode and chunk size;
 *   - mxp_model_memory_usage equals the bytes mxp_model_create allocates
 *     (counting allocator).
 */
#include <mixprec/world_model.h>

#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "testutil.h"

/* ---- attention alone ------------------------------------------------------------ */

static void ref_attention(const double *qkv, int Bs, int T, int C, int H, double *y) {
    const int hd = C / H;
    for (int b = 0; b < Bs; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + (size_t)(b * T + i) * 3 * C + h * hd;
                double s[64], mx = -1e300, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + (size_t)(b * T + j) * 3 * C + C + h * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += q[e] * k[e];
                    s[j] = d / sqrt((double)hd);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = 0; j <= i; j++)
                        acc += s[j] / sum * qkv[(size_t)(b * T + j) * 3 * C + 2 * C + h * hd + e];
                    y[(size_t)(b * T + i) * C + h * hd + e] = acc;
                }
            }
}

static void test_attention(void) {
    enum { Bs = 2, T = 6, C = 8, H = 2, N = Bs * T };
    /* a model only to borrow its kernel table */
    mxp_model_spec spec = mxp_model_spec_mlp(2, 2, 1, 2, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 1);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&spec, &pol, 1, &m, &err), &err);
    if (!m) return;
    float qkv[N * 3 * C], att[Bs * H * T * T], y[N * C], tmp[2 * T * T], R[N * C];
    float dqkv[N * 3 * C];
    double qd[N * 3 * C], yd[N * C];
    mxp_rng r;
    mxp_rng_init(&r, 11);
    for (int i = 0; i < N * 3 * C; i++) qd[i] = qkv[i] = 1.5f * mxp_rng_normal(&r);
    for (int i = 0; i < N * C; i++) R[i] = mxp_rng_normal(&r);
    nn_attention_forward(m, Bs, T, C, H, MXP_DTYPE_F32, MXP_DTYPE_F32, qkv, att, y, tmp);
    ref_attention(qd, Bs, T, C, H, yd);
    for (int i = 0; i < N * C; i++) CHECK_CLOSE(y[i], yd[i], 1e-5, 1e-5);
    /* probabilities: rows sum to 1, zero above the diagonal */
    for (int b = 0; b < Bs * H; b++)
        for (int i = 0; i < T; i++) {
            double s = 0;
            for (int j = 0; j < T; j++) {
                float pv = att[(b * T + i) * T + j];
                if (j > i) CHECK(pv == 0.0f);
                s += pv;
            }
            CHECK_CLOSE(s, 1.0, 1e-6, 0);
        }
    nn_attention_backward(m, Bs, T, C, H, MXP_DTYPE_F32, MXP_DTYPE_F32, qkv, att, R, dqkv, tmp);
    double worst = 0;
    for (int i = 0; i < N * 3 * C; i++) {
        const double h = 1e-5;
        double keep = qd[i], lp = 0, lm = 0;
        qd[i] = keep + h;
        ref_attention(qd, Bs, T, C, H, yd);
        for (int k = 0; k < N * C; k++) lp += yd[k] * R[k];
        qd[i] = keep - h;
        ref_attention(qd, Bs, T, C, H, yd);
        for (int k = 0; k < N * C; k++) lm += yd[k] * R[k];
        qd[i] = keep;
        double fd = (lp - lm) / (2 * h);
        double e = fabs(dqkv[i] - fd) / (1e-4 + fabs(fd));
        if (e > worst) worst = e;
        CHECK_MSG(test_close(dqkv[i], fd, 1e-4, 1e-3), "dqkv[%d] %g vs fd %g", i,
                  (double)dqkv[i], fd);
    }
    printf("  attention: forward vs double reference ok; backward vs finite differences: "
           "max rel err %.2e\n", worst);
    mxp_model_destroy(m);
}

/* ---- the whole model ---------------------------------------------------------------- */

enum { V = 7, TT = 5, CC = 8, HH = 2, NL = 2, BS = 2, NR = BS * TT };

static mxp_model *make_gpt(mxp_precision p, uint64_t seed) {
    mxp_model_spec s = mxp_model_spec_gpt(V, TT, CC, HH, NL, BS);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&s, &pol, seed, &m, &err), &err);
    return m;
}

static void make_batch(float *x, int32_t *lab, uint64_t seed) {
    mxp_rng r;
    mxp_rng_init(&r, seed);
    for (int i = 0; i < NR; i++) {
        x[i] = (float)mxp_rng_below(&r, V);
        lab[i] = (int32_t)mxp_rng_below(&r, V);
    }
}

static double loss_of(mxp_model *m, const mxp_batch *b) {
    double l = 0;
    mxp_error err = {0};
    CHECK_OK(mxp_model_step(m, b, false, 1.0f, &l, NULL, &err), &err);
    return l;
}

static void test_model_gradients(void) {
    mxp_model *m = make_gpt(MXP_PRECISION_FP32, 5);
    if (!m) return;
    /* tensors: wte, wpe, 12 per block, ln_f weight + bias; head tied */
    CHECK(mxp_model_num_tensors(m) == 2 + 12 * NL + 2);
    CHECK(strcmp(mxp_model_tensor(m, 0)->name, "layers.0.wte") == 0);
    CHECK(strcmp(mxp_model_tensor(m, 4)->name, "layers.1.attn.c_attn.weight") == 0);
    CHECK(mxp_model_tensor(m, 4)->shape[0] == 3 * CC && mxp_model_tensor(m, 4)->shape[1] == CC);
    CHECK(mxp_model_num_params(m) ==
          (size_t)((V + TT) * CC + NL * (12 * CC * CC + 13 * CC) + 2 * CC));
    CHECK(mxp_model_out_dim(m) == V);
    /* make biases and layernorm affine non-trivial so their grads matter */
    float *w = mxp_model_master(m);
    mxp_rng r;
    mxp_rng_init(&r, 77);
    for (int t = 0; t < mxp_model_num_tensors(m); t++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, t);
        if (ti->ndim == 1)
            for (size_t i = 0; i < ti->count; i++)
                w[ti->offset + i] += 0.1f * mxp_rng_normal(&r);
        else /* larger weights: sharper attention, a harder test */
            for (size_t i = 0; i < ti->count; i++) w[ti->offset + i] *= 10.0f;
    }
    float x[NR];
    int32_t lab[NR];
    make_batch(x, lab, 3);
    mxp_batch b = {.x = x, .labels = lab, .B = NR};
    mxp_error err = {0};
    mxp_model_zero_grads(m);
    double l0 = 0;
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &l0, NULL, &err), &err);
    CHECK(isfinite(l0) && l0 > 0.5);
    const float *g = mxp_model_grads(m);
    for (int t = 0; t < mxp_model_num_tensors(m); t++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, t);
        double worst = 0;
        size_t step = ti->count > 24 ? ti->count / 24 : 1;
        for (size_t i = 0; i < ti->count; i += step) {
            size_t k = ti->offset + i;
            float keep = w[k];
            const float h = 1e-2f * fmaxf(1.0f, fabsf(keep));
            w[k] = keep + h;
            double lp = loss_of(m, &b);
            w[k] = keep - h;
            double lm = loss_of(m, &b);
            w[k] = keep;
            double fd = (lp - lm) / (double)(2 * h);
            double e = fabs(g[k] - fd) / (2e-4 + fabs(fd));
            if (e > worst) worst = e;
            CHECK_MSG(test_close(g[k], fd, 2e-4, 3e-2), "%s[%zu]: grad %g, finite diff %g",
                      ti->name, i, (double)g[k], fd);
        }
        printf("  %-28s max rel err %.2e\n", ti->name, worst);
    }

    /* causality: a later token never changes earlier logits */
    float pa[NR * V], pb[NR * V];
    CHECK_OK(mxp_model_predict(m, x, NR, pa, &err), &err);
    x[3] = (float)(((int)x[3] + 1) % V);
    CHECK_OK(mxp_model_predict(m, x, NR, pb, &err), &err);
    CHECK(memcmp(pa, pb, 3 * V * sizeof(float)) == 0);          /* seq 0, positions 0..2 */
    CHECK(memcmp(pa + 3 * V, pb + 3 * V, V * sizeof(float)) != 0); /* position 3 changed */
    CHECK(memcmp(pa + TT * V, pb + TT * V, TT * V * sizeof(float)) == 0); /* seq 1 */

    /* bad inputs name the problem */
    x[2] = 7.0f; /* = V: out of range */
    CHECK(mxp_model_step(m, &b, true, 1.0f, &l0, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "x[2]=7") && strstr(err.msg, "0..6"), "%s", err.msg);
    x[2] = 1.5f;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &l0, NULL, &err) == MXP_ERR_INVALID_ARG);
    x[2] = 1.0f;
    b.B = NR - 1;
    CHECK(mxp_model_step(m, &b, true, 1.0f, &l0, NULL, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "multiple of spec.seq_len=5") != NULL);
    mxp_model_destroy(m);
}

static void test_spec_errors(void) {
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_FP32, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    mxp_model_spec s = mxp_model_spec_gpt(V, TT, 9, 2, 1, 2); /* 9 % 2 != 0 */
    CHECK(mxp_model_create(&s, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG && !m);
    CHECK_MSG(strstr(err.msg, "n_heads=2") && strstr(err.msg, "width 9"), "%s", err.msg);
    s = mxp_model_spec_gpt(1, TT, 8, 2, 1, 2);
    CHECK(mxp_model_create(&s, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "vocab_size=1") != NULL);
    s = mxp_model_spec_gpt(V, TT, 8, 2, 1, 2);
    s.layers[0] = (mxp_layer_spec){MXP_LAYER_LINEAR, 8, 0.0};
    CHECK(mxp_model_create(&s, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "starts with an embedding") != NULL);
    s = mxp_model_spec_gpt(V, TT, 8, 2, 1, 2);
    s.embed_scale = 0.0f;
    CHECK(mxp_model_create(&s, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "embed_scale") != NULL);
    s = mxp_model_spec_gpt(V, TT, 8, 2, 70, 2);
    CHECK(mxp_model_create(&s, &pol, 1, &m, &err) == MXP_ERR_INVALID_ARG);
}

/* Every mode: one step from the same weights, loss close to FP32's. */
static void test_modes(void) {
    float x[NR];
    int32_t lab[NR];
    make_batch(x, lab, 9);
    mxp_batch b = {.x = x, .labels = lab, .B = NR};
    double ref = 0;
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        mxp_model *m = make_gpt((mxp_precision)p, 21);
        if (!m) continue;
        mxp_error err = {0};
        double l = 0;
        mxp_nonfinite_site site;
        mxp_model_zero_grads(m);
        CHECK_OK(mxp_model_step(m, &b, true, 1024.0f, &l, &site, &err), &err);
        if (p == 0) ref = l;
        CHECK_MSG(isfinite(l) && fabs(l - ref) < 0.02 * ref, "%s loss %g vs fp32 %g",
                  mxp_precision_name((mxp_precision)p), l, ref);
        CHECK(!site.found);
        CHECK((mxp_model_fp8(m) != NULL) == (p == MXP_PRECISION_FP8));
        if (p == MXP_PRECISION_FP8)
            CHECK(mxp_fp8_scaling_num_tensors(mxp_model_fp8(m)) == 12 * NL + 3);
        int64_t nf = 0;
        mxp_kernels_get()->absmax(mxp_model_grads(m), mxp_model_num_params(m), NULL, &nf);
        CHECK(nf == 0);
        mxp_model_memory mem;
        mxp_model_memory_usage(m, &mem);
        printf("  %-10s step loss %.6f  activations %zu bytes\n",
               mxp_precision_name((mxp_precision)p), l, mem.activations);
        mxp_model_destroy(m);
    }
}

/* ---- chunked block scratch and memory accounting ---------------------------------------- */

enum { CV = 23, CT = 8, CC2 = 32, CH = 2, CL = 2, CSEQ = 40 };

/* A GPT whose blocks process their FP32 scratch in chunks of `rows` rows
 * (nn_model_set_block_rows: < 0 is the unchunked path, the reference). */
static mxp_model *make_chunked(mxp_precision p, int64_t rows) {
    mxp_model_spec s = mxp_model_spec_gpt(CV, CT, CC2, CH, CL, CSEQ);
    mxp_precision_policy pol;
    mxp_precision_policy_default(p, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&s, &pol, 31, &m, &err), &err);
    if (m) CHECK_OK(nn_model_set_block_rows(m, rows, &err), &err);
    return m;
}

/* Chunking rows of row-independent ops changes nothing: for every mode,
 * the loss, every parameter gradient (the embedding's carries dX through
 * all blocks) and the logits are bit-identical to the unchunked path, for
 * chunks of 1 sequence, 4 sequences (asked as 3T+1 rows: rounded up), the
 * default, and a batch smaller than one chunk. Also: the chunked plan is
 * smaller, and it is what the accounting reports. */
static void test_chunked_identical(void) {
    const int64_t rows[] = {CT, 3 * CT + 1, 0};
    const int64_t batches[] = {CSEQ * CT, 13 * CT};
    float *x = calloc(CSEQ * CT, sizeof(float)), *pa = calloc((size_t)CSEQ * CT * CV, 4);
    float *pb = calloc((size_t)CSEQ * CT * CV, 4);
    int32_t *lab = calloc(CSEQ * CT, sizeof(int32_t));
    mxp_rng r;
    mxp_rng_init(&r, 8);
    for (int i = 0; i < CSEQ * CT; i++) {
        x[i] = (float)mxp_rng_below(&r, CV);
        lab[i] = (int32_t)mxp_rng_below(&r, CV);
    }
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            /* fresh models: a training step moves the fp8 scales */
            mxp_model *ref = make_chunked((mxp_precision)p, -1);
            if (!ref) continue;
            const size_t P = mxp_model_num_params(ref);
            float *gref = calloc(P, sizeof(float));
            mxp_model_memory mref;
            mxp_model_memory_usage(ref, &mref);
            mxp_batch b = {.x = x, .labels = lab, .B = batches[bi]};
            mxp_error err = {0};
            double lref = 0, l = 0;
            mxp_model_zero_grads(ref);
            CHECK_OK(mxp_model_step(ref, &b, true, 256.0f, &lref, NULL, &err), &err);
            memcpy(gref, mxp_model_grads(ref), P * sizeof(float));
            CHECK_OK(mxp_model_predict(ref, x, b.B, pa, &err), &err);
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                mxp_model *m = make_chunked((mxp_precision)p, rows[ri]);
                if (!m) continue;
                mxp_model_zero_grads(m);
                CHECK_OK(mxp_model_step(m, &b, true, 256.0f, &l, NULL, &err), &err);
                CHECK_OK(mxp_model_predict(m, x, b.B, pb, &err), &err);
                const char *mode = mxp_precision_name((mxp_precision)p);
                CHECK_MSG(memcmp(&l, &lref, sizeof l) == 0,
                          "%s rows %lld B %lld: loss %.17g vs %.17g", mode, (long long)rows[ri],
                          (long long)b.B, l, lref);
                CHECK_MSG(memcmp(mxp_model_grads(m), gref, P * sizeof(float)) == 0,
                          "%s rows %lld B %lld: gradients differ from the unchunked path", mode,
                          (long long)rows[ri], (long long)b.B);
                CHECK_MSG(memcmp(pa, pb, (size_t)b.B * CV * sizeof(float)) == 0,
                          "%s rows %lld B %lld: logits differ", mode, (long long)rows[ri],
                          (long long)b.B);
                mxp_model_memory mm;
                mxp_model_memory_usage(m, &mm);
                /* shared bytes (model.c): sb over the last two stored activations, the
                 * head's logit chunk in sa; fp8 keeps the unfused plan */
                if (p != MXP_PRECISION_FP8)
                    CHECK_MSG(m->b.sb_aliased && (void *)m->b.sb == m->b.acts[CL + 1] &&
                                  m->b.lc == m->b.sa && m->b.nf == m->b.xs,
                              "%s rows %lld: buffers not shared as planned", mode,
                              (long long)rows[ri]);
                if (p != MXP_PRECISION_FP8 && rows[ri] == CT) /* fp8 always runs unchunked */
                    CHECK_MSG(mm.activations < mref.activations, "%s: chunked %zu >= %zu", mode,
                              mm.activations, mref.activations);
                mxp_model_destroy(m);
            }
            free(gref);
            mxp_model_destroy(ref);
        }
    }
    free(x);
    free(pa);
    free(pb);
    free(lab);
}

/* The fused lm_head + cross-entropy (row chunks of the logits, never a
 * [rows, V] FP32 tensor) against the unfused whole-batch path (rows -1):
 * in every mode, with a monitor attached (full scans, histograms, anomaly
 * mode), a training step gives bit-identical loss and gradients, the same
 * first non-finite site, the same per-layer statistics and histograms and
 * the same anomaly report, for: a clean step; NaN and Inf faults in the
 * lm_head output (spread over several chunks); a loss scale whose
 * gradient overflows FP16 when stored. Head chunks: 8 rows (40 chunks),
 * 25 rows (a ragged last chunk) and the default (one chunk). */
static void test_fused_head_identical(void) {
    enum { NB = CSEQ * CT, LH = CL + 2 }; /* lm_head is layer CL + 2 */
    float *x = calloc(NB, sizeof(float));
    int32_t *lab = calloc(NB, sizeof(int32_t));
    mxp_rng r;
    mxp_rng_init(&r, 9);
    for (int i = 0; i < NB; i++) {
        x[i] = (float)mxp_rng_below(&r, CV);
        lab[i] = (int32_t)mxp_rng_below(&r, CV);
    }
    const int64_t rows[] = {CT, 25, 0};
    const mxp_fault_kind kinds[] = {MXP_FAULT_NONE, MXP_FAULT_NAN, MXP_FAULT_INF};
    const float scales[] = {256.0f, 3e9f};
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        for (size_t fi = 0; fi < 3; fi++) {
            for (size_t si = 0; si < 2; si++) {
                mxp_model *mm[2] = {make_chunked((mxp_precision)p, -1), NULL};
                for (size_t ri = 0; ri < 3; ri++) {
                    mm[1] = make_chunked((mxp_precision)p, rows[ri]);
                    if (!mm[0] || !mm[1]) break;
                    CHECK(mm[1]->b.fused_head == (p != MXP_PRECISION_FP8) && !mm[0]->b.fused_head);
                    mxp_monitor *mon[2] = {NULL, NULL};
                    mxp_nonfinite_site site[2];
                    double loss[2];
                    float *g[2];
                    mxp_error err = {0};
                    mxp_batch b = {.x = x, .labels = lab, .B = NB};
                    for (int k = 0; k < 2; k++) {
                        mxp_model *m = mm[k];
                        CHECK_OK(mxp_monitor_create(m, true, &mon[k], &err), &err);
                        mxp_monitor_set_full(mon[k], true);
                        mxp_monitor_set_anomaly(mon[k], true, 8.0);
                        mxp_model_set_monitor(m, mon[k]);
                        mxp_fault_config f = mxp_fault_config_default();
                        f.kind = kinds[fi];
                        f.layer = LH;
                        f.elements = 7;
                        mxp_model_set_fault(m, &f);
                        mxp_model_zero_grads(m);
                        CHECK_OK(mxp_model_step(m, &b, true, scales[si], &loss[k], &site[k], &err),
                                 &err);
                        g[k] = mxp_model_grads(m);
                    }
                    const char *mode = mxp_precision_name((mxp_precision)p);
                    const size_t P = mxp_model_num_params(mm[0]);
                    CHECK_MSG(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0,
                              "%s fault %zu scale %g rows %lld: loss %.17g vs %.17g", mode, fi,
                              (double)scales[si], (long long)rows[ri], loss[1], loss[0]);
                    size_t ndiff = 0; /* bits, or both NaN (a NaN's sign and payload
                                         depend on the order of the NaN operands) */
                    for (size_t i = 0; i < P; i++)
                        ndiff += !(isnan(g[0][i]) ? isnan(g[1][i])
                                                  : memcmp(&g[0][i], &g[1][i], 4) == 0);
                    CHECK_MSG(ndiff == 0, "%s fault %zu scale %g rows %lld: %zu gradients differ",
                              mode, fi, (double)scales[si], (long long)rows[ri], ndiff);
                    CHECK_MSG(site[0].found == site[1].found &&
                                  site[0].backward == site[1].backward &&
                                  site[0].layer == site[1].layer &&
                                  site[0].count == site[1].count &&
                                  strcmp(site[0].op, site[1].op) == 0,
                              "%s fault %zu scale %g rows %lld: site %d/%d/%d/%s/%lld vs "
                              "%d/%d/%d/%s/%lld",
                              mode, fi, (double)scales[si], (long long)rows[ri], site[1].found,
                              site[1].backward, site[1].layer, site[1].op,
                              (long long)site[1].count, site[0].found, site[0].backward,
                              site[0].layer, site[0].op, (long long)site[0].count);
                    if (fi > 0) CHECK(site[1].found && !site[1].backward && site[1].layer == LH &&
                                      site[1].count == 7);
                    for (int l = 0; l <= mxp_monitor_num_layers(mon[0]); l++) {
                        const mxp_layer_stats *a0 = mxp_monitor_layer(mon[0], l);
                        const mxp_layer_stats *a1 = mxp_monitor_layer(mon[1], l);
                        for (int t = 0; t < MXP_MON_TENSOR_COUNT; t++) {
                            const mxp_tensor_stats *u = &a0->t[t], *v = &a1->t[t];
                            CHECK_MSG(u->absmax == v->absmax && u->n == v->n &&
                                          u->nonfinite == v->nonfinite && u->tiny == v->tiny &&
                                          u->tiny_n == v->tiny_n,
                                      "%s fault %zu rows %lld: monitor layer %d tensor %d", mode,
                                      fi, (long long)rows[ri], l, t);
                            const int64_t *h0 = mxp_monitor_hist(mon[0], l, (mxp_monitor_tensor)t);
                            const int64_t *h1 = mxp_monitor_hist(mon[1], l, (mxp_monitor_tensor)t);
                            CHECK(h0 && h1 &&
                                  memcmp(h0, h1, MXP_EXP_BINS * sizeof(int64_t)) == 0);
                        }
                    }
                    mxp_anomaly_report q[2];
                    mxp_monitor_anomaly(mon[0], &q[0]);
                    mxp_monitor_anomaly(mon[1], &q[1]);
                    CHECK(q[0].found == q[1].found && q[0].layer == q[1].layer &&
                          q[0].backward == q[1].backward && q[0].count == q[1].count &&
                          q[0].has_culprit == q[1].has_culprit &&
                          q[0].culprit_layer == q[1].culprit_layer &&
                          q[0].culprit_absmax == q[1].culprit_absmax);
                    for (int k = 0; k < 2; k++) {
                        mxp_model_set_monitor(mm[k], NULL);
                        mxp_monitor_destroy(mon[k]);
                    }
                    mxp_model_destroy(mm[1]);
                    mm[1] = NULL;
                    /* the reference takes the next step from where it is: rebuild it */
                    mxp_model_destroy(mm[0]);
                    mm[0] = make_chunked((mxp_precision)p, -1);
                }
                mxp_model_destroy(mm[0]);
            }
        }
    }
    free(x);
    free(lab);
}

/* A counting allocator: live bytes and the largest live total. */
static size_t alloc_live;
static void *count_alloc(void *user, size_t size, size_t align) {
    (void)user;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size + 64) != 0)
        return NULL;
    *(size_t *)p = size; /* header: 64 bytes keep the alignment */
    alloc_live += size;
    return (unsigned char *)p + 64;
}
static void count_free(void *user, void *p) {
    (void)user;
    unsigned char *h = (unsigned char *)p - 64;
    alloc_live -= *(size_t *)h;
    free(h);
}

/* mxp_model_memory_usage is what the model really allocates: the bytes
 * that mxp_model_create takes, less the model object itself (and, in fp8
 * mode, the FP8 scaling state), equal params + master + grads +
 * activations (each allocation rounded up to 64 bytes by mxp_calloc). */
static void test_memory_accounting(void) {
    mxp_allocator a = {count_alloc, count_free, NULL};
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        mxp_set_allocator(&a);
        alloc_live = 0;
        mxp_model_spec s = mxp_model_spec_gpt(CV, CT, CC2, CH, CL, CSEQ);
        mxp_precision_policy pol;
        mxp_precision_policy_default((mxp_precision)p, &pol);
        mxp_model *m = NULL;
        mxp_error err = {0};
        CHECK_OK(mxp_model_create(&s, &pol, 3, &m, &err), &err);
        const size_t live = alloc_live;
        if (m) {
            mxp_model_memory mm;
            mxp_model_memory_usage(m, &mm);
            const size_t pad = 63, P = mxp_model_num_params(m);
            size_t want = (sizeof(struct mxp_model) + pad) / 64 * 64;
            want += (mm.grads + pad) / 64 * 64 + (mm.activations + pad) / 64 * 64;
            want += (mm.params + pad) / 64 * 64 + (mm.master + pad) / 64 * 64;
            if (pol.has_master && pol.weight == MXP_DTYPE_F32) /* fp32: work IS the master */
                CHECK(mm.params == P * sizeof(float) && mm.master == 0);
            if (p == MXP_PRECISION_FP8)
                CHECK_MSG(live > want && live - want < 64 * 1024, "fp8: %zu allocated, %zu counted",
                          live, want);
            else
                CHECK_MSG(live == want, "%s: %zu bytes allocated, %zu accounted",
                          mxp_precision_name((mxp_precision)p), live, want);
            printf("  %-10s allocated %zu bytes = accounted (params %zu master %zu grads %zu "
                   "activations %zu) + model object\n",
                   mxp_precision_name((mxp_precision)p), live, mm.params, mm.master, mm.grads,
                   mm.activations);
        }
        mxp_model_destroy(m);
        CHECK(alloc_live == 0);
        mxp_set_allocator(NULL);
    }
}

/* An inference-only model (mxp_model_create_inference, the guard's FP32
 * canary): in every mode its forward loss and logits are bit-identical to
 * those of a model from mxp_model_create with the same seed, also after a
 * switch of precision (whose staging in pure modes cannot borrow a grad
 * slab) and a re-plan of the chunks; it has no grad slab (NULL, 0 bytes
 * counted, and the counting allocator sees exactly the accounted bytes);
 * a backward step is refused with MXP_ERR_UNSUPPORTED and a message naming
 * the constructor. */
static void test_inference_model(void) {
    enum { NB = 4 * CT };
    float x[NB], pa[NB * CV], pb[NB * CV];
    int32_t lab[NB];
    mxp_rng r;
    mxp_rng_init(&r, 12);
    for (int i = 0; i < NB; i++) {
        x[i] = (float)mxp_rng_below(&r, CV);
        lab[i] = (int32_t)mxp_rng_below(&r, CV);
    }
    mxp_batch b = {.x = x, .labels = lab, .B = NB};
    mxp_allocator a = {count_alloc, count_free, NULL};
    for (int p = 0; p < MXP_PRECISION_COUNT; p++) {
        const char *mode = mxp_precision_name((mxp_precision)p);
        mxp_model_spec s = mxp_model_spec_gpt(CV, CT, CC2, CH, CL, CSEQ);
        mxp_precision_policy pol, p2;
        mxp_precision_policy_default((mxp_precision)p, &pol);
        mxp_precision_policy_default(p == MXP_PRECISION_BF16 ? MXP_PRECISION_FP16
                                                             : MXP_PRECISION_BF16, &p2);
        mxp_model *ref = NULL, *m = NULL;
        mxp_error err = {0};
        CHECK_OK(mxp_model_create(&s, &pol, 5, &ref, &err), &err);
        mxp_set_allocator(&a);
        alloc_live = 0;
        CHECK_OK(mxp_model_create_inference(&s, &pol, 5, &m, &err), &err);
        const size_t live = alloc_live;
        mxp_model_memory mm = {0};
        if (m) mxp_model_memory_usage(m, &mm);
        mxp_model_destroy(m); /* the counting allocator sees create and destroy only */
        CHECK(alloc_live == 0);
        mxp_set_allocator(NULL);
        size_t want = (sizeof(struct mxp_model) + 63) / 64 * 64 + (mm.activations + 63) / 64 * 64;
        want += (mm.params + 63) / 64 * 64 + (mm.master + 63) / 64 * 64;
        if (p != MXP_PRECISION_FP8) /* fp8: plus the FP8 scaling state */
            CHECK_MSG(live == want, "%s inference: %zu allocated, %zu accounted", mode, live, want);
        m = NULL;
        CHECK_OK(mxp_model_create_inference(&s, &pol, 5, &m, &err), &err);
        if (!ref || !m) {
            mxp_model_destroy(m);
            mxp_model_destroy(ref);
            continue;
        }
        CHECK(mm.grads == 0 && mxp_model_grads(m) == NULL && mxp_model_is_inference(m) &&
              !mxp_model_is_inference(ref));
        for (int round = 0; round < 3; round++) {
            double la = 0, lb = 0;
            CHECK_OK(mxp_model_step(ref, &b, false, 1.0f, &la, NULL, &err), &err);
            CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &lb, NULL, &err), &err);
            CHECK_OK(mxp_model_predict(ref, x, NB, pa, &err), &err);
            CHECK_OK(mxp_model_predict(m, x, NB, pb, &err), &err);
            CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0 && memcmp(pa, pb, sizeof pa) == 0,
                      "%s round %d: inference model differs (loss %.17g vs %.17g)", mode, round,
                      lb, la);
            if (round == 0) { /* switch precision: pure modes stage without grads */
                CHECK_OK(mxp_model_set_policy(ref, &p2, &err), &err);
                CHECK_OK(mxp_model_set_policy(m, &p2, &err), &err);
            } else if (round == 1) {
                CHECK_OK(nn_model_set_block_rows(ref, CT, &err), &err);
                CHECK_OK(nn_model_set_block_rows(m, CT, &err), &err);
            }
        }
        mxp_error e2 = {0};
        double l = 0;
        CHECK(mxp_model_step(m, &b, true, 1.0f, &l, NULL, &e2) == MXP_ERR_UNSUPPORTED &&
              strstr(e2.msg, "mxp_model_create_inference") != NULL);
        mxp_model_zero_grads(m); /* no-op, no crash */
        mxp_model_destroy(m);
        mxp_model_destroy(ref);
    }
}

/* FP32 training on a periodic sequence: the loss must fall far. */
static void test_learns(void) {
    mxp_model *m = make_gpt(MXP_PRECISION_FP32, 2);
    if (!m) return;
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.optim.lr = 1e-2f;
    tc.grad_accum_steps = 1;
    mxp_trainer *t = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    if (!t) {
        mxp_model_destroy(m);
        return;
    }
    float x[NR];
    int32_t lab[NR];
    for (int i = 0; i < NR; i++) { /* 0 1 2 3 4 5 6 0 1 ... : next = (cur + 1) % V */
        x[i] = (float)((i * 3) % V);
        lab[i] = (int32_t)(((i * 3) % V + 1) % V);
    }
    mxp_batch b = {.x = x, .labels = lab, .B = NR};
    mxp_step_result res;
    double first = 0, last = 0;
    for (int s = 0; s < 150; s++) {
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
        if (s == 0) first = res.loss;
        last = res.loss;
    }
    printf("  learning: loss %.4f -> %.4f after 150 steps\n", first, last);
    CHECK(first > 1.5 && last < 0.1);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

/* The documented FP16 failure: activations past 65504. With a huge
 * embedding scale the residual stream overflows FP16 in the forward pass:
 * the step is skipped, the site names layer 0 (embedding) in the forward
 * pass, the scale backs off to its floor and the scaler's fallback policy
 * switches to mixed_bf16, which then trains with finite losses. */
static void test_fp16_overflow(void) {
    mxp_model_spec s = mxp_model_spec_gpt(V, TT, CC, HH, NL, BS);
    s.embed_scale = 1e7f; /* N(0, 0.02) embeddings -> |x| ~ 1e5 > 65504 */
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_MIXED_FP16, &pol);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(&s, &pol, 4, &m, &err), &err);
    if (!m) return;
    mxp_trainer_config tc = mxp_trainer_config_default();
    tc.grad_accum_steps = 1;
    tc.scaler.min_scale = 16384.0;
    tc.scaler.at_min = MXP_SCALE_FLOOR_FALLBACK;
    mxp_trainer *t = NULL;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    float x[NR];
    int32_t lab[NR];
    make_batch(x, lab, 5);
    mxp_batch b = {.x = x, .labels = lab, .B = NR};
    mxp_step_result res;
    int skipped = 0, fell_back_at = -1;
    for (int k = 0; t && k < 8; k++) {
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
        if (k == 0) {
            CHECK(res.skipped && res.site.found && !res.site.backward && res.site.layer == 0);
            CHECK(res.site.op && strcmp(res.site.op, "embedding") == 0);
        }
        skipped += res.skipped;
        if (res.fallback) fell_back_at = k;
        if (fell_back_at >= 0 && k > fell_back_at) CHECK(!res.skipped && isfinite(res.loss));
    }
    CHECK_MSG(fell_back_at == 2, "fallback at step %d", fell_back_at);
    CHECK(skipped == 3);
    CHECK(mxp_model_policy(m)->mode == MXP_PRECISION_MIXED_BF16);
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);

    /* mixed_bf16 from the start: clean */
    mxp_precision_policy_default(MXP_PRECISION_MIXED_BF16, &pol);
    CHECK_OK(mxp_model_create(&s, &pol, 4, &m, &err), &err);
    if (!m) return;
    CHECK_OK(mxp_trainer_create(m, &tc, &t, &err), &err);
    for (int k = 0; t && k < 4; k++) {
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, &err), &err);
        CHECK(!res.skipped && isfinite(res.loss));
    }
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

int main(void) {
    test_attention();
    test_model_gradients();
    test_spec_errors();
    test_modes();
    test_chunked_identical();
    test_fused_head_identical();
    test_memory_accounting();
    test_inference_model();
    test_learns();
    test_fp16_overflow();
    return test_finish("test_gpt");
}
