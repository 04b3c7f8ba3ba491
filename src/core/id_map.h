/* id_map.h: a map from int64 ids to rows (open addressing, linear probing),
 * for the indexes that look vectors up by id.  With duplicate ids the first
 * row added wins. */
#ifndef SML_ID_MAP_H
#define SML_ID_MAP_H

#include <stdint.h>

#include "simil/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sml_id_map {
    int64_t *keys;  /* -1: empty */
    int64_t *rows;
    int64_t slots;  /* a power of two */
    int64_t count;
} sml_id_map;

/* Rebuild the map from ids[0..n) (row i holds ids[i]).  On failure the old
 * map is kept. */
simil_status sml_id_map_build(sml_id_map *map, int64_t n, const int64_t *ids);

/* Row of id, or -1. */
int64_t sml_id_map_find(const sml_id_map *map, int64_t id);

void sml_id_map_free(sml_id_map *map);

/* Sort n ids ascending. */
void sml_ids_sort(int64_t *ids, int64_t n);

/* 1 if id is among sorted[0..n) (ascending): the ids a remove names. */
int sml_sorted_ids_contain(const int64_t *sorted, int64_t n, int64_t id);

#ifdef __cplusplus
}
#endif
#endif
