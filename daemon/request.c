/*
 * request — see request.h. Each handler gets a payload that passed the
 * header checks of wire.c; it decodes it (a failure to decode is a protocol
 * error that closes the session), checks every field against the daemon's
 * limits, and answers with exactly one reply carrying the request id. Bad
 * values in a well-formed message are the client's mistake, not an attack:
 * they get an error reply with a message, and the session stays open.
 */
#include "request.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "buffer.h"
#include "gpumem.pb-c.h"
#include "log.h"
#include "server.h"
#include "session.h"
#include "status.h"
#include "timeutil.h"
#include "waitq.h"

#define KNOWN_ALLOC_FLAGS (GMD_ALLOC_PIN_VRAM | GMD_ALLOC_SPILLABLE | \
                           GMD_ALLOC_LEGACY_IPC)

static void protocol_error(gmd_session *s, const char *what, uint16_t type)
{
        char why[128];

        s->server->stats.disconnects_protocol++;
        snprintf(why, sizeof(why), "protocol error: %s (%s)", what,
                 gmd_wire_type_name(type));
        session_close(s, why);
}

static void reply_ok(gmd_session *s, uint32_t request_id)
{
        Gmd__OkReply ok = GMD__OK_REPLY__INIT;

        session_send(s, GMD__MSG_TYPE__MSG_OK_REPLY, request_id, &ok.base, NULL, 0);
}

/* Keep printable ASCII of a client-chosen name; it ends up in logs. */
static void copy_name(char *dst, size_t len, const char *src)
{
        size_t n = 0;

        for (; src && *src && n + 1 < len; src++)
                dst[n++] = isprint((unsigned char)*src) ? *src : '?';
        dst[n] = '\0';
}

static void handle_hello(gmd_session *s, uint32_t id, const Gmd__Hello *m)
{
        gmd_server *server = s->server;
        Gmd__HelloReply reply = GMD__HELLO_REPLY__INIT;
        Gmd__DeviceInfo infos[64], *ptrs[64];
        unsigned version, n = server->n_devices < 64 ? server->n_devices : 64;
        char who[128];

        if (s->hello_done) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "hello was already sent on this connection");
                return;
        }
        version = m->max_version < GMD_WIRE_VERSION ? m->max_version : GMD_WIRE_VERSION;
        if (m->min_version > m->max_version || version < m->min_version ||
            version < GMD_WIRE_MIN_VERSION) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_VERSION,
                                   "client speaks protocol %u..%u, gpu-memd %u..%u: "
                                   "upgrade the older side",
                                   m->min_version, m->max_version,
                                   GMD_WIRE_MIN_VERSION, GMD_WIRE_VERSION);
                session_close(s, "no protocol version in common");
                return;
        }
        copy_name(s->name, sizeof(s->name), m->client_name);
        s->version = version;
        if (m->priority != 0) {
                int want = m->priority;

                if (want < GMD_PRIORITY_MIN)
                        want = GMD_PRIORITY_MIN;
                /* Asking for more than allowed is not an error: the client
                 * runs at its maximum, visible in gpu-memctl. */
                s->priority = want < s->limits.max_priority ? want :
                              s->limits.max_priority;
        }
        s->hello_done = true;

        for (unsigned i = 0; i < n; i++) {
                gmd__device_info__init(&infos[i]);
                infos[i].index = i;
                infos[i].name = server->devices[i].name;
                infos[i].vram_total = server->devices[i].total;
                infos[i].granularity = server->vram_pools[i].granularity;
                ptrs[i] = &infos[i];
        }
        reply.version = version;
        reply.daemon_version = GMD_VERSION_STRING;
        reply.backend = (char *)server->backend->ops->name;
        reply.client_id = s->id;
        reply.n_devices = n;
        reply.devices = ptrs;
        log_info("%s connected (protocol %u)",
                 session_describe(s, who, sizeof(who)), version);
        session_send(s, GMD__MSG_TYPE__MSG_HELLO_REPLY, id, &reply.base, NULL, 0);
}

/* Would `size` more bytes of VRAM pass the quota of the client's user? If
 * so, answer with an error naming the quota and where it was set. */
