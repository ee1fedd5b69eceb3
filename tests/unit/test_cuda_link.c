/*
 * test_cuda_link — daemon/backend/backend_cuda_link.c, the measurement of
 * the links between host memory and the devices, on a fake CUDA driver
 * (a table of functions that keeps count): no GPU. The fake's copies take
 * the time a model says: a link alone moves ALONE bytes per second, k
 * streams copying at once share HOST among them (each at most ALONE).
 * What runs at once is what was queued between two waits: the
 * measurement queues, then waits, so its together phase is one batch.
 *
 * Checked: the loop only starts a thread and publishes; each link is
 * measured alone (never two devices in one batch) and then every device
 * at once, out then in; the figures are the model's (each link ALONE,
 * the host HOST in all); everything the thread held is given back and
 * counted again; nothing is copied while the copy engine has a copy in
 * flight, and a phase during which the engine queued a copy is made
 * again; a slow link stops a direction at its budget, and together
 * takes as many copies; a failed device is left out, the others
 * measured; an engine never idle for the patience gives it up; one
 * device has no together figure; the thread waits for the arenas; a
 * stop ends it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "backend_cuda.h"
#include "timeutil.h"

#define MIB (UINT64_C(1) << 20)
#define LEN (64 * MIB)                 /* LINK_COPY */
#define WARMUP (2 * MIB)
#define N_DEV 3
#define N_EV 16
#define N_STREAMS 8

typedef struct fake_event {
        bool used, done;
        unsigned stream;
        uint64_t bytes;                /* its stream's bytes when recorded */
        unsigned batch;                /* the batch it was recorded in */
        unsigned sharing;              /* streams copying in that batch */
} fake_event;

static struct {
        pthread_mutex_t lock;
        cuda_backend *b;
        fake_event ev[N_EV];
        char ctx[N_DEV], streams[N_STREAMS];
        bool stream_used[N_STREAMS];
        unsigned stream_of[N_STREAMS]; /* the device current at creation */
        uint64_t bytes[N_STREAMS];     /* copied, by stream */
        unsigned batch;                /* the batch being queued */
        bool in_batch[N_STREAMS];      /* streams with events in it */
        unsigned max_sharing;          /* the most streams in one batch */
        unsigned together_batches;     /* batches of more than one */
        unsigned current;              /* device whose context is current */
        unsigned copies, fail_copy;    /* fail_copy: that copy (1-based) */
        unsigned interrupt_copy;       /* a client copy queued with it */
        bool no_vram;
        unsigned allocs, frees, streams_made, streams_gone, wakes;
        double alone, host;            /* bytes per second */
} fk;

static CUresult fk_ctx_set(CUcontext ctx)
{
        pthread_mutex_lock(&fk.lock);
        fk.current = (unsigned)((char *)ctx - fk.ctx);
        pthread_mutex_unlock(&fk.lock);
        return CUDA_SUCCESS;
}

static CUresult fk_mem_alloc(CUdeviceptr *ret, size_t size)
{
        CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

        (void)size;
        pthread_mutex_lock(&fk.lock);
        if (!fk.no_vram) {
                *ret = (CUdeviceptr)(0x700000000ull + (uint64_t)fk.allocs++ *
                                     0x100000000ull);
                res = CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&fk.lock);
        return res;
}

static CUresult fk_mem_free(CUdeviceptr p)
{
        (void)p;
        pthread_mutex_lock(&fk.lock);
        fk.frees++;
        pthread_mutex_unlock(&fk.lock);
        return CUDA_SUCCESS;
}

static CUresult fk_stream_create(CUstream *ret, unsigned flags)
{
        CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

        (void)flags;
        pthread_mutex_lock(&fk.lock);
        for (unsigned i = 0; i < N_STREAMS; i++) {
                if (!fk.stream_used[i]) {
                        fk.stream_used[i] = true;
                        fk.stream_of[i] = fk.current;
                        fk.streams_made++;
                        *ret = (CUstream)&fk.streams[i];
                        res = CUDA_SUCCESS;
                        break;
                }
        }
        pthread_mutex_unlock(&fk.lock);
        return res;
}

static CUresult fk_stream_destroy(CUstream s)
{
        pthread_mutex_lock(&fk.lock);
        fk.stream_used[(char *)s - fk.streams] = false;
        fk.streams_gone++;
        pthread_mutex_unlock(&fk.lock);
        return CUDA_SUCCESS;
}

static CUresult fk_stream_sync(CUstream s)
{
        (void)s;
        return CUDA_SUCCESS;
}

