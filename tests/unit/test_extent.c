/*
 * test_extent — daemon/backend/extent.c: best fit and its tie rule, parts that
 * never cross a region, coalescing, the -ENOSPC and -EINVAL cases with
 * nothing changed, and a randomized run checked against a unit bitmap
 * model after every operation.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "extent.h"

#define U (2ull << 20)          /* the unit: 2 MiB */

static uint64_t rng_next(uint64_t *s)
{
        /* xorshift64*: fixed seeds, same sequence everywhere. */
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        return *s * 0x2545F4914F6CDD1Dull;
}

/* Take len as one part and return its offset. */
static uint64_t take_one(gmd_extents *e, uint64_t len)
{
        gmd_extent part;
        unsigned n = 0;

        assert_int_equal(extents_take(e, len, 1, &part, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(part.len, len);
        return part.offset;
}

static void give_one(gmd_extents *e, uint64_t offset, uint64_t len)
{
        gmd_extent part = { .offset = offset, .len = len };

        assert_int_equal(extents_give(e, &part, 1), 0);
}

static void test_best_fit(void **state)
{
        gmd_extents e;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 32 * U), 0);
        /* Holes of 8, 5, 6 and 3 units, kept apart by taken spacers. */
        assert_int_equal(take_one(&e, 8 * U), 0);
        assert_int_equal(take_one(&e, 2 * U), 8 * U);
        assert_int_equal(take_one(&e, 5 * U), 10 * U);
        assert_int_equal(take_one(&e, 2 * U), 15 * U);
        assert_int_equal(take_one(&e, 6 * U), 17 * U);
        assert_int_equal(take_one(&e, 2 * U), 23 * U);
        assert_int_equal(take_one(&e, 3 * U), 25 * U);
        give_one(&e, 0, 8 * U);
        give_one(&e, 10 * U, 5 * U);
        give_one(&e, 17 * U, 6 * U);
        give_one(&e, 25 * U, 3 * U);
        assert_int_equal(e.avail, 26 * U);
        assert_int_equal(extents_largest(&e), 8 * U);

        /* 4 units: the 5-unit hole, not the first or the largest. */
        assert_int_equal(take_one(&e, 4 * U), 10 * U);
        /* 5 units: now the 6-unit hole. */
        assert_int_equal(take_one(&e, 5 * U), 17 * U);
        assert_int_equal(e.avail, 17 * U);
        extents_clear(&e);
}

static void test_best_fit_tie_lowest_offset(void **state)
{
        gmd_extents e;

        extents_init(&e, U);
        /* Added out of order: the tie rule is by offset, not by age. */
        assert_int_equal(extents_add(&e, 40 * U, 4 * U), 0);
        assert_int_equal(extents_add(&e, 60 * U, 10 * U), 0);
        assert_int_equal(extents_add(&e, 24 * U, 4 * U), 0);
        assert_int_equal(extents_add(&e, 8 * U, 4 * U), 0);

        assert_int_equal(take_one(&e, 3 * U), 8 * U);
        assert_int_equal(take_one(&e, 4 * U), 24 * U);
        assert_int_equal(take_one(&e, 4 * U), 40 * U);
        assert_int_equal(take_one(&e, 4 * U), 60 * U);
        extents_clear(&e);
}

