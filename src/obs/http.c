/* src/obs/http.c: the embedded HTTP server (libmicrohttpd, driven by one
 * thread of ours, http_conn.c) serving the metrics, the training API and
 * the dashboard of an observer: routes, handlers, the token.
 *
 * Entry points: mxp_obs_serve, mxp_obs_port, mxp_obs_stop_serving,
 * mxp_obs_token_equal (obs.h).
 *
 * Limits: 16 KiB of request header per connection (MHD answers 431/414
 * beyond), request bodies of at most 4 KiB (413, decided from
 * Content-Length before the body is read when it is given), one request
 * per connection ("Connection: close"). Handlers copy what they need under
 * the observer's lock and format afterwards; the training thread never
 * waits on a client. Slow clients, eviction and the header gate (a NUL in
 * the header is a 400 before MHD parses it): http_conn.c.
 * Answers: 404 unknown path, 405 (with Allow) wrong method, 400 malformed
 * query or body, a NUL byte in the header, HTTP/1.1 without Host, or a
 * repeated Content-Length; 401 missing/wrong bearer token (constant-time
 * compare); 403 control API disabled, 409 run not running, 413 body too
 * large.
 * Reference: https://www.gnu.org/software/libmicrohttpd/manual/
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "obs/http_internal.h"

#define MAX_BODY 4096
#define TOKEN_MAX MXP_OBS_TOKEN_MAX
#define TOKEN_MIN 8

typedef enum route {
    R_NOT_FOUND,
    R_DASHBOARD,
    R_METRICS,
    R_STATUS,
    R_STATS,
    R_EVENTS,
    R_EXPORT,
    R_PRECISION,
    R_COUNT
} route;

typedef struct request {
    route r;
    bool responded; /* an early answer was queued */
    bool too_big;
    size_t len;
    char body[MAX_BODY + 1];
} request;

bool mxp_obs_token_equal(const char *presented, size_t presented_len, const char *expected,
                         size_t expected_len) {
    /* Fixed 256-byte sweep; the lengths only enter through one XOR. */
    volatile unsigned char acc = (unsigned char)(presented_len != expected_len);
    for (size_t i = 0; i <= TOKEN_MAX; i++) {
        unsigned char a = i < presented_len ? (unsigned char)presented[i] : 0;
        unsigned char b = i < expected_len ? (unsigned char)expected[i] : 0;
        acc |= (unsigned char)(a ^ b);
    }
    return acc == 0 && presented_len <= TOKEN_MAX;
}

static route route_of(const char *url) {
    static const struct {
        const char *path;
        route r;
    } table[] = {
        {"/", R_DASHBOARD},
        {"/index.html", R_DASHBOARD},
        {"/metrics", R_METRICS},
        {"/api/training/status", R_STATUS},
        {"/api/training/stats", R_STATS},
        {"/api/training/events", R_EVENTS},
        {"/api/metrics/export", R_EXPORT},
        {"/api/training/precision", R_PRECISION},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(url, table[i].path) == 0) return table[i].r;
    return R_NOT_FOUND;
}

/* Queue a response with a copy of body. */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned code, const char *type,
                               const char *body, size_t len, const char *allow,
                               bool auth_challenge) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    /* one request per connection: each one passes http_conn.c's header gate */
    MHD_add_response_header(resp, "Connection", "close");
    if (allow) MHD_add_response_header(resp, "Allow", allow);
    if (auth_challenge)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"mixprec\"");
    enum MHD_Result ret = MHD_queue_response(c, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned code, const char *json) {
    return respond(c, code, "application/json", json, strlen(json), NULL, false);
}

/* {"error": msg} with msg JSON-escaped by jansson. */
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned code, const char *allow,
                                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned code, const char *allow,
                                     const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *j = json_pack("{s:s}", "error", msg);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    const char *body = s ? s : "{\"error\":\"?\"}";
    enum MHD_Result r = respond(c, code, "application/json", body, strlen(body), allow,
                                code == MHD_HTTP_UNAUTHORIZED);
    free(s);
    return r;
}

/* Serve a document built by one of the mxp_obs_*_json/render calls. */
static enum MHD_Result respond_doc(struct MHD_Connection *c, const char *type, mxp_status st,
                                   char *doc, size_t len, const mxp_error *err) {
    if (st != MXP_OK) {
        unsigned code = st == MXP_ERR_INVALID_ARG ? MHD_HTTP_BAD_REQUEST
                                                  : MHD_HTTP_INTERNAL_SERVER_ERROR;
        return respond_error(c, code, NULL, "%s", err->msg);
    }
    enum MHD_Result r = respond(c, MHD_HTTP_OK, type, doc, len ? len : strlen(doc), NULL, false);
    mxp_free(doc);
    return r;
}

