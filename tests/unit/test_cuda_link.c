/*
 * test_cuda_link — daemon/backend/backend_cuda_link.c, the measurement of
 * each device's link to host memory, on a fake CUDA driver (a table of
 * functions that only keeps count): no GPU, so what is checked is the
 * state machine, never a rate. A measurement queues one copy at a time
 * and never waits: a poll before the fake GPU "ran" what was queued
 * changes nothing; each copy's end wakes the loop through the notify
 * stream; both ways timed, the figures are published and everything it
 * held is given back; a slow link stops a direction at its budget. A client's copy submitted meanwhile makes it start
 * again once the streams are idle, keeping its VRAM; a failure skips it
 * and frees what it held only once the copy streams are idle; streams
 * never idle for the patience skip it.
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

#include "backend_cuda.h"
#include "timeutil.h"

#define MIB (UINT64_C(1) << 20)
#define LEN (64 * MIB)                 /* LINK_COPY */
#define WARMUP (2 * MIB)
#define MS_PER_COPY 1.25f              /* 64 MiB at 53.7 GB/s */

typedef struct fake_event {
        bool used, done;
} fake_event;

static struct {
        fake_event ev[8];
        char ctx, streams[4];          /* their addresses are the handles */
        uint64_t bytes[4];             /* copied, by stream */
        unsigned copies, fail_copy;    /* fail_copy: that copy (1-based) */
        bool no_vram, client_busy;
        unsigned allocs, frees, wakes;
        float ms;                      /* what the fake events say */
        CUhostFn fns[8];
        void *fn_data[8];
        unsigned n_fns;
} fk;

static CUresult fk_ctx_set(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }

static CUresult fk_mem_alloc(CUdeviceptr *ret, size_t size)
{
        (void)size;
        if (fk.no_vram)
                return CUDA_ERROR_OUT_OF_MEMORY;
        fk.allocs++;
        *ret = (CUdeviceptr)0x700000000ull;
        return CUDA_SUCCESS;
}

static CUresult fk_mem_free(CUdeviceptr p) { (void)p; fk.frees++; return CUDA_SUCCESS; }

