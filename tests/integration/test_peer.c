/*
 * test_peer — the peer tier (daemon/core/peer.c) on two sim devices that
 * reach each other ([sim] peer_rate), with the real daemon: a SWAPPABLE
 * buffer paged out of device 0 goes to device 1's free VRAM, not host
 * memory, and comes back from there with its bytes; device 1's own
 * clients come first — an allocation there that needs the room gets it,
 * the peer tier's bytes moving on to host memory, and still come back
 * whole; never into a peer's last [pools] peer_headroom; nothing of it
 * with [pools] peer_tier = off; and every pool's count is back to 0 when
 * the buffers are freed.
 *
 * SPILLABLE buffers go there too, their owners remapped to device 1's
 * VRAM and using it at the same address (read, written, every byte
 * checked); moved on to host memory for device 1's own client (owner
 * remapped again), only once released; back home as from host memory;
 * their owner freeing, closing or killed mid-relocation; a restart with
 * one on device 1. Only where their owner's process can map device 1's
 * memory, as it said after its hello (MSG_REACH; sim emulates
 * CUDA_VISIBLE_DEVICES for it): a client that sees device 0 alone, or
 * that said nothing (an older client, the raw protocol here), has its
 * SPILLABLE buffers moved to host memory, its SWAPPABLE ones still to
 * device 1; one whose remap to device 1 fails all the same (the sim
 * mapper's GMD_SIM_REFUSE_PEER hook) keeps the buffer, which goes back
 * to device 0 whole and then to host memory.
 *
 * With slow copies ([sim] copy_rate), moves of the peer tier that meet
 * something half-way: an acquire, a free, the client's close and a
 * SIGKILL of the daemon while device 1 moves a buffer on to host memory
 * (a relocation), and swap-outs to and swap-ins from device 1 stopped
 * half-way; each ends with the bytes whole and every byte of every pool
 * given back once (device 1's spares as room its own client gets). Bytes
 * being moved off device 1 count once as room there, and a buffer whose
 * swap-in waits for a full device 0 is moved off device 1 all the same.
 *
 * Where the bytes are is read from status (device 1's pool: peer_held,
 * peer_spare; the pair's held bytes; the host pool's used); what a buffer
 * holds, from patterns written before a move and checked word by word
 * after it. VRAM a buffer came back from stays on device 1 as a spare for
 * the next swap-out, until device 1's own clients want the room.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "pattern.h"
#include "raw_client.h"


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

/* harness_wait_log, the line found freed: fails the test when none. */
static void expect_log(fixture *f, const char *needle, int timeout_ms)
{
        char *line = harness_wait_log(&f->h, needle, timeout_ms);

        if (!line)
                fail_msg("no \"%s\" in the log:\n%s", needle,
                         harness_read_log(&f->h));
        free(line);
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
        expect_log(f, "peer tier: device 0 reaches device 1", 1000);

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
        expect_log(f, "needs room: moving", 1000);

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

/* [pools] peer_tier = off: host memory, as on one device, SPILLABLE
 * buffers too. */
static void test_off(void **state)
{
        fixture *f = *state;
        gmd_buffer *b, *s = NULL;

        start(f, "[pools]\npeer_tier = off\n");
        b = harness_released_buffer(f->client, 8 * MiB, 400);
        harness_page_out(f->client, b);
        expect_where(f, 0, 8 * MiB, "peer tier off");
        assert_int_equal(harness_log_count(&f->h, "peer tier: device 0 reaches"), 0);
        OK(gmd_free(f->client, b));
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &s));
        pattern_fill(s, 401);
        OK(gmd_release(f->client, s));
        OK(gmd_pageout(f->client, s));
        OK(gmd_wait(f->client, s, 5000));
        expect_where(f, 0, 8 * MiB, "a SPILLABLE buffer, peer tier off");
        OK(gmd_acquire(f->client, s, 0));
        pattern_check(s, 401, "the SPILLABLE buffer on host");
        OK(gmd_free(f->client, s));
}

/* ---- moves that meet: slow copies ([sim] copy_rate) --------------------- */

/* 16 MB/s: an 8 MiB copy takes half a second, long enough to act in. */
#define SLOW "[sim]\ncopy_rate = 16M\n"

/* An allocation of device 1's own client, made on a thread of its own
 * (it waits while the peer tier's bytes move on). */
typedef struct owner_alloc {
        gmd_client *client;
        uint64_t size;
        gmd_buffer *buffer;
        int r;
        pthread_t thread;
} owner_alloc;

static void *owner_alloc_run(void *arg)
{
        owner_alloc *a = arg;

        a->r = gmd_alloc(a->client, a->size, 1, GMD_ALLOC_SWAPPABLE, 10000,
                         &a->buffer);
        return NULL;
}

static void owner_alloc_start(owner_alloc *a, gmd_client *client,
                              uint64_t size)
{
        a->client = client;
        a->size = size;
        a->buffer = NULL;
        a->r = -1;
        assert_int_equal(pthread_create(&a->thread, NULL, owner_alloc_run, a),
                         0);
}

