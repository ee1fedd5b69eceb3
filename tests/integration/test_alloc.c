/*
 * test_alloc — the real gpu-memd (sim backend) with real client processes:
 * buffers carry bytes, pools account for them, and the allocation rules hold
 * (too large fails at once, no room waits until the deadline or until
 * somebody frees). Each test starts its own daemon on its own socket with a
 * 64 MiB pool, so sizes of a few MiB fill it quickly.
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

#define POOL (64 * MiB)

typedef harness_fixture fixture;



/* Read "key value" from a client's output text. */
static long long output_value(const char *output, const char *key)
{
        char needle[64];
        const char *hit;

        snprintf(needle, sizeof(needle), "%s ", key);
        for (hit = output; (hit = strstr(hit, needle)); hit++)
                if (hit == output || hit[-1] == '\n')
                        return strtoll(hit + strlen(needle), NULL, 10);
        fail_msg("no \"%s\" in client output:\n%s", key, output);
        return 0;
}

static const char *output_line(const char *output, const char *key)
{
        static char line[512];
        char needle[64];
        const char *hit;

        snprintf(needle, sizeof(needle), "%s ", key);
        for (hit = output; (hit = strstr(hit, needle)); hit++) {
                if (hit == output || hit[-1] == '\n') {
                        size_t n = strcspn(hit + strlen(needle), "\n");

                        if (n >= sizeof(line))
                                n = sizeof(line) - 1;
                        memcpy(line, hit + strlen(needle), n);
                        line[n] = '\0';
                        return line;
                }
        }
        fail_msg("no \"%s\" in client output:\n%s", key, output);
        return NULL;
}

static void assert_exit_ok(int status, const char *what, const char *output)
{
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("%s: status %#x, output:\n%s", what, status,
                         output ? output : "");
}

/* Start a `hold SIZE N` client and wait for "ready". */
static harness_proc *hold(fixture *f, const char *size, const char *n)
{
        const char *args[] = { "hold", size, n, NULL };
        harness_proc *p = harness_track_client(f, args);
        char *line = harness_read_line(p, "ready", 5000);

        if (!line)
                fail_msg("hold %s %s did not get ready; daemon log:\n%s", size,
                         n, harness_read_log(&f->h));
        free(line);
        return p;
}

static const gmd_pool_status *find_pool(const gmd_status *s, unsigned device,
                                        gmd_tier tier)
{
        for (size_t i = 0; i < s->n_pools; i++)
                if (s->pools[i].device == device && s->pools[i].tier == tier)
                        return &s->pools[i];
        return NULL;
}

/* ---- bytes ------------------------------------------------------------------ */

/* Four clients at once, each with three buffers: every byte each one wrote
 * reads back, and nobody sees another's data (buffers start zeroed). Then
 * again, so memory freed by one round is reused by the next. */
static void test_concurrent_patterns(void **state)
{
        fixture *f = *state;
        static const char *const seeds[] = { "11", "22", "33", "44" };
        int fds_idle;

        harness_start_small(&f->h, NULL);
        fds_idle = harness_count_fds(f->h.pid);

        for (int round = 0; round < 2; round++) {
                harness_proc *p[4];

                for (int i = 0; i < 4; i++) {
                        const char *args[] = { "pattern", "3", "4M", seeds[i],
                                               NULL };

                        p[i] = harness_track_client(f, args);
                }
                for (int i = 0; i < 4; i++) {
                        char *out = NULL;
                        int status = harness_finish(p[i], &out, 15000);

                        assert_exit_ok(status, "pattern 3 4M", out);
                        assert_non_null(strstr(out, "checked 3 buffers"));
                        assert_int_equal(output_value(out, "checked"), 3);
                        free(out);
                }
        }

        f->client = harness_client(&f->h, "observer");
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 3000), 0);
        gmd_disconnect(f->client);
        f->client = NULL;
        /* Every client socket and memfd the daemon held is closed again. */
        assert_int_equal(harness_wait_fds(f->h.pid, fds_idle, 3000), fds_idle);
        harness_stop(&f->h);
}

/* A buffer is usable in the process that allocated it, rounded up to the
 * granularity, and its bytes survive the other calls on the connection. */
