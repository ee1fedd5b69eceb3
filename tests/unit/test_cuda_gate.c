/*
 * test_cuda_gate — daemon/backend/backend_cuda_gate.c on a fake CUDA
 * driver that records the waits and copies queued: a bulk copy is queued
 * in steps, each behind a wait for its number, and the word lets them all
 * run before they are queued; an urgent copy sets it back so that no
 * queued step passes, nor one queued while it is in flight; the last
 * urgent copy heard sets it forward past all of them; release opens it
 * and a late "heard" does not underflow; an overdue urgent copy opens it
 * (the watcher's way out), and the third retires it (no more steps); with
 * CUDA_DEVICE_MAX_CONNECTIONS below 8 there is no gate; the numbers wrap
 * (the wait is a cyclic comparison); without a word a copy is one
 * cuMemcpyAsync.
 * "Passes" is the driver's rule for CU_STREAM_WAIT_VALUE_GEQ:
 * (int32_t)(word - value) >= 0.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend_cuda.h"

#define MIB (UINT64_C(1) << 20)
#define MAX_OPS 64

/* What the fake driver was asked to queue, in order. */
static struct {
        unsigned n;
        struct {
                bool wait;              /* a wait, else a copy */
                uint32_t value;         /* the wait's step number */
                uint64_t len;           /* the copy's bytes */
        } ops[MAX_OPS];
} fk;

static CUresult fk_wait_value(CUstream s, CUdeviceptr addr, cuuint32_t value,
                              unsigned flags)
{
        (void)s;
        (void)addr;
        assert_int_equal(flags, CU_STREAM_WAIT_VALUE_GEQ);
        assert_true(fk.n < MAX_OPS);
        fk.ops[fk.n].wait = true;
        fk.ops[fk.n++].value = value;
        return CUDA_SUCCESS;
}

static CUresult fk_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n,
                          CUstream s)
{
        (void)dst;
        (void)src;
        (void)s;
        assert_true(fk.n < MAX_OPS);
        fk.ops[fk.n].wait = false;
        fk.ops[fk.n++].len = n;
        return CUDA_SUCCESS;
}

static const gmd_cuda_driver fake_driver = {
        .cuStreamWaitValue32 = fk_wait_value,
        .cuMemcpyAsync = fk_memcpy,
};

/* Urgent records on the fixture's gate (an urgent lane's), rec(). */
static cuda_copy urgent_rec[8];

typedef struct fixture {
        cuda_backend *b;
        cuda_queue q;
        cuda_gate *g;
        uint32_t word;
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        memset(&fk, 0, sizeof(fk));
        memset(urgent_rec, 0, sizeof(urgent_rec));
        f->b = calloc(1, sizeof(*f->b) + sizeof(cuda_device));
        assert_non_null(f->b);
        f->b->cu = &fake_driver;
        f->b->n_devices = 1;
        pthread_mutex_init(&f->b->copy_lock, NULL);
        f->b->copy_lock_ready = true;
        /* As cuda_gate_open leaves it, the word here instead of pinned. */
        f->g = &f->b->devices[0].gates[GMD_COPY_IN];
        f->g->word = &f->word;
        f->g->step = 4 * MIB;
        f->q.gate = f->g;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        pthread_mutex_destroy(&f->b->copy_lock);
        free(f->b);
        free(f);
        return 0;
}

/* Would the wait for step `value` pass now? */
static bool passes(const fixture *f, uint32_t value)
{
        return (int32_t)(f->word - value) >= 0;
}

/* The step numbers of the waits queued since op `from`. */
static unsigned waits_since(unsigned from, uint32_t *ret, unsigned max)
{
        unsigned n = 0;

        for (unsigned i = from; i < fk.n && n < max; i++)
                if (fk.ops[i].wait)
                        ret[n++] = fk.ops[i].value;
        return n;
}

static void test_steps(void **state)
{
        fixture *f = *state;
        uint32_t w[8];

        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 10 * MIB), 0);
        /* wait 1, 4 MiB, wait 2, 4 MiB, wait 3, 2 MiB */
        assert_int_equal(fk.n, 6);
        assert_int_equal(waits_since(0, w, 8), 3);
        assert_int_equal(w[0], 1);
        assert_int_equal(w[2], 3);
        assert_false(fk.ops[1].wait);
        assert_int_equal(fk.ops[1].len, 4 * MIB);
        assert_int_equal(fk.ops[5].len, 2 * MIB);
        /* Open for all of them, as queued. */
        assert_true(passes(f, 3));
        assert_false(passes(f, 4));
        assert_int_equal(f->g->queued, 3);
}

