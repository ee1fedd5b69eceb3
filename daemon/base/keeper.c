/*
 * keeper — the keep of keep.h as a process of our own, for a daemon that
 * no service manager keeps fds for (`make run`, a container, a daemon
 * started by hand). The first daemon forks it; it outlives every daemon
 * after, holding a name -> fd table, and serves one daemon at a time on a
 * SOCK_SEQPACKET socket. Shaped so:
 *
 *   - Forked, not exec'ed: nothing to install or find, and the same binary
 *     on both ends (an upgrade's new daemon talks to the old keeper, hence
 *     the versioned packets below). Twice, with setsid() between: the
 *     keeper is nobody's child (no zombie, no SIGCHLD in the daemon), in a
 *     session of its own (Ctrl-C on `make run` does not reach it). The
 *     daemon binds the socket before forking, so a bind error is its to
 *     report; the keeper listens (SO_PEERCRED names who listened) and
 *     says so on a pipe before the daemon connects.
 *   - The keeper keeps nothing of the daemon: every fd but its socket is
 *     closed, stdin and stdout are /dev/null, stderr is kept only when it
 *     is a terminal or a file (a pipe kept open would hold up whoever
 *     waits for its end: ctest, a test harness). It uses no malloc (its
 *     table is mmap'ed), as a forked child of a threaded process should.
 *   - Signals: SIGINT, SIGHUP, SIGPIPE, SIGQUIT and the job-control ones are
 *     ignored (it has no terminal; a dead daemon's socket must not kill
 *     it); SIGTERM ends it cleanly (socket unlinked, everything closed): a
 *     system going down, or an operator who wants the memory back
 *     (`pkill -TERM gpu-memd-keep`).
 *   - A put or a drop is one packet and no answer: the daemon's loop does
 *     not wait for the keeper. A packet is in the keeper's queue once
 *     sendmsg returns, and a queue outlives its sender, so a daemon killed
 *     right after a put has still kept its fd. A put the keeper could not
 *     honour is told back (KEEP_ERROR) and logged at the daemon's next call.
 *   - What the keeper hands over it keeps too (keep.h): a daemon that dies
 *     while recovering loses nothing.
 *
 * The daemon's side is the first half of the file, the keeper's the second.
 */
#include "keep.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/*
 * The packets: a fixed head, then `count` names of GMD_KEEP_NAME_MAX bytes
 * (NUL-padded), fds by SCM_RIGHTS. A packet's meaning never changes; new
 * behaviour gets a new type and a new version.
 *
 * The keeper speaks first: WELCOME, or REFUSED and a hang-up (a daemon
 * that sent nothing yet is told why; had it sent, the hang-up would reset
 * its connection before it read the reason). WELCOME, REFUSED and HELLO
 * mean the same in every version, so each side learns the other's.
 *
 * Versions:
 *   1  HELLO, PUT, DROP, DISCARD from the daemon; WELCOME, BATCH, DONE,
 *      REFUSED, ERROR from the keeper.
 */
#define KEEP_MAGIC 0x706b6d67u          /* "gmkp" */
#define KEEP_VERSION 1
#define KEEP_BATCH_MAX 200              /* fds per BATCH (SCM_MAX_FD is 253) */

enum {
        KEEP_HELLO = 1,         /* d->k: arg = hold_s; asks for everything */
        KEEP_PUT = 2,           /* d->k: 1 name, 1 fd */
        KEEP_DROP = 3,          /* d->k: 1 name */
        KEEP_DISCARD = 4,       /* d->k: drop everything and exit */
        KEEP_BATCH = 16,        /* k->d: count names, count fds */
        KEEP_DONE = 17,         /* k->d: the last of HELLO's answer; arg = total */
        KEEP_REFUSED = 18,      /* k->d: arg = errno; the keeper then closes */
        KEEP_ERROR = 19,        /* k->d: 1 name whose PUT failed, arg = errno */
        KEEP_WELCOME = 20,      /* k->d: first, to the daemon served */
};