static void test_in_process_buffer(void **state)
{
        fixture *f = *state;
        gmd_buffer *a = NULL, *b = NULL;
        uint8_t *pa, *pb;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "inproc");
        assert_string_equal(gmd_client_backend(f->client), "sim");
        assert_int_equal(gmd_client_protocol_version(f->client), 1);
        assert_int_equal(gmd_client_device_count(f->client), 1);

        assert_int_equal(gmd_alloc(f->client, 3 * MiB, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &a), 0);
        assert_int_equal(gmd_buffer_size(a), 4 * MiB);
        assert_int_equal(gmd_buffer_device(a), 0);
        assert_int_equal(gmd_buffer_tier(a), GMD_TIER_VRAM);
        assert_int_equal(gmd_alloc(f->client, 1, 0, GMD_ALLOC_SWAPPABLE,
                                   GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_buffer_size(b), 2 * MiB);
        assert_int_not_equal(gmd_buffer_id(a), gmd_buffer_id(b));

        pa = gmd_buffer_ptr(a);
        pb = gmd_buffer_ptr(b);
        assert_non_null(pa);
        assert_non_null(pb);
        memset(pa, 0xab, 4 * MiB);
        memset(pb, 0xcd, 2 * MiB);
        assert_int_equal(harness_vram_used(f->client, 0), 6 * MiB);
        for (size_t i = 0; i < 4 * MiB; i += 4093)
                assert_int_equal(pa[i], 0xab);
        assert_int_equal(pa[4 * MiB - 1], 0xab);
        assert_int_equal(pb[2 * MiB - 1], 0xcd);

        assert_int_equal(gmd_free(f->client, a), 0);
        assert_int_equal(harness_vram_used(f->client, 0), 2 * MiB);
        assert_int_equal(pb[12345], 0xcd);
        assert_int_equal(gmd_free(f->client, b), 0);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        harness_stop(&f->h);
}

static int count_maps(void)
{
        FILE *f = fopen("/proc/self/maps", "r");
        int n = 0, c;

        assert_non_null(f);
        while ((c = fgetc(f)) != EOF)
                if (c == '\n')
                        n++;
        fclose(f);
        return n;
}

/* Allocating and freeing in a loop leaks neither fds nor mappings in the
 * client (a cache may keep some, but it must not grow per cycle). */
static void test_client_does_not_leak(void **state)
{
        fixture *f = *state;
        int fds_warm = 0, maps_warm = 0;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "cycler");
        for (int i = 0; i < 40; i++) {
                gmd_buffer *b[3] = { 0 };

                for (int j = 0; j < 3; j++) {
                        assert_int_equal(gmd_alloc(f->client, (j + 1) * 2 * MiB,
                                                   0, 0, GMD_NO_WAIT, &b[j]), 0);
                        memset(gmd_buffer_ptr(b[j]), i, gmd_buffer_size(b[j]));
                }
                for (int j = 0; j < 3; j++)
                        assert_int_equal(gmd_free(f->client, b[j]), 0);
                if (i == 4) {
                        fds_warm = harness_count_own_fds();
                        maps_warm = count_maps();
                }
        }
        assert_int_equal(harness_count_own_fds(), fds_warm);
        if (count_maps() > maps_warm)
                fail_msg("/proc/self/maps grew from %d to %d lines over 35 "
                         "alloc/free cycles", maps_warm, count_maps());
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        harness_stop(&f->h);
}

static void test_invalid_requests(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = (gmd_buffer *)&b;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "invalid");
        assert_int_equal(gmd_alloc(f->client, 0, 0, 0, GMD_NO_WAIT, &b),
                         -EINVAL);
        assert_int_equal(gmd_alloc(f->client, MiB, 7, 0, GMD_NO_WAIT, &b),
                         -EINVAL);
        assert_int_equal(gmd_alloc(f->client, MiB, 0, 1u << 20, GMD_NO_WAIT,
                                   &b), -EINVAL);
        /* Untouched on failure. */
        assert_ptr_equal(b, (gmd_buffer *)&b);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        /* The connection still works. */
        b = NULL;
        assert_int_equal(gmd_alloc(f->client, MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_free(f->client, b), 0);
        harness_stop(&f->h);
}

/* ---- accounting --------------------------------------------------------------- */

