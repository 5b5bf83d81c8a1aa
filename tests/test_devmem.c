/* tests/test_devmem.c: backend memory and the mock device
 * (backend/devmem.h, docs/design.md "The mock device").
 *
 * Each case runs in a child process, since the mode is fixed per process:
 * - MIXPREC_MOCK_DEVICE=1: a region reads and writes inside a bracket
 *   (nested too, and from a second thread while the first is inside);
 *   a read and a write outside any bracket fault (SIGSEGV, caught in the
 *   child), also after a nested bracket closed; the region is zeroed;
 *   downloads and uploads copy and are counted (calls and bytes); free
 *   unmaps; no mprotect failed;
 * - unset or 0: ordinary memory, readable anywhere; counters still count;
 * - an invalid value is a config error naming the variable and 0 / 1.
 */
#include "backend/devmem.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define FAULTED 42

static void on_segv(int sig) {
    (void)sig;
    _exit(FAULTED);
}

/* Run fn in a child with MIXPREC_MOCK_DEVICE=mode; its exit status. */
static int in_child(const char *mode, int (*fn)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (mode)
            setenv("MIXPREC_MOCK_DEVICE", mode, 1);
        else
            unsetenv("MIXPREC_MOCK_DEVICE");
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_segv;
        sigaction(SIGSEGV, &sa, NULL);
        _exit(fn());
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static volatile float sink;

static float *mock_region(void) {
    mxp_error err = {0};
    if (mxp_dev_init(&err) != MXP_OK || !mxp_dev_is_mock()) _exit(3);
    float *p = mxp_dev_alloc(1000 * sizeof(float));
    if (!p || ((uintptr_t)p & 63)) _exit(4);
    return p;
}

static void *reader(void *arg) {
    sink = ((float *)arg)[7];
    return NULL;
}

/* 0: every access inside brackets worked and the counters agree */
static int mock_inside(void) {
    float *p = mock_region();
    mxp_dev_enter();
    for (int i = 0; i < 1000; i++)
        if (p[i] != 0.0f) return 5; /* zeroed */
    p[7] = 3.5f;
    mxp_dev_enter(); /* nested */
    p[8] = 1.0f;
    mxp_dev_leave();
    sink = p[7] + p[8]; /* still inside the outer bracket */
    pthread_t th;
    if (pthread_create(&th, NULL, reader, p) != 0 || pthread_join(th, NULL) != 0) return 6;
    mxp_dev_leave();
    float host[2] = {0, 0}, up[2] = {-2.0f, 9.0f};
    mxp_dev_download(host, p + 7, sizeof host);
    if (host[0] != 3.5f || host[1] != 1.0f) return 7;
    mxp_dev_upload(p + 7, up, sizeof up);
    mxp_dev_download(host, p + 7, sizeof host);
    if (host[0] != -2.0f || host[1] != 9.0f) return 8;
    mxp_dev_stats st;
    mxp_dev_stats_get(&st);
    if (st.d2h_calls != 2 || st.d2h_bytes != 16 || st.h2d_calls != 1 || st.h2d_bytes != 8 ||
        st.regions != 1 || st.protect_errors != 0 || st.brackets != 4)
        return 9;
    mxp_dev_free(p);
    mxp_dev_stats_get(&st);
    return st.regions == 0 ? 0 : 10;
}

static int mock_read_outside(void) {
    float *p = mock_region();
    sink = p[0];
    return 0; /* not reached when the read faults */
}

static int mock_write_after_nested(void) {
    float *p = mock_region();
    mxp_dev_enter();
    mxp_dev_enter();
    mxp_dev_leave();
    mxp_dev_leave();
    p[1] = 2.0f;
    return 0;
}

static int host_mode(void) {
    mxp_error err = {0};
    if (mxp_dev_init(&err) != MXP_OK || mxp_dev_is_mock()) return 3;
    float *p = mxp_dev_alloc(64 * sizeof(float));
    if (!p) return 4;
    p[3] = 1.25f; /* ordinary memory: no bracket needed */
    float h = 0;
    mxp_dev_download(&h, p + 3, sizeof h);
    mxp_dev_stats st;
    mxp_dev_stats_get(&st);
    mxp_dev_free(p);
    return h == 1.25f && st.d2h_calls == 1 && st.d2h_bytes == 4 ? 0 : 5;
}

static int bad_value(void) {
    mxp_error err = {0};
    if (mxp_dev_init(&err) != MXP_ERR_CONFIG) return 3;
    if (!strstr(err.msg, "MIXPREC_MOCK_DEVICE='yes'") || !strstr(err.msg, "accepted: 0"))
        return 4;
    return mxp_dev_is_mock() ? 5 : 0;
}

int main(void) {
    CHECK_MSG(in_child("1", mock_inside) == 0, "mock, inside brackets: %d",
              in_child("1", mock_inside));
    CHECK(in_child("1", mock_read_outside) == FAULTED);
    CHECK(in_child("1", mock_write_after_nested) == FAULTED);
    CHECK(in_child(NULL, host_mode) == 0);
    CHECK(in_child("0", host_mode) == 0);
    CHECK(in_child("yes", bad_value) == 0);
    return test_finish("test_devmem");
}