static bool quota_refuses(gmd_session *s, uint32_t id, uint64_t size)
{
        const gmd_limits *l = &s->limits;
        uint64_t bytes[2];
        unsigned buffers;
        char held[32], asked[32], quota[32];

        if (!l->vram_quota && !l->max_buffers)
                return false;
        server_user_usage(s->server, s->uid, bytes, &buffers);
        if (l->vram_quota && bytes[GMD_TIER_VRAM] + size > l->vram_quota) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_QUOTA,
                                   "uid %u holds %s of VRAM; %s more would pass "
                                   "its vram_quota of %s set in %s",
                                   (unsigned)s->uid,
                                   size_format(bytes[GMD_TIER_VRAM], held, sizeof(held)),
                                   size_format(size, asked, sizeof(asked)),
                                   size_format(l->vram_quota, quota, sizeof(quota)),
                                   l->vram_from);
                return true;
        }
        if (l->max_buffers && buffers + 1 > l->max_buffers) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_QUOTA,
                                   "uid %u holds %u buffers, the max_buffers quota "
                                   "set in %s", (unsigned)s->uid, buffers,
                                   l->buffers_from);
                return true;
        }
        return false;
}

int request_alloc_now(gmd_session *s, uint32_t id, uint64_t size,
                      unsigned device, unsigned flags, uint64_t since_us)
{
        gmd_server *server = s->server;
        Gmd__AllocReply reply = GMD__ALLOC_REPLY__INIT;
        Gmd__Segment segment = GMD__SEGMENT__INIT, *segments[1] = { &segment };
        gmd_dbuffer *b;
        int r;

        /* Checked again when a waiter is served: the user's other clients
         * may have allocated meanwhile, or a reload lowered the quota. */
        if (quota_refuses(s, id, size))
                return -EDQUOT;
        r = buffer_new(server, s, device, size, flags, &b);
        if (r == -ENOSPC)
                return r;
        if (r < 0) {
                log_error("creating %llu bytes on device %u failed: %s",
                          (unsigned long long)size, device, strerror(-r));
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "the %s backend could not create %llu bytes on "
                                   "device %u: %s", server->backend->ops->name,
                                   (unsigned long long)size, device, strerror(-r));
                return r;
        }
        segment.fd_index = 0;
        segment.offset = 0;
        segment.size = b->mem->size;
        reply.buffer_id = b->id;
        reply.size = b->size;
        reply.tier = (Gmd__Tier)b->tier;
        reply.n_segments = 1;
        reply.segments = segments;
        session_send(s, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base,
                     &b->mem->fd, 1);
        server->stats.allocations++;
        stats_alloc_latency(&server->stats, now_us() - since_us);
        return 0;
}

static void handle_alloc(gmd_session *s, uint32_t id, const Gmd__AllocRequest *m)
{
        gmd_server *server = s->server;
        gmd_pool *pool = server_vram_pool(server, m->device);
        char name[32], asked[32], cap[32], free_b[32];
        uint64_t size;
        int r;

        if (!pool) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "no device %u: this daemon serves %u device%s",
                                   m->device, server->n_devices,
                                   server->n_devices == 1 ? "" : "s");
                return;
        }
        if (m->flags & ~KNOWN_ALLOC_FLAGS) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "unknown allocation flags 0x%x", m->flags);
                return;
        }
        if ((m->flags & GMD_ALLOC_PIN_VRAM) && (m->flags & GMD_ALLOC_SPILLABLE)) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "PIN_VRAM and SPILLABLE exclude each other");
                return;
        }
        if (m->flags & GMD_ALLOC_LEGACY_IPC) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_UNSUPPORTED,
                                   "legacy CUDA IPC handles need the cuda backend; "
                                   "this daemon runs %s", server->backend->ops->name);
                return;
        }
        size = pool_round(pool, m->size);
        if (m->size == 0 || size == 0) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "size must be between 1 byte and the pool's capacity");
                return;
        }
        pool_describe(pool, name, sizeof(name));
        size_format(m->size, asked, sizeof(asked));
        size_format(pool->capacity, cap, sizeof(cap));
        if (size > pool->capacity) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_TOO_LARGE,
                                   "%s is larger than the whole %s pool (%s); "
                                   "ask for less or raise --vram-limit",
                                   asked, name, cap);
                return;
        }
        if (s->n_buffers >= server->config.max_buffers_per_client) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "this client already holds %u buffers, the most "
                                   "[limits] max_buffers_per_client allows",
                                   s->n_buffers);
                return;
        }
        if (quota_refuses(s, id, size))
                return;
        r = request_alloc_now(s, id, size, m->device, m->flags, now_us());
        if (r != -ENOSPC)
                return;
        if (m->timeout_ms == 0) {
                size_format(pool_free(pool), free_b, sizeof(free_b));
                session_send_error(s, id, GMD__ERROR_CODE__ERR_NO_MEMORY,
                                   "%s has %s free of %s, not enough for %s; "
                                   "not waiting (timeout 0)", name, free_b, cap, asked);
                return;
        }
        if (s->n_waiting >= server->config.max_waiting_per_client) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_LIMIT,
                                   "this client already has %u allocations waiting, "
                                   "the most [limits] max_waiting_per_client allows",
                                   s->n_waiting);
                return;
        }
        r = waitq_add(server, s, id, m->size, size, m->device, m->flags,
                      m->timeout_ms, now_us());
        if (r < 0)
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INTERNAL,
                                   "cannot queue the allocation: %s", strerror(-r));
}

