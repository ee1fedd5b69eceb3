/*
 * test_copyq — daemon/core/copyq.c on its own: no socket, no daemon, a fake
 * backend whose copy_submit records chunks (or refuses them) and whose
 * completions the test hands back itself. Chunking, the limit of chunks in
 * flight, class order, a stop with and without chunks in flight, a failed
 * chunk and a refused submit ending the copy on the ended list with a mark
 * for the scheduling pass, the pause after a refusal, two devices on one
 * link sharing its limit, served by class across both, in turns, and the
 * backend's urgent lane ([swap] preempt_step): urgent chunks go at once,
 * within limits of their own. And the host's limit across links: with
 * the links together below their sum, the bytes in flight on every
 * device stay within the host budget (copyq.h), the devices take turns
 * in it, the best class goes first across devices, urgent copies are
 * never held back by it; no budget with one link, a host that feeds
 * every link, or figures not known yet.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "copyq.h"

#define MIB (1ull << 20)
#define MAX_CHUNKS 256

typedef struct fake {
        gmd_backend backend;
        gmd_backend_ops ops;
        void *cookies[MAX_CHUNKS];
        gmd_mem *dsts[MAX_CHUNKS];
        uint64_t lens[MAX_CHUNKS];
        bool urgent[MAX_CHUNKS];    /* submitted on the urgent lane */
        unsigned devs[MAX_CHUNKS];  /* the device of each */
        unsigned n, next_done;
        int refuse;                 /* copy_submit's answer while nonzero */
} fake;

static fake *the_fake;
static bool submitting_urgent;

static int fake_submit(gmd_backend *backend, unsigned device, gmd_copy_dir dir,
                       gmd_mem *dst, uint64_t dst_off, gmd_mem *src,
                       uint64_t src_off, uint64_t len, void *cookie)
{
        fake *f = the_fake;

        (void)backend;
        (void)dir;
        (void)dst_off;
        (void)src;
        (void)src_off;
        if (f->refuse)
                return f->refuse;
        assert_true(f->n < MAX_CHUNKS);
        f->cookies[f->n] = cookie;
        f->dsts[f->n] = dst;
        f->lens[f->n] = len;
        f->urgent[f->n] = submitting_urgent;
        f->devs[f->n] = device;
        f->n++;
        return 0;
}

static int fake_submit_urgent(gmd_backend *backend, unsigned device,
                              gmd_copy_dir dir, gmd_mem *dst, uint64_t dst_off,
                              gmd_mem *src, uint64_t src_off, uint64_t len,
                              void *cookie)
{
        int r;

        submitting_urgent = true;
        r = fake_submit(backend, device, dir, dst, dst_off, src, src_off, len,
                        cookie);
        submitting_urgent = false;
        return r;
}

typedef struct fixture {
        fake fake;
        gmd_config config;
        gmd_stats stats;
        gmd_pending pending;
        gmd_copyq q[1];
        gmd_copyqs qs;
        gmd_mem a, b, c;            /* destinations, told apart by address */
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        the_fake = &f->fake;
        f->fake.ops.copy_submit = fake_submit;
        f->fake.backend.ops = &f->fake.ops;
        f->config.swap_chunk_size = 4 * MIB;
        f->config.swap_copies_in_flight = 2;
        copyqs_init(&f->qs, f->q, 1, &f->fake.backend, &f->config, &f->stats,
                    &f->pending);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        free(*state);
        return 0;
}

static void copy_init(gmd_copy *c, gmd_copy_dir dir, move_class cls,
                      gmd_mem *dst, uint64_t size)
{
        memset(c, 0, sizeof(*c));
        c->dir = dir;
        c->cls = cls;
        c->dst = dst;
        c->size = size;
        list_init(&c->qlink);
}

/* The backend finishes the oldest chunk in flight. */
static void finish_one(fixture *f, int status)
{
        assert_true(f->fake.next_done < f->fake.n);
        copyq_on_done(&f->qs, f->fake.cookies[f->fake.next_done++], status);
}

