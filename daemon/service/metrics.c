/*
 * metrics — see metrics.h. A deliberately small HTTP/1.0 server: one
 * request per connection, answered from the daemon's state on the loop
 * thread the moment its head has arrived, then closed. Everything a
 * scraper sends is untrusted: the head is bounded (METRICS_HEAD_MAX) and
 * must arrive within METRICS_HEAD_MS, a connection lives at most
 * METRICS_DEADLINE_MS, and anything that is not a plain GET or HEAD gets a
 * 4xx status and the door. At most METRICS_MAX_CONNS are open at once; a
 * new connection past that closes the oldest instead of being refused, so
 * connections that hang (slow or hostile local users) cannot keep a
 * scraper out.
 *
 * After the answer is written the connection is shut down for writing and
 * read (and discarded) until the peer closes: closing with unread input
 * would make the kernel send a reset, which can destroy the answer before
 * the peer has read it.
 *
 * Each connection embeds its stream and a timer and is freed only from the
 * close callback of the last of them; the gmd_metrics itself is freed once
 * metrics_stop() was called and the listener and every connection have
 * closed.
 */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "config.h"
#include "log.h"
#include "metrics_render.h"
#include "snapshot.h"
#include "promtext.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"
#include "vram.h"

#define METRICS_HEAD_MAX    8192      /* bytes of request line and headers */
#define METRICS_HEAD_MS     2000      /* until the request's head is in */
#define METRICS_DEADLINE_MS 5000      /* a connection's whole life */
#define METRICS_MAX_CONNS   16

/* Either kind of stream the endpoint listens on or talks over. */
typedef union metrics_stream {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
} metrics_stream;

struct gmd_metrics {
        gmd_server *server;
        bool is_unix;
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
        metrics_stream listener;
        bool listener_open;           /* until its close callback */
        gmd_list conns;               /* open connections */
        unsigned n_conns;             /* allocated, closing ones too */
        bool evicting;                /* at the cap; logged once per spell */
        bool accept_deferred;         /* a connection waits in the listener */
        bool stopping;
};

typedef struct metrics_conn {
        gmd_metrics *metrics;
        gmd_list link;                /* in metrics->conns while open */
        metrics_stream stream;
        uv_timer_t timer;
        unsigned open_handles;        /* freed when it reaches 0 */
        bool closing;
        bool answered;                /* input is discarded from now on */
        bool written;                 /* the answer is with the kernel */
        bool peer_done;               /* the peer shut down its side */
        uv_write_t write_req;
        uv_shutdown_t shutdown_req;
        char status[192];             /* status line and headers */
        promtext body;
        bool line_done;               /* the request line was judged: */
        int code;                     /* ... 0 (metrics) or a 4xx status */
        bool head_only;               /* ... HEAD */
        size_t scanned;               /* bytes of head[] looked at */
        size_t len;
        char head[METRICS_HEAD_MAX];
} metrics_conn;

/* ---- connections ---------------------------------------------------- */

static void metrics_maybe_free(gmd_metrics *m)
{
        if (m->stopping && !m->listener_open && m->n_conns == 0)
                free(m);
}

static void metrics_on_connection(uv_stream_t *listener, int status);

static void conn_on_close(uv_handle_t *handle)
{
        metrics_conn *conn = handle->data;
        gmd_metrics *m = conn->metrics;

        if (--conn->open_handles > 0)
                return;
        promtext_clear(&conn->body);
        free(conn);
        m->n_conns--;
        /* Room again for the connection left waiting (see
         * metrics_on_connection). */
        if (m->accept_deferred && !m->stopping && m->listener_open) {
                m->accept_deferred = false;
                metrics_on_connection(&m->listener.stream, 0);
        }
        metrics_maybe_free(m);
}

static void conn_close(metrics_conn *conn)
{
        if (conn->closing)
                return;
        conn->closing = true;
        list_remove(&conn->link);
        uv_close(&conn->stream.handle, conn_on_close);
        uv_close((uv_handle_t *)&conn->timer, conn_on_close);
}

static void conn_on_timeout(uv_timer_t *timer)
{
        metrics_conn *conn = timer->data;

        log_debug("metrics: closing a connection: %s", conn->answered ?
                  "its answer was not read in time" : "no request in time");
        conn_close(conn);
}

