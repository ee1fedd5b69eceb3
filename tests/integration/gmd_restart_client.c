/*
 * gmd_restart_client — the client process of test_restart: it keeps
 * working on checksummed buffers while the test kills and restarts
 * gpu-memd under it, and fails loudly at the first byte that is not what
 * it wrote or the first call that does not succeed.
 *
 *   gmd_restart_client SEED N_BUFFERS
 *
 * Allocates N SWAPPABLE buffers of 2, 4 or 6 MiB (more than the test's
 * pool holds: buffers move), fills each with its own pattern, then loops:
 * acquire a buffer, check every word, write a new pattern, release; now
 * and then page one out, prefetch one, or free one and allocate a new one.
 * Every call has a deadline long enough to ride through restarts. On
 * SIGTERM it stops, checks every buffer once more and prints
 *   DONE <operations> <buffers> <bytes>
 * then waits for SIGUSR1 (the test compares the daemon's view with its
 * own meanwhile), frees everything and exits 0. Any failure prints
 *   FAIL <what>: <gmd_last_error()>
 * and exits 1.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem.h"

#define MiB (UINT64_C(1) << 20)
#define MAX_BUFFERS 64
#define DEADLINE_MS 60000

static volatile sig_atomic_t stop, go;

static void on_term(int sig)
{
        (void)sig;
        stop = 1;
}

static void on_usr1(int sig)
{
        (void)sig;
        go = 1;
}

static uint64_t word_of(uint64_t seed, uint64_t i)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;

        x ^= x >> 31;
        return x * 0x94d049bb133111ebull;
}

static void fill(gmd_buffer *b, uint64_t seed)
{
        uint64_t *w = gmd_buffer_ptr(b);
        size_t n = gmd_buffer_size(b) / 8;

        for (size_t i = 0; i < n; i++)
                w[i] = word_of(seed, i);
}

static long check(const gmd_buffer *b, uint64_t seed)
{
        const uint64_t *w = gmd_buffer_ptr(b);
        size_t n = gmd_buffer_size(b) / 8;

        for (size_t i = 0; i < n; i++)
                if (w[i] != word_of(seed, i))
                        return (long)i;
        return -1;
}

static void fail(const char *what, uint64_t id)
{
        printf("FAIL %s (buffer %llu): %s\n", what, (unsigned long long)id,
               gmd_last_error());
        fflush(stdout);
        exit(1);
}

static gmd_buffer *make(gmd_client *c, unsigned *rng, uint64_t seed)
{
        gmd_buffer *b = NULL;
        size_t size = (1 + rand_r(rng) % 3) * 2 * MiB;

        if (gmd_alloc(c, size, 0, GMD_ALLOC_SWAPPABLE, DEADLINE_MS, &b) < 0)
                fail("alloc", 0);
        fill(b, seed);
        if (gmd_release(c, b) < 0)
                fail("release after alloc", gmd_buffer_id(b));
        return b;
}

int main(int argc, char **argv)
{
        gmd_buffer *bufs[MAX_BUFFERS];
        uint64_t seeds[MAX_BUFFERS], next_seed, ops = 0, bytes = 0;
        gmd_client *c = NULL;
        unsigned rng, n;
        char name[32];

        if (argc != 3)
                return 2;
        rng = (unsigned)strtoul(argv[1], NULL, 10);
        n = (unsigned)strtoul(argv[2], NULL, 10);
        if (n == 0 || n > MAX_BUFFERS)
                return 2;
        next_seed = (uint64_t)rng << 32;
        sigset_t usr1, none;

        signal(SIGTERM, on_term);
        signal(SIGUSR1, on_usr1);
        /* SIGUSR1 only inside sigsuspend: none lost between check and wait. */
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        sigemptyset(&none);
        sigprocmask(SIG_BLOCK, &usr1, NULL);
        snprintf(name, sizeof(name), "restart-%u", rng);
        if (gmd_connect(NULL, name, &c) < 0)
                fail("connect", 0);
        for (unsigned i = 0; i < n; i++) {
                seeds[i] = ++next_seed;
                bufs[i] = make(c, &rng, seeds[i]);
        }
        printf("READY\n");
        fflush(stdout);
        while (!stop) {
                unsigned i = (unsigned)rand_r(&rng) % n, roll;
                long bad;

                if (gmd_acquire(c, bufs[i], DEADLINE_MS) < 0)
                        fail("acquire", gmd_buffer_id(bufs[i]));
                bad = check(bufs[i], seeds[i]);
                if (bad >= 0) {
                        printf("FAIL bytes (buffer %llu): word %ld is not "
                               "what was written\n",
                               (unsigned long long)gmd_buffer_id(bufs[i]), bad);
                        fflush(stdout);
                        return 1;
                }
                seeds[i] = ++next_seed;
                fill(bufs[i], seeds[i]);
                if (gmd_release(c, bufs[i]) < 0)
                        fail("release", gmd_buffer_id(bufs[i]));
                roll = (unsigned)rand_r(&rng) % 100;
                i = (unsigned)rand_r(&rng) % n;
                if (roll < 20 && gmd_pageout(c, bufs[i]) < 0)
                        fail("pageout", gmd_buffer_id(bufs[i]));
                else if (roll >= 20 && roll < 35 && gmd_prefetch(c, bufs[i]) < 0)
                        fail("prefetch", gmd_buffer_id(bufs[i]));
                else if (roll >= 95) {
                        if (gmd_free(c, bufs[i]) < 0)
                                fail("free", gmd_buffer_id(bufs[i]));
                        seeds[i] = ++next_seed;
                        bufs[i] = make(c, &rng, seeds[i]);
                }
                ops++;
        }
        for (unsigned i = 0; i < n; i++) {
                if (gmd_acquire(c, bufs[i], DEADLINE_MS) < 0)
                        fail("final acquire", gmd_buffer_id(bufs[i]));
                if (check(bufs[i], seeds[i]) >= 0)
                        fail("final bytes", gmd_buffer_id(bufs[i]));
                if (gmd_release(c, bufs[i]) < 0)
                        fail("final release", gmd_buffer_id(bufs[i]));
                bytes += gmd_buffer_size(bufs[i]);
        }
        printf("DONE %llu %u %llu\n", (unsigned long long)ops, n,
               (unsigned long long)bytes);
        fflush(stdout);
        while (!go)
                sigsuspend(&none);
        for (unsigned i = 0; i < n; i++)
                gmd_free(c, bufs[i]);
        gmd_disconnect(c);
        return 0;
}