static void test_chunks_and_limit(void **state)
{
        fixture *f = *state;
        gmd_copy c;

        copy_init(&c, GMD_COPY_OUT, MOVE_BULK, &f->a, 10 * MIB);
        copyq_push(&f->qs, &c);
        assert_int_equal(f->fake.n, 2);         /* copies_in_flight */
        assert_int_equal(f->fake.lens[0], 4 * MIB);
        assert_int_equal(c.phase, COPY_ISSUING);
        assert_int_equal(f->q[0].moves[GMD_COPY_OUT], 1);
        finish_one(f, 0);
        assert_int_equal(f->fake.n, 3);
        assert_int_equal(f->fake.lens[2], 2 * MIB);     /* the rest */
        assert_int_equal(c.phase, COPY_ISSUED);
        finish_one(f, 0);
        finish_one(f, 0);
        assert_int_equal(c.done, 10 * MIB);
        assert_int_equal(c.phase, COPY_ENDED);
        assert_int_equal(f->pending.work, PENDING_COPIES);
        assert_ptr_equal(copyq_take_ended(&f->qs), &c);
        assert_null(copyq_take_ended(&f->qs));
        assert_int_equal(f->q[0].moves[GMD_COPY_OUT], 0);
        assert_int_equal(f->stats.bytes_out, 10 * MIB);
}

/* Small chunks: more than copies_in_flight go while those in flight hold
 * fewer than bytes_in_flight, never more than COPYQ_MAX_CHUNKS; with
 * bytes_in_flight 0, copies_in_flight alone. */
static void drain(fixture *f)
{
        while (f->fake.next_done < f->fake.n)
                finish_one(f, 0);
        while (copyq_take_ended(&f->qs))
                ;
}

static void test_bytes_in_flight(void **state)
{
        fixture *f = *state;
        gmd_copy small[20], large, many;

        f->config.swap_bytes_in_flight = 16 * MIB;
        for (int i = 0; i < 20; i++) {
                copy_init(&small[i], GMD_COPY_IN, MOVE_BULK, &f->a, 1 * MIB);
                copyq_push(&f->qs, &small[i]);
        }
        assert_int_equal(f->fake.n, 16);        /* 16 MiB in flight */
        assert_int_equal(f->q[0].inflight_bytes[GMD_COPY_IN], 16 * MIB);
        finish_one(f, 0);
        assert_int_equal(f->fake.n, 17);        /* one out, one in */
        drain(f);
        assert_int_equal(f->fake.n, 20);
        assert_int_equal(f->q[0].inflight_bytes[GMD_COPY_IN], 0);

        /* 4 MiB chunks: two by count (8 MiB), two more by bytes */
        copy_init(&large, GMD_COPY_IN, MOVE_BULK, &f->b, 64 * MIB);
        copyq_push(&f->qs, &large);
        assert_int_equal(f->fake.n - f->fake.next_done, 4);
        f->config.swap_bytes_in_flight = 0;
        finish_one(f, 0);
        finish_one(f, 0);
        assert_int_equal(f->fake.n - f->fake.next_done, 2);
        drain(f);

        /* however small the chunks, at most COPYQ_MAX_CHUNKS */
        f->config.swap_chunk_size = 1 * MIB;
        f->config.swap_bytes_in_flight = 1024 * MIB;
        copy_init(&many, GMD_COPY_OUT, MOVE_BULK, &f->c, 100 * MIB);
        copyq_push(&f->qs, &many);
        assert_int_equal(f->fake.n - f->fake.next_done, COPYQ_MAX_CHUNKS);
        drain(f);
        assert_int_equal(many.done, 100 * MIB);
}

static void test_class_order(void **state)
{
        fixture *f = *state;
        gmd_copy bulk, urgent, evict;

        f->config.swap_copies_in_flight = 1;
        copy_init(&bulk, GMD_COPY_IN, MOVE_BULK, &f->a, 8 * MIB);
        copy_init(&evict, GMD_COPY_IN, MOVE_EVICT, &f->b, 4 * MIB);
        copy_init(&urgent, GMD_COPY_IN, MOVE_BULK, &f->c, 4 * MIB);
        copyq_push(&f->qs, &bulk);              /* its first chunk goes */
        copyq_push(&f->qs, &evict);
        copyq_push(&f->qs, &urgent);
        copyq_reclass(&f->qs, &urgent, MOVE_URGENT);     /* an acquire waits */
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[1], &f->c);       /* urgent first */
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[2], &f->b);       /* then eviction */
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[3], &f->a);       /* bulk's rest last */
        finish_one(f, 0);
}

