/*
 * test_promtext — daemon/service/promtext.c: label values escaped as the
 * Prometheus text format requires (backslash, quote, newline), invalid
 * UTF-8 replaced, seconds written exactly, and a buffer that grows past
 * its first allocation without losing text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "promtext.h"

static char *escaped(const char *value)
{
        static char out[256];
        promtext t;

        promtext_init(&t);
        promtext_label_value(&t, value);
        assert_false(t.failed);
        snprintf(out, sizeof(out), "%s", t.data ? t.data : "");
        promtext_clear(&t);
        return out;
}

static void test_label_plain(void **state)
{
        assert_string_equal(escaped("trainer-7 (gpu0)"), "trainer-7 (gpu0)");
        assert_string_equal(escaped(""), "");
        assert_string_equal(escaped(NULL), "");
}

static void test_label_escapes(void **state)
{
        assert_string_equal(escaped("a\\b"), "a\\\\b");
        assert_string_equal(escaped("say \"hi\""), "say \\\"hi\\\"");
        assert_string_equal(escaped("two\nlines"), "two\\nlines");
        assert_string_equal(escaped("\\\"\n"), "\\\\\\\"\\n");
        /* Tabs and other characters pass: the format only escapes three. */
        assert_string_equal(escaped("a\tb"), "a\tb");
}

static void test_label_utf8(void **state)
{
        /* Valid multi-byte sequences pass unchanged. */
        assert_string_equal(escaped("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"),
                            "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
        /* A lone continuation byte, a truncated sequence, an overlong
         * encoding and a surrogate: each bad byte becomes U+FFFD. */
        assert_string_equal(escaped("a\x80z"), "a\xef\xbf\xbdz");
        assert_string_equal(escaped("a\xe2\x82"), "a\xef\xbf\xbd\xef\xbf\xbd");
        assert_string_equal(escaped("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");
        assert_string_equal(escaped("\xed\xa0\x80"),
                            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

static void test_seconds(void **state)
{
        static const struct { uint64_t us; const char *text; } cases[] = {
                { 0, "0" }, { 10, "0.00001" }, { 2500, "0.0025" },
                { 1000000, "1" }, { 1500000, "1.5" }, { 10000000, "10" },
                { 123456789, "123.456789" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                promtext t;

                promtext_init(&t);
                promtext_seconds(&t, cases[i].us);
                assert_string_equal(t.data, cases[i].text);
                promtext_clear(&t);
        }
}

static void test_grows(void **state)
{
        promtext t;
        size_t lines = 2000;

        promtext_init(&t);
        promtext_family(&t, "x_total", "counter", "Lines.");
        for (size_t i = 0; i < lines; i++)
                promtext_printf(&t, "x_total{i=\"%zu\"} %zu\n", i, i);
        assert_false(t.failed);
        assert_int_equal(strlen(t.data), t.len);
        assert_true(strncmp(t.data, "# HELP x_total Lines.\n# TYPE x_total counter\n",
                            44) == 0);
        assert_non_null(strstr(t.data, "x_total{i=\"1999\"} 1999\n"));
        promtext_clear(&t);
        assert_null(t.data);
        assert_int_equal(t.len, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_label_plain),
                cmocka_unit_test(test_label_escapes),
                cmocka_unit_test(test_label_utf8),
                cmocka_unit_test(test_seconds),
                cmocka_unit_test(test_grows),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
