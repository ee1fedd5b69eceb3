/*
 * test_parking — daemon/core/parking.c's accounting of a client's parked
 * buffers, on its own: no socket, no daemon. What is parked per device,
 * what was asked back (never twice for the same bytes, never more than is
 * parked), and what came back.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "parking.h"

#define MIB (1ull << 20)

static void test_mark(void **state)
{
        gmd_parking_owner o;

        (void)state;
        memset(&o, 0, sizeof(o));
        parking_mark(&o, 0, 4 * MIB, true);
        parking_mark(&o, 1, 2 * MIB, true);
        parking_mark(&o, 0, 4 * MIB, true);
        assert_int_equal(o.bytes, 10 * MIB);
        assert_int_equal(o.n, 3);
        assert_int_equal(o.on[0], 8 * MIB);
        assert_int_equal(o.on[1], 2 * MIB);
        parking_mark(&o, 0, 4 * MIB, false);
        assert_int_equal(o.bytes, 6 * MIB);
        assert_int_equal(o.n, 2);
        assert_int_equal(o.on[0], 4 * MIB);
}

static void test_ask_never_twice(void **state)
{
        gmd_parking_owner o;

        (void)state;
        memset(&o, 0, sizeof(o));
        parking_mark(&o, 0, 4 * MIB, true);
        parking_mark(&o, 0, 4 * MIB, true);
        assert_int_equal(parking_ask(&o, 0, 3 * MIB), 3 * MIB);
        assert_int_equal(parking_ask(&o, 0, 10 * MIB), 5 * MIB);   /* what is left */
        assert_int_equal(parking_ask(&o, 0, 1 * MIB), 0);
        assert_int_equal(parking_ask(&o, 1, 0), 0);                 /* nothing there */
        assert_int_equal(o.asked[0], 8 * MIB);
}

static void test_ask_all(void **state)
{
        gmd_parking_owner o;

        (void)state;
        memset(&o, 0, sizeof(o));
        parking_mark(&o, 1, 6 * MIB, true);
        assert_int_equal(parking_ask(&o, 1, 0), 6 * MIB);
}

static void test_returned_and_unparked(void **state)
{
        gmd_parking_owner o;

        (void)state;
        memset(&o, 0, sizeof(o));
        parking_mark(&o, 0, 4 * MIB, true);
        parking_mark(&o, 0, 4 * MIB, true);
        parking_ask(&o, 0, 0);
        /* One came back: asked for the other only. */
        parking_returned(&o, 0, 4 * MIB);
        parking_mark(&o, 0, 4 * MIB, false);
        assert_int_equal(o.asked[0], 4 * MIB);
        /* The other was unparked by its client instead: what was asked
         * back cannot be more than what is parked. */
        parking_mark(&o, 0, 4 * MIB, false);
        assert_int_equal(o.asked[0], 0);
        parking_returned(&o, 0, 4 * MIB);
        assert_int_equal(o.asked[0], 0);
}

/* An ask left unanswered past the timeout is overdue; a return (any)
 * shows the client is answering and starts the clock again. */
static void test_overdue(void **state)
{
        gmd_parking_owner o = { 0 };
        uint64_t t;

        (void)state;
        parking_mark(&o, 0, 4 << 20, true);
        parking_mark(&o, 0, 4 << 20, true);
        assert_false(parking_overdue(&o, 0, o.asked_us[0] + 10000000, 1000));
        assert_int_equal(parking_ask(&o, 0, 0), 8 << 20);
        t = o.asked_us[0];
        assert_false(parking_overdue(&o, 0, t + 999, 1000));
        assert_true(parking_overdue(&o, 0, t + 1000, 1000));
        parking_returned(&o, 0, 4 << 20);
        assert_true(o.asked_us[0] >= t);
        assert_false(parking_overdue(&o, 0, o.asked_us[0] + 999, 1000));
        parking_returned(&o, 0, 4 << 20);
        assert_false(parking_overdue(&o, 0, o.asked_us[0] + 10000000, 1000));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_mark),
                cmocka_unit_test(test_ask_never_twice),
                cmocka_unit_test(test_ask_all),
                cmocka_unit_test(test_returned_and_unparked),
                cmocka_unit_test(test_overdue),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
