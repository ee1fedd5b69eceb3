/*
 * test_slice — daemon/core/slice.c, the bookkeeping of memory slices:
 * nobody's slice goes to the first waiting process; it runs
 * SLICE_WAIT_LENGTHS lengths until a request of the holder is served and
 * one length from then; a slice that is over passes to another waiting
 * process, one that runs does not; a length of 0 turns slices off; a
 * process that leaves gives its slices up; a slice ended early (its holder
 * idle) is nobody's, and the next waiter's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "slice.h"

#define L 1000

static void test_first_waiter_gets_nobodys_slice(void **state)
{
        gmd_slices t;
        uint64_t left = 0;

        (void)state;
        slices_init(&t, L);
        assert_int_equal(slice_holder(&t, 0, 5000, NULL), 0);
        assert_true(slice_update(&t, 0, 11, 3, 11, 3, 5000));
        assert_int_equal(slice_holder(&t, 0, 5000, &left), 11);
        assert_int_equal(t.on[0].priority, 3);
        /* Not served yet: it may wait for its room a few lengths. */
        assert_int_equal(left, SLICE_WAIT_LENGTHS * L);
        assert_int_equal(slice_holder(&t, 1, 5000, NULL), 0);
        assert_int_equal(t.passed, 1);
}

static void test_clock_starts_when_served(void **state)
{
        gmd_slices t;
        uint64_t left = 0;

        (void)state;
        slices_init(&t, L);
        slice_update(&t, 0, 11, 0, 11, 0, 5000);
        slice_served(&t, 0, 22, 5300);          /* not the holder */
        assert_int_equal(t.on[0].served_ms, 0);
        slice_served(&t, 0, 11, 5800);
        slice_served(&t, 0, 11, 5900);          /* the first counts */
        assert_int_equal(slice_holder(&t, 0, 6000, &left), 11);
        assert_int_equal(left, 800);
        assert_int_equal(slice_holder(&t, 0, 6799, NULL), 11);
        assert_int_equal(slice_holder(&t, 0, 6800, NULL), 0);
}

static void test_unserved_slice_ends(void **state)
{
        gmd_slices t;

        (void)state;
        slices_init(&t, L);
        slice_update(&t, 0, 11, 0, 11, 0, 5000);
        assert_int_equal(slice_holder(&t, 0, 5000 + SLICE_WAIT_LENGTHS * L - 1, NULL), 11);
        assert_int_equal(slice_holder(&t, 0, 5000 + SLICE_WAIT_LENGTHS * L, NULL), 0);
}

static void test_passes_only_when_over(void **state)
{
        gmd_slices t;

        (void)state;
        slices_init(&t, L);
        slice_update(&t, 0, 11, 0, 11, 0, 5000);
        slice_served(&t, 0, 11, 5000);
        /* Running: another waiter does not take it. */
        assert_false(slice_update(&t, 0, 22, 0, 22, 0, 5500));
        assert_int_equal(slice_holder(&t, 0, 5500, NULL), 11);
        /* Over, and only the holder waits: it stays its (and over). */
        assert_false(slice_update(&t, 0, 11, 0, 0, 0, 6500));
        assert_int_equal(t.on[0].pid, 11);
        assert_int_equal(slice_holder(&t, 0, 6500, NULL), 0);
        /* Over, another waits: it passes, fresh. */
        assert_true(slice_update(&t, 0, 11, 0, 22, 5, 6600));
        assert_int_equal(slice_holder(&t, 0, 6600, NULL), 22);
        assert_int_equal(t.on[0].priority, 5);
        assert_int_equal(t.on[0].served_ms, 0);
        assert_int_equal(t.passed, 2);
}

/* What gives way to a running slice: other processes of its priority or
 * lower, not the holder, not a higher priority, nobody once it is over. */
static void test_who_gives_way(void **state)
{
        gmd_slices t;
        uint64_t left = 0;

        (void)state;
        slices_init(&t, L);
        slice_update(&t, 0, 11, 5, 11, 5, 5000);
        slice_served(&t, 0, 11, 5000);
        assert_int_equal(slice_over(&t, 0, 22, 5, 5400, &left), 11);
        assert_int_equal(left, 600);
        assert_int_equal(slice_over(&t, 0, 22, 0, 5400, NULL), 11);
        assert_int_equal(slice_over(&t, 0, 11, 0, 5400, NULL), 0);
        assert_int_equal(slice_over(&t, 0, 22, 6, 5400, NULL), 0);
        assert_int_equal(slice_over(&t, 0, 22, 0, 6000, NULL), 0);
}

