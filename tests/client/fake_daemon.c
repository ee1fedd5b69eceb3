/*
 * fake_daemon — see fake_daemon.h. Speaks protocol v1 with the same wire
 * code as the real daemon (proto/wire.c), so framing is real; the policy
 * is a few lines per message type.
 */
#include "fake_daemon.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.pb-c.h"
#include "wire.h"

static int send_msg(fake_daemon *f, uint16_t type, uint32_t id,
                    const ProtobufCMessage *msg, const int *fds, unsigned n)
{
        uint8_t buf[GMD_WIRE_MAX_PAYLOAD];
        size_t len = protobuf_c_message_pack(msg, buf);
        int r = -EAGAIN;

        if (f->fd < 0)
                return -ENOTCONN;

        /* A client sending without waiting can have more answers owed
         * than the socket holds: wait for room (a second at most) rather
         * than drop one. */
        for (int i = 0; i < 100; i++) {
                struct pollfd pfd = { .fd = f->fd, .events = POLLOUT };

                r = gmd_wire_send(f->fd, type, id, buf, (uint32_t)len, fds, n);
                if (r != -EAGAIN)
                        break;
                poll(&pfd, 1, 10);
        }
        return r;
}

static void send_ok(fake_daemon *f, uint32_t id)
{
        Gmd__OkReply ok = GMD__OK_REPLY__INIT;

        send_msg(f, GMD__MSG_TYPE__MSG_OK_REPLY, id, &ok.base, NULL, 0);
}

static void send_error(fake_daemon *f, uint32_t id, int code,
                       const char *message)
{
        Gmd__ErrorReply e = GMD__ERROR_REPLY__INIT;

        e.code = code;
        e.message = (char *)message;
        send_msg(f, GMD__MSG_TYPE__MSG_ERROR_REPLY, id, &e.base, NULL, 0);
}

/* Under lock. */
static fake_buffer *find(fake_daemon *f, uint64_t id)
{
        for (unsigned i = 0; i < FAKE_MAX_BUFFERS; i++)
                if (f->buffers[i].fd >= 0 && f->buffers[i].id == id)
                        return &f->buffers[i];
        return NULL;
}

