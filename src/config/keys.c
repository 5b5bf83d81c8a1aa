/* src/config/keys.c: the configuration key table (one row per dotted key:
 * type, storage in mxp_config, default, accepted values, help) and the
 * name-level queries on it.
 *
 * Entry points: mxp_config_num_keys, mxp_config_key_name, mxp_config_key_help,
 * mxp_config_key_find, mxp_config_source_name; internal mxp_config_key_at,
 * mxp_config_key_suggest, mxp_config_key_is_section.
 * Defaults follow docs/design.md "Who changes precision" (FP32, safe by
 * default) and the GradScaler defaults of amp.h (65536, 2.0, 0.5, 2000).
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/config_internal.h"

/* Enum-valued fields are written as int (MXP_STORE_ENUM). */
static_assert(sizeof(mxp_dtype) == sizeof(int), "enum size");
static_assert(sizeof(mxp_optim_kind) == sizeof(int), "enum size");
static_assert(sizeof(mxp_scale_floor_policy) == sizeof(int), "enum size");
static_assert(sizeof(mxp_layer_kind) == sizeof(int), "enum size");
static_assert(sizeof(mxp_env_kind) == sizeof(int), "enum size");
static_assert(sizeof(mxp_log_level) == sizeof(int), "enum size");
static_assert(sizeof(mxp_lr_schedule) == sizeof(int), "enum size");
static_assert(sizeof(mxp_loss_kind) == sizeof(int), "enum size");

/* ---- enum choices ------------------------------------------------------- */

static const mxp_key_choice kDtypeChoices[] = {
    {"bfloat16", MXP_DTYPE_BF16, false},
    {"float16", MXP_DTYPE_F16, false},
    {"bf16", MXP_DTYPE_BF16, true},
    {"fp16", MXP_DTYPE_F16, true},
};

static const mxp_key_choice kOptimChoices[] = {
    {"adamw", MXP_OPTIM_ADAMW, false},
    {"sgd", MXP_OPTIM_SGD, false},
};
static_assert(MXP_OPTIM_KIND_COUNT == 2, "update kOptimChoices");

static const mxp_key_choice kAtMinChoices[] = {
    {"continue", MXP_SCALE_FLOOR_CONTINUE, false},
    {"error", MXP_SCALE_FLOOR_ERROR, false},
    {"fallback", MXP_SCALE_FLOOR_FALLBACK, false},
};
static_assert(MXP_SCALE_FLOOR_COUNT == 3, "update kAtMinChoices");

static const mxp_key_choice kScheduleChoices[] = {
    {"constant", MXP_LR_CONSTANT, false},
    {"cosine", MXP_LR_COSINE, false},
};
static_assert(MXP_LR_SCHEDULE_COUNT == 2, "update kScheduleChoices");

static const mxp_key_choice kAccumChoices[] = {
    {"fp32", 0, false},
    {"fp16", 1, false},
};

static const mxp_key_choice kHeadChoices[] = {
    {"deterministic", MXP_LOSS_MSE, false},
    {"gaussian", MXP_LOSS_GAUSSIAN, false},
};

static const mxp_key_choice kActChoices[] = {
    {"relu", MXP_LAYER_RELU, false},
    {"gelu", MXP_LAYER_GELU, false},
    {"tanh", MXP_LAYER_TANH, false},
};

static const mxp_key_choice kEnvChoices[] = {
    {"pendulum", MXP_ENV_PENDULUM, false},
    {"cartpole", MXP_ENV_CARTPOLE, false},
    {"ant", MXP_ENV_ANT, false},
    {"humanoid", MXP_ENV_HUMANOID, false},
};
static_assert(MXP_ENV_KIND_COUNT == 4, "update kEnvChoices");
static_assert(MXP_ENV_PATH_MAX == MXP_CONFIG_STR_MAX, "data.mujoco_model is a config string");

static const mxp_key_choice kWorkloadChoices[] = {
    {"world_model", MXP_WORKLOAD_WORLD_MODEL, false},
    {"classifier", MXP_WORKLOAD_CLASSIFIER, false},
    {"gpt", MXP_WORKLOAD_GPT, false},
    {"regressor", MXP_WORKLOAD_REGRESSOR, false},
};
static_assert(MXP_WORKLOAD_COUNT == 4, "update kWorkloadChoices");
static_assert(sizeof(mxp_workload) == sizeof(int), "enum size");

static const mxp_key_choice kAmaxChoices[] = {
    {"max", MXP_FP8_AMAX_MAX, false},
    {"most_recent", MXP_FP8_AMAX_MOST_RECENT, false},
};
static_assert(MXP_FP8_AMAX_ALGO_COUNT == 2, "update kAmaxChoices");
static_assert(sizeof(mxp_fp8_amax_algo) == sizeof(int), "enum size");

static const mxp_key_choice kWireChoices[] = {
    {"fp32", MXP_WIRE_F32, false},
    {"bf16", MXP_WIRE_BF16, false},
    {"bfloat16", MXP_WIRE_BF16, true},
};
static_assert(MXP_WIRE_DTYPE_COUNT == 2, "update kWireChoices");
static_assert(sizeof(mxp_wire_dtype) == sizeof(int), "enum size");

static const mxp_key_choice kGuardActionChoices[] = {
    {"off", 0, false},
    {"alert", MXP_ACT_ALERT, false},
    {"fallback", MXP_ACT_ALERT | MXP_ACT_FALLBACK, false},
    {"rollback", MXP_ACT_ALERT | MXP_ACT_ROLLBACK, false},
    {"fallback+rollback", MXP_ACT_ALERT | MXP_ACT_FALLBACK | MXP_ACT_ROLLBACK, false},
    {"stop", MXP_ACT_ALERT | MXP_ACT_STOP, false},
    {"rollback+fallback", MXP_ACT_ALERT | MXP_ACT_FALLBACK | MXP_ACT_ROLLBACK, true},
};
static_assert(sizeof(unsigned) == sizeof(int), "guard actions are stored as int");

