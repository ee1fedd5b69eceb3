/*
 * pool — see pool.h. pool_take never lets `used` pass the capacity; only a
 * reload that shrinks the pool can leave it above, until clients free. A
 * give of more than was taken is a daemon bug and is clamped with a log
 * line rather than wrapping around.
 */
#include "pool.h"

#include <errno.h>
#include <stdio.h>

#include "log.h"

void pool_init(gmd_pool *pool, unsigned device, gmd_tier tier,
               uint64_t capacity, uint64_t granularity)
{
        pool->device = device;
        pool->tier = tier;
        pool->granularity = granularity;
        /* Whole granules only: a partial one could never be handed out. */
        pool->capacity = capacity - capacity % granularity;
        pool->used = 0;
        pool->outside = 0;
        pool->kept_fds = 0;
}

void pool_resize(gmd_pool *pool, uint64_t capacity)
{
        pool->capacity = capacity - capacity % pool->granularity;
}

uint64_t pool_round(const gmd_pool *pool, uint64_t size)
{
        uint64_t g = pool->granularity;

        if (size > UINT64_MAX - (g - 1))
                return 0;
        return (size + g - 1) / g * g;
}

int pool_take(gmd_pool *pool, uint64_t bytes)
{
        if (bytes > pool_free(pool))
                return -ENOSPC;
        pool->used += bytes;
        return 0;
}

void pool_charge(gmd_pool *pool, uint64_t bytes)
{
        pool->used += bytes;
}

void pool_give(gmd_pool *pool, uint64_t bytes)
{
        char name[32];

        if (bytes > pool->used) {
                log_error("%s pool: giving back %llu bytes but only %llu in use",
                          pool_describe(pool, name, sizeof(name)),
                          (unsigned long long)bytes,
                          (unsigned long long)pool->used);
                bytes = pool->used;
        }
        pool->used -= bytes;
}

const char *pool_describe(const gmd_pool *pool, char *buf, unsigned len)
{
        if (pool->tier == GMD_TIER_HOST)
                snprintf(buf, len, "host");
        else
                snprintf(buf, len, "device %u VRAM", pool->device);
        return buf;
}