static void owner_alloc_join(fixture *f, owner_alloc *a)
{
        pthread_join(a->thread, NULL);
        if (a->r != 0)
                fail_msg("device 1's own allocation failed: %d (%s); log:\n%s",
                         a->r, gmd_last_error(), harness_read_log(&f->h));
}

/* Wait until a relocation (a move from device 1 on to host memory) runs,
 * its host copy taken: host pool used `host`. */
static void expect_relocating(fixture *f, uint64_t host)
{
        uint64_t deadline = harness_now_ms() + 2000;

        expect_log(f, "needs room: moving", 2000);
        while (harness_host_pool(f->client).used != host) {
                if (harness_now_ms() >= deadline)
                        fail_msg("no relocation under way; log:\n%s",
                                 harness_read_log(&f->h));
                harness_sleep_ms(2);
        }
}

/* Everything freed: no byte of the peer tier's anywhere, device 0's VRAM
 * only what is kept for its client's swap-ins, the host pool empty; and
 * device 1's spares are room its own client gets whole, after which its
 * pool is empty too. */
static void expect_empty(fixture *f, const char *when)
{
        gmd_client *c = harness_client(&f->h, "last");
        gmd_buffer *all = NULL;
        gmd_pool_status p;
        uint64_t deadline = harness_now_ms() + 3000;

        expect_where(f, 0, 0, when);
        for (;;) {
                gmd_pool_status d0 = harness_vram_pool(c, 0);

                p = harness_vram_pool(c, 1);
                if (d0.used == d0.kept && p.used == p.peer_spare &&
                    p.peer_held == 0)
                        break;
                if (harness_now_ms() >= deadline)
                        fail_msg("%s: device 0 used %llu kept %llu, device 1 "
                                 "used %llu held %llu spare %llu; log:\n%s",
                                 when, (unsigned long long)d0.used,
                                 (unsigned long long)d0.kept,
                                 (unsigned long long)p.used,
                                 (unsigned long long)p.peer_held,
                                 (unsigned long long)p.peer_spare,
                                 harness_read_log(&f->h));
                harness_sleep_ms(5);
        }
        OK(gmd_alloc(c, p.capacity, 1, GMD_ALLOC_SWAPPABLE, 5000, &all));
        OK(gmd_free(c, all));
        p = harness_vram_pool(c, 1);
        assert_int_equal(p.used, 0);
        assert_int_equal(p.peer_spare, 0);
        assert_int_equal(harness_host_pool(c).used, 0);
        gmd_disconnect(c);
}

/* An acquire while device 1 moves a buffer of device 0's on to host
 * memory stops that move and brings the buffer back from device 1, whole;
 * device 1's own allocation is served with the room it leaves. */
static void test_acquire_mid_relocation(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[2];
        owner_alloc a;

        start(f, SLOW);
        f->other = harness_client(&f->h, "owner");
        for (unsigned i = 0; i < 2; i++) {
                b[i] = harness_released_buffer(f->client, 8 * MiB, 500 + i);
                harness_page_out(f->client, b[i]);
        }
        expect_where(f, 16 * MiB, 0, "two pageouts");
        /* 56 of 64 MiB: 8 MiB to move on, one buffer. */
        owner_alloc_start(&a, f->other, 56 * MiB);
        expect_relocating(f, 8 * MiB);
        OK(gmd_acquire(f->client, b[0], 5000));
        assert_int_equal(gmd_buffer_tier(b[0]), GMD_TIER_VRAM);
        pattern_check(b[0], 500, "acquired mid-relocation");
        owner_alloc_join(f, &a);
        pattern_fill(a.buffer, 9);
        /* The other one still comes back whole, from wherever it is. */
        OK(gmd_acquire(f->client, b[1], 5000));
        pattern_check(b[1], 501, "the other buffer");
        pattern_check(a.buffer, 9, "the owner's buffer");
        OK(gmd_free(f->other, a.buffer));
        for (unsigned i = 0; i < 2; i++)
                OK(gmd_free(f->client, b[i]));
        expect_empty(f, "all freed");
}

/* A buffer freed while device 1 moves it on to host memory: the move's
 * memory on both sides goes once its copy is over, and device 1's own
 * allocation gets the room. */
static void test_free_mid_relocation(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[2];
        owner_alloc a;

        start(f, SLOW);
        f->other = harness_client(&f->h, "owner");
        for (unsigned i = 0; i < 2; i++) {
                b[i] = harness_released_buffer(f->client, 8 * MiB, 600 + i);
                harness_page_out(f->client, b[i]);
        }
        expect_where(f, 16 * MiB, 0, "two pageouts");
        owner_alloc_start(&a, f->other, 56 * MiB);
        expect_relocating(f, 8 * MiB);
        OK(gmd_free(f->client, b[0]));
        owner_alloc_join(f, &a);
        harness_bring_back(f->client, b[1], 601, "the other buffer");
        OK(gmd_free(f->other, a.buffer));
        OK(gmd_free(f->client, b[1]));
        expect_empty(f, "all freed");
}

/* A client that leaves with buffers on device 1, one moving on to host
 * memory and one on its way back from device 1: everything is given
 * back, to device 1 and to the host, once. */