typedef struct keep_head {
        uint32_t magic;
        uint16_t version;
        uint16_t type;
        uint32_t count;         /* names that follow */
        uint32_t arg;
} keep_head;

/* How long the daemon waits for the keeper: to take a packet (a full
 * queue), to answer HELLO, to go after DISCARD. */
#define KEEP_TIMEOUT_MS 2000

typedef struct keeper_client {
        gmd_keep keep;
        int fd;                 /* -1 once the keeper is gone */
        pid_t pid;
} keeper_client;

/* ---- both sides ---------------------------------------------------------- */

static int send_packet(int fd, uint16_t type, uint32_t arg, const char *names,
                       uint32_t count, const int *fds, unsigned n_fds)
{
        keep_head head = { KEEP_MAGIC, KEEP_VERSION, type, count, arg };
        union {
                char buf[CMSG_SPACE(sizeof(int) * KEEP_BATCH_MAX)];
                struct cmsghdr align;
        } control;
        struct iovec iov[2] = {
                { &head, sizeof(head) },
                { (void *)names, (size_t)count * GMD_KEEP_NAME_MAX },
        };
        struct msghdr msg = { .msg_iov = iov, .msg_iovlen = count ? 2 : 1 };
        ssize_t n;

        if (n_fds) {
                struct cmsghdr *c;

                memset(&control, 0, sizeof(control));
                msg.msg_control = control.buf;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        }
        do
                n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n < 0 ? -errno : 0;
}

/* One packet received: its head in *head, its names in `names` (room for
 * `max_names`), its fds in `fds` (room for `max_fds`, *n_fds set). Returns
 * the packet's length, 0 at the end of the connection, -errno, or -EBADMSG
 * for a packet that is not one of ours (its fds closed). */
static ssize_t recv_packet(int fd, int flags, keep_head *head, char *names,
                           unsigned max_names, int *fds, unsigned max_fds,
                           unsigned *n_fds)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * KEEP_BATCH_MAX)];
                struct cmsghdr align;
        } control;
        struct iovec iov[2] = {
                { head, sizeof(*head) },
                { names, (size_t)max_names * GMD_KEEP_NAME_MAX },
        };
        struct msghdr msg = {
                .msg_iov = iov, .msg_iovlen = 2,
                .msg_control = control.buf, .msg_controllen = sizeof(control.buf),
        };
        struct cmsghdr *c;
        ssize_t n;
        bool bad = false;

        *n_fds = 0;
        do
                n = recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                const unsigned char *data = CMSG_DATA(c);
                size_t k;

                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int f;

                        memcpy(&f, data + i * sizeof(int), sizeof(int));
                        if (*n_fds < max_fds)
                                fds[(*n_fds)++] = f;
                        else {
                                close(f);
                                bad = true;
                        }
                }
        }
        if (n == 0 && !*n_fds)
                return 0;
        if (bad || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
            (size_t)n < sizeof(*head) || head->magic != KEEP_MAGIC ||
            head->count > max_names ||
            (size_t)n != sizeof(*head) + (size_t)head->count * GMD_KEEP_NAME_MAX ||
            (head->version != KEEP_VERSION && head->type != KEEP_HELLO &&
             head->type != KEEP_WELCOME && head->type != KEEP_REFUSED))
                goto bad;
        /* Every name ends within its bytes and is a valid one. */
        for (uint32_t i = 0; i < head->count; i++) {
                char *name = names + (size_t)i * GMD_KEEP_NAME_MAX;

                if (!memchr(name, '\0', GMD_KEEP_NAME_MAX) || !keep_name_valid(name))
                        goto bad;
        }
        return n;
bad:
        for (unsigned i = 0; i < *n_fds; i++)
                close(fds[i]);
        *n_fds = 0;
        return -EBADMSG;
}

/* ---- the daemon's side --------------------------------------------------- */

