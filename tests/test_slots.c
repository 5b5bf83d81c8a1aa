/* tests/test_slots.c: the result slots of a forward/backward pass and the
 * first non-finite site decided from them after the pass (nn/slots.c).
 *
 * The pass writes every scan into a slot and nn_pass_finish names the
 * first site afterwards; these cases pin what that decision must give,
 * each against a count set by hand (an armed fault poisons exactly
 * `elements` values, model.h):
 *   1. two non-finite tensors in one pass (a forward output and the loss,
 *      then a forward output and a backward gradient): the earlier one in
 *      pass order is named, with its own count;
 *   2. a layer whose parameter gradients alone are non-finite (the lowest
 *      layer: no dX): "grad_param" with the count, and in anomaly mode the
 *      monitor's report says "grad_weight";
 *   3. the fused lm_head + cross-entropy, scanned in row chunks: a fault
 *      spread over several chunks is counted once over all of them (the
 *      chunks' slots fold), as on the unchunked reference path;
 *   4. slots start empty each pass: a clean pass after a faulted one finds
 *      nothing, and a pass without a site (evaluation) leaves the next
 *      training pass's decision alone;
 *   5. a plain monitor's per-layer element counts after the pass are
 *      B * width per scanned tensor (the chunks add up).
 */
#include <stdlib.h>
#include <string.h>

#include <mixprec/model.h>

#include "nn/nn_internal.h"
#include "testutil.h"

static mxp_model *make(const mxp_model_spec *s, mxp_precision mode, uint64_t seed) {
    mxp_precision_policy p;
    mxp_precision_policy_default(mode, &p);
    mxp_model *m = NULL;
    mxp_error err = {0};
    CHECK_OK(mxp_model_create(s, &p, seed, &m, &err), &err);
    return m;
}

static mxp_fault_config fault(mxp_fault_pass pass, int layer, int64_t elements) {
    mxp_fault_config f = mxp_fault_config_default();
    f.kind = MXP_FAULT_NAN;
    f.pass = pass;
    f.layer = layer;
    f.elements = elements;
    return f;
}

enum { IN = 4, HID = 8, OUT = 2, B = 6 };

/* An fp32 MLP in -> 8 relu -> 8 relu -> out (layers: 0 linear, 1 relu,
 * 2 linear, 3 relu, 4 linear) and a batch of B rows. */
static mxp_model *mlp(float *x, float *y, mxp_batch *b) {
    mxp_model_spec s = mxp_model_spec_mlp(IN, HID, OUT, 2, MXP_LAYER_RELU, false, MXP_LOSS_MSE, B);
    mxp_rng r;
    mxp_rng_init(&r, 3);
    for (int i = 0; i < B * IN; i++) x[i] = mxp_rng_normal(&r);
    for (int i = 0; i < B * OUT; i++) y[i] = mxp_rng_normal(&r);
    *b = (mxp_batch){.x = x, .y = y, .B = B};
    return make(&s, MXP_PRECISION_FP32, 5);
}

