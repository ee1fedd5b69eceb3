/*
 * backing — see backing.h. The arenas count at their full size from the
 * start, built or not: they are pinned in the background right after start
 * and stay pinned, so what they will hold is not free for anything else.
 * The same holds for a growth: its bytes count against host_limit from
 * the moment it is asked for.
 *
 * Why growth runs ahead of demand: pinning runs at 0.7-4.7 GB/s (H100,
 * the worker's log), a swap-out copies at ~55. An arena that grew only
 * when a swap-out found it full made that swap-out pin its own copy on
 * the request path, and the next growth waited for the next miss: a
 * co-tenancy round that needed 20 GiB more grew it 1 GiB at a time while
 * the jobs waited. Growing at a low-water mark, by doubling steps,
 * keeps the worker pinning while the room left is still served.
 */
#include "backing.h"

#include <errno.h>
#include <stdio.h>

#include "backend.h"
#include "keptfd.h"
#include "log.h"
#include "server.h"
#include "size.h"
#include "waitq.h"

static uint64_t arenas_size(const gmd_server *server)
{
        const gmd_backend_ops *ops = server->backend->ops;
        uint64_t bytes = 0;

        if (!ops->arena_info)
                return 0;
        for (unsigned d = 0; d < server->devices.n; d++) {
                gmd_arena_info a = { 0 };

                ops->arena_info(server->backend, d, &a);
                bytes += a.target;
        }
        return bytes;
}

uint64_t backing_pinned(const gmd_server *server)
{
        return arenas_size(server) + server->host.pinned_own;
}

int backing_create(gmd_server *server, gmd_tier tier, unsigned device,
                   uint64_t size, bool filled, gmd_mem **ret_mem)
{
        const gmd_backend_ops *ops = server->backend->ops;
        int r;

        if (tier == GMD_TIER_HOST &&
            backing_pinned(server) + size > server->host.pool.capacity)
                return -ENOSPC;
        if (filled && ops->mem_create_filled)
                r = ops->mem_create_filled(server->backend, tier, device, size,
                                           ret_mem);
        else
                r = ops->mem_create(server->backend, tier, device, size, ret_mem);
        if (r == 0 && tier == GMD_TIER_HOST)
                server->host.pinned_own += size;
        if (r == 0)
                (*ret_mem)->peer = false;   /* the peer tier says so itself */
        return r;
}

void backing_vram_taken(gmd_server *server, unsigned device)
{
        const gmd_pool *pool = server_vram_pool(server, device);

        /* A device whose VRAM fills up is about to swap: its arena grows
         * toward its size for the pool now, not when swap-outs come. */
        if (pool && pool_free(pool) < pool->capacity / 4)
                (void)backing_arena_grow(server, device, 0, false);
}

void backing_peer_count(gmd_server *server, gmd_mem *mem, unsigned home,
                        int sign)
{
        gmd_peers *peers = &server->peers;
        unsigned holder = mem->device;

        if (holder >= GMD_MAX_DEVICES || home >= GMD_MAX_DEVICES)
                return;
        mem->peer = sign > 0;
        mem->peer_home = home;
        if (sign > 0) {
                peers->held[holder][home] += mem->size;
                peers->held_on[holder] += mem->size;
        } else {
                peers->held[holder][home] -= mem->size;
                peers->held_on[holder] -= mem->size;
        }
}

void backing_destroy(gmd_server *server, gmd_mem *mem)
{
        if (!mem)
                return;
        if (mem->tier == GMD_TIER_HOST && !mem->daemon_only)
                server->host.pinned_own -= mem->size;
        if (mem->peer)
                backing_peer_count(server, mem, mem->peer_home, -1);
        keptfd_forget(server, mem);     /* where its fd went (keptfd.h) */
        server->backend->ops->mem_destroy(server->backend, mem);
}

void backing_release(gmd_server *server, gmd_mem *mem)
{
        gmd_pool *pool = server_pool(server, mem->tier, mem->device);
        uint64_t size = mem->size;

        backing_destroy(server, mem);
        pool_give(pool, size);
}

/* The arena's figures, with what a growth under way will add counted as
 * free: it is on its way. */
static uint64_t arena_coming(const gmd_arena_info *a)
{
        return a->free + (a->target > a->built ? a->target - a->built : 0);
}

/* The bytes `device`'s arena should grow by now, and why, or 0:
 *   - GROW_FULL: a swap-out of `size` found it full: at least `size`;
 *   - GROW_LOW: what is free or on its way fell below the low-water mark,
 *     the larger of a quarter of its size and the swap-out just served,
 *     plus the VRAM bytes waited for on the device (waitq_demand);
 *   - GROW_POOL: the device's VRAM pool is three quarters used and the
 *     arena is smaller than [pools] host_stock_vram of it, or than what
 *     the device's buffers that may go out to it hold (arena_bound, when
 *     host_stock_vram is not 0): jobs that do not fit together allocate
 *     their working sets before their first swap-out, and each byte of
 *     them may end up out, or kept out as a clean copy (hostcopy.h), at
 *     once. Pinned then, the arena is built while they start; sized from
 *     the pool alone, it grew by the low-water rule while they swapped
 *     (co-tenancy rounds right after start pinned 8-16 GiB more while
 *     swapping in at 28-30 GB/s, against 43-47 once built: H200,
 *     BENCHMARKS.md).
 * A growth for want of room doubles the arena (at most
 * BACKING_ARENA_STEP_MAX a time), so one that keeps being needed takes a
 * few steps, not one per piece; the backend rounds it up to its pieces. */
