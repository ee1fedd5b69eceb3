/*
 * gmd_test_client — a real libgpumem client for the integration tests,
 * driven by subcommands. It connects to $GPU_MEMD_SOCKET (gmd_connect with
 * a NULL path) and reports on stdout in "key value" lines the tests parse.
 *
 *   pattern N SIZE [SEED]  allocate N buffers of SIZE; check each reads as
 *                          zeros (memory is zeroed before it changes hands),
 *                          write a pattern unique to (SEED, buffer), wait a
 *                          little so concurrent clients overlap, read every
 *                          byte back, free. Exit 0 iff every byte checked.
 *   hold SIZE [N]          allocate N (1) buffers of SIZE, fill them, print
 *                          "ready BYTES", then sleep until killed. On SIGUSR1
 *                          check and free them and print "freed"; keep
 *                          sleeping (the connection stays open).
 *   alloc SIZE TIMEOUT_MS  one gmd_alloc; print "rc N", "elapsed_ms N",
 *                          "error TEXT"; on success check the buffer's bytes
 *                          and free it. Exit 0 iff rc is 0 and bytes check.
 *   yield HELD WANT TIMEOUT_MS [plain]
 *                          allocate HELD and fill it, print "ready", then
 *                          gmd_alloc WANT with GMD_ALLOC_YIELD (without it:
 *                          "plain"); print "rc N",
 *                          "error TEXT", "held-bad-words N" (HELD checked
 *                          after the call) and, on success, "bytes ok|bad"
 *                          (the new buffer reads as zeros); free both. Exit
 *                          0 iff rc is 0 and every byte checks.
 *   cuda ORDINAL SIZE      find the daemon's device that is CUDA device
 *                          ORDINAL of this process (gmd_device_from_cuda:
 *                          $CUDA_VISIBLE_DEVICES applies), print "device
 *                          N" or "rc N" and "error TEXT" (exit 1), then
 *                          allocate SIZE there, fill it, print "ready
 *                          BYTES" and sleep until killed.
 *
 * Exit status 2: bad arguments or no connection.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.h"
#include "client_util.h"

#define MAX_BUFFERS 64

static uint64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A word per 8 bytes that differs by seed, buffer and offset. */
static uint64_t pattern_word(uint64_t seed, unsigned index, uint64_t offset)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + index * 0xbf58476d1ce4e5b9ull +
                     offset + 1;

        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 29;
        return x;
}

static void fill(gmd_buffer *b, uint64_t seed, unsigned index)
{
        uint64_t *p = gmd_buffer_ptr(b);
        size_t words = gmd_buffer_size(b) / 8;

        for (size_t i = 0; i < words; i++)
                p[i] = pattern_word(seed, index, i);
}

/* Number of wrong words. */
static size_t check(const gmd_buffer *b, uint64_t seed, unsigned index)
{
        const uint64_t *p = gmd_buffer_ptr(b);
        size_t words = gmd_buffer_size(b) / 8, bad = 0;

        for (size_t i = 0; i < words; i++)
                if (p[i] != pattern_word(seed, index, i))
                        bad++;
        return bad;
}

static size_t count_nonzero(const gmd_buffer *b)
{
        const uint64_t *p = gmd_buffer_ptr(b);
        size_t words = gmd_buffer_size(b) / 8, bad = 0;

        for (size_t i = 0; i < words; i++)
                if (p[i] != 0)
                        bad++;
        return bad;
}

