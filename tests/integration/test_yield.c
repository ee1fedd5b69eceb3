/*
 * test_yield — GMD_ALLOC_YIELD against the real gpu-memd (sim backend, one
 * device of 64 MiB in 2 MiB steps): two processes that each hold memory
 * in use and each wait for the rest of the pool both complete, with every
 * byte they held intact, where without the flag they wait each other out;
 * what a waiting process lent is evicted for another process's plain
 * allocation and is back, bytes intact, when its own call times out; and
 * it is never evicted for the lender's own request; an acquire that waits
 * with GMD_ACQUIRE_YIELD lends the same way. A higher priority's loan goes
 * to a lower priority's request only when the two would otherwise wait
 * for each other, after a bound.
 *
 * The mapping cache is off, so a free gives memory straight back and the
 * pool's bytes are exactly what the test holds.
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

#include "gpumem.h"
#include "harness.h"
#include "pattern.h"

typedef harness_fixture fixture;

#define LEND_WORDS "lends its"

static int setup(void **state)
{
        setenv(GMD_CACHE_ENV, "0", 1);
        return harness_setup(state);
}

static void start(fixture *f)
{
        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "yield");
}

static harness_proc *spawn_ready(fixture *f, const char *const *args)
{
        harness_proc *p = harness_track_client(f, args);
        char *line = harness_read_line(p, "ready", 5000);

        if (!line)
                fail_msg("%s did not get ready; daemon log:\n%s", args[0],
                         harness_read_log(&f->h));
        free(line);
        return p;
}

/* The child's exit and its "rc" line; fails the test unless it exited 0. */
static void expect_child_ok(fixture *f, harness_proc *p)
{
        char *out = NULL;
        int code = harness_finish(p, &out, 20000);

        if (code != 0)
                fail_msg("child exited %d:\n%s\ndaemon log:\n%s", code,
                         out ? out : "", harness_read_log(&f->h));
        assert_non_null(strstr(out, "rc 0"));
        free(out);
}

/* (1) This process holds 24 MiB and wants 40, the other holds 40 and wants
 * 24: each needs the whole pool. With the flag both are served, one after
 * the other, and what each held reads back intact. */
static void test_two_waiters_both_complete(void **state)
{
        fixture *f = *state;
        const char *args[] = { "yield", "40M", "24M", "20000", NULL };
        gmd_buffer *held = NULL, *more = NULL;
        harness_proc *p;

        start(f);
        OK(gmd_alloc(f->client, 24 * MiB, 0, 0, GMD_NO_WAIT, &held));
        pattern_fill(held, 5);
        p = spawn_ready(f, args);
        /* Let the other's wait begin first: either order must work. */
        harness_sleep_ms(100);
        if (gmd_alloc(f->client, 40 * MiB, 0, GMD_ALLOC_YIELD, 20000, &more) != 0) {
                fprintf(stderr, "daemon log:\n%s\n", harness_read_log(&f->h));
                fail_msg("alloc: %s", gmd_last_error());
        }
        pattern_check(held, 5, "the buffer this process lent");
        pattern_fill(more, 6);
        pattern_check(more, 6, "the new buffer");
        OK(gmd_free(f->client, more));
        OK(gmd_free(f->client, held));
        expect_child_ok(f, p);
        assert_true(harness_log_count(&f->h, LEND_WORDS) >= 2);
}

/* (2) The same two without the flag wait each other out: the deadlock the
 * flag is for. The timeout says so, naming both processes. */
static void test_without_flag_they_wait(void **state)
{
        fixture *f = *state;
        const char *args[] = { "yield", "40M", "24M", "3000", "plain", NULL };
        gmd_buffer *held = NULL, *more = NULL;
        harness_proc *p;
        char pid[32], *line;
        int r;

        start(f);
        OK(gmd_alloc(f->client, 24 * MiB, 0, 0, GMD_NO_WAIT, &held));
        p = spawn_ready(f, args);
        harness_sleep_ms(100);          /* its wait has begun */
        r = gmd_alloc(f->client, 40 * MiB, 0, 0, 500, &more);
        assert_int_equal(r, GMD_ETIMEDOUT);
        snprintf(pid, sizeof(pid), "%d", (int)p->pid);
        if (!strstr(gmd_last_error(), "they wait for each other") ||
            !strstr(gmd_last_error(), pid))
                fail_msg("error: '%s'", gmd_last_error());
        assert_int_equal(harness_log_count(&f->h, LEND_WORDS), 0);
        OK(gmd_free(f->client, held));  /* the other is served now */
        line = harness_read_line(p, "rc 0", 5000);
        assert_non_null(line);
        free(line);
}

/* (3) What a waiting process lent is evicted for another process's plain
 * allocation, which is served; the lender's own call times out (another
 * process still holds the rest) and returns with its buffers back in
 * VRAM, bytes intact. */
