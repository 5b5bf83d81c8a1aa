/* mixprec/config.h: the run configuration and where each value came from.
 *
 * Precedence, lowest first: built-in defaults (FP32: safe by default) <
 * YAML file < environment < command-line `dotted.key=value` overrides.
 * The operator kill switch ENABLE_FP16_TRAINING=false (or MIXPREC_FORCE_FP32=1)
 * wins over everything: the run is FP32 and the log says
 * "FP16 training disabled - using FP32".
 *
 * Precision resolution: if `training.precision` was set by any source, it
 * is the mode; else `training.mixed_precision.enabled=true` selects
 * mixed_bf16 or mixed_fp16 by `training.mixed_precision.dtype`
 * (bfloat16 | float16); else fp32.
 *
 * Environment variables (seeds/001): ENABLE_FP16_TRAINING (true|false) sets
 * training.mixed_precision.enabled and dtype=float16 when true;
 * FP16_LOSS_SCALE, FP16_GROWTH_FACTOR, FP16_BACKOFF_FACTOR,
 * FP16_GROWTH_INTERVAL set training.loss_scale.{init,growth_factor,
 * backoff_factor,growth_interval}.
 *
 * Unknown keys and bad values are MXP_ERR_CONFIG errors naming the key (or
 * variable), the value and what is accepted.
 */
#ifndef MIXPREC_CONFIG_H
#define MIXPREC_CONFIG_H

#include <stdio.h>

#include <mixprec/data.h>
#include <mixprec/train.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MXP_CONFIG_STR_MAX 256

typedef struct mxp_config {
    /* training.* */
    mxp_precision precision;        /* resolved mode */
    bool mixed_enabled;             /* training.mixed_precision.enabled */
    mxp_dtype mixed_dtype;          /* training.mixed_precision.dtype: BF16 | F16 */
    bool kill_switch;               /* forced to FP32 by the operator */
    int64_t epochs;                 /* training.epochs >= 1 (3) */
    int64_t batch_size;             /* training.batch_size >= 1 (32) */
    int64_t grad_accum_steps;       /* training.grad_accum_steps >= 1 (1) */
    uint64_t seed;                  /* training.seed (1234) */
    mxp_trainer_config trainer;     /* optimizer, clip, scaler (training.loss_scale.*) */
    mxp_lr_schedule lr_schedule;    /* training.lr_schedule constant|cosine (cosine) */
    float lr_min_ratio;             /* training.lr_min_ratio in [0, 1] (0.1) */
    /* model.* */
    int64_t hidden;                 /* model.hidden >= 1 (256) */
    int64_t depth;                  /* model.depth >= 1 (3) */
    mxp_layer_kind activation;      /* model.activation relu|gelu|tanh (gelu) */
    bool layernorm;                 /* model.layernorm (false) */
    /* data.* */
    mxp_replay_config data;         /* data.env, data.trajectories, data.episode_length,
                                       data.val_fraction; seed = training.seed */
    /* output.* */
    char output_dir[MXP_CONFIG_STR_MAX]; /* output.dir ("runs/latest") */
    mxp_log_level log_level;        /* log.level debug|info|warn|error (info) */
} mxp_config;

typedef enum mxp_config_source {
    MXP_SRC_DEFAULT,
    MXP_SRC_FILE,
    MXP_SRC_ENV,
    MXP_SRC_CLI,
    MXP_SRC_KILL_SWITCH,
    MXP_SRC_COUNT
} mxp_config_source;

typedef struct mxp_config_builder mxp_config_builder;

/* Start from defaults. */
mxp_status mxp_config_builder_create(mxp_config_builder **out, mxp_error *err);
void mxp_config_builder_destroy(mxp_config_builder *b);
/* Apply a YAML file (nested mappings, or dotted keys at top level). */
mxp_status mxp_config_apply_file(mxp_config_builder *b, const char *path, mxp_error *err);
/* Apply the environment variables listed above, read through getenv_fn
 * (NULL: getenv) so tests can inject an environment. */
mxp_status mxp_config_apply_env(mxp_config_builder *b,
                                const char *(*getenv_fn)(const char *name),
                                mxp_error *err);
/* Apply one `dotted.key=value` override.
 *
 * Sources are applied in the order the caller makes the calls and a later
 * value replaces an earlier one, so callers apply in precedence order:
 * create -> apply_file -> apply_env -> apply_override... -> resolve.
 * Each apply_* is all-or-nothing: on error the builder is unchanged.
 * The kill switch (set by apply_env) is sticky and applied by resolve. */
mxp_status mxp_config_apply_override(mxp_config_builder *b, const char *kv, mxp_error *err);
/* Resolve precision and kill switch, validate cross-field rules, fill *out
 * (untouched on error). Derived fields: precision, kill_switch, data.seed =
 * trainer.seed = seed, trainer.grad_accum_steps = grad_accum_steps,
 * trainer.scaler.enabled = training.loss_scale.enabled when set by any
 * source (then trainer.scaler_override = true), else the mode's policy
 * default. Under the kill switch logs at WARN
 * "FP16 training disabled - using FP32". */
mxp_status mxp_config_resolve(mxp_config_builder *b, mxp_config *out, mxp_error *err);

/* Print the resolved config as YAML-like `key: value  # source` lines. */
void mxp_config_print(const mxp_config_builder *b, FILE *f);

/* Number of known keys, and key i's name, help text and current value text. */
int mxp_config_num_keys(void);
const char *mxp_config_key_name(int i);
const char *mxp_config_key_help(int i);
/* Index of the key called `name`, or -1 when there is none. */
int mxp_config_key_find(const char *name);
/* Key i's current value in b as canonical text (truncated to n), and where
 * it came from. training.precision gives the precision the values resolve
 * to (as mxp_config_resolve would), with the source of the deciding value. */
mxp_config_source mxp_config_key_value(const mxp_config_builder *b, int i,
                                       char *buf, size_t n);

const char *mxp_config_source_name(mxp_config_source s);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_CONFIG_H */
