/* models/gpt.c: the character-level GPT workload (see include/mixprec/gpt.h)
 * as a data + model provider of mxp_run (run.h), and the gpt.h API as a
 * thin wrapper over a run of it (run.h's public functions).
 *
 * Entry points: gpt_provider (models/workload.h),
 * mxp_gpt_create/destroy/set_progress/train/evaluate/sample and the
 * accessors.
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
#include "models/workload_run.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <zlib.h>

#define SHUFFLE_STREAM 0x475054ull /* "GPT" */
#define SAMPLE_STREAM 0x53414d504c45ull /* "SAMPLE" */

typedef struct gpt_data {
    mxp_config cfg;
    int64_t T, B; /* context, sequences per micro-batch */
    int vocab;
    uint8_t byte_of[256]; /* id -> byte */
    int16_t id_of[256];   /* byte -> id, -1 when absent */
    uint8_t *ids;         /* [n_text] token ids */
    int64_t n_text, n_train; /* train: ids[0, n_train), val: ids[n_train, n_text) */
    int64_t n_win_train, n_win_val;
    float *bx;     /* [accum, B*T] */
    int32_t *by;   /* [accum, B*T] */
    float *logits; /* [T, V]: sampling predicts one sequence */
    bool sample_only; /* built from a checkpoint's vocabulary, without text */
    char meta[640];   /* checkpoint metadata: {"vocab_hex": "<2 hex digits per byte>"} */
} gpt_data;

static void gpt_destroy(void *self) {
    gpt_data *g = self;
    if (!g) return;
    mxp_free(g->ids);
    mxp_free(g->bx);
    mxp_free(g->by);
    mxp_free(g->logits);
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

static mxp_status load_text(gpt_data *g, mxp_error *err) {
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

/* Window starting at token `start`: inputs into x [T], targets into y [T]. */
static void gather(const gpt_data *g, int64_t start, float *x, int32_t *y) {
    for (int64_t t = 0; t < g->T; t++) {
        x[t] = (float)g->ids[start + t];
        y[t] = g->ids[start + t + 1];
    }
}

static mxp_status gpt_spec(void *self, mxp_model_spec *out, mxp_error *err) {
    (void)err;
    gpt_data *g = self;
    const mxp_workload_settings *w = &g->cfg.wl;
    *out = mxp_model_spec_gpt(g->vocab, g->T, w->gpt_embd, (int)w->gpt_heads, (int)w->gpt_layers,
                              g->B);
    out->embed_scale = w->gpt_embed_scale > 0 ? w->gpt_embed_scale : 1.0f;
    return MXP_OK;
}

static int64_t gpt_num_train(void *self) { return ((gpt_data *)self)->n_win_train; }

static const char *gpt_meta(void *self) { return ((gpt_data *)self)->meta; }

/* The vocabulary as checkpoint metadata, so sampling needs no text. */
static void make_meta(gpt_data *g) {
    size_t k = (size_t)snprintf(g->meta, sizeof g->meta, "{\"vocab_hex\":\"");
    for (int i = 0; i < g->vocab; i++)
        k += (size_t)snprintf(g->meta + k, sizeof g->meta - k, "%02x", g->byte_of[i]);
    snprintf(g->meta + k, sizeof g->meta - k, "\"}");
}

/* Vocabulary from hex text (ascending distinct bytes, 2..256 of them). */
static bool vocab_from_hex(gpt_data *g, const char *hex) {
    size_t n = strlen(hex);
    if (n % 2 || n < 4 || n > 512) return false;
    for (int c = 0; c < 256; c++) g->id_of[c] = -1;
    g->vocab = 0;
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(hex + i, "%2x", &v) != 1 || (g->vocab && v <= g->byte_of[g->vocab - 1]))
            return false;
        g->id_of[v] = (int16_t)g->vocab;
        g->byte_of[g->vocab++] = (uint8_t)v;
    }
    return true;
}

/* n windows idx[] into slot: B = n * context rows. */
static mxp_status gpt_fill(void *self, int slot, const uint32_t *idx, int64_t n, mxp_batch *out,
                           mxp_error *err) {
    gpt_data *g = self;
    if (g->sample_only)
        return mxp_error_set(err, MXP_ERR_STATE,
                             "this GPT was built from a checkpoint's vocabulary for sampling; "
                             "training needs data.text_file (mxp_gpt_create)");
    const int64_t rows = g->B * g->T;
    float *bx = g->bx + (size_t)slot * (size_t)rows;
    int32_t *by = g->by + (size_t)slot * (size_t)rows;
    for (int64_t b = 0; b < n; b++) gather(g, (int64_t)idx[b] * g->T, bx + b * g->T, by + b * g->T);
    *out = (mxp_batch){.x = bx, .y = NULL, .labels = by, .B = n * g->T};
    return MXP_OK;
}

