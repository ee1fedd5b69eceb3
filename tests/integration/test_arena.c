/*
 * test_arena — the host arena on the sim backend, with the real daemon:
 * the host copy of a SWAPPABLE buffer swapped out comes from memory made
 * ahead of time ([pools] host_stock), split in pieces a copy never
 * crosses; what does not fit gets an allocation of its own, with a
 * warning at most once a minute where the arena cannot grow; where it can
 * ([pools] host_stock_grow, the default) it grows ahead of demand, when
 * what is free falls below a low-water mark or the VRAM pool fills up
 * ([pools] host_stock_vram), by doubling steps, so a workload swapping
 * out more than host_stock never finds it full, and stops at host_limit. SPILLABLE buffers, which their owner
 * maps on host, never use it. [pools] host_limit bounds the arena and what
 * is pinned beside it together. Status and gpu-memctl show its size.
 *
 * With host_stock = 32M the sim arena of device 0 is 4 pieces of 8 MiB,
 * so a 12 MiB buffer is stored as two parts. The figures checked follow
 * extent.c: a request no single free range holds takes the largest ones
 * first. Buffers carry patterns written before a move and checked word
 * by word after it, also after arena memory was handed out again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"
#include "pattern.h"

#define ARENA_CONFIG "[pools]\nhost_limit = 256M\nhost_stock = 32M\n" \
                     "[swap]\nchunk_size = 2M\n"
/* The same arena, kept at its size: what the tests of what it serves
 * and what it refuses see. */
#define FIXED_CONFIG "[pools]\nhost_limit = 256M\nhost_stock = 32M\n" \
                     "host_stock_grow = no\n[swap]\nchunk_size = 2M\n"
#define GROWS "the host arena grows by"
#define NO_ROOM "the host arena has no room"
#define AHEAD "pinned in the background, ahead of demand"
#define FOUND_FULL "swap-outs found it full"
#define POOL_FILLS "the device's VRAM pool is filling up"

typedef harness_fixture fixture;



/* ---- helpers ---------------------------------------------------------------- */


/* Device 0's arena figures from its VRAM pool entry. */
static void arena(gmd_client *c, uint64_t *ret_size, uint64_t *ret_free)
{
        gmd_status *s = harness_status(c);
        bool found = false;

        for (size_t i = 0; i < s->n_pools; i++) {
                if (s->pools[i].device == 0 && s->pools[i].tier == GMD_TIER_VRAM) {
                        *ret_size = s->pools[i].arena_size;
                        *ret_free = s->pools[i].arena_free;
                        found = true;
                }
        }
        gmd_status_free(s);
        if (!found)
                fail_msg("status has no VRAM pool for device 0");
}

/* Poll until the arena shows these figures (the old backing of a move is
 * let go when the owner's ack arrives, just after its acquire returns). */
static void expect_arena(fixture *f, uint64_t size, uint64_t free_,
                         const char *when)
{
        uint64_t deadline = harness_now_ms() + 2000, s = 0, fr = 0;

        for (;;) {
                arena(f->client, &s, &fr);
                if (s == size && fr == free_)
                        return;
                if (harness_now_ms() >= deadline)
                        break;
                harness_sleep_ms(5);
        }
        fail_msg("%s: arena %llu MiB pinned, %llu MiB free; want %llu and %llu; "
                 "log:\n%s", when, (unsigned long long)(s / MiB),
                 (unsigned long long)(fr / MiB), (unsigned long long)(size / MiB),
                 (unsigned long long)(free_ / MiB), harness_read_log(&f->h));
}

static uint64_t host_used(gmd_client *c)
{
        gmd_status *s = harness_status(c);
        uint64_t used = UINT64_MAX;

        for (size_t i = 0; i < s->n_pools; i++)
                if (s->pools[i].tier == GMD_TIER_HOST)
                        used = s->pools[i].used;
        gmd_status_free(s);
        return used;
}

static void expect_no_room_lines(fixture *f, int want, const char *when)
{
        int n = harness_log_count(&f->h, NO_ROOM);

        if (n != want)
                fail_msg("%s: %d \"%s\" lines in the log, want %d; log:\n%s", when,
                         n, NO_ROOM, want, harness_read_log(&f->h));
}

