/*
 * test_waits — daemon/core/waits.c, the MSG_WAIT registry of a session, on its
 * own: no socket, no daemon. Waits are answered when the caller says they
 * are met, in order, once; a deadline answers through the wait's own
 * expire function; dropping them all answers none; the count follows.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "waits.h"

static uint32_t answered[8], expired[8];
static unsigned n_answered, n_expired;
static uint32_t met_id;         /* the request whose wait is met; 0: all */

static bool met(const gmd_move_wait *w)
{
        return met_id == 0 || w->request_id == met_id;
}

static void answer(gmd_move_wait *w)
{
        answered[n_answered++] = w->request_id;
}

static void expire(gmd_move_wait *w)
{
        expired[n_expired++] = w->request_id;
}

typedef struct fixture {
        uv_loop_t loop;
        gmd_waits ws;
        int owner;
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        waits_init(&f->ws);
        n_answered = n_expired = 0;
        met_id = 0;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        waits_drop_all(&f->ws);
        uv_run(&f->loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&f->loop), 0);
        free(f);
        return 0;
}

static gmd_move_wait *add(fixture *f, uint32_t id, int64_t timeout_ms)
{
        static const uint64_t ids[] = { 3, 5 };
        gmd_move_wait *w = NULL;

        assert_int_equal(waits_add(&f->ws, &f->loop, &f->owner, id, ids, 2,
                                   timeout_ms, expire, &w), 0);
        assert_ptr_equal(w->owner, &f->owner);
        assert_int_equal(w->n_ids, 2);
        assert_int_equal(w->ids[1], 5);
        waits_arm(w);
        return w;
}

static void test_answer_met_once(void **state)
{
        fixture *f = *state;

        add(f, 1, -1);
        add(f, 2, -1);
        add(f, 3, -1);
        assert_int_equal(f->ws.n, 3);
        met_id = 2;
        waits_answer_met(&f->ws, met, answer);
        assert_int_equal(n_answered, 1);
        assert_int_equal(answered[0], 2);
        assert_int_equal(f->ws.n, 2);
        met_id = 0;
        waits_answer_met(&f->ws, met, answer);
        assert_int_equal(n_answered, 3);
        assert_int_equal(answered[1], 1);
        assert_int_equal(answered[2], 3);
        assert_int_equal(f->ws.n, 0);
        waits_answer_met(&f->ws, met, answer);
        assert_int_equal(n_answered, 3);
}

static void test_deadline(void **state)
{
        fixture *f = *state;

        add(f, 9, 5);
        add(f, 10, -1);
        while (n_expired == 0)
                uv_run(&f->loop, UV_RUN_ONCE);
        assert_int_equal(expired[0], 9);
        assert_int_equal(f->ws.n, 1);
}

static void test_done_twice_and_drop_all(void **state)
{
        fixture *f = *state;
        gmd_move_wait *w = add(f, 4, 1000);

        add(f, 5, 1000);
        waits_done(w);
        waits_done(w);
        assert_int_equal(f->ws.n, 1);
        waits_drop_all(&f->ws);
        assert_int_equal(f->ws.n, 0);
        assert_int_equal(n_answered, 0);
        assert_int_equal(n_expired, 0);
}

static void test_all_buffers(void **state)
{
        fixture *f = *state;
        gmd_move_wait *w = NULL;

        assert_int_equal(waits_add(&f->ws, &f->loop, &f->owner, 6, NULL, 0, -1,
                                   expire, &w), 0);
        assert_null(w->ids);            /* every buffer of the owner */
        assert_int_equal(w->n_ids, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_answer_met_once, setup, teardown),
                cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
                cmocka_unit_test_setup_teardown(test_done_twice_and_drop_all,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_all_buffers, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