static uint64_t arena_wanted(gmd_server *server, unsigned device,
                             const gmd_arena_info *a, uint64_t size,
                             bool full, backing_growth *ret_why)
{
        const gmd_pool *pool = server_vram_pool(server, device);
        uint64_t coming = arena_coming(a), low, step, want = 0;
        uint64_t sized = size_spec_resolve(&server->config.host_stock_vram,
                                           pool->capacity);

        if (sized && device < GMD_MAX_DEVICES &&
            server->devices.arena_bound[device] > sized)
                sized = server->devices.arena_bound[device];

        /* What waits for VRAM on the device will be made room for by
         * swap-outs into the arena: it is wanted too. */
        low = (a->target / 4 > size ? a->target / 4 : size) +
              waitq_demand(&server->waitq, device);
        step = a->target < BACKING_ARENA_STEP_MAX ? a->target
                                                   : BACKING_ARENA_STEP_MAX;
        if (full) {
                *ret_why = BACKING_GROWTH_FULL;
                want = step > size ? step : size;
        } else if (coming < low) {
                *ret_why = BACKING_GROWTH_LOW;
                want = step > low - coming ? step : low - coming;
        }
        if (sized > a->target + want &&
            pool_free(pool) < pool->capacity / 4) {
                if (!want)
                        *ret_why = BACKING_GROWTH_POOL;
                want = sized - a->target;
        }
        return want;
}

static const char *const growth_why[] = {
        [BACKING_GROWTH_FULL] = "swap-outs found it full",
        [BACKING_GROWTH_LOW] = "ahead of demand: its free part fell below "
                               "a quarter",
        [BACKING_GROWTH_POOL] = "ahead of demand: the device's VRAM pool is "
                                "filling up ([pools] host_stock_vram, or what "
                                "its buffers could put out)",
};

bool backing_arena_grow(gmd_server *server, unsigned device, uint64_t size,
                        bool full)
{
        const gmd_backend_ops *ops = server->backend->ops;
        uint64_t pinned = backing_pinned(server), cap = server->host.pool.capacity;
        uint64_t keep = full ? size : 0, most, want;
        backing_growth why = BACKING_GROWTH_FULL;
        gmd_arena_info a = { 0 };
        char grown[32], to[32], free_[32];
        int64_t added;

        if (!server->config.host_stock_grow || !ops->arena_grow ||
            !ops->arena_info || pinned + keep >= cap)
                return false;
        ops->arena_info(server->backend, device, &a);
        /* No arena ([pools] host_stock = 0) is the operator's choice. */
        if (!a.target || a.target >= a.limit)
                return false;
        want = arena_wanted(server, device, &a, size, full, &why);
        if (!want)
                return false;
        /* A swap-out that found it full still pins its own copy: keep its
         * room. Growth for the VRAM pool's sake leaves a quarter of
         * host_limit for what is pinned on its own (SPILLABLE buffers,
         * copies pinned on the spot); growth for want of room may use it
         * all, as the swap-outs that need it would pin it anyway. */
        most = cap - pinned - keep;
        if (why == BACKING_GROWTH_POOL)
                most = pinned + cap / 4 < cap ? cap - cap / 4 - pinned : 0;
        if (most > a.limit - a.target)
                most = a.limit - a.target;
        if (want > most)
                want = most;
        if (!want)
                return false;
        added = ops->arena_grow(server->backend, device, want, most);
        if (added <= 0)
                return false;
        ops->arena_info(server->backend, device, &a);
        log_info("device %u: the host arena grows by %s to %s, pinned in the "
                 "background, %s (%s free or on its way) ([pools] "
                 "host_stock_grow)", device,
                 size_format((uint64_t)added, grown, sizeof(grown)),
                 size_format(a.target, to, sizeof(to)), growth_why[why],
                 size_format(arena_coming(&a), free_, sizeof(free_)));
        return true;
}

void backing_no_host_room(gmd_server *server, char *buf, size_t len)
{
        char pinned[32], limit[32], used[32];

        snprintf(buf, len, "; host memory has no room either (%s pinned of "
                 "[pools] host_limit %s, the host arena included; %s of it "
                 "holds buffers)",
                 size_format(backing_pinned(server), pinned, sizeof(pinned)),
                 size_format(server->host.pool.capacity, limit, sizeof(limit)),
                 size_format(server->host.pool.used, used, sizeof(used)));
}
