/*
 * buffer — see buffer.h. The order in buffer_new matters: pool bytes are
 * taken first (cheap, may fail with -ENOSPC and nothing to undo), then the
 * backend creates the memory, then the record is linked where the owner,
 * status listings and id lookups find it.
 */
#include "buffer.h"

#include <errno.h>
#include <stdlib.h>

#include "backing.h"
#include "hostcopy.h"
#include "log.h"
#include "parking.h"
#include "peer.h"
#include "pending.h"
#include "placement.h"
#include "reuse.h"
#include "server.h"
#include "session.h"
#include "timeutil.h"

/* Count `b` in (sign 1) or out of (sign -1) its owner's bytes by tier
 * and, on the VRAM tier, by device. */
static void buffer_account(gmd_dbuffer *b, int sign)
{
        gmd_session *owner = b->owner;

        if (sign > 0) {
                owner->tier_bytes[b->tier] += b->size;
        } else {
                owner->tier_bytes[b->tier] -= b->size;
        }
        if (b->tier != GMD_TIER_VRAM || b->device >= GMD_MAX_DEVICES)
                return;
        if (sign > 0) {
                owner->vram_on[b->device] += b->size;
                owner->vram_n_on[b->device]++;
                if (owner->vram_on[b->device] > owner->vram_peak[b->device])
                        owner->vram_peak[b->device] = owner->vram_on[b->device];
        } else {
                owner->vram_on[b->device] -= b->size;
                owner->vram_n_on[b->device]--;
        }
}

/* Count `b` in (sign 1) or out of (-1) the bytes its device's host arena
 * would hold were all such buffers out (devices.h, arena_bound). */
static void buffer_account_arena(gmd_server *server, const gmd_dbuffer *b,
                                 int sign)
{
        if (b->device >= GMD_MAX_DEVICES || placement_pinned(b) ||
            placement_usable_on_host(b))
                return;
        if (sign > 0)
                server->devices.arena_bound[b->device] += b->size;
        else
                server->devices.arena_bound[b->device] -= b->size;
}

/* Count `b` in (sign 1) or out of (-1) its owner's acquired buffers on
 * its device; the owner's last release is when the count falls to 0. */
static void buffer_account_acquired(gmd_dbuffer *b, int sign)
{
        gmd_session *owner = b->owner;

        if (b->device >= GMD_MAX_DEVICES)
                return;
        if (sign > 0) {
                owner->acquired_on[b->device]++;
        } else if (--owner->acquired_on[b->device] == 0) {
                owner->unused_since_ms[b->device] = now_ms();
        }
}

void buffers_init(gmd_buffers *buffers)
{
        list_init(&buffers->all);
        list_init(&buffers->moving);
        list_init(&buffers->vram_idle);
        idmap_init(&buffers->by_id);
        buffers->next_id = 0;
}

void buffers_clear(gmd_buffers *buffers)
{
        idmap_clear(&buffers->by_id);
}

/* A new buffer `b` (id and backing set) of `owner`, resident on `tier`:
 * into the lists, counted in its owner's bytes by tier and device. */
static void buffer_join(gmd_server *server, gmd_session *owner, gmd_dbuffer *b,
                        unsigned device, gmd_tier tier, uint64_t size,
                        unsigned flags, bool acquired)
{
        b->owner = owner;
        b->size = size;
        b->device = device;
        b->flags = flags;
        b->tier = tier;
        b->state = GMD_STATE_RESIDENT;
        b->acquired = acquired;
        list_add_tail(&owner->buffers, &b->owner_link);
        list_add_tail(&server->buffers.all, &b->server_link);
        list_init(&b->moving_link);
        list_init(&b->idle_link);
        list_init(&b->host_copy_link);
        owner->n_buffers++;
        owner->bytes += size;
        buffer_account(b, 1);
        buffer_account_arena(server, b, 1);
        if (acquired)
                buffer_account_acquired(b, 1);
}

int buffer_new(gmd_server *server, gmd_session *owner, unsigned device,
               gmd_tier tier, uint64_t size, unsigned flags,
               gmd_dbuffer **ret_buffer)
{
        gmd_pool *pool = server_pool(server, tier, device);
        gmd_mem *kept = NULL;
        gmd_dbuffer *b;
        int r;

        if (!pool)
                return -EINVAL;
        /* VRAM the owner's own buffer of this size left when it moved out
         * holds nothing but the owner's bytes: it serves the allocation as
         * the client's own cache would (gmd_alloc), its pool bytes still
         * taken, with nothing created, mapped, zeroed or scrubbed on the
         * loop thread (0.1-1.3 ms for 64 MiB on the H200). */
        if (tier == GMD_TIER_VRAM && !(flags & GMD_ALLOC_LEGACY_IPC))
                kept = reuse_take(&server->reuse, &owner->reuse, device, size,
                                  pool_free(pool) < size);
        if (kept)
                r = 0;
        else if (tier == GMD_TIER_VRAM)
                r = reuse_pool_take(&server->reuse, pool, size);
        else    /* kept host copies are a cache: their room first */
                r = hostcopy_pool_take(server, size);
        if (r < 0)
                return r;

        b = calloc(1, sizeof(*b));
        if (!b) {
                r = -ENOMEM;
                goto fail_pool;
        }
        b->mem = kept;
        if (kept)
                r = 0;
        else if (flags & GMD_ALLOC_LEGACY_IPC)
                r = server->backend->ops->mem_create_ipc(server->backend, device,
                                                         size, &b->mem);
        else
                r = backing_create(server, tier, device, size, false, &b->mem);
        if (r < 0)
                goto fail_free;

        b->id = ++server->buffers.next_id;
        r = idmap_put(&server->buffers.by_id, b->id, b);
        if (r < 0)
                goto fail_mem;

        buffer_join(server, owner, b, device, tier, size, flags, true);
        /* Counted in the arena's bound now, however its VRAM came. */
        if (tier == GMD_TIER_VRAM)
                backing_vram_taken(server, device);
        *ret_buffer = b;
        return 0;

fail_mem:
        if (!kept)
                backing_destroy(server, b->mem);
fail_free:
        free(b);
fail_pool:
        /* Kept memory is kept again, its pool bytes with it, rather than
         * released: memory another buffer of the owner mapped (reuse_take)
         * stays alive in the owner's mapping until it reads the unmap it
         * was sent. */
        if (kept)
                reuse_keep(&server->reuse, &owner->reuse, kept);
        else
                pool_give(pool, size);
        return r;
}

