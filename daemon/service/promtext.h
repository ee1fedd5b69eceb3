/*
 * promtext — a growable text buffer that writes the Prometheus text
 * exposition format (version 0.0.4): metric family headers, label values
 * escaped as the format requires, and seconds written exactly from
 * microsecond counters. The metrics endpoint renders one scrape into it.
 *
 * Writes never fail at the call site: an allocation failure marks the
 * buffer `failed` and later writes do nothing, so a renderer checks once
 * at the end instead of after every line.
 */
#ifndef GMD_PROMTEXT_H
#define GMD_PROMTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct promtext {
        char *data;             /* NUL-terminated when not NULL */
        size_t len;
        size_t cap;
        bool failed;            /* out of memory: the text is incomplete */
} promtext;

void promtext_init(promtext *t);

/* Free the text; the buffer is empty and usable again. */
void promtext_clear(promtext *t);

void promtext_append(promtext *t, const char *s, size_t len);

__attribute__((format(printf, 2, 3)))
void promtext_printf(promtext *t, const char *fmt, ...);

/* "# HELP name help\n# TYPE name type\n"; `help` is a constant of ours
 * and is written as it is. */
void promtext_family(promtext *t, const char *name, const char *type,
                     const char *help);

/* A family of one sample without labels: its header, then "name value\n". */
void promtext_metric(promtext *t, const char *name, const char *type,
                     const char *help, uint64_t value);

/*
 * Write `value` as a label value, without the quotes: '\\' becomes "\\\\",
 * '"' becomes "\\\"", newline becomes "\\n". Values must be UTF-8; client
 * names come from other processes, so each byte of an invalid sequence
 * becomes U+FFFD.
 */
void promtext_label_value(promtext *t, const char *value);

/* `us` microseconds as seconds in plain decimal, exactly: 2500 -> "0.0025",
 * 10000000 -> "10". */
void promtext_seconds(promtext *t, uint64_t us);

#endif
