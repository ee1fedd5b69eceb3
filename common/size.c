/*
 * size — see size.h. strtod does the number so "1.5G" works; the result is
 * checked against 2^64 before it is converted.
 */
#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* A plain non-negative decimal: digits with at most one '.', nothing strtod
 * would also take (signs, hex, exponents, "inf", "nan"). */
static int parse_number_and_suffix(const char *text, double *ret_value,
                                   const char **ret_suffix)
{
        char number[64];
        const char *p;
        size_t n = 0;
        int digits = 0, dots = 0;

        if (!text)
                return -EINVAL;
        while (isspace((unsigned char)*text))
                text++;
        for (p = text; isdigit((unsigned char)*p) || *p == '.'; p++) {
                if (*p == '.')
                        dots++;
                else
                        digits++;
                if (n + 1 >= sizeof(number))
                        return -EINVAL;
                number[n++] = *p;
        }
        number[n] = '\0';
        if (digits == 0 || dots > 1)
                return -EINVAL;
        while (isspace((unsigned char)*p))
                p++;
        *ret_value = strtod(number, NULL);
        *ret_suffix = p;
        return 0;
}

static int suffix_shift(const char *suffix, unsigned *ret_shift)
{
        static const char units[] = "KMGTPE";
        const char *rest = suffix;
        unsigned shift = 0;

        if (*rest) {
                const char *u = NULL;

                for (const char *p = units; *p; p++)
                        if (toupper((unsigned char)*rest) == *p)
                                u = p;
                if (u) {
                        shift = 10u * (unsigned)(u - units + 1);
                        rest++;
                        if (*rest == 'i' || *rest == 'I')
                                rest++;
                }
                if (*rest == 'b' || *rest == 'B')
                        rest++;
        }
        while (isspace((unsigned char)*rest))
                rest++;
        if (*rest)
                return -EINVAL;
        *ret_shift = shift;
        return 0;
}

int size_parse(const char *text, uint64_t *ret_bytes)
{
        const char *suffix;
        unsigned shift;
        double value;
        int r;

        r = parse_number_and_suffix(text, &value, &suffix);
        if (r < 0)
                return r;
        r = suffix_shift(suffix, &shift);
        if (r < 0)
                return r;
        value = ldexp(value, (int)shift);
        if (value >= 18446744073709551616.0)
                return -ERANGE;
        *ret_bytes = (uint64_t)value;
        return 0;
}

int size_spec_parse(const char *text, gmd_size_spec *ret_spec)
{
        const char *suffix;
        double value;
        int r;

        r = parse_number_and_suffix(text, &value, &suffix);
        if (r < 0)
                return r;
        if (*suffix == '%') {
                suffix++;
                while (isspace((unsigned char)*suffix))
                        suffix++;
                if (*suffix || value <= 0 || value > 100)
                        return -EINVAL;
                ret_spec->bytes = 0;
                ret_spec->percent = value;
                return 0;
        }
        r = size_parse(text, &ret_spec->bytes);
        if (r < 0)
                return r;
        ret_spec->percent = 0;
        return 0;
}

uint64_t size_spec_resolve(const gmd_size_spec *spec, uint64_t whole)
{
        if (spec->percent > 0)
                return (uint64_t)((double)whole * spec->percent / 100.0);
        return spec->bytes;
}

char *size_format(uint64_t bytes, char *buf, size_t len)
{
        static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        double value = (double)bytes;
        unsigned u = 0;

        /* Move up a unit also when one decimal would round to 1024. */
        while (value >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
                value /= 1024.0;
                u++;
        }
        if (u == 0 && bytes < 1024)
                snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        else if (value == floor(value))
                snprintf(buf, len, "%.0f %s", value, units[u]);
        else
                snprintf(buf, len, "%.1f %s", value, units[u]);
        return buf;
}

char *size_format_exact(uint64_t bytes, char *buf, size_t len)
{
        static const char units[] = "KMGTPE";
        unsigned u = 0;

        while (bytes != 0 && bytes % 1024 == 0 && u < sizeof(units) - 1) {
                bytes /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, len, "%llu", (unsigned long long)bytes);
        else
                snprintf(buf, len, "%llu%c", (unsigned long long)bytes, units[u - 1]);
        return buf;
}
