/* tests/test_obs_http.c: the embedded HTTP server, spoken to over raw
 * loopback sockets (so malformed and slow requests can be sent).
 *
 * - routes: /metrics (Prometheus content type), JSON endpoints, the
 *   dashboard, HEAD; 404 unknown path; 405 with Allow on a wrong method;
 *   400 on malformed query values;
 * - control: 403 without a token file, 401 without or with a wrong bearer
 *   token (with WWW-Authenticate), 202 with the right one and the request
 *   taken at the next mxp_obs_take_precision_request, 400 on bad JSON,
 *   unknown fields or modes, 413 on a declared or a chunked oversized body;
 * - a token file readable by others is refused at start;
 * - hostile clients: a garbage request line and an oversized header get
 *   4xx; a client that stops mid-header does not block other clients nor
 *   the training thread and is dropped after the idle timeout; with all
 *   connection slots held by idle clients a new one is served at once (the
 *   oldest idle one is evicted);
 * - issue 15, items 2 and 6 (each failed before): a client trickling one
 *   header line every 100 ms is cut at the whole-request deadline (an idle
 *   timeout never fires for it); with every slot held by such clients and a
 *   30 s deadline, GET /metrics and the authorised FP32 switch are answered
 *   (eviction of the oldest unfinished connection); HTTP/1.1 without Host
 *   -> 400; two Content-Length headers -> 400; a bearer token followed by
 *   a NUL byte and more -> 400 (it was accepted: libmicrohttpd 0.9.75 ends
 *   the value at the NUL), as is a NUL in any header field; binding 0.0.0.0
 *   without a token logs a
 *   warning, 127.0.0.1 does not. Every wait is bounded (socket timeouts of
 *   10 s), none is a timing assertion.
 */
#include <mixprec/mixprec.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "testutil.h"

#define TOKEN "s3cret-token-for-tests"

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send raw, read the whole answer into resp; the status code, or -1 when
 * the connection closed without a status line. */
static int http_raw(int port, const char *raw, size_t len, char *resp, size_t cap) {
    resp[0] = '\0';
    int fd = connect_to(port);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, raw + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) break; /* the server may answer and close early */
        off += (size_t)n;
    }
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(fd, resp + got, cap - 1 - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
        if (got == cap - 1) break;
    }
    resp[got] = '\0';
    close(fd);
    int code = -1;
    if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1) return -1;
    return code;
}

static int http(int port, const char *req, char *resp, size_t cap) {
    return http_raw(port, req, strlen(req), resp, cap);
}

static const char *body_of(const char *resp) {
    const char *p = strstr(resp, "\r\n\r\n");
    return p ? p + 4 : "";
}

static int post(int port, const char *auth, const char *body, char *resp, size_t cap) {
    char req[8192];
    snprintf(req, sizeof req,
             "POST /api/training/precision HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s%s%s"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "", strlen(body),
             body);
    return http(port, req, resp, cap);
}

typedef struct fixture {
    mxp_model *m;
    mxp_trainer *t;
    float x[32], y[16];
    mxp_batch b;
} fixture;

static void fixture_init(fixture *f) {
    mxp_error err = {0};
    mxp_model_spec spec = mxp_model_spec_mlp(4, 8, 1, 2, MXP_LAYER_RELU, false, MXP_LOSS_MSE, 8);
    mxp_precision_policy pol;
    mxp_precision_policy_default(MXP_PRECISION_MIXED_BF16, &pol);
    CHECK_OK(mxp_model_create(&spec, &pol, 7, &f->m, &err), &err);
    mxp_trainer_config tc = mxp_trainer_config_default();
    CHECK_OK(mxp_trainer_create(f->m, &tc, &f->t, &err), &err);
    for (int i = 0; i < 32; i++) f->x[i] = (float)(i % 5) * 0.1f;
    for (int i = 0; i < 16; i++) f->y[i] = (float)(i % 3) * 0.2f;
    f->b = (mxp_batch){.x = f->x, .y = f->y, .labels = NULL, .B = 8};
}

static void train(fixture *f, mxp_obs *o, int n) {
    mxp_error err = {0};
    mxp_step_result res;
    for (int i = 0; i < n; i++) {
        CHECK_OK(mxp_trainer_step(f->t, &f->b, 1, &res, &err), &err);
        CHECK_OK(mxp_obs_record_step(o, 0, &res, 1e-4, &err), &err);
    }
}

