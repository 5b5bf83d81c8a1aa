/* tests/test_parity.c: mixprec against PyTorch on a small MLP.
 *
 * Reads tests/data/parity_mlp.bin (written once by
 * scripts/gen_parity_fixture.py with torch 1.13; format in
 * docs/parity-fixture.md) and, for every case in it (MSE, XENT):
 *   1. builds mxp_model_spec_mlp(12, 32, 2, 4, GELU, layernorm, loss, 16)
 *      in fp32 and checks the parameter table (names, offsets, shapes)
 *      against PyTorch's slab order;
 *   2. loads PyTorch's parameters, runs one forward/backward (loss scale 1)
 *      and checks the loss, the predictions and every gradient element;
 *      then again from discarded (NaN-filled) grads in two micro-batches;
 *   3. trains 10 full-batch AdamW steps with the trainer and checks the 10
 *      losses and the final parameters;
 *   4. repeats the 10 steps in mixed_bf16 and checks the losses loosely.
 * It also checks that the loader rejects a wrong magic, a wrong version and
 * a truncated file with a message naming the problem.
 * The test needs only the committed file, never torch.
 * Reference: karpathy/llm.c test_gpt2.c (PyTorch state dump + golden test).
 */
#include <mixprec/train.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#ifndef MXP_TEST_DATA_DIR
#error "MXP_TEST_DATA_DIR must name the tests/data directory"
#endif

#define PARITY_PATH MXP_TEST_DATA_DIR "/parity_mlp.bin"
#define PARITY_MAGIC 0x5241504Du /* "MPAR" on disk */
#define PARITY_VERSION 1u
#define PARITY_MAX_CASES 8
#define PARITY_MAX_TENSORS 64
#define PARITY_NAME_LEN 32
#define PARITY_MAX_DIM (1 << 16)

/* Tolerances. The fixture script measured the float32 reference against
 * the same run in float64: loss 5e-8 relative, gradients 3e-7 of each
 * tensor's max |grad|, 10-step losses 1.3e-7 relative, final parameters
 * 5e-7 of each tensor's max |param|. mixprec sums in a different order, so
 * its own float32 error is of the same size; the bounds below leave >= 20x
 * margin, while a wrong formula gives errors of O(1) relative. */
#define LOSS_RTOL 1e-5
/* Gradients: one element can be a sum with heavy cancellation (e.g. a
 * near-zero entry of a weight gradient), so its own relative error is
 * unbounded; the rounding error of a float32 sum is bounded by
 * n*eps*sum|terms|, i.e. it scales with the tensor's large entries. So every
 * element is held to atol + rtol * max|ref over its tensor|; the atol of 1e-7
 * (about FP32 epsilon) covers tensors whose entries are all tiny. */
#define GRAD_ATOL 1e-7
#define GRAD_RTOL 1e-5
/* Predictions, final parameters: the same tensor-scaled rule. */
#define PRED_ATOL 1e-7
#define PRED_RTOL 1e-5
#define PARAM_ATOL 1e-6
#define PARAM_RTOL 1e-5
/* mixed_bf16: weights and stored activations carry 8 significant bits
 * (relative rounding 2^-9 ~ 2e-3 per value); a PyTorch emulation of that
 * stayed within 1.3e-3 of the fp32 losses over 10 steps. 2e-2 is 15x that
 * and still far below the loss's change over the run (~28%). */
#define BF16_LOSS_RTOL 2e-2

typedef struct parity_tensor {
    char name[PARITY_NAME_LEN + 1];
    int ndim;
    int64_t shape[2];
    int64_t offset;
} parity_tensor;

/* One case of the fixture; arrays owned (malloc). Shapes per the doc. */
typedef struct parity_case {
    int loss, act, layernorm;
    int64_t in_dim, hidden, depth, out_dim, B;
    int n_tensors;
    int64_t n_params;
    int n_steps;
    float lr, beta1, beta2, eps, weight_decay, ln_eps;
    parity_tensor tensors[PARITY_MAX_TENSORS];
    float *x;           /* [B, in_dim] */
    float *y;           /* [B, out_dim] (MSE) or NULL */
    int32_t *labels;    /* [B] (XENT) or NULL */
    float *params;      /* [P] */
    float *pred;        /* [B, out_dim] */
    float loss0;
    float *grads;       /* [P] */
    float *losses;      /* [n_steps] */
    float *final_params; /* [P] */
} parity_case;