static CUresult fk_event_create(CUevent *ret, unsigned flags)
{
        (void)flags;
        for (unsigned i = 0; i < 8; i++) {
                if (!fk.ev[i].used) {
                        fk.ev[i] = (fake_event){ .used = true, .done = true };
                        *ret = (CUevent)&fk.ev[i];
                        return CUDA_SUCCESS;
                }
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fk_event_destroy(CUevent e)
{
        ((fake_event *)e)->used = false;
        return CUDA_SUCCESS;
}

static CUresult fk_event_record(CUevent e, CUstream s)
{
        (void)s;
        ((fake_event *)e)->done = false;
        return CUDA_SUCCESS;
}

static CUresult fk_event_query(CUevent e)
{
        return ((fake_event *)e)->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult fk_event_elapsed(float *ms, CUevent a, CUevent b)
{
        if (!((fake_event *)a)->done || !((fake_event *)b)->done)
                return CUDA_ERROR_NOT_READY;
        *ms = fk.ms;
        return CUDA_SUCCESS;
}

static CUresult fk_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n,
                          CUstream s)
{
        (void)dst;
        (void)src;
        if (++fk.copies == fk.fail_copy)
                return CUDA_ERROR_INVALID_VALUE;
        fk.bytes[(char *)s - fk.streams] += n;
        return CUDA_SUCCESS;
}

static CUresult fk_wait_event(CUstream s, CUevent e, unsigned flags)
{
        (void)s;
        (void)e;
        (void)flags;
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

static CUresult fk_stream_query(CUstream s)
{
        (void)s;
        for (unsigned i = 0; i < 8; i++)
                if (fk.ev[i].used && !fk.ev[i].done)
                        return CUDA_ERROR_NOT_READY;
        return fk.client_busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static const gmd_cuda_driver fake_driver = {
        .cuCtxSetCurrent = fk_ctx_set,
        .cuMemAlloc = fk_mem_alloc,
        .cuMemFree = fk_mem_free,
        .cuEventCreate = fk_event_create,
        .cuEventDestroy = fk_event_destroy,
        .cuEventRecord = fk_event_record,
        .cuEventQuery = fk_event_query,
        .cuEventElapsedTime = fk_event_elapsed,
        .cuMemcpyAsync = fk_memcpy,
        .cuStreamWaitEvent = fk_wait_event,
        .cuLaunchHostFunc = fk_launch_host_func,
        .cuStreamQuery = fk_stream_query,
};

/* The GPU runs everything queued: events complete, host functions run. */
static void fk_run(void)
{
        for (unsigned i = 0; i < 8; i++)
                fk.ev[i].done = true;
        for (unsigned i = 0; i < fk.n_fns; i++)
                fk.fns[i](fk.fn_data[i]);
        fk.n_fns = 0;
}

static void on_wake(void *ctx)
{
        (void)ctx;
        fk.wakes++;
}

/* One device with a built arena of 128 MiB and idle copy streams. */
static int setup(void **state)
{
        /* Room for a second device, which test_waits_for_pinning uses. */
        cuda_backend *b = calloc(1, sizeof(*b) + 2 * sizeof(cuda_device));
        cuda_device *d;

        assert_non_null(b);
        memset(&fk, 0, sizeof(fk));
        fk.ms = MS_PER_COPY;
        b->cu = &fake_driver;
        b->n_devices = 1;
        pthread_mutex_init(&b->copy_lock, NULL);
        b->copy_lock_ready = true;
        b->wake = on_wake;
        pthread_mutex_init(&b->host.lock, NULL);
        b->host.started = true;
        d = &b->devices[0];
        d->ctx = (CUcontext)&fk.ctx;
        d->host_granularity = 2 * MIB;
        d->arena.base = (CUdeviceptr)0x100000000ull;
        host_arena_init(&d->arena.ranges, 2 * MIB, 128 * MIB, 128 * MIB);
        assert_int_equal(host_arena_add(&d->arena.ranges, 0, 128 * MIB), 0);
        for (int dir = 0; dir < 2; dir++) {
                d->queues[dir].stream = (CUstream)&fk.streams[2 * dir];
                d->queues[dir].notify = (CUstream)&fk.streams[2 * dir + 1];
        }
        *state = b;
        return 0;
}

static int teardown(void **state)
{
        cuda_backend *b = *state;

        cuda_link_close(b, &b->devices[0]);
        host_arena_clear(&b->devices[0].arena.ranges);
        pthread_mutex_destroy(&b->host.lock);
        pthread_mutex_destroy(&b->copy_lock);
        free(b);
        return 0;
}

static uint64_t arena_free(cuda_device *d)
{
        return d->arena.ranges.free.avail;
}

static unsigned events_alive(void)
{
        unsigned n = 0;

        for (unsigned i = 0; i < 8; i++)
                n += fk.ev[i].used;
        return n;
}

/* Let the fake GPU run and the loop poll until the state changes from
 * COPYING; how many polls found a copy over. */
static unsigned run_to_end(cuda_backend *b)
{
        unsigned steps = 0;

        while (b->devices[0].link.state == CUDA_LINK_COPYING) {
                unsigned copies = fk.copies;

                assert_true(++steps < 20);
                /* Not yet: nothing changes, nothing is queued. */
                cuda_link_poll(b);
                assert_int_equal(b->devices[0].link.state, CUDA_LINK_COPYING);
                assert_int_equal(fk.copies, copies);
                fk_run();
                cuda_link_poll(b);
        }
        return steps;
}

static void test_measures_without_waiting(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0];
        gmd_link_info info;

        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_COPYING);
        /* Out first: the warm-up and one timed copy, a wake after it. */
        assert_int_equal(fk.bytes[0], WARMUP + LEN);
        assert_int_equal(fk.bytes[2], 0);
        assert_int_equal(fk.n_fns, 1);
        assert_int_equal(arena_free(d), 64 * MIB);
        assert_int_equal(d->vram_own, LEN);
        cuda_ops_link_info(&b->base, 0, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_IN], 0);

        assert_int_equal(run_to_end(b), 6);
        assert_int_equal(d->link.state, CUDA_LINK_DONE);
        assert_int_equal(fk.wakes, 6);
        assert_int_equal(fk.bytes[0], WARMUP + 3 * LEN);
        assert_int_equal(fk.bytes[2], WARMUP + 3 * LEN);
        assert_int_equal(d->link.rounds[GMD_COPY_OUT], 3);
        assert_int_equal(d->link.rounds[GMD_COPY_IN], 3);
        cuda_ops_link_info(&b->base, 0, &info);
        for (int dir = 0; dir < 2; dir++)
                assert_int_equal(info.bytes_per_s[dir],
                                 (uint64_t)((double)LEN * 3 /
                                            (3 * (double)MS_PER_COPY / 1e3)));
        /* Everything it held is back: the streams were idle. */
        assert_int_equal(fk.allocs, 1);
        assert_int_equal(fk.frees, 1);
        assert_int_equal(d->vram_own, 0);
        assert_int_equal(arena_free(d), 128 * MIB);
        assert_int_equal(events_alive(), 0);
        /* Done: maintain queues nothing more. */
        cuda_link_maintain(b);
        fk_run();
        cuda_link_poll(b);
        assert_int_equal(fk.bytes[0] + fk.bytes[2], 2 * (WARMUP + 3 * LEN));
}

/* Not while an arena is being pinned, another device's here: the pinning
 * holds the driver, and the measurement's calls on the loop thread waited
 * for it (a two-H100 host: device 0's took 601 of 609 ms on the loop
 * while device 1's arena was pinned). Device 1 is only an arena being
 * built; once it is no more, device 0 is measured. */
static void test_waits_for_pinning(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0], *other = &b->devices[1];

        b->n_devices = 2;
        other->arena.base = (CUdeviceptr)0x200000000ull;
        host_arena_init(&other->arena.ranges, 2 * MIB, 256 * MIB, 256 * MIB);
        assert_int_equal(host_arena_add(&other->arena.ranges, 0, 64 * MIB), 0);
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_PENDING);
        assert_int_equal(fk.copies, 0);
        host_arena_clear(&other->arena.ranges);
        b->n_devices = 1;
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_COPYING);
        run_to_end(b);
        assert_int_equal(d->link.state, CUDA_LINK_DONE);
}