static int new_memfd(uint64_t size)
{
        int fd = memfd_create("fake-gpu-memd", MFD_CLOEXEC);

        if (fd >= 0 && ftruncate(fd, (off_t)size) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Under lock. The legacy IPC modes: a made-up handle of 64 bytes (63 for
 * FAKE_IPC_BAD_LENGTH), with a segment too for FAKE_IPC_AND_SEGMENTS. */
static void answer_alloc_ipc(fake_daemon *f, uint32_t id, fake_buffer *b,
                             int fd)
{
        Gmd__AllocReply reply = GMD__ALLOC_REPLY__INIT;
        Gmd__Segment seg = GMD__SEGMENT__INIT;
        Gmd__Segment *segs[1] = { &seg };
        uint8_t handle[64];

        for (unsigned i = 0; i < sizeof(handle); i++)
                handle[i] = (uint8_t)(i + 1);
        b->ipc = true;
        reply.buffer_id = b->id;
        reply.size = b->size;
        reply.tier = GMD__TIER__TIER_VRAM;
        reply.ipc_handle.data = handle;
        reply.ipc_handle.len = f->mode == FAKE_IPC_BAD_LENGTH ? 63 : 64;
        if (f->mode == FAKE_IPC_AND_SEGMENTS) {
                seg.size = b->size;
                reply.n_segments = 1;
                reply.segments = segs;
                send_msg(f, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base,
                         &fd, 1);
                return;
        }
        send_msg(f, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base, NULL, 0);
}

/* Under lock. */
static void answer_alloc(fake_daemon *f, uint32_t id, uint64_t size)
{
        Gmd__AllocReply reply = GMD__ALLOC_REPLY__INIT;
        Gmd__Segment seg = GMD__SEGMENT__INIT;
        Gmd__Segment *segs[1] = { &seg };
        fake_buffer *b = NULL;
        int fd;

        size = (size + 4095) & ~(uint64_t)4095;
        for (unsigned i = 0; i < FAKE_MAX_BUFFERS && !b; i++)
                if (f->buffers[i].fd < 0)
                        b = &f->buffers[i];
        fd = new_memfd(f->mode == FAKE_SHORT_MEMFD ? 4096 : size);
        if (!b || fd < 0) {
                if (fd >= 0)
                        close(fd);
                send_error(f, id, GMD__ERROR_CODE__ERR_INTERNAL, "fake: full");
                return;
        }
        b->id = f->next_buffer_id++;
        b->fd = fd;
        b->size = size;
        b->revoked = false;
        b->parked = false;
        b->ipc = false;
        if (f->mode == FAKE_IPC || f->mode == FAKE_IPC_BAD_LENGTH ||
            f->mode == FAKE_IPC_AND_SEGMENTS) {
                answer_alloc_ipc(f, id, b, fd);
                return;
        }

        seg.fd_index = 0;
        seg.offset = 0;
        seg.size = size;
        reply.buffer_id = b->id;
        reply.size = size;
        reply.tier = GMD__TIER__TIER_VRAM;
        reply.n_segments = 1;
        reply.segments = segs;
        send_msg(f, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base, &fd, 1);
}

/* Under lock. */
static void handle_alloc(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__AllocRequest *req;
        uint32_t id = p->header.request_id;

        req = gmd__alloc_request__unpack(NULL, p->header.length, p->payload);
        if (!req)
                return;
        switch (f->mode) {
        case FAKE_ERROR:
                send_error(f, id, f->error_code, "fake says no");
                break;
        case FAKE_HANGUP_ON_ALLOC:
                shutdown(f->fd, SHUT_RDWR);
                break;
        case FAKE_BATCH:
                f->held_ids[f->n_held] = id;
                f->held_sizes[f->n_held] = req->size;
                if (++f->n_held == f->batch_size)
                        while (f->n_held > 0) {
                                f->n_held--;
                                answer_alloc(f, f->held_ids[f->n_held],
                                             f->held_sizes[f->n_held]);
                        }
                break;
        default:
                answer_alloc(f, id, req->size);
                break;
        }
        gmd__alloc_request__free_unpacked(req, NULL);
}

/* Under lock. */
static void handle_free(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__BufferRequest *req;
        fake_buffer *b;

        req = gmd__buffer_request__unpack(NULL, p->header.length, p->payload);
        if (!req)
                return;
        b = find(f, req->buffer_id);
        if (b && b->parked)
                f->n_bad_cache++;       /* parked ones come back by RETURN */
        f->n_frees++;
        f->last_freed = req->buffer_id;
        if (!b || b->revoked) {
                send_error(f, p->header.request_id,
                           GMD__ERROR_CODE__ERR_NOT_FOUND, "no such buffer");
        } else if (f->drop_after_free) {
                /* Freed, and the daemon died before it answered. */
                f->drop_after_free = false;
                close(b->fd);
                b->fd = -1;
                shutdown(f->fd, SHUT_RDWR);
        } else {
                close(b->fd);
                b->fd = -1;
                send_ok(f, p->header.request_id);
        }
        gmd__buffer_request__free_unpacked(req, NULL);
}

static void handle_status(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__StatusReply reply = GMD__STATUS_REPLY__INIT;
        Gmd__PoolInfo pool = GMD__POOL_INFO__INIT;
        Gmd__PoolInfo *pools[1] = { &pool };
        Gmd__ClientInfo client = GMD__CLIENT_INFO__INIT;
        Gmd__ClientInfo *clients[1] = { &client };
        Gmd__BufferInfo buffer = GMD__BUFFER_INFO__INIT;
        Gmd__BufferInfo *buffers[1] = { &buffer };
        uint32_t id = p->header.request_id;

        if (f->mode == FAKE_WRONG_ID)
                id += 1000;
        if (f->mode == FAKE_GARBAGE) {
                static const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0x0f };

                gmd_wire_send(f->fd, GMD__MSG_TYPE__MSG_STATUS_REPLY, id, junk,
                              sizeof(junk), NULL, 0);
                return;
        }
        reply.daemon_version = "9.9.9-fake";
        reply.backend = "sim";
        reply.uptime_ms = 123456;
        pool.device = 0;
        pool.tier = GMD__TIER__TIER_HOST;
        pool.capacity = 1 << 30;
        pool.used = 1 << 20;
        pool.free = (1 << 30) - (1 << 20);
        pool.queued_out = 3;
        pool.queued_in = 4;
        pool.bytes_out = UINT64_C(5) << 32;
        pool.bytes_in = 6;
        pool.copy_us_out = 7;
        pool.copy_us_in = UINT64_C(8) << 32;
        pool.link_bytes_per_s_out = UINT64_C(55000000000);
        pool.link_bytes_per_s_in = 3;
        reply.n_pools = 1;
        reply.pools = pools;
        client.client_id = 7;
        client.pid = 4242;
        client.uid = 1000;
        /* 80 characters: longer than gmd_client_status.name holds. */
        client.name = "a-very-long-client-name-that-goes-on-and-on-and-on-"
                      "beyond-sixty-four-bytes-xyz";
        client.bytes = 1 << 20;
        client.parked_bytes = 1 << 19;
        client.vram_bytes = 1 << 19;
        client.host_bytes = UINT64_C(9) << 32;
        client.buffers = 1;
        client.waiting = 2;
        reply.n_clients = 1;
        reply.clients = clients;
        buffer.buffer_id = 99;
        buffer.client_id = 7;
        buffer.pid = 4242;
        buffer.size = 1 << 20;
        buffer.tier = GMD__TIER__TIER_HOST;
        buffer.state = GMD__BUFFER_STATE__STATE_MOVING_IN;
        buffer.flags = GMD_ALLOC_SPILLABLE;
        buffer.acquired = true;
        buffer.parked = true;
        reply.n_buffers = 1;
        reply.buffers = buffers;
        reply.total_capacity = 1 << 30;
        reply.total_used = 1 << 20;
        reply.total_clients = 1;
        reply.total_buffers = 1;
        send_msg(f, GMD__MSG_TYPE__MSG_STATUS_REPLY, id, &reply.base, NULL, 0);
}

static void handle_hello(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__HelloReply reply = GMD__HELLO_REPLY__INIT;
        Gmd__DeviceInfo dev = GMD__DEVICE_INFO__INIT;
        Gmd__DeviceInfo *devs[1] = { &dev };

        dev.index = 0;
        dev.name = "sim0";
        dev.vram_total = 1 << 30;
        dev.granularity = 4096;
        uint8_t token[16];

        if (f->fresh) {
                /* A daemon that kept nothing: buffers and their numbers
                 * start again. */
                f->fresh = false;
                for (unsigned i = 0; i < FAKE_MAX_BUFFERS; i++)
                        if (f->buffers[i].fd >= 0) {
                                close(f->buffers[i].fd);
                                f->buffers[i].fd = -1;
                        }
                f->next_buffer_id = 100;
        }
        f->previous_id = f->session_id;
        f->session_id = f->next_client_id++;
        for (unsigned i = 0; i < sizeof(token); i++)
                token[i] = (uint8_t)(f->session_id * 31 + i);
        if (f->recovery) {
                reply.resume_token.data = token;
                reply.resume_token.len = sizeof(token);
        }
        reply.version = f->hello_version;
        reply.daemon_version = "9.9.9-fake";
        reply.backend = (char *)f->backend;
        reply.client_id = f->session_id;
        reply.n_devices = 1;
        reply.devices = devs;
        send_msg(f, GMD__MSG_TYPE__MSG_HELLO_REPLY, p->header.request_id,
                 &reply.base, NULL, 0);
}

static void handle_ack(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__RemapAck *ack;

        ack = gmd__remap_ack__unpack(NULL, p->header.length, p->payload);
        if (!ack)
                return;
        f->n_acks++;
        f->ack_buffer_id = ack->buffer_id;
        f->ack_sequence = ack->sequence;
        f->ack_result = ack->result;
        pthread_cond_broadcast(&f->cond);
        gmd__remap_ack__free_unpacked(ack, NULL);
}

/* Under lock. PARK, UNPARK and RETURN: keep the parked state the way the
 * real daemon does, and count every message that does not fit it (the
 * library promises they never happen). */
static void handle_cache(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__BufferList *list;

        list = gmd__buffer_list__unpack(NULL, p->header.length, p->payload);
        if (!list) {
                f->n_bad_cache++;
                return;
        }
        if (p->header.type == GMD__MSG_TYPE__MSG_RETURN)
                f->last_return_ids = (unsigned)list->n_buffer_ids;
        for (size_t i = 0; i < list->n_buffer_ids; i++) {
                fake_buffer *b = find(f, list->buffer_ids[i]);

                switch (p->header.type) {
                case GMD__MSG_TYPE__MSG_PARK:
                        if (!b || b->parked || b->ipc)
                                f->n_bad_cache++;
                        else
                                b->parked = true;
                        break;
                case GMD__MSG_TYPE__MSG_UNPARK:
                        if (!b || !b->parked)
                                f->n_bad_cache++;
                        else
                                b->parked = false;
                        break;
                default:        /* RETURN */
                        if (!b || !b->parked) {
                                f->n_bad_cache++;
                                break;
                        }
                        if (f->n_returned < FAKE_MAX_RETURNED)
                                f->returned[f->n_returned++] = b->id;
                        close(b->fd);
                        b->fd = -1;
                        break;
                }
        }
        gmd__buffer_list__free_unpacked(list, NULL);
}

/* Under lock. A StatusReply where an OkReply is owed: no request it
 * answers expects it. */
static void send_wrong_type(fake_daemon *f, uint32_t id)
{
        Gmd__StatusReply reply = GMD__STATUS_REPLY__INIT;

        send_msg(f, GMD__MSG_TYPE__MSG_STATUS_REPLY, id, &reply.base, NULL, 0);
}

/* Under lock. */
static void handle_release(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__BufferRequest *req;
        Gmd__RevokeNotify n = GMD__REVOKE_NOTIFY__INIT;
        fake_buffer *b;

        switch (f->mode) {
        case FAKE_REFUSE_RELEASE:
                send_error(f, p->header.request_id, f->error_code,
                           "fake refuses the release");
                return;
        case FAKE_WRONG_TYPE:
                send_wrong_type(f, p->header.request_id);
                return;
        case FAKE_REVOKE_ON_RELEASE:
                req = gmd__buffer_request__unpack(NULL, p->header.length,
                                                  p->payload);
                if (!req)
                        return;
                b = find(f, req->buffer_id);
                if (b)
                        b->revoked = true;
                n.buffer_id = req->buffer_id;
                n.reason = GMD__ERROR_CODE__ERR_SHUTTING_DOWN;
                n.message = "revoked by the fake";
                send_msg(f, GMD__MSG_TYPE__MSG_REVOKE, 0, &n.base, NULL, 0);
                send_error(f, p->header.request_id,
                           GMD__ERROR_CODE__ERR_NOT_FOUND, "no such buffer");
                gmd__buffer_request__free_unpacked(req, NULL);
                return;
        default:
                send_ok(f, p->header.request_id);
        }
}

/* Under lock: pageout and prefetch, answered OK (the fake moves nothing). */
static void handle_move(fake_daemon *f, const gmd_wire_packet *p)
{
        if (f->mode == FAKE_WRONG_TYPE)
                send_wrong_type(f, p->header.request_id);
        else
                send_ok(f, p->header.request_id);
}

/* Under lock. MSG_RESUME: check the session and every claim, answer a
 * verdict per claim. */
static void handle_resume(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__ResumeReply reply = GMD__RESUME_REPLY__INIT;
        Gmd__BufferVerdict verdicts[FAKE_MAX_CLAIMS];
        Gmd__BufferVerdict *vp[FAKE_MAX_CLAIMS];
        Gmd__ResumeRequest *req;
        bool token_ok;

        req = gmd__resume_request__unpack(NULL, p->header.length, p->payload);
        if (!req)
                return;
        f->n_resumes++;
        if (req->last)
                f->n_resume_last++;
        if (f->resume_unsupported) {
                send_error(f, p->header.request_id,
                           GMD__ERROR_CODE__ERR_UNSUPPORTED,
                           "this fake has no restart recovery");
                gmd__resume_request__free_unpacked(req, NULL);
                return;
        }
        token_ok = req->token.len == 16;
        for (unsigned i = 0; token_ok && i < 16; i++)
                token_ok = req->token.data[i] ==
                           (uint8_t)(req->client_id * 31 + i);
        if (!token_ok || req->client_id != f->previous_id)
                f->n_resume_bad++;
        for (size_t i = 0; i < req->n_buffers && i < FAKE_MAX_CLAIMS; i++) {
                const Gmd__BufferClaim *c = req->buffers[i];
                fake_buffer *b = find(f, c->buffer_id);
                fake_claim *rec = f->n_claims < FAKE_MAX_CLAIMS ?
                                  &f->claims[f->n_claims++] : NULL;

                if (rec) {
                        *rec = (fake_claim){ .id = c->buffer_id,
                                             .acquired = c->acquired,
                                             .n_segments = (unsigned)c->n_segments,
                                             .tier = c->tier };
                        for (size_t k = 0; b && k < c->n_segments; k++) {
                                unsigned idx = c->segments[k]->fd_index;
                                struct stat a, m;

                                if (idx < p->n_fds && fstat(p->fds[idx], &a) == 0 &&
                                    fstat(b->fd, &m) == 0 && a.st_ino == m.st_ino &&
                                    a.st_dev == m.st_dev)
                                        rec->same_memory++;
                        }
                }
                verdicts[i] = (Gmd__BufferVerdict)GMD__BUFFER_VERDICT__INIT;
                verdicts[i].buffer_id = c->buffer_id;
                if (!b) {
                        verdicts[i].code = GMD__ERROR_CODE__ERR_NOT_FOUND;
                        verdicts[i].message = "no such buffer";
                } else if (b->id == f->lose_id) {
                        verdicts[i].code = GMD__ERROR_CODE__ERR_INTERNAL;
                        verdicts[i].message = "the fake lost its bytes";
                } else {
                        verdicts[i].message = "";
                }
                vp[i] = &verdicts[i];
        }
        reply.verdicts = vp;
        reply.n_verdicts = req->n_buffers < FAKE_MAX_CLAIMS ? req->n_buffers :
                           FAKE_MAX_CLAIMS;
        send_msg(f, GMD__MSG_TYPE__MSG_RESUME_REPLY, p->header.request_id,
                 &reply.base, NULL, 0);
        gmd__resume_request__free_unpacked(req, NULL);
}

static void handle_plan(fake_daemon *f, const gmd_wire_packet *p)
{
        Gmd__PlanReport *m = gmd__plan_report__unpack(NULL, p->header.length,
                                                      p->payload);

        if (!m)
                return;
        snprintf(f->plan_planner, sizeof(f->plan_planner), "%s",
                 m->planner ? m->planner : "");
        f->plan_kept = m->kept_bytes;
        f->plan_session = f->session_id;
        gmd__plan_report__free_unpacked(m, NULL);
}

static void handle(fake_daemon *f, gmd_wire_packet *p)
{
        pthread_mutex_lock(&f->lock);
        f->n_requests++;
        if (p->header.type < FAKE_MAX_TYPES)
                f->n_by_type[p->header.type]++;
        if (f->drop_on_type && p->header.type == f->drop_on_type) {
                /* Read, and the daemon died before it did anything. */
                f->drop_on_type = 0;
                shutdown(f->fd, SHUT_RDWR);
                pthread_cond_broadcast(&f->cond);
                pthread_mutex_unlock(&f->lock);
                return;
        }
        switch (p->header.type) {
        case GMD__MSG_TYPE__MSG_RESUME:    handle_resume(f, p); break;
        case GMD__MSG_TYPE__MSG_HELLO:     handle_hello(f, p); break;
        case GMD__MSG_TYPE__MSG_ALLOC:     handle_alloc(f, p); break;
        case GMD__MSG_TYPE__MSG_FREE:      handle_free(f, p); break;
        case GMD__MSG_TYPE__MSG_STATUS:    handle_status(f, p); break;
        case GMD__MSG_TYPE__MSG_REMAP_ACK: handle_ack(f, p); break;
        case GMD__MSG_TYPE__MSG_ACQUIRE:   send_ok(f, p->header.request_id); break;
        case GMD__MSG_TYPE__MSG_RELEASE:   handle_release(f, p); break;
        case GMD__MSG_TYPE__MSG_PAGEOUT:
        case GMD__MSG_TYPE__MSG_PREFETCH:  handle_move(f, p); break;
        case GMD__MSG_TYPE__MSG_PARK:
        case GMD__MSG_TYPE__MSG_UNPARK:
        case GMD__MSG_TYPE__MSG_RETURN:    handle_cache(f, p); break;
        case GMD__MSG_TYPE__MSG_PLAN:      handle_plan(f, p); break;
        default: break;
        }
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
}

static void *fake_main(void *arg)
{
        fake_daemon *f = arg;
        uint8_t *buf = malloc(GMD_WIRE_MAX_PACKET);

        while (buf) {
                struct pollfd pfd = { .fd = f->fd, .events = POLLIN };
                gmd_wire_packet packet;
                const char *reason;
                bool stop, paused, deaf;
                int r;

                pthread_mutex_lock(&f->lock);
                stop = f->stop;
                paused = f->accept_paused;
                deaf = f->deaf;
                f->deaf_seen = deaf;
                pfd.fd = f->fd;
                pthread_mutex_unlock(&f->lock);
                if (stop)
                        break;
                if (deaf && pfd.fd >= 0) {
                        poll(NULL, 0, 10);
                        continue;
                }
                if (pfd.fd < 0) {
                        /* Listening: take the next connection. */
                        struct pollfd l = { .fd = f->listen_fd, .events = POLLIN };
                        int fd;

                        if (paused || poll(&l, 1, 50) <= 0) {
                                if (paused)
                                        poll(NULL, 0, 10);
                                continue;
                        }
                        fd = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                        pthread_mutex_lock(&f->lock);
                        f->fd = fd;
                        pthread_mutex_unlock(&f->lock);
                        continue;
                }
                if (poll(&pfd, 1, 50) <= 0)
                        continue;
                r = gmd_wire_recv(pfd.fd, buf, &packet, &reason);
                if (r == -EAGAIN)
                        continue;
                if (r <= 0) {
                        /* Under the lock: fake_listen may be closing the
                         * socketpair this very moment, and then the fd
                         * read above is no longer ours to close, nor is
                         * its hangup the end of the fake. */
                        pthread_mutex_lock(&f->lock);
                        if (f->fd == pfd.fd && f->listen_fd < 0) {
                                pthread_mutex_unlock(&f->lock);
                                break;
                        }
                        if (f->fd == pfd.fd) {
                                close(f->fd);
                                f->fd = -1;
                        }
                        pthread_cond_broadcast(&f->cond);
                        pthread_mutex_unlock(&f->lock);
                        continue;
                }
                handle(f, &packet);
                gmd_wire_packet_close_fds(&packet);
        }
        free(buf);
        return NULL;
}

int fake_start(fake_daemon *f)
{
        int sv[2];

        memset(f, 0, sizeof(*f));
        for (unsigned i = 0; i < FAKE_MAX_BUFFERS; i++)
                f->buffers[i].fd = -1;
        f->hello_version = 1;
        f->backend = "sim";
        f->next_buffer_id = 100;
        f->next_client_id = 1;
        f->listen_fd = -1;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        f->fd = sv[0];
        f->client_fd = sv[1];
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->cond, NULL);
        return -pthread_create(&f->thread, NULL, fake_main, f);
}

