/*
 * test_inuse — no write the API allows is ever lost to a move. A buffer
 * its owner holds (allocated or acquired, not released since) may be
 * written at any moment, by the owner's threads on sim or by its kernels
 * on a GPU, so no copy of it can be consistent: the daemon moves a buffer
 * only while it is released, SPILLABLE ones included. A SPILLABLE buffer
 * may be *placed* on host memory while in use (an allocation or an
 * acquire that finds no VRAM) and is used there, zero-copy, but it is
 * never copied anywhere while held.
 *
 * Each test runs the real daemon (sim, one 64 MiB device) with its copies
 * slowed to 256 MB/s ([sim] copy_rate), so that a move takes long enough
 * for a writer to overtake it. A writer thread writes every word of the
 * buffer exactly once, slowly, with a word pattern (pattern.h), while
 * another thread asks for moves; afterwards every word must hold what was
 * written. Writing each word once matters: a writer that went over the
 * buffer again would overwrite what a move lost and hide it. The threads
 * only record what they saw; the main thread checks (cmocka's failures
 * jump, which only the test's own thread may do).
 *
 *   1. gmd_pageout (one buffer, and all) while the owner writes a 64 MiB
 *      SPILLABLE buffer it holds in VRAM: refused with GMD_EBUSY, nothing
 *      moves, nothing is lost; another client's allocation that needs its
 *      room does not evict it either.
 *   2. The same buffer paged out while released, then held on host
 *      memory: written there while gmd_prefetch is asked for (refused, or
 *      skipped for "all"), every write is still there.
 *   3. A writer that takes part: acquire, write a slice, release, over and
 *      over, while pageouts and waits run all the time. Moves happen only
 *      between the leases, and every slice is intact at the end.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#define INUSE_CONFIG "[pools]\nhost_limit = 256M\n[swap]\nchunk_size = 2M\n" \
                     "[sim]\ncopy_rate = 256M\n"

/* ---- a slow writer --------------------------------------------------------- */

/* Writes pattern `seed` over `size` bytes at `mem`, `step` bytes at a time
 * with `pause_ms` between steps, each word once; `steps_done` says how far
 * it is. */
typedef struct writer {
        uint64_t *mem;
        uint64_t size, step, seed;
        int pause_ms;
        atomic_uint steps_done;
        pthread_t thread;
} writer;

static void *writer_run(void *arg)
{
        writer *w = arg;
        uint64_t words = w->step / 8;

        for (uint64_t s = 0; s < w->size / w->step; s++) {
                volatile uint64_t *p = w->mem + s * words;

                for (uint64_t i = 0; i < words; i++)
                        p[i] = pattern_word(w->seed, s * words + i);
                atomic_fetch_add(&w->steps_done, 1);
                harness_sleep_ms(w->pause_ms);
        }
        return NULL;
}

static void writer_start(writer *w, gmd_buffer *b, uint64_t seed, uint64_t step,
                         int pause_ms)
{
        *w = (writer){ .mem = gmd_buffer_ptr(b), .size = gmd_buffer_size(b),
                       .step = step, .seed = seed, .pause_ms = pause_ms };
        atomic_init(&w->steps_done, 0);
        assert_int_equal(pthread_create(&w->thread, NULL, writer_run, w), 0);
}

static void writer_wait_steps(writer *w, unsigned steps)
{
        while (atomic_load(&w->steps_done) < steps)
                harness_sleep_ms(1);
}

/* Bytes of `b` that do not hold pattern `seed`; the first bad offset in
 * *ret_first. */
static uint64_t bytes_wrong(const gmd_buffer *b, uint64_t seed, uint64_t *ret_first)
{
        const uint64_t *p = gmd_buffer_ptr(b);
        uint64_t bad = 0;

        *ret_first = 0;
        for (uint64_t i = 0; i < gmd_buffer_size(b) / 8; i++) {
                if (p[i] == pattern_word(seed, i))
                        continue;
                if (!bad)
                        *ret_first = i * 8;
                bad += 8;
        }
        return bad;
}

static void expect_all_written(const gmd_buffer *b, uint64_t seed, const char *what)
{
        uint64_t first, bad = bytes_wrong(b, seed, &first);

        if (bad)
                fail_msg("%s: %.1f MiB of %llu MiB written do not read back (the "
                         "first at byte %llu): writes were lost", what,
                         (double)bad / MiB,
                         (unsigned long long)(gmd_buffer_size(b) / MiB),
                         (unsigned long long)first);
}