static int cmd_pattern(int argc, char **argv)
{
        gmd_buffer *bufs[MAX_BUFFERS] = { 0 };
        gmd_client *client;
        unsigned n;
        size_t size, bad = 0;
        uint64_t seed = 1;
        int r, ok = 1;

        if (argc < 2 || client_parse_size("gmd_test_client", argv[1], &size) < 0)
                return 2;
        n = (unsigned)strtoul(argv[0], NULL, 10);
        if (n == 0 || n > MAX_BUFFERS)
                return 2;
        if (argc > 2)
                seed = strtoull(argv[2], NULL, 10);

        client = client_connect_or_die("gmd_test_client", "pattern");
        for (unsigned i = 0; i < n; i++) {
                r = gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, 10000,
                              &bufs[i]);
                if (r < 0) {
                        printf("alloc-failed %u %d %s\n", i, r, gmd_last_error());
                        ok = 0;
                        n = i;
                        break;
                }
                if (gmd_buffer_size(bufs[i]) < size || !gmd_buffer_ptr(bufs[i])) {
                        printf("bad-buffer %u size %zu\n", i,
                               gmd_buffer_size(bufs[i]));
                        ok = 0;
                }
                if (count_nonzero(bufs[i]) != 0) {
                        printf("not-zeroed %u %zu words\n", i,
                               count_nonzero(bufs[i]));
                        ok = 0;
                }
        }
        for (unsigned i = 0; i < n; i++)
                fill(bufs[i], seed, i);
        usleep(150 * 1000);   /* let concurrent clients overlap */
        for (unsigned i = 0; i < n; i++) {
                size_t b = check(bufs[i], seed, i);

                if (b) {
                        printf("mismatch %u %zu words\n", i, b);
                        ok = 0;
                }
                bad += b;
        }
        for (unsigned i = 0; i < n; i++) {
                r = gmd_free(client, bufs[i]);
                if (r < 0) {
                        printf("free-failed %u %d %s\n", i, r, gmd_last_error());
                        ok = 0;
                }
        }
        gmd_disconnect(client);
        printf("checked %u buffers %zu bytes bad-words %zu\n", n,
               (size_t)n * size, bad);
        return ok ? 0 : 1;
}

static volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
        got_usr1 = 1;
}

static int cmd_hold(int argc, char **argv)
{
        gmd_buffer *bufs[MAX_BUFFERS] = { 0 };
        gmd_client *client;
        struct sigaction sa = { .sa_handler = on_usr1 };
        unsigned n = 1;
        size_t size, total = 0;
        sigset_t block, old;
        int r;

        if (argc < 1 || client_parse_size("gmd_test_client", argv[0], &size) < 0)
                return 2;
        if (argc > 1)
                n = (unsigned)strtoul(argv[1], NULL, 10);
        if (n == 0 || n > MAX_BUFFERS)
                return 2;

        sigemptyset(&block);
        sigaddset(&block, SIGUSR1);
        sigprocmask(SIG_BLOCK, &block, &old);
        sigaction(SIGUSR1, &sa, NULL);

        client = client_connect_or_die("gmd_test_client", "hold");
        for (unsigned i = 0; i < n; i++) {
                r = gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, 5000,
                              &bufs[i]);
                if (r < 0) {
                        printf("alloc-failed %u %d %s\n", i, r, gmd_last_error());
                        fflush(stdout);
                        return 1;
                }
                fill(bufs[i], 77, i);
                total += gmd_buffer_size(bufs[i]);
        }
        printf("ready %zu\n", total);
        fflush(stdout);

        for (;;) {
                sigsuspend(&old);
                if (got_usr1 && n > 0) {
                        size_t bad = 0;

                        for (unsigned i = 0; i < n; i++) {
                                bad += check(bufs[i], 77, i);
                                gmd_free(client, bufs[i]);
                        }
                        n = 0;
                        printf("freed bad-words %zu\n", bad);
                        fflush(stdout);
                }
        }
}

static int cmd_cuda(int argc, char **argv)
{
        gmd_client *client;
        gmd_buffer *buf = NULL;
        unsigned device = 0;
        size_t size;
        int r;

        if (argc < 2 || client_parse_size("gmd_test_client", argv[1], &size) < 0)
                return 2;
        client = client_connect_or_die("gmd_test_client", "cuda");
        r = gmd_device_from_cuda(client, atoi(argv[0]), &device);
        if (r < 0) {
                printf("rc %d\nerror %s\n", r, gmd_last_error());
                return 1;
        }
        printf("device %u\n", device);
        r = gmd_alloc(client, size, device, GMD_ALLOC_SWAPPABLE, 5000, &buf);
        if (r < 0) {
                printf("alloc-failed %d %s\n", r, gmd_last_error());
                return 1;
        }
        fill(buf, 91, 0);
        printf("ready %zu\n", gmd_buffer_size(buf));
        fflush(stdout);
        for (;;)
                pause();
}

