/*
 * reuse — see reuse.h. One list per daemon, oldest first, and a byte
 * count per device: a client keeps at most one allocation per buffer it
 * has out on host memory, so the list stays as short as the buffers that
 * are out, and walking it is cheap next to the copy a hit saves. An entry
 * with a tag is memory that buffer's owner still maps.
 */
#include "reuse.h"

#include <errno.h>
#include <stdlib.h>

#include "backend.h"
#include "timeutil.h"

typedef struct reuse_entry {
        gmd_list link;              /* in reuse->kept, oldest first */
        gmd_reuse_owner *owner;
        gmd_mem *mem;
        void *tag;                  /* the buffer that still maps it */
        bool unmapping;             /* ... asked to unmap it */
        uint64_t asked_ms;          /* ... when */
} reuse_entry;

void reuse_init(gmd_reuse *r, bool enabled, gmd_stats *stats,
                void (*release)(void *ctx, gmd_mem *mem),
                int (*ask_unmap)(void *ctx, void *tag), void *ctx)
{
        list_init(&r->kept);
        for (unsigned d = 0; d < GMD_MAX_DEVICES; d++)
                r->kept_on[d] = r->unmapping_on[d] = 0;
        r->enabled = enabled;
        r->ask_timeout_ms = 0;      /* the caller sets it (reuse.h) */
        r->stats = stats;
        r->release = release;
        r->ask_unmap = ask_unmap;
        r->coming_back = NULL;      /* the caller sets it (reuse.h) */
        r->ctx = ctx;
}

/* Unlink an entry and hand its memory to the caller. */
static gmd_mem *entry_take(gmd_reuse *r, reuse_entry *e)
{
        gmd_mem *mem = e->mem;

        list_remove(&e->link);
        e->owner->kept_bytes -= mem->size;
        r->kept_on[mem->device] -= mem->size;
        if (e->unmapping)
                r->unmapping_on[mem->device] -= mem->size;
        free(e);
        return mem;
}

static void entry_release(gmd_reuse *r, reuse_entry *e)
{
        r->release(r->ctx, entry_take(r, e));
        r->stats->vram_kept_released++;
}

/* Ask the owner of `e`'s buffer to unmap it there: 0, or the send's
 * error. */
static int entry_ask(gmd_reuse *r, reuse_entry *e)
{
        int rc = r->ask_unmap(r->ctx, e->tag);

        if (rc == 0)
                r->stats->vram_unmaps_asked++;
        return rc;
}

/* Give the memory back: plain kept memory at once; memory its owner still
 * maps once the owner unmapped it, unless the owner is gone (its mapping
 * went with its connection, or goes with its process). Asking twice asks
 * once. True when the owner was asked (e stays, unmapping); false when the
 * memory was released (e is gone) or was asked before. */
static bool entry_give_back(gmd_reuse *r, reuse_entry *e)
{
        if (!e->tag || e->owner->gone) {
                entry_release(r, e);
                return false;
        }
        if (e->unmapping)
                return false;
        /* A send that fails leaves only release: the connection is then
         * closing (a packet that cannot be sent or queued closes it,
         * session.c), which releases all it holds anyway. */
        if (entry_ask(r, e) < 0) {
                entry_release(r, e);
                return false;
        }
        e->unmapping = true;
        e->asked_ms = now_ms();
        r->unmapping_on[e->mem->device] += e->mem->size;
        return true;
}

/* Is the buffer that maps `e` on its way back (reuse.h, coming_back)? */
static bool entry_coming_back(const gmd_reuse *r, const reuse_entry *e)
{
        return e->tag && r->coming_back && r->coming_back(r->ctx, e->tag);
}

static bool entry_is(const reuse_entry *e, const gmd_reuse_owner *owner,
                     unsigned device, uint64_t size)
{
        return e->owner == owner && e->mem->device == device &&
               e->mem->size == size;
}

/* The entry of buffer `tag` that is (or is not) being unmapped. A buffer
 * has at most one of each: the one it maps now, and older ones asked back
 * before it moved in and out again. */
static reuse_entry *entry_of_tag(gmd_reuse *r, const void *tag, bool unmapping)
{
        gmd_list *pos;

        /* Newest first: a batch's swap-in follows its swap-out. */
        for (pos = r->kept.prev; pos != &r->kept; pos = pos->prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (e->tag == tag && e->unmapping == unmapping)
                        return e;
        }
        return NULL;
}

