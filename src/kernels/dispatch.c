/* kernels/dispatch.c: choose the active kernel table once per process.
 *
 * Entry point: mxp_kernels_get(). Candidates are listed best first; the
 * first whose CPU requirements mxp_cpu_features_get() reports is taken.
 * MIXPREC_FORCE_ISA=<name> picks a table by name instead (an unknown or
 * unsupported name is logged and ignored). The choice is made under
 * pthread_once, so concurrent first calls are safe and all callers see the
 * same table. To add an ISA: put its table getter and feature predicate
 * ahead of "generic" in `isa_candidates`.
 */
#include "kernels/kernels.h"
#include "kernels/x86_avx512/avx512.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct isa_candidate {
    const char *name;
    const mxp_kernels *(*table)(void);
    bool (*usable)(const mxp_cpu_features *f);
} isa_candidate;

static bool always_usable(const mxp_cpu_features *f) {
    (void)f;
    return true;
}

/* Best first; the last entry must be the always-usable reference. */
static const isa_candidate isa_candidates[] = {
    {"avx512", mxp_kernels_avx512, mxp_avx512_usable},
    {"generic", mxp_kernels_generic, always_usable},
};
enum { ISA_CANDIDATE_COUNT = sizeof isa_candidates / sizeof isa_candidates[0] };

static const mxp_kernels *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

/* The forced candidate named by MIXPREC_FORCE_ISA, or NULL (logged) when it
 * is unset, unknown or not usable on this CPU. */
static const isa_candidate *forced_candidate(const mxp_cpu_features *f) {
    const char *force = getenv("MIXPREC_FORCE_ISA");
    if (!force || !*force) return NULL;
    char accepted[128] = "";
    for (size_t i = 0; i < ISA_CANDIDATE_COUNT; i++) {
        const isa_candidate *c = &isa_candidates[i];
        if (strcmp(force, c->name) == 0) {
            if (c->usable(f)) return c;
            mxp_log(MXP_LOG_WARN,
                    "kernels: MIXPREC_FORCE_ISA=%s is not supported by this CPU; "
                    "choosing automatically", force);
            return NULL;
        }
        if (i) strncat(accepted, ", ", sizeof accepted - strlen(accepted) - 1);
        strncat(accepted, c->name, sizeof accepted - strlen(accepted) - 1);
    }
    mxp_log(MXP_LOG_WARN,
            "kernels: MIXPREC_FORCE_ISA=%s is unknown and ignored; accepted: %s",
            force, accepted);
    return NULL;
}

static void choose(void) {
    const mxp_cpu_features *f = mxp_cpu_features_get();
    const isa_candidate *c = forced_candidate(f);
    for (size_t i = 0; !c && i < ISA_CANDIDATE_COUNT; i++)
        if (isa_candidates[i].usable(f)) c = &isa_candidates[i];
    active = c->table();
    mxp_log(MXP_LOG_INFO, "kernels: using the %s table", active->isa);
}

const mxp_kernels *mxp_kernels_get(void) {
    pthread_once(&active_once, choose);
    return active;
}
