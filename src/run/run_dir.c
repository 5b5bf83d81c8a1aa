/* run/run_dir.c: default run directories (include/mixprec/run.h,
 * docs/run.md, "Run directories").
 *
 * Entry points: mxp_run_dir_reserve, mxp_run_dir_publish, and
 * run_dir_follow_link (run_internal.h, for the config of a resume).
 *
 * A run whose output.dir was left at its default ("runs/latest") trains in
 * a directory of its own, runs/version_<N>, as PyTorch Lightning's
 * lightning_logs/version_<N>: N is one more than the highest there, and the
 * directory is made with mkdir, which fails when it exists, so two runs
 * started at once never share one. Once the run exists, runs/latest becomes
 * a symbolic link to it (relative: "version_<N>", so the tree can move),
 * replaced atomically by rename. A real directory runs/latest (a run of a
 * version before this scheme) is first renamed to a version of its own (the
 * lower number) and runs/latest made a link to it: nothing saved is lost or
 * overwritten, and latest names it until the new run exists.
 */
#include "run/run_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VERSION_PREFIX "version_"

/* latest = "<parent>/<name>" -> parent, name ("." when latest has no '/').
 * Trailing slashes are ignored. False when it does not fit or name is
 * empty. */
static bool split_latest(const char *latest, char *parent, size_t pn, char *name, size_t nn) {
    char buf[MXP_PATH_MAX];
    if (!latest || (size_t)snprintf(buf, sizeof buf, "%s", latest) >= sizeof buf) return false;
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
    char *slash = strrchr(buf, '/');
    const char *base = slash ? slash + 1 : buf;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) return false;
    if ((size_t)snprintf(name, nn, "%s", base) >= nn) return false;
    if (!slash) return (size_t)snprintf(parent, pn, ".") < pn;
    if (slash == buf) return (size_t)snprintf(parent, pn, "/") < pn;
    *slash = '\0';
    return (size_t)snprintf(parent, pn, "%s", buf) < pn;
}

/* N of a "version_<N>" name (digits only, no sign, N < 2^62), else -1. */
static int64_t version_of(const char *name) {
    if (strncmp(name, VERSION_PREFIX, sizeof VERSION_PREFIX - 1) != 0) return -1;
    const char *d = name + sizeof VERSION_PREFIX - 1;
    if (!*d) return -1;
    int64_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || v > (INT64_C(1) << 62) / 10) return -1;
        v = v * 10 + (*d - '0');
    }
    return v;
}

/* Make a new directory parent/version_<N> (N above every version there)
 * and write its path into out. */
static mxp_status make_version(const char *parent, char *out, size_t n, mxp_error *err) {
    int64_t next = 0;
    DIR *d = opendir(parent);
    if (!d)
        return mxp_error_set(err, MXP_ERR_IO, "cannot read run directory parent '%s': %s",
                             parent, strerror(errno));
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int64_t v = version_of(e->d_name);
        if (v >= next) next = v + 1;
    }
    closedir(d);
    /* mkdir is the reservation: a run started at the same moment that took
     * this number makes it fail with EEXIST, and this one takes the next */
    for (int tries = 0; tries < 10000; tries++, next++) {
        if ((size_t)snprintf(out, n, "%s/" VERSION_PREFIX "%" PRId64, parent, next) >= n)
            return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                                 "run directory '%s/" VERSION_PREFIX "%" PRId64 "' is longer "
                                 "than %zu bytes; accepted: a shorter output.dir",
                                 parent, next, n - 1);
        if (mkdir(out, 0755) == 0) return MXP_OK;
        if (errno != EEXIST)
            return mxp_error_set(err, MXP_ERR_IO, "cannot create run directory '%s': %s", out,
                                 strerror(errno));
    }
    return mxp_error_set(err, MXP_ERR_IO, "no free run directory name in '%s' after 10000 tries",
                         parent);
}

/* Point parent/name at target (a name in parent) with a new symbolic link
 * renamed over the old one: readers see the old link or the new, never
 * none. */
