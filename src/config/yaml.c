/* src/config/yaml.c: configuration from a YAML file, via libyaml's
 * document loader.
 *
 * The top level is a mapping. Keys may be nested mappings
 * (training: {mixed_precision: {enabled: true}}) or dotted at any level
 * (training.mixed_precision.enabled: true); each leaf must be a scalar, or
 * for string keys a sequence of scalars, joined as "a, b, c".
 * Errors name PATH:LINE:COLUMN (1-based): libyaml's problem text for
 * malformed YAML; the key, value and accepted values for bad values; the
 * key (with a suggestion) for unknown keys; duplicates within one file are
 * errors too. A missing or unreadable file is MXP_ERR_IO naming the path.
 * Entry point: mxp_config_apply_file.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "config/config_internal.h"

#define MAX_DEPTH 32

typedef struct yaml_ctx {
    yaml_document_t *doc;
    const char *path;   /* interned: provenance of every value set */
    mxp_key_value *vals;
    int *first_line;    /* [n]: line that set the key in this file, 0 = not yet */
    mxp_error *err;
} yaml_ctx;

/* "PATH:LINE:COL: " prefix for an error at node's start. */
static void where(const yaml_ctx *c, const yaml_node_t *node, char *buf, size_t n) {
    snprintf(buf, n, "%.200s:%zu:%zu", c->path, node->start_mark.line + 1,
             node->start_mark.column + 1);
}

static const char *node_kind(const yaml_node_t *node) {
    switch (node->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a sequence";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "an empty node";
    }
}

static bool is_yaml_null(const yaml_node_t *node) {
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *s = (const char *)node->data.scalar.value;
    return *s == '\0' || strcmp(s, "~") == 0 || strcasecmp(s, "null") == 0;
}

/* A sequence of scalars (string keys, e.g. model.layers: [linear:64, gelu,
 * linear]) joined as "a, b, c" into buf [n]; false when an item is not a
 * scalar or the text does not fit. */
static bool join_sequence(const yaml_ctx *c, const yaml_node_t *seq, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        const yaml_node_t *item = yaml_document_get_node(c->doc, *it);
        if (!item || item->type != YAML_SCALAR_NODE) return false;
        int w = snprintf(buf + k, n - k, "%s%s", k ? ", " : "",
                         (const char *)item->data.scalar.value);
        if (w < 0 || (size_t)w >= n - k) return false;
        k += (size_t)w;
    }
    return true;
}

/* Set the leaf key `name` (index idx) from the scalar value node. */
static mxp_status set_leaf(yaml_ctx *c, const char *name, int idx, const yaml_node_t *key_node,
                           const yaml_node_t *val) {
    char at[260], why[320], ex[80], acc[200];
    const mxp_config_key *k = mxp_config_key_at(idx);
    int line = (int)val->start_mark.line + 1;
    if (c->first_line[idx]) {
        where(c, key_node, at, sizeof at);
        return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: duplicate key '%s' (first set at line %d)",
                             at, name, c->first_line[idx]);
    }
    char joined[MXP_CONFIG_STR_MAX];
    if (val->type == YAML_SEQUENCE_NODE && k->type == MXP_KEY_STRING) {
        if (!join_sequence(c, val, joined, sizeof joined)) {
            where(c, val, at, sizeof at);
            return mxp_error_set(c->err, MXP_ERR_CONFIG,
                                 "%s: %s: a sequence value must hold scalars and join to fewer "
                                 "than %d characters",
                                 at, name, MXP_CONFIG_STR_MAX);
        }
    } else if (val->type != YAML_SCALAR_NODE) {
        where(c, val, at, sizeof at);
        mxp_config_key_accepted(k, acc, sizeof acc);
        return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: %s: expected a scalar value (%s), got %s",
                             at, name, acc, node_kind(val));
    }
    const char *text = val->type == YAML_SEQUENCE_NODE ? joined
                                                        : (const char *)val->data.scalar.value;
    if (val->type == YAML_SCALAR_NODE && strlen(text) != val->data.scalar.length) {
        where(c, val, at, sizeof at);
        return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: %s: value contains a NUL character", at,
                             name);
    }
    if (val->type == YAML_SCALAR_NODE && is_yaml_null(val)) {
        where(c, val, at, sizeof at);
        mxp_config_key_accepted(k, acc, sizeof acc);
        return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: %s has no value (YAML null); must be %s",
                             at, name, acc);
    }
    mxp_key_value v = c->vals[idx];
    if (!mxp_config_value_parse(k, text, &v, why, sizeof why)) {
        where(c, val, at, sizeof at);
        mxp_config_excerpt(text, ex, sizeof ex);
        return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: %s=%s: %s", at, name, ex, why);
    }
    v.source = MXP_SRC_FILE;
    v.origin = c->path;
    v.line = line;
    c->vals[idx] = v;
    c->first_line[idx] = line;
    return MXP_OK;
}