/* gpu-memctl with `args` against the fixture's daemon; its stdout. */
static char *ctl(fixture *f, const char *arg1, const char *arg2)
{
        const char *argv[] = { GMD_CTL_PATH, arg1, arg2, NULL };
        char *out = NULL, *err = NULL;
        int status = harness_run(&f->h, NULL, argv, &out, &err, 5000);

        if (harness_exit_code(status) != 0)
                fail_msg("gpu-memctl %s %s exited %d; stderr:\n%s", arg1,
                         arg2 ? arg2 : "", harness_exit_code(status), err);
        free(err);
        return out;
}

static void expect_text(const char *text, const char *want, bool present)
{
        if (!strstr(text, want) == present)
                fail_msg("\"%s\" %s in:\n%s", want,
                         present ? "missing" : "unexpected", text);
}

/* ---- 1. swap-outs served from the arena ------------------------------------- */

/* One round: new patterns, release, page out in `order` (the first two
 * fit the arena, the third is pinned on its own), then acquire in that
 * order, checking the bytes and the arena after each step. `warned`: the
 * warning lines expected before this round. */
static void arena_round(fixture *f, gmd_buffer **b, const int *order,
                        uint64_t seed, int warned)
{
        static const uint64_t free_after_out[3] = { 20 * MiB, 8 * MiB, 8 * MiB };
        static const uint64_t free_after_in[3] = { 20 * MiB, 32 * MiB, 32 * MiB };
        char when[64];

        for (int i = 0; i < 3; i++) {
                pattern_fill(b[i], seed + (uint64_t)i);
                OK(gmd_release(f->client, b[i]));
        }
        for (int k = 0; k < 3; k++) {
                gmd_buffer *x = b[order[k]];

                snprintf(when, sizeof(when), "seed %llu, pageout %d",
                         (unsigned long long)seed, k);
                OK(gmd_pageout(f->client, x));
                OK(gmd_wait(f->client, x, 5000));
                assert_int_equal(gmd_buffer_tier(x), GMD_TIER_HOST);
                expect_arena(f, 32 * MiB, free_after_out[k], when);
                if (k < 2)
                        expect_no_room_lines(f, warned, when);
        }
        free(harness_wait_log(&f->h, NO_ROOM, 2000));
        expect_no_room_lines(f, 1, "after the third pageout");
        assert_int_equal(host_used(f->client), 36 * MiB);

        for (int k = 0; k < 3; k++) {
                int i = order[k];

                snprintf(when, sizeof(when), "seed %llu, acquire %d",
                         (unsigned long long)seed, k);
                OK(gmd_acquire(f->client, b[i], 5000));
                assert_int_equal(gmd_buffer_tier(b[i]), GMD_TIER_VRAM);
                pattern_check(b[i], seed + (uint64_t)i, when);
                expect_arena(f, 32 * MiB, free_after_in[k], when);
        }
        assert_int_equal(host_used(f->client), 0);
}

static void test_arena_serves_swapouts(void **state)
{
        static const int forward[3] = { 0, 1, 2 }, backward[3] = { 2, 1, 0 };
        fixture *f = *state;
        gmd_buffer *b[3] = { NULL };
        void *ptr[3];

        harness_start_small(&f->h, FIXED_CONFIG);
        f->client = harness_client(&f->h, "arena");
        expect_arena(f, 32 * MiB, 32 * MiB, "at start");
        for (int i = 0; i < 3; i++) {
                OK(gmd_alloc(f->client, 12 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                             GMD_NO_WAIT, &b[i]));
                ptr[i] = gmd_buffer_ptr(b[i]);
        }
        expect_arena(f, 32 * MiB, 32 * MiB, "allocating takes no arena");

        arena_round(f, b, forward, 100, 0);
        /* Again, the other way round: the parts the first buffer had now
         * hold the third's bytes, and the warning is not repeated. */
        arena_round(f, b, backward, 200, 1);

        for (int i = 0; i < 3; i++) {
                assert_ptr_equal(gmd_buffer_ptr(b[i]), ptr[i]);
                OK(gmd_free(f->client, b[i]));
        }
        expect_arena(f, 32 * MiB, 32 * MiB, "after free");
        harness_stop(&f->h);
}

/* ---- 2. SPILLABLE buffers keep out of it ------------------------------------- */

