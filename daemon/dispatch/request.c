/*
 * request — see request.h. Each handler gets a payload that passed the
 * header checks of wire.c; it decodes it (a failure to decode is a protocol
 * error that closes the session), checks every field against the daemon's
 * limits, and returns an outcome (result.h): request_answer turns it into
 * exactly one reply carrying the request id. Outcomes decided later in the
 * core (an acquire granted, a wait met, a notice) are queued in their
 * session (answers.h) and come back here from the scheduling pass
 * (request_send_answers), to be built the same way: no module below this
 * one builds an OkReply or an ErrorReply. Bad values in a well-formed
 * message are the client's mistake, not an attack: they get an error reply
 * with a message, and the session stays open.
 */
#include "request.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "admission.h"
#include "alloc.h"
#include "buffer.h"
#include "gpumem.pb-c.h"
#include "loan.h"
#include "log.h"
#include "move.h"
#include "parking.h"
#include "peer.h"
#include "persist.h"
#include "restore.h"
#include "server.h"
#include "session.h"
#include "session_io.h"
#include "stats.h"
#include "status.h"
#include "tiering.h"
#include "timeutil.h"

/* The layers below know the protocol's error codes by their own names
 * (result.h), with the same values: a result's code is the reply's. */
#define SAME_CODE(name) \
        _Static_assert((int)GMD_ERR_##name == (int)GMD__ERROR_CODE__ERR_##name, \
                       "result.h's GMD_ERR_" #name " is the protocol's")
SAME_CODE(NONE);
SAME_CODE(INVALID);
SAME_CODE(NO_MEMORY);
SAME_CODE(TOO_LARGE);
SAME_CODE(NOT_FOUND);
SAME_CODE(PERMISSION);
SAME_CODE(QUOTA);
SAME_CODE(BUSY);
SAME_CODE(UNSUPPORTED);
SAME_CODE(VERSION);
SAME_CODE(INTERNAL);
SAME_CODE(TIMED_OUT);
SAME_CODE(SHUTTING_DOWN);
SAME_CODE(LIMIT);
_Static_assert(GMD__ERROR_CODE__ERR_LIMIT + 1 <= GMD_STATS_ERROR_CODES,
               "stats.h counts every error code");

/* Keep printable ASCII of a client-chosen name; it ends up in logs. */
static void copy_name(char *dst, size_t len, const char *src)
{
        size_t n = 0;

        for (; src && *src && n + 1 < len; src++)
                dst[n++] = isprint((unsigned char)*src) ? *src : '?';
        dst[n] = '\0';
}

static gmd_outcome handle_hello(gmd_session *s, uint32_t id, const Gmd__Hello *m,
                                gmd_result *ret)
{
        gmd_server *server = s->server;
        Gmd__HelloReply reply = GMD__HELLO_REPLY__INIT;
        Gmd__DeviceInfo infos[64], *ptrs[64];
        unsigned version, n = server->devices.n < 64 ? server->devices.n : 64;
        char who[128];

        if (s->hello_done)
                return result_error(ret, GMD__ERROR_CODE__ERR_INVALID,
                                    "hello was already sent on this connection");
        version = m->max_version < GMD_WIRE_VERSION ? m->max_version : GMD_WIRE_VERSION;
        if (m->min_version > m->max_version || version < m->min_version ||
            version < GMD_WIRE_MIN_VERSION) {
                result_error(ret, GMD__ERROR_CODE__ERR_VERSION,
                             "client speaks protocol %u..%u, gpu-memd %u..%u: "
                             "upgrade the older side",
                             m->min_version, m->max_version,
                             GMD_WIRE_MIN_VERSION, GMD_WIRE_VERSION);
                request_answer(s, id, OUTCOME_ERROR, ret);
                session_close(s, "no protocol version in common");
                return OUTCOME_ANSWERED;
        }
        copy_name(s->name, sizeof(s->name), m->client_name);
        s->version = version;
        s->keeps_mappings = m->keeps_mappings;
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
        /* Its resume token: what lets this process, and no other, claim
         * its buffers from a restarted daemon (restore.h). */
        if (getrandom(s->token, sizeof(s->token), 0) != (ssize_t)sizeof(s->token))
                memset(s->token, 0, sizeof(s->token));
        persist_session(server, s);

        for (unsigned i = 0; i < n; i++) {
                gmd__device_info__init(&infos[i]);
                infos[i].index = i;
                infos[i].name = server->devices.info[i].name;
                infos[i].vram_total = server->devices.info[i].total;
                infos[i].granularity = server->devices.pools[i].granularity;
                infos[i].uuid = server->devices.info[i].uuid;
                infos[i].pci_bus_id = server->devices.info[i].pci_bus_id;
                ptrs[i] = &infos[i];
        }
        reply.version = version;
        reply.daemon_version = GMD_VERSION_STRING;
        reply.backend = (char *)server->backend->ops->name;
        reply.client_id = s->id;
        reply.n_devices = n;
        reply.devices = ptrs;
        reply.instance = server->instance;
        /* Which devices' memory its process maps (handle_reach). */
        reply.asks_reach = true;
        if (server->ledger) {
                reply.resume_token.data = s->token;
                reply.resume_token.len = sizeof(s->token);
        }
        log_info("%s connected (protocol %u)",
                 session_describe(s, who, sizeof(who)), version);
        session_send(s, GMD__MSG_TYPE__MSG_HELLO_REPLY, id, &reply.base, NULL, 0);
        return OUTCOME_ANSWERED;
}

/* The AllocReply of a buffer just created: its id, size and tier, and
 * the fd to map (or, legacy IPC, the handle instead). */
static void answer_alloc(gmd_session *s, uint32_t id, const gmd_result *r)
{
        gmd_server *server = s->server;
        Gmd__AllocReply reply = GMD__ALLOC_REPLY__INIT;
        Gmd__Segment segment = GMD__SEGMENT__INIT, *segments[1] = { &segment };
        gmd_dbuffer *b = r->buffer;

        reply.buffer_id = b->id;
        reply.size = b->size;
        reply.tier = (Gmd__Tier)b->tier;
        if (b->mem->fd < 0) {
                /* Legacy IPC: the handle instead of segments and an fd. */
                reply.ipc_handle.len = sizeof(b->mem->ipc_handle);
                reply.ipc_handle.data = b->mem->ipc_handle;
                session_send(s, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base,
                             NULL, 0);
        } else {
                segment.fd_index = 0;
                segment.offset = 0;
                segment.size = b->mem->size;
                reply.n_segments = 1;
                reply.segments = segments;
                b->mem->shared = true;
                keptfd_sent(server, b->mem, s);
                session_send(s, GMD__MSG_TYPE__MSG_ALLOC_REPLY, id, &reply.base,
                             &b->mem->fd, 1);
        }
        server->stats.allocations++;
        stats_alloc_latency(&server->stats, now_us() - r->since_us);
}

/* The one place OkReply and ErrorReply messages are built: an empty
 * OkReply for a success, else an ErrorReply with the result's code and
 * text. Request id 0: a notice, not an answer. */
static void answer_result(gmd_session *s, uint32_t id, const gmd_result *r)
{
        Gmd__ErrorReply reply = GMD__ERROR_REPLY__INIT;
        Gmd__OkReply ok = GMD__OK_REPLY__INIT;

        if (r->code == 0) {
                session_send(s, GMD__MSG_TYPE__MSG_OK_REPLY, id, &ok.base, NULL, 0);
                return;
        }
        stats_error(&s->server->stats, r->code);
        reply.code = r->code;
        reply.message = (char *)r->text;
        session_send(s, GMD__MSG_TYPE__MSG_ERROR_REPLY, id, &reply.base, NULL, 0);
}

void request_answer(gmd_session *s, uint32_t id, gmd_outcome outcome,
                    gmd_result *r)
{
        switch (outcome) {
        case OUTCOME_OK:
                result_ok(r);
                answer_result(s, id, r);
                return;
        case OUTCOME_ERROR:
                answer_result(s, id, r);
                return;
        case OUTCOME_ALLOCATED:
                answer_alloc(s, id, r);
                return;
        case OUTCOME_ANSWERED:
        case OUTCOME_LATER:
        case OUTCOME_NONE:
                return;
        }
}

/* An allocation answered from the queue (loan.h): its buffer, unless an
 * administrator revoked it meanwhile. */
static void answer_queued_alloc(gmd_session *s, uint32_t id, gmd_result *r)
{
        r->buffer = buffer_find(s->server, s, r->buffer_id);
        if (r->buffer) {
                answer_alloc(s, id, r);
                return;
        }
        result_error(r, GMD__ERROR_CODE__ERR_NOT_FOUND,
                     "the buffer allocated for this request was revoked "
                     "before the answer went out");
        answer_result(s, id, r);
}

void request_send_answers(gmd_session *s)
{
        gmd_answer *a;

        while ((a = answers_take(&s->answers))) {
                switch (a->kind) {
                case ANSWER_OK:
                        result_ok(&a->result);
                        answer_result(s, a->request_id, &a->result);
                        break;
                case ANSWER_ERROR:
                        answer_result(s, a->request_id, &a->result);
                        break;
                case ANSWER_ALLOCATED:
                        answer_queued_alloc(s, a->request_id, &a->result);
                        break;
                case ANSWER_NOTICE:
                        answer_result(s, 0, &a->result);
                        break;
                case ANSWER_PACKET:
                        session_send_held(s, a);
                        break;
                }
                answer_free(a);
        }
        if (s->answers.close_after)
                session_close_later(s, s->answers.close_reason);
}

/* Close `fd`, a connection refused once told why, so that its peer still
 * reads the reason (gmd_wire_drain: its hello, unread, would reset the
 * connection). Never blocks: a refusal is a few system calls, which a
 * connection flood makes thousands of times a second. */
static void refuse_hang_up(int fd)
{
        gmd_wire_drain(fd, 256);
        close(fd);
}

void request_refuse(int fd, int code, const char *why)
{
        Gmd__ErrorReply reply = GMD__ERROR_REPLY__INIT;
        uint8_t payload[1024];
        size_t n;

        reply.code = code;
        reply.message = (char *)why;
        n = protobuf_c_message_get_packed_size(&reply.base);
        if (n <= sizeof(payload)) {
                protobuf_c_message_pack(&reply.base, payload);
                (void)gmd_wire_send(fd, GMD__MSG_TYPE__MSG_ERROR_REPLY, 0, payload,
                                    (uint32_t)n, NULL, 0);
        }
        refuse_hang_up(fd);
}

static gmd_outcome no_buffer(gmd_result *ret, uint64_t buffer_id)
{
        return result_error(ret, GMD__ERROR_CODE__ERR_NOT_FOUND,
                            "no buffer %llu belongs to this client",
                            (unsigned long long)buffer_id);
}

static gmd_outcome handle_free(gmd_session *s, uint32_t id,
                               const Gmd__BufferRequest *m, gmd_result *ret)
{
        gmd_dbuffer *b = buffer_find(s->server, s, m->buffer_id);

        if (!b)
                return no_buffer(ret, m->buffer_id);
        /* Answer first: destroying the backing is the driver's slowest
         * step and the client need not wait for it. */
        request_answer(s, id, OUTCOME_OK, ret);
        move_free_buffer(s->server, b);
        s->server->stats.frees++;
        return OUTCOME_ANSWERED;
}

static gmd_outcome handle_release(gmd_session *s, uint32_t id,
                                  const Gmd__BufferRequest *m, gmd_result *ret)
{
        gmd_dbuffer *b = buffer_find(s->server, s, m->buffer_id);

        (void)id;
        if (!b)
                return no_buffer(ret, m->buffer_id);
        if (!b->acquired)
                return result_error(ret, GMD__ERROR_CODE__ERR_BUSY,
                                    "buffer %llu is not acquired",
                                    (unsigned long long)b->id);
        if (m->last_use_event.len) {
                const gmd_backend_ops *ops = s->server->backend->ops;
                gmd_event *event = NULL;
                int r;

                if (m->last_use_event.len != GMD_IPC_HANDLE_SIZE || !ops->event_open)
                        return result_error(ret, GMD__ERROR_CODE__ERR_UNSUPPORTED,
                                            "a last-use event needs the cuda backend "
                                            "and a %d-byte handle", GMD_IPC_HANDLE_SIZE);
                /* Opened once per handle and cached by the backend: a
                 * client sends the same handle with every release. */
                r = ops->event_open(s->server->backend, b->device,
                                    m->last_use_event.data, &event);
                if (r < 0)
                        return result_error(ret, GMD__ERROR_CODE__ERR_INVALID,
                                            "cannot open the last-use event: %s",
                                            strerror(-r));
                buffer_set_last_use(s->server, b, event);
        }
        b->released_ms = now_ms();
        if (b->loan)
                loan_forget(b);         /* not to be brought back for it */
        buffer_set_acquired(b, false);
        /* An idle buffer is room for whoever waits for VRAM. */
        if (!waitq_empty(&s->server->waitq))
                pending_mark(&s->server->pending, PENDING_EVICT);
        return OUTCOME_OK;
}

/* ---- the cache of idle mappings (parking.h) ----------------------------
 *
 * Messages name buffers by id; an id that is not the client's or not in the
 * state the message expects is ignored with a debug line rather than
 * treated as an attack: a drain or a reclaim may cross a park in flight,
 * and both sides then agree once each has read the other's message.
 *
 * A client may list at most this many buffers in one message; more is a
 * protocol error (the packet bound keeps it far lower anyway). */
#define PARKING_MAX_IDS 8192

static bool park_list_ok(gmd_session *s, const Gmd__BufferList *list, uint16_t type)
{
        if (list->n_buffer_ids > PARKING_MAX_IDS) {
                session_protocol_error(s, "too many buffer ids", type);
                return false;
        }
        return true;
}

static gmd_outcome handle_park(gmd_session *s, uint32_t id,
                               const Gmd__BufferList *list, gmd_result *ret)
{
        gmd_server *server = s->server;
        bool parked_any = false;

        (void)id;
        (void)ret;
        if (!park_list_ok(s, list, GMD__MSG_TYPE__MSG_PARK))
                return OUTCOME_NONE;
        for (size_t i = 0; i < list->n_buffer_ids; i++) {
                gmd_dbuffer *b = buffer_find(server, s, list->buffer_ids[i]);

                /* Legacy IPC buffers cannot be parked: the client closes
                 * them, and they are never in its cache. */
                if (!b || b->parked || !b->mem || b->mem->fd < 0) {
                        log_debug("client %llu: park of buffer %llu ignored",
                                  (unsigned long long)s->id,
                                  (unsigned long long)list->buffer_ids[i]);
                        continue;
                }
                /* A move under way stops if its copy has not ended (the
                 * buffer stays in VRAM, where a cached buffer belongs); one
                 * whose remap is already on its way ends as usual, and the
                 * client's cache returns a buffer it finds on host memory.
                 * Never revoke here: the application may already have it
                 * back from the cache. */
                if (move_busy(b))
                        move_cancel(s->server, b);
                buffer_park(b, true);
                parked_any = true;
        }
        /* Someone may already wait for the room this holds: let the
         * evictor ask for it back at once. */
        if (parked_any && !waitq_empty(&server->waitq))
                pending_mark(&server->pending, PENDING_EVICT);
        return OUTCOME_NONE;
}

static gmd_outcome handle_unpark(gmd_session *s, uint32_t id,
                                 const Gmd__BufferList *list, gmd_result *ret)
{
        (void)id;
        (void)ret;
        if (!park_list_ok(s, list, GMD__MSG_TYPE__MSG_UNPARK))
                return OUTCOME_NONE;
        for (size_t i = 0; i < list->n_buffer_ids; i++) {
                gmd_dbuffer *b = buffer_find(s->server, s, list->buffer_ids[i]);

                if (!b || !b->parked) {
                        log_debug("client %llu: unpark of buffer %llu ignored",
                                  (unsigned long long)s->id,
                                  (unsigned long long)list->buffer_ids[i]);
                        continue;
                }
                buffer_park(b, false);
        }
        return OUTCOME_NONE;
}

static gmd_outcome handle_return(gmd_session *s, uint32_t id,
                                 const Gmd__BufferList *list, gmd_result *ret)
{
        unsigned n = 0;

        (void)id;
        (void)ret;
        if (!park_list_ok(s, list, GMD__MSG_TYPE__MSG_RETURN))
                return OUTCOME_NONE;
        for (size_t i = 0; i < list->n_buffer_ids; i++) {
                gmd_dbuffer *b = buffer_find(s->server, s, list->buffer_ids[i]);

                /* Only parked buffers come back this way: the client has
                 * unmapped them. */
                if (!b || !b->parked)
                        continue;
                parking_returned(&s->parking, b->device, b->size);
                move_free_buffer(s->server, b);
                n++;
        }
        if (n) {
                log_debug("client %llu returned %u parked buffers",
                          (unsigned long long)s->id, n);
        }
        return OUTCOME_NONE;
}

/* ---- requests the core handles: their fields, in its own terms -------- */

static gmd_outcome handle_alloc(gmd_session *s, uint32_t id,
                                const Gmd__AllocRequest *m, gmd_result *ret)
{
        gmd_alloc_ask ask = {
                .size = m->size, .device = m->device, .flags = m->flags,
                .timeout_ms = m->timeout_ms,
        };

        return alloc_handle(s, id, &ask, ret);
}

static gmd_outcome handle_acquire(gmd_session *s, uint32_t id,
                                  const Gmd__AcquireRequest *m, gmd_result *ret)
{
        gmd_acquire_ask ask = {
                .buffer_id = m->buffer_id, .timeout_ms = m->timeout_ms,
                .flags = m->flags,
        };

        return tiering_handle_acquire(s, id, &ask, ret);
}

/* MSG_PAGEOUT's and MSG_PREFETCH's buffers (a MSG_WAIT adds its
 * deadline). */
static gmd_buffers_ask buffers_ask(size_t n, const uint64_t *ids,
                                   int64_t timeout_ms)
{
        return (gmd_buffers_ask){
                .n_buffer_ids = n, .buffer_ids = ids, .timeout_ms = timeout_ms,
        };
}

static gmd_outcome handle_pageout(gmd_session *s, uint32_t id,
                                  const Gmd__MoveRequest *m, gmd_result *ret)
{
        gmd_buffers_ask ask = buffers_ask(m->n_buffer_ids, m->buffer_ids, 0);

        return tiering_handle_pageout(s, id, &ask, ret);
}

static gmd_outcome handle_prefetch(gmd_session *s, uint32_t id,
                                   const Gmd__MoveRequest *m, gmd_result *ret)
{
        gmd_buffers_ask ask = buffers_ask(m->n_buffer_ids, m->buffer_ids, 0);

        return tiering_handle_prefetch(s, id, &ask, ret);
}

static gmd_outcome handle_wait(gmd_session *s, uint32_t id,
                               const Gmd__WaitRequest *m, gmd_result *ret)
{
        gmd_buffers_ask ask = buffers_ask(m->n_buffer_ids, m->buffer_ids,
                                          m->timeout_ms);

        return tiering_handle_wait(s, id, &ask, ret);
}

static gmd_outcome handle_remap_ack(gmd_session *s, uint32_t id,
                                    const Gmd__RemapAck *m, gmd_result *ret)
{
        gmd_remap_ack ack = {
                .buffer_id = m->buffer_id, .sequence = m->sequence,
                .result = m->result,
        };

        return move_handle_ack(s, id, &ack, ret);
}

/* ---- what the core tells a client outside any request (session.h) ---- */

static int notify_remap(gmd_session *s, const gmd_remap_notice *n)
{
        Gmd__RemapNotify note = GMD__REMAP_NOTIFY__INIT;
        Gmd__Segment segment = GMD__SEGMENT__INIT, *segments[1] = { &segment };

        note.buffer_id = n->buffer_id;
        note.sequence = n->sequence;
        note.tier = (Gmd__Tier)n->tier;
        note.keep_mapping = n->keep_mapping;
        note.falls_back = n->falls_back;
        if (n->fd >= 0) {
                segment.fd_index = 0;
                segment.offset = 0;
                segment.size = n->size;
                note.n_segments = 1;
                note.segments = segments;
        }
        return session_send(s, GMD__MSG_TYPE__MSG_REMAP, 0, &note.base,
                            n->fd >= 0 ? &n->fd : NULL, n->fd >= 0 ? 1 : 0);
}

static int notify_reclaim(gmd_session *s, unsigned device, uint64_t bytes)
{
        Gmd__ReclaimNotify note = GMD__RECLAIM_NOTIFY__INIT;

        note.device = device;
        note.bytes = bytes;
        return session_send(s, GMD__MSG_TYPE__MSG_RECLAIM, 0, &note.base,
                            NULL, 0);
}

const gmd_session_ops request_session_ops = {
        .notify_remap = notify_remap,
        .notify_reclaim = notify_reclaim,
};

/* One row per request type: how to decode it and what to do with it. */
typedef gmd_outcome (*handler_fn)(gmd_session *s, uint32_t id, const void *msg,
                                  gmd_result *ret);

typedef struct request_type {
        uint16_t type;
        const ProtobufCMessageDescriptor *descriptor;
        handler_fn handle;
        bool needs_hello;
        bool has_reply;
} request_type;

static gmd_outcome handle_status(gmd_session *s, uint32_t id,
                                 const Gmd__StatusRequest *m, gmd_result *ret)
{
        return status_reply(s, id, m, ret);
}

#define RESUME_MAX_CLAIMS 4096u

/* A client back after a restart claims its buffers (restore.h); the fds
 * of what it maps came with the packet, which still owns them. */
static gmd_outcome handle_resume(gmd_session *s, uint32_t id,
                                 const Gmd__ResumeRequest *m,
                                 const gmd_wire_packet *packet, gmd_result *ret)
{
        Gmd__ResumeReply reply = GMD__RESUME_REPLY__INIT;
        Gmd__BufferVerdict *verdicts = NULL, **ptrs = NULL;
        gmd_verdict *words = NULL;
        gmd_claim *claims = NULL;
        gmd_resume_ask ask = { 0 };
        size_t n = m->n_buffers;

        if (!s->server->ledger)
                return result_error(ret, GMD_ERR_UNSUPPORTED,
                                    "this gpu-memd keeps nothing across "
                                    "restarts ([restart] keep = off, or "
                                    "auto outside systemd)");
        /* A packet's payload bounds it already (a claim is ~30 bytes);
         * this bounds the daemon's scratch per request. */
        if (n > RESUME_MAX_CLAIMS)
                return result_error(ret, GMD_ERR_INVALID,
                                    "%zu claims in one request: at most %u",
                                    n, RESUME_MAX_CLAIMS);
        claims = calloc(n ? n : 1, sizeof(*claims));
        words = calloc(n ? n : 1, sizeof(*words));
        verdicts = calloc(n ? n : 1, sizeof(*verdicts));
        ptrs = calloc(n ? n : 1, sizeof(*ptrs));
        if (!claims || !words || !verdicts || !ptrs) {
                free(claims);
                free(words);
                free(verdicts);
                free(ptrs);
                return result_error(ret, GMD_ERR_INTERNAL, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
                const Gmd__BufferClaim *c = m->buffers[i];

                claims[i].buffer_id = c->buffer_id;
                claims[i].size = c->size;
                claims[i].device = c->device;
                claims[i].flags = c->flags;
                claims[i].tier = c->tier == GMD__TIER__TIER_HOST ?
                                 GMD_TIER_HOST : GMD_TIER_VRAM;
                claims[i].acquired = c->acquired;
                claims[i].freeing = c->freeing;
                claims[i].fd = -1;
                /* One segment per buffer (AllocReply sends one). */
                if (c->n_segments >= 1 &&
                    c->segments[0]->fd_index < packet->n_fds)
                        claims[i].fd = packet->fds[c->segments[0]->fd_index];
        }
        ask.client_id = m->client_id;
        ask.token = m->token.data;
        ask.token_len = m->token.len;
        ask.claims = claims;
        ask.n_claims = (unsigned)n;
        ask.last = m->last;
        restore_resume(s, &ask, words);
        for (size_t i = 0; i < n; i++) {
                gmd__buffer_verdict__init(&verdicts[i]);
                verdicts[i].buffer_id = claims[i].buffer_id;
                verdicts[i].code = (Gmd__ErrorCode)words[i].code;
                verdicts[i].message = words[i].message;
                ptrs[i] = &verdicts[i];
        }
        reply.n_verdicts = n;
        reply.verdicts = ptrs;
        session_send(s, GMD__MSG_TYPE__MSG_RESUME_REPLY, id, &reply.base, NULL, 0);
        /* Remaps the claims need, after the verdicts that explain them. */
        restore_after_reply(s);
        free(claims);
        free(words);
        free(verdicts);
        free(ptrs);
        return OUTCOME_ANSWERED;
}

/* ---- the client's memory plan ------------------------------------------
 *
 * Stored as it comes, for status: the daemon decides nothing by it, so the
 * numbers need no check. The planner's name is shown to administrators as
 * it is: only printable ASCII, and short, or the session is closed. */
#define PLAN_NAME_MAX 32

static gmd_outcome handle_plan(gmd_session *s, uint32_t id,
                               const Gmd__PlanReport *msg, gmd_result *ret)
{
        const char *name = msg->planner ? msg->planner : "";
        size_t len = strlen(name);

        (void)id;
        (void)ret;
        if (len > PLAN_NAME_MAX) {
                session_protocol_error(s, "planner name too long",
                                       GMD__MSG_TYPE__MSG_PLAN);
                return OUTCOME_NONE;
        }
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)name[i];

                if (c < 0x20 || c > 0x7e) {
                        session_protocol_error(s, "planner name not printable",
                                               GMD__MSG_TYPE__MSG_PLAN);
                        return OUTCOME_NONE;
                }
        }
        memcpy(s->plan.planner, name, len + 1);
        s->plan.kept = msg->kept_bytes;
        s->plan.offloaded = msg->offloaded_bytes;
        s->plan.recomputed = msg->recomputed_bytes;
        s->plan.streamed = msg->streamed_bytes;
        log_debug("client %llu: plan by %s", (unsigned long long)s->id,
                  len ? name : "(unnamed)");
        return OUTCOME_NONE;
}

