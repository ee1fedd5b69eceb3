/*
 * size — sizes as people write them ("512M", "1.5G", "80%") and as they read
 * them ("1.5 GiB"). Shared by gpu-memd (options and config), libgpumem and
 * gpu-memctl. Suffixes are binary (K = 1024) and case-insensitive; an
 * optional trailing "B" or "iB" is accepted ("4GiB").
 */
#ifndef GMD_SIZE_H
#define GMD_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* A size that may be relative: either bytes or a percentage of something
 * the reader decides (a device's memory, the machine's RAM). */
typedef struct gmd_size_spec {
        uint64_t bytes;
        double percent;     /* > 0 when given as "N%" */
} gmd_size_spec;

/* Parse an absolute size. 0, or -EINVAL (not a size) / -ERANGE (> 2^64). */
int size_parse(const char *text, uint64_t *ret_bytes);

/* Parse a size or a percentage (0 < N <= 100). */
int size_spec_parse(const char *text, gmd_size_spec *ret_spec);

/* Bytes a spec means against `whole` (the 100%). */
uint64_t size_spec_resolve(const gmd_size_spec *spec, uint64_t whole);

/* "1.5 GiB", "512 MiB", "4 KiB", "17 B". Returns buf. */
char *size_format(uint64_t bytes, char *buf, size_t len);

/* "512M", "3G", "1536K" or plain bytes: the exact value, as a config file
 * would hold it (parses back to the same number). Returns buf. */
char *size_format_exact(uint64_t bytes, char *buf, size_t len);

#endif
