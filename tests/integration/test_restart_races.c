/*
 * test_restart_races — one client call cut by a kill of gpu-memd between
 * the client's change of state and the daemon's, made on purpose: the
 * daemon is stopped (SIGSTOP) so the request goes out and is never read,
 * or a slow copy ([sim] copy_rate) holds a move half done, then SIGKILL
 * and a new daemon from the same keeper. test_restart's kills land at
 * random; these land where the record and the client disagree, one call
 * at a time: an allocation, a release, an acquire (in VRAM and paged
 * out), a pageout, a prefetch (SWAPPABLE and SPILLABLE), a free of a
 * buffer on host memory, a plan report, the calls that do not wait, a
 * swap-out or swap-in cut in its copy, and an answer or a remap the
 * daemon sent that its owner reads only after the daemon died. For each: the call's result, the restore-done line (every
 * buffer taken back, or freed by its owner, none lost), every byte, and
 * the daemon's accounting against what the client holds.
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
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#include "pattern.h"

#define MIB (1ull << 20)
#define SIZE (4 * MIB)

#define RESTART_CONFIG "[restart]\nkeep = keeper\nhold_s = 30\n" \
                       "claim_timeout_s = 30\n"

/* A daemon that keeps its state through a keeper, and a client of it
 * without a mapping cache (gmd_free frees). `extra`: more config. */
static gmd_client *start(harness_fixture *f, const char *extra)
{
        gmd_client *client = NULL;

        harness_init_small(&f->h, RESTART_CONFIG);
        if (extra)
                harness_append_config(&f->h, extra);
        harness_start(&f->h, NULL);
        setenv("GPU_MEMD_CACHE", "0", 1);
        if (gmd_connect(f->h.socket_path, "races", &client) != 0)
                fail_msg("gmd_connect: %s", gmd_last_error());
        unsetenv("GPU_MEMD_CACHE");
        return client;
}

/* One call made while the daemon dies. */
typedef struct call {
        int (*fn)(struct call *);
        gmd_client *client;
        gmd_buffer *buffer;
        gmd_buffer *made;               /* what an allocation returned */
        int result;
} call;

static void *call_thread(void *arg)
{
        call *c = arg;

        c->result = c->fn(c);
        return NULL;
}

static int do_alloc(call *c)
{
        return gmd_alloc(c->client, SIZE, 0, GMD_ALLOC_SWAPPABLE, -1, &c->made);
}

static int do_release(call *c)
{
        return gmd_release(c->client, c->buffer);
}

static int do_acquire(call *c)
{
        return gmd_acquire(c->client, c->buffer, -1);
}

static int do_pageout(call *c)
{
        return gmd_pageout(c->client, c->buffer);
}

static int do_prefetch(call *c)
{
        return gmd_prefetch(c->client, c->buffer);
}

static int do_free(call *c)
{
        return gmd_free(c->client, c->buffer);
}

static int do_release_nowait(call *c)
{
        int r = gmd_release_after_nowait(c->client, c->buffer, NULL);

        return r ? r : gmd_flush(c->client, -1);
}

static int do_acquire_start(call *c)
{
        int r = gmd_acquire_start(c->client, c->buffer, -1, 0);

        return r ? r : gmd_acquire_finish(c->client, c->buffer);
}

static int do_plan(call *c)
{
        return gmd_report_plan(c->client, "races", 3 * MIB, 2 * MIB, 0, 0);
}

/* The ends of the daemons' log, for a failure. */
static void show_log(const harness *h)
{
        char *log = harness_read_log(h);
        const char *p = log ? log + strlen(log) : "";
        int lines = 80;

        while (log && p > log && lines >= 0)
                if (*--p == '\n')
                        lines--;
        print_message("---- the end of gpu-memd's log (%s):\n%s----\n",
                      h->log_path, p);
        free(log);
}

/* Wait for the restore to end; its line must say `back` of `found`
 * taken back, `freed` freed by their owner, none lost. */