static int sockaddr_of(const char *path, struct sockaddr_un *ret_addr)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };

        if (strlen(path) >= sizeof(a.sun_path))
                return -ENAMETOOLONG;
        strcpy(a.sun_path, path);
        *ret_addr = a;
        return 0;
}

static int connect_keeper(const struct sockaddr_un *addr, int *ret_fd)
{
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

        if (fd < 0)
                return -errno;
        if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        *ret_fd = fd;
        return 0;
}

static void keeper_main(int listen_fd, int ready_fd, const char *path,
                        unsigned hold_s) __attribute__((noreturn));

/* Bind `path`, then fork the keeper that serves it (see the top). The
 * keeper calls listen() itself, as SO_PEERCRED tells a connecting daemon
 * who called it, and says so on `ready` (a byte; nothing if it failed). */
static int keeper_spawn(const struct sockaddr_un *addr, unsigned hold_s)
{
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r, status;
        int ready[2] = { -1, -1 };
        char byte = 0;
        ssize_t n;
        pid_t pid;

        if (fd < 0)
                return -errno;
        /* The socket file takes the socket's mode (less the umask): no
         * moment where another user could connect. */
        if (fchmod(fd, 0600) < 0 ||
            bind(fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (chmod(addr->sun_path, 0600) < 0 || pipe2(ready, O_CLOEXEC) < 0) {
                r = -errno;
                goto fail;
        }
        pid = fork();
        if (pid < 0) {
                r = -errno;
                goto fail;
        }
        if (pid == 0) {
                if (setsid() < 0)
                        _exit(1);
                pid = fork();
                if (pid != 0)
                        _exit(pid < 0);
                keeper_main(fd, ready[1], addr->sun_path, hold_s);
        }
        close(ready[1]);
        ready[1] = -1;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        do
                n = read(ready[0], &byte, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1) {
                r = -ECHILD;            /* the keeper died starting */
                goto fail;
        }
        close(ready[0]);
        close(fd);
        return 0;
fail:
        if (ready[0] >= 0)
                close(ready[0]);
        if (ready[1] >= 0)
                close(ready[1]);
        close(fd);
        unlink(addr->sun_path);
        return r;
}

/* The keeper's notes since the last call (a put it could not honour), and
 * whether it is still there. */
static int client_drain(keeper_client *c)
{
        char name[GMD_KEEP_NAME_MAX];
        keep_head head;
        int fds[4];
        unsigned n_fds;
        ssize_t n;

        if (c->fd < 0)
                return -EPIPE;
        for (;;) {
                n = recv_packet(c->fd, MSG_DONTWAIT, &head, name, 1, fds, 4, &n_fds);
                for (unsigned i = 0; i < n_fds; i++)
                        close(fds[i]);
                if (n == -EAGAIN || n == -EWOULDBLOCK)
                        return 0;
                if (n == -EBADMSG) {
                        log_warning("keeper: an unexpected packet, ignored");
                        continue;
                }
                if (n <= 0)
                        break;
                if (head.type == KEEP_ERROR && head.count == 1)
                        log_error("keeper: could not keep '%s': %s; it will not "
                                  "survive a restart", name, strerror((int)head.arg));
                else
                        log_warning("keeper: an unexpected packet (type %u), "
                                    "ignored", head.type);
        }
        log_error("keeper (pid %d) is gone: what it kept is lost, and what "
                  "is put is not kept until gpu-memd restarts", (int)c->pid);
        close(c->fd);
        c->fd = -1;
        return -EPIPE;
}

static int client_send_name(keeper_client *c, uint16_t type, const char *name,
                            const int *fd)
{
        char buf[GMD_KEEP_NAME_MAX] = { 0 };
        int r;

        if (!keep_name_valid(name))
                return -EINVAL;
        r = client_drain(c);
        if (r < 0)
                return r;
        strcpy(buf, name);
        r = send_packet(c->fd, type, 0, buf, 1, fd, fd ? 1 : 0);
        if (r == -EAGAIN)
                log_error("keeper (pid %d) took no packet for %d ms: '%s' not %s",
                          (int)c->pid, KEEP_TIMEOUT_MS, name,
                          type == KEEP_PUT ? "kept" : "dropped");
        return r == -EAGAIN ? -ETIMEDOUT : r;
}

static int client_put(gmd_keep *k, const char *name, int fd)
{
        keeper_client *c = (keeper_client *)k;

        if (fd < 0)
                return -EBADF;
        return client_send_name(c, KEEP_PUT, name, &fd);
}

static int client_drop(gmd_keep *k, const char *name)
{
        return client_send_name((keeper_client *)k, KEEP_DROP, name, NULL);
}

static void client_close(gmd_keep *k, bool discard)
{
        keeper_client *c = (keeper_client *)k;

        if (discard && client_drain(c) == 0 &&
            send_packet(c->fd, KEEP_DISCARD, 0, NULL, 0, NULL, 0) == 0) {
                char buf[64];

                /* Until the keeper is gone (it unlinks the socket first): a
                 * daemon started next must not meet it. */
                for (;;) {
                        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);

                        if (n == 0 || (n < 0 && errno != EINTR))
                                break;
                }
        }
        if (c->fd >= 0)
                close(c->fd);
        keep_restored_free(k);
        free(c);
}

static const gmd_keep_ops keeper_ops = {
        .name = "keeper",
        .put = client_put,
        .drop = client_drop,
        .close = client_close,
};

/* Packets up to one of type `until`: the greeting (WELCOME), or HELLO's
 * answer (batches into c->keep.restored, then DONE). */
static int client_receive(keeper_client *c, char *names, uint16_t until)
{
        int fds[KEEP_BATCH_MAX];
        keep_head head;
        unsigned n_fds;
        ssize_t n;

        for (;;) {
                n = recv_packet(c->fd, 0, &head, names, KEEP_BATCH_MAX, fds,
                                KEEP_BATCH_MAX, &n_fds);
                if (n == -EAGAIN || n == -EWOULDBLOCK)
                        return -ETIMEDOUT;
                if (n == 0 || n == -EBADMSG)
                        return -EPROTO;
                if (n < 0)
                        return (int)n;
                if (head.type == KEEP_REFUSED && !n_fds)
                        return head.arg > 0 && head.arg < 4096 ? -(int)head.arg : -EPROTO;
                if (head.type == KEEP_WELCOME && until == KEEP_WELCOME && !n_fds) {
                        if (head.version == KEEP_VERSION)
                                return 0;
                        log_error("keeper: the keeper (pid %d) speaks version %u, "
                                  "gpu-memd %u: stop it (kill -TERM %d) and what "
                                  "it keeps is lost", (int)c->pid, head.version,
                                  KEEP_VERSION, (int)c->pid);
                        return -EPROTO;
                }
                if (head.type == KEEP_DONE && until == KEEP_DONE && !n_fds)
                        return head.arg == c->keep.n_restored ? 0 : -EPROTO;
                if (head.type != KEEP_BATCH || until != KEEP_DONE ||
                    n_fds != head.count) {
                        for (unsigned i = 0; i < n_fds; i++)
                                close(fds[i]);
                        return -EPROTO;
                }
                gmd_kept *more = realloc(c->keep.restored,
                                         sizeof(gmd_kept) * (c->keep.n_restored + n_fds));
                if (!more) {
                        for (unsigned i = 0; i < n_fds; i++)
                                close(fds[i]);
                        return -ENOMEM;
                }
                c->keep.restored = more;
                for (unsigned i = 0; i < n_fds; i++) {
                        gmd_kept *e = &more[c->keep.n_restored++];

                        memcpy(e->name, names + (size_t)i * GMD_KEEP_NAME_MAX,
                               GMD_KEEP_NAME_MAX);
                        e->fd = fds[i];
                }
        }
}

/* HELLO, and what the keeper holds into c->keep.restored. */
static int client_hello(keeper_client *c, unsigned hold_s)
{
        char *names = malloc(KEEP_BATCH_MAX * GMD_KEEP_NAME_MAX);
        int r;

        if (!names)
                return -ENOMEM;
        r = client_receive(c, names, KEEP_WELCOME);
        if (r == 0)
                r = send_packet(c->fd, KEEP_HELLO, hold_s, NULL, 0, NULL, 0);
        if (r == 0)
                r = client_receive(c, names, KEEP_DONE);
        free(names);
        return r;
}

int keep_keeper_open(const char *path, unsigned hold_s, gmd_keep **ret_keep)
{
        struct timeval tv = { KEEP_TIMEOUT_MS / 1000, (KEEP_TIMEOUT_MS % 1000) * 1000 };
        struct sockaddr_un addr;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        keeper_client *c;
        struct stat st;
        bool forked = false;
        int fd = -1, r;

        r = sockaddr_of(path, &addr);
        if (r < 0) {
                log_error("keeper: socket path '%s' is too long (%zu bytes at most)",
                          path, sizeof(addr.sun_path) - 1);
                return r;
        }
        r = connect_keeper(&addr, &fd);
        if (r == -ENOENT || r == -ECONNREFUSED) {
                /* No keeper: a socket file there is a dead one's. */
                if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
                        log_error("keeper: %s is not a socket; move it away", path);
                        return -EEXIST;
                }
                if (unlink(path) < 0 && errno != ENOENT) {
                        r = -errno;
                        log_error("keeper: cannot remove the stale socket %s: %s",
                                  path, strerror(-r));
                        return r;
                }
                r = keeper_spawn(&addr, hold_s);
                if (r >= 0)
                        r = connect_keeper(&addr, &fd);
                forked = true;
        }
        if (r < 0) {
                log_error("keeper: cannot %s %s: %s", forked ? "start a keeper at" :
                          "connect to the keeper at", path, strerror(-r));
                return r;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (cred.uid != geteuid()) {
                log_error("keeper: the process serving %s (pid %d) runs as uid %u, "
                          "not gpu-memd's %u: not trusting it with gpu-memd's "
                          "memory; stop it or remove the socket", path,
                          (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
                close(fd);
                return -EPERM;
        }
        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                return -ENOMEM;
        }
        c->keep.ops = &keeper_ops;
        c->fd = fd;
        c->pid = cred.pid;
        r = client_hello(c, hold_s);
        if (r < 0) {
                if (r == -EBUSY)
                        log_error("keeper: the keeper at %s (pid %d) serves another "
                                  "gpu-memd", path, (int)cred.pid);
                else if (r != -EPROTO)
                        log_error("keeper: the keeper at %s (pid %d) did not hand "
                                  "over what it keeps: %s", path, (int)cred.pid,
                                  strerror(-r));
                else
                        log_error("keeper: the keeper at %s (pid %d) does not speak "
                                  "gpu-memd's protocol", path, (int)cred.pid);
                close(c->fd);
                c->fd = -1;
                keep_restored_free(&c->keep);
                free(c);
                return r;
        }
        *ret_keep = &c->keep;
        return 0;
}

pid_t keep_keeper_pid(const gmd_keep *k)
{
        return k && k->ops == &keeper_ops ? ((const keeper_client *)k)->pid : -1;
}

/* ---- the keeper's side --------------------------------------------------- */

typedef struct keeper_entry {
        char name[GMD_KEEP_NAME_MAX];
        int fd;
} keeper_entry;

typedef struct keeper {
        int listen_fd;
        int conn;               /* the daemon served, -1 for none */
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
        struct stat path_st;    /* of our socket file, not to unlink another's */
        unsigned hold_s;
        uint64_t deadline_ms;   /* with no daemon: exit then; 0 = none */
        keeper_entry *table;    /* mmap'ed: no malloc in a forked child */
        size_t n, cap;
} keeper;

static volatile sig_atomic_t keeper_stop;

static void on_sigterm(int sig)
{
        (void)sig;
        keeper_stop = 1;
}

static uint64_t mono_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A line on stderr when the keeper kept one (see the top). */
__attribute__((format(printf, 1, 2)))
static void keeper_say(const char *fmt, ...)
{
        char line[256];
        va_list ap;
        int n = snprintf(line, sizeof(line), "gpu-memd-keep[%d]: ", (int)getpid());

        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (n > (int)sizeof(line) - 2)
                n = (int)sizeof(line) - 2;
        line[n++] = '\n';
        (void)!write(STDERR_FILENO, line, (size_t)n);
}

static keeper_entry *keeper_find(keeper *kp, const char *name)
{
        for (size_t i = 0; i < kp->n; i++)
                if (strcmp(kp->table[i].name, name) == 0)
                        return &kp->table[i];
        return NULL;
}

static int keeper_grow(keeper *kp)
{
        size_t cap = kp->cap ? kp->cap * 2 : 256;
        void *t;

        if (!kp->table)
                t = mmap(NULL, cap * sizeof(keeper_entry), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        else
                t = mremap(kp->table, kp->cap * sizeof(keeper_entry),
                           cap * sizeof(keeper_entry), MREMAP_MAYMOVE);
        if (t == MAP_FAILED)
                return -ENOMEM;
        kp->table = t;
        kp->cap = cap;
        return 0;
}

static void keeper_disconnect(keeper *kp, const char *why)
{
        close(kp->conn);
        kp->conn = -1;
        /* Nothing kept: nothing to wait for. */
        kp->deadline_ms = mono_ms() + (kp->n ? (uint64_t)kp->hold_s * 1000u : 0);
        if (kp->n)
                keeper_say("gpu-memd %s; holding %zu fds for %u s", why, kp->n,
                           kp->hold_s);
}

/* Blocking send on the non-blocking connection, a while at most. */
static int keeper_send(int fd, uint16_t type, uint32_t arg,
                       const char *names, uint32_t count, const int *fds)
{
        uint64_t end = mono_ms() + KEEP_TIMEOUT_MS;

        for (;;) {
                int r = send_packet(fd, type, arg, names, count, fds, fds ? count : 0);
                struct pollfd p = { fd, POLLOUT, 0 };
                uint64_t now = mono_ms();

                if (r != -EAGAIN)
                        return r;
                if (now >= end)
                        return -ETIMEDOUT;
                if (poll(&p, 1, (int)(end - now)) < 0 && errno != EINTR)
                        return -errno;
        }
}

/* HELLO's answer: everything, in batches, then DONE. */
static int keeper_hand_over(keeper *kp)
{
        static char names[KEEP_BATCH_MAX * GMD_KEEP_NAME_MAX];
        int fds[KEEP_BATCH_MAX], r;

        for (size_t at = 0; at < kp->n; at += KEEP_BATCH_MAX) {
                size_t k = kp->n - at < KEEP_BATCH_MAX ? kp->n - at : KEEP_BATCH_MAX;

                memset(names, 0, k * GMD_KEEP_NAME_MAX);
                for (size_t i = 0; i < k; i++) {
                        memcpy(names + i * GMD_KEEP_NAME_MAX, kp->table[at + i].name,
                               GMD_KEEP_NAME_MAX);
                        fds[i] = kp->table[at + i].fd;
                }
                r = keeper_send(kp->conn, KEEP_BATCH, 0, names, (uint32_t)k, fds);
                if (r < 0)
                        return r;
        }
        return keeper_send(kp->conn, KEEP_DONE, (uint32_t)kp->n, NULL, 0, NULL);
}

static void keeper_put(keeper *kp, const char *name, int fd)
{
        keeper_entry *e = keeper_find(kp, name);
        char buf[GMD_KEEP_NAME_MAX] = { 0 };

        if (e) {
                close(e->fd);
                e->fd = fd;
                return;
        }
        if (kp->n == kp->cap && keeper_grow(kp) < 0) {
                close(fd);
                strcpy(buf, name);
                (void)keeper_send(kp->conn, KEEP_ERROR, ENOMEM, buf, 1, NULL);
                return;
        }
        e = &kp->table[kp->n++];
        memcpy(e->name, name, GMD_KEEP_NAME_MAX);
        e->fd = fd;
}

static void keeper_drop(keeper *kp, const char *name)
{
        keeper_entry *e = keeper_find(kp, name);

        if (!e)
                return;
        close(e->fd);
        *e = kp->table[--kp->n];
}

/* The daemon's packets until it has no more for now. Returns 1 on
 * DISCARD, else 0. A daemon that died with packets of ours unread reset
 * the connection, and a SOCK_SEQPACKET socket reports the reset before
 * the packets it sent last: read on to the end, its last puts count. */
static int keeper_read(keeper *kp)
{
        char name[GMD_KEEP_NAME_MAX];
        keep_head head;
        int fds[4];
        unsigned n_fds;
        bool reset = false;
        ssize_t n;

        for (;;) {
                n = recv_packet(kp->conn, MSG_DONTWAIT, &head, name, 1, fds, 4, &n_fds);
                if (n == -ECONNRESET && !reset) {
                        reset = true;
                        continue;
                }
                if ((n == -EAGAIN || n == -EWOULDBLOCK) && !reset)
                        return 0;
                if (n == 0 || (n < 0 && n != -EBADMSG)) {
                        keeper_disconnect(kp, "went away");
                        return 0;
                }
                if (n == -EBADMSG)
                        goto bad;
                switch (head.type) {
                case KEEP_HELLO:
                        if (head.version != KEEP_VERSION) {
                                (void)keeper_send(kp->conn, KEEP_REFUSED, EPROTO, NULL, 0, NULL);
                                keeper_disconnect(kp, "spoke another version");
                                return 0;
                        }
                        if (head.count || n_fds)
                                goto bad;
                        if (head.arg)
                                kp->hold_s = head.arg;
                        if (keeper_hand_over(kp) < 0) {
                                keeper_disconnect(kp, "did not take what was kept");
                                return 0;
                        }
                        break;
                case KEEP_PUT:
                        if (head.count != 1 || n_fds != 1)
                                goto bad;
                        keeper_put(kp, name, fds[0]);
                        break;
                case KEEP_DROP:
                        if (head.count != 1 || n_fds)
                                goto bad;
                        keeper_drop(kp, name);
                        break;
                case KEEP_DISCARD:
                        if (head.count || n_fds)
                                goto bad;
                        return 1;
                default:
                        goto bad;
                }
        }
bad:
        for (unsigned i = 0; i < n_fds; i++)
                close(fds[i]);
        keeper_disconnect(kp, "sent a malformed packet");
        return 0;
}

static void keeper_accept(keeper *kp)
{
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int fd = accept4(kp->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

        if (fd < 0)
                return;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
            cred.uid != geteuid()) {
                (void)keeper_send(fd, KEEP_REFUSED, EPERM, NULL, 0, NULL);
                close(fd);
                return;
        }
        /* One daemon at a time. */
        if (kp->conn >= 0) {
                (void)keeper_send(fd, KEEP_REFUSED, EBUSY, NULL, 0, NULL);
                close(fd);
                return;
        }
        if (keeper_send(fd, KEEP_WELCOME, (uint32_t)kp->n, NULL, 0, NULL) < 0) {
                close(fd);
                return;
        }
        kp->conn = fd;
        kp->deadline_ms = 0;
}

/* Every fd but the socket (moved to 3) and `*ready` (to 4) closed; stdio
 * as the top says. */
static int keeper_fds(int listen_fd, int *ready)
{
        struct stat st;
        bool keep_err = fstat(STDERR_FILENO, &st) == 0 &&
                        (S_ISCHR(st.st_mode) || S_ISREG(st.st_mode));
        int null;

        /* Out of the way of 3 and 4 first, then there. */
        listen_fd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 5);
        *ready = fcntl(*ready, F_DUPFD_CLOEXEC, 5);
        if (listen_fd < 0 || *ready < 0 ||
            dup3(listen_fd, 3, O_CLOEXEC) < 0 || dup3(*ready, 4, O_CLOEXEC) < 0)
                return -1;
        listen_fd = 3;
        *ready = 4;
        if (close_range(5, ~0u, 0) < 0)
                for (int fd = 5; fd < 65536; fd++)
                        close(fd);
        null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null < 0)
                return -1;
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        if (!keep_err)
                dup2(null, STDERR_FILENO);
        if (null > STDERR_FILENO)
                close(null);
        return listen_fd;
}

static void keeper_signals(void)
{
        static const int ignored[] = { SIGINT, SIGHUP, SIGPIPE, SIGQUIT, SIGUSR1,
                                       SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU };
        struct sigaction sa = { .sa_handler = SIG_DFL };
        sigset_t none;

        for (int s = 1; s < NSIG; s++)
                (void)sigaction(s, &sa, NULL);
        sa.sa_handler = SIG_IGN;
        for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
                (void)sigaction(ignored[i], &sa, NULL);
        sa.sa_handler = on_sigterm;     /* no SA_RESTART: poll returns */
        (void)sigaction(SIGTERM, &sa, NULL);
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
}

static void keeper_main(int listen_fd, int ready_fd, const char *path,
                        unsigned hold_s)
{
        keeper kp = { .conn = -1, .hold_s = hold_s ? hold_s : 1 };
        struct rlimit rl;
        struct stat st;
        bool discard = false;

        kp.listen_fd = keeper_fds(listen_fd, &ready_fd);
        if (kp.listen_fd < 0 || listen(kp.listen_fd, 8) < 0)
                _exit(1);
        keeper_signals();
        (void)prctl(PR_SET_NAME, "gpu-memd-keep", 0, 0, 0);
        (void)chdir("/");
        /* Thousands of fds may be kept. */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        snprintf(kp.path, sizeof(kp.path), "%s", path);
        if (stat(kp.path, &kp.path_st) < 0)
                _exit(1);
        (void)!write(ready_fd, "", 1);
        close(ready_fd);
        /* The daemon that forked us connects at once; if it died first,
         * there is nothing to hold. */
        kp.deadline_ms = mono_ms() + (uint64_t)kp.hold_s * 1000u;

        while (!keeper_stop) {
                struct pollfd p[2] = {
                        { kp.listen_fd, POLLIN, 0 },
                        { kp.conn, POLLIN, 0 },
                };
                int timeout = -1;

                if (kp.conn < 0) {
                        uint64_t now = mono_ms();

                        if (kp.deadline_ms <= now)
                                break;
                        timeout = (int)(kp.deadline_ms - now);
                }
                if (poll(p, kp.conn >= 0 ? 2 : 1, timeout) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                /* The daemon's packets before a new connection: a daemon
                 * that just died is gone before its successor asks. */
                if (kp.conn >= 0 && p[1].revents && keeper_read(&kp)) {
                        discard = true;
                        break;
                }
                if (p[0].revents & POLLIN)
                        keeper_accept(&kp);
        }
        if (!discard && !keeper_stop && kp.n)
                keeper_say("no gpu-memd came back within %u s: %zu fds closed",
                           kp.hold_s, kp.n);
        /* Unlink first: a daemon that sees us go finds no socket. */
        if (stat(kp.path, &st) == 0 && st.st_ino == kp.path_st.st_ino &&
            st.st_dev == kp.path_st.st_dev)
                unlink(kp.path);
        close(kp.listen_fd);
        for (size_t i = 0; i < kp.n; i++)
                close(kp.table[i].fd);
        if (kp.conn >= 0)
                close(kp.conn);
        _exit(0);
}
