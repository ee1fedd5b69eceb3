/*
 * test_size — common/size.c: sizes as people write them in options and the
 * config file ("512M", "1.5G", "80%") and as gpu-memctl prints them.
 *
 * The parser is the first thing a mistyped config line meets, so most cases
 * here are the ones it must refuse: garbage, signs, overflow, and the forms
 * strtod would accept but a size is not (hex, exponents, inf/nan).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "size.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

struct size_case {
        const char *text;
        uint64_t bytes;
};

static void assert_parses(const char *text, uint64_t expected)
{
        uint64_t bytes = 0;
        int r = size_parse(text, &bytes);

        if (r != 0 || bytes != expected)
                fail_msg("size_parse(\"%s\") = %d, %llu bytes; expected 0, %llu",
                         text, r, (unsigned long long)bytes,
                         (unsigned long long)expected);
}

static void assert_refused(const char *text, int expected_error)
{
        uint64_t bytes = 0xdeadbeef;
        int r = size_parse(text, &bytes);

        if (r != expected_error)
                fail_msg("size_parse(\"%s\") = %d (%llu bytes); expected %d",
                         text, r, (unsigned long long)bytes, expected_error);
        /* Output parameters are untouched on failure (STYLE.md). */
        assert_int_equal(bytes, 0xdeadbeef);
}

static void test_plain_numbers(void **state)
{
        assert_parses("0", 0);
        assert_parses("1", 1);
        assert_parses("4096", 4096);
        assert_parses("  4096  ", 4096);
        assert_parses("9007199254740992", UINT64_C(9007199254740992));
}

