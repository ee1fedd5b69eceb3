/*
 * test_host_arena — daemon/backend/host_arena.c, the host arena bookkeeping both
 * backends use, with no backend and no memory: pieces added as they are
 * built, takes served from one piece or in parts that never cross a
 * piece's edge, served and refused counted, a backend's host copy
 * described, spans given back (and a bad give refused), offsets located
 * across parts, the figures gpu-memctl shows, and a growth: one at a
 * time, after what was asked before is built, within the range's limit.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "host_arena.h"

#define U (UINT64_C(2) << 20)   /* the unit: 2 MiB */

/* An arena of 3 pieces of 4 units, target 16 units (one piece unbuilt). */
static void three_pieces(gmd_host_arena *a)
{
        host_arena_init(a, U, 16 * U, 16 * U);
        for (unsigned i = 0; i < 3; i++)
                assert_int_equal(host_arena_add(a, i * 4 * U, 4 * U), 0);
}

static void test_build_and_info(void **state)
{
        gmd_host_arena a;
        gmd_arena_info info;

        (void)state;
        host_arena_init(&a, U, 16 * U, 16 * U);
        host_arena_info(&a, &info);
        assert_int_equal(info.target, 16 * U);
        assert_int_equal(info.built, 0);
        assert_int_equal(info.free, 0);
        three_pieces(&a);
        host_arena_info(&a, &info);
        assert_int_equal(info.built, 12 * U);
        assert_int_equal(info.free, 12 * U);
        assert_int_equal(info.largest, 4 * U);   /* pieces never merge */
        assert_int_equal(info.served, 0);
        assert_int_equal(info.refused, 0);
        /* Overlapping a piece, or off the unit: refused, nothing added. */
        assert_int_equal(host_arena_add(&a, 2 * U, 4 * U), -EINVAL);
        assert_int_equal(host_arena_add(&a, 12 * U, U / 2), -EINVAL);
        host_arena_info(&a, &info);
        assert_int_equal(info.built, 12 * U);
        host_arena_clear(&a);
}

static void test_raise(void **state)
{
        gmd_host_arena a;
        gmd_arena_info info;

        (void)state;
        host_arena_init(&a, U, 8 * U, 20 * U);
        host_arena_info(&a, &info);
        assert_int_equal(info.limit, 20 * U);
        /* Also while the first pieces are still being built: the target
         * moves on and the builder keeps going. */
        assert_int_equal(host_arena_add(&a, 0, 4 * U), 0);
        assert_int_equal(host_arena_raise(&a, 4 * U), 4 * U);
        assert_int_equal(host_arena_add(&a, 4 * U, 4 * U), 0);
        host_arena_info(&a, &info);
        assert_int_equal(info.target, 12 * U);
        assert_int_equal(info.built, 8 * U);
        /* Off the unit, or past the limit: nothing. */
        assert_int_equal(host_arena_raise(&a, U / 2), 0);
        assert_int_equal(host_arena_raise(&a, 9 * U), 0);
        assert_int_equal(host_arena_raise(&a, 0), 0);
        /* Growths chain: two asked before either is built. */
        assert_int_equal(host_arena_raise(&a, 4 * U), 4 * U);
        assert_int_equal(host_arena_raise(&a, 2 * U), 2 * U);
        host_arena_info(&a, &info);
        assert_int_equal(info.target, 18 * U);
        assert_int_equal(info.built, 8 * U);
        assert_int_equal(host_arena_add(&a, 8 * U, 8 * U), 0);
        assert_int_equal(host_arena_add(&a, 16 * U, 2 * U), 0);
        assert_int_equal(host_arena_raise(&a, 2 * U), 2 * U);
        assert_int_equal(host_arena_add(&a, 18 * U, 2 * U), 0);
        /* At the limit. */
        assert_int_equal(host_arena_raise(&a, U), 0);
        /* A growth's size: whole pieces, cut to `most` in whole units,
         * nothing when that is less than asked. */
        assert_int_equal(host_arena_growth(&a, 3 * U, 100 * U, 4 * U), 4 * U);
        assert_int_equal(host_arena_growth(&a, 5 * U, 100 * U, 4 * U), 8 * U);
        assert_int_equal(host_arena_growth(&a, 5 * U, 6 * U + U / 2, 4 * U),
                         6 * U);
        assert_int_equal(host_arena_growth(&a, 5 * U, 4 * U, 4 * U), 0);
        assert_int_equal(host_arena_growth(&a, 0, 100 * U, 4 * U), 0);
        host_arena_info(&a, &info);
        assert_int_equal(info.target, 20 * U);
        assert_int_equal(info.free, 20 * U);
        assert_int_equal(info.largest, 8 * U);   /* pieces never merge */
        host_arena_clear(&a);
}

static void test_take_one_part(void **state)
{
        gmd_host_arena a;
        gmd_arena_span s = { 0 };
        gmd_arena_info info;
        uint64_t at, run;

        (void)state;
        three_pieces(&a);
        assert_int_equal(host_arena_take(&a, 3 * U, 4, &s), 0);
        assert_int_equal(s.n_parts, 1);
        assert_int_equal(s.parts[0].len, 3 * U);
        assert_int_equal(host_arena_locate(&s, U + 5, &at, &run), 0);
        assert_int_equal(at, s.parts[0].offset + U + 5);
        assert_int_equal(run, 2 * U - 5);
        assert_int_equal(host_arena_locate(&s, 3 * U, &at, &run), -ERANGE);
        assert_int_equal(run, 0);
        host_arena_info(&a, &info);
        assert_int_equal(info.free, 9 * U);
        assert_int_equal(info.served, 1);
        assert_int_equal(host_arena_give(&a, &s), 0);
        assert_null(s.parts);
        assert_int_equal(s.n_parts, 0);
        host_arena_info(&a, &info);
        assert_int_equal(info.free, 12 * U);
        assert_int_equal(info.largest, 4 * U);
        host_arena_clear(&a);
}

