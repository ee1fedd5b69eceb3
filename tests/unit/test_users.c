/*
 * test_users — daemon/core/users.c on its own: the per-user records
 * (made with a user's first connection, freed with the last reference)
 * and the loop's turns between users (deficit round robin): a user has a
 * quantum of loop time per turn, one whose request took longer owes the
 * difference and waits out the turns that repay it, credit does not pile
 * up while a user is idle, and one user's debt is nobody else's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "users.h"

#define Q 1000      /* the quantum of these tests, ns */

static void test_records(void **state)
{
        gmd_users users;
        gmd_user *a, *a2, *b;

        (void)state;
        users_init(&users, Q);
        assert_null(users_find(&users, 1000));
        a = users_hold(&users, 1000);
        a2 = users_hold(&users, 1000);
        b = users_hold(&users, 1001);
        assert_ptr_equal(a, a2);
        assert_ptr_not_equal(a, b);
        assert_int_equal(users.n, 2);
        assert_int_equal(a->refs, 2);
        assert_ptr_equal(users_find(&users, 1001), b);
        users_release(&users, a);
        assert_ptr_equal(users_find(&users, 1000), a);
        users_release(&users, a2);
        assert_null(users_find(&users, 1000));
        assert_int_equal(users.n, 1);
        users_release(&users, b);
        assert_int_equal(users.n, 0);
        users_release(&users, NULL);    /* a session that never had one */
}

/* Within a turn a user runs until its quantum is used. */
static void test_quantum_per_turn(void **state)
{
        gmd_users users;
        gmd_user *a;
        unsigned ran = 0;

        (void)state;
        users_init(&users, Q);
        a = users_hold(&users, 1);
        while (users_may_run(&users, a) && ran < 100) {
                users_charge(a, Q / 4);
                ran++;
        }
        assert_int_equal(ran, 4);
        assert_int_equal(a->deferred, 1);
        users_next_turn(&users);
        assert_true(users_may_run(&users, a));
        users_release(&users, a);
}

/* A request of 3.5 quanta: the user waits three turns, runs in the
 * fourth; the other user runs in every one of them. */
static void test_debt_is_repaid_over_turns(void **state)
{
        gmd_users users;
        gmd_user *a, *b;
        unsigned turns = 0;

        (void)state;
        users_init(&users, Q);
        a = users_hold(&users, 1);
        b = users_hold(&users, 2);
        assert_true(users_may_run(&users, a));
        users_charge(a, 3 * Q + Q / 2);
        for (;;) {
                users_next_turn(&users);
                turns++;
                assert_true(users_may_run(&users, b));
                users_charge(b, Q / 2);
                if (users_may_run(&users, a))
                        break;
                assert_true(turns < 10);
        }
        assert_int_equal(turns, 3);
        assert_int_equal(a->credit_ns, Q / 2);
        users_release(&users, a);
        users_release(&users, b);
}

/* Idle turns give back what was owed, never more than a quantum. */
static void test_credit_does_not_pile_up(void **state)
{
        gmd_users users;
        gmd_user *a;

        (void)state;
        users_init(&users, Q);
        a = users_hold(&users, 1);
        for (int i = 0; i < 1000; i++)
                users_next_turn(&users);
        assert_true(users_may_run(&users, a));
        assert_int_equal(a->credit_ns, Q);
        users_charge(a, 10 * Q);
        for (int i = 0; i < 1000; i++)
                users_next_turn(&users);
        assert_true(users_may_run(&users, a));
        assert_int_equal(a->credit_ns, Q);
        users_release(&users, a);
}

/* A request that took very long is owed USERS_MAX_OWED_NS at most. */
static void test_debt_is_bounded(void **state)
{
        gmd_users users;
        gmd_user *a;

        (void)state;
        users_init(&users, Q);
        a = users_hold(&users, 1);
        users_charge(a, UINT64_MAX);
        users_charge(a, UINT64_MAX);
        assert_int_equal(a->credit_ns, -USERS_MAX_OWED_NS);
        users_release(&users, a);
}

/* Quantum 0 ([limits] user_turn_us = 0): no turns, whatever is owed. */
static void test_turns_off(void **state)
{
        gmd_users users;
        gmd_user *a;

        (void)state;
        users_init(&users, Q);
        a = users_hold(&users, 1);
        users_charge(a, 100 * Q);
        assert_false(users_may_run(&users, a));
        users_set_quantum(&users, 0);
        assert_true(users_may_run(&users, a));
        users_set_quantum(&users, Q);
        assert_false(users_may_run(&users, a));
        users_release(&users, a);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_records),
                cmocka_unit_test(test_quantum_per_turn),
                cmocka_unit_test(test_debt_is_repaid_over_turns),
                cmocka_unit_test(test_credit_does_not_pile_up),
                cmocka_unit_test(test_debt_is_bounded),
                cmocka_unit_test(test_turns_off),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