static void test_stop(void **state)
{
        fixture *f = *state;
        gmd_copy queued, running;

        f->config.swap_copies_in_flight = 1;
        copy_init(&running, GMD_COPY_OUT, MOVE_BULK, &f->a, 8 * MIB);
        copy_init(&queued, GMD_COPY_OUT, MOVE_BULK, &f->b, 8 * MIB);
        copyq_push(&f->qs, &running);
        copyq_push(&f->qs, &queued);
        /* Nothing of it in flight: over at once, for the caller to end. */
        assert_true(copyq_stop(&f->qs, &queued));
        assert_int_equal(queued.phase, COPY_ENDED);
        /* A chunk in flight: it finishes, then the copy is on the list. */
        assert_false(copyq_stop(&f->qs, &running));
        assert_int_equal(running.phase, COPY_STOPPING);
        f->pending.work = 0;
        finish_one(f, 0);
        assert_int_equal(running.phase, COPY_ENDED);
        assert_int_equal(running.done, 4 * MIB);
        assert_int_equal(f->pending.work, PENDING_COPIES);
        assert_ptr_equal(copyq_take_ended(&f->qs), &running);
        assert_int_equal(f->fake.n, 1);         /* nothing more issued */
        assert_false(copyq_stop(&f->qs, &running));      /* over already */
}

static void test_failed_chunk(void **state)
{
        fixture *f = *state;
        gmd_copy c;

        copy_init(&c, GMD_COPY_IN, MOVE_BULK, &f->a, 16 * MIB);
        copyq_push(&f->qs, &c);
        finish_one(f, -EIO);
        assert_int_equal(c.status, -EIO);
        assert_int_equal(c.phase, COPY_STOPPING);
        finish_one(f, 0);
        assert_int_equal(c.phase, COPY_ENDED);
        assert_int_equal(f->fake.n, 2);         /* no chunk after the failure */
        assert_ptr_equal(copyq_take_ended(&f->qs), &c);
}

static void test_refused_submit_rests(void **state)
{
        fixture *f = *state;
        gmd_copy c;

        assert_true(copyq_usable(&f->qs, 0, GMD_COPY_OUT));
        f->fake.refuse = -ENOMEM;
        copy_init(&c, GMD_COPY_OUT, MOVE_EVICT, &f->a, 4 * MIB);
        copyq_push(&f->qs, &c);
        /* Never ended inside the push: on the list, for the pass. */
        assert_int_equal(c.status, -ENOMEM);
        assert_int_equal(c.phase, COPY_ENDED);
        assert_int_equal(f->pending.work & PENDING_COPIES, PENDING_COPIES);
        assert_ptr_equal(copyq_take_ended(&f->qs), &c);
        /* The queue rests a while; the other direction does not. */
        assert_false(copyq_usable(&f->qs, 0, GMD_COPY_OUT));
        assert_true(copyq_usable(&f->qs, 0, GMD_COPY_IN));
}

static unsigned both_on_device_0(gmd_backend *backend, unsigned device)
{
        (void)backend;
        (void)device;
        return 0;
}

/* Two devices' queues in `q`, sharing device 0's link when `shared`;
 * then 16 MiB bulk copies `a` on device 0 and `b` on device 1, pushed in
 * that order. How many chunks went to the backend. */
static unsigned two_devices_two_bulks(fixture *f, gmd_copyq *q, bool shared,
                                      gmd_copy *a, gmd_copy *b)
{
        f->fake.ops.link_shared_with = shared ? both_on_device_0 : NULL;
        f->fake.n = f->fake.next_done = 0;
        copyqs_init(&f->qs, q, 2, &f->fake.backend, &f->config, &f->stats,
                    &f->pending);
        assert_int_equal(q[1].link, shared ? 0 : 1);
        copy_init(a, GMD_COPY_IN, MOVE_BULK, &f->a, 16 * MIB);
        copy_init(b, GMD_COPY_IN, MOVE_BULK, &f->b, 16 * MIB);
        b->device = 1;
        copyq_push(&f->qs, a);
        copyq_push(&f->qs, b);
        return f->fake.n;
}

/* Two devices: with link_shared_with they share copies_in_flight (2), the
 * best class goes first whichever device it is on, and a class's copies
 * take turns between the devices; without it each has its own limit. */