static mxp_status point_link(const char *parent, const char *name, const char *target,
                             mxp_error *err) {
    char link_path[MXP_PATH_MAX + 300], tmp[MXP_PATH_MAX + 340];
    snprintf(link_path, sizeof link_path, "%s/%s", parent, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", parent, name, (long)getpid());
    unlink(tmp); /* a leftover of a process with this pid that died here */
    if (symlink(target, tmp) != 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot create the link '%s': %s", tmp,
                             strerror(errno));
    if (rename(tmp, link_path) != 0) {
        int en = errno;
        unlink(tmp);
        return mxp_error_set(err, MXP_ERR_IO, "cannot point '%s' at '%s': %s", link_path, target,
                             strerror(en));
    }
    return MXP_OK;
}

/* parent/name as a real directory (a run written before numbered runs)
 * becomes parent/version_<N> and parent/name a link to it; nothing else
 * changes. A link, or nothing, at parent/name: nothing to do. */
static mxp_status adopt_legacy(const char *parent, const char *name, mxp_error *err) {
    char link_path[MXP_PATH_MAX + 300], moved[MXP_PATH_MAX];
    snprintf(link_path, sizeof link_path, "%s/%s", parent, name);
    struct stat st;
    if (lstat(link_path, &st) != 0 || S_ISLNK(st.st_mode)) return MXP_OK;
    if (!S_ISDIR(st.st_mode))
        return mxp_error_set(err, MXP_ERR_STATE,
                             "'%s' exists and is neither a directory nor a link; accepted: "
                             "remove or rename it, or set output.dir", link_path);
    mxp_status s = make_version(parent, moved, sizeof moved, err);
    if (s != MXP_OK) return s;
    if (rename(link_path, moved) != 0) { /* onto the fresh empty directory: replaces it */
        int en = errno;
        rmdir(moved);
        return mxp_error_set(err, MXP_ERR_IO, "cannot move the run directory '%s' to '%s' (to "
                             "make '%s' a link to the newest run): %s", link_path, moved,
                             link_path, strerror(en));
    }
    mxp_log(MXP_LOG_INFO, "run directory %s (from before numbered runs) moved to %s; %s links "
            "to it", link_path, moved, link_path);
    return point_link(parent, name, strrchr(moved, '/') + 1, err);
}

mxp_status mxp_run_dir_reserve(const char *latest, char *out, size_t n, mxp_error *err) {
    char parent[MXP_PATH_MAX], name[256];
    if (!out || n == 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_run_dir_reserve: out is NULL");
    out[0] = '\0';
    if (!split_latest(latest, parent, sizeof parent, name, sizeof name))
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "run directory pointer '%s'; accepted: a path such as runs/latest, "
                             "shorter than %d bytes", latest ? latest : "(null)", MXP_PATH_MAX);
    int e = mxp_mkdirs(parent);
    if (e != 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot create '%s': %s", parent, strerror(e));
    mxp_status s = adopt_legacy(parent, name, err); /* it keeps the lower number */
    return s != MXP_OK ? s : make_version(parent, out, n, err);
}

mxp_status mxp_run_dir_publish(const char *latest, const char *dir, mxp_error *err) {
    char parent[MXP_PATH_MAX], name[256], dparent[MXP_PATH_MAX], dname[256];
    if (!split_latest(latest, parent, sizeof parent, name, sizeof name) ||
        !split_latest(dir, dparent, sizeof dparent, dname, sizeof dname) ||
        strcmp(parent, dparent) != 0)
        return mxp_error_set(err, MXP_ERR_INVALID_ARG,
                             "mxp_run_dir_publish: '%s' and '%s'; accepted: a pointer and a run "
                             "directory in the same folder (mxp_run_dir_reserve's)",
                             latest ? latest : "(null)", dir ? dir : "(null)");
    mxp_status s = adopt_legacy(parent, name, err); /* made since the reservation */
    return s != MXP_OK ? s : point_link(parent, name, dname, err);
}

void run_dir_follow_link(const char *path, char *out, size_t n) {
    char parent[MXP_PATH_MAX], name[256], target[256];
    struct stat st;
    snprintf(out, n, "%s", path);
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) ||
        !split_latest(path, parent, sizeof parent, name, sizeof name))
        return;
    ssize_t k = readlink(path, target, sizeof target - 1);
    if (k <= 0 || (size_t)k >= sizeof target - 1) return;
    target[k] = '\0';
    if (version_of(target) < 0) return; /* not one of ours: keep the path as given */
    char joined[MXP_PATH_MAX + 300];
    if ((size_t)snprintf(joined, sizeof joined, "%s/%s", parent, target) < n)
        snprintf(out, n, "%s", joined);
}
