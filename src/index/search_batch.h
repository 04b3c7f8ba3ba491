/* search_batch.h: dynamic batching of concurrent searches on one index.
 *
 * Threads that search one index at the same time queue here; while batches
 * run, the searches that arrive wait, and the next batch takes those with
 * the same k and parameters as the oldest, in order of arrival, up to the
 * backend's batch_max_queries (backend.h, the limit up to which every query
 * gets the results it would get alone).  Up to the backend's batch_lanes
 * batches run at once (1 on the CPU).  The thread that finds a batch may
 * start leads it: it copies the queries side by side, runs one search of
 * the index type, and copies each caller's rows back.  Before it starts, a batch may
 * wait up to max_wait_us after its oldest search arrived for its share of
 * the callers seen when the last batch started (the first batch: until it
 * is full); 0: no waiting, only what queued while the last batch ran is
 * combined.  Backend-independent: the CPU backend runs it too. */
#ifndef SML_SEARCH_BATCH_H
#define SML_SEARCH_BATCH_H

#include <stdint.h>

#include "simil/index.h"

struct sml_search_call;
typedef struct sml_batcher sml_batcher;

/* A batcher, off (every search runs alone) until sml_batcher_set turns it on. */
simil_status sml_batcher_create(sml_batcher **batcher);
/* No search may be in it.  NULL does nothing. */
void sml_batcher_destroy(sml_batcher *batcher);

/* The wait a batchable index starts with (simil_index_set_batching). */
#define SML_BATCH_DEFAULT_WAIT_US 100

/* Turn batching on or off and set the wait (microseconds, >= 0).  Needs the
 * index alone, as add does. */
void sml_batcher_set(sml_batcher *batcher, int enabled, int64_t max_wait_us);
int sml_batcher_enabled(const sml_batcher *batcher);
int64_t sml_batcher_wait_us(const sml_batcher *batcher);

/* index->vt->search(index, call) (host queries and results, prepared as
 * index.c prepares them), combined with the concurrent searches of the same
 * k and parameters when batching is on and call fits a batch.  The status
 * and message are the caller's own: a failed batch is retried by each of its
 * callers alone. */
simil_status sml_batcher_search(sml_batcher *batcher, const simil_index *index,
                                const struct sml_search_call *call);

/* Batches run, searches they held, and the most batches that ran at once,
 * since the batcher was created (for tests and benchmarks). */
void sml_batcher_counts(const sml_batcher *batcher, int64_t *batches, int64_t *searches,
                        int *most_at_once);

#endif
