/*
 * test_copyfail — the swap engine when copies fail, and the early remaps
 * around a move that stops, on the sim backend with the real daemon.
 *
 * Failures come from the sim backend's test hook (daemon/backend/backend_sim.c):
 * with GMD_SIM_FAIL_COPIES naming a file, every copy submitted while that
 * file exists fails with -EIO. The file lives in the test's temp dir and is
 * created and removed while the daemon runs. A refused submit sends the
 * move to its copy queue's failed list, finished from the loop's check
 * phase; the queue then starts no move that way for a second
 * (daemon/core/copyq.c). What must hold: a failed pageout or swap-in leaves the
 * buffer where it was, with its bytes, nothing allocated on the other side,
 * and a daemon that goes on serving; the owner's next gmd_wait says so,
 * once (-EIO naming the buffer); an owner's ack that arrives while the
 * failed move still waits to be reaped never finishes it (a use after free
 * in the daemon, and a buffer "moved" with bytes never copied).
 *
 * Two more cases need slow copies ([sim] copy_rate), not failures: an
 * acquire that will not wait, of a buffer whose pageout is queued behind
 * another copy, is served once the remap that undoes the early unmap is
 * acked; and an acquire that waits through a cancelled swap-in gets a new
 * swap-in.
 *
 * Each of the fixes of commit "Early remap, after review" in daemon/core/move.c
 * has a test here that fails without it: move_handle_ack testing
 * m->copied (test_early_ack_of_failed_pageout, reliably; the libgpumem
 * tests when the race comes up), move_abandon's move_in_request
 * (test_acquire_through_cancelled_swapin*), move_acquire's
 * GMD_RECLAIM_GRACE_MS for a no-wait acquire
 * (test_nowait_acquire_of_queued_pageout).
 *
 * Every test starts its own daemon (64 MiB of simulated VRAM in 2 MiB
 * steps, debug log: stale acks are logged there). The test process is a
 * libgpumem client, and for exact ack timing a raw protocol client
 * (raw_client.c). Buffers carry patterns checked word by word.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "gpumem.pb-c.h"
#include "harness.h"
#include "pattern.h"
#include "raw_client.h"

#define FAIL_ENV "GMD_SIM_FAIL_COPIES"
#define HOST_256M "[pools]\nhost_limit = 256M\n"
#define STALE_ACK "stale remap ack"
#define SUBMIT_FAILED "cannot start a copy: Input/output error"

typedef harness_fixture fixture;

/* The running test's protocol-level client, for exact ack timing. */
static raw_client raw;

/* Copies fail while this file exists. */
static const char *fail_path(const fixture *f)
{
        static char path[sizeof(f->h.dir) + 16];

        snprintf(path, sizeof(path), "%s/fail-copies", f->h.dir);
        return path;
}

/* gmd_wait on `b` after a move of it failed: -EIO naming the buffer,
 * once; the next wait is clean. */
static void wait_reports_failure(gmd_client *c, gmd_buffer *b, const char *when)
{
        char id[32];
        int r = gmd_wait(c, b, 5000);

        snprintf(id, sizeof(id), "buffer %llu", (unsigned long long)gmd_buffer_id(b));
        if (r != -EIO || !strstr(gmd_last_error(), id) ||
            !strstr(gmd_last_error(), "failed"))
                fail_msg("%s: gmd_wait = %d (%s), want -EIO naming %s", when, r,
                         gmd_last_error(), id);
        OK(gmd_wait(c, b, 5000));
}

static int setup(void **state)
{
        raw_init(&raw);
        return harness_setup(state);
}

static int teardown(void **state)
{
        raw_close(&raw);
        unsetenv(FAIL_ENV);
        return harness_teardown(state);
}

/* ---- helpers ---------------------------------------------------------------- */

/* Start the daemon with the failure hook armed (the file not there yet):
 * it takes its environment from this process at the fork, so the variable
 * is set only around the start. */
static void start(fixture *f, const char *extra_config)
{
        char *line;

        harness_init_small(&f->h, "[daemon]\nlog_level = debug\n");
        harness_append_config(&f->h, extra_config);
        setenv(FAIL_ENV, fail_path(f), 1);
        harness_start(&f->h, NULL);
        unsetenv(FAIL_ENV);
        line = harness_wait_log(&f->h, FAIL_ENV " is set", 2000);
        if (!line)
                fail_msg("the daemon did not take up " FAIL_ENV "; log:\n%s",
                         harness_read_log(&f->h));
        free(line);
        f->client = harness_client(&f->h, "copyfail");
}

