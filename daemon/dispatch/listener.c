/*
 * listener — see listener.h. The listening socket is a raw fd watched by
 * uv_poll_t, so accepted sockets stay plain fds the sessions own
 * (session_io.h). A handful of connections is taken per loop turn, each
 * admitted or refused with its reason (admission.h, request_refuse); out
 * of fds, accepting pauses instead of spinning.
 */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "admission.h"
#include "gpumem.pb-c.h"
#include "log.h"
#include "request.h"
#include "server.h"
#include "session_io.h"
#include "users.h"

/* Accepting stops this long when the daemon runs out of fds. */
#define SERVER_ACCEPT_PAUSE_MS 250
/* Connections taken per loop turn; the rest wait in the listen backlog
 * for the next turn (thousands a second). What taking one costs (accept,
 * the checks, the refusal or the new session) is charged to its user's
 * turn (users.h), so a user's connection flood (each one accepted, and
 * refused past max_clients_per_user) comes out of that user's share of
 * the loop thread, with its requests, not out of everyone's. */
#define SERVER_ACCEPT_BUDGET 4

int listener_new(gmd_server *server,
                 void (*on_packet)(gmd_session *, gmd_wire_packet *),
                 gmd_listener **ret_listener)
{
        gmd_listener *l = calloc(1, sizeof(*l));

        if (!l)
                return -ENOMEM;
        l->server = server;
        l->on_packet = on_packet;
        l->fd = -1;
        /* Kept open so that, out of fds, a connection can still be
         * accepted to be told why it is refused (listener_accept_pause). */
        l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        *ret_listener = l;
        return 0;
}

static void listener_on_accept(uv_poll_t *handle, int status, int events);
static void listener_arm_hello_sweep(gmd_listener *l);

static void listener_on_accept_resume(uv_timer_t *timer)
{
        gmd_listener *l = timer->data;

        if (l->listening && !l->server->stopping)
                uv_poll_start(&l->poll, UV_READABLE, listener_on_accept);
}

/*
 * accept failed for want of file descriptors. The pending connections
 * would wake the loop again at once (a busy loop that also floods the
 * log), so: refuse the ones waiting now, each with the reason (the spare
 * fd kept for this makes room to accept it), then stop accepting for
 * SERVER_ACCEPT_PAUSE_MS; buffers freed meanwhile give fds back.
 */
static void listener_accept_pause(gmd_listener *l, int err)
{
        gmd_server *server = l->server;
        char why[200];
        struct rlimit rl = { 0, 0 };

        getrlimit(RLIMIT_NOFILE, &rl);
        snprintf(why, sizeof(why), "gpu-memd has no file descriptor left (%s; its "
                 "limit is %llu): try again later, or ask the administrator to "
                 "raise LimitNOFILE or lower [limits] max_buffers_per_user",
                 strerror(err), (unsigned long long)rl.rlim_cur);
        log_warning("accept: %s; refusing new connections for %d ms",
                    strerror(err), SERVER_ACCEPT_PAUSE_MS);
        server->stats.connections_refused++;
        for (int i = 0; i < 16 && l->spare_fd >= 0; i++) {
                int fd;

                close(l->spare_fd);
                fd = accept4(l->fd, NULL, NULL,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd >= 0)
                        request_refuse(fd, GMD__ERROR_CODE__ERR_LIMIT, why);
                l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        break;
        }
        uv_poll_stop(&l->poll);
        uv_timer_start(&l->accept_timer, listener_on_accept_resume,
                       SERVER_ACCEPT_PAUSE_MS, 0);
}

static void listener_on_accept(uv_poll_t *handle, int status, int events)
{
        gmd_listener *l = handle->data;
        gmd_server *server = l->server;

        if (status < 0) {
                log_error("listening socket: %s", uv_strerror(status));
                return;
        }
        for (int i = 0; i < SERVER_ACCEPT_BUDGET; i++) {
                uint64_t t0 = users_now(&server->users);
                gmd_session *s;
                char why[200];
                uid_t uid;
                int fd, r;

                fd = accept4(l->fd, NULL, NULL,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE)
                                listener_accept_pause(l, errno);
                        else if (errno != EAGAIN && errno != EINTR &&
                                 errno != ECONNABORTED)
                                log_error("accept: %s", strerror(errno));
                        return;
                }
                if (admission_check_connect(server, fd, &uid, why, sizeof(why)) < 0) {
                        log_warning("refusing a connection: %s", why);
                        server->stats.connections_refused++;
                        request_refuse(fd, GMD__ERROR_CODE__ERR_LIMIT, why);
                        /* A user refused for its connections has a record. */
                        users_charge(users_find(&server->users, uid),
                                     users_now(&server->users) - t0);
                        continue;
                }
                server->stats.connections++;
                r = session_new(server, fd, &s);
                if (r < 0) {
                        log_error("cannot take a new client: %s", strerror(-r));
                        close(fd);
                        continue;
                }
                listener_arm_hello_sweep(l);
                users_charge(s->user, users_now(&server->users) - t0);
        }
}

static void listener_on_hello_sweep(uv_timer_t *timer)
{
        gmd_listener *l = timer->data;
        uint64_t next = admission_sweep_hellos(l->server);

        if (next)
                uv_timer_start(timer, listener_on_hello_sweep, next, 0);
}

static void listener_arm_hello_sweep(gmd_listener *l)
{
        if (l->sweep_open &&
            !uv_is_active((uv_handle_t *)&l->sweep_timer))
                uv_timer_start(&l->sweep_timer, listener_on_hello_sweep,
                               l->server->config.hello_timeout_ms, 0);
}

