/*
 * session_io — see session_io.h. The socket is a raw non-blocking fd
 * watched with uv_poll_t (libuv's pipes cannot carry SCM_RIGHTS on
 * SEQPACKET). Reads are bounded per wake-up so one busy client cannot
 * starve the others; writes that the socket refuses wait in a bounded
 * queue, and a client that lets the queue overflow (it sends requests but
 * does not read the replies) is disconnected instead of growing the
 * daemon's memory.
 */
#include "session_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listener.h"
#include "log.h"
#include "server.h"

/* Packets read per poll wake-up before yielding to other clients; the
 * user's turn (users.h) may end the reading sooner. */
#define SESSION_READ_BUDGET 64

_Static_assert(GMD_ANSWER_MAX_FDS == GMD_WIRE_MAX_FDS,
               "a packet held behind answers carries what one packet may");

typedef struct queued_packet {
        gmd_list link;
        uint16_t type;
        uint32_t request_id;
        uint32_t length;
        unsigned n_fds;
        int fds[GMD_WIRE_MAX_FDS];
        uint8_t payload[];
} queued_packet;

static void session_on_poll(uv_poll_t *handle, int status, int events);
static void session_on_closed(uv_handle_t *handle);

/* Who is on the other end (SO_PEERCRED), and its supplementary groups as
 * the kernel saw them at connect (SO_PEERGROUPS), so group rules need no
 * lookups by name. */
static int session_read_peer(int fd, gmd_peer *ret)
{
        struct ucred cred;
        socklen_t cred_len = sizeof(cred);
        gid_t groups[31];
        socklen_t len = sizeof(groups);

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0)
                return -errno;
        ret->pid = cred.pid;
        ret->uid = cred.uid;
        ret->gid = cred.gid;
        ret->groups[0] = cred.gid;
        ret->n_groups = 1;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
                return 0;   /* ERANGE past 31 groups: the primary still counts */
        for (unsigned i = 0; i < len / sizeof(gid_t); i++)
                if (groups[i] != cred.gid)
                        ret->groups[ret->n_groups++] = groups[i];
        return 0;
}

int session_new(gmd_server *server, int fd, gmd_session **ret_session)
{
        gmd_session_io *io;
        gmd_session *s;
        gmd_peer peer;
        int r;

        r = session_read_peer(fd, &peer);
        if (r < 0)
                return r;
        io = calloc(1, sizeof(*io));
        if (!io)
                return -ENOMEM;
        s = &io->session;
        r = session_init(s, server, &peer);
        if (r < 0) {
                free(io);
                return r;
        }
        io->fd = fd;
        list_init(&io->sendq);

        r = uv_poll_init(server->loop, &io->poll, fd);
        if (r < 0) {
                session_fini(s);
                free(io);
                return r;
        }
        io->poll.data = io;
        io->poll_events = UV_READABLE;
        r = uv_poll_start(&io->poll, io->poll_events, session_on_poll);
        if (r < 0) {
                /* The handle is initialised, so the session can only be
                 * freed from its close callback; the caller keeps the fd. */
                io->fd = -1;
                uv_close((uv_handle_t *)&io->poll, session_on_closed);
                return r;
        }
        session_link(s);
        *ret_session = s;
        return 0;
}

static void session_on_closed(uv_handle_t *handle)
{
        gmd_session_io *io = handle->data;

        if (io->fd >= 0)
                close(io->fd);
        session_fini(&io->session);
        free(io);
}

void session_close(gmd_session *s, const char *reason)
{
        gmd_session_io *io = session_io(s);
        gmd_list *pos, *tmp;

        if (!session_end(s, reason))
                return;
        list_for_each_safe(pos, tmp, &io->sendq) {
                queued_packet *q = container_of(pos, queued_packet, link);

                for (unsigned i = 0; i < q->n_fds; i++)
                        close(q->fds[i]);
                list_remove(pos);
                free(q);
        }
        s->user->queued_bytes -= io->sendq_bytes;
        io->sendq_len = 0;
        io->sendq_bytes = 0;
        uv_poll_stop(&io->poll);
        uv_close((uv_handle_t *)&io->poll, session_on_closed);
}

/* Marked to be closed (session.h): the socket is left alone from now on,
 * neither read nor written, until the pass closes it. */
static bool session_marked(const gmd_session *s)
{
        return s->closing || s->close_pending || s->answers.close_after;
}

