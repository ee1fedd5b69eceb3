/*
 * destination — where a move's bytes go, picked before its copy starts and
 * given back when no move took it: a swap-out's host copy (the copy kept
 * since its swap-in, else one carved from the host arena, else pinned on
 * the spot), and whether its owner keeps mapping the VRAM it leaves; a
 * swap-in's VRAM back into the kept memory it came from. move.c decides
 * when a buffer moves; this file only where to.
 */
#include "destination.h"

#include <errno.h>

#include "backing.h"
#include "buffer.h"
#include "hostcopy.h"
#include "log.h"
#include "peer.h"
#include "placement.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"
#include "waitq.h"

/* A swap-out's host copy. One only the daemon holds (the owner of a
 * SWAPPABLE buffer unmaps it; a SPILLABLE one maps its host copy) comes
 * from the backend's host arena, pinned ahead of time, which then grows
 * in the background when what is left of it runs low, before it is full
 * ([pools] host_stock_grow, backing_arena_grow). When the arena has no
 * room all the same, the copy gets an allocation of its own, which pins
 * on the request path, and the arena grows for the next ones; where it
 * cannot, that is said once a minute, with what to change. */
static int host_copy_create(gmd_server *server, const gmd_dbuffer *b,
                            gmd_mem **ret_mem)
{
        const gmd_backend_ops *ops = server->backend->ops;
        gmd_arena_info arena = { 0 };
        uint64_t now, *warned;
        int r;

        if (!ops->mem_create_private || !placement_host_copy_private(b))
                return backing_create(server, GMD_TIER_HOST, b->device,
                                      b->size, true, ret_mem);
        r = ops->mem_create_private(server->backend, b->device, b->size, ret_mem);
        /* Kept host copies are a cache: the arena room they hold first. */
        if (r == -ENOSPC && hostcopy_reclaim(server, b->size))
                r = ops->mem_create_private(server->backend, b->device, b->size,
                                            ret_mem);
        if (r == 0)
                (void)backing_arena_grow(server, b->device, b->size, false);
        if (r != -ENOSPC)
                return r;
        if (backing_arena_grow(server, b->device, b->size, true))
                return backing_create(server, GMD_TIER_HOST, b->device, b->size,
                                      true, ret_mem);
        now = now_ms();
        warned = &server->copyqs.q[b->device].arena_warned_ms;
        if (ops->arena_info)
                ops->arena_info(server->backend, b->device, &arena);
        /* No arena at all ([pools] host_stock = 0) is the operator's
         * choice: nothing to warn about. */
        if (ops->arena_info && arena.target &&
            (!*warned || now - *warned >= 60000)) {
                *warned = now;
                log_warning("device %u: the host arena has no room for a %llu MiB "
                            "swap-out (%llu of %llu MiB free%s): pinning its host "
                            "copy on the spot, which is slow; a larger [pools] "
                            "host_stock avoids it",
                            b->device, (unsigned long long)(b->size >> 20),
                            (unsigned long long)(arena.free >> 20),
                            (unsigned long long)(arena.target >> 20),
                            arena.built < arena.target ? ", still being built" : "");
        }
        return backing_create(server, GMD_TIER_HOST, b->device, b->size, true,
                              ret_mem);
}

int destination_out(gmd_server *server, gmd_dbuffer *b, gmd_mem **ret_dst,
                    bool *ret_clean)
{
        *ret_dst = hostcopy_take(server, b);
        *ret_clean = *ret_dst != NULL;
        if (*ret_dst)
                return 0;
        /* A peer's free VRAM, where one is worth it (peer.h). */
        if (peer_destination(server, b, ret_dst) == 0)
                return 0;
        return destination_host(server, b, ret_dst);
}

int destination_host(gmd_server *server, const gmd_dbuffer *b,
                     gmd_mem **ret_dst)
{
        int r;

        r = hostcopy_pool_take(server, b->size);
        if (r < 0)
                return r;
        r = host_copy_create(server, b, ret_dst);
        if (r < 0)
                pool_give(&server->host.pool, b->size);
        return r;
}

/*
 * The owner keeps mapping the VRAM a buffer leaves (reuse.h) only where
 * that VRAM is not wanted soon: memory kept mapped can only be given to
 * others after a round trip to its owner (an unmap and its ack), where
 * plain kept memory is released at once. So not for an eviction (it makes
 * room for others), nor while requests wait on the device or its pool has
 * less free than the buffer (destination_room_wanted): a training step
 * under a budget (bench train2x) allocates into the room its pageouts
 * leave right away.
 * Where that changes while the copy runs, the owner is asked to unmap as
 * soon as the move is over (move_finish).
 */
bool destination_room_wanted(gmd_server *server, const gmd_dbuffer *b)
{
        return waitq_oldest(&server->waitq, b->device) ||
               pool_free(server_vram_pool(server, b->device)) < b->size;
}

bool destination_keeps_mapping(gmd_server *server, const gmd_dbuffer *b,
                               move_class cls)
{
        bool owner_keeps = b->owner->keeps_mappings &&
                           reuse_keeps(&server->reuse, &b->owner->reuse);

        return cls != MOVE_EVICT && placement_keep_mapping(b, owner_keeps) &&
               !destination_room_wanted(server, b);
}

void destination_out_undo(gmd_server *server, gmd_dbuffer *b, gmd_mem *dst,
                          bool clean)
{
        if (clean)
                hostcopy_put_back(server, b, dst);
        else
                backing_release(server, dst);
}

void destination_in_undo(gmd_server *server, gmd_dbuffer *b, gmd_mem *dst,
                         bool mapped, bool kept)
{
        if (mapped)
                reuse_keep_mapped(&server->reuse, &b->owner->reuse, dst, b,
                                  false);
        else if (kept)
                reuse_keep(&server->reuse, &b->owner->reuse, dst);
        else
                backing_release(server, dst);
}
