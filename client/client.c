/*
 * client — a gmd_client's life: connecting and the hello exchange, picking
 * the mapper the daemon's backend needs, sending requests and waiting for
 * their replies, and tearing everything down. The I/O thread that reads
 * the replies lives in io.c; client.h explains how the two meet.
 *
 * The hello is done here, synchronously and before the I/O thread starts:
 * nothing else may happen on a connection until it succeeds, and the mapper
 * (which the I/O thread needs for the first alloc reply) depends on its
 * answer.
 */
#include "client.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "buffer.h"
#include "errors.h"
#include "gpumem.pb-c.h"
#include "timeutil.h"
#include "wire.h"

#define HELLO_TIMEOUT_MS 30000
#define CLIENT_NAME_MAX  64     /* Hello.client_name, bytes */
/* Restart recovery keeps an fd per mapped segment (buffer.h). They go at
 * or above KEEP_FD_BASE, clear of the numbers select() can watch, and the
 * soft RLIMIT_NOFILE is raised toward NOFILE_WANT (never past the hard
 * limit) so there is room for them. */
#define KEEP_FD_BASE     1024
#define NOFILE_WANT      65536
#define RECONNECT_MAX_S  (7 * 24 * 3600)

static uint32_t next_request_id_locked(gmd_client *client)
{
        uint32_t id = client->next_request_id++;

        if (client->next_request_id == 0)       /* 0 means notification */
                client->next_request_id = 1;
        return id;
}

/* Pack `msg` into a new buffer. */
static int message_pack(const ProtobufCMessage *msg, uint8_t **ret_buf,
                        size_t *ret_len)
{
        size_t len = protobuf_c_message_get_packed_size(msg);
        uint8_t *buf;

        if (len > GMD_WIRE_MAX_PAYLOAD)
                return -EMSGSIZE;
        buf = malloc(len > 0 ? len : 1);
        if (!buf)
                return -ENOMEM;
        protobuf_c_message_pack(msg, buf);
        *ret_buf = buf;
        *ret_len = len;
        return 0;
}

/* Under send_lock: send one packed message; waits for room in the socket
 * if it is full. */
static int send_packed_locked(gmd_client *client, uint16_t type, uint32_t id,
                              const uint8_t *buf, size_t len)
{
        int r;

        for (;;) {
                struct pollfd p = { .fd = client->sock, .events = POLLOUT };

                r = gmd_wire_send(client->sock, type, id, buf, (uint32_t)len,
                                  NULL, 0);
                if (r != -EAGAIN)
                        break;
                /* A dead peer shows as POLLHUP/POLLERR; the retried send
                 * then reports it. */
                if (poll(&p, 1, -1) < 0 && errno != EINTR) {
                        r = -errno;
                        break;
                }
        }
        return r;
}

/* Pack and send one message; waits for room in the socket if it is full. */
static int send_message(gmd_client *client, uint16_t type, uint32_t id,
                        const ProtobufCMessage *msg)
{
        uint8_t *buf;
        size_t len;
        int r;

        r = message_pack(msg, &buf, &len);
        if (r < 0)
                return r;
        pthread_mutex_lock(&client->send_lock);
        r = send_packed_locked(client, type, id, buf, len);
        pthread_mutex_unlock(&client->send_lock);
        free(buf);
        return r;
}

void gmd__client_fail(gmd_client *client, int error, const char *reason)
{
        gmd_list *pos, *tmp;

        pthread_mutex_lock(&client->lock);
        if (client->state != GMD_CONN_DEAD) {
                gmd__client_change_state_locked(client, GMD_CONN_DEAD);
                client->dead_error = error;
                if (error == GMD_ECONN && client->shutdown_notice[0])
                        snprintf(client->dead_reason, sizeof(client->dead_reason),
                                 "gpu-memd is stopping: %s",
                                 client->shutdown_notice);
                else
                        snprintf(client->dead_reason, sizeof(client->dead_reason),
                                 "%s", reason);
        }
        list_for_each_safe(pos, tmp, &client->pending) {
                gmd_request *req = container_of(pos, gmd_request, node);

                list_remove(pos);
                /* A nowait call's fate is unknown; gmd_flush reports the
                 * connection's error instead. */
                gmd__request_complete_locked(client, req,
                                             req->nowait ? 0 : client->dead_error,
                                             req->nowait ? NULL :
                                             client->dead_reason);
        }
        pthread_cond_broadcast(&client->nowait_cond);
        pthread_mutex_unlock(&client->lock);
        /* Wakes the I/O thread and any sender blocked in poll; the fd
         * itself is closed only by gmd_disconnect, so it cannot be reused
         * under a thread still holding the number. */
        shutdown(client->sock, SHUT_RDWR);
}

bool gmd__client_change_state_locked(gmd_client *client, gmd_conn_state to)
{
        static const bool allowed[4][4] = {
                /*                  UP     AWAY   RESEND DEAD */
                [GMD_CONN_UP]       = { false, true,  false, true },
                [GMD_CONN_AWAY]     = { false, false, true,  true },
                [GMD_CONN_RESENDING] = { true, true,  false, true },
                [GMD_CONN_DEAD]     = { false, false, false, false },
        };

        if (!allowed[client->state][to])
                return false;
        client->state = to;
        return true;
}

void gmd__request_complete_locked(gmd_client *client, gmd_request *req,
                                  int error, const char *message)
{
        if (req->nowait) {
                gmd__nowait_done_locked(client, req, error, message);
                return;
        }
        req->error = error;
        req->message = message ? strdup(message) : NULL;
        req->done = true;
        pthread_cond_signal(&req->cond);
}

