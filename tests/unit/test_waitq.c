/*
 * test_waitq — daemon/core/waitq.c on its own: no socket, no daemon, a libuv
 * loop for the deadline timers and ops that record what the queue asked
 * of the layer above. Rank order, arrival order within a rank, a waiter
 * that does not fit holding back its device only, the marks it leaves for
 * the scheduling pass, deadlines, and dropping a session's waiters.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "waitq.h"

#define MAX_CALLS 16

typedef struct fixture {
        uv_loop_t loop;
        gmd_pending pending;
        gmd_waitq q;
        gmd_waitq_owner owner_a, owner_b;
        /* what the ops saw */
        gmd_waiter *served[MAX_CALLS];
        unsigned n_served;
        gmd_waiter *expired[MAX_CALLS];
        unsigned n_expired;
        unsigned n_cancelled;
        int cancel_code;
        /* what serve answers, by device */
        int answer[2];
} fixture;

/* Sessions and buffers are only carried by the queue, never read. */
#define SESSION_A ((gmd_session *)0x1000)
#define SESSION_B ((gmd_session *)0x2000)
#define BUFFER(n) ((gmd_dbuffer *)(uintptr_t)(0x100 * (n)))

static int op_serve(void *ctx, gmd_waiter *w)
{
        fixture *f = ctx;

        if (f->answer[w->device] == 0 && f->n_served < MAX_CALLS)
                f->served[f->n_served++] = w;
        return f->answer[w->device];
}

static void op_expire(void *ctx, gmd_waiter *w)
{
        fixture *f = ctx;

        if (f->n_expired < MAX_CALLS)
                f->expired[f->n_expired++] = w;
}

static void op_cancel(void *ctx, gmd_waiter *w, int code, const char *message)
{
        fixture *f = ctx;

        (void)w;
        (void)message;
        f->n_cancelled++;
        f->cancel_code = code;
}

static const gmd_waitq_ops ops = {
        .serve = op_serve,
        .expire = op_expire,
        .cancel = op_cancel,
};

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        assert_int_equal(uv_loop_init(&f->loop), 0);
        /* Not open: a mark only sets its bit, which the tests read. */
        waitq_init(&f->q, &f->loop, &f->pending, &ops, f);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        waitq_fail_all(&f->q, 1, "teardown");
        uv_run(&f->loop, UV_RUN_DEFAULT);       /* the waiters' timers close */
        assert_int_equal(uv_loop_close(&f->loop), 0);
        free(f);
        return 0;
}

static gmd_waiter *add_alloc(fixture *f, gmd_session *s, gmd_waitq_owner *o,
                             unsigned device, uint64_t size, int64_t timeout_ms)
{
        gmd_list *last;

        assert_int_equal(waitq_add(&f->q, s, o, 7, size, size, device, 0,
                                   timeout_ms, 0), 0);
        /* The newest allocation sits behind every allocation before it. */
        for (last = f->q.waiters.prev; last != &f->q.waiters; last = last->prev) {
                gmd_waiter *w = container_of(last, gmd_waiter, link);

                if (w->rank == WAITQ_ALLOC)
                        return w;
        }
        fail();
        return NULL;
}

static gmd_waiter *add_move_in(fixture *f, unsigned n, unsigned device,
                               waitq_rank rank)
{
        gmd_waiter *w = NULL;

        assert_int_equal(waitq_add_move_in(&f->q, SESSION_A, BUFFER(n), 1 << 20,
                                           device, rank, &w), 0);
        assert_non_null(w);
        return w;
}

static void test_rank_order(void **state)
{
        fixture *f = *state;
        gmd_waiter *pre, *alloc1, *alloc2, *swap;

        pre = add_move_in(f, 1, 0, WAITQ_PREFETCH);
        alloc1 = add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        alloc2 = add_alloc(f, SESSION_B, &f->owner_b, 0, 8192, -1);
        swap = add_move_in(f, 2, 0, WAITQ_SWAP_IN);

        assert_int_equal(waitq_count(&f->q), 4);
        assert_int_equal(waitq_demand(&f->q, 0), 2 * (1 << 20) + 4096 + 8192);
        assert_int_equal(f->owner_a.n_waiting, 1);
        assert_false(waitq_serve(&f->q));
        assert_int_equal(f->n_served, 4);
        assert_ptr_equal(f->served[0], swap);
        assert_ptr_equal(f->served[1], alloc1);
        assert_ptr_equal(f->served[2], alloc2);
        assert_ptr_equal(f->served[3], pre);
        assert_true(waitq_empty(&f->q));
        assert_int_equal(f->owner_a.n_waiting, 0);
        assert_int_equal(f->owner_b.n_waiting, 0);
}

