/* cpu_select.c: buffered quickselect top-k (see cpu_select.h). */
#include "cpu/cpu_select.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static inline int sml_pair_less(const sml_topk_pair *a, const sml_topk_pair *b)
{
    return a->key < b->key || (a->key == b->key && a->label < b->label);
}

static inline void sml_pair_swap(sml_topk_pair *a, sml_topk_pair *b)
{
    sml_topk_pair t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange a[0..n) so that a[0..k) holds the k smallest pairs (any order).
 * Hoare partition around a median of three; equal pairs stop both scans, so
 * runs of duplicates still split evenly. */
static void sml_pairs_select(sml_topk_pair *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (hi > lo) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sml_pair_less(&a[mid], &a[lo])) sml_pair_swap(&a[mid], &a[lo]);
        if (sml_pair_less(&a[hi], &a[lo])) sml_pair_swap(&a[hi], &a[lo]);
        if (sml_pair_less(&a[hi], &a[mid])) sml_pair_swap(&a[hi], &a[mid]);
        sml_topk_pair pivot = a[mid];
        int64_t i = lo - 1, j = hi + 1;
        for (;;) {
            do i++; while (sml_pair_less(&a[i], &pivot));
            do j--; while (sml_pair_less(&pivot, &a[j]));
            if (i >= j) break;
            sml_pair_swap(&a[i], &a[j]);
        }
        /* a[lo..j] <= pivot <= a[j+1..hi] */
        if (k - 1 <= j) {
            hi = j;
        } else {
            lo = j + 1;
        }
    }
}

int64_t sml_topk_capacity(int64_t k) { return k + (k > 256 ? k : 256); }

void sml_topk_reset(sml_topk *t, sml_topk_pair *storage, int64_t k)
{
    t->buf = storage;
    t->len = 0;
    t->k = k;
    t->cap = sml_topk_capacity(k);
    t->threshold = INFINITY;
}

void sml_topk_compact(sml_topk *t)
{
    if (t->len <= t->k) return;
    sml_pairs_select(t->buf, t->len, t->k);
    t->len = t->k;
    float worst = t->buf[0].key;
    for (int64_t i = 1; i < t->k; i++)
        if (t->buf[i].key > worst) worst = t->buf[i].key;
    t->threshold = worst;
}

/* k = 1: only the row's smallest pair can be kept.  Pushing the whole row
 * would fill the buffer and pay a quickselect per short row: with rows of
 * 256 centroids (k-means, PQ training) that was most of building an
 * IVF256,PQ16 index (docs/benchmarks.md, "Tried and dropped"). */
static void sml_topk_push_row_min(sml_topk *t, const float *keys, int64_t n,
                                  const int64_t *labels, int64_t label_base)
{
    /* the smallest key (a vectorized pass; NaN never wins a comparison), then
     * the smallest label that carries it */
    float least = INFINITY;
#pragma omp simd reduction(min : least)
    for (int64_t i = 0; i < n; i++) least = keys[i] < least ? keys[i] : least;
    if (!(least <= t->threshold)) return;
    int64_t first = 0;
    while (first < n && !(keys[first] == least)) first++;
    if (first == n) return; /* every key NaN */
    int64_t label = labels ? labels[first] : label_base + first;
    if (labels) {
        /* ties are rare: count them (vectorized) before looking for their labels */
        int ties = 0;
#pragma omp simd reduction(+ : ties)
        for (int64_t i = first + 1; i < n; i++) ties += keys[i] == least;
        for (int64_t i = first + 1; ties > 0 && i < n; i++)
            if (keys[i] == least) {
                ties--;
                if (labels[i] < label) label = labels[i];
            }
    }
    sml_topk_push(t, least, label);
}

void sml_topk_push_row(sml_topk *t, const float *keys, int64_t n, const int64_t *labels,
                       int64_t label_base)
{
    if (t->k == 1) {
        sml_topk_push_row_min(t, keys, n, labels, label_base);
        return;
    }
    float threshold = t->threshold;
    for (int64_t i = 0; i < n; i++) {
        if (keys[i] <= threshold) {
            sml_topk_push(t, keys[i], labels ? labels[i] : label_base + i);
            threshold = t->threshold;
        }
    }
}

void sml_topk_merge(sml_topk *t, const sml_topk *other)
{
    for (int64_t i = 0; i < other->len; i++)
        sml_topk_push(t, other->buf[i].key, other->buf[i].label);
}

static int sml_pair_cmp(const void *pa, const void *pb)
{
    const sml_topk_pair *a = pa, *b = pb;
    if (sml_pair_less(a, b)) return -1;
    return sml_pair_less(b, a);
}

void sml_topk_finish(sml_topk *t, float *keys, int64_t *labels)
{
    sml_topk_compact(t);
    qsort(t->buf, (size_t)t->len, sizeof *t->buf, sml_pair_cmp);
    for (int64_t i = 0; i < t->k; i++) {
        if (i < t->len) {
            keys[i] = t->buf[i].key;
            labels[i] = t->buf[i].label;
        } else {
            keys[i] = INFINITY;
            labels[i] = -1;
        }
    }
}