static void test_first_wins(void) {
    float x[B * IN], y[B * OUT];
    mxp_batch b;
    mxp_model *m = mlp(x, y, &b);
    if (!m) return;
    CHECK(mxp_model_num_layers(m) == 5);
    mxp_error err = {0};
    mxp_nonfinite_site site;
    double L = 0;
    /* 3 NaNs in layer 1's (relu) output, and an infinite target: the
     * forward output comes first, the loss is non-finite too */
    mxp_fault_config f = fault(MXP_FAULT_FORWARD, 1, 3);
    mxp_model_set_fault(m, &f);
    y[1] = INFINITY;
    mxp_model_zero_grads(m); /* the slab accumulates: each case starts clean */
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
    CHECK(!isfinite(L));
    CHECK_MSG(site.found && !site.backward && site.layer == 1 && site.count == 3 &&
                  strcmp(site.op, "relu") == 0,
              "site %d %s layer %d %s count %lld", site.found,
              site.backward ? "backward" : "forward", site.layer, site.op,
              (long long)site.count);
    /* the infinite target alone: the loss (forward, layer -1, count 1) */
    mxp_model_set_fault(m, NULL);
    mxp_model_zero_grads(m); /* the slab accumulates: each case starts clean */
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
    CHECK(isinf(L));
    CHECK(site.found && !site.backward && site.layer == -1 && site.count == 1 &&
          strcmp(site.op, "mse") == 0);
    y[1] = 0.5f;
    /* a backward fault in layer 3 (relu, no parameters: its dX, 4 values;
     * every gradient below it turns NaN too): layer 3 is named */
    f = fault(MXP_FAULT_BACKWARD, 3, 4);
    mxp_model_set_fault(m, &f);
    mxp_model_zero_grads(m); /* the slab accumulates: each case starts clean */
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
    CHECK(isfinite(L));
    CHECK_MSG(site.found && site.backward && site.layer == 3 && site.count == 4 &&
                  strcmp(site.op, "relu") == 0,
              "site %d layer %d %s count %lld", site.found, site.layer, site.op,
              (long long)site.count);
    /* 4. disarmed: the next pass finds nothing (the slots start empty) */
    mxp_model_set_fault(m, NULL);
    mxp_model_zero_grads(m); /* the slab accumulates: each case starts clean */
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
    CHECK(isfinite(L) && !site.found);
    /* a faulted pass, then an evaluation pass (no site: not faulted, not
     * scanned), then a clean training pass: nothing found */
    f = fault(MXP_FAULT_FORWARD, 0, 2);
    mxp_model_set_fault(m, &f);
    mxp_model_zero_grads(m); /* the slab accumulates: each case starts clean */
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
    CHECK(site.found && !site.backward && site.layer == 0 && site.count == 2);
    double Le = 0;
    CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &Le, NULL, &err), &err);
    CHECK(isfinite(Le));
    mxp_model_set_fault(m, NULL);
    CHECK_OK(mxp_model_step(m, &b, false, 1.0f, &L, &site, &err), &err);
    CHECK(!site.found);
    CHECK_MSG(L == Le, "loss with a site %.17g, without %.17g", L, Le);
    mxp_model_destroy(m);
}

static void test_param_grads(void) {
    float x[B * IN], y[B * OUT];
    mxp_batch b;
    mxp_model *m = mlp(x, y, &b);
    if (!m) return;
    mxp_error err = {0};
    mxp_nonfinite_site site;
    double L = 0;
    /* layer 0 is the lowest parameter layer: no dX, only its dW (5 values) */
    mxp_fault_config f = fault(MXP_FAULT_BACKWARD, 0, 5);
    mxp_model_set_fault(m, &f);
    mxp_model_zero_grads(m);
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
    CHECK_MSG(site.found && site.backward && site.layer == 0 && site.count == 5 &&
                  strcmp(site.op, "linear") == 0,
              "site %d layer %d %s count %lld", site.found, site.layer, site.op,
              (long long)site.count);
    /* anomaly mode: weight and bias gradients apart, in the report */
    mxp_monitor *mon = NULL;
    CHECK_OK(mxp_monitor_create(m, false, &mon, &err), &err);
    if (mon) {
        mxp_monitor_set_anomaly(mon, true, 8.0);
        mxp_model_set_monitor(m, mon);
        mxp_model_zero_grads(m);
        CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, &site, &err), &err);
        CHECK(site.found && site.backward && site.layer == 0 && site.count == 5);
        mxp_anomaly_report rep;
        mxp_monitor_anomaly(mon, &rep);
        CHECK_MSG(rep.found && rep.backward && rep.layer == 0 && rep.count == 5 &&
                      strcmp(rep.what, "grad_weight") == 0,
                  "report %d layer %d what %s count %lld", rep.found, rep.layer, rep.what,
                  (long long)rep.count);
        mxp_model_set_monitor(m, NULL);
        mxp_monitor_destroy(mon);
    }
    mxp_model_destroy(m);
}