/* Larger than any piece: parts, none crossing a piece's edge, and the
 * bytes located in order across them. */
static void test_take_in_parts(void **state)
{
        gmd_host_arena a;
        gmd_arena_span s = { 0 };
        uint64_t at, run, total = 0;

        (void)state;
        three_pieces(&a);
        assert_int_equal(host_arena_take(&a, 10 * U, 8, &s), 0);
        assert_int_equal(s.n_parts, 3);
        for (unsigned i = 0; i < s.n_parts; i++) {
                uint64_t piece = s.parts[i].offset / (4 * U);

                assert_int_equal((s.parts[i].offset + s.parts[i].len - 1) / (4 * U),
                                 piece);
                assert_int_equal(host_arena_locate(&s, total, &at, &run), 0);
                assert_int_equal(at, s.parts[i].offset);
                assert_int_equal(run, s.parts[i].len);
                total += s.parts[i].len;
        }
        assert_int_equal(total, 10 * U);
        assert_int_equal(host_arena_give(&a, &s), 0);
        assert_int_equal(a.free.avail, 12 * U);
        host_arena_clear(&a);
}

static void test_refusals(void **state)
{
        gmd_host_arena a;
        gmd_arena_span s = { 0 }, t = { 0 }, untouched = { 0 };
        gmd_arena_info info;

        (void)state;
        three_pieces(&a);
        /* Bad sizes and part counts: -EINVAL, not counted as refused. */
        assert_int_equal(host_arena_take(&a, 0, 4, &s), -EINVAL);
        assert_int_equal(host_arena_take(&a, U + 1, 4, &s), -EINVAL);
        assert_int_equal(host_arena_take(&a, U, 0, &s), -EINVAL);
        assert_int_equal(host_arena_take(&a, U, 65, &s), -EINVAL);
        /* More than is free, or more parts than allowed: -ENOSPC. */
        assert_int_equal(host_arena_take(&a, 14 * U, 8, &s), -ENOSPC);
        assert_int_equal(host_arena_take(&a, 10 * U, 2, &s), -ENOSPC);
        assert_memory_equal(&s, &untouched, sizeof(s));
        host_arena_info(&a, &info);
        assert_int_equal(info.refused, 2);
        assert_int_equal(info.served, 0);
        assert_int_equal(info.free, 12 * U);
        /* Full: the next take is refused until a span comes back. */
        assert_int_equal(host_arena_take(&a, 12 * U, 3, &s), 0);
        assert_int_equal(host_arena_take(&a, U, 1, &t), -ENOSPC);
        assert_int_equal(host_arena_give(&a, &s), 0);
        assert_int_equal(host_arena_take(&a, U, 1, &t), 0);
        assert_int_equal(host_arena_give(&a, &t), 0);
        host_arena_info(&a, &info);
        assert_int_equal(info.refused, 3);
        assert_int_equal(info.served, 2);
        host_arena_clear(&a);
}

/* A backend's host copy: the span taken and the gmd_mem describing it;
 * refused, neither touched. */
static void test_take_mem(void **state)
{
        gmd_host_arena a;
        gmd_arena_span s = { 0 }, untouched_span = { 0 };
        gmd_mem m = { .fd = 7, .handle = 42 }, untouched_mem = m;

        (void)state;
        three_pieces(&a);
        assert_int_equal(host_arena_take_mem(&a, 1, 14 * U, 8, &s, &m), -ENOSPC);
        assert_memory_equal(&s, &untouched_span, sizeof(s));
        assert_memory_equal(&m, &untouched_mem, sizeof(m));
        assert_int_equal(host_arena_take_mem(&a, 1, 6 * U, 8, &s, &m), 0);
        assert_int_equal(s.n_parts, 2);
        assert_int_equal(m.fd, -1);
        assert_int_equal(m.size, 6 * U);
        assert_int_equal(m.tier, GMD_TIER_HOST);
        assert_int_equal(m.device, 1);
        assert_true(m.daemon_only);
        assert_false(m.shared);
        assert_int_equal(m.handle, 42);   /* the backend's own */
        assert_int_equal(host_arena_give(&a, &s), 0);
        assert_int_equal(a.free.avail, 12 * U);
        host_arena_clear(&a);
}

/* A span given back twice (a caller bug) is refused the second time, and
 * the arena's count of free bytes stays right. */
static void test_give_twice(void **state)
{
        gmd_host_arena a;
        gmd_arena_span s = { 0 }, copy;
        gmd_extent parts[1];

        (void)state;
        three_pieces(&a);
        assert_int_equal(host_arena_take(&a, 2 * U, 1, &s), 0);
        parts[0] = s.parts[0];
        assert_int_equal(host_arena_give(&a, &s), 0);
        copy = (gmd_arena_span){ .parts = malloc(sizeof(parts)), .n_parts = 1 };
        assert_non_null(copy.parts);
        copy.parts[0] = parts[0];
        assert_int_equal(host_arena_give(&a, &copy), -EINVAL);
        assert_null(copy.parts);
        assert_int_equal(a.free.avail, 12 * U);
        /* An empty span gives back nothing and is no error. */
        assert_int_equal(host_arena_give(&a, &s), 0);
        host_arena_clear(&a);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_build_and_info),
                cmocka_unit_test(test_raise),
                cmocka_unit_test(test_take_one_part),
                cmocka_unit_test(test_take_in_parts),
                cmocka_unit_test(test_refusals),
                cmocka_unit_test(test_take_mem),
                cmocka_unit_test(test_give_twice),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