typedef struct parity_file {
    int n_cases;
    parity_case cases[PARITY_MAX_CASES];
} parity_file;

typedef struct cursor {
    const unsigned char *p;
    size_t left;
} cursor;

static const unsigned char *take(cursor *c, size_t n) {
    if (n > c->left) return NULL;
    const unsigned char *r = c->p;
    c->p += n;
    c->left -= n;
    return r;
}

static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static float le_f32(const unsigned char *b) {
    uint32_t u = le32(b);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n little-endian f32 values from the cursor into a new array; NULL if the
 * file is too short (msg set). */
static float *take_f32(cursor *c, int64_t n, const char *what, char *msg, size_t msg_len) {
    const unsigned char *b = take(c, (size_t)n * 4);
    float *out = b ? malloc((size_t)(n > 0 ? n : 1) * sizeof *out) : NULL;
    if (!out) {
        snprintf(msg, msg_len, "parity fixture truncated while reading %s (%lld floats)",
                 what, (long long)n);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) out[i] = le_f32(b + 4 * i);
    return out;
}

static void parity_free(parity_file *f) {
    for (int i = 0; i < f->n_cases; i++) {
        parity_case *pc = &f->cases[i];
        free(pc->x);
        free(pc->y);
        free(pc->labels);
        free(pc->params);
        free(pc->pred);
        free(pc->grads);
        free(pc->losses);
        free(pc->final_params);
    }
    memset(f, 0, sizeof *f);
}

static bool dim_ok(int64_t v) { return v >= 1 && v <= PARITY_MAX_DIM; }

/* Parse one case at the cursor into pc. False (msg set) on a malformed or
 * short case; pc's arrays are then freed by parity_free. */
static bool parse_case(cursor *c, int idx, parity_case *pc, char *msg, size_t msg_len) {
    const unsigned char *h = take(c, 16 * 4 + 8 * 4);
    if (!h) {
        snprintf(msg, msg_len, "parity fixture truncated in the header of case %d", idx);
        return false;
    }
    int32_t hi[16];
    for (int i = 0; i < 16; i++) hi[i] = (int32_t)le32(h + 4 * i);
    pc->loss = hi[0];
    pc->act = hi[1];
    pc->layernorm = hi[2];
    pc->in_dim = hi[3];
    pc->hidden = hi[4];
    pc->depth = hi[5];
    pc->out_dim = hi[6];
    pc->B = hi[7];
    pc->n_tensors = hi[8];
    pc->n_params = hi[9];
    pc->n_steps = hi[10];
    float hf[8];
    for (int i = 0; i < 8; i++) hf[i] = le_f32(h + 64 + 4 * i);
    pc->lr = hf[0];
    pc->beta1 = hf[1];
    pc->beta2 = hf[2];
    pc->eps = hf[3];
    pc->weight_decay = hf[4];
    pc->ln_eps = hf[5];
    if ((pc->loss != MXP_LOSS_MSE && pc->loss != MXP_LOSS_XENT) ||
        pc->act < 0 || pc->act >= MXP_LAYER_KIND_COUNT || !dim_ok(pc->in_dim) ||
        !dim_ok(pc->hidden) || pc->depth < 0 || pc->depth > 16 || !dim_ok(pc->out_dim) ||
        !dim_ok(pc->B) || pc->n_tensors < 1 || pc->n_tensors > PARITY_MAX_TENSORS ||
        pc->n_params < 1 || pc->n_params > (int64_t)1 << 24 || pc->n_steps < 0 ||
        pc->n_steps > 1000) {
        snprintf(msg, msg_len,
                 "parity fixture case %d: header out of range (loss %d, act %d, dims "
                 "%lld/%lld/%lld/%lld, B %lld, tensors %d, params %lld, steps %d)",
                 idx, pc->loss, pc->act, (long long)pc->in_dim, (long long)pc->hidden,
                 (long long)pc->depth, (long long)pc->out_dim, (long long)pc->B,
                 pc->n_tensors, (long long)pc->n_params, pc->n_steps);
        return false;
    }
    int64_t next = 0;
    for (int t = 0; t < pc->n_tensors; t++) {
        const unsigned char *r = take(c, PARITY_NAME_LEN + 16);
        if (!r) {
            snprintf(msg, msg_len, "parity fixture truncated in the tensor table of case %d", idx);
            return false;
        }
        parity_tensor *pt = &pc->tensors[t];
        memcpy(pt->name, r, PARITY_NAME_LEN);
        pt->name[PARITY_NAME_LEN] = '\0';
        pt->ndim = (int32_t)le32(r + 32);
        pt->shape[0] = (int32_t)le32(r + 36);
        pt->shape[1] = (int32_t)le32(r + 40);
        pt->offset = (int32_t)le32(r + 44);
        int64_t count = pt->ndim == 2 ? pt->shape[0] * pt->shape[1] : pt->shape[0];
        if ((pt->ndim != 1 && pt->ndim != 2) || !dim_ok(pt->shape[0]) ||
            (pt->ndim == 2 && !dim_ok(pt->shape[1])) || pt->offset != next) {
            snprintf(msg, msg_len, "parity fixture case %d: tensor %d ('%s') has a bad "
                     "ndim/shape/offset", idx, t, pt->name);
            return false;
        }
        next += count;
    }
    if (next != pc->n_params) {
        snprintf(msg, msg_len, "parity fixture case %d: tensor table covers %lld elements, "
                 "header says %lld", idx, (long long)next, (long long)pc->n_params);
        return false;
    }
    int64_t P = pc->n_params, B = pc->B;
    if (!(pc->x = take_f32(c, B * pc->in_dim, "x", msg, msg_len))) return false;
    if (pc->loss == MXP_LOSS_MSE) {
        if (!(pc->y = take_f32(c, B * pc->out_dim, "y", msg, msg_len))) return false;
    } else {
        const unsigned char *b = take(c, (size_t)B * 4);
        if (!b) {
            snprintf(msg, msg_len, "parity fixture truncated while reading labels");
            return false;
        }
        pc->labels = malloc((size_t)B * sizeof *pc->labels);
        if (!pc->labels) {
            snprintf(msg, msg_len, "out of memory reading labels");
            return false;
        }
        for (int64_t i = 0; i < B; i++) {
            pc->labels[i] = (int32_t)le32(b + 4 * i);
            if (pc->labels[i] < 0 || pc->labels[i] >= pc->out_dim) {
                snprintf(msg, msg_len, "parity fixture case %d: label[%lld] = %d, accepted "
                         "0..%lld", idx, (long long)i, (int)pc->labels[i],
                         (long long)pc->out_dim - 1);
                return false;
            }
        }
    }
    float *loss = NULL;
    if (!(pc->params = take_f32(c, P, "params", msg, msg_len)) ||
        !(pc->pred = take_f32(c, B * pc->out_dim, "pred", msg, msg_len)) ||
        !(loss = take_f32(c, 1, "loss", msg, msg_len)) ||
        !(pc->grads = take_f32(c, P, "grads", msg, msg_len)) ||
        !(pc->losses = take_f32(c, pc->n_steps, "losses", msg, msg_len)) ||
        !(pc->final_params = take_f32(c, P, "final_params", msg, msg_len))) {
        free(loss);
        return false;
    }
    pc->loss0 = *loss;
    free(loss);
    return true;
}

/* Parse a whole fixture image. False with a message naming the problem on
 * a wrong magic or version, a short or over-long file, or bad headers. */
static bool parity_parse(const unsigned char *buf, size_t len, parity_file *out, char *msg,
                         size_t msg_len) {
    memset(out, 0, sizeof *out);
    cursor c = {buf, len};
    const unsigned char *h = take(&c, 32);
    if (!h) {
        snprintf(msg, msg_len, "parity fixture too short for its 32-byte header (%zu bytes)", len);
        return false;
    }
    uint32_t magic = le32(h), version = le32(h + 4), n_cases = le32(h + 8);
    if (magic != PARITY_MAGIC) {
        snprintf(msg, msg_len, "parity fixture: bad magic 0x%08x, expected 0x%08x (\"MPAR\"); "
                 "not a parity fixture", (unsigned)magic, (unsigned)PARITY_MAGIC);
        return false;
    }
    if (version != PARITY_VERSION) {
        snprintf(msg, msg_len, "parity fixture: unsupported version %u, expected %u; "
                 "regenerate with scripts/gen_parity_fixture.py", (unsigned)version,
                 (unsigned)PARITY_VERSION);
        return false;
    }
    if (n_cases < 1 || n_cases > PARITY_MAX_CASES) {
        snprintf(msg, msg_len, "parity fixture: n_cases %u, accepted 1..%d", (unsigned)n_cases,
                 PARITY_MAX_CASES);
        return false;
    }
    for (uint32_t i = 0; i < n_cases; i++) {
        out->n_cases = (int)i + 1;
        if (!parse_case(&c, (int)i, &out->cases[i], msg, msg_len)) {
            parity_free(out);
            return false;
        }
    }
    if (c.left != 0) {
        snprintf(msg, msg_len, "parity fixture: %zu unexpected trailing bytes", c.left);
        parity_free(out);
        return false;
    }
    return true;
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    unsigned char *buf = NULL;
    long n = -1;
    if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

/* The loader must refuse wrong magic, wrong version and a short file, and
 * say which. Works on a private copy of the image. */
static void test_loader_rejects(const unsigned char *buf, size_t len) {
    unsigned char *bad = malloc(len);
    if (!bad) return;
    parity_file f;
    char msg[512];

    memcpy(bad, buf, len);
    bad[0] ^= 0xff;
    CHECK(!parity_parse(bad, len, &f, msg, sizeof msg));
    CHECK_MSG(strstr(msg, "magic") != NULL, "wrong magic: message '%s'", msg);

    memcpy(bad, buf, len);
    bad[4] = 99;
    CHECK(!parity_parse(bad, len, &f, msg, sizeof msg));
    CHECK_MSG(strstr(msg, "version 99") != NULL, "wrong version: message '%s'", msg);

    memcpy(bad, buf, len);
    CHECK(!parity_parse(bad, len - 4, &f, msg, sizeof msg));
    CHECK_MSG(strstr(msg, "truncated") != NULL, "short file: message '%s'", msg);
    free(bad);
}

/* got vs ref element-wise, held to atol + rtol * max|ref| over the slice. */
static void check_slice(const char *what, const char *name, const float *got, const float *ref,
                        int64_t n, double atol, double rtol) {
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= atol + rtol * scale)) {
            bad++;
            if (first < 0) first = i;
        }
        if (d > worst || isnan(d)) worst = d;
    }
    test_checks++;
    if (bad)
        test_fail(__FILE__, __LINE__, "%s %s: %lld of %lld elements off (max |diff| %.3g, "
                  "bound %.3g); first [%lld] got %.9g expected %.9g", what, name,
                  (long long)bad, (long long)n, worst, atol + rtol * scale, (long long)first,
                  (double)got[first], (double)ref[first]);
}

