/*
 * backing — see backing.h. The arenas count at their full size from the
 * start, built or not: they are pinned in the background right after start
 * and stay pinned, so what they will hold is not free for anything else.
 */
#include "backing.h"

#include <errno.h>
#include <stdio.h>

#include "backend.h"
#include "log.h"
#include "peer.h"
#include "server.h"
#include "size.h"

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

void backing_destroy(gmd_server *server, gmd_mem *mem)
{
        if (!mem)
                return;
        if (mem->tier == GMD_TIER_HOST && !mem->daemon_only)
                server->host.pinned_own -= mem->size;
        if (mem->peer)
                peer_count(server, mem, mem->peer_home, -1);
        server->backend->ops->mem_destroy(server->backend, mem);
}

void backing_release(gmd_server *server, gmd_mem *mem)
{
        gmd_pool *pool = server_pool(server, mem->tier, mem->device);
        uint64_t size = mem->size;

        backing_destroy(server, mem);
        pool_give(pool, size);
}

bool backing_arena_grow(gmd_server *server, unsigned device, uint64_t size)
{
        const gmd_backend_ops *ops = server->backend->ops;
        uint64_t pinned = backing_pinned(server), cap = server->host.pool.capacity;
        gmd_arena_info a = { 0 };
        char grown[32], to[32];
        int64_t added;

        if (!server->config.host_stock_grow || !ops->arena_grow ||
            pinned + size >= cap)
                return false;
        /* This swap-out still pins its own copy: keep its room. The
         * backend refuses where there is no arena or a growth is under
         * way. */
        added = ops->arena_grow(server->backend, device, size,
                                cap - pinned - size);
        if (added <= 0)
                return false;
        if (ops->arena_info)
                ops->arena_info(server->backend, device, &a);
        log_info("device %u: the host arena grows by %s to %s, pinned in the "
                 "background: swap-outs found it full ([pools] host_stock_grow)",
                 device, size_format((uint64_t)added, grown, sizeof(grown)),
                 size_format(a.target, to, sizeof(to)));
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