static void session_update_poll(gmd_session *s)
{
        gmd_session_io *io = session_io(s);
        int events = UV_READABLE | (list_empty(&io->sendq) ? 0 : UV_WRITABLE);

        if (events != io->poll_events && !session_marked(s)) {
                io->poll_events = events;
                uv_poll_start(&io->poll, events, session_on_poll);
        }
}

static int session_queue(gmd_session *s, uint16_t type, uint32_t request_id,
                         const uint8_t *payload, uint32_t length,
                         const int *fds, unsigned n_fds)
{
        gmd_session_io *io = session_io(s);
        const gmd_config *c = &s->server->config;
        queued_packet *q;
        char why[96];

        /* Never close from here: whoever is sending may go on using this
         * session's buffers, waits or acquirers. */
        if (io->sendq_len >= c->max_send_queue ||
            io->sendq_bytes + length > c->max_send_queue_bytes) {
                snprintf(why, sizeof(why), "not reading replies (%u queued, "
                         "%llu bytes)", io->sendq_len,
                         (unsigned long long)io->sendq_bytes);
                session_close_later(s, why);
                return -ENOBUFS;
        }
        if (s->user->queued_bytes + length > c->max_user_send_queue_bytes) {
                snprintf(why, sizeof(why), "uid %u's connections do not read "
                         "their replies (%llu bytes queued in all)",
                         (unsigned)s->uid,
                         (unsigned long long)s->user->queued_bytes);
                session_close_later(s, why);
                return -ENOBUFS;
        }
        q = malloc(sizeof(*q) + length);
        if (!q)
                return session_lost_packet(s, "could not queue a packet",
                                           -ENOMEM);
        q->type = type;
        q->request_id = request_id;
        q->length = length;
        q->n_fds = 0;
        memcpy(q->payload, payload, length);
        for (unsigned i = 0; i < n_fds; i++) {
                q->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
                if (q->fds[i] < 0) {
                        int r = -errno;

                        for (unsigned j = 0; j < i; j++)
                                close(q->fds[j]);
                        free(q);
                        return session_lost_packet(s, "could not keep an fd "
                                                   "of a queued packet", r);
                }
                q->n_fds++;
        }
        list_add_tail(&io->sendq, &q->link);
        io->sendq_len++;
        io->sendq_bytes += length;
        s->user->queued_bytes += length;
        session_update_poll(s);
        return 0;
}

/* A packet built: to the socket, or behind what it could not take. */
static int session_send_packet(gmd_session *s, uint16_t type,
                               uint32_t request_id, const uint8_t *payload,
                               uint32_t length, const int *fds, unsigned n_fds)
{
        gmd_session_io *io = session_io(s);
        int r;

        if (list_empty(&io->sendq)) {
                r = gmd_wire_send(io->fd, type, request_id, payload, length,
                                  fds, n_fds);
                if (r != -EAGAIN) {
                        /* A peer gone closes quietly, as its hang-up
                         * would: one that only shut its reading side
                         * sends none. */
                        if (r == -EPIPE || r == -ECONNRESET)
                                session_close_later(s, "");
                        else if (r < 0)
                                session_lost_packet(s, "send failed", r);
                        return r;
                }
        }
        return session_queue(s, type, request_id, payload, length, fds, n_fds);
}

int session_send(gmd_session *s, uint16_t type, uint32_t request_id,
                 const ProtobufCMessage *msg, const int *fds, unsigned n_fds)
{
        uint8_t *payload = s->server->listener->tx;
        size_t length = 0;
        int r;

        if (s->closing || s->close_pending)
                return -ECONNRESET;
        if (msg) {
                length = protobuf_c_message_get_packed_size(msg);
                if (length > GMD_WIRE_MAX_PAYLOAD) {
                        log_error("reply %s of %zu bytes exceeds the protocol limit",
                                  gmd_wire_type_name(type), length);
                        return -EMSGSIZE;       /* the caller answers */
                }
                protobuf_c_message_pack(msg, payload);
        }
        /* Answers owed go first: the client gets its packets in the
         * order they were decided (answers.h). */
        if (!answers_holding(&s->answers))
                return session_send_packet(s, type, request_id, payload,
                                           (uint32_t)length, fds, n_fds);
        r = answers_hold(&s->answers, type, request_id, payload,
                         (uint32_t)length, fds, n_fds);
        /* -ECONNRESET: closing after its answers already (answers.h). */
        if (r < 0 && r != -ECONNRESET)
                session_lost_packet(s, "could not hold a packet behind its "
                                    "answers", r);
        return r;
}

