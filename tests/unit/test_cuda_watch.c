/*
 * test_cuda_watch — daemon/backend/backend_cuda_watch.c, the thread that
 * hears copies end by polling their events, one round at a time
 * (cuda_watch_step) on a fake CUDA driver: a copy is not queried before
 * it is due; queried, a copy still running is asked again a few
 * microseconds later and less often the later it runs; one that ended is
 * marked fired and wakes the loop once, and the next copy of its stream
 * is queried in the same breath; a copy its host function marked first
 * is passed over; a copy queued behind another is due after it; the
 * thread itself, started and stopped, hears a copy that ends; a record
 * it heard is reused only after its host function ran (through the
 * backend's own submit and reap); an urgent copy heard opens the gate of
 * the bulk copies in, and one far past its time opens it too; a copy
 * heard late moves the times of those behind it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "backend_cuda.h"
#include "timeutil.h"

#define MIB (UINT64_C(1) << 20)
#define RATE (UINT64_C(1) << 30)       /* 1 MiB takes 976 us */

static struct {
        char ctx, streams[2];
        bool done[4];                  /* by record index */
        unsigned queries;
        unsigned wakes;
        /* Events the backend made (copy_submit's records): done or not. */
        bool ev_done[8];
        unsigned n_events;
        CUhostFn fns[8];               /* host functions queued, in order */
        void *fn_data[8];
        unsigned n_fns;
} fk;

static cuda_copy records[4];

static CUresult fk_ctx_set(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }

/* Handles 1..4 are the hand-made records' events, 101.. those the
 * backend creates. */
static bool *fk_event(CUevent ev)
{
        uintptr_t h = (uintptr_t)ev;

        return h > 100 ? &fk.ev_done[h - 101] : &fk.done[h - 1];
}

static CUresult fk_event_query(CUevent ev)
{
        __atomic_add_fetch(&fk.queries, 1, __ATOMIC_SEQ_CST);
        return __atomic_load_n(fk_event(ev), __ATOMIC_SEQ_CST) ?
               CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult fk_event_create(CUevent *ret, unsigned flags)
{
        (void)flags;
        assert_true(fk.n_events < 8);
        *ret = (CUevent)(uintptr_t)(101 + fk.n_events++);
        return CUDA_SUCCESS;
}

static CUresult fk_event_record(CUevent ev, CUstream s)
{
        (void)s;
        *fk_event(ev) = false;
        return CUDA_SUCCESS;
}

static CUresult fk_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n,
                          CUstream s)
{
        (void)dst; (void)src; (void)n; (void)s;
        return CUDA_SUCCESS;
}

static CUresult fk_wait_event(CUstream s, CUevent e, unsigned flags)
{
        (void)s; (void)e; (void)flags;
        return CUDA_SUCCESS;
}

static CUresult fk_launch_host_func(CUstream s, CUhostFn fn, void *data)
{
        (void)s;
        assert_true(fk.n_fns < 8);
        fk.fns[fk.n_fns] = fn;
        fk.fn_data[fk.n_fns++] = data;
        return CUDA_SUCCESS;
}

static CUresult fk_stream(CUstream s) { (void)s; return CUDA_SUCCESS; }
static CUresult fk_event_destroy(CUevent e) { (void)e; return CUDA_SUCCESS; }

static const gmd_cuda_driver fake_driver = {
        .cuStreamSynchronize = fk_stream,
        .cuStreamDestroy = fk_stream,
        .cuEventDestroy = fk_event_destroy,
        .cuCtxSetCurrent = fk_ctx_set,
        .cuEventQuery = fk_event_query,
        .cuEventCreate = fk_event_create,
        .cuEventRecord = fk_event_record,
        .cuMemcpyAsync = fk_memcpy,
        .cuStreamWaitEvent = fk_wait_event,
        .cuLaunchHostFunc = fk_launch_host_func,
};

static void on_wake(void *ctx)
{
        (void)ctx;
        __atomic_add_fetch(&fk.wakes, 1, __ATOMIC_SEQ_CST);
}

