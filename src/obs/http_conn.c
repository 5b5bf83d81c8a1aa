/* src/obs/http_conn.c: the HTTP server's sockets and its thread.
 *
 * Entry points (internal, http_internal.h): http_listen, http_watch_mhd,
 * http_serve_main, http_on_connection, http_close_sockets, http_now.
 *
 * We accept connections ourselves and hand each one to libmicrohttpd
 * (MHD_add_connection) only once its request header is complete: until
 * then the header is read with MSG_PEEK (nothing consumed, so MHD later
 * parses the same bytes) and checked for what MHD cannot see. MHD 0.9.75
 * (Debian 12) stores header values as C strings, so "Authorization: Bearer
 * <token>\0garbage" reached us as a valid token; a NUL anywhere in the
 * header is now answered 400 here (RFC 9110 section 5.5: field values never
 * contain NUL). Every response carries "Connection: close" (http.c), so each
 * request comes through this gate. One epoll set waits on the listening
 * socket, the pending connections (edge-triggered: each new segment wakes
 * us although the peeked bytes stay queued) and MHD's own epoll fd.
 *
 * Slow clients (issue 15, item 2): every exchange has a deadline of
 * obs.http.timeout_s from its first byte; a client that trickles a header
 * line a second is cut at the deadline. At obs.http.max_connections a new
 * connection evicts the oldest one that has not delivered a complete
 * request (pending, or idle in MHD), so holding every slot cannot starve
 * /metrics or the control API.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "obs/http_internal.h"

enum { TAG_LISTEN = 1, TAG_MHD = 2 }; /* epoll data of the two fixed fds */

double http_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void link_conn(mxp_obs_server *s, conn *k) {
    k->prev = NULL;
    k->next = s->conns;
    if (s->conns) s->conns->prev = k;
    s->conns = k;
    s->n_conns++;
}

static void unlink_conn(mxp_obs_server *s, conn *k) {
    if (k->prev) k->prev->next = k->next;
    else s->conns = k->next;
    if (k->next) k->next->prev = k->prev;
    s->n_conns--;
}

/* A pending connection ends here: closed, unlinked, freed. */
static void drop_pending(mxp_obs_server *s, conn *k) {
    epoll_ctl(s->ep, EPOLL_CTL_DEL, k->fd, NULL);
    close(k->fd);
    unlink_conn(s, k);
    free(k);
}

/* Cut a connection: pending ones are dropped at once; MHD's are shut down
 * (MHD sees the end of the stream and closes them). */
static void cut(mxp_obs_server *s, conn *k) {
    if (k->pending) {
        drop_pending(s, k);
        return;
    }
    if (k->cut) return;
    shutdown(k->fd, SHUT_RDWR);
    k->cut = true;
}

/* Over max_conns open connections, the oldest one not busy being answered
 * is cut (else the newcomer: every other one is being served and ends by
 * its deadline). */
static void make_room(mxp_obs_server *s, conn *newcomer) {
    int live = 0;
    conn *oldest = NULL;
    for (conn *x = s->conns; x; x = x->next) {
        if (x->cut) continue;
        live++;
        if (x != newcomer && !x->busy && (!oldest || x->since <= oldest->since)) oldest = x;
    }
    if (live <= s->max_conns) return;
    mxp_log(MXP_LOG_DEBUG, "http: %d connections: closing the oldest idle one", live);
    cut(s, oldest ? oldest : newcomer);
}

/* Answer 400 on a pending connection and close it. The peeked bytes are
 * read away first, so the close does not reset the connection before the
 * client has read the answer. */
