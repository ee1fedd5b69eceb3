/*
 * host_arena — see host_arena.h. The span's parts are copied out of a
 * stack array into storage of their own, so a take either hands out a
 * whole span or takes nothing.
 */
#include "host_arena.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The most parts one take may ask for: the stack array's size. */
#define HOST_ARENA_MAX_PARTS GMD_ARENA_MAX_PARTS

void host_arena_init(gmd_host_arena *a, uint64_t unit, uint64_t target,
                     uint64_t limit)
{
        memset(a, 0, sizeof(*a));
        extents_init(&a->free, unit);
        a->target = target;
        a->limit = limit > target ? limit : target;
}

uint64_t host_arena_raise(gmd_host_arena *a, uint64_t bytes)
{
        if (bytes == 0 || !a->free.unit || bytes % a->free.unit ||
            bytes > a->limit - a->target)
                return 0;
        a->target += bytes;
        return bytes;
}

uint64_t host_arena_growth(const gmd_host_arena *a, uint64_t want,
                           uint64_t most, uint64_t piece)
{
        uint64_t bytes;

        if (want == 0 || piece == 0 || !a->free.unit)
                return 0;
        bytes = (want + piece - 1) / piece * piece;
        if (bytes > most)
                bytes = most - most % a->free.unit;
        return bytes >= want ? bytes : 0;
}

void host_arena_clear(gmd_host_arena *a)
{
        uint64_t unit = a->free.unit;

        extents_clear(&a->free);
        memset(a, 0, sizeof(*a));
        extents_init(&a->free, unit);
}

int host_arena_add(gmd_host_arena *a, uint64_t offset, uint64_t len)
{
        int r = extents_add(&a->free, offset, len);

        if (r < 0)
                return r;
        a->built += len;
        return 0;
}

int host_arena_take(gmd_host_arena *a, uint64_t size, unsigned max_parts,
                    gmd_arena_span *ret_span)
{
        gmd_extent parts[HOST_ARENA_MAX_PARTS];
        gmd_extent *copy;
        unsigned n;
        int r;

        if (size == 0 || !a->free.unit || size % a->free.unit ||
            max_parts == 0 || max_parts > HOST_ARENA_MAX_PARTS)
                return -EINVAL;
        r = extents_take(&a->free, size, max_parts, parts, &n);
        if (r < 0) {
                /* -ENOMEM here is the room to give the parts back later,
                 * which the arena could not set aside: no room either. */
                a->refused++;
                return -ENOSPC;
        }
        copy = malloc(sizeof(*parts) * n);
        if (!copy) {
                (void)extents_give(&a->free, parts, n);
                return -ENOMEM;
        }
        memcpy(copy, parts, sizeof(*parts) * n);
        a->served++;
        *ret_span = (gmd_arena_span){ .parts = copy, .n_parts = n };
        return 0;
}

/* What a host copy from the arena is, whichever way it was carved. */
static void host_arena_describe(gmd_mem *mem, unsigned device, uint64_t size)
{
        mem->fd = -1;
        mem->size = size;
        mem->tier = GMD_TIER_HOST;
        mem->device = device;
        mem->daemon_only = true;
}

int host_arena_take_mem(gmd_host_arena *a, unsigned device, uint64_t size,
                        unsigned max_parts, gmd_arena_span *ret_span,
                        gmd_mem *ret_mem)
{
        int r = host_arena_take(a, size, max_parts, ret_span);

        if (r < 0)
                return r;
        host_arena_describe(ret_mem, device, size);
        return 0;
}

int host_arena_adopt_mem(gmd_host_arena *a, unsigned device, uint64_t size,
                         const gmd_extent *parts, unsigned n,
                         gmd_arena_span *ret_span, gmd_mem *ret_mem)
{
        gmd_extent *copy;
        uint64_t sum = 0;
        int r;

        if (size == 0 || n == 0 || n > HOST_ARENA_MAX_PARTS)
                return -EINVAL;
        for (unsigned i = 0; i < n; i++) {
                if (parts[i].len > size - sum)
                        return -EINVAL;
                sum += parts[i].len;
        }
        if (sum != size)
                return -EINVAL;
        copy = malloc(sizeof(*parts) * n);
        if (!copy)
                return -ENOMEM;
        r = extents_take_at(&a->free, parts, n);
        if (r < 0) {
                free(copy);
                return r;
        }
        memcpy(copy, parts, sizeof(*parts) * n);
        *ret_span = (gmd_arena_span){ .parts = copy, .n_parts = n };
        host_arena_describe(ret_mem, device, size);
        return 0;
}

int host_arena_span_parts(const gmd_arena_span *span, gmd_extent *ret,
                          unsigned max)
{
        if (!span->parts)
                return -ENOENT;
        if (span->n_parts > max)
                return -ENOBUFS;
        memcpy(ret, span->parts, sizeof(*ret) * span->n_parts);
        return (int)span->n_parts;
}

int host_arena_check_pieces(const gmd_arena_piece *pieces, unsigned n,
                            uint64_t unit, uint64_t limit, uint64_t *ret_end,
                            const char **ret_why)
{
        uint64_t end = 0;

        for (unsigned i = 0; i < n; i++) {
                const gmd_arena_piece *p = &pieces[i];

                if (p->size == 0 || !unit || p->size % unit || p->offset % unit) {
                        *ret_why = "a piece's offset or size is not a "
                                   "multiple of the arena's unit";
                        return -EINVAL;
                }
                if (p->offset < end) {
                        *ret_why = "two pieces overlap (or are out of order)";
                        return -EINVAL;
                }
                if (p->offset > end) {
                        *ret_why = "the pieces leave a gap (the first must "
                                   "start at 0, each the next where one ends)";
                        return -EINVAL;
                }
                if (p->size > limit || p->offset > limit - p->size) {
                        *ret_why = "the pieces pass the end of the arena's "
                                   "range ([pools] host_limit's share)";
                        return -EINVAL;
                }
                end = p->offset + p->size;
        }
        *ret_end = end;
        return 0;
}

int host_arena_give(gmd_host_arena *a, gmd_arena_span *span)
{
        int r = 0;

        if (span->parts)
                r = extents_give(&a->free, span->parts, span->n_parts);
        free(span->parts);
        *span = (gmd_arena_span){ 0 };
        return r;
}

int host_arena_locate(const gmd_arena_span *span, uint64_t off,
                      uint64_t *ret_at, uint64_t *ret_run)
{
        return extents_locate(span->parts, span->n_parts, off, ret_at, ret_run);
}

void host_arena_info(const gmd_host_arena *a, gmd_arena_info *ret_info)
{
        memset(ret_info, 0, sizeof(*ret_info));
        ret_info->target = a->target;
        ret_info->limit = a->limit;
        ret_info->built = a->built;
        ret_info->free = a->free.avail;
        ret_info->largest = extents_largest(&a->free);
        ret_info->served = a->served;
        ret_info->refused = a->refused;
}
