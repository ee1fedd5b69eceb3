/*
 * test_answers — daemon/core/answers.c, the answers a session is owed, on
 * its own: no socket, no daemon. Answers and the packets held behind them
 * come out in the order they went in; queueing marks the scheduling pass
 * (and puts the queue on the due list once), so the pass runs before the
 * loop waits again; a queue dropped with its session frees what it held,
 * fds included, and takes nothing more; a queue to close after its
 * answers takes nothing more either, and is sent even when empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "answers.h"
#include "gpumem.pb-c.h"

typedef struct fixture {
        gmd_pending pending;        /* not open: marks only set bits */
        gmd_list due;
        gmd_answers a, b;           /* two sessions' queues */
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        list_init(&f->due);
        answers_init(&f->a, &f->due, &f->pending);
        answers_init(&f->b, &f->due, &f->pending);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        answers_drop(&f->a);
        answers_drop(&f->b);
        assert_true(list_empty(&f->due));
        free(f);
        return 0;
}

static unsigned due_count(const gmd_list *due)
{
        const gmd_list *pos;
        unsigned n = 0;

        list_for_each(pos, due)
                n++;
        return n;
}

static bool fd_open(int fd)
{
        return fcntl(fd, F_GETFD) >= 0;
}

static void push_ok(gmd_answers *q, uint32_t id)
{
        gmd_result r;

        result_ok(&r);
        assert_int_equal(answers_push(q, ANSWER_OK, id, &r), 0);
}

static void push_error(gmd_answers *q, uint32_t id, const char *text)
{
        gmd_result r;

        result_error(&r, GMD__ERROR_CODE__ERR_TIMED_OUT, "%s", text);
        assert_int_equal(answers_push(q, ANSWER_ERROR, id, &r), 0);
}

static void test_in_order(void **state)
{
        fixture *f = *state;
        static const uint8_t remap[] = { 1, 2, 3 };
        gmd_result notice;
        gmd_answer *x;

        push_ok(&f->a, 1);
        push_error(&f->a, 2, "not back in VRAM");
        assert_true(answers_holding(&f->a));
        assert_int_equal(answers_hold(&f->a, GMD__MSG_TYPE__MSG_REMAP, 0, remap,
                                      sizeof(remap), NULL, 0), 0);
        result_error(&notice, GMD__ERROR_CODE__ERR_TIMED_OUT, "no hello");
        assert_int_equal(answers_push(&f->a, ANSWER_NOTICE, 9, &notice), 0);
        push_ok(&f->a, 3);
        assert_int_equal(f->a.n, 5);
        assert_int_equal(f->a.held_bytes, sizeof(remap));

        x = answers_take(&f->a);
        assert_int_equal(x->kind, ANSWER_OK);
        assert_int_equal(x->request_id, 1);
        assert_int_equal(x->result.code, 0);
        /* Handing out: what is sent now goes straight out, in its turn. */
        assert_true(f->a.draining);
        assert_false(answers_holding(&f->a));
        answer_free(x);

        x = answers_take(&f->a);
        assert_int_equal(x->kind, ANSWER_ERROR);
        assert_int_equal(x->request_id, 2);
        assert_int_equal(x->result.code, GMD__ERROR_CODE__ERR_TIMED_OUT);
        assert_string_equal(x->result.text, "not back in VRAM");
        answer_free(x);

        x = answers_take(&f->a);
        assert_int_equal(x->kind, ANSWER_PACKET);
        assert_int_equal(x->type, GMD__MSG_TYPE__MSG_REMAP);
        assert_int_equal(x->length, sizeof(remap));
        assert_memory_equal(x->payload, remap, sizeof(remap));
        assert_int_equal(f->a.held_bytes, 0);
        answer_free(x);

        x = answers_take(&f->a);
        assert_int_equal(x->kind, ANSWER_NOTICE);
        assert_int_equal(x->request_id, 0);     /* a notice answers nothing */
        assert_string_equal(x->result.text, "no hello");
        answer_free(x);

        x = answers_take(&f->a);
        assert_int_equal(x->request_id, 3);
        answer_free(x);

        assert_true(list_empty(&f->a.queue) && f->a.n == 0);
        assert_true(f->a.draining);     /* until take says there is no more */
        assert_null(answers_take(&f->a));
        assert_false(f->a.draining);
        assert_false(answers_holding(&f->a));
        assert_true(list_empty(&f->due));
}

static void test_marks_pending(void **state)
{
        fixture *f = *state;

        assert_int_equal(f->pending.work, 0);
        assert_null(answers_first_due(&f->due));
        push_ok(&f->a, 1);
        assert_true(f->pending.work & PENDING_ANSWERS);
        assert_ptr_equal(answers_first_due(&f->due), &f->a);
        push_ok(&f->a, 2);
        push_ok(&f->b, 7);
        /* Once per queue, in the order they came to owe something. */
        assert_int_equal(due_count(&f->due), 2);
        assert_ptr_equal(answers_first_due(&f->due), &f->a);

        /* The pass's step: each due queue until none is left. */
        f->pending.work = 0;
        while (answers_first_due(&f->due)) {
                gmd_answers *q = answers_first_due(&f->due);
                gmd_answer *x;

                while ((x = answers_take(q)))
                        answer_free(x);
        }
        assert_int_equal(f->a.n + f->b.n, 0);
        assert_int_equal(f->pending.work, 0);
        push_ok(&f->b, 8);
        assert_true(f->pending.work & PENDING_ANSWERS);
        assert_ptr_equal(answers_first_due(&f->due), &f->b);
}