static const mxp_key_choice kFaultKindChoices[] = {
    {"none", MXP_FAULT_NONE, false},
    {"nan", MXP_FAULT_NAN, false},
    {"inf", MXP_FAULT_INF, false},
    {"value", MXP_FAULT_VALUE, false},
    {"scale_weights", MXP_FAULT_SCALE_WEIGHTS, false},
};
static_assert(MXP_FAULT_KIND_COUNT == 5, "update kFaultKindChoices");
static_assert(sizeof(mxp_fault_kind) == sizeof(int), "enum size");

static const mxp_key_choice kFaultPassChoices[] = {
    {"forward", MXP_FAULT_FORWARD, false},
    {"backward", MXP_FAULT_BACKWARD, false},
};
static_assert(MXP_FAULT_PASS_COUNT == 2, "update kFaultPassChoices");
static_assert(sizeof(mxp_fault_pass) == sizeof(int), "enum size");

static const mxp_key_choice kLogChoices[] = {
    {"debug", MXP_LOG_DEBUG, false},
    {"info", MXP_LOG_INFO, false},
    {"warn", MXP_LOG_WARN, false},
    {"error", MXP_LOG_ERROR, false},
    {"warning", MXP_LOG_WARN, true},
};
static_assert(MXP_LOG_LEVEL_COUNT == 4, "update kLogChoices");

static const mxp_key_choice kLogFormatChoices[] = {
    {"text", MXP_LOG_FORMAT_TEXT, false},
    {"json", MXP_LOG_FORMAT_JSON, false},
};
static_assert(MXP_LOG_FORMAT_COUNT == 2, "update kLogFormatChoices");
static_assert(sizeof(mxp_log_format) == sizeof(int), "enum size");

/* ---- the table ---------------------------------------------------------- */

#define OFF(field) offsetof(mxp_config, field)
#define NCH(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define KEY_BOOL(nm, st, off, def, hlp) \
    {.name = nm, .type = MXP_KEY_BOOL, .store = st, .offset = off, .def_b = def, .help = hlp}
#define KEY_INT(nm, st, field, def, lo, hi, hlp)                                      \
    {.name = nm, .type = MXP_KEY_INT, .store = st, .offset = OFF(field), .def_i = def, \
     .imin = lo, .imax = hi, .help = hlp}
#define KEY_FLT(nm, st, field, def, lo, lo_open, hi, hi_open, inf_ok, hlp)                \
    {.name = nm, .type = MXP_KEY_FLOAT, .store = st, .offset = OFF(field), .def_d = def,   \
     .fmin = lo, .fmin_open = lo_open, .fmax = hi, .fmax_open = hi_open,                  \
     .allow_inf = inf_ok, .help = hlp}
#define KEY_ENUM(nm, field, def, ch, hlp)                                                 \
    {.name = nm, .type = MXP_KEY_ENUM, .store = MXP_STORE_ENUM, .offset = OFF(field),     \
     .def_e = def, .choices = ch, .nchoices = NCH(ch), .help = hlp}

#define KEY_STR(nm, field, def, hlp)                                                 \
    {.name = nm, .type = MXP_KEY_STRING, .store = MXP_STORE_STR, .offset = OFF(field),   \
     .def_s = def, .help = hlp}

/* A cap of INT32_MAX on sizes keeps any product of two of them in int64. */
#define I32MAX ((int64_t)INT32_MAX)

