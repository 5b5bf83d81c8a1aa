/* src/obs/http_internal.h: what http.c (routes, handlers) and http_conn.c
 * (sockets: accept, the header gate, deadlines, eviction, the serve loop)
 * share. Everything here belongs to the server thread, except quit. */
#ifndef MXP_OBS_HTTP_INTERNAL_H
#define MXP_OBS_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "obs/obs_internal.h"

#define HTTP_HEADER_MEMORY (16 * 1024)
#define HTTP_POLL_MS 100 /* deadline granularity and stop latency */

/* One client connection: accepted by http_conn.c and held there ("pending")
 * until its request header is complete and clean, then handed to MHD,
 * whose socket context it becomes. */
typedef struct conn {
    struct conn *prev, *next;
    int fd;
    double deadline;  /* monotonic seconds: the exchange in progress ends by then */
    double since;     /* when that exchange began (eviction picks the oldest) */
    bool pending;     /* still ours: its header is being read (peeked) */
    bool busy;        /* a complete request is being answered */
    bool cut;         /* shut down; MHD closes it on its next pass */
    struct sockaddr_storage addr;
    socklen_t addrlen;
} conn;

struct mxp_obs_server {
    struct MHD_Daemon *d;
    mxp_obs *o;
    int port;
    bool control; /* a token is configured */
    char token[MXP_OBS_TOKEN_MAX + 1];
    size_t token_len;
    pthread_t th;
    atomic_bool quit;
    int listen_fd;
    int ep;         /* epoll: the listening socket, pending connections, MHD's epoll fd */
    conn *conns;    /* newest first */
    conn *handing;  /* the connection being passed to MHD_add_connection */
    int n_conns;
    int max_conns;  /* obs.http.max_connections */
    double timeout_s;
};

/* Bind and listen on addr (port 0: any free one, s->port gets the port). */
mxp_status http_listen(mxp_obs_server *s, const struct sockaddr *addr, socklen_t len,
                       mxp_error *err);
/* After MHD_start_daemon: watch MHD's own epoll fd too. */
mxp_status http_watch_mhd(mxp_obs_server *s, mxp_error *err);
/* The server thread's body (arg: the server). */
void *http_serve_main(void *arg);
/* MHD_OPTION_NOTIFY_CONNECTION callback: adopts the connection being
 * handed over as MHD's socket context, frees it when MHD closes it. */
void http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code);
/* Monotonic seconds. */
double http_now(void);
/* Close the listening socket, the epoll fd and every pending connection
 * (after the thread has stopped, before or after MHD_stop_daemon). */
void http_close_sockets(mxp_obs_server *s);

#endif
