/*
 * backing — creating and destroying the memory behind buffers, and the
 * bound on pinned host memory.
 *
 * Host memory is pinned in two ways: the host arenas, pinned whole at start
 * ([pools] host_stock, backend_cuda_host.c) and grown by whole pieces ahead
 * of demand, before swap-outs find them full ([pools] host_stock_grow,
 * host_stock_vram: backing_arena_grow), and allocations of their own
 * made on the spot — SPILLABLE buffers on the host tier (their owners map
 * them) and swap-outs that find the arena full. [pools] host_limit bounds
 * the two together: an allocation of its own is refused (-ENOSPC) when it
 * would take the arenas' size plus every other pinned allocation past the
 * limit. The host pool (pool.h) still counts buffer bytes on the host tier
 * whatever memory holds them.
 *
 * Every backing counted against host_limit is created here (arena pieces
 * and legacy IPC buffers come straight from the backend), and every
 * backing is destroyed here, so the count of pinned allocations stays
 * right on every path.
 */
#ifndef GMD_BACKING_H
#define GMD_BACKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpumem.h"

typedef struct gmd_server gmd_server;
typedef struct gmd_mem gmd_mem;

/* A backing of `size` bytes on `tier` of `device`: zeroed, or, when
 * `filled`, for a copy's destination that writes every byte. On the host
 * tier an allocation of its own: -ENOSPC when host_limit has no room for
 * it. */
int backing_create(gmd_server *server, gmd_tier tier, unsigned device,
                   uint64_t size, bool filled, gmd_mem **ret_mem);

/* Destroy any backing (VRAM, host, an arena piece, a legacy IPC buffer).
 * Accepts NULL. */
void backing_destroy(gmd_server *server, gmd_mem *mem);

/* Count `mem`, VRAM of a peer holding a buffer of device `home` (the peer
 * tier, peer.h), as held there (sign > 0: made or taken over for that) or
 * no longer (sign < 0; backing_destroy does it for such memory). */
void backing_peer_count(gmd_server *server, gmd_mem *mem, unsigned home,
                        int sign);

/* Destroy a backing and give its bytes back to the pool of its tier and
 * device, which paid for it. */
void backing_release(gmd_server *server, gmd_mem *mem);

/* Host memory pinned now or at start: the arenas' full size and every host
 * allocation of its own. */
uint64_t backing_pinned(const gmd_server *server);

/* Why the arena grows (backing_arena_grow's log line says it). */
typedef enum backing_growth {
        BACKING_GROWTH_FULL,    /* a swap-out found it full */
        BACKING_GROWTH_LOW,     /* its free part fell below the low-water
                                 * mark: ahead of demand */
        BACKING_GROWTH_POOL,    /* the device's VRAM pool fills up and the
                                 * arena is smaller than [pools]
                                 * host_stock_vram of it: ahead of demand */
} backing_growth;

/* A growth for want of room adds at most this much at a time. */
#define BACKING_ARENA_STEP_MAX (8ull << 30)

/* Grow `device`'s arena, pinned off the request path, when [pools]
 * host_stock_grow allows and host_limit has room:
 *   - `full`: a swap-out of `size` bytes found it full (it pins its own
 *     copy, whose room host_limit keeps beside the growth);
 *   - else, after a swap-out of `size` took its copy from the arena, or
 *     (`size` 0) after VRAM was allocated on `device`: ahead of demand,
 *     when what is free or on its way falls below the larger of a
 *     quarter of the arena and `size`, plus the VRAM bytes waited for on
 *     the device (swap-outs will make that room), or while the device's VRAM pool is
 *     three quarters used and the arena is smaller than [pools]
 *     host_stock_vram of it, or than what the device's buffers that may
 *     go out to it hold (then within three quarters of host_limit).
 * A growth for want of room doubles the arena, at most
 * BACKING_ARENA_STEP_MAX at a time; what a growth under way will add
 * counts as room, so growths chain without overshooting. Logs the
 * growth and why; returns whether one started. */
bool backing_arena_grow(gmd_server *server, unsigned device, uint64_t size,
                        bool full);

/* VRAM was just taken on `device` for a buffer (its own, one coming back,
 * or the peer tier's), made or taken from what was kept (reuse.h): if
 * the pool is three quarters used, the arena may grow ahead of the
 * swap-outs (backing_arena_grow with `size` 0). The callers say it, after
 * counting the buffer: backing_create only makes memory. */
void backing_vram_taken(gmd_server *server, unsigned device);

/* "; host memory has no room either (...)" for the error of a SPILLABLE
 * allocation that found neither VRAM nor host memory. */
void backing_no_host_room(gmd_server *server, char *buf, size_t len);

#endif
