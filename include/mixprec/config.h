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
#include <mixprec/device.h>
#include <mixprec/guard.h>
#include <mixprec/train.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MXP_CONFIG_STR_MAX 256

/* Log line format of the CLI: log.format text|json (text). */
typedef enum mxp_log_format {
    MXP_LOG_FORMAT_TEXT,
    MXP_LOG_FORMAT_JSON,
    MXP_LOG_FORMAT_COUNT
} mxp_log_format;

/* obs.*: metrics, HTTP server and run store (see mixprec/obs.h). */
typedef struct mxp_obs_settings {
    bool http_enabled;                      /* obs.http.enabled (false) */
    char http_address[MXP_CONFIG_STR_MAX];  /* obs.http.address ("127.0.0.1") */
    int64_t http_port;                      /* obs.http.port 0..65535, 0 = any (8080) */
    char token_file[MXP_CONFIG_STR_MAX];    /* obs.http.token_file ("none": no control API) */
    int64_t http_max_connections;           /* obs.http.max_connections (16) */
    int64_t http_timeout_s;                 /* obs.http.timeout_s (10) */
    double http_linger_s;                   /* obs.http.linger_s: serve on after the run (0) */
    bool store_enabled;                     /* obs.store.enabled (true) */
    char store_db[MXP_CONFIG_STR_MAX];      /* obs.store.db, relative to output.dir */
    char store_events[MXP_CONFIG_STR_MAX];  /* obs.store.events, relative to output.dir */
    int64_t flush_steps;                    /* obs.store.flush_steps (100) */
    double flush_seconds;                   /* obs.store.flush_seconds (2) */
    int64_t history_max;                    /* obs.history_max rows kept in memory */
    double fp32_baseline_loss;              /* obs.fp32_baseline_loss, 0 = unset */
} mxp_obs_settings;

/* model.workload: what `mixprec train` trains. */
typedef enum mxp_workload {
    MXP_WORKLOAD_WORLD_MODEL, /* MLP on replay data (default) */
    MXP_WORKLOAD_CLASSIFIER,  /* MLP on Fashion-MNIST (classifier.h) */
    MXP_WORKLOAD_GPT,         /* character-level transformer (gpt.h) */
    MXP_WORKLOAD_REGRESSOR,   /* MLP on the user's x [N, D] -> y [N, K] (data.path) */
    MXP_WORKLOAD_COUNT
} mxp_workload;

/* Workload settings beyond the world model (docs/workloads.md). */
typedef struct mxp_workload_settings {
    char fmnist_dir[MXP_CONFIG_STR_MAX]; /* data.fashion_mnist_dir */
    char text_file[MXP_CONFIG_STR_MAX];  /* data.text_file (plain or .gz) */
    char data_path[MXP_CONFIG_STR_MAX];  /* data.path: the user's safetensors/.npz file
                                            (dataset.h, docs/data.md), "none" = built-in data */
    int64_t train_subset;                /* data.train_subset: training examples (images;
                                            gpt: context windows), 0 = all (0) */
    int64_t test_subset;                 /* data.test_subset: evaluation examples, 0 = all (0) */
    int64_t gpt_layers;                  /* gpt.layers >= 1 (2) */
    int64_t gpt_heads;                   /* gpt.heads >= 1 (4) */
    int64_t gpt_embd;                    /* gpt.embd, multiple of heads (128) */
    int64_t gpt_context;                 /* gpt.context >= 2 (64) */
    float gpt_embed_scale;               /* gpt.embed_scale > 0 (1) */
} mxp_workload_settings;

