/*
 * test_cache — libgpumem's cache of idle mappings against the real gpu-memd
 * (sim backend, a 64 MiB pool in 2 MiB steps): a freed buffer stays parked
 * and counted as its client's, the next allocation of its shape takes it
 * back without a new buffer; when another process needs the room the
 * daemon reclaims parked buffers and the client returns them, also for an
 * allocation that will not wait (the reclaim grace); nothing is left
 * counted once the clients are gone; GPU_MEMD_CACHE=0 frees at once.
 *
 * Client A is this test process (its library's I/O thread answers the
 * reclaims while the test waits for B); client B is gmd_test_client, a
 * process of its own, which also checks that the memory it got from A's
 * cache reads as zeros.
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

#define N_PARKED 8
#define PARKED_SIZE (4 * MiB)

typedef harness_fixture fixture;

/* The cache as it ships: no setting of a test before leaks into this one. */
static int setup(void **state)
{
        unsetenv(GMD_CACHE_ENV);
        unsetenv(GMD_CACHE_LIMIT_ENV);
        return harness_setup(state);
}

static int teardown(void **state)
{
        unsetenv(GMD_CACHE_ENV);
        return harness_teardown(state);
}

/* This client's row in the daemon's status. */
static gmd_client_status client_row(gmd_client *c, uint64_t client_id)
{
        gmd_status *s = harness_status(c);
        gmd_client_status row = { .client_id = 0 };

        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].client_id == client_id)
                        row = s->clients[i];
        gmd_status_free(s);
        if (row.client_id != client_id)
                fail_msg("client %llu is not in the status",
                         (unsigned long long)client_id);
        return row;
}

/* Buffers of process `pid` the daemon lists as parked. */
static unsigned parked_buffers(gmd_client *c, uint32_t pid)
{
        gmd_status *s = NULL;
        unsigned n = 0;

        assert_int_equal(gmd_query_status(c, GMD_STATUS_BUFFERS, pid, &s), 0);
        for (size_t i = 0; i < s->n_buffers; i++)
                n += s->buffers[i].parked != 0;
        gmd_status_free(s);
        return n;
}

/* The client id the daemon gave `c`: its status row with our pid. */
static uint64_t own_client_id(gmd_client *c)
{
        gmd_status *s = harness_status(c);
        uint64_t id = 0;

        for (size_t i = 0; i < s->n_clients; i++)
                if (s->clients[i].pid == (uint32_t)getpid())
                        id = s->clients[i].client_id;
        gmd_status_free(s);
        assert_true(id != 0);
        return id;
}

/* Client A fills and frees N_PARKED buffers: all parked, all counted. */
static uint64_t park_eight(fixture *f)
{
        gmd_buffer *b[N_PARKED];
        uint64_t id;

        f->client = harness_client(&f->h, "cache-a");
        id = own_client_id(f->client);
        for (int i = 0; i < N_PARKED; i++) {
                assert_int_equal(gmd_alloc(f->client, PARKED_SIZE, 0, 0, GMD_NO_WAIT,
                                           &b[i]), 0);
                memset(gmd_buffer_ptr(b[i]), 0xa0 + i, PARKED_SIZE);
        }
        for (int i = 0; i < N_PARKED; i++)
                assert_int_equal(gmd_free(f->client, b[i]), 0);
        assert_int_equal(client_row(f->client, id).parked_bytes,
                         N_PARKED * PARKED_SIZE);
        assert_int_equal(client_row(f->client, id).bytes, N_PARKED * PARKED_SIZE);
        assert_int_equal(harness_vram_used(f->client, 0), N_PARKED * PARKED_SIZE);
        assert_int_equal(parked_buffers(f->client, (uint32_t)getpid()), N_PARKED);
        return id;
}

/* Run B: one allocation of `size` with `timeout_ms`; it must succeed and
 * read zeros. */
static void run_b(fixture *f, const char *size, const char *timeout_ms)
{
        const char *args[] = { "alloc", size, timeout_ms, NULL };
        harness_proc b = harness_spawn_client(&f->h, args);
        char *out = NULL;
        int status;

        status = harness_finish(&b, &out, 10000);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            !strstr(out, "rc 0") || !strstr(out, "bytes ok")) {
                char *log = harness_read_log(&f->h);

                fail_msg("B (alloc %s, timeout %s) failed, status %#x:\n%s\n"
                         "daemon log:\n%s", size, timeout_ms, status, out, log);
        }
        free(out);
}

