/*
 * test_tiering — the swap engine on the sim backend, with the real daemon
 * and real client processes: every transition of a buffer between VRAM and
 * host memory, the order of urgent and bulk copies, deadlines, the choice
 * of eviction victims across processes, a client dying mid-move, the
 * daemon keeping backing its owner has not let go of, an acquire's grant
 * keeping its place among the replies, the users' quota following the
 * bytes, and several processes whose working sets together are more than
 * twice the pool running to completion.
 *
 * Every test starts its own daemon (64 MiB of simulated VRAM in 2 MiB
 * steps); tests that watch moves in flight slow the sim's copies with
 * [sim] copy_rate and cut them small with [swap] chunk_size. Buffers carry
 * patterns written before a move and checked word by word after it.
 * Client processes are gmd_tier_client (started through spawn.c, so each
 * can get its own GPU_MEMD_PRIORITY) and gmd_test_client; the test process
 * is a libgpumem client too, and for the ack tests a raw protocol client
 * (raw_client.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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
#include "spawn.h"
#include "wire.h"

#define POOL (64 * MiB)

typedef harness_fixture fixture;

/* The running test's protocol-level client, for exact ack timing. */
static raw_client raw;

static int setup(void **state)
{
        raw_init(&raw);
        return harness_setup(state);
}

static int teardown(void **state)
{
        raw_close(&raw);
        return harness_teardown(state);
}

/* ---- helpers ---------------------------------------------------------------- */


/* Bytes buffers hold in the VRAM pool (tier VRAM) or the host pool (tier
 * HOST): `used`, less the VRAM kept for swap-ins, which test_reuse.c
 * checks. */
static uint64_t pool_used(gmd_client *c, gmd_tier tier)
{
        gmd_status *s = harness_status(c);
        uint64_t used = UINT64_MAX;

        for (size_t i = 0; i < s->n_pools; i++)
                if (s->pools[i].device == 0 && s->pools[i].tier == tier)
                        used = s->pools[i].used - s->pools[i].kept;
        gmd_status_free(s);
        if (used == UINT64_MAX)
                fail_msg("status has no %s pool", gmd_tier_name(tier));
        return used;
}

static void expect_pools(gmd_client *c, uint64_t vram, uint64_t host,
                         const char *when)
{
        uint64_t v = pool_used(c, GMD_TIER_VRAM), h = pool_used(c, GMD_TIER_HOST);

        if (v != vram || h != host)
                fail_msg("%s: pools used vram %llu host %llu, want %llu and %llu",
                         when, (unsigned long long)v, (unsigned long long)h,
                         (unsigned long long)vram, (unsigned long long)host);
}

/* Poll until both pools show these figures; fail after timeout_ms. */
static void wait_pools(fixture *f, gmd_client *c, uint64_t vram, uint64_t host,
                       int timeout_ms, const char *when)
{
        uint64_t deadline = harness_now_ms() + (uint64_t)timeout_ms, v, h;

        for (;;) {
                v = pool_used(c, GMD_TIER_VRAM);
                h = pool_used(c, GMD_TIER_HOST);
                if (v == vram && h == host)
                        return;
                if (harness_now_ms() >= deadline)
                        break;
                harness_sleep_ms(10);
        }
        fail_msg("%s: pools used vram %llu host %llu after %d ms, want %llu and "
                 "%llu; log:\n%s", when, (unsigned long long)v,
                 (unsigned long long)h, timeout_ms, (unsigned long long)vram,
                 (unsigned long long)host, harness_read_log(&f->h));
}

/* The daemon's row for buffer `id` (any client's). */
static gmd_buffer_status buffer_row(gmd_client *c, uint64_t id)
{
        gmd_buffer_status row;
        gmd_status *s = NULL;
        int r = gmd_query_status(c, GMD_STATUS_BUFFERS, 0, &s);

        if (r < 0)
                fail_msg("gmd_query_status: %d %s", r, gmd_last_error());
        for (size_t i = 0; i < s->n_buffers; i++) {
                if (s->buffers[i].buffer_id == id) {
                        row = s->buffers[i];
                        gmd_status_free(s);
                        return row;
                }
        }
        gmd_status_free(s);
        fail_msg("buffer %llu is not in the status list", (unsigned long long)id);
        return row;
}

static void expect_row(gmd_client *c, uint64_t id, gmd_tier tier,
                       gmd_buffer_state state, const char *when)
{
        gmd_buffer_status row = buffer_row(c, id);

        if (row.tier != tier || row.state != state)
                fail_msg("%s: buffer %llu is %s/%s in status, want %s/%s", when,
                         (unsigned long long)id, gmd_tier_name(row.tier),
                         gmd_state_name(row.state), gmd_tier_name(tier),
                         gmd_state_name(state));
}

static gmd_client_status client_row(gmd_client *c, pid_t pid)
{
        gmd_status *s = harness_status(c);
        gmd_client_status row;

        for (size_t i = 0; i < s->n_clients; i++) {
                if (s->clients[i].pid == (uint32_t)pid) {
                        row = s->clients[i];
                        gmd_status_free(s);
                        return row;
                }
        }
        gmd_status_free(s);
        fail_msg("no client of pid %d in status", (int)pid);
        return row;
}

/* Start gmd_tier_client with `args`; `env` (NAME=VALUE, NULL-terminated,
 * may be NULL) is added to its environment. */
static harness_proc *spawn_tier(fixture *f, const char *const *env,
                                const char *const *args)
{
        const char *argv[16] = { GMD_TIER_CLIENT_PATH };
        spawn_opts o = { .socket = f->h.socket_path, .env = env, .listen_fd = -1 };
        size_t n = 1;

        for (; args && *args; args++) {
                assert_true(n + 1 < sizeof(argv) / sizeof(argv[0]));
                argv[n++] = *args;
        }
        argv[n] = NULL;
        return spawn_tracked(f, &o, argv);
}

/* Read a line starting with `prefix` or fail, with what the process and
 * the daemon said. */
static char *read_line(fixture *f, harness_proc *p, const char *prefix,
                       int timeout_ms)
{
        char *line = harness_read_line(p, prefix, timeout_ms);

        if (!line)
                fail_msg("no \"%s\" line from pid %d within %d ms; daemon log:\n%s",
                         prefix, (int)p->pid, timeout_ms,
                         harness_read_log(&f->h));
        return line;
}

/* "ready ID0 ID1 ..." into ids; returns how many. */
static size_t read_ready(fixture *f, harness_proc *p, uint64_t *ids, size_t max)
{
        char *line = read_line(f, p, "ready", 10000), *s = line + 5, *end;
        size_t n = 0;

        while (n < max) {
                unsigned long long v = strtoull(s, &end, 10);

                if (end == s)
                        break;
                ids[n++] = v;
                s = end;
        }
        free(line);
        return n;
}

/* Signal a hold client to release its next buffer and wait for it. */
static void release_next(fixture *f, harness_proc *p)
{
        free((kill(p->pid, SIGUSR1), read_line(f, p, "released", 5000)));
}

/* Finish a process that must exit 0; returns its output (free() it).
 * Not inlined: gcc -O2 (12.2) then takes the returned output for the
 * address of the local `out` and warns of a dangling pointer. */
__attribute__((noinline))
static char *finish_ok(fixture *f, harness_proc *p, const char *what,
                       int timeout_ms)
{
        char *out = NULL;
        int status = harness_finish(p, &out, timeout_ms);

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("%s: status %#x, output:\n%s\ndaemon log:\n%s", what,
                         status, out ? out : "", harness_read_log(&f->h));
        return out;
}

static int64_t elapsed_since(uint64_t start)
{
        return (int64_t)(harness_now_ms() - start);
}

/* ---- 1. transitions ----------------------------------------------------------- */

/* VRAM -> host -> VRAM by pageout and prefetch, then host -> VRAM by a
 * passive swap-in (acquire). The pointer never changes, the bytes survive
 * every trip, and the pools' `used` follows the memory. Pageout refuses
 * an acquired buffer (busy), SPILLABLE ones too, and a PIN_VRAM one
 * (invalid); a SPILLABLE one paged out while released is acquired where it
 * rests and used there. */