static CUresult fk_event_create(CUevent *ret, unsigned flags)
{
        CUresult res = CUDA_ERROR_OUT_OF_MEMORY;

        (void)flags;
        pthread_mutex_lock(&fk.lock);
        for (unsigned i = 0; i < N_EV; i++) {
                if (!fk.ev[i].used) {
                        fk.ev[i] = (fake_event){ .used = true, .done = true };
                        *ret = (CUevent)&fk.ev[i];
                        res = CUDA_SUCCESS;
                        break;
                }
        }
        pthread_mutex_unlock(&fk.lock);
        return res;
}

static CUresult fk_event_destroy(CUevent e)
{
        pthread_mutex_lock(&fk.lock);
        ((fake_event *)e)->used = false;
        pthread_mutex_unlock(&fk.lock);
        return CUDA_SUCCESS;
}

static CUresult fk_event_record(CUevent e, CUstream s)
{
        fake_event *ev = (fake_event *)e;
        unsigned i = (unsigned)((char *)s - fk.streams);

        pthread_mutex_lock(&fk.lock);
        ev->done = false;
        ev->stream = i;
        ev->bytes = fk.bytes[i];
        ev->batch = fk.batch;
        fk.in_batch[i] = true;
        pthread_mutex_unlock(&fk.lock);
        return CUDA_SUCCESS;
}

/* The GPU runs what was queued since the last wait: the streams in the
 * batch copy at once. */
static void fk_run_batch(void)
{
        unsigned sharing = 0;

        for (unsigned i = 0; i < N_STREAMS; i++)
                sharing += fk.in_batch[i];
        for (unsigned i = 0; i < N_EV; i++) {
                if (fk.ev[i].used && !fk.ev[i].done &&
                    fk.ev[i].batch == fk.batch) {
                        fk.ev[i].done = true;
                        fk.ev[i].sharing = sharing;
                }
        }
        if (sharing > fk.max_sharing)
                fk.max_sharing = sharing;
        if (sharing > 1)
                fk.together_batches++;
        memset(fk.in_batch, 0, sizeof(fk.in_batch));
        fk.batch++;
}

static CUresult fk_event_query(CUevent e)
{
        fake_event *ev = (fake_event *)e;
        bool done;

        pthread_mutex_lock(&fk.lock);
        if (!ev->done && ev->batch == fk.batch)
                fk_run_batch();
        done = ev->done;
        pthread_mutex_unlock(&fk.lock);
        return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult fk_event_elapsed(float *ms, CUevent a, CUevent b)
{
        fake_event *e0 = (fake_event *)a, *e1 = (fake_event *)b;
        double rate;

        pthread_mutex_lock(&fk.lock);
        if (!e0->done || !e1->done) {
                pthread_mutex_unlock(&fk.lock);
                return CUDA_ERROR_NOT_READY;
        }
        rate = fk.alone;
        if (fk.host && fk.host / e1->sharing < rate)
                rate = fk.host / e1->sharing;
        *ms = (float)((double)(e1->bytes - e0->bytes) / rate * 1e3);
        pthread_mutex_unlock(&fk.lock);
        return CUDA_SUCCESS;
}

static CUresult fk_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n,
                          CUstream s)
{
        CUresult res = CUDA_SUCCESS;
        bool interrupt;

        (void)dst;
        (void)src;
        pthread_mutex_lock(&fk.lock);
        if (++fk.copies == fk.fail_copy)
                res = CUDA_ERROR_INVALID_VALUE;
        else
                fk.bytes[(char *)s - fk.streams] += n;
        interrupt = fk.copies == fk.interrupt_copy;
        pthread_mutex_unlock(&fk.lock);
        if (interrupt) {
                /* The copy engine queues a client's copy meanwhile. */
                pthread_mutex_lock(&fk.b->copy_lock);
                fk.b->watch.gen++;
                pthread_mutex_unlock(&fk.b->copy_lock);
        }
        return res;
}

static const gmd_cuda_driver fake_driver = {
        .cuCtxSetCurrent = fk_ctx_set,
        .cuMemAlloc = fk_mem_alloc,
        .cuMemFree = fk_mem_free,
        .cuStreamCreate = fk_stream_create,
        .cuStreamDestroy = fk_stream_destroy,
        .cuStreamSynchronize = fk_stream_sync,
        .cuEventCreate = fk_event_create,
        .cuEventDestroy = fk_event_destroy,
        .cuEventRecord = fk_event_record,
        .cuEventQuery = fk_event_query,
        .cuEventElapsedTime = fk_event_elapsed,
        .cuMemcpyAsync = fk_memcpy,
};

