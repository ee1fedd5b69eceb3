/*
 * test_kept_mappings — a SWAPPABLE buffer's owner keeps its VRAM mapped
 * across a swap-out into VRAM kept for it (daemon/core/reuse.h, "Mapped";
 * RemapNotify.keep_mapping), on the sim backend with the real daemon.
 *
 * What makes it worth having is one thing: the swap-in into that VRAM
 * costs the owner no import and no map (counted by
 * gpumemd_swapins_mapped_total). What makes it safe is the rest, checked
 * here: the buffer's address keeps its bytes and the buffer reads as on
 * host memory while out; such VRAM goes to nobody else and is asked back
 * (an unmap, counted by gpumemd_vram_unmaps_asked_total) as soon as
 * another client needs its room; an owner that does not answer that ask
 * holds nobody up past [limits] reclaim_timeout_ms; GPU_MEMD_KEEP_MAPPINGS=0
 * gives the old behaviour.
 *
 * Every test starts its own daemon (64 MiB of simulated VRAM in 2 MiB
 * steps, the metrics endpoint on a Unix socket). Two connections of the
 * test process are two clients, A and B; the owner that stops answering is
 * a gmd_tier_client process, stopped with SIGSTOP.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
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

typedef harness_fixture fixture;

static void expect_vram(fixture *f, uint64_t used, uint64_t kept,
                        const char *when)
{
        harness_expect_vram(&f->h, f->client, used, kept, when);
}

/* Swap-ins into VRAM still mapped, unmaps asked, kept VRAM reused. */
static void expect_counts(fixture *f, unsigned mapped, unsigned asked,
                          unsigned reused, const char *when)
{
        double m = harness_metric(&f->h, "gpumemd_swapins_mapped_total");
        double a = harness_metric(&f->h, "gpumemd_vram_unmaps_asked_total");
        double r = harness_metric(&f->h,
                                  "gpumemd_vram_kept_total{outcome=\"reused\"}");

        if (m != mapped || a != asked || r != reused)
                fail_msg("%s: %.0f swap-ins into mapped VRAM, %.0f unmaps "
                         "asked, kept VRAM reused %.0f times; want %u, %u, %u",
                         when, m, a, r, mapped, asked, reused);
}

/* ---- 1. out and back with no remap in the owner ----------------------------- */

/* While out, the buffer reads as on host memory and its address still
 * holds its bytes (an owner that unmapped would fault here: the range is
 * reserved and inaccessible); back, into the same VRAM, counted as a
 * swap-in into mapped VRAM. Twice, since the second round starts from a
 * buffer that came back that way. */
static void test_mapping_kept_across_swapout(void **state)
{
        fixture *f = *state;
        gmd_buffer *a;
        void *ptr;

        harness_start_owner(f, NULL);
        a = harness_released_buffer(f->client, 8 * MiB, 1);
        ptr = gmd_buffer_ptr(a);
        for (unsigned round = 1; round <= 2; round++) {
                harness_page_out(f->client, a);
                assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
                expect_vram(f, 8 * MiB, 8 * MiB, "paged out");
                pattern_check(a, 1, "its address while out");
                harness_bring_back(f->client, a, 1, "back into the VRAM it maps");
                assert_ptr_equal(gmd_buffer_ptr(a), ptr);
                expect_vram(f, 8 * MiB, 0, "back");
                expect_counts(f, round, 0, round, "back");
                OK(gmd_release(f->client, a));
        }
        OK(gmd_free(f->client, a));
        expect_vram(f, 0, 0, "freed");
        harness_stop(&f->h);
}

/* A full pool: the VRAM the buffer leaves is likely wanted soon, and kept
 * mapped it could only be given after a round trip, so the owner unmaps
 * as before; the swap-in still reuses the kept VRAM, mapped afresh. */
