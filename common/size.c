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

static int parse_number_and_suffix(const char *text, double *ret_value,
                                   const char **ret_suffix)
{
        char *end;
        double value;

        if (!text)
                return -EINVAL;
        while (isspace((unsigned char)*text))
                text++;
        /* strtod accepts "inf", "nan", hex and signs; sizes are plain
         * non-negative decimals. */
        if (!isdigit((unsigned char)*text) && *text != '.')
                return -EINVAL;
        errno = 0;
        value = strtod(text, &end);
        if (end == text || errno == ERANGE || !isfinite(value) || value < 0)
                return -EINVAL;
        while (isspace((unsigned char)*end))
                end++;
        *ret_value = value;
        *ret_suffix = end;
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

        while (value >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
                value /= 1024.0;
                u++;
        }
        if (u == 0)
                snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        else if (value == floor(value))
                snprintf(buf, len, "%.0f %s", value, units[u]);
        else
                snprintf(buf, len, "%.1f %s", value, units[u]);
        return buf;
}
