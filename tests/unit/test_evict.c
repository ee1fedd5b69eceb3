/*
 * test_evict — daemon/core/evict.c's choice of victims (evict_choose), on
 * hand-made records, no backend: lowest priority first; of one priority,
 * the least recently released first and what a prefetch brought in last,
 * latest prefetch first; and a prefetch never pushes out what another
 * prefetch brought in and nobody used yet. Before that rule a training
 * step's backward pass, prefetching its saved activations in order of
 * use, evicted the one it prefetched just before (released longest ago)
 * and brought it back again on its acquire: ~1.3 GiB a step each way on
 * the H200 (bench/torch/profile_offload.py, BENCHMARKS.md). With
 * [limits] priority_grace_ms a higher-priority client's recent releases
 * wait out the grace for a lower-priority waiter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buffer.h"
#include "evict.h"
#include "server.h"
#include "session.h"

#include "fake_mover.h"

#define MiB (UINT64_C(1) << 20)
#define N 6

typedef struct fixture {
        gmd_server server;
        gmd_session low, high;      /* priorities 0 and 10 */
        gmd_dbuffer b[N];           /* ids 1..N, 1 MiB each, of `low` */
        uint64_t now, wait_ms;      /* evict_choose's clock and answer */
} fixture;

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        f->server.backend = &fake_mover;
        f->server.devices.n = 1;
        list_init(&f->server.buffers.all);
        list_init(&f->server.buffers.moving);
        list_init(&f->server.buffers.vram_idle);
        list_init(&f->server.waitq.waiters);
        f->now = 1000;
        f->low.server = f->high.server = &f->server;
        f->high.priority = 10;
        for (int i = 0; i < N; i++) {
                gmd_dbuffer *b = &f->b[i];

                b->id = (uint64_t)i + 1;
                b->owner = &f->low;
                b->size = MiB;
                b->tier = GMD_TIER_VRAM;
                b->state = GMD_STATE_RESIDENT;
                b->mem = &fake_vram_mem;
                b->released_ms = 100 + (uint64_t)i;   /* 1 released first */
                list_init(&b->moving_link);
                list_init(&b->idle_link);
                buffer_set_acquired(b, false);
        }
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        free(*state);
        return 0;
}

/* The ids evict_choose picks for `need` bytes, `urgent` of them for
 * acquires and allocations, as "1,2,...". */
static const char *chosen(fixture *f, uint64_t need, uint64_t urgent)
{
        static char out[64];
        gmd_dbuffer **v;
        unsigned n = evict_choose(&f->server, 0, need, urgent, f->now, &v,
                                  &f->wait_ms);
        size_t len = 0;

        out[0] = '\0';
        for (unsigned i = 0; i < n; i++)
                len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%llu",
                                        i ? "," : "", (unsigned long long)v[i]->id);
        free(v);
        return out;
}

static void test_least_recently_released_first(void **state)
{
        fixture *f = *state;

        assert_string_equal(chosen(f, 3 * MiB, 3 * MiB), "1,2,3");
        /* A part of a buffer takes the whole buffer. */
        assert_string_equal(chosen(f, MiB / 2, 0), "1");
        assert_string_equal(chosen(f, 0, 0), "");
}

static void test_lower_priority_first(void **state)
{
        fixture *f = *state;

        f->b[0].owner = &f->high;
        f->b[1].owner = &f->high;
        assert_string_equal(chosen(f, 5 * MiB, 5 * MiB), "3,4,5,6,1");
}

static void test_prefetched_last_latest_first(void **state)
{
        fixture *f = *state;

        /* 1 and 2, released first, were prefetched: 2 after 1, so 2 is
         * needed after 1 and goes before it. */
        f->b[0].prefetched_us = 1000;
        f->b[1].prefetched_us = 2000;
        assert_string_equal(chosen(f, 6 * MiB, 6 * MiB), "3,4,5,6,2,1");
        assert_string_equal(chosen(f, 5 * MiB, 5 * MiB), "3,4,5,6,2");
}

static void test_prefetch_does_not_push_out_prefetched(void **state)
{
        fixture *f = *state;

        f->b[0].prefetched_us = 1000;
        f->b[1].prefetched_us = 2000;
        /* All six for prefetches: only the four nobody is about to use. */
        assert_string_equal(chosen(f, 6 * MiB, 0), "3,4,5,6");
        /* One more MiB urgent than those four hold takes the latest
         * prefetch; the rest of the need (prefetches) takes nothing more. */
        assert_string_equal(chosen(f, 6 * MiB, 5 * MiB), "3,4,5,6,2");
        /* Nothing else idle: a prefetch waits rather than take them. */
        for (int i = 2; i < N; i++)
                buffer_set_acquired(&f->b[i], true);
        assert_string_equal(chosen(f, 2 * MiB, 0), "");
        assert_string_equal(chosen(f, 2 * MiB, MiB), "2");
}

static void test_acquire_ends_prefetched(void **state)
{
        fixture *f = *state;

        f->b[0].prefetched_us = 1000;
        buffer_set_acquired(&f->b[0], true);
        assert_int_equal(f->b[0].prefetched_us, 0);
        buffer_set_acquired(&f->b[0], false);
        f->b[0].released_ms = 200;            /* released last now */
        assert_string_equal(chosen(f, 6 * MiB, 0), "2,3,4,5,6,1");
        /* Moved to host memory: no longer about to be used in VRAM. */
        f->b[1].prefetched_us = 1000;
        buffer_set_tier(&f->b[1], GMD_TIER_HOST);
        assert_int_equal(f->b[1].prefetched_us, 0);
}

/* [limits] priority_grace_ms: a higher-priority client's buffer released
 * within the grace is passed over for a lower-priority waiter, and the
 * answer says when it may go; past the grace, or for a waiter of its own
 * priority, it goes as ever. */
static void test_priority_grace(void **state)
{
        fixture *f = *state;
        gmd_waiter w = { .device = 0, .priority = 0, .size = 6 * MiB };

        list_add_tail(&f->server.waitq.waiters, &w.link);
        f->server.config.priority_grace_ms = 500;
        f->b[0].owner = &f->high;
        f->b[0].released_ms = 900;              /* 100 ms ago */
        assert_string_equal(chosen(f, 6 * MiB, 6 * MiB), "2,3,4,5,6");
        assert_int_equal(f->wait_ms, 400);
        f->now = 1400;                          /* its grace is over */
        assert_string_equal(chosen(f, 6 * MiB, 6 * MiB), "2,3,4,5,6,1");
        assert_int_equal(f->wait_ms, UINT64_MAX);
        f->now = 1000;
        w.priority = 10;                        /* a waiter as high */
        assert_string_equal(chosen(f, 6 * MiB, 6 * MiB), "2,3,4,5,6,1");
        f->server.config.priority_grace_ms = 0; /* off */
        w.priority = 0;
        assert_string_equal(chosen(f, 6 * MiB, 6 * MiB), "2,3,4,5,6,1");
        list_remove(&w.link);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_least_recently_released_first,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_lower_priority_first,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_prefetched_last_latest_first,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_prefetch_does_not_push_out_prefetched,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_priority_grace,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_acquire_ends_prefetched,
                                                setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
