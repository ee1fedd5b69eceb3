/*
 * test_sched_review — shapes of the scheduling where a request that can
 * be served was left waiting, or its timeout said something untrue,
 * against the real gpu-memd (sim backend, one device of 64 MiB in 2 MiB
 * steps, the mapping cache off so a free gives memory straight back):
 *
 *   - a memory slice whose holder waits for memory another process holds
 *     in use does not hold that process's request back from free room:
 *     both waited for each other until the slice passed (four lengths
 *     when the holder was never served), the other's request timing out
 *     with the room it asked for free;
 *   - a request that times out held behind its device's starved waiter
 *     names that waiter (the holder), not the oldest waiter there.
 *
 * Waiting requests run on threads, or in a forked process where another
 * process is needed; the test moves on when the daemon's status or log
 * shows the state it needs, never after a bare sleep.
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpumem.h"
#include "harness.h"
#include "pattern.h"

typedef harness_fixture fixture;

/* Wrong words of `b` against pattern_fill's `seed`: pattern_check fails
 * the test, which a forked process must not do. */
static size_t bad_words(const gmd_buffer *b, uint64_t seed)
{
        const uint64_t *p = gmd_buffer_ptr(b);
        size_t bad = 0;

        for (size_t i = 0; i < gmd_buffer_size(b) / 8; i++)
                bad += p[i] != pattern_word(seed, i);
        return bad;
}

static int setup(void **state)
{
        setenv(GMD_CACHE_ENV, "0", 1);
        return harness_setup(state);
}

/* ---- another process, forked before this one connects ----------------- */

/* The other process: connects, holds 24 MiB in use (filled), says 'h';
 * on a byte from the test asks for 16 MiB (no YIELD) with `timeout_ms`,
 * writes its result (an int), checks what it held, frees all and exits
 * 0 iff every byte checked. */
