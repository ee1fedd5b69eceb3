/*
 * reuse — see reuse.h. One list per daemon, oldest first, and a byte
 * count per device: a client keeps at most one allocation per buffer it
 * has out on host memory, so the list stays as short as the buffers that
 * are out, and walking it is cheap next to the copy a hit saves.
 */
#include "reuse.h"

#include <errno.h>
#include <stdlib.h>

#include "backend.h"

typedef struct reuse_entry {
        gmd_list link;              /* in reuse->kept, oldest first */
        gmd_reuse_owner *owner;
        gmd_mem *mem;
} reuse_entry;

void reuse_init(gmd_reuse *r, bool enabled, gmd_stats *stats,
                void (*release)(void *ctx, gmd_mem *mem), void *ctx)
{
        list_init(&r->kept);
        for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                r->kept_on[d] = 0;
        r->enabled = enabled;
        r->stats = stats;
        r->release = release;
        r->ctx = ctx;
}

/* Unlink an entry and hand its memory to the caller. */
static gmd_mem *entry_take(gmd_reuse *r, reuse_entry *e)
{
        gmd_mem *mem = e->mem;

        list_remove(&e->link);
        e->owner->kept_bytes -= mem->size;
        r->kept_on[mem->device] -= mem->size;
        free(e);
        return mem;
}

static void entry_release(gmd_reuse *r, reuse_entry *e)
{
        r->release(r->ctx, entry_take(r, e));
        r->stats->vram_kept_released++;
}

static bool entry_is(const reuse_entry *e, const gmd_reuse_owner *owner,
                     unsigned device, uint64_t size)
{
        return e->owner == owner && e->mem->device == device &&
               e->mem->size == size;
}

void reuse_keep(gmd_reuse *r, gmd_reuse_owner *owner, gmd_mem *mem)
{
        reuse_entry *e;

        if (!r->enabled || owner->gone || mem->fd < 0 ||
            mem->tier != GMD_TIER_VRAM || mem->device >= GMD_MAX_DEVICES ||
            !(e = calloc(1, sizeof(*e)))) {
                r->release(r->ctx, mem);
                return;
        }
        e->owner = owner;
        e->mem = mem;
        list_add_tail(&r->kept, &e->link);
        owner->kept_bytes += mem->size;
        r->kept_on[mem->device] += mem->size;
}

gmd_mem *reuse_take(gmd_reuse *r, gmd_reuse_owner *owner, unsigned device,
                    uint64_t size)
{
        gmd_list *pos;

        if (!owner->kept_bytes)
                return NULL;
        /* Newest first: the allocation a move just left. */
        for (pos = r->kept.prev; pos != &r->kept; pos = pos->prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (entry_is(e, owner, device, size)) {
                        r->stats->vram_reused++;
                        return entry_take(r, e);
                }
        }
        return NULL;
}

int reuse_pool_take(gmd_reuse *r, gmd_pool *pool, uint64_t bytes)
{
        int rc = pool_take(pool, bytes);

        if (rc == -ENOSPC && reuse_make_room(r, pool, bytes))
                rc = pool_take(pool, bytes);
        return rc;
}

bool reuse_make_room(gmd_reuse *r, gmd_pool *pool, uint64_t bytes)
{
        unsigned device = pool->device;
        gmd_list *pos, *tmp;
        bool released = false;

        if (device >= GMD_MAX_DEVICES)
                return false;
        list_for_each_safe(pos, tmp, &r->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (pool_free(pool) >= bytes || !r->kept_on[device])
                        break;
                if (e->mem->device != device)
                        continue;
                entry_release(r, e);
                released = true;
        }
        return released;
}

void reuse_trim(gmd_reuse *r, gmd_reuse_owner *owner, unsigned device,
                uint64_t size, unsigned out)
{
        gmd_list *pos, *prev;

        if (!owner->kept_bytes)
                return;
        /* The newest `out` of that device and size stay; older ones go. */
        for (pos = r->kept.prev; pos != &r->kept; pos = prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                prev = pos->prev;
                if (!entry_is(e, owner, device, size))
                        continue;
                if (out)
                        out--;
                else
                        entry_release(r, e);
        }
}

void reuse_forget(gmd_reuse *r, gmd_reuse_owner *owner)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &r->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (!owner->kept_bytes)
                        break;
                if (e->owner == owner)
                        entry_release(r, e);
        }
}

uint64_t reuse_bytes(const gmd_reuse *r, unsigned device)
{
        return device < GMD_MAX_DEVICES ? r->kept_on[device] : 0;
}