void fake_stop(fake_daemon *f)
{
        pthread_mutex_lock(&f->lock);
        f->stop = true;
        pthread_mutex_unlock(&f->lock);
        pthread_join(f->thread, NULL);
        if (f->fd >= 0)
                close(f->fd);
        if (f->listen_fd >= 0) {
                close(f->listen_fd);
                unlink(f->path);
        }
        for (unsigned i = 0; i < FAKE_MAX_BUFFERS; i++)
                if (f->buffers[i].fd >= 0)
                        close(f->buffers[i].fd);
        pthread_mutex_destroy(&f->lock);
        pthread_cond_destroy(&f->cond);
}

int fake_listen(fake_daemon *f, const char *path)
{
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        int fd;

        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        unlink(path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
            listen(fd, 8) < 0) {
                int r = -errno;

                close(fd);
                return r;
        }
        pthread_mutex_lock(&f->lock);
        snprintf(f->path, sizeof(f->path), "%s", path);
        /* The socketpair goes: connections come by the path now. */
        close(f->fd);
        close(f->client_fd);
        f->client_fd = -1;
        f->fd = -1;
        f->listen_fd = fd;
        pthread_mutex_unlock(&f->lock);
        return 0;
}

void fake_drop(fake_daemon *f)
{
        pthread_mutex_lock(&f->lock);
        if (f->fd >= 0)
                shutdown(f->fd, SHUT_RDWR);
        pthread_mutex_unlock(&f->lock);
}

