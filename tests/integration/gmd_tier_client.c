/*
 * gmd_tier_client — a real libgpumem client process for test_tiering: a
 * client whose buffers the daemon moves between VRAM and host memory while
 * the test watches from outside (status), kills it mid-move, or runs
 * several of it at once against a pool too small for all of them. It
 * connects to $GPU_MEMD_SOCKET, takes its priority from $GPU_MEMD_PRIORITY
 * (the library reads it), and reports on stdout in lines the test parses.
 *
 *   hold N SIZE SEED      allocate N SWAPPABLE buffers of SIZE one after
 *                         the other, fill each with a pattern of (SEED,
 *                         index), print "ready ID0 ID1 ..." and keep them
 *                         acquired. Each SIGUSR1 releases the next one
 *                         ("released I"); SIGUSR2 prints "tier I vram|host"
 *                         for each (the library's view), acquires it
 *                         (bringing it back), checks every byte, frees it,
 *                         prints "checked N bad-words B" and exits 0 iff
 *                         every byte matched.
 *   move SIZE out|in|acquire
 *                         allocate, fill, release, then start a move and
 *                         print "moving ID" as soon as it is queued: out is
 *                         a pageout; in is a pageout waited for, then a
 *                         prefetch; acquire is a pageout waited for, then
 *                         an acquire (its swap-in), "moving" printed just
 *                         before it. Sleeps until killed.
 *   rounds N SIZE R SEED  the oversubscription worker: allocate N buffers
 *                         (each filled and released before the next is
 *                         asked for), then R rounds over them: acquire,
 *                         check the previous round's pattern, write a new
 *                         one, release. A last pass acquires, checks and
 *                         frees each (one at a time). Prints "done rounds R bad-words B
 *                         swapped-in K errors E" (K: acquires that found
 *                         the buffer on host memory); exits 0 iff B and E
 *                         are 0.
 *
 * Exit status 2: bad arguments or no connection.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem.h"
#include "client_util.h"

#define MAX_BUFFERS 16
/* Long enough for any wait these tests make, short enough that a stuck
 * daemon fails the test instead of hanging it. */
#define WAIT_MS 20000

/* A word per 8 bytes that differs by seed, buffer, generation and offset. */
static uint64_t pattern_word(uint64_t seed, unsigned index, unsigned gen,
                             uint64_t offset)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + index * 0xbf58476d1ce4e5b9ull +
                     gen * 0xd6e8feb86659fd93ull + offset + 1;

        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 29;
        return x;
}

static void fill(gmd_buffer *b, uint64_t seed, unsigned index, unsigned gen)
{
        uint64_t *p = gmd_buffer_ptr(b);
        size_t words = gmd_buffer_size(b) / 8;

        for (size_t i = 0; i < words; i++)
                p[i] = pattern_word(seed, index, gen, i);
}

/* Number of wrong words. */
static size_t check(const gmd_buffer *b, uint64_t seed, unsigned index,
                    unsigned gen)
{
        const uint64_t *p = gmd_buffer_ptr(b);
        size_t words = gmd_buffer_size(b) / 8, bad = 0;

        for (size_t i = 0; i < words; i++)
                if (p[i] != pattern_word(seed, index, gen, i))
                        bad++;
        return bad;
}

/* Print a failed call and exit 1: the test reads the line. */
static void die_call(const char *what, unsigned index, int r)
{
        printf("failed %s %u %d %s\n", what, index, r, gmd_last_error());
        exit(1);
}

/* ---- hold ----------------------------------------------------------------- */

static volatile sig_atomic_t got_usr1, got_usr2;

static void on_signal(int sig)
{
        if (sig == SIGUSR1)
                got_usr1++;
        else
                got_usr2 = 1;
}

