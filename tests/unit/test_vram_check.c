/*
 * test_vram_check — daemon/core/vram.c: the daemon's VRAM against the driver's
 * free memory. The arithmetic (what is unaccounted, what an allocation
 * could get, which status shows as free, what fits) and the check an
 * allocation passes, against a fake backend whose device_info says what a
 * driver would: an allocation the pool has room for but the
 * GPU has not is refused with ERR_NO_MEMORY and the sentence; one that
 * fits beside the outside use, or fits with the backend's spare chunks,
 * passes; a driver that cannot be read lets it through (the backend's own
 * failure then speaks).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gpumem.pb-c.h"
#include "server.h"
#include "vram.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* What the fake driver says. */
static gmd_device_info fake;
static int fake_error;

static int fake_device_info(gmd_backend *b, unsigned device,
                            gmd_device_info *ret_info)
{
        (void)b;
        (void)device;
        if (fake_error)
                return fake_error;
        *ret_info = fake;
        return 0;
}

static const gmd_backend_ops fake_ops = {
        .name = "fake",
        .device_info = fake_device_info,
};

static gmd_backend fake_backend = { .ops = &fake_ops };
static gmd_pool pool;
static gmd_server server;

static int setup(void **state)
{
        (void)state;
        memset(&server, 0, sizeof(server));
        memset(&fake, 0, sizeof(fake));
        fake_error = 0;
        pool_init(&pool, 0, GMD_TIER_VRAM, 64 * GiB, 2 * MiB);
        server.backend = &fake_backend;
        server.devices.n = 1;
        server.devices.pools = &pool;
        return 0;
}

static void test_unaccounted(void **state)
{
        (void)state;
        /* 80 GiB card, 30 free, the daemon made 40: 10 are someone else's. */
        assert_int_equal(vram_unaccounted(80 * GiB, 30 * GiB, 40 * GiB), 10 * GiB);
        /* Read a moment apart: never below zero. */
        assert_int_equal(vram_unaccounted(80 * GiB, 50 * GiB, 40 * GiB), 0);
        assert_int_equal(vram_unaccounted(80 * GiB, 90 * GiB, 0), 0);
}

static void test_fits(void **state)
{
        gmd_vram_view v = { .known = true, .free = 4 * GiB, .spare = 64 * MiB };

        (void)state;
        assert_true(vram_fits(&v, 4 * GiB));
        assert_true(vram_fits(&v, 4 * GiB + 64 * MiB));
        assert_false(vram_fits(&v, 4 * GiB + 66 * MiB));
        v.known = false;        /* never read: nothing to refuse on */
        assert_true(vram_fits(&v, 100 * GiB));
}

/* What status offers (less the slack, in granules) and what admission
 * lets through (the slack counted) are one figure, vram_room. */
static void test_room(void **state)
{
        gmd_vram_view v = { .known = true, .free = 4 * GiB + 3 * MiB,
                            .spare = 64 * MiB, .slack = 64 * MiB };

        (void)state;
        assert_int_equal(vram_room(&v, false, 0), 4 * GiB + 67 * MiB);
        assert_int_equal(vram_room(&v, true, 0), 4 * GiB + 3 * MiB);
        assert_int_equal(vram_room(&v, true, 2 * MiB), 4 * GiB + 2 * MiB);
        v.slack = 8 * GiB;      /* more slack than free: nothing offered */
        assert_int_equal(vram_room(&v, true, 2 * MiB), 0);
        assert_true(vram_fits(&v, 4 * GiB + 67 * MiB));
        v.known = false;
        assert_int_equal(vram_room(&v, true, 2 * MiB), UINT64_MAX);
}

/* The reported case: the pool is empty (64 GiB free) but 49 GiB of an
 * 80 GiB card is held by fds of freed buffers. */
static void test_check_refuses_with_sentence(void **state)
{
        gmd_result res;

        (void)state;
        fake.total = 80 * GiB;
        fake.free = 31 * GiB;
        fake.own = 0;
        result_ok(&res);
        assert_int_equal(vram_check(&server, 0, 32 * GiB, &res), -ENOMEM);
        assert_int_equal(res.code, GMD__ERROR_CODE__ERR_NO_MEMORY);
        assert_non_null(strstr(res.text, "the pool has 64 GiB free but the GPU "
                                         "has only 31 GiB free"));
        assert_non_null(strstr(res.text, "49 GiB is held outside gpu-memd"));
        assert_non_null(strstr(res.text, "gpu-memctl status"));
        assert_int_equal(server.devices.vram[0].unaccounted, 49 * GiB);
        assert_int_equal(server.stats.vram_refused, 1);

        result_ok(&res);
        assert_int_equal(vram_check(&server, 0, 31 * GiB, &res), 0);
        assert_int_equal(res.code, 0);
}

/* What the backend holds counts as its own, and its spare chunks as
 * room. */
static void test_check_counts_own_and_spare(void **state)
{
        gmd_result res;

        (void)state;
        fake.total = 80 * GiB;
        fake.free = 1 * GiB;
        fake.own = 79 * GiB;
        fake.reserved = 128 * MiB;
        result_ok(&res);
        assert_int_equal(vram_check(&server, 0, 1 * GiB + 128 * MiB, &res), 0);
        assert_int_equal(server.devices.vram[0].unaccounted, 0);
        assert_int_equal(vram_check(&server, 0, 1 * GiB + 130 * MiB, &res),
                         -ENOMEM);
}

static void test_unreadable_driver_lets_through(void **state)
{
        gmd_result res;

        (void)state;
        fake_error = -EIO;
        result_ok(&res);
        assert_int_equal(vram_check(&server, 0, 32 * GiB, &res), 0);
        assert_int_equal(res.code, 0);
        assert_int_equal(vram_refresh(&server, 0), -EIO);
        assert_int_equal(vram_refresh(&server, 1), -EINVAL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_unaccounted),
                cmocka_unit_test(test_fits),
                cmocka_unit_test(test_room),
                cmocka_unit_test_setup(test_check_refuses_with_sentence, setup),
                cmocka_unit_test_setup(test_check_counts_own_and_spare, setup),
                cmocka_unit_test_setup(test_unreadable_driver_lets_through, setup),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