/* Integer query argument in [lo, hi], or def when absent; false when
 * present but malformed or out of range. */
static bool query_int(struct MHD_Connection *c, const char *key, int64_t def, int64_t lo,
                      int64_t hi, int64_t *out) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
    if (!v) {
        *out = def;
        return true;
    }
    if (!*v || strlen(v) > 18) return false;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9') return false;
    long long x = strtoll(v, NULL, 10);
    if (x < lo || x > hi) return false;
    *out = x;
    return true;
}

static bool authorized(const mxp_obs_server *s, struct MHD_Connection *c) {
    const char *h = NULL;
    size_t hn = 0;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "Authorization", 13, &h, &hn) !=
            MHD_YES ||
        !h || strlen(h) != hn) /* a NUL inside the value (when MHD reports it) */
        return false;
    if (strncasecmp(h, "Bearer ", 7) != 0) return false;
    const char *tok = h + 7;
    while (*tok == ' ') tok++;
    size_t n = strlen(tok);
    while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t')) n--;
    return mxp_obs_token_equal(tok, n, s->token, s->token_len);
}

static enum MHD_Result handle_get(mxp_obs_server *s, struct MHD_Connection *c, route r) {
    mxp_obs *o = s->o;
    mxp_error err = {0};
    char *doc = NULL;
    size_t len = 0;
    int64_t a = 0, b = 0;
    mxp_status st;
    switch (r) {
    case R_DASHBOARD:
        return respond(c, MHD_HTTP_OK, "text/html; charset=utf-8", mxp_obs_dashboard_html,
                       strlen(mxp_obs_dashboard_html), NULL, false);
    case R_METRICS:
        st = mxp_metrics_render(o->reg, &doc, &len, &err);
        return respond_doc(c, "text/plain; version=0.0.4; charset=utf-8", st, doc, len, &err);
    case R_STATUS:
        st = mxp_obs_status_json(o, &doc, &err);
        return respond_doc(c, "application/json", st, doc, 0, &err);
    case R_STATS:
        st = mxp_obs_stats_json(o, &doc, &err);
        return respond_doc(c, "application/json", st, doc, 0, &err);
    case R_EVENTS:
        if (!query_int(c, "limit", 50, 1, MXP_OBS_EVENT_RING, &a))
            return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL,
                                 "limit: accepted an integer 1..%d", MXP_OBS_EVENT_RING);
        st = mxp_obs_events_json(o, a, &doc, &err);
        return respond_doc(c, "application/json", st, doc, 0, &err);
    case R_EXPORT:
        if (!query_int(c, "offset", 0, 0, INT64_MAX / 2, &a) ||
            !query_int(c, "limit", 1000, 1, 10000, &b))
            return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL,
                                 "offset: accepted an integer >= 0; limit: accepted 1..10000");
        st = mxp_obs_export_json(o, a, b, &doc, &err);
        return respond_doc(c, "application/json", st, doc, 0, &err);
    default:
        return respond_error(c, MHD_HTTP_NOT_FOUND, NULL, "not found");
    }
}

/* POST /api/training/precision with the complete body. */
static enum MHD_Result handle_precision(mxp_obs_server *s, struct MHD_Connection *c,
                                        request *rq) {
    if (rq->too_big)
        return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
                             "request body larger than %d bytes", MAX_BODY);
    json_error_t je;
    json_t *j = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL,
                             "body must be a JSON object like {\"mode\":\"fp32\"}");
    }
    const char *key;
    json_t *val;
    json_object_foreach(j, key, val) {
        if (strcmp(key, "mode") != 0 && strcmp(key, "reason") != 0) {
            json_decref(j);
            return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL,
                                 "unknown field; accepted: mode, reason");
        }
    }
    const char *mode = json_string_value(json_object_get(j, "mode"));
    mxp_precision p;
    if (!mode || mxp_precision_parse(mode, &p, NULL) != MXP_OK) {
        json_decref(j);
        return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL,
                             "mode: accepted fp32, mixed_bf16, mixed_fp16, bf16, fp16, fp8");
    }
    json_decref(j);
    mxp_obs *o = s->o;
    pthread_mutex_lock(&o->lock);
    bool running = o->begun && o->state == MXP_RUN_RUNNING;
    int64_t step = o->step;
    pthread_mutex_unlock(&o->lock);
    if (!running)
        return respond_error(c, MHD_HTTP_CONFLICT, NULL, "the run is not running");
    mxp_obs_request_precision(o, p, NULL);
    mxp_log(MXP_LOG_INFO, "control API: precision %s requested after step %lld",
            mxp_precision_name(p), (long long)step);
    char body[192];
    snprintf(body, sizeof body,
             "{\"accepted\":true,\"mode\":\"%s\",\"after_step\":%lld,"
             "\"applies\":\"next step boundary\"}",
             mxp_precision_name(p), (long long)step);
    return respond_json(c, MHD_HTTP_ACCEPTED, body);
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    (void)value;
    int *n = cls;
    if (strcasecmp(key, "Content-Length") == 0) (*n)++;
    return MHD_YES;
}

