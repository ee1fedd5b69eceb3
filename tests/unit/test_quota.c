/*
 * test_quota — quota_check of daemon/base/quota.c: a new buffer against the
 * limits of its user and what the user holds, with parked buffers counted
 * but reclaimable (QUOTA_PARKED), and the refusal's code and sentence.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gpumem.pb-c.h"
#include "quota.h"

#define MIB (1ull << 20)

static gmd_limits limits(uint64_t vram, uint64_t host, unsigned buffers)
{
        gmd_limits l;

        memset(&l, 0, sizeof(l));
        l.vram_quota = vram;
        l.host_quota = host;
        l.max_buffers = buffers;
        strcpy(l.vram_from, "[user alice]");
        strcpy(l.host_from, "[users]");
        strcpy(l.buffers_from, "[group gpu]");
        return l;
}

static void test_no_limit(void **state)
{
        gmd_limits l = limits(0, 0, 0);
        gmd_usage u = { { 900 * MIB, 0 }, 0, 3, 0, 0 };
        gmd_result r;

        (void)state;
        assert_false(quota_applies(&l, GMD_TIER_VRAM));
        assert_int_equal(quota_check(&l, 1000, &u, 100 * MIB, GMD_TIER_VRAM, &r),
                         QUOTA_OK);
}

static void test_vram_quota(void **state)
{
        gmd_limits l = limits(256 * MIB, 0, 0);
        gmd_usage u = { { 128 * MIB, 0 }, 0, 1, 0, 0 };
        gmd_result r;

        (void)state;
        assert_true(quota_applies(&l, GMD_TIER_VRAM));
        assert_false(quota_applies(&l, GMD_TIER_HOST));
        assert_int_equal(quota_check(&l, 1000, &u, 128 * MIB, GMD_TIER_VRAM, &r),
                         QUOTA_OK);
        assert_int_equal(quota_check(&l, 1000, &u, 130 * MIB, GMD_TIER_VRAM, &r),
                         QUOTA_REFUSED);
        assert_int_equal(r.code, GMD__ERROR_CODE__ERR_QUOTA);
        assert_non_null(strstr(r.text, "uid 1000 holds 128 MiB of VRAM"));
        assert_non_null(strstr(r.text, "vram_quota of 256 MiB set in [user alice]"));
}

static void test_parked_is_reclaimable(void **state)
{
        gmd_limits l = limits(256 * MIB, 0, 0);
        gmd_usage u = { { 256 * MIB, 0 }, 64 * MIB, 4, 1, 0 };
        gmd_result r;

        (void)state;
        /* Over only by what is parked: ask for it back and wait. */
        assert_int_equal(quota_check(&l, 7, &u, 64 * MIB, GMD_TIER_VRAM, &r),
                         QUOTA_PARKED);
        /* More than the parked bytes would free: refused, and the message
         * counts what is held without the parked buffers. */
        assert_int_equal(quota_check(&l, 7, &u, 65 * MIB, GMD_TIER_VRAM, &r),
                         QUOTA_REFUSED);
        assert_non_null(strstr(r.text, "holds 192 MiB of VRAM"));
}

static void test_parked_never_more_than_held(void **state)
{
        gmd_limits l = limits(256 * MIB, 0, 0);
        /* A parked buffer moved to host memory: parked > VRAM held. */
        gmd_usage u = { { 32 * MIB, 0 }, 64 * MIB, 2, 1, 0 };
        gmd_result r;

        (void)state;
        assert_int_equal(quota_check(&l, 7, &u, 300 * MIB, GMD_TIER_VRAM, &r),
                         QUOTA_REFUSED);
        assert_non_null(strstr(r.text, "holds 0 B of VRAM"));
}

static void test_host_quota_ignores_parked(void **state)
{
        gmd_limits l = limits(0, 100 * MIB, 0);
        gmd_usage u = { { 0, 90 * MIB }, 50 * MIB, 2, 1, 0 };
        gmd_result r;

        (void)state;
        assert_int_equal(quota_check(&l, 7, &u, 20 * MIB, GMD_TIER_HOST, &r),
                         QUOTA_REFUSED);
        assert_non_null(strstr(r.text, "host_quota of 100 MiB set in [users]"));
}

static void test_max_buffers(void **state)
{
        gmd_limits l = limits(0, 0, 3);
        gmd_usage full = { { 0, 0 }, 0, 3, 0, 0 }, parked = { { 0, 0 }, 0, 3, 1, 0 };
        gmd_result r;

        (void)state;
        assert_int_equal(quota_check(&l, 7, &parked, MIB, GMD_TIER_VRAM, &r),
                         QUOTA_PARKED);
        assert_int_equal(quota_check(&l, 7, &full, MIB, GMD_TIER_HOST, &r),
                         QUOTA_REFUSED);
        assert_int_equal(r.code, GMD__ERROR_CODE__ERR_QUOTA);
        assert_non_null(strstr(r.text, "holds 3 buffers, the max_buffers quota set "
                                       "in [group gpu]"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_no_limit),
                cmocka_unit_test(test_vram_quota),
                cmocka_unit_test(test_parked_is_reclaimable),
                cmocka_unit_test(test_parked_never_more_than_held),
                cmocka_unit_test(test_host_quota_ignores_parked),
                cmocka_unit_test(test_max_buffers),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