static void test_transitions(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL, *pin = NULL, *sp = NULL;
        gmd_buffer_status row;
        void *ptr;
        uint64_t id;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 2M\n");
        f->client = harness_client(&f->h, "transitions");

        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &a));
        ptr = gmd_buffer_ptr(a);
        id = gmd_buffer_id(a);
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        expect_row(f->client, id, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "new");
        assert_true(buffer_row(f->client, id).acquired);
        expect_pools(f->client, 8 * MiB, 0, "after alloc");
        pattern_fill(a, 1);

        /* Out. */
        OK(gmd_release(f->client, a));
        OK(gmd_pageout(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        assert_ptr_equal(gmd_buffer_ptr(a), ptr);
        expect_row(f->client, id, GMD_TIER_HOST, GMD_STATE_RESIDENT, "paged out");
        expect_pools(f->client, 0, 8 * MiB, "after pageout");
        /* Released and SWAPPABLE: the application may not touch it now
         * (the library need not even map the host backing). Bytes are
         * checked under a lease only. */
        /* A pageout of a buffer already out is no error and moves nothing. */
        OK(gmd_pageout(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        expect_pools(f->client, 0, 8 * MiB, "after a second pageout");

        /* In, by prefetch. */
        OK(gmd_prefetch(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        assert_ptr_equal(gmd_buffer_ptr(a), ptr);
        expect_row(f->client, id, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "prefetched");
        expect_pools(f->client, 8 * MiB, 0, "after prefetch");
        /* Prefetching a buffer that is in VRAM is no error either. */
        OK(gmd_prefetch(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        /* In VRAM already: the acquire is served at once. */
        OK(gmd_acquire(f->client, a, 0));
        pattern_check(a, 1, "after pageout and prefetch");

        /* Out again with new bytes, in by acquire: the passive swap-in. */
        pattern_fill(a, 2);
        OK(gmd_release(f->client, a));
        OK(gmd_pageout(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        /* Not usable now without waiting. */
        assert_int_equal(gmd_acquire(f->client, a, 0), GMD_ETIMEDOUT);
        OK(gmd_wait(f->client, a, 5000));
        OK(gmd_pageout(f->client, a));   /* the swap-in went on; out again */
        OK(gmd_wait(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        assert_ptr_equal(gmd_buffer_ptr(a), ptr);
        row = buffer_row(f->client, id);
        assert_int_equal(row.tier, GMD_TIER_VRAM);
        assert_int_equal(row.state, GMD_STATE_RESIDENT);
        assert_true(row.acquired);
        expect_pools(f->client, 8 * MiB, 0, "after the swap-in");
        pattern_check(a, 2, "after the swap-in");

        /* Acquired and SWAPPABLE: busy, and nothing moves. */
        assert_int_equal(gmd_pageout(f->client, a), GMD_EBUSY);
        assert_true(strlen(gmd_last_error()) > 0);
        OK(gmd_wait(f->client, a, 1000));
        expect_row(f->client, id, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "busy pageout");

        /* PIN_VRAM: never moves, acquired or not. */
        OK(gmd_alloc(f->client, 4 * MiB, 0, GMD_ALLOC_PIN_VRAM, GMD_NO_WAIT, &pin));
        pattern_fill(pin, 3);
        assert_int_equal(gmd_pageout(f->client, pin), -EINVAL);
        OK(gmd_release(f->client, pin));
        assert_int_equal(gmd_pageout(f->client, pin), -EINVAL);
        assert_int_equal(gmd_prefetch(f->client, pin), -EINVAL);
        expect_row(f->client, gmd_buffer_id(pin), GMD_TIER_VRAM,
                   GMD_STATE_RESIDENT, "pinned pageout");

        /* SPILLABLE and acquired: busy too, its owner may be writing it.
         * Released, it moves; acquired where it rests, it stays on host. */
        OK(gmd_alloc(f->client, 6 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &sp));
        pattern_fill(sp, 4);
        expect_pools(f->client, 18 * MiB, 0, "three buffers");
        assert_int_equal(gmd_pageout(f->client, sp), GMD_EBUSY);
        assert_non_null(strstr(gmd_last_error(), "release it first"));
        OK(gmd_wait(f->client, sp, 1000));
        expect_row(f->client, gmd_buffer_id(sp), GMD_TIER_VRAM,
                   GMD_STATE_RESIDENT, "busy spillable pageout");
        OK(gmd_release(f->client, sp));
        OK(gmd_pageout(f->client, sp));
        OK(gmd_wait(f->client, sp, 5000));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, sp, 0));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_HOST);
        assert_int_equal(gmd_prefetch(f->client, sp), GMD_EBUSY);
        row = buffer_row(f->client, gmd_buffer_id(sp));
        assert_int_equal(row.tier, GMD_TIER_HOST);
        assert_true(row.acquired);
        expect_pools(f->client, 12 * MiB, 6 * MiB, "spillable paged out");
        pattern_check(sp, 4, "spillable on host");
        pattern_fill(sp, 5);            /* in use where it is */
        /* Released, it comes back with an acquire that may wait. */
        OK(gmd_release(f->client, sp));
        OK(gmd_acquire(f->client, sp, 5000));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_VRAM);
        pattern_check(sp, 5, "spillable back in VRAM");
        expect_pools(f->client, 18 * MiB, 0, "spillable back");
        /* An acquire that will not wait takes a SPILLABLE buffer where it
         * rests. */
        OK(gmd_release(f->client, sp));
        OK(gmd_pageout(f->client, sp));
        OK(gmd_wait(f->client, sp, 5000));
        OK(gmd_acquire(f->client, sp, 0));
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_HOST);
        pattern_check(sp, 5, "spillable acquired on host");

        /* Everything of the client (NULL): the released ones go out. */
        OK(gmd_release(f->client, a));
        OK(gmd_pageout(f->client, NULL));
        OK(gmd_wait(f->client, NULL, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        assert_int_equal(gmd_buffer_tier(pin), GMD_TIER_VRAM);
        expect_pools(f->client, 4 * MiB, 14 * MiB, "after pageout of all");
        OK(gmd_acquire(f->client, pin, 0));
        pattern_check(pin, 3, "pinned after pageout of all");
        pattern_check(sp, 5, "spillable in use on host");
        OK(gmd_release(f->client, sp));
        OK(gmd_prefetch(f->client, NULL));
        OK(gmd_wait(f->client, NULL, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        assert_int_equal(gmd_buffer_tier(sp), GMD_TIER_VRAM);
        expect_pools(f->client, 18 * MiB, 0, "after prefetch of all");
        OK(gmd_acquire(f->client, a, 0));
        OK(gmd_acquire(f->client, sp, 0));
        pattern_check(a, 2, "after pageout and prefetch of all");
        pattern_check(sp, 5, "spillable after prefetch of all");

        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, pin));
        OK(gmd_free(f->client, sp));
        expect_pools(f->client, 0, 0, "after free");
        harness_stop(&f->h);
}

/* ---- 2. ordering -------------------------------------------------------------- */

/* With copies slowed to 200 MB/s in 2 MiB chunks, a bulk prefetch of 48 MiB
 * takes ~240 ms; an acquire of a small buffer on host, issued just after
 * it, is served at the head of the queue and returns long before. */
static void test_acquire_overtakes_prefetch(void **state)
{
        fixture *f = *state;
        gmd_buffer *big = NULL, *small = NULL, *other = NULL;
        uint64_t t0;
        int64_t t_acquire, t_bulk;

        /* Two 2 MiB chunks in flight at most (bytes_in_flight 0), so the
         * acquire overtakes within a chunk or two at this slow link. */
        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "bytes_in_flight = 0\n"
                                   "[sim]\ncopy_rate = 200M\n");
        f->client = harness_client(&f->h, "ordering");
        OK(gmd_alloc(f->client, 48 * MiB, 0, 0, GMD_NO_WAIT, &big));
        OK(gmd_alloc(f->client, 4 * MiB, 0, 0, GMD_NO_WAIT, &small));
        OK(gmd_alloc(f->client, 4 * MiB, 0, 0, GMD_NO_WAIT, &other));
        pattern_fill(big, 10);
        pattern_fill(small, 11);
        pattern_fill(other, 12);
        OK(gmd_release(f->client, big));
        OK(gmd_release(f->client, small));
        OK(gmd_release(f->client, other));
        OK(gmd_pageout(f->client, NULL));
        OK(gmd_wait(f->client, NULL, 10000));
        expect_pools(f->client, 0, 56 * MiB, "all paged out");

        t0 = harness_now_ms();
        OK(gmd_prefetch(f->client, big));
        OK(gmd_acquire(f->client, small, 10000));
        t_acquire = elapsed_since(t0);
        /* Served while the bulk copy is still under way (the daemon's view:
         * the owner may map the new VRAM of a swap-in before its copy
         * ends, so its own tier may already say VRAM). */
        assert_int_equal(gmd_buffer_tier(small), GMD_TIER_VRAM);
        print_message("acquire of 4 MiB returned after %lld ms\n",
                      (long long)t_acquire);
        expect_row(f->client, gmd_buffer_id(big), GMD_TIER_HOST,
                   GMD_STATE_MOVING_IN, "bulk prefetch after the acquire");
        OK(gmd_wait(f->client, big, 10000));
        t_bulk = elapsed_since(t0);
        print_message("acquire of 4 MiB: %lld ms; prefetch of 48 MiB: %lld ms\n",
                      (long long)t_acquire, (long long)t_bulk);
        /* 4 MiB is 20 ms of copying, behind at most the two chunks in
         * flight (20 ms); the bulk is 240 ms. */
        if (t_acquire * 3 > t_bulk)
                fail_msg("acquire took %lld ms against the prefetch's %lld ms: "
                         "it did not overtake", (long long)t_acquire,
                         (long long)t_bulk);
        if (t_bulk < 200)
                fail_msg("48 MiB at 200 MB/s in %lld ms: copy_rate not applied",
                         (long long)t_bulk);
        assert_int_equal(gmd_buffer_tier(big), GMD_TIER_VRAM);
        assert_int_equal(gmd_buffer_tier(other), GMD_TIER_HOST);
        expect_pools(f->client, 52 * MiB, 4 * MiB, "after both");
        pattern_check(small, 11, "small after swap-in");
        OK(gmd_acquire(f->client, big, 0));
        pattern_check(big, 10, "big after prefetch");
        OK(gmd_acquire(f->client, other, 5000));
        pattern_check(other, 12, "other after its swap-in");

        OK(gmd_free(f->client, big));
        OK(gmd_free(f->client, small));
        OK(gmd_free(f->client, other));
        expect_pools(f->client, 0, 0, "after free");
        harness_stop(&f->h);
}

/* A buffer of `big` bytes on device 0 and one of `small` on device
 * `small_device`, patterns `seed` and `seed` + 1 written, both released
 * and paged out. */
static void paged_out_pair(gmd_client *c, uint64_t big, uint64_t small,
                           unsigned small_device, uint32_t seed,
                           gmd_buffer **ret_big, gmd_buffer **ret_small)
{
        OK(gmd_alloc(c, big, 0, 0, GMD_NO_WAIT, ret_big));
        OK(gmd_alloc(c, small, small_device, 0, GMD_NO_WAIT, ret_small));
        pattern_fill(*ret_big, seed);
        pattern_fill(*ret_small, seed + 1);
        OK(gmd_release(c, *ret_big));
        OK(gmd_release(c, *ret_small));
        OK(gmd_pageout(c, NULL));
        OK(gmd_wait(c, NULL, 10000));
}

/* paged_out_pair's buffers, the small one acquired: its pattern checked,
 * the big one's once its prefetch ended, both freed. */
static void check_and_free_pair(gmd_client *c, gmd_buffer *big,
                                gmd_buffer *small, uint32_t seed)
{
        pattern_check(small, seed + 1, "the small buffer after its swap-in");
        OK(gmd_wait(c, big, 10000));
        OK(gmd_acquire(c, big, 0));
        pattern_check(big, seed, "the big buffer after its prefetch");
        OK(gmd_free(c, big));
        OK(gmd_free(c, small));
}

/* How long an acquire of a paged-out 4 MiB buffer takes just after a
 * prefetch of 48 MiB began, with copies at 200 MB/s in 16 MiB chunks, two
 * in flight ([swap] preempt_step `step`, "0" for off). */
static int64_t acquire_behind_big_chunks(fixture *f, const char *step)
{
        gmd_buffer *big = NULL, *small = NULL;
        char config[256];
        uint64_t t0;
        int64_t took;

        snprintf(config, sizeof(config), "[pools]\nhost_limit = 256M\n"
                 "[swap]\nchunk_size = 16M\nbytes_in_flight = 0\n"
                 "preempt_step = %s\n[sim]\ncopy_rate = 200M\n", step);
        harness_start_small(&f->h, config);
        f->client = harness_client(&f->h, "preempt");
        /* Status says so (PoolInfo.preempt_step). */
        assert_int_equal(harness_vram_pool(f->client, 0).preempt_step,
                         strcmp(step, "0") ? MiB : 0);
        paged_out_pair(f->client, 48 * MiB, 4 * MiB, 0, 30, &big, &small);
        OK(gmd_prefetch(f->client, big));
        t0 = harness_now_ms();
        OK(gmd_acquire(f->client, small, 10000));
        took = elapsed_since(t0);
        check_and_free_pair(f->client, big, small, 30);
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
        return took;
}

/* An acquire does not wait for the chunks a prefetch has in flight: they
 * pause at their next step ([swap] preempt_step; sim: its copy thread
 * serves the urgent lane between steps). Off, the 4 MiB acquire (20 ms of
 * copying) waits behind two 16 MiB chunks (160 ms). */
static void test_acquire_preempts_chunks_in_flight(void **state)
{
        fixture *f = *state;
        int64_t on = acquire_behind_big_chunks(f, "1M");
        int64_t off = acquire_behind_big_chunks(f, "0");

        print_message("4 MiB acquire during a 48 MiB prefetch: %lld ms with "
                      "preempt_step 1M, %lld ms with it off\n",
                      (long long)on, (long long)off);
        if (off < 100)
                fail_msg("with preempt_step off the acquire took %lld ms: it "
                         "should wait behind two 16 MiB chunks at 200 MB/s "
                         "(160 ms)", (long long)off);
        if (on * 2 > off)
                fail_msg("with preempt_step 1M the acquire took %lld ms "
                         "against %lld ms off: the chunks in flight did not "
                         "pause for it", (long long)on, (long long)off);
}

/* Device 0's bytes copied in so far (its pool's bytes_in). */
static uint64_t bytes_in_of(gmd_client *c, unsigned device)
{
        return harness_vram_pool(c, device).bytes_in;
}

/* Two devices on one link ([sim] shared_link: one copy queue each way for
 * both, at 200 MB/s, two 2 MiB chunks in flight): a 16 MiB acquire on
 * device 1, issued while device 0 prefetches 48 MiB, takes the link's
 * chunks as an acquire on device 0 would. Device 0's prefetch gets no new
 * chunk until the acquire's last one is issued: at most its two in flight
 * (and one issued as the acquire arrived) copy meanwhile, where with a
 * limit per device the two interleave chunk for chunk (~16 MiB). */
static void test_acquire_overtakes_other_devices_prefetch(void **state)
{
        fixture *f = *state;
        gmd_buffer *big = NULL, *small = NULL;
        uint64_t before, during;
        char *line;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "bytes_in_flight = 0\n"
                                   "[sim]\ndevices = 2\ncopy_rate = 200M\n"
                                   "shared_link = yes\n");
        line = harness_wait_log(&f->h, "device 1 shares its link to host "
                                "memory with device 0", 2000);
        free(line);
        f->client = harness_client(&f->h, "shared link");
        /* Status says so: both devices in device 0's link group. */
        assert_int_equal(harness_vram_pool(f->client, 0).link_group, 0);
        assert_int_equal(harness_vram_pool(f->client, 1).link_group, 0);
#ifdef GMD_CTL_PATH
        {
                const char *argv[] = { GMD_CTL_PATH, "status", NULL };
                char *out = NULL, *err = NULL;
                int status = harness_run(&f->h, NULL, argv, &out, &err, 5000);

                assert_int_equal(harness_exit_code(status), 0);
                if (!strstr(out, "gpu1 shares its link to host memory with "
                                 "gpu0 (their copies are scheduled together)") ||
                    !strstr(out, "gpu0 shares its link to host memory with gpu1"))
                        fail_msg("gpu-memctl status does not say the link is "
                                 "shared:\n%s", out);
                free(out);
                free(err);
        }
#endif
        paged_out_pair(f->client, 48 * MiB, 16 * MiB, 1, 20, &big, &small);
        OK(gmd_prefetch(f->client, big));
        harness_sleep_ms(25);           /* the prefetch is under way */
        before = bytes_in_of(f->client, 0);
        OK(gmd_acquire(f->client, small, 10000));
        during = bytes_in_of(f->client, 0) - before;
        print_message("device 0 copied %llu MiB in while device 1's 16 MiB "
                      "acquire ran\n", (unsigned long long)(during / MiB));
        if (during > 6 * MiB)
                fail_msg("device 0's prefetch copied %llu MiB during device "
                         "1's acquire on their shared link: want at most the "
                         "chunks in flight as it came (6 MiB)",
                         (unsigned long long)(during / MiB));
        check_and_free_pair(f->client, big, small, 20);
        harness_stop(&f->h);
}

/* ---- 3. deadlines ------------------------------------------------------------- */

/* Allocate `n` acquired buffers of `size`, filling VRAM so nothing can be
 * evicted. */
static void fill_vram_acquired(gmd_client *c, gmd_buffer **bufs, unsigned n,
                               uint64_t size)
{
        for (unsigned i = 0; i < n; i++) {
                OK(gmd_alloc(c, size, 0, GMD_ALLOC_SWAPPABLE, GMD_NO_WAIT, &bufs[i]));
                pattern_fill(bufs[i], 100 + i);
        }
}

static void test_deadlines(void **state)
{
        fixture *f = *state;
        gmd_buffer *wall[4] = { 0 }, *x = NULL, *y = NULL, *b = NULL, *slow = NULL;
        const char *err;
        uint64_t t0;
        int64_t ms;
        int r;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "[sim]\ncopy_rate = 100M\n");
        f->client = harness_client(&f->h, "deadlines");

        /* A wait shorter than a slow move: timed out; then it ends. */
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &slow));
        pattern_fill(slow, 50);
        OK(gmd_release(f->client, slow));
        OK(gmd_pageout(f->client, slow));
        t0 = harness_now_ms();
        assert_int_equal(gmd_wait(f->client, slow, 30), GMD_ETIMEDOUT);
        ms = elapsed_since(t0);
        if (ms < 25 || ms > 500)
                fail_msg("gmd_wait(30 ms) returned after %lld ms", (long long)ms);
        assert_true(strlen(gmd_last_error()) > 0);
        assert_int_equal(gmd_wait(f->client, slow, 0), GMD_ETIMEDOUT);
        OK(gmd_wait(f->client, slow, 5000));
        assert_int_equal(gmd_buffer_tier(slow), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, slow, 5000));
        pattern_check(slow, 50, "after the slow pageout and back");
        OK(gmd_free(f->client, slow));

        /* Two buffers on host: X ordinary, Y SPILLABLE. */
        OK(gmd_alloc(f->client, 8 * MiB, 0, 0, GMD_NO_WAIT, &x));
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &y));
        pattern_fill(x, 60);
        pattern_fill(y, 61);
        OK(gmd_release(f->client, x));
        OK(gmd_release(f->client, y));
        OK(gmd_pageout(f->client, NULL));
        OK(gmd_wait(f->client, NULL, 5000));
        expect_pools(f->client, 0, 16 * MiB, "X and Y out");

        /* VRAM full of acquired buffers: nothing can make room. */
        fill_vram_acquired(f->client, wall, 4, 16 * MiB);
        expect_pools(f->client, POOL, 16 * MiB, "wall up");

        /* An ordinary allocation: ETIMEDOUT after its deadline, saying why. */
        t0 = harness_now_ms();
        r = gmd_alloc(f->client, 8 * MiB, 0, 0, 400, &b);
        ms = elapsed_since(t0);
        assert_int_equal(r, GMD_ETIMEDOUT);
        if (ms < 395 || ms > 400 + 1000)
                fail_msg("a 400 ms allocation deadline took %lld ms", (long long)ms);
        err = gmd_last_error();
        if (!strstr(err, "400 ms") || (!strstr(err, "8 MiB") &&
                                        !strstr(err, "8388608")))
                fail_msg("error \"%s\" does not say it waited 400 ms for 8 MiB", err);

        /* A SPILLABLE one: after its deadline, on HOST, and usable. */
        t0 = harness_now_ms();
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SPILLABLE, 400, &b));
        ms = elapsed_since(t0);
        if (ms < 395 || ms > 400 + 1000)
                fail_msg("a SPILLABLE allocation spilled after %lld ms, not at "
                         "its 400 ms deadline", (long long)ms);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        expect_row(f->client, gmd_buffer_id(b), GMD_TIER_HOST, GMD_STATE_RESIDENT,
                   "spilled allocation");
        expect_pools(f->client, POOL, 24 * MiB, "spilled allocation");
        for (size_t i = 0; i < 8 * MiB / 8; i++)
                if (((uint64_t *)gmd_buffer_ptr(b))[i] != 0)
                        fail_msg("spilled allocation is not zeroed at word %zu", i);
        pattern_fill(b, 62);
        pattern_check(b, 62, "spilled allocation");
        OK(gmd_free(f->client, b));
        b = NULL;
        /* SPILLABLE and no wait at all: on HOST at once. */
        t0 = harness_now_ms();
        OK(gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &b));
        assert_true(elapsed_since(t0) < 300);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        pattern_fill(b, 63);
        pattern_check(b, 63, "spilled no-wait allocation");
        OK(gmd_free(f->client, b));

        /* Acquire of X (not SPILLABLE) on host: no room, ETIMEDOUT. */
        t0 = harness_now_ms();
        r = gmd_acquire(f->client, x, 400);
        ms = elapsed_since(t0);
        assert_int_equal(r, GMD_ETIMEDOUT);
        if (ms < 395 || ms > 400 + 1000)
                fail_msg("a 400 ms acquire deadline took %lld ms", (long long)ms);
        assert_true(strlen(gmd_last_error()) > 0);
        assert_int_equal(gmd_buffer_tier(x), GMD_TIER_HOST);
        assert_false(buffer_row(f->client, gmd_buffer_id(x)).acquired);

        /* Acquire of Y (SPILLABLE) on host: acquired there at its deadline. */
        t0 = harness_now_ms();
        OK(gmd_acquire(f->client, y, 400));
        ms = elapsed_since(t0);
        if (ms < 395 || ms > 400 + 1000)
                fail_msg("SPILLABLE acquire granted on host after %lld ms, not "
                         "at its 400 ms deadline", (long long)ms);
        assert_int_equal(gmd_buffer_tier(y), GMD_TIER_HOST);
        assert_true(buffer_row(f->client, gmd_buffer_id(y)).acquired);
        pattern_check(y, 61, "Y acquired on host");
        pattern_fill(y, 64);
        pattern_check(y, 64, "Y written on host");

        /* X's swap-in went on as a prefetch: room appears, X comes back. */
        OK(gmd_free(f->client, wall[0]));
        wall[0] = NULL;
        OK(gmd_wait(f->client, x, 5000));
        assert_int_equal(gmd_buffer_tier(x), GMD_TIER_VRAM);
        OK(gmd_acquire(f->client, x, 0));
        pattern_check(x, 60, "X after its prefetch");
        /* Y is in use on host: it must not have moved. */
        assert_int_equal(gmd_buffer_tier(y), GMD_TIER_HOST);
        pattern_check(y, 64, "Y still on host");
        for (unsigned i = 1; i < 4; i++)
                pattern_check(wall[i], 100 + i, "wall");

        for (unsigned i = 1; i < 4; i++)
                OK(gmd_free(f->client, wall[i]));
        OK(gmd_free(f->client, x));
        OK(gmd_free(f->client, y));
        wait_pools(f, f->client, 0, 0, 3000, "after free");
        harness_stop(&f->h);
}