/* Why the request's headers are malformed, or NULL. */
static const char *bad_headers(struct MHD_Connection *c, const char *version) {
    if (strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
        !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))
        return "HTTP/1.1 request without a Host header (RFC 9112 section 3.2)";
    int n_cl = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &n_cl);
    if (n_cl > 1) return "more than one Content-Length header (RFC 9112 section 6.3)";
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    mxp_obs_server *s = cls;
    request *rq = *con_cls;
    bool is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                  strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    bool is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (!rq) {
        /* First call: headers only. Decide everything that needs no body. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci && ci->socket_context) ((conn *)ci->socket_context)->busy = true;
        const char *bad = bad_headers(c, version);
        if (bad) return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL, "%s", bad);
        route r = route_of(url);
        if (r == R_NOT_FOUND) return respond_error(c, MHD_HTTP_NOT_FOUND, NULL, "not found");
        if (r == R_PRECISION && !is_post)
            return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "POST", "use POST");
        if (r != R_PRECISION && !is_get)
            return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET, HEAD", "use GET");
        if (r != R_PRECISION) return handle_get(s, c, r);
        if (!s->control)
            return respond_error(c, MHD_HTTP_FORBIDDEN, NULL,
                                 "control API disabled: set obs.http.token_file");
        if (!authorized(s, c))
            return respond_error(c, MHD_HTTP_UNAUTHORIZED, NULL,
                                 "missing or wrong bearer token");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > MAX_BODY)
            return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
                                 "request body larger than %d bytes", MAX_BODY);
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        rq->r = r;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        if (rq->len + n > MAX_BODY)
            rq->too_big = true;
        else {
            memcpy(rq->body + rq->len, upload_data, n);
            rq->len += n;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (rq->responded) return MHD_YES;
    rq->responded = true;
    return handle_precision(s, c, rq);
}

/* A request ended: the connection's next exchange gets a fresh deadline. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    mxp_obs_server *s = cls;
    (void)toe;
    free(*con_cls);
    *con_cls = NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *k = ci ? ci->socket_context : NULL;
    if (!k) return;
    k->busy = false;
    k->since = http_now();
    k->deadline = k->since + s->timeout_s;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
    mxp_log(MXP_LOG_DEBUG, "http: %s", buf);
}

mxp_status mxp_obs_read_token(const char *path, char *token, size_t *token_len,
                              mxp_error *err) {
    int fd;
    mxp_error oe = {0};
    if (mxp_open_regular(path, O_NOFOLLOW, "obs.http.token_file", &fd, &oe) != MXP_OK)
        return mxp_error_set(err, MXP_ERR_CONFIG, "%s", oe.msg);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return mxp_error_set(err, MXP_ERR_CONFIG, "obs.http.token_file '%s': %s", path,
                             strerror(errno));
    }
    if (sb.st_mode & 077) {
        close(fd);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "obs.http.token_file '%s' has mode %04o; accepted: 0600 "
                             "(chmod 600 '%s')", path, (unsigned)(sb.st_mode & 07777), path);
    }
    char buf[TOKEN_MAX + 3];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return mxp_error_set(err, MXP_ERR_IO, "reading '%s' failed", path);
    buf[n] = '\0';
    size_t len = strcspn(buf, "\r\n");
    while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t')) len--;
    bool printable = true;
    for (size_t i = 0; i < len; i++) printable &= buf[i] > ' ' && buf[i] < 127;
    if (len < TOKEN_MIN || len > TOKEN_MAX || !printable)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "obs.http.token_file '%s': the first line must be the token, "
                             "%d..%d printable characters without spaces", path, TOKEN_MIN,
                             TOKEN_MAX);
    memcpy(token, buf, len);
    token[len] = '\0';
    *token_len = len;
    return MXP_OK;
}

/* 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. */
static bool is_loopback(const struct sockaddr *a) {
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
}

mxp_status mxp_obs_serve(mxp_obs *o, mxp_error *err) {
    if (!o) return mxp_error_set(err, MXP_ERR_INVALID_ARG, "mxp_obs_serve: NULL");
    if (o->server) return mxp_error_set(err, MXP_ERR_STATE, "mxp_obs_serve: already serving");
    const mxp_obs_settings *set = &o->set;
    if (set->http_max_connections < 1 || set->http_max_connections > 1024 ||
        set->http_timeout_s < 1 || set->http_timeout_s > 3600)
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "obs.http.max_connections=%lld obs.http.timeout_s=%lld; accepted: "
                             "1..1024 and 1..3600", (long long)set->http_max_connections,
                             (long long)set->http_timeout_s);
    mxp_obs_server *s = mxp_calloc(1, sizeof *s);
    if (!s) return mxp_error_set(err, MXP_ERR_OUT_OF_MEMORY, "HTTP server");
    s->o = o;
    if (set->token_file[0] && strcmp(set->token_file, "none") != 0) {
        if (!o->token_loaded) {
            mxp_status st = mxp_obs_read_token(set->token_file, o->token, &o->token_len, err);
            if (st != MXP_OK) {
                mxp_free(s);
                return st;
            }
            o->token_loaded = true;
        }
        memcpy(s->token, o->token, sizeof s->token);
        s->token_len = o->token_len;
        s->control = true;
    }
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    struct sockaddr *addr;
    const uint16_t port = (uint16_t)set->http_port;
    if (inet_pton(AF_INET, set->http_address, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons(port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, set->http_address, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons(port);
        addr = (struct sockaddr *)&a6;
    } else {
        mxp_free(s);
        return mxp_error_set(err, MXP_ERR_CONFIG,
                             "obs.http.address '%s'; accepted: an IPv4 or IPv6 address such as "
                             "127.0.0.1 or ::1", set->http_address);
    }
    s->max_conns = (int)set->http_max_connections;
    s->timeout_s = (double)set->http_timeout_s;
    atomic_init(&s->quit, false);
    mxp_error le = {0};
    if (http_listen(s, addr, addr == (struct sockaddr *)&a4 ? sizeof a4 : sizeof a6, &le) !=
        MXP_OK) {
        mxp_free(s);
        return mxp_error_set(err, MXP_ERR_IO,
                             "cannot serve HTTP on %s port %lld (in use, or not an address of "
                             "this machine: %s)", set->http_address, (long long)set->http_port,
                             le.msg);
    }
    /* no listening socket of its own: http_conn.c accepts and hands over */
    s->d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request,
        s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * set->http_max_connections),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)set->http_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_HEADER_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        http_on_connection, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_END);
    if (!s->d || http_watch_mhd(s, &le) != MXP_OK) {
        if (s->d) MHD_stop_daemon(s->d);
        http_close_sockets(s);
        mxp_free(s);
        return mxp_error_set(err, MXP_ERR_IO, "cannot start the HTTP server (libmicrohttpd)");
    }
    if (pthread_create(&s->th, NULL, http_serve_main, s) != 0) {
        MHD_stop_daemon(s->d);
        http_close_sockets(s);
        mxp_free(s);
        return mxp_error_set(err, MXP_ERR_STATE, "cannot start the HTTP server thread");
    }
    o->server = s;
    if (!s->control && !is_loopback(addr))
        mxp_log(MXP_LOG_WARN,
                "obs.http.address=%s is not a loopback address and no obs.http.token_file is "
                "set: anyone who can reach it reads this run's metrics, events and config "
                "(the control API stays off without a token); bind 127.0.0.1 or set a token",
                set->http_address);
    return MXP_OK;
}

int mxp_obs_port(const mxp_obs *o) { return o && o->server ? o->server->port : 0; }

void mxp_obs_stop_serving(mxp_obs *o) {
    if (!o || !o->server) return;
    atomic_store(&o->server->quit, true);
    pthread_join(o->server->th, NULL);
    http_close_sockets(o->server);
    MHD_stop_daemon(o->server->d);
    explicit_bzero(o->server->token, sizeof o->server->token);
    mxp_free(o->server);
    o->server = NULL;
}
