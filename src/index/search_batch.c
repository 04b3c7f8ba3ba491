/* search_batch.c: dynamic batching of concurrent searches (search_batch.h).
 *
 * One mutex guards the queue; one condition variable wakes the waiters when a
 * batch ends or a search arrives.  A search is in one of four states:
 * queued, taken (in the batch that runs), done (its rows written, or its
 * own failure when it ran alone in its own thread), or alone (a batch with
 * it, or another thread running it, failed: it runs again by itself, so
 * that its status and message are its own).  The leader's buffers for the joined
 * queries and results are kept from batch to batch; only one batch runs at a
 * time, so only the leader touches them. */
#include "index/search_batch.h"

#include <assert.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index_internal.h"

enum { SML_QUEUED, SML_TAKEN, SML_DONE, SML_ALONE };

typedef struct sml_batch_req {
    const sml_search_call *call;
    struct sml_batch_req *next;
    struct timespec arrival;
    int state;
    simil_status status;  /* when done */
} sml_batch_req;

struct sml_batcher {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int enabled;
    int64_t max_wait_us;
    sml_batch_req *head, *tail;  /* queued, oldest first */
    int running;                 /* a batch is being searched */
    float *queries;              /* the leader's buffers */
    float *distances;
    int64_t *labels;
    size_t query_floats, result_slots, label_slots;
    int64_t batches, searches;
};

simil_status sml_batcher_create(sml_batcher **out)
{
    *out = NULL;
    sml_batcher *b;
    SML_TRY(sml_calloc((void **)&b, 1, sizeof *b, "a search batcher"));
    pthread_condattr_t attr;
    int failed = pthread_condattr_init(&attr);
    if (!failed) failed = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!failed) failed = pthread_cond_init(&b->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (!failed && pthread_mutex_init(&b->lock, NULL) != 0) {
        pthread_cond_destroy(&b->wake);
        failed = 1;
    }
    if (failed) {
        sml_free(b);
        return sml_error(SIMIL_ERR_OUT_OF_MEMORY, "could not create the locks of a search batcher");
    }
    *out = b;
    return SIMIL_OK;
}

void sml_batcher_destroy(sml_batcher *b)
{
    if (b == NULL) return;
    assert(b->head == NULL && !b->running);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
    sml_free(b->queries);
    sml_free(b->distances);
    sml_free(b->labels);
    sml_free(b);
}

void sml_batcher_set(sml_batcher *b, int enabled, int64_t max_wait_us)
{
    pthread_mutex_lock(&b->lock);
    b->enabled = enabled != 0;
    b->max_wait_us = max_wait_us;
    pthread_mutex_unlock(&b->lock);
}

int sml_batcher_enabled(const sml_batcher *b) { return b->enabled; }
int64_t sml_batcher_wait_us(const sml_batcher *b) { return b->max_wait_us; }

void sml_batcher_counts(const sml_batcher *b, int64_t *batches, int64_t *searches)
{
    pthread_mutex_lock((pthread_mutex_t *)&b->lock);
    *batches = b->batches;
    *searches = b->searches;
    pthread_mutex_unlock((pthread_mutex_t *)&b->lock);
}

/* Whether r can join a batch led by first. */
static int sml_batch_fits(const sml_batch_req *first, const sml_batch_req *r)
{
    return r->call->k == first->call->k &&
           sml_search_params_equal(&r->call->params, &first->call->params);
}

static void sml_deadline(struct timespec *t, int64_t us)
{
    t->tv_sec += (time_t)(us / 1000000);
    t->tv_nsec += (long)(us % 1000000) * 1000;
    if (t->tv_nsec >= 1000000000) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000;
    }
}

static int sml_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Queries of the searches queued that would join a batch led by the oldest. */
static int64_t sml_batch_queued(const sml_batcher *b, int64_t limit)
{
    int64_t nq = 0;
    for (const sml_batch_req *r = b->head; r != NULL; r = r->next)
        if (sml_batch_fits(b->head, r) && nq + r->call->nq <= limit) nq += r->call->nq;
    return nq;
}

/* The leader, lock held: let the oldest search wait out max_wait_us for
 * companions (unless the batch is full), then move the batch out of the
 * queue, in order, into a list; returns its first search. */
static sml_batch_req *sml_batch_take(sml_batcher *b, int64_t limit)
{
    if (b->max_wait_us > 0) {
        struct timespec until = b->head->arrival;
        sml_deadline(&until, b->max_wait_us);
        for (;;) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!sml_before(&now, &until) || sml_batch_queued(b, limit) >= limit) break;
            pthread_cond_timedwait(&b->wake, &b->lock, &until);
        }
    }
    sml_batch_req *first = b->head, *last = NULL, **link = &b->head;
    int64_t nq = 0;
    b->tail = NULL;
    for (sml_batch_req *r = b->head; r != NULL;) {
        sml_batch_req *next = r->next;
        if (sml_batch_fits(first, r) && nq + r->call->nq <= limit) {
            nq += r->call->nq;
            *link = next;  /* out of the queue, onto the batch */
            r->state = SML_TAKEN;
            r->next = NULL;
            if (last) last->next = r;
            last = r;
        } else {
            link = &r->next;
            b->tail = r;
        }
        r = next;
    }
    return first;
}