int session_send_held(gmd_session *s, const gmd_answer *held)
{
        if (s->closing || s->close_pending)
                return -ECONNRESET;
        return session_send_packet(s, held->type, held->request_id,
                                   held->payload, held->length, held->fds,
                                   held->n_fds);
}

void session_hang_up(gmd_session *s)
{
        gmd_wire_drain(session_io(s)->fd, 1024);
}

void session_protocol_error(gmd_session *s, const char *what, uint16_t type)
{
        char why[128];

        s->server->stats.disconnects_protocol++;
        snprintf(why, sizeof(why), "protocol error: %s (%s)", what,
                 gmd_wire_type_name(type));
        session_close(s, why);
}

static void session_flush(gmd_session *s)
{
        gmd_session_io *io = session_io(s);
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &io->sendq) {
                queued_packet *q = container_of(pos, queued_packet, link);
                int r = gmd_wire_send(io->fd, q->type, q->request_id, q->payload,
                                      q->length, q->fds, q->n_fds);

                if (r == -EAGAIN)
                        break;
                if (r < 0) {
                        session_close(s, "send failed");
                        return;
                }
                for (unsigned i = 0; i < q->n_fds; i++)
                        close(q->fds[i]);
                list_remove(pos);
                io->sendq_len--;
                io->sendq_bytes -= q->length;
                s->user->queued_bytes -= q->length;
                free(q);
        }
        session_update_poll(s);
}

/* Read and handle packets while the session's user has loop time left
 * this turn (users.h), at most SESSION_READ_BUDGET. Nothing more is read
 * from a session marked to be closed: whatever it sent after that is
 * dropped with it, unhandled. */
static void session_read(gmd_session *s)
{
        gmd_session_io *io = session_io(s);
        gmd_users *users = &s->server->users;
        gmd_user *user = s->user;

        for (int budget = SESSION_READ_BUDGET;
             budget > 0 && !s->closing && !s->close_pending &&
             users_may_run(users, user); budget--) {
                gmd_wire_packet packet;
                const char *reason;
                uint64_t t0 = users_now(users);
                char why[160];
                int r;

                r = gmd_wire_recv(io->fd, s->server->listener->rx, &packet, &reason);
                if (r == -EAGAIN)
                        return;
                if (r == 0) {
                        session_close(s, NULL);
                        return;
                }
                if (r < 0) {
                        if (r == -ECONNRESET) {
                                session_close(s, NULL);
                                return;
                        }
                        s->server->stats.disconnects_protocol++;
                        snprintf(why, sizeof(why), "protocol error: %s",
                                 reason ? reason : strerror(-r));
                        session_close(s, why);
                        return;
                }
                s->server->listener->on_packet(s, &packet);
                /* The session may be closed now; its memory and its user's
                 * record stay until its handle's close callback. */
                users_charge(user, users_now(users) - t0);
        }
}

/* libuv reports an error on the socket (POLLERR) as UV_EBADF. The usual
 * cause is a client that went away — killed, or exited — with replies it
 * never read: say that, not "bad file descriptor". */
static void session_on_poll_error(gmd_session *s, int status)
{
        gmd_session_io *io = session_io(s);
        socklen_t len = sizeof(int);
        char who[128], why[160];
        int err = 0;

        if (status == UV_EBADF &&
            getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
            (err == 0 || err == ECONNRESET || err == EPIPE)) {
                log_info("%s went away (killed, or exited) without reading "
                         "its replies (%u more queued in gpu-memd)",
                         session_describe(s, who, sizeof(who)), io->sendq_len);
                session_close(s, NULL);
                return;
        }
        snprintf(why, sizeof(why), "socket error: %s",
                 err ? strerror(err) : uv_strerror(status));
        session_close(s, why);
}

static void session_on_poll(uv_poll_t *handle, int status, int events)
{
        gmd_session_io *io = handle->data;
        gmd_session *s = &io->session;

        /* Marked to be closed since the last wake-up (by the core, which
         * leaves the socket alone): nothing more is read or sent. */
        if (session_marked(s)) {
                uv_poll_stop(&io->poll);
                return;
        }

        if (status < 0) {
                session_on_poll_error(s, status);
                return;
        }
        if (events & UV_WRITABLE) {
                uint64_t t0 = users_now(&s->server->users);

                session_flush(s);
                users_charge(s->user, users_now(&s->server->users) - t0);
        }
        if (!s->closing && (events & (UV_READABLE | UV_DISCONNECT)))
                session_read(s);
}