static gmd_dbuffer *find_or_reply(gmd_session *s, uint32_t id, uint64_t buffer_id)
{
        gmd_dbuffer *b = buffer_find(s->server, s, buffer_id);

        if (!b)
                session_send_error(s, id, GMD__ERROR_CODE__ERR_NOT_FOUND,
                                   "no buffer %llu belongs to this client",
                                   (unsigned long long)buffer_id);
        return b;
}

static void handle_free(gmd_session *s, uint32_t id, const Gmd__BufferRequest *m)
{
        gmd_dbuffer *b = find_or_reply(s, id, m->buffer_id);

        if (!b)
                return;
        buffer_free(s->server, b);
        s->server->stats.frees++;
        reply_ok(s, id);
        waitq_run(s->server);
}

static void handle_acquire(gmd_session *s, uint32_t id, const Gmd__AcquireRequest *m)
{
        gmd_dbuffer *b = find_or_reply(s, id, m->buffer_id);

        if (!b)
                return;
        if (b->acquired) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_BUSY,
                                   "buffer %llu is already acquired",
                                   (unsigned long long)b->id);
                return;
        }
        /* Resident on its tier: usable at once. The swap engine makes this
         * wait for a buffer that is out or moving. */
        b->acquired = true;
        reply_ok(s, id);
}

static void handle_release(gmd_session *s, uint32_t id, const Gmd__BufferRequest *m)
{
        gmd_dbuffer *b = find_or_reply(s, id, m->buffer_id);

        if (!b)
                return;
        if (!b->acquired) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_BUSY,
                                   "buffer %llu is not acquired",
                                   (unsigned long long)b->id);
                return;
        }
        b->acquired = false;
        b->released_ms = now_ms();
        reply_ok(s, id);
}

static void admin_apply(gmd_session *target, const Gmd__AdminRequest *m,
                        const char *by)
{
        gmd_server *server = target->server;
        gmd_list *pos, *tmp;
        char who[128];
        unsigned n = 0;

        session_describe(target, who, sizeof(who));
        switch (m->op) {
        case GMD__ADMIN_OP__ADMIN_PRIORITY:
                log_info("%s: priority %d -> %d by %s", who, target->priority,
                         m->priority, by);
                target->priority = m->priority;
                target->priority_by_admin = true;
                return;
        case GMD__ADMIN_OP__ADMIN_DRAIN:
                list_for_each_safe(pos, tmp, &target->buffers) {
                        gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);
                        Gmd__RevokeNotify note = GMD__REVOKE_NOTIFY__INIT;

                        note.buffer_id = b->id;
                        note.reason = GMD__ERROR_CODE__ERR_PERMISSION;
                        note.message = "drained by an administrator";
                        session_send(target, GMD__MSG_TYPE__MSG_REVOKE, 0,
                                     &note.base, NULL, 0);
                        buffer_free(server, b);
                        n++;
                }
                log_info("%s: drained by %s (%u buffers revoked)", who, by, n);
                session_close(target, "drained by an administrator");
                return;
        default:
                return;
        }
}

