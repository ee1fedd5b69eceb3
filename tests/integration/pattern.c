/*
 * pattern — see pattern.h.
 */
#include "pattern.h"

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

uint64_t pattern_word(uint64_t seed, uint64_t offset)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + offset + 1;

        x ^= x >> 31;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 29;
        return x;
}

void pattern_fill_mem(void *mem, size_t size, uint64_t seed)
{
        uint64_t *p = mem;

        for (size_t i = 0; i < size / 8; i++)
                p[i] = pattern_word(seed, i);
}

void pattern_check_mem(const void *mem, size_t size, uint64_t seed,
                       const char *what)
{
        const uint64_t *p = mem;

        for (size_t i = 0; i < size / 8; i++)
                if (p[i] != pattern_word(seed, i))
                        fail_msg("%s: word %zu of %zu is %#llx, want %#llx", what,
                                 i, size / 8, (unsigned long long)p[i],
                                 (unsigned long long)pattern_word(seed, i));
}

void pattern_fill(gmd_buffer *b, uint64_t seed)
{
        pattern_fill_mem(gmd_buffer_ptr(b), gmd_buffer_size(b), seed);
}

void pattern_check(const gmd_buffer *b, uint64_t seed, const char *what)
{
        pattern_check_mem(gmd_buffer_ptr(b), gmd_buffer_size(b), seed, what);
}