static void test_not_kept_mapped_when_pool_is_short(void **state)
{
        fixture *f = *state;
        gmd_buffer *a, *filler;

        harness_start_owner(f, NULL);
        a = harness_released_buffer(f->client, 8 * MiB, 5);
        filler = harness_released_buffer(f->client, 56 * MiB, 6);
        harness_page_out(f->client, a);
        expect_vram(f, 64 * MiB, 8 * MiB, "paged out of a full pool");
        harness_bring_back(f->client, a, 5, "back, mapped afresh");
        expect_counts(f, 0, 0, 1, "back from a full pool");
        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, filler));
        harness_stop(&f->h);
}

/* An allocation of the same size, with room to spare, takes the VRAM the
 * buffer out maps (new VRAM would be slower to copy into), and its owner
 * is told to unmap it there, with no wait. The buffer out comes back
 * into other VRAM, mapped afresh, and neither buffer's bytes are the
 * other's. */
static void test_alloc_takes_mapped_vram(void **state)
{
        fixture *f = *state;
        gmd_buffer *a, *n = NULL;

        harness_start_owner(f, NULL);
        a = harness_released_buffer(f->client, 8 * MiB, 8);
        harness_page_out(f->client, a);
        expect_vram(f, 8 * MiB, 8 * MiB, "paged out, kept mapped");
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &n));
        expect_vram(f, 8 * MiB, 0, "allocated into the mapped VRAM");
        expect_counts(f, 0, 1, 1, "allocated into the mapped VRAM");
        pattern_fill(n, 9);
        harness_bring_back(f->client, a, 8, "the buffer out, back into new VRAM");
        expect_counts(f, 0, 1, 1, "back into new VRAM");
        pattern_check(n, 9, "the allocation, after the buffer out came back");
        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, n));
        harness_stop(&f->h);
}

/* ---- 2. GPU_MEMD_KEEP_MAPPINGS ---------------------------------------------- */

/* "0": the owner unmaps at the swap-out and maps afresh at the swap-in,
 * into the same kept VRAM (reused, but not mapped); a value that is
 * neither 0 nor 1 is refused at connect, naming the variable. */
static void test_keep_mappings_env(void **state)
{
        fixture *f = *state;
        gmd_client *c = NULL;
        gmd_buffer *a;

        harness_start_owner(f, NULL);
        setenv(GMD_KEEP_MAPPINGS_ENV, "0", 1);
        f->other = harness_client(&f->h, "unmaps");
        setenv(GMD_KEEP_MAPPINGS_ENV, "yes", 1);
        assert_int_equal(gmd_connect(f->h.socket_path, "bad", &c), -EINVAL);
        assert_non_null(strstr(gmd_last_error(), GMD_KEEP_MAPPINGS_ENV));
        unsetenv(GMD_KEEP_MAPPINGS_ENV);

        a = harness_released_buffer(f->other, 8 * MiB, 2);
        harness_page_out(f->other, a);
        expect_vram(f, 8 * MiB, 8 * MiB, "paged out");
        harness_bring_back(f->other, a, 2, "back, mapped afresh");
        expect_counts(f, 0, 0, 1, "back, mapped afresh");
        OK(gmd_free(f->other, a));
        harness_stop(&f->h);
}

/* ---- 3. asked back for another client's room --------------------------------- */

/* A's 16 MiB are out, its VRAM kept and mapped, and A has 8 MiB released
 * in VRAM; B's 48 MiB allocation needs 8 MiB more than is free: A is asked
 * to unmap the kept VRAM, its I/O thread does, and B is served with
 * nothing evicted (A's released buffer could have been). A's buffer later
 * comes back into new VRAM with its bytes. */