static void conn_on_shutdown(uv_shutdown_t *req, int status)
{
        metrics_conn *conn = req->data;

        /* On success keep reading until the peer closes (or the deadline). */
        if (status < 0)
                conn_close(conn);
}

static void conn_on_written(uv_write_t *req, int status)
{
        metrics_conn *conn = req->data;

        if (conn->closing)
                return;
        conn->written = true;
        if (status < 0 || conn->peer_done ||
            uv_shutdown(&conn->shutdown_req, &conn->stream.stream,
                        conn_on_shutdown) < 0)
                conn_close(conn);
}

static const char *status_reason(int code)
{
        switch (code) {
        case 200: return "OK";
        case 400: return "Bad Request";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 431: return "Request Header Fields Too Large";
        default:  return "Internal Server Error";
        }
}

static void conn_answer(metrics_conn *conn, int code, bool head_only)
{
        uv_buf_t bufs[2];

        conn->answered = true;
        /* The rest of its life, from its start, to read the answer. */
        uv_timer_start(&conn->timer, conn_on_timeout,
                       METRICS_DEADLINE_MS - METRICS_HEAD_MS, 0);
        if (code == 200) {
                gmd_server *server = conn->metrics->server;
                gmd_snapshot snap;

                for (unsigned d = 0; d < server->devices.n; d++)
                        (void)vram_refresh(server, d);
                if (snapshot_take(server, 0, NULL, &snap) < 0) {
                        conn->body.failed = true;
                } else {
                        metrics_render(&conn->body, &snap,
                                       conn->metrics->server->config.metrics_clients);
                        snapshot_clear(&snap);
                }
                if (conn->body.failed) {
                        log_error("metrics: out of memory rendering a scrape");
                        promtext_clear(&conn->body);
                        code = 500;
                }
        }
        if (code != 200)
                promtext_printf(&conn->body, "%d %s\n", code, status_reason(code));
        if (conn->body.failed) {
                conn_close(conn);
                return;
        }
        snprintf(conn->status, sizeof(conn->status),
                 "HTTP/1.0 %d %s\r\n"
                 "Content-Type: %s\r\n"
                 "Content-Length: %zu\r\n"
                 "%s"
                 "Connection: close\r\n\r\n",
                 code, status_reason(code),
                 code == 200 ? "text/plain; version=0.0.4; charset=utf-8" :
                 "text/plain; charset=utf-8", conn->body.len,
                 code == 405 ? "Allow: GET, HEAD\r\n" : "");
        bufs[0] = uv_buf_init(conn->status, (unsigned)strlen(conn->status));
        bufs[1] = uv_buf_init(conn->body.data, (unsigned)conn->body.len);
        if (uv_write(&conn->write_req, &conn->stream.stream, bufs,
                     head_only ? 1 : 2, conn_on_written) < 0)
                conn_close(conn);
}

static bool is_token_char(char c)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
               (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

/*
 * Judge the request line "METHOD SP TARGET SP HTTP/1.x" (without its line
 * end): the status to answer, or 0 when it asks for the metrics. Sets
 * *ret_head_only for HEAD.
 */
static int request_line_status(const char *line, size_t len, bool *ret_head_only)
{
        const char *sp1, *sp2, *target;
        size_t method_len, target_len, path_len;

        for (size_t i = 0; i < len; i++)
                if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] >= 0x7f)
                        return 400;
        sp1 = memchr(line, ' ', len);
        if (!sp1 || sp1 == line)
                return 400;
        method_len = (size_t)(sp1 - line);
        for (size_t i = 0; i < method_len; i++)
                if (!is_token_char(line[i]))
                        return 400;
        target = sp1 + 1;
        sp2 = memchr(target, ' ', len - method_len - 1);
        if (!sp2 || sp2 == target || *target != '/')
                return 400;
        target_len = (size_t)(sp2 - target);
        if (len - (size_t)(sp2 + 1 - line) != 8 ||
            (memcmp(sp2 + 1, "HTTP/1.0", 8) != 0 &&
             memcmp(sp2 + 1, "HTTP/1.1", 8) != 0))
                return 400;

        *ret_head_only = method_len == 4 && memcmp(line, "HEAD", 4) == 0;
        if (!*ret_head_only && !(method_len == 3 && memcmp(line, "GET", 3) == 0))
                return 405;
        /* The query is ignored. head[] holds no NUL: no str*() here. */
        for (path_len = 0; path_len < target_len && target[path_len] != '?';
             path_len++)
                ;
        if ((path_len == 1) ||
            (path_len == 8 && memcmp(target, "/metrics", 8) == 0))
                return 0;
        return 404;
}

