/* source.h: what the library needs to know about a source (simil/stream.h)
 * beyond its public functions. */
#ifndef SML_SOURCE_H
#define SML_SOURCE_H

#include <stdint.h>

#include "simil/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if s is a generator of docs/datasets.md: row r of s is row r + *offset of
 * the set (*kind, dimension simil_source_dim(s), *seed); else 0. */
int sml_source_generator(const simil_source *s, const char **kind, uint64_t *seed,
                         int64_t *offset);

/* 1 if s is rows of caller memory (simil_source_from_memory): row r of s is
 * at *rows + r * simil_source_dim(s); else 0. */
int sml_source_memory(const simil_source *s, const float **rows);

#ifdef __cplusplus
}
#endif
#endif