static void test_shared_link(void **state)
{
        fixture *f = *state;
        gmd_copyq q[2];
        gmd_copy a, b, urgent;

        /* Device 0's two chunks fill the link; device 1's wait. */
        assert_int_equal(two_devices_two_bulks(f, q, true, &a, &b), 2);
        assert_ptr_equal(f->fake.dsts[1], &f->a);
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[2], &f->b);       /* device 1's turn */
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[3], &f->a);       /* then device 0's */
        copy_init(&urgent, GMD_COPY_IN, MOVE_URGENT, &f->c, 4 * MIB);
        copyq_push(&f->qs, &urgent);
        assert_int_equal(f->fake.n, 4);
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[4], &f->c);       /* urgent, device 0 */
        /* In flight on the link: device 0's bulk chunk and the urgent one. */
        assert_int_equal(q[0].inflight[GMD_COPY_IN], 2);
        assert_int_equal(q[1].inflight[GMD_COPY_IN], 0);
        drain(f);
        assert_int_equal(q[0].inflight[GMD_COPY_IN] + q[1].inflight[GMD_COPY_IN], 0);
        assert_int_equal(q[0].inflight_bytes[GMD_COPY_IN] +
                         q[1].inflight_bytes[GMD_COPY_IN], 0);

        /* Links of their own: two chunks each. */
        assert_int_equal(two_devices_two_bulks(f, q, false, &a, &b), 4);
        drain(f);
}

/* Hand chunk `i` back, out of turn (the lanes finish in any order). */
static void finish_at(fixture *f, unsigned i)
{
        assert_true(i < f->fake.n && f->fake.cookies[i]);
        copyq_on_done(&f->qs, f->fake.cookies[i], 0);
        f->fake.cookies[i] = NULL;
}

/* The queues again, over a backend with an urgent lane, [swap]
 * preempt_step `step`. */
static void lanes_init(fixture *f, uint64_t step)
{
        f->fake.ops.copy_submit_urgent = fake_submit_urgent;
        f->config.swap_preempt_step = step;
        copyqs_init(&f->qs, f->q, 1, &f->fake.backend, &f->config, &f->stats,
                    &f->pending);
}

/* With the backend's urgent lane: an urgent copy's chunks go at once, on
 * that lane, though the bulk lane is full; evictions stay on the bulk
 * lane; a copy reclassed urgent while that lane is full goes when it has
 * room; each lane's count and bytes come back to zero. */
static void test_urgent_lane(void **state)
{
        fixture *f = *state;
        gmd_copy bulk, evict, urgent, late;

        lanes_init(f, 1 * MIB);
        assert_true(f->qs.lanes);
        copy_init(&bulk, GMD_COPY_IN, MOVE_BULK, &f->a, 16 * MIB);
        copy_init(&evict, GMD_COPY_IN, MOVE_EVICT, &f->b, 4 * MIB);
        copyq_push(&f->qs, &bulk);
        copyq_push(&f->qs, &evict);
        assert_int_equal(f->fake.n, 2);         /* the bulk lane is full */
        assert_false(f->fake.urgent[0] || f->fake.urgent[1]);

        copy_init(&urgent, GMD_COPY_IN, MOVE_URGENT, &f->c, 12 * MIB);
        copyq_push(&f->qs, &urgent);
        assert_int_equal(f->fake.n, 4);         /* two urgent chunks, now */
        assert_true(f->fake.urgent[2] && f->fake.urgent[3]);
        assert_ptr_equal(f->fake.dsts[2], &f->c);
        assert_int_equal(f->q[0].urgent_inflight[GMD_COPY_IN], 2);
        assert_int_equal(f->q[0].urgent_bytes[GMD_COPY_IN], 8 * MIB);
        assert_int_equal(f->q[0].inflight[GMD_COPY_IN], 4);

        /* An urgent chunk back: the urgent copy's rest, on its lane. */
        finish_at(f, 2);
        assert_int_equal(f->fake.n, 5);
        assert_true(f->fake.urgent[4]);
        assert_int_equal(f->fake.lens[4], 4 * MIB);
        /* A bulk chunk back: eviction before bulk, on the bulk lane. */
        finish_at(f, 0);
        assert_int_equal(f->fake.n, 6);
        assert_false(f->fake.urgent[5]);
        assert_ptr_equal(f->fake.dsts[5], &f->b);

        /* A queued bulk copy an acquire now waits for, the urgent lane
         * full: its first chunk when an urgent one ends. */
        copy_init(&late, GMD_COPY_IN, MOVE_BULK, &f->a, 4 * MIB);
        copyq_push(&f->qs, &late);
        assert_int_equal(f->fake.n, 6);
        copyq_reclass(&f->qs, &late, MOVE_URGENT);
        assert_int_equal(f->fake.n, 6);         /* two urgent in flight */
        finish_at(f, 3);
        assert_int_equal(f->fake.n, 7);
        assert_true(f->fake.urgent[6]);
        assert_ptr_equal(f->fake.dsts[6], &f->a);

        /* The rest, in order; what each issues comes after it. */
        for (unsigned i = 0; i < f->fake.n; i++)
                if (f->fake.cookies[i])
                        finish_at(f, i);
        assert_int_equal(urgent.phase, COPY_ENDED);
        assert_int_equal(late.phase, COPY_ENDED);
        assert_int_equal(f->q[0].urgent_inflight[GMD_COPY_IN], 0);
        assert_int_equal(f->q[0].urgent_bytes[GMD_COPY_IN], 0);
}