static void test_spillable_skips_arena(void **state)
{
        fixture *f = *state;
        gmd_buffer *sw = NULL, *sp = NULL;
        void *ptr;

        harness_start_small(&f->h, ARENA_CONFIG);
        f->client = harness_client(&f->h, "spill");
        /* A SWAPPABLE one out first, so the arena is seen to count. */
        sw = harness_released_buffer(f->client, 4 * MiB, 1);
        harness_page_out(f->client, sw);
        expect_arena(f, 32 * MiB, 28 * MiB, "swappable out");

        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &sp));
        ptr = gmd_buffer_ptr(sp);
        pattern_fill(sp, 2);
        /* Released, it moves; acquired again where it rests, its owner
         * uses the host copy. */
        OK(gmd_release(f->client, sp));
        OK(gmd_pageout(f->client, sp));
        OK(gmd_wait(f->client, sp, 5000));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, sp, 0));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_HOST);
        assert_ptr_equal(gmd_buffer_ptr(sp), ptr);
        assert_int_equal(host_used(f->client), 12 * MiB);
        expect_arena(f, 32 * MiB, 28 * MiB, "spillable out");
        /* Its host copy was never asked of the arena: no warning either. */
        expect_no_room_lines(f, 0, "spillable out");
        pattern_check(sp, 2, "spillable on host");
        pattern_fill(sp, 3);            /* in use where it is */
        pattern_check(sp, 3, "spillable written on host");

        OK(gmd_release(f->client, sp));
        OK(gmd_prefetch(f->client, sp));
        OK(gmd_wait(f->client, sp, 5000));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_VRAM);
        OK(gmd_acquire(f->client, sp, 0));
        assert_ptr_equal(gmd_buffer_ptr(sp), ptr);
        pattern_check(sp, 3, "spillable back in VRAM");
        expect_arena(f, 32 * MiB, 28 * MiB, "spillable back");

        OK(gmd_acquire(f->client, sw, 5000));
        pattern_check(sw, 1, "swappable back");
        expect_arena(f, 32 * MiB, 32 * MiB, "all back");
        OK(gmd_free(f->client, sw));
        OK(gmd_free(f->client, sp));
        harness_stop(&f->h);
}

/* ---- 3. host_limit bounds the arena and what is pinned beside it ------------ */

/* A SPILLABLE buffer holding `seed`, moved out while released and held
 * again where it rests; fails the test unless it went. */
static gmd_buffer *spilled(fixture *f, uint64_t seed)
{
        gmd_buffer *b = NULL;

        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &b));
        pattern_fill(b, seed);
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, b, 0));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        return b;
}

/* host_limit 48M with a 32M arena leaves 16M for host memory pinned on its
 * own: two 8 MiB SPILLABLE buffers fit on host, a third is refused with an
 * error that names the limit (and stays in VRAM, intact), although the
 * host pool still has room, which a SWAPPABLE buffer's copy in the arena
 * then takes. Once a SPILLABLE one is freed the third fits. */
static void test_host_limit_bounds_pinned(void **state)
{
        fixture *f = *state;
        gmd_buffer *s1, *s2, *s3 = NULL, *sw = NULL;
        int r;

        harness_start_small(&f->h, "[pools]\nhost_limit = 48M\nhost_stock = 32M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "pinner");
        s1 = spilled(f, 31);
        s2 = spilled(f, 32);
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &s3));
        pattern_fill(s3, 33);
        OK(gmd_release(f->client, s3));
        r = gmd_pageout(f->client, s3);
        if (r != GMD_ENOMEM || !strstr(gmd_last_error(), "host_limit"))
                fail_msg("a third 8 MiB pinned on its own: gmd_pageout = %d (%s), "
                         "want GMD_ENOMEM naming host_limit", r, gmd_last_error());
        OK(gmd_wait(f->client, s3, 5000));
        assert_int_equal(gmd_buffer_tier(s3), GMD_TIER_VRAM);
        OK(gmd_acquire(f->client, s3, 0));      /* held: it cannot move */
        pattern_check(s3, 33, "refused its pageout");
        assert_int_equal(host_used(f->client), 16 * MiB);

        /* With VRAM full of what cannot move (VRAM kept for swap-ins is
         * room, released for it), a SPILLABLE allocation finds no room on
         * either tier, and the error says so. */
        {
                gmd_pool_status vram = harness_vram_pool(f->client, 0);
                gmd_buffer *pin = NULL, *none = NULL;

                OK(gmd_alloc(f->client, vram.capacity - (vram.used - vram.kept), 0,
                             GMD_ALLOC_PIN_VRAM, GMD_NO_WAIT, &pin));
                r = gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE,
                              GMD_NO_WAIT, &none);
                if (r != GMD_ENOMEM || !strstr(gmd_last_error(), "host_limit"))
                        fail_msg("a SPILLABLE allocation with no room anywhere: %d "
                                 "(%s), want GMD_ENOMEM naming host_limit", r,
                                 gmd_last_error());
                OK(gmd_free(f->client, pin));
        }

        sw = harness_released_buffer(f->client, 8 * MiB, 34);
        harness_page_out(f->client, sw);
        expect_arena(f, 32 * MiB, 24 * MiB, "swappable out beside the spilled");

        OK(gmd_free(f->client, s1));
        OK(gmd_release(f->client, s3));
        OK(gmd_pageout(f->client, s3));
        OK(gmd_wait(f->client, s3, 5000));
        assert_int_equal(gmd_buffer_tier(s3), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, s3, 0));
        pattern_check(s3, 33, "on host after room was freed");
        pattern_check(s2, 32, "spilled beside it");
        OK(gmd_acquire(f->client, sw, 5000));
        pattern_check(sw, 34, "swappable back");
        OK(gmd_free(f->client, s2));
        OK(gmd_free(f->client, s3));
        OK(gmd_free(f->client, sw));
        harness_stop(&f->h);
}