static void test_suffixes(void **state)
{
        static const struct size_case cases[] = {
                { "1K", KiB },           { "1k", KiB },
                { "512M", 512 * MiB },   { "512m", 512 * MiB },
                { "2G", 2 * GiB },       { "2g", 2 * GiB },
                { "3T", 3 * TiB },       { "3t", 3 * TiB },
                { "1P", 1024 * TiB },    { "1E", 1024 * 1024 * TiB },
                { "15E", UINT64_C(15) << 60 },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                assert_parses(cases[i].text, cases[i].bytes);
}

static void test_byte_suffixes(void **state)
{
        static const struct size_case cases[] = {
                { "4GiB", 4 * GiB },     { "4gib", 4 * GiB },
                { "4GB", 4 * GiB },      { "4gb", 4 * GiB },
                { "1KiB", KiB },         { "1KB", KiB },
                { "1Ki", KiB },          { "17B", 17 },
                { "17b", 17 },           { "8 MiB", 8 * MiB },
                { " 8M ", 8 * MiB },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                assert_parses(cases[i].text, cases[i].bytes);
}

static void test_decimals(void **state)
{
        assert_parses("1.5G", GiB + GiB / 2);
        assert_parses("0.5K", 512);
        assert_parses(".5M", MiB / 2);
        assert_parses("2.25M", 2 * MiB + MiB / 4);
        assert_parses("1.5T", TiB + TiB / 2);
}

static void test_garbage(void **state)
{
        static const char *const garbage[] = {
                "", " ", "abc", "M", "K1", "12X", "1MiBx", "1 2M", "1.5.5G",
                "1%", "50%", "..", "1iB",
        };

        for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
                assert_refused(garbage[i], -EINVAL);
        assert_int_equal(size_parse(NULL, &(uint64_t){ 0 }), -EINVAL);
}

static void test_negative_and_signs(void **state)
{
        assert_refused("-1", -EINVAL);
        assert_refused("-1G", -EINVAL);
        assert_refused("+1", -EINVAL);
        assert_refused(" -0", -EINVAL);
}

/* strtod reads these; a size is a plain decimal, so they are not sizes. */
static void test_strtod_forms_refused(void **state)
{
        assert_refused("inf", -EINVAL);
        assert_refused("nan", -EINVAL);
        assert_refused("infinity", -EINVAL);
        assert_refused("0x10", -EINVAL);
        assert_refused("0x1p4", -EINVAL);
        assert_refused("1e3", -EINVAL);
        assert_refused("1e400", -EINVAL);
}

static void test_overflow(void **state)
{
        assert_refused("16E", -ERANGE);
        assert_refused("16384P", -ERANGE);
        assert_refused("18446744073709551616", -ERANGE);
        assert_refused("99999999999999999999999", -ERANGE);
        assert_refused("100000000000T", -ERANGE);
}

static void test_spec_bytes(void **state)
{
        gmd_size_spec spec = { .bytes = 1, .percent = 7 };

        assert_int_equal(size_spec_parse("2G", &spec), 0);
        assert_int_equal(spec.bytes, 2 * GiB);
        assert_true(spec.percent == 0);

        assert_int_equal(size_spec_parse("0", &spec), 0);
        assert_int_equal(spec.bytes, 0);
        assert_true(spec.percent == 0);
}

static void test_spec_percent(void **state)
{
        gmd_size_spec spec = { 0 };

        assert_int_equal(size_spec_parse("80%", &spec), 0);
        assert_true(spec.percent == 80.0);
        assert_int_equal(spec.bytes, 0);

        assert_int_equal(size_spec_parse("100%", &spec), 0);
        assert_true(spec.percent == 100.0);

        assert_int_equal(size_spec_parse("1.5%", &spec), 0);
        assert_true(spec.percent == 1.5);

        assert_int_equal(size_spec_parse(" 50 % ", &spec), 0);
        assert_true(spec.percent == 50.0);
}

static void test_spec_refused(void **state)
{
        static const struct {
                const char *text;
                int error;
        } cases[] = {
                { "0%", -EINVAL },   { "100.5%", -EINVAL }, { "101%", -EINVAL },
                { "-5%", -EINVAL },  { "%", -EINVAL },      { "50%%", -EINVAL },
                { "50%M", -EINVAL }, { "", -EINVAL },       { "lots", -EINVAL },
                { "16E", -ERANGE },  { "0x10%", -EINVAL },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                gmd_size_spec spec = { .bytes = 42, .percent = 0 };
                int r = size_spec_parse(cases[i].text, &spec);

                if (r != cases[i].error)
                        fail_msg("size_spec_parse(\"%s\") = %d; expected %d",
                                 cases[i].text, r, cases[i].error);
                assert_int_equal(spec.bytes, 42);
                assert_true(spec.percent == 0);
        }
}

static void test_spec_resolve(void **state)
{
        gmd_size_spec spec = { 0 };

        assert_int_equal(size_spec_parse("50%", &spec), 0);
        assert_int_equal(size_spec_resolve(&spec, 64 * MiB), 32 * MiB);
        assert_int_equal(size_spec_resolve(&spec, 0), 0);

        assert_int_equal(size_spec_parse("100%", &spec), 0);
        assert_int_equal(size_spec_resolve(&spec, 141 * GiB), 141 * GiB);

        assert_int_equal(size_spec_parse("25%", &spec), 0);
        assert_int_equal(size_spec_resolve(&spec, 1000), 250);

        /* Bytes do not depend on the whole. */
        assert_int_equal(size_spec_parse("3G", &spec), 0);
        assert_int_equal(size_spec_resolve(&spec, 64 * MiB), 3 * GiB);
        assert_int_equal(size_spec_resolve(&spec, 0), 3 * GiB);

        /* A percentage never resolves to more than the whole. */
        assert_int_equal(size_spec_parse("100%", &spec), 0);
        assert_true(size_spec_resolve(&spec, UINT64_MAX - 1) <= UINT64_MAX - 1);
}

static void assert_formats(uint64_t bytes, const char *expected)
{
        char buf[32];

        memset(buf, 'x', sizeof(buf));
        assert_ptr_equal(size_format(bytes, buf, sizeof(buf)), buf);
        if (strcmp(buf, expected) != 0)
                fail_msg("size_format(%llu) = \"%s\"; expected \"%s\"",
                         (unsigned long long)bytes, buf, expected);
}

static void test_format(void **state)
{
        assert_formats(0, "0 B");
        assert_formats(17, "17 B");
        assert_formats(1023, "1023 B");
        assert_formats(KiB, "1 KiB");
        assert_formats(KiB + KiB / 2, "1.5 KiB");
        assert_formats(4 * KiB, "4 KiB");
        assert_formats(512 * MiB, "512 MiB");
        assert_formats(GiB + GiB / 2, "1.5 GiB");
        assert_formats(141 * GiB, "141 GiB");
        assert_formats(TiB, "1 TiB");
}

/* A value just under a unit must not print as "1024.0" of the smaller one. */
static void test_format_never_1024(void **state)
{
        static const uint64_t values[] = {
                KiB - 1, MiB - 1, GiB - 1, TiB - 1, GiB - KiB, 2 * GiB - 1,
        };
        char buf[32];

        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
                double number;

                size_format(values[i], buf, sizeof(buf));
                number = strtod(buf, NULL);
                if (number >= 1024.0)
                        fail_msg("size_format(%llu) = \"%s\"",
                                 (unsigned long long)values[i], buf);
        }
}

static void test_format_round_trip(void **state)
{
        static const uint64_t values[] = {
                0, 17, KiB, 4 * KiB, 2 * MiB, 64 * MiB, 512 * MiB, GiB,
                3 * GiB, GiB + GiB / 2, 141 * GiB, TiB, 5 * TiB,
        };
        char buf[32];

        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
                uint64_t back = 0;

                size_format(values[i], buf, sizeof(buf));
                assert_int_equal(size_parse(buf, &back), 0);
                if (back != values[i])
                        fail_msg("%llu -> \"%s\" -> %llu",
                                 (unsigned long long)values[i], buf,
                                 (unsigned long long)back);
        }
}