static mxp_batch case_batch(const parity_case *pc) {
    mxp_batch b = {pc->x, pc->y, pc->labels, pc->B};
    return b;
}

/* Create the case's model in `mode` with PyTorch's initial parameters in
 * master and work. NULL on failure (reported). */
static mxp_model *make_model(const parity_case *pc, mxp_precision mode) {
    mxp_model_spec spec = mxp_model_spec_mlp(pc->in_dim, pc->hidden, (int)pc->depth,
                                             pc->out_dim, (mxp_layer_kind)pc->act,
                                             pc->layernorm != 0, (mxp_loss_kind)pc->loss, pc->B);
    CHECK_CLOSE(spec.layernorm_eps, pc->ln_eps, 0.0, 1e-6);
    mxp_precision_policy pol;
    mxp_precision_policy_default(mode, &pol);
    mxp_model *m = NULL;
    mxp_error err_store = {0}, *err = &err_store; /* pointer: CHECK_OK tests it */
    CHECK_OK(mxp_model_create(&spec, &pol, 7, &m, err), err);
    if (!m) return NULL;
    CHECK((int64_t)mxp_model_num_params(m) == pc->n_params);
    CHECK(mxp_model_out_dim(m) == pc->out_dim);
    float *master = mxp_model_master(m);
    CHECK(master != NULL);
    if (!master || (int64_t)mxp_model_num_params(m) != pc->n_params) {
        mxp_model_destroy(m);
        return NULL;
    }
    memcpy(master, pc->params, (size_t)pc->n_params * sizeof *master);
    mxp_model_sync_work(m);
    return m;
}