static const mxp_config_key kKeys[] = {
    {.name = "training.precision", .type = MXP_KEY_PRECISION, .store = MXP_STORE_NONE,
     .def_e = MXP_PRECISION_FP32,
     .help = "precision mode fp32|mixed_bf16|mixed_fp16|bf16|fp16|fp8|auto (auto: the "
             "preflight advisor chooses); unset: chosen by training.mixed_precision.* (fp32 "
             "when disabled)"},
    KEY_STR("training.device", device_text, "cpu",
            "compute device cpu|cuda|cuda:N (cuda needs a build with the CUDA backend and a "
            "GPU; training on the GPU is not implemented yet: docs/gpu.md) (cpu)"),
    KEY_STR("training.precision_fp32_layers", fp32_layers_text, "none",
            "layers kept in FP32 in every mode but fp32 (matmul inputs, weights, outputs), "
            "as FP8/TE recipes keep the first and last layers: none|first|last|first,last|"
            "a comma list of linear layer indices (none)"),
    KEY_ENUM("training.fp16_accumulate", fp16_accumulate, 0, kAccumChoices,
             "matmul accumulation of FP16 operands: fp32|fp16 (fp16: FP16 partial sums "
             "promoted to FP32 every training.fp16_accumulate_k products, emulated on CPUs "
             "without AVX512-FP16; only with training.precision fp16|mixed_fp16) (fp32)"),
    KEY_INT("training.fp16_accumulate_k", MXP_STORE_I64, fp16_accumulate_k, 16, 1, 4096,
            "products per FP16 partial sum before promotion to FP32, in [1, 4096] (16)"),
    KEY_BOOL("training.mixed_precision.enabled", MXP_STORE_BOOL, OFF(mixed_enabled), false,
             "mixed precision on/off when training.precision is unset (false)"),
    KEY_ENUM("training.mixed_precision.dtype", mixed_dtype, MXP_DTYPE_BF16, kDtypeChoices,
             "low-precision dtype of mixed precision: bfloat16|float16 (bfloat16)"),
    KEY_INT("training.epochs", MXP_STORE_I64, epochs, 3, 1, I32MAX,
            "passes over the training split, >= 1 (3)"),
    KEY_INT("training.batch_size", MXP_STORE_I64, batch_size, 32, 1, I32MAX,
            "samples per micro-batch, >= 1 (32)"),
    KEY_INT("training.grad_accum_steps", MXP_STORE_I64, grad_accum_steps, 1, 1, I32MAX,
            "micro-batches per optimizer step, >= 1 (1)"),
    KEY_INT("training.seed", MXP_STORE_U64, seed, 1234, 0, 0,
            "seed of data generation, initialisation and rounding, integer >= 0 (1234)"),
    KEY_ENUM("training.optimizer", trainer.optim.kind, MXP_OPTIM_ADAMW, kOptimChoices,
             "optimizer adamw|sgd (adamw)"),
    KEY_FLT("training.lr", MXP_STORE_F32, trainer.optim.lr, 1e-3, 0.0, true, INFINITY, false,
            false, "learning rate, > 0 (0.001)"),
    KEY_ENUM("training.lr_schedule", lr_schedule, MXP_LR_COSINE, kScheduleChoices,
             "learning-rate schedule over the run: constant|cosine (cosine)"),
    KEY_FLT("training.lr_min_ratio", MXP_STORE_F32, lr_min_ratio, 0.1, 0.0, false, 1.0, false,
            false, "cosine floor as a fraction of training.lr, in [0, 1] (0.1)"),
    KEY_INT("training.lr_warmup_steps", MXP_STORE_I64, lr_warmup_steps, 0, 0, INT64_MAX,
            "optimizer steps of linear learning-rate warmup from 0 at the start of the run, "
            ">= 0; 0 = off (0)"),
    KEY_INT("training.eval_every", MXP_STORE_I64, eval_every, 0, 0, I32MAX,
            "validate on the held-out split every N epochs during training (val_loss in "
            "history.csv, metrics, store, log), >= 0; 0 = off (0)"),
    KEY_INT("training.eval_every_steps", MXP_STORE_I64, eval_every_steps, 0, 0, INT64_MAX,
            "validate every N optimizer steps of the run instead (global step a multiple of "
            "N), >= 0; 0 = off; not with training.eval_every (0)"),
    KEY_INT("training.early_stop.patience", MXP_STORE_I64, early_stop_patience, 0, 0, I32MAX,
            "stop after this many validations without an improvement of the best validation "
            "loss by more than min_delta, >= 0; 0 = off; needs training.eval_every >= 1 (0)"),
    KEY_FLT("training.early_stop.min_delta", MXP_STORE_F64, early_stop_min_delta, 0.0, 0.0,
            false, INFINITY, false, false,
            "improvement of the validation loss that counts, finite and >= 0 (0)"),
    KEY_BOOL("training.keep_best", MXP_STORE_BOOL, OFF(keep_best), true,
             "with training.eval_every: keep the weights of the best validation loss as "
             "OUTPUT_DIR/best.safetensors, a checkpoint (needs checkpoint.enabled) (true)"),
    KEY_FLT("training.beta1", MXP_STORE_F32, trainer.optim.beta1, 0.9, 0.0, false, 1.0, true,
            false, "AdamW beta1, in [0, 1) (0.9)"),
    KEY_FLT("training.beta2", MXP_STORE_F32, trainer.optim.beta2, 0.999, 0.0, false, 1.0, true,
            false, "AdamW beta2, in [0, 1) (0.999)"),
    KEY_FLT("training.eps", MXP_STORE_F32, trainer.optim.eps, 1e-8, 0.0, true, INFINITY, false,
            false, "AdamW epsilon, > 0 (1e-08)"),
    KEY_FLT("training.weight_decay", MXP_STORE_F32, trainer.optim.weight_decay, 0.0, 0.0, false,
            INFINITY, false, false, "decoupled weight decay, >= 0 (0)"),
    KEY_FLT("training.momentum", MXP_STORE_F32, trainer.optim.momentum, 0.9, 0.0, false, 1.0,
            true, false, "SGD momentum, in [0, 1) (0.9)"),
    KEY_BOOL("training.nesterov", MXP_STORE_BOOL, OFF(trainer.optim.nesterov), false,
             "SGD Nesterov momentum (false)"),
    KEY_FLT("training.clip_grad_norm", MXP_STORE_F32, trainer.clip_grad_norm, 1.0, 0.0, false,
            INFINITY, false, false, "clip the global gradient norm to this, >= 0; 0 = off (1)"),
    KEY_BOOL("training.loss_scale.enabled", MXP_STORE_NONE, 0, false,
             "dynamic loss scaling on/off; unset: the precision mode's default "
             "(on for fp16 modes)"),
    KEY_FLT("training.loss_scale.init", MXP_STORE_F64, trainer.scaler.init_scale, 65536.0, 0.0,
            true, (double)FLT_MAX, false, false,
            "initial loss scale, > 0 and finite in float32 (65536); env FP16_LOSS_SCALE"),
    KEY_FLT("training.loss_scale.growth_factor", MXP_STORE_F64, trainer.scaler.growth_factor,
            2.0, 1.0, true, INFINITY, false, false,
            "scale multiplier after growth_interval clean steps, > 1 (2); "
            "env FP16_GROWTH_FACTOR"),
    KEY_FLT("training.loss_scale.backoff_factor", MXP_STORE_F64, trainer.scaler.backoff_factor,
            0.5, 0.0, true, 1.0, true, false,
            "scale multiplier on overflow, in (0, 1) (0.5); env FP16_BACKOFF_FACTOR"),
    KEY_INT("training.loss_scale.growth_interval", MXP_STORE_I64, trainer.scaler.growth_interval,
            2000, 1, INT64_MAX,
            "clean steps before the scale grows, >= 1 (2000); env FP16_GROWTH_INTERVAL"),
    KEY_INT("training.loss_scale.hysteresis", MXP_STORE_I32, trainer.scaler.hysteresis, 1, 1,
            I32MAX, "overflows tolerated before a backoff, >= 1 (1 = PyTorch)"),
    KEY_FLT("training.loss_scale.min_scale", MXP_STORE_F64, trainer.scaler.min_scale, 0.0, 0.0,
            false, INFINITY, false, false, "lowest loss scale, >= 0; 0 = no floor (0)"),
    KEY_FLT("training.loss_scale.max_scale", MXP_STORE_F64, trainer.scaler.max_scale, INFINITY,
            0.0, true, INFINITY, false, true, "highest loss scale, > 0 or inf (inf)"),
    KEY_ENUM("training.loss_scale.at_min", trainer.scaler.at_min, MXP_SCALE_FLOOR_CONTINUE,
             kAtMinChoices, "on overflow at min_scale: continue|error|fallback (continue)"),
    KEY_BOOL("training.loss_scale.per_layer", MXP_STORE_BOOL, OFF(trainer.scaler.per_layer),
             false, "one dynamic loss scale per layer (adaptive loss scaling, arXiv "
             "1910.12385): each layer backs off and grows on its own (false)"),
    KEY_FLT("training.near_overflow_fraction", MXP_STORE_F32, trainer.near_overflow_frac, 0.125,
            0.0, true, 1.0, false, false,
            "a scaled grad is near overflow at >= this fraction of the dtype max, "
            "in (0, 1] (0.125)"),
    KEY_BOOL("training.flush_denormals", MXP_STORE_BOOL, OFF(flush_denormals), false,
             "flush-to-zero/denormals-are-zero for FP32 compute, like torch.set_flush_denormal; "
             "FP16 conversions and the unscale pass keep subnormals (false)"),
    /* guard.* and fault.*: numerical safety (docs/safety.md, guard.h) */
    KEY_BOOL("guard.enabled", MXP_STORE_BOOL, OFF(guard.enabled), true,
             "monitors, guard rules, canary and automatic recovery (true)"),
    KEY_BOOL("guard.anomaly_mode", MXP_STORE_BOOL, OFF(guard.anomaly_mode), false,
             "check every op output, input and weight; report the first forward culprit (false)"),
    KEY_INT("guard.canary.every_steps", MXP_STORE_I64, guard.canary_every, 100, 0, I32MAX,
            "FP32 canary every K steps, >= 0; 0 = off (100)"),
    KEY_INT("guard.canary.batch_size", MXP_STORE_I64, guard.canary_batch, 64, 1, I32MAX,
            "rows of the canary's probe batch (capped at training.batch_size), >= 1 (64)"),
    KEY_FLT("guard.canary.loss_floor", MXP_STORE_F64, guard.canary_loss_floor, 1e-3, 0.0, false,
            1.0, false, false,
            "canary divergence is relative to max(loss_fp32, x * the probe's constant-prediction "
            "loss), 0..1 (0.001)"),
    KEY_INT("guard.headroom.every_steps", MXP_STORE_I64, guard.headroom_every, 10, 1, I32MAX,
            "full per-layer scans (underflow counts) every N steps, >= 1 (10)"),
    KEY_BOOL("guard.fallback.allow_emulated", MXP_STORE_BOOL, OFF(guard.allow_emulated), false,
             "let the fallback chain use formats this CPU only emulates (false)"),
    KEY_INT("guard.fallback.retry_after", MXP_STORE_I64, guard.retry_after, 0, 0, I32MAX,
            "healthy steps before retrying the faster precision after a fallback, >= 0; "
            "0 = never (0)"),
    KEY_INT("guard.rollback.snapshot_every", MXP_STORE_I64, guard.snapshot_every, 100, 1, I32MAX,
            "save a healthy rollback point at most every N steps, >= 1 (100)"),
    KEY_INT("guard.rollback.max", MXP_STORE_I64, guard.max_rollbacks, 5, 0, I32MAX,
            "rollbacks allowed per run, >= 0 (5)"),
    KEY_INT("guard.preflight.batches", MXP_STORE_I64, guard.preflight_batches, 8, 1, 64,
            "FP32 batches the precision advisor runs, 1..64 (8)"),
    KEY_FLT("guard.nonfinite_loss.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_NONFINITE_LOSS].threshold,
            10, 0.0, false, INFINITY, false, false,
            "consecutive non-finite losses, fires at >= N, >= 0 (10)"),
    KEY_INT("guard.nonfinite_loss.window", MXP_STORE_I64, guard.rules[MXP_RULE_NONFINITE_LOSS].window, 1, 1,
            1000000, "samples the nonfinite_loss rule aggregates, 1..1000000 (1)"),
    KEY_ENUM("guard.nonfinite_loss.action", guard.rules[MXP_RULE_NONFINITE_LOSS].action, 7, kGuardActionChoices,
             "nonfinite_loss action off|alert|fallback|rollback|fallback+rollback|stop (fallback+rollback)"),
    KEY_FLT("guard.overflow_rate_high.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_OVERFLOW_RATE_HIGH].threshold,
            0.3, 0.0, false, INFINITY, false, false,
            "skipped-step rate over the window, fires at > x, >= 0 (0.3)"),
    KEY_INT("guard.overflow_rate_high.window", MXP_STORE_I64, guard.rules[MXP_RULE_OVERFLOW_RATE_HIGH].window, 100, 1,
            1000000, "samples the overflow_rate_high rule aggregates, 1..1000000 (100)"),
    KEY_ENUM("guard.overflow_rate_high.action", guard.rules[MXP_RULE_OVERFLOW_RATE_HIGH].action, 3, kGuardActionChoices,
             "overflow_rate_high action off|alert|fallback|rollback|fallback+rollback|stop (fallback)"),
    KEY_FLT("guard.overflow_rate.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_OVERFLOW_RATE].threshold,
            0.1, 0.0, false, INFINITY, false, false,
            "skipped-step rate over the window, fires at >= x (P2 band below overflow_rate_high), >= 0 (0.1)"),
    KEY_INT("guard.overflow_rate.window", MXP_STORE_I64, guard.rules[MXP_RULE_OVERFLOW_RATE].window, 100, 1,
            1000000, "samples the overflow_rate rule aggregates, 1..1000000 (100)"),
    KEY_ENUM("guard.overflow_rate.action", guard.rules[MXP_RULE_OVERFLOW_RATE].action, 1, kGuardActionChoices,
             "overflow_rate action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.canary_divergence_high.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_CANARY_DIVERGENCE_HIGH].threshold,
            0.2, 0.0, false, INFINITY, false, false,
            "|loss - loss_fp32| / loss_fp32 of the canary, fires at > x, >= 0 (0.2)"),
    KEY_INT("guard.canary_divergence_high.window", MXP_STORE_I64, guard.rules[MXP_RULE_CANARY_DIVERGENCE_HIGH].window, 1, 1,
            1000000, "samples the canary_divergence_high rule aggregates, 1..1000000 (1)"),
    KEY_ENUM("guard.canary_divergence_high.action", guard.rules[MXP_RULE_CANARY_DIVERGENCE_HIGH].action, 5, kGuardActionChoices,
             "canary_divergence_high action off|alert|fallback|rollback|fallback+rollback|stop (rollback)"),
    KEY_FLT("guard.canary_divergence.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_CANARY_DIVERGENCE].threshold,
            0.05, 0.0, false, INFINITY, false, false,
            "canary divergence, fires at > x (P2 band), >= 0 (0.05)"),
    KEY_INT("guard.canary_divergence.window", MXP_STORE_I64, guard.rules[MXP_RULE_CANARY_DIVERGENCE].window, 1, 1,
            1000000, "samples the canary_divergence rule aggregates, 1..1000000 (1)"),
    KEY_ENUM("guard.canary_divergence.action", guard.rules[MXP_RULE_CANARY_DIVERGENCE].action, 1, kGuardActionChoices,
             "canary_divergence action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.zero_grad.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_ZERO_GRAD].threshold,
            0.05, 0.0, false, INFINITY, false, false,
            "exactly-zero gradient fraction (mean over the window), fires at > x, >= 0 (0.05)"),
    KEY_INT("guard.zero_grad.window", MXP_STORE_I64, guard.rules[MXP_RULE_ZERO_GRAD].window, 10, 1,
            1000000, "samples the zero_grad rule aggregates, 1..1000000 (10)"),
    KEY_ENUM("guard.zero_grad.action", guard.rules[MXP_RULE_ZERO_GRAD].action, 1, kGuardActionChoices,
             "zero_grad action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.grad_near_overflow.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_GRAD_NEAR_OVERFLOW].threshold,
            0.01, 0.0, false, INFINITY, false, false,
            "fraction of scaled grads near the format max (mean), fires at > x, >= 0 (0.01)"),
    KEY_INT("guard.grad_near_overflow.window", MXP_STORE_I64, guard.rules[MXP_RULE_GRAD_NEAR_OVERFLOW].window, 10, 1,
            1000000, "samples the grad_near_overflow rule aggregates, 1..1000000 (10)"),
    KEY_ENUM("guard.grad_near_overflow.action", guard.rules[MXP_RULE_GRAD_NEAR_OVERFLOW].action, 1, kGuardActionChoices,
             "grad_near_overflow action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.grad_norm_growth.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_GRAD_NORM_GROWTH].threshold,
            10, 0.0, false, INFINITY, false, false,
            "grad norm now / window steps ago, fires at > x, >= 0 (10)"),
    KEY_INT("guard.grad_norm_growth.window", MXP_STORE_I64, guard.rules[MXP_RULE_GRAD_NORM_GROWTH].window, 100, 1,
            1000000, "samples the grad_norm_growth rule aggregates, 1..1000000 (100)"),
    KEY_ENUM("guard.grad_norm_growth.action", guard.rules[MXP_RULE_GRAD_NORM_GROWTH].action, 1, kGuardActionChoices,
             "grad_norm_growth action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.loss_scale_low.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_LOSS_SCALE_LOW].threshold,
            1024, 0.0, false, INFINITY, false, false,
            "dynamic loss scale (min over the window), fires at < x, >= 0 (1024)"),
    KEY_INT("guard.loss_scale_low.window", MXP_STORE_I64, guard.rules[MXP_RULE_LOSS_SCALE_LOW].window, 1, 1,
            1000000, "samples the loss_scale_low rule aggregates, 1..1000000 (1)"),
    KEY_ENUM("guard.loss_scale_low.action", guard.rules[MXP_RULE_LOSS_SCALE_LOW].action, 1, kGuardActionChoices,
             "loss_scale_low action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.headroom.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_HEADROOM].threshold,
            8, 0.0, false, INFINITY, false, false,
            "format max / largest |activation| (min over layers and window), fires at < x; also the advisor's margin, >= 0 (8)"),
    KEY_INT("guard.headroom.window", MXP_STORE_I64, guard.rules[MXP_RULE_HEADROOM].window, 1, 1,
            1000000, "samples the headroom rule aggregates, 1..1000000 (1)"),
    KEY_ENUM("guard.headroom.action", guard.rules[MXP_RULE_HEADROOM].action, 1, kGuardActionChoices,
             "headroom action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_FLT("guard.underflow.threshold", MXP_STORE_F64, guard.rules[MXP_RULE_UNDERFLOW].threshold,
            0.05, 0.0, false, INFINITY, false, false,
            "largest per-layer fraction below the format's smallest normal (full scans), fires at > x; also the advisor's limit, >= 0 (0.05)"),
    KEY_INT("guard.underflow.window", MXP_STORE_I64, guard.rules[MXP_RULE_UNDERFLOW].window, 1, 1,
            1000000, "samples the underflow rule aggregates, 1..1000000 (1)"),
    KEY_ENUM("guard.underflow.action", guard.rules[MXP_RULE_UNDERFLOW].action, 1, kGuardActionChoices,
             "underflow action off|alert|fallback|rollback|fallback+rollback|stop (alert)"),
    KEY_ENUM("fault.kind", guard.fault.kind, MXP_FAULT_NONE, kFaultKindChoices,
             "fault injection: none|nan|inf|value|scale_weights (none)"),
    KEY_ENUM("fault.pass", guard.fault.pass, MXP_FAULT_FORWARD, kFaultPassChoices,
             "nan/inf/value into the layer's forward output or its backward gradient: "
             "forward|backward (forward)"),
    KEY_INT("fault.layer", MXP_STORE_I64, guard.fault.layer, 0, 0, MXP_MODEL_MAX_LAYERS - 1,
            "layer index the fault targets, 0..63 (0)"),
    KEY_INT("fault.step", MXP_STORE_I64, guard.fault.step, 1, 0, I32MAX,
            "first step (attempt count, 1-based; scale_weights: 0 = at start) (1)"),
    KEY_INT("fault.count", MXP_STORE_I64, guard.fault.count, 1, 0, I32MAX,
            "consecutive faulted steps, >= 0; 0 = every step from fault.step (1)"),
    KEY_INT("fault.elements", MXP_STORE_I64, guard.fault.elements, 1, 1, I32MAX,
            "values poisoned per pass, >= 1 (1)"),
    KEY_FLT("fault.value", MXP_STORE_F64, guard.fault.value, 1e5, -INFINITY, false, INFINITY,
            false, false, "value written by kind=value; factor of kind=scale_weights (100000)"),
    /* dist.*: data parallelism under mpirun (docs/scaling.md) */
    KEY_ENUM("dist.allreduce_dtype", dist.allreduce_dtype, MXP_WIRE_F32, kWireChoices,
             "gradient all-reduce on the wire: fp32|bf16; bf16 halves the traffic and "
             "rounds each gradient to 8 significant bits (fp32)"),
    KEY_INT("dist.check_every", MXP_STORE_I64, dist.check_every, 0, 0, I32MAX,
            "verify weights/optimizer/scale are identical on all ranks every N steps "
            "(and on the first), >= 0; 0 = first step only (0)"),
    KEY_INT("model.hidden", MXP_STORE_I64, hidden, 256, 1, 16384,
            "hidden units per layer, 1..16384 (256)"),
    KEY_INT("model.depth", MXP_STORE_I64, depth, 3, 1, (MXP_MODEL_MAX_LAYERS - 1) / 2,
            "hidden layers, 1..31 (3); 1..21 with model.layernorm=true (the model holds "
            "at most 64 layers)"),
    KEY_ENUM("model.activation", activation, MXP_LAYER_GELU, kActChoices,
             "activation relu|gelu|tanh (gelu)"),
    KEY_BOOL("model.layernorm", MXP_STORE_BOOL, OFF(layernorm), false,
             "layernorm after each hidden linear layer (false)"),
    KEY_STR("model.layers", layers, "none",
            "layer list replacing model.hidden/depth/activation/layernorm, e.g. "
            "[linear:512, gelu, layernorm, linear:512, gelu, linear]: linear:WIDTH, relu, gelu, "
            "tanh, layernorm, residual:N (the N items before it become a block y = x + f(x)), "
            "dropout:P (0 <= P < 1), ending with a bare linear (the target width); a YAML "
            "sequence works too; none = the shorthand (none)"),
    KEY_ENUM("model.head", head, MXP_LOSS_MSE, kHeadChoices,
             "regression head of world_model and regressor: deterministic (mean, MSE loss) | "
             "gaussian (mean and log-variance with learned soft bounds, Gaussian NLL loss; "
             "docs/world_models.md) (deterministic)"),
    KEY_BOOL("model.termination", MXP_STORE_BOOL, OFF(termination), false,
             "world_model: one more output predicting the episode's true termination (a "
             "logit trained with binary cross-entropy beside the state delta and reward); "
             "needs terminal flags in data.path (terminals, or dones with timeouts; "
             "docs/world_models.md) (false)"),
    KEY_STR("model.target_weights", target_weights, "none",
            "loss weight per target column of world_model and regressor: a list of "
            "non-negative finite numbers, not all 0, one per column (world model: S state "
            "deltas, the reward, with model.termination the flag), e.g. [1, 1, 0.5]; none = "
            "all 1 (docs/world_models.md) (none)"),
    KEY_INT("model.ensemble", MXP_STORE_I64, ensemble, 1, 1, MXP_MODEL_MAX_ENSEMBLE,
            "members of a world_model or regressor ensemble, 1..64, each trained on its own "
            "bootstrap of the data; predict gives the ensemble mean and the aleatoric and "
            "epistemic variances (docs/world_models.md) (1)"),
    KEY_INT("model.elites", MXP_STORE_I64, elites, 0, 0, MXP_MODEL_MAX_ENSEMBLE,
            "elite members of a model.ensemble=E: after each validation the K members with "
            "the lowest validation loss; evaluation, open-loop error and predict average over "
            "them (docs/world_models.md), 1..E; 0 = all E members (0)"),
    KEY_STR("model.init_from", init_from, "none",
            "safetensors file of initial weights (F32, BF16 or F16) named as PyTorch "
            "nn.Sequential's state_dict, layers.<i>.weight [out, in] and layers.<i>.bias; every "
            "tensor of the model, no other (none)"),
    KEY_ENUM("data.env", data.env, MXP_ENV_PENDULUM, kEnvChoices,
             "environment generating the replay data: pendulum|cartpole|ant|humanoid; "
             "ant and humanoid need a build with MuJoCo (pendulum)"),
    KEY_STR("data.mujoco_model", data.mujoco_model, "default",
            "MuJoCo XML model for data.env=ant|humanoid; default = the built-in ant, or "
            "/usr/share/mujoco/model/humanoid/humanoid.xml (libmujoco-samples) (default)"),
    KEY_INT("data.trajectories", MXP_STORE_I64, data.trajectories, 256, 2, I32MAX,
            "episodes in the replay buffer, >= 2 (256)"),
    KEY_INT("data.episode_length", MXP_STORE_I64, data.episode_len, 200, 1, I32MAX,
            "steps per episode, >= 1 (200)"),
    KEY_FLT("data.val_fraction", MXP_STORE_F64, data.val_fraction, 0.1, 0.0, true, 1.0, true,
            false, "share of trajectories (data.path: episodes, or rows without x_val/y_val) "
            "held out for validation, in (0, 1) (0.1)"),
    /* workloads (docs/workloads.md) */
    KEY_ENUM("model.workload", workload, MXP_WORKLOAD_WORLD_MODEL, kWorkloadChoices,
             "what train trains: world_model|classifier|gpt|regressor (world_model)"),
    {.name = "data.fashion_mnist_dir", .type = MXP_KEY_STRING, .store = MXP_STORE_STR,
     .offset = OFF(wl.fmnist_dir), .def_s = "/usr/share/datasets/fashion-mnist",
     .help = "classifier: directory of the Fashion-MNIST IDX files, plain or .gz "
             "(/usr/share/datasets/fashion-mnist, Debian dataset-fashion-mnist)"},
    {.name = "data.text_file", .type = MXP_KEY_STRING, .store = MXP_STORE_STR,
     .offset = OFF(wl.text_file), .def_s = "/usr/share/doc/jargon-text/jargon.txt.gz",
     .help = "gpt: training text, plain or .gz (/usr/share/doc/jargon-text/jargon.txt.gz, "
             "Debian jargon-text); the last data.val_fraction is held out"},
    KEY_STR("data.path", wl.data_path, "none",
            "world_model, classifier, regressor: the user's data, safetensors, NumPy .npz or "
            "HDF5 (D4RL/Minari; docs/data.md); none = built-in data (world_model: data.env; classifier: "
            "Fashion-MNIST); regressor needs it or arrays in memory (mxp_run_options.data, Python Run(data=)) (none)"),
    KEY_INT("data.train_subset", MXP_STORE_I64, wl.train_subset, 0, 0, I32MAX,
            "classifier: training images used; gpt: training windows per epoch; 0 = all (0)"),
    KEY_INT("data.test_subset", MXP_STORE_I64, wl.test_subset, 0, 0, I32MAX,
            "classifier: test images evaluated; gpt: validation windows; 0 = all (0)"),
    KEY_INT("gpt.layers", MXP_STORE_I64, wl.gpt_layers, 2, 1, 16,
            "gpt: transformer blocks, 1..16 (2)"),
    KEY_INT("gpt.heads", MXP_STORE_I64, wl.gpt_heads, 4, 1, 64,
            "gpt: attention heads, 1..64, dividing gpt.embd (4)"),
    KEY_INT("gpt.embd", MXP_STORE_I64, wl.gpt_embd, 128, 2, 4096,
            "gpt: embedding width, 2..4096, a multiple of gpt.heads (128)"),
    KEY_INT("gpt.context", MXP_STORE_I64, wl.gpt_context, 64, 2, 4096,
            "gpt: context length in characters, 2..4096 (64)"),
    KEY_FLT("gpt.embed_scale", MXP_STORE_F32, wl.gpt_embed_scale, 1.0, 0.0, true, 1e30, false,
            false, "gpt: multiplier of the token+position embeddings (the residual stream's "
            "input), > 0 (1); large values reproduce FP16 activation overflow"),
    KEY_INT("training.fp8.history_len", MXP_STORE_I32, fp8.history_len, 16, 1, 65536,
            "fp8 (emulated): amax history length per tensor, 1..65536 (16)"),
    KEY_ENUM("training.fp8.amax_algo", fp8.amax_algo, MXP_FP8_AMAX_MAX, kAmaxChoices,
             "fp8 (emulated): amax from the history: max|most_recent (max)"),
    KEY_INT("training.fp8.margin", MXP_STORE_I32, fp8.margin, 0, 0, 64,
            "fp8 (emulated): scale = (fp8_max / amax) / 2^margin, margin 0..64 (0)"),
    KEY_BOOL("checkpoint.enabled", MXP_STORE_BOOL, OFF(ckpt_enabled), true,
             "write checkpoints during `mixprec train` (true)"),
    KEY_INT("checkpoint.every_steps", MXP_STORE_I64, ckpt_every_steps, 1000, 0, INT64_MAX,
            "checkpoint every N optimizer steps, >= 0; 0 = off (1000)"),
    KEY_FLT("checkpoint.every_seconds", MXP_STORE_F64, ckpt_every_seconds, 0.0, 0.0, false,
            INFINITY, false, false, "checkpoint every T seconds, >= 0; 0 = off (0)"),
    KEY_INT("checkpoint.keep_last", MXP_STORE_I64, ckpt_keep_last, 3, 1, I32MAX,
            "checkpoints kept besides marked and newest healthy ones, >= 1 (3)"),
    {.name = "checkpoint.dir", .type = MXP_KEY_STRING, .store = MXP_STORE_STR,
     .offset = OFF(ckpt_dir), .def_s = "checkpoints",
     .help = "checkpoint directory; a relative path is relative to output.dir (checkpoints)"},
    {.name = "output.dir", .type = MXP_KEY_STRING, .store = MXP_STORE_STR,
     .offset = OFF(output_dir), .def_s = "runs/latest",
     .help = "run directory, non-empty, < 256 characters (unset: `train` makes a new "
             "runs/version_<N> and points the link runs/latest at it)"},
    KEY_ENUM("log.level", log_level, MXP_LOG_INFO, kLogChoices,
             "minimum log level debug|info|warn|error (info)"),
    KEY_ENUM("log.format", log_format, MXP_LOG_FORMAT_TEXT, kLogFormatChoices,
             "CLI log lines as text|json (text); also --log-format"),
    /* obs.*: observability (docs/observability.md) */
    KEY_BOOL("obs.http.enabled", MXP_STORE_BOOL, OFF(obs.http_enabled), false,
             "serve /metrics, the training API and the dashboard (false); also --serve"),
    KEY_STR("obs.http.address", obs.http_address, "127.0.0.1",
            "IP address the HTTP server binds to (127.0.0.1)"),
    KEY_INT("obs.http.port", MXP_STORE_I64, obs.http_port, 8080, 0, 65535,
            "HTTP port, 0..65535; 0 = any free port (8080)"),
    KEY_STR("obs.http.token_file", obs.token_file, "none",
            "file (mode 0600) holding the bearer token of control calls; none = no "
            "control API (none)"),
    KEY_INT("obs.http.max_connections", MXP_STORE_I64, obs.http_max_connections, 16, 1, 1024,
            "concurrent HTTP connections, 1..1024 (16)"),
    KEY_INT("obs.http.timeout_s", MXP_STORE_I64, obs.http_timeout_s, 10, 1, 3600,
            "seconds a client has for one whole HTTP exchange (request and answer), "
            "1..3600 (10)"),
    KEY_FLT("obs.http.linger_s", MXP_STORE_F64, obs.http_linger_s, 0.0, 0.0, false, 86400.0,
            false, false, "keep serving this many seconds after the run ends, 0..86400 (0)"),
    KEY_BOOL("obs.store.enabled", MXP_STORE_BOOL, OFF(obs.store_enabled), true,
             "write the SQLite run store and JSONL event log into output.dir (true)"),
    KEY_STR("obs.store.db", obs.store_db, "metrics.db",
            "SQLite database file, relative to output.dir (metrics.db)"),
    KEY_STR("obs.store.events", obs.store_events, "events.jsonl",
            "JSONL event log, relative to output.dir (events.jsonl)"),
    KEY_INT("obs.store.flush_steps", MXP_STORE_I64, obs.flush_steps, 100, 1, I32MAX,
            "commit the store at least every this many steps, >= 1 (100)"),
    KEY_FLT("obs.store.flush_seconds", MXP_STORE_F64, obs.flush_seconds, 2.0, 0.0, true,
            3600.0, false, false, "and at least every this many seconds, in (0, 3600] (2)"),
    KEY_INT("obs.history_max", MXP_STORE_I64, obs.history_max, 262144, 16, I32MAX,
            "step rows kept in memory for /api/metrics/export, >= 16 (262144)"),
    KEY_FLT("obs.fp32_baseline_loss", MXP_STORE_F64, obs.fp32_baseline_loss, 0.0, 0.0, false,
            INFINITY, false, false,
            "FP32 reference loss for mixprec_fp32_divergence_ratio, >= 0; 0 = unset (0)"),
};

