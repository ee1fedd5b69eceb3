/*
 * idmap — a hash map from 64-bit ids to pointers, open addressing with
 * linear probing and backward-shift deletion (no tombstones). Buffer ids are
 * looked up on every request a client sends, and a client may hold tens of
 * thousands of buffers, so a list walk would not do.
 */
#ifndef GMD_IDMAP_H
#define GMD_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gmd_idmap_slot {
        uint64_t key;   /* 0 = empty; ids start at 1 */
        void *value;
} gmd_idmap_slot;

typedef struct gmd_idmap {
        gmd_idmap_slot *slots;
        size_t capacity;    /* power of two, or 0 */
        size_t count;
} gmd_idmap;

void idmap_init(gmd_idmap *map);
void idmap_clear(gmd_idmap *map);

/* Insert `key` (nonzero, not present). 0 or -ENOMEM. */
int idmap_put(gmd_idmap *map, uint64_t key, void *value);

/* NULL when absent. */
void *idmap_get(const gmd_idmap *map, uint64_t key);

/* Remove and return the value, NULL when absent. */
void *idmap_remove(gmd_idmap *map, uint64_t key);

#endif