/* ---- 4. eviction choice ------------------------------------------------------- */

static void expect_tier(fixture *f, uint64_t id, gmd_tier tier, const char *who)
{
        gmd_buffer_status row = buffer_row(f->client, id);

        if (row.tier != tier)
                fail_msg("%s (buffer %llu) is on %s, want %s; log:\n%s", who,
                         (unsigned long long)id, gmd_tier_name(row.tier),
                         gmd_tier_name(tier), harness_read_log(&f->h));
}

/* [limits] priority_grace_ms: a priority-40 process's buffer released just
 * now is not evicted for this priority-0 client's allocation until it has
 * been released 400 ms; then it is, and the allocation is served. */
static void test_priority_grace(void **state)
{
        fixture *f = *state;
        static const char *const high[] = { "GPU_MEMD_PRIORITY=40", NULL };
        const char *args_h[] = { "hold", "1", "8M", "3", NULL };
        gmd_buffer *fill = NULL, *more = NULL;
        harness_proc *h;
        uint64_t hid[1], t0, ms;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[users]\nmax_priority = 50\n"
                                   "[limits]\npriority_grace_ms = 400\n");
        f->client = harness_client(&f->h, "low");
        h = spawn_tier(f, high, args_h);
        assert_int_equal(read_ready(f, h, hid, 1), 1);
        OK(gmd_alloc(f->client, POOL - 8 * MiB, 0, 0, GMD_NO_WAIT, &fill));
        release_next(f, h);
        t0 = harness_now_ms();
        OK(gmd_alloc(f->client, 8 * MiB, 0, 0, 5000, &more));
        ms = harness_now_ms() - t0;
        if (ms < 300 || ms > 3000)
                fail_msg("served after %llu ms, want about 400; log:\n%s",
                         (unsigned long long)ms, harness_read_log(&f->h));
        expect_tier(f, hid[0], GMD_TIER_HOST, "H1 (its grace over)");
        OK(gmd_free(f->client, more));
        OK(gmd_free(f->client, fill));
}

