/* data/env_mujoco.c: the MuJoCo backend of mxp_sim (data.env=ant|humanoid).
 *
 * Entry points (internal, data_internal.h): mxp_sim_mujoco_open/_close,
 * _reset, _step; public mxp_mujoco_version. Compiled against MuJoCo only
 * when CMake found it (MIXPREC_HAVE_MUJOCO); otherwise every entry point
 * reports MXP_ERR_UNSUPPORTED and mxp_mujoco_version() is 0.
 *
 * Each mxp_sim owns one mjModel and one mjData: no MuJoCo state is global
 * here, so several sims (two replays) coexist. A step is a pure function of
 * (state, action): the float state is loaded into the mjData with time 0 and
 * a zero warm start before MXP_MUJOCO_FRAME_SKIP calls of mj_step, so the
 * replay's transitions can be checked one by one against MuJoCo itself.
 *
 * Models: "ant" is generated below (libmujoco-samples 2.2.2 has no ant):
 * a sphere torso and four two-segment legs with a hip (vertical axis, +-30
 * deg) and an ankle (30..70 deg) each, capsules of radius 0.08, density 5,
 * 8 motors with gear 150 and ctrlrange [-1, 1], timestep 0.01 s: the shape,
 * masses and actuation of the Ant of Gym's MuJoCo suite, but integrated with
 * MuJoCo's semi-implicit Euler (damping implicit) instead of Gym's RK4, which
 * costs 4 model evaluations per timestep. It is loaded from memory through
 * MuJoCo's virtual file system. "humanoid" is the XML of
 * libmujoco-samples.
 *
 * References: MuJoCo 2.2 API (mujoco.h: mj_loadXML, mj_step, mj_kinematics,
 * mj_comPos, mj_normalizeQuat, mjVFS); Gym's Ant/Humanoid reward terms
 * (forward velocity, control cost weights 0.5 and 0.1).
 */
#include "data/data_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define MJ_DEFAULT_HUMANOID "/usr/share/mujoco/model/humanoid/humanoid.xml"

#ifdef MIXPREC_HAVE_MUJOCO

#include <mujoco/mujoco.h>

#define MJ_RESET_NOISE 0.1
#define MJ_ANT_XML_MAX 8192
#define MJ_ERR_MAX 1000

typedef struct mj_backend {
    mjModel *m;
    mjData *d;
    double ctrl_cost;  /* w of the reward's control cost */
    double dt_env;     /* MXP_MUJOCO_FRAME_SKIP * m->opt.timestep */
} mj_backend;

int mxp_mujoco_version(void) { return mj_version(); }

/* Write the ant XML into buf [cap]; false if it does not fit. Leg i points
 * along (sx, sy) = (+-1, +-1); its ankle turns about the horizontal axis
 * perpendicular to the leg, (-sy, sx, 0), so one range bends every leg down. */