/* The notice, then the end: a shutdown, or a close (`close_fd`). */
static int send_shutdown(fake_daemon *f, const char *message, bool close_fd)
{
        Gmd__ShutdownNotify n = GMD__SHUTDOWN_NOTIFY__INIT;
        int r;

        n.message = (char *)message;
        pthread_mutex_lock(&f->lock);
        r = send_msg(f, GMD__MSG_TYPE__MSG_SHUTDOWN, 0, &n.base, NULL, 0);
        if (f->fd >= 0 && close_fd) {
                close(f->fd);
                f->fd = -1;
        } else if (f->fd >= 0) {
                shutdown(f->fd, SHUT_RDWR);
        }
        pthread_mutex_unlock(&f->lock);
        return r;
}

int fake_shutdown(fake_daemon *f, const char *message)
{
        return send_shutdown(f, message, false);
}

void fake_go_deaf(fake_daemon *f)
{
        bool seen = false;

        fake_set(f, deaf, true);
        while (!seen) {
                usleep(1000);
                pthread_mutex_lock(&f->lock);
                seen = f->deaf_seen;
                pthread_mutex_unlock(&f->lock);
        }
}

int fake_shutdown_close(fake_daemon *f, const char *message)
{
        return send_shutdown(f, message, true);
}

void fake_set_mode(fake_daemon *f, fake_mode mode, int arg)
{
        pthread_mutex_lock(&f->lock);
        f->mode = mode;
        f->error_code = arg;
        f->batch_size = (unsigned)arg;
        pthread_mutex_unlock(&f->lock);
}