/* A new entry for `mem`, or NULL when it may not be kept. */
static reuse_entry *entry_add(gmd_reuse *r, gmd_reuse_owner *owner,
                              gmd_mem *mem, void *tag)
{
        reuse_entry *e;

        if (owner->gone || mem->fd < 0 || mem->tier != GMD_TIER_VRAM ||
            mem->device >= GMD_MAX_DEVICES || !(e = calloc(1, sizeof(*e))))
                return NULL;
        e->owner = owner;
        e->mem = mem;
        e->tag = tag;
        list_add_tail(&r->kept, &e->link);
        owner->kept_bytes += mem->size;
        r->kept_on[mem->device] += mem->size;
        return e;
}

void reuse_keep(gmd_reuse *r, gmd_reuse_owner *owner, gmd_mem *mem)
{
        if (!r->enabled || !entry_add(r, owner, mem, NULL))
                r->release(r->ctx, mem);
}

bool reuse_keeps(const gmd_reuse *r, const gmd_reuse_owner *owner)
{
        return r->enabled && !owner->gone;
}

void reuse_keep_mapped(gmd_reuse *r, gmd_reuse_owner *owner, gmd_mem *mem,
                       void *tag, bool wanted)
{
        reuse_entry *e = entry_add(r, owner, mem, tag);

        /* Released at once, the owner's mapping would keep it alive
         * unseen: where it may not be kept, it is asked back as kept
         * memory is. Only an owner gone (or no memory for the entry)
         * lets it go now. */
        if (!e)
                r->release(r->ctx, mem);
        else if (!r->enabled || wanted)
                (void)entry_give_back(r, e);
}

gmd_mem *reuse_take(gmd_reuse *r, gmd_reuse_owner *owner, unsigned device,
                    uint64_t size, bool pool_short)
{
        gmd_list *pos;

        if (!owner->kept_bytes)
                return NULL;
        /* Newest first: the allocation a move just left. */
        for (pos = r->kept.prev; pos != &r->kept; pos = pos->prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (!e->tag && entry_is(e, owner, device, size)) {
                        r->stats->vram_reused++;
                        return entry_take(r, e);
                }
        }
        /* Then memory another buffer of the owner still maps, oldest
         * first (the one least likely to come back soon): the owner
         * unmaps it there before it reads what maps it here, as it
         * reads in order, and it is the same owner's memory either way,
         * so nothing waits for that ack. Even where the pool has room:
         * the buffer that maps it then comes back into other VRAM, mapped
         * afresh, but the alternative is new VRAM now, and copies into
         * new VRAM run slower (full-size train2x swapped in at 35 GB/s
         * taking new VRAM while the pool had room, 41.7 taking this;
         * BENCHMARKS.md, Experiments: "Which VRAM a swap-in takes").
         * Not from a buffer on its way back, which would need other
         * VRAM itself, at once, and pay
         * the remap this one saves, unless the pool is short: making room
         * would then ask that memory back anyway (reuse_make_room), a
         * round trip and a release dearer than taking it. */
        list_for_each(pos, &r->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (!e->tag || e->unmapping || !entry_is(e, owner, device, size))
                        continue;
                if (!pool_short && entry_coming_back(r, e))
                        continue;
                if (entry_ask(r, e) < 0)
                        continue;
                r->stats->vram_reused++;
                return entry_take(r, e);
        }
        return NULL;
}

gmd_mem *reuse_take_mapped(gmd_reuse *r, const void *tag)
{
        reuse_entry *e = entry_of_tag(r, tag, false);

        if (!e)
                return NULL;
        r->stats->vram_reused++;
        r->stats->vram_reused_mapped++;
        return entry_take(r, e);
}

void reuse_unmapped(gmd_reuse *r, const void *tag)
{
        reuse_entry *e;

        /* The owner answers in order: its ack of the latest unmap covers
         * any asked before. */
        while ((e = entry_of_tag(r, tag, true)))
                entry_release(r, e);
}

void reuse_buffer_gone(gmd_reuse *r, const void *tag)
{
        gmd_list *pos, *tmp;

        list_for_each_safe(pos, tmp, &r->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (e->tag == tag)
                        entry_release(r, e);
        }
}