static void test_parts_never_cross_regions(void **state)
{
        gmd_extents e;
        gmd_extent parts[4];
        unsigned n = 0;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 4 * U), 0);
        assert_int_equal(extents_add(&e, 4 * U, 4 * U), 0);
        assert_int_equal(extents_largest(&e), 4 * U);

        assert_int_equal(extents_take(&e, 6 * U, 4, parts, &n), 0);
        assert_int_equal(n, 2);
        for (unsigned i = 0; i < n; i++) {
                uint64_t end = parts[i].offset + parts[i].len;

                assert_true(end <= 4 * U || parts[i].offset >= 4 * U);
        }
        assert_int_equal(parts[0].offset, 0);
        assert_int_equal(parts[0].len, 4 * U);
        assert_int_equal(parts[1].offset, 4 * U);
        assert_int_equal(parts[1].len, 2 * U);
        assert_int_equal(e.avail, 2 * U);

        /* Given back, the regions touch but do not merge. */
        assert_int_equal(extents_give(&e, parts, n), 0);
        assert_int_equal(e.avail, 8 * U);
        assert_int_equal(extents_largest(&e), 4 * U);
        assert_int_equal(extents_take(&e, 8 * U, 1, parts, &n), -ENOSPC);
        assert_int_equal(extents_take(&e, 8 * U, 2, parts, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(parts[0].offset, 0);
        assert_int_equal(parts[0].len, 4 * U);
        assert_int_equal(parts[1].offset, 4 * U);
        assert_int_equal(parts[1].len, 4 * U);
        extents_clear(&e);
}

static void test_coalesce_any_order(void **state)
{
        uint64_t seed = 0x5eed;

        for (int round = 0; round < 20; round++) {
                gmd_extents e;
                uint64_t order[16];

                extents_init(&e, U);
                /* A neighbour region, to show coalescing stops at the edge. */
                assert_int_equal(extents_add(&e, 16 * U, 16 * U), 0);
                assert_int_equal(extents_add(&e, 0, 16 * U), 0);
                for (unsigned i = 0; i < 16; i++)
                        assert_int_equal(take_one(&e, U), i * U);
                assert_int_equal(extents_largest(&e), 16 * U);

                for (unsigned i = 0; i < 16; i++)
                        order[i] = i;
                for (unsigned i = 15; i > 0; i--) {
                        unsigned j = rng_next(&seed) % (i + 1);
                        uint64_t t = order[i];

                        order[i] = order[j];
                        order[j] = t;
                }
                for (unsigned i = 0; i < 16; i++) {
                        give_one(&e, order[i] * U, U);
                        assert_int_equal(e.avail, (17 + i) * U);
                }
                assert_int_equal(e.avail, 32 * U);
                assert_int_equal(extents_largest(&e), 16 * U);
                /* One range again: 16 units in one part, from the start. */
                assert_int_equal(take_one(&e, 16 * U), 0);
                extents_clear(&e);
        }
}

static void test_max_parts_enospc(void **state)
{
        gmd_extents e;
        gmd_extent parts[3], untouched[3];
        unsigned n = 99;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 4 * U), 0);
        assert_int_equal(extents_add(&e, 8 * U, 4 * U), 0);
        assert_int_equal(extents_add(&e, 16 * U, 4 * U), 0);
        memset(parts, 0xa5, sizeof(parts));
        memcpy(untouched, parts, sizeof(parts));

        assert_int_equal(extents_take(&e, 10 * U, 2, parts, &n), -ENOSPC);
        assert_int_equal(extents_take(&e, 2 * U, 0, parts, &n), -ENOSPC);
        assert_int_equal(n, 99);
        assert_memory_equal(parts, untouched, sizeof(parts));
        assert_int_equal(e.avail, 12 * U);
        assert_int_equal(extents_largest(&e), 4 * U);

        assert_int_equal(extents_take(&e, 10 * U, 3, parts, &n), 0);
        assert_int_equal(n, 3);
        assert_int_equal(parts[0].offset, 0);
        assert_int_equal(parts[1].offset, 8 * U);
        assert_int_equal(parts[2].offset, 16 * U);
        assert_int_equal(parts[2].len, 2 * U);
        assert_int_equal(e.avail, 2 * U);
        extents_clear(&e);
}

