/* base/fs.c: directory creation (mxp_mkdirs, base.h). */
#include <mixprec/base.h>

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

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