static void failures_on(fixture *f)
{
        int fd = open(fail_path(f), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

        if (fd < 0)
                fail_msg("cannot create %s: %s", fail_path(f), strerror(errno));
        close(fd);
}

static void failures_off(fixture *f)
{
        if (unlink(fail_path(f)) < 0)
                fail_msg("cannot remove %s: %s", fail_path(f), strerror(errno));
}

/* The daemon must still run (under ASan, a use after free ends it). */
static void expect_alive(fixture *f, const char *when)
{
        int status;

        if (waitpid(f->h.pid, &status, WNOHANG) == f->h.pid) {
                f->h.pid = 0;
                fail_msg("%s: gpu-memd died (status %d); log:\n%s", when,
                         harness_exit_code(status), harness_read_log(&f->h));
        }
}

/* What the daemon holds for buffers: VRAM less what it keeps for swap-ins
 * (test_reuse.c's subject), host memory, host copies in the host arena,
 * and moves queued or copying. */
typedef struct held {
        uint64_t vram, host, arena;
        uint32_t moves;
} held;

static held held_now(gmd_client *c)
{
        gmd_pool_status v = harness_vram_pool(c, 0), h = harness_host_pool(c);

        return (held){ v.used - v.kept, h.used, v.arena_size - v.arena_free,
                       v.queued_out + v.queued_in };
}

/* Poll (3 s at most) until the buffers hold `vram` and `host` bytes, every
 * host byte in the arena (SWAPPABLE buffers' host copies are), and no move
 * is left: a failed one that leaked memory or its queue count shows. */
static void wait_held(fixture *f, uint64_t vram, uint64_t host, const char *when)
{
        uint64_t deadline = harness_now_ms() + 3000;
        held now;

        for (;;) {
                now = held_now(f->client);
                if (now.vram == vram && now.host == host && now.arena == host &&
                    now.moves == 0)
                        return;
                if (harness_now_ms() >= deadline)
                        break;
                harness_sleep_ms(10);
        }
        fail_msg("%s: buffers hold vram %llu host %llu (arena %llu), %u moves; "
                 "want vram %llu host %llu, no move; log:\n%s", when,
                 (unsigned long long)now.vram, (unsigned long long)now.host,
                 (unsigned long long)now.arena, now.moves,
                 (unsigned long long)vram, (unsigned long long)host,
                 harness_read_log(&f->h));
}

/* Poll (3 s at most) until the daemon shows buffer `id` on `tier`, at
 * rest. */
static void wait_resident(fixture *f, uint64_t id, gmd_tier tier, const char *when)
{
        uint64_t deadline = harness_now_ms() + 3000;
        gmd_buffer_status row;

        for (;;) {
                row = harness_buffer_status(f->client, id);
                if (row.tier == tier && row.state == GMD_STATE_RESIDENT)
                        return;
                if (harness_now_ms() >= deadline)
                        break;
                harness_sleep_ms(5);
        }
        fail_msg("%s: buffer %llu is %s/%s, want %s/resident; log:\n%s", when,
                 (unsigned long long)id, gmd_tier_name(row.tier),
                 gmd_state_name(row.state), gmd_tier_name(tier),
                 harness_read_log(&f->h));
}

static void expect_state(fixture *f, gmd_buffer *b, gmd_tier tier,
                         gmd_buffer_state state, const char *when)
{
        gmd_buffer_status row = harness_buffer_status(f->client, gmd_buffer_id(b));

        if (row.tier != tier || row.state != state)
                fail_msg("%s: buffer %llu is %s/%s, want %s/%s; log:\n%s", when,
                         (unsigned long long)row.buffer_id, gmd_tier_name(row.tier),
                         gmd_state_name(row.state), gmd_tier_name(tier),
                         gmd_state_name(state), harness_read_log(&f->h));
}

/* After a refused submit the daemon starts no move that way for a second,
 * and a pageout meanwhile fails up front: retry until that rest is over
 * (3 s at most). Returns the pageout's result. */
static int pageout_after_rest(gmd_client *c, gmd_buffer *b)
{
        uint64_t deadline = harness_now_ms() + 3000;
        int r;

        while ((r = gmd_pageout(c, b)) == -EIO &&
               strstr(gmd_last_error(), "cannot start the move") &&
               harness_now_ms() < deadline)
                harness_sleep_ms(20);
        return r;
}

/* ---- a. a pageout whose copy cannot start -------------------------------- */

/* The copy is refused while the pageout is handled, but the move ends
 * after its answer (reaped in the loop's check phase, rolled back after
 * the early unmap): the client is told nothing (pageout and wait both
 * succeed, as for a pageout that a prefetch overrode); the buffer is
 * simply still in VRAM, mapped again at its address, with its bytes, and
 * no host memory is held for it.
 * Within the next second a pageout is refused up front (-EIO, "cannot
 * start the move"). With failures off, the next pageout works and the
 * buffer comes back intact. */
static void test_pageout_fails(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL;
        bool in_rest;
        uint64_t t0;
        int r;

        start(f, HOST_256M);
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &a));
        pattern_fill(a, 1);
        OK(gmd_release(f->client, a));
        wait_held(f, 8 * MiB, 0, "allocated");

        failures_on(f);
        t0 = harness_now_ms();
        OK(gmd_pageout(f->client, a));
        wait_reports_failure(f->client, a, "failed pageout");
        if (harness_log_count(&f->h, SUBMIT_FAILED) != 1)
                fail_msg("want one \"%s\" line; log:\n%s", SUBMIT_FAILED,
                         harness_read_log(&f->h));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        expect_state(f, a, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "failed pageout");
        wait_held(f, 8 * MiB, 0, "failed pageout");
        expect_alive(f, "failed pageout");

        /* The copy queue rests for a second after a refused submit. On a
         * machine so slow that the second may be over, the pageout can
         * also be taken (and its submit refused again). */
        in_rest = harness_now_ms() - t0 < 800;
        r = gmd_pageout(f->client, a);
        if ((in_rest || r != 0) &&
            (r != -EIO || !strstr(gmd_last_error(), "cannot start the move")))
                fail_msg("a pageout right after a failed one gave %d (%s), want "
                         "-EIO, \"cannot start the move\"", r, gmd_last_error());
        OK(gmd_wait(f->client, a, 5000));
        expect_state(f, a, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "refused pageout");

        OK(gmd_acquire(f->client, a, GMD_NO_WAIT));
        pattern_check(a, 1, "after the failed pageout");
        OK(gmd_release(f->client, a));
        wait_held(f, 8 * MiB, 0, "after the failed pageouts");

        /* Failures off: the daemon serves the next pageout. */
        failures_off(f);
        OK(pageout_after_rest(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        expect_state(f, a, GMD_TIER_HOST, GMD_STATE_RESIDENT, "pageout after");
        wait_held(f, 0, 8 * MiB, "pageout after");
        OK(gmd_acquire(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        pattern_check(a, 1, "out and back after the failures");
        wait_held(f, 8 * MiB, 0, "back");
        OK(gmd_free(f->client, a));
        wait_held(f, 0, 0, "freed");
        harness_stop(&f->h);
}

/* ---- b. a swap-in whose copy cannot start --------------------------------- */

/* A buffer on host memory is prefetched while copies fail: it stays on
 * host with nothing held in VRAM for it but what is kept for its swap-in.
 * An acquire while they still fail (after the copy queue's rest) tries a
 * swap-in of its own and says it failed (-EIO, "copying it back to VRAM
 * failed"); with failures off an acquire brings the bytes back. `keep`:
 * the swap-in goes into the VRAM the buffer's own swap-out left, remapped
 * early (and rolled back on the failure); without it, into new VRAM,
 * remapped after.
 *
 * The test waits out the copy queue's rest itself rather than leave the
 * acquire to the daemon's retry of the wait queue: that timer counts from
 * the loop's cached time and the rest from the clock, so it can fire just
 * before the rest ends, find the queue unusable and not be armed again
 * (seen under ASan), which would strand the swap-in. */
static void swapin_fails(fixture *f, bool keep)
{
        gmd_buffer *b = NULL;
        uint64_t kept, t0;
        int64_t ms;
        int r;

        start(f, keep ? HOST_256M : HOST_256M "[swap]\nkeep_vram = no\n");
        b = harness_released_buffer(f->client, 8 * MiB, 2);
        harness_page_out(f->client, b);
        wait_held(f, 0, 8 * MiB, "paged out");
        kept = harness_vram_pool(f->client, 0).kept;
        assert_int_equal(kept, keep ? 8 * MiB : 0);

        failures_on(f);
        OK(gmd_prefetch(f->client, b));
        wait_reports_failure(f->client, b, "failed prefetch");
        if (harness_log_count(&f->h, SUBMIT_FAILED) != 1)
                fail_msg("want one \"%s\" line; log:\n%s", SUBMIT_FAILED,
                         harness_read_log(&f->h));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        expect_state(f, b, GMD_TIER_HOST, GMD_STATE_RESIDENT, "failed prefetch");
        wait_held(f, 0, 8 * MiB, "failed prefetch");
        assert_int_equal(harness_vram_pool(f->client, 0).kept, kept);
        expect_alive(f, "failed prefetch");

        harness_sleep_ms(1100);   /* the copy queue's rest */
        t0 = harness_now_ms();
        r = gmd_acquire(f->client, b, 5000);
        ms = (int64_t)(harness_now_ms() - t0);
        if (r != -EIO || !strstr(gmd_last_error(), "copying it back to VRAM failed"))
                fail_msg("acquire while swap-ins fail gave %d (%s) after %lld ms, "
                         "want -EIO, \"copying it back to VRAM failed\"; log:\n%s",
                         r, gmd_last_error(), (long long)ms,
                         harness_read_log(&f->h));
        if (ms > 1000)
                fail_msg("the failed swap-in was answered after %lld ms, not at "
                         "once", (long long)ms);
        assert_int_equal(harness_log_count(&f->h, SUBMIT_FAILED), 2);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        expect_state(f, b, GMD_TIER_HOST, GMD_STATE_RESIDENT, "failed acquire");
        assert_false(harness_buffer_status(f->client, gmd_buffer_id(b)).acquired);
        wait_held(f, 0, 8 * MiB, "failed acquire");
        assert_int_equal(harness_vram_pool(f->client, 0).kept, kept);
        expect_alive(f, "failed acquire");

        failures_off(f);
        harness_sleep_ms(1100);
        OK(gmd_acquire(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 2, "back after the failed swap-ins");
        wait_held(f, 8 * MiB, 0, "back");
        assert_int_equal(harness_vram_pool(f->client, 0).kept, 0);
        OK(gmd_free(f->client, b));
        wait_held(f, 0, 0, "freed");
        harness_stop(&f->h);
}

static void test_swapin_fails(void **state)
{
        swapin_fails(*state, true);
}

static void test_swapin_fails_new_vram(void **state)
{
        swapin_fails(*state, false);
}

/* ---- c. an ack before the failed move is reaped ------------------------------ */

/* SIGSTOP the daemon and wait until it is stopped ('T' in /proc/PID/stat),
 * so that what is sent meanwhile waits in its socket, read in one pass once
 * it runs again (SIGCONT). */
static void daemon_stop(fixture *f)
{
        char path[64], stat[256], *state;
        uint64_t deadline = harness_now_ms() + 5000;

        assert_int_equal(kill(f->h.pid, SIGSTOP), 0);
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)f->h.pid);
        for (;;) {
                FILE *in = fopen(path, "r");
                size_t n = in ? fread(stat, 1, sizeof(stat) - 1, in) : 0;

                if (in)
                        fclose(in);
                stat[n] = '\0';
                state = strrchr(stat, ')');
                if (state && state[1] == ' ' && state[2] == 'T')
                        return;
                if (harness_now_ms() >= deadline)
                        fail_msg("gpu-memd (pid %d) did not stop on SIGSTOP: %s",
                                 (int)f->h.pid, stat);
                harness_sleep_ms(1);
        }
}

/* The raw client sends a pageout and, right behind it, the ack of the
 * early remap that pageout is about to send (sequences count up from 1
 * daemon-wide, and no one else moves anything), while the daemon is
 * stopped: both are read in one loop pass, so the ack comes while the
 * refused move waits in the failed list. (Sent to a running daemon, the two
 * were read in separate passes on a loaded machine in all 5 tries.)
 * It must only be noted: the move then rolls back (a remap to its VRAM,
 * bytes intact) and ends on that ack. Had the ack finished the move, the
 * buffer would be "on host" with bytes never copied and the failed list
 * would hold freed memory (ASan: use after free). That the ack came in
 * time shows as no "stale remap ack" in the log; a try where it came late
 * is repeated. Users' turns are off ([limits] user_turn_us = 0): with them,
 * a pageout that takes longer than the user's turn (a debug log, ASan)
 * leaves the ack that follows it to the next turn, after the pass. */
static void test_early_ack_of_failed_pageout(void **state)
{
        fixture *f = *state;
        Gmd__MoveRequest pageout = GMD__MOVE_REQUEST__INIT;
        uint32_t next_id = 2, req;
        uint64_t id, seq = 0, got;
        int tries = 0, caught = 0;
        raw_msg m;

        start(f, HOST_256M "[limits]\nuser_turn_us = 0\n");
        raw_hello(&raw, &f->h, "raw-copyfail");
        id = raw_alloc_release(&raw, &next_id, 8 * MiB, 3);
        wait_held(f, 8 * MiB, 0, "raw buffer");
        pageout.n_buffer_ids = 1;
        pageout.buffer_ids = &id;

        failures_on(f);
        while (!caught && tries < 5) {
                int stale = harness_log_count(&f->h, STALE_ACK);

                if (tries++)
                        harness_sleep_ms(1100);   /* the copy queue's rest */
                req = next_id++;
                daemon_stop(f);
                raw_send(&raw, GMD__MSG_TYPE__MSG_PAGEOUT, req, &pageout.base);
                raw_ack(&raw, id, seq + 1);
                assert_int_equal(kill(f->h.pid, SIGCONT), 0);
                got = raw_expect_remap(&raw, id, GMD_TIER_HOST, 8 * MiB, 3);
                if (got != seq + 1)
                        fail_msg("the pageout's remap has sequence %llu, the test "
                                 "acked %llu ahead of it", (unsigned long long)got,
                                 (unsigned long long)(seq + 1));
                m = raw_expect(&raw, GMD__MSG_TYPE__MSG_OK_REPLY, req);
                raw_msg_clear(&m);
                /* The rollback: back to its VRAM, bytes as they were. */
                seq = raw_expect_remap(&raw, id, GMD_TIER_VRAM, 8 * MiB, 3);
                raw_ack(&raw, id, seq);
                wait_resident(f, id, GMD_TIER_VRAM, "failed pageout, acked early");
                wait_held(f, 8 * MiB, 0, "failed pageout, acked early");
                expect_alive(f, "failed pageout, acked early");
                caught = harness_log_count(&f->h, STALE_ACK) == stale;
        }
        print_message("the ack reached the failed move before it was reaped "
                      "on try %d\n", tries);
        if (!caught)
                fail_msg("in %d tries the ack never came before the failed move "
                         "was reaped: the race this test is about was not set up; "
                         "log:\n%s", tries, harness_read_log(&f->h));
        pattern_check_mem(raw.maps[0], 8 * MiB, 3, "raw buffer's first mapping");

        /* Failures off: the next pageout moves it. */
        failures_off(f);
        harness_sleep_ms(1100);
        req = next_id++;
        raw_send(&raw, GMD__MSG_TYPE__MSG_PAGEOUT, req, &pageout.base);
        seq = raw_expect_remap(&raw, id, GMD_TIER_HOST, 8 * MiB, 3);
        m = raw_expect(&raw, GMD__MSG_TYPE__MSG_OK_REPLY, req);
        raw_msg_clear(&m);
        raw_ack(&raw, id, seq);
        wait_resident(f, id, GMD_TIER_HOST, "pageout after");
        wait_held(f, 0, 8 * MiB, "pageout after");
        raw_close(&raw);
        wait_held(f, 0, 0, "raw client gone");
        harness_stop(&f->h);
}

/* The same race through libgpumem, whose I/O thread acks a remap as soon
 * as it reads it: four released buffers, one pageout per round while
 * copies fail; each must stay in VRAM with its bytes and the daemon up.
 * Whether an ack came inside the loop pass depends on the scheduler; the
 * count of rounds where it did is printed. */
static void test_early_ack_rounds(void **state)
{
        fixture *f = *state;
        enum { N = 4, ROUNDS = 8 };
        gmd_buffer *bufs[N] = { 0 };
        int raced = 0;

        start(f, HOST_256M);
        for (int i = 0; i < N; i++) {
                OK(gmd_alloc(f->client, 4 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                             GMD_NO_WAIT, &bufs[i]));
                pattern_fill(bufs[i], 10 + i);
                OK(gmd_release(f->client, bufs[i]));
        }
        failures_on(f);
        for (int round = 0; round < ROUNDS; round++) {
                gmd_buffer *b = bufs[round % N];
                int stale = harness_log_count(&f->h, STALE_ACK);
                char when[64];

                snprintf(when, sizeof(when), "round %d", round);
                OK(pageout_after_rest(f->client, b));
                wait_reports_failure(f->client, b, when);
                expect_alive(f, when);
                assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
                expect_state(f, b, GMD_TIER_VRAM, GMD_STATE_RESIDENT, when);
                OK(gmd_acquire(f->client, b, GMD_NO_WAIT));
                pattern_check(b, 10 + round % N, when);
                OK(gmd_release(f->client, b));
                wait_held(f, N * 4 * MiB, 0, when);
                raced += harness_log_count(&f->h, STALE_ACK) == stale;
        }
        print_message("%d of %d rounds had the ack before the failed move was "
                      "reaped\n", raced, ROUNDS);
        assert_int_equal(harness_log_count(&f->h, SUBMIT_FAILED), ROUNDS);
        failures_off(f);
        for (int i = 0; i < N; i++) {
                OK(gmd_acquire(f->client, bufs[i], GMD_NO_WAIT));
                pattern_check(bufs[i], 10 + i, "after the rounds");
                OK(gmd_free(f->client, bufs[i]));
        }
        wait_held(f, 0, 0, "freed");
        harness_stop(&f->h);
}

/* ---- d. a no-wait acquire of a buffer whose pageout is queued ----------------- */

/* Copies at 32 MB/s in 2 MiB chunks: X's 16 MiB pageout copies for half a
 * second, and B's pageout, right behind it, waits in the queue; B's owner
 * was told to unmap it at once (early remap). An acquire of B with
 * GMD_NO_WAIT stops that move: B never left VRAM, and is usable after the
 * one round trip that remaps it, so the acquire succeeds — at once, not
 * after X's copy — with B's bytes at its address. */
static void test_nowait_acquire_of_queued_pageout(void **state)
{
        fixture *f = *state;
        gmd_buffer *x = NULL, *b = NULL;
        uint64_t t0;
        int64_t ms;
        int r;

        /* bytes_in_flight 0: two 2 MiB chunks in flight at most, so the
         * pageout is still queued when the acquire comes. */
        start(f, HOST_256M "[swap]\nchunk_size = 2M\nbytes_in_flight = 0\n"
                 "[sim]\ncopy_rate = 32M\n");
        OK(gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &x));
        OK(gmd_alloc(f->client, 4 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &b));
        pattern_fill(x, 4);
        pattern_fill(b, 5);
        OK(gmd_release(f->client, x));
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, x));
        OK(gmd_pageout(f->client, b));
        expect_state(f, b, GMD_TIER_VRAM, GMD_STATE_MOVING_OUT, "queued pageout");
        assert_int_equal(harness_vram_pool(f->client, 0).queued_out, 2);

        t0 = harness_now_ms();
        r = gmd_acquire(f->client, b, GMD_NO_WAIT);
        ms = (int64_t)(harness_now_ms() - t0);
        if (r != 0)
                fail_msg("a no-wait acquire of a buffer whose pageout was queued "
                         "gave %d (%s) after %lld ms, want 0: it is in VRAM once "
                         "its owner maps it again; log:\n%s", r, gmd_last_error(),
                         (long long)ms, harness_read_log(&f->h));
        print_message("no-wait acquire over a queued pageout: %lld ms\n",
                      (long long)ms);
        if (ms > 300)
                fail_msg("the no-wait acquire took %lld ms: it waited for the copy "
                         "ahead", (long long)ms);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        expect_state(f, b, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "acquired");
        assert_true(harness_buffer_status(f->client, gmd_buffer_id(b)).acquired);
        /* X's copy, ahead of it, is still running. */
        expect_state(f, x, GMD_TIER_VRAM, GMD_STATE_MOVING_OUT, "the copy ahead");
        pattern_check(b, 5, "after the no-wait acquire");

        OK(gmd_wait(f->client, x, 5000));
        assert_int_equal(gmd_buffer_tier(x), GMD_TIER_HOST);
        wait_held(f, 4 * MiB, 16 * MiB, "X out, B in");
        OK(gmd_acquire(f->client, x, 5000));
        pattern_check(x, 4, "X out and back");
        OK(gmd_free(f->client, x));
        OK(gmd_free(f->client, b));
        wait_held(f, 0, 0, "freed");
        harness_stop(&f->h);
}

