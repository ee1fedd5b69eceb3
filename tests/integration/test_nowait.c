/*
 * test_nowait — the calls that send without waiting for the daemon's
 * answer (gmd_release_after_nowait, gmd_pageout_nowait,
 * gmd_prefetch_nowait) and gmd_flush, against the real gpu-memd (sim
 * backend, 64 MiB in 2 MiB steps): a refusal comes back from the next
 * flush, once, with the call, the buffer and the daemon's words; the
 * daemon acts on them in the order they were sent, so a waiting call
 * after them sees their effect and the bytes come back intact; a flush
 * with nothing sent returns at once; a daemon that stops answering makes
 * a bounded flush time out, and one that dies makes it return the
 * connection's error (restart recovery off: $GPU_MEMD_RECONNECT_S=0); gmd_disconnect with answers still owed neither
 * hangs nor leaks (the fixture checks fds; the sanitizer build, memory).
 * gmd_acquire_start returns before the swap-in it asks for is over,
 * gmd_acquire_finish waits for it and leaves the buffer acquired with its
 * bytes; in between the buffer's other lease calls are GMD_EBUSY, and
 * gmd_free and gmd_disconnect hear the answer first.
 *
 * The test process is the client. The mapping cache is on (as shipped),
 * so the test of a release sent without waiting also checks that the
 * buffer then counts as released: gmd_free gives it back, not parks it.
 */
#include <errno.h>
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
#include "harness.h"
#include "pattern.h"

typedef harness_fixture fixture;

static int setup(void **state)
{
        unsetenv(GMD_CACHE_ENV);
        unsetenv(GMD_CACHE_LIMIT_ENV);
        return harness_setup(state);
}

/* gmd_last_error() must hold every one of the NULL-terminated needles. */
static void expect_error_words(const char *when, ...)
{
        const char *text = gmd_last_error(), *needle;
        va_list ap;

        va_start(ap, when);
        while ((needle = va_arg(ap, const char *)))
                if (!strstr(text, needle))
                        fail_msg("%s: gmd_last_error() is '%s', without '%s'",
                                 when, text, needle);
        va_end(ap);
}

static void expect_flush(gmd_client *c, int64_t timeout_ms, int want,
                         const char *when)
{
        int r = gmd_flush(c, timeout_ms);

        if (r != want)
                fail_msg("%s: gmd_flush = %d (%s), want %d", when, r,
                         r ? gmd_last_error() : "", want);
}

static gmd_buffer_status row_of(gmd_client *c, const gmd_buffer *b)
{
        return harness_buffer_status(c, gmd_buffer_id(b));
}

/* ---- refusals come back from the flush --------------------------------- */

/* A pageout of a buffer its owner holds is sent, returns 0, and the
 * daemon's GMD_EBUSY comes back from the flush with the call's name, the
 * buffer and the daemon's words; once: the next flush has nothing. */
static void test_refused_pageout_at_flush(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        char name[32];

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "nowait");
        OK(gmd_alloc(f->client, 4 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b));

        OK(gmd_pageout_nowait(f->client, b));   /* acquired: refused later */
        expect_flush(f->client, 5000, GMD_EBUSY, "pageout of a held buffer");
        snprintf(name, sizeof(name), "buffer %llu",
                 (unsigned long long)gmd_buffer_id(b));
        expect_error_words("pageout of a held buffer", "gmd_pageout_nowait",
                           name, "acquire", (const char *)NULL);
        expect_flush(f->client, 5000, 0, "the error is told once");
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);

        /* A release the daemon refuses (not acquired): named likewise. */
        OK(gmd_release(f->client, b));
        OK(gmd_release_after_nowait(f->client, b, NULL));
        expect_flush(f->client, -1, GMD_EBUSY, "release of a released buffer");
        expect_error_words("release of a released buffer",
                           "gmd_release_after_nowait", name, "not acquired",
                           (const char *)NULL);
        OK(gmd_free(f->client, b));
}

/* The first error of a stretch is the one told: a refused prefetch, then
 * a refused pageout, then one that goes through. */
static void test_first_error_kept(void **state)
{
        fixture *f = *state;
        gmd_buffer *held = NULL, *pinned = NULL;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "nowait");
        OK(gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &held));
        OK(gmd_alloc(f->client, 2 * MiB, 0, GMD_ALLOC_PIN_VRAM, 0, &pinned));

        OK(gmd_prefetch_nowait(f->client, pinned));     /* -EINVAL */
        OK(gmd_pageout_nowait(f->client, held));        /* GMD_EBUSY */
        OK(gmd_prefetch_nowait(f->client, NULL));       /* fine: skips */
        expect_flush(f->client, 5000, -EINVAL, "three requests");
        expect_error_words("three requests", "gmd_prefetch_nowait", "PIN_VRAM",
                           (const char *)NULL);
        expect_flush(f->client, 5000, 0, "after the told one");
        OK(gmd_free(f->client, held));
        OK(gmd_free(f->client, pinned));
}