static void expect_restore(const harness *h, unsigned back, unsigned found,
                           unsigned freed)
{
        char *line = harness_wait_log(h, "restart: restore done", 20000);
        const char *at = line ? strstr(line, "restore done in ") : NULL;
        unsigned long long ms;
        unsigned b = 0, n = 0, fr = 0, lost = 1;
        const char *tail;

        if (at && sscanf(at, "restore done in %llu ms: %u of %u buffer(s)",
                         &ms, &b, &n) == 3 && (tail = strstr(at, "), ")))
                (void)sscanf(tail, "), %u freed (being freed or never "
                             "answered), %u lost", &fr, &lost);
        if (b != back || n != found || fr != freed || lost != 0) {
                show_log(h);
                fail_msg("want %u of %u taken back, %u freed, 0 lost: %s",
                         back, found, freed,
                         line ? line : "no \"restore done\" in the log");
        }
        free(line);
}

/* Make `c` while the daemon dies: stopped first, so its request is
 * never read; killed; started again from the keeper. Returns once the
 * call has returned. */
static void call_at_kill(harness_fixture *f, call *c)
{
        pthread_t thread;

        harness_suspend(f->h.pid);
        c->result = 1;
        assert_int_equal(pthread_create(&thread, NULL, call_thread, c), 0);
        harness_sleep_ms(200);
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        assert_int_equal(pthread_join(thread, NULL), 0);
}

/* The daemon's accounting equals the client's: `buffers` buffers, of
 * them `vram` bytes in VRAM and `host` on host memory, device 0's pool
 * using just the VRAM ones (and what it keeps for swap-ins). */
static void expect_accounting(const harness *h, gmd_client *client,
                              unsigned buffers, uint64_t vram, uint64_t host)
{
        gmd_status *st = NULL;
        gmd_pool_status pool;

        assert_int_equal(gmd_query_status(client, GMD_STATUS_CLIENTS, 0, &st),
                         0);
        if (st->total_buffers != buffers || st->n_clients != 1 ||
            st->clients[0].vram_bytes != vram ||
            st->clients[0].host_bytes != host) {
                show_log(h);
                fail_msg("status: %u buffer(s), %llu MiB in VRAM, %llu MiB on "
                         "host; want %u, %llu, %llu", st->total_buffers,
                         st->n_clients ? (unsigned long long)
                         (st->clients[0].vram_bytes >> 20) : 0ull,
                         st->n_clients ? (unsigned long long)
                         (st->clients[0].host_bytes >> 20) : 0ull, buffers,
                         (unsigned long long)(vram >> 20),
                         (unsigned long long)(host >> 20));
        }
        gmd_status_free(st);
        /* VRAM a swap-out left for the next swap-in is no buffer's. */
        pool = harness_vram_pool(client, 0);
        if (pool.used - pool.kept != vram) {
                show_log(h);
                fail_msg("VRAM pool used %llu MiB, %llu of them kept; want "
                         "%llu in buffers", (unsigned long long)(pool.used >> 20),
                         (unsigned long long)(pool.kept >> 20),
                         (unsigned long long)(vram >> 20));
        }
}

static void finish(harness_fixture *f, gmd_client *client)
{
        gmd_disconnect(client);
        harness_kill(&f->h, SIGINT);
}

/* An allocation whose request the daemon never read is sent again: the
 * call returns a buffer the new daemon knows; the other comes back. */
static void test_alloc_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *keep;
        call c;

        OK(gmd_alloc(client, SIZE, 0, 0, -1, &keep));
        pattern_fill(keep, 1);
        c = (call){ .fn = do_alloc, .client = client };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        pattern_check(keep, 1, "kept across the kill");
        pattern_fill(c.made, 2);
        expect_accounting(&f->h, client, 2, 2 * SIZE, 0);
        OK(gmd_free(client, c.made));
        OK(gmd_free(client, keep));
        finish(f, client);
}

/* A release never read: claimed held, then released again; the new
 * daemon may move it. */
static void test_release_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b;
        call c;

        OK(gmd_alloc(client, SIZE, 0, GMD_ALLOC_SWAPPABLE, -1, &b));
        pattern_fill(b, 3);
        c = (call){ .fn = do_release, .client = client, .buffer = b };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        expect_accounting(&f->h, client, 1, SIZE, 0);
        harness_page_out(client, b);
        expect_accounting(&f->h, client, 1, 0, SIZE);
        harness_bring_back(client, b, 3, "released at the kill");
        OK(gmd_free(client, b));
        finish(f, client);
}

/* An acquire never read, of a buffer in VRAM: held once it returns, so
 * the new daemon does not move it. */
