/*
 * test_restart — gpu-memd killed with SIGKILL at random points under live
 * clients, and started again, many times in a row. Three client
 * processes (gmd_restart_client) keep acquiring, checking, rewriting,
 * releasing, paging out, prefetching, freeing and allocating checksummed
 * buffers on a pool that holds about half of them, so kills land while
 * the daemon is idle, allocating, copying out, copying in, remapping and
 * while allocations wait. The state outlives each daemon through a keeper
 * process ([restart] keep = keeper). After every restart each client
 * claims its buffers back by itself; at the end every byte of every
 * buffer is what its client last wrote (the clients check each one at
 * every acquire and once more at the end) and the daemon's accounting
 * equals the clients' view (buffers and bytes).
 *
 * GMD_RESTART_KILLS sets the number of kills (default 100; the longer
 * variant: GMD_RESTART_KILLS=1000 ctest -R test_restart).
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

#include "harness.h"

#define N_CLIENTS 3
#define BUFFERS_PER_CLIENT 8

static void stop_for_good(harness *h)
{
        int status;

        /* SIGINT stops for good: the keeper drops what it held and goes. */
        kill(h->pid, SIGINT);
        waitpid(h->pid, &status, 0);
        h->pid = 0;
}

static void kill_daemon(harness *h)
{
        kill(h->pid, SIGKILL);
        waitpid(h->pid, NULL, 0);
        h->pid = 0;
}

/* `kills` kills under the three clients, with `extra` config after the
 * test's own; *ret_peer: device 1's VRAM used at the end. */
static void run_kills(harness_fixture *f, unsigned kills, const char *extra,
                      uint64_t *ret_peer)
{
        harness_proc *clients[N_CLIENTS];
        uint64_t want_buffers = 0, want_bytes = 0, t0;
        unsigned seed = (unsigned)getpid();
        gmd_status *st = NULL;
        gmd_client *probe = NULL;

        print_message("test_restart: %u kills, seed %u\n", kills, seed);
        harness_init_small(&f->h, getenv("GMD_RESTART_DEBUG") ?
                           "[daemon]\nlog_level = debug\n" : NULL);
        harness_append_config(&f->h, "[pools]\nhost_limit = 512M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "[sim]\ncopy_rate = 2G\n"
                                   "[restart]\nkeep = keeper\nhold_s = 30\n"
                                   "claim_timeout_s = 30\n");
        if (extra)
                harness_append_config(&f->h, extra);
        harness_start(&f->h, NULL);
        print_message("test_restart: in %s\n", f->h.dir);
        for (unsigned i = 0; i < N_CLIENTS; i++) {
                char s[16], n[16];
                const char *argv[] = { GMD_RESTART_CLIENT_PATH, s, n, NULL };
                char *line;

                snprintf(s, sizeof(s), "%u", seed + i);
                snprintf(n, sizeof(n), "%u", BUFFERS_PER_CLIENT);
                clients[i] = harness_track_ready(f, argv, "READY",
                                                 "allocate its buffers");
                (void)line;
        }
        t0 = harness_now_ms();
        for (unsigned k = 0; k < kills; k++) {
                harness_sleep_ms(5 + (int)(rand_r(&seed) % 120));
                kill_daemon(&f->h);
                harness_start(&f->h, NULL);
        }
        print_message("test_restart: %u kills in %llu ms\n", kills,
                      (unsigned long long)(harness_now_ms() - t0));
        /* Let the last restore finish, then stop the clients: each
         * checks every buffer and says what it holds. */
        harness_sleep_ms(300);
        for (unsigned i = 0; i < N_CLIENTS; i++)
                kill(clients[i]->pid, SIGTERM);
        for (unsigned i = 0; i < N_CLIENTS; i++) {
                unsigned long long ops, buffers, bytes;
                char *line;

                /* Its first line after READY: DONE, or what failed. */
                line = harness_read_line(clients[i], "", 60000);
                if (!line || strncmp(line, "DONE", 4) != 0) {
                        int status = harness_wait_proc(clients[i], 1000);

                        fail_msg("client %u did not finish (exit %d): %s "
                                 "(daemon log in %s with GMD_TEST_KEEP=1)", i,
                                 harness_exit_code(status),
                                 line ? line : "(no output)", f->h.dir);
                }
                assert_int_equal(sscanf(line, "DONE %llu %llu %llu", &ops,
                                        &buffers, &bytes), 3);
                print_message("client %u: %llu operations, %llu buffers, "
                              "%llu bytes\n", i, ops, buffers, bytes);
                assert_true(ops > 0);
                want_buffers += buffers;
                want_bytes += bytes;
                free(line);
        }
        /* The daemon's view equals the clients'. */
        assert_int_equal(gmd_connect(f->h.socket_path, "probe", &probe), 0);
        assert_int_equal(gmd_query_status(probe, GMD_STATUS_CLIENTS, 0, &st), 0);
        assert_int_equal(st->total_buffers, want_buffers);
        /* This daemon took its state over from the one killed before it. */
        assert_int_equal(st->restores, kills > 0 ? 1 : 0);
        {
                uint64_t held = 0;

                for (size_t i = 0; i < st->n_clients; i++)
                        held += st->clients[i].bytes;
                assert_int_equal(held, want_bytes);
        }
        *ret_peer = 0;
        for (size_t i = 0; i < st->n_pools; i++)
                if (st->pools[i].tier == GMD_TIER_VRAM && st->pools[i].device == 1)
                        *ret_peer = st->pools[i].used;
        gmd_status_free(st);
        gmd_disconnect(probe);
        for (unsigned i = 0; i < N_CLIENTS; i++) {
                kill(clients[i]->pid, SIGUSR1);
                assert_int_equal(harness_exit_code(harness_wait_proc(clients[i],
                                                                     20000)), 0);
        }
        stop_for_good(&f->h);
}