int fake_fill(fake_daemon *f, uint64_t id, uint8_t byte)
{
        fake_buffer *b;
        void *p;
        int r = 0;

        pthread_mutex_lock(&f->lock);
        b = find(f, id);
        if (!b) {
                r = -ENOENT;
                goto out;
        }
        p = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
        if (p == MAP_FAILED) {
                r = -errno;
                goto out;
        }
        memset(p, byte, b->size);
        munmap(p, b->size);
out:
        pthread_mutex_unlock(&f->lock);
        return r;
}

int fake_remap_out(fake_daemon *f, uint64_t id, uint64_t sequence)
{
        Gmd__RemapNotify n = GMD__REMAP_NOTIFY__INIT;
        int r;

        /* The fake keeps the bytes in the buffer's memfd: that is its
         * "host memory", which the client is not given. */
        n.buffer_id = id;
        n.sequence = sequence;
        n.tier = GMD__TIER__TIER_HOST;
        pthread_mutex_lock(&f->lock);
        r = find(f, id) ? send_msg(f, GMD__MSG_TYPE__MSG_REMAP, 0, &n.base, NULL, 0) :
                          -ENOENT;
        pthread_mutex_unlock(&f->lock);
        return r;
}

int fake_remap(fake_daemon *f, uint64_t id, uint64_t sequence, gmd_tier tier)
{
        Gmd__RemapNotify n = GMD__REMAP_NOTIFY__INIT;
        Gmd__Segment seg = GMD__SEGMENT__INIT;
        Gmd__Segment *segs[1] = { &seg };
        fake_buffer *b;
        void *src = MAP_FAILED, *dst = MAP_FAILED;
        int fd = -1, r = 0;

        pthread_mutex_lock(&f->lock);
        b = find(f, id);
        if (!b) {
                r = -ENOENT;
                goto out;
        }
        fd = new_memfd(b->size);
        if (fd < 0) {
                r = -errno;
                goto out;
        }
        src = mmap(NULL, b->size, PROT_READ, MAP_SHARED, b->fd, 0);
        dst = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (src == MAP_FAILED || dst == MAP_FAILED) {
                r = -ENOMEM;
                goto out;
        }
        memcpy(dst, src, b->size);

        seg.fd_index = 0;
        seg.size = b->size;
        n.buffer_id = id;
        n.sequence = sequence;
        n.tier = (Gmd__Tier)tier;
        n.n_segments = 1;
        n.segments = segs;
        r = send_msg(f, GMD__MSG_TYPE__MSG_REMAP, 0, &n.base, &fd, 1);
        if (r == 0) {
                close(b->fd);
                b->fd = fd;             /* the new backing is the buffer now */
                fd = -1;
        }
out:
        if (src != MAP_FAILED)
                munmap(src, b->size);
        if (dst != MAP_FAILED)
                munmap(dst, b->size);
        if (fd >= 0)
                close(fd);
        pthread_mutex_unlock(&f->lock);
        return r;
}

