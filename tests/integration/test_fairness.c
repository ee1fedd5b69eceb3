/*
 * test_fairness — the wait queue's policy through the real daemon: a request that does not fit does not
 * hold back a small one that does; among waiters the higher priority
 * (GPU_MEMD_PRIORITY) goes first, whoever asked first; one user's waiting
 * allocations are bounded ([limits] max_waiting_per_user) with an error
 * that names the key. Waiting requests run on threads, each with its own
 * connection; the test moves on when the daemon's status shows them
 * waiting, never after a sleep, so it holds on a loaded machine.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"

#define MIB (1ull << 20)

static gmd_client *client_with_priority(const harness *h, const char *name,
                                        const char *priority)
{
        gmd_client *c;

        setenv("GPU_MEMD_PRIORITY", priority, 1);
        c = harness_client(h, name);
        unsetenv("GPU_MEMD_PRIORITY");
        return c;
}

/* The whole pool asked for with no deadline, while the pool is held by a
 * buffer in use: a 2 MiB request that fits is served at once, not held
 * behind it (before: NO_MEMORY at once with a timeout of 0). Room that
 * cannot be made (the pool is in use) never makes a waiter hold the
 * others back, even with wait_hold_ms = 0. */
static void test_big_waiter_does_not_block_small(void **state)
{
        harness_fixture *f = *state;
        gmd_client *holder, *big, *small;
        gmd_buffer *held, *b = NULL;
        harness_waiter w;

        harness_start_small(&f->h, "[limits]\nwait_hold_ms = 0\n");
        holder = harness_client(&f->h, "holder");
        big = harness_client(&f->h, "big");
        small = harness_client(&f->h, "small");
        OK(gmd_alloc(holder, 32 * MIB, 0, 0, GMD_NO_WAIT, &held));  /* in use */

        harness_waiter_start(&w, big, 64 * MIB, 4000);
        harness_wait_waiting(&f->h, holder, "big", 1);
        for (int i = 0; i < 4; i++) {
                OK(gmd_alloc(small, 2 * MIB, 0, 0, GMD_NO_WAIT, &b));
                OK(gmd_free(small, b));
        }
        OK(gmd_alloc(small, 2 * MIB, 0, 0, 1000, &b));
        OK(gmd_free(small, b));
        harness_waiter_join(&w);
        assert_int_equal(w.r, GMD_ETIMEDOUT);
        /* Its error says what it waited behind. */
        assert_non_null(strstr(w.error, "in use"));
        OK(gmd_free(holder, held));
        gmd_disconnect(holder);
        gmd_disconnect(big);
        gmd_disconnect(small);
}

/* Two clients wait for 32 MiB each; the low priority asked first. When
 * 32 MiB come free the higher priority gets them; the lower one gets the
 * next 32 MiB. */
static void test_priority_goes_first(void **state)
{
        harness_fixture *f = *state;
        gmd_client *holder, *low, *high;
        gmd_buffer *h1, *h2;
        harness_waiter wl, wh;

        harness_start_small(&f->h, "[users]\nmax_priority = 50\n");
        holder = harness_client(&f->h, "holder");
        low = client_with_priority(&f->h, "low", "0");
        high = client_with_priority(&f->h, "high", "20");
        OK(gmd_alloc(holder, 32 * MIB, 0, 0, GMD_NO_WAIT, &h1));
        OK(gmd_alloc(holder, 32 * MIB, 0, 0, GMD_NO_WAIT, &h2));

        harness_waiter_start(&wl, low, 32 * MIB, 30000);
        harness_wait_waiting(&f->h, holder, "low", 1);
        harness_waiter_start(&wh, high, 32 * MIB, 30000);
        harness_wait_waiting(&f->h, holder, "high", 1);

        OK(gmd_free(holder, h1));
        harness_waiter_join(&wh);
        if (wh.r != 0)
                fail_msg("the high priority's allocation: %d %s", wh.r, wh.error);
        assert_false(__atomic_load_n(&wl.done, __ATOMIC_ACQUIRE));
        assert_int_equal(harness_waiting_of(holder, "low"), 1);

        OK(gmd_free(holder, h2));
        harness_waiter_join(&wl);
        if (wl.r != 0)
                fail_msg("the low priority's allocation: %d %s", wl.r, wl.error);
        OK(gmd_free(high, wh.buffer));
        OK(gmd_free(low, wl.buffer));
        gmd_disconnect(holder);
        gmd_disconnect(low);
        gmd_disconnect(high);
}

