/*
 * test_kepttally — daemon/core/kepttally.c: the kept fds' figures per uid
 * and device as witnesses are made, found, charged and closed, the way
 * keptfd.c changes them; a uid's entry goes with its last witness; the
 * bound is the configured max_buffers_per_user when one is set.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "kepttally.h"

#define MIB (1ull << 20)

static void test_witness_life(void **state)
{
        gmd_kepttally t = { 0 };

        (void)state;
        assert_int_equal(kepttally_add(&t, 1000), 0);
        assert_int_equal(kepttally_add(&t, 1000), 0);
        assert_int_equal(kepttally_add(&t, 1001), 0);
        assert_int_equal(kepttally_count(&t, 1000), 2);
        assert_int_equal(kepttally_found_count(&t, 1000), 0);

        /* Found once, then charged: VRAM on device 1, host memory. */
        kepttally_found(&t, 1000);
        kepttally_found(&t, 1000);
        kepttally_charge(&t, 1000, GMD_TIER_VRAM, 1, 64 * MIB, true);
        kepttally_charge(&t, 1000, GMD_TIER_HOST, 0, 2 * MIB, true);
        assert_int_equal(kepttally_found_count(&t, 1000), 2);
        assert_int_equal(kepttally_vram(&t, 1000), 64 * MIB);
        assert_int_equal(kepttally_charged(&t, GMD_TIER_VRAM, 1), 64 * MIB);
        assert_int_equal(kepttally_charged(&t, GMD_TIER_VRAM, 0), 0);
        /* The host tier: any device. */
        assert_int_equal(kepttally_charged(&t, GMD_TIER_HOST, 3), 2 * MIB);
        assert_int_equal(t.n_charged, 2);
        assert_int_equal(kepttally_vram(&t, 1001), 0);

        /* Closed: the charge ends first, then the witness goes. */
        kepttally_charge(&t, 1000, GMD_TIER_VRAM, 1, 64 * MIB, false);
        kepttally_drop(&t, 1000, true);
        assert_int_equal(kepttally_count(&t, 1000), 1);
        assert_int_equal(kepttally_found_count(&t, 1000), 1);
        assert_int_equal(kepttally_vram(&t, 1000), 0);
        assert_int_equal(kepttally_charged(&t, GMD_TIER_VRAM, 1), 0);
        kepttally_charge(&t, 1000, GMD_TIER_HOST, 0, 2 * MIB, false);
        kepttally_drop(&t, 1000, true);
        assert_int_equal(t.n_charged, 0);
        assert_int_equal(kepttally_charged(&t, GMD_TIER_HOST, 0), 0);

        /* Its last witness gone, the uid's entry goes; the other stays. */
        assert_int_equal(t.n_users, 1);
        assert_int_equal(kepttally_count(&t, 1000), 0);
        assert_int_equal(kepttally_count(&t, 1001), 1);
        kepttally_drop(&t, 1001, false);
        assert_int_equal(t.n_users, 0);
        kepttally_free(&t);
        assert_null(t.users);
}

static void test_bound(void **state)
{
        gmd_config config;

        (void)state;
        memset(&config, 0, sizeof(config));
        config.max_buffers_per_user = 123;
        assert_int_equal(kepttally_bound(&config), 123);
        /* 0: half the open-file limit. */
        config.max_buffers_per_user = 0;
        assert_true(kepttally_bound(&config) > 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_witness_life),
                cmocka_unit_test(test_bound),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
