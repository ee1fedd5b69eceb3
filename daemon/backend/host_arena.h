/*
 * host_arena — the bookkeeping of one device's host arena, shared by both
 * backends: host memory pinned ahead of swap-outs ([pools] host_stock) and
 * carved into their host copies, so no swap-out pins on the request path.
 *
 * An arena is one address range in the daemon, filled from its start with
 * pieces that were pinned (cuda) or created (sim) one by one. A copy
 * cannot span two physical allocations, so a host copy handed out never
 * crosses a piece's edge: when no single free range holds it, it comes as
 * several parts (a gmd_arena_span), and the copy engine walks them
 * (host_arena_locate). The ranges themselves are extent.c's; this adds
 * what both backends did around it: the build progress (target, built),
 * its growth up to the range's end (limit, host_arena_raise),
 * the served/refused counts, the span's own storage, the gmd_mem of a host
 * copy carved out of it, and the figures gpu-memctl and the metrics show
 * (gmd_arena_info).
 *
 * Holds no memory and makes no driver call: the backend owns the pieces
 * and the address range, and turns a span's offsets into addresses from
 * its base. Not thread safe: the cuda backend, whose worker adds pieces
 * while the loop thread takes and gives, calls it under its host lock.
 */
#ifndef GMD_HOST_ARENA_H
#define GMD_HOST_ARENA_H

#include <stdint.h>

#include "backend.h"
#include "extent.h"

typedef struct gmd_host_arena {
        uint64_t target;        /* bytes it is to have */
        uint64_t built;         /* bytes of pieces added so far */
        uint64_t limit;         /* bytes the backend's range can hold: what
                                 * target may grow to (host_arena_raise) */
        uint64_t served;        /* host_arena_take calls served ... */
        uint64_t refused;       /* ... and refused for want of room */
        gmd_extents free;       /* what is not handed out, of `built` */
} gmd_host_arena;

/* A host copy carved out of an arena: its parts, offsets from the arena's
 * start, in order. Empty (parts NULL) when it is not from an arena. */
typedef struct gmd_arena_span {
        gmd_extent *parts;
        unsigned n_parts;
} gmd_arena_span;

/* An empty arena that will hold `target` bytes in pieces that are
 * multiples of `unit` (a power of two; 0 makes every take fail -EINVAL),
 * in a range of `limit` bytes (at least target) it may grow to. */
void host_arena_init(gmd_host_arena *a, uint64_t unit, uint64_t target,
                     uint64_t limit);

/* Let the arena grow: its target rises by `bytes` (a unit multiple), the
 * backend then builds the new pieces as it built the first ones. Also
 * while pieces are still being built: the target moves on and the
 * builder keeps going, so growths asked ahead of demand chain without a
 * gap (the caller counts target - built as room on its way, so it does
 * not ask twice for the same need). Returns the bytes added: 0 when
 * `bytes` is not a unit multiple or would pass the limit. */
uint64_t host_arena_raise(gmd_host_arena *a, uint64_t bytes);

/* The bytes a growth asked for `want` should add: `want` rounded up to
 * whole pieces of `piece` bytes, cut to `most` (in whole units); 0 when
 * that leaves less than `want`. What both backends' arena_grow raise by. */
uint64_t host_arena_growth(const gmd_host_arena *a, uint64_t want,
                           uint64_t most, uint64_t piece);

/* Forget every piece and span (not the memory: the backend's). The arena
 * is empty afterwards and may be initialised again. */
void host_arena_clear(gmd_host_arena *a);

/* A piece of `len` bytes at `offset` is pinned and mapped: all of it free.
 * -EINVAL (offset or len not a unit multiple, overlapping a piece) or
 * -ENOMEM, and nothing added, on failure. */
int host_arena_add(gmd_host_arena *a, uint64_t offset, uint64_t len);

/* Carve `size` bytes (a unit multiple, > 0) in at most `max_parts` parts
 * (1 to 64) into *ret_span: the best-fitting single free range when one
 * holds it, else the largest ones (extents_take). -EINVAL for a bad size
 * or max_parts; -ENOSPC, counted as refused, when the arena has no such
 * room; -ENOMEM when the span's storage cannot be had. On failure nothing
 * is taken and *ret_span is untouched. */
int host_arena_take(gmd_host_arena *a, uint64_t size, unsigned max_parts,
                    gmd_arena_span *ret_span);

/* A backend's host copy of `size` bytes for `device`, carved out of the
 * arena: host_arena_take into *ret_span (the same errors), then *ret_mem,
 * the backend record's gmd_mem, says what such a copy is: no fd (-1), the
 * HOST tier, `size` and `device`, daemon_only (never sent to a client).
 * Its other fields are left as they are. On failure nothing is taken and
 * neither is touched. */
int host_arena_take_mem(gmd_host_arena *a, unsigned device, uint64_t size,
                        unsigned max_parts, gmd_arena_span *ret_span,
                        gmd_mem *ret_mem);

/* Restart recovery: the host copy of `size` bytes for `device` that the
 * previous run held as exactly `parts` (1 to GMD_ARENA_MAX_PARTS, in the
 * copy's order, their lengths adding up to `size`), taken out of what is
 * free (extents_take_at) into *ret_span, and *ret_mem filled as
 * host_arena_take_mem fills it. -EINVAL when the parts do not add up, or
 * one is not entirely free (outside what is built, overlapping another,
 * already taken); -ENOMEM. Not counted as served. On failure nothing is
 * taken and neither is touched. */
int host_arena_adopt_mem(gmd_host_arena *a, unsigned device, uint64_t size,
                         const gmd_extent *parts, unsigned n,
                         gmd_arena_span *ret_span, gmd_mem *ret_mem);

/* The parts of `span` into ret[0..n): n, -ENOENT for an empty span (not
 * from an arena), -ENOBUFS when it has more than `max`. */
int host_arena_span_parts(const gmd_arena_span *span, gmd_extent *ret,
                          unsigned max);

/* Whether `pieces` can be adopted into an empty arena of unit `unit`
 * (arena_adopt, backend.h) whose range holds `limit` bytes: in offset
 * order, from 0, without gap or overlap, sizes unit multiples and > 0,
 * the end within the limit. 0 with their end in *ret_end, or -EINVAL with
 * the reason, a sentence for the log, in *ret_why. */
int host_arena_check_pieces(const gmd_arena_piece *pieces, unsigned n,
                            uint64_t unit, uint64_t limit, uint64_t *ret_end,
                            const char **ret_why);

/* Give a span's parts back to the arena (they merge with their free
 * neighbours) and free its storage; the span is empty afterwards. -EINVAL
 * when a part was not the arena's to take back (a caller bug: given back
 * twice, or never taken), which the arena ignores. */
int host_arena_give(gmd_host_arena *a, gmd_arena_span *span);

/* Where byte `off` of the span lies: its offset in the arena, with how
 * many bytes from there are in the same part in *ret_run. -ERANGE (and
 * *ret_run 0) past the span's end. */
int host_arena_locate(const gmd_arena_span *span, uint64_t off,
                      uint64_t *ret_at, uint64_t *ret_run);

/* The arena's figures for gpu-memctl and the metrics (backend.h). */
void host_arena_info(const gmd_host_arena *a, gmd_arena_info *ret_info);

#endif
