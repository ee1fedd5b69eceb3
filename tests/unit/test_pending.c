/*
 * test_pending — daemon/core/pending.h's timed marks on a real libuv loop:
 * each mark asked for later runs at its own time, the soonest first, also
 * when a later one was asked before it (one timer kept the first time
 * asked: a 400 ms mark behind a 5 s one waited the 5 s); marks within a
 * millisecond of each other run together; past PENDING_LATERS marks a new
 * one joins the last and runs no later than asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "pending.h"

static struct {
        gmd_pending p;
        uv_loop_t loop;
        uint64_t start;
        unsigned runs;
        unsigned work[16];      /* what each pass saw */
        uint64_t at[16];        /* when, ms after start */
} t;

static void on_check(uv_check_t *check)
{
        (void)check;
        if (t.runs < 16) {
                t.work[t.runs] = t.p.work;
                t.at[t.runs] = uv_now(&t.loop) - t.start;
        }
        t.runs++;
        t.p.work = 0;
        uv_check_stop(&t.p.check);
        uv_idle_stop(&t.p.idle);
        /* Done with every timed mark: let the loop end. */
        if (!t.p.n_laters) {
                uv_close((uv_handle_t *)&t.p.check, NULL);
                uv_close((uv_handle_t *)&t.p.idle, NULL);
                uv_close((uv_handle_t *)&t.p.later, NULL);
        }
}

static void on_idle(uv_idle_t *idle)
{
        (void)idle;
}

static int setup(void **state)
{
        (void)state;
        memset(&t, 0, sizeof(t));
        assert_int_equal(uv_loop_init(&t.loop), 0);
        assert_int_equal(uv_check_init(&t.loop, &t.p.check), 0);
        assert_int_equal(uv_idle_init(&t.loop, &t.p.idle), 0);
        assert_int_equal(uv_timer_init(&t.loop, &t.p.later), 0);
        t.p.run = on_check;
        t.p.spin = on_idle;
        t.p.open = true;
        uv_update_time(&t.loop);
        t.start = uv_now(&t.loop);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        uv_run(&t.loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&t.loop), 0);
        return 0;
}

static void test_sooner_mark_after_later_one(void **state)
{
        (void)state;
        pending_mark_after(&t.p, PENDING_ROOM, 1000);
        pending_mark_after(&t.p, PENDING_EVICT, 40);
        uv_run(&t.loop, UV_RUN_DEFAULT);
        assert_int_equal(t.runs, 2);
        assert_int_equal(t.work[0], PENDING_EVICT);
        assert_in_range(t.at[0], 40, 900);
        assert_int_equal(t.work[1], PENDING_ROOM);
        assert_in_range(t.at[1], 1000, 10000);
}

static void test_marks_close_together_run_together(void **state)
{
        (void)state;
        pending_mark_after(&t.p, PENDING_ROOM, 30);
        pending_mark_after(&t.p, PENDING_EVICT, 30);
        uv_run(&t.loop, UV_RUN_DEFAULT);
        assert_int_equal(t.runs, 1);
        assert_int_equal(t.work[0], PENDING_ROOM | PENDING_EVICT);
}

static void test_full_joins_the_last(void **state)
{
        (void)state;
        for (unsigned i = 0; i < PENDING_LATERS; i++)
                pending_mark_after(&t.p, PENDING_ROOM, 20 + 20 * i);
        assert_int_equal(t.p.n_laters, PENDING_LATERS);
        /* One more, past the last: it joins the last and runs with it,
         * sooner than asked, never later. */
        pending_mark_after(&t.p, PENDING_WAITS, 30 + 20 * PENDING_LATERS);
        assert_int_equal(t.p.n_laters, PENDING_LATERS);
        uv_run(&t.loop, UV_RUN_DEFAULT);
        assert_int_equal(t.runs, PENDING_LATERS);
        assert_int_equal(t.work[PENDING_LATERS - 1], PENDING_ROOM | PENDING_WAITS);
        assert_true(t.at[PENDING_LATERS - 1] >= 20 * PENDING_LATERS);
        for (unsigned i = 1; i < PENDING_LATERS; i++)
                assert_true(t.at[i] >= t.at[i - 1]);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_sooner_mark_after_later_one,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_marks_close_together_run_together,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_full_joins_the_last,
                                                setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