void gmd__client_note_shutdown(gmd_client *client, const char *message)
{
        pthread_mutex_lock(&client->lock);
        snprintf(client->shutdown_notice, sizeof(client->shutdown_notice),
                 "%s", message && *message ? message : "no reason given");
        pthread_mutex_unlock(&client->lock);
}

static uint16_t reply_type_of(uint16_t type)
{
        switch (type) {
        case GMD__MSG_TYPE__MSG_ALLOC:   return GMD__MSG_TYPE__MSG_ALLOC_REPLY;
        case GMD__MSG_TYPE__MSG_STATUS:  return GMD__MSG_TYPE__MSG_STATUS_REPLY;
        default:                         return GMD__MSG_TYPE__MSG_OK_REPLY;
        }
}

/* A send failed with `r` on a connection that looked alive: the daemon
 * closed it. The I/O thread reads what it sent before (a shutdown notice
 * says why) and then fails every request with that; give it a second to,
 * then fail the connection with the send's error if it has not. */
static void send_lost(gmd_client *client, int r)
{
        char reason[160];

        /* Ridden through: the request stays pending and goes again on
         * the next connection, or fails with the client (reconnect.c). */
        if (client->reconnect_ms > 0 &&
            (r == -EPIPE || r == -ECONNRESET || r == -ENOTCONN))
                return;
        for (int i = 0; i < 100 && (r == -EPIPE || r == -ECONNRESET); i++) {
                bool dead;

                pthread_mutex_lock(&client->lock);
                dead = client->state == GMD_CONN_DEAD;
                pthread_mutex_unlock(&client->lock);
                if (dead)
                        break;
                usleep(10000);
        }
        snprintf(reason, sizeof(reason),
                 "gpu-memd closed the connection (send: %s)", strerror(-r));
        gmd__client_fail(client, GMD_ECONN, reason);
}

/* Put `req` (payload packed, nothing else of it touched by others yet)
 * on the pending list and, with the connection up, send `buf`; while it
 * is away it waits there for the I/O thread to send it (client.h). Under
 * send_lock throughout, so a new connection cannot come in between.
 * Returns 0 (queued), 1 (queued, but its send failed: the connection was
 * lost as it went out) or the error it was refused with at once (not
 * queued). */
static int request_queue(gmd_client *client, gmd_request *req,
                         const uint8_t *buf, size_t len)
{
        uint16_t type = req->type;
        bool now = false;
        uint32_t id = 0;
        int r = 0;

        pthread_mutex_lock(&client->send_lock);
        pthread_mutex_lock(&client->lock);
        if (client->state == GMD_CONN_DEAD) {
                r = client->dead_error;
                gmd__error_set("%s", client->dead_reason);
        } else if (req->names && atomic_load(&req->names->revoked)) {
                /* Revoked while the call was on its way here (a restart
                 * that did not keep it): its id means nothing now. */
                r = gmd__buffer_revoked_error(req->names);
        } else {
                req->id = next_request_id_locked(client);
                list_add_tail(&client->pending, &req->node);
                id = req->id;   /* a nowait record may go once sent */
                if (client->state == GMD_CONN_UP) {
                        req->sent_gen = client->gen;
                        now = true;
                }
        }
        pthread_mutex_unlock(&client->lock);
        if (now) {
                r = send_packed_locked(client, type, id, buf, len);
                pthread_mutex_unlock(&client->send_lock);
                if (r < 0) {
                        send_lost(client, r);
                        return 1;
                }
                return 0;
        }
        pthread_mutex_unlock(&client->send_lock);
        return r;
}

void gmd__client_call_start(gmd_client *client, gmd_request *req,
                            uint16_t type, const ProtobufCMessage *msg)
{
        pthread_condattr_t cattr;
        int r;

        pthread_condattr_init(&cattr);
        pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
        pthread_cond_init(&req->cond, &cattr);
        pthread_condattr_destroy(&cattr);
        req->expect = reply_type_of(type);
        req->type = type;

        r = message_pack(msg, &req->packed, &req->packed_len);
        if (r < 0) {
                /* Nothing went out: only this call fails. */
                req->done = true;
                req->error = r;
                return;
        }
        r = request_queue(client, req, req->packed, req->packed_len);
        if (r < 0) {
                req->done = true;
                req->error = r;
                req->message = strdup(gmd_last_error());
        }
}

/* Under client->lock: may a request whose deadline passed be given up
 * here? Only while it is with no daemon: the connection it went out on is
 * gone and it did not go out on the new one. */
static bool request_droppable_locked(const gmd_client *client,
                                     const gmd_request *req)
{
        return client->state == GMD_CONN_AWAY ||
               (client->state == GMD_CONN_RESENDING &&
                req->sent_gen != client->gen);
}

static struct timespec timespec_at_ms(uint64_t ms)
{
        return (struct timespec){ .tv_sec = (time_t)(ms / 1000),
                                  .tv_nsec = (long)(ms % 1000) * 1000000L };
}

int gmd__client_call_finish(gmd_client *client, gmd_request *req)
{
        int r;

        pthread_mutex_lock(&client->lock);
        while (!req->done) {
                uint64_t now = now_ms();
                struct timespec at;

                if (!req->deadline_ms) {
                        pthread_cond_wait(&req->cond, &client->lock);
                        continue;
                }
                if (now < req->deadline_ms) {
                        at = timespec_at_ms(req->deadline_ms);
                        pthread_cond_timedwait(&req->cond, &client->lock, &at);
                        continue;
                }
                if (request_droppable_locked(client, req)) {
                        char why[160];

                        list_remove(&req->node);
                        snprintf(why, sizeof(why), "gpu-memd went away and "
                                 "was not back within this call's timeout "
                                 "of %lld ms", (long long)req->timeout_ms);
                        gmd__request_complete_locked(client, req,
                                                     GMD_ETIMEDOUT, why);
                        break;
                }
                /* With a daemon, which keeps the same deadline and
                 * answers: look again now and then, in case the
                 * connection goes meanwhile. */
                at = timespec_at_ms(now + 100);
                pthread_cond_timedwait(&req->cond, &client->lock, &at);
        }
        pthread_mutex_unlock(&client->lock);

        r = req->error;
        if (r < 0)
                gmd__error_set("%s", req->message ? req->message : gmd_strerror(r));
        pthread_cond_destroy(&req->cond);
        return r;
}