typedef struct mxp_config {
    /* training.* */
    mxp_precision precision;        /* resolved mode */
    bool precision_auto;            /* training.precision=auto: `precision` is the fp32
                                       placeholder; the preflight chooses (guard.h) */
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
    bool flush_denormals;           /* training.flush_denormals: FTZ/DAZ for FP32 compute,
                                       applied by the CLI (mxp_fpenv_set_ftz) (false) */
    /* validation during training (docs/run.md "Validation during training") */
    int64_t eval_every;             /* training.eval_every: validate every N epochs, 0 = off (0) */
    int64_t eval_every_steps;       /* training.eval_every_steps: every N optimizer steps of
                                       the run, 0 = off (0); not with eval_every */
    int64_t early_stop_patience;    /* training.early_stop.patience: evaluations without an
                                       improvement > min_delta before the run stops, 0 = off (0) */
    double early_stop_min_delta;    /* training.early_stop.min_delta >= 0 (0) */
    bool keep_best;                 /* training.keep_best: OUTPUT_DIR/best.safetensors (true) */
    int64_t lr_warmup_steps;        /* training.lr_warmup_steps >= 0: linear from 0 (0) */
    /* model.* */
    int64_t hidden;                 /* model.hidden >= 1 (256) */
    int64_t depth;                  /* model.depth >= 1 (3) */
    mxp_layer_kind activation;      /* model.activation relu|gelu|tanh (gelu) */
    bool layernorm;                 /* model.layernorm (false) */
    char layers[MXP_CONFIG_STR_MAX];    /* model.layers: a layer list (mxp_model_spec_layers)
                                           replacing hidden/depth/activation/layernorm ("none") */
    char init_from[MXP_CONFIG_STR_MAX]; /* model.init_from: safetensors of initial weights
                                           named layers.<i>.weight/.bias ("none") */
    mxp_loss_kind head;             /* model.head deterministic (MXP_LOSS_MSE) | gaussian
                                       (MXP_LOSS_GAUSSIAN): the regression head
                                       (docs/world_models.md) (deterministic) */
    bool termination;               /* model.termination: a termination-flag output (BCE),
                                       world_model on flat data with terminals (false) */
    char target_weights[MXP_CONFIG_STR_MAX]; /* model.target_weights: per-target loss
                                       weights (mxp_model_target_weights_parse) ("none") */
    int64_t ensemble;               /* model.ensemble: members 1..64 of a world_model or
                                       regressor ensemble, each on its own bootstrap
                                       (docs/world_models.md) (1) */
    int64_t elites;                 /* model.elites: the K elite members of an ensemble,
                                       1..ensemble; 0 = all members (0) */
    /* data.* */
    mxp_replay_config data;         /* data.env, data.trajectories, data.episode_length,
                                       data.val_fraction; seed = training.seed */
    mxp_workload workload;          /* model.workload (world_model) */
    mxp_workload_settings wl;       /* data.fashion_mnist_dir, data.text_file, data.*_subset, gpt.* */
    mxp_fp8_config fp8;             /* training.fp8.history_len|amax_algo|margin */
    char device_text[MXP_CONFIG_STR_MAX]; /* training.device cpu|cuda|cuda:N ("cpu") */
    mxp_device device;              /* its parsed form (filled by resolve; device.h) */
    char fp32_layers_text[MXP_CONFIG_STR_MAX]; /* training.precision_fp32_layers ("none") */
    mxp_fp32_layers fp32_layers;    /* its parsed form (filled by resolve; amp.h) */
    int fp16_accumulate;            /* training.fp16_accumulate fp32 (0) | fp16 (1): FP16
                                       fast-accumulate GEMM, emulated (fp16, mixed_fp16) */
    int64_t fp16_accumulate_k;      /* training.fp16_accumulate_k in [1, 4096] (16) */
    /* checkpoint.* (mixprec/ckpt.h, docs/checkpoints.md) */
    bool ckpt_enabled;              /* checkpoint.enabled (true) */
    int64_t ckpt_every_steps;       /* checkpoint.every_steps >= 0, 0 = off (1000) */
    double ckpt_every_seconds;      /* checkpoint.every_seconds >= 0, 0 = off (0) */
    int64_t ckpt_keep_last;         /* checkpoint.keep_last >= 1 (3) */
    char ckpt_dir[MXP_CONFIG_STR_MAX]; /* checkpoint.dir, relative to output.dir ("checkpoints") */
    /* output.* */
    char output_dir[MXP_CONFIG_STR_MAX]; /* output.dir ("runs/latest") */
    mxp_log_level log_level;        /* log.level debug|info|warn|error (info) */
    mxp_log_format log_format;      /* log.format text|json (text) */
    mxp_obs_settings obs;           /* obs.* */
    mxp_dist_config dist;           /* dist.allreduce_dtype, dist.check_every (dist.h) */
    mxp_guard_config guard;         /* guard.* and fault.* (guard.h, docs/safety.md) */
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
MXP_API mxp_status mxp_config_builder_create(mxp_config_builder **out, mxp_error *err);
MXP_API void mxp_config_builder_destroy(mxp_config_builder *b);
/* Apply a YAML file (nested mappings, or dotted keys at top level). */
MXP_API mxp_status mxp_config_apply_file(mxp_config_builder *b, const char *path, mxp_error *err);
/* Apply the environment variables listed above, read through getenv_fn
 * (NULL: getenv) so tests can inject an environment. */
MXP_API mxp_status mxp_config_apply_env(mxp_config_builder *b,
                                        const char *(*getenv_fn)(const char *name), mxp_error *err);
/* Apply one `dotted.key=value` override.
 *
 * Sources are applied in the order the caller makes the calls and a later
 * value replaces an earlier one, so callers apply in precedence order:
 * create -> apply_file -> apply_env -> apply_override... -> resolve.
 * Each apply_* is all-or-nothing: on error the builder is unchanged.
 * The kill switch (set by apply_env) is sticky and applied by resolve. */
MXP_API mxp_status mxp_config_apply_override(mxp_config_builder *b, const char *kv, mxp_error *err);
/* Resolve precision and kill switch, validate cross-field rules, fill *out
 * (untouched on error). Derived fields: precision, kill_switch, data.seed =
 * trainer.seed = seed, trainer.grad_accum_steps = grad_accum_steps,
 * trainer.scaler.enabled = training.loss_scale.enabled when set by any
 * source (then trainer.scaler_override = true), else the mode's policy
 * default. Under the kill switch logs at WARN
 * "FP16 training disabled - using FP32". */
MXP_API mxp_status mxp_config_resolve(mxp_config_builder *b, mxp_config *out, mxp_error *err);

/* Print the resolved config as YAML-like `key: value  # source` lines. */
MXP_API void mxp_config_print(const mxp_config_builder *b, FILE *f);

/* Number of known keys, and key i's name, help text and current value text. */
MXP_API int mxp_config_num_keys(void);
MXP_API const char *mxp_config_key_name(int i);
MXP_API const char *mxp_config_key_help(int i);
/* Index of the key called `name`, or -1 when there is none. */
MXP_API int mxp_config_key_find(const char *name);
/* Key i's current value in b as canonical text (truncated to n), and where
 * it came from. training.precision gives the precision the values resolve
 * to (as mxp_config_resolve would), with the source of the deciding value. */
MXP_API mxp_config_source mxp_config_key_value(const mxp_config_builder *b, int i, char *buf,
                                               size_t n);

MXP_API const char *mxp_config_source_name(mxp_config_source s);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_CONFIG_H */