static void test_lent_evicted_for_other_and_back(void **state)
{
        fixture *f = *state;
        const char *hold[] = { "hold", "24M", NULL };
        const char *plain[] = { "alloc", "16M", "10000", NULL };
        gmd_buffer *a = NULL, *b = NULL, *c = NULL;
        harness_proc *other;
        char *line;
        int r;

        harness_start_small_metrics(&f->h, NULL);
        f->client = harness_client(&f->h, "yield");
        OK(gmd_alloc(f->client, 24 * MiB, 0, 0, GMD_NO_WAIT, &a));
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &b));
        pattern_fill(a, 11);
        pattern_fill(b, 12);
        spawn_ready(f, hold);           /* the pool is full */
        other = harness_track_client(f, plain);
        line = harness_read_line(other, "connected", 5000);
        free(line);
        /* The plain allocation waits for room nobody releases... */
        harness_sleep_ms(200);
        /* ...until this one waits too, lending a and b: one of them goes
         * out for the plain allocation. */
        r = gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_YIELD, 1500, &c);
        assert_int_equal(r, GMD_ETIMEDOUT);
        expect_child_ok(f, other);
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(a, 11, "lent buffer a");
        pattern_check(b, 12, "lent buffer b");
        if (!harness_log_count(&f->h, "evicting buffer"))
                fail_msg("nothing lent was evicted; daemon log:\n%s",
                         harness_read_log(&f->h));
        /* One loan; what moved came back, the rest stayed. */
        assert_true(harness_metric(&f->h, "gpumemd_loans_total") == 1);
        assert_true(harness_metric(&f->h,
                    "gpumemd_lent_buffers_total{outcome=\"moved\"}") +
                    harness_metric(&f->h,
                    "gpumemd_lent_buffers_total{outcome=\"stayed\"}") == 2);
        assert_true(harness_metric(&f->h,
                    "gpumemd_lent_buffers_total{outcome=\"moved\"}") >= 1);
        /* Still its lease: usable and released as before. */
        OK(gmd_release(f->client, a));
        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, b));
}

/* (4) Nothing but its own lent buffers could make the room: they are not
 * moved for its own request (they would have to come back at once). */
static void test_own_lent_not_evicted_for_itself(void **state)
{
        fixture *f = *state;
        const char *hold[] = { "hold", "24M", NULL };
        gmd_buffer *a = NULL, *c = NULL;
        int r;

        start(f);
        OK(gmd_alloc(f->client, 40 * MiB, 0, 0, GMD_NO_WAIT, &a));
        pattern_fill(a, 21);
        spawn_ready(f, hold);
        r = gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_YIELD, 400, &c);
        assert_int_equal(r, GMD_ETIMEDOUT);
        assert_int_equal(harness_log_count(&f->h, "evicting buffer"), 0);
        pattern_check(a, 21, "lent buffer");
        OK(gmd_free(f->client, a));
}

/* (5) An acquire that waits with GMD_ACQUIRE_YIELD lends the same way.
 * This process holds 40 MiB in use and brings back 16 it paged out; the
 * other holds the rest for good, and a third waits for 16 with a plain
 * allocation: what this process lent goes out for the third, which is
 * served, and this acquire times out (the second never frees) and
 * returns with everything back, bytes intact. Without the flag the third
 * would wait out its 5 s. */
static void test_acquire_lends(void **state)
{
        fixture *f = *state;
        const char *hold[] = { "hold", "24M", NULL };
        const char *plain[] = { "alloc", "16M", "5000", NULL };
        gmd_buffer *held = NULL, *out;
        harness_proc *third;
        char *line;
        int r;

        start(f);
        out = harness_released_buffer(f->client, 16 * MiB, 31);
        harness_page_out(f->client, out);
        OK(gmd_alloc(f->client, 40 * MiB, 0, 0, GMD_NO_WAIT, &held));
        pattern_fill(held, 32);
        spawn_ready(f, hold);           /* the pool is full */
        third = harness_track_client(f, plain);
        line = harness_read_line(third, "connected", 5000);
        free(line);
        harness_sleep_ms(200);
        r = gmd_acquire_flags(f->client, out, 1500, GMD_ACQUIRE_YIELD);
        assert_int_equal(r, GMD_ETIMEDOUT);
        expect_child_ok(f, third);
        assert_int_equal(gmd_buffer_tier(held), GMD_TIER_VRAM);
        pattern_check(held, 32, "the buffer this process lent");
        assert_int_equal(harness_log_count(&f->h, LEND_WORDS), 1);
        OK(gmd_free(f->client, held));  /* room for the one it acquired */
        OK(gmd_acquire(f->client, out, 5000));
        pattern_check(out, 31, "the buffer acquired");
        OK(gmd_free(f->client, out));
}

