/*
 * alloc — the allocation request: validation, quotas, creating the buffer
 * (its AllocReply is request.c's), and what happens when the pool has no
 * room (reclaim idle mappings from clients' caches, then wait with the
 * client's deadline).
 */
#ifndef GMD_ALLOC_H
#define GMD_ALLOC_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpumem.h"
#include "result.h"

typedef struct gmd_session gmd_session;
typedef struct gmd_server gmd_server;
typedef struct gmd_waiter gmd_waiter;

/* An allocation asked for (MSG_ALLOC's fields, decoded by request.c). */
typedef struct gmd_alloc_ask {
        uint64_t size;
        uint32_t device;
        uint32_t flags;             /* GMD_ALLOC_* */
        int64_t timeout_ms;         /* 0: fail at once; < 0: forever */
} gmd_alloc_ask;

/* Handle MSG_ALLOC: OUTCOME_ALLOCATED (`ret` holds the buffer, for
 * request.c's AllocReply), OUTCOME_ERROR (`ret` says why) or
 * OUTCOME_LATER (it waits for room). */
gmd_outcome alloc_handle(gmd_session *session, uint32_t request_id,
                         const gmd_alloc_ask *request, gmd_result *ret);

/*
 * Create the buffer of an allocation on `tier`. Used for allocations that
 * fit at once, for waiters served later and for SPILLABLE ones placed on
 * the host tier. Returns 0 (`ret` holds the buffer and `since_us`, now_us()
 * when the request came, for the reply and the latency histogram:
 * OUTCOME_ALLOCATED), -ENOSPC (the pool has no room), -EINPROGRESS (the
 * user's quota is full of parked buffers, asked back now) or another error
 * (`ret` says why: -EDQUOT over quota — also when parked buffers asked
 * back were not returned within [limits] reclaim_timeout_ms —, else the
 * backend failed).
 */
int alloc_now_on(gmd_session *session, uint64_t size, unsigned device,
                 unsigned flags, gmd_tier tier, uint64_t since_us,
                 gmd_result *ret);

/* The deadline of `waiter`, an allocation of `session` still in the
 * wait queue, passed: a SPILLABLE one is placed on the host tier if it
 * has room (OUTCOME_ALLOCATED); any other gets a timeout that says what
 * the pool holds and what held it back (OUTCOME_ERROR). */
gmd_outcome alloc_expired(gmd_session *session, const gmd_waiter *waiter,
                          gmd_result *ret);

/* alloc_now_on's -ENOSPC and -EINPROGRESS (and move_in_begin's -EAGAIN):
 * nothing was sent, the request waits (or falls back) rather than fails. */
static inline bool alloc_must_wait(int r)
{
        return r == -ENOSPC || r == -EAGAIN || r == -EINPROGRESS;
}

/*
 * GMD_ALLOC_NO_SELF_WAIT (gpumem.h): an allocation of `size` on `device`
 * that found no room (at request time, or when the scheduling pass serves
 * its waiter) and that only its own process could make room for — it does
 * not fit in free VRAM, kept, parked and released VRAM (evictable had the
 * host pool room) do not cover it, no move of the device is under way,
 * and every byte in use in the pool is buffers of sessions with its pid —
 * gets ERR_NO_MEMORY saying so (OUTCOME_ERROR); a SPILLABLE one is placed
 * on the host tier instead (OUTCOME_ALLOCATED) if that has room. Else, and
 * always without the flag: OUTCOME_LATER, it waits. Costs one step per
 * session and the short lists (idle, moving), never one per buffer.
 */
gmd_outcome alloc_self_bound(gmd_session *session, uint64_t size,
                             unsigned device, unsigned flags,
                             uint64_t since_us, gmd_result *ret);

#endif