static int cmd_alloc(int argc, char **argv)
{
        gmd_client *client;
        gmd_buffer *buf = NULL;
        size_t size;
        int64_t timeout;
        uint64_t start, elapsed;
        int r, ok;

        if (argc < 2 || client_parse_size("gmd_test_client", argv[0], &size) < 0)
                return 2;
        timeout = strtoll(argv[1], NULL, 10);

        client = client_connect_or_die("gmd_test_client", "alloc");
        printf("connected\n");
        fflush(stdout);
        start = now_ms();
        r = gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, timeout, &buf);
        elapsed = now_ms() - start;
        printf("rc %d\nelapsed_ms %llu\nerror %s\n", r,
               (unsigned long long)elapsed, r < 0 ? gmd_last_error() : "");
        ok = r == 0;
        if (r == 0) {
                ok = count_nonzero(buf) == 0;
                fill(buf, 5, 0);
                ok = ok && check(buf, 5, 0) == 0;
                printf("bytes %s\n", ok ? "ok" : "bad");
                gmd_free(client, buf);
        }
        gmd_disconnect(client);
        return ok ? 0 : 1;
}

static int cmd_yield(int argc, char **argv)
{
        gmd_buffer *held = NULL, *buf = NULL;
        gmd_client *client;
        size_t held_size, want;
        size_t bad;
        int r, ok;

        if (argc < 3 || client_parse_size("gmd_test_client", argv[0], &held_size) < 0 ||
            client_parse_size("gmd_test_client", argv[1], &want) < 0)
                return 2;
        client = client_connect_or_die("gmd_test_client", "yield");
        r = gmd_alloc(client, held_size, 0, GMD_ALLOC_SWAPPABLE, 5000, &held);
        if (r < 0) {
                printf("alloc-failed %d %s\n", r, gmd_last_error());
                return 1;
        }
        fill(held, 91, 0);
        printf("ready\n");
        fflush(stdout);
        r = gmd_alloc(client, want, 0,
                      argc > 3 && strcmp(argv[3], "plain") == 0 ? 0 :
                      GMD_ALLOC_YIELD, strtoll(argv[2], NULL, 10), &buf);
        bad = check(held, 91, 0);
        printf("rc %d\nerror %s\nheld-bad-words %zu\n", r,
               r < 0 ? gmd_last_error() : "", bad);
        ok = r == 0 && bad == 0;
        if (r == 0) {
                int zero = count_nonzero(buf) == 0;

                printf("bytes %s\n", zero ? "ok" : "bad");
                ok = ok && zero;
                gmd_free(client, buf);
        }
        gmd_free(client, held);
        gmd_disconnect(client);
        return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc < 2) {
                fprintf(stderr, "usage: gmd_test_client pattern|hold|alloc|yield|cuda ...\n");
                return 2;
        }
        if (strcmp(argv[1], "pattern") == 0)
                return cmd_pattern(argc - 2, argv + 2);
        if (strcmp(argv[1], "hold") == 0)
                return cmd_hold(argc - 2, argv + 2);
        if (strcmp(argv[1], "alloc") == 0)
                return cmd_alloc(argc - 2, argv + 2);
        if (strcmp(argv[1], "yield") == 0)
                return cmd_yield(argc - 2, argv + 2);
        if (strcmp(argv[1], "cuda") == 0)
                return cmd_cuda(argc - 2, argv + 2);
        fprintf(stderr, "gmd_test_client: unknown command '%s'\n", argv[1]);
        return 2;
}