static mxp_obs_settings settings(const char *token_file) {
    mxp_obs_settings s = {0};
    snprintf(s.http_address, sizeof s.http_address, "127.0.0.1");
    snprintf(s.token_file, sizeof s.token_file, "%s", token_file);
    s.http_port = 0;
    s.http_max_connections = 4;
    s.http_timeout_s = 1;
    s.flush_steps = 10;
    s.flush_seconds = 10;
    s.history_max = 100;
    return s;
}

static void test_routes_and_control(const char *dir, fixture *f) {
    char tok[600], resp[65536];
    snprintf(tok, sizeof tok, "%s/token", dir);
    FILE *tf = fopen(tok, "w");
    CHECK(tf != NULL);
    if (!tf) return;
    fprintf(tf, "%s\n", TOKEN);
    fclose(tf);
    mxp_error err = {0};
    mxp_obs *o = NULL;
    /* a token file others can read is refused */
    chmod(tok, 0644);
    mxp_obs_settings s = settings(tok);
    CHECK_OK(mxp_obs_create(&s, NULL, "http-run", &o, &err), &err);
    CHECK(mxp_obs_serve(o, &err) == MXP_ERR_CONFIG && strstr(err.msg, "0644"));
    chmod(tok, 0600);
    CHECK_OK(mxp_obs_serve(o, &err), &err);
    CHECK(mxp_obs_serve(o, &err) == MXP_ERR_STATE);
    int port = mxp_obs_port(o);
    CHECK(port > 0);

    /* before run_begin: control answers 409 */
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":\"fp32\"}", resp, sizeof resp) == 409);
    CHECK_OK(mxp_obs_run_begin(o, f->t, 100, 8, NULL, &err), &err);
    train(f, o, 12);

    CHECK(http(port, "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 200);
    CHECK(strstr(resp, "Content-Type: text/plain; version=0.0.4") != NULL);
    CHECK(strstr(resp, "\nmixprec_training_steps_total 12\n") != NULL);
    CHECK(strstr(resp, "mixprec_precision_info{mode=\"mixed_bf16\"} 1\n") != NULL);
    CHECK(http(port, "HEAD /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 200);
    CHECK(body_of(resp)[0] == '\0');
    CHECK(http(port, "GET /api/training/status HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 200);
    CHECK(strstr(resp, "application/json") && strstr(body_of(resp), "\"step\":12"));
    CHECK(http(port, "GET /api/training/stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 200);
    CHECK(strstr(body_of(resp), "\"training_steps\":12"));
    CHECK(http(port, "GET /api/metrics/export?offset=10&limit=5 HTTP/1.1\r\nHost: t\r\nConnection: "
                     "close\r\n\r\n", resp, sizeof resp) == 200);
    CHECK(strstr(body_of(resp), "\"step\":11,") && strstr(body_of(resp), "\"step\":12,") &&
          !strstr(body_of(resp), "\"step\":10,"));
    CHECK(http(port, "GET /api/training/events?limit=5 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
               resp, sizeof resp) == 200);
    CHECK(strstr(body_of(resp), "run_start"));
    CHECK(http(port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp, sizeof resp) == 200);
    CHECK(strstr(resp, "text/html") && strstr(resp, "chart-scale") &&
          !strstr(resp, "src=\"http") && !strstr(resp, "href=\"http"));

    /* errors of the read API */
    CHECK(http(port, "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp, sizeof resp) ==
          404);
    CHECK(http(port, "DELETE /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 405);
    CHECK(strstr(resp, "Allow: GET, HEAD") != NULL);
    CHECK(http(port, "GET /api/training/precision HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 405);
    CHECK(http(port, "GET /api/metrics/export?limit=abc HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
               resp, sizeof resp) == 400);
    CHECK(http(port, "GET /api/metrics/export?limit=0 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
               resp, sizeof resp) == 400);
    CHECK(http(port, "GET /api/metrics/export?offset=-3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
               resp, sizeof resp) == 400);

    /* authentication */
    CHECK(post(port, NULL, "{\"mode\":\"fp32\"}", resp, sizeof resp) == 401);
    CHECK(strstr(resp, "WWW-Authenticate: Bearer") != NULL);
    CHECK(post(port, "Bearer wrong-token-value", "{\"mode\":\"fp32\"}", resp, sizeof resp) ==
          401);
    CHECK(post(port, "Bearer " TOKEN "x", "{\"mode\":\"fp32\"}", resp, sizeof resp) == 401);
    CHECK(post(port, "Basic " TOKEN, "{\"mode\":\"fp32\"}", resp, sizeof resp) == 401);
    mxp_precision p;
    CHECK(!mxp_obs_take_precision_request(o, &p));
    /* malformed bodies */
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":", resp, sizeof resp) == 400);
    CHECK(post(port, "Bearer " TOKEN, "[\"fp32\"]", resp, sizeof resp) == 400);
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":\"fp64\"}", resp, sizeof resp) == 400);
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":\"fp32\",\"x\":1}", resp, sizeof resp) == 400);
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":\"fp32\",\"mode\":\"fp16\"}", resp,
               sizeof resp) == 400);
    CHECK(!mxp_obs_take_precision_request(o, &p));
    /* the right token */
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":\"fp32\",\"reason\":\"drill\"}", resp,
               sizeof resp) == 202);
    CHECK(strstr(body_of(resp), "\"mode\":\"fp32\"") && strstr(body_of(resp), "\"after_step\":12"));
    CHECK(mxp_obs_take_precision_request(o, &p) && p == MXP_PRECISION_FP32);
    /* oversized bodies: declared, and chunked without a length */
    char big[6000];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    big[0] = '{';
    big[sizeof big - 2] = '}';
    CHECK(post(port, "Bearer " TOKEN, big, resp, sizeof resp) == 413);
    char chunked[8000];
    int n = snprintf(chunked, sizeof chunked,
                     "POST /api/training/precision HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                     "Authorization: Bearer " TOKEN "\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "1388\r\n");
    memset(chunked + n, ' ', 5000);
    n += 5000;
    n += snprintf(chunked + n, sizeof chunked - (size_t)n, "\r\n0\r\n\r\n");
    CHECK(http_raw(port, chunked, (size_t)n, resp, sizeof resp) == 413);

    /* hostile requests */
    /* a line that is not HTTP at all is closed without an answer */
    CHECK(http(port, "BLAH\r\n\r\n", resp, sizeof resp) == -1);
    CHECK(http(port, "GET /metrics\r\n\r\n", resp, sizeof resp) == 400);
    CHECK(http(port, "GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", resp, sizeof resp) ==
          400);
    CHECK(http(port, "BREW / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp, sizeof resp) == 405);
    int code;
    static char huge[40000];
    int hn = snprintf(huge, sizeof huge, "GET /metrics HTTP/1.1\r\nX-Big: ");
    memset(huge + hn, 'a', 30000);
    hn += 30000;
    hn += snprintf(huge + hn, sizeof huge - (size_t)hn, "\r\nConnection: close\r\n\r\n");
    code = http_raw(port, huge, (size_t)hn, resp, sizeof resp);
    CHECK_MSG(code >= 400 && code < 500, "oversized header: %d", code);

    /* a client stuck mid-header blocks neither others nor training */
    int slow = connect_to(port);
    CHECK(slow >= 0);
    const char *part = "GET /metrics HTTP/1.1\r\nHo";
    CHECK(send(slow, part, strlen(part), MSG_NOSIGNAL) == (ssize_t)strlen(part));
    train(f, o, 20);
    CHECK(http(port, "GET /api/training/status HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
               sizeof resp) == 200);
    CHECK(strstr(body_of(resp), "\"step\":32"));
    char buf[256];
    ssize_t r = recv(slow, buf, sizeof buf, 0); /* the server drops it after 1 s idle */
    CHECK_MSG(r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK),
              "idle client not dropped: recv %zd errno %d", r, errno);
    close(slow);

    /* all slots held by idle clients: a new client waits in the backlog
     * until the idle ones are dropped (1 s), then is served */
    int idle[4];
    for (int i = 0; i < 4; i++) idle[i] = connect_to(port);
    usleep(200 * 1000);
    train(f, o, 5);
    CHECK(http(port, "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp, sizeof resp) ==
          200);
    for (int i = 0; i < 4; i++) {
        CHECK(idle[i] >= 0);
        if (idle[i] < 0) continue;
        r = recv(idle[i], buf, sizeof buf, 0);
        CHECK(r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)));
        close(idle[i]);
    }
    mxp_obs_destroy(o);

    /* no token file: control disabled */
    s = settings("none");
    CHECK_OK(mxp_obs_create(&s, NULL, NULL, &o, &err), &err);
    CHECK_OK(mxp_obs_serve(o, &err), &err);
    CHECK(post(mxp_obs_port(o), "Bearer " TOKEN, "{\"mode\":\"fp32\"}", resp, sizeof resp) ==
          403);
    mxp_obs_stop_serving(o);
    CHECK(mxp_obs_port(o) == 0);
    mxp_obs_destroy(o);
    /* bad addresses */
    s = settings("none");
    snprintf(s.http_address, sizeof s.http_address, "localhost");
    CHECK_OK(mxp_obs_create(&s, NULL, NULL, &o, &err), &err);
    CHECK(mxp_obs_serve(o, &err) == MXP_ERR_CONFIG);
    mxp_obs_destroy(o);
    snprintf(tok, sizeof tok, "%s/missing", dir);
    s = settings(tok);
    CHECK_OK(mxp_obs_create(&s, NULL, NULL, &o, &err), &err);
    CHECK(mxp_obs_serve(o, &err) == MXP_ERR_CONFIG);
    mxp_obs_destroy(o);
}

/* ---- slow and greedy clients, header rules (issue 15) --------------------------- */

/* A socket that sent the start of a request and no end of headers. */
static int half_request(int port) {
    int fd = connect_to(port);
    const char *part = "GET /metrics HTTP/1.1\r\nHost: t\r\n";
    if (fd >= 0 && send(fd, part, strlen(part), MSG_NOSIGNAL) != (ssize_t)strlen(part)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* True once the server closed fd (EOF or reset), polling up to wait_ms. */
static bool closed_by_server(int fd, int wait_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return false;
    char buf[64];
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static int g_warned_open; /* log lines about an open bind address */
static void capture_log(void *user, mxp_log_level level, const char *msg) {
    (void)user;
    if (level >= MXP_LOG_WARN && strstr(msg, "not a loopback address")) g_warned_open++;
}

static void test_hostile_clients(const char *dir, fixture *f) {
    char tok[600], resp[65536];
    snprintf(tok, sizeof tok, "%s/token", dir);
    mxp_error err = {0};
    mxp_obs *o = NULL;

    /* slowloris: one header line every 100 ms keeps an idle timeout from
     * ever firing; the deadline of the whole request (1 s) cuts it */
    mxp_obs_settings s = settings(tok);
    s.http_timeout_s = 1;
    CHECK_OK(mxp_obs_create(&s, NULL, "slow-run", &o, &err), &err);
    CHECK_OK(mxp_obs_serve(o, &err), &err);
    CHECK_OK(mxp_obs_run_begin(o, f->t, 100, 8, NULL, &err), &err);
    int port = mxp_obs_port(o);
    int slow = half_request(port);
    CHECK(slow >= 0);
    bool cut = false;
    for (int i = 0; i < 100 && slow >= 0 && !cut; i++) { /* at most ~10 s */
        char line[32];
        int n = snprintf(line, sizeof line, "X-Slow-%d: x\r\n", i);
        cut = send(slow, line, (size_t)n, MSG_NOSIGNAL) < 0 || closed_by_server(slow, 100);
    }
    CHECK_MSG(cut, "a client sending a header line every 100 ms was never disconnected");
    if (slow >= 0) close(slow);

    /* header rules */
    CHECK(http(port, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n", resp, sizeof resp) ==
          400);
    CHECK(strstr(body_of(resp), "Host") != NULL);
    CHECK(http(port, "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp) == 200); /* 1.0: no Host */
    char two_cl[512];
    snprintf(two_cl, sizeof two_cl,
             "POST /api/training/precision HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
             "Authorization: Bearer " TOKEN "\r\nContent-Length: 15\r\nContent-Length: 15\r\n"
             "\r\n{\"mode\":\"fp32\"}");
    CHECK_MSG(http(port, two_cl, resp, sizeof resp) == 400, "two Content-Length: %.60s", resp);
    mxp_precision p;
    CHECK(!mxp_obs_take_precision_request(o, &p));
    /* "Bearer <token>\0garbage": the token is not the header's value */
    static const char nul_req[] =
        "POST /api/training/precision HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        "Authorization: Bearer " TOKEN "\0garbage\r\nContent-Length: 15\r\n\r\n"
        "{\"mode\":\"fp32\"}";
    CHECK_MSG(http_raw(port, nul_req, sizeof nul_req - 1, resp, sizeof resp) == 400,
              "token + NUL + garbage: %.80s", resp);
    CHECK(strstr(body_of(resp), "NUL") != NULL);
    CHECK(!mxp_obs_take_precision_request(o, &p));
    /* a NUL in any header field, on a GET, also before the header is complete */
    static const char nul_get[] = "GET /metrics HTTP/1.1\r\nHost: t\0x\r\n\r\n";
    CHECK(http_raw(port, nul_get, sizeof nul_get - 1, resp, sizeof resp) == 400);
    static const char nul_part[] = "GET /metrics HTTP/1.1\r\nX-A: \0";
    CHECK(http_raw(port, nul_part, sizeof nul_part - 1, resp, sizeof resp) == 400);
    /* and the same request without the NUL is served */
    CHECK(http(port, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", resp, sizeof resp) == 200);
    mxp_obs_destroy(o);

    /* every slot held by clients that trickle their headers, with a 30 s
     * deadline: /metrics and the operator's switch are still answered */
    s = settings(tok);
    s.http_timeout_s = 30;
    CHECK_OK(mxp_obs_create(&s, NULL, "greedy-run", &o, &err), &err);
    CHECK_OK(mxp_obs_serve(o, &err), &err);
    CHECK_OK(mxp_obs_run_begin(o, f->t, 100, 8, NULL, &err), &err);
    port = mxp_obs_port(o);
    int held[4];
    for (int i = 0; i < 4; i++) {
        held[i] = half_request(port);
        CHECK(held[i] >= 0);
        usleep(20 * 1000); /* distinct arrival order */
    }
    CHECK_MSG(http(port, "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", resp,
                   sizeof resp) == 200, "/metrics starved by 4 slow clients: %.80s", resp);
    CHECK(post(port, "Bearer " TOKEN, "{\"mode\":\"fp32\"}", resp, sizeof resp) == 202);
    CHECK(mxp_obs_take_precision_request(o, &p) && p == MXP_PRECISION_FP32);
    /* the oldest made room (once: the GET's own connection closed before
     * the POST came); the others are still open */
    CHECK(held[0] >= 0 && closed_by_server(held[0], 10000));
    CHECK(held[1] >= 0 && !closed_by_server(held[1], 0));
    CHECK(held[3] >= 0 && !closed_by_server(held[3], 0));
    for (int i = 0; i < 4; i++)
        if (held[i] >= 0) close(held[i]);
    mxp_obs_destroy(o);

    /* an open bind address without a token is worth a warning */
    mxp_log_set_callback(capture_log, NULL);
    s = settings("none");
    snprintf(s.http_address, sizeof s.http_address, "0.0.0.0");
    CHECK_OK(mxp_obs_create(&s, NULL, NULL, &o, &err), &err);
    CHECK_OK(mxp_obs_serve(o, &err), &err);
    mxp_obs_destroy(o);
    CHECK(g_warned_open == 1);
    s = settings("none");
    CHECK_OK(mxp_obs_create(&s, NULL, NULL, &o, &err), &err);
    CHECK_OK(mxp_obs_serve(o, &err), &err);
    mxp_obs_destroy(o);
    CHECK(g_warned_open == 1);
    mxp_log_set_callback(NULL, NULL);
}

int main(void) {
    char dir[] = "/tmp/mixprec_test_obs_http_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    fixture f;
    fixture_init(&f);
    test_routes_and_control(dir, &f);
    test_hostile_clients(dir, &f);
    mxp_trainer_destroy(f.t);
    mxp_model_destroy(f.m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", dir);
    return test_finish("test_obs_http");
}