/* GPT: vocabulary 11, context 4, width 8, 2 heads, 1 block, 12 sequences:
 * B = 48 rows, logits [48, 11]. */
enum { GV = 11, GT = 4, GC = 8, GH = 2, GL = 1, GS = 12, GB = GT * GS };

static void gpt_batch(float *x, int32_t *lab) {
    for (int i = 0; i < GB; i++) {
        x[i] = (float)((i * 5 + 3) % GV);
        lab[i] = (int32_t)((i * 7 + 1) % GV);
    }
}

/* The site and the monitor's lm_head counts of one faulted training pass
 * of a GPT with head chunks of `rows` rows (< 0: the unchunked path). */
static void head_case(int64_t rows, mxp_nonfinite_site *site, int64_t *mon_out_n,
                      int64_t *mon_dx_n) {
    mxp_model_spec s = mxp_model_spec_gpt(GV, GT, GC, GH, GL, GS);
    mxp_model *m = make(&s, MXP_PRECISION_FP32, 7);
    memset(site, 0, sizeof *site);
    *mon_out_n = *mon_dx_n = -1;
    if (!m) return;
    mxp_error err = {0};
    CHECK_OK(nn_model_set_block_rows(m, rows, &err), &err);
    const int head = mxp_model_num_layers(m) - 1;
    CHECK(m->b.fused_head == (rows > 0));
    float x[GB];
    int32_t lab[GB];
    gpt_batch(x, lab);
    mxp_batch b = {.x = x, .labels = lab, .B = GB};
    mxp_monitor *mon = NULL;
    CHECK_OK(mxp_monitor_create(m, false, &mon, &err), &err);
    mxp_model_set_monitor(m, mon);
    /* 7 NaNs spread evenly over the [48, 11] logits: with 5-row chunks
     * they fall in several chunks */
    mxp_fault_config f = fault(MXP_FAULT_FORWARD, head, 7);
    mxp_model_set_fault(m, &f);
    double L = 0;
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &L, site, &err), &err);
    const mxp_layer_stats *ls = mon ? mxp_monitor_layer(mon, head) : NULL;
    if (ls) *mon_out_n = ls->t[MXP_MON_OUT].n;
    const mxp_layer_stats *lg = mon ? mxp_monitor_layer(mon, mxp_model_num_layers(m)) : NULL;
    if (lg) *mon_dx_n = lg->t[MXP_MON_DX].n; /* the loss gradient's entry */
    mxp_model_set_monitor(m, NULL);
    mxp_monitor_destroy(mon);
    mxp_model_destroy(m);
}

static void test_fused_head(void) {
    mxp_nonfinite_site chunked, whole;
    int64_t on_c, dn_c, on_w, dn_w;
    head_case(5, &chunked, &on_c, &dn_c);
    head_case(-1, &whole, &on_w, &dn_w);
    CHECK_MSG(chunked.found && !chunked.backward && chunked.count == 7 &&
                  strcmp(chunked.op ? chunked.op : "", "lm_head") == 0,
              "chunked: site %d %s count %lld", chunked.found,
              chunked.op ? chunked.op : "?", (long long)chunked.count);
    CHECK(whole.found && !whole.backward && whole.count == 7 && whole.layer == chunked.layer);
    /* 5. the monitor saw every logit and loss-gradient element once */
    CHECK_MSG(on_c == (int64_t)GB * GV && on_w == on_c, "lm_head output n %lld / %lld",
              (long long)on_c, (long long)on_w);
    CHECK_MSG(dn_c == (int64_t)GB * GV && dn_w == dn_c, "loss gradient n %lld / %lld",
              (long long)dn_c, (long long)dn_w);
}

int main(void) {
    test_first_wins();
    test_param_grads();
    test_fused_head();
    return test_finish("test_slots");
}
