/* src/config/print.c: print the configuration as YAML-like lines
 *   key: value  # default | file:PATH | env:VAR | cli | kill-switch:VAR
 * one per key in table order. training.precision shows the resolved mode and
 * why it was chosen; an unset training.loss_scale.enabled shows the mode's
 * default. Entry point: mxp_config_print.
 */
#include <stdio.h>

#include "config/config_internal.h"

void mxp_config_print(const mxp_config_builder *b, FILE *f) {
    if (!b || !f) return;
    mxp_precision_resolution r;
    mxp_config_resolve_precision(b, &r);
    for (int i = 0; i < b->n; i++) {
        const mxp_config_key *k = mxp_config_key_at(i);
        const mxp_key_value *v = &b->vals[i];
        char value[2 * MXP_CONFIG_STR_MAX], tag[MXP_CONFIG_STR_MAX + 32];
        if (k->type == MXP_KEY_PRECISION) {
            mxp_key_value src = {.source = r.source, .origin = r.origin};
            mxp_config_source_text(&src, tag, sizeof tag);
            fprintf(f, "%s: %s  # %s (%s)\n", k->name, mxp_precision_name(r.mode), tag, r.why);
            continue;
        }
        mxp_config_value_format(k, v, value, sizeof value);
        mxp_config_source_text(v, tag, sizeof tag);
        if (k->type == MXP_KEY_BOOL && k->store == MXP_STORE_NONE &&
            v->source == MXP_SRC_DEFAULT) {
            fprintf(f, "%s: %s  # default (of precision %s)\n", k->name,
                    mxp_config_default_loss_scaling(r.mode) ? "true" : "false",
                    mxp_precision_name(r.mode));
            continue;
        }
        fprintf(f, "%s: %s  # %s\n", k->name, value, tag);
    }
}