static void test_avail_short_enospc(void **state)
{
        gmd_extents e;
        gmd_extent parts[4], untouched[4];
        unsigned n = 99;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 8 * U), 0);
        assert_int_equal(take_one(&e, 6 * U), 0);
        memset(parts, 0xa5, sizeof(parts));
        memcpy(untouched, parts, sizeof(parts));

        assert_int_equal(extents_take(&e, 4 * U, 4, parts, &n), -ENOSPC);
        assert_int_equal(n, 99);
        assert_memory_equal(parts, untouched, sizeof(parts));
        assert_int_equal(e.avail, 2 * U);
        assert_int_equal(take_one(&e, 2 * U), 6 * U);
        assert_int_equal(e.avail, 0);
        assert_int_equal(extents_largest(&e), 0);
        extents_clear(&e);
}

static void test_take_bad_len(void **state)
{
        gmd_extents e;
        gmd_extent part = { 7, 7 };
        unsigned n = 99;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 8 * U), 0);
        assert_int_equal(extents_take(&e, 0, 4, &part, &n), -EINVAL);
        assert_int_equal(extents_take(&e, U + 1, 4, &part, &n), -EINVAL);
        assert_int_equal(extents_take(&e, U / 2, 4, &part, &n), -EINVAL);
        assert_int_equal(n, 99);
        assert_int_equal(part.offset, 7);
        assert_int_equal(part.len, 7);
        assert_int_equal(e.avail, 8 * U);
        extents_clear(&e);
}

static void test_add_bad_region(void **state)
{
        gmd_extents e;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 8 * U, 8 * U), 0);
        assert_int_equal(extents_add(&e, 32 * U, 0), -EINVAL);
        assert_int_equal(extents_add(&e, 32 * U + 4096, 2 * U), -EINVAL);
        assert_int_equal(extents_add(&e, 32 * U, U + 4096), -EINVAL);
        /* Overlaps: the same, across either end, around, inside. */
        assert_int_equal(extents_add(&e, 8 * U, 8 * U), -EINVAL);
        assert_int_equal(extents_add(&e, 4 * U, 6 * U), -EINVAL);
        assert_int_equal(extents_add(&e, 14 * U, 4 * U), -EINVAL);
        assert_int_equal(extents_add(&e, 0, 32 * U), -EINVAL);
        assert_int_equal(extents_add(&e, 10 * U, U), -EINVAL);
        /* Past the end of the address space. */
        assert_int_equal(extents_add(&e, UINT64_MAX - U + 1, 2 * U), -EINVAL);
        assert_int_equal(e.total, 8 * U);
        assert_int_equal(e.avail, 8 * U);
        /* Touching on either side is not overlapping. */
        assert_int_equal(extents_add(&e, 0, 8 * U), 0);
        assert_int_equal(extents_add(&e, 16 * U, 8 * U), 0);
        assert_int_equal(e.total, 24 * U);
        assert_int_equal(e.avail, 24 * U);
        extents_clear(&e);
}

static void test_double_give(void **state)
{
        gmd_extents e;
        gmd_extent a = { 0, 2 * U }, b = { 2 * U, 2 * U };
        gmd_extent both[2] = { a, b };
        gmd_extent straddle = { 2 * U, 4 * U };

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 8 * U), 0);
        assert_int_equal(take_one(&e, 2 * U), a.offset);
        assert_int_equal(take_one(&e, 2 * U), b.offset);
        assert_int_equal(extents_give(&e, &a, 1), 0);
        assert_int_equal(e.avail, 6 * U);

        assert_int_equal(extents_give(&e, &a, 1), -EINVAL);
        assert_int_equal(e.avail, 6 * U);
        /* Reaches into the free range after b. */
        assert_int_equal(extents_give(&e, &straddle, 1), -EINVAL);
        assert_int_equal(e.avail, 6 * U);
        /* The bad part is skipped, the good one after it still given back. */
        assert_int_equal(extents_give(&e, both, 2), -EINVAL);
        assert_int_equal(e.avail, 8 * U);
        assert_int_equal(extents_give(&e, &b, 1), -EINVAL);
        assert_int_equal(e.avail, 8 * U);
        assert_int_equal(extents_largest(&e), 8 * U);
        assert_int_equal(take_one(&e, 8 * U), 0);
        extents_clear(&e);
}