int fake_remap_unknown(fake_daemon *f, uint64_t id, uint64_t sequence)
{
        Gmd__RemapNotify n = GMD__REMAP_NOTIFY__INIT;
        Gmd__Segment seg = GMD__SEGMENT__INIT;
        Gmd__Segment *segs[1] = { &seg };
        int fd = new_memfd(4096), r;

        if (fd < 0)
                return -errno;
        seg.size = 4096;
        n.buffer_id = id;
        n.sequence = sequence;
        n.tier = GMD__TIER__TIER_HOST;
        n.n_segments = 1;
        n.segments = segs;
        r = send_msg(f, GMD__MSG_TYPE__MSG_REMAP, 0, &n.base, &fd, 1);
        close(fd);
        return r;
}

int fake_revoke(fake_daemon *f, uint64_t id, const char *message)
{
        Gmd__RevokeNotify n = GMD__REVOKE_NOTIFY__INIT;
        fake_buffer *b;
        int r;

        pthread_mutex_lock(&f->lock);
        b = find(f, id);
        if (b)
                b->revoked = true;
        n.buffer_id = id;
        n.reason = GMD__ERROR_CODE__ERR_SHUTTING_DOWN;
        n.message = (char *)message;
        r = send_msg(f, GMD__MSG_TYPE__MSG_REVOKE, 0, &n.base, NULL, 0);
        pthread_mutex_unlock(&f->lock);
        return r;
}

