/* models/gpt.c: the character-level GPT workload (see include/mixprec/gpt.h).
 *
 * Entry points: mxp_gpt_create/destroy/set_progress/train/evaluate/sample
 * and the accessors.
 *
 * The text is read whole through zlib's gzread (plain files pass through),
 * mapped byte -> token id once (uint8 ids: the vocabulary has at most 256
 * entries), and split by position. Batches are gathered into FP32 id rows
 * (exact) and int32 targets planned at create. Sampling feeds the last
 * `context` tokens left-aligned in one sequence and reads the logits of
 * the last real position: causal attention makes the padding after it
 * irrelevant.
 */
#include <mixprec/gpt.h>

#include "models/workload.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <zlib.h>

#define SHUFFLE_STREAM 0x475054ull /* "GPT" */
#define SAMPLE_STREAM 0x53414d504c45ull /* "SAMPLE" */

struct mxp_gpt {
    mxp_config cfg;
    int64_t T, B; /* context, sequences per micro-batch */
    int vocab;
    uint8_t byte_of[256]; /* id -> byte */
    int16_t id_of[256];   /* byte -> id, -1 when absent */
    uint8_t *ids;         /* [n_text] token ids */
    int64_t n_text, n_train; /* train: ids[0, n_train), val: ids[n_train, n_text) */
    int64_t n_win_train, n_win_val;
    mxp_model *model;
    mxp_trainer *trainer;
    uint32_t *perm;   /* [n_win_train] */
    float *bx;        /* [accum, B*T] */
    int32_t *by;      /* [accum, B*T] */
    float *logits;    /* [T, V]: sampling predicts one sequence */
    mxp_batch *micro; /* [accum] */
    mxp_data_position pos; /* epoch, step in epoch, train() call in progress (ckpt.h) */
    mxp_guard *guard;      /* numerical-safety guard (guard.h), or NULL */
    bool stopped;          /* the last train() ended on a guard stop */
    mxp_progress_fn progress;
    void *progress_user;
};

void mxp_gpt_destroy(mxp_gpt *g) {
    if (!g) return;
    mxp_guard_destroy(g->guard); /* detaches from the model first */
    mxp_trainer_destroy(g->trainer);
    mxp_model_destroy(g->model);
    mxp_free(g->ids);
    mxp_free(g->perm);
    mxp_free(g->bx);
    mxp_free(g->by);
    mxp_free(g->logits);
    mxp_free(g->micro);
    mxp_free(g);
}

/* Read a whole (gzip or plain) file into *buf (mxp_free), growing it. */
static mxp_status read_text(const char *path, uint8_t **buf, int64_t *n, mxp_error *err) {
    *buf = NULL;
    *n = 0;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return mxp_error_set(err, MXP_ERR_IO, "cannot open text file '%s' (data.text_file): %s",
                             path, errno ? strerror(errno) : "out of memory");
    size_t cap = (size_t)1 << 20, have = 0;
    uint8_t *b = mxp_calloc(cap, 1);
    mxp_status s = MXP_OK;
    while (b) {
        if (have == cap) {
            if (cap >= ((size_t)1 << 31)) {
                s = mxp_error_set(err, MXP_ERR_FORMAT,
                                  "text file '%s' is larger than 2 GiB; accepted: smaller", path);
                break;
            }
            uint8_t *nb = mxp_calloc(cap * 2, 1);
            if (!nb) break;
            memcpy(nb, b, have);
            mxp_free(b);
            b = nb;
            cap *= 2;
        }
        int r = gzread(f, b + have, (unsigned)(cap - have));
        int zerr = 0;
        const char *zm = gzerror(f, &zerr);
        if (r < 0 || (r == 0 && zerr != Z_OK && zerr != Z_STREAM_END)) {
            s = mxp_error_set(err, MXP_ERR_FORMAT, "text file '%s': read error (corrupt gzip?): %s",
                              path, zerr == Z_ERRNO ? strerror(errno) : zm);
            break;
        }
        if (r == 0) break;
        have += (size_t)r;
    }
    gzclose(f);
    if (!b && s == MXP_OK)
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "text file '%s': out of memory", path);
    if (s != MXP_OK) {
        mxp_free(b);
        return s;
    }
    *buf = b;
    *n = (int64_t)have;
    return MXP_OK;
}

