/*
 * test_selfwait — GMD_ALLOC_NO_SELF_WAIT against the real gpu-memd (sim
 * backend, one device of 64 MiB in 2 MiB steps): an allocation that only
 * its own process could make room for fails at once with GMD_ENOMEM and
 * the daemon's sentence, whatever its timeout, also when the process's
 * memory is spread over two connections (one pid); without the flag it
 * waits as before; with the flag it still waits while another process
 * (gmd_test_client `hold`, a process of its own) holds part of the pool,
 * and is granted when that one frees; and a released buffer of its own is
 * evicted for it, not counted as "only itself".
 *
 * The mapping cache is off, so a free gives memory straight back and the
 * pool's bytes are exactly what the test holds.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"
#include "pattern.h"

typedef harness_fixture fixture;

#define SELF_WORDS "can only come from memory this process holds itself"

static int setup(void **state)
{
        setenv(GMD_CACHE_ENV, "0", 1);
        return harness_setup(state);
}

static void start(fixture *f)
{
        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "selfwait");
}

/* One allocation; how long it took in *ret_ms. */
static int alloc_timed(gmd_client *c, uint64_t size, unsigned flags,
                       int64_t timeout_ms, gmd_buffer **ret, uint64_t *ret_ms)
{
        uint64_t t0 = harness_now_ms();
        int r = gmd_alloc(c, size, 0, flags, timeout_ms, ret);

        *ret_ms = harness_now_ms() - t0;
        return r;
}

/* (1) Every byte in use is this process's own, on two connections: the
 * flagged request fails well before its 10 s timeout, in words. */
static void test_own_pool_fails_at_once(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL, *b = NULL, *c = NULL;
        uint64_t ms;
        int r;

        start(f);
        f->other = harness_client(&f->h, "selfwait-2");
        OK(gmd_alloc(f->client, 40 * MiB, 0, 0, GMD_NO_WAIT, &a));
        OK(gmd_alloc(f->other, 24 * MiB, 0, 0, GMD_NO_WAIT, &b));
        r = alloc_timed(f->client, 8 * MiB, GMD_ALLOC_NO_SELF_WAIT, 10000, &c, &ms);
        assert_int_equal(r, GMD_ENOMEM);
        assert_true(ms < 2000);
        if (!strstr(gmd_last_error(), SELF_WORDS) ||
            !strstr(gmd_last_error(), "in 2 buffers") ||
            !strstr(gmd_last_error(), "waiting cannot help"))
                fail_msg("error: '%s'", gmd_last_error());
        /* Waiting for ever changes nothing. */
        r = alloc_timed(f->other, 8 * MiB, GMD_ALLOC_NO_SELF_WAIT,
                        GMD_WAIT_FOREVER, &c, &ms);
        assert_int_equal(r, GMD_ENOMEM);
        assert_true(ms < 2000);
        /* What fits is served as ever. */
        OK(gmd_free(f->other, b));
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_NO_SELF_WAIT, 10000, &c));
        OK(gmd_free(f->client, c));
        OK(gmd_free(f->client, a));
}

/* (2) Without the flag the same request waits out its timeout. */
static void test_without_flag_waits(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL, *c = NULL;
        uint64_t ms;
        int r;

        start(f);
        OK(gmd_alloc(f->client, 64 * MiB, 0, 0, GMD_NO_WAIT, &a));
        r = alloc_timed(f->client, 8 * MiB, 0, 300, &c, &ms);
        assert_true(r == GMD_ETIMEDOUT || r == GMD_ENOMEM);
        assert_true(ms >= 280);
        assert_null(strstr(gmd_last_error(), SELF_WORDS));
        OK(gmd_free(f->client, a));
}

static void *usr1_later(void *arg)
{
        harness_sleep_ms(300);
        kill(*(pid_t *)arg, SIGUSR1);
        return NULL;
}

/* (3) Another process holds part of the pool: the flagged request waits
 * and is granted once that process frees. */
static void test_other_process_waits(void **state)
{
        fixture *f = *state;
        const char *args[] = { "hold", "24M", NULL };
        gmd_buffer *a = NULL, *c = NULL;
        harness_proc *p;
        pthread_t t;
        char *line;
        uint64_t ms;

        start(f);
        p = harness_track_client(f, args);
        line = harness_read_line(p, "ready", 5000);
        if (!line)
                fail_msg("hold did not get ready; daemon log:\n%s",
                         harness_read_log(&f->h));
        free(line);
        OK(gmd_alloc(f->client, 40 * MiB, 0, 0, GMD_NO_WAIT, &a));
        assert_int_equal(pthread_create(&t, NULL, usr1_later, &p->pid), 0);
        if (alloc_timed(f->client, 16 * MiB, GMD_ALLOC_NO_SELF_WAIT, 10000,
                        &c, &ms) != 0)
                fail_msg("alloc: %s", gmd_last_error());
        pthread_join(t, NULL);
        assert_true(ms >= 250);
        OK(gmd_free(f->client, c));
        OK(gmd_free(f->client, a));
}

/* (4) A released buffer of its own would make the room: it is evicted to
 * host memory and the request served, its bytes intact. */
static void test_own_released_is_evicted(void **state)
{
        fixture *f = *state;
        gmd_buffer *idle, *a = NULL, *c = NULL;

        start(f);
        idle = harness_released_buffer(f->client, 16 * MiB, 7);
        OK(gmd_alloc(f->client, 48 * MiB, 0, 0, GMD_NO_WAIT, &a));
        if (gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_NO_SELF_WAIT, 10000, &c) != 0)
                fail_msg("alloc: %s", gmd_last_error());
        assert_int_equal(gmd_buffer_tier(idle), GMD_TIER_HOST);
        OK(gmd_free(f->client, c));
        OK(gmd_acquire(f->client, idle, 5000));
        pattern_check(idle, 7, "the evicted buffer");
        OK(gmd_free(f->client, idle));
        OK(gmd_free(f->client, a));
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, harness_teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                TEST(test_own_pool_fails_at_once),
                TEST(test_without_flag_waits),
                TEST(test_other_process_waits),
                TEST(test_own_released_is_evicted),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
