/*
 * host_tier — the daemon's host memory as one record: the pool every host
 * backing draws from, the pinned bytes held outside the backend's arenas
 * (backing.c), and the host copies kept in that pool after swap-ins
 * (hostcopy.h). The server holds one (server->host).
 */
#ifndef GMD_HOST_TIER_H
#define GMD_HOST_TIER_H

#include <stdint.h>
#include <string.h>

#include "list.h"
#include "pool.h"

typedef struct gmd_host_tier {
        gmd_pool pool;
        uint64_t pinned_own;          /* host backings outside the arenas
                                       * (backing.h) */
        gmd_list copies;              /* buffers keeping a host copy,
                                       * oldest first (hostcopy.h) */
        uint64_t copy_bytes;          /* and the pool bytes they hold */
} gmd_host_tier;

/* A pool of `capacity` bytes handed out in `granularity`, nothing held. */
static inline void host_tier_init(gmd_host_tier *host, uint64_t capacity,
                                  uint64_t granularity)
{
        memset(host, 0, sizeof(*host));
        pool_init(&host->pool, 0, GMD_TIER_HOST, capacity, granularity);
        list_init(&host->copies);
}

#endif