/* Names, offsets and shapes of the parameter tensors, as PyTorch's. */
static void check_tensor_table(const parity_case *pc, mxp_model *m) {
    CHECK(mxp_model_num_tensors(m) == pc->n_tensors);
    int n = mxp_model_num_tensors(m) < pc->n_tensors ? mxp_model_num_tensors(m) : pc->n_tensors;
    for (int t = 0; t < n; t++) {
        const mxp_tensor_info *ti = mxp_model_tensor(m, t);
        const parity_tensor *pt = &pc->tensors[t];
        CHECK(ti != NULL);
        if (!ti) continue;
        CHECK_MSG(strcmp(ti->name, pt->name) == 0, "tensor %d: name '%s', PyTorch '%s'", t,
                  ti->name, pt->name);
        CHECK_MSG((int64_t)ti->offset == pt->offset && ti->ndim == pt->ndim &&
                      ti->shape[0] == pt->shape[0] &&
                      (pt->ndim == 1 || ti->shape[1] == pt->shape[1]),
                  "tensor %s: offset %zu ndim %d shape [%lld, %lld], PyTorch offset %lld "
                  "ndim %d shape [%lld, %lld]", pt->name, ti->offset, ti->ndim,
                  (long long)ti->shape[0], (long long)(ti->ndim == 2 ? ti->shape[1] : 0),
                  (long long)pt->offset, pt->ndim, (long long)pt->shape[0],
                  (long long)pt->shape[1]);
    }
}

