/*
 * reuse — VRAM a swap-out left behind, kept for its owner's next swap-in.
 *
 * Releasing a VRAM allocation makes the driver scrub it on the GPU, and
 * that scrub slows host-to-device copies that run in the next few
 * milliseconds: measured on an H200 (bench/release_bench.c, BENCHMARKS.md
 * "Why swap-ins keep VRAM"), a 256 MiB host-to-device copy starting just
 * after 1 GiB was released ran at 36.5 GB/s instead of 54.5, and both
 * directions at once at 61 instead of 97 GB/s. Creating the next
 * destination also costs the loop thread a cuMemCreate, an export and a
 * map. So after a buffer moves out, its VRAM is not released:
 * it waits here, still counted as used in its pool, and the next swap-in
 * of a buffer of the same client and the same size copies into it, or
 * the client's next allocation of that size is given it (buffer_new; a
 * training step's offloaded activations made and destroyed ~120 VRAM
 * allocations a step without it, 0.1-1.3 ms each on the loop thread).
 *
 * Only the same client ever gets it back. Its fd went to that client, who
 * may keep a duplicate; handing the memory to anybody else would let the
 * first client read it (backend_cuda_mem.c). The client sees only its own
 * bytes again, which it could read anyway.
 *
 * Kept memory yields to everything: it is released, oldest first, as soon
 * as any request on its device finds too little room (reuse_make_room: the
 * allocation and swap-in paths and the evictor call it; memory still
 * mapped, below, goes last and is asked back), when its client
 * keeps more allocations of one device and size than it has buffers of
 * that device and size out on host memory (nothing left that could come
 * back into them), when the client disconnects, and when a reload sets
 * [swap] keep_vram = no (which turns it off).
 *
 * Mapped: a client whose hello says it keeps mappings (proto/gpumem.proto,
 * RemapNotify.keep_mapping) does not unmap a SWAPPABLE buffer's VRAM when
 * it moves out into kept memory: its swap-in into that memory then costs
 * the client no driver call, where import, map and set access cost ~80 us
 * a buffer, more than copying 2 MiB (bench/map_bench.c). Such memory is
 * kept *for that buffer* (its tag): its swap-in takes it first. An
 * allocation or another buffer's swap-in of the same owner takes it only
 * where no plain kept memory of that size is left (reuse_take), the owner
 * told to unmap it at the buffer. It cannot simply be released: the client's mapping would keep it alive outside
 * the pool's count. So where plain kept memory is released, mapped memory
 * is asked back (ask_unmap: the server sends the owner an unmap) and
 * released when reuse_unmapped hears the owner's ack; meanwhile it counts
 * as "unmapping", room on its way, and no swap-in takes it. A client gone
 * or a buffer freed or revoked needs no asking: it unmapped, or its
 * process did.
 *
 * The daemon's side of it is a gmd_reuse in the server, each client's a
 * gmd_reuse_owner in its session; the functions take those, a pool where
 * bytes are counted, and release memory through the function the server
 * gave (destroy the backing, give its bytes back to its pool).
 */
#ifndef GMD_REUSE_H
#define GMD_REUSE_H

#include <stdbool.h>
#include <stdint.h>

#include "list.h"
#include "pool.h"
#include "server_limits.h"
#include "stats.h"

typedef struct gmd_mem gmd_mem;

typedef struct gmd_reuse {
        gmd_list kept;              /* reuse_entry, oldest first */
        uint64_t kept_on[GMD_MAX_DEVICES];   /* their bytes per device */
        uint64_t unmapping_on[GMD_MAX_DEVICES];  /* of those, asked back
                                                  * from a mapping */
        bool enabled;               /* [swap] keep_vram */
        uint64_t ask_timeout_ms;    /* [limits] reclaim_timeout_ms: how
                                     * long an unmap asked is counted on;
                                     * set by the caller (0 after init:
                                     * not at all) */
        gmd_stats *stats;           /* vram_reused, vram_kept_released */
        /* Destroy `mem` and give its bytes back to its pool. */
        void (*release)(void *ctx, gmd_mem *mem);
        /* Ask the owner of the buffer `tag` to unmap the kept VRAM it
         * still maps there: 0 when asked (reuse_unmapped follows), or
         * negative when it cannot be (the memory is released at once). */
        int (*ask_unmap)(void *ctx, void *tag);
        /* Is the buffer `tag` on its way back (a swap-in queued, an
         * acquire waiting)? Its VRAM is then not taken for another
         * (reuse_take). Set by the caller; NULL after init: never. */
        bool (*coming_back)(void *ctx, const void *tag);
        void *ctx;
} gmd_reuse;

/* One client's side. */
typedef struct gmd_reuse_owner {
        uint64_t kept_bytes;        /* VRAM kept for its swap-ins */
        bool gone;                  /* closing: nothing more is kept */
} gmd_reuse_owner;

