/*
 * pattern — the word patterns integration tests write into buffers before a
 * move and check word by word after it: a seed gives every 8-byte word its
 * own value, so a misplaced, stale or missing stretch shows up at once.
 */
#ifndef GMD_TEST_PATTERN_H
#define GMD_TEST_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#include "gpumem.h"

/* The word at index `offset` of the pattern `seed`. */
uint64_t pattern_word(uint64_t seed, uint64_t offset);

void pattern_fill_mem(void *mem, size_t size, uint64_t seed);
/* Every word; fails the running cmocka test at the first wrong one. */
void pattern_check_mem(const void *mem, size_t size, uint64_t seed,
                       const char *what);

/* The same over a whole buffer. */
void pattern_fill(gmd_buffer *b, uint64_t seed);
void pattern_check(const gmd_buffer *b, uint64_t seed, const char *what);

#endif
