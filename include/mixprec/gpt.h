/* mixprec/gpt.h: the character-level GPT workload.
 *
 * A GPT-2 style transformer (mxp_model_spec_gpt: token + position
 * embedding, gpt.layers pre-LN blocks with causal self-attention of
 * gpt.heads heads and a 4x GELU MLP, final layernorm, lm_head tied to the
 * token embedding) trained to predict the next byte of a text file
 * (data.text_file, plain or gzip; default the Jargon File of Debian's
 * jargon-text). "Character" means byte: the vocabulary is the set of byte
 * values present in the file, sorted (a UTF-8 character outside ASCII is
 * several tokens). The first (1 - data.val_fraction) of the text trains,
 * the rest is held out.
 *
 * Training examples are windows of gpt.context + 1 bytes starting every
 * gpt.context bytes of the training part (inputs = the first context
 * bytes, targets = the next byte at each position); an epoch visits them in
 * a seeded per-epoch order (data.train_subset > 0 keeps the first that many
 * windows), in micro-batches of training.batch_size windows (drop-last).
 * Validation uses the non-overlapping windows of the held-out part
 * (data.test_subset > 0 keeps the first that many). The loss is the mean
 * cross-entropy per predicted byte, in nats; bits per character = loss /
 * ln 2.
 */
#ifndef MIXPREC_GPT_H
#define MIXPREC_GPT_H

#include <mixprec/world_model.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxp_gpt mxp_gpt;

/* Read the text, build the vocabulary, the model (cfg->precision, gpt.*)
 * and the trainer. Errors name the file or key: MXP_ERR_IO (cannot read),
 * MXP_ERR_FORMAT (empty, corrupt gzip, too short for one window in either
 * split), MXP_ERR_CONFIG (gpt.embd not a multiple of gpt.heads, ...). */
MXP_API mxp_status mxp_gpt_create(const mxp_config *cfg, mxp_gpt **out, mxp_error *err);
/* For sampling from a checkpoint without its training text: the
 * vocabulary comes from the checkpoint's metadata "workload_meta"
 * ({"vocab_hex": ...}, written by every GPT run); a checkpoint without it
 * (older runs) falls back to mxp_gpt_create (data.text_file). The result
 * loads the checkpoint (mxp_ckpt_load_file) and samples; training and
 * evaluation refuse with MXP_ERR_STATE. */
MXP_API mxp_status mxp_gpt_create_for_checkpoint(const mxp_config *cfg, const mxp_st_file *f,
                                                 mxp_gpt **out, mxp_error *err);
MXP_API void mxp_gpt_destroy(mxp_gpt *g);
MXP_API void mxp_gpt_set_progress(mxp_gpt *g, mxp_progress_fn fn, void *user);

/* Train num_epochs more epochs (the LR schedule planned over the run, docs/run.md). */
MXP_API mxp_status mxp_gpt_train(mxp_gpt *g, int64_t num_epochs, mxp_error *err);
/* Mean held-out cross-entropy per byte (nats), forward only. */
MXP_API mxp_status mxp_gpt_evaluate(mxp_gpt *g, double *val_loss, mxp_error *err);

/* Generate n bytes after `prompt` (may be empty: starts from the first
 * vocabulary byte, normally '\n'), sampling from softmax(logits /
 * temperature) (temperature > 0; <= 1e-3 is greedy) with a counter-based
 * RNG stream of `seed`; the model sees the last gpt.context bytes. Prompt
 * bytes outside the vocabulary are an MXP_ERR_INVALID_ARG naming the
 * first one. out must hold n + 1 bytes (NUL-terminated). */
MXP_API mxp_status mxp_gpt_sample(mxp_gpt *g, const char *prompt, int64_t n, float temperature,
                                  uint64_t seed, char *out, mxp_error *err);

MXP_API int64_t mxp_gpt_vocab_size(const mxp_gpt *g);
/* Bytes of text in the training and held-out parts. */
MXP_API int64_t mxp_gpt_train_chars(const mxp_gpt *g);
MXP_API int64_t mxp_gpt_val_chars(const mxp_gpt *g);
/* Predicted bytes (tokens) per epoch. */
MXP_API int64_t mxp_gpt_tokens_per_epoch(const mxp_gpt *g);
MXP_API mxp_trainer *mxp_gpt_trainer(mxp_gpt *g);
MXP_API mxp_model *mxp_gpt_model(mxp_gpt *g);
/* The numerical-safety guard (guard.h; created when guard.enabled or a
 * fault is configured, its canary probing the first held-out windows), or
 * NULL. Rollbacks move the data position back, as in the world model. */
MXP_API mxp_guard *mxp_gpt_guard(mxp_gpt *g);
/* True when the last train() was ended by a guard rule with action stop. */
MXP_API bool mxp_gpt_stopped(const mxp_gpt *g);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_GPT_H */