int reuse_pool_take(gmd_reuse *r, gmd_pool *pool, uint64_t bytes)
{
        int rc = pool_take(pool, bytes);

        if (rc == -ENOSPC && reuse_make_room(r, pool, bytes, true))
                rc = pool_take(pool, bytes);
        return rc;
}

bool reuse_make_room(gmd_reuse *r, gmd_pool *pool, uint64_t bytes,
                     bool now)
{
        unsigned device = pool->device;
        gmd_list *pos, *tmp;
        bool released = false;
        uint64_t coming;

        if (device >= GMD_MAX_DEVICES || !r->kept_on[device])
                return false;
        coming = reuse_unmapping_bytes(r, device, NULL);
        /* Plain kept memory first: released at once, while memory a
         * buffer still maps costs a round trip now and its owner an
         * import and a map when that buffer comes back. */
        list_for_each_safe(pos, tmp, &r->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (pool_free(pool) + (now ? 0 : coming) >= bytes)
                        return released;
                if (e->mem->device != device || e->tag)
                        continue;
                entry_release(r, e);
                released = true;
        }
        /* Then memory still mapped, that of buffers on their way back
         * last (they would need VRAM again at once). */
        for (int pass = 0; pass < 2; pass++) {
                list_for_each_safe(pos, tmp, &r->kept) {
                        reuse_entry *e = container_of(pos, reuse_entry, link);
                        uint64_t size = e->mem->size;

                        if (pool_free(pool) + coming >= bytes)
                                return released;
                        if (e->mem->device != device || e->unmapping ||
                            (pass == 0 && entry_coming_back(r, e)))
                                continue;
                        /* Asked back: on its way; or released where it
                         * cannot be asked (e is then gone), and already in
                         * pool_free. */
                        if (entry_give_back(r, e))
                                coming += size;
                        released = true;
                }
        }
        return released;
}

void reuse_trim(gmd_reuse *r, gmd_reuse_owner *owner, unsigned device,
                uint64_t size, unsigned out)
{
        gmd_list *pos, *prev;

        if (!owner->kept_bytes)
                return;
        /* Memory a buffer out still maps is for that buffer. */
        list_for_each(pos, &r->kept) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                if (e->tag && !e->unmapping && entry_is(e, owner, device, size) &&
                    out)
                        out--;
        }
        /* The newest `out` others of that device and size stay; older ones
         * go. */
        for (pos = r->kept.prev; pos != &r->kept; pos = prev) {
                reuse_entry *e = container_of(pos, reuse_entry, link);

                prev = pos->prev;
                if (e->tag || !entry_is(e, owner, device, size))
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
                        (void)entry_give_back(r, e);
        }
}

uint64_t reuse_bytes(const gmd_reuse *r, unsigned device)
{
        return device < GMD_MAX_DEVICES ? r->kept_on[device] : 0;
}

uint64_t reuse_owner_bytes(const gmd_reuse *r, const gmd_reuse_owner *owner,
                           unsigned device)
{
        const gmd_list *pos;
        uint64_t n = 0;

        if (!owner->kept_bytes)
                return 0;
        list_for_each(pos, &r->kept) {
                const reuse_entry *e = container_of(pos, reuse_entry, link);

                if (e->owner == owner && e->mem->device == device)
                        n += e->mem->size;
        }
        return n;
}

uint64_t reuse_reachable_bytes(const gmd_reuse *r, unsigned device)
{
        if (device >= GMD_MAX_DEVICES)
                return 0;
        return r->kept_on[device] - r->unmapping_on[device] +
               reuse_unmapping_bytes(r, device, NULL);
}

uint64_t reuse_unmapping_bytes(const gmd_reuse *r, unsigned device,
                               uint64_t *ret_next_ms)
{
        uint64_t bytes = 0, now = now_ms(), next = 0;
        const gmd_list *pos;

        if (ret_next_ms)
                *ret_next_ms = 0;
        if (device >= GMD_MAX_DEVICES || !r->unmapping_on[device])
                return 0;
        list_for_each(pos, &r->kept) {
                const reuse_entry *e = container_of(pos, reuse_entry, link);
                uint64_t until = e->asked_ms + r->ask_timeout_ms;

                if (!e->unmapping || e->mem->device != device || until < now)
                        continue;
                bytes += e->mem->size;
                if (!next || until < next)
                        next = until;
        }
        if (ret_next_ms)
                *ret_next_ms = next;
        return bytes;
}