/* One user's waiting allocations are bounded across their clients. */
static void test_waiting_per_user(void **state)
{
        harness_fixture *f = *state;
        gmd_client *holder, *a, *b;
        gmd_buffer *held, *none = NULL;
        harness_waiter wa;
        int r;

        harness_start_small(&f->h, "[limits]\nmax_waiting_per_user = 1\n");
        holder = harness_client(&f->h, "holder");
        a = harness_client(&f->h, "a");
        b = harness_client(&f->h, "b");
        OK(gmd_alloc(holder, 64 * MIB, 0, 0, GMD_NO_WAIT, &held));
        harness_waiter_start(&wa, a, 2 * MIB, 30000);
        harness_wait_waiting(&f->h, holder, "a", 1);
        r = gmd_alloc(b, 2 * MIB, 0, 0, 30000, &none);
        assert_int_equal(r, GMD_ELIMIT);
        assert_non_null(strstr(gmd_last_error(), "max_waiting_per_user"));
        OK(gmd_free(holder, held));
        harness_waiter_join(&wa);
        assert_int_equal(wa.r, 0);
        OK(gmd_free(a, wa.buffer));
        gmd_disconnect(holder);
        gmd_disconnect(a);
        gmd_disconnect(b);
}

/* A request that has waited wait_hold_ms, for which room is being made (an
 * idle buffer moves out, slowly: [sim] copy_rate), holds back a small one;
 * the small one's timeout says what it was held behind, not only how much
 * is free. Then the large one is served. */
static void test_held_behind_says_why(void **state)
{
        harness_fixture *f = *state;
        gmd_client *holder, *big, *small;
        gmd_buffer *idle, *b = NULL;
        harness_waiter w;
        int r;

        harness_start_small(&f->h, "[limits]\nwait_hold_ms = 0\n"
                            "[sim]\ncopy_rate = 8M\n");
        holder = harness_client(&f->h, "holder");
        big = harness_client(&f->h, "big");
        small = harness_client(&f->h, "small");
        OK(gmd_alloc(holder, 32 * MIB, 0, 0, GMD_NO_WAIT, &idle));
        OK(gmd_release(holder, idle));                  /* evictable */

        harness_waiter_start(&w, big, 64 * MIB, 20000);
        harness_wait_waiting(&f->h, holder, "big", 1);
        r = gmd_alloc(small, 2 * MIB, 0, 0, 1000, &b);
        assert_int_equal(r, GMD_ETIMEDOUT);
        if (!strstr(gmd_last_error(), "held behind an older request for 64 MiB"))
                fail_msg("the timeout does not say what it waited behind: %s",
                         gmd_last_error());
        harness_waiter_join(&w);
        if (w.r != 0)
                fail_msg("the large request: %d %s", w.r, w.error);
        OK(gmd_free(big, w.buffer));
        OK(gmd_free(holder, idle));
        gmd_disconnect(big);
        gmd_disconnect(holder);
        gmd_disconnect(small);
}

/* A SPILLABLE request larger than the VRAM pool that the host pool can
 * hold lives on host memory from the start (before: refused as larger
 * than the VRAM pool); a PIN_VRAM one is still refused as too large, and
 * a SPILLABLE one larger than the host pool too, saying so. */
static void test_spillable_larger_than_vram(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *b = NULL;
        gmd_client *c;
        int r;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n");
        c = harness_client(&f->h, "spill");
        r = gmd_alloc(c, 128 * MIB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &b);
        if (r != 0)
                fail_msg("128 MiB SPILLABLE with a 64 MiB VRAM pool and 256 MiB "
                         "of host: %d %s", r, gmd_last_error());
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        memset(gmd_buffer_ptr(b), 0x5a, 128 * MIB);
        OK(gmd_free(c, b));
        r = gmd_alloc(c, 128 * MIB, 0, 0, GMD_NO_WAIT, &b);
        assert_int_equal(r, GMD_ETOOLARGE);
        r = gmd_alloc(c, 512 * MIB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &b);
        assert_int_equal(r, GMD_ETOOLARGE);
        gmd_disconnect(c);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_big_waiter_does_not_block_small),
                HARNESS_TEST(test_priority_goes_first),
                HARNESS_TEST(test_waiting_per_user),
                HARNESS_TEST(test_spillable_larger_than_vram),
                HARNESS_TEST(test_held_behind_says_why),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