static int cmd_hold(int argc, char **argv)
{
        gmd_buffer *bufs[MAX_BUFFERS] = { 0 };
        struct sigaction sa = { .sa_handler = on_signal };
        unsigned n, released = 0;
        size_t size, bad = 0;
        uint64_t seed;
        sigset_t block, old;
        gmd_client *client;
        int r;

        if (argc < 3 || client_parse_size("gmd_tier_client", argv[1], &size) < 0)
                return 2;
        n = (unsigned)strtoul(argv[0], NULL, 10);
        seed = strtoull(argv[2], NULL, 10);
        if (n == 0 || n > MAX_BUFFERS)
                return 2;

        sigemptyset(&block);
        sigaddset(&block, SIGUSR1);
        sigaddset(&block, SIGUSR2);
        sigprocmask(SIG_BLOCK, &block, &old);
        sigaction(SIGUSR1, &sa, NULL);
        sigaction(SIGUSR2, &sa, NULL);

        client = client_connect_or_die("gmd_tier_client", "tier-hold");
        for (unsigned i = 0; i < n; i++) {
                r = gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, WAIT_MS,
                              &bufs[i]);
                if (r < 0)
                        die_call("alloc", i, r);
                fill(bufs[i], seed, i, 0);
        }
        printf("ready");
        for (unsigned i = 0; i < n; i++)
                printf(" %llu", (unsigned long long)gmd_buffer_id(bufs[i]));
        printf("\n");

        while (!got_usr2) {
                sigsuspend(&old);
                while (got_usr1 > 0 && released < n) {
                        got_usr1--;
                        r = gmd_release(client, bufs[released]);
                        if (r < 0)
                                die_call("release", released, r);
                        printf("released %u\n", released++);
                }
        }

        for (unsigned i = 0; i < n; i++)
                printf("tier %u %s\n", i, gmd_tier_name(gmd_buffer_tier(bufs[i])));
        for (unsigned i = 0; i < n; i++) {
                if (i < released && (r = gmd_acquire(client, bufs[i], WAIT_MS)) < 0)
                        die_call("acquire", i, r);
                if (gmd_buffer_tier(bufs[i]) != GMD_TIER_VRAM)
                        die_call("acquire-left-on-host", i, 0);
                bad += check(bufs[i], seed, i, 0);
                r = gmd_free(client, bufs[i]);
                if (r < 0)
                        die_call("free", i, r);
        }
        gmd_disconnect(client);
        printf("checked %u bad-words %zu\n", n, bad);
        return bad ? 1 : 0;
}

/* ---- move ----------------------------------------------------------------- */

static int cmd_move(int argc, char **argv)
{
        gmd_client *client;
        gmd_buffer *b = NULL;
        size_t size;
        int r;

        if (argc < 2 || client_parse_size("gmd_tier_client", argv[0], &size) < 0)
                return 2;
        if (strcmp(argv[1], "out") != 0 && strcmp(argv[1], "in") != 0 &&
            strcmp(argv[1], "acquire") != 0)
                return 2;

        client = client_connect_or_die("gmd_tier_client", "tier-move");
        r = gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, WAIT_MS, &b);
        if (r < 0)
                die_call("alloc", 0, r);
        fill(b, 9, 0, 0);
        if ((r = gmd_release(client, b)) < 0)
                die_call("release", 0, r);
        if ((r = gmd_pageout(client, b)) < 0)
                die_call("pageout", 0, r);
        if (strcmp(argv[1], "out") != 0) {
                if ((r = gmd_wait(client, b, WAIT_MS)) < 0)
                        die_call("wait", 0, r);
                if (gmd_buffer_tier(b) != GMD_TIER_HOST)
                        die_call("pageout-left-in-vram", 0, 0);
        }
        if (strcmp(argv[1], "in") == 0 && (r = gmd_prefetch(client, b)) < 0)
                die_call("prefetch", 0, r);
        printf("moving %llu\n", (unsigned long long)gmd_buffer_id(b));
        if (strcmp(argv[1], "acquire") == 0) {
                /* The test kills us while this waits for the swap-in. */
                r = gmd_acquire(client, b, GMD_WAIT_FOREVER);
                printf("acquired %d\n", r);
        }
        for (;;)
                pause();
}