static mxp_status load_text(mxp_gpt *g, mxp_error *err) {
    const char *path = g->cfg.wl.text_file;
    mxp_status s = read_text(path, &g->ids, &g->n_text, err);
    if (s != MXP_OK) return s;
    bool seen[256] = {false};
    for (int64_t i = 0; i < g->n_text; i++) seen[g->ids[i]] = true;
    g->vocab = 0;
    for (int c = 0; c < 256; c++) {
        g->id_of[c] = -1;
        if (seen[c]) {
            g->id_of[c] = (int16_t)g->vocab;
            g->byte_of[g->vocab++] = (uint8_t)c;
        }
    }
    for (int64_t i = 0; i < g->n_text; i++) g->ids[i] = (uint8_t)g->id_of[g->ids[i]];
    const double vf = g->cfg.data.val_fraction;
    g->n_train = (int64_t)((1.0 - vf) * (double)g->n_text);
    g->n_win_train = g->n_train > 0 ? (g->n_train - 1) / g->T : 0;
    g->n_win_val = g->n_text - g->n_train > 0 ? (g->n_text - g->n_train - 1) / g->T : 0;
    if (g->vocab < 2 || g->n_win_train < g->B || g->n_win_val < 1)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "text file '%s': %lld bytes, %d distinct, give %lld training and "
                             "%lld held-out windows of gpt.context=%lld; accepted: >= 2 "
                             "distinct bytes, >= training.batch_size=%lld training windows and "
                             ">= 1 held-out window (data.val_fraction=%g)",
                             path, (long long)g->n_text, g->vocab, (long long)g->n_win_train,
                             (long long)g->n_win_val, (long long)g->T, (long long)g->B, vf);
    const int64_t sub = g->cfg.wl.train_subset, vsub = g->cfg.wl.test_subset;
    if (sub > 0 && sub < g->n_win_train) {
        if (sub < g->B * g->cfg.grad_accum_steps)
            return mxp_error_set(err, MXP_ERR_CONFIG,
                                 "data.train_subset=%lld windows is less than one step "
                                 "(training.batch_size x training.grad_accum_steps = %lld)",
                                 (long long)sub, (long long)(g->B * g->cfg.grad_accum_steps));
        g->n_win_train = sub;
    }
    if (vsub > 0 && vsub < g->n_win_val) g->n_win_val = vsub;
    return MXP_OK;
}

static void gather(const mxp_gpt *g, int64_t start, float *x, int32_t *y);

/* The guard (guard.h), whose canary probes the first held-out windows
 * (guard.canary.batch_size rows rounded down to whole windows, at least
 * one), gathered into the batch buffers (the guard copies them). */
static mxp_status guard_setup(mxp_gpt *g, mxp_error *err) {
    int64_t nw = g->cfg.guard.canary_batch / g->T;
    if (nw < 1) nw = 1;
    if (nw > g->B) nw = g->B;
    if (nw > g->n_win_val) nw = g->n_win_val;
    for (int64_t b = 0; b < nw; b++)
        gather(g, g->n_train + b * g->T, g->bx + b * g->T, g->by + b * g->T);
    mxp_batch probe = {.x = g->bx, .y = NULL, .labels = g->by, .B = nw * g->T};
    return mxp_guard_for_workload(&g->cfg.guard, g->trainer, nw > 0 ? &probe : NULL, &g->guard,
                                  err);
}

