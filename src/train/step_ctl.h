/* train/step_ctl.h: the step controller, the one owner of precision
 * switches (docs/design.md "Who changes precision"). Not a public header.
 *
 * Requesters only ask: the guard (fallback, a second rollback, the opt-in
 * retry), the operator (SIGUSR1 / mxp_guard_request_fp32, the control API
 * over HTTP, Python, a front end through mxp_run_request_precision), the
 * advisor (precision: auto), the scaler's at-minimum policy and the
 * data-parallel agreement. A request is a pending (mode, source, reason);
 * when two arrive before one boundary the higher priority keeps it:
 *
 *   0 the kill switch: SIGUSR1, or an operator request for fp32
 *   1 the guard
 *   2 the scaler's at-minimum fallback
 *   3 an operator request for another mode
 *   4 the advisor
 *
 * and at equal priority the newer one. The controller applies the pending
 * request at the step boundary (step_ctl_boundary), never inside a step:
 * the new policy, the loss scaler and every per-layer scaler group
 * restarted at the initial scale, the switch counted, one log record and
 * one decision record (step_ctl_last) per decision. Who reaches the
 * boundary: a run (mxp_run_train: after the step's guard verdict, progress
 * and observer, before the checkpoint); without a run, the guard
 * (before_step and the end of after_step) or, without a guard, the end of
 * mxp_trainer_step. The data-parallel agreement and the advisor run the
 * same boundary at once (both happen between steps).
 *
 * The trainer is in one of three phases: idle (between steps), in a step,
 * or stopped (a guard rule stopped the run). A boundary in a step and a
 * step on a stopped trainer are refused with MXP_ERR_STATE.
 */
#ifndef MIXPREC_STEP_CTL_H
#define MIXPREC_STEP_CTL_H

#include <mixprec/train.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum step_source {
    STEP_SRC_SIGNAL,  /* SIGUSR1 or mxp_guard_request_fp32: fp32 (guards listen) */
    STEP_SRC_GUARD,   /* a guard rule's fallback (also after a second rollback), its retry */
    STEP_SRC_SCALER,  /* the loss scale stuck at its minimum, scaler.at_min = fallback */
    STEP_SRC_REQUEST, /* mxp_run_request_precision: control API (HTTP), Python, a front end */
    STEP_SRC_ADVISOR, /* precision: auto, before the first step */
    STEP_SRC_DIST,    /* a data-parallel rank follows rank 0 */
    STEP_SRC_DIRECT,  /* mxp_trainer_switch_precision/_set_precision called by a program */
    STEP_SRC_COUNT
} step_source;

typedef enum step_phase { STEP_IDLE, STEP_IN_STEP, STEP_STOPPED } step_phase;

/* Who reaches the boundary: the outermost step driver. */
typedef enum step_owner { STEP_OWNER_TRAINER, STEP_OWNER_GUARD, STEP_OWNER_RUN } step_owner;

#define STEP_REASON_MAX 96

/* One decision taken at a boundary. */
typedef struct step_decision {
    uint64_t serial; /* decisions so far, this one included (0: none yet) */
    step_source source;
    mxp_precision from, to;
    bool switched;      /* false: already in `to`, or the switch was refused */
    int64_t after_step; /* the trainer's training_steps when applied */
    char reason[STEP_REASON_MAX];
} step_decision;

typedef struct step_ctl {
    pthread_mutex_t lock; /* the pending request (requests may come from any thread) */
    bool pending;
    mxp_precision pend_to;
    step_source pend_src;
    char pend_reason[STEP_REASON_MAX];
    step_phase phase;
    step_owner owner; /* who reaches the boundary; the others only request */
    int sig_slot;   /* operator-signal slot, -1: not listening */
    step_decision last;        /* the newest decision */
    step_decision last_signal; /* the newest decision of a signal */
    int64_t signal_decisions;  /* decisions taken on a signal */
    int64_t switches;          /* applied switches */
    char stop_reason[160];
} step_ctl;

struct mxp_trainer;

/* Trainer lifetime (trainer.c). */
void step_ctl_init(step_ctl *c);
void step_ctl_free(step_ctl *c);

/* Ask for `to` at the next boundary (any thread; not async-signal-safe:
 * signals use step_ctl_signal_fp32). MXP_ERR_INVALID_ARG for a mode out
 * of range or a NULL trainer. */
mxp_status step_ctl_request(struct mxp_trainer *t, mxp_precision to, step_source src,
                            const char *reason, mxp_error *err);
/* The step boundary: take a pending signal and the pending request and
 * apply the winner. *out (may be NULL) receives the decision, serial 0 when
 * there was none. A switch this machine cannot run is logged, recorded as
 * not switched, and training goes on in the current mode. MXP_ERR_STATE
 * inside a step. */
mxp_status step_ctl_boundary(struct mxp_trainer *t, step_decision *out, mxp_error *err);
/* Request and apply at once (the advisor before the first step, the
 * data-parallel agreement, a program driving a trainer): MXP_ERR_STATE
 * inside a step; a refused switch is returned as the error. */
mxp_status step_ctl_apply_now(struct mxp_trainer *t, mxp_precision to, step_source src,
                              const char *reason, mxp_error *err);

/* The trainer step's phases (trainer.c). begin: MXP_ERR_STATE inside a
 * step or on a stopped trainer. */
mxp_status step_ctl_begin(struct mxp_trainer *t, mxp_error *err);
void step_ctl_end(struct mxp_trainer *t);

/* A guard rule stopped the run: later steps are refused. */
void step_ctl_stop(struct mxp_trainer *t, const char *why);
bool step_ctl_stopped(const struct mxp_trainer *t);

/* Claim the boundary: a run (mxp_run_create) over a guard
 * (mxp_guard_create) over the trainer step (the default); a claim never
 * lowers the owner. step_ctl_owner: who reaches it now. */
void step_ctl_claim(struct mxp_trainer *t, step_owner who);
void step_ctl_release(struct mxp_trainer *t, step_owner who);
step_owner step_ctl_owner(const struct mxp_trainer *t);

/* The mode the next step runs in as the step's own verdict left it: the
 * pending request when the guard or the scaler made it (they decide
 * between the step and its boundary), else the current mode. An operator
 * request from another thread is not counted until its boundary. */
mxp_precision step_ctl_next_mode(struct mxp_trainer *t);
/* An operator signal is waiting for this listening trainer's boundary. */
bool step_ctl_signal_waiting(const struct mxp_trainer *t);
/* The pending request, if any. */
bool step_ctl_pending(struct mxp_trainer *t, step_source *src, mxp_precision *to);
const step_decision *step_ctl_last(const struct mxp_trainer *t);
/* Decisions taken on a signal, and the newest of them. */
int64_t step_ctl_signal_decisions(const struct mxp_trainer *t, step_decision *last);
int64_t step_ctl_switches(const struct mxp_trainer *t);

/* Operator signals: a listening trainer (a guard listens for its
 * trainer) takes a signal at its next boundary; a signal before it
 * listened is not replayed. step_ctl_signal_fp32 is async-signal-safe. */
void step_ctl_listen_signals(struct mxp_trainer *t, bool on);
void step_ctl_signal_fp32(void);
bool step_ctl_signal_lock_free(void);

const char *step_source_name(step_source s);
/* 0 (wins) .. 4, as in the table above. */
int step_source_priority(step_source s, mxp_precision to);

#endif
