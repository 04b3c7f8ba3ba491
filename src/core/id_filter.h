/* id_filter.h: the ids a filtered search may return (simil/search_params.h,
 * "Allowed ids").
 *
 * A filter is a bitset over ids (Faiss's IDSelectorBitmap, cuVS's bitset
 * filter) or an ascending list of ids (IDSelectorArray, searched by
 * bisection).  Scans test the label of each row they would rank and skip the
 * rows it refuses, so a filtered search is the search of the allowed rows
 * alone: Flat's top k are the true top k among them.  A NULL filter allows
 * every id and costs one comparison per scan. */
#ifndef SML_ID_FILTER_H
#define SML_ID_FILTER_H

#include <stdint.h>

typedef struct sml_id_filter {
    const uint64_t *bits;  /* host: id i allowed iff bit i % 64 of word i / 64 is set
                              (i < nbits); NULL for a list */
    int64_t nbits;
    const int64_t *ids;    /* host: ascending, no repeats, >= 0; used when bits is NULL */
    int64_t n;
    /* Nonzero: a number no other filter of the process has had, given when
     * these bytes were set (search_params.c); they never change after, so a
     * backend that keeps a copy knows it by this number alone.  0: compare
     * the bytes. */
    uint64_t stamp;
} sml_id_filter;

/* Whether f (NULL: no filter) allows id. */
static inline int sml_id_allowed(const sml_id_filter *f, int64_t id)
{
    if (f == NULL) return 1;
    if (f->bits != NULL)
        return id >= 0 && id < f->nbits && (f->bits[id >> 6] >> (id & 63) & 1);
    int64_t lo = 0, hi = f->n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (f->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->n && f->ids[lo] == id;
}

/* Rows a CPU scan takes the filter over at a time (sml_allowed_rows). */
enum { SML_ALLOWED_CHUNK = 64 };

/* The rows of [first, min(first + SML_ALLOWED_CHUNK, end)) whose labels
 * ids[row] f allows, ascending into pick; returns their count.  Every row is
 * written and the count advanced by the test's value, with no branch per
 * row: a scan that branched on each row's test mispredicted about half of
 * them under a filter allowing half the ids at random, which made IVF-PQ's
 * CPU scan slower filtered than not (docs/benchmarks.md). */
static inline int sml_allowed_rows(const sml_id_filter *f, const int64_t *ids, int64_t first,
                                   int64_t end, int64_t *pick)
{
    const int n = end - first < SML_ALLOWED_CHUNK ? (int)(end - first) : SML_ALLOWED_CHUNK;
    int np = 0;
    for (int j = 0; j < n; j++) {
        pick[np] = first + j;
        np += sml_id_allowed(f, ids[first + j]);
    }
    return np;
}

#endif