void reuse_init(gmd_reuse *reuse, bool enabled, gmd_stats *stats,
                void (*release)(void *ctx, gmd_mem *mem),
                int (*ask_unmap)(void *ctx, void *tag), void *ctx);

/* `mem`, the VRAM `owner`'s buffer just moved out of (its pool bytes still
 * taken), is no longer mapped by anyone: keep it for the owner, or release
 * it when keeping is off or it cannot be kept. */
void reuse_keep(gmd_reuse *reuse, gmd_reuse_owner *owner, gmd_mem *mem);

/* Would reuse_keep_mapped keep memory of `owner` (keeping is on, the
 * owner not gone)? A move out asks before it tells the owner to keep its
 * mapping. */
bool reuse_keeps(const gmd_reuse *reuse, const gmd_reuse_owner *owner);

/* `mem`, the VRAM the buffer `tag` of `owner` just moved out of, is still
 * mapped by the owner at that buffer's address: keep it for that buffer's
 * swap-in (reuse_take_mapped). Where it cannot be kept (keeping was turned
 * off meanwhile) or its room is `wanted` now (requests came to wait while
 * it moved out), the owner is asked to unmap it; where that cannot be
 * either (the owner is gone, no memory), it is released. */
void reuse_keep_mapped(gmd_reuse *reuse, gmd_reuse_owner *owner,
                       gmd_mem *mem, void *tag, bool wanted);

/* A kept allocation of exactly `size` bytes on `device` for `owner`, its
 * pool bytes with it, or NULL. Memory a buffer of the owner still maps is
 * taken last, and the owner is told to unmap it at that buffer; not from a
 * buffer coming back unless `pool_short` (the pool has no room for
 * `size`). */
gmd_mem *reuse_take(gmd_reuse *reuse, gmd_reuse_owner *owner, unsigned device,
                    uint64_t size, bool pool_short);

/* The VRAM the buffer `tag` still maps, kept for it, its pool bytes with
 * it; NULL when there is none or it is being unmapped. */
gmd_mem *reuse_take_mapped(gmd_reuse *reuse, const void *tag);

/* The owner of buffer `tag` acked the latest unmap asked of it: what was
 * asked back for that buffer is released. */
void reuse_unmapped(gmd_reuse *reuse, const void *tag);

/* Buffer `tag` was freed or revoked: its owner unmapped it, so all that
 * is kept for it is released, asked back or not. */
void reuse_buffer_gone(gmd_reuse *reuse, const void *tag);

/* pool_take on `pool` (a device's VRAM), releasing kept memory of its
 * device first when it is short (reuse_make_room): 0, or -ENOSPC with
 * nothing taken. */
int reuse_pool_take(gmd_reuse *reuse, gmd_pool *pool, uint64_t bytes);

/* Release kept memory of `pool`'s device until the pool has `bytes` free
 * or nothing is kept there: plain kept memory first, oldest first, then
 * memory a buffer still maps, which is asked back, not released (that of
 * buffers coming back last). Memory asked back already (within ask_timeout_ms) counts as free, except, where
 * the room is wanted `now` (an allocation or swap-in taking it at once),
 * against plain kept memory that could be released instead. The caller
 * must not count asked-back memory in `bytes` itself. Returns whether it
 * released or asked back any. */
bool reuse_make_room(gmd_reuse *reuse, gmd_pool *pool, uint64_t bytes,
                     bool now);

/* Release, oldest first, what `owner` keeps of `size` bytes on `device`
 * beyond `out`, the number of its buffers of that device and size on host
 * memory (buffer_count_out); memory a buffer still maps counts as one of
 * those and stays. Call when one of those came back or was freed. */
void reuse_trim(gmd_reuse *reuse, gmd_reuse_owner *owner, unsigned device,
                uint64_t size, unsigned out);

/* Release everything `owner` keeps; what it still maps is asked back
 * unless it is gone. For a client going away, and keeping turned off. */
void reuse_forget(gmd_reuse *reuse, gmd_reuse_owner *owner);

/* Bytes kept on `device`, all clients. */
uint64_t reuse_bytes(const gmd_reuse *reuse, unsigned device);

/* Of those, what is kept for `owner` (mapped there or not: its fd went
 * to that client). Walks what is kept; for the periodic refresh of
 * memory held outside (outside.h), not per request. */
uint64_t reuse_owner_bytes(const gmd_reuse *reuse, const gmd_reuse_owner *owner,
                           unsigned device);

/* Of those, what can still become room: all but the memory asked back
 * from an owner that has not answered within ask_timeout_ms. */
uint64_t reuse_reachable_bytes(const gmd_reuse *reuse, unsigned device);

/* Of those, bytes asked back from a mapping and not yet unmapped: room on
 * its way, as a move out under way is. Asks older than ask_timeout_ms are
 * not counted on: an owner that does not answer must not hold others up.
 * Sets *ret_next_ms to when the oldest ask counted runs out (0: none). */
uint64_t reuse_unmapping_bytes(const gmd_reuse *reuse, unsigned device,
                               uint64_t *ret_next_ms);

#endif