static void other_main(const char *socket_path, int cmd_fd, int out_fd,
                       int64_t timeout_ms)
{
        gmd_client *c = NULL;
        gmd_buffer *held = NULL, *more = NULL;
        char go;
        int r, bad;

        if (gmd_connect(socket_path, "other", &c) < 0 ||
            gmd_alloc(c, 24 * MiB, 0, 0, GMD_NO_WAIT, &held) < 0)
                _exit(2);
        pattern_fill(held, 71);
        if (write(out_fd, "h", 1) != 1 || read(cmd_fd, &go, 1) != 1)
                _exit(2);
        r = gmd_alloc(c, 16 * MiB, 0, 0, timeout_ms, &more);
        if (r < 0)
                fprintf(stderr, "other: %s\n", gmd_last_error());
        if (write(out_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
                _exit(2);
        bad = bad_words(held, 71) != 0;
        if (more)
                gmd_free(c, more);
        gmd_free(c, held);
        gmd_disconnect(c);
        _exit(bad ? 1 : 0);
}

typedef struct other {
        pid_t pid;
        int cmd_fd;     /* the test writes */
        int out_fd;     /* the test reads */
} other;

static void other_fork(fixture *f, other *o, int64_t timeout_ms)
{
        int cmd[2], out[2];

        assert_int_equal(pipe(cmd), 0);
        assert_int_equal(pipe(out), 0);
        o->pid = fork();
        assert_true(o->pid >= 0);
        if (o->pid == 0) {
                close(cmd[1]);
                close(out[0]);
                other_main(f->h.socket_path, cmd[0], out[1], timeout_ms);
        }
        close(cmd[0]);
        close(out[1]);
        o->cmd_fd = cmd[1];
        o->out_fd = out[0];
}

static void other_read(other *o, void *buf, size_t len)
{
        if (read(o->out_fd, buf, len) != (ssize_t)len)
                fail_msg("the other process said nothing");
}

static int other_finish(other *o)
{
        int status = 0;

        close(o->cmd_fd);
        close(o->out_fd);
        assert_int_equal(waitpid(o->pid, &status, 0), o->pid);
        return harness_exit_code(status);
}

/* (1) This process holds 24 MiB in use and 16 released, the other
 * process 24 in use: the pool is full. This process asks for 24 and gets
 * the device's slice; its own 16 go out for it, and the 8 more it needs
 * are the other's, in use. The other then asks for 16, free: served at
 * once, it finishes and frees, and this process is served after it.
 * Before, the slice held the other's request back from the free room for
 * as long as the slice ran (its holder never served: four lengths, 8 s),
 * while the holder waited for the other's memory in use: the other's
 * request timed out with its 16 MiB free. */
static void test_slice_holder_waiting_on_held_back(void **state)
{
        fixture *f = *state;
        gmd_buffer *used = NULL, *idle = NULL;
        other o;
        harness_waiter w;
        char h;
        int r, code;

        harness_start_small(&f->h, "[limits]\nmemory_slice_ms = 2000\n");
        other_fork(f, &o, 4000);
        other_read(&o, &h, 1);                  /* it holds 24 MiB */
        f->client = harness_client(&f->h, "holder");
        OK(gmd_alloc(f->client, 24 * MiB, 0, 0, GMD_NO_WAIT, &used));
        pattern_fill(used, 72);
        OK(gmd_alloc(f->client, 16 * MiB, 0, 0, GMD_NO_WAIT, &idle));
        OK(gmd_release(f->client, idle));       /* the pool is full */
        harness_waiter_start(&w, f->client, 24 * MiB, 20000);
        free(harness_wait_log(&f->h, "slice of its memory to", 5000));
        /* Its own idle 16 MiB went out for it: 16 free. */
        if (harness_wait_vram_used(f->client, 0, 48 * MiB, 5000) != 48 * MiB)
                fail_msg("the holder's idle buffer did not go out; log:\n%s",
                         harness_read_log(&f->h));
        assert_int_equal(write(o.cmd_fd, "g", 1), 1);
        other_read(&o, &r, sizeof(r));
        if (r != 0)
                fail_msg("the other's 16 MiB, free: %d; daemon log:\n%s", r,
                         harness_read_log(&f->h));
        code = other_finish(&o);
        assert_int_equal(code, 0);
        assert_int_equal(pthread_join(w.thread, NULL), 0);
        if (w.r != 0)
                fail_msg("the holder's 24 MiB: %d %s; daemon log:\n%s", w.r,
                         w.error, harness_read_log(&f->h));
        pattern_check(used, 72, "the buffer the holder held");
        OK(gmd_free(f->client, w.buffer));
        OK(gmd_free(f->client, used));
        OK(gmd_free(f->client, idle));
}

/* (2) An older request that no room can be made for (48 MiB beside 24 in
 * use) holds nobody back; a younger one for 40 MiB, which an idle buffer
 * moving out (slowly: [sim] copy_rate) will make room for, holds the
 * device, and a 2 MiB request times out behind it. Its timeout names the
 * 40 MiB request and its client, the holder; before, it named the oldest
 * waiter there, the 48 MiB one, which held nothing back. */
static void test_timeout_names_holder(void **state)
{
        fixture *f = *state;
        gmd_client *inuse, *old, *big, *small;
        gmd_buffer *held = NULL, *idle = NULL, *b = NULL;
        harness_waiter wo, wb;
        int r;

        harness_start_small(&f->h, "[limits]\nwait_hold_ms = 0\n"
                            "[sim]\ncopy_rate = 8M\n");
        inuse = harness_client(&f->h, "inuse");
        old = harness_client(&f->h, "old");
        big = harness_client(&f->h, "big");
        small = harness_client(&f->h, "small");
        OK(gmd_alloc(inuse, 24 * MiB, 0, 0, GMD_NO_WAIT, &held));
        OK(gmd_alloc(inuse, 32 * MiB, 0, 0, GMD_NO_WAIT, &idle));
        OK(gmd_release(inuse, idle));           /* evictable; 8 MiB free */
        harness_waiter_start(&wo, old, 48 * MiB, 8000);
        harness_wait_waiting(&f->h, inuse, "old", 1);
        harness_waiter_start(&wb, big, 40 * MiB, 20000);
        harness_wait_waiting(&f->h, inuse, "big", 1);
        r = gmd_alloc(small, 2 * MiB, 0, 0, 1000, &b);
        assert_int_equal(r, GMD_ETIMEDOUT);
        if (!strstr(gmd_last_error(), "held behind") ||
            !strstr(gmd_last_error(), "request for 40 MiB") ||
            !strstr(gmd_last_error(), "big") ||
            strstr(gmd_last_error(), "48 MiB"))
                fail_msg("the timeout does not name the holder: %s",
                         gmd_last_error());
        assert_int_equal(pthread_join(wb.thread, NULL), 0);
        if (wb.r != 0)
                fail_msg("the 40 MiB request: %d %s", wb.r, wb.error);
        OK(gmd_free(big, wb.buffer));
        OK(gmd_free(inuse, held));              /* room for the old one */
        assert_int_equal(pthread_join(wo.thread, NULL), 0);
        if (wo.r != 0)
                fail_msg("the 48 MiB request: %d %s", wo.r, wo.error);
        OK(gmd_free(old, wo.buffer));
        OK(gmd_free(inuse, idle));
        gmd_disconnect(small);
        gmd_disconnect(big);
        gmd_disconnect(old);
        gmd_disconnect(inuse);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, harness_teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                TEST(test_slice_holder_waiting_on_held_back),
                TEST(test_timeout_names_holder),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
