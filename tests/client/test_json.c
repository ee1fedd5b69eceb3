/*
 * test_json — gpu-memctl's JSON writer: escaping of quotes, backslashes,
 * control characters and invalid UTF-8 (names come from other processes),
 * and the shape of nested output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "json.h"

/* Run `fn` against a memory stream and return what it wrote (free it). */
static char *capture_string(const char *s)
{
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        assert_non_null(f);
        json_write_string(f, s);
        fclose(f);
        return text;
}

static void check(const char *in, const char *expected)
{
        char *out = capture_string(in);

        assert_string_equal(out, expected);
        free(out);
}

static void test_escape_plain(void **ctx)
{
        check("train.py", "\"train.py\"");
        check("", "\"\"");
        check(NULL, "\"\"");
}

static void test_escape_specials(void **ctx)
{
        check("a\"b\\c", "\"a\\\"b\\\\c\"");
        check("l1\nl2\tx\r\b\f", "\"l1\\nl2\\tx\\r\\b\\f\"");
        check("\x01\x1f\x7f", "\"\\u0001\\u001f\x7f\"");
        check("</script>", "\"</script>\"");
}

static void test_escape_utf8(void **ctx)
{
        /* Valid sequences of 2, 3 and 4 bytes pass through. */
        check("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80",
              "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80\"");
        /* Lone continuation, overlong, surrogate, truncated, > U+10FFFF. */
        check("\x80", "\"\\ufffd\"");
        check("\xc0\xaf", "\"\\ufffd\\ufffd\"");
        check("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");
        check("a\xe2\x82", "\"a\\ufffd\\ufffd\"");
        check("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
}

static void test_writer_shape(void **ctx)
{
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        json_writer w;

        json_init(&w, f);
        json_begin_object(&w, NULL);
        json_string(&w, "name", "x\"y");
        json_uint(&w, "big", UINT64_MAX);
        json_begin_array(&w, "empty");
        json_end_array(&w);
        json_begin_array(&w, "list");
        json_begin_object(&w, NULL);
        json_bool(&w, "ok", true);
        json_end_object(&w);
        json_end_array(&w);
        json_end_object(&w);
        fclose(f);
        assert_string_equal(text,
                "{\n"
                "  \"name\": \"x\\\"y\",\n"
                "  \"big\": 18446744073709551615,\n"
                "  \"empty\": [],\n"
                "  \"list\": [\n"
                "    {\n"
                "      \"ok\": true\n"
                "    }\n"
                "  ]\n"
                "}\n");
        free(text);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_escape_plain),
                cmocka_unit_test(test_escape_specials),
                cmocka_unit_test(test_escape_utf8),
                cmocka_unit_test(test_writer_shape),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