int gmd__client_call(gmd_client *client, gmd_request *req, uint16_t type,
                const ProtobufCMessage *msg)
{
        gmd__client_call_start(client, req, type, msg);
        return gmd__client_call_finish(client, req);
}

void gmd__request_clear(gmd_request *req)
{
        if (req->reply)
                protobuf_c_message_free_unpacked(req->reply, NULL);
        req->reply = NULL;
        free(req->message);
        req->message = NULL;
        free(req->packed);
        req->packed = NULL;
}

int gmd__client_send_nowait(gmd_client *client, uint16_t type,
                            const ProtobufCMessage *msg, const char *call,
                            gmd_buffer *buffer, bool releases)
{
        gmd_request *req;
        uint8_t *buf;
        size_t len;
        int r;

        /* Everything that can fail without the connection failing comes
         * before the record is parked: once parked, it is the pending
         * list's, and this thread no longer touches it. It keeps a copy
         * of the payload to go again after a restart; this thread sends
         * its own. */
        r = message_pack(msg, &buf, &len);
        if (r < 0) {
                gmd__error_set("%s: cannot pack the request: %s", call,
                               strerror(-r));
                return r;
        }
        req = calloc(1, sizeof(*req));
        if (req)
                req->packed = malloc(len > 0 ? len : 1);
        if (!req || !req->packed) {
                free(req);
                free(buf);
                gmd__error_set("%s: out of memory", call);
                return -ENOMEM;
        }
        memcpy(req->packed, buf, len);
        req->packed_len = len;
        req->type = type;
        req->expect = reply_type_of(type);
        req->nowait = call;
        req->buffer_id = buffer ? buffer->id : 0;
        req->names = buffer;
        req->releases = releases;

        pthread_mutex_lock(&client->lock);
        client->nowaits++;
        pthread_mutex_unlock(&client->lock);
        /* Released as the call returns, as gmd_release_after after its
         * answer; before the packet leaves, so the I/O thread's repair of
         * a refusal (io.c) cannot come first. */
        if (releases)
                atomic_store(&buffer->leased, false);
        r = request_queue(client, req, buf, len);
        free(buf);
        if (r < 0) {
                /* Not queued: the connection is dead, or the buffer was
                 * revoked on the way. */
                if (releases)
                        atomic_store(&buffer->leased, true);
                pthread_mutex_lock(&client->lock);
                req->nowait = NULL;     /* not counted as answered */
                if (client->nowaits > 0 && --client->nowaits == 0)
                        pthread_cond_broadcast(&client->nowait_cond);
                pthread_mutex_unlock(&client->lock);
                free(req->packed);
                free(req);
                return r;
        }
        /* Only a send that failed is this call's to report. Once sent,
         * what the request meets (a reply that kills the connection
         * included, which may come before this line) is gmd_flush's. */
        if (r > 0) {
                r = gmd__client_dead_error(client);
                return r < 0 ? r : 0;
        }
        return 0;
}

void gmd__nowait_done_locked(gmd_client *client, gmd_request *req, int error,
                             const char *message)
{
        if (error < 0 && client->nowait_error == 0) {
                char target[48];

                if (req->buffer_id)
                        snprintf(target, sizeof(target), "buffer %" PRIu64,
                                 req->buffer_id);
                else
                        snprintf(target, sizeof(target), "all buffers");
                client->nowait_error = error;
                snprintf(client->nowait_reason, sizeof(client->nowait_reason),
                         "%s of %s: %s", req->nowait, target,
                         message && *message ? message : gmd_strerror(error));
        }
        if (client->nowaits > 0 && --client->nowaits == 0)
                pthread_cond_broadcast(&client->nowait_cond);
        free(req->packed);
        free(req);
}

/** Wait for the answers to this client's nowait calls; see gpumem.h. */
int gmd_flush(gmd_client *client, int64_t timeout_ms)
{
        struct timespec deadline = { 0 };
        int r = 0;

        if (!client) {
                gmd__error_set("gmd_flush: client is NULL");
                return -EINVAL;
        }
        if (timeout_ms >= 0) {
                clock_gettime(CLOCK_MONOTONIC, &deadline);
                deadline.tv_sec += timeout_ms / 1000;
                deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
                if (deadline.tv_nsec >= 1000000000L) {
                        deadline.tv_sec++;
                        deadline.tv_nsec -= 1000000000L;
                }
        }
        /* Also once the connection is dead: gmd__client_fail dropped the
         * records still pending, and one the I/O thread took already it
         * counts in a moment, without waiting for anything but locks. */
        pthread_mutex_lock(&client->lock);
        while (client->nowaits > 0) {
                if (timeout_ms < 0)
                        pthread_cond_wait(&client->nowait_cond, &client->lock);
                else if (pthread_cond_timedwait(&client->nowait_cond,
                                                &client->lock,
                                                &deadline) == ETIMEDOUT)
                        break;
        }
        if (client->nowaits > 0) {
                /* The error, if one came, stays for the next flush. */
                r = GMD_ETIMEDOUT;
                gmd__error_set("gmd_flush: %u requests sent without waiting "
                               "still unanswered after %lld ms",
                               client->nowaits, (long long)timeout_ms);
        } else if (client->nowait_error) {
                r = client->nowait_error;
                gmd__error_set("%s", client->nowait_reason);
                client->nowait_error = 0;
                client->nowait_reason[0] = '\0';
        } else if (client->state == GMD_CONN_DEAD) {
                r = client->dead_error;
                gmd__error_set("%s", client->dead_reason);
        }
        pthread_mutex_unlock(&client->lock);
        return r;
}