/* ---- 4. no arena; what gpu-memctl shows --------------------------------------- */

static void test_arena_off(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        char *out;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\nhost_stock = 0\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "noarena");
        expect_arena(f, 0, 0, "host_stock = 0");
        b = harness_released_buffer(f->client, 12 * MiB, 7);
        harness_page_out(f->client, b);
        assert_int_equal(host_used(f->client), 12 * MiB);
        expect_arena(f, 0, 0, "out, no arena");
        /* No arena is the operator's choice: no advice to enlarge it. */
        assert_int_equal(harness_log_count(&f->h, NO_ROOM), 0);

        out = ctl(f, "status", NULL);
        expect_text(out, "COPIES", true);
        expect_text(out, "host arena", false);
        free(out);
        out = ctl(f, "status", "--json");
        expect_text(out, "\"arena_size\": 0,", true);
        expect_text(out, "\"arena_free\": 0", true);
        free(out);

        OK(gmd_acquire(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 7, "back without an arena");
        OK(gmd_free(f->client, b));
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        /* With one, 12 MiB of it in use. */
        harness_start_small(&f->h, ARENA_CONFIG);
        f->client = harness_client(&f->h, "witharena");
        OK(gmd_alloc(f->client, 12 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &b));
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        expect_arena(f, 32 * MiB, 20 * MiB, "12 MiB out");
        out = ctl(f, "status", NULL);
        /* On sim it is not pinned memory: said so. */
        expect_text(out, "\ngpu0 host arena: 32 MiB set aside (sim: plain memory, "
                    "not pinned), 20 MiB free\n", true);
        expect_text(out, "pinned, 20 MiB", false);
        free(out);
        out = ctl(f, "status", "--json");
        expect_text(out, "\"arena_size\": 33554432", true);
        expect_text(out, "\"arena_free\": 20971520", true);
        free(out);
        OK(gmd_free(f->client, b));
        expect_arena(f, 32 * MiB, 32 * MiB, "freed while out");
        harness_stop(&f->h);
}

/* ---- 5. it grows before swap-outs find it full --------------------------------- */

/* Three released 12 MiB buffers holding `seed` + i, paged out in order:
 * two fit a 32 MiB arena of 8 MiB pieces, the third finds it full. */
static void three_out(fixture *f, gmd_buffer **b, uint64_t seed)
{
        for (int i = 0; i < 3; i++) {
                if (!b[i]) {
                        b[i] = harness_released_buffer(f->client, 12 * MiB,
                                                       seed + (uint64_t)i);
                } else {
                        pattern_fill(b[i], seed + (uint64_t)i);
                        OK(gmd_release(f->client, b[i]));
                }
        }
        for (int i = 0; i < 3; i++)
                harness_page_out(f->client, b[i]);
}

static void three_back(fixture *f, gmd_buffer **b, uint64_t seed,
                       const char *when)
{
        for (int i = 0; i < 3; i++) {
                OK(gmd_acquire(f->client, b[i], 5000));
                pattern_check(b[i], seed + (uint64_t)i, when);
        }
}

/* Whether every byte out is in the arena: the host pool's bytes are
 * what the arena hands out, none pinned on the spot. */