static simil_status sml_batch_grow(void **p, size_t *have, size_t need, size_t size)
{
    if (need <= *have) return SIMIL_OK;
    void *fresh;
    SML_TRY(sml_alloc(&fresh, need, size, "a batch of searches"));
    sml_free(*p);
    *p = fresh;
    *have = need;
    return SIMIL_OK;
}

/* Run the batch that starts at first (lock not held), led by the thread
 * whose search is mine; each search ends done or alone.  A search that ran
 * by itself and failed in its own thread is done, with its status: running
 * it again would hide the failure. */
static void sml_batch_run(sml_batcher *b, const simil_index *index, sml_batch_req *first,
                          const sml_batch_req *mine)
{
    simil_status s = SIMIL_OK;
    int failed_state = SML_ALONE;
    if (first->next == NULL) {
        s = index->vt->search(index, first->call);
        if (first == mine) failed_state = SML_DONE;
    } else {
        const int64_t dim = index->dim, k = first->call->k;
        sml_search_call joint = *first->call;
        joint.nq = 0;
        for (const sml_batch_req *r = first; r != NULL; r = r->next) joint.nq += r->call->nq;
        const size_t nq = (size_t)joint.nq;
        s = sml_batch_grow((void **)&b->queries, &b->query_floats, nq * (size_t)dim, sizeof(float));
        if (s == SIMIL_OK)
            s = sml_batch_grow((void **)&b->distances, &b->result_slots, nq * (size_t)k,
                               sizeof(float));
        if (s == SIMIL_OK)
            s = sml_batch_grow((void **)&b->labels, &b->label_slots, nq * (size_t)k,
                               sizeof(int64_t));
        if (s == SIMIL_OK) {
            size_t at = 0;
            for (const sml_batch_req *r = first; r != NULL; r = r->next) {
                const size_t n = (size_t)(r->call->nq * dim);
                memcpy(b->queries + at, r->call->queries, n * sizeof(float));
                at += n;
            }
            joint.queries = b->queries;
            joint.distances = b->distances;
            joint.labels = b->labels;
            s = index->vt->search(index, &joint);
        }
        if (s == SIMIL_OK) {
            size_t at = 0;
            for (const sml_batch_req *r = first; r != NULL; r = r->next) {
                const size_t n = (size_t)(r->call->nq * k);
                memcpy(r->call->distances, b->distances + at, n * sizeof(float));
                memcpy(r->call->labels, b->labels + at, n * sizeof(int64_t));
                at += n;
            }
        }
    }
    pthread_mutex_lock(&b->lock);
    b->batches++;
    for (sml_batch_req *r = first; r != NULL;) {
        sml_batch_req *next = r->next;
        r->state = s == SIMIL_OK ? SML_DONE : failed_state;
        r->status = s;
        b->searches++;
        r = next;
    }
    b->running = 0;
    pthread_cond_broadcast(&b->wake);
    pthread_mutex_unlock(&b->lock);
}

simil_status sml_batcher_search(sml_batcher *b, const simil_index *index,
                                const sml_search_call *call)
{
    const sml_backend *be = index->backend;
    pthread_mutex_lock(&b->lock);
    if (!b->enabled || call->nq > be->batch_max_queries || call->k > be->batch_max_k) {
        pthread_mutex_unlock(&b->lock);
        return index->vt->search(index, call);
    }
    sml_batch_req req = {.call = call, .state = SML_QUEUED, .status = SIMIL_OK};
    clock_gettime(CLOCK_MONOTONIC, &req.arrival);
    if (b->tail) b->tail->next = &req;
    else b->head = &req;
    b->tail = &req;
    pthread_cond_broadcast(&b->wake); /* a leader waiting for companions counts again */
    while (req.state == SML_QUEUED || req.state == SML_TAKEN) {
        if (!b->running && b->head != NULL) {
            b->running = 1;
            sml_batch_req *first = sml_batch_take(b, be->batch_max_queries);
            pthread_mutex_unlock(&b->lock);
            sml_batch_run(b, index, first, &req);
            pthread_mutex_lock(&b->lock);
        } else {
            pthread_cond_wait(&b->wake, &b->lock);
        }
    }
    const int alone = req.state == SML_ALONE;
    pthread_mutex_unlock(&b->lock);
    return alone ? index->vt->search(index, call) : req.status;
}
