/*
 * extent — a range allocator over the pinned host arena. The arena is one
 * address range made of pieces ("regions") that were pinned separately, each
 * mapped at its own offset. A copy cannot span two physical allocations, so
 * a range handed out never crosses a region boundary, even where two
 * regions touch; a request that no single free range holds is served as
 * several parts instead.
 *
 * The allocator only does the bookkeeping, in offsets: it holds no memory
 * itself. Free ranges and regions are kept in sorted arrays and every call
 * walks them (O(n)); the arena has tens to hundreds of ranges, and a swap
 * copy costs far more than the walk.
 *
 * Not thread safe: the caller serialises every call on one gmd_extents.
 */
#ifndef GMD_EXTENT_H
#define GMD_EXTENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gmd_extent {
        uint64_t offset;
        uint64_t len;
} gmd_extent;

/* A free range, tagged with the offset of the region it lies in so free
 * ranges of different regions are never merged, even when adjacent. */
typedef struct gmd__extent_hole {
        uint64_t offset;
        uint64_t len;
        uint64_t region;
} gmd__extent_hole;

typedef struct gmd_extents {
        uint64_t unit;          /* every offset and length is a multiple */
        uint64_t total;         /* bytes in all regions */
        uint64_t avail;         /* bytes free */

        /* Internals. */
        gmd__extent_hole *holes;        /* free ranges, sorted by offset */
        size_t n_holes;
        size_t cap_holes;
        gmd_extent *regions;            /* sorted by offset, disjoint */
        size_t n_regions;
        size_t cap_regions;
        size_t n_out;                   /* parts taken, not given back */
} gmd_extents;

/* unit: power of two > 0 (e.g. 2 MiB). With 0, every add and take fails
 * with -EINVAL. */
void extents_init(gmd_extents *e, uint64_t unit);

/* Free everything the allocator holds (not the memory it describes). The
 * allocator is empty afterwards, with the same unit, and may be used again. */
void extents_clear(gmd_extents *e);

/* Add a region [offset, offset+len), all of it free. Both multiples of the
 * unit, len > 0, the end within 64 bits, no overlap with an existing region
 * (touching one is fine): else -EINVAL. -ENOMEM, and nothing added, when
 * the arrays cannot grow. */
int extents_add(gmd_extents *e, uint64_t offset, uint64_t len);

/* Take `len` bytes (a multiple of the unit, > 0; else -EINVAL) as at most
 * `max_parts` parts, written to ret_parts[0..*ret_n); ret_parts has room
 * for max_parts. One part when any free range holds len: the best fit (the
 * smallest such range, the lowest offset on ties), from its start.
 * Otherwise the largest free ranges in turn (same tie rule), each whole but
 * the last, of which only the first bytes are taken; the parts come in that
 * order. -ENOSPC when avail < len or more than max_parts parts would be
 * needed (max_parts 0 included); -ENOMEM when the room that giving these
 * parts back will need cannot be set aside. On any failure nothing is taken
 * and ret_parts, ret_n are untouched. */
int extents_take(gmd_extents *e, uint64_t len, unsigned max_parts,
                 gmd_extent *ret_parts, unsigned *ret_n);

/* Take exactly these `n` parts (restart recovery: the ranges a host copy
 * held in the previous run). Each must be a non-empty unit multiple lying
 * entirely in one free range (so within one region), and no two may
 * overlap: else -EINVAL. -ENOMEM when the room giving them back will need
 * cannot be set aside. All or nothing: on failure nothing is taken. The
 * parts are then given back with extents_give like any others. */
int extents_take_at(gmd_extents *e, const gmd_extent *parts, unsigned n);

/* Give parts back, each as taken earlier (in any order, in any grouping);
 * they merge with adjacent free ranges of the same region. A part that is
 * empty, not a multiple of the unit, not inside one region, or overlapping
 * a free range is a caller bug: it is ignored, the rest are still given
 * back, and -EINVAL is returned. Parts given back as taken never need
 * memory (take set it aside); one that does and cannot get it is ignored
 * with -ENOMEM. The first error met is returned, 0 when none. */
int extents_give(gmd_extents *e, const gmd_extent *parts, unsigned n);

/* The largest single free range, 0 when none (for stats and for deciding
 * whether a request fits in one part). */
uint64_t extents_largest(const gmd_extents *e);

/* Where byte `off` of something stored as `parts` (in order) lies: its
 * offset in the allocator's space, with how many bytes from there stay in
 * the same part in *ret_run. -ERANGE (and *ret_run 0) when `off` is past
 * the parts' end. */
int extents_locate(const gmd_extent *parts, unsigned n, uint64_t off,
                   uint64_t *ret_at, uint64_t *ret_run);

#endif
