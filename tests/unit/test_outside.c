/*
 * test_outside — daemon/core/outside.c's arithmetic (what one process
 * holds outside gpu-memd), the pool's charge for it (pool.h) and the
 * quota refusal it takes part in (base/quota.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "outside.h"
#include "pool.h"
#include "quota.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* The driver's figure less what gpu-memd accounts and the allowance,
 * never below 0, never wrapping. */
static void test_process_bytes(void **state)
{
        (void)state;
        /* Six kept 1 GiB fds and a 518 MiB context, nothing held. */
        assert_int_equal(outside_process_bytes(6 * GIB + 518 * MIB, 0,
                                               640 * MIB),
                         6 * GIB - 122 * MIB);
        /* All of it its buffers: nothing outside. */
        assert_int_equal(outside_process_bytes(2 * GIB + 500 * MIB, 2 * GIB,
                                               640 * MIB), 0);
        assert_int_equal(outside_process_bytes(3 * GIB, 2 * GIB, 0), GIB);
        assert_int_equal(outside_process_bytes(0, 0, 0), 0);
        assert_int_equal(outside_process_bytes(UINT64_MAX, UINT64_MAX - 1,
                                               UINT64_MAX), 0);
        assert_int_equal(outside_process_bytes(UINT64_MAX, 0, 1),
                         UINT64_MAX - 1);
}

static void test_policy(void **state)
{
        gmd_config c;

        (void)state;
        memset(&c, 0, sizeof(c));
        strcpy(c.outside_vram, "charge");
        assert_true(outside_charges(&c));
        strcpy(c.outside_vram, "disconnect");
        assert_true(outside_charges(&c));
        strcpy(c.outside_vram, "ignore");
        assert_false(outside_charges(&c));
}

/* The charge is not offered: pool_free and pool_take see it. */
static void test_pool_charge(void **state)
{
        gmd_pool pool;

        (void)state;
        pool_init(&pool, 0, GMD_TIER_VRAM, 64 * MIB, 2 * MIB);
        pool.outside = 48 * MIB;
        assert_int_equal(pool_free(&pool), 16 * MIB);
        assert_int_equal(pool_take(&pool, 18 * MIB), -ENOSPC);
        assert_int_equal(pool_take(&pool, 16 * MIB), 0);
        assert_int_equal(pool_free(&pool), 0);
        pool.outside = 80 * MIB;            /* more than there is */
        assert_int_equal(pool_free(&pool), 0);
        pool.outside = 0;
        assert_int_equal(pool_free(&pool), 48 * MIB);
}

/* 6 GiB outside with a vram_quota of 8 GiB: 1 GiB passes, 3 GiB is
 * refused with the sentence naming the bytes held outside; without them
 * the plain sentence. */
static void test_quota(void **state)
{
        gmd_limits l = { .vram_quota = 8 * GIB };
        gmd_usage u = { { GIB, 0 }, 0, 1, 0, 6 * GIB };
        gmd_result r;

        (void)state;
        strcpy(l.vram_from, "[user alice]");
        assert_int_equal(quota_check(&l, 1000, &u, GIB, GMD_TIER_VRAM, &r),
                         QUOTA_OK);
        assert_int_equal(quota_check(&l, 1000, &u, 2 * GIB, GMD_TIER_VRAM, &r),
                         QUOTA_REFUSED);
        assert_int_equal(r.code, GMD_ERR_QUOTA);
        assert_non_null(strstr(r.text, "uid 1000 holds 6 GiB of VRAM outside "
                               "gpu-memd through fds its processes kept"));
        assert_non_null(strstr(r.text, "vram_quota of 8 GiB set in [user alice]"));
        assert_non_null(strstr(r.text, "close those fds"));
        /* Host memory is not charged for it. */
        assert_int_equal(quota_check(&l, 1000, &u, 2 * GIB, GMD_TIER_HOST, &r),
                         QUOTA_OK);
        u.outside = 0;
        assert_int_equal(quota_check(&l, 1000, &u, 2 * GIB, GMD_TIER_VRAM, &r),
                         QUOTA_OK);
        assert_int_equal(quota_check(&l, 1000, &u, 8 * GIB, GMD_TIER_VRAM, &r),
                         QUOTA_REFUSED);
        assert_null(strstr(r.text, "outside"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_process_bytes),
                cmocka_unit_test(test_policy),
                cmocka_unit_test(test_pool_charge),
                cmocka_unit_test(test_quota),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