/* A slow link: a direction stops once its copies took LINK_BUDGET_US. */
static void test_budget(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0];
        gmd_link_info info;

        fk.ms = 60;                  /* 64 MiB at 1.1 GB/s */
        cuda_link_maintain(b);
        assert_int_equal(run_to_end(b), 4);
        assert_int_equal(d->link.state, CUDA_LINK_DONE);
        assert_int_equal(d->link.rounds[GMD_COPY_OUT], 2);
        assert_int_equal(d->link.rounds[GMD_COPY_IN], 2);
        assert_int_equal(fk.bytes[0], WARMUP + 2 * LEN);
        cuda_ops_link_info(&b->base, 0, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_IN],
                         (uint64_t)((double)LEN * 2 / (2 * 60 / 1e3)));
}

static void test_client_copy_restarts(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0];
        cuda_copy client = { 0 };
        unsigned copies;

        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_COPYING);
        fk_run();
        cuda_link_poll(b);           /* the second timed copy out */
        /* A swap-in is submitted and in flight meanwhile. */
        d->queues[GMD_COPY_IN].n_submitted++;
        d->queues[GMD_COPY_IN].head = d->queues[GMD_COPY_IN].tail = &client;
        fk.client_busy = true;
        copies = fk.copies;
        fk_run();
        cuda_link_poll(b);
        assert_int_equal(d->link.state, CUDA_LINK_PENDING);
        assert_int_equal(d->link.interrupted, 1);
        assert_int_equal(fk.copies, copies);       /* nothing more queued */
        assert_int_equal(arena_free(d), 128 * MIB); /* the piece went back */
        assert_int_equal(fk.frees, 0);              /* the VRAM is kept */
        /* Not again while the swap is in flight. */
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_PENDING);
        assert_int_equal(fk.copies, copies);
        /* Reaped: the streams are idle, a new try from the start. */
        d->queues[GMD_COPY_IN].head = d->queues[GMD_COPY_IN].tail = NULL;
        fk.client_busy = false;
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_COPYING);
        assert_int_equal(d->link.rounds[GMD_COPY_OUT], 0);
        run_to_end(b);
        assert_int_equal(d->link.state, CUDA_LINK_DONE);
        assert_int_equal(d->link.rounds[GMD_COPY_IN], 3);
        assert_int_equal(fk.allocs, 1);
        assert_int_equal(fk.frees, 1);
        assert_int_equal(d->vram_own, 0);
}

static void test_failure_frees_once_idle(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0];
        gmd_link_info info;

        fk.fail_copy = 3;            /* out: warm-up, timed, then this */
        cuda_link_maintain(b);
        fk.client_busy = true;       /* something still runs */
        fk_run();
        cuda_link_poll(b);
        assert_int_equal(d->link.state, CUDA_LINK_SKIPPED);
        cuda_ops_link_info(&b->base, 0, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_OUT], 0);
        cuda_link_poll(b);
        assert_int_equal(fk.frees, 0);
        assert_int_equal(arena_free(d), 64 * MIB);
        fk.client_busy = false;
        fk_run();
        cuda_link_poll(b);
        assert_int_equal(fk.frees, 1);
        assert_int_equal(d->vram_own, 0);
        assert_int_equal(arena_free(d), 128 * MIB);
        assert_int_equal(events_alive(), 0);
}

static void test_patience(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0];
        cuda_copy client = { 0 };

        d->queues[GMD_COPY_OUT].head = d->queues[GMD_COPY_OUT].tail = &client;
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_PENDING);
        assert_true(d->link.first_try_us > 61000000u);
        d->link.first_try_us -= 61000000u;
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(fk.allocs, 0);
        assert_int_equal(fk.copies, 0);
        d->queues[GMD_COPY_OUT].head = d->queues[GMD_COPY_OUT].tail = NULL;
}

static void test_no_vram_or_arena(void **state)
{
        cuda_backend *b = *state;
        cuda_device *d = &b->devices[0];

        fk.no_vram = true;
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(arena_free(d), 128 * MIB);

        d->link = (cuda_link){ 0 };
        b->host.started = false;
        cuda_link_maintain(b);
        assert_int_equal(d->link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(fk.copies, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_measures_without_waiting,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_waits_for_pinning, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
                cmocka_unit_test_setup_teardown(test_client_copy_restarts,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_failure_frees_once_idle,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_patience, setup, teardown),
                cmocka_unit_test_setup_teardown(test_no_vram_or_arena, setup,
                                                teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