/* [limits] memory_slice_ms: this client keeps stepping (acquire, release,
 * acquire again at once: a training job with idle() between steps) on a
 * buffer of 48 of the pool's 64 MiB while another process waits to
 * allocate 48 MiB. Every eviction made for the other is stopped by the
 * next acquire when nothing else decides, so without slices the other
 * waits out its 3 s (copies at 64 MB/s: an eviction takes 750 ms, and
 * this loop acquires again within milliseconds). With slices the waiting
 * process gets the device's slice, the eviction goes on past the acquire,
 * which gets the buffer back, bytes intact, once the other is done. */
static void run_slices(fixture *f, unsigned slice_ms)
{
        static const char *const args[] = { "alloc", "48M", "3000", NULL };
        gmd_buffer *b = NULL;
        harness_proc *p;
        char config[160], *out = NULL;
        uint64_t deadline, t0;
        int64_t longest = 0;
        siginfo_t info;
        int status;

        snprintf(config, sizeof(config), "[pools]\nhost_limit = 256M\n"
                 "[sim]\ncopy_rate = 64M\n[limits]\nmemory_slice_ms = %u\n",
                 slice_ms);
        harness_start_small(&f->h, config);
        f->client = harness_client(&f->h, "stepper");
        OK(gmd_alloc(f->client, 48 * MiB, 0, 0, GMD_NO_WAIT, &b));
        pattern_fill(b, 130);
        OK(gmd_release(f->client, b));
        p = harness_track_client(f, args);
        free(read_line(f, p, "connected", 5000));
        deadline = harness_now_ms() + 6000;
        for (;;) {
                memset(&info, 0, sizeof(info));
                if ((waitid(P_PID, p->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                     info.si_pid) || harness_now_ms() > deadline)
                        break;
                t0 = harness_now_ms();
                OK(gmd_acquire(f->client, b, 10000));
                if (elapsed_since(t0) > longest)
                        longest = elapsed_since(t0);
                pattern_check(b, 130, "between steps");
                OK(gmd_release(f->client, b));
        }
        status = harness_finish(p, &out, 5000);
        if (slice_ms) {
                if (harness_exit_code(status) != 0 || !strstr(out, "bytes ok")) {
                        /* The log is longer than a cmocka message holds. */
                        fprintf(stderr, "daemon log:\n%s\n", harness_read_log(&f->h));
                        fail_msg("with slices the waiting allocation was not "
                                 "served:\n%s", out);
                }
                /* The acquire that found the eviction waited it out. */
                if (longest < 300)
                        fail_msg("no acquire waited for the eviction (longest "
                                 "%lld ms)", (long long)longest);
                if (harness_log_count(&f->h, "slice of its memory to") < 1)
                        fail_msg("no slice was given; log:\n%s",
                                 harness_read_log(&f->h));
        } else if (harness_exit_code(status) == 0 || !strstr(out, "rc -")) {
                fail_msg("without slices the allocation was served: this test "
                         "no longer shows what slices change:\n%s", out);
        }
        free(out);
        OK(gmd_acquire(f->client, b, 10000));
        pattern_check(b, 130, "after the other process");
        OK(gmd_free(f->client, b));
}

static void test_memory_slices(void **state)
{
        run_slices(*state, 400);
}

static void test_memory_slices_off(void **state)
{
        run_slices(*state, 0);
}

/* Three processes with released buffers: L and M at priority 10, H at 40.
 * H released first, so least-recently-released alone would pick H; the
 * order of eviction must be L1, M1, L2 (priority 10, by release time) and
 * only then H1. */
static void test_eviction_choice(void **state)
{
        fixture *f = *state;
        static const char *const low[] = { "GPU_MEMD_PRIORITY=10", NULL };
        static const char *const high[] = { "GPU_MEMD_PRIORITY=40", NULL };
        const char *args2[] = { "hold", "2", "8M", "1", NULL };
        const char *args1[] = { "hold", "1", "8M", "2", NULL };
        const char *args_h[] = { "hold", "2", "8M", "3", NULL };
        harness_proc *l, *m, *h;
        uint64_t lid[2], mid[1], hid[2];
        gmd_buffer *mine[4] = { 0 };
        static const uint64_t sizes[4] = { 32 * MiB, 8 * MiB, 8 * MiB, 8 * MiB };
        char *out;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[users]\nmax_priority = 50\n");
        f->client = harness_client(&f->h, "evictor");

        l = spawn_tier(f, low, args2);
        assert_int_equal(read_ready(f, l, lid, 2), 2);
        m = spawn_tier(f, low, args1);
        assert_int_equal(read_ready(f, m, mid, 1), 1);
        h = spawn_tier(f, high, args_h);
        assert_int_equal(read_ready(f, h, hid, 2), 2);
        assert_int_equal(client_row(f->client, l->pid).priority, 10);
        assert_int_equal(client_row(f->client, m->pid).priority, 10);
        assert_int_equal(client_row(f->client, h->pid).priority, 40);
        expect_pools(f->client, 40 * MiB, 0, "holders ready");

        /* Release order: H1 H2 L1 M1 L2, apart in time. */
        release_next(f, h);
        harness_sleep_ms(20);
        release_next(f, h);
        harness_sleep_ms(20);
        release_next(f, l);
        harness_sleep_ms(20);
        release_next(f, m);
        harness_sleep_ms(20);
        release_next(f, l);

        /* 32 MiB with 24 MiB free: one 8 MiB victim. */
        OK(gmd_alloc(f->client, sizes[0], 0, 0, 5000, &mine[0]));
        expect_tier(f, lid[0], GMD_TIER_HOST, "L1 (priority 10, released first)");
        expect_tier(f, mid[0], GMD_TIER_VRAM, "M1");
        expect_tier(f, lid[1], GMD_TIER_VRAM, "L2");
        expect_tier(f, hid[0], GMD_TIER_VRAM, "H1");
        expect_tier(f, hid[1], GMD_TIER_VRAM, "H2");

        OK(gmd_alloc(f->client, sizes[1], 0, 0, 5000, &mine[1]));
        expect_tier(f, mid[0], GMD_TIER_HOST, "M1 (priority 10, released second)");
        expect_tier(f, lid[1], GMD_TIER_VRAM, "L2");
        expect_tier(f, hid[0], GMD_TIER_VRAM, "H1");

        OK(gmd_alloc(f->client, sizes[2], 0, 0, 5000, &mine[2]));
        expect_tier(f, lid[1], GMD_TIER_HOST, "L2 (priority 10, released third)");
        expect_tier(f, hid[0], GMD_TIER_VRAM, "H1");
        expect_tier(f, hid[1], GMD_TIER_VRAM, "H2");

        OK(gmd_alloc(f->client, sizes[3], 0, 0, 5000, &mine[3]));
        expect_tier(f, hid[0], GMD_TIER_HOST, "H1 (priority 40, released first)");
        expect_tier(f, hid[1], GMD_TIER_VRAM, "H2 (priority 40, released last)");
        expect_pools(f->client, POOL, 32 * MiB, "after four evictions");
        assert_int_equal(harness_log_count(&f->h, "evicting buffer"), 4);
        if (harness_log_count(&f->h, "priority 10, to host") != 3 ||
            harness_log_count(&f->h, "priority 40, to host") != 1)
                fail_msg("eviction log lines do not name the priorities:\n%s",
                         harness_read_log(&f->h));

        for (unsigned i = 0; i < 4; i++) {
                pattern_fill(mine[i], 70 + i);
                pattern_check(mine[i], 70 + i, "the evictor's buffer");
                OK(gmd_free(f->client, mine[i]));
        }

        /* The owners see the same tiers, bring everything back and check
         * every byte. */
        kill(l->pid, SIGUSR2);
        out = finish_ok(f, l, "L", 10000);
        assert_non_null(strstr(out, "tier 0 host\ntier 1 host\n"));
        assert_non_null(strstr(out, "checked 2 bad-words 0"));
        free(out);
        kill(m->pid, SIGUSR2);
        out = finish_ok(f, m, "M", 10000);
        assert_non_null(strstr(out, "tier 0 host\n"));
        free(out);
        kill(h->pid, SIGUSR2);
        out = finish_ok(f, h, "H", 10000);
        assert_non_null(strstr(out, "tier 0 host\ntier 1 vram\n"));
        assert_non_null(strstr(out, "checked 2 bad-words 0"));
        free(out);
        wait_pools(f, f->client, 0, 0, 3000, "all gone");
        harness_stop(&f->h);
}

/* ---- 5. a client dies mid-move ------------------------------------------------ */

static void kill_mid_move(fixture *f, const char *direction, int fds_idle)
{
        const char *args[] = { "move", "32M", direction, NULL };
        harness_proc *p = spawn_tier(f, NULL, args);
        char *line = read_line(f, p, "moving", 10000);
        uint64_t id = strtoull(line + 7, NULL, 10), deadline;
        gmd_buffer_state want = strcmp(direction, "out") ? GMD_STATE_MOVING_IN :
                                                           GMD_STATE_MOVING_OUT;
        gmd_buffer_status row;
        int status;

        free(line);
        /* "acquire" prints before its request leaves: give it a moment. */
        deadline = harness_now_ms() + 2000;
        while ((row = buffer_row(f->client, id)).state != want &&
               harness_now_ms() < deadline)
                harness_sleep_ms(5);
        if (row.state != want)
                fail_msg("buffer %llu is %s before the kill, want %s (%s)",
                         (unsigned long long)id, gmd_state_name(row.state),
                         gmd_state_name(want), direction);
        assert_int_equal(kill(p->pid, SIGKILL), 0);
        status = harness_wait_proc(p, 3000);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(harness_wait_clients(f->client, 1, 3000), 1);
        /* The copy (1 s at 32 MB/s) still runs on both backings: both stay
         * accounted until it ends. */
        expect_pools(f->client, 32 * MiB, 32 * MiB, "client gone, copy running");
        wait_pools(f, f->client, 0, 0, 5000, "after the orphaned copy");
        assert_int_equal(harness_wait_fds(f->h.pid, fds_idle, 3000), fds_idle);
}

static void test_client_dies_mid_move(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        int fds_idle;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "[sim]\ncopy_rate = 32M\n");
        f->client = harness_client(&f->h, "observer");
        fds_idle = harness_count_fds(f->h.pid);

        kill_mid_move(f, "out", fds_idle);
        kill_mid_move(f, "in", fds_idle);
        kill_mid_move(f, "acquire", fds_idle);

        /* The daemon is up and its whole pool usable. */
        OK(gmd_alloc(f->client, POOL, 0, 0, GMD_NO_WAIT, &b));
        pattern_fill(b, 80);
        pattern_check(b, 80, "whole pool after the kills");
        OK(gmd_free(f->client, b));

        /* SIGTERM with a move in flight: a clean exit (harness_stop checks
         * status 0 and the socket gone). */
        OK(gmd_alloc(f->client, 32 * MiB, 0, 0, GMD_NO_WAIT, &b));
        pattern_fill(b, 81);
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, b));
        expect_row(f->client, gmd_buffer_id(b), GMD_TIER_VRAM,
                   GMD_STATE_MOVING_OUT, "before SIGTERM");
        harness_stop(&f->h);
}

