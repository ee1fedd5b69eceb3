/*
 * promtext — see promtext.h. The buffer doubles as it grows; a scrape of a
 * busy daemon is a few KiB, so the copies do not matter. The UTF-8 check
 * is the one of client/json.c (RFC 3629: no overlongs, surrogates or code
 * points above U+10FFFF): the daemon and gpu-memctl do not share code.
 */
#include "promtext.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define PROMTEXT_MIN_CAP 4096

void promtext_init(promtext *t)
{
        *t = (promtext){ .data = NULL };
}

void promtext_clear(promtext *t)
{
        free(t->data);
        promtext_init(t);
}

/* Make room for `more` bytes and the NUL after them. */
static bool promtext_reserve(promtext *t, size_t more)
{
        size_t cap = t->cap ? t->cap : PROMTEXT_MIN_CAP;
        char *data;

        if (t->failed)
                return false;
        if (more >= SIZE_MAX / 2 - t->len)
                goto fail;
        if (t->len + more + 1 <= t->cap)
                return true;
        while (cap < t->len + more + 1)
                cap *= 2;
        data = realloc(t->data, cap);
        if (!data)
                goto fail;
        t->data = data;
        t->cap = cap;
        return true;
fail:
        t->failed = true;
        return false;
}

void promtext_append(promtext *t, const char *s, size_t len)
{
        if (!promtext_reserve(t, len))
                return;
        memcpy(t->data + t->len, s, len);
        t->len += len;
        t->data[t->len] = '\0';
}

void promtext_printf(promtext *t, const char *fmt, ...)
{
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
                t->failed = true;
                return;
        }
        if (!promtext_reserve(t, (size_t)n))
                return;
        va_start(ap, fmt);
        vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
        t->len += (size_t)n;
}

void promtext_family(promtext *t, const char *name, const char *type,
                     const char *help)
{
        promtext_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                        type);
}

void promtext_metric(promtext *t, const char *name, const char *type,
                     const char *help, uint64_t value)
{
        promtext_family(t, name, type, help);
        promtext_printf(t, "%s %" PRIu64 "\n", name, value);
}

void promtext_label_value(promtext *t, const char *value)
{
        const unsigned char *p = (const unsigned char *)(value ? value : "");

        while (*p) {
                size_t n;

                if (*p == '\\') {
                        promtext_append(t, "\\\\", 2);
                        p++;
                } else if (*p == '"') {
                        promtext_append(t, "\\\"", 2);
                        p++;
                } else if (*p == '\n') {
                        promtext_append(t, "\\n", 2);
                        p++;
                } else if (*p < 0x80) {
                        promtext_append(t, (const char *)p, 1);
                        p++;
                } else if ((n = utf8_valid_length(p)) > 0) {
                        promtext_append(t, (const char *)p, n);
                        p += n;
                } else {
                        promtext_append(t, "\xef\xbf\xbd", 3);    /* U+FFFD */
                        p++;
                }
        }
}

void promtext_seconds(promtext *t, uint64_t us)
{
        char frac[8];
        int n;

        if (us % 1000000 == 0) {
                promtext_printf(t, "%" PRIu64, us / 1000000);
                return;
        }
        n = snprintf(frac, sizeof(frac), "%06" PRIu64, us % 1000000);
        while (n > 0 && frac[n - 1] == '0')
                frac[--n] = '\0';
        promtext_printf(t, "%" PRIu64 ".%s", us / 1000000, frac);
}
