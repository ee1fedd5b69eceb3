/*
 * evict — making room in VRAM for what waits for it (ARCHITECTURE.md decision 5).
 * First VRAM kept for swap-ins is released (reuse.h), then the clients'
 * caches of idle mappings are asked for their parked buffers (they cost
 * nothing to give back); then released SWAPPABLE and
 * SPILLABLE buffers of any client are moved to host memory, lowest client
 * priority first, then least recently released, and what a prefetch
 * brought in last of all (evict_choose). Bytes already on their way
 * out count as room, so repeated calls do not evict twice for one need.
 */
#ifndef GMD_EVICT_H
#define GMD_EVICT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "list.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_session gmd_session;
typedef struct gmd_dbuffer gmd_dbuffer;

/* For each device with waiters: start what it takes to make their room
 * (the scheduling pass, after PENDING_EVICT). Returns whether it released
 * kept VRAM, so that the pass serves the wait queue again. */
bool evict_balance(gmd_server *server);

/* Bytes parked on `device` by all `sessions` (gmd_session links), but for
 * those of clients that were asked for some and returned none within
 * `timeout_ms` ([limits] reclaim_timeout_ms): those are not counted on. */
uint64_t evict_reclaimable(const gmd_list *sessions, unsigned device,
                           uint64_t timeout_ms);

/* Did clients of `uid` leave an ask for their parked buffers unanswered
 * past `timeout_ms`? *ret_bytes: how many bytes they were asked for. */
bool evict_user_reclaim_overdue(const gmd_list *sessions, unsigned n_devices,
                                uid_t uid, uint64_t timeout_ms,
                                uint64_t *ret_bytes);

/* Ask every session of `uid` for all it has parked (its quota is full). */
void evict_reclaim_user(gmd_list *sessions, unsigned n_devices, uid_t uid);

/* Ask one session for all it has parked (it holds as many buffers as
 * [limits] max_buffers_per_client allows, parked ones included). */
void evict_reclaim_session(gmd_session *session, unsigned n_devices);

/* Ask sessions for at least `bytes` of parked memory on `device`, lowest
 * priority first, not counting what was asked already and is on its way
 * back. */
void evict_reclaim(gmd_list *sessions, unsigned n_sessions, unsigned device,
                   uint64_t bytes);

/*
 * What eviction moves out of `device` for `need` bytes, `urgent` of them
 * for acquires and allocations (the rest for prefetches), in the order to
 * start: released buffers of the lowest priority first; of one priority,
 * the least recently released first, and last the buffers a prefetch
 * brought in (or asked to keep) that nobody acquired since, latest
 * prefetch first; those are taken only for the urgent bytes, never for a
 * prefetch. Buffers lent by a waiting process (loan.h) come last, for
 * another process's acquire or allocation only. With [limits]
 * priority_grace_ms, a buffer of a client whose priority is above every
 * waiter's on the device is passed over until it has been released that
 * long; *ret_wait_ms is then how long until the first of those may go
 * (else UINT64_MAX). Returns how many, in *ret_victims (the caller frees
 * it; NULL when none).
 */
unsigned evict_choose(gmd_server *server, unsigned device, uint64_t need,
                      uint64_t urgent, uint64_t now,
                      gmd_dbuffer ***ret_victims, uint64_t *ret_wait_ms);

/* Bytes of VRAM on `device` that eviction could free now. */
uint64_t evict_evictable(gmd_server *server, unsigned device);

/* Can room for `size` bytes be made on `device`: do free, leaving (moves
 * out under way), kept, parked (asked back in time) and evictable VRAM
 * together cover it? */
bool evict_room_reachable(gmd_server *server, unsigned device, uint64_t size);

/* Bytes of VRAM on `device` that eviction could free if the host pool had
 * room for them all (evict_evictable before it is capped by the host
 * pool's free bytes, which another client may give back). */
uint64_t evict_idle_bytes(gmd_server *server, unsigned device);

/* Of those, the bytes lent by waiting processes (loan.h) that are no room
 * for a request of process `pid` at `priority`: its own process's (they
 * would have to come back before its answer), and those of processes
 * above `priority` (what a process lends goes out only for requests of
 * its priority or above). Counted as room, a lower priority's request
 * that only such loans could serve was taken for one room can be made
 * for, and held its device (waitq.h) for as long as it waited. */
uint64_t evict_lent_bytes(gmd_server *server, unsigned device, pid_t pid,
                          int priority);

#endif
