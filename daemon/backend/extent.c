/*
 * extent — see extent.h. Free ranges ("holes") stay maximal within their
 * region: a take cuts from the start of one hole, a give merges with its
 * neighbours of the same region. So there are never more holes than regions
 * plus parts handed out, and take reserves room for that many before it
 * hands anything out: giving back what was taken then never has to grow
 * the array, so a part cannot be lost for want of memory. Every give is
 * checked against the regions and the holes first, so a double or bogus
 * give is refused instead of corrupting the arrays.
 */
#include "extent.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NO_HOLE SIZE_MAX

static bool extents_multiple(const gmd_extents *e, uint64_t x)
{
        /* `%` rather than a mask: a unit of 0 refuses everything instead of
         * dividing by zero. */
        return e->unit != 0 && x % e->unit == 0;
}

/* Grow *array to hold at least `need` items of `size` bytes. */
static int array_reserve(void **array, size_t *cap, size_t need, size_t size)
{
        size_t n = *cap ? *cap : 8;
        void *p;

        if (need <= *cap)
                return 0;
        while (n < need) {
                if (n > SIZE_MAX / 2)
                        return -ENOMEM;
                n *= 2;
        }
        if (n > SIZE_MAX / size)
                return -ENOMEM;
        p = realloc(*array, n * size);
        if (!p)
                return -ENOMEM;
        *array = p;
        *cap = n;
        return 0;
}

static int extents_reserve_holes(gmd_extents *e, size_t need)
{
        return array_reserve((void **)&e->holes, &e->cap_holes, need,
                             sizeof(*e->holes));
}

static void extents_insert_hole(gmd_extents *e, size_t i,
                                const gmd__extent_hole *h)
{
        memmove(&e->holes[i + 1], &e->holes[i],
                (e->n_holes - i) * sizeof(*e->holes));
        e->holes[i] = *h;
        e->n_holes++;
}

static void extents_remove_hole(gmd_extents *e, size_t i)
{
        memmove(&e->holes[i], &e->holes[i + 1],
                (e->n_holes - i - 1) * sizeof(*e->holes));
        e->n_holes--;
}

void extents_init(gmd_extents *e, uint64_t unit)
{
        *e = (gmd_extents){ .unit = unit };
}

void extents_clear(gmd_extents *e)
{
        if (!e)
                return;
        free(e->holes);
        free(e->regions);
        extents_init(e, e->unit);
}

int extents_add(gmd_extents *e, uint64_t offset, uint64_t len)
{
        gmd__extent_hole h = { .offset = offset, .len = len, .region = offset };
        size_t ri, hi;
        int r;

        if (len == 0 || !extents_multiple(e, offset) ||
            !extents_multiple(e, len) || len > UINT64_MAX - offset)
                return -EINVAL;
        for (ri = 0; ri < e->n_regions; ri++) {
                const gmd_extent *reg = &e->regions[ri];

                if (offset < reg->offset + reg->len && reg->offset < offset + len)
                        return -EINVAL;
                if (reg->offset > offset)
                        break;
        }
        /* Both arrays grow before either changes, so -ENOMEM adds nothing. */
        r = array_reserve((void **)&e->regions, &e->cap_regions,
                          e->n_regions + 1, sizeof(*e->regions));
        if (r < 0)
                return r;
        r = extents_reserve_holes(e, e->n_regions + 1 + e->n_out);
        if (r < 0)
                return r;

        memmove(&e->regions[ri + 1], &e->regions[ri],
                (e->n_regions - ri) * sizeof(*e->regions));
        e->regions[ri] = (gmd_extent){ .offset = offset, .len = len };
        e->n_regions++;

        /* The region is new, so no hole lies inside it: the holes before it
         * are exactly those that start before it. */
        for (hi = 0; hi < e->n_holes && e->holes[hi].offset < offset; hi++)
                ;
        extents_insert_hole(e, hi, &h);
        e->total += len;
        e->avail += len;
        return 0;
}

/* The smallest hole that holds len, the lowest offset on ties; NO_HOLE. */
static size_t extents_best_fit(const gmd_extents *e, uint64_t len)
{
        size_t best = NO_HOLE;

        for (size_t i = 0; i < e->n_holes; i++) {
                uint64_t l = e->holes[i].len;

                /* Strict `<`: holes come in offset order, keep the first. */
                if (l >= len && (best == NO_HOLE || l < e->holes[best].len))
                        best = i;
        }
        return best;
}

