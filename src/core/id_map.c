/* id_map.c: open-addressing id -> row map (see id_map.h). */
#include "core/id_map.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

static uint64_t sml_id_hash(int64_t id)
{
    uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

simil_status sml_id_map_build(sml_id_map *map, int64_t n, const int64_t *ids)
{
    int64_t slots = 16;
    while (slots < 2 * n) slots *= 2;
    int64_t *keys, *rows;
    SML_TRY(sml_alloc((void **)&keys, (size_t)slots, sizeof *keys, "an id map"));
    simil_status s = sml_alloc((void **)&rows, (size_t)slots, sizeof *rows, "an id map");
    if (s != SIMIL_OK) {
        sml_free(keys);
        return s;
    }
    memset(keys, 0xff, sizeof *keys * (size_t)slots);
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = sml_id_hash(ids[i]) & (uint64_t)(slots - 1);
        while (keys[h] != -1 && keys[h] != ids[i]) h = (h + 1) & (uint64_t)(slots - 1);
        if (keys[h] == -1) {
            keys[h] = ids[i];
            rows[h] = i;
        }
    }
    sml_id_map_free(map);
    map->keys = keys;
    map->rows = rows;
    map->slots = slots;
    map->count = n;
    return SIMIL_OK;
}

int64_t sml_id_map_find(const sml_id_map *map, int64_t id)
{
    if (map->slots == 0 || id < 0) return -1;
    uint64_t h = sml_id_hash(id) & (uint64_t)(map->slots - 1);
    while (map->keys[h] != -1) {
        if (map->keys[h] == id) return map->rows[h];
        h = (h + 1) & (uint64_t)(map->slots - 1);
    }
    return -1;
}

void sml_id_map_free(sml_id_map *map)
{
    sml_free(map->keys);
    sml_free(map->rows);
    memset(map, 0, sizeof *map);
}

static int sml_id_cmp(const void *pa, const void *pb)
{
    const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

void sml_ids_sort(int64_t *ids, int64_t n)
{
    if (n > 1) qsort(ids, (size_t)n, sizeof *ids, sml_id_cmp);
}

int sml_sorted_ids_contain(const int64_t *sorted, int64_t n, int64_t id)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n && sorted[lo] == id;
}