/* ---- what the other thread asks for ---------------------------------------- */

typedef struct request {
        int result, wait_result;
        char error[256];
} request;

static void request_note(request *q, int r)
{
        q->result = r;
        snprintf(q->error, sizeof(q->error), "%s", r ? gmd_last_error() : "");
}

/* Pages out one buffer (b) and then all of the client's (NULL), each
 * followed by a wait, and has another client ask for room that only an
 * eviction of b could give — once the writer is `after` steps in. */
typedef struct pager {
        gmd_client *client, *other;
        gmd_buffer *buffer;
        writer *writer;
        unsigned after;
        request one, all, alloc;
        pthread_t thread;
} pager;

static void *pager_run(void *arg)
{
        pager *p = arg;
        gmd_buffer *none = NULL;

        writer_wait_steps(p->writer, p->after);
        request_note(&p->one, gmd_pageout(p->client, p->buffer));
        p->one.wait_result = gmd_wait(p->client, p->buffer, 10000);
        request_note(&p->all, gmd_pageout(p->client, NULL));
        p->all.wait_result = gmd_wait(p->client, NULL, 10000);
        request_note(&p->alloc, gmd_alloc(p->other, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                          300, &none));
        if (none)
                gmd_free(p->other, none);
        return NULL;
}

/* ---- 1. pageout while the owner writes --------------------------------------- */

static void test_pageout_while_writing(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *b = NULL;
        writer w;
        pager p;

        harness_start_small(&f->h, INUSE_CONFIG);
        f->client = harness_client(&f->h, "writer");
        f->other = harness_client(&f->h, "other");
        OK(gmd_alloc(f->client, 64 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &b));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);

        /* 1 MiB every 12 ms: the whole buffer in about a second, slower
         * than a 256 MB/s copy, which would overtake the writer. */
        writer_start(&w, b, 1, MiB, 12);
        p = (pager){ .client = f->client, .other = f->other, .buffer = b,
                     .writer = &w, .after = 4 };
        assert_int_equal(pthread_create(&p.thread, NULL, pager_run, &p), 0);
        pthread_join(p.thread, NULL);
        pthread_join(w.thread, NULL);

        /* What the writer wrote first, then how the requests were answered. */
        expect_all_written(b, 1, "64 MiB SPILLABLE, written while gmd_pageout ran");
        if (p.one.result != GMD_EBUSY || !strstr(p.one.error, "release"))
                fail_msg("gmd_pageout of a SPILLABLE buffer in use = %d (%s), want "
                         "GMD_EBUSY saying to release it first", p.one.result,
                         p.one.error);
        assert_int_equal(p.one.wait_result, 0);
        if (p.all.result != 0 || p.all.wait_result != 0)
                fail_msg("gmd_pageout of all = %d, its wait %d (%s)", p.all.result,
                         p.all.wait_result, p.all.error);
        if (p.alloc.result != GMD_ETIMEDOUT && p.alloc.result != GMD_ENOMEM)
                fail_msg("another client's 8 MiB with the pool full of a buffer in "
                         "use = %d (%s), want no room", p.alloc.result,
                         p.alloc.error);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        assert_int_equal(harness_buffer_status(f->client, gmd_buffer_id(b)).tier,
                         GMD_TIER_VRAM);
        assert_int_equal(harness_host_pool(f->client).used, 0);

        /* ---- 2. held on host memory, written there, prefetch asked for ---- */
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 10000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        OK(gmd_acquire(f->client, b, 0));       /* used where it rests */
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        pattern_check(b, 1, "paged out while released");

        /* The writer runs on this thread's buffer: checks come after it
         * is joined. */
        writer_start(&w, b, 2, 2 * MiB, 8);
        writer_wait_steps(&w, 2);
        request_note(&p.one, gmd_prefetch(f->client, b));
        p.one.wait_result = gmd_wait(f->client, b, 10000);
        request_note(&p.all, gmd_prefetch(f->client, NULL));   /* skips it */
        p.all.wait_result = gmd_wait(f->client, NULL, 10000);
        pthread_join(w.thread, NULL);
        expect_all_written(b, 2, "64 MiB SPILLABLE on host, written while "
                           "gmd_prefetch ran");
        if (p.one.result != GMD_EBUSY)
                fail_msg("gmd_prefetch of a SPILLABLE buffer in use on host = %d "
                         "(%s), want GMD_EBUSY", p.one.result, p.one.error);
        if (p.one.wait_result || p.all.result || p.all.wait_result)
                fail_msg("wait %d, prefetch of all %d (%s), its wait %d",
                         p.one.wait_result, p.all.result, p.all.error,
                         p.all.wait_result);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);

        OK(gmd_free(f->client, b));
        harness_stop(&f->h);
}