static void test_status_pools(void **state)
{
        fixture *f = *state;
        const gmd_pool_status *vram, *host;
        gmd_status *s;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "status");
        s = harness_status(f->client);
        assert_string_equal(s->backend, "sim");
        assert_string_equal(s->daemon_version, GMD_VERSION_STRING);
        assert_int_equal(s->n_pools, 2);
        vram = find_pool(s, 0, GMD_TIER_VRAM);
        host = find_pool(s, 0, GMD_TIER_HOST);
        assert_non_null(vram);
        assert_non_null(host);
        assert_int_equal(vram->capacity, POOL);
        assert_int_equal(vram->used, 0);
        assert_int_equal(vram->free, POOL);
        assert_true(host->capacity > 0);
        assert_int_equal(host->used + host->free, host->capacity);
        assert_int_equal(s->total_clients, 1);
        assert_int_equal(s->total_buffers, 0);
        assert_int_equal(s->total_used, 0);
        assert_int_equal(s->n_clients, 1);
        assert_int_equal(s->clients[0].pid, getpid());
        assert_string_equal(s->clients[0].name, "status");
        gmd_status_free(s);
        harness_stop(&f->h);
}

static void test_status_two_devices(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;
        gmd_status *s;

        harness_start_small(&f->h, "[sim]\ndevices = 2\n");
        f->client = harness_client(&f->h, "twodev");
        assert_int_equal(gmd_client_device_count(f->client), 2);
        s = harness_status(f->client);
        assert_int_equal(s->n_pools, 3);
        assert_non_null(find_pool(s, 0, GMD_TIER_VRAM));
        assert_non_null(find_pool(s, 1, GMD_TIER_VRAM));
        assert_non_null(find_pool(s, 0, GMD_TIER_HOST));
        assert_int_equal(find_pool(s, 1, GMD_TIER_VRAM)->capacity, POOL);
        /* Each has a link of its own ([sim] shared_link off). */
        assert_int_equal(find_pool(s, 0, GMD_TIER_VRAM)->link_group, 0);
        assert_int_equal(find_pool(s, 1, GMD_TIER_VRAM)->link_group, 1);
        gmd_status_free(s);

        /* An allocation counts against its own device only. */
        assert_int_equal(gmd_alloc(f->client, 6 * MiB, 1, 0, GMD_NO_WAIT, &b),
                         0);
        assert_int_equal(gmd_buffer_device(b), 1);
        assert_int_equal(harness_vram_used(f->client, 1), 6 * MiB);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        assert_int_equal(gmd_free(f->client, b), 0);
        assert_int_equal(harness_vram_used(f->client, 1), 0);
        assert_int_equal(gmd_alloc(f->client, MiB, 2, 0, GMD_NO_WAIT, &b),
                         -EINVAL);
        harness_stop(&f->h);
}

/* `used` follows allocations and frees of another process, and the
 * clients and buffers lists show it. */
static void test_accounting_after_free(void **state)
{
        fixture *f = *state;
        harness_proc *p;
        gmd_status *s = NULL;
        char *line;
        int found = 0;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "observer");
        assert_int_equal(harness_vram_used(f->client, 0), 0);

        p = hold(f, "8M", "2");
        assert_int_equal(harness_vram_used(f->client, 0), 16 * MiB);
        assert_int_equal(gmd_query_status(f->client, GMD_STATUS_BUFFERS,
                                          (uint32_t)p->pid, &s), 0);
        assert_int_equal(s->total_buffers, 2);
        assert_int_equal(s->total_clients, 2);
        assert_int_equal(s->total_used, 16 * MiB);
        assert_int_equal(s->n_buffers, 2);
        for (size_t i = 0; i < s->n_buffers; i++) {
                assert_int_equal(s->buffers[i].pid, p->pid);
                assert_int_equal(s->buffers[i].size, 8 * MiB);
                assert_int_equal(s->buffers[i].device, 0);
        }
        for (size_t i = 0; i < s->n_clients; i++) {
                if (s->clients[i].pid == (uint32_t)p->pid) {
                        found = 1;
                        assert_int_equal(s->clients[i].bytes, 16 * MiB);
                        assert_int_equal(s->clients[i].buffers, 2);
                        assert_string_equal(s->clients[i].name, "hold");
                }
        }
        assert_true(found);
        gmd_status_free(s);

        /* The holder frees explicitly and stays connected. */
        kill(p->pid, SIGUSR1);
        line = harness_read_line(p, "freed", 5000);
        assert_non_null(line);
        assert_string_equal(line, "freed bad-words 0");
        free(line);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        assert_int_equal(harness_wait_clients(f->client, 2, 1000), 2);
        harness_stop(&f->h);
}

/* A client that dies holding buffers gives them back, and the daemon keeps
 * no fd of it. */