static int setup(void **state)
{
        cuda_backend *b = calloc(1, sizeof(*b) + sizeof(cuda_device));

        assert_non_null(b);
        memset(&fk, 0, sizeof(fk));
        memset(records, 0, sizeof(records));
        for (unsigned i = 0; i < 4; i++)
                records[i].done = (CUevent)(uintptr_t)(i + 1);
        b->cu = &fake_driver;
        b->n_devices = 1;
        pthread_mutex_init(&b->copy_lock, NULL);
        b->copy_lock_ready = true;
        b->wake = on_wake;
        b->devices[0].ctx = (CUcontext)&fk.ctx;
        b->devices[0].queues[GMD_COPY_IN].stream = (CUstream)&fk.streams[0];
        b->devices[0].queues[GMD_COPY_IN].notify = (CUstream)&fk.streams[1];
        b->devices[0].link.bytes_per_s[GMD_COPY_IN] = RATE;
        *state = b;
        return 0;
}

static int teardown(void **state)
{
        cuda_backend *b = *state;

        pthread_mutex_destroy(&b->copy_lock);
        free(b);
        return 0;
}

/* Queue record `i`, `len` bytes, on device 0's host-to-VRAM stream at
 * `now`. */
static void queue(cuda_backend *b, unsigned i, uint64_t len, uint64_t now)
{
        cuda_device *d = &b->devices[0];

        pthread_mutex_lock(&b->copy_lock);
        cuda_watch_queued(b, d, &d->queues[GMD_COPY_IN], GMD_COPY_IN,
                          &records[i], len, now);
        pthread_mutex_unlock(&b->copy_lock);
}

static uint64_t step(cuda_backend *b, uint64_t now)
{
        uint64_t next;

        pthread_mutex_lock(&b->copy_lock);
        next = cuda_watch_step(b, now);
        pthread_mutex_unlock(&b->copy_lock);
        return next;
}

static void test_nothing_in_flight(void **state)
{
        assert_int_equal(step(*state, 1000), UINT64_MAX);
        assert_int_equal(fk.queries, 0);
}

static void test_not_queried_before_due(void **state)
{
        cuda_backend *b = *state;
        uint64_t due;

        queue(b, 0, MIB, 1000);
        due = records[0].due_us;
        /* Start, then 1 MiB at 1 GiB/s. */
        assert_in_range(due, 1000 + 976, 1000 + 976 + 20);
        assert_int_equal(step(b, 1100), records[0].poll_us);
        assert_true(records[0].poll_us < due);
        assert_int_equal(fk.queries, 0);
}

static void test_running_copy_polled_less_often_as_it_runs_late(void **state)
{
        cuda_backend *b = *state;
        uint64_t due;

        queue(b, 0, MIB, 1000);
        due = records[0].due_us;
        assert_int_equal(step(b, due), due + 3);
        assert_int_equal(fk.queries, 1);
        assert_false(records[0].fired);
        assert_int_equal(step(b, due + 500), due + 525);
        assert_int_equal(step(b, due + 5000), due + 5250);
        assert_int_equal(fk.queries, 3);
        assert_int_equal(fk.wakes, 0);
}

static void test_ended_copy_fires_and_wakes_once(void **state)
{
        cuda_backend *b = *state;
        uint64_t now;

        queue(b, 0, MIB, 1000);
        queue(b, 1, MIB, 1000);
        /* Behind the first on its stream: due a copy's time later. */
        assert_in_range(records[1].due_us, records[0].due_us + 970,
                        records[0].due_us + 980);
        now = records[0].due_us;
        fk.done[0] = true;
        assert_int_equal(step(b, now), now);    /* look again at once */
        assert_true(records[0].fired);
        assert_false(records[1].fired);
        assert_int_equal(fk.wakes, 1);
        /* The next one is not due yet: no query for it. */
        assert_int_equal(step(b, now), records[1].poll_us);
        assert_int_equal(fk.queries, 1);
        assert_int_equal(fk.wakes, 1);
}

