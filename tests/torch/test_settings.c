/*
 * test_settings — the shim's environment parsing (client/torch/settings.c):
 * the wait for room and the name gpu-memctl shows for a command line.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "settings.h"

static void test_timeout(void **state)
{
        int64_t ms = 7;

        assert_int_equal(torch_settings_parse_timeout(NULL, &ms), 0);
        assert_int_equal(ms, -1);
        assert_int_equal(torch_settings_parse_timeout("", &ms), 0);
        assert_int_equal(ms, -1);
        assert_int_equal(torch_settings_parse_timeout("0", &ms), 0);
        assert_int_equal(ms, 0);
        assert_int_equal(torch_settings_parse_timeout("30000", &ms), 0);
        assert_int_equal(ms, 30000);
        assert_int_equal(torch_settings_parse_timeout("-1", &ms), 0);
        assert_int_equal(ms, -1);
        ms = 5;
        assert_int_equal(torch_settings_parse_timeout("-2", &ms), -EINVAL);
        assert_int_equal(torch_settings_parse_timeout("10s", &ms), -EINVAL);
        assert_int_equal(torch_settings_parse_timeout("forever", &ms), -EINVAL);
        assert_int_equal(torch_settings_parse_timeout("99999999999999999999", &ms), -EINVAL);
        assert_int_equal(ms, 5);
}

static void name_is(const char *cmdline, size_t len, const char *want)
{
        char out[GMD_TORCH_NAME_MAX + 1];

        torch_settings_name_from_cmdline(cmdline, len, out);
        assert_string_equal(out, want);
}

#define NAME_IS(lit, want) name_is(lit, sizeof(lit), want)

static void test_name(void **state)
{
        NAME_IS("python3\0train.py\0--lr\0001", "train.py");
        NAME_IS("/usr/bin/python3.12\0-u\0/home/a/exp/train.py", "train.py");
        NAME_IS("python\0-W\0ignore\0-X\0dev\0run.py", "run.py");
        NAME_IS("python3\0-m\0torch.distributed.run\0x.py", "torch.distributed.run");
        NAME_IS("python3\0-c\0import torch", "python -c");
        NAME_IS("python3", "python3");
        NAME_IS("/opt/bin/trainer\0--gpus\0002", "trainer");
        name_is("", 0, "");
}

static void test_load(void **state)
{
        torch_settings s;
        char err[256] = "";

        setenv(GMD_TORCH_TIMEOUT_ENV, "1500", 1);
        setenv(GMD_TORCH_NAME_ENV, "my-job", 1);
        setenv(GMD_TORCH_QUIET_ENV, "1", 1);
        assert_int_equal(torch_settings_load(&s, err, sizeof(err)), 0);
        assert_int_equal(s.timeout_ms, 1500);
        assert_string_equal(s.name, "my-job");
        assert_int_equal(s.quiet, 1);
        assert_int_equal(s.yield, 1);           /* unset: on */
        setenv(GMD_TORCH_YIELD_ENV, "0", 1);
        assert_int_equal(torch_settings_load(&s, err, sizeof(err)), 0);
        assert_int_equal(s.yield, 0);
        setenv(GMD_TORCH_YIELD_ENV, "1", 1);
        assert_int_equal(torch_settings_load(&s, err, sizeof(err)), 0);
        assert_int_equal(s.yield, 1);
        unsetenv(GMD_TORCH_YIELD_ENV);
        setenv(GMD_TORCH_TIMEOUT_ENV, "soon", 1);
        assert_int_equal(torch_settings_load(&s, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "GPU_MEMD_TORCH_TIMEOUT_MS=soon is not a number"));
        unsetenv(GMD_TORCH_TIMEOUT_ENV);
        unsetenv(GMD_TORCH_NAME_ENV);
        setenv(GMD_TORCH_QUIET_ENV, "0", 1);
        assert_int_equal(torch_settings_load(&s, err, sizeof(err)), 0);
        assert_int_equal(s.timeout_ms, -1);
        assert_int_equal(s.quiet, 0);
        assert_string_equal(s.name, "test_torch_settings");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_timeout),
                cmocka_unit_test(test_name),
                cmocka_unit_test(test_load),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