static void test_accounting_after_kill(void **state)
{
        fixture *f = *state;
        harness_proc *p;
        int fds_before;
        int status;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "observer");
        fds_before = harness_count_fds(f->h.pid);

        p = hold(f, "4M", "5");
        assert_int_equal(harness_vram_used(f->client, 0), 20 * MiB);
        assert_int_equal(kill(p->pid, SIGKILL), 0);
        status = harness_wait_proc(p, 3000);
        assert_true(WIFSIGNALED(status));

        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 3000), 0);
        assert_int_equal(harness_wait_clients(f->client, 1, 3000), 1);
        assert_int_equal(harness_wait_fds(f->h.pid, fds_before, 3000),
                         fds_before);
        /* The memory is usable again: the whole pool at once. */
        {
                gmd_buffer *b = NULL;

                assert_int_equal(gmd_alloc(f->client, POOL, 0, 0, GMD_NO_WAIT,
                                           &b), 0);
                assert_int_equal(gmd_free(f->client, b), 0);
        }
        harness_stop(&f->h);
}

/* Disconnecting with buffers still held frees them too. */
static void test_accounting_after_disconnect(void **state)
{
        fixture *f = *state;
        gmd_client *other;
        gmd_buffer *b = NULL;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "observer");
        other = harness_client(&f->h, "leaver");
        assert_int_equal(gmd_alloc(other, 10 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        assert_int_equal(gmd_alloc(other, 10 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        assert_int_equal(harness_vram_used(f->client, 0), 20 * MiB);
        gmd_disconnect(other);
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 3000), 0);
        harness_stop(&f->h);
}

/* ---- allocation rules ----------------------------------------------------------- */

/* Larger than the pool: GMD_ETOOLARGE at once, even when willing to wait
 * forever, with a message that says why. */
static void test_too_large(void **state)
{
        fixture *f = *state;
        const char *args[] = { "alloc", "128M", "-1", NULL };
        harness_proc *p;
        const char *error;
        char *out = NULL;

        harness_start_small(&f->h, NULL);
        p = harness_track_client(f, args);
        harness_finish(p, &out, 5000);
        assert_int_equal(output_value(out, "rc"), GMD_ETOOLARGE);
        assert_true(output_value(out, "elapsed_ms") < 1000);
        error = output_line(out, "error");
        if (!strstr(error, "64 MiB") && !strstr(error, "67108864") &&
            !strstr(error, "64M"))
                fail_msg("error \"%s\" does not name the pool's 64 MiB", error);
        free(out);

        /* One byte over the capacity is too large too; exactly it is not. */
        f->client = harness_client(&f->h, "edge");
        {
                gmd_buffer *b = NULL;

                assert_int_equal(gmd_alloc(f->client, POOL + 1, 0, 0,
                                           GMD_WAIT_FOREVER, &b),
                                 GMD_ETOOLARGE);
                assert_true(strlen(gmd_last_error()) > 0);
                assert_int_equal(gmd_alloc(f->client, POOL, 0, 0, GMD_NO_WAIT,
                                           &b), 0);
                assert_int_equal(gmd_free(f->client, b), 0);
        }
        harness_stop(&f->h);
}

/* No room and no waiting: GMD_ENOMEM at once. */
static void test_no_wait(void **state)
{
        fixture *f = *state;
        const char *args[] = { "alloc", "32M", "0", NULL };
        harness_proc *p;
        char *out = NULL;

        harness_start_small(&f->h, NULL);
        hold(f, "16M", "3");
        p = harness_track_client(f, args);
        harness_finish(p, &out, 5000);
        assert_int_equal(output_value(out, "rc"), GMD_ENOMEM);
        assert_true(output_value(out, "elapsed_ms") < 1000);
        assert_true(strlen(output_line(out, "error")) > 0);
        free(out);
        harness_stop(&f->h);
}

/* No room: waits its deadline, then GMD_ETIMEDOUT with a message naming
 * what it waited for. */
static void test_timeout(void **state)
{
        fixture *f = *state;
        const char *args[] = { "alloc", "32M", "600", NULL };
        harness_proc *p;
        const char *error;
        long long elapsed;
        char *out = NULL;

        harness_start_small(&f->h, NULL);
        hold(f, "16M", "3");
        p = harness_track_client(f, args);
        harness_finish(p, &out, 10000);
        assert_int_equal(output_value(out, "rc"), GMD_ETIMEDOUT);
        elapsed = output_value(out, "elapsed_ms");
        if (elapsed < 595 || elapsed > 600 + 1500)
                fail_msg("a 600 ms deadline took %lld ms", elapsed);
        error = output_line(out, "error");
        if (!strstr(error, "32 MiB") && !strstr(error, "33554432") &&
            !strstr(error, "32M"))
                fail_msg("error \"%s\" does not name the 32 MiB it waited for",
                         error);
        free(out);

        /* The waiter is gone from the daemon's books. */
        f->client = harness_client(&f->h, "observer");
        assert_int_equal(harness_vram_used(f->client, 0), 48 * MiB);
        harness_stop(&f->h);
}

/* Wait until some client of the daemon has a waiting allocation. */
static void wait_for_waiter(fixture *f)
{
        uint64_t deadline = harness_now_ms() + 3000;

        for (;;) {
                gmd_status *s = harness_status(f->client);
                unsigned waiting = 0;

                for (size_t i = 0; i < s->n_clients; i++)
                        waiting += s->clients[i].waiting;
                gmd_status_free(s);
                if (waiting == 1)
                        return;
                if (harness_now_ms() >= deadline)
                        fail_msg("no allocation shows as waiting after 3 s");
                harness_sleep_ms(10);
        }
}

/* A waiting allocation is served as soon as another process frees. */
static void test_waiter_served_on_free(void **state)
{
        fixture *f = *state;
        const char *args[] = { "alloc", "32M", "10000", NULL };
        harness_proc *holder, *waiter;
        uint64_t freed_at, done_at;
        char *line, *out = NULL;
        int status;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "observer");
        holder = hold(f, "16M", "3");
        waiter = harness_track_client(f, args);
        wait_for_waiter(f);

        freed_at = harness_now_ms();
        kill(holder->pid, SIGUSR1);
        line = harness_read_line(holder, "freed", 5000);
        assert_non_null(line);
        free(line);
        status = harness_finish(waiter, &out, 10000);
        done_at = harness_now_ms();
        assert_exit_ok(status, "alloc 32M 10000", out);
        assert_int_equal(output_value(out, "rc"), 0);
        assert_string_equal(output_line(out, "bytes"), "ok");
        /* Served by the free, not by its deadline. */
        if (done_at - freed_at > 3000)
                fail_msg("waiter took %llu ms after the free",
                         (unsigned long long)(done_at - freed_at));
        free(out);
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 3000), 0);
        harness_stop(&f->h);
}