/* ---- cancellations ------------------------------------------------------------ */

typedef struct acquire_job {
        gmd_client *client;
        gmd_buffer *buffer;
        int64_t timeout_ms;
        int result;
        uint64_t done_ms;
} acquire_job;

static void *acquire_thread(void *arg)
{
        acquire_job *j = arg;

        j->result = gmd_acquire(j->client, j->buffer, j->timeout_ms);
        j->done_ms = harness_now_ms();
        return NULL;
}

/* Moves stopped halfway leave the buffer where it was, with its bytes and
 * with nothing left allocated on the other side: a prefetch over a
 * pageout, a pageout over a prefetch, an acquire over a pageout (and over
 * an eviction). A pageout issued while an acquire waits for the buffer's
 * swap-in must not strand that acquire. Copies run at 64 MB/s, so a 32 MiB
 * move takes half a second. */
static void test_cancellations(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL, *filler = NULL;
        acquire_job job;
        pthread_t thread;
        uint64_t t0;
        int64_t ms;
        int r;

        /* bytes_in_flight 0: a cancelled move has two chunks in flight
         * at most, not 64 MiB, at this slow link. */
        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "bytes_in_flight = 0\n"
                                   "[sim]\ncopy_rate = 64M\n"
                                   /* An acquire stops an eviction: with
                                    * slices, one made for another
                                    * process's slice goes on
                                    * (test_memory_slices). */
                                   "[limits]\nmemory_slice_ms = 0\n");
        f->client = harness_client(&f->h, "cancel");
        OK(gmd_alloc(f->client, 32 * MiB, 0, 0, GMD_NO_WAIT, &b));
        pattern_fill(b, 120);
        OK(gmd_release(f->client, b));

        /* Prefetch over a pageout under way: it never leaves. */
        OK(gmd_pageout(f->client, b));
        expect_row(f->client, gmd_buffer_id(b), GMD_TIER_VRAM, GMD_STATE_MOVING_OUT,
                   "pageout under way");
        OK(gmd_prefetch(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        expect_row(f->client, gmd_buffer_id(b), GMD_TIER_VRAM, GMD_STATE_RESIDENT,
                   "prefetch over pageout");
        wait_pools(f, f->client, 32 * MiB, 0, 3000, "prefetch over pageout");
        OK(gmd_acquire(f->client, b, 0));
        pattern_check(b, 120, "after prefetch over pageout");
        pattern_fill(b, 121);
        OK(gmd_release(f->client, b));

        /* Pageout over a prefetch under way: it stays out. */
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        OK(gmd_prefetch(f->client, b));
        expect_row(f->client, gmd_buffer_id(b), GMD_TIER_HOST, GMD_STATE_MOVING_IN,
                   "prefetch under way");
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        expect_row(f->client, gmd_buffer_id(b), GMD_TIER_HOST, GMD_STATE_RESIDENT,
                   "pageout over prefetch");
        wait_pools(f, f->client, 0, 32 * MiB, 3000, "pageout over prefetch");
        OK(gmd_acquire(f->client, b, 5000));
        pattern_check(b, 121, "after pageout over prefetch");
        pattern_fill(b, 122);
        OK(gmd_release(f->client, b));

        /* Acquire over a pageout under way: served at once, in VRAM. */
        OK(gmd_pageout(f->client, b));
        t0 = harness_now_ms();
        OK(gmd_acquire(f->client, b, 5000));
        ms = elapsed_since(t0);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        if (ms > 300)
                fail_msg("acquire over a 500 ms pageout took %lld ms: it waited "
                         "for the copy instead of stopping it", (long long)ms);
        pattern_check(b, 122, "after acquire over pageout");
        wait_pools(f, f->client, 32 * MiB, 0, 3000, "acquire over pageout");
        pattern_fill(b, 123);
        OK(gmd_release(f->client, b));

        /* Acquire over an eviction under way: the same; the allocation
         * that wanted the room gets it once the buffer is released. */
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &filler));
        {
                const char *args[] = { "alloc", "32M", "10000", NULL };
                harness_proc *p = harness_track_client(f, args);
                uint64_t deadline = harness_now_ms() + 3000;
                char *out;

                free(read_line(f, p, "connected", 5000));
                while (buffer_row(f->client, gmd_buffer_id(b)).state !=
                       GMD_STATE_MOVING_OUT && harness_now_ms() < deadline)
                        harness_sleep_ms(2);
                expect_row(f->client, gmd_buffer_id(b), GMD_TIER_VRAM,
                           GMD_STATE_MOVING_OUT, "evicted for the allocation");
                t0 = harness_now_ms();
                OK(gmd_acquire(f->client, b, 5000));
                ms = elapsed_since(t0);
                assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
                if (ms > 300)
                        fail_msg("acquire over a 500 ms eviction took %lld ms",
                                 (long long)ms);
                pattern_check(b, 123, "after acquire over eviction");
                pattern_fill(b, 124);
                /* Still waiting: nothing else can make room. */
                harness_sleep_ms(100);
                if (waitpid(p->pid, NULL, WNOHANG) != 0)
                        fail_msg("the allocation ended while b was acquired");
                OK(gmd_release(f->client, b));
                out = finish_ok(f, p, "alloc 32M behind the acquire", 10000);
                if (!strstr(out, "rc 0\n") || !strstr(out, "bytes ok"))
                        fail_msg("the allocation was not served:\n%s", out);
                free(out);
        }
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        OK(gmd_free(f->client, filler));
        filler = NULL;
        OK(gmd_acquire(f->client, b, 5000));
        pattern_check(b, 124, "after its eviction");
        pattern_fill(b, 123);
        OK(gmd_release(f->client, b));

        /* An acquire waits for the swap-in; a pageout arrives meanwhile. */
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        memset(&job, 0, sizeof(job));
        job.client = f->client;
        job.buffer = b;
        job.timeout_ms = 3000;
        t0 = harness_now_ms();
        assert_int_equal(pthread_create(&thread, NULL, acquire_thread, &job), 0);
        {
                uint64_t deadline = harness_now_ms() + 2000;

                while (buffer_row(f->client, gmd_buffer_id(b)).state !=
                       GMD_STATE_MOVING_IN && harness_now_ms() < deadline)
                        harness_sleep_ms(2);
        }
        r = gmd_pageout(f->client, b);
        pthread_join(thread, NULL);
        ms = (int64_t)(job.done_ms - t0);
        print_message("pageout during an acquire's swap-in: pageout %d, acquire "
                      "%d after %lld ms\n", r, job.result, (long long)ms);
        if (job.result == GMD_ETIMEDOUT && ms >= 2900)
                fail_msg("a pageout (answered %d) during an acquire's swap-in left "
                         "the acquire waiting until its 3000 ms deadline: the "
                         "swap-in was cancelled under it (%s)", r,
                         "daemon/core/tiering.c pageout_one -> move_cancel");
        OK(job.result);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 123, "after acquire with a pageout");
        OK(gmd_free(f->client, b));
        wait_pools(f, f->client, 0, 0, 3000, "after free");
        harness_stop(&f->h);
}