int gmd__client_send(gmd_client *client, uint16_t type, const ProtobufCMessage *msg)
{
        uint32_t id;

        /* Also while away: a remap ack on the new connection before the
         * resume is over goes out; one on the dead connection fails. */
        pthread_mutex_lock(&client->lock);
        if (client->state == GMD_CONN_DEAD) {
                pthread_mutex_unlock(&client->lock);
                return client->dead_error;
        }
        id = next_request_id_locked(client);
        pthread_mutex_unlock(&client->lock);
        return send_message(client, type, id, msg);
}

/* Pack `plan` as a PlanReport. */
static int plan_pack(const gmd_plan_report *plan, uint8_t **ret_buf,
                     size_t *ret_len)
{
        Gmd__PlanReport msg = GMD__PLAN_REPORT__INIT;

        msg.planner = (char *)plan->planner;
        msg.kept_bytes = plan->kept;
        msg.offloaded_bytes = plan->offloaded;
        msg.recomputed_bytes = plan->recomputed;
        msg.streamed_bytes = plan->streamed;
        return message_pack(&msg.base, ret_buf, ret_len);
}

int gmd__client_report_plan(gmd_client *client, const gmd_plan_report *plan)
{
        bool empty = !plan->planner[0] && !plan->kept && !plan->offloaded &&
                     !plan->recomputed && !plan->streamed;
        gmd_conn_state state;
        uint8_t *buf;
        size_t len;
        uint32_t id;
        int r;

        r = plan_pack(plan, &buf, &len);
        if (r < 0)
                return r;
        /* Remembered and sent under send_lock: a resend after a resume
         * (gmd__client_send_plan) cannot overtake a newer report. */
        pthread_mutex_lock(&client->send_lock);
        pthread_mutex_lock(&client->lock);
        client->plan = *plan;
        client->has_plan = !empty;
        state = client->state;
        r = state == GMD_CONN_DEAD ? client->dead_error : 0;
        id = next_request_id_locked(client);
        pthread_mutex_unlock(&client->lock);
        /* Away, the old connection is gone and the new one is not the
         * session's yet: the resume sends it. */
        if (r == 0 && state != GMD_CONN_AWAY)
                r = send_packed_locked(client, GMD__MSG_TYPE__MSG_PLAN, id,
                                       buf, len);
        pthread_mutex_unlock(&client->send_lock);
        free(buf);
        return r;
}

int gmd__client_send_plan(gmd_client *client)
{
        gmd_plan_report plan;
        uint8_t *buf = NULL;
        size_t len = 0;
        bool has_plan;
        uint32_t id;
        int r = 0;

        pthread_mutex_lock(&client->send_lock);
        pthread_mutex_lock(&client->lock);
        has_plan = client->has_plan;
        plan = client->plan;
        id = next_request_id_locked(client);
        pthread_mutex_unlock(&client->lock);
        if (has_plan)
                r = plan_pack(&plan, &buf, &len);
        if (has_plan && r == 0)
                r = send_packed_locked(client, GMD__MSG_TYPE__MSG_PLAN, id,
                                       buf, len);
        pthread_mutex_unlock(&client->send_lock);
        free(buf);
        return r;
}

int gmd__client_send_after(gmd_client *client, pthread_mutex_t *held,
                      uint16_t type, const ProtobufCMessage *msg)
{
        uint8_t small[64], *buf = small, *heap = NULL;
        size_t len = protobuf_c_message_get_packed_size(msg);
        uint32_t id = 0;
        int r = 0;

        /* The cache's messages name one buffer: packed on the stack they
         * cannot fail for want of memory, so "parked" never goes unsaid. */
        if (len > sizeof(small)) {
                r = message_pack(msg, &heap, &len);
                if (r < 0) {
                        pthread_mutex_unlock(held);
                        return r;
                }
                buf = heap;
        } else {
                protobuf_c_message_pack(msg, small);
        }
        pthread_mutex_lock(&client->send_lock);
        pthread_mutex_unlock(held);
        /* Away, the cache's messages are not sent: the claims made on
         * the next connection say what the client holds (reconnect.c). */
        pthread_mutex_lock(&client->lock);
        if (client->state == GMD_CONN_DEAD)
                r = client->dead_error;
        else if (client->state != GMD_CONN_UP)
                r = -EAGAIN;
        else
                id = next_request_id_locked(client);
        pthread_mutex_unlock(&client->lock);
        if (r == 0)
                r = send_packed_locked(client, type, id, buf, len);
        pthread_mutex_unlock(&client->send_lock);
        free(heap);
        return r;
}

int gmd__client_dead_error(gmd_client *client)
{
        int r = 0;

        pthread_mutex_lock(&client->lock);
        if (client->state == GMD_CONN_DEAD) {
                r = client->dead_error;
                gmd__error_set("%s", client->dead_reason);
        }
        pthread_mutex_unlock(&client->lock);
        return r;
}

/* Wait up to the deadline for the one packet that answers the hello on
 * `sock`; -ECANCELED when `wake_fd` (-1: none) fires first. */