#define NKEYS ((int)(sizeof(kKeys) / sizeof(kKeys[0])))

int mxp_config_num_keys(void) { return NKEYS; }

const mxp_config_key *mxp_config_key_at(int i) {
    return (i >= 0 && i < NKEYS) ? &kKeys[i] : NULL;
}

const char *mxp_config_key_name(int i) {
    return (i >= 0 && i < NKEYS) ? kKeys[i].name : NULL;
}

const char *mxp_config_key_help(int i) {
    return (i >= 0 && i < NKEYS) ? kKeys[i].help : NULL;
}

int mxp_config_key_find(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(kKeys[i].name, name) == 0) return i;
    return -1;
}

bool mxp_config_key_is_section(const char *prefix, size_t len) {
    for (int i = 0; i < NKEYS; i++)
        if (strncmp(kKeys[i].name, prefix, len) == 0 && kKeys[i].name[len] == '.') return true;
    return false;
}

/* Levenshtein distance of a[0..la) and b[0..lb), both at most 127 long. */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    int row[128];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Other frameworks' names for keys (PyTorch, Lightning, Hugging Face),
 * matched against the last component of an unknown key. */
static const struct {
    const char *alias, *key;
} kKeySynonyms[] = {
    {"learning_rate", "training.lr"},
    {"gradient_accumulation_steps", "training.grad_accum_steps"},
    {"accumulate_grad_batches", "training.grad_accum_steps"},
    {"grad_accum", "training.grad_accum_steps"},
    {"max_epochs", "training.epochs"},
    {"num_epochs", "training.epochs"},
    {"num_train_epochs", "training.epochs"},
    {"per_device_train_batch_size", "training.batch_size"},
    {"train_batch_size", "training.batch_size"},
    {"amp", "training.precision"},
    {"output_dir", "output.dir"},
    {"default_root_dir", "output.dir"},
    {"hidden_size", "model.hidden"},
    {"num_layers", "model.depth"},
};