/* ---- which devices' memory the client's process maps --------------------
 *
 * What the daemon acts on (peer.h: where a SPILLABLE buffer may rest), so
 * every number is checked: a device the daemon does not have, one listed
 * twice or more entries than devices is a client's bug and closes the
 * session; nothing of a refused report is kept. */
static gmd_outcome handle_reach(gmd_session *s, uint32_t id,
                                const Gmd__ReachReport *msg, gmd_result *ret)
{
        unsigned n = s->server->devices.n < GMD_MAX_DEVICES ?
                     s->server->devices.n : GMD_MAX_DEVICES;
        uint64_t maps[GMD_MAX_DEVICES] = { 0 }, listed = 0;
        const char *bad = NULL;

        (void)id;
        (void)ret;
        if (msg->n_devices > n)
                bad = "reach report lists more devices than gpu-memd has";
        for (size_t i = 0; !bad && i < msg->n_devices; i++) {
                const Gmd__DeviceReach *d = msg->devices[i];

                if (d->device >= n || d->n_maps > n) {
                        bad = "reach report names a device gpu-memd does "
                              "not have";
                        break;
                }
                if (listed & (1ull << d->device)) {
                        bad = "reach report lists a device twice";
                        break;
                }
                listed |= 1ull << d->device;
                for (size_t j = 0; j < d->n_maps; j++) {
                        if (d->maps[j] >= n) {
                                bad = "reach report names a device gpu-memd "
                                      "does not have";
                                break;
                        }
                        maps[d->device] |= 1ull << d->maps[j];
                }
        }
        if (bad) {
                session_protocol_error(s, bad, GMD__MSG_TYPE__MSG_REACH);
                return OUTCOME_NONE;
        }
        peer_owner_reach(s, maps);
        for (unsigned d = 0; d < n; d++)
                if (s->maps[d])
                        log_debug("client %llu: from device %u it maps the "
                                  "VRAM of devices 0x%llx",
                                  (unsigned long long)s->id, d,
                                  (unsigned long long)s->maps[d]);
        return OUTCOME_NONE;
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
        ROW(MSG_PAGEOUT, gmd__move_request__descriptor, handle_pageout, true, true),
        ROW(MSG_PREFETCH, gmd__move_request__descriptor, handle_prefetch, true, true),
        ROW(MSG_WAIT, gmd__wait_request__descriptor, handle_wait, true, true),
        ROW(MSG_ADMIN, gmd__admin_request__descriptor, admin_handle, true, true),
        ROW(MSG_PARK, gmd__buffer_list__descriptor, handle_park, true, false),
        ROW(MSG_UNPARK, gmd__buffer_list__descriptor, handle_unpark, true, false),
        ROW(MSG_RETURN, gmd__buffer_list__descriptor, handle_return, true, false),
        ROW(MSG_PLAN, gmd__plan_report__descriptor, handle_plan, true, false),
        ROW(MSG_REACH, gmd__reach_report__descriptor, handle_reach, true, false),
};