int buffer_adopt(gmd_server *server, gmd_session *owner, uint64_t id,
                 unsigned device, gmd_tier tier, uint64_t size, unsigned flags,
                 gmd_mem *mem, bool acquired, gmd_dbuffer **ret_buffer)
{
        gmd_dbuffer *b;
        int r;

        if (idmap_get(&server->buffers.by_id, id))
                return -EEXIST;
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        r = idmap_put(&server->buffers.by_id, id, b);
        if (r < 0) {
                free(b);
                return r;
        }
        if (id > server->buffers.next_id)
                server->buffers.next_id = id;
        b->id = id;
        b->mem = mem;
        b->released_ms = now_ms();
        buffer_join(server, owner, b, device, tier, size, flags, acquired);
        buffer_index(b);
        *ret_buffer = b;
        return 0;
}

void buffer_park(gmd_dbuffer *b, bool parked)
{
        if (b->parked == parked)
                return;
        b->parked = parked;
        buffer_set_acquired(b, !parked);  /* an allocation hands it out acquired */
        parking_mark(&b->owner->parking, b->device, b->size, parked);
        if (parked)
                b->released_ms = now_ms();
}

void buffer_free(gmd_server *server, gmd_dbuffer *b)
{
        buffer_park(b, false);
        buffer_set_last_use(server, b, NULL);
        idmap_remove(&server->buffers.by_id, b->id);
        list_remove(&b->owner_link);
        list_remove(&b->server_link);
        list_remove(&b->moving_link);
        list_remove(&b->idle_link);
        peer_index(server, b, true);
        b->owner->n_buffers--;
        b->owner->bytes -= b->size;
        buffer_account(b, -1);
        buffer_account_arena(server, b, -1);
        if (b->acquired)
                buffer_account_acquired(b, -1);
        hostcopy_drop(server, b);
        /* Its owner may keep the fd it was sent: looked for (keptfd.h). */
        keptfd_freeing(server, b->mem);
        if (b->mem)
                backing_release(server, b->mem);
        /* One buffer fewer that could come back into kept VRAM; what its
         * owner still mapped for it went with the owner's free. */
        if (b->tier == GMD_TIER_HOST) {
                reuse_buffer_gone(&server->reuse, b);
                reuse_trim(&server->reuse, &b->owner->reuse, b->device, b->size,
                           buffer_count_out(b->owner, b->device, b->size));
        }
        free(b);
        pending_mark(&server->pending, PENDING_ROOM);
}

void buffer_index(gmd_dbuffer *b)
{
        gmd_server *server = b->owner->server;
        bool moving = b->move != NULL;
        bool idle = (!b->acquired || b->loan) && b->tier == GMD_TIER_VRAM;

        if (moving != !list_empty(&b->moving_link)) {
                list_remove(&b->moving_link);
                if (moving)
                        list_add_tail(&server->buffers.moving, &b->moving_link);
        }
        if (idle != !list_empty(&b->idle_link)) {
                list_remove(&b->idle_link);
                if (idle)
                        list_add_tail(&server->buffers.vram_idle, &b->idle_link);
        }
        /* A SPILLABLE buffer held on a peer is no room there. */
        peer_index(server, b, false);
}

void buffer_set_tier(gmd_dbuffer *b, gmd_tier tier)
{
        buffer_account(b, -1);
        b->tier = tier;
        if (tier != GMD_TIER_VRAM)
                b->prefetched_us = 0;
        buffer_account(b, 1);
        buffer_index(b);
}

void buffer_set_acquired(gmd_dbuffer *b, bool acquired)
{
        if (b->acquired != acquired)
                buffer_account_acquired(b, acquired ? 1 : -1);
        b->acquired = acquired;
        if (acquired)
                b->prefetched_us = 0;
        buffer_index(b);
}

void buffer_set_last_use(gmd_server *server, gmd_dbuffer *b, gmd_event *event)
{
        if (b->last_use && server->backend->ops->event_unref)
                server->backend->ops->event_unref(server->backend, b->last_use);
        b->last_use = event;
        if (event)
                b->last_use_gen++;
}

unsigned buffer_count_out(const gmd_session *owner, unsigned device,
                          uint64_t size)
{
        unsigned out = 0;
        const gmd_list *pos;

        list_for_each(pos, &owner->buffers) {
                const gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                if (b->tier == GMD_TIER_HOST && b->device == device &&
                    b->size == size)
                        out++;
        }
        return out;
}

gmd_dbuffer *buffer_find(gmd_server *server, gmd_session *session, uint64_t id)
{
        gmd_dbuffer *b = idmap_get(&server->buffers.by_id, id);

        /* Another client's buffer is as good as absent: a client can only
         * name its own (ARCHITECTURE.md decision 7). */
        if (!b || b->owner != session)
                return NULL;
        return b;
}