/* ---- 6. backing still mapped --------------------------------------------------- */

/* A raw client's released buffer is evicted for another process's
 * allocation, but the client never acks the remap: the old VRAM stays
 * allocated (so the allocation keeps waiting), the buffer shows moving-out;
 * acks with a wrong sequence or buffer change nothing; the right ack frees
 * the VRAM and the allocation is served. Then a buffer paged out by the
 * raw client itself, unacked when the client disconnects: both backings
 * are freed with it. */
static void test_unacked_remap_keeps_backing(void **state)
{
        fixture *f = *state;
        const char *alloc_args[] = { "alloc", "64M", "10000", NULL };
        uint32_t next_id = 2;
        uint64_t id, id2, seq, t_ack;
        harness_proc *p;
        char *out, *line;
        int fds_idle;

        harness_start_small(&f->h, "[daemon]\nlog_level = debug\n"
                                   "[pools]\nhost_limit = 256M\n");
        f->client = harness_client(&f->h, "observer");
        fds_idle = harness_count_fds(f->h.pid);
        raw_hello(&raw, &f->h, "raw-tier");

        id = raw_alloc_release(&raw, &next_id, 8 * MiB, 90);
        expect_pools(f->client, 8 * MiB, 0, "raw buffer");

        /* Pressure from another process evicts it. */
        p = harness_track_client(f, alloc_args);
        free(read_line(f, p, "connected", 5000));
        seq = raw_expect_remap(&raw, id, GMD_TIER_HOST, 8 * MiB, 90);

        harness_sleep_ms(300);
        expect_pools(f->client, 8 * MiB, 8 * MiB, "remap not acked");
        expect_row(f->client, id, GMD_TIER_VRAM, GMD_STATE_MOVING_OUT,
                   "remap not acked");

        /* Wrong sequence, wrong buffer: ignored. */
        raw_ack(&raw, id, seq + 1);
        raw_ack(&raw, id, seq - 1);
        raw_ack(&raw, id + 1000, seq);
        line = harness_wait_log(&f->h, "stale remap ack", 2000);
        if (!line)
                fail_msg("no \"stale remap ack\" in the log:\n%s",
                         harness_read_log(&f->h));
        free(line);
        harness_sleep_ms(100);
        expect_pools(f->client, 8 * MiB, 8 * MiB, "after wrong acks");
        expect_row(f->client, id, GMD_TIER_VRAM, GMD_STATE_MOVING_OUT,
                   "after wrong acks");
        if (harness_log_count(&f->h, "stale remap ack") != 3)
                fail_msg("want 3 stale acks logged; log:\n%s",
                         harness_read_log(&f->h));
        /* The raw client is still connected and in good standing. */
        assert_int_equal(harness_wait_clients(f->client, 3, 1000), 3);

        t_ack = harness_now_ms();
        raw_ack(&raw, id, seq);
        out = finish_ok(f, p, "alloc 64M behind the unacked remap", 10000);
        if (!strstr(out, "rc 0\n") || !strstr(out, "bytes ok"))
                fail_msg("the allocation was not served after the ack:\n%s", out);
        free(out);
        print_message("allocation served %llu ms after the ack\n",
                      (unsigned long long)(harness_now_ms() - t_ack));
        expect_row(f->client, id, GMD_TIER_HOST, GMD_STATE_RESIDENT, "acked");
        wait_pools(f, f->client, 0, 8 * MiB, 3000, "after the ack");
        /* An ack for a move that is over is stale too. */
        raw_ack(&raw, id, seq);
        harness_sleep_ms(50);
        expect_row(f->client, id, GMD_TIER_HOST, GMD_STATE_RESIDENT, "late ack");

        /* A pageout of its own, never acked, then the client leaves. */
        id2 = raw_alloc_release(&raw, &next_id, 4 * MiB, 91);
        raw_pageout(&raw, &next_id, id2, 4 * MiB, 91);
        harness_sleep_ms(100);
        expect_pools(f->client, 4 * MiB, 12 * MiB, "own pageout not acked");
        expect_row(f->client, id2, GMD_TIER_VRAM, GMD_STATE_MOVING_OUT,
                   "own pageout not acked");
        raw_close(&raw);
        wait_pools(f, f->client, 0, 0, 3000, "raw client gone");
        assert_int_equal(harness_wait_fds(f->h.pid, fds_idle, 3000), fds_idle);
        harness_stop(&f->h);
}