/* ... and when the holder dies. */
static void test_waiter_served_on_death(void **state)
{
        fixture *f = *state;
        const char *args[] = { "alloc", "40M", "10000", NULL };
        harness_proc *holder, *waiter;
        char *out = NULL;
        int status;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "observer");
        holder = hold(f, "8M", "4");
        waiter = harness_track_client(f, args);
        wait_for_waiter(f);
        kill(holder->pid, SIGKILL);
        harness_wait_proc(holder, 3000);
        status = harness_finish(waiter, &out, 10000);
        assert_exit_ok(status, "alloc 40M 10000", out);
        assert_int_equal(output_value(out, "rc"), 0);
        assert_true(output_value(out, "elapsed_ms") < 5000);
        free(out);
        harness_stop(&f->h);
}

/* A waiter that disconnects is dropped: it does not later take memory. */
static void test_waiter_dies(void **state)
{
        fixture *f = *state;
        const char *args[] = { "alloc", "32M", "-1", NULL };
        harness_proc *holder, *waiter;
        char *line;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "observer");
        holder = hold(f, "16M", "3");
        waiter = harness_track_client(f, args);
        wait_for_waiter(f);
        kill(waiter->pid, SIGKILL);
        harness_wait_proc(waiter, 3000);
        assert_int_equal(harness_wait_clients(f->client, 2, 3000), 2);

        kill(holder->pid, SIGUSR1);
        line = harness_read_line(holder, "freed", 5000);
        assert_non_null(line);
        free(line);
        /* Nobody got the freed memory. */
        harness_sleep_ms(100);
        assert_int_equal(harness_vram_used(f->client, 0), 0);
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                HARNESS_TEST(test_concurrent_patterns),
                HARNESS_TEST(test_in_process_buffer),
                HARNESS_TEST(test_client_does_not_leak),
                HARNESS_TEST(test_invalid_requests),
                HARNESS_TEST(test_status_pools),
                HARNESS_TEST(test_status_two_devices),
                HARNESS_TEST(test_accounting_after_free),
                HARNESS_TEST(test_accounting_after_kill),
                HARNESS_TEST(test_accounting_after_disconnect),
                HARNESS_TEST(test_too_large),
                HARNESS_TEST(test_no_wait),
                HARNESS_TEST(test_timeout),
                HARNESS_TEST(test_waiter_served_on_free),
                HARNESS_TEST(test_waiter_served_on_death),
                HARNESS_TEST(test_waiter_dies),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
