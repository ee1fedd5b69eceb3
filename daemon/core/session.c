/*
 * session — see session.h. The socket is a raw non-blocking fd watched with
 * uv_poll_t (libuv's pipes cannot carry SCM_RIGHTS on SEQPACKET). Reads are
 * bounded per wake-up so one busy client cannot starve the others; writes
 * that the socket refuses wait in a bounded queue, and a client that lets
 * the queue overflow (it sends requests but does not read the replies) is
 * disconnected instead of growing the daemon's memory.
 */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "timeutil.h"

/* Packets read per poll wake-up before yielding to other clients; the
 * user's turn (users.h) may end the reading sooner. */
#define SESSION_READ_BUDGET 64

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

const char *session_describe(const gmd_session *session, char *buf, size_t len)
{
        snprintf(buf, len, "client %llu (pid %d, uid %u%s%s)",
                 (unsigned long long)session->id, (int)session->pid,
                 (unsigned)session->uid, session->name[0] ? ", " : "",
                 session->name);
        return buf;
}

/* Supplementary groups of the peer as the kernel saw them at connect
 * (SO_PEERGROUPS), so group rules need no lookups by name. */
static void session_read_groups(gmd_session *s)
{
        gid_t groups[31];
        socklen_t len = sizeof(groups);

        s->groups[0] = s->gid;
        s->n_groups = 1;
        if (getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
                return;   /* ERANGE past 31 groups: the primary still counts */
        for (unsigned i = 0; i < len / sizeof(gid_t); i++)
                if (groups[i] != s->gid)
                        s->groups[s->n_groups++] = groups[i];
}

void session_apply_config(gmd_session *s)
{
        const gmd_config *c = &s->server->config;

        quota_resolve(c->quota_rules, c->n_quota_rules, s->uid, s->groups,
                      s->n_groups, &s->limits);
        s->admin = s->uid == 0;
        for (unsigned i = 0; i < s->n_groups && c->admin_gid != (gid_t)-1; i++)
                if (s->groups[i] == c->admin_gid)
                        s->admin = true;
        if (s->priority > s->limits.max_priority && !s->priority_by_admin)
                s->priority = s->limits.max_priority;
}

int session_new(gmd_server *server, int fd, gmd_session **ret_session)
{
        struct ucred cred;
        socklen_t cred_len = sizeof(cred);
        gmd_session *s;
        int r;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0)
                return -errno;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->user = users_hold(&server->users, cred.uid);
        if (!s->user) {
                free(s);
                return -ENOMEM;
        }
        s->server = server;
        s->id = ++server->next_client_id;
        s->fd = fd;
        s->pid = cred.pid;
        s->uid = cred.uid;
        s->gid = cred.gid;
        session_read_groups(s);
        session_apply_config(s);
        s->priority = s->limits.priority;
        s->connected_ms = now_ms();
        list_init(&s->buffers);
        waits_init(&s->waits);
        answers_init(&s->answers, &server->answers_due, &server->pending);
        list_init(&s->sendq);
        list_init(&s->link);
        list_init(&s->close_link);

        r = uv_poll_init(server->loop, &s->poll, fd);
        if (r < 0) {
                users_release(&server->users, s->user);
                free(s);
                return r;
        }
        s->poll.data = s;
        s->poll_events = UV_READABLE;
        r = uv_poll_start(&s->poll, s->poll_events, session_on_poll);
        if (r < 0) {
                /* The handle is initialised, so the session can only be
                 * freed from its close callback; the caller keeps the fd. */
                s->fd = -1;
                uv_close((uv_handle_t *)&s->poll, session_on_closed);
                return r;
        }
        list_add_tail(&server->sessions, &s->link);
        server->n_sessions++;
        s->user->n_sessions++;
        *ret_session = s;
        return 0;
}

static void session_on_closed(uv_handle_t *handle)
{
        gmd_session *s = handle->data;

        if (s->fd >= 0)
                close(s->fd);
        users_release(&s->server->users, s->user);
        free(s);
}

void session_close(gmd_session *s, const char *reason)
{
        gmd_server *server = s->server;
        uint64_t bytes = s->bytes, kept = s->reuse.kept_bytes;
        unsigned n_buffers = s->n_buffers;
        gmd_list *pos, *tmp;
        char who[128];

        if (s->closing)
                return;
        s->closing = true;
        s->reuse.gone = true;
        if (s->close_pending) {
                s->close_pending = false;
                list_remove(&s->close_link);
        }
        session_describe(s, who, sizeof(who));
        if (reason)
                log_warning("%s: %s — disconnecting", who, reason);

        /* Its buffers, waiters, waits and kept VRAM: the layer above's.
         * What it is owed goes after: freeing a buffer may fail an
         * acquire waiting for it, an answer nobody will read. */
        server->on_session_closed(s);
        answers_drop(&s->answers);
        list_for_each_safe(pos, tmp, &s->sendq) {
                queued_packet *q = container_of(pos, queued_packet, link);

                for (unsigned i = 0; i < q->n_fds; i++)
                        close(q->fds[i]);
                list_remove(pos);
                free(q);
        }
        s->user->queued_bytes -= s->sendq_bytes;
        s->sendq_len = 0;
        s->sendq_bytes = 0;
        list_remove(&s->link);
        server->n_sessions--;
        s->user->n_sessions--;
        if (s->hello_done)
                log_info("%s disconnected; freed %u buffers (%llu bytes)",
                         who, n_buffers, (unsigned long long)bytes);

        uv_poll_stop(&s->poll);
        uv_close((uv_handle_t *)&s->poll, session_on_closed);

        /* Memory came back: serve whoever waits for it. */
        if (n_buffers > 0 || kept > 0)
                pending_mark(&server->pending, PENDING_ROOM);
}