/* Urgent record `i` on the fixture's gate. */
static cuda_copy *rec(fixture *f, unsigned i)
{
        urgent_rec[i].gate = f->g;
        return &urgent_rec[i];
}

static void test_urgent_closes_until_heard(void **state)
{
        fixture *f = *state;

        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 8 * MIB), 0);
        cuda_gate_urgent(rec(f, 0));
        assert_int_equal(f->g->closed, 1);
        /* Neither the steps queued before nor those queued now pass. */
        assert_false(passes(f, 1));
        assert_false(passes(f, 2));
        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 4 * MIB), 0);
        assert_false(passes(f, 3));
        /* A second urgent copy; the first heard: still shut. */
        cuda_gate_urgent(rec(f, 1));
        assert_int_equal(f->g->closed, 1);
        cuda_gate_heard(rec(f, 0));
        assert_false(passes(f, 1));
        /* The last heard: every step queued runs. */
        cuda_gate_heard(rec(f, 1));
        assert_true(passes(f, 3));
        assert_int_equal(f->g->urgent, 0);
        /* Both ended with it shut: the urgent lane runs past it. */
        assert_int_equal(f->g->shut_heard, 2);
        /* A bulk record (no gate) is left alone. */
        {
                cuda_copy bulk = { 0 };

                cuda_gate_urgent(&bulk);
                cuda_gate_heard(&bulk);
                assert_int_equal(cuda_gate_overdue(&bulk), 0);
        }
}

static void test_release(void **state)
{
        fixture *f = *state;

        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 4 * MIB), 0);
        cuda_gate_urgent(rec(f, 0));
        assert_false(passes(f, 1));
        cuda_gate_release(&f->b->devices[0]);
        assert_true(passes(f, 1));
        assert_int_equal(f->g->urgent, 0);
        /* A new urgent copy shuts it again; the released one, heard late
         * (a failed stream's host function), does not open it. */
        cuda_gate_urgent(rec(f, 1));
        assert_false(passes(f, 1));
        cuda_gate_heard(rec(f, 0));
        assert_false(passes(f, 1));
        assert_int_equal(f->g->urgent, 1);
        cuda_gate_heard(rec(f, 1));
        assert_true(passes(f, 1));
}

/* The watcher's way out for an urgent copy far past its time: open, the
 * copies in flight given up on, 1 only the first time (it logs once);
 * the copy given up on counts once however long it stays first; no
 * shutting while it is still ahead (so none of them, heard late, can open
 * a gate a newer copy shut; release's case is test_release). */
static void test_overdue(void **state)
{
        fixture *f = *state;

        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 4 * MIB), 0);
        cuda_gate_urgent(rec(f, 0));
        cuda_gate_urgent(rec(f, 1));
        assert_false(passes(f, 1));
        assert_int_equal(cuda_gate_overdue(rec(f, 0)), 1);
        assert_true(passes(f, 1));
        assert_int_equal(f->g->urgent, 0);
        assert_int_equal(f->g->stale, 2);
        /* Still first and still late: counted once. */
        assert_int_equal(cuda_gate_overdue(rec(f, 0)), 0);
        assert_int_equal(f->g->overdue, 1);
        /* Behind it on the urgent lane, a new copy does not shut. */
        cuda_gate_urgent(rec(f, 2));
        assert_true(passes(f, 1));
        cuda_gate_heard(rec(f, 0));
        cuda_gate_heard(rec(f, 1));
        assert_int_equal(f->g->stale, 0);
        cuda_gate_heard(rec(f, 2));
        assert_int_equal(f->g->urgent, 0);
        /* With none given up on ahead, the next shuts it again; given
         * up on too, it is logged no more. */
        cuda_gate_urgent(rec(f, 3));
        assert_false(passes(f, 1));
        assert_int_equal(cuda_gate_overdue(rec(f, 3)), 0);
        assert_true(passes(f, 1));
        assert_int_equal(f->g->overdue, 2);
        assert_false(f->g->retired);            /* two of three */
}

/* Given up on three times with no urgent copy ever ending while the gate
 * was shut: it holds the urgent lane; it retires, open for good, and
 * copies in are no longer stepped. */