static void test_off_and_forget(void **state)
{
        gmd_slices t;

        (void)state;
        slices_init(&t, 0);
        assert_false(slice_update(&t, 0, 11, 0, 11, 0, 5000));
        assert_int_equal(slice_holder(&t, 0, 5000, NULL), 0);
        t.length_ms = L;                        /* a reload turns them on */
        assert_true(slice_update(&t, 0, 11, 0, 11, 0, 5000));
        assert_true(slice_update(&t, 2, 11, 0, 11, 0, 5000));
        slice_forget(&t, 11);
        assert_int_equal(slice_holder(&t, 0, 5000, NULL), 0);
        assert_int_equal(slice_holder(&t, 2, 5000, NULL), 0);
        /* Unknown pids hold nothing. */
        assert_false(slice_update(&t, 0, 0, 0, 0, 0, 5000));
        assert_false(slice_update(&t, GMD_MAX_DEVICES, 11, 0, 11, 0, 5000));
}

static void test_end(void **state)
{
        gmd_slices t;

        (void)state;
        slices_init(&t, L);
        assert_true(slice_update(&t, 0, 11, 0, 12, 0, 5000));
        assert_true(slice_update(&t, 1, 11, 0, 12, 0, 5000));
        slice_served(&t, 0, 11, 5000);
        slice_end(&t, 0);
        assert_int_equal(slice_holder(&t, 0, 5001, NULL), 0);
        assert_int_equal(slice_over(&t, 0, 12, 0, 5001, NULL), 0);
        /* The other device's slice runs on. */
        assert_int_equal(slice_holder(&t, 1, 5001, NULL), 11);
        /* Nobody's now: the first waiter's, whoever held it before. */
        assert_true(slice_update(&t, 0, 12, 0, 11, 0, 5002));
        assert_int_equal(slice_holder(&t, 0, 5002, NULL), 12);
        assert_int_equal(t.passed, 3);
        slice_end(&t, GMD_MAX_DEVICES);         /* out of range: nothing */
}

/* The clock stops while the holder waits behind a higher priority
 * (slice_pause), SLICE_PAUSE_LENGTHS lengths at most in all. */
static void test_pause(void **state)
{
        gmd_slices t;
        uint64_t left = 0, at;

        (void)state;
        slices_init(&t, L);
        assert_false(slice_pause(&t, 0, true, 5000));  /* nobody's */
        assert_true(slice_update(&t, 0, 11, 0, 11, 0, 5000));
        slice_served(&t, 0, 11, 5000);
        assert_true(slice_pause(&t, 0, true, 5000 + L / 2));
        assert_false(slice_pause(&t, 0, true, 5000 + L));  /* already */
        assert_true(slice_paused(&t, 0));
        /* Half ran; three lengths later it still has the other half. */
        at = 5000 + L / 2 + 3 * L;
        assert_int_equal(slice_holder(&t, 0, at, &left), 11);
        assert_int_equal(left, L / 2);
        assert_true(slice_pause(&t, 0, false, at));
        assert_false(slice_paused(&t, 0));
        assert_int_equal(slice_holder(&t, 0, at + L / 2 - 1, NULL), 11);
        assert_int_equal(slice_holder(&t, 0, at + L / 2, NULL), 0);
        /* Served during a pause: its clock starts when the pause ends. */
        assert_true(slice_update(&t, 0, 12, 0, 12, 0, 30000));
        assert_true(slice_pause(&t, 0, true, 30000));
        slice_served(&t, 0, 12, 30000 + L);
        assert_int_equal(slice_holder(&t, 0, 30000 + 2 * L, &left), 12);
        assert_int_equal(left, L);
        assert_true(slice_pause(&t, 0, false, 30000 + 2 * L));
        assert_int_equal(slice_holder(&t, 0, 30000 + 3 * L - 1, NULL), 12);
        assert_int_equal(slice_holder(&t, 0, 30000 + 3 * L, NULL), 0);
        /* Paused for good: it ends SLICE_PAUSE_LENGTHS lengths late. */
        assert_true(slice_update(&t, 0, 11, 0, 11, 0, 50000));
        slice_served(&t, 0, 11, 50000);
        assert_true(slice_pause(&t, 0, true, 50000));
        at = 50000 + SLICE_PAUSE_LENGTHS * L + L;
        assert_int_equal(slice_holder(&t, 0, at - 1, NULL), 11);
        assert_int_equal(slice_holder(&t, 0, at, NULL), 0);
        /* A slice given anew starts unpaused. */
        assert_true(slice_update(&t, 0, 12, 0, 12, 0, 200000));
        assert_false(slice_paused(&t, 0));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_first_waiter_gets_nobodys_slice),
                cmocka_unit_test(test_clock_starts_when_served),
                cmocka_unit_test(test_unserved_slice_ends),
                cmocka_unit_test(test_passes_only_when_over),
                cmocka_unit_test(test_who_gives_way),
                cmocka_unit_test(test_off_and_forget),
                cmocka_unit_test(test_end),
                cmocka_unit_test(test_pause),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