static void test_give_outside_regions(void **state)
{
        gmd_extents e;
        gmd_extent parts[2];
        gmd_extent bad[] = {
                { 6 * U, 4 * U },       /* across the two regions */
                { 32 * U, U },          /* in no region */
                { 14 * U, 4 * U },      /* past the end of the last */
                { U + 4096, U },        /* not a unit multiple */
                { 2 * U, 0 },           /* empty */
                { UINT64_MAX - U + 1, 2 * U },  /* wraps around */
        };
        unsigned n = 0;

        extents_init(&e, U);
        assert_int_equal(extents_add(&e, 0, 8 * U), 0);
        assert_int_equal(extents_add(&e, 8 * U, 8 * U), 0);
        assert_int_equal(extents_take(&e, 16 * U, 2, parts, &n), 0);
        assert_int_equal(n, 2);
        for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(extents_give(&e, &bad[i], 1), -EINVAL);
                assert_int_equal(e.avail, 0);
        }
        assert_int_equal(extents_give(&e, parts, n), 0);
        assert_int_equal(e.avail, 16 * U);
        extents_clear(&e);
}

/* The randomized run. The model is a bitmap of units, rebuilt from the
 * live allocations after every operation; the free ranges the allocator
 * must have are the maximal free runs of it inside each region. */
#define STRESS_OPS      10000
#define STRESS_UNITS    229
#define STRESS_SLOTS    48
#define STRESS_PARTS    4

static const gmd_extent stress_regions[] = {
        { 0, 37 * U },
        { 37 * U, 50 * U },             /* touches the first */
        { 200 * U, 29 * U },
};
#define N_STRESS_REGIONS (sizeof(stress_regions) / sizeof(stress_regions[0]))

typedef struct stress_alloc {
        bool live;
        unsigned n;
        gmd_extent parts[STRESS_PARTS];
} stress_alloc;

typedef struct stress_run {
        uint64_t offset;
        uint64_t len;
} stress_run;

static int stress_region_of(uint64_t offset, uint64_t len)
{
        for (unsigned r = 0; r < N_STRESS_REGIONS; r++) {
                const gmd_extent *reg = &stress_regions[r];

                if (offset >= reg->offset && offset + len <= reg->offset + reg->len)
                        return (int)r;
        }
        return -1;
}

/* Check the invariants; fill used[] (nonzero = taken) and return the free
 * runs in offset order. */
static unsigned stress_check(const gmd_extents *e, const stress_alloc *allocs,
                             bool *used, stress_run *runs)
{
        uint64_t taken = 0, largest = 0;
        unsigned n_runs = 0;

        memset(used, 0, STRESS_UNITS * sizeof(*used));
        for (unsigned a = 0; a < STRESS_SLOTS; a++) {
                if (!allocs[a].live)
                        continue;
                for (unsigned p = 0; p < allocs[a].n; p++) {
                        const gmd_extent *part = &allocs[a].parts[p];

                        assert_true(part->len > 0);
                        assert_int_equal(part->offset % U, 0);
                        assert_int_equal(part->len % U, 0);
                        assert_true(stress_region_of(part->offset, part->len) >= 0);
                        for (uint64_t u = part->offset / U; u < (part->offset + part->len) / U; u++) {
                                assert_false(used[u]);
                                used[u] = true;
                        }
                        taken += part->len;
                }
        }
        assert_int_equal(e->avail, e->total - taken);

        for (unsigned r = 0; r < N_STRESS_REGIONS; r++) {
                uint64_t u = stress_regions[r].offset / U;
                uint64_t end = u + stress_regions[r].len / U;

                while (u < end) {
                        uint64_t start;

                        if (used[u]) {
                                u++;
                                continue;
                        }
                        for (start = u; u < end && !used[u]; u++)
                                ;
                        runs[n_runs++] = (stress_run){ start * U, (u - start) * U };
                        if ((u - start) * U > largest)
                                largest = (u - start) * U;
                }
        }
        assert_int_equal(extents_largest(e), largest);
        return n_runs;
}