static void expect_all_in_arena(fixture *f, const char *when)
{
        uint64_t size = 0, free_ = 0, used = host_used(f->client);

        arena(f->client, &size, &free_);
        if (used != size - free_)
                fail_msg("%s: %llu MiB on host, %llu MiB of the arena in use: a "
                         "swap-out pinned its own copy; log:\n%s", when,
                         (unsigned long long)(used / MiB),
                         (unsigned long long)((size - free_) / MiB),
                         harness_read_log(&f->h));
}

/* The second swap-out leaves 8 MiB free, less than the 12 it served: the
 * arena doubles to 64 MiB before anything finds it full, and the third
 * fits; the next round fits whole, with no second growth. With host_limit
 * 52M the growth is cut to what the limit leaves. */
static void test_arena_grows(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[3] = { NULL };

        harness_start_small(&f->h, ARENA_CONFIG);
        f->client = harness_client(&f->h, "grows");
        three_out(f, b, 300);
        free(harness_wait_log(&f->h, GROWS " 32 MiB to 64 MiB", 2000));
        expect_arena(f, 64 * MiB, 28 * MiB, "grown");
        assert_int_equal(host_used(f->client), 36 * MiB);
        expect_all_in_arena(f, "grown");
        assert_int_equal(harness_log_count(&f->h, AHEAD), 1);
        assert_int_equal(harness_log_count(&f->h, FOUND_FULL), 0);
        expect_no_room_lines(f, 0, "grown");
        three_back(f, b, 300, "back after the growth");
        expect_arena(f, 64 * MiB, 64 * MiB, "all back");

        three_out(f, b, 400);
        expect_arena(f, 64 * MiB, 28 * MiB, "all three in the grown arena");
        assert_int_equal(harness_log_count(&f->h, GROWS), 1);
        expect_no_room_lines(f, 0, "all three in the grown arena");
        three_back(f, b, 400, "back from the grown arena");
        for (int i = 0; i < 3; i++)
                OK(gmd_free(f->client, b[i]));
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        /* host_limit 52M: the growth is cut to the 20 MiB it leaves. */
        harness_start_small(&f->h, "[pools]\nhost_limit = 52M\nhost_stock = 32M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "limited");
        memset(b, 0, sizeof(b));
        three_out(f, b, 500);
        free(harness_wait_log(&f->h, GROWS " 20 MiB to 52 MiB", 2000));
        expect_arena(f, 52 * MiB, 16 * MiB, "grown to host_limit");
        expect_all_in_arena(f, "grown to host_limit");
        expect_no_room_lines(f, 0, "grown to host_limit");
        three_back(f, b, 500, "back from the arena at host_limit");
        for (int i = 0; i < 3; i++)
                OK(gmd_free(f->client, b[i]));
        harness_stop(&f->h);
}

/* ---- 6. growth keeps ahead of a workload larger than host_stock ------------- */

#define N_OUT 14

/* N_OUT released 4 MiB buffers paged out one by one: 56 MiB out of a 16
 * MiB arena (pieces of 4 MiB). After each, every byte out is in the
 * arena (none pinned on the spot, no warning) and the arena never passes
 * host_limit; it grows ahead of demand, by doubling: 16, 32, 64, 128 MiB
 * (the last when 12 of 64 MiB were left, under a quarter). */
static void test_arena_keeps_ahead(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[N_OUT] = { NULL };
        uint64_t size = 0, free_ = 0;
        char when[64];

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\nhost_stock = 16M\n"
                                   "host_stock_vram = 0\n[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "ahead");
        for (int i = 0; i < N_OUT; i++)
                b[i] = harness_released_buffer(f->client, 4 * MiB, 600 + (uint64_t)i);
        for (int i = 0; i < N_OUT; i++) {
                snprintf(when, sizeof(when), "pageout %d", i);
                harness_page_out(f->client, b[i]);
                expect_all_in_arena(f, when);
                arena(f->client, &size, &free_);
                assert_true(size <= 256 * MiB);
        }
        expect_arena(f, 128 * MiB, 72 * MiB, "56 MiB out");
        assert_int_equal(harness_log_count(&f->h, GROWS " 16 MiB to 32 MiB"), 1);
        assert_int_equal(harness_log_count(&f->h, GROWS " 32 MiB to 64 MiB"), 1);
        assert_int_equal(harness_log_count(&f->h, GROWS " 64 MiB to 128 MiB"), 1);
        assert_int_equal(harness_log_count(&f->h, GROWS), 3);
        assert_int_equal(harness_log_count(&f->h, AHEAD), 3);
        assert_int_equal(harness_log_count(&f->h, FOUND_FULL), 0);
        expect_no_room_lines(f, 0, "56 MiB out");
        for (int i = 0; i < N_OUT; i++) {
                snprintf(when, sizeof(when), "acquire %d", i);
                OK(gmd_acquire(f->client, b[i], 5000));
                pattern_check(b[i], 600 + (uint64_t)i, when);
                OK(gmd_free(f->client, b[i]));
        }
        expect_arena(f, 128 * MiB, 128 * MiB, "all freed");
        harness_stop(&f->h);
}

/* The same with host_limit 40M: the arena grows 16 -> 32 -> 40 MiB (the
 * last step cut to what the limit leaves) and stops there; ten buffers
 * fill it, the eleventh finds no room anywhere and is refused with an
 * error naming host_limit; the arena never passed it. */
static void test_arena_stops_at_limit(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[11] = { NULL };
        uint64_t size = 0, free_ = 0;
        char when[64];
        int r;

        harness_start_small(&f->h, "[pools]\nhost_limit = 40M\nhost_stock = 16M\n"
                                   "host_stock_vram = 0\n[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "limit");
        for (int i = 0; i < 11; i++)
                b[i] = harness_released_buffer(f->client, 4 * MiB, 700 + (uint64_t)i);
        for (int i = 0; i < 10; i++) {
                snprintf(when, sizeof(when), "pageout %d", i);
                harness_page_out(f->client, b[i]);
                expect_all_in_arena(f, when);
                arena(f->client, &size, &free_);
                assert_true(size <= 40 * MiB);
        }
        expect_arena(f, 40 * MiB, 0, "full at host_limit");
        assert_int_equal(harness_log_count(&f->h, GROWS " 16 MiB to 32 MiB"), 1);
        assert_int_equal(harness_log_count(&f->h, GROWS " 8 MiB to 40 MiB"), 1);
        assert_int_equal(harness_log_count(&f->h, GROWS), 2);
        r = gmd_pageout(f->client, b[10]);
        if (r != GMD_ENOMEM || !strstr(gmd_last_error(), "host_limit"))
                fail_msg("a swap-out past host_limit: gmd_pageout = %d (%s), want "
                         "GMD_ENOMEM naming host_limit", r, gmd_last_error());
        OK(gmd_wait(f->client, b[10], 5000));
        assert_int_equal(gmd_buffer_tier(b[10]), GMD_TIER_VRAM);
        expect_arena(f, 40 * MiB, 0, "after the refusal");
        assert_int_equal(harness_log_count(&f->h, GROWS), 2);
        for (int i = 0; i < 11; i++) {
                snprintf(when, sizeof(when), "acquire %d", i);
                OK(gmd_acquire(f->client, b[i], 5000));
                pattern_check(b[i], 700 + (uint64_t)i, when);
                OK(gmd_free(f->client, b[i]));
        }
        harness_stop(&f->h);
}

/* [pools] host_stock_vram (100% of the pool by default): once the VRAM
 * pool is three quarters used, the arena grows to the pool's size before
 * any swap-out, within three quarters of host_limit. */
static void test_arena_sized_from_pool(void **state)
{
        fixture *f = *state;
        gmd_buffer *pin = NULL;
        gmd_pool_status vram;
        uint64_t want;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\nhost_stock = 16M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "pool");
        vram = harness_vram_pool(f->client, 0);
        want = (vram.capacity + 4 * MiB - 1) / (4 * MiB) * (4 * MiB);
        OK(gmd_alloc(f->client, vram.capacity / 2, 0, GMD_ALLOC_PIN_VRAM,
                     GMD_NO_WAIT, &pin));
        expect_arena(f, 16 * MiB, 16 * MiB, "half the pool used");
        OK(gmd_free(f->client, pin));
        OK(gmd_alloc(f->client, vram.capacity / 8 * 7, 0, GMD_ALLOC_PIN_VRAM,
                     GMD_NO_WAIT, &pin));
        free(harness_wait_log(&f->h, POOL_FILLS, 2000));
        expect_arena(f, want, want, "seven eighths of the pool used");
        assert_int_equal(harness_log_count(&f->h, GROWS), 1);
        OK(gmd_free(f->client, pin));
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        /* Within three quarters of host_limit: 36 of 48M. */
        harness_start_small(&f->h, "[pools]\nhost_limit = 48M\nhost_stock = 16M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "capped");
        vram = harness_vram_pool(f->client, 0);
        OK(gmd_alloc(f->client, vram.capacity / 8 * 7, 0, GMD_ALLOC_PIN_VRAM,
                     GMD_NO_WAIT, &pin));
        free(harness_wait_log(&f->h, POOL_FILLS, 2000));
        expect_arena(f, 36 * MiB, 36 * MiB, "capped by host_limit");
        OK(gmd_free(f->client, pin));
        harness_stop(&f->h);
}

/* And larger than the pool: to what the device's buffers that may go out
 * hold, as jobs that do not fit together allocate them, before their
 * swap-outs need it. Twelve released 8 MiB-ish buffers, one and a half
 * pools: the arena ends at least their size, grown for the pool's sake
 * (none "found it full"), every byte out in it, every byte back whole.
 * Pinned buffers do not count: they never go out. */
static void test_arena_sized_from_buffers(void **state)
{
        fixture *f = *state;
        gmd_buffer *b[12] = { NULL }, *pin = NULL;
        uint64_t each, want, deadline, size = 0, free_ = 0;
        gmd_pool_status vram;

        harness_start_small(&f->h, "[pools]\nhost_limit = 512M\nhost_stock = 16M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "buffers");
        vram = harness_vram_pool(f->client, 0);
        each = vram.capacity / 8;
        want = (12 * each + 4 * MiB - 1) / (4 * MiB) * (4 * MiB);
        for (int i = 0; i < 12; i++) {
                OK(gmd_alloc(f->client, each, 0, GMD_ALLOC_SWAPPABLE, 5000,
                             &b[i]));
                pattern_fill(b[i], 700 + (uint64_t)i);
                OK(gmd_release(f->client, b[i]));
        }
        deadline = harness_now_ms() + 2000;
        do {
                arena(f->client, &size, &free_);
                if (size >= want)
                        break;
                harness_sleep_ms(5);
        } while (harness_now_ms() < deadline);
        if (size < want)
                fail_msg("arena %llu MiB, want at least %llu; log:\n%s",
                         (unsigned long long)(size / MiB),
                         (unsigned long long)(want / MiB),
                         harness_read_log(&f->h));
        assert_int_equal(harness_log_count(&f->h, "swap-outs found it full"), 0);
        assert_true(harness_log_count(&f->h, POOL_FILLS) >= 1);
        expect_all_in_arena(f, "one and a half pools allocated");
        for (int i = 0; i < 12; i++) {
                OK(gmd_acquire(f->client, b[i], 5000));
                pattern_check(b[i], 700 + (uint64_t)i, "back from the arena");
                OK(gmd_release(f->client, b[i]));
        }
        for (int i = 0; i < 12; i++)
                OK(gmd_free(f->client, b[i]));
        gmd_disconnect(f->client);
        f->client = NULL;
        harness_stop(&f->h);
        harness_cleanup(&f->h);

        /* Pinned in VRAM, seven eighths of the pool: the pool's worth
         * (host_stock_vram), no more. */
        harness_start_small(&f->h, "[pools]\nhost_limit = 512M\nhost_stock = 16M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "pinned");
        vram = harness_vram_pool(f->client, 0);
        OK(gmd_alloc(f->client, vram.capacity / 8 * 7, 0, GMD_ALLOC_PIN_VRAM,
                     GMD_NO_WAIT, &pin));
        free(harness_wait_log(&f->h, POOL_FILLS, 2000));
        want = (vram.capacity + 4 * MiB - 1) / (4 * MiB) * (4 * MiB);
        expect_arena(f, want, want, "seven eighths pinned");
        OK(gmd_free(f->client, pin));
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_arena_serves_swapouts),
                HARNESS_TEST(test_spillable_skips_arena),
                HARNESS_TEST(test_host_limit_bounds_pinned),
                HARNESS_TEST(test_arena_off),
                HARNESS_TEST(test_arena_grows),
                HARNESS_TEST(test_arena_keeps_ahead),
                HARNESS_TEST(test_arena_stops_at_limit),
                HARNESS_TEST(test_arena_sized_from_pool),
                HARNESS_TEST(test_arena_sized_from_buffers),
        };

        /* Freed buffers must go back at once for the figures checked here,
         * also when the program is run by hand. */
        setenv(GMD_CACHE_ENV, "0", 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