bool mxp_mujoco_ant_xml(char *buf, size_t cap) {
    static const int dirs[4][2] = {{1, 1}, {-1, 1}, {-1, -1}, {1, -1}};
    size_t n = 0;
    int w = snprintf(buf, cap,
                     "<mujoco model=\"ant\">\n"
                     " <compiler angle=\"degree\" inertiafromgeom=\"true\"/>\n"
                     " <option timestep=\"0.01\"/>\n"
                     " <default>\n"
                     "  <joint limited=\"true\" armature=\"1\" damping=\"1\"/>\n"
                     "  <geom condim=\"3\" conaffinity=\"0\" density=\"5\" "
                     "friction=\"1 0.5 0.5\" margin=\"0.01\"/>\n"
                     " </default>\n"
                     " <worldbody>\n"
                     "  <geom name=\"floor\" type=\"plane\" size=\"40 40 40\" conaffinity=\"1\"/>\n"
                     "  <body name=\"torso\" pos=\"0 0 0.75\">\n"
                     "   <joint name=\"root\" type=\"free\" limited=\"false\" armature=\"0\" "
                     "damping=\"0\" margin=\"0.01\"/>\n"
                     "   <geom type=\"sphere\" size=\"0.25\"/>\n");
    if (w < 0 || (size_t)w >= cap) return false;
    n = (size_t)w;
    for (int i = 0; i < 4; i++) {
        double sx = 0.2 * dirs[i][0], sy = 0.2 * dirs[i][1];
        w = snprintf(buf + n, cap - n,
                     "   <body name=\"leg_%d\">\n"
                     "    <geom type=\"capsule\" size=\"0.08\" fromto=\"0 0 0 %g %g 0\"/>\n"
                     "    <body pos=\"%g %g 0\">\n"
                     "     <joint name=\"hip_%d\" type=\"hinge\" axis=\"0 0 1\" range=\"-30 30\"/>\n"
                     "     <geom type=\"capsule\" size=\"0.08\" fromto=\"0 0 0 %g %g 0\"/>\n"
                     "     <body pos=\"%g %g 0\">\n"
                     "      <joint name=\"ankle_%d\" type=\"hinge\" axis=\"%d %d 0\" "
                     "range=\"30 70\"/>\n"
                     "      <geom type=\"capsule\" size=\"0.08\" fromto=\"0 0 0 %g %g 0\"/>\n"
                     "     </body>\n"
                     "    </body>\n"
                     "   </body>\n",
                     i + 1, sx, sy, sx, sy, i + 1, sx, sy, sx, sy, i + 1, -dirs[i][1],
                     dirs[i][0], 2.0 * sx, 2.0 * sy);
        if (w < 0 || (size_t)w >= cap - n) return false;
        n += (size_t)w;
    }
    w = snprintf(buf + n, cap - n, "  </body>\n </worldbody>\n <actuator>\n");
    if (w < 0 || (size_t)w >= cap - n) return false;
    n += (size_t)w;
    for (int i = 1; i <= 4; i++) {
        w = snprintf(buf + n, cap - n,
                     "  <motor joint=\"hip_%d\" gear=\"150\" ctrllimited=\"true\" "
                     "ctrlrange=\"-1 1\"/>\n"
                     "  <motor joint=\"ankle_%d\" gear=\"150\" ctrllimited=\"true\" "
                     "ctrlrange=\"-1 1\"/>\n",
                     i, i);
        if (w < 0 || (size_t)w >= cap - n) return false;
        n += (size_t)w;
    }
    w = snprintf(buf + n, cap - n, " </actuator>\n</mujoco>\n");
    return w >= 0 && (size_t)w < cap - n;
}

/* Compile the built-in ant from memory (MuJoCo's virtual file system). */
static mxp_status load_ant(mjModel **out, mxp_error *err) {
    char *xml = mxp_calloc(MJ_ANT_XML_MAX, 1);
    mjVFS *vfs = mxp_calloc(1, sizeof *vfs);
    char msg[MJ_ERR_MAX] = "";
    mxp_status st = MXP_OK;
    if (!xml || !vfs) {
        st = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "data.env=ant: model buffers");
        goto done;
    }
    if (!mxp_mujoco_ant_xml(xml, MJ_ANT_XML_MAX)) {
        st = mxp_error_set(err, MXP_ERR_STATE, "data.env=ant: model text exceeds %d bytes",
                           MJ_ANT_XML_MAX);
        goto done;
    }
    int len = (int)strlen(xml);
    mj_defaultVFS(vfs);
    if (mj_makeEmptyFileVFS(vfs, "mixprec_ant.xml", len) != 0) {
        st = mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "data.env=ant: MuJoCo VFS file");
        goto done;
    }
    memcpy(vfs->filedata[vfs->nfile - 1], xml, (size_t)len);
    *out = mj_loadXML("mixprec_ant.xml", vfs, msg, (int)sizeof msg);
    mj_deleteVFS(vfs);
    if (!*out)
        st = mxp_error_set(err, MXP_ERR_FORMAT, "data.env=ant: MuJoCo rejected the built-in "
                           "ant model: %s", msg);
done:
    mxp_free(vfs);
    mxp_free(xml);
    return st;
}

/* Compile the XML at path; the file is opened first so that a missing one
 * gets MXP_ERR_IO rather than MuJoCo's parser message. */