static void test_close_mid_relocation(void **state)
{
        fixture *f = *state;
        gmd_client *leaver;
        gmd_buffer *b[3];
        owner_alloc a;

        start(f, SLOW);
        f->other = harness_client(&f->h, "owner");
        leaver = harness_client(&f->h, "leaver");
        for (unsigned i = 0; i < 3; i++) {
                b[i] = harness_released_buffer(leaver, 8 * MiB, 700 + i);
                harness_page_out(leaver, b[i]);
        }
        expect_where(f, 24 * MiB, 0, "three pageouts");
        owner_alloc_start(&a, f->other, 48 * MiB);
        expect_relocating(f, 8 * MiB);
        OK(gmd_prefetch_nowait(leaver, b[2]));
        harness_sleep_ms(50);
        gmd_disconnect(leaver);
        owner_alloc_join(f, &a);
        OK(gmd_free(f->other, a.buffer));
        expect_empty(f, "the client gone");
}

/* Moves to and from device 1 stopped half-way: a swap-out to it that an
 * acquire stops, a swap-in from it that a pageout stops. Nothing of
 * either stays counted, and the bytes are whole. */
static void test_peer_moves_stopped(void **state)
{
        fixture *f = *state;
        gmd_buffer *b;

        start(f, SLOW);
        b = harness_released_buffer(f->client, 8 * MiB, 800);
        OK(gmd_pageout_nowait(f->client, b));
        harness_sleep_ms(100);
        OK(gmd_acquire(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 800, "a swap-out to the peer stopped");
        expect_where(f, 0, 0, "the swap-out stopped");
        OK(gmd_release(f->client, b));

        harness_page_out(f->client, b);
        expect_where(f, 8 * MiB, 0, "out to the peer");
        OK(gmd_prefetch_nowait(f->client, b));
        harness_sleep_ms(100);
        harness_page_out(f->client, b);
        expect_where(f, 8 * MiB, 0, "a swap-in from the peer stopped");
        harness_bring_back(f->client, b, 800, "back after all");
        OK(gmd_free(f->client, b));
        expect_empty(f, "freed");
}

/* gpu-memd killed (SIGKILL) while device 1 holds device 0's buffers, one
 * of them moving on to host memory for device 1's own allocation and one
 * on its way back from device 1: the next daemon takes them back from
 * device 1's VRAM (kept by the keeper, [restart] keep = keeper) with
 * their bytes, the allocation asked again is served, and every count is
 * back to nothing once all is freed. */
static void test_killed_mid_relocation(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[3];
        owner_alloc a;
        int status;

        start(f, SLOW "[restart]\nkeep = keeper\nhold_s = 30\n"
                 "claim_timeout_s = 30\n");
        f->other = harness_client(&f->h, "owner");
        for (unsigned i = 0; i < 3; i++) {
                b[i] = harness_released_buffer(f->client, 8 * MiB, 900 + i);
                harness_page_out(f->client, b[i]);
        }
        expect_where(f, 24 * MiB, 0, "three pageouts");
        owner_alloc_start(&a, f->other, 48 * MiB);
        expect_relocating(f, 8 * MiB);
        OK(gmd_prefetch_nowait(f->client, b[2]));
        harness_sleep_ms(100);
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        expect_log(f, "3 of 3 buffer(s) taken back", 10000);
        for (unsigned i = 0; i < 3; i++) {
                OK(gmd_acquire(f->client, b[i], 5000));
                pattern_check(b[i], 900 + i, "after the restart");
                OK(gmd_release(f->client, b[i]));
        }
        owner_alloc_join(f, &a);
        OK(gmd_free(f->other, a.buffer));
        for (unsigned i = 0; i < 3; i++)
                OK(gmd_free(f->client, b[i]));
        expect_empty(f, "all freed after the restart");
        /* SIGINT stops for good: the keeper lets go of what it held. */
        f->client = gmd_disconnect(f->client);
        f->other = gmd_disconnect(f->other);
        kill(f->h.pid, SIGINT);
        waitpid(f->h.pid, &status, 0);
        f->h.pid = 0;
}

/* Bytes on their way off device 1 count once as room there: as a move
 * under way, not also as peer bytes that could be moved. Device 1 holds
 * 16 MiB of device 0's and its owner 24 MiB in use; a request for 48 MiB
 * there starts both relocations, and once they run room can be made for
 * at most 24 free + 16 leaving = 40 MiB: it must not hold the device
 * ([limits] wait_hold_ms = 0) for room counted twice (24 + 16 + 16), so a
 * 4 MiB allocation that fits is served at once, not after the
 * relocations. */
static void test_relocation_counted_once(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[2], *held = NULL, *poke = NULL, *small = NULL;
        owner_alloc a;
        uint64_t t0, took, peer_held;

        start(f, SLOW "[limits]\nwait_hold_ms = 0\n");
        f->other = harness_client(&f->h, "owner");
        for (unsigned i = 0; i < 2; i++) {
                b[i] = harness_released_buffer(f->client, 8 * MiB, 1000 + i);
                harness_page_out(f->client, b[i]);
        }
        expect_where(f, 16 * MiB, 0, "two pageouts");
        OK(gmd_alloc(f->other, 24 * MiB, 1, GMD_ALLOC_SWAPPABLE, 0, &held));
        owner_alloc_start(&a, f->other, 48 * MiB);
        expect_relocating(f, 16 * MiB);
        /* The queue is served again while both relocations run: a request
         * nothing can make room for comes and goes. */
        assert_int_not_equal(gmd_alloc(f->other, 60 * MiB, 1,
                                       GMD_ALLOC_SWAPPABLE, 50, &poke), 0);
        t0 = harness_now_ms();
        OK(gmd_alloc(f->other, 4 * MiB, 1, GMD_ALLOC_SWAPPABLE, 5000, &small));
        took = harness_now_ms() - t0;
        peer_held = harness_vram_pool(f->other, 1).peer_held;
        if (peer_held != 16 * MiB)
                fail_msg("4 MiB that fit on device 1 took %llu ms, served "
                         "with %llu MiB of device 0's left there: not while "
                         "the relocations ran (~1 s); log:\n%s",
                         (unsigned long long)took,
                         (unsigned long long)(peer_held / MiB),
                         harness_read_log(&f->h));
        if (harness_log_count(&f->h, "holding back smaller"))
                fail_msg("a request held device 1 for room counted twice; "
                         "log:\n%s", harness_read_log(&f->h));
        /* The large one is served once the owner's own buffer goes. */
        OK(gmd_free(f->other, held));
        owner_alloc_join(f, &a);
        OK(gmd_free(f->other, a.buffer));
        OK(gmd_free(f->other, small));
        for (unsigned i = 0; i < 2; i++) {
                harness_bring_back(f->client, b[i], 1000 + i, "back from host");
                OK(gmd_free(f->client, b[i]));
        }
        expect_empty(f, "all freed");
}

/* An acquire made on a thread of its own (it waits for room at home). */
typedef struct home_acquire {
        gmd_client *client;
        gmd_buffer *buffer;
        int r;
        pthread_t thread;
} home_acquire;

static void *home_acquire_run(void *arg)
{
        home_acquire *a = arg;

        a->r = gmd_acquire(a->client, a->buffer, 10000);
        return NULL;
}

/* A buffer on device 1 whose swap-in waits for room on device 0 (its
 * owner acquires it while device 0 is full of buffers in use) is moved on
 * to host memory when device 1's own client needs the room: that swap-in
 * is not about to free device 1, it waits for device 0, and device 1's
 * client waited out its 10 s for it (or for ever, were device 0's room
 * held by a process waiting on device 1). Device 0's room comes while the
 * buffer is on its way to host memory: its swap-in starts once it is
 * there, from there, and the acquire gets the bytes whole. */
static void test_relocated_while_its_swap_in_waits(void **state)
{
        fixture *f = *state;
        gmd_buffer *b, *full = NULL;
        gmd_pool_status p0;
        home_acquire acq;
        owner_alloc a;

        start(f, SLOW);
        f->other = harness_client(&f->h, "owner");
        b = harness_released_buffer(f->client, 8 * MiB, 1100);
        harness_page_out(f->client, b);
        expect_where(f, 8 * MiB, 0, "a pageout");
        /* Device 0 full of a buffer in use: the swap-in must wait. */
        p0 = harness_vram_pool(f->client, 0);
        OK(gmd_alloc(f->client, p0.capacity, 0, GMD_ALLOC_SWAPPABLE, 5000,
                     &full));
        acq.client = f->client;
        acq.buffer = b;
        acq.r = -1;
        assert_int_equal(pthread_create(&acq.thread, NULL, home_acquire_run,
                                        &acq), 0);
        harness_sleep_ms(100);
        /* Device 1's client wants all of device 1. */
        owner_alloc_start(&a, f->other, 64 * MiB);
        expect_relocating(f, 8 * MiB);
        /* Room at home while it moves on: the swap-in waits for that move
         * and comes from host memory. */
        OK(gmd_free(f->client, full));
        owner_alloc_join(f, &a);
        pthread_join(acq.thread, NULL);
        if (acq.r != 0)
                fail_msg("the acquire failed: %d (%s); log:\n%s", acq.r,
                         gmd_last_error(), harness_read_log(&f->h));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 1100, "back after its relocation");
        OK(gmd_release(f->client, b));
        OK(gmd_free(f->other, a.buffer));
        OK(gmd_free(f->client, b));
        expect_empty(f, "all freed");
}

