/* base/fs.c: directory creation and opening files that must be regular
 * (mxp_mkdirs, mxp_open_regular; base.h). */
#include <mixprec/base.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mxp_mkdirs(const char *path) {
    size_t n = strlen(path);
    if (n == 0 || n >= MXP_PATH_MAX) return ENAMETOOLONG;
    char buf[MXP_PATH_MAX];
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return errno;
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

static const char *type_text(mode_t m) {
    if (S_ISDIR(m)) return "is a directory";
    if (S_ISFIFO(m)) return "is a FIFO (named pipe)";
    if (S_ISCHR(m)) return "is a character device";
    if (S_ISBLK(m)) return "is a block device";
    if (S_ISSOCK(m)) return "is a socket";
    return "is not a regular file";
}

mxp_status mxp_open_regular(const char *path, int flags, const char *what, int *fd,
                            mxp_error *err) {
    *fd = -1;
    if (!path) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "%s: NULL path", what);
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
    if (f < 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot open %s '%.200s': %s", what, path,
                             strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return mxp_error_set(err, MXP_ERR_IO, "cannot open %s '%.200s': %s", what, path,
                             strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return mxp_error_set(err, MXP_ERR_IO, "%s '%.200s' %s; accepted: a regular file", what,
                             path, type_text(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return mxp_error_set(err, MXP_ERR_IO, "cannot open %s '%.200s': %s", what, path,
                             strerror(e));
    }
    *fd = f;
    return MXP_OK;
}