/* Order of the multi-part take: larger first, lower offset on ties. */
static bool hole_before(const gmd__extent_hole *a, const gmd__extent_hole *b)
{
        return a->len > b->len || (a->len == b->len && a->offset < b->offset);
}

/* The hole that comes right after hole `prev` in that order (the first one
 * when prev is NO_HOLE); NO_HOLE after the last. */
static size_t extents_next_largest(const gmd_extents *e, size_t prev)
{
        size_t next = NO_HOLE;

        for (size_t i = 0; i < e->n_holes; i++) {
                if (prev != NO_HOLE && !hole_before(&e->holes[prev], &e->holes[i]))
                        continue;
                if (next == NO_HOLE || hole_before(&e->holes[i], &e->holes[next]))
                        next = i;
        }
        return next;
}

/* How many parts taking the largest holes first needs for len, or 0 when
 * that is more than max_parts. */
static unsigned extents_count_parts(const gmd_extents *e, uint64_t len,
                                    unsigned max_parts)
{
        size_t i = NO_HOLE;
        unsigned n = 0;

        while (len > 0) {
                i = extents_next_largest(e, i);
                /* No hole left means avail < len, which take ruled out. */
                if (i == NO_HOLE || n == max_parts)
                        return 0;
                n++;
                len -= e->holes[i].len < len ? e->holes[i].len : len;
        }
        return n;
}

/* Cut `len` bytes (at most the hole's) from the start of hole i. */
static gmd_extent extents_cut(gmd_extents *e, size_t i, uint64_t len)
{
        gmd__extent_hole *h = &e->holes[i];
        gmd_extent part = { .offset = h->offset, .len = len };

        h->offset += len;
        h->len -= len;
        if (h->len == 0)
                extents_remove_hole(e, i);
        e->avail -= len;
        return part;
}

int extents_take(gmd_extents *e, uint64_t len, unsigned max_parts,
                 gmd_extent *ret_parts, unsigned *ret_n)
{
        size_t best;
        unsigned n;
        int r;

        if (len == 0 || !extents_multiple(e, len))
                return -EINVAL;
        if (len > e->avail || max_parts == 0)
                return -ENOSPC;

        best = extents_best_fit(e, len);
        n = best != NO_HOLE ? 1 : extents_count_parts(e, len, max_parts);
        if (n == 0)
                return -ENOSPC;
        /* Each part given back may add one hole; set the room aside now. */
        r = extents_reserve_holes(e, e->n_regions + e->n_out + n);
        if (r < 0)
                return r;

        if (best != NO_HOLE) {
                ret_parts[0] = extents_cut(e, best, len);
        } else {
                /* Whole holes leave the array as they are cut, so the
                 * largest left is always the next one counted above. */
                for (unsigned k = 0; k < n; k++) {
                        size_t i = extents_next_largest(e, NO_HOLE);
                        uint64_t l = e->holes[i].len < len ? e->holes[i].len : len;

                        ret_parts[k] = extents_cut(e, i, l);
                        len -= l;
                }
        }
        e->n_out += n;
        *ret_n = n;
        return 0;
}

/* The free range that holds all of [offset, offset+len), or NO_HOLE. */
static size_t extents_find_hole(const gmd_extents *e, uint64_t offset,
                                uint64_t len)
{
        for (size_t i = 0; i < e->n_holes; i++) {
                const gmd__extent_hole *h = &e->holes[i];

                if (h->offset <= offset && offset - h->offset <= h->len &&
                    len <= h->len - (offset - h->offset))
                        return i;
        }
        return NO_HOLE;
}

/* Cut [p->offset, +p->len), inside hole i, out of it: what is left before
 * it stays hole i, what is left after it becomes a hole of its own (room
 * set aside by the caller). */
static void extents_cut_at(gmd_extents *e, size_t i, const gmd_extent *p)
{
        gmd__extent_hole *h = &e->holes[i];
        gmd__extent_hole after = {
                .offset = p->offset + p->len,
                .len = h->offset + h->len - (p->offset + p->len),
                .region = h->region,
        };

        h->len = p->offset - h->offset;
        if (h->len == 0)
                extents_remove_hole(e, i);
        else
                i++;
        if (after.len > 0)
                extents_insert_hole(e, i, &after);
        e->avail -= p->len;
}