static void test_acquire_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b = harness_released_buffer(client, SIZE, 4);
        call c = { .fn = do_acquire, .client = client, .buffer = b };

        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        assert_int_equal(gmd_pageout(client, b), GMD_EBUSY);
        pattern_check(b, 4, "acquired at the kill");
        expect_accounting(&f->h, client, 1, SIZE, 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* An acquire never read, of a buffer paged out: the new daemon brings it
 * back whole. */
static void test_acquire_out_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b = harness_released_buffer(client, SIZE, 5);
        call c = { .fn = do_acquire, .client = client, .buffer = b };

        harness_page_out(client, b);
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 5, "acquired from host memory at the kill");
        expect_accounting(&f->h, client, 1, SIZE, 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A pageout never read goes again. */
static void test_pageout_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b = harness_released_buffer(client, SIZE, 6);
        call c = { .fn = do_pageout, .client = client, .buffer = b };

        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        OK(gmd_wait(client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        expect_accounting(&f->h, client, 1, 0, SIZE);
        harness_bring_back(client, b, 6, "paged out at the kill");
        expect_accounting(&f->h, client, 1, SIZE, 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A prefetch never read goes again. */
static void test_prefetch_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b = harness_released_buffer(client, SIZE, 7);
        call c = { .fn = do_prefetch, .client = client, .buffer = b };

        harness_page_out(client, b);
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        OK(gmd_wait(client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        expect_accounting(&f->h, client, 1, SIZE, 0);
        OK(gmd_acquire(client, b, 0));
        pattern_check(b, 7, "prefetched at the kill");
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A SPILLABLE buffer's pageout and prefetch never read: it rests mapped
 * on host memory in between, its bytes whole at each step. */
static void test_spillable_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b;
        call c;

        OK(gmd_alloc(client, SIZE, 0, GMD_ALLOC_SPILLABLE, -1, &b));
        pattern_fill(b, 8);
        OK(gmd_release(client, b));
        c = (call){ .fn = do_pageout, .client = client, .buffer = b };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        OK(gmd_wait(client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        pattern_check(b, 8, "SPILLABLE, paged out at the kill");
        expect_accounting(&f->h, client, 1, 0, SIZE);

        c = (call){ .fn = do_prefetch, .client = client, .buffer = b };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        OK(gmd_wait(client, b, 5000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 8, "SPILLABLE, prefetched at the kill");
        expect_accounting(&f->h, client, 1, SIZE, 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A free never read of a buffer on host memory (mapped by nobody, its
 * bytes the daemon's): freed by the next daemon, not lost. */
static void test_free_out_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *keep, *gone;
        call c;

        OK(gmd_alloc(client, SIZE, 0, 0, -1, &keep));
        pattern_fill(keep, 9);
        gone = harness_released_buffer(client, SIZE, 10);
        harness_page_out(client, gone);
        c = (call){ .fn = do_free, .client = client, .buffer = gone };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 2, 1);
        pattern_check(keep, 9, "kept across the kill");
        expect_accounting(&f->h, client, 1, SIZE, 0);
        assert_int_equal(harness_host_pool(client).used, 0);
        OK(gmd_free(client, keep));
        finish(f, client);
}

/* The calls that do not wait: a release (the lease mark cleared as it
 * leaves) and an acquire started then finished, each never read. */
static void test_nowait_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b;
        call c;

        OK(gmd_alloc(client, SIZE, 0, GMD_ALLOC_SWAPPABLE, -1, &b));
        pattern_fill(b, 13);
        c = (call){ .fn = do_release_nowait, .client = client, .buffer = b };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        harness_page_out(client, b);
        expect_accounting(&f->h, client, 1, 0, SIZE);

        c = (call){ .fn = do_acquire_start, .client = client, .buffer = b };
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        assert_int_equal(gmd_pageout(client, b), GMD_EBUSY);
        pattern_check(b, 13, "acquired from host memory at the kill");
        expect_accounting(&f->h, client, 1, SIZE, 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A plan report never read: the new daemon shows it. */
static void test_plan_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, NULL);
        gmd_buffer *b;
        gmd_status *st = NULL;
        uint64_t deadline;
        call c = { .fn = do_plan };

        OK(gmd_alloc(client, SIZE, 0, 0, -1, &b));
        c.client = client;
        call_at_kill(f, &c);
        assert_int_equal(c.result, 0);
        expect_restore(&f->h, 1, 1, 0);
        /* Sent again after the claims, not with them: looked for. */
        deadline = harness_now_ms() + 5000;
        for (;;) {
                assert_int_equal(gmd_query_status(client, GMD_STATUS_CLIENTS,
                                                  0, &st), 0);
                if (st->n_clients == 1 &&
                    strcmp(st->clients[0].planner, "races") == 0)
                        break;
                gmd_status_free(st);
                if (harness_now_ms() > deadline)
                        fail_msg("the plan reported at the kill is not shown");
                harness_sleep_ms(20);
        }
        assert_int_equal(st->clients[0].plan_kept_bytes, 3 * MIB);
        assert_int_equal(st->clients[0].plan_offloaded_bytes, 2 * MIB);
        gmd_status_free(st);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A swap-out cut in its copy (the host copy not whole): the owner's
 * VRAM holds the bytes, and a claim of it takes them back. */
static void test_pageout_copy_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, "[sim]\ncopy_rate = 4M\n");
        gmd_buffer *b = harness_released_buffer(client, 8 * MIB, 11);

        OK(gmd_pageout(client, b));
        harness_sleep_ms(300);          /* of about 2 s of copy */
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        expect_restore(&f->h, 1, 1, 0);
        OK(gmd_wait(client, b, 5000));
        pattern_check(b, 11, "its swap-out cut in the copy");
        expect_accounting(&f->h, client, 1,
                          gmd_buffer_tier(b) == GMD_TIER_VRAM ? 8 * MIB : 0,
                          gmd_buffer_tier(b) == GMD_TIER_HOST ? 8 * MIB : 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* A swap-in cut in its copy: the host copy is whole and comes back. */
static void test_prefetch_copy_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client = start(f, "[sim]\ncopy_rate = 4M\n");
        gmd_buffer *b = harness_released_buffer(client, 8 * MIB, 12);

        OK(gmd_pageout(client, b));
        OK(gmd_wait(client, b, 10000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_HOST);
        OK(gmd_prefetch(client, b));
        harness_sleep_ms(300);
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        expect_restore(&f->h, 1, 1, 0);
        OK(gmd_acquire(client, b, 10000));
        assert_int_equal(gmd_buffer_tier(b), GMD_TIER_VRAM);
        pattern_check(b, 12, "its swap-in cut in the copy");
        expect_accounting(&f->h, client, 1, 8 * MIB, 0);
        OK(gmd_free(client, b));
        finish(f, client);
}

/* ---- what a dead daemon's last packets do -------------------------------
 *
 * The daemon answers, or moves a buffer and tells the owner, while the
 * owner's process is stopped; then it dies. The owner reads those packets
 * after its death (they wait in its socket before the end of the
 * stream), then claims. The owner is a child process: the test stops it
 * (SIGSTOP) with its request sent and the daemon stopped, lets the daemon
 * go on, and kills it once it acted.
 */
enum { CHILD_ALLOC, CHILD_PAGEOUT };

static int do_child_alloc(call *c)
{
        return gmd_alloc(c->client, SIZE, 0, GMD_ALLOC_SWAPPABLE, -1, &c->made);
}

static void child_say(int fd, const char *text)
{
        if (write(fd, text, strlen(text)) < 0)
                _exit(3);
}

/* The child's part; its exit status says how it went (0: every check). */
static int child_main(const char *socket, int what, int up, int down)
{
        gmd_client *client = NULL;
        gmd_buffer *a = NULL;
        gmd_status *st = NULL;
        pthread_t thread;
        call c = { .fn = do_child_alloc };
        char go;
        int r;

        setenv("GPU_MEMD_CACHE", "0", 1);
        if (gmd_connect(socket, "races-child", &client) != 0 ||
            gmd_alloc(client, SIZE, 0, GMD_ALLOC_SWAPPABLE, -1, &a) != 0)
                return 10;
        pattern_fill_mem(gmd_buffer_ptr(a), SIZE, 21);
        if (gmd_release(client, a) != 0)
                return 11;
        child_say(up, "r");
        if (read(down, &go, 1) != 1)
                return 12;
        c.client = client;
        if (what == CHILD_ALLOC) {
                /* Sent from a thread: the call waits for its answer. */
                if (pthread_create(&thread, NULL, call_thread, &c) != 0)
                        return 13;
                usleep(100 * 1000);
        } else if (gmd_pageout_nowait(client, a) != 0) {
                return 14;
        }
        child_say(up, "s");     /* stopped here */
        if (read(down, &go, 1) != 1)
                return 15;
        if (what == CHILD_ALLOC) {
                if (pthread_join(thread, NULL) != 0 || c.result != 0)
                        return 20;
                pattern_fill_mem(gmd_buffer_ptr(c.made), SIZE, 22);
        } else {
                if (gmd_flush(client, 10000) != 0 ||
                    gmd_wait(client, a, 10000) != 0)
                        return 21;
        }
        r = gmd_acquire(client, a, 10000);
        if (r != 0)
                return 22;
        for (size_t i = 0; i < SIZE / 8; i++)
                if (((const uint64_t *)gmd_buffer_ptr(a))[i] !=
                    pattern_word(21, i))
                        return 23;
        if (gmd_query_status(client, GMD_STATUS_CLIENTS, 0, &st) != 0 ||
            st->total_buffers != (what == CHILD_ALLOC ? 2u : 1u) ||
            st->n_clients != 1 ||
            st->clients[0].vram_bytes != st->total_buffers * SIZE)
                return 24;
        gmd_status_free(st);
        if (what == CHILD_ALLOC && (gmd_free(client, c.made) != 0))
                return 25;
        if (gmd_free(client, a) != 0)
                return 26;
        gmd_disconnect(client);
        return 0;
}

static void wait_byte(int fd, char want)
{
        char got = 0;

        if (read(fd, &got, 1) != 1 || got != want)
                fail_msg("the child did not say '%c'", want);
}

static void run_child(harness_fixture *f, int what, const char *extra)
{
        int up[2], down[2], status = 0;
        pid_t child;

        harness_init_small(&f->h, RESTART_CONFIG);
        if (extra)
                harness_append_config(&f->h, extra);
        harness_start(&f->h, NULL);
        assert_int_equal(pipe(up), 0);
        assert_int_equal(pipe(down), 0);
        child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                close(up[0]);
                close(down[1]);
                _exit(child_main(f->h.socket_path, what, up[1], down[0]));
        }
        close(up[1]);
        close(down[0]);
        wait_byte(up[0], 'r');
        /* The request goes out to a stopped daemon; the child stops. */
        harness_suspend(f->h.pid);
        child_say(down[1], "g");
        wait_byte(up[0], 's');
        harness_suspend(child);
        /* The daemon reads it and acts: answers, or moves and tells. */
        kill(f->h.pid, SIGCONT);
        harness_sleep_ms(400);
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        kill(child, SIGCONT);
        child_say(down[1], "c");
        expect_restore(&f->h, what == CHILD_ALLOC ? 2 : 1,
                       what == CHILD_ALLOC ? 2 : 1, 0);
        waitpid(child, &status, 0);
        close(up[0]);
        close(down[1]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                show_log(&f->h);
                fail_msg("the child failed: status 0x%x (its checks: "
                         "child_main)", status);
        }
        harness_kill(&f->h, SIGINT);
}

/* An allocation answered but not read before the daemon died: the owner
 * maps it from the reply it reads after, and claims it with the other. */
static void test_alloc_reply_after_kill(void **state)
{
        run_child(*state, CHILD_ALLOC, NULL);
}

/* A swap-out's remap sent, its ack never read: the owner takes it after
 * the daemon died, keeping its VRAM mapped for the way back ([swap]
 * keep_vram) or unmapping it, and claims the buffer; what the record
 * kept for it brings it back. */
static void test_remap_after_kill(void **state)
{
        run_child(*state, CHILD_PAGEOUT, NULL);
}

static void test_remap_unmap_after_kill(void **state)
{
        run_child(*state, CHILD_PAGEOUT, "[swap]\nkeep_vram = off\n");
}

#define T(name) cmocka_unit_test_setup_teardown(name, harness_setup, \
                                                 harness_teardown)

int main(void)
{
        const struct CMUnitTest tests[] = {
                T(test_alloc_at_kill),
                T(test_release_at_kill),
                T(test_acquire_at_kill),
                T(test_acquire_out_at_kill),
                T(test_pageout_at_kill),
                T(test_prefetch_at_kill),
                T(test_spillable_at_kill),
                T(test_free_out_at_kill),
                T(test_nowait_at_kill),
                T(test_plan_at_kill),
                T(test_alloc_reply_after_kill),
                T(test_remap_after_kill),
                T(test_remap_unmap_after_kill),
                T(test_pageout_copy_at_kill),
                T(test_prefetch_copy_at_kill),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