/* The canary probes the first held-out windows (`rows` rounded down to
 * whole windows, at least one), gathered into slot 0. */
static mxp_status gpt_canary(void *self, int64_t rows, mxp_batch *out, mxp_error *err) {
    (void)err;
    gpt_data *g = self;
    int64_t nw = rows / g->T;
    if (nw < 1) nw = 1;
    if (nw > g->B) nw = g->B;
    if (nw > g->n_win_val) nw = g->n_win_val;
    for (int64_t b = 0; b < nw; b++)
        gather(g, g->n_train + b * g->T, g->bx + b * g->T, g->by + b * g->T);
    *out = (mxp_batch){.x = g->bx, .y = NULL, .labels = g->by, .B = nw * g->T};
    return MXP_OK;
}

/* Mean held-out cross-entropy per byte (nats) and bits per character. */
static mxp_status gpt_evaluate(void *self, mxp_model *m, mxp_run_eval *out, mxp_error *err) {
    gpt_data *g = self;
    if (g->n_win_val < 1)
        return mxp_error_set(err, MXP_ERR_STATE, "GPT evaluate: no held-out text (built from a "
                             "checkpoint's vocabulary for sampling)");
    double total = 0;
    int64_t count = 0;
    for (int64_t w = 0; w < g->n_win_val; w += g->B) {
        const int64_t nb = g->n_win_val - w < g->B ? g->n_win_val - w : g->B;
        for (int64_t b = 0; b < nb; b++)
            gather(g, g->n_train + (w + b) * g->T, g->bx + b * g->T, g->by + b * g->T);
        mxp_batch bt = {.x = g->bx, .labels = g->by, .B = nb * g->T};
        double l = 0;
        mxp_status s = mxp_model_step(m, &bt, false, 1.0f, &l, NULL, err);
        if (s != MXP_OK) return s;
        total += l * (double)(nb * g->T);
        count += nb * g->T;
    }
    snprintf(out->name, sizeof out->name, "val");
    out->loss = total / (double)count;
    out->bits_per_char = out->loss / log(2.0);
    return MXP_OK;
}

/* The vocabulary (count and CRC32C of its bytes) and the windows. */
static void gpt_signature(void *self, char *buf, size_t n) {
    gpt_data *g = self;
    snprintf(buf, n, "vocab=%d/%08x context=%lld train_windows=%lld val_windows=%lld",
             g->vocab, (unsigned)mxp_crc32c(0, g->byte_of, (size_t)g->vocab), (long long)g->T,
             (long long)g->n_win_train, (long long)g->n_win_val);
}

/* vocab_hex NULL: read data.text_file; else the sampling-only GPT. */
static mxp_status provider_create(const mxp_config *cfg, const char *vocab_hex,
                                  mxp_workload_provider *out, mxp_error *err) {
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
    gpt_data *g = mxp_calloc(1, sizeof *g);
    if (!g) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "gpt workload");
    g->cfg = *cfg;
    g->T = w->gpt_context;
    g->B = cfg->batch_size;
    mxp_status s = MXP_OK;
    if (vocab_hex) {
        g->sample_only = true;
        g->n_win_train = g->B * cfg->grad_accum_steps; /* never gathered: gpt_fill refuses */
        if (!vocab_from_hex(g, vocab_hex))
            s = mxp_error_set(err, MXP_ERR_FORMAT,
                              "checkpoint metadata 'workload_meta': vocab_hex is not 2..256 "
                              "ascending bytes in hex");
    } else {
        s = load_text(g, err);
    }
    if (s != MXP_OK) {
        gpt_destroy(g);
        return s;
    }
    make_meta(g);
    const size_t rows = (size_t)(g->B * g->T), accum = (size_t)cfg->grad_accum_steps;
    g->bx = mxp_calloc(accum * rows, sizeof(float));
    g->by = mxp_calloc(accum * rows, sizeof(int32_t));
    g->logits = mxp_calloc((size_t)g->T * (size_t)g->vocab, sizeof(float));
    if (!g->bx || !g->by || !g->logits) {
        gpt_destroy(g);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "gpt batch buffers (%zu rows)", rows);
    }
    *out = (mxp_workload_provider){.self = g,
                                   .name = "gpt",
                                   .model_spec = gpt_spec,
                                   .num_train = gpt_num_train,
                                   .rows_per_sample = g->T,
                                   .shuffle_stream = SHUFFLE_STREAM,
                                   .fill_batch = gpt_fill,
                                   .canary_batch = gpt_canary,
                                   .evaluate = gpt_evaluate,
                                   .data_signature = gpt_signature,
                                   .destroy = gpt_destroy,
                                   .checkpoint_meta = gpt_meta};
    return MXP_OK;
}