/* ---- an answer keeps its place ------------------------------------------------- */

/* Wait until buffer `id` rests on `tier` (status, as the observer sees it). */
static void wait_row(fixture *f, uint64_t id, gmd_tier tier, const char *when)
{
        gmd_buffer_status row;
        uint64_t t0 = harness_now_ms();

        for (;;) {
                row = buffer_row(f->client, id);
                if (row.tier == tier && row.state == GMD_STATE_RESIDENT)
                        return;
                if (harness_now_ms() - t0 > 5000)
                        fail_msg("%s: buffer %llu is %s/%s after 5 s, want %s/"
                                 "resident; log:\n%s", when,
                                 (unsigned long long)id, gmd_tier_name(row.tier),
                                 gmd_state_name(row.state), gmd_tier_name(tier),
                                 harness_read_log(&f->h));
                harness_sleep_ms(20);
        }
}

/* An acquire that waited for its swap-in is answered by the scheduling
 * pass, after the ack that finished the move (daemon/core/answers.h). The
 * raw client acks and, right behind the ack, frees another buffer: it
 * must get the acquire's grant first, then the free's reply, as when the
 * grant was sent from inside the ack's handling, and the granted buffer
 * holds its bytes. */
static void test_grant_keeps_its_place(void **state)
{
        fixture *f = *state;
        Gmd__AcquireRequest acquire = GMD__ACQUIRE_REQUEST__INIT;
        Gmd__BufferRequest free_req = GMD__BUFFER_REQUEST__INIT;
        Gmd__RemapNotify *note;
        uint32_t next_id = 2, acquire_id, free_id;
        uint64_t id, other, seq;
        raw_msg m;
        void *mem;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n");
        f->client = harness_client(&f->h, "observer");
        raw_hello(&raw, &f->h, "raw-order");
        id = raw_alloc_release(&raw, &next_id, 4 * MiB, 94);
        other = raw_alloc_release(&raw, &next_id, 2 * MiB, 95);

        /* Out to host memory. */
        seq = raw_pageout(&raw, &next_id, id, 4 * MiB, 94);
        raw_ack(&raw, id, seq);
        wait_row(f, id, GMD_TIER_HOST, "paged out");

        /* The acquire brings it back: its remap may go out while the copy
         * runs, so its bytes are checked after the grant. */
        acquire_id = next_id++;
        acquire.buffer_id = id;
        acquire.timeout_ms = -1;
        raw_send(&raw, GMD__MSG_TYPE__MSG_ACQUIRE, acquire_id, &acquire.base);
        m = raw_expect(&raw, GMD__MSG_TYPE__MSG_REMAP, 0);
        note = m.msg;
        assert_int_equal(note->buffer_id, id);
        assert_int_equal(note->tier, GMD__TIER__TIER_VRAM);
        assert_int_equal(note->n_segments, 1);
        assert_true(m.fd >= 0);
        seq = note->sequence;
        mem = raw_map(&raw, m.fd, 4 * MiB);
        raw_msg_clear(&m);
        /* Let the copy end, so the ack is what finishes the move. */
        harness_sleep_ms(300);

        free_id = next_id++;
        free_req.buffer_id = other;
        raw_ack(&raw, id, seq);
        raw_send(&raw, GMD__MSG_TYPE__MSG_FREE, free_id, &free_req.base);
        m = raw_recv(&raw, 5000);
        if (m.type != GMD__MSG_TYPE__MSG_OK_REPLY || m.request_id != acquire_id)
                fail_msg("after the ack the raw client got %s (request %u), want "
                         "the acquire's grant (request %u) ahead of the free's "
                         "reply (request %u); log:\n%s",
                         gmd_wire_type_name(m.type), m.request_id, acquire_id,
                         free_id, harness_read_log(&f->h));
        raw_msg_clear(&m);
        m = raw_expect(&raw, GMD__MSG_TYPE__MSG_OK_REPLY, free_id);
        raw_msg_clear(&m);
        pattern_check_mem(mem, 4 * MiB, 94, "granted buffer");
        expect_row(f->client, id, GMD_TIER_VRAM, GMD_STATE_RESIDENT, "granted");
        raw_close(&raw);
        harness_stop(&f->h);
}

