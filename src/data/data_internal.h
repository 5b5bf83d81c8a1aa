/* src/data/data_internal.h: the mxp_sim object shared by env.c (built-in
 * kinds, dispatch) and env_mujoco.c (the MuJoCo backend). Not installed.
 */
#ifndef MIXPREC_DATA_INTERNAL_H
#define MIXPREC_DATA_INTERNAL_H

#include <mixprec/data.h>

struct mxp_sim {
    mxp_env_kind kind;
    int state_dim;      /* built-in: info->state_dim; MuJoCo: nq + nv + na */
    int action_dim;     /* built-in: info->action_dim; MuJoCo: nu */
    double *action_lo;  /* [action_dim] lower bound of each action entry */
    double *action_hi;  /* [action_dim] upper bound */
    void *mj;           /* MuJoCo backend state (env_mujoco.c); NULL for built-ins */
};

/* Load the MuJoCo model of s->kind (path NULL/""/"default": the kind's own
 * model), make its mjData and fill s->state_dim, action_dim, action_lo/hi
 * and s->mj. On failure s->mj stays NULL and nothing is leaked. Without
 * MuJoCo: MXP_ERR_UNSUPPORTED. */
mxp_status mxp_sim_mujoco_open(mxp_sim *s, const char *path, mxp_error *err);
/* Free s->mj (the bounds arrays are freed by mxp_sim_destroy). */
void mxp_sim_mujoco_close(mxp_sim *s);
void mxp_sim_mujoco_reset(mxp_sim *s, mxp_rng *r, float *state);
mxp_status mxp_sim_mujoco_step(mxp_sim *s, const float *state, const float *action,
                               float *next, float *reward, mxp_error *err);

/* MuJoCo builds only: the XML of the built-in ant into buf [cap], NUL
 * terminated; false when it does not fit (8 KiB is enough). For tests. */
bool mxp_mujoco_ant_xml(char *buf, size_t cap);

#endif /* MIXPREC_DATA_INTERNAL_H */