/*
 * Look at what has arrived: answer as soon as the request line is bad or
 * the whole head is in. Each byte is looked at a bounded number of times
 * (`scanned` remembers how far), so a peer that sends one byte at a time
 * costs linear work, not quadratic.
 */
static void conn_parse(metrics_conn *conn)
{
        size_t i;

        if (!conn->line_done) {
                const char *eol = memchr(conn->head + conn->scanned, '\n',
                                         conn->len - conn->scanned);
                size_t line_len;

                if (!eol) {
                        conn->scanned = conn->len;
                        if (conn->len == sizeof(conn->head))
                                conn_answer(conn, 400, false);
                        return;
                }
                line_len = (size_t)(eol - conn->head);
                conn->scanned = line_len;       /* the blank line may follow */
                if (line_len > 0 && conn->head[line_len - 1] == '\r')
                        line_len--;
                conn->line_done = true;
                conn->code = request_line_status(conn->head, line_len,
                                                 &conn->head_only);
                if (conn->code == 400) {
                        conn_answer(conn, 400, false);
                        return;
                }
        }
        /* The head ends with an empty line. */
        for (i = conn->scanned; i < conn->len; i++) {
                if (conn->head[i] != '\n')
                        continue;
                if ((i + 1 < conn->len && conn->head[i + 1] == '\n') ||
                    (i + 2 < conn->len && conn->head[i + 1] == '\r' &&
                     conn->head[i + 2] == '\n')) {
                        conn_answer(conn, conn->code ? conn->code : 200,
                                    conn->head_only);
                        return;
                }
        }
        /* A line end in the last two bytes may yet start the blank line. */
        if (conn->len >= 2 && conn->len - 2 > conn->scanned)
                conn->scanned = conn->len - 2;
        if (conn->len == sizeof(conn->head))
                conn_answer(conn, 431, false);
}

static void conn_on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
        metrics_conn *conn = handle->data;

        /* Once answered, the head buffer is scratch for discarded input. */
        if (conn->answered)
                conn->len = 0;
        *buf = uv_buf_init(conn->head + conn->len,
                           (unsigned)(sizeof(conn->head) - conn->len));
}

static void conn_on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf)
{
        metrics_conn *conn = stream->data;

        if (n == UV_EOF && conn->answered && !conn->written) {
                /* A peer that half-closed after its request still gets
                 * the answer: closing now would cancel the write. */
                conn->peer_done = true;
                uv_read_stop(stream);
                return;
        }
        if (n < 0) {
                /* EOF or error: nothing more to say either way. */
                conn_close(conn);
                return;
        }
        if (conn->answered || n == 0)
                return;
        conn->len += (size_t)n;
        conn_parse(conn);
}

static void free_handle(uv_handle_t *handle)
{
        free(handle);
}

/* Accept and drop one connection: the cap is reached. */
static void metrics_refuse(gmd_metrics *m)
{
        metrics_stream *s = malloc(sizeof(*s));
        int r;

        if (!s)
                return;
        r = m->is_unix ? uv_pipe_init(m->server->loop, &s->pipe, 0) :
                         uv_tcp_init(m->server->loop, &s->tcp);
        if (r < 0) {
                free(s);
                return;
        }
        uv_accept(&m->listener.stream, &s->stream);
        uv_close(&s->handle, free_handle);
}