/* A queued copy an acquire now waits for goes on the urgent lane at
 * once, while the bulk lane is full: not at the next chunk's end. */
static void test_reclass_goes_at_once(void **state)
{
        fixture *f = *state;
        gmd_copy bulk, late;

        lanes_init(f, 1 * MIB);
        copy_init(&bulk, GMD_COPY_IN, MOVE_BULK, &f->a, 16 * MIB);
        copy_init(&late, GMD_COPY_IN, MOVE_BULK, &f->b, 4 * MIB);
        copyq_push(&f->qs, &bulk);
        copyq_push(&f->qs, &late);
        assert_int_equal(f->fake.n, 2);         /* bulk's two chunks */
        copyq_reclass(&f->qs, &late, MOVE_URGENT);
        assert_int_equal(f->fake.n, 3);
        assert_true(f->fake.urgent[2]);
        assert_ptr_equal(f->fake.dsts[2], &f->b);
        assert_int_equal(late.phase, COPY_ISSUED);
        for (unsigned i = 0; i < f->fake.n; i++)
                if (f->fake.cookies[i])
                        finish_at(f, i);
        assert_int_equal(late.phase, COPY_ENDED);
        assert_int_equal(bulk.phase, COPY_ENDED);
}

/* [swap] preempt_step 0: no urgent lane, though the backend has one. */
static void test_lane_off(void **state)
{
        fixture *f = *state;
        gmd_copy bulk, urgent;

        lanes_init(f, 0);
        assert_false(f->qs.lanes);
        copy_init(&bulk, GMD_COPY_IN, MOVE_BULK, &f->a, 16 * MIB);
        copy_init(&urgent, GMD_COPY_IN, MOVE_URGENT, &f->c, 4 * MIB);
        copyq_push(&f->qs, &bulk);
        copyq_push(&f->qs, &urgent);
        assert_int_equal(f->fake.n, 2);         /* it waits for room */
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[2], &f->c);
        assert_false(f->fake.urgent[2]);
        drain(f);
}

/* The links' rates alone and the host's with all of them busy, as the
 * fake backend reports them (bytes per second, each way). */
static uint64_t fake_alone, fake_host;

static void fake_link_info(gmd_backend *backend, unsigned device,
                           gmd_link_info *ret)
{
        (void)backend;
        (void)device;
        ret->bytes_per_s[GMD_COPY_OUT] = ret->bytes_per_s[GMD_COPY_IN] =
                fake_alone;
}

static void fake_host_link_info(gmd_backend *backend, gmd_link_info *ret)
{
        (void)backend;
        ret->bytes_per_s[GMD_COPY_OUT] = ret->bytes_per_s[GMD_COPY_IN] =
                fake_host;
}

#define HOST_DEVICES 3

/* HOST_DEVICES devices on links of their own, 10 GB/s each alone and
 * `host` with all three busy; 4 MiB chunks, two in flight per link: L is
 * 8 MiB, and with `host` 15 GB/s the budget 8 MiB x 15 / (30 / 3) = 12
 * MiB. */
static void host_init(fixture *f, gmd_copyq *q, uint64_t host)
{
        fake_alone = 10000000000ull;
        fake_host = host;
        f->fake.ops.link_info = fake_link_info;
        f->fake.ops.host_link_info = fake_host_link_info;
        f->fake.n = f->fake.next_done = 0;
        copyqs_init(&f->qs, q, HOST_DEVICES, &f->fake.backend, &f->config,
                    &f->stats, &f->pending);
}

