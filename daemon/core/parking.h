/*
 * parking — the daemon's side of libgpumem's cache of idle mappings
 * (ARCHITECTURE.md decision 6). A client parks a buffer its application freed
 * instead of freeing it, and unparks it for a later allocation of the same
 * shape, with no round trip; the daemon keeps counting it as the client's.
 * When an allocation finds no room, the daemon asks the clients holding
 * parked buffers on that device to return them, lowest priority first.
 *
 * A client's side is a gmd_parking_owner in its session; the messages
 * (MSG_PARK, MSG_UNPARK, MSG_RETURN) are handled in request.c, and asking
 * clients for their parked buffers is the evictor's (evict.h).
 */
#ifndef GMD_PARKING_H
#define GMD_PARKING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "server_limits.h"

/* One client's parked buffers. */
typedef struct gmd_parking_owner {
        uint64_t bytes;                     /* parked, all devices */
        unsigned n;                         /* buffers parked */
        uint64_t on[GMD_MAX_DEVICES];       /* parked bytes per device */
        uint64_t asked[GMD_MAX_DEVICES];    /* asked back, not returned */
        uint64_t asked_us[GMD_MAX_DEVICES]; /* when that ask began, or the
                                             * last return since */
        bool ignored[GMD_MAX_DEVICES];      /* overdue, said so in the log */
} gmd_parking_owner;

/* A buffer of `size` bytes on `device` was parked (or taken back out). */
void parking_mark(gmd_parking_owner *owner, unsigned device, uint64_t size,
                  bool parked);

/* Count `bytes` more of `device` as asked back (0: all not asked yet),
 * never more than is parked and not asked; returns what to ask for. */
uint64_t parking_ask(gmd_parking_owner *owner, unsigned device, uint64_t bytes);

/* A parked buffer of `size` bytes on `device` came back (MSG_RETURN). */
void parking_returned(gmd_parking_owner *owner, unsigned device, uint64_t size);

/* Was this client asked for parked bytes on `device` at least `timeout_us`
 * before `now_us` and returned none since? Its parked bytes there are not
 * counted on any more (a client that does not read its socket, or a
 * hostile one, must not keep a waiter waiting). */
bool parking_overdue(const gmd_parking_owner *owner, unsigned device,
                     uint64_t now_us, uint64_t timeout_us);

#endif