static void metrics_on_connection(uv_stream_t *listener, int status)
{
        gmd_metrics *m = listener->data;
        metrics_conn *conn;
        int r;

        if (status < 0) {
                log_warning("metrics: accept: %s", uv_strerror(status));
                return;
        }
        if (m->n_conns >= METRICS_MAX_CONNS && !list_empty(&m->conns) &&
            m->n_conns < 2 * METRICS_MAX_CONNS) {
                /* The oldest has had the longest to send its request. */
                if (!m->evicting)
                        log_warning("metrics: %d connections open; closing the "
                                    "oldest for each new one", METRICS_MAX_CONNS);
                m->evicting = true;
                conn_close(container_of(m->conns.next, metrics_conn, link));
        } else if (m->n_conns >= METRICS_MAX_CONNS) {
                /* As many again are closing and not yet gone: their close
                 * callbacks come in the loop's next turn, but one accept
                 * burst can bring more than 2 * METRICS_MAX_CONNS (40
                 * connections waiting when the loop gets to them, as on a
                 * loaded machine). Refusing would refuse the newest, the
                 * scraper among them; instead this one stays unaccepted
                 * (libuv stops polling the listener until uv_accept) and
                 * is taken when a closing one is gone (conn_on_close). */
                m->accept_deferred = true;
                return;
        } else {
                m->evicting = false;
        }
        conn = calloc(1, sizeof(*conn));
        if (!conn) {
                log_error("metrics: out of memory for a connection");
                metrics_refuse(m);
                return;
        }
        conn->metrics = m;
        promtext_init(&conn->body);
        list_init(&conn->link);
        r = m->is_unix ? uv_pipe_init(m->server->loop, &conn->stream.pipe, 0) :
                         uv_tcp_init(m->server->loop, &conn->stream.tcp);
        if (r < 0) {
                free(conn);
                metrics_refuse(m);
                return;
        }
        conn->stream.handle.data = conn;
        conn->write_req.data = conn;
        conn->shutdown_req.data = conn;
        uv_timer_init(m->server->loop, &conn->timer);  /* cannot fail */
        conn->timer.data = conn;
        conn->open_handles = 2;
        m->n_conns++;
        list_add_tail(&m->conns, &conn->link);

        r = uv_accept(listener, &conn->stream.stream);
        if (r == 0)
                r = uv_read_start(&conn->stream.stream, conn_on_alloc, conn_on_read);
        if (r == 0)
                r = uv_timer_start(&conn->timer, conn_on_timeout,
                                   METRICS_HEAD_MS, 0);
        if (r < 0) {
                log_warning("metrics: cannot take a connection: %s", uv_strerror(r));
                conn_close(conn);
        }
}

/* ---- listening ------------------------------------------------------ */

/* Where [metrics] listen was set, for a message about serving it: the
 * value itself was checked when it was read (config_listen_parse), so
 * what fails here is the machine (a port taken, a directory missing). */
static const char *listen_origin(const gmd_metrics *m, char *buf, size_t len)
{
        return config_origin(&m->server->config, "metrics", "listen", buf, len);
}

static int listen_tcp(gmd_metrics *m, const char *listen,
                      const struct sockaddr_storage *where)
{
        struct sockaddr_storage addr = *where;
        int len = sizeof(addr), r;
        char host[64], origin[PATH_MAX + 16];

        uv_tcp_init(m->server->loop, &m->listener.tcp);
        m->listener_open = true;
        m->listener.handle.data = m;
        r = uv_tcp_bind(&m->listener.tcp, (const struct sockaddr *)&addr,
                        addr.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
        if (r == 0)
                r = uv_listen(&m->listener.stream, 16, metrics_on_connection);
        if (r == 0)
                r = uv_tcp_getsockname(&m->listener.tcp, (struct sockaddr *)&addr,
                                       &len);
        if (r < 0) {
                log_error("metrics: cannot listen on %s: %s (key 'listen' in "
                          "[metrics], %s)%s", listen, uv_strerror(r),
                          listen_origin(m, origin, sizeof(origin)),
                          r == UV_EADDRINUSE ? ": another process holds the "
                          "port; choose another" : "");
                return r;
        }
        if (addr.ss_family == AF_INET6) {
                uv_ip6_name((struct sockaddr_in6 *)&addr, host, sizeof(host));
                log_info("metrics: serving http://[%s]:%u/metrics", host,
                         ntohs(((struct sockaddr_in6 *)&addr)->sin6_port));
        } else {
                uv_ip4_name((struct sockaddr_in *)&addr, host, sizeof(host));
                log_info("metrics: serving http://%s:%u/metrics", host,
                         ntohs(((struct sockaddr_in *)&addr)->sin_port));
        }
        return 0;
}

/* Remove a socket file left by a daemon that died; refuse a live one or
 * a file that is not a socket. */
static int unix_claim_path(const gmd_metrics *m, const char *path)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        char origin[PATH_MAX + 16];
        struct stat st;
        int fd, r;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode)) {
                log_error("metrics: %s exists and is not a socket (key 'listen' "
                          "in [metrics], %s): remove it or choose another path",
                          path, listen_origin(m, origin, sizeof(origin)));
                return -EEXIST;
        }
        strcpy(addr.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        r = connect(fd, (const struct sockaddr *)&addr, sizeof(addr));
        close(fd);
        if (r == 0) {
                log_error("metrics: another process is serving %s (key 'listen' "
                          "in [metrics], %s)", path,
                          listen_origin(m, origin, sizeof(origin)));
                return -EADDRINUSE;
        }
        if (unlink(path) < 0) {
                r = -errno;
                log_error("metrics: cannot remove the stale socket %s: %s", path,
                          strerror(-r));
                return r;
        }
        return 0;
}