/* Suggest the nearest key: another framework's name for it
 * ("learning_rate", "training.learning_rate" -> "training.lr"), a key whose
 * last component the name or its last component is ("lr", "optim.lr" ->
 * "training.lr"), else the nearest within max(2, len/4) edits. */
const char *mxp_config_key_suggest(const char *name) {
    if (!name) return NULL;
    size_t la = strlen(name);
    if (la == 0 || la > 127) return NULL;
    const char *last = strrchr(name, '.');
    last = last ? last + 1 : name;
    for (size_t i = 0; i < sizeof kKeySynonyms / sizeof kKeySynonyms[0]; i++)
        if (strcmp(last, kKeySynonyms[i].alias) == 0 &&
            mxp_config_key_find(kKeySynonyms[i].key) >= 0)
            return kKeySynonyms[i].key;
    for (int i = 0; last != name && i < NKEYS; i++) {
        const char *dot = strrchr(kKeys[i].name, '.');
        if (dot && strcmp(dot + 1, last) == 0) return kKeys[i].name;
    }
    const char *best = NULL;
    int best_d = (int)(la / 4 > 2 ? la / 4 : 2) + 1;
    for (int i = 0; i < NKEYS; i++) {
        const char *k = kKeys[i].name;
        size_t lb = strlen(k);
        const char *dot = strrchr(k, '.');
        if (dot && strcmp(dot + 1, name) == 0) return k;
        int d = edit_distance(name, la, k, lb);
        if (d < best_d) {
            best_d = d;
            best = k;
        }
    }
    return best;
}

static const char *const kSourceNames[] = {"default", "file", "env", "cli", "kill-switch"};
static_assert(sizeof(kSourceNames) / sizeof(kSourceNames[0]) == MXP_SRC_COUNT,
              "one name per source");

const char *mxp_config_source_name(mxp_config_source s) {
    return ((unsigned)s < MXP_SRC_COUNT) ? kSourceNames[s] : "unknown";
}
