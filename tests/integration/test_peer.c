/*
 * test_peer — the peer tier (daemon/core/peer.c) on two sim devices that
 * reach each other ([sim] peer_rate), with the real daemon: a SWAPPABLE
 * buffer paged out of device 0 goes to device 1's free VRAM, not host
 * memory, and comes back from there with its bytes; device 1's own
 * clients come first — an allocation there that needs the room gets it,
 * the peer tier's bytes moving on to host memory, and still come back
 * whole; never into a peer's last [pools] peer_headroom; nothing of it
 * with [pools] peer_tier = off, nor for SPILLABLE buffers; and every
 * pool's count is back to 0 when the buffers are freed.
 *
 * Where the bytes are is read from status (device 1's pool: peer_held,
 * peer_spare; the pair's held bytes; the host pool's used); what a buffer
 * holds, from patterns written before a move and checked word by word
 * after it. VRAM a buffer came back from stays on device 1 as a spare for
 * the next swap-out, until device 1's own clients want the room.
 */
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
#include "pattern.h"


/* Two devices of 64 MiB that reach each other; 8 MiB of headroom. */
#define PEER_CONFIG \
        "[sim]\ndevices = 2\npeer_rate = 100G\n" \
        "[pools]\nhost_limit = 256M\nhost_stock = 64M\npeer_headroom = 8M\n" \
        "[swap]\nchunk_size = 2M\n"

typedef harness_fixture fixture;

static void start(fixture *f, const char *extra)
{
        char config[512];

        snprintf(config, sizeof(config), "%s%s", PEER_CONFIG, extra ? extra : "");
        harness_init_small(&f->h, config);
        harness_start(&f->h, NULL);
        f->client = harness_client(&f->h, "home");
}

/* Poll (2 s at most) until device 1's VRAM holds `peer` bytes of device
 * 0's buffers (its pool's peer_held, the pair's held bytes in status, and
 * its used less what is kept there for swap-outs all agree) and the host
 * pool `host`. */
static void expect_where(fixture *f, uint64_t peer, uint64_t host,
                         const char *when)
{
        uint64_t deadline = harness_now_ms() + 2000;

        for (;;) {
                gmd_status *st = harness_status(f->client);
                uint64_t held = UINT64_MAX, pair = 0, rest = 0, h = 0;

                for (size_t i = 0; i < st->n_pools; i++) {
                        const gmd_pool_status *p = &st->pools[i];

                        if (p->tier == GMD_TIER_HOST)
                                h = p->used;
                        else if (p->device == 1) {
                                held = p->peer_held;
                                rest = p->used - p->peer_spare;
                        }
                }
                for (size_t i = 0; i < st->n_peers; i++)
                        if (st->peers[i].home == 0 && st->peers[i].holder == 1)
                                pair = st->peers[i].held;
                gmd_status_free(st);
                if (held == peer && pair == peer && rest >= peer && h == host)
                        return;
                if (harness_now_ms() >= deadline)
                        fail_msg("%s: device 1 holds %llu MiB of device 0's "
                                 "buffers (pair: %llu, used less spares: %llu), "
                                 "host %llu MiB; want %llu and %llu; log:\n%s",
                                 when, (unsigned long long)(held / MiB),
                                 (unsigned long long)(pair / MiB),
                                 (unsigned long long)(rest / MiB),
                                 (unsigned long long)(h / MiB),
                                 (unsigned long long)(peer / MiB),
                                 (unsigned long long)(host / MiB),
                                 harness_read_log(&f->h));
                harness_sleep_ms(5);
        }
}

/* Device 1's VRAM kept for device 0's next swap-outs. */
static uint64_t spare_on_1(fixture *f)
{
        return harness_vram_pool(f->client, 1).peer_spare;
}

