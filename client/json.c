/*
 * json — see json.h. Escaping is the only part with rules to get right:
 * '"', '\\' and the control characters are escaped, valid UTF-8 passes
 * through unchanged, and each byte of an invalid sequence becomes
 * "\ufffd".
 */
#include "json.h"

#include <inttypes.h>
#include <string.h>

#include "utf8.h"

void json_write_string(FILE *out, const char *s)
{
        const unsigned char *p = (const unsigned char *)(s ? s : "");

        fputc('"', out);
        while (*p) {
                size_t n;

                switch (*p) {
                case '"':  fputs("\\\"", out); p++; continue;
                case '\\': fputs("\\\\", out); p++; continue;
                case '\b': fputs("\\b", out);  p++; continue;
                case '\f': fputs("\\f", out);  p++; continue;
                case '\n': fputs("\\n", out);  p++; continue;
                case '\r': fputs("\\r", out);  p++; continue;
                case '\t': fputs("\\t", out);  p++; continue;
                default:   break;
                }
                if (*p < 0x20) {
                        fprintf(out, "\\u%04x", *p);
                        p++;
                } else if (*p < 0x80) {
                        fputc(*p, out);
                        p++;
                } else if ((n = utf8_valid_length(p)) > 0) {
                        fwrite(p, 1, n, out);
                        p += n;
                } else {
                        fputs("\\ufffd", out);
                        p++;
                }
        }
        fputc('"', out);
}

void json_init(json_writer *w, FILE *out)
{
        memset(w, 0, sizeof(*w));
        w->out = out;
        w->first[0] = true;
}

/* Separator, newline and indent before a member, then its key. */
static void member_start(json_writer *w, const char *key)
{
        if (w->depth > 0) {
                if (!w->first[w->depth])
                        fputc(',', w->out);
                fputc('\n', w->out);
                for (unsigned i = 0; i < w->depth; i++)
                        fputs("  ", w->out);
        }
        w->first[w->depth] = false;
        if (key) {
                json_write_string(w->out, key);
                fputs(": ", w->out);
        }
}

static void open_level(json_writer *w, const char *key, char c)
{
        member_start(w, key);
        fputc(c, w->out);
        if (w->depth + 1 < JSON_MAX_DEPTH)
                w->depth++;
        w->first[w->depth] = true;
}

static void close_level(json_writer *w, char c)
{
        bool empty = w->first[w->depth];

        if (w->depth > 0)
                w->depth--;
        if (!empty) {
                fputc('\n', w->out);
                for (unsigned i = 0; i < w->depth; i++)
                        fputs("  ", w->out);
        }
        fputc(c, w->out);
        if (w->depth == 0)
                fputc('\n', w->out);
}

void json_begin_object(json_writer *w, const char *key)
{
        open_level(w, key, '{');
}

void json_end_object(json_writer *w)
{
        close_level(w, '}');
}

void json_begin_array(json_writer *w, const char *key)
{
        open_level(w, key, '[');
}

void json_end_array(json_writer *w)
{
        close_level(w, ']');
}

void json_string(json_writer *w, const char *key, const char *value)
{
        member_start(w, key);
        json_write_string(w->out, value);
}

void json_uint(json_writer *w, const char *key, uint64_t value)
{
        member_start(w, key);
        fprintf(w->out, "%" PRIu64, value);
}

void json_int(json_writer *w, const char *key, int64_t value)
{
        member_start(w, key);
        fprintf(w->out, "%" PRId64, value);
}

void json_bool(json_writer *w, const char *key, bool value)
{
        member_start(w, key);
        fputs(value ? "true" : "false", w->out);
}