static void check_ran(uv_check_t *check)
{
        gmd_pending *p = container_of(check, gmd_pending, check);

        p->work = 0;
        uv_check_stop(&p->check);
        uv_idle_stop(&p->idle);
}

static void idle_spin(uv_idle_t *idle)
{
        (void)idle;
}

/* With the pass's handles open, the mark runs it in the loop iteration
 * under way: one non-blocking turn of the loop is enough. */
static void test_pass_runs_before_the_loop_waits(void **state)
{
        fixture *f = *state;
        uv_loop_t loop;
        gmd_pending *p = &f->pending;

        assert_int_equal(uv_loop_init(&loop), 0);
        assert_int_equal(uv_check_init(&loop, &p->check), 0);
        assert_int_equal(uv_idle_init(&loop, &p->idle), 0);
        p->run = check_ran;
        p->spin = idle_spin;
        p->open = true;
        push_ok(&f->a, 1);
        assert_true(p->work & PENDING_ANSWERS);
        uv_run(&loop, UV_RUN_NOWAIT);
        assert_int_equal(p->work, 0);
        p->open = false;
        uv_close((uv_handle_t *)&p->check, NULL);
        uv_close((uv_handle_t *)&p->idle, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_held_fds(void **state)
{
        fixture *f = *state;
        int pipefd[2], held;
        gmd_answer *x;

        assert_int_equal(pipe(pipefd), 0);
        push_ok(&f->a, 1);
        assert_int_equal(answers_hold(&f->a, GMD__MSG_TYPE__MSG_REMAP, 0, NULL, 0,
                                      &pipefd[0], 1), 0);
        /* The caller keeps its own: the queue holds a duplicate. */
        close(pipefd[0]);
        answer_free(answers_take(&f->a));
        x = answers_take(&f->a);
        assert_int_equal(x->n_fds, 1);
        held = x->fds[0];
        assert_int_not_equal(held, pipefd[0]);
        assert_true(fd_open(held));
        assert_true(fcntl(held, F_GETFD) & FD_CLOEXEC);
        answer_free(x);
        assert_false(fd_open(held));
        assert_null(answers_take(&f->a));
        close(pipefd[1]);
}

static void test_dropped_with_session(void **state)
{
        fixture *f = *state;
        int pipefd[2], held;
        gmd_result r;

        assert_int_equal(pipe(pipefd), 0);
        push_ok(&f->a, 1);
        push_error(&f->a, 2, "freed while an acquire waited for it");
        assert_int_equal(answers_hold(&f->a, GMD__MSG_TYPE__MSG_REMAP, 0, NULL, 0,
                                      &pipefd[0], 1), 0);
        held = container_of(f->a.queue.prev, gmd_answer, link)->fds[0];
        push_ok(&f->b, 5);
        assert_int_equal(due_count(&f->due), 2);

        answers_drop(&f->a);
        assert_int_equal(f->a.n, 0);
        assert_int_equal(f->a.held_bytes, 0);
        assert_false(fd_open(held));
        assert_true(fd_open(pipefd[0]));
        /* Off the due list; the other session's answers are untouched. */
        assert_int_equal(due_count(&f->due), 1);
        assert_ptr_equal(answers_first_due(&f->due), &f->b);
        assert_int_equal(f->b.n, 1);

        /* Nothing more is taken for a session that is going. */
        result_ok(&r);
        assert_int_equal(answers_push(&f->a, ANSWER_OK, 3, &r), -ECONNRESET);
        assert_int_equal(answers_hold(&f->a, GMD__MSG_TYPE__MSG_REMAP, 0, NULL, 0,
                                      NULL, 0), -ECONNRESET);
        assert_int_equal(f->a.n, 0);
        assert_int_equal(due_count(&f->due), 1);
        assert_null(answers_take(&f->a));
        answers_drop(&f->a);            /* twice is harmless */
        close(pipefd[0]);
        close(pipefd[1]);
}

static void test_close_after(void **state)
{
        fixture *f = *state;
        gmd_result notice;
        gmd_answer *x;

        result_error(&notice, GMD__ERROR_CODE__ERR_TIMED_OUT, "no hello");
        assert_int_equal(answers_push(&f->a, ANSWER_NOTICE, 0, &notice), 0);
        f->pending.work = 0;
        answers_close_after(&f->a, "no hello within 300 ms");
        assert_true(f->a.close_after);
        assert_string_equal(f->a.close_reason, "no hello within 300 ms");
        assert_true(f->pending.work & PENDING_ANSWERS);
        /* Nothing new goes to a session about to close. */
        assert_true(answers_holding(&f->a));
        assert_int_equal(answers_hold(&f->a, GMD__MSG_TYPE__MSG_REMAP, 0, NULL, 0,
                                      NULL, 0), -ECONNRESET);
        assert_int_equal(answers_push(&f->a, ANSWER_OK, 4, &notice), -ECONNRESET);
        x = answers_take(&f->a);
        assert_int_equal(x->kind, ANSWER_NOTICE);
        answer_free(x);
        assert_null(answers_take(&f->a));
        assert_true(list_empty(&f->due));

        /* Empty, it is still sent: the pass closes the session. */
        answers_close_after(&f->b, "no hello");
        assert_ptr_equal(answers_first_due(&f->due), &f->b);
        assert_null(answers_take(&f->b));
        assert_true(list_empty(&f->due));
        assert_true(f->b.close_after);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_in_order, setup, teardown),
                cmocka_unit_test_setup_teardown(test_marks_pending, setup, teardown),
                cmocka_unit_test_setup_teardown(test_pass_runs_before_the_loop_waits,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_held_fds, setup, teardown),
                cmocka_unit_test_setup_teardown(test_dropped_with_session,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_close_after, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