/* MSG_RESUME is the one request that carries fds: handled apart. */
static void request_resume(gmd_session *s, gmd_wire_packet *packet)
{
        const gmd_wire_header *h = &packet->header;
        Gmd__ResumeRequest *msg;
        gmd_outcome outcome;
        gmd_result result;

        if (!s->hello_done) {
                gmd_wire_packet_close_fds(packet);
                session_protocol_error(s, "request before hello", h->type);
                return;
        }
        msg = gmd__resume_request__unpack(NULL, h->length, packet->payload);
        if (!msg || h->request_id == 0) {
                gmd_wire_packet_close_fds(packet);
                session_protocol_error(s, msg ? "request id 0 is reserved for "
                                       "notifications" : "undecodable payload",
                                       h->type);
                if (msg)
                        gmd__resume_request__free_unpacked(msg, NULL);
                return;
        }
        result_ok(&result);
        outcome = handle_resume(s, h->request_id, msg, packet, &result);
        request_answer(s, h->request_id, outcome, &result);
        gmd__resume_request__free_unpacked(msg, NULL);
        gmd_wire_packet_close_fds(packet);
}

void request_handle(gmd_session *s, gmd_wire_packet *packet)
{
        const gmd_wire_header *h = &packet->header;
        const request_type *rt = NULL;
        ProtobufCMessage *msg;
        gmd_outcome outcome;
        gmd_result result;

        if (h->type == GMD__MSG_TYPE__MSG_RESUME) {
                request_resume(s, packet);
                return;
        }
        if (packet->n_fds > 0) {
                gmd_wire_packet_close_fds(packet);
                session_protocol_error(s, "client sent file descriptors", h->type);
                return;
        }
        for (size_t i = 0; i < sizeof(request_types) / sizeof(request_types[0]); i++)
                if (request_types[i].type == h->type)
                        rt = &request_types[i];
        if (!rt) {
                char what[48];

                snprintf(what, sizeof(what), "unknown message type %u", h->type);
                session_protocol_error(s, what, h->type);
                return;
        }
        if (rt->needs_hello && !s->hello_done) {
                session_protocol_error(s, "request before hello", h->type);
                return;
        }
        if (rt->has_reply && h->request_id == 0) {
                session_protocol_error(s, "request id 0 is reserved for notifications", h->type);
                return;
        }
        msg = protobuf_c_message_unpack(rt->descriptor, NULL, h->length,
                                        packet->payload);
        if (!msg) {
                session_protocol_error(s, "undecodable payload", h->type);
                return;
        }
        result_ok(&result);
        outcome = rt->handle(s, h->request_id, msg, &result);
        request_answer(s, h->request_id, outcome, &result);
        protobuf_c_message_free_unpacked(msg, NULL);
}
