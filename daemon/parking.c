/*
 * parking — see parking.h. A client's parked bytes are counted per device
 * with what was asked back and not returned yet, so a reclaim never asks
 * twice for the same bytes.
 */
#include "parking.h"

#include <stdbool.h>
#include <stdlib.h>

#include "gpumem.pb-c.h"
#include "log.h"
#include "session.h"

void parking_mark(gmd_parking_owner *o, unsigned device, uint64_t size,
                  bool parked)
{
        if (parked) {
                o->bytes += size;
                o->on[device] += size;
                o->n++;
                return;
        }
        o->bytes -= size;
        o->on[device] -= size;
        o->n--;
        /* What was asked back cannot be more than what is parked. */
        if (o->asked[device] > o->on[device])
                o->asked[device] = o->on[device];
}

uint64_t parking_ask(gmd_parking_owner *o, unsigned device, uint64_t bytes)
{
        uint64_t open = o->on[device] - o->asked[device];
        uint64_t ask = bytes && bytes < open ? bytes : open;

        o->asked[device] += ask;
        return ask;
}

void parking_returned(gmd_parking_owner *o, unsigned device, uint64_t size)
{
        o->asked[device] = o->asked[device] > size ? o->asked[device] - size : 0;
}

uint64_t parking_reclaimable(const gmd_list *sessions, unsigned device)
{
        uint64_t bytes = 0;
        const gmd_list *pos;

        list_for_each(pos, sessions)
                bytes += container_of(pos, gmd_session, link)->parking.on[device];
        return bytes;
}

/* Ask one session for up to `bytes` of what it has parked on `device` and
 * was not asked for yet. Returns what was asked. */
static uint64_t reclaim_from(gmd_session *s, unsigned device, uint64_t bytes)
{
        Gmd__ReclaimNotify note = GMD__RECLAIM_NOTIFY__INIT;

        if (s->closing || s->parking.on[device] == s->parking.asked[device])
                return 0;
        note.device = device;
        note.bytes = parking_ask(&s->parking, device, bytes);
        log_debug("asking client %llu for %llu parked bytes on device %u",
                  (unsigned long long)s->id, (unsigned long long)note.bytes, device);
        session_send(s, GMD__MSG_TYPE__MSG_RECLAIM, 0, &note.base, NULL, 0);
        return note.bytes;
}

void parking_reclaim_user(gmd_list *sessions, unsigned n_devices, uid_t uid)
{
        gmd_list *pos;

        list_for_each(pos, sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->uid != uid || !s->parking.bytes)
                        continue;
                for (unsigned d = 0; d < n_devices; d++)
                        reclaim_from(s, d, 0);
        }
}

static int by_priority(const void *a, const void *b)
{
        const gmd_session *x = *(gmd_session *const *)a, *y = *(gmd_session *const *)b;

        return (x->priority > y->priority) - (x->priority < y->priority);
}

void parking_reclaim(gmd_list *sessions, unsigned n_sessions, unsigned device,
                     uint64_t bytes)
{
        gmd_session **order;
        unsigned n = 0;
        gmd_list *pos;

        order = calloc(n_sessions ? n_sessions : 1, sizeof(*order));
        if (!order)
                return;
        list_for_each(pos, sessions) {
                gmd_session *s = container_of(pos, gmd_session, link);

                if (s->parking.on[device] > s->parking.asked[device] &&
                    n < n_sessions)
                        order[n++] = s;
        }
        qsort(order, n, sizeof(*order), by_priority);
        for (unsigned i = 0; i < n && bytes > 0; i++) {
                uint64_t asked = reclaim_from(order[i], device, bytes);

                bytes = bytes > asked ? bytes - asked : 0;
        }
        free(order);
}
