/*
 * test_errors — the naming half of the public API: gmd_strerror,
 * tier/state names, the size wrappers, and gmd_last_error being per
 * thread.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gpumem.h"

static void test_names(void **ctx)
{
        assert_string_equal(gmd_tier_name(GMD_TIER_VRAM), "vram");
        assert_string_equal(gmd_tier_name(GMD_TIER_HOST), "host");
        assert_string_equal(gmd_tier_name((gmd_tier)9), "unknown");
        assert_string_equal(gmd_state_name(GMD_STATE_MOVING_OUT), "moving-out");
        assert_string_equal(gmd_state_name(GMD_STATE_REVOKED), "revoked");
        assert_string_equal(gmd_strerror(GMD_EREVOKED),
                            "buffer revoked by the daemon");
        assert_string_equal(gmd_strerror(GMD_ECONN), "not connected to gpu-memd");
        assert_string_equal(gmd_strerror(-EINVAL), strerror(EINVAL));
        assert_string_equal(gmd_strerror(0), "success");
}

static void test_sizes(void **ctx)
{
        uint64_t v = 7;
        char buf[32];

        assert_int_equal(gmd_parse_size("512M", &v), 0);
        assert_int_equal(v, 512ull << 20);
        assert_int_equal(gmd_parse_size("1.5G", &v), 0);
        assert_int_equal(v, 3ull << 29);
        v = 7;
        assert_int_equal(gmd_parse_size("lots", &v), -EINVAL);
        assert_int_equal(v, 7);
        assert_non_null(strstr(gmd_last_error(), "'lots'"));
        assert_int_equal(gmd_parse_size("99999999E", &v), -EINVAL);
        assert_string_equal(gmd_format_size(3ull << 29, buf, sizeof(buf)),
                            "1.5 GiB");
        assert_string_equal(gmd_format_size(17, buf, sizeof(buf)), "17 B");
}

static void *other_thread(void *arg)
{
        uint64_t v;

        gmd_parse_size("nope", &v);
        return NULL;
}

static void test_last_error_per_thread(void **ctx)
{
        pthread_t t;
        uint64_t v;

        gmd_parse_size("mine", &v);
        assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
        pthread_join(t, NULL);
        assert_non_null(strstr(gmd_last_error(), "'mine'"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_sizes),
                cmocka_unit_test(test_last_error_per_thread),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