static void test_fired_by_host_function_is_passed_over(void **state)
{
        cuda_backend *b = *state;
        uint64_t now;

        queue(b, 0, MIB, 1000);
        queue(b, 1, 0, 1000);          /* an empty copy, due with it */
        records[0].fired = true;       /* its host function ran */
        now = records[1].due_us;
        fk.done[1] = true;
        step(b, now);
        assert_int_equal(fk.queries, 1);        /* record 1's only */
        assert_true(records[1].fired);
        assert_int_equal(fk.wakes, 1);
}

static void test_thread_hears_a_copy(void **state)
{
        cuda_backend *b = *state;
        uint64_t deadline;

        assert_int_equal(cuda_watch_start(b), 0);
        queue(b, 0, 64 * 1024, now_us());       /* due in ~70 us */
        deadline = now_us() + 2000000;
        __atomic_store_n(&fk.done[0], true, __ATOMIC_SEQ_CST);
        while (!__atomic_load_n(&fk.wakes, __ATOMIC_SEQ_CST) &&
               now_us() < deadline) {
                struct timespec ts = { 0, 100000 };

                nanosleep(&ts, NULL);
        }
        cuda_watch_stop(b);
        assert_int_equal(fk.wakes, 1);
        assert_true(records[0].fired);
        assert_true(b->watch.heard == 1);
}

static unsigned reaped;

static void on_done(void *ctx, void *cookie, int status)
{
        (void)ctx;
        (void)cookie;
        assert_int_equal(status, 0);
        reaped++;
}

/* A copy of 1 MiB from one fake mapping to another, through the
 * backend's own submit. */
static void submit(cuda_backend *b, cuda_mem *dst, cuda_mem *src)
{
        assert_int_equal(cuda_ops_copy_submit(&b->base, 0, GMD_COPY_IN,
                                              &dst->mem, 0, &src->mem, 0,
                                              MIB, NULL), 0);
}

/* The watcher hears a copy before its host function runs: the record is
 * reaped but not reused until that host function ran, which then marks
 * nothing else; after it, the record is reused. */
static void test_heard_record_waits_for_its_host_function(void **state)
{
        cuda_backend *b = *state;
        cuda_queue *q = &b->devices[0].queues[GMD_COPY_IN];
        cuda_mem src = { .mem = { .size = MIB }, .va = 0x10000000 };
        cuda_mem dst = { .mem = { .size = MIB }, .va = 0x20000000 };
        cuda_copy *first, *second;

        reaped = 0;
        submit(b, &dst, &src);
        first = q->head;
        fk.ev_done[0] = true;                   /* the GPU is done */
        step(b, first->due_us);                 /* heard by the watcher */
        assert_true(first->fired);
        cuda_ops_copy_reap(&b->base, on_done, NULL);
        assert_int_equal(reaped, 1);
        assert_null(q->head);
        /* Its host function has not run: the next copy gets a new one. */
        submit(b, &dst, &src);
        second = q->head;
        assert_ptr_not_equal(second, first);
        /* The late host function marks its own record, not the next. */
        fk.fns[0](fk.fn_data[0]);
        assert_false(second->fired);
        assert_int_equal(fk.wakes, 1);          /* the watcher's only */
        /* The second's host function runs, no watcher: reaped as ever. */
        fk.ev_done[1] = true;
        fk.fns[1](fk.fn_data[1]);
        assert_true(second->fired);
        cuda_ops_copy_reap(&b->base, on_done, NULL);
        assert_int_equal(reaped, 2);
        /* Both host functions ran: the first record is reused now. */
        submit(b, &dst, &src);
        assert_ptr_equal(q->head, first);
        fk.ev_done[0] = true;
        fk.fns[2](fk.fn_data[2]);
        cuda_ops_copy_reap(&b->base, on_done, NULL);
        cuda_copy_close(b, &b->devices[0]);
}

/* An urgent copy on device 0's urgent lane in, its gate shut by it (as
 * submit does), the gate's word here. */