/* Paged out of a full device 0: to device 1, and back from there. */
static void test_out_to_peer_and_back(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[3];

        start(f, NULL);
        for (unsigned i = 0; i < 3; i++)
                b[i] = harness_released_buffer(f->client, 8 * MiB, 100 + i);
        harness_page_out(f->client, b[0]);
        harness_page_out(f->client, b[1]);
        expect_where(f, 16 * MiB, 0, "two pageouts");
        {
                gmd_status *st = harness_status(f->client);

                /* Both pairs, each with the rate of [sim] peer_rate. */
                assert_int_equal(st->n_peers, 2);
                assert_int_equal(st->peers[0].bytes_per_s, 100ull << 30);
                gmd_status_free(st);
        }
        assert_non_null(harness_wait_log(&f->h, "peer tier: device 0 reaches "
                                         "device 1", 1000));

        harness_bring_back(f->client, b[0], 100, "back from the peer");
        OK(gmd_release(f->client, b[0]));
        expect_where(f, 8 * MiB, 0, "one back");
        /* What it came back from is kept for the next swap-out. */
        assert_int_equal(spare_on_1(f), 8 * MiB);
        harness_bring_back(f->client, b[1], 101, "the second back");
        OK(gmd_release(f->client, b[1]));
        expect_where(f, 0, 0, "both back");
        assert_int_equal(spare_on_1(f), 16 * MiB);

        /* And out again, into a spare, to be freed there. */
        harness_page_out(f->client, b[2]);
        expect_where(f, 8 * MiB, 0, "out again");
        assert_int_equal(spare_on_1(f), 8 * MiB);
        for (unsigned i = 0; i < 3; i++)
                OK(gmd_free(f->client, b[i]));
        expect_where(f, 0, 0, "all freed");
        assert_int_equal(harness_vram_pool(f->client, 0).used -
                         harness_vram_pool(f->client, 0).kept, 0);
        /* The spare is the first room device 1's own clients get. */
        {
                gmd_client *owner = harness_client(&f->h, "owner");
                gmd_buffer *all = NULL;
                gmd_pool_status p = harness_vram_pool(owner, 1);

                f->other = owner;
                OK(gmd_alloc(owner, p.capacity, 1, GMD_ALLOC_SWAPPABLE, 5000,
                             &all));
                assert_int_equal(spare_on_1(f), 0);
                OK(gmd_free(owner, all));
        }
}

/* Device 1's own client needs its memory: it gets it, and the peer
 * tier's buffers go on to host memory, whole. */
static void test_owner_comes_first(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[3], *big = NULL;
        gmd_client *owner;
        gmd_pool_status p;

        start(f, NULL);
        for (unsigned i = 0; i < 3; i++) {
                b[i] = harness_released_buffer(f->client, 8 * MiB, 200 + i);
                harness_page_out(f->client, b[i]);
        }
        expect_where(f, 24 * MiB, 0, "three pageouts");

        /* The whole of device 1: 64 MiB. */
        owner = harness_client(&f->h, "owner");
        f->other = owner;
        p = harness_vram_pool(owner, 1);
        OK(gmd_alloc(owner, p.capacity, 1, GMD_ALLOC_SWAPPABLE, 5000, &big));
        pattern_fill(big, 7);
        expect_where(f, 0, 24 * MiB, "device 1 taken by its owner");
        assert_int_equal(harness_vram_pool(owner, 1).used, p.capacity);
        assert_non_null(harness_wait_log(&f->h, "needs room: moving", 1000));

        for (unsigned i = 0; i < 3; i++) {
                harness_bring_back(f->client, b[i], 200 + i, "back from host");
                OK(gmd_release(f->client, b[i]));
        }
        pattern_check(big, 7, "the owner's buffer");
        OK(gmd_free(owner, big));
        for (unsigned i = 0; i < 3; i++)
                OK(gmd_free(f->client, b[i]));
        expect_where(f, 0, 0, "all freed");
}

/* A peer with less than the buffer and peer_headroom free is not used. */
static void test_headroom(void **state)
{
        fixture *f = *state;
        gmd_buffer *b, *held = NULL;
        gmd_client *owner;

        start(f, NULL);
        owner = harness_client(&f->h, "owner");
        f->other = owner;
        /* 50 of 64 MiB held on device 1: 14 free < 8 + 8 of headroom. */
        OK(gmd_alloc(owner, 50 * MiB, 1, GMD_ALLOC_SWAPPABLE, 5000, &held));
        b = harness_released_buffer(f->client, 8 * MiB, 300);
        harness_page_out(f->client, b);
        expect_where(f, 0, 8 * MiB, "a pageout beside a busy peer");
        harness_bring_back(f->client, b, 300, "back from host");
        OK(gmd_free(f->client, b));
        OK(gmd_free(owner, held));
}

/* [pools] peer_tier = off: host memory, as on one device. SPILLABLE
 * buffers never go to a peer: their owners map them where they rest. */
static void test_off_and_spillable(void **state)
{
        fixture *f = *state;
        gmd_buffer *b, *s = NULL;

        start(f, "[pools]\npeer_tier = off\n");
        b = harness_released_buffer(f->client, 8 * MiB, 400);
        harness_page_out(f->client, b);
        expect_where(f, 0, 8 * MiB, "peer tier off");
        assert_int_equal(harness_log_count(&f->h, "peer tier: device 0 reaches"), 0);
        OK(gmd_free(f->client, b));
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        start(f, NULL);
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &s));
        pattern_fill(s, 401);
        OK(gmd_release(f->client, s));
        OK(gmd_pageout(f->client, s));
        OK(gmd_wait(f->client, s, 5000));
        expect_where(f, 0, 8 * MiB, "a SPILLABLE buffer");
        OK(gmd_acquire(f->client, s, 0));
        pattern_check(s, 401, "the SPILLABLE buffer on host");
        OK(gmd_free(f->client, s));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_out_to_peer_and_back),
                HARNESS_TEST(test_owner_comes_first),
                HARNESS_TEST(test_headroom),
                HARNESS_TEST(test_off_and_spillable),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