static void test_blocked_device_holds_back_only_itself(void **state)
{
        fixture *f = *state;
        gmd_waiter *other;

        add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        other = add_alloc(f, SESSION_B, &f->owner_b, 1, 4096, -1);
        f->answer[0] = -ENOSPC;
        assert_true(waitq_serve(&f->q));        /* some still wait: evict */
        assert_int_equal(f->n_served, 1);
        assert_ptr_equal(f->served[0], other);
        assert_int_equal(waitq_count(&f->q), 2);

        /* A resting copy queue (-EAGAIN) holds back the same way. */
        f->answer[0] = -EAGAIN;
        assert_true(waitq_serve(&f->q));
        assert_int_equal(waitq_count(&f->q), 2);

        f->answer[0] = 0;
        assert_false(waitq_serve(&f->q));
        assert_true(waitq_empty(&f->q));
}

static void test_marks_for_the_pass(void **state)
{
        fixture *f = *state;
        gmd_waiter *pre;

        add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        assert_int_equal(f->pending.work, PENDING_EVICT);
        f->pending.work = 0;
        pre = add_move_in(f, 1, 0, WAITQ_PREFETCH);
        assert_int_equal(f->pending.work, PENDING_ROOM);
        f->pending.work = 0;

        /* An acquire now waits for it: it moves ahead of the allocation. */
        waitq_set_rank(pre, WAITQ_SWAP_IN);
        assert_int_equal(f->pending.work, PENDING_ROOM);
        assert_ptr_equal(container_of(f->q.waiters.next, gmd_waiter, link), pre);
}

static void test_deadline_expires_and_drops(void **state)
{
        fixture *f = *state;
        gmd_waiter *w;

        w = add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, 5);
        add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        assert_int_equal(f->owner_a.n_waiting, 2);
        while (f->n_expired == 0)
                uv_run(&f->loop, UV_RUN_ONCE);
        assert_ptr_equal(f->expired[0], w);
        assert_int_equal(f->owner_a.n_waiting, 1);
        assert_int_equal(waitq_count(&f->q), 1);
}

static void test_cancel_session(void **state)
{
        fixture *f = *state;

        add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        add_alloc(f, SESSION_B, &f->owner_b, 0, 4096, -1);
        add_move_in(f, 1, 0, WAITQ_PREFETCH);   /* of session A: not dropped */
        waitq_cancel_session(&f->q, SESSION_A);
        assert_int_equal(f->owner_a.n_waiting, 0);
        assert_int_equal(f->owner_b.n_waiting, 1);
        assert_int_equal(waitq_count(&f->q), 2);
        assert_int_equal(f->n_cancelled, 0);    /* dropped without answers */
}

static void test_fail_all(void **state)
{
        fixture *f = *state;

        add_alloc(f, SESSION_A, &f->owner_a, 0, 4096, -1);
        add_move_in(f, 1, 1, WAITQ_PREFETCH);
        waitq_fail_all(&f->q, 42, "stopping");
        assert_int_equal(f->n_cancelled, 2);
        assert_int_equal(f->cancel_code, 42);
        assert_true(waitq_empty(&f->q));
        assert_int_equal(f->owner_a.n_waiting, 0);
}

static void test_drop_twice_is_harmless(void **state)
{
        fixture *f = *state;
        gmd_waiter *w = add_move_in(f, 1, 0, WAITQ_PREFETCH);

        waitq_drop(w);
        waitq_drop(w);
        assert_true(waitq_empty(&f->q));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_rank_order, setup, teardown),
                cmocka_unit_test_setup_teardown(test_blocked_device_holds_back_only_itself,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_marks_for_the_pass, setup, teardown),
                cmocka_unit_test_setup_teardown(test_deadline_expires_and_drops,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_cancel_session, setup, teardown),
                cmocka_unit_test_setup_teardown(test_fail_all, setup, teardown),
                cmocka_unit_test_setup_teardown(test_drop_twice_is_harmless,
                                                setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