/* ---- e. an acquire that waits through a cancelled swap-in --------------------- */

/* Copies at 32 MB/s in one 16 MiB chunk: a swap-in takes half a second. A
 * prefetch starts one; a pageout cancels it while its chunk runs; an
 * acquire issued then waits for the cancelled move to end (and, with
 * `keep`, for the rollback of its early remap). The buffer is then on
 * host, and the acquire must get a new swap-in, not sit until its
 * deadline. */
static void acquire_through_cancelled_swapin(fixture *f, bool keep)
{
        gmd_buffer *e = NULL;
        uint64_t t0;
        int64_t ms;
        int r;

        start(f, keep ? HOST_256M "[swap]\nchunk_size = 16M\n[sim]\ncopy_rate = 32M\n"
                      : HOST_256M "[swap]\nchunk_size = 16M\nkeep_vram = no\n"
                        "[sim]\ncopy_rate = 32M\n");
        e = harness_released_buffer(f->client, 16 * MiB, 6);
        harness_page_out(f->client, e);
        assert_int_equal(harness_vram_pool(f->client, 0).kept, keep ? 16 * MiB : 0);

        OK(gmd_prefetch(f->client, e));
        expect_state(f, e, GMD_TIER_HOST, GMD_STATE_MOVING_IN, "prefetch");
        OK(gmd_pageout(f->client, e));   /* cancels it; the chunk runs on */
        t0 = harness_now_ms();
        r = gmd_acquire(f->client, e, 5000);
        ms = (int64_t)(harness_now_ms() - t0);
        print_message("acquire through a cancelled swap-in: %d after %lld ms\n",
                      r, (long long)ms);
        if (r != 0)
                fail_msg("an acquire issued while a cancelled swap-in ended gave "
                         "%d (%s) after %lld ms, want 0: no new swap-in was "
                         "started for it; log:\n%s", r, gmd_last_error(),
                         (long long)ms, harness_read_log(&f->h));
        assert_int_equal(gmd_buffer_tier(e), GMD_TIER_VRAM);
        expect_state(f, e, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "acquired");
        pattern_check(e, 6, "after the cancelled swap-in and the new one");
        wait_held(f, 16 * MiB, 0, "acquired");
        OK(gmd_free(f->client, e));
        wait_held(f, 0, 0, "freed");
        harness_stop(&f->h);
}

static void test_acquire_through_cancelled_swapin(void **state)
{
        acquire_through_cancelled_swapin(*state, true);
}

static void test_acquire_through_cancelled_swapin_new_vram(void **state)
{
        acquire_through_cancelled_swapin(*state, false);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_pageout_fails, setup, teardown),
                cmocka_unit_test_setup_teardown(test_swapin_fails, setup, teardown),
                cmocka_unit_test_setup_teardown(test_swapin_fails_new_vram, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_early_ack_of_failed_pageout,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_early_ack_rounds, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_nowait_acquire_of_queued_pageout,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_acquire_through_cancelled_swapin,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_acquire_through_cancelled_swapin_new_vram, setup,
                        teardown),
        };

        /* Freed buffers must go back at once for the figures checked here:
         * the mapping cache stays off, also when run by hand. */
        setenv(GMD_CACHE_ENV, "0", 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