/* What take must do on the model: 0 and the parts, or -ENOSPC. */
static int stress_expect(const stress_run *runs_in, unsigned n_runs, uint64_t avail,
                         uint64_t len, unsigned max_parts, gmd_extent *parts,
                         unsigned *ret_n)
{
        stress_run runs[STRESS_UNITS];
        int best = -1;
        unsigned n = 0;

        if (len > avail)
                return -ENOSPC;
        for (unsigned i = 0; i < n_runs; i++)
                if (runs_in[i].len >= len && (best < 0 || runs_in[i].len < runs_in[best].len))
                        best = (int)i;
        if (best >= 0) {
                parts[0] = (gmd_extent){ runs_in[best].offset, len };
                *ret_n = 1;
                return 0;
        }
        memcpy(runs, runs_in, n_runs * sizeof(*runs));
        while (len > 0) {
                int big = -1;

                for (unsigned i = 0; i < n_runs; i++)
                        if (runs[i].len > 0 && (big < 0 || runs[i].len > runs[big].len))
                                big = (int)i;
                if (n == max_parts)
                        return -ENOSPC;
                parts[n].offset = runs[big].offset;
                parts[n].len = runs[big].len < len ? runs[big].len : len;
                len -= parts[n].len;
                runs[big].len = 0;
                n++;
        }
        *ret_n = n;
        return 0;
}

/* extents_locate walks parts in order: offsets map into the right part,
 * the run stops at the part's end, and past the end is -ERANGE. */
static void test_locate(void **state)
{
        const gmd_extent parts[] = { { 40, 8 }, { 4, 2 }, { 100, 6 } };
        uint64_t at = 0, run = 0;

        (void)state;
        assert_int_equal(extents_locate(parts, 3, 0, &at, &run), 0);
        assert_int_equal(at, 40);
        assert_int_equal(run, 8);
        assert_int_equal(extents_locate(parts, 3, 7, &at, &run), 0);
        assert_int_equal(at, 47);
        assert_int_equal(run, 1);
        assert_int_equal(extents_locate(parts, 3, 8, &at, &run), 0);
        assert_int_equal(at, 4);
        assert_int_equal(run, 2);
        assert_int_equal(extents_locate(parts, 3, 11, &at, &run), 0);
        assert_int_equal(at, 101);
        assert_int_equal(run, 5);
        assert_int_equal(extents_locate(parts, 3, 16, &at, &run), -ERANGE);
        assert_int_equal(run, 0);
}