/* ---- SPILLABLE buffers on a peer ---------------------------------------- */

/* A SPILLABLE buffer of `size` on device 0 holding pattern `seed`,
 * released. */
static gmd_buffer *spillable(gmd_client *c, uint64_t size, uint64_t seed)
{
        gmd_buffer *s = NULL;

        OK(gmd_alloc(c, size, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &s));
        pattern_fill(s, seed);
        OK(gmd_release(c, s));
        return s;
}

/* Acquired where it rests (a SPILLABLE buffer is usable on either tier):
 * out of device 0, it holds `seed`; then it holds `next`, written there
 * through the same address, and is released. */
static void use_where_it_rests(gmd_client *c, gmd_buffer *s, uint64_t seed,
                               uint64_t next, const char *when)
{
        OK(gmd_acquire(c, s, 0));
        assert_int_equal(gmd_buffer_tier(s), GMD_TIER_HOST);
        pattern_check(s, seed, when);
        pattern_fill(s, next);
        pattern_check(s, next, when);
        OK(gmd_release(c, s));
}

/* A SPILLABLE buffer evicted from a full device 0 goes to device 1's
 * VRAM, its owner remapped there: read and written at the same address,
 * every byte whole. Device 1's own client needs the room: the buffer is
 * moved on to host memory, its owner remapped again, the bytes whole.
 * Room at home again, an acquire with a deadline brings it back, as from
 * host memory; paged out again it goes to device 1 and comes back from
 * there, and the memory its owner mapped is not kept as a spare. */