static int hello_receive(int sock, uint64_t deadline, int wake_fd,
                         uint8_t *buf, gmd_wire_packet *ret_packet)
{
        for (;;) {
                struct pollfd p[2] = {
                        { .fd = sock, .events = POLLIN },
                        { .fd = wake_fd, .events = POLLIN },
                };
                uint64_t now = now_ms();
                const char *reason;
                int r;

                if (now >= deadline) {
                        gmd__error_set("gpu-memd did not answer the hello in time");
                        return GMD_ETIMEDOUT;
                }
                r = poll(p, wake_fd >= 0 ? 2 : 1, (int)(deadline - now));
                if (r < 0 && errno != EINTR) {
                        gmd__error_set("poll: %s", strerror(errno));
                        return -errno;
                }
                if (r <= 0)
                        continue;
                if (wake_fd >= 0 && p[1].revents)
                        return -ECANCELED;
                r = gmd_wire_recv(sock, buf, ret_packet, &reason);
                if (r == -EAGAIN)
                        continue;
                if (r == 0 || r == -ECONNRESET) {
                        gmd__error_set("gpu-memd closed the connection during the hello");
                        return GMD_ECONN;
                }
                if (r < 0) {
                        gmd__error_set("bad hello reply from gpu-memd: %s",
                                  reason ? reason : strerror(-r));
                        return GMD_EPROTO;
                }
                return 0;
        }
}

/* The hello reply's devices into the client's table; `first`: the table
 * is made now, else it exists and only its details change. */
static int devices_take(gmd_client *client, const Gmd__HelloReply *reply,
                        bool first)
{
        if (first) {
                client->n_devices = (unsigned)reply->n_devices;
                client->granularity = calloc(reply->n_devices ? reply->n_devices : 1,
                                             sizeof(*client->granularity));
                client->ids = calloc(reply->n_devices ? reply->n_devices : 1,
                                     sizeof(*client->ids));
                if (!client->granularity || !client->ids) {
                        gmd__error_set("out of memory");
                        return -ENOMEM;
                }
        }
        /* Devices are named by index; one the reply does not describe
         * keeps granularity 0, which the mapping cache never matches, and
         * no UUID, which gmd_device_from_cuda refuses to guess past. */
        for (size_t i = 0; i < reply->n_devices; i++) {
                const Gmd__DeviceInfo *d = reply->devices[i];
                gmd__device_id *id;

                if (d->index >= client->n_devices)
                        continue;
                client->granularity[d->index] = d->granularity;
                id = &client->ids[d->index];
                snprintf(id->uuid, sizeof(id->uuid), "%s", d->uuid ? d->uuid : "");
                snprintf(id->pci_bus_id, sizeof(id->pci_bus_id), "%s",
                         d->pci_bus_id ? d->pci_bus_id : "");
        }
        return 0;
}

static int version_check(const Gmd__HelloReply *reply)
{
        if (reply->version < GMD_WIRE_MIN_VERSION ||
            reply->version > GMD_WIRE_VERSION) {
                gmd__error_set("gpu-memd chose protocol version %u; this libgpumem "
                          "speaks %u to %u", reply->version,
                          GMD_WIRE_MIN_VERSION, GMD_WIRE_VERSION);
                return GMD_EPROTO;
        }
        return 0;
}

/* The session to claim back after a restart: none when the daemon has no
 * restart recovery (an empty token) or sends one too long to be its. */
static void token_take(gmd_client *client, const Gmd__HelloReply *reply)
{
        client->resume_token_len = 0;
        if (reply->resume_token.len > 0 &&
            reply->resume_token.len <= sizeof(client->resume_token)) {
                memcpy(client->resume_token, reply->resume_token.data,
                       reply->resume_token.len);
                client->resume_token_len = reply->resume_token.len;
        }
}

static int hello_accept(gmd_client *client, const Gmd__HelloReply *reply)
{
        int r;

        r = version_check(reply);
        if (r < 0)
                return r;
        client->version = reply->version;
        client->client_id = reply->client_id;
        token_take(client, reply);
        r = devices_take(client, reply, true);
        if (r < 0)
                return r;
        client->backend = strdup(reply->backend ? reply->backend : "");
        client->daemon_version = strdup(reply->daemon_version ?
                                        reply->daemon_version : "");
        if (!client->backend || !client->daemon_version) {
                gmd__error_set("out of memory");
                return -ENOMEM;
        }
        return 0;
}

int gmd__hello_again(gmd_client *client, const Gmd__HelloReply *reply)
{
        const char *backend = reply->backend ? reply->backend : "";
        int r;

        r = version_check(reply);
        if (r < 0)
                return r;
        /* The mapper and every buffer's device number come from the
         * first hello: a daemon of another backend or another number of
         * devices serves memory this client cannot take back. */
        if (strcmp(backend, client->backend) != 0) {
                gmd__error_set("gpu-memd came back with the %.16s backend; this "
                               "client's buffers were mapped for %.16s",
                               backend, client->backend);
                return GMD_ENOTSUP;
        }
        if (reply->n_devices != client->n_devices) {
                gmd__error_set("gpu-memd came back serving %zu devices instead "
                               "of %u", reply->n_devices, client->n_devices);
                return GMD_ENOTSUP;
        }
        client->version = reply->version;
        return devices_take(client, reply, false);
}

/* The name shown by gpu-memctl: at most 64 bytes, cut at a UTF-8 boundary. */
static void client_name_prepare(const char *name, char out[CLIENT_NAME_MAX + 1])
{
        size_t n;

        if (!name || !*name)
                name = program_invocation_short_name;
        n = strnlen(name, CLIENT_NAME_MAX + 1);
        if (n > CLIENT_NAME_MAX) {
                n = CLIENT_NAME_MAX;
                while (n > 0 && ((unsigned char)name[n] & 0xc0) == 0x80)
                        n--;
        }
        memcpy(out, name, n);
        out[n] = '\0';
}