bool fake_wait_acks(fake_daemon *f, unsigned n)
{
        struct timespec deadline;
        bool ok;

        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 5;
        pthread_mutex_lock(&f->lock);
        while (f->n_acks < n &&
               pthread_cond_timedwait(&f->cond, &f->lock, &deadline) == 0)
                ;
        ok = f->n_acks >= n;
        pthread_mutex_unlock(&f->lock);
        return ok;
}

bool fake_wait_type(fake_daemon *f, unsigned type, unsigned n)
{
        struct timespec deadline;
        bool ok;

        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 5;
        pthread_mutex_lock(&f->lock);
        while (f->n_by_type[type] < n &&
               pthread_cond_timedwait(&f->cond, &f->lock, &deadline) == 0)
                ;
        ok = f->n_by_type[type] >= n;
        pthread_mutex_unlock(&f->lock);
        return ok;
}

unsigned fake_count(fake_daemon *f, unsigned type)
{
        unsigned n;

        pthread_mutex_lock(&f->lock);
        n = f->n_by_type[type];
        pthread_mutex_unlock(&f->lock);
        return n;
}

int fake_reclaim(fake_daemon *f, unsigned device, uint64_t bytes)
{
        Gmd__ReclaimNotify n = GMD__RECLAIM_NOTIFY__INIT;
        int r;

        n.device = device;
        n.bytes = bytes;
        pthread_mutex_lock(&f->lock);
        r = send_msg(f, GMD__MSG_TYPE__MSG_RECLAIM, 0, &n.base, NULL, 0);
        pthread_mutex_unlock(&f->lock);
        return r;
}

int fake_parked(fake_daemon *f, uint64_t id)
{
        fake_buffer *b;
        int r;

        pthread_mutex_lock(&f->lock);
        b = find(f, id);
        r = b ? b->parked : -1;
        pthread_mutex_unlock(&f->lock);
        return r;
}

/* Mappings of the fake's memfds that overlap [addr, addr + size). */
unsigned fake_maps_at(const void *addr, size_t size)
{
        uintptr_t lo = (uintptr_t)addr, hi = lo + size;
        FILE *maps = fopen("/proc/self/maps", "re");
        char line[512];
        unsigned n = 0;

        if (!maps)
                return 0;
        while (fgets(line, sizeof(line), maps)) {
                uintptr_t start, end;

                if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &start, &end) != 2)
                        continue;
                if (start < hi && end > lo && strstr(line, "fake-gpu-memd"))
                        n++;
        }
        fclose(maps);
        return n;
}

int fake_count_own_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        if (!d)
                return -1;
        while ((e = readdir(d)))
                if (e->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}