/* (6) What a process of a higher priority lends is no room for a lower
 * priority's request (evict.c: it goes out only for requests of the
 * lender's priority or above), so a lower priority's allocation that only
 * such a loan could serve does not hold its device (waitq.h) once it has
 * waited wait_hold_ms: an allocation of its priority that fits beside it
 * is served. Before, that loan counted as room that could be made, the
 * waiting allocation held the device, and the one that fit timed out. */
static void test_higher_loan_no_room_for_lower(void **state)
{
        fixture *f = *state;
        const char *hold[] = { "hold", "20M", NULL };
        const char *lender[] = { "yield", "40M", "16M", "5000", NULL };
        const char *waiter[] = { "alloc", "24M", "5000", NULL };
        gmd_buffer *small = NULL;
        harness_proc *w;
        char *line;
        int r;

        harness_start_small(&f->h, "[users]\nmax_priority = 100\n"
                                   "[limits]\nwait_hold_ms = 200\n");
        f->client = harness_client(&f->h, "yield");
        spawn_ready(f, hold);                   /* 4 MiB left free */
        /* Priority 10: holds 40 MiB in use, waits for 16 lending them. */
        setenv(GMD_PRIORITY_ENV, "10", 1);
        spawn_ready(f, lender);
        unsetenv(GMD_PRIORITY_ENV);
        harness_sleep_ms(100);                  /* its wait, its loan */
        /* Priority 0: waits for 24 MiB, which only the loan could make. */
        w = harness_track_client(f, waiter);
        line = harness_read_line(w, "connected", 5000);
        free(line);
        harness_sleep_ms(500);                  /* past wait_hold_ms */
        r = gmd_alloc(f->client, 2 * MiB, 0, 0, 1500, &small);
        if (r != 0)
                fail_msg("2 MiB beside 4 free: %s; daemon log:\n%s",
                         gmd_last_error(), harness_read_log(&f->h));
        assert_int_equal(harness_log_count(&f->h, "evicting buffer"), 0);
        OK(gmd_free(f->client, small));
}

/* (7) The lock-up (6) could make: this process (priority 0) holds 20 MiB
 * in use and waits, without lending, for 24 MiB that only the loan of a
 * priority-10 process could make, and that process waits, lending its 40
 * MiB, for 16 MiB that only this process's 20 could make. Each waited for
 * the other until this one timed out. Now this one inherits the loan once
 * it has waited a bound (1 s: evict.c, lent_inherits), is served well
 * before its timeout, and the other is served once this one is done, its
 * bytes intact. Before the bound the loan stays. */
static void test_lower_holder_inherits_loan(void **state)
{
        fixture *f = *state;
        const char *lender[] = { "yield", "40M", "16M", "20000", NULL };
        gmd_buffer *held = NULL, *more = NULL;
        harness_proc *p;
        uint64_t t0, took;
        int r;

        harness_start_small(&f->h, "[users]\nmax_priority = 100\n");
        f->client = harness_client(&f->h, "yield");
        OK(gmd_alloc(f->client, 20 * MiB, 0, 0, GMD_NO_WAIT, &held));
        pattern_fill(held, 41);
        setenv(GMD_PRIORITY_ENV, "10", 1);
        p = spawn_ready(f, lender);
        unsetenv(GMD_PRIORITY_ENV);
        harness_sleep_ms(100);                  /* its wait, its loan */
        /* Within the bound the loan stays: a short wait times out. */
        r = gmd_alloc(f->client, 24 * MiB, 0, 0, 500, &more);
        assert_int_equal(r, GMD_ETIMEDOUT);
        assert_int_equal(harness_log_count(&f->h, "evicting buffer"), 0);
        t0 = harness_now_ms();
        r = gmd_alloc(f->client, 24 * MiB, 0, 0, 10000, &more);
        took = harness_now_ms() - t0;
        if (r != 0)
                fail_msg("24 MiB: %s; daemon log:\n%s", gmd_last_error(),
                         harness_read_log(&f->h));
        if (took < 900 || took > 3000)
                fail_msg("served after %llu ms, not about the 1 s bound; "
                         "daemon log:\n%s", (unsigned long long)took,
                         harness_read_log(&f->h));
        assert_int_equal(harness_log_count(&f->h, "which waited"), 1);
        pattern_check(held, 41, "the buffer this process held");
        OK(gmd_free(f->client, more));
        OK(gmd_free(f->client, held));  /* the lender is served now */
        expect_child_ok(f, p);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, harness_teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                TEST(test_two_waiters_both_complete),
                TEST(test_without_flag_they_wait),
                TEST(test_lent_evicted_for_other_and_back),
                TEST(test_own_lent_not_evicted_for_itself),
                TEST(test_acquire_lends),
                TEST(test_higher_loan_no_room_for_lower),
                TEST(test_lower_holder_inherits_loan),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