static unsigned kills_wanted(unsigned fallback)
{
        const char *env = getenv("GMD_RESTART_KILLS");

        return env ? (unsigned)strtoul(env, NULL, 10) : fallback;
}

static void test_kills(void **state)
{
        uint64_t peer;

        run_kills(*state, kills_wanted(100), NULL, &peer);
}

/* The same on two devices that reach each other, device 1 idle: what
 * leaves device 0 goes to device 1's VRAM (the peer tier) while it has
 * room, host memory after; the record names those buffers as held by
 * device 1, and every restart takes them back with their bytes. */
static void test_kills_peer(void **state)
{
        uint64_t peer;

        run_kills(*state, kills_wanted(30),
                  "[sim]\ndevices = 2\npeer_rate = 10G\n"
                  "[pools]\npeer_headroom = 0\n", &peer);
        print_message("test_restart: %llu MiB on device 1 at the end\n",
                      (unsigned long long)(peer >> 20));
        assert_true(peer > 0);
}

/* A daemon that finds a record it cannot read (another layout version:
 * an upgrade or a downgrade that changed it) refuses to start, says why,
 * and drops nothing: the daemon that can read it takes every buffer back
 * and the client, which waited meanwhile, finds every byte. */
static void test_other_version(void **state)
{
        harness_fixture *f = *state;
        const char *argv[] = { GMD_RESTART_CLIENT_PATH, "7", "4", NULL };
        const char *daemon[] = { GMD_DAEMON_PATH, "--backend", "sim",
                                 "--socket", f->h.socket_path, "--config",
                                 f->h.config_path, NULL };
        harness_proc *client;
        char *out = NULL, *err = NULL, *line;
        int status;

        harness_init_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                  "[restart]\nkeep = keeper\nhold_s = 30\n"
                                  "claim_timeout_s = 30\n");
        setenv("GMD_TEST_LEDGER_VERSION", "99", 1);
        harness_start(&f->h, NULL);
        client = harness_track_ready(f, argv, "READY", "allocate its buffers");
        harness_sleep_ms(100);
        kill_daemon(&f->h);

        /* This daemon reads versions 1 and 2 only. */
        unsetenv("GMD_TEST_LEDGER_VERSION");
        status = harness_run(&f->h, NULL, daemon, &out, &err, 10000);
        assert_int_not_equal(harness_exit_code(status), 0);
        assert_non_null(strstr(err, "cannot be read"));
        assert_non_null(strstr(err, "version 99"));
        assert_non_null(strstr(err, "Nothing was dropped"));
        free(out);
        free(err);

        /* The one that reads it takes everything back. */
        setenv("GMD_TEST_LEDGER_VERSION", "99", 1);
        harness_start(&f->h, NULL);
        unsetenv("GMD_TEST_LEDGER_VERSION");
        line = harness_wait_log(&f->h, "4 of 4 buffer(s) taken back", 20000);
        if (!line)
                fail_msg("the buffers were not taken back:\n%s",
                         harness_read_log(&f->h));
        free(line);
        kill(client->pid, SIGTERM);
        line = harness_read_line(client, "", 30000);
        if (!line || strncmp(line, "DONE", 4) != 0)
                fail_msg("the client did not finish: %s", line ? line : "-");
        free(line);
        kill(client->pid, SIGUSR1);
        assert_int_equal(harness_exit_code(harness_wait_proc(client, 20000)), 0);
        stop_for_good(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_kills, harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_kills_peer, harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_other_version,
                                                harness_setup,
                                                harness_teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
