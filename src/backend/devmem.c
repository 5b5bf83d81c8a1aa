/* backend/devmem.c: backend memory and the mock device (backend/devmem.h).
 *
 * Entry points: mxp_dev_init, mxp_dev_is_mock, mxp_dev_alloc / _calloc /
 * _free, mxp_dev_enter / _leave, mxp_dev_download / _upload / _count,
 * mxp_dev_stats_get.
 * Mock regions are anonymous mappings of whole pages kept in one table;
 * the outermost enter maps every region read-write, the matching leave
 * maps them PROT_NONE again (one mutex orders both with alloc and free).
 * A failed mprotect is counted (protect_errors), never ignored.
 */
#define _DEFAULT_SOURCE
#include "backend/devmem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct region {
    void *p;
    size_t len; /* whole pages */
} region;

static struct {
    pthread_mutex_t lock;
    int mode; /* -1: not read yet, 0: host, 1: mock */
    region *r;
    size_t n, cap;
    int64_t depth;
    mxp_dev_stats st;
} g = {PTHREAD_MUTEX_INITIALIZER, -1, NULL, 0, 0, 0, {0}};

mxp_status mxp_dev_init(mxp_error *err) {
    const char *v = getenv("MIXPREC_MOCK_DEVICE");
    int mode = -1;
    if (!v || strcmp(v, "") == 0 || strcmp(v, "0") == 0)
        mode = 0;
    else if (strcmp(v, "1") == 0)
        mode = 1;
    if (mode < 0)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "MIXPREC_MOCK_DEVICE='%.40s'; accepted: 0 or unset (host memory), "
                             "1 (the mock device: tensors unreadable outside backend operations)",
                             v);
    pthread_mutex_lock(&g.lock);
    if (g.mode < 0) g.mode = mode; /* fixed at the first call: regions exist in one mode */
    pthread_mutex_unlock(&g.lock);
    return MXP_OK;
}

bool mxp_dev_is_mock(void) { return g.mode == 1; }

static size_t page_round(size_t bytes) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t r;
    if (!mxp_size_add(bytes ? bytes : 1, pg - 1, &r)) return 0;
    return r / pg * pg;
}

void *mxp_dev_alloc(size_t bytes) {
    if (g.mode != 1) return mxp_calloc(bytes ? bytes : 1, 1);
    const size_t len = page_round(bytes);
    if (!len) return NULL;
    pthread_mutex_lock(&g.lock);
    void *p = NULL;
    if (g.n == g.cap) {
        size_t cap = g.cap ? 2 * g.cap : 64;
        region *r = realloc(g.r, cap * sizeof *r);
        if (!r) goto out;
        g.r = r;
        g.cap = cap;
    }
    p = mmap(NULL, len, g.depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        p = NULL;
        goto out;
    }
    g.r[g.n++] = (region){p, len};
    g.st.regions++;
out:
    pthread_mutex_unlock(&g.lock);
    return p;
}

void *mxp_dev_calloc(size_t n, size_t size) {
    size_t bytes;
    return mxp_size_mul(n, size, &bytes) ? mxp_dev_alloc(bytes) : NULL;
}

void mxp_dev_free(void *p) {
    if (!p) return;
    if (g.mode != 1) {
        mxp_free(p);
        return;
    }
    pthread_mutex_lock(&g.lock);
    for (size_t i = 0; i < g.n; i++)
        if (g.r[i].p == p) {
            munmap(p, g.r[i].len);
            g.r[i] = g.r[--g.n];
            g.st.regions--;
            break;
        }
    pthread_mutex_unlock(&g.lock);
}

static void protect_all(int prot) {
    for (size_t i = 0; i < g.n; i++)
        if (mprotect(g.r[i].p, g.r[i].len, prot) != 0) g.st.protect_errors++;
}

void mxp_dev_enter(void) {
    pthread_mutex_lock(&g.lock);
    if (g.depth++ == 0) {
        g.st.brackets++;
        if (g.mode == 1) protect_all(PROT_READ | PROT_WRITE);
    }
    pthread_mutex_unlock(&g.lock);
}

void mxp_dev_leave(void) {
    pthread_mutex_lock(&g.lock);
    if (g.depth > 0 && --g.depth == 0 && g.mode == 1) protect_all(PROT_NONE);
    pthread_mutex_unlock(&g.lock);
}

void mxp_dev_count(bool d2h, size_t n) {
    pthread_mutex_lock(&g.lock);
    if (d2h) {
        g.st.d2h_calls++;
        g.st.d2h_bytes += (int64_t)n;
    } else {
        g.st.h2d_calls++;
        g.st.h2d_bytes += (int64_t)n;
    }
    pthread_mutex_unlock(&g.lock);
}

void mxp_dev_download(void *host, const void *dev, size_t n) {
    mxp_dev_enter();
    memcpy(host, dev, n);
    mxp_dev_count(true, n);
    mxp_dev_leave();
}

void mxp_dev_upload(void *dev, const void *host, size_t n) {
    mxp_dev_enter();
    memcpy(dev, host, n);
    mxp_dev_count(false, n);
    mxp_dev_leave();
}

void mxp_dev_stats_get(mxp_dev_stats *out) {
    pthread_mutex_lock(&g.lock);
    *out = g.st;
    pthread_mutex_unlock(&g.lock);
}