static int listen_unix(gmd_metrics *m, const char *path)
{
        char origin[PATH_MAX + 16];
        int r;

        r = unix_claim_path(m, path);
        if (r < 0)
                return r;
        uv_pipe_init(m->server->loop, &m->listener.pipe, 0);
        m->listener_open = true;
        m->listener.handle.data = m;
        r = uv_pipe_bind(&m->listener.pipe, path);
        if (r == 0) {
                strcpy(m->path, path);  /* ours to remove from now on */
                r = uv_listen(&m->listener.stream, 16, metrics_on_connection);
        }
        if (r < 0) {
                log_error("metrics: cannot listen on unix:%s: %s (key 'listen' "
                          "in [metrics], %s)", path, uv_strerror(r),
                          listen_origin(m, origin, sizeof(origin)));
                return r;
        }
        log_info("metrics: serving unix:%s", path);
        return 0;
}

static void metrics_on_listener_close(uv_handle_t *handle)
{
        gmd_metrics *m = handle->data;

        m->listener_open = false;
        metrics_maybe_free(m);
}

int metrics_start(gmd_server *server, const char *listen,
                  gmd_metrics **ret_metrics)
{
        const char *hint;
        gmd_listen where;
        gmd_metrics *m;
        int r;

        if (!listen || !*listen) {
                *ret_metrics = NULL;
                return 0;
        }
        /* Checked when the config was read; a caller that passes a value
         * of its own is told the same. */
        r = config_listen_parse(listen, &where, &hint);
        if (r < 0) {
                log_error("metrics: bad value '%s' for key 'listen' in "
                          "[metrics]: %s", listen, hint);
                return r;
        }
        if (where.kind == GMD_LISTEN_OFF) {
                *ret_metrics = NULL;
                return 0;
        }
        m = calloc(1, sizeof(*m));
        if (!m) {
                log_error("metrics: out of memory");
                return -ENOMEM;
        }
        m->server = server;
        list_init(&m->conns);
        if (where.kind == GMD_LISTEN_UNIX) {
                m->is_unix = true;
                r = listen_unix(m, where.path);
        } else {
                r = listen_tcp(m, listen, &where.addr);
        }
        if (r < 0) {
                metrics_stop(m);
                return r;
        }
        *ret_metrics = m;
        return 0;
}

gmd_metrics *metrics_stop(gmd_metrics *metrics)
{
        gmd_list *pos, *tmp;

        if (!metrics || metrics->stopping)
                return NULL;
        metrics->stopping = true;
        list_for_each_safe(pos, tmp, &metrics->conns)
                conn_close(container_of(pos, metrics_conn, link));
        if (metrics->path[0])
                unlink(metrics->path);
        if (metrics->listener_open)
                uv_close(&metrics->listener.handle, metrics_on_listener_close);
        else
                metrics_maybe_free(metrics);
        return NULL;
}
