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
 * test_terms does the same with SIGTERM, which `systemctl restart` sends:
 * the daemon leaves everything as a SIGKILL would (main.c).
 *
 * GMD_RESTART_KILLS sets the number of kills (default 100; the longer
 * variant: GMD_RESTART_KILLS=1000 ctest -R test_restart).
 *
 * Built twice. As integration.test_restart (CI) it runs on the sim
 * backend, the clients reading and writing their buffers through the
 * CPU. With GMD_RESTART_GPU it is tests/gpu/test_restart_kills (the GPU
 * suite): the same kill loop, run_kills, on gpu-memd --backend cuda,
 * whose clients fill and check their buffers on the GPU with CUDA copies
 * (gmd_restart_client picks that from the daemon's backend), on one GPU
 * (CUDA device 0 unless CUDA_VISIBLE_DEVICES says otherwise), pools
 * sized for an H200: 256 MiB of VRAM against about 384 MiB of buffers of
 * 8, 16 and 24 MiB, 1 GiB of host memory. It exits 77 after one "SKIP: no
 * usable GPU (why)" line where no GPU is usable.
 */
#include <errno.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"
#ifdef GMD_RESTART_GPU
#include "cuda_driver.h"
#include "gpu_kernels.h"
#include "gpu_proc.h"
#endif

#define N_CLIENTS 3
#define BUFFERS_PER_CLIENT 8

/* What a run of kills runs on. */
typedef struct kill_setup {
        const char *backend;    /* gpu-memd --backend */
        const char *access;     /* how the clients must say they reached
                                 * their bytes (their DONE line) */
        const char *extra;      /* config after the test's own, or NULL */
        const char *size_mib;   /* the clients' smallest buffer (MiB; the
                                 * others 2 and 3 times that) */
        int pause_ms;           /* a daemon lives 5 ms and up to this long
                                 * after its "ready:" line */
        int signal;             /* what kills it; 0: SIGKILL */
} kill_setup;

/* The last `lines` lines of `text` ("" for NULL). */
static const char *tail_of(const char *text, int lines)
{
        const char *p;

        if (!text)
                return "";
        p = text + strlen(text);
        while (p > text && lines >= 0)
                if (*--p == '\n')
                        lines--;
        return p == text ? p : p + 1;
}

/* The ends of the daemons' log and of the clients' stderr on stdout, for
 * a failure: the test's folder goes with the fixture. */
static void show_logs(const harness *h)
{
        char path[160], *log = harness_read_log(h), *errs;

        snprintf(path, sizeof(path), "%s/clients.log", h->dir);
        errs = harness_read_file(path);
        print_message("---- the end of gpu-memd's log (%s):\n%s"
                      "---- the end of the clients' stderr:\n%s----\n",
                      h->log_path, tail_of(log, 150), tail_of(errs, 50));
        free(log);
        free(errs);
}

/* `kills` kills under the three clients, on `setup`'s backend with its
 * config after the test's own; *ret_peer: device 1's VRAM used at the
 * end. Ends with one summary line: kills, time, what was checked. */
static void run_kills(harness_fixture *f, unsigned kills,
                      const kill_setup *setup, uint64_t *ret_peer)
{
        const char *const daemon_args[] = { "--backend", setup->backend, NULL };
        harness_proc *clients[N_CLIENTS];
        uint64_t want_buffers = 0, want_bytes = 0, checked = 0, checks = 0;
        uint64_t t0, starts_ms = 0, kills_ms;
        unsigned seed = (unsigned)getpid();
        gmd_status *st = NULL;
        gmd_client *probe = NULL;

        print_message("test_restart: %u kills on the %s backend, seed %u\n",
                      kills, setup->backend, seed);
        harness_init_small(&f->h, getenv("GMD_RESTART_DEBUG") ?
                           "[daemon]\nlog_level = debug\n" : NULL);
        harness_append_config(&f->h, "[pools]\nhost_limit = 512M\n"
                                   "[swap]\nchunk_size = 2M\n"
                                   "[sim]\ncopy_rate = 2G\n"
                                   "[restart]\nkeep = keeper\nhold_s = 30\n"
                                   "claim_timeout_s = 30\n");
        if (setup->extra)
                harness_append_config(&f->h, setup->extra);
        harness_start(&f->h, daemon_args);
        print_message("test_restart: in %s\n", f->h.dir);
        for (unsigned i = 0; i < N_CLIENTS; i++) {
                char s[16], n[16];
                const char *argv[] = { GMD_RESTART_CLIENT_PATH, s, n,
                                       setup->size_mib, NULL };

                snprintf(s, sizeof(s), "%u", seed + i);
                snprintf(n, sizeof(n), "%u", BUFFERS_PER_CLIENT);
                clients[i] = harness_track_ready(f, argv, "READY",
                                                 "allocate its buffers");
        }
        t0 = harness_now_ms();
        for (unsigned k = 0; k < kills; k++) {
                uint64_t t;

                harness_sleep_ms(5 + (int)(rand_r(&seed) % setup->pause_ms));
                harness_kill(&f->h, setup->signal ? setup->signal : SIGKILL);
                t = harness_now_ms();
                harness_start(&f->h, daemon_args);
                starts_ms += harness_now_ms() - t;
                if ((k + 1) % 25 == 0 && k + 1 < kills)
                        print_message("test_restart: %u kills in %.1f s\n",
                                      k + 1, (harness_now_ms() - t0) / 1e3);
        }
        kills_ms = harness_now_ms() - t0;
        print_message("test_restart: %u kills in %llu ms (a start to "
                      "\"ready:\" %llu ms on average)\n", kills,
                      (unsigned long long)kills_ms,
                      (unsigned long long)(kills ? starts_ms / kills : 0));
        /* Let the last restore finish, then stop the clients: each
         * checks every buffer and says what it holds. */
        harness_sleep_ms(300);
        for (unsigned i = 0; i < N_CLIENTS; i++)
                kill(clients[i]->pid, SIGTERM);
        for (unsigned i = 0; i < N_CLIENTS; i++) {
                unsigned long long ops, buffers, bytes, seen;
                char *line, access[16];

                /* Its first line after READY: DONE, or what failed. */
                line = harness_read_line(clients[i], "", 60000);
                if (!line || strncmp(line, "DONE", 4) != 0) {
                        int status;

                        show_logs(&f->h);
                        status = harness_wait_proc(clients[i], 1000);
                        fail_msg("client %u did not finish (exit %d): %s "
                                 "(daemon log in %s with GMD_TEST_KEEP=1)", i,
                                 harness_exit_code(status),
                                 line ? line : "(no output)", f->h.dir);
                }
                assert_int_equal(sscanf(line, "DONE %llu %llu %llu %llu %15s",
                                        &ops, &buffers, &bytes, &seen,
                                        access), 5);
                print_message("client %u: %llu operations, %llu buffers, "
                              "%llu bytes\n", i, ops, buffers, bytes);
                assert_true(ops > 0);
                assert_string_equal(access, setup->access);
                want_buffers += buffers;
                want_bytes += bytes;
                checks += ops + buffers;
                checked += seen;
                free(line);
        }
        /* The daemon's view equals the clients'. */
        assert_int_equal(gmd_connect(f->h.socket_path, "probe", &probe), 0);
        assert_int_equal(gmd_query_status(probe, GMD_STATUS_CLIENTS, 0, &st), 0);
        {
                uint64_t held = 0;

                for (size_t i = 0; i < st->n_clients; i++)
                        held += st->clients[i].bytes;
                if (st->total_buffers != want_buffers || held != want_bytes) {
                        show_logs(&f->h);
                        fail_msg("the daemon counts %llu buffers of %llu "
                                 "bytes, the clients hold %llu of %llu",
                                 (unsigned long long)st->total_buffers,
                                 (unsigned long long)held,
                                 (unsigned long long)want_buffers,
                                 (unsigned long long)want_bytes);
                }
        }
        /* This daemon took its state over from the one killed before it. */
        assert_int_equal(st->restores, kills > 0 ? 1 : 0);
        /* No restore that ended lost a buffer (one killed before its
         * claims ended says nothing). */
        if (harness_log_count(&f->h, "restart: restore done") !=
            harness_log_count(&f->h, ", 0 lost")) {
                show_logs(&f->h);
                fail_msg("a restore lost buffers: grep \"lost\" in the log");
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
        harness_kill(&f->h, SIGINT);
        print_message("test_restart: PASS on %s: %u kills in %.1f s, %llu "
                      "buffer checks (%llu MiB, through %s), every byte as "
                      "written; the daemon's accounting equals the clients' "
                      "(%llu buffers, %llu MiB)\n", setup->backend, kills,
                      kills_ms / 1e3, (unsigned long long)checks,
                      (unsigned long long)(checked >> 20), setup->access,
                      (unsigned long long)want_buffers,
                      (unsigned long long)(want_bytes >> 20));
}

static unsigned kills_wanted(unsigned fallback)
{
        const char *env = getenv("GMD_RESTART_KILLS");

        return env ? (unsigned)strtoul(env, NULL, 10) : fallback;
}

#ifndef GMD_RESTART_GPU
/* The sim backend (CI): copies at 2 GB/s, so kills land mid-copy. */
static const kill_setup sim_setup = {
        .backend = "sim", .access = "cpu", .size_mib = "2", .pause_ms = 120,
};

static void test_kills(void **state)
{
        uint64_t peer;

        run_kills(*state, kills_wanted(100), &sim_setup, &peer);
}

/* The same with SIGTERM (systemctl restart), which once refused the
 * allocations that waited and zeroed the host copies the record named. */
static void test_terms(void **state)
{
        kill_setup setup = sim_setup;
        uint64_t peer;

        setup.signal = SIGTERM;
        run_kills(*state, kills_wanted(20), &setup, &peer);
}

/* The same on two devices that reach each other, device 1 idle: what
 * leaves device 0 goes to device 1's VRAM (the peer tier) while it has
 * room, host memory after; the record names those buffers as held by
 * device 1, and every restart takes them back with their bytes. */
static void test_kills_peer(void **state)
{
        kill_setup setup = sim_setup;
        uint64_t peer;

        setup.extra = "[sim]\ndevices = 2\npeer_rate = 10G\n"
                      "[pools]\npeer_headroom = 0\n";
        run_kills(*state, kills_wanted(30), &setup, &peer);
        print_message("test_restart: %llu MiB on device 1 at the end\n",
                      (unsigned long long)(peer >> 20));
        assert_true(peer > 0);
}

/* Does the restore-done line `line` say every buffer found was taken back
 * or freed by its owner, at least `least` taken back, none lost? */
static bool restore_whole(const char *line, unsigned least)
{
        const char *at = line ? strstr(line, "restore done in ") : NULL;
        unsigned long long ms;
        unsigned back, found, freed, lost;
        const char *f;

        if (!at || sscanf(at, "restore done in %llu ms: %u of %u buffer(s)",
                          &ms, &back, &found) != 3)
                return false;
        f = strstr(at, "), ");
        if (!f || sscanf(f, "), %u freed (being freed or never answered), %u "
                         "lost", &freed, &lost) != 2)
                return false;
        return lost == 0 && back + freed == found && back >= least;
}

/* The next daemon's restore done, its line saying `want`, whole
 * (restore_whole) with at least `least` buffers back. */
static void expect_restore(const harness *h, const char *want, unsigned least)
{
        char *line = harness_wait_log(h, "restart: restore done", 20000);

        if (!line || !strstr(line, want) || !restore_whole(line, least)) {
                show_logs(h);
                fail_msg("want %s, nothing lost: %s", want,
                         line ? line : "no \"restore done\" in the log");
        }
        free(line);
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
        harness_kill(&f->h, SIGKILL);

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
        /* Every buffer taken back, but for one the client was freeing or
         * allocating at the kill (freed, not lost): the client holds 4,
         * less one between a free and the allocation after it. */
        line = harness_wait_log(&f->h, "restart: restore done", 20000);
        if (!restore_whole(line, 3)) {
                show_logs(&f->h);
                fail_msg("the buffers were not taken back: %s",
                         line ? line : "no \"restore done\" in the log");
        }
        free(line);
        kill(client->pid, SIGTERM);
        line = harness_read_line(client, "", 30000);
        if (!line || strncmp(line, "DONE", 4) != 0)
                fail_msg("the client did not finish: %s", line ? line : "-");
        free(line);
        kill(client->pid, SIGUSR1);
        assert_int_equal(harness_exit_code(harness_wait_proc(client, 20000)), 0);
        harness_kill(&f->h, SIGINT);
}

typedef struct free_call {
        gmd_client *client;
        gmd_buffer *buffer;
        int result;
} free_call;

static void *free_thread(void *arg)
{
        free_call *call = arg;

        call->result = gmd_free(call->client, call->buffer);
        return NULL;
}

/* A buffer being freed when the daemon dies (its FreeRequest sent, never
 * read; the fds the client kept for a restart closed first) is freed by
 * the next daemon, not counted lost, and the free returns 0; the other
 * buffer comes back with its bytes. */
static void test_free_at_kill(void **state)
{
        harness_fixture *f = *state;
        gmd_client *client;
        gmd_buffer *keep, *gone;
        gmd_status *st;
        free_call call;
        pthread_t thread;

        harness_init_small(&f->h, "[restart]\nkeep = keeper\nhold_s = 30\n"
                                  "claim_timeout_s = 30\n");
        harness_start(&f->h, NULL);
        setenv("GPU_MEMD_CACHE", "0", 1);       /* gmd_free frees */
        assert_int_equal(gmd_connect(f->h.socket_path, "free-at-kill",
                                     &client), 0);
        unsetenv("GPU_MEMD_CACHE");
        assert_int_equal(gmd_alloc(client, 4 << 20, 0, 0, -1, &keep), 0);
        assert_int_equal(gmd_alloc(client, 4 << 20, 0, 0, -1, &gone), 0);
        memset(gmd_buffer_ptr(keep), 0x5a, 4 << 20);

        /* The daemon stopped (every thread of it, before the free goes
         * out), the free is never read. */
        harness_suspend(f->h.pid);
        call = (free_call){ .client = client, .buffer = gone, .result = 1 };
        assert_int_equal(pthread_create(&thread, NULL, free_thread, &call), 0);
        harness_sleep_ms(200);
        harness_kill(&f->h, SIGKILL);
        harness_start(&f->h, NULL);
        assert_int_equal(pthread_join(thread, NULL), 0);
        assert_int_equal(call.result, 0);

        expect_restore(&f->h, "1 of 2 buffer(s) taken back", 1);
        for (size_t i = 0; i < (4 << 20); i += 4096)
                assert_int_equal(((unsigned char *)gmd_buffer_ptr(keep))[i],
                                 0x5a);
        assert_int_equal(gmd_query_status(client, GMD_STATUS_CLIENTS, 0, &st),
                         0);
        assert_int_equal(st->total_buffers, 1);
        gmd_status_free(st);
        assert_int_equal(gmd_free(client, keep), 0);
        gmd_disconnect(client);
        harness_kill(&f->h, SIGINT);
}

/* A daemon that takes over a run's state and then cannot start (here:
 * its socket path is taken) leaves that state as it found it: the next
 * daemon takes every buffer back, and the bytes of one that was out in
 * the host arena are whole. */
static void test_failed_start(void **state)
{
        harness_fixture *f = *state;
        const char *daemon[] = { GMD_DAEMON_PATH, "--backend", "sim",
                                 "--socket", f->h.socket_path, "--config",
                                 f->h.config_path, NULL };
        gmd_client *client;
        gmd_buffer *in, *out;
        char *err = NULL;
        int status;

        harness_init_small(&f->h, "[pools]\nhost_limit = 256M\n"
                                  "[restart]\nkeep = keeper\nhold_s = 30\n"
                                  "claim_timeout_s = 30\n");
        harness_start(&f->h, NULL);
        assert_int_equal(gmd_connect(f->h.socket_path, "failed-start",
                                     &client), 0);
        assert_int_equal(gmd_alloc(client, 4 << 20, 0, 0, -1, &in), 0);
        assert_int_equal(gmd_alloc(client, 4 << 20, 0, 0, -1, &out), 0);
        memset(gmd_buffer_ptr(in), 0x11, 4 << 20);
        memset(gmd_buffer_ptr(out), 0x77, 4 << 20);
        assert_int_equal(gmd_release(client, out), 0);
        assert_int_equal(gmd_pageout(client, out), 0);
        assert_int_equal(gmd_wait(client, out, 10000), 0);
        harness_kill(&f->h, SIGKILL);

        assert_int_equal(unlink(f->h.socket_path), 0);
        assert_int_equal(mkdir(f->h.socket_path, 0700), 0);
        status = harness_run(&f->h, NULL, daemon, NULL, &err, 10000);
        assert_int_not_equal(harness_exit_code(status), 0);
        if (!strstr(err, "(4 MiB in VRAM, 4 MiB on host)") ||
            !strstr(err, "cannot listen") ||
            !strstr(err, "left untouched"))
                fail_msg("want a takeover, then the state left: %s", err);
        free(err);
        assert_int_equal(rmdir(f->h.socket_path), 0);

        harness_start(&f->h, NULL);
        expect_restore(&f->h, "2 of 2 buffer(s) taken back", 2);
        assert_int_equal(gmd_acquire(client, out, 10000), 0);
        for (size_t i = 0; i < (4 << 20); i += 4096) {
                assert_int_equal(((unsigned char *)gmd_buffer_ptr(in))[i], 0x11);
                assert_int_equal(((unsigned char *)gmd_buffer_ptr(out))[i], 0x77);
        }
        gmd_disconnect(client);
        harness_kill(&f->h, SIGINT);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_kills, harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_terms, harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_kills_peer, harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_other_version,
                                                harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_free_at_kill,
                                                harness_setup,
                                                harness_teardown),
                cmocka_unit_test_setup_teardown(test_failed_start,
                                                harness_setup,
                                                harness_teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
/* The cuda backend on one GPU (the GPU suite). VRAM pool 256 MiB against
 * 3 x 8 buffers of 8, 16 or 24 MiB (about 384 MiB: the sim run's ratio,
 * so buffers move), 1 GiB of host memory; no peer tier, as in the sim
 * run. A cuda daemon takes longer to start than a sim one (about half a
 * second to "ready:" on one GPU with this small an arena, going by the
 * GPU suite's logs), so each lives a while longer after it (up to 250 ms,
 * not 120), for the clients to work between kills: 100 kills should take
 * one to two minutes; the progress lines say how it goes. */
static const kill_setup cuda_setup = {
        .backend = "cuda", .access = "cuda", .size_mib = "8", .pause_ms = 250,
        .extra = "[pools]\nvram_limit = 256M\nhost_limit = 1G\n"
                 "peer_tier = off\n",
};

static void test_kills_cuda(void **state)
{
        uint64_t peer;

        run_kills(*state, kills_wanted(100), &cuda_setup, &peer);
}

/*
 * The calls libgpumem's cuda mapper makes when this process connects (the
 * accounting probe at the end of run_kills), made once before any
 * fixture: whatever files the driver opens for them are then open when
 * harness_setup counts this process's fds, and harness_teardown finds
 * the same count.
 */
static void driver_settle(const gmd_cuda_driver *cu)
{
        CUmemAllocationProp prop = { 0 };
        int n = cuda_driver_device_count(cu);

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        for (int i = 0; i < n; i++) {
                size_t granularity;
                CUdevice dev;
                CUuuid id;

                if (cu->cuDeviceGet(&dev, i) == CUDA_SUCCESS)
                        cu->cuDeviceGetUuid(&id, dev);
                prop.location.id = i;
                cu->cuMemGetAllocationGranularity(&granularity, &prop,
                                CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_kills_cuda, harness_setup,
                                                harness_teardown),
        };
        const gmd_cuda_driver *cu;

        setvbuf(stdout, NULL, _IOLBF, 0);
        /* One GPU: a daemon opens every GPU it sees at each start, and
         * [pools] host_stock is per GPU. The daemons and clients inherit
         * it, so all of them see the same one as their device 0. */
        setenv("CUDA_VISIBLE_DEVICES", "0", 0);
        cu = gpu_usable();
        if (!cu)
                return GPU_TEST_SKIP;
        gpu_say_device(cu, 0, "the daemon's device 0, where the clients' "
                       "buffers are and their copies run");
        driver_settle(cu);
        return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