static void push_on(fixture *f, gmd_copy *c, unsigned device, move_class cls,
                    gmd_mem *dst, uint64_t size)
{
        copy_init(c, GMD_COPY_IN, cls, dst, size);
        c->device = device;
        copyq_push(&f->qs, c);
}

/* Bytes in flight in, on every device. */
static uint64_t inflight_all(const fixture *f, const gmd_copyq *q)
{
        uint64_t n = 0;

        for (unsigned i = 0; i < HOST_DEVICES; i++)
                n += q[i].inflight_bytes[GMD_COPY_IN];
        assert_int_equal(n, f->qs.host_inflight[GMD_COPY_IN]);
        return n;
}

/* Bulk copies on three links whose host carries half their sum: never
 * more in flight than the budget, the budget used, the devices in
 * turns; all done, nothing counted in flight. */
static void test_host_budget(void **state)
{
        fixture *f = *state;
        gmd_copyq q[HOST_DEVICES];
        gmd_copy c[HOST_DEVICES];
        gmd_mem *dst[HOST_DEVICES] = { &f->a, &f->b, &f->c };
        unsigned per_dev[HOST_DEVICES] = { 0 };
        uint64_t most = 0;

        host_init(f, q, 15000000000ull);
        assert_true(f->qs.host_known);
        assert_int_equal(f->qs.host_budget[GMD_COPY_IN], 12 * MIB);
        assert_int_equal(f->qs.host_budget[GMD_COPY_OUT], 12 * MIB);
        for (unsigned i = 0; i < HOST_DEVICES; i++)
                push_on(f, &c[i], i, MOVE_BULK, dst[i], 32 * MIB);
        /* Three chunks, not six: device 0 two, device 1 one. */
        assert_int_equal(f->fake.n, 3);
        assert_int_equal(inflight_all(f, q), 12 * MIB);
        assert_true(f->qs.host_held[GMD_COPY_IN] > 0);
        while (f->fake.next_done < f->fake.n) {
                finish_one(f, 0);
                if (inflight_all(f, q) > most)
                        most = inflight_all(f, q);
                assert_true(inflight_all(f, q) <= 12 * MIB);
        }
        assert_int_equal(most, 12 * MIB);
        assert_int_equal(f->fake.n, 3 * 8);
        /* Turns: by the time device 0 is done, the others are well on. */
        for (unsigned k = 0; k < 12; k++)
                per_dev[f->fake.devs[k]]++;
        for (unsigned i = 0; i < HOST_DEVICES; i++)
                assert_true(per_dev[i] >= 3);
        for (unsigned i = 0; i < HOST_DEVICES; i++)
                assert_int_equal(c[i].phase, COPY_ENDED);
        assert_int_equal(f->qs.host_inflight[GMD_COPY_IN], 0);
        while (copyq_take_ended(&f->qs))
                ;
}

/* Room in the budget goes to the best class on any link: an eviction on
 * device 2 before the bulk copies of devices 0 and 1 that fill it. */
static void test_host_class_order(void **state)
{
        fixture *f = *state;
        gmd_copyq q[HOST_DEVICES];
        gmd_copy b0, b1, evict;

        host_init(f, q, 15000000000ull);
        push_on(f, &b0, 0, MOVE_BULK, &f->a, 32 * MIB);
        push_on(f, &b1, 1, MOVE_BULK, &f->b, 32 * MIB);
        assert_int_equal(f->fake.n, 3);
        push_on(f, &evict, 2, MOVE_EVICT, &f->c, 8 * MIB);
        assert_int_equal(f->fake.n, 3);          /* held: the budget is full */
        finish_one(f, 0);                        /* device 0's chunk */
        assert_int_equal(f->fake.n, 4);
        assert_ptr_equal(f->fake.dsts[3], &f->c);
        finish_one(f, 0);
        assert_ptr_equal(f->fake.dsts[4], &f->c);
        assert_int_equal(evict.phase, COPY_ISSUED);
        drain(f);
        assert_int_equal(b0.phase, COPY_ENDED);
        assert_int_equal(b1.phase, COPY_ENDED);
}

/* Urgent copies are never held back by the budget, with the urgent lane
 * and without it; what they take counts in it, so bulk copies wait for
 * the room they leave. */
