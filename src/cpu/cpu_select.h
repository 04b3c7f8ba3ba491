/* cpu_select.h: k-selection on the CPU.
 *
 * An sml_topk collects (key, label) pairs and keeps the k smallest, ordered by
 * key then label.  It appends every pair that is not above its threshold into
 * a buffer of cap > k slots; when the buffer fills, a quickselect keeps the k
 * smallest and the threshold drops to the largest of them.  Each pair is
 * touched O(1) times on average, for any k, and most pairs of a long stream
 * are rejected by one comparison.  NaN keys are never admitted. */
#ifndef SML_CPU_SELECT_H
#define SML_CPU_SELECT_H

#include <stdint.h>

typedef struct sml_topk_pair {
    float key;
    int64_t label;
} sml_topk_pair;

typedef struct sml_topk {
    sml_topk_pair *buf;
    int64_t len;
    int64_t cap;
    int64_t k;
    float threshold;
} sml_topk;

/* Buffer slots a topk of k needs; storage for sml_topk_reset. */
int64_t sml_topk_capacity(int64_t k);

void sml_topk_reset(sml_topk *t, sml_topk_pair *storage, int64_t k);

/* Keep the k smallest pairs of the buffer and lower the threshold. */
void sml_topk_compact(sml_topk *t);

static inline void sml_topk_push(sml_topk *t, float key, int64_t label)
{
    if (!(key <= t->threshold)) return;
    t->buf[t->len].key = key;
    t->buf[t->len].label = label;
    if (++t->len == t->cap) sml_topk_compact(t);
}

/* Push keys[0..n) with labels labels[i], or label_base + i when labels is NULL. */
void sml_topk_push_row(sml_topk *t, const float *keys, int64_t n, const int64_t *labels,
                       int64_t label_base);

/* Push every pair another topk holds. */
void sml_topk_merge(sml_topk *t, const sml_topk *other);

/* Sort the k best and write them; ranks past what was pushed get key +inf and
 * label -1.  The topk is left compacted. */
void sml_topk_finish(sml_topk *t, float *keys, int64_t *labels);

#endif