/* A pageout the host pool cannot take: GMD_ENOMEM at the flush, in the
 * daemon's words ([pools] host_limit), the buffer left in VRAM. */
static void test_host_full_at_flush(void **state)
{
        fixture *f = *state;
        gmd_buffer *a, *b;

        harness_start_small(&f->h, "[pools]\nhost_limit = 4M\nhost_stock = 0\n");
        f->client = harness_client(&f->h, "nowait");
        a = harness_released_buffer(f->client, 4 * MiB, 1);
        b = harness_released_buffer(f->client, 4 * MiB, 2);

        OK(gmd_pageout_nowait(f->client, a));
        OK(gmd_pageout_nowait(f->client, b));
        expect_flush(f->client, 5000, GMD_ENOMEM, "host pool full");
        expect_error_words("host pool full", "gmd_pageout_nowait", "host_limit",
                           (const char *)NULL);
        OK(gmd_wait(f->client, NULL, 5000));
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_HOST);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        OK(gmd_acquire(f->client, a, 5000));
        OK(gmd_acquire(f->client, b, 5000));
        pattern_check(a, 1, "paged out and back");
        pattern_check(b, 2, "left in VRAM");
        OK(gmd_free(f->client, a));
        OK(gmd_free(f->client, b));
}

/* ---- order ------------------------------------------------------------- */

/* release, pageout, prefetch without waiting, then a waiting acquire:
 * the daemon acts on them in the order sent (a pageout before its release
 * would be refused, GMD_EBUSY), and the acquire, answered after them,
 * finds the bytes intact. Then release and pageout again, and a waiting
 * gmd_wait, sent after them, sees the buffer on host memory. */
static void test_order_then_acquire(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;

        harness_start_small(&f->h, "[sim]\ncopy_rate = 400M\n"
                            "[swap]\nchunk_size = 1M\n");
        f->client = harness_client(&f->h, "nowait");
        OK(gmd_alloc(f->client, 8 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b));
        pattern_fill(b, 7);

        for (int round = 0; round < 3; round++) {
                OK(gmd_release_after_nowait(f->client, b, NULL));
                OK(gmd_pageout_nowait(f->client, b));
                OK(gmd_prefetch_nowait(f->client, b));
                OK(gmd_acquire(f->client, b, 5000));
                assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
                pattern_check(b, 7, "after release, pageout, prefetch, acquire");
                assert_true(row_of(f->client, b).acquired);
        }
        expect_flush(f->client, 5000, 0, "nothing refused");

        OK(gmd_release_after_nowait(f->client, b, NULL));
        OK(gmd_pageout_nowait(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        expect_flush(f->client, 0, 0, "answered before the wait's answer");
        OK(gmd_acquire(f->client, b, 5000));
        pattern_check(b, 7, "after the pageout the wait saw");
        OK(gmd_free(f->client, b));
}

/* A release sent without waiting counts as done at once: gmd_free of the
 * buffer right after gives it back to the daemon instead of parking it
 * in the cache, as after gmd_release_after. */
static void test_release_is_at_once(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        gmd_status *s;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "nowait");
        OK(gmd_alloc(f->client, 4 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b));
        OK(gmd_release_after_nowait(f->client, b, NULL));
        OK(gmd_free(f->client, b));
        s = harness_status(f->client);
        assert_int_equal(s->total_buffers, 0);
        assert_int_equal(s->total_used, 0);
        gmd_status_free(s);
        expect_flush(f->client, 5000, 0, "release then free");
}

/* ---- acquire in two halves --------------------------------------------- */

/* A 16 MiB buffer on host memory, its swap-in at 64 MB/s (~250 ms): the
 * start returns long before, the finish when the bytes are back. */
static void test_acquire_start_finish(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        uint64_t t0, started, finished;
        gmd_status *s;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                            "[sim]\ncopy_rate = 64M\n");
        f->client = harness_client(&f->h, "acquire-start");
        OK(gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b));
        pattern_fill(b, 21);
        OK(gmd_release(f->client, b));
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);

        t0 = harness_now_ms();
        OK(gmd_acquire_start(f->client, b, 5000, GMD_ACQUIRE_READ_ONLY));
        started = harness_now_ms() - t0;
        /* Meanwhile the buffer's lease is the started acquire's. */
        assert_int_equal(gmd_acquire(f->client, b, 0), GMD_EBUSY);
        expect_error_words("busy acquire", "gmd_acquire_finish",
                           (const char *)NULL);
        assert_int_equal(gmd_acquire_start(f->client, b, 0, 0), GMD_EBUSY);
        assert_int_equal(gmd_release(f->client, b), GMD_EBUSY);
        assert_int_equal(gmd_release_after_nowait(f->client, b, NULL),
                         GMD_EBUSY);
        OK(gmd_acquire_finish(f->client, b));
        finished = harness_now_ms() - t0;
        if (started > 100 || finished < 150)
                fail_msg("start took %llu ms, start to finish %llu ms: want "
                         "the start at once, the finish after the ~250 ms "
                         "swap-in", (unsigned long long)started,
                         (unsigned long long)finished);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        assert_true(row_of(f->client, b).acquired);
        pattern_check(b, 21, "after gmd_acquire_finish");
        /* Finished: nothing to finish again; the lease is an ordinary one. */
        assert_int_equal(gmd_acquire_finish(f->client, b), -EINVAL);
        expect_error_words("finish twice", "gmd_acquire_start",
                           (const char *)NULL);
        assert_int_equal(gmd_acquire(f->client, b, 0), GMD_EBUSY);
        OK(gmd_release(f->client, b));

        /* Refused by the daemon: the finish says so. */
        OK(gmd_acquire(f->client, b, 5000));
        OK(gmd_acquire_start(f->client, b, 0, 0));
        assert_int_equal(gmd_acquire_finish(f->client, b), GMD_EBUSY);
        OK(gmd_release(f->client, b));

        /* gmd_free with an acquire started: it hears the answer first,
         * and the buffer, acquired by then, goes to the cache of idle
         * mappings, from which the next allocation of its kind takes it. */
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        OK(gmd_acquire_start(f->client, b, 5000, 0));
        OK(gmd_free(f->client, b));
        b = NULL;
        OK(gmd_alloc(f->client, 16 * MiB, 0, GMD_ALLOC_SWAPPABLE, 0, &b));
        s = harness_status(f->client);
        assert_int_equal(s->total_buffers, 1);
        gmd_status_free(s);
        OK(gmd_free(f->client, b));
        expect_flush(f->client, 5000, 0, "after the two-half acquires");
}

