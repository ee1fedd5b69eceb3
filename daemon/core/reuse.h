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
 * allocation and swap-in paths and the evictor call it), when its client
 * keeps more allocations of one device and size than it has buffers of
 * that device and size out on host memory (nothing left that could come
 * back into them), when the client disconnects, and when a reload sets
 * [swap] keep_vram = no (which turns it off).
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
        bool enabled;               /* [swap] keep_vram */
        gmd_stats *stats;           /* vram_reused, vram_kept_released */
        /* Destroy `mem` and give its bytes back to its pool. */
        void (*release)(void *ctx, gmd_mem *mem);
        void *ctx;
} gmd_reuse;

/* One client's side. */
typedef struct gmd_reuse_owner {
        uint64_t kept_bytes;        /* VRAM kept for its swap-ins */
        bool gone;                  /* closing: nothing more is kept */
} gmd_reuse_owner;

void reuse_init(gmd_reuse *reuse, bool enabled, gmd_stats *stats,
                void (*release)(void *ctx, gmd_mem *mem), void *ctx);

/* `mem`, the VRAM `owner`'s buffer just moved out of (its pool bytes still
 * taken), is no longer mapped by anyone: keep it for the owner, or release
 * it when keeping is off or it cannot be kept. */
void reuse_keep(gmd_reuse *reuse, gmd_reuse_owner *owner, gmd_mem *mem);

/* A kept allocation of exactly `size` bytes on `device` for `owner`, its
 * pool bytes with it, or NULL. */
gmd_mem *reuse_take(gmd_reuse *reuse, gmd_reuse_owner *owner, unsigned device,
                    uint64_t size);

/* pool_take on `pool` (a device's VRAM), releasing kept memory of its
 * device first when it is short (reuse_make_room): 0, or -ENOSPC with
 * nothing taken. */
int reuse_pool_take(gmd_reuse *reuse, gmd_pool *pool, uint64_t bytes);

/* Release kept memory of `pool`'s device, oldest first, until the pool has
 * `bytes` free or nothing is kept there. Returns whether it released any. */
bool reuse_make_room(gmd_reuse *reuse, gmd_pool *pool, uint64_t bytes);

/* Release, oldest first, what `owner` keeps of `size` bytes on `device`
 * beyond `out`, the number of its buffers of that device and size on host
 * memory (buffer_count_out). Call when one of those came back or was
 * freed. */
void reuse_trim(gmd_reuse *reuse, gmd_reuse_owner *owner, unsigned device,
                uint64_t size, unsigned out);

/* Release everything `owner` keeps (it is going away). */
void reuse_forget(gmd_reuse *reuse, gmd_reuse_owner *owner);

/* Bytes kept on `device`, all clients. */
uint64_t reuse_bytes(const gmd_reuse *reuse, unsigned device);

#endif