static void test_retires(void **state)
{
        fixture *f = *state;

        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 8 * MIB), 0);
        for (unsigned i = 0; i < 3; i++) {
                cuda_gate_urgent(rec(f, i));
                assert_false(passes(f, 2));
                assert_int_equal(cuda_gate_overdue(rec(f, i)), i == 0 ? 1 :
                                 i == 2 ? 2 : 0);
                assert_true(passes(f, 2));
                cuda_gate_heard(rec(f, i));     /* late, after the opening */
        }
        assert_true(f->g->retired);
        cuda_gate_urgent(rec(f, 3));
        assert_true(passes(f, 2));              /* no longer shuts */
        assert_int_equal(cuda_gate_overdue(rec(f, 3)), 0);
        cuda_gate_heard(rec(f, 3));
        fk.n = 0;
        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 8 * MIB), 0);
        assert_int_equal(fk.n, 1);              /* one copy, no steps */
        assert_false(fk.ops[0].wait);
        assert_true(passes(f, 2));
}

/* Where an urgent copy once ended with the gate shut, copies given up on
 * (waiting for a client's last-use event, say) never retire it. */
static void test_overdue_never_retires_a_working_gate(void **state)
{
        fixture *f = *state;

        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 4 * MIB), 0);
        cuda_gate_urgent(rec(f, 0));
        cuda_gate_heard(rec(f, 0));             /* ended while shut */
        for (unsigned i = 1; i <= 5; i++) {
                cuda_gate_urgent(rec(f, i));
                assert_false(passes(f, 1));
                cuda_gate_overdue(rec(f, i));
                cuda_gate_heard(rec(f, i));
        }
        assert_int_equal(f->g->overdue, 5);
        assert_false(f->g->retired);
        cuda_gate_urgent(rec(f, 6));
        assert_false(passes(f, 1));             /* still shuts */
}

/* CUDA_DEVICE_MAX_CONNECTIONS below the default: no gate, and no driver
 * call to find out (the fake has none for it). */
static void test_few_connections(void **state)
{
        fixture *f = *state;
        cuda_device *d = &f->b->devices[0];

        d->gates[GMD_COPY_IN].word = NULL;
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
        assert_int_equal(cuda_gate_open(f->b, d, 4 * MIB), 0);
        unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
        assert_null(d->gates[GMD_COPY_IN].word);
        assert_null(d->gate_page);
}

static void test_wraps(void **state)
{
        fixture *f = *state;
        uint32_t w[8];

        f->g->queued = f->g->open_to = UINT32_MAX - 1;
        f->word = UINT32_MAX - 1;
        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 16 * MIB), 0);
        assert_int_equal(waits_since(0, w, 8), 4);
        assert_int_equal(w[0], UINT32_MAX);
        assert_int_equal(w[1], 0);
        assert_int_equal(w[3], 2);
        for (unsigned i = 0; i < 4; i++)
                assert_true(passes(f, w[i]));
        cuda_gate_urgent(rec(f, 0));
        for (unsigned i = 0; i < 4; i++)
                assert_false(passes(f, w[i]));
        cuda_gate_heard(rec(f, 0));
        for (unsigned i = 0; i < 4; i++)
                assert_true(passes(f, w[i]));
}

static void test_no_word(void **state)
{
        fixture *f = *state;

        f->g->word = NULL;
        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, 10 * MIB), 0);
        assert_int_equal(fk.n, 1);
        assert_false(fk.ops[0].wait);
        assert_int_equal(fk.ops[0].len, 10 * MIB);
        /* Urgent copies are still counted; nothing to store. */
        cuda_gate_urgent(rec(f, 0));
        cuda_gate_heard(rec(f, 0));
        assert_int_equal(f->g->urgent, 0);
        f->q.gate = NULL;
        assert_int_equal(cuda_gate_copy(f->b, &f->q, 0, 0, MIB), 0);
        assert_int_equal(fk.n, 2);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_steps, setup, teardown),
                cmocka_unit_test_setup_teardown(test_urgent_closes_until_heard,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_release, setup, teardown),
                cmocka_unit_test_setup_teardown(test_overdue, setup, teardown),
                cmocka_unit_test_setup_teardown(test_retires, setup, teardown),
                cmocka_unit_test_setup_teardown(test_overdue_never_retires_a_working_gate,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_few_connections, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_wraps, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_word, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
