/* train/optim_config.c: optimizer and trainer configuration defaults, the
 * optimizer-kind name table and learning-rate schedules.
 * Entry points: mxp_optim_config_default, mxp_trainer_config_default,
 * mxp_optim_kind_name, mxp_optim_kind_parse, mxp_lr_at. */
#include <mixprec/train.h>

#include <assert.h>
#include <math.h>
#include <string.h>

static const char *const optim_names[] = {"adamw", "sgd"};
static_assert(sizeof optim_names / sizeof optim_names[0] == MXP_OPTIM_KIND_COUNT,
              "optim_names must cover mxp_optim_kind");

const char *mxp_optim_kind_name(mxp_optim_kind k) {
    if ((unsigned)k >= MXP_OPTIM_KIND_COUNT) return "unknown";
    return optim_names[k];
}

mxp_status mxp_optim_kind_parse(const char *s, mxp_optim_kind *out, mxp_error *err) {
    for (int k = 0; s && k < MXP_OPTIM_KIND_COUNT; k++) {
        if (strcmp(s, optim_names[k]) == 0) {
            *out = (mxp_optim_kind)k;
            return MXP_OK;
        }
    }
    return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                         "unknown optimizer '%s'; accepted: adamw, sgd", s ? s : "(null)");
}

mxp_optim_config mxp_optim_config_default(void) {
    mxp_optim_config c = {
        .kind = MXP_OPTIM_ADAMW,
        .lr = 1e-3f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.0f,
        .momentum = 0.9f,
        .nesterov = false,
    };
    return c;
}

mxp_trainer_config mxp_trainer_config_default(void) {
    mxp_trainer_config c = {
        .scaler = mxp_scaler_config_default(),
        .scaler_override = false,
        .optim = mxp_optim_config_default(),
        .clip_grad_norm = 1.0f,
        .grad_accum_steps = 1,
        .seed = 1234,
        .near_overflow_frac = 0.125f,
    };
    return c;
}

float mxp_lr_at(mxp_lr_schedule k, float lr, float min_ratio, int64_t s, int64_t n) {
    if (k != MXP_LR_COSINE || n <= 1) return lr;
    double frac = (double)s / (double)n;
    double m = (double)min_ratio;
    return (float)((double)lr * (m + (1.0 - m) * 0.5 * (1.0 + cos(M_PI * frac))));
}