static void on_wake(void *ctx)
{
        (void)ctx;
        pthread_mutex_lock(&fk.lock);
        fk.wakes++;
        pthread_mutex_unlock(&fk.lock);
}

static unsigned fk_get(const unsigned *field)
{
        unsigned v;

        pthread_mutex_lock(&fk.lock);
        v = *field;
        pthread_mutex_unlock(&fk.lock);
        return v;
}

/* Device `i` with a built arena of 128 MiB. */
static void device_init(cuda_backend *b, unsigned i)
{
        cuda_device *d = &b->devices[i];

        d->ctx = (CUcontext)&fk.ctx[i];
        d->host_granularity = 2 * MIB;
        d->arena.base = (CUdeviceptr)(0x100000000ull * (i + 1));
        host_arena_init(&d->arena.ranges, 2 * MIB, 128 * MIB, 128 * MIB);
        assert_int_equal(host_arena_add(&d->arena.ranges, 0, 128 * MIB), 0);
}

/* Two devices (room for a third), idle copy engines, 50 GB/s a link alone,
 * 60 GB/s the host in all. */
static int setup(void **state)
{
        cuda_backend *b = calloc(1, sizeof(*b) + N_DEV * sizeof(cuda_device));

        assert_non_null(b);
        memset(&fk, 0, sizeof(fk));
        pthread_mutex_init(&fk.lock, NULL);
        fk.b = b;
        fk.alone = 50e9;
        fk.host = 60e9;
        b->cu = &fake_driver;
        b->n_devices = 2;
        pthread_mutex_init(&b->copy_lock, NULL);
        b->copy_lock_ready = true;
        b->wake = on_wake;
        pthread_mutex_init(&b->host.lock, NULL);
        b->host.started = true;
        for (unsigned i = 0; i < N_DEV; i++)
                device_init(b, i);
        *state = b;
        return 0;
}

static int teardown(void **state)
{
        cuda_backend *b = *state;

        cuda_link_stop(b);
        for (unsigned i = 0; i < N_DEV; i++)
                host_arena_clear(&b->devices[i].arena.ranges);
        pthread_mutex_destroy(&b->host.lock);
        pthread_mutex_destroy(&b->copy_lock);
        pthread_mutex_destroy(&fk.lock);
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

        for (unsigned i = 0; i < N_EV; i++)
                n += fk.ev[i].used;
        return n;
}

/* Let the loop poll (as copy_reap does) until the thread's figures are
 * published; how many polls that took. */
static unsigned run_to_end(cuda_backend *b)
{
        unsigned polls = 0;

        while (b->links.state == CUDA_LINK_COPYING) {
                assert_true(++polls < 5000);
                usleep(1000);
                cuda_link_poll(b);
        }
        return polls;
}

/* Within 0.1 % (the fake's times are floats). */
static void assert_near(uint64_t got, double want)
{
        if ((double)got < want * 0.999 || (double)got > want * 1.001)
                fail_msg("%llu, not %.0f", (unsigned long long)got, want);
}

/* Everything the thread held is back. */
static void assert_all_back(cuda_backend *b)
{
        assert_int_equal(fk.allocs, fk.frees);
        assert_int_equal(fk.streams_made, fk.streams_gone);
        assert_int_equal(events_alive(), 0);
        for (unsigned i = 0; i < b->n_devices; i++) {
                assert_int_equal(b->devices[i].vram_own, 0);
                assert_int_equal(arena_free(&b->devices[i]), 128 * MIB);
        }
        assert_null(b->links.run);
}