static void test_spillable_on_peer(void **state)
{
        fixture *f = *state;
        gmd_buffer *s, *fill = NULL, *big = NULL;
        gmd_client *filler;
        gmd_pool_status p;

        start(f, NULL);
        s = spillable(f->client, 8 * MiB, 1200);
        filler = harness_client(&f->h, "filler");
        f->other = harness_client(&f->h, "owner");
        /* 60 of device 0's 64 MiB: the SPILLABLE buffer must go. */
        OK(gmd_alloc(filler, 60 * MiB, 0, GMD_ALLOC_SWAPPABLE, 5000, &fill));
        expect_where(f, 8 * MiB, 0, "a SPILLABLE buffer evicted");
        assert_int_equal(harness_vram_pool(f->client, 1).peer_held, 8 * MiB);
        use_where_it_rests(f->client, s, 1200, 1201, "on device 1");

        /* Device 1's own client takes all of device 1. */
        p = harness_vram_pool(f->other, 1);
        OK(gmd_alloc(f->other, p.capacity, 1, GMD_ALLOC_SWAPPABLE, 5000, &big));
        pattern_fill(big, 7);
        expect_where(f, 0, 8 * MiB, "device 1 taken by its owner");
        expect_log(f, "needs room: moving", 1000);
        use_where_it_rests(f->client, s, 1201, 1202, "moved on to host memory");
        pattern_check(big, 7, "device 1's own buffer");
        OK(gmd_free(f->other, big));
        OK(gmd_free(filler, fill));
        gmd_disconnect(filler);

        /* Room at home: back with an acquire that may wait. */
        OK(gmd_acquire(f->client, s, 5000));
        assert_int_equal(gmd_buffer_tier(s), GMD_TIER_VRAM);
        pattern_check(s, 1202, "back in VRAM");
        OK(gmd_release(f->client, s));

        /* Out to device 1 and back from there. */
        OK(gmd_pageout(f->client, s));
        OK(gmd_wait(f->client, s, 5000));
        expect_where(f, 8 * MiB, 0, "paged out to device 1");
        use_where_it_rests(f->client, s, 1202, 1203, "paged out to device 1");
        OK(gmd_acquire(f->client, s, 5000));
        assert_int_equal(gmd_buffer_tier(s), GMD_TIER_VRAM);
        pattern_check(s, 1203, "back from device 1");
        expect_where(f, 0, 0, "back from device 1");
        assert_int_equal(spare_on_1(f), 0);
        OK(gmd_free(f->client, s));
        expect_empty(f, "freed");
}

/* Held (acquired) on device 1, a SPILLABLE buffer does not move: device
 * 1's own allocation waits for it, and gets the room once it is
 * released; the bytes are whole on host memory. */
static void test_spillable_held_on_peer(void **state)
{
        fixture *f = *state;
        gmd_buffer *s, *big = NULL;
        owner_alloc a;

        start(f, NULL);
        f->other = harness_client(&f->h, "owner");
        s = spillable(f->client, 8 * MiB, 1300);
        OK(gmd_pageout(f->client, s));
        OK(gmd_wait(f->client, s, 5000));
        expect_where(f, 8 * MiB, 0, "paged out to device 1");
        OK(gmd_acquire(f->client, s, 0));
        pattern_check(s, 1300, "held on device 1");
        /* 56 of device 1's 64 MiB fit beside it; 8 more only with its. */
        OK(gmd_alloc(f->other, 56 * MiB, 1, GMD_ALLOC_SWAPPABLE, 5000, &big));
        owner_alloc_start(&a, f->other, 8 * MiB);
        harness_sleep_ms(300);
        expect_where(f, 8 * MiB, 0, "held there while device 1 waits");
        pattern_fill(s, 1301);
        OK(gmd_release(f->client, s));
        owner_alloc_join(f, &a);
        expect_where(f, 0, 8 * MiB, "released: moved on");
        use_where_it_rests(f->client, s, 1301, 1302, "on host memory");
        OK(gmd_free(f->other, a.buffer));
        OK(gmd_free(f->other, big));
        OK(gmd_free(f->client, s));
        expect_empty(f, "freed");
}

/* How a SPILLABLE buffer's owner goes while device 1 moves the buffer
 * on to host memory (its owner's remap not sent yet). */