/* Forward + backward at PyTorch's initial weights, fp32. */
static void check_forward_backward(const parity_case *pc, const char *label) {
    mxp_model *m = make_model(pc, MXP_PRECISION_FP32);
    if (!m) return;
    check_tensor_table(pc, m);
    mxp_error err_store = {0}, *err = &err_store; /* pointer: CHECK_OK tests it */
    mxp_batch b = case_batch(pc);
    mxp_model_zero_grads(m);
    double loss = NAN;
    CHECK_OK(mxp_model_step(m, &b, true, 1.0f, &loss, NULL, err), err);
    CHECK_CLOSE(loss, pc->loss0, 0.0, LOSS_RTOL);
    const float *g = mxp_model_grads(m);
    for (int t = 0; t < pc->n_tensors; t++) {
        const parity_tensor *pt = &pc->tensors[t];
        int64_t n = pt->ndim == 2 ? pt->shape[0] * pt->shape[1] : pt->shape[0];
        check_slice(label, pt->name, g + pt->offset, pc->grads + pt->offset, n, GRAD_ATOL,
                    GRAD_RTOL);
    }
    /* the trainer's way (mxp_model_discard_grads): a slab of NaN discarded,
     * the first of two micro-batches (loss scales B_i / B) writes every
     * gradient, the second adds; the sum is PyTorch's full-batch gradient */
    float *gw = mxp_model_grads(m);
    for (size_t i = 0; i < mxp_model_num_params(m); i++) gw[i] = NAN;
    mxp_model_discard_grads(m);
    const int64_t B1 = pc->B / 2, B2 = pc->B - B1, C = pc->in_dim, Y = pc->out_dim;
    mxp_batch h[2] = {{pc->x, pc->y, pc->labels, B1},
                      {pc->x + B1 * C, pc->y ? pc->y + B1 * Y : NULL,
                       pc->labels ? pc->labels + B1 : NULL, B2}};
    for (int i = 0; i < 2; i++)
        CHECK_OK(mxp_model_step(m, &h[i], true, (float)((double)h[i].B / (double)pc->B), &loss,
                                NULL, err),
                 err);
    char lab[256];
    snprintf(lab, sizeof lab, "%s (discarded grads, 2 micro-batches)", label);
    for (int t = 0; t < pc->n_tensors; t++) {
        const parity_tensor *pt = &pc->tensors[t];
        int64_t n = pt->ndim == 2 ? pt->shape[0] * pt->shape[1] : pt->shape[0];
        check_slice(lab, pt->name, gw + pt->offset, pc->grads + pt->offset, n, GRAD_ATOL,
                    GRAD_RTOL);
    }
    float *pred = calloc((size_t)(pc->B * pc->out_dim), sizeof *pred);
    if (pred) {
        CHECK_OK(mxp_model_predict(m, pc->x, pc->B, pred, err), err);
        check_slice(label, "predictions", pred, pc->pred, pc->B * pc->out_dim, PRED_ATOL,
                    PRED_RTOL);
        free(pred);
    }
    mxp_model_destroy(m);
}