static mxp_status load_file(const char *path, bool is_default, mjModel **out, mxp_error *err) {
    char msg[MJ_ERR_MAX] = "";
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        if (is_default)
            return mxp_error_set(err, MXP_ERR_IO,
                                 "data.mujoco_model: the default model %s cannot be read "
                                 "(%s); accepted: install libmujoco-samples, or set "
                                 "data.mujoco_model to a MuJoCo XML file", path, strerror(e));
        return mxp_error_set(err, MXP_ERR_IO,
                             "data.mujoco_model = '%s' cannot be read (%s); accepted: the "
                             "path of a MuJoCo XML model, or 'default'", path, strerror(e));
    }
    fclose(f);
    *out = mj_loadXML(path, NULL, msg, (int)sizeof msg);
    if (!*out)
        return mxp_error_set(err, MXP_ERR_FORMAT,
                             "data.mujoco_model = '%s' is not a valid MuJoCo model: %s; "
                             "accepted: an MJCF/URDF file MuJoCo %s compiles",
                             path, msg[0] ? msg : "(no message)", mj_versionString());
    return MXP_OK;
}

mxp_status mxp_sim_mujoco_open(mxp_sim *s, const char *path, mxp_error *err) {
    const char *name = mxp_env_info_get(s->kind)->name;
    bool dflt = !path || !path[0] || strcmp(path, "default") == 0;
    mjModel *m = NULL;
    mxp_status st;
    if (dflt && s->kind == MXP_ENV_ANT)
        st = load_ant(&m, err);
    else
        st = load_file(dflt ? MJ_DEFAULT_HUMANOID : path, dflt, &m, err);
    if (st != MXP_OK) return st;

    if (m->nu < 1 || m->nv < 1) {
        int nu = m->nu, nv = m->nv;
        mj_deleteModel(m);
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                             "data.env=%s: the model has %d actuators and %d degrees of "
                             "freedom; accepted: at least one of each", name, nu, nv);
    }
    if ((int64_t)m->nq + m->nv + m->na > INT32_MAX / 4) {
        mj_deleteModel(m);
        return mxp_error_set(err, MXP_ERR_UNSUPPORTED, "data.env=%s: model too large", name);
    }
    mj_backend *b = mxp_calloc(1, sizeof *b);
    s->action_lo = mxp_calloc((size_t)m->nu, sizeof(double));
    s->action_hi = mxp_calloc((size_t)m->nu, sizeof(double));
    mjData *d = (b && s->action_lo && s->action_hi) ? mj_makeData(m) : NULL;
    if (!d) {
        mxp_free(b);
        mj_deleteModel(m);
        return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "data.env=%s: simulation data", name);
    }
    b->m = m;
    b->d = d;
    b->ctrl_cost = s->kind == MXP_ENV_ANT ? 0.5 : 0.1;
    b->dt_env = MXP_MUJOCO_FRAME_SKIP * m->opt.timestep;
    s->state_dim = m->nq + m->nv + m->na;
    s->action_dim = m->nu;
    for (int a = 0; a < m->nu; a++) {
        bool limited = m->actuator_ctrllimited[a] != 0;
        s->action_lo[a] = limited ? m->actuator_ctrlrange[2 * a] : -1.0;
        s->action_hi[a] = limited ? m->actuator_ctrlrange[2 * a + 1] : 1.0;
    }
    s->mj = b;
    return MXP_OK;
}

void mxp_sim_mujoco_close(mxp_sim *s) {
    mj_backend *b = s->mj;
    if (!b) return;
    mj_deleteData(b->d);
    mj_deleteModel(b->m);
    mxp_free(b);
    s->mj = NULL;
}

void mxp_sim_mujoco_reset(mxp_sim *s, mxp_rng *r, float *state) {
    mj_backend *b = s->mj;
    const mjModel *m = b->m;
    mjtNum *qpos = b->d->qpos;
    for (int i = 0; i < m->nq; i++)
        qpos[i] = m->qpos0[i] - MJ_RESET_NOISE +
                  2.0 * MJ_RESET_NOISE * (double)mxp_rng_uniform(r);
    mj_normalizeQuat(m, qpos);
    for (int i = 0; i < m->nq; i++) state[i] = (float)qpos[i];
    for (int i = 0; i < m->nv; i++)
        state[m->nq + i] = (float)(-MJ_RESET_NOISE +
                                   2.0 * MJ_RESET_NOISE * (double)mxp_rng_uniform(r));
    for (int i = 0; i < m->na; i++) state[m->nq + m->nv + i] = 0.0f;
}

