/* amp/scaler_internal.h: the loss scaler's rule view, for a backend that
 * runs the rule itself (internal; amp/scaler.c, amp/scaler_groups.c).
 *
 * The trainer stages a scaler's rule and state into the step's control
 * block (backend/step_ctl.h); the backend's decide steps the rule there
 * (backend/numerics/scaler_rule.h); after the step's report the trainer
 * hands the state and event back with mxp_scaler_adopt, which applies what
 * only the host does: the at-min policy (ERROR's message, FALLBACK's flag)
 * and the log line. mxp_scaler_update is rule + adopt on the host, so both
 * roads give the same state and event bit for bit.
 */
#ifndef MIXPREC_AMP_SCALER_INTERNAL_H
#define MIXPREC_AMP_SCALER_INTERNAL_H

#include <mixprec/amp.h>

#include "backend/numerics/scaler_rule.h"

/* The rule (config resolved: floor) and the current state of s. */
mxp_scaler_rule mxp_scaler_rule_of(const mxp_scaler *s);
mxp_scaler_rule_state mxp_scaler_rule_state_of(const mxp_scaler *s);

/* s takes the state *st the rule left and the rule's event *re: ev (may be
 * NULL) as mxp_scaler_update's; MXP_ERR_NONFINITE under the ERROR policy
 * when the event is at_min (the state is taken in any case). */
mxp_status mxp_scaler_adopt(mxp_scaler *s, const mxp_scaler_rule_state *st,
                            const mxp_scaler_rule_event *re, mxp_scaler_event *ev,
                            mxp_error *err);

/* Every group i takes st[i] / re[i] by outcome[i] (HOLD: untouched, st and
 * re not read); *ev and the errors as mxp_scaler_groups_update's. */
mxp_status mxp_scaler_groups_adopt(mxp_scaler_groups *g, const mxp_group_outcome *outcome,
                                   const mxp_scaler_rule_state *st,
                                   const mxp_scaler_rule_event *re, mxp_scaler_event *ev,
                                   mxp_error *err);

#endif /* MIXPREC_AMP_SCALER_INTERNAL_H */
