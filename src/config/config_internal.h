/* src/config/config_internal.h: the key table and the builder's state,
 * shared by the files of the config module (keys.c, parse_value.c,
 * builder.c, env.c, yaml.c, resolve.c, print.c). Not a public header.
 *
 * Every configuration key is one row of the table in keys.c: its dotted
 * name, value type, where it is stored in mxp_config (storage kind + byte
 * offset), default, accepted range or values, and help text. The builder
 * holds one mxp_key_value per row (current value + provenance); resolve()
 * copies the values into an mxp_config through the offsets and then fills
 * the derived fields (precision, seeds, scaler.enabled).
 */
#ifndef MIXPREC_CONFIG_INTERNAL_H
#define MIXPREC_CONFIG_INTERNAL_H

#include <mixprec/config.h>

typedef enum mxp_key_type {
    MXP_KEY_BOOL,      /* true/false/1/0/yes/no/on/off, any case */
    MXP_KEY_INT,       /* decimal integer, range [imin, imax] */
    MXP_KEY_FLOAT,     /* strtod number, range from fmin/fmax (+ open flags) */
    MXP_KEY_ENUM,      /* one of `choices` (case-insensitive) */
    MXP_KEY_STRING,    /* non-empty, shorter than MXP_CONFIG_STR_MAX */
    MXP_KEY_PRECISION, /* mxp_precision_parse */
    MXP_KEY_TYPE_COUNT
} mxp_key_type;

/* How a value is written into mxp_config at `offset`. */
typedef enum mxp_key_store {
    MXP_STORE_NONE, /* not stored directly: resolve() derives the field */
    MXP_STORE_BOOL,
    MXP_STORE_I32,
    MXP_STORE_I64,
    MXP_STORE_U64,
    MXP_STORE_F32,
    MXP_STORE_F64,
    MXP_STORE_ENUM, /* an int-sized C enum */
    MXP_STORE_STR,  /* char[MXP_CONFIG_STR_MAX] */
    MXP_STORE_COUNT
} mxp_key_store;

typedef struct mxp_key_choice {
    const char *name;
    int value;
    bool alias; /* accepted on input, never printed */
} mxp_key_choice;

typedef struct mxp_config_key {
    const char *name;
    mxp_key_type type;
    mxp_key_store store;
    size_t offset;             /* into mxp_config (unused for STORE_NONE) */
    /* default (the member matching `type`) */
    bool def_b;
    int64_t def_i;             /* INT (U64 store: must be >= 0) */
    double def_d;
    int def_e;                 /* ENUM and PRECISION */
    const char *def_s;
    /* accepted values */
    int64_t imin, imax;        /* INT with I32/I64 store; U64: [imin, UINT64_MAX] */
    double fmin, fmax;         /* FLOAT: -INFINITY / INFINITY for no bound */
    bool fmin_open, fmax_open; /* bound excluded */
    bool allow_inf;            /* FLOAT: "inf" accepted (fmax must be INFINITY) */
    const mxp_key_choice *choices;
    int nchoices;
    const char *help;
} mxp_config_key;

/* Current value of one key plus where it came from. */
typedef struct mxp_key_value {
    bool b;
    int64_t i;
    uint64_t u;
    double d;
    int e;
    char s[MXP_CONFIG_STR_MAX];
    mxp_config_source source;
    const char *origin; /* FILE: builder-owned path; ENV/KILL_SWITCH: variable name */
    int line;           /* FILE: 1-based line of the value; else 0 */
} mxp_key_value;

typedef struct mxp_config_path {
    struct mxp_config_path *next;
    char *path;
} mxp_config_path;

struct mxp_config_builder {
    int n;                  /* == mxp_config_num_keys() */
    mxp_key_value *vals;    /* [n] */
    bool kill_switch;       /* sticky once set */
    const char *kill_var;   /* static name of the variable that set it */
    char kill_text[32];     /* its value, for messages */
    mxp_config_path *paths; /* interned file paths (provenance) */
};

/* ---- keys.c ------------------------------------------------------------- */
const mxp_config_key *mxp_config_key_at(int i);
/* Edit-distance closest key name to `name`, or NULL when none is close. */
const char *mxp_config_key_suggest(const char *name);
/* True when some key name starts with `prefix` followed by '.'. */
bool mxp_config_key_is_section(const char *prefix, size_t len);

/* ---- parse_value.c ------------------------------------------------------ */
/* Boolean words: true/false/1/0/yes/no/on/off, case-insensitive. */
bool mxp_config_parse_bool(const char *s, bool *out);
/* Accepted values of k as a phrase: "an integer >= 1", "one of: a, b". */
void mxp_config_key_accepted(const mxp_config_key *k, char *buf, size_t n);
/* Parse `text` as a value of k into v (value members only; provenance is
 * untouched). On failure write "must be ..." into why and return false. */
bool mxp_config_value_parse(const mxp_config_key *k, const char *text,
                            mxp_key_value *v, char *why, size_t n);
/* Default of k into v (source MXP_SRC_DEFAULT). */
void mxp_config_value_default(const mxp_config_key *k, mxp_key_value *v);
/* Canonical text of v ("true", "0.001", "inf", "adamw", ...). */
void mxp_config_value_format(const mxp_config_key *k, const mxp_key_value *v,
                             char *buf, size_t n);
/* Write v into the field of c that k names (no-op for STORE_NONE). */
void mxp_config_value_store(const mxp_config_key *k, const mxp_key_value *v,
                            mxp_config *c);
/* Copy s into buf for an error message: at most ~64 characters (then
 * "..."), control characters replaced by '?'. */
void mxp_config_excerpt(const char *s, char *buf, size_t n);

/* ---- builder.c ---------------------------------------------------------- */
/* A staging copy of b's values (all-or-nothing apply); NULL on OOM. */
mxp_key_value *mxp_config_stage_begin(const mxp_config_builder *b);
/* Commit (ok) or drop the staging copy; frees it either way. */
void mxp_config_stage_end(mxp_config_builder *b, mxp_key_value *stage, bool ok);
/* Intern a path string for provenance; NULL on OOM. */
const char *mxp_config_intern_path(mxp_config_builder *b, const char *path);
/* The "unknown key 'x' (did you mean 'y'?)" text into buf. */
void mxp_config_unknown_key_text(const char *name, char *buf, size_t n);

/* ---- resolve.c ---------------------------------------------------------- */
/* The value training.precision=auto stores (guard advisor, issue 4). */
#define MXP_PRECISION_AUTO_VALUE ((int)MXP_PRECISION_COUNT)

typedef struct mxp_precision_resolution {
    mxp_precision mode;
    bool automatic;           /* training.precision=auto: mode is the fp32 placeholder */
    mxp_config_source source; /* of the deciding value */
    const char *origin;       /* its file path / variable, or NULL */
    char why[160];
} mxp_precision_resolution;

/* The precision the current values select (see config.h), and why. */
void mxp_config_resolve_precision(const mxp_config_builder *b,
                                  mxp_precision_resolution *r);
/* Whether the mode's default policy turns dynamic loss scaling on. */
bool mxp_config_default_loss_scaling(mxp_precision mode);
/* Provenance tag: "default", "file:PATH", "env:VAR", "cli", "kill-switch:VAR". */
void mxp_config_source_text(const mxp_key_value *v, char *buf, size_t n);

#endif /* MIXPREC_CONFIG_INTERNAL_H */
