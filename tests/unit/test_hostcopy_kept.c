/*
 * test_hostcopy_kept — daemon/core/hostcopy.c, host copies kept after a swap-in,
 * on its own: hand-made buffer records, a fake backend whose mem_destroy
 * records what was released, the host pool paying for every copy. What is
 * checked: a copy is kept only after a read-only lease and only for a
 * SWAPPABLE buffer; taking and putting back; dropping; reclaiming oldest
 * first, never more than needed; the bytes the server counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buffer.h"
#include "hostcopy.h"
#include "server.h"
#include "session.h"

#define MiB (UINT64_C(1) << 20)
#define N 4

typedef struct fixture {
        gmd_server *server;
        gmd_session owner;
        gmd_dbuffer b[N];
} fixture;

static gmd_mem *destroyed[16];
static unsigned n_destroyed;

static void fake_mem_destroy(gmd_backend *be, gmd_mem *mem)
{
        (void)be;
        destroyed[n_destroyed++] = mem;
}

static gmd_backend_ops ops = { .name = "fake", .mem_destroy = fake_mem_destroy };
static gmd_backend backend = { .ops = &ops };

static int setup(void **state)
{
        fixture *f = calloc(1, sizeof(*f));

        assert_non_null(f);
        f->server = calloc(1, sizeof(*f->server));
        assert_non_null(f->server);
        f->server->backend = &backend;
        f->server->devices.n = 1;
        pool_init(&f->server->host.pool, 0, GMD_TIER_HOST, 64 * MiB, 2 * MiB);
        list_init(&f->server->host.copies);
        f->owner.server = f->server;
        for (int i = 0; i < N; i++) {
                f->b[i].id = (uint64_t)i + 1;
                f->b[i].owner = &f->owner;
                f->b[i].size = 8 * MiB;
                f->b[i].tier = GMD_TIER_VRAM;
                f->b[i].flags = GMD_ALLOC_SWAPPABLE;
                list_init(&f->b[i].host_copy_link);
        }
        n_destroyed = 0;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        fixture *f = *state;

        for (unsigned i = 0; i < n_destroyed; i++)
                free(destroyed[i]);
        free(f->server);
        free(f);
        return 0;
}

/* The host backing a swap-in came from: paid for in the host pool (daemon
 * memory: mem->daemon_only, as the arena's are). */
static gmd_mem *host(fixture *f, uint64_t size)
{
        gmd_mem *m = calloc(1, sizeof(*m));

        assert_non_null(m);
        assert_int_equal(pool_take(&f->server->host.pool, size), 0);
        m->fd = -1;
        m->size = size;
        m->tier = GMD_TIER_HOST;
        m->daemon_only = true;
        return m;
}

static void test_kept_only_after_read_only_lease(void **state)
{
        fixture *f = *state;
        gmd_mem *m = host(f, 8 * MiB);

        f->b[0].lease_ro = false;
        assert_false(hostcopy_keep(f->server, &f->b[0], m));
        assert_null(f->b[0].host_copy);
        f->b[0].lease_ro = true;
        assert_true(hostcopy_keep(f->server, &f->b[0], m));
        assert_ptr_equal(f->b[0].host_copy, m);
        assert_int_equal(f->server->host.copy_bytes, 8 * MiB);
        /* one at a time */
        assert_false(hostcopy_keep(f->server, &f->b[0], m));
        hostcopy_drop(f->server, &f->b[0]);
        assert_null(f->b[0].host_copy);
        assert_int_equal(n_destroyed, 1);
        assert_int_equal(f->server->host.copy_bytes, 0);
        assert_int_equal(f->server->host.pool.used, 0);
        hostcopy_drop(f->server, &f->b[0]);         /* none: nothing */
        assert_int_equal(n_destroyed, 1);
}

static void test_spillable_keeps_none(void **state)
{
        fixture *f = *state;
        gmd_mem *m = host(f, 8 * MiB);

        f->b[1].flags = GMD_ALLOC_SPILLABLE;
        f->b[1].lease_ro = true;
        /* its owner maps its host copy: that one is not the daemon's */
        assert_false(hostcopy_keep(f->server, &f->b[1], m));
        assert_int_equal(f->server->host.copy_bytes, 0);
        pool_give(&f->server->host.pool, m->size);
        free(m);
}

static void test_take_and_put_back(void **state)
{
        fixture *f = *state;
        gmd_mem *m = host(f, 8 * MiB), *got;

        f->b[0].lease_ro = true;
        assert_true(hostcopy_keep(f->server, &f->b[0], m));
        got = hostcopy_take(f->server, &f->b[0]);
        assert_ptr_equal(got, m);
        assert_null(f->b[0].host_copy);
        assert_int_equal(f->server->host.copy_bytes, 0);
        /* still paid for: the move out owns it now */
        assert_int_equal(f->server->host.pool.used, 8 * MiB);
        assert_null(hostcopy_take(f->server, &f->b[0]));
        /* the move did not happen, the lease still read only: kept again */
        hostcopy_put_back(f->server, &f->b[0], got);
        assert_ptr_equal(f->b[0].host_copy, m);
        assert_int_equal(n_destroyed, 0);
        /* ... a read-write lease meanwhile: released */
        got = hostcopy_take(f->server, &f->b[0]);
        f->b[0].lease_ro = false;
        hostcopy_put_back(f->server, &f->b[0], got);
        assert_null(f->b[0].host_copy);
        assert_int_equal(n_destroyed, 1);
        assert_int_equal(f->server->host.pool.used, 0);
}

static void test_reclaim_oldest_first_as_needed(void **state)
{
        fixture *f = *state;

        for (int i = 0; i < 3; i++) {
                f->b[i].lease_ro = true;
                assert_true(hostcopy_keep(f->server, &f->b[i], host(f, 8 * MiB)));
        }
        assert_int_equal(f->server->host.copy_bytes, 24 * MiB);
        /* 4 MiB needed: the oldest copy (8 MiB) goes, the others stay */
        assert_int_equal(hostcopy_reclaim(f->server, 4 * MiB), 8 * MiB);
        assert_null(f->b[0].host_copy);
        assert_non_null(f->b[1].host_copy);
        assert_non_null(f->b[2].host_copy);
        assert_int_equal(f->server->host.pool.used, 16 * MiB);
        /* more than there is: all of it, and says so */
        assert_int_equal(hostcopy_reclaim(f->server, 64 * MiB), 16 * MiB);
        assert_int_equal(f->server->host.copy_bytes, 0);
        assert_int_equal(f->server->host.pool.used, 0);
        assert_int_equal(hostcopy_reclaim(f->server, MiB), 0);
        assert_int_equal(n_destroyed, 3);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_kept_only_after_read_only_lease,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_spillable_keeps_none,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_take_and_put_back,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_reclaim_oldest_first_as_needed,
                                                setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