/* An acquire started and never finished when the client disconnects, its
 * swap-in still copying: no hang, no fd or record left (fixture, ASan). */
static void test_disconnect_with_acquire_started(void **state)
{
        fixture *f = *state;
        gmd_buffer *b;
        uint64_t t0;

        harness_start_small(&f->h, "[pools]\nhost_limit = 256M\n"
                            "[sim]\ncopy_rate = 64M\n");
        f->client = harness_client(&f->h, "acquire-start-gone");
        b = harness_released_buffer(f->client, 16 * MiB, 22);
        OK(gmd_pageout(f->client, b));
        OK(gmd_wait(f->client, b, 5000));
        OK(gmd_acquire_start(f->client, b, 5000, 0));
        t0 = harness_now_ms();
        f->client = gmd_disconnect(f->client);
        assert_true(harness_now_ms() - t0 < 2000);
        f->client = harness_client(&f->h, "after");
        assert_int_equal(harness_wait_clients(f->client, 1, 5000), 1);
}

/* ---- flush ------------------------------------------------------------- */

/* Nothing sent: 0 at once, whatever the timeout. Bad arguments: at once,
 * nothing sent. */
static void test_flush_nothing(void **state)
{
        fixture *f = *state;
        uint64_t t0;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "nowait");
        t0 = harness_now_ms();
        expect_flush(f->client, -1, 0, "nothing sent, no bound");
        expect_flush(f->client, 0, 0, "nothing sent, no wait");
        expect_flush(f->client, 5000, 0, "nothing sent, 5 s");
        assert_true(harness_now_ms() - t0 < 1000);

        assert_int_equal(gmd_flush(NULL, 0), -EINVAL);
        assert_int_equal(gmd_release_after_nowait(f->client, NULL, NULL), -EINVAL);
        expect_error_words("no buffer", "gmd_release_after_nowait",
                           (const char *)NULL);
        assert_int_equal(gmd_pageout_nowait(NULL, NULL), -EINVAL);
        assert_int_equal(gmd_prefetch_nowait(NULL, NULL), -EINVAL);
        expect_flush(f->client, 0, 0, "after local errors");
}

/* A daemon that stops answering: the request is sent (0), a bounded flush
 * times out saying how many are owed; once the daemon is dead the flush
 * returns the connection's error, and so does every nowait call. */