int extents_take_at(gmd_extents *e, const gmd_extent *parts, unsigned n)
{
        int r;

        /* Check everything first, so a failure takes nothing. */
        for (unsigned k = 0; k < n; k++) {
                const gmd_extent *p = &parts[k];

                if (p->len == 0 || !extents_multiple(e, p->offset) ||
                    !extents_multiple(e, p->len) ||
                    p->len > UINT64_MAX - p->offset ||
                    extents_find_hole(e, p->offset, p->len) == NO_HOLE)
                        return -EINVAL;
                for (unsigned j = 0; j < k; j++)
                        if (p->offset < parts[j].offset + parts[j].len &&
                            parts[j].offset < p->offset + p->len)
                                return -EINVAL;
        }
        /* Each part may split a hole in two: the room take sets aside. */
        r = extents_reserve_holes(e, e->n_regions + e->n_out + n);
        if (r < 0)
                return r;
        /* Disjoint parts each inside a free range stay inside what is
         * left of it as the others are cut out. */
        for (unsigned k = 0; k < n; k++)
                extents_cut_at(e, extents_find_hole(e, parts[k].offset,
                                                    parts[k].len), &parts[k]);
        e->n_out += n;
        return 0;
}

/* The region that holds all of [offset, offset+len), or NULL. */
static const gmd_extent *extents_find_region(const gmd_extents *e,
                                             uint64_t offset, uint64_t len)
{
        for (size_t i = 0; i < e->n_regions; i++) {
                const gmd_extent *reg = &e->regions[i];

                if (reg->offset <= offset && offset - reg->offset <= reg->len &&
                    len <= reg->len - (offset - reg->offset))
                        return reg;
        }
        return NULL;
}

static int extents_give_one(gmd_extents *e, const gmd_extent *p)
{
        const gmd_extent *reg;
        gmd__extent_hole *prev = NULL, *next = NULL;
        uint64_t end;
        size_t i;
        int r;

        if (p->len == 0 || !extents_multiple(e, p->offset) ||
            !extents_multiple(e, p->len) || p->len > UINT64_MAX - p->offset)
                return -EINVAL;
        reg = extents_find_region(e, p->offset, p->len);
        if (!reg)
                return -EINVAL;
        end = p->offset + p->len;

        /* i: the first hole at or after the part; the one before it must end
         * by the part's start, and hole i must start at or after its end. */
        for (i = 0; i < e->n_holes && e->holes[i].offset < p->offset; i++)
                ;
        if (i > 0) {
                prev = &e->holes[i - 1];
                if (prev->offset + prev->len > p->offset)
                        return -EINVAL;
                if (prev->region != reg->offset || prev->offset + prev->len != p->offset)
                        prev = NULL;
        }
        if (i < e->n_holes) {
                next = &e->holes[i];
                if (next->offset < end)
                        return -EINVAL;
                if (next->region != reg->offset || next->offset != end)
                        next = NULL;
        }

        if (prev && next) {
                prev->len += p->len + next->len;
                extents_remove_hole(e, i);
        } else if (prev) {
                prev->len += p->len;
        } else if (next) {
                next->offset = p->offset;
                next->len += p->len;
        } else {
                gmd__extent_hole h = {
                        .offset = p->offset, .len = p->len, .region = reg->offset,
                };

                /* Only a caller that splits parts before giving them back
                 * gets here with the room that take set aside used up. */
                r = extents_reserve_holes(e, e->n_holes + 1);
                if (r < 0)
                        return r;
                extents_insert_hole(e, i, &h);
        }
        e->avail += p->len;
        if (e->n_out > 0)
                e->n_out--;
        return 0;
}

int extents_give(gmd_extents *e, const gmd_extent *parts, unsigned n)
{
        int ret = 0;

        for (unsigned k = 0; k < n; k++) {
                int r = extents_give_one(e, &parts[k]);

                if (r < 0 && ret == 0)
                        ret = r;
        }
        return ret;
}

uint64_t extents_largest(const gmd_extents *e)
{
        uint64_t largest = 0;

        for (size_t i = 0; i < e->n_holes; i++)
                if (e->holes[i].len > largest)
                        largest = e->holes[i].len;
        return largest;
}

int extents_locate(const gmd_extent *parts, unsigned n, uint64_t off,
                   uint64_t *ret_at, uint64_t *ret_run)
{
        for (unsigned i = 0; i < n; i++) {
                if (off < parts[i].len) {
                        *ret_at = parts[i].offset + off;
                        *ret_run = parts[i].len - off;
                        return 0;
                }
                off -= parts[i].len;
        }
        *ret_run = 0;
        return -ERANGE;
}