mxp_status mxp_gpt_create(const mxp_config *cfg, mxp_gpt **out, mxp_error *err) {
    if (!cfg || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_create: NULL");
    *out = NULL;
    const mxp_workload_settings *w = &cfg->wl;
    if (w->gpt_embd % w->gpt_heads != 0)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "gpt.embd=%lld is not a multiple of gpt.heads=%lld; accepted: "
                             "gpt.embd = k * gpt.heads",
                             (long long)w->gpt_embd, (long long)w->gpt_heads);
    if (cfg->batch_size < 1 || cfg->grad_accum_steps < 1 || w->gpt_context < 2 ||
        w->gpt_layers < 1 || w->gpt_layers + 3 > MXP_MODEL_MAX_LAYERS)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "training.batch_size=%lld grad_accum_steps=%lld gpt.context=%lld "
                             "gpt.layers=%lld; accepted: >= 1, >= 1, >= 2, 1..%d",
                             (long long)cfg->batch_size, (long long)cfg->grad_accum_steps,
                             (long long)w->gpt_context, (long long)w->gpt_layers,
                             MXP_MODEL_MAX_LAYERS - 3);
    if (cfg->batch_size > INT32_MAX / w->gpt_context)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "training.batch_size=%lld x gpt.context=%lld rows is too large",
                             (long long)cfg->batch_size, (long long)w->gpt_context);
    mxp_gpt *g = mxp_calloc(1, sizeof *g);
    if (!g) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "gpt workload");
    g->cfg = *cfg;
    g->T = w->gpt_context;
    g->B = cfg->batch_size;
    mxp_status s = load_text(g, err);
    if (s != MXP_OK) goto fail;

    mxp_model_spec spec = mxp_model_spec_gpt(g->vocab, g->T, w->gpt_embd, (int)w->gpt_heads,
                                             (int)w->gpt_layers, g->B);
    spec.embed_scale = w->gpt_embed_scale > 0 ? w->gpt_embed_scale : 1.0f;
    s = workload_model_create(&spec, cfg, &g->model, &g->trainer, err);
    if (s != MXP_OK) goto fail;

    const size_t rows = (size_t)(g->B * g->T), accum = (size_t)cfg->grad_accum_steps;
    g->perm = mxp_calloc((size_t)g->n_win_train, sizeof *g->perm);
    g->bx = mxp_calloc(accum * rows, sizeof(float));
    g->by = mxp_calloc(accum * rows, sizeof(int32_t));
    g->logits = mxp_calloc((size_t)g->T * (size_t)g->vocab, sizeof(float));
    g->micro = mxp_calloc(accum, sizeof *g->micro);
    if (!g->perm || !g->bx || !g->by || !g->logits || !g->micro) {
        s = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "gpt batch buffers (%zu rows)", rows);
        goto fail;
    }
    if ((s = guard_setup(g, err)) != MXP_OK) goto fail;
    *out = g;
    return MXP_OK;
fail:
    mxp_gpt_destroy(g);
    return s;
}

void mxp_gpt_set_progress(mxp_gpt *g, mxp_progress_fn fn, void *user) {
    g->progress = fn;
    g->progress_user = user;
}

/* Window starting at token `start`: inputs into x [T], targets into y [T]. */
static void gather(const mxp_gpt *g, int64_t start, float *x, int32_t *y) {
    for (int64_t t = 0; t < g->T; t++) {
        x[t] = (float)g->ids[start + t];
        y[t] = g->ids[start + t + 1];
    }
}

static void shuffle(uint32_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    mxp_rng_permutation(perm, n, seed ^ (SHUFFLE_STREAM + (uint64_t)epoch * 0x9E3779B97F4A7C15ull));
}

int64_t mxp_gpt_tokens_per_epoch(const mxp_gpt *g) {
    const int64_t per = g->B * g->cfg.grad_accum_steps;
    return (g->n_win_train / per) * per * g->T;
}

mxp_status mxp_gpt_train(mxp_gpt *g, int64_t num_epochs, mxp_error *err) {
    if (!g) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_train: NULL");
    if (num_epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "num_epochs=%lld; accepted: >= 1",
                             (long long)num_epochs);
    const int accum = (int)g->cfg.grad_accum_steps;
    const int64_t rows = g->B * g->T, steps = g->n_win_train / (g->B * accum);
    mxp_data_position *p = &g->pos;
    mxp_status st = mxp_data_position_begin(p, num_epochs, g->B, steps, err);
    if (st != MXP_OK) return st;
    g->stopped = false;
    int64_t shuffled = -1; /* epoch whose permutation g->perm holds */
    const workload_loop loop = {g->trainer, g->guard, &g->cfg, g->progress, g->progress_user,
                                steps};
    /* The loop reads the position every step, so a guard rollback that moves
     * it continues from there with the same batches. */
    while (!mxp_data_position_done(p)) {
        const int64_t epoch = p->epoch, s = p->step_in_epoch;
        if (epoch != shuffled) {
            mxp_trainer_set_epoch(g->trainer, epoch);
            shuffle(g->perm, g->n_win_train, g->cfg.seed, epoch);
            shuffled = epoch;
        }
        for (int a = 0; a < accum; a++) {
            float *bx = g->bx + (size_t)a * (size_t)rows;
            int32_t *by = g->by + (size_t)a * (size_t)rows;
            const uint32_t *w = g->perm + (s * accum + a) * g->B;
            for (int64_t b = 0; b < g->B; b++)
                gather(g, (int64_t)w[b] * g->T, bx + b * g->T, by + b * g->T);
            g->micro[a] = (mxp_batch){.x = bx, .y = NULL, .labels = by, .B = rows};
        }
        mxp_step_result res;
        bool stop;
        st = workload_step(&loop, g->micro, accum, p, epoch, &res, &stop, err);
        if (st != MXP_OK) return st;
        if (stop) {
            g->stopped = true;
            return workload_end(&loop, err);
        }
    }
    mxp_data_position_end(p);
    return workload_end(&loop, err);
}

