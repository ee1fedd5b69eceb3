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
#include "backing.h"
#include "buffer.h"
#include "list.h"
#include "log.h"
#include "server.h"
#include "session.h"

typedef struct reuse_entry {
        gmd_list link;              /* in server->kept, oldest first */
        gmd_session *owner;
        gmd_mem *mem;
} reuse_entry;

/* Unlink an entry and hand its memory to the caller. */
static gmd_mem *entry_take(reuse_entry *e)
{
        gmd_mem *mem = e->mem;

        list_remove(&e->link);
        e->owner->kept_bytes -= mem->size;
        e->owner->server->kept_on[mem->device] -= mem->size;
        free(e);
        return mem;
}

static void entry_release(gmd_server *server, reuse_entry *e)
{
        backing_release(server, entry_take(e));
        server->stats.vram_kept_released++;
}

static bool entry_is(const reuse_entry *e, const gmd_session *owner,
                     unsigned device, uint64_t size)
{
        return e->owner == owner && e->mem->device == device &&
               e->mem->size == size;
}

void reuse_keep(gmd_server *server, gmd_session *owner, gmd_mem *mem)
{
        reuse_entry *e;

        if (!server->config.swap_keep_vram || owner->closing || mem->fd < 0 ||
            mem->tier != GMD_TIER_VRAM || !(e = calloc(1, sizeof(*e)))) {
                backing_release(server, mem);
                return;
        }
        e->owner = owner;
        e->mem = mem;
        list_add_tail(&server->kept, &e->link);
        owner->kept_bytes += mem->size;
        server->kept_on[mem->device] += mem->size;
}

gmd_mem *reuse_take(gmd_server *server, gmd_session *owner, unsigned device,
                    uint64_t size)
{
        gmd_list *pos;

        if (!owner->kept_bytes)
                return NULL;
        /* Newest first: the allocation a move just left. */
        for (pos = server->kept.prev; pos != &server->kept; pos = pos->prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (entry_is(e, owner, device, size)) {
                        server->stats.vram_reused++;
                        return entry_take(e);
                }
        }
        return NULL;
}

int reuse_pool_take(gmd_server *server, unsigned device, uint64_t bytes)
{
        gmd_pool *pool = server_vram_pool(server, device);
        int r = pool_take(pool, bytes);

        if (r == -ENOSPC && reuse_make_room(server, device, bytes))
                r = pool_take(pool, bytes);
        return r;
}

bool reuse_make_room(gmd_server *server, unsigned device, uint64_t bytes)
{
        gmd_pool *pool = server_vram_pool(server, device);
        gmd_list *pos, *tmp;
        bool released = false;

        list_for_each_safe(pos, tmp, &server->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (pool_free(pool) >= bytes || !server->kept_on[device])
                        break;
                if (e->mem->device != device)
                        continue;
                entry_release(server, e);
                released = true;
        }
        return released;
}

void reuse_trim(gmd_server *server, gmd_session *owner, unsigned device,
                uint64_t size)
{
        unsigned out = 0;
        gmd_list *pos, *prev;

        if (!owner->kept_bytes)
                return;
        list_for_each(pos, &owner->buffers) {
                gmd_dbuffer *b = container_of(pos, gmd_dbuffer, owner_link);

                if (b->tier == GMD_TIER_HOST && b->device == device &&
                    b->size == size)
                        out++;
        }
        /* The newest `out` of that device and size stay; older ones go. */
        for (pos = server->kept.prev; pos != &server->kept; pos = prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                prev = pos->prev;
                if (!entry_is(e, owner, device, size))
                        continue;
                if (out)
                        out--;
                else
                        entry_release(server, e);
        }
}

void reuse_forget(gmd_server *server, gmd_session *owner)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &server->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (!owner->kept_bytes)
                        break;
                if (e->owner == owner)
                        entry_release(server, e);
        }
}

uint64_t reuse_bytes(const gmd_server *server, unsigned device)
{
        return device < GMD_MAX_DEVICES ? server->kept_on[device] : 0;
}
