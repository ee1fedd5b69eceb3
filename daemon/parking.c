/*
 * parking — see parking.h. Messages name buffers by id; an id that is not
 * the client's or not in the state the message expects is ignored with a
 * debug line rather than treated as an attack: a drain or a reclaim may
 * cross a park in flight, and both sides then agree once each has read the
 * other's message.
 */
#include "parking.h"

#include <stdbool.h>
#include <stdlib.h>

#include "buffer.h"
#include "log.h"
#include "move.h"
#include "server.h"
#include "session.h"

/* A client may list at most this many buffers in one message; more is a
 * protocol error (the packet bound keeps it far lower anyway). */
#define PARKING_MAX_IDS 8192

static bool list_ok(gmd_session *s, const Gmd__BufferList *list, uint16_t type)
{
        if (list->n_buffer_ids > PARKING_MAX_IDS) {
                session_protocol_error(s, "too many buffer ids", type);
                return false;
        }
        return true;
}

gmd_outcome parking_handle_park(gmd_session *s, uint32_t id,
                                const Gmd__BufferList *list, gmd_result *ret)
{
        gmd_server *server = s->server;
        bool parked_any = false;

        (void)id;
        (void)ret;
        if (!list_ok(s, list, GMD__MSG_TYPE__MSG_PARK))
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

gmd_outcome parking_handle_unpark(gmd_session *s, uint32_t id,
                                  const Gmd__BufferList *list, gmd_result *ret)
{
        (void)id;
        (void)ret;
        if (!list_ok(s, list, GMD__MSG_TYPE__MSG_UNPARK))
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

gmd_outcome parking_handle_return(gmd_session *s, uint32_t id,
                                  const Gmd__BufferList *list, gmd_result *ret)
{
        unsigned n = 0;

        (void)id;
        (void)ret;
        if (!list_ok(s, list, GMD__MSG_TYPE__MSG_RETURN))
                return OUTCOME_NONE;
        for (size_t i = 0; i < list->n_buffer_ids; i++) {
                gmd_dbuffer *b = buffer_find(s->server, s, list->buffer_ids[i]);

                /* Only parked buffers come back this way: the client has
                 * unmapped them. */
                if (!b || !b->parked)
                        continue;
                s->reclaim_asked[b->device] = s->reclaim_asked[b->device] > b->size ?
                                              s->reclaim_asked[b->device] - b->size : 0;
                move_free_buffer(s->server, b);
                n++;
        }
        if (n) {
                log_debug("client %llu returned %u parked buffers",
                          (unsigned long long)s->id, n);
        }
        return OUTCOME_NONE;
}

uint64_t parking_reclaimable(gmd_server *server, unsigned device)
{
        uint64_t bytes = 0;
        gmd_list *pos;

        list_for_each(pos, &server->sessions)
                bytes += container_of(pos, gmd_session, link)->parked_on[device];
        return bytes;
}

/* Ask one session for up to `bytes` of what it has parked on `device` and
 * was not asked for yet. Returns what was asked. */
static uint64_t reclaim_from(gmd_session *s, unsigned device, uint64_t bytes)
{
        Gmd__ReclaimNotify note = GMD__RECLAIM_NOTIFY__INIT;
        uint64_t open = s->parked_on[device] - s->reclaim_asked[device];

        if (s->closing || !open)
                return 0;
        note.device = device;
        note.bytes = bytes && bytes < open ? bytes : open;
        s->reclaim_asked[device] += note.bytes;
        log_debug("asking client %llu for %llu parked bytes on device %u",
                  (unsigned long long)s->id, (unsigned long long)note.bytes, device);
        session_send(s, GMD__MSG_TYPE__MSG_RECLAIM, 0, &note.base, NULL, 0);
        return note.bytes;
}

void parking_reclaim_user(gmd_server *server, uid_t uid)
{
        gmd_list *pos;

        list_for_each(pos, &server->sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid || !s->parked_bytes)
                        continue;
                for (unsigned d = 0; d < server->n_devices; d++)
                        reclaim_from(s, d, 0);
        }
}

static int by_priority(const void *a, const void *b)
{
        const gmd_session *x = *(gmd_session *const *)a, *y = *(gmd_session *const *)b;

        return (x->priority > y->priority) - (x->priority < y->priority);
}

void parking_reclaim(gmd_server *server, unsigned device, uint64_t bytes)
{
        gmd_session **order;
        unsigned n = 0;
        gmd_list *pos;

        order = calloc(server->n_sessions ? server->n_sessions : 1, sizeof(*order));
        if (!order)
                return;
        list_for_each(pos, &server->sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->parked_on[device] > s->reclaim_asked[device] &&
                    n < server->n_sessions)
                        order[n++] = s;
        }
        qsort(order, n, sizeof(*order), by_priority);
        for (unsigned i = 0; i < n && bytes > 0; i++) {
                uint64_t asked = reclaim_from(order[i], device, bytes);

                bytes = bytes > asked ? bytes - asked : 0;
        }
        free(order);
}