/* $GPU_MEMD_PRIORITY: unset or empty is 0 (the daemon's default). */
static int priority_from_env(int32_t *ret_priority)
{
        const char *text = secure_getenv(GMD_PRIORITY_ENV);
        char *end;
        long v;

        *ret_priority = 0;
        if (!text || !*text)
                return 0;
        errno = 0;
        v = strtol(text, &end, 10);
        if (errno || end == text || *end || v < INT32_MIN || v > INT32_MAX) {
                gmd__error_set("%s='%.32s' is not a priority (an integer; unset "
                          "for the default)", GMD_PRIORITY_ENV, text);
                return -EINVAL;
        }
        *ret_priority = (int32_t)v;
        return 0;
}

/* What every hello of this client says (it says it again after a
 * restart). */
static int hello_prepare(gmd_client *client, const char *client_name)
{
        bool keeps;
        int r;

        r = priority_from_env(&client->priority);
        if (r < 0)
                return r;
        r = gmd__env_switch(GMD_KEEP_MAPPINGS_ENV, "unmap at every swap-out",
                            &keeps);
        if (r < 0)
                return r;
        client->keeps_mappings = keeps;
        client_name_prepare(client_name, client->name);
        return 0;
}

/* Send one packed message on `sock`, waiting for room. */
static int send_on(int sock, uint16_t type, uint32_t id, const ProtobufCMessage *msg)
{
        uint8_t *buf;
        size_t len;
        int r;

        r = message_pack(msg, &buf, &len);
        if (r < 0)
                return r;
        for (;;) {
                struct pollfd p = { .fd = sock, .events = POLLOUT };

                r = gmd_wire_send(sock, type, id, buf, (uint32_t)len, NULL, 0);
                if (r != -EAGAIN)
                        break;
                if (poll(&p, 1, 1000) < 0 && errno != EINTR) {
                        r = -errno;
                        break;
                }
        }
        free(buf);
        return r;
}

int gmd__hello(gmd_client *client, int sock, uint64_t deadline_ms,
               int wake_fd, Gmd__HelloReply **ret_reply)
{
        Gmd__Hello msg = GMD__HELLO__INIT;
        gmd_wire_packet packet = { .n_fds = 0 };
        ProtobufCMessage *reply = NULL;
        uint8_t *buf;
        uint32_t id;
        int r, sent;

        msg.priority = client->priority;
        msg.keeps_mappings = client->keeps_mappings;
        msg.min_version = GMD_WIRE_MIN_VERSION;
        msg.max_version = GMD_WIRE_VERSION;
        msg.client_name = client->name;
        pthread_mutex_lock(&client->lock);
        id = next_request_id_locked(client);
        pthread_mutex_unlock(&client->lock);
        sent = send_on(sock, GMD__MSG_TYPE__MSG_HELLO, id, &msg.base);

        buf = malloc(GMD_WIRE_MAX_PACKET);
        if (!buf) {
                gmd__error_set("out of memory");
                return -ENOMEM;
        }
        /* A daemon that refuses the connection says why and closes it,
         * maybe before our hello arrived: its reason may be waiting even
         * when the send failed. */
        r = hello_receive(sock, deadline_ms, wake_fd, buf, &packet);
        if (r < 0 && r != -ECANCELED && sent < 0) {
                gmd__error_set("cannot send the hello to gpu-memd: %s", strerror(-sent));
                r = GMD_ECONN;
        }
        if (r < 0)
                goto out;
        gmd_wire_packet_close_fds(&packet);     /* a hello carries none */

        r = GMD_EPROTO;
        /* Request id 0: the daemon refused the connection before reading
         * the hello (admission.h in the daemon). */
        if (packet.header.request_id == 0 &&
            packet.header.type == GMD__MSG_TYPE__MSG_ERROR_REPLY) {
                ;
        } else if (packet.header.request_id != id) {
                gmd__error_set("gpu-memd answered the hello with %s for request %u",
                          gmd_wire_type_name(packet.header.type),
                          packet.header.request_id);
                goto out;
        }
        if (packet.header.type == GMD__MSG_TYPE__MSG_ERROR_REPLY) {
                reply = protobuf_c_message_unpack(&gmd__error_reply__descriptor,
                                                  NULL, packet.header.length,
                                                  packet.payload);
                if (reply) {
                        Gmd__ErrorReply *e = (Gmd__ErrorReply *)reply;

                        r = gmd__error_from_wire(e->code);
                        gmd__error_set("gpu-memd refused the connection: %s",
                                  e->message ? e->message : gmd_strerror(r));
                        goto out;
                }
        } else if (packet.header.type == GMD__MSG_TYPE__MSG_HELLO_REPLY) {
                reply = protobuf_c_message_unpack(&gmd__hello_reply__descriptor,
                                                  NULL, packet.header.length,
                                                  packet.payload);
                if (reply) {
                        *ret_reply = (Gmd__HelloReply *)reply;
                        reply = NULL;
                        r = 0;
                        goto out;
                }
        }
        gmd__error_set("gpu-memd sent a malformed %s to the hello",
                  gmd_wire_type_name(packet.header.type));
out:
        if (reply)
                protobuf_c_message_free_unpacked(reply, NULL);
        free(buf);
        return r;
}

/* The hello at connect; *ret_asks_reach: its reply asks for MSG_REACH. */
static int hello(gmd_client *client, const char *client_name,
                 bool *ret_asks_reach)
{
        Gmd__HelloReply *reply = NULL;
        int r;

        r = hello_prepare(client, client_name);
        if (r < 0)
                return r;
        r = gmd__hello(client, client->sock, now_ms() + HELLO_TIMEOUT_MS, -1,
                       &reply);
        if (r < 0)
                return r;
        r = hello_accept(client, reply);
        *ret_asks_reach = reply->asks_reach;
        gmd__hello_reply__free_unpacked(reply, NULL);
        return r;
}

