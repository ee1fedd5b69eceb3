/*
 * test_pool — daemon/core/pool.c: rounding to the granularity, taking and
 * giving bytes, and the used <= capacity invariant.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "pool.h"

#define MIB (1ull << 20)

static void test_capacity_is_whole_granules(void **state)
{
        gmd_pool pool;

        pool_init(&pool, 0, GMD_TIER_VRAM, 65 * MIB, 2 * MIB);
        assert_int_equal(pool.capacity, 64 * MIB);
        assert_int_equal(pool_free(&pool), 64 * MIB);
}

static void test_round(void **state)
{
        gmd_pool pool;

        pool_init(&pool, 0, GMD_TIER_VRAM, 64 * MIB, 2 * MIB);
        assert_int_equal(pool_round(&pool, 1), 2 * MIB);
        assert_int_equal(pool_round(&pool, 2 * MIB), 2 * MIB);
        assert_int_equal(pool_round(&pool, 2 * MIB + 1), 4 * MIB);
        assert_int_equal(pool_round(&pool, UINT64_MAX), 0);
}

static void test_take_give(void **state)
{
        gmd_pool pool;

        pool_init(&pool, 1, GMD_TIER_VRAM, 8 * MIB, 2 * MIB);
        assert_int_equal(pool_take(&pool, 6 * MIB), 0);
        assert_int_equal(pool_take(&pool, 4 * MIB), -ENOSPC);
        assert_int_equal(pool.used, 6 * MIB);
        assert_int_equal(pool_take(&pool, 2 * MIB), 0);
        assert_int_equal(pool_free(&pool), 0);
        pool_give(&pool, 8 * MIB);
        assert_int_equal(pool.used, 0);
        /* Giving back more than was taken is clamped, never wraps. */
        pool_give(&pool, 2 * MIB);
        assert_int_equal(pool.used, 0);
        assert_int_equal(pool_free(&pool), 8 * MIB);
}

static void test_describe(void **state)
{
        gmd_pool vram, host;
        char buf[32];

        pool_init(&vram, 3, GMD_TIER_VRAM, 8 * MIB, 2 * MIB);
        pool_init(&host, 0, GMD_TIER_HOST, 8 * MIB, 2 * MIB);
        assert_string_equal(pool_describe(&vram, buf, sizeof(buf)), "device 3 VRAM");
        assert_string_equal(pool_describe(&host, buf, sizeof(buf)), "host");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_capacity_is_whole_granules),
                cmocka_unit_test(test_round),
                cmocka_unit_test(test_take_give),
                cmocka_unit_test(test_describe),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