static void test_alone_then_together(void **state)
{
        cuda_backend *b = *state;
        gmd_link_info info;

        cuda_link_maintain(b);
        /* The loop only started the thread: the VRAM it will take is
         * counted already. */
        assert_int_equal(b->links.state, CUDA_LINK_COPYING);
        assert_int_equal(b->devices[0].link.state, CUDA_LINK_COPYING);
        assert_int_equal(b->devices[1].vram_own, LEN);
        cuda_ops_host_link_info(&b->base, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_IN], 0);

        run_to_end(b);
        assert_int_equal(b->links.state, CUDA_LINK_DONE);
        assert_true(fk_get(&fk.wakes) >= 1);
        for (unsigned i = 0; i < 2; i++) {
                assert_int_equal(b->devices[i].link.state, CUDA_LINK_DONE);
                cuda_ops_link_info(&b->base, i, &info);
                assert_near(info.bytes_per_s[GMD_COPY_OUT], 50e9);
                assert_near(info.bytes_per_s[GMD_COPY_IN], 50e9);
                /* Its part of the host's 60 with both copying. */
                assert_near(b->devices[i].link.together[GMD_COPY_IN], 30e9);
        }
        cuda_ops_host_link_info(&b->base, &info);
        assert_near(info.bytes_per_s[GMD_COPY_OUT], 60e9);
        assert_near(info.bytes_per_s[GMD_COPY_IN], 60e9);
        /* Alone: never two streams in one batch but the together ones, one
         * each way. */
        assert_int_equal(fk.max_sharing, 2);
        assert_int_equal(fk.together_batches, 2);
        /* Per stream: alone out and in, together out and in, each a
         * warm-up and three copies. */
        for (unsigned i = 0; i < 2; i++)
                assert_int_equal(fk.bytes[i], 4 * (WARMUP + 3 * LEN));
        assert_int_equal(fk.allocs, 2);
        assert_all_back(b);
        /* Done: maintain starts nothing more. */
        cuda_link_maintain(b);
        assert_null(b->links.run);
}

/* A host that feeds every link: together is their sum. */
static void test_host_not_limiting(void **state)
{
        cuda_backend *b = *state;
        gmd_link_info info;

        b->n_devices = 3;
        fk.host = 0;
        cuda_link_maintain(b);
        run_to_end(b);
        cuda_ops_host_link_info(&b->base, &info);
        assert_near(info.bytes_per_s[GMD_COPY_IN], 150e9);
        assert_int_equal(fk.max_sharing, 3);
        assert_all_back(b);
}

/* One device: measured alone; nothing to measure together. */
static void test_one_device(void **state)
{
        cuda_backend *b = *state;
        gmd_link_info info;

        b->n_devices = 1;
        cuda_link_maintain(b);
        run_to_end(b);
        cuda_ops_link_info(&b->base, 0, &info);
        assert_near(info.bytes_per_s[GMD_COPY_OUT], 50e9);
        cuda_ops_host_link_info(&b->base, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_OUT], 0);
        assert_int_equal(info.bytes_per_s[GMD_COPY_IN], 0);
        assert_int_equal(fk.max_sharing, 1);
        assert_all_back(b);
}

/* A copy of the engine in flight on any device: the thread copies
 * nothing and takes nothing until it is reaped. */
static void test_waits_for_idle_engine(void **state)
{
        cuda_backend *b = *state;
        cuda_copy client = { 0 };
        cuda_queue *q = &b->devices[1].queues[GMD_COPY_IN];

        q->head = q->tail = &client;
        cuda_link_maintain(b);
        assert_int_equal(b->links.state, CUDA_LINK_COPYING);
        usleep(30000);
        cuda_link_poll(b);
        assert_int_equal(b->links.state, CUDA_LINK_COPYING);
        assert_int_equal(fk_get(&fk.copies), 0);
        assert_int_equal(fk_get(&fk.allocs), 0);
        pthread_mutex_lock(&b->copy_lock);
        q->head = q->tail = NULL;
        pthread_mutex_unlock(&b->copy_lock);
        run_to_end(b);
        assert_int_equal(b->devices[1].link.state, CUDA_LINK_DONE);
        assert_all_back(b);
}

/* The engine queues a copy during device 0's phase: that phase is made
 * again, the figures are still the model's. */
static void test_interrupted_phase_made_again(void **state)
{
        cuda_backend *b = *state;
        gmd_link_info info;

        fk.interrupt_copy = 3;       /* device 0, out: its second timed copy */
        cuda_link_maintain(b);
        run_to_end(b);
        /* Device 0 alone twice (8 copies each), device 1 once, together
         * out and in (4 copies a device each). */
        assert_int_equal(fk.copies, 8 + 8 + 8 + 2 * 2 * 4);
        cuda_ops_link_info(&b->base, 0, &info);
        assert_near(info.bytes_per_s[GMD_COPY_IN], 50e9);
        cuda_ops_host_link_info(&b->base, &info);
        assert_near(info.bytes_per_s[GMD_COPY_IN], 60e9);
        assert_all_back(b);
}

/* A slow link: a direction alone stops once its copies took 100 ms, and
 * together takes as many copies. */