static cuda_gate *queue_urgent(cuda_backend *b, unsigned i, uint32_t *word,
                               uint64_t now)
{
        cuda_device *d = &b->devices[0];
        cuda_queue *q = &d->queues[CUDA_QUEUE_URGENT + GMD_COPY_IN];
        cuda_gate *g = &d->gates[GMD_COPY_IN];

        q->urgent = true;
        q->gate = g;
        q->stream = (CUstream)&fk.streams[0];
        g->word = word;
        g->step = 4 * MIB;
        g->open_to = 7;
        *word = 7;
        records[i].gate = g;
        pthread_mutex_lock(&b->copy_lock);
        cuda_gate_urgent(&records[i]);
        cuda_watch_queued(b, d, q, GMD_COPY_IN, &records[i], MIB, now);
        pthread_mutex_unlock(&b->copy_lock);
        return g;
}

static void test_urgent_heard_opens_the_gate(void **state)
{
        cuda_backend *b = *state;
        uint32_t word;
        cuda_gate *g = queue_urgent(b, 0, &word, 1000);

        assert_int_equal(word, 7u - (1u << 30));
        fk.done[0] = true;
        step(b, records[0].due_us);
        assert_true(records[0].fired);
        assert_int_equal(word, 7);
        assert_int_equal(g->urgent, 0);
        assert_int_equal(g->overdue, 0);
}

static void test_overdue_urgent_opens_the_gate(void **state)
{
        cuda_backend *b = *state;
        uint32_t word;
        cuda_gate *g = queue_urgent(b, 0, &word, 1000);
        uint64_t due = records[0].due_us;

        /* Late, but not yet by GATE_OVERDUE_US: still shut. */
        step(b, due + GATE_OVERDUE_US / 2);
        assert_int_equal(word, 7u - (1u << 30));
        step(b, due + GATE_OVERDUE_US + 1);
        assert_int_equal(word, 7);
        assert_int_equal(g->urgent, 0);
        assert_int_equal(g->overdue, 1);
        assert_false(records[0].fired);
        /* Heard at last: nothing more to open. */
        fk.done[0] = true;
        step(b, due + 2 * GATE_OVERDUE_US);
        assert_true(records[0].fired);
        assert_int_equal(word, 7);
}

/* A copy heard late moves the times of those behind it as late: they
 * are not queried (nor, urgent, given up on) for its lateness. A late
 * bulk copy leaves the gate alone. */
static void test_late_copy_shifts_those_behind(void **state)
{
        cuda_backend *b = *state;
        uint32_t word = 5;
        uint64_t due1;

        b->devices[0].gates[GMD_COPY_IN].word = &word;
        b->devices[0].gates[GMD_COPY_IN].open_to = 5;
        queue(b, 0, MIB, 1000);
        queue(b, 1, MIB, 1000);
        due1 = records[1].due_us;
        step(b, records[0].due_us + GATE_OVERDUE_US + 1);   /* not done */
        assert_int_equal(word, 5);
        fk.done[0] = true;
        step(b, records[0].due_us + GATE_OVERDUE_US + 5000);
        assert_true(records[0].fired);
        assert_int_equal(records[1].due_us, due1 + GATE_OVERDUE_US + 5000);
        assert_int_equal(word, 5);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_nothing_in_flight, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_queried_before_due, setup, teardown),
                cmocka_unit_test_setup_teardown(test_running_copy_polled_less_often_as_it_runs_late, setup, teardown),
                cmocka_unit_test_setup_teardown(test_ended_copy_fires_and_wakes_once, setup, teardown),
                cmocka_unit_test_setup_teardown(test_fired_by_host_function_is_passed_over, setup, teardown),
                cmocka_unit_test_setup_teardown(test_thread_hears_a_copy, setup, teardown),
                cmocka_unit_test_setup_teardown(test_heard_record_waits_for_its_host_function, setup, teardown),
                cmocka_unit_test_setup_teardown(test_urgent_heard_opens_the_gate, setup, teardown),
                cmocka_unit_test_setup_teardown(test_overdue_urgent_opens_the_gate, setup, teardown),
                cmocka_unit_test_setup_teardown(test_late_copy_shifts_those_behind, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