static void test_format_small_buffer(void **state)
{
        char buf[16];

        memset(buf, 'x', sizeof(buf));
        size_format(141 * GiB, buf, 4);
        assert_int_equal(buf[3], '\0');
        assert_memory_equal(buf, "141", 3);
        assert_int_equal(buf[4], 'x');   /* nothing written past len */

        size_format(UINT64_MAX, buf, sizeof(buf));
        assert_non_null(memchr(buf, '\0', sizeof(buf)));
        assert_non_null(strstr(buf, "EiB"));
}

static void assert_formats_exact(uint64_t bytes, const char *expected)
{
        char buf[32];

        size_format_exact(bytes, buf, sizeof(buf));
        if (strcmp(buf, expected) != 0)
                fail_msg("size_format_exact(%llu) = \"%s\"; expected \"%s\"",
                         (unsigned long long)bytes, buf, expected);
}

static void test_format_exact(void **state)
{
        assert_formats_exact(0, "0");
        assert_formats_exact(17, "17");
        assert_formats_exact(1023, "1023");
        assert_formats_exact(KiB, "1K");
        assert_formats_exact(1536, "1536");
        assert_formats_exact(1536 * KiB, "1536K");
        assert_formats_exact(512 * MiB, "512M");
        assert_formats_exact(1234 * MiB, "1234M");
        assert_formats_exact(3 * GiB, "3G");
        assert_formats_exact(2 * TiB, "2T");
        assert_formats_exact(UINT64_C(1) << 60, "1E");
        assert_formats_exact(UINT64_MAX, "18446744073709551615");
}

/* Whatever the value, the exact form parses back to it: config dumps
 * depend on that. */
static void test_format_exact_round_trip(void **state)
{
        uint64_t x = 0x243f6a8885a308d3ull;
        char buf[32];

        for (int i = 0; i < 2000; i++) {
                uint64_t value, back = 0;

                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                /* Mostly sizes with low zero bits, as configs have, below
                 * 8 PiB: size_parse reads through a double, so a byte
                 * count needing more than 53 bits cannot come back. */
                value = (x >> (i % 50)) << ((i * 7) % 40);
                value &= (UINT64_C(1) << 53) - 1;
                size_format_exact(value, buf, sizeof(buf));
                if (size_parse(buf, &back) != 0 || back != value) {
                        fail_msg("%llu -> \"%s\" -> %llu",
                                 (unsigned long long)value, buf,
                                 (unsigned long long)back);
                }
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_plain_numbers),
                cmocka_unit_test(test_suffixes),
                cmocka_unit_test(test_byte_suffixes),
                cmocka_unit_test(test_decimals),
                cmocka_unit_test(test_garbage),
                cmocka_unit_test(test_negative_and_signs),
                cmocka_unit_test(test_strtod_forms_refused),
                cmocka_unit_test(test_overflow),
                cmocka_unit_test(test_spec_bytes),
                cmocka_unit_test(test_spec_percent),
                cmocka_unit_test(test_spec_refused),
                cmocka_unit_test(test_spec_resolve),
                cmocka_unit_test(test_format),
                cmocka_unit_test(test_format_never_1024),
                cmocka_unit_test(test_format_round_trip),
                cmocka_unit_test(test_format_small_buffer),
                cmocka_unit_test(test_format_exact),
                cmocka_unit_test(test_format_exact_round_trip),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