static void test_flush_after_daemon_died(void **state)
{
        fixture *f = *state;
        gmd_buffer *b;
        int status;

        harness_start_small(&f->h, NULL);
        /* A daemon killed is one that may come back: without this the
         * client would wait for it (restart recovery, gmd_connect). */
        setenv(GMD_RECONNECT_ENV, "0", 1);
        f->client = harness_client(&f->h, "nowait");
        unsetenv(GMD_RECONNECT_ENV);
        b = harness_released_buffer(f->client, 4 * MiB, 3);

        assert_int_equal(kill(f->h.pid, SIGSTOP), 0);
        OK(gmd_pageout_nowait(f->client, b));
        expect_flush(f->client, 200, GMD_ETIMEDOUT, "daemon stopped");
        expect_error_words("daemon stopped", "unanswered", (const char *)NULL);

        assert_int_equal(kill(f->h.pid, SIGKILL), 0);
        assert_int_equal(waitpid(f->h.pid, &status, 0), f->h.pid);
        f->h.pid = 0;
        expect_flush(f->client, 5000, GMD_ECONN, "daemon dead");
        expect_error_words("daemon dead", "gpu-memd", "connection",
                           (const char *)NULL);
        expect_flush(f->client, 0, GMD_ECONN, "still dead");
        assert_int_equal(gmd_pageout_nowait(f->client, b), GMD_ECONN);
        assert_int_equal(gmd_prefetch_nowait(f->client, NULL), GMD_ECONN);
        assert_int_equal(gmd_release_after_nowait(f->client, b, NULL), GMD_ECONN);
        assert_int_equal(gmd_free(f->client, b), GMD_ECONN);
}

/* A flush waiting without bound is woken by the connection's death. */
static void test_flush_woken_by_death(void **state)
{
        fixture *f = *state;
        gmd_buffer *b;
        pid_t killer;

        harness_start_small(&f->h, NULL);
        setenv(GMD_RECONNECT_ENV, "0", 1);     /* as above */
        f->client = harness_client(&f->h, "nowait");
        unsetenv(GMD_RECONNECT_ENV);
        b = harness_released_buffer(f->client, 4 * MiB, 4);

        assert_int_equal(kill(f->h.pid, SIGSTOP), 0);
        OK(gmd_pageout_nowait(f->client, b));
        killer = fork();
        assert_true(killer >= 0);
        if (killer == 0) {
                /* Only async-signal-safe calls: the parent has threads. */
                usleep(200 * 1000);
                _exit(kill(f->h.pid, SIGKILL) == 0 ? 0 : 1);
        }
        expect_flush(f->client, -1, GMD_ECONN, "flush while the daemon dies");
        assert_int_equal(waitpid(killer, NULL, 0), killer);
        assert_int_equal(waitpid(f->h.pid, NULL, 0), f->h.pid);
        f->h.pid = 0;
        assert_int_equal(gmd_free(f->client, b), GMD_ECONN);
}

/* ---- disconnect -------------------------------------------------------- */

/* gmd_disconnect with many answers owed: by a daemon that does not read
 * (stopped), and by one that answers while the client goes. Neither hangs;
 * no fd stays (the fixture checks), no record leaks (sanitizer build). */
static void test_disconnect_with_owed_answers(void **state)
{
        fixture *f = *state;
        gmd_buffer *b;
        uint64_t t0;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "nowait");
        b = harness_released_buffer(f->client, 4 * MiB, 5);
        for (int i = 0; i < 200; i++) {
                OK(gmd_pageout_nowait(f->client, b));
                OK(gmd_prefetch_nowait(f->client, b));
        }
        t0 = harness_now_ms();
        f->client = gmd_disconnect(f->client);
        assert_true(harness_now_ms() - t0 < 2000);

        f->client = harness_client(&f->h, "nowait-stopped");
        b = harness_released_buffer(f->client, 4 * MiB, 6);
        assert_int_equal(kill(f->h.pid, SIGSTOP), 0);
        for (int i = 0; i < 50; i++)
                OK(gmd_prefetch_nowait(f->client, b));
        t0 = harness_now_ms();
        f->client = gmd_disconnect(f->client);
        assert_true(harness_now_ms() - t0 < 2000);
        assert_int_equal(kill(f->h.pid, SIGCONT), 0);

        /* The daemon took both disconnections in its stride. */
        f->client = harness_client(&f->h, "after");
        assert_int_equal(harness_wait_clients(f->client, 1, 5000), 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_refused_pageout_at_flush,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_first_error_kept,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_host_full_at_flush,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_order_then_acquire,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_release_is_at_once,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_flush_nothing,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_flush_after_daemon_died,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_flush_woken_by_death,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_acquire_start_finish,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_disconnect_with_acquire_started,
                                                setup, harness_teardown),
                cmocka_unit_test_setup_teardown(test_disconnect_with_owed_answers,
                                                setup, harness_teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