static void test_asked_back_for_room(void **state)
{
        fixture *f = *state;
        gmd_buffer *a, *r, *n = NULL;

        harness_start_owner(f, NULL);
        f->other = harness_client(&f->h, "other");
        a = harness_released_buffer(f->client, 16 * MiB, 3);
        harness_page_out(f->client, a);
        r = harness_released_buffer(f->client, 8 * MiB, 7);
        expect_vram(f, 24 * MiB, 16 * MiB, "A's buffer out");

        OK(gmd_alloc(f->other, 48 * MiB, 0, GMD_ALLOC_SWAPPABLE, 5000, &n));
        expect_vram(f, 56 * MiB, 0, "B allocated");
        expect_counts(f, 0, 1, 0, "B allocated");
        assert_int_equal(harness_log_count(&f->h, "evicting buffer"), 0);
        assert_int_equal(gmd_buffer_tier(r), GMD_TIER_VRAM);
        OK(gmd_free(f->client, r));

        OK(gmd_free(f->other, n));
        harness_bring_back(f->client, a, 3, "A's buffer back into new VRAM");
        expect_counts(f, 0, 1, 0, "A's buffer back");
        OK(gmd_free(f->client, a));
        expect_vram(f, 0, 0, "freed");
        harness_stop(&f->h);
}

/* ---- 4. an owner that does not answer --------------------------------------- */

/* A stopped process keeps 16 MiB mapped. The test's 24 MiB allocation
 * needs that room or A's released 40 MiB: the unmap asked of the stopped
 * process is counted on for reclaim_timeout_ms (200 here), then A's buffer
 * is evicted instead. Woken, the process answers and its VRAM goes. */
static void test_owner_not_answering_holds_nobody_up(void **state)
{
        static const char *const argv[] = { GMD_TIER_CLIENT_PATH, "move", "16M",
                                            "out", NULL };
        fixture *f = *state;
        harness_proc *child;
        gmd_buffer *a, *n = NULL;
        uint64_t t0, ms;
        int r;

        harness_start_owner(f, "[limits]\nreclaim_timeout_ms = 200\n");
        child = harness_track_ready(f, argv, "moving", "start its pageout");
        expect_vram(f, 16 * MiB, 16 * MiB, "the process's buffer out");
        kill(child->pid, SIGSTOP);
        a = harness_released_buffer(f->client, 40 * MiB, 4);

        t0 = harness_now_ms();
        r = gmd_alloc(f->client, 24 * MiB, 0, GMD_ALLOC_SWAPPABLE, 5000, &n);
        ms = harness_now_ms() - t0;
        if (r < 0)
                fail_msg("the allocation failed after %llu ms: %s; log:\n%s",
                         (unsigned long long)ms, gmd_last_error(),
                         harness_read_log(&f->h));
        if (ms < 150 || ms > 4000)
                fail_msg("the allocation took %llu ms; want about the 200 ms "
                         "the stopped owner is waited for; log:\n%s",
                         (unsigned long long)ms, harness_read_log(&f->h));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        /* One ask, the stopped owner's: an eviction does not keep the
         * mapping (the room is for others), so A's VRAM went at once. */
        expect_counts(f, 0, 1, 0, "allocated past the stopped owner");
        expect_vram(f, 40 * MiB, 16 * MiB, "the stopped owner's VRAM still kept");

        kill(child->pid, SIGCONT);
        expect_vram(f, 24 * MiB, 0, "the owner woke and unmapped");
        kill(child->pid, SIGKILL);
        harness_wait_proc(child, 5000);
        OK(gmd_free(f->client, n));
        harness_bring_back(f->client, a, 4, "the evicted buffer back");
        OK(gmd_free(f->client, a));
        expect_vram(f, 0, 0, "freed");
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_mapping_kept_across_swapout),
                HARNESS_TEST(test_not_kept_mapped_when_pool_is_short),
                HARNESS_TEST(test_alloc_takes_mapped_vram),
                HARNESS_TEST(test_keep_mappings_env),
                HARNESS_TEST(test_asked_back_for_room),
                HARNESS_TEST(test_owner_not_answering_holds_nobody_up),
        };

        /* Freed buffers must go back at once for the figures checked here,
         * also when the program is run by hand. */
        setenv(GMD_CACHE_ENV, "0", 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