/* Walk a mapping whose keys are prefixed by `prefix` ("" at top level). */
static mxp_status walk_mapping(yaml_ctx *c, const yaml_node_t *map, const char *prefix,
                               int depth) {
    char at[260], why[320];
    if (depth > MAX_DEPTH) {
        where(c, map, at, sizeof at);
        return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: mappings nested deeper than %d levels",
                             at, MAX_DEPTH);
    }
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
         pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *kn = yaml_document_get_node(c->doc, pair->key);
        yaml_node_t *vn = yaml_document_get_node(c->doc, pair->value);
        if (!kn || !vn) continue;
        if (kn->type != YAML_SCALAR_NODE) {
            where(c, kn, at, sizeof at);
            return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: a key must be a scalar, got %s", at,
                                 node_kind(kn));
        }
        const char *ks = (const char *)kn->data.scalar.value;
        char name[MXP_CONFIG_STR_MAX];
        int w = snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", ks);
        if (w < 0 || (size_t)w >= sizeof name || strlen(ks) != kn->data.scalar.length) {
            where(c, kn, at, sizeof at);
            mxp_config_excerpt(ks, why, 80);
            return mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: unknown key '%s...' (too long)", at,
                                 why);
        }
        int idx = mxp_config_key_find(name);
        mxp_status st;
        if (idx >= 0) {
            st = set_leaf(c, name, idx, kn, vn);
        } else if (mxp_config_key_is_section(name, strlen(name))) {
            if (vn->type == YAML_MAPPING_NODE) {
                st = walk_mapping(c, vn, name, depth + 1);
            } else {
                where(c, vn, at, sizeof at);
                st = mxp_error_set(c->err, MXP_ERR_CONFIG,
                                   "%s: '%s' is a section: expected a mapping of its keys, got %s",
                                   at, name, node_kind(vn));
            }
        } else {
            where(c, kn, at, sizeof at);
            mxp_config_unknown_key_text(name, why, sizeof why);
            st = mxp_error_set(c->err, MXP_ERR_CONFIG, "%s: %s", at, why);
        }
        if (st != MXP_OK) return st;
    }
    return MXP_OK;
}

/* Malformed-YAML error from the parser state. */
static mxp_status parse_error(const yaml_parser_t *p, const char *path, mxp_error *err) {
    const char *problem = p->problem ? p->problem : "unknown error";
    if (p->error == YAML_READER_ERROR)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%.200s: malformed YAML at byte %zu: %s", path,
                             p->problem_offset, problem);
    if (p->error == YAML_MEMORY_ERROR)
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%.200s: out of memory reading YAML",
                             path);
    if (p->context)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%.200s:%zu:%zu: malformed YAML: %s %s", path,
                             p->problem_mark.line + 1, p->problem_mark.column + 1, p->context,
                             problem);
    return mxp_error_set(err, MXP_ERR_CONFIG, "%.200s:%zu:%zu: malformed YAML: %s", path,
                         p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

/* Load the first document of f and apply it to the staging values. */
static mxp_status load(mxp_config_builder *b, FILE *f, const char *path, mxp_key_value *stage,
                       int *first_line, mxp_error *err) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "%.200s: out of memory reading YAML",
                             path);
    yaml_parser_set_input_file(&parser, f);
    mxp_status st = MXP_OK;
    if (!yaml_parser_load(&parser, &doc)) {
        st = parse_error(&parser, path, err);
        yaml_parser_delete(&parser);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    const char *ipath = mxp_config_intern_path(b, path);
    if (!ipath) st = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "config file: out of memory");
    yaml_ctx c = {&doc, ipath, stage, first_line, err};
    if (st == MXP_OK && root) {
        if (root->type == YAML_MAPPING_NODE) {
            st = walk_mapping(&c, root, "", 0);
        } else if (!(root->type == YAML_SCALAR_NODE && is_yaml_null(root))) {
            char at[260];
            where(&c, root, at, sizeof at);
            st = mxp_error_set(err, MXP_ERR_CONFIG,
                               "%s: the top level must be a mapping of keys to values, got %s", at,
                               node_kind(root));
        }
    }
    yaml_document_delete(&doc);
    if (st == MXP_OK && root) {
        /* A second document is not part of the format. */
        if (!yaml_parser_load(&parser, &doc)) {
            st = parse_error(&parser, path, err);
        } else {
            yaml_node_t *extra = yaml_document_get_root_node(&doc);
            if (extra)
                st = mxp_error_set(err, MXP_ERR_CONFIG,
                                   "%.200s:%zu:%zu: more than one YAML document; "
                                   "accepted: a single mapping",
                                   path, extra->start_mark.line + 1, extra->start_mark.column + 1);
            yaml_document_delete(&doc);
        }
    }
    yaml_parser_delete(&parser);
    return st;
}

mxp_status mxp_config_apply_file(mxp_config_builder *b, const char *path, mxp_error *err) {
    if (!b || !path)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "config file: builder or path is NULL");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot open config file '%.200s': %s", path,
                             strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return mxp_error_set(err, MXP_ERR_IO, "config file '%.200s' is a directory", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return mxp_error_set(err, MXP_ERR_IO, "cannot open config file '%.200s': %s", path,
                             strerror(errno));
    mxp_key_value *stage = mxp_config_stage_begin(b);
    int *first_line = mxp_calloc((size_t)b->n, sizeof *first_line);
    mxp_status st;
    if (!stage || !first_line)
        st = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "config file: out of memory");
    else
        st = load(b, f, path, stage, first_line, err);
    if (st == MXP_OK && ferror(f))
        st = mxp_error_set(err, MXP_ERR_IO, "error reading config file '%.200s'", path);
    fclose(f);
    if (stage) mxp_config_stage_end(b, stage, st == MXP_OK);
    mxp_free(first_line);
    return st;
}