static void refuse(mxp_obs_server *s, conn *k, const char *why) {
    char buf[HTTP_HEADER_MEMORY];
    while (recv(k->fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
    char body[256], msg[512];
    int bn = snprintf(body, sizeof body, "{\"error\":\"%s\"}\n", why);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nCache-Control: no-store\r\nConnection: close\r\n"
                     "\r\n%s", bn, body);
    if (send(k->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        mxp_log(MXP_LOG_DEBUG, "http: 400 not sent: %s", strerror(errno));
    shutdown(k->fd, SHUT_WR);
    mxp_log(MXP_LOG_DEBUG, "http: request refused: %s", why);
    drop_pending(s, k);
}

/* End of the header section in buf[0..n): the index after its blank line
 * (CRLF CRLF, or LF LF as MHD also accepts), or 0 when not there yet. */
static size_t header_end(const char *buf, size_t n) {
    for (size_t i = 1; i < n; i++) {
        if (buf[i] != '\n') continue;
        if (buf[i - 1] == '\n') return i + 1;
        if (i >= 3 && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return i + 1;
    }
    return 0;
}

static void hand_to_mhd(mxp_obs_server *s, conn *k) {
    epoll_ctl(s->ep, EPOLL_CTL_DEL, k->fd, NULL);
    k->pending = false;
    s->handing = k;
    /* MHD closes the socket itself when it cannot take it */
    if (MHD_add_connection(s->d, k->fd, (const struct sockaddr *)&k->addr, k->addrlen) !=
            MHD_YES &&
        s->handing == k) {
        unlink_conn(s, k);
        free(k);
    }
    s->handing = NULL;
}

/* Look at what a pending connection has sent so far. */
static void peek(mxp_obs_server *s, conn *k) {
    char buf[HTTP_HEADER_MEMORY];
    ssize_t n = recv(k->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { /* closed by the client, or an error */
        drop_pending(s, k);
        return;
    }
    const size_t end = header_end(buf, (size_t)n);
    if (memchr(buf, '\0', end ? end : (size_t)n)) {
        refuse(s, k, "a NUL byte in the request header; accepted: header fields without "
                     "NUL (RFC 9110 section 5.5)");
        return;
    }
    /* complete, or as much header as MHD takes (it answers 431) */
    if (end || (size_t)n == sizeof buf) hand_to_mhd(s, k);
}

static void accept_all(mxp_obs_server *s) {
    for (;;) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                mxp_log(MXP_LOG_DEBUG, "http: accept: %s", strerror(errno));
            return;
        }
        conn *k = calloc(1, sizeof *k);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = k};
        if (!k || epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            free(k);
            close(fd);
            continue;
        }
        k->fd = fd;
        k->pending = true;
        k->addr = a;
        k->addrlen = al;
        k->since = http_now();
        k->deadline = k->since + s->timeout_s;
        link_conn(s, k);
        make_room(s, k); /* may cut k itself */
    }
}

void http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    mxp_obs_server *s = cls;
    (void)c;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn *k = *socket_context;
        if (!k) return;
        unlink_conn(s, k);
        free(k);
        *socket_context = NULL;
        return;
    }
    /* started: only connections we hand over exist (no MHD listen socket) */
    *socket_context = s->handing;
    s->handing = NULL;
}

/* Cut every exchange past its deadline. */
static void enforce_deadlines(mxp_obs_server *s) {
    const double now = http_now();
    for (conn *k = s->conns, *next; k; k = next) {
        next = k->next;
        if (!k->cut && now >= k->deadline) {
            mxp_log(MXP_LOG_DEBUG, "http: request not complete after %g s: connection closed",
                    s->timeout_s);
            cut(s, k);
        }
    }
}

void *http_serve_main(void *arg) {
    mxp_obs_server *s = arg;
    struct epoll_event ev[32];
    while (!atomic_load(&s->quit)) {
        int wait_ms = HTTP_POLL_MS;
        MHD_UNSIGNED_LONG_LONG t = 0;
        if (MHD_get_timeout(s->d, &t) == MHD_YES && t < (MHD_UNSIGNED_LONG_LONG)wait_ms)
            wait_ms = (int)t;
        int n = epoll_wait(s->ep, ev, 32, wait_ms);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == TAG_LISTEN)
                accept_all(s);
            else if (ev[i].data.u64 != TAG_MHD) {
                conn *k = ev[i].data.ptr;
                /* a pending connection an earlier event of this batch dropped
                 * was freed: look it up before use */
                for (conn *x = s->conns; x; x = x->next)
                    if (x == k && x->pending) {
                        peek(s, k);
                        break;
                    }
            }
        }
        MHD_run(s->d);
        enforce_deadlines(s);
    }
    return NULL;
}

mxp_status http_listen(mxp_obs_server *s, const struct sockaddr *addr, socklen_t len,
                       mxp_error *err) {
    s->listen_fd = s->ep = -1;
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (addr->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (fd < 0 || bind(fd, addr, len) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound, &bl) != 0) {
        const int e = errno;
        if (fd >= 0) close(fd);
        return mxp_error_set(err, MXP_ERR_IO, "%s", strerror(e));
    }
    s->port = bound.ss_family == AF_INET6
                  ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                  : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    s->listen_fd = fd;
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
    if (s->ep < 0 || epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        const int e = errno;
        http_close_sockets(s);
        return mxp_error_set(err, MXP_ERR_IO, "epoll: %s", strerror(e));
    }
    return MXP_OK;
}

mxp_status http_watch_mhd(mxp_obs_server *s, mxp_error *err) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_MHD};
    if (!info || epoll_ctl(s->ep, EPOLL_CTL_ADD, info->epoll_fd, &ev) != 0)
        return mxp_error_set(err, MXP_ERR_IO, "cannot watch libmicrohttpd's epoll fd");
    return MXP_OK;
}

void http_close_sockets(mxp_obs_server *s) {
    for (conn *k = s->conns, *next; k; k = next) {
        next = k->next;
        if (k->pending) drop_pending(s, k);
    }
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->ep >= 0) close(s->ep);
    s->listen_fd = s->ep = -1;
}
