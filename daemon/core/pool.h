/*
 * pool — byte accounting of one memory pool: the VRAM of one device, or the
 * pinned host pool. The pool does not hold memory itself (the backend does);
 * it says how much the daemon may hand out and how much it has. Waiting
 * requests are served in the order they came, per pool (see waitq.h).
 */
#ifndef GMD_POOL_H
#define GMD_POOL_H

#include <stdint.h>

#include "gpumem.h"

typedef struct gmd_pool {
        unsigned device;
        gmd_tier tier;
        uint64_t capacity;
        uint64_t used;
        /* VRAM clients' processes hold outside gpu-memd, charged to the
         * pool so it does not offer that room (core/outside.h): set at
         * each refresh, not taken or given. */
        uint64_t outside;
        /* Memory a process still holds through a kept fd of a freed
         * buffer, charged the same way (core/keptfd.h); NVML counts it to
         * no process, so it is not in `outside`. */
        uint64_t kept_fds;
        uint64_t granularity;
} gmd_pool;

void pool_init(gmd_pool *pool, unsigned device, gmd_tier tier,
               uint64_t capacity, uint64_t granularity);

/* Change the capacity (a reload); what is in use stays in use, even if it
 * is now more than the capacity. */
void pool_resize(gmd_pool *pool, uint64_t capacity);

/* Round `size` up to the pool's granularity; 0 on overflow. */
uint64_t pool_round(const gmd_pool *pool, uint64_t size);

/* Take `bytes` from the pool: 0, or -ENOSPC when it has less free. */
int pool_take(gmd_pool *pool, uint64_t bytes);

/* Give `bytes` back. */
void pool_give(gmd_pool *pool, uint64_t bytes);

/* Count `bytes` that exist already (a restored buffer) even beyond the
 * capacity: what is held is held. */
void pool_charge(gmd_pool *pool, uint64_t bytes);

/* What it may still hand out: the capacity less what buffers hold and
 * what is charged for memory held outside (kept fds included). */
static inline uint64_t pool_free(const gmd_pool *pool)
{
        uint64_t held = pool->used + pool->outside + pool->kept_fds;

        return held < pool->capacity ? pool->capacity - held : 0;
}

/* "device 0 VRAM" / "host" — for messages. */
const char *pool_describe(const gmd_pool *pool, char *buf, unsigned len);

#endif
