/* src/config/keys.c: the configuration key table (one row per dotted key:
 * type, storage in mxp_config, default, accepted values, help) and the
 * name-level queries on it.
 *
 * Entry points: mxp_config_num_keys, mxp_config_key_name, mxp_config_key_help,
 * mxp_config_key_find, mxp_config_source_name; internal mxp_config_key_at,
 * mxp_config_key_suggest, mxp_config_key_is_section.
 * Defaults follow DESIGN.md (FP32, safe by default) and the GradScaler
 * defaults of amp.h (65536, 2.0, 0.5, 2000).
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

static const mxp_key_choice kActChoices[] = {
    {"relu", MXP_LAYER_RELU, false},
    {"gelu", MXP_LAYER_GELU, false},
    {"tanh", MXP_LAYER_TANH, false},
};

static const mxp_key_choice kEnvChoices[] = {
    {"pendulum", MXP_ENV_PENDULUM, false},
    {"cartpole", MXP_ENV_CARTPOLE, false},
};
static_assert(MXP_ENV_KIND_COUNT == 2, "update kEnvChoices");

static const mxp_key_choice kLogChoices[] = {
    {"debug", MXP_LOG_DEBUG, false},
    {"info", MXP_LOG_INFO, false},
    {"warn", MXP_LOG_WARN, false},
    {"error", MXP_LOG_ERROR, false},
    {"warning", MXP_LOG_WARN, true},
};
static_assert(MXP_LOG_LEVEL_COUNT == 4, "update kLogChoices");

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

/* A cap of INT32_MAX on sizes keeps any product of two of them in int64. */
#define I32MAX ((int64_t)INT32_MAX)

static const mxp_config_key kKeys[] = {
    {.name = "training.precision", .type = MXP_KEY_PRECISION, .store = MXP_STORE_NONE,
     .def_e = MXP_PRECISION_FP32,
     .help = "precision mode fp32|mixed_bf16|mixed_fp16|bf16|fp16|fp8; unset: chosen by "
             "training.mixed_precision.* (fp32 when disabled)"},
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
    KEY_FLT("training.near_overflow_fraction", MXP_STORE_F32, trainer.near_overflow_frac, 0.125,
            0.0, true, 1.0, false, false,
            "a scaled grad is near overflow at >= this fraction of the dtype max, "
            "in (0, 1] (0.125)"),
    KEY_INT("model.hidden", MXP_STORE_I64, hidden, 256, 1, I32MAX,
            "hidden units per layer, >= 1 (256)"),
    KEY_INT("model.depth", MXP_STORE_I64, depth, 3, 1, (MXP_MODEL_MAX_LAYERS - 1) / 2,
            "hidden layers, >= 1 (3); the model holds at most 64 layers"),
    KEY_ENUM("model.activation", activation, MXP_LAYER_GELU, kActChoices,
             "activation relu|gelu|tanh (gelu)"),
    KEY_BOOL("model.layernorm", MXP_STORE_BOOL, OFF(layernorm), false,
             "layernorm after each hidden linear layer (false)"),
    KEY_ENUM("data.env", data.env, MXP_ENV_PENDULUM, kEnvChoices,
             "environment generating the replay data: pendulum|cartpole (pendulum)"),
    KEY_INT("data.trajectories", MXP_STORE_I64, data.trajectories, 256, 2, I32MAX,
            "episodes in the replay buffer, >= 2 (256)"),
    KEY_INT("data.episode_length", MXP_STORE_I64, data.episode_len, 200, 1, I32MAX,
            "steps per episode, >= 1 (200)"),
    KEY_FLT("data.val_fraction", MXP_STORE_F64, data.val_fraction, 0.1, 0.0, true, 1.0, true,
            false, "share of trajectories held out for validation, in (0, 1) (0.1)"),
    {.name = "output.dir", .type = MXP_KEY_STRING, .store = MXP_STORE_STR,
     .offset = OFF(output_dir), .def_s = "runs/latest",
     .help = "run directory, non-empty, < 256 characters (runs/latest)"},
    KEY_ENUM("log.level", log_level, MXP_LOG_INFO, kLogChoices,
             "minimum log level debug|info|warn|error (info)"),
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

/* Suggest the nearest key when it is within max(2, len/4) edits, or when
 * the name is a key's last component ("lr" -> "training.lr"). */
const char *mxp_config_key_suggest(const char *name) {
    if (!name) return NULL;
    size_t la = strlen(name);
    if (la == 0 || la > 127) return NULL;
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