/* What this process can map, from the mapper the hello chose. */
static int reach_take(gmd_client *client)
{
        client->reach = calloc(client->n_devices ? client->n_devices : 1,
                               sizeof(*client->reach));
        client->peer_access = calloc(client->n_devices ? client->n_devices : 1,
                                     sizeof(*client->peer_access));
        if (!client->reach || !client->peer_access) {
                gmd__error_set("out of memory");
                return -ENOMEM;
        }
        gmd__client_reach(client, client->reach);
        return 0;
}

int gmd__send_reach(gmd_client *client, int sock, bool asked)
{
        Gmd__ReachReport msg = GMD__REACH_REPORT__INIT;
        Gmd__DeviceReach *entries, **ptrs;
        uint32_t *maps, id;
        unsigned n = 0, m = 0;
        int r;

        if (!asked)
                return 0;
        entries = calloc(client->n_devices ? client->n_devices : 1,
                         sizeof(*entries));
        ptrs = calloc(client->n_devices ? client->n_devices : 1,
                      sizeof(*ptrs));
        maps = calloc(client->n_devices ? (size_t)client->n_devices *
                      client->n_devices : 1, sizeof(*maps));
        if (!entries || !ptrs || !maps) {
                free(entries);
                free(ptrs);
                free(maps);
                gmd__error_set("out of memory");
                return -ENOMEM;
        }
        /* Each device this process sees, with the others it maps there. */
        for (unsigned d = 0; d < client->n_devices && d < 64; d++) {
                Gmd__DeviceReach *e = &entries[n];

                if (!client->reach[d])
                        continue;
                gmd__device_reach__init(e);
                e->device = d;
                e->maps = &maps[m];
                for (unsigned o = 0; o < client->n_devices && o < 64; o++)
                        if (o != d && (client->reach[d] >> o) & 1)
                                maps[m + e->n_maps++] = o;
                m += (unsigned)e->n_maps;
                ptrs[n++] = e;
        }
        msg.n_devices = n;
        msg.devices = ptrs;
        pthread_mutex_lock(&client->lock);
        id = next_request_id_locked(client);
        pthread_mutex_unlock(&client->lock);
        r = send_on(sock, GMD__MSG_TYPE__MSG_REACH, id, &msg.base);
        if (r < 0)
                gmd__error_set("cannot tell gpu-memd which GPUs' memory this "
                               "process maps: %s", strerror(-r));
        free(entries);
        free(ptrs);
        free(maps);
        return r < 0 ? GMD_ECONN : 0;
}

static int mapper_choose(gmd_client *client)
{
        int r;

        if (strcmp(client->backend, "sim") == 0) {
                r = gmd__mapper_sim_new(&client->mapper);
                if (r < 0)
                        gmd__error_set("cannot create the sim mapper: %s",
                                  strerror(-r));
                return r;
        }
        if (strcmp(client->backend, "cuda") == 0) {
#ifdef GMD_HAVE_CUDA
                r = gmd__mapper_cuda_new(client->ids, client->n_devices,
                                         &client->mapper);
                if (r < 0)
                        gmd__error_set("gpu-memd runs the cuda backend, but CUDA "
                                  "cannot be used in this process: %s",
                                  gmd_strerror(r));
                return r;
#else
                gmd__error_set("gpu-memd runs the cuda backend, but this libgpumem "
                          "was built without CUDA");
                return GMD_ENOTSUP;
#endif
        }
        gmd__error_set("gpu-memd runs backend '%.32s', which this libgpumem does "
                  "not know", client->backend);
        return GMD_ENOTSUP;
}

/* $GPU_MEMD_RECONNECT_S: seconds, fractions allowed ("0.5"); unset or
 * empty is GMD_RECONNECT_DEFAULT_S. */
static int reconnect_from_env(uint64_t *ret_ms)
{
        const char *text = secure_getenv(GMD_RECONNECT_ENV);
        char *end;
        double v;

        *ret_ms = (uint64_t)GMD_RECONNECT_DEFAULT_S * 1000;
        if (!text || !*text)
                return 0;
        errno = 0;
        v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v) || v < 0 ||
            v > RECONNECT_MAX_S) {
                gmd__error_set("%s='%.32s' is not a number of seconds (0 to "
                               "%d; 0: fail at once when gpu-memd goes away)",
                               GMD_RECONNECT_ENV, text, RECONNECT_MAX_S);
                return -EINVAL;
        }
        *ret_ms = (uint64_t)(v * 1000.0 + 0.5);
        return 0;
}

/* Where kept fds go (client.h): at or above KEEP_FD_BASE once the soft fd
 * limit is raised toward NOFILE_WANT; in the upper half of a limit too low
 * for that. Raising the soft limit is what any process may do for itself;
 * it is inherited by children. */
static int keep_fd_base_choose(void)
{
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return -1;
        if (rl.rlim_cur < NOFILE_WANT && rl.rlim_cur < rl.rlim_max) {
                struct rlimit want = rl;

                want.rlim_cur = rl.rlim_max < NOFILE_WANT ? rl.rlim_max :
                                NOFILE_WANT;
                if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                        rl = want;
        }
        if (rl.rlim_cur >= 2 * KEEP_FD_BASE)
                return KEEP_FD_BASE;
        return rl.rlim_cur >= 64 ? (int)(rl.rlim_cur / 2) : -1;
}

/* Start the I/O thread with every signal blocked: signals for the process
 * must reach the application's threads, never the library's. */
static int io_start(gmd_client *client)
{
        sigset_t all, old;
        int r;

        client->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (client->wake_fd < 0) {
                r = -errno;
                gmd__error_set("eventfd: %s", strerror(-r));
                return r;
        }
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&client->io_thread, NULL, gmd__client_io_main, client);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                gmd__error_set("cannot start the I/O thread: %s", strerror(-r));
                return r;
        }
        client->io_started = true;
        return 0;
}