/* n_steps full-batch AdamW steps with the trainer in `mode`; checks every
 * loss to rtol and, when check_params, the final master parameters. */
static void check_training(const parity_case *pc, mxp_precision mode, double rtol,
                           bool check_params, const char *label) {
    mxp_model *m = make_model(pc, mode);
    if (!m) return;
    mxp_trainer_config cfg = mxp_trainer_config_default();
    cfg.optim.kind = MXP_OPTIM_ADAMW;
    cfg.optim.lr = pc->lr;
    cfg.optim.beta1 = pc->beta1;
    cfg.optim.beta2 = pc->beta2;
    cfg.optim.eps = pc->eps;
    cfg.optim.weight_decay = pc->weight_decay;
    cfg.clip_grad_norm = 0.0f;
    cfg.grad_accum_steps = 1;
    mxp_trainer *t = NULL;
    mxp_error err_store = {0}, *err = &err_store; /* pointer: CHECK_OK tests it */
    CHECK_OK(mxp_trainer_create(m, &cfg, &t, err), err);
    if (!t) {
        mxp_model_destroy(m);
        return;
    }
    mxp_batch b = case_batch(pc);
    for (int s = 0; s < pc->n_steps; s++) {
        mxp_step_result res;
        memset(&res, 0, sizeof res);
        CHECK_OK(mxp_trainer_step(t, &b, 1, &res, err), err);
        CHECK_MSG(!res.skipped, "%s step %d skipped", label, s);
        CHECK_MSG(test_close(res.loss, pc->losses[s], 0.0, rtol),
                  "%s step %d: loss %.9g, PyTorch %.9g (rtol %g)", label, s, res.loss,
                  (double)pc->losses[s], rtol);
    }
    if (check_params) {
        const float *w = mxp_model_master(m);
        for (int k = 0; w && k < pc->n_tensors; k++) {
            const parity_tensor *pt = &pc->tensors[k];
            int64_t n = pt->ndim == 2 ? pt->shape[0] * pt->shape[1] : pt->shape[0];
            check_slice(label, pt->name, w + pt->offset, pc->final_params + pt->offset, n,
                        PARAM_ATOL, PARAM_RTOL);
        }
    }
    mxp_trainer_destroy(t);
    mxp_model_destroy(m);
}

int main(void) {
    size_t len = 0;
    unsigned char *buf = read_file(PARITY_PATH, &len);
    if (!buf) {
        fprintf(stderr, "test_parity: cannot read %s (generate it with "
                "scripts/gen_parity_fixture.py)\n", PARITY_PATH);
        return 1;
    }
    parity_file f;
    char msg[512] = "";
    if (!parity_parse(buf, len, &f, msg, sizeof msg)) {
        fprintf(stderr, "test_parity: %s: %s\n", PARITY_PATH, msg);
        free(buf);
        return 1;
    }
    test_loader_rejects(buf, len);
    free(buf);
    CHECK(f.n_cases >= 1);
    for (int i = 0; i < f.n_cases; i++) {
        const parity_case *pc = &f.cases[i];
        const char *loss = mxp_loss_kind_name((mxp_loss_kind)pc->loss);
        char label[64];
        snprintf(label, sizeof label, "%s fp32 forward/backward", loss);
        check_forward_backward(pc, label);
        snprintf(label, sizeof label, "%s fp32 adamw", loss);
        check_training(pc, MXP_PRECISION_FP32, LOSS_RTOL, true, label);
        snprintf(label, sizeof label, "%s mixed_bf16 adamw", loss);
        check_training(pc, MXP_PRECISION_MIXED_BF16, BF16_LOSS_RTOL, false, label);
    }
    parity_free(&f);
    return test_finish("test_parity");
}
