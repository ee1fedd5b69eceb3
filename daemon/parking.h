/*
 * parking — the daemon's side of libgpumem's cache of idle mappings
 * (ARCHITECTURE.md decision 6). A client parks a buffer its application freed
 * instead of freeing it, and unparks it for a later allocation of the same
 * shape, with no round trip; the daemon keeps counting it as the client's.
 * When an allocation finds no room, the daemon asks the clients holding
 * parked buffers on that device to return them, lowest priority first.
 */
#ifndef GMD_PARKING_H
#define GMD_PARKING_H

#include <stdint.h>
#include <sys/types.h>

#include "gpumem.pb-c.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;

/* MSG_PARK, MSG_UNPARK and MSG_RETURN (no replies). */
void parking_handle_park(gmd_session *session, uint32_t request_id,
                         const Gmd__BufferList *list);
void parking_handle_unpark(gmd_session *session, uint32_t request_id,
                           const Gmd__BufferList *list);
void parking_handle_return(gmd_session *session, uint32_t request_id,
                           const Gmd__BufferList *list);

/* Bytes parked on `device` by all clients. */
uint64_t parking_reclaimable(gmd_server *server, unsigned device);

/* Ask every client of `uid` for all it has parked (its quota is full). */
void parking_reclaim_user(gmd_server *server, uid_t uid);

/* Ask clients for at least `bytes` of parked memory on `device`, lowest
 * priority first, not counting what was asked already and is on its way
 * back. */
void parking_reclaim(gmd_server *server, unsigned device, uint64_t bytes);

#endif