typedef enum spill_gone {
        GONE_FREED,             /* gmd_free */
        GONE_CLOSED,            /* gmd_disconnect */
        GONE_KILLED,            /* its process SIGKILLed */
} spill_gone;

/* The owner's process for GONE_KILLED, forked before this process has
 * threads: puts a SPILLABLE buffer on device 1 (a pageout), says so on
 * `fd` and waits to be killed. */
static void spill_child(const char *socket, int fd)
{
        gmd_client *c = NULL;
        gmd_buffer *s = NULL;
        char ok = 'r';

        if (gmd_connect(socket, "spiller", &c) != 0 ||
            gmd_alloc(c, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &s) != 0)
                _exit(2);
        pattern_fill(s, 1500);
        if (gmd_release(c, s) != 0 || gmd_pageout(c, s) != 0 ||
            gmd_wait(c, s, 5000) != 0 ||
            write(fd, &ok, 1) != 1)
                _exit(3);
        for (;;)
                pause();
}

static void spill_gone_mid_relocation(fixture *f, spill_gone how)
{
        gmd_client *owner = NULL;
        gmd_buffer *s = NULL;
        harness_proc *child = NULL;
        owner_alloc a;
        int sv[2];
        char ok;

        if (how == GONE_KILLED) {
                harness_init_small(&f->h, PEER_CONFIG SLOW);
                harness_start(&f->h, NULL);
                assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET |
                                            SOCK_CLOEXEC, 0, sv), 0);
                child = harness_track(f);
                child->pid = fork();
                assert_true(child->pid >= 0);
                if (child->pid == 0) {
                        close(sv[0]);
                        spill_child(f->h.socket_path, sv[1]);
                }
                close(sv[1]);
                child->out_fd = sv[0];
                if (read(child->out_fd, &ok, 1) != 1)
                        fail_msg("the spiller did not start; log:\n%s",
                                 harness_read_log(&f->h));
                f->client = harness_client(&f->h, "home");
        } else {
                start(f, SLOW);
                owner = harness_client(&f->h, "spiller");
                s = spillable(owner, 8 * MiB, 1500);
                OK(gmd_pageout(owner, s));
                OK(gmd_wait(owner, s, 5000));
        }
        f->other = harness_client(&f->h, "owner");
        expect_where(f, 8 * MiB, 0, "a SPILLABLE buffer on device 1");
        /* All of device 1's 64 MiB. */
        owner_alloc_start(&a, f->other, 64 * MiB);
        expect_relocating(f, 8 * MiB);
        if (how == GONE_FREED) {
                OK(gmd_free(owner, s));
                gmd_disconnect(owner);
        } else if (how == GONE_CLOSED) {
                gmd_disconnect(owner);
        } else {
                kill(child->pid, SIGKILL);
                waitpid(child->pid, NULL, 0);
                child->pid = -1;
        }
        owner_alloc_join(f, &a);
        pattern_fill(a.buffer, 11);
        pattern_check(a.buffer, 11, "device 1's own buffer");
        OK(gmd_free(f->other, a.buffer));
        expect_empty(f, "the SPILLABLE buffer's owner gone");
}

/* A SPILLABLE buffer's owner frees it, closes or is killed while device 1
 * moves it on to host memory: device 1's own allocation gets the room,
 * and every byte of every pool is given back once. */
static void test_spillable_freed_mid_relocation(void **state)
{
        spill_gone_mid_relocation(*state, GONE_FREED);
}

static void test_spillable_closed_mid_relocation(void **state)
{
        spill_gone_mid_relocation(*state, GONE_CLOSED);
}

static void test_spillable_killed_mid_relocation(void **state)
{
        spill_gone_mid_relocation(*state, GONE_KILLED);
}

/* gpu-memd killed (SIGKILL) while a SPILLABLE buffer rests on device 1,
 * its owner mapping it there: the next daemon takes it back from device
 * 1's VRAM (kept by the keeper), counted there as device 0's, and its
 * owner uses it at the same address; device 1's own client then moves it
 * on to host memory, its bytes whole. */
static void test_spillable_restart(void **state)
{
        fixture *f = *state;
        gmd_buffer *s, *big = NULL;
        gmd_pool_status p;
        int status;

        start(f, "[restart]\nkeep = keeper\nhold_s = 30\n"
                 "claim_timeout_s = 30\n");
        f->other = harness_client(&f->h, "owner");
        s = spillable(f->client, 8 * MiB, 1600);
        OK(gmd_pageout(f->client, s));
        OK(gmd_wait(f->client, s, 5000));
        expect_where(f, 8 * MiB, 0, "paged out to device 1");
        use_where_it_rests(f->client, s, 1600, 1601, "on device 1");
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        expect_log(f, "1 of 1 buffer(s) taken back", 10000);
        expect_where(f, 8 * MiB, 0, "after the restart");
        use_where_it_rests(f->client, s, 1601, 1602,
                           "on device 1 after the restart");
        p = harness_vram_pool(f->other, 1);
        OK(gmd_alloc(f->other, p.capacity, 1, GMD_ALLOC_SWAPPABLE, 5000,
                     &big));
        expect_where(f, 0, 8 * MiB, "moved on after the restart");
        use_where_it_rests(f->client, s, 1602, 1603,
                           "on host memory after the restart");
        OK(gmd_free(f->other, big));
        OK(gmd_free(f->client, s));
        expect_empty(f, "freed after the restart");
        f->client = gmd_disconnect(f->client);
        f->other = gmd_disconnect(f->other);
        kill(f->h.pid, SIGINT);
        waitpid(f->h.pid, &status, 0);
        f->h.pid = 0;
}