/* x of the whole model's centre of mass for the positions in d->qpos. */
static double com_x(const mjModel *m, mjData *d) {
    mj_kinematics(m, d);
    mj_comPos(m, d);
    return d->subtree_com[0];
}

mxp_status mxp_sim_mujoco_step(mxp_sim *s, const float *state, const float *action,
                               float *next, float *reward, mxp_error *err) {
    mj_backend *b = s->mj;
    const mjModel *m = b->m;
    mjData *d = b->d;
    const int nq = m->nq, nv = m->nv, na = m->na;
    const char *name = mxp_env_info_get(s->kind)->name;
    for (int i = 0; i < s->state_dim; i++)
        if (!isfinite(state[i]))
            return mxp_error_set(err, MXP_ERR_NONFINITE,
                                 "environment %s: state entry %d is not finite", name, i);
    for (int i = 0; i < nq; i++) d->qpos[i] = state[i];
    for (int i = 0; i < nv; i++) d->qvel[i] = state[nq + i];
    for (int i = 0; i < na; i++) d->act[i] = state[nq + nv + i];
    d->time = 0.0;
    memset(d->qacc_warmstart, 0, (size_t)nv * sizeof(mjtNum));
    memset(d->warning, 0, sizeof d->warning);
    double cost = 0.0;
    for (int a = 0; a < m->nu; a++) {
        double u = action[a];
        if (!(u >= s->action_lo[a])) u = s->action_lo[a]; /* NaN -> low bound */
        if (u > s->action_hi[a]) u = s->action_hi[a];
        d->ctrl[a] = u;
        cost += u * u;
    }
    double x0 = com_x(m, d);
    for (int k = 0; k < MXP_MUJOCO_FRAME_SKIP; k++) mj_step(m, d);
    if (d->warning[mjWARN_BADQPOS].number || d->warning[mjWARN_BADQVEL].number ||
        d->warning[mjWARN_BADQACC].number)
        return mxp_error_set(err, MXP_ERR_NONFINITE,
                             "environment %s: MuJoCo found a bad qpos/qvel/qacc (unstable "
                             "simulation) and reset its state; accepted: finite dynamics",
                             name);
    double x1 = com_x(m, d);
    double r = (x1 - x0) / b->dt_env - b->ctrl_cost * cost;
    bool finite = isfinite(r);
    for (int i = 0; i < nq; i++) next[i] = (float)d->qpos[i];
    for (int i = 0; i < nv; i++) next[nq + i] = (float)d->qvel[i];
    for (int i = 0; i < na; i++) next[nq + nv + i] = (float)d->act[i];
    for (int i = 0; i < s->state_dim; i++) finite = finite && isfinite(next[i]);
    *reward = (float)r;
    if (!finite)
        return mxp_error_set(err, MXP_ERR_NONFINITE,
                             "environment %s: the step produced a non-finite value", name);
    return MXP_OK;
}

#else /* !MIXPREC_HAVE_MUJOCO */

int mxp_mujoco_version(void) { return 0; }

mxp_status mxp_sim_mujoco_open(mxp_sim *s, const char *path, mxp_error *err) {
    (void)path;
    return mxp_error_set(err, MXP_ERR_UNSUPPORTED,
                         "data.env=%s: mixprec was built without MuJoCo; install "
                         "libmujoco-dev and rebuild (accepted here: pendulum, cartpole)",
                         mxp_env_info_get(s->kind)->name);
}

void mxp_sim_mujoco_close(mxp_sim *s) { (void)s; }

void mxp_sim_mujoco_reset(mxp_sim *s, mxp_rng *r, float *state) {
    (void)s;
    (void)r;
    (void)state;
}

mxp_status mxp_sim_mujoco_step(mxp_sim *s, const float *state, const float *action,
                               float *next, float *reward, mxp_error *err) {
    (void)state;
    (void)action;
    (void)next;
    (void)reward;
    return mxp_sim_mujoco_open(s, NULL, err);
}

#endif /* MIXPREC_HAVE_MUJOCO */