/* ---- rounds --------------------------------------------------------------- */

static int cmd_rounds(int argc, char **argv)
{
        gmd_buffer *bufs[MAX_BUFFERS] = { 0 };
        unsigned gen[MAX_BUFFERS] = { 0 };  /* pattern each one holds */
        unsigned n, rounds, swapped_in = 0, errors = 0;
        size_t size, bad = 0;
        gmd_client *client;
        uint64_t seed;
        int r;

        if (argc < 4 || client_parse_size("gmd_tier_client", argv[1], &size) < 0)
                return 2;
        n = (unsigned)strtoul(argv[0], NULL, 10);
        rounds = (unsigned)strtoul(argv[2], NULL, 10);
        seed = strtoull(argv[3], NULL, 10);
        if (n == 0 || n > MAX_BUFFERS)
                return 2;

        client = client_connect_or_die("gmd_tier_client", "tier-rounds");
        /* Released before the next is asked for: together the workers want
         * more than the pool, so holding all at once could deadlock them. */
        for (unsigned i = 0; i < n; i++) {
                r = gmd_alloc(client, size, 0, GMD_ALLOC_SWAPPABLE, WAIT_MS,
                              &bufs[i]);
                if (r < 0)
                        die_call("alloc", i, r);
                fill(bufs[i], seed, i, 0);
                if ((r = gmd_release(client, bufs[i])) < 0)
                        die_call("release", i, r);
        }
        for (unsigned round = 1; round <= rounds + 1; round++) {
                for (unsigned i = 0; i < n; i++) {
                        size_t b;

                        if (gmd_buffer_tier(bufs[i]) == GMD_TIER_HOST)
                                swapped_in++;
                        r = gmd_acquire(client, bufs[i], WAIT_MS);
                        if (r < 0) {
                                printf("failed acquire %u round %u %d %s\n", i,
                                       round, r, gmd_last_error());
                                errors++;
                                continue;
                        }
                        if (gmd_buffer_tier(bufs[i]) != GMD_TIER_VRAM) {
                                printf("acquired-on-host %u round %u\n", i, round);
                                errors++;
                        }
                        b = check(bufs[i], seed, i, gen[i]);
                        if (b)
                                printf("mismatch buffer %u round %u words %zu\n",
                                       i, round, b);
                        bad += b;
                        if (round > rounds) {
                                /* The last pass checks and frees: holding
                                 * each until the end would hold the pool. */
                                if ((r = gmd_free(client, bufs[i])) < 0) {
                                        printf("failed free %u %d %s\n", i, r,
                                               gmd_last_error());
                                        errors++;
                                }
                                continue;
                        }
                        fill(bufs[i], seed, i, round);
                        gen[i] = round;
                        if ((r = gmd_release(client, bufs[i])) < 0) {
                                printf("failed release %u %d %s\n", i, r,
                                       gmd_last_error());
                                errors++;
                        }
                }
        }
        gmd_disconnect(client);
        printf("done rounds %u bad-words %zu swapped-in %u errors %u\n", rounds,
               bad, swapped_in, errors);
        return bad || errors ? 1 : 0;
}

int main(int argc, char **argv)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc < 2) {
                fprintf(stderr, "usage: gmd_tier_client hold|move|rounds ...\n");
                return 2;
        }
        if (strcmp(argv[1], "hold") == 0)
                return cmd_hold(argc - 2, argv + 2);
        if (strcmp(argv[1], "move") == 0)
                return cmd_move(argc - 2, argv + 2);
        if (strcmp(argv[1], "rounds") == 0)
                return cmd_rounds(argc - 2, argv + 2);
        fprintf(stderr, "gmd_tier_client: unknown command '%s'\n", argv[1]);
        return 2;
}