/* What the owner maps is told again to the daemon it reconnects to
 * (MSG_REACH on the new connection, before its claims): a new daemon
 * knows nothing of the old session's report. gpu-memd killed with a
 * SPILLABLE buffer in device 0's VRAM; the next daemon takes it back
 * there, and paged out it goes to device 1, as before the restart, not
 * to host memory as for a client that said nothing. */
static void test_spillable_restart_reach(void **state)
{
        fixture *f = *state;
        gmd_buffer *s;
        int status;

        start(f, "[restart]\nkeep = keeper\nhold_s = 30\n"
                 "claim_timeout_s = 30\n");
        s = spillable(f->client, 8 * MiB, 1650);
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        expect_log(f, "1 of 1 buffer(s) taken back", 10000);
        expect_where(f, 0, 0, "after the restart, in device 0's VRAM");
        OK(gmd_pageout(f->client, s));
        OK(gmd_wait(f->client, s, 5000));
        expect_where(f, 8 * MiB, 0, "paged out after the restart");
        use_where_it_rests(f->client, s, 1650, 1651,
                           "on device 1 after the restart");
        OK(gmd_free(f->client, s));
        expect_empty(f, "freed after the restart");
        f->client = gmd_disconnect(f->client);
        kill(f->h.pid, SIGINT);
        waitpid(f->h.pid, &status, 0);
        f->h.pid = 0;
}

/* ---- what the owner's process can map ------------------------------------ */

#define UUID1 "GPU-5140dd00-0000-4000-8000-000000000001"

/* A client connected as `name` under CUDA_VISIBLE_DEVICES=`visible`, as
 * a batch system starts a job: what it says it maps follows (sim applies
 * CUDA's rule to the daemon's devices). */
static gmd_client *client_seeing(fixture *f, const char *name,
                                 const char *visible)
{
        gmd_client *c;

        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
        c = harness_client(&f->h, name);
        unsetenv("CUDA_VISIBLE_DEVICES");
        return c;
}

/* Device 0 fills up: of two SPILLABLE buffers evicted, the one whose
 * owner sees only device 0 goes to host memory, the one whose owner sees
 * both (by UUID, in another order) to device 1; each is used where it
 * rests. The first owner's SWAPPABLE buffer, which it maps nowhere while
 * it is out, still goes to device 1. */
static void test_spillable_unseen_peer(void **state)
{
        fixture *f = *state;
        gmd_client *only0, *both, *filler;
        gmd_buffer *a, *b, *w = NULL, *fill = NULL;

        start(f, NULL);
        only0 = client_seeing(f, "sees-0", "0");
        both = client_seeing(f, "sees-both", UUID1 ",0");
        a = spillable(only0, 8 * MiB, 1700);
        b = spillable(both, 8 * MiB, 1710);
        filler = harness_client(&f->h, "filler");
        /* 60 of device 0's 64 MiB: both must go. */
        OK(gmd_alloc(filler, 60 * MiB, 0, GMD_ALLOC_SWAPPABLE, 5000, &fill));
        expect_where(f, 8 * MiB, 8 * MiB, "device 0 filled");
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        use_where_it_rests(only0, a, 1700, 1701, "on host memory");
        use_where_it_rests(both, b, 1710, 1711, "on device 1");
        OK(gmd_free(filler, fill));
        gmd_disconnect(filler);

        OK(gmd_alloc(only0, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &w));
        pattern_fill(w, 1720);
        OK(gmd_release(only0, w));
        OK(gmd_pageout(only0, w));
        OK(gmd_wait(only0, w, 5000));
        expect_where(f, 16 * MiB, 8 * MiB, "its SWAPPABLE buffer paged out");
        OK(gmd_acquire(only0, w, 5000));
        pattern_check(w, 1720, "its SWAPPABLE buffer back from device 1");
        OK(gmd_free(only0, w));

        /* Paged out again, each goes where it went before. */
        OK(gmd_acquire(only0, a, 5000));
        OK(gmd_release(only0, a));
        OK(gmd_pageout(only0, a));
        OK(gmd_wait(only0, a, 5000));
        use_where_it_rests(only0, a, 1701, 1702, "paged out to host memory");
        expect_where(f, 8 * MiB, 8 * MiB, "paged out again");
        OK(gmd_free(only0, a));
        OK(gmd_free(both, b));
        gmd_disconnect(only0);
        gmd_disconnect(both);
        expect_empty(f, "freed");
}

/* A client that says nothing of what it maps (an older libgpumem: its
 * hello, no MSG_REACH after it) maps no other device's memory: its
 * SPILLABLE buffer paged out goes to host memory, where it is remapped,
 * every byte whole. */
