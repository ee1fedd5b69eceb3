/*
 * utf8 — the one UTF-8 check text writers share (gpu-memctl's JSON, the
 * metrics page's label values): client-chosen names pass through them, and
 * a malformed sequence must become U+FFFD, not break the format.
 */
#ifndef GMD_UTF8_H
#define GMD_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at `s` (which starts with a byte
 * >= 0x80), or 0 if it is not one: no overlongs, surrogates or code points
 * above U+10FFFF (RFC 3629). Reads no further than a byte that ends it. */
size_t utf8_valid_length(const unsigned char *s);

#endif