/* A prefetch is answered before the swap-in it starts tells its owner to
 * remap: the client reads its packets in order and applies a remap
 * (import and map) before it reads the next one, so a reply behind the
 * remap kept gmd_prefetch, which returns at once, waiting for the map
 * (tiering_handle_prefetch). The swap-in into VRAM kept from the buffer's
 * own pageout sends its remap as the copy starts: right behind the reply. */
static void test_prefetch_answers_first(void **state)
{
        fixture *f = *state;
        Gmd__MoveRequest prefetch = GMD__MOVE_REQUEST__INIT;
        Gmd__RemapNotify *note;
        uint32_t next_id = 2, prefetch_id;
        uint64_t id, seq;
        raw_msg m;
        void *mem;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n");
        f->client = harness_client(&f->h, "observer");
        raw_hello(&raw, &f->h, "raw-prefetch");
        id = raw_alloc_release(&raw, &next_id, 4 * MiB, 96);
        seq = raw_pageout(&raw, &next_id, id, 4 * MiB, 96);
        raw_ack(&raw, id, seq);
        wait_row(f, id, GMD_TIER_HOST, "paged out");

        prefetch_id = next_id++;
        prefetch.n_buffer_ids = 1;
        prefetch.buffer_ids = &id;
        raw_send(&raw, GMD__MSG_TYPE__MSG_PREFETCH, prefetch_id, &prefetch.base);
        m = raw_recv(&raw, 5000);
        if (m.type != GMD__MSG_TYPE__MSG_OK_REPLY || m.request_id != prefetch_id)
                fail_msg("after the prefetch the raw client got %s (request %u), "
                         "want its reply first; log:\n%s",
                         gmd_wire_type_name(m.type), m.request_id,
                         harness_read_log(&f->h));
        raw_msg_clear(&m);
        /* Its bytes may still be copying: checked once it rests in VRAM. */
        m = raw_expect(&raw, GMD__MSG_TYPE__MSG_REMAP, 0);
        note = m.msg;
        assert_int_equal(note->buffer_id, id);
        assert_int_equal(note->tier, GMD__TIER__TIER_VRAM);
        assert_true(m.fd >= 0);
        seq = note->sequence;
        mem = raw_map(&raw, m.fd, 4 * MiB);
        raw_msg_clear(&m);
        raw_ack(&raw, id, seq);
        wait_row(f, id, GMD_TIER_VRAM, "prefetched");
        pattern_check_mem(mem, 4 * MiB, 96, "prefetched buffer");
        raw_close(&raw);
        harness_stop(&f->h);
}

/* ---- quota follows the bytes --------------------------------------------------- */

/* A buffer moved to host memory no longer holds VRAM: the user's
 * vram_quota has room again, and the client's vram/host bytes follow. */
static void test_quota_follows_moves(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL, *b = NULL, *c = NULL;
        gmd_client_status row;
        int r;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[users]\nvram_quota = 32M\n");
        f->client = harness_client(&f->h, "quota");
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &a));
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &b));
        pattern_fill(a, 95);
        assert_int_equal(gmd_alloc(f->client, 2 * MiB, 0, 0, GMD_NO_WAIT, &c),
                         GMD_EQUOTA);
        OK(gmd_release(f->client, a));
        OK(gmd_pageout(f->client, a));
        OK(gmd_wait(f->client, a, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        expect_pools(f->client, 16 * MiB, 16 * MiB, "one out");

        /* 16 MiB of VRAM held, 16 more fit the 32 MiB quota. */
        row = client_row(f->client, getpid());
        r = gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &c);
        if (r != 0 || row.vram_bytes != 16 * MiB || row.host_bytes != 16 * MiB)
                fail_msg("after paging out 16 of its 32 MiB: a 16 MiB allocation "
                         "under a 32 MiB vram_quota gave %d (%s); client status "
                         "vram_bytes %llu host_bytes %llu, want 0 and 16 MiB "
                         "each", r, r ? gmd_last_error() : "",
                         (unsigned long long)row.vram_bytes,
                         (unsigned long long)row.host_bytes);
        OK(gmd_free(f->client, c));
        OK(gmd_free(f->client, a));
        row = client_row(f->client, getpid());
        if (row.vram_bytes != 16 * MiB || row.host_bytes != 0)
                fail_msg("client status after freeing the paged-out buffer: "
                         "vram_bytes %llu host_bytes %llu, want 16 MiB and 0",
                         (unsigned long long)row.vram_bytes,
                         (unsigned long long)row.host_bytes);
        OK(gmd_free(f->client, b));
        expect_pools(f->client, 0, 0, "after free");
        harness_stop(&f->h);
}

/* ---- 7. oversubscription -------------------------------------------------------- */

/* Three processes, each with three 16 MiB buffers: 144 MiB of working sets
 * on a 64 MiB pool. Each runs rounds of acquire, check, rewrite, release;
 * every byte checks after every trip, and nothing is left behind. */
static void test_oversubscription(void **state)
{
        fixture *f = *state;
        static const char *const seeds[] = { "101", "202", "303" };
        harness_proc *p[3];
        int evictions, fds_idle;
        uint64_t t0 = harness_now_ms();

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                   "[swap]\nchunk_size = 4M\n");
        f->client = harness_client(&f->h, "observer");
        fds_idle = harness_count_fds(f->h.pid);
        for (int i = 0; i < 3; i++) {
                const char *args[] = { "rounds", "3", "16M", "6", seeds[i], NULL };

                p[i] = spawn_tier(f, NULL, args);
        }
        for (int i = 0; i < 3; i++) {
                char *out = finish_ok(f, p[i], "rounds 3 16M 6", 30000);
                const char *done = strstr(out, "done rounds 6 bad-words 0 ");

                if (!done || !strstr(done, "errors 0"))
                        fail_msg("worker %d:\n%s", i, out);
                print_message("worker %d: %s", i, done);
                free(out);
        }
        print_message("three workers, 144 MiB on a 64 MiB pool: %llu ms\n",
                      (unsigned long long)(harness_now_ms() - t0));
        wait_pools(f, f->client, 0, 0, 3000, "workers done");
        evictions = harness_log_count(&f->h, "evicting buffer");
        print_message("%d evictions in the daemon's log\n", evictions);
        /* At least 80 MiB had to leave VRAM just to allocate everything. */
        if (evictions < 5)
                fail_msg("only %d evictions logged; log:\n%s", evictions,
                         harness_read_log(&f->h));
        assert_int_equal(harness_wait_fds(f->h.pid, fds_idle, 3000), fds_idle);
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_transitions, setup, teardown),
                cmocka_unit_test_setup_teardown(test_acquire_overtakes_prefetch,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_acquire_preempts_chunks_in_flight,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_acquire_overtakes_other_devices_prefetch,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_deadlines, setup, teardown),
                cmocka_unit_test_setup_teardown(test_eviction_choice, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_client_dies_mid_move, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_cancellations, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_unacked_remap_keeps_backing,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_grant_keeps_its_place,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_prefetch_answers_first, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_quota_follows_moves, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_priority_grace, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_memory_slices, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_memory_slices_off, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_oversubscription, setup,
                                                teardown),
        };

        /* Buffers freed must go back at once for the pool figures checked
         * here: the mapping cache stays off (test_cache covers it), also
         * when the program is run by hand. */
        setenv(GMD_CACHE_ENV, "0", 1);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