static void test_budget(void **state)
{
        cuda_backend *b = *state;
        gmd_link_info info;

        fk.alone = 1.1e9;            /* 64 MiB in 61 ms */
        fk.host = 0;
        cuda_link_maintain(b);
        run_to_end(b);
        for (unsigned i = 0; i < 2; i++)
                assert_int_equal(fk.bytes[i], 4 * (WARMUP + 2 * LEN));
        cuda_ops_link_info(&b->base, 1, &info);
        assert_near(info.bytes_per_s[GMD_COPY_IN], 1.1e9);
        cuda_ops_host_link_info(&b->base, &info);
        assert_near(info.bytes_per_s[GMD_COPY_IN], 2.2e9);
        assert_all_back(b);
}

/* A copy of device 1 fails: device 1 is skipped, device 0 measured; with
 * one device measured there is no together figure. */
static void test_failure_leaves_device_out(void **state)
{
        cuda_backend *b = *state;
        gmd_link_info info;

        fk.fail_copy = 8 + 2;        /* device 1, out: its first timed copy */
        cuda_link_maintain(b);
        run_to_end(b);
        assert_int_equal(b->devices[0].link.state, CUDA_LINK_DONE);
        assert_int_equal(b->devices[1].link.state, CUDA_LINK_SKIPPED);
        cuda_ops_link_info(&b->base, 1, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_OUT], 0);
        cuda_ops_host_link_info(&b->base, &info);
        assert_int_equal(info.bytes_per_s[GMD_COPY_IN], 0);
        assert_all_back(b);
}

/* An engine never idle for the patience: given up, nothing taken. */
static void test_patience(void **state)
{
        cuda_backend *b = *state;
        cuda_copy client = { 0 };
        cuda_queue *q = &b->devices[0].queues[GMD_COPY_OUT];

        b->links.patience_us = 30000;
        q->head = q->tail = &client;
        cuda_link_maintain(b);
        run_to_end(b);
        assert_int_equal(b->devices[0].link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(b->devices[1].link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(fk.copies, 0);
        assert_int_equal(fk.allocs, 0);
        q->head = q->tail = NULL;
        assert_all_back(b);
}

/* Not while an arena is being pinned, device 1's here: the pinning
 * holds the driver, and a link measured meanwhile is not alone. */
static void test_waits_for_pinning(void **state)
{
        cuda_backend *b = *state;
        cuda_device *other = &b->devices[1];

        host_arena_clear(&other->arena.ranges);
        host_arena_init(&other->arena.ranges, 2 * MIB, 256 * MIB, 256 * MIB);
        assert_int_equal(host_arena_add(&other->arena.ranges, 0, 64 * MIB), 0);
        cuda_link_maintain(b);
        assert_int_equal(b->links.state, CUDA_LINK_PENDING);
        assert_null(b->links.run);
        assert_int_equal(host_arena_add(&other->arena.ranges, 64 * MIB,
                                        192 * MIB), 0);
        cuda_link_maintain(b);
        assert_int_equal(b->links.state, CUDA_LINK_COPYING);
        run_to_end(b);
        assert_int_equal(b->devices[1].link.state, CUDA_LINK_DONE);
        host_arena_clear(&other->arena.ranges);
        device_init(b, 1);
}

static void test_no_vram_or_arena(void **state)
{
        cuda_backend *b = *state;

        fk.no_vram = true;
        cuda_link_maintain(b);
        run_to_end(b);
        assert_int_equal(b->devices[0].link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(b->devices[1].link.state, CUDA_LINK_SKIPPED);
        assert_int_equal(fk.copies, 0);
        assert_all_back(b);

        /* No arena: skipped by the loop, no thread. */
        b->links = (cuda_links){ 0 };
        for (unsigned i = 0; i < 2; i++)
                b->devices[i].link = (cuda_link){ 0 };
        b->host.started = false;
        cuda_link_maintain(b);
        assert_int_equal(b->links.state, CUDA_LINK_SKIPPED);
        assert_int_equal(b->devices[0].link.state, CUDA_LINK_SKIPPED);
        assert_null(b->links.run);
}

/* The backend closes while the thread waits: it ends, and gives back. */
static void test_stop(void **state)
{
        cuda_backend *b = *state;
        cuda_copy client = { 0 };
        cuda_queue *q = &b->devices[0].queues[GMD_COPY_OUT];

        q->head = q->tail = &client;
        cuda_link_maintain(b);
        assert_non_null(b->links.run);
        cuda_link_stop(b);
        q->head = q->tail = NULL;
        assert_all_back(b);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_alone_then_together,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_not_limiting, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_one_device, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_waits_for_idle_engine,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_interrupted_phase_made_again,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failure_leaves_device_out,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_patience, setup, teardown),
                cmocka_unit_test_setup_teardown(test_waits_for_pinning, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_no_vram_or_arena, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