static void session_update_poll(gmd_session *s)
{
        int events = UV_READABLE | (list_empty(&s->sendq) ? 0 : UV_WRITABLE);

        if (events != s->poll_events && !s->closing && !s->close_pending &&
            !s->answers.close_after) {
                s->poll_events = events;
                uv_poll_start(&s->poll, events, session_on_poll);
        }
}

/* A packet lost (`what` failed with `err`): the protocol has no way to
 * say so, and the client would wait for its answer, or for the move its
 * remap notice announced, forever. So the connection is closed instead,
 * which ends all it held (session_release). Returns `err`. */
static int session_lost_packet(gmd_session *s, const char *what, int err)
{
        char why[96];

        snprintf(why, sizeof(why), "%s: %s", what, strerror(-err));
        session_close_later(s, why);
        return err;
}

static int session_queue(gmd_session *s, uint16_t type, uint32_t request_id,
                         const uint8_t *payload, uint32_t length,
                         const int *fds, unsigned n_fds)
{
        const gmd_config *c = &s->server->config;
        queued_packet *q;
        char why[96];

        /* Never close from here: whoever is sending may go on using this
         * session's buffers, waits or acquirers. */
        if (s->sendq_len >= c->max_send_queue ||
            s->sendq_bytes + length > c->max_send_queue_bytes) {
                snprintf(why, sizeof(why), "not reading replies (%u queued, "
                         "%llu bytes)", s->sendq_len,
                         (unsigned long long)s->sendq_bytes);
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
        list_add_tail(&s->sendq, &q->link);
        s->sendq_len++;
        s->sendq_bytes += length;
        s->user->queued_bytes += length;
        session_update_poll(s);
        return 0;
}

void session_close_later(gmd_session *s, const char *reason)
{
        if (s->closing || s->close_pending)
                return;
        s->close_pending = true;
        snprintf(s->close_reason, sizeof(s->close_reason), "%s", reason);
        uv_poll_stop(&s->poll);
        list_add_tail(&s->server->close_pending, &s->close_link);
        pending_mark(&s->server->pending, PENDING_CLOSES);
}

/* A packet built: to the socket, or behind what it could not take. */
static int session_send_packet(gmd_session *s, uint16_t type,
                               uint32_t request_id, const uint8_t *payload,
                               uint32_t length, const int *fds, unsigned n_fds)
{
        int r;

        if (list_empty(&s->sendq)) {
                r = gmd_wire_send(s->fd, type, request_id, payload, length,
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
        uint8_t *payload = s->server->tx;
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

int session_answer(gmd_session *s, answer_kind kind, uint32_t request_id,
                   const gmd_result *r)
{
        int ret;

        if (s->closing || s->close_pending)
                return -ECONNRESET;
        ret = answers_push(&s->answers, kind, request_id, r);
        if (ret == -ENOMEM)
                session_lost_packet(s, "could not queue an answer", ret);
        return ret;
}

void session_close_after_answers(gmd_session *s, const char *reason)
{
        if (s->closing || s->close_pending || s->answers.close_after)
                return;
        uv_poll_stop(&s->poll);
        answers_close_after(&s->answers, reason);
}

int session_notify_remap(gmd_session *s, const gmd_remap_notice *notice)
{
        return s->server->session_ops->notify_remap(s, notice);
}

int session_notify_reclaim(gmd_session *s, unsigned device, uint64_t bytes)
{
        return s->server->session_ops->notify_reclaim(s, device, bytes);
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
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &s->sendq) {
                queued_packet *q = container_of(pos, queued_packet, link);
                int r = gmd_wire_send(s->fd, q->type, q->request_id, q->payload,
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
                s->sendq_len--;
                s->sendq_bytes -= q->length;
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

                r = gmd_wire_recv(s->fd, s->server->rx, &packet, &reason);
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
                s->server->on_packet(s, &packet);
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
        socklen_t len = sizeof(int);
        char who[128], why[160];
        int err = 0;

        if (status == UV_EBADF &&
            getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
            (err == 0 || err == ECONNRESET || err == EPIPE)) {
                log_info("%s went away (killed, or exited) without reading "
                         "its replies (%u more queued in gpu-memd)",
                         session_describe(s, who, sizeof(who)), s->sendq_len);
                session_close(s, NULL);
                return;
        }
        snprintf(why, sizeof(why), "socket error: %s",
                 err ? strerror(err) : uv_strerror(status));
        session_close(s, why);
}

static void session_on_poll(uv_poll_t *handle, int status, int events)
{
        gmd_session *s = handle->data;

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

void session_user_usage(const gmd_list *sessions, uid_t uid, gmd_usage *ret_usage)
{
        gmd_usage u = { { 0, 0 }, 0, 0, 0 };
        const gmd_list *pos;

        list_for_each(pos, sessions) {
                const gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid)
                        continue;
                u.bytes[GMD_TIER_VRAM] += s->tier_bytes[GMD_TIER_VRAM];
                u.bytes[GMD_TIER_HOST] += s->tier_bytes[GMD_TIER_HOST];
                /* Only VRAM-resident buffers are ever parked (parking.c). */
                u.parked += s->parking.bytes;
                u.buffers += s->n_buffers;
                u.parked_buffers += s->parking.n;
        }
        *ret_usage = u;
}