/* gmd__connect_fd, knowing the socket's path (NULL: a socketpair, which
 * cannot be connected again: no restart recovery). */
static int connect_fd_path(int fd, const char *path, const char *client_name,
                           gmd_client **ret_client)
{
        pthread_condattr_t cattr;
        gmd_client *client;
        bool asks_reach = false;
        int r;

        client = calloc(1, sizeof(*client));
        if (!client) {
                close(fd);
                gmd__error_set("out of memory");
                return -ENOMEM;
        }
        client->sock = fd;
        client->wake_fd = -1;
        client->keep_fd_base = -1;
        client->state = GMD_CONN_UP;
        client->gen = 1;        /* 0 marks a request never sent */
        client->next_request_id = 1;
        list_init(&client->pending);
        list_init(&client->buffers);
        pthread_condattr_init(&cattr);
        pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
        pthread_cond_init(&client->nowait_cond, &cattr);
        pthread_condattr_destroy(&cattr);
        pthread_mutex_init(&client->send_lock, NULL);
        pthread_mutex_init(&client->lock, NULL);
        pthread_mutex_init(&client->buffers_lock, NULL);

        r = gmd__mapcache_init(&client->cache);
        if (r < 0)
                goto fail;
        r = reconnect_from_env(&client->reconnect_ms);
        if (r < 0)
                goto fail;
        if (!path)
                client->reconnect_ms = 0;
        if (client->reconnect_ms > 0) {
                client->socket_path = strdup(path);
                if (!client->socket_path) {
                        gmd__error_set("out of memory");
                        r = -ENOMEM;
                        goto fail;
                }
                client->keep_fd_base = keep_fd_base_choose();
        }
        r = hello(client, client_name, &asks_reach);
        if (r < 0)
                goto fail;
        r = mapper_choose(client);
        if (r < 0)
                goto fail;
        r = reach_take(client);
        if (r == 0)
                r = gmd__send_reach(client, client->sock, asks_reach);
        if (r < 0)
                goto fail;
        r = io_start(client);
        if (r < 0)
                goto fail;
        *ret_client = client;
        return 0;

fail:
        gmd_disconnect(client);
        return r;
}

int gmd__connect_fd(int fd, const char *client_name, gmd_client **ret_client)
{
        return connect_fd_path(fd, NULL, client_name, ret_client);
}

/** Connect to gpu-memd and start the library's I/O thread. */
int gmd_connect(const char *socket_path, const char *client_name,
                gmd_client **ret_client)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        const char *path = socket_path;
        int fd, r;

        if (!ret_client) {
                gmd__error_set("gmd_connect: ret_client is NULL");
                return -EINVAL;
        }
        if (!path || !*path)
                path = secure_getenv(GMD_SOCKET_ENV);
        if (!path || !*path)
                path = GMD_DEFAULT_SOCKET;
        if (strlen(path) >= sizeof(addr.sun_path)) {
                gmd__error_set("cannot connect to %s: socket path longer than %zu "
                          "bytes", path, sizeof(addr.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        memcpy(addr.sun_path, path, strlen(path) + 1);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = -errno;
                gmd__error_set("cannot create a socket: %s", strerror(-r));
                return r;
        }
        if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
                int e = errno;

                close(fd);
                gmd__error_set("cannot connect to %s: %s%s", path, strerror(e),
                          e == EACCES || e == EPERM ?
                          " — may this user use gpu-memd's socket (its group)?" :
                          e == ENOENT || e == ECONNREFUSED ?
                          " — is gpu-memd running?" : "");
                /* Not -ENOENT, which is GMD_ENOENT ("no such buffer"), nor
                 * other errnos that name something else in gpumem.h: no
                 * daemon there is GMD_ECONN; not allowed is GMD_EPERM. */
                return e == EACCES || e == EPERM ? GMD_EPERM : GMD_ECONN;
        }
        return connect_fd_path(fd, path, client_name, ret_client);
}

/** Close the connection and free every buffer handle; accepts NULL. */
gmd_client *gmd_disconnect(gmd_client *client)
{
        gmd_list *pos, *tmp;

        if (!client)
                return NULL;
        if (client->io_started) {
                uint64_t one = 1;
                ssize_t n;

                /* Cannot fail on a fresh eventfd; should it, the shutdown in
                 * gmd__client_fail wakes the thread as well. */
                n = write(client->wake_fd, &one, sizeof(one));
                (void)n;
                gmd__client_fail(client, GMD_ECONN, "the client disconnected");
                pthread_join(client->io_thread, NULL);
        }
        close(client->sock);
        if (client->wake_fd >= 0)
                close(client->wake_fd);

        list_for_each_safe(pos, tmp, &client->buffers) {
                gmd_buffer *buffer = container_of(pos, gmd_buffer, node);

                list_remove(pos);
                gmd__buffer_destroy(client, buffer);
        }
        if (client->mapper)
                client->mapper->ops->destroy(client->mapper);
        free(client->granularity);
        free(client->ids);
        free(client->reach);
        free(client->peer_access);
        free(client->backend);
        free(client->daemon_version);
        free(client->socket_path);
        pthread_mutex_destroy(&client->send_lock);
        pthread_mutex_destroy(&client->lock);
        pthread_mutex_destroy(&client->buffers_lock);
        pthread_cond_destroy(&client->nowait_cond);
        free(client);
        return NULL;
}

/** The daemon's backend, "sim" or "cuda". */
const char *gmd_client_backend(const gmd_client *client)
{
        return client ? client->backend : NULL;
}

/** The protocol version agreed in the hello. */
unsigned gmd_client_protocol_version(const gmd_client *client)
{
        return client ? client->version : 0;
}

/** How many devices the daemon serves. */
unsigned gmd_client_device_count(const gmd_client *client)
{
        return client ? client->n_devices : 0;
}