static void test_host_urgent_overtakes(void **state)
{
        fixture *f = *state;
        gmd_copyq q[HOST_DEVICES];
        gmd_copy b0, b1, urgent, urgent2;
        unsigned n;

        f->fake.ops.copy_submit_urgent = fake_submit_urgent;
        f->config.swap_preempt_step = 1 * MIB;
        host_init(f, q, 15000000000ull);
        assert_true(f->qs.lanes);
        push_on(f, &b0, 0, MOVE_BULK, &f->a, 32 * MIB);
        push_on(f, &b1, 1, MOVE_BULK, &f->b, 32 * MIB);
        assert_int_equal(inflight_all(f, q), 12 * MIB);
        push_on(f, &urgent, 2, MOVE_URGENT, &f->c, 8 * MIB);
        /* Both its chunks at once, on its lane, past the budget. */
        assert_int_equal(f->fake.n, 5);
        assert_true(f->fake.urgent[3] && f->fake.urgent[4]);
        assert_int_equal(inflight_all(f, q), 20 * MIB);
        /* A bulk chunk back: 16 MiB in flight, over the budget: no bulk. */
        n = f->fake.n;
        finish_at(f, 0);
        assert_int_equal(f->fake.n, n);
        /* The urgent ones back: room again for bulk. */
        finish_at(f, 3);
        finish_at(f, 4);
        assert_int_equal(urgent.phase, COPY_ENDED);
        assert_true(f->fake.n > n);
        assert_true(inflight_all(f, q) <= 12 * MIB);
        for (unsigned i = 0; i < f->fake.n; i++)
                if (f->fake.cookies[i])
                        finish_at(f, i);
        while (copyq_take_ended(&f->qs))
                ;

        /* Without the urgent lane: urgent copies share the bulk lane, and
         * go first across devices, unheld. */
        f->config.swap_preempt_step = 0;
        host_init(f, q, 15000000000ull);
        assert_false(f->qs.lanes);
        push_on(f, &b0, 0, MOVE_BULK, &f->a, 32 * MIB);
        push_on(f, &b1, 1, MOVE_BULK, &f->b, 32 * MIB);
        push_on(f, &urgent2, 2, MOVE_URGENT, &f->c, 8 * MIB);
        assert_int_equal(f->fake.n, 5);
        assert_ptr_equal(f->fake.dsts[3], &f->c);
        assert_ptr_equal(f->fake.dsts[4], &f->c);
        drain(f);
}

/* No budget where the host feeds every link, with one device, or while
 * the figures are not known; they are read again until they are. */
static void test_host_no_budget(void **state)
{
        fixture *f = *state;
        gmd_copyq q[HOST_DEVICES];
        gmd_copy c[HOST_DEVICES], more;
        gmd_mem *dst[HOST_DEVICES] = { &f->a, &f->b, &f->c };

        host_init(f, q, 30000000000ull);
        assert_true(f->qs.host_known);
        assert_int_equal(f->qs.host_budget[GMD_COPY_IN], 0);
        for (unsigned i = 0; i < HOST_DEVICES; i++)
                push_on(f, &c[i], i, MOVE_BULK, dst[i], 16 * MIB);
        assert_int_equal(f->fake.n, 6);          /* each link its own two */
        drain(f);

        /* Not measured yet: no budget, until the figures come. */
        host_init(f, q, 0);
        assert_false(f->qs.host_known);
        for (unsigned i = 0; i < HOST_DEVICES; i++)
                push_on(f, &c[i], i, MOVE_BULK, dst[i], 16 * MIB);
        assert_int_equal(f->fake.n, 6);
        drain(f);
        fake_host = 15000000000ull;
        push_on(f, &more, 0, MOVE_BULK, &f->a, 4 * MIB);
        assert_true(f->qs.host_known);
        assert_int_equal(f->qs.host_budget[GMD_COPY_IN], 12 * MIB);
        drain(f);

        /* One device: nothing asked, nothing changes. */
        copyqs_init(&f->qs, f->q, 1, &f->fake.backend, &f->config, &f->stats,
                    &f->pending);
        assert_true(f->qs.host_known);
        assert_int_equal(f->qs.host_budget[GMD_COPY_IN], 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_chunks_and_limit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bytes_in_flight, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_class_order, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failed_chunk, setup, teardown),
                cmocka_unit_test_setup_teardown(test_refused_submit_rests,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_shared_link, setup, teardown),
                cmocka_unit_test_setup_teardown(test_urgent_lane, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reclass_goes_at_once, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_lane_off, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_budget, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_host_class_order, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_host_urgent_overtakes,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_no_budget, setup,
                                                teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