static void test_spillable_said_nothing(void **state)
{
        fixture *f = *state;
        Gmd__AllocRequest alloc = GMD__ALLOC_REQUEST__INIT;
        Gmd__BufferRequest rel = GMD__BUFFER_REQUEST__INIT;
        uint32_t next = 2;
        uint64_t id, seq;
        raw_client c;
        raw_msg m;

        start(f, NULL);
        raw_init(&c);
        raw_hello(&c, &f->h, "old");
        alloc.size = 8 * MiB;
        alloc.flags = GMD_ALLOC_SPILLABLE;
        raw_send(&c, GMD__MSG_TYPE__MSG_ALLOC, next, &alloc.base);
        m = raw_expect(&c, GMD__MSG_TYPE__MSG_ALLOC_REPLY, next++);
        id = ((Gmd__AllocReply *)m.msg)->buffer_id;
        assert_true(m.fd >= 0);
        pattern_fill_mem(raw_map(&c, m.fd, 8 * MiB), 8 * MiB, 1800);
        raw_msg_clear(&m);
        rel.buffer_id = id;
        raw_send(&c, GMD__MSG_TYPE__MSG_RELEASE, next, &rel.base);
        m = raw_expect(&c, GMD__MSG_TYPE__MSG_OK_REPLY, next++);
        raw_msg_clear(&m);
        /* The remap names host memory holding the bytes (checked). */
        seq = raw_pageout(&c, &next, id, 8 * MiB, 1800);
        raw_ack(&c, id, seq);
        expect_where(f, 0, 8 * MiB, "paged out by a client that said nothing");
        raw_close(&c);
        expect_empty(f, "its client gone");
}

/* The owner said it maps device 1, but its remap there fails (the sim
 * mapper's hook stands for a driver that refuses): the buffer is not
 * lost. Device 0 fills up; the buffer goes to device 1, the owner cannot
 * map it and says so; it goes back to device 0, whole, and the eviction
 * moves it on to host memory, where its owner uses it. Device 1 holds
 * none of it; its later pageouts go to host memory too. */
static void test_spillable_peer_refused(void **state)
{
        fixture *f = *state;
        gmd_buffer *s, *fill = NULL;
        gmd_client *filler;

        start(f, NULL);
        setenv("GMD_SIM_REFUSE_PEER", "1", 1);
        f->other = harness_client(&f->h, "refused");
        unsetenv("GMD_SIM_REFUSE_PEER");
        s = spillable(f->other, 8 * MiB, 1900);
        filler = harness_client(&f->h, "filler");
        OK(gmd_alloc(filler, 60 * MiB, 0, GMD_ALLOC_SWAPPABLE, 5000, &fill));
        expect_log(f, "could not map buffer", 2000);
        expect_where(f, 0, 8 * MiB, "device 1 refused: on host memory");
        assert_int_equal(spare_on_1(f), 0);
        use_where_it_rests(f->other, s, 1900, 1901, "on host memory");
        OK(gmd_free(filler, fill));
        gmd_disconnect(filler);

        OK(gmd_acquire(f->other, s, 5000));
        assert_int_equal(gmd_buffer_tier(s), GMD_TIER_VRAM);
        pattern_check(s, 1901, "back in VRAM");
        OK(gmd_release(f->other, s));
        OK(gmd_pageout(f->other, s));
        OK(gmd_wait(f->other, s, 5000));
        expect_where(f, 0, 8 * MiB, "paged out after the refusal");
        use_where_it_rests(f->other, s, 1901, 1902, "paged out to host memory");
        assert_int_equal(harness_log_count(&f->h, "could not map buffer"), 1);
        OK(gmd_free(f->other, s));
        expect_empty(f, "freed");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_out_to_peer_and_back),
                HARNESS_TEST(test_owner_comes_first),
                HARNESS_TEST(test_headroom),
                HARNESS_TEST(test_off),
                HARNESS_TEST(test_spillable_on_peer),
                HARNESS_TEST(test_spillable_held_on_peer),
                HARNESS_TEST(test_acquire_mid_relocation),
                HARNESS_TEST(test_free_mid_relocation),
                HARNESS_TEST(test_close_mid_relocation),
                HARNESS_TEST(test_peer_moves_stopped),
                HARNESS_TEST(test_killed_mid_relocation),
                HARNESS_TEST(test_relocation_counted_once),
                HARNESS_TEST(test_relocated_while_its_swap_in_waits),
                HARNESS_TEST(test_spillable_freed_mid_relocation),
                HARNESS_TEST(test_spillable_closed_mid_relocation),
                HARNESS_TEST(test_spillable_killed_mid_relocation),
                HARNESS_TEST(test_spillable_restart),
                HARNESS_TEST(test_spillable_restart_reach),
                HARNESS_TEST(test_spillable_unseen_peer),
                HARNESS_TEST(test_spillable_said_nothing),
                HARNESS_TEST(test_spillable_peer_refused),
        };

        /* What each client sees is the test's to say (client_seeing). */
        unsetenv("CUDA_VISIBLE_DEVICES");

        return cmocka_run_group_tests(tests, NULL, NULL);
}