/* Refuse to take over a socket another daemon is serving; remove a stale
 * one left by a daemon that died. */
static int socket_claim_path(const struct sockaddr_un *addr)
{
        struct stat st;
        int fd, r;

        if (lstat(addr->sun_path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode)) {
                log_error("%s exists and is not a socket; remove it or choose "
                          "another --socket", addr->sun_path);
                return -EEXIST;
        }
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        r = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
        close(fd);
        if (r == 0) {
                log_error("another gpu-memd is serving %s", addr->sun_path);
                return -EADDRINUSE;
        }
        if (unlink(addr->sun_path) < 0)
                return -errno;
        return 0;
}

/* Mode and group of the socket file; a failure is logged, not fatal. */
static void socket_set_access(const gmd_config *config)
{
        if (chmod(config->socket_path, config->socket_mode) < 0)
                log_warning("chmod %s: %s", config->socket_path, strerror(errno));
        if (config->socket_gid != (gid_t)-1 &&
            chown(config->socket_path, (uid_t)-1, config->socket_gid) < 0)
                log_warning("cannot give %s to group '%s': %s", config->socket_path,
                            config->socket_group, strerror(errno));
}

static int socket_create(const gmd_config *config, int *ret_fd)
{
        const char *path = config->socket_path;
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd, r;

        if (strlen(path) >= sizeof(addr.sun_path)) {
                log_error("socket path %s is longer than %zu bytes", path,
                          sizeof(addr.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        strcpy(addr.sun_path, path);
        r = socket_claim_path(&addr);
        if (r < 0)
                return r;
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* Not connectable before listen(), so setting the mode after bind
         * leaves no window in which the wrong people can connect. */
        if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
                r = -errno;
                if (r == -ENOENT) {
                        const char *slash = strrchr(path, '/');
                        int dir_len = slash ? (int)(slash - path) : 0;

                        log_error("cannot bind %s: the directory %.*s does not "
                                  "exist: create it (mkdir -p %.*s; under systemd "
                                  "the units create /run/gpu-memd) or choose another "
                                  "--socket, such as ./gpu-memd.sock", path,
                                  dir_len, path, dir_len, path);
                } else {
                        log_error("cannot bind %s: %s", path, strerror(errno));
                }
                close(fd);
                return r;
        }
        socket_set_access(config);
        if (listen(fd, 128) < 0) {
                r = -errno;
                log_error("cannot listen on %s: %s", path, strerror(errno));
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

/*
 * Grow the daemon's fd table now to what it may use (its open-file
 * limit, at most FD_TABLE_PRESIZE), once, before any client. The kernel
 * grows a process's table by doubling, and in a process with threads
 * (the sim copier's, the cuda backend's) each growth waits for an RCU
 * grace period (expand_fdtable: synchronize_rcu) on the loop thread: a
 * client whose buffers took the daemon past 512, 1024, ... 16384 fds
 * stopped the loop 6-13 ms each time, with ~30 us of CPU (the load
 * test's fd flood, sim, 2 CPUs; BENCHMARKS.md). A table never shrinks:
 * after one growth here, none is met below the bound. Best effort.
 */
#define FD_TABLE_PRESIZE 65536

static void listener_grow_fd_table(void)
{
        struct rlimit rl;
        rlim_t top = FD_TABLE_PRESIZE;
        int fd, high;

        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < top)
                top = rl.rlim_cur;
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        /* The lowest free fd from top - 1 up: the table grows to hold it. */
        high = top > 1 ? fcntl(fd, F_DUPFD_CLOEXEC, (int)(top - 1)) : -1;
        if (high >= 0)
                close(high);
        close(fd);
}

int listener_start(gmd_listener *l, int fd)
{
        gmd_server *server = l->server;
        int r;

        listener_grow_fd_table();
        if (fd >= 0) {
                l->fd = fd;
                l->fd_owned = false;
        } else {
                r = socket_create(&server->config, &l->fd);
                if (r < 0)
                        return r;
                l->fd_owned = true;
        }
        r = uv_poll_init(server->loop, &l->poll, l->fd);
        if (r < 0)
                return r;
        l->listening = true;
        l->poll.data = l;
        r = uv_poll_start(&l->poll, UV_READABLE, listener_on_accept);
        if (r < 0)
                return r;
        r = uv_timer_init(server->loop, &l->accept_timer);
        if (r < 0)
                return r;
        l->accept_timer.data = l;
        r = uv_timer_init(server->loop, &l->sweep_timer);
        if (r < 0)
                return r;
        l->sweep_timer.data = l;
        l->sweep_open = true;
        return 0;
}

void listener_set_access(gmd_listener *l, const gmd_config *config)
{
        if (l->fd_owned)
                socket_set_access(config);
}

void listener_stop(gmd_listener *l)
{
        if (l->listening)
                uv_close((uv_handle_t *)&l->poll, NULL);
        if (l->sweep_open) {
                l->sweep_open = false;
                uv_close((uv_handle_t *)&l->accept_timer, NULL);
                uv_close((uv_handle_t *)&l->sweep_timer, NULL);
        }
}

gmd_listener *listener_free(gmd_listener *l)
{
        if (!l)
                return NULL;
        if (l->fd >= 0) {
                close(l->fd);
                if (l->fd_owned)
                        unlink(l->server->config.socket_path);
        }
        if (l->spare_fd >= 0)
                close(l->spare_fd);
        free(l);
        return NULL;
}
