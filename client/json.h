/*
 * json — the little JSON writer gpu-memctl's --json output needs: nested
 * objects and arrays, strings, integers and booleans, written to
 * a FILE as they come, two spaces of indent per level. Strings are escaped
 * per RFC 8259, and bytes that are not valid UTF-8 (client names come from
 * other processes) become U+FFFD, so the output always parses.
 */
#ifndef GMD_JSON_H
#define GMD_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json_writer {
        FILE *out;
        unsigned depth;
        bool first[JSON_MAX_DEPTH];     /* no member written yet at a level */
} json_writer;

/* Write `s` as a quoted, escaped JSON string. */
void json_write_string(FILE *out, const char *s);

void json_init(json_writer *w, FILE *out);

/* `key` names the member inside an object; NULL inside an array or at the
 * top. */
void json_begin_object(json_writer *w, const char *key);
void json_end_object(json_writer *w);
void json_begin_array(json_writer *w, const char *key);
void json_end_array(json_writer *w);
void json_string(json_writer *w, const char *key, const char *value);
void json_uint(json_writer *w, const char *key, uint64_t value);
void json_int(json_writer *w, const char *key, int64_t value);
void json_bool(json_writer *w, const char *key, bool value);

#endif