static void test_hit_reuses_and_counts(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL, *again = NULL;
        uint64_t id;
        void *p;

        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "cache-a");
        id = own_client_id(f->client);
        assert_int_equal(gmd_alloc(f->client, 3 * MiB, 0, 0, GMD_NO_WAIT, &b), 0);
        p = gmd_buffer_ptr(b);
        memset(p, 0x3c, 4 * MiB);
        assert_int_equal(gmd_free(f->client, b), 0);
        /* Parked: still the client's, listed as cached. */
        assert_int_equal(client_row(f->client, id).parked_bytes, 4 * MiB);
        assert_int_equal(parked_buffers(f->client, (uint32_t)getpid()), 1);

        /* 3.5 MiB rounds to the same 4 MiB: the same buffer, its bytes. */
        assert_int_equal(gmd_alloc(f->client, 3 * MiB + MiB / 2, 0, 0, GMD_NO_WAIT,
                                   &again), 0);
        assert_ptr_equal(gmd_buffer_ptr(again), p);
        assert_int_equal(((uint8_t *)p)[4 * MiB - 1], 0x3c);
        assert_int_equal(client_row(f->client, id).parked_bytes, 0);
        assert_int_equal(client_row(f->client, id).buffers, 1);
        assert_int_equal(harness_vram_used(f->client, 0), 4 * MiB);

        assert_int_equal(gmd_free(f->client, again), 0);
        assert_int_equal(gmd_trim_cache(f->client), 1);
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 5000), 0);
        assert_int_equal(client_row(f->client, id).parked_bytes, 0);
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
}

static void test_other_process_reclaims(void **state)
{
        fixture *f = *state;
        gmd_client *watch;
        uint64_t id;

        harness_start_small(&f->h, NULL);
        id = park_eight(f);

        /* 48 MiB: the 32 MiB free and 16 MiB of A's cache. */
        run_b(f, "48M", "5000");
        assert_int_equal(client_row(f->client, id).parked_bytes, 16 * MiB);
        assert_int_equal(parked_buffers(f->client, (uint32_t)getpid()), 4);

        /* The whole pool, not waiting: only the grace for reclaims lets
         * it through, and it takes the rest of A's cache. */
        run_b(f, "64M", "0");
        assert_int_equal(client_row(f->client, id).parked_bytes, 0);
        assert_int_equal(client_row(f->client, id).bytes, 0);
        assert_int_equal(parked_buffers(f->client, (uint32_t)getpid()), 0);
        /* A's side agrees: nothing left to return. */
        assert_int_equal(gmd_trim_cache(f->client), 0);

        /* A still works, and nothing stays counted once both are gone. */
        {
                gmd_buffer *b = NULL;

                assert_int_equal(gmd_alloc(f->client, PARKED_SIZE, 0, 0,
                                           GMD_NO_WAIT, &b), 0);
                assert_int_equal(gmd_free(f->client, b), 0);
        }
        f->client = gmd_disconnect(f->client);
        watch = harness_client(&f->h, "watch");
        assert_int_equal(harness_wait_clients(watch, 1, 5000), 1);
        assert_int_equal(harness_wait_vram_used(watch, 0, 0, 5000), 0);
        gmd_disconnect(watch);
        harness_stop(&f->h);
}

static void test_cache_off_frees_at_once(void **state)
{
        fixture *f = *state;
        gmd_buffer *b = NULL;

        setenv(GMD_CACHE_ENV, "0", 1);
        harness_start_small(&f->h, NULL);
        f->client = harness_client(&f->h, "cache-off");
        assert_int_equal(gmd_alloc(f->client, PARKED_SIZE, 0, 0, GMD_NO_WAIT, &b),
                         0);
        assert_int_equal(harness_vram_used(f->client, 0), PARKED_SIZE);
        assert_int_equal(gmd_free(f->client, b), 0);
        assert_int_equal(harness_wait_vram_used(f->client, 0, 0, 5000), 0);
        assert_int_equal(parked_buffers(f->client, (uint32_t)getpid()), 0);
        f->client = gmd_disconnect(f->client);
        harness_stop(&f->h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_hit_reuses_and_counts,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_other_process_reclaims,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_cache_off_frees_at_once,
                                                setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