mxp_status mxp_gpt_evaluate(mxp_gpt *g, double *val_loss, mxp_error *err) {
    if (!g || !val_loss) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_evaluate: NULL");
    double total = 0;
    int64_t count = 0;
    for (int64_t w = 0; w < g->n_win_val; w += g->B) {
        const int64_t nb = g->n_win_val - w < g->B ? g->n_win_val - w : g->B;
        for (int64_t b = 0; b < nb; b++)
            gather(g, g->n_train + (w + b) * g->T, g->bx + b * g->T, g->by + b * g->T);
        mxp_batch bt = {.x = g->bx, .labels = g->by, .B = nb * g->T};
        double l = 0;
        mxp_status s = mxp_model_step(g->model, &bt, false, 1.0f, &l, NULL, err);
        if (s != MXP_OK) return s;
        total += l * (double)(nb * g->T);
        count += nb * g->T;
    }
    *val_loss = total / (double)count;
    return MXP_OK;
}

mxp_status mxp_gpt_sample(mxp_gpt *g, const char *prompt, int64_t n, float temperature,
                          uint64_t seed, char *out, mxp_error *err) {
    if (!g || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_sample: NULL");
    if (n < 0 || !(temperature > 0.0f) || !isfinite(temperature))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "n=%lld temperature=%g; accepted: n >= 0, temperature finite > 0",
                             (long long)n, (double)temperature);
    const int64_t T = g->T, V = g->vocab;
    const size_t plen = prompt ? strlen(prompt) : 0;
    for (size_t i = 0; i < plen; i++)
        if (g->id_of[(uint8_t)prompt[i]] < 0)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "prompt byte %zu (0x%02X) does not occur in the training text; "
                                 "accepted: bytes of data.text_file",
                                 i, (unsigned)(uint8_t)prompt[i]);
    /* ctx: the token history (prompt or the first vocabulary byte, then samples) */
    const size_t hist_n = (plen ? plen : 1) + (size_t)n;
    uint8_t *hist = mxp_calloc(hist_n, 1);
    if (!hist) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "sample history");
    size_t len = 0;
    if (plen)
        for (size_t i = 0; i < plen; i++) hist[len++] = (uint8_t)g->id_of[(uint8_t)prompt[i]];
    else
        hist[len++] = (uint8_t)(g->id_of['\n'] >= 0 ? g->id_of['\n'] : 0);
    mxp_rng r;
    mxp_rng_init(&r, seed ^ SAMPLE_STREAM);
    mxp_status s = MXP_OK;
    for (int64_t k = 0; k < n; k++) {
        const size_t from = len > (size_t)T ? len - (size_t)T : 0, used = len - from;
        for (int64_t t = 0; t < T; t++)
            g->bx[t] = (size_t)t < used ? (float)hist[from + (size_t)t] : 0.0f;
        s = mxp_model_predict(g->model, g->bx, T, g->logits, err);
        if (s != MXP_OK) break;
        const float *z = g->logits + (used - 1) * (size_t)V;
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (z[v] > z[best]) best = v;
        int64_t pick = best;
        if (temperature > 1e-3f) {
            double sum = 0;
            for (int64_t v = 0; v < V; v++)
                sum += exp(((double)z[v] - (double)z[best]) / (double)temperature);
            double u = (double)mxp_rng_uniform(&r) * sum, acc = 0;
            for (pick = 0; pick < V - 1; pick++) {
                acc += exp(((double)z[pick] - (double)z[best]) / (double)temperature);
                if (u < acc) break;
            }
        }
        hist[len++] = (uint8_t)pick;
        out[k] = (char)g->byte_of[pick];
    }
    out[s == MXP_OK ? n : 0] = '\0';
    mxp_free(hist);
    return s;
}

int64_t mxp_gpt_vocab_size(const mxp_gpt *g) { return g->vocab; }
int64_t mxp_gpt_train_chars(const mxp_gpt *g) { return g->n_train; }
int64_t mxp_gpt_val_chars(const mxp_gpt *g) { return g->n_text - g->n_train; }
mxp_trainer *mxp_gpt_trainer(mxp_gpt *g) { return g->trainer; }
mxp_model *mxp_gpt_model(mxp_gpt *g) { return g->model; }
mxp_guard *mxp_gpt_guard(mxp_gpt *g) { return g->guard; }
bool mxp_gpt_stopped(const mxp_gpt *g) { return g->stopped; }
