/*
 * idmap — see idmap.h. The table doubles at 3/4 full; removal shifts the
 * following run back so lookups never meet a hole inside a run.
 */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(const gmd_idmap *map, uint64_t key)
{
        /* Fibonacci hashing spreads sequential ids over the table. */
        return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (map->capacity - 1);
}

void idmap_init(gmd_idmap *map)
{
        map->slots = NULL;
        map->capacity = 0;
        map->count = 0;
}

void idmap_clear(gmd_idmap *map)
{
        free(map->slots);
        idmap_init(map);
}

static int idmap_grow(gmd_idmap *map)
{
        gmd_idmap bigger = { .capacity = map->capacity ? map->capacity * 2 : 16 };

        bigger.slots = calloc(bigger.capacity, sizeof(*bigger.slots));
        if (!bigger.slots)
                return -ENOMEM;
        for (size_t i = 0; i < map->capacity; i++) {
                gmd_idmap_slot *s = &map->slots[i];

                if (s->key) {
                        size_t j = slot_of(&bigger, s->key);

                        while (bigger.slots[j].key)
                                j = (j + 1) & (bigger.capacity - 1);
                        bigger.slots[j] = *s;
                        bigger.count++;
                }
        }
        free(map->slots);
        *map = bigger;
        return 0;
}

int idmap_put(gmd_idmap *map, uint64_t key, void *value)
{
        size_t i;

        if (key == 0)
                return -EINVAL;
        if ((map->count + 1) * 4 > map->capacity * 3) {
                int r = idmap_grow(map);

                if (r < 0)
                        return r;
        }
        i = slot_of(map, key);
        while (map->slots[i].key) {
                if (map->slots[i].key == key)
                        return -EEXIST;
                i = (i + 1) & (map->capacity - 1);
        }
        map->slots[i].key = key;
        map->slots[i].value = value;
        map->count++;
        return 0;
}

static gmd_idmap_slot *idmap_find(const gmd_idmap *map, uint64_t key)
{
        size_t i;

        if (!map->capacity || key == 0)
                return NULL;
        i = slot_of(map, key);
        while (map->slots[i].key) {
                if (map->slots[i].key == key)
                        return &map->slots[i];
                i = (i + 1) & (map->capacity - 1);
        }
        return NULL;
}

void *idmap_get(const gmd_idmap *map, uint64_t key)
{
        gmd_idmap_slot *s = idmap_find(map, key);

        return s ? s->value : NULL;
}

void *idmap_remove(gmd_idmap *map, uint64_t key)
{
        gmd_idmap_slot *s = idmap_find(map, key);
        size_t mask = map->capacity - 1, hole, i;
        void *value;

        if (!s)
                return NULL;
        value = s->value;
        hole = (size_t)(s - map->slots);
        i = hole;
        for (;;) {
                size_t home;

                i = (i + 1) & mask;
                if (!map->slots[i].key)
                        break;
                home = slot_of(map, map->slots[i].key);
                /* Move the entry back if its home is not in (hole, i]. */
                if (((i - home) & mask) >= ((i - hole) & mask)) {
                        map->slots[hole] = map->slots[i];
                        hole = i;
                }
        }
        map->slots[hole].key = 0;
        map->slots[hole].value = NULL;
        map->count--;
        return value;
}