static void handle_admin(gmd_session *s, uint32_t id, const Gmd__AdminRequest *m)
{
        gmd_server *server = s->server;
        gmd_list *pos, *tmp;
        char by[128];
        unsigned n = 0;

        if (!s->admin) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_PERMISSION,
                                   "administrative requests need root or membership "
                                   "in the admin group%s%s%s",
                                   server->config.admin_group[0] ? " '" : "",
                                   server->config.admin_group,
                                   server->config.admin_group[0] ? "'" :
                                   " ([daemon] admin_group is not set)");
                return;
        }
        if (m->op == GMD__ADMIN_OP__ADMIN_EVICT) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_UNSUPPORTED,
                                   "evict moves a client's idle buffers to host "
                                   "memory, which needs the swap engine; this "
                                   "gpu-memd does not have it yet");
                return;
        }
        if (m->op != GMD__ADMIN_OP__ADMIN_DRAIN &&
            m->op != GMD__ADMIN_OP__ADMIN_PRIORITY) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "unknown administrative operation %d", (int)m->op);
                return;
        }
        if (m->op == GMD__ADMIN_OP__ADMIN_PRIORITY &&
            (m->priority < GMD_PRIORITY_MIN || m->priority > GMD_PRIORITY_MAX)) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_INVALID,
                                   "priority must be from %d to %d",
                                   GMD_PRIORITY_MIN, GMD_PRIORITY_MAX);
                return;
        }
        session_describe(s, by, sizeof(by));
        list_for_each_safe(pos, tmp, &server->sessions) {
                gmd_session *t = container_of(pos, gmd_session, link);

                if (!t->hello_done || t->closing || (uint32_t)t->pid != m->pid)
                        continue;
                n++;
                /* Draining yourself: answer first, the connection closes. */
                if (t == s && m->op == GMD__ADMIN_OP__ADMIN_DRAIN)
                        reply_ok(s, id);
                admin_apply(t, m, by);
        }
        if (n == 0) {
                session_send_error(s, id, GMD__ERROR_CODE__ERR_NOT_FOUND,
                                   "no client of gpu-memd has pid %u", m->pid);
                return;
        }
        if (!s->closing)
                reply_ok(s, id);
        if (m->op == GMD__ADMIN_OP__ADMIN_DRAIN)
                waitq_run(server);
}

/* One row per request type: how to decode it and what to do with it. */
typedef void (*handler_fn)(gmd_session *s, uint32_t id, const void *msg);

typedef struct request_type {
        uint16_t type;
        const ProtobufCMessageDescriptor *descriptor;
        handler_fn handle;
        bool needs_hello;
        bool has_reply;
} request_type;

static void handle_status(gmd_session *s, uint32_t id, const Gmd__StatusRequest *m)
{
        status_reply(s, id, m);
}

static void handle_remap_ack(gmd_session *s, uint32_t id, const Gmd__RemapAck *m)
{
        /* No remaps are sent before the swap engine; an ack now answers
         * nothing and is ignored. */
        log_debug("client %llu: remap ack for buffer %llu ignored",
                  (unsigned long long)s->id, (unsigned long long)m->buffer_id);
}

#define ROW(t, desc, fn, hello, reply) \
        { GMD__MSG_TYPE__##t, &desc, (handler_fn)(fn), hello, reply }

static const request_type request_types[] = {
        ROW(MSG_HELLO, gmd__hello__descriptor, handle_hello, false, true),
        ROW(MSG_ALLOC, gmd__alloc_request__descriptor, handle_alloc, true, true),
        ROW(MSG_FREE, gmd__buffer_request__descriptor, handle_free, true, true),
        ROW(MSG_ACQUIRE, gmd__acquire_request__descriptor, handle_acquire, true, true),
        ROW(MSG_RELEASE, gmd__buffer_request__descriptor, handle_release, true, true),
        ROW(MSG_STATUS, gmd__status_request__descriptor, handle_status, true, true),
        ROW(MSG_REMAP_ACK, gmd__remap_ack__descriptor, handle_remap_ack, true, false),
        ROW(MSG_ADMIN, gmd__admin_request__descriptor, handle_admin, true, true),
};

void request_handle(gmd_session *s, gmd_wire_packet *packet)
{
        const gmd_wire_header *h = &packet->header;
        const request_type *rt = NULL;
        ProtobufCMessage *msg;

        if (packet->n_fds > 0) {
                gmd_wire_packet_close_fds(packet);
                protocol_error(s, "client sent file descriptors", h->type);
                return;
        }
        for (size_t i = 0; i < sizeof(request_types) / sizeof(request_types[0]); i++)
                if (request_types[i].type == h->type)
                        rt = &request_types[i];
        if (!rt) {
                protocol_error(s, "unknown message type", h->type);
                return;
        }
        if (rt->needs_hello && !s->hello_done) {
                protocol_error(s, "request before hello", h->type);
                return;
        }
        if (rt->has_reply && h->request_id == 0) {
                protocol_error(s, "request id 0 is reserved for notifications", h->type);
                return;
        }
        msg = protobuf_c_message_unpack(rt->descriptor, NULL, h->length,
                                        packet->payload);
        if (!msg) {
                protocol_error(s, "undecodable payload", h->type);
                return;
        }
        rt->handle(s, h->request_id, msg);
        protobuf_c_message_free_unpacked(msg, NULL);
}