/* ---- 3. a writer that takes part ------------------------------------------- */

typedef struct leaser {
        gmd_client *client;
        gmd_buffer *buffer;
        atomic_bool done;
        int failed;                 /* the first call that failed, or 0 */
        char error[256];
        pthread_t thread;
} leaser;

/* Acquire, write one 1 MiB slice with pattern 3 and hold it a while,
 * release, rest; every slice. */
static void *leaser_run(void *arg)
{
        leaser *l = arg;
        uint64_t *mem = gmd_buffer_ptr(l->buffer), words = MiB / 8;

        for (uint64_t s = 0; s < gmd_buffer_size(l->buffer) / MiB && !l->failed; s++) {
                int r = gmd_acquire(l->client, l->buffer, 10000);

                if (r < 0) {
                        l->failed = r;
                        snprintf(l->error, sizeof(l->error), "acquire: %s",
                                 gmd_last_error());
                        break;
                }
                for (uint64_t i = 0; i < words; i++)
                        mem[s * words + i] = pattern_word(3, s * words + i);
                harness_sleep_ms(10);
                r = gmd_release(l->client, l->buffer);
                if (r < 0) {
                        l->failed = r;
                        snprintf(l->error, sizeof(l->error), "release: %s",
                                 gmd_last_error());
                }
                harness_sleep_ms(10);
        }
        atomic_store(&l->done, true);
        return NULL;
}

static void test_moves_between_leases(void **state)
{
        harness_fixture *f = *state;
        gmd_buffer *b = NULL;
        unsigned pageouts = 0, busy = 0;
        char error[300] = "";
        leaser l = { 0 };

        harness_start_small(&f->h, INUSE_CONFIG);
        f->client = harness_client(&f->h, "leaser");
        OK(gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_SPILLABLE, GMD_NO_WAIT, &b));
        memset(gmd_buffer_ptr(b), 0, 16 * MiB);
        OK(gmd_release(f->client, b));

        l.client = f->client;
        l.buffer = b;
        atomic_init(&l.done, false);
        assert_int_equal(pthread_create(&l.thread, NULL, leaser_run, &l), 0);
        /* Failures are told after the writer is joined: it uses the
         * client the teardown disconnects. */
        while (!atomic_load(&l.done) && !error[0]) {
                int r = gmd_pageout(f->client, b);

                if (r == 0) {
                        pageouts++;
                } else if (r == GMD_EBUSY) {
                        busy++;
                        harness_sleep_ms(1);    /* held: try again soon */
                } else {
                        snprintf(error, sizeof(error), "gmd_pageout between "
                                 "leases = %d (%s)", r, gmd_last_error());
                }
                r = gmd_wait(f->client, b, 10000);
                if (r != 0 && !error[0])
                        snprintf(error, sizeof(error), "gmd_wait = %d (%s)", r,
                                 gmd_last_error());
        }
        pthread_join(l.thread, NULL);
        if (error[0])
                fail_msg("%s", error);
        if (l.failed)
                fail_msg("the writer's %s", l.error);
        /* Moves must have happened between the leases, or the test proved
         * nothing; how many pageouts met a lease is up to the timing. */
        if (!pageouts)
                fail_msg("no pageout started in %u tries", busy);
        print_message("%u pageouts started between leases, %u refused during "
                      "one\n", pageouts, busy);
        OK(gmd_acquire(f->client, b, 10000));
        expect_all_written(b, 3, "16 MiB SPILLABLE written in leases between "
                           "pageouts");
        OK(gmd_free(f->client, b));
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_pageout_while_writing),
                HARNESS_TEST(test_moves_between_leases),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