mxp_status gpt_provider(const mxp_config *cfg, mxp_workload_provider *out, mxp_error *err) {
    return provider_create(cfg, NULL, out, err);
}

/* ---- gpt.h: a run of the provider ---------------------------------------------
 * An mxp_gpt owns its mxp_run (models/workload_run.h). */

struct mxp_gpt {
    workload_run w;
};

static mxp_run *R(const mxp_gpt *g) { return g->w.run; }
static gpt_data *D(const mxp_gpt *g) { return workload_run_self(&g->w); }

static mxp_status gpt_create(const mxp_config *cfg, const char *vocab_hex, mxp_gpt **out,
                             mxp_error *err) {
    if (!cfg || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_create: NULL");
    *out = NULL;
    mxp_gpt *g = mxp_calloc(1, sizeof *g);
    if (!g) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "gpt workload");
    mxp_workload_provider p;
    mxp_status s = provider_create(cfg, vocab_hex, &p, err);
    if (s == MXP_OK) s = workload_run_create(&g->w, cfg, &p, err);
    if (s != MXP_OK) {
        mxp_free(g);
        return s;
    }
    *out = g;
    return MXP_OK;
}

void mxp_gpt_destroy(mxp_gpt *g) {
    if (!g) return;
    workload_run_destroy(&g->w);
    mxp_free(g);
}

void mxp_gpt_set_progress(mxp_gpt *g, mxp_progress_fn fn, void *user) {
    g->w.progress = fn;
    g->w.progress_user = user;
}

int64_t mxp_gpt_tokens_per_epoch(const mxp_gpt *g) {
    const int64_t per = D(g)->B * D(g)->cfg.grad_accum_steps;
    return (D(g)->n_win_train / per) * per * D(g)->T;
}

mxp_status mxp_gpt_train(mxp_gpt *g, int64_t num_epochs, mxp_error *err) {
    if (!g) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_train: NULL");
    if (num_epochs < 1)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "num_epochs=%lld; accepted: >= 1",
                             (long long)num_epochs);
    return mxp_run_train(R(g), num_epochs, 0, err);
}

mxp_status mxp_gpt_evaluate(mxp_gpt *g, double *val_loss, mxp_error *err) {
    if (!g || !val_loss) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_evaluate: NULL");
    mxp_run_eval ev;
    mxp_status s = mxp_run_evaluate(R(g), &ev, err);
    if (s == MXP_OK) *val_loss = ev.loss;
    return s;
}

mxp_status mxp_gpt_sample(mxp_gpt *gw, const char *prompt, int64_t n, float temperature,
                          uint64_t seed, char *out, mxp_error *err) {
    if (!gw || !out) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_gpt_sample: NULL");
    gpt_data *g = D(gw);
    mxp_model *model = mxp_run_model(R(gw));
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
        s = mxp_model_predict(model, g->bx, T, g->logits, err);
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

mxp_status mxp_gpt_create(const mxp_config *cfg, mxp_gpt **out, mxp_error *err) {
    return gpt_create(cfg, NULL, out, err);
}

mxp_status mxp_gpt_create_for_checkpoint(const mxp_config *cfg, const mxp_st_file *f,
                                         mxp_gpt **out, mxp_error *err) {
    const char *meta = f ? mxp_st_file_meta(f, "workload_meta") : NULL;
    if (!meta) return gpt_create(cfg, NULL, out, err); /* older checkpoints: the text */
    char hex[520];
    const char *p = strstr(meta, "\"vocab_hex\":\"");
    size_t n = 0;
    if (p) {
        p += 13;
        while (p[n] && p[n] != '"' && n + 1 < sizeof hex) n++;
        memcpy(hex, p, n);
    }
    hex[n] = '\0';
    if (!p || p[n] != '"')
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "%s: metadata 'workload_meta' has no vocab_hex (not a GPT "
                             "checkpoint?)",
                             mxp_st_file_label(f));
    return gpt_create(cfg, hex, out, err);
}

int64_t mxp_gpt_vocab_size(const mxp_gpt *g) { return D(g)->vocab; }
int64_t mxp_gpt_train_chars(const mxp_gpt *g) { return D(g)->n_train; }
int64_t mxp_gpt_val_chars(const mxp_gpt *g) { return D(g)->n_text - D(g)->n_train; }
mxp_trainer *mxp_gpt_trainer(mxp_gpt *g) { return mxp_run_trainer(R(g)); }
mxp_model *mxp_gpt_model(mxp_gpt *g) { return mxp_run_model(R(g)); }
mxp_guard *mxp_gpt_guard(mxp_gpt *g) { return mxp_run_guard(R(g)); }
bool mxp_gpt_stopped(const mxp_gpt *g) { return workload_run_stopped(&g->w); }