static void test_stress(void **state)
{
        static stress_alloc allocs[STRESS_SLOTS];
        static stress_run runs[STRESS_UNITS];
        bool used[STRESS_UNITS];
        uint64_t seed = 0x9e3779b97f4a7c15ull;
        unsigned n_runs, takes = 0, multi = 0, refused = 0, gives = 0, bogus = 0;
        gmd_extents e;

        memset(allocs, 0, sizeof(allocs));
        extents_init(&e, U);
        /* Out of order, to exercise the sorted inserts. */
        assert_int_equal(extents_add(&e, stress_regions[2].offset, stress_regions[2].len), 0);
        assert_int_equal(extents_add(&e, stress_regions[0].offset, stress_regions[0].len), 0);
        assert_int_equal(extents_add(&e, stress_regions[1].offset, stress_regions[1].len), 0);
        assert_int_equal(e.total, 116 * U);
        n_runs = stress_check(&e, allocs, used, runs);

        for (int op = 0; op < STRESS_OPS; op++) {
                unsigned kind = rng_next(&seed) % 100;
                unsigned slot = rng_next(&seed) % STRESS_SLOTS;
                stress_alloc *a = &allocs[slot];

                if (kind < 8) {
                        /* A bogus give of one unit: already free, or in no
                         * region. Either way refused, nothing changes. */
                        uint64_t u = rng_next(&seed) % STRESS_UNITS;
                        gmd_extent part = { u * U, U };
                        uint64_t avail = e.avail;

                        if (!used[u]) {
                                assert_int_equal(extents_give(&e, &part, 1), -EINVAL);
                                assert_int_equal(e.avail, avail);
                                bogus++;
                        }
                } else if (!a->live) {
                        uint64_t len = (1 + rng_next(&seed) % 24) * U;
                        unsigned max_parts = 1 + rng_next(&seed) % STRESS_PARTS;
                        gmd_extent want[STRESS_PARTS], got[STRESS_PARTS];
                        unsigned want_n = 0, got_n = 1234;
                        uint64_t avail = e.avail;
                        int want_r, r;

                        want_r = stress_expect(runs, n_runs, e.avail, len, max_parts,
                                               want, &want_n);
                        memset(got, 0xa5, sizeof(got));
                        r = extents_take(&e, len, max_parts, got, &got_n);
                        assert_int_equal(r, want_r);
                        if (r < 0) {
                                assert_int_equal(got_n, 1234);
                                assert_int_equal(e.avail, avail);
                                refused++;
                        } else {
                                assert_int_equal(got_n, want_n);
                                assert_memory_equal(got, want, want_n * sizeof(*got));
                                a->live = true;
                                a->n = got_n;
                                memcpy(a->parts, got, sizeof(got));
                                takes++;
                                multi += got_n > 1;
                        }
                } else if (kind < 60) {
                        /* All parts in one call, in either order. */
                        gmd_extent back[STRESS_PARTS];

                        for (unsigned p = 0; p < a->n; p++)
                                back[p] = a->parts[kind % 2 ? p : a->n - 1 - p];
                        assert_int_equal(extents_give(&e, back, a->n), 0);
                        a->live = false;
                        gives++;
                } else {
                        /* Part by part. */
                        for (unsigned p = 0; p < a->n; p++)
                                assert_int_equal(extents_give(&e, &a->parts[p], 1), 0);
                        a->live = false;
                        gives++;
                }
                n_runs = stress_check(&e, allocs, used, runs);
        }
        /* Every path was taken, and often. */
        assert_true(takes > 1000 && multi > 100 && refused > 100);
        assert_true(gives > 1000 && bogus > 100);

        for (unsigned s = 0; s < STRESS_SLOTS; s++) {
                if (allocs[s].live) {
                        assert_int_equal(extents_give(&e, allocs[s].parts, allocs[s].n), 0);
                        allocs[s].live = false;
                }
        }
        n_runs = stress_check(&e, allocs, used, runs);
        assert_int_equal(e.avail, e.total);
        /* Each region one free range again: largest first, each taken in
         * one part, lands at its region's start. */
        assert_int_equal(take_one(&e, 50 * U), 37 * U);
        assert_int_equal(take_one(&e, 37 * U), 0);
        assert_int_equal(take_one(&e, 29 * U), 200 * U);
        assert_int_equal(e.avail, 0);
        extents_clear(&e);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_best_fit),
                cmocka_unit_test(test_best_fit_tie_lowest_offset),
                cmocka_unit_test(test_parts_never_cross_regions),
                cmocka_unit_test(test_coalesce_any_order),
                cmocka_unit_test(test_max_parts_enospc),
                cmocka_unit_test(test_avail_short_enospc),
                cmocka_unit_test(test_take_bad_len),
                cmocka_unit_test(test_add_bad_region),
                cmocka_unit_test(test_double_give),
                cmocka_unit_test(test_give_outside_regions),
                cmocka_unit_test(test_locate),
                cmocka_unit_test(test_stress),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
